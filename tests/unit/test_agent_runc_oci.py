"""What the runc runtime asks runc for, without runc: image references, ids, cgroup paths and
the OCI config of a run (agent/runtime/oci.py, and runc.cgroup_parent)."""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from agent.config import container_spec, parse
from agent.runtime.base import ContainerSpec, Resources, StartError
from agent.runtime.cgroups import Cgroups
from agent.runtime.oci import (
    POD_MOUNT,
    ImageError,
    cgroups_path,
    container_id,
    image_rootfs,
    oci_config,
    parse_image,
)
from agent.runtime.runc import cgroup_parent

MiB = 2**20


@pytest.mark.parametrize(
    ("ref", "name", "tag"),
    [
        ("busybox", "busybox", "latest"),
        ("busybox:1.36", "busybox", "1.36"),
        ("library/busy_box-2:v1_A", "library/busy_box-2", "v1_A"),
        ("a.b/c", "a.b/c", "latest"),
    ],
)
def test_image_references_name_a_directory(ref: str, name: str, tag: str) -> None:
    assert parse_image(ref) == (PurePosixPath(name), tag)


@pytest.mark.parametrize(
    "ref",
    [
        "",
        "../etc",
        "a/../../b:1",
        "/abs:1",
        "a//b",
        "Busybox:1",
        "busybox@sha256:" + "0" * 64,
        "localhost:5000/x:1",
        "busybox:../../x",
        "busybox:.hidden",
        "a:b:c",
    ],
)
def test_references_that_could_leave_the_images_directory_are_refused(ref: str) -> None:
    with pytest.raises(ImageError) as refused:
        parse_image(ref)
    assert refused.value.reason == "ErrImagePull" and isinstance(refused.value, StartError)


def test_the_root_filesystem_of_an_image() -> None:
    assert image_rootfs(Path("/img"), "web/app:2") == Path("/img/web/app/2/rootfs")
    assert image_rootfs(Path("/img"), "app") == Path("/img/app/latest/rootfs")


def test_container_ids_are_per_run_and_valid_for_runc() -> None:
    uid = "6f1c2f9e-0000-4000-8000-000000000001"
    one, two = container_id(uid, "web", "aa11"), container_id(uid, "web", "bb22")
    assert one != two and one.startswith(f"qm-{uid}-web-")
    assert all(re.fullmatch(r"[\w+.-]+", cid) for cid in (one, two))
    with pytest.raises(StartError):
        container_id("p/../x", "web", "aa11")


def test_cgroups_path_is_absolute_under_the_parent_and_the_pod() -> None:
    assert cgroups_path("quaymaster-n1", "u1", "qm-x") == "/quaymaster-n1/podu1/qm-x"
    assert cgroups_path("/a/b/", "u1", "qm-x") == "/a/b/podu1/qm-x"
    assert cgroups_path("", "u1", "qm-x") == "/podu1/qm-x"


def spec(resources: Resources = Resources()) -> ContainerSpec:
    return ContainerSpec(
        "u1", "web", ["sh", "-c", "serve"], {"A": "1"}, {}, resources, image="busybox:1"
    )


def config(resources: Resources = Resources()) -> dict[str, Any]:
    return oci_config(
        spec(resources), rootfs=Path("/b/rootfs"), pod_dir=Path("/pods/u1"), cgroups="/q/podu1/x"
    )


def test_the_process_runs_the_argv_with_its_env_in_the_pod_directory() -> None:
    process = config()["process"]
    assert process["args"] == ["sh", "-c", "serve"]
    assert process["env"][0].startswith("PATH=/") and "A=1" in process["env"]
    assert process["cwd"] == POD_MOUNT and process["terminal"] is False
    assert process["noNewPrivileges"] is True
    assert "CAP_SYS_ADMIN" not in process["capabilities"]["bounding"]


def test_namespaces_share_the_hosts_network_and_the_pod_directory_is_mounted() -> None:
    cfg = config()
    namespaces = [n["type"] for n in cfg["linux"]["namespaces"]]
    assert sorted(namespaces) == ["ipc", "mount", "pid", "uts"]  # no "network"
    pod_mount = next(m for m in cfg["mounts"] if m["destination"] == POD_MOUNT)
    assert pod_mount == {
        "destination": POD_MOUNT,
        "type": "bind",
        "source": "/pods/u1",
        "options": ["rbind"],  # with the pod's Secret tmpfs inside
    }
    assert {m["destination"] for m in cfg["mounts"]} >= {"/proc", "/dev", "/dev/pts", "/sys"}
    assert cfg["root"] == {"path": "/b/rootfs", "readonly": False}
    assert cfg["hostname"] == "web" and cfg["linux"]["cgroupsPath"] == "/q/podu1/x"


def test_limits_use_the_process_runtimes_units() -> None:
    res = config(
        Resources(memory_limit_bytes=64 * MiB, cpu_request_millis=250, cpu_limit_millis=500)
    )
    resources = res["linux"]["resources"]
    assert resources["memory"] == {"limit": 64 * MiB, "swap": 64 * MiB}
    assert resources["cpu"] == {"shares": 256, "period": 100_000, "quota": 50_000}
    assert resources["devices"] == [{"allow": False, "access": "rwm"}]


def test_unset_limits_leave_memory_and_quota_out() -> None:
    resources = config()["linux"]["resources"]
    assert "memory" not in resources
    assert resources["cpu"] == {"shares": 2, "period": 100_000}


MOUNTINFO = """\
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
"""


def test_cgroup_parent_is_the_one_path_every_hierarchy_shares() -> None:
    root = Path("/sys/fs/cgroup")
    same = Cgroups(1, {c: root / c / "quaymaster-n1" for c in ("memory", "cpu", "cpuacct")})
    assert cgroup_parent(same, MOUNTINFO) == "quaymaster-n1"
    nested = Cgroups(
        1,
        {
            "memory": root / "memory/process_api/abc/q",
            "cpu": root / "cpu/q",
            "cpuacct": root / "cpuacct/q",
        },
    )
    with pytest.raises(ValueError, match="one cgroup path"):
        cgroup_parent(nested, MOUNTINFO)


def test_the_agent_selects_runc_and_its_images_directory() -> None:
    cfg = parse(["--runtime", "runc", "--images-dir", "/srv/images"], {}, hostname="n1")
    assert (cfg.runtime, cfg.images_dir) == ("runc", Path("/srv/images"))
    from_env = parse([], {"QM_AGENT_RUNTIME": "runc"}, hostname="n1")
    assert (from_env.runtime, from_env.images_dir) == ("runc", None)  # <state dir>/images


def test_a_containers_image_reaches_its_spec() -> None:
    raw = {"name": "web", "image": "busybox:1", "command": ["sh"]}
    assert container_spec("u1", raw).image == "busybox:1"
    assert container_spec("u1", {"name": "web"}).image == ""
