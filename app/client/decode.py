"""What comes back: answers decoded, ``Status`` bodies raised as their exceptions, lists paged.

Every client of the REST API (the CLI, the node agent, the hollow nodes) turns an answer of 400
or more into the ``app.core.errors`` class its ``kind: Status`` body names, through
:func:`app.core.errors.from_status`, so callers catch ``NotFound`` or ``Conflict`` rather than
inspect codes and read ``retry_after`` for how long to wait; a connection that failed is
:class:`Unreachable`. Paging (:class:`Pager`) follows ``continue`` tokens and refuses a token the
server repeats, which would otherwise loop for ever. Pure: transports hand in status and bytes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any, Unpack

import msgspec

from app.core import errors
from app.core.errors import StatusError
from app.core.kinds import API_VERSION, Kind

from . import build

Obj = dict[str, Any]
_decode = msgspec.json.Decoder().decode
_TEXT_LIMIT = 500  # of a non-Status error page kept as the message


class Unreachable(Exception):
    """The connection failed or broke before a complete answer arrived: keep what is known
    and try again later."""


def error(status: int, raw: bytes, retry_after: str | None = None) -> StatusError:
    """The exception an error answer describes. ``retry_after`` is the ``Retry-After``
    header, used when the body gives no ``retryAfterSeconds`` (a proxy's error page)."""
    try:
        body: Any = _decode(raw) if raw else None
    except msgspec.DecodeError:
        body = None
    text = "" if body is not None else raw.decode(errors="replace")[:_TEXT_LIMIT]
    err = errors.from_status(body, status, text)
    if err.retry_after is None and retry_after is not None and retry_after.strip().isdigit():
        err.retry_after = int(retry_after)
    return err


def answer(status: int, raw: bytes, retry_after: str | None = None) -> Any:
    """The decoded body of an answer (``{}`` when empty, the text when not JSON), or the
    ``StatusError`` of an error answer raised."""
    if status >= 400:
        raise error(status, raw, retry_after)
    if not raw:
        return {}
    try:
        return _decode(raw)
    except msgspec.DecodeError:
        return raw.decode(errors="replace")


def watch_events(lines: Iterable[str]) -> Iterator[Obj]:
    """A watch stream's events; an ``ERROR`` event is raised as its ``StatusError`` (``Gone``:
    the version is too old, relist) and a line that is not JSON as :class:`Unreachable` (the
    stream broke mid-event)."""
    try:
        yield from errors.watch_events(lines, gone_code=410)
    except errors.MalformedEvent as exc:
        raise Unreachable(str(exc)) from exc


class Pager:
    """The pages of one list: :meth:`request` is the next page's request, :meth:`add` takes
    its answer and says whether another page follows, :meth:`result` is the whole list, whose
    ``metadata.resourceVersion`` is the first page's (the version to watch from)."""

    def __init__(
        self, kind: Kind, namespace: str | None, **options: Unpack[build.ListOptions]
    ) -> None:
        self.kind, self.namespace, self.options = kind, namespace, options
        self.items: list[Obj] = []
        self._first: Obj | None = None
        self._token: str | None = None
        self._seen: set[str] = set()

    def request(self) -> build.Request:
        return build.list_page(self.kind, self.namespace, self._token, **self.options)

    def add(self, page: Any) -> bool:
        """Take one page; whether another must be fetched."""
        if not isinstance(page, dict):
            raise StatusError("the server returned a list that is not a JSON object")
        if self._first is None:
            self._first = page
        for item in page.get("items") or []:
            if isinstance(item, dict):
                item.setdefault("apiVersion", API_VERSION)
                item.setdefault("kind", self.kind.kind)
                self.items.append(item)
        token = str((page.get("metadata") or {}).get("continue") or "")
        if not token:
            return False
        if token in self._seen:
            raise StatusError("the server repeated a continue token while paging a list")
        self._seen.add(token)
        self._token = token
        return True

    def result(self) -> Obj:
        first = self._first or {}
        meta = first.get("metadata") or {}
        return {
            "kind": first.get("kind") or self.kind.list_kind,
            "apiVersion": first.get("apiVersion") or API_VERSION,
            "metadata": {"resourceVersion": str(meta.get("resourceVersion") or "")},
            "items": self.items,
        }


def warnings(values: Iterable[str]) -> list[str]:
    """The texts of ``Warning`` headers (``299 - "text"``, the text's ``"`` and ``\\``
    escaped); a value in another form is passed on whole."""
    out = []
    for value in values:
        _, sep, quoted = value.partition(' "')
        if not sep or not quoted.endswith('"'):
            out.append(value)
            continue
        out.append(re.sub(r"\\(.)", r"\1", quoted[:-1]))
    return out
