"""The pod status the agent reports: phase per restart policy, conditions, coalesced writes."""

from __future__ import annotations

from typing import Any

import pytest

from agent import probes as pr
from agent.status import (
    Coalescer,
    ContainerView,
    PodView,
    Running,
    Terminated,
    Waiting,
    build_status,
    format_time,
    needs_write,
    phase,
)

T0 = 1_800_000_000.0


def pod(*names: str, policy: str = "Always", status: dict[str, Any] | None = None) -> dict:
    containers = [{"name": n, "image": f"{n}:1"} for n in names or ("app",)]
    return {
        "spec": {"containers": containers, "restartPolicy": policy},
        "status": status if status is not None else {},
    }


def running(name: str = "app", **kw: Any) -> ContainerView:
    return ContainerView(name, Running(T0), **kw)


def exited(code: int, name: str = "app", **kw: Any) -> ContainerView:
    reason = "Completed" if code == 0 else "Error"
    return ContainerView(name, Terminated(code, reason, T0 + 5, started_at=T0), **kw)


CRASHED = Terminated(1, "Error", T0 + 5, started_at=T0)
BACKOFF = ContainerView("app", Waiting("CrashLoopBackOff"), restart_count=1, last_state=CRASHED)

PHASES = [
    # (restart policy, containers, terminating, phase)
    ("Always", [ContainerView("app", Waiting())], False, "Pending"),
    ("Always", [running()], False, "Running"),
    ("Always", [exited(0)], False, "Running"),
    ("Always", [exited(1)], False, "Running"),
    ("Always", [BACKOFF], False, "Running"),
    ("OnFailure", [exited(0)], False, "Succeeded"),
    ("OnFailure", [exited(1)], False, "Running"),
    ("OnFailure", [BACKOFF], False, "Running"),
    ("OnFailure", [exited(0, "a"), exited(1, "b")], False, "Running"),
    ("Never", [exited(0)], False, "Succeeded"),
    ("Never", [exited(137)], False, "Failed"),
    ("Never", [exited(0, "a"), exited(2, "b")], False, "Failed"),
    ("Never", [exited(0, "a"), running("b")], False, "Running"),
    ("Never", [running("a"), ContainerView("b", Waiting())], False, "Pending"),
    ("Always", [exited(0)], True, "Succeeded"),
    ("Always", [exited(143)], True, "Failed"),
    ("Always", [running()], True, "Running"),
    ("Always", [], False, "Pending"),
]


@pytest.mark.parametrize(("policy", "containers", "terminating", "expected"), PHASES)
def test_phase_per_restart_policy(
    policy: str, containers: list[ContainerView], terminating: bool, expected: str
) -> None:
    assert phase(policy, containers, terminating) == expected


def conditions(status: dict) -> dict[str, dict]:
    return {c["type"]: c for c in status["conditions"]}


def test_running_ready_pod_status_shape() -> None:
    view = PodView((running(ready=True, started=True, container_id="proc://42"),), T0, pod_ip="::1")
    status = build_status(pod(), view, T0 + 1)
    assert status["phase"] == "Running"
    assert status["startTime"] == format_time(T0) == "2027-01-15T08:00:00Z"
    assert status["podIP"] == "::1" and status["podIPs"] == [{"ip": "::1"}]
    assert status["containerStatuses"] == [
        {
            "name": "app",
            "image": "app:1",
            "state": {"running": {"startedAt": format_time(T0)}},
            "lastState": {},
            "ready": True,
            "restartCount": 0,
            "started": True,
            "containerID": "proc://42",
        }
    ]
    conds = conditions(status)
    assert {k: v["status"] for k, v in conds.items()} == {
        "PodScheduled": "True",
        "Initialized": "True",
        "ContainersReady": "True",
        "Ready": "True",
    }
    assert all(c["lastTransitionTime"] == format_time(T0 + 1) for c in conds.values())


def test_restart_counts_and_last_termination_state() -> None:
    view = PodView((BACKOFF,), T0)
    cs = build_status(pod(), view, T0)["containerStatuses"][0]
    assert cs["state"] == {"waiting": {"reason": "CrashLoopBackOff"}}
    assert cs["lastState"] == {
        "terminated": {
            "exitCode": 1,
            "reason": "Error",
            "startedAt": format_time(T0),
            "finishedAt": format_time(T0 + 5),
        }
    }
    assert cs["restartCount"] == 1 and cs["ready"] is False and cs["started"] is False


def test_unknown_containers_are_being_created_in_spec_order() -> None:
    status = build_status(pod("a", "b"), PodView((running("b", ready=True),)), T0)
    assert [c["name"] for c in status["containerStatuses"]] == ["a", "b"]
    assert status["phase"] == "Pending"
    assert conditions(status)["Ready"]["message"] == "containers with unready status: [a]"


def test_transition_time_kept_while_status_unchanged() -> None:
    view = PodView((running(ready=False),), T0)
    first = build_status(pod(), view, T0)
    second = build_status(pod(status=first), view, T0 + 30)
    assert second == first and not needs_write(first, second)
    ready = build_status(pod(status=second), PodView((running(ready=True),), T0), T0 + 60)
    conds = conditions(ready)
    assert conds["Ready"]["lastTransitionTime"] == format_time(T0 + 60)
    assert conds["ContainersReady"]["lastTransitionTime"] == format_time(T0 + 60)
    assert conds["Initialized"]["lastTransitionTime"] == format_time(T0)
    assert conds["PodScheduled"]["lastTransitionTime"] == format_time(T0)
    assert "reason" not in conds["Ready"]


def test_conditions_of_others_are_kept_in_place() -> None:
    scheduled = {
        "type": "PodScheduled",
        "status": "True",
        "lastTransitionTime": "2020-01-01T00:00:00Z",
    }
    disruption = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
    stale_ready = {"type": "Ready", "status": "False", "reason": "NodeUnreachable"}
    old = {"conditions": [scheduled, stale_ready, disruption], "qosClass": "BestEffort"}
    status = build_status(pod(status=old), PodView((running(ready=True),)), T0)
    assert status["conditions"][0] == scheduled
    assert status["conditions"][2] == disruption
    assert status["conditions"][1]["status"] == "True"  # the agent's word replaces the stale one
    assert [c["type"] for c in status["conditions"][3:]] == ["Initialized", "ContainersReady"]
    assert status["qosClass"] == "BestEffort"
    assert old["conditions"][1] == stale_ready  # the input is not mutated


def test_readiness_gates_hold_ready_back() -> None:
    p = pod(status={"conditions": [{"type": "example.com/lb", "status": "False"}]})
    p["spec"]["readinessGates"] = [{"conditionType": "example.com/lb"}]
    conds = conditions(build_status(p, PodView((running(ready=True),)), T0))
    assert conds["ContainersReady"]["status"] == "True"
    assert conds["Ready"]["status"] == "False"
    assert conds["Ready"]["reason"] == "ReadinessGatesNotReady"


def test_completed_pod_is_not_ready_with_reason_pod_completed() -> None:
    status = build_status(pod(policy="Never"), PodView((exited(0),)), T0)
    assert status["phase"] == "Succeeded"
    assert conditions(status)["Ready"]["reason"] == "PodCompleted"
    term = status["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 0 and term["reason"] == "Completed"


def test_oom_killed_reason_and_signal_reach_the_status() -> None:
    oom = Terminated(137, "OOMKilled", T0 + 2, started_at=T0, signal=9)
    status = build_status(pod(policy="Never"), PodView((ContainerView("app", oom),)), T0)
    assert status["phase"] == "Failed"
    assert status["containerStatuses"][0]["state"]["terminated"]["reason"] == "OOMKilled"
    assert status["containerStatuses"][0]["state"]["terminated"]["signal"] == 9


def test_start_time_is_set_once() -> None:
    first = build_status(pod(), PodView((running(),), start_time=T0), T0)
    later = build_status(pod(status=first), PodView((running(),), start_time=T0 + 99), T0 + 99)
    assert later["startTime"] == format_time(T0)


def test_needs_write_ignores_fields_the_agent_does_not_own() -> None:
    status = build_status(pod(), PodView((running(),)), T0)
    assert not needs_write(status, {**status, "nominatedNodeName": "n2", "qosClass": "Guaranteed"})
    moved = {**status, "conditions": [*status["conditions"], {"type": "X", "status": "True"}]}
    assert not needs_write(status, moved)
    assert needs_write(status, {**status, "phase": "Failed"})
    assert needs_write({}, status)


# ---------------------------------------------------------------- write coalescing


class Agent:
    """A pod loop in miniature: probe results drive the view, the coalescer decides writes."""

    def __init__(self, specs: dict) -> None:
        self.pod = pod()
        self.coalescer = Coalescer(settle=1.0)
        self.writes: list[dict] = []
        self.specs = specs
        self.cp: pr.ContainerProbes | None = None

    def sync(self, container: ContainerView, now: float) -> None:
        candidate = build_status(self.pod, PodView((container,), start_time=T0), now)
        if self.coalescer.offer(self.pod["status"], candidate, now):
            self.writes.append(candidate)
            self.pod = {**self.pod, "status": candidate}

    def probe(self, kind: pr.ProbeKind, result: pr.ProbeResult, now: float) -> None:
        assert self.cp is not None
        self.cp, ticket = pr.launch(self.cp, kind, now)
        self.cp, _ = pr.observe(self.cp, ticket, result, now)
        self.sync(self.view(), now)

    def view(self) -> ContainerView:
        assert self.cp is not None
        return ContainerView("app", Running(T0), ready=self.cp.ready, started=self.cp.started)


OK = pr.ProbeResult(pr.Outcome.SUCCESS)
FAIL = pr.ProbeResult(pr.Outcome.FAILURE)


def test_a_pod_start_costs_two_writes_not_one_per_probe() -> None:
    agent = Agent({"readiness": pr.ProbeSpec("readiness", pr.ExecAction(("x",)), period=1)})
    agent.sync(ContainerView("app", Waiting()), T0)  # accepted, container being created
    agent.sync(ContainerView("app", Waiting()), T0 + 0.3)
    agent.cp = pr.start(agent.specs, T0 + 0.5)
    agent.sync(agent.view(), T0 + 0.5)
    for i in range(5):
        agent.probe("readiness", FAIL, T0 + 1 + i)
    for i in range(20):
        agent.probe("readiness", OK, T0 + 6 + i)
    assert [w["phase"] for w in agent.writes] == ["Running", "Running"]
    assert [conditions(w)["Ready"]["status"] for w in agent.writes] == ["False", "True"]


def test_readiness_flip_costs_one_write_each_way() -> None:
    agent = Agent({"readiness": pr.ProbeSpec("readiness", pr.ExecAction(("x",)), period=1)})
    agent.cp = pr.start(agent.specs, T0)
    agent.sync(agent.view(), T0)
    sequence = [OK] * 3 + [FAIL] * 5 + [OK] * 4 + [FAIL, FAIL, OK]
    for i, result in enumerate(sequence):
        agent.probe("readiness", result, T0 + 1 + i)
    ready = [conditions(w)["Ready"]["status"] for w in agent.writes]
    assert ready == ["False", "True", "False", "True"]


def test_a_slow_creation_is_written_after_the_settle_time() -> None:
    c = Coalescer(settle=1.0)
    creating = build_status(pod(), PodView((ContainerView("app", Waiting()),)), T0)
    assert not c.offer({}, creating, T0)
    assert c.wake_at() == T0 + 1
    assert not c.offer({}, creating, T0 + 0.9)
    assert c.offer({}, creating, T0 + 1.0)
    assert c.wake_at() is None
    assert not c.offer(creating, creating, T0 + 2)


def test_failures_are_written_at_once() -> None:
    c = Coalescer(settle=60)
    crashed = build_status(pod(), PodView((BACKOFF,)), T0)
    assert c.offer({}, crashed, T0)
    pulling = build_status(pod(), PodView((ContainerView("app", Waiting("ErrImagePull")),)), T0)
    assert c.offer({}, pulling, T0)
