"""The Prometheus text exposition format (0.0.4) rendered by ``app.core.metrics``."""

from __future__ import annotations

import math
import re

import pytest

from app.core.metrics import (
    Counter,
    Gauge,
    Histogram,
    Registry,
    escape_help,
    escape_label_value,
    format_value,
)

SAMPLE = re.compile(
    r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="(\\.|[^"\\])*",?)*\})? \S+$'
)


def _samples(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("#")]


def test_counter_with_help_type_and_labels() -> None:
    reg = Registry()
    c = reg.counter("qm_binds_total", "Pods bound.", ["result"])
    c.labels("ok").inc()
    c.labels(result="ok").inc(2)
    c.labels("conflict").inc()
    assert reg.render() == (
        "# HELP qm_binds_total Pods bound.\n"
        "# TYPE qm_binds_total counter\n"
        'qm_binds_total{result="conflict"} 1\n'
        'qm_binds_total{result="ok"} 3\n'
    )


def test_unlabelled_metrics_start_at_zero() -> None:
    reg = Registry()
    reg.counter("a_total", "A.")
    g = reg.gauge("b", "B.")
    g.set(2.5)
    g.dec(0.5)
    assert _samples(reg.render()) == ["a_total 0", "b 2"]


def test_label_values_are_escaped() -> None:
    reg = Registry()
    g = reg.gauge("qm_g", "G.", ["path", "other"])
    g.labels('C:\\dir "x"\nnext', "plain").set(1)
    line = _samples(reg.render())[0]
    assert line == 'qm_g{path="C:\\\\dir \\"x\\"\\nnext",other="plain"} 1'
    assert SAMPLE.match(line)
    assert escape_label_value('a"b') == 'a\\"b'


def test_help_is_escaped_but_quotes_are_not() -> None:
    reg = Registry()
    reg.gauge("qm_h", 'Back\\slash and "quotes"\nsecond line.')
    assert reg.render().splitlines()[0] == '# HELP qm_h Back\\\\slash and "quotes"\\nsecond line.'
    assert escape_help("a\nb") == "a\\nb"


def test_histogram_buckets_are_cumulative_and_end_with_inf() -> None:
    reg = Registry()
    h = reg.histogram("qm_latency_seconds", "Latency.", buckets=[1.0, 0.1, 0.5])
    for v in (0.05, 0.1, 0.3, 0.7, 0.7, 3.0):
        h.observe(v)
    assert _samples(reg.render()) == [
        'qm_latency_seconds_bucket{le="0.1"} 2',  # le is inclusive: 0.1 counts here
        'qm_latency_seconds_bucket{le="0.5"} 3',
        'qm_latency_seconds_bucket{le="1"} 5',
        'qm_latency_seconds_bucket{le="+Inf"} 6',
        f"qm_latency_seconds_sum {format_value(0.05 + 0.1 + 0.3 + 0.7 + 0.7 + 3.0)}",
        "qm_latency_seconds_count 6",
    ]
    assert "# TYPE qm_latency_seconds histogram" in reg.render()


def test_labelled_histogram_puts_le_last() -> None:
    h = Histogram("qm_h_seconds", "H.", ["phase"], buckets=[1, math.inf])
    h.labels("bind").observe(2)
    assert h.render()[2:] == [
        'qm_h_seconds_bucket{phase="bind",le="1"} 0',
        'qm_h_seconds_bucket{phase="bind",le="+Inf"} 1',
        'qm_h_seconds_sum{phase="bind"} 2',
        'qm_h_seconds_count{phase="bind"} 1',
    ]


def test_special_values() -> None:
    assert format_value(math.inf) == "+Inf"
    assert format_value(-math.inf) == "-Inf"
    assert format_value(math.nan) == "NaN"
    assert format_value(3) == "3"
    assert format_value(0.25) == "0.25"
    assert format_value(1e-9) == "1e-09"


def test_gauge_function_is_read_at_render() -> None:
    reg = Registry()
    box = [1.0]
    reg.gauge("qm_fn", "F.").set_function(lambda: box[0])
    box[0] = 7
    assert _samples(reg.render()) == ["qm_fn 7"]


def test_metrics_render_in_registration_order_and_names_are_unique() -> None:
    reg = Registry()
    reg.gauge("z_last", "Z.")
    reg.gauge("a_first", "A.")
    types = [line for line in reg.render().splitlines() if line.startswith("# TYPE")]
    assert types == ["# TYPE z_last gauge", "# TYPE a_first gauge"]
    with pytest.raises(ValueError):
        reg.gauge("z_last", "again")


def test_invalid_names_and_labels_are_refused() -> None:
    with pytest.raises(ValueError):
        Counter("bad-name", "x")
    with pytest.raises(ValueError):
        Gauge("ok", "x", ["bad-label"])
    with pytest.raises(ValueError):
        Gauge("ok", "x", ["__reserved"])
    with pytest.raises(ValueError):
        Histogram("ok", "x", ["le"])
    c = Counter("ok_total", "x", ["a"])
    with pytest.raises(ValueError):
        c.labels("1", "2")
    with pytest.raises(ValueError):
        c.labels(b="1")
    with pytest.raises(ValueError):
        c.labels("1").inc(-1)
    with pytest.raises(ValueError):
        c.inc()  # a labelled counter needs its labels


def test_remove_forgets_a_label_set() -> None:
    g = Gauge("qm_node_pods", "Pods per node.", ["node"])
    g.labels("n1").set(1)
    g.labels("n2").set(2)
    g.remove("n1")
    assert g.render()[2:] == ['qm_node_pods{node="n2"} 2']


def test_every_sample_line_parses() -> None:
    reg = Registry()
    reg.counter("c_total", "C.", ["k"]).labels('v"\\\n').inc()
    reg.histogram("h", "H.", ["k"]).labels("x").observe(0.2)
    reg.gauge("g", "G.").set(-1.5)
    text = reg.render()
    assert text.endswith("\n")
    for line in _samples(text):
        assert SAMPLE.match(line), line
