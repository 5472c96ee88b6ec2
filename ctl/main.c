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
	uint32_t timeout_ms;  /* per-request timeout (--timeout SECS) */
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
static int ctl_jobs(struct ctl *x, int argc, char **argv);
static int ctl_cancel(struct ctl *x, int argc, char **argv);
static int ctl_decide(struct ctl *x, int argc, char **argv);

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

#define CTL_VERSION FLY_VERSION /* the VERSION file, via the Makefile */

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
	  "Show the trial leaderboard of a key: the winner, the measured\n"
	  "  candidates by median, then the unmeasured ones; noise (MAD),\n"
	  "  reps, outcome and why losers lost." },
	{ "list", ctl_list, "list [--op OP] [--dtype DT] [--status S]",
	  "List results (paged through the daemon); S is tuned (stored\n"
	  "  results, the default), pending (keys whose job is queued or\n"
	  "  running) or default (keys whose job failed)." },
	{ "jobs", ctl_jobs, "jobs",
	  "Show the tuning jobs: the running one (position 0), then the\n"
	  "  queued ones in run order, with priority and fault count." },
	{ "cancel", ctl_cancel, "cancel KEY",
	  "Cancel a key's tuning job: a queued job is removed, a running\n"
	  "  one abandoned (its result dropped).  Admin only." },
	{ "decide", ctl_decide, "decide KEY",
	  "What a client would be answered now for KEY, through\n"
	  "  libflyclient, and from which tier: cache, shm, socket, or none\n"
	  "  (the library's default: daemon unreachable)." },
	{ "tune", ctl_tune,
	  "tune KEY [--wait] [--force] [--timeout SECS]",
	  "Queue a key for tuning now; --force re-tunes a tuned key; --wait\n"
	  "  waits for the result (default 600 s; fractions and 500ms also\n"
	  "  work), showing progress on a terminal." },
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
		"  --json          print one JSON document on stdout (errors\n"
		"                  too: {\"ok\":false,\"error\":{...}})\n"
		"  --timeout SECS  per-request timeout in seconds (default 30;\n"
		"                  fractions and 500ms also work)\n"
		"  --help, --version\n\nCommands:\n");
	for (size_t i = 0; i < NCMDS; i++)
		fprintf(f, "  %s\n", cmds[i].usage);
	fprintf(f, "\nKEY is a canonical shape key, e.g. "
		"gemm/bf16/NT/m=4096,n=6144,k=4096\n"
		"'flytune-ctl help COMMAND' shows a command's help.\n\n%s",
		exit_codes);
}

/* With --json every run prints exactly one JSON document on stdout: the
 * reply, the assembled document, or for an error the daemon's error
 * reply or, for an error found here (usage, bad key, daemon down, a bad
 * file), {"ok":false,"error":{"code","message"}} built by main() from
 * the last ctl_err() (issue 18 item 10). */
static int json_printed;         /* a document went to stdout */
static char err_msg[1024];       /* the last error found here */
static const char *err_code;     /* its wire name (schemas/common.json) */

static void ctl_err(const char *code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err_msg, sizeof(err_msg), fmt, ap);
	va_end(ap);
	err_code = code;
	fprintf(stderr, "%s\n", err_msg);
}

/* Wire name of an exit code, for an error document without a better one. */
static const char *code_for_exit(int rc)
{
	switch (rc) {
	case CTL_USAGE:
		return "usage";
	case CTL_DOWN:
		return "down";
	case CTL_NOTFOUND:
		return "not_found";
	case CTL_PERM:
		return "permission";
	case CTL_INVALID:
		return "invalid";
	case CTL_BUSY:
		return "busy";
	case CTL_TIMEOUT:
		return "timeout";
	case CTL_MAXCLIENTS:
		return "max_clients";
	default:
		return "internal";
	}
}

/* The error document of a failed run, unless one was printed. */
static void json_error_doc(int rc)
{
	cJSON *o = cJSON_CreateObject(), *e;

	if (json_printed || o == NULL) {
		cJSON_Delete(o);
		return;
	}
	cJSON_AddFalseToObject(o, "ok");
	e = cJSON_AddObjectToObject(o, "error");
	cJSON_AddStringToObject(e, "code", err_code ? err_code :
				code_for_exit(rc));
	cJSON_AddStringToObject(e, "message", err_msg[0] ? err_msg :
				"flytune-ctl failed");
	ctl_print_json(o);
	cJSON_Delete(o);
}

static int ctl_usage(struct ctl *x, const char *fmt, ...)
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
	json_printed = 1;
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

/* Turn the long integer members of @p o into raw nodes holding their
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
			if (!is_long_int(t, n) || (v = strndup(t, n)) == NULL)
				continue;
			it->type = cJSON_Raw | (it->type & cJSON_StringIsConst);
			it->valuestring = v;
		}
	}
}

/* Parse a reply.  cJSON holds numbers as doubles: 53 bits, printed with
 * 15 significant digits when that reads back equal, so the shm generation
 * 1796229956770520 came out as 1.79622995677052e+15, and a 64-bit
 * integer past 2^53 would come out changed.  Integers of 16 digits or
 * more are kept as their literal (raw nodes), which cJSON_Print and
 * ctl_print_flat print verbatim.  @return the object or NULL. */
static cJSON *ctl_parse(const char *text, size_t len)
{
	cJSON *o = cJSON_ParseWithLength(text, len);
	size_t pos = 0;

	if (o != NULL)
		exact_ints(o, text, len, &pos);
	return o;
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
		ctl_err("internal", "%s failed: out of memory", x->cmd);
		return CTL_ERR;
	}
	rc = fly_request(x->c, text, strlen(text),
			 timeout_ms ? timeout_ms : x->timeout_ms, &out,
			 &out_len);
	free(text);
	if (rc < 0) {
		const char *m = fly_client_errmsg(x->c);

		ctl_err(code_for_exit(exit_for_err(rc)), "%s failed: %s%s%s",
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
		rc = reply_error(x, o);
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

static int ctl_check_key(struct ctl *x, const char *key)
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

/* A duration: seconds ("1.5", "2s") or milliseconds ("500ms"), in
 * (0, max_s] -- one unit for the global --timeout and tune's (issue 18).
 * @return 0 and *ms (at least 1), or -1. */
static int parse_duration(const char *arg, double max_s, uint32_t *ms)
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
		case OPT_TIMEOUT:
			if (parse_duration(optarg, 100000, &x->timeout_ms) < 0)
				return ctl_usage(x, "bad --timeout '%s' (seconds, "
						 "up to 100000, or Nms)", optarg);
			break;
		case OPT_DEVICE:
			errno = 0;
			v = strtol(optarg, &end, 10);
			if (errno || *end || end == optarg || v < 0 ||
			    v > 100000000)
				return ctl_usage(x, "bad number '%s'", optarg);
			o->device = (int)v;
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

/* Whether --json is among the arguments (before "--"), so that errors
 * found before the options are parsed are reported as JSON too. */
static int argv_has_json(int argc, char **argv)
{
	for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
		if (strcmp(argv[i], "--json") == 0)
			return 1;
	return 0;
}

/* Parse, open, run the subcommand.  @return the exit code. */
static int run(struct ctl *x, int argc, char **argv)
{
	struct fly_client_opts o = { 0 };
	const struct cmd *c;
	int rc;

	rc = parse_global(argc, argv, x, &o);
	if (rc >= 0)
		return rc;
	if (optind >= argc)
		return ctl_usage(x, "missing command");
	argc -= optind;
	argv += optind;
	if (strcmp(argv[0], "help") == 0) {
		if (argc > 1 && cmd_find(argv[1]) == NULL)
			return ctl_usage(x, "unknown command '%s'", argv[1]);
		ctl_help(stdout, argc > 1 ? argv[1] : NULL);
		return CTL_OK;
	}
	c = cmd_find(argv[0]);
	if (c == NULL)
		return ctl_usage(x, "unknown command '%s'", argv[0]);
	x->cmd = c->name;
	if (wants_help(argc, argv)) {
		ctl_help(stdout, c->name);
		return CTL_OK;
	}
	o.timeout_ms = x->timeout_ms;
	/* admin requests only; decide answers as an engine's client would */
	o.no_shm = strcmp(c->name, "decide") != 0;
	rc = fly_client_open_opts(&o, &x->c);
	if (rc < 0) {
		ctl_err(rc == -EINVAL ? "usage" : "internal",
			"%s failed: %s%s", c->name, fly_strerror(rc),
			rc == -EINVAL ? " (socket path too long?)" : "");
		return rc == -EINVAL ? CTL_USAGE : CTL_ERR;
	}
	optind = 0; /* 0: glibc re-initialises (permuting again) */
	rc = c->fn(x, argc, argv);
	fly_client_close(x->c);
	return rc;
}

int main(int argc, char **argv)
{
	struct ctl x = { .timeout_ms = 30000 };
	int rc;

	x.json = argv_has_json(argc, argv);
	rc = run(&x, argc, argv);
	if (rc != CTL_OK && x.json)
		json_error_doc(rc);
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

/* A trial's place on the board: the winner, then the measured trials
 * by median, then those never measured (no median, or median 0 with no
 * reps: refused on their warm-up, faulted, wrong), in the daemon's
 * order. */
struct ranked {
	const cJSON *t;
	int cls;      /* 0 winner, 1 measured, 2 not measured */
	double med;
	int idx;      /* position in the reply */
};

static int ranked_cmp(const void *a, const void *b)
{
	const struct ranked *x = a, *y = b;

	if (x->cls != y->cls)
		return x->cls - y->cls;
	if (x->cls == 1 && x->med != y->med)
		return (x->med > y->med) - (x->med < y->med);
	return x->idx - y->idx;
}

/* Whether a trial has a median worth ranking by. */
static int is_measured(const cJSON *t)
{
	const cJSON *reps = cJSON_GetObjectItemCaseSensitive(t, "reps");
	double med = num_field(t, "median_us");

	return !isnan(med) && med > 0 &&
	       (!cJSON_IsNumber(reps) || reps->valuedouble > 0);
}

/* Whether trial @p t is the stored winner @p res (variant, params and
 * median agree). */
static int is_winner(const cJSON *t, const cJSON *res)
{
	const char *wv = str_field(res, "variant");
	const char *var = str_field(t, "variant");
	const cJSON *wp = cJSON_GetObjectItemCaseSensitive(res, "params");
	const cJSON *tp = cJSON_GetObjectItemCaseSensitive(t, "params");

	return wv != NULL && var != NULL && strcmp(wv, var) == 0 &&
	       (wp == NULL || tp == NULL || cJSON_Compare(wp, tp, 1)) &&
	       num_field(t, "median_us") == num_field(res, "median_us");
}

/* Rank the trials of an explain reply into @p v (n entries). */
static void rank_trials(const cJSON *trials, const cJSON *res,
			struct ranked *v, int n)
{
	const cJSON *t;
	int i = 0, have_win = 0;

	cJSON_ArrayForEach(t, trials) {
		if (i == n)
			break;
		v[i].t = t;
		v[i].idx = i;
		v[i].med = num_field(t, "median_us");
		v[i].cls = is_measured(t) ? 1 : 2;
		if (!have_win && v[i].cls == 1 && is_winner(t, res)) {
			v[i].cls = 0;
			have_win = 1;
		}
		i++;
	}
	qsort(v, (size_t)n, sizeof(*v), ranked_cmp);
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
	int n = cJSON_GetArraySize(trials), i;
	struct ranked *v = calloc((size_t)n + 1, sizeof(*v));
	double win = num_field(res, "median_us"), best = NAN;
	char note[160], params[128], med[24];

	printf("key: %s\n", str_field(resp, "key") ? str_field(resp, "key")
						   : "?");
	printf("winner: %s\n", wv ? wv : "(none)");
	if (v == NULL)
		return;
	rank_trials(trials, res, v, n);
	for (i = 0; i < n && isnan(best); i++)
		if (v[i].cls < 2)
			best = v[i].med;
	printf("%-4s %-24s %-20s %12s %10s %6s  %s\n", "#", "variant",
	       "params", "median_us", "mad_us", "reps", "outcome");
	for (i = 0; i < n; i++) {
		const char *var = str_field(v[i].t, "variant");

		trial_note(v[i].t, win, best, v[i].cls == 0, note,
			   sizeof(note));
		params_text(v[i].t, params, sizeof(params));
		if (v[i].cls == 2)
			snprintf(med, sizeof(med), "-");
		else
			snprintf(med, sizeof(med), "%.3f", v[i].med);
		printf("%-4d %-24s %-20s %12s %10.3f %6.0f  %s\n", i + 1,
		       var ? var : "?", params, med,
		       num_field(v[i].t, "mad_us"), num_field(v[i].t, "reps"),
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
		if (str_field(r, "state") != NULL) /* pending, default */
			printf("%-48s %-8s %s\n",
			       str_field(r, "key") ? str_field(r, "key") : "?",
			       str_field(r, "status") ? str_field(r, "status")
						      : "",
			       str_field(r, "state"));
		else
			printf("%-48s %-24s %12.3f\n",
			       str_field(r, "key") ? str_field(r, "key") : "?",
			       str_field(r, "variant") ? str_field(r, "variant")
						       : "",
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

/* Whether a tune reply says the key is tuned. */
static int is_tuned(const cJSON *resp)
{
	const cJSON *st = cJSON_GetObjectItemCaseSensitive(resp, "status");

	return cJSON_IsString(st) && strcmp(st->valuestring, "tuned") == 0;
}

/* Send the tune request, with the progress line when asked for. */
static int tune_send(struct ctl *x, cJSON *req, const char *key, int wait,
		     uint32_t wait_ms, cJSON **resp)
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
		      wait ? wait_ms + 5000 : 0, resp);
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
	uint32_t wait_ms = 600000;
	cJSON *req, *resp;

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
			if (parse_duration(optarg, 86400, &wait_ms) < 0)
				return ctl_usage(x, "bad --timeout '%s' (seconds, "
						 "up to 86400, or Nms)", optarg);
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
						(double)wait_ms);
	}
	rc = tune_send(x, req, argv[optind], wait, wait_ms, &resp);
	if (rc != CTL_OK)
		return rc;
	if (x->json)
		ctl_print_json(resp);
	else
		print_tune(resp, argv[optind]);
	/* The daemon answers a wait that ran out with the key's state so
	 * far (pending): that is the documented timeout, exit 10. */
	rc = wait && !is_tuned(resp) ? CTL_TIMEOUT : CTL_OK;
	if (rc == CTL_TIMEOUT)
		fprintf(stderr, "tune failed: %s not tuned within %g s "
			"(still queued; try again with a longer --timeout)\n",
			argv[optind], (double)wait_ms / 1000.0);
	cJSON_Delete(resp);
	return rc;
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

/* ================================================================ jobs, cancel, decide */

static void print_jobs(const cJSON *resp)
{
	const cJSON *jobs = cJSON_GetObjectItemCaseSensitive(resp, "jobs");
	const cJSON *j;

	if (cJSON_GetArraySize(jobs) == 0) {
		printf("no jobs\n");
		return;
	}
	printf("%-4s %-8s %-48s %-10s %6s  %s\n", "pos", "state", "key",
	       "priority", "faults", "running");
	cJSON_ArrayForEach(j, jobs) {
		const char *st = str_field(j, "state");
		double run = num_field(j, "running_s");

		printf("%-4.0f %-8s %-48s %-10s %6.0f  ",
		       num_field(j, "position"), st ? st : "?",
		       str_field(j, "key") ? str_field(j, "key") : "?",
		       str_field(j, "priority") ? str_field(j, "priority")
						: "?",
		       num_field(j, "faults"));
		if (!isnan(run))
			printf("%.1f s", run);
		printf("%s\n", cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
					 j, "force")) ? " (force)" : "");
	}
}

static int ctl_jobs(struct ctl *x, int argc, char **argv)
{
	int rc = parse_simple(x, argc, argv, 0);

	if (rc >= 0)
		return rc;
	return call_print(x, ctl_req("jobs"), print_jobs);
}

static void print_cancel(const cJSON *resp)
{
	printf("cancelled %s (was %s)\n",
	       str_field(resp, "key") ? str_field(resp, "key") : "?",
	       str_field(resp, "was") ? str_field(resp, "was") : "?");
}

static int ctl_cancel(struct ctl *x, int argc, char **argv)
{
	cJSON *req;
	int rc = key_req(x, argc, argv, "cancel", &req);

	return rc != CTL_OK ? rc : call_print(x, req, print_cancel);
}

/* Which tier answered between two stats snapshots. */
static const char *tier_of(const struct fly_client_stats *a,
			   const struct fly_client_stats *b)
{
	if (b->cache_hits > a->cache_hits)
		return "cache";
	if (b->shm_hits > a->shm_hits)
		return "shm";
	if (b->socket_requests > a->socket_requests &&
	    b->socket_errors == a->socket_errors)
		return "socket";
	return "none";
}

/* fly_decide once; @return the tier that answered. */
static const char *decide_once(fly_client *c, const struct fly_problem *p,
			       struct fly_decision *d)
{
	struct fly_client_stats a, b;

	fly_client_stats_get(c, &a);
	(void)fly_decide(c, p, d);
	fly_client_stats_get(c, &b);
	return tier_of(&a, &b);
}

static cJSON *decision_json(const struct fly_decision *d)
{
	static const char *const st[] = { "default", "pending", "tuned" };
	cJSON *o = cJSON_CreateObject(), *a;

	cJSON_AddStringToObject(o, "status", d->status < 3 ? st[d->status]
							   : "default");
	cJSON_AddBoolToObject(o, "provisional", d->provisional != 0);
	cJSON_AddStringToObject(o, "variant", d->variant);
	a = cJSON_AddArrayToObject(o, "params");
	for (uint32_t i = 0; i < d->nparams && i < FLY_PARAMS_MAX; i++)
		cJSON_AddItemToArray(a, cJSON_CreateNumber(
						(double)d->params[i]));
	cJSON_AddNumberToObject(o, "median_us", d->median_us);
	return o;
}

static void print_decide(const cJSON *doc)
{
	const cJSON *d = cJSON_GetObjectItemCaseSensitive(doc, "decision");
	char params[128];

	params_text(d, params, sizeof(params));
	printf("key: %s\nbucket: %s\nstatus: %s%s\nvariant: %s\n"
	       "params: %s\nmedian_us: %.3f\ntier: %s\nrepeat_tier: %s\n",
	       str_field(doc, "key"), str_field(doc, "bucket"),
	       str_field(d, "status"),
	       cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d, "provisional"))
		       ? " (provisional)" : "",
	       str_field(d, "variant")[0] ? str_field(d, "variant")
					  : "(the caller's default)",
	       params, num_field(d, "median_us"), str_field(doc, "tier"),
	       str_field(doc, "repeat_tier"));
}

/* decide KEY: fly_decide as an engine's client makes it, on a client
 * already connected (hello maps the shm table), then once more: the
 * first answer shows the shm or socket tier, the repeat the process
 * cache.  schemas/ctl-decide.json. */
static int ctl_decide(struct ctl *x, int argc, char **argv)
{
	static const char warm[] = "{\"req\":\"stats\"}";
	struct fly_decision d1, d2;
	struct fly_problem p;
	const char *t1, *t2;
	char bk[FLY_KEY_MAX], *out = NULL;
	size_t len;
	cJSON *doc;
	int rc = parse_simple(x, argc, argv, 1);

	if (rc >= 0)
		return rc;
	rc = ctl_check_key(x, argv[optind]);
	if (rc != CTL_OK)
		return rc;
	(void)fly_problem_from_key(argv[optind], &p);
	if (fly_problem_key(&p, bk, sizeof(bk)) < 0)
		snprintf(bk, sizeof(bk), "%s", argv[optind]);
	if (fly_request(x->c, warm, sizeof(warm) - 1, 0, &out, &len) < 0)
		fprintf(stderr, "decide: daemon not reachable: %s; the library "
			"answers the default\n", fly_client_errmsg(x->c));
	fly_free(out);
	t1 = decide_once(x->c, &p, &d1);
	t2 = decide_once(x->c, &p, &d2);
	doc = cJSON_CreateObject();
	cJSON_AddTrueToObject(doc, "ok");
	cJSON_AddStringToObject(doc, "key", argv[optind]);
	cJSON_AddStringToObject(doc, "bucket", bk);
	cJSON_AddItemToObject(doc, "decision", decision_json(&d1));
	cJSON_AddStringToObject(doc, "tier", t1);
	cJSON_AddStringToObject(doc, "repeat_tier", t2);
	if (x->json)
		ctl_print_json(doc);
	else
		print_decide(doc);
	cJSON_Delete(doc);
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
		ctl_err(errno == ENOENT ? "not_found" : "internal",
			"import failed: %s: %s", file, strerror(errno));
		return CTL_ERR;
	}
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
	    (uint64_t)st.st_size > cap) {
		ctl_err("too_big", "import failed: %s: %lld bytes, over the "
			"%zu-byte cap", file, (long long)st.st_size, cap);
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
			ctl_err("too_big", "import failed: %s: over the "
				"%zu-byte cap", file, cap);
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
	ctl_err("internal", "import failed: %s: %s", file, strerror(errno));
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
		ctl_err("invalid", "import failed: %s: %s", file, bad);
		return CTL_INVALID;
	}
	cJSON_ArrayForEach(r, res) {
		bad = check_result(r, why, sizeof(why));
		if (bad != NULL) {
			ctl_err("invalid", "import failed: %s: results[%d]: %s",
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
		ctl_err("invalid", "import failed: %s: not valid JSON",
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
