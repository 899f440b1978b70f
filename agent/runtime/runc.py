"""The `runc` runtime: each container run is an OCI bundle that Debian's `runc` runs.

The image reference names a local root filesystem (`agent/runtime/oci.py` maps and checks
it); each run gets a bundle `<state>/runc/<pod uid>/<id>/` whose `rootfs` is an overlay of
that directory (the run's writes land in the bundle, never in the image) and whose
`config.json` is `oci.oci_config`. Limits are applied by runc in
`<parent>/pod<uid>/<id>` in every cgroup hierarchy; the pod directory (files, logs) is
bind-mounted into the container; stdout and stderr go to the same log file as the process
runtime's (`agent.logs.log_path`).

runc does not tell a detached container's exit status to anyone, and a foreground `runc run`
deletes the cgroup, and with it the OOM counter, before it returns. So every run has a shim:
a small process (`python -m agent.runtime.shim`) that makes itself a child
subreaper, runs `runc run --detach`, writes `started` when runc returns, inherits the
container's init as its child, reaps it (the exact exit code or signal), reads the OOM counter
of the still-existing cgroup, runs `runc delete`, and writes `result.json`. The agent only
watches the shim (`Popen.poll`, which never blocks) and reads that file once the shim is gone.
Stopping is `runc kill TERM`, the grace period, `runc kill KILL`.

With a node network namespace (`netns`, ADR 0039) every container joins it
(`linux.namespaces` network by path), so `runc exec` probes and hooks run there too.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import datetime as dt
import errno
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agent import netns
from agent.logs import begin_run, log_path
from agent.runtime import oci, secret_volume
from agent.runtime.base import (
    Clock,
    ContainerSpec,
    ContainerState,
    Running,
    StartError,
    Terminated,
    Usage,
    exit_reason,
    utc_now,
)
from agent.runtime.cgroups import Cgroups, parse_mountinfo, remove_tree
from agent.runtime.process import Adopted, lay_out, pod_cgroup, start_ticks
from agent.runtime.shim import UNKNOWN_EXIT, read_result, write_atomically

RUNC = shutil.which("runc") or "/usr/sbin/runc"
_MNT_DETACH = 2


def cgroup_parent(cgroups: Cgroups, mountinfo: str) -> str:
    """The parent's path within its hierarchy, which runc's cgroupfs driver needs to be the
    same in every hierarchy (so not `detect(relative_to_self=True)` on a nested host)."""
    mounts = parse_mountinfo(mountinfo)
    rels = set()
    for base in cgroups.bases.values():
        mount = max(
            (m for m in mounts if base.is_relative_to(m.mountpoint)),
            key=lambda m: len(m.mountpoint.parts),
            default=None,
        )
        if mount is None:
            raise ValueError(f"{base} is not in a cgroup hierarchy")
        rels.add(base.relative_to(mount.mountpoint).as_posix())
    if len(rels) != 1:
        raise ValueError(f"runc needs one cgroup path in every hierarchy, not {sorted(rels)}")
    return rels.pop()


@dataclass
class _Run:
    spec: ContainerSpec
    cid: str
    bundle: Path
    shim: subprocess.Popen[bytes] | Adopted
    started_at: dt.datetime
    pid: int = 0
    terminated: Terminated | None = None


class RuncRuntime:
    name = "runc"

    def __init__(
        self,
        state_dir: Path,
        cgroups: Cgroups,
        *,
        images_dir: Path | None = None,
        runc: str = RUNC,
        clock: Clock = utc_now,
        monotonic: Callable[[], float] = time.monotonic,
        poll_interval: float = 0.02,
        start_timeout: float = 30.0,
        netns_name: str | None = None,
    ) -> None:
        self.state_dir = state_dir
        self.netns_name = netns_name  # the pods' network namespace; None: the host's
        self.images_dir = images_dir if images_dir is not None else state_dir / "images"
        self.runc_root = state_dir / "runc" / "state"
        self.cgroups, self.runc = cgroups, runc
        self.parent = cgroup_parent(cgroups, Path("/proc/self/mountinfo").read_text())
        self._clock, self._monotonic = clock, monotonic
        self._poll, self._start_timeout = poll_interval, start_timeout
        self._runs: dict[tuple[str, str], _Run] = {}

    def pod_dir(self, pod_uid: str) -> Path:
        return self.state_dir / "pods" / pod_uid

    def log_path(self, pod_uid: str, name: str) -> Path:
        return log_path(self.pod_dir(pod_uid), name)

    def bundles_dir(self, pod_uid: str) -> Path:
        return self.state_dir / "runc" / pod_uid

    def container_id(self, pod_uid: str, name: str) -> str | None:
        """The runc id of the container's current (or last) run."""
        run = self._runs.get((pod_uid, name))
        return run.cid if run else None

    def exec_prefix(self, pod_uid: str, name: str) -> tuple[str, ...]:
        """argv that runs a command inside the container's current run (exec probes, hooks):
        runc exec keeps the run's environment and working directory."""
        cid = self.container_id(pod_uid, name) or "not-started"
        return (self.runc, "--root", str(self.runc_root), "exec", cid)

    # -- start ---------------------------------------------------------------------------------

    async def start(self, spec: ContainerSpec) -> Running:
        previous = self._runs.get(spec.key)
        if previous is not None:
            if isinstance(self.state(*spec.key), Running):
                raise StartError(f"container {spec.name} of pod {spec.pod_uid} is already running")
            await asyncio.to_thread(_remove_bundle, previous.bundle)
        if not spec.command:
            raise StartError(f"container {spec.name} has no command (images carry none here)")
        lower = oci.image_rootfs(self.images_dir, spec.image)
        if not lower.is_dir():
            raise oci.ImageError(f'image "{spec.image}" not found: no directory {lower}')
        cid = oci.container_id(spec.pod_uid, spec.name, secrets.token_hex(4))
        pod_dir, bundle = self.pod_dir(spec.pod_uid), self.bundles_dir(spec.pod_uid) / cid
        try:
            lay_out(pod_dir, spec.files, spec.secret_files)
            _mount_overlay(lower, bundle)
            config = oci.oci_config(
                spec,
                rootfs=bundle / "rootfs",
                pod_dir=pod_dir,
                cgroups=oci.cgroups_path(self.parent, spec.pod_uid, cid),
                netns_path=netns.path_of(self.netns_name) if self.netns_name else None,
            )
            _write_private(bundle / "config.json", json.dumps(config, indent=1))
            begin_run(pod_dir, spec.name)
        except OSError as exc:
            _remove_bundle(bundle)
            raise StartError(f"cannot prepare the bundle of {spec.name}: {exc}") from exc
        run = _Run(spec, cid, bundle, self._spawn_shim(spec, cid, bundle), self._clock())
        self._runs[spec.key] = run
        await self._await_started(run)
        _note(run)
        return Running(pid=run.pid, started_at=run.started_at)

    def adopt(self) -> list[tuple[str, str]]:
        """Take over the runs an earlier run of the agent started (`run.json` in each bundle):
        a live shim (same pid, same start time) is watched through /proc, and its
        `result.json` still gives the exact exit; a run whose shim is gone is taken as ended,
        so its bundle is removed with its pod. Call once, before the first `start`."""
        adopted: list[tuple[str, str]] = []
        for note in sorted((self.state_dir / "runc").glob("*/*/run.json")):
            try:
                r = json.loads(note.read_text())
                key, shim = (str(r["pod_uid"]), str(r["name"])), int(r["shim"])
                ticks, started = int(r["ticks"]), dt.datetime.fromisoformat(r["started_at"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            previous = self._runs.get(key)
            if previous is not None and previous.started_at >= started:
                continue  # a later run of the same container is already known
            spec = ContainerSpec(pod_uid=key[0], name=key[1], command=())
            watcher = Adopted(shim, ticks)
            self._runs[key] = _Run(
                spec, str(r["cid"]), note.parent, watcher, started, int(r["pid"])
            )
            if watcher.poll() is None:
                adopted.append(key)
        return adopted

    def _spawn_shim(self, spec: ContainerSpec, cid: str, bundle: Path) -> subprocess.Popen[bytes]:
        memory = self.cgroups.bases["memory"] / pod_cgroup(spec.pod_uid) / cid
        argv = [sys.executable, "-m", "agent.runtime.shim", "--runc", self.runc]
        argv += ["--root", str(self.runc_root), "--bundle", str(bundle), "--id", cid]
        argv += ["--memory-dir", str(memory), "--cgroup-version", str(self.cgroups.version)]
        # The shim's stdout is the container's: runc hands its own stdio to the container.
        with open(self.log_path(spec.pod_uid, spec.name), "ab") as log:
            try:
                return subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    close_fds=True,
                )
            except OSError as exc:
                _remove_bundle(bundle)
                raise StartError(f"cannot start the shim of {spec.name}: {exc}") from exc

    async def _await_started(self, run: _Run) -> None:
        deadline = self._monotonic() + self._start_timeout
        started = run.bundle / "started"
        while not started.exists():
            if run.shim.poll() is not None:
                break
            if self._monotonic() > deadline:
                run.shim.kill()
                await asyncio.to_thread(run.shim.wait)
                break
            await asyncio.sleep(self._poll)
        if started.exists():
            run.pid = int(started.read_text())
            return
        del self._runs[run.spec.key]
        result = read_result(run.bundle)
        await asyncio.to_thread(self._runc_quiet, "delete", "--force", run.cid)
        await asyncio.to_thread(_remove_bundle, run.bundle)
        raise StartError(str(result.get("error") or f"runc did not start {run.spec.name}"))

    # -- state and stop ------------------------------------------------------------------------

    def state(self, pod_uid: str, name: str) -> ContainerState | None:
        run = self._runs.get((pod_uid, name))
        if run is None:
            return None
        if run.terminated is not None:
            return run.terminated
        if run.shim.poll() is None:
            return Running(pid=run.pid, started_at=run.started_at)
        result = read_result(run.bundle)
        code = int(result.get("exit_code", UNKNOWN_EXIT))
        signum = result.get("signal")
        run.terminated = Terminated(
            exit_code=code,
            reason=exit_reason(code, bool(result.get("oom_killed"))),
            started_at=run.started_at,
            finished_at=self._clock(),
            signal=int(signum) if signum is not None else None,
        )
        return run.terminated

    async def stop(self, pod_uid: str, name: str, grace_seconds: float) -> Terminated | None:
        run = self._runs.get((pod_uid, name))
        if run is None:
            return None
        if isinstance(state := self.state(pod_uid, name), Terminated):
            return state
        await asyncio.to_thread(self._runc_quiet, "kill", run.cid, "TERM")
        if not await self._shim_gone(run, grace_seconds):
            await asyncio.to_thread(self._runc_quiet, "kill", run.cid, "KILL")
            if not await self._shim_gone(run, 10.0):  # a wedged shim: end it, forget the run
                run.shim.kill()
                await asyncio.to_thread(run.shim.wait)
                await asyncio.to_thread(self._runc_quiet, "delete", "--force", run.cid)
        result = self.state(pod_uid, name)
        assert isinstance(result, Terminated)
        return result

    async def _shim_gone(self, run: _Run, seconds: float) -> bool:
        deadline = self._monotonic() + seconds
        while run.shim.poll() is None:
            if self._monotonic() >= deadline:
                return False
            await asyncio.sleep(self._poll)
        return True

    def _runc_quiet(self, *args: str) -> int:
        """A runc command whose failure is expected at times (the container already gone)."""
        argv = [self.runc, "--root", str(self.runc_root), *args]
        return subprocess.run(argv, capture_output=True, check=False).returncode

    # -- usage, listing, cleanup ---------------------------------------------------------------

    def usage(self, pod_uid: str, name: str | None = None) -> Usage | None:
        if name is None:
            rel = pod_cgroup(pod_uid)
        elif (run := self._runs.get((pod_uid, name))) is not None and run.terminated is None:
            rel = f"{pod_cgroup(pod_uid)}/{run.cid}"
        else:
            return None
        return self.cgroups.usage(rel) if self.cgroups.exists(rel) else None

    def containers(self, pod_uid: str | None = None) -> list[tuple[str, str]]:
        return [key for key in self._runs if pod_uid is None or key[0] == pod_uid]

    async def cleanup(self, pod_uid: str) -> None:
        for key in self.containers(pod_uid):
            await self.stop(*key, grace_seconds=0)
            del self._runs[key]
        await asyncio.to_thread(self._remove_pod, pod_uid)

    def _remove_pod(self, pod_uid: str) -> None:
        rel = pod_cgroup(pod_uid)
        if self.cgroups.exists(rel):
            self.cgroups.remove(rel)
        # runc made the pod's cgroup in every hierarchy, not only memory, cpu and cpuacct.
        for directory in self.hierarchy_dirs(rel):
            remove_tree(directory, time.monotonic() + 5.0)
        for bundle in sorted(self.bundles_dir(pod_uid).glob("*")):
            _remove_bundle(bundle)
        shutil.rmtree(self.bundles_dir(pod_uid), ignore_errors=True)
        secret_volume.release(self.pod_dir(pod_uid))
        shutil.rmtree(self.pod_dir(pod_uid), ignore_errors=True)

    def close(self) -> None:
        """Remove this agent's parent cgroups (in every hierarchy) once no container is left."""
        if not self._runs and not self.cgroups.pids(""):
            with contextlib.suppress(OSError):
                for directory in self.hierarchy_dirs(""):
                    remove_tree(directory, time.monotonic() + 1.0)

    def hierarchy_dirs(self, rel: str) -> list[Path]:
        """`rel` under the parent in every mounted cgroup hierarchy, where runc creates it."""
        mounts = parse_mountinfo(Path("/proc/self/mountinfo").read_text())
        return [m.mountpoint / self.parent / rel for m in mounts]


# -- the bundle's root filesystem ----------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)


def _mount_overlay(lower: Path, bundle: Path) -> None:
    """`bundle/rootfs` as an overlay of the image: the run writes to `bundle/upper` only."""
    upper, work, rootfs = bundle / "upper", bundle / "work", bundle / "rootfs"
    for directory in (upper, work, rootfs):
        directory.mkdir(parents=True, exist_ok=True)
    paths = [str(lower.resolve()), str(upper.resolve()), str(work.resolve())]
    if any(c in p for p in paths for c in ",:"):
        raise OSError(errno.EINVAL, f"overlay paths may not contain ',' or ':': {paths}")
    options = f"lowerdir={paths[0]},upperdir={paths[1]},workdir={paths[2]}"
    target = str(rootfs.resolve()).encode()
    if _libc.mount(b"overlay", target, b"overlay", 0, options.encode()) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount overlay on {rootfs}: {os.strerror(err)}")


def _write_private(path: Path, text: str) -> None:
    """Mode 0600 from the first byte: the OCI config carries the container's environment,
    Secret values included (ADR 0048)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _remove_bundle(bundle: Path) -> None:
    rootfs = bundle / "rootfs"
    if rootfs.exists() and os.path.ismount(rootfs):
        _libc.umount2(str(rootfs).encode(), _MNT_DETACH)
    shutil.rmtree(bundle, ignore_errors=True)


def _note(run: _Run) -> None:
    """`run.json` in the bundle: what a restarted agent needs to adopt the run."""
    ticks = start_ticks(run.shim.pid)
    if ticks is None:
        return  # the shim is already gone: nothing to adopt
    note = {
        "pod_uid": run.spec.pod_uid,
        "name": run.spec.name,
        "cid": run.cid,
        "shim": run.shim.pid,
        "ticks": ticks,
        "pid": run.pid,
        "started_at": run.started_at.isoformat(),
    }
    with contextlib.suppress(OSError):
        write_atomically(run.bundle / "run.json", json.dumps(note))
