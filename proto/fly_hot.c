/*
 * fly_hot.c -- the decide fast path: request scanner and fixed-layout
 * response writer (fly_hot.h).
 *
 * Owns: nothing.  Thread: any.
 *
 * Why: under perf, 39% of the daemon's time answering decide was JSON,
 * 24.6% cJSON_PrintUnformatted alone, much of it "%1.15g" with an sscanf
 * round trip per number (issue 19).  Here integers are written by hand
 * and the one double, median_us, by fly_hot_fmt_double().
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fly_err.h"
#include "fly_hot.h"
#include "fly_msg.h"

#define EXACT_INT 9007199254740992.0 /* 2^53 */

/* ---------------------------------------------------------------- scan */

static size_t skip_ws(const uint8_t *b, size_t len, size_t i)
{
	while (i < len && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' ||
			   b[i] == '\r'))
		i++;
	return i;
}

/* A string of printable ASCII without escapes at b[i] == '"'.
 * @return the index after its closing quote, or 0 when not so. */
static size_t scan_str(const uint8_t *b, size_t len, size_t i,
		       const char **s, size_t *n)
{
	size_t j;

	if (i >= len || b[i] != '"')
		return 0;
	for (j = i + 1; j < len && b[j] != '"'; j++)
		if (b[j] < 0x20 || b[j] > 0x7e || b[j] == '\\')
			return 0;
	if (j >= len)
		return 0;
	*s = (const char *)b + i + 1;
	*n = j - i - 1;
	return j + 1;
}

/* An integer -?(0|[1-9][0-9]*) of at most 15 digits, not followed by a
 * fraction or an exponent.  @return the index after it, or 0. */
static size_t scan_int(const uint8_t *b, size_t len, size_t i, int64_t *out)
{
	int neg = 0, nd = 0;
	int64_t v = 0;

	if (i < len && b[i] == '-') {
		neg = 1;
		i++;
	}
	if (i >= len || b[i] < '0' || b[i] > '9')
		return 0;
	if (b[i] == '0' && i + 1 < len && b[i + 1] >= '0' && b[i + 1] <= '9')
		return 0;
	for (; i < len && b[i] >= '0' && b[i] <= '9'; i++) {
		if (++nd > 15)
			return 0;
		v = v * 10 + (b[i] - '0');
	}
	if (i < len && (b[i] == '.' || b[i] == 'e' || b[i] == 'E'))
		return 0;
	*out = neg ? -v : v;
	return i;
}

/* One member "name":value at b[i]; @p seen has bit 1 req, 2 key, 4 id.
 * @return the index after the value, or 0 when not the common shape. */
static size_t scan_member(const uint8_t *b, size_t len, size_t i,
			  unsigned *seen, struct fly_hot_req *r)
{
	const char *name, *s;
	size_t n, sn;

	i = scan_str(b, len, i, &name, &n);
	if (i == 0)
		return 0;
	i = skip_ws(b, len, i);
	if (i >= len || b[i] != ':')
		return 0;
	i = skip_ws(b, len, i + 1);
	if (n == 3 && memcmp(name, "req", 3) == 0 && !(*seen & 1)) {
		*seen |= 1;
		i = scan_str(b, len, i, &s, &sn);
		return i != 0 && sn == 6 && memcmp(s, "decide", 6) == 0 ? i : 0;
	}
	if (n == 3 && memcmp(name, "key", 3) == 0 && !(*seen & 2)) {
		*seen |= 2;
		return scan_str(b, len, i, &r->key, &r->keylen);
	}
	if (n == 2 && memcmp(name, "id", 2) == 0 && !(*seen & 4)) {
		*seen |= 4;
		r->has_id = 1;
		return scan_int(b, len, i, &r->id);
	}
	return 0;
}

int fly_hot_scan_decide(const uint8_t *buf, size_t len,
			struct fly_hot_req *out)
{
	struct fly_hot_req r = {0};
	unsigned seen = 0;
	size_t i = skip_ws(buf, len, 0);

	if (i >= len || buf[i] != '{')
		return 1;
	for (;;) {
		i = skip_ws(buf, len, i + 1);
		i = scan_member(buf, len, i, &seen, &r);
		if (i == 0)
			return 1;
		i = skip_ws(buf, len, i);
		if (i < len && buf[i] == ',')
			continue;
		if (i < len && buf[i] == '}')
			break;
		return 1;
	}
	if (skip_ws(buf, len, i + 1) != len || (seen & 3) != 3)
		return 1;
	*out = r;
	return 0;
}

/* ---------------------------------------------------------------- write */

/* Decimal digits of @p v into @p out (no NUL).  @return the length. */
static int fmt_i64(int64_t v, char *out)
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
	int n = fmt_i64((int64_t)m, t), ip;

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
	int e10 = (int)floor(log10(v)), k;
	uint64_t q = 0;

	/* log10 may be one off next to a power of ten: q has 17 digits */
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

int fly_hot_fmt_double(double v, char out[32])
{
	int n;

	if (!isfinite(v))
		return FLY_E_PROTO;
	if (v == floor(v) && fabs(v) < EXACT_INT) {
		n = fmt_i64((int64_t)v, out);
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

/* A bounded writer: every put checks the room left. */
struct wbuf {
	char *p;
	size_t len;
	size_t cap;
	int err;
};

static void put(struct wbuf *w, const char *s, size_t n)
{
	if (w->err || w->cap - w->len < n) {
		w->err = 1;
		return;
	}
	memcpy(w->p + w->len, s, n);
	w->len += n;
}

#define PUT_LIT(w, lit) put((w), (lit), sizeof(lit) - 1)

/* A JSON string as cJSON prints it: '"' and '\' escaped, \b \f \n \r
 * \t by name, other bytes below 0x20 as \u00XX, every other byte as is. */
static void put_str(struct wbuf *w, const char *s)
{
	static const char hex[] = "0123456789abcdef";

	PUT_LIT(w, "\"");
	while (*s != '\0') {
		const char *run = s;
		unsigned char c;

		while ((unsigned char)*s >= 0x20 && *s != '"' && *s != '\\')
			s++;
		put(w, run, (size_t)(s - run));
		c = (unsigned char)*s;
		if (c == '\0')
			break;
		s++;
		switch (c) {
		case '"': PUT_LIT(w, "\\\""); break;
		case '\\': PUT_LIT(w, "\\\\"); break;
		case '\b': PUT_LIT(w, "\\b"); break;
		case '\f': PUT_LIT(w, "\\f"); break;
		case '\n': PUT_LIT(w, "\\n"); break;
		case '\r': PUT_LIT(w, "\\r"); break;
		case '\t': PUT_LIT(w, "\\t"); break;
		default: {
			char e[6] = {'\\', 'u', '0', '0', hex[c >> 4],
				     hex[c & 15]};

			put(w, e, 6);
		}
		}
	}
	PUT_LIT(w, "\"");
}

static void put_i64(struct wbuf *w, int64_t v)
{
	char t[24];

	put(w, t, (size_t)fmt_i64(v, t));
}

/* Whether the generic path would carry every number exactly as we do. */
static int is_usual(const struct fly_decision *d, int has_id, int64_t id)
{
	uint32_t np = d->nparams < FLY_PARAMS_MAX ? d->nparams
						  : FLY_PARAMS_MAX;

	if (fly_status_name(d->status) == NULL || !isfinite(d->median_us))
		return 0;
	for (uint32_t i = 0; i < np; i++)
		if (fabs((double)d->params[i]) >= EXACT_INT)
			return 0;
	return !has_id || fabs((double)id) < EXACT_INT;
}

int fly_hot_decide_write(char *out, size_t cap, const char *key,
			 const struct fly_decision *d, int has_id, int64_t id)
{
	struct wbuf w = {out, 0, cap, 0};
	uint32_t np = d->nparams < FLY_PARAMS_MAX ? d->nparams
						  : FLY_PARAMS_MAX;
	char num[32];
	int n;

	if (!is_usual(d, has_id, id))
		return FLY_E_PROTO;
	PUT_LIT(&w, "{\"ok\":true,\"key\":");
	put_str(&w, key);
	PUT_LIT(&w, ",\"decision\":{\"status\":");
	put_str(&w, fly_status_name(d->status));
	if (d->provisional)
		PUT_LIT(&w, ",\"provisional\":true,\"variant\":");
	else
		PUT_LIT(&w, ",\"provisional\":false,\"variant\":");
	put_str(&w, d->variant);
	PUT_LIT(&w, ",\"params\":[");
	for (uint32_t i = 0; i < np; i++) {
		if (i > 0)
			PUT_LIT(&w, ",");
		put_i64(&w, d->params[i]);
	}
	PUT_LIT(&w, "],\"median_us\":");
	n = fly_hot_fmt_double(d->median_us, num);
	put(&w, num, (size_t)n);
	PUT_LIT(&w, "}");
	if (has_id) {
		PUT_LIT(&w, ",\"id\":");
		put_i64(&w, id);
	}
	PUT_LIT(&w, "}");
	return w.err ? -ENOSPC : (int)w.len;
}
