#!/bin/sh
# srcid.sh -- the kernels' source id: the first 12 hex digits of a SHA-256
# over the path and content of every source file under kernels/ (C, HIP,
# CUDA, headers), in a fixed order.  The build compiles it into
# flyk_libver() ("FLYK_VERSION+ID", the lib= of every device fingerprint),
# so a build whose kernels differ in any byte has another device identity
# and re-tunes, where a forgotten FLYK_VERSION bump served the old build's
# winners (and params) to new kernels.  Run from the project root.
set -eu
find kernels -type f \( -name '*.c' -o -name '*.h' -o -name '*.hip' \
	-o -name '*.cu' -o -name '*.cuh' \) | LC_ALL=C sort |
	xargs sha256sum | sha256sum | cut -c1-12
