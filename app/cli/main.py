"""Entry point of ``qm``: argument parsing, dispatch, and the mapping from failures to exit
codes (0 success, 1 an API or manifest error, 2 a usage or configuration error).

``get`` lives in ``get.py`` and ``apply`` / ``delete`` in ``apply.py``; the small read-only
commands ``describe`` and ``version`` are here.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from app.client import Unreachable
from app.core.audit import check_reason
from app.core.errors import StatusError
from app.core.kinds import BY_KIND, Kind

from . import printers
from .apply import PROPAGATION, run_apply, run_delete
from .audit import add_parsers as add_audit_parsers
from .audit import run as run_audit
from .auth import COMMANDS as AUTH_COMMANDS
from .auth import add_parsers as add_auth_parsers
from .bootstrap import COMMANDS as BOOTSTRAP_COMMANDS
from .bootstrap import add_parsers as add_bootstrap_parsers
from .client import CLIENT_VERSION, ApiClient
from .config import ConfigError, load_config, tls_hint
from .context import Context, UsageError, resolve_one_kind
from .db import add_parsers as add_db_parsers
from .db import run as run_db
from .get import run_get
from .history import COMMANDS as HISTORY_COMMANDS
from .history import add_parsers as add_history_parsers
from .logs import COMMANDS as LOG_COMMANDS
from .logs import add_parsers as add_log_parsers
from .nodes import COMMANDS as NODE_COMMANDS
from .nodes import add_parsers as add_node_parsers
from .rollout import COMMANDS as ROLLOUT_COMMANDS
from .rollout import add_parsers as add_rollout_parsers
from .secrets import COMMANDS as SECRET_COMMANDS
from .secrets import add_parsers as add_secret_parsers
from .tokens import COMMANDS as TOKEN_COMMANDS
from .tokens import add_parsers as add_token_parsers
from .top import COMMANDS as TOP_COMMANDS
from .top import add_parsers as add_top_parsers

Obj = dict[str, Any]


def _global_flags() -> argparse.ArgumentParser:
    """Flags accepted both before and after the command name (``qm -n x get pods`` and
    ``qm get pods -n x``); SUPPRESS keeps a later parser from resetting an earlier value."""
    common = argparse.ArgumentParser(add_help=False)
    s = argparse.SUPPRESS
    common.add_argument("-n", "--namespace", default=s, help='namespace (default "default")')
    common.add_argument(
        "-A", "--all-namespaces", action="store_true", default=s, help="list across namespaces"
    )
    common.add_argument("--server", default=s, help="API server URL (overrides QM_SERVER)")
    common.add_argument("--token", default=s, help="bearer token (overrides QM_TOKEN)")
    common.add_argument(
        "--reason", default=s, help="why: recorded with every write in the change history"
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    common = _global_flags()
    parser = argparse.ArgumentParser(
        prog="qm", description="Command line client for Quaymaster.", parents=[common]
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    get = sub.add_parser("get", parents=[common], help="list or show objects")
    get.add_argument("kind", metavar="KIND", help="resource type, e.g. pods, po, pods,nodes")
    get.add_argument("names", metavar="NAME", nargs="*")
    get.add_argument("-l", "--selector", help="label selector, e.g. app=web,tier!=db")
    get.add_argument("--field-selector", help="field selector, e.g. spec.nodeName=n1")
    get.add_argument("-o", "--output", choices=["wide", "yaml", "json", "name"])
    get.add_argument("-w", "--watch", action="store_true", help="stream changes after listing")

    describe = sub.add_parser("describe", parents=[common], help="show one object in detail")
    describe.add_argument("kind", metavar="KIND")
    describe.add_argument("names", metavar="NAME", nargs="*")
    describe.add_argument("-l", "--selector", help="describe every object matching")

    apply = sub.add_parser("apply", parents=[common], help="create or update from manifests")
    apply.add_argument(
        "-f",
        "--filename",
        action="append",
        required=True,
        help="file, directory or - for stdin (repeatable)",
    )

    delete = sub.add_parser("delete", parents=[common], help="delete objects")
    delete.add_argument("kind", metavar="KIND", nargs="?")
    delete.add_argument("names", metavar="NAME", nargs="*")
    delete.add_argument("-f", "--filename", action="append", help="delete what files describe")
    delete.add_argument("-l", "--selector", help="delete every object matching")
    delete.add_argument("--cascade", choices=sorted(PROPAGATION), help="propagation policy")
    delete.add_argument("--wait", action="store_true", help="wait until the objects are gone")
    delete.add_argument("--timeout", type=float, default=60.0, help="seconds for --wait")
    delete.add_argument("--ignore-not-found", action="store_true")

    version = sub.add_parser("version", parents=[common], help="client and server versions")
    version.add_argument("-o", "--output", choices=["yaml", "json"])
    add_node_parsers(sub, common)
    add_bootstrap_parsers(sub, common)
    add_rollout_parsers(sub, common)
    add_log_parsers(sub, common)
    add_top_parsers(sub, common)
    add_history_parsers(sub, common)
    add_secret_parsers(sub, common)
    add_token_parsers(sub, common)
    add_auth_parsers(sub, common)
    add_db_parsers(sub, common)
    add_audit_parsers(sub, common)
    return parser


def _fetch_events(ctx: Context, kind: Kind, obj: Obj) -> list[Obj] | None:
    meta = obj.get("metadata") or {}
    namespace = str(meta.get("namespace") or ctx.namespace) if kind.namespaced else "default"
    selector = f"involvedObject.name={meta.get('name', '')},involvedObject.kind={kind.kind}"
    try:
        listed = ctx.client.list(BY_KIND["Event"], namespace, field_selector=selector)
    except (StatusError, Unreachable):
        return None
    items: list[Obj] = listed["items"]
    return items


def run_describe(ctx: Context, args: argparse.Namespace) -> int:
    kind = resolve_one_kind(args.kind)
    failed = False
    objs: list[Obj] = []
    if args.names:
        if args.selector:
            raise UsageError("a name cannot be combined with a label selector")
        for name in args.names:
            try:
                objs.append(ctx.client.get(kind, ctx.object_namespace(kind), name))
            except StatusError as exc:
                ctx.report(exc)
                failed = True
    else:
        listed = ctx.client.list(kind, ctx.list_namespace(kind), label_selector=args.selector)
        objs = listed["items"]
        if not objs:
            ctx.error("No resources found")
    for i, obj in enumerate(objs):
        if i:
            ctx.print()
        ctx.out.write(printers.describe(kind, obj, _fetch_events(ctx, kind, obj)))
        ctx.out.flush()
    return 1 if failed else 0


def run_version(ctx: Context, args: argparse.Namespace) -> int:
    client_info = {"gitVersion": f"v{CLIENT_VERSION}", "python": sys.version.split()[0]}
    server_info: Obj | None = None
    error: StatusError | Unreachable | None = None
    try:
        server_info = ctx.client.version()
    except (StatusError, Unreachable) as exc:
        error = exc
    if args.output:
        doc: Obj = {"clientVersion": client_info}
        if server_info is not None:
            doc["serverVersion"] = server_info
        text = printers.to_json(doc) if args.output == "json" else printers.to_yaml(doc)
        ctx.out.write(text)
    else:
        ctx.print(f"Client Version: {client_info['gitVersion']}")
        if server_info is not None:
            ctx.print(f"Server Version: {server_info.get('gitVersion', '<unknown>')}")
    if isinstance(error, StatusError):
        ctx.report(error)
    elif error is not None:
        ctx.error(f"error: {error}")
    return 1 if error else 0


COMMANDS: dict[str, Callable[[Context, argparse.Namespace], int]] = {
    "get": run_get,
    "describe": run_describe,
    "apply": run_apply,
    "delete": run_delete,
    "version": run_version,
    **NODE_COMMANDS,
    **BOOTSTRAP_COMMANDS,
    **ROLLOUT_COMMANDS,
    **LOG_COMMANDS,
    **TOP_COMMANDS,
    **HISTORY_COMMANDS,
    **SECRET_COMMANDS,
    **TOKEN_COMMANDS,
    **AUTH_COMMANDS,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    if not args.command:
        parser.print_help(sys.stderr)
        return 2
    if args.command == "db":  # talks to the database, not the API
        return run_db(args)
    if args.command == "audit":  # so does this one
        return run_audit(args)
    try:
        config = load_config(
            getattr(args, "server", None),
            getattr(args, "token", None),
            require_token=args.command != "version",
        )
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    namespace = getattr(args, "namespace", None) or "default"
    reason = getattr(args, "reason", None)
    if reason is not None and (why := check_reason(reason)) is not None:
        print(f"error: --reason {why}", file=sys.stderr)
        return 2
    with contextlib.closing(
        ApiClient(config.server, config.token, ca_file=config.ca_file, reason=reason)
    ) as client:
        ctx = Context(
            client,
            namespace=namespace,
            all_namespaces=bool(getattr(args, "all_namespaces", False)),
        )
        try:
            return COMMANDS[args.command](ctx, args)
        except UsageError as exc:
            ctx.error(f"error: {exc}")
            return 2
        except StatusError as exc:
            ctx.report(exc)
            return 1
        except Unreachable as exc:
            ctx.error(f"error: {exc}")
            if hint := tls_hint(str(exc)):
                ctx.error(hint)
            return 1
        except KeyboardInterrupt:
            return 130
        except BrokenPipeError:
            # The reader went away (``qm get pods | head``): silence the final flush.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return 0


if __name__ == "__main__":
    sys.exit(main())
