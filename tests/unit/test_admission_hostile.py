"""Hostile and malformed input: admission must answer with a status error (never a KeyError,
TypeError or RecursionError) and must never modify what it was given."""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.admission import admit
from app.core.errors import Invalid, RequestEntityTooLarge, StatusError
from app.core.kinds import BY_KIND, KINDS

KIND_NAMES = [k.kind for k in KINDS]

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(["", "500m", "1Gi", "-1", "Always", "In", "TCP", "app", "10.0.0.1", "*"]),
)
json_values = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(
            st.one_of(
                st.text(max_size=8),
                st.sampled_from(["name", "image", "spec", "containers", "ports", "port",
                                 "selector", "matchLabels", "values", "key", "operator"]),
            ),
            children,
            max_size=4,
        ),
    ),
    max_leaves=12,
)  # fmt: skip


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out.extend(_paths(v, (*prefix, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(_paths(v, (*prefix, i)))
    return out


def _replace(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    cur = obj
    for key in path[:-1]:
        cur = cur[key]
    cur[path[-1]] = value
    return obj


def _admit_quietly(kind: str, obj: Any, old: Any = None) -> dict[str, Any] | None:
    before = copy.deepcopy(obj)
    try:
        out = admit(BY_KIND[kind], obj, old)
    except StatusError as exc:
        assert exc.code in (400, 413, 422)
        if isinstance(exc, Invalid):
            assert exc.causes
            assert all(isinstance(c.field, str) and c.message for c in exc.causes)
        return None
    finally:
        assert obj == before, "admission modified its input"
    return out


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(KIND_NAMES), st.data())
def test_any_field_replaced_by_junk(valid: Any, kind: str, data: st.DataObject) -> None:
    obj = valid(kind)
    path = data.draw(st.sampled_from(_paths(obj)))
    _replace(obj, path, data.draw(json_values))
    out = _admit_quietly(kind, obj)
    if out is not None:
        # Whatever is accepted must be stable under a second admission.
        assert admit(BY_KIND[kind], copy.deepcopy(out), None) == out


@settings(max_examples=200)
@given(st.sampled_from(KIND_NAMES), st.dictionaries(st.text(max_size=10), json_values, max_size=6))
def test_random_objects(kind: str, obj: dict[str, Any]) -> None:
    _admit_quietly(kind, obj)


@settings(max_examples=200)
@given(st.sampled_from(KIND_NAMES), json_values, json_values)
def test_random_spec_and_old(kind: str, spec: Any, old: Any) -> None:
    obj = {"metadata": {"name": "x", "namespace": "default"}, "spec": spec}
    _admit_quietly(kind, obj, old if isinstance(old, dict) else None)


@pytest.mark.parametrize("kind", KIND_NAMES)
@pytest.mark.parametrize("junk", [[], "x", 0, True, 1.5, [{}], {"a": [1, {"b": None}]}])
def test_every_top_level_field_with_the_wrong_type(kind: str, junk: Any, valid: Any) -> None:
    base = valid(kind)
    for field in list(base):
        if field in ("apiVersion", "kind"):
            continue
        obj = copy.deepcopy(base)
        obj[field] = junk
        _admit_quietly(kind, obj)


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_every_nested_field_with_a_list_or_string(kind: str, valid: Any) -> None:
    base = valid(kind)
    for path in _paths(base):
        for junk in ([["x"]], "x", {"x": 1}, -1, None):
            _admit_quietly(kind, _replace(copy.deepcopy(base), path, junk))


def test_deeply_nested_object_is_rejected_without_recursion_error(valid: Any) -> None:
    obj = valid("Pod")
    deep: Any = "leaf"
    for _ in range(5000):
        deep = {"a": deep}
    obj["spec"]["containers"][0]["securityContext"] = deep
    with pytest.raises(Invalid) as info:
        admit(BY_KIND["Pod"], obj, None)
    assert "nested" in info.value.causes[0].message


def test_deeply_nested_lists(valid: Any) -> None:
    obj = valid("ConfigMap")
    deep: Any = []
    for _ in range(5000):
        deep = [deep]
    obj["data"] = deep
    with pytest.raises(Invalid):
        admit(BY_KIND["ConfigMap"], obj, None)


@pytest.mark.parametrize(
    "junk",
    [datetime.datetime(2024, 1, 1), {1, 2}, b"bytes", float("nan"), float("inf"), object()],
)
def test_values_json_cannot_represent(junk: Any, valid: Any) -> None:
    obj = valid("Pod")
    obj["metadata"]["annotations"] = {"a": junk}
    with pytest.raises(Invalid) as info:
        admit(BY_KIND["Pod"], obj, None)
    assert [c.field for c in info.value.causes] == ["metadata.annotations.a"]


def test_huge_integers(valid: Any) -> None:
    obj = valid("Deployment")
    obj["spec"]["replicas"] = 10**5000
    obj["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"cpu": 2**65}}
    with pytest.raises(Invalid) as info:
        admit(BY_KIND["Deployment"], obj, None)
    assert {c.field for c in info.value.causes} == {
        "spec.replicas",
        "spec.template.spec.containers[0].resources.limits.cpu",
    }


def test_non_string_keys(valid: Any) -> None:
    obj = valid("ConfigMap")
    obj["data"] = {1: "a", "ok": "b"}
    with pytest.raises(Invalid) as info:
        admit(BY_KIND["ConfigMap"], obj, None)
    assert [c.field for c in info.value.causes] == ["data"]


def test_huge_strings_everywhere(valid: Any) -> None:
    big = "x" * 200_000
    obj = valid("Pod")
    obj["metadata"]["name"] = big
    obj["metadata"]["labels"] = {big: big}
    obj["spec"]["containers"][0]["name"] = big
    obj["spec"]["containers"][0]["resources"] = {"requests": {"cpu": big, big: "1"}}
    obj["spec"]["restartPolicy"] = big
    with pytest.raises(Invalid) as info:
        admit(BY_KIND["Pod"], obj, None)
    assert len(info.value.message) < 20_000, "messages must not echo huge values"
    obj["spec"]["containers"][0]["image"] = "x" * 2_000_000
    with pytest.raises(RequestEntityTooLarge):
        admit(BY_KIND["Pod"], obj, None)


def test_many_items(valid: Any) -> None:
    obj = valid("Pod")
    obj["spec"]["containers"] = [{"name": "c", "image": 5}] * 2000
    with pytest.raises(Invalid) as info:
        admit(BY_KIND["Pod"], obj, None)
    assert len(info.value.causes) >= 2000


def test_old_object_of_the_wrong_shape_is_tolerated(valid: Any) -> None:
    for old in ({"metadata": [], "spec": "x"}, {"spec": {"selector": 5}}, {}):
        _admit_quietly("Deployment", valid("Deployment"), old)
        _admit_quietly("Pod", valid("Pod"), old)
