/*
 * fly_hot.h -- the hot messages' fast path (issue 19 item 1): a scanner
 * for the common shape of a `decide` request and a fixed-layout writer
 * of the `decide` response, both without a cJSON tree.
 *
 * Owns: nothing.  Thread: any.
 *
 * The bytes are the ones schemas/decide.request.json and
 * decide.response.json describe, member for member (schemas/README.md,
 * "The decide fast path"): a reader cannot tell which path answered,
 * except that the fixed-layout writer prints median_us exactly (the
 * shortest decimal that reads back as the same double) where cJSON's
 * "%1.15g" was equal only within an epsilon.  Anything the scanner or the
 * writer does not know goes to the generic path (fly_msg_parse,
 * fly_msg_print), which stays the reference.
 */
#ifndef FLY_HOT_H
#define FLY_HOT_H

#include <stddef.h>
#include <stdint.h>

#include "fly_abi.h"

/* Room for any response fly_hot_decide_write() writes (a key of at most
 * FLY_KEY_MAX, a variant of FLY_VARIANT_MAX bytes each escaped as \u00XX,
 * FLY_PARAMS_MAX 20-digit params, a median and an id). */
#define FLY_HOT_DECIDE_MAX 1024

/* A decide request as the scanner found it; key points into the frame
 * (borrowed; not NUL-terminated; printable ASCII without '"' or '\'). */
struct fly_hot_req {
	const char *key;
	size_t keylen;
	int has_id;
	int64_t id;
};

/* Whether @p buf[0..len) is a decide request of the common shape: one
 * object with "req":"decide", "key": a string of printable ASCII without
 * escapes, and optionally "id": an integer of at most 15 digits, in any
 * order, JSON whitespace allowed between tokens, nothing else.  Such a
 * request is one fly_msg_parse() accepts with the same meaning.
 * @param[out] out filled when 0 is returned.
 * @return 0 (matched) or 1 (anything else: use the generic parser). */
int fly_hot_scan_decide(const uint8_t *buf, size_t len,
			struct fly_hot_req *out);

/* Write the decide response payload
 * {"ok":true,"key":KEY,"decision":{"status":..,"provisional":..,
 *  "variant":..,"params":[..],"median_us":..}[,"id":ID]}
 * (the generic path's member order) into @p out.
 * @return the payload's length; FLY_E_PROTO when the generic path must
 * print it (unknown status, a non-finite median, a param or id beyond
 * +-2^53, which the generic path carries as a double); -ENOSPC when
 * @p cap is too small. */
int fly_hot_decide_write(char *out, size_t cap, const char *key,
			 const struct fly_decision *d, int has_id, int64_t id);

#endif /* FLY_HOT_H */
