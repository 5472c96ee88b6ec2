/*
 * test_msg.c -- proto/fly_msg: the strict parser, error names, request
 * table, decision JSON and field helpers; proto/fly_err: fly_strerror.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fly_err.h"
#include "fly_msg.h"

/* Parse from an exactly-sized heap copy (frames are not NUL-terminated),
 * so a sanitizer build catches any read past the frame. */
static int parse_str(const char *s, size_t len)
{
	cJSON *j = NULL;
	uint8_t *copy = malloc(len ? len : 1);
	int rc;

	assert_non_null(copy);
	memcpy(copy, s, len);
	rc = fly_msg_parse(copy, len, &j);
	free(copy);
	if (rc == 0)
		assert_non_null(j);
	else
		assert_null(j);
	cJSON_Delete(j);
	return rc;
}

#define PARSE(lit) parse_str(lit, sizeof(lit) - 1)

static void test_accepts(void **state)
{
	(void)state;
	assert_int_equal(PARSE("{}"), 0);
	assert_int_equal(PARSE(" {\"req\":\"hello\",\"version\":1} \n"), 0);
	assert_int_equal(PARSE("{\"a\":[1,-2.5e3,0,0.5,true,false,null],"
			       "\"b\":{\"c\":\"\\u00e9\\n\\\"\"}}"),
			 0);
	assert_int_equal(
	    PARSE("{\"s\":\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"}"), 0);
	assert_int_equal(PARSE("{\"s\":\"\\ud83d\\ude00\"}"), 0);
	assert_int_equal(PARSE("{\"x\":1e300}"), 0);
	/* same key in different objects is fine */
	assert_int_equal(PARSE("{\"a\":{\"k\":1},\"b\":{\"k\":2}}"), 0);
}

/* Depth d of arrays inside one object: "{"a":[[...]]}" */
static int parse_depth(int d)
{
	size_t n = (size_t)d * 2 + 8;
	char *s = malloc(n);
	size_t k = 0;
	int rc;

	assert_non_null(s);
	k += (size_t)sprintf(s, "{\"a\":");
	for (int i = 1; i < d; i++)
		s[k++] = '[';
	for (int i = 1; i < d; i++)
		s[k++] = ']';
	s[k++] = '}';
	rc = parse_str(s, k);
	free(s);
	return rc;
}

static void test_depth(void **state)
{
	size_t n = 1000000;
	char *s = malloc(n + 1);

	(void)state;
	assert_int_equal(parse_depth(32), 0);
	assert_int_equal(parse_depth(33), FLY_E_PROTO);
	/* a 10^6-deep "[[[[..." must be refused without recursion */
	memset(s, '[', n);
	s[0] = '{';
	assert_int_equal(parse_str(s, n), FLY_E_PROTO);
	free(s);
}

static void test_rejects(void **state)
{
	(void)state;
	/* duplicate keys, at top level and nested */
	assert_int_equal(PARSE("{\"a\":1,\"a\":2}"), FLY_E_PROTO);
	assert_int_equal(PARSE("{\"o\":{\"b\":1,\"c\":2,\"b\":3}}"),
			 FLY_E_PROTO);
	assert_int_equal(PARSE("{\"l\":[{\"x\":1,\"x\":1}]}"), FLY_E_PROTO);
	/* escapes */
	assert_int_equal(PARSE("{\"s\":\"a\\u0000b\"}"), FLY_E_PROTO);
	assert_int_equal(PARSE("{\"s\":\"\\ud800\"}"), FLY_E_PROTO);
	assert_int_equal(PARSE("{\"s\":\"\\ud800x\"}"), FLY_E_PROTO);
	assert_int_equal(PARSE("{\"s\":\"\\udc00\"}"), FLY_E_PROTO);
	assert_int_equal(PARSE("{\"s\":\"\\ud800\\u0041\"}"), FLY_E_PROTO);
	assert_int_equal(PARSE("{\"s\":\"\\x41\"}"), FLY_E_PROTO);
	assert_int_equal(PARSE("{\"\\u0000\":1}"), FLY_E_PROTO);
	/* raw bytes: NUL, control chars, invalid UTF-8 */
	assert_int_equal(PARSE("{\"s\":\"a\0b\"}"), FLY_E_PROTO);
	assert_int_equal(PARSE("{\"a\":1}\0"), FLY_E_PROTO);
	assert_int_equal(PARSE("{\"s\":\"a\tb\"}"), FLY_E_PROTO);
	assert_int_equal(PARSE("{\"s\":\"\xff\"}"), FLY_E_PROTO);
	assert_int_equal(PARSE("{\"s\":\"\xc3\"}"), FLY_E_PROTO);
	assert_int_equal(PARSE("{\"s\":\"\xc0\xaf\"}"),
			 FLY_E_PROTO); /* overlong */
	assert_int_equal(PARSE("{\"s\":\"\xed\xa0\x80\"}"),
			 FLY_E_PROTO); /* surrogate */
	assert_int_equal(PARSE("{\"s\":\"\xf4\x90\x80\x80\"}"), FLY_E_PROTO);
	assert_int_equal(PARSE("\xef\xbb\xbf{}"), FLY_E_PROTO); /* BOM */
	/* control bytes between tokens: JSON's whitespace is space, tab, LF
	 * and CR only (cJSON skips every byte up to 0x20; JSONTestSuite
	 * n_structure_whitespace_formfeed) */
	assert_int_equal(PARSE("{\"a\":[\f]}"), FLY_E_PROTO);
	assert_int_equal(PARSE("{\f\"a\":1}"), FLY_E_PROTO);
	assert_int_equal(PARSE("{\"a\":1\v}"), FLY_E_PROTO);
	assert_int_equal(PARSE("\x01{\"a\":1}"), FLY_E_PROTO);
	assert_int_equal(PARSE("{\"a\":1}\x1f"), FLY_E_PROTO);
	assert_int_equal(PARSE(" \t\r\n{ \t\r\n\"a\" \t\r\n: \t\r\n1 \t\r\n} \t\r\n"), 0);
	/* numbers */
	assert_int_equal(PARSE("{\"x\":1e400}"), FLY_E_PROTO);
	assert_int_equal(PARSE("{\"x\":-1e400}"), FLY_E_PROTO);
	assert_int_equal(PARSE("{\"x\":NaN}"), FLY_E_PROTO);
	assert_int_equal(PARSE("{\"x\":Infinity}"), FLY_E_PROTO);
	assert_int_equal(PARSE("{\"x\":-Infinity}"), FLY_E_PROTO);
	assert_int_equal(PARSE("{\"x\":nan}"), FLY_E_PROTO);
	assert_int_equal(PARSE("{\"x\":01}"), FLY_E_PROTO);
	assert_int_equal(PARSE("{\"x\":+1}"), FLY_E_PROTO);
	assert_int_equal(PARSE("{\"x\":.5}"), FLY_E_PROTO);
	assert_int_equal(PARSE("{\"x\":1.}"), FLY_E_PROTO);
	assert_int_equal(PARSE("{\"x\":0x10}"), FLY_E_PROTO);
	/* shape */
	assert_int_equal(PARSE("{\"a\":1} x"), FLY_E_PROTO);
	assert_int_equal(PARSE("{\"a\":1}{}"), FLY_E_PROTO);
	assert_int_equal(PARSE("[1,2]"), FLY_E_PROTO);
	assert_int_equal(PARSE("\"str\""), FLY_E_PROTO);
	assert_int_equal(PARSE("42"), FLY_E_PROTO);
	assert_int_equal(PARSE("null"), FLY_E_PROTO);
	assert_int_equal(PARSE("{\"a\":1"), FLY_E_PROTO);
	assert_int_equal(PARSE("{\"a\":1,}"), FLY_E_PROTO);
	assert_int_equal(PARSE(""), FLY_E_PROTO);
	assert_int_equal(PARSE("{'a':1}"), FLY_E_PROTO);
}

static void test_print(void **state)
{
	cJSON *j = NULL;
	size_t len = 0;
	char *s;

	(void)state;
	assert_int_equal(PARSE("{}"), 0);
	assert_int_equal(
	    fly_msg_parse((const uint8_t *)"{ \"a\" : [ 1 ] }", 15, &j), 0);
	s = fly_msg_print(j, &len);
	assert_string_equal(s, "{\"a\":[1]}");
	assert_int_equal(len, 9);
	free(s);
	cJSON_Delete(j);
}

/* issue 18 item 7: 64-bit integers print as integers.  cJSON alone
 * printed 1796229956770520 (a shm generation) as 1.79622995677052e+15;
 * the tree itself is left as it was. */
static void test_issue_18_print_long_ints(void **state)
{
	cJSON *j = cJSON_CreateObject(), *a;
	char *s;

	(void)state;
	cJSON_AddNumberToObject(j, "gen", 1796229956770520.0);
	a = cJSON_AddArrayToObject(j, "a");
	cJSON_AddItemToArray(a, cJSON_CreateNumber(-4611686018427387904.0));
	cJSON_AddItemToArray(a, cJSON_CreateNumber(12.5));
	cJSON_AddNumberToObject(j, "small", 42);
	s = fly_msg_print(j, NULL);
	assert_string_equal(s, "{\"gen\":1796229956770520,\"a\":"
			    "[-4611686018427387904,12.5],\"small\":42}");
	free(s);
	assert_true(cJSON_IsNumber(cJSON_GetObjectItem(j, "gen")));
	cJSON_Delete(j);
}

/* Every double reads back as itself: cJSON prints 15 significant digits
 * when they read back equal within its epsilon, so a tuned median of
 * 0.30000000000000004 us came out 0.3 in get, list and export (and an
 * exported file imported back held another number). */
static void test_print_doubles_exact(void **state)
{
	static const double v[] = {0.30000000000000004, 1.0 / 3.0,
				   7346.240000000001, -2.2250738585072014e-308,
				   123456.78901234567, 0.1, 12.5, 1e-7 / 3.0};

	(void)state;
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		cJSON *j = cJSON_CreateObject(), *back = NULL;
		char *s;

		cJSON_AddNumberToObject(j, "median_us", v[i]);
		s = fly_msg_print(j, NULL);
		assert_non_null(s);
		assert_int_equal(
		    fly_msg_parse((const uint8_t *)s, strlen(s), &back), 0);
		assert_true(cJSON_GetObjectItem(back, "median_us")->valuedouble ==
			    v[i]);
		free(s);
		cJSON_Delete(back);
		cJSON_Delete(j);
	}
	/* and the ones cJSON prints exactly print as before */
	cJSON *j = cJSON_CreateObject();
	cJSON_AddNumberToObject(j, "a", 0.1);
	cJSON_AddNumberToObject(j, "b", 12.5);
	char *s = fly_msg_print(j, NULL);
	assert_string_equal(s, "{\"a\":0.1,\"b\":12.5}");
	free(s);
	cJSON_Delete(j);
}

/* Printing is stable just below 1e15: 999999999999999.9 printed as
 * 1e+15, which read back as 1e15 and then printed 1000000000000000 (found
 * by the message fuzzer; tests/fuzz/regress/fuzz_msg). */
static void test_print_stable_below_1e15(void **state)
{
	static const char *const in[] = {
	    "{\"a\":999999999999999.9}", "{\"a\":-999999999999999.94}",
	    "{\"a\":999999999999999}", "{\"a\":999999999999998.5}"};

	(void)state;
	for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
		cJSON *a = NULL, *b = NULL;
		char *pa, *pb;

		assert_int_equal(fly_msg_parse((const uint8_t *)in[i],
					       strlen(in[i]), &a), 0);
		pa = fly_msg_print(a, NULL);
		assert_non_null(pa);
		assert_int_equal(fly_msg_parse((const uint8_t *)pa, strlen(pa),
					       &b), 0);
		pb = fly_msg_print(b, NULL);
		assert_string_equal(pa, pb);
		/* and exact: the same double read back */
		assert_true(cJSON_GetObjectItem(a, "a")->valuedouble ==
			    cJSON_GetObjectItem(b, "a")->valuedouble);
		free(pa);
		free(pb);
		cJSON_Delete(a);
		cJSON_Delete(b);
	}
}

static void test_req_table(void **state)
{
	(void)state;
	assert_int_equal(fly_req_parse("hello"), FLY_REQ_hello);
	assert_int_equal(FLY_REQ_hello, 1);
	assert_int_equal(FLY_REQ_status, 11);
	assert_string_equal(fly_req_name(FLY_REQ_forget), "forget");
	assert_null(fly_req_name(0));
	assert_null(fly_req_name(FLY_REQ_COUNT));
	assert_int_equal(fly_req_parse("nope"), FLY_REQ_NONE);
	assert_int_equal(fly_req_parse(NULL), FLY_REQ_NONE);
	assert_int_equal(fly_req_flags(FLY_REQ_hello), FLY_MSGF_FD);
	assert_int_equal(fly_req_flags(FLY_REQ_import), FLY_MSGF_ADMIN);
	assert_int_equal(fly_req_flags(FLY_REQ_forget), FLY_MSGF_ADMIN);
	assert_int_equal(fly_req_flags(FLY_REQ_decide), 0);
	for (int r = 1; r < FLY_REQ_COUNT; r++)
		assert_int_equal(fly_req_parse(fly_req_name(r)), r);
}

static void test_err_names(void **state)
{
	static const char *const names[] = {
	    "proto",	  "nogpu",     "schema",       "bad_op",  "bad_dtype",
	    "bad_dim",	  "overflow",  "key_too_long", "bad_key", "busy",
	    "permission", "not_found", "timeout",      "down",	  "version",
	    "invalid",	  "too_big",   "storage",      "shm",	  "gpu",
	    "max_clients"};

	(void)state;
	for (int i = 0; i < 21; i++) {
		int code = FLY_E_BASE - 1 - i;

		assert_string_equal(fly_err_name(code), names[i]);
		assert_int_equal(fly_err_parse(names[i]), code);
		assert_non_null(fly_strerror(code));
		assert_string_not_equal(fly_strerror(code),
					"unknown flytuned error");
	}
	assert_int_equal(FLY_E_BASE - 21, FLY_E_LAST);
	assert_string_equal(fly_err_name(-ENOMEM), "internal");
	assert_string_equal(fly_err_name(0), "internal");
	assert_string_equal(fly_err_name(FLY_E_LAST - 1), "internal");
	assert_int_equal(fly_err_parse("internal"), -EIO);
	assert_int_equal(fly_err_parse("no_such_name"), -EIO);
	/* fly_strerror: both ranges, never NULL */
	assert_string_equal(fly_strerror(0), "success");
	assert_string_equal(fly_strerror(-ENOENT), strerror(ENOENT));
	assert_non_null(fly_strerror(FLY_E_BASE));
	assert_non_null(fly_strerror(-20000));
	assert_non_null(fly_strerror(12345));
	assert_non_null(fly_strerror(-9999));
}

static void test_error_msg(void **state)
{
	cJSON *e = fly_msg_error(FLY_E_BUSY, "queue full");
	cJSON *d = fly_msg_error(FLY_E_NOTFOUND, NULL);
	cJSON *ok = cJSON_Parse("{\"ok\":true}");
	cJSON *bad = cJSON_Parse("{\"ok\":false}");
	const char *msg;
	char *s;

	(void)state;
	s = fly_msg_print(e, NULL);
	assert_string_equal(s, "{\"ok\":false,\"error\":{\"code\":\"busy\","
			       "\"message\":\"queue full\"}}");
	free(s);
	assert_int_equal(fly_msg_get_error(e, &msg), FLY_E_BUSY);
	assert_string_equal(msg, "queue full");
	assert_int_equal(fly_msg_get_error(d, &msg), FLY_E_NOTFOUND);
	assert_string_equal(msg, fly_strerror(FLY_E_NOTFOUND));
	assert_int_equal(fly_msg_get_error(ok, &msg), 0);
	assert_null(msg);
	assert_int_equal(fly_msg_get_error(bad, &msg), FLY_E_PROTO);
	cJSON_Delete(e);
	cJSON_Delete(d);
	cJSON_Delete(ok);
	cJSON_Delete(bad);
}

static void test_decision_roundtrip(void **state)
{
	struct fly_decision d = {0}, back;
	cJSON *j;
	char *s;
	cJSON *p = NULL;

	(void)state;
	d.status = FLY_STATUS_TUNED;
	d.provisional = 1;
	strcpy(d.variant, "gemm_tile_128x64");
	d.nparams = 3;
	d.params[0] = 128;
	d.params[1] = -7;
	d.params[2] = (int64_t)1 << 40;
	d.median_us = 12.5;
	j = fly_msg_decision_to_json(&d);
	assert_non_null(j);
	s = fly_msg_print(j, NULL);
	/* through the strict parser, as on the wire */
	assert_int_equal(fly_msg_parse((const uint8_t *)s, strlen(s), &p), 0);
	assert_int_equal(fly_msg_decision_from_json(p, &back), 0);
	assert_int_equal(back.status, d.status);
	assert_int_equal(back.provisional, 1);
	assert_string_equal(back.variant, d.variant);
	assert_int_equal(back.nparams, 3);
	assert_memory_equal(back.params, d.params, sizeof(d.params));
	assert_true(back.median_us == 12.5);
	free(s);
	cJSON_Delete(p);
	cJSON_Delete(j);
	assert_string_equal(fly_status_name(FLY_STATUS_PENDING), "pending");
	assert_int_equal(fly_status_parse("default"), FLY_STATUS_DEFAULT);
	assert_int_equal(fly_status_parse("bogus"), -1);
	assert_null(fly_status_name(3));
}

static int from_text(const char *s)
{
	struct fly_decision d;
	cJSON *j = cJSON_Parse(s);
	int rc;

	assert_non_null(j);
	rc = fly_msg_decision_from_json(j, &d);
	cJSON_Delete(j);
	return rc;
}

static void test_decision_rejects(void **state)
{
	(void)state;
	assert_int_equal(
	    from_text("{\"status\":\"tuned\",\"provisional\":false,"
		      "\"variant\":\"v\",\"params\":[],"
		      "\"median_us\":0}"),
	    0);
	assert_int_equal(from_text("{\"status\":\"nope\",\"provisional\":false,"
				   "\"variant\":\"v\",\"params\":[],"
				   "\"median_us\":0}"),
			 FLY_E_PROTO);
	assert_int_equal(from_text("{\"status\":\"tuned\",\"variant\":\"v\","
				   "\"params\":[],\"median_us\":0}"),
			 FLY_E_PROTO);
	assert_int_equal(
	    from_text("{\"status\":\"tuned\",\"provisional\":false,"
		      "\"variant\":\"v\",\"params\":[1.5],"
		      "\"median_us\":0}"),
	    FLY_E_PROTO);
	assert_int_equal(
	    from_text("{\"status\":\"tuned\",\"provisional\":false,"
		      "\"variant\":\"v\",\"params\":[1,2,3,4,5,6,7,8,9],"
		      "\"median_us\":0}"),
	    FLY_E_PROTO);
	assert_int_equal(
	    from_text(
		"{\"status\":\"tuned\",\"provisional\":false,"
		"\"variant\":\"0123456789012345678901234567890123456789\","
		"\"params\":[],\"median_us\":0}"),
	    FLY_E_PROTO);
	assert_int_equal(
	    from_text("{\"status\":\"tuned\",\"provisional\":false,"
		      "\"variant\":\"v\",\"params\":[\"1\"],"
		      "\"median_us\":0}"),
	    FLY_E_PROTO);
	assert_int_equal(
	    from_text("{\"status\":\"tuned\",\"provisional\":false,"
		      "\"variant\":\"v\",\"params\":[],"
		      "\"median_us\":-1}"),
	    FLY_E_PROTO);
	assert_int_equal(
	    from_text("{\"status\":\"tuned\",\"provisional\":false,"
		      "\"variant\":\"v\",\"params\":[1e19],"
		      "\"median_us\":0}"),
	    FLY_E_PROTO);
}

static void test_fields(void **state)
{
	cJSON *o = cJSON_Parse("{\"s\":\"x\",\"i\":42,\"f\":1.5,\"b\":true,"
			       "\"n\":null}");
	const char *s = NULL;
	int64_t i = 0;
	int b = 0;

	(void)state;
	assert_int_equal(fly_msg_get_str(o, "s", &s), 0);
	assert_string_equal(s, "x");
	assert_int_equal(fly_msg_get_str(o, "i", &s), FLY_E_PROTO);
	assert_int_equal(fly_msg_get_str(o, "zz", &s), FLY_E_PROTO);
	assert_int_equal(fly_msg_get_int(o, "i", &i), 0);
	assert_int_equal(i, 42);
	assert_int_equal(fly_msg_get_int(o, "f", &i), FLY_E_PROTO);
	assert_int_equal(fly_msg_get_int(o, "s", &i), FLY_E_PROTO);
	assert_int_equal(fly_msg_opt_int(o, "zz", &i), 1);
	assert_int_equal(i, 42);
	assert_int_equal(fly_msg_opt_int(o, "n", &i), FLY_E_PROTO);
	assert_int_equal(fly_msg_opt_str(o, "zz", &s), 1);
	assert_int_equal(fly_msg_opt_str(o, "s", &s), 0);
	assert_int_equal(fly_msg_opt_bool(o, "b", &b), 0);
	assert_int_equal(b, 1);
	assert_int_equal(fly_msg_opt_bool(o, "zz", &b), 1);
	assert_int_equal(fly_msg_opt_bool(o, "i", &b), FLY_E_PROTO);
	cJSON_Delete(o);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_accepts),
	    cmocka_unit_test(test_depth),
	    cmocka_unit_test(test_rejects),
	    cmocka_unit_test(test_print),
	    cmocka_unit_test(test_issue_18_print_long_ints),
	    cmocka_unit_test(test_print_doubles_exact),
	    cmocka_unit_test(test_print_stable_below_1e15),
	    cmocka_unit_test(test_req_table),
	    cmocka_unit_test(test_err_names),
	    cmocka_unit_test(test_error_msg),
	    cmocka_unit_test(test_decision_roundtrip),
	    cmocka_unit_test(test_decision_rejects),
	    cmocka_unit_test(test_fields),
	};

	return cmocka_run_group_tests_name("msg", tests, NULL, NULL);
}
