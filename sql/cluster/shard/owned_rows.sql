-- On a shard: the layout by ownership (docs/design.md §11.8). A distributed table laid out
-- so keeps every row the shard holds of it in one plain table, its *table of rows*
-- <stem>_rows, and the table's own name is a view of the rows whose genes the shard owns:
--
--   CREATE VIEW <table> AS SELECT <columns>, ctid FROM <stem>_rows
--   WHERE id_gen.shard_owns('<stem>_rows'::regclass, <id>)
--
-- What the shard owns is data: the ranges id_gen.shard_tables records (gene_ranges, set by
-- id_gen.shard_apply_owned_ranges when the coordinator pushes them), cached per backend as
-- a bitmap of the genes (src/routing_guard/owned_ranges.rs). So a route change, a split or a
-- merge changes one row here, and a backend's first statement, a generic plan and a
-- whole-table scan cost the same at any number of ranges. The coordinator's foreign table
-- reads and writes the view (postgres_fdw updates rows it cannot update directly by their
-- ctid: the view shows it, last); zero-hop clients use the same name.
--
-- The table of rows carries the trigger id_gen_owned_rows (id_gen.refuse_rows_not_owned:
-- a write of a gene not owned gets IG001; not fired by a logical replication apply
-- worker), and the routing guard checks its scans that select by id against the same
-- ranges (src/routing_guard/owned_scan.rs). Moves of such tables (since 0.7.9; the
-- coordinator drives them, sql/cluster/move.sql): the source publishes its table of rows with
-- a row filter on the moved genes' ids, the target's copies wait in its table of rows, not
-- owned (so hidden, and the trigger refuses writes of them), the fence records the genes as
-- fenced on the source (shard_tables.fenced_ranges: IG002 for writes, deletes, claims and
-- lookups by id), then the target takes the genes and the source gives them up, and the rows
-- left behind (the source's, or an aborted move's copies on the target) are deleted in
-- batches. Splits and merges keep the genes where they are.
-- Code only (CREATE OR REPLACE; the event trigger is dropped and created again).
--
-- Invariants:
--   * Nothing here hides rows: a change that takes genes away from a table refuses (23514,
--     which the coordinator turns into 55000) while the table of rows holds rows of them.
--     It locks the table of rows against writers first (SHARE ROW EXCLUSIVE; readers go
--     on) in a READ COMMITTED transaction, so every row committed before is seen, and a
--     writer that waited finds the genes gone (the routing epoch moves at commit, before
--     the lock is released).
--   * The view names every column of the table of rows, in order, then ctid; after an
--     ALTER TABLE of the table of rows the event trigger makes it so again, keeping the
--     view's owner and grants (a view that a DROP COLUMN ... CASCADE dropped is made again
--     with the owner and grants of the table of rows); a rename of the table of rows or of
--     its id column is refused (both are found by name). The DROP of the old view needs its
--     ACCESS EXCLUSIVE lock after the ALTER took the table's: a statement that locked the
--     view and waits for the table makes a deadlock (40P01 for one of them); lock both first
--     (docs/guide/scale-out.md).
--   * A move's functions below change what is owned without that check: the source gives
--     up genes whose rows the target holds, and only rows of genes not owned are ever
--     deleted (shard_delete_unowned_rows tests each row).
--   * No code that a non-superuser owns runs in the coordinator's calls
--     (id_gen.refuse_untrusted_table); the event trigger runs with the rights of whoever
--     altered the table.

-- The view <schema_name>.<view_name> of the owned rows of `rows_rel`, made or made again
-- when its columns are not those of rows_rel (then with the old view's owner, grants and
-- comment). Returns the view.
CREATE OR REPLACE FUNCTION id_gen.shard_make_owned_view(rows_rel regclass, schema_name name, view_name name,
                                                        id_column name) RETURNS regclass
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  cols text;
  old regclass := to_regclass(format('%I.%I', schema_name, view_name));
  old_cols text;
  staged name := id_gen.fit_name(view_name, '_id_gen_new');
  body text;
  about text;
BEGIN
  SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO cols
  FROM pg_attribute a WHERE a.attrelid = rows_rel AND a.attnum > 0 AND NOT a.attisdropped;
  body := format('SELECT %s, ctid FROM %s WHERE id_gen.shard_owns(%L::pg_catalog.regclass, %I)',
                 cols, rows_rel, rows_rel::text, id_column);
  about := format('id_gen: the rows of %s whose genes this shard owns (id_gen.shard_tables); ctid, last, is for the coordinator''s updates (postgres_fdw).', rows_rel);
  IF old IS NULL THEN
    EXECUTE format('CREATE VIEW %I.%I AS %s', schema_name, view_name, body);
    old := format('%I.%I', schema_name, view_name)::regclass;
    PERFORM id_gen.match_owner_and_grants(rows_rel, old);
    EXECUTE format('COMMENT ON VIEW %s IS %L', old, about);
    RETURN old;
  END IF;
  IF (SELECT c.relkind FROM pg_class c WHERE c.oid = old) <> 'v'
     OR NOT EXISTS (SELECT FROM pg_depend d JOIN pg_rewrite rw ON rw.oid = d.objid
                    WHERE d.classid = 'pg_rewrite'::regclass AND rw.ev_class = old
                      AND d.refclassid = 'pg_class'::regclass AND d.refobjid = rows_rel) THEN
    RAISE EXCEPTION 'id_gen: % exists on this shard, and it is not the view of the owned rows of %', old, rows_rel
      USING ERRCODE = '42P07', HINT = 'Rename or drop that relation; id_gen makes the view again.';
  END IF;
  SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO old_cols
  FROM pg_attribute a WHERE a.attrelid = old AND a.attnum > 0 AND NOT a.attisdropped;
  IF old_cols = cols || ', ctid' THEN
    RETURN old;
  END IF;
  -- Made under another name, given the old one's owner, grants and comment, then put in
  -- its place (a view of the user's over it makes the DROP fail: 2BP01).
  IF to_regclass(format('%I.%I', schema_name, staged)) IS NOT NULL THEN
    EXECUTE format('DROP VIEW %I.%I', schema_name, staged);
  END IF;
  EXECUTE format('CREATE VIEW %I.%I AS %s', schema_name, staged, body);
  PERFORM id_gen.match_owner_and_grants(old, format('%I.%I', schema_name, staged)::regclass);
  EXECUTE format('COMMENT ON VIEW %I.%I IS %L', schema_name, staged, coalesce(obj_description(old, 'pg_class'), about));
  BEGIN
    EXECUTE format('DROP VIEW %s', old);
  EXCEPTION WHEN dependent_objects_still_exist THEN
    RAISE EXCEPTION 'id_gen: cannot make the view % again after the change of %: other objects depend on it', old, rows_rel
      USING ERRCODE = '2BP01', HINT = 'Drop the views that use it, make the change, then create them again.';
  END;
  EXECUTE format('ALTER VIEW %I.%I RENAME TO %I', schema_name, staged, view_name);
  RETURN format('%I.%I', schema_name, view_name)::regclass;
END $$;
COMMENT ON FUNCTION id_gen.shard_make_owned_view(regclass, name, name, name) IS 'On a shard: makes the view of the owned rows of a table laid out by ownership (every column of the table of rows, then ctid, WHERE id_gen.shard_owns), or makes it again when the table''s columns changed, keeping the view''s owner, grants and comment. Runs with the caller''s rights.';
GRANT EXECUTE ON FUNCTION id_gen.shard_make_owned_view(regclass, name, name, name) TO PUBLIC;

-- Makes a shard own exactly gene_ranges of a table laid out by ownership: creates the table
-- of rows (from `definition`, the coordinator's CREATE TABLE of <stem>_rows), its trigger and
-- the view when missing, and records the ranges. Genes it would no longer own must hold no
-- rows (23514 otherwise).
CREATE OR REPLACE FUNCTION id_gen.shard_apply_owned_ranges(schema_name name, table_name name, id_column name, stem name,
                                                           gene_ranges int4range[], definition text,
                                                           lock_timeout_ms integer DEFAULT 10000) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  rows_name name := id_gen.fit_name(stem, '_rows');
  rows_rel regclass := to_regclass(format('%I.%I', schema_name, rows_name));
  front regclass := to_regclass(format('%I.%I', schema_name, table_name));
  recorded int4range[];
  lost int4range;
  held boolean;
  created boolean := false;
BEGIN
  PERFORM id_gen.shard_begin_table_change('changes what it owns', lock_timeout_ms);
  IF rows_rel IS NULL THEN
    IF front IS NOT NULL THEN
      RAISE EXCEPTION 'id_gen: % exists on this shard, and it is not id_gen''s view of the owned rows of a table laid out by ownership', front
        USING ERRCODE = '55000',
              HINT = 'distribute_table creates the shards'' tables itself (a table of rows and a view of the owned ones); rename or drop the existing relation.';
    END IF;
    EXECUTE format('CREATE SCHEMA IF NOT EXISTS %I', schema_name);
    EXECUTE definition;
    rows_rel := format('%I.%I', schema_name, rows_name)::regclass;
    EXECUTE format('CREATE TRIGGER id_gen_owned_rows BEFORE INSERT OR UPDATE OR DELETE ON %s FOR EACH ROW '
                   'EXECUTE FUNCTION id_gen.refuse_rows_not_owned(%L)', rows_rel, id_column);
    EXECUTE format('COMMENT ON TABLE %s IS %L', rows_rel,
                   format('id_gen: every row this shard holds of %I.%I, owned or not; read it through the view %I.%I, which keeps the owned ones', schema_name, table_name, schema_name, table_name));
    created := true;
  ELSIF (SELECT c.relkind FROM pg_class c WHERE c.oid = rows_rel) <> 'r'
        OR NOT EXISTS (SELECT FROM pg_trigger t WHERE t.tgrelid = rows_rel AND t.tgname = 'id_gen_owned_rows') THEN
    RAISE EXCEPTION 'id_gen: % exists on this shard, and it is not the table of rows of %.% (a plain table with the trigger id_gen_owned_rows)',
                    rows_rel, quote_ident(schema_name), quote_ident(table_name)
      USING ERRCODE = '55000', HINT = 'Rename or drop that relation; distribute_table creates it.';
  END IF;
  -- Every writer of the table finishes first, and later ones wait until this commits.
  EXECUTE format('LOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE', rows_rel);
  PERFORM id_gen.refuse_untrusted_table(rows_rel, 'shard table');
  SELECT t.gene_ranges INTO recorded FROM id_gen.shard_tables t
  WHERE (t.schema_name, t.table_name) = (shard_apply_owned_ranges.schema_name, shard_apply_owned_ranges.table_name);
  -- Genes it would no longer own must hold no rows: they would be hidden, not moved.
  FOR lost IN SELECT g FROM unnest(int4multirange(VARIADIC coalesce(recorded, '{}'))
                                   - int4multirange(VARIADIC gene_ranges)) g ORDER BY g LOOP
    EXECUTE format('SELECT EXISTS (SELECT FROM %s WHERE %I OPERATOR(pg_catalog.>=) %s AND %I OPERATOR(pg_catalog.<=) %s)',
                   rows_rel, id_column, id_gen.gene_first_id(lower(lost)), id_column, id_gen.gene_last_id(upper(lost) - 1))
      INTO held;
    IF held THEN
      RAISE EXCEPTION 'id_gen: this shard holds rows of genes % .. % of %.%, which it would no longer own',
                      lower(lost), upper(lost) - 1, quote_ident(schema_name), quote_ident(table_name)
        USING ERRCODE = '23514',
              HINT = 'A route change does not move rows: move the genes (id_gen.move_genes on the coordinator), or delete those rows.';
    END IF;
  END LOOP;
  PERFORM id_gen.shard_make_owned_view(rows_rel, schema_name, table_name, id_column);
  PERFORM id_gen.shard_routing_changed();
  INSERT INTO id_gen.shard_tables AS t (schema_name, table_name, id_column, gene_ranges, definition, stem, rows_table)
  VALUES (shard_apply_owned_ranges.schema_name, shard_apply_owned_ranges.table_name, shard_apply_owned_ranges.id_column,
          shard_apply_owned_ranges.gene_ranges, shard_apply_owned_ranges.definition, shard_apply_owned_ranges.stem, rows_name)
  ON CONFLICT ON CONSTRAINT shard_tables_pkey DO UPDATE
  SET id_column = excluded.id_column, gene_ranges = excluded.gene_ranges, definition = excluded.definition,
      stem = excluded.stem, rows_table = excluded.rows_table, updated_at = now();
  RETURN format('%s%s route ranges owned (were %s)', CASE WHEN created THEN 'created; ' ELSE '' END,
                cardinality(gene_ranges), coalesce(cardinality(recorded), 0));
END $$;
COMMENT ON FUNCTION id_gen.shard_apply_owned_ranges(name, name, name, name, int4range[], text, integer) IS 'On a shard (called by the coordinator over dblink): makes the shard own exactly gene_ranges of a table laid out by ownership, as data in id_gen.shard_tables; creates the table of rows, its trigger and the view of the owned rows when missing. Refuses (23514) to give up genes whose rows the table holds. READ COMMITTED only; locks the table of rows against writers.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_apply_owned_ranges(name, name, name, name, int4range[], text, integer) FROM PUBLIC;

-- After ALTER TABLE of a table of rows (a column added, dropped, renamed): its view of the
-- owned rows is made again with the table's columns.
CREATE OR REPLACE FUNCTION id_gen.follow_owned_rows_ddl() RETURNS event_trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  r record;
BEGIN
  -- Any other ALTER TABLE returns here, without reading id_gen's catalog.
  IF to_regclass('id_gen.shard_tables') IS NULL
     OR NOT EXISTS (SELECT FROM pg_event_trigger_ddl_commands() c
                    JOIN pg_trigger t ON t.tgrelid = c.objid AND t.tgname = 'id_gen_owned_rows'
                    WHERE c.classid = 'pg_class'::regclass) THEN
    RETURN;
  END IF;
  FOR r IN SELECT DISTINCT c.objid::regclass AS rows_rel, st.schema_name, st.table_name, st.id_column
           FROM pg_event_trigger_ddl_commands() c
           JOIN pg_trigger t ON t.tgrelid = c.objid AND t.tgname = 'id_gen_owned_rows'
           JOIN pg_class pc ON pc.oid = c.objid
           JOIN pg_namespace n ON n.oid = pc.relnamespace
           LEFT JOIN id_gen.shard_tables st ON st.schema_name = n.nspname AND st.rows_table = pc.relname
           WHERE c.classid = 'pg_class'::regclass LOOP
    -- The table of rows and its id column are found by name (the ownership test, the view).
    IF r.table_name IS NULL THEN
      RAISE EXCEPTION 'id_gen: % is the table of rows of a table laid out by ownership; it cannot be renamed or moved to another schema', r.rows_rel
        USING ERRCODE = '0A000', HINT = 'id_gen finds it by its name (id_gen.shard_tables.rows_table).';
    ELSIF NOT EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = r.rows_rel AND a.attname = r.id_column AND NOT a.attisdropped) THEN
      RAISE EXCEPTION 'id_gen: the id column % of % cannot be renamed or dropped', quote_ident(r.id_column), r.rows_rel
        USING ERRCODE = '0A000', HINT = 'The shard routes its rows by that column.';
    END IF;
    PERFORM id_gen.shard_make_owned_view(r.rows_rel, r.schema_name, r.table_name, r.id_column);
  END LOOP;
END $$;
COMMENT ON FUNCTION id_gen.follow_owned_rows_ddl() IS 'Event trigger, on a shard: after an ALTER TABLE of the table of rows of a table laid out by ownership, makes its view of the owned rows again with the table''s columns (keeping the view''s owner and grants); refuses (0A000) to rename that table or its id column.';
DROP EVENT TRIGGER IF EXISTS id_gen_follow_owned_rows_ddl;
CREATE EVENT TRIGGER id_gen_follow_owned_rows_ddl ON ddl_command_end
  WHEN TAG IN ('ALTER TABLE')
  EXECUTE FUNCTION id_gen.follow_owned_rows_ddl();
COMMENT ON EVENT TRIGGER id_gen_follow_owned_rows_ddl IS 'Keeps the view of the owned rows of each table laid out by ownership in step with its table of rows (id_gen.follow_owned_rows_ddl).';

-- Moves (sql/cluster/move.sql drives them) ------------------------------------------------
-- rows_tables: qualified names of tables of rows; the moved genes are lower_gene .. upper_gene.

-- The shard_tables row of each table of rows named with the moved genes added to or
-- removed from what it owns (owning) and what is fenced (fencing); a fence first locks the
-- table of rows against writers (SHARE ROW EXCLUSIVE, at most lock_timeout_ms); the backend's and, at commit, every backend's view of
-- ownership is dropped. Missing tables are skipped (a target that never got one). Returns
-- how many rows changed.
CREATE OR REPLACE FUNCTION id_gen.change_owned_genes(rows_tables text[], lower_gene integer, upper_gene integer,
                                                     owning text, fencing text, lock_timeout_ms integer) RETURNS integer
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  rel regclass;
  genes int4multirange := int4multirange(int4range(lower_gene, upper_gene, '[]'));
  n integer := 0;
BEGIN
  IF owning NOT IN ('add', 'remove', 'keep') OR fencing NOT IN ('add', 'remove', 'keep') THEN
    RAISE EXCEPTION 'id_gen: owning and fencing are add, remove or keep' USING ERRCODE = '22023';
  END IF;
  PERFORM id_gen.shard_begin_table_change('changes what it owns', lock_timeout_ms);
  FOREACH rel IN ARRAY id_gen.shard_relations(rows_tables, false) LOOP
    -- A fence waits for the writers and claims in flight; later ones find the genes fenced
    -- (the epoch moves at commit, before the lock goes). Nothing else needs the lock: the
    -- genes a source gives up are fenced, those a target takes have no writer yet.
    IF fencing = 'add' THEN
      EXECUTE format('LOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE', rel);
    END IF;
    PERFORM id_gen.refuse_untrusted_table(rel, 'shard table');
    UPDATE id_gen.shard_tables t
    SET gene_ranges = CASE owning WHEN 'add' THEN ARRAY(SELECT unnest(int4multirange(VARIADIC t.gene_ranges) + genes))
                                  WHEN 'remove' THEN ARRAY(SELECT unnest(int4multirange(VARIADIC t.gene_ranges) - genes))
                                  ELSE t.gene_ranges END,
        fenced_ranges = CASE fencing WHEN 'add' THEN ARRAY(SELECT unnest(int4multirange(VARIADIC t.fenced_ranges) + genes))
                                     WHEN 'remove' THEN ARRAY(SELECT unnest(int4multirange(VARIADIC t.fenced_ranges) - genes))
                                     ELSE t.fenced_ranges END,
        updated_at = now()
    FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
    WHERE c.oid = rel AND t.schema_name = ns.nspname AND t.rows_table = c.relname;
    n := n + 1;
  END LOOP;
  IF n > 0 THEN
    PERFORM id_gen.shard_routing_changed();
  END IF;
  RETURN n;
END $$;
COMMENT ON FUNCTION id_gen.change_owned_genes(text[], integer, integer, text, text, integer) IS 'On a shard: adds genes lower_gene .. upper_gene to, or removes them from, what tables laid out by ownership own (owning) and what a move has fenced of them (fencing: add, remove or keep); a fence first locks each table of rows against writers (at most lock_timeout_ms). For a move''s steps (shard_fence_owned, shard_unfence_owned, shard_own_moved), which give up genes whose rows stay (hidden, deleted later).';
REVOKE EXECUTE ON FUNCTION id_gen.change_owned_genes(text[], integer, integer, text, text, integer) FROM PUBLIC;

-- On the source, in the move's fence: writes, deletes, claims and lookups by id of the moved
-- genes get IG002 from its commit on (waiting at most 2 s for writers and claims in flight).
CREATE OR REPLACE FUNCTION id_gen.shard_fence_owned(rows_tables text[], lower_gene integer, upper_gene integer) RETURNS integer
LANGUAGE sql STRICT
SET search_path = pg_catalog, pg_temp
RETURN id_gen.change_owned_genes(rows_tables, lower_gene, upper_gene, 'keep', 'add', 2000);
COMMENT ON FUNCTION id_gen.shard_fence_owned(text[], integer, integer) IS 'On the source of a move of tables laid out by ownership: fences the moved genes (id_gen.shard_tables.fenced_ranges) after writers and route claims in flight (at most 2 s): writes, deletes, claims and lookups by id of them get IG002.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_fence_owned(text[], integer, integer) FROM PUBLIC;

-- On the source of a move that did not cut over: the fence goes.
CREATE OR REPLACE FUNCTION id_gen.shard_unfence_owned(rows_tables text[], lower_gene integer, upper_gene integer) RETURNS integer
LANGUAGE sql STRICT
SET search_path = pg_catalog, pg_temp
RETURN id_gen.change_owned_genes(rows_tables, lower_gene, upper_gene, 'keep', 'remove', 10000);
COMMENT ON FUNCTION id_gen.shard_unfence_owned(text[], integer, integer) IS 'On the source of a move of tables laid out by ownership that did not cut over: lifts its fence of the moved genes.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_unfence_owned(text[], integer, integer) FROM PUBLIC;

-- In the move's fence: the target takes the genes, fenced (its copies show; its own writers
-- of them get IG002 until the fence lifts it with the partitions' fence, shard_unfence_owned),
-- then the source gives them up (its rows hide, its fence of them goes); undone the other
-- way round when the flip does not commit. No check of rows (see the invariants).
CREATE OR REPLACE FUNCTION id_gen.shard_own_moved(rows_tables text[], lower_gene integer, upper_gene integer,
                                                  owning boolean) RETURNS integer
LANGUAGE sql STRICT
SET search_path = pg_catalog, pg_temp
RETURN id_gen.change_owned_genes(rows_tables, lower_gene, upper_gene,
                                 CASE WHEN owning THEN 'add' ELSE 'remove' END,
                                 CASE WHEN owning THEN 'add' ELSE 'remove' END, 8000);
COMMENT ON FUNCTION id_gen.shard_own_moved(text[], integer, integer, boolean) IS 'On a shard, in a move''s fence or its undo: the tables laid out by ownership own (owning: fenced, until shard_unfence_owned) or no longer own (nor fence) the moved genes, whatever rows they hold of them (a move''s copies, or the rows it leaves behind, which it deletes later).';
REVOKE EXECUTE ON FUNCTION id_gen.shard_own_moved(text[], integer, integer, boolean) FROM PUBLIC;

-- How many rows of the genes the tables of rows hold (a move's progress on its target; a
-- target must hold none before it subscribes).
CREATE OR REPLACE FUNCTION id_gen.shard_count_moved_rows(rows_tables text[], id_columns name[], lower_gene integer,
                                                         upper_gene integer) RETURNS bigint
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  n bigint;
  total bigint := 0;
BEGIN
  -- (Rows of genes not owned: the routing guard would refuse to read them by id.)
  PERFORM set_config('id_gen.routing_guard', 'off', true);
  FOR i IN 1 .. cardinality(rows_tables) LOOP
    CONTINUE WHEN to_regclass(rows_tables[i]) IS NULL;
    EXECUTE format('SELECT count(*) FROM %s WHERE %I OPERATOR(pg_catalog.>=) %s AND %I OPERATOR(pg_catalog.<=) %s',
                   to_regclass(rows_tables[i]), id_columns[i], id_gen.gene_first_id(lower_gene),
                   id_columns[i], id_gen.gene_last_id(upper_gene))
      INTO n;
    total := total + n;
  END LOOP;
  RETURN total;
END $$;
COMMENT ON FUNCTION id_gen.shard_count_moved_rows(text[], name[], integer, integer) IS 'On a shard: how many rows of genes lower_gene .. upper_gene the tables of rows named hold, owned or not (a move''s copies on its target).';
REVOKE EXECUTE ON FUNCTION id_gen.shard_count_moved_rows(text[], name[], integer, integer) FROM PUBLIC;

-- After a move: up to `batch` rows of each table of rows whose genes lie in lower_gene ..
-- upper_gene and are not owned here go (the source's rows after a cut-over, an aborted
-- move's copies on its target). Returns how many; the coordinator calls it until 0, each
-- call a transaction of its own, so that no transaction holds them all.
CREATE OR REPLACE FUNCTION id_gen.shard_delete_unowned_rows(rows_tables text[], id_columns name[], lower_gene integer,
                                                            upper_gene integer, batch integer) RETURNS bigint
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  rel regclass;
  n bigint;
  total bigint := 0;
BEGIN
  IF batch < 1 THEN
    RAISE EXCEPTION 'id_gen: batch must be positive' USING ERRCODE = '22023';
  END IF;
  -- (Rows of genes not owned: the routing guard would refuse to read them by id.)
  PERFORM set_config('id_gen.routing_guard', 'off', true);
  FOR i IN 1 .. cardinality(rows_tables) LOOP
    rel := to_regclass(rows_tables[i]);
    CONTINUE WHEN rel IS NULL;
    PERFORM id_gen.refuse_untrusted_table(rel, 'shard table');
    EXECUTE format('DELETE FROM %1$s WHERE ctid OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT ctid FROM %1$s '
                   'WHERE %2$I OPERATOR(pg_catalog.>=) %3$s AND %2$I OPERATOR(pg_catalog.<=) %4$s '
                   'AND NOT id_gen.shard_owns(%5$L::pg_catalog.regclass, %2$I) LIMIT %6$s))',
                   rel, id_columns[i], id_gen.gene_first_id(lower_gene), id_gen.gene_last_id(upper_gene),
                   rel::text, batch);
    GET DIAGNOSTICS n = ROW_COUNT;
    total := total + n;
  END LOOP;
  RETURN total;
END $$;
COMMENT ON FUNCTION id_gen.shard_delete_unowned_rows(text[], name[], integer, integer, integer) IS 'On a shard, after a move: deletes up to batch rows of each table of rows named whose genes lie in lower_gene .. upper_gene and are not owned here (each row tested); returns how many. The coordinator calls it until it returns 0.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_delete_unowned_rows(text[], name[], integer, integer, integer) FROM PUBLIC;

-- After a move with keep_source (since 0.7.12), before its rows go: each table of rows
-- gives its rows of the genes that it does not own to a table of their own beside it,
-- id_gen.moved_partition_name(move_id, <table of rows>) (columns and indexes of the table
-- of rows, no triggers, a COMMENT naming the move), `batch` rows per table and call in the
-- order of their ids, and the rest of the last id's rows (all rows of an id in one call: an
-- id is not unique when the primary key has more columns), each call a transaction of its
-- own there: the coordinator calls it until it returns 0 (nobody writes those rows any more:
-- the shard does not own them). id_gen.shard_kept_copies records the table made for the move
-- and whether its copy is complete (0.7.13): a table of that name that it does not record is
-- refused (42P07), whoever owns it, before any row is deleted; one dropped before its copy
-- was complete is made again (the rows go only after that). The copy stays owned by the
-- caller (a superuser) while it fills, so that no other role can give it a trigger between
-- batches, and goes to the table's owner when nothing is left to copy. Returns how many rows
-- were copied.
CREATE OR REPLACE FUNCTION id_gen.shard_keep_unowned_rows(move_id bigint, rows_tables text[], id_columns name[],
                                                          lower_gene integer, upper_gene integer, batch integer) RETURNS bigint
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  rel regclass;
  kept text;
  kept_rel regclass;
  rel_owner oid;
  note text;
  made id_gen.shard_kept_copies;
  last_copied bigint;
  batch_bound bigint;
  columns text;
  n bigint;
  total bigint := 0;
BEGIN
  IF batch < 1 THEN
    RAISE EXCEPTION 'id_gen: batch must be positive' USING ERRCODE = '22023';
  END IF;
  -- (Rows of genes not owned: the routing guard would refuse to read them by id.)
  PERFORM set_config('id_gen.routing_guard', 'off', true);
  FOR i IN 1 .. cardinality(rows_tables) LOOP
    rel := to_regclass(rows_tables[i]);
    CONTINUE WHEN rel IS NULL;
    PERFORM id_gen.refuse_untrusted_table(rel, 'shard table');
    SELECT c.relowner, format('%I.%I', ns.nspname, id_gen.moved_partition_name(move_id, rows_tables[i]))
      INTO rel_owner, kept
    FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace WHERE c.oid = rel;
    note := format('id_gen: the rows of genes %s .. %s that %s held when move %s took them elsewhere (keep_source); drop it when no longer needed.',
                   lower_gene, upper_gene, rel, move_id);
    SELECT * INTO made FROM id_gen.shard_kept_copies kc
    WHERE (kc.move_id, kc.rows_table) = (shard_keep_unowned_rows.move_id, rows_tables[i]);
    IF made.move_id IS NOT NULL AND (made.lower_gene, made.upper_gene) IS DISTINCT FROM (lower_gene, upper_gene) THEN
      RAISE EXCEPTION 'id_gen: move %: this shard kept rows of genes % .. % for a move of that number, not of genes % .. %',
                      move_id, made.lower_gene, made.upper_gene, lower_gene, upper_gene
        USING ERRCODE = '42P07', DETAIL = 'id_gen.shard_kept_copies has that row: move numbers were used again (a coordinator restored from an older backup?).',
              HINT = 'Check the move on the coordinator; delete the row of id_gen.shard_kept_copies once its copy is dealt with.';
    END IF;
    -- (complete: the table's owner has it, whatever became of it since)
    CONTINUE WHEN made.complete;
    kept_rel := to_regclass(kept);
    IF kept_rel IS NULL THEN
      -- (made now; or again when the one made was dropped before it was complete: no row of
      -- the genes has been deleted yet, they go after the copy is complete)
      EXECUTE format('CREATE TABLE %s (LIKE %s INCLUDING INDEXES)', kept, rel);
      EXECUTE format('COMMENT ON TABLE %s IS %L', kept, note);
      kept_rel := to_regclass(kept);
      INSERT INTO id_gen.shard_kept_copies AS kc (move_id, rows_table, kept, lower_gene, upper_gene)
      VALUES (shard_keep_unowned_rows.move_id, rows_tables[i], kept_rel, shard_keep_unowned_rows.lower_gene,
              shard_keep_unowned_rows.upper_gene)
      ON CONFLICT ON CONSTRAINT shard_kept_copies_pkey DO UPDATE SET kept = excluded.kept, made_at = excluded.made_at
      RETURNING * INTO made;
    ELSIF made.kept IS DISTINCT FROM kept_rel::oid THEN
      RAISE EXCEPTION 'id_gen: move %: % exists on this shard and is not the copy of the rows of % that this move keeps',
                      move_id, kept_rel, rel
        USING ERRCODE = '42P07',
              DETAIL = 'id_gen.shard_kept_copies records no such table for this move: this version of id_gen did not make it (another role did, or id_gen 0.7.12 began it before the shard was updated).',
              HINT = 'Rename it (and see whether it holds rows someone wants); the move''s clean-up then copies the rows the source still holds.';
    END IF;
    PERFORM id_gen.refuse_untrusted_table(kept_rel, 'keep rows in');
    -- The copy takes the columns by name, and only while both tables have the same ones (a
    -- column added or dropped since the copy began would be lost or shifted).
    SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO columns
    FROM pg_attribute a WHERE a.attrelid = kept_rel AND a.attnum > 0 AND NOT a.attisdropped;
    IF EXISTS (SELECT a.attname FROM pg_attribute a WHERE a.attrelid = kept_rel AND a.attnum > 0 AND NOT a.attisdropped
               EXCEPT SELECT a.attname FROM pg_attribute a WHERE a.attrelid = rel AND a.attnum > 0 AND NOT a.attisdropped)
       OR EXISTS (SELECT a.attname FROM pg_attribute a WHERE a.attrelid = rel AND a.attnum > 0 AND NOT a.attisdropped
                  EXCEPT SELECT a.attname FROM pg_attribute a WHERE a.attrelid = kept_rel AND a.attnum > 0 AND NOT a.attisdropped) THEN
      RAISE EXCEPTION 'id_gen: move %: the columns of % changed while its rows were copied to %', move_id, rel, kept_rel
        USING ERRCODE = '55000',
              HINT = 'The copy is not complete and no row of the genes was deleted: rename or drop it, and the move''s clean-up copies again.';
    END IF;
    -- The next batch: whole ids (an id is not unique when the primary key has more columns),
    -- up to and including the id of the batch-th row above what the copy holds (none: the
    -- rest, and the copy is complete).
    EXECUTE format('SELECT coalesce(max(%2$I), %3$s OPERATOR(pg_catalog.-) 1) FROM %1$s', kept, id_columns[i],
                   id_gen.gene_first_id(lower_gene))
      INTO last_copied;
    EXECUTE format('SELECT %2$I FROM %1$s WHERE %2$I OPERATOR(pg_catalog.>) %3$s AND %2$I OPERATOR(pg_catalog.<=) %4$s '
                   'AND NOT id_gen.shard_owns(%5$L::pg_catalog.regclass, %2$I) ORDER BY %2$I OFFSET %6$s LIMIT 1',
                   rel, id_columns[i], last_copied, id_gen.gene_last_id(upper_gene), rel::text, batch - 1)
      INTO batch_bound;
    EXECUTE format('INSERT INTO %1$s (%7$s) SELECT %7$s FROM %2$s WHERE %3$I OPERATOR(pg_catalog.>) %4$s AND %3$I OPERATOR(pg_catalog.<=) %5$s '
                   'AND NOT id_gen.shard_owns(%6$L::pg_catalog.regclass, %3$I)',
                   kept, rel, id_columns[i], last_copied, coalesce(batch_bound, id_gen.gene_last_id(upper_gene)), rel::text, columns);
    GET DIAGNOSTICS n = ROW_COUNT;
    total := total + n;
    IF batch_bound IS NULL THEN  -- (all copied: the table's owner gets it)
      EXECUTE format('ALTER TABLE %s OWNER TO %I', kept, pg_get_userbyid(rel_owner));
      UPDATE id_gen.shard_kept_copies kc SET complete = true
      WHERE (kc.move_id, kc.rows_table) = (shard_keep_unowned_rows.move_id, rows_tables[i]);
    END IF;
  END LOOP;
  RETURN total;
END $$;
COMMENT ON FUNCTION id_gen.shard_keep_unowned_rows(bigint, text[], name[], integer, integer, integer) IS 'On the source of a move with keep_source, before its rows of the genes are deleted: copies batch more rows (rounded up to whole ids) of each table of rows'' rows of genes lower_gene .. upper_gene that it does not own, in the order of their ids, into a table beside it (id_gen.moved_partition_name, made on the first call and recorded in id_gen.shard_kept_copies, given to the table''s owner once complete; 42P07 for a table of that name it did not make); returns how many rows it copied. The coordinator calls it until it returns 0.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_keep_unowned_rows(bigint, text[], name[], integer, integer, integer) FROM PUBLIC;
