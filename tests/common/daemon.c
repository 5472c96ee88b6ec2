/*
 * daemon.c -- integration-test harness (see daemon.h).
 *
 * Owns: the daemon child process and its state directory.
 * Thread: the test's main thread.
 */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <sqlite3.h>

#include "daemon.h"

#ifndef FLY_BUILD_DIR
#define FLY_BUILD_DIR "build"
#endif

#define START_TIMEOUT_MS 30000
#define STOP_TIMEOUT_MS 20000

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int fly_test_timeout(int ms)
{
	const char *m = getenv("FLY_TEST_TIMEOUT_MULTIPLIER");
	double f = m != NULL ? atof(m) : 1.0;

	if (f < 1.0)
		f = 1.0;
	return (int)(ms * f);
}

int fly_test_connect(const char *sock)
{
	struct sockaddr_un sa;
	int fd;

	if (strlen(sock) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	strcpy(sa.sun_path, sock);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = -errno;

		close(fd);
		return e;
	}
	return fd;
}

int fly_test_send_raw(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int fly_test_send_frame(int fd, const char *json)
{
	size_t len = strlen(json);
	uint8_t *buf = malloc(len + 4);
	int rc;

	if (buf == NULL)
		return -ENOMEM;
	buf[0] = (uint8_t)len;
	buf[1] = (uint8_t)(len >> 8);
	buf[2] = (uint8_t)(len >> 16);
	buf[3] = (uint8_t)(len >> 24);
	memcpy(buf + 4, json, len);
	rc = fly_test_send_raw(fd, buf, len + 4);
	free(buf);
	return rc;
}

/* Read exactly @p len bytes before @p deadline (monotonic ms). */
static int read_full(int fd, uint8_t *buf, size_t len, uint64_t deadline)
{
	while (len > 0) {
		uint64_t t = now_ms();
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		ssize_t n;
		int r;

		if (t >= deadline)
			return -ETIMEDOUT;
		r = poll(&pfd, 1, (int)(deadline - t));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -ETIMEDOUT;
		n = read(fd, buf, len);
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return errno == ECONNRESET ? -ECONNRESET : -errno;
		}
		if (n == 0)
			return -ECONNRESET;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

int fly_test_recv_frame(int fd, char **resp, int timeout_ms)
{
	uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
	uint8_t hdr[4];
	uint32_t len;
	char *buf;
	int rc;

	*resp = NULL;
	rc = read_full(fd, hdr, 4, deadline);
	if (rc < 0)
		return rc;
	len = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 |
	      (uint32_t)hdr[2] << 16 | (uint32_t)hdr[3] << 24;
	if (len > 64u * 1024u * 1024u)
		return -EPROTO;
	buf = malloc((size_t)len + 1);
	if (buf == NULL)
		return -ENOMEM;
	rc = read_full(fd, (uint8_t *)buf, len, deadline);
	if (rc < 0) {
		free(buf);
		return rc;
	}
	buf[len] = '\0';
	*resp = buf;
	return 0;
}

int fly_test_request(int fd, const char *json, char **resp, int timeout_ms)
{
	int rc = fly_test_send_frame(fd, json);

	*resp = NULL;
	if (rc < 0)
		return rc;
	return fly_test_recv_frame(fd, resp, timeout_ms);
}

int fly_test_wait_closed(int fd, int timeout_ms)
{
	uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
	char buf[4096];

	for (;;) {
		uint64_t t = now_ms();
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		ssize_t n;
		int r;

		if (t >= deadline)
			return -ETIMEDOUT;
		r = poll(&pfd, 1, (int)(deadline - t));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -ETIMEDOUT;
		n = read(fd, buf, sizeof(buf));
		if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
			return 0;
	}
}

int fly_test_fd_count(pid_t pid)
{
	char path[64];
	struct dirent *e;
	DIR *dir;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	dir = opendir(path);
	if (dir == NULL)
		return -errno;
	while ((e = readdir(dir)) != NULL)
		if (e->d_name[0] != '.')
			n++;
	closedir(dir);
	return n;
}

void fly_test_daemon_print_log(const struct fly_test_daemon *d)
{
	char line[1024];
	char *lines[40] = {0};
	unsigned n = 0;
	FILE *f;

	if (d->log[0] == '\0' || (f = fopen(d->log, "r")) == NULL)
		return;
	while (fgets(line, sizeof(line), f) != NULL) {
		free(lines[n % 40]);
		lines[n % 40] = strdup(line);
		n++;
	}
	fclose(f);
	fprintf(stderr, "---- tail of %s ----\n", d->log);
	for (unsigned i = n > 40 ? n - 40 : 0; i < n; i++) {
		fputs(lines[i % 40] ? lines[i % 40] : "", stderr);
		free(lines[i % 40]);
		lines[i % 40] = NULL;
	}
	fprintf(stderr, "---- end ----\n");
}

int fly_test_daemon_log_has(const struct fly_test_daemon *d,
			    const char *needle)
{
	char line[2048];
	int found = 0;
	FILE *f = fopen(d->log, "r");

	if (f == NULL)
		return 0;
	while (!found && fgets(line, sizeof(line), f) != NULL)
		found = strstr(line, needle) != NULL;
	fclose(f);
	return found;
}

/* Write DIR/flytuned.conf: the test defaults overlaid with @p extra. */
static int write_config(struct fly_test_daemon *d, const char *extra)
{
	cJSON *cfg = NULL, *x = NULL;
	char *text = NULL;
	FILE *f;
	int rc = 0;

	if (extra != NULL) {
		x = cJSON_Parse(extra);
		if (x == NULL || !cJSON_IsObject(x)) {
			/* Not an object: write verbatim (config-error tests). */
			cJSON_Delete(x);
			f = fopen(d->config, "w");
			if (f == NULL)
				return -errno;
			fputs(extra, f);
			return fclose(f) == 0 ? 0 : -EIO;
		}
	}
	/* The test's keys as given (duplicates kept), then the defaults it
	 * did not set. */
	cfg = x != NULL ? x : cJSON_CreateObject();
	x = NULL;
	if (!cJSON_HasObjectItem(cfg, "backend"))
		cJSON_AddStringToObject(cfg, "backend", "cpu");
	if (!cJSON_HasObjectItem(cfg, "policy"))
		cJSON_AddStringToObject(cfg, "policy", "on-request");
	text = cJSON_PrintUnformatted(cfg);
	f = fopen(d->config, "w");
	if (f == NULL || text == NULL) {
		rc = f == NULL ? -errno : -ENOMEM;
		goto out;
	}
	fputs(text, f);
	if (fclose(f) != 0)
		rc = -EIO;
out:
	free(text);
	cJSON_Delete(cfg);
	cJSON_Delete(x);
	return rc;
}

static void child_exec(const struct fly_test_daemon *d)
{
	const char *exe = getenv("FLY_TEST_FLYTUNED");
	char path[512];
	int fd;

	if (exe == NULL) {
		snprintf(path, sizeof(path), "%s/flytuned-test", FLY_BUILD_DIR);
		exe = path;
	}
	fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
	if (fd >= 0) {
		dup2(fd, STDOUT_FILENO);
		dup2(fd, STDERR_FILENO);
		if (fd > 2)
			close(fd);
	}
	fd = open("/dev/null", O_RDONLY);
	if (fd >= 0 && fd != STDIN_FILENO) {
		dup2(fd, STDIN_FILENO);
		close(fd);
	}
	if (getenv("FLYTUNED_LOG_LEVEL") == NULL)
		setenv("FLYTUNED_LOG_LEVEL", "debug", 1);
	unsetenv("NOTIFY_SOCKET");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_PID");
	unsetenv("WATCHDOG_USEC");
	for (const char *const *e = d->env; e != NULL && *e != NULL; e++)
		putenv((char *)*e);
	execl(exe, exe, "--foreground", "--device", "0", "--state-dir",
	      d->dir, "--config", d->config, (char *)NULL);
	fprintf(stderr, "harness: exec %s: %s\n", exe, strerror(errno));
	_exit(127);
}

static int status_code(int st)
{
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return -EINVAL;
}

/* Whether the daemon answers a hello with ok:true. */
static int hello_ok(const char *sock)
{
	char *resp = NULL;
	int fd = fly_test_connect(sock);
	int ok = 0;

	if (fd < 0)
		return 0;
	if (fly_test_request(fd, "{\"req\":\"hello\",\"version\":1}", &resp,
			     1000) == 0)
		ok = strstr(resp, "\"ok\":true") != NULL;
	free(resp);
	close(fd);
	return ok;
}

static int spawn_and_wait(struct fly_test_daemon *d)
{
	uint64_t deadline = now_ms() + (uint64_t)fly_test_timeout(START_TIMEOUT_MS);
	pid_t pid = fork();

	if (pid < 0)
		return -errno;
	if (pid == 0)
		child_exec(d);
	d->pid = pid;
	while (now_ms() < deadline) {
		int st;

		if (waitpid(pid, &st, WNOHANG) == pid) {
			d->pid = 0;
			d->exit_status = status_code(st);
			return -ECHILD;
		}
		if (hello_ok(d->sock))
			return 0;
		usleep(50 * 1000);
	}
	fprintf(stderr, "harness: daemon did not answer hello in time\n");
	fly_test_daemon_print_log(d);
	fly_test_daemon_kill(d, SIGKILL);
	return -ETIMEDOUT;
}

int fly_test_daemon_start(struct fly_test_daemon *d,
			  const char *extra_config_json,
			  const char *const *env)
{
	const char *ext = getenv("FLY_TEST_DAEMON");
	int rc;

	memset(d, 0, sizeof(*d));
	d->env = env;
	if (ext != NULL && *ext != '\0') {
		d->external = 1;
		snprintf(d->sock, sizeof(d->sock), "%s", ext);
		return hello_ok(d->sock) ? 0 : -ECONNREFUSED;
	}
	snprintf(d->dir, sizeof(d->dir), "/tmp/flytest.XXXXXX");
	if (mkdtemp(d->dir) == NULL)
		return -errno;
	snprintf(d->sock, sizeof(d->sock), "%s/gpu0.sock", d->dir);
	snprintf(d->db, sizeof(d->db), "%s/tuning.db", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/daemon.log", d->dir);
	snprintf(d->config, sizeof(d->config), "%s/flytuned.conf", d->dir);
	rc = write_config(d, extra_config_json);
	if (rc < 0)
		return rc;
	rc = spawn_and_wait(d);
	if (rc == -ECHILD && d->exit_status != 6) {
		fprintf(stderr, "harness: daemon exited with %d at start-up\n",
			d->exit_status);
		fly_test_daemon_print_log(d);
	}
	return rc;
}

/* Wait for the child with a timeout; SIGKILL when it passes. */
static int reap(struct fly_test_daemon *d, int timeout_ms)
{
	uint64_t deadline = now_ms() + (uint64_t)fly_test_timeout(timeout_ms);
	int st;

	for (;;) {
		pid_t r = waitpid(d->pid, &st, WNOHANG);

		if (r == d->pid)
			break;
		if (r < 0)
			return -errno;
		if (now_ms() >= deadline) {
			fprintf(stderr, "harness: daemon %d did not exit; "
				"killing\n", (int)d->pid);
			fly_test_daemon_print_log(d);
			kill(d->pid, SIGKILL);
			waitpid(d->pid, &st, 0);
			break;
		}
		usleep(20 * 1000);
	}
	d->pid = 0;
	d->exit_status = status_code(st);
	return d->exit_status;
}

int fly_test_daemon_stop(struct fly_test_daemon *d)
{
	if (d->external)
		return -ENOTSUP;
	if (d->pid <= 0)
		return -ESRCH;
	if (kill(d->pid, SIGTERM) < 0)
		return -errno;
	return reap(d, STOP_TIMEOUT_MS);
}

int fly_test_daemon_kill(struct fly_test_daemon *d, int sig)
{
	if (d->external)
		return -ENOTSUP;
	if (d->pid <= 0)
		return -ESRCH;
	if (kill(d->pid, sig) < 0)
		return -errno;
	if (sig == SIGKILL || sig == SIGTERM || sig == SIGINT ||
	    sig == SIGQUIT) {
		int rc = reap(d, STOP_TIMEOUT_MS);

		return rc < 0 ? rc : 0;
	}
	return 0;
}

int fly_test_daemon_restart(struct fly_test_daemon *d)
{
	if (d->external)
		return -ENOTSUP;
	if (d->pid > 0) {
		int rc = fly_test_daemon_stop(d);

		if (rc < 0)
			return rc;
	}
	return spawn_and_wait(d);
}

void fly_test_rm_tree(const char *path)
{
	DIR *dir = opendir(path);
	struct dirent *e;

	if (dir == NULL) {
		unlink(path);
		return;
	}
	while ((e = readdir(dir)) != NULL) {
		char sub[1024];
		struct stat st;

		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
		if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
			fly_test_rm_tree(sub);
		else
			unlink(sub);
	}
	closedir(dir);
	rmdir(path);
}

void fly_test_daemon_cleanup(struct fly_test_daemon *d)
{
	if (d->external)
		return;
	if (d->pid > 0)
		fly_test_daemon_stop(d);
	if (d->dir[0] != '\0' && getenv("FLY_TEST_KEEP") == NULL)
		fly_test_rm_tree(d->dir);
	d->dir[0] = '\0';
}

int fly_test_run(const char *cmd, char **out)
{
	size_t n = 0, cap = 65536;
	char *buf = malloc(cap);
	FILE *p = popen(cmd, "r");
	int st;

	if (buf == NULL || p == NULL) {
		free(buf);
		if (p != NULL)
			pclose(p);
		if (out != NULL)
			*out = NULL;
		return 128;
	}
	for (;;) {
		size_t r;

		if (n + 1 >= cap) {
			char *nb = realloc(buf, cap * 2);

			if (nb == NULL)
				break;
			buf = nb;
			cap *= 2;
		}
		r = fread(buf + n, 1, cap - n - 1, p);
		if (r == 0)
			break;
		n += r;
	}
	buf[n] = '\0';
	st = pclose(p);
	if (out != NULL)
		*out = buf;
	else
		free(buf);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

int fly_test_daemon_setup(void **state)
{
	*state = calloc(1, sizeof(struct fly_test_daemon));
	return *state != NULL ? 0 : -1;
}

int fly_test_daemon_teardown(void **state)
{
	struct fly_test_daemon *d = *state;

	if (d == NULL)
		return 0;
	if (d->pid > 0 || d->dir[0] != '\0')
		fly_test_daemon_cleanup(d);
	free(d);
	*state = NULL;
	return 0;
}

int fly_test_vctl(const char *sock, int err2out, char **out, const char *fmt,
		  va_list ap)
{
	char args[4096], cmd[8192];

	vsnprintf(args, sizeof(args), fmt, ap);
	snprintf(cmd, sizeof(cmd), "%s/flytune-ctl --socket %s %s %s",
		 FLY_BUILD_DIR, sock, args, err2out ? "2>&1" : "2>/dev/null");
	return fly_test_run(cmd, out);
}

int fly_test_ctl(const char *sock, int err2out, char **out, const char *fmt,
		 ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = fly_test_vctl(sock, err2out, out, fmt, ap);
	va_end(ap);
	return rc;
}

int fly_test_db_integrity_ok(const char *path)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *s = NULL;
	int ok = 0;

	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) ==
		SQLITE_OK &&
	    sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &s, NULL) ==
		SQLITE_OK &&
	    sqlite3_step(s) == SQLITE_ROW)
		ok = strcmp((const char *)sqlite3_column_text(s, 0), "ok") == 0;
	sqlite3_finalize(s);
	sqlite3_close(db);
	return ok;
}

int fly_test_notify_listen(const char *path)
{
	struct sockaddr_un sa;
	socklen_t len = sizeof(sa);
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	if (strlen(path) >= sizeof(sa.sun_path)) {
		close(fd);
		return -ENAMETOOLONG;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (path[0] == '@') {
		/* Abstract: a leading NUL, length without a terminator. */
		sa.sun_path[0] = '\0';
		len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) +
				  strlen(path));
	} else {
		unlink(path);
	}
	if (bind(fd, (struct sockaddr *)&sa, len) != 0) {
		int e = errno;

		close(fd);
		return -e;
	}
	return fd;
}

int fly_test_notify_wait(int fd, const char *needle, int timeout_ms)
{
	char buf[512];
	struct timespec ts;
	int64_t now, end;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	end = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + timeout_ms;
	for (;;) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		ssize_t n;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
		if (now >= end)
			return 0;
		if (poll(&pfd, 1, 50) <= 0)
			continue;
		n = recv(fd, buf, sizeof(buf) - 1, 0);
		if (n <= 0)
			continue;
		buf[n] = '\0';
		if (strstr(buf, needle) != NULL)
			return 1;
	}
}
