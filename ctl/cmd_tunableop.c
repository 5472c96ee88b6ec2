/*
 * cmd_tunableop.c -- PyTorch TunableOp results files, both ways (issue
 * 20): `export --format tunableop` writes flytuned's GEMM winners that are
 * vendor algorithms as TunableOp rows; `import --format tunableop FILE`
 * reads such a file and queues a tune job per GEMM entry.
 *
 * Owns: the file it writes or reads.  Thread: main.
 *
 * The file (PyTorch aten/src/ATen/cuda/tunable/README.md; a real one
 * written by PyTorch 2.11 on an H200 is tests/fixtures/tunableop/): CSV
 * lines, first "Validator,NAME,VALUE" (PT_VERSION always; ROCm builds add
 * their library versions; a file whose validators differ from the running
 * PyTorch's is rejected by it), then "OP,PARAMS,SOLUTION,TIME_MS".  A GEMM
 * is OP "GemmTunableOp_<T>_<TA><TB>" (T float, Half, BFloat16) and PARAMS
 * "<ta><tb>_<m>_<n>_<k>_ld_<lda>_<ldb>_<ldc>" in BLAS's column-major
 * terms: PyTorch's row-major C[M,N] = A[M,K] B runs as C^T = B^T A^T, so
 * BLAS m = our N, n = our M, BLAS's A is our B and its B our A: flytuned
 * layout XY (X for A, Y for B) is TunableOp's YX.  gemm/bf16/NT/m=8,n=4096,
 * k=4096 is "GemmTunableOp_BFloat16_TN,tn_4096_8_4096_ld_4096_4096_4096".
 *
 * Solutions: "Default" is PyTorch's plain cuBLAS call, flytuned's
 * "cublas_default"; "Gemm_Cublaslt_<TA><TB>_<i>" is the i-th algorithm
 * cuBLASLt's heuristic returns (PyTorch asks for 8), flytuned's
 * "cublaslt" whose heuristic rank (params[7] bits 0..15, see
 * kernels/gpu/gemm_vendor.h) is i < 8.  That rank names the same
 * algorithm only while PyTorch's heuristic query (its workspace, the
 * operands' alignment) ranks as flytuned's did; PyTorch replays the index,
 * it does not check it.  Every other winner (our own kernels) has no
 * TunableOp name and is left out.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

#define TOP_MAX 8 /* PyTorch's cublasLtMatmulAlgoGetHeuristic count */

static const struct {
	uint32_t dt;
	const char *fly;
	const char *torch;
} dtypes[] = {
	{ FLY_DT_FP32, "fp32", "float" },
	{ FLY_DT_FP16, "fp16", "Half" },
	{ FLY_DT_BF16, "bf16", "BFloat16" },
};
#define NDTYPES (sizeof(dtypes) / sizeof(dtypes[0]))

/* Layout names by enum fly_layout (proto/fly_key.c's, not exported to
 * ctl/). */
static const char *const layouts[FLY_LAYOUT_COUNT] = {
	[FLY_LAYOUT_NT] = "NT", [FLY_LAYOUT_NN] = "NN",
	[FLY_LAYOUT_TN] = "TN", [FLY_LAYOUT_TT] = "TT",
};

/* One TunableOp GEMM row. */
struct trow {
	char op[64];
	char params[160];
	char solution[48];
	double ms;
	char key[FLY_KEY_MAX];  /* flytuned's key */
};

/* ---------------------------------------------------------------- export */

/* The TunableOp solution of a winner, or NULL when it has none. */
static const char *solution_of(const cJSON *r, char ta, char tb, char *buf,
			       size_t cap)
{
	const char *v = ctl_str(r, "variant");
	const cJSON *ps = cJSON_GetObjectItemCaseSensitive(r, "params");
	const cJSON *shape = cJSON_GetArrayItem(ps, 7);
	int64_t rank;

	if (v == NULL)
		return NULL;
	if (strcmp(v, "cublas_default") == 0)
		return "Default";
	if (strcmp(v, "cublaslt") != 0 || cJSON_GetArraySize(ps) != 8 ||
	    !cJSON_IsNumber(shape))
		return NULL;
	rank = (int64_t)shape->valuedouble & 0xffff;
	if (rank >= TOP_MAX)
		return NULL;
	snprintf(buf, cap, "Gemm_Cublaslt_%c%c_%d", ta, tb, (int)rank);
	return buf;
}

/* A result as a TunableOp row.  @return 0, or -1 when it has none (not a
 * plain GEMM of a TunableOp dtype, or not a vendor algorithm). */
static int row_of(const cJSON *r, struct trow *t)
{
	const char *key = ctl_str(r, "key"), *lay, *sol;
	struct fly_problem p;
	long long m, n, k, lda, ldb;
	char ta, tb, sbuf[48];
	size_t i;

	if (key == NULL || fly_problem_from_key(key, &p) < 0 ||
	    p.op != FLY_OP_GEMM || p.flags != 0)
		return -1;
	for (i = 0; i < NDTYPES && dtypes[i].dt != p.dtype; i++)
		;
	if (i == NDTYPES || p.layout >= FLY_LAYOUT_COUNT ||
	    (lay = layouts[p.layout]) == NULL)
		return -1;
	ta = lay[1]; /* BLAS's A is our B */
	tb = lay[0];
	sol = solution_of(r, ta, tb, sbuf, sizeof(sbuf));
	if (sol == NULL)
		return -1;
	m = p.dims[0];
	n = p.dims[1];
	k = p.dims[2];
	lda = ta == 'T' ? k : n;
	ldb = tb == 'T' ? m : k;
	snprintf(t->op, sizeof(t->op), "GemmTunableOp_%s_%c%c",
		 dtypes[i].torch, ta, tb);
	snprintf(t->params, sizeof(t->params),
		 "%c%c_%lld_%lld_%lld_ld_%lld_%lld_%lld", tolower(ta),
		 tolower(tb), n, m, k, lda, ldb, n);
	snprintf(t->solution, sizeof(t->solution), "%s", sol);
	t->ms = ctl_num(r, "median_us") / 1000.0;
	snprintf(t->key, sizeof(t->key), "%s", key);
	return 0;
}

/* PyTorch's version as TunableOp's PT_VERSION ("2.11.0" of
 * "2.11.0+cu130"), from the python3 on PATH.  @return 0 or -1. */
static int torch_version(char *buf, size_t cap)
{
	FILE *f = popen("python3 -c 'import sys, torch; "
			"sys.stdout.write(torch.__version__)' 2>/dev/null",
			"r");
	size_t n = 0;

	if (f == NULL)
		return -1;
	if (fgets(buf, (int)cap, f) != NULL)
		n = strcspn(buf, "+ \n");
	if (pclose(f) != 0 || n == 0 || !isdigit((unsigned char)buf[0]))
		return -1;
	buf[n] = '\0';
	return 0;
}

/* The Validator lines: those of @p from (a file PyTorch wrote here), else
 * PT_VERSION @p pt (else the one python3's torch reports).
 * @return CTL_OK or an exit code (message printed). */
static int validators(const char *from, const char *pt, FILE *out)
{
	char ver[64], *buf, *line, *save = NULL;
	size_t len;
	int n = 0, rc;

	if (from == NULL) {
		if (pt == NULL && torch_version(ver, sizeof(ver)) < 0) {
			ctl_err("invalid", "export failed: PyTorch's version is "
				"unknown (no 'import torch' in python3): give "
				"--pt-version X.Y.Z or --validators FILE");
			return CTL_USAGE;
		}
		fprintf(out, "Validator,PT_VERSION,%s\n", pt ? pt : ver);
		return CTL_OK;
	}
	rc = ctl_read_file(from, &buf, &len);
	if (rc != CTL_OK)
		return rc;
	for (line = strtok_r(buf, "\n", &save); line != NULL;
	     line = strtok_r(NULL, "\n", &save)) {
		line[strcspn(line, "\r")] = '\0';
		if (strncmp(line, "Validator,", 10) == 0) {
			fprintf(out, "%s\n", line);
			n++;
		}
	}
	free(buf);
	if (n == 0) {
		ctl_err("invalid", "export failed: %s has no Validator line",
			from);
		return CTL_INVALID;
	}
	return CTL_OK;
}

int ctl_export_tunableop(struct ctl *x, const cJSON *results,
			 const char *file, const char *pt, const char *from)
{
	int to_stdout = strcmp(file, "-") == 0, n = 0, skipped = 0, rc, bad;
	FILE *f = to_stdout ? stdout : fopen(file, "w");
	const cJSON *r;
	struct trow t;

	if (f == NULL) {
		ctl_err("internal", "export failed: %s: %s", file,
			strerror(errno));
		return CTL_ERR;
	}
	rc = validators(from, pt, f);
	cJSON_ArrayForEach(r, results) {
		if (rc != CTL_OK)
			break;
		if (row_of(r, &t) < 0) {
			skipped++;
			continue;
		}
		fprintf(f, "%s,%s,%s,%.6g\n", t.op, t.params, t.solution, t.ms);
		n++;
	}
	bad = ferror(f) | (to_stdout ? fflush(f) : fclose(f));
	if (rc == CTL_OK && bad) {
		ctl_err("internal", "export failed: %s: write error", file);
		rc = CTL_ERR;
	}
	if (rc == CTL_OK && !to_stdout)
		ctl_export_done(x, file, n);
	if (rc == CTL_OK && !x->json)
		fprintf(stderr, "%d result(s) left out: not a plain GEMM "
			"winner that is a vendor algorithm\n", skipped);
	return rc;
}

/* ---------------------------------------------------------------- import */

/* Parse PARAMS "<ta><tb>_<m>_<n>_<k>[_ld_<lda>_<ldb>_<ldc>]" into its
 * numbers.  @return 0, -1 (not that shape). */
static int parse_params(const char *s, char lay[3], long long v[6],
			int *has_ld)
{
	int used = 0;

	*has_ld = 0;
	if (sscanf(s, "%2[nt]_%lld_%lld_%lld%n", lay, &v[0], &v[1], &v[2],
		   &used) != 4 || strlen(lay) != 2)
		return -1;
	s += used;
	if (*s == '\0')
		return 0;
	used = 0;
	if (sscanf(s, "_ld_%lld_%lld_%lld%n", &v[3], &v[4], &v[5], &used) !=
	    3 || s[used] != '\0')
		return -1;
	*has_ld = 1;
	return 0;
}

/* Split a line into at most @p max comma-separated fields (in place).
 * @return the number of fields. */
static int split(char *line, char **f, int max)
{
	int n = 0;

	for (char *p = line; n < max; ) {
		f[n++] = p;
		p = strchr(p, ',');
		if (p == NULL)
			break;
		*p++ = '\0';
	}
	return n;
}

/* A GEMM row (fields @p f, @p nf of them) to a flytuned key.
 * @return 0, 1 (skipped: *why says why), -1 (malformed: *why). */
static int gemm_row(char **f, int nf, struct trow *t, const char **why)
{
	char dt[32], ta, tb, lay[3];
	long long v[6];
	int has_ld;
	size_t i, ol;
	struct fly_problem p;

	ol = strlen(f[0]);
	if (ol < 18 || f[0][ol - 3] != '_') {
		*why = "not a GemmTunableOp_<T>_<TA><TB> op";
		return -1;
	}
	ta = f[0][ol - 2];
	tb = f[0][ol - 1];
	snprintf(dt, sizeof(dt), "%.*s", (int)(ol - 3 - 14), f[0] + 14);
	for (i = 0; i < NDTYPES && strcmp(dtypes[i].torch, dt) != 0; i++)
		;
	if (i == NDTYPES) {
		*why = "a dtype flytuned does not tune (float, Half, BFloat16)";
		return 1;
	}
	if (nf < 3 || nf > 4 || parse_params(f[1], lay, v, &has_ld) < 0 ||
	    (ta != 'N' && ta != 'T') || (tb != 'N' && tb != 'T') ||
	    toupper(lay[0]) != ta || toupper(lay[1]) != tb) {
		*why = "expected OP,<ta><tb>_M_N_K[_ld_A_B_C],SOLUTION[,MS] "
		       "with the op's transposes";
		return -1;
	}
	if (has_ld && (v[3] != (ta == 'T' ? v[2] : v[0]) ||
		       v[4] != (tb == 'T' ? v[1] : v[2]) || v[5] != v[0])) {
		*why = "leading dimensions of strided operands (flytuned keys "
		       "are packed tensors)";
		return 1;
	}
	snprintf(t->key, sizeof(t->key), "gemm/%s/%c%c/m=%lld,n=%lld,k=%lld",
		 dtypes[i].fly, tb, ta, v[1], v[0], v[2]);
	if (fly_problem_from_key(t->key, &p) < 0) {
		*why = "its shape is not a valid flytuned gemm key";
		return -1;
	}
	snprintf(t->op, sizeof(t->op), "%s", f[0]);
	snprintf(t->params, sizeof(t->params), "%s", f[1]);
	snprintf(t->solution, sizeof(t->solution), "%s", f[2]);
	t->ms = nf == 4 ? strtod(f[3], NULL) : 0.0;
	return 0;
}

struct tfile {
	struct trow *rows;
	size_t n, cap;
	cJSON *validators;   /* {NAME: VALUE} */
	cJSON *skipped;      /* [{line, op, why}] */
};

/* Read a whole TunableOp file into @p tf.  A malformed line refuses the
 * file (nothing is queued); other ops (strided-batched, scaled, with
 * bias) are skipped and listed.  @return CTL_OK or an exit code. */
static int parse_file(const char *file, char *buf, struct tfile *tf)
{
	char *line, *save = NULL, *fl[5];
	const char *why;
	int no = 0, nf, rc;
	struct trow t;

	for (line = strtok_r(buf, "\n", &save); line != NULL;
	     line = strtok_r(NULL, "\n", &save)) {
		no++; /* blank lines are not counted by strtok: close enough */
		line[strcspn(line, "\r")] = '\0';
		if (line[0] == '\0')
			continue;
		nf = split(line, fl, 5);
		if (strcmp(fl[0], "Validator") == 0) {
			if (nf != 3)
				goto bad_validator;
			cJSON_AddStringToObject(tf->validators, fl[1], fl[2]);
			continue;
		}
		if (strncmp(fl[0], "GemmTunableOp_", 14) != 0) {
			why = "not a plain GEMM (strided-batched, scaled or "
			      "with bias): flytuned has no such key";
			rc = 1;
		} else {
			rc = gemm_row(fl, nf, &t, &why);
		}
		if (rc < 0) {
			ctl_err("invalid", "import failed: %s:%d: %s", file, no,
				why);
			return CTL_INVALID;
		}
		if (rc > 0) {
			cJSON *s = cJSON_CreateObject();

			cJSON_AddNumberToObject(s, "line", no);
			cJSON_AddStringToObject(s, "op", fl[0]);
			cJSON_AddStringToObject(s, "why", why);
			cJSON_AddItemToArray(tf->skipped, s);
			continue;
		}
		if (tf->n == tf->cap) {
			struct trow *r = realloc(tf->rows, (tf->cap * 2 + 16) *
							   sizeof(*r));

			if (r == NULL) {
				ctl_err("internal", "import failed: out of "
					"memory");
				return CTL_ERR;
			}
			tf->rows = r;
			tf->cap = tf->cap * 2 + 16;
		}
		tf->rows[tf->n++] = t;
	}
	return CTL_OK;

bad_validator:
	ctl_err("invalid", "import failed: %s:%d: a Validator line is "
		"Validator,NAME,VALUE", file, no);
	return CTL_INVALID;
}

/* Queue one row's key (tune, not forced); its entry in @p entries. */
static int queue_row(struct ctl *x, const struct trow *t, cJSON *entries,
		     int *queued)
{
	cJSON *req = ctl_req("tune"), *resp, *e, *h;
	int rc;

	if (req != NULL)
		cJSON_AddStringToObject(req, "key", t->key);
	rc = ctl_call(x, req, 0, &resp);
	if (rc != CTL_OK)
		return rc;
	e = cJSON_CreateObject();
	cJSON_AddStringToObject(e, "key", ctl_str(resp, "key") ?
				ctl_str(resp, "key") : t->key);
	cJSON_AddStringToObject(e, "status", ctl_str(resp, "status") ?
				ctl_str(resp, "status") : "");
	*queued = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(resp,
								"queued"));
	cJSON_AddBoolToObject(e, "queued", *queued);
	h = cJSON_AddObjectToObject(e, "tunableop");
	cJSON_AddStringToObject(h, "op", t->op);
	cJSON_AddStringToObject(h, "params", t->params);
	cJSON_AddStringToObject(h, "solution", t->solution);
	cJSON_AddNumberToObject(h, "time_ms", t->ms);
	cJSON_AddItemToArray(entries, e);
	cJSON_Delete(resp);
	return CTL_OK;
}

static void print_tunableop(const cJSON *doc)
{
	const cJSON *e, *h;

	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(doc,
							       "entries")) {
		h = cJSON_GetObjectItemCaseSensitive(e, "tunableop");
		printf("%-8s %-44s (tunableop: %s, %.6g ms)\n",
		       cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
				e, "queued")) ? "queued" : ctl_str(e, "status"),
		       ctl_str(e, "key"), ctl_str(h, "solution"),
		       ctl_num(h, "time_ms"));
	}
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(doc,
							       "skipped"))
		printf("skipped  line %.0f %s: %s\n", ctl_num(e, "line"),
		       ctl_str(e, "op"), ctl_str(e, "why"));
	printf("%.0f queued, %.0f skipped\n", ctl_num(doc, "queued"),
	       (double)cJSON_GetArraySize(
		       cJSON_GetObjectItemCaseSensitive(doc, "skipped")));
}

int ctl_import_tunableop(struct ctl *x, const char *file)
{
	struct tfile tf = {0};
	cJSON *doc = cJSON_CreateObject(), *entries;
	size_t len, i;
	char *buf;
	int rc, nq = 0, q;

	if (doc == NULL)
		return CTL_ERR;
	rc = ctl_read_file(file, &buf, &len);
	if (rc != CTL_OK) {
		cJSON_Delete(doc);
		return rc;
	}
	cJSON_AddTrueToObject(doc, "ok");
	tf.validators = cJSON_AddObjectToObject(doc, "validators");
	entries = cJSON_AddArrayToObject(doc, "entries");
	tf.skipped = cJSON_AddArrayToObject(doc, "skipped");
	rc = parse_file(file, buf, &tf);
	free(buf);
	for (i = 0; rc == CTL_OK && i < tf.n; i++) {
		rc = queue_row(x, &tf.rows[i], entries, &q);
		nq += q;
	}
	free(tf.rows);
	if (rc == CTL_OK) {
		cJSON_AddNumberToObject(doc, "queued", nq);
		ctl_out(x, doc, print_tunableop);
	}
	cJSON_Delete(doc);
	return rc;
}
