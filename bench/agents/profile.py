"""Where an API server's CPU goes under the hollow-node load: py-spy, sampled for one window.

``py-spy record --format raw`` writes collapsed stacks (``frame;frame;... count``). The
summary keeps what a reader needs to find the cost: the share of samples per leaf function
(self time), per function anywhere on the stack (inclusive time), and per package (by the
leaf frame's file). py-spy is optional: without it the benchmark reports no profile.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^:()]+)(?::\d+)?\)$")
_PACKAGES = (
    "h11",
    "uvicorn",
    "litestar",
    "msgspec",
    "asyncpg",
    "json",
    "asyncio",
    "app/api",
    "app/store",
    "app/stream",
    "app/core",
)


def find_py_spy(explicit: str | None) -> str | None:
    return explicit or shutil.which("py-spy")


def record(py_spy: str, pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes]:
    """Start sampling ``pid`` for ``seconds`` (100 Hz, without pausing it)."""
    argv = [py_spy, "record", "-p", str(pid), "-d", str(int(seconds)), "-r", "100"]
    argv += ["--nonblocking", "-f", "raw", "-o", str(out)]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _split(frame: str) -> tuple[str, str]:
    m = _FRAME.match(frame.strip())
    return (m["func"], m["file"]) if m else (frame.strip(), "")


def package_of(path: str) -> str:
    for name in _PACKAGES:
        if f"/{name}/" in path or path.endswith(f"/{name}.py") or f"{name}/" in path[:30]:
            return name
    return "other"


def summarize(collapsed: str, top: int = 25) -> dict[str, Any]:
    """Shares (percent of samples) by leaf function, by function inclusive, by package."""
    leaf: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    packages: Counter[str] = Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_split(f) for f in stack.split(";")]
        total += count
        func, path = frames[-1]
        leaf[f"{func} ({_short(path)})"] += count
        packages[package_of(path)] += count
        for name in {f"{fn} ({_short(p)})" for fn, p in frames}:
            inclusive[name] += count

    def shares(counter: Counter[str], n: int) -> list[tuple[str, float]]:
        return [(k, round(100 * v / total, 1)) for k, v in counter.most_common(n)]

    return {
        "samples": total,
        "self_pct": shares(leaf, top) if total else [],
        "inclusive_pct": shares(inclusive, top) if total else [],
        "package_self_pct": shares(packages, len(_PACKAGES) + 1) if total else [],
    }


def _short(path: str) -> str:
    for marker in ("site-packages/", "/lib/python3", "/work/main/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path
