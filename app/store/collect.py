"""Deleting many objects in bounded batches: an owner's dependents, a namespace's contents.

The garbage collector and the namespace controller (``workers/controllers``) call these. A
sweep reads up to ``garbage.BATCH`` live candidates of one kind, the pure core sorts them
(``app.core.controllers.garbage.split``), and each part is one statement: delete, mark
deleting (finalizers, or a pod's grace period) or drop the owner's reference. Every statement
names the row versions it read, so a row changed since is left for the next batch; each
commits on its own, so no transaction grows with the size of the tree. Each statement sets
the controller's write context (``$3``) for the history triggers itself.

Row versions come from one sequence, so ``uid = ANY(...) AND row_version = ANY(...)`` matches
exactly the (uid, version) pairs read: no row can hold another row's version. That form keeps
the primary-key index in use whatever the batch size.
"""

from __future__ import annotations

from collections import Counter
from functools import cache

import asyncpg

from app.core.audit import WriteContext, text_of
from app.core.controllers.garbage import BATCH, Batch, Candidate, graceful_seconds
from app.core.kinds import KINDS, Kind
from app.store import sql

_BY_VERSION = "t.uid = ANY($1::uuid[]) AND t.row_version = ANY($2::bigint[])"


def _pod_columns(kind: Kind) -> str:
    if kind.kind == "Pod":
        return "t.node_name, t.phase, t.spec->'terminationGracePeriodSeconds' AS grace"
    return "NULL::text AS node_name, NULL::text AS phase, NULL::jsonb AS grace"


@cache
def _of_owner(kind: Kind, namespaced: bool) -> str:
    """Live dependents of the owner ``$1`` (``[{"uid": ...}]``), up to ``$2``, each with
    whether another of its owners exists; in the owner's namespace ``$4`` when it has one."""
    shared = (
        "EXISTS (SELECT 1 FROM jsonb_array_elements(t.owner_references) r"
        f" WHERE r->>'uid' <> $3 AND {sql.owner_exists('r')})"
    )
    where = " AND t.namespace = $4" if namespaced else ""
    return (
        f"SELECT t.uid::text, t.row_version, t.finalizers, {_pod_columns(kind)}, {shared} AS shared"
        f" FROM {kind.table} t WHERE t.owner_references <> '[]'::jsonb"
        f" AND t.owner_references @> $1::jsonb AND t.deletion_timestamp IS NULL{where} LIMIT $2"
    )


@cache
def _in_namespace(kind: Kind) -> str:
    return (
        f"SELECT t.uid::text, t.row_version, t.finalizers, {_pod_columns(kind)}, false AS shared"
        f" FROM {kind.table} t WHERE t.namespace = $1 AND t.deletion_timestamp IS NULL LIMIT $2"
    )


_CTX = sql.with_context("$3")


@cache
def _delete(kind: Kind) -> str:
    return f"DELETE FROM {kind.table} t WHERE {_BY_VERSION} AND {_CTX}"


@cache
def _mark(kind: Kind) -> str:
    """``$4``: each row's grace period (or NULL), in the order of ``$1``."""
    return (
        f"UPDATE {kind.table} t"
        " SET deletion_timestamp = coalesce(t.deletion_timestamp, now()),"
        " deletion_grace_period_seconds = coalesce(g.grace, t.deletion_grace_period_seconds)"
        " FROM unnest($1::uuid[], $4::bigint[]) AS g(uid, grace)"
        f" WHERE t.uid = g.uid AND {_BY_VERSION} AND {_CTX}"
    )


@cache
def _release(kind: Kind) -> str:
    """Drop the references to the owner ``$4`` (its uid as text)."""
    return (
        f"UPDATE {kind.table} t SET owner_references = coalesce("
        "(SELECT jsonb_agg(r) FROM jsonb_array_elements(t.owner_references) r"
        " WHERE r->>'uid' <> $4), '[]')"
        f" WHERE {_BY_VERSION} AND {_CTX}"
    )


def _candidate(kind: Kind, rec: asyncpg.Record) -> Candidate:
    spec = {"nodeName": rec["node_name"]}
    if rec["grace"] is not None:
        spec["terminationGracePeriodSeconds"] = rec["grace"]
    return Candidate(
        uid=rec["uid"],
        row_version=rec["row_version"],
        finalizers=tuple(rec["finalizers"] or ()),
        grace=graceful_seconds(kind.kind, spec, rec["phase"], None),
        shared=rec["shared"],
    )


async def dependents(
    pool: asyncpg.Pool, kind: Kind, owner_uid: str, namespace: str | None, limit: int = BATCH
) -> list[Candidate]:
    """Live ``kind`` dependents of one owner (``namespace``: the owner's, or None when it is
    cluster-scoped and its dependents may be anywhere)."""
    args: list[object] = [[{"uid": owner_uid}], limit, owner_uid]
    if namespace is not None:
        args.append(namespace)
    recs = await pool.fetch(_of_owner(kind, namespace is not None), *args)
    return [_candidate(kind, r) for r in recs]


async def contents(
    pool: asyncpg.Pool, kind: Kind, namespace: str, limit: int = BATCH
) -> list[Candidate]:
    """Live ``kind`` objects of a namespace."""
    return [_candidate(kind, r) for r in await pool.fetch(_in_namespace(kind), namespace, limit)]


async def apply(
    pool: asyncpg.Pool, kind: Kind, batch: Batch, ctx: WriteContext, owner_uid: str = ""
) -> int:
    """Carry out one sorted batch (each part one statement) under the controller's write
    context; how many rows it changed."""
    done = 0
    if batch.delete:
        done += await _run(pool, _delete(kind), batch.delete, ctx.defaults(verb="delete"))
    if batch.mark:
        graces = [c.grace for c in batch.mark]
        done += await _run(pool, _mark(kind), batch.mark, ctx.defaults(verb="delete"), graces)
    if batch.release:
        done += await _run(
            pool, _release(kind), batch.release, ctx.defaults(verb="update"), owner_uid
        )
    return done


async def _run(
    pool: asyncpg.Pool, text: str, part: tuple[Candidate, ...], ctx: WriteContext, *extra: object
) -> int:
    status = await pool.execute(
        text, [c.uid for c in part], [c.row_version for c in part], text_of(ctx), *extra
    )
    return int(status.rsplit(" ", 1)[-1])


@cache
def _count_dependents() -> str:
    return "SELECT " + " + ".join(
        f"(SELECT count(*) FROM {k.table} WHERE owner_references <> '[]'::jsonb"
        " AND owner_references @> $1::jsonb)"
        for k in KINDS
    )


async def dependents_left(pool: asyncpg.Pool, owner_uid: str) -> int:
    """How many objects of any kind still name the owner, terminating ones included."""
    return int(await pool.fetchval(_count_dependents(), [{"uid": owner_uid}]))


@cache
def _left_in_namespace() -> str:
    parts = []
    for k in KINDS:
        if not k.namespaced:
            continue
        parts.append(
            f"SELECT '{k.plural}' AS plural, NULL::text AS finalizer, count(*) AS n"
            f" FROM {k.table} WHERE namespace = $1"
        )
        parts.append(
            f"SELECT '{k.plural}', f, count(*) FROM {k.table},"
            f" jsonb_array_elements_text({k.table}.finalizers) f WHERE namespace = $1 GROUP BY f"
        )
    return "\nUNION ALL\n".join(parts)


async def left_in_namespace(
    pool: asyncpg.Pool, namespace: str
) -> tuple[Counter[str], Counter[str]]:
    """What is still in a namespace: objects by plural, and objects by finalizer they carry."""
    by_kind: Counter[str] = Counter()
    by_finalizer: Counter[str] = Counter()
    for r in await pool.fetch(_left_in_namespace(), namespace):
        if r["finalizer"] is None:
            by_kind[r["plural"]] += r["n"]
        else:
            by_finalizer[r["finalizer"]] += r["n"]
    return by_kind, by_finalizer
