/*
 * cmd_io.c -- flytune-ctl export and import.
 *
 * Export file (schemas/export-file.json):
 *   {"format":"flytuned-export","version":1,"device":..,"libver":..,
 *    "results":[result...]}
 * CSV: a header line, then one row per result.
 * Import validates the whole file first (size cap checked before reading,
 * then the shape: format/version, every result's fields and types), then
 * sends it in chunks with "more": true until the last, so the daemon
 * commits all or nothing.
 *
 * Owns: the files it opens.  Thread: main.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl.h"

#define EXPORT_FORMAT "flytuned-export"
#define EXPORT_VERSION 1

static const char *const csv_cols[] = {
	"key", "device", "libver", "variant", "params",
	"median_us", "mad_us", "tune_s", "tuned_at", NULL,
};

/* Device and libver from a hello (the export file's header fields). */
static int identity(struct ctl *x, cJSON **device, cJSON **libver)
{
	cJSON *req = ctl_req("hello"), *resp;
	int rc;

	*device = *libver = NULL;
	if (req != NULL) {
		cJSON_AddNumberToObject(req, "version", FLY_PROTO_VERSION);
		cJSON_AddStringToObject(req, "client", "flytune-ctl");
	}
	rc = ctl_call(x, req, 0, &resp);
	if (rc != CTL_OK)
		return rc;
	*device = cJSON_DetachItemFromObjectCaseSensitive(resp, "device");
	*libver = cJSON_DetachItemFromObjectCaseSensitive(resp, "libver");
	cJSON_Delete(resp);
	if (*device == NULL)
		*device = cJSON_CreateNull();
	if (*libver == NULL)
		*libver = cJSON_CreateNull();
	return CTL_OK;
}

/* Write one CSV field: quoted when it holds a comma, quote or newline. */
static void csv_field(FILE *f, const cJSON *v)
{
	char *s = cJSON_IsString(v) ? NULL : cJSON_PrintUnformatted(v);
	const char *t = cJSON_IsString(v) ? v->valuestring : s ? s : "";

	if (v == NULL)
		t = "";
	if (strpbrk(t, ",\"\n") == NULL) {
		fputs(t, f);
	} else {
		fputc('"', f);
		for (; *t; t++) {
			if (*t == '"')
				fputc('"', f);
			fputc(*t, f);
		}
		fputc('"', f);
	}
	free(s);
}

static void write_csv(FILE *f, const cJSON *results)
{
	const cJSON *r;

	for (int i = 0; csv_cols[i]; i++)
		fprintf(f, "%s%s", i ? "," : "", csv_cols[i]);
	fputc('\n', f);
	cJSON_ArrayForEach(r, results) {
		for (int i = 0; csv_cols[i]; i++) {
			if (i)
				fputc(',', f);
			csv_field(f, cJSON_GetObjectItemCaseSensitive(
					     r, csv_cols[i]));
		}
		fputc('\n', f);
	}
}

/* Parse export's options.  @return -1 to go on, else an exit code. */
static int export_opts(struct ctl *x, int argc, char **argv, int *csv,
		       const char **file)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "format", required_argument, NULL, 'f' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	opterr = 0;
	optind = 1;
	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (ch == 'j') {
			x->json = 1;
		} else if (ch == 'f' && strcmp(optarg, "json") == 0) {
			*csv = 0;
		} else if (ch == 'f' && strcmp(optarg, "csv") == 0) {
			*csv = 1;
		} else {
			return ctl_usage(x, "bad option '%s' (--format json|csv)",
					 argv[optind - 1]);
		}
	}
	if (argc - optind > 1)
		return ctl_usage(x, "export takes at most one FILE");
	*file = argc > optind ? argv[optind] : "-";
	return -1;
}

/* Write @p doc (json) or its results (csv) to @p file ("-": stdout). */
static int export_write(struct ctl *x, const char *file, int csv,
			const cJSON *doc)
{
	int to_stdout = strcmp(file, "-") == 0;
	FILE *f = to_stdout ? stdout : fopen(file, "w");
	char *text;
	int bad;

	if (f == NULL) {
		fprintf(stderr, "export failed: %s: %s\n", file,
			strerror(errno));
		return CTL_ERR;
	}
	if (csv) {
		write_csv(f, cJSON_GetObjectItemCaseSensitive(doc, "results"));
	} else {
		text = cJSON_Print(doc);
		if (text != NULL)
			fprintf(f, "%s\n", text);
		free(text);
	}
	bad = ferror(f);
	if (!to_stdout)
		bad |= fclose(f) != 0;
	else
		bad |= fflush(f) != 0;
	if (bad) {
		fprintf(stderr, "export failed: %s: write error\n", file);
		return CTL_ERR;
	}
	return CTL_OK;
}

int ctl_export(struct ctl *x, int argc, char **argv)
{
	cJSON *doc, *results, *device, *libver, *base;
	const char *file = "-";
	int csv = 0, rc;

	rc = export_opts(x, argc, argv, &csv, &file);
	if (rc >= 0)
		return rc;
	rc = identity(x, &device, &libver);
	if (rc != CTL_OK)
		return rc;
	base = ctl_req("export");
	rc = ctl_page_all(x, base, &results);
	cJSON_Delete(base);
	if (rc != CTL_OK) {
		cJSON_Delete(device);
		cJSON_Delete(libver);
		return rc;
	}
	doc = cJSON_CreateObject();
	cJSON_AddStringToObject(doc, "format", EXPORT_FORMAT);
	cJSON_AddNumberToObject(doc, "version", EXPORT_VERSION);
	cJSON_AddItemToObject(doc, "device", device);
	cJSON_AddItemToObject(doc, "libver", libver);
	cJSON_AddItemToObject(doc, "results", results);
	rc = export_write(x, file, csv, doc);
	if (rc == CTL_OK && strcmp(file, "-") != 0 && !x->json)
		fprintf(stderr, "exported %d result(s) to %s\n",
			cJSON_GetArraySize(results), file);
	cJSON_Delete(doc);
	return rc;
}

/* ---------------------------------------------------------------- import */

/* Read a whole file ("-": stdin) of at most CTL_IMPORT_CAP bytes; the
 * size of a regular file is checked before reading anything.
 * @return CTL_OK (caller frees *buf), CTL_INVALID (too big), CTL_ERR. */
static int read_capped(const char *file, char **buf, size_t *len)
{
	int fd = strcmp(file, "-") == 0 ? STDIN_FILENO :
					   open(file, O_RDONLY | O_CLOEXEC);
	size_t cap = CTL_IMPORT_CAP, n = 0, size = 65536;
	struct stat st;
	char *p = NULL, *q;
	ssize_t r;

	*buf = NULL;
	if (fd < 0) {
		fprintf(stderr, "import failed: %s: %s\n", file,
			strerror(errno));
		return CTL_ERR;
	}
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
	    (uint64_t)st.st_size > cap) {
		fprintf(stderr, "import failed: %s: %lld bytes, over the "
			"%zu-byte cap\n", file, (long long)st.st_size, cap);
		goto err_too_big;
	}
	for (;;) {
		if (n == size || p == NULL) {
			size = p == NULL ? size : size * 2;
			q = realloc(p, size + 1);
			if (q == NULL)
				goto err_io;
			p = q;
		}
		r = read(fd, p + n, size - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			goto err_io;
		if (r == 0)
			break;
		n += (size_t)r;
		if (n > cap) {
			fprintf(stderr, "import failed: %s: over the %zu-byte "
				"cap\n", file, cap);
			goto err_too_big;
		}
	}
	if (fd != STDIN_FILENO)
		close(fd);
	p[n] = '\0';
	*buf = p;
	*len = n;
	return CTL_OK;

err_io:
	fprintf(stderr, "import failed: %s: %s\n", file, strerror(errno));
	free(p);
	if (fd != STDIN_FILENO)
		close(fd);
	return CTL_ERR;
err_too_big:
	free(p);
	if (fd != STDIN_FILENO)
		close(fd);
	return CTL_INVALID;
}

static int is_int(const cJSON *v)
{
	return cJSON_IsNumber(v) && isfinite(v->valuedouble) &&
	       v->valuedouble == floor(v->valuedouble) &&
	       fabs(v->valuedouble) <= 9007199254740992.0;
}

static int is_nonneg(const cJSON *v)
{
	return cJSON_IsNumber(v) && isfinite(v->valuedouble) &&
	       v->valuedouble >= 0;
}

/* Check one result's fields and types.  @return NULL or what is wrong. */
static const char *check_result(const cJSON *r, char *why, size_t cap)
{
	static const char *const known[] = {
		"key", "device", "libver", "variant", "params", "median_us",
		"mad_us", "tune_s", "tuned_at", NULL,
	};
	const cJSON *it, *v;
	struct fly_problem p;
	int n = 0, i;

	if (!cJSON_IsObject(r))
		return "not an object";
	cJSON_ArrayForEach(it, r) {
		for (i = 0; known[i] && strcmp(known[i], it->string); i++)
			;
		if (known[i] == NULL) {
			snprintf(why, cap, "unknown field \"%s\"", it->string);
			return why;
		}
	}
	v = cJSON_GetObjectItemCaseSensitive(r, "key");
	if (!cJSON_IsString(v) || fly_problem_from_key(v->valuestring, &p))
		return "key: not a canonical key";
	v = cJSON_GetObjectItemCaseSensitive(r, "variant");
	if (!cJSON_IsString(v) || v->valuestring[0] == '\0' ||
	    strlen(v->valuestring) >= FLY_VARIANT_MAX)
		return "variant: expected a non-empty name";
	v = cJSON_GetObjectItemCaseSensitive(r, "params");
	if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > FLY_PARAMS_MAX)
		return "params: expected an array of at most 8 integers";
	cJSON_ArrayForEach(it, v) if (!is_int(it)) n++;
	if (n)
		return "params: expected integers";
	if (!is_nonneg(cJSON_GetObjectItemCaseSensitive(r, "median_us")))
		return "median_us: expected a number >= 0";
	if (!is_nonneg(cJSON_GetObjectItemCaseSensitive(r, "mad_us")))
		return "mad_us: expected a number >= 0";
	v = cJSON_GetObjectItemCaseSensitive(r, "tune_s");
	if (v != NULL && !is_nonneg(v))
		return "tune_s: expected a number >= 0";
	v = cJSON_GetObjectItemCaseSensitive(r, "tuned_at");
	if (v != NULL && !cJSON_IsString(v) && !is_nonneg(v))
		return "tuned_at: expected a time";
	v = cJSON_GetObjectItemCaseSensitive(r, "device");
	if (v != NULL && !cJSON_IsString(v) && !cJSON_IsObject(v))
		return "device: expected a string";
	v = cJSON_GetObjectItemCaseSensitive(r, "libver");
	if (v != NULL && !cJSON_IsString(v))
		return "libver: expected a string";
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
	else if (!cJSON_IsString(f) || strcmp(f->valuestring, EXPORT_FORMAT))
		bad = "format: expected \"" EXPORT_FORMAT "\"";
	else if (!is_int(v) || v->valuedouble != EXPORT_VERSION)
		bad = "version: expected 1";
	else if (!cJSON_IsArray(res))
		bad = "results: expected an array";
	if (bad != NULL) {
		fprintf(stderr, "import failed: %s: %s\n", file, bad);
		return CTL_INVALID;
	}
	cJSON_ArrayForEach(r, res) {
		bad = check_result(r, why, sizeof(why));
		if (bad != NULL) {
			fprintf(stderr, "import failed: %s: results[%d]: %s\n",
				file, i, bad);
			return CTL_INVALID;
		}
		i++;
	}
	return CTL_OK;
}

/* Send one chunk {"req":"import","results":chunk,"more":more} (takes
 * ownership of @p chunk).  *imported accumulates the reply's count. */
static int import_chunk(struct ctl *x, cJSON *chunk, int more,
			double *imported, cJSON **last)
{
	cJSON *req = ctl_req("import"), *resp, *n;
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
	n = cJSON_GetObjectItemCaseSensitive(resp, "imported");
	if (cJSON_IsNumber(n))
		*imported = more ? *imported : n->valuedouble;
	cJSON_Delete(*last);
	*last = resp;
	return CTL_OK;
}

/* Send every result in chunks of at most CTL_CHUNK_BYTES of JSON. */
static int import_send(struct ctl *x, cJSON *res, double *imported,
		       cJSON **last)
{
	cJSON *chunk = cJSON_CreateArray(), *r;
	size_t bytes = 0;
	int rc;

	while (chunk != NULL && cJSON_GetArraySize(res) > 0) {
		char *s;
		size_t n;

		r = cJSON_DetachItemFromArray(res, 0);
		s = cJSON_PrintUnformatted(r);
		n = s ? strlen(s) + 1 : 0;
		free(s);
		if (bytes + n > CTL_CHUNK_BYTES &&
		    cJSON_GetArraySize(chunk) > 0) {
			rc = import_chunk(x, chunk, 1, imported, last);
			chunk = cJSON_CreateArray();
			bytes = 0;
			if (rc != CTL_OK) {
				cJSON_Delete(r);
				cJSON_Delete(chunk);
				return rc;
			}
		}
		cJSON_AddItemToArray(chunk, r);
		bytes += n;
	}
	if (chunk == NULL)
		return CTL_ERR;
	return import_chunk(x, chunk, 0, imported, last);
}

int ctl_import(struct ctl *x, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 },
	};
	cJSON *doc, *last = NULL;
	double imported = 0;
	size_t len;
	char *buf;
	int ch, rc;

	opterr = 0;
	optind = 1;
	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (ch != 'j')
			return ctl_usage(x, "bad option '%s'",
					 argv[optind - 1]);
		x->json = 1;
	}
	if (argc - optind != 1)
		return ctl_usage(x, "import needs exactly one FILE");
	rc = read_capped(argv[optind], &buf, &len);
	if (rc != CTL_OK)
		return rc;
	doc = cJSON_ParseWithLength(buf, len);
	free(buf);
	if (doc == NULL) {
		fprintf(stderr, "import failed: %s: not valid JSON\n",
			argv[optind]);
		return CTL_INVALID;
	}
	rc = check_export(argv[optind], doc);
	if (rc == CTL_OK)
		rc = import_send(x, cJSON_GetObjectItemCaseSensitive(doc,
								     "results"),
				 &imported, &last);
	cJSON_Delete(doc);
	if (rc == CTL_OK && x->json)
		ctl_print_json(last);
	else if (rc == CTL_OK)
		printf("imported %.0f result(s)\n", imported);
	cJSON_Delete(last);
	return rc;
}
