"""A cycle's cap on batch placements: the shell passes the room its bind pipeline has left, and
production pods are still decided when that room is nil."""

from __future__ import annotations

import random

from scheduling_objects import node, pod

from app.core.scheduling.engine import Engine
from app.core.scheduling.podinfo import pod_info
from app.core.scheduling.snapshot import node_info


def at(second: int) -> str:
    return f"2026-01-01T00:00:{second:02d}Z"


def engine(batch: int, production: int) -> Engine:
    e = Engine(rng=random.Random(0))
    for i in range(3):
        e.node_changed(node_info(node(f"n{i}", "32", "64Gi", pods=110, zone=f"z{i % 3}"), 1), 0.0)
    for j in range(batch):
        e.pod_changed(pod_info(pod(f"batch-{j}", priority=10, created=at(j)), 1), 0.0)
    for j in range(production):
        e.pod_changed(pod_info(pod(f"web-{j}", created=at(50 + j)), 1), 0.0)
    return e


def decided(e: Engine, max_batch: int | None) -> list[str]:
    placements, failures = e.cycle(0.0, 100, seed=1, max_batch=max_batch)
    assert not failures
    return [p.pod.name for p in placements]


def test_no_room_for_batch_still_decides_production() -> None:
    e = engine(batch=5, production=2)
    assert decided(e, 0) == ["web-0", "web-1"]
    assert e.queue.active_count == 5  # the batch pods wait, still queued
    assert decided(e, None) == [f"batch-{j}" for j in range(5)]


def test_batch_placements_stop_at_the_room_left() -> None:
    e = engine(batch=5, production=0)
    assert decided(e, 3) == ["batch-0", "batch-1", "batch-2"]
    e.pod_changed(pod_info(pod("web-late", created=at(59)), 1), 0.0)
    assert decided(e, 0) == ["web-late"]
    assert decided(e, 2) == ["batch-3", "batch-4"]
