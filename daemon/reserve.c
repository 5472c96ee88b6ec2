/*
 * reserve.c -- the tuning budget's reserve (see reserve.h).
 */
#include "reserve.h"

static double nonneg(double x)
{
	return x > 0 ? x : 0; /* NaN: 0 */
}

double flyd_reserve_excess(double wall_s, double setup_s, double tune_s,
			   double over_s)
{
	return nonneg(nonneg(wall_s) - nonneg(setup_s) - nonneg(tune_s)) +
	       nonneg(over_s);
}

void flyd_reserve_note(struct flyd_reserve *rs, double excess_s)
{
	rs->excess[rs->head] = nonneg(excess_s);
	rs->head = (rs->head + 1) % FLYD_RESERVE_JOBS;
	if (rs->n < FLYD_RESERVE_JOBS)
		rs->n++;
}

double flyd_reserve_s(const struct flyd_reserve *rs, double budget_s)
{
	double m = 0, cap = FLYD_RESERVE_MAX_SHARE * budget_s;

	if (!(budget_s > 0))
		return 0;
	for (unsigned i = 0; i < rs->n && i < FLYD_RESERVE_JOBS; i++)
		if (rs->excess[i] > m)
			m = rs->excess[i];
	m *= FLYD_RESERVE_HEADROOM;
	return m < cap ? m : cap;
}
