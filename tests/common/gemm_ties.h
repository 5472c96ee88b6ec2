/*
 * gemm_ties.h -- a bf16 NT GEMM whose every output is known bit for bit,
 * for checking how a GEMM rounds its fp32 sums to bf16 (header-only: the
 * CPU unit tests and the GPU test link differently).
 *
 * C[i][j] = A[i][0] + B[j][1] + B[j][2]: A[i][0] = +-(1 + (i % 128) / 128)
 * (B[j][0] = 1), A[i][1] = A[i][2] = 1, every other element 0.  B[j][1]
 * is 0, a quarter, a half or three quarters of a bf16 ulp at [1, 2)
 * (2^-7) and B[j][2] is 0 or +-2^-20, so the halves are exact ties and
 * the others fall just beside a tie.  Every partial sum needs at most 21
 * significant bits: the fp32 sum is exact in any order and with any
 * split of K, and the bf16 output is its round-to-nearest-even, which the
 * ties tell apart from truncation and from rounding half away from zero
 * (the mantissa of A[i][0] is odd for every other i).
 */
#ifndef FLY_TESTS_GEMM_TIES_H
#define FLY_TESTS_GEMM_TIES_H
#include <stdint.h>
#include <string.h>

static inline uint16_t gemm_ties_bf16(float f) /* exact values only */
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return (uint16_t)(u >> 16);
}

/* Round-to-nearest-even of @p f to bf16 (finite @p f). */
static inline uint16_t gemm_ties_rne(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline float gemm_ties_a0(int64_t i)
{
	float v = 1.0f + (float)(i % 128) / 128.0f;

	return (i / 128) % 2 ? -v : v;
}

static inline float gemm_ties_b1(int64_t j)
{
	static const float q[4] = { 0.0f, 0x1p-9f, 0x1p-8f, 0x3p-9f };

	return q[j % 4];
}

static inline float gemm_ties_b2(int64_t j)
{
	static const float t[3] = { 0.0f, 0x1p-20f, -0x1p-20f };

	return t[(j / 4) % 3];
}

/* Fill @p a [m, k] and @p b [n, k] (bf16 bits, k >= 3). */
static inline void gemm_ties_fill(uint16_t *a, uint16_t *b, int64_t m,
				  int64_t n, int64_t k)
{
	memset(a, 0, (size_t)(m * k) * sizeof(*a));
	memset(b, 0, (size_t)(n * k) * sizeof(*b));
	for (int64_t i = 0; i < m; i++) {
		a[i * k] = gemm_ties_bf16(gemm_ties_a0(i));
		a[i * k + 1] = gemm_ties_bf16(1.0f);
		a[i * k + 2] = gemm_ties_bf16(1.0f);
	}
	for (int64_t j = 0; j < n; j++) {
		b[j * k] = gemm_ties_bf16(1.0f);
		b[j * k + 1] = gemm_ties_bf16(gemm_ties_b1(j));
		b[j * k + 2] = gemm_ties_bf16(gemm_ties_b2(j));
	}
}

/* The expected output bits of element (i, j). */
static inline uint16_t gemm_ties_want(int64_t i, int64_t j)
{
	float s = gemm_ties_a0(i) + gemm_ties_b1(j); /* exact */

	return gemm_ties_rne(s + gemm_ties_b2(j)); /* exact, then rounded */
}

/* How many of @p c [m, n] differ from the expected bits; the first one
 * into @p *fi, @p *fj (left alone when none). */
static inline int64_t gemm_ties_bad(const uint16_t *c, int64_t m, int64_t n,
				    int64_t *fi, int64_t *fj)
{
	int64_t bad = 0;

	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < n; j++)
			if (c[i * n + j] != gemm_ties_want(i, j) && bad++ == 0) {
				*fi = i;
				*fj = j;
			}
	return bad;
}
#endif /* FLY_TESTS_GEMM_TIES_H */
