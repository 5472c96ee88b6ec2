/*
 * test_key.c -- proto/fly_key: canonical keys, validation errors,
 * bucketing and the key hash.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "fly_key.h"

/* One canonical key per op (and some flag combinations). */
static const char *const good_keys[] = {
    "gemm/bf16/NT/m=4096,n=6144,k=4096",
    "gemm/fp32/TT/m=1,n=1,k=1/bias+scale",
    "gemm/fp16/NN/m=7,n=8,k=9/scale",
    "grouped_gemm/fp16/TN/g=8,m=1024,n=512,k=256",
    "scaled_gemm/fp8_e4m3/NT/m=128,n=256,k=512",
    "scaled_gemm/fp8_e4m3/NT/m=1,n=1,k=33",
    "scaled_gemm/mxfp4/NT/m=128,n=256,k=512",
    "rmsnorm/fp16/m=8192,n=4097/residual",
    "rmsnorm/bf16/m=1,n=4096",
    "topk/fp32/m=4096,n=1024,k=8/det",
    "attention/bf16/b=2,sq=1024,skv=4096,hq=32,hkv=8,d=128/causal",
    "attention/fp16/b=1,sq=1,skv=1,hq=1,hkv=1,d=64",
    "attention/bf16/b=1,sq=17,skv=1000,hq=8,hkv=1,d=256/causal",
    "mqa_logits/fp8_e4m3/sq=64,skv=8192,h=64,d=128",
    "mqa_logits/fp8_e4m3/sq=61,skv=1024,h=64,d=128/clean+kvfnuz",
    "mqa_logits/fp8_e4m3fnuz/sq=4096,skv=4096,h=64,d=128/clean",
    "scaled_gemm/fp8_e4m3fnuz/NT/m=32,n=4096,k=4096/bias",
    /* issue 22: exact shapes, off their bucket's representative */
    "gemm/fp32/NT/m=100,n=64,k=64/exact",
    "gemm/bf16/NT/m=1500,n=64,k=64/bias+scale+exact",
    "rmsnorm/fp16/m=3,n=4097/residual+exact",
    "attention/bf16/b=1,sq=17,skv=1000,hq=8,hkv=1,d=256/causal+exact",
    "mqa_logits/fp8_e4m3/sq=61,skv=1024,h=64,d=128/clean+kvfnuz+exact",
};

static void test_roundtrip(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(good_keys) / sizeof(good_keys[0]); i++) {
		struct fly_problem p;
		char buf[FLY_KEY_MAX];
		const char *k = good_keys[i];
		int rc = fly_key_parse(k, strlen(k), &p);

		if (rc != 0)
			fail_msg("parse %s: %d", k, rc);
		assert_int_equal(fly_problem_validate(&p), 0);
		rc = fly_key_format(&p, buf, sizeof(buf));
		assert_int_equal(rc, (int)strlen(k));
		assert_string_equal(buf, k);
	}
}

/* Issue 19: fly_decide's table path formats the bucketed problem of a
 * valid one without validating it again (fly__key_format_valid), so
 * bucketing must keep every valid problem valid, at every value of the
 * bucketed dim, overflow's edge included. */
static void test_bucket_keeps_valid(void **state)
{
	static const int64_t vals[] = {1, 2, 3, 17, 33, 100, 1000, 1025,
				       4097, (int64_t)1 << 40,
				       INT64_MAX / 2 + 1};
	int checked = 0;

	(void)state;
	for (size_t i = 0; i < sizeof(good_keys) / sizeof(good_keys[0]); i++) {
		const char *k = good_keys[i];
		struct fly_bucket_policy pol;
		struct fly_problem p;

		assert_int_equal(fly_key_parse(k, strlen(k), &p), 0);
		fly_bucket_policy_default(p.op, &pol);
		for (size_t v = 0; v < sizeof(vals) / sizeof(vals[0]); v++) {
			struct fly_problem q = p;
			char a[FLY_KEY_MAX], b[FLY_KEY_MAX];
			int na, nb;

			if (pol.dim >= 0)
				q.dims[pol.dim] = vals[v];
			if (fly_problem_validate(&q) != 0)
				continue;
			fly_problem_bucket(&q, &pol);
			if (fly_problem_validate(&q) != 0)
				fail_msg("%s with dim %d = %lld: bucketed, it "
					 "does not validate", k, pol.dim,
					 (long long)vals[v]);
			na = fly_key_format(&q, a, sizeof(a));
			nb = fly__key_format_valid(&q, b, sizeof(b));
			assert_true(na > 0);
			assert_int_equal(na, nb);
			assert_string_equal(a, b);
			checked++;
		}
	}
	assert_true(checked > 100);
}

static void test_every_op_roundtrips(void **state)
{
	static const uint32_t dt[FLY_OP_COUNT] = {
	    0,		 FLY_DT_FP16, FLY_DT_BF16, FLY_DT_FP8_E5M2,
	    FLY_DT_FP32, FLY_DT_BF16, FLY_DT_FP16, FLY_DT_FP8_E4M3};

	(void)state;
	for (uint32_t op = 1; op < FLY_OP_COUNT; op++) {
		struct fly_problem p = {0}, q;
		char buf[FLY_KEY_MAX];
		int n;

		p.op = op;
		p.dtype = dt[op];
		p.layout = fly_op_has_layout(op) ? FLY_LAYOUT_TN : 0;
		for (int i = 0; i < fly_op_ndims(op); i++)
			p.dims[i] = 3 + i * 1000;
		if (op == FLY_OP_ATTENTION) { /* hkv | hq, d in 64/128/256 */
			p.dims[3] = 2 * p.dims[4];
			p.dims[5] = 128;
		}
		n = fly_key_format(&p, buf, sizeof(buf));
		assert_true(n > 0);
		assert_int_equal(fly_key_parse(buf, (size_t)n, &q), 0);
		assert_memory_equal(&p, &q, sizeof(p));
		assert_string_equal(fly_op_dim_names(op)[0],
				    fly_op_dim_names(op)[0]);
		assert_null(fly_op_dim_names(op)[fly_op_ndims(op)]);
	}
}

struct bad {
	const char *key;
	int err;
};

static const struct bad bad_keys[] = {
    /* unknown op */
    {"conv/fp16/m=1,n=1", FLY_E_BADOP},
    {"GEMM/bf16/NT/m=1,n=1,k=1", FLY_E_BADOP},
    /* dtype unknown or not allowed for the op */
    {"gemm/fp64/NT/m=1,n=1,k=1", FLY_E_BADDTYPE},
    {"gemm/fp8_e4m3/NT/m=1,n=1,k=1", FLY_E_BADDTYPE},
    {"scaled_gemm/bf16/NT/m=1,n=1,k=1", FLY_E_BADDTYPE},
    /* issue 15: an MX format with k not a multiple of 32; fp8 takes any k */
    {"scaled_gemm/mxfp8/NT/m=1,n=1,k=33", FLY_E_BADDIM},
    {"scaled_gemm/mxfp4/NT/m=8,n=8,k=100", FLY_E_BADDIM},
    {"attention/fp32/b=1,sq=1,skv=1,hq=1,hkv=1,d=64", FLY_E_BADDTYPE},
    /* issue 16: head_dim 64/128/256 only; hkv divides hq */
    {"attention/bf16/b=1,sq=1,skv=1,hq=1,hkv=1,d=1", FLY_E_BADDIM},
    {"attention/bf16/b=1,sq=1,skv=1,hq=1,hkv=1,d=96", FLY_E_BADDIM},
    {"attention/bf16/b=1,sq=1,skv=1,hq=8,hkv=3,d=128", FLY_E_BADDIM},
    {"attention/bf16/b=1,sq=1,skv=1,hq=4,hkv=8,d=128", FLY_E_BADDIM},
    {"attention/bf16/b=1,sq=0,skv=1,hq=4,hkv=4,d=128", FLY_E_BADDIM},
    {"attention/bf16/b=1,sq=1,skv=0,hq=4,hkv=4,d=128", FLY_E_BADDIM},
    {"mqa_logits/fp16/sq=1,skv=1,h=1,d=1", FLY_E_BADDTYPE},
    {"gemm/fp8_e4m3fnuz/NT/m=1,n=1,k=1", FLY_E_BADDTYPE},
    /* dims: zero, negative, missing, extra, out of order */
    {"gemm/bf16/NT/m=0,n=1,k=1", FLY_E_BADDIM},
    {"gemm/bf16/NT/m=-4,n=1,k=1", FLY_E_BADDIM},
    {"gemm/bf16/NT/m=1,n=1", FLY_E_BADDIM},
    {"gemm/bf16/NT/m=1,n=1,k=1,g=2", FLY_E_BADDIM},
    {"gemm/bf16/NT/n=1,m=1,k=1", FLY_E_BADDIM},
    {"rmsnorm/fp16", FLY_E_BADDIM},
    /* product overflow, and a dim that overflows by itself */
    {"gemm/bf16/NT/m=4294967296,n=4294967296,k=2", FLY_E_OVERFLOW},
    {"rmsnorm/fp16/m=99999999999999999999,n=1", FLY_E_OVERFLOW},
    /* too long */
    {"attention/bf16/b=1,sq=1,skv=1,hq=1,hkv=1,d=1/causal"
     "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
     FLY_E_KEYLEN},
    /* syntax */
    {"", FLY_E_BADKEY},
    {"gemm/bf16/NT/m=01,n=1,k=1", FLY_E_BADKEY},
    {"gemm/bf16/NT/m=+1,n=1,k=1", FLY_E_BADKEY},
    {"gemm/bf16/NT/m=1,n=1,k=1/", FLY_E_BADKEY},
    {"gemm/bf16/NT/m=1,n=1,k=1/scale+bias", FLY_E_BADKEY},
    {"gemm/bf16/NT/m=1,n=1,k=1/bias+bias", FLY_E_BADKEY},
    {"gemm/bf16/NT/m=1,n=1,k=1/fast", FLY_E_BADKEY},
    {"gemm/bf16/nt/m=1,n=1,k=1", FLY_E_BADKEY},
    {"gemm/bf16/m=1,n=1,k=1", FLY_E_BADKEY},
    {"gemm/bf16/NT/m=1,n=1,k=1/bias/x", FLY_E_BADKEY},
    {"gemm/bf16/NT/m=1, n=1,k=1", FLY_E_BADKEY},
    {"gemm/bf16/NT/m=1,n=1,k=1x", FLY_E_BADKEY},
    {"gemm/bf16/NT/m1,n=1,k=1", FLY_E_BADKEY},
    {"gemm/bf16/NT/m=,n=1,k=1", FLY_E_BADKEY},
    /* flag not allowed for the op */
    {"rmsnorm/fp16/m=1,n=1/causal", FLY_E_INVALID},
    {"gemm/bf16/NT/m=1,n=1,k=1/clean", FLY_E_INVALID},
    {"attention/bf16/b=1,sq=1,skv=1,hq=1,hkv=1,d=64/kvfnuz", FLY_E_INVALID},
    {"topk/fp16/m=1,n=1,k=1/residual", FLY_E_INVALID},
};

/* Keys made from the canonical ones by random edits (a character
 * changed, cut, doubled, or a digit run lengthened): whatever parses is
 * canonical -- it formats back to exactly the text parsed -- and what is
 * refused is refused with one of fly_key_parse's documented errors.
 * Seeded: a failure prints the key. */
static void test_mutated_keys(void **state)
{
	static const char cs[] = "/=,+mnkgbdhsqvT0123456789-_fpxNT";
	uint64_t r = 0x2545f4914f6cdd1dull;
	int nok = 0;

	(void)state;
	for (int it = 0; it < 200000; it++) {
		const char *k0 = good_keys[it % (sizeof(good_keys) /
						 sizeof(good_keys[0]))];
		char k[FLY_KEY_MAX + 32], out[FLY_KEY_MAX];
		size_t len = strlen(k0);
		struct fly_problem p;
		int rc;

		memcpy(k, k0, len + 1);
		for (int e = 1 + (int)(r % 3); e > 0; e--) {
			size_t at;

			r ^= r << 13;
			r ^= r >> 7;
			r ^= r << 17;
			at = len ? (size_t)(r >> 8) % len : 0;
			switch ((r >> 40) % 4) {
			case 0:
				if (len)
					k[at] = cs[(r >> 20) % (sizeof(cs) - 1)];
				break;
			case 1:
				memmove(k + at, k + at + 1, len - at);
				len -= len > 0;
				break;
			case 2:
				if (len + 1 < sizeof(k) - 1) {
					memmove(k + at + 1, k + at,
						len - at + 1);
					len++;
				}
				break;
			default:
				if (len + 10 < sizeof(k) - 1) {
					memmove(k + at + 9, k + at,
						len - at + 1);
					memset(k + at, '9', 9);
					len += 9;
				}
				break;
			}
		}
		rc = fly_key_parse(k, len, &p);
		if (rc != 0) {
			if (rc != FLY_E_KEYLEN && rc != FLY_E_BADKEY &&
			    rc != FLY_E_BADOP && rc != FLY_E_BADDTYPE &&
			    rc != FLY_E_BADDIM && rc != FLY_E_OVERFLOW &&
			    rc != FLY_E_INVALID)
				fail_msg("%s: rc %d", k, rc);
			continue;
		}
		nok++;
		if (fly_key_format(&p, out, sizeof(out)) < 0 ||
		    strcmp(out, k) != 0)
			fail_msg("parsed %s, formats as %s", k, out);
	}
	/* The edits leave some keys valid (a dimension changed). */
	assert_true(nok > 1000);
}

static void test_rejections(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(bad_keys) / sizeof(bad_keys[0]); i++) {
		struct fly_problem p;
		const char *k = bad_keys[i].key;
		int rc = fly_key_parse(k, strlen(k), &p);

		if (rc != bad_keys[i].err)
			fail_msg("%s: got %d want %d", k, rc, bad_keys[i].err);
	}
}

static void test_distinct_errors(void **state)
{
	int e[] = {FLY_E_BADOP,	   FLY_E_BADDTYPE, FLY_E_BADDIM,
		   FLY_E_OVERFLOW, FLY_E_KEYLEN,   FLY_E_BADKEY};

	(void)state;
	for (size_t i = 0; i < 6; i++)
		for (size_t j = i + 1; j < 6; j++)
			assert_int_not_equal(e[i], e[j]);
}

static void test_validate(void **state)
{
	struct fly_problem p = {
	    FLY_OP_GEMM, FLY_DT_BF16, FLY_LAYOUT_NT, 0, {16, 16, 16}};
	struct fly_problem q;
	char buf[FLY_KEY_MAX];

	(void)state;
	assert_int_equal(fly_problem_validate(&p), 0);
	q = p;
	q.op = 99;
	assert_int_equal(fly_problem_validate(&q), FLY_E_BADOP);
	q = p;
	q.dtype = FLY_DT_MXFP4;
	assert_int_equal(fly_problem_validate(&q), FLY_E_BADDTYPE);
	q = p;
	q.dims[3] = 5; /* unused dim set */
	assert_int_equal(fly_problem_validate(&q), FLY_E_BADDIM);
	q = p;
	q.dims[0] = INT64_MAX;
	assert_int_equal(fly_problem_validate(&q), FLY_E_OVERFLOW);
	q = p;
	q.layout = FLY_LAYOUT_NONE;
	assert_int_equal(fly_problem_validate(&q), FLY_E_INVALID);
	q = p;
	q.flags = FLY_F_CAUSAL;
	assert_int_equal(fly_problem_validate(&q), FLY_E_INVALID);
	/* format: cap too small is KEYLEN, never a truncated key */
	assert_int_equal(fly_key_format(&p, buf, 10), FLY_E_KEYLEN);
	assert_int_equal(fly_key_format(&p, buf, sizeof(buf)),
			 (int)strlen("gemm/bf16/NT/m=16,n=16,k=16"));
}

static void test_names(void **state)
{
	(void)state;
	assert_string_equal(fly_op_name(FLY_OP_MQA_LOGITS), "mqa_logits");
	assert_null(fly_op_name(0));
	assert_null(fly_op_name(FLY_OP_COUNT));
	assert_null(fly_dtype_name(FLY_DT_COUNT));
	assert_string_equal(fly_layout_name(FLY_LAYOUT_TT), "TT");
	assert_int_equal(fly_dtype_parse("mxfp8", 5), FLY_DT_MXFP8);
	assert_int_equal(fly_dtype_parse("mxfp", 4), 0);
	assert_int_equal(fly_op_parse("topk", 4), FLY_OP_TOPK);
	assert_int_equal(fly_layout_parse("NN", 2), FLY_LAYOUT_NN);
	assert_int_equal(fly_op_ndims(FLY_OP_ATTENTION), 6);
	assert_int_equal(fly_op_ndims(0), 0);
	assert_null(fly_op_dim_names(0));
}

static int64_t bucket_m(uint32_t op, int64_t m)
{
	struct fly_problem p = {op, FLY_DT_FP16, 0, 0, {0}};
	struct fly_bucket_policy pol;

	if (fly_op_has_layout(op))
		p.layout = FLY_LAYOUT_NT;
	for (int i = 0; i < fly_op_ndims(op); i++)
		p.dims[i] = 64;
	if (op == FLY_OP_SCALED_GEMM || op == FLY_OP_MQA_LOGITS)
		p.dtype = FLY_DT_FP8_E4M3;
	fly_bucket_policy_default(op, &pol);
	p.dims[pol.dim] = m;
	assert_int_equal(fly_problem_validate(&p), 0);
	fly_problem_bucket(&p, &pol);
	return p.dims[pol.dim];
}

static void test_bucket_default(void **state)
{
	struct fly_bucket_policy pol;

	(void)state;
	assert_int_equal(bucket_m(FLY_OP_GEMM, 17), 32);
	assert_int_equal(bucket_m(FLY_OP_GEMM, 1000), 1024);
	assert_int_equal(bucket_m(FLY_OP_GEMM, 1024), 1024);
	assert_int_equal(bucket_m(FLY_OP_GEMM, 1025), 2048);
	assert_int_equal(bucket_m(FLY_OP_RMSNORM, 4097), 5120);
	assert_int_equal(bucket_m(FLY_OP_TOPK, 1), 1);
	assert_int_equal(bucket_m(FLY_OP_ATTENTION, 3), 4);
	assert_int_equal(bucket_m(FLY_OP_MQA_LOGITS, 3000), 3072);
	assert_int_equal(bucket_m(FLY_OP_GROUPED_GEMM, 100), 128);
	fly_bucket_policy_default(FLY_OP_ATTENTION, &pol);
	assert_string_equal(fly_op_dim_names(FLY_OP_ATTENTION)[pol.dim], "sq");
	fly_bucket_policy_default(FLY_OP_MQA_LOGITS, &pol);
	assert_string_equal(fly_op_dim_names(FLY_OP_MQA_LOGITS)[pol.dim], "sq");
	fly_bucket_policy_default(FLY_OP_GROUPED_GEMM, &pol);
	assert_string_equal(fly_op_dim_names(FLY_OP_GROUPED_GEMM)[pol.dim],
			    "m");
	fly_bucket_policy_default(FLY_OP_GEMM, &pol);
	assert_string_equal(fly_op_dim_names(FLY_OP_GEMM)[pol.dim], "m");
	/* only the bucketed dim changes */
	{
		struct fly_problem p = {
		    FLY_OP_GEMM, FLY_DT_BF16, FLY_LAYOUT_NT, 0, {17, 17, 17}};

		fly_problem_bucket(&p, &pol);
		assert_int_equal(p.dims[0], 32);
		assert_int_equal(p.dims[1], 17);
		assert_int_equal(p.dims[2], 17);
	}
}

static int64_t floor_of(uint32_t op, int64_t m)
{
	struct fly_problem p = { .op = op, .dtype = FLY_DT_FP32 }, lo;
	struct fly_bucket_policy pol;

	p.dims[0] = m;
	p.dims[1] = 4096;
	fly_bucket_policy_default(op, &pol);
	fly_problem_bucket_floor(&p, &pol, &lo);
	assert_int_equal(lo.dims[1], 4096);
	return lo.dims[0];
}

static void test_bucket_floor(void **state)
{
	(void)state;
	assert_int_equal(floor_of(FLY_OP_RMSNORM, 1), 1);
	assert_int_equal(floor_of(FLY_OP_RMSNORM, 2), 2);
	assert_int_equal(floor_of(FLY_OP_RMSNORM, 32), 17);
	assert_int_equal(floor_of(FLY_OP_RMSNORM, 1024), 513);
	assert_int_equal(floor_of(FLY_OP_RMSNORM, 2048), 1025);
	assert_int_equal(floor_of(FLY_OP_RMSNORM, 5120), 4097);
	/* every member of a bucket maps back to it */
	for (int64_t m = 1; m <= 5000; m += 7) {
		struct fly_problem p = { .op = FLY_OP_RMSNORM,
					 .dtype = FLY_DT_FP32 }, lo;
		struct fly_bucket_policy pol;

		p.dims[0] = m;
		p.dims[1] = 64;
		fly_bucket_policy_default(FLY_OP_RMSNORM, &pol);
		fly_problem_bucket(&p, &pol);
		fly_problem_bucket_floor(&p, &pol, &lo);
		assert_true(lo.dims[0] <= m);
		fly_problem_bucket(&lo, &pol);
		assert_int_equal(lo.dims[0], p.dims[0]);
	}
}

/* Found by tests/fuzz/fuzz_key: a bucket that would overflow the dims'
 * product saturates at the exact value (sq = 10 here), and the floor then
 * named sq = 9, which buckets to itself, not to the key it was the floor
 * of.  A saturated value is its own floor. */
static void test_issue_fuzz_floor_saturated(void **state)
{
	static const char key[] =
	    "attention/bf16/b=2,sq=10,skv=9460,hq=486100000000,hkv=1,d=64/causal";
	struct fly_problem p, lo;
	struct fly_bucket_policy pol;

	(void)state;
	assert_int_equal(fly_key_parse(key, sizeof(key) - 1, &p), 0);
	fly_bucket_policy_default(p.op, &pol);
	fly_problem_bucket(&p, &pol);
	assert_int_equal(p.dims[1], 10); /* saturated: 16 would overflow */
	fly_problem_bucket_floor(&p, &pol, &lo);
	assert_int_equal(lo.dims[1], 10);
	fly_problem_bucket(&lo, &pol);
	assert_memory_equal(&lo, &p, sizeof(p));
}

static void test_bucket_policy(void **state)
{
	struct fly_bucket_policy pol = {1, 64, 100};
	struct fly_problem p = {FLY_OP_RMSNORM, FLY_DT_FP32, 0, 0, {5, 65}};
	struct fly_problem big = {
	    FLY_OP_RMSNORM, FLY_DT_FP32, 0, 0, {INT64_MAX / 2 + 1, 1}};
	struct fly_bucket_policy none = {-1, 1024, 1024};
	struct fly_bucket_policy m = {0, 1024, 1024};

	(void)state;
	fly_problem_bucket(&p, &pol); /* n: 65 > 64 -> multiple of 100 */
	assert_int_equal(p.dims[0], 5);
	assert_int_equal(p.dims[1], 100);
	p.dims[1] = 33;
	fly_problem_bucket(&p, &pol);
	assert_int_equal(p.dims[1], 64);
	fly_problem_bucket(&p, &none);
	assert_int_equal(p.dims[1], 64);
	/* never shrinks, never overflows: saturates at the original */
	fly_problem_bucket(&big, &m);
	assert_int_equal(big.dims[0], INT64_MAX / 2 + 1);
	big.dims[0] = INT64_MAX - 5;
	fly_problem_bucket(&big, &m);
	assert_int_equal(big.dims[0], INT64_MAX - 5);
	/* product overflow after rounding: keep the original */
	{
		struct fly_problem q = {FLY_OP_RMSNORM,
					FLY_DT_FP32,
					0,
					0,
					{1025, INT64_MAX / 1100}};

		assert_int_equal(fly_problem_validate(&q), 0);
		fly_problem_bucket(&q, &m);
		assert_int_equal(q.dims[0], 1025);
	}
}

static void test_hash(void **state)
{
	(void)state;
	/* FNV-1a 64 reference values */
	assert_true(fly_key_hash("", 0) == 0xcbf29ce484222325ull);
	assert_true(fly_key_hash("a", 1) == 0xaf63dc4c8601ec8cull);
	assert_true(fly_key_hash("foobar", 6) == 0x85944171f73967e8ull);
	assert_true(fly_key_hash(good_keys[0], strlen(good_keys[0])) ==
		    fly_key_hash(good_keys[0], strlen(good_keys[0])));
	assert_true(fly_key_hash(good_keys[0], strlen(good_keys[0])) !=
		    fly_key_hash(good_keys[1], strlen(good_keys[1])));
}

/* issue 18 item 18: a refused key is explained, naming the part that is
 * missing or unknown and what is allowed there; never a bare code. */
static void test_issue_18_key_explain(void **state)
{
	static const struct {
		const char *key;
		const char *want[3]; /* substrings of the explanation */
	} cases[] = {
		{ "gemm/bf16", { "layout is missing", "NT, NN, TN, TT",
				 "gemm/fp32/NT/m=64,n=64,k=64" } },
		{ "gemm/bf16/m=1,n=1,k=1", { "'m=1,n=1,k=1' is not a layout",
					      "NT, NN, TN, TT", NULL } },
		{ "GEMM/bf16/NT/m=1,n=1,k=1", { "'GEMM' is not an op",
						"gemm, grouped_gemm, scaled_gemm,"
						" rmsnorm, topk, attention, "
						"mqa_logits", NULL } },
		{ "gemm", { "dtype is missing", "fp32, fp16, bf16", NULL } },
		{ "gemm/fp8_e4m3/NT/m=1,n=1,k=1",
		  { "'fp8_e4m3' is not a dtype gemm takes",
		    "fp32, fp16, bf16", NULL } },
		{ "rmsnorm/fp32", { "dims are missing", "m=N,n=N", NULL } },
		{ "rmsnorm/fp32/n=64,m=8", { "not rmsnorm's dims", "m=N,n=N",
					     "in this order" } },
		{ "rmsnorm/fp32/m=8,n=64/det", { "'det' is not a set of flags",
						 "residual", NULL } },
		{ "rmsnorm/fp32/m=8,n=64/residual/x",
		  { "unexpected text after the key: '/x'", NULL, NULL } },
		{ "", { "empty", NULL, NULL } },
		/* issue 15: MX scales blocks of 32 along k */
		{ "scaled_gemm/mxfp8/NT/m=4,n=4,k=48",
		  { "k=48 is not a multiple of 32", "mxfp8, mxfp4", NULL } },
		{ "scaled_gemm/mxfp4/NT/m=4,n=4,k=20",
		  { "k=20 is not a multiple of 32", NULL, NULL } },
		/* issue 16: attention's head_dim and GQA ratio */
		{ "attention/bf16/b=1,sq=1,skv=1,hq=1,hkv=1,d=96",
		  { "d=96 is not a head_dim", "64, 128 or 256", NULL } },
		{ "attention/bf16/b=1,sq=1,skv=1,hq=8,hkv=3,d=64",
		  { "hkv=3 does not divide hq=8", "GQA", NULL } },
	};
	char why[512];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct fly_problem p;
		int rc = fly_key_explain(cases[i].key, why, sizeof(why));

		assert_true(rc < 0);
		assert_int_equal(rc, fly_key_parse(cases[i].key,
						   strlen(cases[i].key), &p));
		assert_null(strstr(why, "-100"));
		for (int j = 0; j < 3 && cases[i].want[j]; j++)
			if (strstr(why, cases[i].want[j]) == NULL)
				fail_msg("%s: '%s' lacks '%s'", cases[i].key,
					 why, cases[i].want[j]);
	}
	for (size_t i = 0; i < sizeof(good_keys) / sizeof(good_keys[0]); i++) {
		assert_int_equal(fly_key_explain(good_keys[i], why,
						 sizeof(why)), 0);
		assert_string_equal(why, "");
	}
	for (size_t i = 0; i < sizeof(bad_keys) / sizeof(bad_keys[0]); i++) {
		const char *k = bad_keys[i].key;

		assert_int_equal(fly_key_explain(k, why, sizeof(why)),
				 bad_keys[i].err);
		assert_true(why[0] != '\0');
	}
	/* truncated to the buffer, still terminated */
	assert_true(fly_key_explain("x/y", why, 8) < 0);
	assert_true(strlen(why) < 8);
}

/* Issue 22: the exact-shape flag.  A key names the exact shape only off
 * its bucket's representative; it is never re-bucketed, its floor is
 * itself, and it never equals a bucket key. */
static void test_issue_22_exact_key(void **state)
{
	static const struct {
		const char *key;
		int err;
	} bad[] = {
		/* on the representative: the bucket key is exact for it */
		{ "gemm/fp32/NT/m=128,n=64,k=64/exact", FLY_E_INVALID },
		{ "gemm/fp32/NT/m=1,n=64,k=64/exact", FLY_E_INVALID },
		{ "gemm/fp32/NT/m=2048,n=64,k=64/exact", FLY_E_INVALID },
		/* spellings that are not canonical */
		{ "gemm/fp32/NT/m=100,n=64,k=64/exact+bias", FLY_E_BADKEY },
		{ "gemm/fp32/NT/m=100,n=64,k=64/exact+exact", FLY_E_BADKEY },
		{ "gemm/fp32/NT/m=100,n=64,k=64/Exact", FLY_E_BADKEY },
		{ "gemm/fp32/NT/m=100,n=64,k=64/exact/", FLY_E_BADKEY },
		{ "gemm/fp32/NT/m=100,n=64,k=64//exact", FLY_E_BADKEY },
		{ "gemm/fp32/NT/m=100,n=64,k=64/exact/exact", FLY_E_BADKEY },
	};
	struct fly_bucket_policy pol;
	struct fly_problem p = { .op = FLY_OP_GEMM, .dtype = FLY_DT_FP32,
				 .layout = FLY_LAYOUT_NT,
				 .dims = { 100, 64, 64 } }, e, b, lo;
	char key[FLY_KEY_MAX], bkey[FLY_KEY_MAX], why[512];

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = fly_key_parse(bad[i].key, strlen(bad[i].key), &e);

		if (rc != bad[i].err)
			fail_msg("%s: %d, want %d", bad[i].key, rc,
				 bad[i].err);
		assert_true(fly_key_explain(bad[i].key, why, sizeof(why)) < 0);
		assert_true(why[0] != '\0');
	}
	assert_int_equal(fly_key_explain(bad[0].key, why, sizeof(why)),
			 FLY_E_INVALID);
	assert_non_null(strstr(why, "m=128 is its bucket's own value"));
	/* a flag list names exact for every op */
	assert_true(fly_key_explain("rmsnorm/fp32/m=8,n=64/det", why,
				    sizeof(why)) < 0);
	assert_non_null(strstr(why, "residual, exact"));

	/* the exact problem of m=100, and its round trip */
	assert_int_equal(fly_problem_exact(&p, &e), 1);
	assert_int_equal(e.flags, FLY_F_EXACT);
	assert_int_equal(fly_key_format(&e, key, sizeof(key)), 34);
	assert_string_equal(key, "gemm/fp32/NT/m=100,n=64,k=64/exact");
	memset(&b, 0xa5, sizeof(b));
	assert_int_equal(fly_key_parse(key, strlen(key), &b), 0);
	assert_memory_equal(&b, &e, sizeof(b));
	/* never re-bucketed; its floor is itself */
	fly_bucket_policy_default(FLY_OP_GEMM, &pol);
	b = e;
	fly_problem_bucket(&b, &pol);
	assert_memory_equal(&b, &e, sizeof(b));
	fly_problem_bucket_floor(&e, &pol, &lo);
	assert_memory_equal(&lo, &e, sizeof(lo));
	/* the bucket key is another key */
	b = p;
	fly_problem_bucket(&b, &pol);
	assert_int_equal(fly_key_format(&b, bkey, sizeof(bkey)), 28);
	assert_string_equal(bkey, "gemm/fp32/NT/m=128,n=64,k=64");
	/* the launch shape drops the flag */
	fly_problem_shape(&e);
	assert_memory_equal(&e, &p, sizeof(p));
	/* on the representative: no exact key (the bucket key is it) */
	p.dims[0] = 128;
	assert_int_equal(fly_problem_exact(&p, &e), 0);
	assert_memory_equal(&e, &p, sizeof(p));
	p.flags = FLY_F_EXACT;
	assert_int_equal(fly_problem_validate(&p), FLY_E_INVALID);
	/* every M of 1..3000: an exact key iff M is not its bucket's */
	for (int64_t m = 1; m <= 3000; m++) {
		struct fly_problem q = { .op = FLY_OP_GEMM,
					 .dtype = FLY_DT_FP32,
					 .layout = FLY_LAYOUT_NT,
					 .dims = { m, 64, 64 } }, bq = q;

		fly_problem_bucket(&bq, &pol);
		assert_int_equal(fly_problem_exact(&q, &e),
				 bq.dims[0] != m);
		if (bq.dims[0] != m) {
			assert_int_equal(fly_key_format(&e, key, sizeof(key)) > 0,
					 1);
			assert_int_equal(fly_key_parse(key, strlen(key), &b),
					 0);
			assert_memory_equal(&b, &e, sizeof(b));
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_roundtrip),
	    cmocka_unit_test(test_every_op_roundtrips),
	    cmocka_unit_test(test_bucket_keeps_valid),
	    cmocka_unit_test(test_mutated_keys),
	    cmocka_unit_test(test_rejections),
	    cmocka_unit_test(test_distinct_errors),
	    cmocka_unit_test(test_validate),
	    cmocka_unit_test(test_names),
	    cmocka_unit_test(test_bucket_default),
	    cmocka_unit_test(test_bucket_floor),
	    cmocka_unit_test(test_issue_fuzz_floor_saturated),
		cmocka_unit_test(test_bucket_policy),
	    cmocka_unit_test(test_hash),
	    cmocka_unit_test(test_issue_18_key_explain),
	    cmocka_unit_test(test_issue_22_exact_key),
	};

	return cmocka_run_group_tests_name("key", tests, NULL, NULL);
}
