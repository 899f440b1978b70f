"""Principals: service accounts, revocable tokens in the revision stream, groups in the audit.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02

* ``serviceaccounts``: the ServiceAccount kind's table, shaped like every kind's, in the
  ``qm_stream`` publication.
* ``qm_tokens`` keeps its columns (``username``, ``groups``, ``token_sha256``, ``description``,
  ``created_at``, ``expires_at``: the store looks a token up by digest there) and gains
  ``revoked_at``, ``created_by``, the owning service account (``sa_namespace``, ``sa_name``,
  ``sa_uid``, a foreign key so a token cannot be minted for an account being deleted) and the
  columns of a kind table. ``qm_tokens_object`` (BEFORE INSERT OR UPDATE) writes the row's
  object image from its columns (name: the first 12 hex digits of the digest, the token's
  public id; spec: owner, groups, description, expiry; status: ``revokedAt``; never the
  digest), so any write to a token, by the API or by hand, reaches the revision stream as a
  change of the internal kind ``Token``; each API server drops what it cached of that token
  when it sees the change (``app.api.auth``). The replica identity is the ``uid`` index, so a
  deleted row's change names its uid too.
* ``serviceaccounts_revoke`` (BEFORE DELETE): deleting a service account revokes its tokens in
  the same transaction (and so through the same stream).
* ``qm_audit.groups``: the groups of the principal that made the write. The writes pass one
  text for the actor, ``name`` or ``name<US>group<US>group...`` (US: U+001F, which names and
  groups never contain); ``qm_actor_name`` and ``qm_actor_groups`` split it inside the audit
  insert, so recording the groups costs the write path no parameter and no round trip.
"""

from __future__ import annotations

from alembic import op

from migrations.kind_table import kind_table

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

SA = "serviceaccounts"

# The table joins the publication with qm_tokens, at the end of UPGRADE.
UPGRADE = kind_table(SA, publish=False) + rf"""
ALTER TABLE qm_tokens
  ADD COLUMN revoked_at timestamptz,
  ADD COLUMN created_by text NOT NULL DEFAULT '',
  ADD COLUMN sa_namespace text,
  ADD COLUMN sa_name text,
  ADD COLUMN sa_uid uuid REFERENCES {SA} (uid) ON DELETE SET NULL,
  ADD COLUMN uid uuid NOT NULL DEFAULT gen_random_uuid(),
  ADD COLUMN namespace text NOT NULL DEFAULT '',
  ADD COLUMN name text NOT NULL DEFAULT '',
  ADD COLUMN generate_name text,
  ADD COLUMN labels jsonb NOT NULL DEFAULT '{{}}',
  ADD COLUMN annotations jsonb NOT NULL DEFAULT '{{}}',
  ADD COLUMN owner_references jsonb NOT NULL DEFAULT '[]',
  ADD COLUMN finalizers jsonb NOT NULL DEFAULT '[]',
  ADD COLUMN creation_timestamp timestamptz NOT NULL DEFAULT now(),
  ADD COLUMN deletion_timestamp timestamptz,
  ADD COLUMN deletion_grace_period_seconds integer,
  ADD COLUMN generation bigint NOT NULL DEFAULT 1,
  ADD COLUMN row_version bigint NOT NULL DEFAULT 0,
  ADD COLUMN spec jsonb NOT NULL DEFAULT '{{}}',
  ADD COLUMN status jsonb NOT NULL DEFAULT '{{}}',
  ADD CONSTRAINT qm_tokens_description_length CHECK (length(description) <= 1024),
  ADD CONSTRAINT qm_tokens_owner CHECK (
    (sa_name IS NULL) = (sa_namespace IS NULL)
    AND username !~ '[[:cntrl:]]' AND array_to_string(groups, '') !~ '[[:cntrl:]]');
CREATE UNIQUE INDEX qm_tokens_uid ON qm_tokens (uid);
ALTER TABLE qm_tokens REPLICA IDENTITY USING INDEX qm_tokens_uid;
CREATE INDEX qm_tokens_sa_uid ON qm_tokens (sa_uid) WHERE sa_uid IS NOT NULL;
CREATE INDEX qm_tokens_username ON qm_tokens (username);

CREATE FUNCTION qm_rfc3339(t timestamptz) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
$$;

CREATE FUNCTION qm_token_object() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.namespace := '';
  NEW.name := substr(NEW.token_sha256, 1, 12);
  NEW.creation_timestamp := NEW.created_at;
  NEW.spec := jsonb_strip_nulls(jsonb_build_object(
    'user', NEW.username,
    'groups', to_jsonb(NEW.groups),
    'description', nullif(NEW.description, ''),
    'expirationTimestamp', qm_rfc3339(NEW.expires_at),
    'createdBy', nullif(NEW.created_by, ''),
    'serviceAccount', CASE WHEN NEW.sa_name IS NOT NULL THEN jsonb_strip_nulls(
      jsonb_build_object('namespace', NEW.sa_namespace, 'name', NEW.sa_name,
                         'uid', NEW.sa_uid)) END));
  NEW.status := jsonb_strip_nulls(jsonb_build_object('revokedAt', qm_rfc3339(NEW.revoked_at)));
  RETURN NEW;
END
$$;
CREATE TRIGGER qm_tokens_object BEFORE INSERT OR UPDATE ON qm_tokens
  FOR EACH ROW EXECUTE FUNCTION qm_token_object();
CREATE TRIGGER qm_tokens_stamp BEFORE INSERT OR UPDATE ON qm_tokens
  FOR EACH ROW EXECUTE FUNCTION qm_stamp_row();
UPDATE qm_tokens SET description = description;
ALTER TABLE qm_tokens ADD CONSTRAINT qm_tokens_namespace_name UNIQUE (namespace, name);

CREATE FUNCTION qm_revoke_service_account_tokens() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE qm_tokens SET revoked_at = now() WHERE sa_uid = OLD.uid AND revoked_at IS NULL;
  RETURN OLD;
END
$$;
CREATE TRIGGER {SA}_revoke BEFORE DELETE ON {SA}
  FOR EACH ROW EXECUTE FUNCTION qm_revoke_service_account_tokens();

ALTER TABLE qm_audit ADD COLUMN groups text[] NOT NULL DEFAULT '{{}}';
CREATE FUNCTION qm_actor_name(actor text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT split_part(actor, E'\x1f', 1) $$;
CREATE FUNCTION qm_actor_groups(actor text) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT coalesce((string_to_array(actor, E'\x1f'))[2:], '{{}}')
$$;

ALTER PUBLICATION qm_stream ADD TABLE {SA}, qm_tokens;
GRANT SELECT ON {SA} TO qm_reporting;
"""

DOWNGRADE = f"""
ALTER PUBLICATION qm_stream DROP TABLE {SA}, qm_tokens;
DROP FUNCTION IF EXISTS qm_actor_groups, qm_actor_name;
ALTER TABLE qm_audit DROP COLUMN groups;
DROP TRIGGER IF EXISTS qm_tokens_object ON qm_tokens;
DROP TRIGGER IF EXISTS qm_tokens_stamp ON qm_tokens;
ALTER TABLE qm_tokens REPLICA IDENTITY DEFAULT;
DROP INDEX IF EXISTS qm_tokens_username;
ALTER TABLE qm_tokens DROP CONSTRAINT IF EXISTS qm_tokens_namespace_name,
  DROP CONSTRAINT IF EXISTS qm_tokens_description_length,
  DROP CONSTRAINT IF EXISTS qm_tokens_owner,
  DROP COLUMN revoked_at, DROP COLUMN created_by, DROP COLUMN sa_namespace,
  DROP COLUMN sa_name, DROP COLUMN sa_uid, DROP COLUMN uid, DROP COLUMN namespace,
  DROP COLUMN name, DROP COLUMN generate_name, DROP COLUMN labels, DROP COLUMN annotations,
  DROP COLUMN owner_references, DROP COLUMN finalizers, DROP COLUMN creation_timestamp,
  DROP COLUMN deletion_timestamp, DROP COLUMN deletion_grace_period_seconds,
  DROP COLUMN generation, DROP COLUMN row_version, DROP COLUMN spec, DROP COLUMN status;
DROP FUNCTION IF EXISTS qm_token_object, qm_rfc3339;
DROP TABLE IF EXISTS {SA};
DROP FUNCTION IF EXISTS qm_revoke_service_account_tokens;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
