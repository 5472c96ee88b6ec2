/*
 * jreq.h -- JSON request helpers shared by the integration tests (over the
 * harness's raw framed round trip, tests/common/daemon.h).  They fail the
 * running CMocka test on a transport error.
 */
#ifndef FLY_TEST_JREQ_H
#define FLY_TEST_JREQ_H

#include <stdint.h>

#include <cjson/cJSON.h>

/* Monotonic milliseconds. */
uint64_t fly_test_now_ms(void);
/* One request on @p fd, its response parsed.  Caller owns result; free
 * with cJSON_Delete().  A transport error or unparsable reply fails the
 * test. */
cJSON *fly_test_req(int fd, const char *json);
/* Whether a response says "ok": true. */
int fly_test_is_ok(const cJSON *o);

#endif /* FLY_TEST_JREQ_H */
