-- Online moves of route ranges between shards (CALL id_gen.move_genes), on PostgreSQL's
-- logical replication. Built on the layout of sql/cluster/distribute.sql: a route range is one
-- partition on its shard, and on the coordinator one range partition holding one foreign
-- table (per_range), so a move copies whole tables and re-points one foreign table per
-- table; or (per_shard) a share of the foreign table over the shard's whole table, so the
-- target keeps its copies out of its table until the fence (hidden copies,
-- sql/cluster/shard/move.sql) and the fence re-lays both shards' tables; or (a per_shard table
-- laid out by ownership on the shards, docs/design.md §11.8) the shards' tables of rows,
-- published with a row filter on the moved genes' ids, whose copies wait on the target as
-- rows it does not own; the fence then fences the genes as data on the source, and hands
-- them over (the target owns them, then the source no longer does) under the coordinator's
-- locks; the source's rows go after the cut-over, in batches (sql/cluster/shard/owned_rows.sql).
-- Code only (CREATE OR REPLACE); the tables are in sql/install/cluster_catalog.sql, and what runs
-- on the shards is in sql/cluster/shard/move.sql.
--
-- Phases (id_gen.moves.phase), each committed before the next starts:
--   planned      the move is recorded; nothing exists anywhere yet.
--   copying      the target has the partitions (created from the coordinator's
--                definitions); the source publishes them (row filter on the id, the
--                replica identity) and creates the move's slot; the target subscribes
--                (the source's connection string travels as a bound parameter of a
--                postgres_fdw INSERT into the target's id_gen.move_secrets, so no
--                statement text carries a password) and the initial copy runs. Ends when
--                every table of the subscription is ready (srsubstate = 'r').
--   catching_up  streaming; ends when the slot's lag is small.
--   (fence)      one coordinator transaction: ACCESS EXCLUSIVE on the coordinator's range
--                partitions of the moved genes (their writers wait; other ranges are
--                not locked), a trigger on the source partitions that refuses direct
--                writes, a marker row written on the source after that and awaited on
--                the target (everything before it is applied: apply is in commit order),
--                the target's local sequences raised above the source's, then the routes
--                and the foreign tables flipped to the target. COMMIT lifts the fence;
--                waiting writers re-route to the target.
--                per_shard tables: ACCESS EXCLUSIVE on their partitioned tables here as well
--                (their foreign tables read the shards' whole tables); before
--                the flip the target attaches its hidden copies, and after lifting its fence
--                the source detaches the moved partitions, so that once COMMIT lifts the
--                fence every row is read once, from the target. A fence that fails, or whose
--                coordinator dies before COMMIT, is undone under the same locks
--                (id_gen.undo_shown_copies: cleanup record shown_copies).
--   cut_over     the source detaches its partitions (direct writes of those genes get
--                23514 there), drops the subscription (and with it the slot) and the
--                publication, and drops the detached partitions unless keep_source.
--   done / aborted / failed.
--
-- Invariants:
--   * Until the flip commits, the source is authoritative and the routes unchanged;
--     every step before it is undone by id_gen.abort_move.
--   * Nothing a move makes on a shard outlives it: each object is a cleanup record
--     (id_gen.operation_cleanups, id_gen.record_move_cleanups) committed before the
--     object is made, and goes by its policy when the move ends (id_gen.run_cleanups).
--   * No replication slot outlives its move: the move creates its slot itself, and only
--     after it recorded (and committed) that it will; a slot of that name that exists
--     before is never taken over or dropped. The table-sync slots are recognised by the
--     subscription's oid and the target's system identifier.
--   * A fence never outlives its move: a move whose session is gone (a crash, a
--     coordinator restart, an interrupted CALL) is picked up by id_gen.recover_move,
--     which the move supervisor (a background worker on the coordinator) runs every few
--     seconds: a fence of a move that has not cut over is lifted at once, a move that has
--     cut over is finished, and a move left alone for id_gen.move_abandon_after is
--     rolled back.
--   * Remote statements go through id_gen.remote_exec (sql/cluster/distribute.sql): one
--     statement, pinned search_path, READ COMMITTED, cancellable, bounded.

CREATE OR REPLACE VIEW id_gen.moves AS
SELECT move_id, lower_gene, upper_gene, source_shard, target_shard, phase,
       rows_copied, lag_bytes,
       round(extract(epoch FROM fence_ended_at - fence_started_at) * 1000, 1) AS fence_ms,
       fence_attempts,
       EXISTS (SELECT FROM id_gen.operation_cleanups c
               WHERE c.operation_id = move_id AND c.object IN ('source_fence', 'revert_fence')) AS source_fenced,
       started_at, finished_at,
       coalesce(finished_at, clock_timestamp()) - started_at AS elapsed,
       last_error,
       id_gen.operation_runner(move_id, phase) AS runner,
       recovered_by,
       reversible,
       back_lag_bytes,
       back_retained_bytes,
       back_checked_at,
       verify_state,
       verify_rows,
       id_gen.verify_ms(verify_state, verify_started_at, verified_at) AS verify_ms,
       verify_detail
FROM id_gen.shard_moves;
COMMENT ON VIEW id_gen.moves IS 'Moves of genes between shards: phase, rows copied, replication lag, how long writes of the moved genes were fenced (fence_ms), times, the last error, whether a session runs it (runner), what the move supervisor did (recovered_by), and for a reversible move (phase reversible after its cut-over) the reverse replication''s lag and the WAL its slot keeps on the target (back_lag_bytes, back_retained_bytes, refreshed every 10 s by the supervisor), and the check of its source against its target before the cut-over (verify_state: running, equal, unsettled, different or skipped; verify_rows compared, verify_ms, verify_detail). Unfinished moves resume with the same CALL id_gen.move_genes(...) or roll back with CALL id_gen.abort_move(move_id); the supervisor finishes or rolls back those left alone.';
GRANT SELECT ON id_gen.moves TO PUBLIC;

-- libpq connection string of a shard for CREATE SUBSCRIPTION on another shard: the
-- libpq options of its foreign server and of the current user's mapping.
CREATE OR REPLACE FUNCTION id_gen.subscription_conninfo(shard text, mask_password boolean DEFAULT true) RETURNS text
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  SELECT string_agg(format('%s=''%s''', o.key,
                           CASE WHEN o.key = 'password' AND mask_password THEN '********'
                                ELSE replace(replace(o.value, '\', '\\'), '''', '\''') END), ' ' ORDER BY o.key)
  FROM (SELECT split_part(opt, '=', 1) AS key, substr(opt, strpos(opt, '=') + 1) AS value
        FROM (SELECT unnest(s.srvoptions) AS opt FROM pg_foreign_server s WHERE s.srvname = subscription_conninfo.shard
              UNION ALL
              SELECT unnest(um.umoptions) FROM pg_user_mappings um
              WHERE um.srvname = subscription_conninfo.shard
                AND um.umuser = (SELECT coalesce((SELECT u.umuser FROM pg_user_mappings u
                                                  WHERE u.srvname = subscription_conninfo.shard AND u.usename = current_user), 0))
             ) opts) o
  WHERE o.key IN ('host', 'hostaddr', 'port', 'dbname', 'user', 'password', 'sslmode', 'sslrootcert',
                  'sslcert', 'sslkey', 'connect_timeout', 'options', 'target_session_attrs', 'passfile');
END;
COMMENT ON FUNCTION id_gen.subscription_conninfo(text, boolean) IS 'The libpq connection string of a shard (options of its foreign server and of the current user''s mapping), for a subscription on another shard; the password is masked unless mask_password => false.';
REVOKE EXECUTE ON FUNCTION id_gen.subscription_conninfo(text, boolean) FROM PUBLIC;

-- The shard partitions a move takes, as qualified names, with their id columns and genes.
CREATE OR REPLACE FUNCTION id_gen.move_parts(lower_gene integer, upper_gene integer,
                                             OUT parts text[], OUT id_columns name[], OUT lower_genes integer[],
                                             OUT upper_genes integer[], OUT ranges text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF lower_gene IS NULL OR upper_gene IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "%" must not be NULL', CASE WHEN lower_gene IS NULL THEN 'lower_gene' ELSE 'upper_gene' END
      USING ERRCODE = '22004';
  END IF;
  SELECT coalesce(array_agg(format('%I.%I', d.schema_name, id_gen.partition_name(d.shard_stem, r.lower_gene, r.upper_gene))
                            ORDER BY d.schema_name, d.table_name, r.lower_gene), '{}'),
         coalesce(array_agg(d.id_column ORDER BY d.schema_name, d.table_name, r.lower_gene), '{}'),
         coalesce(array_agg(r.lower_gene ORDER BY d.schema_name, d.table_name, r.lower_gene), '{}'),
         coalesce(array_agg(r.upper_gene ORDER BY d.schema_name, d.table_name, r.lower_gene), '{}')
    INTO parts, id_columns, lower_genes, upper_genes
  FROM id_gen.distributed_tables d
  CROSS JOIN id_gen.route_ranges r
  WHERE d.shard_layout = 'partitioned' AND r.lower_gene >= move_parts.lower_gene AND r.upper_gene <= move_parts.upper_gene;
  SELECT string_agg(format('%s..%s', rr.lower_gene, rr.upper_gene), ', ' ORDER BY rr.lower_gene) INTO ranges
  FROM id_gen.route_ranges rr WHERE rr.lower_gene >= move_parts.lower_gene AND rr.upper_gene <= move_parts.upper_gene;
END $$;
COMMENT ON FUNCTION id_gen.move_parts(integer, integer) IS 'The shards'' partitions of the route ranges within lower_gene .. upper_gene, for every distributed table partitioned on the shards (qualified names, id columns, genes); tables laid out by ownership are id_gen.owned_move_parts.';
REVOKE EXECUTE ON FUNCTION id_gen.move_parts(integer, integer) FROM PUBLIC;

-- The parts of move_parts that belong to per_shard tables: their copies are hidden on the
-- target until the fence, and the fence detaches them from the source (sql/cluster/shard/move.sql).
CREATE OR REPLACE FUNCTION id_gen.per_shard_move_parts(lower_gene integer, upper_gene integer,
                                                       OUT parts text[], OUT lower_genes integer[], OUT upper_genes integer[])
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF lower_gene IS NULL OR upper_gene IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "%" must not be NULL', CASE WHEN lower_gene IS NULL THEN 'lower_gene' ELSE 'upper_gene' END
      USING ERRCODE = '22004';
  END IF;
  SELECT coalesce(array_agg(format('%I.%I', d.schema_name, id_gen.partition_name(d.shard_stem, r.lower_gene, r.upper_gene))
                            ORDER BY d.schema_name, d.table_name, r.lower_gene), '{}'),
         coalesce(array_agg(r.lower_gene ORDER BY d.schema_name, d.table_name, r.lower_gene), '{}'),
         coalesce(array_agg(r.upper_gene ORDER BY d.schema_name, d.table_name, r.lower_gene), '{}')
    INTO parts, lower_genes, upper_genes
  FROM id_gen.distributed_tables d
  CROSS JOIN id_gen.route_ranges r
  WHERE d.layout = 'per_shard' AND d.shard_layout = 'partitioned' AND r.lower_gene >= per_shard_move_parts.lower_gene AND r.upper_gene <= per_shard_move_parts.upper_gene;
END $$;
COMMENT ON FUNCTION id_gen.per_shard_move_parts(integer, integer) IS 'The shards'' partitions of the route ranges within lower_gene .. upper_gene of the per_shard distributed tables (qualified names, genes): the target hides their copies until the move''s fence, which detaches them from the source.';
REVOKE EXECUTE ON FUNCTION id_gen.per_shard_move_parts(integer, integer) FROM PUBLIC;

-- Whether a move re-lays per_shard tables (hidden copies, the fence's attach and detach):
-- whenever one exists, as a move copies every distributed table's partitions of its genes.
CREATE OR REPLACE FUNCTION id_gen.has_per_shard_tables() RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT EXISTS (SELECT FROM id_gen.distributed_tables t WHERE t.layout = 'per_shard') $$;
COMMENT ON FUNCTION id_gen.has_per_shard_tables() IS 'Whether a distributed table is laid out per_shard here (then moves hide the target''s copies until the fence and re-lay both shards in it).';
REVOKE EXECUTE ON FUNCTION id_gen.has_per_shard_tables() FROM PUBLIC;

-- Whether a move carries tables of rows (tables laid out by ownership, docs/design.md §11.8).
CREATE OR REPLACE FUNCTION id_gen.has_owned_tables() RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT EXISTS (SELECT FROM id_gen.distributed_tables t WHERE t.shard_layout = 'by_ownership') $$;
COMMENT ON FUNCTION id_gen.has_owned_tables() IS 'Whether a distributed table is laid out by ownership here (then moves fence, hand over and delete its rows of the genes as data, with the steps of id_gen.move_commands that name tables of rows).';
REVOKE EXECUTE ON FUNCTION id_gen.has_owned_tables() FROM PUBLIC;

-- The tables of rows of the distributed tables laid out by ownership (docs/design.md §11.8),
-- as qualified names, with their id columns: a move publishes each with a row filter on the
-- moved genes' ids, fences the genes as data on the source, and hands them over in its fence.
CREATE OR REPLACE FUNCTION id_gen.owned_move_parts(OUT rows_tables text[], OUT id_columns name[])
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT coalesce(array_agg(format('%I.%I', d.schema_name, id_gen.fit_name(d.shard_stem, '_rows'))
                            ORDER BY d.schema_name, d.table_name), '{}'),
         coalesce(array_agg(d.id_column ORDER BY d.schema_name, d.table_name), '{}')
  FROM id_gen.distributed_tables d WHERE d.shard_layout = 'by_ownership'
$$;
COMMENT ON FUNCTION id_gen.owned_move_parts() IS 'The shards'' tables of rows of the distributed tables laid out by ownership (qualified names, id columns), which a move carries by a row filter on the moved genes.';
REVOKE EXECUTE ON FUNCTION id_gen.owned_move_parts() FROM PUBLIC;

-- What a move (and its way back) publishes and subscribes to: the partitions of the route
-- ranges of the genes (move_parts), then the tables of rows (owned_move_parts), each with
-- its id column and the genes its rows are filtered on (a partition's own range; the moved
-- genes for a table of rows, which holds other genes' rows too).
CREATE OR REPLACE FUNCTION id_gen.published_move_parts(lower_gene integer, upper_gene integer,
                                                       OUT tables text[], OUT id_columns name[], OUT lower_genes integer[],
                                                       OUT upper_genes integer[])
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  p record := id_gen.move_parts(lower_gene, upper_gene);
  ow record := id_gen.owned_move_parts();
BEGIN
  tables := p.parts || ow.rows_tables;
  id_columns := p.id_columns || ow.id_columns;
  lower_genes := p.lower_genes || array_fill(published_move_parts.lower_gene, ARRAY[cardinality(ow.rows_tables)]);
  upper_genes := p.upper_genes || array_fill(published_move_parts.upper_gene, ARRAY[cardinality(ow.rows_tables)]);
END $$;
COMMENT ON FUNCTION id_gen.published_move_parts(integer, integer) IS 'What a move of genes lower_gene .. upper_gene and its way back publish: the shards'' partitions of its route ranges (id_gen.move_parts), then the tables of rows (id_gen.owned_move_parts), with their id columns and the genes each is filtered on.';
REVOKE EXECUTE ON FUNCTION id_gen.published_move_parts(integer, integer) FROM PUBLIC;

-- The steps of a move, by name, in order: what move_genes runs and what dry_run prints
-- (with per_shard tables, the steps that hide their copies on the target until the fence).
-- server is 'source', 'target' or 'coordinator' (a comment: done locally). Every shard
-- command is SELECT id_gen.shard_...(<literals>), but two subscription commands that
-- PostgreSQL runs only outside functions; none carries a password.
-- The steps of a move that only some moves have (id_gen.move_commands leaves the others out):
-- 'per_shard_parts', those of per_shard partitions on the shards; 'per_shard_tables', the
-- coordinator's lock of its per_shard tables (with either kind of table on the shards);
-- 'owned_tables', those of tables laid out by ownership. run_move_step does nothing for
-- them when a move has none of that kind, and refuses every other step it does not list.
CREATE OR REPLACE FUNCTION id_gen.move_steps_only_for(kind text) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN CASE kind
  WHEN 'per_shard_parts' THEN ARRAY['hide_incoming', 'show_incoming', 'detach_source_in_fence', 'settle_target',
                                    'reattach_source', 'drop_hidden']
  WHEN 'per_shard_tables' THEN ARRAY['fence_coordinator_shards']
  WHEN 'owned_tables' THEN ARRAY['check_source_rows', 'count_target_owned', 'fence_source_owned', 'own_incoming',
                                 'release_source', 'keep_source_rows', 'delete_source_rows', 'retake_source', 'unfence_source_owned',
                                 'unfence_target_owned', 'disown_incoming', 'delete_target_rows']
END;
COMMENT ON FUNCTION id_gen.move_steps_only_for(text) IS 'The steps of a move that only moves with per_shard partitions (per_shard_parts), with per_shard tables (per_shard_tables) or with tables laid out by ownership (owned_tables) have; id_gen.move_commands lists them only then.';

CREATE OR REPLACE FUNCTION id_gen.move_commands(m id_gen.shard_moves)
RETURNS TABLE (step integer, phase text, server text, name text, command text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  id text := coalesce(m.move_id::text, 'N');
  tag text := 'id_gen_move_' || coalesce(m.move_id::text, 'N');
  p record;
  ps record;
  ow record;
  pub record;
  lo text := m.lower_gene::text;
  hi text := m.upper_gene::text;
BEGIN
  IF m.lower_gene IS NULL OR m.upper_gene IS NULL OR m.source_shard IS NULL OR m.target_shard IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "m" must not be NULL (it needs genes and shards)' USING ERRCODE = '22004';
  END IF;
  p := id_gen.move_parts(m.lower_gene, m.upper_gene);
  ps := id_gen.per_shard_move_parts(m.lower_gene, m.upper_gene);
  ow := id_gen.owned_move_parts();
  pub := id_gen.published_move_parts(m.lower_gene, m.upper_gene);
  -- The steps of per_shard partitions exist only when the move has some, those of tables of
  -- rows only when a table is laid out by ownership.
  RETURN QUERY SELECT v.* FROM (VALUES
    (1, 'copying', 'coordinator', 'prepare_target',
     format('-- %s gets the partitions of route ranges %s (id_gen.shard_apply_ranges): it creates the tables and empty partitions from the coordinator''s definitions', m.target_shard, p.ranges)),
    (2, 'copying', 'target', 'fence_target', id_gen.remote_call_text('shard_fence_incoming', ARRAY[id, m.source_shard, p.parts::text])),
    (3, 'copying', 'source', 'check_source_rows', id_gen.remote_call_text('shard_count_moved_rows', ARRAY[ow.rows_tables::text, ow.id_columns::text, lo, hi])),
    (4, 'copying', 'target', 'hide_incoming', id_gen.remote_call_text('shard_hide_incoming', ARRAY[id, ps.parts::text])),
    (5, 'copying', 'source', 'create_publication',
     id_gen.remote_call_text('shard_create_publication', ARRAY[id, pub.tables::text, pub.id_columns::text, pub.lower_genes::text,
                                                              pub.upper_genes::text])),
    (6, 'copying', 'coordinator', 'send_connection',
     format('-- through postgres_fdw: INSERT INTO id_gen.move_secrets (move_id, conninfo) VALUES ($1, $2) on %s, with $2 = %s', m.target_shard, id_gen.subscription_conninfo(m.source_shard, true))),
    (7, 'copying', 'target', 'create_subscription', id_gen.remote_call_text('shard_subscribe', ARRAY[id, pub.tables::text])),
    (8, 'copying', 'source', 'create_slot', id_gen.remote_call_text('shard_create_slot', ARRAY[id])),
    (9, 'copying', 'target', 'enable_subscription', id_gen.remote_call_text('shard_enable_subscription', ARRAY[id])),
    (10, 'copying', 'target', 'refresh_subscription', format('ALTER SUBSCRIPTION %I REFRESH PUBLICATION WITH (copy_data = true)', tag)),
    (11, 'copying', 'target', 'sync_state', id_gen.remote_call_text('shard_subscription_state', ARRAY[id])),
    (12, 'copying', 'target', 'count_target', id_gen.remote_call_text('shard_rows_copied', ARRAY[p.parts::text])),
    (13, 'copying', 'target', 'count_target_owned', id_gen.remote_call_text('shard_count_moved_rows', ARRAY[ow.rows_tables::text, ow.id_columns::text, lo, hi])),
    (14, 'catching_up', 'source', 'lag', id_gen.remote_call_text('shard_move_lag', ARRAY[id])),
    (15, 'catching_up', 'coordinator', 'fence_coordinator',
     '-- LOCK TABLE <range partitions of the moved genes> IN ACCESS EXCLUSIVE MODE  (writers of these genes wait; others do not)'),
    (16, 'catching_up', 'coordinator', 'fence_coordinator_shards',
     '-- LOCK TABLE <each per_shard table> IN ACCESS EXCLUSIVE MODE  (its statements wait for the fence, then route by the new routes)'),
    (17, 'catching_up', 'source', 'fence_source', id_gen.remote_call_text('shard_fence', ARRAY[id, m.target_shard, p.parts::text])),
    (18, 'catching_up', 'source', 'fence_source_owned', id_gen.remote_call_text('shard_fence_owned', ARRAY[ow.rows_tables::text, lo, hi])),
    (19, 'catching_up', 'source', 'marker', id_gen.remote_call_text('shard_write_marker', ARRAY[id, '<attempt>'])),
    (20, 'catching_up', 'target', 'await_marker', id_gen.remote_call_text('shard_has_marker', ARRAY[id, '<attempt>'])),
    (21, 'catching_up', 'target', 'show_incoming',
     id_gen.remote_call_text('shard_show_incoming', ARRAY[id, ps.parts::text, ps.lower_genes::text, ps.upper_genes::text])),
    (22, 'catching_up', 'target', 'own_incoming', id_gen.remote_call_text('shard_own_moved', ARRAY[ow.rows_tables::text, lo, hi, 'true'])),
    (23, 'catching_up', 'coordinator', 'flip',
     format('-- UPDATE id_gen.shard_routes SET shard = %L for %s; swap each range partition''s foreign table to %s; then (next step) the target''s fence is lifted, and COMMIT lifts the coordinator''s', m.target_shard, p.ranges, m.target_shard)),
    (24, 'catching_up', 'target', 'unfence_target', id_gen.remote_call_text('shard_unfence', ARRAY[p.parts::text])),
    (25, 'catching_up', 'target', 'unfence_target_owned', id_gen.remote_call_text('shard_unfence_owned', ARRAY[ow.rows_tables::text, lo, hi])),
    (26, 'catching_up', 'source', 'detach_source_in_fence', id_gen.remote_call_text('shard_detach_moved', ARRAY[id, ps.parts::text])),
    (27, 'catching_up', 'source', 'release_source', id_gen.remote_call_text('shard_own_moved', ARRAY[ow.rows_tables::text, lo, hi, 'false'])),
    (28, 'cut_over', 'source', 'detach_source', id_gen.remote_call_text('shard_detach_moved', ARRAY[id, p.parts::text])),
    (29, 'cut_over', 'coordinator', 'forget_source',
     format('-- %s no longer owns route ranges %s (id_gen.shard_apply_ranges)', m.source_shard, p.ranges)),
    (30, 'cut_over', 'target', 'settle_target', id_gen.remote_call_text('shard_settle_incoming', ARRAY[ps.parts::text])),
    (31, 'cut_over', 'target', 'drop_subscription', format('DROP SUBSCRIPTION IF EXISTS %I', tag)),
    (32, 'cut_over', 'source', 'drop_publication', id_gen.remote_call_text('shard_drop_publication', ARRAY[id])),
    (33, 'cut_over', 'source', 'drop_source',
     id_gen.remote_call_text('shard_drop_moved', ARRAY[id, p.parts::text, (NOT coalesce(m.keep_source, false))::text])),
    (34, 'cut_over', 'source', 'keep_source_rows',
     id_gen.remote_call_text('shard_keep_unowned_rows', ARRAY[id, ow.rows_tables::text, ow.id_columns::text, lo, hi, '10000'])),
    (35, 'cut_over', 'source', 'delete_source_rows',
     id_gen.remote_call_text('shard_delete_unowned_rows', ARRAY[ow.rows_tables::text, ow.id_columns::text, lo, hi, '10000'])),
    (36, 'cut_over', 'target', 'forget_markers', id_gen.remote_call_text('shard_forget_markers', ARRAY[id])),
    (37, 'abort', 'source', 'reattach_source',
     id_gen.remote_call_text('shard_reattach_moved', ARRAY[id, ps.parts::text, ps.lower_genes::text, ps.upper_genes::text])),
    (38, 'abort', 'source', 'retake_source', id_gen.remote_call_text('shard_own_moved', ARRAY[ow.rows_tables::text, lo, hi, 'true'])),
    (39, 'abort', 'source', 'unfence_source', id_gen.remote_call_text('shard_unfence', ARRAY[p.parts::text])),
    (40, 'abort', 'source', 'unfence_source_owned', id_gen.remote_call_text('shard_unfence_owned', ARRAY[ow.rows_tables::text, lo, hi])),
    (41, 'abort', 'source', 'drop_slot',
     id_gen.remote_call_text('shard_drop_move_slots', ARRAY[id, coalesce(id_gen.has_cleanup(m.move_id, 'replication_slot'), false)::text,
                                                           m.target_subscription::text, m.target_system_id])),
    (42, 'abort', 'target', 'detach_subscription', id_gen.remote_call_text('shard_detach_subscription', ARRAY[id])),
    (43, 'abort', 'target', 'empty_target', id_gen.remote_call_text('shard_empty_partitions', ARRAY[p.parts::text])),
    (44, 'abort', 'target', 'drop_hidden', id_gen.remote_call_text('shard_drop_hidden', ARRAY[ps.parts::text])),
    (45, 'abort', 'target', 'disown_incoming', id_gen.remote_call_text('shard_own_moved', ARRAY[ow.rows_tables::text, lo, hi, 'false'])),
    (46, 'abort', 'target', 'delete_target_rows',
     id_gen.remote_call_text('shard_delete_unowned_rows', ARRAY[ow.rows_tables::text, ow.id_columns::text, lo, hi, '10000'])),
    (47, 'abort', 'source', 'forget_source_markers', id_gen.remote_call_text('shard_forget_markers', ARRAY[id]))
  ) v(step, phase, server, name, command)
  WHERE (cardinality(ps.parts) > 0 OR v.name <> ALL (id_gen.move_steps_only_for('per_shard_parts')))
    AND (cardinality(ps.parts) > 0 OR cardinality(ow.rows_tables) > 0 OR v.name <> ALL (id_gen.move_steps_only_for('per_shard_tables')))
    AND (cardinality(ow.rows_tables) > 0 OR v.name <> ALL (id_gen.move_steps_only_for('owned_tables')));
END $$;
COMMENT ON FUNCTION id_gen.move_commands(id_gen.shard_moves) IS 'The steps of a move with the statement each server runs (what move_genes executes and dry_run prints); no statement carries a password.';
REVOKE EXECUTE ON FUNCTION id_gen.move_commands(id_gen.shard_moves) FROM PUBLIC;

-- Runs one step of a move on the shard it belongs to (<attempt> filled in).
CREATE OR REPLACE FUNCTION id_gen.run_move_step(m id_gen.shard_moves, step_name text, attempt integer DEFAULT 0,
                                                timeout_ms integer DEFAULT 60000) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  c record;
BEGIN
  SELECT * INTO c FROM id_gen.move_commands(m) mc WHERE mc.name = step_name;
  IF NOT FOUND THEN
    -- (A step of a kind of table this move does not carry: nothing to run. Any other name
    -- is a mistake.)
    IF step_name = ANY (id_gen.move_steps_only_for('per_shard_parts') || id_gen.move_steps_only_for('owned_tables')) THEN
      RETURN NULL;
    END IF;
    RAISE EXCEPTION 'id_gen: % is not a step of move %', step_name, m.move_id USING ERRCODE = '22023';
  ELSIF c.server NOT IN ('source', 'target') THEN
    RAISE EXCEPTION 'id_gen: % is not a step that runs on a shard', step_name USING ERRCODE = '22023';
  END IF;
  RETURN id_gen.remote_exec(CASE c.server WHEN 'source' THEN m.source_shard ELSE m.target_shard END,
                           replace(c.command, '<attempt>', attempt::text), timeout_ms);
END $$;
COMMENT ON FUNCTION id_gen.run_move_step(id_gen.shard_moves, text, integer, integer) IS 'Runs one step of a move (see move_commands) on its shard; returns NULL without running anything for a step of a kind of table the move does not carry (id_gen.move_steps_only_for), and refuses (22023) any other step move_commands does not list.';
REVOKE EXECUTE ON FUNCTION id_gen.run_move_step(id_gen.shard_moves, text, integer, integer) FROM PUBLIC;

-- Tells a shard its new route ranges for every distributed table (each committed there)
-- and records them.
CREATE OR REPLACE FUNCTION id_gen.place_ranges(shard text, add_lower integer, add_upper integer, adding boolean) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  d record;
  wanted int4range[];
BEGIN
  FOR d IN SELECT * FROM id_gen.distributed_tables ORDER BY schema_name, table_name LOOP
    SELECT coalesce(array_agg(g ORDER BY g), '{}') INTO wanted
    FROM (SELECT DISTINCT g
          FROM (SELECT unnest(p.gene_ranges) AS g FROM id_gen.shard_placements p
                WHERE (p.schema_name, p.table_name, p.shard) = (d.schema_name, d.table_name, place_ranges.shard)
                UNION ALL
                SELECT int4range(r.lower_gene, r.upper_gene, '[]') FROM id_gen.route_ranges r
                WHERE adding AND d.shard_layout = 'partitioned' AND r.lower_gene >= add_lower AND r.upper_gene <= add_upper) x
          WHERE adding OR NOT (g <@ int4range(add_lower, add_upper, '[]'))) y;
    PERFORM id_gen.push_shard_table(shard, d.schema_name, d.table_name, wanted);
  END LOOP;
END $$;
COMMENT ON FUNCTION id_gen.place_ranges(text, integer, integer, boolean) IS 'Adds (adding) or removes the route ranges within add_lower .. add_upper to or from a shard''s placement of every distributed table, on the shard and in id_gen.shard_placements; a table laid out by ownership gains genes only in a move''s fence (id_gen.hand_over_owned_placements), so adding only makes sure the shard has it.';
REVOKE EXECUTE ON FUNCTION id_gen.place_ranges(text, integer, integer, boolean) FROM PUBLIC;

-- In the fence of a move of tables laid out by ownership, once the shards have handed the
-- genes over (own_incoming, release_source): the coordinator's record of what each holds,
-- route range by route range as place_ranges keeps it. Rolled back with the fence.
CREATE OR REPLACE FUNCTION id_gen.hand_over_owned_placements(m id_gen.shard_moves) RETURNS void
LANGUAGE sql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
  UPDATE id_gen.shard_placements p
  SET gene_ranges = ARRAY(SELECT DISTINCT g
                          FROM (SELECT unnest(p.gene_ranges) AS g
                                UNION ALL
                                SELECT int4range(r.lower_gene, r.upper_gene, '[]') FROM id_gen.route_ranges r
                                WHERE p.shard = m.target_shard AND r.lower_gene >= m.lower_gene AND r.upper_gene <= m.upper_gene) x
                          WHERE p.shard = m.target_shard OR NOT (g <@ int4range(m.lower_gene, m.upper_gene, '[]'))
                          ORDER BY g),
      updated_at = now()
  FROM id_gen.distributed_tables d
  WHERE d.shard_layout = 'by_ownership' AND (p.schema_name, p.table_name) = (d.schema_name, d.table_name)
    AND p.shard IN (m.source_shard, m.target_shard)
$$;
COMMENT ON FUNCTION id_gen.hand_over_owned_placements(id_gen.shard_moves) IS 'In a move''s fence: id_gen.shard_placements of the tables laid out by ownership give the moved route ranges to the target and take them from the source.';
REVOKE EXECUTE ON FUNCTION id_gen.hand_over_owned_placements(id_gen.shard_moves) FROM PUBLIC;

-- Refuses (55000) when a shard lacks a function of id_gen (a shard not updated yet): what
-- needs it, and the version that has it.
CREATE OR REPLACE FUNCTION id_gen.shard_has_function(shard text, signature text) RETURNS boolean
LANGUAGE sql STRICT
SET search_path = pg_catalog, pg_temp
RETURN id_gen.remote_exec(shard, format('SELECT pg_catalog.to_regprocedure(%L) IS NOT NULL', signature), 10000) IS NOT DISTINCT FROM 't';
COMMENT ON FUNCTION id_gen.shard_has_function(text, text) IS 'Whether a shard has the function of the signature given (false for a shard not updated yet).';
REVOKE EXECUTE ON FUNCTION id_gen.shard_has_function(text, text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.require_shard_function(shard text, signature text, what text, since text) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF NOT id_gen.shard_has_function(shard, signature) THEN
    RAISE EXCEPTION 'id_gen: % needs id_gen % or later on shard "%"', what, since, shard
      USING ERRCODE = '55000', DETAIL = format('The shard has no function %s. Nothing was changed.', signature),
            HINT = 'Run ALTER EXTENSION id_gen UPDATE on the shard, then call again.';
  END IF;
END $$;
COMMENT ON FUNCTION id_gen.require_shard_function(text, text, text, text) IS 'Raises 55000 naming the shard, what needs it and the version since when the shard lacks the function of the signature given (a shard not updated yet).';
REVOKE EXECUTE ON FUNCTION id_gen.require_shard_function(text, text, text, text) FROM PUBLIC;

-- A step of a move that works in batches, each committed on its shard (the deletes and the
-- keep of rows of tables laid out by ownership), run until it returns 0; returns the sum.
CREATE OR REPLACE FUNCTION id_gen.run_move_step_in_batches(m id_gen.shard_moves, step_name text) RETURNS bigint
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  n bigint;
  total bigint := 0;
BEGIN
  LOOP
    n := id_gen.run_move_step(m, step_name, 0, 60000)::bigint;
    EXIT WHEN coalesce(n, 0) = 0;
    total := total + n;
  END LOOP;
  RETURN total;
END $$;
COMMENT ON FUNCTION id_gen.run_move_step_in_batches(id_gen.shard_moves, text) IS 'Runs a step of a move that works in batches (each committed on its shard) until it returns 0: delete_source_rows, delete_target_rows, keep_source_rows; returns the sum of what it returned.';
REVOKE EXECUTE ON FUNCTION id_gen.run_move_step_in_batches(id_gen.shard_moves, text) FROM PUBLIC;

-- The rows of the moved genes that a shard holds but does not own (the source's after the
-- cut-over, the target's copies of a move rolled back, leftovers before a move), deleted in
-- batches of 10,000 per table, each batch committed there; returns how many went.
CREATE OR REPLACE FUNCTION id_gen.delete_moved_rows(m id_gen.shard_moves, on_target boolean) RETURNS bigint
LANGUAGE sql STRICT
SET search_path = pg_catalog, pg_temp
RETURN id_gen.run_move_step_in_batches(m, CASE WHEN on_target THEN 'delete_target_rows' ELSE 'delete_source_rows' END);
COMMENT ON FUNCTION id_gen.delete_moved_rows(id_gen.shard_moves, boolean) IS 'Deletes, in batches each committed on the shard, the rows of a move''s genes that its source (after the cut-over) or its target (on_target: copies of a move rolled back, leftovers) holds of tables laid out by ownership but does not own.';
REVOKE EXECUTE ON FUNCTION id_gen.delete_moved_rows(id_gen.shard_moves, boolean) FROM PUBLIC;

-- The source's connection string goes to the target as a bound parameter of a
-- postgres_fdw INSERT (the statement text there reads VALUES ($1, $2)); it becomes
-- visible there when the caller commits.
CREATE OR REPLACE FUNCTION id_gen.send_move_secret(m id_gen.shard_moves) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  ft name := 'move_secrets_' || left(md5(m.target_shard), 16);
BEGIN
  EXECUTE format('CREATE FOREIGN TABLE id_gen.%I (move_id bigint, conninfo text) SERVER %I OPTIONS (schema_name %L, table_name %L)',
                 ft, m.target_shard, 'id_gen', 'move_secrets');
  EXECUTE format('DELETE FROM id_gen.%I WHERE move_id = $1', ft) USING m.move_id;
  EXECUTE format('INSERT INTO id_gen.%I (move_id, conninfo) VALUES ($1, $2)', ft)
    USING m.move_id, id_gen.subscription_conninfo(m.source_shard, false);
  EXECUTE format('DROP FOREIGN TABLE id_gen.%I', ft);
END $$;
COMMENT ON FUNCTION id_gen.send_move_secret(id_gen.shard_moves) IS 'Leaves the source''s connection string (with its password) in the target''s id_gen.move_secrets, as a bound parameter of a postgres_fdw INSERT; the target''s shard_subscribe reads and deletes it.';
REVOKE EXECUTE ON FUNCTION id_gen.send_move_secret(id_gen.shard_moves) FROM PUBLIC;

-- A move's cleanup records: every object a move may make on a shard, with its policy and
-- order (id_gen.run_cleanups runs the highest run_order first: a fence goes first, so that
-- writes flow again whatever else is slow; a subscription before its slot; the way back
-- before the source's kept partitions; the fence's re-layout of per_shard tables is undone
-- before the source's fence goes). A revert's fence goes whatever the outcome: the
-- revert's flip forgets it (the target's copies go with the revert), and a move completed
-- while an interrupted revert's fence is up (complete_move, the WAL bound) lifts it. Records that the move may
-- make `objects` (the caller commits before making them): the entry procedure those of the
-- start (id_gen.move_genes); the step before the one that makes it the replication slot,
-- the source's fence (with the shown copies of per_shard tables) and a revert's fence.
CREATE OR REPLACE FUNCTION id_gen.record_move_cleanups(m id_gen.shard_moves, objects text[]) RETURNS void
LANGUAGE sql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT id_gen.record_cleanup(m.move_id, r.object, r.node, r.object_name, r.policy, r.run_order)
  FROM (VALUES
    ('way_back', m.target_shard, format('publication and slot id_gen_back_%s, and the subscription of that name on %s', m.move_id, m.source_shard), 'always', 95),
    ('shown_copies', m.target_shard, format('the fence''s copies of per_shard tables attached on %s and partitions detached on %s (genes %s .. %s)',
                                            m.target_shard, m.source_shard, m.lower_gene, m.upper_gene), 'on_failure', 100),
    ('source_fence', m.source_shard, format('fence triggers on the partitions of genes %s .. %s', m.lower_gene, m.upper_gene), 'on_failure', 99),
    ('revert_fence', m.target_shard, format('fence triggers on the partitions of genes %s .. %s', m.lower_gene, m.upper_gene), 'always', 98),
    ('subscription', m.target_shard, format('subscription id_gen_move_%s', m.move_id), 'always', 60),
    ('publication', m.source_shard, format('publication id_gen_move_%s', m.move_id), 'always', 50),
    ('replication_slot', m.source_shard, format('replication slot id_gen_move_%s', m.move_id), 'always', 45),
    ('sync_slots', m.source_shard, format('table-sync slots of subscription id_gen_move_%s', m.move_id), 'always', 44),
    ('source_copies', m.source_shard, format('partitions of genes %s .. %s%s', m.lower_gene, m.upper_gene,
                                              CASE WHEN m.keep_source THEN ' (kept, renamed *_moved_' || m.move_id || ')' ELSE '' END), 'on_success', 40),
    ('target_copies', m.target_shard, format('partitions of genes %s .. %s', m.lower_gene, m.upper_gene), 'on_failure', 30),
    ('markers', m.target_shard, format('rows of move %s in id_gen.move_markers', m.move_id), 'always', 20),
    ('source_markers', m.source_shard, format('rows of move %s in id_gen.move_markers', m.move_id), 'always', 10)
  ) r(object, node, object_name, policy, run_order)
  WHERE r.object = ANY (objects)
$$;
COMMENT ON FUNCTION id_gen.record_move_cleanups(id_gen.shard_moves, text[]) IS 'Records that a move may make the objects named, before it makes them (id_gen.operation_cleanups): way_back, shown_copies, revert_fence, source_fence, subscription, publication, replication_slot, sync_slots, source_copies, target_copies, markers, source_markers, each with its shard, policy and run_order.';
REVOKE EXECUTE ON FUNCTION id_gen.record_move_cleanups(id_gen.shard_moves, text[]) FROM PUBLIC;

-- One cleanup record of a move, for id_gen.run_cleanups (succeeded: the move completes;
-- else it is rolled back, or reverted). Each is idempotent; an error is raised as it is.
CREATE OR REPLACE FUNCTION id_gen.move_cleanup(m id_gen.shard_moves, object text, succeeded boolean) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  p record;
  left_slots text;
BEGIN
  CASE object
  WHEN 'way_back' THEN
    PERFORM id_gen.drop_way_back(m);  -- (sql/cluster/revert.sql)
  WHEN 'revert_fence' THEN
    PERFORM id_gen.lift_revert_fence(m, 10000);
  WHEN 'shown_copies' THEN
    PERFORM id_gen.undo_shown_copies(m);
  WHEN 'source_fence' THEN
    -- (per_shard tables: the source's partitions that a fence detached are attached again
    -- first, whatever became of the target, which shown_copies, run before, could not reach;
    -- unfence_source finds partitions by their names)
    IF id_gen.has_per_shard_tables() THEN
      PERFORM id_gen.run_move_step(m, 'reattach_source', 0, 120000);
    END IF;
    PERFORM id_gen.run_move_step(m, 'unfence_source', 0, 10000);
    -- (tables laid out by ownership: the source owns the genes again, unfenced, once the
    -- target has given them back: shown_copies, which runs first, is done)
    IF id_gen.has_owned_tables() THEN
      IF id_gen.has_cleanup(m.move_id, 'shown_copies') THEN
        RAISE EXCEPTION 'id_gen: move %: the source''s fence of genes % .. % stays until "%" gives them back',
                        m.move_id, m.lower_gene, m.upper_gene, m.target_shard
          USING ERRCODE = '55000', HINT = 'The clean-up shown_copies did not finish; it is tried again when the target answers.';
      END IF;
      PERFORM id_gen.run_move_step(m, 'retake_source', 0, 10000);
      PERFORM id_gen.run_move_step(m, 'unfence_source_owned', 0, 10000);
    END IF;
  WHEN 'subscription' THEN
    IF NOT succeeded THEN  -- (its slot goes by itself: the source may not answer)
      PERFORM id_gen.run_move_step(m, 'detach_subscription', 0, 10000);
    END IF;
    PERFORM id_gen.run_move_step(m, 'drop_subscription', 0, 30000);
  WHEN 'publication' THEN
    PERFORM id_gen.run_move_step(m, 'drop_publication', 0, 30000);
  WHEN 'replication_slot', 'sync_slots' THEN
    -- A walsender may take a moment to exit after its subscriber went away.
    FOR i IN 1 .. 50 LOOP
      left_slots := id_gen.remote_call(m.source_shard, 'shard_drop_move_slots',
                                      CASE WHEN object = 'replication_slot' THEN ARRAY[m.move_id::text, 'true', NULL, NULL]
                                           ELSE ARRAY[m.move_id::text, 'false', m.target_subscription::text, m.target_system_id] END,
                                      10000);
      EXIT WHEN left_slots = '0';
      PERFORM pg_sleep(0.2);
    END LOOP;
    IF left_slots <> '0' THEN
      RAISE EXCEPTION 'id_gen: % replication slot(s) of move % on "%" are still in use after 10 s', left_slots, m.move_id, m.source_shard
        USING ERRCODE = '55006';
    END IF;
  WHEN 'source_copies' THEN
    IF m.reversible THEN  -- (kept since the cut-over; the way back went first)
      p := id_gen.move_parts(m.lower_gene, m.upper_gene);
      PERFORM id_gen.remote_call(m.source_shard, 'shard_drop_kept', ARRAY[m.move_id::text, p.parts::text], 60000);
    ELSE
      PERFORM id_gen.run_move_step(m, 'detach_source', 0, 30000);
      PERFORM id_gen.place_ranges(m.source_shard, m.lower_gene, m.upper_gene, false);
      PERFORM id_gen.run_move_step(m, 'drop_source', 0, 60000);
    END IF;
    -- Tables laid out by ownership: the source's rows of the genes, which it no longer owns
    -- (kept followed the target until now), go in batches; with keep_source they are
    -- copied to a table of their own first.
    IF id_gen.has_owned_tables() THEN
      IF m.keep_source THEN
        -- (copied in batches of 10,000 into a table of their own beside each table of rows)
        PERFORM id_gen.run_move_step_in_batches(m, 'keep_source_rows');
      END IF;
      PERFORM id_gen.delete_moved_rows(m, false);
    END IF;
  WHEN 'target_copies' THEN
    IF m.phase = 'reverting' THEN  -- (the target owned them: detached and dropped)
      PERFORM id_gen.run_move_step(id_gen.reversed(m), 'detach_source', 0, 30000);
      PERFORM id_gen.place_ranges(m.target_shard, m.lower_gene, m.upper_gene, false);
      PERFORM id_gen.run_move_step(id_gen.reversed(m), 'drop_source', 0, 60000);
      IF id_gen.has_owned_tables() THEN
        -- (tables laid out by ownership: the target gave the genes back in the revert's
        -- fence; its rows of them go in batches)
        PERFORM id_gen.delete_moved_rows(m, true);
      END IF;
    ELSE
      PERFORM id_gen.run_move_step(m, 'empty_target', 0, 60000);
      IF id_gen.has_owned_tables() THEN
        -- (the target gave the genes back if its fence's hand-over did not commit: shown_copies)
        PERFORM id_gen.run_move_step(m, 'disown_incoming', 0, 10000);
        PERFORM id_gen.delete_moved_rows(m, true);
      END IF;
      PERFORM id_gen.place_ranges(m.target_shard, m.lower_gene, m.upper_gene, false);
      IF id_gen.has_per_shard_tables() THEN
        PERFORM id_gen.run_move_step(m, 'drop_hidden', 0, 30000);
      END IF;
    END IF;
  WHEN 'markers' THEN
    PERFORM id_gen.run_move_step(m, 'forget_markers', 0, 10000);
  WHEN 'source_markers' THEN
    PERFORM id_gen.run_move_step(m, 'forget_source_markers', 0, 10000);
  ELSE
    RAISE EXCEPTION 'id_gen: a move has no clean-up of "%"', object USING ERRCODE = '22023';
  END CASE;
END $$;
COMMENT ON FUNCTION id_gen.move_cleanup(id_gen.shard_moves, text, boolean) IS 'Cleans up one object of a move (see id_gen.record_move_cleanups) on its shard, for id_gen.run_cleanups; succeeded: the move completes, else it is rolled back or reverted.';
REVOKE EXECUTE ON FUNCTION id_gen.move_cleanup(id_gen.shard_moves, text, boolean) FROM PUBLIC;

-- After the flip: the source lets go. Idempotent; raises on the first failing step.
CREATE OR REPLACE FUNCTION id_gen.finish_cut_over(m id_gen.shard_moves) RETURNS id_gen.shard_moves
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  PERFORM id_gen.run_move_step(m, 'unfence_target', 0, 10000);
  IF id_gen.has_owned_tables() THEN
    PERFORM id_gen.run_move_step(m, 'unfence_target_owned', 0, 10000);
  END IF;
  IF id_gen.has_per_shard_tables() THEN
    PERFORM id_gen.run_move_step(m, 'settle_target', 0, 10000);
  END IF;
  IF m.reversible THEN
    RETURN id_gen.open_way_back(m);
  END IF;
  PERFORM id_gen.run_cleanups(m.move_id, true, NULL, false);
  UPDATE id_gen.shard_moves SET phase = 'done', finished_at = clock_timestamp(), updated_at = clock_timestamp(),
                                last_error = NULL
  WHERE move_id = m.move_id AND phase = 'cut_over' RETURNING * INTO m;
  RETURN m;
END $$;
COMMENT ON FUNCTION id_gen.finish_cut_over(id_gen.shard_moves) IS 'Finishes a move that has cut over: its cleanup records of policies always and on_success (the subscription with its slot, the publication, the source''s partitions detached and dropped unless keep_source, the markers).';
REVOKE EXECUTE ON FUNCTION id_gen.finish_cut_over(id_gen.shard_moves) FROM PUBLIC;

-- Shards whose last route push failed within 30 s: the supervisor leaves them out of its
-- pass (each call to a shard that hangs would wait for its bound and hold up the others).
CREATE OR REPLACE FUNCTION id_gen.shards_not_answering() RETURNS text[]
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  SELECT coalesce(array_agg(rp.shard ORDER BY rp.shard), '{}') FROM id_gen.route_pushes rp
  WHERE rp.last_error IS NOT NULL AND rp.tried_at > clock_timestamp() - interval '30 s';
END;
COMMENT ON FUNCTION id_gen.shards_not_answering() IS 'Shards whose last route push failed within the last 30 s (id_gen.route_pushes): the move supervisor skips their moves and splits in its pass and tries them again once a push succeeds.';
REVOKE EXECUTE ON FUNCTION id_gen.shards_not_answering() FROM PUBLIC;

-- A move whose session is gone, for the recovery loop (id_gen.recover_operations in
-- sql/cluster/operations.sql), which holds the move's session lock and records what this
-- returns, or the error it raises. `down`: shards that did not answer lately, left alone.
CREATE OR REPLACE FUNCTION id_gen.recover_move(move_id bigint, abandon_after interval, down text[]) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  m id_gen.shard_moves;
  cleanup text;
  max_wal text := coalesce(current_setting('id_gen.reversible_max_wal', true), '1GB');
BEGIN
  SELECT * INTO m FROM id_gen.shard_moves sm WHERE sm.move_id = recover_move.move_id;
  IF NOT FOUND OR m.phase IN ('done', 'aborted', 'reverted') THEN
    RETURN NULL;
  END IF;
  -- The target does not own the genes before the cut-over: its fence is put up again
  -- (idempotent), whatever happened to the session that lifted it in a fence or died
  -- between creating the target's partitions and fencing them (planned).
  IF m.phase IN ('planned', 'copying', 'catching_up') THEN
    PERFORM id_gen.run_move_step(m, 'fence_target', 0, 5000);
  END IF;
  IF m.phase <> 'reversible' AND m.source_shard = ANY (down) THEN
    RETURN NULL;  -- the rest needs the source
  ELSIF m.phase = 'cut_over' THEN
    PERFORM id_gen.finish_cut_over(m);
    RETURN 'finished the cut-over';
  ELSIF m.phase = 'reverting' THEN
    PERFORM id_gen.finish_revert(m);
    RETURN 'finished the revert';
  ELSIF m.phase = 'reversible' THEN
    -- Left open on purpose: only a fence of an interrupted revert is lifted, and a way
    -- back that keeps too much WAL on the target is ended (the genes stay there).
    IF id_gen.has_cleanup(m.move_id, 'revert_fence') AND m.source_shard <> ALL (down) THEN
      PERFORM id_gen.run_cleanups(m.move_id, false, '{revert_fence}', false);
      RETURN 'lifted the fence of an interrupted revert';
    ELSIF m.back_retained_bytes > pg_size_bytes(max_wal)
       OR (m.back_retained_bytes IS NULL AND m.last_error LIKE 'the way back''s slot is missing%') THEN
      -- Over the bound, or the slot is gone already (dropped by an earlier pass whose
      -- clean-up on the source failed): no way back is left; the genes stay on the target.
      PERFORM id_gen.end_way_back(m);
      RETURN CASE WHEN m.back_retained_bytes IS NULL
                  THEN format('completed: the way back''s slot on %s was gone', m.target_shard)
                  ELSE format('completed: the way back kept %s of WAL on %s (id_gen.reversible_max_wal = %s)',
                              pg_size_pretty(m.back_retained_bytes), m.target_shard, max_wal) END;
    END IF;
  ELSIF id_gen.has_cleanup(m.move_id, 'source_fence') OR id_gen.has_cleanup(m.move_id, 'shown_copies') THEN
    -- (A fence of per_shard tables that died before its flip committed: its re-layout of the
    -- two shards is undone first, under the coordinator's locks.)
    PERFORM id_gen.run_cleanups(m.move_id, false, '{shown_copies,source_fence}', false);
    RETURN 'lifted the fence';
  ELSIF m.updated_at < clock_timestamp() - abandon_after THEN
    cleanup := id_gen.roll_back_operation(m.move_id, NULL);
    RETURN CASE WHEN cleanup IS NULL THEN 'rolled back (left alone for ' || abandon_after || ')'
                ELSE 'rollback incomplete: ' || cleanup END;
  END IF;
  RETURN NULL;
END $$;
COMMENT ON FUNCTION id_gen.recover_move(bigint, interval, text[]) IS 'The move supervisor''s work on one move no session runs (called by id_gen.recover_operations under the move''s session lock): fences its target again before the cut-over, lifts the source''s fence, finishes a cut-over or a revert, ends a way back that keeps too much WAL, rolls back a move left alone for abandon_after; returns what it did (NULL: nothing). Shards in down are not called.';
REVOKE EXECUTE ON FUNCTION id_gen.recover_move(bigint, interval, text[]) FROM PUBLIC;

-- A probe before a fence, for a move and for its revert (way_back). The lag a move or a
-- revert looks at counts WAL the receiving shard has not confirmed, so a subscription that
-- keeps stopping on an error (a conflicting row; its apply worker starts again every
-- wal_retrieve_retry_interval) looks caught up on a quiet sender. Before any fence, which
-- holds the genes' writers, a marker of the sender (a number, 1,000,000 or more, that no
-- fence's marker has: id_gen.shard_write_probe) must reach the receiver within 10 s.

-- How many times the subscription of a move (on its target) or of its way back (on its
-- source) stopped on an error; NULL when that shard does not answer within 5 s.
CREATE OR REPLACE FUNCTION id_gen.subscription_errors(m id_gen.shard_moves, way_back boolean) RETURNS bigint
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF way_back THEN
    RETURN id_gen.remote_call(m.source_shard, 'shard_way_back_errors', ARRAY[m.move_id::text], 5000)::bigint;
  END IF;
  RETURN id_gen.remote_call(m.target_shard, 'shard_move_apply_errors', ARRAY[m.move_id::text], 5000)::bigint;
EXCEPTION WHEN OTHERS OR query_canceled THEN
  RETURN NULL;
END $$;
COMMENT ON FUNCTION id_gen.subscription_errors(id_gen.shard_moves, boolean) IS 'How many times a move''s subscription (on its target; way_back: its way back''s, on its source) stopped on an error (id_gen.shard_move_apply_errors or id_gen.shard_way_back_errors there); NULL when that shard does not answer within 5 s.';
REVOKE EXECUTE ON FUNCTION id_gen.subscription_errors(id_gen.shard_moves, boolean) FROM PUBLIC;

-- The hint of a move or a revert (way_back) that stopped because the receiving shard did not
-- keep up: the subscription is named when it stopped on an error since the operation began
-- (errors_before: its count then, NULL when unknown), with how often (its server log says
-- why); otherwise, how to go on. (A shard that does not answer leaves the plain hint.)
CREATE OR REPLACE FUNCTION id_gen.stuck_subscription_hint(m id_gen.shard_moves, way_back boolean, errors_before bigint) RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  errors bigint;
  again text;
BEGIN
  IF m.move_id IS NULL OR way_back IS NULL THEN
    RAISE EXCEPTION 'id_gen: arguments "m" and "way_back" must not be NULL' USING ERRCODE = '22004';
  END IF;
  again := CASE WHEN way_back THEN format('CALL id_gen.revert_move(%s) tries again.', m.move_id)
                ELSE format('CALL id_gen.move_genes(%s, %s, %L) resumes the move, or CALL id_gen.abort_move(%s) rolls it back.',
                            m.lower_gene, m.upper_gene, m.target_shard, m.move_id) END;
  errors := id_gen.subscription_errors(m, way_back);
  IF errors > errors_before THEN
    RETURN format('The subscription id_gen_%s_%s on %s stopped on an error %s time(s) since the %s began (pg_stat_subscription_stats): '
                  'its server log says why. Once it applies again: %s',
                  CASE WHEN way_back THEN 'back' ELSE 'move' END, m.move_id,
                  CASE WHEN way_back THEN m.source_shard ELSE m.target_shard END, errors - errors_before,
                  CASE WHEN way_back THEN 'revert' ELSE 'probe' END, again);
  END IF;
  RETURN again;
END $$;
COMMENT ON FUNCTION id_gen.stuck_subscription_hint(id_gen.shard_moves, boolean, bigint) IS 'The hint of a move (or, way_back, a revert) that stopped because the receiving shard did not keep up: names the subscription when it stopped on an error since the operation began (errors_before: the count then), and how to go on.';
REVOKE EXECUTE ON FUNCTION id_gen.stuck_subscription_hint(id_gen.shard_moves, boolean, bigint) FROM PUBLIC;

-- One look for the probe: written once on the sender (m's source; way_back: m's target),
-- awaited on the receiver; next_step once it is there, the same step in 0.1 s, or 55000
-- after 10 s, before any fence. The step carries the marker, the deadline and the
-- subscription's error count (noted here for a move; a revert notes it at its first look).
CREATE OR REPLACE FUNCTION id_gen.probe_outcome(m id_gen.shard_moves, way_back boolean, step jsonb, next_step jsonb)
RETURNS id_gen.step_outcome
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  outcome id_gen.step_outcome;
  sender text := CASE WHEN way_back THEN m.target_shard ELSE m.source_shard END;
  -- (The marker travels from the sender to the receiver as a move's marker does; a revert's
  -- the other way, id_gen.reversed in sql/cluster/revert.sql.)
  via id_gen.shard_moves := CASE WHEN way_back THEN id_gen.reversed(m) ELSE m END;
BEGIN
  IF step->>'deadline' IS NULL THEN
    step := step || jsonb_build_object('marker', id_gen.remote_call(sender, 'shard_write_probe', ARRAY[m.move_id::text], 5000)::bigint,
                                       'deadline', clock_timestamp() + interval '10 s');
    IF NOT way_back THEN
      step := step || jsonb_build_object('errors', id_gen.subscription_errors(m, false));
    END IF;
    IF step->>'marker' IS NULL THEN
      RAISE EXCEPTION 'id_gen: move %: no probe marker was written on "%"', m.move_id, sender
        USING ERRCODE = '55000',
              HINT = format('Look for a trigger on id_gen.move_markers there; CALL id_gen.%s again once it is gone.',
                            CASE WHEN way_back THEN 'revert_move' ELSE 'move_genes' END);
    END IF;
  END IF;
  IF id_gen.run_move_step(via, 'await_marker', (step->>'marker')::integer, 5000) = 't' THEN
    outcome.next_step := next_step;
  ELSIF clock_timestamp() > (step->>'deadline')::timestamptz THEN
    outcome.stop_message := CASE WHEN way_back
                                 THEN format('id_gen: move %s: could not revert: the source did not apply the target''s changes within 10 s', m.move_id)
                                 ELSE format('id_gen: move %s: the target did not apply the source''s changes within 10 s', m.move_id) END;
    outcome.stop_sqlstate := '55000';
    outcome.stop_detail := CASE WHEN way_back THEN 'No fence was raised; the target still serves the genes and the source follows it.'
                                ELSE 'No fence was raised; the source still serves the genes, and the move stays in catching_up.' END;
    outcome.stop_hint := id_gen.stuck_subscription_hint(m, way_back, (step->>'errors')::bigint);
  ELSE
    outcome.next_step := step;
    outcome.pause := 0.1;
  END IF;
  RETURN outcome;
END $$;
COMMENT ON FUNCTION id_gen.probe_outcome(id_gen.shard_moves, boolean, jsonb, jsonb) IS 'For the probe step of a move or a revert (way_back), before any fence: one look for a marker of the sending shard on the receiving one (next_step once it is there), or the 55000 to stop with after 10 s, its hint naming a subscription that stopped on errors.';
REVOKE EXECUTE ON FUNCTION id_gen.probe_outcome(id_gen.shard_moves, boolean, jsonb, jsonb) FROM PUBLIC;

-- The name of the move supervisor's pass until 0.7.2, kept for operators who call it by hand.
CREATE OR REPLACE FUNCTION id_gen.recover_moves(abandon_after interval DEFAULT '10 min', grace interval DEFAULT '10 s')
RETURNS TABLE (move_id bigint, action text)
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$ SELECT r.operation_id, r.action FROM id_gen.recover_operations(abandon_after, grace) r $$;
COMMENT ON FUNCTION id_gen.recover_moves(interval, interval) IS 'The name of id_gen.recover_operations until 0.7.2 (the move supervisor''s pass over moves, splits and merges no session runs); returns the operation ids and what was done. Superuser only.';
REVOKE EXECUTE ON FUNCTION id_gen.recover_moves(interval, interval) FROM PUBLIC;

-- A move's or a revert's wait for its replication to catch up, after one look at the lag:
-- go on to next_step when 1 MB or less is left; look again in 0.1 s; or, once the step's
-- deadline passed, stop with 55000 (`behind`: its message, %s for the bytes).
CREATE OR REPLACE FUNCTION id_gen.lag_outcome(lag bigint, step jsonb, next_step jsonb, behind text, hint text)
RETURNS id_gen.step_outcome
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  outcome id_gen.step_outcome;
BEGIN
  IF lag BETWEEN 0 AND 1048576 THEN
    outcome.next_step := next_step;
  ELSIF clock_timestamp() > (step->>'deadline')::timestamptz THEN
    outcome.stop_message := format(behind, lag);
    outcome.stop_sqlstate := '55000';
    outcome.stop_hint := hint;
  ELSE
    outcome.next_step := step;
    outcome.pause := 0.1;
  END IF;
  RETURN outcome;
END $$;
COMMENT ON FUNCTION id_gen.lag_outcome(bigint, jsonb, jsonb, text, text) IS 'For the steps of a move or a revert that wait for replication to catch up: where to go on after one look at the lag (next_step at 1 MB or less, the same step in 0.1 s), or the 55000 to stop with after the step''s deadline.';
REVOKE EXECUTE ON FUNCTION id_gen.lag_outcome(bigint, jsonb, jsonb, text, text) FROM PUBLIC;

-- Inside a fence: a marker written on m's source and awaited on m's target (apply is in
-- commit order, so when it arrives every earlier change has been applied); 55000 after 3 s
-- from `since`. `receiver` names m's target in the error: the move's target, or the
-- revert's source.
CREATE OR REPLACE FUNCTION id_gen.pass_marker(m id_gen.shard_moves, marker integer, since timestamptz, receiver text)
RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  PERFORM id_gen.run_move_step(m, 'marker', marker, 3000);
  LOOP
    -- Each look bounded by what is left of the 3 s (a receiver that hangs ends it then).
    EXIT WHEN id_gen.run_move_step(m, 'await_marker', marker,
                                   greatest(1000, 3000 - (extract(epoch FROM clock_timestamp() - since) * 1000)::integer)) = 't';
    IF clock_timestamp() - since > interval '3 s' THEN
      RAISE EXCEPTION 'the % did not catch up within 3 s of the fence', receiver USING ERRCODE = '55000';
    END IF;
    PERFORM pg_sleep(0.002);
  END LOOP;
END $$;
COMMENT ON FUNCTION id_gen.pass_marker(id_gen.shard_moves, integer, timestamptz, text) IS 'In a fence: writes a marker on the move''s source and waits (at most 3 s from since) until it has been applied on its target.';
REVOKE EXECUTE ON FUNCTION id_gen.pass_marker(id_gen.shard_moves, integer, timestamptz, text) FROM PUBLIC;

-- The fence of a move or a revert, on the coordinator: ACCESS EXCLUSIVE on the range
-- partitions of the genes (every distributed table; other ranges are not locked), in one
-- order. The caller's lock_timeout bounds the wait.
CREATE OR REPLACE FUNCTION id_gen.lock_range_partitions(lower_gene integer, upper_gene integer) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  d record;
BEGIN
  FOR d IN SELECT t AS dt, rr.lower_gene AS lo, rr.upper_gene AS hi
           FROM id_gen.distributed_tables t CROSS JOIN id_gen.route_ranges rr
           WHERE rr.lower_gene >= lock_range_partitions.lower_gene AND rr.upper_gene <= lock_range_partitions.upper_gene
             AND t.layout = 'per_range'
           ORDER BY t.schema_name, t.table_name, rr.lower_gene LOOP
    EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', id_gen.range_partition(d.dt, d.lo, d.hi));
  END LOOP;
END $$;
COMMENT ON FUNCTION id_gen.lock_range_partitions(integer, integer) IS 'ACCESS EXCLUSIVE on the coordinator''s range partitions of the route ranges within lower_gene .. upper_gene (the fence of a move or a revert).';
REVOKE EXECUTE ON FUNCTION id_gen.lock_range_partitions(integer, integer) FROM PUBLIC;

-- The fence of a move with per_shard tables, on the coordinator: ACCESS EXCLUSIVE on each
-- per_shard table's partitioned table, in name order. Not on the partitions of the two
-- shards alone: a statement routes its rows (INSERT) or prunes its partitions (lookups) by
-- the routes before it locks the partition, so one that waited there would go on to the
-- source after the flip; waiting for the partitioned table, which every statement locks
-- before it plans or routes, it plans again by the new routes. So every statement of those
-- tables waits for the fence (milliseconds), on every shard.
CREATE OR REPLACE FUNCTION id_gen.lock_per_shard_tables() RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  d id_gen.distributed_tables;
BEGIN
  FOR d IN SELECT * FROM id_gen.distributed_tables t WHERE t.layout = 'per_shard' ORDER BY t.schema_name, t.table_name LOOP
    EXECUTE format('LOCK TABLE %I.%I IN ACCESS EXCLUSIVE MODE', d.schema_name, d.partitioned_name);
  END LOOP;
END $$;
COMMENT ON FUNCTION id_gen.lock_per_shard_tables() IS 'ACCESS EXCLUSIVE on the partitioned table of every per_shard distributed table (the fence of a move with per_shard tables: the shards'' tables change in it, and statements that waited must route again).';
REVOKE EXECUTE ON FUNCTION id_gen.lock_per_shard_tables() FROM PUBLIC;

-- Before a fence's re-layout of per_shard tables is undone (a move's: undo_shown_copies; a
-- revert's: undo_revert_relayout): whether either shard of m is re-laid indeed, and if so
-- the coordinator's locks of the per_shard tables (lock_timeout 2 s), held until the
-- caller's transaction ends (an abort's other clean-ups, the supervisor's pass), so that no
-- statement here sees the rows twice or not at all. False without per_shard tables.
CREATE OR REPLACE FUNCTION id_gen.lock_per_shard_tables_if_relaid(m id_gen.shard_moves) RETURNS boolean
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  saved text := current_setting('lock_timeout');
  parts text;
BEGIN
  IF NOT id_gen.has_per_shard_tables() THEN
    RETURN false;
  END IF;
  parts := (id_gen.per_shard_move_parts(m.lower_gene, m.upper_gene)).parts::text;
  IF NOT (id_gen.remote_call(m.target_shard, 'shard_relayout_pending', ARRAY[m.move_id::text, parts], 10000)::boolean
          OR id_gen.remote_call(m.source_shard, 'shard_relayout_pending', ARRAY[m.move_id::text, parts], 10000)::boolean) THEN
    RETURN false;
  END IF;
  PERFORM set_config('lock_timeout', '2s', true);
  PERFORM id_gen.lock_per_shard_tables();
  PERFORM set_config('lock_timeout', saved, true);
  RETURN true;
END $$;
COMMENT ON FUNCTION id_gen.lock_per_shard_tables_if_relaid(id_gen.shard_moves) IS 'Whether the fence of move m (or of its revert) left either shard re-laid (id_gen.shard_relayout_pending there); if so, takes the coordinator''s locks of the per_shard tables first, for the undo.';
REVOKE EXECUTE ON FUNCTION id_gen.lock_per_shard_tables_if_relaid(id_gen.shard_moves) FROM PUBLIC;

-- Undoes what the fence of a move with per_shard tables did on the shards when its flip did
-- not commit (a failed fence, or its coordinator died before its COMMIT): the target's copies
-- are hidden again and the source's partitions attached again, both under the coordinator's
-- locks of the per_shard tables. Idempotent; nothing without per_shard tables.
CREATE OR REPLACE FUNCTION id_gen.undo_shown_copies(m id_gen.shard_moves) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  saved text := current_setting('lock_timeout');
BEGIN
  IF id_gen.has_owned_tables() THEN
    -- Whether or not the fence handed the genes over: both calls change nothing otherwise.
    PERFORM set_config('lock_timeout', '2s', true);
    PERFORM id_gen.lock_per_shard_tables();
    PERFORM set_config('lock_timeout', saved, true);
    PERFORM id_gen.run_move_step(m, 'disown_incoming', 0, 10000);
    PERFORM id_gen.run_move_step(m, 'retake_source', 0, 10000);
  END IF;
  IF id_gen.lock_per_shard_tables_if_relaid(m) THEN
    PERFORM id_gen.run_move_step(m, 'hide_incoming', 0, 10000);
    PERFORM id_gen.run_move_step(m, 'reattach_source', 0, 120000);
  END IF;
END $$;
COMMENT ON FUNCTION id_gen.undo_shown_copies(id_gen.shard_moves) IS 'After a fence of a move with per_shard tables whose flip did not commit: hides the target''s copies and attaches the source''s moved partitions again, and gives the genes of tables laid out by ownership back to the source, under the coordinator''s locks of the per_shard tables.';
REVOKE EXECUTE ON FUNCTION id_gen.undo_shown_copies(id_gen.shard_moves) FROM PUBLIC;

-- The flip of a move or a revert: the route ranges within the genes go to `shard`, and
-- each range partition's foreign table is swapped to it (under the fence's locks).
CREATE OR REPLACE FUNCTION id_gen.flip_routes(lower_gene integer, upper_gene integer, shard text) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  d record;
BEGIN
  LOCK TABLE id_gen.shard_routes IN SHARE ROW EXCLUSIVE MODE;
  UPDATE id_gen.shard_routes sr SET shard = flip_routes.shard, updated_at = now()
  WHERE sr.upper_gene IN (SELECT rr.upper_gene FROM id_gen.route_ranges rr
                          WHERE rr.lower_gene >= flip_routes.lower_gene AND rr.upper_gene <= flip_routes.upper_gene);
  FOR d IN SELECT t AS dt, rr.lower_gene AS lo, rr.upper_gene AS hi
           FROM id_gen.distributed_tables t CROSS JOIN id_gen.route_ranges rr
           WHERE rr.lower_gene >= flip_routes.lower_gene AND rr.upper_gene <= flip_routes.upper_gene
             AND t.layout = 'per_range' LOOP
    PERFORM id_gen.point_partition(d.dt, id_gen.range_partition(d.dt, d.lo, d.hi), d.lo, d.hi, flip_routes.shard);
  END LOOP;
END $$;
COMMENT ON FUNCTION id_gen.flip_routes(integer, integer, text) IS 'Routes the route ranges within lower_gene .. upper_gene to a shard and points their range partitions'' foreign tables at it (the flip of a move or a revert).';
REVOKE EXECUTE ON FUNCTION id_gen.flip_routes(integer, integer, text) FROM PUBLIC;

-- Id continuity for shards whose sequences are local: the target's high-water mark goes
-- above the source's, so that ids the target issues for the moved genes from new
-- segments do not repeat the source's. (Authority-backed sequences need nothing.)
CREATE OR REPLACE FUNCTION id_gen.move_raise_sequences(m id_gen.shard_moves) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  seq text;
  high text;
BEGIN
  FOR seq IN SELECT DISTINCT t.sequence FROM id_gen.distributed_tables t WHERE t.sequence IS NOT NULL LOOP
    high := id_gen.remote_call(m.source_shard, 'shard_sequence_high', ARRAY[seq], 5000);
    IF high IS NOT NULL THEN
      PERFORM id_gen.remote_call(m.target_shard, 'shard_raise_sequence', ARRAY[seq, high], 5000);
    END IF;
  END LOOP;
END $$;
COMMENT ON FUNCTION id_gen.move_raise_sequences(id_gen.shard_moves) IS 'Raises the target''s high-water mark of each local sequence of distributed tables above the source''s.';
REVOKE EXECUTE ON FUNCTION id_gen.move_raise_sequences(id_gen.shard_moves) FROM PUBLIC;

-- The steps of a move, for the driver of long operations (id_gen.run_operation,
-- sql/cluster/operations.sql), which commits after each and pauses `pause` seconds after the
-- commit. A step does one unit of work of the current phase and never commits; `step` says
-- where in the phase the last one left off (NULL: at its start):
--   planned, NULL       the target's partitions (committed there before the subscription
--                       looks for them), which it does not own until the cut-over (its
--                       fence), the source's publication, the source's connection string
--                       to the target (it arrives with the driver's COMMIT);
--   planned, subscribe  the target's subscription, recorded;
--   planned, slot       first its cleanup record (committed: a slot of that name must not
--                       exist yet), then the move's slot on the source;
--   planned, enable     the subscription enabled and refreshed; phase copying.
--   copying, NULL/copy  one look at the initial copy (tables ready, rows copied); phase
--                       catching_up once every table is ready. 55000 after 2 minutes without
--                       progress (the move stays in copying).
--   catching_up, NULL   the target's fence again (a session may have died between lifting it
--                       and the flip's commit);
--   catching_up, lag    one look at the slot's lag, until it is small (10 minutes at most);
--   catching_up, way_back   a reversible move: the target's publication and slot (revert.sql);
--   catching_up, probe  one look for a marker of the source on the target (10 s at most, no
--                       fence): a subscription that does not apply stops the move here,
--                       before any writer waits (the lag looks small on a quiet source);
--   catching_up, arm    the fence's attempt recorded, and the source's fence as a cleanup
--                       record (it may be up from here until it is lifted or cut over);
--   catching_up, fence  one attempt at the fence and flip (below); phase cut_over.
--   cut_over, NULL      the source lets go (id_gen.finish_cut_over); phase done, or
--                       reversible (the driver stops there).
--   reversible, revert_*, and reverting: the revert (id_gen.revert_step, sql/cluster/revert.sql).
-- Every step can be repeated: each checks what exists (a CALL that resumes a move starts its
-- phase again from the beginning). Errors: id_gen.move_step_failed.
CREATE OR REPLACE FUNCTION id_gen.move_step(move_id bigint, step jsonb) RETURNS id_gen.step_outcome
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  outcome id_gen.step_outcome;
  m id_gen.shard_moves;
  res text;
  new_phase text;
  sub oid;
  copied bigint;
  lag bigint;
  t0 timestamptz;
  target_unfenced boolean := false;
  target_shown boolean := false;
  source_detached boolean := false;
  per_shard boolean;
  owned boolean := id_gen.has_owned_tables();
  target_owns boolean := false;
  source_released boolean := false;
  left_behind bigint;
  err text;
  err_state text;
  attempt integer := (step->>'attempt')::integer;
BEGIN
  IF move_id IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "move_id" must not be NULL' USING ERRCODE = '22004';
  END IF;
  SELECT * INTO m FROM id_gen.shard_moves sm WHERE sm.move_id = move_step.move_id;
  per_shard := id_gen.has_per_shard_tables();  -- (an assignment leaves FOUND as it is)
  IF NOT FOUND THEN
    outcome.stop_message := format('id_gen: there is no move %s', move_id);
    outcome.stop_sqlstate := '42704';
    outcome.stop_hint := 'Moves are listed in id_gen.moves.';
  ELSIF m.phase = 'reverting' OR step->>'step' LIKE 'revert\_%' THEN
    RETURN id_gen.revert_step(m, step);  -- (sql/cluster/revert.sql)

  -- planned: each step that creates something on a shard commits there by itself; what the
  -- coordinator records about it commits right after (the driver's COMMIT), so that an
  -- abort knows it.
  ELSIF m.phase = 'planned' AND step IS NULL THEN
    PERFORM id_gen.place_ranges(m.target_shard, m.lower_gene, m.upper_gene, true);
    PERFORM id_gen.run_move_step(m, 'fence_target', 0, 10000);
    IF owned THEN
      -- Tables laid out by ownership (both shards have their move functions: move_genes
      -- checked): the copies go into the target's tables of rows, which must hold none of
      -- these genes (rows an earlier move left there, not owned, go).
      PERFORM id_gen.run_move_step(m, 'check_source_rows', 0, 60000);
      IF m.target_subscription IS NULL THEN
        left_behind := id_gen.delete_moved_rows(m, true);
        IF left_behind > 0 THEN
          RAISE NOTICE 'id_gen: move %: % rows of genes % .. % that "%" held but did not own were deleted there first',
                       m.move_id, left_behind, m.lower_gene, m.upper_gene, m.target_shard;
        END IF;
      END IF;
    END IF;
    IF per_shard THEN
      -- The target's copies of per_shard tables stay out of its tables until the fence, and
      -- the coordinator has the target's partition of each (for the flip) from now on.
      PERFORM id_gen.run_move_step(m, 'hide_incoming', 0, 10000);
      PERFORM id_gen.slot_partition(d, m.target_shard) FROM id_gen.distributed_tables d WHERE d.layout = 'per_shard';
    END IF;
    PERFORM id_gen.run_move_step(m, 'create_publication');
    IF m.target_subscription IS NULL THEN
      PERFORM id_gen.send_move_secret(m);
    END IF;
    outcome.next_step := '{"step": "subscribe"}';
  ELSIF m.phase = 'planned' AND step->>'step' = 'subscribe' THEN
    IF m.target_subscription IS NULL THEN
      sub := id_gen.run_move_step(m, 'create_subscription')::oid;
      UPDATE id_gen.shard_moves sm
      SET target_subscription = sub,
          target_system_id = id_gen.remote_call(m.target_shard, 'shard_system_id', '{}', 10000),
          updated_at = clock_timestamp()
      WHERE sm.move_id = m.move_id AND sm.phase = 'planned';
      IF NOT FOUND THEN
        RAISE EXCEPTION 'the move is no longer planned (aborted in another session?)' USING ERRCODE = '55006';
      END IF;
    END IF;
    outcome.next_step := '{"step": "slot"}';
  ELSIF m.phase = 'planned' AND step->>'step' = 'slot' AND NOT id_gen.has_cleanup(m.move_id, 'replication_slot') THEN
    -- The slot is recorded (and committed) before it is made; one of that name that exists
    -- before is not this move's and is never taken over (shard_create_slot says so too).
    IF id_gen.run_move_step(m, 'lag', 0, 10000) IS NOT NULL THEN
      RAISE EXCEPTION 'id_gen: a replication slot named id_gen_move_% exists already on "%"', m.move_id, m.source_shard
        USING ERRCODE = '42710',
              HINT = 'id_gen neither uses nor drops a slot it did not create. Drop it (pg_drop_replication_slot) if it is a leftover, then move again.';
    END IF;
    PERFORM id_gen.record_move_cleanups(m, '{replication_slot}');
    outcome.next_step := step;
  ELSIF m.phase = 'planned' AND step->>'step' = 'slot' THEN
    IF id_gen.run_move_step(m, 'lag', 0, 10000) IS NULL THEN
      PERFORM id_gen.run_move_step(m, 'create_slot', 0, 120000);
    END IF;
    outcome.next_step := '{"step": "enable"}';
  ELSIF m.phase = 'planned' AND step->>'step' = 'enable' THEN
    PERFORM id_gen.run_move_step(m, 'enable_subscription');
    PERFORM id_gen.run_move_step(m, 'refresh_subscription', 0, 60000);
    UPDATE id_gen.shard_moves sm SET phase = 'copying', updated_at = clock_timestamp()
    WHERE sm.move_id = m.move_id AND sm.phase = 'planned';
    IF NOT FOUND THEN
      RAISE EXCEPTION 'the move is no longer planned (aborted in another session?)' USING ERRCODE = '55006';
    END IF;

  ELSIF m.phase = 'copying' THEN
    step := coalesce(step, jsonb_build_object('step', 'copy', 'progress_at', clock_timestamp()));
    IF clock_timestamp() - (step->>'progress_at')::timestamptz > interval '2 min' THEN
      outcome.stop_message := format('id_gen: move %s: the initial copy made no progress for 2 minutes (tables ready/total: %s)',
                                     m.move_id, step->>'state');
      outcome.stop_sqlstate := '55000';
      outcome.stop_detail := 'The move stays in phase copying; the source is still authoritative.';
      outcome.stop_hint := format('Check both shards'' logs (the subscription id_gen_move_%s on %s), then CALL id_gen.move_genes(%s, %s, %L) to resume or CALL id_gen.abort_move(%s).',
                                  m.move_id, m.target_shard, m.lower_gene, m.upper_gene, m.target_shard, m.move_id);
      RETURN outcome;
    END IF;
    res := id_gen.run_move_step(m, 'sync_state', 0, 10000);
    copied := id_gen.run_move_step(m, 'count_target', 0, 60000)::bigint;
    IF owned THEN
      copied := copied + id_gen.run_move_step(m, 'count_target_owned', 0, 60000)::bigint;
    END IF;
    IF res IS DISTINCT FROM step->>'state' OR copied IS DISTINCT FROM (step->>'copied')::bigint THEN
      step := step || jsonb_build_object('progress_at', clock_timestamp(), 'state', res, 'copied', copied);
    END IF;
    UPDATE id_gen.shard_moves sm
    SET rows_copied = copied, updated_at = clock_timestamp(),
        phase = CASE WHEN split_part(res, '/', 1) = '0' AND split_part(res, '/', 2) <> '0' THEN 'catching_up' ELSE 'copying' END
    WHERE sm.move_id = m.move_id AND sm.phase = 'copying'
    RETURNING sm.phase INTO new_phase;
    IF NOT FOUND THEN
      RAISE EXCEPTION 'the move is no longer copying (aborted in another session?)' USING ERRCODE = '55006';
    ELSIF new_phase = 'copying' THEN
      outcome.next_step := step;
      outcome.pause := 0.5;
    END IF;

  ELSIF m.phase = 'catching_up' AND step IS NULL THEN
    PERFORM id_gen.run_move_step(m, 'fence_target', 0, 10000);
    -- (A CALL that resumes the move checks the shards again: an earlier result, or one of
    -- verify_range, may be old. sql/cluster/verify.sql)
    UPDATE id_gen.cluster_operations o SET verify_state = NULL, verify_started_at = NULL, verified_at = NULL
    WHERE o.operation_id = m.move_id AND o.verify_state IS NOT NULL;
    IF id_gen.has_cleanup(m.move_id, 'shown_copies') THEN
      -- (a fence of per_shard tables whose session died before its flip committed)
      PERFORM id_gen.run_cleanups(m.move_id, false, '{shown_copies}', false);
    END IF;
    outcome.next_step := jsonb_build_object('step', 'lag', 'deadline', clock_timestamp() + interval '10 min');
  ELSIF m.phase = 'catching_up' AND step->>'step' = 'lag' THEN
    step := jsonb_build_object('deadline', clock_timestamp() + interval '10 min') || step;  -- (back from the check: a deadline from now)
    lag := id_gen.run_move_step(m, 'lag', 0, 10000)::bigint;
    IF lag IS NULL THEN
      RAISE EXCEPTION 'id_gen: move %: its replication slot on "%" is gone', m.move_id, m.source_shard
        USING ERRCODE = '55000', HINT = format('CALL id_gen.abort_move(%s) and move again.', m.move_id);
    END IF;
    UPDATE id_gen.shard_moves sm SET lag_bytes = lag, updated_at = clock_timestamp()
    WHERE sm.move_id = m.move_id AND sm.phase = 'catching_up';
    IF NOT FOUND THEN
      RAISE EXCEPTION 'id_gen: move % is no longer catching up (aborted in another session?)', m.move_id USING ERRCODE = '55006';
    END IF;
    -- (First: the probe, then the check before the cut-over, sql/cluster/verify.sql, which
    -- comes back here; once it passed, on to the way back or the probe, then the fence.)
    outcome := id_gen.lag_outcome(lag, step,
                                  CASE WHEN id_gen.verify_pending(m) THEN '{"step": "probe", "then": "verify"}'::jsonb
                                       WHEN m.reversible THEN '{"step": "way_back"}'::jsonb ELSE '{"step": "probe"}'::jsonb END,
                                  format('id_gen: move %s: the target stays %%s bytes behind after 10 minutes', m.move_id),
                                  'The move stays in catching_up; call move_genes again later, or abort_move.');
  ELSIF m.phase = 'catching_up' AND step->>'step' = 'way_back' THEN
    -- The way back exists before the fence: the target's publication and slot (sql/cluster/revert.sql).
    PERFORM id_gen.prepare_way_back(m);
    outcome.next_step := '{"step": "probe"}';
  ELSIF m.phase = 'catching_up' AND step->>'step' = 'probe' THEN
    -- A subscription that keeps stopping on an error stops the move here, before any fence.
    outcome := id_gen.probe_outcome(m, false, step,
                                    CASE WHEN step->>'then' = 'verify' THEN '{"step": "verify", "then": {"step": "lag"}}'::jsonb
                                         ELSE jsonb_build_object('step', 'arm', 'attempt', m.fence_attempts + 1, 'last', m.fence_attempts + 5) END);
  ELSIF m.phase = 'catching_up' AND step->>'step' = 'verify' THEN
    -- The check before the cut-over, one round per step (sql/cluster/verify.sql).
    outcome := id_gen.verify_step(m, step);
  ELSIF m.phase = 'catching_up' AND step->>'step' = 'arm' THEN
    UPDATE id_gen.shard_moves sm SET fence_attempts = attempt WHERE sm.move_id = m.move_id;
    PERFORM id_gen.record_move_cleanups(m, CASE WHEN per_shard THEN '{shown_copies,source_fence}'::text[] ELSE '{source_fence}' END);
    outcome.next_step := step || '{"step": "fence"}';
  ELSIF m.phase = 'catching_up' AND step->>'step' = 'fence' THEN
    -- The fence, in this one coordinator transaction: ACCESS EXCLUSIVE on the coordinator's
    -- range partitions of the moved genes (lock timeout 500 ms), the source's fence trigger,
    -- a marker passed from the source to the target, the target's sequences raised, the
    -- flip of routes and foreign tables; the driver's COMMIT lifts it, and waiting writers
    -- continue on the target.
    t0 := clock_timestamp();
    PERFORM pg_catalog.set_config('lock_timeout', '500ms', true);
    -- abort_move holds this row while it undoes the move: never flip after an abort.
    PERFORM FROM id_gen.shard_moves sm WHERE sm.move_id = m.move_id AND sm.phase = 'catching_up' FOR UPDATE;
    IF NOT FOUND THEN
      RAISE EXCEPTION 'the move is no longer catching up (aborted in another session?)' USING ERRCODE = '55006';
    END IF;
    PERFORM id_gen.quiet_ddl();
    PERFORM id_gen.lock_range_partitions(m.lower_gene, m.upper_gene);
    IF per_shard THEN
      PERFORM id_gen.lock_per_shard_tables();
    END IF;
    BEGIN
      PERFORM id_gen.run_move_step(m, 'fence_source', attempt, 5000);
      IF owned THEN
        PERFORM id_gen.run_move_step(m, 'fence_source_owned', 0, 5000);
      END IF;
      PERFORM id_gen.pass_marker(m, attempt, t0, 'target');
      PERFORM id_gen.move_raise_sequences(m);
      IF m.reversible THEN
        -- Every change from the source is applied on the target; what the target writes from
        -- here on goes back (the reverse replication starts at this position).
        UPDATE id_gen.shard_moves sm SET back_lsn = id_gen.remote_call(m.target_shard, 'shard_current_lsn', '{}', 5000)::pg_lsn
        WHERE sm.move_id = m.move_id;
      END IF;
      IF per_shard THEN
        -- The target's copies join its tables (no scan), while the coordinator holds every
        -- statement of the per_shard tables.
        target_shown := true;
        PERFORM id_gen.run_move_step(m, 'show_incoming', 0, 8000);
      END IF;
      IF owned THEN
        -- Tables laid out by ownership: the target owns the genes, fenced (its copies show;
        -- its writers of them wait for unfence_target_owned, after the flip), while the
        -- coordinator holds every statement of them.
        target_owns := true;
        PERFORM id_gen.run_move_step(m, 'own_incoming', 0, 8000);
      END IF;
      PERFORM id_gen.flip_routes(m.lower_gene, m.upper_gene, m.target_shard);
      -- The target owns the genes from here on: its fence goes while the coordinator
      -- still holds their writers (which then reach the target, which must take them).
      target_unfenced := true;
      PERFORM id_gen.run_move_step(m, 'unfence_target', 0, 8000);
      IF owned THEN
        PERFORM id_gen.run_move_step(m, 'unfence_target_owned', 0, 8000);
      END IF;
      IF per_shard THEN
        -- Last: the source's moved partitions leave its tables (the coordinator reads them
        -- whole), so that after the COMMIT every row is read once, from the target.
        source_detached := true;
        PERFORM id_gen.run_move_step(m, 'detach_source_in_fence', 0, 8000);
      END IF;
      IF owned THEN
        -- Last: the source gives the genes up (its rows hide; its fence of them goes), and
        -- the coordinator records where they are.
        source_released := true;
        PERFORM id_gen.run_move_step(m, 'release_source', 0, 8000);
        PERFORM id_gen.hand_over_owned_placements(m);
      END IF;
      UPDATE id_gen.shard_moves sm
      SET phase = 'cut_over', lag_bytes = 0, fence_started_at = t0, fence_ended_at = clock_timestamp(),
          updated_at = clock_timestamp(), last_error = NULL
      WHERE sm.move_id = m.move_id AND sm.phase = 'catching_up';
    EXCEPTION WHEN OTHERS OR query_canceled THEN
      -- Lift the source's fence while the coordinator's locks still hold its writers:
      -- once they go, those writers reach the source again, which must take them.
      -- The target does not own the genes: its fence stays or goes up again.
      GET STACKED DIAGNOSTICS err = MESSAGE_TEXT, err_state = RETURNED_SQLSTATE;
      IF target_unfenced THEN
        BEGIN
          PERFORM id_gen.run_move_step(m, 'fence_target', 0, 5000);
        EXCEPTION WHEN OTHERS OR query_canceled THEN
          err := err || ' (fencing the target again failed: ' || SQLERRM || ')';
        END;
      END IF;
      -- The re-layout of per_shard tables is undone under the same locks (the source's
      -- partitions before its fence goes: unfence_source finds them by name).
      IF target_shown OR source_detached THEN
        BEGIN
          PERFORM id_gen.run_move_step(m, 'hide_incoming', 0, 5000);
          PERFORM id_gen.run_move_step(m, 'reattach_source', 0, 60000);
        EXCEPTION WHEN OTHERS OR query_canceled THEN
          err := err || ' (undoing the re-layout of per_shard tables failed: ' || SQLERRM || ')';
        END;
      END IF;
      -- Tables laid out by ownership: the target gives the genes back, the source takes them
      -- again (shown_copies does it later if this fails).
      IF target_owns OR source_released THEN
        BEGIN
          PERFORM id_gen.run_move_step(m, 'disown_incoming', 0, 5000);
          PERFORM id_gen.run_move_step(m, 'retake_source', 0, 5000);
          target_owns := false;
        EXCEPTION WHEN OTHERS OR query_canceled THEN
          err := err || ' (handing the genes of tables laid out by ownership back failed: ' || SQLERRM
                     || '; the source stays fenced until the target gives them back)';
        END;
      END IF;
      BEGIN
        PERFORM id_gen.run_move_step(m, 'unfence_source', 0, 10000);
        -- (not while the target may still own the genes: both would own them)
        IF owned AND NOT target_owns THEN
          PERFORM id_gen.run_move_step(m, 'unfence_source_owned', 0, 10000);
        END IF;
      EXCEPTION WHEN OTHERS OR query_canceled THEN
        err := err || ' (lifting the source''s fence failed: ' || SQLERRM || ')';
      END;
      RAISE EXCEPTION '%', err USING ERRCODE = err_state;
    END;

  ELSIF m.phase = 'cut_over' THEN
    PERFORM id_gen.finish_cut_over(m);
  ELSIF m.phase = 'failed' THEN
    outcome.stop_message := format('id_gen: move %s failed: %s', m.move_id, m.last_error);
    outcome.stop_sqlstate := '55000';
    outcome.stop_hint := format('CALL id_gen.abort_move(%s) rolls it back (the source still holds every row); then move again.', m.move_id);
  ELSE
    RAISE EXCEPTION 'id_gen: move % has no step % in phase %', m.move_id, step, m.phase USING ERRCODE = '55000';
  END IF;
  RETURN outcome;
END $$;
COMMENT ON FUNCTION id_gen.move_step(bigint, jsonb) IS 'One step of a move (the driver id_gen.run_operation commits after each): the target''s partitions and the publication, the subscription, the slot, one look at the copy or the lag, one attempt at the fence and flip, the source letting go. Returns where to go on, how long to pause, or an error to stop with.';
REVOKE EXECUTE ON FUNCTION id_gen.move_step(bigint, jsonb) FROM PUBLIC;

-- What a failed step of a move means (the driver calls it, with the phase the step ran in,
-- after the step's work was rolled back, with the coordinator's locks; its calls to shards
-- were not):
--   planned or copying: the move is rolled back (id_gen.roll_back_operation) and the CALL fails;
--     aborted when that clean-up succeeded, failed (abort_move finishes it) when not (a
--     move that another session aborted meanwhile is left as it is: 55006);
--   a fence attempt: the source's fence is lifted (three tries), the attempt recorded; the
--     next attempt after 0.5 s, five in all, unless the error was a cancel, an abort
--     elsewhere, a shard that does not answer or a fence that could not be lifted;
--   the source letting go after the cut-over: recorded, and the CALL fails (the same CALL
--     finishes it);
--   anything else (a fence of the target, a look at the lag): nothing, the error is raised
--     as it is and the move stays this session's.
CREATE OR REPLACE FUNCTION id_gen.move_step_failed(move_id bigint, phase text, step jsonb, err text, err_state text,
                                                   err_detail text, err_hint text) RETURNS id_gen.step_outcome
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  outcome id_gen.step_outcome;
  m id_gen.shard_moves;
  cleanup text;
  unfenced boolean := false;
  lift_err text;
  attempt integer := (step->>'attempt')::integer;
BEGIN
  SELECT * INTO m FROM id_gen.shard_moves sm WHERE sm.move_id = move_step_failed.move_id;
  IF NOT FOUND THEN
    RETURN outcome;
  ELSIF phase = 'reverting' OR step->>'step' LIKE 'revert\_%' THEN
    RETURN id_gen.revert_step_failed(m.move_id, phase, step, err, err_state);  -- (sql/cluster/revert.sql)
  ELSIF phase IN ('planned', 'copying') AND m.phase IN ('aborted', 'failed', 'done') THEN
    outcome.stop_message := format('id_gen: move %s stopped: it is %s now', m.move_id, m.phase);
    outcome.stop_sqlstate := '55006';
  ELSIF phase IN ('planned', 'copying') THEN
    outcome.stop_sqlstate := coalesce(err_state, '55000');
    cleanup := id_gen.roll_back_operation(m.move_id, err);
    outcome.stop_message := format('id_gen: move %s of genes %s .. %s to "%s" failed while copying: %s',
                                   m.move_id, m.lower_gene, m.upper_gene, m.target_shard, err);
    outcome.stop_detail := CASE WHEN cleanup IS NULL THEN 'The move was rolled back: routes, the source and its rows are unchanged, and no replication slot is left.'
                                ELSE 'Routes, the source and its rows are unchanged. Not yet cleaned up: ' || cleanup END;
    outcome.stop_hint := CASE WHEN cleanup IS NULL THEN 'Fix the cause and move again.'
                              ELSE format('When the shards answer again, CALL id_gen.abort_move(%s) finishes the clean-up.', m.move_id) END;
  ELSIF phase = 'catching_up' AND step->>'step' = 'fence' THEN
    -- Routes and foreign tables are as they were; the coordinator's locks went with the step.
    FOR i IN 1 .. 3 LOOP
      BEGIN
        -- (per_shard tables: the fence's re-layout of the two shards is undone first; a no-op
        -- when the step's own handler did it)
        IF id_gen.has_cleanup(m.move_id, 'shown_copies') THEN
          PERFORM id_gen.undo_shown_copies(m);
        END IF;
        PERFORM id_gen.run_move_step(m, 'unfence_source', 0, 10000);
        IF id_gen.has_owned_tables() THEN
          PERFORM id_gen.run_move_step(m, 'unfence_source_owned', 0, 10000);
        END IF;
        unfenced := true;
      EXCEPTION WHEN OTHERS OR query_canceled THEN
        GET STACKED DIAGNOSTICS lift_err = MESSAGE_TEXT;
      END;
      EXIT WHEN unfenced;
    END LOOP;
    IF NOT unfenced THEN
      err := err || ' (lifting the fence on the source failed too: ' || lift_err || ')';
    END IF;
    UPDATE id_gen.shard_moves sm
    SET last_error = format('fence attempt %s: %s', attempt, err), updated_at = clock_timestamp()
    WHERE sm.move_id = m.move_id;
    IF unfenced THEN
      PERFORM id_gen.forget_cleanup(m.move_id, 'shown_copies');
      PERFORM id_gen.forget_cleanup(m.move_id, 'source_fence');
    END IF;
    IF NOT unfenced OR err_state IN ('57014', '55006', '08006') THEN
      -- Cancelled, aborted elsewhere, a shard that does not answer, or the source keeps
      -- refusing to lift: no retry.
      outcome.stop_message := format('id_gen: move %s: %s', m.move_id, err);
      outcome.stop_sqlstate := coalesce(err_state, '55000');
      outcome.stop_detail := CASE WHEN unfenced THEN 'The fence was lifted; routes are unchanged.'
                                  ELSE 'Routes are unchanged, but the source still refuses direct writes of these genes (id_gen.moves.source_fenced).' END;
      outcome.stop_hint := format('CALL id_gen.move_genes(%s, %s, %L) tries again; CALL id_gen.abort_move(%s) rolls back and lifts the fence.',
                                  m.lower_gene, m.upper_gene, m.target_shard, m.move_id);
    ELSIF attempt < (step->>'last')::integer THEN
      outcome.next_step := step || jsonb_build_object('step', 'arm', 'attempt', attempt + 1);
      outcome.pause := 0.5;
    ELSE
      outcome.stop_message := format('id_gen: move %s: could not cut over: %s', m.move_id, err);
      outcome.stop_sqlstate := coalesce(err_state, '55000');
      outcome.stop_detail := 'Each attempt lifted its fence again; the source is still authoritative and the move stays in catching_up.';
      outcome.stop_hint := format('CALL id_gen.move_genes(%s, %s, %L) tries again; CALL id_gen.abort_move(%s) rolls back.',
                                  m.lower_gene, m.upper_gene, m.target_shard, m.move_id);
    END IF;
  ELSIF phase = 'cut_over' THEN
    UPDATE id_gen.shard_moves sm SET last_error = 'cut over; cleaning up: ' || err, updated_at = clock_timestamp()
    WHERE sm.move_id = m.move_id;
    outcome.stop_message := format('id_gen: move %s has cut over (the target serves genes %s .. %s), but cleaning up failed: %s',
                                   m.move_id, m.lower_gene, m.upper_gene, err);
    outcome.stop_sqlstate := err_state;
    outcome.stop_detail := 'The source''s partitions, the subscription or the publication may still exist; the source refuses direct writes of these genes.';
    outcome.stop_hint := format('CALL id_gen.move_genes(%s, %s, %L) again finishes the clean-up.', m.lower_gene, m.upper_gene, m.target_shard);
  END IF;
  RETURN outcome;
END $$;
COMMENT ON FUNCTION id_gen.move_step_failed(bigint, text, jsonb, text, text, text, text) IS 'What a failed step of a move means, for the driver id_gen.run_operation: roll back a move that has not reached its fence, lift the source''s fence after a failed fence attempt and try again (five attempts), record a failed clean-up after the cut-over; NULLs: raise the error as it is.';
REVOKE EXECUTE ON FUNCTION id_gen.move_step_failed(bigint, text, jsonb, text, text, text, text) FROM PUBLIC;

-- The NOTICE at the end of a move's CALL.
CREATE OR REPLACE FUNCTION id_gen.move_summary(move_id bigint) RETURNS text
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT format('id_gen: move %s %s: genes %s .. %s are on %s%s; writes were fenced for %s ms%s', m.move_id,
                CASE WHEN m.phase = 'reversible' THEN 'is reversible' ELSE m.phase END,
                m.lower_gene, m.upper_gene,
                CASE WHEN m.phase = 'reverted' THEN m.source_shard ELSE m.target_shard END,
                CASE WHEN m.phase = 'reverted' THEN ' again' ELSE '' END,
                round(extract(epoch FROM m.fence_ended_at - m.fence_started_at) * 1000, 1),
                CASE WHEN m.phase = 'reversible'
                     THEN format('; %s follows it (CALL id_gen.revert_move(%s) to go back, CALL id_gen.complete_move(%s) to end)',
                                 m.source_shard, m.move_id, m.move_id) ELSE '' END)
  FROM id_gen.shard_moves m WHERE m.move_id = move_summary.move_id
$$;
COMMENT ON FUNCTION id_gen.move_summary(bigint) IS 'One line on a move (where its genes are, how long writes were fenced, the way back of a reversible one): the NOTICE at its end.';
REVOKE EXECUTE ON FUNCTION id_gen.move_summary(bigint) FROM PUBLIC;

CREATE OR REPLACE PROCEDURE id_gen.move_genes(lower_gene integer, upper_gene integer, target_shard text,
                                   dry_run boolean DEFAULT false, keep_source boolean DEFAULT false,
                                   reversible boolean DEFAULT false)
LANGUAGE plpgsql
AS $$
DECLARE
  m id_gen.shard_moves;
  src text;
  n_ranges integer;
  n_shards integer;
  first_gene integer;
  last_gene integer;
  r record;
  res text;
BEGIN
  PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
  IF lower_gene IS NULL OR upper_gene IS NULL OR target_shard IS NULL OR dry_run IS NULL OR keep_source IS NULL OR reversible IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "%" must not be NULL',
      CASE WHEN lower_gene IS NULL THEN 'lower_gene' WHEN upper_gene IS NULL THEN 'upper_gene'
           WHEN target_shard IS NULL THEN 'target_shard' WHEN dry_run IS NULL THEN 'dry_run'
           WHEN keep_source IS NULL THEN 'keep_source' ELSE 'reversible' END
      USING ERRCODE = '22004';
  END IF;
  IF lower_gene NOT BETWEEN 0 AND 65535 OR upper_gene NOT BETWEEN 0 AND 65535 THEN
    RAISE EXCEPTION 'id_gen: genes go from 0 to 65535, not % .. %', lower_gene, upper_gene
      USING ERRCODE = '22003', HINT = 'Route ranges are listed in id_gen.route_ranges.';
  ELSIF lower_gene > upper_gene THEN
    RAISE EXCEPTION 'id_gen: lower_gene % is above upper_gene %', lower_gene, upper_gene USING ERRCODE = '22023';
  END IF;
  PERFORM id_gen.require_superuser('move genes between shards');
  -- Advisory-lock keys (sql/cluster/operations.sql): operation_start_lock_key (transaction) decides
  -- which move runs; operation_session_lock_key with the move id (session) is held by the
  -- session that runs that move.
  -- One session at a time decides which move runs, and no route change or new distributed
  -- table slips in before a new move is recorded (set_route and distribute_table take this
  -- lock too, then refuse while a move is unfinished). Both are released at the first COMMIT.
  PERFORM pg_advisory_xact_lock(id_gen.operation_start_lock_key());
  LOCK TABLE id_gen.shard_routes IN SHARE ROW EXCLUSIVE MODE;

  -- One move at a time: an unfinished move of these genes is resumed (whatever the routes
  -- say now); any other unfinished move is in the way.
  SELECT * INTO m FROM id_gen.shard_moves sm
  WHERE sm.phase NOT IN ('done', 'aborted', 'reverted')
  ORDER BY sm.move_id DESC LIMIT 1;
  IF FOUND THEN
    IF m.phase IN ('reversible', 'reverting') THEN
      RAISE EXCEPTION 'id_gen: move % of genes % .. % to shard "%" is %: its source still follows the target', m.move_id,
                      m.lower_gene, m.upper_gene, m.target_shard, m.phase
        USING ERRCODE = '55006',
              HINT = format('End it first: CALL id_gen.complete_move(%s) keeps the genes on %s, CALL id_gen.revert_move(%s) brings them back to %s.',
                            m.move_id, m.target_shard, m.move_id, m.source_shard);
    ELSIF (m.lower_gene, m.upper_gene, m.target_shard) IS DISTINCT FROM (move_genes.lower_gene, move_genes.upper_gene, move_genes.target_shard) THEN
      RAISE EXCEPTION 'id_gen: move % of genes % .. % to shard "%" is unfinished (%)', m.move_id, m.lower_gene, m.upper_gene, m.target_shard, m.phase
        USING ERRCODE = '55006',
              HINT = format('Finish it with CALL id_gen.move_genes(%s, %s, %L), or roll it back with CALL id_gen.abort_move(%s).',
                            m.lower_gene, m.upper_gene, m.target_shard, m.move_id);
    ELSIF m.phase = 'failed' THEN
      RAISE EXCEPTION 'id_gen: move % failed: %', m.move_id, m.last_error
        USING ERRCODE = '55000',
              HINT = format('CALL id_gen.abort_move(%s) rolls it back (the source still holds every row); then move again.', m.move_id);
    END IF;
    src := m.source_shard;
    IF NOT dry_run THEN
      -- The session that runs a move holds a session lock on it (re-entrant for itself).
      IF NOT id_gen.take_operation(m.move_id) THEN
        -- The move supervisor holds a move only for one short pass: wait for it (bounded).
        IF EXISTS (SELECT FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                   WHERE l.locktype = 'advisory' AND l.classid = id_gen.operation_session_lock_key()::oid AND l.objid = m.move_id
                     AND l.objsubid = 2 AND l.granted AND a.backend_type = 'id_gen move supervisor') THEN
          PERFORM pg_catalog.set_config('lock_timeout', '60s', true);
          PERFORM pg_advisory_lock(id_gen.operation_session_lock_key(), m.move_id::integer);
          PERFORM pg_catalog.set_config('lock_timeout', '0', true);
          SELECT * INTO m FROM id_gen.shard_moves sm WHERE sm.move_id = m.move_id;
          IF m.phase IN ('done', 'aborted', 'reverted') THEN
            PERFORM pg_advisory_unlock(id_gen.operation_session_lock_key(), m.move_id::integer);
            RAISE NOTICE 'id_gen: move % is % (the move supervisor finished it meanwhile)', m.move_id, m.phase;
            RETURN;
          END IF;
        ELSE
          RAISE EXCEPTION 'id_gen: move % is running in session %', m.move_id, m.runner_pid
            USING ERRCODE = '55006',
                  HINT = 'Watch it in id_gen.moves. A session whose CALL was interrupted keeps the move until it disconnects or calls again.';
        END IF;
      END IF;
      COMMIT;  -- (run_operation records this session as the runner)
      PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    END IF;
  ELSE
    PERFORM id_gen.refuse_during_operations('move genes');
    SELECT count(*), count(DISTINCT rr.shard), min(rr.lower_gene), max(rr.upper_gene), min(rr.shard)
      INTO n_ranges, n_shards, first_gene, last_gene, src
    FROM id_gen.route_ranges rr
    WHERE rr.lower_gene >= move_genes.lower_gene AND rr.upper_gene <= move_genes.upper_gene;
    IF n_ranges = 0 OR first_gene <> move_genes.lower_gene OR last_gene <> move_genes.upper_gene THEN
      RAISE EXCEPTION 'id_gen: genes % .. % are not whole route ranges', lower_gene, upper_gene
        USING ERRCODE = '22023',
              DETAIL = coalesce((SELECT 'Route ranges there: ' || string_agg(format('%s..%s on %s', rr.lower_gene, rr.upper_gene, rr.shard), ', ' ORDER BY rr.lower_gene)
                                 FROM id_gen.route_ranges rr
                                 WHERE rr.upper_gene >= move_genes.lower_gene AND rr.lower_gene <= move_genes.upper_gene),
                                'No route covers them.'),
              HINT = 'A move takes whole route ranges (one partition each). Split a range first, online: CALL id_gen.split_route(gene).';
    ELSIF n_shards > 1 THEN
      RAISE EXCEPTION 'id_gen: genes % .. % are on % shards; a move has one source', lower_gene, upper_gene, n_shards
        USING ERRCODE = '22023', HINT = 'Move each shard''s ranges with its own move_genes call.';
    ELSIF NOT EXISTS (SELECT FROM id_gen.distributed_tables) THEN
      RAISE EXCEPTION 'id_gen: there are no distributed tables, so there is nothing to move'
        USING ERRCODE = '55000', HINT = 'Change the routes with id_gen.set_route.';
    ELSIF src = target_shard THEN
      RAISE EXCEPTION 'id_gen: genes % .. % are on shard "%" already', lower_gene, upper_gene, target_shard
        USING ERRCODE = '22023';
    ELSIF NOT EXISTS (SELECT FROM pg_foreign_server s JOIN pg_foreign_data_wrapper w ON w.oid = s.srvfdw
                      WHERE s.srvname = target_shard AND w.fdwname = 'postgres_fdw') THEN
      RAISE EXCEPTION 'id_gen: target shard "%" is not a postgres_fdw foreign server', target_shard
        USING ERRCODE = '42704',
              HINT = format('CREATE SERVER %I FOREIGN DATA WRAPPER postgres_fdw OPTIONS (...); CREATE USER MAPPING FOR CURRENT_USER SERVER %I;', target_shard, target_shard);
    ELSIF EXISTS (SELECT FROM id_gen.sequences s WHERE s.authority = move_genes.target_shard) THEN
      RAISE EXCEPTION 'id_gen: "%" is the central segment authority of sequence %, not a shard', target_shard,
                      (SELECT min(s.name) FROM id_gen.sequences s WHERE s.authority = move_genes.target_shard)
        USING ERRCODE = '22023', HINT = 'Move genes to a server that holds rows of distributed tables (a shard), not to the server that numbers them.';
    END IF;
    m.lower_gene := move_genes.lower_gene;
    m.upper_gene := move_genes.upper_gene;
    m.source_shard := src;
    m.target_shard := move_genes.target_shard;
    m.keep_source := move_genes.keep_source;
    m.reversible := move_genes.reversible;
  END IF;

  IF dry_run THEN
    FOR r IN SELECT * FROM id_gen.move_commands(m) c
             WHERE c.phase <> 'abort' AND c.name <> 'count_target' ORDER BY c.step LOOP
      RAISE NOTICE 'step % (%), on %: %', r.step, r.phase,
        CASE r.server WHEN 'source' THEN format('%s (source)', src)
                      WHEN 'target' THEN format('%s (target)', move_genes.target_shard) ELSE 'the coordinator' END,
        r.command;
    END LOOP;
    RETURN;
  END IF;

  IF m.move_id IS NULL THEN
    PERFORM id_gen.dblink_schema();
    res := id_gen.remote_exec(src, 'SELECT pg_catalog.current_setting(''wal_level'')', 10000);
    IF res <> 'logical' THEN
      RAISE EXCEPTION 'id_gen: source shard "%" runs with wal_level = %, and logical replication needs logical', src, res
        USING ERRCODE = '55000',
              HINT = format('On %s: ALTER SYSTEM SET wal_level = logical; then restart it. Nothing was changed.', src);
    END IF;
    PERFORM id_gen.remote_call(move_genes.target_shard, 'shard_system_id', '{}', 10000);
    IF id_gen.has_owned_tables() THEN
      -- Tables laid out by ownership: their move functions (0.7.9) on both shards, and for a
      -- reversible move or keep_source those of 0.7.12.
      PERFORM id_gen.require_shard_function(shard, 'id_gen.shard_count_moved_rows(text[],name[],integer,integer)',
                                            'a move of tables laid out by ownership', '0.7.9')
      FROM unnest(ARRAY[src, move_genes.target_shard]) shard;
      IF move_genes.reversible OR move_genes.keep_source THEN
        PERFORM id_gen.require_shard_function(shard, 'id_gen.shard_keep_unowned_rows(bigint,text[],name[],integer,integer,integer)',
                                              CASE WHEN move_genes.reversible THEN 'a reversible move of tables laid out by ownership'
                                                   ELSE 'keep_source with tables laid out by ownership' END, '0.7.12')
        FROM unnest(ARRAY[src, move_genes.target_shard]) shard;
      END IF;
      -- (keep_source: 0.7.12's copy could end a batch inside an id; 0.7.13's records its copies)
      IF move_genes.keep_source
         AND id_gen.remote_exec(src, 'SELECT pg_catalog.to_regclass(''id_gen.shard_kept_copies'') IS NOT NULL', 10000) IS DISTINCT FROM 't' THEN
        RAISE EXCEPTION 'id_gen: keep_source with tables laid out by ownership needs id_gen 0.7.13 or later on shard "%"', src
          USING ERRCODE = '55000', DETAIL = 'Its copy of the source''s rows could miss rows of ids that repeat. Nothing was changed.',
                HINT = 'Run ALTER EXTENSION id_gen UPDATE on the shard, then call again.';
      END IF;
    END IF;
    INSERT INTO id_gen.shard_moves (lower_gene, upper_gene, source_shard, target_shard, keep_source, reversible, runner_pid)
    VALUES (move_genes.lower_gene, move_genes.upper_gene, src, move_genes.target_shard, move_genes.keep_source,
            move_genes.reversible, pg_backend_pid())
    RETURNING * INTO m;
    PERFORM id_gen.record_move_cleanups(m, CASE WHEN m.reversible THEN '{way_back}'::text[] ELSE '{}' END
                                           || '{subscription,publication,sync_slots,source_copies,target_copies,markers,source_markers}');
    PERFORM pg_advisory_lock(id_gen.operation_session_lock_key(), m.move_id::integer);
    RAISE NOTICE 'id_gen: move % of genes % .. % from % to % (watch it in id_gen.moves)', m.move_id, m.lower_gene, m.upper_gene, src, m.target_shard;
    COMMIT;
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
  END IF;

  CALL id_gen.run_operation(m.move_id);
END $$;
COMMENT ON PROCEDURE id_gen.move_genes(integer, integer, text, boolean, boolean, boolean) IS 'Moves the rows of every distributed table in genes lower_gene .. upper_gene (whole route ranges of one shard) to target_shard over logical replication, fencing only those genes for the cut-over; commits between phases (run it outside a transaction block). dry_run prints the steps and their SQL; keep_source keeps the source''s detached partitions (renamed *_moved_<id>); reversible keeps them in step with the target after the cut-over (reverse replication) until CALL id_gen.revert_move or CALL id_gen.complete_move. Re-running it resumes an unfinished move. Superuser only.';
REVOKE EXECUTE ON PROCEDURE id_gen.move_genes(integer, integer, text, boolean, boolean, boolean) FROM PUBLIC;

CREATE OR REPLACE PROCEDURE id_gen.abort_move(move_id bigint, force boolean DEFAULT false)
LANGUAGE plpgsql
AS $$
DECLARE
  m id_gen.shard_moves;
  cleanup text;
  source_left text;
BEGIN
  -- Fails at once (2D000) inside a transaction block, before anything remote is undone.
  COMMIT;
  PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
  IF move_id IS NULL OR force IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "%" must not be NULL', CASE WHEN move_id IS NULL THEN 'move_id' ELSE 'force' END
      USING ERRCODE = '22004';
  END IF;
  PERFORM id_gen.require_superuser('abort moves');
  SELECT * INTO m FROM id_gen.shard_moves sm WHERE sm.move_id = abort_move.move_id FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'id_gen: there is no move %', move_id USING ERRCODE = '42704', HINT = 'Moves are listed in id_gen.moves.';
  ELSIF m.phase IN ('done', 'aborted', 'reverted') THEN
    RAISE EXCEPTION 'id_gen: move % is % already', move_id, m.phase USING ERRCODE = '55000';
  ELSIF m.phase = 'cut_over' THEN
    RAISE EXCEPTION 'id_gen: move % has cut over: the target is authoritative', move_id
      USING ERRCODE = '55000',
            HINT = format('CALL id_gen.move_genes(%s, %s, %L) finishes it; to undo it, move the genes back afterwards.',
                          m.lower_gene, m.upper_gene, m.target_shard);
  ELSIF m.phase IN ('reversible', 'reverting') THEN
    RAISE EXCEPTION 'id_gen: move % has cut over and is %: the target is authoritative', move_id, m.phase
      USING ERRCODE = '55000',
            HINT = format('CALL id_gen.revert_move(%s) brings the genes back to %s with every write; CALL id_gen.complete_move(%s) keeps them on %s.',
                          m.move_id, m.source_shard, m.move_id, m.target_shard);
  END IF;
  cleanup := id_gen.roll_back_operation(m.move_id, NULL);
  -- force: give up on what only the target still holds (a target that is gone for good);
  -- what the source holds (fence, slot, publication) must be gone in any case. (Its
  -- records stay, naming what is left on the target.)
  source_left := (SELECT string_agg(c.object_name || ': ' || coalesce(c.last_error, 'not cleaned up'), '; ' ORDER BY c.run_order DESC)
                  FROM id_gen.operation_cleanups c
                  WHERE c.operation_id = m.move_id AND c.node = m.source_shard AND c.policy <> 'on_success');
  IF cleanup IS NOT NULL AND force AND source_left IS NULL THEN
    UPDATE id_gen.shard_moves sm SET phase = 'aborted', finished_at = clock_timestamp() WHERE sm.move_id = m.move_id;
  END IF;
  COMMIT;
  IF cleanup IS NOT NULL AND NOT (force AND source_left IS NULL) THEN
    RAISE EXCEPTION 'id_gen: move % is only partly rolled back: %', move_id, cleanup
      USING ERRCODE = '55000',
            HINT = CASE WHEN source_left IS NULL
                        THEN format('Call abort_move again when the target answers, or CALL id_gen.abort_move(%s, force => true) if it is gone for good (its copies and subscription stay there).', move_id)
                        ELSE 'Call abort_move again when the source answers; routes and the source''s rows are unchanged.' END;
  ELSIF cleanup IS NOT NULL THEN
    RAISE WARNING 'id_gen: move % aborted; left on the target: %', move_id, cleanup
      USING HINT = 'Drop that subscription (ALTER SUBSCRIPTION ... DISABLE; ... SET (slot_name = NONE); DROP SUBSCRIPTION) and those partitions on the target if it comes back.';
    RETURN;
  END IF;
  RAISE NOTICE 'id_gen: move % rolled back: routes and the source are unchanged, the target''s copies and the replication slot are gone', move_id;
END $$;
COMMENT ON PROCEDURE id_gen.abort_move(bigint, boolean) IS 'Rolls back a move that has not cut over: drops its fence, subscription, replication slot and publication and the target''s copies; routes and the source are unchanged. force => true marks it aborted even if the target cannot be reached (the source must be clean). Run it outside a transaction block. Superuser only.';
REVOKE EXECUTE ON PROCEDURE id_gen.abort_move(bigint, boolean) FROM PUBLIC;
