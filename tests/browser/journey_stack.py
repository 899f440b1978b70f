"""The whole ``make up`` stack for the operator's journey through the UI, and a REST client.

The journey (``test_ui_journey.py``) needs what an operator has: real controllers, the
scheduler and three local agents running pods as processes, so it starts the stack ``make up``
runs (``tests/up_stack.py``) once for the module, under a network tag of its own so it can run
beside a developer's stack. Setting up the scenario (creating a Deployment, rolling out a bad
version) goes through the REST API with the bootstrap token, as a script or ``qm`` would;
what the operator does, the browser does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
from up_stack import UpStack

from app.client import build
from app.core.kinds import BY_KIND

T = TypeVar("T")
Obj = dict[str, Any]
NODES = ("local-a", "local-b", "local-c")


@dataclass
class JourneyStack:
    """A running ``make up``: its API's URL, admin (bootstrap) token and CA file."""

    up: UpStack
    url: str
    token: str
    ca: Path

    @property
    def ui(self) -> str:
        return f"{self.url}/ui"

    def rest(self) -> Rest:
        return Rest(self.url, self.token, self.ca)


@contextlib.contextmanager
def running_stack(tmp: Path, timeout: float = 180) -> Iterator[JourneyStack]:
    """``make up`` in ``tmp``, its three local nodes Ready; stopped (Ctrl-C) on the way out."""
    up = UpStack(tmp, tag=f"j{os.getpid() % 10**7}")  # beside a developer's make up
    try:
        up.start(timeout=timeout)
        state = tmp / "state"
        stack = JourneyStack(
            up=up,
            url=f"https://127.0.0.1:{up.port}",
            token=(state / "bootstrap-token").read_text().strip(),
            ca=state / "pki" / "ca.crt",
        )
        _wait_for_nodes(stack, timeout)
        yield stack
    finally:
        up.stop(timeout=60)


def _wait_for_nodes(stack: JourneyStack, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    headers = {"Authorization": f"Bearer {stack.token}"}
    ready_nodes: set[str] = set()
    with httpx.Client(base_url=stack.url, verify=trusting(stack.ca), headers=headers) as client:
        while ready_nodes != set(NODES):
            if time.monotonic() > deadline:
                raise AssertionError(f"nodes ready: {sorted(ready_nodes)}\n{stack.up.log()}")
            if stack.up.proc is not None and stack.up.proc.poll() is not None:
                raise AssertionError(f"make up exited\n{stack.up.log()}")
            try:
                answer = client.get(build.path(BY_KIND["Node"], None))
            except httpx.HTTPError:
                answer = None
            if answer is not None and answer.status_code == 200:
                ready_nodes = {n["metadata"]["name"] for n in answer.json()["items"]
                               if ready(n)} & set(NODES)  # fmt: skip
            time.sleep(0.5)


def trusting(ca: Path) -> ssl.SSLContext:
    """A TLS context that trusts the stack's own CA."""
    return ssl.create_default_context(cafile=str(ca))


def ready(obj: Obj) -> bool:
    """A pod (or node) whose Ready condition is True."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


class Rest:
    """The REST API as the stack's admin, over httpx: what a script would send."""

    def __init__(self, url: str, token: str, ca: Path) -> None:
        self.client = httpx.AsyncClient(
            base_url=url, verify=trusting(ca), timeout=30.0,
            headers={"Authorization": f"Bearer {token}"},
        )  # fmt: skip

    async def close(self) -> None:
        await self.client.aclose()

    async def send(self, request: build.Request, reason: str = "") -> Any:
        headers = {"Content-Type": request.content_type}
        if reason:
            headers["X-Reason"] = reason
        answer = await self.client.request(
            request.method, request.path, params=list(request.params),
            content=request.body, headers=headers,
        )  # fmt: skip
        if answer.status_code >= 400:
            raise AssertionError(
                f"{request.method} {request.target}: HTTP {answer.status_code} {answer.text}"
            )
        return answer.json() if answer.content else None

    async def get(self, kind: str, ns: str | None, name: str) -> Obj:
        got: Obj = await self.send(build.get(BY_KIND[kind], ns, name))
        return got

    async def create(self, kind: str, ns: str | None, body: Obj, reason: str = "") -> Obj:
        made: Obj = await self.send(build.create(BY_KIND[kind], ns, body), reason)
        return made

    async def patch(self, kind: str, ns: str | None, name: str, body: Any,
                    reason: str = "") -> Obj:  # fmt: skip
        request = build.patch(BY_KIND[kind], ns, name, body, build.MERGE_PATCH)
        patched: Obj = await self.send(request, reason)
        return patched

    async def delete(self, kind: str, ns: str | None, name: str) -> None:
        await self.send(build.delete(BY_KIND[kind], ns, name))

    async def items(self, kind: str, ns: str | None, label_selector: str | None = None
                    ) -> list[Obj]:  # fmt: skip
        listed = await self.send(
            build.list_page(BY_KIND[kind], ns, None, label_selector=label_selector)
        )
        return list(listed.get("items") or [])

    async def history(self, ns: str, **query: str) -> list[Obj]:
        listed = await self.send(build.history(ns, **query))
        return list(listed.get("items") or [])


async def until(check: Callable[[], Awaitable[T | None]], timeout: float, what: str) -> T:
    """Poll ``check`` every half second until it returns something truthy; fail after
    ``timeout`` seconds saying ``what`` was awaited and what ``check`` last returned."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; last: {last!r}")
