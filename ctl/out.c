/*
 * out.c -- flytune-ctl's output layer: every command's result goes out
 * through ctl_out (one JSON line with --json, else the command's text
 * printer), every error through ctl_err/ctl_usage/ctl_reply_error, and
 * exit codes and wire error names map through one table.
 *
 * With --json every run prints exactly one JSON document on stdout: the
 * reply, the assembled document, or for an error the daemon's error
 * reply or, for an error found here (usage, bad key, daemon down, a bad
 * file), {"ok":false,"error":{"code","message"}} built by main() from
 * the last ctl_err() (issue 18 item 10).
 *
 * Owns: the last error's message and code, whether a document went to
 * stdout.  Thread: main.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

static int json_printed;         /* a document went to stdout */
static char err_msg[1024];       /* the last error found here */
static const char *err_code;     /* its wire name (schemas/common.json) */

/* Exit codes and the wire error names (schemas/common.json error_code)
 * that give them.  The first entry of an exit code names it in an error
 * document; names not listed exit CTL_ERR, which is "internal". */
static const struct {
	const char *code;
	int rc;
} exit_map[] = {
	{ "usage", CTL_USAGE },        { "down", CTL_DOWN },
	{ "not_found", CTL_NOTFOUND }, { "permission", CTL_PERM },
	{ "invalid", CTL_INVALID },    { "busy", CTL_BUSY },
	{ "timeout", CTL_TIMEOUT },    { "max_clients", CTL_MAXCLIENTS },
	/* the daemon's finer names of a validation error */
	{ "bad_key", CTL_INVALID },    { "bad_op", CTL_INVALID },
	{ "bad_dtype", CTL_INVALID },  { "bad_dim", CTL_INVALID },
	{ "overflow", CTL_INVALID },   { "key_too_long", CTL_INVALID },
	{ "too_big", CTL_INVALID },
};
#define NEXIT (sizeof(exit_map) / sizeof(exit_map[0]))

int ctl_exit_for_code(const char *code)
{
	for (size_t i = 0; code && i < NEXIT; i++)
		if (strcmp(exit_map[i].code, code) == 0)
			return exit_map[i].rc;
	return CTL_ERR;
}

const char *ctl_code_for_exit(int rc)
{
	for (size_t i = 0; i < NEXIT; i++)
		if (exit_map[i].rc == rc)
			return exit_map[i].code;
	return "internal";
}

static void print_json(const cJSON *o)
{
	char *s = cJSON_PrintUnformatted(o);

	if (s != NULL)
		printf("%s\n", s);
	free(s);
	json_printed = 1;
}

void ctl_out(const struct ctl *x, const cJSON *doc, ctl_text_fn *text)
{
	if (x->json)
		print_json(doc);
	else if (text != NULL)
		text(doc);
}

void ctl_err(const char *code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err_msg, sizeof(err_msg), fmt, ap);
	va_end(ap);
	err_code = code;
	fprintf(stderr, "%s\n", err_msg);
}

int ctl_usage(const struct ctl *x, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err_msg, sizeof(err_msg), fmt, ap);
	va_end(ap);
	err_code = "usage";
	fprintf(stderr, "flytune-ctl: %s", err_msg);
	if (x && x->cmd)
		fprintf(stderr, "\nTry 'flytune-ctl help %s'.\n", x->cmd);
	else
		fprintf(stderr, "\nTry 'flytune-ctl --help'.\n");
	return CTL_USAGE;
}

int ctl_reply_error(const struct ctl *x, const cJSON *o)
{
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "error");
	const char *msg = ctl_str(e, "message");
	const char *cs = ctl_str(e, "code");

	if (cs == NULL)
		cs = "internal";
	fprintf(stderr, "%s failed: %s (%s)\n", x->cmd,
		msg ? msg : "no message", cs);
	ctl_out(x, o, NULL);
	return ctl_exit_for_code(cs);
}

void ctl_error_doc(int rc)
{
	cJSON *o = cJSON_CreateObject(), *e;

	if (json_printed || o == NULL) {
		cJSON_Delete(o);
		return;
	}
	cJSON_AddFalseToObject(o, "ok");
	e = cJSON_AddObjectToObject(o, "error");
	cJSON_AddStringToObject(e, "code", err_code ? err_code :
				ctl_code_for_exit(rc));
	cJSON_AddStringToObject(e, "message", err_msg[0] ? err_msg :
				"flytune-ctl failed");
	print_json(o);
	cJSON_Delete(o);
}

static void print_flat(const char *prefix, const cJSON *o)
{
	const cJSON *it;
	char name[256];

	cJSON_ArrayForEach(it, o) {
		if (prefix == NULL && (strcmp(it->string, "ok") == 0 ||
				       strcmp(it->string, "id") == 0))
			continue;
		snprintf(name, sizeof(name), "%s%s%s", prefix ? prefix : "",
			 prefix ? "." : "", it->string);
		if (cJSON_IsObject(it)) {
			print_flat(name, it);
		} else if (cJSON_IsString(it)) {
			printf("%s: %s\n", name, it->valuestring);
		} else if (cJSON_IsNumber(it) &&
			   it->valuedouble != floor(it->valuedouble)) {
			/* a measurement: 6 significant digits, not the
			 * 17 that round-trip a double (0.1104999...) */
			printf("%s: %.6g\n", name, it->valuedouble);
		} else {
			char *s = cJSON_PrintUnformatted(it);

			printf("%s: %s\n", name, s ? s : "?");
			free(s);
		}
	}
}

void ctl_text_flat(const cJSON *doc)
{
	print_flat(NULL, doc);
}

double ctl_num(const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

const char *ctl_str(const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

void ctl_params_text(const cJSON *o, char *buf, size_t cap)
{
	char *s = cJSON_PrintUnformatted(
		cJSON_GetObjectItemCaseSensitive(o, "params"));

	snprintf(buf, cap, "%s", s ? s : "[]");
	free(s);
}

/* After an export to a file: {"ok":true,"exported":N} with --json, else
 * a note on stderr (stdout stays empty). */
void ctl_export_done(const struct ctl *x, const char *file, int n)
{
	cJSON *o = cJSON_CreateObject();

	if (o != NULL) {
		cJSON_AddTrueToObject(o, "ok");
		cJSON_AddNumberToObject(o, "exported", n);
		ctl_out(x, o, NULL);
	}
	cJSON_Delete(o);
	if (!x->json)
		fprintf(stderr, "exported %d result(s) to %s\n", n, file);
}

void ctl_print_fleet_job(const cJSON *job)
{
	const char *fl = ctl_str(job, "fleet");
	double left = ctl_num(job, "fleet_wait_s");

	if (fl == NULL)
		return;
	printf(" (fleet: %s", fl);
	if (!isnan(left))
		printf(", %.1f s left", left);
	printf(")");
}
