"""``python -m app.devstack.drill``: the restore drill, run by an operator against real backups.

A backup is only as good as its last restore. This restores the backup that
``qm db restore`` would choose (``--from``, ``--archive``, ``--target-time``) into a scratch
directory, starts an embedded PostgreSQL there (which replays and promotes, ADR 0058), starts
an API server on it that reaches nothing of the live plane (no Redis, no PgBouncer, its own
token), and checks what it serves: for every kind, the API lists as many objects as the
restored table holds; the change history's chain verifies. It prints a JSON report (the backup
used, each step's duration: the time a restore takes, every count) and stops and deletes
everything it started (``--keep`` keeps the directory). Exit 0 when the restored plane served
what it holds, 1 otherwise.

The integration test ``tests/integration/test_backup_restore.py`` runs the same steps.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from app.client import RestClient
from app.core.kinds import KINDS
from app.devstack.apiserver import ApiServer
from app.devstack.postgres import EmbeddedPostgres
from app.devstack.supervise import free_port
from app.store import backup, history
from app.store.secret_keys import ENV as SECRET_KEYS_ENV

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Report:
    """What one drill found; ``ok`` when every kind matched and the history verified."""

    backup: str = ""
    target: str | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    kinds: dict[str, dict[str, Any]] = field(default_factory=dict)
    history: str = ""
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def timed(self, step: str) -> Callable[[], None]:
        started = time.monotonic()
        return lambda: self.seconds.__setitem__(step, round(time.monotonic() - started, 2))


def drill(
    source: Path, archive: Path | None, target: datetime | None, scratch: Path, log: Path
) -> Report:
    """Restore into ``scratch``, serve it, compare; everything started is stopped on return."""
    report = Report(target=target.isoformat() if target else None)
    chosen = backup.choose_backup(source, target)
    report.backup = str(chosen)
    if archive is not None and target is not None:
        backup.check_reachable(archive, chosen, target)
    done = report.timed("copy")
    backup.prepare_restore(chosen, scratch / "postgres" / "data", archive=archive, target=target)
    done()
    with _served(scratch, log, report) as (url, client):
        _compare(url, client, report)
        _verify_history(url, report)
    return report


@contextmanager
def _served(scratch: Path, log: Path, report: Report) -> Iterator[tuple[str, RestClient]]:
    server = EmbeddedPostgres(scratch / "postgres")
    api: ApiServer | None = None
    try:
        done = report.timed("replay_and_promote")
        url = server.start()
        done()
        done = report.timed("api_ready")
        token = secrets.token_urlsafe(24)
        api = ApiServer(free_port(), token, _isolated_env(url, token), log, cwd=ROOT)
        api.start(timeout=120.0)
        done()
        client = RestClient(api.url, token, timeout=60.0)
        try:
            yield url, client
        finally:
            client.close()
    finally:
        if api is not None:
            api.stop()
        server.stop()


def _isolated_env(url: str, token: str) -> dict[str, str]:
    """The environment of the drill's API server: this database and nothing of the live plane
    (no broker, no usage Redis, no pooler, no TLS files); the Secret keys when given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QM_", "PG", "DATABASE_"))}
    if SECRET_KEYS_ENV in os.environ:
        env[SECRET_KEYS_ENV] = os.environ[SECRET_KEYS_ENV]
    env.update(
        DATABASE_URL=url,
        QM_STREAM_DATABASE_URL=url,
        QM_BOOTSTRAP_TOKEN=token,
        QM_USAGE_REDIS_URL="",
        PYTHONUNBUFFERED="1",
    )
    return env


def _compare(url: str, client: RestClient, report: Report) -> None:
    done = report.timed("compare")
    with psycopg.connect(url, autocommit=True) as db:
        for kind in sorted(KINDS, key=lambda k: k.kind):
            row = db.execute(f"SELECT count(*) FROM {kind.table}").fetchone()
            stored = int(row[0]) if row else 0
            try:
                served: int | str = len(client.list(kind, None)["items"])
            except Exception as exc:  # e.g. Secrets without the keys file: say so, go on
                served = f"error: {exc}"
            report.kinds[kind.kind] = {"stored": stored, "served": served}
            if served != stored:
                report.problems.append(f"{kind.kind}: {stored} stored, API served {served}")
    done()


def _verify_history(url: str, report: Report) -> None:
    with psycopg.connect(url, autocommit=True) as db:
        broken = history.verify(db)
    report.history = "intact" if broken is None else f"broken at seq {broken.seq}"
    if broken is not None:
        report.problems.append(f"the change history's chain is broken at seq {broken.seq}")


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m app.devstack.drill", description=__doc__)
    parser.add_argument("--from", dest="source", type=Path, required=True)
    parser.add_argument("--archive", type=Path)
    parser.add_argument("--target-time", type=datetime.fromisoformat)
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    target = args.target_time
    if target is not None and target.tzinfo is None:
        target = target.replace(tzinfo=UTC)
    scratch = Path(tempfile.mkdtemp(prefix="qm-drill-"))
    try:
        report = drill(args.source, args.archive, target, scratch, scratch / "api.log")
    except RuntimeError as exc:  # the restore itself failed: the reason, with the server log
        print(f"error: the restore failed: {exc}", file=sys.stderr)
        return 1
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    doc = {"ok": report.ok, **vars(report)}
    print(json.dumps(doc, indent=2))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
