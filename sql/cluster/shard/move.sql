-- On a shard: the shard half of moves (sql/cluster/move.sql drives them). On the source,
-- the publication, the slot, the fence and the marker, then the detach and drop of the
-- moved partitions; on the target, the subscription (its secret passed as a bound
-- parameter), its progress and its end. And, for a shard whose coordinator is gone for
-- good, forgetting its moves. Code only (CREATE OR REPLACE).
--
-- Invariants: the fence (a trigger refusing writes of the moved genes with IG002) is up
-- before the last marker is written, so every write of the moved genes the source
-- committed is before the marker; the moved partitions are dropped only after the routes
-- point at the target.

-- Source of a move --------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION id_gen.refuse_moving_rows() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF TG_NARGS >= 4 AND TG_ARGV[3] = 'incoming' THEN
    RAISE EXCEPTION 'id_gen: the genes of % are not owned by this shard yet: they are being moved here from shard "%" (move %)',
                    TG_TABLE_NAME, TG_ARGV[1], TG_ARGV[0]
      USING ERRCODE = 'IG002',
            DETAIL = 'Until the move cuts over, shard "' || TG_ARGV[1] || '" owns them; this copy takes no writes of its own.',
            HINT = 'Write through the coordinator, or re-read the routes (id_gen.route_map) and retry on the owner.';
  END IF;
  RAISE EXCEPTION 'id_gen: the rows of % are moving to shard "%" (move %)', TG_TABLE_NAME, TG_ARGV[1], TG_ARGV[0]
    USING ERRCODE = 'IG002',
          DETAIL = 'The genes are fenced for a cut-over; it takes milliseconds.',
          HINT = 'Through the coordinator these writes wait (milliseconds); an application that routes by itself retries after a short wait (5 to 50 ms, growing), re-reading the routes (id_gen.route_map) if it persists. The fence is lifted or the genes change shard within seconds.';
END $$;
COMMENT ON FUNCTION id_gen.refuse_moving_rows() IS 'Trigger that fences the source partition of a move (or the target of a revert), and the target''s incoming partitions from the copy until the cut-over: direct writes fail with IG002 (retry shortly) until the partition is detached or the fence lifted; reads that select it by id fail the same way (the routing guard). Replication (the copy and the apply) does not fire it.';

-- parts: qualified names of the moved partitions; id_columns, lower_genes, upper_genes: per part.
-- A publication of the rows of a move's genes (the move's, or the way back of a reversible
-- one): each shard table named with a row filter on the id (the replica identity holds it),
-- and the move's markers. Nothing when it exists already.
CREATE OR REPLACE FUNCTION id_gen.publish_moved_rows(pub name, move_id bigint, parts text[], id_columns name[],
                                                     lower_genes integer[], upper_genes integer[]) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  rels regclass[] := id_gen.shard_relations(parts, true);
  items text;
BEGIN
  IF EXISTS (SELECT FROM pg_publication p WHERE p.pubname = pub) THEN
    RETURN 'exists';
  END IF;
  FOR i IN 1 .. cardinality(rels) LOOP
    PERFORM id_gen.refuse_untrusted_table(rels[i], 'move shard table');
  END LOOP;
  SELECT string_agg(format('%s WHERE (%I OPERATOR(pg_catalog.>=) %s AND %I OPERATOR(pg_catalog.<=) %s)', rels[i],
                           id_columns[i], id_gen.gene_first_id(lower_genes[i]),
                           id_columns[i], id_gen.gene_last_id(upper_genes[i])), ', ' ORDER BY i)
    INTO items
  FROM generate_subscripts(rels, 1) i;
  -- A table of rows (layout by ownership) holds other genes' rows too, and a TRUNCATE
  -- ignores row filters: it would empty the subscriber's whole table. Such a publication
  -- leaves TRUNCATE out (a TRUNCATE on the publisher during the move is then not carried).
  EXECUTE format('CREATE PUBLICATION %I FOR TABLE %s, id_gen.move_markers WHERE (move_id OPERATOR(pg_catalog.=) %s)%s',
                 pub, items, move_id,
                 CASE WHEN EXISTS (SELECT FROM pg_trigger t WHERE t.tgrelid = ANY (rels::oid[]) AND t.tgname = 'id_gen_owned_rows')
                      THEN ' WITH (publish = ''insert, update, delete'')' ELSE '' END);
  RETURN 'created';
END $$;
COMMENT ON FUNCTION id_gen.publish_moved_rows(name, bigint, text[], name[], integer[], integer[]) IS 'On a shard of a move: creates publication pub of the shard tables named (a row filter on each one''s id, between the first id of its lower gene and the last of its upper gene; no TRUNCATE when one is a table of rows) and the move''s markers, unless it exists.';
REVOKE EXECUTE ON FUNCTION id_gen.publish_moved_rows(name, bigint, text[], name[], integer[], integer[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.shard_create_publication(move_id bigint, parts text[], id_columns name[],
                                                           lower_genes integer[], upper_genes integer[]) RETURNS text
LANGUAGE sql STRICT
SET search_path = pg_catalog, pg_temp
RETURN id_gen.publish_moved_rows(('id_gen_move_' OPERATOR(pg_catalog.||) move_id)::name, move_id, parts, id_columns, lower_genes, upper_genes);
COMMENT ON FUNCTION id_gen.shard_create_publication(bigint, text[], name[], integer[], integer[]) IS 'On the source of a move: publishes the moved partitions and tables of rows (row filter on the id, the replica identity) and the move''s markers.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_create_publication(bigint, text[], name[], integer[], integer[]) FROM PUBLIC;

-- The slot is created here, not by CREATE SUBSCRIPTION, so that the subscription's
-- command never needs to run at top level with its connection string.
CREATE OR REPLACE FUNCTION id_gen.shard_create_slot(move_id bigint) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  slot name := 'id_gen_move_' || move_id;
BEGIN
  IF EXISTS (SELECT FROM pg_replication_slots s WHERE s.slot_name = slot) THEN
    RAISE EXCEPTION 'id_gen: a replication slot named % exists already on this shard', slot
      USING ERRCODE = '42710',
            HINT = 'id_gen neither uses nor drops a slot it did not create. Drop it (pg_drop_replication_slot) if it is a leftover, then resume the move.';
  END IF;
  IF current_setting('server_version_num')::integer >= 170000 THEN
    -- PostgreSQL 17+: a failover slot, which standbys with sync_replication_slots keep in
    -- step, so that a move survives a failover of its source.
    EXECUTE 'SELECT pg_catalog.pg_create_logical_replication_slot($1, $2, failover => true)' USING slot, 'pgoutput';
  ELSE
    PERFORM pg_create_logical_replication_slot(slot, 'pgoutput');
  END IF;
  RETURN slot;
END $$;
COMMENT ON FUNCTION id_gen.shard_create_slot(bigint) IS 'On the source of a move: creates its logical replication slot (42710 if one of that name exists: it is never taken over); from PostgreSQL 17 on a failover slot.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_create_slot(bigint) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.shard_move_lag(move_id bigint) RETURNS bigint
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  SELECT coalesce((pg_current_wal_lsn() OPERATOR(pg_catalog.-) s.confirmed_flush_lsn)::bigint, -1)
  FROM pg_replication_slots s WHERE s.slot_name OPERATOR(pg_catalog.=) ('id_gen_move_' OPERATOR(pg_catalog.||) move_id);
END;
COMMENT ON FUNCTION id_gen.shard_move_lag(bigint) IS 'On the source of a move: bytes of WAL its slot has not confirmed (NULL without the slot).';
REVOKE EXECUTE ON FUNCTION id_gen.shard_move_lag(bigint) FROM PUBLIC;

-- The fence trigger on each partition of parts (waiting at most 2 s for writers and route
-- claims in flight). Its arguments: the move, the other shard (where the rows go, or come
-- from when incoming), the id column's number (for the routing guard) and, on a move's
-- target, 'incoming'.
CREATE OR REPLACE FUNCTION id_gen.put_fence(move_id bigint, other_shard text, parts text[], incoming boolean) RETURNS integer
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  rel regclass;
  n integer := 0;
BEGIN
  PERFORM set_config('lock_timeout', '2s', true);
  -- (A target's partitions that do not exist yet hold nothing to fence: a move still
  -- planned, whose session died before it created them.)
  FOREACH rel IN ARRAY id_gen.shard_relations(parts, NOT incoming) LOOP
    EXECUTE format('CREATE OR REPLACE TRIGGER id_gen_move_fence BEFORE INSERT OR UPDATE OR DELETE ON %s '
                   'FOR EACH ROW EXECUTE FUNCTION id_gen.refuse_moving_rows(%L, %L, %L%s)', rel, move_id, other_shard,
                   coalesce(id_gen.partition_key_attnum(rel), 0), CASE WHEN incoming THEN ', ''incoming''' ELSE '' END);
    EXECUTE format('ALTER TABLE %s ENABLE TRIGGER id_gen_move_fence', rel);
    n := n + 1;
  END LOOP;
  RETURN n;
END $$;
COMMENT ON FUNCTION id_gen.put_fence(bigint, text, text[], boolean) IS 'On a shard: puts the fence trigger (id_gen.refuse_moving_rows) on each partition of parts; incoming marks a move''s target, which does not own the genes yet.';
REVOKE EXECUTE ON FUNCTION id_gen.put_fence(bigint, text, text[], boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.shard_fence(move_id bigint, target_shard text, parts text[]) RETURNS integer
LANGUAGE sql STRICT
SET search_path = pg_catalog, pg_temp
RETURN id_gen.put_fence(move_id, target_shard, parts, false);
COMMENT ON FUNCTION id_gen.shard_fence(bigint, text, text[]) IS 'On the source of a move: a trigger on each moved partition refuses direct writes, and the routing guard reads that select it by id (IG002); creating it waits for writers and route claims in flight (at most 2 s).';
REVOKE EXECUTE ON FUNCTION id_gen.shard_fence(bigint, text, text[]) FROM PUBLIC;

-- On the target of a move, right after its partitions are created: the genes are not its
-- own until the cut-over (the source holds them and the coordinator routes there), so its
-- copies refuse direct writes, route claims and reads by id (IG002) like a fenced source.
-- The subscription's copy and apply do not fire the trigger (ENABLE, not ALWAYS).
CREATE OR REPLACE FUNCTION id_gen.shard_fence_incoming(move_id bigint, source_shard text, parts text[]) RETURNS integer
LANGUAGE sql STRICT
SET search_path = pg_catalog, pg_temp
RETURN id_gen.put_fence(move_id, source_shard, parts, true);
COMMENT ON FUNCTION id_gen.shard_fence_incoming(bigint, text, text[]) IS 'On the target of a move: its partitions of the moved genes refuse direct writes, route claims and reads by id (IG002) until the cut-over lifts the fence; replication still fills them.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_fence_incoming(bigint, text, text[]) FROM PUBLIC;

-- Hidden copies (the target of a move of per_shard tables). The coordinator's foreign table
-- of a per_shard table reads a shard's whole table, so until the cut-over the target's
-- incoming partitions of such a table must not be part of it (their rows would be read from
-- both shards). They are created as partitions (the parent's columns, indexes, defaults),
-- given a CHECK equal to their bound (id_gen_incoming_bound: attaching them again needs no
-- scan) and detached, keeping their names, which the subscription applies to. The fence
-- attaches them (shard_show_incoming) and, if it fails, hides them again; the CHECK goes
-- when the move has cut over (shard_settle_incoming), or the tables when it is rolled back
-- (shard_drop_hidden). shard_apply_ranges leaves a hidden copy alone.
CREATE OR REPLACE FUNCTION id_gen.shard_hide_incoming(move_id bigint, parts text[]) RETURNS integer
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
  FOREACH rel IN ARRAY id_gen.shard_relations(parts, false) LOOP
    SELECT x.inhparent::regclass INTO parent FROM pg_inherits x WHERE x.inhrelid = rel;
    CONTINUE WHEN parent IS NULL;
    -- The parent first, as every statement locks them (the DETACH below needs it anyway): the
    -- CHECK locks the partition, and a reader of the whole table that holds the parent and
    -- waits for the partition would otherwise deadlock with us.
    EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', parent);
    IF NOT EXISTS (SELECT FROM pg_constraint c WHERE c.conrelid = rel AND c.conname = 'id_gen_incoming_bound') THEN
      EXECUTE format('ALTER TABLE %s ADD CONSTRAINT id_gen_incoming_bound CHECK (%s)', rel, pg_get_partition_constraintdef(rel));
    END IF;
    EXECUTE format('ALTER TABLE %s DETACH PARTITION %s', parent, rel);
    EXECUTE format('COMMENT ON TABLE %s IS %L', rel,
                   format('id_gen: incoming copy of move %s, hidden from %s until the move cuts over', move_id, parent));
    n := n + 1;
  END LOOP;
  IF n > 0 THEN
    PERFORM id_gen.shard_routing_changed();
  END IF;
  RETURN n;
END $$;
COMMENT ON FUNCTION id_gen.shard_hide_incoming(bigint, text[]) IS 'On the target of a move of per_shard tables: detaches the incoming partitions (keeping their names, with a CHECK of their bounds), so that the shard''s table, which the coordinator reads whole, does not show them before the cut-over; idempotent.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_hide_incoming(bigint, text[]) FROM PUBLIC;

-- A detached partition of a move joins its table again: the distributed table on this shard
-- whose partition of genes lower_gene .. upper_gene bears rel's name (55000 when none).
-- Returns that table. (Hidden copies, a failed fence's source, a reverted move's kept
-- partitions.)
CREATE OR REPLACE FUNCTION id_gen.attach_moved_part(rel regclass, lower_gene integer, upper_gene integer) RETURNS regclass
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  parent regclass;
BEGIN
  SELECT format('%I.%I', t.schema_name, t.table_name)::regclass INTO parent
  FROM id_gen.shard_tables t JOIN pg_class c ON c.oid = rel JOIN pg_namespace ns ON ns.oid = c.relnamespace
  WHERE t.schema_name = ns.nspname AND id_gen.partition_name(t.stem, lower_gene, upper_gene) = c.relname;
  IF parent IS NULL THEN
    RAISE EXCEPTION 'id_gen: no distributed table on this shard owns %', rel USING ERRCODE = '55000';
  END IF;
  EXECUTE format('ALTER TABLE %s ATTACH PARTITION %s FOR VALUES %s', parent, rel, id_gen.partition_bounds(lower_gene, upper_gene));
  RETURN parent;
END $$;
COMMENT ON FUNCTION id_gen.attach_moved_part(regclass, integer, integer) IS 'On a shard: attaches a partition that a move detached (rel, of genes lower_gene .. upper_gene) to the distributed table whose partition name it bears; returns that table.';
REVOKE EXECUTE ON FUNCTION id_gen.attach_moved_part(regclass, integer, integer) FROM PUBLIC;

-- In the fence of a move of per_shard tables: the hidden copies join their tables (no scan:
-- their CHECK implies the bounds; the tombstone, empty, is checked). Idempotent.
CREATE OR REPLACE FUNCTION id_gen.shard_show_incoming(move_id bigint, parts text[], lower_genes integer[],
                                                      upper_genes integer[]) RETURNS integer
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  rel regclass;
  parent regclass;
  n integer := 0;
BEGIN
  PERFORM set_config('lock_timeout', '2s', true);
  PERFORM id_gen.quiet_ddl();
  FOR i IN 1 .. cardinality(parts) LOOP
    rel := to_regclass(parts[i]);
    IF rel IS NULL THEN
      RAISE EXCEPTION 'id_gen: the incoming copy % of move % is missing on this shard', parts[i], move_id USING ERRCODE = '55000';
    END IF;
    CONTINUE WHEN EXISTS (SELECT FROM pg_inherits x WHERE x.inhrelid = rel);
    parent := id_gen.attach_moved_part(rel, lower_genes[i], upper_genes[i]);
    EXECUTE format('COMMENT ON TABLE %s IS %L', rel,
                   format('id_gen: genes %s .. %s of %s on this shard (kept by the coordinator)', lower_genes[i], upper_genes[i], parent));
    n := n + 1;
  END LOOP;
  IF n > 0 THEN
    PERFORM id_gen.shard_routing_changed();
  END IF;
  RETURN n;
END $$;
COMMENT ON FUNCTION id_gen.shard_show_incoming(bigint, text[], integer[], integer[]) IS 'On the target of a move of per_shard tables, in its fence: attaches the hidden incoming copies to their tables (no scan; their move fence stays until the coordinator''s flip); idempotent.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_show_incoming(bigint, text[], integer[], integer[]) FROM PUBLIC;

-- After the cut-over: the CHECK of a shown copy goes (a later merge may widen its bounds).
CREATE OR REPLACE FUNCTION id_gen.shard_settle_incoming(parts text[]) RETURNS integer
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  rel regclass;
  n integer := 0;
BEGIN
  PERFORM set_config('lock_timeout', '5s', true);
  FOREACH rel IN ARRAY id_gen.shard_relations(parts, false) LOOP
    IF EXISTS (SELECT FROM pg_constraint c WHERE c.conrelid = rel AND c.conname = 'id_gen_incoming_bound')
       AND EXISTS (SELECT FROM pg_inherits x WHERE x.inhrelid = rel) THEN
      EXECUTE format('ALTER TABLE %s DROP CONSTRAINT id_gen_incoming_bound', rel);
      n := n + 1;
    END IF;
  END LOOP;
  RETURN n;
END $$;
COMMENT ON FUNCTION id_gen.shard_settle_incoming(text[]) IS 'On the target of a move of per_shard tables after its cut-over: drops the bound CHECK of the copies, now partitions.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_settle_incoming(text[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.is_hidden_copy(rel regclass) RETURNS boolean
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  SELECT NOT EXISTS (SELECT FROM pg_catalog.pg_inherits x WHERE x.inhrelid OPERATOR(pg_catalog.=) rel)
     AND EXISTS (SELECT FROM pg_catalog.pg_constraint c
                 WHERE c.conrelid OPERATOR(pg_catalog.=) rel AND c.conname OPERATOR(pg_catalog.=) 'id_gen_incoming_bound');
END;
COMMENT ON FUNCTION id_gen.is_hidden_copy(regclass) IS 'On a shard: whether rel is the hidden incoming copy of a move (not a partition, with the id_gen_incoming_bound CHECK).';
REVOKE EXECUTE ON FUNCTION id_gen.is_hidden_copy(regclass) FROM PUBLIC;

-- A rolled-back move: its hidden copies go (only tables that are still hidden copies).
CREATE OR REPLACE FUNCTION id_gen.shard_drop_hidden(parts text[]) RETURNS integer
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  rel regclass;
  n integer := 0;
BEGIN
  PERFORM set_config('lock_timeout', '5s', true);
  FOREACH rel IN ARRAY id_gen.shard_relations(parts, false) LOOP
    IF id_gen.is_hidden_copy(rel) THEN
      EXECUTE format('DROP TABLE %s', rel);
      n := n + 1;
    END IF;
  END LOOP;
  RETURN n;
END $$;
COMMENT ON FUNCTION id_gen.shard_drop_hidden(text[]) IS 'On the target of a rolled-back move of per_shard tables: drops its hidden incoming copies.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_drop_hidden(text[]) FROM PUBLIC;


-- In a failed fence or its recovery: the source's partitions that the fence detached
-- (renamed by shard_detach_moved) join their tables again, under their names. The bounds
-- are checked by a scan: this is the failure path only (the detach is the fence's last
-- remote step, so only a coordinator that dies before its COMMIT leads here). Idempotent.
CREATE OR REPLACE FUNCTION id_gen.shard_reattach_moved(move_id bigint, parts text[], lower_genes integer[],
                                                       upper_genes integer[]) RETURNS integer
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  rel regclass;
  s name;
  n integer := 0;
BEGIN
  PERFORM set_config('lock_timeout', '5s', true);
  PERFORM id_gen.quiet_ddl();
  FOR i IN 1 .. cardinality(parts) LOOP
    s := (parse_ident(parts[i]))[1];
    rel := to_regclass(format('%I.%I', s, id_gen.moved_partition_name(move_id, parts[i])));
    CONTINUE WHEN rel IS NULL;
    IF to_regclass(parts[i]) IS NOT NULL THEN
      RAISE EXCEPTION 'id_gen: % exists again on this shard; the detached partition of move % stays %', parts[i], move_id, rel
        USING ERRCODE = '55000';
    END IF;
    EXECUTE format('ALTER TABLE %s RENAME TO %I', rel, (parse_ident(parts[i]))[2]);
    PERFORM id_gen.attach_moved_part(rel, lower_genes[i], upper_genes[i]);
    n := n + 1;
  END LOOP;
  IF n > 0 THEN
    PERFORM id_gen.shard_routing_changed();
  END IF;
  RETURN n;
END $$;
COMMENT ON FUNCTION id_gen.shard_reattach_moved(bigint, text[], integer[], integer[]) IS 'On the source of a move of per_shard tables whose fence failed after detaching its partitions: renames them back and attaches them again (their move fence stays until it is lifted); idempotent.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_reattach_moved(bigint, text[], integer[], integer[]) FROM PUBLIC;

-- DISABLE takes SHARE ROW EXCLUSIVE: long readers of the partition do not block it (DROP
-- TRIGGER would need ACCESS EXCLUSIVE). Partitions already detached are skipped.
CREATE OR REPLACE FUNCTION id_gen.shard_unfence(parts text[]) RETURNS integer
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  rel regclass;
  n integer := 0;
BEGIN
  PERFORM set_config('lock_timeout', '5s', true);
  FOREACH rel IN ARRAY id_gen.shard_relations(parts, false) LOOP
    IF EXISTS (SELECT FROM pg_trigger t WHERE t.tgname = 'id_gen_move_fence' AND t.tgrelid = rel AND t.tgenabled <> 'D') THEN
      EXECUTE format('ALTER TABLE %s DISABLE TRIGGER id_gen_move_fence', rel);
      n := n + 1;
    END IF;
  END LOOP;
  RETURN n;
END $$;
COMMENT ON FUNCTION id_gen.shard_unfence(text[]) IS 'On the source of a move, or on its target at the cut-over: lifts the fence (disables the fence triggers).';
REVOKE EXECUTE ON FUNCTION id_gen.shard_unfence(text[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.shard_write_marker(move_id bigint, marker bigint) RETURNS void
LANGUAGE sql STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  INSERT INTO id_gen.move_markers (move_id, marker) VALUES (move_id, marker);
END;
COMMENT ON FUNCTION id_gen.shard_write_marker(bigint, bigint) IS 'On the source of a move: writes a marker row, awaited on the target.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_write_marker(bigint, bigint) FROM PUBLIC;

-- The moved partitions leave the source's table: detached and renamed
-- id_gen_moved_<move>_<hash> (idempotent; a resumed move may have done some already).
CREATE OR REPLACE FUNCTION id_gen.moved_partition_name(move_id bigint, part text) RETURNS name
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN ('id_gen_moved_' OPERATOR(pg_catalog.||) move_id OPERATOR(pg_catalog.||) '_'
        OPERATOR(pg_catalog.||) pg_catalog.left(pg_catalog.md5(part), 12))::name;
COMMENT ON FUNCTION id_gen.moved_partition_name(bigint, text) IS 'Name a source partition gets when a move detaches it (kept with keep_source).';

CREATE OR REPLACE FUNCTION id_gen.shard_detach_moved(move_id bigint, parts text[]) RETURNS integer
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  p text;
  rel regclass;
  parent regclass;
  n integer := 0;
BEGIN
  PERFORM set_config('lock_timeout', '5s', true);
  FOREACH p IN ARRAY parts LOOP
    rel := to_regclass(p);
    CONTINUE WHEN rel IS NULL;
    SELECT i.inhparent::regclass INTO parent FROM pg_inherits i WHERE i.inhrelid = rel;
    CONTINUE WHEN parent IS NULL;
    EXECUTE format('ALTER TABLE %s DETACH PARTITION %s', parent, rel);
    EXECUTE format('ALTER TABLE %s RENAME TO %I', rel, id_gen.moved_partition_name(move_id, p));
    n := n + 1;
  END LOOP;
  PERFORM id_gen.shard_routing_changed();
  RETURN n;
END $$;
COMMENT ON FUNCTION id_gen.shard_detach_moved(bigint, text[]) IS 'On the source of a move after its cut-over: detaches the moved partitions (direct writes and id reads of those genes then get IG001 there, from the tombstone) and renames them id_gen_moved_<move>_<hash>.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_detach_moved(bigint, text[]) FROM PUBLIC;

-- Whether a fence of a move of per_shard tables left this shard re-laid: a copy of parts
-- attached here with its bound CHECK (the target showed it; or, in a revert's fence, the
-- source showed its kept partition, with the CHECK id_gen_kept_bound), or a part detached
-- and renamed by the move (the source let it go; or, in a revert's fence, the target). The
-- coordinator locks its tables to undo it only then.
CREATE OR REPLACE FUNCTION id_gen.shard_relayout_pending(move_id bigint, parts text[]) RETURNS boolean
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  SELECT EXISTS (SELECT FROM pg_catalog.unnest(parts) p
                 WHERE (pg_catalog.to_regclass(p) IS NOT NULL
                        AND EXISTS (SELECT FROM pg_catalog.pg_inherits x WHERE x.inhrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(p))
                        AND EXISTS (SELECT FROM pg_catalog.pg_constraint c
                                    WHERE c.conrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(p)
                                      AND c.conname OPERATOR(pg_catalog.=) ANY ('{id_gen_incoming_bound,id_gen_kept_bound}')))
                    OR (pg_catalog.to_regclass(p) IS NULL
                        AND pg_catalog.to_regclass(pg_catalog.format('%I.%I', (pg_catalog.parse_ident(p))[1],
                                                                     id_gen.moved_partition_name(move_id, p))) IS NOT NULL));
END;
COMMENT ON FUNCTION id_gen.shard_relayout_pending(bigint, text[]) IS 'On a shard: whether the fence of a move (or of a revert) of per_shard tables left it re-laid (a copy of parts, or a kept partition, attached with its bound CHECK, or a part detached and renamed by the move), which the coordinator must undo if the flip did not commit.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_relayout_pending(bigint, text[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.shard_drop_moved(move_id bigint, parts text[], drop_tables boolean) RETURNS integer
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  p text;
  n integer := 0;
  s name;
BEGIN
  IF drop_tables THEN
    FOREACH p IN ARRAY parts LOOP
      s := (parse_ident(p))[1];
      IF to_regclass(format('%I.%I', s, id_gen.moved_partition_name(move_id, p))) IS NOT NULL THEN
        EXECUTE format('DROP TABLE %I.%I', s, id_gen.moved_partition_name(move_id, p));
        n := n + 1;
      END IF;
    END LOOP;
  END IF;
  DELETE FROM id_gen.move_markers m WHERE m.move_id = shard_drop_moved.move_id;
  RETURN n;
END $$;
COMMENT ON FUNCTION id_gen.shard_drop_moved(bigint, text[], boolean) IS 'On the source of a move: drops its detached partitions (unless keep_source) and its markers.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_drop_moved(bigint, text[], boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.shard_drop_publication(move_id bigint) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  EXECUTE format('DROP PUBLICATION IF EXISTS %I', 'id_gen_move_' || move_id);
END $$;
COMMENT ON FUNCTION id_gen.shard_drop_publication(bigint) IS 'On the source of a move: drops its publication.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_drop_publication(bigint) FROM PUBLIC;

-- Slots of a move: its own (only if it created it) and the table-sync slots of its
-- subscription (pg_<subscription oid>_sync_<relid>_<subscriber system id>). A walsender
-- still holding one is terminated first; returns how many are left.
CREATE OR REPLACE FUNCTION id_gen.shard_drop_move_slots(move_id bigint, own_slot boolean, subscription_oid oid,
                                                        subscriber_system_id text) RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  s record;
BEGIN
  -- (subscription_oid and subscriber_system_id are NULL for a move that never subscribed.)
  IF move_id IS NULL OR own_slot IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "%" must not be NULL', CASE WHEN move_id IS NULL THEN 'move_id' ELSE 'own_slot' END
      USING ERRCODE = '22004';
  END IF;
  FOR s IN SELECT r.slot_name, r.active, r.active_pid FROM pg_replication_slots r
           WHERE (own_slot AND r.slot_name = 'id_gen_move_' || move_id)
              OR (subscription_oid IS NOT NULL AND subscriber_system_id IS NOT NULL
                  AND r.slot_name LIKE 'pg\_' || subscription_oid || '\_sync\_%\_' || subscriber_system_id) LOOP
    IF s.active THEN
      PERFORM pg_terminate_backend(s.active_pid);
    ELSE
      PERFORM pg_drop_replication_slot(s.slot_name);
    END IF;
  END LOOP;
  RETURN (SELECT count(*) FROM pg_replication_slots r
          WHERE (own_slot AND r.slot_name = 'id_gen_move_' || move_id)
             OR (subscription_oid IS NOT NULL AND subscriber_system_id IS NOT NULL
                 AND r.slot_name LIKE 'pg\_' || subscription_oid || '\_sync\_%\_' || subscriber_system_id));
END $$;
COMMENT ON FUNCTION id_gen.shard_drop_move_slots(bigint, boolean, oid, text) IS 'On the source of a move: drops the replication slots the move created (its own only when own_slot, and the table-sync slots of its subscription); returns how many are left.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_drop_move_slots(bigint, boolean, oid, text) FROM PUBLIC;

-- Target of a move ----------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION id_gen.shard_system_id() RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN (SELECT system_identifier::text FROM pg_control_system());
COMMENT ON FUNCTION id_gen.shard_system_id() IS 'This server''s system identifier (names of table-sync slots carry the subscriber''s).';
REVOKE EXECUTE ON FUNCTION id_gen.shard_system_id() FROM PUBLIC;

-- Creates the subscription from the connection string the coordinator left in
-- id_gen.move_secrets, without connecting (so it can run here, in a function: the
-- command with the password is never a top-level statement, and an error is re-raised
-- without it). Enabling and the initial copy follow (shard_enable_subscription, then
-- ALTER SUBSCRIPTION ... REFRESH PUBLICATION at top level).
-- Creates subscription `tag` (publication and slot of the same name, which exists; not
-- enabled) from the connection string the coordinator left in id_gen.move_secrets, then
-- forgets that string. The password never appears in a statement text, log line, error or
-- pg_stat_statements (whatever its track setting).
-- A move's subscription does not connect (its tables come with REFRESH ... copy_data);
-- the way back of a reversible move (way_back: subscription id_gen_back_<id>) connects to
-- read its tables, which are ready at once (copy_data = false), so no change streamed later
-- is skipped, and is enabled. Either refuses tables whose code an ordinary role controls
-- (the apply worker would run it as a superuser). Returns the subscription's oid.
CREATE OR REPLACE FUNCTION id_gen.subscribe_with_secret(move_id bigint, parts text[], way_back boolean) RETURNS oid
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  tag name := CASE WHEN way_back THEN 'id_gen_back_' ELSE 'id_gen_move_' END || move_id;
  rel regclass;
  conn text;
  msg text;
  code text;
BEGIN
  FOREACH rel IN ARRAY id_gen.shard_relations(parts, true) LOOP
    PERFORM id_gen.refuse_untrusted_table(rel, 'shard table');
  END LOOP;
  IF NOT EXISTS (SELECT FROM pg_subscription s WHERE s.subname = tag) THEN
    SELECT s.conninfo INTO conn FROM id_gen.move_secrets s WHERE s.move_id = subscribe_with_secret.move_id;
    IF conn IS NULL THEN
      RAISE EXCEPTION 'id_gen: move %: no connection string for its subscription was left on this shard', move_id
        USING ERRCODE = '55000', HINT = 'Resume the move from the coordinator (it writes it again).';
    END IF;
    BEGIN
      -- CREATE SUBSCRIPTION ... connect = false warns that it is not connected, and a
      -- logged WARNING would carry this statement (with the password) as its CONTEXT.
      -- (Both settings end with this transaction, which is this call.)
      PERFORM set_config('client_min_messages', 'error', true);
      PERFORM set_config('log_min_messages', 'error', true);
      -- pg_stat_statements with track = all keeps nested statements with their text,
      -- readable by pg_read_all_stats: this one is not tracked (a placeholder setting
      -- where the module is not loaded).
      PERFORM set_config('pg_stat_statements.track', 'none', true);
      IF way_back THEN
        EXECUTE format('CREATE SUBSCRIPTION %I CONNECTION %L PUBLICATION %I WITH (create_slot = false, slot_name = %L, '
                       'copy_data = false, enabled = false)', tag, conn, tag, tag);
      ELSE
        EXECUTE format('CREATE SUBSCRIPTION %I CONNECTION %L PUBLICATION %I WITH (connect = false, slot_name = %L)',
                       tag, conn, tag, tag);
      END IF;
    EXCEPTION WHEN OTHERS THEN
      -- The statement carried the password: re-raise without it (no CONTEXT of that statement).
      GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT, code = RETURNED_SQLSTATE;
      RAISE EXCEPTION 'id_gen: move %: could not create subscription %: %', move_id, tag, msg USING ERRCODE = code;
    END;
  END IF;
  DELETE FROM id_gen.move_secrets s WHERE s.move_id = subscribe_with_secret.move_id;
  RETURN (SELECT s.oid FROM pg_subscription s WHERE s.subname = tag);
END $$;
COMMENT ON FUNCTION id_gen.subscribe_with_secret(bigint, text[], boolean) IS 'Creates a move''s subscription (publication and slot of the same name; not enabled) for the shard tables of parts, from the connection string in id_gen.move_secrets, which it then deletes; way_back: the way back of a reversible move, connected, its tables taken as ready. Returns its oid.';
REVOKE EXECUTE ON FUNCTION id_gen.subscribe_with_secret(bigint, text[], boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.shard_subscribe(move_id bigint, parts text[]) RETURNS oid
LANGUAGE sql STRICT
SET search_path = pg_catalog, pg_temp
RETURN id_gen.subscribe_with_secret(move_id, parts, false);
COMMENT ON FUNCTION id_gen.shard_subscribe(bigint, text[]) IS 'On the target of a move: creates its subscription (not yet connected) from the connection string in id_gen.move_secrets, then forgets that string.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_subscribe(bigint, text[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.shard_enable_subscription(move_id bigint) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF EXISTS (SELECT FROM pg_subscription s WHERE s.subname = 'id_gen_move_' || move_id AND NOT s.subenabled) THEN
    EXECUTE format('ALTER SUBSCRIPTION %I ENABLE', 'id_gen_move_' || move_id);
  END IF;
END $$;
COMMENT ON FUNCTION id_gen.shard_enable_subscription(bigint) IS 'On the target of a move: enables its subscription.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_enable_subscription(bigint) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.shard_subscription_state(move_id bigint) RETURNS text
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  SELECT count(*) FILTER (WHERE sr.srsubstate OPERATOR(pg_catalog.<>) 'r') OPERATOR(pg_catalog.||) '/'
         OPERATOR(pg_catalog.||) count(*)
  FROM pg_subscription_rel sr JOIN pg_subscription s ON s.oid OPERATOR(pg_catalog.=) sr.srsubid
  WHERE s.subname OPERATOR(pg_catalog.=) ('id_gen_move_' OPERATOR(pg_catalog.||) move_id);
END;
COMMENT ON FUNCTION id_gen.shard_subscription_state(bigint) IS 'On the target of a move: tables of its subscription not yet ready / all of them.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_subscription_state(bigint) FROM PUBLIC;

-- Progress without counting: rows the table sync committed, plus those of a COPY running now.
CREATE OR REPLACE FUNCTION id_gen.shard_rows_copied(parts text[]) RETURNS bigint
LANGUAGE plpgsql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  rels regclass[] := id_gen.shard_relations(parts, false);
BEGIN
  RETURN (SELECT coalesce(sum(n_tup_ins), 0) FROM pg_stat_user_tables WHERE relid = ANY (rels::oid[]))
       + (SELECT coalesce(sum(tuples_processed), 0) FROM pg_stat_progress_copy WHERE relid = ANY (rels::oid[]));
END $$;
COMMENT ON FUNCTION id_gen.shard_rows_copied(text[]) IS 'On the target of a move: rows its table sync has written so far.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_rows_copied(text[]) FROM PUBLIC;

-- On the target of a move: how many times its subscription stopped on an error (a move
-- whose probe marker does not arrive says so in its hint); NULL without the subscription.
CREATE OR REPLACE FUNCTION id_gen.shard_move_apply_errors(move_id bigint) RETURNS bigint
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  SELECT s.apply_error_count FROM pg_stat_subscription_stats s
  WHERE s.subname OPERATOR(pg_catalog.=) ('id_gen_move_' OPERATOR(pg_catalog.||) move_id);
END;
COMMENT ON FUNCTION id_gen.shard_move_apply_errors(bigint) IS 'On the target of a move: how many times the move''s subscription stopped on an error (pg_stat_subscription_stats.apply_error_count; NULL without it).';
REVOKE EXECUTE ON FUNCTION id_gen.shard_move_apply_errors(bigint) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.shard_has_marker(move_id bigint, marker bigint) RETURNS boolean
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  SELECT EXISTS (SELECT FROM id_gen.move_markers m
                 WHERE m.move_id OPERATOR(pg_catalog.=) shard_has_marker.move_id
                   AND m.marker OPERATOR(pg_catalog.=) shard_has_marker.marker);
END;
COMMENT ON FUNCTION id_gen.shard_has_marker(bigint, bigint) IS 'On the target of a move: whether a marker has arrived.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_has_marker(bigint, bigint) FROM PUBLIC;

-- Before DROP SUBSCRIPTION on a target whose source is gone: the slot is not touched.
CREATE OR REPLACE FUNCTION id_gen.shard_detach_subscription(move_id bigint) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  tag name := 'id_gen_move_' || move_id;
BEGIN
  IF EXISTS (SELECT FROM pg_subscription s WHERE s.subname = tag) THEN
    EXECUTE format('ALTER SUBSCRIPTION %I DISABLE', tag);
    EXECUTE format('ALTER SUBSCRIPTION %I SET (slot_name = NONE)', tag);
  END IF;
  DELETE FROM id_gen.move_secrets s WHERE s.move_id = shard_detach_subscription.move_id;
END $$;
COMMENT ON FUNCTION id_gen.shard_detach_subscription(bigint) IS 'On the target of a move: disables its subscription and lets go of the slot, so that it can be dropped without reaching the source (the source drops the slot itself).';
REVOKE EXECUTE ON FUNCTION id_gen.shard_detach_subscription(bigint) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.shard_empty_partitions(parts text[]) RETURNS integer
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  rel regclass;
  n integer := 0;
BEGIN
  FOREACH rel IN ARRAY id_gen.shard_relations(parts, false) LOOP
    EXECUTE format('TRUNCATE %s', rel);
    n := n + 1;
  END LOOP;
  RETURN n;
END $$;
COMMENT ON FUNCTION id_gen.shard_empty_partitions(text[]) IS 'On the target of an aborted move: empties the partitions the copy filled.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_empty_partitions(text[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.shard_forget_markers(move_id bigint) RETURNS void
LANGUAGE sql STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  DELETE FROM id_gen.move_markers m WHERE m.move_id OPERATOR(pg_catalog.=) shard_forget_markers.move_id;
END;
COMMENT ON FUNCTION id_gen.shard_forget_markers(bigint) IS 'Deletes the marker rows of a move.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_forget_markers(bigint) FROM PUBLIC;

-- Sequences: the target's high-water mark goes above the source's.
CREATE OR REPLACE FUNCTION id_gen.shard_sequence_high(sequence text) RETURNS bigint
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  SELECT s.max_id FROM id_gen.sequences s
  WHERE s.name OPERATOR(pg_catalog.=) shard_sequence_high.sequence AND s.authority IS NULL;
END;
COMMENT ON FUNCTION id_gen.shard_sequence_high(text) IS 'The high-water mark of a local sequence on this shard (NULL for authority-backed or missing ones).';
REVOKE EXECUTE ON FUNCTION id_gen.shard_sequence_high(text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.shard_raise_sequence(sequence text, high bigint) RETURNS void
LANGUAGE sql STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  UPDATE id_gen.sequences s SET max_id = GREATEST(s.max_id, high)
  WHERE s.name OPERATOR(pg_catalog.=) shard_raise_sequence.sequence AND s.authority IS NULL;
END;
COMMENT ON FUNCTION id_gen.shard_raise_sequence(text, bigint) IS 'Raises the high-water mark of a local sequence to at least high.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_raise_sequence(text, bigint) FROM PUBLIC;

-- For a shard whose coordinator is gone for good ----------------------------------------------
CREATE OR REPLACE FUNCTION id_gen.shard_forget_moves() RETURNS TABLE (object text, action text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  r record;
BEGIN
  IF NOT coalesce((SELECT rolsuper FROM pg_roles WHERE oid = current_user::regrole), false) THEN
    RAISE EXCEPTION 'id_gen: only superusers may forget moves' USING ERRCODE = '42501';
  END IF;
  FOR r IN SELECT t.tgrelid::regclass AS rel FROM pg_trigger t WHERE t.tgname = 'id_gen_move_fence' AND t.tgenabled <> 'D' LOOP
    EXECUTE format('ALTER TABLE %s DISABLE TRIGGER id_gen_move_fence', r.rel);
    object := r.rel::text; action := 'fence lifted'; RETURN NEXT;
  END LOOP;
  FOR r IN SELECT s.subname FROM pg_subscription s
           WHERE s.subdbid = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
             AND s.subname ~ '^id_gen_(move|back)_[0-9]+$' LOOP
    -- Disabled and detached from its slot here; the DROP itself needs a top-level statement.
    EXECUTE format('ALTER SUBSCRIPTION %I DISABLE', r.subname);
    EXECUTE format('ALTER SUBSCRIPTION %I SET (slot_name = NONE)', r.subname);
    object := 'subscription ' || r.subname; action := format('disabled; now run: DROP SUBSCRIPTION %I', r.subname); RETURN NEXT;
  END LOOP;
  FOR r IN SELECT p.pubname FROM pg_publication p WHERE p.pubname ~ '^id_gen_(move|back)_[0-9]+$' LOOP
    EXECUTE format('DROP PUBLICATION %I', r.pubname);
    object := 'publication ' || r.pubname; action := 'dropped'; RETURN NEXT;
  END LOOP;
  FOR r IN SELECT s.slot_name, s.active, s.active_pid FROM pg_replication_slots s
           WHERE s.database = current_database() AND s.slot_name ~ '^id_gen_(move|back)_[0-9]+$' LOOP
    IF r.active THEN
      PERFORM pg_terminate_backend(r.active_pid);
      object := 'replication slot ' || r.slot_name; action := 'its walsender terminated; call again to drop it'; RETURN NEXT;
    ELSE
      PERFORM pg_drop_replication_slot(r.slot_name);
      object := 'replication slot ' || r.slot_name; action := 'dropped'; RETURN NEXT;
    END IF;
  END LOOP;
  DELETE FROM id_gen.move_markers;
  DELETE FROM id_gen.move_secrets;
END $$;
COMMENT ON FUNCTION id_gen.shard_forget_moves() IS 'On a shard whose coordinator is gone for good: lifts every move fence, drops the publications and slots moves created (id_gen_move_<n>, and id_gen_back_<n> of reversible moves), disables their subscriptions (drop them afterwards as it says), and forgets markers and connection strings. Superuser only. Detached copies (id_gen_moved_*) are left for you to check and drop.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_forget_moves() FROM PUBLIC;
