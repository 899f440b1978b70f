"""Drift between the schema the code describes and a live database.

Who calls it: ``qm db check`` (``app/cli/db.py``), the migration suite, and the developer's
renderer (``schema_render.py``, which reads the same catalog queries).

Tables, columns, types, defaults, nullability, comments, keys and indexes are compared by
Alembic's ``compare_metadata`` against ``schema.metadata``; generated columns by their
expressions (Alembic does not compare those). Functions, triggers, views and policies are read
with ``alembic-utils``' entity classes and compared, by identity and definition, with what
``schema_objects.py`` recorded at head, and index definitions and the ``qm_stream``
publication's tables the same way. Everything here only reads the catalog: ``alembic-utils``'
own comparator recreates each entity inside a rolled-back transaction, which takes
ACCESS EXCLUSIVE locks on the tables involved, so it is not used against live databases.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic_utils.pg_function import PGFunction
from alembic_utils.pg_policy import PGPolicy
from alembic_utils.pg_trigger import PGTrigger
from alembic_utils.pg_view import PGView
from alembic_utils.replaceable_entity import ReplaceableEntity
from sqlalchemy import Computed, create_engine, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from . import schema_objects
from .schema import SCHEMAS, metadata

# What ``schema_objects.py`` records, by group; each maps an identity to its definition.
GROUPS = ("functions", "triggers", "views", "policies", "grants", "settings", "indexes",
          "publications")  # fmt: skip

# What Alembic itself compares; the entity types alembic-utils adds are compared below.
TABLE_LEVEL = {"schema", "table", "column", "index", "unique_constraint", "foreign_key_constraint"}

INDEXES = """
SELECT i.schemaname, i.indexname, i.indexdef FROM pg_indexes i
JOIN pg_class c ON c.relname = i.tablename
JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = i.schemaname
WHERE i.schemaname = :schema AND NOT c.relispartition AND i.tablename <> 'alembic_version'
"""
PUBLISHED = "SELECT pubname, schemaname, tablename FROM pg_publication_tables"
PARTITIONS = "SELECT c.relname FROM pg_class c WHERE c.relispartition"
# Privileges granted on the schema, its relations (whole or by column), sequences and
# functions, to anyone but the owner. A grant on a whole object reads "whole"; a column grant
# lists its columns, so adding a column changes neither. "*" marks the grant option.
GRANTS = """
WITH acl AS (
  SELECT n.nspname AS obj, a.grantee, a.privilege_type, a.is_grantable, NULL::name AS col
    FROM pg_namespace n, aclexplode(n.nspacl) a
   WHERE n.nspname = :schema AND a.grantee <> n.nspowner
  UNION ALL
  SELECT c.relname, a.grantee, a.privilege_type, a.is_grantable, NULL
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace, aclexplode(c.relacl) a
   WHERE n.nspname = :schema AND a.grantee <> c.relowner
  UNION ALL
  SELECT c.relname, a.grantee, a.privilege_type, a.is_grantable, t.attname
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    JOIN pg_attribute t ON t.attrelid = c.oid AND t.attnum > 0 AND NOT t.attisdropped,
         aclexplode(t.attacl) a
   WHERE n.nspname = :schema AND a.grantee <> c.relowner
  UNION ALL
  SELECT p.oid::regprocedure::text, a.grantee, a.privilege_type, a.is_grantable, NULL
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace, aclexplode(p.proacl) a
   WHERE n.nspname = :schema AND a.grantee <> p.proowner
)
SELECT obj, CASE WHEN grantee = 0 THEN 'PUBLIC' ELSE grantee::regrole::text END,
       privilege_type,
       CASE WHEN bool_or(col IS NULL) THEN 'whole' ELSE string_agg(col, ', ' ORDER BY col) END
       || CASE WHEN bool_or(is_grantable) THEN ' *' ELSE '' END
  FROM acl GROUP BY 1, 2, 3
"""
# Row security and storage or view options (security_invoker, fillfactor) of each relation.
SETTINGS = """
SELECT c.relname, concat_ws('; ',
         CASE WHEN c.relrowsecurity THEN 'row security' END,
         CASE WHEN c.relforcerowsecurity THEN 'forced row security' END,
         array_to_string(c.reloptions, ', '))
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = :schema AND c.relkind IN ('r', 'p', 'v', 'm') AND NOT c.relispartition
  AND (c.relrowsecurity OR c.relforcerowsecurity OR c.reloptions IS NOT NULL)
"""
# Functions an extension installed: the extension's, not the schema's (ADR 0066). alembic-utils
# already leaves them out of the functions; their grants are left out here.
EXTENSION_MEMBERS = """
SELECT p.oid::regprocedure::text FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace
JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
WHERE n.nspname = :schema
"""
# The history's row trigger calls the C function where the qm_history extension is installed
# and the PL/pgSQL one elsewhere (ADR 0066); both write the same rows, so a trigger is read as
# if it called the PL/pgSQL one.
NATIVE_HISTORY = ("qm_history_record_native(", "qm_history_record(")
GENERATED = """
SELECT c.relname, a.attname, pg_get_expr(d.adbin, d.adrelid)
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE n.nspname = 'public' AND a.attgenerated = 's' AND NOT c.relispartition
"""


def engine_url(url: str) -> str:
    """A ``postgresql://`` URL as SQLAlchemy's psycopg 3 driver wants it."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def _key(schema: str, name: str) -> str:
    return name if schema == "public" else f"{schema}.{name}"


def _table(entity: str) -> str:
    return entity.removeprefix("public.")


def read_objects(sess: Session, schema: str | None = None) -> dict[str, dict[str, str]]:
    """Functions, triggers, views, policies, index definitions and published tables of the
    given schema (default: every schema the code owns), as the database prints them."""
    found: dict[str, dict[str, str]] = {group: {} for group in GROUPS}
    # A partition's triggers, grants and policies are its parent's, cloned as months go by.
    partitions = {r[0] for r in sess.execute(text(PARTITIONS))}

    def on_partition(entity: str) -> bool:
        return entity.rsplit(".", 1)[-1] in partitions

    for sch in (schema,) if schema else SCHEMAS:
        members = {r[0] for r in sess.execute(text(EXTENSION_MEMBERS), {"schema": sch})}
        for f in PGFunction.from_database(sess, sch):
            found["functions"][_key(sch, f.signature)] = f.definition
        for t in PGTrigger.from_database(sess, sch):
            if not on_partition(t.on_entity):
                key = _key(sch, f"{t.signature} on {_table(t.on_entity)}")
                found["triggers"][key] = t.definition.replace(*NATIVE_HISTORY)
        for v in PGView.from_database(sess, sch):
            found["views"][_key(sch, v.signature)] = v.definition
        for p in PGPolicy.from_database(sess, sch):
            if not on_partition(p.on_entity):
                key = _key(sch, f"{p.signature} on {_table(p.on_entity)}")
                found["policies"][key] = p.definition
        for obj, grantee, privilege, columns in sess.execute(text(GRANTS), {"schema": sch}):
            if obj not in partitions and obj not in members:
                found["grants"][_key(sch, f"{obj} to {grantee}: {privilege}")] = columns
        for _, name, definition in sess.execute(text(INDEXES), {"schema": sch}):
            found["indexes"][_key(sch, name)] = definition
        for name, settings in sess.execute(text(SETTINGS), {"schema": sch}):
            found["settings"][_key(sch, name)] = settings
    for pub, sch, table in sess.execute(text(PUBLISHED)):
        if table not in partitions:
            found["publications"][f"{pub}: {_key(sch, table)}"] = ""
    return found


def expected_objects() -> dict[str, dict[str, str]]:
    return {group: getattr(schema_objects, group.upper(), {}) for group in GROUPS}


def _split(key: str) -> tuple[str, str]:
    """``reporting.x`` -> ("reporting", "x"); a key with no owned schema in front is public."""
    head, _, rest = key.partition(".")
    return (head, rest) if head in SCHEMAS and head != "public" and rest else ("public", key)


def declared_entities() -> list[ReplaceableEntity]:
    """The recorded functions, triggers, views and policies as ``alembic-utils`` entities, for
    tools that want them as such (``register_entities`` on a scratch database, or
    ``op.replace_entity`` in a migration). ``qm db check`` compares the text and does not
    need them."""
    out: list[ReplaceableEntity] = []
    for key, definition in schema_objects.FUNCTIONS.items():
        sch, signature = _split(key)
        out.append(PGFunction(schema=sch, signature=signature, definition=definition))
    for key, definition in schema_objects.VIEWS.items():
        sch, signature = _split(key)
        out.append(PGView(schema=sch, signature=signature, definition=definition))
    for key, definition in schema_objects.TRIGGERS.items():
        name, _, table = _split(key)[1].partition(" on ")
        out.append(PGTrigger(schema=_split(key)[0], signature=name, on_entity=table,
                             definition=definition))  # fmt: skip
    for key, definition in schema_objects.POLICIES.items():
        name, _, table = _split(key)[1].partition(" on ")
        out.append(PGPolicy(schema=_split(key)[0], signature=name, on_entity=table,
                            definition=definition))  # fmt: skip
    return out


def _object_drift(
    expected: dict[str, dict[str, str]], found: dict[str, dict[str, str]]
) -> Iterator[str]:
    for group in GROUPS:
        want, have = expected[group], found[group]
        if group == "settings":
            for key in sorted(k for k in want.keys() | have.keys() if want.get(k) != have.get(k)):
                yield (f"{key}: {have.get(key) or 'no row security or options'} in the database,"
                       f" {want.get(key) or 'no row security or options'} in the code")  # fmt: skip
            continue
        what = {"indexes": "index", "policies": "policy"}.get(group, group[:-1])
        if group != "indexes":  # Alembic names the missing and extra ones already
            for key in sorted(want.keys() - have.keys()):
                yield f"{what} {key} is missing from the database"
            for key in sorted(have.keys() - want.keys()):
                yield f"{what} {key} is in the database but not in the code"
        for key in sorted(k for k in want.keys() & have.keys() if want[k] != have[k]):
            yield f"{what} {key} differs from the code's definition"


def _name(obj: Any) -> str:
    table = getattr(obj, "table", None)
    name = getattr(obj, "name", obj)
    return f"{name} on {table.name}" if table is not None else str(name)


def _shown(value: Any) -> str:
    """A compared value as SQL (defaults come as clauses, types as type objects)."""
    arg = getattr(value, "arg", value)
    if hasattr(arg, "text"):
        return str(arg.text)
    if hasattr(value, "compile"):
        return str(value.compile(dialect=postgresql.dialect()))
    return repr(value)


def _describe(diff: Any) -> str:
    """One line for one of ``compare_metadata``'s differences."""
    if isinstance(diff, list):  # modify_* come as lists of column changes
        return "; ".join(_describe(d) for d in diff)
    op = diff[0]
    if op.startswith("modify_"):
        _, _, table, column, _, db_value, code_value = diff
        return (f"column {table}.{column}: {op[7:]} is {_shown(db_value)} in the database,"
                f" {_shown(code_value)} in the code")  # fmt: skip
    if op in ("add_column", "remove_column"):
        where = f"column {diff[2]}.{diff[3].name}"
    elif op in ("add_table", "remove_table"):
        where = f"table {diff[1].name}"
    elif op in ("add_table_comment", "remove_table_comment"):
        return f"the comment of table {diff[1].name} differs from the code's"
    else:
        where = f"{op.split('_', 1)[1].replace('fk', 'foreign key')} {_name(diff[1])}"
    if op.startswith("add_"):
        return f"{where} is missing from the database"
    return f"{where} is in the database but not in the code"


def _generated_drift(conn: Connection) -> Iterator[str]:
    found = {(t, c): expr for t, c, expr in conn.execute(text(GENERATED))}
    for table in metadata.tables.values():
        if table.schema not in (None, "public"):
            continue
        for column in table.columns:
            computed = column.computed
            if isinstance(computed, Computed):
                have = found.get((table.name, column.name))
                if have is not None and have != str(computed.sqltext):
                    yield (f"generated column {table.name}.{column.name} computes {have},"
                           f" the code {computed.sqltext}")  # fmt: skip


def table_drift(conn: Connection) -> list[str]:
    partitions = {r[0] for r in conn.execute(text(PARTITIONS))}

    def include_name(name: str | None, type_: str, parent: Any) -> bool:
        if type_ not in TABLE_LEVEL:
            return False
        if type_ == "schema":
            return name in (None, *SCHEMAS)
        if type_ == "table":
            return name != "alembic_version" and name not in partitions
        return True

    ctx = MigrationContext.configure(
        conn,
        opts={
            "compare_type": True,
            "compare_server_default": True,
            "include_schemas": True,
            "include_name": include_name,
        },
    )
    diffs = compare_metadata(ctx, metadata)
    return [_describe(d) for d in diffs] + list(_generated_drift(conn))


def check(url: str) -> list[str]:
    """Every difference between the database at ``url`` and the code's schema, one line each
    (empty when none)."""
    engine = create_engine(engine_url(url))
    try:
        with engine.connect() as conn:
            lines = table_drift(conn)
            with Session(bind=conn) as sess:
                lines += _object_drift(expected_objects(), read_objects(sess))
            conn.rollback()
    finally:
        engine.dispose()
    return lines


COLUMNS = """
SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
       CASE WHEN a.attgenerated = '' THEN pg_get_expr(d.adbin, d.adrelid) END,
       CASE WHEN a.attgenerated = 's' THEN pg_get_expr(d.adbin, d.adrelid) END,
       col_description(c.oid, a.attnum)
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE n.nspname = :schema AND c.relkind IN ('r', 'p') AND NOT c.relispartition
  AND a.attnum > 0 AND NOT a.attisdropped AND c.relname <> 'alembic_version'
ORDER BY c.relname, a.attnum
"""
RELATIONS = """
SELECT c.relname || ' ' || c.relkind::text, coalesce(obj_description(c.oid, 'pg_class'), '')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = :schema AND c.relkind IN ('r', 'p', 'v', 'm', 'S') AND NOT c.relispartition
  AND c.relname <> 'alembic_version'
"""
ROLES = "SELECT rolname, rolcanlogin, rolreplication FROM pg_roles WHERE rolname LIKE 'qm%'"


def snapshot(conn: Connection) -> dict[str, Any]:
    """The whole schema as plain values, to tell whether a downgrade undid its upgrade."""
    shot: dict[str, Any] = {"roles": sorted(map(tuple, conn.execute(text(ROLES))))}
    for sch in SCHEMAS:
        shot[f"{sch}.columns"] = [tuple(r) for r in conn.execute(text(COLUMNS), {"schema": sch})]
        shot[f"{sch}.relations"] = dict(map(tuple, conn.execute(text(RELATIONS), {"schema": sch})))
    with Session(bind=conn) as sess:
        shot.update(read_objects(sess))
    return shot


def revision(url: str) -> str | None:
    """The Alembic revision the database says it is at."""
    engine = create_engine(engine_url(url))
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def unique(lines: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(lines))
