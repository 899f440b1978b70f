"""The probe state machine on a fake clock: parsing, schedule, thresholds, startup gating."""

from __future__ import annotations

from typing import Any

import pytest

from agent.probes import (
    LIVENESS_FAILED,
    STARTUP_FAILED,
    ContainerProbes,
    ExecAction,
    HttpGetAction,
    Outcome,
    ProbeKind,
    ProbeResult,
    ProbeSpec,
    ProbeSpecError,
    Ready,
    Restart,
    TcpAction,
    Verdict,
    due,
    launch,
    next_wakeup,
    observe,
    parse_container,
    parse_probe,
    start,
)

OK = ProbeResult(Outcome.SUCCESS)
FAIL = ProbeResult(Outcome.FAILURE, "exit code 1")
TIMEOUT = ProbeResult(Outcome.TIMEOUT, "timed out after 1s")
RESULTS = {"ok": OK, "fail": FAIL, "timeout": TIMEOUT}
CMD = ExecAction(("true",))


def spec(kind: ProbeKind, **kw: Any) -> ProbeSpec:
    return ProbeSpec(kind=kind, action=CMD, **kw)


def run(
    cp: ContainerProbes, kind: ProbeKind, result: ProbeResult, now: float
) -> tuple[ContainerProbes, list[Verdict]]:
    """Launch ``kind`` at ``now`` (it must be due) and feed its result straight back."""
    assert kind in due(cp, now), f"{kind} not due at {now}: {due(cp, now)}"
    cp, ticket = launch(cp, kind, now)
    return observe(cp, ticket, result, now)


# ---------------------------------------------------------------- parsing


def test_parse_defaults_and_kubernetes_fields() -> None:
    container = {
        "name": "web",
        "ports": [{"name": "http", "containerPort": 8080}],
        "readinessProbe": {
            "httpGet": {
                "path": "healthz",
                "port": "http",
                "scheme": "https",
                "httpHeaders": [{"name": "X-A", "value": "b"}],
            }
        },
        "livenessProbe": {"tcpSocket": {"port": 9000}, "periodSeconds": 5, "failureThreshold": 1},
        "startupProbe": {"exec": {"command": ["cat", "/tmp/up"]}, "initialDelaySeconds": 2},
    }
    probes = parse_container(container)
    assert probes["readiness"] == ProbeSpec(
        "readiness", HttpGetAction(8080, "/healthz", None, "HTTPS", (("X-A", "b"),))
    )
    assert probes["liveness"] == ProbeSpec(
        "liveness", TcpAction(9000), period=5, failure_threshold=1
    )
    assert probes["startup"] == ProbeSpec("startup", ExecAction(("cat", "/tmp/up")), 2)
    assert probes["startup"].period == 10 and probes["startup"].timeout == 1
    assert parse_container({"name": "plain"}) == {}


@pytest.mark.parametrize(
    ("kind", "raw", "error"),
    [
        ("liveness", {"exec": {"command": ["x"]}, "successThreshold": 2}, "must be 1"),
        ("startup", {"exec": {"command": ["x"]}, "successThreshold": 3}, "must be 1"),
        ("readiness", {"httpGet": {"port": "nope"}}, "named container port"),
        ("readiness", {"tcpSocket": {"port": 70000}}, "out of range"),
        ("readiness", {"exec": {"command": []}}, "without a command"),
        ("readiness", {"grpc": {"port": 1}}, "no supported handler"),
        ("readiness", {"exec": {"command": ["x"]}, "periodSeconds": 0}, "periodSeconds"),
    ],
)
def test_parse_rejects(kind: ProbeKind, raw: dict[str, Any], error: str) -> None:
    with pytest.raises(ProbeSpecError, match=error):
        parse_probe(kind, raw, {})


def test_readiness_may_need_several_successes() -> None:
    raw = {"exec": {"command": ["x"]}, "successThreshold": 3}
    assert parse_probe("readiness", raw, {}).success_threshold == 3


# ---------------------------------------------------------------- schedule


def test_first_probe_after_initial_delay_then_every_period() -> None:
    cp = start({"readiness": spec("readiness", initial_delay=5, period=10)}, started_at=100)
    assert due(cp, 104.9) == []
    assert next_wakeup(cp) == 105
    cp, _ = run(cp, "readiness", FAIL, 105)
    assert next_wakeup(cp) == 115
    assert due(cp, 114) == []
    cp, _ = run(cp, "readiness", FAIL, 115.5)  # a late launch keeps the phase
    assert next_wakeup(cp) == 125


def test_a_late_launch_skips_missed_ticks_instead_of_bunching() -> None:
    cp = start({"liveness": spec("liveness", period=10)}, started_at=0)
    cp, _ = run(cp, "liveness", OK, 37)
    assert next_wakeup(cp) == 40


def test_an_in_flight_probe_is_not_launched_twice() -> None:
    cp = start({"liveness": spec("liveness", period=1, timeout=5)}, started_at=0)
    cp, ticket = launch(cp, "liveness", 0)
    assert due(cp, 3) == [] and next_wakeup(cp) is None
    cp, _ = observe(cp, ticket, OK, 3)
    assert due(cp, 3) == ["liveness"]


def test_stale_results_are_ignored() -> None:
    specs = {"readiness": spec("readiness", period=1)}
    cp = start(specs, started_at=0)
    cp, old = launch(cp, "readiness", 0)
    restarted = start(specs, started_at=50)  # a new incarnation while the probe ran
    assert observe(restarted, old, OK, 50) == (restarted, [])
    cp, _ = observe(cp, old, FAIL, 0.5)
    assert observe(cp, old, OK, 0.6) == (cp, [])  # the same ticket twice


# ---------------------------------------------------------------- thresholds, table-driven

READINESS_TABLE = [
    # (success threshold, failure threshold, results, verdicts after each result)
    (1, 3, ["ok"], [[Ready(True)]]),
    (1, 3, ["fail", "fail", "fail", "ok"], [[], [], [], [Ready(True)]]),
    (2, 3, ["ok", "ok", "ok"], [[], [Ready(True)], []]),
    (2, 3, ["ok", "fail", "ok", "ok"], [[], [], [], [Ready(True)]]),
    (1, 3, ["ok", "fail", "fail", "fail"], [[Ready(True)], [], [], [Ready(False)]]),
    (1, 3, ["ok", "fail", "fail", "ok", "fail"], [[Ready(True)], [], [], [], []]),
    (1, 2, ["ok", "timeout", "timeout", "ok"], [[Ready(True)], [], [Ready(False)], [Ready(True)]]),
    (1, 1, ["ok", "fail"], [[Ready(True)], [Ready(False)]]),
]


@pytest.mark.parametrize(("succ", "fail", "results", "expected"), READINESS_TABLE)
def test_readiness_thresholds(
    succ: int, fail: int, results: list[str], expected: list[list[Verdict]]
) -> None:
    cp = start({"readiness": spec("readiness", success_threshold=succ, failure_threshold=fail)}, 0)
    assert not cp.ready
    for i, (name, want) in enumerate(zip(results, expected, strict=True)):
        cp, verdicts = run(cp, "readiness", RESULTS[name], i * 10.0)
        assert verdicts == want, f"after result {i} ({name})"
        assert not any(isinstance(v, Restart) for v in verdicts)


LIVENESS_TABLE = [
    (3, ["fail", "fail", "ok", "fail", "fail"], None),
    (3, ["fail", "fail", "fail"], 2),
    (3, ["ok", "timeout", "fail", "timeout"], 3),
    (1, ["ok", "ok", "fail"], 2),
]


@pytest.mark.parametrize(("threshold", "results", "restart_at"), LIVENESS_TABLE)
def test_liveness_restarts_after_consecutive_failures(
    threshold: int, results: list[str], restart_at: int | None
) -> None:
    cp = start({"liveness": spec("liveness", failure_threshold=threshold)}, 0)
    assert cp.ready  # no readiness probe: liveness never touches readiness until a restart
    for i, name in enumerate(results):
        cp, verdicts = run(cp, "liveness", RESULTS[name], i * 10.0)
        if i == restart_at:
            assert verdicts[0] == Ready(False)
            assert isinstance(verdicts[1], Restart) and verdicts[1].reason == LIVENESS_FAILED
            assert f"failed {threshold} times" in verdicts[1].message
        else:
            assert verdicts == [], f"after result {i} ({name})"
    assert cp.restarting == (restart_at is not None)


def test_after_a_restart_verdict_nothing_more_is_probed() -> None:
    cp = start(
        {"liveness": spec("liveness", failure_threshold=1), "readiness": spec("readiness")}, 0
    )
    cp, ready_ticket = launch(cp, "readiness", 0)
    cp, verdicts = run(cp, "liveness", FAIL, 0)
    assert verdicts == [Restart(LIVENESS_FAILED, "liveness probe failed 1 times: exit code 1")]
    assert due(cp, 1000) == [] and next_wakeup(cp) is None
    assert observe(cp, ready_ticket, OK, 1) == (cp, [])


# ---------------------------------------------------------------- startup gating


def gated() -> ContainerProbes:
    return start(
        {
            "startup": spec("startup", period=1, failure_threshold=5),
            "readiness": spec("readiness", initial_delay=3, period=10),
            "liveness": spec("liveness", initial_delay=0, period=10, failure_threshold=1),
        },
        started_at=0,
    )


def test_startup_gates_readiness_and_liveness_until_it_succeeds() -> None:
    cp = gated()
    assert not cp.started and not cp.ready
    assert due(cp, 0) == ["startup"]
    cp, verdicts = run(cp, "startup", FAIL, 0)
    assert verdicts == [] and due(cp, 4) == ["startup"]  # the others stay gated past their delay
    assert next_wakeup(cp) == 1
    cp, verdicts = run(cp, "startup", OK, 4)
    assert cp.started and verdicts == []  # a readiness probe still decides readiness
    assert due(cp, 4) == ["readiness", "liveness"]  # both at once, their delays have passed
    assert due(cp, 100) == ["readiness", "liveness"]  # startup never runs again


def test_startup_success_waits_for_the_others_initial_delay() -> None:
    cp = gated()
    cp, _ = run(cp, "startup", OK, 1)
    assert due(cp, 1) == ["liveness"]
    assert due(cp, 3) == ["readiness", "liveness"]


def test_startup_without_readiness_makes_the_container_ready() -> None:
    cp = start({"startup": spec("startup")}, 0)
    cp, verdicts = run(cp, "startup", OK, 0)
    assert verdicts == [Ready(True)] and cp.started and cp.ready


@pytest.mark.parametrize(("threshold", "fails_before_restart"), [(1, 1), (3, 3), (5, 5)])
def test_startup_that_exhausts_its_failures_restarts(
    threshold: int, fails_before_restart: int
) -> None:
    cp = start({"startup": spec("startup", failure_threshold=threshold, period=1)}, 0)
    verdicts: list[Verdict] = []
    for i in range(fails_before_restart):
        assert verdicts == []
        cp, verdicts = run(cp, "startup", TIMEOUT, float(i))
    assert verdicts == [
        Restart(STARTUP_FAILED, f"startup probe failed {threshold} times: timed out after 1s")
    ]
    assert not cp.started and cp.restarting


def test_no_probes_means_started_and_ready_at_once() -> None:
    cp = start({}, 7)
    assert cp.started and cp.ready and next_wakeup(cp) is None
