/*
 * bench_socket.c -- daemon request/response throughput and latency.
 *
 *   bench_socket SOCKET SECONDS [KEY]
 *
 * For N = 1, 16, 50, 64 clients (threads, each its own fly_client and
 * connection) doing decide request/response in a loop for SECONDS:
 * total requests/s and p50/p99 latency.  Prints one line per N:
 *   clients N rps R p50_us P p99_us Q errors E
 * Owns: its clients.  Thread: main + N bench threads.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flyclient.h"

#define MAX_SAMPLES 2000000

struct worker {
	const char *sock;
	const char *req;
	double secs;
	uint64_t *lat;
	size_t n;
	size_t cap;
	uint64_t errors;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct fly_client_opts o = { .socket_path = w->sock };
	uint64_t end;
	fly_client *c;

	if (fly_client_open_opts(&o, &c) < 0)
		return NULL;
	end = now_ns() + (uint64_t)(w->secs * 1e9);
	while (now_ns() < end) {
		char *resp = NULL;
		size_t len;
		uint64_t s = now_ns();

		if (fly_request(c, w->req, strlen(w->req), 5000, &resp,
				&len) < 0 || strstr(resp, "\"ok\":true") == NULL)
			w->errors++;
		fly_free(resp);
		if (w->n < w->cap)
			w->lat[w->n++] = now_ns() - s;
	}
	fly_client_close(c);
	return NULL;
}

static void run(const char *sock, const char *req, int nclients, double secs)
{
	struct worker *w = calloc((size_t)nclients, sizeof(*w));
	pthread_t *th = calloc((size_t)nclients, sizeof(*th));
	size_t total = 0, k = 0;
	uint64_t errors = 0, *all;

	for (int i = 0; i < nclients; i++) {
		w[i] = (struct worker){ .sock = sock, .req = req, .secs = secs };
		w[i].cap = MAX_SAMPLES / (size_t)nclients;
		w[i].lat = malloc(sizeof(uint64_t) * w[i].cap);
		pthread_create(&th[i], NULL, worker_main, &w[i]);
	}
	for (int i = 0; i < nclients; i++) {
		pthread_join(th[i], NULL);
		total += w[i].n;
		errors += w[i].errors;
	}
	all = malloc(sizeof(uint64_t) * (total ? total : 1));
	for (int i = 0; i < nclients; i++) {
		memcpy(all + k, w[i].lat, w[i].n * sizeof(uint64_t));
		k += w[i].n;
		free(w[i].lat);
	}
	qsort(all, total, sizeof(uint64_t), cmp_u64);
	printf("clients %d rps %.0f p50_us %.1f p99_us %.1f errors %llu\n",
	       nclients, (double)total / secs,
	       total ? (double)all[total / 2] / 1e3 : 0.0,
	       total ? (double)all[(size_t)((double)(total - 1) * 0.99)] / 1e3
		     : 0.0,
	       (unsigned long long)errors);
	free(all);
	free(w);
	free(th);
}

int main(int argc, char **argv)
{
	static const int ns[] = { 1, 16, 50, 64 };
	char req[160];
	double secs;

	if (argc < 3) {
		fprintf(stderr, "usage: bench_socket SOCKET SECONDS [KEY]\n");
		return 2;
	}
	secs = atof(argv[2]);
	snprintf(req, sizeof(req), "{\"req\":\"decide\",\"key\":\"%s\"}",
		 argc > 3 ? argv[3] : "rmsnorm/fp32/m=8,n=64");
	for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++)
		run(argv[1], req, ns[i], secs);
	return 0;
}
