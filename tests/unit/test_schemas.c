/*
 * test_schemas.c -- schemas/: every schema loads and uses only keywords
 * the validator checks; a sample of every message validates; encoder
 * output (proto/fly_msg) validates; invalid samples are rejected; the
 * request table agrees with the schemas' x-fly-id / x-fly-flags; the
 * config defaults of the code, config.schema.json and flytuned(8) agree;
 * flytune-ctl(1) names every admin request.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "fly_msg.h"
#include "fly_record.h"
#include "jsonschema.h"

#define RESULT                                                                 \
	"{\"key\":\"gemm/bf16/NT/m=4096,n=6144,k=4096\","                      \
	"\"device\":\"9f3a77c01b2d4e11\",\"libver\":\"flyk-1\","               \
	"\"variant\":\"tile_128x64\",\"params\":[128,64,2],"                   \
	"\"median_us\":41.5,\"mad_us\":0.4,\"tune_s\":3.2,"                    \
	"\"tuned_at\":1764614400}"
#define DECISION                                                               \
	"{\"status\":\"tuned\",\"provisional\":false,"                         \
	"\"variant\":\"tile_128x64\",\"params\":[128,64,2],\"median_us\":41."  \
	"5}"
#define DEVICE                                                                 \
	"{\"index\":0,\"backend\":\"cpu\","                                    \
	"\"fingerprint\":\"cpu x86_64 avx2 2c\",\"id\":\"9f3a77c01b2d4e11\"}"
#define TRIAL                                                                  \
	"{\"variant\":\"naive\",\"params\":[],\"median_us\":0,"                \
	"\"mad_us\":0,\"reps\":0,\"outcome\":\"faulted\","                     \
	"\"reason\":\"worker killed by SIGSEGV\"}"

struct sample {
	const char *schema;
	const char *json;
};

static const struct sample good[] = {
    {"hello.request.json", "{\"req\":\"hello\",\"id\":1,\"version\":1,"
			   "\"client\":\"vllm\"}"},
    {"hello.response.json", "{\"ok\":true,\"id\":1,\"version\":1,"
			    "\"device\":" DEVICE ",\"libver\":\"flyk-1\","
			    "\"shm\":{\"capacity\":4096,\"size\":1048832}}"},
    {"decide.request.json", "{\"req\":\"decide\",\"key\":"
			    "\"rmsnorm/fp16/m=8192,n=4097/residual\"}"},
    {"decide.response.json", "{\"ok\":true,\"key\":"
			     "\"rmsnorm/fp16/m=8192,n=4097/residual\","
			     "\"decision\":" DECISION "}"},
    {"tune.request.json", "{\"req\":\"tune\",\"key\":"
			  "\"topk/fp32/m=4096,n=1024,k=8/det\","
			  "\"force\":true,\"wait\":false}"},
    {"tune.response.json", "{\"ok\":true,\"key\":"
			   "\"topk/fp32/m=4096,n=1024,k=8/det\","
			   "\"status\":\"pending\",\"queued\":true}"},
    {"get.request.json", "{\"req\":\"get\",\"id\":7,\"key\":"
			 "\"gemm/bf16/NT/m=4096,n=6144,k=4096\"}"},
    {"get.response.json", "{\"ok\":true,\"id\":7,\"key\":"
			  "\"gemm/bf16/NT/m=4096,n=6144,k=4096\","
			  "\"result\":" RESULT "}"},
    {"explain.request.json", "{\"req\":\"explain\",\"key\":"
			     "\"gemm/bf16/NT/m=4096,n=6144,k=4096\"}"},
    {"explain.response.json", "{\"ok\":true,\"key\":"
			      "\"gemm/bf16/NT/m=4096,n=6144,k=4096\","
			      "\"result\":" RESULT ",\"trials\":[" TRIAL "]}"},
    {"explain.response.json", "{\"ok\":true,\"key\":"
			      "\"gemm/bf16/NT/m=1,n=1,k=1\","
			      "\"result\":null,\"trials\":[]}"},
    {"list.request.json", "{\"req\":\"list\",\"op\":\"gemm\","
			  "\"dtype\":\"bf16\",\"status\":\"tuned\","
			  "\"after\":\"gemm/bf16/NT/m=1,n=1,k=1\","
			  "\"limit\":100}"},
    {"list.request.json", "{\"req\":\"list\"}"},
    {"list.response.json", "{\"ok\":true,\"results\":[" RESULT "],"
			   "\"next\":\"gemm/bf16/NT/m=4096,n=6144,k=4096\"}"},
    {"list.response.json", "{\"ok\":true,\"results\":[],\"next\":null}"},
    {"export.request.json", "{\"req\":\"export\",\"limit\":500}"},
    {"export.response.json", "{\"ok\":true,\"results\":[" RESULT "],"
			     "\"next\":null}"},
    {"import.request.json",
     "{\"req\":\"import\",\"results\":[" RESULT "],\"more\":true}"},
    {"import.request.json", "{\"req\":\"import\",\"results\":[],"
			    "\"retarget\":true}"},
    {"tune.request.json", "{\"req\":\"tune\",\"key\":"
			  "\"rmsnorm/fp32/m=64,n=4096\",\"wait\":true,"
			  "\"timeout_ms\":1500}"},
    {"import.response.json", "{\"ok\":true,\"imported\":1}"},
    {"forget.request.json", "{\"req\":\"forget\",\"key\":"
			    "\"gemm/bf16/NT/m=1,n=1,k=1\"}"},
    {"forget.request.json", "{\"req\":\"forget\",\"all\":true}"},
    {"forget.response.json", "{\"ok\":true,\"forgotten\":3}"},
    {"stats.request.json", "{\"req\":\"stats\"}"},
    {"stats.response.json", "{\"ok\":true,\"counters\":{\"requests\":10,"
			    "\"decides\":4,\"errors\":0}}"},
    {"metrics.request.json", "{\"req\":\"metrics\",\"id\":3}"},
    {"metrics.response.json", "{\"ok\":true,\"content_type\":"
     "\"text/plain; version=0.0.4; charset=utf-8\",\"text\":"
     "\"# HELP a b\\n# TYPE a gauge\\na 1\\n\"}"},
    {"status.request.json", "{\"req\":\"status\",\"id\":2}"},
    {"status.response.json", "{\"ok\":true,\"state\":\"ready\","
			     "\"backend\":\"cpu\",\"device\":" DEVICE ","
			     "\"queue\":{\"depth\":0,\"cap\":1024},"
			     "\"worker\":{\"pid\":1234,\"restarts\":0},"
			     "\"uptime_s\":12.5,\"results\":3}"},
    {"error.response.json", "{\"ok\":false,\"id\":3,\"error\":{\"code\":"
			    "\"not_found\",\"message\":\"no result\"}}"},
    {"export-file.json", "{\"format\":\"flytuned-export\",\"version\":1,"
			 "\"device\":{\"backend\":\"cpu\",\"fingerprint\":"
			 "\"cpu x86_64\",\"id\":\"9f3a77c01b2d4e11\"},"
			 "\"libver\":\"flyk-1\",\"results\":[" RESULT "]}"},
};

static const struct sample bad[] = {
    /* wrong req const, missing required, additional property */
    {"decide.request.json",
     "{\"req\":\"tune\",\"key\":\"gemm/bf16/NT/m=1,n=1,k=1\"}"},
    {"decide.request.json", "{\"req\":\"decide\"}"},
    {"decide.request.json",
     "{\"req\":\"decide\",\"key\":\"gemm/bf16/NT/m=1,n=1,k=1\",\"x\":1}"},
    /* pattern: non-canonical key */
    {"decide.request.json",
     "{\"req\":\"decide\",\"key\":\"gemm/bf16/NT/m=01,n=1,k=1\"}"},
    {"decide.request.json", "{\"req\":\"decide\",\"key\":\"GEMM\"}"},
    /* type: id not an integer */
    {"status.request.json", "{\"req\":\"status\",\"id\":1.5}"},
    {"status.request.json", "{\"req\":\"status\",\"id\":\"1\"}"},
    /* minimum / maximum */
    {"hello.request.json", "{\"req\":\"hello\",\"version\":0}"},
    /* issue 18: only FLY_PROTO_VERSION; timeout_ms is an integer */
    {"hello.request.json", "{\"req\":\"hello\",\"version\":2}"},
    {"tune.request.json", "{\"req\":\"tune\",\"key\":"
			  "\"rmsnorm/fp32/m=64,n=4096\",\"timeout_ms\":0.5}"},
    {"import.request.json", "{\"req\":\"import\",\"results\":[],"
			    "\"retarget\":1}"},
    {"list.request.json", "{\"req\":\"list\",\"limit\":100000}"},
    /* enum */
    {"list.request.json", "{\"req\":\"list\",\"op\":\"conv\"}"},
    {"error.response.json",
     "{\"ok\":false,\"error\":{\"code\":\"oops\",\"message\":\"\"}}"},
    /* const */
    {"import.response.json", "{\"ok\":false,\"imported\":1}"},
    {"forget.request.json", "{\"req\":\"forget\",\"all\":false}"},
    /* oneOf: both or neither */
    {"forget.request.json", "{\"req\":\"forget\"}"},
    {"forget.request.json",
     "{\"req\":\"forget\",\"all\":true,\"key\":\"gemm/bf16/NT/m=1,n=1,k=1\"}"},
    /* $ref into common.json: bad decision / result / trial */
    {"decide.response.json",
     "{\"ok\":true,\"key\":\"gemm/bf16/NT/m=1,n=1,k=1\","
     "\"decision\":{\"status\":\"tuned\",\"provisional\":false,"
     "\"variant\":\"v\",\"params\":[1.5],\"median_us\":1}}"},
    {"decide.response.json",
     "{\"ok\":true,\"key\":\"gemm/bf16/NT/m=1,n=1,k=1\","
     "\"decision\":{\"status\":\"tuned\",\"provisional\":false,"
     "\"variant\":\"v\",\"params\":[1,2,3,4,5,6,7,8,9],\"median_us\":1}}"},
    {"decide.response.json",
     "{\"ok\":true,\"key\":\"gemm/bf16/NT/m=1,n=1,k=1\","
     "\"decision\":{\"status\":\"tuned\",\"provisional\":false,"
     "\"variant\":\"\",\"params\":[],\"median_us\":1}}"},
    {"explain.response.json",
     "{\"ok\":true,\"key\":\"gemm/bf16/NT/m=1,n=1,k=1\","
     "\"result\":null,\"trials\":[{\"variant\":\"v\",\"params\":[],"
     "\"median_us\":0,\"mad_us\":0,\"reps\":0,\"outcome\":\"great\"}]}"},
    {"get.response.json", "{\"ok\":true,\"key\":\"gemm/bf16/NT/m=1,n=1,k=1\","
			  "\"result\":{\"key\":\"gemm/bf16/NT/m=1,n=1,k=1\"}}"},
    /* the text is required */
    {"metrics.response.json", "{\"ok\":true,\"content_type\":"
     "\"text/plain; version=0.0.4; charset=utf-8\"}"},
    /* additionalProperties schema: counters must be integers */
    {"stats.response.json",
     "{\"ok\":true,\"counters\":{\"requests\":\"many\"}}"},
    /* maxLength */
    {"hello.request.json", "{\"req\":\"hello\",\"version\":1,\"client\":"
			   "\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
			   "xxxxxxxxxxxxxxxxxxxxx\"}"},
    /* export file */
    {"export-file.json",
     "{\"format\":\"flytuned-export\",\"version\":2,"
     "\"device\":{\"backend\":\"cpu\",\"fingerprint\":\"f\",\"id\":\"i\"},"
     "\"libver\":\"l\",\"results\":[]}"},
    /* top level of the wrong type */
    {"stats.request.json", "[]"},
};

static const char *const all_schemas[] = {
    "common.json",	     "error.response.json",  "export-file.json",
    "hello.request.json",    "hello.response.json",  "decide.request.json",
    "decide.response.json",  "tune.request.json",    "tune.response.json",
    "get.request.json",	     "get.response.json",    "explain.request.json",
    "explain.response.json", "list.request.json",    "list.response.json",
    "export.request.json",   "export.response.json", "import.request.json",
    "import.response.json",  "forget.request.json",  "forget.response.json",
    "stats.request.json",    "stats.response.json",  "status.request.json",
    "status.response.json",
};

static void test_good_samples(void **state)
{
	char err[512];

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		int rc = fly_test_schema_validate_text(
		    good[i].schema, good[i].json, err, sizeof(err));

		if (rc != 0)
			fail_msg("%s: sample %zu rejected (%d): %s",
				 good[i].schema, i, rc, err);
	}
}

static void test_bad_samples(void **state)
{
	char err[512];

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = fly_test_schema_validate_text(
		    bad[i].schema, bad[i].json, err, sizeof(err));

		if (rc != 1)
			fail_msg("%s: bad sample %zu gave %d", bad[i].schema, i,
				 rc);
		assert_true(err[0] != '\0');
	}
}

/* Every request and response schema has at least one good sample. */
static void test_every_schema_sampled(void **state)
{
	(void)state;
	for (size_t i = 1; i < sizeof(all_schemas) / sizeof(all_schemas[0]);
	     i++) {
		int found = 0;

		for (size_t j = 0; j < sizeof(good) / sizeof(good[0]); j++)
			found |= !strcmp(good[j].schema, all_schemas[i]);
		if (!found)
			fail_msg("no sample for %s", all_schemas[i]);
	}
}

static void test_validator_refuses_bad_schemas(void **state)
{
	char err[256];
	cJSON *d = cJSON_Parse("{}");

	(void)state;
	assert_int_equal(
	    fly_test_schema_validate("no-such.json", d, err, sizeof(err)), -1);
	assert_int_equal(fly_test_schema_validate(FLY_SRC_DIR "/Makefile", d,
						  err, sizeof(err)),
			 -1);
	cJSON_Delete(d);
}

static void test_encoder_output(void **state)
{
	struct fly_decision dec = {0};
	cJSON *e, *resp;
	char err[512];
	int codes[] = {FLY_E_PROTO, FLY_E_BUSY, FLY_E_MAXCLIENTS, FLY_E_BADKEY,
		       -12 /* -ENOMEM: "internal" */};

	(void)state;
	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
		e = fly_msg_error(codes[i], NULL);
		assert_non_null(e);
		if (fly_test_schema_validate("error.response.json", e, err,
					     sizeof(err)) != 0)
			fail_msg("error %d: %s", codes[i], err);
		cJSON_Delete(e);
	}
	dec.status = FLY_STATUS_PENDING;
	dec.provisional = 1;
	strcpy(dec.variant, "gemm_default");
	dec.nparams = 2;
	dec.params[0] = 64;
	dec.params[1] = 4;
	dec.median_us = 0;
	resp = cJSON_CreateObject();
	cJSON_AddTrueToObject(resp, "ok");
	cJSON_AddNumberToObject(resp, "id", 42);
	cJSON_AddStringToObject(resp, "key", "gemm/fp16/NT/m=32,n=64,k=64");
	cJSON_AddItemToObject(resp, "decision", fly_msg_decision_to_json(&dec));
	if (fly_test_schema_validate("decide.response.json", resp, err,
				     sizeof(err)) != 0)
		fail_msg("decide response: %s", err);
	/* the same response without "ok" is rejected */
	cJSON_DeleteItemFromObject(resp, "ok");
	assert_int_equal(fly_test_schema_validate("decide.response.json", resp,
						  err, sizeof(err)),
			 1);
	cJSON_Delete(resp);
}

/* Load SCHEMAS/<name>.request.json as cJSON (caller frees). */
static cJSON *load_req_schema(const char *name)
{
	char path[1024];
	FILE *f;
	char *buf;
	long n;
	cJSON *j;

	snprintf(path, sizeof(path), "%s/schemas/%s.request.json", FLY_SRC_DIR,
		 name);
	f = fopen(path, "rb");
	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = calloc(1, (size_t)n + 1);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	j = cJSON_Parse(buf);
	free(buf);
	assert_non_null(j);
	return j;
}

static void test_table_matches_schemas(void **state)
{
	(void)state;
	for (int r = 1; r < FLY_REQ_COUNT; r++) {
		cJSON *s = load_req_schema(fly_req_name(r));
		cJSON *id = cJSON_GetObjectItemCaseSensitive(s, "x-fly-id");
		cJSON *fl = cJSON_GetObjectItemCaseSensitive(s, "x-fly-flags");
		cJSON *e;
		uint32_t flags = 0;

		assert_true(cJSON_IsNumber(id));
		assert_int_equal(id->valueint, r);
		cJSON_ArrayForEach(e, fl)
		{
			if (!strcmp(e->valuestring, "admin"))
				flags |= FLY_MSGF_ADMIN;
			else if (!strcmp(e->valuestring, "fd"))
				flags |= FLY_MSGF_FD;
			else
				fail_msg("unknown flag %s", e->valuestring);
		}
		assert_int_equal(flags, fly_req_flags(r));
		cJSON_Delete(s);
	}
}

/* Records that differ from RESULT in one field: @p field is set to the
 * JSON text @p value ("" removes it), @p valid is the verdict. */
static const struct {
	const char *field;
	const char *value;
	int valid;
} record_cases[] = {
    {NULL, NULL, 1},
    {"key", "\"rmsnorm/fp16/m=8192,n=4097/residual\"", 1},
    {"key", "\"rmsnorm/fp32/m=0,n=64\"", 0},
    {"key", "\"gemm/bf16\"", 0},
    {"key", "7", 0},
    {"key", "", 0},
    {"device", "\"\"", 0},
    {"device", "\"0123456789012345678901234567890123456789012345678901"
	       "23456789012\"", 1},
    {"device", "\"0123456789012345678901234567890123456789012345678901"
	       "234567890123\"", 0},
    {"libver", "\"0123456789012345678901234567890\"", 1},
    {"libver", "\"01234567890123456789012345678901\"", 0},
    {"variant", "\"\"", 0},
    {"variant", "\"012345678901234567890123456789012345678\"", 1},
    {"variant", "\"0123456789012345678901234567890123456789\"", 0},
    {"params", "[]", 1},
    {"params", "[1,2,3,4,5,6,7,8]", 1},
    {"params", "[1,2,3,4,5,6,7,8,9]", 0},
    {"params", "[1.5]", 0},
    {"params", "[\"1\"]", 0},
    {"params", "1", 0},
    /* issue 23: the daemon refused a median of 0, ctl and schema took it */
    {"median_us", "0", 0},
    {"median_us", "0.001", 1},
    {"median_us", "-1", 0},
    {"mad_us", "0", 1},
    {"mad_us", "-0.5", 0},
    {"tune_s", "0", 1},
    {"tune_s", "\"3\"", 0},
    {"tuned_at", "0", 1},
    {"tuned_at", "1.5", 0},
    {"tuned_at", "-1", 0},
    {"tuned_at", "", 0},
    {"extra", "1", 0},
};

/* issue 23: one record validator.  The record check that flytune-ctl and
 * the daemon call (proto/fly_record.c, its table generated from
 * schemas/common.json) and the schema give every case the same verdict. */
static void test_issue_23_record_check_matches_schema(void **state)
{
	char err[512], why[256];

	(void)state;
	for (size_t i = 0; i < sizeof(record_cases) / sizeof(record_cases[0]);
	     i++) {
		cJSON *req = cJSON_Parse("{\"req\":\"import\",\"results\":["
					 RESULT "]}");
		cJSON *r = cJSON_GetArrayItem(
			cJSON_GetObjectItem(req, "results"), 0), *v;
		const char *f = record_cases[i].field;
		int sc, rc;

		assert_non_null(r);
		if (f != NULL)
			cJSON_DeleteItemFromObjectCaseSensitive(r, f);
		if (f != NULL && record_cases[i].value[0] != '\0') {
			v = cJSON_Parse(record_cases[i].value);
			assert_non_null(v);
			cJSON_AddItemToObject(r, f, v);
		}
		sc = fly_test_schema_validate("import.request.json", req, err,
					      sizeof(err));
		why[0] = '\0';
		rc = fly_record_check(r, why, sizeof(why));
		if (sc != !record_cases[i].valid ||
		    rc != (record_cases[i].valid ? 0 : -1))
			fail_msg("case %zu (%s=%s): schema %d (%s), "
				 "fly_record_check %d (%s), expected %s", i,
				 f ? f : "-", f ? record_cases[i].value : "-",
				 sc, err, rc, why,
				 record_cases[i].valid ? "valid" : "invalid");
		if (rc != 0 && (f == NULL || strstr(why, f) == NULL))
			fail_msg("case %zu: the reason '%s' does not name %s",
				 i, why, f ? f : "-");
		cJSON_Delete(req);
	}
}

/* The text of FLY_SRC_DIR/@p rel (caller frees). */
static char *slurp(const char *rel)
{
	char path[1024];
	FILE *f;
	char *buf;
	long n;

	snprintf(path, sizeof(path), "%s/%s", FLY_SRC_DIR, rel);
	f = fopen(path, "rb");
	if (f == NULL)
		fail_msg("cannot open %s", path);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = calloc(1, (size_t)n + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	return buf;
}

struct conf_default {
	const char *key;
	double code;   /* flyd_config_defaults() */
	int in_man;    /* checked against flytuned(8) */
};

/* The numeric defaults of the code, by config key. */
static size_t code_defaults(struct conf_default *t)
{
	struct flyd_config c;
	size_t n = 0;

	flyd_config_defaults(&c);
#define D(k, v) t[n++] = (struct conf_default){k, (double)(v), 0}
	D("idle_ms", c.idle_ms);
	D("bench_seconds_per_minute", c.bench_s_per_min);
	D("job_budget_s", c.job_budget_s);
	D("job_max_x", c.job_max_x);
	D("candidate_timeout_s", c.cand_timeout_s);
	D("margin", c.margin);
	D("queue_cap", c.queue_cap);
	D("shm_capacity", c.shm_capacity);
	D("max_clients", c.max_clients);
	D("frame_cap", c.frame_cap);
	D("output_buffer_cap", c.out_buf_cap);
	D("frame_timeout_ms", c.frame_timeout_ms);
	D("idle_timeout_ms", c.idle_timeout_ms);
#undef D
	return n;
}

/* flytuned(8)'s CONFIGURATION entries of the form
 *   .TP / .BR k1 ", " k2 ... / text with one "(N" per key, in order
 * give each key's default: it must be the code's (issue 18: the page said
 * job_budget_s 2.0, the code 1.0).  config.schema.json's "default"s must
 * be the code's too.  Every numeric key is checked in the man page. */
static void test_issue_18_config_defaults_documented(void **state)
{
	struct conf_default t[32];
	size_t n = code_defaults(t);
	char *man = slurp("man/flytuned.8"), *save = NULL, *line;
	cJSON *schema, *props;
	char *text = slurp("schemas/config.schema.json");
	const char *keys[8];
	int nkeys = 0, prev_tp = 0;
	char para[2048] = "";

	(void)state;
	schema = cJSON_Parse(text);
	free(text);
	props = cJSON_GetObjectItemCaseSensitive(schema, "properties");
	for (size_t i = 0; i < n; i++) {
		cJSON *def = cJSON_GetObjectItemCaseSensitive(
			cJSON_GetObjectItemCaseSensitive(props, t[i].key),
			"default");

		if (def != NULL && (!cJSON_IsNumber(def) ||
				    def->valuedouble != t[i].code))
			fail_msg("config.schema.json: %s default differs from "
				 "the code's %g", t[i].key, t[i].code);
	}
	cJSON_Delete(schema);
	/* A sentinel ".TP" line ends the last entry. */
	man = realloc(man, strlen(man) + 8);
	strcat(man, "\n.TP\n");
	for (line = strtok_r(man, "\n", &save); line != NULL;
	     line = strtok_r(NULL, "\n", &save)) {
		int is_keys = prev_tp && (!strncmp(line, ".B ", 3) ||
					  !strncmp(line, ".BR ", 4));

		if (!strncmp(line, ".TP", 3) || !strncmp(line, ".SH", 3)) {
			/* End of an entry: match its "(N" to its keys. */
			const char *p = para;
			int k = 0;

			while (nkeys > 0 && (p = strchr(p, '(')) != NULL) {
				char *end;
				double v = strtod(++p, &end);

				if (end == p)
					continue;
				if (k >= nkeys)
					fail_msg("flytuned.8: more values than "
						 "keys in '%s'", para);
				for (size_t i = 0; i < n; i++) {
					if (strcmp(t[i].key, keys[k]) != 0)
						continue;
					if (v != t[i].code)
						fail_msg("flytuned.8 says %s is "
							 "%g, the code %g",
							 keys[k], v, t[i].code);
					t[i].in_man = 1;
				}
				k++;
			}
			nkeys = 0;
			para[0] = '\0';
			prev_tp = !strncmp(line, ".TP", 3);
			continue;
		}
		prev_tp = 0;
		if (is_keys) {
			char *tok, *s2 = NULL;

			for (tok = strtok_r(line + 3, " \",", &s2);
			     tok != NULL && nkeys < 8;
			     tok = strtok_r(NULL, " \",", &s2))
				keys[nkeys++] = tok;
			continue;
		}
		if (nkeys > 0 && strlen(para) + strlen(line) + 2 < sizeof(para)) {
			strcat(para, " ");
			strcat(para, line);
		}
	}
	for (size_t i = 0; i < n; i++)
		if (!t[i].in_man)
			fail_msg("flytuned.8 gives no default for %s as "
				 "\".BR k1 \\\", \\\" k2\" then \"(N\" per key",
				 t[i].key);
	free(man);
}

/* flytune-ctl(1) names every admin request (x-fly-flags "admin") and
 * tune --force in its "Requests that change state (...)" list. */
static void test_issue_18_ctl_man_admin_requests(void **state)
{
	char *man = slurp("man/flytune-ctl.1"), *list, *end;
	char want[64];

	(void)state;
	for (char *p = man; *p; p++)
		if (*p == '\n')
			*p = ' ';
	list = strstr(man, "Requests that change state (");
	if (list == NULL)
		fail_msg("flytune-ctl.1 has no 'Requests that change state (' "
			 "list");
	list += strlen("Requests that change state (");
	end = strchr(list, ')');
	assert_non_null(end);
	*end = '\0';
	for (int r = 1; r < FLY_REQ_COUNT; r++) {
		if (!(fly_req_flags(r) & FLY_MSGF_ADMIN))
			continue;
		snprintf(want, sizeof(want), "%s", fly_req_name(r));
		if (strstr(list, want) == NULL)
			fail_msg("flytune-ctl.1's admin list (%s) lacks %s",
				 list, want);
	}
	if (strstr(list, "tune \\-\\-force") == NULL)
		fail_msg("flytune-ctl.1's admin list (%s) lacks tune --force",
			 list);
	free(man);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_good_samples),
	    cmocka_unit_test(test_bad_samples),
	    cmocka_unit_test(test_every_schema_sampled),
	    cmocka_unit_test(test_validator_refuses_bad_schemas),
	    cmocka_unit_test(test_encoder_output),
	    cmocka_unit_test(test_table_matches_schemas),
	    cmocka_unit_test(test_issue_23_record_check_matches_schema),
	    cmocka_unit_test(test_issue_18_config_defaults_documented),
	    cmocka_unit_test(test_issue_18_ctl_man_admin_requests),
	};

	return cmocka_run_group_tests_name("schemas", tests, NULL, NULL);
}
