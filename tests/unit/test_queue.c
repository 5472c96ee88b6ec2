/*
 * test_queue.c -- the tuning job queue: single-flight, cap, priority
 * order, promotion, re-queue after a fault, FAILED markers.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "queue.h"

static void key_n(char *buf, size_t cap, int i)
{
	snprintf(buf, cap, "rmsnorm/fp32/m=%d,n=128", i + 1);
}

static void test_single_flight(void **state)
{
	struct flyd_queue *q;
	struct flyd_qjob *j1, *j2;

	(void)state;
	assert_int_equal(flyd_queue_new(8, &q), 0);
	assert_int_equal(flyd_queue_push(q, "a", 0, 0, &j1), 0);
	for (int i = 0; i < 256; i++) {
		assert_int_equal(flyd_queue_push(q, "a", 0, 0, &j2), 1);
		assert_ptr_equal(j1, j2);
	}
	assert_int_equal(flyd_queue_len(q), 1);
	/* Still single-flight while running. */
	flyd_queue_start(q, j1);
	assert_int_equal(flyd_queue_len(q), 0);
	assert_ptr_equal(flyd_queue_running(q), j1);
	assert_int_equal(flyd_queue_push(q, "a", 1, 0, &j2), 1);
	assert_ptr_equal(j2, j1);
	assert_int_equal(j1->state, FLYD_Q_RUNNING);
	assert_int_equal(flyd_queue_len(q), 0);
	flyd_queue_done(q, j1);
	assert_null(flyd_queue_running(q));
	assert_null(flyd_queue_find(q, "a"));
	assert_int_equal(flyd_queue_push(q, "a", 0, 0, &j2), 0);
	flyd_queue_free(q);
}

/* A key asked again while its cancelled run is being stopped is a new
 * job (0), marked to run once that run's end comes back; asking once
 * more joins it (1). */
static void test_rerun_after_cancel(void **state)
{
	struct flyd_queue *q;
	struct flyd_qjob *j1, *j2;

	(void)state;
	assert_int_equal(flyd_queue_new(8, &q), 0);
	assert_int_equal(flyd_queue_push(q, "a", 0, 0, &j1), 0);
	flyd_queue_start(q, j1);
	j1->cancelled = 1;
	j1->faults = 2;
	assert_int_equal(flyd_queue_push(q, "a", 1, 1, &j2), 0);
	assert_ptr_equal(j2, j1);
	assert_int_equal(j1->rerun, 1);
	assert_int_equal(j1->priority, 1);
	assert_int_equal(j1->force, 1);
	assert_int_equal(j1->faults, 0);
	assert_int_equal(flyd_queue_push(q, "a", 0, 0, &j2), 1);
	assert_int_equal(flyd_queue_len(q), 0);
	/* what the scheduler does when the stopped run's end comes back */
	j1->cancelled = 0;
	j1->rerun = 0;
	flyd_queue_requeue_front(q, j1);
	assert_null(flyd_queue_running(q));
	assert_int_equal(flyd_queue_len(q), 1);
	assert_ptr_equal(flyd_queue_peek(q, 1), j1);
	flyd_queue_free(q);
}

static void test_cap_busy(void **state)
{
	struct flyd_queue *q;
	char key[64];
	struct flyd_qjob *j;

	(void)state;
	assert_int_equal(flyd_queue_new(4, &q), 0);
	for (int i = 0; i < 4; i++) {
		key_n(key, sizeof(key), i);
		assert_int_equal(flyd_queue_push(q, key, 1, 0, NULL), 0);
	}
	for (int i = 4; i < 10; i++) {
		key_n(key, sizeof(key), i);
		assert_int_equal(flyd_queue_push(q, key, 1, 0, &j),
				 FLY_E_BUSY);
		assert_null(j);
		assert_null(flyd_queue_find(q, key));
	}
	assert_int_equal(flyd_queue_len(q), 4);
	/* A key already queued is not refused at the cap. */
	key_n(key, sizeof(key), 2);
	assert_int_equal(flyd_queue_push(q, key, 0, 0, NULL), 1);
	/* The running job does not count against the cap. */
	j = flyd_queue_peek(q, 1);
	flyd_queue_start(q, j);
	key_n(key, sizeof(key), 7);
	assert_int_equal(flyd_queue_push(q, key, 0, 0, NULL), 0);
	assert_int_equal(flyd_queue_push(q, "other", 0, 0, NULL), FLY_E_BUSY);
	/* A re-queue after a fault is never refused. */
	flyd_queue_requeue_front(q, j);
	assert_int_equal(flyd_queue_len(q), 5);
	flyd_queue_set_cap(q, 0);
	assert_int_equal(flyd_queue_push(q, "other", 0, 0, NULL), 0);
	flyd_queue_free(q);
}

static void test_priority_order(void **state)
{
	struct flyd_queue *q;
	struct flyd_qjob *j;
	const char *expect[] = {"e1", "e2", "b1", "b2", "b3"};

	(void)state;
	assert_int_equal(flyd_queue_new(0, &q), 0);
	assert_int_equal(flyd_queue_push(q, "b1", 0, 0, NULL), 0);
	assert_int_equal(flyd_queue_push(q, "e1", 1, 0, NULL), 0);
	assert_int_equal(flyd_queue_push(q, "b2", 0, 0, NULL), 0);
	assert_int_equal(flyd_queue_push(q, "e2", 1, 0, NULL), 0);
	assert_int_equal(flyd_queue_push(q, "b3", 0, 0, NULL), 0);
	/* Background jobs are invisible when not allowed. */
	j = flyd_queue_peek(q, 0);
	assert_string_equal(j->key, "e1");
	for (size_t i = 0; i < 5; i++) {
		j = flyd_queue_peek(q, 1);
		assert_non_null(j);
		assert_string_equal(j->key, expect[i]);
		flyd_queue_start(q, j);
		if (i == 1)
			assert_null(flyd_queue_peek(q, 0));
		flyd_queue_done(q, j);
	}
	assert_null(flyd_queue_peek(q, 1));
	flyd_queue_free(q);
}

/* Issue 22: an exact-shape key in the background level starts after
 * every bucket key that may start (its shape is served by its bucket
 * meanwhile); an explicit tune of one is explicit like any other. */
static void test_issue_22_exact_after_buckets(void **state)
{
	static const char *const x1 = "gemm/fp32/NT/m=100,n=64,k=64/exact";
	static const char *const x2 = "rmsnorm/fp32/m=3,n=64/residual+exact";
	static const char *const b1 = "gemm/fp32/NT/m=128,n=64,k=64";
	static const char *const b2 = "rmsnorm/fp32/m=4,n=64/residual";
	const char *expect[] = {x2, b1, b2, x1};
	struct flyd_queue *q;
	struct flyd_qjob *j;

	(void)state;
	assert_int_equal(flyd_queue_new(0, &q), 0);
	assert_int_equal(flyd_queue_push(q, x1, 0, 0, &j), 0);
	assert_int_equal(j->exact, 1);
	assert_int_equal(flyd_queue_push(q, b1, 0, 0, &j), 0);
	assert_int_equal(j->exact, 0);
	assert_int_equal(flyd_queue_push(q, x2, 1, 0, NULL), 0);
	assert_int_equal(flyd_queue_push(q, b2, 0, 0, NULL), 0);
	for (size_t i = 0; i < 4; i++) {
		j = flyd_queue_peek_at(q, 1, 0);
		assert_non_null(j);
		assert_string_equal(j->key, expect[i]);
		assert_ptr_equal(flyd_queue_peek(q, 1), j);
		flyd_queue_start(q, j);
		flyd_queue_done(q, j);
	}
	/* a bucket key waiting out a backoff does not hold an exact one */
	assert_int_equal(flyd_queue_push(q, "gemm/fp32/NT/m=256,n=64,k=64", 0,
					 0, &j), 0);
	j->not_before_ms = 50;
	assert_int_equal(flyd_queue_push(q, x1, 0, 0, NULL), 0);
	assert_string_equal(flyd_queue_peek_at(q, 1, 10)->key, x1);
	assert_string_equal(flyd_queue_peek_at(q, 1, 50)->key,
			    "gemm/fp32/NT/m=256,n=64,k=64");
	flyd_queue_free(q);
}

static void test_promotion(void **state)
{
	struct flyd_queue *q;
	struct flyd_qjob *j;

	(void)state;
	assert_int_equal(flyd_queue_new(0, &q), 0);
	assert_int_equal(flyd_queue_push(q, "b1", 0, 0, NULL), 0);
	assert_int_equal(flyd_queue_push(q, "b2", 0, 0, NULL), 0);
	assert_int_equal(flyd_queue_push(q, "e1", 1, 0, NULL), 0);
	/* Promote b2: it goes behind e1, ahead of b1. */
	assert_int_equal(flyd_queue_push(q, "b2", 1, 1, &j), 1);
	assert_int_equal(j->priority, FLYD_PRIO_EXPLICIT);
	assert_int_equal(j->force, 1);
	assert_string_equal(flyd_queue_peek(q, 0)->key, "e1");
	flyd_queue_start(q, flyd_queue_peek(q, 0));
	flyd_queue_done(q, flyd_queue_running(q));
	assert_string_equal(flyd_queue_peek(q, 0)->key, "b2");
	/* A background push never demotes. */
	assert_int_equal(flyd_queue_push(q, "b2", 0, 0, &j), 1);
	assert_int_equal(j->priority, FLYD_PRIO_EXPLICIT);
	assert_int_equal(j->force, 1);
	assert_int_equal(flyd_queue_len(q), 2);
	flyd_queue_free(q);
}

static void test_requeue_front_and_failed(void **state)
{
	struct flyd_queue *q;
	struct flyd_qjob *j, *k;

	(void)state;
	assert_int_equal(flyd_queue_new(0, &q), 0);
	assert_int_equal(flyd_queue_push(q, "x", 0, 0, &j), 0);
	assert_int_equal(flyd_queue_push(q, "y", 0, 0, NULL), 0);
	flyd_queue_start(q, j);
	j->faults++;
	flyd_queue_requeue_front(q, j);
	k = flyd_queue_peek(q, 1);
	assert_ptr_equal(k, j);
	assert_int_equal(k->faults, 1);
	flyd_queue_start(q, k);
	flyd_queue_fail(q, k);
	assert_null(flyd_queue_running(q));
	assert_int_equal(flyd_queue_len(q), 1);
	/* Pushes are refused for a failed key until forced (issue 18). */
	assert_int_equal(flyd_queue_push(q, "x", 0, 0, &j), 2);
	assert_null(j);
	assert_int_equal(flyd_queue_push(q, "x", 1, 0, &j), 2);
	assert_null(j);
	assert_int_equal(flyd_queue_push(q, "x", 1, 1, &j), 0);
	assert_int_equal(j->state, FLYD_Q_QUEUED);
	assert_int_equal(j->faults, 0);
	assert_string_equal(flyd_queue_peek(q, 1)->key, "x");
	flyd_queue_start(q, j);
	flyd_queue_fail(q, j);
	flyd_queue_clear_failed(q, NULL);
	assert_null(flyd_queue_find(q, "x"));
	assert_int_equal(flyd_queue_push(q, "x", 0, 0, NULL), 0);
	flyd_queue_free(q);
}

/* issue 18: a faulted job goes to the back of its level and is not
 * started before its backoff; the others go first. */
static void test_issue_18_requeue_back_backoff(void **state)
{
	struct flyd_queue *q;
	struct flyd_qjob *a, *b;

	(void)state;
	assert_int_equal(flyd_queue_new(0, &q), 0);
	assert_int_equal(flyd_queue_push(q, "a", 1, 0, &a), 0);
	assert_int_equal(flyd_queue_push(q, "b", 1, 0, &b), 0);
	assert_ptr_equal(flyd_queue_peek_at(q, 1, 100), a);
	flyd_queue_start(q, a);
	flyd_queue_requeue_back(q, a, 1000);
	assert_int_equal(flyd_queue_len(q), 2);
	/* b first; a not before its time, even alone. */
	assert_ptr_equal(flyd_queue_peek_at(q, 1, 100), b);
	flyd_queue_start(q, b);
	flyd_queue_done(q, b);
	assert_null(flyd_queue_peek_at(q, 1, 999));
	assert_ptr_equal(flyd_queue_peek_at(q, 1, 1000), a);
	flyd_queue_free(q);
}

static void count_cb(void *arg, struct flyd_qjob *j)
{
	(void)j;
	(*(int *)arg)++;
}

static void test_many_keys(void **state)
{
	struct flyd_queue *q;
	char key[64];
	int n = 0;

	(void)state;
	assert_int_equal(flyd_queue_new(0, &q), 0);
	for (int i = 0; i < 5000; i++) {
		key_n(key, sizeof(key), i);
		assert_int_equal(flyd_queue_push(q, key, i & 1, 0, NULL), 0);
	}
	for (int i = 0; i < 5000; i++) {
		key_n(key, sizeof(key), i);
		assert_non_null(flyd_queue_find(q, key));
	}
	assert_int_equal(flyd_queue_push(q, "k", 0, 0, NULL), 0);
	flyd_queue_foreach(q, count_cb, &n);
	assert_int_equal(n, 5001);
	assert_int_equal(flyd_queue_len(q), 5001);
	flyd_queue_free(q);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_issue_18_requeue_back_backoff),
		cmocka_unit_test(test_single_flight),
		cmocka_unit_test(test_rerun_after_cancel),
		cmocka_unit_test(test_cap_busy),
		cmocka_unit_test(test_priority_order),
		cmocka_unit_test(test_promotion),
		cmocka_unit_test(test_issue_22_exact_after_buckets),
		cmocka_unit_test(test_requeue_front_and_failed),
		cmocka_unit_test(test_many_keys),
	};

	return cmocka_run_group_tests_name("queue", tests, NULL, NULL);
}
