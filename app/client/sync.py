"""The synchronous REST client on httpx: the CLI's (``app.cli.client``) and the node agent's
(``agent.api``).

It only moves the requests :mod:`app.client.build` describes and hands the answers to
:mod:`app.client.decode`; what both callers need beyond single requests is here too: a paged
list, a watch stream and a raw byte stream (``qm logs``). Not shared between threads that
stream: each watching thread holds its own (:meth:`RestClient.clone`).
"""

from __future__ import annotations

import builtins
import contextlib
import ssl
from collections.abc import Generator, Iterator
from typing import Any, Self, Unpack

import httpx

from app.core.kinds import Kind

from . import build, decode
from .decode import Unreachable
from .verbs import Verbs

Obj = dict[str, Any]


class RestClient(Verbs[Obj]):
    """A client of one API server, authenticated with a bearer token."""

    user_agent = "quaymaster-client/1"
    default_timeout = 30.0
    watch_read_timeout: float | None = None  # how long a silent watch is trusted; None: for ever

    def __init__(
        self,
        server: str,
        token: str | None = None,
        *,
        timeout: float | None = None,
        transport: httpx.BaseTransport | None = None,
        ca_file: str | None = None,
    ) -> None:
        self.server = server.rstrip("/")
        self.token, self._transport, self.ca_file = token, transport, ca_file
        self.timeout = timeout = self.default_timeout if timeout is None else timeout
        headers = {"Accept": "application/json", "User-Agent": self.user_agent}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        # An https server is checked against ca_file (the cluster's CA) when given.
        verify = ssl.create_default_context(cafile=ca_file) if ca_file else True
        self._http = httpx.Client(
            base_url=self.server, headers=headers, timeout=timeout, transport=transport,
            verify=verify,
        )  # fmt: skip

    def clone(self) -> Self:
        """Another client of the same server with its own connections."""
        return type(self)(
            self.server, self.token, timeout=self.timeout, transport=self._transport,
            ca_file=self.ca_file,
        )  # fmt: skip

    def close(self) -> None:
        self._http.close()

    def send(self, request: build.Request) -> Any:
        """One request; the decoded answer, or a ``StatusError`` / :class:`Unreachable`."""
        headers = {"Content-Type": request.content_type} if request.body is not None else {}
        try:
            resp = self._http.request(
                request.method,
                request.path,
                params=request.params,
                content=request.body,
                headers=headers,
            )
        except httpx.TransportError as exc:
            raise Unreachable(f"{request.method} {self.server}{request.path}: {exc}") from exc
        for text in decode.warnings(resp.headers.get_list("warning")):
            self.warned(text)
        return decode.answer(resp.status_code, resp.content, resp.headers.get("Retry-After"))

    def warned(self, text: str) -> None:
        """A ``Warning`` header's text (an admission policy in warn mode...); the CLI prints it,
        other clients ignore it."""

    def call(self, request: build.Request) -> Obj:
        obj: Obj = self.send(request)
        return obj

    def list(self, kind: Kind, namespace: str | None, **options: Unpack[build.ListOptions]) -> Obj:
        """Every matching object across pages, as one List object."""
        pager = decode.Pager(kind, namespace, **options)
        while pager.add(self.send(pager.request())):
            pass
        return pager.result()

    def list_items(
        self, kind: Kind, namespace: str | None, *, field_selector: str | None = None
    ) -> tuple[builtins.list[Obj], str]:
        """The items of :meth:`list` and its resourceVersion, the version to watch from."""
        listed = self.list(kind, namespace, field_selector=field_selector)
        return listed["items"], listed["metadata"]["resourceVersion"]

    def watch(
        self,
        kind: Kind,
        namespace: str | None,
        resource_version: str,
        **options: Unpack[build.WatchOptions],
    ) -> Generator[Obj, None, None]:
        """Watch events (bookmarks included) until the server ends the stream; an ``ERROR``
        event is raised as its ``StatusError`` (``Gone``: relist)."""
        request = build.watch(kind, namespace, resource_version, **options)
        with self._stream(request, self.watch_read_timeout) as resp:
            yield from decode.watch_events(resp.iter_lines())

    def stream_bytes(self, request: build.Request) -> Generator[bytes, None, None]:
        """The answer's body as it arrives, unchanged (a followed log)."""
        with self._stream(request, None) as resp:
            yield from resp.iter_raw()

    @contextlib.contextmanager
    def _stream(self, request: build.Request, read_timeout: float | None) -> Iterator[Any]:
        timeout = httpx.Timeout(self.timeout, read=read_timeout)
        try:
            with self._http.stream(
                request.method, request.path, params=request.params, timeout=timeout
            ) as resp:
                if resp.status_code >= 400:
                    raw = resp.read()
                    raise decode.error(resp.status_code, raw, resp.headers.get("Retry-After"))
                yield resp
        except httpx.TransportError as exc:
            raise Unreachable(f"stream of {self.server}{request.path} broke: {exc}") from exc
