"""``qm node bootstrap-token create|list|delete``: one-time tokens new nodes' agents join with.

The agent presents it once (``--bootstrap-token`` or ``--bootstrap-token-file``) and gets its
node's own credential in exchange (ADR 0045). The token is printed alone on stdout, so
``qm node bootstrap-token create --node n1 > token`` works, and what it is on stderr. Limits
are the server's to check: a bad ``--uses`` comes back as a 422 naming the field. ``list``
shows what is outstanding (never a secret); ``delete`` withdraws a token before it is used.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from app.client import build

from .context import Context, UsageError
from .nodes import duration


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    node = sub.add_parser("node", parents=[common], help="node credentials")
    nouns = node.add_subparsers(dest="node_command", metavar="NOUN", required=True)
    tokens = nouns.add_parser(
        "bootstrap-token", parents=[common], help="one-time tokens agents join with"
    )
    verbs = tokens.add_subparsers(dest="bootstrap_command", metavar="VERB", required=True)
    create = verbs.add_parser("create", parents=[common], help="create one (shown once)")
    create.add_argument("--ttl", type=duration, default=24 * 3600.0, help="lifetime (24h)")
    create.add_argument("--uses", type=int, default=1, help="joins it allows (1)")
    create.add_argument("--node", help="the only node it may join as (default: any)")
    create.add_argument("--description", default="", help="what it is for")
    create.add_argument("-o", "--output", choices=["json"], help="print the whole record")
    listing = verbs.add_parser("list", parents=[common], help="list them (never their secrets)")
    listing.add_argument("-o", "--output", choices=["json"])
    remove = verbs.add_parser("delete", parents=[common], help="withdraw tokens by id")
    remove.add_argument("ids", metavar="ID", nargs="+")


def run_node(ctx: Context, args: argparse.Namespace) -> int:
    verb = {"create": _create, "list": _list, "delete": _delete}.get(args.bootstrap_command)
    if args.node_command != "bootstrap-token" or verb is None:
        raise UsageError("usage: qm node bootstrap-token create|list|delete")
    return verb(ctx, args)


def _list(ctx: Context, args: argparse.Namespace) -> int:
    listed = ctx.client.call(build.Request("GET", build.AUTHN + "/bootstraptokens"))
    if args.output == "json":
        ctx.print(json.dumps(listed, indent=2))
        return 0
    rows = [("ID", "NODE", "USES LEFT", "EXPIRES", "LAST USED", "DESCRIPTION")]
    for item in listed.get("items") or []:
        spec, status = item.get("spec") or {}, item.get("status") or {}
        expires = "expired" if status.get("expired") else str(status.get("expiresAt"))
        rows.append((item["metadata"]["name"], spec.get("nodeName") or "<any>",
                     str(status.get("usesLeft")), expires, status.get("lastUsedAt") or "<never>",
                     spec.get("description") or ""))  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        ctx.print("   ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    return 0


def _delete(ctx: Context, args: argparse.Namespace) -> int:
    for token_id in args.ids:
        path = f"{build.AUTHN}/bootstraptokens/{quote(token_id, safe='')}"
        ctx.client.call(build.Request("DELETE", path))
        ctx.print(f"bootstraptoken/{token_id} deleted")
    return 0


def _create(ctx: Context, args: argparse.Namespace) -> int:
    spec: dict[str, Any] = {"ttlSeconds": max(1, round(args.ttl)), "uses": args.uses}
    if args.node:
        spec["nodeName"] = args.node
    if args.description:
        spec["description"] = args.description
    created = ctx.client.call(build.bootstrap_token(spec))
    if args.output == "json":
        ctx.print(json.dumps(created, indent=2))
        return 0
    status = created.get("status") or {}
    ctx.print(str(status.get("token")))
    who = f"node {args.node}" if args.node else "any node"
    ctx.error(f"bootstrap token {created['metadata']['name']} for {who}, {args.uses} use(s), "
              f"until {status.get('expiresAt')}")  # fmt: skip
    return 0


COMMANDS: dict[str, Callable[[Context, argparse.Namespace], int]] = {"node": run_node}
