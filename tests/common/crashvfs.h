/*
 * crashvfs.h -- an SQLite VFS that simulates a power cut (tests only;
 * issue 21, RELIABILITY.md F3).
 *
 * Registered as the default VFS over the real one ("unix"), it keeps every
 * write and truncate not yet covered by an xSync of its file in memory
 * (reads see them), and writes them to the real file only at that xSync:
 * the real file is the platter.  At the power cut, which comes right after
 * the Nth mutating call (xWrite, xTruncate, xSync, xDelete), the unsynced
 * operations are discarded, torn or partly kept, by the mode, and from then
 * on every mutating call fails (SQLITE_IOERR_*): nothing reaches the
 * platter any more.  Reads, locks and the WAL index (xShm*, not persistent
 * data: SQLite rebuilds it on recovery) go to the real VFS.  Memory-mapped
 * I/O is off (the io methods are version 2: no xFetch), so every page read
 * goes through the overlay.
 *
 * Simplifications: file creation and deletion are durable at once (the
 * directory is not modelled); temporary files (no name) are passed through.
 * Thread: one connection in one thread at a time (the store's use).
 */
#ifndef FLY_TEST_CRASHVFS_H
#define FLY_TEST_CRASHVFS_H

#include <stdint.h>

enum crashvfs_mode {
	CRASHVFS_DROP = 0, /* every unsynced write lost */
	CRASHVFS_TEAR = 1, /* lost, but the last write's first k sectors
			      (k random, 0 .. all but one) reached the disk */
	CRASHVFS_RANDOM = 2, /* each unsynced sector reached the disk or not,
				in any order (SQLite test6.c's model) */
};

#define CRASHVFS_SECTOR 512

/* Register the VFS as the default (once; later calls only reset).  Clears
 * the counters, forgets pending writes and arms no cut.
 * @return 0, or -1 when SQLite has no "unix" VFS to wrap. */
int crashvfs_install(void);
/* Arm the cut after mutating call @p n (0: never) counted from now, in
 * @p mode, with @p seed for the tear point and the random mode.  Pending
 * writes are kept (the files open stay as they are). */
void crashvfs_arm(uint64_t n, enum crashvfs_mode mode, uint64_t seed);
/* Mutating calls counted since the last install or arm. */
uint64_t crashvfs_calls(void);
/* Whether the power has been cut. */
int crashvfs_is_cut(void);
/* Bytes the cut discarded (unsynced and not written) and wrote anyway. */
uint64_t crashvfs_lost_bytes(void);
uint64_t crashvfs_kept_bytes(void);
/* Power back on: forget pending state (there is none after a cut), clear
 * the cut; files opened from now on see the platter only. */
void crashvfs_restore(void);

#endif
