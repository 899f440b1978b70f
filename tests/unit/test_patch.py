from __future__ import annotations

import contextlib
import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.errors import BadRequest, Invalid
from app.core.patch import (
    MAX_DEPTH,
    create_merge_patch,
    json_equal,
    json_patch,
    merge_patch,
    parse_pointer,
)

# ---------------------------------------------------------------------------- RFC 7386

# The examples from RFC 7386, Appendix A.
RFC7386_CASES = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize(("target", "patch", "expected"), RFC7386_CASES)
def test_merge_patch_rfc_examples(target: Any, patch: Any, expected: Any) -> None:
    before_target, before_patch = copy.deepcopy(target), copy.deepcopy(patch)
    assert merge_patch(target, patch) == expected
    assert target == before_target and patch == before_patch


def test_merge_patch_result_shares_nothing_with_inputs() -> None:
    target = {"spec": {"list": [1, {"x": 1}]}}
    patch = {"spec": {"new": {"deep": [1]}}}
    out = merge_patch(target, patch)
    out["spec"]["list"][1]["x"] = 99
    out["spec"]["new"]["deep"].append(2)
    assert target == {"spec": {"list": [1, {"x": 1}]}}
    assert patch == {"spec": {"new": {"deep": [1]}}}


def test_merge_patch_rejects_absurd_nesting() -> None:
    deep: Any = {}
    cur = deep
    for _ in range(MAX_DEPTH + 5):
        cur["a"] = {}
        cur = cur["a"]
    with pytest.raises(BadRequest, match="nested too deeply"):
        merge_patch({}, deep)


# ---------------------------------------------------------------------------- RFC 6902

DOC = {"foo": ["bar", "baz"], "": 0, "a/b": 1, "c%d": 2, "e^f": 3, "m~n": 8, "k": {"x": 1}}


@pytest.mark.parametrize(
    ("ops", "expected"),
    [
        ([{"op": "add", "path": "/new", "value": 1}], {**DOC, "new": 1}),
        ([{"op": "add", "path": "/foo/1", "value": "qux"}], {**DOC, "foo": ["bar", "qux", "baz"]}),
        ([{"op": "add", "path": "/foo/-", "value": "end"}], {**DOC, "foo": ["bar", "baz", "end"]}),
        ([{"op": "add", "path": "/foo/2", "value": "end"}], {**DOC, "foo": ["bar", "baz", "end"]}),
        ([{"op": "add", "path": "/k", "value": [1]}], {**DOC, "k": [1]}),
        ([{"op": "remove", "path": "/foo/0"}], {**DOC, "foo": ["baz"]}),
        ([{"op": "remove", "path": "/a~1b"}], {k: v for k, v in DOC.items() if k != "a/b"}),
        ([{"op": "remove", "path": "/m~0n"}], {k: v for k, v in DOC.items() if k != "m~n"}),
        ([{"op": "replace", "path": "/k/x", "value": 2}], {**DOC, "k": {"x": 2}}),
        ([{"op": "replace", "path": "/", "value": 5}], {**DOC, "": 5}),
        ([{"op": "replace", "path": "", "value": [1]}], [1]),
        ([{"op": "move", "from": "/k/x", "path": "/y"}], {**DOC, "k": {}, "y": 1}),
        ([{"op": "move", "from": "/foo/0", "path": "/foo/1"}], {**DOC, "foo": ["baz", "bar"]}),
        ([{"op": "copy", "from": "/k", "path": "/k2"}], {**DOC, "k2": {"x": 1}}),
        ([{"op": "test", "path": "/foo", "value": ["bar", "baz"]}], DOC),
        ([{"op": "test", "path": "/c%d", "value": 2.0}], DOC),
        (
            [{"op": "test", "path": "/e^f", "value": 3}, {"op": "test", "path": "/", "value": 0}],
            DOC,
        ),
        ([], DOC),
    ],
)
def test_json_patch(ops: list[dict[str, Any]], expected: Any) -> None:
    before = copy.deepcopy(DOC)
    assert json_patch(DOC, ops) == expected
    assert before == DOC


@pytest.mark.parametrize(
    ("ops", "field"),
    [
        ([{"op": "test", "path": "/k/x", "value": 2}], "/k/x"),
        ([{"op": "test", "path": "/k/x", "value": True}], "/k/x"),
        ([{"op": "test", "path": "/foo/0", "value": "baz"}], "/foo/0"),
        ([{"op": "remove", "path": "/missing"}], "/missing"),
        ([{"op": "replace", "path": "/missing", "value": 1}], "/missing"),
        ([{"op": "add", "path": "/missing/x", "value": 1}], "/missing/x"),
        ([{"op": "add", "path": "/foo/5", "value": 1}], "/foo/5"),
        ([{"op": "add", "path": "/foo/01", "value": 1}], "/foo/01"),
        ([{"op": "add", "path": "/foo/x", "value": 1}], "/foo/x"),
        ([{"op": "add", "path": "/foo/-1", "value": 1}], "/foo/-1"),
        ([{"op": "remove", "path": "/foo/-"}], "/foo/-"),
        ([{"op": "remove", "path": ""}], "/"),
        ([{"op": "add", "path": "/k/x/y", "value": 1}], "/k/x/y"),
        ([{"op": "move", "from": "/k", "path": "/k/inner"}], "/k/inner"),
        ([{"op": "copy", "from": "/nope", "path": "/x"}], "/nope"),
    ],
)
def test_json_patch_apply_failures_are_invalid(ops: list[dict[str, Any]], field: str) -> None:
    before = copy.deepcopy(DOC)
    with pytest.raises(Invalid) as info:
        json_patch(DOC, ops)
    assert info.value.code == 422
    assert [c.field for c in info.value.causes] == [field]
    assert before == DOC


def test_failed_test_leaves_earlier_operations_unapplied() -> None:
    doc = {"a": 1}
    ops = [{"op": "replace", "path": "/a", "value": 2}, {"op": "test", "path": "/a", "value": 3}]
    with pytest.raises(Invalid, match="test operation failed"):
        json_patch(doc, ops)
    assert doc == {"a": 1}


@pytest.mark.parametrize(
    "ops",
    [
        {"op": "add"},
        "add",
        [1],
        [{"path": "/a"}],
        [{"op": "frobnicate", "path": "/a"}],
        [{"op": "add", "value": 1}],
        [{"op": "add", "path": "/a"}],
        [{"op": "replace", "path": "/a"}],
        [{"op": "test", "path": "/a"}],
        [{"op": "move", "path": "/a"}],
        [{"op": "copy", "path": "/a", "from": 5}],
        [{"op": "add", "path": "a", "value": 1}],
        [{"op": "add", "path": "/a~2", "value": 1}],
        [{"op": "add", "path": "/a~", "value": 1}],
        [{"op": "add", "path": 7, "value": 1}],
        [{"op": "remove", "path": "/k"}] * 10_001,
    ],
)
def test_malformed_patches_are_bad_requests(ops: Any) -> None:
    with pytest.raises(BadRequest) as info:
        json_patch(DOC, ops)
    assert info.value.code == 400


def test_pointer_parsing() -> None:
    assert parse_pointer("") == []
    assert parse_pointer("/") == [""]
    assert parse_pointer("/a~1b/m~0n/~01") == ["a/b", "m~n", "~1"]


def test_exponential_copy_is_bounded() -> None:
    ops = [{"op": "copy", "from": "/a", "path": "/a/-"}] * 60
    with pytest.raises((BadRequest, Invalid)):
        json_patch({"a": [1]}, ops)


def test_json_equal() -> None:
    assert json_equal(1, 1.0)
    assert not json_equal(True, 1)
    assert not json_equal(0, False)
    assert json_equal({"a": [1, {"b": None}]}, {"a": [1.0, {"b": None}]})
    assert not json_equal({"a": 1}, {"b": 1})
    assert not json_equal([1], [1, 2])
    assert not json_equal("1", 1)


# ---------------------------------------------------------------------------- properties

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-1000, 1000), st.text(max_size=5))
json_values = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=4), children, max_size=4)
    ),
    max_leaves=20,
)
json_objects = st.dictionaries(st.text(max_size=4), json_values, max_size=5)


def _no_null_members(value: Any) -> bool:
    if isinstance(value, dict):
        return all(v is not None and _no_null_members(v) for v in value.values())
    if isinstance(value, list):
        return all(_no_null_members(v) for v in value)
    return True


@given(json_objects, json_objects)
def test_merge_patch_of_diff_reaches_target(original: dict, modified: dict) -> None:
    patch = create_merge_patch(original, modified)
    result = merge_patch(original, patch)
    if _no_null_members(modified):
        assert json_equal(result, modified)
    # Applying the same patch twice changes nothing more (idempotence).
    assert json_equal(merge_patch(result, patch), result)


@given(json_values, json_values)
def test_merge_patch_is_idempotent_and_pure(target: Any, patch: Any) -> None:
    before_t, before_p = copy.deepcopy(target), copy.deepcopy(patch)
    once = merge_patch(target, patch)
    assert json_equal(merge_patch(once, patch), once)
    assert target == before_t and patch == before_p


@st.composite
def patch_ops(draw: st.DrawFn) -> list[dict[str, Any]]:
    paths = st.sampled_from(["", "/a", "/a/0", "/a/-", "/b", "/b/c", "/x~1y", "/a/1", "/zz"])
    ops = []
    for _ in range(draw(st.integers(0, 5))):
        op = draw(st.sampled_from(["add", "remove", "replace", "move", "copy", "test"]))
        item: dict[str, Any] = {"op": op, "path": draw(paths)}
        if op in ("add", "replace", "test"):
            item["value"] = draw(json_values)
        if op in ("move", "copy"):
            item["from"] = draw(paths)
        ops.append(item)
    return ops


@given(json_objects, patch_ops())
def test_json_patch_never_mutates_and_only_raises_status_errors(doc: dict, ops: list) -> None:
    before_doc, before_ops = copy.deepcopy(doc), copy.deepcopy(ops)
    with contextlib.suppress(BadRequest, Invalid):
        json_patch(doc, ops)
    assert doc == before_doc
    assert ops == before_ops


@given(json_objects, json_values)
def test_add_then_remove_round_trips(doc: dict, value: Any) -> None:
    key = "__new__"
    if key in doc:
        return
    added = json_patch(doc, [{"op": "add", "path": f"/{key}", "value": value}])
    assert json_patch(added, [{"op": "test", "path": f"/{key}", "value": value}]) == added
    assert json_patch(added, [{"op": "remove", "path": f"/{key}"}]) == doc
