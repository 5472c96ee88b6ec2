/*
 * fleet_off.c -- the fleet API of a flytuned built without libpq (the
 * Makefile compiles this instead of fleet.c when pkg-config finds no
 * libpq): the fleet is always off; a configured fleet_url is refused at
 * start with the reason, never silently ignored.
 *
 * Owns: nothing.  Thread: the loop thread, as fleet.c.
 */
#include <errno.h>
#include <string.h>

#include "fleet.h"
#include "log.h"

int flyd_fleet_start(struct flyd_ctx *ctx, struct flyd_fleet **out)
{
	*out = NULL;
	if (ctx->cfg.fleet_url[0] == '\0')
		return 0;
	flyd_log(FLYD_LOG_ERR, "fleet_unavailable",
		 "reason=\"this flytuned was built without libpq: fleet_url "
		 "cannot be served (rebuild with Debian's libpq-dev)\"");
	return -ENOTSUP;
}

void flyd_fleet_ready(struct flyd_fleet *f)
{
	(void)f;
}

void flyd_fleet_kick(void *f)
{
	(void)f;
}

int flyd_fleet_claim(void *f, const char *key)
{
	(void)f;
	(void)key;
	return 0;
}

void flyd_fleet_release(void *f, const char *key, int won)
{
	(void)f;
	(void)key;
	(void)won;
}

void flyd_fleet_stop(struct flyd_fleet *f)
{
	(void)f;
}

void flyd_fleet_gauges(const struct flyd_fleet *f,
		       struct flyd_fleet_gauges *g)
{
	(void)f;
	memset(g, 0, sizeof(*g));
}

const char *flyd_fleet_state(const struct flyd_fleet *f)
{
	(void)f;
	return "off";
}

const char *flyd_fleet_last_error(const struct flyd_fleet *f)
{
	(void)f;
	return "";
}

void flyd_fleet_status(const struct flyd_fleet *f, cJSON *resp)
{
	static const char *const zero[] = {
		"outbox", "lag_s",	   "pushed",	    "applied",
		"refused", "errors", "locked", "waits", "satisfied",
		"wait_timeouts", "holders_lost", "waiting"};
	cJSON *o = cJSON_AddObjectToObject(resp, "fleet");

	(void)f;
	if (o == NULL)
		return;
	cJSON_AddStringToObject(o, "state", "off");
	for (size_t i = 0; i < sizeof(zero) / sizeof(zero[0]); i++)
		cJSON_AddNumberToObject(o, zero[i], 0);
	cJSON_AddStringToObject(o, "last_error", "");
}
