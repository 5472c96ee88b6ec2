/*
 * ctl.h -- flytune-ctl's private header: the run's state, the exit
 * codes, the output layer (out.c), the request helpers (call.c) and the
 * subcommands (cmd_*.c), which main.c dispatches to.
 *
 * ctl/ sees the installed client header and, for the export record's
 * validator, proto/fly_record.h (tools/check-layering.sh): the CLI talks
 * to the daemon only through libflyclient.
 *
 * Thread: main, plus the progress thread of a waiting tune (cmd_tune.c),
 * which only writes to stderr until told to stop.
 */
#ifndef FLY_CTL_H
#define FLY_CTL_H

#include <stdint.h>

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

#define CTL_PAGE 500 /* list/export page size */

/* The export file (schemas/export-file.json). */
#define CTL_EXPORT_FORMAT "flytuned-export"
#define CTL_EXPORT_VERSION 1

struct ctl {
	fly_client *c;        /* the connection */
	int json;             /* --json: one JSON document on stdout */
	uint32_t timeout_ms;  /* per-request timeout (--timeout SECS) */
	const char *cmd;      /* subcommand name, for messages */
};

/* ---------------------------------------------------------------- out.c */

/* Prints a document as text on stdout. */
typedef void ctl_text_fn(const cJSON *doc);

/* The one output of a command: with --json @p doc as one line of JSON,
 * else @p text(doc) (NULL: nothing on stdout). */
void ctl_out(const struct ctl *x, const cJSON *doc, ctl_text_fn *text);
/* Text: an object as "name: value" lines, nested names dotted ("ok"
 * and "id" left out). */
void ctl_text_flat(const cJSON *doc);
/* An error found here: the message on stderr, kept (with its wire code
 * name, schemas/common.json error_code) for the --json error document. */
void ctl_err(const char *code, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* A usage error: message and hint on stderr.  @return CTL_USAGE. */
int ctl_usage(const struct ctl *x, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Report a daemon error reply (stderr; with --json the reply on
 * stdout).  @return its exit code. */
int ctl_reply_error(const struct ctl *x, const cJSON *o);
/* With --json, at the end of a failed run: the error document, unless a
 * document was printed already. */
void ctl_error_doc(int rc);
/* Exit code of a wire error code name ("not_found" -> CTL_NOTFOUND;
 * unknown: CTL_ERR), and the name of an exit code ("internal" for
 * CTL_ERR): one table. */
int ctl_exit_for_code(const char *code);
const char *ctl_code_for_exit(int rc);
/* Field @p name of @p o: a number (NAN if not), a string (NULL if not). */
double ctl_num(const cJSON *o, const char *name);
const char *ctl_str(const cJSON *o, const char *name);
/* The "params" array of @p o as "[a,b]" in @p buf. */
void ctl_params_text(const cJSON *o, char *buf, size_t cap);
/* A job's single flight across the fleet ("fleet", "fleet_wait_s" of a
 * jobs item or explain's "job") as " (fleet: waiting, 12.0 s left)";
 * nothing when the job has none. */
void ctl_print_fleet_job(const cJSON *job);

/* ---------------------------------------------------------------- call.c */

/* A new request object {"req": name}; NULL on ENOMEM. */
cJSON *ctl_req(const char *name);
/* Send @p req (takes ownership, even on failure); on success *resp is the
 * parsed reply with "ok": true (caller owns; cJSON_Delete).  On a daemon
 * error, prints "<cmd> failed: MESSAGE (code)" (and, with --json, the
 * reply on stdout) and returns its exit code; *resp is NULL.
 * @p timeout_ms 0: x->timeout_ms.  @return CTL_OK or an exit code. */
int ctl_call(struct ctl *x, cJSON *req, uint32_t timeout_ms, cJSON **resp);
/* ctl_call of a request already printed: @p text, @p len bytes (borrowed). */
int ctl_call_text(struct ctl *x, const char *text, size_t len,
		  uint32_t timeout_ms, cJSON **resp);
/* ctl_call, then ctl_out of the reply.  @return exit code. */
int ctl_call_out(struct ctl *x, cJSON *req, ctl_text_fn *text);
/* Validate a canonical key; prints the error with an example.
 * @return CTL_OK or CTL_INVALID. */
int ctl_check_key(struct ctl *x, const char *key);
/* Page through a request (list, export): @p base holds the filters; each
 * page adds after/limit.  @param[out] all every result, in order (caller
 * owns; cJSON_Delete).  @return exit code. */
int ctl_page_all(struct ctl *x, const cJSON *base, cJSON **all);
/* Parse a subcommand's options: only --json (and --help, handled by
 * main).  Positional arguments are left at argv[optind..]; @p npos is the
 * number required.  @return -1 to go on, else an exit code. */
int ctl_parse_simple(struct ctl *x, int argc, char **argv, int npos);
/* {"req": name, "key": KEY} after ctl_parse_simple and a valid KEY.
 * *req NULL on error.  @return exit code. */
int ctl_key_req(struct ctl *x, int argc, char **argv, const char *name,
		cJSON **req);
/* A duration: seconds ("1.5", "2s") or milliseconds ("500ms"), in
 * (0, max_s].  @return 0 and *ms (at least 1), or -1. */
int ctl_parse_duration(const char *arg, double max_s, uint32_t *ms);

/* ---------------------------------------------------------------- cmd_*.c */

/* One subcommand: argc/argv start at the subcommand's own arguments
 * (argv[0] is the subcommand name).  Returns an exit code. */
int ctl_status(struct ctl *x, int argc, char **argv);   /* cmd_query.c */
int ctl_fleet(struct ctl *x, int argc, char **argv);    /* cmd_query.c */
int ctl_stats(struct ctl *x, int argc, char **argv);    /* cmd_query.c */
int ctl_metrics(struct ctl *x, int argc, char **argv);  /* cmd_query.c */
int ctl_get(struct ctl *x, int argc, char **argv);      /* cmd_query.c */
int ctl_list(struct ctl *x, int argc, char **argv);     /* cmd_query.c */
int ctl_jobs(struct ctl *x, int argc, char **argv);     /* cmd_query.c */
int ctl_cancel(struct ctl *x, int argc, char **argv);   /* cmd_query.c */
int ctl_explain(struct ctl *x, int argc, char **argv);  /* cmd_explain.c */
int ctl_tune(struct ctl *x, int argc, char **argv);     /* cmd_tune.c */
int ctl_forget(struct ctl *x, int argc, char **argv);   /* cmd_tune.c */
int ctl_decide(struct ctl *x, int argc, char **argv);   /* cmd_decide.c */
int ctl_export(struct ctl *x, int argc, char **argv);   /* cmd_export.c */
int ctl_import(struct ctl *x, int argc, char **argv);   /* cmd_import.c */

/* file.c: read a whole file ("-": stdin) of at most 64 MiB (a
 * regular file's size is checked first).  @return CTL_OK (caller frees
 * *buf, NUL-terminated), CTL_INVALID (too big), CTL_ERR (message
 * printed). */
int ctl_read_file(const char *file, char **buf, size_t *len);
/* out.c: after an export to a file, {"ok":true,"exported":N} with
 * --json, else a note on stderr. */
void ctl_export_done(const struct ctl *x, const char *file, int n);
/* cmd_tunableop.c: @p results (every result, as export pages them) as a
 * PyTorch TunableOp results file at @p file ("-": stdout): Validator
 * lines copied from @p from (a file PyTorch wrote) when given, else
 * PT_VERSION @p pt, else python3's torch.__version__; then the GEMM
 * winners that are vendor algorithms.  @return exit code. */
int ctl_export_tunableop(struct ctl *x, const cJSON *results,
			 const char *file, const char *pt, const char *from);
/* cmd_tunableop.c: read a TunableOp results file and queue a tune job
 * (not forced) for each plain GEMM entry's key; print what was queued,
 * each entry's TunableOp solution and what was skipped.
 * @return exit code. */
int ctl_import_tunableop(struct ctl *x, const char *file);

#endif /* FLY_CTL_H */
