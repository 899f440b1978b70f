"""``qm apply`` and ``qm delete``: the commands that change the cluster.

Apply is an idempotent create-or-update of each manifest document: it reports ``created``,
``configured`` or ``unchanged``, retries on write conflicts, and carries on past a failing
document so that one bad object in a directory does not hide the results for the rest.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from app.core.errors import AlreadyExists, Conflict, NotFound, StatusError

from .client import ApiClient
from .context import Context, UsageError, resolve_kinds
from .manifests import (
    Manifest,
    ManifestError,
    Target,
    describe_target,
    expand_paths,
    is_unchanged,
    load_source,
    merge_for_update,
    prepare_create,
    target_of,
)

CONFLICT_RETRIES = 5
PROPAGATION = {"background": "Background", "foreground": "Foreground", "orphan": "Orphan"}


def apply_object(client: ApiClient, target: Target, body: dict[str, Any]) -> str:
    """Create or update one object; returns ``created``, ``configured`` or ``unchanged``."""
    kind, ns, name = target.kind, target.namespace, target.name
    last: StatusError | None = None
    for _ in range(1 + CONFLICT_RETRIES):
        try:
            current = client.get(kind, ns, name)
        except NotFound:
            try:
                client.create(kind, ns, prepare_create(body, target))
                return "created"
            except AlreadyExists as exc:
                last = exc
                continue
        merged = merge_for_update(current, body)
        if is_unchanged(current, merged):
            return "unchanged"
        try:
            result = client.replace(kind, ns, merged)
        except Conflict as exc:
            last = exc
            continue
        before = (current.get("metadata") or {}).get("resourceVersion")
        after = (result.get("metadata") or {}).get("resourceVersion")
        return "unchanged" if before and before == after else "configured"
    assert last is not None
    raise last


def _load_all(ctx: Context, paths: list[str]) -> tuple[list[Manifest], bool]:
    manifests: list[Manifest] = []
    failed = False
    for path in expand_paths(paths):
        try:
            manifests += load_source(path, ctx.stdin)
        except ManifestError as exc:
            ctx.error(f"error: {exc}")
            failed = True
    return manifests, failed


def run_apply(ctx: Context, args: argparse.Namespace) -> int:
    manifests, failed = _load_all(ctx, args.filename)
    if not manifests and not failed:
        ctx.error("error: no objects passed to apply")
        return 1
    for manifest in manifests:
        try:
            target = target_of(manifest, ctx.namespace)
        except ManifestError as exc:
            ctx.error(f"error: {exc}")
            failed = True
            continue
        try:
            outcome = apply_object(ctx.client, target, manifest.obj)
        except StatusError as exc:
            ctx.report(exc, during=f'error when applying "{manifest.source}": ')
            failed = True
            continue
        ctx.print(f"{describe_target(target)} {outcome}")
    return 1 if failed else 0


def _delete_targets(ctx: Context, args: argparse.Namespace) -> tuple[list[Target], bool]:
    if args.filename:
        if args.kind:
            raise UsageError("give either -f or a resource type and names, not both")
        manifests, failed = _load_all(ctx, args.filename)
        targets = []
        for manifest in manifests:
            try:
                targets.append(target_of(manifest, ctx.namespace))
            except ManifestError as exc:
                ctx.error(f"error: {exc}")
                failed = True
        return targets, failed
    if not args.kind:
        raise UsageError("a resource type and names (or -f FILE) are required")
    kinds = resolve_kinds(args.kind)
    if args.names:
        if len(kinds) > 1:
            raise UsageError("names cannot be given when deleting several resource types")
        if args.selector:
            raise UsageError("names cannot be combined with a label selector")
        kind = kinds[0]
        return [Target(kind, n, ctx.object_namespace(kind)) for n in args.names], False
    if not args.selector:
        raise UsageError("resource names or a label selector (-l) are required")
    targets = []
    for kind in kinds:
        listed = ctx.client.list(kind, ctx.list_namespace(kind), label_selector=args.selector)
        for obj in listed["items"]:
            meta = obj.get("metadata") or {}
            ns = str(meta.get("namespace") or ctx.namespace) if kind.namespaced else None
            targets.append(Target(kind, str(meta.get("name")), ns))
    if not targets:
        ctx.error("No resources found")
    return targets, False


def wait_deleted(
    client: ApiClient,
    target: Target,
    timeout: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Poll until the object is gone (finalizers done); ``False`` on timeout."""
    deadline = clock() + timeout
    while True:
        try:
            client.get(target.kind, target.namespace, target.name)
        except NotFound:
            return True
        if clock() >= deadline:
            return False
        sleep(0.5)


def run_delete(ctx: Context, args: argparse.Namespace) -> int:
    targets, failed = _delete_targets(ctx, args)
    policy = PROPAGATION.get(args.cascade) if args.cascade else None
    for target in targets:
        try:
            ctx.client.delete(target.kind, target.namespace, target.name, propagation_policy=policy)
        except NotFound as exc:
            if not args.ignore_not_found:
                ctx.report(exc)
                failed = True
            continue
        except StatusError as exc:
            ctx.report(exc)
            failed = True
            continue
        ctx.print(f'{target.kind.singular} "{target.name}" deleted')
        if args.wait and not wait_deleted(ctx.client, target, args.timeout):
            ctx.error(
                f'error: timed out waiting for {target.kind.singular} "{target.name}" to go away'
            )
            failed = True
    return 1 if failed else 0
