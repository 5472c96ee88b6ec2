/*
 * jreq.c -- JSON request helpers for integration tests (see jreq.h).
 * Thread: the test's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cmocka.h>

#include "daemon.h"
#include "jreq.h"

uint64_t fly_test_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

cJSON *fly_test_req(int fd, const char *json)
{
	char *resp = NULL;
	cJSON *o;
	int rc = fly_test_request(fd, json, &resp, fly_test_timeout(10000));

	if (rc != 0)
		fprintf(stderr, "request %s: rc %d\n", json, rc);
	assert_int_equal(rc, 0);
	o = cJSON_Parse(resp);
	assert_non_null(o);
	free(resp);
	return o;
}

int fly_test_is_ok(const cJSON *o)
{
	return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "ok"));
}
