/*
 * cmd_decide.c -- decide KEY: what a client would be answered now,
 * through libflyclient's fly_decide, and from which tier (cache, shm,
 * socket or none).  schemas/ctl-decide.json.
 *
 * Owns: nothing between calls.  Thread: main.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "ctl.h"

/* Which tier answered between two stats snapshots. */
static const char *tier_of(const struct fly_client_stats *a,
			   const struct fly_client_stats *b)
{
	if (b->cache_hits > a->cache_hits)
		return "cache";
	if (b->shm_hits > a->shm_hits)
		return "shm";
	if (b->socket_requests > a->socket_requests &&
	    b->socket_errors == a->socket_errors)
		return "socket";
	return "none";
}

/* fly_decide once; @return the tier that answered. */
static const char *decide_once(fly_client *c, const struct fly_problem *p,
			       struct fly_decision *d)
{
	struct fly_client_stats a, b;

	fly_client_stats_get(c, &a);
	(void)fly_decide(c, p, d);
	fly_client_stats_get(c, &b);
	return tier_of(&a, &b);
}

static cJSON *decision_json(const struct fly_decision *d)
{
	static const char *const st[] = { "default", "pending", "tuned" };
	cJSON *o = cJSON_CreateObject(), *a;

	cJSON_AddStringToObject(o, "status", d->status < 3 ? st[d->status]
							   : "default");
	cJSON_AddBoolToObject(o, "provisional", d->provisional != 0);
	cJSON_AddStringToObject(o, "variant", d->variant);
	a = cJSON_AddArrayToObject(o, "params");
	for (uint32_t i = 0; i < d->nparams && i < FLY_PARAMS_MAX; i++)
		cJSON_AddItemToArray(a, cJSON_CreateNumber(
						(double)d->params[i]));
	cJSON_AddNumberToObject(o, "median_us", d->median_us);
	return o;
}

static void print_decide(const cJSON *doc)
{
	const cJSON *d = cJSON_GetObjectItemCaseSensitive(doc, "decision");
	char params[128];

	ctl_params_text(d, params, sizeof(params));
	printf("key: %s\nbucket: %s\nstatus: %s%s\nvariant: %s\n"
	       "params: %s\nmedian_us: %.3f\ntier: %s\nrepeat_tier: %s\n",
	       ctl_str(doc, "key"), ctl_str(doc, "bucket"),
	       ctl_str(d, "status"),
	       cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d, "provisional"))
		       ? " (provisional)" : "",
	       ctl_str(d, "variant")[0] ? ctl_str(d, "variant")
					  : "(the caller's default)",
	       params, ctl_num(d, "median_us"), ctl_str(doc, "tier"),
	       ctl_str(doc, "repeat_tier"));
}

/* decide KEY: fly_decide as an engine's client makes it, on a client
 * already connected (hello maps the shm table), then once more: the
 * first answer shows the shm or socket tier, the repeat the process
 * cache.  schemas/ctl-decide.json. */
int ctl_decide(struct ctl *x, int argc, char **argv)
{
	static const char warm[] = "{\"req\":\"stats\"}";
	struct fly_decision d1, d2;
	struct fly_problem p;
	const char *t1, *t2;
	char bk[FLY_KEY_MAX], *out = NULL;
	size_t len;
	cJSON *doc;
	int rc = ctl_parse_simple(x, argc, argv, 1);

	if (rc >= 0)
		return rc;
	rc = ctl_check_key(x, argv[optind]);
	if (rc != CTL_OK)
		return rc;
	(void)fly_problem_from_key(argv[optind], &p);
	if (fly_problem_key(&p, bk, sizeof(bk)) < 0)
		snprintf(bk, sizeof(bk), "%s", argv[optind]);
	if (fly_request(x->c, warm, sizeof(warm) - 1, 0, &out, &len) < 0)
		fprintf(stderr, "decide: daemon not reachable: %s; the library "
			"answers the default\n", fly_client_errmsg(x->c));
	fly_free(out);
	t1 = decide_once(x->c, &p, &d1);
	t2 = decide_once(x->c, &p, &d2);
	doc = cJSON_CreateObject();
	cJSON_AddTrueToObject(doc, "ok");
	cJSON_AddStringToObject(doc, "key", argv[optind]);
	cJSON_AddStringToObject(doc, "bucket", bk);
	cJSON_AddItemToObject(doc, "decision", decision_json(&d1));
	cJSON_AddStringToObject(doc, "tier", t1);
	cJSON_AddStringToObject(doc, "repeat_tier", t2);
	ctl_out(x, doc, print_decide);
	cJSON_Delete(doc);
	return CTL_OK;
}
