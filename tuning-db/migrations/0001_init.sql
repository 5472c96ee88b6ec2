-- 0001_init: the first schema of the tuning DB (see tuning-db/README.md).
-- Applied by daemon/store.c inside one transaction; user_version becomes 1.

-- One row per GPU model + driver + kernel-library fingerprint seen here.
-- id is FNV-1a 64 of the fingerprint line, 16 lowercase hex digits.
CREATE TABLE devices (
	id TEXT PRIMARY KEY,
	fingerprint TEXT NOT NULL,
	first_seen INTEGER NOT NULL,
	last_seen INTEGER NOT NULL
);

-- The winner per (key, device, libver).  params is a JSON array text.
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
	tuned_at INTEGER NOT NULL,
	PRIMARY KEY (key, device, libver)
);

-- Every measured (or refused, or crashed) candidate of every job.
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

-- Tuning jobs not finished yet, so a restart resumes them.
CREATE TABLE jobs (
	key TEXT NOT NULL,
	device TEXT NOT NULL,
	priority INTEGER NOT NULL,
	force INTEGER NOT NULL,
	queued_at INTEGER NOT NULL,
	state TEXT NOT NULL CHECK (state IN ('queued', 'running')),
	PRIMARY KEY (key, device)
);
