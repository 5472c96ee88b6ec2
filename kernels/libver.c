/*
 * libver.c -- flyk_libver(): the kernel library's identity in results,
 * FLYK_VERSION and the kernels' source id (tools/srcid.sh, passed by the
 * Makefile as FLYK_SOURCE_ID; "unknown" when built without it).  Built
 * into every kernel library.
 *
 * Owns: nothing.  Thread: any.
 */
#include "flyk.h"

#ifndef FLYK_SOURCE_ID
#define FLYK_SOURCE_ID "unknown"
#endif

const char *flyk_libver(void)
{
	return FLYK_VERSION "+" FLYK_SOURCE_ID;
}
