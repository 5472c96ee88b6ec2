/*
 * fuzz_key.c -- libFuzzer harness: shape-key parsing, formatting and
 * bucketing (proto/fly_key.c).
 *
 * Checks the key's invariant (fly_key.c): whatever parses is valid and
 * formats back to exactly the bytes parsed; bucketing a valid problem
 * gives a valid problem whose key parses, is stable (bucketing it again
 * changes nothing) and whose floor is no larger than it and buckets back
 * to it; the hash of the text is a pure function of it; a shape has an
 * exact key (issue 22) iff bucketing moves it, and that key round-trips,
 * is never its bucket's key, and the suffix test fly_key_is_exact agrees
 * with the parse.
 */
#include <string.h>

#include "fly_abi.h"
#include "fly_key.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fly_problem p, q, b, f;
	struct fly_bucket_policy pol;
	char buf[FLY_KEY_MAX];
	int n;

	if (fly_key_parse((const char *)data, size, &p) != 0)
		return 0;
	FUZZ_CHECK(fly_problem_validate(&p) == 0);
	n = fly_key_format(&p, buf, sizeof(buf));
	FUZZ_CHECK(n > 0 && (size_t)n == size);
	FUZZ_CHECK(memcmp(buf, data, size) == 0);
	FUZZ_CHECK(fly_key_hash(buf, (size_t)n) ==
		   fly_key_hash((const char *)data, size));

	fly_bucket_policy_default(p.op, &pol);
	b = p;
	fly_problem_bucket(&b, &pol);
	FUZZ_CHECK(fly_problem_validate(&b) == 0);
	n = fly_key_format(&b, buf, sizeof(buf));
	FUZZ_CHECK(n > 0);
	FUZZ_CHECK(fly_key_parse(buf, (size_t)n, &q) == 0);
	FUZZ_CHECK(memcmp(&q, &b, sizeof(q)) == 0);
	q = b;
	fly_problem_bucket(&q, &pol);
	FUZZ_CHECK(memcmp(&q, &b, sizeof(q)) == 0);
	fly_problem_bucket_floor(&b, &pol, &f);
	for (int i = 0; i < FLY_DIMS_MAX; i++)
		FUZZ_CHECK(f.dims[i] <= b.dims[i]);
	FUZZ_CHECK(fly_problem_validate(&f) == 0);
	fly_problem_bucket(&f, &pol);
	FUZZ_CHECK(memcmp(&f, &b, sizeof(f)) == 0);

	/* issue 22: exact keys.  The suffix test agrees with the parse; a
	 * shape has an exact key iff bucketing its shape moves it, and that
	 * key round-trips and never equals its bucket's key. */
	FUZZ_CHECK(fly_key_is_exact((const char *)data, size) ==
		   ((p.flags & FLY_F_EXACT) != 0));
	q = p;
	fly_problem_shape(&q);
	b = q;
	fly_problem_bucket(&b, &pol);
	if (fly_problem_exact(&q, &f) == 1) {
		char xk[FLY_KEY_MAX];

		FUZZ_CHECK(memcmp(&b, &q, sizeof(b)) != 0);
		FUZZ_CHECK(f.flags == (q.flags | FLY_F_EXACT));
		n = fly_key_format(&f, xk, sizeof(xk));
		FUZZ_CHECK(n > 0 || n == FLY_E_KEYLEN);
		if (n > 0) {
			FUZZ_CHECK(fly_key_parse(xk, (size_t)n, &q) == 0);
			FUZZ_CHECK(memcmp(&q, &f, sizeof(q)) == 0);
			FUZZ_CHECK(fly_key_is_exact(xk, (size_t)n));
			FUZZ_CHECK(fly_key_format(&b, buf, sizeof(buf)) > 0);
			FUZZ_CHECK(strcmp(buf, xk) != 0);
		}
	} else {
		FUZZ_CHECK(memcmp(&b, &q, sizeof(b)) == 0);
		FUZZ_CHECK(!(p.flags & FLY_F_EXACT));
	}
	return 0;
}
