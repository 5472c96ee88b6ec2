/*
 * worker_proto.c -- records on the daemon <-> worker pipe (see
 * worker_proto.h for the format).
 *
 * Owns: nothing.  Thread: any.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "worker_proto.h"

size_t flyd_wp_payload_size(uint32_t type)
{
	switch (type) {
	case FLYD_WP_READY:
		return sizeof(struct flyd_wp_ready);
	case FLYD_WP_JOB:
		return sizeof(struct flyd_tune_job);
	case FLYD_WP_START:
	case FLYD_WP_TRIAL:
		return sizeof(struct flyd_trial);
	case FLYD_WP_RESULT:
		return sizeof(struct flyd_wp_result);
	case FLYD_WP_VARIANT:
		return sizeof(struct flyd_reg_variant);
	default:
		return 0;
	}
}

static int check_hdr(const struct flyd_wp_hdr *h)
{
	size_t want = flyd_wp_payload_size(h->type);

	if (h->magic != FLYD_WP_MAGIC || h->version != FLYD_WP_VERSION ||
	    want == 0 || h->len != want)
		return FLY_E_PROTO;
	return 0;
}

static void hdr_fill(struct flyd_wp_hdr *h, uint32_t type, uint32_t len)
{
	memset(h, 0, sizeof(*h));
	h->magic = FLYD_WP_MAGIC;
	h->type = (uint16_t)type;
	h->version = FLYD_WP_VERSION;
	h->len = len;
}

int flyd_wp_encode(uint32_t type, const void *payload, uint32_t len,
		   uint8_t *out, size_t cap)
{
	struct flyd_wp_hdr h;

	if (len != flyd_wp_payload_size(type) || len == 0 ||
	    cap < FLYD_WP_HDR + (size_t)len)
		return -EINVAL;
	hdr_fill(&h, type, len);
	memcpy(out, &h, sizeof(h));
	memcpy(out + FLYD_WP_HDR, payload, len);
	return (int)(FLYD_WP_HDR + len);
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

int flyd_wp_write(int fd, uint32_t type, const void *payload, uint32_t len)
{
	struct flyd_wp_hdr h;
	int rc;

	if (len != flyd_wp_payload_size(type) || len == 0)
		return -EINVAL;
	hdr_fill(&h, type, len);
	rc = write_all(fd, (const uint8_t *)&h, sizeof(h));
	if (rc == 0)
		rc = write_all(fd, payload, len);
	return rc;
}

/* Read exactly @p n bytes.  @return n, 0 at EOF before any byte, a
 * short count at EOF mid-way, or -errno. */
static ssize_t read_all(int fd, uint8_t *p, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = read(fd, p + got, n - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

int flyd_wp_read(int fd, struct flyd_wp_hdr *h, void *payload, size_t cap)
{
	ssize_t r;

	r = read_all(fd, (uint8_t *)h, sizeof(*h));
	if (r == 0)
		return -EPIPE;
	if (r < 0)
		return (int)r;
	if ((size_t)r != sizeof(*h) || check_hdr(h) < 0 || h->len > cap)
		return FLY_E_PROTO;
	r = read_all(fd, payload, h->len);
	if (r < 0)
		return (int)r;
	return (size_t)r == h->len ? 0 : FLY_E_PROTO;
}

int64_t flyd_wp_parse(const uint8_t *buf, size_t len, struct flyd_wp_hdr *h)
{
	if (len < FLYD_WP_HDR)
		return 0;
	memcpy(h, buf, sizeof(*h));
	if (check_hdr(h) < 0)
		return FLY_E_PROTO;
	if (len < FLYD_WP_HDR + (size_t)h->len)
		return 0;
	return (int64_t)FLYD_WP_HDR + h->len;
}
