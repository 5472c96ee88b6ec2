/*
 * cmd_admin.c -- flytune-ctl's state-changing commands: tune (with the
 * --wait progress line) and forget.
 *
 * Owns: the progress thread of a waiting tune.  Thread: main, plus that
 * helper thread, which only writes to stderr until told to stop.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"

struct progress {
	const char *key;
	struct timespec start;
	atomic_int stop;
};

static double elapsed_s(const struct timespec *t0)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - t0->tv_sec) +
	       (double)(now.tv_nsec - t0->tv_nsec) / 1e9;
}

/* "tuning KEY ... 3.2 s", rewritten in place every 100 ms. */
static void *progress_main(void *arg)
{
	struct progress *p = arg;

	while (!atomic_load(&p->stop)) {
		fprintf(stderr, "\rtuning %s ... %.1f s", p->key,
			elapsed_s(&p->start));
		fflush(stderr);
		usleep(100000);
	}
	fprintf(stderr, "\rtuning %s ... %.1f s\n", p->key,
		elapsed_s(&p->start));
	return NULL;
}

/* Print a tune reply: status, and the winner when the reply has one. */
static void print_tune(const cJSON *resp, const char *key)
{
	const cJSON *st = cJSON_GetObjectItemCaseSensitive(resp, "status");
	const cJSON *d = cJSON_GetObjectItemCaseSensitive(resp, "decision");
	const cJSON *q = cJSON_GetObjectItemCaseSensitive(resp, "queued");
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(d, "variant");
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(d, "median_us");

	if (d == NULL)
		d = cJSON_GetObjectItemCaseSensitive(resp, "result");
	v = cJSON_GetObjectItemCaseSensitive(d, "variant");
	m = cJSON_GetObjectItemCaseSensitive(d, "median_us");
	printf("%s: %s%s", key, cJSON_IsString(st) ? st->valuestring : "ok",
	       cJSON_IsTrue(q) ? " (queued)" : "");
	if (cJSON_IsString(v) && v->valuestring[0])
		printf(" %s", v->valuestring);
	if (cJSON_IsNumber(m) && m->valuedouble > 0)
		printf(" %.3f us", m->valuedouble);
	printf("\n");
}

/* Send the tune request, with the progress line when asked for. */
static int tune_send(struct ctl *x, cJSON *req, const char *key, int wait,
		     long secs, cJSON **resp)
{
	struct progress p = { .key = key };
	pthread_t th;
	int show = wait && !x->json && isatty(STDERR_FILENO);
	int rc;

	clock_gettime(CLOCK_MONOTONIC, &p.start);
	atomic_init(&p.stop, 0);
	if (show && pthread_create(&th, NULL, progress_main, &p) != 0)
		show = 0;
	rc = ctl_call(x, req,
		      wait ? (uint32_t)(secs * 1000 + 5000) : 0, resp);
	if (show) {
		atomic_store(&p.stop, 1);
		pthread_join(th, NULL);
	}
	return rc;
}

int ctl_tune(struct ctl *x, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "wait", no_argument, NULL, 'w' },
		{ "force", no_argument, NULL, 'f' },
		{ "timeout", required_argument, NULL, 't' },
		{ NULL, 0, NULL, 0 },
	};
	int ch, rc, wait = 0, force = 0;
	long secs = 600;
	cJSON *req, *resp;
	char *end;

	opterr = 0;
	optind = 1;
	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (ch) {
		case 'j':
			x->json = 1;
			break;
		case 'w':
			wait = 1;
			break;
		case 'f':
			force = 1;
			break;
		case 't':
			errno = 0;
			secs = strtol(optarg, &end, 10);
			if (errno || *end || end == optarg || secs <= 0 ||
			    secs > 86400)
				return ctl_usage(x, "bad --timeout '%s' "
						 "(seconds, 1..86400)", optarg);
			break;
		default:
			return ctl_usage(x, "bad option '%s'",
					 argv[optind - 1]);
		}
	}
	if (argc - optind != 1)
		return ctl_usage(x, "tune needs exactly one KEY");
	rc = ctl_check_key(x, argv[optind]);
	if (rc != CTL_OK)
		return rc;
	req = ctl_req("tune");
	if (req != NULL) {
		cJSON_AddStringToObject(req, "key", argv[optind]);
		cJSON_AddBoolToObject(req, "force", force);
		cJSON_AddBoolToObject(req, "wait", wait);
		if (wait)
			cJSON_AddNumberToObject(req, "timeout_ms",
						(double)secs * 1000);
	}
	rc = tune_send(x, req, argv[optind], wait, secs, &resp);
	if (rc != CTL_OK)
		return rc;
	if (x->json)
		ctl_print_json(resp);
	else
		print_tune(resp, argv[optind]);
	cJSON_Delete(resp);
	return CTL_OK;
}

int ctl_forget(struct ctl *x, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "all", no_argument, NULL, 'a' },
		{ NULL, 0, NULL, 0 },
	};
	int ch, rc, all = 0;
	cJSON *req, *resp, *n;

	opterr = 0;
	optind = 1;
	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (ch == 'j')
			x->json = 1;
		else if (ch == 'a')
			all = 1;
		else
			return ctl_usage(x, "bad option '%s'",
					 argv[optind - 1]);
	}
	if (all ? argc != optind : argc - optind != 1)
		return ctl_usage(x, "forget needs exactly one KEY, or --all");
	if (!all && (rc = ctl_check_key(x, argv[optind])) != CTL_OK)
		return rc;
	req = ctl_req("forget");
	if (req != NULL && all)
		cJSON_AddTrueToObject(req, "all");
	else if (req != NULL)
		cJSON_AddStringToObject(req, "key", argv[optind]);
	rc = ctl_call(x, req, 0, &resp);
	if (rc != CTL_OK)
		return rc;
	n = cJSON_GetObjectItemCaseSensitive(resp, "forgotten");
	if (x->json)
		ctl_print_json(resp);
	else
		printf("forgot %.0f result(s)\n",
		       cJSON_IsNumber(n) ? n->valuedouble : 0.0);
	cJSON_Delete(resp);
	return CTL_OK;
}
