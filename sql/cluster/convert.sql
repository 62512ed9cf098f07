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

CREATE OR REPLACE PROCEDURE id_gen.convert_to_per_shard(tbl regclass, batch integer DEFAULT 200)
LANGUAGE plpgsql
AS $$
DECLARE
  d id_gen.distributed_tables;
  nd id_gen.distributed_tables;
  sch name;
  rel name;
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
  IF tbl IS NULL OR batch IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "%" must not be NULL', CASE WHEN tbl IS NULL THEN 'tbl' ELSE 'batch' END
      USING ERRCODE = '22004';
  ELSIF batch < 1 THEN
    RAISE EXCEPTION 'id_gen: batch must be at least 1 (it is %)', batch USING ERRCODE = '22023';
  END IF;
  PERFORM id_gen.require_superuser('convert distributed tables');
  -- (No SET clause: a procedure with one cannot COMMIT. The path is pinned for each
  -- transaction instead, and every name below is qualified.)
  PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
  SELECT n.nspname, c.relname INTO sch, rel
  FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = tbl;
  SELECT * INTO d FROM id_gen.distributed_tables t
  WHERE t.schema_name = sch AND (t.table_name = rel OR t.partitioned_name = rel);
  IF NOT FOUND THEN
    RAISE EXCEPTION 'id_gen: % is not a distributed table', tbl
      USING ERRCODE = '42809', HINT = 'Distribute it with layout => ''per_shard'' instead: SELECT id_gen.distribute_table(...).';
  END IF;
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
