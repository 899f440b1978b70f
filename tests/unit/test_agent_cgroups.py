"""Pure parts of the cgroup driver: values written for resources, control files parsed, and
which file each version writes (checked against a directory tree, not a kernel)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.runtime.base import Resources, exit_reason, from_returncode
from agent.runtime.cgroups import (
    Cgroups,
    cfs_quota_us,
    cpu_max,
    cpu_shares,
    cpu_weight,
    memory_limit,
    parse_flat_keyed,
    parse_mountinfo,
    parse_proc_cgroup,
)


@pytest.mark.parametrize(
    ("millis", "shares"),
    [(None, 2), (0, 2), (1, 2), (2, 2), (100, 102), (250, 256), (1000, 1024), (4000, 4096),
     (10**6, 262144)],
)  # fmt: skip
def test_cpu_shares_follow_kubernetes(millis, shares):
    assert cpu_shares(millis) == shares


@pytest.mark.parametrize(
    ("shares", "weight"), [(2, 1), (1024, 39), (102, 4), (262144, 10000), (1, 1), (10**7, 10000)]
)
def test_cpu_weight_maps_shares_linearly(shares, weight):
    assert cpu_weight(shares) == weight


@pytest.mark.parametrize(
    ("millis", "quota", "v2"),
    [(None, -1, "max 100000"), (0, -1, "max 100000"), (500, 50000, "50000 100000"),
     (2000, 200000, "200000 100000"), (5, 1000, "1000 100000")],
)  # fmt: skip
def test_cpu_quota_from_limit(millis, quota, v2):
    assert cfs_quota_us(millis) == quota
    assert cpu_max(millis) == v2


def test_memory_limit_unset_is_unlimited_in_each_version():
    assert memory_limit(None, v2=True) == "max"
    assert memory_limit(None, v2=False) == "-1"
    assert memory_limit(64 << 20, v2=True) == memory_limit(64 << 20, v2=False) == "67108864"


def test_flat_keyed_files():
    assert parse_flat_keyed("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n") == {
        "oom_kill_disable": 0,
        "under_oom": 0,
        "oom_kill": 2,
    }
    assert (
        parse_flat_keyed("low 0\nhigh 0\nmax 7\noom 1\noom_kill 1\noom_group_kill 0\n")["oom_kill"]
        == 1
    )
    assert parse_flat_keyed("garbage\nsome thing\n\n") == {}


MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 /outer /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate
50 23 8:1 / /data rw - ext4 /dev/sda1 rw
"""


def test_mountinfo_keeps_cgroup_mounts_with_roots_and_controllers():
    mounts = parse_mountinfo(MOUNTINFO)
    assert [(m.mountpoint.name, m.fstype) for m in mounts] == [
        ("cpu", "cgroup"), ("cpuacct", "cgroup"), ("memory", "cgroup"), ("unified", "cgroup2"),
    ]  # fmt: skip
    assert "memory" in mounts[2].options and mounts[2].root == "/outer"
    assert "nsdelegate" in mounts[3].options  # optional fields before " - " are skipped


def test_proc_cgroup_splits_co_mounted_controllers():
    own = parse_proc_cgroup("4:memory:/a/b\n2:cpu,cpuacct:/\n0::/init.scope\n")
    assert own == {"memory": "/a/b", "cpu": "/", "cpuacct": "/", "": "/init.scope"}


def test_exit_classification():
    assert from_returncode(0) == (0, None)
    assert from_returncode(3) == (3, None)
    assert from_returncode(-9) == (137, 9)
    assert from_returncode(-15) == (143, 15)
    assert exit_reason(0, oom_killed=False) == "Completed"
    assert exit_reason(3, oom_killed=False) == "Error"
    assert exit_reason(137, oom_killed=True) == "OOMKilled"
    assert exit_reason(0, oom_killed=True) == "OOMKilled"


def test_v1_writes_each_limit_to_its_own_hierarchy(tmp_path: Path):
    bases = {c: tmp_path / c / "qm" for c in ("memory", "cpu", "cpuacct")}
    cgroups = Cgroups(1, bases)
    cgroups.create("podX/app", Resources(64 << 20, 250, 500))
    assert (bases["memory"] / "podX/app/memory.limit_in_bytes").read_text() == "67108864"
    assert (bases["cpu"] / "podX/app/cpu.shares").read_text() == "256"
    assert (bases["cpu"] / "podX/app/cpu.cfs_quota_us").read_text() == "50000"
    assert (bases["cpu"] / "podX/app/cpu.cfs_period_us").read_text() == "100000"
    assert [p.parents[3].name for p in cgroups.procs_files("podX/app")] == [
        "memory", "cpu", "cpuacct",
    ]  # fmt: skip


def test_co_mounted_v1_hierarchies_are_entered_once(tmp_path: Path):
    both = tmp_path / "cpu,cpuacct" / "qm"
    cgroups = Cgroups(1, {"memory": tmp_path / "memory" / "qm", "cpu": both, "cpuacct": both})
    assert len(cgroups.procs_files("p/c")) == 2


def test_v2_writes_unified_files(tmp_path: Path):
    base = tmp_path / "qm"
    cgroups = Cgroups(2, {"memory": base, "cpu": base})
    cgroups.create("podX/app", Resources(None, 1000, None))
    assert (base / "podX/app/memory.max").read_text() == "max"
    assert (base / "podX/app/cpu.weight").read_text() == "39"
    assert (base / "podX/app/cpu.max").read_text() == "max 100000"


def test_oom_is_read_from_the_kernel_counter(tmp_path: Path):
    v1 = Cgroups(1, {c: tmp_path for c in ("memory", "cpu", "cpuacct")})
    (tmp_path / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 0\n")
    (tmp_path / "memory.failcnt").write_text("12\n")
    assert not v1.oom_killed("", sigkilled=True)  # limit hit but no kill: not an OOM kill
    (tmp_path / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    assert v1.oom_killed("", sigkilled=False)
    # Kernels without the oom_kill counter: limit hit and SIGKILL.
    (tmp_path / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\n")
    assert v1.oom_killed("", sigkilled=True)
    assert not v1.oom_killed("", sigkilled=False)
    v2 = Cgroups(2, {"memory": tmp_path, "cpu": tmp_path})
    (tmp_path / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert v2.oom_killed("", sigkilled=False)


def test_usage_is_working_set_and_cpu_nanoseconds(tmp_path: Path):
    v1 = Cgroups(1, {c: tmp_path for c in ("memory", "cpu", "cpuacct")})
    (tmp_path / "memory.usage_in_bytes").write_text("1000000\n")
    (tmp_path / "memory.stat").write_text("cache 5\ntotal_inactive_file 400000\n")
    (tmp_path / "cpuacct.usage").write_text("123456789\n")
    usage = v1.usage("")
    assert (usage.memory_bytes, usage.cpu_usage_ns) == (600000, 123456789)
    v2 = Cgroups(2, {"memory": tmp_path, "cpu": tmp_path})
    (tmp_path / "memory.current").write_text("2000\n")
    (tmp_path / "memory.stat").write_text("anon 1500\ninactive_file 500\n")
    (tmp_path / "cpu.stat").write_text("usage_usec 42\nuser_usec 40\n")
    usage = v2.usage("")
    assert (usage.memory_bytes, usage.cpu_usage_ns) == (1500, 42000)
