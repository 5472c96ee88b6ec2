/*
 * fly_msg.h -- JSON messages of the socket protocol (schemas/ is the
 * source of truth; schemas/README.md narrates the protocol).
 *
 * Owns: nothing.  Thread: any.
 *
 * Every request is an object with "req" naming it (and optional "id", an
 * integer echoed in the response).  Every response is an object with "ok":
 * true plus the request's fields, or "ok": false and
 * "error": {"code": NAME, "message": TEXT}.  The request table lives in
 * fly_msgs.def (generated from schemas/ by tools/gen_proto.py).
 */
#ifndef FLY_MSG_H
#define FLY_MSG_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "fly_abi.h"

/* Requests, expanded from the generated table:
 * FLY_MSG(name, id, flags) with flags FLY_MSGF_ADMIN (changes state: needs
 * a trusted peer) and FLY_MSGF_FD (response carries an fd). */
#define FLY_MSGF_ADMIN 0x1u
#define FLY_MSGF_FD 0x2u
enum fly_req {
	FLY_REQ_NONE = 0,
#define FLY_MSG(name, id, flags) FLY_REQ_##name = id,
#include "fly_msgs.def"
#undef FLY_MSG
	FLY_REQ_COUNT
};
const char *fly_req_name(int req);
int fly_req_parse(const char *name);      /* FLY_REQ_NONE when unknown */
uint32_t fly_req_flags(int req);

/* Parse one frame's payload into JSON, strictly: valid UTF-8 without NUL
 * or unpaired surrogates, nesting depth <= 32, no duplicate keys in any
 * object, a top-level object, no trailing bytes, numbers finite.
 * @param[out] out caller owns result; free with cJSON_Delete().
 * @return 0 or FLY_E_PROTO. */
int fly_msg_parse(const uint8_t *buf, size_t len, cJSON **out);
/* Whether @p s[0..n) is UTF-8 as fly_msg_parse() accepts it (no overlong
 * forms, no encoded surrogates): the record check refuses strings the
 * daemon's parser would refuse (issue 21). */
int fly__utf8_valid(const char *s, size_t n);

/* Serialize unformatted.  Integral numbers from 1e15 up to 2^63 print as
 * integers (cJSON alone prints 1796229956770520 as 1.79622995677052e+15),
 * and every other number reads back as the same double (cJSON alone
 * prints 0.30000000000000004 as 0.3).
 * Caller owns result; free with free().
 * @return NULL on -ENOMEM. */
char *fly_msg_print(const cJSON *msg, size_t *len);

/* Stable wire names of error codes ("proto", "busy", "permission",
 * "not_found", "invalid", ...) and back.  Unknown codes map to "internal". */
const char *fly_err_name(int code);
int fly_err_parse(const char *name);

/* Build {"ok":false,"error":{"code":..,"message":..}}.  Caller owns
 * result.  NULL on allocation failure. */
cJSON *fly_msg_error(int code, const char *message);
/* If @p resp is an error response, return its code (and message through
 * @p msg, borrowed; valid until resp is freed); else 0. */
int fly_msg_get_error(const cJSON *resp, const char **msg);

/* Status names: "default", "pending", "tuned". */
const char *fly_status_name(uint32_t status);
int fly_status_parse(const char *s); /* -1 when unknown */

/* Decision <-> JSON object
 * {"status":..,"provisional":bool,"variant":..,"params":[ints],
 *  "median_us":num}.  decision_to_json: caller owns result. */
cJSON *fly_msg_decision_to_json(const struct fly_decision *d);
/* @return 0 or FLY_E_PROTO when a field is missing or of the wrong type or
 * out of range (variant too long, more than FLY_PARAMS_MAX params). */
int fly_msg_decision_from_json(const cJSON *o, struct fly_decision *out);

/* Helpers for typed field access; return FLY_E_PROTO on a wrong type.
 * Strings are borrowed from @p o.  "Optional" variants return 1 when the
 * field is absent (out untouched), 0 when present and valid. */
int fly_msg_get_str(const cJSON *o, const char *name, const char **out);
int fly_msg_get_int(const cJSON *o, const char *name, int64_t *out);
int fly_msg_opt_str(const cJSON *o, const char *name, const char **out);
int fly_msg_opt_int(const cJSON *o, const char *name, int64_t *out);
int fly_msg_opt_bool(const cJSON *o, const char *name, int *out);

#endif /* FLY_MSG_H */
