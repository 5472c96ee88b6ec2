/*
 * cmd_import.c -- import FILE: validate a whole export file first (size
 * cap checked before reading, file.c; then the header and every record, the
 * records by fly_record_check, the validator the daemon uses too), then
 * send it in chunks with "more": true until the last, so the daemon
 * commits all or nothing.
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

/* A string of 1..@p max bytes. */
static int is_str(const cJSON *v, size_t max)
{
	return cJSON_IsString(v) && v->valuestring[0] != '\0' &&
	       strlen(v->valuestring) <= max;
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
		return "device: expected backend, fingerprint and id strings";
	return NULL;
}

/* Validate the export-file shape.  @return CTL_OK or CTL_INVALID. */
static int check_export(const char *file, const cJSON *doc)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(doc, "format");
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(doc, "version");
	const cJSON *res = cJSON_GetObjectItemCaseSensitive(doc, "results");
	const cJSON *r;
	const char *bad = NULL;
	char why[128];
	int i = 0;

	if (!cJSON_IsObject(doc))
		bad = "not a JSON object";
	else if (!cJSON_IsString(f) || strcmp(f->valuestring, CTL_EXPORT_FORMAT))
		bad = "format: expected \"" CTL_EXPORT_FORMAT "\"";
	else if (!is_int(v) || v->valuedouble != CTL_EXPORT_VERSION)
		bad = "version: expected 1";
	else if (!cJSON_IsArray(res))
		bad = "results: expected an array";
	else if (!is_str(cJSON_GetObjectItemCaseSensitive(doc, "libver"), 31))
		bad = "libver: expected a version (1..31 characters)";
	else
		bad = check_header_device(doc);
	if (bad != NULL) {
		ctl_err("invalid", "import failed: %s: %s", file, bad);
		return CTL_INVALID;
	}
	cJSON_ArrayForEach(r, res) {
		if (fly_record_check(r, why, sizeof(why)) < 0) {
			ctl_err("invalid", "import failed: %s: results[%d]: %s",
				file, i, why);
			return CTL_INVALID;
		}
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

/* The last reply's count: every staged and committed row. */
static void print_imported(const cJSON *resp)
{
	const cJSON *n = cJSON_GetObjectItemCaseSensitive(resp, "imported");

	printf("imported %.0f result(s)\n",
	       cJSON_IsNumber(n) ? n->valuedouble : 0.0);
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
	int ch, rc, tunableop = 0;

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
	cJSON_Delete(doc);
	if (rc == CTL_OK)
		ctl_out(x, last, print_imported);
	cJSON_Delete(last);
	return rc;
}
