"""squawk on the offline SQL: it finds unsafe DDL, and every migration's script passes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from migrations.lint import EXCLUDED, squawk
from tests.conftest import REPO_ROOT


def test_squawk_flags_a_blocking_index_and_passes_a_concurrent_one(tmp_path: Path):
    bad = tmp_path / "bad.sql"
    bad.write_text("BEGIN;\nCREATE INDEX pods_x ON pods (name);\nCOMMIT;\n")
    good = tmp_path / "good.sql"
    good.write_text(
        "SET lock_timeout = '500ms';\nSET statement_timeout = 0;\n"
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS pods_x ON pods (name);\n"
    )
    found = squawk([bad], set(EXCLUDED))
    assert found.returncode != 0 and "require-concurrent-index-creation" in found.stdout
    assert squawk([good], set(EXCLUDED)).returncode == 0


def test_every_migration_passes_squawk(tmp_path: Path):
    done = subprocess.run(
        [sys.executable, "-m", "migrations.lint", "--out", str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 with findings" in done.stdout
    assert (tmp_path / "0016.sql").read_text().count("SET LOCAL lock_timeout") == 1
