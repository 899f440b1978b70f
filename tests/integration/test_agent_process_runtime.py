"""The process runtime with real processes and, where the host allows, real cgroups.

Cgroups are created under this test process's own cgroup in each hierarchy (a parent named
per test), and every test checks on the way out that no process and no cgroup is left.
Tests that need cgroups skip, with the reason, when the host gives no writable ones.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import capability
import pytest

from agent.logs import previous_log_path
from agent.runtime.base import ContainerSpec, Resources, Running, StartError, Terminated
from agent.runtime.cgroups import Cgroups, CgroupsUnavailable, detect
from agent.runtime.process import ProcessRuntime, container_cgroup
from agent.runtime.sim import SIGTERM_EXIT, SimRuntime

PY = sys.executable
READY = "import sys; print('ready', flush=True); "


@pytest.fixture
def maybe_cgroups() -> Iterator[Cgroups | None]:
    try:
        cgroups = detect(f"qm-test-{secrets.token_hex(4)}", relative_to_self=True)
    except CgroupsUnavailable as exc:
        yield None
        print(f"no cgroups: {exc}")
        return
    yield cgroups
    cgroups.remove("")
    assert not any(base.exists() for base in cgroups.bases.values())


@pytest.fixture
def cgroups(maybe_cgroups: Cgroups | None) -> Cgroups:
    if maybe_cgroups is None:
        capability.missing("no writable memory/cpu cgroups here (needs root and cgroupfs rw)")
    return maybe_cgroups


@pytest.fixture
async def runtime(tmp_path: Path, maybe_cgroups: Cgroups | None) -> AsyncIterator[ProcessRuntime]:
    rt = ProcessRuntime(tmp_path / "pods", maybe_cgroups)
    yield rt
    pids = [s.pid for key in rt.containers() if isinstance(s := rt.state(*key), Running)]
    for pod in {uid for uid, _ in rt.containers()}:
        await rt.cleanup(pod)
    assert rt.containers() == []
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except (FileNotFoundError, IndexError):
        return True


def spec(
    pod: str,
    name: str,
    code: str,
    env: dict[str, str] | None = None,
    files: dict[str, bytes] | None = None,
    resources: Resources | None = None,
) -> ContainerSpec:
    return ContainerSpec(
        pod, name, [PY, "-c", code], env or {}, files or {}, resources or Resources()
    )


async def terminated(rt: ProcessRuntime, pod: str, name: str, timeout: float = 10) -> Terminated:
    deadline = time.monotonic() + timeout
    while not isinstance(state := rt.state(pod, name), Terminated):
        assert time.monotonic() < deadline, f"{name} still {state}"
        await asyncio.sleep(0.02)
    return state


async def logged(rt: ProcessRuntime, pod: str, name: str, text: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while text not in rt.log_path(pod, name).read_text():
        assert time.monotonic() < deadline, f"{text!r} never logged by {name}"
        await asyncio.sleep(0.02)


async def test_exit_zero_completes_with_env_files_and_both_streams_in_the_log(runtime):
    code = (
        "import os, sys; print(os.environ['GREETING'], open('conf/app.txt').read());"
        "print('to stderr', file=sys.stderr); print(os.getcwd())"
    )
    files = {"conf/app.txt": b"from a config map"}
    running = await runtime.start(spec("p1", "app", code, env={"GREETING": "hi"}, files=files))
    assert running.pid > 0
    state = await terminated(runtime, "p1", "app")
    assert (state.exit_code, state.reason, state.signal) == (0, "Completed", None)
    assert state.finished_at >= state.started_at == running.started_at
    log = runtime.log_path("p1", "app").read_text()
    assert "hi from a config map" in log and "to stderr" in log
    assert str(runtime.pod_dir("p1")) in log


async def test_nonzero_exit_is_an_error_and_a_restart_keeps_the_last_run_as_previous(runtime):
    await runtime.start(spec("p1", "app", "print('run 1'); raise SystemExit(3)"))
    state = await terminated(runtime, "p1", "app")
    assert (state.exit_code, state.reason) == (3, "Error")
    await runtime.start(spec("p1", "app", "print('run 2'); raise SystemExit(3)"))
    await terminated(runtime, "p1", "app")
    assert runtime.log_path("p1", "app").read_text() == "run 2\n"
    assert previous_log_path(runtime.pod_dir("p1"), "app").read_text() == "run 1\n"  # ADR 0019


async def test_start_errors_are_reported_before_anything_runs(runtime):
    with pytest.raises(StartError, match="not found"):
        await runtime.start(ContainerSpec("p1", "app", ["no-such-binary-qm"]))
    with pytest.raises(StartError, match="inside the pod directory"):
        await runtime.start(spec("p1", "app", "pass", files={"../escape": b"x"}))
    await runtime.start(spec("p1", "app", READY + "import time; time.sleep(60)"))
    with pytest.raises(StartError, match="already running"):
        await runtime.start(spec("p1", "app", "pass"))


async def test_sigterm_handled_gives_the_containers_own_clean_exit(runtime):
    code = (
        "import signal, time\n"
        "def bye(*_): print('got term', flush=True); raise SystemExit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        "print('ready', flush=True); time.sleep(60)"
    )
    await runtime.start(spec("p1", "app", code))
    await logged(runtime, "p1", "app", "ready")
    began = time.monotonic()
    state = await runtime.stop("p1", "app", grace_seconds=10)
    assert time.monotonic() - began < 2
    assert state is not None
    assert (state.exit_code, state.reason, state.signal) == (0, "Completed", None)
    assert "got term" in runtime.log_path("p1", "app").read_text()


async def test_sigterm_ignored_is_sigkilled_after_the_grace_period(runtime):
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); " + READY
    await runtime.start(spec("p1", "app", code + "time.sleep(60)"))
    await logged(runtime, "p1", "app", "ready")
    began = time.monotonic()
    state = await runtime.stop("p1", "app", grace_seconds=1.0)
    elapsed = time.monotonic() - began
    assert 1.0 <= elapsed < 1.8
    assert state is not None
    # SIGKILL by the agent is not an OOM kill: the reason comes from the cgroup's counter.
    assert (state.exit_code, state.signal, state.reason) == (137, 9, "Error")


async def test_what_the_main_process_leaves_behind_is_killed_with_it(runtime):
    await runtime.start(
        ContainerSpec("p1", "app", ["/bin/sh", "-c", "sleep 300 & echo $! > child.pid; exit 0"])
    )
    await terminated(runtime, "p1", "app")
    child = int((runtime.pod_dir("p1") / "child.pid").read_text())
    deadline = time.monotonic() + 5
    while Path(f"/proc/{child}").exists() and not _zombie(child):
        assert time.monotonic() < deadline, "the orphaned child still runs"
        await asyncio.sleep(0.02)


async def test_limits_are_written_and_the_process_is_inside_from_its_first_line(
    runtime, cgroups: Cgroups
):
    resources = Resources(
        memory_limit_bytes=128 << 20, cpu_request_millis=250, cpu_limit_millis=500
    )
    code = (
        READY + "print(open('/proc/self/cgroup').read(), flush=True); import time; time.sleep(60)"
    )
    await runtime.start(spec("p1", "app", code, resources=resources))
    await logged(runtime, "p1", "app", "memory:")
    rel = container_cgroup("p1", "app")
    if cgroups.version == 1:
        memory_dir, cpu_dir = cgroups.bases["memory"] / rel, cgroups.bases["cpu"] / rel
        assert int((memory_dir / "memory.limit_in_bytes").read_text()) == 128 << 20
        assert int((cpu_dir / "cpu.shares").read_text()) == 256
        assert int((cpu_dir / "cpu.cfs_quota_us").read_text()) == 50_000
        own = [line for line in runtime.log_path("p1", "app").read_text().splitlines()]
        memory_line = next(line for line in own if ":memory:" in line)
        assert memory_line.endswith(f"/{cgroups.bases['memory'].name}/{rel}")
    else:
        directory = cgroups.bases["memory"] / rel
        assert (directory / "memory.max").read_text().strip() == str(128 << 20)
        assert (directory / "cpu.weight").read_text().strip() == "10"  # cpu_weight(256)
        assert (directory / "cpu.max").read_text().strip() == "50000 100000"
    usage = runtime.usage("p1", "app")
    assert usage is not None and usage.memory_bytes > 1 << 20 and usage.cpu_usage_ns > 0
    pod_usage = runtime.usage("p1")
    assert pod_usage is not None and pod_usage.memory_bytes >= usage.memory_bytes
    await runtime.cleanup("p1")
    assert not cgroups.exists(rel) and not cgroups.exists("podp1")
    assert not runtime.pod_dir("p1").exists()


async def test_a_memory_hog_is_oom_killed_alone(runtime, cgroups: Cgroups):
    steady = await runtime.start(spec("p1", "steady", READY + "import time; time.sleep(60)"))
    hog = "b = []\nwhile True: b.append(bytearray(10 << 20))"
    await runtime.start(spec("p1", "hog", hog, resources=Resources(memory_limit_bytes=64 << 20)))
    state = await terminated(runtime, "p1", "hog", timeout=20)
    assert (state.reason, state.exit_code, state.signal) == ("OOMKilled", 137, 9)
    assert runtime.state("p1", "steady") == steady
    os.kill(steady.pid, 0)
    # Restarted in place, the hog gets a fresh cgroup: its counters start from zero.
    await runtime.start(spec("p1", "hog", "pass", resources=Resources(memory_limit_bytes=64 << 20)))
    assert (await terminated(runtime, "p1", "hog")).reason == "Completed"


async def test_the_sim_runtime_keeps_the_same_contract():
    sim = SimRuntime()
    running = await sim.start(ContainerSpec("p1", "app", ["serve"]))
    assert sim.state("p1", "app") == running
    with pytest.raises(StartError):
        await sim.start(ContainerSpec("p1", "app", ["serve"]))
    assert sim.exit("p1", "app", 3).reason == "Error"
    await sim.start(ContainerSpec("p1", "app", ["serve"]))
    oom = sim.exit("p1", "app", 0, oom=True)
    assert (oom.reason, oom.exit_code) == ("OOMKilled", 137)
    await sim.start(ContainerSpec("p1", "app", ["serve"]))
    stopped = await sim.stop("p1", "app", grace_seconds=30)
    assert stopped is not None and stopped.reason == "Completed"
    assert await sim.stop("p1", "nope", 1) is None
    harsh = SimRuntime(graceful_exit_code=SIGTERM_EXIT)
    await harsh.start(ContainerSpec("p1", "app", ["serve"]))
    ended = await harsh.stop("p1", "app", grace_seconds=30)
    assert ended is not None and (ended.exit_code, ended.signal) == (143, 15)
    await sim.cleanup("p1")
    assert sim.containers() == [] and sim.state("p1", "app") is None
