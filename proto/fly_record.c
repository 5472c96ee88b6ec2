/*
 * fly_record.c -- the export record validator (fly_record.h), expanded
 * from the table generated from schemas/common.json (fly_record.def).
 *
 * Owns: nothing.  Thread: any.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fly_abi.h"
#include "fly_key.h"
#include "fly_msg.h"
#include "fly_record.h"

struct field {
	const char *name;
	enum fly_record_kind kind;
	double min; /* length, item count or value */
	double max; /* -1: none */
};

static const struct field fields[] = {
#define FLY_RECORD_FIELD(name, kind, min, max) { #name, kind, min, max },
#include "fly_record.def"
#undef FLY_RECORD_FIELD
};
#define NFIELDS (sizeof(fields) / sizeof(fields[0]))

/* The schema's limits fit the C types that hold a record's values. */
enum {
#define FLY_RECORD_FIELD(name, kind, min, max) FLY_RECORD_MAX_##name = max,
#include "fly_record.def"
#undef FLY_RECORD_FIELD
};
_Static_assert(FLY_RECORD_MAX_key < FLY_KEY_MAX, "key fits FLY_KEY_MAX");
_Static_assert(FLY_RECORD_MAX_variant < FLY_VARIANT_MAX,
	       "variant fits FLY_VARIANT_MAX");
_Static_assert(FLY_RECORD_MAX_params <= FLY_PARAMS_MAX,
	       "params fit FLY_PARAMS_MAX");

static int is_int(const cJSON *v)
{
	return cJSON_IsNumber(v) && isfinite(v->valuedouble) &&
	       v->valuedouble == floor(v->valuedouble) &&
	       fabs(v->valuedouble) <= FLY_RECORD_INT_MAX;
}

/* A string of min..max bytes, valid UTF-8: cJSON (flytune-ctl's file
 * parser) passes invalid bytes through, the daemon's strict parser
 * refuses the whole request (issue 21: a file the CLI had checked then
 * failed mid-import with a protocol error). */
int fly_record_str_ok(const cJSON *v, double min, double max)
{
	size_t n = cJSON_IsString(v) ? strlen(v->valuestring) : 0;

	return cJSON_IsString(v) && n >= min && (max < 0 || n <= max) &&
	       fly__utf8_valid(v->valuestring, n);
}

int fly_record_parse(const char *p, size_t n, cJSON **out)
{
	return fly_msg_parse((const uint8_t *)p, n, out) == 0 ? 0 : -1;
}

/* Whether @p v is a valid value of field @p f. */
static int field_ok(const struct field *f, const cJSON *v)
{
	const cJSON *it;
	struct fly_problem p;

	switch (f->kind) {
	case FLY_RF_KEY:
		return fly_record_str_ok(v, f->min, f->max) &&
		       fly_key_parse(v->valuestring, strlen(v->valuestring),
				     &p) == 0;
	case FLY_RF_STRING:
		return fly_record_str_ok(v, f->min, f->max);
	case FLY_RF_INTEGERS:
		if (!cJSON_IsArray(v) ||
		    (f->max >= 0 && cJSON_GetArraySize(v) > f->max))
			return 0;
		cJSON_ArrayForEach(it, v) if (!is_int(it)) return 0;
		return 1;
	case FLY_RF_NUMBER:
		return cJSON_IsNumber(v) && isfinite(v->valuedouble) &&
		       v->valuedouble >= f->min;
	case FLY_RF_NUMBER_GT:
		return cJSON_IsNumber(v) && isfinite(v->valuedouble) &&
		       v->valuedouble > f->min;
	case FLY_RF_INTEGER:
		return is_int(v) && v->valuedouble >= f->min;
	}
	return 0;
}

/* What field @p f expects, for a message. */
static void expected(const struct field *f, char *why, size_t cap)
{
	switch (f->kind) {
	case FLY_RF_KEY:
		snprintf(why, cap, "%s: expected a canonical shape key",
			 f->name);
		break;
	case FLY_RF_STRING:
		snprintf(why, cap, "%s: expected a UTF-8 string of %.0f..%.0f bytes",
			 f->name, f->min, f->max);
		break;
	case FLY_RF_INTEGERS:
		snprintf(why, cap, "%s: expected an array of at most %.0f "
			 "integers", f->name, f->max);
		break;
	case FLY_RF_NUMBER:
		snprintf(why, cap, "%s: expected a number >= %g", f->name,
			 f->min);
		break;
	case FLY_RF_NUMBER_GT:
		snprintf(why, cap, "%s: expected a number > %g", f->name,
			 f->min);
		break;
	case FLY_RF_INTEGER:
		snprintf(why, cap, "%s: expected an integer >= %g", f->name,
			 f->min);
		break;
	}
}

int fly_record_check(const cJSON *r, char *why, size_t cap)
{
	const cJSON *it;
	size_t i;

	if (!cJSON_IsObject(r)) {
		snprintf(why, cap, "not an object");
		return -1;
	}
	cJSON_ArrayForEach(it, r) {
		for (i = 0; i < NFIELDS; i++)
			if (strcmp(fields[i].name, it->string) == 0)
				break;
		if (i == NFIELDS) {
			snprintf(why, cap, "unknown field \"%s\"", it->string);
			return -1;
		}
	}
	for (i = 0; i < NFIELDS; i++) {
		it = cJSON_GetObjectItemCaseSensitive(r, fields[i].name);
		if (it == NULL) {
			snprintf(why, cap, "%s: missing", fields[i].name);
			return -1;
		}
		if (!field_ok(&fields[i], it)) {
			expected(&fields[i], why, cap);
			return -1;
		}
	}
	return 0;
}
