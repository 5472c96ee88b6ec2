/*
 * fuzz.h -- what the libFuzzer harnesses of tests/fuzz share: a check that
 * aborts (so libFuzzer records the input as a crash) with the failed
 * condition on stderr.  Built only by `make fuzz` / `make fuzz-check`.
 */
#ifndef FLY_FUZZ_H
#define FLY_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define FUZZ_CHECK(c)                                                         \
	do {                                                                  \
		if (!(c)) {                                                   \
			fprintf(stderr, "%s:%d: check failed: %s\n",          \
				__FILE__, __LINE__, #c);                      \
			abort();                                              \
		}                                                             \
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif /* FLY_FUZZ_H */
