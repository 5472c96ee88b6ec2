-- 0004_fleet_outbox: the winners this node committed that the fleet's
-- PostgreSQL DB does not have yet (issue 24, daemon/fleet.c).  A row is
-- written in the transaction that commits the winner (only while
-- fleet_url is set) and deleted once the fleet DB has committed it, so a
-- fleet outage or a crash loses no push.  The record itself is read from
-- results when it is sent.
CREATE TABLE fleet_outbox (
	key TEXT NOT NULL,
	device TEXT NOT NULL,
	libver TEXT NOT NULL,
	queued_at INTEGER NOT NULL,
	PRIMARY KEY (key, device, libver)
);
