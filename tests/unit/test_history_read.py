"""The history read API's pure parts: the continue token, the query's SQL shape, parameter
validation, authorisation and how a row is shown (ADR 0061)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.api import history as api
from app.api.authz import RBAC, Authorization
from app.core import errors
from app.core.authz import ALLOW, NO_OPINION, Attributes
from app.store import history_read as h
from app.store.tokens import User

AT = datetime(2026, 12, 2, 10, 0, 0, 123456, tzinfo=UTC)


@given(st.datetimes(timezones=st.just(UTC)), st.integers(min_value=0, max_value=2**62))
def test_a_token_carries_its_cursor_back(at: datetime, id_: int) -> None:
    q = h.Query(table="pods", namespace="a", name="p")
    assert h.decode_token(h.encode_token(q, h.Cursor(at, id_)), q) == h.Cursor(at, id_)


@pytest.mark.parametrize("token", ["", "!!", "bm90LWEtdG9rZW4", "eyJ2IjoyfQ", "e30"])
def test_a_malformed_token_is_refused(token: str) -> None:
    with pytest.raises(h.BadToken):
        h.decode_token(token, h.Query())


def test_a_token_is_good_only_for_the_query_that_issued_it() -> None:
    token = h.encode_token(h.Query(namespace="a"), h.Cursor(AT, 7))
    with pytest.raises(h.BadToken, match="other filters"):
        h.decode_token(token, h.Query(namespace="b"))
    # The page size may change between pages.
    assert h.decode_token(token, h.Query(namespace="a", limit=5)).id == 7


def test_an_object_or_a_principal_is_read_by_time_the_rest_by_id() -> None:
    by_time, _ = h.statement(h.Query(table="pods", namespace="a", name="p", after=h.Cursor(AT, 9)))
    assert "ORDER BY q.at DESC, q.id DESC" in by_time and "q.at <= $4" in by_time
    by_id, args = h.statement(h.Query(namespace="a", after=h.Cursor(AT, 9), limit=10))
    where = by_id.split(" WHERE ")[1].split("ORDER BY")[0]
    assert "ORDER BY q.id DESC" in by_id and "q.at" not in where
    assert "q.op <> 'summary'" in by_id and args == ["a", 9, 11]
    asked, args = h.statement(h.Query(ops=("summary",)))
    assert "q.op = ANY($1::text[])" in asked and args[0] == ["summary"]


def _row(**over: Any) -> dict[str, Any]:
    row = {c: None for c in h.COLUMNS} | {"id": 1, "at": AT, "table_name": "configmaps",
                                          "op": "update", "seq": None}  # fmt: skip
    return row | over


def test_an_update_names_its_changed_columns_and_sealing_shows() -> None:
    item = h.item(_row(before={"spec": 1}, after={"spec": 2, "row_version": 3}, seq=4))
    assert item["changed"] == ["row_version", "spec"] and item["sealed"] and item["seq"] == 4
    assert item["table"] == "configmaps" and "table_name" not in item


def test_a_secrets_values_never_leave_even_from_legacy_rows() -> None:
    note = "kubectl.kubernetes.io/last-applied-configuration"
    legacy = {"spec": {"data": {"password": "aHVudGVyMg=="}, "type": "Opaque"},
              "annotations": {note: "{...}", "keep": "1"}}  # fmt: skip
    item = h.item(_row(table_name="secrets", op="insert", after=legacy))
    assert item["after"]["spec"]["data"].startswith("sha256:")
    assert "aHVudGVyMg" not in str(item) and item["after"]["annotations"] == {"keep": "1"}
    stored = {"spec": {"data": "sha256:abc"}}
    assert h.item(_row(table_name="secrets", after=stored))["after"] == stored
    token = h.item(_row(table_name="qm_tokens", op="delete", before={"token_sha256": "x", "a": 1}))
    assert token["before"] == {"a": 1}


def test_parameters_become_a_query() -> None:
    req = api.parse({"kind": "deploy", "name": "web", "op": "update,delete", "limit": "20",
                     "since": "2026-12-01T00:00:00Z"}, "prod")  # fmt: skip
    q = req.query
    assert (q.table, q.namespace, q.name, q.ops, q.limit) == (
        "deployments", "prod", "web", ("update", "delete"), 20)  # fmt: skip
    assert q.since == datetime(2026, 12, 1, tzinfo=UTC) and q.by_time
    node = api.parse({"kind": "nodes", "name": "n1"}, None).query
    assert node.namespace == "" and node.table == "nodes"
    assert api.parse({"table": "qm_api_servers"}, None).query.table == "qm_api_servers"


@pytest.mark.parametrize(
    ("params", "namespace", "fields"),
    [
        ({"limit": "0"}, None, ["limit"]),
        ({"limit": "²"}, None, ["limit"]),
        ({"since": "2026-12-01"}, None, ["since"]),
        ({"kind": "Node"}, "prod", ["kind"]),
        ({"namespace": "other"}, "prod", ["namespace"]),
        ({"kind": "Pod", "table": "nodes"}, None, ["table"]),
        ({"op": "insert,merge", "uid": "x"}, None, ["uid", "op"]),
        ({"continue": "e30"}, None, ["continue"]),
    ],
)
def test_bad_parameters_are_one_422_naming_each(
    params: dict[str, str], namespace: str | None, fields: list[str]
) -> None:
    with pytest.raises(errors.Invalid) as caught:
        api.parse(params, namespace)
    assert [c.field for c in caught.value.causes] == fields


class _Grants:
    """An authorizer allowing exactly the listed attributes."""

    def __init__(self, *allowed: Attributes) -> None:
        self.allowed = set(allowed)

    def authorize(self, user: Any, attrs: Attributes) -> Any:
        return ALLOW if attrs in self.allowed else NO_OPINION


def _authz(*allowed: Attributes, visible: bool = True) -> Authorization:
    authz = Authorization(RBAC.__new__(RBAC), chain=[_Grants(*allowed)])
    authz.visible = lambda user, namespace: visible  # type: ignore[method-assign]
    return authz


USER = User("ann", ("system:authenticated",))
HISTORY = Attributes("list", "history", "prod", group=api.AUDIT_GROUP)


def test_who_may_read() -> None:
    one = api.parse({"kind": "cm", "name": "web"}, "prod")
    assert api.authorize(_authz(HISTORY), USER, api.parse({}, "prod"), "prod")
    assert api.authorize(_authz(Attributes("get", "configmaps", "prod", "web")), USER, one, "prod")
    kind_only = api.parse({"kind": "cm"}, "prod")
    assert api.authorize(_authz(Attributes("list", "configmaps", "prod")), USER, kind_only, "prod")
    with pytest.raises(errors.Forbidden, match='nor get configmaps "web"'):
        api.authorize(_authz(Attributes("get", "configmaps", "prod", "db")), USER, one, "prod")
    assert not api.authorize(_authz(visible=False), USER, one, "prod")  # as if missing
    with pytest.raises(errors.Forbidden, match="at the cluster scope"):
        api.authorize(_authz(HISTORY), USER, api.parse({}, None), None)
    node = api.parse({"kind": "node", "name": "n1"}, None)
    assert api.authorize(_authz(Attributes("get", "nodes", "", "n1")), USER, node, None)
    # A namespaced kind on the cluster route needs the cluster's history.
    pods = api.parse({"kind": "pod", "name": "p", "namespace": "prod"}, None)
    with pytest.raises(errors.Forbidden):
        api.authorize(_authz(Attributes("get", "pods", "prod", "p")), USER, pods, None)
