"""Timing requests against one API server: REST lists the UI reads, and the UI's pages.

Server time is the client's measured time on loopback (connection kept alive, one request at a
time), which is the server's time plus a loopback round trip; a ``Server-Timing`` header, when
the server sets one, is recorded beside it.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

import httpx

from bench.common import percentile

_DUR = re.compile(r"(?P<name>[\w.-]+)(?:;[^,]*?dur=(?P<dur>[0-9.]+))?")


@dataclass
class Target:
    """One named request; ``{i}`` in ``paths`` items are rotated over so repeats differ."""

    name: str
    paths: list[str]


def server_timing(header: str | None) -> dict[str, float]:
    """``Server-Timing: db;dur=1.2, render;dur=3`` as {"db": 1.2, "render": 3.0}."""
    out: dict[str, float] = {}
    for part in (header or "").split(","):
        m = _DUR.search(part.strip())
        if m and m.group("dur"):
            out[m.group("name")] = float(m.group("dur"))
    return out


def time_target(client: httpx.Client, t: Target, repeats: int, warmup: int = 3) -> dict[str, Any]:
    """``repeats`` timed GETs (after ``warmup`` untimed ones): p50/p99 ms, bytes, status."""
    ms: list[float] = []
    sizes: list[int] = []
    timings: dict[str, list[float]] = {}
    statuses: dict[int, int] = {}
    for i in range(warmup + repeats):
        path = t.paths[i % len(t.paths)]
        t0 = time.perf_counter()
        r = client.get(path)
        elapsed = (time.perf_counter() - t0) * 1000
        if i < warmup:
            if r.status_code == 404 and i == 0:
                return {"missing": True, "status": 404, "path": path}
            continue
        statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
        ms.append(elapsed)
        sizes.append(len(r.content))
        for k, v in server_timing(r.headers.get("server-timing")).items():
            timings.setdefault(k, []).append(v)
    out: dict[str, Any] = {
        "path": t.paths[0],
        "requests": repeats,
        "p50_ms": round(percentile(ms, 50), 2),
        "p99_ms": round(percentile(ms, 99), 2),
        "max_ms": round(max(ms), 2),
        "bytes_p50": int(percentile([float(s) for s in sizes], 50)),
        "bytes_max": max(sizes),
        "status": statuses,
    }
    if timings:
        out["server_timing_p50_ms"] = {k: round(percentile(v, 50), 2) for k, v in timings.items()}
        out["server_timing_p99_ms"] = {k: round(percentile(v, 99), 2) for k, v in timings.items()}
    return out


def sign_in(base: str, token: str) -> str | None:
    """POST the sign-in form; the session cookie as a ``Cookie`` header value (None when the
    UI has no sign-in, or it refused the token). Sent by hand: the cookie may be ``Secure``."""
    r = httpx.post(f"{base}/ui/signin", data={"token": token, "next": "/ui/"},
                   headers={"Origin": base}, follow_redirects=False, timeout=30)  # fmt: skip
    if r.status_code not in (302, 303):
        return None
    pairs = [h.split(";", 1)[0] for h in r.headers.get_list("set-cookie")]
    return "; ".join(p for p in pairs if "=" in p and p.split("=", 1)[1]) or None
