"""The discovery service as a process on a real database and revision stream: snapshot, one-
endpoint deltas, resume from a version, acknowledgements and lag, the drain query, restarts,
and hostile subscribers."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from app.core.traffic import protocol
from app.core.traffic.protocol import Replica
from app.devstack.supervise import free_port

ROOT = Path(__file__).resolve().parents[2]
NS = "disc"


class Discovery:
    def __init__(self, url: str) -> None:
        self.url = url
        self.port = free_port()
        self.http = f"http://127.0.0.1:{free_port()}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "DATABASE_URL": self.url, "QM_STREAM_DATABASE_URL": self.url}
        http_port = self.http.rsplit(":", 1)[1]
        argv = ["--port", str(self.port), "--http-port", http_port, "--log-level", "info"]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app.discovery", *argv], cwd=ROOT, env=env
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(self.http + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            assert self.proc.poll() is None, "discovery exited"
            assert time.monotonic() < deadline, "discovery never became healthy"
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=15)


@pytest.fixture(scope="module")
def own_db(make_database: Any, revisioner_on: Any) -> Iterator[str]:
    url = make_database("qm_discovery")
    with revisioner_on(url):
        yield url


@pytest.fixture
def db(own_db: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(own_db, autocommit=True) as conn:
        yield conn


@pytest.fixture
def discovery(own_db: str) -> Iterator[Discovery]:
    d = Discovery(own_db)
    d.start()
    try:
        yield d
    finally:
        d.stop()


def _service(db: psycopg.Connection[Any], name: str, kind: str = "ClusterIP") -> None:
    spec = {"type": kind, "selector": {"app": name}, "ports": [{"name": "http", "port": 80}]}
    db.execute(
        "INSERT INTO services (uid, namespace, name, spec) VALUES (%s, %s, %s, %s)",
        (uuid.uuid4(), NS, name, json.dumps(spec)),
    )


def _endpoint(pod: str, ready: bool = True, terminating: bool = False) -> dict[str, Any]:
    return {
        "addresses": ["10.88.0.11"],
        "conditions": {"ready": ready, "serving": ready, "terminating": terminating},
        "nodeName": "local-a",
        "zone": "zone-a",
        "targetRef": {"kind": "Pod", "namespace": NS, "name": pod},
    }


def _slice(
    db: psycopg.Connection[Any], name: str, service: str, *endpoints: dict[str, Any]
) -> None:
    spec = {
        "addressType": "IPv4",
        "endpoints": list(endpoints),
        "ports": [{"name": "http", "port": 8000}],
    }
    labels = {"kubernetes.io/service-name": service}
    cur = db.execute(
        "UPDATE endpointslices SET spec = %s WHERE namespace = %s AND name = %s",
        (json.dumps(spec), NS, name),
    )
    if cur.rowcount == 0:
        db.execute(
            "INSERT INTO endpointslices (uid, namespace, name, labels, spec)"
            " VALUES (%s, %s, %s, %s, %s)",
            (uuid.uuid4(), NS, name, json.dumps(labels), json.dumps(spec)),
        )


class Sub:
    """A subscriber speaking the protocol, acknowledging what it applies (unless told not to)."""

    def __init__(
        self, port: int, ident: str, scope: str = "all", version: int = 0, ack: bool = True
    ) -> None:
        self.port, self.ident, self.scope, self.ack = port, ident, scope, ack
        self.replica = Replica(version=version)
        self.messages: list[dict[str, Any]] = []
        self.sizes: list[int] = []
        self.task: asyncio.Task[None] | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def start(self) -> None:
        reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port, limit=2**26)
        self.writer.write(
            protocol.subscribe(self.ident, "n", "z", self.scope, self.replica.version)
        )
        self.task = asyncio.ensure_future(self._read(reader))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        assert self.writer is not None
        while line := await reader.readline():
            message = protocol.decode(line)
            self.messages.append(message)
            self.sizes.append(len(line))
            applied = self.replica.apply(message)
            if applied.reply and self.ack:
                self.writer.write(applied.reply)

    async def until(self, predicate: Any, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < deadline, (
                f"{self.ident}: condition not met; at {self.replica.version}"
            )
            await asyncio.sleep(0.02)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.task is not None:
            self.task.cancel()


def _ready(sub: Sub, pod: str) -> Any:
    return (sub.replica.resources.get(f"e/{NS}/web/{pod}") or {}).get("r")


async def test_snapshot_then_one_endpoint_deltas_and_resume(db: Any, discovery: Discovery) -> None:
    _service(db, "web")
    _slice(db, "web-1", "web", _endpoint("a"), _endpoint("b"))
    sub = Sub(discovery.port, "node-1")
    await sub.start()
    await sub.until(lambda: _ready(sub, "b") is True)
    assert sub.replica.resources[f"s/{NS}/web"]["ports"] == [
        {"name": "http", "port": 80, "protocol": "TCP"}
    ]
    first = len(sub.messages)
    _slice(db, "web-1", "web", _endpoint("a"), _endpoint("b", ready=False))
    await sub.until(lambda: _ready(sub, "b") is False)
    deltas = [m for m in sub.messages[first:] if m["t"] == "delta"]
    assert deltas and set(deltas[-1]["set"]) == {f"e/{NS}/web/b"}
    assert (
        max(
            s
            for m, s in zip(sub.messages[first:], sub.sizes[first:], strict=True)
            if m["t"] == "delta"
        )
        < 300
    )
    held = sub.replica.version
    await sub.close()
    # Missed while away: one change. Resuming from its version brings only that, no snapshot.
    _slice(db, "web-1", "web", _endpoint("a", ready=False), _endpoint("b", ready=False))
    again = Sub(discovery.port, "node-1", version=held)
    again.replica.resources = dict(sub.replica.resources)
    await again.start()
    await again.until(lambda: _ready(again, "a") is False)
    # The resume may land before the replica saw the change (an empty delta, then the step).
    resumed = [m for m in again.messages if m["t"] != "ping"]
    assert {m["t"] for m in resumed} == {"delta"}
    assert set().union(*(m["set"] for m in resumed)) == {f"e/{NS}/web/a"}
    await again.close()


async def test_acks_lag_and_the_drain_query(db: Any, discovery: Discovery) -> None:
    _service(db, "drn")
    ep = dict(_endpoint("p1"), targetRef={"kind": "Pod", "namespace": NS, "name": "p1"})
    _slice(db, "drn-1", "drn", ep)
    good, mute = Sub(discovery.port, "good"), Sub(discovery.port, "mute", ack=False)
    await good.start()
    await mute.start()
    await good.until(lambda: f"e/{NS}/drn/p1" in good.replica.resources)
    await mute.until(lambda: f"e/{NS}/drn/p1" in mute.replica.resources)
    async with httpx.AsyncClient(base_url=discovery.http, timeout=10) as http:
        answer = (
            await http.get("/v1/drained", params={"namespace": NS, "pod": "p1", "timeout": 0})
        ).json()
        assert answer["drained"] is False  # still ready everywhere
        _slice(
            db,
            "drn-1",
            "drn",
            dict(ep, conditions={"ready": False, "serving": True, "terminating": True}),
        )
        await good.until(lambda: good.replica.resources[f"e/{NS}/drn/p1"]["t"] is True)
        answer = (
            await http.get("/v1/drained", params={"namespace": NS, "pod": "p1", "timeout": 0.5})
        ).json()
        assert answer["drained"] is False and answer["waiting"] == ["mute"]
        subs = {s["id"]: s for s in (await http.get("/v1/subscribers")).json()["subscribers"]}
        assert subs["good"]["acked"] == answer["version"] and subs["good"]["lag_versions"] == 0
        assert subs["mute"]["acked"] < answer["version"] and subs["mute"]["lag_seconds"] > 0
        metrics = (await http.get("/metrics")).text
        assert 'qm_discovery_subscriber_acked_version{subscriber="good"}' in metrics
        # The silent subscriber leaves: every live subscriber now holds the version.
        await mute.close()
        answer = (
            await http.get("/v1/drained", params={"namespace": NS, "pod": "p1", "timeout": 5})
        ).json()
        assert answer["drained"] is True and answer["waiting"] == []
        unknown = (
            await http.get("/v1/drained", params={"namespace": NS, "pod": "nope", "timeout": 0})
        ).json()
        assert unknown == {"drained": True, "version": None, "waiting": []}
        bad = await http.get("/v1/drained", params={"namespace": NS, "timeout": "x"})
        assert bad.status_code == 422
    await good.close()


async def test_a_restarted_replica_brings_subscribers_back_to_the_same_state(
    db: Any, discovery: Discovery
) -> None:
    _service(db, "rst")
    _slice(db, "rst-1", "rst", _endpoint("r1"))
    sub = Sub(discovery.port, "node-r")
    await sub.start()
    await sub.until(lambda: f"e/{NS}/rst/r1" in sub.replica.resources)
    held = sub.replica.version
    await sub.close()
    discovery.stop()
    _slice(db, "rst-1", "rst", _endpoint("r1"), _endpoint("r2"))
    discovery.start()
    again = Sub(discovery.port, "node-r", version=held)
    again.replica.resources = dict(sub.replica.resources)
    await again.start()
    await again.until(lambda: f"e/{NS}/rst/r2" in again.replica.resources)
    # No history before its list, but the revision log says which services changed since the
    # version held: only those are sent, whole, not a snapshot.
    first = again.messages[0]
    assert first["t"] == "delta" and first["reset"] == [f"s/{NS}/rst"], first
    assert set(first["set"]) == {f"s/{NS}/rst", f"e/{NS}/rst/r1", f"e/{NS}/rst/r2"}
    await again.close()


async def test_hostile_subscribers_are_closed_with_a_reason(discovery: Discovery) -> None:
    for first in (
        b"not json\n",
        b'{"t": "ack", "v": 1, "nonce": 1}\n',
        b'{"t":"subscribe","id":""}\n',
    ):
        reader, writer = await asyncio.open_connection("127.0.0.1", discovery.port)
        writer.write(first)
        line = await asyncio.wait_for(reader.readline(), 5)
        assert json.loads(line)["t"] == "error"
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
    reader, writer = await asyncio.open_connection("127.0.0.1", discovery.port)
    writer.write(b"x" * (70 * 1024))
    line = await asyncio.wait_for(reader.readline(), 5)
    assert b"too long" in line
    writer.close()
    # The replica still serves.
    assert httpx.get(discovery.http + "/healthz", timeout=2).status_code == 200


async def test_the_api_lists_every_replicas_subscribers_and_names_one_that_is_away(
    discovery: Discovery,
) -> None:
    from app.api.subscribers import gather

    sub = Sub(discovery.port, "listed")
    await sub.start()
    await sub.until(lambda: sub.replica.version > 0 or len(sub.messages) > 0)
    away = f"http://127.0.0.1:{free_port()}"
    body = await gather([discovery.http, away])
    assert [i["metadata"]["name"] for i in body["items"]] == ["listed"]
    assert body["items"][0]["replica"] == discovery.http
    replicas = {r["url"]: r for r in body["replicas"]}
    assert replicas[discovery.http]["subscribers"] == 1
    assert "ConnectError" in replicas[away]["error"]
    await sub.close()
