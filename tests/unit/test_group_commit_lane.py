"""The group-commit lane's batching rules, over fake statements (no database)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from app.store.group import Lane


class Statements:
    """Fake ``one``/``many``: records each statement's writes; each call takes one loop turn
    (``gate``) so that writes can pile up behind a flight."""

    def __init__(self, fail_many: bool = False, fail_one: frozenset[str] = frozenset()) -> None:
        self.sent: list[list[str]] = []
        self.fail_many = fail_many
        self.fail_one = fail_one
        self.gate = asyncio.Event()
        self.gate.set()

    async def one(self, args: str) -> str | None:
        self.sent.append([args])
        await self.gate.wait()
        if args in self.fail_one:
            raise ValueError(f"bad {args}")
        return None if args.endswith("!") else args.upper()

    async def many(self, batch: Sequence[str]) -> list[str | None]:
        self.sent.append(list(batch))
        await self.gate.wait()
        if self.fail_many:
            raise RuntimeError("the batch failed")
        return [None if a.endswith("!") else a.upper() for a in batch]


def lane(s: Statements, **kw: int) -> Lane[str, str]:
    return Lane(s.one, s.many, **kw)


async def queued(
    ln: Lane[str, str], s: Statements, first: tuple[str, str], rest: list[tuple[str, str]]
) -> list[Any]:
    """Send ``first``, hold it in flight, queue ``rest`` behind it, let go: every outcome."""
    s.gate.clear()
    head = asyncio.ensure_future(ln.write(*first))
    await asyncio.sleep(0)
    await asyncio.sleep(0)  # the flight has taken ``first`` and waits on the gate
    tail = [asyncio.ensure_future(ln.write(k, a)) for k, a in rest]
    await asyncio.sleep(0)
    s.gate.set()
    return await asyncio.gather(head, *tail, return_exceptions=True)


async def test_a_lone_write_goes_at_once_through_the_one_object_statement() -> None:
    s = Statements()
    assert await lane(s).write("a", "a") == "A"
    assert s.sent == [["a"]]


async def test_writes_arriving_while_flights_are_busy_go_together() -> None:
    s = Statements()
    ln = lane(s, flights=1)
    results = await queued(ln, s, ("k0", "w0"), [(f"k{i}", f"w{i}") for i in range(1, 6)])
    assert results == ["W0", "W1", "W2", "W3", "W4", "W5"]
    assert s.sent == [["w0"], ["w1", "w2", "w3", "w4", "w5"]]
    assert (ln.stats.statements, ln.stats.writes, ln.stats.largest) == (2, 6, 5)


async def test_two_writes_of_one_object_never_share_a_statement_and_keep_their_order() -> None:
    s = Statements()
    rest = [("x", "x1"), ("y", "y1"), ("x", "x2"), ("z", "z1")]
    await queued(lane(s, flights=1), s, ("x", "x0"), rest)
    assert s.sent == [["x0"], ["x1", "y1", "z1"], ["x2"]]


async def test_an_object_in_one_flight_waits_for_it_rather_than_fly_in_another() -> None:
    s = Statements()
    s.gate.clear()
    ln = lane(s, flights=2)
    a = asyncio.ensure_future(ln.write("x", "x0"))
    for _ in range(3):
        await asyncio.sleep(0)
    b = asyncio.ensure_future(ln.write("x", "x1"))  # a second flight may start; x is flying
    for _ in range(3):
        await asyncio.sleep(0)
    assert s.sent == [["x0"]]
    s.gate.set()
    assert await asyncio.gather(a, b) == ["X0", "X1"]
    assert s.sent == [["x0"], ["x1"]]


async def test_a_failed_condition_is_that_writes_none_only() -> None:
    s = Statements()
    out = await queued(lane(s, flights=1), s, ("a", "a"), [("b!", "b!"), ("c", "c")])
    assert out == ["A", None, "C"]


async def test_a_failed_batch_is_run_again_write_by_write_so_errors_land_on_their_own() -> None:
    s = Statements(fail_many=True, fail_one=frozenset({"bad"}))
    ln = lane(s, flights=1)
    out = await queued(ln, s, ("a", "a"), [("b", "b"), ("bad", "bad"), ("c", "c")])
    assert out[:2] == ["A", "B"] and out[3] == "C"
    assert isinstance(out[2], ValueError) and str(out[2]) == "bad bad"
    assert ln.stats.fallbacks == 1
    assert s.sent == [["a"], ["b", "bad", "c"], ["b"], ["bad"], ["c"]]


async def test_batches_are_capped_and_nothing_is_stranded() -> None:
    s = Statements()
    s.gate.clear()
    ln = lane(s, flights=2, max_batch=3)
    writes = [asyncio.ensure_future(ln.write(f"k{i % 7}", f"w{i}")) for i in range(20)]
    await asyncio.sleep(0)
    s.gate.set()
    results = await asyncio.wait_for(asyncio.gather(*writes), 5)
    assert results == [f"W{i}" for i in range(20)]
    assert all(len(b) <= 3 for b in s.sent)
    assert sum(len(b) for b in s.sent) == 20
    for batch in s.sent:  # one write per object per statement
        keys = [int(w[1:]) % 7 for w in batch]
        assert len(keys) == len(set(keys))


async def test_a_cancelled_waiting_write_is_not_sent() -> None:
    s = Statements()
    s.gate.clear()
    ln = lane(s, flights=1)
    first = asyncio.ensure_future(ln.write("a", "a"))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    gone = asyncio.ensure_future(ln.write("b", "b"))
    kept = asyncio.ensure_future(ln.write("c", "c"))
    await asyncio.sleep(0)
    gone.cancel()
    s.gate.set()
    assert await asyncio.gather(first, kept) == ["A", "C"]
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert s.sent == [["a"], ["c"]]
