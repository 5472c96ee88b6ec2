/*
 * loadgen.c -- one load generator for two servers: flytuned's `decide`
 * (u32-LE length + JSON frames) and Redis's GET (RESP), over Unix
 * sockets, so both are driven by the same client code and the client's
 * own cost is the same for both.
 *
 *   loadgen --flytuned SOCK --fpid PID --key KEY
 *           --redis SOCK --rpid PID [--conns 50] [--secs 3] [--rounds 3]
 *
 * One thread, epoll: CONNS connections per server, one request in flight
 * on each (request -> full reply -> next request).  Rounds alternate the
 * servers (flytuned then redis, then redis then flytuned, ...).  Per
 * round and server: requests/s, p50/p99 latency (each request timed from
 * its send to its reply's last byte), and the server's CPU per request
 * from /proc/PID/schedstat (first field: ns on CPU, all threads of a
 * single-process server).  Redis's key holds a value as long as
 * flytuned's reply to the decide (SET before the rounds), so the two move
 * the same bytes.  Prints one JSON object per line.
 *
 * Owns: its sockets.  Thread: one.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include "bench_time.h"

#define MAX_CONNS 1024
#define BUF 65536
#define MAX_LAT (1 << 22)

enum proto { FLY, RESP };

struct conn {
	int fd;
	size_t have;         /* reply bytes read so far */
	uint64_t sent_ns;
	char buf[BUF];
};

static int dial(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || strlen(path) >= sizeof(a.sun_path))
		return -1;
	strcpy(a.sun_path, path);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static int write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Bytes of a complete reply at the start of @p b (@p n read), 0 when
 * incomplete, -1 when malformed. */
static long reply_len(enum proto pr, const char *b, size_t n)
{
	if (pr == FLY) {
		uint32_t len;

		if (n < 4)
			return 0;
		memcpy(&len, b, 4); /* little-endian host */
		return n >= 4 + (size_t)len ? 4 + (long)len : 0;
	}
	/* RESP: "$<len>\r\n<data>\r\n" or "-ERR...\r\n" */
	const char *crlf = memchr(b, '\n', n);
	if (crlf == NULL)
		return 0;
	if (b[0] != '$')
		return -1;
	long len = strtol(b + 1, NULL, 10);
	long head = (long)(crlf - b) + 1;
	if (len < 0)
		return head;
	return (long)n >= head + len + 2 ? head + len + 2 : 0;
}

static uint64_t cpu_ns(int pid)
{
	char path[64];
	unsigned long long ns = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/schedstat", pid);
	f = fopen(path, "r");
	if (f == NULL)
		return 0;
	if (fscanf(f, "%llu", &ns) != 1)
		ns = 0;
	fclose(f);
	return ns;
}

struct target {
	const char *name;
	enum proto pr;
	const char *sock;
	int pid;
	char req[1024];
	size_t reqlen;
};

/* A round of @p secs seconds on @p t with @p nc connections. */
static int round_run(struct target *t, int nc, double secs, int round,
		     uint64_t *lat)
{
	struct conn *cs = calloc((size_t)nc, sizeof(*cs));
	struct epoll_event ev, evs[256];
	int ep = epoll_create1(EPOLL_CLOEXEC), rc = -1;
	uint64_t nlat = 0, errors = 0, t0, t_end, c0, c1;

	if (cs == NULL || ep < 0)
		goto out;
	for (int i = 0; i < nc; i++) {
		cs[i].fd = dial(t->sock);
		if (cs[i].fd < 0) {
			fprintf(stderr, "loadgen: connect %s failed\n", t->sock);
			goto out;
		}
		ev.events = EPOLLIN;
		ev.data.u32 = (uint32_t)i;
		epoll_ctl(ep, EPOLL_CTL_ADD, cs[i].fd, &ev);
	}
	c0 = cpu_ns(t->pid);
	t0 = now_ns();
	t_end = t0 + (uint64_t)(secs * 1e9);
	for (int i = 0; i < nc; i++) {
		cs[i].sent_ns = now_ns();
		if (write_all(cs[i].fd, t->req, t->reqlen) < 0)
			goto out;
	}
	for (;;) {
		int n = epoll_wait(ep, evs, 256, 1000);
		uint64_t now = now_ns();

		if (now >= t_end)
			break;
		for (int e = 0; e < n; e++) {
			struct conn *c = &cs[evs[e].data.u32];
			ssize_t r = read(c->fd, c->buf + c->have,
					 BUF - c->have);
			long len;

			if (r <= 0) {
				errors++;
				goto out;
			}
			c->have += (size_t)r;
			len = reply_len(t->pr, c->buf, c->have);
			if (len < 0) {
				fprintf(stderr, "loadgen: bad %s reply\n",
					t->name);
				goto out;
			}
			if (len == 0)
				continue;
			now = now_ns();
			if (nlat < MAX_LAT)
				lat[nlat++] = now - c->sent_ns;
			memmove(c->buf, c->buf + len, c->have - (size_t)len);
			c->have -= (size_t)len;
			c->sent_ns = now;
			if (write_all(c->fd, t->req, t->reqlen) < 0)
				goto out;
		}
	}
	c1 = cpu_ns(t->pid);
	{
		double el = (double)(now_ns() - t0) / 1e9;

		qsort(lat, nlat, sizeof(*lat), cmp_u64);
		printf("{\"server\":\"%s\",\"round\":%d,\"conns\":%d,"
		       "\"requests\":%llu,\"req_per_s\":%.0f,\"p50_us\":%.2f,"
		       "\"p99_us\":%.2f,\"server_cpu_ns_per_req\":%.0f,"
		       "\"errors\":%llu}\n",
		       t->name, round, nc, (unsigned long long)nlat,
		       (double)nlat / el,
		       nlat ? (double)lat[nlat / 2] / 1e3 : 0.0,
		       nlat ? (double)lat[nlat * 99 / 100] / 1e3 : 0.0,
		       nlat ? (double)(c1 - c0) / (double)nlat : 0.0,
		       (unsigned long long)errors);
		fflush(stdout);
	}
	rc = 0;
out:
	if (cs != NULL)
		for (int i = 0; i < nc; i++)
			if (cs[i].fd > 0)
				close(cs[i].fd);
	if (ep >= 0)
		close(ep);
	free(cs);
	return rc;
}

/* One request/reply on a fresh connection: @return the reply length. */
static long once(struct target *t, char *reply, size_t cap)
{
	int fd = dial(t->sock);
	size_t have = 0;
	long len = 0;

	if (fd < 0 || write_all(fd, t->req, t->reqlen) < 0)
		return -1;
	while (len == 0) {
		ssize_t r = read(fd, reply + have, cap - have);

		if (r <= 0) {
			close(fd);
			return -1;
		}
		have += (size_t)r;
		len = reply_len(t->pr, reply, have);
	}
	close(fd);
	return len;
}

int main(int argc, char **argv)
{
	const char *fsock = NULL, *rsock = NULL, *key = NULL;
	int fpid = 0, rpid = 0, nc = 50, rounds = 3;
	double secs = 3;
	static uint64_t lat[MAX_LAT];
	static char reply[BUF];
	struct target fly = { .name = "flytuned", .pr = FLY };
	struct target red = { .name = "redis", .pr = RESP };

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--flytuned"))
			fsock = argv[i + 1];
		else if (!strcmp(argv[i], "--redis"))
			rsock = argv[i + 1];
		else if (!strcmp(argv[i], "--key"))
			key = argv[i + 1];
		else if (!strcmp(argv[i], "--fpid"))
			fpid = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--rpid"))
			rpid = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--conns"))
			nc = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--secs"))
			secs = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--rounds"))
			rounds = atoi(argv[i + 1]);
	}
	if (!fsock || !rsock || !key || nc < 1 || nc > MAX_CONNS) {
		fprintf(stderr, "usage: loadgen --flytuned SOCK --fpid PID "
			"--key KEY --redis SOCK --rpid PID [--conns N] "
			"[--secs S] [--rounds R]\n");
		return 2;
	}
	/* flytuned: the decide frame */
	{
		char body[600];
		uint32_t n = (uint32_t)snprintf(body, sizeof(body),
			"{\"req\":\"decide\",\"key\":\"%s\"}", key);

		memcpy(fly.req, &n, 4);
		memcpy(fly.req + 4, body, n);
		fly.reqlen = 4 + n;
		fly.sock = fsock;
		fly.pid = fpid;
	}
	long flen = once(&fly, reply, sizeof(reply));
	if (flen < 4) {
		fprintf(stderr, "loadgen: no decide reply from %s\n", fsock);
		return 1;
	}
	/* redis: SET k <value as long as the decide reply body>, then GET */
	{
		long vlen = flen - 4;
		char *set = malloc((size_t)vlen + 128);
		int n;

		if (set == NULL)
			return 1;
		n = sprintf(set, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%ld\r\n", vlen);
		memset(set + n, 'v', (size_t)vlen);
		memcpy(set + n + vlen, "\r\n", 2);
		red.sock = rsock;
		red.pid = rpid;
		memcpy(red.req, set, (size_t)n + (size_t)vlen + 2);
		red.reqlen = (size_t)n + (size_t)vlen + 2;
		red.pr = RESP;
		{
			int fd = dial(rsock);
			char ok[64];

			if (fd < 0 || write_all(fd, set, red.reqlen) < 0 ||
			    read(fd, ok, sizeof(ok)) <= 0) {
				fprintf(stderr, "loadgen: redis SET failed\n");
				return 1;
			}
			close(fd);
		}
		free(set);
		strcpy(red.req, "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
		red.reqlen = strlen(red.req);
		printf("{\"value_bytes\":%ld}\n", vlen);
	}
	for (int r = 0; r < rounds; r++) {
		struct target *a = r % 2 ? &red : &fly, *b = r % 2 ? &fly : &red;

		if (round_run(a, nc, secs, r, lat) < 0 ||
		    round_run(b, nc, secs, r, lat) < 0)
			return 1;
	}
	return 0;
}
