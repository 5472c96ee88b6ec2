/*
 * config.c -- flytuned's configuration file (see config.h and
 * schemas/config.schema.json).
 *
 * Owns: nothing beyond the caller's struct.  Thread: loop thread.
 * The file is parsed with fly_msg_parse() (strict JSON: duplicate keys,
 * bad UTF-8, excess nesting and trailing bytes are refused), then every
 * member is checked against the table below; the first problem is
 * reported naming its key.  Nothing is written to @p c unless the whole
 * file is valid.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "config.h"
#include "fly_key.h"
#include "fly_msg.h"
#include "log.h"

#define CONFIG_FILE_MAX (1024 * 1024)

void flyd_config_defaults(struct flyd_config *c)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->backend, sizeof(c->backend), "auto");
	c->system_db[0] = '\0';
	c->policy = FLYD_POLICY_IDLE;
	c->idle_ms = 2000;
	c->bench_s_per_min = 30.0;
	c->job_budget_s = 1.0;
	c->job_max_x = 1.35;
	c->cand_timeout_s = 5.0;
	c->setup_timeout_s = 60.0;
	c->margin = 0.03;
	c->queue_cap = 1024;
	c->shm_capacity = 65536;
	c->shm_max_bytes = 1073741824u;
	c->max_clients = 1024;
	c->frame_cap = 64u * 1024u;
	c->out_buf_cap = 1024u * 1024u;
	c->frame_timeout_ms = 5000;
	c->idle_timeout_ms = 300000;
	snprintf(c->admin_group, sizeof(c->admin_group), "flytune");
	snprintf(c->log_level, sizeof(c->log_level), "info");
	for (uint32_t op = 0; op < FLY_OP_COUNT; op++)
		fly_bucket_policy_default(op, &c->bucket[op]);
	c->fleet_url[0] = '\0';
	c->fleet_retry_ms = 2000;
	c->fleet_hysteresis = 0.03;
	c->fleet_wait_ms = 30000;
	c->fleet_check_ms = 1000;
}

/* An integer member in [lo, hi]. */
static int get_u32(const cJSON *it, uint32_t lo, uint32_t hi, uint32_t *out,
		   char *err, size_t errcap)
{
	double v = it->valuedouble;

	if (!cJSON_IsNumber(it) || v != floor(v) || v < lo || v > hi) {
		snprintf(err, errcap,
			 "config: '%s' must be an integer in %u..%u",
			 it->string, lo, hi);
		return -EINVAL;
	}
	*out = (uint32_t)v;
	return 0;
}

/* A number member in [lo, hi] (lo exclusive when @p open_lo). */
static int get_num(const cJSON *it, double lo, double hi, int open_lo,
		   double *out, char *err, size_t errcap)
{
	double v = it->valuedouble;

	if (!cJSON_IsNumber(it) || !isfinite(v) || v > hi ||
	    (open_lo ? v <= lo : v < lo)) {
		snprintf(err, errcap, "config: '%s' must be a number in "
			 "%s%g..%g", it->string, open_lo ? ">" : "", lo, hi);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

/* A string member of one of the NULL-terminated @p allowed values (NULL:
 * any string shorter than @p cap). */
static int get_str(const cJSON *it, const char *const *allowed, char *out,
		   size_t cap, char *err, size_t errcap)
{
	const char *s = cJSON_GetStringValue(it);

	if (s == NULL || strlen(s) >= cap) {
		snprintf(err, errcap, "config: '%s' must be a string shorter "
			 "than %zu bytes", it->string, cap);
		return -EINVAL;
	}
	if (allowed != NULL) {
		const char *const *a;

		for (a = allowed; *a != NULL; a++)
			if (strcmp(*a, s) == 0)
				break;
		if (*a == NULL) {
			snprintf(err, errcap, "config: '%s' has an unknown "
				 "value '%.64s'", it->string, s);
			return -EINVAL;
		}
	}
	snprintf(out, cap, "%s", s);
	return 0;
}

static const char *const backends[] = {"auto", "cpu", "cuda", "hip", NULL};
static const char *const policies[] = {"always", "idle", "on-request", NULL};
static const char *const levels[] = {"debug", "info", "warn", "err", "crit",
				     NULL};

/* "bucketing": {"gemm": {"pow2_max": INT, "step": INT}, ...} */
static int get_bucketing(const cJSON *o, struct flyd_config *c, char *err,
			 size_t errcap)
{
	const cJSON *op;

	if (!cJSON_IsObject(o)) {
		snprintf(err, errcap, "config: 'bucketing' must be an object");
		return -EINVAL;
	}
	cJSON_ArrayForEach(op, o) {
		uint32_t id = fly_op_parse(op->string, strlen(op->string));
		struct fly_bucket_policy *p;
		const cJSON *f;

		if (id == FLY_OP_NONE || id >= FLY_OP_COUNT) {
			snprintf(err, errcap, "config: unknown key "
				 "'bucketing.%.64s'", op->string);
			return -EINVAL;
		}
		if (!cJSON_IsObject(op)) {
			snprintf(err, errcap, "config: 'bucketing.%s' must be "
				 "an object", op->string);
			return -EINVAL;
		}
		p = &c->bucket[id];
		cJSON_ArrayForEach(f, op) {
			double v = f->valuedouble;
			int64_t *dst;

			if (strcmp(f->string, "pow2_max") == 0) {
				dst = &p->pow2_max;
			} else if (strcmp(f->string, "step") == 0) {
				dst = &p->step;
			} else {
				snprintf(err, errcap, "config: unknown key "
					 "'bucketing.%s.%.64s'", op->string,
					 f->string);
				return -EINVAL;
			}
			if (!cJSON_IsNumber(f) || v != floor(v) || v < 1 ||
			    v > 1099511627776.0) {
				snprintf(err, errcap, "config: 'bucketing.%s.%s'"
					 " must be an integer in 1..2^40",
					 op->string, f->string);
				return -EINVAL;
			}
			*dst = (int64_t)v;
		}
	}
	return 0;
}

int flyd_config_parse_listen(const char *s, struct sockaddr_storage *out)
{
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)out;
	struct sockaddr_in *a4 = (struct sockaddr_in *)out;
	const char *colon = strrchr(s, ':');
	char host[64], *end;
	size_t hl;
	long port;

	memset(out, 0, sizeof(*out));
	if (colon == NULL || colon == s || colon[1] == '\0')
		return -EINVAL;
	port = strtol(colon + 1, &end, 10);
	if (*end != '\0' || !isdigit((unsigned char)colon[1]) || port > 65535)
		return -EINVAL;
	hl = (size_t)(colon - s);
	if (s[0] == '[') { /* [v6]:port */
		if (hl < 3 || s[hl - 1] != ']' || hl - 2 >= sizeof(host))
			return -EINVAL;
		memcpy(host, s + 1, hl - 2);
		host[hl - 2] = '\0';
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons((uint16_t)port);
		return inet_pton(AF_INET6, host, &a6->sin6_addr) == 1 ? 0 :
		       -EINVAL;
	}
	if (hl >= sizeof(host))
		return -EINVAL;
	memcpy(host, s, hl);
	host[hl] = '\0';
	a4->sin_family = AF_INET;
	a4->sin_port = htons((uint16_t)port);
	return inet_pton(AF_INET, host, &a4->sin_addr) == 1 ? 0 : -EINVAL;
}

/* "metrics_listen": "" (off) or a numeric "HOST:PORT" / "[V6]:PORT". */
static int get_listen(const cJSON *it, struct flyd_config *c, char *err,
		      size_t errcap)
{
	struct sockaddr_storage ss;
	char v[sizeof(c->metrics_listen)];
	int rc = get_str(it, NULL, v, sizeof(v), err, errcap);

	if (rc < 0)
		return rc;
	if (v[0] != '\0' && flyd_config_parse_listen(v, &ss) < 0) {
		snprintf(err, errcap, "config: 'metrics_listen' must be \"\" or "
			 "a numeric HOST:PORT (\"127.0.0.1:9464\", "
			 "\"[::1]:9464\"), not '%.64s'", v);
		return -EINVAL;
	}
	snprintf(c->metrics_listen, sizeof(c->metrics_listen), "%s", v);
	return 0;
}

/* Apply one top-level member to @p c. */
static int apply_member(const cJSON *it, struct flyd_config *c, char *err,
			size_t errcap)
{
	const char *k = it->string;
	char pol[16];
	int rc;

	if (strcmp(k, "backend") == 0)
		return get_str(it, backends, c->backend, sizeof(c->backend),
			       err, errcap);
	if (strcmp(k, "system_db") == 0)
		return get_str(it, NULL, c->system_db, sizeof(c->system_db),
			       err, errcap);
	if (strcmp(k, "policy") == 0) {
		rc = get_str(it, policies, pol, sizeof(pol), err, errcap);
		if (rc == 0)
			c->policy = strcmp(pol, "always") == 0 ?
				FLYD_POLICY_ALWAYS :
				strcmp(pol, "idle") == 0 ? FLYD_POLICY_IDLE :
				FLYD_POLICY_ON_REQUEST;
		return rc;
	}
	if (strcmp(k, "idle_ms") == 0)
		return get_u32(it, 0, 86400000, &c->idle_ms, err, errcap);
	if (strcmp(k, "bench_seconds_per_minute") == 0)
		return get_num(it, 0, 60, 1, &c->bench_s_per_min, err, errcap);
	if (strcmp(k, "job_budget_s") == 0)
		return get_num(it, 0, 3600, 1, &c->job_budget_s, err, errcap);
	if (strcmp(k, "job_max_x") == 0)
		return get_num(it, 0, 100, 0, &c->job_max_x, err, errcap);
	if (strcmp(k, "candidate_timeout_s") == 0)
		return get_num(it, 0, 3600, 1, &c->cand_timeout_s, err, errcap);
	if (strcmp(k, "setup_timeout_s") == 0)
		return get_num(it, 0, 3600, 1, &c->setup_timeout_s, err, errcap);
	if (strcmp(k, "margin") == 0)
		return get_num(it, 0, 1, 0, &c->margin, err, errcap);
	if (strcmp(k, "queue_cap") == 0)
		return get_u32(it, 1, 1000000, &c->queue_cap, err, errcap);
	if (strcmp(k, "shm_capacity") == 0)
		return get_u32(it, 16, 16777216, &c->shm_capacity, err, errcap);
	if (strcmp(k, "shm_max_bytes") == 0)
		return get_u32(it, 16384, 4294967295u, &c->shm_max_bytes, err,
			       errcap);
	if (strcmp(k, "max_clients") == 0)
		return get_u32(it, 1, 1000000, &c->max_clients, err, errcap);
	if (strcmp(k, "frame_cap") == 0)
		return get_u32(it, 256, 16777216, &c->frame_cap, err, errcap);
	if (strcmp(k, "output_buffer_cap") == 0)
		return get_u32(it, 4096, 1073741824, &c->out_buf_cap, err,
			       errcap);
	if (strcmp(k, "frame_timeout_ms") == 0)
		return get_u32(it, 1, 3600000, &c->frame_timeout_ms, err,
			       errcap);
	if (strcmp(k, "idle_timeout_ms") == 0)
		return get_u32(it, 0, 86400000, &c->idle_timeout_ms, err,
			       errcap);
	if (strcmp(k, "admin_group") == 0)
		return get_str(it, NULL, c->admin_group,
			       sizeof(c->admin_group), err, errcap);
	if (strcmp(k, "log_level") == 0)
		return get_str(it, levels, c->log_level, sizeof(c->log_level),
			       err, errcap);
	if (strcmp(k, "bucketing") == 0)
		return get_bucketing(it, c, err, errcap);
	if (strcmp(k, "metrics_listen") == 0)
		return get_listen(it, c, err, errcap);
	if (strcmp(k, "fleet_url") == 0)
		return get_str(it, NULL, c->fleet_url, sizeof(c->fleet_url),
			       err, errcap);
	if (strcmp(k, "fleet_retry_ms") == 0)
		return get_u32(it, 10, 3600000, &c->fleet_retry_ms, err,
			       errcap);
	if (strcmp(k, "fleet_hysteresis") == 0)
		return get_num(it, 0, 1, 0, &c->fleet_hysteresis, err, errcap);
	if (strcmp(k, "fleet_wait_ms") == 0)
		return get_u32(it, 0, 3600000, &c->fleet_wait_ms, err, errcap);
	if (strcmp(k, "fleet_check_ms") == 0)
		return get_u32(it, 0, 3600000, &c->fleet_check_ms, err,
			       errcap);
	snprintf(err, errcap, "config: unknown key '%.64s'", k);
	return -EINVAL;
}

/* Read a whole (small) file.  @return 0, -ENOENT, -EFBIG, -errno. */
static int read_file(const char *path, char **out, size_t *len)
{
	struct stat st;
	char *buf = NULL;
	size_t n;
	FILE *f;
	int rc = 0;

	*out = NULL;
	f = fopen(path, "rb");
	if (f == NULL)
		return -errno;
	if (fstat(fileno(f), &st) < 0 || !S_ISREG(st.st_mode)) {
		rc = -EINVAL;
		goto out;
	}
	if (st.st_size > CONFIG_FILE_MAX) {
		rc = -EFBIG;
		goto out;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (buf == NULL) {
		rc = -ENOMEM;
		goto out;
	}
	n = fread(buf, 1, (size_t)st.st_size, f);
	if (ferror(f)) {
		rc = -EIO;
		free(buf);
		goto out;
	}
	buf[n] = '\0';
	*out = buf;
	*len = n;
out:
	fclose(f);
	return rc;
}

int flyd_config_parse(const char *text, size_t len, const char *name,
		      struct flyd_config *c, char *err, size_t errcap)
{
	struct flyd_config tmp = *c;
	cJSON *root = NULL, *it;
	int rc;

	if (errcap > 0)
		err[0] = '\0';
	if (fly_msg_parse((const uint8_t *)text, len, &root) != 0) {
		snprintf(err, errcap, "config: %s is not a valid JSON object "
			 "(strict: no duplicate keys, no trailing bytes)", name);
		return -EINVAL;
	}
	cJSON_ArrayForEach(it, root) {
		rc = apply_member(it, &tmp, err, errcap);
		if (rc < 0)
			goto out;
	}
	*c = tmp;
	rc = 0;
out:
	cJSON_Delete(root);
	return rc;
}

int flyd_config_load(const char *path, int required, struct flyd_config *c,
		     char *err, size_t errcap)
{
	char *text = NULL;
	size_t len = 0;
	int rc;

	if (errcap > 0)
		err[0] = '\0';
	rc = read_file(path, &text, &len);
	if (rc == -ENOENT && !required)
		return 0;
	if (rc < 0) {
		snprintf(err, errcap, "config: cannot read %s: %s", path,
			 strerror(-rc));
		return rc == -ENOENT ? -ENOENT : -EINVAL;
	}
	rc = flyd_config_parse(text, len, path, c, err, errcap);
	free(text);
	return rc;
}
