"""Static stability of the node agent with real processes and a real control-plane outage.

The test runs an API server of its own, on a database of its own, so it can stop that server
and start it again without disturbing other tests. An agent (process runtime, no cgroups)
runs three pods bound to its node: two long sleepers and one container that exits 1 after
about a second (all ``restartPolicy: Always``). With the API server stopped, the sleepers keep
their processes and the crashing container is restarted in place. Meanwhile one sleeper's pod
is deleted straight from the database, which the agent cannot see while the API is away: it
must keep that process too. Once the API server is back on the same port and database, the
agent relists its assignments and stops the pod that is no longer assigned to it, while the
others carry on. A fourth pod is at-most-one: its agent, cut off from its lease, kills it 30 s
after the last successful renewal (20 to 30 s into the outage, the lease being renewed every
10 s) and does not start it again.

The outage lasts a minute, as a control-plane upgrade or failover might.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from agents import make_agent
from psycopg.conninfo import conninfo_to_dict

from agent.api import NAMESPACE, POD, AgentApi
from agent.backoff import CrashLoopBackoff
from agent.loop import Agent
from agent.runtime import Running
from agent.runtime.process import ProcessRuntime
from app.devstack.apiserver import ApiServer
from app.devstack.postgres import drop_database
from app.devstack.supervise import free_port

pytestmark = pytest.mark.slow

Obj = dict[str, Any]
SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]
CRASH = [sys.executable, "-c", "import sys, time; time.sleep(1); sys.exit(1)"]
REPO_ROOT = Path(__file__).resolve().parents[2]
OUTAGE_SECONDS = 60.0
RELIST_BOUND = 15.0  # the source's backoff is capped at 10 s (x1.2 jitter), the lease pokes it


@dataclass
class Own:
    """An API server and database of this test's own."""

    server: ApiServer
    db_url: str


@pytest.fixture
def own_api(
    pg_server_url: str,
    make_database: Callable[[str], str],
    redis_url: str,
    tmp_path: Path,
) -> Iterator[Own]:
    db_url = make_database("qm_static")
    port = free_port()
    token = secrets.token_urlsafe(32)
    env = {
        **os.environ,
        "DATABASE_URL": db_url,
        "QM_STREAM_DATABASE_URL": db_url,
        "QM_BROKER_URL": redis_url,
        "QM_BOOTSTRAP_TOKEN": token,
        "QM_API_PORT": str(port),
        "QM_API_URL": f"http://127.0.0.1:{port}",
        "PYTHONUNBUFFERED": "1",
    }
    server = ApiServer(port, token, env, tmp_path / "api.log", cwd=REPO_ROOT)
    try:
        server.start(timeout=30.0)
        yield Own(server, db_url)
    finally:
        server.stop()
        drop_database(pg_server_url, str(conninfo_to_dict(db_url)["dbname"]))


@dataclass
class Node:
    agent: Agent
    api: AgentApi
    name: str
    namespace: str

    def create(self, name: str, command: list[str], *, at_most_one: bool = False) -> str:
        body = {
            "metadata": {"name": name},
            "spec": {
                "nodeName": self.name,
                "atMostOne": at_most_one,
                "restartPolicy": "Always",
                "terminationGracePeriodSeconds": 2,
                "containers": [{"name": "c", "image": "local", "command": command}],
            },
        }
        return str(self.api.create(POD, self.namespace, body)["metadata"]["uid"])

    def get(self, name: str) -> Obj:
        return self.api.get(POD, self.namespace, name)


@pytest.fixture
async def node(own_api: Own, tmp_path: Path) -> AsyncIterator[Node]:
    server = own_api.server
    api = AgentApi(server.url, server.token)
    name = f"static-{secrets.token_hex(3)}"
    ns = f"static-{secrets.token_hex(3)}"
    api.create(NAMESPACE, None, {"metadata": {"name": ns}})
    backoff = CrashLoopBackoff(initial=0.5, cap=2.0)
    agent = make_agent(api, ProcessRuntime(tmp_path / "pods", None), name, backoff=backoff)
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        yield Node(agent, api, name, ns)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        assert agent.runtime.containers() == []  # the agent stopped every process it started
        api.close()


async def wait_for(check: Callable[[], bool], timeout: float, what: str) -> float:
    """Wait until ``check()`` holds; the seconds it took."""
    start = time.monotonic()
    while not await asyncio.to_thread(check):
        assert time.monotonic() - start < timeout, f"{what}: not within {timeout:g} s"
        await asyncio.sleep(0.1)
    return time.monotonic() - start


def pid_of(agent: Agent, uid: str) -> int | None:
    state = agent.runtime.state(uid, "c")
    return state.pid if isinstance(state, Running) else None


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def restarts_seen(agent: Agent, uid: str) -> int:
    """The crash restarts of the pod's container in the agent's own view."""
    worker = agent.workers.get(uid)
    return -1 if worker is None else worker.boxes[0].view.restart_count


def delete_row(db_url: str, uid: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as db:
        deleted = db.execute("DELETE FROM pods WHERE uid = %s", (uid,)).rowcount
    assert deleted == 1


async def test_pods_outlive_the_control_plane_and_unassigned_ones_stop_on_reconnect(
    own_api: Own, node: Node
) -> None:
    agent, server = node.agent, own_api.server
    keeper = node.create("keeper", SLEEP)
    moved = node.create("moved", SLEEP)
    crasher = node.create("crasher", CRASH)
    single = node.create("single", SLEEP, at_most_one=True)

    await wait_for(
        lambda: all(pid_of(agent, u) for u in (keeper, moved, single)), 15, "sleepers started"
    )
    await wait_for(lambda: restarts_seen(agent, crasher) >= 1, 15, "crasher restarted")
    await wait_for(
        lambda: node.get("keeper")["status"].get("phase") == "Running", 15, "status written"
    )
    keeper_pid, moved_pid, single_pid = (pid_of(agent, u) for u in (keeper, moved, single))
    assert keeper_pid is not None and moved_pid is not None and single_pid is not None

    # -- the control plane goes away ----------------------------------------------------------
    await asyncio.to_thread(server.stop)
    assert server.pid is None
    outage_start = time.monotonic()
    restarts_before = restarts_seen(agent, crasher)
    crasher_pids: set[int] = set()
    single_died: float | None = None
    await asyncio.to_thread(delete_row, own_api.db_url, moved)  # unseen while the API is away
    while (elapsed := time.monotonic() - outage_start) < OUTAGE_SECONDS:
        assert alive(keeper_pid) and pid_of(agent, keeper) == keeper_pid
        assert alive(moved_pid) and pid_of(agent, moved) == moved_pid
        if (pid := pid_of(agent, crasher)) is not None:
            crasher_pids.add(pid)
        if single_died is None and not alive(single_pid):
            single_died = elapsed
        if single_died is not None:
            assert pid_of(agent, single) is None, "an at-most-one pod was started again"
        await asyncio.sleep(0.2)
    assert single_died is not None, "the at-most-one pod outlived its lease"
    assert 19.5 <= single_died <= 32.0, f"at-most-one pod killed {single_died:.1f} s in"
    restarts_during = restarts_seen(agent, crasher) - restarts_before
    assert restarts_during >= 1, "the crashing container was not restarted during the outage"
    assert len(crasher_pids) >= 2, f"one crasher process only: {crasher_pids}"
    assert moved in agent.workers  # the agent cannot know yet that the pod went

    # -- it comes back: the agent relists and stops what is no longer assigned ----------------
    await asyncio.to_thread(server.start, 30.0)
    back = time.monotonic()
    took = await wait_for(lambda: not alive(moved_pid), RELIST_BOUND, "unassigned pod stopped")
    await wait_for(lambda: moved not in agent.workers, 5, "unassigned worker gone")
    assert agent.runtime.containers(moved) == []
    assert alive(keeper_pid) and pid_of(agent, keeper) == keeper_pid
    assert restarts_seen(agent, crasher) >= restarts_before + restarts_during
    seen = restarts_seen(agent, crasher)

    def written() -> bool:
        statuses = node.get("crasher")["status"].get("containerStatuses") or []
        return bool(statuses) and statuses[0]["restartCount"] >= seen

    await wait_for(written, 15, "restart count written after reconnect")
    print(
        f"outage {back - outage_start:.1f} s, crasher restarted {restarts_during}x during it;"
        f" at-most-one pod killed {single_died:.1f} s in;"
        f" unassigned pod stopped {took:.1f} s after the API was back"
    )
