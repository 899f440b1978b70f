"""The usage rollup's pure part: pods' latest figures summed per (minute, namespace, node)."""

from __future__ import annotations

from datetime import UTC, datetime

from app.store.usage import PodUsage
from workers.loops.usage_rollup import RollupRow, minute_of, rollup, usage_redis_url

MINUTE = datetime(2026, 12, 2, 8, 15, tzinfo=UTC)


def _pod(ns: str, name: str, node: str, cpu: int, mem: int) -> PodUsage:
    return PodUsage(ns, name, f"uid-{name}", 0, cpu, mem, node=node)


def test_pods_are_summed_per_namespace_and_node() -> None:
    pods = [
        _pod("b", "b1", "n2", 300, 3_000),
        _pod("a", "a1", "n1", 100, 1_000),
        _pod("a", "a2", "n1", 50, 500),
        _pod("a", "a3", "n2", 7, 70),
    ]
    assert rollup(pods, MINUTE) == [
        RollupRow(MINUTE, "a", "n1", 2, 150, 1_500),
        RollupRow(MINUTE, "a", "n2", 1, 7, 70),
        RollupRow(MINUTE, "b", "n2", 1, 300, 3_000),
    ]


def test_nothing_measured_is_no_row_and_negative_figures_count_as_zero() -> None:
    assert rollup([], MINUTE) == []
    assert rollup([_pod("a", "x", "n1", -5, -1)], MINUTE) == [RollupRow(MINUTE, "a", "n1", 1, 0, 0)]


def test_the_minute_is_truncated() -> None:
    assert minute_of(datetime(2026, 12, 2, 8, 15, 59, 999_999, tzinfo=UTC)) == MINUTE


def test_where_the_samples_are() -> None:
    assert usage_redis_url({"QM_USAGE_REDIS_URL": "redis://h/1"}) == "redis://h/1"
    assert usage_redis_url({"QM_USAGE_REDIS_URL": "", "QM_BROKER_URL": "redis://h/0"}) is None
    assert usage_redis_url({"QM_BROKER_URL": "redis://h/0"}) == "redis://h/0"
    assert usage_redis_url({"QM_BROKER_URL": "amqp://h"}) is None
    assert usage_redis_url({}) is None
