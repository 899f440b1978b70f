from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.errors import BadRequest
from app.core.fields import FieldRequirement, escape_value, get_path, parse_field_selector

POD_FIELDS = (
    "spec.nodeName",
    "status.phase",
    "spec.priority",
    "spec.schedulerName",
    "status.ready",
)
POD = {
    "metadata": {"name": "web-0", "namespace": "default"},
    "spec": {"nodeName": "n1", "priority": 1000},
    "status": {"phase": "Running", "ready": True},
}


def getter(obj: dict[str, Any]) -> Any:
    return lambda path: get_path(obj, path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", True),
        ("spec.nodeName=n1", True),
        ("spec.nodeName==n1", True),
        ("spec.nodeName!=n1", False),
        ("spec.nodeName=n2", False),
        ("spec.nodeName=n1,status.phase!=Running", False),
        ("spec.nodeName=n1,status.phase!=Pending", True),
        ("metadata.name=web-0", True),
        ("metadata.namespace=default", True),
        ("metadata.namespace=kube-system", False),
        ("spec.priority=1000", True),
        ("status.ready=true", True),
        ("status.ready=false", False),
        ("spec.schedulerName=", True),
        ("spec.schedulerName!=", False),
        ("spec.nodeName=n1 ", False),
        ("spec.nodeName=n1,", True),
        (",,spec.nodeName=n1", True),
    ],
)
def test_parse_and_match(text: str, expected: bool) -> None:
    assert parse_field_selector(text, POD_FIELDS).matches(getter(POD)) is expected


def test_requirements_are_tuples() -> None:
    sel = parse_field_selector("spec.nodeName=n1,status.phase!=Running", POD_FIELDS)
    assert list(sel) == [("spec.nodeName", "=", "n1"), ("status.phase", "!=", "Running")]
    assert isinstance(sel.requirements[0], FieldRequirement)
    assert len(sel) == 2


@pytest.mark.parametrize(
    "text",
    [
        "spec.containers=x",
        "metadata.labels=x",
        "status.podIP=1.2.3.4",
        "foo=bar",
        " spec.nodeName=x",
    ],
)
def test_unknown_paths(text: str) -> None:
    with pytest.raises(BadRequest) as info:
        parse_field_selector(text, POD_FIELDS)
    assert info.value.message == f"field label not supported: {text.split('=')[0]}"


@pytest.mark.parametrize(
    "text",
    ["spec.nodeName", "=x", "spec.nodeName=a=b",
     "spec.nodeName=a!b", "spec.nodeName=a\\", "spec.nodeName=a\\x", "spec.nodeName<3"],
)  # fmt: skip
def test_malformed(text: str) -> None:
    with pytest.raises(BadRequest):
        parse_field_selector(text, POD_FIELDS)


def test_escapes() -> None:
    sel = parse_field_selector(r"metadata.name=a\,b\=c\!d\\e", ())
    assert sel.requirements[0].value == "a,b=c!d\\e"
    assert sel.matches(lambda _: "a,b=c!d\\e")


def test_hostile_input() -> None:
    with pytest.raises(BadRequest, match="too long"):
        parse_field_selector("metadata.name=x," * 10_000, ())
    with pytest.raises(BadRequest):
        parse_field_selector(["metadata.name=x"], ())  # type: ignore[arg-type]


def test_get_path() -> None:
    assert get_path(POD, "spec.nodeName") == "n1"
    assert get_path(POD, "spec.nodeName.deeper") is None
    assert get_path(POD, "nope.x") is None


@given(st.text(max_size=30))
def test_escape_round_trip(value: str) -> None:
    sel = parse_field_selector(f"metadata.name={escape_value(value)}", ())
    assert sel.requirements[0].value == value
    assert parse_field_selector(str(sel), ()) == sel
