/*
 * worker_proto.h -- the pipe protocol between the daemon's supervisor
 * (worker.c) and the worker process (worker_main.c), on fd 3 of the child.
 *
 * Owns: nothing (encode/decode helpers).  Thread: any.
 *
 * Format: a stream of records, each a 16-byte header then a payload whose
 * size is fixed by the type.  Both ends are the same binary on the same
 * host (the worker is `flytuned --worker`), so payloads are the C structs
 * below in native byte order; the magic and FLYD_WP_VERSION catch a
 * mismatched peer and a corrupted stream, and a payload length other than
 * the type's size is a protocol error (FLY_E_PROTO: kill the worker).
 *
 *   offset size  field
 *   0      4     magic    FLYD_WP_MAGIC
 *   4      2     type     enum flyd_wp_type
 *   6      2     version  FLYD_WP_VERSION
 *   8      4     len      payload bytes (== flyd_wp_payload_size(type))
 *   12     4     reserved 0
 *
 * Flow (d = daemon, w = worker):
 *   w->d VARIANT struct flyd_reg_variant (registry.h): one per variant of
 *                the opened backend, before READY rc 0
 *   w->d READY   once, after the backend opened (rc 0) or failed (rc < 0,
 *                then the worker exits)
 *   d->w JOB     struct flyd_tune_job; one at a time
 *   w->d START   struct flyd_trial (variant, params): the candidate about
 *                to run; sent BEFORE each of its runs (check, warm-up,
 *                rep), so a crash or hang is attributed to it and the
 *                per-candidate timeout bounds one launch
 *   w->d TRIAL   struct flyd_trial: a candidate's final trial
 *   w->d RESULT  struct flyd_wp_result: the job's end; the trials are the
 *                TRIAL records since the JOB (ntrials of them)
 * The worker exits on EOF of fd 3.
 */
#ifndef FLYD_WORKER_PROTO_H
#define FLYD_WORKER_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "fly_abi.h"
#include "registry.h"
#include "store.h"
#include "worker.h"

#define FLYD_WP_MAGIC 0x50574c46u /* "FLWP" little-endian */
#define FLYD_WP_VERSION 3
#define FLYD_WP_HDR 16
#define FLYD_WP_FD 3             /* the pipe's fd in the worker */
#define FLYD_WP_BACKEND_MAX 16
#define FLYD_WP_FPR_MAX 512

enum flyd_wp_type {
	FLYD_WP_READY = 1,
	FLYD_WP_JOB = 2,
	FLYD_WP_START = 3,
	FLYD_WP_TRIAL = 4,
	FLYD_WP_RESULT = 5,
	FLYD_WP_VARIANT = 6
};

struct flyd_wp_hdr {
	uint32_t magic;
	uint16_t type;
	uint16_t version;
	uint32_t len;
	uint32_t reserved;
};
_Static_assert(sizeof(struct flyd_wp_hdr) == FLYD_WP_HDR, "wp header");

struct flyd_wp_ready {
	int32_t rc;                          /* 0, or why the backend failed */
	int32_t pid;
	char backend[FLYD_WP_BACKEND_MAX];   /* "cpu", "cuda", "hip" */
	char fingerprint[FLYD_WP_FPR_MAX];
};

struct flyd_wp_result {
	char key[FLY_KEY_MAX];
	int32_t rc;
	int32_t budget_hit;
	struct fly_decision winner;
	double mad_us;
	double tune_s;
	uint32_t ntrials;
	uint32_t ncandidates;
	uint32_t ninfeasible;
	uint32_t nexcluded;
	uint32_t nunmeasured;
	uint32_t reserved;
	double setup_s;                      /* flyd_tune_result.setup_s */
	double over_s;                       /* flyd_tune_result.over_s */
};

/* Payload size of a type, 0 for an unknown type. */
size_t flyd_wp_payload_size(uint32_t type);

/* Write one record to a blocking fd (retries EINTR and short writes).
 * @return 0, -EINVAL (len is not the type's size), -EPIPE, -errno. */
int flyd_wp_write(int fd, uint32_t type, const void *payload, uint32_t len);

/* Read one record from a blocking fd into @p payload (@p cap bytes).
 * @return 0, -EPIPE (EOF at a record boundary), FLY_E_PROTO (bad header,
 *         truncated record, or payload over @p cap), -errno. */
int flyd_wp_read(int fd, struct flyd_wp_hdr *h, void *payload, size_t cap);

/* Encode a record into @p out (FLYD_WP_HDR + len bytes).
 * @return total size, or -EINVAL. */
int flyd_wp_encode(uint32_t type, const void *payload, uint32_t len,
		   uint8_t *out, size_t cap);

/* Look at buffered bytes.  @return the size of the complete record at
 * @p buf (header copied to @p h), 0 when more bytes are needed, or
 * FLY_E_PROTO. */
int64_t flyd_wp_parse(const uint8_t *buf, size_t len, struct flyd_wp_hdr *h);

#endif /* FLYD_WORKER_PROTO_H */
