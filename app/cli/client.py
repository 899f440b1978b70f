"""HTTP access to the Quaymaster REST API for the CLI.

URL layout, authentication, list paging and watch-stream decoding live here, and ``Status``
error bodies are turned back into the same exception classes the server raised, so commands
can catch ``NotFound`` or ``Conflict`` rather than inspect HTTP codes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from types import TracebackType
from typing import Any

import httpx

from app.core import errors
from app.core.errors import StatusError
from app.core.kinds import API_VERSION, Kind

Obj = dict[str, Any]

try:
    CLIENT_VERSION = package_version("quaymaster")
except PackageNotFoundError:
    CLIENT_VERSION = "0.0.0"

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class ServerUnreachable(Exception):
    """The connection failed or broke before a complete response arrived."""


def _error_from_response(resp: httpx.Response) -> StatusError:
    try:
        body: Any = resp.json()
    except ValueError:
        body = None
    return errors.from_status(body, resp.status_code, "" if body is not None else resp.text)


class ApiClient:
    """A synchronous client for one server, authenticated with a bearer token."""

    def __init__(
        self,
        server: str,
        token: str | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 30.0,
    ) -> None:
        headers = {"Accept": "application/json", "User-Agent": f"qm/{CLIENT_VERSION}"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.server = server.rstrip("/")
        self.timeout = timeout
        self._http = httpx.Client(
            base_url=self.server, headers=headers, transport=transport, timeout=timeout
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @staticmethod
    def path(
        kind: Kind, namespace: str | None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The URL path of a collection or object; ``namespace=None`` for a namespaced kind
        means every namespace."""
        parts = ["/apis", API_VERSION]
        if kind.namespaced and namespace is not None:
            parts += ["namespaces", namespace]
        parts.append(kind.plural)
        if name is not None:
            parts.append(name)
            if subresource:
                parts.append(subresource)
        return "/".join(parts)

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        """Send one request; return the decoded JSON (or text) or raise a ``StatusError``."""
        headers = {}
        content = None
        if body is not None:
            headers["Content-Type"] = content_type
            content = json.dumps(body).encode()
        try:
            resp = self._http.request(method, path, params=params, content=content, headers=headers)
        except httpx.TransportError as exc:
            raise ServerUnreachable(
                f"unable to connect to the server at {self.server}: {exc}"
            ) from exc
        if resp.status_code >= 400:
            raise _error_from_response(resp)
        if not resp.content:
            return {}
        try:
            return resp.json()
        except ValueError:
            return resp.text

    def get(self, kind: Kind, namespace: str | None, name: str) -> Obj:
        obj: Obj = self.request("GET", self.path(kind, namespace, name))
        return obj

    def list(
        self,
        kind: Kind,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 500,
    ) -> Obj:
        """Every matching object, following ``continue`` tokens across pages. The result's
        ``metadata.resourceVersion`` is the first page's, the version to watch from."""
        params: dict[str, str] = {"limit": str(limit)}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        items: list[Obj] = []
        first: Obj | None = None
        seen: set[str] = set()
        while True:
            page = self.request("GET", self.path(kind, namespace), params=params)
            if not isinstance(page, dict):
                raise StatusError("the server returned a list that is not a JSON object")
            meta = page.get("metadata") or {}
            if first is None:
                first = page
            for item in page.get("items") or []:
                if isinstance(item, dict):
                    item.setdefault("apiVersion", API_VERSION)
                    item.setdefault("kind", kind.kind)
                    items.append(item)
            token = meta.get("continue")
            if not token:
                break
            if token in seen:
                raise StatusError("the server repeated a continue token while paging a list")
            seen.add(token)
            params["continue"] = str(token)
        assert first is not None
        first_meta = first.get("metadata") or {}
        return {
            "kind": first.get("kind") or kind.list_kind,
            "apiVersion": first.get("apiVersion") or API_VERSION,
            "metadata": {"resourceVersion": str(first_meta.get("resourceVersion") or "")},
            "items": items,
        }

    def watch(
        self,
        kind: Kind,
        namespace: str | None,
        resource_version: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Iterator[Obj]:
        """Yield watch events until the server ends the stream. An ``ERROR`` event is raised
        as its ``StatusError`` (``Gone`` when the version is too old: relist)."""
        params = {"watch": "1", "allowWatchBookmarks": "true"}
        if resource_version:
            params["resourceVersion"] = resource_version
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        timeout = httpx.Timeout(self.timeout, read=None)
        try:
            with self._http.stream(
                "GET", self.path(kind, namespace), params=params, timeout=timeout
            ) as resp:
                if resp.status_code >= 400:
                    resp.read()
                    raise _error_from_response(resp)
                yield from errors.watch_events(resp.iter_lines())
        except errors.MalformedEvent as exc:
            raise ServerUnreachable(str(exc)) from exc
        except httpx.TransportError as exc:
            raise ServerUnreachable(f"watch stream from {self.server} broke: {exc}") from exc

    def create(self, kind: Kind, namespace: str | None, body: Obj) -> Obj:
        obj: Obj = self.request("POST", self.path(kind, namespace), body=body)
        return obj

    def replace(self, kind: Kind, namespace: str | None, name: str, body: Obj) -> Obj:
        obj: Obj = self.request("PUT", self.path(kind, namespace, name), body=body)
        return obj

    def patch(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        patch: Any,
        content_type: str = MERGE_PATCH,
    ) -> Obj:
        obj: Obj = self.request(
            "PATCH", self.path(kind, namespace, name), body=patch, content_type=content_type
        )
        return obj

    def delete(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        propagation_policy: str | None = None,
    ) -> Obj:
        """Delete one object; returns the success ``Status`` or the now-terminating object."""
        body = None
        if propagation_policy:
            body = {
                "kind": "DeleteOptions",
                "apiVersion": "v1",
                "propagationPolicy": propagation_policy,
            }
        obj: Obj = self.request("DELETE", self.path(kind, namespace, name), body=body)
        return obj

    def version(self) -> Obj:
        obj: Obj = self.request("GET", "/version")
        return obj
