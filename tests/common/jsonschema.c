/*
 * jsonschema.c -- the tests' JSON Schema subset validator (see
 * jsonschema.h for the keywords).
 *
 * Owns: the schema documents loaded for one validate call.  Thread: any.
 */
#include <math.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonschema.h"

#ifndef FLY_SRC_DIR
#define FLY_SRC_DIR "."
#endif

#define MAX_DOCS 8

struct vctx {
	char dir[1024]; /* directory of the schema files */
	char names[MAX_DOCS][128];
	cJSON *docs[MAX_DOCS];
	int ndocs;
	char *err;
	size_t errcap;
	int quiet; /* inside oneOf/anyOf: no messages */
	int fatal; /* schema problem: -1 */
};

static void verr(struct vctx *c, const char *path, const char *fmt, ...)
{
	va_list ap;
	size_t n;

	if (c->quiet || c->err == NULL || c->errcap == 0)
		return;
	n = (size_t)snprintf(c->err, c->errcap, "%s: ", *path ? path : "$");
	if (n >= c->errcap)
		return;
	va_start(ap, fmt);
	vsnprintf(c->err + n, c->errcap - n, fmt, ap);
	va_end(ap);
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long n;

	if (f == NULL)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 &&
	    fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1))) {
		if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
			free(buf);
			buf = NULL;
		} else {
			buf[n] = '\0';
		}
	}
	fclose(f);
	return buf;
}

/* Load (once per call) the schema file @p name of c->dir. */
static cJSON *doc_get(struct vctx *c, const char *name)
{
	char path[1200];
	char *text;
	cJSON *j;

	for (int i = 0; i < c->ndocs; i++) {
		if (!strcmp(c->names[i], name))
			return c->docs[i];
	}
	if (c->ndocs == MAX_DOCS || strlen(name) >= sizeof(c->names[0]))
		return NULL;
	snprintf(path, sizeof(path), "%s/%s", c->dir, name);
	text = slurp(path);
	if (text == NULL)
		return NULL;
	j = cJSON_Parse(text);
	free(text);
	if (j == NULL)
		return NULL;
	strcpy(c->names[c->ndocs], name);
	c->docs[c->ndocs++] = j;
	return j;
}

static int validate(struct vctx *c, const cJSON *s, const cJSON *root,
		    const cJSON *d, const char *path);

/* Resolve "#/$defs/x" in @p root or "file.json#/$defs/x". */
static int do_ref(struct vctx *c, const char *ref, const cJSON *root,
		  const cJSON *d, const char *path)
{
	const char *hash = strchr(ref, '#');
	char file[128];
	const cJSON *r = root, *defs, *t;

	if (hash == NULL || strncmp(hash, "#/$defs/", 8) != 0 ||
	    (size_t)(hash - ref) >= sizeof(file)) {
		c->fatal = 1;
		verr(c, path, "unsupported $ref %s", ref);
		return 1;
	}
	if (hash != ref) {
		memcpy(file, ref, (size_t)(hash - ref));
		file[hash - ref] = '\0';
		r = doc_get(c, file);
	}
	defs = r ? cJSON_GetObjectItemCaseSensitive(r, "$defs") : NULL;
	t = defs ? cJSON_GetObjectItemCaseSensitive(defs, hash + 8) : NULL;
	if (t == NULL) {
		c->fatal = 1;
		verr(c, path, "unresolved $ref %s", ref);
		return 1;
	}
	return validate(c, t, r, d, path);
}

static int type_is(const char *t, const cJSON *d)
{
	if (!strcmp(t, "object"))
		return cJSON_IsObject(d);
	if (!strcmp(t, "array"))
		return cJSON_IsArray(d);
	if (!strcmp(t, "string"))
		return cJSON_IsString(d);
	if (!strcmp(t, "boolean"))
		return cJSON_IsBool(d);
	if (!strcmp(t, "null"))
		return cJSON_IsNull(d);
	if (!strcmp(t, "number"))
		return cJSON_IsNumber(d);
	if (!strcmp(t, "integer"))
		return cJSON_IsNumber(d) && isfinite(d->valuedouble) &&
		       d->valuedouble == floor(d->valuedouble);
	return -1;
}

static int check_type(struct vctx *c, const cJSON *t, const cJSON *d,
		      const char *path)
{
	const cJSON *e;
	int r;

	if (cJSON_IsString(t)) {
		r = type_is(t->valuestring, d);
	} else if (cJSON_IsArray(t)) {
		r = 0;
		cJSON_ArrayForEach(e, t)
		{
			int one =
			    cJSON_IsString(e) ? type_is(e->valuestring, d) : -1;

			if (one < 0) {
				r = -1;
				break;
			}
			r |= one;
		}
	} else {
		r = -1;
	}
	if (r < 0) {
		c->fatal = 1;
		verr(c, path, "bad \"type\" in schema");
		return 1;
	}
	if (!r)
		verr(c, path, "wrong type");
	return !r;
}

/* Number of code points of a UTF-8 string. */
static size_t u8len(const char *s)
{
	size_t n = 0;

	for (; *s; s++)
		n += ((unsigned char)*s & 0xc0) != 0x80;
	return n;
}

static int check_pattern(struct vctx *c, const char *pat, const cJSON *d,
			 const char *path)
{
	regex_t re;
	int r;

	if (!cJSON_IsString(d))
		return 0;
	if (regcomp(&re, pat, REG_EXTENDED | REG_NOSUB) != 0) {
		c->fatal = 1;
		verr(c, path, "bad pattern %s", pat);
		return 1;
	}
	r = regexec(&re, d->valuestring, 0, NULL, 0);
	regfree(&re);
	if (r != 0)
		verr(c, path, "\"%s\" does not match %s", d->valuestring, pat);
	return r != 0;
}

static int check_object(struct vctx *c, const cJSON *s, const cJSON *root,
			const cJSON *d, const char *path)
{
	const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
	const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
	const cJSON *add =
	    cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
	const cJSON *e;
	char sub[512];

	if (!cJSON_IsObject(d))
		return 0;
	cJSON_ArrayForEach(e, req)
	{
		if (cJSON_IsString(e) &&
		    !cJSON_GetObjectItemCaseSensitive(d, e->valuestring)) {
			verr(c, path, "missing required \"%s\"",
			     e->valuestring);
			return 1;
		}
	}
	cJSON_ArrayForEach(e, d)
	{
		const cJSON *ps =
		    props ? cJSON_GetObjectItemCaseSensitive(props, e->string)
			  : NULL;

		snprintf(sub, sizeof(sub), "%s.%s", path, e->string);
		if (ps) {
			if (validate(c, ps, root, e, sub))
				return 1;
		} else if (cJSON_IsFalse(add)) {
			verr(c, sub, "additional property not allowed");
			return 1;
		} else if (cJSON_IsObject(add)) {
			if (validate(c, add, root, e, sub))
				return 1;
		}
	}
	return 0;
}

static int check_array(struct vctx *c, const cJSON *s, const cJSON *root,
		       const cJSON *d, const char *path)
{
	const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
	const cJSON *mn = cJSON_GetObjectItemCaseSensitive(s, "minItems");
	const cJSON *mx = cJSON_GetObjectItemCaseSensitive(s, "maxItems");
	const cJSON *e;
	int n = 0;
	char sub[512];

	if (!cJSON_IsArray(d))
		return 0;
	if (mn && cJSON_GetArraySize(d) < mn->valueint) {
		verr(c, path, "fewer than %d items", mn->valueint);
		return 1;
	}
	if (mx && cJSON_GetArraySize(d) > mx->valueint) {
		verr(c, path, "more than %d items", mx->valueint);
		return 1;
	}
	cJSON_ArrayForEach(e, d)
	{
		snprintf(sub, sizeof(sub), "%s[%d]", path, n++);
		if (items && validate(c, items, root, e, sub))
			return 1;
	}
	return 0;
}

static int check_scalar(struct vctx *c, const cJSON *s, const cJSON *d,
			const char *path)
{
	const cJSON *k;

	if (cJSON_IsNumber(d)) {
		k = cJSON_GetObjectItemCaseSensitive(s, "minimum");
		if (k && d->valuedouble < k->valuedouble) {
			verr(c, path, "below minimum %g", k->valuedouble);
			return 1;
		}
		k = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMinimum");
		if (k && d->valuedouble <= k->valuedouble) {
			verr(c, path, "not above %g", k->valuedouble);
			return 1;
		}
		k = cJSON_GetObjectItemCaseSensitive(s, "maximum");
		if (k && d->valuedouble > k->valuedouble) {
			verr(c, path, "above maximum %g", k->valuedouble);
			return 1;
		}
	}
	if (cJSON_IsString(d)) {
		size_t n = u8len(d->valuestring);

		k = cJSON_GetObjectItemCaseSensitive(s, "minLength");
		if (k && n < (size_t)k->valueint) {
			verr(c, path, "shorter than %d", k->valueint);
			return 1;
		}
		k = cJSON_GetObjectItemCaseSensitive(s, "maxLength");
		if (k && n > (size_t)k->valueint) {
			verr(c, path, "longer than %d", k->valueint);
			return 1;
		}
	}
	k = cJSON_GetObjectItemCaseSensitive(s, "pattern");
	if (k && check_pattern(c, k->valuestring, d, path))
		return 1;
	return 0;
}

static int check_enum_const(struct vctx *c, const cJSON *s, const cJSON *d,
			    const char *path)
{
	const cJSON *k = cJSON_GetObjectItemCaseSensitive(s, "const");
	const cJSON *e;

	if (k && !cJSON_Compare(k, d, 1)) {
		verr(c, path, "not the const value");
		return 1;
	}
	k = cJSON_GetObjectItemCaseSensitive(s, "enum");
	if (k == NULL)
		return 0;
	cJSON_ArrayForEach(e, k)
	{
		if (cJSON_Compare(e, d, 1))
			return 0;
	}
	verr(c, path, "not one of the enum values");
	return 1;
}

/* oneOf (@p one) / anyOf: count the branches that accept @p d. */
static int check_of(struct vctx *c, const cJSON *list, int one,
		    const cJSON *root, const cJSON *d, const char *path)
{
	const cJSON *e;
	int ok = 0, quiet = c->quiet;

	c->quiet = 1;
	cJSON_ArrayForEach(e, list)
	{
		if (validate(c, e, root, d, path) == 0)
			ok++;
	}
	c->quiet = quiet;
	if (one ? ok == 1 : ok >= 1)
		return 0;
	verr(c, path, "%s: %d branches match", one ? "oneOf" : "anyOf", ok);
	return 1;
}

static const char *const known[] = {
    "type",	   "properties", "required", "additionalProperties",
    "enum",	   "const",	 "items",    "minItems",
    "maxItems",	   "minimum",	 "maximum",  "exclusiveMinimum",
    "minLength",
    "maxLength",   "pattern",	 "$ref",     "oneOf",
    "anyOf",	   "$schema",	 "$id",	     "title",
    "description", "$defs",	 "$comment", "examples",
    "default",	   NULL};

static int check_keywords(struct vctx *c, const cJSON *s, const char *path)
{
	const cJSON *e;

	cJSON_ArrayForEach(e, s)
	{
		int ok = !strncmp(e->string, "x-", 2);

		for (int i = 0; !ok && known[i]; i++)
			ok = !strcmp(known[i], e->string);
		if (!ok) {
			c->fatal = 1;
			verr(c, path, "unsupported keyword \"%s\"", e->string);
			return 1;
		}
	}
	return 0;
}

static int validate(struct vctx *c, const cJSON *s, const cJSON *root,
		    const cJSON *d, const char *path)
{
	const cJSON *k;

	if (cJSON_IsTrue(s))
		return 0;
	if (!cJSON_IsObject(s)) {
		c->fatal = 1;
		verr(c, path, "schema is not an object");
		return 1;
	}
	if (check_keywords(c, s, path))
		return 1;
	k = cJSON_GetObjectItemCaseSensitive(s, "$ref");
	if (k && do_ref(c, k->valuestring, root, d, path))
		return 1;
	k = cJSON_GetObjectItemCaseSensitive(s, "type");
	if (k && check_type(c, k, d, path))
		return 1;
	if (check_enum_const(c, s, d, path) || check_scalar(c, s, d, path) ||
	    check_object(c, s, root, d, path) ||
	    check_array(c, s, root, d, path))
		return 1;
	k = cJSON_GetObjectItemCaseSensitive(s, "oneOf");
	if (k && check_of(c, k, 1, root, d, path))
		return 1;
	k = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
	if (k && check_of(c, k, 0, root, d, path))
		return 1;
	return 0;
}

int fly_test_schema_validate(const char *schema_path, const cJSON *doc,
			     char *err, size_t errcap)
{
	struct vctx c;
	const char *slash;
	cJSON *root;
	int rc;

	memset(&c, 0, sizeof(c));
	c.err = err;
	c.errcap = errcap;
	if (err && errcap)
		err[0] = '\0';
	slash = strrchr(schema_path, '/');
	if (schema_path[0] == '/' && slash) {
		snprintf(c.dir, sizeof(c.dir), "%.*s",
			 (int)(slash - schema_path), schema_path);
		schema_path = slash + 1;
	} else {
		snprintf(c.dir, sizeof(c.dir), "%s/schemas", FLY_SRC_DIR);
	}
	root = doc_get(&c, schema_path);
	if (root == NULL) {
		verr(&c, "", "cannot load schema %s/%s", c.dir, schema_path);
		rc = -1;
	} else {
		rc = validate(&c, root, root, doc, "$") ? 1 : 0;
		if (c.fatal)
			rc = -1;
	}
	for (int i = 0; i < c.ndocs; i++)
		cJSON_Delete(c.docs[i]);
	return rc;
}

int fly_test_schema_validate_text(const char *schema_name, const char *json,
				  char *err, size_t cap)
{
	cJSON *j = cJSON_Parse(json);
	int rc;

	if (j == NULL) {
		if (err && cap)
			snprintf(err, cap, "unparsable JSON");
		return 1;
	}
	rc = fly_test_schema_validate(schema_name, j, err, cap);
	cJSON_Delete(j);
	return rc;
}
