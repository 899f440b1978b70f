"""``qm audit``: the change history's tamper check and archive, run against the database.

``qm audit verify`` recomputes the history's SHA-256 chain from the latest anchor
(``qm_history_verify()``) and prints the first broken link: exit 0 when the chain holds, 1 when
a row was changed, removed or repeated after it was sealed, 2 when no database is named or
reachable. It also prints the tip (seq and hash) to keep somewhere the database's superuser
cannot write, since only an outside copy of the tip shows a chain rebuilt from scratch.

``qm audit archive --before DATE --out DIR`` detaches every sealed month ending at or before
DATE (as ``qm_archivist``), exports each to ``DIR/<partition>.csv``, writes
``DIR/manifest-<seq>.json`` (the anchor and every file's SHA-256) and drops the partitions;
verification then starts from that anchor. See docs/history.md.

Both take ``--url`` (default ``QM_MIGRATION_DATABASE_URL``, then ``DATABASE_URL``).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from app.store import history

from .db import database_url


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    audit = sub.add_parser("audit", parents=[common], help="verify or archive the change history")
    verbs = audit.add_subparsers(dest="audit_command", metavar="VERB", required=True)
    verify = verbs.add_parser(
        "verify", parents=[common], help="check the change history's hash chain"
    )
    verify.add_argument("--url", help="database URL (default QM_MIGRATION_DATABASE_URL)")
    verify.add_argument(
        "--seal", action="store_true", help="chain the rows committed so far before checking"
    )
    verify.add_argument("-o", "--output", choices=["json"], help="print the result as JSON")
    verify.set_defaults(audit_run=run_verify)
    archive = verbs.add_parser(
        "archive", parents=[common], help="export and drop sealed months of the change history"
    )
    archive.add_argument("--url", help="database URL (default QM_MIGRATION_DATABASE_URL)")
    archive.add_argument(
        "--before", required=True, type=_date, help="archive months ending at or before (UTC)"
    )
    archive.add_argument("--out", required=True, type=Path, help="directory for the export")
    archive.add_argument(
        "--keep", action="store_true", help="export but keep the detached partitions"
    )
    archive.set_defaults(audit_run=run_archive)


def _date(text: str) -> datetime:
    try:
        when = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an ISO date: {text!r}") from exc
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _connect(args: argparse.Namespace) -> psycopg.Connection[Any] | None:
    url = database_url(args)
    if not url:
        print("error: name the database with --url or QM_MIGRATION_DATABASE_URL", file=sys.stderr)
        return None
    try:
        return psycopg.connect(url, autocommit=True, application_name="qm-audit")
    except psycopg.Error as exc:
        print(f"error: cannot connect to the database: {exc}", file=sys.stderr)
        return None


def run_verify(args: argparse.Namespace) -> int:
    db = _connect(args)
    if db is None:
        return 2
    with db:
        try:
            if args.seal:
                history.seal_all(db)
            broken = history.verify(db)
            st = history.status(db)
        except psycopg.Error as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    if args.output == "json":
        doc = {
            "intact": broken is None,
            "broken": None
            if broken is None
            else {"seq": broken.seq, "id": broken.id, "problem": broken.problem},
            "sealedSeq": st.sealed_seq,
            "anchorSeq": st.anchor_seq,
            "tipHash": st.tip_hash,
            "unsealed": st.unsealed,
        }
        print(json.dumps(doc, indent=2))
    elif broken is None and st.sealed_seq == st.anchor_seq:
        print(f"nothing sealed after the anchor at seq {st.anchor_seq}; {st.unsealed} rows waiting")
    elif broken is None:
        print(
            f"the history's chain holds from seq {st.anchor_seq + 1} to {st.sealed_seq}"
            f" (tip sha256 {st.tip_hash}); {st.unsealed} rows not sealed yet"
        )
    else:
        print(f"broken: {broken.describe()}")
    return 0 if broken is None else 1


def run_archive(args: argparse.Namespace) -> int:
    db = _connect(args)
    if db is None:
        return 2
    with db:
        try:
            manifest = history.archive(db, args.before, args.out, keep=args.keep)
        except psycopg.Error as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    for f in manifest.files:
        print(f"{f.partition}: {f.rows} rows -> {args.out / f.file} (sha256 {f.sha256})")
    print(
        f"anchor: seq {manifest.anchor_seq}, hash {manifest.anchor_hash};"
        f" manifest {args.out / f'manifest-{manifest.anchor_seq}.json'}"
    )
    return 0


def run(args: argparse.Namespace) -> int:
    code: int = args.audit_run(args)
    return code
