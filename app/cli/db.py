"""``qm db``: commands a DBA runs against the database itself, not through the API.

``qm db check`` compares the database named by ``--url`` (default
``QM_MIGRATION_DATABASE_URL``, then ``DATABASE_URL``) with the schema the code describes
(``app/store/schema.py`` and ``schema_objects.py``) and prints one line per difference: a
column, index or constraint added or dropped by hand, a changed type, default or nullability,
a function, trigger, view, policy or grant replaced, added or removed. Exit 0 when there is
none, 1 when there is drift, 2 when no database is named or reachable. It only reads the
catalog, so it is safe on a live database.

Other ``qm db`` verbs register their parsers in ``add_parsers`` and set ``db_run``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from .dbbackup import add_parsers as add_backup_parsers


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    db = sub.add_parser("db", parents=[common], help="check, back up, restore the database (DBA)")
    verbs = db.add_subparsers(dest="db_command", metavar="VERB", required=True)
    check = verbs.add_parser(
        "check", parents=[common], help="compare the database's schema with the code's"
    )
    check.add_argument("--url", help="database URL (default QM_MIGRATION_DATABASE_URL)")
    check.add_argument("-o", "--output", choices=["json"], help="print the result as JSON")
    check.set_defaults(db_run=run_check)
    add_backup_parsers(verbs, common)  # qm db backup, qm db restore


def database_url(args: argparse.Namespace) -> str | None:
    return (
        getattr(args, "url", None)
        or os.environ.get("QM_MIGRATION_DATABASE_URL")
        or os.environ.get("DATABASE_URL")
    )


def run_check(args: argparse.Namespace) -> int:
    # Imported here: SQLAlchemy and Alembic cost every other qm command a third of a second.
    from app.store import drift, schema_objects

    url = database_url(args)
    if not url:
        print("error: name the database with --url or QM_MIGRATION_DATABASE_URL", file=sys.stderr)
        return 2
    try:
        at = drift.revision(url)
        lines = drift.check(url)
    except Exception as exc:  # a driver error: unreachable, refused, no such database
        print(f"error: cannot read the database's schema: {exc}", file=sys.stderr)
        return 2
    expected = schema_objects.REVISION
    notes = []
    if at != expected:
        notes.append(f"the database is at revision {at}, the code describes {expected}")
    if args.output == "json":
        doc = {"revision": at, "codeRevision": expected, "drift": lines, "notes": notes}
        print(json.dumps(doc, indent=2))
    else:
        for note in notes:
            print(f"note: {note}")
        for line in lines:
            print(line)
        if not lines:
            print(f"the schema matches the code (revision {expected})")
    return 1 if lines else 0


def run(args: argparse.Namespace) -> int:
    try:
        code: int = args.db_run(args)
    except BrokenPipeError:  # ``qm db check | head``: silence the final flush
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return code
