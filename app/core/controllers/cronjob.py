"""The CronJob controller: create a Job at each scheduled time, keep a bounded history.

Schedules are read in ``spec.timeZone`` (UTC by default) on the wall clock: a run whose local
time does not exist (the hour skipped when clocks go forward) does not happen, and a run whose
local time happens twice (the hour repeated when clocks go back) happens once, at its first
occurrence. A Job's name is ``<cronjob>-<minutes since the epoch of its scheduled time>``, so a
late or duplicated reconcile finds the Job it already created instead of making another.

When runs were missed (the controller was down, or ``concurrencyPolicy: Forbid`` held them
back) only the most recent is started, as in Kubernetes; with ``startingDeadlineSeconds`` a
run later than that past its time is skipped with an Event.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from app.core.admission.cron import CronSchedule, parse_schedule
from app.core.controllers.job_status import COMPLETE, condition, finish_time
from app.core.controllers.plan import (
    Delete,
    Obj,
    Plan,
    delete_of,
    format_time,
    is_deleting,
    owner_reference,
    parse_time,
)
from app.core.kinds import API_VERSION

SCHEDULED_AT = "quaymaster.io/scheduled-at"
TOO_MANY_MISSED = 100
# Windows searched backwards from now for the latest run: cheap for every-minute schedules,
# still exact for yearly ones (a schedule that fires at all fires within 8 years).
_WINDOWS = (timedelta(hours=2), timedelta(days=2), timedelta(days=62), timedelta(days=3000))


def zone(cronjob: Obj) -> ZoneInfo | None:
    """``spec.timeZone`` (UTC when unset), or ``None`` when no such zone is known."""
    name = (cronjob.get("spec") or {}).get("timeZone") or "UTC"
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def next_run(schedule: CronSchedule, tz: ZoneInfo, after: float) -> float | None:
    """The first run strictly after ``after`` (epoch seconds), read on ``tz``'s wall clock."""
    local = datetime.fromtimestamp(after, UTC).astimezone(tz).replace(tzinfo=None)
    for _ in range(10_000):
        cand = schedule.next_after(local)
        if cand is None:
            return None
        aware = cand.replace(tzinfo=tz)  # fold=0: the first of a repeated hour
        back = aware.astimezone(UTC).astimezone(tz).replace(tzinfo=None)
        at = aware.timestamp()
        if back == cand and at > after:  # exists on the wall clock, and is later
            return at
        local = cand
    return None


def runs_between(
    schedule: CronSchedule, tz: ZoneInfo, start: float, end: float
) -> tuple[float | None, int]:
    """The latest run in ``(start, end]``, and how many runs the interval holds (counting
    stops past ``TOO_MANY_MISSED``)."""
    latest = None
    for window in _WINDOWS:
        lo = max(start, end - window.total_seconds())
        t = next_run(schedule, tz, lo)
        while t is not None and t <= end:
            latest, t = t, next_run(schedule, tz, t)
        if latest is not None or lo == start:
            break
    count = 0
    t = next_run(schedule, tz, start)
    while t is not None and t <= end and count <= TOO_MANY_MISSED:
        count, t = count + 1, next_run(schedule, tz, t)
    return latest, count


def job_name(cronjob: Obj, scheduled: float) -> str:
    return f"{cronjob['metadata']['name']}-{int(scheduled // 60)}"


def new_job(cronjob: Obj, scheduled: float) -> Obj:
    template = (cronjob.get("spec") or {}).get("jobTemplate") or {}
    tmeta = template.get("metadata") or {}
    meta: dict[str, Any] = {
        "name": job_name(cronjob, scheduled),
        "namespace": cronjob["metadata"].get("namespace", ""),
        "labels": dict(tmeta.get("labels") or {}),
        "annotations": {**(tmeta.get("annotations") or {}), SCHEDULED_AT: format_time(scheduled)},
        "ownerReferences": [owner_reference(cronjob)],
    }
    return {"apiVersion": API_VERSION, "kind": "Job", "metadata": meta,
            "spec": dict(template.get("spec") or {})}  # fmt: skip


def _scheduled(job: Obj) -> float:
    meta = job["metadata"]
    at = parse_time((meta.get("annotations") or {}).get(SCHEDULED_AT))
    return at if at is not None else parse_time(meta.get("creationTimestamp")) or 0.0


def _succeeded(job: Obj) -> bool:
    c = condition(job.get("status") or {}, COMPLETE)
    return c is not None and c.get("status") == "True"


def _ref(job: Obj) -> Obj:
    meta = job["metadata"]
    return {"apiVersion": API_VERSION, "kind": "Job", "name": meta["name"],
            "namespace": meta.get("namespace", ""), "uid": str(meta.get("uid", ""))}  # fmt: skip


def reconcile(cronjob: Obj, jobs: list[Obj], now: float) -> tuple[Plan, list[tuple[str, str, str]]]:
    """The writes for one look at ``cronjob`` and the Jobs it owns, and the Events worth
    recording: (reason, message, type)."""
    if is_deleting(cronjob):
        return Plan(), []
    spec = cronjob.get("spec") or {}
    live = [j for j in jobs if not is_deleting(j)]
    active = sorted((j for j in live if finish_time(j.get("status") or {}) is None), key=_scheduled)
    status = dict(cronjob.get("status") or {})
    deletes = list(_history(spec, live))
    notes: list[tuple[str, str, str]] = []
    creates: tuple[Obj, ...] = ()
    requeue: float | None = None
    done = [finish_time(j.get("status") or {}) for j in live if _succeeded(j)]
    last_ok = max([parse_time(status.get("lastSuccessfulTime")) or 0.0, *(d or 0.0 for d in done)])
    if last_ok > 0:
        status["lastSuccessfulTime"] = format_time(last_ok)
    try:
        schedule: CronSchedule | None = parse_schedule(str(spec.get("schedule", "")))
    except ValueError as exc:
        schedule = None
        notes.append(("InvalidSchedule", f"invalid schedule: {exc}", "Warning"))
    tz = zone(cronjob)
    if tz is None:
        notes.append(("UnknownTimeZone", f"unknown time zone {spec.get('timeZone')!r}", "Warning"))
    if not spec.get("suspend") and schedule is not None and tz is not None:
        due, notes = _due(cronjob, schedule, tz, now)
        names = {j["metadata"]["name"] for j in jobs}
        if due is not None and job_name(cronjob, due) not in names:
            policy = spec.get("concurrencyPolicy") or "Allow"
            if policy == "Forbid" and active:
                notes.append(("JobAlreadyActive", "Not starting a Job: one is still active",
                              "Normal"))  # fmt: skip
            else:
                if policy == "Replace":
                    deletes.extend(delete_of(j) for j in active)
                creates = (new_job(cronjob, due),)
                status["lastScheduleTime"] = format_time(due)
                notes.append(("SuccessfulCreate", f"Created job {job_name(cronjob, due)}",
                              "Normal"))  # fmt: skip
        elif due is not None:
            status["lastScheduleTime"] = format_time(
                max(due, parse_time(status.get("lastScheduleTime")) or 0.0)
            )
        nxt = next_run(schedule, tz, now)
        requeue = None if nxt is None else max(0.0, nxt - now)
    gone = {d.uid for d in deletes}
    status["active"] = [_ref(j) for j in active if str(j["metadata"].get("uid")) not in gone]
    if not status["active"]:
        status.pop("active")
    old = cronjob.get("status") or {}
    plan = Plan(
        creates=creates,
        deletes=tuple(deletes),
        status=status if status != old else None,
        status_assumes_writes=True,
        requeue_after=requeue,
    )
    return plan, notes


def _due(
    cronjob: Obj, schedule: CronSchedule, tz: ZoneInfo, now: float
) -> tuple[float | None, list[tuple[str, str, str]]]:
    """The scheduled time to start a Job for now, if any, and Events about missed runs."""
    spec = cronjob.get("spec") or {}
    meta = cronjob["metadata"]
    since = parse_time((cronjob.get("status") or {}).get("lastScheduleTime")) or parse_time(
        meta.get("creationTimestamp")
    )
    if since is None:
        since = now
    latest, count = runs_between(schedule, tz, since, now)
    if latest is None:
        return None, []
    notes: list[tuple[str, str, str]] = []
    if count > TOO_MANY_MISSED:
        notes.append(("TooManyMissedTimes", f"more than {TOO_MANY_MISSED} runs were missed; "
                      "starting only the most recent", "Warning"))  # fmt: skip
    deadline = spec.get("startingDeadlineSeconds")
    if deadline is not None and now - latest > int(deadline):
        notes.append(("MissSchedule", f"Missed scheduled time to start a job: "
                      f"{format_time(latest)}", "Warning"))  # fmt: skip
        return None, notes
    return latest, notes


def _history(spec: Obj, jobs: list[Obj]) -> list[Delete]:
    """The oldest finished Jobs past the history limits."""
    out: list[Delete] = []
    for ok, key in ((True, "successfulJobsHistoryLimit"), (False, "failedJobsHistoryLimit")):
        limit = int(spec.get(key, 3 if ok else 1))
        finished = sorted(
            (
                j
                for j in jobs
                if finish_time(j.get("status") or {}) is not None and _succeeded(j) == ok
            ),
            key=_scheduled,
        )
        out.extend(delete_of(j) for j in finished[: max(0, len(finished) - limit)])
    return out
