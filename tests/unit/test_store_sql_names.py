"""The store's SQL against the schema the code describes: every table and column a statement
names exists in ``app/store/schema.py``'s MetaData.

Statements come from ``app/store/sql.py``'s builders, called for every kind, and from every
string literal that is a whole statement in ``app/store``, ``app/stream``, ``app/scheduler``,
``app/api`` and ``workers``. PostgreSQL's own parser (pglast)
reads them; a column a statement names must belong to one of the tables it reads or writes,
or be a name the statement itself defines (an output alias, a CTE, a function's columns).
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pglast import ast as pg
from pglast import parse_sql
from pglast.visitors import Visitor

from app.core.kinds import KINDS
from app.store import sql
from app.store.schema import metadata

STORE = Path(sql.__file__).parent
ROOT = STORE.parents[1]
# Where the plane's own SQL lives: the store, the revision stream, the scheduler's binds, the
# API's background loops and the controllers' loops.
SOURCES = [STORE, ROOT / "app" / "stream", ROOT / "app" / "scheduler", ROOT / "app" / "api",
           ROOT / "workers"]  # fmt: skip
STARTS = ("SELECT", "INSERT", "UPDATE", "DELETE", "WITH")
# Besides the schema's tables, statements may read PostgreSQL's catalogs (``pg_*``) and
# Alembic's own table; the columns of those are not checked.
OUTSIDE = {"alembic_version"}
TABLES = {t.name: {c.name for c in t.columns} for t in metadata.tables.values()}


def built_statements() -> Iterator[tuple[str, str]]:
    for name, fn in inspect.getmembers(sql, callable):
        target = getattr(fn, "__wrapped__", fn)
        if getattr(target, "__module__", "") != sql.__name__ or name.startswith("_"):
            continue
        params = list(inspect.signature(target).parameters.values())
        if not params:
            yield f"sql.{name}()", fn()
        elif len(params) == 1 and params[0].annotation in ("Kind", "kind"):
            for kind in KINDS:
                yield f"sql.{name}({kind.kind})", fn(kind)


def _parses(text: str) -> bool:
    """Whole statements only: not docstrings, nor clauses spliced into others."""
    try:
        parse_sql(text)
    except Exception:
        return False
    return True


def literal_statements() -> Iterator[tuple[str, str]]:
    for path in sorted(p for source in SOURCES for p in source.rglob("*.py")):
        if path.parent == STORE and (path.name.startswith("schema") or path.name == "drift.py"):
            continue  # the drift check's catalog queries
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = re.sub(r"%(\([a-z_]+\))?s", "$1", node.value.strip())  # psycopg's
                if text.upper().startswith(STARTS) and _parses(text):
                    yield f"{path.relative_to(ROOT)}:{node.lineno}", text


class _Names(Visitor):  # type: ignore[misc]
    """Tables read or written, columns named, and the names the statement defines itself."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: set[str] = set()
        self.columns: set[str] = set()
        self.targets: list[tuple[str, str]] = []  # (table, column) an INSERT/UPDATE writes
        self.defined: set[str] = set()
        self.from_function = False  # reads a function's rows, whose columns are not declared

    def visit_RangeFunction(self, ancestors: Any, node: pg.RangeFunction) -> None:
        self.from_function = True

    def visit_RangeVar(self, ancestors: Any, node: pg.RangeVar) -> None:
        self.tables.add(node.relname)
        if node.alias:
            self.defined.add(node.alias.aliasname)

    def visit_Alias(self, ancestors: Any, node: pg.Alias) -> None:
        self.defined.add(node.aliasname)
        self.defined |= {c.sval for c in node.colnames or ()}

    def visit_CommonTableExpr(self, ancestors: Any, node: pg.CommonTableExpr) -> None:
        self.defined.add(node.ctename)
        self.defined |= {c.sval for c in node.aliascolnames or ()}

    def visit_ResTarget(self, ancestors: Any, node: pg.ResTarget) -> None:
        if node.name:
            self.defined.add(node.name)

    def visit_InsertStmt(self, ancestors: Any, node: pg.InsertStmt) -> None:
        self.targets += [(node.relation.relname, c.name) for c in node.cols or ()]

    def visit_UpdateStmt(self, ancestors: Any, node: pg.UpdateStmt) -> None:
        self.targets += [(node.relation.relname, t.name) for t in node.targetList or ()]

    def visit_ColumnRef(self, ancestors: Any, node: pg.ColumnRef) -> None:
        last = node.fields[-1]
        if isinstance(last, pg.String):
            self.columns.add(last.sval)


# Every PostgreSQL table has these system columns; no schema declares them.
SYSTEM_COLUMNS = frozenset({"ctid", "xmin", "xmax", "cmin", "cmax", "tableoid"})


def problems(text: str) -> list[str]:
    names = _Names()
    for stmt in parse_sql(text):
        names(stmt)
    outside = {t for t in names.tables if t.startswith("pg_") or t in OUTSIDE}
    unknown = names.tables - TABLES.keys() - names.defined - outside
    out = [f"table {t}" for t in sorted(unknown)]
    out += [f"column {t}.{c}" for t, c in names.targets if t in TABLES and c not in TABLES[t]]
    if outside or unknown or names.from_function:
        return out  # some columns come from what the schema does not declare
    columns = set().union(SYSTEM_COLUMNS, *(TABLES[t] for t in names.tables & TABLES.keys()))
    out += [f"column {c}" for c in sorted(names.columns - columns - names.defined - names.tables)]
    return out


def _statements() -> list[tuple[str, str]]:
    return [*built_statements(), *literal_statements()]


def test_the_store_has_statements_to_check() -> None:
    found = _statements()
    assert len([s for s in found if s[0].startswith("sql.")]) > 10 * len(KINDS)
    assert len([s for s in found if not s[0].startswith("sql.")]) > 20


@pytest.mark.parametrize(("where", "text"), _statements(), ids=lambda v: str(v)[:60])
def test_every_name_the_store_uses_is_in_the_schema(where: str, text: str) -> None:
    found = problems(text)
    assert not found, f"{where} names what schema.py does not declare: {found}\n{text}"


@pytest.mark.parametrize(
    ("text", "wrong"),
    [
        ("SELECT uid FROM podz WHERE name = $1", ["table podz"]),
        ("UPDATE pods SET nodename = $1 WHERE uid = $2", ["column pods.nodename"]),
        ("INSERT INTO nodes (uid, name, colour) VALUES ($1, $2, $3)", ["column nodes.colour"]),
        ("SELECT p.uid, p.node_nam FROM pods p", ["column node_nam"]),
        ("WITH x AS (SELECT uid AS u FROM pods) SELECT u FROM x", []),
    ],
)
def test_the_check_finds_what_is_missing(text: str, wrong: list[str]) -> None:
    assert problems(text) == wrong
