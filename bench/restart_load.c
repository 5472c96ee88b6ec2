/*
 * restart_load.c -- clients deciding while the daemon restarts
 * (RELIABILITY.md F19: "<= 0.1% requests error during restart; all
 * succeed within 2 s").
 *
 *   restart_load SOCKET NKEYS THREADS SECS [QKEYS]
 *
 * THREADS threads, each with its own libflyclient client (as separate
 * engine processes would have), call fly_decide for SECS seconds on
 * random keys rmsnorm/fp32/m=8,n=64*i, i = 1..QKEYS (default NKEYS), a
 * pause of 20 us every 16 calls.  Keys 1..NKEYS are tuned (bench/
 * daemon.sh's fly_synth_keys); those above are misses, asked over the
 * socket (counted apart: miss_calls, miss_errors).  Every tuned key's
 * answer is
 * counted as tuned, not tuned (the default or pending: what an engine
 * gets while nothing better is known) or an error (rc != 0).  A thread's
 * longest run of answers that were not tuned, in wall time, is the
 * "recovery" of the worst restart it saw.  The caller restarts the
 * daemon meanwhile (bench/run_restart_bench.sh).  Prints one JSON line:
 * calls, tuned, not_tuned, errors, their rates, the longest not-tuned
 * run (ms), and the clients' counters (socket requests and errors,
 * reconnects, shm and cache hits).
 *
 * Owns: its clients.  Thread: main + THREADS.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "flyclient.h"

struct worker {
	pthread_t th;
	const char *sock;
	int nkeys, qkeys;
	double secs;
	uint64_t miss_calls, miss_errors;
	unsigned seed;
	uint64_t calls, tuned, not_tuned, errors;
	double worst_run_ms; /* longest run of answers that were not tuned */
	struct fly_client_stats st;
	int open_rc;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *run(void *arg)
{
	struct worker *w = arg;
	fly_client *c = NULL;
	double end, run_start = -1;

	w->open_rc = fly_client_open(w->sock, &c);
	if (w->open_rc != 0)
		return NULL;
	end = now_s() + w->secs;
	while (now_s() < end) {
		struct fly_problem p;
		struct fly_decision d;
		int rc;

		memset(&p, 0, sizeof(p));
		p.op = FLY_OP_RMSNORM;
		p.dtype = FLY_DT_FP32;
		p.dims[0] = 8;
		p.dims[1] = 64 * (1 + (int64_t)(rand_r(&w->seed) % w->qkeys));
		rc = fly_decide(c, &p, &d);
		if (p.dims[1] > 64 * (int64_t)w->nkeys) { /* a miss key */
			w->miss_calls++;
			w->miss_errors += rc != 0;
			continue;
		}
		w->calls++;
		if (rc != 0)
			w->errors++;
		else if (d.status == FLY_STATUS_TUNED)
			w->tuned++;
		else
			w->not_tuned++;
		if (rc == 0 && d.status == FLY_STATUS_TUNED) {
			if (run_start >= 0) {
				double ms = (now_s() - run_start) * 1e3;

				if (ms > w->worst_run_ms)
					w->worst_run_ms = ms;
				run_start = -1;
			}
		} else if (run_start < 0) {
			run_start = now_s();
		}
		if (w->calls % 16 == 0)
			usleep(20);
	}
	if (run_start >= 0) { /* still not tuned at the end */
		double ms = (now_s() - run_start) * 1e3;

		if (ms > w->worst_run_ms)
			w->worst_run_ms = ms;
	}
	fly_client_stats_get(c, &w->st);
	fly_client_close(c);
	return NULL;
}

int main(int argc, char **argv)
{
	struct worker *w;
	uint64_t calls = 0, tuned = 0, not_tuned = 0, errors = 0;
	uint64_t sreq = 0, serr = 0, recon = 0, shm = 0, cache = 0;
	uint64_t mcalls = 0, merr = 0;
	double worst = 0;
	int nthreads;

	if (argc != 5 && argc != 6) {
		fprintf(stderr, "usage: restart_load SOCKET NKEYS THREADS "
			"SECS [QKEYS]\n");
		return 2;
	}
	nthreads = atoi(argv[3]);
	if (atoi(argv[2]) < 1 || nthreads < 1 || nthreads > 1024 ||
	    atof(argv[4]) <= 0) {
		fprintf(stderr, "restart_load: NKEYS, THREADS (1..1024) and "
			"SECS must be positive\n");
		return 2;
	}
	w = calloc((size_t)nthreads, sizeof(*w));
	if (w == NULL)
		return 1;
	for (int i = 0; i < nthreads; i++) {
		w[i].sock = argv[1];
		w[i].nkeys = atoi(argv[2]);
		w[i].qkeys = argc == 6 ? atoi(argv[5]) : w[i].nkeys;
		if (w[i].qkeys < w[i].nkeys)
			w[i].qkeys = w[i].nkeys;
		w[i].secs = atof(argv[4]);
		w[i].seed = 7919u * (unsigned)(i + 1);
		if (pthread_create(&w[i].th, NULL, run, &w[i]) != 0) {
			fprintf(stderr, "restart_load: pthread_create failed\n");
			return 1;
		}
	}
	for (int i = 0; i < nthreads; i++) {
		pthread_join(w[i].th, NULL);
		if (w[i].open_rc != 0) {
			fprintf(stderr, "restart_load: client open: %s\n",
				fly_strerror(w[i].open_rc));
			return 1;
		}
		calls += w[i].calls;
		mcalls += w[i].miss_calls;
		merr += w[i].miss_errors;
		tuned += w[i].tuned;
		not_tuned += w[i].not_tuned;
		errors += w[i].errors;
		if (w[i].worst_run_ms > worst)
			worst = w[i].worst_run_ms;
		sreq += w[i].st.socket_requests;
		serr += w[i].st.socket_errors;
		recon += w[i].st.reconnects;
		shm += w[i].st.shm_hits;
		cache += w[i].st.cache_hits;
	}
	printf("{\"threads\": %d, \"calls\": %llu, \"tuned\": %llu, "
	       "\"not_tuned\": %llu, \"errors\": %llu, "
	       "\"error_rate\": %.6f, \"not_tuned_rate\": %.6f, "
	       "\"longest_not_tuned_ms\": %.1f, \"socket_requests\": %llu, "
	       "\"socket_errors\": %llu, \"reconnects\": %llu, "
	       "\"shm_hits\": %llu, \"cache_hits\": %llu, "
	       "\"miss_calls\": %llu, \"miss_errors\": %llu, "
	       "\"miss_error_rate\": %.6f}\n",
	       nthreads, (unsigned long long)calls, (unsigned long long)tuned,
	       (unsigned long long)not_tuned, (unsigned long long)errors,
	       calls ? (double)errors / (double)calls : 0.0,
	       calls ? (double)not_tuned / (double)calls : 0.0, worst,
	       (unsigned long long)sreq, (unsigned long long)serr,
	       (unsigned long long)recon, (unsigned long long)shm,
	       (unsigned long long)cache, (unsigned long long)mcalls,
	       (unsigned long long)merr,
	       mcalls ? (double)merr / (double)mcalls : 0.0);
	free(w);
	return 0;
}
