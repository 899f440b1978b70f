"""The agent's usage pipeline on a fake clock: CPU rates, resets, the sample body, /metrics."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from agent import config
from agent.runtime import ContainerSpec, Usage
from agent.runtime.sim import SimRuntime
from agent.usage import CpuRates, UsageCollector, prometheus_text, sample_body, timestamp

T0 = 1_700_000_000.0
MS = 1_000_000  # nanoseconds of CPU per millisecond


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def utc(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.now, dt.UTC)


@pytest.mark.parametrize(
    ("readings", "expected"),
    [
        # (at offset, cumulative cpu ms, run started at offset) -> millicores
        pytest.param([(10, 5_000, 0)], [500], id="first reading averages over the run"),
        pytest.param([(10, 1_000, 0), (20, 11_000, 0)], [100, 1000], id="delta over interval"),
        pytest.param([(10, 1_000, 0), (20, 1_000, 0)], [100, 0], id="idle"),
        pytest.param([(10, 30_000, 0), (20, 2_000, 15)], [3000, 400], id="restart: new run"),
        pytest.param([(10, 30_000, 0), (20, 2_000, 0)], [3000, 100], id="counter went back"),
        pytest.param([(10, 3_000, 0), (20, 5_000, 18)], [300, 2500], id="restart, higher count"),
        pytest.param([(0, 1_000, 0)], [0], id="no time elapsed"),
        pytest.param([(10, 1_000, 0), (5, 9_000, 0)], [100, 0], id="clock went back"),
    ],
)
def test_cpu_rates(readings: list[tuple[int, int, int]], expected: list[int]) -> None:
    rates = CpuRates()
    got = [rates.rate(("u", "c"), T0 + at, ms * MS, T0 + start) for at, ms, start in readings]
    assert got == expected


def test_rates_are_per_container_and_forgotten_when_gone() -> None:
    rates = CpuRates()
    assert rates.rate(("u", "a"), T0 + 10, 10_000 * MS, T0) == 1000
    assert rates.rate(("u", "b"), T0 + 10, 2_000 * MS, T0) == 200
    rates.retain({("u", "b")})
    # a forgotten container's next reading is a first reading again
    assert rates.rate(("u", "a"), T0 + 20, 12_000 * MS, T0) == 600
    assert rates.rate(("u", "b"), T0 + 20, 3_000 * MS, T0) == 100


def _pod(uid: str, name: str, *containers: str, priority: object = None) -> dict[str, object]:
    spec: dict[str, object] = {"containers": [{"name": c} for c in containers]}
    if priority is not None:
        spec["priority"] = priority
    return {"metadata": {"namespace": "team", "name": name, "uid": uid}, "spec": spec}


async def test_collector_reads_running_containers_and_sums_pods() -> None:
    clock = Clock(T0)
    runtime = SimRuntime(clock=clock.utc)
    for uid, name in [("u1", "web"), ("u1", "side"), ("u2", "batch"), ("u3", "done")]:
        await runtime.start(ContainerSpec(uid, name, ["x"]))
    runtime.exit("u3", "done", 0)
    pods = [
        _pod("u1", "web", "web", "side", priority=100),
        _pod("u2", "batch", "batch", priority=True),
        _pod("u3", "job", "done"),
    ]
    collector = UsageCollector(runtime, "n1", lambda body: None, clock=clock)
    clock.now = T0 + 10
    runtime.set_usage("u1", "web", Usage(memory_bytes=100, cpu_usage_ns=2_000 * MS))
    runtime.set_usage("u1", "side", Usage(memory_bytes=20, cpu_usage_ns=500 * MS))
    runtime.set_usage("u2", "batch", Usage(memory_bytes=7, cpu_usage_ns=0))
    body = collector.read(pods)
    assert body["timestamp"] == timestamp(T0 + 10)
    assert [(p["name"], p["priority"], p["cpuMillis"], p["memoryBytes"]) for p in body["pods"]] == [
        ("web", 100, 250, 120),
        ("batch", 0, 0, 7),  # a boolean is no priority
    ]  # the terminated job pod has nothing running and is left out
    assert body["pods"][0]["containers"] == [
        {"name": "web", "cpuMillis": 200, "memoryBytes": 100},
        {"name": "side", "cpuMillis": 50, "memoryBytes": 20},
    ]
    clock.now = T0 + 20
    runtime.set_usage("u1", "web", Usage(memory_bytes=100, cpu_usage_ns=7_000 * MS))
    assert collector.read(pods)["pods"][0]["containers"][0]["cpuMillis"] == 500


async def test_a_failing_send_is_counted_and_dropped() -> None:
    clock = Clock(T0)
    bodies: list[object] = []

    def send(body: object) -> None:
        bodies.append(body)
        if len(bodies) == 1:
            raise ConnectionError("api away")

    waits: list[float] = []
    two_sent = asyncio.Event()

    async def wait(stop: asyncio.Event, seconds: float) -> None:  # the interval passes at once
        waits.append(seconds)
        clock.now += seconds
        if collector.sent >= 2:
            two_sent.set()
        await asyncio.sleep(0)

    collector = UsageCollector(SimRuntime(), "n1", send, interval=10.0, clock=clock, wait=wait)
    stop = asyncio.Event()
    task = asyncio.create_task(collector.run(stop, list))
    await asyncio.wait_for(two_sent.wait(), 30)  # the sends go through a thread: no fixed count
    stop.set()
    await asyncio.wait_for(task, 30)
    assert collector.failed == 1 and len(bodies) >= 3 and set(waits) == {10.0}


def test_prometheus_text() -> None:
    body = sample_body("n1", T0, [{
        "namespace": "team", "name": 'odd"name', "uid": "u", "priority": 0,
        "cpuMillis": 250, "memoryBytes": 1024,
        "containers": [{"name": "main", "cpuMillis": 250, "memoryBytes": 1024}],
    }])  # fmt: skip
    text = prometheus_text(body)
    assert 'qm_pod_cpu_usage_millicores{namespace="team",pod="odd\\"name"} 250\n' in text
    assert 'qm_pod_memory_usage_bytes{namespace="team",pod="odd\\"name"} 1024\n' in text
    assert (
        'qm_container_memory_usage_bytes{namespace="team",pod="odd\\"name",container="main"} 1024'
        in text
    )
    assert prometheus_text(None) == ""


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        ([], {}, 10.0),
        (["--usage-interval", "2.5s"], {}, 2.5),
        ([], {"QM_AGENT_USAGE_INTERVAL": "1"}, 1.0),
        (["--usage-interval", "3"], {"QM_AGENT_USAGE_INTERVAL": "1"}, 3.0),
    ],
)
def test_usage_interval_setting(argv: list[str], env: dict[str, str], expected: float) -> None:
    assert config.parse(argv, env, hostname="h").usage_interval == expected


@pytest.mark.parametrize("value", ["0", "nan", "often", "7200"])
def test_bad_usage_interval(value: str) -> None:
    with pytest.raises(config.ConfigError, match="usage interval"):
        config.parse(["--usage-interval", value], {}, hostname="h")
