"""The agent's credential file and bootstrap token settings, and the log server's token
reviews (remembered for ten seconds on a fake clock, refused when the API cannot answer)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agent import config
from agent.credentials import FILE, ApiServerReviewer, load, save
from app.client import Unreachable, build


def test_a_saved_credential_is_private_and_belongs_to_its_server_and_node(tmp_path: Path) -> None:
    save(tmp_path / "state", "https://api:1", "n1", "tok")
    assert (tmp_path / "state" / FILE).stat().st_mode & 0o777 == 0o600
    assert load(tmp_path / "state", "https://api:1", "n1") == "tok"
    assert load(tmp_path / "state", "https://api:2", "n1") is None
    assert load(tmp_path / "state", "https://api:1", "n2") is None
    assert load(tmp_path / "missing", "https://api:1", "n1") is None
    (tmp_path / "state" / FILE).write_text("not json")
    assert load(tmp_path / "state", "https://api:1", "n1") is None


def test_the_bootstrap_token_comes_from_a_flag_a_variable_or_a_file(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("abcdef.0123456789abcdef\n")
    assert config.parse(["--bootstrap-token", "x"], {}, "h").bootstrap_token == "x"
    env = {"QM_AGENT_BOOTSTRAP_TOKEN_FILE": str(token_file)}
    assert config.parse([], env, "h").bootstrap_token == "abcdef.0123456789abcdef"
    gone = {"QM_AGENT_BOOTSTRAP_TOKEN_FILE": str(tmp_path / "spent")}
    assert config.parse([], gone, "h").bootstrap_token is None  # spent and removed: fine
    with pytest.raises(config.ConfigError, match="bootstrap token file"):
        config.parse(["--bootstrap-token-file", str(tmp_path)], {}, "h")  # a directory


class FakeApi:
    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers, self.calls = answers, 0

    def call(self, request: build.Request) -> Any:
        self.calls += 1
        token = json.loads(request.body or b"{}")["spec"]["token"]
        answer = self.answers[token]
        if isinstance(answer, Exception):
            raise answer
        return {"status": answer}


def user(*groups: str) -> dict[str, Any]:
    return {"authenticated": True, "user": {"username": "x", "groups": list(groups)}}


def test_the_log_server_lets_in_api_servers_and_administrators_only() -> None:
    now = [0.0]
    api = FakeApi({
        "apiserver": user("system:apiservers", "system:authenticated"),
        "admin": user("system:masters"),
        "node": user("system:nodes"),
        "bogus": {"authenticated": False},
        "down": Unreachable("no route"),
    })  # fmt: skip
    reviewer = ApiServerReviewer(api, ttl=10.0, clock=lambda: now[0])  # type: ignore[arg-type]

    def allows(token: str) -> bool:
        return asyncio.run(reviewer.allows(token))

    assert allows("apiserver") and allows("admin")
    assert not allows("node") and not allows("bogus") and not allows("")
    assert not allows("down")
    calls = api.calls
    assert allows("apiserver") and not allows("node")
    assert api.calls == calls, "answers are remembered"
    assert not allows("down") and api.calls == calls + 1, "failures are not"
    now[0] = 11.0
    assert allows("apiserver") and api.calls == calls + 2


def test_a_refused_join_is_a_join_error_with_the_apis_advice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agent import credentials
    from app.core import errors

    refusals = {
        "n1": errors.Forbidden('node "n1" already holds a live credential ... --node n1'),
        "n2": errors.Unauthorized("Unauthorized: the bootstrap token is not valid"),
    }

    class Refusing:
        def __init__(self, server: str, token: str, ca_file: str | None = None) -> None:
            pass

        def call(self, request: build.Request) -> Any:
            raise refusals[json.loads(request.body or b"{}")["spec"]["nodeName"]]

        def close(self) -> None:
            pass

    monkeypatch.setattr(credentials, "AgentApi", Refusing)
    with pytest.raises(credentials.JoinError, match=r"join as node n1 was refused.*--node n1"):
        credentials.join("https://api:1", "abcdef.0123456789abcdef", "n1")
    with pytest.raises(credentials.JoinError, match="bootstrap token was refused"):
        credentials.join("https://api:1", "abcdef.0123456789abcdef", "n2")
