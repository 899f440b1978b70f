"""The namespace controller's decisions: what a terminating namespace's status says, and when
the namespace may go.

The shell (``workers/controllers/namespace.py``) deletes the namespace's contents in bounded
batches (``garbage.split`` sorts each batch), then counts what is left per kind and per
finalizer and calls ``reconcile``. The namespace goes once nothing is left; until then its
conditions say what remains, with Kubernetes' condition types, reasons and messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.core.controllers.garbage import WAIT_SECONDS
from app.core.controllers.job_status import with_condition

NAMESPACE_CONTENTS = "quaymaster.io/namespace-contents"
TERMINATING = "Terminating"
CONTENT_FAILURE = "NamespaceDeletionContentFailure"
CONTENT_REMAINING = "NamespaceContentRemaining"
FINALIZERS_REMAINING = "NamespaceFinalizersRemaining"


@dataclass(frozen=True)
class Contents:
    """What a sweep left in the namespace.

    ``remaining``: objects left, by plural (terminating ones included); ``finalizers``: how
    many of them carry each finalizer; ``more``: live objects the sweep did not reach (its time
    budget ran out); ``failures``: messages of deletions that failed."""

    remaining: dict[str, int] = field(default_factory=dict)
    finalizers: dict[str, int] = field(default_factory=dict)
    more: bool = False
    failures: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not any(self.remaining.values()) and not self.more


@dataclass(frozen=True)
class NamespacePlan:
    status: dict[str, Any] | None = None  # the new status, None when unchanged
    finalize: bool = False  # drop the contents finalizer: the namespace goes
    requeue_after: float | None = None


def reconcile(ns: dict[str, Any], contents: Contents, now: float) -> NamespacePlan:
    """The plan for a namespace being deleted, after one sweep of its contents."""
    old = ns.get("status") or {}
    status = {**old, "phase": TERMINATING}
    status = _conditions(status, contents, now)
    changed = status if status != old else None
    if contents.empty:
        return NamespacePlan(status=changed, finalize=True)
    return NamespacePlan(status=changed, requeue_after=0.0 if contents.more else WAIT_SECONDS)


def _conditions(status: dict[str, Any], c: Contents, now: float) -> dict[str, Any]:
    if c.failures:
        errs = f"{len(c.failures)} remaining: {'; '.join(sorted(c.failures))}"
        failed = ("True", "ContentDeletionFailed", f"Failed to delete all resource types, {errs}")
    else:
        done = "All content successfully deleted, may be waiting on finalization"
        failed = ("False", "ContentDeleted", done)
    left = {k: n for k, n in sorted(c.remaining.items()) if n}
    if left:
        listed = ", ".join(f"{k}. has {n} resource instances" for k, n in left.items())
        remaining = ("True", "SomeResourcesRemain", f"Some resources are remaining: {listed}")
    else:
        remaining = ("False", "ContentRemoved", "All content successfully removed")
    held = {f: n for f, n in sorted(c.finalizers.items()) if n}
    if held:
        listed = ", ".join(f"{f} in {n} resource instances" for f, n in held.items())
        message = f"Some content in the namespace has finalizers remaining: {listed}"
        finalizers = ("True", "SomeFinalizersRemain", message)
    else:
        message = "All content-preserving finalizers finished"
        finalizers = ("False", "ContentHasNoFinalizers", message)
    for kind, (value, reason, message) in (
        (CONTENT_FAILURE, failed),
        (CONTENT_REMAINING, remaining),
        (FINALIZERS_REMAINING, finalizers),
    ):
        status = with_condition(status, kind, reason, message, now, value)
    return status
