/*
 * test_reserve.c -- daemon/reserve.c: a job's excess over what its
 * budget governs, FLYD_RESERVE_HEADROOM times the largest of the last
 * FLYD_RESERVE_JOBS kept off the next budget, capped at
 * FLYD_RESERVE_MAX_SHARE of it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "reserve.h"

#define H FLYD_RESERVE_HEADROOM

/* wall - setup - tune, plus the measurements' overrun */
static void excess_parts(void **state)
{
	(void)state;
	assert_float_equal(flyd_reserve_excess(1.006, 0.071, 0.933, 0.0),
			   0.002, 1e-12);
	assert_float_equal(flyd_reserve_excess(1.006, 0.071, 0.933, 0.004),
			   0.006, 1e-12);
	/* a wall shorter than the worker's own times (clock skew): the tail
	 * is 0, the overrun still counts */
	assert_float_equal(flyd_reserve_excess(0.5, 0.1, 0.6, 0.003), 0.003,
			   1e-12);
	assert_float_equal(flyd_reserve_excess(NAN, 0.1, 0.2, NAN), 0.0, 0);
	assert_float_equal(flyd_reserve_excess(0.3, -1.0, 0.2, -0.5), 0.1,
			   1e-12);
}

/* 1.5 x: the first long MQA key, budgeted by the short keys' largest
 * excess (2.2 ms), left 2.7 ms itself, and its answer came 0.8 ms past
 * 1.0 s on the H100: the reserve it needed was 2.2 + 0.8 ms */
static void headroom(void **state)
{
	struct flyd_reserve rs;

	(void)state;
	assert_float_equal(H, 1.5, 0);
	memset(&rs, 0, sizeof(rs));
	flyd_reserve_note(&rs, 0.0022);
	assert_float_equal(flyd_reserve_s(&rs, 1.0), 0.0033, 1e-12);
	assert_true(flyd_reserve_s(&rs, 1.0) >= 0.0022 + 0.0008);
}

static void empty_is_zero(void **state)
{
	struct flyd_reserve rs;

	(void)state;
	memset(&rs, 0, sizeof(rs));
	assert_float_equal(flyd_reserve_s(&rs, 1.0), 0.0, 0);
}

/* the largest of the last FLYD_RESERVE_JOBS, with its headroom: an old
 * large one ages out */
static void largest_of_last(void **state)
{
	struct flyd_reserve rs;

	(void)state;
	memset(&rs, 0, sizeof(rs));
	flyd_reserve_note(&rs, 0.006);
	flyd_reserve_note(&rs, 0.002);
	assert_float_equal(flyd_reserve_s(&rs, 1.0), H * 0.006, 1e-12);
	for (int i = 0; i < FLYD_RESERVE_JOBS - 2; i++)
		flyd_reserve_note(&rs, 0.001);
	assert_float_equal(flyd_reserve_s(&rs, 1.0), H * 0.006, 1e-12);
	flyd_reserve_note(&rs, 0.001); /* the 0.006 is the 9th back now */
	assert_float_equal(flyd_reserve_s(&rs, 1.0), H * 0.002, 1e-12);
	flyd_reserve_note(&rs, 0.001);
	assert_float_equal(flyd_reserve_s(&rs, 1.0), H * 0.001, 1e-12);
	flyd_reserve_note(&rs, NAN);
	flyd_reserve_note(&rs, -3.0);
	assert_float_equal(flyd_reserve_s(&rs, 1.0), H * 0.001, 1e-12);
}

/* one stalled commit never takes more than the cap off a budget */
static void capped(void **state)
{
	struct flyd_reserve rs;

	(void)state;
	memset(&rs, 0, sizeof(rs));
	flyd_reserve_note(&rs, 0.4);
	assert_float_equal(flyd_reserve_s(&rs, 1.0),
			   FLYD_RESERVE_MAX_SHARE * 1.0, 1e-12);
	assert_float_equal(flyd_reserve_s(&rs, 1.5),
			   FLYD_RESERVE_MAX_SHARE * 1.5, 1e-12);
	assert_float_equal(flyd_reserve_s(&rs, 0.0), 0.0, 0);
	assert_float_equal(flyd_reserve_s(&rs, -1.0), 0.0, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(excess_parts),
		cmocka_unit_test(headroom),
		cmocka_unit_test(empty_is_zero),
		cmocka_unit_test(largest_of_last),
		cmocka_unit_test(capped),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
