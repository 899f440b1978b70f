"""The API server's OpenAPI v3 document, built from its route table and the kind registry.

``document`` turns the routes the server really has (:class:`Route`, handed over by
:mod:`app.api.openapi`) into one OpenAPI 3.0 document; ``split`` cuts it the way Kubernetes
serves ``/openapi/v3``: an index naming one document per group-version (``apis/<group>/<v>``)
and per other top-level path (``version``, ``healthz``…), each with the schemas it uses.
kubectl reads the index, then the group-version documents, to learn that a kind's ``PATCH``
accepts ``fieldValidation`` (so it validates on the server) and which patch types it takes.
Pure: no I/O, no framework.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from typing import Any

from app.core.kinds import KINDS, Kind
from app.core.openapi import schemas
from app.core.openapi.operations import Route, operation

__all__ = ["Route", "document", "document_hash", "index", "index_key", "split"]

_GV = re.compile(r"^/apis/(?P<group>[^/{]+)/(?P<version>[^/{]+)(?:/|$)")
_CORE = re.compile(r"^/api/(?P<version>[^/{]+)(?:/|$)")
_REF = re.compile(r'"#/components/schemas/([^"]+)"')


def document(
    routes: Iterable[Route], title: str, version: str, kinds: tuple[Kind, ...] = KINDS
) -> dict[str, Any]:
    """The whole document: every route's operation and every schema."""
    paths: dict[str, dict[str, Any]] = {}
    seen: dict[str, int] = {}
    for route in sorted(routes, key=lambda r: (r.path, r.method)):
        op = operation(route)
        # One handler may serve several paths; operation ids must stay unique.
        n = seen[op["operationId"]] = seen.get(op["operationId"], 0) + 1
        if n > 1:
            op["operationId"] += str(n)
        paths.setdefault(route.path, {})[route.method] = op
    return {
        "openapi": "3.0.0",
        "info": {
            "title": title,
            "version": version,
            "description": "Kubernetes-style API of the quaymaster.io group. Every error is a "
            "kind: Status object.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas.components(kinds),
            "securitySchemes": {"BearerToken": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"BearerToken": []}],
    }


def index_key(path: str) -> str:
    """The ``/openapi/v3`` document a path belongs to: ``apis/<group>/<version>`` for a
    group-version's paths (``api/<version>`` for the core group's), ``apis`` for the group
    list and a group's versions, else the path's first segment."""
    m = _GV.match(path)
    if m:
        return f"apis/{m['group']}/{m['version']}"
    core = _CORE.match(path)
    if core:
        return f"api/{core['version']}"
    first = path.strip("/").split("/", 1)[0]
    return first or "root"


def _used_schemas(paths: dict[str, Any], all_schemas: dict[str, Any]) -> dict[str, Any]:
    """The schemas ``paths`` refer to, directly or through other schemas."""
    todo = set(_REF.findall(json.dumps(paths)))
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or name not in all_schemas:
            continue
        seen.add(name)
        todo |= set(_REF.findall(json.dumps(all_schemas[name])))
    return {name: all_schemas[name] for name in sorted(seen)}


def split(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """One document per index key, each carrying only the schemas its paths use."""
    groups: dict[str, dict[str, Any]] = {}
    for path, item in doc["paths"].items():
        groups.setdefault(index_key(path), {})[path] = item
    out: dict[str, dict[str, Any]] = {}
    for key, paths in sorted(groups.items()):
        part = {**doc, "paths": paths}
        part["components"] = {
            **doc["components"],
            "schemas": _used_schemas(paths, doc["components"]["schemas"]),
        }
        out[key] = part
    return out


def document_hash(doc: dict[str, Any]) -> str:
    """A stable content hash, as Kubernetes puts in the index's ``serverRelativeURL``."""
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha512(text.encode()).hexdigest()[:64].upper()


def index(parts: dict[str, dict[str, Any]], prefix: str = "/openapi/v3") -> dict[str, Any]:
    return {
        "paths": {
            key: {"serverRelativeURL": f"{prefix}/{key}?hash={document_hash(part)}"}
            for key, part in parts.items()
        }
    }
