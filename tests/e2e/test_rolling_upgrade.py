"""A rolling upgrade from the previous release, under write load, with zero failed requests.

The previous release (``migrations/releases.toml``, unpacked with ``git archive``) migrates a
new database to its head and runs its API server, Celery worker, dispatcher and controller
manager; clients write through a balancer. This code's migrations are applied online; then
this code's API server joins the balancer, the old one leaves it (after its requests in flight
finish) and stops, and the controllers are swapped. Every request must succeed, and no session
may wait on a lock the migration holds or wants for longer than the migration's
``lock_timeout`` (``pg_locks`` sampled every 20 ms).

The old code imports its own ``app`` and ``workers``: its processes run with the unpacked tree
as working directory and first on ``PYTHONPATH``, which Python searches before the editable
install's finder (appended to ``sys.meta_path``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import subprocess
import sys
import threading
import time
import tomllib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from app.core.schema_compat import CODE_REVISION
from app.devstack.apiserver import ApiServer
from app.devstack.postgres import create_database
from app.devstack.supervise import free_port
from migrations import online
from tests.conftest import REPO_ROOT, stop_processes

pytestmark = pytest.mark.slow

API = "/apis/quaymaster.io/v1"
RELEASE = tomllib.loads((REPO_ROOT / "migrations" / "releases.toml").read_text())["previous"]
LOCK_TIMEOUT_S = 0.5  # online.DEFAULT_LOCK_TIMEOUT, which the migrations run with here
SAMPLE_S = 0.02
WRITERS = 3


@dataclass
class Balancer:
    """Round-robin over the live API servers; a server leaves once its requests are done."""

    backends: list[str]
    in_flight: Counter[str] = field(default_factory=Counter)
    served: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)
    turn: Iterator[int] = field(default_factory=itertools.count)

    @contextlib.contextmanager
    def backend(self) -> Iterator[str]:
        with self.lock:
            url = self.backends[next(self.turn) % len(self.backends)]
            self.in_flight[url] += 1
            self.served[url] += 1
        try:
            yield url
        finally:
            with self.lock:
                self.in_flight[url] -= 1

    def add(self, url: str) -> None:
        with self.lock:
            self.backends.append(url)

    def drain(self, url: str, timeout: float = 30.0) -> None:
        with self.lock:
            self.backends.remove(url)
        deadline = time.monotonic() + timeout
        while self.in_flight[url] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not self.in_flight[url], f"requests to {url} did not finish"


@dataclass
class Load:
    """Writers creating, patching, reading and deleting ConfigMaps, and one scaling a Deployment."""

    balancer: Balancer
    token: str
    namespace: str
    stop: threading.Event = field(default_factory=threading.Event)
    failures: list[str] = field(default_factory=list)
    requests: int = 0
    threads: list[threading.Thread] = field(default_factory=list)

    def call(self, http: httpx.Client, method: str, path: str, ok: set[int], **kw: Any) -> None:
        with self.balancer.backend() as url:
            try:
                r = http.request(method, url + path, **kw)
                outcome = "" if r.status_code in ok else f"{r.status_code} {r.text[:200]}"
            except httpx.HTTPError as exc:
                outcome = f"{type(exc).__name__}: {exc}"
        with self.balancer.lock:
            self.requests += 1
            if outcome:
                self.failures.append(f"{method} {path} via {url}: {outcome}")

    def writer(self, i: int) -> None:
        base = f"{API}/namespaces/{self.namespace}/configmaps"
        merge = {"Content-Type": "application/merge-patch+json"}
        with self._client() as http:
            for n in itertools.count():
                if self.stop.is_set():
                    return
                name = f"load-{i}-{n}"
                body = {"metadata": {"name": name}, "data": {"n": str(n)}}
                self.call(http, "POST", base, {201}, json=body)
                self.call(http, "PATCH", f"{base}/{name}", {200}, json={"data": {"m": "x"}},
                          headers=merge)  # fmt: skip
                self.call(http, "GET", f"{base}/{name}", {200})
                if n >= 5:
                    self.call(http, "DELETE", f"{base}/load-{i}-{n - 5}", {200, 202})
                time.sleep(0.01)

    def scaler(self) -> None:
        path = f"{API}/namespaces/{self.namespace}/deployments/web"
        merge = {"Content-Type": "application/merge-patch+json"}
        with self._client() as http:
            for n in itertools.count():
                if self.stop.wait(0.5):
                    return
                self.call(http, "PATCH", path, {200}, json={"spec": {"replicas": 1 + n % 3}},
                          headers=merge)  # fmt: skip

    def _client(self) -> httpx.Client:
        return httpx.Client(headers={"Authorization": f"Bearer {self.token}"}, timeout=30)

    def start(self) -> None:
        targets = [(self.writer, (i,)) for i in range(WRITERS)] + [(self.scaler, ())]
        for target, args in targets:
            thread = threading.Thread(target=target, args=args, daemon=True)
            thread.start()
            self.threads.append(thread)

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)


@dataclass
class LockWaits:
    """The longest lock waits seen in the database: all, and those the migration is part of."""

    url: str
    longest: float = 0.0
    longest_migration: float = 0.0
    samples: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    QUERY = """
    SELECT extract(epoch FROM clock_timestamp() - l.waitstart)::float8,
           a.application_name = %(app)s OR EXISTS (
             SELECT FROM pg_stat_activity b
              WHERE b.pid = ANY (pg_blocking_pids(l.pid)) AND b.application_name = %(app)s)
      FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
     WHERE NOT l.granted AND l.waitstart IS NOT NULL AND a.datname = current_database()
    """

    def run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as db:
            while not self.stop.wait(SAMPLE_S):
                self.samples += 1
                for wait, migration in db.execute(self.QUERY, {"app": "qm-migrate"}):
                    self.longest = max(self.longest, wait)
                    if migration:
                        self.longest_migration = max(self.longest_migration, wait)

    def __enter__(self) -> LockWaits:
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        assert self.thread is not None
        self.thread.join(timeout=10)


@pytest.fixture(scope="module")
def previous_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous release's tree, from git."""
    dest = tmp_path_factory.mktemp("previous-release")
    archive = subprocess.run(["git", "archive", RELEASE["commit"]], cwd=REPO_ROOT,
                             capture_output=True, check=True, timeout=120)  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True, timeout=120)
    return dest


def _env(tree: Path, url: str, broker: str, token: str, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if tree != REPO_ROOT:
        env["PYTHONPATH"] = str(tree)
    return {**env, "DATABASE_URL": url, "QM_STREAM_DATABASE_URL": url, "QM_BROKER_URL": broker,
            "QM_BOOTSTRAP_TOKEN": token, "QM_API_PORT": str(port), "PYTHONUNBUFFERED": "1",
            "QM_API_URL": f"http://127.0.0.1:{port}", "QM_RESYNC_SECONDS": "2"}  # fmt: skip


def _controllers(tree: Path, env: dict[str, str], log: Path) -> list[subprocess.Popen[bytes]]:
    argvs = [
        ["celery", "-A", "workers.app", "worker", "--loglevel=WARNING", "--concurrency=2",
         "--without-gossip", "--without-mingle"],
        ["workers.dispatch"],
        ["workers.manager"],
    ]  # fmt: skip
    with log.open("ab") as out:
        return [
            subprocess.Popen(
                [sys.executable, "-m", *argv],
                cwd=tree,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            for argv in argvs
        ]


def _alembic(tree: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if tree != REPO_ROOT:
        env["PYTHONPATH"] = str(tree)
    env.update(DATABASE_URL=url, QM_MIGRATION_DATABASE_URL=url)
    return subprocess.run([sys.executable, "-m", "alembic", *args], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip


def _revision(url: str) -> str:
    with psycopg.connect(url) as db:
        row = db.execute("SELECT version_num FROM alembic_version").fetchone()
    assert row is not None
    return str(row[0])


def _wait(check: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _drop_slots(url: str) -> None:
    with contextlib.suppress(psycopg.Error), psycopg.connect(url, autocommit=True) as db:
        db.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
            " WHERE database = current_database() AND NOT active"
        )


def test_rolling_upgrade_from_the_previous_release(
    previous_release: Path, pg_server_url: str, redis_url: str, tmp_path: Path
) -> None:
    old, new = previous_release, REPO_ROOT
    url = create_database(pg_server_url, f"qm_rolling_{secrets.token_hex(3)}")
    broker = redis_url.rsplit("/", 1)[0] + f"/{secrets.randbelow(14) + 1}"
    token = secrets.token_urlsafe(32)
    done = _alembic(old, url, "upgrade", "head")
    assert done.returncode == 0, done.stderr
    assert _revision(url) == RELEASE["schema_revision"]

    old_port, new_port = free_port(), free_port()
    old_api = ApiServer(old_port, token, _env(old, url, broker, token, old_port),
                        tmp_path / "old-api.log", cwd=old)  # fmt: skip
    new_api = ApiServer(new_port, token, _env(new, url, broker, token, new_port),
                        tmp_path / "new-api.log", cwd=new)  # fmt: skip
    procs: list[subprocess.Popen[bytes]] = []
    try:
        old_api.start(timeout=60)
        old_controllers = _controllers(old, _env(old, url, broker, token, old_port),
                                       tmp_path / "old-controllers.log")  # fmt: skip
        procs += old_controllers
        namespace = f"rolling-{secrets.token_hex(3)}"
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=old_api.url, headers=headers, timeout=30) as http:
            r = http.post(f"{API}/namespaces", json={"metadata": {"name": namespace}})
            assert r.status_code == 201, r.text
            r = http.post(f"{API}/namespaces/{namespace}/deployments", json=_deployment())
            assert r.status_code == 201, r.text
            marker = {"metadata": {"name": "before-upgrade"}, "data": {"release": RELEASE["tag"]}}
            r = http.post(f"{API}/namespaces/{namespace}/configmaps", json=marker)
            assert r.status_code == 201, r.text

        balancer = Balancer([old_api.url])
        load = Load(balancer, token, namespace)
        with LockWaits(url) as waits:
            load.start()
            time.sleep(3)  # the old release alone
            started = time.monotonic()
            migrated = _alembic(new, url, "upgrade", "head")
            migration_s = time.monotonic() - started
            assert migrated.returncode == 0, migrated.stdout + migrated.stderr
            assert _revision(url) == CODE_REVISION
            time.sleep(2)  # the old release on the new schema

            # This code refuses schema 0013 at start: the old processes running until here on
            # it shows they run the old code, not the editable install's.
            assert all(p.poll() is None for p in old_controllers), "old controllers exited"
            new_api.start(timeout=60)
            balancer.add(new_api.url)
            balancer.drain(old_api.url)
            old_api.stop()
            stop_processes(old_controllers)
            new_controllers = _controllers(new, _env(new, url, broker, token, new_port),
                                           tmp_path / "new-controllers.log")  # fmt: skip
            procs += new_controllers
            time.sleep(4)  # the new release alone
            load.finish()
        gone = [p.args for p in new_controllers if p.poll() is not None]
        assert not gone, f"controllers exited: {gone} (logs in {tmp_path})"

        print(
            f"rolling upgrade: {load.requests} requests ({dict(balancer.served)}),"
            f" {len(load.failures)} failed; migration {migration_s:.2f}s"
            f" ({migrated.stdout.count('retrying')} retries);"
            f" longest lock wait {waits.longest:.3f}s, behind or by the migration"
            f" {waits.longest_migration:.3f}s ({waits.samples} samples)"
        )
        with httpx.Client(base_url=new_api.url, headers=headers, timeout=30) as http:
            first = http.get(f"{API}/namespaces/{namespace}/configmaps/before-upgrade")
            assert first.status_code == 200, first.text  # written by the old release
            assert first.json()["data"] == {"release": RELEASE["tag"]}
            deployment = f"{API}/namespaces/{namespace}/deployments/web"

            def observed() -> bool:
                body = http.get(deployment).json()
                return bool(
                    body["status"].get("observedGeneration") == body["metadata"]["generation"]
                )

            _wait(observed, "the new controllers to observe the last scale")

        assert load.failures == [], "\n".join(load.failures)
        assert balancer.served[old_api.url] > 50 and balancer.served[new_api.url] > 50
        assert waits.samples > 100
        assert waits.longest_migration <= LOCK_TIMEOUT_S + SAMPLE_S
        assert online.DEFAULT_LOCK_TIMEOUT == "500ms"
    finally:
        old_api.stop()
        new_api.stop()
        stop_processes(procs)
        _drop_slots(url)


def _deployment() -> dict[str, Any]:
    return {
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "registry.local/web:1"}]},
            },
        },
    }
