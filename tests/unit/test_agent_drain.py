"""The wait for the proxies before SIGTERM (agent/drain.py) on a fake clock: its bound, what
counts as drained, when a replica is asked again, the concurrent wait over several replicas,
and where the pod worker waits (deletions with a grace period only) and what it takes from
the grace period."""

from __future__ import annotations

from typing import Any

import pytest
from pod_api import FakeApi

from agent.backoff import CrashLoopBackoff
from agent.config import parse
from agent.drain import (
    REASK_GAP,
    Answer,
    Ask,
    Drainer,
    Outcome,
    applies,
    bound,
    next_ask,
    parse_answer,
)
from agent.pods import Clocks, PodWorker
from agent.runtime import Terminated
from agent.runtime.sim import SimRuntime

Obj = dict[str, Any]
A, B = "http://127.0.0.1:9480", "http://127.0.0.1:9481"


@pytest.mark.parametrize(
    ("grace", "drain_max", "expected"),
    [(30, 10, 10), (8, 10, 4), (20, 10, 10), (1, 10, 0.5), (0, 10, 0), (30, 0, 0)],
)
def test_the_bound_is_drain_max_and_at_most_half_the_grace(
    grace: float, drain_max: float, expected: float
) -> None:
    assert bound(grace, drain_max) == expected


@pytest.mark.parametrize(
    ("deletion", "evicted", "grace", "replicas", "expected"),
    [
        (True, False, 30.0, (A,), True),
        (True, False, 0.0, (A,), False),  # grace 0: no wait
        (True, True, 30.0, (A,), False),  # evicted for node pressure
        (False, False, 30.0, (A,), False),  # no longer assigned here, or the agent stopping
        (True, False, 30.0, (), False),  # no --discovery-http
    ],
)
def test_which_stops_wait(
    deletion: bool, evicted: bool, grace: float, replicas: tuple[str, ...], expected: bool
) -> None:
    assert applies(deletion=deletion, evicted=evicted, grace=grace, replicas=replicas) is expected


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (200, b'{"drained": true, "version": 41, "waiting": []}', Answer(A, True, 41)),
        (
            200,
            b'{"drained": false, "version": 41, "waiting": ["p-a", "p-b"]}',
            Answer(A, False, 41, ("p-a", "p-b")),
        ),
        (200, b'{"drained": true, "version": null, "waiting": []}', Answer(A, True)),
        (200, b'{"drained": false, "version": true}', Answer(A, False)),
        (503, b"busy", Answer(A, error="HTTP 503")),
        (200, b"<html>", Answer(A, error="answer is not JSON")),
        (200, b'{"drained": "yes"}', Answer(A, error="answer has no boolean 'drained'")),
        (200, b"[]", Answer(A, error="answer has no boolean 'drained'")),
    ],
)
def test_answers(status: int, body: bytes, expected: Answer) -> None:
    assert parse_answer(A, status, body) == expected


@pytest.mark.parametrize(
    ("answer", "counts"),
    [(Answer(A, True), True), (Answer(A, error="x"), True), (Answer(A), False)],
)
def test_an_error_counts_as_drained_a_plain_no_does_not(answer: Answer, counts: bool) -> None:
    assert answer.counts_as_drained is counts


@pytest.mark.parametrize(
    ("last", "asked_at", "now", "expected"),
    [
        (Answer(A), None, 100.0, Ask(0.0, 5.0)),  # first question: the whole bound
        (Answer(A, True), 100.0, 101.0, None),
        (Answer(A, error="refused"), 100.0, 100.0, None),
        (Answer(A), 100.0, 103.0, Ask(0.0, 2.0)),  # a long poll that ended: ask again at once
        (Answer(A), 100.0, 100.05, Ask(REASK_GAP - 0.05, 5.0 - REASK_GAP)),  # an early no
        (Answer(A), 104.0, 105.0, None),  # the bound has passed
        (Answer(A), 104.9, 104.97, None),  # too little left after the gap
    ],
)
def test_when_to_ask_again(
    last: Answer, asked_at: float | None, now: float, expected: Ask | None
) -> None:
    got = next_ask(last, asked_at, now, deadline=105.0)
    if expected is None or got is None:
        assert got == expected
    else:
        assert got.after == pytest.approx(expected.after)
        assert got.timeout == pytest.approx(expected.timeout)


class FakeReplicas:
    """Replicas on a fake clock: each drains at a time of its own (None: never), or is
    down; a question blocks (advances the clock) until drained or its timeout."""

    def __init__(self, drained_at: dict[str, float | None], down: set[str] = frozenset()) -> None:
        self.now = 0.0
        self.drained_at, self.down = drained_at, down
        self.asked: list[tuple[str, float]] = []
        self.paused: list[float] = []

    def clock(self) -> float:
        return self.now

    async def pause(self, seconds: float) -> None:
        self.paused.append(seconds)
        self.now += seconds

    async def ask(self, replica: str, namespace: str, pod: str, timeout: float) -> Answer:
        assert (namespace, pod) == ("shop", "web-1")
        self.asked.append((replica, timeout))
        if replica in self.down:
            return Answer(replica, error="unreachable: ConnectError")
        at = self.drained_at[replica]
        if at is not None and at <= self.now + timeout:
            self.now = max(self.now, at)
            return Answer(replica, True, 7)
        self.now += timeout
        return Answer(replica, False, 7, ("proxy-c",))

    def drainer(self, drain_max: float = 10.0, replicas: tuple[str, ...] = (A, B)) -> Drainer:
        return Drainer(replicas, drain_max, mono=self.clock, pause=self.pause, ask=self.ask)


async def test_waits_until_every_replica_says_drained() -> None:
    fake = FakeReplicas({A: 0.3, B: 1.2})
    outcome = await fake.drainer().wait("shop", "web-1", grace=30)
    assert outcome.all_drained and outcome.bound == 10
    assert outcome.waited == pytest.approx(1.2, abs=1e-9)
    assert sorted(r for r, _ in fake.asked) == [A, B]  # one long poll each, concurrently
    assert fake.asked[0][1] == pytest.approx(10.0)  # a long poll of the whole bound
    assert all(t <= 10.0 for _, t in fake.asked)
    assert "all drained" in outcome.summary()


async def test_a_replica_that_never_drains_is_waited_for_only_up_to_the_bound() -> None:
    fake = FakeReplicas({A: 0.1, B: None})
    outcome = await fake.drainer().wait("shop", "web-1", grace=8)  # bound: half of 8 s
    assert outcome.bound == 4 and not outcome.all_drained
    assert outcome.waited <= 4.0 + 1e-9
    assert "not all drained" in outcome.summary() and B in outcome.summary()


async def test_an_unreachable_replica_counts_as_drained_and_does_not_block() -> None:
    fake = FakeReplicas({A: 0.5, B: None}, down={B})
    outcome = await fake.drainer().wait("shop", "web-1", grace=30)
    assert outcome.all_drained and outcome.waited == pytest.approx(0.5)
    assert [r for r, _ in fake.asked].count(B) == 1  # not asked again
    assert "counted as drained (unreachable" in outcome.summary()


async def test_an_early_no_is_asked_again_after_a_gap_not_in_a_loop() -> None:
    fake = FakeReplicas({A: 1.0})
    calls = 0

    async def early_no(replica: str, namespace: str, pod: str, timeout: float) -> Answer:
        nonlocal calls
        calls += 1
        return Answer(replica, fake.now >= 1.0)  # answers at once, drained from t=1

    drainer = Drainer((A,), 10.0, mono=fake.clock, pause=fake.pause, ask=early_no)
    outcome = await drainer.wait("shop", "web-1", grace=30)
    assert outcome.all_drained and calls == 6  # t = 0, 0.2, 0.4, 0.6, 0.8, 1.0
    assert fake.paused == [pytest.approx(REASK_GAP)] * 5


@pytest.mark.parametrize(("grace", "replicas"), [(0.0, (A,)), (30.0, ())])
async def test_nothing_to_wait_for(grace: float, replicas: tuple[str, ...]) -> None:
    fake = FakeReplicas({A: None})
    outcome = await fake.drainer(replicas=replicas).wait("shop", "web-1", grace)
    assert outcome == Outcome(0.0, bound(grace, 10.0)) and fake.asked == []


def test_the_settings() -> None:
    cfg = parse([], {}, hostname="n1")
    assert (cfg.discovery_http, cfg.drain_max) == ((), 10.0)
    env = {"QM_DISCOVERY_HTTP": f"{A}, {B}", "QM_AGENT_DRAIN_MAX": "2.5s"}
    cfg = parse([], env, hostname="n1")
    assert (cfg.discovery_http, cfg.drain_max) == ((A, B), 2.5)
    assert parse(["--drain-max", "0"], env, hostname="n1").drain_max == 0.0


# -- the worker ------------------------------------------------------------------------------


class GraceRuntime(SimRuntime):
    """The sim runtime, noting the grace period each stop was given."""

    def __init__(self) -> None:
        super().__init__()
        self.graces: list[float] = []

    async def stop(self, pod_uid: str, name: str, grace_seconds: float) -> Terminated | None:
        self.graces.append(grace_seconds)
        return await super().stop(pod_uid, name, grace_seconds)


async def started_worker(fake: FakeReplicas) -> tuple[PodWorker, GraceRuntime]:
    body: Obj = {
        "metadata": {"name": "web-1", "namespace": "shop", "uid": "u1", "resourceVersion": "1"},
        "spec": {"containers": [{"name": "app", "command": ["serve"]}]},
        "status": {},
    }
    runtime = GraceRuntime()
    worker = PodWorker(
        body,
        runtime,
        FakeApi(body),
        CrashLoopBackoff(),
        clocks=Clocks(fake.clock, fake.clock),
        drainer=fake.drainer(),
    )
    await worker.step()
    assert worker.boxes[0].running
    return worker, runtime


async def test_a_deletion_waits_then_stops_with_what_is_left_of_the_grace() -> None:
    fake = FakeReplicas({A: 3.0, B: 4.0})
    worker, runtime = await started_worker(fake)
    worker.request_stop(confirm=True, grace=30.0)
    await worker.step()
    assert worker.finished and runtime.graces[0] == pytest.approx(26.0)
    assert {r for r, _ in fake.asked} == {A, B}


async def test_the_wait_never_takes_more_than_half_the_grace() -> None:
    fake = FakeReplicas({A: None, B: None})
    worker, runtime = await started_worker(fake)
    worker.request_stop(confirm=True, grace=6.0)
    await worker.step()
    assert runtime.graces[0] == pytest.approx(3.0) and fake.now == pytest.approx(3.0)


@pytest.mark.parametrize("how", ["evicted", "grace 0", "unassigned"])
async def test_other_stops_do_not_wait(how: str) -> None:
    fake = FakeReplicas({A: 3.0, B: 3.0})
    worker, runtime = await started_worker(fake)
    if how == "evicted":
        worker.evict("The node was low on resource: memory.", grace=30.0)
    else:
        worker.request_stop(confirm=how == "grace 0", grace=0.0 if how == "grace 0" else 30.0)
    await worker.step()
    assert fake.asked == [] and fake.now == 0.0
    assert runtime.graces[0] == (0.0 if how == "grace 0" else 30.0)


async def test_a_pod_that_never_ran_here_is_not_waited_for() -> None:
    fake = FakeReplicas({A: 3.0, B: 3.0})
    body: Obj = {
        "metadata": {"name": "web-1", "namespace": "shop", "uid": "u1", "resourceVersion": "1"},
        "spec": {"containers": [{"name": "app", "command": ["serve"]}]},
    }
    worker = PodWorker(
        body,
        GraceRuntime(),
        FakeApi(body),
        CrashLoopBackoff(),
        clocks=Clocks(fake.clock, fake.clock),
        drainer=fake.drainer(),
    )
    worker.request_stop(confirm=True, grace=30.0)
    await worker.step()
    assert worker.finished and fake.asked == []
