/*
 * pg.h -- a throw-away PostgreSQL server for the fleet tests (issue 24):
 * initdb and pg_ctl in a temporary directory, Unix socket only (no TCP
 * listener), trust authentication for the one role "fleet".
 *
 * Owns: the server process and its directory.  Thread: the test's main
 * thread only.
 *
 * initdb refuses to run as root: when the tests run as root (CI), the
 * server's commands run as the unprivileged user "nobody" (setpriv), in a
 * directory chowned to it.  The binaries are looked for in
 * $FLY_TEST_PG_BIN, then on PATH, then in /usr/lib/postgresql/N/bin
 * (Debian's postgresql package), the newest N first.
 */
#ifndef FLY_TEST_PG_H
#define FLY_TEST_PG_H

struct fly_test_pg {
	char dir[128];        /* the temporary directory (socket here) */
	char bin[256];        /* the directory holding initdb and pg_ctl */
	char conninfo[256];   /* libpq connection string for the tests */
	int running;
};

/* Find initdb and pg_ctl.  @return 0 (@p bin filled) or -ENOENT. */
int fly_test_pg_find(char *bin, size_t cap);
/* initdb and start.  @return 0, -ENOENT (no PostgreSQL), -errno. */
int fly_test_pg_start(struct fly_test_pg *pg);
/* Start again after a stop or a kill (same data). */
int fly_test_pg_restart(struct fly_test_pg *pg);
/* Stop (fast shutdown). */
int fly_test_pg_stop(struct fly_test_pg *pg);
/* SIGKILL the postmaster (and its children, by its process group). */
int fly_test_pg_kill(struct fly_test_pg *pg);
/* Stop if running, then rm -rf the directory. */
void fly_test_pg_cleanup(struct fly_test_pg *pg);
/* Run @p sql on the server; the first row's first value (caller frees;
 * "" when none) in *out (may be NULL).  @return 0 or -EIO (the message
 * printed). */
int fly_test_pg_exec(const struct fly_test_pg *pg, const char *sql,
		     char **out);

/* Open a session of its own and run @p sql in it, keeping the session
 * (a session-level advisory lock stays held until it is closed).
 * @param[out] out the session, closed with fly_test_pg_close().
 * @return 0 or -EIO (the message printed). */
int fly_test_pg_open(const struct fly_test_pg *pg, const char *sql,
		     void **out);
/* Close a session of fly_test_pg_open() (NULL: no-op). */
void fly_test_pg_close(void *session);

#endif /* FLY_TEST_PG_H */
