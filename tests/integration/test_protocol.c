/*
 * test_protocol.c -- protocol robustness against a real flytuned-test:
 * framing violations, malformed JSON, fragmentation, pipelining, client
 * limits, slow readers, unsolicited fds, admin checks.  After every case
 * a fresh client must still be answered.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../common/daemon.h"
#include "../common/jsonschema.h"
#include "fly_abi.h"
#include "fly_msg.h"

static struct fly_test_daemon d;

#define T_MS 5000

static int setup(void **state)
{
	int rc = fly_test_daemon_start(&d, "{\"frame_timeout_ms\":500,"
				       "\"max_clients\":8,"
				       "\"output_buffer_cap\":65536}", NULL);

	if (rc != 0) {
		fprintf(stderr, "daemon start failed: %d\n", rc);
		fly_test_daemon_cleanup(&d);
	}
	return rc == 0 ? 0 : -1;
}

static int teardown(void **state)
{
	int rc = d.external ? 0 : fly_test_daemon_stop(&d);

	fly_test_daemon_cleanup(&d);
	return rc == 0 ? 0 : -1;
}

/* Parse a response; the caller frees. */
static cJSON *parse(const char *resp)
{
	cJSON *o = cJSON_Parse(resp);

	assert_non_null(o);
	return o;
}

/* The error code of a response, or "" when it is ok:true. */
static void expect_error(const char *resp, int code)
{
	cJSON *o = parse(resp);
	cJSON *e = cJSON_GetObjectItem(o, "error");

	assert_true(cJSON_IsFalse(cJSON_GetObjectItem(o, "ok")));
	assert_non_null(e);
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(e, "code")),
			    fly_err_name(code));
	assert_non_null(cJSON_GetStringValue(cJSON_GetObjectItem(e,
								 "message")));
	cJSON_Delete(o);
}

static void expect_ok(const char *resp)
{
	cJSON *o = parse(resp);

	if (!cJSON_IsTrue(cJSON_GetObjectItem(o, "ok")))
		fail_msg("expected ok:true, got %s", resp);
	cJSON_Delete(o);
}

static int64_t stat_of(const char *name)
{
	char *resp = NULL;
	int fd = fly_test_connect(d.sock);
	int64_t v;
	cJSON *o;

	assert_true(fd >= 0);
	assert_int_equal(fly_test_request(fd, "{\"req\":\"stats\"}", &resp,
					  T_MS), 0);
	o = parse(resp);
	assert_true(cJSON_IsNumber(cJSON_GetObjectItem(
		cJSON_GetObjectItem(o, "counters"), name)));
	v = (int64_t)cJSON_GetObjectItem(cJSON_GetObjectItem(o, "counters"),
					 name)->valuedouble;
	cJSON_Delete(o);
	free(resp);
	close(fd);
	return v;
}

/* A fresh client gets a status answer (retrying while the daemon still
 * counts just-closed clients against max_clients). */
static void assert_alive(void)
{
	for (int i = 0; i < 100; i++) {
		char *resp = NULL;
		int fd = fly_test_connect(d.sock);

		assert_true(fd >= 0);
		assert_int_equal(fly_test_request(fd,
			"{\"req\":\"status\",\"id\":42}", &resp, T_MS), 0);
		close(fd);
		if (strstr(resp, "max_clients") != NULL) {
			free(resp);
			usleep(50 * 1000);
			continue;
		}
		expect_ok(resp);
		assert_non_null(strstr(resp, "\"id\":42"));
		free(resp);
		return;
	}
	fail_msg("daemon never answered a fresh client");
}

static void put_hdr(uint8_t *h, uint32_t len)
{
	h[0] = (uint8_t)len;
	h[1] = (uint8_t)(len >> 8);
	h[2] = (uint8_t)(len >> 16);
	h[3] = (uint8_t)(len >> 24);
}

static void test_truncated_then_eof(void **state)
{
	uint8_t buf[14];
	int fd = fly_test_connect(d.sock);

	assert_true(fd >= 0);
	put_hdr(buf, 100);
	memcpy(buf + 4, "{\"req\":\"st", 10);
	assert_int_equal(fly_test_send_raw(fd, buf, sizeof(buf)), 0);
	shutdown(fd, SHUT_WR);
	assert_int_equal(fly_test_wait_closed(fd, T_MS), 0);
	close(fd);
	assert_alive();
}

static void test_truncated_then_silence(void **state)
{
	int64_t before = stat_of("timeouts");
	uint8_t buf[14];
	int fd = fly_test_connect(d.sock);

	assert_true(fd >= 0);
	put_hdr(buf, 100);
	memcpy(buf + 4, "{\"req\":\"st", 10);
	assert_int_equal(fly_test_send_raw(fd, buf, sizeof(buf)), 0);
	/* frame_timeout_ms is 500: the daemon must close it by itself. */
	assert_int_equal(fly_test_wait_closed(fd, fly_test_timeout(10000)), 0);
	close(fd);
	assert_true(stat_of("timeouts") > before);
	assert_alive();
}

/* @p n bytes on a connection of their own: the daemon closes it at once,
 * another connection is still served. */
static void closed_on(const void *bytes, size_t n)
{
	int other = fly_test_connect(d.sock);
	int fd = fly_test_connect(d.sock);
	char *resp = NULL;

	assert_true(other >= 0 && fd >= 0);
	assert_int_equal(fly_test_send_raw(fd, bytes, n), 0);
	assert_int_equal(fly_test_wait_closed(fd, T_MS), 0);
	close(fd);
	assert_int_equal(fly_test_request(other, "{\"req\":\"list\"}", &resp,
					  T_MS), 0);
	expect_ok(resp);
	free(resp);
	close(other);
	assert_alive();
}

static void oversize(uint32_t len)
{
	uint8_t h[4];

	put_hdr(h, len);
	/* Only the header: the daemon decides from it, allocating nothing. */
	closed_on(h, sizeof(h));
}

static void test_oversize_cap_plus_one(void **state)
{
	oversize(64u * 1024u + 1u);
}

static void test_oversize_max(void **state)
{
	oversize(0xffffffffu);
}

static void test_length_zero(void **state)
{
	oversize(0);
}

/* An HTTP client on the socket (RELIABILITY.md B15): "GET " reads as a
 * length of 0x20544547, over the cap -- closed at once, nothing
 * allocated for it, the other clients served. */
static void test_http_request(void **state)
{
	static const char http[] = "GET / HTTP/1.0\r\nHost: x\r\n\r\n";

	closed_on(http, sizeof(http) - 1);
}

/* Send @p payload as a frame, expect error @p code, then check the same
 * connection still answers. */
static void bad_request_keeps_conn(const char *payload, int code)
{
	int fd = fly_test_connect(d.sock);
	char *resp = NULL;

	assert_true(fd >= 0);
	assert_int_equal(fly_test_request(fd, payload, &resp, T_MS), 0);
	expect_error(resp, code);
	free(resp);
	assert_int_equal(fly_test_request(fd, "{\"req\":\"list\",\"id\":3}",
					  &resp, T_MS), 0);
	expect_ok(resp);
	assert_non_null(strstr(resp, "\"id\":3"));
	free(resp);
	close(fd);
	assert_alive();
}

static void test_invalid_json(void **state)
{
	bad_request_keeps_conn("{not json", FLY_E_PROTO);
	bad_request_keeps_conn("{\"req\":\"list\"} trailing", FLY_E_PROTO);
}

static void test_wrong_types(void **state)
{
	bad_request_keeps_conn("{\"req\":\"get\",\"key\":5}", FLY_E_INVALID);
	bad_request_keeps_conn("{\"req\":\"list\",\"limit\":\"x\"}",
			       FLY_E_INVALID);
	bad_request_keeps_conn("{\"req\":\"list\",\"id\":\"x\"}",
			       FLY_E_INVALID);
	bad_request_keeps_conn("{\"req\":\"list\",\"limit\":0}",
			       FLY_E_INVALID);
}

static void test_unknown_request(void **state)
{
	bad_request_keeps_conn("{\"req\":\"frobnicate\"}", FLY_E_PROTO);
	bad_request_keeps_conn("{\"id\":1}", FLY_E_PROTO);
	bad_request_keeps_conn("[1,2,3]", FLY_E_PROTO);
	bad_request_keeps_conn("{\"req\":7}", FLY_E_PROTO);
}

static void test_deep_nesting(void **state)
{
	char buf[512];
	size_t n = 0;

	n += (size_t)snprintf(buf, sizeof(buf), "{\"req\":\"list\",\"x\":");
	for (int i = 0; i < 100; i++)
		buf[n++] = '[';
	for (int i = 0; i < 100; i++)
		buf[n++] = ']';
	buf[n++] = '}';
	buf[n] = '\0';
	bad_request_keeps_conn(buf, FLY_E_PROTO);
}

static void test_duplicate_keys(void **state)
{
	bad_request_keeps_conn("{\"req\":\"list\",\"req\":\"stats\"}",
			       FLY_E_PROTO);
}

/* A request frame carrying @p nfd file descriptors (SCM_RIGHTS) the
 * daemon never asked for: answered or closed, and none of them stays in
 * the daemon (its fd count back at the baseline). */
static void unsolicited_fds(int nfd)
{
	const char *json = "{\"req\":\"list\",\"id\":9}";
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(253 * sizeof(int))];
	} u;
	uint8_t frame[64];
	struct iovec iov;
	struct msghdr mh;
	struct cmsghdr *c;
	int fds[253], base, during = -1, fd, n;
	char *resp = NULL;

	assert_true(nfd >= 1 && nfd <= 253);
	assert_alive();
	usleep(200 * 1000);
	base = fly_test_fd_count(d.pid);
	assert_true(base > 0);
	fd = fly_test_connect(d.sock);
	assert_true(fd >= 0);
	for (int i = 0; i < nfd; i++) {
		fds[i] = open("/dev/null", O_RDONLY);
		assert_true(fds[i] >= 0);
	}
	put_hdr(frame, (uint32_t)strlen(json));
	memcpy(frame + 4, json, strlen(json));
	iov.iov_base = frame;
	iov.iov_len = 4 + strlen(json);
	memset(&mh, 0, sizeof(mh));
	memset(&u, 0, sizeof(u));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = u.b;
	mh.msg_controllen = CMSG_SPACE((size_t)nfd * sizeof(int));
	c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN((size_t)nfd * sizeof(int));
	memcpy(CMSG_DATA(c), fds, (size_t)nfd * sizeof(int));
	assert_true(sendmsg(fd, &mh, MSG_NOSIGNAL) == (ssize_t)iov.iov_len);
	for (int i = 0; i < nfd; i++)
		close(fds[i]);
	/* Closed or answered; either way the fds must not reach the daemon. */
	n = fly_test_recv_frame(fd, &resp, T_MS);
	if (n == 0) {
		assert_non_null(strstr(resp, "\"id\":9"));
		free(resp);
		during = fly_test_fd_count(d.pid);
		/* Only the connection itself is new. */
		assert_true(during <= base + 1);
	}
	close(fd);
	for (int i = 0; i < 100; i++) {
		if (fly_test_fd_count(d.pid) <= base)
			break;
		usleep(50 * 1000);
	}
	assert_true(fly_test_fd_count(d.pid) <= base);
	assert_alive();
}

static void test_unsolicited_fds(void **state)
{
	if (d.external)
		skip();
	unsolicited_fds(3);
}

/* SCM_MAX_FD (253) descriptors on one frame (RELIABILITY.md B16). */
static void test_unsolicited_fds_max(void **state)
{
	if (d.external)
		skip();
	unsolicited_fds(253);
}

static void test_fragmented(void **state)
{
	const char *json = "{\"req\":\"list\",\"op\":\"gemm\",\"id\":77}";
	char *whole = NULL, *frag = NULL;
	uint8_t frame[128];
	size_t len = strlen(json);
	int fd = fly_test_connect(d.sock);

	assert_true(fd >= 0);
	assert_int_equal(fly_test_request(fd, json, &whole, T_MS), 0);
	put_hdr(frame, (uint32_t)len);
	memcpy(frame + 4, json, len);
	for (size_t i = 0; i < len + 4; i++) {
		assert_int_equal(fly_test_send_raw(fd, frame + i, 1), 0);
		usleep(1000);
	}
	assert_int_equal(fly_test_recv_frame(fd, &frag, T_MS), 0);
	assert_string_equal(whole, frag);
	free(whole);
	free(frag);
	close(fd);
	assert_alive();
}

static void test_two_frames_one_write(void **state)
{
	const char *a = "{\"req\":\"list\",\"id\":1}";
	const char *b = "{\"req\":\"frob\",\"id\":2}";
	uint8_t buf[128];
	size_t la = strlen(a), lb = strlen(b);
	char *r1 = NULL, *r2 = NULL;
	int fd = fly_test_connect(d.sock);

	assert_true(fd >= 0);
	put_hdr(buf, (uint32_t)la);
	memcpy(buf + 4, a, la);
	put_hdr(buf + 4 + la, (uint32_t)lb);
	memcpy(buf + 8 + la, b, lb);
	assert_int_equal(fly_test_send_raw(fd, buf, 8 + la + lb), 0);
	assert_int_equal(fly_test_recv_frame(fd, &r1, T_MS), 0);
	assert_int_equal(fly_test_recv_frame(fd, &r2, T_MS), 0);
	expect_ok(r1);
	assert_non_null(strstr(r1, "\"id\":1"));
	expect_error(r2, FLY_E_PROTO);
	assert_non_null(strstr(r2, "\"id\":2"));
	free(r1);
	free(r2);
	close(fd);
	assert_alive();
}

/* Connections the daemon counts now (seen from a probe connection). */
static int64_t conns_now(int fd)
{
	char *resp = NULL;
	int64_t v;
	cJSON *o;

	assert_int_equal(fly_test_request(fd, "{\"req\":\"stats\"}", &resp,
					  T_MS), 0);
	o = parse(resp);
	v = (int64_t)cJSON_GetObjectItem(cJSON_GetObjectItem(o, "counters"),
					 "connections_now")->valuedouble;
	cJSON_Delete(o);
	free(resp);
	return v;
}

/* max_clients 8, plus the 4 connections reserved for admin peers (this
 * test runs as the daemon's uid, so it is one): the 13th is refused. */
static void test_max_clients(void **state)
{
	int fds[12], extra, i;
	char *resp = NULL;

	if (d.external)
		skip();
	fds[0] = fly_test_connect(d.sock);
	assert_true(fds[0] >= 0);
	for (i = 0; i < 100 && conns_now(fds[0]) != 1; i++)
		usleep(50 * 1000);
	assert_int_equal(conns_now(fds[0]), 1);
	for (i = 1; i < 12; i++) {
		fds[i] = fly_test_connect(d.sock);
		assert_true(fds[i] >= 0);
		assert_int_equal(fly_test_request(fds[i], "{\"req\":\"list\"}",
						  &resp, T_MS), 0);
		expect_ok(resp);
		free(resp);
	}
	extra = fly_test_connect(d.sock);
	assert_true(extra >= 0);
	assert_int_equal(fly_test_recv_frame(extra, &resp, T_MS), 0);
	expect_error(resp, FLY_E_MAXCLIENTS);
	assert_non_null(strstr(resp, "\"code\":\"max_clients\""));
	free(resp);
	assert_int_equal(fly_test_wait_closed(extra, T_MS), 0);
	close(extra);
	/* The existing clients are unaffected. */
	assert_int_equal(fly_test_request(fds[3], "{\"req\":\"list\"}", &resp,
					  T_MS), 0);
	expect_ok(resp);
	free(resp);
	for (i = 0; i < 12; i++)
		close(fds[i]);
	assert_true(stat_of("rejected_max_clients") >= 1);
	assert_alive();
}

static void test_slow_reader(void **state)
{
	int64_t before = stat_of("rejected_slow");
	const char *json = "{\"req\":\"status\"}";
	size_t len = strlen(json), one = len + 4;
	uint8_t *buf = malloc(one * 5000);
	int fd = fly_test_connect(d.sock);
	int flags;

	assert_non_null(buf);
	assert_true(fd >= 0);
	for (int i = 0; i < 5000; i++) {
		put_hdr(buf + i * one, (uint32_t)len);
		memcpy(buf + i * one + 4, json, len);
	}
	/* Never read; the daemon may close on us mid-send (EPIPE/reset). */
	flags = fcntl(fd, F_GETFL);
	fcntl(fd, F_SETFL, flags | O_NONBLOCK);
	for (size_t off = 0, tries = 0; off < one * 5000 && tries < 20000;) {
		ssize_t n = send(fd, buf + off, one * 5000 - off,
				 MSG_NOSIGNAL);

		if (n > 0) {
			off += (size_t)n;
		} else if (n < 0 && errno == EAGAIN) {
			tries++;
			usleep(1000);
		} else {
			break;
		}
	}
	free(buf);
	fcntl(fd, F_SETFL, flags);
	/* Still without reading: the daemon must drop us on its own. */
	for (int i = 0; i < 400 && stat_of("rejected_slow") == before; i++)
		usleep(50 * 1000);
	assert_true(stat_of("rejected_slow") > before);
	assert_int_equal(fly_test_wait_closed(fd, fly_test_timeout(20000)), 0);
	close(fd);
	assert_alive();
}

static void test_hello_version(void **state)
{
	int fd = fly_test_connect(d.sock);
	char *resp = NULL;
	cJSON *o;

	assert_true(fd >= 0);
	assert_int_equal(fly_test_request(fd, "{\"req\":\"hello\",\"version\":1}",
					  &resp, T_MS), 0);
	o = parse(resp);
	assert_true(cJSON_IsTrue(cJSON_GetObjectItem(o, "ok")));
	assert_int_equal((int)cJSON_GetObjectItem(o, "version")->valuedouble,
			 FLY_PROTO_VERSION);
	assert_non_null(cJSON_GetObjectItem(o, "device"));
	assert_non_null(cJSON_GetObjectItem(o, "shm"));
	cJSON_Delete(o);
	free(resp);
	assert_int_equal(fly_test_request(fd, "{\"req\":\"hello\",\"version\":0}",
					  &resp, T_MS), 0);
	expect_error(resp, FLY_E_VERSION);
	free(resp);
	close(fd);
	assert_alive();
}

static void test_admin_forget_as_root_or_self(void **state)
{
	int fd = fly_test_connect(d.sock);
	char *resp = NULL;

	assert_true(fd >= 0);
	/* The daemon's own uid is an admin. */
	assert_int_equal(fly_test_request(fd, "{\"req\":\"forget\",\"all\":true}",
					  &resp, T_MS), 0);
	expect_ok(resp);
	assert_non_null(strstr(resp, "\"forgotten\":0"));
	free(resp);
	assert_int_equal(fly_test_request(fd, "{\"req\":\"forget\"}", &resp,
					  T_MS), 0);
	expect_error(resp, FLY_E_INVALID);
	free(resp);
	close(fd);
}

/* Child: as nobody, forget and forced tune must be refused. */
static int nobody_child(void)
{
	char *resp = NULL;
	int fd, ok = 1;

	if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
		return 3;
	fd = fly_test_connect(d.sock);
	if (fd < 0)
		return 4;
	if (fly_test_request(fd, "{\"req\":\"forget\",\"all\":true}", &resp,
			     T_MS) != 0)
		return 5;
	ok &= strstr(resp, "\"permission\"") != NULL;
	free(resp);
	if (fly_test_request(fd, "{\"req\":\"import\",\"results\":[]}", &resp,
			     T_MS) != 0)
		return 6;
	ok &= strstr(resp, "\"permission\"") != NULL;
	free(resp);
	if (fly_test_request(fd, "{\"req\":\"status\"}", &resp, T_MS) != 0)
		return 7;
	ok &= strstr(resp, "\"ok\":true") != NULL;
	free(resp);
	close(fd);
	return ok ? 0 : 1;
}

static void test_non_admin_peer(void **state)
{
	int st;
	pid_t pid;

	if (geteuid() != 0 || d.external)
		skip();
	/* Let nobody reach the socket for this test. */
	assert_int_equal(chmod(d.dir, 0755), 0);
	assert_int_equal(chmod(d.sock, 0666), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(nobody_child());
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	chmod(d.sock, 0660);
	chmod(d.dir, 0700);
	assert_alive();
}

/* Device id and libver from hello. */
static void identity(int fd, char *dev, size_t dcap, char *lv, size_t lcap)
{
	char *resp = NULL;
	cJSON *o;

	assert_int_equal(fly_test_request(fd, "{\"req\":\"hello\",\"version\":1}",
					  &resp, T_MS), 0);
	o = parse(resp);
	snprintf(dev, dcap, "%s", cJSON_GetStringValue(cJSON_GetObjectItem(
		cJSON_GetObjectItem(o, "device"), "id")));
	snprintf(lv, lcap, "%s", cJSON_GetStringValue(cJSON_GetObjectItem(o,
								   "libver")));
	cJSON_Delete(o);
	free(resp);
	assert_true(dev[0] != '\0' && lv[0] != '\0');
}

/* Send @p fmt (printf) and return the parsed response. */
static cJSON *ask(int fd, const char *fmt, ...)
{
	char buf[4096], *resp = NULL;
	va_list ap;
	cJSON *o;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	assert_int_equal(fly_test_request(fd, buf, &resp, T_MS), 0);
	o = parse(resp);
	free(resp);
	return o;
}

static int is_ok(const cJSON *o)
{
	return cJSON_IsTrue(cJSON_GetObjectItem(o, "ok"));
}

static const char *err_code(const cJSON *o)
{
	return cJSON_GetStringValue(cJSON_GetObjectItem(
		cJSON_GetObjectItem(o, "error"), "code"));
}

static double num(const cJSON *o, const char *name)
{
	const cJSON *it = cJSON_GetObjectItem(o, name);

	assert_true(cJSON_IsNumber(it));
	return it->valuedouble;
}

#define K1 "rmsnorm/fp32/m=32,n=4096"
#define K2 "rmsnorm/fp32/m=64,n=4096"
#define ROW "{\"key\":\"%s\",\"device\":\"%s\",\"libver\":\"%s\"," \
	"\"variant\":\"%s\",\"params\":[%s],\"median_us\":%s," \
	"\"mad_us\":0.5,\"tune_s\":1.25,\"tuned_at\":1700000000}"
#define TAIL ",\"device\":\"x\",\"libver\":\"y\",\"mad_us\":0," \
	"\"tune_s\":0,\"tuned_at\":0"

static void test_import_export_roundtrip(void **state)
{
	char dev[64], lv[64], row1[512], row2[512];
	int fd = fly_test_connect(d.sock);
	cJSON *o, *r;

	assert_true(fd >= 0);
	identity(fd, dev, sizeof(dev), lv, sizeof(lv));
	o = ask(fd, "{\"req\":\"forget\",\"all\":true}");
	assert_true(is_ok(o));
	cJSON_Delete(o);
	snprintf(row1, sizeof(row1), ROW, K1, dev, lv, "rms_twopass", "4,1",
		 "12.5");
	snprintf(row2, sizeof(row2), ROW, K2, dev, lv, "rms_vec", "8,4,1",
		 "20");
	/* Two chunks: staged, then committed together. */
	o = ask(fd, "{\"req\":\"import\",\"more\":true,\"results\":[%s]}", row1);
	assert_true(is_ok(o));
	assert_int_equal((int)num(o, "imported"), 1); /* staged so far */
	cJSON_Delete(o);
	o = ask(fd, "{\"req\":\"get\",\"key\":\"" K1 "\"}");
	assert_string_equal(err_code(o), fly_err_name(FLY_E_NOTFOUND));
	cJSON_Delete(o);
	o = ask(fd, "{\"req\":\"import\",\"results\":[%s]}", row2);
	assert_true(is_ok(o));
	assert_int_equal((int)num(o, "imported"), 2);
	cJSON_Delete(o);
	/* get / explain */
	o = ask(fd, "{\"req\":\"get\",\"key\":\"" K1 "\",\"id\":5}");
	assert_true(is_ok(o));
	r = cJSON_GetObjectItem(o, "result");
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(r,
						 "variant")), "rms_twopass");
	assert_int_equal((int)cJSON_GetArrayItem(cJSON_GetObjectItem(r,
				"params"), 0)->valuedouble, 4);
	assert_true(num(r, "median_us") == 12.5);
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(r,
						 "device")), dev);
	assert_int_equal((int)num(o, "id"), 5);
	cJSON_Delete(o);
	o = ask(fd, "{\"req\":\"explain\",\"key\":\"" K2 "\"}");
	assert_true(is_ok(o));
	assert_true(cJSON_IsObject(cJSON_GetObjectItem(o, "result")));
	assert_true(cJSON_IsArray(cJSON_GetObjectItem(o, "trials")));
	cJSON_Delete(o);
	/* list: filters and pagination */
	o = ask(fd, "{\"req\":\"list\"}");
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(o, "results")),
			 2);
	assert_true(cJSON_IsNull(cJSON_GetObjectItem(o, "next")));
	cJSON_Delete(o);
	o = ask(fd, "{\"req\":\"list\",\"op\":\"gemm\"}");
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(o, "results")),
			 0);
	cJSON_Delete(o);
	o = ask(fd, "{\"req\":\"list\",\"op\":\"rmsnorm\",\"dtype\":\"fp32\","
		"\"status\":\"tuned\",\"limit\":1}");
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(o, "results")),
			 1);
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(o,
						 "next")), K1);
	cJSON_Delete(o);
	o = ask(fd, "{\"req\":\"export\",\"after\":\"" K1 "\",\"limit\":1}");
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(o, "results")),
			 1);
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(
		cJSON_GetArrayItem(cJSON_GetObjectItem(o, "results"), 0),
		"key")), K2);
	assert_true(cJSON_IsNull(cJSON_GetObjectItem(o, "next")));
	cJSON_Delete(o);
	o = ask(fd, "{\"req\":\"list\",\"limit\":10001}");
	assert_string_equal(err_code(o), fly_err_name(FLY_E_INVALID));
	cJSON_Delete(o);
	/* forget one, then all */
	o = ask(fd, "{\"req\":\"forget\",\"key\":\"" K1 "\"}");
	assert_true(is_ok(o));
	assert_int_equal((int)num(o, "forgotten"), 1);
	cJSON_Delete(o);
	o = ask(fd, "{\"req\":\"get\",\"key\":\"" K1 "\"}");
	assert_string_equal(err_code(o), fly_err_name(FLY_E_NOTFOUND));
	cJSON_Delete(o);
	o = ask(fd, "{\"req\":\"forget\",\"all\":true}");
	assert_int_equal((int)num(o, "forgotten"), 1);
	cJSON_Delete(o);
	close(fd);
	assert_alive();
}

static void test_import_all_or_nothing(void **state)
{
	char dev[64], lv[64], good[512], bad[512];
	int fd = fly_test_connect(d.sock);
	cJSON *o;

	assert_true(fd >= 0);
	identity(fd, dev, sizeof(dev), lv, sizeof(lv));
	snprintf(good, sizeof(good), ROW, K1, dev, lv, "rms_twopass", "1,1",
		 "3");
	/* An invalid row anywhere refuses the whole import. */
	snprintf(bad, sizeof(bad), ROW, K2, dev, lv, "rms_twopass", "1,1",
		 "-1");
	o = ask(fd, "{\"req\":\"import\",\"results\":[%s,%s]}", good, bad);
	assert_string_equal(err_code(o), fly_err_name(FLY_E_INVALID));
	assert_non_null(strstr(cJSON_GetStringValue(cJSON_GetObjectItem(
		cJSON_GetObjectItem(o, "error"), "message")), "results[1]"));
	cJSON_Delete(o);
	/* Staged chunk, then a bad last chunk: nothing lands. */
	o = ask(fd, "{\"req\":\"import\",\"more\":true,\"results\":[%s]}", good);
	assert_true(is_ok(o));
	cJSON_Delete(o);
	snprintf(bad, sizeof(bad), ROW, "gemm/fp32/nonsense", dev, lv, "x", "1",
		 "1");
	o = ask(fd, "{\"req\":\"import\",\"results\":[%s]}", bad);
	assert_string_equal(err_code(o), fly_err_name(FLY_E_INVALID));
	cJSON_Delete(o);
	o = ask(fd, "{\"req\":\"get\",\"key\":\"" K1 "\"}");
	assert_string_equal(err_code(o), fly_err_name(FLY_E_NOTFOUND));
	cJSON_Delete(o);
	/* Another device's rows need retarget. */
	snprintf(bad, sizeof(bad), ROW, K1, "00000000deadbeef", lv,
		 "rms_twopass", "1,1", "3");
	o = ask(fd, "{\"req\":\"import\",\"results\":[%s]}", bad);
	assert_string_equal(err_code(o), fly_err_name(FLY_E_INVALID));
	cJSON_Delete(o);
	o = ask(fd, "{\"req\":\"import\",\"retarget\":true,\"results\":[%s]}",
		bad);
	assert_true(is_ok(o));
	assert_int_equal((int)num(o, "imported"), 1);
	cJSON_Delete(o);
	o = ask(fd, "{\"req\":\"get\",\"key\":\"" K1 "\"}");
	assert_true(is_ok(o));
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(
		cJSON_GetObjectItem(o, "result"), "device")), dev);
	cJSON_Delete(o);
	/* Strict rows: unknown field, empty variant, too many params. */
	o = ask(fd, "{\"req\":\"import\",\"retarget\":true,\"results\":[{\"key\":"
		"\"" K2 "\",\"variant\":\"v\",\"params\":[],\"median_us\":1"
		TAIL ",\"extra\":1}]}");
	assert_string_equal(err_code(o), fly_err_name(FLY_E_INVALID));
	cJSON_Delete(o);
	o = ask(fd, "{\"req\":\"import\",\"retarget\":true,\"results\":[{\"key\":"
		"\"" K2 "\",\"variant\":\"\",\"params\":[],\"median_us\":1"
		TAIL "}]}");
	assert_string_equal(err_code(o), fly_err_name(FLY_E_INVALID));
	cJSON_Delete(o);
	o = ask(fd, "{\"req\":\"import\",\"retarget\":true,\"results\":[{\"key\":"
		"\"" K2 "\",\"variant\":\"v\",\"params\":[1,2,3,4,5,6,7,8,9],"
		"\"median_us\":1" TAIL "}]}");
	assert_string_equal(err_code(o), fly_err_name(FLY_E_INVALID));
	cJSON_Delete(o);
	/* A complete row is accepted with retarget; one field short is not. */
	o = ask(fd, "{\"req\":\"import\",\"retarget\":true,\"results\":[{\"key\":"
		"\"" K2 "\",\"variant\":\"rms_ref\",\"params\":[],\"median_us\":1"
		TAIL "}]}");
	assert_true(is_ok(o));
	cJSON_Delete(o);
	o = ask(fd, "{\"req\":\"import\",\"retarget\":true,\"results\":[{\"key\":"
		"\"" K2 "\",\"variant\":\"v\",\"params\":[],\"median_us\":1,"
		"\"device\":\"x\",\"libver\":\"y\",\"mad_us\":0,\"tune_s\":0}]}");
	assert_string_equal(err_code(o), fly_err_name(FLY_E_INVALID));
	cJSON_Delete(o);
	o = ask(fd, "{\"req\":\"forget\",\"all\":true}");
	assert_true(is_ok(o));
	cJSON_Delete(o);
	close(fd);
	assert_alive();
}

/* Check one request's response against schemas/@p schema. */
static void conforms(int fd, const char *schema, const char *request)
{
	char err[512], *resp = NULL;

	assert_int_equal(fly_test_request(fd, request, &resp, T_MS), 0);
	if (fly_test_schema_validate_text(schema, resp, err, sizeof(err)) != 0)
		fail_msg("%s: %s\n%s", schema, err, resp);
	free(resp);
}

/* Every response of the handlers here matches schemas/ (the source of
 * truth), errors included. */
static void test_responses_match_schemas(void **state)
{
	char dev[64], lv[64], row[512], req[768];
	int fd = fly_test_connect(d.sock);

	assert_true(fd >= 0);
	identity(fd, dev, sizeof(dev), lv, sizeof(lv));
	snprintf(row, sizeof(row), ROW, K1, dev, lv, "rms_twopass", "4,1",
		 "12.5");
	conforms(fd, "hello.response.json", "{\"req\":\"hello\",\"version\":1,"
		 "\"id\":1}");
	conforms(fd, "status.response.json", "{\"req\":\"status\",\"id\":2}");
	conforms(fd, "stats.response.json", "{\"req\":\"stats\"}");
	conforms(fd, "metrics.response.json", "{\"req\":\"metrics\"}");
	snprintf(req, sizeof(req), "{\"req\":\"import\",\"more\":true,"
		 "\"results\":[%s]}", row);
	conforms(fd, "import.response.json", req);
	conforms(fd, "import.response.json", "{\"req\":\"import\",\"results\":[]}");
	conforms(fd, "get.response.json", "{\"req\":\"get\",\"key\":\"" K1 "\"}");
	conforms(fd, "explain.response.json", "{\"req\":\"explain\",\"key\":\""
		 K1 "\"}");
	conforms(fd, "explain.response.json", "{\"req\":\"explain\",\"key\":\""
		 K2 "\"}");
	conforms(fd, "list.response.json", "{\"req\":\"list\",\"limit\":1}");
	conforms(fd, "export.response.json", "{\"req\":\"export\"}");
	conforms(fd, "forget.response.json", "{\"req\":\"forget\",\"key\":\""
		 K1 "\"}");
	conforms(fd, "error.response.json", "{\"req\":\"get\",\"key\":\"" K1
		 "\",\"id\":9}");
	conforms(fd, "error.response.json", "{\"req\":\"nope\"}");
	conforms(fd, "error.response.json", "{bad json");
	conforms(fd, "error.response.json", "{\"req\":\"hello\"}");
	close(fd);
	assert_alive();
}

/* 100 frames in one write: more than one read's budget of 16, so the
 * backlog path runs; every answer comes, in order. */
static void test_pipelined_in_order(void **state)
{
	char json[64], *resp = NULL;
	uint8_t *buf = malloc(100 * 64);
	size_t n = 0;
	int fd = fly_test_connect(d.sock);

	assert_non_null(buf);
	assert_true(fd >= 0);
	for (int i = 0; i < 100; i++) {
		int len = snprintf(json, sizeof(json),
				   "{\"req\":\"list\",\"limit\":1,\"id\":%d}", i);

		put_hdr(buf + n, (uint32_t)len);
		memcpy(buf + n + 4, json, (size_t)len);
		n += 4 + (size_t)len;
	}
	assert_int_equal(fly_test_send_raw(fd, buf, n), 0);
	free(buf);
	for (int i = 0; i < 100; i++) {
		char want[32];

		assert_int_equal(fly_test_recv_frame(fd, &resp, T_MS), 0);
		snprintf(want, sizeof(want), "\"id\":%d}", i);
		if (strstr(resp, want) == NULL)
			fail_msg("response %d out of order: %s", i, resp);
		free(resp);
	}
	close(fd);
	assert_alive();
}

/* issue 19: the decide fast path (a request the scanner knows) and the
 * generic path (the same request with an escape in its key, which the
 * scanner leaves to the parser) give the same answer, both valid against
 * the schemas, and count the same. */
static void test_decide_fast_and_generic_agree(void **state)
{
	static const char *const fast[] = {
	    "{\"req\":\"decide\",\"id\":5,\"key\":\"" K1 "\"}",
	    "{\"key\":\"" K2 "\",\"req\":\"decide\"}",
	    "{\"req\":\"decide\",\"id\":6,\"key\":\"nope/x\"}",
	    "{\"req\":\"decide\",\"id\":7,\"key\":\"gemm/bf16/m=1\"}"};
	static const char *const generic[] = {
	    "{\"req\":\"decide\",\"id\":5,\"key\":\"\\u0072msnorm/fp32/"
	    "m=32,n=4096\"}",
	    "{\"key\":\"\\u0072msnorm/fp32/m=64,n=4096\",\"req\":\"decide\"}",
	    "{\"req\":\"decide\",\"id\":6,\"key\":\"\\u006eope/x\"}",
	    "{\"req\":\"decide\",\"id\":7,\"key\":\"\\u0067emm/bf16/m=1\"}"};
	static const char *const names[] = {"requests", "decides", "errors"};
	int64_t at[3][3];
	char err[512];
	int fd = fly_test_connect(d.sock);

	(void)state;
	assert_true(fd >= 0);
	for (int pass = 0; pass < 3; pass++) {
		for (int k = 0; k < 3; k++)
			at[pass][k] = stat_of(names[k]);
		if (pass == 2)
			break;
		for (size_t i = 0; i < 4; i++) {
			char *a = NULL, *b = NULL;

			assert_int_equal(fly_test_request(fd, fast[i], &a, T_MS),
					 0);
			assert_int_equal(fly_test_request(fd, generic[i], &b,
							  T_MS), 0);
			if (strcmp(a, b) != 0)
				fail_msg("fast %s\ngeneric %s", a, b);
			if (fly_test_schema_validate_text(
				    strstr(a, "\"ok\":true") ?
				    "decide.response.json" :
				    "error.response.json", a, err,
				    sizeof(err)) != 0)
				fail_msg("%s: %s", err, a);
			free(a);
			free(b);
		}
	}
	/* pass 0 and pass 1 sent the same requests, each both ways */
	for (int k = 0; k < 3; k++)
		assert_int_equal(at[1][k] - at[0][k], at[2][k] - at[1][k]);
	assert_int_equal(at[1][1] - at[0][1], 8);
	close(fd);
	assert_alive();
}

/* issue 19: replies of one read go out batched, still in order: fast
 * decides, generic requests, errors, and a hello whose reply carries an
 * fd, pipelined in one write. */
static void test_pipelined_mixed_in_order(void **state)
{
	char json[128], *resp = NULL;
	uint8_t *buf = malloc(64 * 128);
	size_t n = 0;
	int fd = fly_test_connect(d.sock);

	(void)state;
	assert_non_null(buf);
	assert_true(fd >= 0);
	for (int i = 0; i < 64; i++) {
		int len;

		switch (i % 5) {
		case 0:
		case 1:
			len = snprintf(json, sizeof(json), "{\"req\":\"decide\","
				       "\"id\":%d,\"key\":\"%s\"}", i,
				       i % 2 ? K1 : K2);
			break;
		case 2:
			len = snprintf(json, sizeof(json), "{\"req\":\"list\","
				       "\"limit\":1,\"id\":%d}", i);
			break;
		case 3:
			len = snprintf(json, sizeof(json), "{\"req\":\"decide\","
				       "\"id\":%d,\"key\":\"bad\"}", i);
			break;
		default:
			len = snprintf(json, sizeof(json), i == 9 ?
				       "{\"req\":\"hello\",\"version\":1,"
				       "\"id\":%d}" :
				       "{\"req\":\"status\",\"id\":%d}", i);
		}
		put_hdr(buf + n, (uint32_t)len);
		memcpy(buf + n + 4, json, (size_t)len);
		n += 4 + (size_t)len;
	}
	assert_int_equal(fly_test_send_raw(fd, buf, n), 0);
	free(buf);
	for (int i = 0; i < 64; i++) {
		char want[32];

		assert_int_equal(fly_test_recv_frame(fd, &resp, T_MS), 0);
		snprintf(want, sizeof(want), "\"id\":%d}", i);
		if (strstr(resp, want) == NULL)
			fail_msg("response %d out of order: %s", i, resp);
		if (i % 5 == 3)
			assert_non_null(strstr(resp, "\"ok\":false"));
		else
			expect_ok(resp);
		free(resp);
	}
	close(fd);
	assert_alive();
}

/* Count lines of the daemon log containing @p needle. */
static int log_count(const char *needle)
{
	char line[2048];
	int n = 0;
	FILE *f = fopen(d.log, "r");

	if (f == NULL)
		return 0;
	while (fgets(line, sizeof(line), f) != NULL)
		n += strstr(line, needle) != NULL;
	fclose(f);
	return n;
}

/* fd exhaustion so deep that not even the spare fd helps (the limit is
 * below fds the daemon already holds): accepting pauses instead of
 * spinning, the existing client is served, the log is not flooded, and
 * once fds are available the waiting clients are all answered. */
static void test_emfile_below_spare(void **state)
{
	struct rlimit old, low;
	int keep, storm[20], lines_before;
	char *resp = NULL;

	if (d.external)
		skip();
	keep = fly_test_connect(d.sock);
	assert_true(keep >= 0);
	assert_int_equal(fly_test_request(keep, "{\"req\":\"list\"}", &resp,
					  T_MS), 0);
	free(resp);
	assert_int_equal(prlimit(d.pid, RLIMIT_NOFILE, NULL, &old), 0);
	low = old;
	low.rlim_cur = 8;
	assert_int_equal(prlimit(d.pid, RLIMIT_NOFILE, &low, NULL), 0);
	lines_before = log_count("accept_error") + log_count("max_clients");
	for (int i = 0; i < 20; i++) {
		storm[i] = fly_test_connect(d.sock);
		assert_true(storm[i] >= 0); /* queued in the backlog */
		assert_int_equal(fly_test_send_frame(storm[i],
			"{\"req\":\"list\",\"id\":5}"), 0);
	}
	for (int i = 0; i < 5; i++) {
		assert_int_equal(fly_test_request(keep,
			"{\"req\":\"list\",\"id\":1}", &resp, T_MS), 0);
		expect_ok(resp);
		free(resp);
		usleep(100 * 1000);
	}
	assert_int_equal(prlimit(d.pid, RLIMIT_NOFILE, &old, NULL), 0);
	/* Each waiting client now gets a frame: an answer or max_clients. */
	for (int i = 0; i < 20; i++) {
		assert_int_equal(fly_test_recv_frame(storm[i], &resp,
						     fly_test_timeout(T_MS)), 0);
		assert_true(strstr(resp, "\"id\":5") != NULL ||
			    strstr(resp, "max_clients") != NULL);
		free(resp);
		close(storm[i]);
	}
	assert_true(log_count("accept_error") + log_count("max_clients") -
		    lines_before < 10);
	close(keep);
	assert_alive();
}

/* hello's response carries the shm memfd (SCM_RIGHTS on its first byte):
 * one fd, as large as "shm.size" says, sealed against growing. */
static void test_hello_passes_memfd(void **state)
{
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(4 * sizeof(int))];
	} u;
	char buf[8192];
	struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf) - 1};
	struct msghdr mh;
	struct cmsghdr *c;
	struct stat st;
	int fd = fly_test_connect(d.sock), mfd = -1, nfds = 0;
	ssize_t n;
	cJSON *o;

	assert_true(fd >= 0);
	assert_int_equal(fly_test_send_frame(fd, "{\"req\":\"hello\","
					     "\"version\":1}"), 0);
	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = u.b;
	mh.msg_controllen = sizeof(u.b);
	n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
	assert_true(n > 4);
	assert_false(mh.msg_flags & MSG_CTRUNC);
	for (c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			nfds += (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			memcpy(&mfd, CMSG_DATA(c), sizeof(int));
		}
	}
	assert_int_equal(nfds, 1);
	assert_true(mfd >= 0);
	/* The rest of the frame, then compare the size. */
	{
		uint32_t len = (uint32_t)(uint8_t)buf[0] |
			       (uint32_t)(uint8_t)buf[1] << 8 |
			       (uint32_t)(uint8_t)buf[2] << 16 |
			       (uint32_t)(uint8_t)buf[3] << 24;

		assert_true(len + 4 < sizeof(buf));
		while ((size_t)n < len + 4) {
			ssize_t m = read(fd, buf + n, len + 4 - (size_t)n);

			assert_true(m > 0);
			n += m;
		}
		buf[n] = '\0';
	}
	o = parse(buf + 4);
	assert_int_equal(fstat(mfd, &st), 0);
	assert_true((double)st.st_size == cJSON_GetObjectItem(
		cJSON_GetObjectItem(o, "shm"), "size")->valuedouble);
	assert_true(fcntl(mfd, F_GET_SEALS) & F_SEAL_GROW);
	cJSON_Delete(o);
	close(mfd);
	close(fd);
	assert_alive();
}

/* A hello answered while earlier responses are still queued: the answers
 * keep request order and the memfd arrives with the first byte of the
 * hello frame. */
static void test_fd_after_queued_output(void **state)
{
	const size_t cap = 1u << 20;
	uint8_t *out = malloc(128 * 1024), *in = malloc(cap);
	size_t n = 0, have = 0, pos = 0, hello_at = 0;
	size_t fd_from = (size_t)-1, fd_to = 0;
	int fd = fly_test_connect(d.sock), nfds = 0, frames = 0;
	char json[96];

	assert_non_null(out);
	assert_non_null(in);
	assert_true(fd >= 0);
	for (int i = 0; i <= 1001; i++) {
		int len = i == 1000 ?
			snprintf(json, sizeof(json),
				 "{\"req\":\"hello\",\"version\":1,\"id\":%d}", i) :
			snprintf(json, sizeof(json),
				 "{\"req\":\"list\",\"limit\":1,\"id\":%d}", i);

		put_hdr(out + n, (uint32_t)len);
		memcpy(out + n + 4, json, (size_t)len);
		n += 4 + (size_t)len;
	}
	assert_int_equal(fly_test_send_raw(fd, out, n), 0);
	free(out);
	usleep(200 * 1000); /* let the daemon queue what the socket won't take */
	while (frames < 1002) {
		union {
			struct cmsghdr h;
			char b[CMSG_SPACE(4 * sizeof(int))];
		} u;
		struct iovec iov = {.iov_base = in + have, .iov_len = cap - have};
		struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1,
				    .msg_control = u.b,
				    .msg_controllen = sizeof(u.b)};
		struct cmsghdr *c;
		ssize_t r;

		assert_true(have < cap);
		r = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
		assert_true(r > 0);
		for (c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c)) {
			int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));

			for (int j = 0; j < k; j++) {
				int x;

				memcpy(&x, CMSG_DATA(c) + j * sizeof(int),
				       sizeof(int));
				close(x);
			}
			nfds += k;
			fd_from = have;
			fd_to = have + (size_t)r;
		}
		have += (size_t)r;
		/* Parse the complete frames so far, checking their order. */
		while (have - pos >= 4) {
			uint32_t len = (uint32_t)in[pos] |
				       (uint32_t)in[pos + 1] << 8 |
				       (uint32_t)in[pos + 2] << 16 |
				       (uint32_t)in[pos + 3] << 24;
			char want[32], *body;

			if (have - pos < 4 + (size_t)len)
				break;
			body = malloc(len + 1);
			assert_non_null(body);
			memcpy(body, in + pos + 4, len);
			body[len] = '\0';
			snprintf(want, sizeof(want), "\"id\":%d}", frames);
			if (strstr(body, want) == NULL)
				fail_msg("frame %d out of order: %.200s", frames,
					 body);
			expect_ok(body);
			free(body);
			if (frames == 1000)
				hello_at = pos;
			pos += 4 + (size_t)len;
			frames++;
		}
	}
	/* The kernel may glue earlier bytes in front of the fd's segment but
	 * ends the read with it: the hello's first byte is in that read. */
	assert_int_equal(nfds, 1);
	assert_true(fd_from <= hello_at && hello_at < fd_to);
	free(in);
	close(fd);
	assert_alive();
}

/* ------------------------------------------------- structured fuzzing */

static uint64_t fz_state = 0x9e3779b97f4a7c15ull;

static uint32_t fz_rand(uint32_t n) /* [0, n) */
{
	fz_state ^= fz_state << 13;
	fz_state ^= fz_state >> 7;
	fz_state ^= fz_state << 17;
	return (uint32_t)((fz_state >> 11) % n);
}

static cJSON *fz_value(int depth)
{
	static const double nums[] = { 0, -1, 1, 7, 4096, 2147483648.0,
				       9007199254740993.0, -9.3e18, 1e308,
				       0.5, -0.0, 65536 };
	static const char *const strs[] = {
		"", "x", K1, "rmsnorm/fp32/m=0,n=4096",
		"rmsnorm/fp32/m=-5,n=4096", "gemm/bf16/NT/m=1,n=1,k=1",
		"gemm/bf16/XX/m=1,n=1,k=1", "rmsnorm/fp32/m=99999999999,n=1",
		"topk/fp32/m=1,n=10,k=11", "grouped_gemm/bf16/NT/g=0,m=1,n=1,k=1",
		"rmsnorm/fp32/m=32,n=4096/residual/residual", "\xc3\xa9\xe2\x82\xac",
		"decide", "import", "forget", "status", "rmsnorm//", "/////",
	};
	char big[3000];

	switch (fz_rand(depth > 2 ? 5 : 8)) {
	case 0:
		return cJSON_CreateNumber(nums[fz_rand(sizeof(nums) /
						       sizeof(nums[0]))]);
	case 1:
		return cJSON_CreateString(strs[fz_rand(sizeof(strs) /
						       sizeof(strs[0]))]);
	case 2:
		return cJSON_CreateBool(fz_rand(2));
	case 3:
		return cJSON_CreateNull();
	case 4:
		memset(big, 'a' + (int)fz_rand(26), sizeof(big) - 1);
		big[fz_rand(sizeof(big))] = '\0';
		return cJSON_CreateString(big);
	case 5: {
		cJSON *a = cJSON_CreateArray();
		for (uint32_t i = fz_rand(4); i > 0; i--)
			cJSON_AddItemToArray(a, fz_value(depth + 1));
		return a;
	}
	default: {
		static const char *const names[] = { "key", "id", "limit",
						     "all", "more", "results",
						     "variant", "params", "x" };
		cJSON *o = cJSON_CreateObject();
		for (uint32_t i = fz_rand(3); i > 0; i--) {
			const char *nm = names[fz_rand(9)];
			if (!cJSON_GetObjectItem(o, nm))
				cJSON_AddItemToObject(o, nm,
						      fz_value(depth + 1));
		}
		return o;
	}
	}
}

/* Every node under @p n (members and items), n itself first. */
static int fz_nodes(cJSON *n, cJSON **out, int cap, int k)
{
	if (k < cap)
		out[k++] = n;
	for (cJSON *c = n->child; c != NULL && k < cap; c = c->next)
		k = fz_nodes(c, out, cap, k);
	return k;
}

/* One mutation of @p root: a value replaced, a member dropped, a member
 * added, or a string edited. */
static void fz_mutate(cJSON *root)
{
	static const char *const names[] = { "req", "key", "id", "limit",
					     "all", "more", "results",
					     "version", "zzz" };
	cJSON *nodes[256];
	int n = fz_nodes(root, nodes, 256, 0);
	cJSON *t = nodes[fz_rand((uint32_t)n)];
	cJSON *parent = NULL;

	for (int i = 0; i < n && parent == NULL; i++)
		for (cJSON *c = nodes[i]->child; c != NULL; c = c->next)
			if (c == t)
				parent = nodes[i];
	switch (fz_rand(4)) {
	case 0: /* replace */
		if (parent != NULL)
			cJSON_ReplaceItemViaPointer(parent, t, fz_value(1));
		return;
	case 1: /* drop */
		if (parent != NULL)
			cJSON_Delete(cJSON_DetachItemViaPointer(parent, t));
		return;
	case 2: /* add to an object */
		if (cJSON_IsObject(t)) {
			const char *nm = names[fz_rand(9)];
			cJSON_DeleteItemFromObject(t, nm);
			cJSON_AddItemToObject(t, nm, fz_value(1));
		}
		return;
	default: /* edit a string: a character changed, cut or doubled */
		if (cJSON_IsString(t) && parent != NULL) {
			static const char cs[] = "/=,mnkg0123456789-fpb NT";
			char buf[512];
			size_t len = strlen(t->valuestring);
			if (len >= sizeof(buf) - 2)
				return;
			memcpy(buf, t->valuestring, len + 1);
			size_t at = len ? fz_rand((uint32_t)len) : 0;
			switch (fz_rand(3)) {
			case 0:
				if (len)
					buf[at] = cs[fz_rand(sizeof(cs) - 1)];
				break;
			case 1:
				buf[at] = '\0';
				break;
			default:
				memmove(buf + at + 1, buf + at, len - at + 1);
				break;
			}
			cJSON_ReplaceItemViaPointer(parent, t,
						    cJSON_CreateString(buf));
		}
		return;
	}
}

/* Thousands of requests made from valid ones by structured mutations
 * (values of the wrong type or out of range, members dropped or added,
 * keys edited a character at a time, import rows mangled): every one is
 * answered on the same connection, every answer conforms to its schema
 * (the request's response, or error.response.json), none is an
 * "internal" error, and the daemon is the same process at the end.  The
 * generator is seeded: a failure prints the request, and the run
 * reproduces it (FLY_FUZZ_ITERS and FLY_FUZZ_SEED run more, or other
 * requests). */
static void test_structured_fuzz(void **state)
{
	char dev[64], lv[64], row[512], imp[768];
	const char *seeds[8];
	pid_t pid = d.pid;
	const char *env_n = getenv("FLY_FUZZ_ITERS"),
		   *env_s = getenv("FLY_FUZZ_SEED");
	int fd = fly_test_connect(d.sock), nok = 0, nerr = 0;
	int iters = env_n ? atoi(env_n) : 3000;

	if (env_s)
		fz_state = strtoull(env_s, NULL, 0) | 1u;
	assert_true(fd >= 0);
	identity(fd, dev, sizeof(dev), lv, sizeof(lv));
	snprintf(row, sizeof(row), ROW, K2, dev, lv, "rms_twopass", "4,1",
		 "12.5");
	snprintf(imp, sizeof(imp), "{\"req\":\"import\",\"results\":[%s]}",
		 row);
	seeds[0] = "{\"req\":\"decide\",\"key\":\"" K1 "\",\"id\":1}";
	seeds[1] = "{\"req\":\"get\",\"key\":\"" K1 "\"}";
	seeds[2] = "{\"req\":\"explain\",\"key\":\"" K1 "\"}";
	seeds[3] = "{\"req\":\"list\",\"limit\":2}";
	seeds[4] = "{\"req\":\"export\"}";
	seeds[5] = imp;
	seeds[6] = "{\"req\":\"forget\",\"key\":\"" K2 "\"}";
	seeds[7] = "{\"req\":\"stats\",\"id\":3}";
	for (int it = 0; it < iters; it++) {
		cJSON *req = cJSON_Parse(seeds[fz_rand(8)]), *resp_o, *rq;
		char *text, *resp = NULL, schema[64], err[512];
		const char *code = NULL;

		assert_non_null(req);
		for (uint32_t m = 1 + fz_rand(3); m > 0; m--)
			fz_mutate(req);
		text = cJSON_PrintUnformatted(req);
		assert_non_null(text);
		if (fly_test_request(fd, text, &resp, T_MS) != 0)
			fail_msg("no answer to %s", text);
		resp_o = parse(resp);
		rq = cJSON_GetObjectItem(req, "req");
		if (cJSON_IsTrue(cJSON_GetObjectItem(resp_o, "ok"))) {
			assert_true(cJSON_IsString(rq));
			snprintf(schema, sizeof(schema), "%s.response.json",
				 rq->valuestring);
			nok++;
		} else {
			snprintf(schema, sizeof(schema), "error.response.json");
			code = cJSON_GetStringValue(cJSON_GetObjectItem(
				cJSON_GetObjectItem(resp_o, "error"), "code"));
			nerr++;
		}
		if (fly_test_schema_validate_text(schema, resp, err,
						  sizeof(err)) != 0)
			fail_msg("%s: %s\nrequest %s\nresponse %s", schema, err,
				 text, resp);
		if (code != NULL && strcmp(code, "internal") == 0)
			fail_msg("internal error on %s: %s", text, resp);
		cJSON_Delete(resp_o);
		cJSON_Delete(req);
		free(resp);
		free(text);
	}
	printf("# fuzz: %d requests, %d ok, %d errors (FLY_FUZZ_ITERS, "
	       "FLY_FUZZ_SEED to change)\n", iters, nok, nerr);
	assert_true(nok > 0 && nerr > 0);
	close(fd);
	assert_int_equal(d.pid, pid);
	assert_int_equal(kill(pid, 0), 0);
	assert_alive();
}

/* ---------------------------------------------------------------- issue 18 */

/* Framing: a length over the cap is answered "too_big", a length of 0
 * "proto" (schemas/README.md), then the connection is closed. */
static void test_issue_18_oversize_code(void **state)
{
	static const struct {
		uint32_t len;
		int code;
	} cases[] = {
		{64u * 1024u + 1u, FLY_E_TOOBIG},
		{0xffffffffu, FLY_E_TOOBIG},
		{0, FLY_E_PROTO},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int fd = fly_test_connect(d.sock);
		char *resp = NULL;
		uint8_t h[4];

		assert_true(fd >= 0);
		put_hdr(h, cases[i].len);
		assert_int_equal(fly_test_send_raw(fd, h, 4), 0);
		assert_int_equal(fly_test_recv_frame(fd, &resp, T_MS), 0);
		expect_error(resp, cases[i].code);
		free(resp);
		assert_int_equal(fly_test_wait_closed(fd, T_MS), 0);
		close(fd);
	}
	assert_alive();
}

/* hello is optional (a first request of another kind is answered), and
 * a protocol version other than FLY_PROTO_VERSION is refused with
 * "version", the message naming the version the daemon speaks. */
static void test_issue_18_hello_rules(void **state)
{
	static const char *const refused[] = {
		"{\"req\":\"hello\",\"version\":2}",
		"{\"req\":\"hello\",\"version\":99}",
		"{\"req\":\"hello\",\"version\":0}",
	};
	int fd = fly_test_connect(d.sock);
	char *resp = NULL;
	cJSON *o;

	assert_true(fd >= 0);
	assert_int_equal(fly_test_request(fd, "{\"req\":\"status\",\"id\":1}",
					  &resp, T_MS), 0);
	expect_ok(resp);
	free(resp);
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		assert_int_equal(fly_test_request(fd, refused[i], &resp, T_MS),
				 0);
		expect_error(resp, FLY_E_VERSION);
		if (strstr(resp, "speaks version 1") == NULL)
			fail_msg("%s: %s", refused[i], resp);
		free(resp);
	}
	/* The connection stays; version 1 is answered. */
	assert_int_equal(fly_test_request(fd, "{\"req\":\"hello\",\"version\":1}",
					  &resp, T_MS), 0);
	o = parse(resp);
	assert_true(cJSON_IsTrue(cJSON_GetObjectItem(o, "ok")));
	assert_int_equal((int)cJSON_GetObjectItem(o, "version")->valuedouble,
			 FLY_PROTO_VERSION);
	cJSON_Delete(o);
	free(resp);
	close(fd);
	assert_alive();
}

/* A recording proxy between flytune-ctl and the daemon: relays bytes (and
 * the fd of hello's answer) both ways and keeps every request payload the
 * client sends.  One thread; up to PROXY_CONNS connections at a time. */
#define PROXY_CONNS 4
#define PROXY_REQS 256

struct proxy_conn {
	int cfd, dfd;        /* client side, daemon side; -1 unused */
	uint8_t *buf;        /* client bytes not yet split into frames */
	size_t len;
};

struct proxy {
	char path[320];
	int lfd;
	int stop[2];
	pthread_t th;
	pthread_mutex_t mu;
	struct proxy_conn c[PROXY_CONNS];
	char *reqs[PROXY_REQS];
	int nreqs;
	int overflow;
};

/* Split whole frames off @p c's buffer into the record. */
static void proxy_record(struct proxy *p, struct proxy_conn *c)
{
	while (c->len >= 4) {
		uint32_t n = (uint32_t)c->buf[0] | (uint32_t)c->buf[1] << 8 |
			     (uint32_t)c->buf[2] << 16 |
			     (uint32_t)c->buf[3] << 24;
		char *s;

		if (c->len - 4 < n)
			return;
		s = strndup((const char *)c->buf + 4, n);
		pthread_mutex_lock(&p->mu);
		if (p->nreqs < PROXY_REQS && s != NULL)
			p->reqs[p->nreqs++] = s;
		else
			p->overflow = 1, free(s);
		pthread_mutex_unlock(&p->mu);
		memmove(c->buf, c->buf + 4 + n, c->len - 4 - n);
		c->len -= 4 + n;
	}
}

static void proxy_drop(struct proxy_conn *c)
{
	close(c->cfd);
	close(c->dfd);
	free(c->buf);
	memset(c, 0, sizeof(*c));
	c->cfd = c->dfd = -1;
}

/* Move what is readable on one side to the other.  @return 0, or -1 when
 * the connection ended. */
static int proxy_pump(struct proxy *p, struct proxy_conn *c, int from_client)
{
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} cm;
	uint8_t buf[65536];
	struct iovec iov = {buf, sizeof(buf)};
	struct msghdr mh = {0};
	int fd = -1;
	ssize_t n;

	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = cm.b;
	mh.msg_controllen = sizeof(cm.b);
	n = recvmsg(from_client ? c->cfd : c->dfd, &mh, MSG_CMSG_CLOEXEC);
	if (n <= 0)
		return -1;
	if (!from_client && mh.msg_controllen > 0 &&
	    CMSG_FIRSTHDR(&mh)->cmsg_type == SCM_RIGHTS)
		memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&mh)), sizeof(int));
	if (from_client) {
		uint8_t *nb = realloc(c->buf, c->len + (size_t)n);

		if (nb == NULL)
			return -1;
		c->buf = nb;
		memcpy(c->buf + c->len, buf, (size_t)n);
		c->len += (size_t)n;
		proxy_record(p, c);
	}
	iov.iov_len = (size_t)n;
	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	if (fd >= 0) {
		memset(&cm, 0, sizeof(cm));
		mh.msg_control = cm.b;
		mh.msg_controllen = sizeof(cm.b);
		CMSG_FIRSTHDR(&mh)->cmsg_level = SOL_SOCKET;
		CMSG_FIRSTHDR(&mh)->cmsg_type = SCM_RIGHTS;
		CMSG_FIRSTHDR(&mh)->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(CMSG_FIRSTHDR(&mh)), &fd, sizeof(int));
	}
	n = sendmsg(from_client ? c->dfd : c->cfd, &mh, MSG_NOSIGNAL);
	if (fd >= 0)
		close(fd);
	return n == (ssize_t)iov.iov_len ? 0 : -1;
}

static void *proxy_main(void *arg)
{
	struct proxy *p = arg;

	for (;;) {
		struct pollfd pf[2 + 2 * PROXY_CONNS];
		int n = 0;

		pf[n++] = (struct pollfd){.fd = p->stop[0], .events = POLLIN};
		pf[n++] = (struct pollfd){.fd = p->lfd, .events = POLLIN};
		for (int i = 0; i < PROXY_CONNS; i++) {
			pf[n++] = (struct pollfd){.fd = p->c[i].cfd,
						  .events = POLLIN};
			pf[n++] = (struct pollfd){.fd = p->c[i].dfd,
						  .events = POLLIN};
		}
		if (poll(pf, (nfds_t)n, -1) < 0)
			continue;
		if (pf[0].revents)
			break;
		for (int i = 0; i < PROXY_CONNS; i++) {
			struct proxy_conn *c = &p->c[i];

			if (c->cfd < 0)
				continue;
			if ((pf[2 + 2 * i].revents &&
			     proxy_pump(p, c, 1) < 0) ||
			    (pf[3 + 2 * i].revents &&
			     proxy_pump(p, c, 0) < 0))
				proxy_drop(c);
		}
		if (pf[1].revents) {
			int cfd = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC);
			int i = 0;

			while (i < PROXY_CONNS && p->c[i].cfd >= 0)
				i++;
			if (cfd >= 0 && i < PROXY_CONNS) {
				p->c[i].cfd = cfd;
				p->c[i].dfd = fly_test_connect(d.sock);
				if (p->c[i].dfd < 0)
					proxy_drop(&p->c[i]);
			} else if (cfd >= 0) {
				close(cfd);
			}
		}
	}
	return NULL;
}

/* A listening Unix socket at @p path.  @return the fd. */
static int listen_at(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_true(strlen(path) < sizeof(sa.sun_path));
	strcpy(sa.sun_path, path);
	unlink(path);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(fd, 16), 0);
	return fd;
}

static void proxy_start(struct proxy *p)
{
	memset(p, 0, sizeof(*p));
	for (int i = 0; i < PROXY_CONNS; i++)
		p->c[i].cfd = p->c[i].dfd = -1;
	snprintf(p->path, sizeof(p->path), "%s/proxy.sock", d.dir);
	p->lfd = listen_at(p->path);
	assert_int_equal(pipe2(p->stop, O_CLOEXEC), 0);
	pthread_mutex_init(&p->mu, NULL);
	assert_int_equal(pthread_create(&p->th, NULL, proxy_main, p), 0);
}

static void proxy_stop(struct proxy *p)
{
	assert_int_equal(write(p->stop[1], "x", 1), 1);
	pthread_join(p->th, NULL);
	for (int i = 0; i < PROXY_CONNS; i++)
		if (p->c[i].cfd >= 0)
			proxy_drop(&p->c[i]);
	close(p->lfd);
	close(p->stop[0]);
	close(p->stop[1]);
	unlink(p->path);
	for (int i = 0; i < p->nreqs; i++)
		free(p->reqs[i]);
	pthread_mutex_destroy(&p->mu);
}

/* Run build/flytune-ctl with @p argv (NULL-terminated, without argv[0]);
 * its output goes to DIR/ctl.out.  @return its exit code. */
static int run_ctl(const char *const *argv)
{
	char out[400];
	const char *av[32] = {FLY_BUILD_DIR "/flytune-ctl"};
	int n = 1, st = 0;
	pid_t pid;

	while (argv[n - 1] != NULL && n < 31) {
		av[n] = argv[n - 1];
		n++;
	}
	av[n] = NULL;
	snprintf(out, sizeof(out), "%s/ctl.out", d.dir);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execv(av[0], (char *const *)av);
		_exit(127);
	}
	for (int i = 0; i < fly_test_timeout(120000) / 10; i++) {
		if (waitpid(pid, &st, WNOHANG) == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
		usleep(10 * 1000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	fail_msg("flytune-ctl %s did not end", argv[0]);
	return -1;
}

/* Validate every request @p p recorded against its request schema and
 * mark the names seen in @p must (@p seen[i] for must[i]). */
static void proxy_check(struct proxy *p, const char *const *must, int nmust,
			int *seen)
{
	char schema[128], err[512];

	pthread_mutex_lock(&p->mu);
	assert_false(p->overflow);
	for (int i = 0; i < p->nreqs; i++) {
		cJSON *o = cJSON_Parse(p->reqs[i]);
		const char *name = cJSON_GetStringValue(
			cJSON_GetObjectItemCaseSensitive(o, "req"));

		if (name == NULL)
			fail_msg("flytune-ctl sent %s", p->reqs[i]);
		snprintf(schema, sizeof(schema), "%s.request.json", name);
		if (fly_test_schema_validate(schema, o, err, sizeof(err)) != 0)
			fail_msg("flytune-ctl sent %s\n%s: %s", p->reqs[i],
				 schema, err);
		for (int j = 0; j < nmust; j++)
			seen[j] |= strcmp(must[j], name) == 0;
		cJSON_Delete(o);
	}
	pthread_mutex_unlock(&p->mu);
}

/* Every request flytune-ctl sends, for each of its commands, validates
 * against schemas/<req>.request.json (whose additionalProperties is
 * false): the CLI speaks only the documented protocol.  The requests are
 * recorded by a proxy in front of the real daemon. */
static void test_issue_18_ctl_requests_match_schemas(void **state)
{
	static const char *const must[] = {
		"hello", "status", "stats",  "get",    "explain",
		"list",	 "tune",   "export", "import", "forget",
	};
	int seen[sizeof(must) / sizeof(must[0])] = {0};
	char exp[400], csv[400];
	struct proxy p;
	const char *sk;
#define CTL(...)                                                           \
	do {                                                                   \
		const char *a_[] = {"--socket", sk, __VA_ARGS__, NULL};        \
		int rc_ = run_ctl(a_);                                         \
		if (rc_ == 127 || rc_ == 2)                                    \
			fail_msg("flytune-ctl %s: exit %d", a_[2], rc_);       \
	} while (0)

	proxy_start(&p);
	sk = p.path;
	snprintf(exp, sizeof(exp), "%s/ctl-export.json", d.dir);
	snprintf(csv, sizeof(csv), "%s/ctl-export.csv", d.dir);
	CTL("status");
	CTL("--json", "stats");
	CTL("tune", K2, "--wait", "--timeout", "60");
	CTL("tune", K1);
	CTL("tune", K2, "--force");
	CTL("get", K2);
	CTL("explain", K2);
	CTL("list");
	CTL("list", "--op", "rmsnorm", "--dtype", "fp32", "--status", "tuned");
	CTL("export", exp);
	CTL("export", "--format", "csv", csv);
	CTL("import", exp);
	CTL("forget", K1);
	CTL("--json", "forget", "--all");
#undef CTL
	proxy_check(&p, must, (int)(sizeof(must) / sizeof(must[0])), seen);
	proxy_stop(&p);
	for (size_t j = 0; j < sizeof(must) / sizeof(must[0]); j++)
		if (!seen[j])
			fail_msg("no '%s' request was recorded", must[j]);
	assert_alive();
}

/* The global --timeout and tune's are in seconds, fractions allowed, or
 * Nms (issue 18: the global one was in ms, tune's in whole seconds). */
static void test_issue_18_ctl_timeout_seconds(void **state)
{
	char silent[320];
	struct proxy p;
	int lfd, found = 0;

	snprintf(silent, sizeof(silent), "%s/silent.sock", d.dir);
	lfd = listen_at(silent); /* never accepts, never answers */
	{
		const char *a1[] = {"--socket", silent, "--timeout", "0.5",
				    "status", NULL};
		const char *a2[] = {"--socket", silent, "--timeout", "300ms",
				    "status", NULL};
		const char *a3[] = {"--socket", silent, "--timeout", "0",
				    "status", NULL};
		const char *a4[] = {"--socket", silent, "tune", K2, "--wait",
				    "--timeout", "0", NULL};

		assert_int_equal(run_ctl(a1), 10); /* timeout */
		assert_int_equal(run_ctl(a2), 10);
		assert_int_equal(run_ctl(a3), 2);  /* usage */
		assert_int_equal(run_ctl(a4), 2);
	}
	close(lfd);
	unlink(silent);
	proxy_start(&p);
	{
		const char *a[] = {"--socket", p.path, "--timeout", "2.5",
				   "tune", K2, "--wait", "--timeout", "1.5",
				   NULL};

		assert_int_not_equal(run_ctl(a), 2);
	}
	pthread_mutex_lock(&p.mu);
	for (int i = 0; i < p.nreqs; i++) {
		cJSON *o = cJSON_Parse(p.reqs[i]);
		cJSON *tm = cJSON_GetObjectItemCaseSensitive(o, "timeout_ms");

		if (strstr(p.reqs[i], "\"req\":\"tune\"") != NULL) {
			assert_true(cJSON_IsNumber(tm));
			assert_int_equal((int)tm->valuedouble, 1500);
			found = 1;
		}
		cJSON_Delete(o);
	}
	pthread_mutex_unlock(&p.mu);
	proxy_stop(&p);
	assert_true(found);
	assert_alive();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_truncated_then_eof),
		cmocka_unit_test(test_truncated_then_silence),
		cmocka_unit_test(test_oversize_cap_plus_one),
		cmocka_unit_test(test_oversize_max),
		cmocka_unit_test(test_length_zero),
		cmocka_unit_test(test_invalid_json),
		cmocka_unit_test(test_wrong_types),
		cmocka_unit_test(test_unknown_request),
		cmocka_unit_test(test_deep_nesting),
		cmocka_unit_test(test_duplicate_keys),
		cmocka_unit_test(test_unsolicited_fds),
		cmocka_unit_test(test_unsolicited_fds_max),
		cmocka_unit_test(test_http_request),
		cmocka_unit_test(test_fragmented),
		cmocka_unit_test(test_two_frames_one_write),
		cmocka_unit_test(test_max_clients),
		cmocka_unit_test(test_slow_reader),
		cmocka_unit_test(test_hello_version),
		cmocka_unit_test(test_hello_passes_memfd),
		cmocka_unit_test(test_fd_after_queued_output),
		cmocka_unit_test(test_admin_forget_as_root_or_self),
		cmocka_unit_test(test_non_admin_peer),
		cmocka_unit_test(test_import_export_roundtrip),
		cmocka_unit_test(test_import_all_or_nothing),
		cmocka_unit_test(test_responses_match_schemas),
		cmocka_unit_test(test_pipelined_in_order),
		cmocka_unit_test(test_pipelined_mixed_in_order),
		cmocka_unit_test(test_decide_fast_and_generic_agree),
		cmocka_unit_test(test_emfile_below_spare),
		cmocka_unit_test(test_structured_fuzz),
		cmocka_unit_test(test_issue_18_oversize_code),
		cmocka_unit_test(test_issue_18_hello_rules),
		cmocka_unit_test(test_issue_18_ctl_requests_match_schemas),
		cmocka_unit_test(test_issue_18_ctl_timeout_seconds),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests_name("protocol", tests, setup, teardown);
}
