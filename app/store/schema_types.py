"""The building blocks of ``schema.py``: column types by their SQL names, a column helper, and
the shape every kind table shares.

Types are named as PostgreSQL prints them (``"timestamptz"``, ``"text[]"``), so a declaration
reads like the DDL it describes. ``pg_lsn``, ``xid8`` and ``"char"`` have no SQLAlchemy type:
they are declared here and taught to the PostgreSQL dialect's reflection, so Alembic's
comparison sees the real type instead of skipping the column.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Computed,
    Date,
    Double,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Numeric,
    PrimaryKeyConstraint,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import (
    ARRAY,
    CIDR,
    INET,
    INTERVAL,
    JSONB,
    OID,
    REAL,
    TIMESTAMP,
    UUID,
)
from sqlalchemy.dialects.postgresql.base import ischema_names
from sqlalchemy.types import TypeEngine, UserDefinedType


class _Named(UserDefinedType[Any]):
    """A PostgreSQL type SQLAlchemy does not know, compared by its name."""

    cache_ok = True
    sql_name = ""

    def get_col_spec(self, **kw: Any) -> str:
        return self.sql_name


class PgLsn(_Named):
    sql_name = "pg_lsn"


class Xid8(_Named):
    sql_name = "xid8"


class PgChar(_Named):
    sql_name = '"char"'


class Regclass(_Named):
    sql_name = "regclass"


class PgName(_Named):
    sql_name = "name"


for _type in (PgLsn, Xid8, PgChar, Regclass, PgName):
    ischema_names[_type.sql_name] = _type
ischema_names["char"] = PgChar  # reflection strips the quotes of "char" on some versions


def sql_type(name: str) -> TypeEngine[Any]:
    """The SQLAlchemy type of a PostgreSQL type name as ``format_type`` prints it."""
    if name.endswith("[]"):
        return ARRAY(sql_type(name[:-2]))
    if name.startswith("varchar(") or name.startswith("character varying("):
        return String(int(name[name.index("(") + 1 : -1]))
    simple: dict[str, TypeEngine[Any]] = {
        "uuid": UUID(),
        "text": Text(),
        "jsonb": JSONB(),
        "json": JSON(),
        "timestamptz": TIMESTAMP(timezone=True),
        "bigint": BigInteger(),
        "integer": Integer(),
        "boolean": Boolean(),
        "bytea": LargeBinary(),
        "cidr": CIDR(),
        "inet": INET(),
        "interval": INTERVAL(),
        "pg_lsn": PgLsn(),
        "xid8": Xid8(),
        '"char"': PgChar(),
        "regclass": Regclass(),
        "name": PgName(),
        "smallint": SmallInteger(),
        "numeric": Numeric(),
        "double precision": Double(),
        "real": REAL(),
        "date": Date(),
        "oid": OID(),
    }
    return simple[name]


def col(
    name: str,
    type_name: str,
    *,
    null: bool = True,
    default: str | None = None,
    generated: str | None = None,
    comment: str | None = None,
    serial: bool = False,
) -> Column[Any]:
    """A column: ``default`` and ``generated`` are SQL text as PostgreSQL prints it back
    (``pg_get_expr``), so the comparison with a database is exact rather than a guess."""
    extra: list[Any] = [Computed(text(generated), persisted=True)] if generated else []
    return Column(
        name,
        sql_type(type_name),
        *extra,
        nullable=null,
        server_default=text(default) if default is not None else None,
        comment=comment,
        autoincrement=serial,
    )


def kind_columns() -> list[Column[Any]]:
    """The columns every kind table starts with (``migrations/kind_table.py``)."""
    return [
        col("uid", "uuid", null=False),
        col("namespace", "text", null=False, default="''::text"),
        col("name", "text", null=False),
        col("generate_name", "text"),
        col("labels", "jsonb", null=False, default="'{}'::jsonb"),
        col("annotations", "jsonb", null=False, default="'{}'::jsonb"),
        col("owner_references", "jsonb", null=False, default="'[]'::jsonb"),
        col("finalizers", "jsonb", null=False, default="'[]'::jsonb"),
        col("creation_timestamp", "timestamptz", null=False, default="now()"),
        col("deletion_timestamp", "timestamptz"),
        col("deletion_grace_period_seconds", "integer"),
        col("generation", "bigint", null=False, default="1"),
        col("row_version", "bigint", null=False, default="0"),
        col("spec", "jsonb", null=False, default="'{}'::jsonb"),
        col("status", "jsonb", null=False, default="'{}'::jsonb"),
    ]


KIND_COLUMN_NAMES = tuple(c.name for c in kind_columns())


def kind_table(
    metadata: MetaData, name: str, *extra: Any, fillfactor: int | None = None, **kw: Any
) -> Table:
    """A kind's table: the shared columns, then ``extra`` columns and indexes; the unique
    (namespace, name), and gin indexes on labels and owner references."""
    options: dict[str, Any] = (
        {"postgresql_with": {"fillfactor": str(fillfactor)}} if fillfactor else {}
    )
    return Table(
        name,
        metadata,
        *kind_columns(),
        *extra,
        PrimaryKeyConstraint("uid", name=f"{name}_pkey"),
        UniqueConstraint("namespace", "name", name=f"{name}_namespace_name"),
        Index(
            f"{name}_labels",
            "labels",
            postgresql_using="gin",
            postgresql_ops={"labels": "jsonb_path_ops"},
        ),
        Index(
            f"{name}_owners",
            "owner_references",
            postgresql_using="gin",
            postgresql_ops={"owner_references": "jsonb_path_ops"},
            postgresql_where=text("(owner_references <> '[]'::jsonb)"),
        ),
        **options,
        **kw,
    )
