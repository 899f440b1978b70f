"""Deployment, ReplicaSet, Job and CronJob specs.

These kinds own pods through a label selector and a pod template, so beyond their own fields
the important rules are that the selector is valid, that it matches the template's labels (or
the controller would orphan its own pods) and that it never changes after creation.
"""

from __future__ import annotations

import copy
import re

from app.core.admission._util import INT64_MAX, Errs, Obj, sub
from app.core.admission.cron import schedule_error
from app.core.admission.meta import check_selector, check_template_metadata
from app.core.admission.pod import check_pod_spec
from app.core.admission.values import check_int_or_percent, is_zero
from app.core.labels import Selector
from app.core.patch import json_equal

_TIME_ZONE = re.compile(r"[A-Za-z0-9_+\-]+(/[A-Za-z0-9_+\-]+)*")


def check_pod_template(
    e: Errs,
    d: Obj,
    key: str,
    path: str,
    *,
    restart_policies: tuple[str, ...],
    default_restart: str | None,
) -> dict[str, str] | None:
    """Validate a pod template; return its labels (``None`` if they are unusable)."""
    template = e.get_obj(d, key, path, required=True)
    if template is None:
        return None
    p = sub(path, key)
    labels = check_template_metadata(e, template, p)
    spec = e.get_obj(template, "spec", p, required=True)
    if spec is not None:
        check_pod_spec(
            e,
            spec,
            sub(p, "spec"),
            restart_policies=restart_policies,
            default_restart=default_restart,
        )
    return labels


def check_selector_matches(
    e: Errs, selector: Selector | None, labels: dict[str, str] | None, path: str
) -> None:
    if selector is not None and labels is not None and not selector.matches(labels):
        e.invalid(
            f"{path}.template.metadata.labels",
            labels,
            "`selector` does not match template `labels`",
        )


def keep_selector(e: Errs, spec: Obj, old: Obj | None, path: str) -> None:
    """Selectors are immutable; a client that omits one keeps the stored selector."""
    old_spec = old.get("spec") if old is not None else None
    if not isinstance(old_spec, dict) or old_spec.get("selector") is None:
        return
    if spec.get("selector") is None:
        spec["selector"] = copy.deepcopy(old_spec["selector"])
    elif not json_equal(spec["selector"], old_spec["selector"]):
        e.immutable(sub(path, "selector"))


def _replicated(e: Errs, obj: Obj, old: Obj | None) -> Obj | None:
    spec = e.get_obj(obj, "spec", "", required=True)
    if spec is None:
        return None
    keep_selector(e, spec, old, "spec")
    e.get_int(spec, "replicas", "spec", minimum=0, default=1)
    e.get_int(spec, "minReadySeconds", "spec", minimum=0, default=0)
    selector = check_selector(e, spec, "selector", "spec", required=True, non_empty=True)
    labels = check_pod_template(
        e, spec, "template", "spec", restart_policies=("Always",), default_restart="Always"
    )
    check_selector_matches(e, selector, labels, "spec")
    return spec


def check_replicaset(e: Errs, obj: Obj, old: Obj | None) -> None:
    _replicated(e, obj, old)


def check_deployment(e: Errs, obj: Obj, old: Obj | None) -> None:
    spec = _replicated(e, obj, old)
    if spec is None:
        return
    if spec.get("strategy") is None:
        spec["strategy"] = {}
    strategy = e.get_obj(spec, "strategy", "spec")
    if strategy is not None:
        sp = "spec.strategy"
        kind = e.get_enum(
            strategy, "type", sp, ("RollingUpdate", "Recreate"), default="RollingUpdate"
        )
        if kind == "Recreate" and strategy.get("rollingUpdate") is not None:
            e.forbidden(
                sub(sp, "rollingUpdate"), "may not be specified when strategy `type` is 'Recreate'"
            )
        elif kind == "RollingUpdate":
            if strategy.get("rollingUpdate") is None:
                strategy["rollingUpdate"] = {}
            ru = e.get_obj(strategy, "rollingUpdate", sp)
            if ru is not None:
                rp = sub(sp, "rollingUpdate")
                surge = check_int_or_percent(e, ru, "maxSurge", rp, default="25%")
                unavailable = check_int_or_percent(
                    e, ru, "maxUnavailable", rp, default="25%", max_percent=True
                )
                if (
                    surge is not None
                    and unavailable is not None
                    and is_zero(surge)
                    and is_zero(unavailable)
                ):
                    e.invalid(
                        sub(rp, "maxUnavailable"),
                        unavailable,
                        "may not be 0 when `maxSurge` is 0",
                    )
    e.get_int(spec, "revisionHistoryLimit", "spec", minimum=0, default=10)
    deadline = e.get_int(spec, "progressDeadlineSeconds", "spec", minimum=1, default=600)
    min_ready = spec.get("minReadySeconds")
    if isinstance(deadline, int) and isinstance(min_ready, int) and deadline <= min_ready:
        e.invalid("spec.progressDeadlineSeconds", deadline, "must be greater than minReadySeconds")
    e.get_bool(spec, "paused", "spec")


def check_job_spec(e: Errs, spec: Obj, path: str, *, defaults: bool) -> None:
    """Validate a Job spec. ``defaults`` is false for a CronJob's job template, whose
    Job-level defaults are applied when the Job itself is created."""
    if defaults and spec.get("parallelism") is None and spec.get("completions") is None:
        spec["completions"] = 1
    e.get_int(spec, "parallelism", path, minimum=0, default=1 if defaults else None)
    completions = e.get_int(spec, "completions", path, minimum=0)
    e.get_int(spec, "backoffLimit", path, minimum=0, default=6 if defaults else None)
    e.get_int(spec, "activeDeadlineSeconds", path, minimum=1, maximum=INT64_MAX)
    e.get_int(spec, "ttlSecondsAfterFinished", path, minimum=0)
    mode = e.get_enum(
        spec,
        "completionMode",
        path,
        ("NonIndexed", "Indexed"),
        default="NonIndexed" if defaults else None,
    )
    if mode == "Indexed" and completions is None and "completions" not in spec:
        e.required(sub(path, "completions"), "when completion mode is Indexed")
    e.get_bool(spec, "suspend", path, default=False if defaults else None)
    e.get_bool(spec, "manualSelector", path)
    selector = check_selector(e, spec, "selector", path)
    labels = check_pod_template(
        e,
        spec,
        "template",
        path,
        restart_policies=("OnFailure", "Never"),
        default_restart=None,
    )
    check_selector_matches(e, selector, labels, path)


def check_job(e: Errs, obj: Obj, old: Obj | None) -> None:
    spec = e.get_obj(obj, "spec", "", required=True)
    if spec is None:
        return
    keep_selector(e, spec, old, "spec")
    check_job_spec(e, spec, "spec", defaults=True)


def check_cronjob(e: Errs, obj: Obj, old: Obj | None) -> None:
    spec = e.get_obj(obj, "spec", "", required=True)
    if spec is None:
        return
    path = "spec"
    schedule = e.get_str(spec, "schedule", path, required=True)
    if schedule:
        problem = schedule_error(schedule)
        if problem:
            e.invalid(sub(path, "schedule"), schedule, f"invalid schedule: {problem}")
    tz = e.get_str(spec, "timeZone", path)
    if tz is not None and (len(tz) > 128 or not _TIME_ZONE.fullmatch(tz)):
        e.invalid(sub(path, "timeZone"), tz, "must be an IANA time zone name such as Europe/Paris")
    e.get_enum(spec, "concurrencyPolicy", path, ("Allow", "Forbid", "Replace"), default="Allow")
    e.get_int(spec, "startingDeadlineSeconds", path, minimum=0, maximum=INT64_MAX)
    e.get_int(spec, "successfulJobsHistoryLimit", path, minimum=0, default=3)
    e.get_int(spec, "failedJobsHistoryLimit", path, minimum=0, default=1)
    e.get_bool(spec, "suspend", path, default=False)
    template = e.get_obj(spec, "jobTemplate", path, required=True)
    if template is None:
        return
    tp = sub(path, "jobTemplate")
    check_template_metadata(e, template, tp)
    job_spec = e.get_obj(template, "spec", tp, required=True)
    if job_spec is not None:
        check_job_spec(e, job_spec, sub(tp, "spec"), defaults=False)
