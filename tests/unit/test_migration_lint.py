"""The offline SQL is cut per revision and per transaction before squawk lints it."""

from __future__ import annotations

from migrations.lint import chain, pieces, split

SCRIPT = """BEGIN;

CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL);

-- Running upgrade  -> 0001

CREATE TABLE t (id bigint PRIMARY KEY);;

COMMIT;

BEGIN;

-- Running upgrade 0001 -> 0002

SET LOCAL lock_timeout = '500ms';

COMMIT;

SET lock_timeout = '500ms';

CREATE INDEX CONCURRENTLY IF NOT EXISTS t_x ON t (id);

DO $b$ BEGIN
  LOOP
    COMMIT;
  END LOOP;
END $b$;

BEGIN;

UPDATE alembic_version SET version_num='0002';

COMMIT;
"""


def test_split_by_revision_and_transaction():
    scripts = split(SCRIPT)
    assert list(scripts) == ["0001", "0002"]
    assert scripts["0001"].startswith("BEGIN;") and "CREATE TABLE t" in scripts["0001"]
    assert scripts["0002"].lstrip().startswith("BEGIN;\n\n-- Running upgrade 0001 -> 0002")
    parts = pieces(scripts["0002"])
    assert len(parts) == 3
    assert "CONCURRENTLY" in parts[1] and "BEGIN;" not in parts[1].split("DO $b$")[0]
    assert "    COMMIT;" in parts[1]  # a DO block's COMMIT does not cut it
    assert pieces(scripts["0001"])[0].count(";;") == 0


def test_chain_starts_at_the_first_revision():
    assert chain()[0] == "0001"
