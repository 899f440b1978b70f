"""``qm token create|list|revoke``: bearer tokens of users and service accounts.

``create`` prints the new token alone on stdout (so ``TOKEN=$(qm token create ...)`` works)
and what it is on stderr; the server shows a token once and keeps only its digest. Durations
and limits are the server's to check: a bad ``--ttl`` comes back as a 422 naming the field.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from app.client import build
from app.core.principals import parse_duration

from .context import Context, UsageError

Obj = dict[str, Any]


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    token = sub.add_parser("token", parents=[common], help="create, list and revoke tokens")
    verbs = token.add_subparsers(dest="token_command", metavar="VERB", required=True)
    create = verbs.add_parser("create", parents=[common], help="create a token (shown once)")
    create.add_argument("--user", help="the token's user (default: yourself)")
    create.add_argument(
        "--group", action="append", default=[], help="a group of the token (repeatable)"
    )
    create.add_argument("--service-account", metavar="NS/NAME", help="a service account's token")
    when = create.add_mutually_exclusive_group()
    when.add_argument("--ttl", help="lifetime, e.g. 90m, 12h, 30d (default 24h)")
    when.add_argument("--expires", help="expiry time, RFC 3339 (2027-01-31T00:00:00Z)")
    create.add_argument("--description", default="", help="what the token is for")
    create.add_argument("-o", "--output", choices=["json"], help="print the whole record")
    listing = verbs.add_parser("list", parents=[common], help="list the tokens you may see")
    listing.add_argument("--user", help="only this user's tokens")
    listing.add_argument("-o", "--output", choices=["json"])
    revoke = verbs.add_parser("revoke", parents=[common], help="revoke tokens by id")
    revoke.add_argument("ids", metavar="ID", nargs="+")


def _lifetime(args: argparse.Namespace, now: float) -> int | None:
    try:
        if args.ttl:
            return parse_duration(args.ttl)
        if args.expires:
            at = datetime.fromisoformat(args.expires.replace("Z", "+00:00"))
            if at.tzinfo is None:
                raise ValueError("the time needs a zone, e.g. Z")
            return int(at.timestamp() - now)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return None


def spec_of(args: argparse.Namespace, now: float) -> Obj:
    """The ``Token`` spec the flags ask for."""
    spec: Obj = {}
    if args.service_account:
        ns, sep, name = args.service_account.partition("/")
        if not sep or not ns or not name:
            raise UsageError(
                f"--service-account must be NAMESPACE/NAME, got {args.service_account!r}"
            )
        spec["serviceAccount"] = {"namespace": ns, "name": name}
    if args.user:
        spec["user"] = args.user
    if args.group:
        spec["groups"] = list(args.group)
    ttl = _lifetime(args, now)
    if ttl is not None:
        spec["expirationSeconds"] = ttl
    if args.description:
        spec["description"] = args.description
    return spec


def run_create(
    ctx: Context, args: argparse.Namespace, clock: Callable[[], float] = time.time
) -> int:
    obj: Obj = ctx.client.send(build.token_create(spec_of(args, clock())))
    if args.output == "json":
        ctx.print(json.dumps(obj, indent=2))
        return 0
    spec = obj.get("spec") or {}
    ctx.error(
        f"token/{obj['metadata']['name']} for {spec.get('user')}"
        f" expires {spec.get('expirationTimestamp', 'never')}"
    )
    ctx.print(str((obj.get("status") or {}).get("token", "")))
    return 0


def _row(obj: Obj) -> list[str]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    return [
        obj["metadata"]["name"],
        str(spec.get("user", "")),
        ",".join(spec.get("groups") or []) or "<none>",
        str(spec.get("expirationTimestamp", "never")),
        str(status.get("revokedAt", "")) or "<none>",
        str(spec.get("description", "")),
    ]


def run_list(ctx: Context, args: argparse.Namespace) -> int:
    body: Obj = ctx.client.send(build.token_list(args.user))
    if args.output == "json":
        ctx.print(json.dumps(body, indent=2))
        return 0
    rows = [["ID", "USER", "GROUPS", "EXPIRES", "REVOKED", "DESCRIPTION"]]
    rows += [_row(o) for o in body.get("items") or []]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        ctx.print("   ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "   " + r[-1])
    return 0


def run_revoke(ctx: Context, args: argparse.Namespace) -> int:
    for name in args.ids:
        obj: Obj = ctx.client.send(build.token_revoke(name))
        at = (obj.get("status") or {}).get("revokedAt", "")
        ctx.print(f"token/{name} revoked at {at}")
    return 0


def run_token(ctx: Context, args: argparse.Namespace) -> int:
    verbs: dict[str, Callable[[Context, argparse.Namespace], int]] = {
        "create": run_create,
        "list": run_list,
        "revoke": run_revoke,
    }
    return verbs[args.token_command](ctx, args)


COMMANDS: dict[str, Callable[[Context, argparse.Namespace], int]] = {"token": run_token}
