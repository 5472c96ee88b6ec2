/*
 * cmd_query.c -- the subcommands that ask and show: status, stats, get
 * (flat "name: value" lines), metrics (the Prometheus text as is), list
 * (paged, one row per key), jobs and cancel.
 *
 * Owns: nothing between calls.  Thread: main.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ctl.h"

/* A request with no arguments, printed flat or as JSON. */
static int simple(struct ctl *x, int argc, char **argv, const char *req)
{
	int rc = ctl_parse_simple(x, argc, argv, 0);

	if (rc >= 0)
		return rc;
	return ctl_call_out(x, ctl_req(req), ctl_text_flat);
}

int ctl_status(struct ctl *x, int argc, char **argv)
{
	return simple(x, argc, argv, "status");
}

/* `fleet`: the status reply's "fleet" object alone (its --json too). */
int ctl_fleet(struct ctl *x, int argc, char **argv)
{
	int rc = ctl_parse_simple(x, argc, argv, 0);
	cJSON *resp, *f;

	if (rc >= 0)
		return rc;
	rc = ctl_call(x, ctl_req("status"), 0, &resp);
	if (rc != CTL_OK)
		return rc;
	f = cJSON_DetachItemFromObjectCaseSensitive(resp, "fleet");
	cJSON_Delete(resp);
	if (f == NULL) { /* a daemon older than the fleet */
		f = cJSON_CreateObject();
		cJSON_AddStringToObject(f, "state", "off");
	}
	ctl_out(x, f, ctl_text_flat);
	cJSON_Delete(f);
	return CTL_OK;
}

int ctl_stats(struct ctl *x, int argc, char **argv)
{
	return simple(x, argc, argv, "stats");
}

/* The reply's "text" exactly as the daemon rendered it (the exposition
 * format ends every line with a newline). */
static void print_metrics(const cJSON *doc)
{
	const char *t = ctl_str(doc, "text");

	if (t != NULL)
		fputs(t, stdout);
}

int ctl_metrics(struct ctl *x, int argc, char **argv)
{
	int rc = ctl_parse_simple(x, argc, argv, 0);

	if (rc >= 0)
		return rc;
	return ctl_call_out(x, ctl_req("metrics"), print_metrics);
}

int ctl_get(struct ctl *x, int argc, char **argv)
{
	cJSON *req;
	int rc = ctl_key_req(x, argc, argv, "get", &req);

	return rc != CTL_OK ? rc : ctl_call_out(x, req, ctl_text_flat);
}

/* One row per key: a result's variant and median, or an untuned key's
 * status and state. */
static void print_list(const cJSON *doc)
{
	const cJSON *r;

	cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(doc, "results")) {
		const char *key = ctl_str(r, "key");

		if (ctl_str(r, "state") != NULL) /* pending, default */
			printf("%-48s %-8s %s\n", key ? key : "?",
			       ctl_str(r, "status") ? ctl_str(r, "status") : "",
			       ctl_str(r, "state"));
		else
			printf("%-48s %-24s %12.3f\n", key ? key : "?",
			       ctl_str(r, "variant") ? ctl_str(r, "variant")
						     : "",
			       ctl_num(r, "median_us"));
	}
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
	cJSON *base = ctl_req("list"), *all, *doc;
	int ch, rc;

	opterr = 0;
	optind = 0; /* 0: glibc re-initialises (permuting again) */
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
	doc = cJSON_CreateObject();
	if (doc == NULL) {
		cJSON_Delete(all);
		return CTL_ERR;
	}
	cJSON_AddTrueToObject(doc, "ok");
	cJSON_AddItemToObject(doc, "results", all);
	cJSON_AddNullToObject(doc, "next");
	ctl_out(x, doc, print_list);
	cJSON_Delete(doc);
	return CTL_OK;
}

static void print_jobs(const cJSON *resp)
{
	const cJSON *jobs = cJSON_GetObjectItemCaseSensitive(resp, "jobs");
	const cJSON *j;

	if (cJSON_GetArraySize(jobs) == 0) {
		printf("no jobs\n");
		return;
	}
	printf("%-4s %-8s %-48s %-10s %6s  %s\n", "pos", "state", "key",
	       "priority", "faults", "running");
	cJSON_ArrayForEach(j, jobs) {
		const char *st = ctl_str(j, "state");
		double run = ctl_num(j, "running_s");

		printf("%-4.0f %-8s %-48s %-10s %6.0f  ",
		       ctl_num(j, "position"), st ? st : "?",
		       ctl_str(j, "key") ? ctl_str(j, "key") : "?",
		       ctl_str(j, "priority") ? ctl_str(j, "priority")
						: "?",
		       ctl_num(j, "faults"));
		if (!isnan(run))
			printf("%.1f s", run);
		printf("%s", cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
				     j, "force")) ? " (force)" : "");
		ctl_print_fleet_job(j);
		printf("\n");
	}
}

int ctl_jobs(struct ctl *x, int argc, char **argv)
{
	int rc = ctl_parse_simple(x, argc, argv, 0);

	if (rc >= 0)
		return rc;
	return ctl_call_out(x, ctl_req("jobs"), print_jobs);
}

static void print_cancel(const cJSON *resp)
{
	printf("cancelled %s (was %s)\n",
	       ctl_str(resp, "key") ? ctl_str(resp, "key") : "?",
	       ctl_str(resp, "was") ? ctl_str(resp, "was") : "?");
}

int ctl_cancel(struct ctl *x, int argc, char **argv)
{
	cJSON *req;
	int rc = ctl_key_req(x, argc, argv, "cancel", &req);

	return rc != CTL_OK ? rc : ctl_call_out(x, req, print_cancel);
}
