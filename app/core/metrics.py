"""Prometheus metrics without a client library: counters, gauges and histograms with labels, and
their rendering in the text exposition format 0.0.4.

No I/O here: a process serves ``Registry.render()`` however it serves HTTP. Metrics are updated
from one event loop thread; nothing here takes a lock.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from typing import Generic, TypeVar

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Seconds, from 1 ms to 10 s: the usual latency buckets.
DEFAULT_BUCKETS: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def escape_help(text: str) -> str:
    """HELP text: backslash and line feed are escaped."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def escape_label_value(value: str) -> str:
    """Label values: backslash, double quote and line feed are escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def format_value(value: float) -> str:
    """A sample value: ``+Inf``, ``-Inf``, ``NaN``, whole numbers without a fraction, and any
    other float in its shortest round-tripping form."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if isinstance(value, int) or (value.is_integer() and abs(value) < 2**53):
        return str(int(value))
    return repr(float(value))


def format_labels(names: Sequence[str], values: Sequence[str]) -> str:
    """``{a="x",b="y"}``, or the empty string when there are no labels."""
    if not names:
        return ""
    inner = ",".join(f'{n}="{escape_label_value(v)}"' for n, v in zip(names, values, strict=True))
    return "{" + inner + "}"


def _check_name(name: str) -> None:
    if not _METRIC_NAME.fullmatch(name):
        raise ValueError(f"invalid metric name: {name!r}")


def _check_label_names(names: Sequence[str], reserved: Iterable[str] = ()) -> tuple[str, ...]:
    taken = set(reserved)
    for n in names:
        if not _LABEL_NAME.fullmatch(n) or n.startswith("__"):
            raise ValueError(f"invalid label name: {n!r}")
        if n in taken:
            raise ValueError(f"label name {n!r} is reserved or repeated")
        taken.add(n)
    return tuple(names)


class CounterChild:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("a counter only goes up")
        self.value += amount


class GaugeChild:
    __slots__ = ("_fn", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self._fn: Callable[[], float] | None = None

    def set(self, value: float) -> None:
        self.value = float(value)

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount

    def set_function(self, fn: Callable[[], float] | None) -> None:
        """Read the value from ``fn`` at each render instead of storing it."""
        self._fn = fn

    def get(self) -> float:
        return float(self._fn()) if self._fn is not None else self.value


class HistogramChild:
    __slots__ = ("_bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds  # ascending, last one +Inf
        self.counts = [0] * len(bounds)  # per bucket, not cumulative
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self._bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)


C = TypeVar("C", CounterChild, GaugeChild, HistogramChild)


class Metric(Generic[C]):
    """One metric family: its name, help, type, label names and a child per label set."""

    type = "untyped"

    def __init__(self, name: str, help: str, labels: Sequence[str] = ()) -> None:
        _check_name(name)
        self.name = name
        self.help = help
        self.label_names = _check_label_names(labels, self._reserved())
        self._children: dict[tuple[str, ...], C] = {}
        if not self.label_names:
            self._children[()] = self._new_child()

    def _reserved(self) -> tuple[str, ...]:
        return ()

    def _new_child(self) -> C:
        raise NotImplementedError

    def labels(self, *values: str, **by_name: str) -> C:
        """The child for one label set, given in order or by name; created on first use."""
        if values and by_name:
            raise ValueError("give label values either in order or by name, not both")
        if by_name:
            if set(by_name) != set(self.label_names):
                raise ValueError(f"{self.name} takes labels {list(self.label_names)}")
            values = tuple(by_name[n] for n in self.label_names)
        if len(values) != len(self.label_names):
            raise ValueError(f"{self.name} takes labels {list(self.label_names)}")
        key = tuple(str(v) for v in values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self._new_child()
        return child

    def remove(self, *values: str) -> None:
        """Forget one label set (for example a node that left)."""
        self._children.pop(tuple(str(v) for v in values), None)

    def clear(self) -> None:
        self._children.clear()
        if not self.label_names:
            self._children[()] = self._new_child()

    def _only(self) -> C:
        if self.label_names:
            raise ValueError(f"{self.name} has labels; use .labels(...)")
        return self._children[()]

    def samples(self) -> Iterable[tuple[str, Sequence[str], Sequence[str], float]]:
        """(name suffix, label names, label values, value) of every sample."""
        raise NotImplementedError

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {escape_help(self.help)}", f"# TYPE {self.name} {self.type}"]
        for suffix, names, values, value in self.samples():
            labels = format_labels(names, values)
            lines.append(f"{self.name}{suffix}{labels} {format_value(value)}")
        return lines

    def _sorted(self) -> list[tuple[tuple[str, ...], C]]:
        return sorted(self._children.items())


class Counter(Metric[CounterChild]):
    type = "counter"

    def _new_child(self) -> CounterChild:
        return CounterChild()

    def inc(self, amount: float = 1.0) -> None:
        self._only().inc(amount)

    @property
    def value(self) -> float:
        return self._only().value

    def samples(self) -> Iterable[tuple[str, Sequence[str], Sequence[str], float]]:
        for key, child in self._sorted():
            yield "", self.label_names, key, child.value


class Gauge(Metric[GaugeChild]):
    type = "gauge"

    def _new_child(self) -> GaugeChild:
        return GaugeChild()

    def set(self, value: float) -> None:
        self._only().set(value)

    def inc(self, amount: float = 1.0) -> None:
        self._only().inc(amount)

    def dec(self, amount: float = 1.0) -> None:
        self._only().dec(amount)

    def set_function(self, fn: Callable[[], float] | None) -> None:
        self._only().set_function(fn)

    @property
    def value(self) -> float:
        return self._only().get()

    def samples(self) -> Iterable[tuple[str, Sequence[str], Sequence[str], float]]:
        for key, child in self._sorted():
            yield "", self.label_names, key, child.get()


class Histogram(Metric[HistogramChild]):
    type = "histogram"

    def __init__(
        self,
        name: str,
        help: str,
        labels: Sequence[str] = (),
        buckets: Sequence[float] = DEFAULT_BUCKETS,
    ) -> None:
        bounds = sorted({float(b) for b in buckets})
        if not bounds or any(math.isnan(b) for b in bounds):
            raise ValueError("a histogram needs bucket bounds that are numbers")
        if bounds[-1] != math.inf:
            bounds.append(math.inf)
        self.bounds: tuple[float, ...] = tuple(bounds)
        super().__init__(name, help, labels)

    def _reserved(self) -> tuple[str, ...]:
        return ("le",)

    def _new_child(self) -> HistogramChild:
        return HistogramChild(self.bounds)

    def observe(self, value: float) -> None:
        self._only().observe(value)

    def samples(self) -> Iterable[tuple[str, Sequence[str], Sequence[str], float]]:
        names = (*self.label_names, "le")
        les = [format_value(b) for b in self.bounds]
        for key, child in self._sorted():
            running = 0
            for le, n in zip(les, child.counts, strict=True):
                running += n
                yield "_bucket", names, (*key, le), running
            yield "_sum", self.label_names, key, child.sum
            yield "_count", self.label_names, key, running


class Registry:
    """The metrics of one process, rendered in registration order."""

    def __init__(self) -> None:
        self._metrics: dict[str, Counter | Gauge | Histogram] = {}

    def register(self, metric: Counter | Gauge | Histogram) -> None:
        if metric.name in self._metrics:
            raise ValueError(f"metric {metric.name!r} is already registered")
        self._metrics[metric.name] = metric

    def counter(self, name: str, help: str, labels: Sequence[str] = ()) -> Counter:
        m = Counter(name, help, labels)
        self.register(m)
        return m

    def gauge(self, name: str, help: str, labels: Sequence[str] = ()) -> Gauge:
        m = Gauge(name, help, labels)
        self.register(m)
        return m

    def histogram(
        self,
        name: str,
        help: str,
        labels: Sequence[str] = (),
        buckets: Sequence[float] = DEFAULT_BUCKETS,
    ) -> Histogram:
        m = Histogram(name, help, labels, buckets)
        self.register(m)
        return m

    def render(self) -> str:
        """Every metric in the text exposition format 0.0.4 (ends with a line feed)."""
        lines: list[str] = []
        for m in self._metrics.values():
            lines.extend(m.render())
        return "\n".join(lines) + "\n" if lines else ""
