-- Online splits and merges of route ranges (CALL id_gen.split_route, CALL
-- id_gen.merge_routes), and the route changes that would copy rows under a table lock
-- (set_route, drop_route), which now refuse unless asked to copy. Code only (CREATE OR
-- REPLACE); the tables are in sql/install/cluster_catalog.sql. The first half runs on a shard,
-- the second on the coordinator.
--
-- A route range is one partition on its shard and one range partition (holding one
-- foreign table) on the coordinator (sql/cluster/distribute.sql). A split of [lo, hi] at g on
-- shard S makes two: [lo, g] and [g + 1, hi]; a merge the inverse. Both stay on S, so the
-- rows are copied within one server, which logical replication cannot do (it applies a
-- change to the table of the same name). The copy is transactional instead:
--
--   planned   the split is recorded on the coordinator; nothing exists on the shard.
--   copying   on S (id_gen.shard_split_prepare, one transaction): the new tables, made
--             LIKE the parent (columns, constraints, indexes) with a CHECK of their bounds,
--             owner and grants of the parent; an AFTER ROW trigger on each old partition
--             (ENABLE ALWAYS, so replica-mode writers fire it too) that appends the id of
--             every row written to id_gen.shard_split_log in the writer's transaction (an
--             append never conflicts, so writers through postgres_fdw, which run in
--             REPEATABLE READ, never get a serialization failure from it; TRUNCATE is
--             refused). Then batches of id_gen.shard_split_copy (INSERT ... SELECT by id
--             range, its own transaction each).
--   swapping  catch-up: id_gen.shard_split_catch_up takes logged ids, deletes them in the
--             new tables and copies them again from the old partition as it is now (READ
--             COMMITTED: every write committed before is seen); idempotent, so order does
--             not matter. Repeated until few ids are left. Then
--             the fence. On S (id_gen.shard_split_swap, one transaction there,
--             lock_timeout 50 ms, retried; the call bounded by 5 s): ACCESS EXCLUSIVE on
--             the shard's tables, the last catch-up (nobody writes now), DETACH of the old
--             partitions, which keep their names and are retired (every write and scan of
--             them gets IG002), ATTACH of the new ones (their CHECK spares the scan). The
--             coordinator locks nothing outside the old ranges meanwhile, so a shard that
--             hangs here holds up its own genes only.
--             A split: one coordinator transaction per attempt holds ACCESS EXCLUSIVE on
--             the old range's partitions only (id_gen.lock_split_ranges; coordinator
--             statements of the range wait), calls the shard's swap, and puts one foreign
--             table per new range inside the old range partition (id_gen.nest_split_here),
--             with the route table and placements; COMMIT. The new ranges get range
--             partitions of their own afterwards (id_gen.relayout_split_here: the table
--             locked within 50 ms, retried; nothing fenced).
--             A merge: the shard's swap first; then the coordinator's half, local catalog
--             work only, with the partitioned tables locked within 50 ms, retried
--             (id_gen.try_finish_split_here). Between the two, coordinator statements of
--             the merged genes reach the retired partitions and get IG002 (retry).
--             Rows never move under a lock of the coordinator.
--   swapped   committed; S drops the old partitions (id_gen.shard_split_cleanup), and a
--             split's new ranges get range partitions of their own on the coordinator.
--   done / aborted / failed.
--
-- Invariants:
--   * Every row written after the trigger's commit is in the log; every row committed
--     before it is seen by the copy, which starts after. A copied row that changes later is
--     in the log, and its catch-up (which runs after the copy) reads it as it is then. So
--     once the log is empty under the lock, the new tables hold exactly the old
--     partitions' rows within their bounds.
--   * Until the shard's swap commits, the old partition is authoritative; an abort drops
--     the triggers and the new tables, and nothing else.
--   * A swap that committed on the shard before the coordinator's half (always so for a
--     moment; for longer after a crash or while the coordinator's tables are busy)
--     leaves the coordinator pointing at the retired old partitions, which refuse
--     (IG002) rather than answer; the next CALL, or the move supervisor
--     (id_gen.recover_operations calls id_gen.recover_split), does the coordinator's half.
--   * One split, merge or move at a time (advisory lock id_gen.operation_start_lock_key(),
--     SHARE ROW EXCLUSIVE on shard_routes, and refusals in both directions).

CREATE OR REPLACE VIEW id_gen.splits AS
SELECT split_id, kind, lower_gene, at_gene, upper_gene, shard, phase,
       rows_total, rows_copied,
       round(100.0 * least(rows_copied, rows_total) / nullif(rows_total, 0), 1) AS percent_copied,
       round(extract(epoch FROM fence_ended_at - fence_started_at) * 1000, 1) AS fence_ms,
       fence_attempts, started_at, finished_at,
       coalesce(finished_at, clock_timestamp()) - started_at AS elapsed,
       last_error,
       id_gen.operation_runner(split_id, phase) AS runner,
       recovered_by,
       verify_state,
       verify_rows,
       id_gen.verify_ms(verify_state, verify_started_at, verified_at) AS verify_ms,
       verify_detail
FROM id_gen.route_splits;
COMMENT ON VIEW id_gen.splits IS 'Online splits (CALL id_gen.split_route) and merges (CALL id_gen.merge_routes) of route ranges: phase, rows copied of the total (percent_copied), how long writes of the range were fenced (fence_ms) and in how many attempts, times, the last error, whether a session runs it (runner), what the move supervisor did (recovered_by), and the check of its new tables against its old partitions before the swap (verify_state: running, equal, different or skipped; verify_rows, verify_ms, verify_detail). An unfinished one resumes with the same CALL or rolls back with CALL id_gen.abort_split(split_id).';
GRANT SELECT ON id_gen.splits TO PUBLIC;

-- Route ranges before (sources) and after (targets) a split or merge.
CREATE OR REPLACE FUNCTION id_gen.split_sources(s id_gen.route_splits) RETURNS int4range[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN CASE s.kind WHEN 'split' THEN ARRAY[int4range(s.lower_gene, s.upper_gene, '[]')]
                   ELSE ARRAY[int4range(s.lower_gene, s.at_gene, '[]'), int4range(s.at_gene + 1, s.upper_gene, '[]')] END;
COMMENT ON FUNCTION id_gen.split_sources(id_gen.route_splits) IS 'The route ranges a split or merge replaces.';
REVOKE EXECUTE ON FUNCTION id_gen.split_sources(id_gen.route_splits) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.split_targets(s id_gen.route_splits) RETURNS int4range[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN CASE s.kind WHEN 'merge' THEN ARRAY[int4range(s.lower_gene, s.upper_gene, '[]')]
                   ELSE ARRAY[int4range(s.lower_gene, s.at_gene, '[]'), int4range(s.at_gene + 1, s.upper_gene, '[]')] END;
COMMENT ON FUNCTION id_gen.split_targets(id_gen.route_splits) IS 'The route ranges a split or merge makes.';
REVOKE EXECUTE ON FUNCTION id_gen.split_targets(id_gen.route_splits) FROM PUBLIC;

-- The coordinator's range partition of a distributed table for genes lower_gene ..
-- upper_gene exactly (NULL if none; id_gen.range_partition creates it).
CREATE OR REPLACE FUNCTION id_gen.find_range_partition(d id_gen.distributed_tables, lower_gene integer, upper_gene integer)
RETURNS regclass
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  SELECT id_gen.partition_with_bound(d, id_gen.partition_bound_text(lower_gene, upper_gene),
                                     id_gen.partition_name(d.coordinator_stem, lower_gene, upper_gene));
END;
COMMENT ON FUNCTION id_gen.find_range_partition(id_gen.distributed_tables, integer, integer) IS 'The coordinator''s range partition of a distributed table whose bound is exactly genes lower_gene .. upper_gene, or NULL.';
REVOKE EXECUTE ON FUNCTION id_gen.find_range_partition(id_gen.distributed_tables, integer, integer) FROM PUBLIC;

-- The route table and the placements after a split or merge (the coordinator's catalog).
CREATE OR REPLACE FUNCTION id_gen.split_routes_here(s id_gen.route_splits) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  d id_gen.distributed_tables;
BEGIN
  IF s.kind = 'split' THEN
    INSERT INTO id_gen.shard_routes (upper_gene, shard) VALUES (s.at_gene, s.shard);
  ELSE
    DELETE FROM id_gen.shard_routes sr WHERE sr.upper_gene = s.at_gene AND sr.shard = s.shard;
  END IF;
  FOR d IN SELECT * FROM id_gen.distributed_tables t ORDER BY t.schema_name, t.table_name LOOP
    UPDATE id_gen.shard_placements p
    SET gene_ranges = (SELECT array_agg(int4range(r.lower_gene, r.upper_gene, '[]') ORDER BY r.lower_gene)
                       FROM id_gen.route_ranges r WHERE r.shard = s.shard),
        updated_at = now()
    WHERE (p.schema_name, p.table_name, p.shard) = (d.schema_name, d.table_name, s.shard);
  END LOOP;
END $$;
COMMENT ON FUNCTION id_gen.split_routes_here(id_gen.route_splits) IS 'The coordinator''s route table and placements after a split or merge.';
REVOKE EXECUTE ON FUNCTION id_gen.split_routes_here(id_gen.route_splits) FROM PUBLIC;

-- One range partition per new range on the coordinator, each holding the foreign table of
-- the shard's new partition; the old range partitions are detached and dropped. Needs
-- ACCESS EXCLUSIVE on the partitioned tables (DETACH). Idempotent.
CREATE OR REPLACE FUNCTION id_gen.relayout_split_here(s id_gen.route_splits) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  d id_gen.distributed_tables;
  g int4range;
  part regclass;
BEGIN
  PERFORM id_gen.quiet_ddl();
  FOR d IN SELECT * FROM id_gen.distributed_tables t WHERE t.layout = 'per_range' ORDER BY t.schema_name, t.table_name LOOP
    FOREACH g IN ARRAY id_gen.split_sources(s) LOOP
      part := id_gen.find_range_partition(d, lower(g), upper(g) - 1);
      IF part IS NOT NULL THEN
        EXECUTE format('ALTER TABLE %I.%I DETACH PARTITION %s', d.schema_name, d.partitioned_name, part);
        EXECUTE format('DROP TABLE %s', part);
      END IF;
    END LOOP;
    FOREACH g IN ARRAY id_gen.split_targets(s) LOOP
      PERFORM id_gen.point_partition(d, id_gen.range_partition(d, lower(g), upper(g) - 1), lower(g), upper(g) - 1, s.shard);
    END LOOP;
  END LOOP;
END $$;
COMMENT ON FUNCTION id_gen.relayout_split_here(id_gen.route_splits) IS 'One coordinator range partition per range a split or merge made (the old ones dropped), each over the shard''s new partition; needs the partitioned tables locked. Idempotent.';
REVOKE EXECUTE ON FUNCTION id_gen.relayout_split_here(id_gen.route_splits) FROM PUBLIC;

-- Whether the coordinator still has a range partition of a range the split or merge replaced.
CREATE OR REPLACE FUNCTION id_gen.split_needs_relayout(s id_gen.route_splits) RETURNS boolean
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  SELECT EXISTS (SELECT FROM id_gen.distributed_tables d, pg_catalog.unnest(id_gen.split_sources(s)) g
                 WHERE d.layout OPERATOR(pg_catalog.=) 'per_range'
                   AND id_gen.find_range_partition(d, pg_catalog.lower(g), pg_catalog.upper(g) OPERATOR(pg_catalog.-) 1) IS NOT NULL);
END;
COMMENT ON FUNCTION id_gen.split_needs_relayout(id_gen.route_splits) IS 'Whether a coordinator range partition of a range that a split or merge replaced is still there.';
REVOKE EXECUTE ON FUNCTION id_gen.split_needs_relayout(id_gen.route_splits) FROM PUBLIC;

-- ACCESS EXCLUSIVE on the coordinator's range partitions of the ranges a split or merge
-- replaces (and, LOCK TABLE recursing, their foreign tables), in one order: the fence of
-- a split on the coordinator. Other ranges are not locked.
CREATE OR REPLACE FUNCTION id_gen.lock_split_ranges(s id_gen.route_splits) RETURNS integer
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  x record;
  n integer := 0;
BEGIN
  FOR x IN SELECT t.schema_name, t.table_name, r, id_gen.find_range_partition(t, lower(r), upper(r) - 1) AS part
           FROM id_gen.distributed_tables t, unnest(id_gen.split_sources(s)) r
           WHERE t.layout = 'per_range'
           ORDER BY t.schema_name, t.table_name, r LOOP
    -- (Before the shard's swap: a table without the range's partition would stop a split
    -- after it, with the range refused.)
    IF x.part IS NULL THEN
      RAISE EXCEPTION 'id_gen: %.% has no range partition of genes % .. %', quote_ident(x.schema_name), quote_ident(x.table_name),
                      lower(x.r), upper(x.r) - 1
        USING ERRCODE = '55000', HINT = 'See id_gen.distribution; run SELECT id_gen.sync_distributed_tables() once no split is unfinished (CALL id_gen.abort_split(split_id) first).';
    END IF;
    EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', x.part);
    n := n + 1;
  END LOOP;
  RETURN n;
END $$;
COMMENT ON FUNCTION id_gen.lock_split_ranges(id_gen.route_splits) IS 'ACCESS EXCLUSIVE on the coordinator''s range partitions (and their foreign tables) of the ranges a split or merge replaces; no other range is locked.';
REVOKE EXECUTE ON FUNCTION id_gen.lock_split_ranges(id_gen.route_splits) FROM PUBLIC;

-- A split's coordinator half in its fence, under ACCESS EXCLUSIVE on the old range's
-- partitions only (id_gen.lock_split_ranges): inside each, the foreign table of the old
-- range gives way to one per new range, over the shard's new partitions; the route table
-- and placements follow. The range partition keeps its bound until
-- id_gen.relayout_split_here replaces it by one per new range (which needs the whole
-- table, and so runs after the fence, within 50 ms lock attempts).
CREATE OR REPLACE FUNCTION id_gen.nest_split_here(s id_gen.route_splits) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  d id_gen.distributed_tables;
  part regclass;
  child regclass;
  g int4range;
BEGIN
  IF s.kind <> 'split' THEN
    RAISE EXCEPTION 'id_gen: only a split nests its new ranges in the old range partition' USING ERRCODE = '55000';
  END IF;
  PERFORM id_gen.quiet_ddl();
  FOR d IN SELECT * FROM id_gen.distributed_tables t WHERE t.layout = 'per_range' ORDER BY t.schema_name, t.table_name LOOP
    part := id_gen.find_range_partition(d, s.lower_gene, s.upper_gene);
    IF part IS NULL THEN
      RAISE EXCEPTION 'id_gen: %.% has no range partition of genes % .. %', quote_ident(d.schema_name), quote_ident(d.table_name),
                      s.lower_gene, s.upper_gene
        USING ERRCODE = '55000', HINT = 'See id_gen.distribution; run SELECT id_gen.sync_distributed_tables() once no split is unfinished.';
    END IF;
    FOR child IN SELECT i.inhrelid::regclass FROM pg_inherits i WHERE i.inhparent = part LOOP
      EXECUTE format('ALTER TABLE %s DETACH PARTITION %s', part, child);
      EXECUTE format('DROP FOREIGN TABLE %s', child);
    END LOOP;
    FOREACH g IN ARRAY id_gen.split_targets(s) LOOP
      PERFORM id_gen.add_foreign_partition(d, part, lower(g), upper(g) - 1, s.shard);
    END LOOP;
  END LOOP;
  PERFORM id_gen.split_routes_here(s);
END $$;
COMMENT ON FUNCTION id_gen.nest_split_here(id_gen.route_splits) IS 'A split''s coordinator half in its fence, under locks of the old range only: one foreign table per new range inside the old range partition, the route table and placements.';
REVOKE EXECUTE ON FUNCTION id_gen.nest_split_here(id_gen.route_splits) FROM PUBLIC;

-- Locks every distributed table's partitioned table (ACCESS EXCLUSIVE), in one order.
CREATE OR REPLACE FUNCTION id_gen.lock_distributed_tables() RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  d record;
BEGIN
  FOR d IN SELECT t.schema_name, t.partitioned_name FROM id_gen.distributed_tables t ORDER BY 1, 2 LOOP
    EXECUTE format('LOCK TABLE %I.%I IN ACCESS EXCLUSIVE MODE', d.schema_name, d.partitioned_name);
  END LOOP;
END $$;
COMMENT ON FUNCTION id_gen.lock_distributed_tables() IS 'ACCESS EXCLUSIVE on the partitioned table of every distributed table, in name order.';
REVOKE EXECUTE ON FUNCTION id_gen.lock_distributed_tables() FROM PUBLIC;

-- The coordinator's half of a split or merge that swapped on its shard, tried once, with
-- locks granted within 50 ms or not at all (a subtransaction: a lock not granted leaves
-- nothing) and no remote call under them. A split: the old range's partitions only
-- (id_gen.nest_split_here); a merge: the partitioned tables, for milliseconds
-- (id_gen.split_routes_here and id_gen.relayout_split_here). Returns NULL (the caller
-- commits) or the lock error; fence_started and attempts are recorded.
CREATE OR REPLACE FUNCTION id_gen.try_finish_split_here(split_id bigint, fence_started timestamptz, attempts integer)
RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  s id_gen.route_splits;
  err text;
BEGIN
  SELECT * INTO s FROM id_gen.route_splits rs WHERE rs.split_id = try_finish_split_here.split_id AND rs.phase = 'swapping';
  IF NOT FOUND THEN
    RAISE EXCEPTION 'id_gen: no split or merge % is swapping', split_id USING ERRCODE = '55000';
  END IF;
  BEGIN
    PERFORM pg_catalog.set_config('lock_timeout', '50ms', true);
    IF s.kind = 'split' THEN
      PERFORM id_gen.lock_split_ranges(s);
      PERFORM pg_catalog.set_config('lock_timeout', '0', true);
      PERFORM id_gen.nest_split_here(s);
    ELSE
      PERFORM id_gen.lock_distributed_tables();
      PERFORM pg_catalog.set_config('lock_timeout', '0', true);
      PERFORM id_gen.split_routes_here(s);
      PERFORM id_gen.relayout_split_here(s);
    END IF;
    UPDATE id_gen.route_splits rs SET phase = 'swapped', fence_attempts = rs.fence_attempts + attempts,
           fence_started_at = fence_started, fence_ended_at = clock_timestamp(), updated_at = clock_timestamp(), last_error = NULL
    WHERE rs.split_id = s.split_id;
  EXCEPTION WHEN lock_not_available THEN
    GET STACKED DIAGNOSTICS err = MESSAGE_TEXT;
    PERFORM pg_catalog.set_config('lock_timeout', '0', true);
  END;
  RETURN err;
END $$;
COMMENT ON FUNCTION id_gen.try_finish_split_here(bigint, timestamptz, integer) IS 'Tries once (locks within 50 ms) the coordinator''s half of a split or merge that swapped on its shard: a split''s under locks of its old range only, a merge''s under locks of the partitioned tables; returns NULL when done (the caller commits) or why not.';
REVOKE EXECUTE ON FUNCTION id_gen.try_finish_split_here(bigint, timestamptz, integer) FROM PUBLIC;

-- After a split's fence: its coordinator range partition replaced by one per new range
-- (id_gen.relayout_split_here), tried once with the partitioned tables locked within 50 ms
-- (a subtransaction). No remote call, nothing fenced: the rows are where the routes say
-- whichever layout the coordinator has. Returns NULL (the caller commits) or why not.
CREATE OR REPLACE FUNCTION id_gen.try_relayout_split_here(split_id bigint) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  s id_gen.route_splits;
  err text;
BEGIN
  SELECT * INTO s FROM id_gen.route_splits rs WHERE rs.split_id = try_relayout_split_here.split_id AND rs.phase = 'swapped';
  IF NOT FOUND THEN
    RAISE EXCEPTION 'id_gen: no split or merge % has swapped', split_id USING ERRCODE = '55000';
  END IF;
  BEGIN
    PERFORM pg_catalog.set_config('lock_timeout', '50ms', true);
    PERFORM id_gen.lock_distributed_tables();
    PERFORM pg_catalog.set_config('lock_timeout', '0', true);
    PERFORM id_gen.relayout_split_here(s);
  EXCEPTION WHEN lock_not_available THEN
    GET STACKED DIAGNOSTICS err = MESSAGE_TEXT;
    PERFORM pg_catalog.set_config('lock_timeout', '0', true);
  END;
  RETURN err;
END $$;
COMMENT ON FUNCTION id_gen.try_relayout_split_here(bigint) IS 'After a split''s fence, tries once (locks within 50 ms) to give each new range its own coordinator range partition; returns NULL when done (the caller commits) or why not.';
REVOKE EXECUTE ON FUNCTION id_gen.try_relayout_split_here(bigint) FROM PUBLIC;

-- A split's or merge's cleanup records, made with it (start_split): on its shard, the
-- triggers and new tables (policy on_failure) and the old partitions after the swap
-- (on_success).
CREATE OR REPLACE FUNCTION id_gen.record_split_cleanups(s id_gen.route_splits) RETURNS void
LANGUAGE sql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT id_gen.record_cleanup(s.split_id, r.object, s.shard, r.object_name, r.policy, r.run_order)
  FROM (VALUES ('new_tables', format('triggers and new tables of %s %s', s.kind, s.split_id), 'on_failure', 20),
               ('old_tables', format('old partitions of genes %s .. %s', s.lower_gene, s.upper_gene), 'on_success', 10))
       r(object, object_name, policy, run_order)
$$;
COMMENT ON FUNCTION id_gen.record_split_cleanups(id_gen.route_splits) IS 'Records what a split or merge may leave on its shard (id_gen.operation_cleanups): its triggers and new tables (cleaned up if it is rolled back) and the old partitions (dropped once it swapped).';
REVOKE EXECUTE ON FUNCTION id_gen.record_split_cleanups(id_gen.route_splits) FROM PUBLIC;

-- One cleanup record of a split or merge, for id_gen.run_cleanups. Idempotent.
CREATE OR REPLACE FUNCTION id_gen.split_cleanup(s id_gen.route_splits, object text) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  CASE object
  WHEN 'new_tables' THEN
    PERFORM id_gen.remote_call(s.shard, 'shard_split_abort', ARRAY[s.split_id::text], 60000);
  WHEN 'old_tables' THEN
    PERFORM id_gen.remote_call(s.shard, 'shard_split_cleanup', ARRAY[s.split_id::text], 120000);
  ELSE
    RAISE EXCEPTION 'id_gen: a split has no clean-up of "%"', object USING ERRCODE = '22023';
  END CASE;
END $$;
COMMENT ON FUNCTION id_gen.split_cleanup(id_gen.route_splits, text) IS 'Cleans up one object of a split or merge on its shard (new_tables: its triggers and new tables, when it is rolled back; old_tables: the old partitions, once it swapped), for id_gen.run_cleanups.';
REVOKE EXECUTE ON FUNCTION id_gen.split_cleanup(id_gen.route_splits, text) FROM PUBLIC;

-- The steps of a split or merge, for the driver of long operations (id_gen.run_operation,
-- sql/cluster/operations.sql), which commits after each step and sleeps `pause` seconds
-- after the commit. A step does one unit of work of the current phase and never commits;
-- `step` says where in the phase the last one left off (NULL: at its start; the steps that
-- change the phase go on with NULL):
--   planned               the shard prepares every distributed table (triggers, new
--                         tables, the statements of the copy); phase copying.
--   copying               one batch of the copy; phase swapping after the last.
--   swapping, NULL        the catch-up of rows written meanwhile, until few are left; then
--                         the fence: {step: fence} for a split, {step: swap_on_shard} for a merge.
--   swapping, fence       one attempt at a split's fence (locks within 50 ms, the shard's
--                         swap, the coordinator's half); phase swapped.
--   swapping, swap_on_shard   one attempt at a merge's swap on its shard; then
--                         {step: finish_here}: one attempt at the coordinator's half (its
--                         tables locked within 50 ms); phase swapped.
--   swapped, NULL         the shard drops the old partitions; then {step: relayout}: one
--                         attempt at giving a split's new ranges their own coordinator
--                         partitions; phase done when none is left to do.
-- The cursor carries the attempt counts and when the fence began (t0), which last for one
-- CALL, as before 0.7.3.
CREATE OR REPLACE FUNCTION id_gen.split_step(split_id bigint, step jsonb) RETURNS id_gen.step_outcome
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  outcome id_gen.step_outcome;
  s id_gen.route_splits;
  d id_gen.distributed_tables;
  total bigint := 0;
  batch jsonb;
  state text;
  attempt integer := coalesce((step->>'attempt')::integer, 1);
  tries integer := coalesce((step->>'tries')::integer, 1);
  t0 timestamptz := (step->>'t0')::timestamptz;
  err text;
BEGIN
  IF split_id IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "split_id" must not be NULL' USING ERRCODE = '22004';
  END IF;
  SELECT * INTO s FROM id_gen.route_splits rs WHERE rs.split_id = split_step.split_id;
  IF NOT FOUND THEN
    outcome.stop_message := format('id_gen: there is no split or merge %s', split_id);
    outcome.stop_sqlstate := '42704';
    outcome.stop_hint := 'See id_gen.splits.';
  ELSIF s.phase = 'planned' THEN
    -- (A table laid out by ownership on the shards has no partition to split: its genes
    -- stay in its table of rows, whose recorded ranges cover the same genes.)
    FOR d IN SELECT * FROM id_gen.distributed_tables t WHERE t.shard_layout = 'partitioned'
             ORDER BY t.schema_name, t.table_name LOOP
      total := total + id_gen.remote_call(s.shard, 'shard_split_prepare',
        ARRAY[s.split_id::text, d.schema_name, d.table_name, d.id_column, d.shard_stem,
              id_gen.split_sources(s)::text, id_gen.split_targets(s)::text, '10000'], 120000)::bigint;
    END LOOP;
    UPDATE id_gen.route_splits rs SET phase = 'copying', rows_total = total, updated_at = clock_timestamp()
    WHERE rs.split_id = s.split_id;

  ELSIF s.phase = 'copying' THEN
    batch := id_gen.remote_call(s.shard, 'shard_split_copy', ARRAY[s.split_id::text, '20000'], 300000)::jsonb;
    UPDATE id_gen.route_splits rs SET rows_copied = rs.rows_copied + (batch->>'copied')::bigint,
           phase = CASE WHEN (batch->>'done')::boolean THEN 'swapping' ELSE 'copying' END,
           updated_at = clock_timestamp()
    WHERE rs.split_id = s.split_id;

  ELSIF s.phase = 'swapping' AND step IS NULL THEN
    state := id_gen.remote_call(s.shard, 'shard_split_state', ARRAY[s.split_id::text], 30000);
    -- Rows written since the copy read them, until few are left for the fence (bounded:
    -- a write rate above the catch-up rate fences with more left).
    FOR i IN 1 .. 50 LOOP
      EXIT WHEN state <> 'copying';
      batch := id_gen.remote_call(s.shard, 'shard_split_catch_up', ARRAY[s.split_id::text, '20000'], 300000)::jsonb;
      EXIT WHEN (batch->>'left')::bigint < 500;
    END LOOP;
    -- The check before the swap (sql/cluster/verify.sql): the new tables against the old
    -- partitions, but for the rows written since the copy.
    IF state = 'copying' THEN
      outcome := id_gen.verify_split(s);
      IF outcome.stop_message IS NOT NULL THEN
        RETURN outcome;
      END IF;
    END IF;
    IF state = 'none' AND NOT EXISTS (SELECT FROM id_gen.distributed_tables t WHERE t.shard_layout = 'partitioned') THEN
      state := 'swapped';  -- (every table is laid out by ownership: nothing to swap on the shard)
    END IF;
    IF state = 'none' THEN
      UPDATE id_gen.route_splits rs SET phase = 'failed', updated_at = clock_timestamp(),
             last_error = 'the shard holds nothing of this split'
      WHERE rs.split_id = s.split_id;
      outcome.stop_message := format('id_gen: %s %s has nothing on shard "%s"', s.kind, s.split_id, s.shard);
      outcome.stop_sqlstate := '55000';
      outcome.stop_hint := format('Abort it with CALL id_gen.abort_split(%s) and start again.', s.split_id);
      RETURN outcome;
    END IF;
    -- A split's fence is one coordinator transaction per attempt (step fence). A merge's is
    -- two steps (its two old ranges become one, which needs the coordinator's partitioned
    -- tables, so their locks cannot wait for the shard): the shard's swap first
    -- (swap_on_shard), with no lock of the coordinator (the old partitions are retired
    -- there: coordinator statements of the merged genes get IG002, retry, until the
    -- coordinator's half commits), then the coordinator's half (finish_here).
    outcome.next_step := jsonb_build_object('t0', clock_timestamp(), 'attempt', 1, 'state', state,
                                    'step', CASE WHEN s.kind = 'split' THEN 'fence'
                                                 WHEN state = 'swapped' THEN 'finish_here' ELSE 'swap_on_shard' END);
    IF s.kind = 'merge' AND state = 'swapped' THEN
      outcome.next_step := outcome.next_step || '{"attempt": 0}';  -- (no swap attempt of this CALL)
    END IF;

  ELSIF s.phase = 'swapping' AND step->>'step' = 'fence' THEN
    -- ACCESS EXCLUSIVE on the old range's partitions only (lock timeout 50 ms: coordinator
    -- statements of the range wait for the fence, nothing else does), the shard's swap (its
    -- own transaction there; its tables under ACCESS EXCLUSIVE, lock timeout 50 ms; the
    -- call bounded by 5 s), then id_gen.nest_split_here; the driver's COMMIT lifts it. A
    -- lock not granted (55P03) is retried (id_gen.split_step_failed); a shard past its
    -- bound (57014) or unreachable fails the CALL (the swap may still commit there: the
    -- same CALL, or the move supervisor, finishes it).
    PERFORM pg_catalog.set_config('lock_timeout', '50ms', true);
    PERFORM id_gen.lock_split_ranges(s);
    PERFORM pg_catalog.set_config('lock_timeout', '0', true);
    IF step->>'state' <> 'swapped' THEN
      PERFORM id_gen.remote_call(s.shard, 'shard_split_swap', ARRAY[s.split_id::text, '50'], 5000);
    END IF;
    PERFORM id_gen.nest_split_here(s);
    UPDATE id_gen.route_splits rs SET phase = 'swapped', fence_attempts = rs.fence_attempts + attempt,
           fence_started_at = t0, fence_ended_at = clock_timestamp(), updated_at = clock_timestamp(), last_error = NULL
    WHERE rs.split_id = s.split_id;

  ELSIF s.phase = 'swapping' AND step->>'step' = 'swap_on_shard' THEN
    PERFORM id_gen.remote_call(s.shard, 'shard_split_swap', ARRAY[s.split_id::text, '50'], 5000);
    outcome.next_step := step || jsonb_build_object('step', 'finish_here', 'state', 'swapped');

  ELSIF s.phase = 'swapping' AND step->>'step' = 'finish_here' THEN
    err := id_gen.try_finish_split_here(s.split_id, t0, attempt + tries);
    IF err IS NOT NULL AND tries >= 200 THEN
      UPDATE id_gen.route_splits rs SET last_error = err, updated_at = clock_timestamp()
      WHERE rs.split_id = s.split_id;
      outcome.stop_message := format('id_gen: merge %s swapped on shard "%s", but the coordinator''s tables stayed busy for %s attempts of 50 ms',
                             s.split_id, s.shard, tries);
      outcome.stop_sqlstate := '55P03';
      outcome.stop_detail := err;
      outcome.stop_hint := 'Until the coordinator''s half commits, statements of the merged genes get IG002 (retry). Long transactions hold the distributed tables; CALL the same procedure again, or let the move supervisor finish it.';
    ELSIF err IS NOT NULL THEN
      outcome.next_step := step || jsonb_build_object('tries', tries + 1);
      outcome.pause := least(0.02 * tries, 0.2);
    END IF;

  ELSIF s.phase = 'swapped' AND step IS NULL THEN
    PERFORM id_gen.run_cleanups(s.split_id, true, NULL, false);
    outcome.next_step := '{"step": "relayout", "tries": 1}';

  ELSIF s.phase = 'swapped' AND step->>'step' = 'relayout' THEN
    -- A split's new ranges get range partitions of their own on the coordinator: nothing
    -- is fenced, but the partitioned tables are locked (within 50 ms, retried) for the
    -- milliseconds of the DETACH.
    IF NOT id_gen.split_needs_relayout(s) THEN
      UPDATE id_gen.route_splits rs SET phase = 'done', finished_at = clock_timestamp(), updated_at = clock_timestamp()
      WHERE rs.split_id = s.split_id;
      RETURN outcome;
    END IF;
    err := id_gen.try_relayout_split_here(s.split_id);
    IF err IS NOT NULL AND tries >= 200 THEN
      UPDATE id_gen.route_splits rs SET last_error = err, updated_at = clock_timestamp()
      WHERE rs.split_id = s.split_id;
      outcome.stop_message := format('id_gen: split %s is in effect, but the coordinator''s tables stayed busy for %s attempts of 50 ms to give its ranges their own partitions',
                             s.split_id, tries);
      outcome.stop_sqlstate := '55P03';
      outcome.stop_detail := err;
      outcome.stop_hint := 'Nothing is fenced meanwhile. Long transactions hold the distributed tables; CALL the same procedure again, or let the move supervisor finish it.';
    ELSE
      outcome.next_step := jsonb_build_object('step', 'relayout', 'tries', tries + 1);
      outcome.pause := CASE WHEN err IS NOT NULL THEN least(0.02 * tries, 0.2) END;
    END IF;

  ELSIF s.phase = 'failed' THEN
    outcome.stop_message := format('id_gen: %s %s failed: %s', s.kind, s.split_id, s.last_error);
    outcome.stop_sqlstate := '55000';
    outcome.stop_hint := format('CALL id_gen.abort_split(%s) rolls it back; then start again.', s.split_id);
  ELSE
    RAISE EXCEPTION 'id_gen: % % has no step % in phase %', s.kind, s.split_id, step, s.phase USING ERRCODE = '55000';
  END IF;
  RETURN outcome;
END $$;
COMMENT ON FUNCTION id_gen.split_step(bigint, jsonb) IS 'One step of a split or merge (the driver id_gen.run_operation commits after each): prepare, one batch of the copy, the catch-up, one attempt at the fence, the cleanup, one attempt at the re-layout. Returns where to go on, how long to pause, or an error to stop with.';
REVOKE EXECUTE ON FUNCTION id_gen.split_step(bigint, jsonb) FROM PUBLIC;

-- What a failed step of a split or merge means (the driver calls it, with the phase the step
-- ran in, after the step's work was rolled back; its calls to the shard were not):
--   planned: what was prepared goes again (the old partitions never stopped serving);
--     the split is aborted (or failed, when that clean-up failed too) and the CALL fails;
--   a fence or merge swap whose lock was not granted (55P03): tried again after a pause,
--     60 times at most; any other error of the fence fails the CALL and lets go of it;
--   any other step: nothing (the driver raises the error as it is and keeps the split,
--     which the same CALL resumes).
CREATE OR REPLACE FUNCTION id_gen.split_step_failed(split_id bigint, phase text, step jsonb, err text, err_state text,
                                                    err_detail text, err_hint text) RETURNS id_gen.step_outcome
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  outcome id_gen.step_outcome;
  s id_gen.route_splits;
  res text;
  attempt integer := coalesce((step->>'attempt')::integer, 1);
BEGIN
  SELECT * INTO s FROM id_gen.route_splits rs WHERE rs.split_id = split_step_failed.split_id;
  IF NOT FOUND THEN
    RETURN outcome;
  ELSIF phase = 'planned' THEN
    res := id_gen.roll_back_operation(s.split_id, err);
    outcome.stop_message := format('id_gen: %s %s could not start on shard "%s": %s', s.kind, s.split_id, s.shard, err);
    outcome.stop_sqlstate := err_state;
    outcome.stop_hint := CASE WHEN res IS NULL THEN 'Nothing was changed; the routes are as they were.'
                      ELSE format('Finish the rollback with CALL id_gen.abort_split(%s).', s.split_id) END;
  ELSIF phase = 'swapping' AND step->>'step' IN ('fence', 'swap_on_shard') AND err_state = '55P03' THEN
    IF attempt < 60 THEN
      outcome.next_step := step || jsonb_build_object('attempt', attempt + 1);
      outcome.pause := least(0.02 * attempt, 0.5);
      RETURN outcome;
    END IF;
    UPDATE id_gen.route_splits rs SET fence_attempts = rs.fence_attempts + attempt, last_error = err, updated_at = clock_timestamp()
    WHERE rs.split_id = s.split_id;
    outcome.stop_sqlstate := '55P03';
    outcome.stop_detail := err;
    IF s.kind = 'split' THEN
      outcome.stop_message := format('id_gen: split %s could not fence its range in %s attempts of 50 ms', s.split_id, attempt);
      outcome.stop_hint := 'Long transactions hold the range''s partitions (on the coordinator or the shard). The copy is kept up to date meanwhile; CALL the same procedure again to retry the fence, or CALL id_gen.abort_split(split_id).';
    ELSE
      outcome.stop_message := format('id_gen: merge %s could not fence its ranges on shard "%s" in %s attempts of 50 ms', s.split_id, s.shard, attempt);
      outcome.stop_hint := 'Long transactions on the shard hold the table. The copy is kept up to date meanwhile; CALL the same procedure again to retry the fence, or CALL id_gen.abort_split(split_id).';
    END IF;
  ELSIF phase = 'swapping' AND step->>'step' IN ('fence', 'swap_on_shard') THEN
    outcome.stop_message := err;
    outcome.stop_sqlstate := err_state;
    outcome.stop_detail := err_detail;
    outcome.stop_hint := err_hint;
  END IF;
  RETURN outcome;
END $$;
COMMENT ON FUNCTION id_gen.split_step_failed(bigint, text, jsonb, text, text, text, text) IS 'What a failed step of a split or merge means, for the driver id_gen.run_operation: roll back one that could not start, try a fence whose locks were not granted again (60 times), or stop; NULLs: raise the error as it is.';
REVOKE EXECUTE ON FUNCTION id_gen.split_step_failed(bigint, text, jsonb, text, text, text, text) FROM PUBLIC;

-- The NOTICE at the end of a split or merge.
CREATE OR REPLACE FUNCTION id_gen.split_summary(split_id bigint) RETURNS text
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT format('id_gen: %s %s of genes %s .. %s on shard "%s" is %s: fence %s ms in %s attempt(s), %s rows copied', s.kind, s.split_id,
                s.lower_gene, s.upper_gene, s.shard, s.phase,
                round(extract(epoch FROM s.fence_ended_at - s.fence_started_at) * 1000, 1), s.fence_attempts, s.rows_copied)
  FROM id_gen.route_splits s WHERE s.split_id = split_summary.split_id
$$;
COMMENT ON FUNCTION id_gen.split_summary(bigint) IS 'One line on a split or merge (phase, fence time and attempts, rows copied): the NOTICE at its end.';
REVOKE EXECUTE ON FUNCTION id_gen.split_summary(bigint) FROM PUBLIC;

-- Records a split or merge (or finds the unfinished one it resumes) and runs it.
CREATE OR REPLACE PROCEDURE id_gen.start_split(kind text, at_gene integer)
LANGUAGE plpgsql
AS $$
DECLARE
  s id_gen.route_splits;
  r record;
  nxt record;
  what text := CASE kind WHEN 'split' THEN 'split a route range' ELSE 'merge route ranges' END;
BEGIN
  -- (at_gene is split_route's at_gene, merge_routes' upper_gene.)
  IF at_gene IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "%" must not be NULL', CASE kind WHEN 'split' THEN 'at_gene' ELSE 'upper_gene' END
      USING ERRCODE = '22004';
  ELSIF at_gene NOT BETWEEN 0 AND 65534 THEN
    RAISE EXCEPTION 'id_gen: %, not %', CASE kind WHEN 'split' THEN 'a range can be split after genes 0 .. 65534'
                                       ELSE 'a range that another follows ends at a gene in 0 .. 65534' END, at_gene
      USING ERRCODE = '22003';
  END IF;
  PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
  PERFORM id_gen.require_superuser(what);
  PERFORM pg_advisory_xact_lock(id_gen.operation_start_lock_key());
  LOCK TABLE id_gen.shard_routes IN SHARE ROW EXCLUSIVE MODE;
  SELECT * INTO s FROM id_gen.route_splits rs WHERE rs.phase NOT IN ('done', 'aborted') ORDER BY rs.split_id DESC LIMIT 1;
  IF FOUND THEN
    IF (s.kind, s.at_gene) IS DISTINCT FROM (start_split.kind, start_split.at_gene) THEN
      RAISE EXCEPTION 'id_gen: % % at gene % is unfinished (%)', s.kind, s.split_id, s.at_gene, s.phase
        USING ERRCODE = '55006',
              HINT = format('Finish it with CALL id_gen.%s(%s), or roll it back with CALL id_gen.abort_split(%s).',
                            CASE s.kind WHEN 'split' THEN 'split_route' ELSE 'merge_routes' END, s.at_gene, s.split_id);
    ELSIF s.phase = 'failed' THEN
      RAISE EXCEPTION 'id_gen: % % failed: %', s.kind, s.split_id, s.last_error
        USING ERRCODE = '55000', HINT = format('CALL id_gen.abort_split(%s) rolls it back; then start again.', s.split_id);
    ELSIF NOT id_gen.take_operation(s.split_id) THEN
      RAISE EXCEPTION 'id_gen: % % is running in session %', s.kind, s.split_id, s.runner_pid
        USING ERRCODE = '55006', HINT = 'Watch it in id_gen.splits.';
    END IF;
    COMMIT;  -- (run_operation records this session as the runner)
    CALL id_gen.run_operation(s.split_id);
    RETURN;
  END IF;
  PERFORM id_gen.refuse_during_operations(what);

  SELECT * INTO r FROM id_gen.route_ranges rr WHERE rr.lower_gene <= at_gene AND rr.upper_gene >= at_gene;
  IF r IS NULL THEN
    RAISE EXCEPTION 'id_gen: gene % has no route', at_gene
      USING ERRCODE = '55000', HINT = 'Routes are listed in id_gen.route_ranges; add one with id_gen.set_route.';
  END IF;
  IF kind = 'split' THEN
    IF r.upper_gene = at_gene THEN
      RAISE EXCEPTION 'id_gen: gene % is the upper bound of route range % .. % already', at_gene, r.lower_gene, r.upper_gene
        USING ERRCODE = '22023', HINT = 'split_route(g) splits the range that holds g into [lower, g] and [g + 1, upper].';
    END IF;
    s.lower_gene := r.lower_gene;
    s.upper_gene := r.upper_gene;
  ELSE
    SELECT * INTO nxt FROM id_gen.route_ranges rr WHERE rr.lower_gene = at_gene + 1;
    IF r.upper_gene <> at_gene OR nxt IS NULL THEN
      RAISE EXCEPTION 'id_gen: gene % is not the upper bound of a route range that another one follows', at_gene
        USING ERRCODE = '22023',
              DETAIL = format('Its route range is %s .. %s on %s.', r.lower_gene, r.upper_gene, r.shard),
              HINT = 'merge_routes(g) merges the range that ends at g with the next one.';
    ELSIF nxt.shard <> r.shard THEN
      RAISE EXCEPTION 'id_gen: route ranges % .. % and % .. % are on shards "%" and "%"', r.lower_gene, r.upper_gene,
                      nxt.lower_gene, nxt.upper_gene, r.shard, nxt.shard
        USING ERRCODE = '22023',
              HINT = format('Move one of them first: CALL id_gen.move_genes(%s, %s, %L).', nxt.lower_gene, nxt.upper_gene, r.shard);
    END IF;
    s.lower_gene := r.lower_gene;
    s.upper_gene := nxt.upper_gene;
  END IF;
  IF NOT EXISTS (SELECT FROM id_gen.distributed_tables) THEN
    -- Nothing holds rows by these routes: a plain route change.
    IF kind = 'split' THEN
      INSERT INTO id_gen.shard_routes (upper_gene, shard) VALUES (at_gene, r.shard);
    ELSE
      DELETE FROM id_gen.shard_routes sr WHERE sr.upper_gene = at_gene;
    END IF;
    RAISE NOTICE 'id_gen: no distributed tables; the route table alone changed';
    RETURN;
  END IF;
  PERFORM id_gen.dblink_schema();
  INSERT INTO id_gen.route_splits (kind, lower_gene, at_gene, upper_gene, shard, runner_pid)
  VALUES (kind, s.lower_gene, at_gene, s.upper_gene, r.shard, pg_backend_pid())
  RETURNING * INTO s;
  PERFORM id_gen.record_split_cleanups(s);
  PERFORM pg_advisory_lock(id_gen.operation_session_lock_key(), s.split_id::integer);
  RAISE NOTICE 'id_gen: % % of genes % .. % at % on shard "%" (watch it in id_gen.splits)', kind, s.split_id,
    s.lower_gene, s.upper_gene, at_gene, s.shard;
  COMMIT;
  CALL id_gen.run_operation(s.split_id);
END $$;
COMMENT ON PROCEDURE id_gen.start_split(text, integer) IS 'Common start of split_route and merge_routes: checks, records the change (or finds the unfinished one it resumes) and runs it with id_gen.run_operation.';
REVOKE EXECUTE ON PROCEDURE id_gen.start_split(text, integer) FROM PUBLIC;

CREATE OR REPLACE PROCEDURE id_gen.split_route(at_gene integer)
LANGUAGE plpgsql
AS $$ BEGIN CALL id_gen.start_split('split', at_gene); END $$;
COMMENT ON PROCEDURE id_gen.split_route(integer) IS 'Splits the route range holding at_gene into [lower, at_gene] and [at_gene + 1, upper], both on the same shard, online: rows are copied on the shard while writes go on, and writes of that range pause only for a fence of milliseconds (see id_gen.splits). Resumable (same CALL) and abortable (id_gen.abort_split). Superuser only.';
REVOKE EXECUTE ON PROCEDURE id_gen.split_route(integer) FROM PUBLIC;

CREATE OR REPLACE PROCEDURE id_gen.merge_routes(upper_gene integer)
LANGUAGE plpgsql
AS $$ BEGIN CALL id_gen.start_split('merge', upper_gene); END $$;
COMMENT ON PROCEDURE id_gen.merge_routes(integer) IS 'Merges the route range ending at upper_gene with the next one (both on one shard) online, the inverse of split_route: rows are copied on the shard while writes go on, then a fence of milliseconds. Resumable and abortable like a split. Superuser only.';
REVOKE EXECUTE ON PROCEDURE id_gen.merge_routes(integer) FROM PUBLIC;

CREATE OR REPLACE PROCEDURE id_gen.abort_split(split_id bigint)
LANGUAGE plpgsql
AS $$
DECLARE
  s id_gen.route_splits;
  state text;
  res text;
BEGIN
  PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
  PERFORM id_gen.require_superuser('abort a split');
  SELECT * INTO s FROM id_gen.route_splits rs WHERE rs.split_id = abort_split.split_id FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'id_gen: there is no split or merge %', split_id USING ERRCODE = '42704', HINT = 'See id_gen.splits.';
  ELSIF s.phase IN ('done', 'aborted') THEN
    RAISE NOTICE 'id_gen: % % is % already', s.kind, s.split_id, s.phase;
    RETURN;
  ELSIF NOT id_gen.take_operation(s.split_id) THEN
    RAISE EXCEPTION 'id_gen: % % is running in session %', s.kind, s.split_id, s.runner_pid
      USING ERRCODE = '55006', HINT = 'Cancel that session''s CALL first (pg_cancel_backend).';
  END IF;
  state := id_gen.remote_call(s.shard, 'shard_split_state', ARRAY[s.split_id::text], 30000);
  IF s.phase = 'swapped' OR state = 'swapped' THEN
    PERFORM id_gen.release_operation(s.split_id);
    RAISE EXCEPTION 'id_gen: % % has swapped on its shard; it can only be finished', s.kind, s.split_id
      USING ERRCODE = '55000',
            HINT = format('CALL id_gen.%s(%s) finishes it; then %s undoes it online.',
                          CASE s.kind WHEN 'split' THEN 'split_route' ELSE 'merge_routes' END, s.at_gene,
                          CASE s.kind WHEN 'split' THEN format('id_gen.merge_routes(%s)', s.at_gene) ELSE format('id_gen.split_route(%s)', s.at_gene) END);
  END IF;
  res := id_gen.roll_back_operation(s.split_id, NULL);
  PERFORM id_gen.release_operation(s.split_id);
  IF res IS NOT NULL THEN
    RAISE WARNING 'id_gen: % % is not fully rolled back: %', s.kind, s.split_id, res;
  END IF;
END $$;
COMMENT ON PROCEDURE id_gen.abort_split(bigint) IS 'Rolls back a split or merge that has not swapped: the shard drops its triggers and new tables; the routes never changed. Superuser only.';
REVOKE EXECUTE ON PROCEDURE id_gen.abort_split(bigint) FROM PUBLIC;

-- The supervisor's bounded form of the coordinator's half of a swap (relayout false: the
-- step finish_here of split_step) or of the re-layout after a split (true: the step
-- relayout): up to 20 tries 50 ms apart, each taking its locks within 50 ms, so that the
-- coordinator's writers never wait longer; 55P03 with the last reason when none got them.
CREATE OR REPLACE FUNCTION id_gen.split_here_within_a_second(s id_gen.route_splits, relayout boolean) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  res text;
BEGIN
  FOR attempt IN 1 .. 20 LOOP
    EXIT WHEN relayout AND NOT id_gen.split_needs_relayout(s);
    res := CASE WHEN relayout THEN id_gen.try_relayout_split_here(s.split_id)
                ELSE id_gen.try_finish_split_here(s.split_id, coalesce(s.fence_started_at, clock_timestamp()), 0) END;
    EXIT WHEN res IS NULL;
    PERFORM pg_sleep(0.05);
  END LOOP;
  IF res IS NOT NULL THEN
    RAISE EXCEPTION 'the coordinator''s tables stayed busy: %', res USING ERRCODE = '55P03';
  END IF;
END $$;
COMMENT ON FUNCTION id_gen.split_here_within_a_second(id_gen.route_splits, boolean) IS 'For the move supervisor: the coordinator''s half of a split''s or merge''s swap (relayout false) or the re-layout after a split (true), up to 20 tries of 50 ms locks, 50 ms apart; 55P03 when none succeeded.';
REVOKE EXECUTE ON FUNCTION id_gen.split_here_within_a_second(id_gen.route_splits, boolean) FROM PUBLIC;

-- A split or merge whose session is gone, for the recovery loop (id_gen.recover_operations
-- in sql/cluster/operations.sql), which holds its session lock and records what this
-- returns, or the error it raises. A failed one (its rollback incomplete) waits for
-- CALL id_gen.abort_split.
CREATE OR REPLACE FUNCTION id_gen.recover_split(split_id bigint, abandon_after interval) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  s id_gen.route_splits;
  res text;
  state text;
BEGIN
  SELECT * INTO s FROM id_gen.route_splits rs WHERE rs.split_id = recover_split.split_id;
  IF NOT FOUND OR s.phase IN ('done', 'aborted', 'failed') THEN
    RETURN NULL;
  END IF;
  state := id_gen.remote_call(s.shard, 'shard_split_state', ARRAY[s.split_id::text], 10000);
  IF s.phase = 'swapping' AND state = 'swapped' THEN
    PERFORM id_gen.split_here_within_a_second(s, false);
    -- (The cleanup, a remote call, waits for the next pass: these locks last until
    -- this pass commits.)
    RETURN 'finished the swap here';
  ELSIF s.phase = 'swapped' THEN
    PERFORM id_gen.run_cleanups(s.split_id, true, NULL, false);
    PERFORM id_gen.split_here_within_a_second(s, true);
    UPDATE id_gen.route_splits rs SET phase = 'done', finished_at = clock_timestamp(), updated_at = clock_timestamp()
    WHERE rs.split_id = s.split_id;
    RETURN 'dropped the old partitions';
  ELSIF s.updated_at < clock_timestamp() - abandon_after THEN
    res := id_gen.roll_back_operation(s.split_id, NULL);
    RETURN CASE WHEN res IS NULL THEN 'rolled back (left alone for ' || abandon_after || ')' ELSE 'rollback incomplete: ' || res END;
  END IF;
  RETURN NULL;
END $$;
COMMENT ON FUNCTION id_gen.recover_split(bigint, interval) IS 'The move supervisor''s work on one split or merge no session runs (called by id_gen.recover_operations under its session lock): finishes one that swapped on its shard (the coordinator''s half, then the cleanup) and rolls back one left alone for abandon_after before that; returns what it did (NULL: nothing).';
REVOKE EXECUTE ON FUNCTION id_gen.recover_split(bigint, interval) FROM PUBLIC;

-- set_route and drop_route (route changes by hand) are in sql/cluster/routing.sql.
