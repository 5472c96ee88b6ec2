/*
 * fly_record.h -- the export record: one stored tuning result as export
 * files and import requests carry it (schemas/common.json#/$defs/result).
 *
 * Owns: nothing (pure functions).  Thread: any.
 *
 * One validator for every reader of records: flytune-ctl checks a whole
 * file before it sends any of it, the daemon checks each row of an
 * import request.  Its fields, kinds and limits are generated from the
 * schema (tools/gen_proto.py -> fly_record.def), so the schema, the CLI
 * and the daemon cannot disagree on what a valid record is (issue 23).
 */
#ifndef FLY_RECORD_H
#define FLY_RECORD_H

#include <stddef.h>

#include <cjson/cJSON.h>

/* Kinds of a record field (fly_record.def). */
enum fly_record_kind {
	FLY_RF_KEY,       /* a canonical shape key (fly_key_parse) */
	FLY_RF_STRING,    /* a string of min..max bytes */
	FLY_RF_INTEGERS,  /* an array of at most max integers */
	FLY_RF_NUMBER,    /* a finite number >= min */
	FLY_RF_NUMBER_GT, /* a finite number > min */
	FLY_RF_INTEGER,   /* an integer >= min */
};

/* An integer is a JSON number with no fraction and a magnitude of at
 * most 2^53, the range a double holds exactly (a larger one could not
 * be read back as the integer that was written). */
#define FLY_RECORD_INT_MAX 9007199254740992.0

/* Check one record: an object with exactly the schema's fields, each of
 * its kind and within its limits.
 * @param[out] why  on failure, what is wrong ("median_us: expected a
 *                  number > 0"), NUL-terminated within @p cap
 * @return 0 valid, -1 invalid. */
int fly_record_check(const cJSON *r, char *why, size_t cap);

/* Parse one record's own text @p p[0..n) as the daemon parses a request
 * (fly_msg_parse: valid UTF-8, no raw control characters in strings, no
 * duplicate keys, an object, nothing after it): text the CLI sends as it
 * is must pass this.  @return 0 (*@p out the record; cJSON_Delete) or -1. */
int fly_record_parse(const char *p, size_t n, cJSON **out);

/* Whether @p v is a string of @p min..@p max bytes (max < 0: no limit)
 * of valid UTF-8, as the daemon's strict parser takes it: what every
 * string of an export file, its header's too, must be. */
int fly_record_str_ok(const cJSON *v, double min, double max);

#endif /* FLY_RECORD_H */
