"""Why a pod fits nowhere: every filter of ``FILTERS`` over every live node, counted by reason.

The engine calls :func:`explain` for a pod no node can take (once per requirement set while
the cluster's room stays the same). Its :class:`Explanation` gives the pod's
``PodScheduled=False`` message (``0/10000 nodes available: 9990 insufficient cpu, 10
untolerated taint gpu=true:NoSchedule``) and the reason codes the scheduler counts in
``scheduler_unschedulable_total``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from app.core.scheduling.filters import (
    BOOL,
    FILTERS,
    Context,
    Filter,
    FilterCache,
    Reason,
    feasible,
)
from app.core.scheduling.podinfo import PodInfo
from app.core.scheduling.snapshot import Snapshot


@dataclass(frozen=True)
class Explanation:
    """``available`` of ``total`` live nodes can take the pod; ``counts`` are the nodes turned
    away per reason as the message words it (a node turned away by several filters counts
    under each, as Kubernetes does, so they need not add up to ``total``), most first, ties
    alphabetical; ``codes`` are the reason codes that turned away any node, in filter order."""

    available: int
    total: int
    counts: tuple[tuple[str, int], ...]
    codes: tuple[str, ...]

    @property
    def message(self) -> str:
        head = f"{self.available}/{self.total} nodes available"
        if not self.counts:
            return head
        return f"{head}: {', '.join(f'{n} {text}' for text, n in self.counts)}"


def verdicts(
    snap: Snapshot, pod: PodInfo, cache: FilterCache
) -> Iterator[tuple[Filter, Reason, BOOL]]:
    """(filter, reason, nodes that pass) for every filter that applies to ``pod``, in order."""
    ctx = Context(snap, pod, cache)
    for f in FILTERS:
        if f.applies(ctx):
            for reason, passed in cache.verdicts_of(f, ctx):
                yield f, reason, passed


def explain(snap: Snapshot, pod: PodInfo, cache: FilterCache) -> Explanation:
    """Count the live nodes each filter turns away from ``pod``, by reason."""
    live = snap.live
    ctx = Context(snap, pod, cache)
    counts: Counter[str] = Counter()
    codes: dict[str, None] = {}  # ordered set
    for f, reason, passed in verdicts(snap, pod, cache):
        turned = live & ~passed
        n = int(turned.sum())
        if not n:
            continue
        codes[reason.code] = None
        if f.detail is None:
            counts[reason.text] += n
        else:
            for slot in np.flatnonzero(turned):
                counts[f.detail(ctx, int(slot))] += 1
    return Explanation(
        available=int(feasible(snap, pod, cache)[live].sum()),
        total=int(live.sum()),
        counts=tuple(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
        codes=tuple(codes),
    )
