/*
 * pipeline.c -- pipelined decide requests against one flytuned
 * (RELIABILITY.md L4 and L9).
 *
 *   pipeline --sock SOCK --key KEY [--conns 64] [--requests 100000]
 *            [--depth 32]
 *       L4: CONNS connections, each with DEPTH requests in flight until it
 *       has had REQUESTS answers.  Every reply must carry the id of the
 *       oldest request in flight on its connection ("in order, none lost
 *       or doubled") and "ok":true.  Prints requests/s.
 *   pipeline --sock SOCK --key KEY --fair [--conns 63] [--requests 1000000]
 *            [--depth 1024] [--secs 10]
 *       L9: CONNS connections doing request -> reply -> request, each
 *       request timed, for SECS alone (the baseline), then again while one
 *       more connection pipelines REQUESTS requests DEPTH deep (the phase
 *       ends when it has its last answer).  Prints both phases' p50/p99 and
 *       the pipeliner's requests/s.
 *
 * One thread, epoll; requests are {"req":"decide","key":KEY,"id":N}.  One
 * JSON line on stdout; exit 1 on any lost, doubled, reordered or failed
 * reply.  Owns: its sockets.  Thread: one.
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
#define INBUF	  (1 << 20)
#define MAX_LAT	  (1 << 24)

struct conn {
	int fd;
	uint64_t sent;	    /* requests written whole */
	uint64_t got;	    /* replies read (== the next id expected) */
	uint64_t want;	    /* requests to send in all */
	uint64_t depth;	    /* in flight at most */
	uint64_t sent_ns;   /* depth 1: when the request in flight went */
	size_t olen, ooff;  /* pending output */
	size_t ilen;	    /* input bytes held */
	int timed;	    /* record each reply's latency (depth 1) */
	int out_armed;	    /* EPOLLOUT in the interest set */
	char obuf[65536];
	char ibuf[INBUF];
};

static const char *key;
static uint64_t bad, nlat;
static uint32_t *lat;

static int dial(const char *path)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (fd < 0 || strlen(path) >= sizeof(a.sun_path))
		return -1;
	strcpy(a.sun_path, path);
	while (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
		if (errno != EAGAIN && errno != EINTR) {
			close(fd);
			return -1;
		}
		usleep(1000);
	}
	return fd;
}

/* Append requests to the output buffer while the window allows. */
static void fill(struct conn *c)
{
	if (c->ooff == c->olen)
		c->ooff = c->olen = 0;
	while (c->sent < c->want && c->sent - c->got < c->depth) {
		char json[300];
		int n = snprintf(json, sizeof(json),
				 "{\"req\":\"decide\",\"key\":\"%s\","
				 "\"id\":%llu}",
				 key, (unsigned long long)c->sent);
		uint32_t len = (uint32_t)n;

		if (c->olen + 4 + (size_t)n > sizeof(c->obuf))
			break;
		memcpy(c->obuf + c->olen, &len, 4); /* little-endian host */
		memcpy(c->obuf + c->olen + 4, json, (size_t)n);
		c->olen += 4 + (size_t)n;
		if (c->sent == c->got)
			c->sent_ns = now_ns();
		c->sent++;
	}
}

static int flush_out(struct conn *c)
{
	while (c->ooff < c->olen) {
		ssize_t w = send(c->fd, c->obuf + c->ooff, c->olen - c->ooff,
				 MSG_NOSIGNAL);
		if (w < 0)
			return errno == EAGAIN ? 0 : -1;
		c->ooff += (size_t)w;
	}
	return 0;
}

/* One reply: it must carry id c->got and "ok":true. */
static void reply(struct conn *c, const char *p, uint32_t len)
{
	char want[40];
	int n = snprintf(want, sizeof(want), "\"id\":%llu}",
			 (unsigned long long)c->got);

	if (len < (uint32_t)n || memcmp(p + len - n, want, (size_t)n) != 0 ||
	    memmem(p, len, "\"ok\":true", 9) == NULL)
		bad++;
	if (c->timed && nlat < MAX_LAT)
		lat[nlat++] = (uint32_t)((now_ns() - c->sent_ns) / 1000);
	c->got++;
	if (c->sent > c->got)
		c->sent_ns = now_ns(); /* depth 1 never gets here */
}

static int read_in(struct conn *c)
{
	for (;;) {
		ssize_t r = recv(c->fd, c->ibuf + c->ilen, INBUF - c->ilen, 0);
		size_t off = 0;

		if (r == 0)
			return -1;
		if (r < 0)
			return errno == EAGAIN ? 0 : -1;
		c->ilen += (size_t)r;
		while (c->ilen - off >= 4) {
			uint32_t len;

			memcpy(&len, c->ibuf + off, 4);
			if (len > INBUF - 4)
				return -1;
			if (c->ilen - off - 4 < len)
				break;
			reply(c, c->ibuf + off + 4, len);
			off += 4 + len;
		}
		memmove(c->ibuf, c->ibuf + off, c->ilen - off);
		c->ilen -= off;
	}
}

static void arm(int ep, struct conn *c)
{
	int want = c->ooff < c->olen;
	struct epoll_event ev = {.events = EPOLLIN | (want ? EPOLLOUT : 0),
				 .data.ptr = c};

	if (want != c->out_armed) {
		epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
		c->out_armed = want;
	}
}

static struct conn *conn_new(int ep, const char *sock, uint64_t want,
			     uint64_t depth, int timed)
{
	struct conn *c = calloc(1, sizeof(*c));
	struct epoll_event ev = {.events = EPOLLIN};

	if (c == NULL || (c->fd = dial(sock)) < 0) {
		fprintf(stderr, "pipeline: cannot connect to %s\n", sock);
		exit(2);
	}
	c->want = want;
	c->depth = depth;
	c->timed = timed;
	ev.data.ptr = c;
	epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
	fill(c);
	flush_out(c);
	arm(ep, c);
	return c;
}

/* Drive every connection until @p until (ns; 0: none) or until @p last
 * (may be NULL) has all its answers, or every connection has. */
static int run(int ep, struct conn **cs, int n, uint64_t until,
	       struct conn *last)
{
	struct epoll_event ev[64];

	for (;;) {
		int done = 1;

		for (int i = 0; i < n; i++)
			done &= cs[i]->got == cs[i]->want;
		if ((last != NULL && last->got == last->want) ||
		    (last == NULL && done) || (until && now_ns() >= until))
			return 0;
		int k = epoll_wait(ep, ev, 64, 100);

		for (int i = 0; i < k; i++) {
			struct conn *c = ev[i].data.ptr;

			if (read_in(c) != 0 || flush_out(c) != 0) {
				fprintf(stderr, "pipeline: connection lost "
						"after %llu replies\n",
					(unsigned long long)c->got);
				return -1;
			}
			fill(c);
			if (flush_out(c) != 0)
				return -1;
			arm(ep, c);
		}
	}
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static void pct(uint32_t *p50, uint32_t *p99)
{
	qsort(lat, nlat, sizeof(*lat), cmp_u32);
	*p50 = nlat ? lat[nlat / 2] : 0;
	*p99 = nlat ? lat[nlat * 99 / 100] : 0;
}

static int l4(int ep, const char *sock, int n, uint64_t reqs, uint64_t depth)
{
	struct conn *cs[MAX_CONNS];
	uint64_t t0 = now_ns(), total = 0, lost = 0;
	int rc;

	for (int i = 0; i < n; i++)
		cs[i] = conn_new(ep, sock, reqs, depth, 0);
	rc = run(ep, cs, n, 0, NULL);
	double s = (double)(now_ns() - t0) / 1e9;

	for (int i = 0; i < n; i++) {
		total += cs[i]->got;
		lost += cs[i]->want - cs[i]->got;
	}
	printf("{\"row\":\"L4\",\"conns\":%d,\"requests_each\":%llu,"
	       "\"depth\":%llu,\"replies\":%llu,\"lost\":%llu,"
	       "\"bad_or_out_of_order\":%llu,\"secs\":%.2f,"
	       "\"req_per_s\":%.0f}\n",
	       n, (unsigned long long)reqs, (unsigned long long)depth,
	       (unsigned long long)total, (unsigned long long)lost,
	       (unsigned long long)bad, s, (double)total / s);
	return rc == 0 && lost == 0 && bad == 0 ? 0 : 1;
}

static int l9(int ep, const char *sock, int n, uint64_t reqs, uint64_t depth,
	      int secs)
{
	struct conn *cs[MAX_CONNS];
	uint32_t b50, b99, p50, p99;
	uint64_t t0, base_n;
	int rc;

	for (int i = 0; i < n; i++)
		cs[i] = conn_new(ep, sock, UINT64_MAX, 1, 1);
	rc = run(ep, cs, n, now_ns() + (uint64_t)secs * 1000000000ull, NULL);
	base_n = nlat;
	pct(&b50, &b99);
	nlat = 0;
	t0 = now_ns();
	cs[n] = conn_new(ep, sock, reqs, depth, 0);
	if (rc == 0)
		rc = run(ep, cs, n + 1, 0, cs[n]);
	double s = (double)(now_ns() - t0) / 1e9;

	pct(&p50, &p99);
	printf("{\"row\":\"L9\",\"conns\":%d,\"baseline\":{\"requests\":%llu,"
	       "\"p50_us\":%u,\"p99_us\":%u},\"with_pipeliner\":{\"requests\":"
	       "%llu,\"p50_us\":%u,\"p99_us\":%u},\"pipeliner\":{\"requests\":"
	       "%llu,\"depth\":%llu,\"secs\":%.2f,\"req_per_s\":%.0f},"
	       "\"bad_or_out_of_order\":%llu,\"p99_ratio\":%.2f}\n",
	       n, (unsigned long long)base_n, b50, b99,
	       (unsigned long long)nlat, p50, p99,
	       (unsigned long long)cs[n]->got, (unsigned long long)depth, s,
	       (double)cs[n]->got / s, (unsigned long long)bad,
	       b99 ? (double)p99 / b99 : 0.0);
	return rc == 0 && bad == 0 && cs[n]->got == reqs ? 0 : 1;
}

int main(int argc, char **argv)
{
	const char *sock = NULL;
	int fair = 0, conns = -1, secs = 10;
	uint64_t reqs = 0, depth = 0;
	int ep;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (strcmp(a, "--fair") == 0) {
			fair = 1;
			continue;
		}
		if (v == NULL)
			goto usage;
		i++;
		if (strcmp(a, "--sock") == 0)
			sock = v;
		else if (strcmp(a, "--key") == 0)
			key = v;
		else if (strcmp(a, "--conns") == 0)
			conns = atoi(v);
		else if (strcmp(a, "--requests") == 0)
			reqs = strtoull(v, NULL, 10);
		else if (strcmp(a, "--depth") == 0)
			depth = strtoull(v, NULL, 10);
		else if (strcmp(a, "--secs") == 0)
			secs = atoi(v);
		else
			goto usage;
	}
	if (sock == NULL || key == NULL || strlen(key) > 200)
		goto usage;
	if (conns < 0)
		conns = fair ? 63 : 64;
	if (reqs == 0)
		reqs = fair ? 1000000 : 100000;
	if (depth == 0)
		depth = fair ? 1024 : 32;
	if (conns < 1 || conns >= MAX_CONNS || secs < 1)
		goto usage;
	lat = malloc(sizeof(*lat) * MAX_LAT);
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (lat == NULL || ep < 0)
		return 2;
	return fair ? l9(ep, sock, conns, reqs, depth, secs)
		    : l4(ep, sock, conns, reqs, depth);
usage:
	fprintf(stderr, "usage: pipeline --sock SOCK --key KEY [--fair] "
			"[--conns N] [--requests N] [--depth N] [--secs S]\n");
	return 2;
}
