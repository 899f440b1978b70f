"""Who made a write, and why: the write context every store write carries.

The database records each change to a state table in ``qm_history`` by trigger, whatever path
it came through (migration 0014). What only the application knows (the principal and its
groups, the request id, the client's address and user agent, a reason, the verb and
subresource) travels with the write as the transaction-local setting ``qm.context``: one JSON
object, set by the same statement that writes (``set_config('qm.context', ..., true)``), so it
holds under PgBouncer's transaction pooling and costs no round trip. A batched statement that
carries many writers' contexts sets ``qm.contexts`` instead, mapping ``"<namespace>/<name>"``
to each row's context (:func:`contexts_text`).

Callers: the API (:mod:`app.api.request_context` builds one per request), the controllers,
the scheduler, the loops of the controller manager, and the store, which sends it. Pure: no
I/O and no clock.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

MAX_REASON = 1024
MAX_REQUEST_ID = 128
MAX_USER_AGENT = 512
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
CONTROLLER_PREFIX = "system:controller:"
SCHEDULER = "system:kube-scheduler"


@dataclass(frozen=True, slots=True)
class WriteContext:
    """The application's part of one write's history row; every field optional.

    ``principal`` None (the empty context) reads as "no application context", as a DBA's
    session: the history then names only the database role and application name."""

    principal: str | None = None
    groups: tuple[str, ...] = ()
    request_id: str | None = None
    client: str | None = None
    user_agent: str | None = None
    reason: str | None = None
    verb: str | None = None
    subresource: str | None = None

    def text(self) -> str:
        """The JSON object the history triggers read (keys of unset fields left out)."""
        return json.dumps(self.fields(), separators=(",", ":"), ensure_ascii=False)

    def fields(self) -> dict[str, object]:
        out: dict[str, object] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None or value == ():
                continue
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    def using(self, **changes: str | None) -> WriteContext:
        """This context with the given fields replaced."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def defaults(self, *, verb: str | None = None, subresource: str | None = None) -> WriteContext:
        """This context with ``verb`` and ``subresource`` filled in where it has none: the
        store knows what a write does when its caller did not say."""
        if (self.verb or not verb) and (self.subresource or not subresource):
            return self
        return dataclasses.replace(
            self, verb=self.verb or verb, subresource=self.subresource or subresource
        )


NONE = WriteContext()


def text_of(ctx: WriteContext | None) -> str:
    """The setting's value for ``ctx`` ('' for none: the history reads it as no context)."""
    return "" if ctx is None else ctx.text()


def contexts_text(entries: Iterable[tuple[str, str, WriteContext | None]]) -> str:
    """``qm.contexts`` for a batched statement: ``"<namespace>/<name>"`` to each row's
    context, from ``(namespace, name, context)`` (rows without one left out)."""
    out = {f"{ns}/{name}": ctx.fields() for ns, name, ctx in entries if ctx is not None}
    return json.dumps(out, separators=(",", ":"), ensure_ascii=False) if out else ""


def controller(
    name: str, *, request_id: str | None = None, reason: str | None = None
) -> WriteContext:
    """The context of a controller's writes: principal ``system:controller:<name>``, the
    reconcile task's id as the request id, and what the plan step does as the reason."""
    return WriteContext(
        principal=f"{CONTROLLER_PREFIX}{name}", request_id=request_id, reason=reason
    )


def system(
    principal: str, *, request_id: str | None = None, reason: str | None = None
) -> WriteContext:
    """The context of an internal component's writes under its own principal name."""
    return WriteContext(principal=principal, request_id=request_id, reason=reason)


def check_reason(text: str) -> str | None:
    """Why ``text`` cannot be a write's reason (None when it can): at most ``MAX_REASON``
    characters, no control characters."""
    if len(text) > MAX_REASON:
        return f"must be at most {MAX_REASON} characters"
    if _CONTROL.search(text):
        return "must not contain control characters"
    return None


def valid_request_id(text: str) -> bool:
    """Whether a client's request id may be reused as ours (short, no spaces or controls)."""
    return bool(_REQUEST_ID.match(text))


def printable(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters with control characters replaced: for values the
    client sends that are recorded but never refused (the user agent)."""
    return _CONTROL.sub("?", text[:limit])
