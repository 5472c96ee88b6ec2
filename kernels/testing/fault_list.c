/*
 * fault_list.c -- FLYK_TESTING_FAULTS (see fault_list.h): the one parser
 * of the list for the CPU (faulty.c) and GPU (gpu_faulty.hip) test-only
 * variants.  Linked only into test builds.
 *
 * Owns: nothing.  Thread: any.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault_list.h"

#define FAULT_LIST_MAX 256

/* The fault list: FLYK_TESTING_FAULTS, or the first line of the file it
 * names as "@PATH" ("" when unset or unreadable). */
static void fault_list(char *buf, size_t cap)
{
	const char *env = getenv("FLYK_TESTING_FAULTS");
	FILE *f;

	buf[0] = '\0';
	if (env == NULL)
		return;
	if (env[0] != '@') {
		snprintf(buf, cap, "%s", env);
		return;
	}
	f = fopen(env + 1, "r");
	if (f == NULL)
		return;
	if (fgets(buf, (int)cap, f) == NULL)
		buf[0] = '\0';
	fclose(f);
	buf[strcspn(buf, "\r\n")] = '\0';
}

int flyk_testing_fault_enabled(const char *name)
{
	char buf[FAULT_LIST_MAX];
	const char *s = buf;
	size_t len = strlen(name);

	fault_list(buf, sizeof(buf));
	while (*s) {
		size_t item = strcspn(s, ",");

		if (item == len && strncmp(s, name, len) == 0)
			return 1;
		s += item;
		if (*s == ',')
			s++;
	}
	return 0;
}
