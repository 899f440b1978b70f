"""The per-flow rate limit of API priority and fairness, on a fake clock: a flow sharing the
server with another flow takes at most its rate of seats per second (its level's seats times
``rate_per_seat``), however short its requests; a flow alone is limited only by the seats."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.api.fairness import RECHECK_S, FlowControl, env_config, metric_lines
from app.core import fairness as f
from app.core.errors import TooManyRequests
from app.store.tokens import User

LEVEL = f.GLOBAL_DEFAULT
SEATS = 20  # at one seat per second per seat: 20 seats/s; the bucket holds a second's worth


def dispatcher(per_seat: float = 1.0, seats: int = SEATS, **config: float) -> f.Dispatcher:
    limits = {LEVEL: seats, f.SYSTEM: 4}
    config = {"burst_s": 1.0, **config}
    return f.Dispatcher(limits, f.Config(rate_per_seat=per_seat, **config))  # type: ignore[arg-type]


def burst(d: f.Dispatcher, flow: str, n: int, now: float, seats: int = 1) -> list[f.Request]:
    """``n`` requests of ``flow`` at ``now``, each released at once if admitted."""
    out = []
    for _ in range(n):
        req = d.offer(LEVEL, flow, seats, now)
        d.release(req, now)
        out.append(req)
    return out


def test_the_rate_follows_the_levels_seats_on_each_server() -> None:
    d = f.Dispatcher(f.seat_limits(400, 1), f.Config(rate_per_seat=1.0))
    alone = {name: d.rate(lv) for name, lv in d.levels.items()}
    d.set_limits(f.seat_limits(400, 2))
    halves = {name: d.rate(lv) for name, lv in d.levels.items()}
    assert (alone[LEVEL], halves[LEVEL]) == (41, 20)
    assert alone[f.WORKLOAD_LOW] > alone[f.SYSTEM] > alone[LEVEL] > alone[f.CATCH_ALL]
    assert alone[f.EXEMPT] == halves[f.EXEMPT] == 0  # no seats, no rate: never held back


def test_a_flow_alone_is_limited_only_by_seats() -> None:
    d = dispatcher()
    reqs = burst(d, "flooder", 500, 0.0)
    assert all(r.state == "done" for r in reqs)  # 500 seats in no time, far over 20/s


def test_with_company_a_flow_gets_its_bucket_then_its_rate() -> None:
    d = dispatcher()
    burst(d, "calm", 1, 0.0)
    reqs = burst(d, "flooder", 25, 0.0)
    assert [r.state for r in reqs] == ["done"] * 20 + ["queued"] * 5  # a second's worth
    assert d.next_tick(0.0) == pytest.approx(1 / 20)
    assert d.tick(0.01) == []
    assert d.tick(0.05) == [reqs[20]]
    # Seats were free all along: the rate, not the level, held them back.
    assert d.levels[LEVEL].in_use == 1


def test_the_flows_company_is_not_held_back_by_the_flood() -> None:
    d = dispatcher()
    burst(d, "calm", 1, 0.0)
    flood = burst(d, "flooder", 30, 0.0)
    assert flood[-1].state == "queued"
    calm = d.offer(LEVEL, "calm", 1, 0.1)
    assert calm.state == "admitted"


def test_a_flood_that_had_the_server_to_itself_finds_its_bucket_spent() -> None:
    d = dispatcher()
    burst(d, "flooder", 100, 0.0)  # alone: all admitted, the bucket paid for them
    burst(d, "calm", 1, 0.0)
    late = d.offer(LEVEL, "flooder", 1, 0.0)
    assert late.state == "queued"
    assert d.next_tick(0.0) == pytest.approx(1 / 20)


def test_a_held_back_flow_runs_when_its_company_leaves() -> None:
    d = dispatcher(per_seat=0.01, active_s=1.0)  # 0.2 seats/s: the bucket alone refills slowly
    burst(d, "calm", 1, 0.0)
    reqs = burst(d, "flooder", 25, 0.0)
    assert sum(r.state == "queued" for r in reqs) == 5
    assert d.next_tick(0.0) == pytest.approx(1.0)  # calm's last request, a second ago, by then
    assert d.tick(0.5) == []
    assert d.tick(1.0) == reqs[20:]


def test_a_wide_request_waits_for_as_many_tokens_as_seats() -> None:
    d = dispatcher(per_seat=0.5)  # 10 seats/s; the bucket holds the level's 20
    burst(d, "calm", 1, 0.0)
    burst(d, "flooder", 14, 0.0)
    wide = d.offer(LEVEL, "flooder", 10, 0.0)
    assert wide.state == "queued"
    assert d.next_tick(0.0) == pytest.approx(0.4)
    assert d.tick(0.39) == []
    assert d.tick(0.4) == [wide]


def test_the_exempt_level_and_a_zero_rate_are_not_limited() -> None:
    d = dispatcher()
    burst(d, "calm", 1, 0.0)
    admins = [d.offer(f.EXEMPT, "admin", 10, 0.0) for _ in range(100)]
    assert all(r.state == "admitted" for r in admins)
    off = dispatcher(per_seat=0.0)
    burst(off, "calm", 1, 0.0)
    assert all(r.state == "done" for r in burst(off, "flooder", 200, 0.0))
    assert off.next_tick(0.0) is None


def test_the_rate_comes_from_the_environment() -> None:
    _, config, _ = env_config({"QM_API_FLOW_RATE": "2.5"})
    assert config.rate_per_seat == 2.5
    _, default, _ = env_config({})
    assert default.rate_per_seat == 1.0


ops = st.lists(
    st.tuples(st.sampled_from(["offer", "release", "tick"]), st.sampled_from(["a", "b"]),
              st.integers(1, 10), st.floats(0.0, 0.3)),
    max_size=120,
)  # fmt: skip


@given(ops)
def test_with_company_no_flow_takes_more_than_its_bucket_and_rate(
    script: list[tuple[str, str, int, float]],
) -> None:
    d = dispatcher(seats=10, queue_length=1000, wait_limit=1e9, active_s=1e9)  # 10/s, 10 held
    d.offer(f.SYSTEM, "company", 1, 0.0)  # another flow, in another level, keeps company
    now = 0.0
    every: list[f.Request] = []
    live: list[f.Request] = []
    for op, flow, seats, dt in script:
        now += dt
        if op == "offer":
            every.append(d.offer(LEVEL, flow, seats, now))
            live.append(every[-1])
        elif op == "tick":
            d.tick(now)
        elif live:
            d.release(live.pop(seats % len(live)), now)
        for name in ("a", "b"):
            taken = sum(
                r.seats for r in every if r.flow == name and r.state in ("admitted", "done")
            )
            assert taken <= 10 + 10.0 * now + 1e-6
        if (at := d.next_tick(now)) is not None:
            assert at > now


@dataclass
class Held:
    """A flooder's request held back by its rate on a shell whose loop runs on ``clock``."""

    c: FlowControl
    clock: list[float]
    entered: asyncio.Event
    task: asyncio.Task[None]
    calm: User


async def held_flooder(monkeypatch: pytest.MonkeyPatch) -> Held:
    """A calm flow's request, then the flooder's bucket spent and one more of its requests
    waiting (global-default: 41 seats on one server, so 41 seats a second)."""
    loop = asyncio.get_running_loop()
    clock = [loop.time()]
    monkeypatch.setattr(loop, "time", lambda: clock[0])
    c = FlowControl(400, f.Config(rate_per_seat=1.0, wait_limit=3600.0, burst_s=1.0), None)
    calm, flooder = User("calm", ()), User("flooder", ())
    async with c.seat(calm, 1):
        pass
    for _ in range(41):  # the bucket's worth
        async with c.seat(flooder, 1):
            pass
    entered = asyncio.Event()

    async def held() -> None:
        async with c.seat(flooder, 1):
            entered.set()

    task = asyncio.create_task(held())
    await asyncio.sleep(0)
    return Held(c, clock, entered, task, calm)


async def test_the_shell_wakes_a_held_back_request_by_timer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = await held_flooder(monkeypatch)
    c, clock, entered, task = h.c, h.clock, h.entered, h.task
    rate = c.dispatcher.rate(c.dispatcher.levels[LEVEL])
    assert rate == 41  # one server: the level's 41 seats, per second
    assert not entered.is_set() and c._timer is not None
    assert c._timer.when() == pytest.approx(clock[0] + 1 / rate)
    clock[0] += 1 / rate  # the timer's time: call what it would call
    c._tick()
    await task
    assert entered.is_set()
    assert 'qm_apf_level_flow_rate_limit{level="global-default"} 41' in metric_lines(c)
    monkeypatch.undo()


def test_a_held_back_head_admitted_by_another_flows_request_is_reported_once() -> None:
    d = dispatcher()
    burst(d, "calm", 1, 0.0)
    burst(d, "flooder", 20, 0.0)  # its bucket spent
    held = d.offer(LEVEL, "flooder", 1, 0.0)
    assert held.state == "queued" and d.admitted_in_passing() == []
    # Its bucket has refilled when the calm flow's next request arrives, before any tick.
    calm = d.offer(LEVEL, "calm", 1, 0.5)
    assert held.state == "admitted" and calm.state == "admitted"
    assert d.admitted_in_passing() == [held]
    assert d.admitted_in_passing() == []


async def test_the_shell_wakes_a_head_admitted_by_another_flows_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = await held_flooder(monkeypatch)
    c, clock, entered, task, calm = h.c, h.clock, h.entered, h.task, h.calm
    assert not entered.is_set()
    assert c._timer is not None
    c._timer.cancel()  # no tick: only the calm flow's request may let it in
    c._timer = None
    clock[0] += 0.5
    async with c.seat(calm, 1):
        pass
    for _ in range(3):  # the woken task runs within a few turns of the loop
        await asyncio.sleep(0)
    assert entered.is_set()
    await task
    monkeypatch.undo()


async def test_a_waiting_request_looks_again_even_if_no_wake_up_comes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = await held_flooder(monkeypatch)
    c, clock, entered, task = h.c, h.clock, h.entered, h.task
    assert c._timer is not None
    c._timer.cancel()  # a lost wake-up: neither the timer nor another request lets it in
    c._timer = None
    clock[0] += RECHECK_S / 2
    for _ in range(3):
        await asyncio.sleep(0)
    assert not entered.is_set()  # its bucket has refilled, but nobody has looked yet
    clock[0] += RECHECK_S / 2
    for _ in range(5):  # its own recheck is due: it looks, and runs
        await asyncio.sleep(0)
    assert entered.is_set()
    await task
    monkeypatch.undo()


def test_by_default_the_bucket_holds_two_seconds_so_a_full_level_follows_a_request() -> None:
    d = f.Dispatcher({LEVEL: 4}, f.Config(rate_per_seat=1.0))
    burst(d, "calm", 1, 0.0)
    burst(d, "flooder", 1, 0.0)  # a get, then four watches at once: the level's seats
    held = [d.offer(LEVEL, "flooder", 1, 0.0) for _ in range(4)]
    assert all(r.state == "admitted" for r in held)
    for r in held:
        d.release(r, 0.0)
    more = burst(d, "flooder", 4, 0.0)
    assert [r.state for r in more] == ["done"] * 3 + ["queued"]  # 8 seats: two seconds' worth


def test_a_refusal_over_the_rate_is_paced_and_one_for_seats_alone_is_not() -> None:
    d = dispatcher(queue_length=2)
    burst(d, "calm", 1, 0.0)
    reqs = burst(d, "flooder", 23, 0.0)  # the bucket's 20, two queued, then refused
    assert [r.state for r in reqs[19:]] == ["done", "queued", "queued", "rejected"]
    assert reqs[-1].paced and reqs[-1].reason == f.QUEUE_FULL
    roomy = dispatcher(per_seat=10.0, queue_length=1)  # 200 seats/s: only the seats are full
    burst(roomy, "calm", 1, 0.0)
    held = [roomy.offer(LEVEL, "flooder", 1, 0.0) for _ in range(22)]
    assert [r.state for r in held[19:]] == ["admitted", "queued", "rejected"]
    assert not held[-1].paced


async def test_the_shell_answers_a_paced_refusal_after_retry_after() -> None:
    c = FlowControl(400, f.Config(rate_per_seat=1.0, queue_length=0, burst_s=1.0), None)
    paced: list[float] = []

    async def pace(seconds: float) -> None:
        paced.append(seconds)

    c.pace = pace
    calm, flooder = User("calm", ()), User("flooder", ())
    async with c.seat(calm, 1):
        pass
    for _ in range(41):  # the bucket's worth
        async with c.seat(flooder, 1):
            pass
    with pytest.raises(TooManyRequests):
        async with c.seat(flooder, 1):
            pass
    assert paced == [1]
