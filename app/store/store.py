"""Conditional reads and writes of objects.

Rules kept here for every caller: creates are conditional on the name (AlreadyExists), updates
and deletes on the row version read (Conflict), spec and status are written by different calls,
deletion honours finalizers and graceful pod termination, and ownerReferences are followed
(orphan propagation strips them here; background and foreground cascades are carried out by the
garbage collector controller, in batches, and a deleted namespace is emptied by the namespace
controller: ``workers/controllers``). ``row_version`` is the row's own compare-and-swap token; the
cluster-wide, commit-ordered revision a client sees is assigned later by the revision stream.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import msgspec
from asyncpg.pool import PoolConnectionProxy

from app.core import errors
from app.core.audit import WriteContext, text_of
from app.core.controllers.garbage import FOREGROUND, graceful_seconds
from app.core.controllers.namespace import NAMESPACE_CONTENTS, TERMINATING
from app.core.kinds import BY_KIND, Kind
from app.core.names import generate_name, max_name_length
from app.core.objects import render, split
from app.store import quota, secret_keys, sql
from app.store.db_errors import refusals
from app.store.group import Lane

_enc = msgspec.json.Encoder()
Conn = asyncpg.Connection | PoolConnectionProxy
ORPHAN = "orphan"
PROPAGATIONS = ("Background", "Foreground", "Orphan")


@dataclass(slots=True)
class Stored:
    """An object as committed, with the row version to make the next write conditional on.

    ``obj`` is rendered on first use: the API answers from its watch cache and never needs it,
    so writes do not pay for it."""

    kind: Kind
    uid: str
    row_version: int
    row: dict[str, Any]
    _obj: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def obj(self) -> dict[str, Any]:
        if self._obj is None:
            self._obj = render(self.kind, self.row)
        return self._obj

    @property
    def deleting(self) -> bool:
        return self.row.get("deletion_timestamp") is not None


@dataclass(frozen=True, slots=True)
class Written:
    """The identity and new row version of one object a batched write changed."""

    namespace: str
    name: str
    uid: str
    row_version: int


def _stored(kind: Kind, rec: asyncpg.Record | None) -> Stored:
    assert rec is not None, "a conditional write returned no row where one was certain"
    row = dict(rec)
    row.pop("qm_ord", None)  # a group-committed write's place in its batch
    return Stored(kind, str(row["uid"]), int(row["row_version"]), row)


class Store:
    """Every write is one statement, which also sets its write context (``ctx``) for the
    history triggers; a write without one is recorded as having no application context."""

    def __init__(
        self, pool: asyncpg.Pool, rng: random.Random | None = None, *, group_commit: bool = False
    ) -> None:
        """``group_commit``: updates (spec or status) with a write context, of one kind, that
        arrive while earlier ones are in flight go together in one statement
        (:mod:`app.store.group`). For a process that writes from one event loop (the API
        server), not for Celery workers' per-task loops."""
        self.pool = pool
        self.rng = rng or random.Random()
        self.group_commit = group_commit
        self._lanes: dict[tuple[str, str], Lane[tuple[Any, ...], asyncpg.Record]] = {}

    # -- reads ---------------------------------------------------------------------------
    async def get(self, kind: Kind, namespace: str, name: str) -> Stored:
        rec = await self.pool.fetchrow(sql.select_one(kind), _ns(kind, namespace), name)
        if rec is None:
            raise errors.NotFound(f'{kind.plural} "{name}" not found', kind=kind.plural, name=name)
        return _stored(kind, rec)

    async def get_by_uid(self, kind: Kind, uid: str) -> Stored | None:
        """The object of ``kind`` with this uid, if it exists (a uid that is not one: None)."""
        try:
            key = uuid.UUID(uid)
        except ValueError:
            return None
        rec = await self.pool.fetchrow(f"SELECT {sql.COLS} FROM {kind.table} WHERE uid = $1", key)
        return None if rec is None else _stored(kind, rec)

    async def get_many(self, kind: Kind, namespace: str, names: list[str]) -> list[Stored]:
        """The objects of ``names`` that exist, by name, in one query (missing ones left out)."""
        recs = await self.pool.fetch(
            f"SELECT {sql.COLS} FROM {kind.table}"
            " WHERE namespace = $1 AND name = ANY($2::text[]) ORDER BY name",
            _ns(kind, namespace),
            names,
        )
        return [_stored(kind, r) for r in recs]

    async def list_objects(self, kind: Kind, namespace: str | None = None) -> list[Stored]:
        if namespace is None:
            recs = await self.pool.fetch(
                f"SELECT {sql.COLS} FROM {kind.table} ORDER BY namespace, name"
            )
        else:
            recs = await self.pool.fetch(
                f"SELECT {sql.COLS} FROM {kind.table} WHERE namespace = $1 ORDER BY name", namespace
            )
        return [_stored(kind, r) for r in recs]

    async def owned(self, kind: Kind, namespace: str, owner_uids: list[str]) -> list[Stored]:
        """The ``kind`` objects in ``namespace`` that name any of ``owner_uids`` as an owner,
        in one query (what a controller reads to find its children)."""
        if not owner_uids:
            return []
        patterns = [_json([{"uid": uid}]) for uid in owner_uids]
        return [
            _stored(kind, r) for r in await self.pool.fetch(sql.owned_by(kind), namespace, patterns)
        ]

    # -- creates -------------------------------------------------------------------------
    async def create(
        self, kind: Kind, obj: dict[str, Any], ctx: WriteContext | None = None
    ) -> Stored:
        cols = split(kind, obj)
        prefix = cols["generate_name"]
        async with quota.admitted(self.pool, kind, [obj]) as db:
            for _ in range(8 if prefix and not cols["name"] else 1):
                name = cols["name"] or generate_name(
                    prefix or "", self.rng, max_length=max_name_length(kind.kind)
                )
                spec = _sealed(kind, cols["spec"], cols["namespace"], name)
                with refusals(kind, name):
                    rec = await db.fetchrow(
                        sql.insert(kind),
                        uuid.UUID(int=self.rng.getrandbits(128), version=4),
                        cols["namespace"],
                        name,
                        prefix,
                        cols["labels"],
                        cols["annotations"],
                        cols["owner_references"],
                        cols["finalizers"],
                        spec,
                        cols["status"],
                        _text(ctx, "create"),
                    )
                if rec is not None:
                    return _stored(kind, rec)
        shown = cols["name"] or prefix
        raise errors.AlreadyExists(
            f'{kind.plural} "{shown}" already exists', kind=kind.plural, name=shown
        )

    async def create_many(
        self, kind: Kind, objs: list[dict[str, Any]], ctx: WriteContext | None = None
    ) -> list[Stored]:
        """Insert many objects in one statement; names that already exist are skipped."""
        cols = [split(kind, o) for o in objs]
        for c in cols:
            c["spec"] = _sealed(kind, c["spec"], c["namespace"], c["name"])
        async with quota.admitted(self.pool, kind, objs) as db:
            with refusals(kind, None):
                recs = await db.fetch(
                    sql.insert_many(kind),
                    [uuid.UUID(int=self.rng.getrandbits(128), version=4) for _ in cols],
                    [c["namespace"] for c in cols],
                    [c["name"] for c in cols],
                    *(
                        [_json(c[f]) for c in cols]
                        for f in (
                            "labels",
                            "annotations",
                            "owner_references",
                            "finalizers",
                            "spec",
                            "status",
                        )
                    ),
                    _text(ctx, "create"),
                )
        return [_stored(kind, r) for r in recs]

    # -- updates -------------------------------------------------------------------------
    async def update(
        self,
        kind: Kind,
        obj: dict[str, Any],
        expected: int,
        ctx: WriteContext | None = None,
    ) -> Stored:
        """Replace labels, annotations, owners, finalizers and spec, if still at ``expected``."""
        cols = split(kind, obj)
        args = (
            cols["namespace"],
            cols["name"],
            expected,
            cols["labels"],
            cols["annotations"],
            cols["owner_references"],
            cols["finalizers"],
            _sealed(kind, cols["spec"], cols["namespace"], cols["name"]),
            _text(ctx, "update"),
        )
        rec = await self._write("update", kind, args)
        if rec is None:
            await self._raise_missing_or_conflict(kind, cols["namespace"], cols["name"])
        stored = _stored(kind, rec)
        if stored.deleting and not stored.row["finalizers"]:
            async with self.pool.acquire() as conn:
                await self._remove(conn, stored, ctx)
        return stored

    async def update_status(
        self,
        kind: Kind,
        obj: dict[str, Any],
        expected: int,
        ctx: WriteContext | None = None,
    ) -> Stored:
        meta = obj.get("metadata") or {}
        namespace, name = _ns(kind, meta.get("namespace", "")), meta.get("name")
        status = obj.get("status") or {}
        args = (namespace, name, expected, status, _text(ctx, "update", "status"))
        rec = await self._write("status", kind, args)
        if rec is None:
            await self._raise_missing_or_conflict(kind, namespace, name or "")
        return _stored(kind, rec)

    # -- group commit ----------------------------------------------------------------------
    async def _write(self, op: str, kind: Kind, args: tuple[Any, ...]) -> asyncpg.Record | None:
        """One conditional write (``op``: "update" or "status"; ``args`` in the order of its
        statement, the write context's text last). Writes with a context are coalesced with
        others of their kind in flight when group commit is on. None if the condition
        failed."""
        if not self.group_commit or not args[-1]:
            return await self._write_one(op, kind, args)
        lane = self._lanes.get((op, kind.kind))
        if lane is None:

            async def one(a: tuple[Any, ...]) -> asyncpg.Record | None:
                return await self._write_one(op, kind, a)

            async def many(batch: Sequence[tuple[Any, ...]]) -> list[asyncpg.Record | None]:
                return await self._write_many(op, kind, batch)

            lane = self._lanes[(op, kind.kind)] = Lane(one, many)
        return await lane.write((args[0], args[1]), args)

    async def _write_one(self, op: str, kind: Kind, args: tuple[Any, ...]) -> asyncpg.Record | None:
        one, _ = _STATEMENTS[op]
        with refusals(kind, args[1]):
            return await self.pool.fetchrow(one(kind), *args)

    async def _write_many(
        self, op: str, kind: Kind, batch: Sequence[tuple[Any, ...]]
    ) -> list[asyncpg.Record | None]:
        """Many writes in one statement, sent in (namespace, name) order; each one's record
        (without the batch's ordinal) in the order given, or None where its condition failed.
        The JSON columns (the dicts and lists among the arguments) go as text arrays."""
        order = sorted(range(len(batch)), key=lambda i: (batch[i][0], batch[i][1]))
        arrays = [
            [_json(v) if isinstance(v, dict | list) else v for v in (batch[i][c] for i in order)]
            for c in range(len(batch[0]))
        ]
        _, many = _STATEMENTS[op]
        recs = await self.pool.fetch(many(kind), *arrays)
        out: list[asyncpg.Record | None] = [None] * len(batch)
        for rec in recs:
            out[order[rec["qm_ord"] - 1]] = rec
        return out

    async def close(self) -> None:
        """Stop the group-commit lanes (writes still waiting are cancelled)."""
        for lane in self._lanes.values():
            await lane.close()

    async def update_status_many(
        self, kind: Kind, items: list[tuple[dict[str, Any], int]], ctx: WriteContext | None = None
    ) -> tuple[list[Written], int]:
        """Batched status writes, each conditional on its own row version. Returns the new
        versions of what was written and how many lost their condition (read again, retry)."""
        metas = [o.get("metadata") or {} for o, _ in items]
        recs = await self.pool.fetch(
            sql.update_status_many(kind),
            [_ns(kind, m.get("namespace", "")) for m in metas],
            [m.get("name") for m in metas],
            [e for _, e in items],
            [_json(o.get("status") or {}) for o, _ in items],
            _text(ctx, "update", "status"),
        )
        written = [
            Written(r["namespace"], r["name"], str(r["uid"]), r["row_version"]) for r in recs
        ]
        return written, len(items) - len(recs)

    async def _raise_missing_or_conflict(self, kind: Kind, namespace: str, name: str) -> Any:
        current = await self.pool.fetchrow(sql.select_one(kind), namespace, name)
        if current is None:
            raise errors.NotFound(f'{kind.plural} "{name}" not found', kind=kind.plural, name=name)
        raise errors.Conflict(
            f'Operation cannot be fulfilled on {kind.plural} "{name}": the object has been '
            "modified; please apply your changes to the latest version and try again",
            kind=kind.plural,
            name=name,
        )

    # -- deletes -------------------------------------------------------------------------
    async def delete(
        self,
        kind: Kind,
        namespace: str,
        name: str,
        *,
        propagation: str = "Background",
        grace_seconds: int | None = None,
        expected: int | None = None,
        expected_uid: str | None = None,
        ctx: WriteContext | None = None,
    ) -> Stored | None:
        """Delete, or mark deleting when finalizers or a running pod must finish first.

        Returns the object if it still exists (terminating), ``None`` once it is gone.
        """
        if propagation not in PROPAGATIONS:
            raise errors.BadRequest(
                f"unsupported propagationPolicy {propagation!r}; "
                f"use one of {', '.join(PROPAGATIONS)}"
            )
        async with self.pool.acquire() as conn, conn.transaction():
            rec = await conn.fetchrow(
                sql.select_one(kind) + " FOR UPDATE", _ns(kind, namespace), name
            )
            if rec is None:
                raise errors.NotFound(
                    f'{kind.plural} "{name}" not found', kind=kind.plural, name=name
                )
            cur = _stored(kind, rec)
            if (expected is not None and expected != cur.row_version) or (
                expected_uid is not None and expected_uid != cur.uid
            ):
                raise errors.Conflict(
                    f'Operation cannot be fulfilled on {kind.plural} "{name}": the precondition '
                    "does not match the current object",
                    kind=kind.plural,
                    name=name,
                )
            return await self._delete_locked(conn, cur, propagation, grace_seconds, ctx)

    async def _delete_locked(
        self,
        conn: Conn,
        cur: Stored,
        propagation: str,
        grace: int | None,
        ctx: WriteContext | None,
    ) -> Stored | None:
        """Delete or mark deleting. Dependents are not touched here (but for orphan
        propagation, which strips their references): the garbage collector sees the owner go,
        or wait in foreground deletion, and deletes them in bounded batches."""
        finalizers = list(cur.row["finalizers"] or [])
        if cur.kind.kind == "Namespace" and NAMESPACE_CONTENTS not in finalizers:
            finalizers.append(NAMESPACE_CONTENTS)  # emptied by the namespace controller
        if propagation == "Orphan":
            await self._orphan(conn, cur.uid, ctx)
        elif (
            propagation == "Foreground"
            and FOREGROUND not in finalizers
            and await self._has_dependents(conn, cur.uid)
        ):
            finalizers.append(FOREGROUND)
        graceful = _graceful_pod(cur, grace)
        if finalizers or graceful is not None:
            rec = await conn.fetchrow(
                sql.mark_deleting(cur.kind),
                cur.row["namespace"],
                cur.row["name"],
                cur.row_version,
                graceful if graceful is not None else grace,
                finalizers,
                _text(ctx, "delete"),
            )
            marked = _stored(cur.kind, rec)
            if cur.kind.kind == "Namespace" and _phase(cur) != TERMINATING:
                marked = await self._terminating(conn, marked, ctx)
            return marked
        await self._remove(conn, cur, ctx)
        return None

    async def _terminating(self, conn: Conn, ns: Stored, ctx: WriteContext | None) -> Stored:
        """A namespace being deleted shows phase Terminating from the deleting write on, as
        Kubernetes' API server sets it; the namespace controller writes its conditions."""
        status = {**(ns.row["status"] or {}), "phase": TERMINATING}
        text = sql.update_status(ns.kind)
        ctx_text = _text(ctx, "delete", "status")
        rec = await conn.fetchrow(text, "", ns.row["name"], ns.row_version, status, ctx_text)
        return _stored(ns.kind, rec)

    async def _remove(self, conn: Conn, cur: Stored, ctx: WriteContext | None) -> None:
        await conn.execute(
            sql.delete(cur.kind),
            cur.row["namespace"],
            cur.row["name"],
            cur.row_version,
            _text(ctx, "delete"),
        )

    async def finish_deletion(
        self, kind: Kind, uid: str, *, drop: str = FOREGROUND, ctx: WriteContext | None = None
    ) -> bool:
        """Take the finalizer ``drop`` off an object being deleted, and remove the object if
        nothing else holds it (no other finalizer, not a pod its node must confirm). For the
        controllers that own such a finalizer: the garbage collector once a foreground owner's
        dependents are gone, the namespace controller once a namespace is empty. Conditional
        on the row as locked here; False if there was nothing to finish."""
        async with self.pool.acquire() as conn, conn.transaction():
            rec = await conn.fetchrow(
                f"SELECT {sql.COLS} FROM {kind.table} WHERE uid = $1 FOR UPDATE", uuid.UUID(uid)
            )
            if rec is None or rec["deletion_timestamp"] is None:
                return False
            cur = _stored(kind, rec)
            rest = [f for f in cur.row["finalizers"] if f != drop]
            if rest or _graceful_pod(cur, None) is not None:
                if rest == list(cur.row["finalizers"]):
                    return False
                await conn.execute(
                    sql.mark_deleting(kind),
                    cur.row["namespace"],
                    cur.row["name"],
                    cur.row_version,
                    None,
                    rest,
                    _text(ctx, "update"),
                )
                return True
            await self._remove(conn, cur, ctx)
            return True

    # -- owner references ----------------------------------------------------------------
    async def _dependents(self, conn: Conn, owner_uid: str) -> list[Stored]:
        # A Python value, not JSON text: the pool's jsonb codec encodes parameters itself.
        pattern = [{"uid": owner_uid}]
        found = []
        for rec in await conn.fetch(sql.dependents(), pattern):
            dep = _stored(BY_KIND[rec["kind_name"]], rec)
            del dep.row["kind_name"]
            found.append(dep)
        return found

    async def _has_dependents(self, conn: Conn, owner_uid: str) -> bool:
        return bool(await self._dependents(conn, owner_uid))

    async def _orphan(self, conn: Conn, owner_uid: str, ctx: WriteContext | None) -> None:
        for dep in await self._dependents(conn, owner_uid):
            await self._drop_owner(conn, dep, owner_uid, ctx)

    async def _drop_owner(
        self, conn: Conn, dep: Stored, owner_uid: str, ctx: WriteContext | None
    ) -> None:
        """Remove one ownerReference from a dependent, under the deleting write's context."""
        await conn.execute(
            sql.drop_owner(dep.kind),
            dep.row["namespace"],
            dep.row["name"],
            owner_uid,
            _text(ctx, "update"),
        )


def _phase(cur: Stored) -> str | None:
    status = cur.row["status"]
    return status.get("phase") if isinstance(status, dict) else None


def _graceful_pod(cur: Stored, grace: int | None) -> int | None:
    """The grace period a deleted pod is given for its agent to stop it, None if it goes now."""
    return graceful_seconds(cur.kind.kind, cur.row["spec"], _phase(cur), grace)


# The one-object and the batched statement of each group-committed write.
_STATEMENTS: dict[str, tuple[Callable[[Kind], str], Callable[[Kind], str]]] = {
    "update": (sql.update, sql.update_batch),
    "status": (sql.update_status, sql.update_status_batch),
}


def _sealed(kind: Kind, spec: dict[str, Any], namespace: str, name: str) -> dict[str, Any]:
    """A Secret's data is stored only sealed (ADR 0048); other kinds' specs as they are."""
    return secret_keys.seal_spec(spec, namespace, name) if kind.kind == "Secret" else spec


def _json(value: Any) -> str:
    return _enc.encode(value).decode()


def _ns(kind: Kind, namespace: str | None) -> str:
    return (namespace or "") if kind.namespaced else ""


def _text(ctx: WriteContext | None, verb: str, subresource: str | None = None) -> str:
    """The ``qm.context`` text of a write, with the verb (and subresource) the store knows
    filled in where the caller left them out ('' without a context)."""
    return text_of(None if ctx is None else ctx.defaults(verb=verb, subresource=subresource))
