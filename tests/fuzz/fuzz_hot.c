/*
 * fuzz_hot.c -- libFuzzer harness: the decide fast path (proto/fly_hot.c)
 * against the generic one (proto/fly_msg.c).
 *
 * Checks: a request fly_hot_scan_decide() matches, fly_msg_parse() accepts
 * as a decide with the same key and id; and a decision built from the
 * input's bytes, written by fly_hot_decide_write(), parses strictly and
 * decodes to the same decision, median_us exact (fly_num_fmt_double reads
 * back as the same double).
 */
#include <math.h>
#include <string.h>

#include "fly_abi.h"
#include "fly_hot.h"
#include "fly_msg.h"
#include "fuzz.h"

static void check_scan(const uint8_t *data, size_t size)
{
	struct fly_hot_req hr;
	const char *req, *key;
	cJSON *o = NULL;
	int64_t id;

	if (fly_hot_scan_decide(data, size, &hr) != 0)
		return;
	FUZZ_CHECK(fly_msg_parse(data, size, &o) == 0);
	FUZZ_CHECK(fly_msg_get_str(o, "req", &req) == 0);
	FUZZ_CHECK(strcmp(req, "decide") == 0);
	FUZZ_CHECK(fly_msg_get_str(o, "key", &key) == 0);
	FUZZ_CHECK(strlen(key) == hr.keylen &&
		   memcmp(key, hr.key, hr.keylen) == 0);
	FUZZ_CHECK(fly_msg_opt_int(o, "id", &id) == !hr.has_id);
	FUZZ_CHECK(!hr.has_id || id == hr.id);
	FUZZ_CHECK(cJSON_GetArraySize(o) == 2 + hr.has_id);
	cJSON_Delete(o);
}

/* A decision from the input's bytes: median, params, variant. */
static void check_write(const uint8_t *data, size_t size)
{
	struct fly_decision d, got;
	char out[FLY_HOT_DECIDE_MAX];
	cJSON *o = NULL;
	const char *key;
	size_t off = 0;
	int n;

	memset(&d, 0, sizeof(d));
	if (size < sizeof(double) + 2)
		return;
	memcpy(&d.median_us, data, sizeof(double));
	d.median_us = fabs(d.median_us);
	d.status = data[8] % 3;
	d.provisional = data[8] >> 7;
	d.nparams = data[9] % (FLY_PARAMS_MAX + 1);
	off = 10;
	for (uint32_t i = 0; i < d.nparams; i++) {
		int32_t p = 0;

		if (size - off >= sizeof(p)) {
			memcpy(&p, data + off, sizeof(p));
			off += sizeof(p);
		}
		d.params[i] = p;
	}
	/* the variant: 1..39 bytes of the rest, NUL ends it */
	for (size_t i = 0; i + 1 < sizeof(d.variant) && off < size; i++)
		d.variant[i] = (char)data[off++];
	if (d.variant[0] == '\0')
		d.variant[0] = 'v';
	n = fly_hot_decide_write(out, sizeof(out), "rmsnorm/fp32/m=8,n=64", &d,
				 1, 7);
	if (!isfinite(d.median_us)) {
		FUZZ_CHECK(n < 0);
		return;
	}
	FUZZ_CHECK(n > 0);
	if (fly_msg_parse((const uint8_t *)out, (size_t)n, &o) != 0) {
		/* only a variant that is not UTF-8 may make it unparsable,
		 * as with the generic printer */
		FUZZ_CHECK(!fly__utf8_valid(d.variant, strlen(d.variant)));
		return;
	}
	FUZZ_CHECK(fly_msg_get_str(o, "key", &key) == 0);
	FUZZ_CHECK(fly_msg_decision_from_json(
			   cJSON_GetObjectItemCaseSensitive(o, "decision"),
			   &got) == 0);
	FUZZ_CHECK(got.status == d.status);
	FUZZ_CHECK(got.provisional == d.provisional);
	FUZZ_CHECK(strcmp(got.variant, d.variant) == 0);
	FUZZ_CHECK(got.nparams == d.nparams);
	FUZZ_CHECK(memcmp(got.params, d.params,
			  d.nparams * sizeof(d.params[0])) == 0);
	FUZZ_CHECK(got.median_us == d.median_us);
	cJSON_Delete(o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	check_scan(data, size);
	check_write(data, size);
	return 0;
}
