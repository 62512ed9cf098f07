-- On a shard: the shard half of online splits and merges (sql/cluster/split.sql drives
-- them and says how they work): the log trigger on the old partitions, prepare, copy,
-- catch-up, swap, clean-up and abort. Code only (CREATE OR REPLACE).
--
-- Invariants: see sql/cluster/split.sql. Until shard_split_swap commits, the old partition
-- is authoritative; shard_split_abort drops the triggers and the new tables, and nothing
-- else.

-- AFTER ROW trigger on an old partition during a split or merge: notes the ids written
-- in id_gen.shard_split_log (the writer's transaction; an append, so it never conflicts,
-- whatever the writer's isolation level). Runs as the extension's owner (writers cannot
-- write that table); it executes no statement of anyone's making. TRUNCATE is refused.
CREATE OR REPLACE FUNCTION id_gen.note_split_rows() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  old_id bigint;
  new_id bigint;
BEGIN
  IF TG_OP = 'TRUNCATE' THEN
    RAISE EXCEPTION 'id_gen: % is being copied by split %', TG_TABLE_NAME, TG_ARGV[1]
      USING ERRCODE = '55006', HINT = 'Delete the rows instead, or wait for the split to finish (id_gen.splits on the coordinator).';
  END IF;
  IF TG_OP <> 'INSERT' THEN
    old_id := (to_jsonb(OLD) ->> TG_ARGV[0])::bigint;
    INSERT INTO id_gen.shard_split_log (split_id, source, id) VALUES (TG_ARGV[1]::bigint, TG_RELID, old_id);
  END IF;
  IF TG_OP <> 'DELETE' THEN
    new_id := (to_jsonb(NEW) ->> TG_ARGV[0])::bigint;
    IF new_id IS DISTINCT FROM old_id THEN
      INSERT INTO id_gen.shard_split_log (split_id, source, id) VALUES (TG_ARGV[1]::bigint, TG_RELID, new_id);
    END IF;
  END IF;
  RETURN NULL;
END $$;
COMMENT ON FUNCTION id_gen.note_split_rows() IS 'Trigger on a partition being split or merged: notes the id of every row written (id_gen.shard_split_log) for id_gen.shard_split_catch_up; refuses TRUNCATE.';
REVOKE EXECUTE ON FUNCTION id_gen.note_split_rows() FROM PUBLIC;

-- Trigger on an old partition that a split or merge swapped out on this shard, until the
-- coordinator's half commits and the cleanup drops it: the coordinator's foreign tables
-- of the old ranges still name it, so their writes (and TRUNCATE) get IG002, the routing
-- guard refuses their reads the same way (plan_check.rs, Guarded::Retired), and the retry
-- finds the new ranges.
CREATE OR REPLACE FUNCTION id_gen.refuse_retired_rows() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  RAISE EXCEPTION 'id_gen: % was split or merged away on this shard (split %)', TG_TABLE_NAME, TG_ARGV[0]
    USING ERRCODE = 'IG002',
          DETAIL = 'Its rows are in the new partitions; the coordinator switches to them within milliseconds.',
          HINT = 'Retry after a short wait; through the coordinator the retry reaches the new partitions.';
END $$;
COMMENT ON FUNCTION id_gen.refuse_retired_rows() IS 'Trigger on a partition that a split or merge swapped out on a shard, until the coordinator''s half of the swap commits: every write and TRUNCATE gets IG002 (retry shortly); the routing guard refuses its scans the same way.';
REVOKE EXECUTE ON FUNCTION id_gen.refuse_retired_rows() FROM PUBLIC;

-- The name of the trigger a split puts on an old partition.
CREATE OR REPLACE FUNCTION id_gen.split_trigger_name(split_id bigint) RETURNS name
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN format('id_gen_split_%s', split_id)::name;
COMMENT ON FUNCTION id_gen.split_trigger_name(bigint) IS 'Name of the trigger an online split or merge puts on the partitions it copies from.';
GRANT EXECUTE ON FUNCTION id_gen.split_trigger_name(bigint) TO PUBLIC;

-- Prepares one table of a split or merge on this shard: new tables for the target ranges,
-- triggers on the partitions of the source ranges. Idempotent for the same split.
-- Returns the number of rows the copy will read.
CREATE OR REPLACE FUNCTION id_gen.shard_split_prepare(split_id bigint, schema_name name, table_name name, id_column name,
                                                      stem name, sources int4range[], targets int4range[],
                                                      lock_timeout_ms integer DEFAULT 10000) RETURNS bigint
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  parent_rel regclass := to_regclass(format('%I.%I', schema_name, table_name));
  s int4range;
  t int4range;
  src regclass;
  tgt regclass;
  tname name;
  cols text;
  bound_check text;
  total bigint := 0;
  n bigint;
BEGIN
  PERFORM set_config('lock_timeout', lock_timeout_ms || 'ms', true);
  PERFORM id_gen.quiet_ddl();
  IF parent_rel IS NULL THEN
    RAISE EXCEPTION 'id_gen: %.% does not exist on this shard', quote_ident(schema_name), quote_ident(table_name)
      USING ERRCODE = '42P01', HINT = 'Run SELECT id_gen.sync_distributed_tables() on the coordinator.';
  END IF;
  PERFORM id_gen.refuse_untrusted_table(parent_rel, 'shard table');
  IF NOT EXISTS (SELECT FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
                 WHERE i.indrelid = parent_rel AND i.indisunique AND i.indnkeyatts = 1 AND a.attname = id_column
                   AND i.indpred IS NULL AND i.indexprs IS NULL) THEN
    RAISE EXCEPTION 'id_gen: % has no unique index on % alone, which an online split needs', parent_rel, quote_ident(id_column)
      USING ERRCODE = '55000',
            HINT = 'Make the id column the primary key (on the coordinator and the shards), or split with set_route(..., copy_rows => true), which locks the table while it copies.';
  END IF;
  -- Columns that an INSERT may name (no generated ones), in order.
  SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO cols
  FROM pg_attribute a WHERE a.attrelid = parent_rel AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '';

  FOREACH t IN ARRAY targets LOOP
    tname := id_gen.partition_name(stem, lower(t), upper(t) - 1);
    tgt := to_regclass(format('%I.%I', schema_name, tname));
    IF tgt IS NULL THEN
      EXECUTE format('CREATE TABLE %I.%I (LIKE %s INCLUDING ALL EXCLUDING IDENTITY)', schema_name, tname, parent_rel);
      tgt := format('%I.%I', schema_name, tname)::regclass;
      bound_check := format('%1$I OPERATOR(pg_catalog.>=) %2$L::bigint', id_column, id_gen.gene_first_id(lower(t)));
      IF upper(t) <= 65535 THEN
        bound_check := bound_check || format(' AND %1$I OPERATOR(pg_catalog.<) %2$L::bigint', id_column, id_gen.gene_first_id(upper(t)));
      END IF;
      EXECUTE format('ALTER TABLE %s ADD CONSTRAINT id_gen_split_bound CHECK (%s)', tgt, bound_check);
      PERFORM id_gen.inherit_parent_settings(parent_rel, tgt,
        format('id_gen: genes %s .. %s of %s on this shard, filled by split %s', lower(t), upper(t) - 1, parent_rel, split_id));
    ELSIF NOT EXISTS (SELECT FROM id_gen.shard_split_pieces sp WHERE sp.split_id = shard_split_prepare.split_id AND sp.target = tgt) THEN
      RAISE EXCEPTION 'id_gen: relation % already exists on this shard', tgt
        USING ERRCODE = '42P07',
              HINT = 'id_gen names a table''s partitions <stem>_g<lower>_<upper>; rename that relation, or drop what an aborted split left.';
    END IF;
    FOREACH s IN ARRAY sources LOOP
      CONTINUE WHEN NOT s && t;
      SELECT c.oid::regclass INTO src FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
      WHERE i.inhparent = parent_rel AND pg_get_expr(c.relpartbound, c.oid) = id_gen.partition_bound_text(lower(s), upper(s) - 1);
      IF src IS NULL THEN
        RAISE EXCEPTION 'id_gen: % has no partition of genes % .. % on this shard', parent_rel, lower(s), upper(s) - 1
          USING ERRCODE = '55000', HINT = 'Run SELECT id_gen.sync_distributed_tables() on the coordinator; see id_gen.distribution.';
      END IF;
      CONTINUE WHEN EXISTS (SELECT FROM id_gen.shard_split_pieces sp
                            WHERE (sp.split_id, sp.source, sp.target) = (shard_split_prepare.split_id, src, tgt));
      INSERT INTO id_gen.shard_split_pieces (split_id, parent, id_column, source, target, source_lower, source_upper,
                                             target_lower, target_upper, first_id, last_id, old_name,
                                             copy_sql, resync_delete_sql, resync_insert_sql)
      VALUES (split_id, parent_rel, id_column, src, tgt, lower(s), upper(s) - 1, lower(t), upper(t) - 1,
              id_gen.gene_first_id(greatest(lower(s), lower(t))), id_gen.gene_last_id(least(upper(s), upper(t)) - 1),
              id_gen.fit_name((SELECT c.relname FROM pg_class c WHERE c.oid = src), '_old' || split_id),
              format('INSERT INTO %1$s (%2$s) SELECT %2$s FROM %3$s WHERE %4$I OPERATOR(pg_catalog.>=) $1 AND %4$I OPERATOR(pg_catalog.<=) $2 '
                     'ON CONFLICT (%4$I) DO NOTHING', tgt, cols, src, id_column),
              format('DELETE FROM %1$s WHERE %2$I OPERATOR(pg_catalog.=) ANY ($1)', tgt, id_column),
              format('INSERT INTO %1$s (%2$s) SELECT %2$s FROM %3$s WHERE %4$I OPERATOR(pg_catalog.=) ANY ($1) '
                     'AND %4$I OPERATOR(pg_catalog.>=) $2 AND %4$I OPERATOR(pg_catalog.<=) $3', tgt, cols, src, id_column));
    END LOOP;
  END LOOP;
  -- The triggers last: from their commit on, every row written in the old partitions is
  -- noted (CREATE TRIGGER waits for the partitions' writers), and the copy starts after.
  FOR src IN SELECT DISTINCT sp.source::regclass FROM id_gen.shard_split_pieces sp
             WHERE sp.split_id = shard_split_prepare.split_id AND sp.parent = parent_rel LOOP
    IF NOT EXISTS (SELECT FROM pg_trigger tg WHERE tg.tgrelid = src AND tg.tgname = id_gen.split_trigger_name(split_id)) THEN
      EXECUTE format('CREATE TRIGGER %I AFTER INSERT OR UPDATE OR DELETE ON %s FOR EACH ROW EXECUTE FUNCTION id_gen.note_split_rows(%L, %L)',
                     id_gen.split_trigger_name(split_id), src, id_column, split_id);
      EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER %I', src, id_gen.split_trigger_name(split_id));
      EXECUTE format('CREATE TRIGGER %I BEFORE TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION id_gen.note_split_rows(%L, %L)',
                     id_gen.split_trigger_name(split_id) || '_t', src, id_column, split_id);
      EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER %I', src, id_gen.split_trigger_name(split_id) || '_t');
    END IF;
    EXECUTE format('SELECT count(*) FROM %s', src) INTO n;
    total := total + n;
  END LOOP;
  RETURN total;
END $$;
COMMENT ON FUNCTION id_gen.shard_split_prepare(bigint, name, name, name, name, int4range[], int4range[], integer) IS 'On a shard (called by the coordinator): starts an online split or merge of one table: new tables for the target ranges, and triggers that note every row written in the source partitions from then on. Returns the rows to copy.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_split_prepare(bigint, name, name, name, name, int4range[], int4range[], integer) FROM PUBLIC;

-- One batch of the copy (at most max_rows rows of one piece), in the caller's
-- transaction. Rows written after the copy read them are noted in the log and brought up
-- to date by id_gen.shard_split_catch_up. Returns {"copied": n, "done": bool}.
CREATE OR REPLACE FUNCTION id_gen.shard_split_copy(split_id bigint, max_rows integer) RETURNS jsonb
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  p record;
  id_column name;
  from_id bigint;
  to_id bigint;
  n bigint;
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'id_gen: a split copies rows only in READ COMMITTED' USING ERRCODE = '25000';
  END IF;
  SELECT sp.* INTO p FROM id_gen.shard_split_pieces sp
  WHERE sp.split_id = shard_split_copy.split_id AND NOT sp.copied
  ORDER BY sp.source, sp.target LIMIT 1 FOR UPDATE;
  IF NOT FOUND THEN
    RETURN jsonb_build_object('copied', 0, 'done', true);
  END IF;
  id_column := p.id_column;
  IF NOT EXISTS (SELECT FROM pg_trigger tg WHERE tg.tgrelid = p.source AND tg.tgname = id_gen.split_trigger_name(split_id)) THEN
    RAISE EXCEPTION 'id_gen: the trigger of split % is missing on %', split_id, p.source::regclass
      USING ERRCODE = '55000', HINT = 'Abort the split (CALL id_gen.abort_split) and split again.';
  END IF;
  from_id := greatest(p.first_id, coalesce(p.copied_upto + 1, p.first_id));
  EXECUTE format('SELECT max(i) FROM (SELECT %1$I AS i FROM %2$s WHERE %1$I OPERATOR(pg_catalog.>=) $1 AND %1$I OPERATOR(pg_catalog.<=) $2 '
                 'ORDER BY %1$I LIMIT $3) s', id_column, p.source::regclass)
    INTO to_id USING from_id, p.last_id, max_rows;
  IF to_id IS NULL THEN
    UPDATE id_gen.shard_split_pieces sp SET copied = true, copied_upto = p.last_id
    WHERE (sp.split_id, sp.source, sp.target) = (p.split_id, p.source, p.target);
    RETURN jsonb_build_object('copied', 0, 'done', NOT EXISTS (SELECT FROM id_gen.shard_split_pieces sp
                                                              WHERE sp.split_id = shard_split_copy.split_id AND NOT sp.copied));
  END IF;
  EXECUTE p.copy_sql USING from_id, to_id;
  GET DIAGNOSTICS n = ROW_COUNT;
  UPDATE id_gen.shard_split_pieces sp SET copied_upto = to_id
  WHERE (sp.split_id, sp.source, sp.target) = (p.split_id, p.source, p.target);
  RETURN jsonb_build_object('copied', n, 'done', false);
END $$;
COMMENT ON FUNCTION id_gen.shard_split_copy(bigint, integer) IS 'On a shard: copies the next run of at most max_rows rows of a split or merge into its new table; returns {"copied": n, "done": bool}.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_split_copy(bigint, integer) FROM PUBLIC;

-- Brings the rows noted in the log (at most max_ids entries) up to date in the new
-- tables: each is deleted there and copied again from the old partition as it is now.
-- Idempotent and order-free, so entries may be replayed in any grouping. In the caller's
-- READ COMMITTED transaction (each statement sees every write committed before it).
-- Returns {"replayed": n, "left": m}.
CREATE OR REPLACE FUNCTION id_gen.shard_split_catch_up(split_id bigint, max_ids integer) RETURNS jsonb
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  b record;
  p record;
  n bigint := 0;
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'id_gen: a split catches up only in READ COMMITTED' USING ERRCODE = '25000';
  END IF;
  FOR b IN
    WITH taken AS (
      DELETE FROM id_gen.shard_split_log l
      WHERE l.ctid = ANY (ARRAY(SELECT x.ctid FROM id_gen.shard_split_log x
                                WHERE x.split_id = shard_split_catch_up.split_id LIMIT max_ids))
      RETURNING l.source, l.id
    )
    SELECT t.source, array_agg(DISTINCT t.id) AS ids FROM taken t GROUP BY t.source
  LOOP
    FOR p IN SELECT sp.* FROM id_gen.shard_split_pieces sp
             WHERE sp.split_id = shard_split_catch_up.split_id AND sp.source = b.source AND NOT sp.swapped LOOP
      EXECUTE p.resync_delete_sql USING ARRAY(SELECT i FROM unnest(b.ids) i WHERE i BETWEEN p.first_id AND p.last_id);
      EXECUTE p.resync_insert_sql USING b.ids, p.first_id, p.last_id;
    END LOOP;
    n := n + cardinality(b.ids);
  END LOOP;
  RETURN jsonb_build_object('replayed', n,
    'left', (SELECT count(*) FROM id_gen.shard_split_log l WHERE l.split_id = shard_split_catch_up.split_id));
END $$;
COMMENT ON FUNCTION id_gen.shard_split_catch_up(bigint, integer) IS 'On a shard: brings the rows written during a split or merge (noted in id_gen.shard_split_log) up to date in its new tables; returns {"replayed": n, "left": m}.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_split_catch_up(bigint, integer) FROM PUBLIC;

-- 'none' (nothing of the split here), 'copying' or 'swapped'.
CREATE OR REPLACE FUNCTION id_gen.shard_split_state(split_id bigint) RETURNS text
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  SELECT CASE WHEN bool_or(sp.swapped) THEN 'swapped' WHEN count(*) > 0 THEN 'copying' ELSE 'none' END
  FROM id_gen.shard_split_pieces sp WHERE sp.split_id OPERATOR(pg_catalog.=) shard_split_state.split_id;
END;
COMMENT ON FUNCTION id_gen.shard_split_state(bigint) IS 'On a shard: how far a split or merge has come here: none, copying or swapped.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_split_state(bigint) FROM PUBLIC;

-- The shard's half of the fence: under ACCESS EXCLUSIVE on the tables, the old partitions
-- leave (detached under their names, retired: every access gets IG002, until cleanup) and
-- the new ones take their place. Nothing is copied here. lock_timeout_ms bounds how long
-- writers of other ranges of this shard queue behind the lock.
CREATE OR REPLACE FUNCTION id_gen.shard_split_swap(split_id bigint, lock_timeout_ms integer) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  p record;
  r regclass;
  n integer := 0;
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'id_gen: a shard swaps partitions only in a READ COMMITTED transaction of its own' USING ERRCODE = '25000';
  END IF;
  IF id_gen.shard_split_state(split_id) = 'swapped' THEN
    RETURN 'swapped already';
  ELSIF id_gen.shard_split_state(split_id) = 'none' THEN
    RAISE EXCEPTION 'id_gen: split % is not prepared on this shard', split_id USING ERRCODE = '55000';
  ELSIF EXISTS (SELECT FROM id_gen.shard_split_pieces sp WHERE sp.split_id = shard_split_swap.split_id AND NOT sp.copied) THEN
    RAISE EXCEPTION 'id_gen: the copy of split % is unfinished', split_id USING ERRCODE = '55000';
  END IF;
  PERFORM set_config('lock_timeout', lock_timeout_ms || 'ms', true);
  PERFORM id_gen.quiet_ddl();
  -- In the order of schema and name, as route_claim locks them (its lock of the gene's
  -- partitions, table by table): in another order (0.7.13 took the tables' oids), a claim
  -- holding one table and waiting for the next deadlocked with the swap, whose lock
  -- timeout then lost every attempt while clients wrote to several distributed tables.
  FOR r IN SELECT c.oid::regclass FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
           WHERE c.oid IN (SELECT sp.parent FROM id_gen.shard_split_pieces sp WHERE sp.split_id = shard_split_swap.split_id)
           ORDER BY ns.nspname, c.relname LOOP
    EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', r);
  END LOOP;
  -- Nobody writes now: the last rows noted make the new tables exact.
  LOOP
    EXIT WHEN (id_gen.shard_split_catch_up(split_id, 100000)->>'left')::bigint = 0;
  END LOOP;
  FOR p IN SELECT DISTINCT ON (sp.source) sp.* FROM id_gen.shard_split_pieces sp
           WHERE sp.split_id = shard_split_swap.split_id ORDER BY sp.source LOOP
    EXECUTE format('ALTER TABLE %s DETACH PARTITION %s', p.parent::regclass, p.source::regclass);
    EXECUTE format('DROP TRIGGER %I ON %s', id_gen.split_trigger_name(split_id), p.source::regclass);
    EXECUTE format('DROP TRIGGER %I ON %s', id_gen.split_trigger_name(split_id) || '_t', p.source::regclass);
    -- Retired under its own name: the coordinator's foreign tables still point here until
    -- its half of the swap commits, and meanwhile get IG002 (retry shortly), never a stale
    -- row nor a write that would be lost (the routing guard refuses every scan of it).
    EXECUTE format('CREATE TRIGGER id_gen_retired BEFORE INSERT OR UPDATE OR DELETE ON %s '
                   'FOR EACH ROW EXECUTE FUNCTION id_gen.refuse_retired_rows(%L)', p.source::regclass, split_id);
    EXECUTE format('CREATE TRIGGER id_gen_retired_t BEFORE TRUNCATE ON %s '
                   'FOR EACH STATEMENT EXECUTE FUNCTION id_gen.refuse_retired_rows(%L)', p.source::regclass, split_id);
    EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER id_gen_retired', p.source::regclass);
    EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER id_gen_retired_t', p.source::regclass);
    EXECUTE format('COMMENT ON TABLE %s IS %L', p.source::regclass,
                   format('id_gen: retired by split %s (its rows are in the new partitions); dropped when the split is done', split_id));
  END LOOP;
  FOR p IN SELECT DISTINCT ON (sp.target) sp.* FROM id_gen.shard_split_pieces sp
           WHERE sp.split_id = shard_split_swap.split_id ORDER BY sp.target LOOP
    EXECUTE format('ALTER TABLE %s ATTACH PARTITION %s FOR VALUES %s', p.parent::regclass, p.target::regclass,
                   id_gen.partition_bounds(p.target_lower, p.target_upper));
    EXECUTE format('ALTER TABLE %s DROP CONSTRAINT id_gen_split_bound', p.target::regclass);
    EXECUTE format('COMMENT ON TABLE %s IS %L', p.target::regclass,
                   format('id_gen: genes %s .. %s of %s on this shard (kept by the coordinator)', p.target_lower, p.target_upper, p.parent::regclass));
    n := n + 1;
  END LOOP;
  -- The ranges this shard owns, as shard_apply_ranges would record them.
  UPDATE id_gen.shard_tables t
  SET gene_ranges = (SELECT array_agg(g ORDER BY g)
                     FROM (SELECT g FROM unnest(t.gene_ranges) g
                           WHERE NOT EXISTS (SELECT FROM id_gen.shard_split_pieces sp
                                             WHERE sp.split_id = shard_split_swap.split_id AND sp.parent = c.oid
                                               AND g = int4range(sp.source_lower, sp.source_upper, '[]'))
                           UNION
                           SELECT int4range(sp.target_lower, sp.target_upper, '[]') FROM id_gen.shard_split_pieces sp
                           WHERE sp.split_id = shard_split_swap.split_id AND sp.parent = c.oid) x),
      updated_at = now()
  FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
  WHERE (ns.nspname, c.relname) = (t.schema_name, t.table_name)
    AND c.oid IN (SELECT sp.parent FROM id_gen.shard_split_pieces sp WHERE sp.split_id = shard_split_swap.split_id);
  UPDATE id_gen.shard_split_pieces sp SET swapped = true WHERE sp.split_id = shard_split_swap.split_id;
  PERFORM id_gen.shard_routing_changed();
  RETURN format('attached %s partitions', n);
END $$;
COMMENT ON FUNCTION id_gen.shard_split_swap(bigint, integer) IS 'On a shard, in the fence of a split or merge: under ACCESS EXCLUSIVE on the tables, detaches the old partitions (kept under their names until id_gen.shard_split_cleanup, retired: every access gets IG002) and attaches the copies, which hold the same rows.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_split_swap(bigint, integer) FROM PUBLIC;

-- After the coordinator committed the swap: the old partitions go. Returns how many.
CREATE OR REPLACE FUNCTION id_gen.shard_split_cleanup(split_id bigint) RETURNS integer
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  p record;
  n integer := 0;
  r regclass;
BEGIN
  -- (A reader of an old partition makes this fail and be retried: the same CALL or the
  -- move supervisor.)
  PERFORM set_config('lock_timeout', '5s', true);
  PERFORM id_gen.quiet_ddl();
  IF EXISTS (SELECT FROM id_gen.shard_split_pieces sp WHERE sp.split_id = shard_split_cleanup.split_id AND NOT sp.swapped) THEN
    RAISE EXCEPTION 'id_gen: split % has not swapped on this shard', split_id USING ERRCODE = '55000';
  END IF;
  FOR p IN SELECT DISTINCT ON (sp.source) sp.* FROM id_gen.shard_split_pieces sp
           WHERE sp.split_id = shard_split_cleanup.split_id ORDER BY sp.source LOOP
    r := (SELECT c.oid FROM pg_class c WHERE c.oid = p.source);
    IF r IS NOT NULL AND NOT EXISTS (SELECT FROM pg_inherits i WHERE i.inhrelid = r) THEN
      EXECUTE format('DROP TABLE %s', r);
      n := n + 1;
    END IF;
  END LOOP;
  DELETE FROM id_gen.shard_split_pieces sp WHERE sp.split_id = shard_split_cleanup.split_id;
  DELETE FROM id_gen.shard_split_log l WHERE l.split_id = shard_split_cleanup.split_id;
  RETURN n;
END $$;
COMMENT ON FUNCTION id_gen.shard_split_cleanup(bigint) IS 'On a shard, after a split or merge committed on the coordinator: drops the detached old partitions and forgets the split.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_split_cleanup(bigint) FROM PUBLIC;

-- Undo of a split that has not swapped: triggers and new tables go; the old partitions,
-- which stayed authoritative, are untouched. Returns what it dropped.
CREATE OR REPLACE FUNCTION id_gen.shard_split_abort(split_id bigint) RETURNS integer
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  r regclass;
  n integer := 0;
BEGIN
  PERFORM id_gen.quiet_ddl();
  IF id_gen.shard_split_state(split_id) = 'swapped' THEN
    RAISE EXCEPTION 'id_gen: split % has swapped on this shard; it is finished, not aborted', split_id USING ERRCODE = '55000';
  END IF;
  FOR r IN SELECT DISTINCT sp.source::regclass FROM id_gen.shard_split_pieces sp
           WHERE sp.split_id = shard_split_abort.split_id AND EXISTS (SELECT FROM pg_class c WHERE c.oid = sp.source) LOOP
    EXECUTE format('DROP TRIGGER IF EXISTS %I ON %s', id_gen.split_trigger_name(split_id), r);
    EXECUTE format('DROP TRIGGER IF EXISTS %I ON %s', id_gen.split_trigger_name(split_id) || '_t', r);
  END LOOP;
  FOR r IN SELECT DISTINCT sp.target::regclass FROM id_gen.shard_split_pieces sp
           WHERE sp.split_id = shard_split_abort.split_id AND EXISTS (SELECT FROM pg_class c WHERE c.oid = sp.target)
             AND NOT EXISTS (SELECT FROM pg_inherits i WHERE i.inhrelid = sp.target) LOOP
    EXECUTE format('DROP TABLE %s', r);
    n := n + 1;
  END LOOP;
  DELETE FROM id_gen.shard_split_pieces sp WHERE sp.split_id = shard_split_abort.split_id;
  DELETE FROM id_gen.shard_split_log l WHERE l.split_id = shard_split_abort.split_id;
  RETURN n;
END $$;
COMMENT ON FUNCTION id_gen.shard_split_abort(bigint) IS 'On a shard: rolls back a split or merge that has not swapped (drops its triggers and new tables; the old partitions stay as they are).';
REVOKE EXECUTE ON FUNCTION id_gen.shard_split_abort(bigint) FROM PUBLIC;
