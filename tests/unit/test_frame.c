/*
 * test_frame.c -- proto/fly_frame: header encoding, caps, and the
 * incremental decoder under fragmentation and coalescing.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "fly_abi.h"
#include "fly_frame.h"

/* Append one frame carrying @p s to buf at *n. */
static void put_frame(uint8_t *buf, size_t *n, const char *s)
{
	uint32_t len = (uint32_t)strlen(s);

	fly_frame_put_header(buf + *n, len);
	memcpy(buf + *n + FLY_FRAME_HDR, s, len);
	*n += FLY_FRAME_HDR + len;
}

static void test_header(void **state)
{
	uint8_t h[4];

	(void)state;
	fly_frame_put_header(h, 0x01020304u);
	assert_int_equal(h[0], 4);
	assert_int_equal(h[1], 3);
	assert_int_equal(h[2], 2);
	assert_int_equal(h[3], 1);
	assert_int_equal(fly_frame_get_header(h, 0xffffffffu), 0x01020304);
	assert_int_equal(fly_frame_get_header(h, 0x01020303u), FLY_E_TOOBIG);
	fly_frame_put_header(h, 0);
	assert_int_equal(fly_frame_get_header(h, 100), FLY_E_TOOBIG);
	fly_frame_put_header(h, 0xffffffffu);
	assert_int_equal(fly_frame_get_header(h, 0xffffffffu), 0xffffffffll);
	assert_int_equal(fly_frame_get_header(h, FLY_FRAME_CAP_DEFAULT),
			 FLY_E_TOOBIG);
	fly_frame_put_header(h, FLY_FRAME_CAP_DEFAULT);
	assert_int_equal(fly_frame_get_header(h, FLY_FRAME_CAP_DEFAULT),
			 FLY_FRAME_CAP_DEFAULT);
}

/* Feed @p buf split at every chunk size 1..n; expect @p want frames. */
static void feed_chunks(const uint8_t *buf, size_t n, const char **want,
			int nwant, size_t chunk)
{
	struct fly_frame_dec d;
	int got = 0;

	fly_frame_dec_init(&d, 1024);
	for (size_t off = 0; off < n; off += chunk) {
		size_t len = n - off < chunk ? n - off : chunk, used = 0;

		while (used < len) {
			uint8_t *f;
			uint32_t flen;
			int64_t c = fly_frame_dec_feed(&d, buf + off + used,
						       len - used, &f, &flen);

			assert_true(c > 0);
			used += (size_t)c;
			if (f) {
				assert_true(got < nwant);
				assert_int_equal(flen, strlen(want[got]));
				assert_memory_equal(f, want[got], flen);
				free(f);
				got++;
			}
		}
	}
	assert_int_equal(got, nwant);
	assert_false(fly_frame_dec_is_partial(&d));
	fly_frame_dec_fini(&d);
}

static void test_fragmentation(void **state)
{
	const char *msgs[] = {"{\"req\":\"hello\",\"version\":1}", "{}",
			      "{\"req\":\"status\"}"};
	uint8_t buf[256];
	size_t n = 0;

	(void)state;
	for (int i = 0; i < 3; i++)
		put_frame(buf, &n, msgs[i]);
	for (size_t chunk = 1; chunk <= n; chunk++)
		feed_chunks(buf, n, msgs, 3, chunk);
}

static void test_several_in_one_feed(void **state)
{
	const char *msgs[] = {"{\"a\":1}", "{\"b\":2}", "{\"c\":3}"};
	struct fly_frame_dec d;
	uint8_t buf[128], *f;
	uint32_t flen;
	size_t n = 0, off = 0;

	(void)state;
	for (int i = 0; i < 3; i++)
		put_frame(buf, &n, msgs[i]);
	fly_frame_dec_init(&d, 1024);
	for (int i = 0; i < 3; i++) {
		int64_t c =
		    fly_frame_dec_feed(&d, buf + off, n - off, &f, &flen);

		/* returns right after each frame */
		assert_int_equal(c, FLY_FRAME_HDR + strlen(msgs[i]));
		assert_non_null(f);
		assert_memory_equal(f, msgs[i], flen);
		free(f);
		off += (size_t)c;
	}
	assert_int_equal(off, n);
	assert_int_equal(fly_frame_dec_feed(&d, buf, 0, &f, &flen), 0);
	assert_null(f);
	fly_frame_dec_fini(&d);
}

/* The cap is checked on the header, so a rejected length allocates
 * nothing: the decoder must hold no payload buffer after the rejection
 * (a 2^32-1 malloc attempt would show as d.buf != NULL or -ENOMEM). */
static void test_cap_before_alloc(void **state)
{
	struct fly_frame_dec d;
	uint8_t h[4], *f;
	uint32_t flen;

	(void)state;
	fly_frame_dec_init(&d, 1000);
	fly_frame_put_header(h, 1001);
	assert_int_equal(fly_frame_dec_feed(&d, h, 4, &f, &flen), FLY_E_TOOBIG);
	assert_null(d.buf);
	assert_null(f);
	fly_frame_dec_fini(&d);

	fly_frame_dec_init(&d, 1000);
	fly_frame_put_header(h, 0);
	assert_int_equal(fly_frame_dec_feed(&d, h, 4, &f, &flen), FLY_E_TOOBIG);
	assert_null(d.buf);
	fly_frame_dec_fini(&d);

	/* 2^32-1 under the default cap: rejected, nothing allocated */
	fly_frame_dec_init(&d, FLY_FRAME_CAP_DEFAULT);
	fly_frame_put_header(h, 0xffffffffu);
	for (int i = 0; i < 3; i++)
		assert_int_equal(fly_frame_dec_feed(&d, h + i, 1, &f, &flen),
				 1);
	assert_true(fly_frame_dec_is_partial(&d));
	assert_int_equal(fly_frame_dec_feed(&d, h + 3, 1, &f, &flen),
			 FLY_E_TOOBIG);
	assert_null(d.buf);
	fly_frame_dec_fini(&d);

	/* exactly the cap is fine */
	fly_frame_dec_init(&d, 8);
	fly_frame_put_header(h, 8);
	assert_int_equal(fly_frame_dec_feed(&d, h, 4, &f, &flen), 4);
	assert_true(fly_frame_dec_is_partial(&d));
	assert_int_equal(
	    fly_frame_dec_feed(&d, (const uint8_t *)"{\"a\":12}", 8, &f, &flen),
	    8);
	assert_non_null(f);
	assert_int_equal(flen, 8);
	free(f);
	fly_frame_dec_fini(&d);
}

static void test_fini_partial(void **state)
{
	struct fly_frame_dec d;
	uint8_t buf[32], *f;
	uint32_t flen;
	size_t n = 0;

	(void)state;
	put_frame(buf, &n, "{\"x\":true}");
	fly_frame_dec_init(&d, 64);
	assert_int_equal(fly_frame_dec_feed(&d, buf, n - 2, &f, &flen),
			 (int64_t)n - 2);
	assert_null(f);
	assert_true(fly_frame_dec_is_partial(&d));
	fly_frame_dec_fini(&d); /* frees the partial payload */
	assert_null(d.buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_header),
	    cmocka_unit_test(test_fragmentation),
	    cmocka_unit_test(test_several_in_one_feed),
	    cmocka_unit_test(test_cap_before_alloc),
	    cmocka_unit_test(test_fini_partial),
	};

	return cmocka_run_group_tests_name("frame", tests, NULL, NULL);
}
