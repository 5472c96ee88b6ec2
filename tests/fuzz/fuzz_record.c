/*
 * fuzz_record.c -- libFuzzer harness: the record validator of imports
 * (proto/fly_record.c's fly_record_check), the one function flytune-ctl
 * runs over every row of an import file before it sends any of it and
 * the daemon over every row of an import request and every fleet row.
 *
 * The input is parsed as JSON (cJSON, as both readers do); the validator
 * runs on the document itself and, where it holds a "results" array (an
 * export file), on each element.  Checks: it answers 0 or -1, the same
 * whatever the reason buffer's size; on -1 it says why (a non-empty,
 * NUL-terminated reason within its buffer; a 1-byte buffer holds the
 * NUL); a record it accepts prints, and the print parses back to a
 * record it accepts again (an export of what was imported imports).
 */
#include <string.h>

#include <cjson/cJSON.h>

#include "fly_record.h"
#include "fuzz.h"

static void check_one(const cJSON *r)
{
	char why[128], tiny[1];
	int rc;

	memset(why, 'x', sizeof(why));
	rc = fly_record_check(r, why, sizeof(why));
	FUZZ_CHECK(rc == 0 || rc == -1);
	tiny[0] = 'x';
	FUZZ_CHECK(fly_record_check(r, tiny, sizeof(tiny)) == rc);
	if (rc < 0) {
		FUZZ_CHECK(memchr(why, '\0', sizeof(why)) != NULL);
		FUZZ_CHECK(why[0] != '\0');
		FUZZ_CHECK(tiny[0] == '\0');
	} else {
		char *s = cJSON_PrintUnformatted(r);
		cJSON *back;

		FUZZ_CHECK(s != NULL);
		back = cJSON_Parse(s);
		FUZZ_CHECK(back != NULL);
		FUZZ_CHECK(fly_record_check(back, why, sizeof(why)) == 0);
		cJSON_Delete(back);
		cJSON_free(s);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	cJSON *doc = cJSON_ParseWithLength((const char *)data, size);
	const cJSON *res, *r;

	if (doc == NULL)
		return 0;
	check_one(doc);
	res = cJSON_GetObjectItemCaseSensitive(doc, "results");
	if (cJSON_IsArray(res)) {
		cJSON_ArrayForEach(r, res)
			check_one(r);
	}
	cJSON_Delete(doc);
	return 0;
}
