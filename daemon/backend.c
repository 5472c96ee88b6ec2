/*
 * backend.c -- pick, load and open the kernel backend (see backend.h).
 *
 * Owns: the dlopen() handle and the device of a struct flyd_backend.
 * Thread: the worker process's main thread.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "log.h"

/* The directory of the running executable into @p out ("" if unknown). */
static void exe_dir(char *out, size_t cap)
{
	char buf[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
	char *slash;

	out[0] = '\0';
	if (n <= 0)
		return;
	buf[n] = '\0';
	slash = strrchr(buf, '/');
	if (slash == NULL)
		return;
	*slash = '\0';
	snprintf(out, cap, "%s", buf);
}

int flyd_backend_find(const char *lib, char *out, size_t cap)
{
	char dirs[3][PATH_MAX];
	const char *env = getenv("FLYTUNED_KERNELS_DIR");

	snprintf(dirs[0], sizeof(dirs[0]), "%s", env ? env : "");
	exe_dir(dirs[1], sizeof(dirs[1]));
	snprintf(dirs[2], sizeof(dirs[2]), "%s/lib/flytuned", FLYD_PREFIX);
	for (int i = 0; i < 3; i++) {
		int n;

		if (dirs[i][0] == '\0')
			continue;
		n = snprintf(out, cap, "%s/%s", dirs[i], lib);
		if (n < 0 || (size_t)n >= cap)
			return -ENAMETOOLONG;
		if (access(out, R_OK) == 0)
			return 0;
	}
	return -ENOENT;
}

/* dlopen a GPU backend library and resolve its table. */
static int gpu_load(const char *name, struct flyd_backend *be)
{
	char lib[64], path[PATH_MAX];
	flyk_backend_fn fn;
	int rc;

	snprintf(lib, sizeof(lib), "libflykernels_%s.so", name);
	rc = flyd_backend_find(lib, path, sizeof(path));
	if (rc < 0) {
		flyd_log(FLYD_LOG_INFO, "backend_absent", "backend=%s lib=%s",
			 name, lib);
		return rc;
	}
	be->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (be->dl == NULL) {
		char q[256];

		flyd_log(FLYD_LOG_WARN, "backend_dlopen_failed",
			 "backend=%s path=%s error=%s", name, path,
			 flyd_log_q(dlerror(), q, sizeof(q)));
		return -ENOENT;
	}
	*(void **)&fn = dlsym(be->dl, "flyk_gpu_backend");
	be->kb = fn != NULL ? fn() : NULL;
	if (be->kb == NULL) {
		flyd_log(FLYD_LOG_WARN, "backend_symbol_missing",
			 "backend=%s path=%s", name, path);
		dlclose(be->dl);
		be->dl = NULL;
		return -ENOENT;
	}
	return 0;
}

/* Load (for GPU names) and open one backend. */
static int open_one(const char *name, int index, struct flyd_backend *be)
{
	int rc;

	memset(be, 0, sizeof(*be));
	if (strcmp(name, "cpu") == 0) {
		be->kb = flyk_cpu_backend();
	} else {
		rc = gpu_load(name, be);
		if (rc < 0)
			return rc;
	}
	rc = be->kb->open(index, &be->dev);
	if (rc < 0) {
		flyd_log(FLYD_LOG_WARN, "backend_open_failed",
			 "backend=%s device=%d rc=%d", name, index, rc);
		flyd_backend_close(be);
		return rc;
	}
	return 0;
}

int flyd_backend_open(const char *name, int index, struct flyd_backend *out)
{
	static const char *const order[] = { "cuda", "hip", "cpu" };
	int rc = -ENOENT;

	memset(out, 0, sizeof(*out));
	if (name == NULL)
		return -EINVAL;
	if (strcmp(name, "cpu") == 0 || strcmp(name, "cuda") == 0 ||
	    strcmp(name, "hip") == 0)
		return open_one(name, index, out);
	if (strcmp(name, "auto") != 0)
		return -EINVAL;
	for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
		rc = open_one(order[i], index, out);
		if (rc == 0)
			return 0;
	}
	return rc;
}

void flyd_backend_close(struct flyd_backend *be)
{
	if (be == NULL)
		return;
	if (be->dev != NULL && be->kb != NULL && be->kb->close != NULL)
		be->kb->close(be->dev);
	if (be->dl != NULL)
		dlclose(be->dl);
	memset(be, 0, sizeof(*be));
}
