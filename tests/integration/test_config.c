/*
 * test_config.c -- flytuned's configuration file and process contract
 * against the real binary: bad files exit 6 naming the key, a valid file
 * starts, SIGHUP with a bad file keeps serving the old config, SIGTERM
 * exits 0; command-line errors and --help.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../common/daemon.h"
#include "../common/jreq.h"

#define T_MS 5000

static int external(void)
{
	const char *e = getenv("FLY_TEST_DAEMON");

	return e != NULL && *e != '\0';
}

/* Start with @p cfg, expect exit 6 and @p needle in the log. */
static void expect_refused(const char *cfg, const char *needle)
{
	struct fly_test_daemon d;
	int rc;

	if (external())
		skip();
	rc = fly_test_daemon_start(&d, cfg, NULL);
	if (rc != -ECHILD || d.exit_status != 6 ||
	    !fly_test_daemon_log_has(&d, needle)) {
		fly_test_daemon_print_log(&d);
		fly_test_daemon_cleanup(&d);
		fail_msg("config %s: rc=%d exit=%d, wanted exit 6 naming %s",
			 cfg, rc, d.exit_status, needle);
	}
	fly_test_daemon_cleanup(&d);
}

static void test_unknown_key(void **state)
{
	expect_refused("{\"foo\":1}", "unknown key 'foo'");
	expect_refused("{\"bucketing\":{\"gemm\":{\"pow2\":4}}}",
		       "bucketing.gemm.pow2");
	expect_refused("{\"bucketing\":{\"nosuchop\":{}}}", "nosuchop");
}

static void test_wrong_type(void **state)
{
	expect_refused("{\"queue_cap\":\"x\"}", "'queue_cap' must be an integer");
	expect_refused("{\"policy\":5}", "'policy'");
	expect_refused("{\"margin\":true}", "'margin'");
	expect_refused("{\"bucketing\":[]}", "'bucketing'");
}

static void test_out_of_range(void **state)
{
	expect_refused("{\"queue_cap\":0}", "'queue_cap' must be an integer "
		       "in 1..1000000");
	expect_refused("{\"frame_cap\":1.5}", "'frame_cap'");
	expect_refused("{\"policy\":\"sometimes\"}", "'policy'");
	expect_refused("{\"job_budget_s\":-1}", "'job_budget_s'");
}

static void test_not_json_or_duplicates(void **state)
{
	expect_refused("this is not json", "config_error");
	expect_refused("{\"policy\":\"idle\",\"policy\":\"always\"}",
		       "config_error");
}

static void test_valid_config_and_sigterm(void **state)
{
	struct fly_test_daemon d;
	char *resp = NULL;
	int fd;

	if (external())
		skip();
	assert_int_equal(fly_test_daemon_start(&d,
		"{\"queue_cap\":10,\"margin\":0.05,\"log_level\":\"debug\","
		"\"idle_timeout_ms\":60000,\"admin_group\":\"nosuchgroup\","
		"\"bucketing\":{\"gemm\":{\"pow2_max\":512,\"step\":512}}}",
		NULL), 0);
	fd = fly_test_connect(d.sock);
	assert_true(fd >= 0);
	assert_int_equal(fly_test_request(fd, "{\"req\":\"status\"}", &resp,
					  T_MS), 0);
	assert_non_null(strstr(resp, "\"ok\":true"));
	assert_non_null(strstr(resp, "\"state\":\"ready\""));
	free(resp);
	close(fd);
	assert_int_equal(fly_test_daemon_stop(&d), 0);
	/* A graceful stop removes its socket file. */
	assert_int_equal(access(d.sock, F_OK), -1);
	fly_test_daemon_cleanup(&d);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

/* Wait (bounded) until the log has @p needle. */
static int wait_log(const struct fly_test_daemon *d, const char *needle)
{
	for (int i = 0; i < 200; i++) {
		if (fly_test_daemon_log_has(d, needle))
			return 1;
		usleep(50 * 1000);
	}
	return 0;
}

/* The number after "@p name": in the answer to @p req on daemon @p d,
 * searched from "@p scope": (NULL: from the start); -1 when absent. */
static int64_t number_of(const struct fly_test_daemon *d, const char *req,
			 const char *scope, const char *name)
{
	char *resp = NULL, *p, pat[64];
	int fd = fly_test_connect(d->sock);
	int64_t v = -1;

	assert_true(fd >= 0);
	assert_int_equal(fly_test_request(fd, req, &resp, T_MS), 0);
	p = resp;
	if (scope != NULL) {
		snprintf(pat, sizeof(pat), "\"%s\":", scope);
		p = strstr(p, pat);
	}
	snprintf(pat, sizeof(pat), "\"%s\":", name);
	if (p != NULL && (p = strstr(p, pat)) != NULL)
		v = strtoll(p + strlen(pat), NULL, 10);
	free(resp);
	close(fd);
	return v;
}

static int64_t max_clients_of(const struct fly_test_daemon *d)
{
	return number_of(d, "{\"req\":\"stats\"}", NULL, "max_clients");
}

static void test_sighup_reload(void **state)
{
	struct fly_test_daemon d;

	if (external())
		skip();
	assert_int_equal(fly_test_daemon_start(&d, "{\"max_clients\":50}",
					       NULL), 0);
	assert_int_equal(max_clients_of(&d), 50);
	/* A bad file: the old configuration stays and the daemon serves. */
	write_file(d.config, "{\"max_clients\":40,\"bogus\":1}");
	assert_int_equal(fly_test_daemon_kill(&d, SIGHUP), 0);
	assert_true(wait_log(&d, "reload_failed"));
	assert_true(fly_test_daemon_log_has(&d, "unknown key 'bogus'"));
	assert_int_equal(max_clients_of(&d), 50);
	/* A good file is applied. */
	write_file(d.config, "{\"backend\":\"cpu\",\"policy\":\"on-request\","
		   "\"max_clients\":40}");
	assert_int_equal(fly_test_daemon_kill(&d, SIGHUP), 0);
	assert_true(wait_log(&d, "info reloaded"));
	assert_int_equal(max_clients_of(&d), 40);
	assert_int_equal(fly_test_daemon_stop(&d), 0);
	fly_test_daemon_cleanup(&d);
}

/* The "variant" of `get` for @p key on daemon @p d, or "" when it is not
 * found (into @p out). */
static void get_variant(const struct fly_test_daemon *d, const char *key,
			char *out, size_t cap)
{
	char req[256], *resp = NULL, *p;
	int fd = fly_test_connect(d->sock);

	assert_true(fd >= 0);
	snprintf(req, sizeof(req), "{\"req\":\"get\",\"key\":\"%s\"}", key);
	assert_int_equal(fly_test_request(fd, req, &resp, T_MS), 0);
	out[0] = '\0';
	p = strstr(resp, "\"variant\":\"");
	if (strstr(resp, "\"ok\":true") != NULL && p != NULL)
		sscanf(p + 11, "%63[^\"]", out);
	else
		assert_non_null(strstr(resp, "not_found"));
	free(resp);
	close(fd);
}

/* The shm table's entry count in `status` of daemon @p d. */
static int64_t shm_count(const struct fly_test_daemon *d)
{
	return number_of(d, "{\"req\":\"status\"}", "shm", "count");
}

/* A system_db set, changed or removed by SIGHUP takes effect at once: its
 * rows are answered (and published) after the reload, and no longer once
 * it is removed.  The system DB is another daemon's tuning.db, with one
 * imported row. */
static void test_sighup_system_db(void **state)
{
	struct fly_test_daemon a, b;
	char cfg[600], req[1024], dev[64] = "", lv[64] = "", *resp = NULL, v[64];
	const char *key = "rmsnorm/fp32/m=32,n=4096";
	int fd;

	if (external())
		skip();
	assert_int_equal(fly_test_daemon_start(&a, NULL, NULL), 0);
	fd = fly_test_connect(a.sock);
	assert_true(fd >= 0);
	assert_int_equal(fly_test_request(fd, "{\"req\":\"hello\","
					  "\"version\":1}", &resp, T_MS), 0);
	sscanf(strstr(resp, "\"id\":\"") + 6, "%63[^\"]", dev);
	sscanf(strstr(resp, "\"libver\":\"") + 10, "%63[^\"]", lv);
	free(resp);
	snprintf(req, sizeof(req), "{\"req\":\"import\",\"results\":[{"
		 "\"key\":\"%s\",\"device\":\"%s\",\"libver\":\"%s\","
		 "\"variant\":\"rms_vec\",\"params\":[4,1,1],"
		 "\"median_us\":3.5,\"mad_us\":0.1,\"tune_s\":0.5,"
		 "\"tuned_at\":1700000000}]}", key, dev, lv);
	assert_int_equal(fly_test_request(fd, req, &resp, T_MS), 0);
	assert_non_null(strstr(resp, "\"ok\":true"));
	free(resp);
	close(fd);
	assert_int_equal(fly_test_daemon_stop(&a), 0);

	assert_int_equal(fly_test_daemon_start(&b, NULL, NULL), 0);
	get_variant(&b, key, v, sizeof(v));
	assert_string_equal(v, "");
	snprintf(cfg, sizeof(cfg), "{\"backend\":\"cpu\",\"policy\":"
		 "\"on-request\",\"system_db\":\"%s\"}", a.db);
	write_file(b.config, cfg);
	assert_int_equal(fly_test_daemon_kill(&b, SIGHUP), 0);
	assert_true(wait_log(&b, "system_db_changed"));
	assert_true(fly_test_daemon_log_has(&b, "attached=1"));
	assert_true(wait_log(&b, "info reloaded"));
	get_variant(&b, key, v, sizeof(v));
	assert_string_equal(v, "rms_vec");
	assert_int_equal(shm_count(&b), 1); /* published to the clients */
	/* Removed: the row is gone with it. */
	write_file(b.config, "{\"backend\":\"cpu\",\"policy\":\"on-request\"}");
	assert_int_equal(fly_test_daemon_kill(&b, SIGHUP), 0);
	assert_true(wait_log(&b, "attached=0"));
	for (int i = 0; i < 100; i++) {
		get_variant(&b, key, v, sizeof(v));
		if (v[0] == '\0')
			break;
		usleep(50 * 1000);
	}
	assert_string_equal(v, "");
	assert_int_equal(shm_count(&b), 0);
	assert_int_equal(fly_test_daemon_stop(&b), 0);
	fly_test_daemon_cleanup(&b);
	fly_test_daemon_cleanup(&a);
}

/* Run flytuned-test with @p argv; @return its exit status, output in
 * @p out (cap bytes). */
static int run_binary(const char *const *args, char *out, size_t cap)
{
	char exe[512];
	int p[2], st;
	size_t n = 0;
	ssize_t r;
	pid_t pid;

	snprintf(exe, sizeof(exe), "%s/flytuned-test", FLY_BUILD_DIR);
	assert_int_equal(pipe(p), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		const char *av[16];
		int i = 0;

		dup2(p[1], 1);
		dup2(p[1], 2);
		close(p[0]);
		av[i++] = exe;
		for (; *args != NULL && i < 15; args++)
			av[i++] = *args;
		av[i] = NULL;
		execv(exe, (char *const *)av);
		_exit(127);
	}
	close(p[1]);
	/* Every use expects the binary to exit by itself: one still running
	 * after 30 s is killed and fails the test rather than hanging it. */
	for (int waited = 0; n + 1 < cap;) {
		struct pollfd pf = {.fd = p[0], .events = POLLIN};

		if (poll(&pf, 1, 1000) == 0) {
			if (++waited < 30)
				continue;
			kill(pid, SIGKILL);
			break;
		}
		r = read(p[0], out + n, cap - 1 - n);
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	out[n] = '\0';
	close(p[0]);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

static void test_command_line(void **state)
{
	static const char *const help[] = {"--help", NULL};
	static const char *const bad[] = {"--no-such-option", NULL};
	static const char *const baddev[] = {"--device", "x", NULL};
	static const char *const missing[] = {"--config",
		"/nonexistent/flytuned.conf", "--state-dir",
		"/tmp/flytuned-never-created", NULL};
	char out[8192];

	assert_int_equal(run_binary(help, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "--state-dir"));
	assert_non_null(strstr(out, "never forks"));
	assert_int_equal(run_binary(bad, out, sizeof(out)), 2);
	assert_int_equal(run_binary(baddev, out, sizeof(out)), 2);
	/* An explicit --config must exist. */
	assert_int_equal(run_binary(missing, out, sizeof(out)), 6);
	assert_non_null(strstr(out, "config_error"));
}

/* Start @p d with NOTIFY_SOCKET at a fresh datagram socket "NAME.PID"
 * (a leading '@': abstract), and WATCHDOG_USEC=@p wd_usec unless NULL.
 * The path goes to @p path; @return the socket's fd.  The environment is
 * static: the harness keeps it for a restart. */
static int start_notified(struct fly_test_daemon *d, const char *name,
			  const char *wd_usec, char path[64])
{
	static char env_ns[96], env_wd[48];
	static const char *env[3];
	int nfd;

	snprintf(path, 64, "%s.%d", name, (int)getpid());
	nfd = fly_test_notify_listen(path);
	assert_true(nfd >= 0);
	snprintf(env_ns, sizeof(env_ns), "NOTIFY_SOCKET=%s", path);
	snprintf(env_wd, sizeof(env_wd), "WATCHDOG_USEC=%s",
		 wd_usec != NULL ? wd_usec : "");
	env[0] = env_ns;
	env[1] = wd_usec != NULL ? env_wd : NULL;
	env[2] = NULL;
	assert_int_equal(fly_test_daemon_start(d, NULL, env), 0);
	return nfd;
}

static void test_sd_notify(void **state)
{
	struct fly_test_daemon d;
	char path[64];
	int nfd;

	if (external())
		skip();
	nfd = start_notified(&d, "/tmp/flytest-notify", "200000", path);
	assert_true(fly_test_notify_wait(nfd, "READY=1", fly_test_timeout(T_MS)));
	assert_true(fly_test_notify_wait(nfd, "WATCHDOG=1", fly_test_timeout(T_MS)));
	assert_int_equal(fly_test_daemon_kill(&d, SIGHUP), 0);
	assert_true(fly_test_notify_wait(nfd, "RELOADING=1", fly_test_timeout(T_MS)));
	assert_int_equal(fly_test_daemon_stop(&d), 0);
	assert_true(fly_test_notify_wait(nfd, "STOPPING=1", fly_test_timeout(T_MS)));
	fly_test_daemon_cleanup(&d);
	close(nfd);
	unlink(path);
}

/* A notify socket nobody reads (its queue, net.unix.max_dgram_qlen, is
 * 10 by default) never stalls the daemon: with a ping every 10 ms and
 * nothing read for a second, `status` is still answered.  Before, the
 * loop thread blocked in sendto once the queue was full. */
static void test_notify_unread_never_blocks(void **state)
{
	struct fly_test_daemon d;
	char path[64];
	int nfd, fd;
	cJSON *o;

	(void)state;
	if (external())
		skip();
	nfd = start_notified(&d, "/tmp/flytest-nfull", "20000", path);
	usleep(1000 * 1000); /* ~100 pings, none read */
	fd = fly_test_connect(d.sock);
	assert_true(fd >= 0);
	o = fly_test_req(fd, "{\"req\":\"status\"}");
	assert_true(fly_test_is_ok(o));
	cJSON_Delete(o);
	close(fd);
	/* and the pings go on once the queue drains */
	assert_true(fly_test_notify_wait(nfd, "WATCHDOG=1",
					 fly_test_timeout(T_MS)));
	assert_int_equal(fly_test_daemon_stop(&d), 0);
	fly_test_daemon_cleanup(&d);
	close(nfd);
	unlink(path);
}

static void test_sd_notify_abstract(void **state)
{
	struct fly_test_daemon d;
	char path[64];
	int nfd;

	if (external())
		skip();
	nfd = start_notified(&d, "@flytest-notify", NULL, path);
	assert_true(fly_test_notify_wait(nfd, "READY=1", fly_test_timeout(T_MS)));
	assert_int_equal(fly_test_daemon_stop(&d), 0);
	fly_test_daemon_cleanup(&d);
	close(nfd);
}

/* Socket activation: the listener arrives as fd 3 with LISTEN_FDS=1 and
 * LISTEN_PID set to the daemon's pid (as systemd does after fork). */
static void test_socket_activation(void **state)
{
	char dir[] = "/tmp/flytest-act.XXXXXX", sock[64], log[128], exe[512];
	struct sockaddr_un sa;
	int lfd, fd, st, ok = 0;
	char *resp = NULL;
	pid_t pid;

	if (external())
		skip();
	assert_non_null(mkdtemp(dir));
	snprintf(sock, sizeof(sock), "%s/act.sock", dir);
	snprintf(log, sizeof(log), "%s/daemon.log", dir);
	lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_true(lfd >= 0);
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(lfd, 16), 0);
	snprintf(exe, sizeof(exe), "%s/flytuned-test", FLY_BUILD_DIR);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char cfg[160], pidv[32];
		FILE *f;
		int lg = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);

		snprintf(cfg, sizeof(cfg), "%s/c.json", dir);
		f = fopen(cfg, "w");
		if (f == NULL)
			_exit(126);
		fputs("{\"backend\":\"cpu\",\"policy\":\"on-request\"}", f);
		fclose(f);
		dup2(lg, 2);
		dup2(lfd, 3);
		snprintf(pidv, sizeof(pidv), "%d", (int)getpid());
		setenv("LISTEN_PID", pidv, 1);
		setenv("LISTEN_FDS", "1", 1);
		execl(exe, exe, "--state-dir", dir, "--socket",
		      "/tmp/flytest-unused.sock", "--config", cfg,
		      (char *)NULL);
		_exit(127);
	}
	close(lfd);
	for (int i = 0; i < 200 && !ok; i++) {
		fd = fly_test_connect(sock);
		if (fd >= 0 && fly_test_request(fd, "{\"req\":\"hello\","
				"\"version\":1}", &resp, 1000) == 0)
			ok = strstr(resp, "\"ok\":true") != NULL;
		free(resp);
		resp = NULL;
		if (fd >= 0)
			close(fd);
		if (!ok)
			usleep(50 * 1000);
	}
	kill(pid, SIGTERM);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(ok);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	/* The activated socket is systemd's: not unlinked on stop. */
	assert_int_equal(access(sock, F_OK), 0);
	unlink(sock);
	unlink(log);
	snprintf(exe, sizeof(exe), "%s/c.json", dir);
	unlink(exe);
	snprintf(exe, sizeof(exe), "%s/tuning.db", dir);
	unlink(exe);
	snprintf(exe, sizeof(exe), "%s/tuning.db-wal", dir);
	unlink(exe);
	snprintf(exe, sizeof(exe), "%s/tuning.db-shm", dir);
	unlink(exe);
	rmdir(dir);
}

/* fd exhaustion (RLIMIT_NOFILE just above what the daemon holds) and a
 * storm of connects: extra clients are shed (EOF) with the spare-fd
 * trick, the existing client is served, the log is rate-limited. */
static void test_emfile_storm(void **state)
{
	struct fly_test_daemon d;
	struct rlimit old, low;
	int keep, storm[100], closed = 0, lines;
	char *resp = NULL;

	if (external())
		skip();
	assert_int_equal(fly_test_daemon_start(&d, NULL, NULL), 0);
	keep = fly_test_connect(d.sock);
	assert_true(keep >= 0);
	assert_int_equal(fly_test_request(keep, "{\"req\":\"list\"}", &resp,
					  T_MS), 0);
	free(resp);
	assert_int_equal(prlimit(d.pid, RLIMIT_NOFILE, NULL, &old), 0);
	low = old;
	/* A few fds more than it holds (the spare fd is among the low ones:
	 * fds are allocated lowest first). */
	low.rlim_cur = (rlim_t)fly_test_fd_count(d.pid) + 3;
	assert_int_equal(prlimit(d.pid, RLIMIT_NOFILE, &low, NULL), 0);
	for (int i = 0; i < 100; i++)
		storm[i] = fly_test_connect(d.sock);
	for (int i = 0; i < 100; i++) {
		int rc;

		if (storm[i] < 0)
			continue;
		rc = fly_test_request(storm[i], "{\"req\":\"list\"}", &resp,
				      T_MS);
		if (rc == -ECONNRESET || rc == -EPIPE)
			closed++;
		else
			assert_int_equal(rc, 0);
		free(resp);
		resp = NULL;
	}
	assert_true(closed >= 1);
	assert_int_equal(fly_test_request(keep, "{\"req\":\"list\",\"id\":1}",
					  &resp, T_MS), 0);
	assert_non_null(strstr(resp, "\"ok\":true"));
	free(resp);
	for (int i = 0; i < 100; i++)
		if (storm[i] >= 0)
			close(storm[i]);
	assert_int_equal(prlimit(d.pid, RLIMIT_NOFILE, &old, NULL), 0);
	lines = 0;
	{
		char line[2048];
		FILE *f = fopen(d.log, "r");

		assert_non_null(f);
		while (fgets(line, sizeof(line), f) != NULL)
			lines += strstr(line, "accept_error") != NULL;
		fclose(f);
	}
	assert_true(lines >= 1 && lines < 10);
	close(keep);
	assert_int_equal(fly_test_daemon_stop(&d), 0);
	fly_test_daemon_cleanup(&d);
}

/* A second daemon on a live socket refuses to start; a stale socket file
 * (nothing listening) is replaced. */
static void test_socket_in_use_and_stale(void **state)
{
	struct fly_test_daemon d;
	char out[8192], cfg[320], *resp = NULL;
	const char *args[8];
	struct sockaddr_un sa;
	int fd;

	if (external())
		skip();
	assert_int_equal(fly_test_daemon_start(&d, NULL, NULL), 0);
	snprintf(cfg, sizeof(cfg), "%s", d.config);
	args[0] = "--state-dir";
	args[1] = d.dir;
	args[2] = "--config";
	args[3] = cfg;
	args[4] = NULL;
	assert_int_equal(run_binary(args, out, sizeof(out)), 1);
	assert_non_null(strstr(out, "another daemon answers"));
	fd = fly_test_connect(d.sock);
	assert_true(fd >= 0);
	assert_int_equal(fly_test_request(fd, "{\"req\":\"list\"}", &resp,
					  T_MS), 0);
	assert_non_null(strstr(resp, "\"ok\":true"));
	free(resp);
	close(fd);
	assert_int_equal(fly_test_daemon_stop(&d), 0);
	/* Leave a dead socket file behind, then restart over it. */
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	assert_true(strlen(d.sock) < sizeof(sa.sun_path));
	memcpy(sa.sun_path, d.sock, strlen(d.sock));
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	assert_int_equal(access(d.sock, F_OK), 0);
	assert_int_equal(fly_test_daemon_restart(&d), 0);
	assert_true(fly_test_daemon_log_has(&d, "stale_socket"));
	assert_int_equal(fly_test_daemon_stop(&d), 0);
	fly_test_daemon_cleanup(&d);
}

/* A socket directory that group or others may write is refused, sticky
 * or not (they could replace the socket, or take its name first). */
static void test_socket_dir_writable_by_others(void **state)
{
	char dir[] = "/tmp/flytest-wdir.XXXXXX", sock[96], cfg[96];
	char out[8192];
	const char *args[8];
	FILE *f;

	if (external())
		skip();
	assert_non_null(mkdtemp(dir));
	snprintf(cfg, sizeof(cfg), "%s/c.json", dir);
	f = fopen(cfg, "w");
	assert_non_null(f);
	fputs("{\"backend\":\"cpu\"}\n", f);
	fclose(f);
	args[0] = "--state-dir";
	args[1] = dir;
	args[2] = "--config";
	args[3] = cfg;
	args[4] = NULL;
	snprintf(sock, sizeof(sock), "%s/gpu0.sock", dir);
	static const mode_t modes[] = {0777, 0770, 0720, 01777};
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		assert_int_equal(chmod(dir, modes[i]), 0);
		assert_int_not_equal(run_binary(args, out, sizeof(out)), 0);
		assert_non_null(strstr(out, "writable by group or others"));
		assert_int_not_equal(access(sock, F_OK), 0); /* not bound */
	}
	/* Refused before anything was made there. */
	snprintf(sock, sizeof(sock), "%s/tuning.db", dir);
	assert_int_not_equal(access(sock, F_OK), 0);
	unlink(cfg);
	assert_int_equal(rmdir(dir), 0);
}

/* RELIABILITY.md S1: the socket the daemon binds is srw-rw---- (0660,
 * set by the daemon whatever umask it was started with), owned by the
 * daemon's user and group; under systemd the group is the unit's
 * (flytune), here the test's. */
static void test_socket_mode(void **state)
{
	struct fly_test_daemon d;
	struct stat st;
	mode_t old;

	if (external())
		skip();
	old = umask(0);
	assert_int_equal(fly_test_daemon_start(&d, NULL, NULL), 0);
	umask(old);
	assert_int_equal(stat(d.sock, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0660);
	assert_int_equal(st.st_uid, getuid());
	assert_int_equal(st.st_gid, getgid());
	assert_int_equal(fly_test_daemon_stop(&d), 0);
	fly_test_daemon_cleanup(&d);
}

/* idle_timeout_ms closes a silent connection. */
static void test_idle_timeout(void **state)
{
	struct fly_test_daemon d;
	char *resp = NULL;
	int fd;

	if (external())
		skip();
	assert_int_equal(fly_test_daemon_start(&d, "{\"idle_timeout_ms\":300}",
					       NULL), 0);
	fd = fly_test_connect(d.sock);
	assert_true(fd >= 0);
	assert_int_equal(fly_test_request(fd, "{\"req\":\"list\"}", &resp,
					  T_MS), 0);
	free(resp);
	assert_int_equal(fly_test_wait_closed(fd, fly_test_timeout(10000)), 0);
	close(fd);
	assert_true(fly_test_daemon_log_has(&d, "reason=idle_timeout"));
	assert_int_equal(fly_test_daemon_stop(&d), 0);
	fly_test_daemon_cleanup(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_unknown_key),
		cmocka_unit_test(test_wrong_type),
		cmocka_unit_test(test_out_of_range),
		cmocka_unit_test(test_not_json_or_duplicates),
		cmocka_unit_test(test_valid_config_and_sigterm),
		cmocka_unit_test(test_sighup_reload),
		cmocka_unit_test(test_sighup_system_db),
		cmocka_unit_test(test_command_line),
		cmocka_unit_test(test_sd_notify),
		cmocka_unit_test(test_sd_notify_abstract),
		cmocka_unit_test(test_notify_unread_never_blocks),
		cmocka_unit_test(test_socket_activation),
		cmocka_unit_test(test_emfile_storm),
		cmocka_unit_test(test_socket_in_use_and_stale),
		cmocka_unit_test(test_socket_dir_writable_by_others),
		cmocka_unit_test(test_socket_mode),
		cmocka_unit_test(test_idle_timeout),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
