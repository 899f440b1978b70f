"""The runc runtime with real runc, real overlay mounts and real cgroups: the runtime alone,
then a whole agent with it against a real API server.

The image is a busybox root filesystem laid out per test from the host's static busybox
(Debian's `busybox-static`, which `make deps` installs). Cgroups live under a parent named
per test at the hierarchy roots (runc needs one path in every hierarchy); every test checks on
the way out that no runc container, cgroup, bundle or mount is left.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import capability
import pytest
from agents import make_agent

from agent.api import NAMESPACE, POD, AgentApi
from agent.runtime.base import ContainerSpec, Resources, Running, StartError, Terminated
from agent.runtime.cgroups import Cgroups, CgroupsUnavailable, detect
from agent.runtime.oci import ImageError
from agent.runtime.runc import RUNC, RuncRuntime
from app.core.errors import NotFound
from app.devstack.apiserver import ApiServer

BUSYBOX = Path("/bin/busybox")
IMAGE = "busybox:1"
MiB = 2**20


def host_skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "runc runs containers only as root here"
    if not Path(RUNC).exists():
        return f"runc is not installed at {RUNC} (make deps installs it)"
    if not BUSYBOX.exists():
        return "no /bin/busybox for the test image (make deps installs busybox-static)"
    return None


def make_busybox_image(images_dir: Path, ref: str = IMAGE) -> Path:
    """`<images>/<name>/<tag>/rootfs` with a static busybox and a link per applet."""
    name, tag = ref.split(":")
    rootfs = images_dir / name / tag / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    shutil.copy2(BUSYBOX, rootfs / "bin" / "busybox")
    applets = subprocess.run([str(BUSYBOX), "--list"], capture_output=True, text=True).stdout
    for applet in applets.split():
        if applet != "busybox":
            (rootfs / "bin" / applet).symlink_to("busybox")
    for directory in ("etc", "tmp", "proc", "dev", "sys"):
        (rootfs / directory).mkdir()
    return rootfs


@pytest.fixture
def cgroups() -> Iterator[Cgroups]:
    if reason := host_skip_reason():
        capability.missing(reason)
    parent = f"qm-test-runc-{secrets.token_hex(4)}"
    try:
        found = detect(parent)
    except CgroupsUnavailable as exc:
        capability.missing(f"this host gives no writable memory/cpu cgroups: {exc}")
    yield found
    found.remove("")


@pytest.fixture
async def runtime(tmp_path: Path, cgroups: Cgroups) -> AsyncIterator[RuncRuntime]:
    make_busybox_image(tmp_path / "images")
    rt = RuncRuntime(tmp_path / "state", cgroups, images_dir=tmp_path / "images")
    yield rt
    pods = {uid for uid, _ in rt.containers()}
    for pod in pods:
        await rt.cleanup(pod)
    assert_nothing_left(rt, pods)
    rt.close()
    assert not any(d.exists() for d in rt.hierarchy_dirs(""))


def runc_ids(rt: RuncRuntime) -> list[str]:
    out = subprocess.run(
        [RUNC, "--root", str(rt.runc_root), "list", "-q"], capture_output=True, text=True
    )
    return out.stdout.split()


def assert_nothing_left(rt: RuncRuntime, pods: set[str]) -> None:
    assert rt.containers() == []
    assert runc_ids(rt) == []
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(rt.state_dir) not in mounts
    for pod in pods:
        assert not rt.bundles_dir(pod).exists()
        assert not rt.pod_dir(pod).exists()
        leftovers = [d for d in rt.hierarchy_dirs(f"pod{pod}") if d.exists()]
        assert leftovers == []


def spec(
    name: str,
    *command: str,
    pod: str = "p1",
    files: dict[str, bytes] | None = None,
    resources: Resources | None = None,
    image: str = IMAGE,
) -> ContainerSpec:
    return ContainerSpec(
        pod, name, list(command), {"GREETING": "hi"}, files or {}, resources or Resources(), image
    )


def sh(name: str, script: str, **kwargs: object) -> ContainerSpec:
    return spec(name, "sh", "-c", script, **kwargs)  # type: ignore[arg-type]


async def terminated(rt: RuncRuntime, pod: str, name: str, timeout: float = 10) -> Terminated:
    deadline = time.monotonic() + timeout
    while not isinstance(state := rt.state(pod, name), Terminated):
        assert time.monotonic() < deadline, f"{name} still {state}"
        await asyncio.sleep(0.02)
    return state


async def logged(rt: RuncRuntime, pod: str, name: str, text: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while text not in rt.log_path(pod, name).read_text():
        assert time.monotonic() < deadline, f"{text!r} never logged by {name}"
        await asyncio.sleep(0.02)


async def test_exit_zero_completes_with_env_pod_files_and_output_in_the_log(
    runtime: RuncRuntime,
) -> None:
    files = {"conf/app.txt": b"from a config map"}
    script = 'echo "$GREETING $(cat conf/app.txt)"; echo to-stderr >&2; pwd; hostname; echo $$'
    running = await runtime.start(sh("app", script, files=files))
    assert running.pid > 0
    state = await terminated(runtime, "p1", "app")
    assert (state.exit_code, state.reason, state.signal) == (0, "Completed", None)
    log = runtime.log_path("p1", "app").read_text().split()
    # env and the pod's files reach the container; it runs as pid 1 of its own namespace
    assert log[:7] == ["hi", "from", "a", "config", "map", "to-stderr", "/var/run/quaymaster/pod"]
    assert log[7:] == ["app", "1"]


async def test_nonzero_exit_is_an_error_and_a_restart_is_a_new_run(runtime: RuncRuntime) -> None:
    await runtime.start(sh("app", "echo run; exit 3"))
    first = runtime.container_id("p1", "app")
    state = await terminated(runtime, "p1", "app")
    assert (state.exit_code, state.reason, state.signal) == (3, "Error", None)
    await runtime.start(sh("app", "echo run; exit 3"))
    assert runtime.container_id("p1", "app") != first
    await terminated(runtime, "p1", "app")
    assert runtime.log_path("p1", "app").read_text() == "run\n"  # the earlier run: previous
    assert (runtime.pod_dir("p1") / "app.previous.log").read_text() == "run\n"


async def test_writes_go_to_the_run_not_to_the_image(runtime: RuncRuntime, tmp_path: Path) -> None:
    await runtime.start(sh("app", "echo scribble > /etc/written; cat /etc/written"))
    assert (await terminated(runtime, "p1", "app")).exit_code == 0
    assert "scribble" in runtime.log_path("p1", "app").read_text()
    assert not (tmp_path / "images" / "busybox" / "1" / "rootfs" / "etc" / "written").exists()


async def test_stop_sends_term_waits_the_grace_period_then_kills(runtime: RuncRuntime) -> None:
    script = "trap 'echo got TERM' TERM; echo ready; while true; do sleep 0.1 & wait $!; done"
    await runtime.start(sh("stubborn", script))
    await logged(runtime, "p1", "stubborn", "ready")
    began = time.monotonic()
    state = await runtime.stop("p1", "stubborn", grace_seconds=1.0)
    assert time.monotonic() - began >= 1.0
    assert state is not None and (state.exit_code, state.signal) == (137, 9)
    assert state.reason == "Error"  # a SIGKILL after the grace period is no OOM kill
    assert runtime.log_path("p1", "stubborn").read_text().split() == ["ready", "got", "TERM"]


async def test_a_restarted_agents_runtime_adopts_a_run_and_still_gets_its_exit(
    runtime: RuncRuntime, tmp_path: Path, cgroups: Cgroups
) -> None:
    script = "trap 'exit 7' TERM; echo ready; while true; do sleep 0.1 & wait $!; done"
    first = await runtime.start(sh("kept", script))
    await logged(runtime, "p1", "kept", "ready")
    later = RuncRuntime(tmp_path / "state", cgroups, images_dir=tmp_path / "images")
    assert later.adopt() == [("p1", "kept")]
    state = later.state("p1", "kept")
    assert isinstance(state, Running) and state.pid == first.pid
    assert later.container_id("p1", "kept") == runtime.container_id("p1", "kept")
    ended = await later.stop("p1", "kept", grace_seconds=5.0)
    assert ended is not None and (ended.exit_code, ended.reason) == (7, "Error")  # not lost
    await later.cleanup("p1")
    assert_nothing_left(later, {"p1"})
    assert isinstance(runtime.state("p1", "kept"), Terminated)  # the first runtime sees it end


async def test_a_container_that_honours_term_ends_within_the_grace_period(
    runtime: RuncRuntime,
) -> None:
    script = "trap 'echo bye; exit 7' TERM; echo ready; while true; do sleep 0.1 & wait $!; done"
    await runtime.start(sh("polite", script))
    await logged(runtime, "p1", "polite", "ready")
    began = time.monotonic()
    state = await runtime.stop("p1", "polite", grace_seconds=10.0)
    assert time.monotonic() - began < 5
    assert state is not None and (state.exit_code, state.reason, state.signal) == (7, "Error", None)


async def test_a_memory_hog_is_oom_killed_alone_and_its_sibling_runs_on(
    runtime: RuncRuntime,
) -> None:
    limit = Resources(memory_limit_bytes=32 * MiB)
    await runtime.start(sh("sibling", "echo up; while true; do sleep 0.1; done", resources=limit))
    # dd allocates its whole block before it reads: 256 MiB in a 32 MiB cgroup
    hog = spec("hog", "dd", "if=/dev/zero", "of=/dev/null", "bs=256M", resources=limit)
    await runtime.start(hog)
    state = await terminated(runtime, "p1", "hog")
    assert (state.exit_code, state.reason, state.signal) == (137, "OOMKilled", 9)
    sibling = runtime.state("p1", "sibling")
    assert isinstance(sibling, Running)
    assert Path(f"/proc/{sibling.pid}").exists()
    usage = runtime.usage("p1", "sibling")
    assert usage is not None and 0 < usage.memory_bytes < 32 * MiB
    assert runtime.usage("p1") is not None


async def test_limits_are_written_to_the_containers_cgroup(
    runtime: RuncRuntime, cgroups: Cgroups
) -> None:
    res = Resources(memory_limit_bytes=48 * MiB, cpu_request_millis=250, cpu_limit_millis=500)
    await runtime.start(sh("app", "while true; do sleep 0.1; done", resources=res))
    rel = f"podp1/{runtime.container_id('p1', 'app')}"
    if cgroups.version != 1:
        pytest.skip("the assertions read cgroup v1 files")
    assert (cgroups.bases["memory"] / rel / "memory.limit_in_bytes").read_text() == f"{48 * MiB}\n"
    assert (cgroups.bases["cpu"] / rel / "cpu.shares").read_text() == "256\n"
    assert (cgroups.bases["cpu"] / rel / "cpu.cfs_quota_us").read_text() == "50000\n"


async def test_a_missing_image_and_a_bad_reference_are_image_errors(runtime: RuncRuntime) -> None:
    with pytest.raises(ImageError, match='image "nope:1" not found') as missing:
        await runtime.start(sh("app", "true", image="nope:1"))
    assert missing.value.reason == "ErrImagePull"
    with pytest.raises(ImageError, match="invalid"):
        await runtime.start(sh("app", "true", image="../../etc:1"))
    assert runtime.containers() == []


async def test_a_missing_executable_is_a_start_error_with_runcs_reason(
    runtime: RuncRuntime,
) -> None:
    with pytest.raises(StartError, match="no-such-binary") as failed:
        await runtime.start(spec("app", "no-such-binary"))
    assert not isinstance(failed.value, ImageError)
    assert runtime.containers() == [] and runc_ids(runtime) == []
    assert list(runtime.bundles_dir("p1").iterdir()) == []


async def test_cleanup_kills_and_removes_every_container_cgroup_bundle_and_mount(
    runtime: RuncRuntime,
) -> None:
    for name in ("a", "b"):
        await runtime.start(sh(name, "while true; do sleep 0.1; done", pod="p2"))
    pids = [s.pid for n in ("a", "b") if isinstance(s := runtime.state("p2", n), Running)]
    assert len(pids) == 2 and len(runc_ids(runtime)) == 2
    await runtime.cleanup("p2")
    assert_nothing_left(runtime, {"p2"})
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)


# -- a whole agent with the runc runtime -------------------------------------------------------


async def wait_for(check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(check):
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.1)


def container_status(api: AgentApi, ns: str, name: str) -> dict[str, Any]:
    statuses = (api.get(POD, ns, name).get("status") or {}).get("containerStatuses") or [{}]
    return statuses[0]


def ready(api: AgentApi, ns: str, name: str) -> bool:
    conditions = (api.get(POD, ns, name).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def gone(api: AgentApi, ns: str, name: str) -> bool:
    try:
        api.get(POD, ns, name)
    except NotFound:
        return True
    return False


async def test_an_agent_runs_a_runc_pod_to_ready_probing_inside_the_container(
    api_server: ApiServer, runtime: RuncRuntime
) -> None:
    api = AgentApi(api_server.url, api_server.token)
    node, ns = f"runc-{secrets.token_hex(3)}", f"runc-{secrets.token_hex(3)}"
    api.create(NAMESPACE, None, {"metadata": {"name": ns}})
    agent = make_agent(api, runtime, node)
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))

    def pod(name: str, image: str, **container: Any) -> None:
        body = {"name": "c", "image": image, "resources": {"limits": {"memory": "64Mi"}}}
        spec = {"nodeName": node, "terminationGracePeriodSeconds": 2, "containers": [body]}
        body.update(container)
        api.create(POD, ns, {"metadata": {"name": name}, "spec": spec})

    try:
        # /tmp is the container's own tmpfs: the probe passes only if it runs inside
        script = "touch /tmp/ready-inside; while true; do sleep 0.1; done"
        probe = {"exec": {"command": ["test", "-f", "/tmp/ready-inside"]}, "periodSeconds": 1}
        pod("web", IMAGE, command=["sh", "-c", script], readinessProbe=probe)
        pod("ghost", "missing:1", command=["true"])
        await wait_for(lambda: ready(api, ns, "web"))
        assert "running" in container_status(api, ns, "web")["state"]
        assert len(runc_ids(runtime)) == 1
        await wait_for(
            lambda: (
                (container_status(api, ns, "ghost").get("state") or {})
                .get("waiting", {})
                .get("reason")
                == "ErrImagePull"
            )
        )
        waiting = container_status(api, ns, "ghost")["state"]["waiting"]
        assert 'image "missing:1" not found' in waiting["message"]
        api.delete(POD, ns, "web")
        await wait_for(lambda: gone(api, ns, "web"))
        assert runc_ids(runtime) == []
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        api.close()
    assert runtime.containers() == []


async def test_secret_files_are_on_the_pods_tmpfs_inside_the_container(
    runtime: RuncRuntime,
) -> None:
    """ADR 0048: a pod's Secret files sit on a tmpfs of its own in its directory, which the
    container sees through the recursive bind mount, mode 0400."""
    script = (
        "cat creds/password; echo; stat -L -c %a creds/password;"
        " grep ' /var/run/quaymaster/pod/.secrets ' /proc/self/mountinfo | grep -c tmpfs"
    )
    c = ContainerSpec("p1", "app", ["sh", "-c", script], {}, {}, Resources(), IMAGE,
                      secret_files={"creds/password": b"s3cret"})  # fmt: skip
    await runtime.start(c)
    state = await terminated(runtime, "p1", "app")
    assert state.exit_code == 0, runtime.log_path("p1", "app").read_text()
    assert runtime.log_path("p1", "app").read_text().split() == ["s3cret", "400", "1"]
    config = next(runtime.bundles_dir("p1").glob("*/config.json"))
    assert config.stat().st_mode & 0o077 == 0  # it holds the container's environment
