/*
 * ctl.h -- flytune-ctl internals shared by its command files.
 *
 * Owns: nothing.  Thread: main thread (the tune progress line runs on a
 * helper thread that only writes to stderr).
 * ctl/ includes only flyclient.h from the project (STYLE.md R2); requests
 * are built as JSON with cJSON and sent through fly_request().
 */
#ifndef FLY_CTL_H
#define FLY_CTL_H

#include <stdint.h>
#include <stdio.h>

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
int ctl_status(struct ctl *x, int argc, char **argv);
int ctl_stats(struct ctl *x, int argc, char **argv);
int ctl_get(struct ctl *x, int argc, char **argv);
int ctl_explain(struct ctl *x, int argc, char **argv);
int ctl_list(struct ctl *x, int argc, char **argv);
int ctl_tune(struct ctl *x, int argc, char **argv);
int ctl_forget(struct ctl *x, int argc, char **argv);
int ctl_export(struct ctl *x, int argc, char **argv);
int ctl_import(struct ctl *x, int argc, char **argv);

/* Print the help of a subcommand (NULL: the general help) to @p f. */
void ctl_help(FILE *f, const char *cmd);
/* "usage" error: message + hint on stderr; returns CTL_USAGE. */
int ctl_usage(struct ctl *x, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Send @p req (takes ownership, even on failure); on success *resp is the
 * parsed reply with "ok": true (caller owns; cJSON_Delete).  On a daemon
 * error, prints "<cmd> failed: MESSAGE (code)" (and, with --json, the
 * reply on stdout) and returns its exit code; *resp is NULL.
 * @p timeout_ms 0: x->timeout_ms.  @return CTL_OK or an exit code. */
int ctl_call(struct ctl *x, cJSON *req, uint32_t timeout_ms, cJSON **resp);
/* Validate a canonical key; prints the error with an example.
 * @return CTL_OK or CTL_INVALID. */
int ctl_check_key(struct ctl *x, const char *key);
/* Exit code for a wire error code name ("not_found", ...). */
int ctl_exit_for_code(const char *code);
/* Print a JSON document on stdout (unformatted, one line). */
void ctl_print_json(const cJSON *o);
/* Print an object as "name: value" lines, nested names dotted. */
void ctl_print_flat(const char *prefix, const cJSON *o);
/* Page through a request (list, export): @p base holds the filters; each
 * page adds after/limit.  @param[out] all every result, in order (caller
 * owns; cJSON_Delete).  @return exit code. */
int ctl_page_all(struct ctl *x, const cJSON *base, cJSON **all);
/* A new request object {"req": name}; NULL on ENOMEM. */
cJSON *ctl_req(const char *name);

#endif /* FLY_CTL_H */
