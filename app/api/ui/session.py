"""Signing in to the web UI: a session is a short-lived token of the same principal.

Signing in with a bearer token mints a new token for that token's principal and groups
(ADR 0060), valid ``QM_UI_SESSION_TTL_S`` (8 hours) or until the presented token expires,
whichever is sooner, and puts it in a cookie the page's scripts cannot read (``HttpOnly``),
that other sites' pages do not send (``SameSite=Strict``), scoped to ``/ui`` and expiring
with the token. So a session is authenticated by the API's own :class:`Authenticator`:
signing out revokes it, ``qm token revoke`` ends it, and its expiry is the token's.

Every action is a form ``POST`` carrying a CSRF value derived from the session token
(HMAC-SHA-256 of a fixed label, keyed by the token): a page of this origin has it, another
site cannot compute it, and nothing needs storing. A ``POST`` whose ``Origin`` names another
site is refused as well.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlsplit

from litestar import Request

from app.api.auth import Authenticator
from app.api.request_context import write_context
from app.api.ui.inproc import Caller
from app.core import errors
from app.core.principals import AUTHENTICATED
from app.store import tokens
from app.store.tokens import User

COOKIE = "qm_session"
PATH = "/ui"
DEFAULT_TTL_S = 8 * 3600.0
MIN_TTL_S = 60.0


def session_ttl_s() -> float:
    return float(os.environ.get("QM_UI_SESSION_TTL_S", str(DEFAULT_TTL_S)))


@dataclass(frozen=True)
class Session:
    """The signed-in principal of one browser request, with the token its cookie holds."""

    user: User
    token: str
    caller: Caller

    @property
    def csrf(self) -> str:
        return csrf_of(self.token)


class SignedOut(Exception):
    """No valid session: a page redirects to the sign-in form, a fragment answers 401."""


def csrf_of(token: str) -> str:
    return hmac.new(token.encode(), b"qm-ui-csrf", hashlib.sha256).hexdigest()


def caller_of(request: Request[Any, Any, Any], token: str) -> Caller:
    client = request.client
    return Caller(
        token,
        (client.host, client.port) if client else ("127.0.0.1", 0),
        request.headers.get("user-agent", "")[:200],
        request.headers.get("x-request-id", ""),
    )


async def current(request: Request[Any, Any, Any]) -> Session:
    """The request's session; :class:`SignedOut` if it has none, or it expired or was revoked."""
    token = request.cookies.get(COOKIE, "")
    if not token:
        raise SignedOut
    auth: Authenticator = request.app.state.auth
    try:
        user = await auth.user_for(f"Bearer {token}")
    except errors.Unauthorized:
        raise SignedOut from None
    return Session(user, token, caller_of(request, token))


async def check_action(request: Request[Any, Any, Any], session: Session, form: Any) -> None:
    """Refuse (403) a ``POST`` without this session's CSRF value or from another origin."""
    origin = request.headers.get("origin")
    if origin and origin != "null":
        host = request.headers.get("host", "")
        if urlsplit(origin).netloc != host:
            raise errors.Forbidden("the form was posted from another site")
    given = form.get("csrf", "") if hasattr(form, "get") else ""
    if not isinstance(given, str) or not hmac.compare_digest(given, session.csrf):
        raise errors.Forbidden("the form's CSRF value is missing or wrong: reload the page")


async def sign_in(request: Request[Any, Any, Any], presented: str) -> tuple[str, float]:
    """A new session token for the principal of ``presented`` and its lifetime in seconds;
    Unauthorized if ``presented`` is not a valid token."""
    auth: Authenticator = request.app.state.auth
    user = await auth.user_for(f"Bearer {presented.strip()}")
    ttl = session_ttl_s()
    if user.expires_at is not None:
        ttl = min(ttl, (user.expires_at - datetime.now(UTC)).total_seconds())
    if ttl < MIN_TTL_S:
        raise errors.Unauthorized("the token expires within a minute: use a newer one")
    groups = tuple(g for g in user.groups if g != AUTHENTICATED)
    minted = await tokens.mint(
        auth.pool, user.name, groups, ttl,
        f"web UI session (signed in with token {user.token_id or 'unnamed'})",
        created_by=user.actor, minted_by=user.token_id or None,
        ctx=write_context(user, verb="create").using(reason="sign in"),
    )  # fmt: skip
    return minted.token, ttl


async def sign_out(request: Request[Any, Any, Any], session: Session) -> None:
    """Revoke the session's token: the cookie stops working on every API server."""
    auth: Authenticator = request.app.state.auth
    record = await tokens.revoke(
        auth.pool, session.user.token_id,
        write_context(session.user, verb="delete").using(reason="sign out"),
    )  # fmt: skip
    uid = ((record or {}).get("metadata") or {}).get("uid")
    if uid:  # at once here; the other API servers follow the revocation through the stream
        auth.forget(str(uid))


def cookie_header(request: Request[Any, Any, Any], token: str, max_age: float) -> str:
    secure = "; Secure" if request.url.scheme == "https" else ""
    return (
        f"{COOKIE}={token}; Path={PATH}; Max-Age={int(max_age)}; HttpOnly; SameSite=Strict{secure}"
    )


def clear_cookie_header() -> str:
    return f"{COOKIE}=; Path={PATH}; Max-Age=0; HttpOnly; SameSite=Strict"


def signin_url(next_path: str) -> str:
    return f"{PATH}/signin?next={quote(next_path, safe='/')}"


def safe_next(value: str | None) -> str:
    """Where to go after signing in: a path under /ui of this site, nothing else."""
    if not value or (not value.startswith(f"{PATH}/") and value != PATH):
        return f"{PATH}/"
    if value.startswith("//") or "\\" in value or "://" in value:
        return f"{PATH}/"
    return value
