"""SQL text for each kind table, built once from the kind registry.

Writes are single statements with the audit insert folded in as a CTE, so a write and its
audit row commit together in one round trip; and every UPDATE or DELETE names the row version
it expects.
"""

from __future__ import annotations

from functools import cache

from app.core.kinds import KINDS, Kind
from app.core.objects import COLUMNS

COLS = ", ".join(COLUMNS)

_AUDIT = (
    "INSERT INTO qm_audit"
    " (username, groups, verb, kind, namespace, name, uid, subresource, before, after)"
)


def who(actor: str) -> str:
    """The audit row's ``username, groups`` from the SQL expression of a write's actor text
    (``app.core.principals.actor``: the name, then the groups, separated by U+001F)."""
    return f"qm_actor_name({actor}), qm_actor_groups({actor})"


def audited(kind: Kind, alias: str, without: tuple[str, ...] = ()) -> str:
    """The row image kept in the audit trail, less the columns ``without`` names; a Secret's
    data never goes there."""
    dropped = [*without, *(["spec"] if kind.kind == "Secret" else [])]
    image = f"to_jsonb({alias}.*)" + "".join(f" - '{c}'" for c in dropped)
    return f"({image})" if dropped else image


@cache
def select_one(kind: Kind) -> str:
    return f"SELECT {COLS} FROM {kind.table} WHERE namespace = $1 AND name = $2"


@cache
def insert(kind: Kind) -> str:
    return f"""
WITH ins AS (
  INSERT INTO {kind.table} (uid, namespace, name, generate_name, labels, annotations,
                            owner_references, finalizers, spec, status)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
  ON CONFLICT (namespace, name) DO NOTHING
  RETURNING {COLS}
), aud AS (
  {_AUDIT}
  SELECT {who("$11::text")}, 'create', '{kind.kind}', ins.namespace, ins.name, ins.uid, '', NULL,
         {audited(kind, "ins")} FROM ins WHERE $11::text IS NOT NULL
)
SELECT * FROM ins"""


@cache
def insert_many(kind: Kind) -> str:
    return f"""
INSERT INTO {kind.table} (uid, namespace, name, labels, annotations, owner_references,
                          finalizers, spec, status)
SELECT u, n, nm, l::jsonb, a::jsonb, o::jsonb, f::jsonb, s::jsonb, st::jsonb
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
            $7::text[], $8::text[], $9::text[]) AS v(u, n, nm, l, a, o, f, s, st)
ON CONFLICT (namespace, name) DO NOTHING
RETURNING {COLS}"""


@cache
def update(kind: Kind) -> str:
    return f"""
WITH old AS (
  SELECT {COLS} FROM {kind.table} WHERE namespace = $1 AND name = $2
), upd AS (
  UPDATE {kind.table} SET labels = $4, annotations = $5, owner_references = $6,
                          finalizers = $7, spec = $8
  WHERE namespace = $1 AND name = $2 AND row_version = $3
  RETURNING {COLS}
), aud AS (
  {_AUDIT}
  SELECT {who("$9::text")}, $10::text, '{kind.kind}', upd.namespace, upd.name, upd.uid, '',
         {audited(kind, "old")}, {audited(kind, "upd")} FROM upd, old WHERE $9::text IS NOT NULL
)
SELECT * FROM upd"""


@cache
def update_status(kind: Kind) -> str:
    return f"""
WITH old AS (
  SELECT {COLS} FROM {kind.table} WHERE namespace = $1 AND name = $2
), upd AS (
  UPDATE {kind.table} SET status = $4
  WHERE namespace = $1 AND name = $2 AND row_version = $3
  RETURNING {COLS}
), aud AS (
  {_AUDIT}
  SELECT {who("$5::text")}, $6::text, '{kind.kind}', upd.namespace, upd.name, upd.uid, 'status',
         {audited(kind, "old")}, {audited(kind, "upd")} FROM upd, old WHERE $5::text IS NOT NULL
)
SELECT * FROM upd"""


def _cols(alias: str) -> str:
    return ", ".join(f"{alias}.{c}" for c in COLUMNS)


def _batched(kind: Kind, values: str, names: str, sets: str, subresource: str) -> str:
    """Group commit (:mod:`app.store.group`): one conditional write per ``unnest`` row, each
    with its own audit row, returning ``qm_ord`` (the write's 1-based place in the arrays)."""
    return f"""
WITH v AS (
  SELECT * FROM unnest({values}) WITH ORDINALITY AS v({names}, qm_ord)
), old AS (
  SELECT {_cols("t")}, v.qm_ord FROM {kind.table} AS t
  JOIN v ON t.namespace = v.namespace AND t.name = v.name
), upd AS (
  UPDATE {kind.table} AS t SET {sets}
  FROM v WHERE t.namespace = v.namespace AND t.name = v.name AND t.row_version = v.expected
  RETURNING {_cols("t")}, v.qm_ord
), aud AS (
  {_AUDIT}
  SELECT {who("v.actor")}, v.verb, '{kind.kind}', upd.namespace, upd.name, upd.uid, '{subresource}',
         {audited(kind, "old", ("qm_ord",))}, {audited(kind, "upd", ("qm_ord",))}
  FROM upd JOIN old USING (qm_ord) JOIN v USING (qm_ord) WHERE v.actor IS NOT NULL
)
SELECT * FROM upd"""


@cache
def update_batch(kind: Kind) -> str:
    """:func:`update` for many objects at once; arrays in the order of ``update``'s
    parameters (the JSON columns as text)."""
    return _batched(
        kind,
        "$1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[],"
        " $8::text[], $9::text[], $10::text[]",
        "namespace, name, expected, labels, annotations, owner_references, finalizers, spec,"
        " actor, verb",
        "labels = v.labels::jsonb, annotations = v.annotations::jsonb,"
        " owner_references = v.owner_references::jsonb, finalizers = v.finalizers::jsonb,"
        " spec = v.spec::jsonb",
        "",
    )


@cache
def update_status_batch(kind: Kind) -> str:
    """:func:`update_status` for many objects at once."""
    return _batched(
        kind,
        "$1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[]",
        "namespace, name, expected, status, actor, verb",
        "status = v.status::jsonb",
        "status",
    )


@cache
def update_status_plain(kind: Kind) -> str:
    """The status write internal components use (no audit row, so no CTE)."""
    return f"""
UPDATE {kind.table} SET status = $4 WHERE namespace = $1 AND name = $2 AND row_version = $3
RETURNING {COLS}"""


@cache
def update_status_many(kind: Kind) -> str:
    return f"""
UPDATE {kind.table} AS t SET status = v.status::jsonb
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[])
  AS v(namespace, name, expected, status)
WHERE t.namespace = v.namespace AND t.name = v.name AND t.row_version = v.expected
RETURNING t.namespace, t.name, t.uid, t.row_version"""


@cache
def mark_deleting(kind: Kind) -> str:
    return f"""
UPDATE {kind.table}
SET deletion_timestamp = coalesce(deletion_timestamp, now()),
    deletion_grace_period_seconds = coalesce($4, deletion_grace_period_seconds),
    finalizers = $5
WHERE namespace = $1 AND name = $2 AND row_version = $3
RETURNING {COLS}"""


@cache
def delete(kind: Kind) -> str:
    return f"""
DELETE FROM {kind.table} WHERE namespace = $1 AND name = $2 AND row_version = $3
RETURNING {COLS}"""


@cache
def audit() -> str:
    return f"{_AUDIT} VALUES ({who('$1::text')}, $2, $3, $4, $5, $6, $7, $8, $9)"


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
    return f"""
UPDATE {kind.table} SET owner_references = coalesce(
  (SELECT jsonb_agg(r) FROM jsonb_array_elements(owner_references) r WHERE r->>'uid' <> $3), '[]')
WHERE namespace = $1 AND name = $2 RETURNING {COLS}"""


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
