/*
 * log.c -- event lines to stderr (see log.h).
 *
 * Owns: the level, the source tag and whether stderr is the journal
 * (process globals, set at start).  Thread: any; a line is formatted into
 * a local buffer and written with a single write(2) so lines from the
 * daemon and its worker never interleave.
 *
 * When stderr is connected to the journal -- $JOURNAL_STREAM holds
 * "DEV:INODE" and they are stderr's own (systemd.exec(5); checking the
 * pair, not just the variable, keeps a redirected stderr plain) -- each
 * line starts with its syslog priority, "<3>" err .. "<7>" debug ("<2>"
 * crit), as sd-daemon(3) describes, and without our timestamp (the
 * journal has its own); otherwise lines are plain.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

static int log_level = -1;
static const char *log_source;
static int log_journal = -1;   /* -1: not checked yet */

/* syslog priorities of the levels (sd-daemon(3): SD_DEBUG .. SD_CRIT). */
static const int level_prio[] = {7, 6, 4, 3, 2};

static const char *const level_names[] = {"debug", "info", "warn", "err",
					  "crit"};

int flyd_log_level_parse(const char *s)
{
	for (int i = 0; i < 5; i++)
		if (s != NULL && strcasecmp(s, level_names[i]) == 0)
			return i;
	return -1;
}

void flyd_log_set_level(int level)
{
	log_level = level;
}

void flyd_log_set_source(const char *name)
{
	log_source = name;
}

/* The threshold: set explicitly, else $FLYTUNED_LOG_LEVEL, else info. */
static int log_threshold(void)
{
	if (log_level < 0) {
		int l = flyd_log_level_parse(getenv("FLYTUNED_LOG_LEVEL"));
		log_level = l < 0 ? FLYD_LOG_INFO : l;
	}
	return log_level;
}

int flyd_log_is_journal(void)
{
	unsigned long long dev, ino;
	const char *js;
	struct stat st;
	char tail;

	if (log_journal >= 0)
		return log_journal;
	js = getenv("JOURNAL_STREAM");
	log_journal = js != NULL &&
		      sscanf(js, "%llu:%llu%c", &dev, &ino, &tail) == 2 &&
		      fstat(STDERR_FILENO, &st) == 0 &&
		      (unsigned long long)st.st_dev == dev &&
		      (unsigned long long)st.st_ino == ino;
	return log_journal;
}

void flyd_log(int level, const char *event, const char *fmt, ...)
{
	char line[1024];
	struct timeval tv;
	struct tm tm;
	va_list ap;
	int n;

	if (level < log_threshold())
		return;
	if (level < 0 || level > FLYD_LOG_CRIT)
		level = FLYD_LOG_ERR;
	if (flyd_log_is_journal()) {
		n = snprintf(line, sizeof(line), "<%d>%s %s%s%s ",
			     level_prio[level], level_names[level], event,
			     log_source ? " src=" : "",
			     log_source ? log_source : "");
	} else {
		gettimeofday(&tv, NULL);
		gmtime_r(&tv.tv_sec, &tm);
		n = snprintf(line, sizeof(line),
			     "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ %s %s%s%s ",
			     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
			     tm.tm_hour, tm.tm_min, tm.tm_sec,
			     (int)(tv.tv_usec / 1000), level_names[level],
			     event, log_source ? " src=" : "",
			     log_source ? log_source : "");
	}
	if (n < 0)
		return;
	if ((size_t)n < sizeof(line) - 1) {
		va_start(ap, fmt);
		int m = vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
		va_end(ap);
		if (m > 0)
			n += m;
	}
	if ((size_t)n >= sizeof(line) - 1)
		n = (int)sizeof(line) - 2;
	while (n > 0 && line[n - 1] == ' ')
		n--;
	line[n++] = '\n';
	ssize_t w = write(STDERR_FILENO, line, (size_t)n);
	(void)w;
}

const char *flyd_log_q(const char *s, char *buf, unsigned cap)
{
	unsigned j = 0;

	if (cap < 3)
		return "";
	if (s == NULL)
		s = "";
	if (strpbrk(s, " =\"\t\n") == NULL && *s != '\0') {
		snprintf(buf, cap, "%s", s);
		return buf;
	}
	buf[j++] = '"';
	for (; *s != '\0' && j + 3 < cap; s++) {
		if (*s == '"' || *s == '\\')
			buf[j++] = '\\';
		buf[j++] = (*s == '\n' || *s == '\t') ? ' ' : *s;
	}
	buf[j++] = '"';
	buf[j] = '\0';
	return buf;
}
