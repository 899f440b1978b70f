"""The scheduling engine: the pure core of the scheduler process.

It owns the snapshot and the queue, takes changes from the revision stream, and produces one
batch of decisions per cycle: placements to bind, and pods that fit nowhere (with the
explanation and, where allowed, a preemption). It does no I/O; the process shell commits the
placements and reports back which ones won (:meth:`Engine.bound`) and which lost
(:meth:`Engine.lost`). Time and randomness come in from outside: each cycle's random choices
(the offset of the sampled nodes, preemption's first candidate) come from a ``Random`` built
from that cycle's seed, so the same snapshot, queue and seed decide the same placements.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from app.core.priority import PRODUCTION_THRESHOLD
from app.core.scheduling.explain import Explanation, explain
from app.core.scheduling.filters import BOOL, FilterCache, feasible
from app.core.scheduling.masks import fits_slot
from app.core.scheduling.podinfo import PodInfo, Requirements
from app.core.scheduling.preemption import Preemption, preempt
from app.core.scheduling.queue import SchedulingQueue
from app.core.scheduling.scores import Weights, score
from app.core.scheduling.snapshot import NodeInfo, Snapshot

SCHEDULER_NAMES = frozenset({"default-scheduler", "quaymaster"})


def nodes_to_score(total: int, percentage: int | None = None, minimum: int = 100) -> int:
    """How many feasible nodes to score: all of a small cluster; from 100 nodes on, a share
    that shrinks as the cluster grows (50% minus 1% per 125 nodes, at least 5%), so a
    10,000-node cluster scores 500 -- the adaptive rule kube-scheduler uses."""
    if total <= minimum:
        return total
    pct = percentage if percentage is not None else max(5, 50 - total // 125)
    return max(minimum, total * pct // 100)


def cycle_seed(base: int, number: int) -> int:
    """The seed of cycle ``number`` of a scheduler whose base seed is ``base`` (64 bits), so
    that the base seed and a cycle's number are enough to replay that cycle."""
    digest = hashlib.blake2b(f"{base}:{number}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


@dataclass(frozen=True)
class Placement:
    pod: PodInfo
    slot: int
    node_name: str
    node_uid: str


@dataclass(frozen=True)
class Failure:
    """A pod no node could take: its message, the codes of the reasons that turned nodes
    away (``Reason.code``, in filter order), and a preemption where one was chosen."""

    pod: PodInfo
    message: str
    preemption: Preemption | None = None
    reasons: tuple[str, ...] = ()


@dataclass
class Config:
    weights: Weights = field(default_factory=Weights)
    percentage_to_score: int | None = None  # None: adaptive
    threshold: int = PRODUCTION_THRESHOLD
    max_preemptions_per_cycle: int = 16
    scheduler_names: frozenset[str] = SCHEDULER_NAMES


@dataclass
class _ClassMemo:
    """Reusable work for a run of pods with equal requirements."""

    req: Requirements
    version: int
    mask: BOOL


class Engine:
    def __init__(self, config: Config | None = None, rng: random.Random | None = None) -> None:
        """``rng`` draws the seed of each cycle not given one (see :meth:`cycle`)."""
        self.config = config or Config()
        self._seeds = rng or random.Random()
        self.seed = self._seeds.getrandbits(64)  # the seed of the current (or last) cycle
        self.rng = random.Random(self.seed)
        self.snapshot = Snapshot()
        self.queue = SchedulingQueue()
        self.cache = FilterCache()
        self._memo: _ClassMemo | None = None
        # requirements -> (room epoch, static epoch, explanation): a class that fit nowhere
        # keeps failing without filter work until room appears somewhere
        self._failed: dict[Requirements, tuple[int, int, Explanation]] = {}
        # Set by changes that could make room; the unschedulable set is moved once per cycle,
        # not once per change (a burst of pod completions would otherwise rescan it each time).
        self._room_appeared = False
        # pod uid -> the placement whose assumption the snapshot holds for it: when that
        # assumption was dropped (its node went) and the pod decided again, the answer to the
        # earlier bind must not undo the later one
        self._deciding: dict[str, Placement] = {}

    # -- changes from the stream -----------------------------------------------------------
    def ours(self, pod: PodInfo) -> bool:
        return pod.scheduler_name in self.config.scheduler_names

    def pod_changed(self, pod: PodInfo, now: float) -> None:
        known = self.snapshot.pods.get(pod.uid)
        if known is not None and pod.row_version <= known.row_version:
            return  # a version already seen (read directly, or written by our own bind)
        old = self.snapshot.upsert_pod(pod)
        if pod.pending and self.ours(pod):
            if pod.uid not in self.snapshot.assumed:
                self.queue.add(pod, now)
        else:
            self.queue.remove(pod.uid)
        if old is not None and old.holds_room and not pod.holds_room:
            self._room_appeared = True

    def pod_deleted(self, uid: str, now: float) -> None:
        old = self.snapshot.remove_pod(uid)
        self.queue.remove(uid)
        if old is not None and (old.holds_room or old.nominated_node):
            self._room_appeared = True

    def node_changed(self, node: NodeInfo, now: float) -> None:
        self.snapshot.upsert_node(node)
        self._room_appeared = True

    def node_deleted(self, name: str, now: float) -> None:
        self.snapshot.remove_node(name)

    # -- one cycle ---------------------------------------------------------------------------
    def cycle(
        self,
        now: float,
        max_pods: int,
        time_left: Callable[[], bool] | None = None,
        seed: int | None = None,
        max_batch: int | None = None,
    ) -> tuple[list[Placement], list[Failure]]:
        """Decide up to ``max_pods`` pods from the front of the queue, stopping early once
        ``time_left()`` says the cycle's time is up (checked every 16 pods). The cycle's
        random choices are seeded with ``seed`` (None: one drawn from the engine's ``rng``),
        kept in ``self.seed``. With ``max_batch``, at most that many batch pods are placed;
        after that the cycle takes only production pods, and the batch pods wait queued."""
        self.seed = self._seeds.getrandbits(64) if seed is None else seed
        self.rng = random.Random(self.seed)
        if self._room_appeared:
            self._room_appeared = False
            self.queue.cluster_changed(now)
        self.queue.flush(now)
        placements: list[Placement] = []
        failures: list[Failure] = []
        preemptions = 0
        batch_left = max_batch
        for n in range(max_pods):
            if time_left is not None and n % 16 == 15 and not time_left():
                break
            full = batch_left is not None and batch_left <= 0
            popped = self.queue.pop(self.config.threshold if full else None)
            if popped is None:
                break
            pod = self.snapshot.pods.get(popped.uid, popped)
            if not pod.pending or pod.uid in self.snapshot.assumed:
                continue
            slot = self.place(pod)
            if slot is not None:
                node = self.snapshot.node(slot)
                self.snapshot.assume(pod, slot)
                self._after_assume(pod, slot)
                placement = Placement(pod, slot, node.name, node.uid)
                self._deciding[pod.uid] = placement
                placements.append(placement)
                if batch_left is not None and pod.req.batch:
                    batch_left -= 1
                continue
            why = self._explain(pod)
            plan = None
            if preemptions < self.config.max_preemptions_per_cycle:
                plan = preempt(self.snapshot, pod, self.cache, self.rng)
                if plan is not None:
                    preemptions += 1
                    self.snapshot.nominate(pod, plan.slot)
                    for v in plan.victims:
                        v.deleting = True  # not chosen again before the stream says so
            self.queue.failed(pod, now)
            failures.append(Failure(pod, why.message, plan, why.codes))
        return placements, failures

    def place(self, pod: PodInfo) -> int | None:
        """The best node slot for ``pod`` now, or None."""
        snap = self.snapshot
        r = pod.req
        failed = self._failed.get(r)
        if (
            failed is not None
            and failed[:2] == (snap.room_epoch, snap.static_epoch)
            and not r.has_pod_terms
            and pod.uid not in snap.nominated
        ):
            return None
        mask = self._feasible(pod)
        nominated = snap.nominated_slot(pod.uid)
        if nominated is not None and mask[nominated]:
            return nominated
        feas = np.flatnonzero(mask)
        if len(feas) == 0:
            return None
        k = nodes_to_score(snap.node_count, self.config.percentage_to_score)
        if r.scarce or len(feas) <= k:
            cand = feas
        else:
            start = self.rng.randrange(len(feas))
            cand = feas[(start + np.arange(k)) % len(feas)]
        scores = score(snap, pod, cand, self.config.weights)
        return int(cand[int(np.argmax(scores))])

    def _feasible(self, pod: PodInfo) -> BOOL:
        snap = self.snapshot
        r = pod.req
        reusable = not (
            r.has_pod_terms
            or r.host_ports
            or snap.anti_by_label
            or snap.anti_unindexed
            or pod.uid in snap.nominated
        )
        memo = self._memo
        if reusable and memo is not None and memo.req == r and memo.version == snap.version:
            return memo.mask
        mask = feasible(snap, pod, self.cache)
        if reusable:
            self._memo = _ClassMemo(r, snap.version, mask)
        return mask

    def _after_assume(self, pod: PodInfo, slot: int) -> None:
        memo = self._memo
        if memo is not None and memo.req == pod.req and memo.version + 1 == self.snapshot.version:
            memo.mask[slot] = fits_slot(self.snapshot, pod, slot)
            memo.version = self.snapshot.version

    def _explain(self, pod: PodInfo) -> Explanation:
        snap = self.snapshot
        failed = self._failed.get(pod.req)
        if failed is not None and failed[:2] == (snap.room_epoch, snap.static_epoch):
            return failed[2]
        why = explain(snap, pod, self.cache)
        if len(self._failed) > 10_000:
            self._failed.clear()
        self._failed[pod.req] = (snap.room_epoch, snap.static_epoch, why)
        return why

    # -- outcomes of the commit --------------------------------------------------------------
    def bound(self, p: Placement, row_version: int | None = None) -> None:
        """The bind committed; ``row_version`` is the pod's version it wrote. The snapshot
        records the bound pod at once, so an older version arriving late changes nothing."""
        self.queue.done(p.pod.uid)
        if self._deciding.get(p.pod.uid) is p:
            del self._deciding[p.pod.uid]
        cur = self.snapshot.pods.get(p.pod.uid)
        if row_version is None or cur is None or cur.row_version >= row_version:
            return
        self.snapshot.upsert_pod(
            replace(cur, node_name=p.node_name, row_version=row_version, nominated_node=None)
        )

    def lost(self, p: Placement, now: float) -> None:
        """The bind did not commit (the pod changed, or the node had no room after all)."""
        if self._deciding.get(p.pod.uid) is p:
            del self._deciding[p.pod.uid]
            self.snapshot.forget(p.pod)
        latest = self.snapshot.pods.get(p.pod.uid)
        if latest is not None and latest.pending and self.ours(latest):
            self.queue.retry(latest, now)
