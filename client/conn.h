/*
 * conn.h -- libflyclient's socket I/O: connect, send one frame, receive
 * one frame (with an optional SCM_RIGHTS fd), all bounded by a deadline.
 *
 * Owns: nothing (callers own the fds and the receive state).  Thread: any;
 * an fd and its struct fly_conn_rx must not be used by two threads at
 * once (client.c serializes with a mutex).
 * Every send uses MSG_NOSIGNAL; every socket is SOCK_CLOEXEC|SOCK_NONBLOCK.
 * A receive that misses its deadline keeps what it read in its struct
 * fly_conn_rx, so a later call goes on with the same frame: a reply that
 * came late does not desynchronise the stream (issue 18, item 2).
 */
#ifndef FLY_CLIENT_CONN_H
#define FLY_CLIENT_CONN_H

#include <stddef.h>
#include <stdint.h>

/* Responses larger than this are refused (FLY_E_TOOBIG). */
#define FLY_CONN_RESP_CAP (16u * 1024u * 1024u)

/* Monotonic clock in nanoseconds (vDSO: no syscall on Linux). */
uint64_t fly__now_ns(void);

/* Connect to a Unix socket, non-blocking, close-on-exec.
 * @param[out] fd_out the connected socket; caller owns it.
 * @return 0, -EINVAL (path too long), FLY_E_DOWN (refused, missing,
 *         backlog full), -errno. */
int fly__conn_connect(const char *path, int *fd_out);

/* Send header + payload before @p deadline_ns.
 * @param[out] sent bytes of the frame (header included) written, also on
 *             failure: 0 with FLY_E_TIMEOUT means the stream is intact.
 * @return 0, FLY_E_TIMEOUT, FLY_E_DOWN (peer gone), FLY_E_TOOBIG. */
int fly__conn_send(int fd, const char *buf, size_t len,
		   uint64_t deadline_ns, size_t *sent);

/* A frame being received, kept across deadlines. */
struct fly_conn_rx {
	uint8_t hdr[4];  /* the length header (FLY_FRAME_HDR bytes) */
	size_t hdr_got;  /* bytes of hdr read */
	char *buf;       /* payload; caller-owned once complete */
	size_t len;      /* payload length (valid once hdr is complete) */
	size_t got;      /* bytes of payload read */
	int fd;          /* first fd passed with the frame, or -1 */
};

/* An empty receive state. */
void fly__conn_rx_init(struct fly_conn_rx *rx);
/* Free a partial frame and close its fd; the state is empty again. */
void fly__conn_rx_reset(struct fly_conn_rx *rx);

/* Receive one frame before @p deadline_ns, going on from what @p rx holds.
 * Any fd passed with it is stored in @p fd_out when not NULL (else
 * closed; -1 when none); a truncated control message (MSG_CTRUNC) is
 * FLY_E_PROTO.  On FLY_E_TIMEOUT @p rx keeps the partial frame for the
 * next call; on success it is empty; on any other error the stream is
 * unusable (reset @p rx and close the fd).
 * @param[out] buf caller owns result; free().  NUL-terminated.
 * @return 0, FLY_E_TIMEOUT, FLY_E_DOWN (EOF), FLY_E_TOOBIG, FLY_E_PROTO,
 *         -ENOMEM. */
int fly__conn_recv(int fd, struct fly_conn_rx *rx, uint32_t cap,
		   uint64_t deadline_ns, char **buf, size_t *len,
		   int *fd_out);

#endif /* FLY_CLIENT_CONN_H */
