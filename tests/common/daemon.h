/*
 * daemon.h -- integration-test harness: start the real flytuned (the test
 * build, FLY_BUILD_DIR "/flytuned-test") on a private state directory and
 * talk to it over raw framed sockets.
 *
 * Owns: the daemon process it started and its temporary directory.
 * Thread: the test's main thread only.
 *
 * The daemon runs with --foreground --device 0 --state-dir DIR --config
 * DIR/flytuned.conf; its stderr goes to DIR/daemon.log, whose tail is
 * printed when start-up fails.  Timeouts are multiplied by
 * $FLY_TEST_TIMEOUT_MULTIPLIER (default 1).  With $FLY_TEST_DAEMON=/x.sock
 * no daemon is started: the tests use that socket (stop/kill/restart then
 * return -ENOTSUP).
 *
 * Include it as "../common/daemon.h": -Idaemon puts the daemon's own
 * daemon.h first on the include path.
 */
#ifndef FLY_TEST_DAEMON_H
#define FLY_TEST_DAEMON_H

#include <stdarg.h>
#include <sys/types.h>

struct fly_test_daemon {
	pid_t pid;             /* 0 when external or not running */
	char dir[256];         /* the state directory (mkdtemp) */
	char sock[300];        /* DIR/gpu0.sock */
	char db[300];          /* DIR/tuning.db */
	char log[300];         /* DIR/daemon.log */
	char config[300];      /* DIR/flytuned.conf */
	int external;          /* $FLY_TEST_DAEMON in use */
	int exit_status;       /* exit code of the last stop, or 128+signal */
	const char *const *env; /* remembered for restart */
};

/* Start the daemon.  @p extra_config_json: NULL, or a JSON object whose
 * keys are written into the config file over the test defaults
 * ({"backend":"cpu","policy":"on-request"}); a string that is not a JSON
 * object is written verbatim (to test config errors).  @p env: NULL or a
 * NULL-terminated list of "K=V" set in the daemon's environment.
 * Waits until a `hello` is answered with "ok": true.
 * @return 0; -ECHILD when the daemon exited during start-up (its exit code
 * is in d->exit_status, d->pid is 0); -ETIMEDOUT; -errno. */
int fly_test_daemon_start(struct fly_test_daemon *d,
			  const char *extra_config_json,
			  const char *const *env);
/* SIGTERM, wait (bounded; SIGKILL after the timeout).
 * @return the exit status (0..255), 128+signal when killed, or -errno. */
int fly_test_daemon_stop(struct fly_test_daemon *d);
/* Send @p sig; for SIGKILL/SIGTERM/SIGINT/SIGQUIT also reap the process.
 * @return 0 or -errno. */
int fly_test_daemon_kill(struct fly_test_daemon *d, int sig);
/* Stop (if running) and start again on the same directory and config. */
int fly_test_daemon_restart(struct fly_test_daemon *d);
/* rm -rf of a directory tree (a test's own temporary directory); symbolic
 * links are removed, never followed. */
void fly_test_rm_tree(const char *path);
/* Stop if running, then rm -rf the directory. */
void fly_test_daemon_cleanup(struct fly_test_daemon *d);
/* Print the last lines of DIR/daemon.log to stderr. */
void fly_test_daemon_print_log(const struct fly_test_daemon *d);
/* Whether DIR/daemon.log contains @p needle. */
int fly_test_daemon_log_has(const struct fly_test_daemon *d,
			    const char *needle);
/* Number of open fds of a process (/proc/PID/fd), or -errno. */
int fly_test_fd_count(pid_t pid);

/* A raw, blocking connection to @p sock.  @return fd or -errno. */
int fly_test_connect(const char *sock);
/* Send one frame (header + @p json) and read one response frame.
 * @param[out] resp NUL-terminated payload, caller frees.
 * @return 0, -ETIMEDOUT, -ECONNRESET (EOF), -errno. */
int fly_test_request(int fd, const char *json, char **resp, int timeout_ms);
/* Write all of @p len bytes.  @return 0 or -errno. */
int fly_test_send_raw(int fd, const void *buf, size_t len);
/* Send one frame around @p json.  @return 0 or -errno. */
int fly_test_send_frame(int fd, const char *json);
/* Read one response frame (as fly_test_request). */
int fly_test_recv_frame(int fd, char **resp, int timeout_ms);
/* Wait until the peer closes the connection (EOF or reset), discarding
 * data.  @return 0 when closed, -ETIMEDOUT. */
int fly_test_wait_closed(int fd, int timeout_ms);
/* Run @p cmd (sh -c, through popen) to its end.  *out (caller frees; may
 * be NULL to discard) is everything it printed on stdout.
 * @return its exit status, 128 when it did not exit normally. */
int fly_test_run(const char *cmd, char **out);
/* Run "FLY_BUILD_DIR/flytune-ctl --socket @p sock ARGS" (ARGS from @p fmt)
 * through fly_test_run, its stderr dropped (or, @p err2out, in *out).
 * @return its exit status. */
int fly_test_ctl(const char *sock, int err2out, char **out, const char *fmt,
		 ...) __attribute__((format(printf, 4, 5)));
int fly_test_vctl(const char *sock, int err2out, char **out, const char *fmt,
		  va_list ap) __attribute__((format(printf, 4, 0)));
/* Whether `PRAGMA integrity_check` on the SQLite file @p path (opened
 * read-only) answers "ok". */
int fly_test_db_integrity_ok(const char *path);
/* CMocka fixtures for tests that start daemons: *state is a zeroed struct
 * fly_test_daemon; teardown stops and removes whatever the test started,
 * also when an assertion cut it short, and frees it. */
int fly_test_daemon_setup(void **state);
int fly_test_daemon_teardown(void **state);
/* Timeout scaled by $FLY_TEST_TIMEOUT_MULTIPLIER. */
int fly_test_timeout(int ms);
/* A datagram socket bound at @p path (a leading '@': abstract) standing
 * in for systemd's NOTIFY_SOCKET.  @return the fd, or -errno
 * (-ENAMETOOLONG for a path sun_path cannot hold). */
int fly_test_notify_listen(const char *path);
/* Read datagrams from @p fd until one contains @p needle, for up to
 * @p timeout_ms.  @return 1 found, 0 not. */
int fly_test_notify_wait(int fd, const char *needle, int timeout_ms);

#endif /* FLY_TEST_DAEMON_H */
