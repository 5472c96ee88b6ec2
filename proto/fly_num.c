/*
 * fly_num.c -- numbers printed exactly and without printf on the common
 * path (fly_num.h): integers digit by digit, doubles in the fewest of
 * 15, 16 or 17 significant digits that read back as themselves.  Used by
 * the decide fast path (fly_hot.c) and by fly_msg_print for the numbers
 * cJSON would print inexactly.
 *
 * Owns: nothing.  Thread: any.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fly_abi.h"
#include "fly_num.h"

#define EXACT_INT 9007199254740992.0 /* 2^53 */

/* Decimal digits of @p v into @p out (no NUL).  @return the length. */
int fly_num_fmt_i64(int64_t v, char *out)
{
	char t[24];
	uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
	int n = 0, k = 0;

	do {
		t[n++] = (char)('0' + u % 10);
		u /= 10;
	} while (u != 0);
	if (v < 0)
		out[k++] = '-';
	while (n > 0)
		out[k++] = t[--n];
	return k;
}

static const double pow10_exact[] = {
    1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* round(v * 10^k), exactly (half to even, as glibc's printf), for
 * 1e-5 <= v < 1e15 and v * 10^k < 10^17: v is mant * 2^-sh with mant
 * < 2^53, and mant * 10^k (< 2^127) is exact in 128 bits. */
static uint64_t scaled_round(double v, int k)
{
	int ex, sh;
	uint64_t mant = (uint64_t)ldexp(frexp(v, &ex), 53);
	unsigned __int128 n = mant, q, r, half;

	for (int i = 0; i < k; i++)
		n *= 10;
	sh = 53 - ex;
	if (sh <= 0)
		return (uint64_t)(n << -sh);
	q = n >> sh;
	r = n - (q << sh);
	half = (unsigned __int128)1 << (sh - 1);
	if (r > half || (r == half && (q & 1)))
		q++;
	return (uint64_t)q;
}

/* The decimal m * 10^-k, fixed notation, trailing zeros dropped. */
static int put_fixed(uint64_t m, int k, char out[32])
{
	char t[32];
	int n = fly_num_fmt_i64((int64_t)m, t), ip;

	while (n <= k) { /* leading zeros: 0.000123 */
		memmove(t + 1, t, (size_t)n++);
		t[0] = '0';
	}
	ip = n - k;
	while (k > 0 && t[ip + k - 1] == '0')
		k--;
	memcpy(out, t, (size_t)ip);
	n = ip;
	if (k > 0) {
		out[n++] = '.';
		memcpy(out + n, t + ip, (size_t)k);
		n += k;
	}
	out[n] = '\0';
	return n;
}

/* @p v (1e-5 <= v < 1e15, not integral) in fixed notation: with 15 or 16
 * significant digits when they read back as @p v, else with 17 (always
 * exact).  Digits come from scaled_round(), no printf.  The read-back
 * check needs no strtod: m < 2^53 and 10^k <= 1e22 are doubles, so
 * m / 10^k is the correctly rounded value of the decimal m e-k, as
 * strtod's is (a 16-digit m >= 2^53 is not checked: 17 digits then).
 * @return the length, or 0 (let snprintf do it). */
static int fmt_fixed(double v, char out[32])
{
	int e10 = 0, k;
	uint64_t q = 0;

	/* the decimal exponent from the table (no log10: libflyclient.a's
	 * users link without libm), maybe one off next to a power of ten:
	 * the loop below settles it (q has 17 digits) */
	if (v >= 1.0) {
		while (e10 < 21 && v >= pow10_exact[e10 + 1])
			e10++;
	} else {
		e10 = -1;
		while (e10 > -22 && v * pow10_exact[-e10] < 1.0)
			e10--;
	}
	for (int tries = 0;; tries++) {
		k = 16 - e10;
		if (k < 0 || k > 22 || tries > 2)
			return 0;
		q = scaled_round(v, k);
		if (q >= 100000000000000000ull)
			e10++;
		else if (q < 10000000000000000ull)
			e10--;
		else
			break;
	}
	for (int prec = 15; prec <= 16; prec++) {
		int kp = prec - 1 - e10;
		uint64_t m;

		if (kp < 0)
			continue;
		m = scaled_round(v, kp);
		if ((double)m < EXACT_INT && (double)m / pow10_exact[kp] == v)
			return put_fixed(m, kp, out);
	}
	return put_fixed(q, k, out);
}

int fly_num_fmt_double(double v, char out[32])
{
	int n;

	if (!isfinite(v))
		return FLY_E_PROTO;
	if (v == floor(v) && fabs(v) < EXACT_INT) {
		n = fly_num_fmt_i64((int64_t)v, out);
		out[n] = '\0';
		return n;
	}
	if (v >= 1e-5 && v < 1e15 && (n = fmt_fixed(v, out)) > 0)
		return n;
	for (int prec = 15; prec <= 17; prec++) {
		n = snprintf(out, 32, "%.*g", prec, v);
		if (prec == 17 || strtod(out, NULL) == v)
			return n;
	}
	return FLY_E_PROTO; /* not reached */
}

