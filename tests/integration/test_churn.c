/*
 * test_churn.c -- client churn against one daemon, with its resources
 * counted before and after (issue 21, RELIABILITY.md L5, F13, L8).
 *
 *   test_connect_churn  $CHURN_CYCLES (default 2,000; the row's figure:
 *                       100,000) connect -> one request -> close cycles
 *                       from 32 threads: every request answered, the
 *                       daemon's fd count back at its baseline, its RSS
 *                       within 1 MiB of it.
 *   test_client_kills   $CHURN_KILLS (default 200; the row's: 10,000)
 *                       child client processes SIGKILLed 0-3 ms after the
 *                       fork, in turn: after half a frame, while
 *                       responses are in flight (requests written, none
 *                       read), waiting on a tune, holding the shm mapping
 *                       (libflyclient): the same daemon process answers,
 *                       its fds are back at the baseline, its RSS within
 *                       1 MiB, and every tune a killed client sent is
 *                       tuned anyway.
 *   test_tune_flood     $CHURN_TUNES (default 2,000; the row's: 10,000)
 *                       distinct tune requests: each answered queued or
 *                       busy (nothing else), the queue never over its cap,
 *                       `busy_rejections` counts every busy, and the
 *                       daemon's RSS grows by less than 64 MiB.
 *
 * Each prints its figures ("churn: ...").  Timing is printed, never
 * asserted.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../common/daemon.h"
#include "../common/jreq.h"
#include "fly_abi.h"
#include "flyclient.h"

#define T_MS	 5000
#define THREADS	 32
#define RSS_SLOP 1024 /* KiB: the row's bound (RELIABILITY.md L5) */
#define NPOOL	 64   /* tune keys of the kill test */

static struct fly_test_daemon d;

static long env_long(const char *name, long dflt)
{
	const char *s = getenv(name);

	return s != NULL && *s != '\0' ? strtol(s, NULL, 10) : dflt;
}

static long rss_kib(pid_t pid)
{
	char path[64], line[256];
	long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL)
		if (sscanf(line, "VmRSS: %ld", &v) == 1)
			break;
	fclose(f);
	return v;
}

/* The daemon's fd count once it has not changed for 200 ms (the sessions
 * of closed clients freed): the baseline. */
static int fds_quiet(void)
{
	uint64_t end = fly_test_now_ms() + (uint64_t)fly_test_timeout(T_MS);
	int n = fly_test_fd_count(d.pid), same = 0;

	while (same < 20 && fly_test_now_ms() < end) {
		int m;

		usleep(10 * 1000);
		m = fly_test_fd_count(d.pid);
		same = m == n ? same + 1 : 0;
		n = m;
	}
	return n;
}

/* The daemon's fd count once it is back to @p base, or what it is after
 * the (hang-guard) deadline: sessions of dead peers are freed as the loop
 * reads their EOF. */
static int fds_settled(int base)
{
	uint64_t end = fly_test_now_ms() + (uint64_t)fly_test_timeout(T_MS);
	int n;

	while ((n = fly_test_fd_count(d.pid)) != base &&
	       fly_test_now_ms() < end)
		usleep(10 * 1000);
	return n;
}

static void assert_same_daemon(pid_t pid)
{
	int fd = fly_test_connect(d.sock);
	cJSON *o;

	assert_int_equal(d.pid, pid);
	assert_int_equal(waitpid(pid, NULL, WNOHANG), 0);
	assert_true(fd >= 0);
	o = fly_test_req(fd, "{\"req\":\"status\"}");
	assert_true(fly_test_is_ok(o));
	cJSON_Delete(o);
	close(fd);
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* ------------------------------------------------------------ L5 */

struct churn {
	long n;		 /* cycles of this thread */
	long errors;
	uint32_t *us;	 /* connect + request, per cycle */
};

static void *churn_thread(void *arg)
{
	struct churn *c = arg;

	for (long i = 0; i < c->n; i++) {
		struct timespec a, b;
		char *resp = NULL;
		int fd;

		clock_gettime(CLOCK_MONOTONIC, &a);
		fd = fly_test_connect(d.sock);
		if (fd < 0 || fly_test_request(fd, "{\"req\":\"list\",\"id\":1}",
					       &resp, T_MS) != 0 ||
		    strstr(resp, "\"ok\":true") == NULL)
			c->errors++;
		clock_gettime(CLOCK_MONOTONIC, &b);
		if (fd >= 0)
			close(fd);
		free(resp);
		c->us[i] = (uint32_t)((b.tv_sec - a.tv_sec) * 1000000 +
				      (b.tv_nsec - a.tv_nsec) / 1000);
	}
	return NULL;
}

/* @p total cycles over THREADS threads; @return errors.  @p p50 / @p p99
 * (may be NULL): connect + request, microseconds. */
static long churn(long total, uint32_t *p50, uint32_t *p99)
{
	pthread_t th[THREADS];
	struct churn c[THREADS];
	uint32_t *all = calloc((size_t)total + 1, sizeof(*all));
	long errors = 0, k = 0;

	assert_non_null(all);
	for (int t = 0; t < THREADS; t++) {
		c[t].n = total / THREADS + (t < total % THREADS);
		c[t].errors = 0;
		c[t].us = all + k;
		k += c[t].n;
		assert_int_equal(pthread_create(&th[t], NULL, churn_thread,
						&c[t]), 0);
	}
	for (int t = 0; t < THREADS; t++) {
		pthread_join(th[t], NULL);
		errors += c[t].errors;
	}
	qsort(all, (size_t)total, sizeof(*all), cmp_u32);
	if (p50 != NULL)
		*p50 = all[total / 2];
	if (p99 != NULL)
		*p99 = all[total * 99 / 100];
	free(all);
	return errors;
}

static void test_connect_churn(void **state)
{
	long n = env_long("CHURN_CYCLES", 2000), rss0, rss1;
	uint32_t p50, p99;
	int fd0, fd1;
	time_t t0;

	(void)state;
	assert_int_equal(fly_test_daemon_start(&d, "{\"max_clients\":64}",
					       NULL), 0);
	/* Warm up the same shape: the allocator's arenas and the session
	 * pool reach their working size before the baseline. */
	assert_int_equal(churn(THREADS * 20, NULL, NULL), 0);
	fd0 = fds_quiet();
	rss0 = rss_kib(d.pid);
	t0 = time(NULL);
	assert_int_equal(churn(n, &p50, &p99), 0);
	fd1 = fds_settled(fd0);
	rss1 = rss_kib(d.pid);
	printf("churn: %ld connect/request/close cycles, %d threads, %lds: "
	       "0 errors; daemon fds %d -> %d, RSS %ld -> %ld KiB; "
	       "connect+request p50 %u us, p99 %u us\n",
	       n, THREADS, (long)(time(NULL) - t0), fd0, fd1, rss0, rss1,
	       p50, p99);
	assert_int_equal(fd1, fd0);
	assert_true(rss1 - rss0 <= RSS_SLOP);
	assert_same_daemon(d.pid);
	fly_test_daemon_cleanup(&d);
}

/* ------------------------------------------------------------ F13 */

static void pool_key(int i, char *buf, size_t cap)
{
	snprintf(buf, cap, "rmsnorm/fp32/m=8,n=%d", 1024 + 64 * i);
}

/* The child's part: do @p kind's thing, then wait to be killed.  Tells
 * the parent through @p wfd once a tune request is written whole. */
static void child(int kind, int i, int wfd)
{
	char json[192], key[64];
	int fd;

	if (kind == 3) {
		struct fly_client_opts o = {.socket_path = d.sock,
					    .timeout_ms = 1000};
		struct fly_problem p;
		struct fly_decision dec;
		fly_client *c = NULL;

		pool_key(i % NPOOL, key, sizeof(key));
		if (fly_client_open_opts(&o, &c) == 0 &&
		    fly_problem_from_key(key, &p) == 0)
			fly_decide(c, &p, &dec);
		for (;;)
			pause();
	}
	fd = fly_test_connect(d.sock);
	if (fd < 0)
		_exit(1);
	if (kind == 0) {
		/* Half a frame: a 100-byte header, 10 bytes of it. */
		const unsigned char half[14] = {100, 0, 0, 0, '{', '"', 'r',
						'e', 'q', '"', ':', '"', 'l',
						'i'};
		fly_test_send_raw(fd, half, sizeof(half));
	} else if (kind == 1) {
		for (int k = 0; k < 64; k++)
			fly_test_send_frame(fd, "{\"req\":\"list\",\"id\":2}");
	} else {
		pool_key(i % NPOOL, key, sizeof(key));
		snprintf(json, sizeof(json),
			 "{\"req\":\"tune\",\"key\":\"%s\",\"wait\":true,"
			 "\"timeout_ms\":30000}", key);
		if (fly_test_send_frame(fd, json) == 0 &&
		    write(wfd, &i, sizeof(i)) != (ssize_t)sizeof(i))
			_exit(1);
	}
	for (;;)
		pause();
}

/* Fork a child of @p kind, kill it 0-3 ms later.  @return the pool index
 * of the tune it sent, or -1. */
static int kill_one(int kind, int i, unsigned *seed)
{
	int pfd[2], sent = -1;
	pid_t pid;

	assert_int_equal(pipe(pfd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(pfd[0]);
		child(kind, i, pfd[1]);
		_exit(0);
	}
	close(pfd[1]);
	usleep((useconds_t)(rand_r(seed) % 3000));
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, NULL, 0), pid);
	if (read(pfd[0], &sent, sizeof(sent)) != (ssize_t)sizeof(sent))
		sent = -1;
	close(pfd[0]);
	return sent < 0 ? -1 : sent % NPOOL;
}

static void wait_tuned(const char *key)
{
	uint64_t end = fly_test_now_ms() + (uint64_t)fly_test_timeout(60000);
	int fd = fly_test_connect(d.sock);
	char json[160];

	assert_true(fd >= 0);
	snprintf(json, sizeof(json), "{\"req\":\"decide\",\"key\":\"%s\"}",
		 key);
	for (;;) {
		cJSON *o = fly_test_req(fd, json);
		const cJSON *s = cJSON_GetObjectItemCaseSensitive(
		    cJSON_GetObjectItemCaseSensitive(o, "decision"), "status");
		int tuned = cJSON_IsString(s) &&
			    strcmp(s->valuestring, "tuned") == 0;

		cJSON_Delete(o);
		if (tuned)
			break;
		if (fly_test_now_ms() > end) {
			fly_test_daemon_print_log(&d);
			fail_msg("%s: tune of a killed client never done", key);
		}
		usleep(20 * 1000);
	}
	close(fd);
}

static void test_client_kills(void **state)
{
	long n = env_long("CHURN_KILLS", 200), rss0, rss1;
	int sent[NPOOL] = {0}, nsent = 0, fd0, fd1;
	unsigned seed = (unsigned)env_long("CHURN_SEED", 1);
	char key[64];
	pid_t pid;
	time_t t0;

	(void)state;
	assert_int_equal(fly_test_daemon_start(&d, "{\"job_budget_s\":0.2}",
					       NULL), 0);
	pid = d.pid;
	/* Warm up: a tuned key (the worker started, the shm table
	 * published) and a child of each kind killed. */
	pool_key(NPOOL - 1, key, sizeof(key));
	assert_int_equal(fly_test_ctl(d.sock, 0, NULL, "tune %s", key), 0);
	wait_tuned(key);
	for (int k = 0; k < 4; k++)
		kill_one(k, NPOOL - 1, &seed);
	fd0 = fds_quiet();
	rss0 = rss_kib(pid);
	t0 = time(NULL);
	for (long i = 0; i < n; i++) {
		int s = kill_one((int)(i % 4), (int)(i / 4), &seed);

		if (s >= 0 && !sent[s]) {
			sent[s] = 1;
			nsent++;
		}
	}
	fd1 = fds_settled(fd0);
	rss1 = rss_kib(pid);
	for (int k = 0; k < NPOOL; k++) {
		if (!sent[k])
			continue;
		pool_key(k, key, sizeof(key));
		wait_tuned(key);
	}
	printf("churn: %ld client kills (half frame, responses in flight, "
	       "tune pending, shm mapped: %ld each), %lds: 0 daemon crashes; "
	       "daemon fds %d -> %d, RSS %ld -> %ld KiB; %d keys tuned for "
	       "killed clients\n",
	       n, n / 4, (long)(time(NULL) - t0), fd0, fd1, rss0, rss1, nsent);
	assert_same_daemon(pid);
	assert_int_equal(fd1, fd0);
	assert_true(rss1 - rss0 <= RSS_SLOP);
	fly_test_daemon_cleanup(&d);
}

/* ------------------------------------------------------------ L8 */

static int err_is(const cJSON *o, const char *code)
{
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "error");
	const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "code");

	return cJSON_IsString(c) && strcmp(c->valuestring, code) == 0;
}

static double json_num(const cJSON *o, const char *a, const char *b)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(o, a), b);

	assert_true(cJSON_IsNumber(v));
	return v->valuedouble;
}

static void test_tune_flood(void **state)
{
	long n = env_long("CHURN_TUNES", 2000), queued = 0, busy = 0;
	long rss0, rss1, rssmax = 0;
	double cap, qmax = 0;
	uint32_t *busy_us = calloc((size_t)n + 1, sizeof(*busy_us));
	int fd;

	(void)state;
	assert_non_null(busy_us);
	assert_int_equal(fly_test_daemon_start(&d, "{\"queue_cap\":1024}",
					       NULL), 0);
	fd = fly_test_connect(d.sock);
	assert_true(fd >= 0);
	rss0 = rss_kib(d.pid);
	for (long i = 0; i < n; i++) {
		struct timespec a, b;
		char json[160];
		cJSON *o;

		snprintf(json, sizeof(json), "{\"req\":\"tune\",\"key\":"
			 "\"gemm/bf16/NT/m=64,n=%ld,k=64\"}", 64 + 8 * i);
		clock_gettime(CLOCK_MONOTONIC, &a);
		o = fly_test_req(fd, json);
		clock_gettime(CLOCK_MONOTONIC, &b);
		if (fly_test_is_ok(o)) {
			queued++;
		} else if (err_is(o, "busy")) {
			busy_us[busy++] = (uint32_t)(
			    (b.tv_sec - a.tv_sec) * 1000000 +
			    (b.tv_nsec - a.tv_nsec) / 1000);
		} else {
			fail_msg("tune %ld answered neither queued nor busy",
				 i);
		}
		cJSON_Delete(o);
		if (i % 500 == 499 || i == n - 1) {
			long r = rss_kib(d.pid);

			o = fly_test_req(fd, "{\"req\":\"status\"}");
			cap = json_num(o, "queue", "cap");
			if (json_num(o, "queue", "queued") > qmax)
				qmax = json_num(o, "queue", "queued");
			cJSON_Delete(o);
			rssmax = r > rssmax ? r : rssmax;
		}
	}
	rss1 = rss_kib(d.pid);
	{
		cJSON *o = fly_test_req(fd, "{\"req\":\"stats\"}");

		assert_true(json_num(o, "counters", "busy_rejections") >= busy);
		cJSON_Delete(o);
	}
	qsort(busy_us, (size_t)busy, sizeof(*busy_us), cmp_u32);
	printf("churn: %ld distinct tune requests: %ld queued, %ld busy "
	       "(busy answer p50 %u us, p99 %u us); queue at most %.0f of "
	       "cap %.0f; daemon RSS %ld -> %ld KiB (max %ld)\n",
	       n, queued, busy, busy ? busy_us[busy / 2] : 0,
	       busy ? busy_us[busy * 99 / 100] : 0, qmax, cap, rss0, rss1,
	       rssmax);
	assert_true(qmax <= cap);
	assert_true(rssmax - rss0 < 64 * 1024);
	free(busy_us);
	close(fd);
	assert_same_daemon(d.pid);
	fly_test_daemon_cleanup(&d);
}

static int teardown(void **state)
{
	(void)state;
	fly_test_daemon_cleanup(&d);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_connect_churn, teardown),
	    cmocka_unit_test_teardown(test_client_kills, teardown),
	    cmocka_unit_test_teardown(test_tune_flood, teardown),
	};

	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	return cmocka_run_group_tests_name("churn", tests, NULL, NULL);
}
