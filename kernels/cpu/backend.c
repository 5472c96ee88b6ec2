/*
 * backend.c -- the CPU backend: struct flyk_device (cores, caches, the
 * cache-cleaning buffer), the fingerprint and the backend's entry points.
 * The variant table is variants.c's, the threading helpers parallel.c's
 * (so that the op files, which use the helpers, and the table, which
 * names the op files' variants, do not form a circle with this file).
 *
 * Owns: every flyk_device it opens and its flush buffer.  Thread: a
 * device belongs to one thread at a time.
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
		       dev->l2_bytes >> 10, dev->l3_bytes >> 10, flyk_libver());
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
