/*
 * cmd_tune.c -- tune KEY (queue it; --wait with a progress line on a
 * terminal) and forget (one key or --all).
 *
 * Owns: the progress thread of a waiting tune, which only writes to
 * stderr until told to stop.  Thread: main, plus that one.
 */
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
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

/* Print a tune reply: its key's status, and the winner when the reply
 * has one. */
static void print_tune(const cJSON *resp)
{
	const char *key = ctl_str(resp, "key");
	const cJSON *st = cJSON_GetObjectItemCaseSensitive(resp, "status");
	const cJSON *d = cJSON_GetObjectItemCaseSensitive(resp, "decision");
	const cJSON *q = cJSON_GetObjectItemCaseSensitive(resp, "queued");
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(d, "variant");
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(d, "median_us");

	if (d == NULL)
		d = cJSON_GetObjectItemCaseSensitive(resp, "result");
	v = cJSON_GetObjectItemCaseSensitive(d, "variant");
	m = cJSON_GetObjectItemCaseSensitive(d, "median_us");
	printf("%s: %s%s", key ? key : "?", cJSON_IsString(st) ? st->valuestring : "ok",
	       cJSON_IsTrue(q) ? " (queued)" : "");
	if (cJSON_IsString(v) && v->valuestring[0])
		printf(" %s", v->valuestring);
	if (cJSON_IsNumber(m) && m->valuedouble > 0)
		printf(" %.3f us", m->valuedouble);
	printf("\n");
}

/* Whether a tune reply says the key is tuned. */
static int is_tuned(const cJSON *resp)
{
	const cJSON *st = cJSON_GetObjectItemCaseSensitive(resp, "status");

	return cJSON_IsString(st) && strcmp(st->valuestring, "tuned") == 0;
}

/* Send the tune request, with the progress line when asked for. */
static int tune_send(struct ctl *x, cJSON *req, const char *key, int wait,
		     uint32_t wait_ms, cJSON **resp)
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
		      wait ? wait_ms + 5000 : 0, resp);
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
	uint32_t wait_ms = 600000;
	cJSON *req, *resp;

	opterr = 0;
	optind = 0; /* 0: glibc re-initialises (permuting again) */
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
			if (ctl_parse_duration(optarg, 86400, &wait_ms) < 0)
				return ctl_usage(x, "bad --timeout '%s' (seconds, "
						 "up to 86400, or Nms)", optarg);
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
						(double)wait_ms);
	}
	rc = tune_send(x, req, argv[optind], wait, wait_ms, &resp);
	if (rc != CTL_OK)
		return rc;
	ctl_out(x, resp, print_tune);
	/* The daemon answers a wait that ran out with the key's state so
	 * far (pending): that is the documented timeout, exit 10. */
	rc = wait && !is_tuned(resp) ? CTL_TIMEOUT : CTL_OK;
	if (rc == CTL_TIMEOUT)
		fprintf(stderr, "tune failed: %s not tuned within %g s "
			"(still queued; try again with a longer --timeout)\n",
			argv[optind], (double)wait_ms / 1000.0);
	cJSON_Delete(resp);
	return rc;
}

static void print_forget(const cJSON *resp)
{
	const cJSON *n = cJSON_GetObjectItemCaseSensitive(resp, "forgotten");

	printf("forgot %.0f result(s)\n",
	       cJSON_IsNumber(n) ? n->valuedouble : 0.0);
}

int ctl_forget(struct ctl *x, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "all", no_argument, NULL, 'a' },
		{ NULL, 0, NULL, 0 },
	};
	int ch, rc, all = 0;
	cJSON *req, *resp;

	opterr = 0;
	optind = 0; /* 0: glibc re-initialises (permuting again) */
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
	ctl_out(x, resp, print_forget);
	cJSON_Delete(resp);
	return CTL_OK;
}
