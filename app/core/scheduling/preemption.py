"""Preemption: when a pod fits nowhere, which pods to evict, and on which node.

Only pods of strictly lower priority *and* below the production band may be victims: a
production pod is never preempted, by anyone, so preemption cannot cascade through the
services that matter. Among the nodes where evicting such pods frees enough room, the one
chosen evicts the fewest pods, then the lowest-priority ones, then the most recently started
(the ones that lose the least work).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from app.core.scheduling.filters import FilterCache
from app.core.scheduling.masks import pod_limits, port_mask
from app.core.scheduling.podinfo import PodInfo
from app.core.scheduling.snapshot import Snapshot


@dataclass(frozen=True)
class Preemption:
    slot: int
    node_name: str
    victims: tuple[PodInfo, ...]


def eligible_victim(pod: PodInfo, victim: PodInfo) -> bool:
    return (
        victim.req.batch
        and victim.priority < pod.priority
        and not victim.deleting
        and victim.holds_room
    )


def _free(snap: Snapshot, pod: PodInfo, slot: int) -> list[int]:
    lim_cpu, lim_mem = pod_limits(snap, pod)
    free = [
        int(lim_cpu[slot] - snap.used_cpu[slot] - snap.held_cpu[slot]),
        int(lim_mem[slot] - snap.used_mem[slot] - snap.held_mem[slot]),
        int(snap.alloc_gpu[slot] - snap.used_gpu[slot] - snap.held_gpu[slot]),
        int(snap.alloc_pods[slot] - snap.used_pods[slot] - snap.held_pods[slot]),
    ]
    held = snap.nominated.get(pod.uid)
    if held is not None and held[0] == slot:
        free[0] += held[1]
        free[1] += held[2]
        free[2] += held[3]
        free[3] += 1
    return free


def _fits(free: list[int], need: tuple[int, int, int, int]) -> bool:
    return all(f >= n for f, n in zip(free, need, strict=True))


def victims_on(snap: Snapshot, pod: PodInfo, slot: int) -> list[PodInfo] | None:
    """The smallest set of eligible victims on ``slot`` that makes room, or None."""
    need = (pod.req.cpu_milli, pod.req.memory_bytes, pod.req.gpu, 1)
    free = _free(snap, pod, slot)
    candidates = [
        v
        for uid in snap.slot_pods.get(slot, ())
        if uid not in snap.assumed
        and (v := snap.pods.get(uid)) is not None
        and eligible_victim(pod, v)
    ]
    # lowest priority first; among equals the most recently started first
    candidates.sort(key=lambda v: (v.priority, -v.started, v.uid))
    chosen: list[PodInfo] = []
    for v in candidates:
        if _fits(free, need):
            break
        chosen.append(v)
        free = [
            free[0] + v.req.cpu_milli,
            free[1] + v.req.memory_bytes,
            free[2] + v.req.gpu,
            free[3] + 1,
        ]
    if not _fits(free, need):
        return None
    # Reprieve: give back the most valuable victims that are not needed after all.
    for v in sorted(chosen, key=lambda v: (-v.priority, v.started, v.uid)):
        trial = [
            free[0] - v.req.cpu_milli,
            free[1] - v.req.memory_bytes,
            free[2] - v.req.gpu,
            free[3] - 1,
        ]
        if _fits(trial, need):
            free = trial
            chosen.remove(v)
    return chosen


def _terminating_below(snap: Snapshot, pod: PodInfo, slot: int) -> bool:
    """Whether pods of lower priority than ``pod`` are terminating on ``slot``."""
    for uid in snap.slot_pods.get(slot, ()):
        v = snap.pods.get(uid)
        if v is not None and v.deleting and v.priority < pod.priority:
            return True
    return False


def preempt(
    snap: Snapshot,
    pod: PodInfo,
    cache: FilterCache,
    rng: random.Random,
    max_candidates: int = 100,
) -> Preemption | None:
    """Choose a node and victims for ``pod``, or None when preemption cannot help."""
    if pod.preempt_never:
        return None
    held = snap.nominated.get(pod.uid)
    if held is not None and _terminating_below(snap, pod, held[0]):
        return None  # room is already being made for it on its nominated node
    r = pod.req
    mask = cache.static_mask(snap, pod) & snap.schedulable
    if r.host_ports:
        mask &= port_mask(snap, r)
    lim_cpu, lim_mem = pod_limits(snap, pod)
    # Upper bound of what evicting every pod below the production band could free.
    mask &= lim_cpu - snap.used_cpu - snap.held_cpu + snap.low_cpu >= r.cpu_milli
    mask &= lim_mem - snap.used_mem - snap.held_mem + snap.low_mem >= r.memory_bytes
    mask &= snap.alloc_gpu - snap.used_gpu - snap.held_gpu + snap.low_gpu >= r.gpu
    mask &= snap.alloc_pods - snap.used_pods - snap.held_pods + snap.low_pods >= 1
    slots = np.flatnonzero(mask)
    if len(slots) == 0:
        return None
    if len(slots) > max_candidates:
        start = rng.randrange(len(slots))
        slots = np.roll(slots, -start)[:max_candidates]
    best: tuple[tuple[int, int, int, float], int, list[PodInfo]] | None = None
    for slot in slots.tolist():
        victims = victims_on(snap, pod, slot)
        if victims is None or not victims:
            continue  # no room even after evicting, or it fits without (another filter)
        key = (
            len(victims),
            max(v.priority for v in victims),
            sum(v.priority for v in victims),
            -max(v.started for v in victims),
        )
        if best is None or key < best[0]:
            best = (key, slot, victims)
    if best is None:
        return None
    _key, slot, victims = best
    return Preemption(slot, snap.node(slot).name, tuple(victims))
