"""What the `runc` runtime hands to runc, as pure functions: image paths, ids, `config.json`.

`agent/runtime/runc.py` does the I/O (overlay mounts, the shim, `runc kill`); everything it
decides about *what* runs is here, so it is unit-tested without runc, root or a kernel:

- an image reference `name[:tag]` names a local root filesystem directory
  `<images dir>/<name>/<tag>/rootfs` (tag `latest` when absent); references that could leave
  the images directory (`..`, absolute paths, odd characters, digests) are refused;
- a container id that is unique per run and valid for runc;
- the OCI runtime config of one run: the spec's argv and environment, the pod directory
  bind-mounted at :data:`POD_MOUNT` (and the working directory, as the process runtime runs
  in the pod directory), pid/ipc/uts/mount namespaces and either the host's network (services
  listen on host ports, as with the process runtime) or, with a node network namespace (ADR
  0039), that namespace joined by path, and the limits of `Resources` in the same units the
  process runtime writes (`agent/runtime/cgroups.py`).
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Any, Final

from agent.runtime.base import ContainerSpec, StartError
from agent.runtime.cgroups import CFS_PERIOD_US, cfs_quota_us, cpu_shares
from agent.runtime.process import container_env

POD_MOUNT: Final = "/var/run/quaymaster/pod"
RESOLV_CONF_FILE: Final = ".quaymaster/resolv.conf"  # among a pod's files: its /etc/resolv.conf
OCI_VERSION: Final = "1.0.2"
DEFAULT_TAG: Final = "latest"
_COMPONENT = re.compile(r"^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
_RUNC_ID = re.compile(r"^[\w+.-]+$")
_CAPS = ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]
_MASKED = [
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/sys/firmware",
    "/proc/scsi",
]
_READONLY = ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]

Obj = dict[str, Any]


class ImageError(StartError):
    """The image reference is invalid or names no root filesystem on this node."""

    reason = "ErrImagePull"


def parse_image(ref: str) -> tuple[PurePosixPath, str]:
    """`name[:tag]` as (relative name path, tag); `ImageError` for anything that is not a
    plain local name (a digest, `..`, an absolute path, upper case, empty parts)."""
    if not ref or "@" in ref:
        raise ImageError(f'image "{ref}" is not a name[:tag] reference (digests are not supported)')
    name, _, tag = ref.rpartition(":") if ":" in ref.rsplit("/", 1)[-1] else (ref, "", "")
    tag = tag or DEFAULT_TAG
    parts = name.split("/")
    if not all(_COMPONENT.match(p) for p in parts) or not _TAG.match(tag):
        raise ImageError(
            f'image "{ref}" is invalid: name parts are lower-case letters, digits, ".", "_" '
            f'and "-" separated by "/", the tag letters, digits, ".", "_" and "-"'
        )
    return PurePosixPath(*parts), tag


def image_rootfs(images_dir: Path, ref: str) -> Path:
    """The root filesystem directory an image reference names (it may not exist)."""
    name, tag = parse_image(ref)
    return images_dir / name / tag / "rootfs"


def container_id(pod_uid: str, name: str, token: str) -> str:
    """A runc id for one run of one container: the token makes each run's id new."""
    cid = f"qm-{pod_uid}-{name}-{token}"
    if not _RUNC_ID.match(cid) or len(cid) > 1024:
        raise StartError(f"container {name!r} of pod {pod_uid!r} gives no valid runc id")
    return cid


def cgroups_path(parent: str, pod_uid: str, cid: str) -> str:
    """`linux.cgroupsPath` for runc's cgroupfs driver: absolute, the same in every
    hierarchy; the pod's cgroup is the process runtime's `pod<uid>`."""
    return "/" + "/".join(p for p in (parent.strip("/"), f"pod{pod_uid}", cid) if p)


def resources(spec: ContainerSpec) -> Obj:
    """`linux.resources`: devices denied but runc's defaults, memory (swap equal to the limit:
    a limit that swap could dodge is no limit), CPU shares and, for a limit, a CFS quota."""
    res = spec.resources
    out: Obj = {
        "devices": [{"allow": False, "access": "rwm"}],
        "cpu": {"shares": cpu_shares(res.cpu_request_millis), "period": CFS_PERIOD_US},
    }
    if res.cpu_limit_millis:
        out["cpu"]["quota"] = cfs_quota_us(res.cpu_limit_millis)
    if res.memory_limit_bytes is not None:
        out["memory"] = {"limit": res.memory_limit_bytes, "swap": res.memory_limit_bytes}
    return out


def _mounts(pod_dir: Path) -> list[Obj]:
    nosuid = ["nosuid", "noexec", "nodev"]
    return [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {
            "destination": "/dev",
            "type": "tmpfs",
            "source": "tmpfs",
            "options": ["nosuid", "strictatime", "mode=755", "size=65536k"],
        },
        {
            "destination": "/dev/pts",
            "type": "devpts",
            "source": "devpts",
            "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"],
        },
        {
            "destination": "/dev/shm",
            "type": "tmpfs",
            "source": "shm",
            "options": [*nosuid, "mode=1777", "size=65536k"],
        },
        {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": nosuid},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": [*nosuid, "ro"]},
        {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev"]},
        # rbind: the pod's Secret tmpfs is mounted inside its directory (ADR 0048).
        {"destination": POD_MOUNT, "type": "bind", "source": str(pod_dir), "options": ["rbind"]},
    ]


def namespaces(netns_path: Path | None = None) -> list[Obj]:
    """`linux.namespaces`: new pid, ipc, uts and mount namespaces; the network namespace at
    `netns_path` (the node's, shared by its pods) or, without one, the host's network."""
    out: list[Obj] = [{"type": t} for t in ("pid", "ipc", "uts", "mount")]
    if netns_path is not None:
        out.append({"type": "network", "path": str(netns_path)})
    return out


def resolv_mount(spec: ContainerSpec, pod_dir: Path) -> list[Obj]:
    """`/etc/resolv.conf` bound read-only from the pod directory's copy, when the agent wrote
    one among the spec's files (`agent.resolv`); else none: the image's own file."""
    if RESOLV_CONF_FILE not in spec.files:
        return []
    source = str(pod_dir / RESOLV_CONF_FILE)
    options = ["bind", "ro", "nosuid", "nodev", "noexec"]
    return [
        {"destination": "/etc/resolv.conf", "type": "bind", "source": source, "options": options}
    ]


def oci_config(
    spec: ContainerSpec,
    *,
    rootfs: Path,
    pod_dir: Path,
    cgroups: str,
    netns_path: Path | None = None,
) -> Obj:
    """The `config.json` of one run of `spec` (rootfs writable: it is the run's overlay)."""
    env = container_env(spec.env)
    return {
        "ociVersion": OCI_VERSION,
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": list(spec.command),
            "env": [f"{k}={v}" for k, v in env.items()],
            "cwd": POD_MOUNT,
            "capabilities": {kind: list(_CAPS) for kind in ("bounding", "effective", "permitted")},
            "noNewPrivileges": True,
        },
        "root": {"path": str(rootfs), "readonly": False},
        "hostname": spec.name,
        "mounts": [*_mounts(pod_dir), *resolv_mount(spec, pod_dir)],
        "linux": {
            "cgroupsPath": cgroups,
            "resources": resources(spec),
            "namespaces": namespaces(netns_path),
            "maskedPaths": list(_MASKED),
            "readonlyPaths": list(_READONLY),
        },
    }
