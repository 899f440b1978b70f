"""A control plane of real processes for the controllers' integration tests: a database and a
Redis index of its own, a revisioner, and whatever Celery workers, dispatcher or loops a test
starts. The ``plane`` fixture (in ``conftest.py``) builds one per test."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from app.devstack.supervise import free_port

ROOT = Path(__file__).resolve().parents[2]
NS = "ctl"


@dataclass
class Plane:
    url: str
    db: psycopg.Connection[Any]
    env: dict[str, str]
    procs: list[subprocess.Popen[bytes]]

    def start(self, *argv: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([sys.executable, *argv], cwd=ROOT, env=self.env)
        self.procs.append(proc)
        return proc

    def replicaset(self, name: str, replicas: int) -> str:
        uid = str(uuid.uuid4())
        template = {
            "metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        }
        spec = {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                "template": template}  # fmt: skip
        self.db.execute(
            "INSERT INTO replicasets (uid, namespace, name, labels, spec)"
            " VALUES (%s, %s, %s, %s, %s)",
            (uid, NS, name, json.dumps({"app": name}), json.dumps(spec)),
        )
        return uid

    def pods_of(self, uid: str) -> list[str]:
        rows = self.db.execute(
            "SELECT name FROM pods WHERE owner_references @> %s::jsonb"
            " AND deletion_timestamp IS NULL ORDER BY name",
            (json.dumps([{"uid": uid}]),),
        ).fetchall()
        return [r[0] for r in rows]

    def wait(self, predicate: Any, timeout: float = 60.0, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.1)
        state = self.db.execute(
            "SELECT (SELECT count(*) FROM pods), (SELECT json_agg(json_build_array(name, status,"
            " annotations)) FROM replicasets), (SELECT json_agg(json_build_array(generation,"
            " status, spec->'template')) FROM deployments)"
        ).fetchone()
        raise AssertionError(f"timed out waiting for {what}; pods, statuses: {state}")


def start_worker(p: Plane, concurrency: int = 2) -> subprocess.Popen[bytes]:
    return p.start(
        "-m", "celery", "-A", "workers.app", "worker", "--loglevel=WARNING",
        f"--concurrency={concurrency}", "--without-gossip", "--without-mingle",
    )  # fmt: skip


def scrape(port: int) -> dict[str, float]:
    """The samples a process serves on ``/metrics`` (empty while it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = re.fullmatch(r"([^ #][^ ]*) (\S+)", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def start_dispatcher(p: Plane) -> subprocess.Popen[bytes]:
    """The dispatcher, returned once it has listed everything and tails the stream: from then
    on every change reaches it as a change. (Before that, a change is part of its first list,
    where the kinds a tick covers, Nodes, are left to a tick these tests may not run.)"""
    port = int(p.env.setdefault("QM_DISPATCH_METRICS_PORT", str(free_port())))
    proc = p.start("-m", "workers.dispatch")
    p.wait(lambda: scrape(port).get("qm_dispatch_relists_total", 0) >= 1, what="the dispatcher")
    return proc
