/*
 * cmd_import.c -- import FILE: validate a whole export file first (size
 * cap checked before reading, file.c; then the header and every record, the
 * records by fly_record_check, the validator the daemon uses too), then
 * send it in chunks with "more": true until the last, so the daemon
 * commits all or nothing.  The records are found in the file's text,
 * parsed and checked one at a time and sent as written (issue 19); a file
 * the scan does not follow is parsed whole and printed, as before.
 *
 * Owns: the file it reads.  Thread: main.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "fly_record.h"

#define CTL_CHUNK_BYTES 48000 /* import/... request payload budget */

static int is_int(const cJSON *v)
{
	return cJSON_IsNumber(v) && isfinite(v->valuedouble) &&
	       v->valuedouble == floor(v->valuedouble) &&
	       fabs(v->valuedouble) <= 9007199254740992.0;
}

/* A string of 1..@p max bytes, valid UTF-8, as a record's strings must
 * be (cJSON passes invalid bytes through: a header with them was
 * imported as if valid). */
static int is_str(const cJSON *v, size_t max)
{
	return fly_record_str_ok(v, 1, (double)max);
}

/* The export file's top level: only the five fields; device an object
 * with backend, fingerprint, id (and index).  @return NULL or why not. */
static const char *check_header_device(const cJSON *doc)
{
	static const char *const top[] = { "format", "version", "device",
					   "libver", "results", NULL };
	static const char *const dev[] = { "index", "backend", "fingerprint",
					   "id", NULL };
	const cJSON *d = cJSON_GetObjectItemCaseSensitive(doc, "device");
	const cJSON *it, *ix;
	int i;

	cJSON_ArrayForEach(it, doc) {
		for (i = 0; top[i] && strcmp(top[i], it->string); i++)
			;
		if (top[i] == NULL)
			return "unknown top-level field";
	}
	if (!cJSON_IsObject(d))
		return "device: expected an object";
	cJSON_ArrayForEach(it, d) {
		for (i = 0; dev[i] && strcmp(dev[i], it->string); i++)
			;
		if (dev[i] == NULL)
			return "device: unknown field";
	}
	ix = cJSON_GetObjectItemCaseSensitive(d, "index");
	if (ix != NULL && (!is_int(ix) || ix->valuedouble < 0))
		return "device.index: expected an integer >= 0";
	if (!is_str(cJSON_GetObjectItemCaseSensitive(d, "backend"), 15) ||
	    !is_str(cJSON_GetObjectItemCaseSensitive(d, "fingerprint"), 4096) ||
	    !is_str(cJSON_GetObjectItemCaseSensitive(d, "id"), 63))
		return "device: expected backend, fingerprint and id UTF-8 "
		       "strings";
	return NULL;
}

/* Validate the export file's header (every member but the records).
 * @return CTL_OK or CTL_INVALID. */
static int check_header(const char *file, const cJSON *doc)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(doc, "format");
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(doc, "version");
	const cJSON *res = cJSON_GetObjectItemCaseSensitive(doc, "results");
	const char *bad = NULL;

	if (!cJSON_IsObject(doc))
		bad = "not a JSON object";
	else if (!cJSON_IsString(f) || strcmp(f->valuestring, CTL_EXPORT_FORMAT))
		bad = "format: expected \"" CTL_EXPORT_FORMAT "\"";
	else if (!is_int(v) || v->valuedouble != CTL_EXPORT_VERSION)
		bad = "version: expected 1";
	else if (!cJSON_IsArray(res))
		bad = "results: expected an array";
	else if (!is_str(cJSON_GetObjectItemCaseSensitive(doc, "libver"), 31))
		bad = "libver: expected a version (1..31 characters, UTF-8)";
	else
		bad = check_header_device(doc);
	if (bad != NULL) {
		ctl_err("invalid", "import failed: %s: %s", file, bad);
		return CTL_INVALID;
	}
	return CTL_OK;
}

/* Report record @p i of @p file refused for @p why.  @return CTL_INVALID. */
static int bad_record(const char *file, size_t i, const char *why)
{
	ctl_err("invalid", "import failed: %s: results[%zu]: %s", file, i, why);
	return CTL_INVALID;
}

/* Validate the export-file shape.  @return CTL_OK or CTL_INVALID. */
static int check_export(const char *file, const cJSON *doc)
{
	const cJSON *r;
	char why[128];
	size_t i = 0;

	if (check_header(file, doc) != CTL_OK)
		return CTL_INVALID;
	cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(doc, "results")) {
		if (fly_record_check(r, why, sizeof(why)) < 0)
			return bad_record(file, i, why);
		i++;
	}
	return CTL_OK;
}

/* Send one chunk {"req":"import","results":chunk,"more":more} (takes
 * ownership of @p chunk).  *last is the reply (caller owns). */
static int import_chunk(struct ctl *x, cJSON *chunk, int more, cJSON **last)
{
	cJSON *req = ctl_req("import"), *resp;
	int rc;

	if (req == NULL) {
		cJSON_Delete(chunk);
		return CTL_ERR;
	}
	cJSON_AddItemToObject(req, "results", chunk);
	cJSON_AddBoolToObject(req, "more", more);
	rc = ctl_call(x, req, 0, &resp);
	if (rc != CTL_OK)
		return rc;
	cJSON_Delete(*last);
	*last = resp;
	return CTL_OK;
}

/* Send every result in chunks of at most CTL_CHUNK_BYTES of JSON.  The
 * loop tests res->child and counts the chunk itself: cJSON_GetArraySize
 * walks the list, which made an import quadratic (issue 19: 100k keys
 * took 25 s, 87% of it in cJSON_GetArraySize). */
static int import_send(struct ctl *x, cJSON *res, cJSON **last)
{
	cJSON *chunk = cJSON_CreateArray(), *r;
	size_t bytes = 0, nchunk = 0;
	int rc;

	while (chunk != NULL && res->child != NULL) {
		char *s;
		size_t n;

		r = cJSON_DetachItemFromArray(res, 0);
		s = cJSON_PrintUnformatted(r);
		n = s ? strlen(s) + 1 : 0;
		free(s);
		if (bytes + n > CTL_CHUNK_BYTES && nchunk > 0) {
			rc = import_chunk(x, chunk, 1, last);
			chunk = cJSON_CreateArray();
			bytes = 0;
			nchunk = 0;
			if (rc != CTL_OK) {
				cJSON_Delete(r);
				cJSON_Delete(chunk);
				return rc;
			}
		}
		cJSON_AddItemToArray(chunk, r);
		bytes += n;
		nchunk++;
	}
	if (chunk == NULL)
		return CTL_ERR;
	return import_chunk(x, chunk, 0, last);
}

/* ------------------------------------------------- the records' own text
 *
 * issue 19: printing every record twice (once to size the chunk, once in
 * the request) was most of flytune-ctl's import time -- %1.15g and its
 * sscanf check per number.  The records are sent as the file wrote them
 * instead (whitespace outside strings dropped): the file is parsed and
 * checked as before, then its top-level "results" array is located in
 * the text.  Anything the scan does not recognise the way cJSON did
 * (an escaped member name, another record count) falls back to printing. */

struct raw_rec {
	const char *p;   /* the record's first byte, in the file's text */
	size_t n;        /* its bytes */
};

static const char *skip_ws(const char *p, const char *e)
{
	while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
		p++;
	return p;
}

/* Past the string starting at @p p (a '"'); NULL when unterminated. */
static const char *skip_str(const char *p, const char *e)
{
	for (p++; p < e; p++) {
		if (*p == '\\') {
			if (++p >= e) /* the escaped byte is skipped */
				break;
		} else if (*p == '"') {
			return p + 1;
		}
	}
	return NULL;
}

/* Past the value starting at @p p (text cJSON already accepted).
 * @return the first byte after it, or NULL. */
static const char *skip_val(const char *p, const char *e)
{
	int depth = 0;

	if (p < e && *p != '{' && *p != '[' && *p != '"') {
		while (p < e && strchr(",]} \t\r\n", *p) == NULL)
			p++;
		return p;
	}
	while (p < e) {
		if (*p == '"') {
			p = skip_str(p, e);
			if (p == NULL || depth == 0)
				return p;
			continue;
		}
		if (*p == '{' || *p == '[')
			depth++;
		else if ((*p == '}' || *p == ']') && --depth == 0)
			return p + 1;
		p++;
	}
	return NULL;
}

/* Append record @p p, @p n to *@p recs.  @return 0 or -1 (ENOMEM). */
static int rec_add(struct raw_rec **recs, size_t *nrec, size_t *cap,
		   const char *p, size_t n)
{
	if (*nrec == *cap) {
		size_t c = *cap ? *cap * 2 : 1024;
		struct raw_rec *g = realloc(*recs, c * sizeof(*g));

		if (g == NULL)
			return -1;
		*recs = g;
		*cap = c;
	}
	(*recs)[*nrec].p = p;
	(*recs)[(*nrec)++].n = n;
	return 0;
}

/* The elements of the array at @p p.  @return 0 or -1. */
static int array_recs(const char *p, const char *e, struct raw_rec **recs,
		      size_t *nrec, const char **end)
{
	size_t cap = 0;
	const char *q;

	if (p >= e || *p != '[')
		return -1;
	p = skip_ws(p + 1, e);
	if (p < e && *p == ']') {
		*end = p + 1;
		return 0;
	}
	while (p < e) {
		q = skip_val(p, e);
		if (q == NULL || rec_add(recs, nrec, &cap, p, (size_t)(q - p)))
			return -1;
		p = skip_ws(q, e);
		if (p < e && *p == ']') {
			*end = p + 1;
			return 0;
		}
		if (p >= e || *p != ',')
			return -1;
		p = skip_ws(p + 1, e);
	}
	return -1;
}

/* The records of the top-level "results" member of @p buf (the first
 * one, as cJSON finds it), and the array's text [*lo, *hi).
 * @return 0 (*recs: caller frees) or -1. */
static int raw_records(const char *buf, size_t len, struct raw_rec **recs,
		       size_t *nrec, const char **lo, const char **hi)
{
	const char *p = skip_ws(buf, buf + len), *e = buf + len, *k;

	*recs = NULL;
	*nrec = 0;
	if (p >= e || *p != '{')
		return -1;
	for (p++;;) {
		int is_res;

		p = skip_ws(p, e);
		if (p >= e || *p != '"')
			return -1;
		k = p;
		p = skip_str(p, e);
		if (p == NULL || memchr(k, '\\', (size_t)(p - k)) != NULL)
			return -1;
		is_res = p - k == 9 && memcmp(k, "\"results\"", 9) == 0;
		p = skip_ws(p, e);
		if (p >= e || *p != ':')
			return -1;
		p = skip_ws(p + 1, e);
		if (is_res) {
			*lo = p;
			return array_recs(p, e, recs, nrec, hi);
		}
		p = skip_val(p, e);
		if (p == NULL)
			return -1;
		p = skip_ws(p, e);
		if (p >= e || *p != ',')
			return -1;
		p++;
	}
}

/* Copy @p n bytes of JSON at @p s to @p dst without the whitespace
 * outside strings.  @return bytes written (<= @p n). */
static size_t copy_min(char *dst, const char *s, size_t n)
{
	size_t o = 0;
	int in = 0;

	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		if (in) {
			dst[o++] = c;
			if (c == '\\' && i + 1 < n)
				dst[o++] = s[++i];
			else if (c == '"')
				in = 0;
		} else if (c == '"') {
			in = 1;
			dst[o++] = c;
		} else if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
			dst[o++] = c;
		}
	}
	return o;
}

#define RAW_HEAD "{\"req\":\"import\",\"results\":["

/* Send chunk text @p b (RAW_HEAD and @p len bytes of records joined by
 * commas) with its tail.  *last is the reply (caller owns). */
static int raw_chunk(struct ctl *x, char *b, size_t len, int more,
		     cJSON **last)
{
	static const char t_more[] = "],\"more\":true}";
	static const char t_last[] = "],\"more\":false}";
	const char *t = more ? t_more : t_last;
	size_t tn = more ? sizeof(t_more) - 1 : sizeof(t_last) - 1;
	cJSON *resp;
	int rc;

	memcpy(b + len, t, tn);
	rc = ctl_call_text(x, b, len + tn, 0, &resp);
	if (rc != CTL_OK)
		return rc;
	cJSON_Delete(*last);
	*last = resp;
	return CTL_OK;
}

/* import_send() from the records' text: the same chunks (at most
 * CTL_CHUNK_BYTES of records, at least one record each). */
static int import_send_raw(struct ctl *x, const struct raw_rec *recs,
			   size_t nrec, cJSON **last)
{
	const size_t head = sizeof(RAW_HEAD) - 1, tail = 32;
	size_t maxn = 0, len = head, bytes = 0, nchunk = 0;
	char *b, *row;
	int rc = CTL_OK;

	for (size_t i = 0; i < nrec; i++)
		maxn = recs[i].n > maxn ? recs[i].n : maxn;
	/* a chunk: its records' budget, or one record larger than it */
	b = malloc(head + CTL_CHUNK_BYTES + maxn + 1 + tail);
	row = malloc(maxn + 1);
	if (b == NULL || row == NULL) {
		free(b);
		free(row);
		return CTL_ERR;
	}
	memcpy(b, RAW_HEAD, head);
	for (size_t i = 0; i < nrec && rc == CTL_OK; i++) {
		size_t n = copy_min(row, recs[i].p, recs[i].n);

		if (bytes + n + 1 > CTL_CHUNK_BYTES && nchunk > 0) {
			rc = raw_chunk(x, b, len, 1, last);
			len = head;
			bytes = 0;
			nchunk = 0;
			if (rc != CTL_OK)
				break;
		}
		if (nchunk > 0)
			b[len++] = ',';
		memcpy(b + len, row, n);
		len += n;
		bytes += n + 1;
		nchunk++;
	}
	if (rc == CTL_OK)
		rc = raw_chunk(x, b, len, 0, last);
	free(row);
	free(b);
	return rc;
}

/* The last reply's count: every staged and committed row. */
static void print_imported(const cJSON *resp)
{
	const cJSON *n = cJSON_GetObjectItemCaseSensitive(resp, "imported");

	printf("imported %.0f result(s)\n",
	       cJSON_IsNumber(n) ? n->valuedouble : 0.0);
}

/* The file's records as cJSON would parse each (nothing but white space
 * after it), checked; the first refused is reported after the header,
 * as check_export() does.  @return CTL_OK, CTL_INVALID, or -1: a record
 * is not valid JSON on its own (the whole-file parse says why). */
static int check_records(const char *file, const cJSON *hdoc,
			 const struct raw_rec *recs, size_t nrec)
{
	char why[128] = "";
	size_t bad = nrec;

	for (size_t i = 0; i < nrec; i++) {
		const char *end;
		cJSON *r = NULL;
		/* the text goes out as it is: the daemon's parser must take
		 * it (a raw control character, which cJSON passes, made the
		 * daemon refuse a checked file's request: exit 1) */
		int strict = fly_record_parse(recs[i].p, recs[i].n, &r) == 0;

		if (!strict)
			r = cJSON_ParseWithLengthOpts(recs[i].p, recs[i].n,
						      &end, 0);
		if (r == NULL || (!strict && end != recs[i].p + recs[i].n)) {
			cJSON_Delete(r);
			return -1;
		}
		if (bad == nrec && fly_record_check(r, why, sizeof(why)) < 0)
			bad = i;
		else if (bad == nrec && !strict) {
			snprintf(why, sizeof(why), "not strict JSON (a raw "
				 "control character in a string, or a key "
				 "twice)");
			bad = i;
		}
		cJSON_Delete(r);
	}
	if (check_header(file, hdoc) != CTL_OK)
		return CTL_INVALID;
	return bad < nrec ? bad_record(file, bad, why) : CTL_OK;
}

/* Check and send file @p buf, @p len record by record: the header parsed
 * with "results": [], each record parsed, checked and freed (issue 19:
 * the whole file's tree, ~150 MiB for 200k records, was most of the
 * CLI's page faults), then the records' own text sent.  *@p done 0: the
 * scan did not find the records cJSON would (nothing sent or printed;
 * the caller parses the whole file).  @return exit code. */
static int import_stream(struct ctl *x, const char *file, const char *buf,
			 size_t len, cJSON **last, int *done)
{
	struct raw_rec *recs;
	const char *lo = NULL, *hi = NULL;
	size_t nrec, hn;
	char *head;
	cJSON *hdoc = NULL;
	int rc = -1;

	*done = 0;
	if (raw_records(buf, len, &recs, &nrec, &lo, &hi) < 0)
		goto out;
	hn = (size_t)(lo - buf);
	head = malloc(len - (size_t)(hi - lo) + 3);
	if (head == NULL)
		goto out;
	memcpy(head, buf, hn);
	memcpy(head + hn, "[]", 2);
	memcpy(head + hn + 2, hi, len - (size_t)(hi - buf));
	hdoc = cJSON_ParseWithLength(head, len - (size_t)(hi - lo) + 2);
	free(head);
	if (hdoc != NULL)
		rc = check_records(file, hdoc, recs, nrec);
	if (rc == CTL_OK)
		rc = import_send_raw(x, recs, nrec, last);
	*done = rc != -1;
out:
	cJSON_Delete(hdoc);
	free(recs);
	return rc;
}

int ctl_import(struct ctl *x, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "format", required_argument, NULL, 'f' },
		{ NULL, 0, NULL, 0 },
	};
	cJSON *doc, *last = NULL;
	size_t len;
	char *buf;
	int ch, rc, done, tunableop = 0;

	opterr = 0;
	optind = 0; /* 0: glibc re-initialises (permuting again) */
	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (ch == 'j')
			x->json = 1;
		else if (ch == 'f' && strcmp(optarg, "tunableop") == 0)
			tunableop = 1;
		else if (ch == 'f' && strcmp(optarg, "json") == 0)
			tunableop = 0;
		else
			return ctl_usage(x, "bad option '%s' (--format "
					 "json|tunableop)", argv[optind - 1]);
	}
	if (argc - optind != 1)
		return ctl_usage(x, "import needs exactly one FILE");
	if (tunableop)
		return ctl_import_tunableop(x, argv[optind]);
	rc = ctl_read_file(argv[optind], &buf, &len);
	if (rc != CTL_OK)
		return rc;
	rc = import_stream(x, argv[optind], buf, len, &last, &done);
	if (done) {
		free(buf);
		doc = NULL;
		goto out;
	}
	/* the scan gave up: parse, check and print the whole file */
	doc = cJSON_ParseWithLength(buf, len);
	free(buf);
	if (doc == NULL) {
		ctl_err("invalid", "import failed: %s: not valid JSON",
			argv[optind]);
		return CTL_INVALID;
	}
	rc = check_export(argv[optind], doc);
	if (rc == CTL_OK)
		rc = import_send(x, cJSON_GetObjectItemCaseSensitive(doc,
								     "results"),
				 &last);
out:
	cJSON_Delete(doc);
	if (rc == CTL_OK)
		ctl_out(x, last, print_imported);
	cJSON_Delete(last);
	return rc;
}
