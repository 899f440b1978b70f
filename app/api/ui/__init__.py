"""The web admin UI, served by the API process at ``/ui`` (ADR 0060).

Server-rendered pages (Jinja2) and one small script of our own (``static/ui.js``): no
front-end build, no assets from elsewhere. Every read and action is a REST request in this
process as the signed-in principal (:mod:`app.api.ui.inproc`), so the UI can do nothing the
API would not let that principal do, and its writes reach the history with the principal
and the reason typed in the form. ``HANDLERS`` are the routes, static files included.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from litestar.static_files import create_static_files_router

from app.api.ui import live
from app.api.ui.pages import (
    events,
    history,
    nodes,
    overview,
    pod_detail,
    pod_logs,
    pods,
    services,
    signin,
    workloads,
)

STATIC = Path(__file__).parent / "static"

HANDLERS: list[Any] = [
    *signin.HANDLERS,
    *live.HANDLERS,
    *pods.HANDLERS,
    *pod_detail.HANDLERS,
    *pod_logs.HANDLERS,
    *services.HANDLERS,
    *events.HANDLERS,
    *history.HANDLERS,
    *workloads.HANDLERS,
    *nodes.HANDLERS,
    *overview.HANDLERS,
    create_static_files_router(path="/ui/static", directories=[STATIC], include_in_schema=False),
]
