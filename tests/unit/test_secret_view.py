"""How the API shows Secrets to each principal (app.api.secret_view), with a fake authorizer."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest

from app.api import secret_view
from app.core.authz import Attributes, Decision
from app.core.kinds import BY_KIND
from app.core.secretbox import REDACTED_ANNOTATION
from app.store import secret_keys
from app.store.tokens import User

SECRET, POD = BY_KIND["Secret"], BY_KIND["Pod"]
DATA = {"k": "c2VjcmV0"}
ALICE = User("alice", ("system:authenticated",))


class OnlyNamed:
    """Allows ``get`` on the Secrets named, nothing else."""

    def __init__(self, *names: str) -> None:
        self.names = names
        self.asked: list[Attributes] = []

    def authorize(self, user: Any, attrs: Attributes) -> Decision:
        self.asked.append(attrs)
        return Decision(attrs.verb == "get" and attrs.name in self.names)


@pytest.fixture(autouse=True)
def keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "keys.json"
    secret_keys.ensure_keys_file(path)
    monkeypatch.setenv(secret_keys.ENV, str(path))


def stored(name: str) -> bytes:
    spec = secret_keys.seal_spec({"type": "Opaque", "data": DATA}, "ns", name)
    meta = {"namespace": "ns", "name": name, "resourceVersion": "7"}
    return msgspec.json.encode({"kind": "Secret", "metadata": meta, **spec})


def test_get_allowed_opens_others_are_withheld() -> None:
    state = SimpleNamespace(authz=OnlyNamed("a"))
    a, b = (json.loads(r) for r in secret_view.reveal_all(state, ALICE, SECRET,
                                                           [stored("a"), stored("b")]))  # fmt: skip
    assert a["data"] == DATA and REDACTED_ANNOTATION not in (a["metadata"].get("annotations") or {})
    assert "data" not in b and b["metadata"]["annotations"] == {REDACTED_ANNOTATION: "true"}
    assert [(x.verb, x.resource, x.namespace, x.name) for x in state.authz.asked] == [
        ("get", "secrets", "ns", "a"),
        ("get", "secrets", "ns", "b"),
    ]


def test_masters_always_see_and_other_kinds_pass_untouched() -> None:
    state = SimpleNamespace(authz=OnlyNamed())
    admin = User("admin", ("system:masters",))
    assert json.loads(secret_view.reveal(state, admin, SECRET, stored("a")))["data"] == DATA
    raw = b'{"kind":"Pod","data":"qm1.x.y.z"}'
    assert secret_view.reveal(state, ALICE, POD, raw) is raw
    assert state.authz.asked == []


async def test_watch_lines_are_shaped_per_event() -> None:
    state = SimpleNamespace(authz=OnlyNamed("a"))
    bookmark = b'{"type":"BOOKMARK","object":{"kind":"Secret","metadata":{"resourceVersion":"9"}}}'

    async def lines() -> AsyncIterator[bytes]:
        yield b'{"type":"ADDED","object":' + stored("a") + b"}\n"
        yield (b'{"type":"MODIFIED","object":' + stored("b") + b"}\n" + bookmark + b"\n")

    chunks = [c async for c in secret_view.reveal_stream(state, ALICE, SECRET, lines())]
    events = [json.loads(line) for c in chunks for line in c.splitlines()]
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "BOOKMARK"]
    assert events[0]["object"]["data"] == DATA
    assert "data" not in events[1]["object"]
    assert events[2]["object"] == {"kind": "Secret", "metadata": {"resourceVersion": "9"}}
