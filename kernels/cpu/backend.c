/*
 * backend.c -- the CPU backend: struct flyk_device (cores, caches, the
 * cache-cleaning buffer), the fingerprint, the variant table and the
 * small threading helpers the op files share.
 *
 * Owns: every flyk_device it opens and its flush buffer; the process-wide
 * worker pool of flyk_cpu_parallel().  Thread: the variant table is built
 * once (pthread_once) and then read-only; a device belongs to one thread at
 * a time; flyk_cpu_parallel() may be called from any thread.
 *
 * Device indices: the CPU backend serves "device N" for any N >= 0 on a
 * machine without GPUs; every index names the same host CPU.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "cpu_int.h"

/* Provided by kernels/testing/faulty.c when it is linked (flytuned-test,
 * test binaries); absent (NULL) in the production daemon. */
extern const struct flyk_variant flyk_testing_variants[]
	__attribute__((weak));
extern const size_t flyk_testing_nvariants __attribute__((weak));

#define CPU_MAX_VARIANTS 64

static struct flyk_variant cpu_table[CPU_MAX_VARIANTS];
static size_t cpu_ntable;
static pthread_once_t cpu_table_once = PTHREAD_ONCE_INIT;

static void table_append(const struct flyk_variant *v, size_t n)
{
	for (size_t i = 0; i < n && cpu_ntable < CPU_MAX_VARIANTS; i++)
		cpu_table[cpu_ntable++] = v[i];
}

/* Build the combined table: CPU variants first, test-only ones last. */
static void table_build(void)
{
	table_append(flyk_cpu_rmsnorm_variants, flyk_cpu_rmsnorm_nvariants);
	table_append(flyk_cpu_topk_variants, flyk_cpu_topk_nvariants);
	table_append(flyk_cpu_gemm_variants, flyk_cpu_gemm_nvariants);
	table_append(flyk_cpu_grouped_gemm_variants,
		     flyk_cpu_grouped_gemm_nvariants);
	table_append(flyk_cpu_mqa_logits_variants,
		     flyk_cpu_mqa_logits_nvariants);
	table_append(flyk_cpu_scaled_gemm_variants,
		     flyk_cpu_scaled_gemm_nvariants);
	if (flyk_testing_variants && &flyk_testing_nvariants)
		table_append(flyk_testing_variants, flyk_testing_nvariants);
}

const struct flyk_variant *flyk_cpu_variants(size_t *n)
{
	pthread_once(&cpu_table_once, table_build);
	*n = cpu_ntable;
	return cpu_table;
}

const struct flyk_variant *flyk_cpu_reference(uint32_t op)
{
	size_t n;
	const struct flyk_variant *v = flyk_cpu_variants(&n);

	for (size_t i = 0; i < n; i++)
		if (v[i].op == op && v[i].is_reference)
			return &v[i];
	return NULL;
}

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
	long n;

	if (dev && dev->cores > 0)
		return dev->cores;
	n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
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

/* ---------------------------------------------------------- device */

/* Parse "48K", "1024K", "32M" into bytes (0 on failure). */
static size_t parse_size(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	if (end == s)
		return 0;
	if (*end == 'K' || *end == 'k')
		v <<= 10;
	else if (*end == 'M' || *end == 'm')
		v <<= 20;
	return (size_t)v;
}

static int read_line(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "r");
	int ok;

	if (!f)
		return -errno;
	ok = fgets(buf, (int)cap, f) != NULL;
	fclose(f);
	if (!ok)
		return -EIO;
	buf[strcspn(buf, "\n")] = '\0';
	return 0;
}

/* Cache sizes from sysfs (cpu0/cache/index*), else from sysconf. */
static void probe_caches(struct flyk_device *dev)
{
	char path[128], level[16], type[32], size[32];

	for (int i = 0; i < 16; i++) {
		const char *base = "/sys/devices/system/cpu/cpu0/cache/index";

		snprintf(path, sizeof(path), "%s%d/level", base, i);
		if (read_line(path, level, sizeof(level)) < 0)
			break;
		snprintf(path, sizeof(path), "%s%d/type", base, i);
		if (read_line(path, type, sizeof(type)) < 0)
			continue;
		snprintf(path, sizeof(path), "%s%d/size", base, i);
		if (read_line(path, size, sizeof(size)) < 0)
			continue;
		if (level[0] == '1' && strcmp(type, "Data") == 0)
			dev->l1d_bytes = parse_size(size);
		else if (level[0] == '2' && strcmp(type, "Instruction") != 0)
			dev->l2_bytes = parse_size(size);
		else if (level[0] == '3' && strcmp(type, "Instruction") != 0)
			dev->l3_bytes = parse_size(size);
	}
#ifdef _SC_LEVEL1_DCACHE_SIZE
	if (!dev->l1d_bytes && sysconf(_SC_LEVEL1_DCACHE_SIZE) > 0)
		dev->l1d_bytes = (size_t)sysconf(_SC_LEVEL1_DCACHE_SIZE);
	if (!dev->l2_bytes && sysconf(_SC_LEVEL2_CACHE_SIZE) > 0)
		dev->l2_bytes = (size_t)sysconf(_SC_LEVEL2_CACHE_SIZE);
	if (!dev->l3_bytes && sysconf(_SC_LEVEL3_CACHE_SIZE) > 0)
		dev->l3_bytes = (size_t)sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
}

static int cpu_open(int index, struct flyk_device **out)
{
	struct flyk_device *dev;
	long n;

	if (!out || index < 0)
		return -ENODEV;
	dev = calloc(1, sizeof(*dev));
	if (!dev)
		return -ENOMEM;
	dev->index = index;
	n = sysconf(_SC_NPROCESSORS_ONLN);
	dev->cores = n > 0 ? (int)n : 1;
	probe_caches(dev);
	*out = dev;
	return 0;
}

static void cpu_close(struct flyk_device *dev)
{
	if (!dev)
		return;
	free(dev->flush);
	free(dev);
}

/* The "model name" of /proc/cpuinfo, quotes replaced; "unknown" if none. */
static void cpu_model(char *buf, size_t cap)
{
	char line[512];
	FILE *f = fopen("/proc/cpuinfo", "r");

	snprintf(buf, cap, "unknown");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *colon;

		if (strncmp(line, "model name", 10) != 0)
			continue;
		colon = strchr(line, ':');
		if (!colon)
			continue;
		colon++;
		while (*colon == ' ' || *colon == '\t')
			colon++;
		colon[strcspn(colon, "\n")] = '\0';
		for (char *q = colon; *q; q++)
			if (*q == '"')
				*q = '\'';
		snprintf(buf, cap, "%s", colon);
		break;
	}
	fclose(f);
}

static int cpu_fingerprint(const struct flyk_device *dev, char *buf,
			   size_t cap)
{
	struct utsname u;
	char model[256];
	int len;

	if (!dev || !buf)
		return -EINVAL;
	if (uname(&u) < 0)
		snprintf(u.machine, sizeof(u.machine), "unknown");
	cpu_model(model, sizeof(model));
	len = snprintf(buf, cap,
		       "arch=%s model=\"%s\" units=%d l1d_kb=%zu l2_kb=%zu "
		       "l3_kb=%zu lib=%s",
		       u.machine, model, dev->cores, dev->l1d_bytes >> 10,
		       dev->l2_bytes >> 10, dev->l3_bytes >> 10, FLYK_VERSION);
	if (len < 0 || (size_t)len >= cap)
		return -ENOSPC;
	return len;
}

static struct flyk_backend cpu_backend = {
	.name = "cpu",
	.kind = FLYK_BACKEND_CPU,
	.open = cpu_open,
	.close = cpu_close,
	.fingerprint = cpu_fingerprint,
	.case_new = flyk_cpu_case_new,
	.case_free = flyk_cpu_case_free,
	.case_poison = flyk_cpu_case_poison,
	.case_time = flyk_cpu_case_time,
	.case_check = flyk_cpu_case_check,
};

static void backend_build(void)
{
	cpu_backend.variants = flyk_cpu_variants(&cpu_backend.nvariants);
}

const struct flyk_backend *flyk_cpu_backend(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, backend_build);
	return &cpu_backend;
}
