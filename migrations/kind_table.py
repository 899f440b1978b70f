"""The DDL of a new kind's table, for the migrations that add a kind (0008 onwards).

Every kind's table has the shape 0001 gave them: the object's metadata as columns, ``spec`` and
``status`` as jsonb, a unique (namespace, name), gin indexes on labels and owner references,
and the ``qm_stamp_row`` trigger. A migration that adds a kind names its table and the
columns it promotes from the object, so this module reads nothing from ``app.core.kinds``: a
migration must create the same schema however the kinds change later.

Frozen: migrations already applied import it, so its output never changes. A kind that needs
another shape gets a new function here (or its own DDL), never a change to this one.

From migration 0014 on, a new kind's table (or any table an operator would audit) also gets
the change history's triggers: append ``history_triggers(table, kind)`` to the DDL (it is not
part of ``kind_table``, whose output earlier migrations depend on).
"""

from __future__ import annotations

from collections.abc import Sequence

# A promoted column: (name, SQL type, expression over the row, whether it is indexed).
Generated = tuple[str, str, str, bool]


def kind_table(table: str, generated: Sequence[Generated] = (), *, publish: bool = True) -> str:
    """``CREATE TABLE`` for a kind, with its indexes and stamp trigger.

    ``generated`` are the columns promoted from the object (stored generated columns).
    ``publish`` adds the table to the ``qm_stream`` publication and lets ``qm_reporting`` read
    it; a migration that publishes it together with other tables passes ``False``.
    """
    promoted = "".join(
        f",\n  {col} {typ} GENERATED ALWAYS AS ({expr}) STORED" for col, typ, expr, _ in generated
    )
    ddl = f"""
CREATE TABLE {table} (
  uid uuid PRIMARY KEY,
  namespace text NOT NULL DEFAULT '',
  name text NOT NULL,
  generate_name text,
  labels jsonb NOT NULL DEFAULT '{{}}',
  annotations jsonb NOT NULL DEFAULT '{{}}',
  owner_references jsonb NOT NULL DEFAULT '[]',
  finalizers jsonb NOT NULL DEFAULT '[]',
  creation_timestamp timestamptz NOT NULL DEFAULT now(),
  deletion_timestamp timestamptz,
  deletion_grace_period_seconds integer,
  generation bigint NOT NULL DEFAULT 1,
  row_version bigint NOT NULL DEFAULT 0,
  spec jsonb NOT NULL DEFAULT '{{}}',
  status jsonb NOT NULL DEFAULT '{{}}'{promoted},
  CONSTRAINT {table}_namespace_name UNIQUE (namespace, name)
);
CREATE INDEX {table}_labels ON {table} USING gin (labels jsonb_path_ops);
CREATE INDEX {table}_owners ON {table} USING gin (owner_references jsonb_path_ops)
  WHERE owner_references <> '[]'::jsonb;
CREATE TRIGGER {table}_stamp BEFORE INSERT OR UPDATE ON {table}
  FOR EACH ROW EXECUTE FUNCTION qm_stamp_row();
"""
    ddl += "".join(
        f"CREATE INDEX {table}_{col} ON {table} ({col});\n"
        for col, _, _, indexed in generated
        if indexed
    )
    if publish:
        ddl += f"ALTER PUBLICATION qm_stream ADD TABLE {table};\n"
        ddl += f"GRANT SELECT ON {table} TO qm_reporting;\n"
    return ddl


def history_triggers(
    table: str,
    kind: str,
    *,
    key: str = "uid",
    rule: str = "none",
    dropped: Sequence[str] = (),
) -> str:
    """The change-history triggers of a state table (migration 0014 onwards, ADR 0052).

    A migration that adds a kind (or another table an operator would audit) appends this to
    its DDL. ``kind`` is the API kind ('' for an internal table), ``key`` the column that
    identifies a row across an update, ``rule`` the summarising rule (``none``, ``status``,
    ``lease``, ``heartbeat``, ``all``; see ``qm_history_churn``), ``dropped`` the columns the
    history never copies (digests of credentials). A row trigger records single writes; three
    statement triggers with transition tables record, set-based, the statements that set
    ``qm.contexts`` (batches of many writers); WHEN clauses pick which fire. ``ENABLE
    ALWAYS``, so that ``session_replication_role = replica`` does not silence them.

    From migration 0020 on, the migration then runs ``SELECT qm_history_native('<table>')``
    so that the row trigger is the C one where the server has it (ADR 0066).
    """
    args = f"'{key}', '{kind}', '{rule}', '{{{','.join(dropped)}}}'"
    fn = f"EXECUTE FUNCTION qm_history_record({args})"
    batch = f"EXECUTE FUNCTION qm_history_record_batch({args})"
    names = ("", "_ins", "_upd", "_del", "_truncate")
    # Each write fires the row trigger or the statement triggers, never both: the WHEN clauses
    # are checked without calling a function.
    single = "WHEN (coalesce(current_setting('qm.contexts', true), '') = '')"
    many = "WHEN (coalesce(current_setting('qm.contexts', true), '') <> '')"
    return f"""
CREATE TRIGGER {table}_history AFTER INSERT OR UPDATE OR DELETE ON {table}
  FOR EACH ROW {single} {fn};
CREATE TRIGGER {table}_history_ins AFTER INSERT ON {table}
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT {many} {batch};
CREATE TRIGGER {table}_history_upd AFTER UPDATE ON {table}
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT {many} {batch};
CREATE TRIGGER {table}_history_del AFTER DELETE ON {table}
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT {many} {batch};
CREATE TRIGGER {table}_history_truncate BEFORE TRUNCATE ON {table}
  FOR EACH STATEMENT {fn};
""" + "".join(f"ALTER TABLE {table} ENABLE ALWAYS TRIGGER {table}_history{n};\n" for n in names)
