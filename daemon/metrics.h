/*
 * metrics.h -- the daemon's counters and gauges as Prometheus text
 * (exposition format 0.0.4), for the `metrics` request (handlers.c) and
 * the HTTP listener (http.c, through the callback main.c gives it).
 *
 * Thread: loop thread.  The counters are struct flyd_stats (stats.h), the
 * same `stats` reports; the gauges are read from the scheduler, the
 * results, the server, the store and the listener at render time.
 * Every sample carries device="<index>"; the families and their labels
 * are listed in man/flytuned.8 (METRICS) and README.md (Monitoring).
 */
#ifndef FLYD_METRICS_H
#define FLYD_METRICS_H

#include <stddef.h>

#include "daemon.h"

#define FLYD_METRICS_CTYPE "text/plain; version=0.0.4; charset=utf-8"

/* Render every family.
 * @param[out] text caller owns result; free with free().  NUL-terminated.
 * @param[out] len its length.
 * @return 0 or -ENOMEM. */
int flyd_metrics_render(struct flyd_ctx *ctx, char **text, size_t *len);

/* flyd_metrics_render as an http.c render callback (@p arg: the ctx). */
int flyd_metrics_http_render(void *arg, char **text, size_t *len);

#endif /* FLYD_METRICS_H */
