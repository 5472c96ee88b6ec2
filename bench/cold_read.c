/*
 * cold_read.c -- the floor under a cold shm lookup on this machine: one
 * random 1-byte read of a 32 MiB memfd through a fresh read-only mapping
 * (page-table fill + cache miss), then the same reads with the mapping
 * warm.  p50 of 10,000 each, in ns.
 *
 *   build/bench/cold_read
 *
 * Owns: its memfd.  Thread: one.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "bench_time.h"

#define SZ (32u << 20)
#define N 10000

/* p50 of N random reads of @p r; @p sum keeps the reads alive. */
static uint64_t pass(const volatile uint8_t *r, unsigned *x, uint64_t *sum)
{
	static uint64_t v[N];

	for (int i = 0; i < N; i++) {
		size_t off;
		uint64_t a;

		*x = *x * 1103515245u + 12345u;
		off = ((size_t)*x * 4096 + (*x & 63) * 64) % SZ;
		a = now_ns();
		*sum += r[off];
		v[i] = now_ns() - a;
	}
	qsort(v, N, sizeof(v[0]), cmp_u64);
	return v[N / 2];
}

int main(void)
{
	int fd = memfd_create("cold_read", 0);
	uint8_t *w;
	const volatile uint8_t *r;
	unsigned x = 12345;
	uint64_t sum = 0, cold, warm;

	if (fd < 0 || ftruncate(fd, SZ) < 0)
		return 1;
	w = mmap(NULL, SZ, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (w == MAP_FAILED)
		return 1;
	for (size_t i = 0; i < SZ; i += 64)
		w[i] = 1;
	r = mmap(NULL, SZ, PROT_READ, MAP_SHARED, fd, 0);
	if (r == MAP_FAILED)
		return 1;
	cold = pass(r, &x, &sum);
	warm = pass(r, &x, &sum);
	printf("cold_read_fresh_mapping_p50_ns %llu\ncold_read_warm_p50_ns %llu\n"
	       "(sum %llu)\n", (unsigned long long)cold,
	       (unsigned long long)warm, (unsigned long long)sum);
	return 0;
}
