/*
 * test_client_shm.c -- the client side of the shm table treats every byte
 * as untrusted: tables built with proto's writer and then damaged through
 * the writer's own writable mapping (made before sealing), plain files,
 * unsealed and empty memfds, headers lying about capacity and size, torn
 * and corrupt slots: refused or reported, never a crash.  And through a
 * fake daemon on a Unix socket: a refused table makes libflyclient count
 * shm_refused and answer from the socket; a hello carrying too many fds
 * (MSG_CTRUNC) is refused without leaking any of them.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "flyclient.h"
#include "fly_key.h"
#include "fly_shm.h"

static const char *k1 = "gemm/bf16/NT/m=64,n=64,k=64";

static struct fly_shm_writer *writer_with_key(void)
{
	struct fly_shm_writer *w;
	struct fly_decision d;

	assert_int_equal(fly__shm_writer_open(64, &w), 0);
	memset(&d, 0, sizeof(d));
	d.status = FLY_STATUS_TUNED;
	strcpy(d.variant, "tiled");
	d.nparams = 2;
	d.params[0] = 64;
	d.params[1] = 8;
	d.median_us = 12.5;
	assert_int_equal(fly__shm_put(w, k1, strlen(k1), &d), 0);
	return w;
}

static int open_dup(struct fly_shm_writer *w, struct fly_shm_reader **r)
{
	return fly__shm_reader_open(dup(fly__shm_writer_fd(w)), r);
}

static void test_good_table(void **state)
{
	struct fly_shm_writer *w = writer_with_key();
	struct fly_shm_reader *r;
	struct fly_decision d;

	(void)state;
	assert_int_equal(open_dup(w, &r), 0);
	assert_int_equal(fly_shm_lookup(r, k1, strlen(k1), &d), 0);
	assert_int_equal(d.status, FLY_STATUS_TUNED);
	assert_string_equal(d.variant, "tiled");
	assert_int_equal(d.nparams, 2);
	assert_int_equal(d.params[1], 8);
	assert_int_equal(fly_shm_lookup(r, "rmsnorm/fp16/m=1,n=1", 20, &d),
			 FLY_E_NOTFOUND);
	fly__shm_reader_close(r);
	fly__shm_writer_close(w);
}

/* Copy the writer's table into @p fd (a file or an unsealed memfd). */
static void copy_table(struct fly_shm_writer *w, int fd)
{
	size_t n = fly__shm_writer_size(w);

	assert_int_equal(write(fd, fly__shm_writer_mem(w), n), (ssize_t)n);
}

static void test_plain_file_refused(void **state)
{
	struct fly_shm_writer *w = writer_with_key();
	struct fly_shm_reader *r = NULL;
	char path[] = "/tmp/fly-shm-XXXXXX";
	int fd = mkstemp(path);

	(void)state;
	assert_true(fd >= 0);
	unlink(path);
	copy_table(w, fd);
	assert_int_equal(fly__shm_reader_open(fd, &r), FLY_E_SHM);
	assert_null(r);
	fly__shm_writer_close(w);
}

static void test_unsealed_memfd_refused(void **state)
{
	struct fly_shm_writer *w = writer_with_key();
	struct fly_shm_reader *r = NULL;
	int fd = memfd_create("fly-unsealed", MFD_CLOEXEC);

	(void)state;
	assert_true(fd >= 0);
	copy_table(w, fd);
	assert_int_equal(fly__shm_reader_open(fd, &r), FLY_E_SHM);
	/* size seals alone are not enough either (writes still allowed) */
	fd = memfd_create("fly-size-sealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	copy_table(w, fd);
	assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW),
			 0);
	assert_int_equal(fly__shm_reader_open(fd, &r), FLY_E_SHM);
	assert_null(r);
	fly__shm_writer_close(w);
}

static void test_empty_memfd_refused(void **state)
{
	struct fly_shm_reader *r = NULL;
	int fd = memfd_create("fly-empty", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	(void)state;
	assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW |
					       F_SEAL_WRITE), 0);
	assert_int_equal(fly__shm_reader_open(fd, &r), FLY_E_SHM);
	assert_null(r);
	assert_int_equal(fly__shm_reader_open(-1, &r), -EBADF);
}

/* Overwrite a u32/u64 header field, optionally re-signing the header so
 * the field check itself is what refuses it. */
static void poke_header(struct fly_shm_writer *w, size_t off, uint64_t v,
			size_t width, int resign)
{
	uint8_t *m = fly__shm_writer_mem(w);
	uint32_t sum;

	memcpy(m + off, &v, width); /* little-endian host */
	if (resign) {
		sum = fly__shm_header_sum(m);
		memcpy(m + 48, &sum, 4);
	}
}

static void test_lying_header_refused(void **state)
{
	static const struct {
		size_t off, width;
		uint64_t v;
		int resign;
		int want;
	} cases[] = {
		{ 0, 8, 0x4141414141414141ull, 1, FLY_E_SHM }, /* magic */
		{ 8, 4, 99, 1, FLY_E_VERSION },     /* layout version */
		{ 12, 4, 128, 1, FLY_E_SHM },       /* header size */
		{ 16, 4, 64, 1, FLY_E_SHM },        /* slot size */
		{ 20, 4, 1u << 20, 1, FLY_E_SHM },  /* capacity > file */
		{ 20, 4, 48, 1, FLY_E_SHM },        /* not a power of two */
		{ 20, 4, 0, 1, FLY_E_SHM },         /* zero capacity */
		{ 24, 8, 1ull << 39, 1, FLY_E_SHM },/* total size lies */
		{ 20, 4, 32, 0, FLY_E_SHM },        /* checksum now wrong */
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct fly_shm_writer *w = writer_with_key();
		struct fly_shm_reader *r = NULL;

		poke_header(w, cases[i].off, cases[i].v, cases[i].width,
			    cases[i].resign);
		assert_int_equal(open_dup(w, &r), cases[i].want);
		assert_null(r);
		fly__shm_writer_close(w);
	}
}

static void test_huge_max_probe_is_bounded(void **state)
{
	struct fly_shm_writer *w = writer_with_key();
	struct fly_shm_reader *r;
	struct fly_decision d;
	char key[64];

	(void)state;
	/* fill every slot, then claim an unbounded probe: a miss must still
	 * end (after at most FLY_SHM_MAX_PROBE slots) */
	for (int i = 0; i < 200; i++) {
		memset(&d, 0, sizeof(d));
		strcpy(d.variant, "v");
		snprintf(key, sizeof(key), "rmsnorm/fp32/m=%d,n=64", i + 1);
		fly__shm_put(w, key, strlen(key), &d);
	}
	poke_header(w, 44, 0xffffffffu, 4, 1);
	assert_int_equal(open_dup(w, &r), 0);
	assert_int_equal(fly_shm_lookup(r, "topk/fp32/m=1,n=8,k=1", 21, &d),
			 FLY_E_NOTFOUND);
	assert_int_equal(fly_shm_lookup(r, k1, strlen(k1), &d), 0);
	fly__shm_reader_close(r);
	fly__shm_writer_close(w);
}

/* Byte offset of the slot holding k1 (found by scanning the records its
 * slots reference for its key); *rec: its record's offset. */
static size_t slot_of_k1(struct fly_shm_writer *w, size_t *rec)
{
	uint8_t *m = fly__shm_writer_mem(w);
	uint32_t cap = fly__shm_writer_capacity(w);
	size_t arena = FLY_SHM_HEADER_SIZE + (size_t)cap * FLY_SHM_SLOT_SIZE;

	for (uint32_t i = 0; i < cap; i++) {
		size_t off = FLY_SHM_HEADER_SIZE + (size_t)i * FLY_SHM_SLOT_SIZE;
		uint64_t ref;
		size_t r;

		memcpy(&ref, m + off, 8);
		ref &= FLY_SHM_REF_MASK;
		if (ref == 0)
			continue;
		r = arena + ((size_t)ref - 1) * 16;
		/* the key follows word 0, the median and the params */
		if (m[r] == strlen(k1) &&
		    memcmp(m + r + 16 + 8 * m[r + 2], k1, strlen(k1)) == 0) {
			*rec = r;
			return off;
		}
	}
	fail_msg("k1 not in the table");
	return 0;
}

static void test_corrupt_and_torn_slots(void **state)
{
	struct fly_shm_writer *w = writer_with_key();
	struct fly_shm_reader *r;
	struct fly_decision d;
	uint8_t *m = fly__shm_writer_mem(w);
	size_t rec, off = slot_of_k1(w, &rec);
	size_t var = rec + 16 + 8 * m[rec + 2] + strlen(k1);
	uint64_t word;

	(void)state;
	assert_int_equal(open_dup(w, &r), 0);
	/* corrupt: a variant byte changes, the record checksum no longer
	 * matches */
	m[var] ^= 0x55;
	assert_int_equal(fly_shm_lookup(r, k1, strlen(k1), &d), FLY_E_SHM);
	m[var] ^= 0x55;
	assert_int_equal(fly_shm_lookup(r, k1, strlen(k1), &d), 0);
	/* hostile: key length and nparams out of range */
	m[rec] = 0xff;
	m[rec + 2] = 200;
	assert_int_equal(fly_shm_lookup(r, k1, strlen(k1), &d), FLY_E_SHM);
	fly__shm_reader_close(r);
	fly__shm_writer_close(w);

	/* hostile: the slot's record reference (layout 6: the word's low
	 * bits) past the arena -- refused, nothing read outside it */
	w = writer_with_key();
	m = fly__shm_writer_mem(w);
	off = slot_of_k1(w, &rec);
	assert_int_equal(open_dup(w, &r), 0);
	memcpy(&word, m + off, 8);
	word |= FLY_SHM_REF_MASK;
	memcpy(m + off, &word, 8);
	assert_int_equal(fly_shm_lookup(r, k1, strlen(k1), &d), FLY_E_SHM);
	fly__shm_reader_close(r);
	fly__shm_writer_close(w);
}

/* ------------------------------------------------ a fake daemon */

struct fake {
	char dir[64];
	char sock[128];
	int lfd;
	int hello_fds;   /* how many fds to pass with hello */
	int sealed;      /* pass the real (sealed) table instead */
	struct fly_shm_writer *w;
	pthread_t th;
	int hangup;      /* close every connection at once */
	int garbage;     /* decide replies: 0 good, else a hostile kind */
	int accepts;     /* connections accepted */
	int decides;     /* decide requests answered */
	char last_decide[256]; /* the last decide request's text */
};

static int read_full(int fd, void *buf, size_t n)
{
	for (size_t got = 0; got < n;) {
		ssize_t r = read(fd, (char *)buf + got, n - got);

		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	return 0;
}

/* Send one frame with @p nfd copies of @p fd attached. */
static void send_frame(int s, const char *json, int fd, int nfd)
{
	union {
		char b[CMSG_SPACE(sizeof(int) * 16)];
		struct cmsghdr a;
	} cb;
	uint32_t len = (uint32_t)strlen(json);
	uint8_t hdr[4] = { len & 0xff, (len >> 8) & 0xff, (len >> 16) & 0xff,
			   len >> 24 };
	struct iovec iov = { .iov_base = hdr, .iov_len = 4 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	int fds[16];

	if (nfd > 0) {
		struct cmsghdr *cm;

		memset(&cb, 0, sizeof(cb));
		for (int i = 0; i < nfd; i++)
			fds[i] = fd;
		mh.msg_control = cb.b;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfd);
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfd);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfd);
	}
	if (sendmsg(s, &mh, MSG_NOSIGNAL) != 4 ||
	    send(s, json, len, MSG_NOSIGNAL) != (ssize_t)len)
		return;
}

/* Hostile decide replies, by kind. */
static void send_garbage(int s, int kind, const char *req)
{
	static const uint8_t huge[4] = { 0xff, 0xff, 0xff, 0x7f };
	static const uint8_t zero[4] = { 0, 0, 0, 0 };
	char long_variant[400];

	(void)req;
	switch (kind) {
	case 1:
		send_frame(s, "{\"ok\":true,\"decision\":{", -1, 0);
		break;
	case 2: /* 2 GiB announced: over the 16 MiB cap */
		send(s, huge, 4, MSG_NOSIGNAL);
		break;
	case 3:
		send(s, zero, 4, MSG_NOSIGNAL);
		break;
	case 4: /* an answer to some other request */
		send_frame(s, "{\"ok\":true,\"id\":999999,\"decision\":"
			   "{\"status\":\"tuned\",\"provisional\":false,"
			   "\"variant\":\"evil\",\"params\":[],"
			   "\"median_us\":1}}", -1, 0);
		break;
	case 5:
		snprintf(long_variant, sizeof(long_variant),
			 "{\"ok\":true,\"decision\":{\"status\":\"tuned\","
			 "\"provisional\":false,\"variant\":\"%0200d\","
			 "\"params\":[],\"median_us\":1}}", 7);
		send_frame(s, long_variant, -1, 0);
		break;
	case 6: /* duplicate keys, trailing bytes */
		send_frame(s, "{\"ok\":true,\"ok\":true} x", -1, 0);
		break;
	default: /* half a frame, then silence until the client gives up */
		send(s, zero, 2, MSG_NOSIGNAL);
		break;
	}
}

/* Serve connections: hello (with the configured fds), then decide
 * answers "pending/fake". */
static void *fake_main(void *arg)
{
	struct fake *f = arg;
	int s;

	while ((s = accept(f->lfd, NULL, NULL)) >= 0) {
		uint8_t hdr[4];
		char buf[4096];

		__atomic_add_fetch(&f->accepts, 1, __ATOMIC_RELAXED);
		if (f->hangup) {
			close(s);
			continue;
		}
		while (read_full(s, hdr, 4) == 0) {
			uint32_t n = hdr[0] | hdr[1] << 8 | hdr[2] << 16 |
				     (uint32_t)hdr[3] << 24;

			if (n >= sizeof(buf) || read_full(s, buf, n) < 0)
				break;
			buf[n] = '\0';
			if (strstr(buf, "\"hello\"")) {
				int mfd = f->sealed ?
					fly__shm_writer_fd(f->w) :
					memfd_create("fake", MFD_CLOEXEC);
				if (!f->sealed)
					copy_table(f->w, mfd);
				send_frame(s, "{\"ok\":true,\"version\":1}", mfd,
					   f->hello_fds);
				if (!f->sealed)
					close(mfd);
			} else if (f->garbage) {
				send_garbage(s, f->garbage, buf);
			} else {
				if (strstr(buf, "\"decide\"") != NULL) {
					snprintf(f->last_decide,
						 sizeof(f->last_decide), "%.255s",
						 buf);
					__atomic_add_fetch(&f->decides, 1,
							   __ATOMIC_RELEASE);
				}
				send_frame(s, "{\"ok\":true,\"key\":\"k\","
					   "\"decision\":{\"status\":\"pending\","
					   "\"provisional\":false,\"variant\":"
					   "\"fake\",\"params\":[1],"
					   "\"median_us\":0}}", -1, 0);
			}
		}
		close(s);
	}
	return NULL;
}

static void fake_start(struct fake *f, int hello_fds, int sealed)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int hangup = f->hangup, garbage = f->garbage; /* set by the caller */

	memset(f, 0, sizeof(*f));
	f->hangup = hangup;
	f->garbage = garbage;
	strcpy(f->dir, "/tmp/fly-fake-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->sock, sizeof(f->sock), "%s/s.sock", f->dir);
	strcpy(sa.sun_path, f->sock);
	f->hello_fds = hello_fds;
	f->sealed = sealed;
	f->w = writer_with_key();
	f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(f->lfd, 8), 0);
	assert_int_equal(pthread_create(&f->th, NULL, fake_main, f), 0);
}

static void fake_stop(struct fake *f)
{
	shutdown(f->lfd, SHUT_RDWR);
	pthread_join(f->th, NULL);
	close(f->lfd);
	unlink(f->sock);
	rmdir(f->dir);
	fly__shm_writer_close(f->w);
}

static int fd_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	while ((e = readdir(d)) != NULL)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

static struct fly_problem problem_k1(void)
{
	struct fly_problem p;

	assert_int_equal(fly_problem_from_key(k1, &p), 0);
	return p;
}

static void test_client_refused_table_uses_socket(void **state)
{
	struct fly_client_opts o = { .timeout_ms = 2000 };
	struct fly_client_stats st;
	struct fly_problem p = problem_k1();
	struct fly_decision d;
	struct fake f = { 0 };
	fly_client *c;

	(void)state;
	fake_start(&f, 1, 0);
	o.socket_path = f.sock;
	assert_int_equal(fly_client_open_opts(&o, &c), 0);
	assert_int_equal(fly_decide(c, &p, &d), 0);
	fly_client_stats_get(c, &st);
	assert_int_equal(st.shm_refused, 1);
	assert_int_equal(st.shm_hits, 0);
	/* the table was refused, so the answer is the socket's */
	assert_int_equal(d.status, FLY_STATUS_PENDING);
	assert_string_equal(d.variant, "fake");
	fly_client_close(c);
	fake_stop(&f);
}

/* A sealed table serves: the first call connects (the socket's answer)
 * and maps it, the second hits it (or the cache it filled).  @p prefault
 * "0": with FLYTUNED_SHM_PREFAULT=0 at open, the table mapped without its
 * pre-fault (issue 19); NULL: the default. */
static void sealed_table_hits(const char *prefault)
{
	struct fly_client_opts o = { .timeout_ms = 2000 };
	struct fly_client_stats st;
	struct fly_problem p = problem_k1();
	struct fly_decision d;
	struct fake f = { 0 };
	fly_client *c;

	fake_start(&f, 1, 1);
	o.socket_path = f.sock;
	if (prefault != NULL)
		setenv("FLYTUNED_SHM_PREFAULT", prefault, 1);
	assert_int_equal(fly_client_open_opts(&o, &c), 0);
	unsetenv("FLYTUNED_SHM_PREFAULT");
	assert_int_equal(fly_decide(c, &p, &d), 0);
	assert_int_equal(fly_decide(c, &p, &d), 0);
	fly_client_stats_get(c, &st);
	assert_int_equal(st.shm_refused, 0);
	assert_true(st.shm_hits + st.cache_hits >= 1);
	assert_int_equal(d.status, FLY_STATUS_TUNED);
	assert_string_equal(d.variant, "tiled");
	fly_client_close(c);
	fake_stop(&f);
}

static void test_client_sealed_table_hits(void **state)
{
	(void)state;
	sealed_table_hits(NULL);
}

/* FLYTUNED_SHM_PREFAULT=0 (issue 19): the table is mapped without its
 * pre-fault and serves as with it. */
static void test_client_prefault_off_hits(void **state)
{
	(void)state;
	sealed_table_hits("0");
}

static int fake_decides(struct fake *f)
{
	return __atomic_load_n(&f->decides, __ATOMIC_ACQUIRE);
}

/* Issue 22, against the fake daemon (its sealed table holds k1, the
 * bucket m=64): a shape off its bucket (m=50) is answered by the bucket
 * at once and counts its answers; the answer that reaches
 * FLYTUNED_EXACT_AFTER sends one decide of its exact key (never before,
 * never again while it is not tuned); once the table holds the exact row
 * (and its generation moved) the shape is answered by it, d.exact 1.
 * A shape on its bucket's representative and FLYTUNED_EXACT_AFTER=0
 * never ask. */
static void test_issue_22_client_counts_then_asks_once(void **state)
{
	static const char *xk = "gemm/bf16/NT/m=50,n=64,k=64/exact";
	struct fly_client_opts o = { .timeout_ms = 2000 };
	struct fly_problem p = problem_k1(), on = problem_k1();
	struct fly_decision d, xd;
	struct fake f = { 0 };
	fly_client *c;
	int base;

	(void)state;
	fake_start(&f, 1, 1);
	o.socket_path = f.sock;
	p.dims[0] = 50;
	setenv("FLYTUNED_EXACT_AFTER", "5", 1);
	assert_int_equal(fly_client_open_opts(&o, &c), 0);
	unsetenv("FLYTUNED_EXACT_AFTER");
	/* the first call connects and maps the table: the bucket's row */
	assert_int_equal(fly_decide(c, &p, &d), 0);
	assert_int_equal(d.status, FLY_STATUS_TUNED);
	assert_string_equal(d.variant, "tiled");
	assert_int_equal(d.exact, 0);
	base = fake_decides(&f);
	/* answers 1..4 from the process cache: counted, nothing sent */
	for (int i = 0; i < 4; i++) {
		assert_int_equal(fly_decide(c, &p, &d), 0);
		assert_int_equal(d.exact, 0);
		assert_string_equal(d.variant, "tiled");
	}
	assert_int_equal(fake_decides(&f), base);
	/* the 5th asks for the exact key, once; its answer is the bucket's
	 * (the fake daemon says pending) */
	assert_int_equal(fly_decide(c, &p, &d), 0);
	assert_int_equal(fake_decides(&f), base + 1);
	assert_non_null(strstr(f.last_decide, xk));
	assert_int_equal(d.status, FLY_STATUS_TUNED);
	assert_string_equal(d.variant, "tiled");
	assert_int_equal(d.exact, 0);
	for (int i = 0; i < 200; i++) {
		assert_int_equal(fly_decide(c, &p, &d), 0);
		assert_int_equal(d.exact, 0);
	}
	assert_int_equal(fake_decides(&f), base + 1); /* not re-sent */
	/* on the bucket's representative: never counted, never asked */
	for (int i = 0; i < 50; i++)
		assert_int_equal(fly_decide(c, &on, &d), 0);
	assert_int_equal(fake_decides(&f), base + 1);

	/* the daemon publishes the exact row (and moves the generation) */
	memset(&xd, 0, sizeof(xd));
	xd.status = FLY_STATUS_TUNED;
	strcpy(xd.variant, "exactv");
	xd.nparams = 1;
	xd.params[0] = 50;
	xd.median_us = 3.0;
	assert_int_equal(fly__shm_put(f.w, xk, strlen(xk), &xd), 0);
	(void)fly__shm_bump(f.w);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(fly_decide(c, &p, &d), 0);
		assert_int_equal(d.status, FLY_STATUS_TUNED);
		assert_string_equal(d.variant, "exactv");
		assert_int_equal(d.params[0], 50);
		assert_int_equal(d.exact, 1);
	}
	/* its bucket neighbour on the representative still has the bucket */
	assert_int_equal(fly_decide(c, &on, &d), 0);
	assert_string_equal(d.variant, "tiled");
	assert_int_equal(d.exact, 0);
	assert_int_equal(fake_decides(&f), base + 1);
	fly_client_close(c);

	/* FLYTUNED_EXACT_AFTER=0: off */
	setenv("FLYTUNED_EXACT_AFTER", "0", 1);
	assert_int_equal(fly_client_open_opts(&o, &c), 0);
	unsetenv("FLYTUNED_EXACT_AFTER");
	p.dims[0] = 40;
	for (int i = 0; i < 300; i++)
		assert_int_equal(fly_decide(c, &p, &d), 0);
	assert_int_equal(d.exact, 0);
	assert_int_equal(fake_decides(&f), base + 1);
	fly_client_close(c);
	fake_stop(&f);
}

static void test_client_ctrunc_no_leak(void **state)
{
	struct fly_client_opts o = { .timeout_ms = 2000 };
	struct fly_problem p = problem_k1();
	struct fly_decision d;
	struct fake f = { 0 };
	fly_client *c;
	int before;

	(void)state;
	fake_start(&f, 12, 1); /* more fds than the client makes room for */
	o.socket_path = f.sock;
	before = fd_count();
	assert_int_equal(fly_client_open_opts(&o, &c), 0);
	assert_int_equal(fly_decide(c, &p, &d), 0);
	assert_int_equal(d.status, FLY_STATUS_DEFAULT);
	assert_string_equal(d.variant, "");
	fly_client_close(c);
	/* the fake's end of the connection closes when it sees EOF */
	for (int i = 0; i < 2000 && fd_count() != before; i++)
		usleep(1000);
	assert_int_equal(fd_count(), before);
	fake_stop(&f);
}

/* A daemon that hangs up at once: the client backs off (100 ms doubling
 * to 2 s) instead of reconnecting on every call. */
static void test_client_backoff(void **state)
{
	struct fly_client_opts o = { .timeout_ms = 50 };
	struct fly_problem p = problem_k1();
	struct fly_decision d;
	struct fake f = { 0 };
	fly_client *c;
	struct timespec t0, t;
	double el = 0;
	long calls = 0;

	(void)state;
	f.hangup = 1;
	fake_start(&f, 0, 0);
	o.socket_path = f.sock;
	assert_int_equal(fly_client_open_opts(&o, &c), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (el < 1.0) {
		assert_int_equal(fly_decide(c, &p, &d), 0);
		assert_int_equal(d.status, FLY_STATUS_DEFAULT);
		calls++;
		clock_gettime(CLOCK_MONOTONIC, &t);
		el = (double)(t.tv_sec - t0.tv_sec) +
		     (double)(t.tv_nsec - t0.tv_nsec) / 1e9;
	}
	fly_client_close(c);
	fake_stop(&f);
	/* attempts at ~0, 0.1, 0.3, 0.7 s: never more than 1 s / 100 ms */
	assert_true(f.accepts >= 1);
	assert_true(f.accepts <= 10);
	assert_true(calls > f.accepts * 10);
}

/* Every byte from the daemon is untrusted: garbage replies give the
 * default answer, count a socket error, and leak nothing. */
static void test_client_hostile_replies(void **state)
{
	struct fly_problem p = problem_k1();
	struct fly_decision d;
	struct fake f = { 0 };
	int before;

	(void)state;
	for (int kind = 1; kind <= 7; kind++) {
		struct fly_client_opts o = { .timeout_ms = 100, .no_shm = 1 };
		struct fly_client_stats st;
		fly_client *c;

		before = fd_count();
		memset(&f, 0, sizeof(f));
		f.garbage = kind;
		fake_start(&f, 0, 0);
		o.socket_path = f.sock;
		assert_int_equal(fly_client_open_opts(&o, &c), 0);
		assert_int_equal(fly_decide(c, &p, &d), 0);
		assert_int_equal(d.status, FLY_STATUS_DEFAULT);
		assert_string_equal(d.variant, "");
		fly_client_stats_get(c, &st);
		assert_true(st.socket_errors >= 1);
		fly_client_close(c);
		fake_stop(&f);
		for (int i = 0; i < 2000 && fd_count() != before; i++)
			usleep(1000);
		assert_int_equal(fd_count(), before);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_good_table),
		cmocka_unit_test(test_plain_file_refused),
		cmocka_unit_test(test_unsealed_memfd_refused),
		cmocka_unit_test(test_empty_memfd_refused),
		cmocka_unit_test(test_lying_header_refused),
		cmocka_unit_test(test_huge_max_probe_is_bounded),
		cmocka_unit_test(test_corrupt_and_torn_slots),
		cmocka_unit_test(test_client_refused_table_uses_socket),
		cmocka_unit_test(test_client_sealed_table_hits),
		cmocka_unit_test(test_client_prefault_off_hits),
		cmocka_unit_test(test_client_ctrunc_no_leak),
		cmocka_unit_test(test_client_backoff),
		cmocka_unit_test(test_client_hostile_replies),
		cmocka_unit_test(test_issue_22_client_counts_then_asks_once),
	};

	return cmocka_run_group_tests_name("client_shm", tests, NULL, NULL);
}
