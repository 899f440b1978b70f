from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.errors import BadRequest
from app.core.labels import (
    Requirement,
    Selector,
    from_label_selector,
    matches,
    parse_selector,
    requirement,
    selector_from_labels,
    validate_label_key,
    validate_label_value,
)

LABELS = {"app": "web", "tier": "frontend", "env": "prod", "example.com/team": "a"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", True),
        ("app=web", True),
        ("app==web", True),
        ("app = web", True),
        ("app=db", False),
        ("app!=db", True),
        ("app!=web", False),
        ("missing!=x", True),
        ("app in (web,db)", True),
        ("app in (db)", False),
        ("app notin (db,cache)", True),
        ("app notin (web)", False),
        ("missing notin (x)", True),
        ("missing in (x)", False),
        ("tier", True),
        ("missing", False),
        ("!missing", True),
        ("!tier", False),
        ("app=web,tier=frontend", True),
        ("app=web,tier=backend", False),
        ("example.com/team=a", True),
        ("app=web, env in (prod, staging), !canary", True),
        ("missing=", False),
        ("env notin (dev),tier,!gone,app==web", True),
    ],
)
def test_parse_and_match(text: str, expected: bool) -> None:
    assert parse_selector(text).matches(LABELS) is expected


def test_empty_value_matches_empty_label() -> None:
    assert parse_selector("a=").matches({"a": ""})
    assert not parse_selector("a=").matches({})
    assert parse_selector("a in (,x)").matches({"a": ""})
    assert parse_selector("a in ()").matches({"a": ""})
    assert parse_selector("a in ()") == parse_selector("a in (,)")


@pytest.mark.parametrize(
    "text",
    [
        "a=b,",
        ",a=b",
        "a=b,,c=d",
        "a in (x",
        "a in x",
        "a notin",
        "a in (x y)",
        "a b",
        "=b",
        "!",
        "!=b",
        "a=b=c",
        "a=(b)",
        "a!b",
        "a=b c",
        "bad key=x",
        "a=bad value!",
        "a/b/c=d",
        "-a=b",
        "a=" + "x" * 64,
        "k" * 64 + "=v",
        "a in (b,c",
        "(a)",
        "a)",
        "a,,",
    ],
)
def test_malformed_selectors(text: str) -> None:
    with pytest.raises(BadRequest) as info:
        parse_selector(text)
    assert info.value.code == 400
    assert "selector" in info.value.message


def test_hostile_selector_is_rejected_cleanly() -> None:
    with pytest.raises(BadRequest, match="too long"):
        parse_selector("a=b," * 100_000)
    with pytest.raises(BadRequest):
        parse_selector(123)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("key", "ok"),
    [
        ("app", True),
        ("App.Name_1", True),
        ("example.com/app", True),
        ("kubernetes.io/hostname", True),
        ("a" * 63, True),
        ("a" * 64, False),
        ("", False),
        ("/app", False),
        ("example.com/", False),
        ("Example.com/app", False),
        ("a/b/c", False),
        ("-app", False),
        ("app-", False),
        ("app name", False),
        ("x" * 254 + "/app", False),
    ],
)
def test_label_keys(key: str, ok: bool) -> None:
    assert (validate_label_key(key) == []) is ok


@pytest.mark.parametrize(
    ("value", "ok"),
    [("", True), ("web", True), ("v1.2_3-x", True), ("a" * 63, True), ("a" * 64, False),
     ("-x", False), ("x.", False), ("a b", False), ("a/b", False)],
)  # fmt: skip
def test_label_values(value: str, ok: bool) -> None:
    assert (validate_label_value(value) == []) is ok


def test_non_string_keys_and_values_are_errors() -> None:
    assert validate_label_key(5) != []  # type: ignore[arg-type]
    assert validate_label_value(None) != []  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("structured", "expected"),
    [
        ({}, True),
        ({"matchLabels": {"app": "web"}}, True),
        ({"matchLabels": {"app": "db"}}, False),
        ({"matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}]}, True),
        ({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}]}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, False),
        (
            {
                "matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "gone", "operator": "DoesNotExist"}],
            },
            True,
        ),
    ],
)
def test_structured_selectors(structured: dict, expected: bool) -> None:
    assert from_label_selector(structured).matches(LABELS) is expected
    assert matches(structured, LABELS) is expected


def test_nil_structured_selector_matches_nothing() -> None:
    nothing = from_label_selector(None)
    assert not nothing.matches(LABELS)
    assert not nothing.matches({})
    assert not nothing.empty
    with pytest.raises(ValueError):
        str(nothing)
    assert from_label_selector({}).empty


@pytest.mark.parametrize(
    "structured",
    [
        [],
        {"matchLabels": ["a"]},
        {"matchLabels": {"a": 1}},
        {"matchExpressions": {"key": "a"}},
        {"matchExpressions": ["a"]},
        {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]},
        {"matchExpressions": [{"key": "a", "operator": "In"}]},
        {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
        {"matchExpressions": [{"key": 1, "operator": "Exists"}]},
        {"matchExpressions": [{"key": "a", "operator": "In", "values": "x"}]},
    ],
)
def test_malformed_structured_selectors(structured: object) -> None:
    with pytest.raises(BadRequest):
        from_label_selector(structured)  # type: ignore[arg-type]


def test_selector_from_labels_and_back() -> None:
    sel = selector_from_labels({"app": "web", "tier": "fe"})
    assert str(sel) == "app=web,tier=fe"
    assert sel.to_label_selector() == {"matchLabels": {"app": "web", "tier": "fe"}}


def test_to_label_selector_round_trip() -> None:
    sel = parse_selector("a=1,b!=2,c in (x,y),d notin (z),e,!f")
    assert from_label_selector(sel.to_label_selector()).matches({"a": "1", "c": "x", "e": ""})
    again = from_label_selector(sel.to_label_selector())
    for labels in ({"a": "1", "c": "x", "e": ""}, {"a": "1", "b": "2"}, {}, {"a": "1", "c": "y",
                   "e": "", "f": ""}):  # fmt: skip
        assert again.matches(labels) == sel.matches(labels)


def test_requirement_validation() -> None:
    assert requirement("a", "in", ["y", "x", "x"]) == Requirement("a", "in", ("x", "y"))
    for args in (("a", "=", []), ("a", "in", []), ("a", "exists", ["x"]), ("a", "~", ["x"])):
        with pytest.raises(BadRequest):
            requirement(*args)


# ---------------------------------------------------------------------------- properties

_name = st.from_regex(r"[a-z0-9]([a-z0-9._-]{0,10}[a-z0-9])?", fullmatch=True)
_key = st.one_of(
    _name,
    st.builds(lambda p, n: f"{p}.io/{n}", st.from_regex(r"[a-z]{1,8}", fullmatch=True), _name),
)
_value = st.one_of(st.just(""), _name)


@st.composite
def requirements(draw: st.DrawFn) -> Requirement:
    key = draw(_key)
    op = draw(st.sampled_from(["=", "!=", "in", "notin", "exists", "!"]))
    if op in ("=", "!="):
        return requirement(key, op, [draw(_value)])
    if op in ("in", "notin"):
        return requirement(key, op, draw(st.lists(_value, min_size=1, max_size=4)))
    return requirement(key, op)


@given(st.lists(requirements(), max_size=6))
def test_format_parse_round_trip(reqs: list[Requirement]) -> None:
    sel = Selector.of(reqs)
    assert parse_selector(str(sel)) == sel
    assert str(parse_selector(str(sel))) == str(sel)


@given(st.lists(requirements(), max_size=6), st.dictionaries(_key, _value, max_size=6))
def test_structured_form_agrees_with_string_form(reqs: list[Requirement], labels: dict) -> None:
    sel = Selector.of(reqs)
    assert from_label_selector(sel.to_label_selector()).matches(labels) == sel.matches(labels)


@given(st.text(max_size=60))
def test_arbitrary_text_parses_or_is_bad_request(text: str) -> None:
    try:
        sel = parse_selector(text)
    except BadRequest:
        return
    assert parse_selector(str(sel)) == sel
