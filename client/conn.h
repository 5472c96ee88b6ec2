/*
 * conn.h -- libflyclient's socket I/O: connect, send one frame, receive
 * one frame (with an optional SCM_RIGHTS fd), all bounded by a deadline.
 *
 * Owns: nothing (callers own the fds).  Thread: any; an fd must not be
 * used by two threads at once (client.c serializes with a mutex).
 * Every send uses MSG_NOSIGNAL; every socket is SOCK_CLOEXEC|SOCK_NONBLOCK.
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
 * @return 0, FLY_E_TIMEOUT, FLY_E_DOWN (peer gone), FLY_E_TOOBIG. */
int fly__conn_send(int fd, const char *buf, size_t len,
		   uint64_t deadline_ns);

/* Receive one frame before @p deadline_ns.  Any fd passed with it is
 * stored in @p fd_out when not NULL (else closed; -1 when none); a
 * truncated control message (MSG_CTRUNC) is FLY_E_PROTO.
 * @param[out] buf caller owns result; free().  NUL-terminated.
 * @return 0, FLY_E_TIMEOUT, FLY_E_DOWN (EOF), FLY_E_TOOBIG, FLY_E_PROTO,
 *         -ENOMEM. */
int fly__conn_recv(int fd, uint32_t cap, uint64_t deadline_ns, char **buf,
		   size_t *len, int *fd_out);

#endif /* FLY_CLIENT_CONN_H */
