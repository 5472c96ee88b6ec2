-- 0002_trial_index_source: lookups of a key's trials (flyd_store_is_faulted
-- runs once per candidate of every job, flyd_store_trial_iter and
-- flyd_store_forget per key) scanned the whole trials table; index them.
-- Results also record where they came from: 'tuned' (measured here) or
-- 'imported' (flytune-ctl import), so an export or a re-tune policy can
-- tell them apart.  Rows written before this migration were all tuned here.
CREATE INDEX trials_key ON trials (key, device, libver);
ALTER TABLE results ADD COLUMN source TEXT NOT NULL DEFAULT 'tuned'
	CHECK (source IN ('tuned', 'imported'));
