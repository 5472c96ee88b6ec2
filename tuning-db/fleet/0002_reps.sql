-- 0002_reps: the timed repetitions behind each measurement's median
-- (issue 24: a result carries its median, noise and reps).  NULL: pushed
-- by a flytuned that does not send them (fleet_push's 11-argument form,
-- kept for those nodes, which push through the 12-argument one with
-- reps NULL).
ALTER TABLE fleet_measurements ADD COLUMN reps integer
	CHECK (reps IS NULL OR reps >= 0);
ALTER TABLE fleet_results ADD COLUMN reps integer
	CHECK (reps IS NULL OR reps >= 0);
-- fleet_push of 0001 with the measurement's reps: the same merge rule
-- (see there), the winner's reps kept with it.
CREATE FUNCTION fleet_push(p_device text, p_libver text, p_key text,
	p_node text, p_variant text, p_params bigint[], p_median double precision,
	p_mad double precision, p_tune_s double precision, p_tuned_at bigint,
	p_h double precision, p_reps integer) RETURNS text
LANGUAGE plpgsql AS $f$
DECLARE
	w fleet_results;
BEGIN
	INSERT INTO fleet_measurements AS m (device, libver, key, node, variant,
		params, median_us, mad_us, tune_s, tuned_at, reps)
	VALUES (p_device, p_libver, p_key, p_node, p_variant, p_params,
		p_median, p_mad, p_tune_s, p_tuned_at, p_reps)
	ON CONFLICT (device, libver, key, node) DO UPDATE SET
		variant = EXCLUDED.variant, params = EXCLUDED.params,
		median_us = EXCLUDED.median_us, mad_us = EXCLUDED.mad_us,
		tune_s = EXCLUDED.tune_s, tuned_at = EXCLUDED.tuned_at,
		reps = EXCLUDED.reps, received_at = now();
	INSERT INTO fleet_results AS r (device, libver, key, node, variant,
		params, median_us, mad_us, tune_s, tuned_at, reps)
	VALUES (p_device, p_libver, p_key, p_node, p_variant, p_params,
		p_median, p_mad, p_tune_s, p_tuned_at, p_reps)
	ON CONFLICT (device, libver, key) DO UPDATE SET
		node = EXCLUDED.node, variant = EXCLUDED.variant,
		params = EXCLUDED.params, median_us = EXCLUDED.median_us,
		mad_us = EXCLUDED.mad_us, tune_s = EXCLUDED.tune_s,
		tuned_at = EXCLUDED.tuned_at, reps = EXCLUDED.reps,
		updated_at = now()
	WHERE EXCLUDED.median_us < r.median_us * (1 - p_h)
	   OR (EXCLUDED.median_us = r.median_us
	       AND (EXCLUDED.variant, EXCLUDED.params::text, EXCLUDED.node)
		   < (r.variant, r.params::text, r.node));
	SELECT * INTO w FROM fleet_results
	 WHERE device = p_device AND libver = p_libver AND key = p_key;
	RETURN fleet_record(w);
END
$f$;
CREATE OR REPLACE FUNCTION fleet_push(p_device text, p_libver text,
	p_key text, p_node text, p_variant text, p_params bigint[],
	p_median double precision, p_mad double precision,
	p_tune_s double precision, p_tuned_at bigint, p_h double precision)
	RETURNS text
LANGUAGE sql AS $f$
	SELECT fleet_push(p_device, p_libver, p_key, p_node, p_variant,
		p_params, p_median, p_mad, p_tune_s, p_tuned_at, p_h,
		NULL::integer)
$f$;
