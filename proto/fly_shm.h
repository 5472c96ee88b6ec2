/*
 * fly_shm.h -- the published-winners table in shared memory.
 *
 * Owns: the layout (private to proto/: fly_shm.c) and the reader/writer
 * entry points.  Thread: the writer is the daemon's loop thread (single
 * writer); readers are any thread of any client process, lock-free.
 *
 * The table is a memfd created by the daemon, sized at start, sealed with
 * F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE (the daemon keeps its one
 * writable mapping), passed to clients over SCM_RIGHTS.  Clients map it
 * PROT_READ and treat every byte as untrusted.
 *
 * Layout (all little-endian, fixed width; see fly_shm.c for the
 * _Static_asserts), version 6 (issue 19: 8 bytes a slot, where version 3
 * spent 256 on every slot and 512 MiB of memfd on a 1M-key table, and 5
 * spent 16; keys placed by their problem's hash since 5):
 *
 *   offset 0      header (256 bytes): magic "FLYSHM01" (u64), layout
 *                 version (u32), header size (u32), slot size (u32),
 *                 capacity (u32, power of two), total size (u64),
 *                 generation (atomic u64, bumps on forget/import/re-tune
 *                 and on every restart), count (atomic u32), max probe
 *                 (u32), header checksum (u32, FNV-1a 64 over the constant
 *                 fields, folded), superseded (atomic u32), arena used
 *                 (atomic u64: record units ever handed out from the
 *                 arena's start, a high-water mark; 0 from writers
 *                 before it, which readers accept since version 5),
 *                 padding.
 *   offset 256    capacity slots of 8 bytes, eight to a cache line,
 *                 each one atomic u64: 0 never used; else bits 48..63
 *                 the high 16 bits of the key's fly__shm_key_hash (the
 *                 tag), bits 28..47 a version (a writer-wide publication
 *                 count mod 2^20 - 1, plus 1: never 0), bits 0..27 the
 *                 record's unit + 1 (0: a tombstone).
 *   then          the record arena, capacity x 128 bytes in units of 16:
 *                 one record per live key, 32 to 224 bytes: word 0 (key
 *                 length u8, variant length u8, nparams u8, status u8,
 *                 checksum u32: two lanes of FNV-1a 64 word-wise over
 *                 the record with the checksum taken as 0, joined and
 *                 folded: fly__shm_record_sum), median_us (f64),
 *                 params (nparams x i64), the key's bytes then the
 *                 variant's (no NULs), zero-padded to a unit.  Only the
 *                 pages of records ever written are resident.
 *
 * Lookup: linear probing from fly__shm_home(hash) & (capacity - 1) (the
 * key's fly__shm_key_hash through the fmix64 finalizer), at most max probe
 * (bounded again by the reader's own cap) slots; a never-used slot ends
 * the probe, a slot whose tag differs is passed over on its one word.
 * On a tag match the record is copied (every index bounded by the arena)
 * between two loads of the slot's word, and its full key compared: a key
 * sharing the tag is a miss, never its decision; the checksum is checked
 * on the record returned.  A reader retries a slot a bounded number of
 * times and then reports FLY_E_SHM (a writer killed mid-update must not
 * spin a reader forever).  The writer writes a record only while no slot
 * references it and frees it after its slot changed (fly_shm.c says why a
 * reader cannot return a reused record's bytes).
 */
#ifndef FLY_SHM_H
#define FLY_SHM_H

#include <stddef.h>
#include <stdint.h>

#include "fly_abi.h"

/* 2: the header checksum is FNV-1a 64 folded to 32 bits (fly_hash.h),
 * not the 32-bit FNV-1a of version 1 (issue 23: one hash); 3: the
 * superseded flag; 4: 16-byte slots and the record arena (issue 19);
 * 5: slots and tags from fly__shm_key_hash (a canonical key's problem
 * hashed a word at a time), not the byte-wise fly_key_hash of the text
 * (issue 19: the shm path's cost); 6: 8-byte slots, one word each (tag,
 * version, record reference), where 5 had a sequence word beside the
 * reference (issue 19: half the slot bytes a lookup can miss). */
#define FLY_SHM_LAYOUT_VERSION 6
#define FLY_SHM_SLOT_SIZE 8
/* A slot word's fields (layout 6) */
#define FLY_SHM_REF_BITS 28
#define FLY_SHM_REF_MASK ((1ull << FLY_SHM_REF_BITS) - 1)
#define FLY_SHM_VER_SHIFT 28
#define FLY_SHM_VER_MAX 0xfffffull /* versions 1..2^20 - 1 */
#define FLY_SHM_TAG_SHIFT 48
/* Arena bytes per slot: a table at most half full has 256 bytes a live
 * key, more than the longest record (224). */
#define FLY_SHM_ARENA_PER_SLOT 128
#define FLY_SHM_HEADER_SIZE 256
#define FLY_SHM_MAX_PROBE 64
#define FLY_SHM_RETRIES 16

/* The table's hash of a key (layout 5 on): of a canonical key (one
 * fly_key_parse accepts), fly__shm_problem_hash of its problem; of any
 * other text, FNV-1a 64 a word at a time over its length and bytes.  Its
 * high 16 bits are a slot's tag. */
uint64_t fly__shm_key_hash(const char *key, size_t len);
/* The table's hash of the canonical key of the (validated, bucketed)
 * problem @p p, without formatting the key: fly__hash_words2 (FNV-1a 64
 * a word at a time, two lanes) over (op, dtype, layout, flags) in one
 * word, then the dims. */
uint64_t fly__shm_problem_hash(const struct fly_problem *p);
/* The home slot index (before masking) of a key with fly__shm_key_hash()
 * @p hash: fmix64 of it, so every bit of the hash reaches the index. */
uint64_t fly__shm_home(uint64_t hash);

/* The checksum of a record of @p nwords words at @p w (its word 0's
 * checksum bits are not read), as the writer stores it and a reader
 * checks it: for tests that forge a signed record. */
uint32_t fly__shm_record_sum(const uint64_t *w, uint32_t nwords);

/* ---- writer (daemon) ---- */
struct fly_shm_writer;

/* Create a sealed memfd table with room for @p capacity slots (rounded up
 * to a power of two, >= 64).  @param[out] fd the memfd, owned by the
 * writer (closed by fly__shm_writer_close); dup() it to hand it out.
 * @return 0, -ENOMEM, -errno from memfd_create/ftruncate/mmap/fcntl. */
int fly__shm_writer_open(uint32_t capacity, struct fly_shm_writer **out);
void fly__shm_writer_close(struct fly_shm_writer *w);
int fly__shm_writer_fd(const struct fly_shm_writer *w);
size_t fly__shm_writer_size(const struct fly_shm_writer *w);
uint32_t fly__shm_writer_capacity(const struct fly_shm_writer *w);
uint32_t fly__shm_writer_count(const struct fly_shm_writer *w);
/* Insert or replace the decision for a key.  @return 0, -ENOSPC when the
 * probe window or the record arena is full, FLY_E_KEYLEN. */
int fly__shm_put(struct fly_shm_writer *w, const char *key, size_t len,
		 const struct fly_decision *d);
/* Remove a key (tombstone).  @return 0 or FLY_E_NOTFOUND. */
int fly__shm_del(struct fly_shm_writer *w, const char *key, size_t len);
/* Remove every entry (slots return to never-used). */
void fly__shm_clear(struct fly_shm_writer *w);
/* Bump and return the generation (release store). */
uint64_t fly__shm_bump(struct fly_shm_writer *w);
/* Copy every live entry of @p src into @p dst (growing the table), in
 * the order their records were published (the arena's order, so keys
 * written together stay together).
 * @return entries copied, or fly__shm_put's error (-ENOSPC). */
int fly__shm_writer_copy(struct fly_shm_writer *dst,
			 const struct fly_shm_writer *src);
/* Mark @p w superseded by a larger table and bump its generation, so
 * readers look again and move on their next miss (layout 3). */
void fly__shm_writer_supersede(struct fly_shm_writer *w);

/* 1 when F_SEAL_FUTURE_WRITE was applied; 0 when the kernel refused it
 * (before Linux 5.1) and only SHRINK|GROW seal the table. */
int fly__shm_writer_sealed_future_write(const struct fly_shm_writer *w);
/* For tests only: the writer's writable mapping (to forge hostile
 * tables), and the header checksum of a header at @p hdr. */
void *fly__shm_writer_mem(struct fly_shm_writer *w);
uint32_t fly__shm_header_sum(const void *hdr);

/* ---- reader (client) ---- */
struct fly_shm_reader;

/* Map a table received over the socket.  Checks: regular memfd, seals
 * include SHRINK|GROW|FUTURE_WRITE (or WRITE), fstat size equals the
 * header's total size, magic, layout version, header/slot sizes,
 * power-of-two capacity that fits the size, header checksum.  Takes
 * ownership of @p fd, even on failure.
 * @return 0, FLY_E_SHM (refused), FLY_E_VERSION, -errno. */
int fly__shm_reader_open(int fd, struct fly_shm_reader **out);
void fly__shm_reader_close(struct fly_shm_reader *r);
/* Read one byte of every page a lookup can touch, so lookups take no
 * first-touch fault on them (issue 19: the shm row's p99): the header,
 * the slots (all of them: a sparse table's never-written slot pages are
 * allocated by the read, capacity x 16 bytes at most), and the record
 * arena up to the header's arena-used mark (bounded by the arena; never
 * its unwritten tail, since reading a memfd hole allocates a page).
 * Plain loads: MADV_POPULATE_READ was measured and left each page's
 * first load from user space at 10-20 us on the 2-core VM.  Pages
 * written later (new records) are first touched by their lookup.  A
 * slow call on a large table (1M keys: 108 MiB, see bench/README.md).
 * @return the bytes pre-faulted. */
size_t fly__shm_reader_prefault(const struct fly_shm_reader *r);
/* Current generation (acquire load). */
uint64_t fly__shm_reader_generation(const struct fly_shm_reader *r);
/* 1 when the daemon has moved to a larger table: this one is frozen, the
 * next hello hands out the new one. */
int fly__shm_reader_superseded(const struct fly_shm_reader *r);
/* Mark @p r orphaned (1) or trusted again (0).  The client's own mark,
 * not the table's: its connection to the daemon that handed the table
 * out hung up, so that daemon may be gone and a restarted one may
 * answer otherwise (issue 21).  Lookups still work; libflyclient takes
 * no answer from an orphaned table until the same table comes back with
 * a hello. */
void fly__shm_reader_orphan_set(struct fly_shm_reader *r, int orphaned);
/* 1 while @p r is marked orphaned (acquire load). */
int fly__shm_reader_is_orphaned(const struct fly_shm_reader *r);

/* Look a key up.  Never crashes on a hostile table; every index is
 * bounded.  @param[out] out filled on a hit, generation set.
 * @return 0 (hit), FLY_E_NOTFOUND, FLY_E_SHM (torn/corrupt after retries:
 * use the socket). */
int fly_shm_lookup(const struct fly_shm_reader *r, const char *key,
		   size_t len, struct fly_decision *out);
/* fly_shm_lookup with the key's table hash given (fly__shm_key_hash or,
 * for a problem's canonical key, fly__shm_problem_hash): a hash that is
 * not the key's finds nothing, never another key's decision (the full
 * key decides). */
int fly__shm_lookup_hashed(const struct fly_shm_reader *r, uint64_t hash,
			   const char *key, size_t len,
			   struct fly_decision *out);
/* Start loading the home slot's cache line of a key of table hash
 * @p hash (no fault, no effect on a NULL reader). */
void fly__shm_prefetch(const struct fly_shm_reader *r, uint64_t hash);
/* fly_problem_key into @p key (FLY_KEY_MAX bytes), with the key's table
 * hash in *hash: hashed from the bucketed problem, so the home slot's
 * line of @p r (may be NULL) is asked for before the problem is
 * validated and the key formatted, and its cache miss overlaps that work
 * (fly_decide's table path; bench/shm_lookup times it).  *hash is set
 * even for an invalid problem.  @return as fly_problem_key. */
int fly__shm_problem_key(const struct fly_shm_reader *r,
			 const struct fly_problem *p, char *key,
			 uint64_t *hash);

#endif /* FLY_SHM_H */
