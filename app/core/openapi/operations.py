"""One OpenAPI operation per route of the API server, with the status codes it really answers.

The API layer hands over its route table as :class:`Route` values (path, method, operation id,
media type); this module knows what each one does from its operation id. A kind's generated
routes (:mod:`app.api.routes`) are named ``<verb><Kind>[<Subresource>][ForAllNamespaces]``, so
their parameters, bodies, GVK extensions and codes come from the kind registry and from what
the handlers and admission raise. Any other route, including one added after this module was
written, still gets an operation: its path parameters, a JSON body for writes, and the error
codes every guarded handler can answer, each with the ``Status`` schema.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from app.core.kinds import BY_KIND, Kind
from app.core.openapi import examples
from app.core.openapi import schemas as s

JSON = "application/json"
MERGE = "application/merge-patch+json"
JSONPATCH = "application/json-patch+json"

# Every guarded request may be refused before its handler runs: a bad or missing token (401),
# no permission (403), over its fair share (429), the store unreachable (503); and a bug is a
# 500 ``Status``, never a framework error page.
GUARDED = (400, 401, 403, 404, 429, 500, 503)
WRITE = (409, 413, 415, 422, 504)
# What each verb of a kind's routes adds to GUARDED (admission's 422, optimistic concurrency's
# 409, the body limits' 413, a patch's content type 415, a write that outlived its deadline 504,
# a list or watch whose resourceVersion left the retained window 410, or one newer than the
# server has seen that stayed so past the wait 504, as Kubernetes answers "too large resource
# version").
BY_VERB: dict[str, tuple[int, ...]] = {
    "list": (410, 504),
    "read": (),
    "create": (409, 413, 422, 504),
    "replace": (409, 413, 422, 504),
    "patch": (409, 413, 415, 422, 504),
    "delete": (409, 422, 504),
}
# Routes that answer without a token (app.api.auth.ANONYMOUS_PATHS and the health checks).
ANONYMOUS = {"getVersion", "getHealth", "getLive", "getReady", "getMetrics"}
ANONYMOUS_PREFIXES = ("/openapi", "/schema")

REASONS = {
    200: "OK",
    201: "Created",
    202: "Accepted",
    400: "BadRequest: a malformed body, parameter or selector",
    401: "Unauthorized: no valid bearer token",
    403: "Forbidden: the principal may not do this",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "AlreadyExists or Conflict (the object changed since it was read)",
    410: "Expired: the resourceVersion is older than the retained window",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid: admission refused the object; details.causes names every bad field",
    429: "TooManyRequests: over the principal's fair share; retry after Retry-After seconds",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout (a write past its deadline, or a resourceVersion newer than the server's)",
}

_KIND_OP = re.compile(
    r"^(?P<verb>list|read|create|replace|patch|delete)(?P<kind>[A-Z][A-Za-z0-9]*?)"
    r"(?P<sub>Status)?(?P<all>ForAllNamespaces)?$"
)
_SCALE_OP = re.compile(r"^(?P<verb>read|replace|patch)(?P<kind>[A-Z][A-Za-z0-9]*)Scale$")
_PARAM = re.compile(r"\{([^}:]+)(?::[^}]*)?\}")


@dataclass(frozen=True)
class Route:
    """One method of one path as the server routes it (``path`` in OpenAPI's ``{name}`` form)."""

    path: str
    method: str  # lower case: get, post, put, patch, delete
    operation_id: str
    summary: str = ""
    tags: tuple[str, ...] = ()
    media_type: str = JSON
    status_code: int = 200


def kind_route(route: Route) -> tuple[str, Kind, bool, bool] | None:
    """(verb, kind, status subresource, all namespaces) for a kind's generated route."""
    m = _KIND_OP.match(route.operation_id)
    if m is None or m["kind"] not in BY_KIND:
        return None
    return m["verb"], BY_KIND[m["kind"]], bool(m["sub"]), bool(m["all"])


def scale_route(route: Route) -> tuple[str, Kind] | None:
    """(verb, kind) for a kind's ``scale`` subresource route (``app.api.scale``)."""
    m = _SCALE_OP.match(route.operation_id)
    if m is None or m["kind"] not in BY_KIND or not route.path.endswith("/scale"):
        return None
    return m["verb"], BY_KIND[m["kind"]]


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }


_PATH_EXAMPLES = {"namespace": examples.NAMESPACE, "name": examples.NAME}


def _path_params(path: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for n in _PARAM.findall(path):
        param: dict[str, Any] = {"name": n, "in": "path", "required": True}
        param["schema"] = {"type": "string"}
        if n in _PATH_EXAMPLES:
            param["example"] = _PATH_EXAMPLES[n]
        out.append(param)
    return out


_INT0 = {"type": "integer", "minimum": 0}
_BOOL = {"type": "boolean"}
_STR = {"type": "string"}
LIST_PARAMS = [
    _query("labelSelector", _STR, "Only objects whose labels match (=, !=, in, notin, exists)."),
    _query("fieldSelector", _STR, "Only objects whose indexed fields match (=, ==, !=)."),
    _query("limit", _INT0, "At most this many items; the rest through continue."),
    _query("continue", _STR, "The continue token of the previous page."),
    _query("resourceVersion", _STR, "List as of, or watch from, this revision."),
    _query("watch", _BOOL, "Stream changes (a WatchEvent per line) instead of listing."),
    _query("allowWatchBookmarks", _BOOL, "Send BOOKMARK events on a watch."),
    _query("timeoutSeconds", _INT0, "End a watch after this many seconds."),
    _query(
        "sendInitialEvents",
        _BOOL,
        "On a watch: the current objects first, then a BOOKMARK marking their end.",
    ),
]
_INCLUDE_OBJECT = _query(
    "includeObject",
    {"type": "string", "enum": ["None", "Metadata", "Object"]},
    "With a Table Accept header: what each row carries of its object.",
)
_DRY_RUN = _query(
    "dryRun", {"type": "string", "enum": ["All"]}, "Validate and answer without storing."
)
WRITE_PARAMS = [
    _DRY_RUN,
    _query("fieldManager", _STR, "The writer's name; accepted, not kept (no managedFields)."),
    _query(
        "fieldValidation",
        {"type": "string", "enum": ["Ignore", "Warn", "Strict"]},
        "Accepted for kubectl; the server always refuses unknown top-level fields (422) "
        "and keeps unknown fields inside spec and status.",
    ),
]
DELETE_PARAMS = [
    _DRY_RUN,
    _query("gracePeriodSeconds", _INT0, "Seconds a pod has to stop; 0 deletes at once."),
    _query(
        "propagationPolicy",
        {"type": "string", "enum": list(s.PROPAGATION_POLICIES)},
        "What happens to the dependents the object owns.",
    ),
]
MERGE_EXAMPLE = {"metadata": {"labels": {"example": "patched"}}}
JSON_PATCH_OPS = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["op", "path"],
        "properties": {
            "op": {"type": "string", "enum": ["add", "remove", "replace", "move", "copy", "test"]},
            "path": {"type": "string"},
            "from": {"type": "string"},
            "value": {},
        },
    },
}


def _body(content: dict[str, dict[str, Any]], required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {m: {"schema": sch} for m, sch in content.items()}}


RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before trying again (also in details.retryAfterSeconds)",
        "schema": {"type": "integer", "minimum": 0},
    }
}


def _errors(codes: tuple[int, ...]) -> dict[str, Any]:
    status = {JSON: {"schema": s.ref(s.STATUS)}}
    out: dict[str, Any] = {}
    for c in sorted(codes):
        out[str(c)] = {"description": REASONS.get(c, "Error"), "content": status}
        if c == 429:
            out[str(c)]["headers"] = RETRY_AFTER
    return out


def _ok(code: int, schema: dict[str, Any], media: str = JSON) -> dict[str, Any]:
    return {
        str(code): {"description": REASONS.get(code, "OK"), "content": {media: {"schema": schema}}}
    }


def kind_operation(
    route: Route, verb: str, kind: Kind, status: bool, every_ns: bool
) -> dict[str, Any]:
    """The operation of one of a kind's generated routes."""
    obj = s.ref(s.kind_schema_name(kind))
    op: dict[str, Any] = {
        "operationId": route.operation_id,
        "summary": route.summary,
        "tags": list(route.tags),
        "parameters": _path_params(route.path),
        s.GVK: s.gvk(kind.kind),
        "x-kubernetes-action": {"read": "get", "replace": "put"}.get(verb, verb),
    }
    responses: dict[str, Any]
    if verb == "list":
        op["parameters"] += [*LIST_PARAMS, _INCLUDE_OBJECT]
        responses = _ok(200, s.ref(s.list_schema_name(kind)))
        responses["200"]["description"] = (
            "The list; with watch=true, a stream of WatchEvent objects, one per line"
        )
    elif verb == "read":
        op["parameters"].append(_INCLUDE_OBJECT)
        responses = _ok(200, obj)
    elif verb in ("create", "replace"):
        op["parameters"] += WRITE_PARAMS
        op["requestBody"] = _body({JSON: obj})
        sample = None if status else examples.example(kind)
        if sample is not None:
            op["requestBody"]["content"][JSON]["example"] = sample
        responses = {**_ok(200, obj), **_ok(201, obj)}
    elif verb == "patch":
        op["parameters"] += WRITE_PARAMS
        op["requestBody"] = _body(
            {MERGE: {"type": "object", s.PRESERVE: True}, JSONPATCH: JSON_PATCH_OPS}
        )
        op["requestBody"]["content"][MERGE]["example"] = MERGE_EXAMPLE
        responses = _ok(200, obj)
    else:  # delete
        op["parameters"] += DELETE_PARAMS
        op["requestBody"] = _body({JSON: s.ref(s.DELETE_OPTIONS)}, required=False)
        gone = {"anyOf": [obj, s.ref(s.STATUS)]}
        responses = {**_ok(200, gone), **_ok(202, obj)}
        responses["200"]["description"] = (
            "The object, still terminating (finalizers or a grace period), or a Success Status "
            "once it is gone"
        )
    del every_ns  # the same answers as the namespaced route
    op["responses"] = {**responses, **_errors(GUARDED + BY_VERB[verb])}
    return op


def scale_operation(route: Route, verb: str, kind: Kind) -> dict[str, Any]:
    """A ``scale`` subresource operation: an ``autoscaling/v1`` ``Scale`` in and out, written
    as a patch of the object, so the object's own codes (``kubectl scale`` reads these)."""
    scale = s.ref(s.SCALE)
    op: dict[str, Any] = {
        "operationId": route.operation_id,
        "summary": route.summary,
        "tags": list(route.tags),
        "parameters": _path_params(route.path),
        s.GVK: s.gvk("Scale", "autoscaling", "v1"),
        "x-kubernetes-action": {"read": "get", "replace": "put"}.get(verb, verb),
    }
    if verb == "replace":
        op["parameters"] += WRITE_PARAMS
        op["requestBody"] = _body({JSON: scale})
    elif verb == "patch":
        op["parameters"] += WRITE_PARAMS
        op["requestBody"] = _body(
            {MERGE: {"type": "object", s.PRESERVE: True}, JSONPATCH: JSON_PATCH_OPS}
        )
    del kind  # the same Scale whatever the kind
    op["responses"] = {**_ok(200, scale), **_errors(GUARDED + BY_VERB[verb])}
    return op


def generic_operation(route: Route) -> dict[str, Any]:
    """The operation of a route this module has no specific knowledge of."""
    anonymous = route.operation_id in ANONYMOUS or route.path.startswith(ANONYMOUS_PREFIXES)
    codes: tuple[int, ...] = GUARDED
    if anonymous:
        codes = (404, 500) if "{" in route.path else (500,)
    if route.method in ("post", "put", "patch"):
        codes += WRITE
    elif route.method == "delete":
        codes += (409, 422, 504)
    if route.operation_id == "getReady":
        codes += (503,)
    op: dict[str, Any] = {
        "operationId": route.operation_id,
        "summary": route.summary,
        "tags": list(route.tags),
        "parameters": _path_params(route.path),
    }
    if route.method in ("post", "put", "patch"):
        op["requestBody"] = _body({JSON: s.ref(s.ANY_OBJECT)}, required=False)
    text = route.media_type.startswith("text/")
    answer = {"type": "string"} if text else s.ref(s.ANY_OBJECT)
    op["responses"] = {
        **_ok(route.status_code, answer, route.media_type),
        **_errors(tuple(set(codes))),
    }
    if anonymous:
        op["security"] = []
    return op


# What the other routes accept and answer beyond the generic operation.
EXTRA_PARAMS: dict[str, list[dict[str, Any]]] = {
    "listTokens": [_query("user", _STR, "Only the tokens of this user.")],
    "readPodLog": [
        _query("container", _STR, "The container; optional when the pod has one."),
        _query("follow", _BOOL, "Stream the log as it grows."),
        _query("previous", _BOOL, "The previous, terminated instance of the container."),
        _query("tailLines", _INT0, "Only the last lines."),
    ],
}
EXTRA_CODES: dict[str, tuple[int, ...]] = {
    "readPodLog": (422,),
    "createPodEviction": (200, 201),
}
TEXT_ANSWERS = {"readPodLog"}


def operation(route: Route) -> dict[str, Any]:
    known = kind_route(route)
    if known is not None:
        return kind_operation(route, *known)
    scaled = scale_route(route)
    if scaled is not None:
        return scale_operation(route, *scaled)
    op = generic_operation(route)
    op["parameters"] += EXTRA_PARAMS.get(route.operation_id, [])
    if route.operation_id in TEXT_ANSWERS:
        op["responses"][str(route.status_code)]["content"] = {"text/plain": {"schema": _STR}}
    for code in EXTRA_CODES.get(route.operation_id, ()):
        key = str(code)
        if key in op["responses"]:
            continue
        if code < 400:
            op["responses"].update(_ok(code, s.ref(s.ANY_OBJECT)))
        else:
            op["responses"].update(_errors((code,)))
    op["responses"] = dict(sorted(op["responses"].items()))
    return op
