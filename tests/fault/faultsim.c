/*
 * faultsim.c -- an LD_PRELOAD shim that makes the Nth call fail (issue 21
 * item 1, RELIABILITY.md F6/F7), as SQLite's test_malloc.c and
 * test_syscall.c do, but from outside the process so that SQLite, libuv
 * and cJSON fail too, not only the daemon's own calls.
 *
 * Environment:
 *   FLY_FAULT_N=N          the Nth counted call fails (1-based; 0 or unset:
 *                          count only)
 *   FLY_FAULT_CLASS=alloc|io|all   which calls count: malloc, calloc,
 *                          realloc (ENOMEM); open, openat (and their 64
 *                          names: EIO), read, pread, write, pwrite,
 *                          writev, fsync, fdatasync (EIO on a regular
 *                          file, ECONNRESET on a socket), sendmsg, recvmsg
 *                          (ECONNRESET), mmap, memfd_create (ENOMEM).
 *                          Calls on pipes, eventfds and ttys are not
 *                          counted: a pipe to oneself does not fail with
 *                          an I/O error (libuv aborts if its own signal
 *                          pipe does, by design), nor does stderr
 *   FLY_FAULT_PERSIST=1    every counted call from the Nth on fails
 *
 * Counting starts at the process's first getopt_long() call (flytuned's
 * main parses its options first: the dynamic loader and libc start-up are
 * not counted) and never in a process whose command line has --worker
 * (the benchmark worker).  Each injected failure writes one line
 * "faultsim: injected N call=NAME" to stderr (the daemon's log); at exit
 * "faultsim: calls=C" says how many calls were counted.
 *
 * Not counted either: allocations inside getgrnam/getpwnam/getgrgid/
 * getpwuid.  glibc 2.36's NSS dereferences NULL when its own allocation
 * fails (nss_database_check_reload_and_get, local=NULL: a SIGSEGV in
 * libc, seen at alloc N=18 in getgrnam of admin_group), which no caller
 * can handle.
 *
 * Test-only code (STYLE.md R17): built as build/faultsim/libfaultsim.so by
 * `make faultsim`, never linked into a binary.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);

enum { C_ALLOC = 1, C_IO = 2 };

static int armed;         /* counting started */
static int classes;       /* which classes count */
static long target;       /* FLY_FAULT_N */
static int persist;       /* FLY_FAULT_PERSIST */
static long calls;        /* counted calls so far */
static __thread int busy; /* inside the shim: nothing counts */

static void say(const char *s)
{
	(void)syscall(SYS_write, 2, s, strlen(s));
}

static void report(void)
{
	char line[64];

	busy = 1;
	snprintf(line, sizeof(line), "faultsim: calls=%ld\n", calls);
	say(line);
}

static int is_worker(void)
{
	char buf[4096];
	long fd = syscall(SYS_openat, AT_FDCWD, "/proc/self/cmdline",
			  O_RDONLY | O_CLOEXEC);
	long n = fd < 0 ? 0 : syscall(SYS_read, fd, buf, sizeof(buf));

	if (fd >= 0)
		(void)syscall(SYS_close, fd);
	for (long i = 0; i + 8 <= n; i++)
		if (memcmp(buf + i, "--worker", 8) == 0)
			return 1;
	return 0;
}

static void arm(void)
{
	const char *n = getenv("FLY_FAULT_N");
	const char *c = getenv("FLY_FAULT_CLASS");
	const char *p = getenv("FLY_FAULT_PERSIST");

	if (armed || is_worker())
		return;
	target = n != NULL ? atol(n) : 0;
	persist = p != NULL && *p == '1';
	classes = c == NULL || strcmp(c, "all") == 0 ? C_ALLOC | C_IO
		  : strcmp(c, "alloc") == 0	     ? C_ALLOC
						     : C_IO;
	armed = 1;
	atexit(report);
}

/* Whether this call fails (and counts it). */
static int fail_now(int class, const char *name)
{
	char line[96];
	long k;

	if (!armed || busy || !(classes & class))
		return 0;
	k = ++calls;
	if (target <= 0 || (k != target && !(persist && k > target)))
		return 0;
	busy = 1;
	snprintf(line, sizeof(line), "faultsim: injected %ld call=%s\n", k,
		 name);
	say(line);
	busy = 0;
	return 1;
}

/* The next definition of @p name (dlsym may allocate: not counted). */
#define REAL(ret, name, ...)                                                   \
	static ret (*real_##name)(__VA_ARGS__);                                \
	if (real_##name == NULL) {                                             \
		busy++;                                                        \
		real_##name = (ret (*)(__VA_ARGS__))dlsym(RTLD_NEXT, #name);   \
		busy--;                                                        \
	}

int getopt_long(int argc, char *const argv[], const char *opts,
		const struct option *lo, int *li)
{
	REAL(int, getopt_long, int, char *const *, const char *,
	     const struct option *, int *);
	arm();
	return real_getopt_long(argc, argv, opts, lo, li);
}

/* ---------------------------------------------------------------- nss */

#define NSS_CALL(ret, name, T, arg)                                            \
	ret name(T arg)                                                        \
	{                                                                      \
		ret r;                                                         \
		REAL(ret, name, T);                                            \
		busy++;                                                        \
		r = real_##name(arg);                                          \
		busy--;                                                        \
		return r;                                                      \
	}

NSS_CALL(struct group *, getgrnam, const char *, name)
NSS_CALL(struct passwd *, getpwnam, const char *, name)
NSS_CALL(struct group *, getgrgid, gid_t, gid)
NSS_CALL(struct passwd *, getpwuid, uid_t, uid)

/* ---------------------------------------------------------------- alloc */

void *malloc(size_t n)
{
	if (fail_now(C_ALLOC, "malloc")) {
		errno = ENOMEM;
		return NULL;
	}
	return __libc_malloc(n);
}

void *calloc(size_t a, size_t b)
{
	if (fail_now(C_ALLOC, "calloc")) {
		errno = ENOMEM;
		return NULL;
	}
	return __libc_calloc(a, b);
}

void *realloc(void *p, size_t n)
{
	if (fail_now(C_ALLOC, "realloc")) {
		errno = ENOMEM;
		return NULL;
	}
	return __libc_realloc(p, n);
}

/* ---------------------------------------------------------------- io */

#define OPEN_LIKE(name, ...)                                                   \
	{                                                                      \
		mode_t mode = 0;                                               \
		if (flags & (O_CREAT | O_TMPFILE)) {                           \
			va_list ap;                                            \
			va_start(ap, flags);                                   \
			mode = (mode_t)va_arg(ap, int);                        \
			va_end(ap);                                            \
		}                                                              \
		if (fail_now(C_IO, #name)) {                                   \
			errno = EIO;                                           \
			return -1;                                             \
		}                                                              \
		return real_##name(__VA_ARGS__, flags, mode);                  \
	}

int open(const char *path, int flags, ...)
{
	REAL(int, open, const char *, int, ...);
	OPEN_LIKE(open, path)
}

int open64(const char *path, int flags, ...)
{
	REAL(int, open64, const char *, int, ...);
	OPEN_LIKE(open64, path)
}

int openat(int dir, const char *path, int flags, ...)
{
	REAL(int, openat, int, const char *, int, ...);
	OPEN_LIKE(openat, dir, path)
}

int openat64(int dir, const char *path, int flags, ...)
{
	REAL(int, openat64, int, const char *, int, ...);
	OPEN_LIKE(openat64, dir, path)
}

/* The errno a failing call on @p fd gets, 0 when calls on it are not
 * counted (pipes, eventfds, ttys). */
static int fd_errno(int fd)
{
	struct stat sb;

	if (!armed || busy || syscall(SYS_fstat, fd, &sb) != 0)
		return 0;
	if (S_ISREG(sb.st_mode))
		return EIO;
	if (S_ISSOCK(sb.st_mode))
		return ECONNRESET;
	return 0;
}

#define IO_CALL(ret, name, call, ...)                                          \
	ret name(__VA_ARGS__)                                                  \
	{                                                                      \
		int e = fd_errno(fd);                                          \
		REAL_##name;                                                   \
		if (e != 0 && fail_now(C_IO, #name)) {                         \
			errno = e;                                             \
			return -1;                                             \
		}                                                              \
		return call;                                                   \
	}

#define REAL_read REAL(ssize_t, read, int, void *, size_t)
IO_CALL(ssize_t, read, real_read(fd, b, n), int fd, void *b, size_t n)
#define REAL_pread REAL(ssize_t, pread, int, void *, size_t, off_t)
IO_CALL(ssize_t, pread, real_pread(fd, b, n, o), int fd, void *b, size_t n,
	off_t o)
#define REAL_pread64 REAL(ssize_t, pread64, int, void *, size_t, off64_t)
IO_CALL(ssize_t, pread64, real_pread64(fd, b, n, o), int fd, void *b,
	size_t n, off64_t o)
#define REAL_write REAL(ssize_t, write, int, const void *, size_t)
IO_CALL(ssize_t, write, real_write(fd, b, n), int fd, const void *b, size_t n)
#define REAL_pwrite REAL(ssize_t, pwrite, int, const void *, size_t, off_t)
IO_CALL(ssize_t, pwrite, real_pwrite(fd, b, n, o), int fd, const void *b,
	size_t n, off_t o)
#define REAL_pwrite64                                                          \
	REAL(ssize_t, pwrite64, int, const void *, size_t, off64_t)
IO_CALL(ssize_t, pwrite64, real_pwrite64(fd, b, n, o), int fd, const void *b,
	size_t n, off64_t o)
#define REAL_writev REAL(ssize_t, writev, int, const struct iovec *, int)
IO_CALL(ssize_t, writev, real_writev(fd, v, n), int fd,
	const struct iovec *v, int n)
#define REAL_fsync REAL(int, fsync, int)
IO_CALL(int, fsync, real_fsync(fd), int fd)
#define REAL_fdatasync REAL(int, fdatasync, int)
IO_CALL(int, fdatasync, real_fdatasync(fd), int fd)
#define REAL_sendmsg REAL(ssize_t, sendmsg, int, const struct msghdr *, int)
IO_CALL(ssize_t, sendmsg, real_sendmsg(fd, m, f), int fd,
	const struct msghdr *m, int f)
#define REAL_recvmsg REAL(ssize_t, recvmsg, int, struct msghdr *, int)
IO_CALL(ssize_t, recvmsg, real_recvmsg(fd, m, f), int fd, struct msghdr *m,
	int f)
int memfd_create(const char *nm, unsigned int fl)
{
	REAL(int, memfd_create, const char *, unsigned int);
	if (fail_now(C_IO, "memfd_create")) {
		errno = ENOMEM;
		return -1;
	}
	return real_memfd_create(nm, fl);
}

void *mmap(void *a, size_t n, int prot, int flags, int fd, off_t off)
{
	REAL(void *, mmap, void *, size_t, int, int, int, off_t);
	if (fail_now(C_IO, "mmap")) {
		errno = ENOMEM;
		return MAP_FAILED;
	}
	return real_mmap(a, n, prot, flags, fd, off);
}
