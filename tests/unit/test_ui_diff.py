"""The UI's diff: one changed field is one line each way, key order is not a change."""

from __future__ import annotations

from app.api.ui.diff import diff


def test_equal_values_have_no_diff_whatever_their_key_order() -> None:
    assert diff({"a": 1, "b": [1, 2]}, {"b": [1, 2], "a": 1}) == []


def test_a_changed_field_is_one_line_out_and_one_in() -> None:
    before = {"spec": {"replicas": 2, "image": "web:1"}}
    after = {"spec": {"replicas": 2, "image": "web:2"}}
    changed = [(x.op, x.text.strip()) for x in diff(before, after) if x.op in "+-"]
    assert changed == [("-", '"image": "web:1",'), ("+", '"image": "web:2",')]


def test_an_insert_is_all_additions() -> None:
    lines = diff(None, {"a": 1})
    assert {x.op for x in lines} <= {"+", "@"} and any(x.op == "+" for x in lines)
