"""``Warning`` headers: each request's warnings reach its response's start, escaped as
Kubernetes sends them, and the client reads them back."""

from __future__ import annotations

import asyncio
from typing import Any

from app.api.warning_headers import MAX_WARNINGS, WarningHeaders, header_value, warn
from app.client.decode import warnings


def run(app: Any) -> list[tuple[bytes, bytes]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: Any) -> None:
        sent.append(message)

    asyncio.run(WarningHeaders(app)({"type": "http"}, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    return list(start["headers"])


def app_warning(*texts: str) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        warn(*texts)
        await send({"type": "http.response.start", "status": 201,
                    "headers": [(b"content-type", b"application/json")]})  # fmt: skip
        await send({"type": "http.response.body", "body": b"{}"})

    return app


def test_each_distinct_warning_is_one_header() -> None:
    headers = run(app_warning('would violate "p"', 'would violate "p"', "other"))
    assert headers == [
        (b"content-type", b"application/json"),
        (b"warning", b'299 - "would violate \\"p\\""'),
        (b"warning", b'299 - "other"'),
    ]


def test_no_warning_no_header_and_a_bound() -> None:
    assert run(app_warning()) == [(b"content-type", b"application/json")]
    many = run(app_warning(*(f"w{i}" for i in range(MAX_WARNINGS + 5))))
    assert len([h for h in many if h[0] == b"warning"]) == MAX_WARNINGS


def test_outside_a_request_warn_does_nothing() -> None:
    warn("nobody listens")  # no error, nothing kept for a later request
    assert run(app_warning()) == [(b"content-type", b"application/json")]


def test_the_client_reads_back_what_the_server_sent() -> None:
    texts = ['would violate AdmissionPolicy "x": a \\ b', 'a\\"', "plain", "ünïcode"]
    back = warnings([header_value(t) for t in texts])
    assert back[:3] == texts[:3]
    assert back[3] == "?n?code"  # a header carries ASCII
    assert warnings(["not quoted"]) == ["not quoted"]
