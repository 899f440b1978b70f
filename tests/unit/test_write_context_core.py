"""The write context's text, its defaults, the reason's checks and the API's request facts."""

from __future__ import annotations

import json

import httpx
import pytest

from app.api.request_context import facts_of, write_context
from app.cli.client import ApiClient
from app.cli.main import build_parser
from app.client import build
from app.core import errors
from app.core.audit import (
    MAX_REASON,
    WriteContext,
    check_reason,
    contexts_text,
    controller,
    text_of,
    valid_request_id,
)
from app.store.tokens import User


def test_the_text_names_only_the_fields_set() -> None:
    ctx = WriteContext(principal="alice", groups=("dev", "ops"), reason="fix the port")
    assert json.loads(ctx.text()) == {
        "principal": "alice",
        "groups": ["dev", "ops"],
        "reason": "fix the port",
    }
    assert text_of(None) == ""
    assert json.loads(WriteContext().text()) == {}


def test_the_store_fills_in_verb_and_subresource_only_where_missing() -> None:
    ctx = WriteContext(principal="a")
    assert ctx.defaults(verb="update", subresource="status") == WriteContext(
        principal="a", verb="update", subresource="status"
    )
    given = WriteContext(principal="a", verb="patch")
    assert given.defaults(verb="update").verb == "patch"
    assert given.defaults(verb="update") is given


def test_a_batch_maps_namespace_and_name_to_each_context() -> None:
    text = contexts_text(
        [
            ("ns", "a", WriteContext(principal="p")),
            ("", "node-1", controller("x")),
            ("n", "b", None),
        ]
    )
    assert json.loads(text) == {
        "ns/a": {"principal": "p"},
        "/node-1": {"principal": "system:controller:x"},
    }
    assert contexts_text([("n", "b", None)]) == ""


@pytest.mark.parametrize(
    ("reason", "refused"),
    [
        ("drain for kernel upgrade CHG-1234", False),
        ("ünïcode is fine", False),
        ("x" * MAX_REASON, False),
        ("x" * (MAX_REASON + 1), True),
        ("line\nbreak", True),
        ("tab\there", True),
        ("bell\x07", True),
        ("del\x7f", True),
    ],
)
def test_a_reason_is_short_and_free_of_control_characters(reason: str, refused: bool) -> None:
    assert (check_reason(reason) is not None) == refused


@pytest.mark.parametrize(
    ("given", "kept"),
    [("abc-123", True), ("a" * 128, True), ("a" * 129, False), ("has space", False), ("", False)],
)
def test_a_client_request_id_is_reused_only_when_it_is_a_short_token(
    given: str, kept: bool
) -> None:
    assert valid_request_id(given) == kept


def _scope(*headers: tuple[str, str]) -> dict[str, object]:
    return {
        "type": "http",
        "client": ("10.0.0.7", 5555),
        "headers": [(k.encode(), v.encode()) for k, v in headers],
    }


def test_request_facts_come_from_the_headers_and_the_peer() -> None:
    facts = facts_of(
        _scope(("X-Request-Id", "req-1"), ("User-Agent", "qm/1\x01"), ("X-Reason", "why"))
    )
    assert (facts.request_id, facts.client, facts.user_agent, facts.reason) == (
        "req-1",
        "10.0.0.7",
        "qm/1?",
        "why",
    )
    fresh = facts_of(_scope(("X-Request-Id", "not a token")))
    assert fresh.request_id != "not a token" and len(fresh.request_id) == 32
    assert fresh.reason is None


def test_a_bad_reason_is_refused_before_anything_runs() -> None:
    with pytest.raises(errors.BadRequest, match="control characters"):
        facts_of(_scope(("X-Reason", "a\x1bb")))


def test_outside_a_request_the_context_names_the_user_only() -> None:
    ctx = write_context(User("bob", ("system:authenticated",)), verb="patch")
    assert ctx == WriteContext(principal="bob", groups=("system:authenticated",), verb="patch")


@pytest.mark.parametrize(
    "argv",
    [
        ["drain", "n1", "--reason", "kernel upgrade"],
        ["rollout", "undo", "deployment/web", "--reason", "kernel upgrade"],
        ["--reason", "kernel upgrade", "delete", "cm", "x"],
    ],
)
def test_reason_is_a_flag_of_every_command(argv: list[str]) -> None:
    assert build_parser().parse_args(argv).reason == "kernel upgrade"


def test_the_cli_sends_the_reason_with_every_request() -> None:
    seen: list[str | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("X-Reason"))
        return httpx.Response(200, json={"gitVersion": "v1"})

    client = ApiClient("http://api", "t", reason="CHG-1", transport=httpx.MockTransport(answer))
    client.send(build.version())
    client.clone().send(build.version())
    assert seen == ["CHG-1", "CHG-1"]
