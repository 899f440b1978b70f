"""What a node reports about itself: capacity from the host, allocatable after the reserve,
the status the agent writes over the controller's, and the lease it renews."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent import machine as m
from agent.lease import epoch_of, renewed
from agent.node import desired_status, status_changed, write_due

GI = 1024**3


@pytest.mark.parametrize(
    ("cpus", "mem", "quota", "limit", "expected"),
    [
        (8, 16 * GI, None, None, (8000, 16 * GI)),
        (8, 16 * GI, 2.5, None, (2500, 16 * GI)),  # a cgroup quota below the host's CPUs
        (2, 16 * GI, 4.0, None, (2000, 16 * GI)),  # a quota above them changes nothing
        (8, 16 * GI, None, 4 * GI, (8000, 4 * GI)),
        (8, 4 * GI, None, 16 * GI, (8000, 4 * GI)),
    ],
)
def test_capacity_is_the_smaller_of_host_and_cgroup(
    cpus: int, mem: int, quota: float | None, limit: int | None, expected: tuple[int, int]
) -> None:
    cap = m.capacity(cpus, mem, quota, limit)
    assert (cap.cpu_millis, cap.memory_bytes) == expected


def test_allocatable_subtracts_the_reserve_and_never_goes_negative() -> None:
    cap = m.Resources(4000, 8 * GI, 110)
    reserve = m.Reserve.parse("500m", "1Gi")
    assert m.allocatable(cap, reserve) == m.Resources(3500, 7 * GI, 110)
    assert m.allocatable(m.Resources(200, GI), m.Reserve.parse("1", "2Gi")) == m.Resources(0, 0)


def test_reserve_from_environment_and_refusals() -> None:
    r = m.Reserve.from_env({"QM_AGENT_RESERVE_CPU": "1.5", "QM_AGENT_RESERVE_MEMORY": "512Mi"})
    assert (r.cpu_millis, r.memory_bytes) == (1500, 512 * 1024**2)
    assert m.Reserve.from_env({}) == m.Reserve()
    with pytest.raises(ValueError):
        m.Reserve.parse("-1", "0")
    with pytest.raises(ValueError):
        m.Reserve.parse("lots", "0")


def test_quantities_are_canonical() -> None:
    assert m.Resources(3500, 7 * GI, 110).to_quantities() == {
        "cpu": "3500m",
        "memory": "7Gi",
        "pods": "110",
    }
    assert m.Resources(4000, 1000, 10).to_quantities()["cpu"] == "4"


def test_meminfo_and_cgroup_parsers() -> None:
    assert m.meminfo_total("MemFree: 1 kB\nMemTotal:       16384 kB\n") == 16384 * 1024
    with pytest.raises(ValueError):
        m.meminfo_total("MemFree: 1 kB\n")
    assert m.quota_cpus_v2("max 100000\n") is None
    assert m.quota_cpus_v2("250000 100000\n") == 2.5
    assert m.quota_cpus_v1("-1", "100000") is None
    assert m.quota_cpus_v1("50000\n", "100000\n") == 0.5
    assert m.memory_limit("max\n") is None
    assert m.memory_limit("9223372036854771712\n") is None  # v1's "unlimited"
    assert m.memory_limit("1073741824\n") == GI


def _fake_root(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path


def test_detect_reads_v1_limits_under_a_root(tmp_path: Path) -> None:
    root = _fake_root(
        tmp_path,
        {
            "proc/meminfo": "MemTotal: 8388608 kB\n",
            "sys/fs/cgroup/cpu/cpu.cfs_quota_us": "100000\n",
            "sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n",
            "sys/fs/cgroup/memory/memory.limit_in_bytes": str(2 * GI),
            "etc/os-release": 'NAME=x\nPRETTY_NAME="Test Linux 1"\n',
            "etc/machine-id": "abc123\n",
        },
    )
    found = m.detect(root)
    assert found.capacity == m.Resources(1000, 2 * GI, m.DEFAULT_MAX_PODS)
    assert found.node_info["osImage"] == "Test Linux 1"
    assert found.node_info["machineID"] == "abc123"


def test_detect_reads_v2_limits_and_the_real_host(tmp_path: Path) -> None:
    root = _fake_root(
        tmp_path,
        {
            "proc/meminfo": "MemTotal: 8388608 kB\n",
            "sys/fs/cgroup/cpu.max": "max 100000\n",
            "sys/fs/cgroup/memory.max": "max\n",
        },
    )
    assert m.detect(root).capacity.memory_bytes == 8 * GI
    host = m.detect()
    assert host.capacity.cpu_millis >= 1 and host.capacity.memory_bytes > 64 * 1024**2
    assert host.hostname
    with pytest.raises(RuntimeError):
        m.detect(tmp_path / "nothing")


# -- the status written over what is stored --------------------------------------------------

HOST = m.Machine("h1", m.Resources(4000, 8 * GI), {"architecture": "x86_64"})


def test_status_sets_ready_back_to_true_and_keeps_other_conditions() -> None:
    current = {
        "conditions": [
            {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"},
            {"type": "MemoryPressure", "status": "False"},
        ],
        "daemonEndpoints": {"port": 1},
    }
    out = desired_status(current, HOST, m.Reserve.parse("1", "1Gi"), 1_700_000_000.0)
    ready = [c for c in out["conditions"] if c["type"] == "Ready"]
    assert len(ready) == 1 and ready[0]["status"] == "True" and ready[0]["reason"] == "AgentReady"
    assert ready[0]["lastTransitionTime"] == ready[0]["lastHeartbeatTime"]
    assert {"type": "MemoryPressure", "status": "False"} in out["conditions"]
    assert out["allocatable"] == {"cpu": "3", "memory": "7Gi", "pods": "110"}
    assert out["capacity"]["cpu"] == "4" and out["daemonEndpoints"] == {"port": 1}
    assert status_changed(current, out)


def test_status_unchanged_but_for_heartbeats_is_not_a_change() -> None:
    first = desired_status({}, HOST, m.Reserve(), 1000.0)
    second = desired_status(first, HOST, m.Reserve(), 2000.0)
    assert not status_changed(first, second)
    ready = second["conditions"][-1]
    assert ready["lastTransitionTime"] != ready["lastHeartbeatTime"]  # still True since 1000
    bigger = m.Machine("h1", m.Resources(8000, 8 * GI), {})
    assert status_changed(second, desired_status(second, bigger, m.Reserve(), 3000.0))


@pytest.mark.parametrize(
    ("changed", "forced", "last", "now", "due"),
    [
        (False, False, None, 0.0, True),  # never written
        (False, False, 100.0, 399.0, False),
        (False, False, 100.0, 400.0, True),  # five minutes
        (True, False, 100.0, 101.0, True),
        (False, True, 100.0, 101.0, True),  # the epoch moved
    ],
)
def test_full_status_written_on_change_or_every_five_minutes(
    changed: bool, forced: bool, last: float | None, now: float, due: bool
) -> None:
    assert write_due(changed, forced, last, now) is due


# -- the lease -------------------------------------------------------------------------------


def test_renewal_keeps_the_epoch_and_other_fields() -> None:
    current = {
        "metadata": {"name": "n1", "namespace": "quaymaster-node-lease", "resourceVersion": "7"},
        "spec": {"holderIdentity": "n1", "epoch": 3, "acquireTime": "2024-01-01T00:00:00Z"},
    }
    out = renewed(current, "n1", 1_700_000_000.25)
    assert out["spec"]["epoch"] == 3 and epoch_of(out) == 3
    assert out["spec"]["renewTime"] == "2023-11-14T22:13:20.250000Z"
    assert out["spec"]["acquireTime"] == "2024-01-01T00:00:00Z"
    assert out["spec"]["leaseDurationSeconds"] == 40
    assert out["metadata"]["resourceVersion"] == "7"  # the condition of the update
    assert current["spec"].get("renewTime") is None  # the input is not modified


def test_new_lease_starts_at_epoch_zero_and_odd_epochs_read_as_zero() -> None:
    new = renewed(None, "n2", 0.0)
    assert new["spec"]["epoch"] == 0 and new["metadata"]["namespace"] == "quaymaster-node-lease"
    assert epoch_of({"spec": {"epoch": True}}) == 0
    assert epoch_of({"spec": {"epoch": "4"}}) == 0
    assert epoch_of(None) == 0
    assert renewed(new, "n2", 1.0)["spec"]["renewTime"] != new["spec"]["renewTime"]
