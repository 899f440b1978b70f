"""The operator's debugging loop in a real browser, against the whole stack ``make up`` runs.

Real controllers, scheduler and three local agents (pods are host processes): sign in; watch
a Deployment's pods appear live; scale it with a reason and find the reason and the principal
in the history; roll out a bad version, see the stall and its reason, roll it back from the
history page; read a pending pod's scheduler reason; follow a pod's log; cordon and drain a
node and see the disruption budget that blocks it. Each step takes a screenshot
(``build/ui-screenshots/journey-*.png``) and checks every page it visits with axe.

The steps share the module's stack and one signed-in session (the browser context's cookies
are carried from the sign-in step to the next steps' pages), and build on one another: run
the module whole, with ``-x``.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from browser_helpers import assert_accessible, screenshot, sign_in_at
from journey_stack import JourneyStack, Rest, ready, running_stack, until
from playwright.async_api import Locator, Page, expect

pytestmark = pytest.mark.slow

NS = "journey"
RUN_S = 90  # controllers, scheduler and agents on a loaded 2-core machine
RUN_MS = RUN_S * 1000
PAGE_MS = 30_000
API_VERSION = "quaymaster.io/v1"
GOOD = ["python3", "-c", "import time; time.sleep(3600)"]
BAD = ["python3", "-c", "import sys; print('v2: no config, giving up'); sys.exit(1)"]
COUNTER = ["python3", "-u", "-c",
           "import itertools, time\nfor i in itertools.count(1):\n"
           "    print(f'line {i}', flush=True)\n    time.sleep(0.5)"]  # fmt: skip
SCALE_REASON = "more replicas for the evening peak"
BAD_REASON = "roll out v2 of web"
ROLLBACK_REASON = "v2 crashes at start: back to v1"
Obj = dict[str, Any]


@dataclass
class Journey:
    """What the steps share: the stack, an admin REST client, the signed-in cookies."""

    stack: JourneyStack
    rest: Rest
    storage: Any = None
    user: str = ""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JourneyStack]:
    with running_stack(tmp_path_factory.mktemp("journey")) as running:
        yield running


@pytest.fixture(scope="module")
async def journey(stack: JourneyStack) -> AsyncIterator[Journey]:
    rest = stack.rest()
    try:
        yield Journey(stack=stack, rest=rest)
    finally:
        await rest.close()


async def open_page(new_page: Any, journey: Journey) -> Page:
    """A page in a fresh context carrying the journey's session (signing in if none yet);
    confirmation dialogs are accepted, as the operator would."""
    options: dict[str, Any] = {"ignore_https_errors": True}
    if journey.storage is not None:
        options["storage_state"] = journey.storage
    page: Page = await new_page(**options)
    page.on("dialog", lambda dialog: dialog.accept())
    if journey.storage is None:
        await sign_in_at(page, journey.stack.ui, journey.stack.token)
        journey.storage = await page.context.storage_state()
        journey.user = (await page.locator("form.who span").inner_text()).strip()
    return page


@pytest.fixture
async def page(new_page: Any, journey: Journey) -> Page:
    return await open_page(new_page, journey)


def container(command: list[str], cpu: str = "10m") -> Obj:
    return {"name": "main", "image": "local/python", "command": command,
            "resources": {"requests": {"cpu": cpu, "memory": "16Mi"}}}  # fmt: skip


def deployment(name: str, replicas: int, command: list[str]) -> Obj:
    labels = {"app": name}
    return {"apiVersion": API_VERSION, "kind": "Deployment",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "progressDeadlineSeconds": 15,
                     "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [container(command)],
                                           "terminationGracePeriodSeconds": 2}}}}  # fmt: skip


def pod(name: str, command: list[str], cpu: str = "10m") -> Obj:
    return {"apiVersion": API_VERSION, "kind": "Pod",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"containers": [container(command, cpu)],
                     "terminationGracePeriodSeconds": 2}}  # fmt: skip


def action_form(page: Page, button: str | re.Pattern[str]) -> Locator:
    """The action form whose submit button is called ``button``."""
    return page.locator("form.action", has=page.get_by_role("button", name=button, exact=True))


async def rolled_out(rest: Rest, name: str, replicas: int) -> Obj | None:
    dep = await rest.get("Deployment", NS, name)
    status, meta = dep.get("status") or {}, dep["metadata"]
    done = (
        int(status.get("observedGeneration") or 0) >= int(meta.get("generation") or 0)
        and status.get("replicas") == status.get("updatedReplicas") == replicas
        and status.get("availableReplicas") == replicas
    )
    return dep if done else None


async def test_1_sign_in_through_the_form(new_page: Any, journey: Journey) -> None:
    page: Page = await new_page(ignore_https_errors=True)
    await page.goto(f"{journey.stack.ui}/signin")
    await assert_accessible(page)
    await screenshot(page, "journey-1-sign-in")
    await sign_in_at(page, journey.stack.ui, journey.stack.token)
    await expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    await expect(page.get_by_role("heading", level=1)).to_be_visible()
    await assert_accessible(page)
    await screenshot(page, "journey-1-overview")
    journey.storage = await page.context.storage_state()
    journey.user = (await page.locator("form.who span").inner_text()).strip()
    assert journey.user


async def test_2_a_deployments_pods_appear_live(page: Page, journey: Journey) -> None:
    await journey.rest.create("Namespace", None, {
        "apiVersion": API_VERSION, "kind": "Namespace", "metadata": {"name": NS}})  # fmt: skip
    await page.goto(f"{journey.stack.ui}/pods?ns={NS}")
    await expect(page.get_by_role("heading", name="Pods", exact=True)).to_be_visible()
    await expect(page.locator("main#main")).to_have_attribute("data-live", "open",
                                                             timeout=PAGE_MS)  # fmt: skip
    await assert_accessible(page)
    await page.evaluate("window.journeyMark = 'not reloaded'")
    await journey.rest.create("Deployment", NS, deployment("web", 2, GOOD))
    rows = page.locator(f'tr[data-pod^="{NS}/web-"]')
    await expect(rows).to_have_count(2, timeout=RUN_MS)
    await screenshot(page, "journey-2-pods-appear")
    await expect(rows.filter(has_text="Running")).to_have_count(2, timeout=RUN_MS)
    await expect(page.locator("main[data-refreshed]")).to_have_count(1)
    assert await page.evaluate("window.journeyMark") == "not reloaded"
    await assert_accessible(page)
    await screenshot(page, "journey-2-pods-running")


async def test_3_scale_with_a_reason_that_lands_in_the_history(
    page: Page, journey: Journey
) -> None:
    url = f"{journey.stack.ui}/workloads/deployments/{NS}/web"
    await page.goto(url)
    await expect(page.get_by_role("heading", name="Deployment web")).to_be_visible()
    await assert_accessible(page)
    form = action_form(page, "Scale")
    await form.get_by_label("Replicas").fill("3")
    await form.get_by_label("Reason").fill(SCALE_REASON)
    await form.get_by_role("button", name="Scale").click()
    await expect(page.get_by_role("status").filter(has_text="deployment/web scaled to 3")
                 ).to_be_visible(timeout=PAGE_MS)  # fmt: skip
    rows = page.locator(f'section[aria-labelledby="pods-h"] tr[data-pod^="{NS}/web-"]')
    await expect(rows).to_have_count(3, timeout=RUN_MS)
    await expect(rows.filter(has_text="Running")).to_have_count(3, timeout=RUN_MS)
    await assert_accessible(page)
    await screenshot(page, "journey-3-scaled")

    entries = await journey.rest.history(NS, kind="Deployment", name="web")
    scaled = [e for e in entries if e.get("reason") == SCALE_REASON]
    assert scaled, [(e.get("verb"), e.get("reason"), e.get("principal")) for e in entries]
    assert scaled[0]["principal"] == journey.user
    assert (scaled[0].get("after") or {}).get("spec", {}).get("replicas") == 3, scaled[0]


async def test_4_a_bad_rollout_stalls_and_is_rolled_back_from_the_history(
    page: Page, journey: Journey
) -> None:
    url = f"{journey.stack.ui}/workloads/deployments/{NS}/web"
    await page.goto(url)
    await expect(page.get_by_role("heading", name="Deployment web")).to_be_visible()
    bad = {"spec": {"template": {"spec": {"containers": [container(BAD)]}}}}
    await journey.rest.patch("Deployment", NS, "web", bad, reason=BAD_REASON)
    stall = page.locator("div.stalled", has_text="The rollout has stalled")
    await expect(stall).to_contain_text("ProgressDeadlineExceeded", timeout=RUN_MS)
    await expect(stall).to_contain_text("has timed out progressing")
    dep = await journey.rest.get("Deployment", NS, "web")
    progressing = next(c for c in dep["status"]["conditions"] if c["type"] == "Progressing")
    await expect(stall).to_contain_text(progressing["message"])
    failing = page.locator('section[aria-labelledby="pods-h"] td.reason',
                           has_text=re.compile("CrashLoopBackOff|Error"))  # fmt: skip
    await expect(failing.first).to_be_visible(timeout=RUN_MS)
    await assert_accessible(page)
    await screenshot(page, "journey-4-stalled")

    await page.goto(f"{journey.stack.ui}/history/deployments/{NS}/web")
    await expect(page.get_by_role("heading", name=re.compile("History of Deployment"))
                 ).to_be_visible()  # fmt: skip
    await assert_accessible(page)
    row = page.locator("tr[data-history]", has_text=BAD_REASON)
    await expect(row).to_have_count(1)
    await expect(row).to_contain_text(journey.user)
    await screenshot(page, "journey-4-history")
    await row.get_by_label("Reason").fill(ROLLBACK_REASON)
    await row.get_by_role("button", name="Roll back to this").click()
    await expect(page.get_by_role("status").filter(has_text="pod template put back")
                 ).to_be_visible(timeout=PAGE_MS)  # fmt: skip
    rolled_back = page.locator("tr[data-history]", has_text=ROLLBACK_REASON)
    await expect(rolled_back).to_have_count(1)
    await expect(rolled_back).to_contain_text(journey.user)
    await screenshot(page, "journey-4-rolled-back")

    dep = await journey.rest.get("Deployment", NS, "web")
    assert dep["spec"]["template"]["spec"]["containers"][0]["command"] == GOOD
    await until(lambda: rolled_out(journey.rest, "web", 3), RUN_S, "web to roll out again")
    await page.goto(url)
    await expect(page.get_by_text("successfully rolled out")).to_be_visible(timeout=PAGE_MS)
    await expect(stall).to_have_count(0)
    await screenshot(page, "journey-4-recovered")


async def test_5_a_pending_pods_reason_is_the_schedulers(page: Page, journey: Journey) -> None:
    await journey.rest.create("Pod", NS, pod("hungry", GOOD, cpu="1000"))

    async def scheduler_said() -> str | None:
        got = await journey.rest.get("Pod", NS, "hungry")
        for c in (got.get("status") or {}).get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("status") == "False":
                return str(c.get("message") or "") or None
        return None

    message = await until(scheduler_said, RUN_S, "the scheduler's reason for hungry")
    assert message.startswith("0/3 nodes"), message  # with its node counts

    await page.goto(f"{journey.stack.ui}/pods")
    filters = page.get_by_role("search")
    await filters.get_by_label("Namespace").fill(NS)
    await filters.get_by_label("Phase").select_option("Pending")
    await filters.get_by_role("button", name="Filter").click()
    await expect(page).to_have_url(re.compile(r"phase=Pending"))
    row = page.locator(f'tr[data-pod="{NS}/hungry"]')
    await expect(row.locator("td.reason")).to_contain_text(message, timeout=PAGE_MS)
    await expect(page.locator("tr[data-pod]")).to_have_count(1)
    await assert_accessible(page)
    await screenshot(page, "journey-5-pending-list")

    await row.get_by_role("link", name="hungry").click()
    await expect(page.get_by_role("heading", name=f"Pod {NS}/hungry")).to_be_visible()
    await expect(page.locator("dd[data-pending-reason]")).to_contain_text(message)
    await expect(page.locator('tr[data-condition="PodScheduled"]')).to_contain_text(message)
    await assert_accessible(page)
    await screenshot(page, "journey-5-pending-pod")
    await journey.rest.delete("Pod", NS, "hungry")


def last_number(text: str) -> int:
    numbers = [int(n) for n in re.findall(r"^line (\d+)$", text, re.MULTILINE)]
    return max(numbers, default=0)


async def test_6_follow_a_pods_log(page: Page, journey: Journey) -> None:
    await journey.rest.create("Pod", NS, pod("counter", COUNTER))

    async def running() -> Obj | None:
        got = await journey.rest.get("Pod", NS, "counter")
        return got if ready(got) else None

    await until(running, RUN_S, "pod counter to run")
    await page.goto(f"{journey.stack.ui}/pods/{NS}/counter")
    await page.get_by_role("link", name="Logs", exact=True).click()
    await expect(page.get_by_role("heading", name=f"Logs of pod {NS}/counter")).to_be_visible()
    log = page.get_by_role("log")
    await expect(log).to_contain_text("line 1", timeout=PAGE_MS)
    await assert_accessible(page)
    before = last_number(await log.inner_text())
    follow = page.get_by_role("button", name="Follow", exact=True)
    await follow.click()
    await expect(page.get_by_role("button", name="Stop following")).to_have_attribute(
        "aria-pressed", "true")  # fmt: skip
    await expect(page.locator("#log-state")).to_contain_text("Following")
    await expect(log).to_contain_text(re.compile(rf"^line {before + 6}$", re.MULTILINE),
                                      timeout=PAGE_MS)  # fmt: skip
    seen = last_number(await log.inner_text())
    await expect(log).to_contain_text(re.compile(rf"^line {seen + 2}$", re.MULTILINE),
                                      timeout=PAGE_MS)  # fmt: skip
    await assert_accessible(page)
    await screenshot(page, "journey-6-following")
    await page.get_by_role("button", name="Stop following").click()
    await expect(page.locator("#log-state")).to_have_text("Stopped following.")
    await journey.rest.delete("Pod", NS, "counter")


async def test_7_cordon_and_drain_a_node_blocked_by_a_budget(page: Page, journey: Journey) -> None:
    rest = journey.rest
    await rest.create("Deployment", NS, deployment("guarded", 2, GOOD))
    await rest.create("PodDisruptionBudget", NS, {
        "apiVersion": API_VERSION, "kind": "PodDisruptionBudget",
        "metadata": {"name": "guarded", "namespace": NS},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "guarded"}}}})  # fmt: skip
    await until(lambda: rolled_out(rest, "guarded", 2), RUN_S, "guarded to roll out")

    async def budget_holds() -> Obj | None:
        got = await rest.get("PodDisruptionBudget", NS, "guarded")
        status = got.get("status") or {}
        full = status.get("currentHealthy") == 2 and status.get("disruptionsAllowed") == 0
        return got if full else None

    await until(budget_holds, RUN_S, "the budget to count two healthy pods")
    pods = await rest.items("Pod", NS, label_selector="app=guarded")
    victim = next(p for p in pods if ready(p))
    node, victim_name = victim["spec"]["nodeName"], victim["metadata"]["name"]

    await page.goto(f"{journey.stack.ui}/nodes/{node}")
    await expect(page.get_by_role("heading", name=f"Node {node}")).to_be_visible()
    await assert_accessible(page)
    cordon = action_form(page, "Cordon")
    await cordon.get_by_label("Reason").fill("disk replacement on this host")
    await cordon.get_by_role("button", name="Cordon").click()
    await expect(page.get_by_role("status").filter(has_text=f"node/{node} cordoned")
                 ).to_be_visible(timeout=PAGE_MS)  # fmt: skip
    await expect(page.get_by_text("Cordoned", exact=True)).to_be_visible()
    await screenshot(page, "journey-7-cordoned")

    drain = action_form(page, re.compile("^Drain"))
    await drain.get_by_label("Reason").fill("disk replacement on this host")
    await drain.get_by_role("button", name=re.compile("^Drain")).click()
    await expect(page).to_have_url(re.compile("blocked"), timeout=PAGE_MS)  # the pass's outcome
    flash = page.locator("p.flash")  # the drain's outcome, not the cordon's before it
    await expect(flash).to_have_count(1)
    await expect(flash).to_contain_text("blocked by PodDisruptionBudget")
    blocker = page.locator(f'tr[data-budget="{NS}/guarded"]')
    await expect(blocker).to_be_visible(timeout=PAGE_MS)
    await expect(blocker).to_contain_text("minAvailable 2")
    await expect(blocker.get_by_role("link", name=victim_name)).to_be_visible()
    await expect(page.get_by_text(re.compile(r"Blocked by 1 disruption budget"))).to_be_visible()
    await expect(page.get_by_text("Cordoned", exact=True)).to_be_visible()
    await assert_accessible(page)
    await screenshot(page, "journey-7-drain-blocked")

    uncordon = action_form(page, "Uncordon")
    await uncordon.get_by_label("Reason").fill("disk replaced")
    await uncordon.get_by_role("button", name="Uncordon").click()
    await expect(page.get_by_text("Schedulable", exact=True)).to_be_visible(timeout=PAGE_MS)
    await screenshot(page, "journey-7-uncordoned")
    got = await rest.get("Node", None, node)
    assert not (got.get("spec") or {}).get("unschedulable")
