/*
 * fuzz_config.c -- libFuzzer harness: the daemon's config file parser
 * (daemon/config.c, flyd_config_parse).
 *
 * Checks: a refused text leaves the configuration as it was and says why
 * (a non-empty message); an accepted one gives values inside the ranges
 * the schema states (schemas/config.schema.json), NUL-terminated strings,
 * and parsing it again over its own result changes nothing.
 */
#include <string.h>

#include "config.h"
#include "fuzz.h"

static void check_ranges(const struct flyd_config *c)
{
	FUZZ_CHECK(memchr(c->backend, 0, sizeof(c->backend)));
	FUZZ_CHECK(memchr(c->system_db, 0, sizeof(c->system_db)));
	FUZZ_CHECK(memchr(c->admin_group, 0, sizeof(c->admin_group)));
	FUZZ_CHECK(memchr(c->log_level, 0, sizeof(c->log_level)));
	FUZZ_CHECK(c->policy >= FLYD_POLICY_ALWAYS &&
		   c->policy <= FLYD_POLICY_ON_REQUEST);
	FUZZ_CHECK(c->margin >= 0 && c->margin <= 1);
	FUZZ_CHECK(c->job_budget_s > 0 && c->job_budget_s <= 3600);
	FUZZ_CHECK(c->cand_timeout_s > 0 && c->cand_timeout_s <= 3600);
	FUZZ_CHECK(c->queue_cap >= 1);
	FUZZ_CHECK(c->shm_capacity >= 16);
	FUZZ_CHECK(c->frame_cap >= 256);
	FUZZ_CHECK(c->out_buf_cap >= 4096);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct flyd_config c, orig, again;
	char err[256];

	flyd_config_defaults(&c);
	orig = c;
	if (flyd_config_parse((const char *)data, size, "fuzz", &c, err,
			      sizeof(err)) != 0) {
		FUZZ_CHECK(memcmp(&c, &orig, sizeof(c)) == 0);
		FUZZ_CHECK(err[0] != '\0');
		return 0;
	}
	check_ranges(&c);
	again = c;
	FUZZ_CHECK(flyd_config_parse((const char *)data, size, "fuzz", &again,
				     err, sizeof(err)) == 0);
	FUZZ_CHECK(memcmp(&c, &again, sizeof(c)) == 0);
	return 0;
}
