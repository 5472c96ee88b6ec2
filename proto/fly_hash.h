/*
 * fly_hash.h -- the one hash of the project: 64-bit FNV-1a, and the one
 * finalizer (fmix64) that every table index derived from it goes through.
 *
 * Owns: nothing (pure functions).  Thread: any.
 *
 * Raw FNV-1a values are stable identities (they are stored or compared
 * across processes and versions): the shm slot's key hash (layout 6:
 * fly__hash_words2 over the key's problem, fly_shm.c), the device id
 * (store.c, hex of the fingerprint line's hash), the case seed of a key
 * (tuner.c).  FNV-1a's low bits depend only on the low bits of the input's
 * bytes, so keys that differ in one digit ("n=4097", "n=4098") share low
 * bits: a table never masks a raw hash, it masks fly__hash_mix() of it
 * (measured before the finalizer was added to the shm table: a 20,000-key
 * table answered a lookup in ~950 ns, its probe chains at the cap).
 */
#ifndef FLY_HASH_H
#define FLY_HASH_H

#include <stddef.h>
#include <stdint.h>

#define FLY_HASH_SEED 0xcbf29ce484222325ull  /* FNV-1a 64 offset basis */
#define FLY_HASH_PRIME 0x100000001b3ull      /* FNV-1a 64 prime */

/* FNV-1a 64 over @p n bytes at @p p, continuing from @p h (start from
 * FLY_HASH_SEED); so a hash of several pieces is their concatenation's. */
uint64_t fly__hash_more(uint64_t h, const void *p, size_t n);
/* FNV-1a 64 of @p n bytes. */
uint64_t fly__hash(const void *p, size_t n);
/* FNV-1a 64 of a NUL-terminated string (without the NUL). */
uint64_t fly__hash_str(const char *s);
/* FNV-1a 64 stepped a 64-bit word at a time (h = (h ^ w) * prime), in two
 * lanes -- the even words in one, the odd in the other, both from the
 * seed -- joined by one more step (the odd lane rotated by 32 bits): for
 * fixed-size records hashed where a table lookup waits on them (the shm
 * table's problem hash and record checksum, the client's process cache),
 * 8x fewer multiplies than bytes, and in two chains of n / 2 + 1 where
 * one lane was a chain of n (issue 19; the one-lane fly__hash_words of
 * layouts 5 and before is gone).  Inline: a call was part of the cost.
 * _from: word 0 given apart (@p w0), then the @p n words at @p w (a
 * record's checksum bits are masked out of its word 0). */
static inline uint64_t fly__hash_words2_from(uint64_t w0, const uint64_t *w,
					     size_t n)
{
	uint64_t a = (FLY_HASH_SEED ^ w0) * FLY_HASH_PRIME, b = FLY_HASH_SEED;
	size_t i = 0;

	for (; i + 1 < n; i += 2) {
		b = (b ^ w[i]) * FLY_HASH_PRIME;
		a = (a ^ w[i + 1]) * FLY_HASH_PRIME;
	}
	if (i < n)
		b = (b ^ w[i]) * FLY_HASH_PRIME;
	return (a ^ (b << 32 | b >> 32)) * FLY_HASH_PRIME;
}

/* fly__hash_words2 of @p n >= 1 words at @p w. */
static inline uint64_t fly__hash_words2(const uint64_t *w, size_t n)
{
	return fly__hash_words2_from(w[0], w + 1, n - 1);
}
/* The finalizer (MurmurHash3's fmix64): every bit of @p h reaches every
 * bit of the result, so its low bits can index a table. */
uint64_t fly__hash_mix(uint64_t h);
/* A 64-bit hash folded to 32 bits (h ^ h >> 32), for 32-bit checksums. */
uint32_t fly__hash_fold32(uint64_t h);

#endif /* FLY_HASH_H */
