"""Retention of the change history (ADR 0052): ``qm audit archive`` detaches sealed months as
``qm_archivist``, exports them with a manifest naming the anchor and each file's digest, drops
them, and the chain that remains verifies from the anchor; months holding unsealed rows, or
rows sealed after rows that stay, are refused."""

from __future__ import annotations

import csv
import hashlib
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import errors

from app.store import history

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def db_url(make_database: Callable[[str], str]) -> str:
    return make_database("qm_hist_archive")


@pytest.fixture(scope="module")
def db(db_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(db_url, autocommit=True) as conn:
        yield conn


def month_start(db: psycopg.Connection[Any], months_ago: int) -> datetime:
    row = db.execute(
        "SELECT date_trunc('month', now(), 'UTC') - make_interval(months => %s)", (months_ago,)
    ).fetchone()
    assert row is not None
    return row[0]


def old_rows(db: psycopg.Connection[Any], months_ago: int, n: int) -> None:
    """``n`` history rows dated in an earlier month, as a write then would have left them."""
    db.execute("SELECT qm_history_partition(%s)", (month_start(db, months_ago),))
    db.execute(
        "INSERT INTO qm_history (at, table_name, kind, namespace, name, op, after, db_role)"
        " SELECT %s + make_interval(hours => i), 'configmaps', 'ConfigMap', 'old', 'cm-' || i,"
        " 'insert', jsonb_build_object('i', i), 'postgres' FROM generate_series(1, %s) AS i",
        (month_start(db, months_ago), n),
    )


def archive_cli(url: str, before: datetime, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli.main", "audit", "archive", "--url", url,
         "--before", before.isoformat(), "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_retention_archives_sealed_months_and_the_rest_still_verifies(
    db_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    old_rows(db, 3, 6)
    old_rows(db, 2, 4)
    db.execute("INSERT INTO namespaces (uid, name) VALUES (gen_random_uuid(), 'now')")
    # Not sealed yet: refused.
    refused = archive_cli(db_url, month_start(db, 2), tmp_path / "early")
    assert refused.returncode == 1 and "not sealed yet" in refused.stderr
    history.seal_all(db)
    # A row of two months ago sealed after rows that stay: that month cannot go yet.
    old_rows(db, 2, 1)
    history.seal_all(db)
    refused = archive_cli(db_url, month_start(db, 1), tmp_path / "late")
    assert refused.returncode == 1 and "sealed before seq" in refused.stderr

    out = tmp_path / "export"
    done = archive_cli(db_url, month_start(db, 2), out)
    assert done.returncode == 0, done.stderr
    part = "qm_history_" + month_start(db, 3).strftime("%Y%m")
    manifest = json.loads(next(out.glob("manifest-*.json")).read_text())
    (entry,) = manifest["files"]
    assert (entry["partition"], entry["rows"]) == (part, 6)
    assert entry["last_seq"] - entry["first_seq"] == 5
    anchor_seq = manifest["anchor_seq"]
    assert anchor_seq == entry["last_seq"]
    data = (out / entry["file"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == entry["sha256"]
    exported = list(csv.DictReader(data.decode().splitlines()))
    assert [r["name"] for r in exported] == [f"cm-{i}" for i in range(1, 7)]
    # Detached and dropped; the anchor records the file's digest; the chain verifies from it.
    assert db.execute("SELECT to_regclass(%s)", (part,)).fetchone() == (None,)
    anchor = db.execute(
        "SELECT last_seq, encode(last_hash, 'hex'), exported FROM qm_history_anchors"
        " ORDER BY last_seq DESC LIMIT 1"
    ).fetchone()
    assert anchor == (anchor_seq, manifest["anchor_hash"], {part: entry["sha256"]})
    assert history.verify(db) is None
    status = history.status(db)
    assert status.anchor_seq == anchor_seq and status.sealed_seq > anchor_seq
    verified = subprocess.run(
        [sys.executable, "-m", "app.cli.main", "audit", "verify", "--url", db_url],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert verified.returncode == 0 and f"holds from seq {anchor_seq + 1}" in verified.stdout
    # The first row after the anchor, changed, is still caught.
    with db.transaction():
        db.execute("ALTER TABLE qm_history DISABLE TRIGGER qm_history_append_only")
        db.execute(
            "UPDATE qm_history SET name = 'x'"
            " WHERE id = (SELECT id FROM qm_history_links WHERE seq = %s)",
            (anchor_seq + 1,),
        )
        db.execute("ALTER TABLE qm_history ENABLE ALWAYS TRIGGER qm_history_append_only")
    broken = history.verify(db)
    assert broken is not None and broken.seq == anchor_seq + 1


def test_the_archivist_may_archive_and_nothing_else(db: psycopg.Connection[Any]) -> None:
    with db.transaction():
        db.execute("SET LOCAL ROLE qm_archivist")
        for statement in (
            "SELECT count(*) FROM qm_history",
            "SELECT qm_history_seal(10)",
            "SELECT count(*) FROM namespaces",
        ):
            with pytest.raises(errors.InsufficientPrivilege), db.transaction():
                db.execute(statement)
        with pytest.raises(errors.RaiseException, match="no history partition"), db.transaction():
            db.execute("SELECT qm_history_archive('2000-01-01')")
