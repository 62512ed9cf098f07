-- On a shard: the online conversion of a distributed table held partitioned (one partition
-- per owned route range, the shard half of the per_shard layout) to the layout by ownership
-- (sql/cluster/shard/owned_rows.sql, docs/design.md §11.8): one table of rows <stem>_rows
-- behind a view of the owned rows under the table's name. The coordinator drives it
-- (id_gen.convert_to_by_ownership, sql/cluster/convert.sql), one call per transaction, each
-- committed here:
--   1. shard_begin_owned_conversion: under SHARE ROW EXCLUSIVE on the table (its writers
--      finish first; readers go on), the table of rows is created LIKE the table (columns,
--      defaults, constraints, indexes) with its owner and grants, and statement triggers
--      with transition tables on the table (id_gen.mirror_converted_rows) make every later
--      write there in the table of rows too, in the writer's transaction, and log its ids
--      (id_gen.shard_converted_changes), as missed when it did not reach every copy; a
--      TRUNCATE, and an UPDATE that changes an id, are refused meanwhile (55000, 0A000). The
--      id must be unique by itself (0A000 otherwise).
--   2. shard_copy_owned_rows, repeated: the next rows in id order, partition by partition,
--      are locked FOR SHARE and copied into the table of rows (a row there already stays).
--   3. shard_sync_converted_changes, repeated: the logged rows are compared with their
--      copies, and a copy that differs is made again from the table.
--   4. shard_finish_owned_conversion: waits until no transaction of this database that
--      began before it holds a snapshot, then, under ACCESS EXCLUSIVE on the table alone
--      (its statements wait, at most lock_timeout_ms), refuses (55P03) while a write that
--      missed its copy is logged and not compared since (the coordinator compares, step 3,
--      and tries again), drops the log's other entries (those writes reached their copies),
--      drops the triggers, renames the table <stem>_by_range, gives the table of rows the
--      table's grants, its trigger (id_gen_owned_rows) and the table's name for the view of
--      the owned rows, and records the table of rows in id_gen.shard_tables (what the shard
--      owns is unchanged).
--   5. shard_drop_converted_partitions, repeated: the old table's partitions are dropped in
--      batches, then the table.
-- Before its step 4, a shard's conversion can be undone (id_gen.abort_conversion):
-- shard_abort_owned_conversion drops the triggers, the table of rows and the log's entries;
-- shard_owned_conversion_state says where a shard stands.
-- Invariants:
--   * Nothing is lost: every row is copied after the triggers exist (step 2 starts after step
--     1 committed), and every later write is made in the table of rows too, in the writer's
--     transaction, so the copies look like the table to every snapshot, with one exception:
--     a write that misses its copy (a REPEATABLE READ writer, as postgres_fdw's remote
--     transactions are, whose snapshot is older than a copy does not see it; or the copy is
--     not there yet). The trigger sees that (fewer rows reached than written, a unique or
--     serialization failure) and logs the ids as missed; step 3 compares every logged row in
--     a later READ COMMITTED statement and makes again only the copies that differ. A copy
--     reads its rows FOR SHARE, so a write of them waits for it and then reaches the copy, or
--     the copy waits for the write and takes its result.
--   * No reader of the view sees what the old table would not have shown it: every copy and
--     repair commits before step 4 begins; step 4 waits until every snapshot older than it
--     is gone (one that saw the table while a copy differed among them), and a snapshot that
--     new makes no miss; a miss logged before the wait ended and not compared since makes
--     it refuse; it writes no copy itself (a statement waiting for its lock would not see it).
--   * Not logged nor mirrored: writes that name one of id_gen's partitions directly (the
--     coordinator and zero-hop clients name the table) and those of a session with
--     session_replication_role = replica, such as a logical replication apply worker (the
--     coordinator refuses moves during a conversion). Not waited for: a snapshot imported
--     (SET TRANSACTION SNAPSHOT) by a transaction that began after step 4, hot standby
--     queries, and walsenders (they do not read the view).
--   * Every step can be repeated after an interruption: step 1 returns the state it finds
--     (a table of rows whose triggers are missing, disabled or for other columns is made
--     again and filled again), steps 2 and 3 are idempotent, step 4 is one transaction,
--     step 5 drops only a table that bears the conversion's comment. Steps 2 and 3 hold
--     ACCESS SHARE on the table, so step 4 (ACCESS EXCLUSIVE) never overlaps them.
--   * Locks: step 2 reads at most 100 partitions per call and step 4 locks the table alone;
--     step 1 checks every partition for untrusted code (as a re-partition does), which
--     locks each of them once (ACCESS SHARE).
--   * No code that a non-superuser owns runs in these calls (id_gen.refuse_untrusted_table
--     on the table, and on the table of rows under a lock that keeps triggers from being
--     added); the triggers run as the writer, whose rights on the table of rows are those it
--     has on the table. A column dropped or renamed on the table meanwhile makes its writes
--     fail (42703) until the CALL runs again, which starts over with the new columns.
-- Code only (CREATE OR REPLACE).

-- The comment of a table of rows while its conversion fills it, and of the old
-- partitioned table after it (the only table step 5 drops).
CREATE OR REPLACE FUNCTION id_gen.converted_table_comment(rel_kind text, schema_name name, table_name name) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN CASE rel_kind
  WHEN 'rows' THEN format('id_gen: being filled from %I.%I by its conversion to the layout by ownership (id_gen.convert_to_by_ownership)',
                          schema_name, table_name)
  ELSE format('id_gen: the partitions of %I.%I before its conversion to the layout by ownership, dropped by id_gen.convert_to_by_ownership',
              schema_name, table_name) END;
COMMENT ON FUNCTION id_gen.converted_table_comment(text, name, name) IS 'On a shard: the comment of the table of rows a conversion to the layout by ownership fills (rel_kind ''rows'') or of the old partitioned table it leaves (''old''); the conversion drops only a table that bears the latter.';
REVOKE EXECUTE ON FUNCTION id_gen.converted_table_comment(text, name, name) FROM PUBLIC;

-- The statement triggers of a table being converted (arguments: the table of rows, the id
-- column, the columns that hold values, the same prefixed with n.): the ids written are
-- logged, and the write reaches the table of rows too; a TRUNCATE, and an UPDATE that
-- changes an id, are refused.
CREATE OR REPLACE FUNCTION id_gen.mirror_converted_rows() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  moved boolean;
  missed boolean := false;
  reached bigint;
  written bigint;
BEGIN
  IF TG_OP = 'TRUNCATE' THEN
    RAISE EXCEPTION 'id_gen: %.% is being converted to the layout by ownership; TRUNCATE waits until it is done',
                    quote_ident(TG_TABLE_SCHEMA), quote_ident(TG_TABLE_NAME)
      USING ERRCODE = '55000', HINT = 'id_gen.distributed_tables.converting_since on the coordinator says since when; DELETE works meanwhile.';
  ELSIF TG_OP = 'UPDATE' THEN
    EXECUTE format('SELECT EXISTS (SELECT FROM id_gen_old o WHERE NOT EXISTS (SELECT FROM id_gen_new n WHERE n.%1$I OPERATOR(pg_catalog.=) o.%1$I))',
                   TG_ARGV[1]) INTO moved;
    IF moved THEN
      RAISE EXCEPTION 'id_gen: %.% is being converted to the layout by ownership; an UPDATE of its ids waits until it is done',
                      quote_ident(TG_TABLE_SCHEMA), quote_ident(TG_TABLE_NAME)
        USING ERRCODE = '0A000', HINT = 'Insert the row under its new id and delete the old one instead.';
    END IF;
  END IF;
  -- The same write in the table of rows. It misses a copy that this transaction's snapshot
  -- does not see (REPEATABLE READ), or that is not there yet, or it meets one it should not
  -- (a copy a missed DELETE left): the ids are then logged as missed, and the conversion
  -- repairs their copies before the swap. The writer's statement goes on either way.
  BEGIN
    IF TG_OP = 'INSERT' THEN
      EXECUTE format('INSERT INTO %s (%s) SELECT %s FROM id_gen_new', TG_ARGV[0], TG_ARGV[2], TG_ARGV[2]);
    ELSIF TG_OP = 'UPDATE' THEN
      EXECUTE format('UPDATE %s r SET (%s) = ROW(%s) FROM id_gen_new n WHERE r.%I OPERATOR(pg_catalog.=) n.%I',
                     TG_ARGV[0], TG_ARGV[2], TG_ARGV[3], TG_ARGV[1], TG_ARGV[1]);
      GET DIAGNOSTICS reached = ROW_COUNT;
      SELECT count(*) INTO written FROM id_gen_new;
      missed := reached < written;
    ELSE
      EXECUTE format('DELETE FROM %s r USING id_gen_old o WHERE r.%I OPERATOR(pg_catalog.=) o.%I', TG_ARGV[0], TG_ARGV[1], TG_ARGV[1]);
      GET DIAGNOSTICS reached = ROW_COUNT;
      SELECT count(*) INTO written FROM id_gen_old;
      missed := reached < written;
    END IF;
  EXCEPTION WHEN unique_violation OR serialization_failure OR deadlock_detected OR lock_not_available
                 OR insufficient_privilege THEN
    missed := true;
  END;
  EXECUTE format('INSERT INTO id_gen.shard_converted_changes (rel, id, missed) SELECT $1, %I, $2 FROM %s', TG_ARGV[1],
                 CASE TG_OP WHEN 'DELETE' THEN 'id_gen_old' ELSE 'id_gen_new' END)
    USING TG_RELID, missed;
  RETURN NULL;
END $$;
COMMENT ON FUNCTION id_gen.mirror_converted_rows() IS 'On a shard: the statement triggers of a table being converted to the layout by ownership: make the same write in its table of rows (arguments: the table of rows, the id column, the columns, the columns prefixed with n.) and log the ids written (id_gen.shard_converted_changes), as missed when that write did not reach every copy; TRUNCATE (55000) and an UPDATE of ids (0A000) are refused meanwhile. Runs as the writer.';
REVOKE EXECUTE ON FUNCTION id_gen.mirror_converted_rows() FROM PUBLIC;

-- The names of the conversion's triggers, in the order shard_begin_owned_conversion makes them.
CREATE OR REPLACE FUNCTION id_gen.converted_trigger_names() RETURNS name[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN ARRAY['id_gen_convert_insert', 'id_gen_convert_update', 'id_gen_convert_delete', 'id_gen_convert_truncate']::name[];
COMMENT ON FUNCTION id_gen.converted_trigger_names() IS 'On a shard: the names of the statement triggers a conversion to the layout by ownership puts on the table (id_gen.mirror_converted_rows).';

-- A table of this shard in the middle of its conversion, with its table of rows (55000 when
-- it is not: the coordinator calls the steps in order).
CREATE OR REPLACE FUNCTION id_gen.shard_converting_table(schema_name name, table_name name, stem name,
                                                         OUT parent regclass, OUT rows_rel regclass, OUT cols text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  -- (Not STRICT: a function that returns a record is called even for NULL arguments.)
  IF schema_name IS NULL OR table_name IS NULL OR stem IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "%" must not be NULL',
                    CASE WHEN schema_name IS NULL THEN 'schema_name' WHEN table_name IS NULL THEN 'table_name' ELSE 'stem' END
      USING ERRCODE = '22004';
  END IF;
  parent := to_regclass(format('%I.%I', schema_name, table_name));
  rows_rel := to_regclass(format('%I.%I', schema_name, id_gen.fit_name(stem, '_rows')));
  IF parent IS NULL OR rows_rel IS NULL OR (SELECT c.relkind FROM pg_class c WHERE c.oid = parent) <> 'p'
     OR obj_description(rows_rel, 'pg_class') IS DISTINCT FROM id_gen.converted_table_comment('rows', schema_name, table_name) THEN
    RAISE EXCEPTION 'id_gen: %.% is not being converted to the layout by ownership on this shard', quote_ident(schema_name), quote_ident(table_name)
      USING ERRCODE = '55000', HINT = 'CALL id_gen.convert_to_by_ownership(...) on the coordinator runs every step in order.';
  END IF;
  -- The table stays (step 4 waits for this transaction), and no trigger is added to the
  -- table of rows after the check below (CREATE TRIGGER waits for this lock).
  PERFORM set_config('lock_timeout', '2s', true);
  EXECUTE format('LOCK TABLE ONLY %s IN ACCESS SHARE MODE', parent);
  EXECUTE format('LOCK TABLE %s IN ROW EXCLUSIVE MODE', rows_rel);
  PERFORM id_gen.refuse_untrusted_table(rows_rel, 'shard table');
  -- The columns that hold values (not generated ones), in order.
  SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO cols
  FROM pg_attribute a WHERE a.attrelid = rows_rel AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '';
END $$;
COMMENT ON FUNCTION id_gen.shard_converting_table(name, name, name) IS 'On a shard: the table being converted to the layout by ownership, its table of rows and their columns with values, both locked for this transaction (ACCESS SHARE, ROW EXCLUSIVE) and the table of rows checked for untrusted code; 55000 when the table is not in the middle of a conversion.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_converting_table(name, name, name) FROM PUBLIC;

-- Whether a table of this shard can be converted: 'absent' (no such table here), 'converted'
-- (done already) or 'ok'; raises what would stop the conversion (55000, 42P07, 0A000, 2BP01).
-- The coordinator asks every shard before it marks the table, so that nothing is left half
-- done by what a CALL cannot get past; step 1 asks again under its lock.
CREATE OR REPLACE FUNCTION id_gen.shard_check_owned_conversion(schema_name name, table_name name, id_column name, stem name)
RETURNS text
LANGUAGE plpgsql STRICT STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  parent regclass := to_regclass(format('%I.%I', schema_name, table_name));
  rows_rel regclass := to_regclass(format('%I.%I', schema_name, id_gen.fit_name(stem, '_rows')));
  recorded id_gen.shard_tables;
  dependents text;
BEGIN
  SELECT * INTO recorded FROM id_gen.shard_tables t
  WHERE (t.schema_name, t.table_name) = (shard_check_owned_conversion.schema_name, shard_check_owned_conversion.table_name);
  IF FOUND AND recorded.rows_table IS NOT NULL THEN
    RETURN 'converted';
  ELSIF parent IS NULL AND NOT FOUND THEN
    RETURN 'absent';
  ELSIF parent IS NULL OR NOT FOUND OR (SELECT c.relkind FROM pg_class c WHERE c.oid = parent) <> 'p' THEN
    RAISE EXCEPTION 'id_gen: %.% on this shard is not a table id_gen partitions', quote_ident(schema_name), quote_ident(table_name)
      USING ERRCODE = '55000', HINT = 'id_gen.shard_tables lists the tables id_gen keeps on this shard; the conversion converts only those.';
  ELSIF rows_rel IS NOT NULL AND obj_description(rows_rel, 'pg_class') IS DISTINCT FROM id_gen.converted_table_comment('rows', schema_name, table_name) THEN
    RAISE EXCEPTION 'id_gen: relation % already exists on this shard', rows_rel
      USING ERRCODE = '42P07', HINT = 'The conversion names the table of rows <stem>_rows; rename that relation.';
  END IF;
  -- What would keep the old table, or be lost with it, or would stop the copy: views over it,
  -- rules, foreign keys to it or of it, publications of it, subscriptions into it, triggers of
  -- the user's, row security, column grants, deferrable constraints.
  SELECT string_agg(DISTINCT x, ', ') INTO dependents FROM (
    SELECT rw.ev_class::regclass::text AS x FROM pg_depend dep JOIN pg_rewrite rw ON rw.oid = dep.objid
    WHERE dep.classid = 'pg_rewrite'::regclass AND dep.refclassid = 'pg_class'::regclass AND dep.refobjid = parent
      AND rw.ev_class <> parent
    UNION ALL SELECT format('rule %I', rw.rulename) FROM pg_rewrite rw WHERE rw.ev_class = parent
    UNION ALL SELECT format('constraint %I of %s', con.conname, con.conrelid::regclass) FROM pg_constraint con
    WHERE con.confrelid = parent OR (con.conrelid = parent AND con.contype = 'f')
    UNION ALL SELECT format('publication %I', p.pubname) FROM pg_publication_rel pr JOIN pg_publication p ON p.oid = pr.prpubid
    WHERE pr.prrelid = parent
    UNION ALL SELECT format('publication %I (FOR ALL TABLES)', p.pubname) FROM pg_publication p WHERE p.puballtables
    UNION ALL SELECT format('publication %I (TABLES IN SCHEMA)', p.pubname) FROM pg_publication_namespace pn
      JOIN pg_publication p ON p.oid = pn.pnpubid
    WHERE pn.pnnspid = (SELECT c.relnamespace FROM pg_class c WHERE c.oid = parent)
    UNION ALL SELECT format('trigger %I', t.tgname) FROM pg_trigger t
    WHERE t.tgrelid = parent AND NOT t.tgisinternal AND t.tgparentid = 0 AND NOT t.tgname = ANY (id_gen.converted_trigger_names())
    UNION ALL SELECT 'row security or policies' FROM pg_class c WHERE c.oid = parent
      AND (c.relrowsecurity OR c.relforcerowsecurity OR EXISTS (SELECT FROM pg_policy pol WHERE pol.polrelid = parent))
    UNION ALL SELECT format('column grants on %I', a.attname) FROM pg_attribute a
    WHERE a.attrelid = parent AND a.attnum > 0 AND NOT a.attisdropped AND a.attacl IS NOT NULL
    UNION ALL SELECT format('deferrable constraint %I', con.conname) FROM pg_constraint con
    WHERE con.conrelid = parent AND con.condeferrable
    UNION ALL SELECT format('subscription writing %s', sr.srrelid::regclass) FROM pg_subscription_rel sr
    WHERE sr.srrelid = parent OR sr.srrelid IN (SELECT i.inhrelid FROM pg_inherits i WHERE i.inhparent = parent)) d;
  -- Copies, comparisons and the triggers find a row by its id alone.
  IF NOT EXISTS (SELECT FROM pg_index i WHERE i.indrelid = parent AND i.indisunique AND i.indnkeyatts = 1 AND i.indexprs IS NULL
                   AND i.indpred IS NULL AND i.indkey[0] = (SELECT a.attnum FROM pg_attribute a
                                                            WHERE a.attrelid = parent AND a.attname = id_column)) THEN
    RAISE EXCEPTION 'id_gen: the conversion of % needs its id column % unique by itself (a primary key or unique constraint on it alone)',
                    parent, quote_ident(id_column)
      USING ERRCODE = '0A000', HINT = 'Distribute such a table with layout => ''by_ownership'' anew instead, or keep it per_shard.';
  END IF;
  IF dependents IS NOT NULL THEN
    RAISE EXCEPTION 'id_gen: % on this shard has what its conversion would not carry over: %', parent, dependents
      USING ERRCODE = '2BP01', HINT = 'Drop or revoke them, convert the table, then create them again on the view or the table of rows.';
  END IF;
  RETURN 'ok';
END $$;
COMMENT ON FUNCTION id_gen.shard_check_owned_conversion(name, name, name, name) IS 'On a shard: whether a table can be converted to the layout by ownership (absent, converted or ok); raises what would stop it (its id not unique by itself, views, rules, foreign keys, publications, subscriptions, user triggers, row security, column grants, deferrable constraints). The coordinator asks every shard before it marks the table.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_check_owned_conversion(name, name, name, name) FROM PUBLIC;

-- Step 1. Returns 'absent' (no such table here: nothing to convert), 'converted' (done
-- already) or 'copying'.
CREATE OR REPLACE FUNCTION id_gen.shard_begin_owned_conversion(schema_name name, table_name name, id_column name, stem name,
                                                               lock_timeout_ms integer DEFAULT 10000) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  parent regclass := to_regclass(format('%I.%I', schema_name, table_name));
  rows_name name := id_gen.fit_name(stem, '_rows');
  rows_rel regclass := to_regclass(format('%I.%I', schema_name, rows_name));
  state text;
  tg name;
  n_triggers integer;
  targs text[];
BEGIN
  PERFORM id_gen.shard_begin_table_change('converts its tables', lock_timeout_ms);
  -- What it finds, and what would stop it (asked again under the lock below).
  state := id_gen.shard_check_owned_conversion(schema_name, table_name, id_column, stem);
  IF state <> 'ok' THEN
    RETURN state;
  END IF;
  -- Its writers finish first; later ones wait until the triggers are there.
  EXECUTE format('LOCK TABLE ONLY %s IN SHARE ROW EXCLUSIVE MODE', parent);
  PERFORM id_gen.refuse_untrusted_table(parent, 'shard table');
  PERFORM id_gen.shard_check_owned_conversion(schema_name, table_name, id_column, stem);
  -- The triggers of an earlier attempt count if each is there, enabled, and for the table
  -- of rows with the table's columns as they are now.
  SELECT ARRAY[rows_name::text, id_column::text, string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum),
               string_agg('n.' || quote_ident(a.attname), ', ' ORDER BY a.attnum)]
    INTO targs
  FROM pg_attribute a WHERE a.attrelid = parent AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '';
  targs[1] := format('%I.%I', schema_name, rows_name);
  SELECT count(*) INTO n_triggers FROM pg_trigger t
  WHERE t.tgrelid = parent AND t.tgname = ANY (id_gen.converted_trigger_names()) AND t.tgenabled <> 'D'
    AND t.tgfoid = 'id_gen.mirror_converted_rows()'::regprocedure
    AND t.tgargs = (SELECT string_agg(convert_to(a, 'UTF8') || '\x00'::bytea, ''::bytea ORDER BY o)
                    FROM unnest(targs) WITH ORDINALITY AS x(a, o));
  IF rows_rel IS NOT NULL AND n_triggers < cardinality(id_gen.converted_trigger_names()) THEN
    -- (Filled while no trigger mirrored the writes, or for other columns: made again.)
    PERFORM id_gen.refuse_untrusted_table(rows_rel, 'shard table');
    EXECUTE format('DROP TABLE %s', rows_rel);
    rows_rel := NULL;
  END IF;
  IF rows_rel IS NULL THEN
    EXECUTE format('CREATE TABLE %I.%I (LIKE %s INCLUDING ALL)', schema_name, rows_name, parent);
    rows_rel := format('%I.%I', schema_name, rows_name)::regclass;
    PERFORM id_gen.match_owner_and_grants(parent, rows_rel);
    EXECUTE format('COMMENT ON TABLE %s IS %L', rows_rel, id_gen.converted_table_comment('rows', schema_name, table_name));
  END IF;
  IF n_triggers < cardinality(id_gen.converted_trigger_names()) THEN
    FOR tg IN SELECT t.tgname FROM pg_trigger t WHERE t.tgrelid = parent AND t.tgname = ANY (id_gen.converted_trigger_names()) LOOP
      EXECUTE format('DROP TRIGGER %I ON %s', tg, parent);
    END LOOP;
    -- (The arguments: the table of rows, the id column, its columns with values, the same
    -- prefixed with n.)
    EXECUTE format('CREATE TRIGGER id_gen_convert_insert AFTER INSERT ON %s REFERENCING NEW TABLE AS id_gen_new '
                   'FOR EACH STATEMENT EXECUTE FUNCTION id_gen.mirror_converted_rows(%L, %L, %L, %L)', VARIADIC ARRAY[parent::text] || targs);
    EXECUTE format('CREATE TRIGGER id_gen_convert_update AFTER UPDATE ON %s REFERENCING OLD TABLE AS id_gen_old NEW TABLE AS id_gen_new '
                   'FOR EACH STATEMENT EXECUTE FUNCTION id_gen.mirror_converted_rows(%L, %L, %L, %L)', VARIADIC ARRAY[parent::text] || targs);
    EXECUTE format('CREATE TRIGGER id_gen_convert_delete AFTER DELETE ON %s REFERENCING OLD TABLE AS id_gen_old '
                   'FOR EACH STATEMENT EXECUTE FUNCTION id_gen.mirror_converted_rows(%L, %L, %L, %L)', VARIADIC ARRAY[parent::text] || targs);
    EXECUTE format('CREATE TRIGGER id_gen_convert_truncate BEFORE TRUNCATE ON %s '
                   'FOR EACH STATEMENT EXECUTE FUNCTION id_gen.mirror_converted_rows(%L, %L, %L, %L)', VARIADIC ARRAY[parent::text] || targs);
  END IF;
  RETURN 'copying';
END $$;
COMMENT ON FUNCTION id_gen.shard_begin_owned_conversion(name, name, name, name, integer) IS 'On a shard (step 1 of id_gen.convert_to_by_ownership on the coordinator): creates the table of rows of a partitioned table LIKE it, with its owner and grants, and statement triggers that log each later write of the table and make it in the table of rows too (id_gen.mirror_converted_rows); returns absent, converted or copying (a table of rows whose triggers are missing, disabled or for other columns is made again). Refuses what id_gen.shard_check_owned_conversion refuses (asked again under its lock). READ COMMITTED only.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_begin_owned_conversion(name, name, name, name, integer) FROM PUBLIC;

-- Step 2: copies up to `batch` rows with ids above after_id, in id order, locked FOR SHARE,
-- into the table of rows, from at most 100 partitions. Returns the id to go on after ('done' when no partition
-- holds ids above after_id).
CREATE OR REPLACE FUNCTION id_gen.shard_copy_owned_rows(schema_name name, table_name name, id_column name, stem name,
                                                        after_id bigint, batch integer) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  t record;
  part record;
  last_seen bigint;
  n bigint;
  wanted bigint := batch;
  visited integer := 0;
BEGIN
  SELECT * INTO t FROM id_gen.shard_converting_table(schema_name, table_name, stem);
  -- (In a deadlock with a writer, the copy gives up: the coordinator calls it again.)
  PERFORM set_config('deadlock_timeout', '100ms', true);
  FOR part IN SELECT c.oid::regclass AS rel, id_gen.gene_first_id(x.g[1]) AS first_id, id_gen.gene_last_id(x.g[2]) AS last_id
              FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
              CROSS JOIN LATERAL (SELECT id_gen.partition_gene_range(c.relpartbound) AS g) x
              WHERE i.inhparent = t.parent AND x.g IS NOT NULL AND id_gen.gene_last_id(x.g[2]) > after_id
              ORDER BY x.g[1] LOOP
    -- (FOR SHARE: a write of these rows waits for this copy, then finds it, or this copy
    -- waits for the write and copies its result, or nothing after a delete; a copy made
    -- again by a resumed CALL never brings back a row deleted meanwhile.)
    EXECUTE format('WITH b AS (SELECT %1$s FROM ONLY %2$s WHERE %3$I OPERATOR(pg_catalog.>) $1 ORDER BY %3$I LIMIT $2 FOR SHARE), '
                   'i AS (INSERT INTO %4$s (%1$s) SELECT * FROM b ON CONFLICT (%3$I) DO NOTHING) '
                   'SELECT max(%3$I), count(*) FROM b', t.cols, part.rel, id_column, t.rows_rel)
      USING greatest(after_id, part.first_id - 1), wanted INTO last_seen, n;
    wanted := wanted - n;
    IF wanted <= 0 THEN
      RETURN last_seen::text;
    END IF;
    -- (This partition is done.)
    after_id := part.last_id;
    visited := visited + 1;
    EXIT WHEN visited >= 100;
  END LOOP;
  RETURN CASE WHEN visited = 0 THEN 'done' ELSE after_id::text END;
END $$;
COMMENT ON FUNCTION id_gen.shard_copy_owned_rows(name, name, name, name, bigint, integer) IS 'On a shard (step 2 of id_gen.convert_to_by_ownership): copies up to batch rows with ids above after_id, in id order, locked FOR SHARE and from at most 100 partitions, into the table of rows of a table being converted (rows there already are left); returns the id to go on after, or done.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_copy_owned_rows(name, name, name, name, bigint, integer) FROM PUBLIC;

-- Step 3: takes up to `batch` logged ids out of the log and compares the table's rows of them
-- with their copies; a copy that differs, or is missing or left over, is made again (only
-- those: a copy that is right keeps its version). Returns {entries taken, copies made again}.
CREATE OR REPLACE FUNCTION id_gen.shard_sync_converted_changes(schema_name name, table_name name, id_column name, stem name,
                                                               batch integer) RETURNS integer[]
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  t record;
  ids bigint[];
  n integer;
  differ bigint[];
  deleted integer;
  inserted integer;
BEGIN
  IF batch < 1 THEN
    RAISE EXCEPTION 'id_gen: batch must be at least 1 (it is %)', batch USING ERRCODE = '22023';
  END IF;
  SELECT * INTO t FROM id_gen.shard_converting_table(schema_name, table_name, stem);
  -- (In a deadlock with a writer, the comparison gives up: the coordinator calls it again.)
  PERFORM set_config('deadlock_timeout', '100ms', true);
  WITH taken AS (DELETE FROM id_gen.shard_converted_changes l
                 WHERE l.ctid = ANY (ARRAY(SELECT c.ctid FROM id_gen.shard_converted_changes c WHERE c.rel = t.parent LIMIT batch))
                 RETURNING l.id)
  SELECT array_agg(DISTINCT taken.id), count(*) INTO ids, n FROM taken;
  IF n = 0 THEN
    RETURN ARRAY[0, 0];
  END IF;
  -- The ids whose copy differs from the table's row, or has no row, or is missing. (Rows
  -- compared as text: every type has an output function, not every one an equality. Each
  -- side read by id = ANY, which prunes the table's partitions at planning; each statement
  -- sees every write committed before it began, the logged ones included.)
  EXECUTE format('WITH p AS (SELECT %1$s FROM %2$s WHERE %4$I OPERATOR(pg_catalog.=) ANY ($1)), '
                 'r AS (SELECT %1$s FROM %3$s WHERE %4$I OPERATOR(pg_catalog.=) ANY ($1)) '
                 'SELECT coalesce(array_agg(coalesce(p.%4$I, r.%4$I)), ''{}'') FROM p FULL JOIN r ON p.%4$I OPERATOR(pg_catalog.=) r.%4$I '
                 'WHERE p::text IS DISTINCT FROM r::text',
                 t.cols, t.parent, t.rows_rel, id_column) USING ids INTO differ;
  IF cardinality(differ) = 0 THEN
    RETURN ARRAY[n, 0];
  END IF;
  EXECUTE format('DELETE FROM %s WHERE %I OPERATOR(pg_catalog.=) ANY ($1)', t.rows_rel, id_column) USING differ;
  GET DIAGNOSTICS deleted = ROW_COUNT;
  EXECUTE format('INSERT INTO %s (%s) SELECT %s FROM %s WHERE %I OPERATOR(pg_catalog.=) ANY ($1)',
                 t.rows_rel, t.cols, t.cols, t.parent, id_column) USING differ;
  GET DIAGNOSTICS inserted = ROW_COUNT;
  RETURN ARRAY[n, greatest(deleted, inserted)];
END $$;
COMMENT ON FUNCTION id_gen.shard_sync_converted_changes(name, name, name, name, integer) IS 'On a shard (step 3 of id_gen.convert_to_by_ownership): takes up to batch logged ids of a table being converted out of id_gen.shard_converted_changes, compares the table''s rows of them with their copies in the table of rows and makes again those that differ; returns {entries taken, copies made again}.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_sync_converted_changes(name, name, name, name, integer) FROM PUBLIC;

-- Step 4: the swap. `definition` is the coordinator's CREATE TABLE of the table of rows
-- (what shard_apply_owned_ranges would run), recorded for later changes.
CREATE OR REPLACE FUNCTION id_gen.shard_finish_owned_conversion(schema_name name, table_name name, id_column name, stem name,
                                                                definition text, lock_timeout_ms integer DEFAULT 10000) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  t record;
  part regclass;
  old_name name := id_gen.fit_name(stem, '_by_range');
  tg name;
  older text;
  locked_at timestamptz;
  waited_until timestamptz := clock_timestamp() + interval '10 s';
BEGIN
  PERFORM id_gen.shard_begin_table_change('converts its tables', lock_timeout_ms);
  IF EXISTS (SELECT FROM id_gen.shard_tables s
             WHERE (s.schema_name, s.table_name) = (shard_finish_owned_conversion.schema_name, shard_finish_owned_conversion.table_name)
               AND s.rows_table IS NOT NULL) THEN
    RETURN 'converted already';
  END IF;
  SELECT * INTO t FROM id_gen.shard_converting_table(schema_name, table_name, stem);
  IF to_regclass(format('%I.%I', schema_name, old_name)) IS NOT NULL THEN
    RAISE EXCEPTION 'id_gen: relation %.% already exists on this shard', quote_ident(schema_name), quote_ident(old_name)
      USING ERRCODE = '42P07', HINT = 'The conversion keeps the old table under that name until it is dropped; rename that relation.';
  END IF;
  -- Snapshots older than this transaction may miss copied rows in the table of rows: the
  -- transactions that hold one end first. (This transaction has no xid yet, so it holds
  -- back no one's snapshot.)
  LOOP
    PERFORM pg_stat_clear_snapshot();
    SELECT string_agg(a.pid::text, ', ' ORDER BY a.pid) INTO older FROM pg_stat_activity a
    WHERE a.pid <> pg_backend_pid() AND a.datname = current_database()
      AND a.backend_type NOT IN ('autovacuum worker', 'walsender')
      AND a.backend_xmin IS NOT NULL AND a.xact_start < transaction_timestamp();
    EXIT WHEN older IS NULL;
    IF clock_timestamp() > waited_until THEN
      RAISE EXCEPTION 'id_gen: transactions that began before the swap of %.% still hold snapshots on this shard (pids %)',
                      quote_ident(schema_name), quote_ident(table_name), older
        USING ERRCODE = '55P03',
              HINT = 'A snapshot taken before the copy ended would miss rows after the swap. Nothing is lost; the coordinator tries again, and the same CALL goes on.';
    END IF;
    PERFORM pg_sleep(0.02);
  END LOOP;
  -- Every statement that names the table waits from here (one that waited finds the view
  -- when it gets the lock).
  EXECUTE format('LOCK TABLE ONLY %s IN ACCESS EXCLUSIVE MODE', t.parent);
  locked_at := clock_timestamp();
  IF (SELECT string_agg(format('%I %s', a.attname, format_type(a.atttypid, a.atttypmod)), ', ' ORDER BY a.attnum)
      FROM pg_attribute a WHERE a.attrelid = t.parent AND a.attnum > 0 AND NOT a.attisdropped)
     IS DISTINCT FROM
     (SELECT string_agg(format('%I %s', a.attname, format_type(a.atttypid, a.atttypmod)), ', ' ORDER BY a.attnum)
      FROM pg_attribute a WHERE a.attrelid = t.rows_rel AND a.attnum > 0 AND NOT a.attisdropped) THEN
    RAISE EXCEPTION 'id_gen: the columns of % changed during its conversion; % does not have them', t.parent, t.rows_rel
      USING ERRCODE = '55000', HINT = 'The same CALL again makes the table of rows again with the new columns and copies the rows again.';
  END IF;
  -- A write that missed its copy and was not compared since: the coordinator compares
  -- (step 3) and tries again. (This transaction writes no copy, which a statement waiting
  -- for the lock would not see; and a snapshot that saw the table while the copy differed
  -- must be gone first, which the next attempt's wait sees to.) Every other logged write
  -- reached its copy: those entries go.
  -- Triggers disabled meanwhile (ALTER TABLE ... DISABLE TRIGGER USER) let writes through
  -- unlogged: the CALL starts over.
  IF (SELECT count(*) FROM pg_trigger g WHERE g.tgrelid = t.parent AND g.tgname = ANY (id_gen.converted_trigger_names())
        AND g.tgenabled <> 'D') < cardinality(id_gen.converted_trigger_names()) THEN
    RAISE EXCEPTION 'id_gen: the conversion''s triggers on % were dropped or disabled; writes may have missed the table of rows', t.parent
      USING ERRCODE = '55000', HINT = 'The same CALL again makes the table of rows again and copies the rows again.';
  END IF;
  IF EXISTS (SELECT FROM id_gen.shard_converted_changes l WHERE l.rel = t.parent AND l.missed) THEN
    RAISE EXCEPTION 'id_gen: writes of %.% that missed their copies are to be compared before the swap', quote_ident(schema_name), quote_ident(table_name)
      USING ERRCODE = '55P03', HINT = 'The coordinator compares them (step 3) and tries again.';
  END IF;
  DELETE FROM id_gen.shard_converted_changes l WHERE l.rel = t.parent;
  -- The table of rows gets the table's grants as they are now (the view takes them).
  PERFORM id_gen.match_owner_and_grants(t.parent, t.rows_rel);
  -- The partitions without a gene range (the tombstone, the partition of negative ids) are
  -- empty by their constraints; whatever they hold goes too, or the swap fails.
  FOR part IN SELECT c.oid::regclass FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
              WHERE i.inhparent = t.parent AND id_gen.partition_gene_range(c.relpartbound) IS NULL LOOP
    EXECUTE format('INSERT INTO %s (%s) SELECT %s FROM ONLY %s', t.rows_rel, t.cols, t.cols, part);
  END LOOP;
  FOR tg IN SELECT g.tgname FROM pg_trigger g WHERE g.tgrelid = t.parent AND g.tgname = ANY (id_gen.converted_trigger_names()) LOOP
    EXECUTE format('DROP TRIGGER %I ON %s', tg, t.parent);
  END LOOP;
  EXECUTE format('ALTER TABLE %s RENAME TO %I', t.parent, old_name);
  EXECUTE format('COMMENT ON TABLE %I.%I IS %L', schema_name, old_name, id_gen.converted_table_comment('old', schema_name, table_name));
  EXECUTE format('CREATE TRIGGER id_gen_owned_rows BEFORE INSERT OR UPDATE OR DELETE ON %s FOR EACH ROW '
                 'EXECUTE FUNCTION id_gen.refuse_rows_not_owned(%L)', t.rows_rel, id_column);
  EXECUTE format('COMMENT ON TABLE %s IS %L', t.rows_rel,
                 format('id_gen: every row this shard holds of %I.%I, owned or not; read it through the view %I.%I, which keeps the owned ones',
                        schema_name, table_name, schema_name, table_name));
  UPDATE id_gen.shard_tables s
  SET rows_table = id_gen.fit_name(shard_finish_owned_conversion.stem, '_rows'), definition = shard_finish_owned_conversion.definition,
      fenced_ranges = '{}', updated_at = now()
  WHERE (s.schema_name, s.table_name) = (shard_finish_owned_conversion.schema_name, shard_finish_owned_conversion.table_name);
  PERFORM id_gen.shard_make_owned_view(t.rows_rel, schema_name, table_name, id_column);
  PERFORM id_gen.shard_routing_changed();
  RETURN format('converted (%s ms waiting for older snapshots and the lock, then the table locked for %s ms before the commit)',
                round(extract(epoch FROM locked_at - transaction_timestamp()) * 1000),
                round(extract(epoch FROM clock_timestamp() - locked_at) * 1000, 1));
END $$;
COMMENT ON FUNCTION id_gen.shard_finish_owned_conversion(name, name, name, name, text, integer) IS 'On a shard (step 4 of id_gen.convert_to_by_ownership): waits until no transaction of this database older than it holds a snapshot (55P03 after 10 s), then under ACCESS EXCLUSIVE on the table alone (55P03 after lock_timeout_ms) refuses (55P03) while a write that missed its copy is logged and not compared since, drops the log''s other entries and the triggers, renames the partitioned table <stem>_by_range, gives the table of rows its trigger and the table''s name to the view of the owned rows, and records the table of rows in id_gen.shard_tables (the owned ranges unchanged). READ COMMITTED only.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_finish_owned_conversion(name, name, name, name, text, integer) FROM PUBLIC;

-- Step 5: drops up to `batch` partitions of the old table, or the table when it has none
-- left. Returns how many relations it dropped (0: nothing was left).
CREATE OR REPLACE FUNCTION id_gen.shard_drop_converted_partitions(schema_name name, table_name name, stem name,
                                                                  batch integer) RETURNS integer
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  old regclass := to_regclass(format('%I.%I', schema_name, id_gen.fit_name(stem, '_by_range')));
  part regclass;
  n integer := 0;
BEGIN
  PERFORM id_gen.quiet_ddl();
  PERFORM set_config('lock_timeout', '10s', true);
  IF old IS NULL THEN
    RETURN 0;
  ELSIF obj_description(old, 'pg_class') IS DISTINCT FROM id_gen.converted_table_comment('old', schema_name, table_name) THEN
    RAISE EXCEPTION 'id_gen: % is not the old table of a conversion of %.%', old, quote_ident(schema_name), quote_ident(table_name)
      USING ERRCODE = '42P07', HINT = 'id_gen drops only what its conversion left; rename that relation.';
  END IF;
  FOR part IN SELECT c.oid::regclass FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
              WHERE i.inhparent = old ORDER BY c.relname LIMIT batch LOOP
    EXECUTE format('DROP TABLE %s', part);
    n := n + 1;
  END LOOP;
  IF n = 0 THEN
    EXECUTE format('DROP TABLE %s', old);
    n := 1;
  END IF;
  RETURN n;
END $$;
COMMENT ON FUNCTION id_gen.shard_drop_converted_partitions(name, name, name, integer) IS 'On a shard (step 5 of id_gen.convert_to_by_ownership): drops up to batch partitions of the table a conversion to the layout by ownership left (<stem>_by_range, only when it bears the conversion''s comment), or the table once it has none; returns how many relations it dropped (0 when nothing is left).';
REVOKE EXECUTE ON FUNCTION id_gen.shard_drop_converted_partitions(name, name, name, integer) FROM PUBLIC;

-- Where a table's conversion stands on this shard, without changing anything.
CREATE OR REPLACE FUNCTION id_gen.shard_owned_conversion_state(schema_name name, table_name name, stem name) RETURNS text
LANGUAGE plpgsql STRICT STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  parent regclass := to_regclass(format('%I.%I', schema_name, table_name));
  rows_rel regclass := to_regclass(format('%I.%I', schema_name, id_gen.fit_name(stem, '_rows')));
BEGIN
  IF EXISTS (SELECT FROM id_gen.shard_tables t
             WHERE (t.schema_name, t.table_name) = (shard_owned_conversion_state.schema_name, shard_owned_conversion_state.table_name)
               AND t.rows_table IS NOT NULL) THEN
    RETURN 'converted';
  ELSIF parent IS NULL THEN
    RETURN 'absent';
  ELSIF EXISTS (SELECT FROM pg_trigger t WHERE t.tgrelid = parent AND t.tgname = ANY (id_gen.converted_trigger_names()))
        OR (rows_rel IS NOT NULL
            AND obj_description(rows_rel, 'pg_class') IS NOT DISTINCT FROM id_gen.converted_table_comment('rows', schema_name, table_name)) THEN
    RETURN 'copying';
  END IF;
  RETURN 'untouched';
END $$;
COMMENT ON FUNCTION id_gen.shard_owned_conversion_state(name, name, name) IS 'On a shard: where the conversion of a table to the layout by ownership stands here: converted (the view and the table of rows are in place), copying (its triggers or its table of rows are there), untouched or absent. Changes nothing.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_owned_conversion_state(name, name, name) FROM PUBLIC;

-- Undoes what a conversion did on this shard before its swap: the triggers, the table of
-- rows and the log's entries go; the partitioned table stays as it was (it never stopped
-- taking the writes). A shard converted already is left alone ('converted').
CREATE OR REPLACE FUNCTION id_gen.shard_abort_owned_conversion(schema_name name, table_name name, stem name,
                                                               lock_timeout_ms integer DEFAULT 10000) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  parent regclass := to_regclass(format('%I.%I', schema_name, table_name));
  rows_rel regclass := to_regclass(format('%I.%I', schema_name, id_gen.fit_name(stem, '_rows')));
  state text;
  tg name;
BEGIN
  PERFORM id_gen.shard_begin_table_change('aborts the conversion of its tables', lock_timeout_ms);
  state := id_gen.shard_owned_conversion_state(schema_name, table_name, stem);
  IF state IN ('converted', 'absent', 'untouched') THEN
    RETURN state;
  END IF;
  -- The table's writers finish first; the triggers go with this transaction.
  EXECUTE format('LOCK TABLE ONLY %s IN SHARE ROW EXCLUSIVE MODE', parent);
  FOR tg IN SELECT t.tgname FROM pg_trigger t WHERE t.tgrelid = parent AND t.tgname = ANY (id_gen.converted_trigger_names()) LOOP
    EXECUTE format('DROP TRIGGER %I ON %s', tg, parent);
  END LOOP;
  IF rows_rel IS NOT NULL
     AND obj_description(rows_rel, 'pg_class') IS NOT DISTINCT FROM id_gen.converted_table_comment('rows', schema_name, table_name) THEN
    EXECUTE format('DROP TABLE %s', rows_rel);
  END IF;
  DELETE FROM id_gen.shard_converted_changes c WHERE c.rel = parent;
  RETURN 'aborted';
END $$;
COMMENT ON FUNCTION id_gen.shard_abort_owned_conversion(name, name, name, integer) IS 'On a shard (id_gen.abort_conversion on the coordinator): undoes a conversion to the layout by ownership that has not swapped here: drops its triggers and its table of rows (only the one bearing the conversion''s comment) and the log''s entries of the table; the partitioned table is as it was. Returns aborted, or converted, untouched or absent (nothing done). READ COMMITTED only.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_abort_owned_conversion(name, name, name, integer) FROM PUBLIC;
