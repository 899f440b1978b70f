"""Node credentials: bootstrap tokens and per-node credentials.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02

* ``qm_bootstrap_tokens``: the one-time tokens an agent joins with (``<id>.<secret>``, as
  Kubernetes' bootstrap tokens). ``token_id`` is public (it names the token in listings and
  audit); only the secret's SHA-256 is kept. ``uses_left`` counts down in the join's
  transaction (``UPDATE ... WHERE uses_left > 0 RETURNING``), so two agents racing for the last
  use cannot both win; ``node_name``, when set, is the only node the token may join as.
  A spent or expired row stays until ``qm_purge_bootstrap_tokens()`` removes it (an hour
  later), so a listing still shows who used it.
* ``qm_node_credentials``: which token a join minted, for which node and with which bootstrap
  token (the credential itself is a row of ``qm_tokens``, user ``system:node:<name>``, group
  ``system:nodes``: one authentication path for every principal).
* ``nodes_revoke_credentials`` (AFTER DELETE, and AFTER UPDATE when ``deletion_timestamp`` is
  first set): deleting a Node revokes its credentials, every unrevoked token of user
  ``system:node:<name>`` in group ``system:nodes``, in the same transaction and so through the
  revision stream, as deleting a service account revokes its tokens (0009). Revoking when the
  deletion is requested, not only when the row goes, keeps a finalizer (which a node may put on
  its own Node) from holding the credential open.
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

TABLES = r"""
CREATE TABLE qm_bootstrap_tokens (
  token_id text PRIMARY KEY CHECK (token_id ~ '^[a-z0-9]{6}$'),
  secret_sha256 text NOT NULL,
  node_name text,
  uses_left integer NOT NULL DEFAULT 1 CHECK (uses_left >= 0),
  description text NOT NULL DEFAULT '',
  created_by text NOT NULL DEFAULT '',
  created_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL,
  last_used_at timestamptz
);
COMMENT ON TABLE qm_bootstrap_tokens IS
  'One-time tokens node agents join with; only the secret''s SHA-256 is kept';

CREATE TABLE qm_node_credentials (
  id bigserial PRIMARY KEY,
  node_name text NOT NULL,
  token_sha256 text NOT NULL UNIQUE,
  bootstrap_token_id text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX qm_node_credentials_node ON qm_node_credentials (node_name);
COMMENT ON TABLE qm_node_credentials IS
  'Which node credential (a qm_tokens row) each join minted, with which bootstrap token';

CREATE FUNCTION qm_purge_bootstrap_tokens() RETURNS integer
LANGUAGE sql AS $$
  WITH gone AS (
    DELETE FROM qm_bootstrap_tokens
    WHERE (uses_left = 0 OR expires_at < now())
      AND coalesce(last_used_at, expires_at) < now() - interval '1 hour'
    RETURNING 1
  )
  SELECT count(*)::integer FROM gone
$$;

CREATE FUNCTION qm_revoke_node_credentials() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE qm_tokens SET revoked_at = now()
  WHERE username = 'system:node:' || OLD.name AND 'system:nodes' = ANY(groups)
    AND revoked_at IS NULL;
  RETURN NULL;
END
$$;
CREATE TRIGGER nodes_revoke_credentials AFTER DELETE ON nodes
  FOR EACH ROW EXECUTE FUNCTION qm_revoke_node_credentials();
CREATE TRIGGER nodes_revoke_credentials_on_deletion AFTER UPDATE OF deletion_timestamp ON nodes
  FOR EACH ROW WHEN (OLD.deletion_timestamp IS NULL AND NEW.deletion_timestamp IS NOT NULL)
  EXECUTE FUNCTION qm_revoke_node_credentials();
"""


def upgrade() -> None:
    op.execute(TABLES)
    op.execute("GRANT SELECT ON qm_node_credentials TO qm_reporting")


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS nodes_revoke_credentials_on_deletion ON nodes")
    op.execute("DROP TRIGGER IF EXISTS nodes_revoke_credentials ON nodes")
    op.execute("DROP FUNCTION IF EXISTS qm_revoke_node_credentials()")
    op.execute("DROP FUNCTION IF EXISTS qm_purge_bootstrap_tokens()")
    op.execute("DROP TABLE IF EXISTS qm_node_credentials")
    op.execute("DROP TABLE IF EXISTS qm_bootstrap_tokens")
