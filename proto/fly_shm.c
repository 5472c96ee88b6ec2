/*
 * fly_shm.c -- the published-winners table: layout, single writer, and
 * the bounded lock-free reader (see fly_shm.h for the format essay).
 *
 * Owns: the layout structs (private here), the writer's memfd and its one
 * writable mapping, each reader's read-only mapping.
 * Thread: the writer is used by one thread (the daemon's loop); readers
 * from any thread of any process.
 *
 * Invariants:
 *  - every slot seq value the writer stores is unique: odd while a slot
 *    is being written, then the next even value of a writer-wide counter,
 *    or 0 when the slot returns to never-used (clear); a reader that sees
 *    the same even seq before and after copying has a consistent copy.
 *  - the reader copies the constant header fields once, at open, after
 *    checking them; later changes to the shared header cannot move any
 *    index out of bounds.
 *  - slot checksum: fly__hash_words() (FNV-1a 64 a word at a time) over
 *    the 31 little-endian 64-bit words at bytes 8..255 of the slot with
 *    the checksum field taken as 0 (hash, key length, status, nparams,
 *    key, variant, params, median_us, padding), h = (h ^ word) *
 *    0x100000001b3 from the FNV offset basis, folded to 32 bits as
 *    (h ^ h >> 32).  Word-wise: the byte-wise FNV-1a it replaced cost
 *    ~330 ns a slot, most of a lookup.  Readers verify it on the slot
 *    whose key matches, the one whose decision they return.
 *  - header checksum (layout version 2): FNV-1a 64 (fly__hash) over bytes
 *    0..31 then 44..47 (magic, version, sizes, capacity, total size, max
 *    probe), folded to 32 bits as (h ^ h >> 32).  Version 1 used the
 *    32-bit FNV-1a there; a version-1 reader refuses a version-2 table
 *    (FLY_E_VERSION) before it looks at the checksum.
 *  - superseded (layout version 3): set once, by the writer, after every
 *    live entry was copied into a larger table and just before the
 *    generation bump that makes readers look again; the table stays
 *    valid (its entries were current at that moment) but is never
 *    written again.  A version-2 reader would not see the flag and
 *    would keep serving a frozen table: it refuses version 3.
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

#define SHM_MAGIC  0x31304d4853594c46ull /* "FLYSHM01" little-endian */
#define SLOT_WORDS (FLY_SHM_SLOT_SIZE / 8)

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
	uint64_t total_size;	     /* header_size + capacity * slot_size */
	_Atomic uint64_t generation; /* bumps on forget/import/re-tune */
	_Atomic uint32_t count;	     /* live entries */
	uint32_t max_probe;	     /* longest probe the writer ever needs */
	uint32_t checksum;	     /* see the file comment */
	/* 1 once the writer moved to a larger table (layout 3): readers
	 * ask the daemon for the new one on their next miss */
	_Atomic uint32_t superseded;
	uint8_t pad[200];
};

struct shm_slot {
	_Atomic uint64_t seq;	       /* odd while written; 0 never used */
	uint64_t hash;		       /* fly_key_hash of the key */
	uint16_t keylen;	       /* 0: tombstone (when seq != 0) */
	uint8_t status;		       /* enum fly_status */
	uint8_t nparams;	       /* <= FLY_PARAMS_MAX */
	uint32_t checksum;	       /* see the file comment */
	char key[FLY_KEY_MAX];	       /* not NUL-terminated: keylen bytes */
	char variant[FLY_VARIANT_MAX]; /* NUL-terminated */
	int64_t params[FLY_PARAMS_MAX];
	double median_us;
	uint8_t pad[24];
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
_Static_assert(sizeof(struct shm_slot) == FLY_SHM_SLOT_SIZE, "slot");
_Static_assert(offsetof(struct shm_slot, seq) == 0, "seq");
_Static_assert(offsetof(struct shm_slot, hash) == 8, "hash");
_Static_assert(offsetof(struct shm_slot, keylen) == 16, "keylen");
_Static_assert(offsetof(struct shm_slot, status) == 18, "status");
_Static_assert(offsetof(struct shm_slot, nparams) == 19, "nparams");
_Static_assert(offsetof(struct shm_slot, checksum) == 20, "slot sum");
_Static_assert(offsetof(struct shm_slot, key) == 24, "key");
_Static_assert(offsetof(struct shm_slot, variant) == 120, "variant");
_Static_assert(offsetof(struct shm_slot, params) == 160, "params");
_Static_assert(offsetof(struct shm_slot, median_us) == 224, "median");
_Static_assert(sizeof(_Atomic uint64_t) == 8, "atomic u64");

/* A private copy of a slot, addressable as words. */
union slot_img {
	struct shm_slot s;
	uint64_t w[SLOT_WORDS];
};

struct fly_shm_writer {
	int fd;
	uint8_t *base; /* the one writable mapping */
	size_t size;
	uint32_t capacity;
	uint32_t probe;	 /* min(FLY_SHM_MAX_PROBE, capacity) */
	uint64_t seqctr; /* last even seq handed out */
	int future_write_sealed;
	/* Slots ever written (private memory, a byte each): clear() visits
	 * only these, since reading a never-written memfd page allocates it
	 * (measured: a full clear at start made the whole table resident,
	 * +32 MiB RSS at 131072 slots). */
	uint8_t *written;
};

struct fly_shm_reader {
	const uint8_t *base;
	size_t size;
	uint32_t capacity;
	uint32_t probe; /* min(header max_probe, FLY_SHM_MAX_PROBE, cap) */
};

uint32_t fly__shm_header_sum(const void *hdr)
{
	const uint8_t *b = hdr;

	return fly__hash_fold32(fly__hash_more(fly__hash(b, 32), b + 44, 4));
}

static uint32_t slot_sum(const union slot_img *img)
{
	union slot_img t = *img;

	t.s.checksum = 0;
	return fly__hash_fold32(fly__hash_words(&t.w[1], SLOT_WORDS - 1));
}

static _Atomic uint64_t *slot_words(const uint8_t *base, uint32_t i)
{
	return (_Atomic uint64_t *)(uintptr_t)(base + FLY_SHM_HEADER_SIZE +
					       (size_t)i * FLY_SHM_SLOT_SIZE);
}

/* A key's home slot: the finalizer over the key's hash (fly_hash.h says
 * why a raw FNV-1a hash must not index a table). */
uint64_t fly__shm_home(uint64_t hash)
{
	return fly__hash_mix(hash);
}

static struct shm_header *hdr_of(const uint8_t *base)
{
	return (struct shm_header *)(uintptr_t)base;
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

int fly__shm_writer_open(uint32_t capacity, struct fly_shm_writer **out)
{
	struct fly_shm_writer *w;
	struct shm_header *h;
	struct timespec ts;
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
	w->size = FLY_SHM_HEADER_SIZE + (size_t)w->capacity * FLY_SHM_SLOT_SIZE;
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
	h = hdr_of(w->base);
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
	free(w->written);
	free(w);
	return rc;
}

void fly__shm_writer_close(struct fly_shm_writer *w)
{
	if (w == NULL)
		return;
	munmap(w->base, w->size);
	close(w->fd);
	free(w->written);
	free(w);
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

/* The writer reads its own slots with relaxed loads (readers race). */
static void slot_peek(const struct fly_shm_writer *w, uint32_t i,
		      union slot_img *img)
{
	_Atomic uint64_t *sw = slot_words(w->base, i);

	for (int k = 0; k < SLOT_WORDS; k++)
		img->w[k] = atomic_load_explicit(&sw[k], memory_order_relaxed);
}

/* Publish @p img into slot i under the seqlock; seq ends at @p final
 * (0: never used) or at the next even counter value. */
static void slot_publish(struct fly_shm_writer *w, uint32_t i,
			 union slot_img *img, int never_used)
{
	_Atomic uint64_t *sw = slot_words(w->base, i);
	uint64_t final;

	w->seqctr += 2;
	w->written[i] = 1;
	final = never_used ? 0 : w->seqctr;
	atomic_store_explicit(&sw[0], w->seqctr - 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	for (int k = 1; k < SLOT_WORDS; k++)
		atomic_store_explicit(&sw[k], img->w[k], memory_order_relaxed);
	atomic_store_explicit(&sw[0], final, memory_order_release);
}

/* Find the slot holding @p key, or where it would go.
 * @return slot index with *found set, or -ENOSPC / FLY_E_NOTFOUND. */
static int64_t writer_find(const struct fly_shm_writer *w, const char *key,
			   size_t len, uint64_t hash, int *found)
{
	uint32_t mask = w->capacity - 1;
	int64_t free_slot = -1;
	union slot_img img;

	*found = 0;
	for (uint32_t p = 0; p < w->probe; p++) {
		uint32_t i = (uint32_t)(fly__shm_home(hash) + p) & mask;

		slot_peek(w, i, &img);
		if (img.w[0] == 0) {
			if (free_slot < 0)
				free_slot = i;
			break;
		}
		if (img.s.keylen == 0) {
			if (free_slot < 0)
				free_slot = i;
			continue;
		}
		if (img.s.hash == hash && img.s.keylen == len &&
		    !memcmp(img.s.key, key, len)) {
			*found = 1;
			return i;
		}
	}
	return free_slot >= 0 ? free_slot : -ENOSPC;
}

int fly__shm_put(struct fly_shm_writer *w, const char *key, size_t len,
		 const struct fly_decision *d)
{
	union slot_img img;
	uint64_t hash;
	int64_t i;
	int found;

	if (len == 0 || len > FLY_KEY_MAX - 1 || key == NULL)
		return FLY_E_KEYLEN;
	if (d == NULL || d->nparams > FLY_PARAMS_MAX ||
	    memchr(d->variant, '\0', FLY_VARIANT_MAX) == NULL)
		return -EINVAL;
	hash = fly_key_hash(key, len);
	i = writer_find(w, key, len, hash, &found);
	if (i < 0)
		return (int)i;
	memset(&img, 0, sizeof(img));
	img.s.hash = hash;
	img.s.keylen = (uint16_t)len;
	img.s.status = (uint8_t)d->status;
	img.s.nparams = (uint8_t)d->nparams;
	memcpy(img.s.key, key, len);
	memcpy(img.s.variant, d->variant, FLY_VARIANT_MAX);
	memcpy(img.s.params, d->params, sizeof(img.s.params));
	img.s.median_us = d->median_us;
	img.s.checksum = slot_sum(&img);
	slot_publish(w, (uint32_t)i, &img, 0);
	if (!found)
		atomic_fetch_add_explicit(&hdr_of(w->base)->count, 1,
					  memory_order_relaxed);
	return 0;
}

int fly__shm_del(struct fly_shm_writer *w, const char *key, size_t len)
{
	union slot_img img;
	int64_t i;
	int found;

	if (key == NULL || len == 0 || len > FLY_KEY_MAX - 1)
		return FLY_E_NOTFOUND;
	i = writer_find(w, key, len, fly_key_hash(key, len), &found);
	if (i < 0 || !found)
		return FLY_E_NOTFOUND;
	memset(&img, 0, sizeof(img));
	img.s.checksum = slot_sum(&img);
	slot_publish(w, (uint32_t)i, &img, 0);
	atomic_fetch_sub_explicit(&hdr_of(w->base)->count, 1,
				  memory_order_relaxed);
	return 0;
}

void fly__shm_clear(struct fly_shm_writer *w)
{
	union slot_img img;

	memset(&img, 0, sizeof(img));
	for (uint32_t i = 0; i < w->capacity; i++) {
		if (w->written[i] &&
		    atomic_load_explicit(slot_words(w->base, i),
					 memory_order_relaxed) != 0)
			slot_publish(w, i, &img, 1);
	}
	atomic_store_explicit(&hdr_of(w->base)->count, 0, memory_order_relaxed);
}

int fly__shm_writer_copy(struct fly_shm_writer *dst,
			 const struct fly_shm_writer *src)
{
	union slot_img img;
	int n = 0;

	for (uint32_t i = 0; i < src->capacity; i++) {
		struct fly_decision d;
		int rc;

		if (!src->written[i])
			continue;
		slot_peek(src, i, &img);
		if (img.w[0] == 0 || img.s.keylen == 0 ||
		    img.s.keylen > FLY_KEY_MAX - 1 ||
		    img.s.nparams > FLY_PARAMS_MAX)
			continue;
		memset(&d, 0, sizeof(d));
		d.status = img.s.status;
		memcpy(d.variant, img.s.variant, FLY_VARIANT_MAX);
		d.variant[FLY_VARIANT_MAX - 1] = '\0';
		d.nparams = img.s.nparams;
		memcpy(d.params, img.s.params, sizeof(d.params));
		d.median_us = img.s.median_us;
		rc = fly__shm_put(dst, img.s.key, img.s.keylen, &d);
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
	want = (uint64_t)h.header_size + (uint64_t)h.capacity * h.slot_size;
	if (want != h.total_size)
		return FLY_E_SHM;
	if (h.checksum != fly__shm_header_sum(base))
		return FLY_E_SHM;
	r->capacity = h.capacity;
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

/* Copy slot i consistently.  @return 0, or FLY_E_SHM after the retries. */
static int slot_read(const struct fly_shm_reader *r, uint32_t i,
		     union slot_img *img)
{
	_Atomic uint64_t *sw = slot_words(r->base, i);

	for (int t = 0; t < FLY_SHM_RETRIES; t++) {
		uint64_t s1 =
		    atomic_load_explicit(&sw[0], memory_order_acquire);

		if (s1 & 1)
			continue;
		img->w[0] = s1;
		if (s1 == 0)
			return 0; /* never used: nothing else matters */
		for (int k = 1; k < SLOT_WORDS; k++)
			img->w[k] =
			    atomic_load_explicit(&sw[k], memory_order_relaxed);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&sw[0], memory_order_relaxed) == s1)
			return 0;
	}
	return FLY_E_SHM;
}

/* A consistent copy that is still untrusted: check it before use. */
static int slot_valid(const union slot_img *img)
{
	if (img->s.checksum != slot_sum(img))
		return 0;
	if (img->s.keylen > FLY_KEY_MAX - 1 || img->s.nparams > FLY_PARAMS_MAX)
		return 0;
	return memchr(img->s.variant, '\0', FLY_VARIANT_MAX) != NULL;
}

int fly_shm_lookup(const struct fly_shm_reader *r, const char *key, size_t len,
		   struct fly_decision *out)
{
	union slot_img img;
	uint64_t hash, h0, gen;
	uint32_t mask;
	int rc;

	if (r == NULL || key == NULL || len == 0 || len > FLY_KEY_MAX - 1)
		return FLY_E_NOTFOUND;
	gen = fly__shm_reader_generation(r);
	hash = fly_key_hash(key, len);
	h0 = fly__shm_home(hash);
	mask = r->capacity - 1;
	for (uint32_t p = 0; p < r->probe; p++) {
		uint32_t i = (uint32_t)(h0 + p) & mask;
		_Atomic uint64_t *sw = slot_words(r->base, i);
		uint64_t s0 = atomic_load_explicit(&sw[0], memory_order_acquire);

		if (s0 == 0)
			return FLY_E_NOTFOUND;
		/* A stable slot whose hash differs is passed over on two
		 * loads; only a match (or a slot being written) is copied
		 * whole under the seqlock and checked. */
		if (!(s0 & 1) &&
		    atomic_load_explicit(&sw[1], memory_order_relaxed) != hash)
			continue;
		rc = slot_read(r, i, &img);
		if (rc < 0)
			return rc;
		if (img.w[0] == 0)
			return FLY_E_NOTFOUND;
		/* Fields out of their range mark a corrupt table at once;
		 * the (costlier) checksum is verified on the matching slot,
		 * the only one whose bytes are returned. */
		if (img.s.keylen > FLY_KEY_MAX - 1 ||
		    img.s.nparams > FLY_PARAMS_MAX)
			return FLY_E_SHM;
		if (img.s.keylen != len || img.s.hash != hash ||
		    memcmp(img.s.key, key, len))
			continue;
		if (!slot_valid(&img))
			return FLY_E_SHM;
		memset(out, 0, sizeof(*out));
		out->status = img.s.status;
		memcpy(out->variant, img.s.variant, FLY_VARIANT_MAX);
		out->nparams = img.s.nparams;
		memcpy(out->params, img.s.params, sizeof(out->params));
		out->median_us = img.s.median_us;
		out->generation = gen;
		return 0;
	}
	return FLY_E_NOTFOUND;
}
