/*
 * conn.c -- bounded socket I/O for libflyclient (see conn.h).
 *
 * Owns: nothing.  Thread: any (per-fd exclusive).
 * Invariant: no call here blocks past its deadline: every socket is
 * non-blocking and every wait is a poll() with the remaining time.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "fly_abi.h"
#include "fly_frame.h"
#include "conn.h"

uint64_t fly__now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int fly__conn_connect(const char *path, int *fd_out)
{
	struct sockaddr_un sa;
	size_t n = strlen(path);
	int fd, rc;

	*fd_out = -1;
	if (n == 0 || n >= sizeof(sa.sun_path))
		return -EINVAL;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, path, n);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		rc = errno;
		close(fd);
		/* A Unix socket connects at once or not at all (EAGAIN: the
		 * backlog is full); the caller retries with backoff. */
		if (rc == ENOENT || rc == ECONNREFUSED || rc == EAGAIN ||
		    rc == ENOTDIR || rc == EACCES)
			return rc == EACCES ? -EACCES : FLY_E_DOWN;
		return -rc;
	}
	*fd_out = fd;
	return 0;
}

/* Wait for @p events on @p fd until @p deadline_ns.  @return 0 ready,
 * FLY_E_TIMEOUT, -errno. */
static int wait_fd(int fd, short events, uint64_t deadline_ns)
{
	for (;;) {
		uint64_t now = fly__now_ns();
		struct pollfd p = { .fd = fd, .events = events };
		int ms, n;

		if (now >= deadline_ns)
			return FLY_E_TIMEOUT;
		/* round up so a 0.4 ms remainder still waits */
		ms = (int)((deadline_ns - now + 999999) / 1000000);
		n = poll(&p, 1, ms);
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

/* Send all of @p buf, adding what was written to *sent.
 * @return 0 or an error (see fly__conn_send). */
static int send_all(int fd, const uint8_t *buf, size_t len,
		    uint64_t deadline_ns, size_t *sent)
{
	while (len > 0) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		int rc;

		if (n > 0) {
			buf += n;
			len -= (size_t)n;
			*sent += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
			return FLY_E_DOWN; /* EPIPE, ECONNRESET, ... */
		rc = wait_fd(fd, POLLOUT, deadline_ns);
		if (rc < 0)
			return rc;
	}
	return 0;
}

int fly__conn_send(int fd, const char *buf, size_t len,
		   uint64_t deadline_ns, size_t *sent)
{
	uint8_t hdr[FLY_FRAME_HDR];
	int rc;

	*sent = 0;
	if (len == 0 || len > UINT32_MAX)
		return FLY_E_TOOBIG;
	fly_frame_put_header(hdr, (uint32_t)len);
	rc = send_all(fd, hdr, sizeof(hdr), deadline_ns, sent);
	if (rc == 0)
		rc = send_all(fd, (const uint8_t *)buf, len, deadline_ns,
			      sent);
	return rc;
}

/* Close every fd in an SCM_RIGHTS message except the first, which goes to
 * *keep (or is closed when keep is NULL or already holds one). */
static void take_fds(struct msghdr *mh, int *keep)
{
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm != NULL;
	     cm = CMSG_NXTHDR(mh, cm)) {
		size_t nfd;
		int *fds;

		if (cm->cmsg_level != SOL_SOCKET ||
		    cm->cmsg_type != SCM_RIGHTS)
			continue;
		nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		fds = (int *)CMSG_DATA(cm);
		for (size_t i = 0; i < nfd; i++) {
			int f;

			memcpy(&f, &fds[i], sizeof(f));
			if (keep != NULL && *keep < 0)
				*keep = f;
			else
				close(f);
		}
	}
}

/* Read until *got == @p len bytes are in @p buf, collecting passed fds
 * into *fd_got; progress stays in *got when the deadline passes.
 * @return 0 or an error (see fly__conn_recv). */
static int recv_all(int fd, uint8_t *buf, size_t len, size_t *got,
		    uint64_t deadline_ns, int *fd_got)
{
	while (*got < len) {
		union {
			char b[CMSG_SPACE(sizeof(int) * 4)];
			struct cmsghdr align;
		} cbuf;
		struct iovec iov = { .iov_base = buf + *got,
				     .iov_len = len - *got };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
				     .msg_control = cbuf.b,
				     .msg_controllen = sizeof(cbuf.b) };
		ssize_t n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
		int rc;

		if (n > 0) {
			take_fds(&mh, fd_got);
			if (mh.msg_flags & MSG_CTRUNC)
				return FLY_E_PROTO;
			*got += (size_t)n;
			continue;
		}
		if (n == 0)
			return FLY_E_DOWN;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return FLY_E_DOWN;
		rc = wait_fd(fd, POLLIN, deadline_ns);
		if (rc < 0)
			return rc;
	}
	return 0;
}

_Static_assert(sizeof(((struct fly_conn_rx *)0)->hdr) == FLY_FRAME_HDR,
	       "fly_conn_rx.hdr holds one frame header");

void fly__conn_rx_init(struct fly_conn_rx *rx)
{
	memset(rx, 0, sizeof(*rx));
	rx->fd = -1;
}

void fly__conn_rx_reset(struct fly_conn_rx *rx)
{
	free(rx->buf);
	if (rx->fd >= 0)
		close(rx->fd);
	fly__conn_rx_init(rx);
}

int fly__conn_recv(int fd, struct fly_conn_rx *rx, uint32_t cap,
		   uint64_t deadline_ns, char **buf, size_t *len,
		   int *fd_out)
{
	int64_t n;
	int rc;

	*buf = NULL;
	*len = 0;
	if (fd_out != NULL)
		*fd_out = -1;
	if (rx->buf == NULL) {
		rc = recv_all(fd, rx->hdr, sizeof(rx->hdr), &rx->hdr_got,
			      deadline_ns, &rx->fd);
		if (rc < 0)
			return rc;
		n = fly_frame_get_header(rx->hdr, cap);
		if (n < 0)
			return (int)n;
		rx->buf = malloc((size_t)n + 1);
		if (rx->buf == NULL)
			return -ENOMEM;
		rx->len = (size_t)n;
		rx->got = 0;
	}
	rc = recv_all(fd, (uint8_t *)rx->buf, rx->len, &rx->got, deadline_ns,
		      &rx->fd);
	if (rc < 0)
		return rc;
	rx->buf[rx->len] = '\0';
	*buf = rx->buf;
	*len = rx->len;
	if (fd_out != NULL) {
		*fd_out = rx->fd;
		rx->fd = -1;
	}
	rx->buf = NULL;
	fly__conn_rx_reset(rx);
	return 0;
}
