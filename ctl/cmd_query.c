/*
 * cmd_query.c -- flytune-ctl's read-only commands: status, stats, get,
 * explain (the trial leaderboard) and list (paged).
 *
 * Owns: nothing beyond each call's JSON trees.  Thread: main.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

/* Parse a subcommand's options: only --json (and --help, handled by
 * main).  Positional arguments are left at argv[optind..]; @p npos is the
 * number required.  @return -1 to go on, else an exit code. */
static int parse_simple(struct ctl *x, int argc, char **argv, int npos)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	opterr = 0;
	optind = 1;
	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (ch != 'j')
			return ctl_usage(x, "unknown option '%s'",
					 argv[optind - 1]);
		x->json = 1;
	}
	if (argc - optind != npos)
		return ctl_usage(x, npos ? "%s needs exactly one KEY" :
					   "%s takes no arguments", x->cmd);
	return -1;
}

/* A request with no arguments, printed flat or as JSON. */
static int simple(struct ctl *x, int argc, char **argv, const char *req)
{
	cJSON *resp;
	int rc = parse_simple(x, argc, argv, 0);

	if (rc >= 0)
		return rc;
	rc = ctl_call(x, ctl_req(req), 0, &resp);
	if (rc != CTL_OK)
		return rc;
	if (x->json)
		ctl_print_json(resp);
	else
		ctl_print_flat(NULL, resp);
	cJSON_Delete(resp);
	return CTL_OK;
}

int ctl_status(struct ctl *x, int argc, char **argv)
{
	return simple(x, argc, argv, "status");
}

int ctl_stats(struct ctl *x, int argc, char **argv)
{
	return simple(x, argc, argv, "stats");
}

/* {"req": name, "key": KEY} after validating KEY.  *req NULL on error. */
static int key_req(struct ctl *x, int argc, char **argv, const char *name,
		   cJSON **req)
{
	int rc = parse_simple(x, argc, argv, 1);

	*req = NULL;
	if (rc >= 0)
		return rc;
	rc = ctl_check_key(x, argv[optind]);
	if (rc != CTL_OK)
		return rc;
	*req = ctl_req(name);
	if (*req != NULL)
		cJSON_AddStringToObject(*req, "key", argv[optind]);
	return CTL_OK;
}

int ctl_get(struct ctl *x, int argc, char **argv)
{
	cJSON *req, *resp;
	int rc = key_req(x, argc, argv, "get", &req);

	if (rc != CTL_OK)
		return rc;
	rc = ctl_call(x, req, 0, &resp);
	if (rc != CTL_OK)
		return rc;
	if (x->json)
		ctl_print_json(resp);
	else
		ctl_print_flat(NULL, resp);
	cJSON_Delete(resp);
	return CTL_OK;
}

/* ---------------------------------------------------------------- explain */

static double num_field(const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static const char *str_field(const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Order trials by median; trials without one (faulted, wrong) last. */
static int trial_cmp(const void *a, const void *b)
{
	double ma = num_field(*(const cJSON *const *)a, "median_us");
	double mb = num_field(*(const cJSON *const *)b, "median_us");

	if (isnan(ma) || isnan(mb))
		return isnan(ma) - isnan(mb);
	return (ma > mb) - (ma < mb);
}

/* The "why" column of one trial. */
static void trial_note(const cJSON *t, double win, double best, int is_win,
		       char *buf, size_t cap)
{
	const char *out = str_field(t, "outcome");
	const char *why = str_field(t, "reason");
	double med = num_field(t, "median_us");
	double reps = num_field(t, "reps");

	if (why == NULL)
		why = str_field(t, "error");
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

/* Print the params array of a trial as "[a,b]". */
static void params_text(const cJSON *t, char *buf, size_t cap)
{
	char *s = cJSON_PrintUnformatted(
		cJSON_GetObjectItemCaseSensitive(t, "params"));

	snprintf(buf, cap, "%s", s ? s : "[]");
	free(s);
}

static void print_leaderboard(const cJSON *resp)
{
	const cJSON *trials = cJSON_GetObjectItemCaseSensitive(resp, "trials");
	const cJSON *res = cJSON_GetObjectItemCaseSensitive(resp, "result");
	const char *wv = str_field(res, "variant");
	int n = cJSON_GetArraySize(trials), i = 0;
	const cJSON **v = calloc((size_t)n + 1, sizeof(*v));
	const cJSON *t;
	double win = num_field(res, "median_us"), best = NAN;
	char note[160], params[128];

	printf("key: %s\n", str_field(resp, "key") ? str_field(resp, "key")
						   : "?");
	printf("winner: %s\n", wv ? wv : "(none)");
	if (v == NULL)
		return;
	cJSON_ArrayForEach(t, trials) v[i++] = t;
	qsort(v, (size_t)n, sizeof(*v), trial_cmp);
	for (i = 0; i < n; i++)
		if (!isnan(num_field(v[i], "median_us")) && isnan(best))
			best = num_field(v[i], "median_us");
	printf("%-4s %-24s %-20s %12s %10s %6s  %s\n", "#", "variant",
	       "params", "median_us", "mad_us", "reps", "outcome");
	for (i = 0; i < n; i++) {
		const char *var = str_field(v[i], "variant");
		int is_win = wv && var && strcmp(var, wv) == 0 &&
			     !isnan(win) &&
			     num_field(v[i], "median_us") == win;

		trial_note(v[i], win, best, is_win, note, sizeof(note));
		params_text(v[i], params, sizeof(params));
		printf("%-4d %-24s %-20s %12.3f %10.3f %6.0f  %s\n", i + 1,
		       var ? var : "?", params, num_field(v[i], "median_us"),
		       num_field(v[i], "mad_us"), num_field(v[i], "reps"),
		       note);
	}
	free(v);
}

int ctl_explain(struct ctl *x, int argc, char **argv)
{
	cJSON *req, *resp;
	int rc = key_req(x, argc, argv, "explain", &req);

	if (rc != CTL_OK)
		return rc;
	rc = ctl_call(x, req, 0, &resp);
	if (rc != CTL_OK)
		return rc;
	if (x->json)
		ctl_print_json(resp);
	else
		print_leaderboard(resp);
	cJSON_Delete(resp);
	return CTL_OK;
}

/* ---------------------------------------------------------------- list */

int ctl_page_all(struct ctl *x, const cJSON *base, cJSON **all)
{
	cJSON *acc = cJSON_CreateArray(), *req, *resp, *res, *next;
	char *after = NULL;
	int rc = CTL_OK;

	*all = NULL;
	while (acc != NULL) {
		req = cJSON_Duplicate(base, 1);
		if (req && after)
			cJSON_AddStringToObject(req, "after", after);
		if (req)
			cJSON_AddNumberToObject(req, "limit", CTL_PAGE);
		rc = ctl_call(x, req, 0, &resp);
		if (rc != CTL_OK)
			break;
		res = cJSON_DetachItemFromObjectCaseSensitive(resp, "results");
		next = cJSON_GetObjectItemCaseSensitive(resp, "next");
		free(after);
		after = cJSON_IsString(next) && next->valuestring[0] ?
				strdup(next->valuestring) : NULL;
		while (cJSON_IsArray(res) && cJSON_GetArraySize(res) > 0)
			cJSON_AddItemToArray(acc,
					     cJSON_DetachItemFromArray(res, 0));
		cJSON_Delete(res);
		cJSON_Delete(resp);
		if (after == NULL) {
			*all = acc;
			return CTL_OK;
		}
	}
	free(after);
	cJSON_Delete(acc);
	return rc == CTL_OK ? CTL_ERR : rc;
}

int ctl_list(struct ctl *x, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "op", required_argument, NULL, 'o' },
		{ "dtype", required_argument, NULL, 'd' },
		{ "status", required_argument, NULL, 's' },
		{ NULL, 0, NULL, 0 },
	};
	cJSON *base = ctl_req("list"), *all, *doc, *r;
	int ch, rc;

	opterr = 0;
	optind = 1;
	while (base && (ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (ch == 'j') {
			x->json = 1;
			continue;
		}
		if (ch == '?' || ch == ':') {
			cJSON_Delete(base);
			return ctl_usage(x, "bad option '%s'",
					 argv[optind - 1]);
		}
		cJSON_AddStringToObject(base, ch == 'o' ? "op" :
					ch == 'd' ? "dtype" : "status", optarg);
	}
	if (base == NULL || optind != argc) {
		cJSON_Delete(base);
		return ctl_usage(x, "list takes no positional arguments");
	}
	rc = ctl_page_all(x, base, &all);
	cJSON_Delete(base);
	if (rc != CTL_OK)
		return rc;
	if (x->json) {
		doc = cJSON_CreateObject();
		cJSON_AddTrueToObject(doc, "ok");
		cJSON_AddItemToObject(doc, "results", all);
		cJSON_AddNullToObject(doc, "next");
		ctl_print_json(doc);
		cJSON_Delete(doc);
		return CTL_OK;
	}
	cJSON_ArrayForEach(r, all) {
		printf("%-48s %-24s %12.3f\n",
		       str_field(r, "key") ? str_field(r, "key") : "?",
		       str_field(r, "variant") ? str_field(r, "variant") : "",
		       num_field(r, "median_us"));
	}
	cJSON_Delete(all);
	return CTL_OK;
}
