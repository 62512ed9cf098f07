-- Online moves of route ranges between shards (CALL id_gen.move_genes), on PostgreSQL's
-- logical replication. Built on the layout of sql/distribute.sql: a route range is one
-- partition on its shard and one range partition holding one foreign table on the
-- coordinator, so a move copies whole tables and re-points one foreign table per table.
--
-- Phases (id_gen.moves.phase), each committed before the next starts:
--   planned      the move is recorded; nothing exists anywhere yet.
--   copying      the target has the partitions (created from the coordinator's
--                definitions through id_gen.shard_tables); the source publishes them
--                (row filter on the id, the replica identity); the target subscribes
--                with copy_data and the initial copy runs. Ends when every table of the
--                subscription is ready (srsubstate = 'r').
--   catching_up  streaming; ends when the slot's lag is small.
--   (fence)      one coordinator transaction: ACCESS EXCLUSIVE on the coordinator's range
--                partitions of the moved genes (their writers wait; other ranges are
--                not locked), a trigger on the source partitions that refuses direct
--                writes, a marker row written on the source after that and awaited on
--                the target (everything before it is applied: apply is in commit order),
--                the target's local sequences raised above the source's, then the routes
--                and the foreign tables flipped to the target. COMMIT lifts the fence;
--                waiting writers re-route to the target.
--   cut_over     the source detaches its partitions (direct writes of those genes get
--                23514 there), drops the subscription (and with it the slot) and the
--                publication, and drops the detached partitions unless keep_source.
--   done / aborted / failed.
--
-- Invariants:
--   * Until the flip commits, the source is authoritative and the routes unchanged;
--     every step before it is undone by id_gen.abort_move.
--   * No replication slot outlives its move: the slot belongs to the subscription and is
--     dropped with it; a failed move drops it on the source even when the target is gone.
--   * Remote commands run over dblink (CREATE SUBSCRIPTION cannot run in a transaction
--     block) with the shard's foreign server and user mapping, sent asynchronously and
--     awaited with pg_sleep, so every wait can be cancelled and is bounded.

-- Shard side ------------------------------------------------------------------------------
CREATE TABLE id_gen.move_markers (
    move_id    bigint      NOT NULL,
    marker     bigint      NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (move_id, marker)
);
REVOKE ALL ON id_gen.move_markers FROM PUBLIC;
COMMENT ON TABLE id_gen.move_markers IS 'On a shard: rows written on the source of a move once writes are fenced and awaited on the target; when one arrives, everything committed before it has been applied.';

CREATE FUNCTION id_gen.refuse_moving_rows() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  RAISE EXCEPTION 'id_gen: the rows of % are moving to shard "%" (move %)', TG_TABLE_NAME, TG_ARGV[1], TG_ARGV[0]
    USING ERRCODE = '55006',
          HINT = 'Writes of these genes pause through the coordinator; an application that routes by itself retries after re-reading id_gen.shard_routes.';
END $$;
COMMENT ON FUNCTION id_gen.refuse_moving_rows() IS 'Trigger that fences the source partition of a move: direct writes fail with 55006 until the partition is detached.';

-- Coordinator side ------------------------------------------------------------------------
-- A plain sequence, marked for pg_dump, so that a restored coordinator numbers new moves
-- after the restored ones.
CREATE SEQUENCE id_gen.move_ids;
SELECT pg_catalog.pg_extension_config_dump('id_gen.move_ids', '');
COMMENT ON SEQUENCE id_gen.move_ids IS 'Numbers the moves in id_gen.shard_moves.';
-- pg_dump reads it (an unprivileged pg_dump too, as for the other catalog tables).
GRANT SELECT ON SEQUENCE id_gen.move_ids TO PUBLIC;
CREATE TABLE id_gen.shard_moves (
    move_id          bigint      PRIMARY KEY DEFAULT nextval('id_gen.move_ids'),
    lower_gene       integer     NOT NULL,
    upper_gene       integer     NOT NULL,
    source_shard     text        NOT NULL,
    target_shard     text        NOT NULL,
    phase            text        NOT NULL DEFAULT 'planned'
                     CHECK (phase IN ('planned', 'copying', 'catching_up', 'cut_over', 'done', 'aborted', 'failed')),
    keep_source      boolean     NOT NULL DEFAULT false,
    rows_copied      bigint,
    lag_bytes        bigint,
    fence_attempts   integer     NOT NULL DEFAULT 0,
    target_subscription oid,
    runner_pid       integer,
    source_fenced    boolean     NOT NULL DEFAULT false,
    fence_started_at timestamptz,
    fence_ended_at   timestamptz,
    started_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at      timestamptz,
    last_error       text,
    CHECK (lower_gene BETWEEN 0 AND upper_gene AND upper_gene <= 65535)
);
ALTER SEQUENCE id_gen.move_ids OWNED BY id_gen.shard_moves.move_id;
SELECT pg_catalog.pg_extension_config_dump('id_gen.shard_moves', '');
REVOKE ALL ON id_gen.shard_moves FROM PUBLIC;
GRANT SELECT ON id_gen.shard_moves TO PUBLIC;
COMMENT ON TABLE id_gen.shard_moves IS 'On a coordinator: every move of genes between shards (CALL id_gen.move_genes) with its phase and progress; read it through id_gen.moves.';

CREATE VIEW id_gen.moves AS
SELECT move_id, lower_gene, upper_gene, source_shard, target_shard, phase,
       rows_copied, lag_bytes,
       round(extract(epoch FROM fence_ended_at - fence_started_at) * 1000, 1) AS fence_ms,
       fence_attempts, source_fenced, started_at, finished_at,
       coalesce(finished_at, clock_timestamp()) - started_at AS elapsed,
       last_error
FROM id_gen.shard_moves;
COMMENT ON VIEW id_gen.moves IS 'Moves of genes between shards: phase, rows copied, replication lag, how long writes of the moved genes were fenced (fence_ms), times and the last error. Unfinished moves resume with the same CALL id_gen.move_genes(...) or roll back with CALL id_gen.abort_move(move_id).';
GRANT SELECT ON id_gen.moves TO PUBLIC;

CREATE FUNCTION id_gen.dblink_schema() RETURNS name
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  s name;
BEGIN
  SELECT n.nspname INTO s FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
  WHERE e.extname = 'dblink';
  IF s IS NULL THEN
    RAISE EXCEPTION 'id_gen: moving genes needs the dblink extension on the coordinator'
      USING ERRCODE = '55000',
            HINT = 'CREATE EXTENSION dblink; (contrib, shipped with PostgreSQL). It runs CREATE SUBSCRIPTION on the target, which cannot run inside a transaction.';
  END IF;
  RETURN s;
END $$;
COMMENT ON FUNCTION id_gen.dblink_schema() IS 'Schema of the dblink extension (55000 with a hint when it is not installed).';

-- Runs one command (a single statement: DO blocks group several) on a shard and returns
-- the first column of its first row (or the command tag). Asynchronous send, then
-- pg_sleep polls: cancellable, bounded.
CREATE FUNCTION id_gen.shard_exec(shard text, command text, timeout_ms integer DEFAULT 60000) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  dbl name := id_gen.dblink_schema();
  conn text := 'id_gen_' || md5(shard);
  connected boolean;
  busy integer;
  result text;
  deadline timestamptz := clock_timestamp() + timeout_ms * interval '1 ms';
BEGIN
  EXECUTE format('SELECT $1 = ANY (coalesce(%I.dblink_get_connections(), ''{}''))', dbl) INTO connected USING conn;
  IF NOT connected THEN
    EXECUTE format('SELECT %I.dblink_connect($1, $2)', dbl) USING conn, shard;
  END IF;
  BEGIN
    EXECUTE format('SELECT %I.dblink_send_query($1, $2)', dbl) INTO busy USING conn, command;
    IF busy IS DISTINCT FROM 1 THEN
      RAISE EXCEPTION 'id_gen: could not send a command to shard "%"', shard USING ERRCODE = '08006';
    END IF;
    LOOP
      EXECUTE format('SELECT %I.dblink_is_busy($1)', dbl) INTO busy USING conn;
      EXIT WHEN busy = 0;
      IF clock_timestamp() > deadline THEN
        -- (No command text here: a CREATE SUBSCRIPTION carries a password.)
        RAISE EXCEPTION 'id_gen: shard "%" did not finish a command within % ms', shard, timeout_ms
          USING ERRCODE = '57014';
      END IF;
      PERFORM pg_sleep(0.002);
    END LOOP;
    EXECUTE format('SELECT r FROM %I.dblink_get_result($1) AS t(r text) LIMIT 1', dbl) INTO result USING conn;
    -- One more call returns the empty result that frees the connection.
    EXECUTE format('SELECT count(*) FROM %I.dblink_get_result($1) AS t(r text)', dbl) USING conn;
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    -- A command still running, a half-read result, a broken link or a cancel: cancel and drop the
    -- connection, so that the next call starts clean.
    BEGIN
      EXECUTE format('SELECT %I.dblink_cancel_query($1)', dbl) USING conn;
    EXCEPTION WHEN OTHERS THEN NULL;
    END;
    BEGIN
      EXECUTE format('SELECT %I.dblink_disconnect($1)', dbl) USING conn;
    EXCEPTION WHEN OTHERS THEN NULL;
    END;
    RAISE;
  END;
  RETURN result;
END $$;
COMMENT ON FUNCTION id_gen.shard_exec(text, text, integer) IS 'Runs one command on a shard over dblink (its foreign server and user mapping), asynchronously and cancellably, bounded by timeout_ms; returns the first column of the first row or the command tag.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_exec(text, text, integer) FROM PUBLIC;

-- libpq connection string of a shard for CREATE SUBSCRIPTION on another shard: the
-- libpq options of its foreign server and of the current user's mapping.
CREATE FUNCTION id_gen.shard_conninfo(shard text, mask_password boolean DEFAULT true) RETURNS text
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  SELECT string_agg(format('%s=''%s''', o.key,
                           CASE WHEN o.key = 'password' AND mask_password THEN '********'
                                ELSE replace(replace(o.value, '\', '\\'), '''', '\''') END), ' ' ORDER BY o.key)
  FROM (SELECT split_part(opt, '=', 1) AS key, substr(opt, strpos(opt, '=') + 1) AS value
        FROM (SELECT unnest(s.srvoptions) AS opt FROM pg_foreign_server s WHERE s.srvname = shard_conninfo.shard
              UNION ALL
              SELECT unnest(um.umoptions) FROM pg_user_mappings um
              WHERE um.srvname = shard_conninfo.shard
                AND um.umuser = (SELECT coalesce((SELECT u.umuser FROM pg_user_mappings u
                                                  WHERE u.srvname = shard_conninfo.shard AND u.usename = current_user), 0))
             ) opts) o
  WHERE o.key IN ('host', 'hostaddr', 'port', 'dbname', 'user', 'password', 'sslmode', 'sslrootcert',
                  'sslcert', 'sslkey', 'connect_timeout', 'options', 'target_session_attrs', 'passfile');
END;
COMMENT ON FUNCTION id_gen.shard_conninfo(text, boolean) IS 'The libpq connection string of a shard (options of its foreign server and of the current user''s mapping), for a subscription on another shard; the password is masked unless mask_password => false.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_conninfo(text, boolean) FROM PUBLIC;

-- The commands of a move, by step name, in order: what move_genes runs and what
-- dry_run prints. server is 'source', 'target' or 'coordinator'.
CREATE FUNCTION id_gen.move_commands(move_id bigint, lower_gene integer, upper_gene integer,
                                     source_shard text, target_shard text, mask_password boolean DEFAULT true,
                                     subscription_oid oid DEFAULT NULL)
RETURNS TABLE (step integer, phase text, server text, name text, command text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  tag text := 'id_gen_move_' || coalesce(move_id::text, 'N');
  pub_tables text;
  fence text;
  unfence text;
  detach text;
  drop_source text;
  count_target text;
  truncate_target text;
  ranges text;
  n integer := 0;
BEGIN
  SELECT string_agg(format('%I.%I WHERE (%I BETWEEN %s AND %s)', d.schema_name,
                           id_gen.partition_name(d.table_name, r.lower_gene, r.upper_gene),
                           d.id_column, id_gen.gene_first_id(r.lower_gene),
                           id_gen.gene_last_id(r.upper_gene)), ', '
                    ORDER BY d.schema_name, d.table_name, r.lower_gene),
         string_agg(format('CREATE OR REPLACE TRIGGER id_gen_move_fence BEFORE INSERT OR UPDATE OR DELETE ON %1$I.%2$I '
                           'FOR EACH ROW EXECUTE FUNCTION id_gen.refuse_moving_rows(%3$L, %4$L); '
                           'ALTER TABLE %1$I.%2$I ENABLE TRIGGER id_gen_move_fence;',
                           d.schema_name, id_gen.partition_name(d.table_name, r.lower_gene, r.upper_gene),
                           coalesce(move_id::text, 'N'), target_shard), ' '
                    ORDER BY d.schema_name, d.table_name, r.lower_gene),
         -- DISABLE takes SHARE ROW EXCLUSIVE: long readers of the partition do not block it
         -- (DROP TRIGGER would need ACCESS EXCLUSIVE).
         string_agg(format('IF EXISTS (SELECT FROM pg_trigger WHERE tgname = ''id_gen_move_fence'' AND tgrelid = to_regclass(%L)) '
                           'THEN ALTER TABLE %I.%I DISABLE TRIGGER id_gen_move_fence; END IF;',
                           format('%I.%I', d.schema_name, id_gen.partition_name(d.table_name, r.lower_gene, r.upper_gene)),
                           d.schema_name, id_gen.partition_name(d.table_name, r.lower_gene, r.upper_gene)), ' '
                    ORDER BY d.schema_name, d.table_name, r.lower_gene),
         -- Idempotent (a resumed move may have detached some already).
         string_agg(format('IF EXISTS (SELECT FROM pg_inherits WHERE inhrelid = to_regclass(%L)) THEN '
                           'ALTER TABLE %I.%I DETACH PARTITION %I.%I; ALTER TABLE %I.%I RENAME TO %I; END IF;',
                           format('%I.%I', d.schema_name, id_gen.partition_name(d.table_name, r.lower_gene, r.upper_gene)),
                           d.schema_name, d.table_name, d.schema_name,
                           id_gen.partition_name(d.table_name, r.lower_gene, r.upper_gene),
                           d.schema_name, id_gen.partition_name(d.table_name, r.lower_gene, r.upper_gene),
                           'id_gen_moved_' || coalesce(move_id::text, 'N') || '_' || left(md5(id_gen.partition_name(d.table_name, r.lower_gene, r.upper_gene)), 8)), ' '
                    ORDER BY d.schema_name, d.table_name, r.lower_gene),
         string_agg(quote_literal(format('%I.%I', d.schema_name,
                           id_gen.partition_name(d.table_name, r.lower_gene, r.upper_gene))) || '::regclass', ', '
                    ORDER BY d.schema_name, d.table_name, r.lower_gene),
         string_agg(format('IF to_regclass(%L) IS NOT NULL THEN TRUNCATE %I.%I; END IF;',
                           format('%I.%I', d.schema_name, id_gen.partition_name(d.table_name, r.lower_gene, r.upper_gene)),
                           d.schema_name, id_gen.partition_name(d.table_name, r.lower_gene, r.upper_gene)), ' '
                    ORDER BY d.schema_name, d.table_name, r.lower_gene),
         string_agg(format('DROP TABLE IF EXISTS %I.%I;', d.schema_name,
                           'id_gen_moved_' || coalesce(move_id::text, 'N') || '_' || left(md5(id_gen.partition_name(d.table_name, r.lower_gene, r.upper_gene)), 8)), ' '
                    ORDER BY d.schema_name, d.table_name, r.lower_gene),
         string_agg(DISTINCT format('%s..%s', r.lower_gene, r.upper_gene), ', ')
    INTO pub_tables, fence, unfence, detach, count_target, truncate_target, drop_source, ranges
  FROM id_gen.distributed_tables d
  CROSS JOIN id_gen.route_ranges r
  WHERE r.lower_gene >= move_commands.lower_gene AND r.upper_gene <= move_commands.upper_gene;

  RETURN QUERY VALUES
    (1, 'copying', 'coordinator', 'prepare_target',
     format('-- through postgres_fdw: %s learns that it owns route ranges %s too (id_gen.shard_tables); it creates the tables and empty partitions from the coordinator''s definitions', target_shard, ranges)),
    (2, 'copying', 'source', 'create_publication',
     format('CREATE PUBLICATION %I FOR TABLE %s, id_gen.move_markers WHERE (move_id = %s)', tag, pub_tables, coalesce(move_id::text, 'N'))),
    (3, 'copying', 'target', 'create_subscription',
     format('CREATE SUBSCRIPTION %I CONNECTION %L PUBLICATION %I WITH (copy_data = true, slot_name = %L)',
            tag, id_gen.shard_conninfo(source_shard, mask_password), tag, tag)),
    (4, 'copying', 'target', 'sync_state',
     format('SELECT count(*) FILTER (WHERE sr.srsubstate <> ''r'') || ''/'' || count(*) FROM pg_subscription_rel sr JOIN pg_subscription s ON s.oid = sr.srsubid WHERE s.subname = %L', tag)),
    (5, 'catching_up', 'source', 'lag',
     format('SELECT coalesce((pg_current_wal_lsn() - confirmed_flush_lsn)::bigint, -1) FROM pg_replication_slots WHERE slot_name = %L', tag)),
    (6, 'catching_up', 'coordinator', 'fence_coordinator',
     '-- LOCK TABLE <range partitions of the moved genes> IN ACCESS EXCLUSIVE MODE  (writers of these genes wait; others do not)'),
    (7, 'catching_up', 'source', 'fence_source',
     'DO $d$ BEGIN PERFORM set_config(''lock_timeout'', ''2s'', true); ' || fence || ' END $d$'),
    (8, 'catching_up', 'source', 'marker',
     format('INSERT INTO id_gen.move_markers (move_id, marker) VALUES (%s, <attempt>)', coalesce(move_id::text, 'N'))),
    (9, 'catching_up', 'target', 'await_marker',
     format('SELECT count(*) FROM id_gen.move_markers WHERE move_id = %s AND marker = <attempt>', coalesce(move_id::text, 'N'))),
    (10, 'catching_up', 'coordinator', 'flip',
     format('-- UPDATE id_gen.shard_routes SET shard = %L for %s; swap each range partition''s foreign table to %s; COMMIT (lifts the fence)', target_shard, ranges, target_shard)),
    (11, 'cut_over', 'source', 'detach_source',
     'DO $d$ BEGIN PERFORM set_config(''lock_timeout'', ''5s'', true); ' || detach || ' END $d$'),
    (12, 'cut_over', 'coordinator', 'forget_source',
     format('-- through postgres_fdw: %s no longer owns route ranges %s (id_gen.shard_tables)', source_shard, ranges)),
    (13, 'cut_over', 'target', 'drop_subscription', format('DROP SUBSCRIPTION IF EXISTS %I', tag)),
    (14, 'cut_over', 'source', 'drop_publication', format('DROP PUBLICATION IF EXISTS %I', tag)),
    (15, 'cut_over', 'source', 'drop_source',
     'DO $d$ BEGIN ' || drop_source || format(' DELETE FROM id_gen.move_markers WHERE move_id = %s; END $d$', coalesce(move_id::text, 'N'))),
    (16, 'cut_over', 'target', 'forget_markers', format('DELETE FROM id_gen.move_markers WHERE move_id = %s', coalesce(move_id::text, 'N'))),
    (17, 'abort', 'source', 'unfence_source',
     'DO $d$ BEGIN PERFORM set_config(''lock_timeout'', ''5s'', true); ' || unfence || ' END $d$'),
    (18, 'abort', 'source', 'drop_slot',
     format('SELECT count(CASE WHEN active THEN pg_terminate_backend(active_pid) ELSE pg_drop_replication_slot(slot_name) IS NULL END) '
            'FROM pg_replication_slots WHERE slot_name = %L OR slot_name LIKE %L',
            tag, 'pg\_' || coalesce(subscription_oid::text, 'none') || '\_sync\_%')),
    (19, 'abort', 'target', 'detach_subscription',
     format('DO $d$ BEGIN IF EXISTS (SELECT FROM pg_subscription WHERE subname = %L) THEN ALTER SUBSCRIPTION %I DISABLE; ALTER SUBSCRIPTION %I SET (slot_name = NONE); END IF; END $d$', tag, tag, tag)),
    -- Progress without counting: rows the table sync committed, plus those of a COPY running now.
    (20, 'copying', 'target', 'count_target',
     format('SELECT (SELECT coalesce(sum(n_tup_ins), 0) FROM pg_stat_user_tables WHERE relid IN (%s)) '
            '+ (SELECT coalesce(sum(tuples_processed), 0) FROM pg_stat_progress_copy WHERE relid IN (%s))', count_target, count_target)),
    (21, 'abort', 'target', 'empty_target', 'DO $d$ BEGIN ' || truncate_target || ' END $d$');
END $$;
COMMENT ON FUNCTION id_gen.move_commands(bigint, integer, integer, text, text, boolean, oid) IS 'The steps of a move with the command each server runs (what move_genes executes and dry_run prints).';
REVOKE EXECUTE ON FUNCTION id_gen.move_commands(bigint, integer, integer, text, text, boolean, oid) FROM PUBLIC;

-- Runs one step of a move on the shard it belongs to (<attempt> filled in).
CREATE FUNCTION id_gen.run_move_step(m id_gen.shard_moves, step_name text, attempt integer DEFAULT 0,
                                     timeout_ms integer DEFAULT 60000) RETURNS text
LANGUAGE sql STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  SELECT id_gen.shard_exec(CASE c.server WHEN 'source' THEN m.source_shard WHEN 'target' THEN m.target_shard END,
                           replace(c.command, '<attempt>', attempt::text), timeout_ms)
  FROM id_gen.move_commands(m.move_id, m.lower_gene, m.upper_gene, m.source_shard, m.target_shard, false, m.target_subscription) c
  WHERE c.name = step_name;
END;
COMMENT ON FUNCTION id_gen.run_move_step(id_gen.shard_moves, text, integer, integer) IS 'Runs one step of a move (see move_commands) on its shard.';
REVOKE EXECUTE ON FUNCTION id_gen.run_move_step(id_gen.shard_moves, text, integer, integer) FROM PUBLIC;

-- Tells a shard its new route ranges for every distributed table (through postgres_fdw,
-- in the caller's transaction) and records them.
CREATE FUNCTION id_gen.place_ranges(shard text, add_lower integer, add_upper integer, adding boolean) RETURNS void
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
                WHERE adding AND r.lower_gene >= add_lower AND r.upper_gene <= add_upper) x
          WHERE adding OR NOT (g <@ int4range(add_lower, add_upper, '[]'))) y;
    PERFORM id_gen.push_shard_table(shard, d.schema_name, d.table_name, d.id_column, wanted, d.shard_definition);
  END LOOP;
END $$;
COMMENT ON FUNCTION id_gen.place_ranges(text, integer, integer, boolean) IS 'Adds (adding) or removes the route ranges within add_lower .. add_upper to or from a shard''s placement of every distributed table, on the shard and in id_gen.shard_placements.';
REVOKE EXECUTE ON FUNCTION id_gen.place_ranges(text, integer, integer, boolean) FROM PUBLIC;

-- Cleans up what a move that has not cut over left on its shards. Every step is tried;
-- returns the errors (NULL when everything is clean).
CREATE FUNCTION id_gen.undo_move(m id_gen.shard_moves) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  errors text;
  msg text;
  step text;
  i integer;
  left_slots text;
BEGIN
  FOREACH step IN ARRAY ARRAY['unfence_source', 'detach_subscription', 'drop_subscription', 'drop_publication'] LOOP
    BEGIN
      PERFORM id_gen.run_move_step(m, step, 0, 10000);
      IF step = 'unfence_source' THEN
        UPDATE id_gen.shard_moves sm SET source_fenced = false WHERE sm.move_id = m.move_id;
      END IF;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
      GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT;
      errors := concat_ws('; ', errors, step || ': ' || msg);
    END;
  END LOOP;
  -- The slot: its walsender may take a moment to exit after its subscriber went away.
  FOR i IN 1 .. 50 LOOP
    BEGIN
      PERFORM id_gen.run_move_step(m, 'drop_slot', 0, 10000);
      left_slots := id_gen.shard_exec(m.source_shard,
        format('SELECT count(*) FROM pg_replication_slots WHERE slot_name = %L OR slot_name LIKE %L',
               'id_gen_move_' || m.move_id, 'pg\_' || coalesce(m.target_subscription::text, 'none') || '\_sync\_%'), 10000);
    EXCEPTION WHEN OTHERS OR query_canceled THEN
      GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT;
      left_slots := 'unknown: ' || msg;
    END;
    EXIT WHEN left_slots = '0';
    PERFORM pg_sleep(0.2);
  END LOOP;
  IF left_slots <> '0' THEN
    errors := concat_ws('; ', errors, format('replication slot %s on %s: %s', 'id_gen_move_' || m.move_id, m.source_shard, left_slots));
  END IF;
  BEGIN
    PERFORM id_gen.run_move_step(m, 'empty_target', 0, 60000);
    PERFORM id_gen.place_ranges(m.target_shard, m.lower_gene, m.upper_gene, false);
    PERFORM id_gen.run_move_step(m, 'forget_markers', 0, 10000);
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT;
    errors := concat_ws('; ', errors, 'target partitions: ' || msg);
  END;
  BEGIN
    PERFORM id_gen.shard_exec(m.source_shard, format('DELETE FROM id_gen.move_markers WHERE move_id = %s', m.move_id), 10000);
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT;
    errors := concat_ws('; ', errors, 'source markers: ' || msg);
  END;
  RETURN errors;
END $$;
COMMENT ON FUNCTION id_gen.undo_move(id_gen.shard_moves) IS 'Removes what an unfinished move left on its shards (fence triggers, subscription, slot, publication, the target''s copies); returns the errors, NULL when clean.';
REVOKE EXECUTE ON FUNCTION id_gen.undo_move(id_gen.shard_moves) FROM PUBLIC;

CREATE PROCEDURE id_gen.move_genes(lower_gene integer, upper_gene integer, target_shard text,
                                   dry_run boolean DEFAULT false, keep_source boolean DEFAULT false)
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
  d record;
  res text;
  err text;
  err_state text;
  attempt integer;
  t0 timestamptz;
  deadline timestamptz;
  lag bigint;
  cleanup text;
  progress_at timestamptz;
  unfenced boolean;
  i integer;
  last_state text;
  copied bigint;
  last_copied bigint;
BEGIN
  PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
  IF lower_gene IS NULL OR upper_gene IS NULL OR target_shard IS NULL OR dry_run IS NULL OR keep_source IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "%" must not be NULL',
      CASE WHEN lower_gene IS NULL THEN 'lower_gene' WHEN upper_gene IS NULL THEN 'upper_gene'
           WHEN target_shard IS NULL THEN 'target_shard' WHEN dry_run IS NULL THEN 'dry_run' ELSE 'keep_source' END
      USING ERRCODE = '22004';
  END IF;
  PERFORM id_gen.require_superuser('move genes between shards');
  -- Advisory lock keys: 757430 (transaction) decides which move runs; 757431 with the move
  -- id (session) is held by the session that runs that move.
  -- One session at a time decides which move runs, and no route change or new distributed
  -- table slips in before a new move is recorded (set_route and distribute_table take this
  -- lock too, then refuse while a move is unfinished). Both are released at the first COMMIT.
  PERFORM pg_advisory_xact_lock(757430);
  LOCK TABLE id_gen.shard_routes IN SHARE ROW EXCLUSIVE MODE;

  -- One move at a time: an unfinished move of these genes is resumed (whatever the routes
  -- say now); any other unfinished move is in the way.
  SELECT * INTO m FROM id_gen.shard_moves sm
  WHERE sm.phase NOT IN ('done', 'aborted')
  ORDER BY sm.move_id DESC LIMIT 1;
  IF FOUND THEN
    IF (m.lower_gene, m.upper_gene, m.target_shard) IS DISTINCT FROM (move_genes.lower_gene, move_genes.upper_gene, move_genes.target_shard) THEN
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
      IF NOT EXISTS (SELECT FROM pg_locks l WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid()
                     AND l.classid = 757431 AND l.objid = m.move_id AND l.objsubid = 2)
         AND NOT pg_try_advisory_lock(757431, m.move_id::integer) THEN
        RAISE EXCEPTION 'id_gen: move % is running in session %', m.move_id, m.runner_pid
          USING ERRCODE = '55006',
                HINT = 'Watch it in id_gen.moves. A session whose CALL was interrupted keeps the move until it disconnects or calls again.';
      END IF;
      UPDATE id_gen.shard_moves sm SET runner_pid = pg_backend_pid(), updated_at = clock_timestamp()
      WHERE sm.move_id = m.move_id RETURNING * INTO m;
      COMMIT;
      PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    END IF;
  ELSE
    SELECT count(*), count(DISTINCT rr.shard), min(rr.lower_gene), max(rr.upper_gene), min(rr.shard)
      INTO n_ranges, n_shards, first_gene, last_gene, src
    FROM id_gen.route_ranges rr
    WHERE rr.lower_gene >= move_genes.lower_gene AND rr.upper_gene <= move_genes.upper_gene;
    IF n_ranges = 0 OR first_gene <> move_genes.lower_gene OR last_gene <> move_genes.upper_gene THEN
      RAISE EXCEPTION 'id_gen: genes % .. % are not whole route ranges', lower_gene, upper_gene
        USING ERRCODE = '22023',
              DETAIL = (SELECT 'Route ranges there: ' || string_agg(format('%s..%s on %s', rr.lower_gene, rr.upper_gene, rr.shard), ', ' ORDER BY rr.lower_gene)
                        FROM id_gen.route_ranges rr
                        WHERE rr.upper_gene >= move_genes.lower_gene AND rr.lower_gene <= move_genes.upper_gene),
              HINT = 'A move takes whole route ranges (one partition each). Split a range first with id_gen.set_route(bound, its shard): that re-partitions the shard''s table, which copies its rows.';
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
    END IF;
  END IF;

  IF dry_run THEN
    FOR r IN SELECT * FROM id_gen.move_commands(m.move_id, move_genes.lower_gene, move_genes.upper_gene, src, move_genes.target_shard)
             WHERE phase <> 'abort' AND name <> 'count_target' ORDER BY step LOOP
      RAISE NOTICE 'step % (%), on %: %', r.step, r.phase,
        CASE r.server WHEN 'source' THEN format('%s (source)', src)
                      WHEN 'target' THEN format('%s (target)', move_genes.target_shard) ELSE 'the coordinator' END,
        r.command;
    END LOOP;
    RETURN;
  END IF;

  IF m.move_id IS NULL THEN
    PERFORM id_gen.dblink_schema();
    res := id_gen.shard_exec(src, 'SELECT current_setting(''wal_level'')', 10000);
    IF res <> 'logical' THEN
      RAISE EXCEPTION 'id_gen: source shard "%" runs with wal_level = %, and logical replication needs logical', src, res
        USING ERRCODE = '55000',
              HINT = format('On %s: ALTER SYSTEM SET wal_level = logical; then restart it. Nothing was changed.', src);
    END IF;
    PERFORM id_gen.shard_exec(move_genes.target_shard, 'SELECT 1', 10000);
    INSERT INTO id_gen.shard_moves (lower_gene, upper_gene, source_shard, target_shard, keep_source, runner_pid)
    VALUES (move_genes.lower_gene, move_genes.upper_gene, src, move_genes.target_shard, move_genes.keep_source, pg_backend_pid())
    RETURNING * INTO m;
    PERFORM pg_advisory_lock(757431, m.move_id::integer);
    RAISE NOTICE 'id_gen: move % of genes % .. % from % to % (watch it in id_gen.moves)', m.move_id, m.lower_gene, m.upper_gene, src, m.target_shard;
    COMMIT;
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
  END IF;

  -- copying -------------------------------------------------------------------------------
  IF m.phase = 'planned' THEN
    -- The target's partitions must be committed there before the subscription looks
    -- for them, so this is a transaction of its own (idempotent when resumed).
    BEGIN
      PERFORM id_gen.place_ranges(m.target_shard, m.lower_gene, m.upper_gene, true);
    EXCEPTION WHEN OTHERS THEN
      GET STACKED DIAGNOSTICS err = MESSAGE_TEXT, err_state = RETURNED_SQLSTATE;
    END;
    IF err IS NULL THEN
      COMMIT;
      PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
      BEGIN
        IF id_gen.shard_exec(src, format('SELECT count(*) FROM pg_publication WHERE pubname = %L', 'id_gen_move_' || m.move_id)) = '0' THEN
          PERFORM id_gen.run_move_step(m, 'create_publication');
        END IF;
        IF id_gen.shard_exec(m.target_shard, format('SELECT count(*) FROM pg_subscription WHERE subname = %L', 'id_gen_move_' || m.move_id)) = '0' THEN
          PERFORM id_gen.run_move_step(m, 'create_subscription');
        END IF;
        UPDATE id_gen.shard_moves
        SET phase = 'copying', updated_at = clock_timestamp(),
            target_subscription = id_gen.shard_exec(m.target_shard,
              format('SELECT oid FROM pg_subscription WHERE subname = %L', 'id_gen_move_' || m.move_id))::oid
        WHERE move_id = m.move_id AND phase = 'planned'
        RETURNING * INTO m;
        IF NOT FOUND THEN
          RAISE EXCEPTION 'the move is no longer planned (aborted in another session?)' USING ERRCODE = '55006';
        END IF;
      EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS err = MESSAGE_TEXT, err_state = RETURNED_SQLSTATE;
      END;
      IF err IS NULL THEN
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
      END IF;
    END IF;
  END IF;
  IF err IS NULL AND m.phase = 'copying' THEN
    progress_at := clock_timestamp();
    LOOP
      IF clock_timestamp() - progress_at > interval '2 min' THEN
        RAISE EXCEPTION 'id_gen: move %: the initial copy made no progress for 2 minutes (tables ready/total: %)', m.move_id, res
          USING ERRCODE = '55000',
                DETAIL = 'The move stays in phase copying; the source is still authoritative.',
                HINT = format('Check both shards'' logs (the subscription id_gen_move_%s on %s), then CALL id_gen.move_genes(%s, %s, %L) to resume or CALL id_gen.abort_move(%s).',
                              m.move_id, m.target_shard, m.lower_gene, m.upper_gene, m.target_shard, m.move_id);
      END IF;
      BEGIN
        IF (SELECT sm.phase FROM id_gen.shard_moves sm WHERE sm.move_id = m.move_id) <> 'copying' THEN
          RAISE EXCEPTION 'the move was aborted or taken over by another session' USING ERRCODE = '55006';
        END IF;
        res := id_gen.run_move_step(m, 'sync_state', 0, 10000);
        copied := id_gen.run_move_step(m, 'count_target', 0, 60000)::bigint;
        IF res IS DISTINCT FROM last_state OR copied IS DISTINCT FROM last_copied THEN
          progress_at := clock_timestamp();
          last_state := res;
          last_copied := copied;
        END IF;
        UPDATE id_gen.shard_moves SET rows_copied = copied, updated_at = clock_timestamp()
        WHERE move_id = m.move_id AND phase = 'copying';
        IF NOT FOUND THEN
          RAISE EXCEPTION 'the move is no longer copying (aborted in another session?)' USING ERRCODE = '55006';
        END IF;
      EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS err = MESSAGE_TEXT, err_state = RETURNED_SQLSTATE;
      END;
      EXIT WHEN err IS NOT NULL OR (split_part(res, '/', 1) = '0' AND split_part(res, '/', 2) <> '0');
      COMMIT;
      PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
      PERFORM pg_sleep(0.5);
    END LOOP;
    IF err IS NULL THEN
      UPDATE id_gen.shard_moves SET phase = 'catching_up', updated_at = clock_timestamp()
      WHERE move_id = m.move_id AND phase = 'copying'
      RETURNING * INTO m;
      IF NOT FOUND THEN
        RAISE EXCEPTION 'id_gen: move % is no longer copying (aborted in another session?)', m.move_id USING ERRCODE = '55006';
      END IF;
      COMMIT;
      PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    END IF;
  END IF;
  IF err IS NOT NULL THEN
    ROLLBACK;
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    SELECT * INTO m FROM id_gen.shard_moves sm WHERE sm.move_id = m.move_id;
    IF m.phase IN ('aborted', 'failed', 'done') THEN
      RAISE EXCEPTION 'id_gen: move % stopped: it is % now', m.move_id, m.phase USING ERRCODE = '55006';
    END IF;
    cleanup := id_gen.undo_move(m);
    UPDATE id_gen.shard_moves
    SET phase = CASE WHEN cleanup IS NULL THEN 'aborted' ELSE 'failed' END,
        last_error = err || coalesce(' (clean-up: ' || cleanup || ')', ''),
        finished_at = CASE WHEN cleanup IS NULL THEN clock_timestamp() END, updated_at = clock_timestamp()
    WHERE move_id = m.move_id;
    COMMIT;
    PERFORM pg_advisory_unlock(757431, m.move_id::integer);
    RAISE EXCEPTION 'id_gen: move % of genes % .. % to "%" failed while copying: %', m.move_id, m.lower_gene, m.upper_gene, m.target_shard, err
      USING ERRCODE = coalesce(err_state, '55000'),
            DETAIL = CASE WHEN cleanup IS NULL THEN 'The move was rolled back: routes, the source and its rows are unchanged, and no replication slot is left.'
                          ELSE 'Routes, the source and its rows are unchanged. Not yet cleaned up: ' || cleanup END,
            HINT = CASE WHEN cleanup IS NULL THEN 'Fix the cause and move again.'
                        ELSE format('When the shards answer again, CALL id_gen.abort_move(%s) finishes the clean-up.', m.move_id) END;
  END IF;

  -- catching up, fence, flip -----------------------------------------------------------------
  IF m.phase = 'catching_up' THEN
    deadline := clock_timestamp() + interval '10 min';
    LOOP
      lag := id_gen.run_move_step(m, 'lag', 0, 10000)::bigint;
      IF lag IS NULL THEN
        RAISE EXCEPTION 'id_gen: move %: its replication slot on "%" is gone', m.move_id, m.source_shard
          USING ERRCODE = '55000', HINT = format('CALL id_gen.abort_move(%s) and move again.', m.move_id);
      END IF;
      UPDATE id_gen.shard_moves SET lag_bytes = lag, updated_at = clock_timestamp()
      WHERE move_id = m.move_id AND phase = 'catching_up';
      IF NOT FOUND THEN
        RAISE EXCEPTION 'id_gen: move % is no longer catching up (aborted in another session?)', m.move_id USING ERRCODE = '55006';
      END IF;
      COMMIT;
      PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
      EXIT WHEN lag BETWEEN 0 AND 1048576;
      IF clock_timestamp() > deadline THEN
        RAISE EXCEPTION 'id_gen: move %: the target stays % bytes behind after 10 minutes', m.move_id, lag
          USING ERRCODE = '55000', HINT = 'The move stays in catching_up; call move_genes again later, or abort_move.';
      END IF;
      PERFORM pg_sleep(0.1);
    END LOOP;
    FOR attempt IN m.fence_attempts + 1 .. m.fence_attempts + 5 LOOP
      -- source_fenced: the source's fence may be up from here until it is lifted or cut over.
      UPDATE id_gen.shard_moves SET fence_attempts = attempt, source_fenced = true WHERE move_id = m.move_id;
      COMMIT;
      PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
      err := NULL;
      BEGIN
        t0 := clock_timestamp();
        PERFORM pg_catalog.set_config('lock_timeout', '500ms', true);
        -- abort_move holds this row while it undoes the move: never flip after an abort.
        PERFORM FROM id_gen.shard_moves sm WHERE sm.move_id = m.move_id AND sm.phase = 'catching_up' FOR UPDATE;
        IF NOT FOUND THEN
          RAISE EXCEPTION 'the move is no longer catching up (aborted in another session?)' USING ERRCODE = '55006';
        END IF;
        FOR d IN SELECT t.schema_name, t.partitioned_name, rr.lower_gene, rr.upper_gene
                 FROM id_gen.distributed_tables t CROSS JOIN id_gen.route_ranges rr
                 WHERE rr.lower_gene >= m.lower_gene AND rr.upper_gene <= m.upper_gene
                 ORDER BY 1, 2, 3 LOOP
          EXECUTE format('LOCK TABLE %I.%I IN ACCESS EXCLUSIVE MODE', d.schema_name,
                         id_gen.partition_name(d.partitioned_name, d.lower_gene, d.upper_gene));
        END LOOP;
        PERFORM id_gen.run_move_step(m, 'fence_source', attempt, 5000);
        PERFORM id_gen.run_move_step(m, 'marker', attempt, 5000);
        LOOP
          EXIT WHEN id_gen.run_move_step(m, 'await_marker', attempt, 5000) = '1';
          IF clock_timestamp() - t0 > interval '3 s' THEN
            RAISE EXCEPTION 'the target did not catch up within 3 s of the fence' USING ERRCODE = '55000';
          END IF;
          PERFORM pg_sleep(0.002);
        END LOOP;
        PERFORM id_gen.move_raise_sequences(m);
        LOCK TABLE id_gen.shard_routes IN SHARE ROW EXCLUSIVE MODE;
        UPDATE id_gen.shard_routes sr SET shard = m.target_shard, updated_at = now()
        WHERE sr.upper_gene IN (SELECT rr.upper_gene FROM id_gen.route_ranges rr
                                WHERE rr.lower_gene >= m.lower_gene AND rr.upper_gene <= m.upper_gene);
        FOR d IN SELECT t.schema_name, t.table_name, t.partitioned_name, rr.lower_gene, rr.upper_gene,
                        pg_get_userbyid(c.relowner) AS owner_name
                 FROM id_gen.distributed_tables t CROSS JOIN id_gen.route_ranges rr
                 JOIN pg_class c ON c.oid = to_regclass(format('%I.%I', t.schema_name, t.partitioned_name))
                 WHERE rr.lower_gene >= m.lower_gene AND rr.upper_gene <= m.upper_gene LOOP
          PERFORM id_gen.point_partition(d.schema_name, id_gen.partition_name(d.partitioned_name, d.lower_gene, d.upper_gene),
                                         d.table_name, d.lower_gene, d.upper_gene, m.target_shard, d.owner_name);
        END LOOP;
        UPDATE id_gen.shard_moves
        SET phase = 'cut_over', lag_bytes = 0, fence_started_at = t0, fence_ended_at = clock_timestamp(),
            updated_at = clock_timestamp(), last_error = NULL
        WHERE move_id = m.move_id AND phase = 'catching_up' RETURNING * INTO m;
      EXCEPTION WHEN OTHERS OR query_canceled THEN
        GET STACKED DIAGNOSTICS err = MESSAGE_TEXT, err_state = RETURNED_SQLSTATE;
      END;
      IF err IS NULL THEN
        COMMIT;  -- lifts the fence: waiting writers continue on the target
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        EXIT;
      END IF;
      ROLLBACK;  -- routes and foreign tables as they were; the coordinator's locks go
      PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
      unfenced := false;
      FOR i IN 1 .. 3 LOOP
        BEGIN
          PERFORM id_gen.run_move_step(m, 'unfence_source', 0, 10000);
          unfenced := true;
        EXCEPTION WHEN OTHERS OR query_canceled THEN
          GET STACKED DIAGNOSTICS res = MESSAGE_TEXT;
        END;
        EXIT WHEN unfenced;
      END LOOP;
      IF NOT unfenced THEN
        err := err || ' (lifting the fence on the source failed too: ' || res || ')';
      END IF;
      UPDATE id_gen.shard_moves
      SET last_error = format('fence attempt %s: %s', attempt, err), updated_at = clock_timestamp(),
          source_fenced = NOT unfenced
      WHERE move_id = m.move_id;
      COMMIT;
      PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
      IF NOT unfenced OR err_state IN ('57014', '55006') THEN
        -- Cancelled, aborted elsewhere, or the source keeps refusing to lift: no retry.
        PERFORM pg_advisory_unlock(757431, m.move_id::integer);
        RAISE EXCEPTION 'id_gen: move %: %', m.move_id, err
          USING ERRCODE = coalesce(err_state, '55000'),
                DETAIL = CASE WHEN unfenced THEN 'The fence was lifted; routes are unchanged.'
                              ELSE 'Routes are unchanged, but the source still refuses direct writes of these genes (id_gen.moves.source_fenced).' END,
                HINT = format('CALL id_gen.move_genes(%s, %s, %L) tries again; CALL id_gen.abort_move(%s) rolls back and lifts the fence.',
                              m.lower_gene, m.upper_gene, m.target_shard, m.move_id);
      END IF;
      PERFORM pg_sleep(0.5);
    END LOOP;
    IF m.phase <> 'cut_over' THEN
      PERFORM pg_advisory_unlock(757431, m.move_id::integer);
      RAISE EXCEPTION 'id_gen: move %: could not cut over: %', m.move_id, err
        USING ERRCODE = coalesce(err_state, '55000'),
              DETAIL = 'Each attempt lifted its fence again; the source is still authoritative and the move stays in catching_up.',
              HINT = format('CALL id_gen.move_genes(%s, %s, %L) tries again; CALL id_gen.abort_move(%s) rolls back.',
                            m.lower_gene, m.upper_gene, m.target_shard, m.move_id);
    END IF;
  END IF;

  -- cut over: the source lets go -------------------------------------------------------------
  IF m.phase = 'cut_over' THEN
    err := NULL;
    BEGIN
      PERFORM id_gen.run_move_step(m, 'detach_source', 0, 30000);
      PERFORM id_gen.place_ranges(m.source_shard, m.lower_gene, m.upper_gene, false);
      PERFORM id_gen.run_move_step(m, 'drop_subscription', 0, 30000);
      PERFORM id_gen.run_move_step(m, 'drop_publication', 0, 30000);
      IF NOT m.keep_source THEN
        PERFORM id_gen.run_move_step(m, 'drop_source', 0, 60000);
      END IF;
      PERFORM id_gen.run_move_step(m, 'forget_markers', 0, 10000);
      UPDATE id_gen.shard_moves SET phase = 'done', finished_at = clock_timestamp(), updated_at = clock_timestamp(),
                                    source_fenced = false, last_error = NULL
      WHERE move_id = m.move_id AND phase = 'cut_over' RETURNING * INTO m;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
      GET STACKED DIAGNOSTICS err = MESSAGE_TEXT, err_state = RETURNED_SQLSTATE;
    END;
    IF err IS NOT NULL THEN
      ROLLBACK;
      UPDATE id_gen.shard_moves SET last_error = 'cut over; cleaning up: ' || err, updated_at = clock_timestamp()
      WHERE move_id = m.move_id;
      COMMIT;
      PERFORM pg_advisory_unlock(757431, m.move_id::integer);
      RAISE EXCEPTION 'id_gen: move % has cut over (the target serves genes % .. %), but cleaning up failed: %',
                      m.move_id, m.lower_gene, m.upper_gene, err
        USING ERRCODE = err_state,
              DETAIL = 'The source''s partitions, the subscription or the publication may still exist; the source refuses direct writes of these genes.',
              HINT = format('CALL id_gen.move_genes(%s, %s, %L) again finishes the clean-up.', m.lower_gene, m.upper_gene, m.target_shard);
    END IF;
    COMMIT;
    PERFORM pg_advisory_unlock(757431, m.move_id::integer);
    RAISE NOTICE 'id_gen: move % done: genes % .. % are on %; writes were fenced for % ms',
      m.move_id, m.lower_gene, m.upper_gene, m.target_shard,
      round(extract(epoch FROM m.fence_ended_at - m.fence_started_at) * 1000, 1);
  END IF;
END $$;
COMMENT ON PROCEDURE id_gen.move_genes(integer, integer, text, boolean, boolean) IS 'Moves the rows of every distributed table in genes lower_gene .. upper_gene (whole route ranges of one shard) to target_shard over logical replication, fencing only those genes for the cut-over; commits between phases (run it outside a transaction block). dry_run prints the steps and their SQL; keep_source keeps the source''s detached partitions (renamed *_moved_<id>). Re-running it resumes an unfinished move. Superuser only.';
REVOKE EXECUTE ON PROCEDURE id_gen.move_genes(integer, integer, text, boolean, boolean) FROM PUBLIC;

CREATE PROCEDURE id_gen.abort_move(move_id bigint, force boolean DEFAULT false)
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
  ELSIF m.phase IN ('done', 'aborted') THEN
    RAISE EXCEPTION 'id_gen: move % is % already', move_id, m.phase USING ERRCODE = '55000';
  ELSIF m.phase = 'cut_over' THEN
    RAISE EXCEPTION 'id_gen: move % has cut over: the target is authoritative', move_id
      USING ERRCODE = '55000',
            HINT = format('CALL id_gen.move_genes(%s, %s, %L) finishes it; to undo it, move the genes back afterwards.',
                          m.lower_gene, m.upper_gene, m.target_shard);
  END IF;
  cleanup := id_gen.undo_move(m);
  -- force: give up on what only the target still holds (a target that is gone for good);
  -- what the source holds (fence, slot, publication) must be gone in any case.
  source_left := (SELECT string_agg(part, '; ') FROM regexp_split_to_table(cleanup, '; ') part
                  WHERE part ~ '^(unfence_source|drop_publication|replication slot|source markers)');
  UPDATE id_gen.shard_moves sm
  SET phase = CASE WHEN cleanup IS NULL OR (force AND source_left IS NULL) THEN 'aborted' ELSE 'failed' END,
      last_error = coalesce('abort incomplete: ' || cleanup, sm.last_error),
      finished_at = CASE WHEN cleanup IS NULL OR (force AND source_left IS NULL) THEN clock_timestamp() END,
      updated_at = clock_timestamp()
  WHERE sm.move_id = m.move_id;
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

-- Id continuity for shards whose sequences are local: the target's high-water mark goes
-- above the source's, so that ids the target issues for the moved genes from new
-- segments do not repeat the source's. (Authority-backed sequences need nothing.)
CREATE FUNCTION id_gen.move_raise_sequences(m id_gen.shard_moves) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  seq text;
  high text;
BEGIN
  FOR seq IN SELECT DISTINCT t.sequence FROM id_gen.distributed_tables t WHERE t.sequence IS NOT NULL LOOP
    high := id_gen.shard_exec(m.source_shard,
      format('SELECT max_id FROM id_gen.sequences WHERE name = %L AND authority IS NULL', seq), 5000);
    IF high IS NOT NULL THEN
      PERFORM id_gen.shard_exec(m.target_shard,
        format('UPDATE id_gen.sequences SET max_id = greatest(max_id, %s) WHERE name = %L AND authority IS NULL', high::bigint, seq), 5000);
    END IF;
  END LOOP;
END $$;
COMMENT ON FUNCTION id_gen.move_raise_sequences(id_gen.shard_moves) IS 'Raises the target''s high-water mark of each local sequence of distributed tables above the source''s.';
REVOKE EXECUTE ON FUNCTION id_gen.move_raise_sequences(id_gen.shard_moves) FROM PUBLIC;
