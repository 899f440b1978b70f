"""A real agent lays a pod's Secret volume out on memory, readable only by the pod, and never
puts a Secret's value on a command line (ADR 0048), against a real API server."""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import secrets
import stat
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from agents import make_agent

from agent.api import NAMESPACE, POD, AgentApi
from agent.loop import Agent
from agent.runtime.process import ProcessRuntime
from agent.runtime.secret_volume import DIR, fs_type
from app.core.errors import NotFound
from app.core.kinds import BY_KIND
from app.devstack.apiserver import ApiServer

Obj = dict[str, Any]
MARK = f"MARKER-{secrets.token_hex(6)}"
# The process checks what it can read, and prints only the verdict (never the value).
CHECK = (
    "import os, pathlib, time; p = pathlib.Path('creds/password');"
    f" ok = p.read_text() == {MARK!r} and os.environ['PW'] == {MARK!r};"
    " print('secret-ok' if ok else 'secret-wrong', flush=True); time.sleep(60)"
)


@dataclass
class Node:
    agent: Agent
    api: AgentApi
    namespace: str
    name: str


async def wait_for(check: Callable[[], bool], timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await asyncio.to_thread(check):
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.1)


@pytest.fixture
async def node(
    api_server: ApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> AsyncIterator[Node]:
    caplog.set_level(logging.DEBUG)
    api = AgentApi(api_server.url, api_server.token, ca_file=api_server.ca_file)
    ns = f"secvol-{secrets.token_hex(3)}"
    api.create(NAMESPACE, None, {"metadata": {"name": ns}})
    api.create(BY_KIND["Secret"], ns, {"metadata": {"name": "db"},
               "data": {"password": base64.b64encode(MARK.encode()).decode()}})  # fmt: skip
    name = f"secvol-{ns[-6:]}"
    agent = make_agent(api, ProcessRuntime(tmp_path / "pods", None), name)
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        yield Node(agent, api, ns, name)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        api.close()
    assert MARK not in caplog.text, "the agent logged a Secret's value"


def pod(node: Node, name: str, command: list[str]) -> Obj:
    return {
        "metadata": {"name": name},
        "spec": {
            "nodeName": node.name,
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "c", "image": "local", "command": command,
                "env": [{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db",
                                                                      "key": "password"}}}],
                "volumeMounts": [{"name": "creds", "mountPath": "/creds"}],
            }],
            "volumes": [{"name": "creds", "secret": {"secretName": "db"}}],
        },
    }  # fmt: skip


def mounted(path: Path) -> bool:
    return f" {path} " in Path("/proc/self/mountinfo").read_text()


async def test_secret_volume_on_tmpfs_readable_only_by_the_pod(node: Node) -> None:
    agent, api, ns = node.agent, node.api, node.namespace
    uid = api.create(POD, ns, pod(node, "reader", [sys.executable, "-c", CHECK]))["metadata"]["uid"]
    runtime = agent.runtime
    assert isinstance(runtime, ProcessRuntime)
    log = runtime.log_path(uid, "c")
    await wait_for(lambda: log.exists() and "secret-" in log.read_text())
    assert log.read_text().strip() == "secret-ok"

    pod_dir = runtime.pod_dir(uid)
    link, store = pod_dir / "creds" / "password", pod_dir / DIR
    assert link.is_symlink() and not os.readlink(link).startswith("/")
    real = link.resolve()
    assert real.is_relative_to(store.resolve())
    assert fs_type(real) == "tmpfs"
    if os.geteuid() == 0:
        assert os.path.ismount(store)  # a tmpfs of the pod's own
    st = real.stat()
    assert stat.S_IMODE(st.st_mode) == 0o400 and st.st_uid == os.geteuid()
    assert stat.S_IMODE(store.resolve().stat().st_mode) == 0o500
    assert stat.S_IMODE(real.parent.stat().st_mode) == 0o500
    # Nowhere on the pod directory's own disk: only the link is there.
    on_disk = [p for p in pod_dir.rglob("*") if p.is_file() and not p.is_symlink()
               and DIR not in p.relative_to(pod_dir).parts]  # fmt: skip
    assert all(MARK.encode() not in p.read_bytes() for p in on_disk)

    api.delete(POD, ns, "reader", grace_seconds=0)

    def gone() -> bool:
        try:
            api.get(POD, ns, "reader")
        except NotFound:
            return True
        return False

    await wait_for(gone)
    await wait_for(lambda: not pod_dir.exists())
    assert not mounted(store)


async def test_a_secret_is_never_expanded_into_the_command_line(node: Node) -> None:
    api, ns = node.api, node.namespace
    api.create(POD, ns, pod(node, "leaky", ["/bin/echo", "--password=$(PW)"]))

    def waiting() -> Obj | None:
        statuses = (api.get(POD, ns, "leaky").get("status") or {}).get("containerStatuses")
        state = (statuses or [{}])[0].get("state") or {}
        return state.get("waiting") if "CreateContainerConfigError" in str(state) else None

    await wait_for(lambda: waiting() is not None)
    message = (waiting() or {}).get("message", "")
    assert "$(PW) holds a Secret's value" in message and MARK not in message
    events = api.list(BY_KIND["Event"], ns)["items"]
    assert all(MARK not in str(e) for e in events)
