/*
 * cmd_export.c -- export [--format json|csv|tunableop] [FILE]: every
 * result, paged from the daemon, as an export file
 * (schemas/export-file.json: {"format":"flytuned-export","version":1,
 * "device":..,"libver":..,"results":[result...]}), as CSV (a header line,
 * then one row per result) or as a PyTorch TunableOp results file
 * (cmd_tunableop.c).
 *
 * Owns: the file it writes.  Thread: main.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

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

/* The tunableop format's options. */
struct topts {
	int on;               /* --format tunableop */
	const char *pt;       /* --pt-version */
	const char *from;     /* --validators FILE */
};

/* Parse export's options.  @return -1 to go on, else an exit code. */
static int export_opts(struct ctl *x, int argc, char **argv, int *csv,
		       const char **file, struct topts *to)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "format", required_argument, NULL, 'f' },
		{ "pt-version", required_argument, NULL, 'p' },
		{ "validators", required_argument, NULL, 'v' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	opterr = 0;
	optind = 0; /* 0: glibc re-initialises (permuting again) */
	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (ch == 'j') {
			x->json = 1;
		} else if (ch == 'f' && strcmp(optarg, "json") == 0) {
			*csv = 0;
		} else if (ch == 'f' && strcmp(optarg, "csv") == 0) {
			*csv = 1;
		} else if (ch == 'f' && strcmp(optarg, "tunableop") == 0) {
			to->on = 1;
		} else if (ch == 'p') {
			to->pt = optarg;
		} else if (ch == 'v') {
			to->from = optarg;
		} else {
			return ctl_usage(x, "bad option '%s' (--format "
					 "json|csv|tunableop)",
					 argv[optind - 1]);
		}
	}
	if ((to->pt != NULL || to->from != NULL) && !to->on)
		return ctl_usage(x, "--pt-version and --validators go with "
				 "--format tunableop");
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
		ctl_err("internal", "export failed: %s: %s", file,
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
		ctl_err("internal", "export failed: %s: write error", file);
		return CTL_ERR;
	}
	return CTL_OK;
}

int ctl_export(struct ctl *x, int argc, char **argv)
{
	cJSON *doc, *results, *device, *libver, *base;
	const char *file = "-";
	struct topts to = {0};
	int csv = 0, rc;

	rc = export_opts(x, argc, argv, &csv, &file, &to);
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
	if (to.on) {
		cJSON_Delete(device);
		cJSON_Delete(libver);
		rc = ctl_export_tunableop(x, results, file, to.pt, to.from);
		cJSON_Delete(results);
		return rc;
	}
	doc = cJSON_CreateObject();
	cJSON_AddStringToObject(doc, "format", CTL_EXPORT_FORMAT);
	cJSON_AddNumberToObject(doc, "version", CTL_EXPORT_VERSION);
	cJSON_AddItemToObject(doc, "device", device);
	cJSON_AddItemToObject(doc, "libver", libver);
	cJSON_AddItemToObject(doc, "results", results);
	rc = export_write(x, file, csv, doc);
	if (rc == CTL_OK && strcmp(file, "-") != 0)
		ctl_export_done(x, file, cJSON_GetArraySize(results));
	cJSON_Delete(doc);
	return rc;
}
