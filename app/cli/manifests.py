"""Reading manifests and computing what ``apply`` should send.

``qm apply`` and ``qm delete -f`` accept files, directories and stdin holding YAML or JSON,
one or many documents, possibly wrapped in a ``kind: List``. This module turns all of those
into a flat sequence of objects (each remembering where it came from, for error messages) and
holds the pure create-or-update merge, so its "unchanged" detection is testable on its own.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml

from app.core.kinds import API_VERSION, Kind, resolve

Obj = dict[str, Any]

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
# Top-level fields that identify or are owned by the server, never taken from a manifest.
_SERVER_OWNED = ("apiVersion", "kind", "metadata", "status")
_APPLIED_METADATA = ("labels", "annotations")


class ManifestError(Exception):
    """A manifest source or document that cannot be used; the message names where."""


@dataclass(frozen=True)
class Manifest:
    source: str
    where: str
    obj: Obj


@dataclass(frozen=True)
class Target:
    """The resolved identity of a manifest: which kind, name and namespace it addresses."""

    kind: Kind
    name: str
    namespace: str | None


def _documents(text: str, source: str) -> list[Any]:
    stripped = text.lstrip()
    looks_json = source.endswith(".json") or stripped.startswith(("{", "["))
    if looks_json:
        try:
            data = json.loads(text)
        except ValueError as exc:
            if source.endswith(".json"):
                raise ManifestError(f"{source}: invalid JSON: {exc}") from exc
        else:
            return data if isinstance(data, list) else [data]
    try:
        return list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        detail = str(exc).replace("\n", " ")
        raise ManifestError(f"{source}: invalid YAML: {detail}") from exc


def _expand(doc: Obj, source: str, where: str) -> list[Manifest]:
    kind = doc.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and "items" in doc:
        items = doc.get("items")
        if items is None:
            return []
        if not isinstance(items, list):
            raise ManifestError(f"{source}: {where}: 'items' of a {kind} must be a list")
        out = []
        for i, item in enumerate(items, start=1):
            if not isinstance(item, dict):
                raise ManifestError(
                    f"{source}: {where}, item {i}: expected a mapping, got {type(item).__name__}"
                )
            out.append(Manifest(source, f"{where}, item {i}", item))
        return out
    return [Manifest(source, where, doc)]


def parse_documents(text: str, source: str = "<stdin>") -> list[Manifest]:
    """Every object in one source. Empty documents are skipped; a syntax error or a document
    that is not a mapping makes the whole source unusable."""
    manifests: list[Manifest] = []
    for index, doc in enumerate(_documents(text, source), start=1):
        if doc is None:
            continue
        where = f"document {index}"
        if not isinstance(doc, dict):
            raise ManifestError(
                f"{source}: {where}: expected a mapping with apiVersion, kind and metadata, "
                f"got {type(doc).__name__}"
            )
        manifests.extend(_expand(doc, source, where))
    return manifests


def expand_paths(paths: Iterable[str]) -> list[str]:
    """Files as given, directories replaced by their manifest files in name order."""
    out: list[str] = []
    for raw in paths:
        if raw == "-":
            out.append(raw)
            continue
        path = Path(raw)
        if path.is_dir():
            out += [
                str(p)
                for p in sorted(path.iterdir())
                if p.is_file() and p.suffix.lower() in MANIFEST_SUFFIXES
            ]
        else:
            out.append(raw)
    return out


def load_source(path: str, stdin: TextIO) -> list[Manifest]:
    """Read and parse one file (or ``-`` for stdin)."""
    if path == "-":
        return parse_documents(stdin.read(), "<stdin>")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ManifestError(f"{path}: no such file or directory") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path}: cannot read: {exc}") from exc
    return parse_documents(text, path)


def target_of(manifest: Manifest, default_namespace: str) -> Target:
    """Resolve kind, name and namespace, raising ``ManifestError`` for anything missing."""
    obj = manifest.obj
    label = f"{manifest.source}: {manifest.where}"
    kind_name = obj.get("kind")
    if not isinstance(kind_name, str) or not kind_name:
        raise ManifestError(f"{label}: 'kind' is required")
    kind = resolve(kind_name)
    if kind is None:
        raise ManifestError(f"{label}: unknown kind {kind_name!r}")
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise ManifestError(f"{label}: 'metadata' with a 'name' is required")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ManifestError(f"{label}: 'metadata.name' is required")
    namespace = None
    if kind.namespaced:
        given = meta.get("namespace")
        namespace = given if isinstance(given, str) and given else default_namespace
    return Target(kind, name, namespace)


def prepare_create(manifest: Obj, target: Target) -> Obj:
    """The body to POST: the manifest with apiVersion, kind and namespace filled in."""
    body = copy.deepcopy(manifest)
    body.setdefault("apiVersion", API_VERSION)
    body["kind"] = target.kind.kind
    meta = body.setdefault("metadata", {})
    if target.namespace is not None:
        meta["namespace"] = target.namespace
    return body


def merge_for_update(server: Obj, manifest: Obj) -> Obj:
    """The object to PUT: the server's copy with the manifest's labels, annotations and every
    top-level desired-state field replaced; status, uid, resourceVersion etc. are kept."""
    merged = copy.deepcopy(server)
    meta = merged.setdefault("metadata", {})
    wanted_meta = manifest.get("metadata") or {}
    for key in _APPLIED_METADATA:
        value = wanted_meta.get(key)
        if value:
            meta[key] = copy.deepcopy(value)
        else:
            meta.pop(key, None)
    for key in [k for k in merged if k not in _SERVER_OWNED]:
        if key not in manifest:
            del merged[key]
    for key, value in manifest.items():
        if key not in _SERVER_OWNED:
            merged[key] = copy.deepcopy(value)
    return merged


def _normalized(obj: Obj) -> Obj:
    out = dict(obj)
    meta = dict(out.get("metadata") or {})
    for key in _APPLIED_METADATA:
        if not meta.get(key):
            meta.pop(key, None)
    out["metadata"] = meta
    return out


def is_unchanged(server: Obj, merged: Obj) -> bool:
    """Whether sending ``merged`` would change nothing (empty label/annotation maps and absent
    ones count as the same)."""
    return _normalized(server) == _normalized(merged)


def describe_target(target: Target) -> str:
    return f"{target.kind.singular}/{target.name}"
