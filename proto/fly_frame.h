/*
 * fly_frame.h -- socket framing: u32 little-endian payload length, then
 * that many bytes of UTF-8 JSON.  One request or response per frame.
 *
 * Owns: nothing.  Thread: any.
 * The cap is enforced on the 4-byte header, before anything is allocated.
 */
#ifndef FLY_FRAME_H
#define FLY_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define FLY_FRAME_HDR 4
#define FLY_FRAME_CAP_DEFAULT (64u * 1024u)

/* Write the 4-byte header for a payload of @p len bytes. */
void fly_frame_put_header(uint8_t hdr[FLY_FRAME_HDR], uint32_t len);

/* Read a header.  @return the payload length, or FLY_E_TOOBIG when it is 0
 * or over @p cap (a zero-length frame is a framing violation). */
int64_t fly_frame_get_header(const uint8_t hdr[FLY_FRAME_HDR], uint32_t cap);

/* Incremental decoder for a byte stream (used by the daemon and client). */
struct fly_frame_dec {
	uint32_t cap;     /* payload cap */
	uint32_t need;    /* payload length of the frame being read */
	uint32_t have;    /* bytes of it (header or payload) read so far */
	uint8_t hdr[FLY_FRAME_HDR];
	uint8_t *buf;     /* payload buffer (malloc'd at header time) */
	int in_payload;   /* 0 reading header, 1 reading payload */
};

void fly_frame_dec_init(struct fly_frame_dec *d, uint32_t cap);
void fly_frame_dec_fini(struct fly_frame_dec *d);
/* Feed bytes.  Consumes up to @p len bytes and stops after one complete
 * frame: then *frame and *frame_len are set (caller owns *frame; free()) and
 * the return value is the number of bytes consumed.  Call again with the
 * rest.  @return bytes consumed (>= 0) or FLY_E_TOOBIG / -ENOMEM (the
 * stream is then unusable: close it). */
int64_t fly_frame_dec_feed(struct fly_frame_dec *d, const uint8_t *data,
			   size_t len, uint8_t **frame, uint32_t *frame_len);
/* Whether a partial frame is buffered (for the frame-completion timeout). */
int fly_frame_dec_is_partial(const struct fly_frame_dec *d);

#endif /* FLY_FRAME_H */
