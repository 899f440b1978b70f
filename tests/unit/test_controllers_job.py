"""The Job controller as a pure function on a fake clock: completions and parallelism, failure
accounting (disrupted pods never count), deadlines, TTL, Indexed Jobs, suspension, pacing, and
the fixpoint (applying a plan and reconciling again asks for nothing more).

Pods live in memory here; ``summarise`` states in Python what the shell's SQL aggregate
computes, and the integration tests hold the SQL to the same meaning.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from app.core.controllers import job as core
from app.core.controllers.job import Limits, PodSummary, deletions_wanted, reconcile
from app.core.controllers.job_status import condition, format_indexes, parse_indexes
from app.core.controllers.plan import Plan, format_time

T0 = 1_800_000_000.0
_ids = itertools.count()
Obj = dict[str, Any]


def make_job(**spec: Any) -> Obj:
    base: Obj = {
        "completions": 1,
        "parallelism": 1,
        "backoffLimit": 6,
        "completionMode": "NonIndexed",
        "suspend": False,
        "template": {
            "metadata": {"labels": {"app": "j"}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]},
        },
    }
    base.update(spec)
    return {
        "apiVersion": "quaymaster.io/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ns", "uid": "job-uid"},
        "spec": base,
        "status": {},
    }


def pod(
    phase: str = "Pending",
    *,
    node: str | None = None,
    ready: bool = False,
    disrupted: bool = False,
    deleting: bool = False,
    index: int | None = None,
    restarts: int = 0,
) -> Obj:
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    if disrupted:
        conditions.append(
            {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
        )
    meta: Obj = {
        "name": f"p{next(_ids)}",
        "namespace": "ns",
        "uid": f"u{next(_ids)}",
        "annotations": {},
    }
    if index is not None:
        meta["annotations"][core.INDEX_KEY] = str(index)
    if deleting:
        meta["deletionTimestamp"] = format_time(T0)
    return {
        "kind": "Pod",
        "metadata": meta,
        "spec": {"nodeName": node} if node else {},
        "status": {
            "phase": phase,
            "conditions": conditions,
            "containerStatuses": [{"restartCount": restarts}],
        },
    }


def _active(p: Obj) -> bool:
    return not p["metadata"].get("deletionTimestamp") and p["status"]["phase"] not in (
        "Succeeded",
        "Failed",
    )


def _disrupted(p: Obj) -> bool:
    return any(c["type"] == "DisruptionTarget" for c in p["status"]["conditions"])


def _index(p: Obj) -> int | None:
    v = (p["metadata"].get("annotations") or {}).get(core.INDEX_KEY)
    return None if v is None else int(v)


def summarise(pods: list[Obj]) -> PodSummary:
    """What ``app.store.jobs.SUMMARY`` computes, over in-memory pods."""
    act = [p for p in pods if _active(p)]
    return PodSummary(
        active=len(act),
        ready=sum(1 for p in act if p["status"]["conditions"][0]["status"] == "True"),
        unbound=sum(1 for p in act if not p["spec"].get("nodeName")),
        terminating=sum(1 for p in pods if p["metadata"].get("deletionTimestamp") and p in act),
        succeeded=sum(1 for p in pods if p["status"]["phase"] == "Succeeded"),
        failed=sum(1 for p in pods if p["status"]["phase"] == "Failed" and not _disrupted(p)),
        disrupted=sum(1 for p in pods if p["status"]["phase"] == "Failed" and _disrupted(p)),
        restarts=sum(p["status"]["containerStatuses"][0]["restartCount"] for p in act),
        succeeded_indexes=frozenset(
            i for p in pods if p["status"]["phase"] == "Succeeded" and (i := _index(p)) is not None
        ),
        active_indexes=frozenset(i for p in act if (i := _index(p)) is not None),
    )


def candidates(pods: list[Obj], n: int) -> list[Obj]:
    act = [p for p in pods if _active(p)]
    act.sort(key=lambda p: (bool(p["spec"].get("nodeName")), p["metadata"]["name"]))
    return act[:n]


def run(job: Obj, pods: list[Obj], now: float = T0, limits: Limits = Limits()) -> Plan:
    s = summarise(pods)
    return reconcile(job, s, candidates(pods, deletions_wanted(job, s, now)), now, limits)


def apply(job: Obj, pods: list[Obj], plan: Plan) -> tuple[Obj, list[Obj]]:
    gone = {d.uid for d in plan.deletes}
    kept = [p for p in pods if p["metadata"]["uid"] not in gone]
    for c in plan.creates:
        kept.append(pod(index=_index(c)))
    if plan.status is not None:
        job = {**job, "status": plan.status}
    return job, kept


def settle(
    job: Obj, pods: list[Obj], now: float = T0, limits: Limits = Limits()
) -> tuple[Obj, list[Obj]]:
    for _ in range(50):
        plan = run(job, pods, now, limits)
        if plan.empty:
            return job, pods
        job, pods = apply(job, pods, plan)
    raise AssertionError("no fixpoint")


def finish(pods: list[Obj], phase: str, n: int, **kw: Any) -> list[Obj]:
    """The node agent: the first ``n`` active pods end in ``phase``."""
    out, done = [], 0
    for p in pods:
        if done < n and _active(p):
            p = {**p, "status": {**p["status"], "phase": phase}}
            if kw.get("disrupted"):
                p["status"]["conditions"] = [
                    *p["status"]["conditions"],
                    {"type": "DisruptionTarget", "status": "True"},
                ]
            done += 1
        out.append(p)
    return out


def cond(job: Obj, kind: str) -> Obj | None:
    return condition(job.get("status") or {}, kind)


# ------------------------------------------------------------------------------ arithmetic


@pytest.mark.parametrize(
    ("completions", "parallelism", "succeeded", "active", "creates", "deletes"),
    [
        (5, 2, 0, 0, 2, 0),
        (5, 2, 4, 0, 1, 0),  # only the work left
        (5, 2, 3, 2, 0, 0),
        (5, 1, 0, 3, 0, 2),  # parallelism dropped
        (5, 0, 0, 2, 0, 2),  # parallelism 0: suspended in effect
        (None, 3, 0, 0, 3, 0),  # a work queue
        (None, 3, 1, 2, 0, 0),  # one succeeded: start no more, let the rest finish
        (0, 3, 0, 0, 0, 0),
    ],
)
def test_completions_and_parallelism(
    completions: int | None,
    parallelism: int,
    succeeded: int,
    active: int,
    creates: int,
    deletes: int,
) -> None:
    job = make_job(completions=completions, parallelism=parallelism)
    pods = [pod("Succeeded") for _ in range(succeeded)] + [
        pod("Running", node="n") for _ in range(active)
    ]
    plan = run(job, pods)
    assert (len(plan.creates), len(plan.deletes)) == (creates, deletes)


def test_a_job_runs_to_complete_and_then_creates_nothing() -> None:
    job, pods = settle(make_job(completions=5, parallelism=2), [])
    assert len(pods) == 2 and job["status"]["active"] == 2
    assert job["status"]["startTime"] == format_time(T0)
    for _ in range(10):
        job, pods = settle(job, finish(pods, "Succeeded", 1), T0 + 10)
    assert job["status"]["succeeded"] == 5 and job["status"]["active"] == 0
    assert cond(job, "Complete") is not None
    assert job["status"]["completionTime"] == format_time(T0 + 10)
    assert sum(1 for p in pods if p["status"]["phase"] == "Succeeded") == 5
    # a finished Job creates nothing, even if its pods vanish
    assert run(job, [], T0 + 20).empty


def test_new_pods_carry_labels_owner_and_generate_name() -> None:
    plan = run(make_job(), [])
    p = plan.creates[0]
    assert p["metadata"]["generateName"] == "j-"
    assert p["metadata"]["labels"] == {"app": "j", "job-name": "j", "controller-uid": "job-uid"}
    ref = p["metadata"]["ownerReferences"][0]
    assert (ref["kind"], ref["uid"], ref["controller"], ref["blockOwnerDeletion"]) == (
        "Job",
        "job-uid",
        True,
        True,
    )


# ------------------------------------------------------------------------------ failures


def test_failed_pods_are_replaced_and_count_until_the_backoff_limit() -> None:
    job, pods = settle(make_job(completions=1, backoffLimit=2), [])
    for n in range(1, 3):
        job, pods = settle(job, finish(pods, "Failed", 1), T0 + n)
        assert job["status"]["failed"] == n and job["status"]["active"] == 1
        assert cond(job, "Failed") is None
    job, pods = settle(job, finish(pods, "Failed", 1), T0 + 5)
    failed = cond(job, "Failed")
    assert failed is not None and failed["reason"] == "BackoffLimitExceeded"
    assert job["status"]["active"] == 0 and job["status"]["failed"] == 3
    assert ("BackoffLimitExceeded", "Job has reached the specified backoff limit", "Warning") in [
        e for e in core.events({**job, "status": {}}, Plan(status=job["status"]))
    ]


def test_disrupted_and_deleted_pods_never_count_against_the_backoff_limit() -> None:
    job, pods = settle(make_job(completions=1, backoffLimit=0), [])
    for n in range(5):  # preempted and failed, or deleted while running: replaced, not counted
        pods = (
            finish(pods, "Failed", 1, disrupted=True)
            if n % 2
            else [{**p, "metadata": {**p["metadata"], "deletionTimestamp": "x"}} for p in pods]
        )
        job, pods = settle(job, pods, T0 + n)
        assert job["status"]["failed"] == 0 and job["status"]["active"] == 1
    assert cond(job, "Failed") is None
    job, pods = settle(job, finish(pods, "Failed", 1), T0 + 9)
    assert cond(job, "Failed")["reason"] == "BackoffLimitExceeded"  # type: ignore[index]


def test_on_failure_restarts_count_against_the_backoff_limit() -> None:
    job = make_job(backoffLimit=2)
    job["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    job, _ = settle(job, [pod("Running", node="n", restarts=2)])
    assert cond(job, "Failed") is None
    job, _ = settle(job, [pod("Running", node="n", restarts=3)])
    assert cond(job, "Failed")["reason"] == "BackoffLimitExceeded"  # type: ignore[index]


def test_active_deadline_deletes_active_pods_and_fails_the_job() -> None:
    job, pods = settle(make_job(completions=4, parallelism=2, activeDeadlineSeconds=30), [])
    plan = run(job, pods, T0 + 10)
    assert plan.requeue_after == pytest.approx(20.0)
    job, pods = settle(job, pods, T0 + 30)
    assert cond(job, "Failed")["reason"] == "DeadlineExceeded"  # type: ignore[index]
    assert not any(_active(p) for p in pods)
    assert run(job, pods, T0 + 100).empty


def test_ttl_after_finished_deletes_the_job_that_long_after_it_finished() -> None:
    job, pods = settle(make_job(ttlSecondsAfterFinished=60), [])
    job, pods = settle(job, finish(pods, "Succeeded", 1), T0 + 5)
    plan = run(job, pods, T0 + 35)
    assert plan.requeue_after == pytest.approx(30.0) and not plan.deletes
    plan = run(job, pods, T0 + 65)
    assert [(d.kind, d.uid) for d in plan.deletes] == [("Job", "job-uid")]


# ------------------------------------------------------------------------------ modes


def test_indexed_jobs_create_one_pod_per_index_and_retry_a_failed_index() -> None:
    job, pods = settle(make_job(completionMode="Indexed", completions=4, parallelism=3), [])
    assert sorted(_index(p) for p in pods) == [0, 1, 2]
    created = run(make_job(completionMode="Indexed", completions=4, parallelism=3), []).creates
    assert created[1]["metadata"]["generateName"] == "j-1-"
    assert created[1]["metadata"]["labels"][core.INDEX_KEY] == "1"
    # index 0 succeeds, index 1 fails: 1 is retried, 3 starts
    pods = [
        {**p, "status": {**p["status"], "phase": {0: "Succeeded", 1: "Failed"}[_index(p)]}}  # type: ignore[index]
        if _index(p) in (0, 1)
        else p
        for p in pods
    ]
    job, pods = settle(job, pods, T0 + 1)
    assert sorted(_index(p) for p in pods if _active(p)) == [1, 2, 3]
    assert job["status"]["completedIndexes"] == "0" and job["status"]["failed"] == 1
    pods = [
        {**p, "status": {**p["status"], "phase": "Succeeded"}} if _active(p) else p for p in pods
    ]
    job, pods = settle(job, pods, T0 + 2)
    assert job["status"]["completedIndexes"] == "0-3" and cond(job, "Complete") is not None


def test_suspend_deletes_active_pods_and_resume_restarts_the_clock() -> None:
    job, pods = settle(make_job(completions=3, parallelism=3, activeDeadlineSeconds=100), [])
    job["spec"]["suspend"] = True
    job, pods = settle(job, pods, T0 + 50)
    assert not any(_active(p) for p in pods) and "startTime" not in job["status"]
    assert cond(job, "Suspended")["status"] == "True"  # type: ignore[index]
    assert run(job, pods, T0 + 500).empty  # no deadline while suspended
    job["spec"]["suspend"] = False
    job, pods = settle(job, pods, T0 + 1000)
    assert job["status"]["startTime"] == format_time(T0 + 1000)
    assert cond(job, "Suspended")["status"] == "False" and cond(job, "Failed") is None  # type: ignore[index]
    assert sum(1 for p in pods if _active(p)) == 3


# ------------------------------------------------------------------------------ pacing


@pytest.mark.parametrize(
    ("unbound", "batch", "window", "creates", "requeue"),
    [
        (0, 2000, 4000, 2000, 0.0),  # room left: at once
        (3000, 2000, 4000, 1000, 0.25),  # window full: shortly
        (4000, 2000, 4000, 0, 0.25),
        (0, 50_000, 100_000, 10_000, None),  # everything fits: no requeue for pacing
    ],
)
def test_creation_is_paced_by_batch_and_unbound_window(
    unbound: int, batch: int, window: int, creates: int, requeue: float | None
) -> None:
    job = make_job(completions=10_000 + unbound, parallelism=10_000 + unbound)
    s = PodSummary(active=unbound, unbound=unbound)
    plan = reconcile(job, s, [], T0, Limits(create_batch=batch, pending_window=window))
    assert len(plan.creates) == creates and plan.requeue_after == requeue


def test_a_large_job_never_holds_more_than_window_plus_batch_unbound_pods() -> None:
    job = make_job(completions=20_000, parallelism=20_000)
    limits = Limits(create_batch=500, pending_window=1500)
    created = unbound = worst = 0
    for step in range(200):
        plan = reconcile(job, PodSummary(active=created, unbound=unbound), [], T0 + step, limits)
        if plan.status is not None:
            job = {**job, "status": plan.status}
        created += len(plan.creates)
        unbound += len(plan.creates)
        worst = max(worst, unbound)
        unbound -= min(unbound, 300)  # the scheduler places 300 pods between reconciles
        if plan.requeue_after is None:
            break
    assert 1500 <= worst <= 1500 + 500 - 1
    assert created == 20_000


# ------------------------------------------------------------------------------ helpers


def test_completed_indexes_round_trip() -> None:
    assert format_indexes({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"
    assert parse_indexes("0-2,5,7-8") == {0, 1, 2, 5, 7, 8}
    assert format_indexes(set()) == "" and parse_indexes("") == set()


def test_fixpoint_from_many_states() -> None:
    for spec in (
        {"completions": 5, "parallelism": 2},
        {"completions": None, "parallelism": 2},
        {"completionMode": "Indexed", "completions": 6, "parallelism": 4},
        {"completions": 3, "parallelism": 3, "suspend": True},
    ):
        job, pods = settle(make_job(**spec), [])
        pods = finish(pods, "Succeeded", 1)
        job, pods = settle(job, pods, T0 + 1)
        assert run(job, pods, T0 + 1).empty
