/*
 * shm_lookup.c -- where a table hit's time goes, without a daemon: a
 * writer fills an in-process table with N keys (the scale bench's keys,
 * rmsnorm/fp32/m=8,n=64*i, in that order, so their records lie in key
 * order in the arena), a reader maps it read-only as a client does, and
 * each step of fly_decide's table path is timed over all N keys in key
 * order (the scale bench's order):
 *
 *   clock      an empty tick pair (what a per-call timing adds: rdtsc
 *              on x86-64, bench_time.h)
 *   key        fly_problem_key (validate, bucket, format)
 *   hash       the table's hash of the problem (fly__shm_problem_hash)
 *              and its home slot
 *   lookup     fly__shm_lookup_hashed of the formatted key, its hash
 *              computed beforehand (slot, record, key compare,
 *              checksum, decision copy)
 *   key+lookup as fly_decide does them: validate and bucket, hash,
 *              prefetch the home slot, format the key, look it up
 *
 * Each step is timed twice: the loop's mean (total / N, no clock inside)
 * and per call (p50/p99 of tick pairs, the empty pair's own p50 not
 * subtracted).  "pass1" is the first lookup pass through a fresh mapping
 * (page faults), the later passes are warm.  "prefault" is what
 * fly__shm_reader_prefault of another fresh mapping costs (what a client
 * pays when it maps the table).
 *
 *   build/bench/bench/shm_lookup [N]        (default 1000000)
 *
 * Owns: its writer and reader.  Thread: one.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "flyclient.h"
#include "fly_key.h"
#include "fly_shm.h"
#include "bench_time.h"

enum step { S_CLOCK, S_KEY, S_HASH, S_LOOKUP, S_BOTH, S_COUNT };
static const char *step_names[S_COUNT] = { "clock", "key", "hash", "lookup",
					   "key+lookup" };

struct ctx {
	const struct fly_shm_reader *r;
	struct fly_problem *probs; /* N problems */
	char (*keys)[FLY_KEY_MAX]; /* their keys, formatted once */
	int *lens;
	uint64_t *hashes; /* their table hashes */
	int n;
	uint64_t sink;
	uint64_t misses;
};

/* One call of @p s on key i. */
static void step_once(struct ctx *x, enum step s, int i)
{
	struct fly_decision d;
	char key[FLY_KEY_MAX];
	uint64_t h = 0;
	int n;

	switch (s) {
	case S_CLOCK:
		break;
	case S_KEY:
		x->sink += (uint64_t)fly_problem_key(&x->probs[i], key,
						     sizeof(key));
		x->sink += (uint8_t)key[10];
		break;
	case S_HASH:
		x->sink += fly__shm_home(fly__shm_problem_hash(&x->probs[i]));
		break;
	case S_LOOKUP:
		x->misses += fly__shm_lookup_hashed(x->r, x->hashes[i],
						    x->keys[i],
						    (size_t)x->lens[i], &d) != 0;
		x->sink += (uint64_t)d.params[0];
		break;
	case S_BOTH:
		n = fly__shm_problem_key(x->r, &x->probs[i], key, &h);
		x->misses += fly__shm_lookup_hashed(x->r, h, key, (size_t)n,
						    &d) != 0;
		x->sink += (uint64_t)d.params[0];
		break;
	case S_COUNT:
		break;
	}
}

static void run_step(struct ctx *x, enum step s, const char *pass,
		     uint64_t *v)
{
	uint64_t t0, mean;

	t0 = now_ns();
	for (int i = 0; i < x->n; i++)
		step_once(x, s, i);
	mean = (now_ns() - t0) * 10 / (uint64_t)x->n;
	for (int i = 0; i < x->n; i++) {
		uint64_t a = tick();

		step_once(x, s, i);
		v[i] = ticks_ns(tick() - a);
	}
	printf("%s %-10s mean %4llu.%llu ns  per-call p50 %4llu p99 %5llu\n",
	       pass, step_names[s], (unsigned long long)(mean / 10),
	       (unsigned long long)(mean % 10),
	       (unsigned long long)pct_u64(v, (size_t)x->n, 0.5),
	       (unsigned long long)pct_u64(v, (size_t)x->n, 0.99));
}

static struct fly_shm_writer *fill(struct ctx *x, int n)
{
	struct fly_decision d = { .status = FLY_STATUS_TUNED, .nparams = 2,
				  .params = { 64, 1 }, .median_us = 3.5 };
	struct fly_shm_writer *w;
	uint32_t cap = 64;

	strcpy(d.variant, "rms_blocked");
	while (cap < 2u * (uint32_t)n)
		cap *= 2;
	if (fly__shm_writer_open(cap, &w) < 0)
		exit(1);
	for (int i = 0; i < n; i++) {
		snprintf(x->keys[i], FLY_KEY_MAX, "rmsnorm/fp32/m=8,n=%d",
			 64 * (i + 1));
		if (fly_problem_from_key(x->keys[i], &x->probs[i]) < 0)
			exit(1);
		x->lens[i] = (int)strlen(x->keys[i]);
		x->hashes[i] = fly__shm_key_hash(x->keys[i],
						 (size_t)x->lens[i]);
		if (fly__shm_put(w, x->keys[i], (size_t)x->lens[i], &d) < 0)
			exit(1);
	}
	return w;
}

/* What a client's pre-fault of a fresh mapping of the table costs
 * (another reader than the timed one, whose pass1 stays a first touch). */
static void prefault_cost(struct fly_shm_writer *w)
{
	struct fly_shm_reader *r;
	uint64_t t0;
	size_t n;

	if (fly__shm_reader_open(dup(fly__shm_writer_fd(w)), &r) < 0)
		exit(1);
	t0 = now_ns();
	n = fly__shm_reader_prefault(r);
	printf("prefault %.1f MiB of %.1f MiB mapped: %.1f ms\n",
	       (double)n / 1048576.0,
	       (double)fly__shm_writer_size(w) / 1048576.0,
	       (double)(now_ns() - t0) / 1e6);
	fly__shm_reader_close(r);
}

int main(int argc, char **argv)
{
	struct ctx x = { .n = argc > 1 ? atoi(argv[1]) : 1000000 };
	struct fly_shm_reader *r;
	struct fly_shm_writer *w;
	uint64_t *v;

	if (x.n < 1)
		return 2;
	x.probs = calloc((size_t)x.n, sizeof(*x.probs));
	x.keys = calloc((size_t)x.n, sizeof(*x.keys));
	x.lens = calloc((size_t)x.n, sizeof(*x.lens));
	x.hashes = calloc((size_t)x.n, sizeof(*x.hashes));
	v = calloc((size_t)x.n, sizeof(*v));
	if (x.probs == NULL || x.keys == NULL || x.lens == NULL || v == NULL ||
	    x.hashes == NULL)
		return 1;
	w = fill(&x, x.n);
	if (fly__shm_reader_open(dup(fly__shm_writer_fd(w)), &r) < 0)
		return 1;
	x.r = r;
	printf("keys %d capacity %u timer %s\n", x.n,
	       fly__shm_writer_capacity(w), tick_calibrate());
	prefault_cost(w);
	run_step(&x, S_LOOKUP, "pass1", v); /* through the fresh mapping */
	for (int s = 0; s < S_COUNT; s++)
		run_step(&x, (enum step)s, "pass2", v);
	printf("misses %llu (sink %llu)\n", (unsigned long long)x.misses,
	       (unsigned long long)(x.sink & 1));
	fly__shm_reader_close(r);
	fly__shm_writer_close(w);
	return x.misses != 0;
}
