"""Fixtures for the browser tier: Debian's Chromium driven by Playwright's async API (ADR 0062).

One Chromium runs for the whole session; each test gets a fresh browser context (no cookies,
no storage) and page. The async API is used because the suite runs every test and fixture on
one session-wide asyncio loop (pytest-asyncio, ``asyncio_mode = "auto"``): Playwright's sync
API refuses to run while a loop is running, and the async one lets a test mix browser steps
with the project's async clients. Browser tests are ``async def``.

Fixtures:
    browser -> Browser: the session's Chromium (``/usr/bin/chromium``, headless).
    new_page -> async (**context_options) -> Page: a page in a fresh context of its own
        (e.g. ``viewport={"width": 390, "height": 844}``); closed after the test.
    page -> Page: ``await new_page()``, 1280x800.
    ui_url -> str: ``<api_server.url>/ui`` (starts the session's API server).
    sign_in -> async (page, token=None) -> None: signs ``page`` in at ``ui_url`` (the
        session's bootstrap token by default), leaving it on the overview.
    signed_in_page -> Page: ``page`` signed in with the bootstrap token.

Helpers to import: ``from browser_helpers import assert_accessible, screenshot``.

A failed test leaves, for each of its pages, a screenshot and the page's console output in
``build/ui-screenshots/failures/``; with ``QM_TEST_BROWSER_TRACE=1`` a Playwright trace too
(``.venv/bin/playwright show-trace <file>.zip``).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from pathlib import Path
from typing import Any

import pytest
from browser_helpers import FAILURES, safe_name, sign_in_at
from playwright.async_api import Browser, BrowserContext, Page, async_playwright, expect

from app.devstack.apiserver import ApiServer

CHROMIUM = Path(os.environ.get("QM_TEST_CHROMIUM", "/usr/bin/chromium"))
# Root needs --no-sandbox (Playwright adds it too unless asked for the sandbox). Shared memory
# under /tmp, not a container's small /dev/shm. No GPU here: software compositing only.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"]
VIEWPORT = {"width": 1280, "height": 800}
TRACE = os.environ.get("QM_TEST_BROWSER_TRACE") == "1"
# Playwright's defaults (30 s for actions, 5 s for expect) suit neither a wedged page nor a
# loaded 2-core machine: 15 s and 10 s.
ACTION_TIMEOUT_MS = 15_000
expect.set_options(timeout=10_000)

_HERE = Path(__file__).resolve().parent
_CALL_FAILED = pytest.StashKey[bool]()

NewPage = Callable[..., Awaitable[Page]]
SignIn = Callable[..., Awaitable[None]]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test of this tier carries the ``browser`` marker (``-m "not browser"`` skips it)."""
    for item in items:
        if item.path.is_relative_to(_HERE):
            item.add_marker(pytest.mark.browser)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Remember whether the test's call failed, for the page fixture's teardown."""
    report = yield
    if report.when == "call" and report.failed:
        item.stash[_CALL_FAILED] = True
    return report


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Browser]:
    """Headless Debian Chromium for the session (never a browser Playwright downloads)."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} not found: `make deps` installs Debian's chromium", pytrace=False)
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=CHROMIUM_ARGS,
            chromium_sandbox=False,
            headless=True,
        )
        try:
            yield launched
        finally:
            await launched.close()


async def _keep_failure(context: BrowserContext, page: Page, log: list[str], stem: str) -> None:
    FAILURES.mkdir(parents=True, exist_ok=True)
    if not page.is_closed():
        try:
            await page.screenshot(path=str(FAILURES / f"{stem}.png"), full_page=True)
        except Exception as exc:
            log.append(f"[screenshot failed] {exc}")
        log.insert(0, f"url: {page.url}")
    (FAILURES / f"{stem}.log").write_text("\n".join(log) + "\n")
    if TRACE:
        await context.tracing.stop(path=str(FAILURES / f"{stem}.zip"))


@pytest.fixture
async def new_page(browser: Browser, request: pytest.FixtureRequest) -> AsyncIterator[NewPage]:
    """A factory of pages, each in a fresh context; failure artifacts kept at teardown."""
    opened: list[tuple[BrowserContext, Page, list[str]]] = []

    async def open_page(**context_options: Any) -> Page:
        context_options.setdefault("viewport", VIEWPORT)
        context = await browser.new_context(**context_options)
        context.set_default_timeout(ACTION_TIMEOUT_MS)
        if TRACE:
            await context.tracing.start(screenshots=True, snapshots=True, sources=False)
        page = await context.new_page()
        log: list[str] = []
        page.on("console", lambda msg: log.append(f"[console.{msg.type}] {msg.text}"))
        page.on("pageerror", lambda exc: log.append(f"[pageerror] {exc}"))
        page.on("requestfailed", lambda req: log.append(f"[requestfailed] {req.method} {req.url}"))
        opened.append((context, page, log))
        return page

    yield open_page

    failed = request.node.stash.get(_CALL_FAILED, False)
    for number, (context, page, log) in enumerate(opened):
        if failed:
            suffix = f"-{number}" if len(opened) > 1 else ""
            await _keep_failure(context, page, log, safe_name(request.node.nodeid) + suffix)
        await context.close()


@pytest.fixture
async def page(new_page: NewPage) -> Page:
    """A page in a fresh 1280x800 context."""
    return await new_page()


@pytest.fixture(scope="session")
def ui_url(api_server: ApiServer) -> str:
    """The web UI of the session's API server, without a trailing slash."""
    return f"{api_server.url}/ui"


@pytest.fixture(scope="session")
def sign_in(ui_url: str, api_server: ApiServer) -> SignIn:
    """``await sign_in(page, token=None)``: the UI's sign-in form, bootstrap token by default."""

    async def sign_in_page(page: Page, token: str | None = None) -> None:
        await sign_in_at(page, ui_url, api_server.token if token is None else token)

    return sign_in_page


@pytest.fixture
async def signed_in_page(page: Page, sign_in: SignIn) -> Page:
    """A fresh page signed in with the bootstrap token, on the overview."""
    await sign_in(page)
    return page
