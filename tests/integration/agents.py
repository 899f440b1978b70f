"""A node agent for integration tests: the parts ``agent.loop.build`` wires, with test timings.

Each test starts an agent against the test API server (or one of its own) with a runtime of its
choosing; the agent's threads and pods are stopped when :func:`running` exits. The agent joins
as ``make up``'s do: the test's administrator client creates a one-time bootstrap token for the
node, and the agent exchanges it for its node's own credential (:func:`join`), which all of its
clients use; the test keeps its administrator client for what it does itself.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from agent import credentials
from agent.api import AgentApi
from agent.assignments import AssignmentSource
from agent.backoff import CrashLoopBackoff
from agent.lease import LeaseKeeper
from agent.loop import Agent, RestPodApi
from agent.machine import Reserve, detect
from agent.node import NodeConfig, NodeStatusWriter
from agent.runtime import Runtime
from app.client import build

TEST_RESERVE = Reserve(100, 256 << 20)


def make_agent(
    api: AgentApi,
    runtime: Runtime,
    node: str,
    *,
    reserve: Reserve = TEST_RESERVE,
    address: str = "",
    **options: Any,
) -> Agent:
    """An agent for ``node``: a 2 s watch timeout, a 0.5 s first crash backoff, 0.1 s ticks;
    ``options`` override :class:`~agent.loop.Agent`'s keyword arguments."""
    api = join(api, node)
    machine = detect()
    settings: dict[str, Any] = {
        "backoff": CrashLoopBackoff(initial=0.5),
        "host_ip": "127.0.0.1",
        "poll": 0.1,
        "tick": 0.1,
        **options,
    }
    return Agent(
        runtime,
        RestPodApi(api),
        AssignmentSource(api.clone(), node, watch_timeout=2),
        LeaseKeeper(api.clone(), node),
        machine.allocatable(reserve),
        node_status=NodeStatusWriter(
            api, NodeConfig(node, reserve=reserve, address=address), machine
        ),
        **settings,
    )


def bootstrap_token(admin: AgentApi, node: str | None = None, uses: int = 1) -> str:
    """A new bootstrap token (for ``node`` only, when given), created by ``admin``."""
    spec: dict[str, Any] = {"uses": uses, "ttlSeconds": 600}
    if node is not None:
        spec["nodeName"] = node
    return str(admin.call(build.bootstrap_token(spec))["status"]["token"])


def join(admin: AgentApi, node: str) -> AgentApi:
    """A client of ``admin``'s server with ``node``'s own credential, joined as an agent does."""
    secret = bootstrap_token(admin, node)
    token = credentials.join(admin.server, secret, node, ca_file=admin.ca_file)
    return AgentApi(admin.server, token, ca_file=admin.ca_file)


@contextlib.asynccontextmanager
async def running(agent: Agent) -> AsyncIterator[Agent]:
    """Run ``agent`` until the block ends; then it stops its threads and every pod."""
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        yield agent
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
