"""Standard five-field cron schedules, as accepted by Kubernetes CronJobs.

``minute hour day-of-month month day-of-week`` with ``*``, ``?`` (day fields), single values,
ranges ``a-b``, steps ``*/n`` / ``a-b/n`` / ``a/n``, comma lists, month names (``JAN``) and
weekday names (``MON``; ``7`` is Sunday too), plus the ``@hourly``-style macros. Parsing
yields the set of allowed values per field so the CronJob controller can compute the next
run time with :meth:`CronSchedule.next_after` without another dependency.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
MAX_LENGTH = 1024

# (name, low, high, names, names start at)
_FIELDS = (
    ("minute", 0, 59, (), 0),
    ("hour", 0, 23, (), 0),
    ("day of month", 1, 31, (), 1),
    ("month", 1, 12, MONTHS, 1),
    ("day of week", 0, 7, DAYS, 0),
)


@dataclass(frozen=True)
class CronSchedule:
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    days_any: bool  # day-of-month was "*" or "?"
    weekdays_any: bool

    def _day_matches(self, t: datetime) -> bool:
        dom = t.day in self.days
        dow = (t.isoweekday() % 7) in self.weekdays
        if self.days_any or self.weekdays_any:
            return dom and dow
        return dom or dow  # both restricted: either may match, as in cron

    def next_after(self, t: datetime) -> datetime | None:
        """The first scheduled minute strictly after ``t`` (seconds dropped), or ``None`` if
        the schedule never fires (e.g. ``0 0 30 2 *``)."""
        cur = t.replace(second=0, microsecond=0) + timedelta(minutes=1)
        limit = cur.year + 8  # every valid day/month combination recurs within 8 years
        while cur.year <= limit:
            if cur.month not in self.months:
                year, month = (cur.year + 1, 1) if cur.month == 12 else (cur.year, cur.month + 1)
                cur = cur.replace(year=year, month=month, day=1, hour=0, minute=0)
            elif not self._day_matches(cur):
                cur = (cur + timedelta(days=1)).replace(hour=0, minute=0)
            elif cur.hour not in self.hours:
                cur = (cur + timedelta(hours=1)).replace(minute=0)
            elif cur.minute not in self.minutes:
                cur += timedelta(minutes=1)
            else:
                return cur
        return None


def _value(token: str, name: str, low: int, high: int, names: tuple[str, ...], base: int) -> int:
    upper = token.upper()
    if names and upper in names:
        return names.index(upper) + base
    if not token.isdigit() or not token.isascii():
        raise ValueError(
            f"{name}: {token[:32]!r} is not a number" + (" or a name" if names else "")
        )
    value = int(token)
    if not low <= value <= high:
        raise ValueError(f"{name}: {value} is out of range {low}-{high}")
    return value


def _field(text: str, index: int) -> tuple[frozenset[int], bool]:
    name, low, high, names, base = _FIELDS[index]
    if text == "?" and index in (2, 4):
        text = "*"
    values: set[int] = set()
    for part in text.split(","):
        if not part:
            raise ValueError(f"{name}: empty list element")
        rng, _, step_text = part.partition("/")
        step = 1
        if step_text or "/" in part:
            if not step_text.isdigit() or not step_text.isascii() or int(step_text) < 1:
                raise ValueError(f"{name}: step {step_text[:32]!r} must be a positive number")
            step = int(step_text)
        if rng == "*":
            start, end = low, high
        elif "-" in rng:
            a, _, b = rng.partition("-")
            start = _value(a, name, low, high, names, base)
            end = _value(b, name, low, high, names, base)
            if start > end:
                raise ValueError(f"{name}: range {rng!r} starts after it ends")
        else:
            start = _value(rng, name, low, high, names, base)
            end = high if "/" in part else start
        values.update(range(start, end + 1, step))
    if index == 4 and 7 in values:
        values.discard(7)
        values.add(0)
    return frozenset(values), text in ("*", "*/1")


def parse_schedule(text: str) -> CronSchedule:
    """Parse a schedule; raises ``ValueError`` naming the bad field."""
    if not isinstance(text, str):
        raise ValueError("schedule must be a string")
    if len(text) > MAX_LENGTH:
        raise ValueError(f"schedule is too long (at most {MAX_LENGTH} characters)")
    stripped = text.strip()
    if "TZ=" in stripped:
        raise ValueError("time zones in the schedule (TZ=...) are not supported: use spec.timeZone")
    if stripped.startswith("@"):
        if stripped.lower() not in MACROS:
            raise ValueError(
                f"unknown schedule macro {stripped[:32]!r}: use one of " + ", ".join(MACROS)
            )
        stripped = MACROS[stripped.lower()]
    parts = stripped.split()
    if len(parts) != 5:
        raise ValueError(
            "expected exactly 5 fields (minute hour day-of-month month day-of-week), "
            f"found {len(parts)}"
        )
    fields = [_field(p, i) for i, p in enumerate(parts)]
    return CronSchedule(
        minutes=fields[0][0],
        hours=fields[1][0],
        days=fields[2][0],
        months=fields[3][0],
        weekdays=fields[4][0],
        days_any=fields[2][1],
        weekdays_any=fields[4][1],
    )


def schedule_error(text: str) -> str | None:
    try:
        parse_schedule(text)
    except ValueError as exc:
        return str(exc)
    return None
