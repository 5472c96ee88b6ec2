-- 0003_job_faults: a job's worker deaths are counted in its row, so a
-- restart does not start the count over (issue 18: a key whose set-up
-- crashed the worker was retried 8 times after every restart); a job that
-- reached the limit is recorded in failed_jobs with its reason, shown by
-- get and explain, and not queued again until a forced tune or a forget.
ALTER TABLE jobs ADD COLUMN faults INTEGER NOT NULL DEFAULT 0;
CREATE TABLE failed_jobs (
	key TEXT NOT NULL,
	device TEXT NOT NULL,
	faults INTEGER NOT NULL,
	why TEXT NOT NULL,
	at INTEGER NOT NULL,
	PRIMARY KEY (key, device)
);
