"""Principal names, the audit actor text, durations and token requests (pure)."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

import pytest

from app.cli.context import UsageError
from app.cli.tokens import spec_of
from app.core.admission import admit
from app.core.errors import Invalid
from app.core.kinds import BY_KIND
from app.core.principals import (
    AUTHENTICATED,
    DEFAULT_TTL_S,
    actor,
    check_request,
    parse_duration,
    service_account_of,
    service_account_user,
    with_authenticated,
)
from app.store.tokens import User


def test_service_account_names_and_groups() -> None:
    assert service_account_user("team-a", "ci") == (
        "system:serviceaccount:team-a:ci",
        ("system:serviceaccounts", "system:serviceaccounts:team-a"),
    )
    assert service_account_of("system:serviceaccount:team-a:ci") == ("team-a", "ci")
    for name in ("alice", "system:serviceaccount:", "system:serviceaccount:ns", "system:node:n1"):
        assert service_account_of(name) is None


def test_every_principal_is_authenticated_once() -> None:
    assert with_authenticated(("a",)) == ("a", AUTHENTICATED)
    assert with_authenticated(("a", AUTHENTICATED)) == ("a", AUTHENTICATED)


def test_the_actor_text_joins_name_and_groups() -> None:
    assert actor("alice", ()) == "alice"
    assert actor("alice", ("g1", "g2")) == "alice\x1fg1\x1fg2"
    assert User("alice", ("g",)).actor == "alice\x1fg"
    assert User("alice", ("g",)) == User("alice", ("g",))  # constructor-compatible


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("90s", 90), ("15m", 900), ("12h", 43200), ("30d", 2592000), ("1h30m", 5400)],
)
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "1.5h", "-5m", "5 m", "1y", "1h-"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_a_request_defaults_to_the_requester_for_a_day() -> None:
    req = check_request({"spec": {}}, "alice")
    assert (req.user, req.groups, req.ttl_s, req.service_account) == (
        "alice",
        (),
        DEFAULT_TTL_S,
        None,
    )
    req = check_request({"spec": {"groups": ["b", "a", "b", AUTHENTICATED]}}, "alice")
    assert req.groups == ("b", "a")


def test_a_service_account_request_takes_the_accounts_identity() -> None:
    req = check_request({"spec": {"serviceAccount": {"namespace": "ns", "name": "ci"}}}, "admin")
    assert req.user == "system:serviceaccount:ns:ci"
    assert req.groups == ("system:serviceaccounts", "system:serviceaccounts:ns")
    assert req.service_account == ("ns", "ci")
    by_name = check_request({"spec": {"user": "system:serviceaccount:ns:ci"}}, "admin")
    assert by_name.service_account == ("ns", "ci")


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ([], [""]),
        ({"spec": []}, ["spec"]),
        ({"kind": "Pod"}, ["kind"]),
        ({"spec": {"expirationSeconds": 59}}, ["spec.expirationSeconds"]),
        ({"spec": {"expirationSeconds": 1.5}}, ["spec.expirationSeconds"]),
        ({"spec": {"description": "d" * 1025}}, ["spec.description"]),
        ({"spec": {"user": "a\nb"}}, ["spec.user"]),
        ({"spec": {"groups": [""] }}, ["spec.groups[0]"]),
        ({"spec": {"groups": ["g"] * 33}}, ["spec.groups"]),
        ({"spec": {"serviceAccount": "ns/ci"}}, ["spec.serviceAccount"]),
        ({"spec": {"serviceAccount": {}}},
         ["spec.serviceAccount.namespace", "spec.serviceAccount.name"]),
        ({"spec": {"serviceAccount": {"namespace": "n", "name": "c"}, "user": "bob"}},
         ["spec.user"]),
        ({"spec": {"x": 1, "expirationSeconds": 0}}, ["spec.x", "spec.expirationSeconds"]),
    ],
)  # fmt: skip
def test_every_problem_is_a_cause(body: Any, fields: list[str]) -> None:
    with pytest.raises(Invalid) as caught:
        check_request(body, "alice")
    assert [c.field for c in caught.value.causes] == fields


def test_service_account_admission() -> None:
    sa = BY_KIND["ServiceAccount"]
    ok = admit(sa, {"metadata": {"name": "ci", "namespace": "ns"}, "secrets": [{"name": "s"}],
                    "automountServiceAccountToken": False}, None)  # fmt: skip
    assert ok["kind"] == "ServiceAccount" and ok["secrets"] == [{"name": "s"}]
    with pytest.raises(Invalid) as caught:
        admit(sa, {"metadata": {"name": "ci", "namespace": "ns"},
                   "imagePullSecrets": [{"name": "Bad_Name"}, 3],
                   "automountServiceAccountToken": "yes"}, None)  # fmt: skip
    fields = {c.field for c in caught.value.causes}
    assert fields == {"imagePullSecrets[0].name", "imagePullSecrets[1]",
                      "automountServiceAccountToken"}  # fmt: skip


def _args(**kw: Any) -> argparse.Namespace:
    base: dict[str, Any] = {
        "service_account": None, "user": None, "group": [], "ttl": None, "expires": None,
        "description": "",
    }  # fmt: skip
    return argparse.Namespace(**{**base, **kw})


def test_cli_flags_become_a_spec() -> None:
    spec = spec_of(_args(service_account="ns/ci", ttl="1h", description="d"), 0.0)
    assert spec == {"serviceAccount": {"namespace": "ns", "name": "ci"},
                    "expirationSeconds": 3600, "description": "d"}  # fmt: skip
    now = 1_800_000_000.0
    spec = spec_of(_args(user="u", group=["a", "b"], expires="2027-01-15T08:00:00Z"), now)
    assert spec["user"] == "u" and spec["groups"] == ["a", "b"]
    assert spec["expirationSeconds"] == int(datetime(2027, 1, 15, 8, tzinfo=UTC).timestamp() - now)
    for bad in (_args(service_account="ci"), _args(ttl="soon"), _args(expires="tomorrow")):
        with pytest.raises(UsageError):
            spec_of(bad, now)
