"""The CronJob controller as a pure function on a fake clock: schedules read in a time zone
(across daylight-saving changes), missed runs and the starting deadline, the three concurrency
policies, history limits, and the fixpoint."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from app.core.admission.cron import parse_schedule
from app.core.controllers import cronjob as core
from app.core.controllers.plan import Plan, format_time

Obj = dict[str, Any]
_uids = itertools.count()


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


T0 = at("2026-03-02T10:00:30")  # a Monday


def make_cj(schedule: str = "*/5 * * * *", created: float = T0 - 3600, **spec: Any) -> Obj:
    base: Obj = {
        "schedule": schedule,
        "concurrencyPolicy": "Allow",
        "successfulJobsHistoryLimit": 3,
        "failedJobsHistoryLimit": 1,
        "suspend": False,
        "jobTemplate": {"metadata": {"labels": {"team": "a"}}, "spec": {"template": {}}},
    }
    base.update(spec)
    meta = {
        "name": "cj",
        "namespace": "ns",
        "uid": "cj-uid",
        "creationTimestamp": format_time(created),
    }
    return {"kind": "CronJob", "metadata": meta, "spec": base, "status": {}}


def finished(job: Obj, ok: bool, when: float) -> Obj:
    kind = "Complete" if ok else "Failed"
    cond = {"type": kind, "status": "True", "lastTransitionTime": format_time(when)}
    return {**job, "status": {"conditions": [cond]}}


def materialise(created: Obj) -> Obj:
    return {**created, "metadata": {**created["metadata"], "uid": f"job-{next(_uids)}"}}


def step(cj: Obj, jobs: list[Obj], now: float) -> tuple[Obj, list[Obj], Plan, list[Any]]:
    plan, notes = core.reconcile(cj, jobs, now)
    gone = {d.uid for d in plan.deletes}
    jobs = [j for j in jobs if j["metadata"]["uid"] not in gone]
    jobs += [materialise(c) for c in plan.creates]
    if plan.status is not None:
        cj = {**cj, "status": plan.status}
    return cj, jobs, plan, notes


def settle(cj: Obj, jobs: list[Obj], now: float) -> tuple[Obj, list[Obj], list[Any]]:
    notes: list[Any] = []
    for _ in range(5):
        cj, jobs, plan, n = step(cj, jobs, now)
        notes += n
        if plan.empty:
            return cj, jobs, notes
    raise AssertionError("no fixpoint")


# ------------------------------------------------------------------------------ schedules


@pytest.mark.parametrize(
    ("schedule", "tz", "after", "expected"),
    [
        ("0 9 * * *", "UTC", "2026-03-02T10:00:00", "2026-03-03T09:00:00"),
        ("0 9 * * *", "Europe/Paris", "2026-03-02T10:00:00", "2026-03-03T08:00:00"),
        ("0 9 * * *", "Europe/Paris", "2026-07-02T10:00:00", "2026-07-03T07:00:00"),
        ("0 9 * * *", "America/New_York", "2026-03-02T10:00:00", "2026-03-02T14:00:00"),
        # 02:30 does not exist in Paris on 2026-03-29: that run is skipped
        ("30 2 * * *", "Europe/Paris", "2026-03-28T02:00:00", "2026-03-30T00:30:00"),
        # 02:30 happens twice in Paris on 2026-10-25: once, at the first (summer-time) one
        ("30 2 * * *", "Europe/Paris", "2026-10-24T23:00:00", "2026-10-25T00:30:00"),
        ("30 2 * * *", "Europe/Paris", "2026-10-25T00:30:00", "2026-10-26T01:30:00"),
    ],
)
def test_next_run_in_time_zones_and_across_dst(
    schedule: str, tz: str, after: str, expected: str
) -> None:
    got = core.next_run(parse_schedule(schedule), ZoneInfo(tz), at(after))
    assert got == at(expected)


def test_hourly_runs_across_a_dst_change_keep_one_per_real_hour() -> None:
    sched, tz = parse_schedule("0 * * * *"), ZoneInfo("Europe/Paris")
    t, runs = at("2026-10-24T22:30:00"), []
    for _ in range(5):
        t = core.next_run(sched, tz, t)  # type: ignore[assignment]
        runs.append(format_time(t))
    # local 01:00 and 02:00 (summer), then 03:00 (winter): the repeated 02:00 runs once
    assert runs == [
        "2026-10-24T23:00:00Z",
        "2026-10-25T00:00:00Z",
        "2026-10-25T02:00:00Z",
        "2026-10-25T03:00:00Z",
        "2026-10-25T04:00:00Z",
    ]


# ------------------------------------------------------------------------------ runs


def test_a_job_is_created_for_the_latest_run_with_a_deterministic_name() -> None:
    cj, jobs, plan, _notes = step(make_cj(created=T0 - 120), [], T0)
    due = at("2026-03-02T10:00:00")
    assert [c["metadata"]["name"] for c in plan.creates] == [f"cj-{int(due // 60)}"]
    job = plan.creates[0]
    assert job["metadata"]["annotations"][core.SCHEDULED_AT] == "2026-03-02T10:00:00Z"
    assert job["metadata"]["labels"] == {"team": "a"}
    assert job["metadata"]["ownerReferences"][0]["uid"] == "cj-uid"
    assert cj["status"]["lastScheduleTime"] == "2026-03-02T10:00:00Z"
    assert plan.requeue_after == pytest.approx(at("2026-03-02T10:05:00") - T0)
    # a late or duplicated reconcile with the state before the create creates nothing new
    again, _ = core.reconcile(make_cj(created=T0 - 120), jobs, T0 + 5)
    assert not again.creates


def test_many_missed_runs_start_only_the_most_recent() -> None:
    cj = make_cj("* * * * *", created=T0 - 3 * 86400)
    cj, jobs, notes = settle(cj, [], T0)
    assert [j["metadata"]["annotations"][core.SCHEDULED_AT] for j in jobs] == [
        "2026-03-02T10:00:00Z"
    ]
    assert "TooManyMissedTimes" in [n[0] for n in notes]


def test_a_run_later_than_the_starting_deadline_is_skipped_with_an_event() -> None:
    cj = make_cj("0 * * * *", created=T0 - 7200, startingDeadlineSeconds=10)
    plan, notes = core.reconcile(cj, [], T0)  # 30 s after 10:00
    assert not plan.creates and [n[0] for n in notes] == ["MissSchedule"]
    plan, notes = core.reconcile(cj, [], at("2026-03-02T10:00:05"))
    assert len(plan.creates) == 1


def test_suspend_creates_nothing_and_asks_for_no_timer() -> None:
    plan, _ = core.reconcile(make_cj(suspend=True), [], T0)
    assert not plan.creates and plan.requeue_after is None


# ------------------------------------------------------------------------------ policies


@pytest.mark.parametrize(
    ("policy", "creates", "deletes"), [("Allow", 1, 0), ("Forbid", 0, 0), ("Replace", 1, 1)]
)
def test_concurrency_policies_with_a_job_still_active(
    policy: str, creates: int, deletes: int
) -> None:
    cj = make_cj(concurrencyPolicy=policy, created=T0 - 600)
    cj, jobs, _ = settle(cj, [], at("2026-03-02T09:55:10"))
    assert len(jobs) == 1
    plan, notes = core.reconcile(cj, jobs, T0)
    assert (len(plan.creates), len(plan.deletes)) == (creates, deletes)
    if policy == "Forbid":
        assert ("JobAlreadyActive" in [n[0] for n in notes]) and plan.status is None
        # once the active Job finishes, the held-back run starts (no deadline set)
        done = [finished(jobs[0], True, T0)]
        plan, _ = core.reconcile(cj, done, T0 + 1)
        assert [c["metadata"]["annotations"][core.SCHEDULED_AT] for c in plan.creates] == [
            "2026-03-02T10:00:00Z"
        ]


def test_status_lists_active_jobs_and_the_last_success() -> None:
    cj, jobs, _ = settle(make_cj(created=T0 - 600), [], at("2026-03-02T09:55:10"))
    assert [r["name"] for r in cj["status"]["active"]] == [jobs[0]["metadata"]["name"]]
    jobs = [finished(jobs[0], True, at("2026-03-02T09:57:00"))]
    cj, jobs, _ = settle(cj, jobs, at("2026-03-02T09:58:00"))
    assert "active" not in cj["status"]
    assert cj["status"]["lastSuccessfulTime"] == "2026-03-02T09:57:00Z"


def test_history_limits_delete_the_oldest_finished_jobs() -> None:
    cj = make_cj(successfulJobsHistoryLimit=2, failedJobsHistoryLimit=1, created=T0 - 7200)
    jobs: list[Obj] = []
    for i, ok in enumerate([True, True, False, True, False, True]):
        scheduled = T0 - 3600 + i * 300
        job = materialise(core.new_job(cj, scheduled))
        jobs.append(finished(job, ok, scheduled + 60))
    cj, kept, _ = settle({**cj, "status": {"lastScheduleTime": format_time(T0)}}, jobs, T0 + 1)
    left = sorted(j["metadata"]["annotations"][core.SCHEDULED_AT] for j in kept)
    expected = sorted(format_time(T0 - 3600 + i * 300) for i in (3, 4, 5))
    assert left == expected


def test_fixpoint() -> None:
    for policy in ("Allow", "Forbid", "Replace"):
        cj, jobs, _ = settle(make_cj(concurrencyPolicy=policy), [], T0)
        assert core.reconcile(cj, jobs, T0)[0].empty
        cj, jobs, _ = settle(cj, jobs, T0 + 600)
        assert core.reconcile(cj, jobs, T0 + 600)[0].empty
