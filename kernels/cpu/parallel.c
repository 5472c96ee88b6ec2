/*
 * parallel.c -- the small helpers the CPU op files share: conversion to
 * fp32, the process-wide worker pool of flyk_cpu_parallel(), the split
 * of a range over threads and the thread-count policy.
 *
 * Owns: the worker pool.  Thread: flyk_cpu_parallel() may be called from
 * any thread.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu_int.h"

void flyk_cpu_to_f32(float *dst, const void *src, size_t n, uint32_t dtype)
{
	if (dtype == FLY_DT_FP32) {
		memcpy(dst, src, n * sizeof(float));
		return;
	}
	for (size_t i = 0; i < n; i++)
		dst[i] = flyk_cpu_load(src, i, dtype);
}

/* ---------------------------------------------------------- threads */

struct par_job {
	flyk_cpu_work_fn fn;
	void *ctx;
	int tid;
	int n;
};

static void *par_main(void *arg)
{
	struct par_job *j = arg;

	j->fn(j->ctx, j->tid, j->n);
	return NULL;
}

/* Fallback: fresh pthreads for this one run (pool busy or short). */
static void spawn_parallel(int n, flyk_cpu_work_fn fn, void *ctx)
{
	enum { PAR_MAX = 64 };
	pthread_t th[PAR_MAX];
	struct par_job jobs[PAR_MAX];
	int started[PAR_MAX];

	if (n > PAR_MAX)
		n = PAR_MAX;
	for (int t = 1; t < n; t++) {
		jobs[t] = (struct par_job){ fn, ctx, t, n };
		started[t] = pthread_create(&th[t], NULL, par_main,
					    &jobs[t]) == 0;
	}
	fn(ctx, 0, n);
	for (int t = 1; t < n; t++) {
		if (started[t])
			pthread_join(th[t], NULL);
		else
			fn(ctx, t, n);
	}
}

/*
 * The persistent pool: POOL_MAX - 1 detached workers at most, started on
 * demand, woken per run by a generation counter.  One run at a time holds
 * `run`; a concurrent caller (a client launching from two threads) falls
 * back to spawn_parallel() instead of waiting.  A forked child starts with
 * an empty pool (pthread_atfork), since the workers do not survive fork.
 */
#define POOL_MAX 16

static struct cpu_pool {
	pthread_mutex_t run;   /* held by the caller whose run is in flight */
	pthread_mutex_t mu;    /* guards everything below */
	pthread_cond_t go;     /* gen advanced */
	pthread_cond_t done;   /* pending reached 0 */
	int nworkers;          /* workers started: tids 1..nworkers */
	uint64_t gen;          /* bumped per run */
	int pending;           /* workers of this run not finished */
	flyk_cpu_work_fn fn;
	void *ctx;
	int n;                 /* threads of this run, caller included */
} pool = {
	PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
	PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, NULL,
	NULL, 0
};

struct pool_slot {
	int tid;
	uint64_t seen;
};

static struct pool_slot pool_slots[POOL_MAX];
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

static void *pool_main(void *arg)
{
	struct pool_slot *slot = arg;
	uint64_t seen = slot->seen;

	pthread_mutex_lock(&pool.mu);
	for (;;) {
		while (pool.gen == seen)
			pthread_cond_wait(&pool.go, &pool.mu);
		seen = pool.gen;
		if (slot->tid >= pool.n)
			continue;
		flyk_cpu_work_fn fn = pool.fn;
		void *ctx = pool.ctx;
		int n = pool.n;

		pthread_mutex_unlock(&pool.mu);
		fn(ctx, slot->tid, n);
		pthread_mutex_lock(&pool.mu);
		if (--pool.pending == 0)
			pthread_cond_signal(&pool.done);
	}
	return NULL;
}

static void pool_atfork_child(void)
{
	pthread_mutex_init(&pool.run, NULL);
	pthread_mutex_init(&pool.mu, NULL);
	pthread_cond_init(&pool.go, NULL);
	pthread_cond_init(&pool.done, NULL);
	pool.nworkers = 0;
	pool.pending = 0;
}

static void pool_init(void)
{
	pthread_atfork(NULL, NULL, pool_atfork_child);
}

/* Start workers up to tid @p want - 1; caller holds pool.mu.
 * @return how many workers exist. */
static int pool_grow(int want)
{
	while (pool.nworkers < want - 1) {
		struct pool_slot *slot = &pool_slots[pool.nworkers + 1];
		pthread_attr_t attr;
		pthread_t th;
		int rc;

		slot->tid = pool.nworkers + 1;
		slot->seen = pool.gen;
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		rc = pthread_create(&th, &attr, pool_main, slot);
		pthread_attr_destroy(&attr);
		if (rc != 0)
			break;
		pool.nworkers++;
	}
	return pool.nworkers;
}

int flyk_cpu_parallel(int n, flyk_cpu_work_fn fn, void *ctx)
{
	if (n <= 1) {
		fn(ctx, 0, 1);
		return 0;
	}
	pthread_once(&pool_once, pool_init);
	if (n > POOL_MAX || pthread_mutex_trylock(&pool.run) != 0) {
		spawn_parallel(n, fn, ctx);
		return 0;
	}
	pthread_mutex_lock(&pool.mu);
	if (pool_grow(n) < n - 1) {
		pthread_mutex_unlock(&pool.mu);
		pthread_mutex_unlock(&pool.run);
		spawn_parallel(n, fn, ctx);
		return 0;
	}
	pool.fn = fn;
	pool.ctx = ctx;
	pool.n = n;
	pool.pending = n - 1;
	pool.gen++;
	pthread_cond_broadcast(&pool.go);
	pthread_mutex_unlock(&pool.mu);
	fn(ctx, 0, n);
	pthread_mutex_lock(&pool.mu);
	while (pool.pending > 0)
		pthread_cond_wait(&pool.done, &pool.mu);
	pthread_mutex_unlock(&pool.mu);
	pthread_mutex_unlock(&pool.run);
	return 0;
}

void flyk_cpu_split(int64_t total, int n, int tid, int64_t grain,
		    int64_t *lo, int64_t *hi)
{
	int64_t units = (total + grain - 1) / grain;
	int64_t per = units / n, rem = units % n;
	int64_t u0 = tid * per + (tid < rem ? tid : rem);
	int64_t u1 = u0 + per + (tid < rem ? 1 : 0);

	*lo = u0 * grain < total ? u0 * grain : total;
	*hi = u1 * grain < total ? u1 * grain : total;
}

int flyk_cpu_cores(const struct flyk_device *dev)
{
	/* Without a device (the daemon's import and fleet checks) the count
	 * is read once: sysconf opens and reads sysfs on every call, 40% of
	 * the daemon's time importing (issue 19). */
	static _Atomic int cached;
	int c;
	long n;

	if (dev && dev->cores > 0)
		return dev->cores;
	c = atomic_load_explicit(&cached, memory_order_relaxed);
	if (c > 0)
		return c;
	n = sysconf(_SC_NPROCESSORS_ONLN);
	c = n > 0 ? (int)n : 1;
	atomic_store_explicit(&cached, c, memory_order_relaxed);
	return c;
}

int flyk_cpu_threads_ok(const struct flyk_device *dev, int64_t t,
			int64_t work)
{
	if (t < 1 || t > flyk_cpu_cores(dev))
		return -EINVAL;
	if (t > 1 && work < t)
		return -EINVAL;
	return 0;
}
