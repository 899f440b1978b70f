"""``qm secrets status|rotate-key|reencrypt|prune-keys``: the Secret encryption keys (ADR 0048).

Each command is one request to ``/apis/encryption.quaymaster.io/v1/secretkeys`` on the API
server, which owns the keys file; ``rotate-key --wait`` then polls until the re-encryption it
started has finished and every Secret is sealed with the new key.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from app.client.build import Request

from .context import Context
from .printers import render_table

PATH = "/apis/encryption.quaymaster.io/v1/secretkeys"
Obj = dict[str, Any]


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    top = sub.add_parser("secrets", parents=[common], help="Secret encryption keys")
    what = top.add_subparsers(dest="secrets_what", metavar="ACTION", required=True)
    what.add_parser("status", parents=[common], help="keys and how many Secrets each seals")
    rotate = what.add_parser(
        "rotate-key", parents=[common], help="add a new active key and re-encrypt every Secret"
    )
    rotate.add_argument("--wait", action="store_true", help="until every Secret uses it")
    rotate.add_argument("--timeout", type=float, default=300.0, help="seconds to --wait")
    what.add_parser("reencrypt", parents=[common], help="re-encrypt under the active key")
    what.add_parser("prune-keys", parents=[common], help="remove keys no Secret uses")


def key_table(status: Obj) -> str:
    rows = [
        [k["id"], "yes" if k["active"] else "", str(k["secrets"])] for k in status.get("keys", [])
    ]
    return render_table(["KEY ID", "ACTIVE", "SECRETS"], rows)


def summary(status: Obj) -> str:
    r = status.get("reencryption") or {}
    state = "running" if r.get("running") else "idle"
    text = (
        f"re-encryption: {state}, {r.get('reencrypted', 0)} rewritten,"
        f" {r.get('conflicts', 0)} raced by writes, {len(r.get('failed') or [])} failed"
    )
    if status.get("plaintextSecrets"):
        text += f"; {status['plaintextSecrets']} Secrets still in plaintext"
    return text


def done(status: Obj) -> bool:
    """The re-encryption has finished and every Secret is sealed with the active key."""
    active = status.get("activeKeyId")
    others = sum(k["secrets"] for k in status.get("keys", []) if k["id"] != active)
    return not (status.get("reencryption") or {}).get("running") and not (
        others or status.get("plaintextSecrets") or status.get("unknownKeySecrets")
    )


def _show(ctx: Context, status: Obj) -> None:
    ctx.print(key_table(status))
    ctx.print(summary(status))
    for failure in (status.get("reencryption") or {}).get("failed") or []:
        ctx.error(f"failed: {failure}")


def run_secrets(ctx: Context, args: argparse.Namespace) -> int:
    action = args.secrets_what
    if action == "status":
        status = ctx.client.send(Request("GET", PATH))
    elif action == "rotate-key":
        status = ctx.client.send(Request("POST", f"{PATH}/rotate"))
        ctx.print(f"new active key: {status.get('addedKeyId')}")
        deadline = time.monotonic() + args.timeout
        while args.wait and not done(status) and time.monotonic() < deadline:
            time.sleep(0.5)
            status = ctx.client.send(Request("GET", PATH))
    elif action == "reencrypt":
        status = ctx.client.send(Request("POST", f"{PATH}/reencrypt"))
    else:
        status = ctx.client.send(Request("POST", f"{PATH}/prune"))
        ctx.print(f"removed keys: {', '.join(status.get('removedKeyIds') or []) or 'none'}")
    _show(ctx, status)
    if action == "rotate-key" and args.wait and not done(status):
        ctx.error("error: the re-encryption has not finished; see qm secrets status")
        return 1
    return 1 if (status.get("reencryption") or {}).get("failed") else 0


COMMANDS = {"secrets": run_secrets}
