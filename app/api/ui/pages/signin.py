"""Signing in and out (:mod:`app.api.ui.session` holds the mechanism)."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, get, post
from litestar.response import Redirect

from app.api.ui import session as sessions
from app.api.ui.render import page
from app.core import errors

MAX_TOKEN = 4096


@get("/ui/signin", include_in_schema=False)
async def signin_form(request: Request[Any, Any, Any]) -> Response[Any]:
    nxt = sessions.safe_next(request.query_params.get("next"))
    ttl_h = round(sessions.session_ttl_s() / 3600, 1)
    return page(request, "signin.html", None, next=nxt, error="", ttl_h=ttl_h)


@post("/ui/signin", include_in_schema=False)
async def signin(request: Request[Any, Any, Any]) -> Response[Any]:
    form = await request.form()
    token = str(form.get("token") or "")
    nxt = sessions.safe_next(str(form.get("next") or ""))
    origin = request.headers.get("origin")
    if origin and origin != "null" and origin.split("://", 1)[-1] != request.headers.get("host"):
        return Response(b"the form was posted from another site", status_code=403,
                        media_type="text/plain")  # fmt: skip
    if not token or len(token) > MAX_TOKEN:
        return page(request, "signin.html", None, 422, next=nxt, ttl_h=0,
                    error="Give a token (at most 4096 characters).")  # fmt: skip
    try:
        session_token, ttl = await sessions.sign_in(request, token)
    except errors.Unauthorized as exc:
        return page(request, "signin.html", None, 401, next=nxt, ttl_h=0,
                    error=f"That token was not accepted: {exc}")  # fmt: skip
    resp = Redirect(nxt, status_code=303)
    resp.headers["Set-Cookie"] = sessions.cookie_header(request, session_token, ttl)
    return resp


@post("/ui/signout", include_in_schema=False)
async def signout(request: Request[Any, Any, Any]) -> Response[Any]:
    try:
        session = await sessions.current(request)
    except sessions.SignedOut:
        return Redirect("/ui/signin", status_code=303)
    form = await request.form()
    try:
        await sessions.check_action(request, session, form)
    except errors.StatusError as exc:
        return page(request, "error.html", session, exc.code, error=exc)
    await sessions.sign_out(request, session)
    resp = Redirect("/ui/signin", status_code=303)
    resp.headers["Set-Cookie"] = sessions.clear_cookie_header()
    return resp


HANDLERS = [signin_form, signin, signout]
