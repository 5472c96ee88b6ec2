/*
 * test_shm.c -- proto/fly_shm: writer/reader round trips, probing, and a
 * reader that refuses or survives hostile tables; a concurrent
 * writer/readers check of the slot-word protocol (layout 6).
 *
 * Hostile tables are forged through fly__shm_writer_mem() (the writer's
 * own mapping) or by copying a table into a fresh memfd; offsets are the
 * documented layout of fly_shm.h.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fly_key.h"
#include "fly_shm.h"

#define OFF_MAGIC    0
#define OFF_VERSION  8
#define OFF_SLOTSIZE 16
#define OFF_CAPACITY 20
#define OFF_TOTAL    24
#define OFF_MAXPROBE 44
#define OFF_SUM	     48
#define SLOT(i)	     (FLY_SHM_HEADER_SIZE + (size_t)(i)*FLY_SHM_SLOT_SIZE)
#define ARENA(cap)   (FLY_SHM_HEADER_SIZE + (size_t)(cap)*FLY_SHM_SLOT_SIZE)
#define PER_SLOT     (FLY_SHM_SLOT_SIZE + FLY_SHM_ARENA_PER_SLOT)

static void mkdec(const char *key, uint64_t round, struct fly_decision *d)
{
	uint64_t h = fly_key_hash(key, strlen(key));

	memset(d, 0, sizeof(*d));
	d->status = FLY_STATUS_TUNED;
	snprintf(d->variant, sizeof(d->variant), "v%llu",
		 (unsigned long long)(h % 100000));
	d->nparams = 3;
	d->params[0] = (int64_t)h;
	d->params[1] = (int64_t)round;
	d->params[2] = (int64_t)(h ^ round);
	d->median_us = (double)round + 0.25;
}

/* Whether @p d is consistent with @p key (see mkdec). */
static int dec_ok(const char *key, const struct fly_decision *d)
{
	uint64_t h = fly_key_hash(key, strlen(key));
	char v[FLY_VARIANT_MAX];

	snprintf(v, sizeof(v), "v%llu", (unsigned long long)(h % 100000));
	return d->nparams == 3 && d->params[0] == (int64_t)h &&
	       d->params[2] == (int64_t)(h ^ (uint64_t)d->params[1]) &&
	       d->median_us == (double)d->params[1] + 0.25 &&
	       !strcmp(d->variant, v) && d->status == FLY_STATUS_TUNED;
}

static struct fly_shm_writer *wopen(uint32_t cap)
{
	struct fly_shm_writer *w = NULL;

	assert_int_equal(fly__shm_writer_open(cap, &w), 0);
	assert_non_null(w);
	return w;
}

static int ropen(struct fly_shm_writer *w, struct fly_shm_reader **r)
{
	int fd = dup(fly__shm_writer_fd(w));

	assert_true(fd >= 0);
	return fly__shm_reader_open(fd, r);
}

static void key_of(char *buf, int i)
{
	snprintf(buf, FLY_KEY_MAX, "rmsnorm/fp16/m=%d,n=4096", i + 1);
}

static int put(struct fly_shm_writer *w, const char *key, uint64_t round)
{
	struct fly_decision d;

	mkdec(key, round, &d);
	return fly__shm_put(w, key, strlen(key), &d);
}

static void test_roundtrip(void **state)
{
	struct fly_shm_writer *w = wopen(100);
	struct fly_shm_reader *r = NULL;
	struct fly_decision d;
	char k[FLY_KEY_MAX];

	(void)state;
	assert_int_equal(fly__shm_writer_capacity(w), 128);
	assert_int_equal(fly__shm_writer_size(w),
			 FLY_SHM_HEADER_SIZE + 128 * PER_SLOT);
	for (int i = 0; i < 50; i++) {
		key_of(k, i);
		assert_int_equal(put(w, k, 7), 0);
	}
	assert_int_equal(fly__shm_writer_count(w), 50);
	assert_int_equal(ropen(w, &r), 0);
	for (int i = 0; i < 50; i++) {
		key_of(k, i);
		assert_int_equal(fly_shm_lookup(r, k, strlen(k), &d), 0);
		assert_true(dec_ok(k, &d));
		assert_int_equal(d.params[1], 7);
		assert_int_equal(d.generation, fly__shm_reader_generation(r));
	}
	key_of(k, 999);
	assert_int_equal(fly_shm_lookup(r, k, strlen(k), &d), FLY_E_NOTFOUND);
	assert_int_equal(fly_shm_lookup(r, k, 0, &d), FLY_E_NOTFOUND);
	fly__shm_reader_close(r);
	fly__shm_writer_close(w);
	/* minimum capacity */
	w = wopen(1);
	assert_int_equal(fly__shm_writer_capacity(w), 64);
	fly__shm_writer_close(w);
}

/* issue 19: growing copies every live entry (tombstones not) into the
 * larger table, and the old table's readers see it superseded with a new
 * generation while its entries stay readable. */
static void test_copy_and_supersede(void **state)
{
	struct fly_shm_writer *w = wopen(64), *big = wopen(1024);
	struct fly_shm_reader *r = NULL, *rb = NULL;
	struct fly_decision d;
	char k[FLY_KEY_MAX];
	uint64_t g0;

	(void)state;
	for (int i = 0; i < 30; i++) {
		key_of(k, i);
		assert_int_equal(put(w, k, 3), 0);
	}
	key_of(k, 7);
	assert_int_equal(fly__shm_del(w, k, strlen(k)), 0);
	assert_int_equal(ropen(w, &r), 0);
	assert_int_equal(fly__shm_reader_superseded(r), 0);
	g0 = fly__shm_reader_generation(r);
	assert_int_equal(fly__shm_writer_copy(big, w), 29);
	assert_int_equal(fly__shm_writer_count(big), 29);
	fly__shm_writer_supersede(w);
	assert_int_equal(fly__shm_reader_superseded(r), 1);
	assert_true(fly__shm_reader_generation(r) > g0);
	assert_int_equal(ropen(big, &rb), 0);
	assert_int_equal(fly__shm_reader_superseded(rb), 0);
	for (int i = 0; i < 30; i++) {
		key_of(k, i);
		assert_int_equal(fly_shm_lookup(rb, k, strlen(k), &d),
				 i == 7 ? FLY_E_NOTFOUND : 0);
		if (i != 7) {
			assert_true(dec_ok(k, &d));
			/* the old table still answers what it held */
			assert_int_equal(fly_shm_lookup(r, k, strlen(k), &d), 0);
		}
	}
	fly__shm_reader_close(r);
	fly__shm_reader_close(rb);
	fly__shm_writer_close(w);
	fly__shm_writer_close(big);
}

static void test_overwrite_delete_clear(void **state)
{
	struct fly_shm_writer *w = wopen(64);
	struct fly_shm_reader *r = NULL;
	struct fly_decision d;
	const char *k = "gemm/bf16/NT/m=4096,n=6144,k=4096";
	char big[200];

	(void)state;
	assert_int_equal(ropen(w, &r), 0);
	assert_int_equal(put(w, k, 1), 0);
	assert_int_equal(put(w, k, 2), 0);
	assert_int_equal(fly__shm_writer_count(w), 1);
	assert_int_equal(fly_shm_lookup(r, k, strlen(k), &d), 0);
	assert_int_equal(d.params[1], 2);
	assert_int_equal(fly__shm_del(w, k, strlen(k)), 0);
	assert_int_equal(fly__shm_writer_count(w), 0);
	assert_int_equal(fly_shm_lookup(r, k, strlen(k), &d), FLY_E_NOTFOUND);
	assert_int_equal(fly__shm_del(w, k, strlen(k)), FLY_E_NOTFOUND);
	assert_int_equal(put(w, k, 3), 0);
	assert_int_equal(fly_shm_lookup(r, k, strlen(k), &d), 0);
	assert_int_equal(d.params[1], 3);
	fly__shm_clear(w);
	assert_int_equal(fly__shm_writer_count(w), 0);
	assert_int_equal(fly_shm_lookup(r, k, strlen(k), &d), FLY_E_NOTFOUND);
	assert_int_equal(put(w, k, 4), 0);
	assert_int_equal(fly_shm_lookup(r, k, strlen(k), &d), 0);
	assert_int_equal(d.params[1], 4);
	/* key too long */
	memset(big, 'a', sizeof(big));
	mkdec(k, 1, &d);
	assert_int_equal(fly__shm_put(w, big, FLY_KEY_MAX, &d), FLY_E_KEYLEN);
	assert_int_equal(fly__shm_put(w, big, FLY_KEY_MAX - 1, &d), 0);
	fly__shm_reader_close(r);
	fly__shm_writer_close(w);
}

/* Find @p n keys whose probe starts at the same slot of a table of
 * capacity @p cap. */
static int colliding(uint32_t cap, char keys[][FLY_KEY_MAX], int n)
{
	uint64_t want = 0;
	int got = 0;

	for (int i = 0; got < n && i < 10000000; i++) {
		char k[FLY_KEY_MAX];
		uint64_t h;

		key_of(k, i);
		h = fly__shm_home(fly__shm_key_hash(k, strlen(k))) & (cap - 1);
		if (got == 0)
			want = h;
		if (h == want)
			strcpy(keys[got++], k);
	}
	return got;
}

static void test_tombstone_keeps_probe(void **state)
{
	static char keys[3][FLY_KEY_MAX];
	struct fly_shm_writer *w = wopen(64);
	struct fly_shm_reader *r = NULL;
	struct fly_decision d;

	(void)state;
	assert_int_equal(colliding(64, keys, 3), 3);
	assert_int_equal(ropen(w, &r), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(put(w, keys[i], (uint64_t)i), 0);
	assert_int_equal(fly__shm_del(w, keys[0], strlen(keys[0])), 0);
	/* the tombstone of keys[0] must not end the probe for the others */
	for (int i = 1; i < 3; i++) {
		assert_int_equal(
		    fly_shm_lookup(r, keys[i], strlen(keys[i]), &d), 0);
		assert_true(dec_ok(keys[i], &d));
	}
	/* reinsert reuses the tombstone; all still found */
	assert_int_equal(put(w, keys[0], 9), 0);
	assert_int_equal(fly__shm_writer_count(w), 3);
	for (int i = 0; i < 3; i++)
		assert_int_equal(
		    fly_shm_lookup(r, keys[i], strlen(keys[i]), &d), 0);
	fly__shm_reader_close(r);
	fly__shm_writer_close(w);
}

static void test_probe_window_full(void **state)
{
	static char keys[FLY_SHM_MAX_PROBE + 1][FLY_KEY_MAX];
	struct fly_shm_writer *w = wopen(256);
	struct fly_shm_reader *r = NULL;
	struct fly_decision d;

	(void)state;
	assert_int_equal(colliding(256, keys, FLY_SHM_MAX_PROBE + 1),
			 FLY_SHM_MAX_PROBE + 1);
	for (int i = 0; i < FLY_SHM_MAX_PROBE; i++)
		assert_int_equal(put(w, keys[i], 1), 0);
	assert_int_equal(put(w, keys[FLY_SHM_MAX_PROBE], 1), -ENOSPC);
	assert_int_equal(ropen(w, &r), 0);
	assert_int_equal(fly_shm_lookup(r, keys[FLY_SHM_MAX_PROBE],
					strlen(keys[FLY_SHM_MAX_PROBE]), &d),
			 FLY_E_NOTFOUND);
	assert_int_equal(fly_shm_lookup(r, keys[FLY_SHM_MAX_PROBE - 1],
					strlen(keys[FLY_SHM_MAX_PROBE - 1]),
					&d),
			 0);
	fly__shm_reader_close(r);
	fly__shm_writer_close(w);
}

/* Pages of the writer's mapping that are resident. */
static size_t resident_pages(struct fly_shm_writer *w)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	size_t n = (fly__shm_writer_size(w) + pg - 1) / pg, r = 0;
	unsigned char *v = malloc(n);

	assert_non_null(v);
	assert_int_equal(mincore(fly__shm_writer_mem(w),
				 fly__shm_writer_size(w), v), 0);
	for (size_t i = 0; i < n; i++)
		r += v[i] & 1;
	free(v);
	return r;
}

/* Regression: clear() read every slot, which allocates every page of the
 * memfd (a 131072-slot table cost 32 MiB of RSS at start).  A clear of a
 * nearly empty table must leave the untouched pages unallocated. */
static void test_clear_keeps_table_sparse(void **state)
{
	struct fly_shm_writer *w = wopen(65536); /* 16 MiB */
	struct fly_decision d = { .status = FLY_STATUS_TUNED };

	(void)state;
	assert_int_equal(fly__shm_put(w, "topk/fp32/m=1,n=8,k=1", 21, &d), 0);
	fly__shm_clear(w);
	fly__shm_clear(w);
	assert_true(resident_pages(w) < 16);
	fly__shm_writer_close(w);
}

/* Regression: with FNV's low bits as the home slot, keys that differ in
 * their digits crowded into few homes (lookups of a 20,000-key table
 * probed long chains: ~950 ns).  32768 such keys must reach about as many
 * distinct homes of a 65536-slot table as random homes would
 * (65536 * (1 - e^-0.5) = 25786), and all fit. */
static void test_digit_keys_spread(void **state)
{
	struct fly_shm_writer *w = wopen(65536);
	struct fly_decision d = { .status = FLY_STATUS_TUNED };
	uint8_t *seen = calloc(65536, 1);
	char k[FLY_KEY_MAX];
	int distinct = 0;

	(void)state;
	assert_non_null(seen);
	for (int i = 1; i <= 32768; i++) {
		int n = snprintf(k, sizeof(k), "rmsnorm/fp32/m=4,n=%d", i);
		uint64_t h = fly__shm_home(fly__shm_key_hash(k, (size_t)n)) &
			     65535;

		distinct += !seen[h];
		seen[h] = 1;
		assert_int_equal(fly__shm_put(w, k, (size_t)n, &d), 0);
	}
	assert_true(distinct > 25786 * 95 / 100);
	free(seen);
	fly__shm_writer_close(w);
}

static void test_generation(void **state)
{
	struct fly_shm_writer *w = wopen(64);
	struct fly_shm_reader *r = NULL;
	uint64_t g;

	(void)state;
	assert_int_equal(ropen(w, &r), 0);
	g = fly__shm_reader_generation(r);
	/* Regression: the start value was nanoseconds since the epoch
	 * (~1.8e18), which status/stats JSON (doubles) rounded; it must
	 * stay exactly representable as a JSON number. */
	assert_true(g > 0);
	assert_true(g < (1ull << 53));
	assert_true(fly__shm_bump(w) == g + 1);
	assert_true(fly__shm_reader_generation(r) == g + 1);
	assert_true(fly__shm_bump(w) == g + 2);
	fly__shm_reader_close(r);
	fly__shm_writer_close(w);
}

/* Copy the writer's table into a new memfd of @p size bytes; seal it with
 * @p seals (0: none).  Returns the fd. */
static int copy_table(struct fly_shm_writer *w, size_t size, int seals)
{
	int fd = memfd_create("test-table", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	size_t n = fly__shm_writer_size(w);

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)size), 0);
	if (n > size)
		n = size;
	assert_int_equal(pwrite(fd, fly__shm_writer_mem(w), n, 0), (ssize_t)n);
	if (seals)
		assert_int_equal(fcntl(fd, F_ADD_SEALS, seals), 0);
	return fd;
}

#define ALLSEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE)

static void test_refuse_seals_and_size(void **state)
{
	struct fly_shm_writer *w = wopen(64);
	struct fly_shm_reader *r = NULL;
	size_t sz = fly__shm_writer_size(w);
	int fd;

	(void)state;
	/* a faithful sealed copy is accepted: the refusals below are due to
	 * the one thing each changes */
	assert_int_equal(fly__shm_reader_open(copy_table(w, sz, ALLSEALS), &r),
			 0);
	fly__shm_reader_close(r);
	r = NULL;
	assert_int_equal(fly__shm_reader_open(copy_table(w, sz, 0), &r),
			 FLY_E_SHM);
	assert_int_equal(
	    fly__shm_reader_open(copy_table(w, sz, F_SEAL_SHRINK | F_SEAL_GROW),
				 &r),
	    FLY_E_SHM);
	assert_int_equal(
	    fly__shm_reader_open(
		copy_table(w, sz, F_SEAL_SHRINK | F_SEAL_WRITE), &r),
	    FLY_E_SHM);
	assert_int_equal(
	    fly__shm_reader_open(copy_table(w, sz + 4096, ALLSEALS), &r),
	    FLY_E_SHM);
	assert_int_equal(fly__shm_reader_open(copy_table(w, 100, ALLSEALS), &r),
			 FLY_E_SHM);
	assert_null(r);
	/* not a regular file */
	{
		int p[2];

		assert_int_equal(pipe(p), 0);
		close(p[1]);
		assert_int_equal(fly__shm_reader_open(p[0], &r), FLY_E_SHM);
		/* the fd was taken even on failure */
		assert_int_equal(fcntl(p[0], F_GETFD), -1);
		assert_int_equal(errno, EBADF);
	}
	fd = copy_table(w, sz, 0);
	assert_int_equal(fly__shm_reader_open(fd, &r), FLY_E_SHM);
	assert_int_equal(fcntl(fd, F_GETFD), -1);
	fly__shm_writer_close(w);
}

/* Set a u32/u64 header field of the writer's table, optionally fixing
 * the header checksum so only the field itself is wrong. */
static void set32(struct fly_shm_writer *w, size_t off, uint32_t v, int fix)
{
	uint8_t *b = fly__shm_writer_mem(w);
	uint32_t s;

	memcpy(b + off, &v, 4);
	if (fix) {
		s = fly__shm_header_sum(b);
		memcpy(b + OFF_SUM, &s, 4);
	}
}

static void test_refuse_header(void **state)
{
	struct fly_shm_writer *w;
	struct fly_shm_reader *r = NULL;
	uint8_t *b;
	uint32_t v;

	(void)state;
	w = wopen(64);
	b = fly__shm_writer_mem(w);
	b[OFF_MAGIC] ^= 1;
	assert_int_equal(ropen(w, &r), FLY_E_SHM);
	b[OFF_MAGIC] ^= 1;
	assert_int_equal(ropen(w, &r), 0);
	fly__shm_reader_close(r);
	r = NULL;

	set32(w, OFF_VERSION, FLY_SHM_LAYOUT_VERSION + 1, 1);
	assert_int_equal(ropen(w, &r), FLY_E_VERSION);
	/* a version-3 table (256-byte slots, no arena) is refused cleanly,
	 * whatever its sizes say */
	set32(w, OFF_VERSION, 3, 1);
	assert_int_equal(ropen(w, &r), FLY_E_VERSION);
	/* a version-4 table (the same sizes, keys placed by the byte-wise
	 * fly_key_hash): read as version 5 it would miss every key */
	set32(w, OFF_VERSION, 4, 1);
	assert_int_equal(ropen(w, &r), FLY_E_VERSION);
	set32(w, OFF_VERSION, FLY_SHM_LAYOUT_VERSION, 1);
	set32(w, OFF_SLOTSIZE, 256, 1);
	assert_int_equal(ropen(w, &r), FLY_E_SHM);
	set32(w, OFF_SLOTSIZE, FLY_SHM_SLOT_SIZE, 1);
	set32(w, OFF_VERSION, FLY_SHM_LAYOUT_VERSION, 1);

	/* bad checksum: a constant field changed behind the sum's back */
	memcpy(&v, b + OFF_MAXPROBE, 4);
	set32(w, OFF_MAXPROBE, v + 1, 0);
	assert_int_equal(ropen(w, &r), FLY_E_SHM);
	set32(w, OFF_MAXPROBE, v, 0);
	assert_int_equal(ropen(w, &r), 0);
	fly__shm_reader_close(r);
	r = NULL;

	/* hostile capacity (sum fixed): must not fit the size */
	set32(w, OFF_CAPACITY, 1u << 30, 1);
	assert_int_equal(ropen(w, &r), FLY_E_SHM);
	set32(w, OFF_CAPACITY, 0, 1);
	assert_int_equal(ropen(w, &r), FLY_E_SHM);
	set32(w, OFF_CAPACITY, 64, 1);
	assert_int_equal(ropen(w, &r), 0);
	fly__shm_reader_close(r);
	fly__shm_writer_close(w);
}

static void test_refuse_non_pow2(void **state)
{
	struct fly_shm_writer *w = wopen(64);
	struct fly_shm_reader *r = NULL;
	uint64_t total = FLY_SHM_HEADER_SIZE + 3 * PER_SLOT;
	uint8_t *b = fly__shm_writer_mem(w);

	(void)state;
	/* capacity 3, total size and file size consistent, sum fixed: only
	 * the power-of-two rule is broken */
	memcpy(b + OFF_TOTAL, &total, 8);
	set32(w, OFF_CAPACITY, 3, 1);
	assert_int_equal(
	    fly__shm_reader_open(copy_table(w, total, ALLSEALS), &r),
	    FLY_E_SHM);
	/* the same with capacity 4 is accepted (control) */
	total = FLY_SHM_HEADER_SIZE + 4 * PER_SLOT;
	memcpy(b + OFF_TOTAL, &total, 8);
	set32(w, OFF_CAPACITY, 4, 1);
	assert_int_equal(
	    fly__shm_reader_open(copy_table(w, total, ALLSEALS), &r), 0);
	fly__shm_reader_close(r);
	fly__shm_writer_close(w);
}

/* Byte offset of slot @p i's record in the writer's table (0: none). */
static size_t rec_off(struct fly_shm_writer *w, uint32_t i)
{
	uint8_t *b = fly__shm_writer_mem(w);
	uint64_t word;

	memcpy(&word, b + SLOT(i), 8);
	if ((word & FLY_SHM_REF_MASK) == 0)
		return 0;
	return ARENA(fly__shm_writer_capacity(w)) +
	       ((size_t)(word & FLY_SHM_REF_MASK) - 1) * 16;
}

/* Offset of the key bytes of the record at @p off (after word 0, the
 * median and nparams params). */
static size_t rec_key_off(struct fly_shm_writer *w, size_t off)
{
	uint8_t *b = fly__shm_writer_mem(w);

	return off + 16 + 8 * (size_t)b[off + 2];
}

/* Index of the slot holding @p key in the writer's table, or -1. */
static int slot_of(struct fly_shm_writer *w, const char *key)
{
	uint8_t *b = fly__shm_writer_mem(w);
	size_t len = strlen(key);

	for (uint32_t i = 0; i < fly__shm_writer_capacity(w); i++) {
		size_t off = rec_off(w, i);

		if (off != 0 && b[off] == len &&
		    !memcmp(b + rec_key_off(w, off), key, len))
			return (int)i;
	}
	return -1;
}

/* issue 19: growing keeps the records in the order they were published
 * (the arena's order), so keys published together stay on the same
 * cache lines and pages in the larger table; a copy in slot order
 * scattered them by hash, and a pass over 1M keys in their import order
 * paid a record miss on every lookup.  Replaced and deleted keys'
 * records left behind in the arena are not copied. */
static void test_issue_19_copy_keeps_arena_order(void **state)
{
	struct fly_shm_writer *w = wopen(64), *big = wopen(1024);
	struct fly_shm_reader *rb = NULL;
	struct fly_decision d;
	char k[FLY_KEY_MAX];
	size_t prev = 0;

	(void)state;
	for (int i = 0; i < 30; i++) {
		key_of(k, i);
		assert_int_equal(put(w, k, 1), 0);
	}
	key_of(k, 3);
	assert_int_equal(put(w, k, 2), 0); /* a new record, at the end */
	key_of(k, 5);
	assert_int_equal(fly__shm_del(w, k, strlen(k)), 0);
	assert_int_equal(fly__shm_writer_copy(big, w), 29);
	assert_int_equal(fly__shm_writer_count(big), 29);
	for (int i = 0; i < 30; i++) {
		int s;

		if (i == 3 || i == 5)
			continue;
		key_of(k, i);
		s = slot_of(big, k);
		assert_true(s >= 0);
		assert_true(rec_off(big, (uint32_t)s) > prev);
		prev = rec_off(big, (uint32_t)s);
	}
	key_of(k, 3);
	assert_true(rec_off(big, (uint32_t)slot_of(big, k)) > prev);
	assert_int_equal(ropen(big, &rb), 0);
	for (int i = 0; i < 30; i++) {
		key_of(k, i);
		assert_int_equal(fly_shm_lookup(rb, k, strlen(k), &d),
				 i == 5 ? FLY_E_NOTFOUND : 0);
		if (i != 5) {
			assert_true(dec_ok(k, &d));
			assert_int_equal(d.params[1], i == 3 ? 2 : 1);
		}
	}
	fly__shm_reader_close(rb);
	fly__shm_writer_close(w);
	fly__shm_writer_close(big);
}

/* Layout 5: a canonical key's table hash is its problem's, so a client
 * that has only the (bucketed) problem finds the slot the writer chose
 * for the text; any other text is hashed as text and still found by
 * text; a wrong hash finds nothing. */
static void test_problem_hash_is_key_hash(void **state)
{
	static const char *const keys[] = {
		"rmsnorm/fp32/m=8,n=64",
		"gemm/bf16/NT/m=4096,n=6144,k=4096",
		"topk/fp32/m=4096,n=1024,k=8/det",
		"attention/bf16/b=1,sq=128,skv=4096,hq=32,hkv=8,d=128/causal",
	};
	struct fly_shm_writer *w = wopen(64);
	struct fly_shm_reader *r = NULL;
	struct fly_decision d;
	struct fly_problem p;
	const char *odd = "not a key/at all";

	(void)state;
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		size_t len = strlen(keys[i]);

		assert_int_equal(fly_key_parse(keys[i], len, &p), 0);
		assert_true(fly__shm_problem_hash(&p) ==
			    fly__shm_key_hash(keys[i], len));
		assert_int_equal(put(w, keys[i], i), 0);
	}
	assert_int_equal(put(w, odd, 9), 0);
	assert_int_equal(ropen(w, &r), 0);
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		size_t len = strlen(keys[i]);

		assert_int_equal(fly_key_parse(keys[i], len, &p), 0);
		assert_int_equal(fly__shm_lookup_hashed(
					 r, fly__shm_problem_hash(&p), keys[i],
					 len, &d),
				 0);
		assert_true(dec_ok(keys[i], &d));
		assert_int_equal(fly__shm_lookup_hashed(
					 r, fly__shm_problem_hash(&p) ^ 1ull << 40,
					 keys[i], len, &d),
				 FLY_E_NOTFOUND);
	}
	assert_int_equal(fly_shm_lookup(r, odd, strlen(odd), &d), 0);
	assert_true(dec_ok(odd, &d));
	fly__shm_reader_close(r);
	fly__shm_writer_close(w);
}

static void test_bad_slot(void **state)
{
	struct fly_shm_writer *w = wopen(64);
	struct fly_shm_reader *r = NULL;
	struct fly_decision d;
	const char *k = "topk/fp32/m=4096,n=1024,k=8/det";
	uint8_t *b = fly__shm_writer_mem(w);
	size_t var;
	uint64_t word, bad;
	int s;

	(void)state;
	assert_int_equal(put(w, k, 5), 0);
	assert_int_equal(ropen(w, &r), 0);
	s = slot_of(w, k);
	assert_true(s >= 0);
	/* a flipped variant byte: checksum fails, the record is not
	 * returned */
	var = rec_key_off(w, rec_off(w, (uint32_t)s)) + strlen(k);
	b[var] ^= 0x01;
	memset(&d, 0, sizeof(d));
	assert_int_equal(fly_shm_lookup(r, k, strlen(k), &d), FLY_E_SHM);
	assert_int_equal(d.nparams, 0);
	b[var] ^= 0x01;
	assert_int_equal(fly_shm_lookup(r, k, strlen(k), &d), 0);
	/* layout 6: the slot is one word.  Another version of the same
	 * reference is the same entry; a reference of 0 is a tombstone and
	 * another tag another key's slot: both passed over, a miss */
	memcpy(&word, b + SLOT(s), 8);
	bad = word ^ 5ull << FLY_SHM_VER_SHIFT;
	memcpy(b + SLOT(s), &bad, 8);
	assert_int_equal(fly_shm_lookup(r, k, strlen(k), &d), 0);
	assert_true(dec_ok(k, &d));
	bad = word & ~FLY_SHM_REF_MASK;
	memcpy(b + SLOT(s), &bad, 8);
	assert_int_equal(fly_shm_lookup(r, k, strlen(k), &d), FLY_E_NOTFOUND);
	bad = word ^ 1ull << FLY_SHM_TAG_SHIFT;
	memcpy(b + SLOT(s), &bad, 8);
	assert_int_equal(fly_shm_lookup(r, k, strlen(k), &d), FLY_E_NOTFOUND);
	memcpy(b + SLOT(s), &word, 8);
	assert_int_equal(fly_shm_lookup(r, k, strlen(k), &d), 0);
	fly__shm_reader_close(r);
	fly__shm_writer_close(w);
}

/* Layout 6 (issue 19): a slot is one word, and the writer never stores
 * a word it stored before within 2^20 - 1 publications: a key put three
 * times gets its first record back from the free list (same unit, same
 * tag), and its slot word still differs from the first one's -- a reader
 * that loaded the first word before a copy and the third after it
 * retries instead of returning the copy. */
static void test_issue_19_slot_word_versions(void **state)
{
	struct fly_shm_writer *w = wopen(64);
	const char *k = "rmsnorm/bf16/m=1,n=4096";
	uint8_t *b = fly__shm_writer_mem(w);
	uint64_t w1, w2, w3;
	int s;

	(void)state;
	assert_int_equal(FLY_SHM_SLOT_SIZE, 8);
	assert_int_equal(put(w, k, 1), 0);
	s = slot_of(w, k);
	assert_true(s >= 0);
	memcpy(&w1, b + SLOT(s), 8);
	assert_int_equal(put(w, k, 2), 0);
	memcpy(&w2, b + SLOT(s), 8);
	assert_int_equal(put(w, k, 3), 0);
	memcpy(&w3, b + SLOT(s), 8);
	assert_true((w2 & FLY_SHM_REF_MASK) != (w1 & FLY_SHM_REF_MASK));
	assert_true((w3 & FLY_SHM_REF_MASK) == (w1 & FLY_SHM_REF_MASK));
	assert_true(w3 >> FLY_SHM_TAG_SHIFT == w1 >> FLY_SHM_TAG_SHIFT);
	assert_true(w3 != w1);
	/* a tombstone's word is not 0 (0 is a never-used slot, which ends
	 * a probe) */
	assert_int_equal(fly__shm_del(w, k, strlen(k)), 0);
	memcpy(&w1, b + SLOT(s), 8);
	assert_true(w1 != 0 && (w1 & FLY_SHM_REF_MASK) == 0);
	fly__shm_writer_close(w);
}

/* Sign the record of @p nw words at @p rec (as the writer does). */
static void resum_record(uint8_t *rec, uint32_t nw)
{
	uint64_t w[32], w0;

	assert_true(nw <= 32);
	memcpy(w, rec, 8 * nw);
	w0 = (w[0] & 0xffffffffull) |
	     (uint64_t)fly__shm_record_sum(w, nw) << 32;
	memcpy(rec, &w0, 8);
}

/* Issue 19: the reader copies the variant a word at a time; a record
 * whose padding past the variant is not zero (a hostile writer that
 * signs it) still reads as exactly its variant, NUL-terminated, and
 * unused params as 0. */
static void test_issue_19_variant_padding_masked(void **state)
{
	struct fly_shm_writer *w = wopen(64);
	struct fly_shm_reader *r = NULL;
	const char *k = "rmsnorm/bf16/m=1,n=4096";
	struct fly_decision d = { .status = FLY_STATUS_TUNED, .nparams = 1,
				  .params = { 7 }, .median_us = 1.5 };
	uint8_t *b = fly__shm_writer_mem(w);
	size_t off, var, end;
	uint32_t nw;
	int s;

	(void)state;
	strcpy(d.variant, "abc");
	assert_int_equal(fly__shm_put(w, k, strlen(k), &d), 0);
	s = slot_of(w, k);
	off = rec_off(w, (uint32_t)s);
	var = rec_key_off(w, off) + strlen(k);
	/* words: head 2, 1 param, key and variant rounded up to a unit */
	nw = (2 + 1 + ((uint32_t)strlen(k) + 3 + 7) / 8 + 1) & ~1u;
	end = off + 8 * nw;
	assert_true(var + 3 < end);
	memset(b + var + 3, 'X', end - (var + 3));
	resum_record(b + off, nw);
	assert_int_equal(ropen(w, &r), 0);
	memset(&d, 0x5a, sizeof(d));
	assert_int_equal(fly_shm_lookup(r, k, strlen(k), &d), 0);
	assert_string_equal(d.variant, "abc");
	for (int i = 3; i < FLY_VARIANT_MAX; i++)
		assert_int_equal(d.variant[i], 0);
	assert_int_equal(d.nparams, 1);
	assert_int_equal(d.params[0], 7);
	for (int i = 1; i < FLY_PARAMS_MAX; i++)
		assert_int_equal(d.params[i], 0);
	assert_int_equal(d.provisional, 0);
	assert_int_equal(d.exact, 0);
	assert_true(d.median_us == 1.5);
	fly__shm_reader_close(r);
	fly__shm_writer_close(w);
}

/* A slot whose reference or record is out of range: FLY_E_SHM, no read
 * outside the mapping (ASan builds check that). */
static void test_bad_record_ref(void **state)
{
	struct fly_shm_writer *w = wopen(64);
	struct fly_shm_reader *r = NULL;
	struct fly_decision d;
	const char *k = "rmsnorm/bf16/m=1,n=8192";
	uint8_t *b = fly__shm_writer_mem(w);
	uint64_t ref, bad;
	size_t off;
	int s;

	(void)state;
	assert_int_equal(put(w, k, 2), 0);
	assert_int_equal(ropen(w, &r), 0);
	s = slot_of(w, k);
	assert_true(s >= 0);
	off = rec_off(w, (uint32_t)s);
	memcpy(&ref, b + SLOT(s), 8);
	/* the reference past the arena's last unit, at the largest value
	 * a slot holds, and at the last unit (the record's words would run
	 * past the end) */
	bad = (ref & ~FLY_SHM_REF_MASK) | (64u * FLY_SHM_ARENA_PER_SLOT / 16 + 1);
	memcpy(b + SLOT(s), &bad, 8);
	assert_int_equal(fly_shm_lookup(r, k, strlen(k), &d), FLY_E_SHM);
	bad = ref | FLY_SHM_REF_MASK;
	memcpy(b + SLOT(s), &bad, 8);
	assert_int_equal(fly_shm_lookup(r, k, strlen(k), &d), FLY_E_SHM);
	bad = (ref & ~FLY_SHM_REF_MASK) | (64u * FLY_SHM_ARENA_PER_SLOT / 16);
	memcpy(b + SLOT(s), &bad, 8);
	memcpy(b + ARENA(64) + 64u * FLY_SHM_ARENA_PER_SLOT - 16, b + off, 8);
	assert_int_equal(fly_shm_lookup(r, k, strlen(k), &d), FLY_E_SHM);
	memcpy(b + SLOT(s), &ref, 8);
	assert_int_equal(fly_shm_lookup(r, k, strlen(k), &d), 0);
	/* lengths out of range: key length 0, nparams 9 */
	b[off] = 0;
	assert_int_equal(fly_shm_lookup(r, k, strlen(k), &d), FLY_E_SHM);
	b[off] = (uint8_t)strlen(k);
	b[off + 2] = FLY_PARAMS_MAX + 1;
	assert_int_equal(fly_shm_lookup(r, k, strlen(k), &d), FLY_E_SHM);
	fly__shm_reader_close(r);
	fly__shm_writer_close(w);
}

/* Two keys that share a tag (the slot's 16 bits of hash) and a probe:
 * the full key in the record decides, so the other key's decision is
 * never returned.  Forged: key b's home slot made to reference key a's
 * record under b's tag. */
static void test_tag_collision_is_miss(void **state)
{
	struct fly_shm_writer *w = wopen(64);
	struct fly_shm_reader *r = NULL;
	struct fly_decision d;
	const char *a = "gemm/bf16/NN/m=128,n=128,k=128";
	char bk[FLY_KEY_MAX];
	uint8_t *m = fly__shm_writer_mem(w);
	uint64_t ref, hb, forged;
	uint32_t home;
	int sa;

	(void)state;
	assert_int_equal(put(w, a, 1), 0);
	sa = slot_of(w, a);
	assert_true(sa >= 0);
	for (int i = 0;; i++) {
		key_of(bk, i);
		hb = fly__shm_key_hash(bk, strlen(bk));
		home = (uint32_t)fly__shm_home(hb) & 63;
		if (home != (uint32_t)sa)
			break;
	}
	memcpy(&ref, m + SLOT(sa), 8);
	forged = (hb >> FLY_SHM_TAG_SHIFT << FLY_SHM_TAG_SHIFT) |
		 (ref & ~(~0ull << FLY_SHM_TAG_SHIFT));
	memcpy(m + SLOT(home), &forged, 8);
	assert_int_equal(ropen(w, &r), 0);
	assert_int_equal(fly_shm_lookup(r, bk, strlen(bk), &d),
			 FLY_E_NOTFOUND);
	assert_int_equal(fly_shm_lookup(r, a, strlen(a), &d), 0);
	assert_true(dec_ok(a, &d));
	fly__shm_reader_close(r);
	fly__shm_writer_close(w);
}

/* Records of every size class: the longest keys, variants and params
 * round-trip; rewriting a key with a record of another size frees the
 * old one for reuse; a full arena is -ENOSPC (the daemon grows then),
 * never a lost or damaged entry. */
static void test_long_keys_and_arena(void **state)
{
	struct fly_shm_writer *w = wopen(64);
	struct fly_shm_reader *r = NULL;
	struct fly_decision d, got;
	char k[FLY_KEY_MAX];
	int n = 0, rc = 0;

	(void)state;
	assert_int_equal(ropen(w, &r), 0);
	memset(&d, 0, sizeof(d));
	d.status = FLY_STATUS_TUNED;
	d.nparams = FLY_PARAMS_MAX;
	memset(d.variant, 'v', FLY_VARIANT_MAX - 1);
	for (int i = 0; i < FLY_PARAMS_MAX; i++)
		d.params[i] = -1 - i;
	/* 64 slots x 128 bytes of arena: 36 records of 224 bytes */
	while (n < 64) {
		memset(k, 'k', FLY_KEY_MAX - 1);
		snprintf(k, FLY_KEY_MAX, "%04d", n);
		k[4] = 'k';
		d.median_us = n;
		rc = fly__shm_put(w, k, FLY_KEY_MAX - 1, &d);
		if (rc < 0)
			break;
		n++;
	}
	assert_int_equal(rc, -ENOSPC);
	assert_int_equal(n, 64 * FLY_SHM_ARENA_PER_SLOT / 224);
	assert_int_equal(fly__shm_writer_count(w), n);
	for (int i = 0; i < n; i++) {
		memset(k, 'k', FLY_KEY_MAX - 1);
		snprintf(k, FLY_KEY_MAX, "%04d", i);
		k[4] = 'k';
		assert_int_equal(fly_shm_lookup(r, k, FLY_KEY_MAX - 1, &got),
				 0);
		assert_int_equal(got.nparams, FLY_PARAMS_MAX);
		assert_int_equal(got.params[7], -8);
		assert_int_equal(strlen(got.variant), FLY_VARIANT_MAX - 1);
		assert_true(got.median_us == i);
		/* a short record for key i frees a 224-byte one ... */
		d.nparams = 0;
		strcpy(d.variant, "s");
		assert_int_equal(fly__shm_put(w, k, FLY_KEY_MAX - 1, &d), 0);
		d.nparams = FLY_PARAMS_MAX;
		memset(d.variant, 'v', FLY_VARIANT_MAX - 1);
		/* ... which the long record takes back */
		assert_int_equal(fly__shm_put(w, k, FLY_KEY_MAX - 1, &d), 0);
	}
	assert_int_equal(fly__shm_writer_count(w), n);
	fly__shm_clear(w);
	assert_int_equal(fly__shm_put(w, k, FLY_KEY_MAX - 1, &d), 0);
	fly__shm_reader_close(r);
	fly__shm_writer_close(w);
}

static void test_hostile_max_probe(void **state)
{
	struct fly_shm_writer *w = wopen(64);
	struct fly_shm_reader *r = NULL;
	struct fly_decision d;
	char k[FLY_KEY_MAX];

	(void)state;
	/* a full table (no never-used slot ends a probe) and a huge
	 * max_probe: the lookup still ends, bounded by the capacity */
	for (int i = 0; fly__shm_writer_count(w) < 64; i++) {
		key_of(k, i);
		(void)put(w, k, 1);
	}
	set32(w, OFF_MAXPROBE, 0xffffffffu, 1);
	assert_int_equal(ropen(w, &r), 0);
	key_of(k, 1000000);
	assert_int_equal(fly_shm_lookup(r, k, strlen(k), &d), FLY_E_NOTFOUND);
	fly__shm_reader_close(r);
	fly__shm_writer_close(w);
}

#define OFF_ARENA_USED 56

/* Issue 19: a reader pre-faults the slots and the written part of the
 * arena (the writer's arena-used mark), never the arena's unwritten
 * tail (reading a memfd hole allocates a page); lookups still hit. */
static void test_issue_19_prefault_written_part(void **state)
{
	struct fly_shm_writer *w = wopen(65536); /* 9 MiB, 1 MiB of slots */
	struct fly_shm_reader *r = NULL;
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	size_t slot_pages = (ARENA(65536) + pg - 1) / pg;
	struct fly_decision d;
	uint64_t used;
	char k[FLY_KEY_MAX];

	(void)state;
	for (int i = 0; i < 200; i++) {
		key_of(k, i);
		assert_int_equal(put(w, k, 1), 0);
	}
	memcpy(&used, (uint8_t *)fly__shm_writer_mem(w) + OFF_ARENA_USED, 8);
	assert_true(used >= 200 * 2 && used <= 200 * 14); /* 2-14 units */
	assert_int_equal(ropen(w, &r), 0);
	assert_true(fly__shm_reader_prefault(r) <=
		    (slot_pages + used * 16 / pg + 2) * pg);
	/* the slots (now all resident) and the records' few pages */
	assert_true(resident_pages(w) <= slot_pages + used * 16 / pg + 2);
	for (int i = 0; i < 200; i++) {
		key_of(k, i);
		assert_int_equal(fly_shm_lookup(r, k, strlen(k), &d), 0);
		assert_true(dec_ok(k, &d));
	}
	fly__shm_reader_close(r);
	fly__shm_writer_close(w);
}

/* A hostile arena-used mark is bounded by the arena; a writer before the
 * mark (0) gets the slots pre-faulted only.  Either way the reader maps
 * and serves. */
static void test_issue_19_prefault_hostile_mark(void **state)
{
	struct fly_shm_writer *w = wopen(64);
	struct fly_shm_reader *r = NULL;
	uint8_t *b = fly__shm_writer_mem(w);
	uint64_t marks[] = { ~0ull, 0 };
	struct fly_decision d;
	char k[FLY_KEY_MAX];

	(void)state;
	key_of(k, 7);
	assert_int_equal(put(w, k, 3), 0);
	for (size_t m = 0; m < sizeof(marks) / sizeof(marks[0]); m++) {
		memcpy(b + OFF_ARENA_USED, &marks[m], 8);
		assert_int_equal(ropen(w, &r), 0);
		assert_true(fly__shm_reader_prefault(r) <=
			    fly__shm_writer_size(w));
		assert_int_equal(fly_shm_lookup(r, k, strlen(k), &d), 0);
		assert_true(dec_ok(k, &d));
		fly__shm_reader_close(r);
	}
	fly__shm_writer_close(w);
}

static void test_client_cannot_write(void **state)
{
	struct fly_shm_writer *w = wopen(64);
	int fd = dup(fly__shm_writer_fd(w));
	void *p;

	(void)state;
	if (!fly__shm_writer_sealed_future_write(w)) {
		close(fd);
		fly__shm_writer_close(w);
		skip(); /* kernel before 5.1: no F_SEAL_FUTURE_WRITE */
	}
	p = mmap(NULL, fly__shm_writer_size(w), PROT_READ | PROT_WRITE,
		 MAP_SHARED, fd, 0);
	assert_true(p == MAP_FAILED);
	assert_int_equal(errno, EPERM);
	assert_true(ftruncate(fd, 0) < 0);
	assert_true(pwrite(fd, "x", 1, 0) < 0);
	close(fd);
	fly__shm_writer_close(w);
}

/* ---------------------------------------------------------------- concurrency
 */

#define NKEYS	32
#define LOOKUPS 100000

struct conc {
	struct fly_shm_writer *w;
	struct fly_shm_reader *r;
	char keys[NKEYS][FLY_KEY_MAX];
	atomic_int stop;
	long hits[2];
	long torn[2];
	long bad_r[2];
};

static void *writer_main(void *arg)
{
	struct conc *c = arg;

	for (uint64_t round = 1; !atomic_load(&c->stop); round++) {
		for (int i = 0; i < NKEYS; i++)
			(void)put(c->w, c->keys[i], round);
		if (round % 64 == 0)
			(void)fly__shm_del(c->w, c->keys[round % NKEYS],
					   strlen(c->keys[round % NKEYS]));
		/* the arena starts over: records are reused by other keys
		 * while readers may still copy them */
		if (round % 97 == 0)
			fly__shm_clear(c->w);
	}
	return NULL;
}

struct rarg {
	struct conc *c;
	int id;
};

static void *reader_main(void *arg)
{
	struct rarg *ra = arg;
	struct conc *c = ra->c;
	unsigned seed = (unsigned)ra->id * 7919u + 1;

	for (int n = 0; n < LOOKUPS; n++) {
		struct fly_decision d;
		const char *k = c->keys[rand_r(&seed) % NKEYS];
		int rc = fly_shm_lookup(c->r, k, strlen(k), &d);

		if (rc == 0) {
			c->hits[ra->id]++;
			if (!dec_ok(k, &d))
				c->bad_r[ra->id]++;
		} else if (rc == FLY_E_SHM) {
			c->torn[ra->id]++;
		} else if (rc != FLY_E_NOTFOUND) {
			c->bad_r[ra->id]++;
		}
	}
	return NULL;
}

static void test_concurrent(void **state)
{
	static struct conc c;
	pthread_t wt, rt[2];
	struct rarg ra[2];

	(void)state;
	memset(&c, 0, sizeof(c));
	c.w = wopen(64);
	for (int i = 0; i < NKEYS; i++) {
		key_of(c.keys[i], i);
		assert_int_equal(put(c.w, c.keys[i], 0), 0);
	}
	assert_int_equal(ropen(c.w, &c.r), 0);
	assert_int_equal(pthread_create(&wt, NULL, writer_main, &c), 0);
	for (int i = 0; i < 2; i++) {
		ra[i].c = &c;
		ra[i].id = i;
		assert_int_equal(
		    pthread_create(&rt[i], NULL, reader_main, &ra[i]), 0);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(rt[i], NULL);
	atomic_store(&c.stop, 1);
	pthread_join(wt, NULL);
	for (int i = 0; i < 2; i++) {
		print_message("reader %d: %ld hits, %ld torn (FLY_E_SHM)\n", i,
			      c.hits[i], c.torn[i]);
		assert_int_equal(c.bad_r[i], 0);
		assert_true(c.hits[i] > 0);
	}
	fly__shm_reader_close(c.r);
	fly__shm_writer_close(c.w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_roundtrip),
	    cmocka_unit_test(test_copy_and_supersede),
	    cmocka_unit_test(test_overwrite_delete_clear),
	    cmocka_unit_test(test_tombstone_keeps_probe),
	    cmocka_unit_test(test_probe_window_full),
	    cmocka_unit_test(test_generation),
	    cmocka_unit_test(test_clear_keeps_table_sparse),
	    cmocka_unit_test(test_digit_keys_spread),
	    cmocka_unit_test(test_refuse_seals_and_size),
	    cmocka_unit_test(test_refuse_header),
	    cmocka_unit_test(test_refuse_non_pow2),
	    cmocka_unit_test(test_issue_19_copy_keeps_arena_order),
	    cmocka_unit_test(test_problem_hash_is_key_hash),
	    cmocka_unit_test(test_bad_slot),
	    cmocka_unit_test(test_bad_record_ref),
	    cmocka_unit_test(test_issue_19_slot_word_versions),
	    cmocka_unit_test(test_issue_19_variant_padding_masked),
	    cmocka_unit_test(test_tag_collision_is_miss),
	    cmocka_unit_test(test_long_keys_and_arena),
	    cmocka_unit_test(test_hostile_max_probe),
	    cmocka_unit_test(test_issue_19_prefault_written_part),
	    cmocka_unit_test(test_issue_19_prefault_hostile_mark),
	    cmocka_unit_test(test_client_cannot_write),
	    cmocka_unit_test(test_concurrent),
	};

	return cmocka_run_group_tests_name("shm", tests, NULL, NULL);
}
