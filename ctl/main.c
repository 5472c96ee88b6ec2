/*
 * main.c -- flytune-ctl: the admin CLI of flytuned.  Parses the global
 * options, opens a client, dispatches to a subcommand: status, stats,
 * get, explain (the trial leaderboard), list (paged), tune (with the
 * --wait progress line), forget, export and import.
 *
 * One file on purpose: ctl/ may include only flyclient.h from the
 * project (STYLE.md R2, tools/check-layering.sh), so it has no private
 * header to share between files.  Requests are built as JSON with cJSON
 * and sent through fly_request().
 *
 * Owns: the fly_client of the run, the files it opens.  Thread: main,
 * plus the progress thread of a waiting tune, which only writes to stderr
 * until told to stop.
 *
 * Export file (schemas/export-file.json):
 *   {"format":"flytuned-export","version":1,"device":..,"libver":..,
 *    "results":[result...]}
 * CSV: a header line, then one row per result.  Import validates the
 * whole file first (size cap checked before reading, then the shape:
 * format/version, every result's fields and types), then sends it in
 * chunks with "more": true until the last, so the daemon commits all or
 * nothing.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "flyclient.h"

/* Documented exit codes (--help, man/flytune-ctl.1). */
#define CTL_OK 0
#define CTL_ERR 1
#define CTL_USAGE 2
#define CTL_DOWN 3
#define CTL_NOTFOUND 4
#define CTL_PERM 7
#define CTL_INVALID 8
#define CTL_BUSY 9
#define CTL_TIMEOUT 10
#define CTL_MAXCLIENTS 11

#define CTL_IMPORT_CAP (64u * 1024u * 1024u) /* import file size cap */
#define CTL_CHUNK_BYTES 48000 /* import/... request payload budget */
#define CTL_PAGE 500          /* list/export page size */

struct ctl {
	fly_client *c;        /* the connection */
	int json;             /* --json: one JSON document on stdout */
	uint32_t timeout_ms;  /* per-request timeout (--timeout MS) */
	const char *cmd;      /* subcommand name, for messages */
};

/* One subcommand: argc/argv start at the subcommand's own arguments
 * (argv[0] is the subcommand name).  Returns an exit code. */
static int ctl_status(struct ctl *x, int argc, char **argv);
static int ctl_stats(struct ctl *x, int argc, char **argv);
static int ctl_get(struct ctl *x, int argc, char **argv);
static int ctl_explain(struct ctl *x, int argc, char **argv);
static int ctl_list(struct ctl *x, int argc, char **argv);
static int ctl_tune(struct ctl *x, int argc, char **argv);
static int ctl_forget(struct ctl *x, int argc, char **argv);
static int ctl_export(struct ctl *x, int argc, char **argv);
static int ctl_import(struct ctl *x, int argc, char **argv);

/* Print the help of a subcommand (NULL: the general help) to @p f. */
static void ctl_help(FILE *f, const char *cmd);
/* "usage" error: message + hint on stderr; returns CTL_USAGE. */
static int ctl_usage(struct ctl *x, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Send @p req (takes ownership, even on failure); on success *resp is the
 * parsed reply with "ok": true (caller owns; cJSON_Delete).  On a daemon
 * error, prints "<cmd> failed: MESSAGE (code)" (and, with --json, the
 * reply on stdout) and returns its exit code; *resp is NULL.
 * @p timeout_ms 0: x->timeout_ms.  @return CTL_OK or an exit code. */
static int ctl_call(struct ctl *x, cJSON *req, uint32_t timeout_ms, cJSON **resp);
/* Validate a canonical key; prints the error with an example.
 * @return CTL_OK or CTL_INVALID. */
static int ctl_check_key(struct ctl *x, const char *key);
/* Exit code for a wire error code name ("not_found", ...). */
static int ctl_exit_for_code(const char *code);
/* Print a JSON document on stdout (unformatted, one line). */
static void ctl_print_json(const cJSON *o);
/* Print an object as "name: value" lines, nested names dotted. */
static void ctl_print_flat(const char *prefix, const cJSON *o);
/* Page through a request (list, export): @p base holds the filters; each
 * page adds after/limit.  @param[out] all every result, in order (caller
 * owns; cJSON_Delete).  @return exit code. */
static int ctl_page_all(struct ctl *x, const cJSON *base, cJSON **all);
/* A new request object {"req": name}; NULL on ENOMEM. */
static cJSON *ctl_req(const char *name);


/* ================================================================ main, helpers */

#define CTL_VERSION "0.1.0"

struct cmd {
	const char *name;
	int (*fn)(struct ctl *x, int argc, char **argv);
	const char *usage;
	const char *help;
};

static const struct cmd cmds[] = {
	{ "status", ctl_status, "status",
	  "Show the daemon's state, backend, device, queue and worker." },
	{ "get", ctl_get, "get KEY", "Show the tuned result of one key." },
	{ "explain", ctl_explain, "explain KEY",
	  "Show the trial leaderboard of a key: every candidate sorted by\n"
	  "  median, its noise (MAD), reps, outcome and why losers lost." },
	{ "list", ctl_list, "list [--op OP] [--dtype DT] [--status S]",
	  "List results (paged through the daemon); S is tuned, pending or\n"
	  "  default." },
	{ "tune", ctl_tune,
	  "tune KEY [--wait] [--force] [--timeout SECS]",
	  "Queue a key for tuning now; --force re-tunes a tuned key; --wait\n"
	  "  waits for the result (default 600 s), showing progress on a\n"
	  "  terminal." },
	{ "export", ctl_export, "export [--format json|csv] [FILE]",
	  "Write every result as an export file (json, the default) or as\n"
	  "  CSV; FILE \"-\" or none: stdout." },
	{ "import", ctl_import, "import FILE",
	  "Validate an export file (at most 64 MiB) and import it; the\n"
	  "  daemon commits all of it or nothing." },
	{ "forget", ctl_forget, "forget KEY | --all",
	  "Forget one key's result, or every result." },
	{ "stats", ctl_stats, "stats", "Show the daemon's counters." },
};
#define NCMDS (sizeof(cmds) / sizeof(cmds[0]))

static const char exit_codes[] =
	"Exit codes:\n"
	"  0  ok                    1  error\n"
	"  2  usage                 3  daemon not running\n"
	"  4  not found             7  permission denied\n"
	"  8  validation (bad key, bad import file)\n"
	"  9  busy (tuning queue full)   10  timeout\n"
	"  11 too many clients (the daemon is at max_clients)\n";

static const struct cmd *cmd_find(const char *name)
{
	for (size_t i = 0; i < NCMDS; i++)
		if (strcmp(cmds[i].name, name) == 0)
			return &cmds[i];
	return NULL;
}

static void ctl_help(FILE *f, const char *name)
{
	const struct cmd *c = name ? cmd_find(name) : NULL;

	if (c != NULL) {
		fprintf(f, "usage: flytune-ctl [GLOBAL OPTIONS] %s [--json]\n"
			"  %s\n\n%s", c->usage, c->help, exit_codes);
		return;
	}
	fprintf(f, "usage: flytune-ctl [GLOBAL OPTIONS] COMMAND [ARGS]\n\n"
		"Global options:\n"
		"  --socket PATH   daemon socket (default $FLYTUNED_SOCKET, else\n"
		"                  /run/flytuned/gpu<N>.sock)\n"
		"  --device N      GPU index for the default socket path\n"
		"  --json          print one JSON document on stdout\n"
		"  --timeout MS    per-request timeout (default 30000)\n"
		"  --help, --version\n\nCommands:\n");
	for (size_t i = 0; i < NCMDS; i++)
		fprintf(f, "  %s\n", cmds[i].usage);
	fprintf(f, "\nKEY is a canonical shape key, e.g. "
		"gemm/bf16/NT/m=4096,n=6144,k=4096\n"
		"'flytune-ctl help COMMAND' shows a command's help.\n\n%s",
		exit_codes);
}

static int ctl_usage(struct ctl *x, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "flytune-ctl: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	if (x && x->cmd)
		fprintf(stderr, "\nTry 'flytune-ctl help %s'.\n", x->cmd);
	else
		fprintf(stderr, "\nTry 'flytune-ctl --help'.\n");
	return CTL_USAGE;
}

static int ctl_exit_for_code(const char *code)
{
	static const struct {
		const char *name;
		int rc;
	} map[] = {
		{ "not_found", CTL_NOTFOUND }, { "permission", CTL_PERM },
		{ "bad_key", CTL_INVALID },    { "bad_op", CTL_INVALID },
		{ "bad_dtype", CTL_INVALID },  { "bad_dim", CTL_INVALID },
		{ "overflow", CTL_INVALID },   { "key_too_long", CTL_INVALID },
		{ "invalid", CTL_INVALID },    { "too_big", CTL_INVALID },
		{ "busy", CTL_BUSY },          { "max_clients", CTL_MAXCLIENTS },
		{ "timeout", CTL_TIMEOUT },    { "down", CTL_DOWN },
	};

	for (size_t i = 0; code && i < sizeof(map) / sizeof(map[0]); i++)
		if (strcmp(map[i].name, code) == 0)
			return map[i].rc;
	return CTL_ERR;
}

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

static cJSON *ctl_req(const char *name)
{
	cJSON *o = cJSON_CreateObject();

	if (o != NULL && cJSON_AddStringToObject(o, "req", name) == NULL) {
		cJSON_Delete(o);
		o = NULL;
	}
	return o;
}

static void ctl_print_json(const cJSON *o)
{
	char *s = cJSON_PrintUnformatted(o);

	if (s != NULL)
		printf("%s\n", s);
	free(s);
}

/* Report a daemon error reply; @return its exit code. */
static int reply_error(struct ctl *x, const cJSON *o)
{
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "error");
	const cJSON *code = cJSON_GetObjectItemCaseSensitive(e, "code");
	const cJSON *msg = cJSON_GetObjectItemCaseSensitive(e, "message");
	const char *cs = cJSON_IsString(code) ? code->valuestring : "internal";

	fprintf(stderr, "%s failed: %s (%s)\n", x->cmd,
		cJSON_IsString(msg) ? msg->valuestring : "no message", cs);
	if (x->json)
		ctl_print_json(o);
	return ctl_exit_for_code(cs);
}

static int ctl_call(struct ctl *x, cJSON *req, uint32_t timeout_ms, cJSON **resp)
{
	char *text, *out = NULL;
	size_t out_len = 0;
	cJSON *o;
	int rc;

	*resp = NULL;
	text = req ? cJSON_PrintUnformatted(req) : NULL;
	cJSON_Delete(req);
	if (text == NULL) {
		fprintf(stderr, "%s failed: out of memory\n", x->cmd);
		return CTL_ERR;
	}
	rc = fly_request(x->c, text, strlen(text),
			 timeout_ms ? timeout_ms : x->timeout_ms, &out,
			 &out_len);
	free(text);
	if (rc < 0) {
		const char *m = fly_client_errmsg(x->c);

		fprintf(stderr, "%s failed: %s (%d)%s%s\n", x->cmd,
			rc == FLY_E_DOWN ? "daemon not running" :
			rc == FLY_E_MAXCLIENTS ? "too many clients" :
					   fly_strerror(rc),
			rc, m[0] ? ": " : "", m);
		return exit_for_err(rc);
	}
	o = cJSON_ParseWithLength(out, out_len);
	fly_free(out);
	if (!cJSON_IsObject(o)) {
		cJSON_Delete(o);
		fprintf(stderr, "%s failed: malformed reply\n", x->cmd);
		return CTL_ERR;
	}
	if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "ok"))) {
		rc = reply_error(x, o);
		cJSON_Delete(o);
		return rc;
	}
	*resp = o;
	return CTL_OK;
}

static int ctl_check_key(struct ctl *x, const char *key)
{
	struct fly_problem p;
	int rc = fly_problem_from_key(key, &p);

	if (rc == 0)
		return CTL_OK;
	fprintf(stderr,
		"%s failed: bad key '%s': %s (%d)\n"
		"  keys are canonical, e.g. gemm/bf16/NT/m=4096,n=6144,k=4096 "
		"or rmsnorm/fp16/m=8192,n=4096/residual\n",
		x->cmd, key, fly_strerror(rc), rc);
	return CTL_INVALID;
}

static void ctl_print_flat(const char *prefix, const cJSON *o)
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
			ctl_print_flat(name, it);
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

enum { OPT_SOCKET = 1000, OPT_DEVICE, OPT_JSON, OPT_TIMEOUT, OPT_HELP,
       OPT_VERSION };

/* Parse the global options (up to the subcommand).  @return -1 to go on,
 * else an exit code. */
static int parse_global(int argc, char **argv, struct ctl *x,
			struct fly_client_opts *o)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, OPT_SOCKET },
		{ "device", required_argument, NULL, OPT_DEVICE },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "timeout", required_argument, NULL, OPT_TIMEOUT },
		{ "help", no_argument, NULL, OPT_HELP },
		{ "version", no_argument, NULL, OPT_VERSION },
		{ NULL, 0, NULL, 0 },
	};
	char *end;
	long v;
	int ch;

	opterr = 0;
	while ((ch = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (ch) {
		case OPT_SOCKET:
			o->socket_path = optarg;
			break;
		case OPT_DEVICE:
		case OPT_TIMEOUT:
			errno = 0;
			v = strtol(optarg, &end, 10);
			if (errno || *end || end == optarg || v < 0 ||
			    v > 100000000)
				return ctl_usage(x, "bad number '%s'", optarg);
			if (ch == OPT_DEVICE)
				o->device = (int)v;
			else
				x->timeout_ms = (uint32_t)v;
			break;
		case OPT_JSON:
			x->json = 1;
			break;
		case 'h':
		case OPT_HELP:
			ctl_help(stdout, NULL);
			return CTL_OK;
		case OPT_VERSION:
			printf("flytune-ctl %s (protocol %d)\n", CTL_VERSION,
			       FLY_PROTO_VERSION);
			return CTL_OK;
		default:
			return ctl_usage(x, "unknown option '%s'",
					 argv[optind - 1]);
		}
	}
	return -1;
}

/* Whether a subcommand's arguments ask for help. */
static int wants_help(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0)
			return 0;
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
			return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct ctl x = { .timeout_ms = 30000 };
	struct fly_client_opts o = { 0 };
	const struct cmd *c;
	int rc;

	rc = parse_global(argc, argv, &x, &o);
	if (rc >= 0)
		return rc;
	if (optind >= argc)
		return ctl_usage(&x, "missing command");
	argc -= optind;
	argv += optind;
	if (strcmp(argv[0], "help") == 0) {
		if (argc > 1 && cmd_find(argv[1]) == NULL)
			return ctl_usage(&x, "unknown command '%s'", argv[1]);
		ctl_help(stdout, argc > 1 ? argv[1] : NULL);
		return CTL_OK;
	}
	c = cmd_find(argv[0]);
	if (c == NULL)
		return ctl_usage(&x, "unknown command '%s'", argv[0]);
	x.cmd = c->name;
	if (wants_help(argc, argv)) {
		ctl_help(stdout, c->name);
		return CTL_OK;
	}
	o.timeout_ms = x.timeout_ms;
	o.no_shm = 1; /* admin requests only */
	rc = fly_client_open_opts(&o, &x.c);
	if (rc < 0) {
		fprintf(stderr, "%s failed: %s (%d)\n", c->name,
			fly_strerror(rc), rc);
		return rc == -EINVAL ? CTL_USAGE : CTL_ERR;
	}
	optind = 0; /* 0: glibc re-initialises (permuting again) */
	rc = c->fn(&x, argc, argv);
	fly_client_close(x.c);
	return rc;
}

/* ====================================== status, stats, get, explain, list */

/* Parse a subcommand's options: only --json (and --help, handled by
 * main).  Positional arguments are left at argv[optind..]; @p npos is the
 * number required.  @return -1 to go on, else an exit code. */
static int parse_simple(struct ctl *x, int argc, char **argv, int npos)
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

static void print_flat(const cJSON *resp)
{
	ctl_print_flat(NULL, resp);
}

/* Send @p req (takes ownership), print the answer as JSON with --json,
 * else with @p human.  @return exit code. */
static int call_print(struct ctl *x, cJSON *req,
		      void (*human)(const cJSON *resp))
{
	cJSON *resp;
	int rc = ctl_call(x, req, 0, &resp);

	if (rc != CTL_OK)
		return rc;
	if (x->json)
		ctl_print_json(resp);
	else
		human(resp);
	cJSON_Delete(resp);
	return CTL_OK;
}

/* A request with no arguments, printed flat or as JSON. */
static int simple(struct ctl *x, int argc, char **argv, const char *req)
{
	int rc = parse_simple(x, argc, argv, 0);

	if (rc >= 0)
		return rc;
	return call_print(x, ctl_req(req), print_flat);
}

static int ctl_status(struct ctl *x, int argc, char **argv)
{
	return simple(x, argc, argv, "status");
}

static int ctl_stats(struct ctl *x, int argc, char **argv)
{
	return simple(x, argc, argv, "stats");
}

/* {"req": name, "key": KEY} after validating KEY.  *req NULL on error. */
static int key_req(struct ctl *x, int argc, char **argv, const char *name,
		   cJSON **req)
{
	int rc = parse_simple(x, argc, argv, 1);

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

static int ctl_get(struct ctl *x, int argc, char **argv)
{
	cJSON *req;
	int rc = key_req(x, argc, argv, "get", &req);

	return rc != CTL_OK ? rc : call_print(x, req, print_flat);
}

/* ---------------------------------------------------------------- explain */

static double num_field(const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static const char *str_field(const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Order trials by median; trials without one (faulted, wrong) last. */
static int trial_cmp(const void *a, const void *b)
{
	double ma = num_field(*(const cJSON *const *)a, "median_us");
	double mb = num_field(*(const cJSON *const *)b, "median_us");

	if (isnan(ma) || isnan(mb))
		return isnan(ma) - isnan(mb);
	return (ma > mb) - (ma < mb);
}

/* The "why" column of one trial. */
static void trial_note(const cJSON *t, double win, double best, int is_win,
		       char *buf, size_t cap)
{
	const char *out = str_field(t, "outcome");
	const char *why = str_field(t, "reason");
	double med = num_field(t, "median_us");
	double reps = num_field(t, "reps");

	if (why == NULL)
		why = str_field(t, "error");
	if (out == NULL)
		out = "ok";
	if (is_win)
		snprintf(buf, cap, "winner");
	else if (strcmp(out, "rejected") == 0 && !isnan(med) && best > 0)
		snprintf(buf, cap, "rejected after %.0f reps: %.2fx best",
			 isnan(reps) ? 0.0 : reps, med / best);
	else if (strcmp(out, "ok") == 0 && !isnan(med) && win > 0)
		snprintf(buf, cap, "%.2fx slower than winner", med / win);
	else
		snprintf(buf, cap, "%s%s%s", out, why ? ": " : "",
			 why ? why : "");
}

/* Print the params array of a trial as "[a,b]". */
static void params_text(const cJSON *t, char *buf, size_t cap)
{
	char *s = cJSON_PrintUnformatted(
		cJSON_GetObjectItemCaseSensitive(t, "params"));

	snprintf(buf, cap, "%s", s ? s : "[]");
	free(s);
}

static void print_leaderboard(const cJSON *resp)
{
	const cJSON *trials = cJSON_GetObjectItemCaseSensitive(resp, "trials");
	const cJSON *res = cJSON_GetObjectItemCaseSensitive(resp, "result");
	const char *wv = str_field(res, "variant");
	int n = cJSON_GetArraySize(trials), i = 0;
	const cJSON **v = calloc((size_t)n + 1, sizeof(*v));
	const cJSON *t;
	double win = num_field(res, "median_us"), best = NAN;
	char note[160], params[128];

	printf("key: %s\n", str_field(resp, "key") ? str_field(resp, "key")
						   : "?");
	printf("winner: %s\n", wv ? wv : "(none)");
	if (v == NULL)
		return;
	cJSON_ArrayForEach(t, trials) v[i++] = t;
	qsort(v, (size_t)n, sizeof(*v), trial_cmp);
	for (i = 0; i < n; i++)
		if (!isnan(num_field(v[i], "median_us")) && isnan(best))
			best = num_field(v[i], "median_us");
	printf("%-4s %-24s %-20s %12s %10s %6s  %s\n", "#", "variant",
	       "params", "median_us", "mad_us", "reps", "outcome");
	for (i = 0; i < n; i++) {
		const char *var = str_field(v[i], "variant");
		int is_win = wv && var && strcmp(var, wv) == 0 &&
			     !isnan(win) &&
			     num_field(v[i], "median_us") == win;

		trial_note(v[i], win, best, is_win, note, sizeof(note));
		params_text(v[i], params, sizeof(params));
		printf("%-4d %-24s %-20s %12.3f %10.3f %6.0f  %s\n", i + 1,
		       var ? var : "?", params, num_field(v[i], "median_us"),
		       num_field(v[i], "mad_us"), num_field(v[i], "reps"),
		       note);
	}
	free(v);
}

static int ctl_explain(struct ctl *x, int argc, char **argv)
{
	cJSON *req;
	int rc = key_req(x, argc, argv, "explain", &req);

	return rc != CTL_OK ? rc : call_print(x, req, print_leaderboard);
}

/* ---------------------------------------------------------------- list */

static int ctl_page_all(struct ctl *x, const cJSON *base, cJSON **all)
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
		while (cJSON_IsArray(res) && cJSON_GetArraySize(res) > 0)
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

static int ctl_list(struct ctl *x, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "op", required_argument, NULL, 'o' },
		{ "dtype", required_argument, NULL, 'd' },
		{ "status", required_argument, NULL, 's' },
		{ NULL, 0, NULL, 0 },
	};
	cJSON *base = ctl_req("list"), *all, *doc, *r;
	int ch, rc;

	opterr = 0;
	optind = 0; /* 0: glibc re-initialises (permuting again) */
	while (base && (ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (ch == 'j') {
			x->json = 1;
			continue;
		}
		if (ch == '?' || ch == ':') {
			cJSON_Delete(base);
			return ctl_usage(x, "bad option '%s'",
					 argv[optind - 1]);
		}
		cJSON_AddStringToObject(base, ch == 'o' ? "op" :
					ch == 'd' ? "dtype" : "status", optarg);
	}
	if (base == NULL || optind != argc) {
		cJSON_Delete(base);
		return ctl_usage(x, "list takes no positional arguments");
	}
	rc = ctl_page_all(x, base, &all);
	cJSON_Delete(base);
	if (rc != CTL_OK)
		return rc;
	if (x->json) {
		doc = cJSON_CreateObject();
		cJSON_AddTrueToObject(doc, "ok");
		cJSON_AddItemToObject(doc, "results", all);
		cJSON_AddNullToObject(doc, "next");
		ctl_print_json(doc);
		cJSON_Delete(doc);
		return CTL_OK;
	}
	cJSON_ArrayForEach(r, all) {
		printf("%-48s %-24s %12.3f\n",
		       str_field(r, "key") ? str_field(r, "key") : "?",
		       str_field(r, "variant") ? str_field(r, "variant") : "",
		       num_field(r, "median_us"));
	}
	cJSON_Delete(all);
	return CTL_OK;
}

/* ================================================================ tune, forget */

struct progress {
	const char *key;
	struct timespec start;
	atomic_int stop;
};

static double elapsed_s(const struct timespec *t0)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - t0->tv_sec) +
	       (double)(now.tv_nsec - t0->tv_nsec) / 1e9;
}

/* "tuning KEY ... 3.2 s", rewritten in place every 100 ms. */
static void *progress_main(void *arg)
{
	struct progress *p = arg;

	while (!atomic_load(&p->stop)) {
		fprintf(stderr, "\rtuning %s ... %.1f s", p->key,
			elapsed_s(&p->start));
		fflush(stderr);
		usleep(100000);
	}
	fprintf(stderr, "\rtuning %s ... %.1f s\n", p->key,
		elapsed_s(&p->start));
	return NULL;
}

/* Print a tune reply: status, and the winner when the reply has one. */
static void print_tune(const cJSON *resp, const char *key)
{
	const cJSON *st = cJSON_GetObjectItemCaseSensitive(resp, "status");
	const cJSON *d = cJSON_GetObjectItemCaseSensitive(resp, "decision");
	const cJSON *q = cJSON_GetObjectItemCaseSensitive(resp, "queued");
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(d, "variant");
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(d, "median_us");

	if (d == NULL)
		d = cJSON_GetObjectItemCaseSensitive(resp, "result");
	v = cJSON_GetObjectItemCaseSensitive(d, "variant");
	m = cJSON_GetObjectItemCaseSensitive(d, "median_us");
	printf("%s: %s%s", key, cJSON_IsString(st) ? st->valuestring : "ok",
	       cJSON_IsTrue(q) ? " (queued)" : "");
	if (cJSON_IsString(v) && v->valuestring[0])
		printf(" %s", v->valuestring);
	if (cJSON_IsNumber(m) && m->valuedouble > 0)
		printf(" %.3f us", m->valuedouble);
	printf("\n");
}

/* Send the tune request, with the progress line when asked for. */
static int tune_send(struct ctl *x, cJSON *req, const char *key, int wait,
		     long secs, cJSON **resp)
{
	struct progress p = { .key = key };
	pthread_t th;
	int show = wait && !x->json && isatty(STDERR_FILENO);
	int rc;

	clock_gettime(CLOCK_MONOTONIC, &p.start);
	atomic_init(&p.stop, 0);
	if (show && pthread_create(&th, NULL, progress_main, &p) != 0)
		show = 0;
	rc = ctl_call(x, req,
		      wait ? (uint32_t)(secs * 1000 + 5000) : 0, resp);
	if (show) {
		atomic_store(&p.stop, 1);
		pthread_join(th, NULL);
	}
	return rc;
}

static int ctl_tune(struct ctl *x, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "wait", no_argument, NULL, 'w' },
		{ "force", no_argument, NULL, 'f' },
		{ "timeout", required_argument, NULL, 't' },
		{ NULL, 0, NULL, 0 },
	};
	int ch, rc, wait = 0, force = 0;
	long secs = 600;
	cJSON *req, *resp;
	char *end;

	opterr = 0;
	optind = 0; /* 0: glibc re-initialises (permuting again) */
	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (ch) {
		case 'j':
			x->json = 1;
			break;
		case 'w':
			wait = 1;
			break;
		case 'f':
			force = 1;
			break;
		case 't':
			errno = 0;
			secs = strtol(optarg, &end, 10);
			if (errno || *end || end == optarg || secs <= 0 ||
			    secs > 86400)
				return ctl_usage(x, "bad --timeout '%s' "
						 "(seconds, 1..86400)", optarg);
			break;
		default:
			return ctl_usage(x, "bad option '%s'",
					 argv[optind - 1]);
		}
	}
	if (argc - optind != 1)
		return ctl_usage(x, "tune needs exactly one KEY");
	rc = ctl_check_key(x, argv[optind]);
	if (rc != CTL_OK)
		return rc;
	req = ctl_req("tune");
	if (req != NULL) {
		cJSON_AddStringToObject(req, "key", argv[optind]);
		cJSON_AddBoolToObject(req, "force", force);
		cJSON_AddBoolToObject(req, "wait", wait);
		if (wait)
			cJSON_AddNumberToObject(req, "timeout_ms",
						(double)secs * 1000);
	}
	rc = tune_send(x, req, argv[optind], wait, secs, &resp);
	if (rc != CTL_OK)
		return rc;
	if (x->json)
		ctl_print_json(resp);
	else
		print_tune(resp, argv[optind]);
	cJSON_Delete(resp);
	return CTL_OK;
}

static int ctl_forget(struct ctl *x, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "all", no_argument, NULL, 'a' },
		{ NULL, 0, NULL, 0 },
	};
	int ch, rc, all = 0;
	cJSON *req, *resp, *n;

	opterr = 0;
	optind = 0; /* 0: glibc re-initialises (permuting again) */
	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (ch == 'j')
			x->json = 1;
		else if (ch == 'a')
			all = 1;
		else
			return ctl_usage(x, "bad option '%s'",
					 argv[optind - 1]);
	}
	if (all ? argc != optind : argc - optind != 1)
		return ctl_usage(x, "forget needs exactly one KEY, or --all");
	if (!all && (rc = ctl_check_key(x, argv[optind])) != CTL_OK)
		return rc;
	req = ctl_req("forget");
	if (req != NULL && all)
		cJSON_AddTrueToObject(req, "all");
	else if (req != NULL)
		cJSON_AddStringToObject(req, "key", argv[optind]);
	rc = ctl_call(x, req, 0, &resp);
	if (rc != CTL_OK)
		return rc;
	n = cJSON_GetObjectItemCaseSensitive(resp, "forgotten");
	if (x->json)
		ctl_print_json(resp);
	else
		printf("forgot %.0f result(s)\n",
		       cJSON_IsNumber(n) ? n->valuedouble : 0.0);
	cJSON_Delete(resp);
	return CTL_OK;
}

/* ================================================================ export, import */

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
	optind = 0; /* 0: glibc re-initialises (permuting again) */
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

static int ctl_export(struct ctl *x, int argc, char **argv)
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
	else if (rc == CTL_OK && strcmp(file, "-") != 0)
		printf("{\"ok\":true,\"exported\":%d}\n",
		       cJSON_GetArraySize(results));
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

/* A string of 1..@p max bytes. */
static int is_str(const cJSON *v, size_t max)
{
	return cJSON_IsString(v) && v->valuestring[0] != '\0' &&
	       strlen(v->valuestring) <= max;
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
	if (!is_nonneg(cJSON_GetObjectItemCaseSensitive(r, "tune_s")))
		return "tune_s: expected a number >= 0";
	v = cJSON_GetObjectItemCaseSensitive(r, "tuned_at");
	if (!is_int(v) || v->valuedouble < 0)
		return "tuned_at: expected Unix seconds (an integer >= 0)";
	if (!is_str(cJSON_GetObjectItemCaseSensitive(r, "device"), 63))
		return "device: expected a device id (1..63 characters)";
	if (!is_str(cJSON_GetObjectItemCaseSensitive(r, "libver"), 31))
		return "libver: expected a version (1..31 characters)";
	return NULL;
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
	else if (!cJSON_IsString(f) || strcmp(f->valuestring, EXPORT_FORMAT))
		bad = "format: expected \"" EXPORT_FORMAT "\"";
	else if (!is_int(v) || v->valuedouble != EXPORT_VERSION)
		bad = "version: expected 1";
	else if (!cJSON_IsArray(res))
		bad = "results: expected an array";
	else if (!is_str(cJSON_GetObjectItemCaseSensitive(doc, "libver"), 31))
		bad = "libver: expected a version (1..31 characters)";
	else
		bad = check_header_device(doc);
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

static int ctl_import(struct ctl *x, int argc, char **argv)
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
	optind = 0; /* 0: glibc re-initialises (permuting again) */
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
