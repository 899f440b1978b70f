"""``qm get``: list or fetch objects and print them, or follow them with ``--watch``.

The watch loop is the part worth reading: it lists, watches from the list's resourceVersion,
resumes from the last version it saw when the stream breaks, and relists (printing the
differences as events) when the server says that version has expired.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from app.client import Unreachable
from app.core.errors import Gone, StatusError
from app.core.kinds import Kind

from . import printers
from .context import Context, UsageError, resolve_kinds

Obj = dict[str, Any]
MAX_BACKOFF = 8.0


def _key(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _version(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _no_resources(ctx: Context, kinds: Sequence[Kind]) -> str:
    if ctx.all_namespaces or not any(k.namespaced for k in kinds):
        return "No resources found"
    return f"No resources found in {ctx.namespace} namespace."


def run_get(ctx: Context, args: argparse.Namespace) -> int:
    kinds = resolve_kinds(args.kind)
    names: list[str] = list(args.names or [])
    if names and len(kinds) > 1:
        raise UsageError("names cannot be given when getting several resource types")
    if names and args.selector:
        raise UsageError("a name cannot be combined with a label selector")
    if names and ctx.all_namespaces and kinds[0].namespaced:
        raise UsageError("a resource cannot be retrieved by name across all namespaces")
    if args.watch:
        if len(kinds) > 1 or len(names) > 1:
            raise UsageError("--watch takes one resource type and at most one name")
        return watch(ctx, kinds[0], args)

    failed = False
    results: list[tuple[Kind, list[Obj]]] = []
    resource_version = ""
    for kind in kinds:
        if names:
            objs: list[Obj] = []
            for name in names:
                try:
                    objs.append(ctx.client.get(kind, ctx.object_namespace(kind), name))
                except StatusError as exc:
                    ctx.report(exc)
                    failed = True
        else:
            listed = ctx.client.list(
                kind,
                ctx.list_namespace(kind),
                label_selector=args.selector,
                field_selector=args.field_selector,
            )
            objs = listed["items"]
            resource_version = str(listed["metadata"].get("resourceVersion") or "")
        results.append((kind, objs))

    output = args.output or ""
    every = [obj for _, objs in results for obj in objs]
    if output in ("json", "yaml"):
        single = len(names) == 1 and len(every) == 1
        doc = every[0] if single else printers.as_list(every, resource_version)
        ctx.out.write(printers.to_json(doc) if output == "json" else printers.to_yaml(doc))
        ctx.out.flush()
    elif output == "name":
        for kind, objs in results:
            for obj in objs:
                ctx.print(printers.resource_name(kind, obj))
    else:
        _print_tables(ctx, results, wide=output == "wide")
        if not every and not failed:
            ctx.error(_no_resources(ctx, kinds))
    return 1 if failed else 0


def _print_tables(ctx: Context, results: list[tuple[Kind, list[Obj]]], *, wide: bool) -> None:
    now = datetime.now(UTC)
    several = len(results) > 1
    first = True
    for kind, objs in results:
        if not objs:
            continue
        headers = printers.table_headers(kind, wide=wide, all_namespaces=ctx.all_namespaces)
        rows = [
            printers.table_row(
                kind,
                obj,
                wide=wide,
                all_namespaces=ctx.all_namespaces,
                now=now,
                kind_prefix=several,
            )
            for obj in objs
        ]
        if not first:
            ctx.print()
        ctx.print(printers.render_table(headers, rows))
        first = False


class _WatchPrinter:
    """Prints the initial list and then one line (or document) per event."""

    def __init__(self, ctx: Context, kind: Kind, output: str) -> None:
        self.ctx = ctx
        self.kind = kind
        self.output = output
        self.headers = printers.table_headers(
            kind, wide=output == "wide", all_namespaces=ctx.all_namespaces, event=True
        )
        self.widths = [len(h) for h in self.headers]

    def _row(self, obj: Obj, event: str) -> list[str]:
        return printers.table_row(
            self.kind,
            obj,
            wide=self.output == "wide",
            all_namespaces=self.ctx.all_namespaces,
            now=datetime.now(UTC),
            event=event,
        )

    def _emit_object(self, obj: Obj) -> None:
        if self.output == "json":
            self.ctx.out.write(printers.to_json(obj))
        elif self.output == "yaml":
            self.ctx.out.write("---\n" + printers.to_yaml(obj))
        else:
            self.ctx.out.write(printers.resource_name(self.kind, obj) + "\n")
        self.ctx.out.flush()

    def initial(self, items: list[Obj]) -> None:
        if self.output in ("json", "yaml", "name"):
            for obj in items:
                self._emit_object(obj)
            return
        rows = [self._row(obj, "") for obj in items]
        self.widths = printers.column_widths(self.headers, rows)
        for row in [self.headers, *rows]:
            self.ctx.print(printers.format_row(row, self.widths))

    def event(self, event_type: str, obj: Obj) -> None:
        if self.output in ("json", "yaml", "name"):
            self._emit_object(obj)
            return
        row = self._row(obj, event_type)
        self.widths = [max(w, len(c)) for w, c in zip(self.widths, row, strict=False)]
        self.ctx.print(printers.format_row(row, self.widths))


def watch(
    ctx: Context,
    kind: Kind,
    args: argparse.Namespace,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """List, then follow changes until interrupted (Ctrl-C exits 0)."""
    namespace = ctx.list_namespace(kind)
    selectors = [s for s in (args.field_selector,) if s]
    if args.names:
        selectors.append(f"metadata.name={args.names[0]}")
    field_selector = ",".join(selectors) or None
    printer = _WatchPrinter(ctx, kind, args.output or "")
    known: dict[tuple[str, str], Obj] = {}
    resource_version = ""
    listed_once = False
    need_list = True
    backoff = 0.5
    try:
        while True:
            try:
                if need_list:
                    listed = ctx.client.list(
                        kind,
                        namespace,
                        label_selector=args.selector,
                        field_selector=field_selector,
                    )
                    fresh = {_key(o): o for o in listed["items"]}
                    if listed_once:
                        _print_differences(printer, known, fresh)
                    else:
                        printer.initial(listed["items"])
                    known = fresh
                    resource_version = str(listed["metadata"].get("resourceVersion") or "")
                    listed_once, need_list = True, False
                got_event = False
                for event in ctx.client.watch(
                    kind,
                    namespace,
                    resource_version,
                    label_selector=args.selector,
                    field_selector=field_selector,
                ):
                    got_event = True
                    backoff = 0.5
                    obj = event.get("object") or {}
                    resource_version = _version(obj) or resource_version
                    event_type = str(event.get("type") or "")
                    if event_type == "BOOKMARK":
                        continue
                    if event_type == "DELETED":
                        known.pop(_key(obj), None)
                    else:
                        known[_key(obj)] = obj
                    printer.event(event_type, obj)
                if not got_event:
                    sleep(backoff)
                    backoff = min(backoff * 2, MAX_BACKOFF)
            except Gone:
                need_list = True
            except (Unreachable, StatusError) as exc:
                if not listed_once:
                    raise
                if isinstance(exc, StatusError) and not exc.retryable and exc.code < 500:
                    raise
                sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
    except KeyboardInterrupt:
        return 0


def _print_differences(
    printer: _WatchPrinter, known: dict[tuple[str, str], Obj], fresh: dict[tuple[str, str], Obj]
) -> None:
    """After a relist, report what changed while the watch was not looking."""
    for key, obj in fresh.items():
        old = known.get(key)
        if old is None:
            printer.event("ADDED", obj)
        elif _version(old) != _version(obj):
            printer.event("MODIFIED", obj)
    for key, obj in known.items():
        if key not in fresh:
            printer.event("DELETED", obj)
