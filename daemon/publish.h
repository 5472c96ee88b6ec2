/*
 * publish.h -- the daemon's side of the shm winners table: a thin wrapper
 * over the proto/ single writer that fills the table from the store and
 * tracks the generation.
 *
 * Owns: the fly_shm_writer (memfd and its one writable mapping).
 * Thread: loop thread only (the single writer).
 * Invariant: an entry is put here only after its result was committed to
 * the store with synchronous=FULL (results.c's order: commit, publish,
 * answer).
 */
#ifndef FLYD_PUBLISH_H
#define FLYD_PUBLISH_H

#include <stddef.h>
#include <stdint.h>

#include "fly_abi.h"
#include "store.h"

struct flyd_publish;

/* Create the sealed table with room for @p capacity slots; it grows (a
 * new, larger sealed memfd; the old one superseded) whenever it would be
 * more than half full, while its slots fit in @p max_bytes.
 * @return 0, -ENOMEM, -errno (memfd_create, ftruncate, mmap, fcntl). */
int flyd_publish_open(uint32_t capacity, uint64_t max_bytes,
		      struct flyd_publish **out);
/* NULL: no-op. */
void flyd_publish_close(struct flyd_publish *p);

/* Clear the table and put every stored result of @p device / @p libver;
 * @p each (may be NULL) is called for every result too (results.c loads
 * its in-memory map in the same pass).  Entries that do not fit are
 * skipped (logged once).  @return the number of results seen, or
 * FLY_E_STORAGE. */
int flyd_publish_fill(struct flyd_publish *p, struct flyd_store *st,
		      const char *device, const char *libver,
		      void (*each)(void *arg, const struct flyd_result *r),
		      void *arg);
/* Insert or replace a committed winner (growing the table first when it
 * would pass half full).  @return 0, -ENOSPC (at the size cap and the
 * probe window full: logged, clients use the socket), FLY_E_KEYLEN. */
int flyd_publish_put(struct flyd_publish *p, const char *key,
		     const struct fly_decision *d);
/* Drop one key (NULL: every key).  @return 0 or FLY_E_NOTFOUND. */
int flyd_publish_drop(struct flyd_publish *p, const char *key);
/* Bump the generation; returns the new one. */
uint64_t flyd_publish_bump(struct flyd_publish *p);

int flyd_publish_fd(const struct flyd_publish *p);       /* borrowed */
size_t flyd_publish_size(const struct flyd_publish *p);
uint32_t flyd_publish_capacity(const struct flyd_publish *p);
uint32_t flyd_publish_count(const struct flyd_publish *p);
uint64_t flyd_publish_generation(const struct flyd_publish *p);

#endif /* FLYD_PUBLISH_H */
