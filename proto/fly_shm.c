/*
 * fly_shm.c -- the published-winners table: layout, single writer, and
 * the bounded lock-free reader (see fly_shm.h for the format essay).
 *
 * Owns: the layout structs (private here), the writer's memfd, its one
 * writable mapping and the arena's free lists (private memory), each
 * reader's read-only mapping.
 * Thread: the writer is used by one thread (the daemon's loop); readers
 * from any thread of any process.
 *
 * Invariants:
 *  - a slot is one atomic 64-bit word (layout 6): 0 while never used,
 *    else the key hash's high 16 bits (the tag), a 20-bit version and
 *    the record's unit + 1 (0: a tombstone).  The version is a
 *    writer-wide publication counter mod 2^20 - 1, plus 1 (never 0, so a
 *    tombstone's word is not 0): a word the writer stores again is equal
 *    to one it stored before only after 2^20 - 1 publications of any
 *    slot.  A reader that loads the same word before and after copying
 *    the record it references has a consistent copy of the record,
 *    unless in between the writer published 2^20 - 1 times (or a
 *    multiple) and ended on the same record for the same key -- then
 *    the record's checksum, checked on every hit, still stands between
 *    a torn copy and the caller.  One load reads a slot whole: there is
 *    no torn slot.
 *  - a record is written only while no slot references it: it is
 *    allocated (from a free list or the arena's unused end), filled, and
 *    only then referenced by a slot publication (a release store); it
 *    returns to a free list only after the slot that referenced it was
 *    republished.  The writer issues a release fence between that slot
 *    change and any later write of the record's bytes, and the reader an
 *    acquire fence between copying the record and re-loading the slot:
 *    a reader that copied bytes of a record being reused sees the slot
 *    change and retries (C11 fence-fence synchronisation).
 *  - the reader copies the constant header fields once, at open, after
 *    checking them; later changes to the shared header cannot move any
 *    index out of bounds.  A record reference and a record's lengths are
 *    bounded by the arena before a byte of them is read.
 *  - record checksum (layout 6): fly__hash_words2 (FNV-1a 64 a word at
 *    a time in two lanes, fly_hash.h) over the record's words with the
 *    checksum bits of word 0 taken as 0, folded to 32 bits (h ^ h >>
 *    32).  Readers verify it on the record whose key matches,
 *    the one whose decision they return.
 *  - header checksum (layout version 2 on): FNV-1a 64 (fly__hash) over
 *    bytes 0..31 then 44..47 (magic, version, sizes, capacity, total size,
 *    max probe), folded to 32 bits as (h ^ h >> 32).
 *  - superseded (layout version 3 on): set once, by the writer, after
 *    every live entry was copied into a larger table and just before the
 *    generation bump that makes readers look again; the table stays valid
 *    but is never written again.
 *  - layout version 4 (issue 19): 16-byte slots and a record arena
 *    replace version 3's 256-byte slots; an older reader refuses it
 *    (FLY_E_VERSION) before it reads a slot.  Version 5: the same
 *    layout, slots placed and tagged by fly__shm_key_hash (a word at a
 *    time) instead of fly_key_hash; a version-4 reader would miss every
 *    key, so each refuses the other's table.  Version 6: 8-byte slots
 *    (one word: tag, version, record reference) where 5 had 16 (a
 *    sequence word and a reference word): the slots of a 1M-key table
 *    take 16 MiB instead of 32, half the pages and lines a lookup's
 *    random access can miss (issue 19: the slot's miss and its page
 *    walk are the table path's cost).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fly_hash.h"
#include "fly_key.h"
#include "fly_shm.h"

#define SHM_MAGIC 0x31304d4853594c46ull /* "FLYSHM01" little-endian */
/* The record arena is addressed in units of 16 bytes. */
#define UNIT	  16u
#define REC_HEAD  2u /* words before the params: word 0, median_us */
/* The longest record: head, 8 params, a 95-byte key and a 39-byte
 * variant, rounded up to a unit: 224 bytes, 14 units. */
#define REC_MAX_WORDS                                                         \
	((REC_HEAD + FLY_PARAMS_MAX + (FLY_KEY_MAX + FLY_VARIANT_MAX - 2 + 7) / 8 \
	  + 1) & ~1u)
#define NCLASS ((int)(REC_MAX_WORDS / 2))
/* Zeroed words a reader's copy keeps past a record: rec_to_decision
 * reads the variant and the params a whole word at a time (issue 19),
 * the variant's last word up to 5 words past the record's end, and the
 * params up to word REC_HEAD + FLY_PARAMS_MAX - 1 of the shortest
 * record (4 words). */
#define REC_SLACK 6

/* TSan does not model fences (gcc -Wtsan); every shared access here is
 * atomic anyway, so TSan sees no plain data race.  Silence the warning
 * so `make tsan` builds with -Werror. */
#if defined(__SANITIZE_THREAD__) && defined(__GNUC__) && __GNUC__ >= 11
#pragma GCC diagnostic ignored "-Wtsan"
#endif

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

struct shm_header {
	uint64_t magic;		     /* SHM_MAGIC */
	uint32_t version;	     /* FLY_SHM_LAYOUT_VERSION */
	uint32_t header_size;	     /* FLY_SHM_HEADER_SIZE */
	uint32_t slot_size;	     /* FLY_SHM_SLOT_SIZE */
	uint32_t capacity;	     /* slots, power of two */
	uint64_t total_size;	     /* header + capacity * (slot + arena) */
	_Atomic uint64_t generation; /* bumps on forget/import/re-tune */
	_Atomic uint32_t count;	     /* live entries */
	uint32_t max_probe;	     /* longest probe the writer ever needs */
	uint32_t checksum;	     /* see the file comment */
	/* 1 once the writer moved to a larger table (layout 3): readers
	 * ask the daemon for the new one on their next miss */
	_Atomic uint32_t superseded;
	/* record units ever handed out from the arena's start (a high-water
	 * mark; 0 from a writer before it): a reader pre-faults that much
	 * of the arena and not its never-written tail (issue 19) */
	_Atomic uint64_t arena_used;
	uint8_t pad[192];
};

struct shm_slot {
	/* 0: never used; else tag << FLY_SHM_TAG_SHIFT | version <<
	 * FLY_SHM_VER_SHIFT | (record unit + 1), a reference of 0 being a
	 * tombstone (see the file comment) */
	_Atomic uint64_t word;
};

_Static_assert(sizeof(struct shm_header) == FLY_SHM_HEADER_SIZE, "header");
_Static_assert(offsetof(struct shm_header, magic) == 0, "magic");
_Static_assert(offsetof(struct shm_header, version) == 8, "version");
_Static_assert(offsetof(struct shm_header, header_size) == 12, "hsize");
_Static_assert(offsetof(struct shm_header, slot_size) == 16, "ssize");
_Static_assert(offsetof(struct shm_header, capacity) == 20, "capacity");
_Static_assert(offsetof(struct shm_header, total_size) == 24, "total");
_Static_assert(offsetof(struct shm_header, generation) == 32, "gen");
_Static_assert(offsetof(struct shm_header, count) == 40, "count");
_Static_assert(offsetof(struct shm_header, max_probe) == 44, "max_probe");
_Static_assert(offsetof(struct shm_header, checksum) == 48, "checksum");
_Static_assert(offsetof(struct shm_header, superseded) == 52, "superseded");
_Static_assert(offsetof(struct shm_header, arena_used) == 56, "arena_used");
_Static_assert(sizeof(struct shm_slot) == FLY_SHM_SLOT_SIZE, "slot");
_Static_assert(FLY_SHM_VER_SHIFT == FLY_SHM_REF_BITS &&
		       FLY_SHM_TAG_SHIFT == FLY_SHM_VER_SHIFT + 20,
	       "slot word fields");
/* every unit of the largest writer's arena (2^24 slots) has a reference */
_Static_assert(((1ull << 24) * (FLY_SHM_ARENA_PER_SLOT / 16) + 1) <=
		       FLY_SHM_REF_MASK,
	       "record references fit");
_Static_assert(64 % FLY_SHM_SLOT_SIZE == 0, "slots share cache lines");
_Static_assert(FLY_SHM_ARENA_PER_SLOT % UNIT == 0, "arena units");
_Static_assert(REC_MAX_WORDS == 28, "longest record: 224 bytes");
_Static_assert(FLY_VARIANT_MAX % 8 == 0 && FLY_VARIANT_MAX / 8 < REC_SLACK &&
		       4 + REC_SLACK >= REC_HEAD + FLY_PARAMS_MAX,
	       "a copy's slack covers rec_to_decision's whole-word reads");
_Static_assert(FLY_KEY_MAX - 1 <= 255 && FLY_VARIANT_MAX - 1 <= 255,
	       "lengths fit a byte");
_Static_assert(sizeof(_Atomic uint64_t) == 8, "atomic u64");

/* A record, as words:
 *   word 0: key length (bits 0..7), variant length (8..15), nparams
 *           (16..23), status (24..31), checksum (32..63)
 *   word 1: median_us (an IEEE double's bits)
 *   words 2..2+nparams-1: params
 *   then the key's bytes and the variant's (no NUL), zero-padded to a
 *   multiple of 16 bytes. */
union rec {
	uint64_t w[REC_MAX_WORDS + REC_SLACK];
	uint8_t b[(REC_MAX_WORDS + REC_SLACK) * 8];
};

struct rec_fields {
	unsigned keylen;
	unsigned varlen;
	unsigned nparams;
	unsigned status;
	uint32_t checksum;
};

struct freelist {
	uint32_t *v; /* record units free for reuse */
	uint32_t n;
	uint32_t cap;
};

struct fly_shm_writer {
	int fd;
	uint8_t *base; /* the one writable mapping */
	size_t size;
	uint32_t capacity;
	uint32_t probe;	 /* min(FLY_SHM_MAX_PROBE, capacity) */
	uint64_t pubs;	 /* slot publications (versions) */
	int future_write_sealed;
	/* Slots ever written (private memory, a byte each): clear() visits
	 * only these, since reading a never-written memfd page allocates it
	 * (measured: a full clear at start made the whole table resident,
	 * +32 MiB RSS at 131072 slots). */
	uint8_t *written;
	uint32_t arena_units; /* the arena's size in units */
	uint32_t bump;	      /* units ever handed out (since clear) */
	struct freelist fl[NCLASS]; /* by record size in units, minus 1 */
};

struct fly_shm_reader {
	const uint8_t *base;
	size_t size;
	uint32_t capacity;
	uint32_t probe; /* min(header max_probe, FLY_SHM_MAX_PROBE, cap) */
	uint64_t arena_units;
	/* set by the client while the daemon that handed the table out may
	 * be gone (its connection hung up): fly__shm_reader_orphan_set */
	_Atomic uint32_t orphaned;
};

uint32_t fly__shm_header_sum(const void *hdr)
{
	const uint8_t *b = hdr;

	return fly__hash_fold32(fly__hash_more(fly__hash(b, 32), b + 44, 4));
}

static struct shm_slot *slot_at(const uint8_t *base, uint32_t i)
{
	return (struct shm_slot *)(uintptr_t)(base + FLY_SHM_HEADER_SIZE +
					      (size_t)i * FLY_SHM_SLOT_SIZE);
}

static _Atomic uint64_t *arena_of(const uint8_t *base, uint32_t capacity)
{
	return (_Atomic uint64_t *)(uintptr_t)(base + FLY_SHM_HEADER_SIZE +
					       (size_t)capacity *
						   FLY_SHM_SLOT_SIZE);
}

/* A key text that is not a problem's canonical key, hashed (layout 5):
 * FNV-1a 64 stepped a word at a time (h = (h ^ w) * prime) over the
 * length, then the bytes as native (little-endian) 8-byte words, the
 * last one zero-padded. */
static uint64_t text_hash(const char *key, size_t len)
{
	uint64_t h = (FLY_HASH_SEED ^ (uint64_t)len) * FLY_HASH_PRIME;
	uint64_t w;
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		memcpy(&w, key + i, 8);
		h = (h ^ w) * FLY_HASH_PRIME;
	}
	if (i < len) {
		w = 0;
		for (size_t k = 0; i + k < len; k++)
			w |= (uint64_t)(uint8_t)key[i + k] << (8 * k);
		h = (h ^ w) * FLY_HASH_PRIME;
	}
	return h;
}

/* Layout 5 hashes a key's problem, not its text: a client has the
 * problem before it has the text, so it can start the slot's cache miss
 * (fly__shm_prefetch) and format the key while the line is on its way.
 * FNV-1a 64 a word at a time over the op, dtype, layout and flags in
 * one word, then the dims: 9 dependent multiplies, where the byte-wise
 * fly_key_hash of layouts 1-4 took one per key byte (~25); layout 6
 * steps the words in two lanes (fly__hash_words2): 6. */
uint64_t fly__shm_problem_hash(const struct fly_problem *p)
{
	uint64_t w[1 + FLY_DIMS_MAX];

	w[0] = (uint64_t)p->op ^ (uint64_t)p->dtype << 16 ^
	       (uint64_t)p->layout << 32 ^ (uint64_t)p->flags << 40;
	memcpy(&w[1], p->dims, sizeof(p->dims));
	return fly__hash_words2(w, 1 + FLY_DIMS_MAX);
}

uint64_t fly__shm_key_hash(const char *key, size_t len)
{
	struct fly_problem p;

	/* only a canonical key parses, so a problem has one key text and
	 * the client's hash of the problem is the writer's of the text */
	if (fly_key_parse(key, len, &p) == 0)
		return fly__shm_problem_hash(&p);
	return text_hash(key, len);
}

/* A key's home slot: the finalizer over the key's hash (fly_hash.h says
 * why a raw FNV-1a hash must not index a table). */
uint64_t fly__shm_home(uint64_t hash)
{
	return fly__hash_mix(hash);
}

/* The tag bits of a key's hash or of a slot word, in place: the high 16
 * bits (a slot word's tag is its key hash's). */
static uint64_t tag_of(uint64_t hash_or_word)
{
	return hash_or_word >> FLY_SHM_TAG_SHIFT << FLY_SHM_TAG_SHIFT;
}

/* The record unit + 1 a slot word references (0: none). */
static uint32_t word_ref(uint64_t word)
{
	return (uint32_t)(word & FLY_SHM_REF_MASK);
}

static struct shm_header *hdr_of(const uint8_t *base)
{
	return (struct shm_header *)(uintptr_t)base;
}

/* -------------------------------------------------------------- records */

static struct rec_fields rec_decode(uint64_t w0)
{
	struct rec_fields f = {
	    .keylen = (unsigned)(w0 & 0xff),
	    .varlen = (unsigned)(w0 >> 8 & 0xff),
	    .nparams = (unsigned)(w0 >> 16 & 0xff),
	    .status = (unsigned)(w0 >> 24 & 0xff),
	    .checksum = (uint32_t)(w0 >> 32),
	};
	return f;
}

/* Words of a record with these lengths (a whole number of units). */
static uint32_t rec_words(unsigned keylen, unsigned varlen, unsigned np)
{
	return (REC_HEAD + np + (keylen + varlen + 7) / 8 + 1) & ~1u;
}

/* Whether the lengths of @p f are in range (key non-empty). */
static int rec_fields_ok(const struct rec_fields *f)
{
	return f->keylen >= 1 && f->keylen <= FLY_KEY_MAX - 1 &&
	       f->varlen <= FLY_VARIANT_MAX - 1 && f->nparams <= FLY_PARAMS_MAX;
}

/* The record checksum (layout 6): fly__hash_words2 over the record's
 * words, word 0's checksum bits taken as 0, folded to 32 bits.  One lane
 * (layout 5) was a chain of as many dependent multiplies as the record
 * has words, a sixth of a warm table hit (issue 19); two lanes halve
 * it.  @p nwords >= 1. */
static uint32_t rec_sum(const uint64_t *w, uint32_t nwords)
{
	return fly__hash_fold32(
	    fly__hash_words2_from(w[0] & 0xffffffffull, w + 1, nwords - 1));
}

uint32_t fly__shm_record_sum(const uint64_t *w, uint32_t nwords)
{
	return nwords == 0 ? 0 : rec_sum(w, nwords);
}

/* Build the record of (key, d) in @p r.  @return its words. */
static uint32_t rec_build(union rec *r, const char *key, size_t len,
			  const struct fly_decision *d)
{
	size_t vl = strlen(d->variant);
	uint32_t n = rec_words((unsigned)len, (unsigned)vl, d->nparams);
	uint8_t *tail;

	memset(r, 0, n * 8);
	r->w[0] = (uint64_t)len | (uint64_t)vl << 8 |
		  (uint64_t)d->nparams << 16 | (uint64_t)(d->status & 0xff)
						   << 24;
	memcpy(&r->w[1], &d->median_us, 8);
	memcpy(&r->w[REC_HEAD], d->params, d->nparams * 8u);
	tail = r->b + (REC_HEAD + d->nparams) * 8;
	memcpy(tail, key, len);
	memcpy(tail + len, d->variant, vl);
	r->w[0] |= (uint64_t)rec_sum(r->w, n) << 32;
	return n;
}

/* Copy the record at @p unit of an arena of @p units units, every index
 * bounded by the arena (the bytes may be hostile or being rewritten).
 * @return its words, or 0 when the reference or the lengths are out of
 * range (only word 0 copied). */
static uint32_t rec_copy(const _Atomic uint64_t *arena, uint64_t units,
			 uint64_t unit, union rec *r)
{
	const _Atomic uint64_t *p;
	struct rec_fields f;
	uint32_t n;

	if (unit >= units)
		return 0;
	p = arena + unit * 2;
	/* a record of more than one unit usually spans two cache lines:
	 * ask for the second while the first is on its way (a prefetch
	 * past the arena's end cannot fault) */
	__builtin_prefetch((const void *)(p + 8));
	r->w[0] = atomic_load_explicit(&p[0], memory_order_relaxed);
	f = rec_decode(r->w[0]);
	if (!rec_fields_ok(&f))
		return 0;
	n = rec_words(f.keylen, f.varlen, f.nparams);
	if (unit + n / 2 > units)
		return 0;
	for (uint32_t k = 1; k < n; k++)
		r->w[k] = atomic_load_explicit(&p[k], memory_order_relaxed);
	for (uint32_t k = n; k < n + REC_SLACK; k++)
		r->w[k] = 0;
	return n;
}

/* The key bytes of a copied record. */
static const char *rec_key(const union rec *r)
{
	return (const char *)r->b + (REC_HEAD + rec_decode(r->w[0]).nparams) * 8;
}

/* The decision of a record copied by rec_copy (its slack zeroed), field
 * by field and a word at a time: no memset or variable-length memcpy,
 * which compile to `rep stos`/`rep movs` here and whose start-up cost
 * was a third of a warm table hit (issue 19, bench/shm_lookup at 10,000
 * keys).  The variant's bytes past its length are masked off, so it is
 * NUL-terminated whatever the record's padding holds. */
static void rec_to_decision(const union rec *r, struct fly_decision *d)
{
	struct rec_fields f = rec_decode(r->w[0]);
	const uint8_t *v = (const uint8_t *)rec_key(r) + f.keylen;

	d->status = f.status;
	d->provisional = 0;
	for (unsigned k = 0; k < FLY_VARIANT_MAX / 8; k++) {
		int rem = (int)f.varlen - 8 * (int)k;
		uint64_t x;

		memcpy(&x, v + 8 * k, 8);
		if (rem <= 0)
			x = 0;
		else if (rem < 8)
			x &= (1ull << (8 * rem)) - 1;
		memcpy(d->variant + 8 * k, &x, 8);
	}
	d->nparams = f.nparams;
	d->exact = 0;
	for (unsigned k = 0; k < FLY_PARAMS_MAX; k++)
		d->params[k] =
		    k < f.nparams ? (int64_t)r->w[REC_HEAD + k] : 0;
	memcpy(&d->median_us, &r->w[1], 8);
	d->generation = 0;
}

/* Whether the copied key at @p a differs from @p key (both @p len bytes),
 * a word at a time (a short compare's libc call was 6% of a warm table
 * hit). */
static int key_differs(const uint8_t *a, const char *key, size_t len)
{
	uint64_t x, y, diff = 0;
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		memcpy(&x, a + i, 8);
		memcpy(&y, key + i, 8);
		diff |= x ^ y;
	}
	for (; i < len; i++)
		diff |= (uint64_t)(a[i] ^ (uint8_t)key[i]);
	return diff != 0;
}

/* ---------------------------------------------------------------- writer */

static uint32_t round_pow2(uint32_t v)
{
	uint32_t r = 64;

	while (r < v && r < (1u << 31))
		r <<= 1;
	return r;
}

static int seal(struct fly_shm_writer *w)
{
	int base = F_SEAL_SHRINK | F_SEAL_GROW;

	if (fcntl(w->fd, F_ADD_SEALS, base | F_SEAL_FUTURE_WRITE) == 0) {
		w->future_write_sealed = 1;
		return 0;
	}
	if (errno != EINVAL)
		return -errno;
	/* Kernels before 5.1: the size seals alone; reported through
	 * fly__shm_writer_sealed_future_write(). */
	if (fcntl(w->fd, F_ADD_SEALS, base) < 0)
		return -errno;
	return 0;
}

/* Write the header of a fresh table. */
static void header_init(struct fly_shm_writer *w)
{
	struct shm_header *h = hdr_of(w->base);
	struct timespec ts;

	h->magic = SHM_MAGIC;
	h->version = FLY_SHM_LAYOUT_VERSION;
	h->header_size = FLY_SHM_HEADER_SIZE;
	h->slot_size = FLY_SHM_SLOT_SIZE;
	h->capacity = w->capacity;
	h->total_size = w->size;
	h->max_probe = w->probe;
	h->checksum = fly__shm_header_sum(h);
	/* A restart must look like a new generation to every client.  The
	 * start value is microseconds since the epoch: below 2^53 (about
	 * 1.8e15 today), so the generation survives a trip through JSON
	 * numbers (doubles) exactly, and a daemon restarted within the same
	 * microsecond is not a case that exists. */
	clock_gettime(CLOCK_REALTIME, &ts);
	atomic_store_explicit(&h->generation,
			      (uint64_t)ts.tv_sec * 1000000ull +
				  (uint64_t)ts.tv_nsec / 1000u,
			      memory_order_release);
}

static void writer_free_mem(struct fly_shm_writer *w)
{
	for (int c = 0; c < NCLASS; c++)
		free(w->fl[c].v);
	free(w->written);
	free(w);
}

int fly__shm_writer_open(uint32_t capacity, struct fly_shm_writer **out)
{
	struct fly_shm_writer *w;
	int rc;

	*out = NULL;
	if (capacity > (1u << 24))
		return -EINVAL;
	w = calloc(1, sizeof(*w));
	if (w == NULL)
		return -ENOMEM;
	w->capacity = round_pow2(capacity);
	w->written = calloc(w->capacity, 1);
	if (w->written == NULL) {
		free(w);
		return -ENOMEM;
	}
	w->probe =
	    w->capacity < FLY_SHM_MAX_PROBE ? w->capacity : FLY_SHM_MAX_PROBE;
	w->arena_units = w->capacity * (FLY_SHM_ARENA_PER_SLOT / UNIT);
	w->size = FLY_SHM_HEADER_SIZE +
		  (size_t)w->capacity *
		      (FLY_SHM_SLOT_SIZE + FLY_SHM_ARENA_PER_SLOT);
	w->fd = memfd_create("flytuned-table", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (w->fd < 0) {
		rc = -errno;
		goto err_free;
	}
	if (ftruncate(w->fd, (off_t)w->size) < 0) {
		rc = -errno;
		goto err_close;
	}
	w->base =
	    mmap(NULL, w->size, PROT_READ | PROT_WRITE, MAP_SHARED, w->fd, 0);
	if (w->base == MAP_FAILED) {
		rc = -errno;
		goto err_close;
	}
	/* huge pages where the host allows them for shmem
	 * (transparent_hugepage/shmem_enabled "advise"; "never" is the
	 * usual default and makes this a no-op): a table read at random
	 * then walks no 4 KiB page tables (issue 19, 1M keys: the p99 of a
	 * table hit 591-611 ns against 631-721 ns; the p50 unchanged) */
	(void)madvise(w->base, w->size, MADV_HUGEPAGE);
	header_init(w);
	rc = seal(w);
	if (rc < 0)
		goto err_unmap;
	*out = w;
	return 0;

err_unmap:
	munmap(w->base, w->size);
err_close:
	close(w->fd);
err_free:
	writer_free_mem(w);
	return rc;
}

void fly__shm_writer_close(struct fly_shm_writer *w)
{
	if (w == NULL)
		return;
	munmap(w->base, w->size);
	close(w->fd);
	writer_free_mem(w);
}

int fly__shm_writer_fd(const struct fly_shm_writer *w)
{
	return w->fd;
}

size_t fly__shm_writer_size(const struct fly_shm_writer *w)
{
	return w->size;
}

uint32_t fly__shm_writer_capacity(const struct fly_shm_writer *w)
{
	return w->capacity;
}

uint32_t fly__shm_writer_count(const struct fly_shm_writer *w)
{
	return atomic_load_explicit(&hdr_of(w->base)->count,
				    memory_order_relaxed);
}

int fly__shm_writer_sealed_future_write(const struct fly_shm_writer *w)
{
	return w->future_write_sealed;
}

void *fly__shm_writer_mem(struct fly_shm_writer *w)
{
	return w->base;
}

/* A free record of @p units units.  @return its unit, or -ENOSPC. */
static int64_t arena_alloc(struct fly_shm_writer *w, uint32_t units)
{
	struct freelist *f = &w->fl[units - 1];

	if (f->n > 0)
		return f->v[--f->n];
	if (w->bump + units > w->arena_units)
		return -ENOSPC;
	w->bump += units;
	if (w->bump > atomic_load_explicit(&hdr_of(w->base)->arena_used,
					   memory_order_relaxed))
		atomic_store_explicit(&hdr_of(w->base)->arena_used, w->bump,
				      memory_order_relaxed);
	return w->bump - units;
}

/* Give a record back (its slot no longer references it).  A failed
 * allocation of the list only loses the space until the next clear. */
static void arena_free(struct fly_shm_writer *w, uint32_t unit)
{
	union rec r;
	uint32_t n = rec_copy(arena_of(w->base, w->capacity), w->arena_units,
			      unit, &r);
	struct freelist *f;

	if (n == 0)
		return;
	f = &w->fl[n / 2 - 1];
	if (f->n == f->cap) {
		uint32_t ncap = f->cap ? f->cap * 2 : 64;
		uint32_t *v = realloc(f->v, ncap * sizeof(*v));

		if (v == NULL)
			return;
		f->v = v;
		f->cap = ncap;
	}
	f->v[f->n++] = unit;
}

/* Publish into slot i: the record @p ref (unit + 1; 0 a tombstone)
 * under @p tag with the next version, or 0 (never used) -- one release
 * store, which orders the record's bytes before the reference. */
static void slot_publish(struct fly_shm_writer *w, uint32_t i, uint64_t tag,
			 uint32_t ref, int never_used)
{
	struct shm_slot *s = slot_at(w->base, i);
	uint64_t ver = w->pubs++ % FLY_SHM_VER_MAX + 1;

	w->written[i] = 1;
	atomic_store_explicit(&s->word,
			      never_used ? 0
					 : tag | ver << FLY_SHM_VER_SHIFT | ref,
			      memory_order_release);
}

/* Whether slot @p ref's record holds @p key (the writer's own bytes). */
static int writer_rec_is(const struct fly_shm_writer *w, uint32_t ref,
			 const char *key, size_t len)
{
	union rec r;
	uint32_t unit = ref - 1;

	if (rec_copy(arena_of(w->base, w->capacity), w->arena_units, unit,
		     &r) == 0)
		return 0;
	return rec_decode(r.w[0]).keylen == len && !memcmp(rec_key(&r), key, len);
}

/* Find the slot holding @p key, or where it would go.
 * @return slot index with *found and *ref (its record unit + 1) set, or
 * -ENOSPC. */
static int64_t writer_find(const struct fly_shm_writer *w, const char *key,
			   size_t len, uint64_t hash, int *found,
			   uint32_t *ref)
{
	uint32_t mask = w->capacity - 1;
	uint64_t h0 = fly__shm_home(hash);
	int64_t free_slot = -1;

	*found = 0;
	*ref = 0;
	for (uint32_t p = 0; p < w->probe; p++) {
		uint32_t i = (uint32_t)(h0 + p) & mask;
		uint64_t word = atomic_load_explicit(&slot_at(w->base, i)->word,
						     memory_order_relaxed);
		uint32_t rf = word_ref(word);

		if (word == 0) {
			if (free_slot < 0)
				free_slot = i;
			break;
		}
		if (rf == 0) {
			if (free_slot < 0)
				free_slot = i;
			continue;
		}
		if (tag_of(word) == tag_of(hash) &&
		    writer_rec_is(w, rf, key, len)) {
			*found = 1;
			*ref = rf;
			return i;
		}
	}
	return free_slot >= 0 ? free_slot : -ENOSPC;
}

/* fly__shm_put of a key whose table hash is @p hash (arguments
 * checked). */
static int put_hashed(struct fly_shm_writer *w, const char *key, size_t len,
		      uint64_t hash, const struct fly_decision *d)
{
	_Atomic uint64_t *p;
	union rec r;
	uint32_t old;
	int64_t i, unit;
	uint32_t n;
	int found;

	i = writer_find(w, key, len, hash, &found, &old);
	if (i < 0)
		return (int)i;
	n = rec_build(&r, key, len, d);
	unit = arena_alloc(w, n / 2);
	if (unit < 0)
		return (int)unit;
	/* orders every earlier slot change (the one that freed this
	 * record) before the record's new bytes: see the file comment */
	atomic_thread_fence(memory_order_release);
	p = arena_of(w->base, w->capacity) + unit * 2;
	for (uint32_t k = 0; k < n; k++)
		atomic_store_explicit(&p[k], r.w[k], memory_order_relaxed);
	slot_publish(w, (uint32_t)i, tag_of(hash), (uint32_t)unit + 1, 0);
	if (found)
		arena_free(w, old - 1);
	else
		atomic_fetch_add_explicit(&hdr_of(w->base)->count, 1,
					  memory_order_relaxed);
	return 0;
}

int fly__shm_put(struct fly_shm_writer *w, const char *key, size_t len,
		 const struct fly_decision *d)
{
	if (len == 0 || len > FLY_KEY_MAX - 1 || key == NULL)
		return FLY_E_KEYLEN;
	if (d == NULL || d->nparams > FLY_PARAMS_MAX ||
	    memchr(d->variant, '\0', FLY_VARIANT_MAX) == NULL)
		return -EINVAL;
	return put_hashed(w, key, len, fly__shm_key_hash(key, len), d);
}

int fly__shm_del(struct fly_shm_writer *w, const char *key, size_t len)
{
	uint32_t old;
	int64_t i;
	int found;

	if (key == NULL || len == 0 || len > FLY_KEY_MAX - 1)
		return FLY_E_NOTFOUND;
	i = writer_find(w, key, len, fly__shm_key_hash(key, len), &found,
			&old);
	if (i < 0 || !found)
		return FLY_E_NOTFOUND;
	slot_publish(w, (uint32_t)i, 0, 0, 0);
	arena_free(w, old - 1);
	atomic_fetch_sub_explicit(&hdr_of(w->base)->count, 1,
				  memory_order_relaxed);
	return 0;
}

void fly__shm_clear(struct fly_shm_writer *w)
{
	for (uint32_t i = 0; i < w->capacity; i++) {
		if (w->written[i] &&
		    atomic_load_explicit(&slot_at(w->base, i)->word,
					 memory_order_relaxed) != 0)
			slot_publish(w, i, 0, 0, 1);
	}
	/* every record is unreferenced now: the arena starts over (put's
	 * release fence orders these slot changes before any reuse) */
	w->bump = 0;
	for (int c = 0; c < NCLASS; c++)
		w->fl[c].n = 0;
	atomic_store_explicit(&hdr_of(w->base)->count, 0, memory_order_relaxed);
}

/* Copy one record of @p src (at @p unit, @p r) into @p dst when it is
 * the live record of its key.  @return 1 copied, 0 a record left behind
 * (its key replaced or deleted), or fly__shm_put's error. */
static int copy_if_live(struct fly_shm_writer *dst,
			const struct fly_shm_writer *src, uint32_t unit,
			const union rec *r)
{
	const char *key = rec_key(r);
	size_t len = rec_decode(r->w[0]).keylen;
	uint64_t hash = fly__shm_key_hash(key, len);
	uint32_t ref;
	struct fly_decision d;
	int found, rc;

	if (writer_find(src, key, len, hash, &found, &ref) < 0 || !found ||
	    ref != unit + 1)
		return 0;
	rec_to_decision(r, &d);
	rc = put_hashed(dst, key, len, hash, &d);
	return rc < 0 ? rc : 1;
}

/* The records below the arena's bump lie end to end (a freed record is
 * reused only by one of its own size): copy the live ones in that order,
 * the order they were published in.  @return entries copied, -EINVAL
 * when a record there does not decode (then the caller copies by slot),
 * or fly__shm_put's error. */
static int copy_in_arena_order(struct fly_shm_writer *dst,
			       const struct fly_shm_writer *src)
{
	const _Atomic uint64_t *arena = arena_of(src->base, src->capacity);
	int n = 0;

	for (uint32_t u = 0; u < src->bump;) {
		union rec r;
		uint32_t nw = rec_copy(arena, src->arena_units, u, &r);
		int rc;

		if (nw == 0)
			return -EINVAL;
		rc = copy_if_live(dst, src, u, &r);
		if (rc < 0)
			return rc;
		n += rc;
		u += nw / 2;
	}
	return n;
}

/* Growing keeps the arena's order (issue 19): a copy in slot order put
 * the records in hash order, and a pass over keys in the order they were
 * imported paid a record miss on every lookup of the larger table.  A
 * copy that did not find every live entry (an arena that does not
 * decode: never, short of a bug) is completed in slot order; a put of a
 * key already copied replaces it with the same decision. */
int fly__shm_writer_copy(struct fly_shm_writer *dst,
			 const struct fly_shm_writer *src)
{
	const _Atomic uint64_t *arena = arena_of(src->base, src->capacity);
	int n = copy_in_arena_order(dst, src);

	if (n == -ENOSPC ||
	    (n >= 0 && (uint32_t)n == fly__shm_writer_count(src)))
		return n;
	n = 0;

	for (uint32_t i = 0; i < src->capacity; i++) {
		struct fly_decision d;
		uint32_t ref;
		union rec r;
		int rc;

		if (!src->written[i])
			continue;
		ref = word_ref(atomic_load_explicit(&slot_at(src->base, i)->word,
						    memory_order_relaxed));
		if (ref == 0 ||
		    rec_copy(arena, src->arena_units, ref - 1, &r) == 0)
			continue;
		rec_to_decision(&r, &d);
		rc = fly__shm_put(dst, rec_key(&r), rec_decode(r.w[0]).keylen,
				  &d);
		if (rc < 0)
			return rc;
		n++;
	}
	return n;
}

void fly__shm_writer_supersede(struct fly_shm_writer *w)
{
	atomic_store_explicit(&hdr_of(w->base)->superseded, 1,
			      memory_order_release);
	(void)fly__shm_bump(w);
}

int fly__shm_reader_superseded(const struct fly_shm_reader *r)
{
	return atomic_load_explicit(&hdr_of(r->base)->superseded,
				    memory_order_acquire) != 0;
}

void fly__shm_reader_orphan_set(struct fly_shm_reader *r, int orphaned)
{
	atomic_store_explicit(&r->orphaned, orphaned != 0,
			      memory_order_release);
}

int fly__shm_reader_is_orphaned(const struct fly_shm_reader *r)
{
	return atomic_load_explicit(&r->orphaned, memory_order_acquire) != 0;
}

uint64_t fly__shm_bump(struct fly_shm_writer *w)
{
	struct shm_header *h = hdr_of(w->base);
	uint64_t g = atomic_load_explicit(&h->generation, memory_order_relaxed);

	atomic_store_explicit(&h->generation, g + 1, memory_order_release);
	return g + 1;
}

/* ---------------------------------------------------------------- reader */

static int check_seals(int fd)
{
	int s = fcntl(fd, F_GET_SEALS);
	int need = F_SEAL_SHRINK | F_SEAL_GROW;

	if (s < 0)
		return FLY_E_SHM;
	if ((s & need) != need || !(s & (F_SEAL_FUTURE_WRITE | F_SEAL_WRITE)))
		return FLY_E_SHM;
	return 0;
}

/* Check the mapped header; on success fill the reader's bounds. */
static int check_header(const uint8_t *base, size_t size,
			struct fly_shm_reader *r)
{
	struct shm_header h;
	uint64_t want;

	memcpy(&h, base, offsetof(struct shm_header, generation));
	memcpy(&h.max_probe, base + offsetof(struct shm_header, max_probe), 8);
	if (h.magic != SHM_MAGIC)
		return FLY_E_SHM;
	if (h.version != FLY_SHM_LAYOUT_VERSION)
		return FLY_E_VERSION;
	if (h.header_size != FLY_SHM_HEADER_SIZE ||
	    h.slot_size != FLY_SHM_SLOT_SIZE || h.capacity == 0 ||
	    (h.capacity & (h.capacity - 1)) != 0 || h.total_size != size)
		return FLY_E_SHM;
	want = (uint64_t)h.header_size +
	       (uint64_t)h.capacity * (h.slot_size + FLY_SHM_ARENA_PER_SLOT);
	if (want != h.total_size)
		return FLY_E_SHM;
	if (h.checksum != fly__shm_header_sum(base))
		return FLY_E_SHM;
	r->capacity = h.capacity;
	r->arena_units = (uint64_t)h.capacity * (FLY_SHM_ARENA_PER_SLOT / UNIT);
	r->probe =
	    h.max_probe < FLY_SHM_MAX_PROBE ? h.max_probe : FLY_SHM_MAX_PROBE;
	if (r->probe > h.capacity)
		r->probe = h.capacity;
	return 0;
}

int fly__shm_reader_open(int fd, struct fly_shm_reader **out)
{
	struct fly_shm_reader *r = NULL;
	struct stat st;
	void *base;
	int rc;

	*out = NULL;
	if (fd < 0)
		return -EBADF;
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		goto err_close;
	}
	rc = FLY_E_SHM;
	if (!S_ISREG(st.st_mode) || st.st_size < FLY_SHM_HEADER_SIZE ||
	    (uint64_t)st.st_size > (1ull << 40))
		goto err_close;
	rc = check_seals(fd);
	if (rc < 0)
		goto err_close;
	r = calloc(1, sizeof(*r));
	if (r == NULL) {
		rc = -ENOMEM;
		goto err_close;
	}
	r->size = (size_t)st.st_size;
	base = mmap(NULL, r->size, PROT_READ, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		rc = -errno;
		goto err_free;
	}
	r->base = base;
	rc = check_header(r->base, r->size, r);
	if (rc < 0)
		goto err_unmap;
	close(fd); /* the mapping keeps the memfd alive */
	*out = r;
	return 0;

err_unmap:
	munmap((void *)(uintptr_t)r->base, r->size);
err_free:
	free(r);
err_close:
	close(fd);
	return rc;
}

/* Read one byte of each page of [off, off + len) of @p r's mapping.
 * @return the bytes touched. */
static size_t prefault_range(const struct fly_shm_reader *r, size_t off,
			     size_t len, size_t page)
{
	volatile const uint8_t *b = r->base;
	uint8_t sink = 0;
	size_t end;

	off &= ~(page - 1);
	end = off + len < r->size ? off + len : r->size;
	if (off >= end)
		return 0;
	/* loads, not MADV_POPULATE_READ: on the 2-core VM the populated
	 * pages' first loads still cost 10-20 us each afterwards (the shm
	 * row's p99 stayed at 8 us; with the loads alone, 0.6 us) */
	for (size_t o = off; o < end; o += page)
		sink ^= b[o];
	(void)sink;
	return end - off;
}

size_t fly__shm_reader_prefault(const struct fly_shm_reader *r)
{
	long pg = sysconf(_SC_PAGESIZE);
	size_t page = pg > 0 && (pg & (pg - 1)) == 0 ? (size_t)pg : 4096;
	size_t slots_end = FLY_SHM_HEADER_SIZE +
			   (size_t)r->capacity * FLY_SHM_SLOT_SIZE;
	uint64_t used = atomic_load_explicit(&hdr_of(r->base)->arena_used,
					     memory_order_relaxed);

	/* the header's value is untrusted: bounded by the arena */
	if (used > r->arena_units)
		used = r->arena_units;
	return prefault_range(r, 0, slots_end, page) +
	       prefault_range(r, slots_end, (size_t)used * UNIT, page);
}

void fly__shm_reader_close(struct fly_shm_reader *r)
{
	if (r == NULL)
		return;
	munmap((void *)(uintptr_t)r->base, r->size);
	free(r);
}

uint64_t fly__shm_reader_generation(const struct fly_shm_reader *r)
{
	return atomic_load_explicit(&hdr_of(r->base)->generation,
				    memory_order_acquire);
}

/* What one probe step found. */
enum probe_res {
	PROBE_END,   /* a never-used slot: the key is not in the table */
	PROBE_NEXT,  /* another key (or a tombstone): go on probing */
	PROBE_COPY,  /* the record the tag points to, copied consistently */
	PROBE_TORN,  /* still inconsistent after the retries */
	PROBE_BAD    /* a reference or record out of range: corrupt */
};

/* Read slot @p i and, when its tag is @p tag, copy its record into @p rec
 * between two loads of the slot's word (see the file comment).
 * @param[out] nw the record's words. */
static enum probe_res probe_slot(const struct fly_shm_reader *r, uint32_t i,
				 uint64_t tag, union rec *rec, uint32_t *nw)
{
	const struct shm_slot *s = slot_at(r->base, i);
	const _Atomic uint64_t *arena = arena_of(r->base, r->capacity);

	for (int t = 0; t < FLY_SHM_RETRIES; t++) {
		uint64_t w1 =
		    atomic_load_explicit(&s->word, memory_order_acquire);
		uint32_t ref = word_ref(w1);

		if (w1 == 0)
			return PROBE_END;
		/* another key, or a tombstone: passed over on one load */
		if (ref == 0 || tag_of(w1) != tag)
			return PROBE_NEXT;
		*nw = rec_copy(arena, r->arena_units, ref - 1, rec);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&s->word, memory_order_relaxed) != w1)
			continue;
		return *nw == 0 ? PROBE_BAD : PROBE_COPY;
	}
	return PROBE_TORN;
}

void fly__shm_prefetch(const struct fly_shm_reader *r, uint64_t hash)
{
	if (r != NULL)
		__builtin_prefetch(slot_at(r->base, (uint32_t)fly__shm_home(hash) &
						       (r->capacity - 1)));
}

int fly__shm_problem_key(const struct fly_shm_reader *r,
			 const struct fly_problem *p, char *key,
			 uint64_t *hash)
{
	struct fly_bucket_policy pol;
	struct fly_problem q = *p;
	int rc;

	/* the home slot is asked for before @p p is validated (issue 19:
	 * the slot's miss is the table path's cost, so it starts as early
	 * as it can): bucketing and hashing read any problem safely, and
	 * an invalid one's prefetch is only wasted */
	fly_bucket_policy_default(q.op, &pol);
	fly_problem_bucket(&q, &pol);
	*hash = fly__shm_problem_hash(&q);
	fly__shm_prefetch(r, *hash);
	rc = fly_problem_validate(p);
	if (rc < 0)
		return rc;
	/* q validates: p did, and bucketing keeps a problem valid (it
	 * leaves an exact one alone and never overflows the dims' product;
	 * test_key test_bucket_keeps_valid) */
	return fly__key_format_valid(&q, key, FLY_KEY_MAX);
}

int fly_shm_lookup(const struct fly_shm_reader *r, const char *key, size_t len,
		   struct fly_decision *out)
{
	if (r == NULL || key == NULL || len == 0 || len > FLY_KEY_MAX - 1)
		return FLY_E_NOTFOUND;
	return fly__shm_lookup_hashed(r, fly__shm_key_hash(key, len), key, len,
				      out);
}

int fly__shm_lookup_hashed(const struct fly_shm_reader *r, uint64_t hash,
			   const char *key, size_t len,
			   struct fly_decision *out)
{
	union rec rec;
	uint64_t h0, tag, gen;
	uint32_t mask, nw = 0;

	if (r == NULL || key == NULL || len == 0 || len > FLY_KEY_MAX - 1)
		return FLY_E_NOTFOUND;
	gen = fly__shm_reader_generation(r);
	h0 = fly__shm_home(hash);
	tag = tag_of(hash);
	mask = r->capacity - 1;
	for (uint32_t p = 0; p < r->probe; p++) {
		uint32_t i = (uint32_t)(h0 + p) & mask;
		struct rec_fields f;

		switch (probe_slot(r, i, tag, &rec, &nw)) {
		case PROBE_END:
			return FLY_E_NOTFOUND;
		case PROBE_NEXT:
			continue;
		case PROBE_TORN:
		case PROBE_BAD:
			return FLY_E_SHM;
		case PROBE_COPY:
			break;
		}
		/* a tag shared by another key (1 in 2^16): the full key
		 * decides, so a hit is never another key's decision */
		f = rec_decode(rec.w[0]);
		if (f.keylen != len ||
		    key_differs((const uint8_t *)rec_key(&rec), key, len))
			continue;
		if (f.checksum != rec_sum(rec.w, nw))
			return FLY_E_SHM;
		rec_to_decision(&rec, out);
		out->generation = gen;
		return 0;
	}
	return FLY_E_NOTFOUND;
}
