"""``qm db backup`` and ``qm db restore``: the control plane's database backed up and restored
by a DBA, without the API (ADR 0058, ``docs/backup.md``).

``qm db backup --dir DIR`` copies the whole cluster behind ``--url`` (default
``QM_MIGRATION_DATABASE_URL``, then ``DATABASE_URL``; a superuser, since it also closes the WAL
segment it must wait for) into ``DIR/<UTC time>/``, verifies the copy against its manifest and
waits until the server's WAL archive holds everything committed before it finished.
``--keep N`` then deletes all but the newest N backups and the archived WAL none of them needs.

``qm db restore --from DIR --archive ARCHIVE --target-time T --into DATA_DIR`` picks the newest
backup under DIR that finished at or before T, copies it into the new, empty DATA_DIR and sets
it up to replay ARCHIVE up to T. The next start of the embedded server on DATA_DIR (``make up``
with ``QM_STATE_DIR`` naming its parent's parent, or the backup drill) replays, promotes and
clears the recovery settings before anything connects.

Exit codes: 0 done, 1 the backup or restore failed (the reason is printed), 2 usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.store import backup

BACKUP_DIR_ENV = "QM_BACKUP_DIR"


def add_parsers(verbs: Any, common: argparse.ArgumentParser) -> None:
    """Add ``backup`` and ``restore`` to the ``qm db`` verbs (called by ``db.add_parsers``)."""
    take = verbs.add_parser(
        "backup", parents=[common], help="take a base backup of the whole database cluster"
    )
    take.add_argument("--url", help="database URL (default QM_MIGRATION_DATABASE_URL)")
    take.add_argument(
        "--dir", type=Path, help=f"where backups are kept (default ${BACKUP_DIR_ENV})"
    )
    take.add_argument("--keep", type=int, help="then delete all but the newest N backups")
    take.add_argument("-o", "--output", choices=["json"], help="print the result as JSON")
    take.set_defaults(db_run=run_backup)

    restore = verbs.add_parser(
        "restore", parents=[common], help="lay out a backup to replay to a point in time"
    )
    restore.add_argument(
        "--from",
        dest="source",
        type=Path,
        help=f"a backup, or a directory of backups (default ${BACKUP_DIR_ENV})",
    )
    restore.add_argument("--archive", type=Path, help="the WAL archive to replay")
    restore.add_argument(
        "--target-time",
        type=_timestamp,
        help="replay transactions committed at or before this time (ISO 8601; UTC if no zone)",
    )
    restore.add_argument(
        "--into", required=True, type=Path, help="a new, empty data directory for the copy"
    )
    restore.set_defaults(db_run=run_restore)


def _timestamp(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _backup_dir(given: Path | None) -> Path | None:
    if given is not None:
        return given
    env = os.environ.get(BACKUP_DIR_ENV)
    return Path(env) if env else None


def run_backup(args: argparse.Namespace) -> int:
    from .db import database_url  # db.py imports this module to register these verbs

    url = database_url(args)
    root = _backup_dir(args.dir)
    if not url or root is None:
        print(f"error: name the database (--url) and the directory (--dir, ${BACKUP_DIR_ENV})",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.keep is not None and args.keep < 1:
        print("error: --keep must be at least 1", file=sys.stderr)
        return 2
    try:
        path, info = backup.take_backup(url, root)
        pruned = backup.prune(root, args.keep) if args.keep else []
    except Exception as exc:  # the tools' and the driver's errors, said plainly
        print(f"error: the backup failed: {exc}", file=sys.stderr)
        return 1
    if args.output == "json":
        doc = {"path": str(path), **asdict(info), "pruned": [str(p) for p in pruned]}
        print(json.dumps(doc, indent=2))
        return 0
    print(f"backup {path} ({info.bytes / 2**20:.0f} MiB, verified against its manifest)")
    print(f"  schema revision {info.schema_revision}, PostgreSQL {info.server_version}")
    if info.archive:
        print(f"  restorable to any time from {info.finished_at} with the archive {info.archive}")
    else:
        print(f"  warning: the server archives no WAL; this restores only to {info.finished_at}")
    for old in pruned:
        print(f"  deleted {old}")
    return 0


def run_restore(args: argparse.Namespace) -> int:
    source = _backup_dir(args.source)
    if source is None:
        print(f"error: name the backups with --from or ${BACKUP_DIR_ENV}", file=sys.stderr)
        return 2
    try:
        chosen = backup.choose_backup(source, args.target_time)
        if args.archive is not None and args.target_time is not None:
            backup.check_reachable(args.archive, chosen, args.target_time)
        info = backup.prepare_restore(
            chosen, args.into, archive=args.archive, target=args.target_time
        )
    except backup.BackupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    until = args.target_time.isoformat() if args.target_time else "the end of the archive"
    if args.archive is None:
        until = f"the end of the backup ({info.finished_at})"
    print(f"restored backup {chosen.name} into {args.into}; its first start replays to {until}")
    print("  the embedded server finishes the restore on start (docs/backup.md)")
    return 0
