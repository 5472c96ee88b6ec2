/*
 * fly_frame.c -- u32 little-endian length-prefixed framing and the
 * incremental stream decoder.
 *
 * Owns: the payload buffer of a decoder while a frame is partial.
 * Thread: any; a decoder is used by one thread at a time.
 * Invariant: the cap is checked on the 4-byte header before any payload
 * buffer is allocated, so a hostile length costs nothing.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fly_abi.h"
#include "fly_frame.h"

void fly_frame_put_header(uint8_t hdr[FLY_FRAME_HDR], uint32_t len)
{
	hdr[0] = (uint8_t)(len & 0xff);
	hdr[1] = (uint8_t)((len >> 8) & 0xff);
	hdr[2] = (uint8_t)((len >> 16) & 0xff);
	hdr[3] = (uint8_t)((len >> 24) & 0xff);
}

int64_t fly_frame_get_header(const uint8_t hdr[FLY_FRAME_HDR], uint32_t cap)
{
	uint32_t len = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 |
		       (uint32_t)hdr[2] << 16 | (uint32_t)hdr[3] << 24;

	if (len == 0 || len > cap)
		return FLY_E_TOOBIG;
	return len;
}

void fly_frame_dec_init(struct fly_frame_dec *d, uint32_t cap)
{
	memset(d, 0, sizeof(*d));
	d->cap = cap;
}

void fly_frame_dec_fini(struct fly_frame_dec *d)
{
	free(d->buf);
	d->buf = NULL;
	d->have = 0;
	d->need = 0;
	d->in_payload = 0;
}

/* Header bytes: accumulate; at 4, check the cap, then allocate. */
static int64_t dec_header(struct fly_frame_dec *d, const uint8_t *data,
			  size_t len)
{
	size_t take = FLY_FRAME_HDR - d->have;
	int64_t n;

	if (take > len)
		take = len;
	memcpy(d->hdr + d->have, data, take);
	d->have += (uint32_t)take;
	if (d->have < FLY_FRAME_HDR)
		return (int64_t)take;
	n = fly_frame_get_header(d->hdr, d->cap);
	if (n < 0)
		return n;
	d->buf = malloc((size_t)n);
	if (d->buf == NULL)
		return -ENOMEM;
	d->need = (uint32_t)n;
	d->have = 0;
	d->in_payload = 1;
	return (int64_t)take;
}

int64_t fly_frame_dec_feed(struct fly_frame_dec *d, const uint8_t *data,
			   size_t len, uint8_t **frame, uint32_t *frame_len)
{
	size_t used = 0, take;
	int64_t n;

	*frame = NULL;
	*frame_len = 0;
	while (used < len) {
		if (!d->in_payload) {
			n = dec_header(d, data + used, len - used);
			if (n < 0)
				return n;
			used += (size_t)n;
			continue;
		}
		take = d->need - d->have;
		if (take > len - used)
			take = len - used;
		memcpy(d->buf + d->have, data + used, take);
		d->have += (uint32_t)take;
		used += take;
		if (d->have == d->need) {
			*frame = d->buf;
			*frame_len = d->need;
			d->buf = NULL;
			d->need = 0;
			d->have = 0;
			d->in_payload = 0;
			break;
		}
	}
	return (int64_t)used;
}

int fly_frame_dec_is_partial(const struct fly_frame_dec *d)
{
	return d->in_payload || d->have > 0;
}
