/*
 * queue.c -- the tuning job queue (see queue.h).
 *
 * Owns: the job records, a chained hash of them by key, and two intrusive
 * FIFO lists (explicit, background).  Thread: loop thread only.
 * Invariant: every record is in the hash; a record is in a list iff its
 * state is QUEUED; nqueued == length of both lists.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "queue.h"

struct qlist {
	struct flyd_qjob *head;
	struct flyd_qjob *tail;
};

struct flyd_queue {
	uint32_t cap;               /* max QUEUED jobs, 0: unlimited */
	uint32_t nqueued;           /* QUEUED jobs */
	size_t nrecords;            /* records in the hash */
	size_t nbuckets;            /* power of two */
	struct flyd_qjob **buckets;
	struct qlist level[2];      /* [FLYD_PRIO_BACKGROUND], [EXPLICIT] */
	struct flyd_qjob *running;
};

/* FNV-1a, the same function as fly_key_hash (kept local: no link
 * dependency for a pure data structure). */
static uint64_t key_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;

	for (; *s != '\0'; s++) {
		h ^= (unsigned char)*s;
		h *= 1099511628211ull;
	}
	return h;
}

static struct flyd_qjob **bucket_of(const struct flyd_queue *q,
				    const char *key)
{
	return &q->buckets[key_hash(key) & (q->nbuckets - 1)];
}

int flyd_queue_new(uint32_t cap, struct flyd_queue **out)
{
	struct flyd_queue *q;

	*out = NULL;
	q = calloc(1, sizeof(*q));
	if (q == NULL)
		return -ENOMEM;
	q->nbuckets = 256;
	q->buckets = calloc(q->nbuckets, sizeof(*q->buckets));
	if (q->buckets == NULL) {
		free(q);
		return -ENOMEM;
	}
	q->cap = cap;
	*out = q;
	return 0;
}

void flyd_queue_free(struct flyd_queue *q)
{
	if (q == NULL)
		return;
	for (size_t i = 0; i < q->nbuckets; i++) {
		struct flyd_qjob *j = q->buckets[i];

		while (j != NULL) {
			struct flyd_qjob *n = j->hnext;

			free(j);
			j = n;
		}
	}
	free(q->buckets);
	free(q);
}

void flyd_queue_set_cap(struct flyd_queue *q, uint32_t cap)
{
	q->cap = cap;
}

uint32_t flyd_queue_cap(const struct flyd_queue *q)
{
	return q->cap;
}

/* Double the bucket array when the chains get long; on allocation failure
 * keep the old one (only slower). */
static void hash_grow(struct flyd_queue *q)
{
	size_t nb = q->nbuckets * 2;
	struct flyd_qjob **b = calloc(nb, sizeof(*b));

	if (b == NULL)
		return;
	for (size_t i = 0; i < q->nbuckets; i++) {
		struct flyd_qjob *j = q->buckets[i];

		while (j != NULL) {
			struct flyd_qjob *n = j->hnext;
			size_t h = key_hash(j->key) & (nb - 1);

			j->hnext = b[h];
			b[h] = j;
			j = n;
		}
	}
	free(q->buckets);
	q->buckets = b;
	q->nbuckets = nb;
}

static void list_append(struct qlist *l, struct flyd_qjob *j)
{
	j->next = NULL;
	j->prev = l->tail;
	if (l->tail != NULL)
		l->tail->next = j;
	else
		l->head = j;
	l->tail = j;
}

static void list_prepend(struct qlist *l, struct flyd_qjob *j)
{
	j->prev = NULL;
	j->next = l->head;
	if (l->head != NULL)
		l->head->prev = j;
	else
		l->tail = j;
	l->head = j;
}

static void list_remove(struct qlist *l, struct flyd_qjob *j)
{
	if (j->prev != NULL)
		j->prev->next = j->next;
	else
		l->head = j->next;
	if (j->next != NULL)
		j->next->prev = j->prev;
	else
		l->tail = j->prev;
	j->prev = j->next = NULL;
}

static int prio_index(int priority)
{
	return priority > 0 ? FLYD_PRIO_EXPLICIT : FLYD_PRIO_BACKGROUND;
}

struct flyd_qjob *flyd_queue_find(const struct flyd_queue *q,
				  const char *key)
{
	for (struct flyd_qjob *j = *bucket_of(q, key); j != NULL;
	     j = j->hnext)
		if (strcmp(j->key, key) == 0)
			return j;
	return NULL;
}

/* An existing record: promote, merge force, or refuse a FAILED one. */
static int push_existing(struct flyd_queue *q, struct flyd_qjob *j,
			 int prio, int force)
{
	if (j->state == FLYD_Q_FAILED) {
		if (!force)
			return 2;
		if (q->cap != 0 && q->nqueued >= q->cap)
			return FLY_E_BUSY;
		j->state = FLYD_Q_QUEUED;
		j->priority = prio;
		j->force = force;
		j->faults = 0;
		j->not_before_ms = 0;
		q->nqueued++;
		list_append(&q->level[prio], j);
		return 0;
	}
	if (force)
		j->force = 1;
	if (j->state == FLYD_Q_QUEUED && prio > j->priority) {
		list_remove(&q->level[j->priority], j);
		j->priority = prio;
		list_append(&q->level[prio], j);
	}
	return 1;
}

int flyd_queue_push(struct flyd_queue *q, const char *key, int priority,
		    int force, struct flyd_qjob **out)
{
	int prio = prio_index(priority);
	struct flyd_qjob *j;
	struct flyd_qjob **b;
	size_t len = strlen(key);
	int rc;

	if (out != NULL)
		*out = NULL;
	if (len >= FLY_KEY_MAX)
		return FLY_E_KEYLEN;
	j = flyd_queue_find(q, key);
	if (j != NULL) {
		rc = push_existing(q, j, prio, force != 0);
		if (rc >= 0 && rc != 2 && out != NULL)
			*out = j;
		return rc;
	}
	if (q->cap != 0 && q->nqueued >= q->cap)
		return FLY_E_BUSY;
	j = calloc(1, sizeof(*j));
	if (j == NULL)
		return -ENOMEM;
	memcpy(j->key, key, len + 1);
	j->priority = prio;
	j->force = force != 0;
	j->state = FLYD_Q_QUEUED;
	if (q->nrecords >= q->nbuckets)
		hash_grow(q);
	b = bucket_of(q, key);
	j->hnext = *b;
	*b = j;
	q->nrecords++;
	q->nqueued++;
	list_append(&q->level[prio], j);
	if (out != NULL)
		*out = j;
	return 0;
}

struct flyd_qjob *flyd_queue_peek(const struct flyd_queue *q,
				  int allow_background)
{
	if (q->level[FLYD_PRIO_EXPLICIT].head != NULL)
		return q->level[FLYD_PRIO_EXPLICIT].head;
	if (allow_background)
		return q->level[FLYD_PRIO_BACKGROUND].head;
	return NULL;
}

struct flyd_qjob *flyd_queue_peek_at(const struct flyd_queue *q,
				     int allow_background, uint64_t now_ms)
{
	for (int l = FLYD_PRIO_EXPLICIT; l >= FLYD_PRIO_BACKGROUND; l--) {
		if (l == FLYD_PRIO_BACKGROUND && !allow_background)
			break;
		for (struct flyd_qjob *j = q->level[l].head; j != NULL;
		     j = j->next)
			if (j->not_before_ms <= now_ms)
				return j;
	}
	return NULL;
}

void flyd_queue_start(struct flyd_queue *q, struct flyd_qjob *j)
{
	if (j->state != FLYD_Q_QUEUED || q->running != NULL)
		abort(); /* caller bug: one job at a time, from the queue */
	list_remove(&q->level[j->priority], j);
	q->nqueued--;
	j->state = FLYD_Q_RUNNING;
	q->running = j;
}

void flyd_queue_requeue_front(struct flyd_queue *q, struct flyd_qjob *j)
{
	if (j->state != FLYD_Q_RUNNING)
		abort();
	q->running = NULL;
	j->state = FLYD_Q_QUEUED;
	q->nqueued++;
	list_prepend(&q->level[j->priority], j);
}

void flyd_queue_requeue_back(struct flyd_queue *q, struct flyd_qjob *j,
			     uint64_t not_before_ms)
{
	if (j->state != FLYD_Q_RUNNING)
		abort();
	q->running = NULL;
	j->state = FLYD_Q_QUEUED;
	j->not_before_ms = not_before_ms;
	q->nqueued++;
	list_append(&q->level[j->priority], j);
}

/* Take a record out of whatever list or slot its state puts it in. */
static void detach(struct flyd_queue *q, struct flyd_qjob *j)
{
	if (j->state == FLYD_Q_QUEUED) {
		list_remove(&q->level[j->priority], j);
		q->nqueued--;
	} else if (j->state == FLYD_Q_RUNNING) {
		q->running = NULL;
	}
}

void flyd_queue_fail(struct flyd_queue *q, struct flyd_qjob *j)
{
	detach(q, j);
	j->state = FLYD_Q_FAILED;
}

void flyd_queue_done(struct flyd_queue *q, struct flyd_qjob *j)
{
	struct flyd_qjob **pp = bucket_of(q, j->key);

	detach(q, j);
	while (*pp != NULL && *pp != j)
		pp = &(*pp)->hnext;
	if (*pp == j) {
		*pp = j->hnext;
		q->nrecords--;
	}
	free(j);
}

void flyd_queue_clear_failed(struct flyd_queue *q, const char *key)
{
	if (key != NULL) {
		struct flyd_qjob *j = flyd_queue_find(q, key);

		if (j != NULL && j->state == FLYD_Q_FAILED)
			flyd_queue_done(q, j);
		return;
	}
	for (size_t i = 0; i < q->nbuckets; i++) {
		struct flyd_qjob *j = q->buckets[i];

		while (j != NULL) {
			struct flyd_qjob *n = j->hnext;

			if (j->state == FLYD_Q_FAILED)
				flyd_queue_done(q, j);
			j = n;
		}
	}
}

struct flyd_qjob *flyd_queue_running(const struct flyd_queue *q)
{
	return q->running;
}

uint32_t flyd_queue_len(const struct flyd_queue *q)
{
	return q->nqueued;
}

void flyd_queue_foreach_record(struct flyd_queue *q,
			       void (*cb)(void *arg, struct flyd_qjob *j),
			       void *arg)
{
	for (size_t i = 0; i < q->nbuckets; i++)
		for (struct flyd_qjob *j = q->buckets[i]; j; j = j->hnext)
			cb(arg, j);
}

void flyd_queue_foreach(struct flyd_queue *q,
			void (*cb)(void *arg, struct flyd_qjob *j), void *arg)
{
	for (int l = FLYD_PRIO_EXPLICIT; l >= FLYD_PRIO_BACKGROUND; l--) {
		struct flyd_qjob *j = q->level[l].head;

		while (j != NULL) {
			struct flyd_qjob *n = j->next;

			cb(arg, j);
			j = n;
		}
	}
}
