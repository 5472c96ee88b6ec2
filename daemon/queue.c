/*
 * queue.c -- the tuning job queue (see queue.h).
 *
 * Owns: the job records, a table of them by key (table.h), and two
 * intrusive FIFO lists (explicit, background).  Thread: loop thread only.
 * Invariant: every record is in the table; a record is in a list iff its
 * state is QUEUED; nqueued == length of both lists.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "fly_key.h"
#include "queue.h"

struct qlist {
	struct flyd_qjob *head;
	struct flyd_qjob *tail;
};

struct flyd_queue {
	uint32_t cap;               /* max QUEUED jobs, 0: unlimited */
	uint32_t nqueued;           /* QUEUED jobs */
	struct flyd_table records;  /* every record, by key (table.h) */
	struct qlist level[2];      /* [FLYD_PRIO_BACKGROUND], [EXPLICIT] */
	struct flyd_qjob *running;
};

static struct flyd_qjob *job_of(struct flyd_tnode *n)
{
	return n != NULL ? FLYD_CONTAINER_OF(n, struct flyd_qjob, node) : NULL;
}

int flyd_queue_new(uint32_t cap, struct flyd_queue **out)
{
	struct flyd_queue *q;

	*out = NULL;
	q = calloc(1, sizeof(*q));
	if (q == NULL)
		return -ENOMEM;
	if (flyd_table_init(&q->records, 256,
			    offsetof(struct flyd_qjob, key) -
			    offsetof(struct flyd_qjob, node)) < 0) {
		free(q);
		return -ENOMEM;
	}
	q->cap = cap;
	*out = q;
	return 0;
}

static void free_job(void *arg, struct flyd_tnode *n)
{
	free(job_of(n));
}

void flyd_queue_free(struct flyd_queue *q)
{
	if (q == NULL)
		return;
	flyd_table_foreach(&q->records, free_job, NULL);
	flyd_table_fini(&q->records);
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
	return job_of(flyd_table_get(&q->records, key));
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
	if (j->state == FLYD_Q_RUNNING && j->cancelled && !j->rerun) {
		/* asked again while its cancelled run is being stopped: a new
		 * job, queued when that run's end comes back (scheduler.c) */
		j->rerun = 1;
		j->priority = prio;
		j->force = force;
		j->faults = 0;
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
	j->exact = fly_key_is_exact(key, len);
	j->priority = prio;
	j->force = force != 0;
	j->state = FLYD_Q_QUEUED;
	flyd_table_add(&q->records, &j->node);
	q->nqueued++;
	list_append(&q->level[prio], j);
	if (out != NULL)
		*out = j;
	return 0;
}

/* The first job of @p l that may start at @p now_ms: a bucket key before
 * any exact-shape key (issue 22: an exact shape is served by its bucket
 * meanwhile; a bucket key not yet tuned is served by a neighbour or the
 * default). */
static struct flyd_qjob *first_startable(const struct qlist *l,
					 uint64_t now_ms)
{
	struct flyd_qjob *ex = NULL;

	for (struct flyd_qjob *j = l->head; j != NULL; j = j->next) {
		if (j->not_before_ms > now_ms)
			continue;
		if (!j->exact)
			return j;
		if (ex == NULL)
			ex = j;
	}
	return ex;
}

struct flyd_qjob *flyd_queue_peek(const struct flyd_queue *q,
				  int allow_background)
{
	if (q->level[FLYD_PRIO_EXPLICIT].head != NULL)
		return q->level[FLYD_PRIO_EXPLICIT].head;
	if (allow_background)
		return first_startable(&q->level[FLYD_PRIO_BACKGROUND],
				       UINT64_MAX);
	return NULL;
}

struct flyd_qjob *flyd_queue_peek_at(const struct flyd_queue *q,
				     int allow_background, uint64_t now_ms)
{
	for (struct flyd_qjob *j = q->level[FLYD_PRIO_EXPLICIT].head;
	     j != NULL; j = j->next)
		if (j->not_before_ms <= now_ms)
			return j;
	if (!allow_background)
		return NULL;
	return first_startable(&q->level[FLYD_PRIO_BACKGROUND], now_ms);
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
	detach(q, j);
	(void)flyd_table_del(&q->records, &j->node);
	free(j);
}

static void clear_failed_one(void *arg, struct flyd_tnode *n)
{
	struct flyd_qjob *j = job_of(n);

	if (j->state == FLYD_Q_FAILED)
		flyd_queue_done(arg, j);
}

void flyd_queue_clear_failed(struct flyd_queue *q, const char *key)
{
	if (key != NULL) {
		struct flyd_qjob *j = flyd_queue_find(q, key);

		if (j != NULL && j->state == FLYD_Q_FAILED)
			flyd_queue_done(q, j);
		return;
	}
	flyd_table_foreach(&q->records, clear_failed_one, q);
}

struct flyd_qjob *flyd_queue_running(const struct flyd_queue *q)
{
	return q->running;
}

uint32_t flyd_queue_len(const struct flyd_queue *q)
{
	return q->nqueued;
}

struct each_ctx {
	void (*cb)(void *arg, struct flyd_qjob *j);
	void *arg;
};

static void each_record(void *arg, struct flyd_tnode *n)
{
	struct each_ctx *e = arg;

	e->cb(e->arg, job_of(n));
}

void flyd_queue_foreach_record(struct flyd_queue *q,
			       void (*cb)(void *arg, struct flyd_qjob *j),
			       void *arg)
{
	struct each_ctx e = {cb, arg};

	flyd_table_foreach(&q->records, each_record, &e);
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
