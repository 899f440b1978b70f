"""The reclaim controller as a pure function: the batch-allocatable formula, its clamp, the p95
with the latest sample, missing data, hysteresis, the eviction order, production never
evicted, and the fixpoint (reconciling the state a plan produced asks for nothing more)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.controllers.reclaim import (
    EVICTED,
    FIELD,
    NO_SAMPLES,
    RECLAIMED,
    Config,
    PodRoom,
    PodUse,
    ReclaimPlan,
    Resources,
    Sample,
    Series,
    compute_figure,
    percentile,
    production_series,
    production_usage,
    reconcile,
    victims,
    worth_writing,
)

T0 = 1_800_000_000.0
GI = 1 << 30
CFG = Config()
ALLOC = Resources(4000, 8 * GI)
Obj = dict[str, Any]


def node(batch: Obj | None = None, alloc: Obj | None = None) -> Obj:
    status: Obj = {"allocatable": alloc or {"cpu": "4", "memory": "8Gi", "pods": "110"}}
    status["conditions"] = [{"type": "Ready", "status": "True"}]
    if batch is not None:
        status[FIELD] = batch
    return {"kind": "Node", "metadata": {"name": "n1", "uid": "u-n1"}, "status": status}


def pod(name: str, prio: int, cpu: int, mem: int = 0, started: float = T0, **kw: Any) -> PodRoom:
    return PodRoom("ns", name, f"uid-{name}", prio, Resources(cpu, mem), started, **kw)


def sample(at: float, *uses: tuple[int, int, int]) -> Sample:
    return Sample(at, tuple(PodUse(p, c, m) for p, c, m in uses))


def series(samples: list[Sample]) -> Series:
    return production_series(samples, CFG.threshold)


def steady_samples(cpu: int, mem: int = 0, n: int = 6, prio: int = 1000) -> list[Sample]:
    """``n`` samples of one production pod, 10 s apart, the last one at T0."""
    return [sample(T0 - 10 * i, (prio, cpu, mem)) for i in reversed(range(n))]


def steady(cpu: int, mem: int = 0, n: int = 6, prio: int = 1000) -> Series:
    return series(steady_samples(cpu, mem, n, prio))


# ------------------------------------------------------------------------------ the figure


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([5], 0.95, 5),
        (list(range(1, 101)), 0.95, 95),
        (list(range(1, 21)), 0.95, 19),
        ([3, 1, 2], 0.5, 2),
        ([7, 7, 100], 0.95, 100),
    ],
)
def test_percentile_is_nearest_rank(values: list[int], q: float, expected: int) -> None:
    assert percentile(values, q) == expected


@pytest.mark.parametrize(
    ("prod_req", "usage", "expected"),
    [
        # 4 + 3 - 0.5 - 0.4: the figure the requirement's story starts from
        (Resources(3000, 0), Resources(500, 0), Resources(6100, 8 * GI - (8 * GI) // 10)),
        # production uses all it asked for: batch keeps allocatable minus the margin
        (Resources(3000, 2 * GI), Resources(3000, 2 * GI), Resources(3600, 7372 << 20)),
        # production far above allocatable: clamped at zero
        (Resources(1000, 0), Resources(9000, 20 * GI), Resources(0, 0)),
        # nothing used: never more than allocatable plus production's requests
        (Resources(2000, GI), Resources(0, 0), Resources(5600, 8396 << 20)),
    ],
)
def test_formula(prod_req: Resources, usage: Resources, expected: Resources) -> None:
    got = compute_figure(ALLOC, prod_req, usage, CFG)
    assert got.cpu_millis == expected.cpu_millis
    assert got.memory_bytes % (1 << 20) == 0  # rounded down to whole MiB
    assert abs(got.memory_bytes - expected.memory_bytes) < 1 << 20


def test_figure_is_clamped_to_allocatable_plus_production_requests() -> None:
    no_margin = Config(margin=0.0)
    got = compute_figure(ALLOC, Resources(1000, GI), Resources(0, 0), no_margin)
    assert got == Resources(5000, 9 * GI)


def test_usage_is_the_p95_over_the_hour_or_the_latest_if_higher() -> None:
    # 100 samples: mostly 100m, five spikes of 3000m (the top 5 %) and one of 2000m
    cpu = [100] * 94 + [2000] + [3000] * 5
    samples = [sample(T0 - 3000 + 30 * i, (1000, c, 0)) for i, c in enumerate(cpu)]
    samples.append(sample(T0, (1000, 100, 0)))
    assert production_usage(series(samples), T0, CFG) == Resources(2000, 0)
    rising = [*samples[:-1], sample(T0, (1000, 3500, 0))]
    assert production_usage(series(rising), T0, CFG) == Resources(3500, 0)


def test_usage_counts_production_only_and_forgets_older_than_the_hour() -> None:
    samples = [
        sample(T0 - 4000, (1000, 9000, 9 * GI)),  # outside the window
        sample(T0 - 20, (1000, 300, GI), (999, 2000, 2 * GI), (2000, 200, 0)),
        sample(T0, (1000, 100, GI)),
    ]
    assert production_usage(series(samples), T0, CFG) == Resources(500, GI)


@pytest.mark.parametrize("last", [T0 - 121, T0 - 3000])
def test_no_recent_sample_means_no_figure(last: float) -> None:
    assert production_usage(series([sample(last, (1000, 100, 0))]), T0, CFG) is None
    assert production_usage(NO_SAMPLES, T0, CFG) is None


# ------------------------------------------------------------------------------ hysteresis


@pytest.mark.parametrize(
    ("current", "desired", "write"),
    [
        (None, None, False),
        (None, Resources(5000, 8 * GI), True),
        (Resources(5000, 8 * GI), None, True),  # data gone: removed at once
        (Resources(5000, 8 * GI), Resources(5000, 8 * GI), False),
        (Resources(5000, 8 * GI), Resources(5080, 8 * GI), False),  # +2 % of 4000m: held
        (Resources(5000, 8 * GI), Resources(5081, 8 * GI), True),
        (Resources(5000, 8 * GI), Resources(4999, 8 * GI), True),  # any lowering, at once
        (Resources(5000, 8 * GI), Resources(5000, 8 * GI - 1), True),
        (Resources(5000, 8 * GI), Resources(5010, 8 * GI + GI // 5), True),  # memory +2.5 %
    ],
)
def test_hysteresis(current: Resources | None, desired: Resources | None, write: bool) -> None:
    assert worth_writing(current, desired, ALLOC, CFG) is write


def test_a_small_raise_is_not_written_but_a_small_drop_is() -> None:
    held = node({"cpu": "6100m", "memory": "7372Mi"})
    up = reconcile(held, [pod("web", 1000, 3000)], steady(460), T0, CFG)  # 6140m: +40m
    assert up.empty and up.figure == Resources(6100, 7372 << 20)
    down = reconcile(held, [pod("web", 1000, 3000)], steady(510), T0, CFG)  # 6090m
    assert down.status is not None and down.status[FIELD]["cpu"] == "6090m"


# ------------------------------------------------------------------------------ reconcile


def test_story_lend_then_take_back() -> None:
    pods = [
        pod("web", 1000, 3000),
        pod("b-low", 10, 1000, started=T0 - 100),
        pod("b-new", 50, 1000, started=T0 - 10),
        pod("b-old", 50, 1000, started=T0 - 500),
    ]
    lent = reconcile(node(), pods, steady(500), T0, CFG)
    assert lent.status is not None and lent.status[FIELD]["cpu"] == "6100m"
    assert lent.status["allocatable"] == node()["status"]["allocatable"]  # the rest kept
    assert lent.evictions == () and lent.events == ()
    rose = series([*steady_samples(500), sample(T0 + 10, (1000, 3000, 0))])
    back = reconcile(node(lent.status[FIELD]), pods, rose, T0 + 10, CFG)
    assert back.status is not None and back.status[FIELD]["cpu"] == "3600m"
    # 6000m held, 3600m allowed: b-low, then the most recently started of priority 50
    assert [e.name for e in back.evictions] == ["b-low", "b-new", "b-old"]
    assert [n.reason for n in back.events] == [RECLAIMED]
    assert back.events[0].type == "Warning" and "ns/b-low" in back.events[0].message
    assert all("3600m" in e.message for e in back.evictions)


def test_only_as_many_as_needed_and_the_unneeded_are_spared() -> None:
    pods = [
        pod("web", 1000, 3000),
        pod("small", 1, 100, started=T0),
        pod("big", 2, 1500, started=T0),
    ]
    # figure 4 + 3 - 2.4 - 0.4 = 4200m; 4600m held. "small" goes first but does not suffice;
    # once "big" is gone "small" fits again and is spared.
    plan = reconcile(node(), pods, steady(2400), T0, CFG)
    assert [e.name for e in plan.evictions] == ["big"]


def test_production_is_never_evicted() -> None:
    pods = [pod("web", 1000, 3000), pod("db", 5000, 2000), pod("batch", 999, 500)]
    plan = reconcile(node(), pods, steady(9000, 9 * GI), T0, CFG)  # clamped to zero
    assert plan.figure == Resources(0, 0)
    assert [e.name for e in plan.evictions] == ["batch"]


def test_a_pod_that_frees_nothing_overflowing_is_passed_over() -> None:
    pods = [pod("web", 1000, 3000), pod("mem-only", 0, 0, GI), pod("cpu", 5, 2000)]
    plan = reconcile(node(), pods, steady(2000), T0, CFG)  # 4600m allowed, 5000m held
    assert [e.name for e in plan.evictions] == ["cpu"]


def test_terminating_batch_pods_are_not_counted_nor_evicted_again() -> None:
    pods = [pod("web", 1000, 3000), pod("going", 1, 2000, deleting=True), pod("b", 2, 500)]
    plan = reconcile(node({"cpu": "3600m", "memory": "7372Mi"}), pods, steady(3000), T0, CFG)
    assert plan.empty


def test_no_data_removes_the_figure_and_holds_to_allocatable() -> None:
    pods = [pod("web", 1000, 3000), pod("b", 1, 2000)]
    plan = reconcile(node({"cpu": "6100m", "memory": "7Gi"}), pods, NO_SAMPLES, T0, CFG)
    assert plan.status is not None and FIELD not in plan.status
    assert plan.figure is None and [e.name for e in plan.evictions] == ["b"]
    again = reconcile(node(), pods, NO_SAMPLES, T0, CFG)  # never had a figure: nothing to write
    assert again.status is None and again.evictions == plan.evictions


def test_a_node_without_allocatable_or_being_deleted_is_left_alone() -> None:
    bare = {"kind": "Node", "metadata": {"name": "n1"}, "status": {}}
    assert reconcile(bare, [pod("b", 1, 9000)], steady(0), T0, CFG).empty
    going = node()
    going["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:00Z"
    assert reconcile(going, [pod("b", 1, 9000)], steady(0), T0, CFG).empty


def test_events_name_each_evicted_pod() -> None:
    plan = reconcile(node(), [pod("b", 1, 9000)], steady(0), T0, CFG)
    assert EVICTED == "Evicted" and plan.evictions[0].uid == "uid-b"


# ------------------------------------------------------------------------------ fixpoint


def applied(n: Obj, pods: list[PodRoom], plan: ReclaimPlan) -> tuple[Obj, list[PodRoom]]:
    if plan.status is not None:
        n = {**n, "status": plan.status}
    gone = {e.uid for e in plan.evictions}
    return n, [replace(p, deleting=True) if p.uid in gone else p for p in pods]


pod_strategy = st.builds(
    lambda i, prio, cpu, mem, age: pod(f"p{i}", prio, cpu, mem, started=T0 - age),
    st.integers(0, 10_000),
    st.sampled_from([-10, 0, 5, 500, 999, 1000, 2000]),
    st.integers(0, 4000),
    st.integers(0, 4 * GI),
    st.integers(0, 1000),
)


@settings(max_examples=300, deadline=None)
@given(
    pods=st.lists(pod_strategy, max_size=12, unique_by=lambda p: p.uid),
    usage=st.lists(st.tuples(st.integers(0, 6000), st.integers(0, 10 * GI)), max_size=8),
    batch=st.none() | st.tuples(st.integers(0, 12000), st.integers(0, 16 * GI)),
)
def test_fixpoint_and_invariants(
    pods: list[PodRoom], usage: list[tuple[int, int]], batch: tuple[int, int] | None
) -> None:
    samples = series([sample(T0 - 10 * i, (1000, c, m)) for i, (c, m) in enumerate(usage)])
    start = node(None if batch is None else {"cpu": f"{batch[0]}m", "memory": str(batch[1])})
    plan = reconcile(start, pods, samples, T0, CFG)
    assert all(p.priority < CFG.threshold for p in pods if p.uid in {e.uid for e in plan.evictions})
    after, left = applied(start, pods, plan)
    again = reconcile(after, left, samples, T0, CFG)
    assert again.empty, again
    # the room fits under the figure, or no batch pod left could free any of what overflows
    ceiling = plan.figure or ALLOC
    counted = [p for p in left if p.priority >= CFG.threshold or not p.deleting]
    total = sum((p.requests for p in counted), Resources(0, 0))
    over_cpu = total.cpu_millis > ceiling.cpu_millis
    over_mem = total.memory_bytes > ceiling.memory_bytes
    for p in counted:
        if p.priority < CFG.threshold:
            assert not (over_cpu and p.requests.cpu_millis > 0)
            assert not (over_mem and p.requests.memory_bytes > 0)


def test_victims_of_an_empty_node() -> None:
    assert victims([], Resources(0, 0), 1000) == []
