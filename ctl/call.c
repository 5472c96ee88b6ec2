/*
 * call.c -- flytune-ctl's requests: build one, send it through
 * fly_request() and parse the reply (integers of 16 digits or more kept
 * exactly), page through list/export, and the option and key checks
 * every subcommand shares.
 *
 * Owns: nothing between calls.  Thread: main.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

/* Exit code for a library error from fly_request. */
static int exit_for_err(int err)
{
	switch (err) {
	case FLY_E_DOWN:
		return CTL_DOWN;
	case FLY_E_TIMEOUT:
		return CTL_TIMEOUT;
	case FLY_E_PERM:
		return CTL_PERM;
	case FLY_E_MAXCLIENTS:
		return CTL_MAXCLIENTS;
	default:
		return CTL_ERR;
	}
}

cJSON *ctl_req(const char *name)
{
	cJSON *o = cJSON_CreateObject();

	if (o != NULL && cJSON_AddStringToObject(o, "req", name) == NULL) {
		cJSON_Delete(o);
		o = NULL;
	}
	return o;
}

/* Find the next number literal of a JSON text from *pos (strings are
 * skipped).  @return 1 and the literal in *tok, *n; 0 at the end. */
static int next_number(const char *s, size_t len, size_t *pos,
		       const char **tok, size_t *n)
{
	size_t i = *pos;

	while (i < len) {
		if (s[i] == '"') {
			for (i++; i < len && s[i] != '"'; i++)
				if (s[i] == '\\')
					i++;
			i++;
		} else if (s[i] == '-' || (s[i] >= '0' && s[i] <= '9')) {
			*tok = s + i;
			while (i < len && s[i] != '\0' &&
			       strchr("+-.eE0123456789", s[i]))
				i++;
			*n = (size_t)(s + i - *tok);
			*pos = i;
			return 1;
		} else {
			i++;
		}
	}
	*pos = i;
	return 0;
}

/* Whether a literal is an integer of 16 digits or more. */
static int is_long_int(const char *t, size_t n)
{
	size_t i = t[0] == '-', d = 0;

	for (; i < n; i++, d++)
		if (t[i] < '0' || t[i] > '9')
			return 0;
	return d >= 16;
}

/* Whether cJSON would print @p v inexactly: its 15 digits read back as
 * another double (equal within cJSON's epsilon: 0.30000000000000004 as
 * 0.3), so a tuned median would not survive get, list or export. */
static int is_inexact(double v)
{
	char buf[32];

	snprintf(buf, sizeof(buf), "%1.15g", v);
	return isfinite(v) && strtod(buf, NULL) != v;
}

/* Turn the long integer members of @p o, and the numbers cJSON would
 * print inexactly (is_inexact), into raw nodes holding their
 * literal; @p s is the text @p o was parsed from, *pos a cursor over it
 * (cJSON keeps members in document order, so the walk meets the numbers
 * in the order of the text). */
static void exact_ints(cJSON *o, const char *s, size_t len, size_t *pos)
{
	cJSON *it;
	const char *t;
	size_t n;

	cJSON_ArrayForEach(it, o) {
		if (cJSON_IsArray(it) || cJSON_IsObject(it)) {
			exact_ints(it, s, len, pos);
		} else if (cJSON_IsNumber(it)) {
			char *v;

			if (!next_number(s, len, pos, &t, &n))
				return;
			if (!(is_long_int(t, n) || is_inexact(it->valuedouble)) ||
			    (v = strndup(t, n)) == NULL)
				continue;
			it->type = cJSON_Raw | (it->type & cJSON_StringIsConst);
			it->valuestring = v;
		}
	}
}

/* Parse a reply.  cJSON holds numbers as doubles: 53 bits, printed with
 * 15 significant digits when that reads back equal, so the shm generation
 * 1796229956770520 came out as 1.79622995677052e+15, and a 64-bit
 * integer past 2^53 would come out changed; 0.30000000000000004 came
 * out as 0.3.  Integers of 16 digits or more, and numbers whose 15
 * digits would not read back as themselves, are kept as their literal
 * (raw nodes), which cJSON_Print and ctl_print_flat print verbatim.
 * @return the object or NULL. */
static cJSON *ctl_parse(const char *text, size_t len)
{
	cJSON *o = cJSON_ParseWithLength(text, len);
	size_t pos = 0;

	if (o != NULL)
		exact_ints(o, text, len, &pos);
	return o;
}

int ctl_call(struct ctl *x, cJSON *req, uint32_t timeout_ms,
	     cJSON **resp)
{
	char *text;
	int rc;

	*resp = NULL;
	text = req ? cJSON_PrintUnformatted(req) : NULL;
	cJSON_Delete(req);
	if (text == NULL) {
		ctl_err("internal", "%s failed: out of memory", x->cmd);
		return CTL_ERR;
	}
	rc = ctl_call_text(x, text, strlen(text), timeout_ms, resp);
	free(text);
	return rc;
}

int ctl_call_text(struct ctl *x, const char *text, size_t len,
		  uint32_t timeout_ms, cJSON **resp)
{
	char *out = NULL;
	size_t out_len = 0;
	cJSON *o;
	int rc;

	*resp = NULL;
	rc = fly_request(x->c, text, len,
			 timeout_ms ? timeout_ms : x->timeout_ms, &out,
			 &out_len);
	if (rc < 0) {
		const char *m = fly_client_errmsg(x->c);

		ctl_err(ctl_code_for_exit(exit_for_err(rc)), "%s failed: %s%s%s",
			x->cmd, rc == FLY_E_DOWN ? "daemon not running" :
				rc == FLY_E_MAXCLIENTS ? "too many clients" :
							 fly_strerror(rc),
			m[0] ? ": " : "", m);
		return exit_for_err(rc);
	}
	o = ctl_parse(out, out_len);
	fly_free(out);
	if (!cJSON_IsObject(o)) {
		cJSON_Delete(o);
		ctl_err("proto", "%s failed: malformed reply", x->cmd);
		return CTL_ERR;
	}
	if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "ok"))) {
		rc = ctl_reply_error(x, o);
		cJSON_Delete(o);
		return rc;
	}
	*resp = o;
	return CTL_OK;
}

/* Wire name of a key error (as the daemon would answer it). */
static const char *key_code(int rc)
{
	switch (rc) {
	case FLY_E_BADOP:
		return "bad_op";
	case FLY_E_BADDTYPE:
		return "bad_dtype";
	case FLY_E_BADDIM:
		return "bad_dim";
	case FLY_E_OVERFLOW:
		return "overflow";
	case FLY_E_KEYLEN:
		return "key_too_long";
	default:
		return "bad_key";
	}
}

int ctl_check_key(struct ctl *x, const char *key)
{
	char why[512];
	int rc = fly_key_explain(key, why, sizeof(why));

	if (rc == 0)
		return CTL_OK;
	ctl_err(key_code(rc),
		"%s failed: bad key '%s': %s\n"
		"  keys are canonical, e.g. gemm/bf16/NT/m=4096,n=6144,k=4096 "
		"or rmsnorm/fp16/m=8192,n=4096/residual",
		x->cmd, key, why);
	return CTL_INVALID;
}

/* A duration: seconds ("1.5", "2s") or milliseconds ("500ms"), in
 * (0, max_s] -- one unit for the global --timeout and tune's (issue 18).
 * @return 0 and *ms (at least 1), or -1. */
int ctl_parse_duration(const char *arg, double max_s, uint32_t *ms)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(arg, &end);
	if (errno || end == arg || !isfinite(v))
		return -1;
	if (strcmp(end, "ms") == 0)
		v /= 1000;
	else if (*end != '\0' && strcmp(end, "s") != 0)
		return -1;
	if (!(v > 0) || v > max_s)
		return -1;
	*ms = v < 0.001 ? 1 : (uint32_t)llround(v * 1000);
	return 0;
}

int ctl_parse_simple(struct ctl *x, int argc, char **argv, int npos)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	opterr = 0;
	optind = 0; /* 0: glibc re-initialises (permuting again) */
	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (ch != 'j')
			return ctl_usage(x, "unknown option '%s'",
					 argv[optind - 1]);
		x->json = 1;
	}
	if (argc - optind != npos)
		return ctl_usage(x, npos ? "%s needs exactly one KEY" :
					   "%s takes no arguments", x->cmd);
	return -1;
}

int ctl_call_out(struct ctl *x, cJSON *req, ctl_text_fn *text)
{
	cJSON *resp;
	int rc = ctl_call(x, req, 0, &resp);

	if (rc != CTL_OK)
		return rc;
	ctl_out(x, resp, text);
	cJSON_Delete(resp);
	return CTL_OK;
}

int ctl_key_req(struct ctl *x, int argc, char **argv, const char *name,
		cJSON **req)
{
	int rc = ctl_parse_simple(x, argc, argv, 1);

	*req = NULL;
	if (rc >= 0)
		return rc;
	rc = ctl_check_key(x, argv[optind]);
	if (rc != CTL_OK)
		return rc;
	*req = ctl_req(name);
	if (*req != NULL)
		cJSON_AddStringToObject(*req, "key", argv[optind]);
	return CTL_OK;
}

int ctl_page_all(struct ctl *x, const cJSON *base, cJSON **all)
{
	cJSON *acc = cJSON_CreateArray(), *req, *resp, *res, *next;
	char *after = NULL;
	int rc = CTL_OK;

	*all = NULL;
	while (acc != NULL) {
		req = cJSON_Duplicate(base, 1);
		if (req && after)
			cJSON_AddStringToObject(req, "after", after);
		if (req)
			cJSON_AddNumberToObject(req, "limit", CTL_PAGE);
		rc = ctl_call(x, req, 0, &resp);
		if (rc != CTL_OK)
			break;
		res = cJSON_DetachItemFromObjectCaseSensitive(resp, "results");
		next = cJSON_GetObjectItemCaseSensitive(resp, "next");
		free(after);
		after = cJSON_IsString(next) && next->valuestring[0] ?
				strdup(next->valuestring) : NULL;
		/* the head, not cJSON_GetArraySize(): that walks the
		 * list, once per item moved (quadratic in a page) */
		while (cJSON_IsArray(res) && res->child != NULL)
			cJSON_AddItemToArray(acc,
					     cJSON_DetachItemFromArray(res, 0));
		cJSON_Delete(res);
		cJSON_Delete(resp);
		if (after == NULL) {
			*all = acc;
			return CTL_OK;
		}
	}
	free(after);
	cJSON_Delete(acc);
	return rc == CTL_OK ? CTL_ERR : rc;
}
