-- 0001_init: the fleet DB (PostgreSQL; issue 24, daemon/fleet.c,
-- docs/fleet.md).  Applied by the first flytuned that connects, inside
-- one transaction under an advisory lock, and recorded in fleet_schema.
--
-- fleet_measurements: every node's own measurement of a key (provenance;
-- one row per node, its latest).
-- fleet_results: the fleet's winner of each (device fingerprint id,
-- kernel-library version, key), chosen by fleet_push()'s merge rule.
CREATE TABLE fleet_measurements (
	device text NOT NULL,
	libver text NOT NULL,
	key text NOT NULL,
	node text NOT NULL,
	variant text NOT NULL,
	params bigint[] NOT NULL,
	median_us double precision NOT NULL CHECK (median_us > 0),
	mad_us double precision NOT NULL,
	tune_s double precision NOT NULL,
	tuned_at bigint NOT NULL,
	received_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (device, libver, key, node)
);
CREATE TABLE fleet_results (
	device text NOT NULL,
	libver text NOT NULL,
	key text NOT NULL,
	node text NOT NULL,
	variant text NOT NULL,
	params bigint[] NOT NULL,
	median_us double precision NOT NULL CHECK (median_us > 0),
	mad_us double precision NOT NULL,
	tune_s double precision NOT NULL,
	tuned_at bigint NOT NULL,
	updated_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (device, libver, key)
);
-- A row as flytuned's export record (schemas/common.json#/$defs/result):
-- what NOTIFY carries and what a pull reads; each node validates it as
-- an import before it serves it.
CREATE FUNCTION fleet_record(r fleet_results) RETURNS text
LANGUAGE sql STABLE AS $f$
	SELECT json_build_object('key', r.key, 'device', r.device,
		'libver', r.libver, 'variant', r.variant,
		'params', to_json(r.params), 'median_us', r.median_us,
		'mad_us', r.mad_us, 'tune_s', r.tune_s,
		'tuned_at', r.tuned_at)::text
$f$;
-- Every new or replaced winner is announced on channel flytuned_fleet.
CREATE FUNCTION fleet_notify() RETURNS trigger
LANGUAGE plpgsql AS $f$
BEGIN
	PERFORM pg_notify('flytuned_fleet', fleet_record(NEW));
	RETURN NEW;
END
$f$;
CREATE TRIGGER fleet_results_notify AFTER INSERT OR UPDATE ON fleet_results
	FOR EACH ROW EXECUTE FUNCTION fleet_notify();
-- A node's measurement: kept in fleet_measurements, then merged into
-- fleet_results under the row's lock, so every node sees one order.
-- The merge rule: the new median wins when it is faster than the
-- incumbent's by more than the fraction h (the hysteresis); an exactly
-- equal median wins when (variant, params, node) sorts first; otherwise
-- the incumbent stays.  Returns the winner after the merge, as a record.
CREATE FUNCTION fleet_push(p_device text, p_libver text, p_key text,
	p_node text, p_variant text, p_params bigint[], p_median double precision,
	p_mad double precision, p_tune_s double precision, p_tuned_at bigint,
	p_h double precision) RETURNS text
LANGUAGE plpgsql AS $f$
DECLARE
	w fleet_results;
BEGIN
	INSERT INTO fleet_measurements AS m (device, libver, key, node, variant,
		params, median_us, mad_us, tune_s, tuned_at)
	VALUES (p_device, p_libver, p_key, p_node, p_variant, p_params,
		p_median, p_mad, p_tune_s, p_tuned_at)
	ON CONFLICT (device, libver, key, node) DO UPDATE SET
		variant = EXCLUDED.variant, params = EXCLUDED.params,
		median_us = EXCLUDED.median_us, mad_us = EXCLUDED.mad_us,
		tune_s = EXCLUDED.tune_s, tuned_at = EXCLUDED.tuned_at,
		received_at = now();
	INSERT INTO fleet_results AS r (device, libver, key, node, variant,
		params, median_us, mad_us, tune_s, tuned_at)
	VALUES (p_device, p_libver, p_key, p_node, p_variant, p_params,
		p_median, p_mad, p_tune_s, p_tuned_at)
	ON CONFLICT (device, libver, key) DO UPDATE SET
		node = EXCLUDED.node, variant = EXCLUDED.variant,
		params = EXCLUDED.params, median_us = EXCLUDED.median_us,
		mad_us = EXCLUDED.mad_us, tune_s = EXCLUDED.tune_s,
		tuned_at = EXCLUDED.tuned_at, updated_at = now()
	WHERE EXCLUDED.median_us < r.median_us * (1 - p_h)
	   OR (EXCLUDED.median_us = r.median_us
	       AND (EXCLUDED.variant, EXCLUDED.params::text, EXCLUDED.node)
		   < (r.variant, r.params::text, r.node));
	SELECT * INTO w FROM fleet_results
	 WHERE device = p_device AND libver = p_libver AND key = p_key;
	RETURN fleet_record(w);
END
$f$;
