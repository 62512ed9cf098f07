-- On a shard: the shard half of reversible moves (sql/cluster/revert.sql drives them and
-- says how they work): the way back's publication, slot and subscription, the kept
-- partitions of the source, and their end. Code only (CREATE OR REPLACE).
--
-- Invariants: see sql/cluster/revert.sql. The kept partitions refuse direct writes (the
-- move's fence trigger) until revert_move opens them.

-- Where a reversible move's way back starts, read in the fence once the marker arrived: the
-- end of the WAL inserted so far, so past the commit of every change the move applied (not
-- pg_current_wal_lsn, the end of what was written out: the apply worker commits
-- asynchronously, and a commit not yet written would go back to the source as a duplicate).
-- The xid this call takes makes its commit a WAL record after that point, which the WAL
-- writer flushes in a few hundred milliseconds even on an idle shard: the slot can be
-- advanced only to flushed WAL (shard_advance_way_back waits for it).
CREATE OR REPLACE FUNCTION id_gen.shard_current_lsn() RETURNS text
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  at pg_lsn := pg_catalog.pg_current_wal_insert_lsn();
BEGIN
  PERFORM pg_catalog.pg_current_xact_id();
  RETURN at::text;
END $$;
COMMENT ON FUNCTION id_gen.shard_current_lsn() IS 'On a shard: the end of its WAL inserted so far (where a reversible move''s way back starts: past every change the move applied), in a transaction whose commit is WAL after it.';
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

-- On the target, before the fence, when the move carries tables of rows (layout by
-- ownership; since 0.7.12): the way back's publication with a row filter on each table's id
-- (a table of rows holds other genes' rows too) and without TRUNCATE (idempotent).
CREATE OR REPLACE FUNCTION id_gen.shard_create_filtered_way_back(move_id bigint, parts text[], id_columns name[],
                                                                lower_genes integer[], upper_genes integer[]) RETURNS text
LANGUAGE sql STRICT
SET search_path = pg_catalog, pg_temp
RETURN id_gen.publish_moved_rows(('id_gen_back_' OPERATOR(pg_catalog.||) move_id)::name, move_id, parts, id_columns, lower_genes, upper_genes);
COMMENT ON FUNCTION id_gen.shard_create_filtered_way_back(bigint, text[], name[], integer[], integer[]) IS 'On the target of a reversible move that carries tables of rows: the publication of the way back (its partitions and tables of rows of the moved genes, each with a row filter on the id, and the move''s markers; no TRUNCATE).';
REVOKE EXECUTE ON FUNCTION id_gen.shard_create_filtered_way_back(bigint, text[], name[], integer[], integer[]) FROM PUBLIC;

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
    -- A slot is advanced at most to the WAL flushed: wait for lsn to be (the WAL writer
    -- flushes shard_current_lsn's commit, past it, in well under a second; 10 s at most).
    FOR i IN 1 .. 1000 LOOP
      EXIT WHEN pg_current_wal_flush_lsn() >= lsn;
      PERFORM pg_sleep(0.01);
    END LOOP;
    IF pg_current_wal_flush_lsn() < lsn THEN
      RAISE EXCEPTION 'id_gen: move %: the WAL of this shard was not flushed to % within 10 s (flushed to %)', move_id, lsn, pg_current_wal_flush_lsn()
        USING ERRCODE = '55000', HINT = 'The move stays in phase cut_over; the move supervisor finishes the cut-over on its next pass.';
    END IF;
    PERFORM pg_replication_slot_advance(tag, lsn);
    SELECT s.confirmed_flush_lsn INTO at FROM pg_replication_slots s WHERE s.slot_name = tag;
    IF at < lsn THEN
      RAISE EXCEPTION 'id_gen: move %: the slot % stayed at % (not advanced to %)', move_id, tag, at, lsn
        USING ERRCODE = '55000', HINT = 'The move stays in phase cut_over; the move supervisor finishes the cut-over on its next pass.';
    END IF;
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
  -- The source's subscription is still enabled (it may be down: this side goes first), so its
  -- apply worker connects again as soon as its walsender is gone (at once, when its last
  -- start is older than wal_retrieve_retry_interval): the walsender is ended and waited for
  -- (1 s at most), and the slot dropped right after, up to 50 times.
  FOR i IN 1 .. 50 LOOP
    SELECT s.active_pid INTO pid FROM pg_replication_slots s WHERE s.slot_name = tag;
    EXIT WHEN NOT FOUND;
    IF pid IS NOT NULL THEN
      PERFORM pg_terminate_backend(pid, 1000);
    END IF;
    BEGIN
      PERFORM pg_drop_replication_slot(tag);
      EXIT;
    EXCEPTION WHEN object_in_use THEN
      PERFORM pg_sleep(0.05);
    END;
  END LOOP;
  RETURN CASE WHEN EXISTS (SELECT FROM pg_replication_slots s WHERE s.slot_name = tag) THEN 'slot still active' ELSE 'dropped' END;
END $$;
COMMENT ON FUNCTION id_gen.shard_drop_way_back(bigint) IS 'On the target of a reversible move: drops the way back''s publication and slot.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_drop_way_back(bigint) FROM PUBLIC;

-- On a shard of a move, before a fence (the source before the move's, the target before a
-- revert's): a marker whose number no marker of the move had on this shard (at least
-- 1,000,000, above the fences' numbers), so that it can be on the other shard only once
-- replication has brought it; returns the number.
CREATE OR REPLACE FUNCTION id_gen.shard_write_probe(move_id bigint) RETURNS bigint
LANGUAGE sql STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  INSERT INTO id_gen.move_markers (move_id, marker)
  SELECT shard_write_probe.move_id, GREATEST(1000000, pg_catalog.max(m.marker) OPERATOR(pg_catalog.+) 1)
  FROM id_gen.move_markers m WHERE m.move_id OPERATOR(pg_catalog.=) shard_write_probe.move_id
  RETURNING marker;
END;
COMMENT ON FUNCTION id_gen.shard_write_probe(bigint) IS 'On a shard of a move: writes a marker of a number new on this shard (1,000,000 or more), awaited on the other shard before a fence (on the target before the move''s, on the source before a revert''s); returns it.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_write_probe(bigint) FROM PUBLIC;

-- On the source of a reversible move: how many times its way back's apply stopped on an
-- error (a revert whose marker does not arrive says so in its hint); NULL without the
-- subscription.
CREATE OR REPLACE FUNCTION id_gen.shard_way_back_errors(move_id bigint) RETURNS bigint
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  SELECT s.apply_error_count FROM pg_stat_subscription_stats s
  WHERE s.subname OPERATOR(pg_catalog.=) ('id_gen_back_' OPERATOR(pg_catalog.||) move_id);
END;
COMMENT ON FUNCTION id_gen.shard_way_back_errors(bigint) IS 'On the source of a reversible move: how many times the way back''s subscription stopped on an error (pg_stat_subscription_stats.apply_error_count; NULL without it).';
REVOKE EXECUTE ON FUNCTION id_gen.shard_way_back_errors(bigint) FROM PUBLIC;

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
  -- (The target's connection string waits here until the cut-over subscribes with it; a
  -- move rolled back before that leaves it, and it goes now.)
  DELETE FROM id_gen.move_secrets s WHERE s.move_id = shard_detach_way_back.move_id;
END $$;
COMMENT ON FUNCTION id_gen.shard_detach_way_back(bigint) IS 'On the source of a reversible move: disables the way back''s subscription and lets go of its slot (dropped on the target first), so that DROP SUBSCRIPTION does not need the target; forgets the target''s connection string if it is still there.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_detach_way_back(bigint) FROM PUBLIC;

-- On the source at the cut-over of a reversible move: the partitions leave the table but
-- keep their names (the way back applies to them by name) and get a CHECK of their bounds.
-- Those of per_shard tables left the table in the move's fence, renamed
-- id_gen_moved_<move>_<hash> (shard_detach_moved): they get their names back. Also what
-- undoes a failed revert's fence on the source (undo_revert_relayout). Idempotent.
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
    IF rel IS NULL THEN
      rel := to_regclass(format('%I.%I', (parse_ident(parts[i]))[1], id_gen.moved_partition_name(move_id, parts[i])));
      CONTINUE WHEN rel IS NULL;
      EXECUTE format('ALTER TABLE %s RENAME TO %I', rel, (parse_ident(parts[i]))[2]);
    END IF;
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
COMMENT ON FUNCTION id_gen.shard_detach_kept(bigint, text[], name[], integer[], integer[]) IS 'On the source of a reversible move at its cut-over: detaches the moved partitions, keeping their names (the way back applies to them; those of per_shard tables, detached in the fence, get their names back) and adding a CHECK of their bounds (so re-attaching needs no scan); idempotent.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_detach_kept(bigint, text[], name[], integer[], integer[]) FROM PUBLIC;

-- On the source, at the cut-over of a reversible move, in two calls (two transactions):
--   shard_create_way_back_subscription  the way back's subscription, from the connection
--                                       string in id_gen.move_secrets (then forgotten),
--                                       connected, its tables ready, not enabled;
--   shard_start_way_back                its replication origin set to start_at (back_lsn),
--                                       then enabled, in one transaction.
-- The origin matters because PostgreSQL saves a slot's advance only at the next checkpoint:
-- a target that crashed before it would stream from where the slot was created and send the
-- move's own copies back. The origin's advance is WAL-logged, and the target streams from the
-- later of the two. It is made on a committed subscription's origin, never advanced before
-- (pg_replication_origin_advance is not undone by a rollback: made in the transaction that
-- creates the origin, an abort would leave the position to whichever origin next takes its
-- number). Both calls are idempotent.
CREATE OR REPLACE FUNCTION id_gen.shard_create_way_back_subscription(move_id bigint, parts text[]) RETURNS oid
LANGUAGE sql STRICT
SET search_path = pg_catalog, pg_temp
RETURN id_gen.subscribe_with_secret(move_id, parts, true);
COMMENT ON FUNCTION id_gen.shard_create_way_back_subscription(bigint, text[]) IS 'On the source of a reversible move: creates the subscription of the way back (not enabled) from the connection string in id_gen.move_secrets (then forgotten); id_gen.shard_start_way_back enables it.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_create_way_back_subscription(bigint, text[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.shard_start_way_back(move_id bigint, start_at pg_lsn) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  sub oid;
  enabled boolean;
BEGIN
  IF move_id IS NULL OR start_at IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "%" must not be NULL', CASE WHEN move_id IS NULL THEN 'move_id' ELSE 'start_at' END
      USING ERRCODE = '22004';
  END IF;
  SELECT s.oid, s.subenabled INTO sub, enabled FROM pg_subscription s
  WHERE s.subname = 'id_gen_back_' || move_id AND s.subdbid = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database());
  IF NOT FOUND THEN
    RAISE EXCEPTION 'id_gen: move %: the way back''s subscription is missing on this shard', move_id
      USING ERRCODE = '55000', HINT = 'The move''s cut-over creates it (id_gen.shard_create_way_back_subscription) before it starts it.';
  END IF;
  IF NOT enabled THEN
    IF pg_replication_origin_progress('pg_' || sub, false) IS NULL THEN
      PERFORM pg_replication_origin_advance('pg_' || sub, start_at);
    END IF;
    EXECUTE format('ALTER SUBSCRIPTION %I ENABLE', 'id_gen_back_' || move_id);
  END IF;
END $$;
COMMENT ON FUNCTION id_gen.shard_start_way_back(bigint, pg_lsn) IS 'On the source of a reversible move: sets the way back''s replication origin to start_at (where the target''s slot was advanced; WAL-logged, so it holds even if the target loses the slot''s advance in a crash) unless it moved already, and enables the subscription.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_start_way_back(bigint, pg_lsn) FROM PUBLIC;

-- Both at once, with no origin set: the call of coordinators before 0.7.6.
CREATE OR REPLACE FUNCTION id_gen.shard_subscribe_way_back(move_id bigint, parts text[]) RETURNS oid
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  sub oid := id_gen.subscribe_with_secret(move_id, parts, true);
BEGIN
  IF EXISTS (SELECT FROM pg_subscription s WHERE s.oid = sub AND NOT s.subenabled) THEN
    EXECUTE format('ALTER SUBSCRIPTION %I ENABLE', 'id_gen_back_' || move_id);
  END IF;
  RETURN sub;
END $$;
COMMENT ON FUNCTION id_gen.shard_subscribe_way_back(bigint, text[]) IS 'On the source of a reversible move: creates and enables the subscription of the way back from the connection string in id_gen.move_secrets (then forgotten), with no replication origin set (the call of coordinators before 0.7.6).';
REVOKE EXECUTE ON FUNCTION id_gen.shard_subscribe_way_back(bigint, text[]) FROM PUBLIC;

-- On the source, after a revert's flip: the kept partitions rejoin the table (those of
-- per_shard tables joined it in the revert's fence) and lose the move's CHECK and fence
-- trigger. Idempotent.
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
    SELECT x.inhparent::regclass INTO parent FROM pg_inherits x WHERE x.inhrelid = rel;
    CONTINUE WHEN parent IS NOT NULL
              AND NOT EXISTS (SELECT FROM pg_constraint c WHERE c.conrelid = rel AND c.conname = 'id_gen_kept_bound')
              AND NOT EXISTS (SELECT FROM pg_trigger t WHERE t.tgrelid = rel AND t.tgname = 'id_gen_move_fence');
    IF parent IS NULL THEN
      parent := id_gen.attach_moved_part(rel, lower_genes[i], upper_genes[i]);  -- (sql/cluster/shard/move.sql)
    END IF;
    EXECUTE format('ALTER TABLE %s DROP CONSTRAINT IF EXISTS id_gen_kept_bound', rel);
    EXECUTE format('DROP TRIGGER IF EXISTS id_gen_move_fence ON %s', rel);
    EXECUTE format('COMMENT ON TABLE %s IS %L', rel,
                   format('id_gen: genes %s .. %s of %s on this shard (kept by the coordinator)', lower_genes[i], upper_genes[i], parent));
    n := n + 1;
  END LOOP;
  PERFORM id_gen.shard_routing_changed();
  RETURN n;
END $$;
COMMENT ON FUNCTION id_gen.shard_reattach_kept(bigint, text[], integer[], integer[]) IS 'On the source of a reverted move: attaches the kept partitions to their tables again (no scan: their CHECK implies the bounds; those of per_shard tables were attached in the revert''s fence) and removes the move''s CHECK and fence trigger from them; idempotent.';
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
