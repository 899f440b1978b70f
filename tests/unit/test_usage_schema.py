"""The NodeUsageSample rules, pure: what is accepted, what each bad field is called, totals."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from app.api.usage_schema import MAX_CAUSES, parse_sample
from app.core import errors
from app.store.usage import ContainerUsage

NOW = 1_700_000_000.0
RETENTION = 3900.0


def stamp(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).isoformat()


def body(**fields: Any) -> bytes:
    return json.dumps({"timestamp": stamp(NOW), "pods": [], **fields}).encode()


def fields_of(raw: bytes, node: str = "n1") -> dict[str, str]:
    with pytest.raises(errors.Invalid) as caught:
        parse_sample(raw, node, NOW, RETENTION)
    return {c.field: c.reason for c in caught.value.causes}


def test_a_sample_totals_its_pods() -> None:
    pods = [
        {"namespace": "a", "name": "p", "uid": "u1", "cpuMillis": 250, "memoryBytes": 100,
         "containers": [{"name": "c", "cpuMillis": 250, "memoryBytes": 100}]},
        {"namespace": "b", "name": "p", "uid": "u2", "priority": -5, "cpuMillis": 50,
         "memoryBytes": 1},
    ]  # fmt: skip
    s = parse_sample(body(pods=pods, window="2.5s"), "n1", NOW, RETENTION)
    assert (s.node, s.at, s.cpu_millis, s.memory_bytes, s.window_s) == ("n1", NOW, 300, 101, 2.5)
    assert [(p.namespace, p.priority, p.containers) for p in s.pods] == [
        ("a", 0, (ContainerUsage("c", 250, 100),)),
        ("b", -5, ()),
    ]


@pytest.mark.parametrize(
    ("offset", "ok"),
    [(0, True), (299, True), (301, False), (-3899, True), (-3901, False)],
)
def test_timestamp_within_skew_and_retention(offset: float, ok: bool) -> None:
    raw = body(timestamp=stamp(NOW + offset))
    if ok:
        assert parse_sample(raw, "n1", NOW, RETENTION).at == NOW + offset
    else:
        assert fields_of(raw) == {"timestamp": "FieldValueInvalid"}


@pytest.mark.parametrize("value", ["2024-01-01T00:00:00", "soon", 17, "x" * 100])
def test_timestamp_needs_a_zone_and_a_date(value: Any) -> None:
    assert fields_of(body(timestamp=value)) == {"timestamp": "FieldValueInvalid"}


@pytest.mark.parametrize("value", ["0s", "nans", "infs", "3601s", "10", 10, "-1s", "1e400s"])
def test_bad_windows(value: Any) -> None:
    assert fields_of(body(window=value)) == {"window": "FieldValueInvalid"}


def test_the_url_names_the_node() -> None:
    assert fields_of(body(), node="Not_A_Node") == {"metadata.name": "FieldValueInvalid"}
    assert fields_of(body(metadata=[])) == {"metadata": "FieldValueInvalid"}


def test_causes_are_capped() -> None:
    pods = [{"namespace": "-", "name": "-", "uid": ""} for _ in range(100)]
    with pytest.raises(errors.Invalid) as caught:
        parse_sample(body(pods=pods), "n1", NOW, RETENTION)
    assert len(caught.value.causes) == MAX_CAUSES


def test_not_an_object_is_a_bad_request() -> None:
    with pytest.raises(errors.BadRequest):
        parse_sample(b"[1, 2]", "n1", NOW, RETENTION)
