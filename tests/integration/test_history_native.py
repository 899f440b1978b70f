"""The history's row trigger in C writes exactly the rows the PL/pgSQL one writes (ADR 0066).

The same writes run twice on a real PostgreSQL, once with every table's history trigger pointed
at ``qm_history_record()`` and once at ``qm_history_record_native()``; the stored rows and the
counted writes must agree in every column but the ones that differ by construction (id, time,
transaction id, row versions).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

TABLES = ("configmaps", "pods", "leases", "nodes", "qm_tokens", "namespaces")
LONG = "é" * 1500  # multibyte, longer than the 1024 characters kept
# Differ from run to run by construction: sequences, random uids, names made of digests.
VOLATILE = ["row_version", "uid", "name", "id"]


@pytest.fixture(scope="module")
def db(make_database: Callable[[str], str]) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(make_database("qm_hist_native"), autocommit=True) as conn:
        yield conn


def point(db: psycopg.Connection[Any], native: bool) -> None:
    for table in TABLES:
        db.execute("SELECT qm_history_native(%s, %s)", (table, native))


def functions(db: psycopg.Connection[Any]) -> set[str]:
    found = db.execute(
        "SELECT DISTINCT t.tgfoid::regproc::text FROM pg_trigger t WHERE t.tgname = ANY(%s)",
        ([f"{t}_history" for t in TABLES],),
    ).fetchall()
    return {r[0] for r in found}


CONTEXTS: list[str | None] = [
    json.dumps({"principal": "alice", "groups": ["team-a", 5, None, {"x": 1}],
                "request_id": "r-1", "client": "127.0.0.1", "user_agent": "qm/1",
                "reason": LONG, "verb": "update", "subresource": "status"}),
    json.dumps({"principal": 7, "groups": "not-a-list", "reason": ["no"]}),
    "not json at all",
    json.dumps(["an", "array"]),
    "",
    None,
]  # fmt: skip


def writes(db: psycopg.Connection[Any], ns: str, context: str | None) -> None:
    """Inserts, updates (changed, unchanged, numerically equal), counted writes, deletes."""
    with db.transaction():
        if context is not None:
            db.execute("SELECT set_config('qm.context', %s, true)", (context,))
        cm = uuid.uuid5(uuid.NAMESPACE_OID, ns + "cm")
        db.execute(
            "INSERT INTO configmaps (uid, namespace, name, labels, spec, creation_timestamp)"
            ' VALUES (%s, %s, \'cm\', \'{"a": "1"}\', \'{"data": {"n": 1.0}}\','
            " '2026-01-01T00:00:00Z')",
            (cm, ns),
        )
        db.execute('UPDATE configmaps SET spec = \'{"data": {"n": 1.00}}\' WHERE uid = %s', (cm,))
        db.execute('UPDATE configmaps SET labels = \'{"a": "2"}\' WHERE uid = %s', (cm,))
        db.execute("UPDATE configmaps SET name = name WHERE uid = %s", (cm,))
        pod = uuid.uuid5(uuid.NAMESPACE_OID, ns + "pod")
        db.execute(
            "INSERT INTO pods (uid, namespace, name, spec, status, creation_timestamp) VALUES"
            " (%s, %s, 'p', '{}', '{\"phase\": \"Pending\"}', '2026-01-01T00:00:00Z')",
            (pod, ns),
        )
        db.execute(
            "UPDATE pods SET status = status || '{\"probe\": 1}' WHERE uid = %s", (pod,)
        )  # counted: no promoted column moves
        db.execute(
            'UPDATE pods SET status = \'{"phase": "Running"}\' WHERE uid = %s', (pod,)
        )  # stored: the phase moves
        db.execute("DELETE FROM pods WHERE uid = %s", (pod,))
        lease = uuid.uuid5(uuid.NAMESPACE_OID, ns + "lease")
        db.execute(
            "INSERT INTO leases (uid, namespace, name, spec, creation_timestamp) VALUES"
            ' (%s, %s, \'l\', \'{"holderIdentity": "n1", "renewTime": "t0"}\','
            " '2026-01-01T00:00:00Z')",
            (lease, ns),
        )
        db.execute(
            "UPDATE leases SET spec = jsonb_set(spec, '{renewTime}', '\"t1\"') WHERE uid = %s",
            (lease,),
        )  # counted: a renewal
        db.execute(
            'UPDATE leases SET spec = spec || \'{"holderIdentity": "n2"}\' WHERE uid = %s',
            (lease,),
        )  # stored: a new holder
        db.execute("DELETE FROM configmaps WHERE uid = %s", (cm,))
        token = uuid.uuid5(uuid.NAMESPACE_OID, ns + "token").hex
        db.execute(
            "INSERT INTO qm_tokens (token_sha256, username, created_at) VALUES (%s, %s,"
            " '2026-01-01T00:00:00Z')",
            (token + token, ns),
        )  # the digest is never copied
        db.execute(
            "UPDATE qm_tokens SET description = 'd' WHERE token_sha256 = %s", (token + token,)
        )


def recorded(db: psycopg.Connection[Any], ns: str) -> tuple[list[tuple[Any, ...]], list[Any]]:
    stored = db.execute(
        "SELECT table_name, kind, op, before - %s::text[], after - %s::text[],"
        " db_role, application_name, principal, groups, request_id, client_addr, user_agent,"
        " reason, verb, subresource FROM qm_history"
        " WHERE (namespace = %s OR name = substr(%s, 1, 12) OR after ->> 'username' = %s"
        "        OR before ->> 'username' = %s) ORDER BY id",
        (VOLATILE, VOLATILE, ns, ns, ns, ns),
    ).fetchall()
    counted = db.execute(
        "SELECT table_name, kind, sum(count) FROM qm_history_tally WHERE namespace = %s"
        " GROUP BY 1, 2 ORDER BY 1",
        (ns,),
    ).fetchall()
    return stored, counted


def test_the_extension_is_built_and_the_migration_points_the_triggers_at_it(
    db: psycopg.Connection[Any],
) -> None:
    assert db.execute("SELECT extversion FROM pg_extension WHERE extname = 'qm_history'"
                      ).fetchone() == ("1.0",)  # fmt: skip
    assert functions(db) == {"qm_history_record_native"}
    secrets = db.execute("SELECT tgfoid::regproc::text FROM pg_trigger"
                         " WHERE tgname = 'secrets_history'").fetchone()  # fmt: skip
    assert secrets == ("qm_history_record",)


@pytest.mark.parametrize("context", CONTEXTS, ids=range(len(CONTEXTS)))
def test_both_triggers_record_the_same_rows(
    db: psycopg.Connection[Any], context: str | None
) -> None:
    results = []
    for native in (False, True):
        point(db, native)
        assert functions(db) == {"qm_history_record_native" if native else "qm_history_record"}
        ns = f"eq-{uuid.uuid4().hex[:8]}"
        writes(db, ns, context)
        stored, counted = recorded(db, ns)
        results.append((stored, counted, ns))
    point(db, True)
    (plpgsql, plpgsql_counted, ns0), (native, native_counted, ns1) = results
    # Each run writes in a namespace of its own; everything else must be equal.
    assert [tuple(str(v).replace(ns1, ns0) for v in r) for r in native] == [
        tuple(str(v) for v in r) for r in plpgsql
    ]
    assert native_counted == plpgsql_counted
    assert len(plpgsql) == 11 and [c[2] for c in plpgsql_counted] == [1, 1]
    assert not any("token_sha256" in str(r) for r in plpgsql)


def test_the_native_trigger_refuses_a_table_outside_public(db: psycopg.Connection[Any]) -> None:
    db.execute("CREATE SCHEMA IF NOT EXISTS elsewhere")
    db.execute("CREATE TABLE IF NOT EXISTS elsewhere.pods (uid uuid, name text)")
    db.execute(
        "CREATE OR REPLACE TRIGGER pods_history AFTER INSERT ON elsewhere.pods FOR EACH ROW"
        " EXECUTE FUNCTION qm_history_record_native('uid', 'Pod', 'none', '{}')"
    )
    with pytest.raises(psycopg.Error, match="schema public only"):
        db.execute("INSERT INTO elsewhere.pods VALUES (gen_random_uuid(), 'x')")


def test_a_writers_own_objects_never_run_as_the_trigger_owner(
    db: psycopg.Connection[Any],
) -> None:
    """The recording functions run as their owner with the writer's session: an operator ->>
    of the writer's own schema first in its search_path, or a temporary domain named uuid,
    must not stand in for the built-ins (ADR 0066)."""
    db.execute("DROP SCHEMA IF EXISTS hijack CASCADE")
    db.execute("CREATE SCHEMA hijack")
    db.execute(
        "CREATE FUNCTION hijack.get(jsonb, text) RETURNS text LANGUAGE plpgsql AS"
        " $$ BEGIN RAISE EXCEPTION 'hijacked ->>'; END $$"
    )
    db.execute(
        "CREATE OPERATOR hijack.->> (LEFTARG = jsonb, RIGHTARG = text, FUNCTION = hijack.get)"
    )
    try:
        for native in (True, False):
            point(db, native)
            with db.transaction():
                db.execute("SET LOCAL search_path = hijack, pg_catalog, public")
                db.execute(
                    "CREATE FUNCTION pg_temp.no(text) RETURNS boolean LANGUAGE plpgsql AS"
                    " $$ BEGIN RAISE EXCEPTION 'hijacked uuid'; END $$"
                )
                db.execute("CREATE DOMAIN pg_temp.uuid AS text CHECK (pg_temp.no(VALUE))")
                uid = uuid.uuid4()
                db.execute(
                    "INSERT INTO public.configmaps (uid, namespace, name) VALUES (%s, 'hj', %s)",
                    (uid, f"hj-{native}"),
                )
                db.execute("DELETE FROM public.configmaps WHERE uid = %s", (uid,))
                db.execute("DROP DOMAIN pg_temp.uuid")
                db.execute("DROP FUNCTION pg_temp.no(text)")
        found = db.execute(
            "SELECT name, op, uid IS NOT NULL FROM qm_history WHERE namespace = 'hj' ORDER BY id"
        ).fetchall()
        assert found == [("hj-True", "insert", True), ("hj-True", "delete", True),
                         ("hj-False", "insert", True), ("hj-False", "delete", True)]  # fmt: skip
    finally:
        point(db, True)
        db.execute("DROP SCHEMA hijack CASCADE")
