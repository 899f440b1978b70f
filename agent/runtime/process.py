"""The `process` runtime: a pod's containers run as host processes, each in its own cgroup.

No image, no namespaces: the container's argv runs on the host with exactly the environment
of its spec (plus a default PATH), its working directory the pod's directory
`<root>/<pod uid>/` where the spec's files (config maps, secrets) are laid out, and stdout and
stderr appended to `<pod dir>/<container>.log`. What makes it a container is the cgroup:
`<parent>/pod<uid>/<container>` with the memory limit, CPU weight and CPU quota of its
resources, entered *before* any user code runs. A tiny `/bin/sh` wrapper writes its own pid
into the cgroup's `cgroup.procs` in every hierarchy and then `exec`s the command, so the pid
the agent holds is the container's main process from the first instruction (`preexec_fn` would
do the same but is unsafe in a process with threads).

With a network namespace (``netns``, ADR 0039) the command is prefixed by
:func:`agent.netns.exec_prefix` (``nsenter --net=/var/run/netns/<name> --``), after the
cgroup wrapper: the prefix ``exec``s too, so the pid is still the container's, it is in its
cgroup before it enters the namespace, and no user code ever runs outside either.

An exit is classified from the kernel's counters, not guessed: `OOMKilled` when the cgroup
recorded an OOM kill, `Completed` for 0, `Error` otherwise. When the main process ends, what
it left behind in its cgroup is killed, as a container's init ending ends the container.
Without usable cgroups (not root) the runtime still runs processes, without limits, and
cannot report OOM kills; the agent decides whether that is acceptable.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from agent import logs, netns
from agent.runtime import secret_volume
from agent.runtime.base import (
    REASON_UNKNOWN,
    Clock,
    ContainerSpec,
    ContainerState,
    Running,
    StartError,
    Terminated,
    Usage,
    exit_reason,
    from_returncode,
    utc_now,
)
from agent.runtime.cgroups import Cgroups

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Enter every cgroup named before `--`, then become the command. Exit 125 (as container
# runtimes do) when a cgroup cannot be entered: the command never runs unconfined.
_ENTER = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'


def start_ticks(pid: int) -> int | None:
    """When `pid` started, in clock ticks since boot (None if it is gone or a zombie): with
    the pid, it names one process for good, whatever pids are reused later."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


class Adopted:
    """A container's main process that an earlier run of the agent started. It is not this
    agent's child, so it is watched through /proc, and how it ends is not known: its exit is
    reported as `ContainerStatusUnknown` (exit code 137, as Kubernetes reports a container it
    lost track of)."""

    def __init__(self, pid: int, ticks: int) -> None:
        self.pid, self.ticks = pid, ticks
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and start_ticks(self.pid) != self.ticks:
            self.returncode = 137
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        """Block until the process is gone (polling /proc: it is not our child)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
            time.sleep(0.02)
        return code


@dataclass
class _Proc:
    spec: ContainerSpec
    popen: subprocess.Popen[bytes] | Adopted
    started_at: dt.datetime
    cgroup: str | None
    terminated: Terminated | None = None


def pod_cgroup(pod_uid: str) -> str:
    return f"pod{pod_uid}"


def container_cgroup(pod_uid: str, name: str) -> str:
    return f"{pod_cgroup(pod_uid)}/{name}"


def safe_relative(path: str) -> PurePosixPath:
    """A file path of the spec, refused if it could land outside the pod's directory."""
    rel = PurePosixPath(path)
    if not path or rel.is_absolute() or ".." in rel.parts:
        raise StartError(f"file path {path!r} must be relative and stay inside the pod directory")
    return rel


def lay_out(pod_dir: Path, files: Mapping[str, bytes], secrets: Mapping[str, bytes]) -> None:
    """Write the spec's files (config maps) under the pod's directory, which every runtime
    gives its containers, and its Secret files on memory (:mod:`agent.runtime.secret_volume`)."""
    pod_dir.mkdir(parents=True, exist_ok=True)
    for path, content in files.items():
        target = pod_dir / safe_relative(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        target.chmod(0o640)
    secret_volume.lay_out(pod_dir, {str(safe_relative(p)): c for p, c in secrets.items()})


def container_env(env: Mapping[str, str]) -> dict[str, str]:
    return {"PATH": DEFAULT_PATH, **env}


class ProcessRuntime:
    name = "process"

    def __init__(
        self,
        root_dir: Path,
        cgroups: Cgroups | None,
        *,
        clock: Clock = utc_now,
        monotonic: Callable[[], float] = time.monotonic,
        poll_interval: float = 0.02,
        netns_name: str | None = None,
    ) -> None:
        self.root_dir = root_dir
        self.cgroups = cgroups
        self.netns_name = netns_name  # the pods' network namespace; None: the host's
        self._clock = clock
        self._monotonic = monotonic
        self._poll = poll_interval
        self._procs: dict[tuple[str, str], _Proc] = {}

    def pod_dir(self, pod_uid: str) -> Path:
        return self.root_dir / pod_uid

    def log_path(self, pod_uid: str, name: str) -> Path:
        return logs.log_path(self.pod_dir(pod_uid), name)

    def exec_prefix(self) -> tuple[str, ...]:
        """argv that runs a command in the pods' network namespace (exec probes, hooks)."""
        return netns.exec_prefix(self.netns_name)

    async def start(self, spec: ContainerSpec) -> Running:
        previous = self._procs.get(spec.key)
        if previous is not None and isinstance(self.state(*spec.key), Running):
            raise StartError(f"container {spec.name} of pod {spec.pod_uid} is already running")
        if not spec.command:
            raise StartError(f"container {spec.name} has no command")
        pod_dir = self.pod_dir(spec.pod_uid)
        env = container_env(spec.env)
        try:
            pod_dir.mkdir(parents=True, exist_ok=True)
            lay_out(pod_dir, spec.files, spec.secret_files)
            logs.begin_run(pod_dir, spec.name)  # the last run's log becomes `previous`
        except OSError as exc:
            raise StartError(f"cannot prepare pod directory {pod_dir}: {exc}") from exc
        self._check_executable(spec.command[0], env["PATH"], pod_dir)
        argv, cgroup = [*self.exec_prefix(), *spec.command], None
        if self.cgroups is not None:
            cgroup = container_cgroup(spec.pod_uid, spec.name)
            try:
                if self.cgroups.exists(cgroup):  # the previous run's, left for its counters
                    self.cgroups.remove(cgroup)
                self.cgroups.create(cgroup, spec.resources)
            except OSError as exc:
                raise StartError(f"cannot set up cgroup {cgroup}: {exc}") from exc
            procs = [str(path) for path in self.cgroups.procs_files(cgroup)]
            argv = ["/bin/sh", "-c", _ENTER, "qm-enter", *procs, "--", *argv]
        with open(self.log_path(spec.pod_uid, spec.name), "ab") as log:
            try:
                popen = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=pod_dir,
                    env=env,
                    start_new_session=True,
                    close_fds=True,
                )
            except OSError as exc:
                raise StartError(f"cannot start {spec.command[0]}: {exc}") from exc
        proc = _Proc(spec, popen, self._clock(), cgroup)
        self._procs[spec.key] = proc
        self._record(proc)
        return Running(pid=popen.pid, started_at=proc.started_at)

    # -- surviving a restart of the agent ------------------------------------------------------

    def _record_path(self, pod_uid: str, name: str) -> Path:
        return self.root_dir / ".runs" / f"{pod_uid}.{name}.json"

    def _record(self, proc: _Proc) -> None:
        """Note the run outside the pod's directory, so a restarted agent can adopt it."""
        ticks = start_ticks(proc.popen.pid)
        if ticks is None:
            return  # already gone: nothing to adopt
        record = {
            "pod_uid": proc.spec.pod_uid,
            "name": proc.spec.name,
            "pid": proc.popen.pid,
            "ticks": ticks,
            "started_at": proc.started_at.isoformat(),
            "cgroup": proc.cgroup,
        }
        path = self._record_path(proc.spec.pod_uid, proc.spec.name)
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(record))

    def adopt(self) -> list[tuple[str, str]]:
        """Take over the containers an earlier run of the agent started and that still run
        (same pid, same start time); forget the records of the others. Call once, before the
        first `start`. The keys adopted."""
        adopted: list[tuple[str, str]] = []
        for path in sorted((self.root_dir / ".runs").glob("*.json")):
            try:
                r = json.loads(path.read_text())
                pid, ticks, key = int(r["pid"]), int(r["ticks"]), (r["pod_uid"], r["name"])
                started = dt.datetime.fromisoformat(r["started_at"])
            except (OSError, ValueError, KeyError, TypeError):
                path.unlink(missing_ok=True)
                continue
            if start_ticks(pid) != ticks or key in self._procs:
                path.unlink(missing_ok=True)
                continue
            spec = ContainerSpec(pod_uid=key[0], name=key[1], command=())
            self._procs[key] = _Proc(spec, Adopted(pid, ticks), started, r.get("cgroup"))
            adopted.append(key)
        return adopted

    def close(self) -> None:
        """Remove this agent's parent cgroups once no container is left in them (the agent
        stops; pods it leaves running keep theirs)."""
        if self.cgroups is not None and not self._procs and not self.cgroups.pids(""):
            with contextlib.suppress(OSError, TimeoutError):
                self.cgroups.remove("")

    @staticmethod
    def _check_executable(command: str, path: str, pod_dir: Path) -> None:
        found = shutil.which(command, path=path) if "/" not in command else str(pod_dir / command)
        if found is None or not os.access(found, os.X_OK):
            raise StartError(f"executable {command!r} not found")

    def state(self, pod_uid: str, name: str) -> ContainerState | None:
        proc = self._procs.get((pod_uid, name))
        if proc is None:
            return None
        if proc.terminated is not None:
            return proc.terminated
        returncode = proc.popen.poll()
        if returncode is None:
            return Running(pid=proc.popen.pid, started_at=proc.started_at)
        return self._finish(proc, returncode)

    def _finish(self, proc: _Proc, returncode: int) -> Terminated:
        finished_at = self._clock()
        code, signum = from_returncode(returncode)
        oom = False
        if self.cgroups is not None and proc.cgroup is not None:
            oom = self.cgroups.oom_killed(proc.cgroup, sigkilled=signum == signal.SIGKILL)
        self._kill_leftovers(proc)
        unknown = isinstance(proc.popen, Adopted) and not oom
        proc.terminated = Terminated(
            exit_code=code,
            reason=REASON_UNKNOWN if unknown else exit_reason(code, oom),
            started_at=proc.started_at,
            finished_at=finished_at,
            signal=signum,
        )
        return proc.terminated

    def _kill_leftovers(self, proc: _Proc) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.popen.pid, signal.SIGKILL)
        if self.cgroups is not None and proc.cgroup is not None:
            for pid in self.cgroups.pids(proc.cgroup):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    async def stop(self, pod_uid: str, name: str, grace_seconds: float) -> Terminated | None:
        proc = self._procs.get((pod_uid, name))
        if proc is None:
            return None
        state = self.state(pod_uid, name)
        if isinstance(state, Terminated):
            return state
        with contextlib.suppress(ProcessLookupError):
            proc.popen.send_signal(signal.SIGTERM)
        deadline = self._monotonic() + grace_seconds
        while proc.popen.poll() is None and self._monotonic() < deadline:
            await asyncio.sleep(self._poll)
        if proc.popen.poll() is None:
            self._sigkill(proc)
            while proc.popen.poll() is None:
                await asyncio.sleep(self._poll)
        result = self.state(pod_uid, name)
        assert isinstance(result, Terminated)
        return result

    def _sigkill(self, proc: _Proc) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.popen.kill()
        self._kill_leftovers(proc)

    def usage(self, pod_uid: str, name: str | None = None) -> Usage | None:
        if self.cgroups is None:
            return None
        rel = pod_cgroup(pod_uid) if name is None else container_cgroup(pod_uid, name)
        return self.cgroups.usage(rel) if self.cgroups.exists(rel) else None

    def containers(self, pod_uid: str | None = None) -> list[tuple[str, str]]:
        return [key for key in self._procs if pod_uid is None or key[0] == pod_uid]

    async def cleanup(self, pod_uid: str) -> None:
        for key in self.containers(pod_uid):
            await self.stop(*key, grace_seconds=0)
            del self._procs[key]
        if self.cgroups is not None and self.cgroups.exists(pod_cgroup(pod_uid)):
            self.cgroups.remove(pod_cgroup(pod_uid))
        secret_volume.release(self.pod_dir(pod_uid))
        shutil.rmtree(self.pod_dir(pod_uid), ignore_errors=True)
        for record in (self.root_dir / ".runs").glob(f"{pod_uid}.*.json"):
            record.unlink(missing_ok=True)
