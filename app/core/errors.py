"""One error taxonomy for the whole control plane.

Every failure a caller can act on is one of these classes; the API maps them to a Kubernetes
``kind: Status`` body and an HTTP code in exactly one place (``to_status``), and internal
components use ``retryable`` / ``retry_after`` to decide whether to try again.

Controllers need one more distinction than an HTTP code gives: what to do next. ``classify``
sorts any failure into a ``Failure`` of one ``ErrorKind`` (permanent, temporary with a delay,
conflict, refused by policy or quota, unschedulable with reasons) with the delay before the
next try; ``workers.outcome`` maps those to Celery retries, Events and metrics, in one place.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


@dataclass(frozen=True)
class Cause:
    """One field-level problem: ``field`` is a JSON path such as ``spec.containers[0].image``."""

    field: str
    reason: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"field": self.field, "reason": self.reason, "message": self.message}


@dataclass
class StatusError(Exception):
    """Base of every error that becomes a ``Status`` response."""

    message: str
    kind: str | None = None
    name: str | None = None
    causes: list[Cause] = field(default_factory=list)
    code: int = 500
    reason: str = "InternalError"
    retryable: bool = False
    retry_after: int | None = None

    def __str__(self) -> str:
        return self.message

    def to_status(self) -> dict[str, Any]:
        details: dict[str, Any] = {}
        if self.name is not None:
            details["name"] = self.name
        if self.kind is not None:
            details["kind"] = self.kind
        if self.causes:
            details["causes"] = [c.to_dict() for c in self.causes]
        if self.retry_after is not None:
            details["retryAfterSeconds"] = self.retry_after
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if details:
            body["details"] = details
        return body


def _make(code: int, reason: str, retryable: bool = False) -> Any:
    def init(
        self: StatusError,
        message: str,
        kind: str | None = None,
        name: str | None = None,
        causes: list[Cause] | None = None,
        retry_after: int | None = None,
    ) -> None:
        StatusError.__init__(
            self, message, kind, name, list(causes or []), code, reason, retryable, retry_after
        )

    return init


class BadRequest(StatusError):
    __init__ = _make(400, "BadRequest")


class Unauthorized(StatusError):
    __init__ = _make(401, "Unauthorized")


class Forbidden(StatusError):
    __init__ = _make(403, "Forbidden")


class NotFound(StatusError):
    __init__ = _make(404, "NotFound")


class MethodNotAllowed(StatusError):
    __init__ = _make(405, "MethodNotAllowed")


class AlreadyExists(StatusError):
    __init__ = _make(409, "AlreadyExists")


class Conflict(StatusError):
    """The object changed since the version the caller read: re-read and retry."""

    __init__ = _make(409, "Conflict", retryable=True)


class Gone(StatusError):
    """A revision older than the retained window: relist."""

    __init__ = _make(410, "Expired")


class RequestEntityTooLarge(StatusError):
    __init__ = _make(413, "RequestEntityTooLarge")


class UnsupportedMediaType(StatusError):
    __init__ = _make(415, "UnsupportedMediaType")


class Invalid(StatusError):
    """Admission rejected the object; ``causes`` carries one entry per bad field."""

    __init__ = _make(422, "Invalid")


class TooManyRequests(StatusError):
    __init__ = _make(429, "TooManyRequests", retryable=True)


class Timeout(StatusError):
    __init__ = _make(504, "Timeout", retryable=True)


class ServiceUnavailable(StatusError):
    __init__ = _make(503, "ServiceUnavailable", retryable=True)


def invalid(kind: str, name: str | None, causes: list[Cause]) -> Invalid:
    """Build the 422 for a list of causes, with a message that names every bad field."""
    summary = "; ".join(f"{c.field}: {c.message}" for c in causes)
    shown = name or "(unnamed)"
    return Invalid(f'{kind} "{shown}" is invalid: {summary}', kind=kind, name=name, causes=causes)


# -- Status bodies back into exceptions (clients) ------------------------------------------

_BY_REASON: dict[str, type[StatusError]] = {
    "BadRequest": BadRequest,
    "Unauthorized": Unauthorized,
    "Forbidden": Forbidden,
    "NotFound": NotFound,
    "MethodNotAllowed": MethodNotAllowed,
    "AlreadyExists": AlreadyExists,
    "Conflict": Conflict,
    "Gone": Gone,
    "Expired": Gone,
    "RequestEntityTooLarge": RequestEntityTooLarge,
    "UnsupportedMediaType": UnsupportedMediaType,
    "Invalid": Invalid,
    "TooManyRequests": TooManyRequests,
    "Timeout": Timeout,
    "ServiceUnavailable": ServiceUnavailable,
}

_BY_CODE: dict[int, type[StatusError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    410: Gone,
    413: RequestEntityTooLarge,
    415: UnsupportedMediaType,
    422: Invalid,
    429: TooManyRequests,
    503: ServiceUnavailable,
    504: Timeout,
}


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def from_status(body: Any, http_code: int | None = None, text: str = "") -> StatusError:
    """Rebuild the exception a ``Status`` body describes.

    ``reason`` picks the class (it separates ``AlreadyExists`` from ``Conflict``, both 409);
    the HTTP code is the fallback. The server's own code and reason are kept on the instance.
    """
    status: dict[str, Any] = body if isinstance(body, dict) else {}
    raw_code = status.get("code")
    code = raw_code if isinstance(raw_code, int) and raw_code >= 400 else http_code or 500
    reason = status.get("reason") if isinstance(status.get("reason"), str) else None
    details = status.get("details") if isinstance(status.get("details"), dict) else {}
    assert isinstance(details, dict)
    causes = [
        Cause(
            field=str(c.get("field") or ""),
            reason=str(c.get("reason") or ""),
            message=str(c.get("message") or ""),
        )
        for c in details.get("causes") or []
        if isinstance(c, dict)
    ]
    message = status.get("message")
    if not isinstance(message, str) or not message:
        message = text.strip() or f"the server responded with HTTP {code}"
    kind = _str_or_none(details.get("kind"))
    name = _str_or_none(details.get("name"))
    retry_after = details.get("retryAfterSeconds")
    retry = retry_after if isinstance(retry_after, int) else None
    cls = (_BY_REASON.get(reason) if reason else None) or _BY_CODE.get(code)
    if cls is None:
        return StatusError(message, kind, name, causes, code, reason or "InternalError")
    err = cls(message, kind=kind, name=name, causes=causes, retry_after=retry)
    err.code = code
    if reason:
        err.reason = reason
    return err


class MalformedEvent(ValueError):
    """A line of a watch stream that is not a JSON event."""


def watch_events(lines: Iterable[str], gone_code: int | None = None) -> Iterator[dict[str, Any]]:
    """The events of a watch stream, one JSON object per line, as clients read them: blank
    lines and non-objects skipped, an ``ERROR`` event raised as the exception its ``Status``
    describes (``gone_code`` is the HTTP code assumed when the body gives none), a line that
    is not JSON raised as :class:`MalformedEvent`."""
    for line in lines:
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError as exc:
            raise MalformedEvent(f"malformed watch event: {line[:200]!r}") from exc
        if not isinstance(event, dict):
            continue
        if event.get("type") == "ERROR":
            raise from_status(event.get("object"), gone_code)
        yield event


# -- what a controller does about a failure ------------------------------------------------


class ErrorKind(StrEnum):
    """The kinds of failure a controller must tell apart, by what it does next."""

    PERMANENT = "permanent"  # trying again cannot help: say so and stop (the resync looks again)
    TEMPORARY = "temporary"  # the database, the broker or the key's lock: try again after a delay
    CONFLICT = "conflict"  # the object changed since it was read: re-read and try again soon
    REFUSED = "refused"  # policy or quota said no: report it, keep the status, try again later
    UNSCHEDULABLE = "unschedulable"  # no node fits: the reasons, counted, and a later look


# Seconds before the next try, by kind (``retry_after`` on the error wins when it is given).
CONFLICT_RETRY_SECONDS = 0.2
TEMPORARY_RETRY_SECONDS = 1.0
REFUSED_RETRY_SECONDS = 5.0
UNSCHEDULABLE_RETRY_SECONDS = 5.0


class TemporaryError(Exception):
    """A failure that passes by itself: try again after ``delay`` seconds."""

    def __init__(self, message: str, delay: float = TEMPORARY_RETRY_SECONDS) -> None:
        super().__init__(message)
        self.delay = delay


class Unschedulable(StatusError):
    """No node can take the object; ``reasons`` counts the nodes per rejection reason
    (``{"insufficient cpu": 9990, "untolerated taint": 10}``)."""

    def __init__(self, message: str, reasons: dict[str, int] | None = None) -> None:
        StatusError.__init__(self, message, code=422, reason="Unschedulable")
        self.reasons = dict(reasons or {})


@dataclass(frozen=True)
class Failure:
    """One failure as a controller sees it: its kind, the seconds before the next try
    (``None``: no retry of its own), what it said, and an unschedulable failure's reasons."""

    kind: ErrorKind
    message: str
    delay: float | None = None
    reasons: tuple[tuple[str, int], ...] = ()

    @property
    def retries(self) -> bool:
        return self.delay is not None


_BY_STATUS_CLASS: tuple[tuple[type[StatusError], ErrorKind, float | None], ...] = (
    (Unschedulable, ErrorKind.UNSCHEDULABLE, UNSCHEDULABLE_RETRY_SECONDS),
    (Conflict, ErrorKind.CONFLICT, CONFLICT_RETRY_SECONDS),
    (NotFound, ErrorKind.CONFLICT, CONFLICT_RETRY_SECONDS),  # read a moment ago: look again
    (AlreadyExists, ErrorKind.CONFLICT, CONFLICT_RETRY_SECONDS),
    (Forbidden, ErrorKind.REFUSED, REFUSED_RETRY_SECONDS),
    (Unauthorized, ErrorKind.REFUSED, REFUSED_RETRY_SECONDS),
)


def classify(exc: BaseException) -> Failure | None:
    """The ``Failure`` an exception is, or ``None`` for one this taxonomy does not know (a
    bug, or an I/O error the shell classifies: the core imports no driver)."""
    if isinstance(exc, TemporaryError):
        return Failure(ErrorKind.TEMPORARY, str(exc), exc.delay)
    if not isinstance(exc, StatusError):
        return None
    for cls, kind, delay in _BY_STATUS_CLASS:
        if isinstance(exc, cls):
            reasons = tuple(sorted(exc.reasons.items())) if isinstance(exc, Unschedulable) else ()
            return Failure(kind, exc.message, _delay(exc, delay), reasons)
    if exc.retryable or exc.code >= 500:
        return Failure(ErrorKind.TEMPORARY, exc.message, _delay(exc, TEMPORARY_RETRY_SECONDS))
    return Failure(ErrorKind.PERMANENT, exc.message)


def _delay(exc: StatusError, default: float | None) -> float | None:
    return float(exc.retry_after) if exc.retry_after is not None else default
