"""``qm auth can-i``: ask the server what the current credential may do.

``qm auth can-i VERB KIND[/SUBRESOURCE] [NAME] [-n NS | -A]`` posts a SelfSubjectAccessReview
and prints ``yes`` (exit 0) or ``no`` (exit 1), as ``kubectl auth can-i`` does;
``qm auth can-i --list [-n NS]`` posts a SelfSubjectRulesReview and prints the rules that
apply in the namespace. The server answers from the same authorizers that guard requests.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from app.client import build
from app.core.kinds import GROUP, resolve

from . import printers
from .context import Context, UsageError

REVIEWS = f"/apis/authorization.{GROUP}/v1"


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    auth = sub.add_parser("auth", parents=[common], help="inspect what you are allowed to do")
    verbs = auth.add_subparsers(dest="auth_command", metavar="VERB", required=True)
    can = verbs.add_parser("can-i", parents=[common], help="ask whether you may do something")
    can.add_argument("verb", metavar="VERB", nargs="?")
    can.add_argument("resource", metavar="KIND", nargs="?", help="e.g. pods, deploy, pods/log")
    can.add_argument("name", metavar="NAME", nargs="?")
    can.add_argument("--list", action="store_true", help="list what you may do in the namespace")


def attributes(args: argparse.Namespace, ctx: Context) -> dict[str, str]:
    """The review's resourceAttributes from the command line."""
    if not args.verb or not args.resource:
        raise UsageError("you must specify VERB and KIND, or --list")
    plural, _, subresource = str(args.resource).partition("/")
    kind = resolve(plural)
    group = GROUP
    if kind is not None:
        plural = kind.plural
    elif "." in plural:  # resource.group, as kubectl takes it
        plural, group = plural.split(".", 1)
    namespace = (
        "" if ctx.all_namespaces or (kind is not None and not kind.namespaced) else (ctx.namespace)
    )
    ra = {"verb": args.verb, "resource": plural, "group": group, "namespace": namespace}
    if subresource:
        ra["subresource"] = subresource
    if args.name:
        ra["name"] = args.name
    return ra


def _review(ctx: Context, plural: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    body = {"apiVersion": f"authorization.{GROUP}/v1", "kind": kind, "spec": spec}
    request = build.Request("POST", f"{REVIEWS}/{plural}", body=build.encode(body))
    answer: dict[str, Any] = ctx.client.send(request)
    status: dict[str, Any] = answer.get("status") or {}
    return status


def rule_rows(status: dict[str, Any]) -> list[list[str]]:
    """kubectl's columns: resources (with group), non-resource URLs, names, verbs."""
    rows = []
    for r in status.get("resourceRules") or []:
        groups = [g for g in r.get("apiGroups") or [] if g]
        resources = [
            f"{res}.{g}" if g not in ("", GROUP) else res
            for res in r.get("resources") or []
            for g in groups or [""]
        ]
        rows.append([
            ", ".join(resources), "[]", f"[{' '.join(r.get('resourceNames') or [])}]",
            f"[{' '.join(r.get('verbs') or [])}]",
        ])  # fmt: skip
    for r in status.get("nonResourceRules") or []:
        urls = " ".join(r.get("nonResourceURLs") or [])
        rows.append(["", f"[{urls}]", "[]", f"[{' '.join(r.get('verbs') or [])}]"])
    return rows


def run_auth(ctx: Context, args: argparse.Namespace) -> int:
    if args.list:
        namespace = "" if ctx.all_namespaces else ctx.namespace
        status = _review(ctx, "selfsubjectrulesreviews", "SelfSubjectRulesReview",
                         {"namespace": namespace})  # fmt: skip
        header = ["RESOURCES", "NON-RESOURCE URLS", "RESOURCE NAMES", "VERBS"]
        ctx.print(printers.render_table(header, rule_rows(status)))
        return 0
    status = _review(ctx, "selfsubjectaccessreviews", "SelfSubjectAccessReview",
                     {"resourceAttributes": attributes(args, ctx)})  # fmt: skip
    ctx.print("yes" if status.get("allowed") else "no")
    return 0 if status.get("allowed") else 1


COMMANDS: dict[str, Callable[[Context, argparse.Namespace], int]] = {"auth": run_auth}
