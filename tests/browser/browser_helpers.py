"""What a browser test does besides clicking: sign in, take a screenshot, check accessibility.

Kept apart from ``conftest.py`` so tests import the helpers by name
(``from browser_helpers import assert_accessible, screenshot``) and so the infrastructure's own
tests can drive them against stand-in pages, without the API server (ADR 0062).

The accessibility check runs axe-core, the copy bundled in the ``axe-playwright-python`` wheel
(nothing is fetched), injected with ``page.evaluate``: DevTools evaluation is not subject to
the page's Content-Security-Policy, so it works on the UI's strict-CSP pages too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from axe_playwright_python.base import AXE_SCRIPT
from playwright.async_api import Page

REPO_ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO_ROOT / "build" / "ui-screenshots"
FAILURES = SCREENSHOTS / "failures"

# axe-core's impacts, least to most severe; a violation at or above FAIL_AT fails the check.
IMPACTS = ("minor", "moderate", "serious", "critical")
FAIL_AT = "serious"

_RUN_AXE = """async ([context, options]) => {
  const results = await axe.run(context === null ? document : context, options);
  return results.violations;
}"""


def safe_name(name: str) -> str:
    """``name`` as a file name: letters, digits, ``.``, ``_`` and ``-`` only."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "page"


async def screenshot(page: Page, name: str, *, full_page: bool = True) -> Path:
    """Save a PNG of ``page`` as ``build/ui-screenshots/<name>.png``; return its path."""
    stem = safe_name(name.removesuffix(".png"))
    path = SCREENSHOTS / f"{stem}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(path), full_page=full_page)
    return path


async def sign_in_at(page: Page, ui_url: str, token: str) -> None:
    """Sign in through the UI's form at ``<ui_url>/signin``; return on ``<ui_url>/``.

    The form has a field labelled "Token" and a "Sign in" button; a good token sets the session
    cookie and redirects to the overview, which answers 2xx. Anything else fails with the page's
    text.
    """
    base = ui_url.rstrip("/")
    await page.goto(f"{base}/signin")
    await page.get_by_label("Token", exact=True).fill(token)
    async with page.expect_navigation() as navigation:
        await page.get_by_role("button", name="Sign in", exact=True).click()
    response = await navigation.value
    status = response.status if response is not None else 0
    if page.url != f"{base}/" or not 200 <= status < 300:
        body = await page.locator("body").inner_text()
        raise AssertionError(
            f"sign-in ended at {page.url} with HTTP {status}, expected {base}/ with 2xx;"
            f" page text:\n{body[:2000]}"
        )


async def axe_violations(
    page: Page, *, context: str | None = None, disable: Iterable[str] = ()
) -> list[dict[str, Any]]:
    """axe-core's violations on ``page`` (or within the CSS selector ``context``), all impacts.

    ``disable`` names axe rules to skip (e.g. ``"color-contrast"``); say why where it is used.
    """
    if not await page.evaluate("typeof window.axe !== 'undefined'"):
        await page.evaluate(AXE_SCRIPT)
    options: dict[str, Any] = {"resultTypes": ["violations"]}
    disabled = list(disable)
    if disabled:
        options["rules"] = {rule: {"enabled": False} for rule in disabled}
    violations: list[dict[str, Any]] = await page.evaluate(_RUN_AXE, [context, options])
    return violations


def is_blocking(violation: dict[str, Any], fail_at: str = FAIL_AT) -> bool:
    """Whether ``violation``'s impact is ``fail_at`` or worse (an unknown impact counts)."""
    impact = violation.get("impact")
    if impact not in IMPACTS:
        return True
    return IMPACTS.index(impact) >= IMPACTS.index(fail_at)


def format_violations(violations: list[dict[str, Any]], url: str = "") -> str:
    """A readable report: each rule with its impact, help link and the elements it caught."""
    lines = [f"{len(violations)} accessibility violation(s)" + (f" on {url}" if url else "")]
    for v in violations:
        lines.append(f"- {v['id']} ({v.get('impact')}): {v.get('help', '')}")
        lines.append(f"  {v.get('helpUrl', '')}")
        for node in v.get("nodes", []):
            target = ", ".join(str(t) for t in node.get("target", []))
            html = " ".join(str(node.get("html", "")).split())
            if len(html) > 200:
                html = html[:197] + "..."
            lines.append(f"  * {target}: {html}")
            summary = str(node.get("failureSummary", "")).strip()
            for line in summary.splitlines():
                lines.append(f"      {line.strip()}")
    return "\n".join(lines)


async def assert_accessible(
    page: Page,
    *,
    context: str | None = None,
    disable: Iterable[str] = (),
    fail_at: str = FAIL_AT,
) -> list[dict[str, Any]]:
    """Fail if axe-core finds a violation of impact ``fail_at`` (serious) or worse on ``page``.

    Returns every violation found (the milder ones included) so a test can look further.
    """
    violations = await axe_violations(page, context=context, disable=disable)
    blocking = [v for v in violations if is_blocking(v, fail_at)]
    if blocking:
        raise AssertionError(format_violations(blocking, page.url))
    return violations
