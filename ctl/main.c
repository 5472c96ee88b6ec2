/*
 * main.c -- flytune-ctl: the admin CLI of flytuned.  Parses the global
 * options, opens a client and dispatches to a subcommand (the table
 * below; one file per group: cmd_query.c status, stats, metrics, get,
 * list, jobs, cancel; cmd_explain.c; cmd_tune.c tune, forget; cmd_decide.c;
 * cmd_export.c; cmd_import.c).  Every result and error goes out through
 * out.c, every request through call.c.
 *
 * Owns: the fly_client of the run.  Thread: main.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

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
	{ "fleet", ctl_fleet, "fleet",
	  "Show the fleet (fleet_url): state (off, connecting, syncing,\n"
	  "  connected, down), outbox (winners the fleet DB lacks), lag_s,\n"
	  "  pushed, applied, refused, errors and the last error." },
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
	  "  queued ones in run order, with priority, fault count and a\n"
	  "  fleet wait (fleet: waiting) where another node tunes the key." },
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
	{ "export", ctl_export,
	  "export [--format json|csv|tunableop] [--pt-version V]\n"
	  "         [--validators FILE] [FILE]",
	  "Write every result as an export file (json, the default) or as\n"
	  "  CSV; FILE \"-\" or none: stdout.  tunableop: a PyTorch\n"
	  "  TunableOp results file of the GEMM winners that are vendor\n"
	  "  algorithms (Default, Gemm_Cublaslt_*), with Validator lines\n"
	  "  copied from --validators FILE (one PyTorch wrote here), else\n"
	  "  PT_VERSION --pt-version, else python3's torch version." },
	{ "import", ctl_import, "import [--format json|tunableop] FILE",
	  "Validate an export file (at most 64 MiB) and import it; the\n"
	  "  daemon commits all of it or nothing.  tunableop: read a\n"
	  "  PyTorch TunableOp results file and queue a tune job for each\n"
	  "  GEMM entry's key (never imported as a winner: flytuned\n"
	  "  measures); prints each key with TunableOp's pick." },
	{ "forget", ctl_forget, "forget KEY | --all",
	  "Forget one key's result, or every result." },
	{ "stats", ctl_stats, "stats", "Show the daemon's counters." },
	{ "metrics", ctl_metrics, "metrics",
	  "Print the daemon's counters and gauges as Prometheus text\n"
	  "  (format 0.0.4), as its metrics_listen HTTP listener serves them;\n"
	  "  for node_exporter's textfile collector." },
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

/* Print the help of a subcommand (NULL: the general help) to @p f. */
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
			if (ctl_parse_duration(optarg, 100000, &x->timeout_ms) < 0)
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
	/* one lookup: reading the whole table first (libflyclient's
	 * pre-fault, ~50 ms at 1M keys) would only slow it; a value the
	 * user set is kept */
	setenv("FLYTUNED_SHM_PREFAULT", "0", 0);
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
		ctl_error_doc(rc);
	return rc;
}
