"""A node agent for integration tests: the parts ``agent.loop.build`` wires, with test timings.

Each test starts an agent against the test API server (or one of its own) with a runtime of its
choosing; the agent's threads and pods are stopped when :func:`running` exits.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from agent.api import AgentApi
from agent.assignments import AssignmentSource
from agent.backoff import CrashLoopBackoff
from agent.lease import LeaseKeeper
from agent.loop import Agent, RestPodApi
from agent.machine import Reserve, detect
from agent.node import NodeConfig, NodeStatusWriter
from agent.runtime import Runtime

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
