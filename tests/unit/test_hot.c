/*
 * test_hot.c -- proto/fly_hot: the decide fast path against the generic
 * one.  The scanner matches only requests fly_msg_parse() reads the same
 * way; the fixed-layout writer gives the decoded answer of the generic
 * printer (fly_msg_decision_to_json + fly_msg_print) over many decisions,
 * with median_us exact; its replies validate against
 * schemas/decide.response.json; fly_num_fmt_double() reads back as the
 * same double.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fly_err.h"
#include "fly_hot.h"
#include "fly_num.h"
#include "fly_msg.h"
#include "jsonschema.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* A double of any finite bit pattern, or a measured-looking median. */
static double rand_double(int i)
{
	uint64_t b = next();
	double v;

	switch (i % 4) {
	case 0:
		memcpy(&v, &b, sizeof(v));
		return isfinite(v) ? fabs(v) : 1.5;
	case 1:
		return (double)(b % 100000000) / 1000.0; /* ns -> us */
	case 2:
		return (double)(b >> 11) * 0x1p-53 * pow(10, (int)(b % 30) - 10);
	default:
		return (double)(b % 1000000) / 7.0;
	}
}

static void check_fmt(double v)
{
	char out[32], json[64];
	cJSON *o = NULL;
	int n = fly_num_fmt_double(v, out);

	assert_true(n > 0 && n < 32);
	assert_int_equal((size_t)n, strlen(out));
	if (strtod(out, NULL) != v)
		fail_msg("%.17g printed as %s", v, out);
	/* a JSON number, and the parser reads the same double */
	snprintf(json, sizeof(json), "{\"a\":%s}", out);
	assert_int_equal(fly_msg_parse((const uint8_t *)json, strlen(json),
				       &o), 0);
	assert_true(cJSON_GetObjectItem(o, "a")->valuedouble == v);
	cJSON_Delete(o);
}

static void test_fmt_double(void **state)
{
	static const double fixed[] = {
	    0, 1, 41.5, 123.456, 1e-7, 0.1, 0.1 + 0.2, 1e-5, 0.000123,
	    999999999999999.9, 999999999999999.0, 1e15, 1e15 + 2, 1.5e15,
	    9007199254740993.0, 1e300, 5e-324, DBL_MAX, DBL_MIN, 2.5e-6,
	    12.345678901234567, 3.0000000000000004, 1234.5678, 7e22,
	    100000000000000.5, 0.30000000000000004, 1e-4 + 1e-20,
	    /* next to powers of ten, where log10 may be one off */
	    0.001, 0.0009999999999999998, 10.000000000000002,
	    99.99999999999999, 9.999999999999999e14, 1e-5 * (1 + DBL_EPSILON),
	    0.00001 - 1e-21, 1000.0000000000001, 3.2912345678901234};
	char out[32];

	(void)state;
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		check_fmt(fixed[i]);
	for (int i = 0; i < 200000; i++)
		check_fmt(rand_double(i));
	/* 17 digits, exact, from the 128-bit path (no printf) */
	fly_num_fmt_double(3.2912345678901234, out);
	assert_string_equal(out, "3.2912345678901236");
	for (int i = 0; i < 100000; i++) { /* every power-of-ten boundary */
		double p = pow(10, i % 21 - 5);

		check_fmt(nextafter(p, 0));
		check_fmt(nextafter(p, INFINITY));
	}
	/* short where short reads back */
	fly_num_fmt_double(123.456, out);
	assert_string_equal(out, "123.456");
	fly_num_fmt_double(41.5, out);
	assert_string_equal(out, "41.5");
	fly_num_fmt_double(0.000123, out);
	assert_string_equal(out, "0.000123");
	fly_num_fmt_double(1e-7, out);
	assert_string_equal(out, "1e-07");
	fly_num_fmt_double(0, out);
	assert_string_equal(out, "0");
	/* exact where cJSON's "%1.15g" printed 0.3 */
	fly_num_fmt_double(0.1 + 0.2, out);
	assert_string_equal(out, "0.30000000000000004");
	assert_int_equal(fly_num_fmt_double(NAN, out), FLY_E_PROTO);
	assert_int_equal(fly_num_fmt_double(INFINITY, out), FLY_E_PROTO);
}

struct scan_case {
	const char *json;
	int match;
};

static const struct scan_case scans[] = {
    {"{\"req\":\"decide\",\"id\":7,\"key\":\"rmsnorm/fp32/m=8,n=64\"}", 1},
    {"{\"key\":\"k\",\"req\":\"decide\"}", 1},
    {" { \"req\" : \"decide\" ,\n\"key\":\"x y\",\t\"id\" : -12 } \r\n", 1},
    {"{\"req\":\"decide\",\"key\":\"\",\"id\":0}", 1},
    {"{\"req\":\"decide\",\"key\":\"k\",\"id\":999999999999999}", 1},
    /* everything else: the generic path */
    {"{\"req\":\"decide\",\"key\":\"k\",\"id\":1000000000000000}", 0},
    {"{\"req\":\"decide\",\"key\":\"k\",\"id\":1.0}", 0},
    {"{\"req\":\"decide\",\"key\":\"k\",\"id\":1e3}", 0},
    {"{\"req\":\"decide\",\"key\":\"k\",\"id\":01}", 0},
    {"{\"req\":\"decide\",\"key\":\"k\",\"id\":-}", 0},
    {"{\"req\":\"decide\",\"key\":\"k\",\"id\":\"1\"}", 0},
    {"{\"req\":\"decide\",\"key\":\"a\\\"b\"}", 0},
    {"{\"req\":\"decide\",\"key\":\"\\u0072\"}", 0},
    {"{\"req\":\"decide\",\"key\":\"\xc3\xa9\"}", 0},
    {"{\"req\":\"decide\",\"key\":\"a\tb\"}", 0},
    {"{\"req\":\"decide\",\"key\":\"k\",\"key\":\"k\"}", 0},
    {"{\"req\":\"decide\",\"req\":\"decide\",\"key\":\"k\"}", 0},
    {"{\"req\":\"decide\",\"key\":\"k\",\"id\":1,\"id\":2}", 0},
    {"{\"req\":\"decide\",\"key\":\"k\",\"x\":1}", 0},
    {"{\"req\":\"decide\",\"key\":\"k\",}", 0},
    {"{\"req\":\"decide\",\"key\":\"k\"}x", 0},
    {"{\"req\":\"decide\",\"key\":\"k\"}{}", 0},
    {"{\"req\":\"decide\",\"key\":\"k\"", 0},
    {"{\"req\":\"decide\"}", 0},
    {"{\"key\":\"k\"}", 0},
    {"{\"req\":\"get\",\"key\":\"k\"}", 0},
    {"{\"req\":\"decidex\",\"key\":\"k\"}", 0},
    {"{\"r\\u0065q\":\"decide\",\"key\":\"k\"}", 0},
    {"{\"req\":\"decide\",\"key\":7}", 0},
    {"[\"req\",\"decide\"]", 0},
    {"{}", 0},
    {"", 0},
};

/* What the scanner matches, the strict parser reads the same way. */
static void test_scan(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(scans) / sizeof(scans[0]); i++) {
		const struct scan_case *c = &scans[i];
		const uint8_t *b = (const uint8_t *)c->json;
		size_t len = strlen(c->json);
		struct fly_hot_req hr;
		cJSON *o = NULL;
		const char *key;
		int64_t id;

		if (fly_hot_scan_decide(b, len, &hr) != (c->match ? 0 : 1))
			fail_msg("case %zu: %s", i, c->json);
		if (!c->match)
			continue;
		assert_int_equal(fly_msg_parse(b, len, &o), 0);
		assert_string_equal(cJSON_GetObjectItem(o, "req")->valuestring,
				    "decide");
		assert_int_equal(fly_msg_get_str(o, "key", &key), 0);
		assert_int_equal(strlen(key), hr.keylen);
		assert_memory_equal(key, hr.key, hr.keylen);
		assert_int_equal(fly_msg_opt_int(o, "id", &id), !hr.has_id);
		if (hr.has_id)
			assert_int_equal(id, hr.id);
		cJSON_Delete(o);
	}
}

/* The generic path's reply, as session.c builds it. */
static char *generic_reply(const char *key, const struct fly_decision *d,
			   int has_id, int64_t id, size_t *len)
{
	cJSON *r = cJSON_CreateObject();
	char *text;

	cJSON_AddTrueToObject(r, "ok");
	cJSON_AddStringToObject(r, "key", key);
	cJSON_AddItemToObject(r, "decision", fly_msg_decision_to_json(d));
	if (has_id)
		cJSON_AddNumberToObject(r, "id", (double)id);
	text = fly_msg_print(r, len);
	cJSON_Delete(r);
	return text;
}

static void decode(const char *text, size_t len, const char **key,
		   struct fly_decision *d, int64_t *id, int *has_id,
		   cJSON **o)
{
	assert_int_equal(fly_msg_parse((const uint8_t *)text, len, o), 0);
	assert_true(cJSON_IsTrue(cJSON_GetObjectItem(*o, "ok")));
	assert_int_equal(fly_msg_get_str(*o, "key", key), 0);
	assert_int_equal(fly_msg_decision_from_json(
				 cJSON_GetObjectItem(*o, "decision"), d), 0);
	*has_id = fly_msg_opt_int(*o, "id", id) == 0;
}

static const char *const variants[] = {
    "naive", "tile_128x64", "a\"b\\c", "tab\there", "nl\nx\r\b\f",
    "ctl\x01\x1f", "utf8-\xc3\xa9", "slash/ok", "x"};
static const char *const keys[] = {
    "rmsnorm/fp32/m=8,n=64", "gemm/bf16/NT/m=4096,n=6144,k=4096",
    "attention/bf16/b=1,hq=32,hkv=8,sq=1,skv=4096,d=128/causal"};
static const double medians[] = {0, 1e-7, 123.456, 41.5, 999999999999999.9,
				 1e15, 1.5e15, 0.1 + 0.2, 1e-300, 7.25};

static void random_decision(int i, struct fly_decision *d)
{
	memset(d, 0, sizeof(*d));
	d->status = (uint32_t)(i % 3);
	d->provisional = (uint32_t)(next() & 1);
	snprintf(d->variant, sizeof(d->variant), "%s",
		 variants[next() % (sizeof(variants) / sizeof(variants[0]))]);
	d->nparams = (uint32_t)(next() % (FLY_PARAMS_MAX + 1));
	for (uint32_t k = 0; k < d->nparams; k++) {
		uint64_t r = next();

		d->params[k] = (r & 1) ? (int64_t)(r >> 12) - (1ll << 51)
				       : (int64_t)(r % 4096);
	}
	d->median_us = i % 2 ? medians[next() % (sizeof(medians) /
						 sizeof(medians[0]))]
			     : rand_double(i / 2);
}

/* Fast vs generic: the same decoded answer, median_us exact. */
static void test_fast_vs_generic(void **state)
{
	(void)state;
	for (int i = 0; i < 20000; i++) {
		struct fly_decision d, df, dg;
		const char *kf, *kg, *key = keys[i % 3];
		char fast[FLY_HOT_DECIDE_MAX], *gen, med[32];
		int has_id = i % 5 != 0, hf, hg;
		int64_t id = (int64_t)(next() % 2000000000000000ull) -
			     1000000000000000;
		int64_t idf = 0, idg = 0;
		cJSON *of, *og;
		size_t glen;
		int n;

		random_decision(i, &d);
		n = fly_hot_decide_write(fast, sizeof(fast), key, &d, has_id,
					 id);
		assert_true(n > 0);
		gen = generic_reply(key, &d, has_id, id, &glen);
		assert_non_null(gen);
		decode(fast, (size_t)n, &kf, &df, &idf, &hf, &of);
		decode(gen, glen, &kg, &dg, &idg, &hg, &og);
		assert_string_equal(kf, key);
		assert_string_equal(kg, key);
		assert_int_equal(hf, has_id);
		assert_int_equal(hg, has_id);
		if (has_id) {
			assert_int_equal(idf, id);
			assert_int_equal(idg, id);
		}
		assert_int_equal(df.status, dg.status);
		assert_int_equal(df.provisional, dg.provisional);
		assert_string_equal(df.variant, d.variant);
		assert_string_equal(dg.variant, d.variant);
		assert_int_equal(df.nparams, dg.nparams);
		assert_memory_equal(df.params, d.params,
				    d.nparams * sizeof(d.params[0]));
		assert_memory_equal(dg.params, d.params,
				    d.nparams * sizeof(d.params[0]));
		/* exact here; cJSON's "%1.15g" only within its epsilon */
		assert_true(df.median_us == d.median_us);
		assert_true(fabs(dg.median_us - d.median_us) <=
			    fmax(fabs(d.median_us), 1e-300) * DBL_EPSILON);
		/* the same bytes where the median prints the same */
		fly_num_fmt_double(d.median_us, med);
		if (strstr(gen, med) != NULL && dg.median_us == d.median_us &&
		    glen == (size_t)n)
			assert_memory_equal(fast, gen, glen);
		cJSON_Delete(of);
		cJSON_Delete(og);
		free(gen);
	}
}

/* Byte for byte where nothing differs: the member order is the generic
 * path's. */
static void test_same_bytes(void **state)
{
	struct fly_decision d = {.status = FLY_STATUS_TUNED,
				 .variant = "tile_128x64",
				 .nparams = 3,
				 .params = {128, 64, -2},
				 .median_us = 41.5};
	char fast[FLY_HOT_DECIDE_MAX], *gen;
	size_t glen;
	int n;

	(void)state;
	for (int has_id = 0; has_id < 2; has_id++) {
		n = fly_hot_decide_write(fast, sizeof(fast), keys[1], &d,
					 has_id, 123456789012345);
		gen = generic_reply(keys[1], &d, has_id, 123456789012345,
				    &glen);
		assert_int_equal((size_t)n, glen);
		assert_memory_equal(fast, gen, glen);
		free(gen);
	}
}

static void test_schema_valid(void **state)
{
	char fast[FLY_HOT_DECIDE_MAX + 1], err[256];

	(void)state;
	for (int i = 0; i < 600; i++) {
		struct fly_decision d;
		int n;

		random_decision(i, &d);
		/* the schema's variant is 1..39 bytes, of any characters */
		n = fly_hot_decide_write(fast, sizeof(fast) - 1, keys[i % 3],
					 &d, i & 1, i);
		assert_true(n > 0);
		fast[n] = '\0';
		if (fly_test_schema_validate_text("decide.response.json", fast,
						  err, sizeof(err)) != 0)
			fail_msg("%s: %s", fast, err);
	}
}

/* What the writer leaves to the generic path, and a short buffer. */
static void test_unusual(void **state)
{
	struct fly_decision d = {.status = FLY_STATUS_TUNED,
				 .variant = "v",
				 .nparams = 1,
				 .params = {1},
				 .median_us = 2};
	char out[FLY_HOT_DECIDE_MAX];

	(void)state;
	assert_true(fly_hot_decide_write(out, sizeof(out), "k", &d, 1, 1) > 0);
	assert_int_equal(fly_hot_decide_write(out, 20, "k", &d, 1, 1),
			 -ENOSPC);
	d.median_us = NAN;
	assert_int_equal(fly_hot_decide_write(out, sizeof(out), "k", &d, 0, 0),
			 FLY_E_PROTO);
	d.median_us = 2;
	d.params[0] = 1ll << 60;
	assert_int_equal(fly_hot_decide_write(out, sizeof(out), "k", &d, 0, 0),
			 FLY_E_PROTO);
	d.params[0] = 1;
	d.status = 9;
	assert_int_equal(fly_hot_decide_write(out, sizeof(out), "k", &d, 0, 0),
			 FLY_E_PROTO);
	d.status = FLY_STATUS_TUNED;
	assert_int_equal(fly_hot_decide_write(out, sizeof(out), "k", &d, 1,
					      1ll << 60), FLY_E_PROTO);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_fmt_double),
	    cmocka_unit_test(test_scan),
	    cmocka_unit_test(test_fast_vs_generic),
	    cmocka_unit_test(test_same_bytes),
	    cmocka_unit_test(test_schema_valid),
	    cmocka_unit_test(test_unusual),
	};

	return cmocka_run_group_tests_name("hot", tests, NULL, NULL);
}
