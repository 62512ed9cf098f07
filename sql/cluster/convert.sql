-- Conversions of distributed tables to the newer layouts, online: a per_range table to
-- per_shard (convert_to_per_shard, the coordinator only) and a per_shard table's shards to
-- the layout by ownership (convert_to_by_ownership, below; abort_conversion stops one that
-- has swapped on no shard yet).
--
-- Conversion of a per_range distributed table to the per_shard layout (docs/design.md §11.7),
-- online: CALL id_gen.convert_to_per_shard(tbl). Only the coordinator changes: the shards'
-- tables are the same in both layouts (one partition per owned route range), so no row moves.
-- Code only (CREATE OR REPLACE).
--
-- The steps, each committed before the next:
--   1. one short transaction: the new partitioned table, PARTITION BY HASH (id
--      id_gen.gene_route_ops), with one foreign table per shard that owns genes, is built
--      under a name of its own (<table>_per_shard); then, under ACCESS EXCLUSIVE on the old
--      one (its statements wait; lock_timeout 10 s), the old one is renamed
--      <table>_per_range, the new one takes its name, a view over it (a table whose ids a
--      sequence computes) is pointed at it, and the catalog says per_shard. Statements that
--      waited go on through the old tree, which still reaches the same shards' partitions;
--      later ones, and prepared ones (re-planned by name), through the new one.
--   2. the old tree is dropped in batches of range partitions (each batch a transaction of
--      its own, so that the lock table never holds thousands of them), then its parent.
-- Invariants:
--   * No row moves and none is lost: every statement, before or after the swap, reaches the
--     shards' partitions of the same genes.
--   * Re-running the CALL after an interruption finishes it: step 1 is one transaction, and
--     step 2 starts from what is left of the old tree.
--   * Nothing else may depend on the old partitioned table (a view of the user's, say):
--     refused before anything changes (2BP01), as distribute_table refuses it; nor may it
--     have row security, policies or triggers here (0A000), which the new one would lack.
--   * Only a table that bears the old tree's comment (id_gen.old_tree_comment) is dropped.

-- The comment that marks the old partitioned table of a conversion (the only table it drops).
CREATE OR REPLACE FUNCTION id_gen.old_tree_comment(schema_name name, table_name name) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN pg_catalog.format('id_gen: the range partitions of %I.%I before its conversion to per_shard, dropped by id_gen.convert_to_per_shard',
                         schema_name, table_name);
COMMENT ON FUNCTION id_gen.old_tree_comment(name, name) IS 'The comment id_gen.convert_to_per_shard gives the old partitioned table of a conversion; it drops only a table that bears it.';
REVOKE EXECUTE ON FUNCTION id_gen.old_tree_comment(name, name) FROM PUBLIC;

-- The distributed table that a conversion's CALL names (tbl: the table or its partitioned
-- table), once its arguments and the caller are checked (22004, 22023, 42501; 42809 when tbl
-- is not distributed, with a hint to distribute it with `layout`).
CREATE OR REPLACE FUNCTION id_gen.table_to_convert(tbl regclass, batch integer, layout text) RETURNS id_gen.distributed_tables
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  d id_gen.distributed_tables;
BEGIN
  IF tbl IS NULL OR batch IS NULL OR layout IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "%" must not be NULL',
                    CASE WHEN tbl IS NULL THEN 'tbl' WHEN batch IS NULL THEN 'batch' ELSE 'layout' END
      USING ERRCODE = '22004';
  ELSIF batch < 1 THEN
    RAISE EXCEPTION 'id_gen: batch must be at least 1 (it is %)', batch USING ERRCODE = '22023';
  END IF;
  PERFORM id_gen.require_superuser('convert distributed tables');
  SELECT t.* INTO d
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  JOIN id_gen.distributed_tables t ON t.schema_name = n.nspname AND (t.table_name = c.relname OR t.partitioned_name = c.relname)
  WHERE c.oid = tbl;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'id_gen: % is not a distributed table', tbl
      USING ERRCODE = '42809', HINT = format('Distribute it with layout => %L instead: SELECT id_gen.distribute_table(...).', layout);
  END IF;
  RETURN d;
END $$;
COMMENT ON FUNCTION id_gen.table_to_convert(regclass, integer, text) IS 'The row of id_gen.distributed_tables of the table a conversion names, once the arguments and the caller (superuser) are checked; 42809 when it is not distributed.';
REVOKE EXECUTE ON FUNCTION id_gen.table_to_convert(regclass, integer, text) FROM PUBLIC;

CREATE OR REPLACE PROCEDURE id_gen.convert_to_per_shard(tbl regclass, batch integer DEFAULT 200)
LANGUAGE plpgsql
AS $$
DECLARE
  d id_gen.distributed_tables;
  nd id_gen.distributed_tables;
  sch name;
  parts regclass;
  old_name name;
  new_name name;
  old_tree regclass;
  owner_name name;
  shard text;
  dependents text;
  part text;
  n integer;
  dropped integer := 0;
BEGIN
  -- (No SET clause: a procedure with one cannot COMMIT. The path is pinned for each
  -- transaction instead, and every name below is qualified.)
  PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
  d := id_gen.table_to_convert(tbl, batch, 'per_shard');
  sch := d.schema_name;
  parts := pg_catalog.format('%I.%I', d.schema_name, d.partitioned_name)::regclass;
  old_name := id_gen.fit_name(d.partitioned_name, '_per_range');
  new_name := id_gen.fit_name(d.partitioned_name, '_per_shard');

  IF d.layout = 'per_shard' AND pg_catalog.obj_description(pg_catalog.to_regclass(pg_catalog.format('%I.%I', sch, old_name)), 'pg_class')
                               IS DISTINCT FROM id_gen.old_tree_comment(d.schema_name, d.table_name) THEN
    RAISE NOTICE 'id_gen: %.% is laid out per_shard already', pg_catalog.quote_ident(sch), pg_catalog.quote_ident(d.table_name);
    RETURN;
  ELSIF d.layout = 'per_range' THEN
    PERFORM id_gen.quiet_ddl();
    LOCK TABLE id_gen.shard_routes IN SHARE MODE;
    PERFORM id_gen.refuse_during_operations('convert a distributed table');
    PERFORM id_gen.check_routes_for_distribution();
    IF pg_catalog.to_regclass(pg_catalog.format('%I.%I', sch, old_name)) IS NOT NULL
       OR pg_catalog.to_regclass(pg_catalog.format('%I.%I', sch, new_name)) IS NOT NULL THEN
      RAISE EXCEPTION 'id_gen: relation %.% or %.% already exists', pg_catalog.quote_ident(sch), pg_catalog.quote_ident(old_name),
                      pg_catalog.quote_ident(sch), pg_catalog.quote_ident(new_name)
        USING ERRCODE = '42P07', HINT = 'The conversion builds the new table under the one name and keeps the old one under the other until it is dropped; rename that relation.';
    END IF;
    -- Views other than id_gen's own over the table would keep reading the old tree.
    SELECT pg_catalog.string_agg(DISTINCT rw.ev_class::regclass::text, ', ') INTO dependents
    FROM pg_catalog.pg_depend dep JOIN pg_catalog.pg_rewrite rw ON rw.oid = dep.objid
    WHERE dep.classid = 'pg_catalog.pg_rewrite'::regclass AND dep.refclassid = 'pg_catalog.pg_class'::regclass
      AND dep.refobjid = parts AND rw.ev_class <> parts
      AND (d.sequence IS NULL OR rw.ev_class <> pg_catalog.format('%I.%I', d.schema_name, d.table_name)::regclass);
    IF dependents IS NOT NULL THEN
      RAISE EXCEPTION 'id_gen: other objects depend on %: %', parts, dependents
        USING ERRCODE = '2BP01', HINT = 'Drop those views, convert the table, then create them again.';
    END IF;
    -- What the new table would not carry: row security and user triggers here.
    IF EXISTS (SELECT FROM pg_catalog.pg_class c WHERE c.oid = parts AND (c.relrowsecurity OR c.relforcerowsecurity))
       OR EXISTS (SELECT FROM pg_catalog.pg_policy pol WHERE pol.polrelid = parts)
       OR EXISTS (SELECT FROM pg_catalog.pg_trigger t WHERE t.tgrelid = parts AND NOT t.tgisinternal) THEN
      RAISE EXCEPTION 'id_gen: % has row security, policies or triggers on the coordinator, which the conversion does not carry over', parts
        USING ERRCODE = '0A000', HINT = 'Remove them, convert the table, then create them again on the new table.';
    END IF;
    -- The new table and its partitions, under a name of their own; nobody reads them yet.
    SELECT pg_catalog.pg_get_userbyid(c.relowner) INTO owner_name FROM pg_catalog.pg_class c WHERE c.oid = parts;
    EXECUTE pg_catalog.format('CREATE TABLE %I.%I (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING COMMENTS '
                              'INCLUDING STORAGE INCLUDING COMPRESSION) PARTITION BY HASH (%I id_gen.gene_route_ops)',
                              sch, new_name, parts, d.id_column);
    EXECUTE pg_catalog.format('ALTER TABLE %I.%I OWNER TO %I', sch, new_name, owner_name);
    PERFORM id_gen.copy_grants(parts, pg_catalog.format('%I.%I', sch, new_name)::regclass);
    EXECUTE pg_catalog.format('COMMENT ON TABLE %I.%I IS %L', sch, new_name, pg_catalog.obj_description(parts, 'pg_class'));
    nd := d;
    nd.partitioned_name := new_name;
    nd.layout := 'per_shard';
    FOR shard IN SELECT DISTINCT r.shard FROM id_gen.shard_routes r ORDER BY 1 LOOP
      PERFORM id_gen.slot_partition(nd, shard);
    END LOOP;
    -- The swap: statements of the table wait for it (milliseconds). The view first, as its
    -- statements lock it before the table (the other order would deadlock with them).
    PERFORM pg_catalog.set_config('lock_timeout', '10s', true);
    IF d.sequence IS NOT NULL THEN
      EXECUTE pg_catalog.format('LOCK TABLE %I.%I IN ACCESS EXCLUSIVE MODE', d.schema_name, d.table_name);
    END IF;
    EXECUTE pg_catalog.format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', parts);
    EXECUTE pg_catalog.format('ALTER TABLE %s RENAME TO %I', parts, old_name);
    EXECUTE pg_catalog.format('ALTER TABLE %I.%I RENAME TO %I', sch, new_name, d.partitioned_name);
    -- The old tree says whose it is: only a table with this comment is dropped below.
    EXECUTE pg_catalog.format('COMMENT ON TABLE %I.%I IS %L', sch, old_name, id_gen.old_tree_comment(d.schema_name, d.table_name));
    IF d.sequence IS NOT NULL THEN
      -- (The view keeps its options, grants, defaults and trigger.)
      EXECUTE pg_catalog.format('CREATE OR REPLACE VIEW %I.%I%s AS SELECT * FROM %I.%I', sch, d.table_name,
        coalesce((SELECT ' WITH (' || pg_catalog.array_to_string(c.reloptions, ', ') || ')' FROM pg_catalog.pg_class c
                  WHERE c.oid = pg_catalog.format('%I.%I', sch, d.table_name)::regclass AND c.reloptions IS NOT NULL), ''),
        sch, d.partitioned_name);
    END IF;
    UPDATE id_gen.distributed_tables t SET layout = 'per_shard'
    WHERE (t.schema_name, t.table_name) = (d.schema_name, d.table_name);
    RAISE NOTICE 'id_gen: %.% is laid out per_shard now; dropping the old range partitions (%.%)',
      pg_catalog.quote_ident(sch), pg_catalog.quote_ident(d.table_name), pg_catalog.quote_ident(sch), pg_catalog.quote_ident(old_name);
    COMMIT;
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
  END IF;

  -- The old tree goes in batches (a resumed CALL starts here).
  LOOP
    PERFORM id_gen.quiet_ddl();
    old_tree := pg_catalog.to_regclass(pg_catalog.format('%I.%I', sch, old_name));
    EXIT WHEN old_tree IS NULL;
    IF pg_catalog.obj_description(old_tree, 'pg_class') IS DISTINCT FROM id_gen.old_tree_comment(d.schema_name, d.table_name) THEN
      RAISE EXCEPTION 'id_gen: % is not the old partitioned table of a conversion of %.%', old_tree,
                      pg_catalog.quote_ident(sch), pg_catalog.quote_ident(d.table_name)
        USING ERRCODE = '42P07', HINT = 'id_gen drops only what its conversion left; rename that relation.';
    END IF;
    n := 0;
    FOR part IN SELECT pg_catalog.quote_ident(ns.nspname) || '.' || pg_catalog.quote_ident(c.relname)
               FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
               JOIN pg_catalog.pg_namespace ns ON ns.oid = c.relnamespace
               WHERE i.inhparent = old_tree ORDER BY c.relname LIMIT batch LOOP
      EXECUTE 'DROP TABLE ' || part;
      n := n + 1;
    END LOOP;
    IF n = 0 THEN
      EXECUTE pg_catalog.format('DROP TABLE %s', old_tree);
    END IF;
    dropped := dropped + n;
    COMMIT;
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
  END LOOP;
  RAISE NOTICE 'id_gen: %.% converted to per_shard (% old range partitions dropped)',
    pg_catalog.quote_ident(sch), pg_catalog.quote_ident(d.table_name), dropped;
END $$;
COMMENT ON PROCEDURE id_gen.convert_to_per_shard(regclass, integer) IS 'Converts a per_range distributed table to the per_shard layout online (coordinator only; the shards'' tables stay as they are): builds the hash-partitioned table with one foreign table per shard, swaps it in under a short ACCESS EXCLUSIVE lock, then drops the old range partitions in batches of batch, each in a transaction of its own (run it outside a transaction block; a CALL that was interrupted finishes it). Superuser only.';
REVOKE EXECUTE ON PROCEDURE id_gen.convert_to_per_shard(regclass, integer) FROM PUBLIC;

-- Conversion of a per_shard table's shards to the layout by ownership (docs/design.md §11.8),
-- online: CALL id_gen.convert_to_by_ownership(tbl). The coordinator's relations stay as they
-- are (its foreign table of each shard names the table, which becomes the view of the owned
-- rows there); each shard's partitioned table becomes a table of rows behind that view, one
-- shard after the other (the steps: sql/cluster/shard/convert.sql):
--   1. one short transaction here: the table is marked (distributed_tables.converting_since),
--      so route changes, moves, splits and other distributions wait (55006) until it is done;
--   2. per shard that holds the table (one session at a time: a session advisory lock per
--      table): begin (the table of rows, and the triggers that log every write and make it
--      there too), copy in batches of `batch` rows, compare the logged rows with their copies
--      (repairing those a REPEATABLE READ writer missed) until a pass takes less than a
--      batch, finish (once the snapshots older than it are gone, the swap, under a lock of
--      the table there that its statements wait for, at most 2 s; 55P03, also while a write
--      that missed its copy is left, sends it back to the comparison, up to 10 attempts),
--      then drop the old partitions in batches of 200; a copy call that met a writer's lock
--      or a deadlock is called again; each call a transaction here too;
--   3. one short transaction here: shard_layout becomes by_ownership, with the shards'
--      definition of a table of rows, and the mark goes.
-- Invariants:
--   * No row moves between shards and none is lost (the shard's steps keep every write).
--   * Re-running the CALL after an interruption finishes it: every shard step says what it
--     finds, and a shard converted already is skipped.
--   * Between the shards' swaps, a shard's push (the supervisor's) of the same ranges to a
--     shard converted already records them as data (shard_apply_ranges hands the call to
--     shard_apply_owned_ranges there).

-- The shards' CREATE TABLE of the table of rows of d, from its partitioned definition
-- (what distribute_table(..., layout => 'by_ownership') writes).
CREATE OR REPLACE FUNCTION id_gen.owned_rows_definition(d id_gen.distributed_tables) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  head text := format('CREATE TABLE %I.%I (', d.schema_name, d.table_name);
  tail text := format(') PARTITION BY RANGE (%I)', d.id_column);
BEGIN
  IF d.shard_layout = 'by_ownership' THEN
    RETURN d.shard_definition;
  ELSIF left(d.shard_definition, length(head)) <> head OR right(d.shard_definition, length(tail)) <> tail THEN
    RAISE EXCEPTION 'id_gen: the shards'' definition of %.% is not one id_gen wrote', quote_ident(d.schema_name), quote_ident(d.table_name)
      USING ERRCODE = '55000', DETAIL = d.shard_definition,
            HINT = 'id_gen.distributed_tables.shard_definition should be the CREATE TABLE ... PARTITION BY RANGE that distribute_table wrote.';
  END IF;
  RETURN format('CREATE TABLE %I.%I (', d.schema_name, id_gen.fit_name(d.shard_stem, '_rows'))
         || substr(d.shard_definition, length(head) + 1, length(d.shard_definition) - length(head) - length(tail)) || ')';
END $$;
COMMENT ON FUNCTION id_gen.owned_rows_definition(id_gen.distributed_tables) IS 'The shards'' CREATE TABLE of the table of rows of a distributed table laid out by ownership, from its partitioned definition (55000 for a definition id_gen did not write).';
REVOKE EXECUTE ON FUNCTION id_gen.owned_rows_definition(id_gen.distributed_tables) FROM PUBLIC;

-- A conversion's first call of a shard step (id_gen.remote_call): a shard without it (older
-- than 0.7.10) gets 55000 naming it.
CREATE OR REPLACE FUNCTION id_gen.remote_conversion_call(shard text, fn text, args text[]) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  msg text;
BEGIN
  RETURN id_gen.remote_call(shard, fn, args, 60000);
EXCEPTION WHEN undefined_function THEN
  GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT;
  RAISE EXCEPTION 'id_gen: shard "%" has no id_gen 0.7.10 or later', shard
    USING ERRCODE = '55000', DETAIL = 'On the shard: ' || msg,
          HINT = 'Run ALTER EXTENSION id_gen UPDATE on the shard, then the same CALL again.';
END $$;
COMMENT ON FUNCTION id_gen.remote_conversion_call(text, text, text[]) IS 'Runs a shard step of id_gen.convert_to_by_ownership (id_gen.remote_call, 60 s at most); 55000 naming the shard when it has no such function (id_gen older than 0.7.10 there).';
REVOKE EXECUTE ON FUNCTION id_gen.remote_conversion_call(text, text, text[]) FROM PUBLIC;

-- The session lock of a table's conversion: one session converts (or aborts) a table at a
-- time (a second one's copy could run beside the first one's swap). A session lock, so that
-- it outlives the COMMITs of the CALL; one that failed keeps it until the session calls
-- again (it is taken only when not held already) or ends.
CREATE OR REPLACE FUNCTION id_gen.take_conversion_session_lock(d id_gen.distributed_tables) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  key integer := hashtext(format('%I.%I', d.schema_name, d.table_name));
BEGIN
  IF NOT EXISTS (SELECT FROM pg_locks l
                 WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid() AND l.granted AND l.objsubid = 2
                   AND l.classid = id_gen.conversion_session_lock_key()::oid AND l.objid = key::oid)
     AND NOT pg_try_advisory_lock(id_gen.conversion_session_lock_key(), key) THEN
    RAISE EXCEPTION 'id_gen: another session converts %.%', quote_ident(d.schema_name), quote_ident(d.table_name)
      USING ERRCODE = '55006', HINT = 'Wait for its CALL to end, or end that session; then CALL again.';
  END IF;
END $$;
COMMENT ON FUNCTION id_gen.take_conversion_session_lock(id_gen.distributed_tables) IS 'Takes the session lock of a table''s conversion to the layout by ownership unless this session holds it (55006 when another one does).';
REVOKE EXECUTE ON FUNCTION id_gen.take_conversion_session_lock(id_gen.distributed_tables) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.release_conversion_session_lock(d id_gen.distributed_tables) RETURNS void
LANGUAGE sql STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  SELECT pg_catalog.pg_advisory_unlock(id_gen.conversion_session_lock_key(),
                                       pg_catalog.hashtext(pg_catalog.format('%I.%I', d.schema_name, d.table_name)));
END;
COMMENT ON FUNCTION id_gen.release_conversion_session_lock(id_gen.distributed_tables) IS 'Gives back the session lock of a table''s conversion.';
REVOKE EXECUTE ON FUNCTION id_gen.release_conversion_session_lock(id_gen.distributed_tables) FROM PUBLIC;

CREATE OR REPLACE PROCEDURE id_gen.convert_to_by_ownership(tbl regclass, batch integer DEFAULT 10000)
LANGUAGE plpgsql
AS $$
DECLARE
  d id_gen.distributed_tables;
  definition text;
  shard text;
  state text;
  after_id text;
  args text[];
  n integer;
  calls integer;
  dropped integer;
  msg text;
  t0 timestamptz;
  synced integer[];
  repaired bigint;
BEGIN
  -- (No SET clause, as above.)
  PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
  d := id_gen.table_to_convert(tbl, batch, 'by_ownership');
  IF d.layout <> 'per_shard' THEN
    RAISE EXCEPTION 'id_gen: %.% is laid out %; only a per_shard table converts to the layout by ownership',
                    pg_catalog.quote_ident(d.schema_name), pg_catalog.quote_ident(d.table_name), d.layout
      USING ERRCODE = '0A000', HINT = 'Convert it to per_shard first: CALL id_gen.convert_to_per_shard(...).';
  ELSIF d.shard_layout = 'by_ownership' AND d.converting_since IS NULL THEN
    RAISE NOTICE 'id_gen: %.% is laid out by ownership already', pg_catalog.quote_ident(d.schema_name), pg_catalog.quote_ident(d.table_name);
    RETURN;
  END IF;
  definition := id_gen.owned_rows_definition(d);
  IF d.converting_since IS NULL THEN
    -- What would stop it on a shard stops it here, before the table is marked.
    FOR shard IN SELECT p.shard FROM id_gen.shard_placements p
                 WHERE (p.schema_name, p.table_name) = (d.schema_name, d.table_name) ORDER BY p.shard LOOP
      PERFORM id_gen.remote_conversion_call(shard, 'shard_check_owned_conversion',
                                            ARRAY[d.schema_name::text, d.table_name::text, d.id_column::text, d.shard_stem::text]);
    END LOOP;
    LOCK TABLE id_gen.shard_routes IN SHARE MODE;
    PERFORM id_gen.refuse_during_operations('convert a distributed table');
    UPDATE id_gen.distributed_tables t SET converting_since = pg_catalog.now()
    WHERE (t.schema_name, t.table_name) = (d.schema_name, d.table_name);
    COMMIT;
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
  END IF;

  -- One session converts a table at a time (a session lock: it outlives the COMMITs below).
  PERFORM id_gen.take_conversion_session_lock(d);
  FOR shard IN SELECT p.shard FROM id_gen.shard_placements p
               WHERE (p.schema_name, p.table_name) = (d.schema_name, d.table_name) ORDER BY p.shard LOOP
    t0 := pg_catalog.clock_timestamp();
    args := ARRAY[d.schema_name::text, d.table_name::text, d.id_column::text, d.shard_stem::text];
    state := id_gen.remote_conversion_call(shard, 'shard_begin_owned_conversion', args);
    IF state = 'copying' THEN
      -- (Each call a transaction here too: a long conversion holds no snapshot here.)
      after_id := '-1';
      calls := 0;
      LOOP
        -- (A copy that met a writer's lock for 2 s, or a deadlock with one, is called again.)
        FOR attempt IN 1 .. 10 LOOP
          BEGIN
            after_id := id_gen.remote_call(shard, 'shard_copy_owned_rows', args || ARRAY[after_id, batch::text], 600000);
            EXIT;
          EXCEPTION WHEN deadlock_detected OR lock_not_available THEN
            IF attempt = 10 THEN
              RAISE;
            END IF;
            PERFORM pg_catalog.pg_sleep(0.05 * attempt);
          END;
        END LOOP;
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        EXIT WHEN after_id = 'done';
        calls := calls + 1;
        IF calls % 20 = 0 THEN
          RAISE NOTICE 'id_gen: shard "%": %.% copied up to gene %', shard, pg_catalog.quote_ident(d.schema_name),
                       pg_catalog.quote_ident(d.table_name), after_id::bigint >> 47;
        END IF;
      END LOOP;
      repaired := 0;
      FOR attempt IN 1 .. 10 LOOP
        -- The writes logged meanwhile, compared with their copies, until a pass takes less
        -- than a batch (at most 1,000 passes: under writes faster than that, the swap
        -- refuses while a missed one is left, and this comes back).
        FOR pass IN 1 .. 1000 LOOP
          BEGIN
            synced := id_gen.remote_call(shard, 'shard_sync_converted_changes', args || batch::text, 600000)::integer[];
          EXCEPTION WHEN deadlock_detected OR lock_not_available OR unique_violation THEN
            -- (It met a writer of the same rows; nothing was taken: the next pass takes them.)
            synced := ARRAY[batch, 0];
            PERFORM pg_catalog.pg_sleep(0.05);
          END;
          COMMIT;
          PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
          repaired := repaired + synced[2];
          EXIT WHEN synced[1] < batch;
        END LOOP;
        BEGIN
          -- (Statements of the table there wait at most 2 s for the swap's lock.)
          state := id_gen.remote_call(shard, 'shard_finish_owned_conversion', args || ARRAY[definition, '2000'], 120000);
          EXIT;
        EXCEPTION WHEN deadlock_detected OR lock_not_available THEN
          IF attempt = 10 THEN
            GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT;
            RAISE EXCEPTION 'id_gen: shard "%" could not swap %.% in 10 attempts', shard,
                            pg_catalog.quote_ident(d.schema_name), pg_catalog.quote_ident(d.table_name)
              USING ERRCODE = '55P03', DETAIL = 'On the shard: ' || msg,
                    HINT = 'A long transaction uses the table there, holds a snapshot older than the copy, or keeps writing rows whose copies it misses (REPEATABLE READ). Nothing is lost; the same CALL copies the rows again and goes on.';
          END IF;
          PERFORM pg_catalog.pg_sleep(0.1 * attempt);
        END;
      END LOOP;
      RAISE NOTICE 'id_gen: shard "%": %.% %, in % ms (% copies repaired)', shard,
        pg_catalog.quote_ident(d.schema_name), pg_catalog.quote_ident(d.table_name), state,
        (extract(epoch FROM pg_catalog.clock_timestamp() - t0) * 1000)::bigint, repaired;
    END IF;
    IF state <> 'absent' THEN
      dropped := 0;
      LOOP
        n := id_gen.remote_call(shard, 'shard_drop_converted_partitions',
                                ARRAY[d.schema_name::text, d.table_name::text, d.shard_stem::text, '200'], 120000)::integer;
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        EXIT WHEN n = 0;
        dropped := dropped + n;
      END LOOP;
      IF dropped > 0 THEN
        RAISE NOTICE 'id_gen: shard "%": the old table of %.% dropped (% relations)', shard,
          pg_catalog.quote_ident(d.schema_name), pg_catalog.quote_ident(d.table_name), dropped;
      END IF;
    END IF;
  END LOOP;

  UPDATE id_gen.distributed_tables t
  SET shard_layout = 'by_ownership', shard_definition = definition, converting_since = NULL
  WHERE (t.schema_name, t.table_name) = (d.schema_name, d.table_name);
  COMMIT;
  PERFORM id_gen.release_conversion_session_lock(d);
  RAISE NOTICE 'id_gen: %.% is laid out by ownership on its shards now', pg_catalog.quote_ident(d.schema_name),
    pg_catalog.quote_ident(d.table_name);
END $$;
COMMENT ON PROCEDURE id_gen.convert_to_by_ownership(regclass, integer) IS 'Converts the shards'' tables of a per_shard distributed table to the layout by ownership online (one table of rows behind a view of the owned rows; the coordinator''s relations stay): on each shard in turn, copies the rows in batches of batch while triggers make every write reach the copy too, then swaps the view in under a short lock of the table there and drops the old partitions. Route changes, moves and splits wait meanwhile (55006); a CALL that was interrupted finishes it (run it outside a transaction block). Superuser only.';
REVOKE EXECUTE ON PROCEDURE id_gen.convert_to_by_ownership(regclass, integer) FROM PUBLIC;

-- Stops a conversion to the layout by ownership that has swapped on no shard yet: each
-- shard's triggers, table of rows and log entries go (the partitioned tables never stopped
-- taking the writes), and the table is per_shard again, no longer marked. Once a shard has
-- swapped, only finishing is possible (55000).
CREATE OR REPLACE PROCEDURE id_gen.abort_conversion(tbl regclass)
LANGUAGE plpgsql
AS $$
DECLARE
  d id_gen.distributed_tables;
  shard text;
  state text;
  args text[];
  converted text[] := '{}';
  aborted integer := 0;
BEGIN
  -- (No SET clause: a procedure with one cannot COMMIT.)
  PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
  d := id_gen.table_to_convert(tbl, 1, 'by_ownership');
  IF d.converting_since IS NULL THEN
    RAISE NOTICE 'id_gen: no conversion of %.% is under way', pg_catalog.quote_ident(d.schema_name), pg_catalog.quote_ident(d.table_name);
    RETURN;
  END IF;
  -- The session lock of the conversions: no CALL converts the table meanwhile.
  PERFORM id_gen.take_conversion_session_lock(d);
  args := ARRAY[d.schema_name::text, d.table_name::text, d.shard_stem::text];
  FOR shard IN SELECT p.shard FROM id_gen.shard_placements p
               WHERE (p.schema_name, p.table_name) = (d.schema_name, d.table_name) ORDER BY p.shard LOOP
    IF id_gen.remote_conversion_call(shard, 'shard_owned_conversion_state', args) = 'converted' THEN
      converted := converted || shard;
    END IF;
  END LOOP;
  IF cardinality(converted) > 0 THEN
    RAISE EXCEPTION 'id_gen: %.% is laid out by ownership on % already; a conversion cannot be undone there',
                    pg_catalog.quote_ident(d.schema_name), pg_catalog.quote_ident(d.table_name), pg_catalog.array_to_string(converted, ', ')
      USING ERRCODE = '55000', HINT = 'Finish it instead: CALL id_gen.convert_to_by_ownership(...). Nothing was changed.';
  END IF;
  FOR shard IN SELECT p.shard FROM id_gen.shard_placements p
               WHERE (p.schema_name, p.table_name) = (d.schema_name, d.table_name) ORDER BY p.shard LOOP
    state := id_gen.remote_conversion_call(shard, 'shard_abort_owned_conversion', args);
    IF state = 'aborted' THEN
      aborted := aborted + 1;
    END IF;
  END LOOP;
  UPDATE id_gen.distributed_tables t SET converting_since = NULL
  WHERE (t.schema_name, t.table_name) = (d.schema_name, d.table_name);
  COMMIT;
  PERFORM id_gen.release_conversion_session_lock(d);
  RAISE NOTICE 'id_gen: the conversion of %.% is aborted (undone on % shard(s)); it is laid out per_shard',
    pg_catalog.quote_ident(d.schema_name), pg_catalog.quote_ident(d.table_name), aborted;
END $$;
COMMENT ON PROCEDURE id_gen.abort_conversion(regclass) IS 'Stops a conversion of a distributed table to the layout by ownership (id_gen.convert_to_by_ownership) that has swapped on no shard yet: on each shard its triggers, table of rows and log entries are dropped (the partitioned table there never stopped taking the writes), and the table is per_shard and unmarked again, so moves, splits and route changes go on. 55000, changing nothing, once a shard has swapped (finish it instead); 55006 while another session converts it. Every shard must answer. Superuser only.';
REVOKE EXECUTE ON PROCEDURE id_gen.abort_conversion(regclass) FROM PUBLIC;
