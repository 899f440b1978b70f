/*
 * qm_history: the change history's row trigger, in C (ADR 0066).
 *
 * Why this exists: the history records every write of a state table in the writing
 * transaction (ADR 0052). Written in PL/pgSQL, the trigger spent most of its time building the
 * row images: every expression PL/pgSQL evaluates is set up again in each transaction, and
 * the update's changed-columns diff ran as a query of its own. This function does the same
 * work in C and hands the one INSERT to a plan it prepares once per connection.
 *
 * It is a drop-in for qm_history_record(), with the same trigger arguments (key column, kind,
 * summarising rule, columns never copied) and the same rows:
 *   - the image of a row is to_jsonb(row) less the columns never copied;
 *   - an update keeps, before and after, only the columns whose values are distinct
 *     (compared as the jsonb values PL/pgSQL compared);
 *   - the summarising rule counts a write in qm_history_tally instead of storing it;
 *   - the writer's context (qm.context) is read and parsed by the same SQL as before, inside
 *     the prepared INSERT.
 * It serves AFTER ... FOR EACH ROW on INSERT, UPDATE and DELETE of any state table but
 * secrets (whose images need a digest of the sealed value, left to qm_history_record()), and
 * is installed only by migration 0020 when the extension is available.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "utils/jsonfuncs.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "nodes/miscnodes.h"
#include "utils/lsyscache.h"
#include "utils/numeric.h"
#include "utils/rel.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(qm_history_record_native);

/*
 * The statements, planned once per connection. The function runs as its owner, a superuser,
 * with the writer's search_path: every name in them is qualified (operators and types too),
 * so nothing a writer creates (a pg_temp domain named uuid, an operator ->> in a schema of its
 * own) can stand in for the built-ins and run as the owner.
 */
#define GET "OPERATOR(pg_catalog.->>)"
static const char *insert_sql =
	"INSERT INTO public.qm_history (xid, table_name, kind, namespace, name, uid, op, before,"
	" after, db_role, application_name, principal, groups, request_id, client_addr, user_agent,"
	" reason, verb, subresource)"
	" VALUES (pg_catalog.pg_current_xact_id(), $1, $2,"
	" coalesce($7 " GET " 'namespace', ''::pg_catalog.text),"
	" coalesce($7 " GET " 'name', $7 " GET " $3),"
	" ($7 " GET " 'uid')::pg_catalog.uuid, $4, $5, $6, session_user,"
	" pg_catalog.current_setting('application_name'), $8, $9, $10, $11, $12, $13, $14, $15)";

static const char *tally_sql =
	"INSERT INTO public.qm_history_tally AS y (hour, table_name, namespace, backend, kind, count)"
	" VALUES (pg_catalog.date_trunc('hour', pg_catalog.statement_timestamp(), 'UTC'), $1,"
	" coalesce($2 " GET " 'namespace', ''::pg_catalog.text), pg_catalog.pg_backend_pid(), $3, 1)"
	" ON CONFLICT (hour, table_name, namespace, backend)"
	" DO UPDATE SET count = y.count OPERATOR(pg_catalog.+) 1";

static SPIPlanPtr insert_plan = NULL;
static SPIPlanPtr tally_plan = NULL;

static SPIPlanPtr
kept_plan(SPIPlanPtr *slot, const char *sql, int nargs, Oid *types)
{
	if (*slot == NULL)
	{
		SPIPlanPtr	plan = SPI_prepare_cursor(sql, nargs, types, CURSOR_OPT_GENERIC_PLAN);

		if (plan == NULL)
			elog(ERROR, "qm_history: SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
		if (SPI_keepplan(plan) != 0)
			elog(ERROR, "qm_history: SPI_keepplan failed");
		*slot = plan;
	}
	return *slot;
}

/* to_jsonb(row), less the columns never copied. */
static Jsonb *
row_image(HeapTuple tuple, TupleDesc desc, Datum dropped, bool has_dropped)
{
	Datum		image = datum_to_jsonb(heap_copy_tuple_as_datum(tuple, desc),
									   JSONTYPE_COMPOSITE, InvalidOid);

	if (has_dropped)
		image = DirectFunctionCall2(jsonb_delete_array, image, dropped);
	return DatumGetJsonbP(image);
}

/* The jsonb value to_jsonb gives one column's value (never NULL here). */
static Datum
column_jsonb(Datum value, Oid type)
{
	JsonTypeCategory category;
	Oid			outfunc;

	json_categorize_type(type, true, &category, &outfunc);
	return datum_to_jsonb(value, category, outfunc);
}

static bool
name_in(const char *name, const char *const *names)
{
	for (; *names != NULL; names++)
		if (strcmp(name, *names) == 0)
			return true;
	return false;
}

/* A jsonb object less one key (any other jsonb as it is). */
static Datum
without_key(Datum object, const char *key)
{
	return DirectFunctionCall2(jsonb_delete, object, CStringGetTextDatum(key));
}


/* The context's fields, in the INSERT's order from $8: each a string (at most 1024
 * characters) or NULL, but groups, a text[] or NULL. */
static const char *const context_fields[] = {
	"principal", "groups", "request_id", "client", "user_agent", "reason", "verb", "subresource"
};
#define NFIELDS 8

static Datum
clipped_text(const char *s, int len)
{
	return PointerGetDatum(cstring_to_text_with_len(s, pg_mbcharcliplen(s, len, 1024)));
}

/* jsonb_array_elements_text of an array: strings as they are, JSON null as NULL, anything
 * else as its JSON text. */
static Datum
groups_array(JsonbContainer *array)
{
	JsonbIterator *it = JsonbIteratorInit(array);
	JsonbValue	v;
	JsonbIteratorToken tok;
	int			n = JsonContainerSize(array);
	Datum	   *elems = palloc(sizeof(Datum) * Max(n, 1));
	bool	   *isnull = palloc(sizeof(bool) * Max(n, 1));
	int			i = 0;
	int			dims[1];
	int			lbs[1] = {1};

	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok != WJB_ELEM)
			continue;
		isnull[i] = false;
		if (v.type == jbvNull)
		{
			isnull[i] = true;
			elems[i] = (Datum) 0;
		}
		else if (v.type == jbvString)
			elems[i] = PointerGetDatum(cstring_to_text_with_len(v.val.string.val,
																v.val.string.len));
		else if (v.type == jbvNumeric)
			elems[i] = CStringGetTextDatum(DatumGetCString(DirectFunctionCall1(numeric_out,
																			   NumericGetDatum(v.val.numeric))));
		else if (v.type == jbvBool)
			elems[i] = CStringGetTextDatum(v.val.boolean ? "true" : "false");
		else
			elems[i] = CStringGetTextDatum(JsonbToCString(NULL, v.val.binary.data,
														  v.val.binary.len));
		i++;
	}
	dims[0] = i;
	return PointerGetDatum(construct_md_array(elems, isnull, 1, dims, lbs, TEXTOID, -1, false,
											  TYPALIGN_INT));
}

/* The writer's context (qm.context) as qm_history_record() reads it: a JSON object's string
 * fields, or, for a value that is not a JSON object, only a reason saying so. */
static void
context_values(const char *text, Datum *values, char *nulls)
{
	ErrorSaveContext escontext = {T_ErrorSaveContext};
	Datum		parsed;

	for (int i = 0; i < NFIELDS; i++)
	{
		values[i] = (Datum) 0;
		nulls[i] = 'n';
	}
	if (text == NULL || text[0] == '\0')
		return;
	if (!DirectInputFunctionCallSafe(jsonb_in, unconstify(char *, text), InvalidOid, -1,
									 (Node *) &escontext, &parsed)
		|| !JB_ROOT_IS_OBJECT(DatumGetJsonbP(parsed)))
	{
		StringInfoData reason;

		initStringInfo(&reason);
		appendStringInfoString(&reason, "unreadable qm.context: ");
		appendBinaryStringInfo(&reason, text, pg_mbcharcliplen(text, strlen(text), 200));
		values[5] = CStringGetTextDatum(reason.data);
		nulls[5] = ' ';
		return;
	}
	for (int i = 0; i < NFIELDS; i++)
	{
		JsonbValue *v = getKeyJsonValueFromContainer(&DatumGetJsonbP(parsed)->root,
													 context_fields[i],
													 strlen(context_fields[i]), NULL);

		if (v == NULL)
			continue;
		if (i == 1)
		{
			if (v->type == jbvBinary && JsonContainerIsArray(v->val.binary.data))
			{
				values[i] = groups_array(v->val.binary.data);
				nulls[i] = ' ';
			}
		}
		else if (v->type == jbvString)
		{
			values[i] = clipped_text(v->val.string.val, v->val.string.len);
			nulls[i] = ' ';
		}
	}
}

Datum
qm_history_record_native(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	Trigger    *trigger;
	TupleDesc	desc;
	HeapTuple	row;
	const char *table;
	const char *key;
	const char *kind;
	const char *rule;
	const char *contexts;
	const char *context;
	const char *op;
	Datum		dropped = (Datum) 0;
	bool		has_dropped;
	char	  **dropped_names = NULL;
	Jsonb	   *image;
	Datum		before = (Datum) 0;
	Datum		after = (Datum) 0;
	bool		churn = false;
	Oid			insert_types[15] = {TEXTOID, TEXTOID, TEXTOID, TEXTOID, JSONBOID, JSONBOID,
		JSONBOID, TEXTOID, TEXTARRAYOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID};
	Oid			tally_types[3] = {TEXTOID, JSONBOID, TEXTOID};
	Datum		values[15];
	char		nulls[15];
	int			rc;

	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "qm_history_record_native: not called as a trigger");
	if (!TRIGGER_FIRED_AFTER(trigdata->tg_event) || !TRIGGER_FIRED_FOR_ROW(trigdata->tg_event)
		|| TRIGGER_FIRED_BY_TRUNCATE(trigdata->tg_event))
		elog(ERROR, "qm_history_record_native: fires AFTER ... FOR EACH ROW only");
	trigger = trigdata->tg_trigger;
	if (trigger->tgnargs != 4)
		elog(ERROR, "qm_history_record_native: takes 4 arguments, got %d", trigger->tgnargs);
	table = SPI_getrelname(trigdata->tg_relation);
	/* The history names a table by its name alone: only the state tables, in public. */
	if (strcmp(SPI_getnspname(trigdata->tg_relation), "public") != 0)
		elog(ERROR, "qm_history_record_native: records tables of schema public only");
	if (strcmp(table, "secrets") == 0)
		elog(ERROR, "qm_history_record_native: secrets are recorded by qm_history_record()");

	/* A statement carrying many writers' contexts is recorded by the statement triggers. */
	contexts = GetConfigOption("qm.contexts", true, false);
	if (contexts != NULL && contexts[0] != '\0')
		return PointerGetDatum(NULL);

	key = trigger->tgargs[0];
	kind = trigger->tgargs[1];
	rule = trigger->tgargs[2];
	has_dropped = strcmp(trigger->tgargs[3], "{}") != 0;
	if (has_dropped)
	{
		Oid			input;
		Oid			ioparam;
		Datum	   *elems;
		int			n;

		getTypeInputInfo(TEXTARRAYOID, &input, &ioparam);
		dropped = OidInputFunctionCall(input, trigger->tgargs[3], ioparam, -1);
		deconstruct_array_builtin(DatumGetArrayTypeP(dropped), TEXTOID, &elems, NULL, &n);
		dropped_names = palloc0(sizeof(char *) * (n + 1));
		for (int i = 0; i < n; i++)
			dropped_names[i] = TextDatumGetCString(elems[i]);
	}
	desc = trigdata->tg_relation->rd_att;

	if (TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
	{
		op = "insert";
		row = trigdata->tg_trigtuple;
		image = row_image(row, desc, dropped, has_dropped);
		after = JsonbPGetDatum(image);
		churn = strcmp(rule, "all") == 0;
	}
	else if (TRIGGER_FIRED_BY_DELETE(trigdata->tg_event))
	{
		op = "delete";
		row = trigdata->tg_trigtuple;
		image = row_image(row, desc, dropped, has_dropped);
		before = JsonbPGetDatum(image);
		churn = strcmp(rule, "all") == 0;
	}
	else
	{
		HeapTuple	old = trigdata->tg_trigtuple;
		Datum	   *same = palloc(sizeof(Datum) * desc->natts);
		int			nsame = 0;
		bool		only_status = true;
		bool		only_lease = true;
		bool		only_heartbeat = true;
		bool		spec_changed = false;
		Datum		old_spec = (Datum) 0;
		Datum		new_spec = (Datum) 0;
		Datum		old_image;
		static const char *const status_cols[] = {"status", "row_version", NULL};
		static const char *const lease_cols[] = {"spec", "generation", "row_version", NULL};
		static const char *const heartbeat_cols[] = {"renewed_at", NULL};

		op = "update";
		row = trigdata->tg_newtuple;
		for (int i = 0; i < desc->natts; i++)
		{
			Form_pg_attribute att = TupleDescAttr(desc, i);
			const char *name = NameStr(att->attname);
			bool		old_null;
			bool		new_null;
			Datum		ov;
			Datum		nv;
			bool		distinct;

			if (att->attisdropped)
				continue;
			ov = heap_getattr(old, i + 1, desc, &old_null);
			nv = heap_getattr(row, i + 1, desc, &new_null);
			if (old_null || new_null)
				distinct = old_null != new_null;
			else if (datum_image_eq(ov, nv, att->attbyval, att->attlen))
				distinct = false;
			else
				distinct = !DatumGetBool(DirectFunctionCall2(jsonb_eq,
															 column_jsonb(ov, att->atttypid),
															 column_jsonb(nv, att->atttypid)));
			if (!distinct)
			{
				same[nsame++] = CStringGetTextDatum(name);
				continue;
			}
			if (has_dropped && name_in(name, (const char *const *) dropped_names))
				continue;
			only_status = only_status && name_in(name, status_cols);
			only_lease = only_lease && name_in(name, lease_cols);
			only_heartbeat = only_heartbeat && name_in(name, heartbeat_cols);
			if (strcmp(name, "spec") == 0)
			{
				spec_changed = true;
				old_spec = column_jsonb(ov, att->atttypid);
				new_spec = column_jsonb(nv, att->atttypid);
			}
		}
		image = row_image(row, desc, dropped, has_dropped);
		old_image = JsonbPGetDatum(row_image(old, desc, dropped, has_dropped));
		if (nsame > 0)
		{
			Datum		keys = PointerGetDatum(construct_array_builtin(same, nsame, TEXTOID));

			before = DirectFunctionCall2(jsonb_delete_array, old_image, keys);
			after = DirectFunctionCall2(jsonb_delete_array, JsonbPGetDatum(image), keys);
		}
		else
		{
			before = old_image;
			after = JsonbPGetDatum(image);
		}
		if (strcmp(rule, "all") == 0)
			churn = true;
		else if (strcmp(rule, "status") == 0)
			churn = only_status;
		else if (strcmp(rule, "heartbeat") == 0)
			churn = only_heartbeat;
		else if (strcmp(rule, "lease") == 0)
			churn = only_lease
				&& (!spec_changed
					|| DatumGetBool(DirectFunctionCall2(jsonb_eq,
														without_key(old_spec, "renewTime"),
														without_key(new_spec, "renewTime"))));
	}

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "qm_history: SPI_connect failed");
	if (churn)
	{
		values[0] = CStringGetTextDatum(table);
		values[1] = JsonbPGetDatum(image);
		values[2] = kind[0] != '\0' ? CStringGetTextDatum(kind) : (Datum) 0;
		nulls[0] = ' ';
		nulls[1] = ' ';
		nulls[2] = kind[0] != '\0' ? ' ' : 'n';
		rc = SPI_execute_plan(kept_plan(&tally_plan, tally_sql, 3, tally_types), values, nulls,
							  false, 0);
	}
	else
	{
		context = GetConfigOption("qm.context", true, false);
		values[0] = CStringGetTextDatum(table);
		values[1] = kind[0] != '\0' ? CStringGetTextDatum(kind) : (Datum) 0;
		values[2] = CStringGetTextDatum(key);
		values[3] = CStringGetTextDatum(op);
		values[4] = before;
		values[5] = after;
		values[6] = JsonbPGetDatum(image);
		memset(nulls, ' ', sizeof(nulls));
		context_values(context, values + 7, nulls + 7);
		if (kind[0] == '\0')
			nulls[1] = 'n';
		if (before == (Datum) 0)
			nulls[4] = 'n';
		if (after == (Datum) 0)
			nulls[5] = 'n';
		rc = SPI_execute_plan(kept_plan(&insert_plan, insert_sql, 15, insert_types), values,
							  nulls, false, 0);
	}
	if (rc != SPI_OK_INSERT)
		elog(ERROR, "qm_history: recording failed: %s", SPI_result_code_string(rc));
	SPI_finish();
	return PointerGetDatum(NULL);
}
