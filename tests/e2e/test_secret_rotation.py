"""Key rotation with the API serving (ADR 0048): two API servers on one database and keys file.

A client keeps reading and updating Secrets through both servers while one of them is told to
rotate. The other server picks the new key up on its own; every read returns the value last
written, no update is lost (the re-encryption's writes are compare-and-swaps, the client's are
conditional too and retried on Conflict); afterwards SQL shows only the new key id, and the old
key can be removed with every Secret still readable.
"""

from __future__ import annotations

import base64
import contextlib
import io
import os
import re
import secrets
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from app.cli.main import main
from app.devstack.apiserver import ApiServer
from app.devstack.supervise import free_port
from app.store import secret_keys

API = "/apis/quaymaster.io/v1"
NS = "rotation"
SECRETS = f"{API}/namespaces/{NS}/secrets"
KEYS = "/apis/encryption.quaymaster.io/v1/secretkeys"
COUNT = 30  # Secrets the client keeps changing
STATIC = 300  # Secrets only the re-encryption rewrites


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.fixture
def cluster(
    make_database: Callable[[str], str], redis_url: str, tmp_path: Path
) -> Iterator[tuple[list[httpx.Client], str, Path, str]]:
    url = make_database("qm_rotation")
    with psycopg.connect(url, autocommit=True) as db:  # stored before encryption was on
        db.execute(
            "INSERT INTO secrets (uid, namespace, name, spec) VALUES (gen_random_uuid(), %s,"
            ' \'legacy\', \'{"type": "Opaque", "data": {"n": "MA=="}}\')',
            (NS,),
        )
    keys = tmp_path / "keys.json"
    secret_keys.ensure_keys_file(keys)
    token = secrets.token_urlsafe(24)
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "QM_STREAM_DATABASE_URL": url,
        "QM_BROKER_URL": redis_url,
        "QM_BOOTSTRAP_TOKEN": token,
        "QM_SECRET_KEYS": str(keys),
        "PYTHONUNBUFFERED": "1",
    }
    servers = []
    try:
        for i in range(2):
            port = free_port()
            server = ApiServer(port, token, {**env, "QM_API_PORT": str(port)},
                               tmp_path / f"api{i}.log")  # fmt: skip
            server.start(timeout=60)
            servers.append(server)
        headers = {"Authorization": f"Bearer {token}"}
        clients = [
            httpx.Client(base_url=s.url, headers=headers, timeout=30.0, verify=s.ca_file or True)
            for s in servers
        ]
        yield clients, url, keys, token
        for c in clients:
            c.close()
    finally:
        for server in servers:
            server.stop()


class Churn:
    """Reads and conditional updates of every Secret, alternating servers, until stopped."""

    def __init__(self, clients: list[httpx.Client]) -> None:
        self.clients = clients
        self.last = {i: 0 for i in range(COUNT)}  # the value each Secret last took
        self.errors: list[str] = []
        self.writes = self.conflicts = self.reads = 0
        self.stop = threading.Event()

    def run(self) -> None:
        turn = 0
        while not self.stop.is_set():
            for i in range(COUNT):
                turn += 1
                self.step(self.clients[turn % 2], i)

    def step(self, c: httpx.Client, i: int) -> None:
        r = c.get(f"{SECRETS}/s{i}")
        self.reads += 1
        if r.status_code != 200:
            self.errors.append(f"GET s{i}: {r.status_code} {r.text}")
            return
        obj: dict[str, Any] = r.json()
        seen = int(base64.b64decode(obj["data"]["n"]))
        if seen < self.last[i]:
            self.errors.append(f"s{i}: read {seen} after writing {self.last[i]}")
        obj["data"] = {"n": b64(str(seen + 1))}
        r = c.put(f"{SECRETS}/s{i}", json=obj)
        if r.status_code == 200:
            self.last[i] = seen + 1
            self.writes += 1
        elif r.status_code == 409:
            self.conflicts += 1
        else:
            self.errors.append(f"PUT s{i}: {r.status_code} {r.text}")


def key_ids(url: str) -> set[str]:
    with psycopg.connect(url) as db:
        rows = db.execute("SELECT DISTINCT split_part(spec->>'data', '.', 2) FROM secrets")
        return {r[0] for r in rows}


def qm(client: httpx.Client, token: str, *args: str) -> tuple[int, str]:
    """``qm --server URL --token T ARGS...`` in this process: its exit code and output."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["--server", str(client.base_url).rstrip("/"), "--token", token, *args])
    return code, out.getvalue()


def test_rotation_while_serving(
    cluster: tuple[list[httpx.Client], str, Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (a, b), url, keys, token = cluster
    monkeypatch.setenv("QM_CONFIG", str(keys.parent / "no-qm-config.yaml"))
    deadline = time.monotonic() + 30
    while a.get(KEYS).json()["plaintextSecrets"]:  # sealed by the servers as they start
        assert time.monotonic() < deadline
        time.sleep(0.2)
    r = a.post(f"{API}/namespaces", json={"kind": "Namespace", "metadata": {"name": NS}})
    assert r.status_code == 201, r.text
    assert a.get(f"{SECRETS}/legacy").json()["data"] == {"n": b64("0")}
    for i in range(COUNT + STATIC):
        body = {"kind": "Secret", "metadata": {"name": f"s{i}"}, "data": {"n": b64("0")}}
        assert a.post(SECRETS, json=body).status_code == 201
    old = a.get(KEYS).json()["activeKeyId"]
    assert key_ids(url) == {old}

    churn = Churn([a, b])
    worker = threading.Thread(target=churn.run, daemon=True)
    worker.start()
    try:
        time.sleep(1.0)
        started = time.monotonic()
        code, printed = qm(a, token, "secrets", "rotate-key")  # no --wait: the client goes on
        assert code == 0, printed
        new = printed.split("new active key: ")[1].split()[0]
        assert new != old and a.get(KEYS).json()["activeKeyId"] == new
        deadline = time.monotonic() + 120
        while True:
            status = a.get(KEYS).json()
            counts = {k["id"]: k["secrets"] for k in status["keys"]}
            if not status["reencryption"]["running"] and counts.get(old) == 0:
                break
            assert time.monotonic() < deadline, status
            time.sleep(0.2)
        took = time.monotonic() - started
        time.sleep(1.0)  # the client keeps going on the new key alone
    finally:
        churn.stop.set()
        worker.join(timeout=60)
    print(f"rotation: {took:.1f}s, {status['reencryption']}, client: {churn.reads} reads,"
          f" {churn.writes} writes, {churn.conflicts} conflicts")  # fmt: skip
    assert not churn.errors, churn.errors[:5]
    assert churn.writes > COUNT, (churn.writes, churn.conflicts)
    assert status["reencryption"]["failed"] == []
    assert status["reencryption"]["reencrypted"] >= STATIC
    assert b.get(KEYS).json()["activeKeyId"] == new  # the other server switched by itself
    assert key_ids(url) == {new}

    code, printed = qm(b, token, "secrets", "status")
    assert code == 0 and re.search(rf"{new}\s+yes\s+{COUNT + STATIC + 1}\n", printed), printed
    code, printed = qm(a, token, "secrets", "prune-keys")
    assert code == 0 and f"removed keys: {old}" in printed, printed
    ring, _ = secret_keys.parse(keys.read_text())
    assert set(ring.keys) == {new}
    assert stat.S_IMODE(keys.stat().st_mode) == 0o600
    for c in (a, b):
        for i in range(COUNT + STATIC):
            got = c.get(f"{SECRETS}/s{i}").json()
            assert got["data"] == {"n": b64(str(churn.last.get(i, 0)))}, (i, got)
