/*
 * crashvfs.c -- the power-cut VFS of crashvfs.h (tests only).
 *
 * Owns: one node per file name (its unsynced operations, in order) and the
 * open handles over it; the counters.  A node outlives its handles while
 * it holds unsynced operations (a file closed without a sync keeps them in
 * the page cache until the power goes), and is found again by name when the
 * file is reopened.  Thread: one at a time (no locking).
 * Invariant: a node's real file plus its operations applied in order is
 * what a reader sees; the real file alone is what survives the cut.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "crashvfs.h"

struct cv_op {
	struct cv_op *next;
	uint64_t seq;        /* global order of the operation */
	int64_t off;         /* write offset, or the truncated size */
	int len;             /* bytes written; -1: a truncate to off */
	unsigned char data[];
};

struct cv_node {
	struct cv_node *next;
	char *path;
	int nopen;           /* handles open over it */
	sqlite3_file *real;  /* one open handle's real file, or NULL */
	struct cv_op *head;
	struct cv_op **tail;
};

struct cv_file {
	sqlite3_file base;   /* pMethods = &cv_io */
	struct cv_node *node; /* NULL: a temporary file, passed through */
	sqlite3_file *real;  /* follows this struct in the same allocation */
};

static struct {
	sqlite3_vfs *real;
	struct cv_node *nodes;
	uint64_t calls, cut_at, seq, rnd;
	enum crashvfs_mode mode;
	int cut;
	uint64_t lost, kept;
} cv;

static uint64_t cv_rand(void)
{
	uint64_t z = (cv.rnd += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void ops_free(struct cv_node *n)
{
	struct cv_op *o = n->head;

	while (o != NULL) {
		struct cv_op *next = o->next;

		free(o);
		o = next;
	}
	n->head = NULL;
	n->tail = &n->head;
}

static struct cv_node *node_find(const char *path, int create)
{
	struct cv_node *n;

	for (n = cv.nodes; n != NULL; n = n->next)
		if (strcmp(n->path, path) == 0)
			return n;
	if (!create)
		return NULL;
	n = calloc(1, sizeof(*n));
	if (n == NULL)
		return NULL;
	n->path = strdup(path);
	if (n->path == NULL) {
		free(n);
		return NULL;
	}
	n->tail = &n->head;
	n->next = cv.nodes;
	cv.nodes = n;
	return n;
}

/* Free the nodes that no handle holds and that have nothing pending. */
static void nodes_gc(void)
{
	struct cv_node **pp = &cv.nodes;

	while (*pp != NULL) {
		struct cv_node *n = *pp;

		if (n->nopen == 0 && n->head == NULL) {
			*pp = n->next;
			free(n->path);
			free(n);
		} else {
			pp = &n->next;
		}
	}
}

/* Write @p len bytes at @p off to the platter: through an open handle, or
 * the file by name when none is open. */
static void platter_write(struct cv_node *n, const void *p, int len,
			  int64_t off)
{
	if (n->real != NULL) {
		n->real->pMethods->xWrite(n->real, p, len, off);
		return;
	}
	int fd = open(n->path, O_WRONLY | O_CLOEXEC);

	if (fd >= 0) {
		if (pwrite(fd, p, (size_t)len, off) != (ssize_t)len)
			cv.lost += (uint64_t)len;
		close(fd);
	}
}

static void platter_truncate(struct cv_node *n, int64_t size)
{
	if (n->real != NULL) {
		n->real->pMethods->xTruncate(n->real, size);
		return;
	}
	if (truncate(n->path, size) != 0)
		cv.lost++;
}

/* Write the bytes of @p o that lie in [lo, hi). */
static void op_write_part(struct cv_node *n, const struct cv_op *o, int64_t lo,
			  int64_t hi)
{
	if (lo < o->off)
		lo = o->off;
	if (hi > o->off + o->len)
		hi = o->off + o->len;
	if (hi <= lo)
		return;
	platter_write(n, o->data + (lo - o->off), (int)(hi - lo), lo);
	cv.kept += (uint64_t)(hi - lo);
}

/* The random mode: each sector piece of each write, and each truncate,
 * reaches the platter with probability 1/2, in order. */
static void cut_random(struct cv_node *n)
{
	for (struct cv_op *o = n->head; o != NULL; o = o->next) {
		if (o->len < 0) {
			if (cv_rand() & 1)
				platter_truncate(n, o->off);
			continue;
		}
		for (int64_t s = o->off - o->off % CRASHVFS_SECTOR;
		     s < o->off + o->len; s += CRASHVFS_SECTOR) {
			if (cv_rand() & 1)
				op_write_part(n, o, s, s + CRASHVFS_SECTOR);
		}
	}
}

/* The tear mode: of the last write of all, its first k sector pieces (k
 * from 0 to all but one) reach the platter. */
static void cut_tear(void)
{
	struct cv_node *ln = NULL;
	struct cv_op *last = NULL;

	for (struct cv_node *n = cv.nodes; n != NULL; n = n->next)
		for (struct cv_op *o = n->head; o != NULL; o = o->next)
			if (o->len > 0 && (last == NULL || o->seq > last->seq)) {
				last = o;
				ln = n;
			}
	if (last == NULL)
		return;
	int64_t first = last->off - last->off % CRASHVFS_SECTOR;
	int64_t npieces =
	    (last->off + last->len - first + CRASHVFS_SECTOR - 1) /
	    CRASHVFS_SECTOR;
	int64_t k = (int64_t)(cv_rand() % (uint64_t)npieces);

	op_write_part(ln, last, first, first + k * CRASHVFS_SECTOR);
}

static uint64_t pending_bytes(void)
{
	uint64_t b = 0;

	for (struct cv_node *n = cv.nodes; n != NULL; n = n->next)
		for (struct cv_op *o = n->head; o != NULL; o = o->next)
			b += o->len > 0 ? (uint64_t)o->len : 0;
	return b;
}

static void power_cut(void)
{
	uint64_t pending = pending_bytes(), kept0 = cv.kept;

	if (cv.mode == CRASHVFS_TEAR)
		cut_tear();
	for (struct cv_node *n = cv.nodes; n != NULL; n = n->next) {
		if (cv.mode == CRASHVFS_RANDOM)
			cut_random(n);
		ops_free(n);
	}
	cv.lost += pending - (cv.kept - kept0);
	cv.cut = 1;
	nodes_gc();
}

/* Count a mutating call; cut the power after the armed one.  Called after
 * the call took effect (in memory or on the platter). */
static void count_call(void)
{
	cv.calls++;
	if (cv.cut_at != 0 && cv.calls == cv.cut_at)
		power_cut();
}

static int sync_node(struct cv_node *n, sqlite3_file *real)
{
	for (struct cv_op *o = n->head; o != NULL; o = o->next) {
		int rc = o->len < 0
			     ? real->pMethods->xTruncate(real, o->off)
			     : real->pMethods->xWrite(real, o->data, o->len,
						      o->off);
		if (rc != SQLITE_OK)
			return rc;
	}
	ops_free(n);
	return SQLITE_OK;
}

/* ------------------------------------------------------------ io methods */

static int cv_close(sqlite3_file *f)
{
	struct cv_file *p = (struct cv_file *)f;
	int rc = p->real->pMethods != NULL ? p->real->pMethods->xClose(p->real)
					   : SQLITE_OK;

	if (p->node != NULL) {
		p->node->nopen--;
		if (p->node->real == p->real)
			p->node->real = NULL;
		/* The cut then writes this node's operations through the
		 * file's name (platter_write), even while another handle is
		 * open: only the store's one connection is modelled. */
		nodes_gc();
	}
	return rc;
}

static int cv_file_size_real(struct cv_file *p, sqlite3_int64 *size)
{
	return p->real->pMethods->xFileSize(p->real, size);
}

static int cv_read(sqlite3_file *f, void *buf, int amt, sqlite3_int64 off)
{
	struct cv_file *p = (struct cv_file *)f;
	sqlite3_int64 size;
	unsigned char *b = buf;
	int rc = p->real->pMethods->xRead(p->real, buf, amt, off);

	if (p->node == NULL || p->node->head == NULL)
		return rc;
	if (rc != SQLITE_OK && rc != SQLITE_IOERR_SHORT_READ)
		return rc;
	rc = cv_file_size_real(p, &size);
	if (rc != SQLITE_OK)
		return rc;
	for (struct cv_op *o = p->node->head; o != NULL; o = o->next) {
		if (o->len < 0) {
			if (o->off < off + amt) {
				int64_t z = o->off > off ? o->off - off : 0;

				memset(b + z, 0, (size_t)(amt - z));
			}
			size = o->off;
			continue;
		}
		int64_t lo = o->off > off ? o->off : off;
		int64_t hi = o->off + o->len < off + amt ? o->off + o->len
							  : off + amt;
		if (hi > lo)
			memcpy(b + (lo - off), o->data + (lo - o->off),
			       (size_t)(hi - lo));
		if (o->off + o->len > size)
			size = o->off + o->len;
	}
	return off + amt > size ? SQLITE_IOERR_SHORT_READ : SQLITE_OK;
}

static int cv_write(sqlite3_file *f, const void *buf, int amt,
		    sqlite3_int64 off)
{
	struct cv_file *p = (struct cv_file *)f;
	struct cv_op *o;

	if (p->node == NULL)
		return p->real->pMethods->xWrite(p->real, buf, amt, off);
	if (cv.cut)
		return SQLITE_IOERR_WRITE;
	o = malloc(sizeof(*o) + (size_t)amt);
	if (o == NULL)
		return SQLITE_IOERR_NOMEM;
	o->next = NULL;
	o->seq = ++cv.seq;
	o->off = off;
	o->len = amt;
	memcpy(o->data, buf, (size_t)amt);
	*p->node->tail = o;
	p->node->tail = &o->next;
	count_call();
	return SQLITE_OK;
}

static int cv_truncate(sqlite3_file *f, sqlite3_int64 size)
{
	struct cv_file *p = (struct cv_file *)f;
	struct cv_op *o;

	if (p->node == NULL)
		return p->real->pMethods->xTruncate(p->real, size);
	if (cv.cut)
		return SQLITE_IOERR_TRUNCATE;
	o = malloc(sizeof(*o));
	if (o == NULL)
		return SQLITE_IOERR_NOMEM;
	o->next = NULL;
	o->seq = ++cv.seq;
	o->off = size;
	o->len = -1;
	*p->node->tail = o;
	p->node->tail = &o->next;
	count_call();
	return SQLITE_OK;
}

/* The platter is the real file: a sync writes the pending operations to it
 * (no fsync of the real file: the model needs none, and it keeps a sweep
 * of thousands of cuts fast). */
static int cv_sync(sqlite3_file *f, int flags)
{
	struct cv_file *p = (struct cv_file *)f;
	int rc;

	if (p->node == NULL)
		return p->real->pMethods->xSync(p->real, flags);
	if (cv.cut)
		return SQLITE_IOERR_FSYNC;
	rc = sync_node(p->node, p->real);
	if (rc != SQLITE_OK)
		return rc;
	count_call();
	return SQLITE_OK;
}

static int cv_file_size(sqlite3_file *f, sqlite3_int64 *psize)
{
	struct cv_file *p = (struct cv_file *)f;
	sqlite3_int64 size;
	int rc = cv_file_size_real(p, &size);

	if (rc != SQLITE_OK || p->node == NULL)
		goto out;
	for (struct cv_op *o = p->node->head; o != NULL; o = o->next) {
		if (o->len < 0)
			size = o->off;
		else if (o->off + o->len > size)
			size = o->off + o->len;
	}
out:
	*psize = size;
	return rc;
}

#define REAL(f) (((struct cv_file *)(f))->real)

static int cv_lock(sqlite3_file *f, int l)
{
	return REAL(f)->pMethods->xLock(REAL(f), l);
}

static int cv_unlock(sqlite3_file *f, int l)
{
	return REAL(f)->pMethods->xUnlock(REAL(f), l);
}

static int cv_check_reserved(sqlite3_file *f, int *out)
{
	return REAL(f)->pMethods->xCheckReservedLock(REAL(f), out);
}

static int cv_file_control(sqlite3_file *f, int op, void *arg)
{
	/* A size hint or chunk size would grow the real file behind the
	 * overlay's back: not honoured (both are optional to SQLite). */
	if (op == SQLITE_FCNTL_SIZE_HINT || op == SQLITE_FCNTL_CHUNK_SIZE)
		return SQLITE_NOTFOUND;
	return REAL(f)->pMethods->xFileControl(REAL(f), op, arg);
}

static int cv_sector_size(sqlite3_file *f)
{
	(void)f;
	return CRASHVFS_SECTOR;
}

static int cv_device_characteristics(sqlite3_file *f)
{
	return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f));
}

static int cv_shm_map(sqlite3_file *f, int pg, int pgsz, int extend,
		      void volatile **pp)
{
	return REAL(f)->pMethods->xShmMap(REAL(f), pg, pgsz, extend, pp);
}

static int cv_shm_lock(sqlite3_file *f, int off, int n, int flags)
{
	return REAL(f)->pMethods->xShmLock(REAL(f), off, n, flags);
}

static void cv_shm_barrier(sqlite3_file *f)
{
	REAL(f)->pMethods->xShmBarrier(REAL(f));
}

static int cv_shm_unmap(sqlite3_file *f, int del)
{
	return REAL(f)->pMethods->xShmUnmap(REAL(f), del);
}

/* Version 2: the WAL index methods, but no xFetch (no memory-mapped page
 * reads that would bypass the overlay). */
static const sqlite3_io_methods cv_io = {
    2,		       cv_close,	 cv_read,
    cv_write,	       cv_truncate,	 cv_sync,
    cv_file_size,      cv_lock,		 cv_unlock,
    cv_check_reserved, cv_file_control,	 cv_sector_size,
    cv_device_characteristics, cv_shm_map, cv_shm_lock,
    cv_shm_barrier,    cv_shm_unmap,	 NULL,
    NULL,
};

/* ------------------------------------------------------------ the vfs */

static int cv_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f,
		   int flags, int *out_flags)
{
	struct cv_file *p = (struct cv_file *)f;
	int rc;

	(void)vfs;
	memset(p, 0, sizeof(*p));
	p->real = (sqlite3_file *)(p + 1);
	rc = cv.real->xOpen(cv.real, name, p->real, flags, out_flags);
	if (rc != SQLITE_OK) {
		/* SQLite calls xClose only when pMethods is set. */
		if (p->real->pMethods != NULL)
			p->real->pMethods->xClose(p->real);
		return rc;
	}
	if (name != NULL && !(flags & SQLITE_OPEN_DELETEONCLOSE)) {
		p->node = node_find(name, 1);
		if (p->node == NULL) {
			p->real->pMethods->xClose(p->real);
			return SQLITE_NOMEM;
		}
		p->node->nopen++;
		if (p->node->real == NULL)
			p->node->real = p->real;
	}
	p->base.pMethods = &cv_io;
	return SQLITE_OK;
}

static int cv_delete(sqlite3_vfs *vfs, const char *name, int dirsync)
{
	struct cv_node *n;
	int rc;

	(void)vfs;
	if (cv.cut)
		return SQLITE_IOERR_DELETE;
	rc = cv.real->xDelete(cv.real, name, dirsync);
	n = node_find(name, 0);
	if (n != NULL) {
		ops_free(n);
		nodes_gc();
	}
	count_call();
	return rc;
}

static int cv_access(sqlite3_vfs *vfs, const char *name, int flags, int *out)
{
	(void)vfs;
	return cv.real->xAccess(cv.real, name, flags, out);
}

static int cv_full_pathname(sqlite3_vfs *vfs, const char *name, int n,
			    char *out)
{
	(void)vfs;
	return cv.real->xFullPathname(cv.real, name, n, out);
}

static int cv_randomness(sqlite3_vfs *vfs, int n, char *out)
{
	(void)vfs;
	return cv.real->xRandomness(cv.real, n, out);
}

static int cv_sleep(sqlite3_vfs *vfs, int us)
{
	(void)vfs;
	return cv.real->xSleep(cv.real, us);
}

static int cv_current_time(sqlite3_vfs *vfs, double *t)
{
	(void)vfs;
	return cv.real->xCurrentTime(cv.real, t);
}

static int cv_last_error(sqlite3_vfs *vfs, int n, char *out)
{
	(void)vfs;
	return cv.real->xGetLastError(cv.real, n, out);
}

static int cv_current_time64(sqlite3_vfs *vfs, sqlite3_int64 *t)
{
	(void)vfs;
	return cv.real->xCurrentTimeInt64(cv.real, t);
}

static sqlite3_vfs cv_vfs = {
    .iVersion = 2,
    .zName = "crashvfs",
    .xOpen = cv_open,
    .xDelete = cv_delete,
    .xAccess = cv_access,
    .xFullPathname = cv_full_pathname,
    .xRandomness = cv_randomness,
    .xSleep = cv_sleep,
    .xCurrentTime = cv_current_time,
    .xGetLastError = cv_last_error,
    .xCurrentTimeInt64 = cv_current_time64,
};

static void cv_reset(void)
{
	for (struct cv_node *n = cv.nodes; n != NULL; n = n->next)
		ops_free(n);
	nodes_gc();
	cv.calls = 0;
	cv.cut_at = 0;
	cv.cut = 0;
	cv.lost = 0;
	cv.kept = 0;
}

int crashvfs_install(void)
{
	if (cv.real == NULL) {
		cv.real = sqlite3_vfs_find("unix");
		if (cv.real == NULL)
			return -1;
		cv_vfs.szOsFile = (int)sizeof(struct cv_file) + cv.real->szOsFile;
		cv_vfs.mxPathname = cv.real->mxPathname;
		if (sqlite3_vfs_register(&cv_vfs, 1) != SQLITE_OK)
			return -1;
	}
	cv_reset();
	return 0;
}

void crashvfs_arm(uint64_t n, enum crashvfs_mode mode, uint64_t seed)
{
	cv.calls = 0;
	cv.cut = 0;
	cv.lost = 0;
	cv.kept = 0;
	cv.cut_at = n;
	cv.mode = mode;
	cv.rnd = seed;
}

uint64_t crashvfs_calls(void)
{
	return cv.calls;
}

int crashvfs_is_cut(void)
{
	return cv.cut;
}

uint64_t crashvfs_lost_bytes(void)
{
	return cv.lost;
}

uint64_t crashvfs_kept_bytes(void)
{
	return cv.kept;
}

void crashvfs_restore(void)
{
	cv_reset();
}
