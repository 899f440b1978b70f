"""SQL text for each kind table, built once from the kind registry.

Every UPDATE or DELETE names the row version it expects. Each write also sets its write
context (:mod:`app.core.audit`) as the transaction-local setting ``qm.context`` in the same
statement (:func:`with_context`), so the history triggers of migration 0014 record who wrote
and why, in one round trip and whatever pooling sits between.
"""

from __future__ import annotations

from functools import cache

from app.core.kinds import KINDS, Kind
from app.core.objects import COLUMNS

COLS = ", ".join(COLUMNS)


def with_context(param: str, setting: str = "qm.context") -> str:
    """A condition that sets ``setting`` to the text ``param`` ('' for NULL: no context) and
    holds. Written as an uncorrelated subquery it is an InitPlan, run once before the
    statement reads or writes any row, so every trigger of the statement sees the setting."""
    return f"(SELECT set_config('{setting}', coalesce({param}::text, ''), true)) IS NOT NULL"


@cache
def select_one(kind: Kind) -> str:
    return f"SELECT {COLS} FROM {kind.table} WHERE namespace = $1 AND name = $2"


@cache
def insert(kind: Kind) -> str:
    """``$11``: the write context's text."""
    return f"""
INSERT INTO {kind.table} (uid, namespace, name, generate_name, labels, annotations,
                          owner_references, finalizers, spec, status)
SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10 WHERE {with_context("$11")}
ON CONFLICT (namespace, name) DO NOTHING
RETURNING {COLS}"""


@cache
def insert_many(kind: Kind) -> str:
    """``$10``: the write context's text, one for the whole batch."""
    return f"""
INSERT INTO {kind.table} (uid, namespace, name, labels, annotations, owner_references,
                          finalizers, spec, status)
SELECT u, n, nm, l::jsonb, a::jsonb, o::jsonb, f::jsonb, s::jsonb, st::jsonb
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
            $7::text[], $8::text[], $9::text[]) AS v(u, n, nm, l, a, o, f, s, st)
WHERE {with_context("$10")}
ON CONFLICT (namespace, name) DO NOTHING
RETURNING {COLS}"""


@cache
def update(kind: Kind) -> str:
    """``$9``: the write context's text."""
    return f"""
UPDATE {kind.table} SET labels = $4, annotations = $5, owner_references = $6,
                        finalizers = $7, spec = $8
WHERE namespace = $1 AND name = $2 AND row_version = $3 AND {with_context("$9")}
RETURNING {COLS}"""


@cache
def update_status(kind: Kind) -> str:
    """``$5``: the write context's text."""
    return f"""
UPDATE {kind.table} SET status = $4
WHERE namespace = $1 AND name = $2 AND row_version = $3 AND {with_context("$5")}
RETURNING {COLS}"""


def _cols(alias: str) -> str:
    return ", ".join(f"{alias}.{c}" for c in COLUMNS)


def _batched(kind: Kind, values: str, names: str, sets: str) -> str:
    """Group commit (:mod:`app.store.group`): one conditional write per ``unnest`` row,
    returning ``qm_ord`` (the write's 1-based place in the arrays). Each row's write context
    (the ``ctx`` column) goes into ``qm.contexts`` under ``"<namespace>/<name>"``."""
    contexts = (
        "(SELECT jsonb_object_agg(v.namespace || '/' || v.name, v.ctx::jsonb)::text"
        " FROM v WHERE v.ctx <> '')"
    )
    return f"""
WITH v AS (
  SELECT * FROM unnest({values}) WITH ORDINALITY AS v({names}, qm_ord)
)
UPDATE {kind.table} AS t SET {sets}
FROM v WHERE t.namespace = v.namespace AND t.name = v.name AND t.row_version = v.expected
  AND {with_context(contexts, "qm.contexts")}
RETURNING {_cols("t")}, v.qm_ord"""


@cache
def update_batch(kind: Kind) -> str:
    """:func:`update` for many objects at once; arrays in the order of ``update``'s
    parameters (the JSON columns as text)."""
    return _batched(
        kind,
        "$1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[],"
        " $8::text[], $9::text[]",
        "namespace, name, expected, labels, annotations, owner_references, finalizers, spec, ctx",
        "labels = v.labels::jsonb, annotations = v.annotations::jsonb,"
        " owner_references = v.owner_references::jsonb, finalizers = v.finalizers::jsonb,"
        " spec = v.spec::jsonb",
    )


@cache
def update_status_batch(kind: Kind) -> str:
    """:func:`update_status` for many objects at once."""
    return _batched(
        kind,
        "$1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[]",
        "namespace, name, expected, status, ctx",
        "status = v.status::jsonb",
    )


@cache
def update_status_many(kind: Kind) -> str:
    """Status writes of many objects under one write context (``$5``)."""
    return f"""
UPDATE {kind.table} AS t SET status = v.status::jsonb
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[])
  AS v(namespace, name, expected, status)
WHERE t.namespace = v.namespace AND t.name = v.name AND t.row_version = v.expected
  AND {with_context("$5")}
RETURNING t.namespace, t.name, t.uid, t.row_version"""


@cache
def mark_deleting(kind: Kind) -> str:
    """``$6``: the write context's text."""
    return f"""
UPDATE {kind.table}
SET deletion_timestamp = coalesce(deletion_timestamp, now()),
    deletion_grace_period_seconds = coalesce($4, deletion_grace_period_seconds),
    finalizers = $5
WHERE namespace = $1 AND name = $2 AND row_version = $3 AND {with_context("$6")}
RETURNING {COLS}"""


@cache
def delete(kind: Kind) -> str:
    """``$4``: the write context's text."""
    return f"""
DELETE FROM {kind.table}
WHERE namespace = $1 AND name = $2 AND row_version = $3 AND {with_context("$4")}
RETURNING {COLS}"""


@cache
def dependents() -> str:
    """Objects of any kind that name an owner (``$1``: ``[{"uid": ...}]``), in one query."""
    return "\nUNION ALL\n".join(
        f"SELECT '{k.kind}' AS kind_name, {COLS} FROM {k.table}"
        " WHERE owner_references @> $1::jsonb AND owner_references <> '[]'::jsonb"
        for k in KINDS
    )


@cache
def owned_by(kind: Kind) -> str:
    """Objects of one kind in namespace ``$1`` controlled by any of the owners ``$2``
    (``$2``: their ``[{"uid": ...}]`` patterns as JSON text; a list of lists would be sent
    as a two-dimensional array). The ``<> '[]'`` term lets the planner use the partial GIN
    index on ``owner_references``; without it every object of the namespace is scanned."""
    return (
        f"SELECT {COLS} FROM {kind.table}"
        " WHERE namespace = $1 AND owner_references <> '[]'::jsonb"
        " AND owner_references @> ANY($2::text[]::jsonb[])"
    )


@cache
def drop_owner(kind: Kind) -> str:
    """``$4``: the write context's text."""
    return f"""
UPDATE {kind.table} SET owner_references = coalesce(
  (SELECT jsonb_agg(r) FROM jsonb_array_elements(owner_references) r WHERE r->>'uid' <> $3), '[]')
WHERE namespace = $1 AND name = $2 AND {with_context("$4")} RETURNING {COLS}"""


@cache
def waiting_deletions(kind: Kind) -> str:
    """Objects being deleted that only the garbage collector finishes: foreground owners, and
    objects with no finalizer left (except pods on a node, whose agent confirms their end)."""
    unheld = "finalizers = '[]'::jsonb"
    if kind.kind == "Pod":
        unheld += " AND (node_name IS NULL OR phase IN ('Succeeded', 'Failed'))"
    return (
        f"SELECT namespace, uid::text FROM {kind.table} WHERE deletion_timestamp IS NOT NULL"
        f" AND (finalizers @> '[\"foregroundDeletion\"]'::jsonb OR ({unheld}))"
    )


_UUID = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"


def owner_exists(ref: str) -> str:
    """Whether the owner the ownerReference ``ref`` (an SQL expression) names exists, in any
    table; a reference whose uid is not a uuid names nothing."""
    tables = " OR ".join(
        f"EXISTS (SELECT 1 FROM {k.table} WHERE uid = ({ref}->>'uid')::uuid)" for k in KINDS
    )
    return f"(CASE WHEN {ref}->>'uid' ~ '{_UUID}' THEN ({tables}) ELSE false END)"
