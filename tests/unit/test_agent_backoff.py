"""The crash-loop backoff on a fake clock: doubling, cap, reset after a long run."""

from __future__ import annotations

import pytest

from agent.backoff import CrashLoopBackoff


def crash_loop(backoff: CrashLoopBackoff, crashes: int, run_seconds: float = 1.0) -> list[float]:
    """Crash `crashes` times, each time restarting as soon as allowed and running briefly."""
    now, delays = 0.0, []
    for _ in range(crashes):
        started = backoff.ready_at("c") or 0.0
        now = max(now, started) + run_seconds
        delays.append(backoff.record_crash("c", now, started_at=now - run_seconds))
    return delays


def test_delays_double_from_ten_seconds_and_cap_at_five_minutes():
    assert crash_loop(CrashLoopBackoff(), 8) == [10, 20, 40, 80, 160, 300, 300, 300]


def test_no_restart_before_the_delay_has_passed():
    backoff = CrashLoopBackoff()
    assert backoff.can_restart("c", 0.0)
    backoff.record_crash("c", 100.0)
    assert not backoff.can_restart("c", 109.9)
    assert backoff.remaining("c", 105.0) == pytest.approx(5.0)
    assert backoff.can_restart("c", 110.0)
    assert backoff.remaining("c", 111.0) == 0.0


def test_a_ten_minute_run_resets_the_delay():
    backoff = CrashLoopBackoff()
    crash_loop(backoff, 5)  # delay now 160 s
    ready = backoff.ready_at("c")
    assert ready is not None
    assert backoff.record_crash("c", ready + 600, started_at=ready) == 10


def test_a_run_just_short_of_ten_minutes_keeps_doubling():
    backoff = CrashLoopBackoff()
    crash_loop(backoff, 2)  # delay now 20 s
    ready = backoff.ready_at("c")
    assert ready is not None
    assert backoff.record_crash("c", ready + 599, started_at=ready) == 40


def test_without_a_start_time_ten_quiet_minutes_also_reset():
    backoff = CrashLoopBackoff()
    backoff.record_crash("c", 0.0)
    backoff.record_crash("c", 30.0)  # 20 s, ready at 50
    assert backoff.record_crash("c", 50.0 + 600) == 10


def test_containers_back_off_independently_and_are_forgotten():
    backoff = CrashLoopBackoff()
    backoff.record_crash(("pod", "a"), 0.0)
    backoff.record_crash(("pod", "a"), 11.0)
    assert backoff.record_crash(("pod", "b"), 11.0) == 10
    backoff.forget(("pod", "a"))
    assert backoff.ready_at(("pod", "a")) is None
    assert len(backoff) == 1


def test_custom_bounds_and_invalid_ones():
    assert crash_loop(CrashLoopBackoff(initial=1, cap=3), 4) == [1, 2, 3, 3]
    with pytest.raises(ValueError):
        CrashLoopBackoff(initial=0)
