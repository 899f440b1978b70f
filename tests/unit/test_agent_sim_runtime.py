"""The ``sim`` runtime keeps the runtime contract without processes: hollow nodes and the pod
loop's unit tests rely on it behaving like the process runtime."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from agent.runtime import ContainerSpec, Running, StartError, Terminated, Usage
from agent.runtime.sim import SIGTERM_EXIT, SimRuntime

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def spec(name: str = "app", pod: str = "p1") -> ContainerSpec:
    return ContainerSpec(pod_uid=pod, name=name, command=["serve"])


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def test_start_runs_and_a_second_start_is_refused() -> None:
    rt = SimRuntime(Clock())
    running = run(rt.start(spec()))
    assert isinstance(running, Running) and running.started_at == T0
    assert rt.state("p1", "app") == running
    with pytest.raises(StartError):
        run(rt.start(spec()))


def test_exits_carry_code_reason_and_times() -> None:
    clock = Clock()
    rt = SimRuntime(clock)
    first = run(rt.start(spec("ok")))
    assert isinstance(first, Running)
    run(rt.start(spec("bad")))
    run(rt.start(spec("hog")))
    clock.now = T0 + timedelta(seconds=5)
    done = rt.exit("p1", "ok", 0)
    assert (done.exit_code, done.reason, done.finished_at) == (0, "Completed", clock.now)
    assert rt.exit("p1", "bad", 3).reason == "Error"
    oom = rt.exit("p1", "hog", 1, oom=True)
    assert (oom.exit_code, oom.reason, oom.signal) == (137, "OOMKilled", 9)
    with pytest.raises(ValueError):
        rt.exit("p1", "ok", 0)  # not running any more
    # A restart in place is a new start with a new pid.
    again = run(rt.start(spec("ok")))
    assert isinstance(again, Running) and again.pid != first.pid


@pytest.mark.parametrize(
    ("graceful", "grace", "code", "signal"),
    [(0, 30.0, 0, None), (SIGTERM_EXIT, 30.0, SIGTERM_EXIT, 15), (0, 0.0, 137, 9)],
)
def test_stop_follows_the_grace_period(
    graceful: int, grace: float, code: int, signal: int | None
) -> None:
    rt = SimRuntime(Clock(), graceful_exit_code=graceful)
    run(rt.start(spec()))
    stopped = run(rt.stop("p1", "app", grace))
    assert isinstance(stopped, Terminated)
    assert (stopped.exit_code, stopped.signal) == (code, signal)
    assert run(rt.stop("p1", "app", grace)) == stopped  # stopping again changes nothing
    assert run(rt.stop("p1", "absent", grace)) is None


def test_a_failed_start_is_reported_once() -> None:
    rt = SimRuntime(Clock())
    rt.fail_next_start[("p1", "app")] = "image not found"
    with pytest.raises(StartError, match="image not found"):
        run(rt.start(spec()))
    assert isinstance(run(rt.start(spec())), Running)


def test_usage_per_container_and_pod_and_cleanup() -> None:
    rt = SimRuntime(Clock())
    run(rt.start(spec("a")))
    run(rt.start(spec("b")))
    run(rt.start(spec("c", pod="p2")))
    rt.set_usage("p1", "a", Usage(100, 5))
    rt.set_usage("p1", "b", Usage(50, 7))
    assert rt.usage("p1", "a") == Usage(100, 5)
    assert rt.usage("p1") == Usage(150, 12)
    assert sorted(rt.containers("p1")) == [("p1", "a"), ("p1", "b")]
    run(rt.cleanup("p1"))
    assert rt.containers() == [("p2", "c")]
    assert rt.usage("p1") is None
