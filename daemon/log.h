/*
 * log.h -- one line per event to stderr: "LEVEL event key=value ...";
 * when stderr is the journal ($JOURNAL_STREAM matches it), "<PRIO>LEVEL
 * event ..." without the timestamp (PRIO: 7 debug, 6 info, 4 warn, 3 err,
 * 2 crit), so journalctl -p filters by level.
 *
 * Thread: any (each line is written with one write(2)).  Values with
 * spaces or quotes are quoted by the caller through flyd_log_q().
 * Example:
 *   flyd_log(FLYD_LOG_INFO, "tuned", "key=%s variant=%s median_us=%.2f",
 *            key, v, us);
 *   -> "2026-12-01T18:30:50.123Z info tuned key=gemm/... variant=... "
 */
#ifndef FLYD_LOG_H
#define FLYD_LOG_H

enum flyd_log_level {
	FLYD_LOG_DEBUG = 0,
	FLYD_LOG_INFO = 1,
	FLYD_LOG_WARN = 2,
	FLYD_LOG_ERR = 3,
	FLYD_LOG_CRIT = 4
};

/* Lines below @p level are dropped (default INFO; $FLYTUNED_LOG_LEVEL). */
void flyd_log_set_level(int level);
int flyd_log_level_parse(const char *s); /* -1 when unknown */
/* Tag every line with "src=NAME" (e.g. "worker"); NULL: none. */
void flyd_log_set_source(const char *name);
void flyd_log(int level, const char *event, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Whether stderr is the journal: $JOURNAL_STREAM is "DEV:INODE" of
 * stderr itself (checked once, at the first line). */
int flyd_log_is_journal(void);
/* Quote a value for a key=value field when it has spaces, '=' or quotes:
 * writes into @p buf (cap bytes), returns buf. */
const char *flyd_log_q(const char *s, char *buf, unsigned cap);

#endif /* FLYD_LOG_H */
