/*
 * pg.c -- a throw-away PostgreSQL server for the fleet tests (pg.h).
 */
#include <errno.h>
#include <glob.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "pg.h"

static int has_tools(const char *dir)
{
	char p[512];

	snprintf(p, sizeof(p), "%s/initdb", dir);
	if (access(p, X_OK) != 0)
		return 0;
	snprintf(p, sizeof(p), "%s/pg_ctl", dir);
	return access(p, X_OK) == 0;
}

int fly_test_pg_find(char *bin, size_t cap)
{
	const char *env = getenv("FLY_TEST_PG_BIN");
	const char *path = getenv("PATH");
	glob_t g;
	int found = 0;

	if (env != NULL && has_tools(env)) {
		snprintf(bin, cap, "%s", env);
		return 0;
	}
	if (path != NULL) {
		char *dup = strdup(path), *save = NULL, *d;

		for (d = strtok_r(dup, ":", &save); d != NULL && !found;
		     d = strtok_r(NULL, ":", &save))
			if (d[0] != '\0' && has_tools(d)) {
				snprintf(bin, cap, "%s", d);
				found = 1;
			}
		free(dup);
		if (found)
			return 0;
	}
	/* Debian: /usr/lib/postgresql/15/bin; sorted, so the last is the
	 * newest for versions of one digit count. */
	if (glob("/usr/lib/postgresql/*/bin", 0, NULL, &g) == 0) {
		for (size_t i = g.gl_pathc; i-- > 0 && !found;)
			if (has_tools(g.gl_pathv[i])) {
				snprintf(bin, cap, "%s", g.gl_pathv[i]);
				found = 1;
			}
		globfree(&g);
	}
	return found ? 0 : -ENOENT;
}

/* Run "BIN/@p tool ARGS" as the server's user (nobody when root). */
static int run_as(const struct fly_test_pg *pg, const char *tool,
		  const char *args)
{
	char cmd[2048];
	int st;

	snprintf(cmd, sizeof(cmd), "%s%s/%s %s >>%s/pg_ctl.log 2>&1",
		 geteuid() == 0 ? "setpriv --reuid=nobody --regid=nogroup "
				  "--clear-groups " : "",
		 pg->bin, tool, args, pg->dir);
	st = system(cmd);
	return st == 0 ? 0 : -EIO;
}

static int server_start(struct fly_test_pg *pg)
{
	char args[700];
	int rc;

	snprintf(args, sizeof(args), "-D %s/data -l %s/server.log -w -t 60 "
		 "-o \"-k %s -c listen_addresses='' -c fsync=off\" start",
		 pg->dir, pg->dir, pg->dir);
	rc = run_as(pg, "pg_ctl", args);
	pg->running = rc == 0;
	if (rc < 0) {
		char cmd[400];

		snprintf(cmd, sizeof(cmd), "tail -20 %s/pg_ctl.log %s/server.log "
			 ">&2", pg->dir, pg->dir);
		(void)system(cmd);
	}
	return rc;
}

int fly_test_pg_start(struct fly_test_pg *pg)
{
	char args[600];
	int rc;

	memset(pg, 0, sizeof(*pg));
	if (fly_test_pg_find(pg->bin, sizeof(pg->bin)) < 0)
		return -ENOENT;
	snprintf(pg->dir, sizeof(pg->dir), "/tmp/flypg.XXXXXX");
	if (mkdtemp(pg->dir) == NULL)
		return -errno;
	if (geteuid() == 0) {
		struct passwd *pw = getpwnam("nobody");

		if (pw == NULL || chown(pg->dir, pw->pw_uid, pw->pw_gid) != 0)
			return -EPERM;
	}
	snprintf(args, sizeof(args), "-D %s/data -U fleet -A trust "
		 "--no-sync -E UTF8 --locale=C", pg->dir);
	rc = run_as(pg, "initdb", args);
	if (rc < 0) {
		fprintf(stderr, "pg: initdb failed (%s/pg_ctl.log)\n", pg->dir);
		return rc;
	}
	snprintf(pg->conninfo, sizeof(pg->conninfo),
		 "host=%s user=fleet dbname=postgres connect_timeout=5",
		 pg->dir);
	return server_start(pg);
}

int fly_test_pg_restart(struct fly_test_pg *pg)
{
	if (pg->running)
		(void)fly_test_pg_stop(pg);
	return server_start(pg);
}

int fly_test_pg_stop(struct fly_test_pg *pg)
{
	char args[400];

	if (!pg->running)
		return 0;
	snprintf(args, sizeof(args), "-D %s/data -m fast -w stop", pg->dir);
	pg->running = 0;
	return run_as(pg, "pg_ctl", args);
}

int fly_test_pg_kill(struct fly_test_pg *pg)
{
	char path[300];
	FILE *f;
	long pid = 0;

	snprintf(path, sizeof(path), "%s/data/postmaster.pid", pg->dir);
	f = fopen(path, "r");
	if (f == NULL)
		return -errno;
	if (fscanf(f, "%ld", &pid) != 1)
		pid = 0;
	fclose(f);
	if (pid <= 1)
		return -EINVAL;
	/* The backends are the postmaster's children: kill them too, as a
	 * crash of the machine would (they would otherwise finish). */
	snprintf(path, sizeof(path), "pkill -KILL -P %ld", pid);
	(void)system(path);
	if (kill((pid_t)pid, SIGKILL) != 0)
		return -errno;
	for (int i = 0; i < 100 && kill((pid_t)pid, 0) == 0; i++)
		usleep(50000);
	pg->running = 0;
	return 0;
}

void fly_test_pg_cleanup(struct fly_test_pg *pg)
{
	char cmd[300];

	if (pg->dir[0] == '\0')
		return;
	(void)fly_test_pg_stop(pg);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", pg->dir);
	(void)system(cmd);
	pg->dir[0] = '\0';
}

int fly_test_pg_exec(const struct fly_test_pg *pg, const char *sql,
		     char **out)
{
	PGconn *c = PQconnectdb(pg->conninfo);
	PGresult *r;
	int rc = 0;

	if (out != NULL)
		*out = NULL;
	if (PQstatus(c) != CONNECTION_OK) {
		fprintf(stderr, "pg: connect: %s", PQerrorMessage(c));
		PQfinish(c);
		return -EIO;
	}
	r = PQexec(c, sql);
	if (PQresultStatus(r) != PGRES_TUPLES_OK &&
	    PQresultStatus(r) != PGRES_COMMAND_OK) {
		fprintf(stderr, "pg: %s: %s", sql, PQresultErrorMessage(r));
		rc = -EIO;
	} else if (out != NULL) {
		*out = strdup(PQresultStatus(r) == PGRES_TUPLES_OK &&
			      PQntuples(r) > 0 ? PQgetvalue(r, 0, 0) : "");
	}
	PQclear(r);
	PQfinish(c);
	return rc;
}

int fly_test_pg_open(const struct fly_test_pg *pg, const char *sql,
		     void **out)
{
	PGconn *c = PQconnectdb(pg->conninfo);
	PGresult *r;
	int ok;

	*out = NULL;
	if (PQstatus(c) != CONNECTION_OK) {
		fprintf(stderr, "pg: connect: %s", PQerrorMessage(c));
		PQfinish(c);
		return -EIO;
	}
	r = PQexec(c, sql);
	ok = PQresultStatus(r) == PGRES_TUPLES_OK ||
	     PQresultStatus(r) == PGRES_COMMAND_OK;
	if (!ok)
		fprintf(stderr, "pg: %s: %s", sql, PQresultErrorMessage(r));
	PQclear(r);
	if (!ok) {
		PQfinish(c);
		return -EIO;
	}
	*out = c;
	return 0;
}

void fly_test_pg_close(void *session)
{
	if (session != NULL)
		PQfinish(session);
}
