/*
 * bench_client.c -- libflyclient hot-path latency.
 *
 *   bench_client SOCKET [KEY]
 *
 * 1. fly_decide on a hot (tuned, cached) key: p50/p99 per call, one
 *    thread and two threads (throughput per thread).  Calls are timed in
 *    batches of BATCH (the clock costs about as much as a hit), so the
 *    percentiles are of the per-call mean within a batch.
 * 2. first call of a fresh client on a tuned key (connect, hello, map the
 *    table, shm lookup): p50/p99 over FRESH clients.
 * 3. a socket round trip: fly_request of a decide.
 *
 *   bench_client SOCKET KEY --shm FORMAT N [STEP]
 *
 * 4. a connected client whose process cache is cold: the first fly_decide
 *    of each of N distinct tuned keys (FORMAT with one %d, STEP..N*STEP:
 *    the imported winners must be feasible for every key), each a
 *    process-cache miss answered from the shm table; p50/p99 per call.
 *   bench_client SOCKET KEY --scale FORMAT N [STEP]
 *
 * 5. one connected client, two passes of fly_decide over the same N keys
 *    (as in 4): per pass p50/p99 per call and where the answers came
 *    from (process cache, shm table, socket requests), so a key that
 *    falls out of the table or the process cache shows in pass 2.
 * 4 and 5 time each call with tick() (bench_time.h: rdtsc on x86-64),
 * print the timer's source and an empty tick pair's p50 ("timer_p50_ns",
 * not subtracted from anything), and the minor page faults the timed
 * calls took (getrusage around the timed loop).
 * Prints "name value" lines (ns) that run_service_bench.sh and
 * run_scale_bench.sh tabulate.
 * Owns: its clients.  Thread: main + 2 bench threads.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "flyclient.h"
#include "bench_time.h"

#define BATCH 16
#define HOT_SAMPLES 200000
#define FRESH 200
#define RTT_SAMPLES 20000
#define TIMER_SAMPLES 100000

/* Minor page faults of this process so far. */
static long minflt(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_minflt;
}

/* Choose the per-call timer and print it, with what an empty tick pair
 * measures (p50 and p99, ns): the floor under every per-call figure. */
static void timer_report(void)
{
	uint64_t *v = malloc(sizeof(uint64_t) * TIMER_SAMPLES);
	const char *src = tick_calibrate();

	if (v == NULL)
		exit(1);
	for (int i = 0; i < TIMER_SAMPLES; i++) {
		uint64_t a = tick();

		v[i] = ticks_ns(tick() - a);
	}
	printf("timer %s\ntimer_p50_ns %llu\ntimer_p99_ns %llu\n", src,
	       (unsigned long long)pct_u64(v, TIMER_SAMPLES, 0.5),
	       (unsigned long long)pct_u64(v, TIMER_SAMPLES, 0.99));
	free(v);
}

/* fly_decide of keys 1..n of fmt (key i: fmt with i * step), each call
 * timed into v[i - 1] (ns).  @return the minor page faults of the loop. */
static long decide_keys_timed(fly_client *c, const char *fmt, int n,
			      int step, uint64_t *v)
{
	struct fly_problem p;
	struct fly_decision d;
	char key[FLY_KEY_MAX];
	long f0 = minflt();

	for (int i = 0; i < n; i++) {
		uint64_t s;

		snprintf(key, sizeof(key), fmt, (i + 1) * step);
		if (fly_problem_from_key(key, &p) < 0)
			exit(1);
		s = tick();
		fly_decide(c, &p, &d);
		v[i] = ticks_ns(tick() - s);
	}
	return minflt() - f0;
}

/* One per bench thread, each on its own cache lines: with plain adjacent
 * structs, one thread's `bad` shared a line with the other's `c` and `p`
 * (read on every call), and the benchmark measured its own false
 * sharing. */
struct hot {
	fly_client *c;
	struct fly_problem p;
	uint64_t *samples;
	double secs;
	uint64_t bad;
} __attribute__((aligned(128)));

static void *hot_main(void *arg)
{
	struct hot *h = arg;
	struct fly_decision d;
	uint64_t t0 = now_ns();

	for (size_t i = 0; i < HOT_SAMPLES; i++) {
		uint64_t s = now_ns();

		for (int k = 0; k < BATCH; k++)
			fly_decide(h->c, &h->p, &d);
		h->samples[i] = (now_ns() - s) / BATCH;
		h->bad += d.status != FLY_STATUS_TUNED;
	}
	h->secs = (double)(now_ns() - t0) / 1e9;
	return NULL;
}

static void bench_hot(fly_client *c, const struct fly_problem *p, int nth)
{
	struct hot h[2];
	pthread_t th[2];

	for (int i = 0; i < nth; i++) {
		h[i] = (struct hot){ .c = c, .p = *p };
		h[i].samples = malloc(sizeof(uint64_t) * HOT_SAMPLES);
		pthread_create(&th[i], NULL, hot_main, &h[i]);
	}
	for (int i = 0; i < nth; i++) {
		pthread_join(th[i], NULL);
		printf("hot_t%d_p50_ns %llu\nhot_t%d_p99_ns %llu\n"
		       "hot_t%d_mops_per_thread %.2f\n", nth,
		       (unsigned long long)pct_u64(h[i].samples, HOT_SAMPLES, 0.5),
		       nth,
		       (unsigned long long)pct_u64(h[i].samples, HOT_SAMPLES, 0.99),
		       nth, (double)HOT_SAMPLES * BATCH / h[i].secs / 1e6);
		if (h[i].bad)
			printf("warning: %llu hot batches not tuned\n",
			       (unsigned long long)h[i].bad);
		free(h[i].samples);
		if (nth == 2)
			break; /* one line per thread count is enough */
	}
	for (int i = 1; i < nth; i++)
		pthread_join(th[i], NULL), free(h[i].samples);
}

static void bench_fresh(const char *sock, const struct fly_problem *p)
{
	uint64_t v[FRESH];
	int shm = 0;

	for (int i = 0; i < FRESH; i++) {
		struct fly_client_opts o = { .socket_path = sock,
					     .timeout_ms = 1000 };
		struct fly_client_stats st;
		struct fly_decision d;
		fly_client *c;
		uint64_t s;

		if (fly_client_open_opts(&o, &c) < 0)
			exit(1);
		s = now_ns();
		fly_decide(c, p, &d);
		v[i] = now_ns() - s;
		fly_client_stats_get(c, &st);
		shm += st.shm_hits > 0;
		fly_client_close(c);
	}
	printf("fresh_first_call_p50_ns %llu\nfresh_first_call_p99_ns %llu\n"
	       "fresh_first_call_via_shm %d/%d\n",
	       (unsigned long long)pct_u64(v, FRESH, 0.5),
	       (unsigned long long)pct_u64(v, FRESH, 0.99), shm, FRESH);
}

static void bench_shm(const char *sock, const char *fmt, int n, int step)
{
	struct fly_client_opts o = { .socket_path = sock, .timeout_ms = 1000 };
	struct fly_client_stats st0, st1;
	uint64_t *v = calloc((size_t)n, sizeof(uint64_t));
	struct fly_problem p;
	struct fly_decision d;
	fly_client *c;
	char key[FLY_KEY_MAX];
	long flt;

	if (v == NULL || fly_client_open_opts(&o, &c) < 0)
		exit(1);
	/* connect, hello, map: with a key outside the measured set */
	snprintf(key, sizeof(key), fmt, (n + 1) * step);
	if (fly_problem_from_key(key, &p) == 0)
		fly_decide(c, &p, &d);
	timer_report();
	fly_client_stats_get(c, &st0);
	flt = decide_keys_timed(c, fmt, n, step, v);
	fly_client_stats_get(c, &st1);
	printf("shm_first_call_p50_ns %llu\nshm_first_call_p99_ns %llu\n"
	       "shm_first_call_hits %llu/%d\nshm_first_call_minflt %ld\n",
	       (unsigned long long)pct_u64(v, (size_t)n, 0.5),
	       (unsigned long long)pct_u64(v, (size_t)n, 0.99),
	       (unsigned long long)(st1.shm_hits - st0.shm_hits), n, flt);
	fly_client_close(c);
	free(v);
}

/* One pass of fly_decide over keys 1..n of fmt: times into v, and the
 * counters' deltas printed under pass number k. */
static void scale_pass(fly_client *c, const char *fmt, int n, int step, int k,
		       uint64_t *v)
{
	struct fly_client_stats st0, st1;
	long flt;

	fly_client_stats_get(c, &st0);
	flt = decide_keys_timed(c, fmt, n, step, v);
	fly_client_stats_get(c, &st1);
	printf("pass%d_p50_ns %llu\npass%d_p99_ns %llu\npass%d_minflt %ld\n",
	       k, (unsigned long long)pct_u64(v, (size_t)n, 0.5), k,
	       (unsigned long long)pct_u64(v, (size_t)n, 0.99), k, flt);
	/* (v is sorted now) */
	printf("pass%d_mean90_ns %.1f\n", k, low_mean_u64(v, (size_t)n, 0.9));
	printf("pass%d_cache_hits %llu\npass%d_shm_hits %llu\n"
	       "pass%d_socket_requests %llu\n", k,
	       (unsigned long long)(st1.cache_hits - st0.cache_hits), k,
	       (unsigned long long)(st1.shm_hits - st0.shm_hits), k,
	       (unsigned long long)(st1.socket_requests - st0.socket_requests));
}

static void bench_scale(const char *sock, const char *fmt, int n, int step)
{
	struct fly_client_opts o = { .socket_path = sock, .timeout_ms = 1000 };
	uint64_t *v = calloc((size_t)n, sizeof(uint64_t));
	struct fly_problem p;
	struct fly_decision d;
	fly_client *c;
	char key[FLY_KEY_MAX];

	if (v == NULL || fly_client_open_opts(&o, &c) < 0)
		exit(1);
	snprintf(key, sizeof(key), fmt, (n + 1) * step);
	if (fly_problem_from_key(key, &p) == 0)
		fly_decide(c, &p, &d);
	timer_report();
	printf("scale_keys %d\n", n);
	scale_pass(c, fmt, n, step, 1, v);
	scale_pass(c, fmt, n, step, 2, v);
	fly_client_close(c);
	free(v);
}

static void bench_rtt(fly_client *c, const char *key)
{
	uint64_t *v = malloc(sizeof(uint64_t) * RTT_SAMPLES);
	char req[160];

	snprintf(req, sizeof(req), "{\"req\":\"decide\",\"key\":\"%s\"}", key);
	for (int i = 0; i < RTT_SAMPLES; i++) {
		char *resp = NULL;
		size_t len;
		uint64_t s = now_ns();

		if (fly_request(c, req, strlen(req), 1000, &resp, &len) < 0)
			exit(1);
		v[i] = now_ns() - s;
		fly_free(resp);
	}
	printf("socket_rtt_p50_ns %llu\nsocket_rtt_p99_ns %llu\n",
	       (unsigned long long)pct_u64(v, RTT_SAMPLES, 0.5),
	       (unsigned long long)pct_u64(v, RTT_SAMPLES, 0.99));
	free(v);
}

int main(int argc, char **argv)
{
	const char *key = argc > 2 ? argv[2] : "rmsnorm/fp32/m=8,n=64";
	struct fly_client_opts o = { .timeout_ms = 1000 };
	struct fly_problem p;
	struct fly_decision d;
	fly_client *c;

	if (argc < 2) {
		fprintf(stderr, "usage: bench_client SOCKET [KEY]\n");
		return 2;
	}
	o.socket_path = argv[1];
	if ((argc == 6 || argc == 7) && strcmp(argv[3], "--shm") == 0) {
		bench_shm(argv[1], argv[4], atoi(argv[5]),
			  argc == 7 ? atoi(argv[6]) : 1);
		return 0;
	}
	if ((argc == 6 || argc == 7) && strcmp(argv[3], "--scale") == 0) {
		bench_scale(argv[1], argv[4], atoi(argv[5]),
			    argc == 7 ? atoi(argv[6]) : 1);
		return 0;
	}
	if (fly_problem_from_key(key, &p) < 0 ||
	    fly_client_open_opts(&o, &c) < 0)
		return 1;
	if (fly_decide_wait(c, &p, 600000, &d) < 0) {
		fprintf(stderr, "bench_client: %s not tuned\n", key);
		return 1;
	}
	bench_hot(c, &p, 1);
	bench_hot(c, &p, 2);
	bench_fresh(argv[1], &p);
	bench_rtt(c, key);
	fly_client_close(c);
	return 0;
}
