-- Metrics (docs/operations.md "Monitoring"): what an operator's Prometheus scrapes, as SQL.
-- Code only (CREATE OR REPLACE), loaded last, over the catalog and the shared-memory cache.
--
-- id_gen.metrics_cache_slots() reads the segment cache's shared memory for the two families
-- that need it (no rows without the cache). One typed function per family of metrics (its label columns, then one column per metric,
-- named as the metric's suffix), which monitoring/postgres_exporter.yml reads as they are
-- (prometheus-postgres-exporter names a column c of query q "q_c"), and one view,
-- id_gen.metrics, with every metric of every family as (metric, labels, value, type, help),
-- for psql and for the test that checks the exporter's file against it.
--   * id_gen.metrics_sequences(): per sequence of this database (labels database, sequence,
--     authority): the id space used and left (the 47-bit space of gene-order ids, or
--     max_value when smaller), the cache's refills, waits, values taken, step, rate, values
--     cached and how long they last at the current rate, whether refills fail, failed
--     reservations at its authority and calls that timed out waiting (the cache's counters,
--     id_gen.cache_counters(), since the sequence was cached);
--   * id_gen.metrics_authorities(): per authority this database's sequences reserve from, as
--     the refill worker last saw it (reachable: its last reservation did not fail; failed
--     reservations; the round trip of the last reservation statement it answered);
--   * id_gen.metrics_route_pushes(): on a coordinator, per shard: the route version it last
--     took, how far behind the current one it is (versions, seconds), whether the last push
--     failed;
--   * id_gen.metrics_operations() and id_gen.metrics_operation_phases(): moves, splits and
--     merges not finished, or finished within the hour: rows copied, progress, lag, the last
--     fence's duration, WAL held for a reversible move's way back (and its share of
--     id_gen.reversible_max_wal), seconds since the operation last moved; and the phase;
--   * id_gen.metrics_operation_checks(): the state of each such operation's check before its
--     cut-over (sql/cluster/verify.sql);
--   * id_gen.metrics_operation_fences(): a move's or revert's write fence armed and neither
--     lifted nor cut over yet, and for how long (its cleanup record: a fence held by a session
--     that hangs or died shows before anything ends it);
--   * id_gen.metrics_supervisor(): the move supervisor's passes, failed passes, operations it
--     acted on, and when the last pass and the last failed one ended (shared-memory counters,
--     id_gen.supervisor_counters(); no row without id_gen preloaded);
--   * id_gen.metrics_order_no_keys(): the order-number key versions, and which is current.
-- Invariants:
--   * A scrape reads this server only: never a shard, an authority or a remote table; what
--     those are like comes from what the workers and the supervisor recorded. A hung peer
--     cannot stall a scrape.
--   * Labels are bounded: sequences and shards (rows of the catalog), operations of the last
--     hour or not finished, key versions; no error text (it may name hosts) leaves in a
--     label or value.
--   * The functions run as the extension's owner (SECURITY DEFINER, search_path pinned to
--     pg_catalog), read only, and are granted to pg_monitor, not PUBLIC. They run without
--     JIT: the catalog tables are small but unanalyzed, and an estimate of millions of rows
--     made a scrape compile its plan (20 ms for 64 shards' route pushes, 0.1 ms without).
--   * A family with nothing to report (no sequence cache without id_gen preloaded, no route
--     pushes on a shard) returns no rows rather than an error.

CREATE OR REPLACE FUNCTION id_gen.metrics_cache_slots()
RETURNS TABLE (sequence text, authority text, refills bigint, waits bigint, calls bigint,
               step bigint, rate double precision, cached bigint, failing boolean,
               refill_error boolean, last_refill_ms double precision,
               authority_errors bigint, wait_timeouts bigint,
               authority_round_trip_ms double precision)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
BEGIN
  RETURN QUERY
  SELECT c.sequence, c.authority, c.refills, c.waits, c.calls, c.step, c.rate_per_s,
         coalesce(c.current_last - c.current_first + 1 - c.current_used, 0)
           + coalesce(c.standby_last - c.standby_first + 1, 0),
         c.state IN ('refill failed', 'exhausted') OR c.last_error IS NOT NULL,
         c.state = 'refill failed' OR c.last_error IS NOT NULL,
         c.last_refill_ms,
         coalesce(k.authority_errors, 0), coalesce(k.wait_timeouts, 0), k.authority_round_trip_ms
  FROM id_gen.cache_status() c
  LEFT JOIN id_gen.cache_counters() k
    ON (k.dboid, k.sequence, k.counter_group) = (c.dboid, c.sequence, c.counter_group)
  WHERE c.dboid = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database());
EXCEPTION WHEN object_not_in_prerequisite_state THEN
  RETURN;  -- (id_gen not preloaded: no cache)
END
$$;
COMMENT ON FUNCTION id_gen.metrics_cache_slots() IS
  'The segment cache''s slots of this database (one per sequence and counter group), as the metrics of sequences and authorities read them; no rows without the cache (id_gen not preloaded).';

CREATE OR REPLACE FUNCTION id_gen.metrics_sequences()
RETURNS TABLE (database text, sequence text, authority text,
               id_space_used double precision, id_space_remaining double precision,
               id_space_used_ratio double precision, refills_total double precision,
               waits_total double precision, calls_total double precision,
               step double precision, rate_per_second double precision,
               cached_values double precision, cache_headroom_seconds double precision,
               refill_failing double precision, authority_errors_total double precision,
               wait_timeouts_total double precision)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
  WITH slot AS (  -- counter groups summed
    SELECT c.sequence AS name, sum(c.refills) AS refills, sum(c.waits) AS waits,
           sum(c.calls) AS calls, max(c.step) AS step, sum(c.rate) AS rate,
           sum(c.cached) AS cached, bool_or(c.failing) AS failing,
           sum(c.authority_errors) AS authority_errors, sum(c.wait_timeouts) AS wait_timeouts
    FROM id_gen.metrics_cache_slots() c
    GROUP BY c.sequence)
  SELECT current_database()::text, s.name, coalesce(s.authority, ''),
         s.max_id::float8,
         (x.space - s.max_id)::float8,
         s.max_id::float8 / x.space,
         coalesce(sl.refills, 0)::float8, coalesce(sl.waits, 0)::float8,
         coalesce(sl.calls, 0)::float8,
         coalesce(nullif(sl.step, 0), s.step)::float8,
         coalesce(sl.rate, 0)::float8,
         coalesce(sl.cached, 0)::float8,
         CASE WHEN sl.rate > 0 THEN sl.cached / sl.rate
              WHEN sl.cached > 0 THEN 'Infinity'::float8 END,
         coalesce(sl.failing, false)::int::float8,
         coalesce(sl.authority_errors, 0)::float8, coalesce(sl.wait_timeouts, 0)::float8
  FROM id_gen.sequences s
  -- The id space: the 47 bits of gene-order ids (2^47 - 1), or max_value when smaller. A
  -- sequence past it (one that only gives plain ids) shows a ratio above 1 and a negative
  -- remainder: gene_order_id refuses its values.
  CROSS JOIN LATERAL (SELECT least(s.max_value, 140737488355327) AS space) x
  LEFT JOIN slot sl ON sl.name = s.name
$$;
COMMENT ON FUNCTION id_gen.metrics_sequences() IS
  'Metrics of each sequence of this database (id space used and left, the cache''s refills, waits, values taken, step, rate, values cached and their headroom in seconds, failing refills, failed reservations at its authority, calls that timed out waiting): the family id_gen_sequence_* of id_gen.metrics.';

CREATE OR REPLACE FUNCTION id_gen.metrics_authorities()
RETURNS TABLE (database text, authority text, up double precision,
               last_reservation_seconds double precision, errors_total double precision,
               round_trip_seconds double precision)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
  SELECT current_database()::text, c.authority,
         (NOT bool_or(c.refill_error))::int::float8,
         (max(c.last_refill_ms) / 1000)::float8,
         sum(c.authority_errors)::float8,
         (max(c.authority_round_trip_ms) / 1000)::float8
  FROM id_gen.metrics_cache_slots() c
  WHERE c.authority IS NOT NULL
  GROUP BY c.authority
$$;
COMMENT ON FUNCTION id_gen.metrics_authorities() IS
  'Metrics of each authority this database''s sequences reserve segments from, as the refill worker last saw it (up: no reservation there is failing; how long the last one took; failed reservations; the round trip of its last reservation statement): the family id_gen_authority_* of id_gen.metrics.';

CREATE OR REPLACE FUNCTION id_gen.metrics_route_pushes()
RETURNS TABLE (shard text, version double precision, lag_versions double precision,
               lag_seconds double precision, error double precision,
               last_success_timestamp_seconds double precision)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
  SELECT x.shard, rp.version::float8,
         (st.version - coalesce(rp.version, 0))::float8,
         CASE WHEN rp.version IS NOT DISTINCT FROM st.version THEN 0
              ELSE extract(epoch FROM clock_timestamp() - greatest(st.changed_at, coalesce(rp.pushed_at, st.changed_at)))
              END::float8,
         (rp.last_error IS NOT NULL)::int::float8,
         extract(epoch FROM rp.pushed_at)::float8
  FROM (SELECT r.shard FROM id_gen.shard_routes r
        UNION SELECT p.shard FROM id_gen.shard_placements p) x
  CROSS JOIN id_gen.route_state st
  LEFT JOIN id_gen.route_pushes rp ON rp.shard = x.shard
$$;
COMMENT ON FUNCTION id_gen.metrics_route_pushes() IS
  'Metrics of each shard on a coordinator: the route version it last took, how far behind the current one it is (versions; seconds since the routes changed), whether the last push failed (the error itself is in id_gen.route_push_status), when a push last succeeded: the family id_gen_route_push_* of id_gen.metrics.';

-- The operations the families of operations report: not finished, or finished within the hour.
CREATE OR REPLACE FUNCTION id_gen.metrics_reported_operations() RETURNS SETOF id_gen.cluster_operations
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
  SELECT * FROM id_gen.cluster_operations o
  WHERE o.phase NOT IN ('done', 'aborted', 'reverted')
     OR o.finished_at > clock_timestamp() - interval '1 hour'
$$;
COMMENT ON FUNCTION id_gen.metrics_reported_operations() IS
  'The moves, splits and merges that the metrics of operations report (id_gen.metrics_operations and the families beside it): not finished, or finished within the hour.';
REVOKE ALL ON FUNCTION id_gen.metrics_reported_operations() FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.metrics_operations()
RETURNS TABLE (operation_id text, kind text, shard text, target_shard text,
               rows_copied double precision, progress_ratio double precision,
               lag_bytes double precision, fence_seconds double precision,
               fence_attempts double precision, way_back_retained_bytes double precision,
               way_back_retained_ratio double precision, seconds_since_update double precision,
               failed double precision)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
  SELECT o.operation_id::text, o.kind, o.shard, coalesce(o.target_shard, ''),
         coalesce(o.rows_copied, 0)::float8,
         CASE WHEN o.phase = 'done' THEN 1
              WHEN o.rows_total > 0 THEN least(o.rows_copied, o.rows_total)::float8 / o.rows_total END,
         o.lag_bytes::float8,
         extract(epoch FROM o.fence_ended_at - o.fence_started_at)::float8,
         o.fence_attempts::float8,
         CASE WHEN o.phase = 'reversible' THEN o.back_retained_bytes::float8 END,
         CASE WHEN o.phase = 'reversible'
              THEN o.back_retained_bytes::float8
                   / nullif(pg_size_bytes(current_setting('id_gen.reversible_max_wal', true)), 0) END,
         extract(epoch FROM clock_timestamp() - o.updated_at)::float8,
         (o.phase = 'failed')::int::float8
  FROM id_gen.metrics_reported_operations() o
$$;
COMMENT ON FUNCTION id_gen.metrics_operations() IS
  'Metrics of each move, split and merge not finished or finished within the hour (rows copied, progress, replication lag, the last fence''s duration and attempts, WAL held for a reversible move''s way back and its share of id_gen.reversible_max_wal, seconds since it last moved, failed): the family id_gen_operation_* of id_gen.metrics.';

CREATE OR REPLACE FUNCTION id_gen.metrics_operation_phases()
RETURNS TABLE (operation_id text, kind text, phase text, info double precision)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
  SELECT o.operation_id::text, o.kind, o.phase, 1::float8
  FROM id_gen.metrics_reported_operations() o
$$;
COMMENT ON FUNCTION id_gen.metrics_operation_phases() IS
  'The phase of each move, split and merge that id_gen.metrics_operations() reports, as a label (value 1): the metric id_gen_operation_phase_info of id_gen.metrics.';

CREATE OR REPLACE FUNCTION id_gen.metrics_operation_checks()
RETURNS TABLE (operation_id text, kind text, state text, info double precision)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
  SELECT o.operation_id::text, o.kind, o.verify_state, 1::float8
  FROM id_gen.metrics_reported_operations() o
  WHERE o.verify_state IS NOT NULL
$$;
COMMENT ON FUNCTION id_gen.metrics_operation_checks() IS
  'The state of the check before the cut-over (running, equal, unsettled, different, skipped) of each move, split and merge that id_gen.metrics_operations() reports and that has one, as a label (value 1): the metric id_gen_operation_check_info of id_gen.metrics.';

CREATE OR REPLACE FUNCTION id_gen.metrics_operation_fences()
RETURNS TABLE (operation_id text, kind text, shard text, seconds double precision)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
  -- A move's source fence is armed (recorded) in catching_up and cut over or lifted there, or
  -- left up by a rollback whose lift failed (phase failed, before any flip: the routes still
  -- point at the source); a revert's fence on the target is armed in reversible. (After the
  -- cut-over the source's fence triggers stay on copies nobody routes to: not a fence of
  -- writes.) A record is committed just before its fence goes up, so a session that dies in
  -- between shows one until the move supervisor clears it.
  SELECT o.operation_id::text, o.kind, c.node, extract(epoch FROM clock_timestamp() - c.recorded_at)::float8
  FROM id_gen.metrics_reported_operations() o
  JOIN id_gen.operation_cleanups c ON c.operation_id = o.operation_id
  WHERE (c.object = 'source_fence' AND o.phase IN ('catching_up', 'failed'))
     OR (c.object = 'revert_fence' AND o.phase = 'reversible')
$$;
COMMENT ON FUNCTION id_gen.metrics_operation_fences() IS
  'The write fences of moves and reverts armed and neither lifted nor cut over yet (or left up by a rollback that could not lift them), with the shard they are on and the seconds since they were armed (no row without one; a fence lasts milliseconds when all is well): the metric id_gen_operation_fence_up_seconds of id_gen.metrics.';

CREATE OR REPLACE FUNCTION id_gen.metrics_supervisor()
RETURNS TABLE (passes_total double precision, failed_passes_total double precision,
               operations_acted_total double precision, last_pass_timestamp_seconds double precision,
               last_failure_timestamp_seconds double precision)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
  SELECT c.passes::float8, c.failed_passes::float8, c.operations_acted::float8, c.last_pass_at, c.last_failure_at
  FROM id_gen.supervisor_counters() c
$$;
COMMENT ON FUNCTION id_gen.metrics_supervisor() IS
  'The move supervisor''s counters since the server started (passes, failed passes, operations acted on, when the last pass and the last failed pass ended; no row without id_gen preloaded): the family id_gen_supervisor_* of id_gen.metrics.';

CREATE OR REPLACE FUNCTION id_gen.metrics_order_no_keys()
RETURNS TABLE (key_version text, current double precision)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
  SELECT k.key_version::text, k.is_current::int::float8 FROM id_gen.order_no_key_store k
$$;
COMMENT ON FUNCTION id_gen.metrics_order_no_keys() IS
  'The order-number key versions (1 for the one new order numbers use, 0 for those kept to decode): the metric id_gen_order_no_key_current of id_gen.metrics.';

CREATE OR REPLACE VIEW id_gen.metrics AS
SELECT m.metric, m.labels, m.value, m.type, m.help
FROM (
  SELECT jsonb_build_object('database', s.database, 'sequence', s.sequence, 'authority', s.authority) AS l, s.*
  FROM id_gen.metrics_sequences() s) s
CROSS JOIN LATERAL (VALUES
  ('id_gen_sequence_id_space_used', s.l, s.id_space_used, 'gauge',
   'Highest value reserved so far (max_id; includes values cached and not yet taken).'),
  ('id_gen_sequence_id_space_remaining', s.l, s.id_space_remaining, 'gauge',
   'Values left in the id space: the 47 bits of gene-order ids, or max_value when smaller (negative past it).'),
  ('id_gen_sequence_id_space_used_ratio', s.l, s.id_space_used_ratio, 'gauge',
   'Share of the id space used (id_space_used over its size; above 1: past the 47 bits of gene-order ids).'),
  ('id_gen_sequence_refills_total', s.l, s.refills_total, 'counter',
   'Segments the refill worker reserved (since the sequence was cached).'),
  ('id_gen_sequence_waits_total', s.l, s.waits_total, 'counter',
   'Calls that found the cache empty and waited for a refill.'),
  ('id_gen_sequence_calls_total', s.l, s.calls_total, 'counter',
   'Values taken (counted per backend in batches of 64: approximate).'),
  ('id_gen_sequence_step', s.l, s.step, 'gauge',
   'Size of the last segment reserved (the adaptive step).'),
  ('id_gen_sequence_rate_per_second', s.l, s.rate_per_second, 'gauge',
   'Values taken per second (the refill worker''s 10-second meter).'),
  ('id_gen_sequence_cached_values', s.l, s.cached_values, 'gauge',
   'Values in the current and standby segments.'),
  ('id_gen_sequence_cache_headroom_seconds', s.l, s.cache_headroom_seconds, 'gauge',
   'Seconds the values cached last at the current rate without a refill (+Inf: no calls).'),
  ('id_gen_sequence_refill_failing', s.l, s.refill_failing, 'gauge',
   '1 while the last reservation of a segment failed (see id_gen.status).'),
  ('id_gen_sequence_authority_errors_total', s.l, s.authority_errors_total, 'counter',
   'Failed reservations of a segment at the sequence''s authority (each retry counts).'),
  ('id_gen_sequence_wait_timeouts_total', s.l, s.wait_timeouts_total, 'counter',
   'Calls whose wait for a segment ended with an error after id_gen.refill_timeout (55000).')
) m(metric, labels, value, type, help)
UNION ALL
SELECT m.* FROM id_gen.metrics_authorities() a
CROSS JOIN LATERAL (VALUES
  ('id_gen_authority_up', jsonb_build_object('database', a.database, 'authority', a.authority), a.up, 'gauge',
   '1 if the last reservation at the authority succeeded, as the refill worker last saw it.'),
  ('id_gen_authority_last_reservation_seconds', jsonb_build_object('database', a.database, 'authority', a.authority),
   a.last_reservation_seconds, 'gauge',
   'How long the last reservation transaction took (the authority''s round trip and the local commit).'),
  ('id_gen_authority_errors_total', jsonb_build_object('database', a.database, 'authority', a.authority),
   a.errors_total, 'counter', 'Failed reservations at the authority, over this database''s sequences (each retry counts).'),
  ('id_gen_authority_round_trip_seconds', jsonb_build_object('database', a.database, 'authority', a.authority),
   a.round_trip_seconds, 'gauge',
   'Round trip of the last reservation statement the authority answered (its remote UPDATE; not the local commit; NaN: none yet).')
) m(metric, labels, value, type, help)
UNION ALL
SELECT m.* FROM id_gen.metrics_route_pushes() p
CROSS JOIN LATERAL (VALUES
  ('id_gen_route_push_version', jsonb_build_object('shard', p.shard), p.version, 'gauge',
   'Route version the shard last took (NaN: never).'),
  ('id_gen_route_push_lag_versions', jsonb_build_object('shard', p.shard), p.lag_versions, 'gauge',
   'Current route version minus the shard''s.'),
  ('id_gen_route_push_lag_seconds', jsonb_build_object('shard', p.shard), p.lag_seconds, 'gauge',
   'Seconds the shard has been behind the current route version (0: up to date).'),
  ('id_gen_route_push_error', jsonb_build_object('shard', p.shard), p.error, 'gauge',
   '1 while the last push to the shard failed (the error is in id_gen.route_push_status).'),
  ('id_gen_route_push_last_success_timestamp_seconds', jsonb_build_object('shard', p.shard),
   p.last_success_timestamp_seconds, 'gauge', 'When a push to the shard last succeeded (Unix time).')
) m(metric, labels, value, type, help)
UNION ALL
SELECT m.* FROM (
  SELECT jsonb_build_object('operation_id', o.operation_id, 'kind', o.kind, 'shard', o.shard,
                            'target_shard', o.target_shard) AS l, o.*
  FROM id_gen.metrics_operations() o) o
CROSS JOIN LATERAL (VALUES
  ('id_gen_operation_rows_copied', o.l, o.rows_copied, 'gauge', 'Rows copied so far.'),
  ('id_gen_operation_progress_ratio', o.l, o.progress_ratio, 'gauge',
   'Rows copied over rows to copy (splits and merges; 1 when done; NaN for a move still copying).'),
  ('id_gen_operation_lag_bytes', o.l, o.lag_bytes, 'gauge', 'Replication lag of a move''s copy, in bytes.'),
  ('id_gen_operation_fence_seconds', o.l, o.fence_seconds, 'gauge',
   'How long the last write fence held the genes (NaN: none yet).'),
  ('id_gen_operation_fence_attempts', o.l, o.fence_attempts, 'gauge', 'Attempts at the write fence.'),
  ('id_gen_operation_way_back_retained_bytes', o.l, o.way_back_retained_bytes, 'gauge',
   'WAL the target keeps for a reversible move''s way back.'),
  ('id_gen_operation_way_back_retained_ratio', o.l, o.way_back_retained_ratio, 'gauge',
   'That WAL over id_gen.reversible_max_wal (past 1 the supervisor completes the move).'),
  ('id_gen_operation_seconds_since_update', o.l, o.seconds_since_update, 'gauge',
   'Seconds since the operation last recorded progress.'),
  ('id_gen_operation_failed', o.l, o.failed, 'gauge', '1 if the operation failed (see id_gen.operations).')
) m(metric, labels, value, type, help)
UNION ALL
SELECT 'id_gen_operation_phase_info',
       jsonb_build_object('operation_id', p.operation_id, 'kind', p.kind, 'phase', p.phase),
       p.info, 'gauge', 'The operation''s current phase (a label; the value is 1).'
FROM id_gen.metrics_operation_phases() p
UNION ALL
SELECT 'id_gen_operation_check_info',
       jsonb_build_object('operation_id', c.operation_id, 'kind', c.kind, 'state', c.state),
       c.info, 'gauge', 'The state of the operation''s check before its cut-over (a label; the value is 1): different stops it (XX001).'
FROM id_gen.metrics_operation_checks() c
UNION ALL
SELECT 'id_gen_operation_fence_up_seconds',
       jsonb_build_object('operation_id', f.operation_id, 'kind', f.kind, 'shard', f.shard),
       f.seconds, 'gauge', 'Seconds since a write fence of the operation was armed on the shard, while it is neither lifted nor cut over (no series without one).'
FROM id_gen.metrics_operation_fences() f
UNION ALL
SELECT m.* FROM id_gen.metrics_supervisor() v
CROSS JOIN LATERAL (VALUES
  ('id_gen_supervisor_passes_total', '{}'::jsonb, v.passes_total, 'counter',
   'Passes of the move supervisor over unfinished operations (every 2 s) since the server started.'),
  ('id_gen_supervisor_failed_passes_total', '{}'::jsonb, v.failed_passes_total, 'counter',
   'Passes of the move supervisor that ended with an error (a WARNING in the server log).'),
  ('id_gen_supervisor_operations_acted_total', '{}'::jsonb, v.operations_acted_total, 'counter',
   'Operations the move supervisor acted on: a fence lifted, a cut-over finished, a rollback (id_gen.operations.recovered_by).'),
  ('id_gen_supervisor_last_pass_timestamp_seconds', '{}'::jsonb, v.last_pass_timestamp_seconds, 'gauge',
   'When the move supervisor''s last pass ended (Unix time; NaN: none yet).'),
  ('id_gen_supervisor_last_failure_timestamp_seconds', '{}'::jsonb, v.last_failure_timestamp_seconds, 'gauge',
   'When the move supervisor''s last failed pass ended (Unix time; NaN: none yet).')
) m(metric, labels, value, type, help)
UNION ALL
SELECT 'id_gen_order_no_key_current', jsonb_build_object('key_version', k.key_version), k.current, 'gauge',
       '1 for the key version new order numbers use, 0 for versions kept to decode.'
FROM id_gen.metrics_order_no_keys() k;
COMMENT ON VIEW id_gen.metrics IS
  'Every metric of this server, one row per series (metric name, labels, value, Prometheus type, help), from the id_gen.metrics_* functions; monitoring/postgres_exporter.yml exports the same series.';
COMMENT ON COLUMN id_gen.metrics.metric IS 'The metric''s name (id_gen_...).';
COMMENT ON COLUMN id_gen.metrics.labels IS 'The series'' labels, as a JSON object of strings.';
COMMENT ON COLUMN id_gen.metrics.value IS 'Its value (NULL where Prometheus shows NaN).';
COMMENT ON COLUMN id_gen.metrics.type IS 'gauge or counter.';
COMMENT ON COLUMN id_gen.metrics.help IS 'What the metric means.';

REVOKE ALL ON FUNCTION id_gen.metrics_cache_slots(), id_gen.metrics_sequences(), id_gen.metrics_authorities(),
  id_gen.metrics_route_pushes(), id_gen.metrics_operations(), id_gen.metrics_operation_phases(),
  id_gen.metrics_operation_checks(), id_gen.metrics_operation_fences(), id_gen.metrics_supervisor(),
  id_gen.metrics_order_no_keys() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION id_gen.metrics_cache_slots(), id_gen.metrics_sequences(), id_gen.metrics_authorities(),
  id_gen.metrics_route_pushes(), id_gen.metrics_operations(), id_gen.metrics_operation_phases(),
  id_gen.metrics_operation_checks(), id_gen.metrics_operation_fences(), id_gen.metrics_supervisor(),
  id_gen.metrics_order_no_keys() TO pg_monitor;
REVOKE ALL ON id_gen.metrics FROM PUBLIC;
GRANT SELECT ON id_gen.metrics TO pg_monitor;
