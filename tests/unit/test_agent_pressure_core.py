"""Node-pressure eviction's pure core and its shell on fakes: the QoS class table, the ranking
(usage above requests, then priority, then QoS, then use above the request), threshold and
setting parsers with bad input, the decision on a fake clock (minimum reclaim, one eviction
at a time, the transition period), the node's condition and taint, the messages, a worker
that is evicted with the sim runtime, and the monitor evicting through fake workers."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agent.backoff import CrashLoopBackoff
from agent.config import ConfigError, container_spec, parse
from agent.pods import Clocks, PodWorker
from agent.pressure import (
    CONDITION,
    TAINT_KEY,
    Candidate,
    EvictionConfig,
    PressureState,
    Threshold,
    candidate,
    decide,
    eviction_config,
    eviction_message,
    parse_seconds,
    parse_threshold,
    qos_class,
    rank,
    with_condition,
    with_taint,
)
from agent.pressure_monitor import MeminfoSignal, PodsSignal, PressureMonitor
from agent.runtime import Usage
from agent.runtime.sim import SimRuntime

Obj = dict[str, Any]
Mi = 2**20


def pod(*containers: Obj, priority: int | None = None, init: list[Obj] | None = None) -> Obj:
    spec: Obj = {"containers": [{"name": f"c{i}", **c} for i, c in enumerate(containers)]}
    if priority is not None:
        spec["priority"] = priority
    if init:
        spec["initContainers"] = init
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": spec}


def res(requests: Obj | None = None, limits: Obj | None = None) -> Obj:
    r: Obj = {}
    if requests is not None:
        r["requests"] = requests
    if limits is not None:
        r["limits"] = limits
    return {"resources": r}


BOTH = {"cpu": "500m", "memory": "128Mi"}


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        (pod({}), "BestEffort"),
        (pod({}, {}), "BestEffort"),
        (pod(res(limits=BOTH)), "Guaranteed"),  # requests default to the limits
        (pod(res(BOTH, BOTH)), "Guaranteed"),
        (pod(res({"cpu": "0.5", "memory": "128Mi"}, BOTH)), "Guaranteed"),  # same amounts
        (pod(res(BOTH, BOTH), res(BOTH, BOTH)), "Guaranteed"),
        (pod(res({"cpu": "250m"}, BOTH)), "Burstable"),  # request below the limit
        (pod(res(limits={"memory": "128Mi"})), "Burstable"),  # no CPU limit
        (pod(res({"memory": "64Mi"})), "Burstable"),
        (pod(res(BOTH, BOTH), {}), "Burstable"),  # one container without anything
        (pod({}, init=[{"name": "i", **res({"memory": "1Mi"})}]), "Burstable"),
        (pod(res({"ephemeral-storage": "1Gi"})), "BestEffort"),  # only cpu and memory count
    ],
)
def test_qos_class(spec: Obj, want: str) -> None:
    assert qos_class(spec) == want


def cand(name: str, qos: Any, priority: int, request: int, usage: int) -> Candidate:
    return Candidate(name, "ns", name, qos, priority, request * Mi, usage * Mi)


def test_rank_puts_use_above_requests_first_then_priority_then_qos_then_excess() -> None:
    pods = [
        cand("guaranteed", "Guaranteed", 0, 100, 100),
        cand("within", "Burstable", -100, 300, 100),  # lowest priority but within requests
        cand("burst-hi", "Burstable", 1000, 50, 500),
        cand("burst-small", "Burstable", 0, 50, 60),
        cand("burst-big", "Burstable", 0, 50, 400),
        cand("besteffort", "BestEffort", 0, 0, 100),
        cand("besteffort-low", "BestEffort", -10, 0, 5),
    ]
    order = [p.name for p in rank(pods)]
    assert order == [
        "besteffort-low",  # priority wins over the amount
        "besteffort",  # same priority: BestEffort before Burstable, whatever the use
        "burst-big",  # then the larger use above its request
        "burst-small",
        "burst-hi",
        "within",  # pods within their requests come last, lowest priority first
        "guaranteed",
    ]


def test_rank_never_offers_system_critical_pods() -> None:
    pods = [cand("critical", "BestEffort", 2_000_001_000, 0, 900), cand("x", "Burstable", 0, 0, 1)]
    assert [p.name for p in rank(pods)] == ["x"]


def test_candidate_reads_priority_requests_and_qos_from_the_spec() -> None:
    c = candidate(pod(res({"memory": "64Mi"}), res({"memory": "32Mi"}), priority=7), 200 * Mi)
    assert (c.uid, c.qos, c.priority, c.request, c.exceeds) == ("u", "Burstable", 7, 96 * Mi, True)
    assert candidate(pod({}), 0).priority == 0 and not candidate(pod({}), 0).exceeds


@pytest.mark.parametrize(
    ("text", "amount", "percent"),
    [
        ("memory.available<500Mi", 500 * Mi, None),
        (" memory.available < 1Gi ", 2**30, None),
        ("memory.available<10%", None, 10.0),
        ("memory.available<100M", 100_000_000, None),
    ],
)
def test_parse_threshold(text: str, amount: int | None, percent: float | None) -> None:
    assert parse_threshold(text) == Threshold(amount, percent)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("memory.available>500Mi", "is not"),
        ("memory.available<", "is not"),
        ("nodefs.available<10%", "not supported"),
        ("memory.available<lots", "not a quantity"),
        ("memory.available<0", "more than zero"),
        ("memory.available<-5Mi", "more than zero"),
        ("memory.available<150%", "between"),
        ("memory.available<x%", "not a percentage"),
    ],
)
def test_parse_threshold_refuses_bad_input(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_threshold(text)


def test_threshold_in_percent_is_of_capacity() -> None:
    assert Threshold(None, 10.0).bytes_of(1000 * Mi) == 100 * Mi
    assert Threshold(5 * Mi).bytes_of(1000 * Mi) == 5 * Mi


@pytest.mark.parametrize(
    ("text", "seconds"), [("30", 30.0), ("30s", 30.0), ("1m30s", 90.0), ("500ms", 0.5)]
)
def test_parse_seconds(text: str, seconds: float) -> None:
    assert parse_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "30x", "-1", "1m 30s"])
def test_parse_seconds_refuses_bad_input(text: str) -> None:
    with pytest.raises(ValueError):
        parse_seconds(text)


def test_agent_flags_and_environment_set_eviction() -> None:
    argv = ["--node-name", "n", "--eviction-hard", "memory.available<500Mi"]
    env = {"QM_AGENT_PRESSURE_SOURCE": "pods", "QM_AGENT_EVICTION_MINIMUM_RECLAIM": "64Mi"}
    cfg = parse([*argv, "--eviction-pressure-transition-period", "2s"], env)
    assert cfg.eviction == EvictionConfig(Threshold(500 * Mi), 64 * Mi, 2.0, 5.0, "pods")
    assert parse(["--node-name", "n"], {}).eviction == EvictionConfig()
    for bad in (
        ["--eviction-hard", "memory<1Mi"],
        ["--pressure-source", "psi"],
        ["--pressure-interval", "0"],
        ["--eviction-minimum-reclaim", "much"],
    ):
        with pytest.raises(ConfigError, match="eviction"):
            parse(["--node-name", "n", *bad], {})


def test_eviction_config_refuses_a_negative_reclaim() -> None:
    with pytest.raises(ValueError, match="negative"):
        eviction_config("memory.available<1Mi", "-1Mi", "30s", "5s", "pods")


# -- the decision on a fake clock --------------------------------------------------------------

CFG = EvictionConfig(Threshold(100 * Mi), min_reclaim=50 * Mi, transition_period=30.0)
HOG = cand("hog", "BestEffort", 0, 0, 800)
SVC = cand("svc", "Guaranteed", 0, 100, 100)


def test_decide_evicts_the_first_ranked_pod_once_the_threshold_is_met() -> None:
    state, v = decide(PressureState(), CFG, 120 * Mi, 1000 * Mi, [SVC, HOG], now=0.0)
    assert not v.met and not v.under_pressure and v.victim is None
    state, v = decide(state, CFG, 90 * Mi, 1000 * Mi, [SVC, HOG], now=5.0)
    assert v.met and v.under_pressure and v.victim == HOG and v.threshold == 100 * Mi
    assert state == PressureState(met_at=5.0, reclaiming=True)


def test_decide_evicts_nothing_while_an_eviction_is_still_going() -> None:
    _, v = decide(PressureState(), CFG, 10 * Mi, 1000 * Mi, [SVC], now=0.0, evicting=True)
    assert v.met and v.victim is None


def test_minimum_reclaim_keeps_the_threshold_met_until_enough_is_free() -> None:
    state, _ = decide(PressureState(), CFG, 90 * Mi, 1000 * Mi, [HOG], now=0.0)
    state, v = decide(state, CFG, 140 * Mi, 1000 * Mi, [SVC], now=5.0)  # < 100 + 50
    assert v.met and v.victim == SVC
    state, v = decide(state, CFG, 150 * Mi, 1000 * Mi, [], now=10.0)
    assert not v.met and v.under_pressure
    _, v = decide(state, CFG, 140 * Mi, 1000 * Mi, [SVC], now=15.0)  # no longer reclaiming
    assert not v.met and v.victim is None


def test_pressure_is_reported_until_the_transition_period_has_passed() -> None:
    state, v = decide(PressureState(), CFG, 0, 1000 * Mi, [], now=100.0)
    assert v.under_pressure
    for now in (105.0, 129.9):
        state, v = decide(state, CFG, 900 * Mi, 1000 * Mi, [], now=now)
        assert not v.met and v.under_pressure
    state, v = decide(state, CFG, 900 * Mi, 1000 * Mi, [], now=130.0)
    assert not v.under_pressure
    state, v = decide(state, CFG, 0, 1000 * Mi, [], now=131.0)  # met again: True at once
    assert v.under_pressure and state.met_at == 131.0


# -- what the node shows -------------------------------------------------------------------------


def test_with_condition_sets_memory_pressure_and_keeps_the_transition_time() -> None:
    ready = {"type": "Ready", "status": "True"}
    on = with_condition([ready], True, 1_800_000_000.0)
    assert on is not None and on[0] == ready
    assert on[1]["type"] == CONDITION and on[1]["status"] == "True"
    assert on[1]["reason"] == "AgentHasInsufficientMemory"
    assert with_condition(on, True, 1_800_000_100.0) is None  # already says so
    off = with_condition(on, False, 1_800_000_100.0)
    assert off is not None and off[1]["reason"] == "AgentHasSufficientMemory"
    assert off[1]["lastTransitionTime"] != on[1]["lastTransitionTime"]


def test_with_taint_adds_and_removes_only_its_own() -> None:
    other = {"key": "quaymaster.io/repair", "effect": "NoSchedule"}
    added = with_taint([other], True, "2027-01-15T08:00:00Z")
    mine = {"key": TAINT_KEY, "effect": "NoSchedule", "timeAdded": "2027-01-15T08:00:00Z"}
    assert added == [other, mine]
    assert with_taint(added or [], True, "x") is None
    assert with_taint(added or [], False, "x") == [other]
    assert with_taint([other], False, "x") is None


def test_eviction_message_names_the_containers_above_their_requests() -> None:
    _, v = decide(PressureState(), CFG, 80 * Mi, 1000 * Mi, [HOG], now=0.0)
    text = eviction_message(v, [("big", 700 * Mi, 0), ("small", 10 * Mi, 64 * Mi)])
    assert text.startswith("The node was low on resource: memory. ")
    assert "Threshold quantity: 102400Ki, available: 81920Ki." in text
    assert "Container big was using 716800Ki, request is 0Ki" in text
    assert "small" not in text


def test_signals(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:  1000 kB\nMemFree:  10 kB\nMemAvailable:  300 kB\n")
    assert MeminfoSignal(meminfo).read(12345) == (300 * 1024, 1000 * 1024)
    assert PodsSignal(1000).read(400) == (600, 1000)


# -- a worker told to go, and the monitor ------------------------------------------------------


class StatusApi:
    def __init__(self, pod: Obj) -> None:
        self.pod = copy.deepcopy(pod)
        self.statuses: list[Obj] = []

    async def get(self, namespace: str, name: str) -> Obj:
        return copy.deepcopy(self.pod)

    async def write_status(self, pod: Obj, new_status: Obj) -> Obj:
        self.statuses.append(copy.deepcopy(new_status))
        self.pod["status"] = copy.deepcopy(new_status)
        self.pod["metadata"]["resourceVersion"] = str(int(pod["metadata"]["resourceVersion"]) + 1)
        return copy.deepcopy(self.pod)

    async def list_services(self, namespace: str) -> list[Obj]:
        return []

    async def confirm_deleted(self, namespace: str, name: str, uid: str) -> None:
        raise AssertionError("an evicted pod is not deleted by the agent")


async def test_an_evicted_worker_kills_its_containers_and_reports_failed_evicted() -> None:
    body = pod({"command": ["x"]})
    body["metadata"]["resourceVersion"] = "1"
    body["spec"]["terminationGracePeriodSeconds"] = 30
    runtime, api = SimRuntime(), StatusApi(body)
    now = [1_800_000_000.0]
    worker = PodWorker(
        body, runtime, api, CrashLoopBackoff(), clocks=Clocks(lambda: now[0], lambda: now[0])
    )
    await worker.step()
    assert api.statuses[-1]["phase"] == "Running"
    worker.evict("The node was low on resource: memory.")
    worker.evict("a second call changes nothing")
    await worker.step()
    assert worker.finished and runtime.containers() == []
    final = api.statuses[-1]
    assert (final["phase"], final["reason"]) == ("Failed", "Evicted")
    assert final["message"] == "The node was low on resource: memory."
    target = next(c for c in final["conditions"] if c["type"] == "DisruptionTarget")
    assert (target["status"], target["reason"]) == ("True", "TerminationByAgent")
    ended = final["containerStatuses"][0]["state"]["terminated"]
    assert ended["exitCode"] == 137  # no grace period: SIGKILL, not the 30 s SIGTERM


@dataclass
class FakeWorker:
    uid: str
    pod: Obj
    evictions: list[str] = field(default_factory=list)

    @property
    def stopping(self) -> bool:
        return bool(self.evictions)

    def evict(self, message: str) -> None:
        self.evictions.append(message)


async def test_monitor_evicts_one_pod_per_reading_and_waits_for_it_to_go() -> None:
    runtime = SimRuntime()
    workers: dict[str, FakeWorker] = {}
    pods = (("svc", res(BOTH, BOTH), 100), ("hog", {}, 600), ("b", res({"memory": "10Mi"}), 200))
    for name, resources, usage in pods:
        body = pod({"command": ["x"], **resources})
        body["metadata"].update(name=name, uid=name)
        workers[name] = FakeWorker(name, body)
        await runtime.start(container_spec(name, body["spec"]["containers"][0]))
        runtime.set_usage(name, "c0", Usage(usage * Mi, 0))
    clock = [0.0]
    cfg = EvictionConfig(Threshold(200 * Mi), interval=1.0, transition_period=10.0)
    monitor = PressureMonitor(cfg, PodsSignal(1000 * Mi), None, "n", mono=lambda: clock[0])
    v = await monitor.tick(workers, runtime)
    assert v is not None and v.available == 100 * Mi and v.victim is not None
    assert monitor.evicted == ["hog"] and workers["hog"].evictions
    assert await monitor.tick(workers, runtime) is None  # not due yet
    clock[0] = 1.0
    v = await monitor.tick(workers, runtime)
    assert v is not None and v.met and v.victim is None  # the hog's worker has not finished
    del workers["hog"]
    await runtime.cleanup("hog")
    clock[0] = 2.0
    v = await monitor.tick(workers, runtime)
    assert v is not None and not v.met and v.under_pressure and monitor.evicted == ["hog"]
    clock[0] = 12.0
    v = await monitor.tick(workers, runtime)
    assert v is not None and not v.under_pressure
