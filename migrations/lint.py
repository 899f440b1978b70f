"""Write the offline SQL of every migration and lint it with squawk (``make lint``).

``python -m migrations.lint [--out DIR] [--from REV]`` runs ``alembic upgrade head --sql``,
writes each revision's script to ``DIR/NNNN.sql`` (what a DBA reviews, default ``build/sql``)
and lints it with squawk. Each file is linted in pieces, one per transaction: Alembic's
``BEGIN;``/``COMMIT;`` lines cut it, and a piece between a ``COMMIT;`` and the next ``BEGIN;``
(an autocommit block: a concurrent index build, a batched backfill) is linted as running
outside any transaction, where squawk asks that every statement be safe to run again.

Rules left out everywhere (:data:`EXCLUDED`) say nothing about running online. Migrations
released before online upgrades were required (0001 to 0013) keep the findings they had then
(:data:`BASELINE`); every later migration must lint clean. Exit status 1 on any finding.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PG_VERSION = "18.0"

EXCLUDED = {
    "prefer-bigint-over-int": "int columns here are bounded (ports, priorities, counts)",
    "prefer-identity": "a style choice; serial and identity lock the same way",
    "ban-char-field": "a style choice",
    "prefer-text-field": "only alembic_version's own varchar(32)",
}

# Findings of the migrations released before online upgrades were required: each is applied
# on every existing database already and is never run online again.
BASELINE: dict[str, set[str]] = {
    "0002": {"adding-field-with-default"},
    "0006": {"ban-drop-column", "adding-field-with-default"},
    "0009": {
        "adding-foreign-key-constraint",
        "adding-field-with-default",
        "constraint-missing-not-valid",
        "require-concurrent-index-creation",
        "disallowed-unique-constraint",
    },
}

_REVISION = re.compile(r'^revision = "([^"]+)"', re.M)
_DOWN = re.compile(r'^down_revision = (?:"([^"]+)"|None)', re.M)
_RUNNING = re.compile(r"^-- Running upgrade (?:\S*\s*->\s*)(\S+)")


def chain() -> list[str]:
    """Revision ids, oldest first, following ``down_revision`` from the base."""
    children: dict[str | None, str] = {}
    for path in (ROOT / "migrations" / "versions").glob("*.py"):
        text = path.read_text()
        rev, down = _REVISION.search(text), _DOWN.search(text)
        if rev and down:
            children[down.group(1)] = rev.group(1)
    out, rev = [], children.get(None)
    while rev is not None:
        out.append(rev)
        rev = children.get(rev)
    return out


def offline_sql() -> str:
    """``alembic upgrade base:head --sql``: every migration's script, one after another."""
    env = {**os.environ, "QM_MIGRATION_DATABASE_URL": "postgresql://offline/offline"}
    done = subprocess.run(
        [sys.executable, "-m", "alembic", "upgrade", "head", "--sql"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return done.stdout


def split(sql: str) -> dict[str, str]:
    """The offline SQL of ``base:head`` cut into one script per revision.

    Alembic writes ``-- Running upgrade A -> B`` right after the ``BEGIN;`` of B's transaction;
    what comes before the first marker (the version table) goes with the first revision.
    """
    scripts: dict[str, list[str]] = {}
    current: list[str] = []
    for line in sql.splitlines(keepends=True):
        marker = _RUNNING.match(line)
        if marker:
            carried = []
            while current and current[-1].strip() in ("", "BEGIN;"):
                carried.insert(0, current.pop())
            current = scripts.setdefault(marker.group(1), current if not scripts else [])
            current.extend(carried)
        current.append(line)
    return {rev: "".join(lines) for rev, lines in scripts.items()}


def pieces(sql: str) -> list[str]:
    """A script cut at Alembic's own ``BEGIN;``/``COMMIT;`` lines (at the start of a line, unlike
    a ``DO`` block's), one piece per transaction or per stretch of autocommit statements."""
    out: list[str] = []
    current: list[str] = []
    for line in sql.splitlines(keepends=True):
        if line.rstrip("\n") == "BEGIN;" and _has_statements("".join(current)):
            out.append("".join(current))
            current = []
        current.append(line)
        if line.rstrip("\n") == "COMMIT;":
            out.append("".join(current))
            current = []
    out.append("".join(current))
    return [p.replace(";;\n", ";\n") for p in out if _has_statements(p)]


def _has_statements(piece: str) -> bool:
    body = [
        line
        for line in piece.splitlines()
        if line.strip()
        and not line.lstrip().startswith("--")
        and line.strip() not in ("BEGIN;", "COMMIT;")
    ]
    return bool(body)


def squawk(paths: list[Path], excluded: set[str]) -> subprocess.CompletedProcess[str]:
    binary = Path(sys.executable).with_name("squawk")
    argv = [str(binary if binary.exists() else "squawk"), "--reporter", "gcc"]
    argv += ["--pg-version", PG_VERSION, "--exclude", ",".join(sorted(excluded))]
    return subprocess.run(
        argv + [str(p) for p in paths], capture_output=True, text=True, check=False, timeout=120
    )


def lint(revisions: list[str], out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    scripts = split(offline_sql())
    missing = [rev for rev in revisions if rev not in scripts]
    if missing:
        print(f"squawk: no offline SQL for {missing}")
        return 1
    findings = 0
    for rev in revisions:
        (out / f"{rev}.sql").write_text(scripts[rev])
        with tempfile.TemporaryDirectory() as scratch:
            paths = []
            for i, piece in enumerate(pieces(scripts[rev])):
                path = Path(scratch) / f"{rev}.{i}.sql"
                path.write_text(piece)
                paths.append(path)
            result = squawk(paths, set(EXCLUDED) | BASELINE.get(rev, set()))
        if result.returncode != 0:
            findings += 1
            print(result.stdout + result.stderr, end="")
    print(f"squawk: {len(revisions)} migrations linted, {findings} with findings; SQL in {out}")
    return 1 if findings else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m migrations.lint", description=__doc__)
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "sql")
    parser.add_argument("--from", dest="first", default=None, help="first revision to lint")
    args = parser.parse_args(argv)
    revisions = chain()
    if args.first:
        revisions = revisions[revisions.index(args.first) :]
    return lint(revisions, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
