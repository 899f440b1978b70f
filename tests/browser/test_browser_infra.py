"""The browser tier's own machinery, without the UI: Chromium starts, axe-core catches what it
should and passes what it should, screenshots land in build/, and the sign-in helper drives a
stand-in of the UI's sign-in form served from a thread here.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

import pytest
from browser_helpers import SCREENSHOTS, assert_accessible, axe_violations, screenshot, sign_in_at
from playwright.async_api import Browser, Page, expect

CLEAN = """<!doctype html>
<html lang="en"><head><title>Clean</title></head>
<body><main><h1>Nodes</h1>
<form><label for="q">Filter</label><input id="q" name="q"><button>Apply</button></form>
<img src="data:image/gif;base64,R0lGODlhAQABAAAAACw=" alt="status">
</main></body></html>"""

IMAGE_WITHOUT_ALT = CLEAN.replace(' alt="status"', "")
INPUT_WITHOUT_LABEL = CLEAN.replace('<label for="q">Filter</label>', "")
# No <main>: axe's "region" and "landmark-one-main" rules, of moderate impact, which do not fail.
MODERATE_ONLY = CLEAN.replace("<main>", "<div>").replace("</main>", "</div>")

TOKEN = "s3cret-token"
SIGNIN_FORM = """<!doctype html>
<html lang="en"><head><title>Sign in</title></head><body><main><h1>Sign in</h1>
<form method="post" action="/ui/signin">
<label for="token">Token</label><input id="token" name="token" type="password">
<button type="submit">Sign in</button></form>{error}</main></body></html>"""
CSP = "default-src 'self'; script-src 'self'; style-src 'self'"


class StandIn(BaseHTTPRequestHandler):
    """The UI's sign-in contract in miniature, behind a strict Content-Security-Policy."""

    def _send(self, status: int, body: str = "", headers: dict[str, str] | None = None) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/ui/signin":
            self._send(200, SIGNIN_FORM.format(error=""))
        elif self.path == "/ui/":
            signed_in = "session=ok" in self.headers.get("Cookie", "")
            if signed_in:
                self._send(200, CLEAN.replace("Nodes", "Overview"))
            else:
                self._send(303, headers={"Location": "/ui/signin"})
        elif self.path == "/ui/no-alt":
            self._send(200, IMAGE_WITHOUT_ALT)
        else:
            self._send(404, "<!doctype html><title>404</title>")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        form = parse_qs(self.rfile.read(length).decode())
        if form.get("token") == [TOKEN]:
            cookie = "session=ok; Path=/ui; HttpOnly; SameSite=Strict"
            self._send(303, headers={"Location": "/ui/", "Set-Cookie": cookie})
        else:
            self._send(401, SIGNIN_FORM.format(error='<p role="alert">Token not accepted</p>'))

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def stand_in_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


async def test_chromium_is_debians(browser: Browser) -> None:
    assert browser.is_connected()
    assert browser.version  # e.g. "156.0.8078.114"


async def test_clean_page_passes(page: Page) -> None:
    await page.set_content(CLEAN)
    assert await assert_accessible(page) == []


@pytest.mark.parametrize(
    ("html", "rule"),
    [(IMAGE_WITHOUT_ALT, "image-alt"), (INPUT_WITHOUT_LABEL, "label")],
    ids=["image-without-alt", "input-without-label"],
)
async def test_serious_violation_fails(page: Page, html: str, rule: str) -> None:
    await page.set_content(html)
    with pytest.raises(AssertionError) as failure:
        await assert_accessible(page)
    report = str(failure.value)
    assert f"- {rule} (critical)" in report
    assert "dequeuniversity.com" in report  # the rule's help link
    # The rule can be turned off, by name, where a test says why.
    await assert_accessible(page, disable=[rule])


async def test_context_limits_the_check(page: Page) -> None:
    await page.set_content(
        IMAGE_WITHOUT_ALT.replace("<img", "<aside><img").replace('=">', '="></aside>')
    )
    with pytest.raises(AssertionError, match="image-alt"):
        await assert_accessible(page)
    await assert_accessible(page, context="form")


async def test_moderate_violation_does_not_fail(page: Page) -> None:
    await page.set_content(MODERATE_ONLY)
    violations = await assert_accessible(page)
    assert sorted((v["id"], v["impact"]) for v in violations) == [
        ("landmark-one-main", "moderate"),
        ("region", "moderate"),
    ]
    with pytest.raises(AssertionError, match="region"):
        await assert_accessible(page, fail_at="moderate")


async def test_axe_runs_under_a_strict_csp(page: Page, stand_in_url: str) -> None:
    response = await page.goto(f"{stand_in_url}/ui/no-alt")
    assert response is not None and response.headers["content-security-policy"] == CSP
    assert [v["id"] for v in await axe_violations(page)] == ["image-alt"]


async def test_sign_in_through_the_form(page: Page, stand_in_url: str) -> None:
    await sign_in_at(page, f"{stand_in_url}/ui", TOKEN)
    await expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    cookies = await page.context.cookies()
    assert [(c["name"], c["httpOnly"], c["sameSite"]) for c in cookies] == [
        ("session", True, "Strict")
    ]


async def test_sign_in_refused_says_why(page: Page, stand_in_url: str) -> None:
    with pytest.raises(AssertionError, match="Token not accepted"):
        await sign_in_at(page, f"{stand_in_url}/ui", "wrong")


async def test_screenshot_lands_in_build(page: Page) -> None:
    await page.set_content(CLEAN)
    path = await screenshot(page, "browser infra/clean page")
    assert path == SCREENSHOTS / "browser_infra_clean_page.png"
    assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


async def test_each_test_gets_a_fresh_context(page: Page, stand_in_url: str) -> None:
    """No cookie survives from the sign-in test: /ui/ sends this page back to sign in."""
    await page.goto(f"{stand_in_url}/ui/")
    assert page.url == f"{stand_in_url}/ui/signin"
    assert await page.context.cookies() == []
