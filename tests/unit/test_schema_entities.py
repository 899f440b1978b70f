"""The recorded functions, triggers, views and policies rebuild as alembic-utils entities,
one per record, and render the DDL that would recreate them."""

from __future__ import annotations

from app.store import schema_objects
from app.store.drift import declared_entities
from app.store.schema import SCHEMAS


def test_one_entity_per_recorded_object() -> None:
    entities = declared_entities()
    recorded = (len(schema_objects.FUNCTIONS) + len(schema_objects.TRIGGERS)
                + len(schema_objects.VIEWS) + len(schema_objects.POLICIES))  # fmt: skip
    assert len(entities) == recorded
    assert len({e.identity for e in entities}) == recorded
    assert {e.schema for e in entities} <= set(SCHEMAS)


def test_entities_render_their_ddl() -> None:
    by_identity = {e.identity: e for e in declared_entities()}
    stamp = by_identity["PGTrigger: public.pods_stamp False public.pods"]
    ddl = str(stamp.to_sql_statement_create())
    assert ddl.startswith('CREATE TRIGGER "pods_stamp" BEFORE INSERT OR UPDATE ON public.pods')
    qm_int = by_identity["PGFunction: public.qm_int(v text)"]
    assert "CREATE FUNCTION" in str(qm_int.to_sql_statement_create())
    assert any(i.startswith("PGView: reporting.") for i in by_identity)
