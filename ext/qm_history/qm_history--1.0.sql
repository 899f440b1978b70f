-- The change history's row trigger in C (ADR 0066); migration 0020 points the triggers at it.
\echo Use "CREATE EXTENSION qm_history" to load this file. \quit

CREATE FUNCTION qm_history_record_native() RETURNS trigger
  AS 'MODULE_PATHNAME', 'qm_history_record_native'
  LANGUAGE C SECURITY DEFINER;
REVOKE EXECUTE ON FUNCTION qm_history_record_native() FROM PUBLIC;
