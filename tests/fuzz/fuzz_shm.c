/*
 * fuzz_shm.c -- libFuzzer harness: the client's shm table reader
 * (proto/fly_shm.c, fly__shm_reader_open and fly_shm_lookup) on hostile
 * tables.
 *
 * A real table is built by the writer (64 slots, a few keys), the input
 * patches it through the writer's mapping, then it is handed to a reader
 * as the daemon hands it (a sealed memfd): byte 0 says whether to fix the header
 * checksum after patching (so lying headers get past it), the rest is a
 * list of (u16 offset, u8 value) patches.  Lookups of every written key
 * and of keys that were never written must answer hit, not found or
 * FLY_E_SHM -- never crash, never read out of bounds (ASan), never return
 * a decision outside the ABI's bounds; with no patch at all, every key
 * answers exactly what was written.
 */
#include <string.h>
#include <unistd.h>

#include "fly_abi.h"
#include "fly_shm.h"
#include "fuzz.h"

static const char *const keys[] = {
    "gemm/bf16/NT/m=4096,n=6144,k=4096",
    "rmsnorm/bf16/m=1,n=4096",
    "topk/fp32/m=4096,n=1024,k=8/det",
    "mqa_logits/fp8_e4m3/sq=4096,skv=4096,h=64,d=128/clean",
};
#define NKEYS (sizeof(keys) / sizeof(keys[0]))

static void decision_of(size_t i, struct fly_decision *d)
{
	memset(d, 0, sizeof(*d));
	d->status = FLY_STATUS_TUNED;
	snprintf(d->variant, sizeof(d->variant), "variant_%zu", i);
	d->nparams = (uint32_t)(i + 1);
	for (uint32_t j = 0; j < d->nparams; j++)
		d->params[j] = (int64_t)(i * 10 + j);
	d->median_us = 1.5 * (double)(i + 1);
}

static void check_bounds(const struct fly_decision *d)
{
	FUZZ_CHECK(d->nparams <= FLY_PARAMS_MAX);
	FUZZ_CHECK(d->status <= FLY_STATUS_TUNED);
	FUZZ_CHECK(memchr(d->variant, 0, sizeof(d->variant)) != NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fly_shm_writer *w;
	struct fly_shm_reader *r;
	struct fly_decision d, got;
	uint8_t *mem;
	size_t total, npatch = 0;
	int fd;

	if (fly__shm_writer_open(64, &w) != 0)
		return 0;
	for (size_t i = 0; i < NKEYS; i++) {
		decision_of(i, &d);
		FUZZ_CHECK(fly__shm_put(w, keys[i], strlen(keys[i]), &d) == 0);
	}
	mem = fly__shm_writer_mem(w);
	total = fly__shm_writer_size(w);
	for (size_t i = 1; i + 3 <= size; i += 3) {
		size_t off = ((size_t)data[i] | (size_t)data[i + 1] << 8) % total;
		mem[off] = data[i + 2];
		npatch++;
	}
	if (size > 0 && (data[0] & 1))
		*(uint32_t *)(mem + 48) = fly__shm_header_sum(mem);
	fd = dup(fly__shm_writer_fd(w));
	FUZZ_CHECK(fd >= 0);
	if (fly__shm_reader_open(fd, &r) != 0) {
		FUZZ_CHECK(npatch > 0);
		fly__shm_writer_close(w);
		return 0;
	}

	for (size_t i = 0; i < NKEYS; i++) {
		int rc = fly_shm_lookup(r, keys[i], strlen(keys[i]), &got);

		FUZZ_CHECK(rc == 0 || rc == FLY_E_NOTFOUND || rc == FLY_E_SHM);
		if (rc == 0)
			check_bounds(&got);
		if (npatch == 0) {
			decision_of(i, &d);
			FUZZ_CHECK(rc == 0);
			FUZZ_CHECK(strcmp(got.variant, d.variant) == 0);
			FUZZ_CHECK(got.nparams == d.nparams);
			FUZZ_CHECK(memcmp(got.params, d.params,
					  sizeof(d.params)) == 0);
		}
	}
	{
		static const char other[] = "gemm/bf16/NT/m=1,n=1,k=1";
		int rc = fly_shm_lookup(r, other, sizeof(other) - 1, &got);

		FUZZ_CHECK(rc == 0 || rc == FLY_E_NOTFOUND || rc == FLY_E_SHM);
		if (rc == 0)
			check_bounds(&got);
		if (npatch == 0)
			FUZZ_CHECK(rc == FLY_E_NOTFOUND);
	}
	(void)fly__shm_reader_generation(r);
	fly__shm_reader_close(r);
	fly__shm_writer_close(w);
	return 0;
}
