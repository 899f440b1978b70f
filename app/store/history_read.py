"""Reading the change history a page at a time, for the history read API (ADR 0061).

``app.api.history`` validates a request into a :class:`Query` and calls :func:`read`: one
keyset-paginated query over ``qm_history`` (the application role may read it since migration
0018), newest first, each row joined to its link in ``qm_history_links`` to say whether it is
sealed. The continue token is opaque to clients: :func:`encode_token` / :func:`decode_token`.

The order follows the indexes migration 0014 made, so every page is an index walk:

* a query naming an object (``name``) or a ``principal`` is ordered by ``(at, id)``, read
  through ``qm_history_object (table_name, namespace, name, at)`` or ``qm_history_principal
  (principal, at)``;
* any other query (cluster-wide, a namespace, a kind) is ordered by ``id``, the order rows were
  written in, read backwards through each month's primary key ``(id, at)`` and merged.
  Ordering those by ``at`` would sort a whole month per page: there is no B-tree on ``at``
  alone, and one more index on every history write was not worth it (ADR 0061).

Both are newest first; they differ only between writes whose statements overlapped. Filters
the walk's index does not cover (a namespace, a kind, an op) are checked row by row as it goes,
so a rare match over a long history reads more rows: :data:`STATEMENT_TIMEOUT` bounds it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg

MAX_LIMIT = 500
DEFAULT_LIMIT = 100
OPS = ("insert", "update", "delete", "summary")
STATEMENT_TIMEOUT = "10s"
TOKEN_VERSION = 1
# A Secret's values never leave the database: the triggers keep only a digest of them; rows
# copied from the legacy audit table may hold more, and are reduced the same way here.
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
DIGESTS = {"qm_tokens": "token_sha256", "qm_node_credentials": "token_sha256",
           "qm_bootstrap_tokens": "secret_sha256"}  # fmt: skip

COLUMNS = (
    "id", "at", "table_name", "kind", "namespace", "name", "uid", "op", "before", "after",
    "principal", "groups", "reason", "request_id", "client_addr", "user_agent", "verb",
    "subresource", "db_role", "application_name", "summary_count",
)  # fmt: skip


class BadToken(ValueError):
    """A continue token that is not one this module wrote, or was written for another query."""


@dataclass(frozen=True)
class Cursor:
    """The last row of a page: the next page starts after it."""

    at: datetime
    id: int


@dataclass(frozen=True)
class Query:
    """What to read. ``table`` is the table name (an API kind's ``Kind.table``); ``ops`` empty
    means every op but ``summary``."""

    table: str | None = None
    namespace: str | None = None
    name: str | None = None
    uid: str | None = None
    principal: str | None = None
    ops: tuple[str, ...] = ()
    since: datetime | None = None
    until: datetime | None = None
    limit: int = DEFAULT_LIMIT
    after: Cursor | None = field(default=None, compare=False)

    @property
    def by_time(self) -> bool:
        """Ordered by ``(at, id)`` (an object's or a principal's rows), else by ``id``."""
        return self.name is not None or self.principal is not None

    def digest(self) -> str:
        """The filters, hashed: a continue token is good only for the query that issued it."""
        parts = [self.table, self.namespace, self.name, self.uid, self.principal,
                 ",".join(self.ops), _iso(self.since), _iso(self.until)]  # fmt: skip
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Page:
    items: list[dict[str, Any]]
    cont: str | None


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None


def encode_token(query: Query, last: Cursor) -> str:
    body = {"v": TOKEN_VERSION, "at": last.at.isoformat(), "id": last.id, "q": query.digest()}
    raw = json.dumps(body, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_token(token: str, query: Query) -> Cursor:
    """The cursor ``token`` carries; :class:`BadToken` when it is malformed or was issued for a
    query with other filters."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        body = json.loads(raw)
        if not isinstance(body, dict) or body.get("v") != TOKEN_VERSION:
            raise BadToken("not a history continue token")
        at, id_ = datetime.fromisoformat(body["at"]), body["id"]
        if at.tzinfo is None or not isinstance(id_, int) or isinstance(id_, bool):
            raise BadToken("not a history continue token")
    except (binascii.Error, ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        if isinstance(exc, BadToken):
            raise
        raise BadToken("not a history continue token") from exc
    if body.get("q") != query.digest():
        raise BadToken("the continue token was issued for a query with other filters")
    return Cursor(at, id_)


def statement(query: Query) -> tuple[str, list[Any]]:
    """The page's SQL and its arguments (one more row than the limit: is there a next page)."""
    args: list[Any] = []

    def arg(value: Any) -> str:
        args.append(value)
        return f"${len(args)}"

    conds = []
    for column in ("table_name", "namespace", "name", "principal"):
        value = getattr(query, "table" if column == "table_name" else column)
        if value is not None:
            conds.append(f"q.{column} = {arg(value)}")
    if query.uid is not None:
        conds.append(f"q.uid = {arg(query.uid)}::uuid")
    if query.ops:
        conds.append(f"q.op = ANY({arg(list(query.ops))}::text[])")
    else:
        conds.append("q.op <> 'summary'")
    if query.since is not None:
        conds.append(f"q.at >= {arg(query.since)}")
    if query.until is not None:
        conds.append(f"q.at < {arg(query.until)}")
    if query.after is not None and query.by_time:
        at, id_ = arg(query.after.at), arg(query.after.id)
        conds.append(f"q.at <= {at} AND (q.at < {at} OR q.id < {id_})")
    elif query.after is not None:
        conds.append(f"q.id < {arg(query.after.id)}")
    order = "{0}at DESC, {0}id DESC" if query.by_time else "{0}id DESC"
    inner = ", ".join(f"q.{c}" for c in COLUMNS)
    outer = ", ".join(f"h.{c}" for c in COLUMNS)
    sql = (
        f"SELECT {outer}, l.seq FROM ("
        f"SELECT {inner} FROM qm_history AS q WHERE {' AND '.join(conds)}"
        f" ORDER BY {order.format('q.')} LIMIT {arg(query.limit + 1)}) AS h"
        " LEFT JOIN qm_history_links AS l ON l.id = h.id AND l.at = h.at"
        f" ORDER BY {order.format('h.')}"
    )
    return sql, args


async def read(pool: asyncpg.Pool, query: Query) -> Page:
    """One page of history rows, newest first, with the token of the next page (or None)."""
    sql, args = statement(query)
    async with pool.acquire() as conn, conn.transaction(readonly=True):
        await conn.execute(f"SET LOCAL statement_timeout = '{STATEMENT_TIMEOUT}'")
        records = await conn.fetch(sql, *args)
    rows = [item(dict(r)) for r in records[: query.limit]]
    cont = None
    if len(records) > query.limit:
        last = records[query.limit - 1]
        cont = encode_token(query, Cursor(last["at"], last["id"]))
    return Page(rows, cont)


def item(row: dict[str, Any]) -> dict[str, Any]:
    """A history row as the API shows it (``table_name`` is ``table``; ``changed``: the
    top-level columns an update changed; ``sealed``: in the hash chain)."""
    table = row["table_name"]
    before, after = (_reduced(table, row[k]) for k in ("before", "after"))
    changed = sorted(after) if row["op"] == "update" and isinstance(after, dict) else []
    out = {c: row[c] for c in COLUMNS if c not in ("table_name", "before", "after", "uid")}
    out.update(
        table=table,
        uid=str(row["uid"]) if row["uid"] else None,
        before=before,
        after=after,
        changed=changed,
        sealed=row["seq"] is not None,
        seq=row["seq"],
    )
    out["groups"] = list(row["groups"]) if row["groups"] is not None else None
    return out


def _reduced(table: str, image: Any) -> Any:
    """``image`` without what the history's triggers never keep (ADR 0052): a Secret's data
    and last-applied annotation as digests, credentials' digests dropped."""
    if not isinstance(image, dict):
        return image
    if table in DIGESTS:
        return {k: v for k, v in image.items() if k != DIGESTS[table]}
    if table != "secrets":
        return image
    out = dict(image)
    spec = out.get("spec")
    if isinstance(spec, dict):
        out["spec"] = {k: _digest(v) if k in ("data", "stringData") else v
                       for k, v in spec.items()}  # fmt: skip
    notes = out.get("annotations")
    if isinstance(notes, dict) and LAST_APPLIED in notes:
        out["annotations"] = {k: v for k, v in notes.items() if k != LAST_APPLIED}
    return out


def _digest(value: Any) -> Any:
    """A value the trigger already reduced (a ``sha256:`` string) stays; anything else is
    replaced by a digest of its JSON."""
    if isinstance(value, str) and value.startswith("sha256:"):
        return value
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()
