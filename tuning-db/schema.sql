-- schema.sql: the whole current schema (user_version 4), exactly as
-- `sqlite3 DB .schema` prints it for a freshly migrated DB.  Not applied:
-- the migrations are.  tests/unit/test_store.c checks they agree.
-- Regenerate: cat migrations/*.sql | sqlite3 /tmp/x.db && sqlite3 /tmp/x.db .schema
CREATE TABLE devices (
	id TEXT PRIMARY KEY,
	fingerprint TEXT NOT NULL,
	first_seen INTEGER NOT NULL,
	last_seen INTEGER NOT NULL
);
CREATE TABLE results (
	key TEXT NOT NULL CHECK (key <> ''),
	device TEXT NOT NULL,
	libver TEXT NOT NULL,
	variant TEXT NOT NULL CHECK (variant <> ''),
	params TEXT NOT NULL,
	median_us REAL NOT NULL,
	mad_us REAL NOT NULL,
	status INTEGER NOT NULL,
	tune_s REAL NOT NULL,
	tuned_at INTEGER NOT NULL, source TEXT NOT NULL DEFAULT 'tuned'
	CHECK (source IN ('tuned', 'imported')),
	PRIMARY KEY (key, device, libver)
);
CREATE TABLE trials (
	id INTEGER PRIMARY KEY,
	key TEXT NOT NULL,
	device TEXT NOT NULL,
	libver TEXT NOT NULL,
	variant TEXT NOT NULL,
	params TEXT NOT NULL,
	median_us REAL NOT NULL,
	mad_us REAL NOT NULL,
	reps INTEGER NOT NULL,
	outcome TEXT NOT NULL,
	reason TEXT NOT NULL,
	at INTEGER NOT NULL
);
CREATE TABLE jobs (
	key TEXT NOT NULL,
	device TEXT NOT NULL,
	priority INTEGER NOT NULL,
	force INTEGER NOT NULL,
	queued_at INTEGER NOT NULL,
	state TEXT NOT NULL CHECK (state IN ('queued', 'running')),
	faults INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (key, device)
);
CREATE INDEX trials_key ON trials (key, device, libver);
CREATE TABLE failed_jobs (
	key TEXT NOT NULL,
	device TEXT NOT NULL,
	faults INTEGER NOT NULL,
	why TEXT NOT NULL,
	at INTEGER NOT NULL,
	PRIMARY KEY (key, device)
);
CREATE TABLE fleet_outbox (
	key TEXT NOT NULL,
	device TEXT NOT NULL,
	libver TEXT NOT NULL,
	queued_at INTEGER NOT NULL,
	PRIMARY KEY (key, device, libver)
);
