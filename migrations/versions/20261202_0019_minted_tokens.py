"""A token a principal mints for itself names the token that minted it (ADR 0065).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-02

* ``qm_tokens.minted_by``: the id (record name) of the token whose holder minted this one for
  itself under the self-service rule, NULL for every other token. Revoking a token revokes
  the tokens it minted, and theirs, so a leaked token's holder cannot outlast its revocation
  with a token of their own. Nullable without a default: no rewrite, one brief ACCESS
  EXCLUSIVE lock under the migration's ``lock_timeout``.
* ``qm_token_object()`` shows it in the token's ``spec.mintedBy``.

Expand-only: the previous release never sets or reads the column (its tokens have none), and
the function only adds a field to ``spec``.
"""

from __future__ import annotations

from alembic import op

from migrations.online import serves, unserve

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

PREVIOUS_RELEASE = "0013"


def _object_function(minted_by: bool) -> str:
    field = "\n    'mintedBy', NEW.minted_by," if minted_by else ""
    return f"""
CREATE OR REPLACE FUNCTION qm_token_object() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.namespace := '';
  NEW.name := substr(NEW.token_sha256, 1, 12);
  NEW.creation_timestamp := NEW.created_at;
  NEW.spec := jsonb_strip_nulls(jsonb_build_object(
    'user', NEW.username,
    'groups', to_jsonb(NEW.groups),
    'description', nullif(NEW.description, ''),
    'expirationTimestamp', qm_rfc3339(NEW.expires_at),
    'createdBy', nullif(NEW.created_by, ''),{field}
    'serviceAccount', CASE WHEN NEW.sa_name IS NOT NULL THEN jsonb_strip_nulls(
      jsonb_build_object('namespace', NEW.sa_namespace, 'name', NEW.sa_name,
                         'uid', NEW.sa_uid)) END));
  NEW.status := jsonb_strip_nulls(jsonb_build_object('revokedAt', qm_rfc3339(NEW.revoked_at)));
  RETURN NEW;
END
$$;
"""


def upgrade() -> None:
    op.execute("ALTER TABLE qm_tokens ADD COLUMN IF NOT EXISTS minted_by text")
    op.execute(
        "COMMENT ON COLUMN qm_tokens.minted_by IS 'The token (record name) whose holder minted"
        " this one for itself; revoking it revokes this one'"
    )
    op.execute(_object_function(minted_by=True))
    serves("0019", PREVIOUS_RELEASE, "self-minted tokens name the token that minted them")


def downgrade() -> None:
    unserve("0019")
    op.execute(_object_function(minted_by=False))
    op.execute("ALTER TABLE qm_tokens DROP COLUMN IF EXISTS minted_by")
