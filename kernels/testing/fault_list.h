/*
 * fault_list.h -- which test-only fault variants are switched on: the
 * list the CPU ones (faulty.c) and the GPU ones (gpu_faulty.hip) both
 * read.
 *
 * Owns: nothing.  Thread: any (reads the environment and, for "@PATH",
 * the file at every call).
 */
#ifndef FLYK_TESTING_FAULT_LIST_H
#define FLYK_TESTING_FAULT_LIST_H

#ifdef __cplusplus
extern "C" {
#endif

/* Whether FLYK_TESTING_FAULTS -- or, when it is "@PATH", the first line
 * of the file PATH, read now, so a test can switch a running daemon's
 * fault -- lists @p name as one whole comma-separated item ("crashy"
 * does not enable "crash"). */
int flyk_testing_fault_enabled(const char *name);

#ifdef __cplusplus
}
#endif

#endif /* FLYK_TESTING_FAULT_LIST_H */
