"""``qm history [KIND/NAME]``: who changed what, when, from where and why.

Reads the history read API (``/apis/audit.quaymaster.io/v1``, ``app.api.history``) through the
REST client, newest first, following its continue tokens until ``--limit`` rows. Without an
object it shows the namespace's history (``-A``: the cluster's); with one, that object's (a
cluster-scoped kind's on the cluster route). ``--since`` / ``--until`` take an RFC 3339 time or
a duration back from now (``90s``, ``15m``, ``2h``, ``7d``), sent as an absolute time so every
page asks the same query. The table is built by pure functions of the API's answers.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from app.client import build

from .context import Context, UsageError, resolve_one_kind
from .printers import render_table, to_json

Obj = dict[str, Any]
OPS = ("insert", "update", "delete", "summary")
PAGE = 500
_DURATION = re.compile(r"^(\d+)(s|m|h|d)$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("history", parents=[common],
                       help="who changed what, when and why (the change history)")  # fmt: skip
    p.add_argument("object", metavar="KIND[/NAME]", nargs="?",
                   help="an object (deploy/web, node/n1) or a kind (pods)")  # fmt: skip
    p.add_argument("--principal", help="only changes made by this principal")
    p.add_argument("--since", help="RFC 3339 time or a duration back from now (15m, 2h, 7d)")
    p.add_argument("--until", help="RFC 3339 time or a duration back from now")
    p.add_argument("--op", help="comma-separated: insert, update, delete, summary")
    p.add_argument("--limit", type=int, default=50, help="at most this many rows (default 50)")
    p.add_argument("-o", "--output", choices=["json", "wide"])


def when(text: str | None, now: datetime) -> str | None:
    """``text`` as an RFC 3339 time in UTC: a duration counts back from ``now``."""
    if not text:
        return None
    m = _DURATION.match(text)
    if m:
        at = now - timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})
        return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    try:
        zoned = datetime.fromisoformat(text).tzinfo is not None
    except ValueError:
        zoned = False
    if not zoned:
        raise UsageError(f"{text!r} is neither a duration (15m, 2h) nor an RFC 3339 time")
    return text


def short_time(at: str) -> str:
    """``2026-12-02T10:41:08.025431Z`` as ``2026-12-02T10:41:08Z``."""
    return re.sub(r"\.\d+Z$", "Z", at)


def object_text(item: Obj) -> str:
    kind = item.get("kind") or item.get("table") or ""
    ns, name = item.get("namespace") or "", item.get("name") or ""
    return f"{kind}/{ns + '/' if ns else ''}{name}"


def history_table(items: Sequence[Obj], wide: bool = False) -> str:
    """TIME, PRINCIPAL, VERB, OP, OBJECT, REASON, CHANGED (wide: REQUEST, CLIENT, SEALED)."""
    headers = ["TIME", "PRINCIPAL", "VERB", "OP", "OBJECT", "REASON", "CHANGED"]
    if wide:
        headers += ["REQUEST", "CLIENT", "SEALED"]
    rows = []
    for i in items:
        principal = i.get("principal") or f"(db: {i.get('dbRole') or '?'})"
        row = [short_time(str(i["at"])), principal, i.get("verb") or "", i["op"],
               object_text(i), i.get("reason") or "", ",".join(i.get("changed") or [])]  # fmt: skip
        if wide:
            row += [i.get("requestId") or "", i.get("clientAddr") or "",
                    "yes" if i.get("sealed") else "no"]  # fmt: skip
        rows.append(row)
    return render_table(headers, rows)


def _target(ctx: Context, what: str | None) -> tuple[str | None, dict[str, str | None]]:
    """The route's namespace (None: the cluster's) and the object filters."""
    if not what:
        return (None if ctx.all_namespaces else ctx.namespace), {}
    kind_text, _, name = what.partition("/")
    kind = resolve_one_kind(kind_text)
    query: dict[str, str | None] = {"kind": kind.kind, "name": name or None}
    if not kind.namespaced:
        return None, query
    if ctx.all_namespaces and not name:
        return None, query
    return ctx.namespace, query


def run_history(ctx: Context, args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise UsageError("--limit must be at least 1")
    if args.op and any(o.strip() not in OPS for o in args.op.split(",")):
        raise UsageError(f"--op takes {', '.join(OPS)}")
    now = datetime.now(UTC)
    namespace, query = _target(ctx, args.object)
    query |= {"principal": args.principal, "op": args.op, "since": when(args.since, now),
              "until": when(args.until, now)}  # fmt: skip
    items: list[Obj] = []
    cont: str | None = None
    while len(items) < args.limit:
        page = ctx.client.send(build.history(
            namespace, **query, limit=str(min(PAGE, args.limit - len(items))), **{"continue": cont}
        ))  # fmt: skip
        items += page.get("items") or []
        cont = (page.get("metadata") or {}).get("continue")
        if not cont:
            break
    if args.output == "json":
        body = {"kind": "HistoryList", "apiVersion": "audit.quaymaster.io/v1",
                "metadata": {"continue": cont} if cont else {}, "items": items}  # fmt: skip
        ctx.out.write(to_json(body))
        return 0
    if not items:
        ctx.error("No changes found.")
        return 0
    ctx.print(history_table(items, wide=args.output == "wide"))
    return 0


COMMANDS = {"history": run_history}
