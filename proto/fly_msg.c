/*
 * fly_msg.c -- strict JSON parsing of frames, error names, the request
 * table (expanded from fly_msgs.def), decision <-> JSON and typed field
 * helpers.
 *
 * Owns: nothing beyond the cJSON trees it returns.  Thread: any.
 *
 * Strictness is layered: a pre-scan over the raw bytes rejects what
 * cJSON would accept or would recurse into (invalid UTF-8, NUL bytes,
 * control characters in strings, \u0000, unpaired surrogates, non-JSON
 * number spellings, nesting deeper than FLY_MSG_DEPTH_MAX) before cJSON
 * sees the text; cJSON then parses it; a post-walk rejects duplicate
 * object keys and numbers that overflowed to +-inf (1e400).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fly_err.h"
#include "fly_num.h"
#include "fly_msg.h"

#define FLY_MSG_DEPTH_MAX 32

/* ---------------------------------------------------------------- table */

struct req_info {
	const char *name;
	uint32_t flags;
};

static const struct req_info reqs[FLY_REQ_COUNT] = {
#define FLY_MSG(name, id, flags) [id] = {#name, flags},
#include "fly_msgs.def"
#undef FLY_MSG
};

const char *fly_req_name(int req)
{
	if (req <= FLY_REQ_NONE || req >= FLY_REQ_COUNT)
		return NULL;
	return reqs[req].name;
}

int fly_req_parse(const char *name)
{
	if (name == NULL)
		return FLY_REQ_NONE;
	for (int i = 1; i < FLY_REQ_COUNT; i++) {
		if (reqs[i].name && !strcmp(reqs[i].name, name))
			return i;
	}
	return FLY_REQ_NONE;
}

uint32_t fly_req_flags(int req)
{
	if (req <= FLY_REQ_NONE || req >= FLY_REQ_COUNT)
		return 0;
	return reqs[req].flags;
}

/* ---------------------------------------------------------------- pre-scan */

static int is_cont(uint8_t b)
{
	return (b & 0xc0) == 0x80;
}

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0. */
static size_t utf8_len(const uint8_t *s, size_t n)
{
	uint8_t b = s[0];
	uint8_t lo = 0x80, hi = 0xbf;
	size_t need;

	if (b < 0x80)
		return 1;
	if (b >= 0xc2 && b <= 0xdf)
		need = 1;
	else if (b >= 0xe0 && b <= 0xef)
		need = 2;
	else if (b >= 0xf0 && b <= 0xf4)
		need = 3;
	else
		return 0;
	if (b == 0xe0)
		lo = 0xa0;
	else if (b == 0xed)
		hi = 0x9f; /* no UTF-8-encoded surrogates */
	else if (b == 0xf0)
		lo = 0x90;
	else if (b == 0xf4)
		hi = 0x8f;
	if (n < need + 1 || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i <= need; i++) {
		if (!is_cont(s[i]))
			return 0;
	}
	return need + 1;
}

int fly__utf8_valid(const char *s, size_t n)
{
	const uint8_t *u = (const uint8_t *)s;

	for (size_t i = 0, k; i < n; i += k) {
		k = utf8_len(u + i, n - i);
		if (k == 0)
			return 0;
	}
	return 1;
}

static int hex4(const uint8_t *s, size_t n, unsigned *out)
{
	unsigned v = 0;

	if (n < 4)
		return -1;
	for (int i = 0; i < 4; i++) {
		uint8_t c = s[i];

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= c - '0';
		else if (c >= 'a' && c <= 'f')
			v |= c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			v |= c - 'A' + 10;
		else
			return -1;
	}
	*out = v;
	return 0;
}

/* A \u escape at s (after the backslash and 'u').  @return bytes used
 * after the 'u' or 0 when rejected. */
static size_t scan_uescape(const uint8_t *s, size_t n)
{
	unsigned cp, lo;

	if (hex4(s, n, &cp) < 0 || cp == 0)
		return 0;
	if (cp >= 0xdc00 && cp <= 0xdfff)
		return 0; /* lone low surrogate */
	if (cp < 0xd800 || cp > 0xdbff)
		return 4;
	if (n < 10 || s[4] != '\\' || s[5] != 'u' || hex4(s + 6, n - 6, &lo) ||
	    lo < 0xdc00 || lo > 0xdfff)
		return 0;
	return 10;
}

/* A string starting after its opening quote.  @return bytes up to and
 * including the closing quote, or 0 when rejected. */
static size_t scan_string(const uint8_t *s, size_t n)
{
	size_t i = 0, k;

	while (i < n) {
		uint8_t c = s[i];

		if (c == '"')
			return i + 1;
		if (c < 0x20)
			return 0; /* control char or NUL */
		if (c == '\\') {
			if (i + 1 >= n)
				return 0;
			c = s[i + 1];
			if (c == 'u') {
				k = scan_uescape(s + i + 2, n - i - 2);
				if (k == 0)
					return 0;
				i += 2 + k;
			} else if (strchr("\"\\/bfnrt", c) && c) {
				i += 2;
			} else {
				return 0;
			}
			continue;
		}
		k = utf8_len(s + i, n - i);
		if (k == 0)
			return 0;
		i += k;
	}
	return 0;
}

static int is_digit(uint8_t c)
{
	return c >= '0' && c <= '9';
}

/* A number per RFC 8259.  @return its length or 0 when rejected. */
static size_t scan_number(const uint8_t *s, size_t n)
{
	size_t i = 0;

	if (i < n && s[i] == '-')
		i++;
	if (i < n && s[i] == '0') {
		i++;
	} else if (i < n && s[i] >= '1' && s[i] <= '9') {
		while (i < n && is_digit(s[i]))
			i++;
	} else {
		return 0;
	}
	if (i < n && s[i] == '.') {
		if (++i >= n || !is_digit(s[i]))
			return 0;
		while (i < n && is_digit(s[i]))
			i++;
	}
	if (i < n && (s[i] == 'e' || s[i] == 'E')) {
		i++;
		if (i < n && (s[i] == '+' || s[i] == '-'))
			i++;
		if (i >= n || !is_digit(s[i]))
			return 0;
		while (i < n && is_digit(s[i]))
			i++;
	}
	if (i < n && (is_digit(s[i]) || strchr(".eE+-", s[i])))
		return 0;
	return i;
}

/* Reject, before cJSON runs, what cJSON would accept or recurse into. */
static int prescan(const uint8_t *s, size_t n)
{
	int depth = 0;
	size_t i = 0, k;

	while (i < n) {
		uint8_t c = s[i];

		if (c == '"') {
			k = scan_string(s + i + 1, n - i - 1);
			if (k == 0)
				return FLY_E_PROTO;
			i += 1 + k;
			continue;
		}
		if (c == '-' || is_digit(c)) {
			k = scan_number(s + i, n - i);
			if (k == 0)
				return FLY_E_PROTO;
			i += k;
			continue;
		}
		if (c == '{' || c == '[') {
			if (++depth > FLY_MSG_DEPTH_MAX)
				return FLY_E_PROTO;
		} else if (c == '}' || c == ']') {
			if (--depth < 0)
				return FLY_E_PROTO;
		} else if (c == 0 || c >= 0x80 || c == '+' || c == '.' ||
			   (c < 0x20 && c != '\t' && c != '\n' && c != '\r')) {
			/* (JSON's whitespace is space, tab, LF and CR; cJSON
			 * skips every byte up to 0x20: JSONTestSuite's
			 * n_structure_whitespace_formfeed, RELIABILITY.md B9,
			 * bench/json_suite.py) */
			return FLY_E_PROTO;
		}
		i++;
	}
	return depth == 0 ? 0 : FLY_E_PROTO;
}

/* ---------------------------------------------------------------- post-walk */

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int check_dups(const cJSON *o)
{
	const cJSON *c;
	const char **names;
	size_t n = 0, i = 0;
	int rc = 0;

	for (c = o->child; c; c = c->next)
		n++;
	if (n < 2)
		return 0;
	names = malloc(n * sizeof(*names));
	if (names == NULL)
		return -ENOMEM;
	for (c = o->child; c; c = c->next)
		names[i++] = c->string ? c->string : "";
	qsort(names, n, sizeof(*names), cmp_names);
	for (i = 1; i < n; i++) {
		if (!strcmp(names[i - 1], names[i])) {
			rc = FLY_E_PROTO;
			break;
		}
	}
	free(names);
	return rc;
}

/* Depth is bounded by the pre-scan, so recursion is bounded too. */
static int postwalk(const cJSON *j)
{
	int rc;

	if (cJSON_IsNumber(j) && !isfinite(j->valuedouble))
		return FLY_E_PROTO;
	if (cJSON_IsObject(j)) {
		rc = check_dups(j);
		if (rc < 0)
			return rc;
	}
	for (const cJSON *c = j->child; c; c = c->next) {
		rc = postwalk(c);
		if (rc < 0)
			return rc;
	}
	return 0;
}

int fly_msg_parse(const uint8_t *buf, size_t len, cJSON **out)
{
	const char *end = NULL;
	cJSON *j;
	size_t used;
	int rc;

	*out = NULL;
	if (buf == NULL || len == 0)
		return FLY_E_PROTO;
	rc = prescan(buf, len);
	if (rc < 0)
		return rc;
	j = cJSON_ParseWithLengthOpts((const char *)buf, len, &end, 0);
	if (j == NULL)
		return FLY_E_PROTO;
	used = (size_t)((const uint8_t *)end - buf);
	while (used < len && strchr(" \t\r\n", buf[used]) && buf[used])
		used++;
	if (used != len || !cJSON_IsObject(j)) {
		rc = FLY_E_PROTO;
		goto err_delete;
	}
	rc = postwalk(j);
	if (rc < 0) {
		rc = FLY_E_PROTO;
		goto err_delete;
	}
	*out = j;
	return 0;

err_delete:
	cJSON_Delete(j);
	return rc;
}

/* Whether a number is one cJSON would not print exactly: cJSON prints 15
 * significant digits when that reads back equal within an epsilon, so
 * 1796229956770520 (the shm generation) came out 1.79622995677052e+15,
 * and 1000000000000000.125 as 1e+15, which reads back as an integer (the
 * message fuzzer: printing was then not stable).  From 1e15 up to 2^63,
 * integral doubles are printed with "%.0f", the others with "%.17g"
 * (exact: they read back as the same double).  The range starts one below
 * 1e15: cJSON printed 999999999999999.9 as 1e+15 (15 digits, equal within
 * its epsilon), which read back into the range and printed as
 * 1000000000000000 (the message fuzzer again, in CI). */
static int is_long_int(const cJSON *it)
{
	double v = it->valuedouble;

	return cJSON_IsNumber(it) && isfinite(v) && fabs(v) >= 1e15 - 1 &&
	       fabs(v) < 9223372036854775808.0;
}

/* Whether cJSON's 15 digits of a number (not a long integer) would not
 * read back as the same double (0.30000000000000004 printed 0.3, equal
 * within cJSON's epsilon): such numbers are printed by
 * fly_num_fmt_double(), exact in 15, 16 or 17 digits. */
static int is_inexact(const cJSON *it)
{
	double v = it->valuedouble;
	char buf[32];

	if (!cJSON_IsNumber(it) || !isfinite(v) || is_long_int(it))
		return 0;
	snprintf(buf, sizeof(buf), "%1.15g", v);
	return strtod(buf, NULL) != v;
}

static int needs_raw(const cJSON *it)
{
	return is_long_int(it) || is_inexact(it);
}

static int has_raw_number(const cJSON *o)
{
	const cJSON *it;

	cJSON_ArrayForEach(it, o) {
		if (needs_raw(it) || has_raw_number(it))
			return 1;
	}
	return 0;
}

/* Turn every number of @p o that needs_raw() into a raw node of its exact
 * digits. */
static int raw_numbers(cJSON *o)
{
	cJSON *it;
	char buf[32];

	cJSON_ArrayForEach(it, o) {
		if (needs_raw(it)) {
			char *v;

			double x = it->valuedouble;

			if (is_long_int(it))
				snprintf(buf, sizeof(buf),
					 x == floor(x) ? "%.0f" : "%.17g", x);
			else if (fly_num_fmt_double(x, buf) < 0)
				return -EINVAL;
			v = strdup(buf);
			if (v == NULL)
				return -ENOMEM;
			it->type = cJSON_Raw | (it->type & cJSON_StringIsConst);
			it->valuestring = v;
		} else if (raw_numbers(it) < 0) {
			return -ENOMEM;
		}
	}
	return 0;
}

char *fly_msg_print(const cJSON *msg, size_t *len)
{
	cJSON *copy = NULL;
	char *s;

	if (has_raw_number(msg)) {
		copy = cJSON_Duplicate(msg, 1);
		if (copy == NULL || raw_numbers(copy) < 0) {
			cJSON_Delete(copy);
			return NULL;
		}
		msg = copy;
	}
	s = cJSON_PrintUnformatted(msg);
	cJSON_Delete(copy);
	if (s && len)
		*len = strlen(s);
	return s;
}

/* ---------------------------------------------------------------- errors */

static const char *const err_names[] = {
    [-(FLY_E_PROTO - FLY_E_BASE)] = "proto",
    [-(FLY_E_NOGPU - FLY_E_BASE)] = "nogpu",
    [-(FLY_E_SCHEMA - FLY_E_BASE)] = "schema",
    [-(FLY_E_BADOP - FLY_E_BASE)] = "bad_op",
    [-(FLY_E_BADDTYPE - FLY_E_BASE)] = "bad_dtype",
    [-(FLY_E_BADDIM - FLY_E_BASE)] = "bad_dim",
    [-(FLY_E_OVERFLOW - FLY_E_BASE)] = "overflow",
    [-(FLY_E_KEYLEN - FLY_E_BASE)] = "key_too_long",
    [-(FLY_E_BADKEY - FLY_E_BASE)] = "bad_key",
    [-(FLY_E_BUSY - FLY_E_BASE)] = "busy",
    [-(FLY_E_PERM - FLY_E_BASE)] = "permission",
    [-(FLY_E_NOTFOUND - FLY_E_BASE)] = "not_found",
    [-(FLY_E_TIMEOUT - FLY_E_BASE)] = "timeout",
    [-(FLY_E_DOWN - FLY_E_BASE)] = "down",
    [-(FLY_E_VERSION - FLY_E_BASE)] = "version",
    [-(FLY_E_INVALID - FLY_E_BASE)] = "invalid",
    [-(FLY_E_TOOBIG - FLY_E_BASE)] = "too_big",
    [-(FLY_E_STORAGE - FLY_E_BASE)] = "storage",
    [-(FLY_E_SHM - FLY_E_BASE)] = "shm",
    [-(FLY_E_GPU - FLY_E_BASE)] = "gpu",
    [-(FLY_E_MAXCLIENTS - FLY_E_BASE)] = "max_clients",
};
#define NERR ((int)(sizeof(err_names) / sizeof(err_names[0])))

const char *fly_err_name(int code)
{
	if (code <= FLY_E_BASE - 1 && code >= FLY_E_LAST &&
	    err_names[-(code - FLY_E_BASE)])
		return err_names[-(code - FLY_E_BASE)];
	return "internal";
}

/* "internal" (and any unknown name) maps to -EIO: a failure the peer did
 * not classify. */
int fly_err_parse(const char *name)
{
	if (name == NULL)
		return -EIO;
	for (int i = 1; i < NERR; i++) {
		if (err_names[i] && !strcmp(err_names[i], name))
			return FLY_E_BASE - i;
	}
	return -EIO;
}

cJSON *fly_msg_error(int code, const char *message)
{
	cJSON *r = cJSON_CreateObject();
	cJSON *e;

	if (r == NULL)
		return NULL;
	if (!cJSON_AddFalseToObject(r, "ok") ||
	    (e = cJSON_AddObjectToObject(r, "error")) == NULL ||
	    !cJSON_AddStringToObject(e, "code", fly_err_name(code)) ||
	    !cJSON_AddStringToObject(e, "message",
				     message ? message : fly_strerror(code))) {
		cJSON_Delete(r);
		return NULL;
	}
	return r;
}

int fly_msg_get_error(const cJSON *resp, const char **msg)
{
	const cJSON *ok = cJSON_GetObjectItemCaseSensitive(resp, "ok");
	const cJSON *e, *code, *m;

	if (msg)
		*msg = NULL;
	if (cJSON_IsTrue(ok))
		return 0;
	if (!cJSON_IsFalse(ok))
		return FLY_E_PROTO;
	e = cJSON_GetObjectItemCaseSensitive(resp, "error");
	code = cJSON_GetObjectItemCaseSensitive(e, "code");
	m = cJSON_GetObjectItemCaseSensitive(e, "message");
	if (!cJSON_IsString(code))
		return FLY_E_PROTO;
	if (msg && cJSON_IsString(m))
		*msg = m->valuestring;
	return fly_err_parse(code->valuestring);
}

/* ---------------------------------------------------------------- decision */

static const char *const status_names[] = {"default", "pending", "tuned"};

const char *fly_status_name(uint32_t status)
{
	return status < 3 ? status_names[status] : NULL;
}

int fly_status_parse(const char *s)
{
	for (int i = 0; s && i < 3; i++) {
		if (!strcmp(status_names[i], s))
			return i;
	}
	return -1;
}

cJSON *fly_msg_decision_to_json(const struct fly_decision *d)
{
	cJSON *o, *params;
	uint32_t np;

	if (d == NULL || fly_status_name(d->status) == NULL)
		return NULL;
	o = cJSON_CreateObject();
	if (o == NULL)
		return NULL;
	if (!cJSON_AddStringToObject(o, "status", fly_status_name(d->status)) ||
	    !cJSON_AddBoolToObject(o, "provisional", d->provisional != 0) ||
	    !cJSON_AddStringToObject(o, "variant", d->variant) ||
	    (params = cJSON_AddArrayToObject(o, "params")) == NULL)
		goto err_delete;
	np = d->nparams < FLY_PARAMS_MAX ? d->nparams : FLY_PARAMS_MAX;
	for (uint32_t i = 0; i < np; i++) {
		cJSON *v = cJSON_CreateNumber((double)d->params[i]);

		if (v == NULL)
			goto err_delete;
		cJSON_AddItemToArray(params, v);
	}
	if (!cJSON_AddNumberToObject(o, "median_us", d->median_us))
		goto err_delete;
	return o;

err_delete:
	cJSON_Delete(o);
	return NULL;
}

/* A JSON number that is an integer representable as int64. */
static int num_to_i64(const cJSON *j, int64_t *out)
{
	double v;

	if (!cJSON_IsNumber(j))
		return FLY_E_PROTO;
	v = j->valuedouble;
	if (!isfinite(v) || v != floor(v) || v < -9223372036854775808.0 ||
	    v >= 9223372036854775808.0)
		return FLY_E_PROTO;
	*out = (int64_t)v;
	return 0;
}

int fly_msg_decision_from_json(const cJSON *o, struct fly_decision *out)
{
	struct fly_decision d;
	const cJSON *st, *pr, *va, *pa, *me, *p;
	int status, i = 0;

	if (!cJSON_IsObject(o) || out == NULL)
		return FLY_E_PROTO;
	memset(&d, 0, sizeof(d));
	st = cJSON_GetObjectItemCaseSensitive(o, "status");
	pr = cJSON_GetObjectItemCaseSensitive(o, "provisional");
	va = cJSON_GetObjectItemCaseSensitive(o, "variant");
	pa = cJSON_GetObjectItemCaseSensitive(o, "params");
	me = cJSON_GetObjectItemCaseSensitive(o, "median_us");
	if (!cJSON_IsString(st) ||
	    (status = fly_status_parse(st->valuestring)) < 0)
		return FLY_E_PROTO;
	if (!cJSON_IsBool(pr) || !cJSON_IsString(va) || !cJSON_IsArray(pa) ||
	    !cJSON_IsNumber(me) || !isfinite(me->valuedouble) ||
	    me->valuedouble < 0)
		return FLY_E_PROTO;
	if (strlen(va->valuestring) >= FLY_VARIANT_MAX)
		return FLY_E_PROTO;
	cJSON_ArrayForEach(p, pa)
	{
		if (i >= FLY_PARAMS_MAX || num_to_i64(p, &d.params[i]) < 0)
			return FLY_E_PROTO;
		i++;
	}
	d.status = (uint32_t)status;
	d.provisional = cJSON_IsTrue(pr) ? 1 : 0;
	strcpy(d.variant, va->valuestring);
	d.nparams = (uint32_t)i;
	d.median_us = me->valuedouble;
	*out = d;
	return 0;
}

/* ---------------------------------------------------------------- fields */

int fly_msg_get_str(const cJSON *o, const char *name, const char **out)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, name);

	if (!cJSON_IsString(j))
		return FLY_E_PROTO;
	*out = j->valuestring;
	return 0;
}

int fly_msg_get_int(const cJSON *o, const char *name, int64_t *out)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, name);

	return num_to_i64(j, out);
}

int fly_msg_opt_str(const cJSON *o, const char *name, const char **out)
{
	if (cJSON_GetObjectItemCaseSensitive(o, name) == NULL)
		return 1;
	return fly_msg_get_str(o, name, out);
}

int fly_msg_opt_int(const cJSON *o, const char *name, int64_t *out)
{
	if (cJSON_GetObjectItemCaseSensitive(o, name) == NULL)
		return 1;
	return fly_msg_get_int(o, name, out);
}

int fly_msg_opt_bool(const cJSON *o, const char *name, int *out)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, name);

	if (j == NULL)
		return 1;
	if (!cJSON_IsBool(j))
		return FLY_E_PROTO;
	*out = cJSON_IsTrue(j) ? 1 : 0;
	return 0;
}
