"""Pages from templates: the Jinja2 environment, its filters, and the responses pages return.

A page is one template extending ``base.html``; its ``main`` block is the part that changes.
A request with the header ``X-QM-Fragment: main`` (what ``ui.js`` sends when the watch
stream says something changed) gets that block alone, so a live update ships one table, not
the whole page. ``Server-Timing`` says how long the server took (the benchmark reads it).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from litestar import Request, Response

from app.api.ui.session import Session

TEMPLATES = Path(__file__).parent / "templates"
FRAGMENT_HEADER = "x-qm-fragment"


def age(value: Any, now: datetime | None = None) -> str:
    """``5s``, ``3m``, ``2h``, ``4d`` since the RFC 3339 time ``value`` ('' if none)."""
    if not value:
        return ""
    try:
        then = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return ""
    s = int(((now or datetime.now(UTC)) - then).total_seconds())
    if s < 0:
        return "0s"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size * (2 if unit != "m" else 1):
            return f"{s // size}{unit}"
    return f"{s}s"


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


def query(params: dict[str, Any], **changes: Any) -> str:
    """The query string of ``params`` with ``changes`` (a ``None`` drops a key)."""
    merged = {**params, **changes}
    return urlencode({k: v for k, v in merged.items() if v not in (None, "")})


def _env() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(age=age, pretty=pretty)
    env.globals.update(query=query)
    # Shared macros as a global, not a template's import: a page's main block rendered alone
    # (a live update) does not run its template's top-level imports.
    env.globals["macros"] = env.get_template("macros.html").module
    return env


ENV = _env()


def page(
    request: Request[Any, Any, Any], template: str, session: Session | None, status: int = 200,
    **context: Any,
) -> Response[bytes]:  # fmt: skip
    """Render ``template`` (or its ``main`` block alone for a live update)."""
    started = time.perf_counter()
    tpl = ENV.get_template(template)
    values = {
        "session": session,
        "user": session.user if session else None,
        "csrf": session.csrf if session else "",
        "path": request.url.path,
        "full_path": request.url.path + (f"?{request.url.query}" if request.url.query else ""),
        "params": dict(request.query_params),
        "live": None,
        **context,
    }
    if request.headers.get(FRAGMENT_HEADER) == "main" and "main" in tpl.blocks:
        html = "".join(tpl.blocks["main"](tpl.new_context(values)))
    else:
        html = tpl.render(values)
    body = html.encode()
    took = (time.perf_counter() - started) * 1000
    return Response(
        body,
        status_code=status,
        media_type="text/html; charset=utf-8",
        headers={
            "Cache-Control": "no-store",
            "Server-Timing": f"render;dur={took:.1f}",
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "same-origin",
            "Content-Security-Policy": CSP,
        },
    )


# Scripts and styles only from this server: no inline script can run if one were injected.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
)
