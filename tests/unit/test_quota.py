"""Quota arithmetic: scopes, charges, the refusal's words, and the status controller's fixpoint."""

from __future__ import annotations

from typing import Any

import pytest

from app.core import quota
from app.core.controllers import quota as quota_controller
from app.core.quota import PodFacts, Usage

Obj = dict[str, Any]
NOW = 1_800_000_000.0


def rq(hard: Obj | None = None, scopes: list[str] | None = None, exprs: Any = None) -> Obj:
    spec: Obj = {"hard": hard or {"pods": "10"}}
    if scopes is not None:
        spec["scopes"] = scopes
    if exprs is not None:
        spec["scopeSelector"] = {"matchExpressions": exprs}
    return {
        "kind": "ResourceQuota",
        "metadata": {"name": "team-a-prod", "namespace": "team-a", "uid": "q1"},
        "spec": spec,
    }


def container(requests: Obj | None = None, limits: Obj | None = None) -> Obj:
    res: Obj = {}
    if requests is not None:
        res["requests"] = requests
    if limits is not None:
        res["limits"] = limits
    return {"name": "c", "image": "busybox", "resources": res}


def pod(*containers: Obj, init: list[Obj] | None = None, **spec: Any) -> Obj:
    body: Obj = {"containers": list(containers) or [container()], **spec}
    if init is not None:
        body["initContainers"] = init
    return {"kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"}, "spec": body}


BURSTABLE = container({"cpu": "100m"})
PROD = PodFacts(priority=2000, priority_class="prod")
BATCH = PodFacts(priority=10, priority_class="batch")
LOW = PodFacts(priority=-5)
NONE = PodFacts()


def expr(scope: str, op: str, *values: str) -> Obj:
    e: Obj = {"scopeName": scope, "operator": op}
    if values:
        e["values"] = list(values)
    return e


SCOPE_CASES = [
    # (quota, facts, applies)
    (rq(), NONE, True),
    (rq(scopes=["Terminating"]), PodFacts(terminating=True), True),
    (rq(scopes=["Terminating"]), NONE, False),
    (rq(scopes=["NotTerminating"]), NONE, True),
    (rq(scopes=["NotTerminating"]), PodFacts(terminating=True), False),
    (rq(scopes=["BestEffort"]), PodFacts(best_effort=True), True),
    (rq(scopes=["BestEffort"]), NONE, False),
    (rq(scopes=["NotBestEffort"]), NONE, True),
    (rq(scopes=["NotBestEffort"]), PodFacts(best_effort=True), False),
    (rq(scopes=["PriorityClass"]), PROD, True),
    (rq(scopes=["PriorityClass"]), NONE, False),
    (rq(scopes=["CrossNamespacePodAffinity"]), PodFacts(cross_namespace=True), True),
    (rq(scopes=["CrossNamespacePodAffinity"]), NONE, False),
    (rq(exprs=[expr("PriorityBand", "In", "production")]), PROD, True),
    (rq(exprs=[expr("PriorityBand", "In", "production")]), BATCH, False),
    (rq(exprs=[expr("PriorityBand", "In", "batch")]), NONE, True),  # no priority: batch
    (rq(exprs=[expr("PriorityBand", "In", "best-effort")]), LOW, True),
    (rq(exprs=[expr("PriorityBand", "NotIn", "production")]), BATCH, True),
    (rq(exprs=[expr("PriorityBand", "NotIn", "production")]), PROD, False),
    (rq(exprs=[expr("PriorityBand", "NotIn", "production", "batch")]), LOW, True),
    (rq(exprs=[expr("PriorityBand", "Exists")]), NONE, True),
    (rq(exprs=[expr("PriorityClass", "In", "prod", "gold")]), PROD, True),
    (rq(exprs=[expr("PriorityClass", "In", "prod")]), BATCH, False),
    (rq(exprs=[expr("PriorityClass", "In", "prod")]), NONE, False),
    (rq(exprs=[expr("PriorityClass", "NotIn", "prod")]), BATCH, True),
    (rq(exprs=[expr("PriorityClass", "NotIn", "prod")]), NONE, True),
    (rq(exprs=[expr("PriorityClass", "NotIn", "prod")]), PROD, False),
    (rq(exprs=[expr("PriorityClass", "DoesNotExist")]), NONE, True),
    (rq(exprs=[expr("PriorityClass", "DoesNotExist")]), PROD, False),
    (rq(exprs=[expr("Terminating", "DoesNotExist")]), NONE, True),
    # scopes and expressions are ANDed
    (rq(scopes=["NotTerminating"], exprs=[expr("PriorityBand", "In", "production")]), PROD, True),
    (
        rq(scopes=["Terminating"], exprs=[expr("PriorityBand", "In", "production")]),
        PROD,
        False,
    ),
]


@pytest.mark.parametrize(("q", "facts", "expected"), SCOPE_CASES)
def test_scope_matching(q: Obj, facts: PodFacts, expected: bool) -> None:
    assert quota.applies(q, facts) is expected


FACT_CASES = [
    (pod(), PodFacts(best_effort=True)),
    (pod(BURSTABLE), NONE),
    (pod(container(limits={"memory": "1Gi"})), NONE),
    (pod(init=[BURSTABLE]), NONE),  # an init container's request makes it not best-effort
    (pod(container({"nvidia.com/gpu": "1"})), PodFacts(best_effort=True)),
    (pod(BURSTABLE, activeDeadlineSeconds=60), PodFacts(terminating=True)),
    (
        pod(BURSTABLE, priority=2000, priorityClassName="prod"),
        PodFacts(priority=2000, priority_class="prod"),
    ),
    (
        pod(
            BURSTABLE,
            affinity={
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {"topologyKey": "zone", "namespaceSelector": {}}
                    ]
                }
            },
        ),
        PodFacts(cross_namespace=True),
    ),
    (
        pod(
            BURSTABLE,
            affinity={
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 1, "podAffinityTerm": {"topologyKey": "z", "namespaces": ["b"]}}
                    ]
                }
            },
        ),
        PodFacts(cross_namespace=True),
    ),
]


@pytest.mark.parametrize(("p", "facts"), FACT_CASES)
def test_pod_facts(p: Obj, facts: PodFacts) -> None:
    assert quota.pod_facts(p) == facts


CHARGE_CASES = [
    ("no requests", pod(), Usage(pods=1)),
    (
        "containers summed",
        pod(
            container({"cpu": "250m", "memory": "1Gi"}), container({"cpu": "1", "memory": "512Mi"})
        ),
        Usage(pods=1, cpu_milli=1250, memory_bytes=1536 * 2**20),
    ),
    (
        "init container larger than the sum wins",
        pod(container({"cpu": "500m"}), container({"cpu": "500m"}), init=[container({"cpu": "2"})]),
        Usage(pods=1, cpu_milli=2000),
    ),
    (
        "init containers by max, not summed",
        pod(
            container({"cpu": "1500m"}),
            init=[container({"cpu": "1"}), container({"cpu": "1"})],
        ),
        Usage(pods=1, cpu_milli=1500),
    ),
    (
        "per resource independently",
        pod(container({"cpu": "2", "memory": "1Gi"}), init=[container({"memory": "4Gi"})]),
        Usage(pods=1, cpu_milli=2000, memory_bytes=4 * 2**30),
    ),
    (
        "missing request in one container",
        pod(container({"cpu": "100m"}), container({"memory": "64Mi"})),
        Usage(pods=1, cpu_milli=100, memory_bytes=64 * 2**20),
    ),
    (
        "gpus",
        pod(container({"nvidia.com/gpu": "2"}), init=[container({"nvidia.com/gpu": "1"})]),
        Usage(pods=1, gpu=2),
    ),
    (
        "limits",
        pod(container({"cpu": "1"}, {"cpu": "2", "memory": "1Gi"}), container(limits={"cpu": "1"})),
        Usage(pods=1, cpu_milli=1000, limit_cpu_milli=3000, limit_memory_bytes=2**30),
    ),
    ("fractions round up", pod(container({"cpu": "0.0001"})), Usage(pods=1, cpu_milli=1)),
    ("unreadable amount charges nothing", pod(container({"cpu": "lots"})), Usage(pods=1)),
]


@pytest.mark.parametrize(("label", "p", "charge"), CHARGE_CASES, ids=[c[0] for c in CHARGE_CASES])
def test_pod_charge(label: str, p: Obj, charge: Usage) -> None:
    assert quota.pod_charge(p) == charge


@pytest.mark.parametrize(
    ("meta", "status", "counted"),
    [
        ({}, {}, True),
        ({}, {"phase": "Running"}, True),
        ({}, {"phase": "Succeeded"}, False),
        ({}, {"phase": "Failed"}, False),
        ({"deletionTimestamp": "2026-11-29T10:00:00Z"}, {"phase": "Running"}, False),
    ],
)
def test_what_counts(meta: Obj, status: Obj, counted: bool) -> None:
    p = pod(BURSTABLE)
    p["metadata"].update(meta)
    p["status"] = status
    assert quota.counts(p) is counted


def test_refusal_in_kubernetes_words() -> None:
    q = rq({"requests.cpu": "60", "pods": "100", "requests.memory": "1Gi"})
    used = Usage(pods=10, cpu_milli=59_000, memory_bytes=2**29)
    asked = Usage(pods=1, cpu_milli=2000, memory_bytes=2**20)
    over = quota.exceeded(q, used, asked)
    assert over == ["requests.cpu"]
    err = quota.refusal(q, used, asked, over)
    assert err.code == 403 and err.reason == "Forbidden"
    assert err.message == (
        "exceeded quota: team-a-prod, requested: requests.cpu=2, used: requests.cpu=59, "
        "limited: requests.cpu=60"
    )
    assert [c.field for c in err.causes] == ["spec.hard[requests.cpu]"]
    assert err.causes[0].reason == "ExceededQuota"


def test_refusal_names_every_exceeded_resource() -> None:
    q = rq({"pods": "2", "limits.memory": "1Gi", "requests.cpu": "500m"})
    used = Usage(pods=2, cpu_milli=400, limit_memory_bytes=2**30)
    asked = Usage(pods=1, cpu_milli=100, limit_memory_bytes=2**20)
    over = quota.exceeded(q, used, asked)
    assert over == ["limits.memory", "pods"]
    assert quota.refusal(q, used, asked, over).message == (
        "exceeded quota: team-a-prod, requested: limits.memory=1Mi,pods=1, "
        "used: limits.memory=1Gi,pods=2, limited: limits.memory=1Gi,pods=2"
    )


@pytest.mark.parametrize(
    ("hard", "used", "asked", "over"),
    [
        ({"pods": "5"}, Usage(pods=4), Usage(pods=1), []),  # reaching the limit is allowed
        ({"pods": "5"}, Usage(pods=5), Usage(pods=1), ["pods"]),
        ({"count/pods": "5"}, Usage(pods=5), Usage(pods=1), ["count/pods"]),
        ({"cpu": "1500m"}, Usage(cpu_milli=1000), Usage(pods=1, cpu_milli=500), []),
        ({"cpu": "1.5"}, Usage(cpu_milli=1000), Usage(pods=1, cpu_milli=501), ["cpu"]),
        ({"memory": "1Gi"}, Usage(memory_bytes=2**30), Usage(pods=1), []),  # asks none
        ({"nvidia.com/gpu": "1"}, Usage(gpu=1), Usage(pods=1, gpu=1), ["nvidia.com/gpu"]),
        ({"requests.nvidia.com/gpu": "2"}, Usage(gpu=1), Usage(pods=1, gpu=1), []),
        ({"services": "0", "pods": "9"}, Usage(), Usage(pods=1), []),  # not counted here
        # lowered below usage: a pod that charges it is refused, others still pass
        ({"pods": "9", "requests.cpu": "1"}, Usage(cpu_milli=3000), Usage(pods=1), []),
    ],
)
def test_exceeded(hard: Obj, used: Usage, asked: Usage, over: list[str]) -> None:
    assert quota.exceeded(rq(hard), used, asked) == over


# ------------------------------------------------------------------------------ controller


def test_status_reports_used_against_hard() -> None:
    q = rq({"pods": "10", "requests.cpu": "4", "limits.memory": "8Gi", "services": "3"})
    plan = quota_controller.reconcile(
        q, Usage(pods=3, cpu_milli=1500, limit_memory_bytes=3 * 2**30), NOW
    )
    assert plan.status == {
        "hard": {"pods": "10", "requests.cpu": "4", "limits.memory": "8Gi", "services": "3"},
        "used": {"limits.memory": "3Gi", "pods": "3", "requests.cpu": "1500m"},
    }


@pytest.mark.parametrize(
    "used",
    [Usage(), Usage(pods=7, cpu_milli=2000, memory_bytes=123, gpu=1, limit_cpu_milli=9)],
)
def test_status_fixpoint(used: Usage) -> None:
    q = rq({"pods": "10", "cpu": "4", "memory": "1Gi", "nvidia.com/gpu": "2", "limits.cpu": "8"})
    plan = quota_controller.reconcile(q, used, NOW)
    assert plan.status is not None and not plan.creates and not plan.deletes
    again = quota_controller.reconcile({**q, "status": plan.status}, used, NOW)
    assert again.empty


def test_status_follows_a_changed_hard() -> None:
    q = rq({"pods": "10"})
    q["status"] = quota_controller.reconcile(q, Usage(pods=2), NOW).status
    q["spec"]["hard"] = {"pods": "1"}
    plan = quota_controller.reconcile(q, Usage(pods=2), NOW)
    assert plan.status == {"hard": {"pods": "1"}, "used": {"pods": "2"}}


def test_deleting_quota_is_left_alone() -> None:
    q = rq()
    q["metadata"]["deletionTimestamp"] = "2026-11-29T10:00:00Z"
    assert quota_controller.reconcile(q, Usage(pods=1), NOW).empty


def test_describe_shows_used_next_to_hard() -> None:
    from app.cli.printers import describe
    from app.core.kinds import BY_KIND

    q = rq({"pods": "10", "requests.cpu": "60", "services": "5"})
    q["status"] = quota_controller.reconcile(q, Usage(pods=3, cpu_milli=1500), NOW).status
    page = describe(BY_KIND["ResourceQuota"], q, []).splitlines()
    at = page.index("Usage:")
    rows = [line.split() for line in page[at + 3 : at + 6]]
    assert rows == [["pods", "3", "10"], ["requests.cpu", "1500m", "60"], ["services", "-", "5"]]
