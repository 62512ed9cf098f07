-- Reversible moves: CALL id_gen.move_genes(..., reversible => true), then CALL
-- id_gen.revert_move(id) or CALL id_gen.complete_move(id). Code only (CREATE OR REPLACE);
-- the columns are in sql/cluster_catalog.sql. The first half runs on the shards, the
-- second on the coordinator; sql/move.sql calls prepare_way_back (before the fence),
-- records back_lsn (inside it) and calls open_way_back (instead of the cut-over's clean-up).
--
-- The way back is the move's own machinery turned around, on PostgreSQL's logical
-- replication:
--   before the fence  the target publishes its partitions of the moved genes and
--                     id_gen.move_markers (publication id_gen_back_<id>) and creates the
--                     slot id_gen_back_<id>; the target's connection string goes to the
--                     source's id_gen.move_secrets (a bound parameter, as for the move).
--   inside the fence  after the last change from the source is applied on the target, the
--                     target's WAL position is recorded (back_lsn): every write of the
--                     moved genes on the target after the flip lies after it.
--   cut-over          the source detaches its partitions but keeps them under their names
--                     (with a CHECK of their bounds, and the move's fence trigger, which
--                     refuses direct writes and does not fire for replication); the forward
--                     subscription and publication go; the slot is advanced to back_lsn
--                     (so the changes the forward apply made are not sent back); the
--                     source subscribes (id_gen_back_<id>, connected at creation so its
--                     tables are ready at once, copy_data = false).
--   reversible        the target serves the genes; its changes stream to the source's kept
--                     partitions. The slot keeps WAL on the target until the move ends:
--                     id_gen.moves shows back_lag_bytes and back_retained_bytes.
--   revert_move       the move's fence the other way: ACCESS EXCLUSIVE on the coordinator's
--                     range partitions, the fence trigger on the target's partitions, a
--                     marker on the target awaited on the source (apply is in commit order),
--                     the source's kept partitions opened to writes (the coordinator's
--                     foreign tables reach them by name at once), the source's sequences raised, routes and foreign tables back to the
--                     source; COMMIT (phase reverting). Then the reverse subscription and
--                     publication go, the source re-attaches its partitions (the CHECK spares
--                     the scan), the target detaches and drops its copies: reverted.
--   complete_move     the reverse subscription and publication go and the source's kept
--                     partitions are dropped: done.
-- Invariants: until revert_move's flip commits, the target is authoritative and the source
-- only follows; after it, the source holds every write the target committed (the marker
-- arrived after all of them). The move supervisor finishes a revert whose flip committed
-- (reverting) and lifts the target's fence of one that did not; it ends a reversible move
-- (as complete_move does) only when its slot keeps more WAL than id_gen.reversible_max_wal.

-- Shard side ------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION id_gen.shard_current_lsn() RETURNS text
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
RETURN pg_catalog.pg_current_wal_lsn()::text;
COMMENT ON FUNCTION id_gen.shard_current_lsn() IS 'On a shard: its current WAL position (where a reversible move''s way back starts).';
REVOKE EXECUTE ON FUNCTION id_gen.shard_current_lsn() FROM PUBLIC;

-- On the target, before the fence: the publication of the way back (idempotent).
CREATE OR REPLACE FUNCTION id_gen.shard_create_way_back(move_id bigint, parts text[]) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  tag name := 'id_gen_back_' || move_id;
  rels regclass[] := id_gen.shard_relations(parts, true);
BEGIN
  IF NOT EXISTS (SELECT FROM pg_publication p WHERE p.pubname = tag) THEN
    EXECUTE format('CREATE PUBLICATION %I FOR TABLE %s, id_gen.move_markers WHERE (move_id OPERATOR(pg_catalog.=) %s)',
                   tag, (SELECT string_agg(r::text, ', ') FROM unnest(rels) r), move_id);
  END IF;
  RETURN tag;
END $$;
COMMENT ON FUNCTION id_gen.shard_create_way_back(bigint, text[]) IS 'On the target of a reversible move: the publication of the way back (its partitions of the moved genes and the move''s markers).';
REVOKE EXECUTE ON FUNCTION id_gen.shard_create_way_back(bigint, text[]) FROM PUBLIC;

-- (A transaction of its own: a logical slot is not created in one that has written.)
CREATE OR REPLACE FUNCTION id_gen.shard_create_way_back_slot(move_id bigint) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  tag name := 'id_gen_back_' || move_id;
BEGIN
  IF NOT EXISTS (SELECT FROM pg_replication_slots s WHERE s.slot_name = tag) THEN
    PERFORM pg_create_logical_replication_slot(tag, 'pgoutput');
  END IF;
  RETURN tag;
END $$;
COMMENT ON FUNCTION id_gen.shard_create_way_back_slot(bigint) IS 'On the target of a reversible move: the slot of the way back (advanced to the flip at the cut-over).';
REVOKE EXECUTE ON FUNCTION id_gen.shard_create_way_back_slot(bigint) FROM PUBLIC;

-- On the target: moves the way back's slot to the flip (what came before it came from the source).
CREATE OR REPLACE FUNCTION id_gen.shard_advance_way_back(move_id bigint, lsn pg_lsn) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  tag name := 'id_gen_back_' || move_id;
  at pg_lsn;
BEGIN
  SELECT s.confirmed_flush_lsn INTO at FROM pg_replication_slots s WHERE s.slot_name = tag;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'id_gen: the slot % of reversible move % is missing on this shard', tag, move_id
      USING ERRCODE = '55000', HINT = 'Without it the source cannot follow: complete the move (CALL id_gen.complete_move).';
  END IF;
  IF at < lsn THEN
    PERFORM pg_replication_slot_advance(tag, lsn);
  END IF;
  RETURN (SELECT s.confirmed_flush_lsn::text FROM pg_replication_slots s WHERE s.slot_name = tag);
END $$;
COMMENT ON FUNCTION id_gen.shard_advance_way_back(bigint, pg_lsn) IS 'On the target of a reversible move: advances the way back''s slot to the flip, so that only the target''s own writes go back.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_advance_way_back(bigint, pg_lsn) FROM PUBLIC;

-- On the target: '<lag bytes> <retained bytes>' of the way back's slot.
CREATE OR REPLACE FUNCTION id_gen.shard_way_back_lag(move_id bigint) RETURNS text
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  SELECT (pg_current_wal_lsn() OPERATOR(pg_catalog.-) s.confirmed_flush_lsn)::bigint::text OPERATOR(pg_catalog.||) ' '
         OPERATOR(pg_catalog.||) (pg_current_wal_lsn() OPERATOR(pg_catalog.-) s.restart_lsn)::bigint::text
  FROM pg_replication_slots s WHERE s.slot_name OPERATOR(pg_catalog.=) ('id_gen_back_' OPERATOR(pg_catalog.||) move_id);
END;
COMMENT ON FUNCTION id_gen.shard_way_back_lag(bigint) IS 'On the target of a reversible move: WAL bytes the source has not confirmed, and WAL bytes the slot keeps ("<lag> <retained>"; NULL without the slot).';
REVOKE EXECUTE ON FUNCTION id_gen.shard_way_back_lag(bigint) FROM PUBLIC;

-- On the target: the way back's publication and slot go (the subscription first, on the source).
CREATE OR REPLACE FUNCTION id_gen.shard_drop_way_back(move_id bigint) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  tag name := 'id_gen_back_' || move_id;
  pid integer;
BEGIN
  EXECUTE format('DROP PUBLICATION IF EXISTS %I', tag);
  SELECT s.active_pid INTO pid FROM pg_replication_slots s WHERE s.slot_name = tag;
  IF pid IS NOT NULL THEN
    PERFORM pg_terminate_backend(pid);
    PERFORM pg_sleep(0.2);
  END IF;
  IF EXISTS (SELECT FROM pg_replication_slots s WHERE s.slot_name = tag AND NOT s.active) THEN
    PERFORM pg_drop_replication_slot(tag);
  END IF;
  RETURN CASE WHEN EXISTS (SELECT FROM pg_replication_slots s WHERE s.slot_name = tag) THEN 'slot still active' ELSE 'dropped' END;
END $$;
COMMENT ON FUNCTION id_gen.shard_drop_way_back(bigint) IS 'On the target of a reversible move: drops the way back''s publication and slot.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_drop_way_back(bigint) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.shard_detach_way_back(move_id bigint) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  tag name := 'id_gen_back_' || move_id;
BEGIN
  IF EXISTS (SELECT FROM pg_subscription s WHERE s.subname = tag) THEN
    EXECUTE format('ALTER SUBSCRIPTION %I DISABLE', tag);
    EXECUTE format('ALTER SUBSCRIPTION %I SET (slot_name = NONE)', tag);
  END IF;
END $$;
COMMENT ON FUNCTION id_gen.shard_detach_way_back(bigint) IS 'On the source of a reversible move: disables the way back''s subscription and lets go of its slot (dropped on the target first), so that DROP SUBSCRIPTION does not need the target.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_detach_way_back(bigint) FROM PUBLIC;

-- On the source at the cut-over of a reversible move: the partitions leave the table but
-- keep their names (the way back applies to them by name) and get a CHECK of their bounds.
CREATE OR REPLACE FUNCTION id_gen.shard_detach_kept(move_id bigint, parts text[], id_columns name[],
                                                    lower_genes integer[], upper_genes integer[]) RETURNS integer
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  rel regclass;
  parent regclass;
  n integer := 0;
BEGIN
  PERFORM set_config('lock_timeout', '5s', true);
  PERFORM id_gen.quiet_ddl();
  FOR i IN 1 .. cardinality(parts) LOOP
    rel := to_regclass(parts[i]);
    CONTINUE WHEN rel IS NULL;
    SELECT x.inhparent::regclass INTO parent FROM pg_inherits x WHERE x.inhrelid = rel;
    IF parent IS NOT NULL THEN
      EXECUTE format('ALTER TABLE %s DETACH PARTITION %s', parent, rel);
      n := n + 1;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_constraint c WHERE c.conrelid = rel AND c.conname = 'id_gen_kept_bound') THEN
      EXECUTE format('ALTER TABLE %s ADD CONSTRAINT id_gen_kept_bound CHECK (%I OPERATOR(pg_catalog.>=) %s AND %I OPERATOR(pg_catalog.<=) %s)',
                     rel, id_columns[i], id_gen.gene_first_id(lower_genes[i]), id_columns[i], id_gen.gene_last_id(upper_genes[i]));
    END IF;
    EXECUTE format('COMMENT ON TABLE %s IS %L', rel,
                   format('id_gen: genes %s .. %s, kept in step with the target of reversible move %s (revert_move or complete_move ends it)',
                          lower_genes[i], upper_genes[i], move_id));
  END LOOP;
  PERFORM id_gen.shard_routing_changed();
  RETURN n;
END $$;
COMMENT ON FUNCTION id_gen.shard_detach_kept(bigint, text[], name[], integer[], integer[]) IS 'On the source of a reversible move at its cut-over: detaches the moved partitions, keeping their names (the way back applies to them) and adding a CHECK of their bounds (so re-attaching needs no scan).';
REVOKE EXECUTE ON FUNCTION id_gen.shard_detach_kept(bigint, text[], name[], integer[], integer[]) FROM PUBLIC;

-- On the source: the way back's subscription (from id_gen.move_secrets), not yet enabled.
CREATE OR REPLACE FUNCTION id_gen.shard_subscribe_way_back(move_id bigint, parts text[]) RETURNS oid
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  tag name := 'id_gen_back_' || move_id;
  rel regclass;
BEGIN
  FOREACH rel IN ARRAY id_gen.shard_relations(parts, true) LOOP
    PERFORM id_gen.refuse_untrusted_table(rel, 'shard table');
  END LOOP;
  PERFORM id_gen.subscribe_with_secret(move_id, tag, true);
  IF EXISTS (SELECT FROM pg_subscription s WHERE s.subname = tag AND NOT s.subenabled) THEN
    EXECUTE format('ALTER SUBSCRIPTION %I ENABLE', tag);
  END IF;
  RETURN (SELECT s.oid FROM pg_subscription s WHERE s.subname = tag);
END $$;
COMMENT ON FUNCTION id_gen.shard_subscribe_way_back(bigint, text[]) IS 'On the source of a reversible move: creates and enables the subscription of the way back from the connection string in id_gen.move_secrets (then forgotten).';
REVOKE EXECUTE ON FUNCTION id_gen.shard_subscribe_way_back(bigint, text[]) FROM PUBLIC;

-- On the source, after a revert's flip: the kept partitions rejoin the table.
CREATE OR REPLACE FUNCTION id_gen.shard_reattach_kept(move_id bigint, parts text[], lower_genes integer[], upper_genes integer[]) RETURNS integer
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  rel regclass;
  parent regclass;
  n integer := 0;
BEGIN
  PERFORM set_config('lock_timeout', '5s', true);
  PERFORM id_gen.quiet_ddl();
  FOR i IN 1 .. cardinality(parts) LOOP
    rel := to_regclass(parts[i]);
    IF rel IS NULL THEN
      RAISE EXCEPTION 'id_gen: the kept partition % of move % is missing on this shard', parts[i], move_id USING ERRCODE = '55000';
    END IF;
    CONTINUE WHEN EXISTS (SELECT FROM pg_inherits x WHERE x.inhrelid = rel);
    SELECT format('%I.%I', t.schema_name, t.table_name)::regclass INTO parent
    FROM id_gen.shard_tables t JOIN pg_class c ON c.oid = rel JOIN pg_namespace ns ON ns.oid = c.relnamespace
    WHERE t.schema_name = ns.nspname AND id_gen.partition_name(t.stem, lower_genes[i], upper_genes[i]) = c.relname;
    IF parent IS NULL THEN
      RAISE EXCEPTION 'id_gen: no distributed table on this shard owns %', rel USING ERRCODE = '55000';
    END IF;
    EXECUTE format('ALTER TABLE %s ATTACH PARTITION %s FOR VALUES %s', parent, rel,
                   id_gen.partition_bounds(lower_genes[i], upper_genes[i]));
    EXECUTE format('ALTER TABLE %s DROP CONSTRAINT IF EXISTS id_gen_kept_bound', rel);
    EXECUTE format('DROP TRIGGER IF EXISTS id_gen_move_fence ON %s', rel);
    EXECUTE format('COMMENT ON TABLE %s IS %L', rel,
                   format('id_gen: genes %s .. %s of %s on this shard (kept by the coordinator)', lower_genes[i], upper_genes[i], parent));
    n := n + 1;
  END LOOP;
  PERFORM id_gen.shard_routing_changed();
  RETURN n;
END $$;
COMMENT ON FUNCTION id_gen.shard_reattach_kept(bigint, text[], integer[], integer[]) IS 'On the source of a reverted move: attaches the kept partitions to their tables again (no scan: their CHECK implies the bounds) and removes the move''s fence trigger from them.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_reattach_kept(bigint, text[], integer[], integer[]) FROM PUBLIC;

-- On the source, inside a revert's fence (open) or when that fence fails (not open): the
-- move's fence trigger on the kept partitions, which refuses writes other than the way
-- back's, is disabled, so that the coordinator's writers, which reach them by name from
-- the flip on, are taken.
CREATE OR REPLACE FUNCTION id_gen.shard_open_kept(move_id bigint, parts text[], open boolean) RETURNS integer
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  rel regclass;
  n integer := 0;
BEGIN
  PERFORM set_config('lock_timeout', '2s', true);
  PERFORM id_gen.quiet_ddl();
  FOREACH rel IN ARRAY id_gen.shard_relations(parts, false) LOOP
    CONTINUE WHEN NOT EXISTS (SELECT FROM pg_trigger t WHERE t.tgrelid = rel AND t.tgname = 'id_gen_move_fence');
    EXECUTE format('ALTER TABLE %s %s TRIGGER id_gen_move_fence', rel, CASE WHEN open THEN 'DISABLE' ELSE 'ENABLE' END);
    n := n + 1;
  END LOOP;
  RETURN n;
END $$;
COMMENT ON FUNCTION id_gen.shard_open_kept(bigint, text[], boolean) IS 'On the source of a reversible move: lets writes into the kept partitions (open) in a revert''s fence, or refuses them again.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_open_kept(bigint, text[], boolean) FROM PUBLIC;

-- On the source of a completed move: the kept partitions go (only detached ones that
-- carry the move's CHECK).
CREATE OR REPLACE FUNCTION id_gen.shard_drop_kept(move_id bigint, parts text[]) RETURNS integer
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  rel regclass;
  n integer := 0;
BEGIN
  PERFORM id_gen.quiet_ddl();
  FOREACH rel IN ARRAY id_gen.shard_relations(parts, false) LOOP
    CONTINUE WHEN EXISTS (SELECT FROM pg_inherits x WHERE x.inhrelid = rel)
               OR NOT EXISTS (SELECT FROM pg_constraint c WHERE c.conrelid = rel AND c.conname = 'id_gen_kept_bound');
    EXECUTE format('DROP TABLE %s', rel);
    n := n + 1;
  END LOOP;
  DELETE FROM id_gen.move_markers m WHERE m.move_id = shard_drop_kept.move_id;
  RETURN n;
END $$;
COMMENT ON FUNCTION id_gen.shard_drop_kept(bigint, text[]) IS 'On the source of a completed reversible move: drops the kept partitions and the move''s markers.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_drop_kept(bigint, text[]) FROM PUBLIC;

-- Coordinator side ------------------------------------------------------------------------

-- The move turned around: source and target swapped, so that the steps of move_commands
-- run the other way (fence and marker on the target, marker awaited on the source, ...).
CREATE OR REPLACE FUNCTION id_gen.reversed(m id_gen.shard_moves) RETURNS id_gen.shard_moves
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  r id_gen.shard_moves := m;
BEGIN
  r.source_shard := m.target_shard;
  r.target_shard := m.source_shard;
  r.keep_source := false;
  RETURN r;
END $$;
COMMENT ON FUNCTION id_gen.reversed(id_gen.shard_moves) IS 'A move with source and target swapped: the steps of its way back.';
REVOKE EXECUTE ON FUNCTION id_gen.reversed(id_gen.shard_moves) FROM PUBLIC;

-- Before the fence of a reversible move: the target's publication and slot, and the
-- target's connection string in the source's id_gen.move_secrets (visible there once the
-- caller commits).
CREATE OR REPLACE FUNCTION id_gen.prepare_way_back(m id_gen.shard_moves) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  PERFORM id_gen.shard_call(m.target_shard, 'shard_create_way_back',
                            ARRAY[m.move_id::text, (id_gen.move_parts(m.lower_gene, m.upper_gene)).parts::text], 60000);
  PERFORM id_gen.shard_call(m.target_shard, 'shard_create_way_back_slot', ARRAY[m.move_id::text], 60000);
  PERFORM id_gen.send_move_secret(id_gen.reversed(m));
END $$;
COMMENT ON FUNCTION id_gen.prepare_way_back(id_gen.shard_moves) IS 'Before the fence of a reversible move: the target''s publication and slot of the way back, and its connection string for the source.';
REVOKE EXECUTE ON FUNCTION id_gen.prepare_way_back(id_gen.shard_moves) FROM PUBLIC;

-- The cut-over of a reversible move (instead of finish_cut_over's clean-up): the source
-- keeps its partitions and follows the target. Idempotent.
CREATE OR REPLACE FUNCTION id_gen.open_way_back(m id_gen.shard_moves) RETURNS id_gen.shard_moves
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  p record := id_gen.move_parts(m.lower_gene, m.upper_gene);
BEGIN
  PERFORM id_gen.shard_call(m.source_shard, 'shard_detach_kept',
                            ARRAY[m.move_id::text, p.parts::text, p.id_columns::text, p.lower_genes::text, p.upper_genes::text], 600000);
  PERFORM id_gen.place_ranges(m.source_shard, m.lower_gene, m.upper_gene, false);
  PERFORM id_gen.run_move_step(m, 'drop_subscription', 0, 30000);
  PERFORM id_gen.run_move_step(m, 'drop_publication', 0, 30000);
  PERFORM id_gen.run_move_step(m, 'forget_source_markers', 0, 10000);
  PERFORM id_gen.run_move_step(m, 'forget_markers', 0, 10000);
  PERFORM id_gen.shard_call(m.target_shard, 'shard_advance_way_back', ARRAY[m.move_id::text, m.back_lsn::text], 60000);
  PERFORM id_gen.shard_call(m.source_shard, 'shard_subscribe_way_back', ARRAY[m.move_id::text, p.parts::text], 30000);
  UPDATE id_gen.shard_moves sm SET phase = 'reversible', updated_at = clock_timestamp(), source_fenced = false, last_error = NULL
  WHERE sm.move_id = m.move_id AND sm.phase = 'cut_over' RETURNING * INTO m;
  PERFORM id_gen.check_way_back(m);
  RETURN m;
END $$;
COMMENT ON FUNCTION id_gen.open_way_back(id_gen.shard_moves) IS 'Cut-over of a reversible move: the source detaches its partitions but keeps them, the forward subscription and publication go, and the source subscribes to the target''s changes from the flip on.';
REVOKE EXECUTE ON FUNCTION id_gen.open_way_back(id_gen.shard_moves) FROM PUBLIC;

-- Refreshes back_lag_bytes and back_retained_bytes (errors go to last_error).
CREATE OR REPLACE FUNCTION id_gen.check_way_back(m id_gen.shard_moves) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  res text;
BEGIN
  res := id_gen.shard_call(m.target_shard, 'shard_way_back_lag', ARRAY[m.move_id::text], 10000);
  UPDATE id_gen.shard_moves sm
  SET back_lag_bytes = split_part(res, ' ', 1)::bigint, back_retained_bytes = split_part(res, ' ', 2)::bigint,
      back_checked_at = clock_timestamp(),
      last_error = CASE WHEN res IS NULL THEN 'the way back''s slot is missing on ' || m.target_shard END
  WHERE sm.move_id = m.move_id;
EXCEPTION WHEN OTHERS OR query_canceled THEN  -- (a target past its bound is 57014)
  UPDATE id_gen.shard_moves sm SET last_error = 'checking the way back: ' || SQLERRM, back_checked_at = clock_timestamp()
  WHERE sm.move_id = m.move_id;
END $$;
COMMENT ON FUNCTION id_gen.check_way_back(id_gen.shard_moves) IS 'Reads a reversible move''s reverse replication lag and retained WAL on the target into id_gen.shard_moves.';
REVOKE EXECUTE ON FUNCTION id_gen.check_way_back(id_gen.shard_moves) FROM PUBLIC;

-- A revert's fence, lifted: the target takes direct writes again and the source's kept
-- partitions refuse them again (a failed fence attempt, or the supervisor after a crash).
CREATE OR REPLACE FUNCTION id_gen.lift_revert_fence(m id_gen.shard_moves, timeout_ms integer) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  PERFORM id_gen.run_move_step(id_gen.reversed(m), 'unfence_source', 0, 10000);
  PERFORM id_gen.shard_call(m.source_shard, 'shard_open_kept',
                            ARRAY[m.move_id::text, (id_gen.move_parts(m.lower_gene, m.upper_gene)).parts::text, 'false'], timeout_ms);
END $$;
COMMENT ON FUNCTION id_gen.lift_revert_fence(id_gen.shard_moves, integer) IS 'Lifts a revert''s fence: the target''s fence triggers are disabled and the source''s kept partitions refuse direct writes again.';
REVOKE EXECUTE ON FUNCTION id_gen.lift_revert_fence(id_gen.shard_moves, integer) FROM PUBLIC;

-- The way back goes: first the target's publication and slot (the slot is what keeps WAL
-- on the target, and the target is reachable when the source is not), then the source's
-- subscription, detached from the slot that is gone. Raises when a step fails; each step
-- is idempotent, so calling it again finishes the rest.
CREATE OR REPLACE FUNCTION id_gen.drop_way_back(m id_gen.shard_moves) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  res text;
BEGIN
  res := id_gen.shard_call(m.target_shard, 'shard_drop_way_back', ARRAY[m.move_id::text], 30000);
  IF res IS DISTINCT FROM 'dropped' THEN
    RAISE EXCEPTION 'id_gen: the way back of move % on "%": %', m.move_id, m.target_shard, res USING ERRCODE = '55006';
  END IF;
  PERFORM id_gen.shard_call(m.source_shard, 'shard_detach_way_back', ARRAY[m.move_id::text], 30000);
  PERFORM id_gen.shard_exec(m.source_shard, format('DROP SUBSCRIPTION IF EXISTS %I', 'id_gen_back_' || m.move_id), 60000);
END $$;
COMMENT ON FUNCTION id_gen.drop_way_back(id_gen.shard_moves) IS 'Drops a reversible move''s way back: the publication and slot on the target first (so that a source that is down cannot keep WAL there), then the subscription on the source.';
REVOKE EXECUTE ON FUNCTION id_gen.drop_way_back(id_gen.shard_moves) FROM PUBLIC;

-- After a revert's flip committed: the way back goes, the source takes its partitions back,
-- the target lets go. Idempotent; raises on the first failing step.
CREATE OR REPLACE FUNCTION id_gen.finish_revert(m id_gen.shard_moves) RETURNS id_gen.shard_moves
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  p record := id_gen.move_parts(m.lower_gene, m.upper_gene);
  r id_gen.shard_moves := id_gen.reversed(m);
BEGIN
  PERFORM id_gen.drop_way_back(m);
  PERFORM id_gen.shard_call(m.source_shard, 'shard_reattach_kept',
                            ARRAY[m.move_id::text, p.parts::text, p.lower_genes::text, p.upper_genes::text], 60000);
  PERFORM id_gen.place_ranges(m.source_shard, m.lower_gene, m.upper_gene, true);
  PERFORM id_gen.run_move_step(r, 'detach_source', 0, 30000);
  PERFORM id_gen.place_ranges(m.target_shard, m.lower_gene, m.upper_gene, false);
  PERFORM id_gen.run_move_step(r, 'drop_source', 0, 60000);
  PERFORM id_gen.run_move_step(r, 'forget_markers', 0, 10000);
  UPDATE id_gen.shard_moves sm SET phase = 'reverted', finished_at = clock_timestamp(), updated_at = clock_timestamp(),
                                   source_fenced = false, last_error = NULL, back_lag_bytes = NULL, back_retained_bytes = NULL
  WHERE sm.move_id = m.move_id AND sm.phase = 'reverting' RETURNING * INTO m;
  RETURN m;
END $$;
COMMENT ON FUNCTION id_gen.finish_revert(id_gen.shard_moves) IS 'Finishes a revert whose flip committed: drops the way back, re-attaches the source''s kept partitions, detaches and drops the target''s.';
REVOKE EXECUTE ON FUNCTION id_gen.finish_revert(id_gen.shard_moves) FROM PUBLIC;

-- Common checks of revert_move and complete_move: the move, locked for this session.
CREATE OR REPLACE FUNCTION id_gen.take_reversible_move(move_id bigint, what text) RETURNS id_gen.shard_moves
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  m id_gen.shard_moves;
BEGIN
  PERFORM id_gen.require_superuser(what || ' a move');
  SELECT * INTO m FROM id_gen.shard_moves sm WHERE sm.move_id = take_reversible_move.move_id;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'id_gen: there is no move %', move_id USING ERRCODE = '42704', HINT = 'Moves are listed in id_gen.moves.';
  ELSIF NOT m.reversible THEN
    RAISE EXCEPTION 'id_gen: move % is not reversible', move_id
      USING ERRCODE = '55000', HINT = 'Only moves made with move_genes(..., reversible => true) can be reverted; move the genes back instead.';
  ELSIF m.phase NOT IN ('reversible', 'reverting') THEN
    RAISE EXCEPTION 'id_gen: move % is %, not reversible', move_id, m.phase
      USING ERRCODE = '55000',
            HINT = CASE WHEN m.phase IN ('planned', 'copying', 'catching_up', 'cut_over')
                        THEN format('Finish it first (CALL id_gen.move_genes(%s, %s, %L)) or abort it.', m.lower_gene, m.upper_gene, m.target_shard)
                        ELSE 'It has ended.' END;
  END IF;
  IF NOT EXISTS (SELECT FROM pg_locks l WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid()
                 AND l.classid = id_gen.operation_session_lock_key()::oid AND l.objid = m.move_id AND l.objsubid = 2)
     AND NOT pg_try_advisory_lock(id_gen.operation_session_lock_key(), m.move_id::integer) THEN
    RAISE EXCEPTION 'id_gen: move % is busy in another session', move_id
      USING ERRCODE = '55006', HINT = 'Watch id_gen.moves.runner; the move supervisor holds a move for a few seconds at most.';
  END IF;
  RETURN m;
END $$;
COMMENT ON FUNCTION id_gen.take_reversible_move(bigint, text) IS 'The reversible move revert_move or complete_move works on, checked and held by this session (session advisory lock).';
REVOKE EXECUTE ON FUNCTION id_gen.take_reversible_move(bigint, text) FROM PUBLIC;

CREATE OR REPLACE PROCEDURE id_gen.revert_move(move_id bigint)
LANGUAGE plpgsql
AS $$
DECLARE
  m id_gen.shard_moves;
  r id_gen.shard_moves;
  lag bigint;
  deadline timestamptz;
  t0 timestamptz;
  err text;
  err_state text;
  res text;
BEGIN
  PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
  IF move_id IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "move_id" must not be NULL' USING ERRCODE = '22004';
  END IF;
  m := id_gen.take_reversible_move(move_id, 'revert');
  r := id_gen.reversed(m);
  UPDATE id_gen.shard_moves sm SET runner_pid = pg_backend_pid(), updated_at = clock_timestamp() WHERE sm.move_id = m.move_id;
  COMMIT;
  PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
  IF m.phase = 'reversible' THEN
    -- The source catches up first (bounded), so that the fence only waits for the last changes.
    deadline := clock_timestamp() + interval '5 min';
    LOOP
      res := id_gen.shard_call(m.target_shard, 'shard_way_back_lag', ARRAY[m.move_id::text], 10000);
      IF res IS NULL THEN
        RAISE EXCEPTION 'id_gen: move %: the way back''s slot on "%" is gone', m.move_id, m.target_shard
          USING ERRCODE = '55000', HINT = format('The source cannot have every write: CALL id_gen.complete_move(%s), then move the genes back.', m.move_id);
      END IF;
      lag := split_part(res, ' ', 1)::bigint;
      EXIT WHEN lag <= 1048576;
      IF clock_timestamp() > deadline THEN
        RAISE EXCEPTION 'id_gen: move %: the source stays % bytes behind the target after 5 minutes', m.move_id, lag
          USING ERRCODE = '55000', HINT = 'Check the subscription id_gen_back_<move> on the source; call revert_move again later.';
      END IF;
      PERFORM pg_sleep(0.1);
    END LOOP;
    FOR attempt IN 1 .. 5 LOOP
      UPDATE id_gen.shard_moves sm SET source_fenced = true WHERE sm.move_id = m.move_id;
      COMMIT;
      PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
      err := NULL;
      BEGIN
        t0 := clock_timestamp();
        PERFORM pg_catalog.set_config('lock_timeout', '500ms', true);
        PERFORM id_gen.quiet_ddl();
        PERFORM id_gen.lock_range_partitions(m.lower_gene, m.upper_gene);
        BEGIN
          -- The target refuses direct writes; its last writes reach the source before the marker.
          PERFORM id_gen.run_move_step(r, 'fence_source', 1000 + attempt, 5000);
          PERFORM id_gen.pass_marker(r, 1000 + attempt, t0, 'source');
          PERFORM id_gen.shard_call(m.source_shard, 'shard_open_kept',
                                    ARRAY[m.move_id::text, (id_gen.move_parts(m.lower_gene, m.upper_gene)).parts::text, 'true'], 5000);
          PERFORM id_gen.move_raise_sequences(r);
          PERFORM id_gen.flip_routes(m.lower_gene, m.upper_gene, m.source_shard);
          UPDATE id_gen.shard_moves sm
          SET phase = 'reverting', fence_attempts = sm.fence_attempts + 1, fence_started_at = t0, fence_ended_at = clock_timestamp(),
              updated_at = clock_timestamp(), last_error = NULL
          WHERE sm.move_id = m.move_id AND sm.phase = 'reversible' RETURNING * INTO m;
          IF NOT FOUND THEN
            RAISE EXCEPTION 'the move is no longer reversible' USING ERRCODE = '55006';
          END IF;
        EXCEPTION WHEN OTHERS OR query_canceled THEN
          -- Lift the target's fence while the coordinator's locks still hold its writers:
          -- once they go, those writers reach the target, which must take them.
          GET STACKED DIAGNOSTICS err = MESSAGE_TEXT, err_state = RETURNED_SQLSTATE;
          BEGIN
            PERFORM id_gen.lift_revert_fence(m, 5000);
          EXCEPTION WHEN OTHERS OR query_canceled THEN
            err := err || ' (lifting the target''s fence failed: ' || SQLERRM || ')';
          END;
          RAISE EXCEPTION '%', err USING ERRCODE = err_state;
        END;
      EXCEPTION WHEN OTHERS OR query_canceled THEN
        GET STACKED DIAGNOSTICS err = MESSAGE_TEXT, err_state = RETURNED_SQLSTATE;
      END;
      IF err IS NULL THEN
        COMMIT;  -- lifts the fence: waiting writers continue on the source
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        PERFORM id_gen.push_route_state_quietly();  -- the shards learn the new route version
        EXIT;
      END IF;
      ROLLBACK;
      PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
      PERFORM id_gen.lift_revert_fence(m, 5000);
      UPDATE id_gen.shard_moves sm SET source_fenced = false, last_error = format('revert fence attempt %s: %s', attempt, err),
                                       updated_at = clock_timestamp()
      WHERE sm.move_id = m.move_id;
      COMMIT;
      PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
      IF err_state IN ('57014', '55006') OR attempt = 5 THEN
        PERFORM pg_advisory_unlock(id_gen.operation_session_lock_key(), m.move_id::integer);
        RAISE EXCEPTION 'id_gen: move %: could not revert: %', m.move_id, err
          USING ERRCODE = coalesce(err_state, '55000'),
                DETAIL = 'The fence was lifted; the target still serves the genes and the source follows it.',
                HINT = format('CALL id_gen.revert_move(%s) tries again.', m.move_id);
      END IF;
      PERFORM pg_sleep(0.5);
    END LOOP;
  END IF;
  m := id_gen.finish_revert(m);
  COMMIT;
  PERFORM pg_advisory_unlock(id_gen.operation_session_lock_key(), m.move_id::integer);
  RAISE NOTICE 'id_gen: move % reverted: genes % .. % are on % again; writes were fenced for % ms', m.move_id,
    m.lower_gene, m.upper_gene, m.source_shard, round(extract(epoch FROM m.fence_ended_at - m.fence_started_at) * 1000, 1);
END $$;
COMMENT ON PROCEDURE id_gen.revert_move(bigint) IS 'Switches the genes of a reversible move back to its source with the same short fence as the move (writes of those genes wait, others do not); every write the target committed is on the source afterwards. Then the target''s copies and the way back go. Resumes a revert that was interrupted after its flip. Superuser only.';
REVOKE EXECUTE ON PROCEDURE id_gen.revert_move(bigint) FROM PUBLIC;

-- Ends a reversible move where it is (complete_move, or the supervisor when the way back
-- keeps more WAL than id_gen.reversible_max_wal): the way back and the source's kept
-- partitions go.
CREATE OR REPLACE FUNCTION id_gen.end_way_back(m id_gen.shard_moves) RETURNS id_gen.shard_moves
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  p record := id_gen.move_parts(m.lower_gene, m.upper_gene);
BEGIN
  PERFORM id_gen.drop_way_back(m);
  PERFORM id_gen.shard_call(m.source_shard, 'shard_drop_kept', ARRAY[m.move_id::text, p.parts::text], 60000);
  PERFORM id_gen.run_move_step(m, 'forget_markers', 0, 10000);
  UPDATE id_gen.shard_moves sm SET phase = 'done', finished_at = clock_timestamp(), updated_at = clock_timestamp(),
                                   back_lag_bytes = NULL, back_retained_bytes = NULL, last_error = NULL
  WHERE sm.move_id = m.move_id RETURNING * INTO m;
  RETURN m;
END $$;
COMMENT ON FUNCTION id_gen.end_way_back(id_gen.shard_moves) IS 'Ends a reversible move on its target: drops the way back (subscription, publication, slot) and the source''s kept partitions; the move is done.';
REVOKE EXECUTE ON FUNCTION id_gen.end_way_back(id_gen.shard_moves) FROM PUBLIC;

CREATE OR REPLACE PROCEDURE id_gen.complete_move(move_id bigint)
LANGUAGE plpgsql
AS $$
DECLARE
  m id_gen.shard_moves;
BEGIN
  PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
  IF move_id IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "move_id" must not be NULL' USING ERRCODE = '22004';
  END IF;
  m := id_gen.take_reversible_move(move_id, 'complete');
  IF m.phase = 'reverting' THEN
    PERFORM pg_advisory_unlock(id_gen.operation_session_lock_key(), m.move_id::integer);
    RAISE EXCEPTION 'id_gen: move % is being reverted', move_id
      USING ERRCODE = '55006', HINT = format('CALL id_gen.revert_move(%s) finishes the revert.', move_id);
  END IF;
  m := id_gen.end_way_back(m);
  COMMIT;
  PERFORM pg_advisory_unlock(id_gen.operation_session_lock_key(), m.move_id::integer);
  RAISE NOTICE 'id_gen: move % complete: genes % .. % stay on %; the source''s copies and the way back are gone',
    m.move_id, m.lower_gene, m.upper_gene, m.target_shard;
END $$;
COMMENT ON PROCEDURE id_gen.complete_move(bigint) IS 'Ends a reversible move where it is: the way back (the source''s subscription, the target''s publication and slot) and the source''s kept partitions go. Superuser only.';
REVOKE EXECUTE ON PROCEDURE id_gen.complete_move(bigint) FROM PUBLIC;
