"""The asyncio shell of flow control: waiting, admission on release, 429, and a client that
goes away while it waits. No wall-clock sleeps: the waits end by release or cancellation."""

from __future__ import annotations

import asyncio

import pytest

from app.api.fairness import FlowControl, metric_lines
from app.core import fairness as f
from app.core.errors import TooManyRequests
from app.store.tokens import User

ALICE = User("alice", ("system:authenticated",))
BOB = User("bob", ("system:authenticated",))
TOTAL = 10  # global-default gets one seat


def control(**config: float) -> FlowControl:
    c = FlowControl(TOTAL, f.Config(**{"wait_limit": 3600.0, **config}), None)  # type: ignore[arg-type]
    assert c.dispatcher.levels[f.GLOBAL_DEFAULT].limit == 1
    return c


async def hold(c: FlowControl, user: User, entered: asyncio.Event, leave: asyncio.Event) -> None:
    async with c.seat(user, 1):
        entered.set()
        await leave.wait()


async def test_a_waiting_request_runs_when_the_seat_is_released() -> None:
    c = control()
    first_in, first_out = asyncio.Event(), asyncio.Event()
    second_in, second_out = asyncio.Event(), asyncio.Event()
    first = asyncio.create_task(hold(c, ALICE, first_in, first_out))
    await first_in.wait()
    second = asyncio.create_task(hold(c, BOB, second_in, second_out))
    await asyncio.sleep(0)
    assert c.dispatcher.levels[f.GLOBAL_DEFAULT].queued == 1 and not second_in.is_set()
    first_out.set()
    await first
    await second_in.wait()
    second_out.set()
    await second
    lv = c.dispatcher.levels[f.GLOBAL_DEFAULT]
    assert (lv.in_use, lv.queued, lv.dispatched) == (0, 0, 2)


async def test_a_full_queue_is_refused_with_retry_after() -> None:
    c = control(queue_length=0)
    entered, leave = asyncio.Event(), asyncio.Event()
    held = asyncio.create_task(hold(c, ALICE, entered, leave))
    await entered.wait()
    with pytest.raises(TooManyRequests) as refused:
        async with c.seat(ALICE, 1):
            pass
    assert refused.value.code == 429
    assert "queue is full" in str(refused.value)
    leave.set()
    await held
    text = "\n".join(metric_lines(c))
    assert 'qm_apf_level_rejected_total{level="global-default",reason="queue-full"} 1' in text
    assert 'qm_apf_flow_rejected_total{level="global-default",flow="alice"} 1' in text


async def test_a_client_gone_while_queued_leaves_its_queue() -> None:
    c = control()
    entered, leave = asyncio.Event(), asyncio.Event()
    held = asyncio.create_task(hold(c, ALICE, entered, leave))
    await entered.wait()
    gone = asyncio.create_task(hold(c, BOB, asyncio.Event(), asyncio.Event()))
    await asyncio.sleep(0)
    assert c.dispatcher.levels[f.GLOBAL_DEFAULT].queued == 1
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    leave.set()
    await held
    lv = c.dispatcher.levels[f.GLOBAL_DEFAULT]
    assert (lv.in_use, lv.queued, lv.dispatched) == (0, 0, 1)


async def test_more_servers_mean_fewer_seats_here() -> None:
    c = FlowControl(400, f.Config(), None)
    assert c.dispatcher.levels[f.GLOBAL_DEFAULT].limit == 41
    c.set_servers(2)
    assert c.dispatcher.levels[f.GLOBAL_DEFAULT].limit == 20
    assert "qm_apf_api_servers 2" in metric_lines(c)
