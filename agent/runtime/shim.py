"""The shim of a runc run: the one process that learns how the container ended.

runc does not tell a detached container's exit status to anyone, and a foreground `runc run`
deletes the cgroup, and with it the OOM counter, before it returns. So the `runc` runtime
(`agent/runtime/runc.py`) starts this module (`python -m agent.runtime.shim`) for every run.
It makes itself a child subreaper, runs `runc run --detach`, writes `started` (the
container's pid) when runc returns, inherits the container's init as its child, reaps it (the
exact exit code or signal), reads the OOM counter of the still-existing cgroup, runs
`runc delete`, and writes `result.json`. It outlives the agent, so a restarted agent that
adopts the run still reads the exact result.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent.runtime.base import from_returncode
from agent.runtime.cgroups import Cgroups

UNKNOWN_EXIT = 255  # the shim itself died: the run's exit status is lost
_PR_SET_CHILD_SUBREAPER = 36
_libc = ctypes.CDLL(None, use_errno=True)


def read_result(bundle: Path) -> dict[str, Any]:
    try:
        result = json.loads((bundle / "result.json").read_text())
    except (OSError, ValueError):
        return {"error": "the run's shim ended without a result"}
    return result if isinstance(result, dict) else {}


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.rename(path)


def _last_error(log: Path) -> str:
    """runc's last error message from its JSON log."""
    message = ""
    with contextlib.suppress(OSError):
        for line in log.read_text().splitlines():
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if entry.get("level") in ("error", "fatal"):
                    message = str(entry.get("msg", ""))
    return message


def _reap(pid: int) -> int:
    """Wait for the container's init (our child once runc has exited) and return its exit
    status as Popen would (negative for a signal); reap any other orphan on the way."""
    while True:
        try:
            child, status = os.waitpid(-1, 0)
        except ChildProcessError:  # not ours after all: wait without a status
            while Path(f"/proc/{pid}").exists():
                time.sleep(0.05)
            return UNKNOWN_EXIT
        if child == pid:
            return os.waitstatus_to_exitcode(status)


def shim_main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m agent.runtime.shim")
    for option in ("--runc", "--root", "--bundle", "--id", "--memory-dir", "--cgroup-version"):
        p.add_argument(option, required=True)
    args = p.parse_args(list(argv))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the agent stops containers with runc kill
    _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    bundle = Path(args.bundle)
    runc = [args.runc, "--root", args.root, "--log", str(bundle / "runc.log")]
    runc += ["--log-format", "json"]
    pid_file = str(bundle / "pid")
    command = [*runc, "run", "--detach", "--pid-file", pid_file, "--bundle", str(bundle), args.id]
    code = subprocess.run(command, stdin=subprocess.DEVNULL, check=False).returncode
    if code != 0:
        error = _last_error(bundle / "runc.log") or f"runc run exited with {code}"
        subprocess.run([*runc, "delete", "--force", args.id], capture_output=True, check=False)
        write_atomically(bundle / "result.json", json.dumps({"error": error}))
        return 1
    pid = int(Path(pid_file).read_text())
    write_atomically(bundle / "started", str(pid))
    exit_code, signum = from_returncode(_reap(pid))
    memory = Cgroups(int(args.cgroup_version), {"memory": Path(args.memory_dir)})
    oom = memory.oom_killed("", sigkilled=signum == signal.SIGKILL)
    subprocess.run([*runc, "delete", "--force", args.id], capture_output=True, check=False)
    result = {"exit_code": exit_code, "signal": signum, "oom_killed": oom}
    write_atomically(bundle / "result.json", json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(shim_main(sys.argv[1:]))
