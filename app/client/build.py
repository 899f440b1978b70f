"""Every request a Quaymaster client sends, as a value: method, path, query and encoded body.

The CLI, the node agent and the hollow nodes all speak to the same REST API; the path of a
kind (namespaced or cluster-scoped, with a subresource such as ``status``, ``eviction`` or
``log``), the metrics group's paths, the query of a paged list or a watch and the JSON body
are built here, once, and handed to whichever transport the caller has (``app.client.sync``
on httpx, ``app.client.aio`` over any async transport). Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict, Unpack
from urllib.parse import quote, urlencode

import msgspec

from app.core.kinds import API_VERSION, BY_KIND, Kind

Obj = dict[str, Any]
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
METRICS = "/apis/metrics.quaymaster.io/v1"
DEFAULT_LIMIT = 500
POD = BY_KIND["Pod"]
NODE = BY_KIND["Node"]

encode = msgspec.json.Encoder().encode


@dataclass(frozen=True)
class Request:
    """One HTTP request; ``body`` is already encoded (``None``: no body)."""

    method: str
    path: str
    params: tuple[tuple[str, str], ...] = ()
    body: bytes | None = None
    content_type: str = JSON

    @property
    def target(self) -> str:
        """The request target, path and query, for transports that write HTTP themselves."""
        return f"{self.path}?{urlencode(self.params)}" if self.params else self.path


def _seg(value: str) -> str:
    return quote(value, safe="")


def path(kind: Kind, namespace: str | None, name: str | None = None, sub: str = "") -> str:
    """The URL path of a collection or object; ``namespace=None`` for a namespaced kind
    means every namespace, and is ignored for a cluster-scoped kind."""
    parts = ["/apis", API_VERSION]
    if kind.namespaced and namespace is not None:
        parts += ["namespaces", _seg(namespace)]
    parts.append(kind.plural)
    if name is not None:
        parts.append(_seg(name))
        if sub:
            parts.append(sub)
    return "/".join(parts)


def metrics_path(
    plural: str, namespace: str | None = None, name: str | None = None, sub: str = ""
) -> str:
    """A path of the metrics group (``app.api.usage``): ``nodes`` or ``pods``, optionally in a
    namespace, one object, a subresource (a node's ``samples``)."""
    parts = [METRICS]
    if namespace is not None:
        parts += ["namespaces", _seg(namespace)]
    parts.append(plural)
    if name is not None:
        parts.append(_seg(name))
        if sub:
            parts.append(sub)
    return "/".join(parts)


def _params(**values: str | None) -> tuple[tuple[str, str], ...]:
    return tuple((k, v) for k, v in values.items() if v)


def _with_body(method: str, where: str, body: Any, content_type: str = JSON) -> Request:
    return Request(method, where, body=encode(body), content_type=content_type)


def get(kind: Kind, namespace: str | None, name: str, sub: str = "") -> Request:
    return Request("GET", path(kind, namespace, name, sub))


def create(kind: Kind, namespace: str | None, body: Obj) -> Request:
    return _with_body("POST", path(kind, namespace), body)


def replace(kind: Kind, namespace: str | None, body: Obj, sub: str = "") -> Request:
    """A PUT of ``body`` (named by its ``metadata.name``), conditional on its
    ``metadata.resourceVersion`` when it carries one."""
    return _with_body("PUT", path(kind, namespace, str(body["metadata"]["name"]), sub), body)


def patch(
    kind: Kind, namespace: str | None, name: str, body: Any, content_type: str = MERGE_PATCH
) -> Request:
    return _with_body("PATCH", path(kind, namespace, name), body, content_type)


class DeleteOptions(TypedDict, total=False):
    """What a DELETE may ask: ``uid`` deletes only if the object is still that one."""

    propagation_policy: str | None
    grace_seconds: int | None
    uid: str | None


class ListOptions(TypedDict, total=False):
    label_selector: str | None
    field_selector: str | None
    limit: int


def delete(
    kind: Kind, namespace: str | None, name: str, **options: Unpack[DeleteOptions]
) -> Request:
    """A DELETE; the options, if any, go in a ``DeleteOptions`` body."""
    where = path(kind, namespace, name)
    body = delete_options(**options)
    return _with_body("DELETE", where, body) if body else Request("DELETE", where)


def delete_options(**options: Unpack[DeleteOptions]) -> Obj | None:
    body: Obj = {}
    if policy := options.get("propagation_policy"):
        body["propagationPolicy"] = policy
    if (grace := options.get("grace_seconds")) is not None:
        body["gracePeriodSeconds"] = grace
    if uid := options.get("uid"):
        body["preconditions"] = {"uid": uid}
    return {"kind": "DeleteOptions", "apiVersion": "v1", **body} if body else None


def list_page(
    kind: Kind, namespace: str | None, token: str | None = None, **options: Unpack[ListOptions]
) -> Request:
    """One page of a list; ``token`` is the previous page's ``metadata.continue``."""
    query = _params(
        limit=str(options.get("limit", DEFAULT_LIMIT)),
        labelSelector=options.get("label_selector"),
        fieldSelector=options.get("field_selector"),
        **{"continue": token},
    )
    return Request("GET", path(kind, namespace), query)


class WatchOptions(TypedDict, total=False):
    label_selector: str | None
    field_selector: str | None
    timeout_seconds: int | None  # the server ends the stream after this long


def watch(
    kind: Kind, namespace: str | None, resource_version: str, **options: Unpack[WatchOptions]
) -> Request:
    """A watch from ``resource_version`` (empty: from now), with bookmarks."""
    timeout = options.get("timeout_seconds")
    query = _params(
        watch="1",
        allowWatchBookmarks="true",
        resourceVersion=resource_version,
        labelSelector=options.get("label_selector"),
        fieldSelector=options.get("field_selector"),
        timeoutSeconds=str(timeout) if timeout is not None else None,
    )
    return Request("GET", path(kind, namespace), query)


def evict(namespace: str, name: str, options: Obj | None = None) -> Request:
    """The ``eviction`` subresource: delete the pod if its disruption budgets allow."""
    body: Obj = {"kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
    if options:
        body["deleteOptions"] = options
    return _with_body("POST", path(POD, namespace, name, "eviction"), body)


def drain(node: str) -> Request:
    """One pass of the ``drain`` subresource: cordon the node, evict what may go."""
    return Request("POST", path(NODE, None, node, "drain"))


def log(namespace: str, pod: str, params: dict[str, str]) -> Request:
    """The ``log`` subresource (``container``, ``follow``, ``tailLines``, ``previous``)."""
    return Request("GET", path(POD, namespace, pod, "log"), tuple(params.items()))


def usage_sample(node: str, body: Obj) -> Request:
    """A node agent's usage report (``POST .../nodes/{node}/samples``)."""
    return _with_body("POST", metrics_path("nodes", None, node, "samples"), body)


def metrics(plural: str, namespace: str | None = None, name: str | None = None) -> Request:
    return Request("GET", metrics_path(plural, namespace, name))


def version() -> Request:
    return Request("GET", "/version")


AUDIT = "/apis/audit.quaymaster.io/v1"


def history(namespace: str | None, **query: str | None) -> Request:
    """A page of the change history (``app.api.history``): a namespace's, or the cluster's
    (``namespace=None``); ``query`` holds its filters and ``continue``."""
    where = f"{AUDIT}/namespaces/{_seg(namespace)}/history" if namespace else f"{AUDIT}/history"
    return Request("GET", where, _params(**query))


AUTHN = "/apis/authentication.quaymaster.io/v1"


def node_credential(node: str) -> Request:
    """An agent's join: its bootstrap token (the bearer) exchanged for its node's credential."""
    return _with_body("POST", f"{AUTHN}/nodecredentials", {"spec": {"nodeName": node}})


def token_review(token: str) -> Request:
    """Who ``token`` is, as the API server knows it (an agent's log server asks)."""
    return _with_body("POST", f"{AUTHN}/tokenreviews", {"spec": {"token": token}})


def bootstrap_token(spec: Obj) -> Request:
    """A new bootstrap token (``ttlSeconds``, ``uses``, ``nodeName``, ``description``)."""
    return _with_body("POST", f"{AUTHN}/bootstraptokens", {"spec": spec})


def token_create(spec: Obj) -> Request:
    """A new token (``authentication.quaymaster.io/v1``); the answer shows it once."""
    return _with_body(
        "POST", f"{AUTHN}/tokens", {"apiVersion": "authentication.quaymaster.io/v1",
                                    "kind": "Token", "spec": spec},
    )  # fmt: skip


def token_list(user: str | None = None) -> Request:
    return Request("GET", f"{AUTHN}/tokens", _params(user=user))


def token_revoke(name: str) -> Request:
    return Request("DELETE", f"{AUTHN}/tokens/{_seg(name)}")
