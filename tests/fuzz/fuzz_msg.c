/*
 * fuzz_msg.c -- libFuzzer harness: the strict JSON message parser and the
 * typed accessors both sides use (proto/fly_msg.c).
 *
 * Checks: whatever fly_msg_parse accepts prints, and the print parses
 * again to a document that prints the same (the daemon answers what it
 * read; a client re-reads what the daemon printed); an accepted document
 * is an object; the accessors never crash on it, whatever the types; a
 * decision they accept respects the ABI's bounds.
 */
#include <string.h>

#include "fly_abi.h"
#include "fly_msg.h"
#include "fuzz.h"

static void poke(const cJSON *o)
{
	const char *s, *msg;
	int64_t i;
	int b;
	struct fly_decision d;
	const cJSON *dj;

	(void)fly_msg_get_str(o, "req", &s);
	if (fly_msg_get_str(o, "req", &s) == 0)
		(void)fly_req_flags(fly_req_parse(s));
	(void)fly_msg_get_int(o, "id", &i);
	(void)fly_msg_opt_str(o, "key", &s);
	(void)fly_msg_opt_int(o, "limit", &i);
	(void)fly_msg_opt_bool(o, "wait", &b);
	(void)fly_msg_get_error(o, &msg);
	dj = cJSON_GetObjectItemCaseSensitive(o, "decision");
	if (dj && fly_msg_decision_from_json(dj, &d) == 0) {
		FUZZ_CHECK(d.nparams <= FLY_PARAMS_MAX);
		FUZZ_CHECK(memchr(d.variant, 0, sizeof(d.variant)) != NULL);
		FUZZ_CHECK(d.status <= FLY_STATUS_TUNED);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	cJSON *a = NULL, *b = NULL;
	char *pa, *pb;
	size_t la, lb;

	if (fly_msg_parse(data, size, &a) != 0) {
		FUZZ_CHECK(a == NULL);
		return 0;
	}
	FUZZ_CHECK(cJSON_IsObject(a));
	poke(a);
	pa = fly_msg_print(a, &la);
	FUZZ_CHECK(pa != NULL);
	FUZZ_CHECK(fly_msg_parse((const uint8_t *)pa, la, &b) == 0);
	pb = fly_msg_print(b, &lb);
	FUZZ_CHECK(pb != NULL);
	FUZZ_CHECK(la == lb && memcmp(pa, pb, la) == 0);
	free(pa);
	free(pb);
	cJSON_Delete(a);
	cJSON_Delete(b);
	return 0;
}
