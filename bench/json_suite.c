/*
 * json_suite.c -- one JSONTestSuite case through fly_msg_parse, for
 * bench/json_suite.py (RELIABILITY.md B9; not CI: the suite is not in
 * this tree).
 *
 *   json_suite FILE
 *
 * Reads FILE's bytes as the value of a one-member object ({"v": BYTES})
 * -- a message must be an object -- and, when FILE is itself an object,
 * as it stands too.  Prints "accepted" when every reading parsed,
 * "refused" when none did, "mixed" otherwise.
 * Owns: its buffers.  Thread: one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "fly_msg.h"

static int parses(const uint8_t *b, size_t n)
{
	cJSON *j = NULL;
	int rc = fly_msg_parse(b, n, &j);

	cJSON_Delete(j);
	return rc == 0;
}

int main(int argc, char **argv)
{
	static uint8_t buf[1 << 20];
	static const char pre[] = "{\"v\":";
	FILE *f;
	size_t n, p = sizeof(pre) - 1, i = 0;
	int wrapped, alone = -1;

	if (argc != 2 || (f = fopen(argv[1], "rb")) == NULL) {
		fprintf(stderr, "usage: json_suite FILE\n");
		return 2;
	}
	memcpy(buf, pre, p);
	n = fread(buf + p, 1, sizeof(buf) - p - 2, f);
	fclose(f);
	buf[p + n] = '}';
	wrapped = parses(buf, p + n + 1);
	while (i < n && strchr(" \t\r\n", buf[p + i]) && buf[p + i])
		i++;
	if (i < n && buf[p + i] == '{')
		alone = parses(buf + p, n);
	if (alone < 0 || alone == wrapped)
		puts(wrapped ? "accepted" : "refused");
	else
		puts("mixed");
	return 0;
}
