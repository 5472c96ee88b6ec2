/*
 * backend.h -- choose and load the kernel backend for the worker process.
 *
 * Owns: the dlopen() handle of a GPU backend library and the opened
 * flyk_device.  Thread: the worker process's main thread.
 *
 * Names: "cpu" is flyk_cpu_backend() (linked in).  "cuda" / "hip" load
 * libflykernels_cuda.so / libflykernels_hip.so from the first directory
 * that has it, in order: $FLYTUNED_KERNELS_DIR, the directory of the
 * running executable (/proc/self/exe), FLYD_PREFIX "/lib/flytuned" (the
 * Makefile compiles in PREFIX); then
 * dlsym("flyk_gpu_backend").  "auto" tries cuda, then hip, then cpu; a
 * GPU backend that does not load or whose open(device) fails falls back
 * (logged) when "auto", and is an error when named explicitly.
 */
#ifndef FLYD_BACKEND_H
#define FLYD_BACKEND_H

#include <stddef.h>

#include "flyk.h"

#ifndef FLYD_PREFIX
#define FLYD_PREFIX "/usr/local"
#endif

struct flyd_backend {
	const struct flyk_backend *kb; /* the backend's table */
	struct flyk_device *dev;       /* opened device */
	void *dl;                      /* dlopen handle; NULL for cpu */
};

/* Open backend @p name ("auto", "cpu", "cuda", "hip") on device @p index.
 * @param[out] out  filled on success (zeroed on failure); close with
 *                  flyd_backend_close().
 * @return 0, -EINVAL (unknown name), -ENOENT (library or symbol not
 *         found), -ENODEV or the backend's open() error (explicit name). */
int flyd_backend_open(const char *name, int index, struct flyd_backend *out);
/* Close the device and unload the library; NULL or zeroed: no-op. */
void flyd_backend_close(struct flyd_backend *be);

/* Find library file @p lib in the search order above.
 * @param[out] out  the full path (@p cap bytes).
 * @return 0, -ENOENT (in no directory), -ENAMETOOLONG. */
int flyd_backend_find(const char *lib, char *out, size_t cap);

#endif /* FLYD_BACKEND_H */
