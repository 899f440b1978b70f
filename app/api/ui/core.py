"""What every UI page shares: its session, its REST client, its permissions, its errors.

:func:`ui_page` wraps a page handler: it finds the session (no session: the sign-in form,
or 401 for a live update), gives the handler a :class:`View` (the REST API as the signed-in
principal, and :class:`Access`), and turns an API error into a page that says what it is (a
forbidden kind shows as forbidden, not as an empty table). :func:`ui_action` does the same
for a form ``POST``, after the CSRF check, with the reason typed in the form sent as
``X-Reason`` so the history records it; it redirects back (post, redirect, get) with the
outcome as a flash message in the query.

:class:`Access` answers "may I" for a page's buttons from one ``SelfSubjectRulesReview`` per
namespace the page shows, evaluated with the same rule matching as RBAC; when the review is
incomplete (another authoriser in the chain) it asks ``SelfSubjectAccessReview`` per question.
The server enforces every action regardless.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

from litestar import Request, Response
from litestar.response import Redirect

from app.api.ui import inproc
from app.api.ui.render import page
from app.api.ui.session import Session, SignedOut, check_action, current, signin_url
from app.client import build
from app.client.aio import AsyncRestClient
from app.core import errors
from app.core.authz import GROUP, Attributes
from app.core.authz.rules import any_allows, from_dict
from app.core.kinds import Kind

AUTHZ = "/apis/authorization.quaymaster.io/v1"
MAX_REASON = 256
FLASH = ("done", "failed")  # the query keys an action's outcome is shown from


def asgi_app(request: Request[Any, Any, Any]) -> inproc.ASGIApp:
    """The whole API application (set by :func:`app.api.app.create_app`)."""
    app: inproc.ASGIApp = request.app.state.asgi
    return app


@dataclass
class Access:
    """The signed-in principal's permissions, asked once per namespace per page."""

    api: AsyncRestClient
    _rules: dict[str, tuple[list[Any], bool]] = field(default_factory=dict)
    _asked: dict[Attributes, bool] = field(default_factory=dict)

    async def can(
        self, verb: str, resource: str, namespace: str = "", name: str = "", sub: str = "",
        group: str = GROUP,
    ) -> bool:  # fmt: skip
        attrs = Attributes(verb, resource, namespace, name, sub, group)
        if attrs in self._asked:
            return self._asked[attrs]
        if namespace not in self._rules:
            spec: dict[str, Any] = {"namespace": namespace}
            status = await self._review("selfsubjectrulesreviews", "SelfSubjectRulesReview", spec)
            rules = [r for r in map(from_dict, status.get("resourceRules") or []) if r]
            self._rules[namespace] = (rules, bool(status.get("incomplete")))
        rules, incomplete = self._rules[namespace]
        allowed = any_allows(rules, attrs)
        if not allowed and incomplete:
            ra = {"verb": verb, "resource": resource, "namespace": namespace, "name": name,
                  "subresource": sub, "group": group}  # fmt: skip
            status = await self._review(
                "selfsubjectaccessreviews", "SelfSubjectAccessReview", {"resourceAttributes": ra}
            )
            allowed = bool(status.get("allowed"))
        self._asked[attrs] = allowed
        return allowed

    async def _review(self, plural: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
        body = {"apiVersion": "authorization.quaymaster.io/v1", "kind": kind, "spec": spec}
        review = await self.api.send(
            build.Request("POST", f"{AUTHZ}/{plural}", (), build.encode(body))
        )
        status: dict[str, Any] = review.get("status") or {}
        return status

    async def can_kind(self, verb: str, kind: Kind, namespace: str = "", name: str = "",
                       sub: str = "") -> bool:  # fmt: skip
        return await self.can(verb, kind.plural, namespace if kind.namespaced else "", name, sub)


@dataclass
class View:
    """One page request: its session, the REST API as its principal, and its permissions."""

    request: Request[Any, Any, Any]
    session: Session
    api: AsyncRestClient
    access: Access
    started: float

    def render(self, template: str, status: int = 200, **context: Any) -> Response[bytes]:
        resp = page(self.request, template, self.session, status, **context)
        took = (time.perf_counter() - self.started) * 1000
        resp.headers["Server-Timing"] = f"total;dur={took:.1f}, " + resp.headers["Server-Timing"]
        return resp

    def client(self, reason: str) -> AsyncRestClient:
        """The REST API as this principal, every write carrying ``reason``."""
        return AsyncRestClient(inproc.Transport(asgi_app(self.request), self.session.caller,
                                                reason))  # fmt: skip


def _view(request: Request[Any, Any, Any], session: Session) -> View:
    api = AsyncRestClient(inproc.Transport(asgi_app(request), session.caller))
    return View(request, session, api, Access(api), time.perf_counter())


PageHandler = Callable[..., Awaitable[Response[Any]]]


def _is_live(request: Request[Any, Any, Any]) -> bool:
    return bool(request.headers.get("x-qm-fragment"))


def error_page(view: View, exc: errors.StatusError) -> Response[bytes]:
    return view.render("error.html", status=exc.code, error=exc)


def ui_page(fn: PageHandler) -> PageHandler:
    """Wrap a page handler ``fn(view)``: session, REST client, errors. The route's path
    parameters are in ``view.request.path_params`` (the wrapper's own signature is what
    Litestar reads, so it takes the request alone)."""

    async def wrapper(request: Request[Any, Any, Any]) -> Response[Any]:
        started = time.perf_counter()
        try:
            session = await current(request)
        except SignedOut:
            if _is_live(request):
                return Response(b"signed out", status_code=401, media_type="text/plain")
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return Redirect(signin_url(target), status_code=303)
        view = _view(request, session)
        view.started = started
        try:
            return await fn(view)
        except errors.StatusError as exc:
            if isinstance(exc, errors.Unauthorized):
                return Redirect(signin_url(request.url.path), status_code=303)
            return error_page(view, exc)

    return _named(wrapper, fn)


def _named(wrapper: PageHandler, fn: Callable[..., Any]) -> PageHandler:
    wrapper.__name__, wrapper.__qualname__, wrapper.__doc__ = (
        fn.__name__,
        fn.__qualname__,
        fn.__doc__,
    )
    return wrapper


def back(to: str, **flash: str) -> Redirect:
    """Redirect to ``to`` (a path under /ui) with a flash message."""
    path, _, query = to.partition("?")
    kept = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k not in FLASH]
    query = urlencode(kept + list(flash.items()))
    return Redirect(f"{path}?{query}" if query else path, status_code=303)


def ui_action(fn: Callable[..., Awaitable[str]]) -> PageHandler:
    """Wrap a form action ``fn(view, form, reason) -> message``: session, CSRF, reason;
    redirects to the form's ``back`` with ``done`` or ``failed`` set."""

    async def wrapper(request: Request[Any, Any, Any]) -> Response[Any]:
        started = time.perf_counter()
        try:
            session = await current(request)
        except SignedOut:
            return Redirect(signin_url(request.url.path), status_code=303)
        view = _view(request, session)
        view.started = started
        form = await request.form()
        try:
            await check_action(request, session, form)
        except errors.StatusError as exc:
            return error_page(view, exc)
        to = str(form.get("back") or "")
        if not to.startswith("/ui/") or to.startswith("//"):
            to = "/ui/"
        reason = " ".join(str(form.get("reason") or "").split())[:MAX_REASON]
        try:
            message = await fn(view, form, reason)
        except errors.Forbidden as exc:  # the server's refusal, whatever the page offered
            return error_page(view, exc)
        except errors.StatusError as exc:
            return back(to, failed=str(exc))
        return back(to, done=message)

    return _named(wrapper, fn)


@dataclass
class Listed:
    """One page of a REST list as a page shows it, or why it cannot: ``forbidden`` (the
    principal may not list there) or ``invalid`` (a malformed filter, an expired token)."""

    items: list[Any] = field(default_factory=list)
    next_token: str = ""
    remaining: int | None = None
    version: str = ""
    forbidden: str = ""
    invalid: str = ""

    def context(self) -> dict[str, Any]:
        """What every list template reads."""
        return {"forbidden": self.forbidden, "invalid": self.invalid,
                "next_token": self.next_token, "remaining": self.remaining}  # fmt: skip


async def list_page(view: View, request: build.Request) -> Listed:
    """Send a list request as the page's principal; a refusal or a bad filter is the page's
    to show, anything else is an error page."""
    try:
        listed = await view.api.send(request)
    except errors.Forbidden as exc:
        return Listed(forbidden=str(exc))
    except errors.StatusError as exc:
        if exc.code not in (400, 410, 422):
            raise
        return Listed(invalid=str(exc))
    meta = listed.get("metadata") or {}
    return Listed(
        [i for i in listed.get("items") or [] if isinstance(i, dict)],
        str(meta.get("continue") or ""),
        meta.get("remainingItemCount"),
        str(meta.get("resourceVersion") or ""),
    )


def object_url(kind: Kind, namespace: str | None, name: str) -> str:
    ns = quote(namespace or "_", safe="")
    return f"/ui/objects/{kind.plural}/{ns}/{quote(name, safe='')}"
