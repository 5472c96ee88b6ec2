/*
 * cmd_explain.c -- explain KEY: the trial leaderboard of a key, the
 * winner first, then the measured candidates by median, then those never
 * measured, with noise (MAD), reps, outcome and why losers lost; for a
 * shape off its bucket's representative, its bucket and exact rows and
 * which one answers (issue 22).
 *
 * Owns: nothing between calls.  Thread: main.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

/* A trial's place on the board: the winner, then the measured trials
 * by median, then those never measured (no median, or median 0 with no
 * reps: refused on their warm-up, faulted, wrong), in the daemon's
 * order. */
struct ranked {
	const cJSON *t;
	int cls;      /* 0 winner, 1 measured, 2 not measured */
	double med;
	int idx;      /* position in the reply */
};

static int ranked_cmp(const void *a, const void *b)
{
	const struct ranked *x = a, *y = b;

	if (x->cls != y->cls)
		return x->cls - y->cls;
	if (x->cls == 1 && x->med != y->med)
		return (x->med > y->med) - (x->med < y->med);
	return x->idx - y->idx;
}

/* Whether a trial has a median worth ranking by. */
static int is_measured(const cJSON *t)
{
	const cJSON *reps = cJSON_GetObjectItemCaseSensitive(t, "reps");
	double med = ctl_num(t, "median_us");

	return !isnan(med) && med > 0 &&
	       (!cJSON_IsNumber(reps) || reps->valuedouble > 0);
}

/* Whether trial @p t is the stored winner @p res (variant, params and
 * median agree). */
static int is_winner(const cJSON *t, const cJSON *res)
{
	const char *wv = ctl_str(res, "variant");
	const char *var = ctl_str(t, "variant");
	const cJSON *wp = cJSON_GetObjectItemCaseSensitive(res, "params");
	const cJSON *tp = cJSON_GetObjectItemCaseSensitive(t, "params");

	return wv != NULL && var != NULL && strcmp(wv, var) == 0 &&
	       (wp == NULL || tp == NULL || cJSON_Compare(wp, tp, 1)) &&
	       ctl_num(t, "median_us") == ctl_num(res, "median_us");
}

/* Rank the trials of an explain reply into @p v (n entries). */
static void rank_trials(const cJSON *trials, const cJSON *res,
			struct ranked *v, int n)
{
	const cJSON *t;
	int i = 0, have_win = 0;

	cJSON_ArrayForEach(t, trials) {
		if (i == n)
			break;
		v[i].t = t;
		v[i].idx = i;
		v[i].med = ctl_num(t, "median_us");
		v[i].cls = is_measured(t) ? 1 : 2;
		if (!have_win && v[i].cls == 1 && is_winner(t, res)) {
			v[i].cls = 0;
			have_win = 1;
		}
		i++;
	}
	qsort(v, (size_t)n, sizeof(*v), ranked_cmp);
}

/* The "why" column of one trial. */
static void trial_note(const cJSON *t, double win, double best, int is_win,
		       char *buf, size_t cap)
{
	const char *out = ctl_str(t, "outcome");
	const char *why = ctl_str(t, "reason");
	double med = ctl_num(t, "median_us");
	double reps = ctl_num(t, "reps");

	if (why == NULL)
		why = ctl_str(t, "error");
	if (out == NULL)
		out = "ok";
	if (is_win)
		snprintf(buf, cap, "winner");
	else if (strcmp(out, "rejected") == 0 && !isnan(med) && best > 0)
		snprintf(buf, cap, "rejected after %.0f reps: %.2fx best",
			 isnan(reps) ? 0.0 : reps, med / best);
	else if (strcmp(out, "ok") == 0 && !isnan(med) && win > 0)
		snprintf(buf, cap, "%.2fx slower than winner", med / win);
	else
		snprintf(buf, cap, "%s%s%s", out, why ? ": " : "",
			 why ? why : "");
}

/* One row of explain's "shape": "LABEL KEY  VARIANT MEDIAN us", or
 * "(not tuned)". */
static void print_shape_row(const char *label, const cJSON *shape,
			    const char *kname, const char *rname)
{
	const cJSON *row = cJSON_GetObjectItemCaseSensitive(shape, rname);
	const char *key = ctl_str(shape, kname), *var = ctl_str(row, "variant");

	printf("%-8s %s  ", label, key ? key : "?");
	if (cJSON_IsObject(row) && var != NULL)
		printf("%s %.3f us\n", var, ctl_num(row, "median_us"));
	else
		printf("(not tuned)\n");
}

/* Issue 22: a shape off its bucket's representative has a bucket row and
 * an exact row; say both and which one a decide answers from now. */
static void print_shape(const cJSON *resp)
{
	const cJSON *shape = cJSON_GetObjectItemCaseSensitive(resp, "shape");
	const char *ans = ctl_str(shape, "answers");

	if (!cJSON_IsObject(shape))
		return;
	print_shape_row("bucket:", shape, "bucket_key", "bucket");
	print_shape_row("exact:", shape, "exact_key", "exact");
	printf("answers: %s\n", ans ? ans : "?");
}

static void print_leaderboard(const cJSON *resp)
{
	const cJSON *trials = cJSON_GetObjectItemCaseSensitive(resp, "trials");
	const cJSON *res = cJSON_GetObjectItemCaseSensitive(resp, "result");
	const cJSON *job;
	const char *wv = ctl_str(res, "variant");
	int n = cJSON_GetArraySize(trials), i;
	struct ranked *v = calloc((size_t)n + 1, sizeof(*v));
	double win = ctl_num(res, "median_us"), best = NAN;
	char note[160], params[128], med[24];

	printf("key: %s\n", ctl_str(resp, "key") ? ctl_str(resp, "key")
						   : "?");
	print_shape(resp);
	printf("winner: %s\n", wv ? wv : "(none)");
	job = cJSON_GetObjectItemCaseSensitive(resp, "job");
	if (job != NULL) {
		printf("job: %s", ctl_str(job, "state") ? ctl_str(job, "state")
							: "?");
		ctl_print_fleet_job(job);
		printf("\n");
	}
	if (v == NULL)
		return;
	rank_trials(trials, res, v, n);
	for (i = 0; i < n && isnan(best); i++)
		if (v[i].cls < 2)
			best = v[i].med;
	printf("%-4s %-24s %-20s %12s %10s %6s  %s\n", "#", "variant",
	       "params", "median_us", "mad_us", "reps", "outcome");
	for (i = 0; i < n; i++) {
		const char *var = ctl_str(v[i].t, "variant");

		trial_note(v[i].t, win, best, v[i].cls == 0, note,
			   sizeof(note));
		ctl_params_text(v[i].t, params, sizeof(params));
		if (v[i].cls == 2)
			snprintf(med, sizeof(med), "-");
		else
			snprintf(med, sizeof(med), "%.3f", v[i].med);
		printf("%-4d %-24s %-20s %12s %10.3f %6.0f  %s\n", i + 1,
		       var ? var : "?", params, med,
		       ctl_num(v[i].t, "mad_us"), ctl_num(v[i].t, "reps"),
		       note);
	}
	free(v);
}

int ctl_explain(struct ctl *x, int argc, char **argv)
{
	cJSON *req;
	int rc = ctl_key_req(x, argc, argv, "explain", &req);

	return rc != CTL_OK ? rc : ctl_call_out(x, req, print_leaderboard);
}
