/*
 * file.c -- reading an input file whole, with a size cap: the export files
 * of import and the TunableOp files of import --format tunableop (and the
 * validators of export --format tunableop).
 *
 * Owns: nothing between calls.  Thread: main.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl.h"

#define CTL_IMPORT_CAP (64u * 1024u * 1024u) /* import file size cap */

/* Read a whole file ("-": stdin) of at most CTL_IMPORT_CAP bytes; the
 * size of a regular file is checked before reading anything.
 * @return CTL_OK (caller frees *buf), CTL_INVALID (too big), CTL_ERR. */
int ctl_read_file(const char *file, char **buf, size_t *len)
{
	int fd = strcmp(file, "-") == 0 ? STDIN_FILENO :
					   open(file, O_RDONLY | O_CLOEXEC);
	size_t cap = CTL_IMPORT_CAP, n = 0, size = 65536;
	struct stat st;
	char *p = NULL, *q;
	ssize_t r;

	*buf = NULL;
	if (fd < 0) {
		ctl_err(errno == ENOENT ? "not_found" : "internal",
			"import failed: %s: %s", file, strerror(errno));
		return CTL_ERR;
	}
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
	    (uint64_t)st.st_size > cap) {
		ctl_err("too_big", "import failed: %s: %lld bytes, over the "
			"%zu-byte cap", file, (long long)st.st_size, cap);
		goto err_too_big;
	}
	for (;;) {
		if (n == size || p == NULL) {
			size = p == NULL ? size : size * 2;
			q = realloc(p, size + 1);
			if (q == NULL)
				goto err_io;
			p = q;
		}
		r = read(fd, p + n, size - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			goto err_io;
		if (r == 0)
			break;
		n += (size_t)r;
		if (n > cap) {
			ctl_err("too_big", "import failed: %s: over the "
				"%zu-byte cap", file, cap);
			goto err_too_big;
		}
	}
	if (fd != STDIN_FILENO)
		close(fd);
	p[n] = '\0';
	*buf = p;
	*len = n;
	return CTL_OK;

err_io:
	ctl_err("internal", "import failed: %s: %s", file, strerror(errno));
	free(p);
	if (fd != STDIN_FILENO)
		close(fd);
	return CTL_ERR;
err_too_big:
	free(p);
	if (fd != STDIN_FILENO)
		close(fd);
	return CTL_INVALID;
}
