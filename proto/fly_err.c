/*
 * fly_err.c -- fly_strerror(): text for 0, negative errno values and the
 * FLY_E_* range.
 *
 * Owns: a thread-local buffer for errno texts.  Thread: any.
 * Invariant: never returns NULL.
 */
#include <stdio.h>
#include <string.h>

#include "fly_abi.h"
#include "fly_err.h"

static const char *const fly_texts[] = {
    [-(FLY_E_PROTO - FLY_E_BASE)] = "malformed or unknown message",
    [-(FLY_E_NOGPU - FLY_E_BASE)] = "GPU index not served by this daemon",
    [-(FLY_E_SCHEMA - FLY_E_BASE)] = "tuning-db schema newer than binary",
    [-(FLY_E_BADOP - FLY_E_BASE)] = "unknown op",
    [-(FLY_E_BADDTYPE - FLY_E_BASE)] = "unknown or unsupported dtype",
    [-(FLY_E_BADDIM - FLY_E_BASE)] = "a dim is <= 0, missing or unexpected",
    [-(FLY_E_OVERFLOW - FLY_E_BASE)] = "product of dims overflows int64",
    [-(FLY_E_KEYLEN - FLY_E_BASE)] = "key too long",
    [-(FLY_E_BADKEY - FLY_E_BASE)] = "key string does not parse",
    [-(FLY_E_BUSY - FLY_E_BASE)] = "tuning queue full",
    [-(FLY_E_PERM - FLY_E_BASE)] = "peer not allowed this request",
    [-(FLY_E_NOTFOUND - FLY_E_BASE)] = "no such key or result",
    [-(FLY_E_TIMEOUT - FLY_E_BASE)] = "deadline passed",
    [-(FLY_E_DOWN - FLY_E_BASE)] = "daemon not reachable",
    [-(FLY_E_VERSION - FLY_E_BASE)] = "protocol or layout version mismatch",
    [-(FLY_E_INVALID - FLY_E_BASE)] = "invalid argument in a request",
    [-(FLY_E_TOOBIG - FLY_E_BASE)] = "frame or file over its cap",
    [-(FLY_E_STORAGE - FLY_E_BASE)] = "tuning DB write failed",
    [-(FLY_E_SHM - FLY_E_BASE)] = "shm table refused",
    [-(FLY_E_GPU - FLY_E_BASE)] = "compute device unavailable",
    [-(FLY_E_MAXCLIENTS - FLY_E_BASE)] = "server at its client limit",
};

static _Thread_local char errbuf[128];

const char *fly_strerror(int err)
{
	if (err == 0)
		return "success";
	if (err <= FLY_E_BASE - 1 && err >= FLY_E_LAST) {
		const char *t = fly_texts[-(err - FLY_E_BASE)];

		return t ? t : "unknown flytuned error";
	}
	if (err < 0 && err > FLY_E_BASE) {
		/* GNU strerror_r (we build with _GNU_SOURCE) may return a
		 * static string instead of filling the buffer. */
		const char *t = strerror_r(-err, errbuf, sizeof(errbuf));

		return t ? t : "unknown error";
	}
	snprintf(errbuf, sizeof(errbuf), "unknown error %d", err);
	return errbuf;
}
