/*
 * publish.c -- fill and update the shm winners table (publish.h).
 *
 * Owns: the shm writer and a copy of its current generation (the writer
 * keeps the authoritative atomic in the mapping).  Thread: loop thread.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fly_shm.h"
#include "log.h"
#include "publish.h"

struct flyd_publish {
	struct fly_shm_writer *w;
	uint64_t generation;   /* last value returned by fly__shm_bump */
	uint32_t max_capacity; /* slots of the largest table (shm_max_bytes) */
	int warned_full;       /* -ENOSPC logged once per fill */
};

/* The largest power-of-two slot count whose slots and record arena fit
 * in @p max_bytes (the 256-byte header aside), never below @p capacity. */
static uint32_t cap_of_bytes(uint64_t max_bytes, uint32_t capacity)
{
	const uint64_t per = FLY_SHM_SLOT_SIZE + FLY_SHM_ARENA_PER_SLOT;
	uint64_t n = 64;

	while (n * 2 * per <= max_bytes && n * 2 <= (1u << 24))
		n *= 2;
	return n < capacity ? capacity : (uint32_t)n;
}

int flyd_publish_open(uint32_t capacity, uint64_t max_bytes,
		      struct flyd_publish **out)
{
	struct flyd_publish *p;
	int rc;

	*out = NULL;
	p = calloc(1, sizeof(*p));
	if (p == NULL)
		return -ENOMEM;
	rc = fly__shm_writer_open(capacity, &p->w);
	if (rc < 0) {
		free(p);
		return rc;
	}
	p->max_capacity =
	    cap_of_bytes(max_bytes, fly__shm_writer_capacity(p->w));
	*out = p;
	return 0;
}

/* Move to a table of at least twice the slots, below the cap: a new
 * sealed memfd gets every live entry, then the old one is marked
 * superseded (its generation bumped) and closed here -- clients still
 * mapping it keep it until they move, which they do on their next miss
 * (a new hello hands out the new fd).  @return 0, -ENOSPC (at the cap),
 * or an error of the new table (the old one is kept). */
static int grow(struct flyd_publish *p, uint32_t need)
{
	struct fly_shm_writer *nw;
	uint32_t cap = fly__shm_writer_capacity(p->w), ncap = cap * 2;
	int rc;

	while (ncap < p->max_capacity && ncap / 2 < need)
		ncap *= 2;
	if (cap >= p->max_capacity || ncap > p->max_capacity)
		return -ENOSPC;
	rc = fly__shm_writer_open(ncap, &nw);
	if (rc < 0) {
		flyd_log(FLYD_LOG_WARN, "shm_grow_failed",
			 "capacity=%u new_capacity=%u rc=%d", cap, ncap, rc);
		return rc;
	}
	rc = fly__shm_writer_copy(nw, p->w);
	if (rc < 0) {
		fly__shm_writer_close(nw);
		return rc;
	}
	fly__shm_writer_supersede(p->w);
	fly__shm_writer_close(p->w);
	p->w = nw;
	p->generation = fly__shm_bump(p->w);
	p->warned_full = 0;
	flyd_log(FLYD_LOG_INFO, "shm_grown",
		 "capacity=%u new_capacity=%u entries=%d max_capacity=%u", cap,
		 ncap, rc, p->max_capacity);
	return 0;
}

void flyd_publish_close(struct flyd_publish *p)
{
	if (p == NULL)
		return;
	fly__shm_writer_close(p->w);
	free(p);
}

int flyd_publish_put(struct flyd_publish *p, const char *key,
		     const struct fly_decision *d)
{
	struct fly_decision pub = *d;
	int rc;

	pub.status = FLY_STATUS_TUNED;
	pub.provisional = 0;
	/* at most half full: probes stay short and the window never fills
	 * before the cap */
	if (fly__shm_writer_count(p->w) + 1 >
	    fly__shm_writer_capacity(p->w) / 2)
		(void)grow(p, fly__shm_writer_count(p->w) + 1);
	rc = fly__shm_put(p->w, key, strlen(key), &pub);
	if (rc == -ENOSPC && grow(p, fly__shm_writer_count(p->w) + 1) == 0)
		rc = fly__shm_put(p->w, key, strlen(key), &pub);
	if (rc == -ENOSPC && !p->warned_full) {
		p->warned_full = 1;
		flyd_log(FLYD_LOG_WARN, "shm_full",
			 "key=%s count=%u capacity=%u", key,
			 fly__shm_writer_count(p->w),
			 fly__shm_writer_capacity(p->w));
	}
	return rc;
}

struct fill_ctx {
	struct flyd_publish *p;
	void (*each)(void *arg, const struct flyd_result *r);
	void *arg;
	int n;
};

static int fill_one(void *arg, const struct flyd_result *r)
{
	struct fill_ctx *f = arg;

	(void)flyd_publish_put(f->p, r->key, &r->d);
	if (f->each != NULL)
		f->each(f->arg, r);
	f->n++;
	return 0;
}

int flyd_publish_fill(struct flyd_publish *p, struct flyd_store *st,
		      const char *device, const char *libver,
		      void (*each)(void *arg, const struct flyd_result *r),
		      void *arg)
{
	struct fill_ctx f = {.p = p, .each = each, .arg = arg};
	int rc;

	fly__shm_clear(p->w);
	p->warned_full = 0;
	rc = flyd_store_result_iter(st, device, libver, NULL, 0, fill_one,
				    &f);
	if (rc < 0)
		return rc;
	return f.n;
}

int flyd_publish_drop(struct flyd_publish *p, const char *key)
{
	if (key == NULL) {
		fly__shm_clear(p->w);
		return 0;
	}
	return fly__shm_del(p->w, key, strlen(key));
}

uint64_t flyd_publish_bump(struct flyd_publish *p)
{
	p->generation = fly__shm_bump(p->w);
	return p->generation;
}

int flyd_publish_fd(const struct flyd_publish *p)
{
	return fly__shm_writer_fd(p->w);
}

size_t flyd_publish_size(const struct flyd_publish *p)
{
	return fly__shm_writer_size(p->w);
}

uint32_t flyd_publish_capacity(const struct flyd_publish *p)
{
	return fly__shm_writer_capacity(p->w);
}

uint32_t flyd_publish_count(const struct flyd_publish *p)
{
	return fly__shm_writer_count(p->w);
}

uint64_t flyd_publish_generation(const struct flyd_publish *p)
{
	return p->generation;
}
