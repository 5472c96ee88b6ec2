/*
 * fly_hot.c -- the decide fast path: request scanner and fixed-layout
 * response writer (fly_hot.h).
 *
 * Owns: nothing.  Thread: any.
 *
 * Why: under perf, 39% of the daemon's time answering decide was JSON,
 * 24.6% cJSON_PrintUnformatted alone, much of it "%1.15g" with an sscanf
 * round trip per number (issue 19).  Here integers are written by hand
 * and the one double, median_us, by fly_num_fmt_double().
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fly_err.h"
#include "fly_hot.h"
#include "fly_msg.h"
#include "fly_num.h"

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

	put(w, t, (size_t)fly_num_fmt_i64(v, t));
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
	n = fly_num_fmt_double(d->median_us, num);
	put(&w, num, (size_t)n);
	PUT_LIT(&w, "}");
	if (has_id) {
		PUT_LIT(&w, ",\"id\":");
		put_i64(&w, id);
	}
	PUT_LIT(&w, "}");
	return w.err ? -ENOSPC : (int)w.len;
}
