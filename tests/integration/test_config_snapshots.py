"""Config rollouts against a real PostgreSQL with sealed Secrets: the Deployment controller's
shell runs in this process on a worker ``Runtime``. A Secret the template references is
snapshotted (sealed under its own name, its plaintext the source's); re-encrypting every
Secret under a new key rolls nothing out; a change of its content does."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from app.core.admission import admit
from app.core.controllers.deployment.config import SNAPSHOT_LABEL
from app.core.kinds import BY_KIND
from app.store import secret_keys
from app.store.secret_rotation import Progress, reencrypt
from workers.controllers import deployment
from workers.runtime import Runtime

NS = "cfg"
SECRET = BY_KIND["Secret"]


@pytest.fixture
def keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "keys.json"
    secret_keys.ensure_keys_file(path)
    monkeypatch.setenv(secret_keys.ENV, str(path))
    return path


@pytest.fixture
def db(make_database: Any, monkeypatch: pytest.MonkeyPatch, keys: Path
       ) -> Iterator[psycopg.Connection[Any]]:  # fmt: skip
    url = make_database("qm_cfgsnap")
    monkeypatch.setenv("DATABASE_URL", url)
    with psycopg.connect(url, autocommit=True) as conn:
        yield conn


@pytest.fixture
def rt(db: psycopg.Connection[Any]) -> Iterator[Runtime]:
    runtime = Runtime()
    yield runtime
    if runtime._pool is not None:
        runtime.run(runtime._pool.close())
    runtime.loop.close()


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def write_secret(rt: Runtime, password: str, update: bool = False) -> None:
    async def run() -> None:
        store = await rt.store()
        obj = {"kind": "Secret", "metadata": {"name": "creds", "namespace": NS},
               "type": "Opaque", "data": {"password": b64(password)}}  # fmt: skip
        if update:
            cur = await store.get(SECRET, NS, "creds")
            await store.update(SECRET, {**obj, "metadata": cur.obj["metadata"]}, cur.row_version)
        else:
            await store.create(SECRET, obj)

    rt.run(run())


def create_deployment(rt: Runtime) -> None:
    container = {"name": "c", "image": "x", "envFrom": [{"secretRef": {"name": "creds"}}]}
    obj = {"kind": "Deployment", "metadata": {"name": "web", "namespace": NS},
           "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}},
                                 "spec": {"containers": [container]}}}}  # fmt: skip

    kind = BY_KIND["Deployment"]

    async def run() -> None:
        await (await rt.store()).create(kind, admit(kind, obj, None))

    rt.run(run())


def reconcile(rt: Runtime) -> None:
    out = rt.run(deployment.reconcile_key(rt, NS, "web", time.time()))
    assert out.ok, out


def names(db: psycopg.Connection[Any], table: str) -> list[str]:
    return [r[0] for r in db.execute(f"SELECT name FROM {table} ORDER BY name").fetchall()]


def test_a_secret_rotation_rolls_nothing_out_and_a_content_change_does(
    db: psycopg.Connection[Any], rt: Runtime, keys: Path
) -> None:
    write_secret(rt, "hunter2")
    create_deployment(rt)
    reconcile(rt)
    (rs,) = names(db, "replicasets")
    snaps = [n for n in names(db, "secrets") if n != "creds"]
    assert len(snaps) == 1 and snaps[0].startswith("creds-")
    # The snapshot is sealed under its own name and opens to the source's plaintext.
    row = db.execute("SELECT spec, labels FROM secrets WHERE name = %s", (snaps[0],)).fetchone()
    assert row is not None and "hunter2" not in json.dumps(row[0])
    assert b64("hunter2") not in json.dumps(row[0]) and row[1] == {SNAPSHOT_LABEL: "true"}
    snap = rt.run(rt.run(rt.store()).get(SECRET, NS, snaps[0]))
    assert secret_keys.open_object(snap.obj)["data"] == {"password": b64("hunter2")}

    before = db.execute("SELECT spec->>'data' FROM secrets WHERE name = 'creds'").fetchone()
    secret_keys.add_key(keys)
    secret_keys.source().ring(force=True)
    progress = rt.run(reencrypt(rt.run(rt.pool()), Progress(), settle_s=0))
    assert progress.reencrypted == 2 and not progress.failed
    after = db.execute("SELECT spec->>'data' FROM secrets WHERE name = 'creds'").fetchone()
    assert before != after  # the ciphertext moved to the new key...
    reconcile(rt)
    assert names(db, "replicasets") == [rs]  # ...and nothing rolled out
    assert [n for n in names(db, "secrets") if n != "creds"] == snaps

    write_secret(rt, "correct horse", update=True)
    reconcile(rt)
    assert len(names(db, "replicasets")) == 2  # a new content is a new ReplicaSet
    assert len([n for n in names(db, "secrets") if n != "creds"]) == 2
