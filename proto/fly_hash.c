/*
 * fly_hash.c -- FNV-1a 64 and its finalizer (see fly_hash.h).
 *
 * Owns: nothing.  Thread: any.
 */
#include "fly_hash.h"

uint64_t fly__hash_more(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= FLY_HASH_PRIME;
	}
	return h;
}

uint64_t fly__hash(const void *p, size_t n)
{
	return fly__hash_more(FLY_HASH_SEED, p, n);
}

uint64_t fly__hash_str(const char *s)
{
	uint64_t h = FLY_HASH_SEED;

	for (const unsigned char *b = (const unsigned char *)s; *b; b++) {
		h ^= *b;
		h *= FLY_HASH_PRIME;
	}
	return h;
}

uint64_t fly__hash_mix(uint64_t h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ull;
	h ^= h >> 33;
	return h;
}

uint32_t fly__hash_fold32(uint64_t h)
{
	return (uint32_t)(h ^ (h >> 32));
}
