"""The node agent's REST client: the only way the agent reaches the control plane.

The agent may not import the store, the stream or the CLI (import-linter enforces it), so this
is a small client of its own: bearer token, JSON bodies, ``kind: Status`` error bodies turned
back into the ``app.core.errors`` classes (so callers catch ``Conflict`` or ``Gone`` rather
than inspect HTTP codes), and watch streams decoded line by line. A broken or refused
connection is :class:`Unreachable`, which every caller treats as "keep the last known state
and try again later".
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Generator
from typing import Any

import httpx

from app.core import errors
from app.core.errors import StatusError
from app.core.kinds import API_VERSION, BY_KIND, Kind

Obj = dict[str, Any]
NODE = BY_KIND["Node"]
LEASE = BY_KIND["Lease"]
POD = BY_KIND["Pod"]
NAMESPACE = BY_KIND["Namespace"]
USER_AGENT = "quaymaster-agent/1"


class Unreachable(Exception):
    """The connection failed or broke before a complete response arrived."""


def _error(resp: httpx.Response) -> StatusError:
    try:
        body: Any = resp.json()
    except ValueError:
        body = {"message": resp.text.strip()[:500]}
    return errors.from_status(body, resp.status_code)


def path(kind: Kind, namespace: str | None, name: str | None = None, sub: str = "") -> str:
    """URL path of a collection or object; ``namespace=None`` means every namespace."""
    parts = ["/apis", API_VERSION]
    if kind.namespaced and namespace is not None:
        parts += ["namespaces", namespace]
    parts.append(kind.plural)
    if name is not None:
        parts.append(name)
        if sub:
            parts.append(sub)
    return "/".join(parts)


class AgentApi:
    """A synchronous client of one API server. Not shared between threads that stream:
    each watching thread should hold its own (``clone()``)."""

    def __init__(
        self,
        server: str,
        token: str | None,
        *,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.server = server.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._transport = transport
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(
            base_url=self.server, headers=headers, timeout=timeout, transport=transport
        )

    def clone(self) -> AgentApi:
        return AgentApi(self.server, self.token, timeout=self.timeout, transport=self._transport)

    def close(self) -> None:
        self._http.close()

    def request(
        self,
        method: str,
        url: str,
        *,
        params: dict[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        """One request; the decoded JSON, or a ``StatusError`` / :class:`Unreachable`."""
        headers = {"Content-Type": content_type} if body is not None else {}
        content = json.dumps(body).encode() if body is not None else None
        try:
            resp = self._http.request(method, url, params=params, content=content, headers=headers)
        except httpx.TransportError as exc:
            raise Unreachable(f"{method} {self.server}{url}: {exc}") from exc
        if resp.status_code >= 400:
            raise _error(resp)
        return resp.json() if resp.content else {}

    def get(self, kind: Kind, namespace: str | None, name: str) -> Obj:
        obj: Obj = self.request("GET", path(kind, namespace, name))
        return obj

    def create(self, kind: Kind, namespace: str | None, body: Obj) -> Obj:
        obj: Obj = self.request("POST", path(kind, namespace), body=body)
        return obj

    def replace(self, kind: Kind, namespace: str | None, body: Obj, sub: str = "") -> Obj:
        """PUT ``body``; conditional on its ``metadata.resourceVersion`` (required)."""
        name = str(body["metadata"]["name"])
        obj: Obj = self.request("PUT", path(kind, namespace, name, sub), body=body)
        return obj

    def delete(self, kind: Kind, namespace: str | None, name: str, grace: int | None = None) -> Obj:
        params = {"gracePeriodSeconds": str(grace)} if grace is not None else None
        obj: Obj = self.request("DELETE", path(kind, namespace, name), params=params)
        return obj

    def list(
        self, kind: Kind, namespace: str | None, *, field_selector: str = "", limit: int = 500
    ) -> tuple[list[Obj], str]:
        """Every matching object across pages, and the first page's resourceVersion (the
        version to watch from)."""
        params = {"limit": str(limit)}
        if field_selector:
            params["fieldSelector"] = field_selector
        items: list[Obj] = []
        revision = ""
        while True:
            page = self.request("GET", path(kind, namespace), params=params)
            meta = page.get("metadata") or {}
            revision = revision or str(meta.get("resourceVersion") or "")
            items += [i for i in page.get("items") or [] if isinstance(i, dict)]
            token = meta.get("continue")
            if not token:
                return items, revision
            params["continue"] = str(token)

    def watch(
        self,
        kind: Kind,
        namespace: str | None,
        resource_version: str,
        *,
        field_selector: str = "",
        timeout_seconds: int = 60,
    ) -> Generator[Obj, None, None]:
        """Watch events (bookmarks included) until the server ends the stream; an ``ERROR``
        event is raised as its ``StatusError`` (``Gone``: the version is too old, relist)."""
        params = {
            "watch": "1",
            "allowWatchBookmarks": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(timeout_seconds),
        }
        if field_selector:
            params["fieldSelector"] = field_selector
        # Bookmarks arrive every few seconds, so a read stalled far longer means a dead peer.
        timeout = httpx.Timeout(self.timeout, read=max(self.timeout, 30.0))
        url = path(kind, namespace)
        try:
            with self._http.stream("GET", url, params=params, timeout=timeout) as resp:
                if resp.status_code >= 400:
                    resp.read()
                    raise _error(resp)
                yield from errors.watch_events(resp.iter_lines(), gone_code=410)
        except errors.MalformedEvent as exc:
            raise Unreachable(str(exc)) from exc
        except httpx.TransportError as exc:
            raise Unreachable(f"watch of {self.server}{url} broke: {exc}") from exc

    def ensure_namespace(self, name: str) -> None:
        """Create the namespace unless it exists (the agent's leases live in their own)."""
        try:
            self.get(NAMESPACE, None, name)
        except errors.NotFound:
            with contextlib.suppress(errors.AlreadyExists):
                self.create(NAMESPACE, None, {"metadata": {"name": name}})
