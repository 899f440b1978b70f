"""The unit tier's rule that nothing sleeps on, or times itself by, the wall clock: the guard
(``wall_clock.py``) fails a sleep, and no test file reads the clock to measure itself."""

from __future__ import annotations

import ast
import asyncio
import time
from pathlib import Path

import pytest
from wall_clock import ALLOWED, WallClockSleep

HERE = Path(__file__).parent
CLOCK_READS = {("time", "sleep"), ("time", "monotonic"), ("time", "time"), ("time", "perf_counter")}


def test_time_sleep_fails_the_test() -> None:
    with pytest.raises(WallClockSleep):
        time.sleep(0.001)


async def test_a_positive_asyncio_sleep_fails_and_a_yield_does_not() -> None:
    await asyncio.sleep(0)
    with pytest.raises(WallClockSleep):
        await asyncio.sleep(0.001)


def clock_reads(source: str) -> list[str]:
    """``time.sleep()``, ``time.monotonic()``, ``time.time()``, ``time.perf_counter()`` calls
    and imports of those names, with their line numbers."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            base = node.func.value
            if isinstance(base, ast.Name) and (base.id, node.func.attr) in CLOCK_READS:
                found.append(f"{node.lineno}: {base.id}.{node.func.attr}()")
        if isinstance(node, ast.ImportFrom) and node.module == "time":
            found += [f"{node.lineno}: from time import {a.name}" for a in node.names]
    return found


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import time\nt = time.monotonic()\n", ["2: time.monotonic()"]),
        ("from time import sleep\n", ["1: from time import sleep"]),
        ("import time\ntime.sleep(1)\n", ["2: time.sleep()"]),
        ("clock.monotonic()\nasyncio.sleep(0)\n", []),
    ],
)
def test_the_scan_finds_clock_reads(source: str, expected: list[str]) -> None:
    assert clock_reads(source) == expected


def test_no_unit_test_reads_the_wall_clock() -> None:
    offenders = {
        path.name: reads
        for path in sorted(HERE.glob("*.py"))
        if path.name not in ALLOWED
        and path != Path(__file__)  # it sleeps on purpose, to see the guard fail
        and (reads := clock_reads(path.read_text()))
    }
    assert offenders == {}, "use a fake clock or wait for a condition"


def test_every_allowed_file_exists() -> None:
    """An entry outlives its file only by mistake: the exception must go with the file."""
    assert [name for name in ALLOWED if not (HERE / name).exists()] == []
