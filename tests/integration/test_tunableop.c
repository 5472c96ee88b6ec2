/*
 * test_tunableop.c -- PyTorch TunableOp results files, both ways (issue
 * 20 item 3), through flytune-ctl against the real daemon (CPU backend):
 *
 *  - import the real file PyTorch 2.11 wrote on an H200
 *    (tests/fixtures/tunableop/) -> a tune job queued for each GEMM entry,
 *    under the right flytuned key (BLAS's tn_<N>_<M>_<K> is our
 *    gemm/bf16/NT/m=M,n=N,k=K), never imported as a result;
 *  - a malformed file is refused whole (exit 8, nothing queued); rows of
 *    ops flytuned has no key for are skipped and listed;
 *  - export: vendor-algorithm GEMM winners (cublas_default -> Default,
 *    cublaslt of heuristic rank < 8 -> Gemm_Cublaslt_<TA><TB>_<rank>),
 *    as a GPU machine's DB holds them, give exactly the expected rows
 *    with Validator lines; everything else is left out; the file parses
 *    back through the importer to the same keys and solutions.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "../common/daemon.h"
#include "store.h"

#define FIXTURE FLY_SRC_DIR "/tests/fixtures/tunableop/" \
	"tunableop_results_h200_torch2.11.csv"

static struct fly_test_daemon dm;

/* flytune-ctl on this test's daemon, stderr dropped. */
#define ctl(out, ...) fly_test_ctl(dm.sock, 0, (out), __VA_ARGS__)

static cJSON *ctl_json(int want_rc, const char *fmt, const char *arg)
{
	char *out = NULL;
	cJSON *o;

	assert_int_equal(ctl(&out, fmt, arg), want_rc);
	o = cJSON_Parse(out);
	if (o == NULL)
		fail_msg("not JSON: %s", out ? out : "(null)");
	free(out);
	return o;
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *b = calloc(1, 1 << 16);
	size_t n;

	assert_non_null(f);
	n = fread(b, 1, (1 << 16) - 1, f);
	b[n] = '\0';
	fclose(f);
	return b;
}

/* The keys of the daemon's jobs (running and queued), joined by ' '. */
static void job_keys(char *buf, size_t cap)
{
	cJSON *o = ctl_json(0, "--json jobs%s", ""), *j;

	buf[0] = '\0';
	cJSON_ArrayForEach(j, cJSON_GetObjectItem(o, "jobs")) {
		strncat(buf, cJSON_GetObjectItem(j, "key")->valuestring,
			cap - strlen(buf) - 2);
		strcat(buf, " ");
	}
	cJSON_Delete(o);
}

static int n_results(void)
{
	cJSON *o = ctl_json(0, "--json list%s", "");
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

/* ---------------------------------------------------------------- import */

static const char *const fixture_keys[] = {
	"gemm/bf16/NT/m=8,n=4096,k=4096",
	"gemm/bf16/NN/m=8,n=4096,k=4096",
	"gemm/bf16/NT/m=256,n=4096,k=4096",
	"gemm/bf16/NN/m=256,n=4096,k=4096",
	"gemm/bf16/NT/m=4096,n=4096,k=4096",
	"gemm/bf16/NN/m=4096,n=4096,k=4096",
};

static void test_import_pytorch_file(void **state)
{
	char keys[2048], bad[400], mixed[400];
	cJSON *o, *e, *v;
	int i = 0;

	(void)state;
	/* a malformed row refuses the whole file: nothing queued */
	snprintf(bad, sizeof(bad), "%s/bad.csv", dm.dir);
	write_text(bad, "Validator,PT_VERSION,2.11.0\n"
		   "GemmTunableOp_BFloat16_TN,tn_64_8_64_ld_64_64_64,Default,1\n"
		   "GemmTunableOp_BFloat16_TN,tn_64_8,Default,1\n");
	assert_int_equal(ctl(NULL, "import --format tunableop %s", bad), 8);
	job_keys(keys, sizeof(keys));
	assert_string_equal(keys, "");

	o = ctl_json(0, "--json import --format tunableop %s", FIXTURE);
	v = cJSON_GetObjectItem(o, "validators");
	assert_string_equal(cJSON_GetObjectItem(v, "PT_VERSION")->valuestring,
			    "2.11.0");
	assert_int_equal((int)cJSON_GetObjectItem(o, "queued")->valuedouble,
			 6);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(o, "skipped")),
			 0);
	cJSON_ArrayForEach(e, cJSON_GetObjectItem(o, "entries")) {
		cJSON *h = cJSON_GetObjectItem(e, "tunableop");

		assert_true(i < 6);
		assert_string_equal(cJSON_GetObjectItem(e, "key")->valuestring,
				    fixture_keys[i]);
		assert_true(cJSON_IsTrue(cJSON_GetObjectItem(e, "queued")));
		assert_string_equal(
			cJSON_GetObjectItem(h, "solution")->valuestring,
			"Default");
		i++;
	}
	assert_int_equal(i, 6);
	cJSON_Delete(o);
	/* queued as tune jobs for exactly those keys, none imported as a
	 * result: a key not among the jobs any more was measured here (the
	 * CPU backend runs them; its winner is one of its own variants,
	 * which TunableOp's "Default" is not) */
	job_keys(keys, sizeof(keys));
	for (i = 0; i < 6; i++) {
		char *out = NULL;

		if (strstr(keys, fixture_keys[i]) != NULL)
			continue;
		if (ctl(&out, "--json explain %s", fixture_keys[i]) != 0 ||
		    strstr(out, "\"variant\":\"Default\"") != NULL ||
		    strstr(out, "\"trials\":[{") == NULL)
			fail_msg("%s: neither queued nor measured: %s (jobs: "
				 "%s)", fixture_keys[i], out, keys);
		free(out);
	}

	/* ops without a flytuned key are skipped and listed, not errors */
	snprintf(mixed, sizeof(mixed), "%s/mixed.csv", dm.dir);
	write_text(mixed, "Validator,PT_VERSION,2.11.0\r\n"
		   "GemmStridedBatchedTunableOp_BFloat16_TN,"
		   "tn_64_8_64_ld_64_64_64_B_4,Default,0.1\r\n"
		   "GemmTunableOp_double_NN,nn_64_8_64_ld_64_64_64,Default,1\r\n"
		   "GemmTunableOp_Half_NN,nn_64_8_64_ld_128_64_64,Default,1\r\n"
		   "GemmTunableOp_float_TN,tn_64_16_32,Gemm_Cublaslt_TN_2\r\n");
	o = ctl_json(0, "--json import --format tunableop %s", mixed);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(o, "skipped")),
			 3);
	e = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "entries"), 0);
	assert_non_null(e);
	/* tn: BLAS A (our B) transposed, m = our N: our NT, M=16, N=64 (no
	 * ld part: older PyTorch wrote none) */
	assert_string_equal(cJSON_GetObjectItem(e, "key")->valuestring,
			    "gemm/fp32/NT/m=16,n=64,k=32");
	assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(
		e, "tunableop"), "solution")->valuestring, "Gemm_Cublaslt_TN_2");
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(o, "entries")),
			 1);
	cJSON_Delete(o);
}

/* ---------------------------------------------------------------- export */

/* A GPU machine's DB, written straight into the daemon's store under its
 * device id and libver (the CPU backend has no vendor variants). */
static void seed_vendor_results(void)
{
	cJSON *h = ctl_json(0, "--json status%s", "");
	const char *dev = cJSON_GetObjectItem(cJSON_GetObjectItem(h, "device"),
					      "id")->valuestring;
	struct flyd_store *st;
	struct flyd_result rs[6];
	static const struct {
		const char *key, *variant;
		int np;
		int64_t shape;
	} rows[6] = {
		{"gemm/bf16/NT/m=8,n=4096,k=4096", "cublas_default", 0, 0},
		{"gemm/bf16/NN/m=256,n=4096,k=4096", "cublaslt", 8,
		 3 | (5ll << 16)},
		{"gemm/fp16/TN/m=64,n=128,k=256", "cublaslt", 8, 0},
		{"gemm/bf16/NT/m=32,n=64,k=64", "cublaslt", 8, 9},
		{"gemm/bf16/NT/m=16,n=64,k=64", "gemm_blocked", 0, 0},
		{"rmsnorm/fp32/m=8,n=64", "rms_twopass", 0, 0},
	};
	cJSON *hello = ctl_json(0, "--json export --format json%s", "");
	const char *lv = cJSON_GetObjectItem(hello, "libver")->valuestring;

	memset(rs, 0, sizeof(rs));
	for (int i = 0; i < 6; i++) {
		snprintf(rs[i].key, sizeof(rs[i].key), "%s", rows[i].key);
		snprintf(rs[i].device, sizeof(rs[i].device), "%s", dev);
		snprintf(rs[i].libver, sizeof(rs[i].libver), "%s", lv);
		snprintf(rs[i].d.variant, sizeof(rs[i].d.variant), "%s",
			 rows[i].variant);
		rs[i].d.status = FLY_STATUS_TUNED;
		rs[i].d.nparams = (uint32_t)rows[i].np;
		for (int k = 0; k < rows[i].np; k++)
			rs[i].d.params[k] = k + 1;
		if (rows[i].np == 8)
			rs[i].d.params[7] = rows[i].shape;
		rs[i].d.median_us = 12.5 * (i + 1);
		rs[i].tune_s = 1;
		rs[i].tuned_at = (int64_t)time(NULL);
	}
	assert_int_equal(flyd_store_open(dm.db, NULL, &st), 0);
	assert_int_equal(flyd_store_import(st, rs, 6), 0);
	flyd_store_close(st);
	cJSON_Delete(h);
	cJSON_Delete(hello);
}

static void test_export_round_trip(void **state)
{
	char path[400], path2[400];
	char *text, *out = NULL;
	cJSON *o, *e;
	int n = 0;

	(void)state;
	seed_vendor_results();
	assert_int_equal(n_results(), 6);
	snprintf(path, sizeof(path), "%s/out.csv", dm.dir);
	assert_int_equal(ctl(NULL, "export --format tunableop --pt-version "
			     "2.11.0 %s", path), 0);
	text = slurp(path);
	/* in the daemon's key order; m/n swapped to BLAS's, ld of packed
	 * tensors, the time in ms */
	assert_string_equal(text,
		"Validator,PT_VERSION,2.11.0\n"
		"GemmTunableOp_BFloat16_NN,nn_4096_256_4096_ld_4096_4096_4096,"
		"Gemm_Cublaslt_NN_3,0.025\n"
		"GemmTunableOp_BFloat16_TN,tn_4096_8_4096_ld_4096_4096_4096,"
		"Default,0.0125\n"
		"GemmTunableOp_Half_NT,nt_128_64_256_ld_128_64_128,"
		"Gemm_Cublaslt_NT_0,0.0375\n");
	free(text);
	/* to stdout, validators copied from a file PyTorch wrote */
	assert_int_equal(ctl(&out, "export --format tunableop --validators "
			     "%s", FIXTURE), 0);
	assert_true(strncmp(out, "Validator,PT_VERSION,2.11.0\n"
			    "GemmTunableOp_", 42) == 0);
	free(out);
	/* --pt-version only with --format tunableop */
	assert_int_equal(ctl(NULL, "export --pt-version 2.11.0%s", ""), 2);

	/* round trip: the importer reads it back to the same keys, and a
	 * key tuned already is not queued again */
	o = ctl_json(0, "--json import --format tunableop %s", path);
	assert_int_equal((int)cJSON_GetObjectItem(o, "queued")->valuedouble,
			 0);
	cJSON_ArrayForEach(e, cJSON_GetObjectItem(o, "entries")) {
		const char *k = cJSON_GetObjectItem(e, "key")->valuestring;
		const char *s = cJSON_GetObjectItem(cJSON_GetObjectItem(
			e, "tunableop"), "solution")->valuestring;

		assert_string_equal(cJSON_GetObjectItem(e, "status")->valuestring,
				    "tuned");
		if (strcmp(k, "gemm/bf16/NN/m=256,n=4096,k=4096") == 0)
			assert_string_equal(s, "Gemm_Cublaslt_NN_3");
		else if (strcmp(k, "gemm/bf16/NT/m=8,n=4096,k=4096") == 0)
			assert_string_equal(s, "Default");
		else if (strcmp(k, "gemm/fp16/TN/m=64,n=128,k=256") == 0)
			assert_string_equal(s, "Gemm_Cublaslt_NT_0");
		else
			fail_msg("unexpected key %s", k);
		n++;
	}
	assert_int_equal(n, 3);
	cJSON_Delete(o);
	/* and it is a file the exporter writes again unchanged */
	snprintf(path2, sizeof(path2), "%s/out2.csv", dm.dir);
	assert_int_equal(ctl(NULL, "export --format tunableop --validators "
			     "%s %s", path, path2), 0);
	text = slurp(path);
	out = slurp(path2);
	assert_string_equal(text, out);
	free(text);
	free(out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_import_pytorch_file, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_export_round_trip, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
