-- id_gen 0.1.0 -> 0.2.0: per-sequence owners, USAGE grants and bulk limits; NULL
-- arguments give 22004 instead of an internal error; fill_gene_id also checks UPDATEs;
-- export of wrapped order-number keys; a central segment authority per sequence
-- (postgres_fdw) and its diagnostics in id_gen.status. Run by ALTER EXTENSION id_gen UPDATE TO '0.2.0'.
-- Existing sequences and serials become owned by the role that runs the update.

\echo Use "ALTER EXTENSION id_gen UPDATE TO '0.2.0'" to load this file. \quit

-- Catalog ---------------------------------------------------------------------------------
ALTER TABLE @extschema@.sequences
    ADD COLUMN owner    name   NOT NULL DEFAULT current_user,
    ADD COLUMN max_bulk bigint NOT NULL DEFAULT 100000000 CHECK (max_bulk > 0),
    ADD COLUMN authority text;
ALTER TABLE @extschema@.serials
    ADD COLUMN owner name NOT NULL DEFAULT current_user;

CREATE TABLE @extschema@.usage_grants (
    kind       text        NOT NULL CHECK (kind IN ('sequence', 'serial')),
    name       text        NOT NULL,
    grantee    name        NOT NULL,
    granted_by name        NOT NULL,
    granted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, name, grantee)
);
SELECT pg_catalog.pg_extension_config_dump('@extschema@.usage_grants', '');
REVOKE ALL ON @extschema@.usage_grants FROM PUBLIC;
GRANT SELECT ON @extschema@.usage_grants TO PUBLIC;

-- Sequences were open to everyone in 0.1.0: keep them so (a PUBLIC grant each), so that
-- the update changes nobody's access; owners may revoke it.
INSERT INTO @extschema@.usage_grants (kind, name, grantee, granted_by)
SELECT 'sequence', name, 'public', current_user FROM @extschema@.sequences;
INSERT INTO @extschema@.usage_grants (kind, name, grantee, granted_by)
SELECT 'serial', name, 'public', current_user FROM @extschema@.serials;

-- Functions whose signature changed (new max_bulk and authority arguments) -----------------
DROP FUNCTION @extschema@.create_sequence(text, bigint, bigint, bigint, bigint, integer, real, bigint, integer, text);
CREATE FUNCTION @extschema@.create_sequence(
    "name" text,
    "start" bigint DEFAULT 1,
    "step" bigint DEFAULT 1000,
    "min_step" bigint DEFAULT NULL,
    "max_step" bigint DEFAULT NULL,
    "buffer_seconds" integer DEFAULT NULL,
    "preload_threshold" real DEFAULT 0.1,
    "max_value" bigint DEFAULT 9223372036854775807,
    "counters" integer DEFAULT 1,
    "comment" text DEFAULT NULL,
    "max_bulk" bigint DEFAULT 100000000,
    "authority" text DEFAULT NULL
) RETURNS text VOLATILE PARALLEL UNSAFE LANGUAGE c
AS 'MODULE_PATHNAME', 'create_sequence_wrapper';

DROP FUNCTION @extschema@.alter_sequence(text, bigint, bigint, bigint, integer, real, bigint, text);
CREATE FUNCTION @extschema@.alter_sequence(
    "name" text,
    "step" bigint DEFAULT NULL,
    "min_step" bigint DEFAULT NULL,
    "max_step" bigint DEFAULT NULL,
    "buffer_seconds" integer DEFAULT NULL,
    "preload_threshold" real DEFAULT NULL,
    "max_value" bigint DEFAULT NULL,
    "comment" text DEFAULT NULL,
    "max_bulk" bigint DEFAULT NULL,
    "authority" text DEFAULT NULL
) RETURNS text VOLATILE PARALLEL UNSAFE LANGUAGE c
AS 'MODULE_PATHNAME', 'alter_sequence_wrapper';

-- The status view gains the authority and the last reservation error: its function's
-- result changed, so both are created again, as sql/finalize.sql creates them.
DROP VIEW @extschema@.status;
DROP FUNCTION @extschema@.cache_status();
CREATE FUNCTION @extschema@.cache_status() RETURNS TABLE (
    "dboid" oid,
    "sequence" text,
    "counter_group" integer,
    "state" text,
    "current_first" bigint,
    "current_last" bigint,
    "current_used" bigint,
    "standby_first" bigint,
    "standby_last" bigint,
    "step" bigint,
    "rate_per_s" double precision,
    "calls" bigint,
    "refills" bigint,
    "waits" bigint,
    "last_refill_ms" double precision,
    "last_refill_at_ms" bigint,
    "worker_pid" integer,
    "authority" text,
    "last_error" text,
    "last_error_at_ms" bigint
) STRICT VOLATILE PARALLEL SAFE LANGUAGE c
AS 'MODULE_PATHNAME', 'cache_status_wrapper';
CREATE VIEW @extschema@.status AS
SELECT d.datname AS database,
       s.sequence,
       s.counter_group,
       s.state,
       s.current_first,
       s.current_last,
       s.current_used,
       CASE WHEN s.current_last IS NULL THEN NULL
            ELSE round(s.current_used::numeric / (s.current_last - s.current_first + 1), 4)
       END AS current_fill,
       s.standby_first IS NOT NULL AS standby_ready,
       s.standby_first,
       s.standby_last,
       s.step,
       round(s.rate_per_s::numeric, 1) AS rate_per_s,
       s.calls,
       s.refills,
       s.waits,
       round(s.last_refill_ms::numeric, 3) AS last_refill_ms,
       CASE WHEN s.last_refill_at_ms = 0 THEN NULL
            ELSE to_timestamp(s.last_refill_at_ms / 1000.0) END AS last_refill_at,
       NULLIF(s.worker_pid, 0) AS worker_pid,
       s.authority,
       s.last_error,
       CASE WHEN s.last_error_at_ms = 0 THEN NULL
            ELSE to_timestamp(s.last_error_at_ms / 1000.0) END AS last_error_at
FROM @extschema@.cache_status() AS s
LEFT JOIN pg_catalog.pg_database AS d ON d.oid = s.dboid;

-- Functions that now answer NULL arguments with 22004 (no longer STRICT) ---------------------
ALTER FUNCTION @extschema@.drop_sequence(text, boolean) CALLED ON NULL INPUT;
ALTER FUNCTION @extschema@.drop_serial(text, boolean) CALLED ON NULL INPUT;
ALTER FUNCTION @extschema@.next_serial(text, text) CALLED ON NULL INPUT;

-- New functions ---------------------------------------------------------------------------
CREATE FUNCTION @extschema@.grant_usage("name" text, "role" text, "kind" text DEFAULT NULL)
RETURNS boolean VOLATILE PARALLEL UNSAFE LANGUAGE c AS 'MODULE_PATHNAME', 'grant_usage_wrapper';
CREATE FUNCTION @extschema@.revoke_usage("name" text, "role" text, "kind" text DEFAULT NULL)
RETURNS boolean VOLATILE PARALLEL UNSAFE LANGUAGE c AS 'MODULE_PATHNAME', 'revoke_usage_wrapper';
CREATE FUNCTION @extschema@.alter_sequence_owner("name" text, "new_owner" text)
RETURNS text VOLATILE PARALLEL UNSAFE LANGUAGE c AS 'MODULE_PATHNAME', 'alter_sequence_owner_wrapper';
CREATE FUNCTION @extschema@.alter_serial_owner("name" text, "new_owner" text)
RETURNS text VOLATILE PARALLEL UNSAFE LANGUAGE c AS 'MODULE_PATHNAME', 'alter_serial_owner_wrapper';
CREATE FUNCTION @extschema@.export_order_no_keys()
RETURNS TABLE ("key_version" integer, "wrapped" bytea, "kek_fingerprint" bytea, "is_current" boolean)
STRICT VOLATILE PARALLEL UNSAFE LANGUAGE c AS 'MODULE_PATHNAME', 'export_order_no_keys_wrapper';

CREATE FUNCTION @extschema@.grant_usage(name text, role regrole, kind text DEFAULT NULL) RETURNS boolean
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$ SELECT @extschema@.grant_usage($1, $2::text, $3) $$;
CREATE FUNCTION @extschema@.revoke_usage(name text, role regrole, kind text DEFAULT NULL) RETURNS boolean
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$ SELECT @extschema@.revoke_usage($1, $2::text, $3) $$;
CREATE FUNCTION @extschema@.alter_sequence_owner(name text, new_owner regrole) RETURNS text
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$ SELECT @extschema@.alter_sequence_owner($1, $2::text) $$;
CREATE FUNCTION @extschema@.alter_serial_owner(name text, new_owner regrole) RETURNS text
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$ SELECT @extschema@.alter_serial_owner($1, $2::text) $$;

CREATE FUNCTION @extschema@.next_segment_id_unchecked(seq text) RETURNS bigint
  LANGUAGE c VOLATILE STRICT PARALLEL UNSAFE
  AS 'MODULE_PATHNAME', 'id_gen_next_segment_id_unchecked';
REVOKE ALL ON FUNCTION @extschema@.next_segment_id_unchecked(text) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.next_segment_id_unchecked(text) IS 'Benchmark baseline: next_segment_id without the per-call access-stamp comparison (the check on first use still runs). Superusers only.';

-- Privileges: who may create stays a grant; the rest checks ownership inside ---------------
REVOKE EXECUTE ON FUNCTION @extschema@.create_sequence(text, bigint, bigint, bigint, bigint, integer, real, bigint, integer, text, bigint, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.drop_sequence(text, boolean) TO PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.drop_serial(text, boolean) TO PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.export_order_no_keys() FROM PUBLIC;

-- Comments ---------------------------------------------------------------------------------
COMMENT ON FUNCTION @extschema@.create_sequence(text, bigint, bigint, bigint, bigint, integer, real, bigint, integer, text, bigint, text) IS 'Creates a named id_gen sequence, owned by the calling role; authority => a postgres_fdw server reserves its segments on that ID database.';
COMMENT ON FUNCTION @extschema@.alter_sequence(text, bigint, bigint, bigint, integer, real, bigint, text, bigint, text) IS 'Changes the tuning, max_bulk or authority (a postgres_fdw server, or ''local'') of a named sequence; NULL keeps a setting; takes effect with the next segment. Owner only.';
COMMENT ON FUNCTION @extschema@.drop_sequence(text, boolean) IS 'Drops a named sequence and forgets its cached segments. Owner only.';
COMMENT ON COLUMN @extschema@.sequences.owner IS 'Role that owns the sequence (by name); it may alter, drop, grant and take values.';
COMMENT ON COLUMN @extschema@.sequences.max_bulk IS 'Most values one next_segment_ids*/next_segment_ranges call may take (54000 beyond).';
COMMENT ON COLUMN @extschema@.sequences.authority IS 'Foreign server (postgres_fdw) of the ID database whose id_gen.sequences reserves this sequence''s segments; NULL: this catalog.';
COMMENT ON VIEW @extschema@.status IS
  'id_gen segment cache: one row per cached (database, sequence, counter group): current and standby segment, fill, adaptive step, rate, refills, waits, worker pid, the authority reserved from and the error of the last failed reservation.';
COMMENT ON FUNCTION @extschema@.cache_status() IS 'Raw rows of the id_gen.status view.';
COMMENT ON FUNCTION @extschema@.grant_usage(text, text, text) IS 'Lets a role (or ''public'') take values of a sequence or serial; kind => ''sequence''/''serial'' when both exist. Owner only.';
COMMENT ON FUNCTION @extschema@.grant_usage(text, regrole, text) IS 'grant_usage for a regrole.';
COMMENT ON FUNCTION @extschema@.revoke_usage(text, text, text) IS 'Takes back a USAGE grant on a sequence or serial. Owner only.';
COMMENT ON FUNCTION @extschema@.revoke_usage(text, regrole, text) IS 'revoke_usage for a regrole.';
COMMENT ON FUNCTION @extschema@.alter_sequence_owner(text, text) IS 'Gives a sequence to another role (owner or superuser; non-superusers must be members of the new owner).';
COMMENT ON FUNCTION @extschema@.alter_sequence_owner(text, regrole) IS 'alter_sequence_owner for a regrole.';
COMMENT ON FUNCTION @extschema@.alter_serial_owner(text, text) IS 'Gives a serial to another role (owner or superuser; non-superusers must be members of the new owner).';
COMMENT ON FUNCTION @extschema@.alter_serial_owner(text, regrole) IS 'alter_serial_owner for a regrole.';
COMMENT ON TABLE @extschema@.usage_grants IS 'USAGE grants on sequences and serials (grantee ''public'' = PUBLIC). Change with @extschema@.grant_usage / revoke_usage.';
COMMENT ON FUNCTION @extschema@.fill_gene_id() IS 'BEFORE INSERT OR UPDATE row trigger: fill_gene_id(''id_col'', ''owner_col'', ''sequence'') fills a NULL bigint/bytea id from the owner column; an UPDATE that moves the owner to another gene while keeping the id is refused (23514).';
COMMENT ON FUNCTION @extschema@.drop_serial(text, boolean) IS 'Drops a dated serial. Owner only.';
COMMENT ON COLUMN @extschema@.serials.owner IS 'Role that owns the serial (by name); it may drop, grant and take numbers.';
COMMENT ON FUNCTION @extschema@.export_order_no_keys() IS 'The order-number data keys in their KEK-wrapped form only (key_version, wrapped, kek_fingerprint, is_current), for the MariaDB plugin that holds the same KEK. Superusers only (42501).';
