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
-- ranges (src/routing_guard/owned_scan.rs). Moves of such tables are not built yet (the
-- coordinator refuses them); splits and merges keep the genes where they are.
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
    EXECUTE format('CREATE TRIGGER id_gen_owned_rows BEFORE INSERT OR UPDATE ON %s FOR EACH ROW '
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
              HINT = 'A route change does not move rows, and moves of tables laid out by ownership are not built yet: keep the genes here, or delete those rows.';
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
