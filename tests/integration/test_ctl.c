/*
 * test_ctl.c -- flytune-ctl against the real daemon (flytuned-test, CPU
 * backend), run as a program (FLY_BUILD_DIR "/flytune-ctl") through
 * popen: every subcommand, --json outputs validated against schemas/,
 * the documented exit codes (2 usage, 3 daemon down, 4 not found, 8 bad
 * key / bad import file), and export -> forget --all -> import giving
 * back byte-identical export files.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../common/daemon.h"
#include "../common/jsonschema.h"

static struct fly_test_daemon dm;
static const char *key_a = "rmsnorm/fp32/m=8,n=64";
static const char *key_b = "rmsnorm/fp32/m=16,n=32";

/* Run "flytune-ctl --socket SOCK ARGS" (stderr dropped unless @p err2out);
 * @return its exit code; *out (caller frees) is its stdout. */
static int ctl(char **out, int err2out, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int ctl(char **out, int err2out, const char *fmt, ...)
{
	char args[4096], cmd[8192];
	size_t n = 0, cap = 65536;
	char *buf = malloc(cap);
	va_list ap;
	FILE *p;
	int st;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "%s/flytune-ctl --socket %s %s %s",
		 FLY_BUILD_DIR, dm.sock, args,
		 err2out ? "2>&1" : "2>/dev/null");
	p = popen(cmd, "r");
	assert_non_null(p);
	for (;;) {
		size_t r;

		if (n + 1 >= cap)
			buf = realloc(buf, cap *= 2);
		r = fread(buf + n, 1, cap - n - 1, p);
		if (r == 0)
			break;
		n += r;
	}
	buf[n] = '\0';
	st = pclose(p);
	if (out)
		*out = buf;
	else
		free(buf);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void valid(const char *schema, const char *json)
{
	char err[512] = "";
	int rc = fly_test_schema_validate_text(schema, json, err, sizeof(err));

	if (rc != 0)
		fail_msg("%s: %s\n%s", schema, err, json);
}

/* Validate a ctl --json run and return its parsed output. */
static cJSON *ctl_json(int want_rc, const char *schema, const char *args)
{
	char *out;
	cJSON *o;

	assert_int_equal(ctl(&out, 0, "--json %s", args), want_rc);
	valid(schema, out);
	o = cJSON_Parse(out);
	assert_non_null(o);
	free(out);
	return o;
}

static int n_results(void)
{
	cJSON *o = ctl_json(0, "list.response.json", "list");
	int n = cJSON_GetArraySize(cJSON_GetObjectItem(o, "results"));

	cJSON_Delete(o);
	return n;
}

static int setup(void **state)
{
	(void)state;
	if (fly_test_daemon_start(&dm, NULL, NULL) < 0) {
		fly_test_daemon_print_log(&dm);
		return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	fly_test_daemon_cleanup(&dm);
	return 0;
}

static void test_usage_and_help(void **state)
{
	char *out;

	(void)state;
	assert_int_equal(ctl(NULL, 0, "%s", ""), 2);
	assert_int_equal(ctl(NULL, 0, "frobnicate"), 2);
	assert_int_equal(ctl(NULL, 0, "--bogus status"), 2);
	assert_int_equal(ctl(NULL, 0, "get"), 2);
	assert_int_equal(ctl(NULL, 0, "get %s %s", key_a, key_b), 2);
	assert_int_equal(ctl(NULL, 0, "tune %s --timeout abc", key_a), 2);
	assert_int_equal(ctl(NULL, 0, "export --format xml"), 2);
	assert_int_equal(ctl(NULL, 0, "forget"), 2);
	assert_int_equal(ctl(&out, 0, "--help"), 0);
	assert_non_null(strstr(out, "Exit codes"));
	assert_non_null(strstr(out, "10  timeout"));
	free(out);
	assert_int_equal(ctl(&out, 0, "help tune"), 0);
	assert_non_null(strstr(out, "tune KEY [--wait]"));
	free(out);
	assert_int_equal(ctl(&out, 0, "explain --help"), 0);
	assert_non_null(strstr(out, "explain KEY"));
	free(out);
	assert_int_equal(ctl(&out, 0, "--version"), 0);
	assert_non_null(strstr(out, "flytune-ctl"));
	free(out);
}

static void test_bad_key_is_8(void **state)
{
	(void)state;
	assert_int_equal(ctl(NULL, 0, "get gemm/bf16"), 8);
	assert_int_equal(ctl(NULL, 0, "get GEMM/bf16/NT/m=1,n=1,k=1"), 8);
	assert_int_equal(ctl(NULL, 0, "explain 'rmsnorm/fp32/n=64,m=8'"), 8);
	assert_int_equal(ctl(NULL, 0, "tune rmsnorm/fp32/m=0,n=64"), 8);
	assert_int_equal(ctl(NULL, 0, "forget x"), 8);
}

static void test_daemon_down_is_3(void **state)
{
	char cmd[512];
	int st;

	(void)state;
	snprintf(cmd, sizeof(cmd), "%s/flytune-ctl --socket /nonexistent/x.sock "
		 "status 2>/dev/null", FLY_BUILD_DIR);
	st = system(cmd);
	assert_int_equal(WEXITSTATUS(st), 3);
	snprintf(cmd, sizeof(cmd), "%s/flytune-ctl --socket /nonexistent/x.sock "
		 "get %s 2>/dev/null", FLY_BUILD_DIR, key_a);
	st = system(cmd);
	assert_int_equal(WEXITSTATUS(st), 3);
}

static void test_status_stats(void **state)
{
	char *out;

	(void)state;
	assert_int_equal(ctl(&out, 0, "stats"), 0);
	assert_non_null(strstr(out, "requests: "));
	free(out);
	assert_int_equal(ctl(&out, 0, "status"), 0);
	assert_non_null(strstr(out, "state: "));
	free(out);
}

static void test_tune_get_explain_list(void **state)
{
	cJSON *o, *r;
	char *out;
	int found = 0;

	(void)state;
	/* not tuned yet: 4, and the error reply is a valid error object */
	assert_int_equal(ctl(NULL, 0, "get %s", key_a), 4);
	cJSON_Delete(ctl_json(4, "error.response.json", "get rmsnorm/fp32/m=8,n=64"));
	/* --wait on a pipe: no progress line (no \r) */
	assert_int_equal(ctl(&out, 1, "tune %s --wait --timeout 120", key_a),
			 0);
	assert_null(strchr(out, '\r'));
	assert_non_null(strstr(out, key_a));
	free(out);
	o = ctl_json(0, "get.response.json", "get rmsnorm/fp32/m=8,n=64");
	r = cJSON_GetObjectItem(o, "result");
	assert_string_equal(cJSON_GetObjectItem(r, "key")->valuestring, key_a);
	cJSON_Delete(o);
	o = ctl_json(0, "explain.response.json",
		     "explain rmsnorm/fp32/m=8,n=64");
	assert_true(cJSON_GetArraySize(cJSON_GetObjectItem(o, "trials")) >= 1);
	cJSON_Delete(o);
	assert_int_equal(ctl(&out, 0, "explain %s", key_a), 0);
	assert_non_null(strstr(out, "winner"));
	assert_non_null(strstr(out, "median_us"));
	free(out);
	o = ctl_json(0, "list.response.json", "list --op rmsnorm");
	cJSON_ArrayForEach(r, cJSON_GetObjectItem(o, "results"))
		found += strcmp(cJSON_GetObjectItem(r, "key")->valuestring,
				key_a) == 0;
	assert_int_equal(found, 1);
	cJSON_Delete(o);
	o = ctl_json(0, "list.response.json", "list --op gemm");
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(o, "results")),
			 0);
	cJSON_Delete(o);
	assert_int_equal(ctl(NULL, 0, "tune %s", key_a), 0);
	assert_int_equal(ctl(&out, 0, "list"), 0);
	assert_non_null(strstr(out, key_a));
	free(out);
}

/* The daemon's status, stats and tune replies, as printed by --json, against
 * their schemas (kept apart so a daemon/schema mismatch shows up as this
 * one failure, not as a stop in the middle of the other checks). */
static void test_json_status_stats_tune(void **state)
{
	(void)state;
	cJSON_Delete(ctl_json(0, "status.response.json", "status"));
	cJSON_Delete(ctl_json(0, "stats.response.json", "stats"));
	cJSON_Delete(ctl_json(0, "tune.response.json",
			      "tune rmsnorm/fp32/m=8,n=64"));
}

/* Read a whole file (caller frees). */
static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *b;
	long n;

	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	b = malloc((size_t)n + 1);
	assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
	b[n] = '\0';
	fclose(f);
	*len = (size_t)n;
	return b;
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void test_export_forget_import(void **state)
{
	char a[400], b[400], bad[400], big[400];
	char *ta, *tb, *out;
	size_t la, lb;
	cJSON *doc;
	int n, fd;

	(void)state;
	assert_int_equal(ctl(NULL, 0, "tune %s --wait --timeout 120", key_b), 0);
	n = n_results();
	assert_true(n >= 2);
	snprintf(a, sizeof(a), "%s/a.json", dm.dir);
	snprintf(b, sizeof(b), "%s/b.json", dm.dir);
	assert_int_equal(ctl(NULL, 0, "export %s", a), 0);
	ta = slurp(a, &la);
	valid("export-file.json", ta);
	/* stdout export is the same document */
	assert_int_equal(ctl(&out, 0, "export"), 0);
	assert_string_equal(out, ta);
	free(out);
	assert_int_equal(ctl(&out, 0, "export --format csv -"), 0);
	assert_true(strncmp(out, "key,device,libver,variant,params,", 33) == 0);
	{
		int lines = 0;

		for (char *p = out; *p; p++)
			lines += *p == '\n';
		assert_int_equal(lines, n + 1);
	}
	free(out);

	cJSON_Delete(ctl_json(0, "forget.response.json", "forget --all"));
	assert_int_equal(n_results(), 0);
	assert_int_equal(ctl(NULL, 0, "get %s", key_a), 4);
	{
		char args[450];

		snprintf(args, sizeof(args), "import %s", a);
		cJSON_Delete(ctl_json(0, "import.response.json", args));
	}
	assert_int_equal(n_results(), n);
	assert_int_equal(ctl(NULL, 0, "export %s", b), 0);
	tb = slurp(b, &lb);
	assert_int_equal(la, lb);
	assert_memory_equal(ta, tb, la);
	free(tb);

	/* bad files: 8, and nothing changes */
	snprintf(bad, sizeof(bad), "%s/bad.json", dm.dir);
	write_text(bad, "{\"format\":\"other\",\"version\":1}");
	assert_int_equal(ctl(NULL, 0, "import %s", bad), 8);
	write_text(bad, "{\"format\":\"flytuned-export\",");
	assert_int_equal(ctl(NULL, 0, "import %s", bad), 8);
	doc = cJSON_Parse(ta);
	cJSON_ReplaceItemInObject(
		cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "results"), 0),
		"key", cJSON_CreateString("rmsnorm/fp32/m=0,n=64"));
	out = cJSON_Print(doc);
	write_text(bad, out);
	free(out);
	cJSON_Delete(doc);
	assert_int_equal(ctl(NULL, 0, "forget --all"), 0);
	assert_int_equal(ctl(NULL, 0, "import %s", bad), 8);
	assert_int_equal(n_results(), 0);
	assert_int_equal(ctl(NULL, 0, "import %s/missing.json", dm.dir), 1);
	/* over the 64 MiB cap: refused before reading (a sparse file) */
	snprintf(big, sizeof(big), "%s/big.json", dm.dir);
	fd = open(big, O_CREAT | O_WRONLY | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 65 * 1024 * 1024), 0);
	close(fd);
	assert_int_equal(ctl(NULL, 0, "import %s", big), 8);
	assert_int_equal(ctl(NULL, 0, "import %s", a), 0);
	assert_int_equal(n_results(), n);
	free(ta);
}

/* Many results: import goes in several chunks and commits them all. */
static void test_import_many_chunks(void **state)
{
	char path[400], key[96];
	cJSON *doc, *res, *tmpl;
	char *text, *out;
	size_t len;
	int total = 1500;

	(void)state;
	snprintf(path, sizeof(path), "%s/many.json", dm.dir);
	assert_int_equal(ctl(NULL, 0, "export %s", path), 0);
	text = slurp(path, &len);
	doc = cJSON_Parse(text);
	free(text);
	res = cJSON_GetObjectItem(doc, "results");
	assert_true(cJSON_GetArraySize(res) >= 1);
	tmpl = cJSON_Duplicate(cJSON_GetArrayItem(res, 0), 1);
	/* A point feasible for every key below (import checks it against
	 * the registry; the exported winner was tuned for another m). */
	cJSON_ReplaceItemInObject(tmpl, "variant", cJSON_CreateString("rms_vec"));
	cJSON_ReplaceItemInObject(tmpl, "params",
				  cJSON_CreateIntArray((const int[]){ 1, 1, 1 },
						       3));
	while (cJSON_GetArraySize(res) > 0)
		cJSON_DeleteItemFromArray(res, 0);
	for (int i = 0; i < total; i++) {
		cJSON *r = cJSON_Duplicate(tmpl, 1);

		snprintf(key, sizeof(key), "rmsnorm/fp32/m=4,n=%d", 100 + i);
		cJSON_ReplaceItemInObject(r, "key", cJSON_CreateString(key));
		cJSON_AddItemToArray(res, r);
	}
	cJSON_Delete(tmpl);
	text = cJSON_Print(doc);
	write_text(path, text);
	free(text);
	cJSON_Delete(doc);
	assert_int_equal(ctl(NULL, 0, "forget --all"), 0);
	assert_int_equal(ctl(&out, 0, "import %s", path), 0);
	free(out);
	assert_int_equal(n_results(), total); /* list pages through all */
	assert_int_equal(ctl(NULL, 0, "get rmsnorm/fp32/m=4,n=%d",
			     100 + total - 1), 0);
	assert_int_equal(ctl(NULL, 0, "forget rmsnorm/fp32/m=4,n=100"), 0);
	assert_int_equal(ctl(NULL, 0, "get rmsnorm/fp32/m=4,n=100"), 4);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_usage_and_help),
		cmocka_unit_test(test_bad_key_is_8),
		cmocka_unit_test(test_daemon_down_is_3),
		cmocka_unit_test(test_status_stats),
		cmocka_unit_test(test_tune_get_explain_list),
		cmocka_unit_test(test_export_forget_import),
		cmocka_unit_test(test_import_many_chunks),
		cmocka_unit_test(test_json_status_stats_tune),
	};

	return cmocka_run_group_tests_name("ctl", tests, setup, teardown);
}
