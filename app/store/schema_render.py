"""Render the declarations of a database at head, for the developer whose migration changed it.

``python -m app.store.schema_render write URL`` rewrites the table declarations at the end of
``schema.py`` (below its marker line) and the whole of ``schema_objects.py`` (functions,
triggers, views, policies, grants, row security and options, index definitions and the
publication's tables, as the database prints them back) from the database at ``URL``;
``tables`` and ``objects`` print them instead. Run it on a scratch database after
``alembic upgrade head``, then ``ruff format`` both files, review the diff and commit it with
the migration: ``qm db check`` compares every database against these.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from .drift import COLUMNS, engine_url, read_objects
from .schema import SCHEMAS
from .schema_types import KIND_COLUMN_NAMES

TYPE_NAMES = {"timestamp with time zone": "timestamptz", "character varying": "varchar"}


def _type_name(formatted: str) -> str:
    for long, short in TYPE_NAMES.items():
        formatted = formatted.replace(long, short)
    return formatted


def _column(row: Any, pk: list[str]) -> str:
    table, name, typ, notnull, default, generated, comment = row
    args = [repr(name), repr(_type_name(typ))]
    if notnull:
        args.append("null=False")
    owned = f"nextval('{table}_{name}_seq'::regclass)"  # a serial column's own sequence
    if default is not None and (
        default == owned or (default.startswith("nextval(") and pk == [name])
    ):
        args.append("serial=True")
    elif default is not None:
        args.append(f"default={default!r}")
    if generated is not None:
        args.append(f"generated={generated!r}")
    if comment is not None:
        args.append(f"comment={comment!r}")
    return f"col({', '.join(args)})"


def _index(ix: Any) -> str:
    sorting = ix.get("column_sorting") or {}
    parts = [repr(ix["name"])]
    for c in ix["column_names"]:
        order = sorting.get(c, ())
        parts.append(f"text({c + ' DESC'!r})" if "desc" in order else repr(c))
    if ix["unique"]:
        parts.append("unique=True")
    opts = ix.get("dialect_options", {})
    if "postgresql_using" in opts:
        parts.append(f"postgresql_using={opts['postgresql_using']!r}")
    if opts.get("postgresql_ops"):
        parts.append(f"postgresql_ops={opts['postgresql_ops']!r}")
    if "postgresql_where" in opts:
        parts.append(f"postgresql_where=text({opts['postgresql_where']!r})")
    return f"Index({', '.join(parts)})"


def _is_kind(names: list[str], pk: list[str]) -> bool:
    return tuple(names[: len(KIND_COLUMN_NAMES)]) == KIND_COLUMN_NAMES and pk == ["uid"]


MARKER = "# -- rendered by app.store.schema_render from a database at head; do not edit below --"


def render_tables(conn: Connection) -> str:
    return "\n".join(_render_schema(conn, schema) for schema in SCHEMAS)


def _render_schema(conn: Connection, schema: str) -> str:
    insp = inspect(conn)
    rows = conn.execute(text(COLUMNS), {"schema": schema}).all()
    out: list[str] = []
    for table in sorted({r[0] for r in rows}):
        cols = [r for r in rows if r[0] == table]
        pk = insp.get_pk_constraint(table, schema=schema)
        pk_cols = pk["constrained_columns"]
        names = [r[1] for r in cols]
        kind = _is_kind(names, pk_cols)
        body = [_column(r, pk_cols) for r in (cols[len(KIND_COLUMN_NAMES) :] if kind else cols)]
        uniques = insp.get_unique_constraints(table, schema=schema)
        skip_ix = {u["name"] for u in uniques}
        if kind:
            skip_ix |= {f"{table}_labels", f"{table}_owners", f"{table}_namespace_name"}
        else:
            body.append(
                f"PrimaryKeyConstraint({', '.join(map(repr, pk_cols))}, name={pk['name']!r})"
            )
            body += [
                f"UniqueConstraint({', '.join(map(repr, u['column_names']))}, name={u['name']!r})"
                for u in uniques
            ]
        for fk in insp.get_foreign_keys(table, schema=schema):
            owner = fk["referred_schema"] if fk["referred_schema"] != "public" else None
            target = ".".join(filter(None, (owner, fk["referred_table"])))
            ref = ", ".join(f"{target}.{c}" for c in fk["referred_columns"])
            ondelete = fk["options"].get("ondelete")
            extra = f", ondelete={ondelete!r}" if ondelete else ""
            body.append(
                f"ForeignKeyConstraint({fk['constrained_columns']!r}, [{ref!r}],"
                f" name={fk['name']!r}{extra})"
            )
        body += [_index(ix) for ix in insp.get_indexes(table, schema=schema)
                 if ix["name"] not in skip_ix]  # fmt: skip
        options = insp.get_table_options(table, schema=schema).get("postgresql_with") or {}
        comment = insp.get_table_comment(table, schema=schema).get("text")
        out.append(_table(schema, table, kind, body, options, comment))
    return "\n".join(out)


def _table(
    schema: str, table: str, kind: bool, body: list[str], options: dict[str, str], comment: Any
) -> str:
    kw = [] if schema == "public" else [f"schema={schema!r}"]
    if kind and options.get("fillfactor"):
        kw.append(f"fillfactor={int(options['fillfactor'])}")
    elif options:
        kw.append(f"postgresql_with={options!r}")
    if comment:
        kw.append(f"comment={comment!r}")
    args = "".join(f"    {b},\n" for b in [*body, *kw])
    var = table if schema == "public" else f"{schema}_{table}"
    if kind and not args:
        return f"{var} = kind_table(metadata, {table!r})\n"
    if kind:
        return f"{var} = kind_table(\n    metadata,\n    {table!r},\n{args})\n"
    return f"{var} = Table(\n    {table!r},\n    metadata,\n{args})\n"


def _literal(value: str) -> str:
    if '"""' in value or value.endswith("\\") or value.endswith('"'):
        return repr(value)
    return f'r"""{value}"""' if "\\" in value else f'"""{value}"""'


def render_objects(conn: Connection) -> str:
    with Session(bind=conn) as sess:
        found = read_objects(sess)
    lines = [
        '"""What ``alembic upgrade head`` leaves besides tables, as PostgreSQL prints it back.',
        "",
        "Written by ``python -m app.store.schema_render write URL`` on a database at head;",
        "``qm db check`` compares a database against it (``app/store/drift.py``).",
        '"""',
        "",
        "# ruff: noqa  (generated: SQL as the database prints it)",
        "from __future__ import annotations",
        "",
    ]
    head = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    lines.append(f"# The revision these definitions are at.\nREVISION = {head!r}\n")
    for group, items in found.items():
        lines.append(f"{group.upper()}: dict[str, str] = {{")
        lines += [f"    {k!r}: {_literal(v)}," for k, v in sorted(items.items())]
        lines.append("}")
        lines.append("")
    return "\n".join(lines)


def write(conn: Connection) -> None:
    here = Path(__file__).parent
    schema = here / "schema.py"
    kept = schema.read_text().split(MARKER, 1)[0]
    schema.write_text(f"{kept}{MARKER}\n\n{render_tables(conn)}")
    (here / "schema_objects.py").write_text(render_objects(conn))


def main(argv: Iterable[str]) -> int:
    args = list(argv)
    if len(args) != 2 or args[0] not in ("tables", "objects", "write"):
        print("usage: python -m app.store.schema_render tables|objects|write URL", file=sys.stderr)
        return 2
    engine = create_engine(engine_url(args[1]))
    with engine.connect() as conn:
        if args[0] == "write":
            write(conn)
        else:
            render = render_tables if args[0] == "tables" else render_objects
            sys.stdout.write(render(conn))
    engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
