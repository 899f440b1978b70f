"""The API server and a Celery worker through a real PgBouncer in transaction pooling mode
(Debian's, run as an unprivileged user by the ``pgbouncer`` fixture; ADR 0057).

The API and the workers reach the database through PgBouncer as the application role
(``qm_app`` once migration 0014 made it), the revision stream directly. PgBouncer is given
fewer server connections than the API's pool holds, so server connections are shared between
client ones and any session state one statement left behind would show up in another's.
Checked: writes, reads, watches and concurrent writes through the API; a ReplicaSet reconciled
by a worker (its key lock and its creates); the key lock held by a transaction and left
nowhere; PgBouncer's pools and stats on the API's ``/metrics``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from app.devstack.apiserver import ApiServer
from app.devstack.pgbouncer import EmbeddedPgBouncer, pooled_env
from app.devstack.supervise import free_port
from app.store.store import Store

ROOT = Path(__file__).resolve().parents[2]
API = "/apis/quaymaster.io/v1"
NS = "pooled"


def eventually(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


class Pooled:
    """A database of its own, an API server and its environment, through ``pgbouncer``."""

    def __init__(self, url: str, env: dict[str, str], api: ApiServer, db: Any) -> None:
        self.url, self.env, self.api, self.db = url, env, api, db
        self.database = url.rsplit("/", 1)[-1]

    @property
    def user(self) -> str:
        return self.env["DATABASE_URL"].split("//", 1)[1].split("@", 1)[0]


@pytest.fixture(scope="module")
def pooled(
    make_database: Any,
    redis_url: str,
    pgbouncer: EmbeddedPgBouncer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Pooled]:
    url = make_database("qm_pgb")
    token = secrets.token_urlsafe(24)
    port = free_port()
    broker = redis_url.rsplit("/", 1)[0] + f"/{secrets.randbelow(14) + 1}"
    env = {
        **os.environ,
        "QM_BROKER_URL": broker,
        "QM_BOOTSTRAP_TOKEN": token,
        "QM_API_PORT": str(port),
        "QM_API_URL": f"http://127.0.0.1:{port}",
        "QM_RESYNC_SECONDS": "2",
        "PYTHONUNBUFFERED": "1",
        **pooled_env(url, pgbouncer),
    }
    log = tmp_path_factory.mktemp("pooled-api") / "api.log"
    api = ApiServer(port, token, env, log, cwd=ROOT)
    with psycopg.connect(url, autocommit=True) as db:
        api.start(timeout=60.0)  # and its revisioner, on the direct stream URL
        try:
            yield Pooled(url, env, api, db)
        finally:
            api.stop()
            db.execute(  # the server has few slots; many tests make databases
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                " WHERE database = current_database() AND NOT active"
            )


@pytest.fixture(scope="module")
def http(pooled: Pooled) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {pooled.api.token}"}
    with httpx.Client(base_url=pooled.api.url, headers=headers, timeout=30.0) as client:
        made = client.post(f"{API}/namespaces", json={"kind": "Namespace",
                           "apiVersion": "quaymaster.io/v1", "metadata": {"name": NS}})  # fmt: skip
        assert made.status_code in (201, 409), made.text
        yield client


def configmap(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "quaymaster.io/v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": NS}, "data": data}  # fmt: skip


def test_requests_go_through_pgbouncer_as_the_app_role(
    pooled: Pooled, pgbouncer: EmbeddedPgBouncer
) -> None:
    assert pooled.env["QM_PGBOUNCER"] == "1"
    assert f"@127.0.0.1:{pgbouncer.port}/" in pooled.env["DATABASE_URL"]
    assert f"@127.0.0.1:{pgbouncer.port}/" not in pooled.env["QM_STREAM_DATABASE_URL"]
    exists = pooled.db.execute("SELECT 1 FROM pg_roles WHERE rolname = 'qm_app'").fetchone()
    assert pooled.user == ("qm_app" if exists else "postgres")


def test_writes_reads_and_a_watch_through_pgbouncer(pooled: Pooled, http: httpx.Client) -> None:
    base = f"{API}/namespaces/{NS}/configmaps"
    start = http.get(base).json()["metadata"]["resourceVersion"]
    events: list[dict[str, Any]] = []

    def watch() -> None:
        params = {"watch": "1", "resourceVersion": start, "timeoutSeconds": "20"}
        with http.stream("GET", base, params=params) as stream:
            for line in stream.iter_lines():
                if line:
                    events.append(json.loads(line))
                if len(events) >= 3:
                    return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    r = http.post(base, json=configmap("one", {"a": "1"}))
    assert r.status_code == 201, r.text
    got = http.get(f"{base}/one").json()
    got["data"]["a"] = "2"
    r = http.put(f"{base}/one", json=got)
    assert r.status_code == 200, r.text
    r = http.delete(f"{base}/one")
    assert r.status_code == 200, r.text
    watcher.join(timeout=30)
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "DELETED"]
    assert events[1]["object"]["data"] == {"a": "2"}


def test_concurrent_writes_share_fewer_server_connections(
    pooled: Pooled, http: httpx.Client, pgbouncer: EmbeddedPgBouncer
) -> None:
    base = f"{API}/namespaces/{NS}/configmaps"

    def make(i: int) -> int:
        return http.post(base, json=configmap(f"many-{i}", {"i": str(i)})).status_code

    with ThreadPoolExecutor(32) as pool:
        codes = list(pool.map(make, range(200)))
    assert codes == [201] * 200
    names = {i["metadata"]["name"] for i in http.get(base).json()["items"]}
    assert {f"many-{i}" for i in range(200)} <= names
    servers = pooled.db.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND usename = %s"
        " AND application_name = 'quaymaster' AND backend_type = 'client backend'",
        (pooled.database, pooled.user),
    ).fetchone()
    assert servers is not None and servers[0] <= pgbouncer.pool_size + 5 + 2  # + reserve, + stream


def test_a_worker_reconciles_through_pgbouncer(
    pooled: Pooled, http: httpx.Client, stop_all: Any, pgbouncer: EmbeddedPgBouncer
) -> None:
    env = {**pooled.env, "QM_CONTROLLERS": "ReplicaSet"}
    procs = [
        subprocess.Popen([sys.executable, "-m", "workers.dispatch"], cwd=ROOT, env=env),
        subprocess.Popen([sys.executable, "-m", "celery", "-A", "workers.app", "worker",
                          "--loglevel=WARNING", "--concurrency=2", "--without-gossip",
                          "--without-mingle"], cwd=ROOT, env=env),
    ]  # fmt: skip
    try:
        time.sleep(2.0)  # the dispatcher listing before the write it must see
        labels = {"app": "web"}
        rs = {
            "apiVersion": "quaymaster.io/v1", "kind": "ReplicaSet",
            "metadata": {"name": "web", "namespace": NS},
            "spec": {"replicas": 3, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
        }  # fmt: skip
        r = http.post(f"{API}/namespaces/{NS}/replicasets", json=rs)
        assert r.status_code == 201, r.text

        def pods() -> int:
            listed = http.get(f"{API}/namespaces/{NS}/pods", params={"labelSelector": "app=web"})
            return len(listed.json()["items"])

        eventually(lambda: pods() == 3, "the ReplicaSet's three pods")
        assert all(p.poll() is None for p in procs), "the dispatcher or the worker exited"
        r = http.patch(f"{API}/namespaces/{NS}/replicasets/web", json={"spec": {"replicas": 5}},
                       headers={"Content-Type": "application/merge-patch+json"})  # fmt: skip
        assert r.status_code == 200, r.text
        eventually(lambda: pods() == 5, "the ReplicaSet scaled to five")
        time.sleep(3.0)  # resyncs reconcile it again: still five
        assert pods() == 5
        eventually(lambda: _pooled_locks(pooled, pgbouncer) == 0, "no lock left", timeout=20)
    finally:
        stop_all(procs)


def _pooled_locks(pooled: Pooled, pgbouncer: EmbeddedPgBouncer) -> int:
    """Advisory locks held by PgBouncer's server connections (``SHOW SERVERS``): session
    state a statement left behind for whichever client gets the connection next."""
    with psycopg.connect(pgbouncer.admin_url, autocommit=True,
                         cursor_factory=psycopg.ClientCursor) as console:  # fmt: skip
        cur = console.execute("SHOW SERVERS")
        names = [d.name for d in cur.description or ()]
        pids = [int(dict(zip(names, r, strict=True))["remote_pid"]) for r in cur.fetchall()]
    row = pooled.db.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = ANY(%s)", (pids,)
    ).fetchone()
    return int(row[0]) if row else 0


def test_the_key_lock_is_a_transaction_s_and_creates_hold_the_apply_lock(
    pooled: Pooled, monkeypatch: pytest.MonkeyPatch, pgbouncer: EmbeddedPgBouncer
) -> None:
    for name in ("DATABASE_URL", "QM_STREAM_DATABASE_URL", "QM_PGBOUNCER"):
        monkeypatch.setenv(name, pooled.env[name])
    from workers import runtime as rt_module

    rt = rt_module.Runtime()
    monkeypatch.setattr(rt_module, "_runtime", rt)
    key = f"ReplicaSet/{NS}/held-{secrets.token_hex(3)}"

    def held(seed: int, mode: str) -> int:
        row = pooled.db.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND mode = %s AND"
            " ((classid::bigint << 32) | objid::bigint) = hashtextextended(%s, %s)",
            (mode, key, seed),
        ).fetchone()
        return int(row[0]) if row else 0

    async def scenario() -> None:
        async with rt.locked(key):
            assert held(7, "ExclusiveLock") == 1
            state = pooled.db.execute(
                "SELECT a.state FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
                " WHERE l.locktype = 'advisory' AND ((l.classid::bigint << 32) | l.objid::bigint)"
                " = hashtextextended(%s, 7)",
                (key,),
            ).fetchone()
            assert state is not None and state[0] == "idle in transaction"
            async with rt.locked_many([key]) as again:
                assert again == set()  # taken: another reconcile would get Busy
            with rt_module.creating():
                store = await rt_module.creating_store(Store(await rt.pool()))
                async with store.pool.acquire():
                    assert held(8, "ShareLock") == 1
                assert held(8, "ShareLock") == 0
        assert held(7, "ExclusiveLock") == 0

    rt.run(scenario())
    assert _pooled_locks(pooled, pgbouncer) == 0


def test_pool_metrics_on_the_api(pooled: Pooled, http: httpx.Client) -> None:
    text = http.get("/metrics").text
    assert re.search(r"^qm_pgbouncer_up 1$", text, re.M), text[-2000:]
    pool = f'database="{pooled.database}",user="{pooled.user}"'
    assert f'qm_pgbouncer_pool_server_connections{{{pool},state="idle"}}' in text
    assert f'qm_pgbouncer_pool_client_connections{{{pool},state="waiting"}}' in text
    done = re.search(
        rf'^qm_pgbouncer_transactions_total{{database="{pooled.database}"}} (\d+)$', text, re.M
    )
    assert done is not None and int(done.group(1)) > 0
    assert "# TYPE qm_pgbouncer_client_wait_seconds_total counter" in text


def test_metrics_say_down_when_the_console_does_not_answer() -> None:
    from app.api.pool_metrics import metric_lines

    lines = asyncio.run(metric_lines(f"postgresql://qm_stats@127.0.0.1:{free_port()}/pgbouncer"))
    assert lines[-1] == "qm_pgbouncer_up 0"


@pytest.fixture
def pooled_plane(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Any:
    """The controllers' ``plane`` with its processes' requests through PgBouncer."""
    monkeypatch.setenv("QM_TEST_PGBOUNCER", "1")
    return request.getfixturevalue("plane")


def test_a_worker_killed_mid_create_through_pgbouncer_overshoots_nothing(pooled_plane: Any) -> None:
    """The apply lock held by the dead worker's insert (a transaction's, through PgBouncer)
    keeps the next reconcile from reading before that insert commits."""
    from test_apply_crash import _children, _crash_mid_apply, _hold_inserts

    assert pooled_plane.env["QM_PGBOUNCER"] == "1"
    _hold_inserts(pooled_plane, "pods", 0)
    uid = pooled_plane.replicaset("web", 5)
    _crash_mid_apply(pooled_plane, "ReplicaSet", "web", held=1)
    assert _children(pooled_plane, "pods", uid) == 5
