"""Admission policies: which pods (and pod templates) a namespace may run, decided without I/O.

An ``AdmissionPolicy`` is cluster-scoped. Its ``namespaceSelector`` picks the namespaces it
governs (by their labels, plus ``kubernetes.io/metadata.name``, as Kubernetes sets it; absent
or empty: every namespace), ``mode`` says whether a violation refuses the write (``Enforce``)
or only warns (``Warn``), and ``rules`` lists what it checks (:mod:`.rules`).

Callers: the API (``app.api.service.Objects``, policies from its watch cache) and the
controllers' one applier (``workers.controllers.apply``, policies from the store through
``workers.policy``) both call :func:`review` on an admitted object and act on the
:class:`Review`: ``denied`` becomes one 403 ``Forbidden`` naming every policy and rule
(:func:`forbidden`), ``warnings`` become ``Warning: 299`` response headers.

Pods are enforced; the pod templates of Deployments, ReplicaSets, Jobs and CronJobs are only
warned about, whatever the mode, as Kubernetes' Pod Security admission does: the controller's
pod creates are where the refusal happens, and show on the owner as a ``FailedCreate`` Event.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from app.core.errors import Cause, Forbidden
from app.core.labels import Selector, from_label_selector
from app.core.policy.rules import RULES, Finding

ENFORCE = "Enforce"
WARN = "Warn"
MODES = (ENFORCE, WARN)
NAME_LABEL = "kubernetes.io/metadata.name"
# Kinds holding a pod spec, and where it is.
POD_SPECS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "Deployment": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}

Obj = dict[str, Any]


@dataclass(frozen=True)
class Policy:
    """One admitted ``AdmissionPolicy``, parsed once."""

    name: str
    selector: Selector
    mode: str
    rules: Mapping[str, Any]

    @classmethod
    def of(cls, obj: Obj) -> Policy:
        spec = obj.get("spec") or {}
        sel = spec.get("namespaceSelector")
        return cls(
            name=str((obj.get("metadata") or {}).get("name", "")),
            selector=from_label_selector(sel) if sel else Selector.everything(),
            mode=str(spec.get("mode") or ENFORCE),
            rules=dict(spec.get("rules") or {}),
        )

    def governs(self, namespace: str, labels: Mapping[str, str] | None) -> bool:
        return self.selector.matches({**(labels or {}), NAME_LABEL: namespace})


@dataclass(frozen=True)
class Violation:
    """One rule of one policy that an object breaks, and where."""

    policy: str
    rule: str
    field: str
    message: str


@dataclass(frozen=True)
class Review:
    """What the policies say about one object: refusals and warnings (each a header's text)."""

    denied: tuple[Violation, ...] = ()
    warnings: tuple[str, ...] = ()


def pod_spec(kind: str, obj: Obj) -> tuple[str, Obj] | None:
    """``(path, pod spec)`` of an object that holds one; ``None`` otherwise."""
    keys = POD_SPECS.get(kind)
    if keys is None:
        return None
    cur: Any = obj
    for key in keys:
        cur = cur.get(key) if isinstance(cur, dict) else None
    return (".".join(keys), cur) if isinstance(cur, dict) else None


def violations(policy: Policy, path: str, spec: Obj) -> list[Violation]:
    """Every rule of ``policy`` the pod spec at ``path`` breaks, in the rules' order."""
    out: list[Violation] = []
    for rule, check in RULES.items():
        setting = policy.rules.get(rule)
        if setting is None or setting is False:  # maxPriority 0 is a setting
            continue
        out += [_violation(policy.name, rule, path, f) for f in check(setting, spec)]
    return out


def _violation(policy: str, rule: str, path: str, f: Finding) -> Violation:
    return Violation(policy, rule, f"{path}.{f.field}" if f.field else path, f.message)


def review(
    policies: Iterable[Policy], kind: str, obj: Obj, namespace_labels: Mapping[str, str] | None
) -> Review:
    """Check an admitted object of ``kind`` against the policies governing its namespace."""
    found = pod_spec(kind, obj)
    if found is None:
        return Review()
    path, spec = found
    namespace = str((obj.get("metadata") or {}).get("namespace", ""))
    denied: list[Violation] = []
    warnings: list[str] = []
    for policy in sorted(policies, key=lambda p: p.name):
        if not policy.governs(namespace, namespace_labels):
            continue
        broken = violations(policy, path, spec)
        if not broken:
            continue
        if kind == "Pod" and policy.mode == ENFORCE:
            denied += broken
        else:
            warnings.append(f"would violate {describe(policy.name, broken)}")
    return Review(tuple(denied), tuple(warnings))


def describe(policy: str, broken: Iterable[Violation]) -> str:
    """``AdmissionPolicy "p": rule (what); rule (what)`` — one policy's part of a message."""
    parts = "; ".join(f"{v.rule} ({v.message})" for v in broken)
    return f'AdmissionPolicy "{policy}": {parts}'


def refusal(denied: Iterable[Violation]) -> str:
    """``violates AdmissionPolicy "p": rule (what); ...`` for every policy broken."""
    by_policy: dict[str, list[Violation]] = {}
    for v in denied:
        by_policy.setdefault(v.policy, []).append(v)
    return "; ".join(f"violates {describe(p, vs)}" for p, vs in by_policy.items())


def forbidden(
    kind_plural: str, name: str, denied: Iterable[Violation], *, prefixed: bool = True
) -> Forbidden:
    """The 403 for a refused object: every policy and rule it breaks, each field a cause.
    The message starts ``pods "x" is forbidden:`` as the API says it; ``prefixed=False`` leaves
    that out for a controller, whose ``FailedCreate`` Event says it in its own words
    (``workers.outcome.failure_note``)."""
    denied = list(denied)
    said = refusal(denied)
    causes = [
        Cause(v.field, "FieldValueForbidden", f'AdmissionPolicy "{v.policy}" rule {v.rule}: '
              f"{v.message}")
        for v in denied
    ]  # fmt: skip
    message = f'{kind_plural} "{name}" is forbidden: {said}' if prefixed else said
    return Forbidden(message, kind_plural, name, causes)


__all__ = [
    "ENFORCE",
    "MODES",
    "NAME_LABEL",
    "WARN",
    "Policy",
    "Review",
    "Violation",
    "forbidden",
    "pod_spec",
    "refusal",
    "review",
]
