"""Seeded cycles: the same snapshot, queue and seed decide the same placements.

A cluster larger than 100 nodes, so each pod scores a sample of the feasible nodes from a
random offset: the one random choice that moves placements between equal nodes.
"""

from __future__ import annotations

import random

from scheduling_objects import node, pod

from app.core.scheduling.engine import Engine, cycle_seed
from app.core.scheduling.podinfo import pod_info
from app.core.scheduling.snapshot import node_info

NODES = 300
PODS = 30


def engine(rng_seed: int = 0) -> Engine:
    e = Engine(rng=random.Random(rng_seed))
    for i in range(NODES):
        e.node_changed(node_info(node(f"n{i:03d}", zone=f"z{i % 3}"), 1), 0.0)
    for j in range(PODS):
        e.pod_changed(pod_info(pod(f"p{j:02d}"), 1), 0.0)
    return e


def decide(e: Engine, seed: int | None) -> list[tuple[str, str]]:
    placements, failures = e.cycle(0.0, 1000, seed=seed)
    assert not failures
    assert len(placements) == PODS
    return [(p.pod.name, p.node_name) for p in placements]


def test_the_same_inputs_and_seed_decide_the_same_placements() -> None:
    first = engine(rng_seed=1)
    again = engine(rng_seed=2)  # another source of seeds: the given seed alone decides
    assert decide(first, 1234) == decide(again, 1234)
    assert first.seed == again.seed == 1234


def test_different_seeds_can_decide_differently() -> None:
    decisions = {tuple(decide(engine(), seed)) for seed in range(6)}
    assert len(decisions) > 1


def test_the_seed_an_engine_drew_replays_its_cycle() -> None:
    running = engine(rng_seed=99)
    decided = decide(running, None)
    assert decide(engine(), running.seed) == decided


def test_cycle_seeds_derive_from_the_base_and_the_cycle_number() -> None:
    assert cycle_seed(7, 1) == cycle_seed(7, 1)
    seeds = {cycle_seed(7, n) for n in range(1, 1001)} | {cycle_seed(8, 1)}
    assert len(seeds) == 1001
    assert all(0 <= s < 2**64 for s in seeds)
    # A base seed logged by an earlier release must still name the same cycles: pinned.
    assert cycle_seed(0, 1) == 17449080249234257484
