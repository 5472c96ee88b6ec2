/*
 * bench_socket.c -- daemon request/response throughput and latency.
 *
 *   bench_socket SOCKET SECONDS [KEY [N,N,...]]
 *
 * For N = 1, 16, 50, 64 connections (or the list given; RELIABILITY.md
 * L3 asks for 256 and 1024 too): one client thread drives all N
 * non-blocking connections through epoll, each with one decide request in
 * flight at a time (send, wait for the framed reply, send the next) for
 * SECONDS -- the way redis-benchmark drives its connections, so the two
 * rows of the table measure the servers, not two client designs.  Total
 * requests/s and p50/p99 latency; a reply that is not "ok":true with a
 * "tuned" decision counts as an error.  Prints one line per N:
 *   clients N rps R p50_us P p99_us Q errors E
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

#define MAX_SAMPLES 4000000
#define MAX_EVENTS 64
#define RBUF 4096

struct conn {
	int fd;
	uint64_t sent_ns;
	size_t have;           /* bytes of the reply read so far */
	uint8_t buf[RBUF];
};

static int dial(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (fd < 0)
		return -1;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 &&
	    errno != EINPROGRESS) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Send the whole framed request (small: one send on a local socket). */
static int send_req(struct conn *c, const uint8_t *frame, size_t len)
{
	c->sent_ns = now_ns();
	c->have = 0;
	return send(c->fd, frame, len, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}

/* Read what is there; @return 1 when a whole reply frame arrived, 0 when
 * more is needed, -1 on error.  *ok says whether it was "ok":true. */
static int recv_reply(struct conn *c, int *ok)
{
	ssize_t n = recv(c->fd, c->buf + c->have, sizeof(c->buf) - c->have - 1,
			 0);
	uint32_t len;

	if (n <= 0)
		return n < 0 && errno == EAGAIN ? 0 : -1;
	c->have += (size_t)n;
	if (c->have < 4)
		return 0;
	len = (uint32_t)c->buf[0] | (uint32_t)c->buf[1] << 8 |
	      (uint32_t)c->buf[2] << 16 | (uint32_t)c->buf[3] << 24;
	if (len > sizeof(c->buf) - 5)
		return -1;
	if (c->have < 4 + (size_t)len)
		return 0;
	c->buf[4 + len] = '\0';
	*ok = strstr((const char *)c->buf + 4, "\"ok\":true") != NULL &&
	      strstr((const char *)c->buf + 4, "\"tuned\"") != NULL;
	return 1;
}

static void report(int nconns, double secs, uint64_t *lat, size_t n,
		   uint64_t errors)
{
	qsort(lat, n, sizeof(uint64_t), cmp_u64);
	printf("clients %d rps %.0f p50_us %.1f p99_us %.1f errors %llu\n",
	       nconns, (double)n / secs, n ? (double)lat[n / 2] / 1e3 : 0.0,
	       n ? (double)lat[(size_t)((double)(n - 1) * 0.99)] / 1e3 : 0.0,
	       (unsigned long long)errors);
}

static int run(const char *sock, const uint8_t *frame, size_t flen,
	       int nconns, double secs)
{
	struct conn *cs = calloc((size_t)nconns, sizeof(*cs));
	uint64_t *lat = malloc(sizeof(uint64_t) * MAX_SAMPLES);
	uint64_t errors = 0, end;
	size_t n = 0;
	int ep = epoll_create1(EPOLL_CLOEXEC);

	if (cs == NULL || lat == NULL || ep < 0)
		return -1;
	for (int i = 0; i < nconns; i++) {
		struct epoll_event ev = { .events = EPOLLIN, .data.u32 = i };

		cs[i].fd = dial(sock);
		if (cs[i].fd < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, cs[i].fd, &ev))
			return -1;
		if (send_req(&cs[i], frame, flen) < 0)
			errors++;
	}
	end = now_ns() + (uint64_t)(secs * 1e9);
	while (now_ns() < end) {
		struct epoll_event evs[MAX_EVENTS];
		int k = epoll_wait(ep, evs, MAX_EVENTS, 100);

		for (int e = 0; e < k; e++) {
			struct conn *c = &cs[evs[e].data.u32];
			int ok = 0, r = recv_reply(c, &ok);

			if (r == 0)
				continue;
			if (r < 0 || !ok)
				errors++;
			if (r > 0 && n < MAX_SAMPLES)
				lat[n++] = now_ns() - c->sent_ns;
			if (r < 0 || send_req(c, frame, flen) < 0)
				return -1;
		}
	}
	report(nconns, secs, lat, n, errors);
	for (int i = 0; i < nconns; i++)
		close(cs[i].fd);
	close(ep);
	free(cs);
	free(lat);
	return 0;
}

int main(int argc, char **argv)
{
	int ns[16] = { 1, 16, 50, 64 }, nn = 4;
	uint8_t frame[256];
	int len;

	if (argc < 3) {
		fprintf(stderr, "usage: bench_socket SOCKET SECONDS [KEY "
			"[N,N,...]]\n");
		return 2;
	}
	if (argc > 4) {
		char *p = argv[4];

		for (nn = 0; *p && nn < 16;) {
			ns[nn] = (int)strtol(p, &p, 10);
			if (ns[nn] < 1 || ns[nn] > 100000 || (*p && *p != ',')) {
				fprintf(stderr, "bench_socket: bad count list "
					"%s\n", argv[4]);
				return 2;
			}
			nn++;
			if (*p == ',')
				p++;
		}
	}
	len = snprintf((char *)frame + 4, sizeof(frame) - 4,
		       "{\"req\":\"decide\",\"key\":\"%s\"}",
		       argc > 3 ? argv[3] : "rmsnorm/fp32/m=8,n=64");
	if (len <= 0 || len >= (int)sizeof(frame) - 4)
		return 2;
	frame[0] = (uint8_t)len;
	frame[1] = (uint8_t)(len >> 8);
	frame[2] = frame[3] = 0;
	for (int i = 0; i < nn; i++)
		if (run(argv[1], frame, (size_t)len + 4, ns[i], atof(argv[2])))
			fprintf(stderr, "bench_socket: %d clients failed\n",
				ns[i]);
	return 0;
}
