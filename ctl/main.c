/*
 * main.c -- flytune-ctl: the admin CLI of flytuned.  Parses the global
 * options, opens a client, dispatches to a subcommand (cmd_*.c); also the
 * shared request/response and printing helpers.
 *
 * Owns: the fly_client of the run.  Thread: main.
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

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
	"  9  busy (tuning queue full)   10  timeout\n";

static const struct cmd *cmd_find(const char *name)
{
	for (size_t i = 0; i < NCMDS; i++)
		if (strcmp(cmds[i].name, name) == 0)
			return &cmds[i];
	return NULL;
}

void ctl_help(FILE *f, const char *name)
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

int ctl_usage(struct ctl *x, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "flytune-ctl: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'flytune-ctl %s--help'.\n",
		x && x->cmd ? x->cmd : "");
	if (x && x->cmd)
		fprintf(stderr, "(that is: flytune-ctl help %s)\n", x->cmd);
	return CTL_USAGE;
}

int ctl_exit_for_code(const char *code)
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
		{ "busy", CTL_BUSY },          { "max_clients", CTL_BUSY },
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

void ctl_print_json(const cJSON *o)
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

int ctl_call(struct ctl *x, cJSON *req, uint32_t timeout_ms, cJSON **resp)
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

int ctl_check_key(struct ctl *x, const char *key)
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

void ctl_print_flat(const char *prefix, const cJSON *o)
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
	optind = 1;
	rc = c->fn(&x, argc, argv);
	fly_client_close(x.c);
	return rc;
}
