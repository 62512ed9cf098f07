-- Distributed tables: a coordinator routes rows by the route table over postgres_fdw.
-- Code only (CREATE OR REPLACE): the tables are in sql/install/cluster_catalog.sql, the shard
-- side in sql/cluster/shard/tables.sql; an update script re-creates this file as it is.
--
-- Coordinator side. id_gen.distribute_table(tbl, id_column, owner_column, sequence)
-- turns a plain table into a table partitioned by RANGE on its bigint id column, with
-- one partition per route range [lo, hi] of id_gen.route_ranges, FOR VALUES FROM
-- (lo << 47) TO ((hi + 1) << 47) (MAXVALUE for the last). That partition is itself
-- partitioned the same way and holds a single postgres_fdw foreign table ("<name>_fdw")
-- on the server whose name is the route's shard. The extra level lets a move re-point a
-- range by swapping the foreign table while holding a lock on that range's partition
-- only: writers of other ranges never wait, writers of the moved range pause and then
-- continue on the new shard. Point lookups by id prune to one foreign table; lookups by
-- owner prune with id BETWEEN owner_first_id(o) AND owner_last_id(o).
--
-- With layout => 'per_shard' the partitioned table is PARTITION BY HASH (id
-- id_gen.gene_route_ops) instead, with one partition per shard (FOR VALUES WITH (MODULUS
-- 1024, REMAINDER <its slot in id_gen.shard_slots>)), a foreign table over the shard's whole
-- table (its partitions hold exactly the genes it owns). The route table routes
-- (sql/cluster/route_hash.sql): PostgreSQL prunes WHERE id = ... and routes inserted rows by
-- the hash of the id, and id_gen's planner hook sends a two-sided id range of one shard (a
-- lookup by owner) to that shard's partition; so the relations here, a new backend's first
-- statement and a route change's work here do not grow with the number of route ranges.
-- Splits and merges change only the route table here; moves re-lay both shards in their fence
-- (sql/cluster/move.sql), and convert_to_per_shard (sql/cluster/convert.sql) turns a per_range
-- table into this layout. With layout => 'by_ownership' the coordinator is the same (layout
-- per_shard, shard_layout by_ownership), and each shard holds the table as one table of rows
-- behind a view of the owned rows, what it owns recorded as data
-- (sql/cluster/shard/owned_rows.sql; moved since 0.7.9, but not reversibly).
--
-- Inserts that name only the owner: PostgreSQL routes a row to its partition before any
-- trigger of the partition runs, and a column DEFAULT cannot read another column. So
-- when a sequence is given, the table's name becomes a view over the partitioned table
-- (<name>_shards) whose INSTEAD OF INSERT trigger computes gene_order_id(sequence,
-- owner) for a NULL id and inserts into the partitioned table. The view is
-- auto-updatable for UPDATE and DELETE; COPY into it runs the trigger; RETURNING sees
-- the id.
--
-- Shard side. A shard holds the table partitioned the same way: one local partition per
-- route range it owns, named id_gen.partition_name(shard_stem, lo, hi), and each
-- coordinator foreign table points at exactly that local partition. So:
--   * a foreign table never sees another range's rows (postgres_fdw does not send a
--     partition's bounds to the remote side);
--   * the shard refuses a row outside its genes, whoever writes it (23514): foreign
--     tables do not enforce partition bounds, the shard's partitions do; with an owner
--     column, a CHECK (id_gen_owner_gene) refuses a row whose id's gene is not its
--     owner's, so an UPDATE cannot move a row to another owner's gene;
--   * moving a route range moves one table (sql/cluster/move.sql).
--
--
-- Invariants:
--   * id_gen.shard_routes is the single source of truth; set_route and drop_route call
--     id_gen.sync_distributed_tables() in the same transaction, which re-derives every
--     coordinator partition and every shard's partitions from it.
--   * A route change never loses a row: each shard re-partitions in a transaction of its
--     own that first locks the table against every writer (id_gen.shard_apply_ranges).
--     Those transactions commit before the coordinator's; if anything fails, the shards
--     already changed are told their old ranges again (their rows come back the same
--     way), and the coordinator's transaction rolls back.
--   * id_gen.shard_placements records what each shard was last told; only changed
--     shards are written to.
--   * Nothing here deletes user rows: a route change that would leave rows on a shard
--     outside its genes fails, and the route table stays as it was.
--   * Names derived from a table (partitions, foreign tables, the view's table) fit
--     NAMEDATALEN byte-wise for any identifier, and stems are unique among the
--     distributed tables of a schema; a derived name held by another relation is an
--     error (42P07), never shared.

-- The catalog row of a distributed table (42704 when it is not one).
CREATE OR REPLACE FUNCTION id_gen.distributed_table(schema_name name, table_name name) RETURNS id_gen.distributed_tables
LANGUAGE plpgsql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  d id_gen.distributed_tables;
BEGIN
  SELECT * INTO d FROM id_gen.distributed_tables t
  WHERE (t.schema_name, t.table_name) = (distributed_table.schema_name, distributed_table.table_name);
  IF FOUND THEN
    RETURN d;
  END IF;
  RAISE EXCEPTION 'id_gen: %.% is not a distributed table', quote_ident(schema_name), quote_ident(table_name)
    USING ERRCODE = '42704', HINT = 'Distributed tables are listed in id_gen.distributed_tables.';
END $$;
COMMENT ON FUNCTION id_gen.distributed_table(name, name) IS 'The row of id_gen.distributed_tables of a distributed table; 42704 when the table is not one.';
REVOKE EXECUTE ON FUNCTION id_gen.distributed_table(name, name) FROM PUBLIC;

-- The shard function that makes a shard own given route ranges of a table: it re-partitions
-- a partitioned one (id_gen.shard_apply_ranges) and records them for one laid out by
-- ownership (id_gen.shard_apply_owned_ranges, sql/cluster/shard/owned_rows.sql). Both take
-- the same arguments.
CREATE OR REPLACE FUNCTION id_gen.shard_apply_function(d id_gen.distributed_tables) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN CASE d.shard_layout WHEN 'by_ownership' THEN 'shard_apply_owned_ranges' ELSE 'shard_apply_ranges' END;
COMMENT ON FUNCTION id_gen.shard_apply_function(id_gen.distributed_tables) IS 'The shard function that makes a shard own given route ranges of a distributed table: shard_apply_ranges (partitioned on the shards) or shard_apply_owned_ranges (laid out by ownership).';
REVOKE EXECUTE ON FUNCTION id_gen.shard_apply_function(id_gen.distributed_tables) FROM PUBLIC;

-- Tells one shard which genes of a table it owns (id_gen.shard_apply_ranges or
-- shard_apply_owned_ranges there, in a transaction of its own) and records it in
-- id_gen.shard_placements.
CREATE OR REPLACE FUNCTION id_gen.push_shard_table(shard text, schema_name name, table_name name,
                                                   gene_ranges int4range[]) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  d id_gen.distributed_tables;
  msg text;
  code text;
  result text;
BEGIN
  d := id_gen.distributed_table(push_shard_table.schema_name, push_shard_table.table_name);
  BEGIN
    -- shard_apply_ranges locks the table and then each partition; a writer that holds a
    -- partition (the coordinator writes to partitions by name) and then needs the table
    -- (its partition constraint is recomputed after an ATTACH or DETACH) makes a deadlock.
    -- shard_apply_ranges detects it first (deadlock_timeout 100 ms there), so the writer
    -- goes on and this change, rolled back on the shard, is tried again.
    FOR attempt IN 1 .. 5 LOOP
      BEGIN
        result := id_gen.remote_call(shard, id_gen.shard_apply_function(d),
          ARRAY[d.schema_name::text, d.table_name::text, d.id_column::text, d.shard_stem::text, gene_ranges::text, d.shard_definition], 120000);
        EXIT;
      EXCEPTION WHEN deadlock_detected THEN
        IF attempt = 5 THEN
          RAISE;
        END IF;
        PERFORM pg_sleep(0.05 * attempt);
      END;
    END LOOP;
  EXCEPTION
    WHEN check_violation OR SQLSTATE 'IG001' THEN  -- 23514 before the tombstone existed
      GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT;
      RAISE EXCEPTION 'id_gen: shard "%" holds rows of %.% outside the genes it would own (%)',
                      shard, quote_ident(d.schema_name), quote_ident(d.table_name), gene_ranges
        USING ERRCODE = '55000', DETAIL = 'On the shard: ' || msg,
              HINT = 'The route table is unchanged. Move those rows first (id_gen.move_genes), or delete them on the shard.';
    WHEN undefined_table OR undefined_function THEN
      GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT;
      RAISE EXCEPTION 'id_gen: shard "%" has no id_gen % or later', shard,
                      CASE d.shard_layout WHEN 'by_ownership' THEN '0.7.8' ELSE '0.4.0' END
        USING ERRCODE = '55000', DETAIL = 'On the shard: ' || msg,
              HINT = 'Run CREATE EXTENSION id_gen (or ALTER EXTENSION id_gen UPDATE) on the shard; it keeps the shard''s partitions.';
    WHEN lock_not_available THEN
      GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT;
      RAISE EXCEPTION 'id_gen: shard "%" could not lock %.% within 10 s', shard, quote_ident(d.schema_name), quote_ident(d.table_name)
        USING ERRCODE = '55P03', DETAIL = 'On the shard: ' || msg,
              HINT = 'A long transaction writes or reads the table there. Nothing changed; retry when it is done.';
  END;
  INSERT INTO id_gen.shard_placements AS p (schema_name, table_name, shard, gene_ranges)
  VALUES (d.schema_name, d.table_name, push_shard_table.shard, push_shard_table.gene_ranges)
  ON CONFLICT ON CONSTRAINT shard_placements_pkey DO UPDATE SET gene_ranges = excluded.gene_ranges, updated_at = now();
  RETURN result;
END $$;
COMMENT ON FUNCTION id_gen.push_shard_table(text, name, name, int4range[]) IS 'Makes one shard hold exactly the given route ranges of a distributed table (id_gen.shard_apply_ranges on the shard, committed there) and records them in id_gen.shard_placements.';
REVOKE EXECUTE ON FUNCTION id_gen.push_shard_table(text, name, name, int4range[]) FROM PUBLIC;

-- Makes the range partition `part` hold exactly one foreign table, "<partition>_fdw", on
-- `shard`, pointing at the shard's partition of the same genes. A foreign table on
-- another server is swapped: DETACH, DROP, CREATE under the lock of this range
-- partition alone (other ranges are not locked).
CREATE OR REPLACE FUNCTION id_gen.point_partition(d id_gen.distributed_tables, part regclass,
                                                  lower_gene integer, upper_gene integer, shard text) RETURNS boolean
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  child record;
  fdw_name name := id_gen.fit_name(id_gen.partition_name(d.coordinator_stem, lower_gene, upper_gene), '_fdw');
  shard_part name := id_gen.partition_name(d.shard_stem, lower_gene, upper_gene);
  kept boolean := false;
BEGIN
  FOR child IN SELECT c.oid::regclass AS rel, c.relname, s.srvname, ft.ftoptions
               FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
               JOIN pg_foreign_table ft ON ft.ftrelid = c.oid
               JOIN pg_foreign_server s ON s.oid = ft.ftserver
               WHERE i.inhparent = part LOOP
    IF child.srvname = shard AND child.relname = fdw_name
       AND format('table_name=%s', shard_part) = ANY (child.ftoptions) THEN
      kept := true;
    ELSE
      EXECUTE format('ALTER TABLE %s DETACH PARTITION %s', part, child.rel);
      EXECUTE format('DROP FOREIGN TABLE %s', child.rel);
    END IF;
  END LOOP;
  IF kept THEN
    RETURN false;
  END IF;
  PERFORM id_gen.add_foreign_partition(d, part, lower_gene, upper_gene, shard);
  RETURN true;
END $$;
COMMENT ON FUNCTION id_gen.point_partition(id_gen.distributed_tables, regclass, integer, integer, text) IS 'Points the range partition of a distributed table at a shard: one foreign table "<partition>_fdw" over the shard''s partition of the same genes, with the partition''s owner and grants. Returns whether it changed anything.';
REVOKE EXECUTE ON FUNCTION id_gen.point_partition(id_gen.distributed_tables, regclass, integer, integer, text) FROM PUBLIC;

-- Adds to the range partition `part` the foreign table "<stem>_g<lower>_<upper>_fdw" of
-- genes lower_gene .. upper_gene over the shard's partition of those genes, with part's
-- owner and grants. Usually the genes are part's own; inside a split's fence they are
-- one of the new ranges within it (id_gen.nest_split_here).
CREATE OR REPLACE FUNCTION id_gen.add_foreign_partition(d id_gen.distributed_tables, part regclass,
                                                        lower_gene integer, upper_gene integer, shard text) RETURNS regclass
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fdw_name name := id_gen.fit_name(id_gen.partition_name(d.coordinator_stem, lower_gene, upper_gene), '_fdw');
  shard_part name := id_gen.partition_name(d.shard_stem, lower_gene, upper_gene);
  other regclass := to_regclass(format('%I.%I', d.schema_name, fdw_name));
BEGIN
  IF other IS NOT NULL THEN
    RAISE EXCEPTION 'id_gen: relation % already exists, and it is not a partition of %', other, part
      USING ERRCODE = '42P07', HINT = 'id_gen names the foreign tables of distributed tables <stem>_g<lower>_<upper>_fdw; rename that relation.';
  END IF;
  EXECUTE format('CREATE FOREIGN TABLE %I.%I PARTITION OF %s FOR VALUES %s '
                 'SERVER %I OPTIONS (schema_name %L, table_name %L)',
                 d.schema_name, fdw_name, part, id_gen.partition_bounds(lower_gene, upper_gene),
                 shard, d.schema_name, shard_part);
  PERFORM id_gen.inherit_parent_settings(part, format('%I.%I', d.schema_name, fdw_name)::regclass,
    format('id_gen: genes %s .. %s on shard %s (its table %I.%I)', lower_gene, upper_gene, shard, d.schema_name, shard_part));
  RETURN format('%I.%I', d.schema_name, fdw_name)::regclass;
END $$;
COMMENT ON FUNCTION id_gen.add_foreign_partition(id_gen.distributed_tables, regclass, integer, integer, text) IS 'Adds to a coordinator range partition the foreign table of genes lower_gene .. upper_gene on a shard (its partition of those genes there), with the range partition''s owner and grants.';
REVOKE EXECUTE ON FUNCTION id_gen.add_foreign_partition(id_gen.distributed_tables, regclass, integer, integer, text) FROM PUBLIC;

-- The partition of a distributed table's coordinator table whose bound prints as `bound`
-- (pg_get_expr of relpartbound), or NULL. Partitions are found by bound, never by name
-- alone: the one named `pname` (the name id_gen gives it) is checked first, in O(1); only
-- when it is not that partition are all partitions searched.
CREATE OR REPLACE FUNCTION id_gen.partition_with_bound(d id_gen.distributed_tables, bound text, pname name) RETURNS regclass
LANGUAGE plpgsql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  parts regclass := format('%I.%I', d.schema_name, d.partitioned_name)::regclass;
  named regclass := to_regclass(format('%I.%I', d.schema_name, pname));
BEGIN
  IF named IS NOT NULL AND EXISTS (SELECT FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                                   WHERE i.inhrelid = named AND i.inhparent = parts
                                     AND pg_get_expr(c.relpartbound, c.oid) = bound) THEN
    RETURN named;
  END IF;
  RETURN (id_gen.partitions_by_bound(parts) ->> bound)::oid::regclass;
END $$;
COMMENT ON FUNCTION id_gen.partition_with_bound(id_gen.distributed_tables, text, name) IS 'The partition of a distributed table''s coordinator table whose bound prints (pg_get_expr) as bound, or NULL: the relation named pname when it is that partition (O(1)), else found among all partitions by its bound.';
REVOKE EXECUTE ON FUNCTION id_gen.partition_with_bound(id_gen.distributed_tables, text, name) FROM PUBLIC;

-- The partition with `bound`, created when missing: CREATE [FOREIGN] TABLE pname PARTITION
-- OF the coordinator table `definition` (its bound and the rest, one string, never formatted
-- again: names may hold a %), with the table's owner and grants and the comment `about`. A
-- relation that has the name but is not that partition is refused (42P07). When the name is
-- free the partition is created without a search (O(1)); a partition of the same bound
-- under another name (renamed by hand) makes PostgreSQL refuse the overlap (42P17, naming
-- it). id_gen.sync_distributed_table finds such partitions by bound before it gets here.
CREATE OR REPLACE FUNCTION id_gen.ensure_partition(d id_gen.distributed_tables, bound text, pname name, is_foreign boolean,
                                                   definition text, about text)
RETURNS regclass
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  parts regclass := format('%I.%I', d.schema_name, d.partitioned_name)::regclass;
  part regclass;
BEGIN
  IF to_regclass(format('%I.%I', d.schema_name, pname)) IS NOT NULL THEN
    part := id_gen.partition_with_bound(d, bound, pname);
    IF part IS NOT NULL THEN
      RETURN part;
    END IF;
    RAISE EXCEPTION 'id_gen: relation %.% already exists, and it is not a partition of %', quote_ident(d.schema_name), quote_ident(pname), parts
      USING ERRCODE = '42P07', HINT = format('id_gen names this partition of %s (%s) %I; rename that relation.', parts, bound, pname);
  END IF;
  EXECUTE format('CREATE %s %I.%I PARTITION OF %s %s', CASE WHEN is_foreign THEN 'FOREIGN TABLE' ELSE 'TABLE' END,
                 d.schema_name, pname, parts, definition);
  part := format('%I.%I', d.schema_name, pname)::regclass;
  PERFORM id_gen.inherit_parent_settings(parts, part, about);
  RETURN part;
END $$;
COMMENT ON FUNCTION id_gen.ensure_partition(id_gen.distributed_tables, text, name, boolean, text, text) IS 'The partition of a distributed table''s coordinator table with this bound, created when missing (CREATE [FOREIGN] TABLE pname PARTITION OF the table definition, with the table''s owner and grants and the comment about); 42P07 when another relation has the name. O(1) when the partition has its name or the name is free.';
REVOKE EXECUTE ON FUNCTION id_gen.ensure_partition(id_gen.distributed_tables, text, name, boolean, text, text) FROM PUBLIC;

-- The coordinator's range partition of genes lo .. hi (created when missing).
CREATE OR REPLACE FUNCTION id_gen.range_partition(d id_gen.distributed_tables, lower_gene integer, upper_gene integer) RETURNS regclass
LANGUAGE sql STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  SELECT id_gen.ensure_partition(d, id_gen.partition_bound_text(lower_gene, upper_gene),
    id_gen.partition_name(d.coordinator_stem, lower_gene, upper_gene), false,
    pg_catalog.format('FOR VALUES %s PARTITION BY RANGE (%I)', id_gen.partition_bounds(lower_gene, upper_gene), d.id_column),
    pg_catalog.format('id_gen: genes %s .. %s of %I.%I (kept in step with id_gen.shard_routes)',
                      lower_gene, upper_gene, d.schema_name, d.partitioned_name));
END;
COMMENT ON FUNCTION id_gen.range_partition(id_gen.distributed_tables, integer, integer) IS 'The coordinator''s range partition of a distributed table for genes lower_gene .. upper_gene, found by its bound; created (with the table''s owner and grants) when missing.';
REVOKE EXECUTE ON FUNCTION id_gen.range_partition(id_gen.distributed_tables, integer, integer) FROM PUBLIC;

-- A per_shard table's partition for one shard (created when missing): a foreign table over
-- the shard's whole table, FOR VALUES WITH (MODULUS 1024, REMAINDER <the shard's slot>).
-- The shard's table holds exactly the genes the shard owns (its partitions; the rest falls
-- into its tombstone, which refuses writes), so the foreign table never shows another
-- shard's rows.
CREATE OR REPLACE FUNCTION id_gen.slot_partition(d id_gen.distributed_tables, shard text) RETURNS regclass
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  slot integer := id_gen.assign_shard_slot(shard);
BEGIN
  RETURN id_gen.ensure_partition(d, id_gen.slot_partition_bound_text(slot),
    id_gen.slot_partition_name(d.coordinator_stem, slot), true,
    format('FOR VALUES WITH (MODULUS 1024, REMAINDER %s) SERVER %I OPTIONS (schema_name %L, table_name %L)',
           slot, shard, d.schema_name, d.table_name),
    format('id_gen: the rows of %I.%I on shard %s (slot %s; its table %I.%I)',
           d.schema_name, d.partitioned_name, shard, slot, d.schema_name, d.table_name));
END $$;
COMMENT ON FUNCTION id_gen.slot_partition(id_gen.distributed_tables, text) IS 'The partition of a per_shard distributed table for one shard: a foreign table over the shard''s table, FOR VALUES WITH (MODULUS 1024, REMAINDER <the shard''s slot>), with the table''s owner and grants; created when missing.';
REVOKE EXECUTE ON FUNCTION id_gen.slot_partition(id_gen.distributed_tables, text) FROM PUBLIC;

-- The rows of genes lower_gene .. upper_gene of a distributed table, as a FROM item: the
-- range partition (per_range; its genes must be one route range) or the table restricted
-- to the genes' ids (per_shard; the id-range router sends a range of one shard to it alone).
CREATE OR REPLACE FUNCTION id_gen.genes_rows(d id_gen.distributed_tables, lower_gene integer, upper_gene integer) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF d.layout = 'per_shard' THEN
    RETURN format('(SELECT * FROM %I.%I WHERE %I OPERATOR(pg_catalog.>=) %s AND %I OPERATOR(pg_catalog.<=) %s) AS genes',
                  d.schema_name, d.partitioned_name, d.id_column, id_gen.gene_first_id(lower_gene),
                  d.id_column, id_gen.gene_last_id(upper_gene));
  END IF;
  RETURN id_gen.range_partition(d, lower_gene, upper_gene)::text;
END $$;
COMMENT ON FUNCTION id_gen.genes_rows(id_gen.distributed_tables, integer, integer) IS 'The rows of a route range of a distributed table as a FROM item: its range partition (per_range) or the table restricted to the range''s ids (per_shard).';
REVOKE EXECUTE ON FUNCTION id_gen.genes_rows(id_gen.distributed_tables, integer, integer) FROM PUBLIC;

-- Gives shards that already committed new ranges of a table their old ranges back
-- (pushed: [{"shard": ..., "old": ...}]); their rows come back under the same lock.
-- Returns the errors, NULL when every shard answered.
CREATE OR REPLACE FUNCTION id_gen.restore_shard_ranges(schema_name name, table_name name, pushed jsonb) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  d id_gen.distributed_tables;
  p jsonb;
  errors text;
BEGIN
  d := id_gen.distributed_table(restore_shard_ranges.schema_name, restore_shard_ranges.table_name);
  FOR p IN SELECT x FROM jsonb_array_elements(coalesce(pushed, '[]')) x LOOP
    BEGIN
      PERFORM id_gen.remote_call(p->>'shard', id_gen.shard_apply_function(d),
        ARRAY[d.schema_name::text, d.table_name::text, d.id_column::text, d.shard_stem::text, p->>'old', d.shard_definition], 120000);
    EXCEPTION WHEN OTHERS THEN
      errors := concat_ws('; ', errors, (p->>'shard') || ': ' || SQLERRM);
    END;
  END LOOP;
  RETURN errors;
END $$;
COMMENT ON FUNCTION id_gen.restore_shard_ranges(name, name, jsonb) IS 'Undo of a failed route change: tells each shard that already committed new ranges of a table its old ones again; returns the errors.';
REVOKE EXECUTE ON FUNCTION id_gen.restore_shard_ranges(name, name, jsonb) FROM PUBLIC;

-- Re-derives the partitions of one distributed table, on its shards and here, from the
-- route table. Idempotent: partitions and shards already in step are left alone. Returns
-- the shards it changed with their old ranges (for the caller's undo); on an error it
-- undoes its own shard changes before raising.
CREATE OR REPLACE FUNCTION id_gen.sync_distributed_table(schema_name name, table_name name, copy_rows boolean DEFAULT false) RETURNS jsonb
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  d id_gen.distributed_tables;
  parts regclass;
  cur record;
  ft record;
  r record;
  pushed jsonb := '[]';
  msg text;
  code text;
  detail text;
  hint text;
  undo_errors text;
  -- The bounds of the route ranges and the partitions by bound, each built once: a sync
  -- costs O(ranges), not a search of every partition per range.
  route_bounds jsonb;
  present jsonb;
BEGIN
  d := id_gen.distributed_table(sync_distributed_table.schema_name, sync_distributed_table.table_name);
  parts := to_regclass(format('%I.%I', d.schema_name, d.partitioned_name));
  IF parts IS NULL THEN
    RAISE EXCEPTION 'id_gen: the partitioned table %.% of distributed table %.% is missing', quote_ident(d.schema_name),
                    quote_ident(d.partitioned_name), quote_ident(d.schema_name), quote_ident(d.table_name)
      USING ERRCODE = '42P01',
            HINT = 'If it was dropped on purpose: DELETE FROM id_gen.distributed_tables WHERE schema_name = ... AND table_name = ...';
  END IF;
  -- Coordinator traffic for the table waits from here to COMMIT (so no coordinator write
  -- is in flight while the shards re-partition).
  EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', parts);
  PERFORM id_gen.quiet_ddl();
  IF d.layout = 'per_range' THEN  -- (a per_shard table has no partition per range)
    SELECT coalesce(jsonb_object_agg(id_gen.partition_bound_text(rr.lower_gene, rr.upper_gene), true), '{}')
    INTO route_bounds FROM id_gen.route_ranges rr;
    present := id_gen.partitions_by_bound(parts);
  END IF;

  -- A range partition whose bounds are no longer a route range is split or merged; with
  -- rows, this transaction would copy them under the lock above and the shards' table
  -- locks. Only on request (set_route(..., copy_rows => true)).
  IF NOT coalesce(copy_rows, false) AND d.layout = 'per_range' THEN
    FOR cur IN
      SELECT c.oid::regclass AS part, pg_get_expr(c.relpartbound, c.oid) AS bound
      FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
      WHERE i.inhparent = parts
    LOOP
      CONTINUE WHEN route_bounds ? cur.bound;
      -- Asked on the shards in transactions of their own: a postgres_fdw read from here
      -- would hold a lock on the shard's partition until this transaction ends, and the
      -- shard's re-partition below would wait for it.
      msg := 'f';
      FOR ft IN SELECT s.srvname AS shard,
                       (SELECT substr(o, 13) FROM unnest(f.ftoptions) o WHERE o LIKE 'schema_name=%') AS sch,
                       (SELECT substr(o, 12) FROM unnest(f.ftoptions) o WHERE o LIKE 'table_name=%') AS tab
                FROM pg_inherits i2 JOIN pg_foreign_table f ON f.ftrelid = i2.inhrelid
                JOIN pg_foreign_server s ON s.oid = f.ftserver
                WHERE i2.inhparent = cur.part LOOP
        IF id_gen.remote_exec(ft.shard, format('SELECT EXISTS (SELECT FROM %I.%I)', ft.sch, ft.tab), 10000) = 't' THEN
          msg := 't';
        END IF;
      END LOOP;
      IF NOT EXISTS (SELECT FROM pg_foreign_table f JOIN pg_inherits i2 ON i2.inhrelid = f.ftrelid WHERE i2.inhparent = cur.part) THEN
        EXECUTE format('SELECT EXISTS (SELECT FROM %s)', cur.part) INTO msg;
      END IF;
      IF msg::boolean THEN
        RAISE EXCEPTION 'id_gen: this route change splits or merges % of %.%, which holds rows', cur.part,
                        quote_ident(d.schema_name), quote_ident(d.table_name)
          USING ERRCODE = '55000',
                DETAIL = 'It would copy them while the whole table is locked, on the coordinator and on the shard.',
                HINT = 'Use CALL id_gen.split_route(gene) or CALL id_gen.merge_routes(upper_gene), which copy online; or pass copy_rows => true to set_route/drop_route to accept the lock.';
      END IF;
    END LOOP;
  END IF;

  BEGIN
    -- Every shard that owns genes now, or did before, hears its new set of ranges; each
    -- commits on its own, so it is remembered for the way back.
    FOR r IN
      WITH wanted AS (
        SELECT rr.shard, array_agg(int4range(rr.lower_gene, rr.upper_gene, '[]') ORDER BY rr.lower_gene) AS genes
        FROM id_gen.route_ranges rr GROUP BY rr.shard
      ), known AS (
        SELECT p.shard, p.gene_ranges FROM id_gen.shard_placements p
        WHERE (p.schema_name, p.table_name) = (d.schema_name, d.table_name)
      )
      SELECT coalesce(w.shard, k.shard) AS shard,
             coalesce(w.genes, '{}'::int4range[]) AS genes,
             coalesce(k.gene_ranges, '{}'::int4range[]) AS old_genes
      FROM wanted w FULL JOIN known k ON k.shard = w.shard
      WHERE k.gene_ranges IS DISTINCT FROM coalesce(w.genes, '{}'::int4range[])
      ORDER BY 1
    LOOP
      pushed := pushed || jsonb_build_object('shard', r.shard, 'old', r.old_genes::text);
      PERFORM id_gen.push_shard_table(r.shard, d.schema_name, d.table_name, r.genes);
    END LOOP;

    -- per_shard: one partition per shard that owns genes (a shard that owns none keeps its
    -- partition, over an empty table); the route table itself routes.
    IF d.layout = 'per_shard' THEN
      FOR r IN SELECT DISTINCT rr.shard FROM id_gen.route_ranges rr ORDER BY 1 LOOP
        PERFORM id_gen.slot_partition(d, r.shard);
      END LOOP;
      RETURN jsonb_build_object('schema_name', d.schema_name, 'table_name', d.table_name, 'pushed', pushed);
    END IF;
    -- Range partitions whose bounds are no longer a route range go first, so that the new
    -- ones never overlap them. Each holds only a foreign table (dropped with it).
    FOR cur IN
      SELECT c.oid::regclass AS part, c.relkind, pg_get_expr(c.relpartbound, c.oid) AS bound
      FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
      WHERE i.inhparent = parts
    LOOP
      CONTINUE WHEN route_bounds ? cur.bound;
      IF cur.relkind <> 'p' OR EXISTS (SELECT FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                                       WHERE i.inhparent = cur.part AND c.relkind <> 'f') THEN
        RAISE EXCEPTION 'id_gen: partition % of % holds local data, and id_gen does not drop it', cur.part, parts
          USING ERRCODE = '55000', HINT = 'Detach it (ALTER TABLE ... DETACH PARTITION) and move its rows to the shards.';
      END IF;
      EXECUTE format('ALTER TABLE %s DETACH PARTITION %s', parts, cur.part);
      EXECUTE format('DROP TABLE %s', cur.part);
    END LOOP;
    -- (present still names the partitions kept: those dropped above had no route's bound.)
    FOR r IN SELECT * FROM id_gen.route_ranges ORDER BY lower_gene LOOP
      PERFORM id_gen.point_partition(d, coalesce((present ->> id_gen.partition_bound_text(r.lower_gene, r.upper_gene))::oid::regclass,
                                                 id_gen.range_partition(d, r.lower_gene, r.upper_gene)),
                                     r.lower_gene, r.upper_gene, r.shard);
    END LOOP;
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT, code = RETURNED_SQLSTATE, detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
    undo_errors := id_gen.restore_shard_ranges(d.schema_name, d.table_name, pushed);
    PERFORM id_gen.reraise(msg, code,
      concat_ws(E'\n', nullif(detail, ''),
                CASE WHEN pushed <> '[]' THEN 'Shards that had changed were given their old ranges back' || coalesce(', except: ' || undo_errors || '. Run SELECT id_gen.sync_distributed_tables() when they answer', '') || '.' END),
      hint);
  END;
  RETURN jsonb_build_object('schema_name', d.schema_name, 'table_name', d.table_name, 'pushed', pushed);
END $$;
COMMENT ON FUNCTION id_gen.sync_distributed_table(name, name, boolean) IS 'Re-derives the partitions of one distributed table on its shards (each in a transaction of its own that locks the table first; undone on failure) and its foreign partitions here, from id_gen.shard_routes; a range partition that splits or merges with rows is refused unless copy_rows. Returns what it changed on the shards.';
REVOKE EXECUTE ON FUNCTION id_gen.sync_distributed_table(name, name, boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.sync_distributed_tables(copy_rows boolean DEFAULT false) RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  d record;
  n integer := 0;
  done jsonb := '[]';
  t jsonb;
  msg text;
  code text;
  detail text;
  hint text;
  undo_errors text;
BEGIN
  IF NOT EXISTS (SELECT FROM id_gen.distributed_tables) THEN
    RETURN 0;
  END IF;
  PERFORM id_gen.require_superuser('change the routes of distributed tables');
  PERFORM id_gen.refuse_during_operations('change the routes of distributed tables');
  PERFORM id_gen.check_routes_for_distribution();
  BEGIN
    FOR d IN SELECT t.schema_name, t.table_name FROM id_gen.distributed_tables t ORDER BY 1, 2 LOOP
      done := done || id_gen.sync_distributed_table(d.schema_name, d.table_name, coalesce(copy_rows, false));
      n := n + 1;
    END LOOP;
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    -- Tables synced before the failing one committed on their shards too: undo them.
    GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT, code = RETURNED_SQLSTATE, detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
    FOR t IN SELECT x FROM jsonb_array_elements(done) x LOOP
      undo_errors := concat_ws('; ', undo_errors, id_gen.restore_shard_ranges(t->>'schema_name', t->>'table_name', t->'pushed'));
    END LOOP;
    PERFORM id_gen.reraise(msg, code,
      concat_ws(E'\n', nullif(detail, ''),
                CASE WHEN undo_errors IS NOT NULL THEN 'Not every shard could be given its old ranges back: ' || undo_errors END),
      hint);
  END;
  RETURN n;
END $$;
COMMENT ON FUNCTION id_gen.sync_distributed_tables(boolean) IS 'Brings the partitions of every distributed table, on the coordinator and on the shards, in step with id_gen.shard_routes (set_route and drop_route call it; run it by hand after a failure). A range partition that splits or merges with rows is refused unless copy_rows (then copied under ACCESS EXCLUSIVE). Returns the number of tables.';
REVOKE EXECUTE ON FUNCTION id_gen.sync_distributed_tables(boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.insert_distributed_row() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  new_id bigint;
  owner_gene integer;
BEGIN
  -- One statement computes the id (only when it is NULL: coalesce is lazy) and the
  -- owner's gene; an id from another gene than its owner's would be found by id but
  -- missed by owner lookups, so it is refused.
  EXECUTE format('SELECT coalesce(($1).%1$I, id_gen.gene_order_id($2, ($1).%2$I)), id_gen.shard_gene(($1).%2$I)',
                 TG_ARGV[1], TG_ARGV[2])
    INTO new_id, owner_gene USING NEW, TG_ARGV[3];
  IF new_id IS NULL THEN
    RAISE EXCEPTION 'id_gen: a row of % needs an id or an owner', TG_TABLE_NAME
      USING ERRCODE = '23502', COLUMN = TG_ARGV[2],
            HINT = format('Give %I, and %I is computed from it with sequence %L.', TG_ARGV[2], TG_ARGV[1], TG_ARGV[3]);
  END IF;
  IF owner_gene IS NOT NULL AND new_id >> 47 <> owner_gene THEN
    RAISE EXCEPTION 'id_gen: id % has gene %, but its owner has gene %', new_id, new_id >> 47, owner_gene
      USING ERRCODE = '23514', COLUMN = TG_ARGV[1],
            HINT = format('Leave %I NULL to compute it, or use id_gen.gene_order_id(%L, owner).', TG_ARGV[1], TG_ARGV[3]);
  END IF;
  NEW := jsonb_populate_record(NEW, jsonb_build_object(TG_ARGV[1], new_id));
  EXECUTE format('INSERT INTO %s SELECT ($1).*', TG_ARGV[0]) USING NEW;
  RETURN NEW;
END $$;
COMMENT ON FUNCTION id_gen.insert_distributed_row() IS 'INSTEAD OF INSERT trigger of a distributed table''s view: computes a NULL id from the owner with gene_order_id, refuses an id from another gene than its owner''s, and inserts into the partitioned table (which routes it to the owner''s shard).';

-- Grants of one relation, repeated on another (the owner's own rights are implied).

CREATE OR REPLACE FUNCTION id_gen.distribute_table(tbl regclass, id_column name, owner_column name DEFAULT NULL,
                                        sequence text DEFAULT NULL, layout text DEFAULT 'per_range') RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  sch name;
  tab name;
  kind "char";
  table_owner name;
  id_type regtype;
  owner_type regtype;
  old_name name;
  parts name;
  definition text;
  cols text;
  moved bigint;
  g record;
  triggers text;
  persistence "char";
  taken name[];
  shard_stem name;
  coordinator_stem name;
  code text;
  pushed jsonb;
  msg text;
  err_state text;
  err_detail text;
  err_hint text;
  undo_errors text;
BEGIN
  IF tbl IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "tbl" must not be NULL' USING ERRCODE = '22004';
  ELSIF id_column IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "id_column" must not be NULL' USING ERRCODE = '22004';
  ELSIF distribute_table.layout IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "layout" must not be NULL' USING ERRCODE = '22004';
  ELSIF distribute_table.layout NOT IN ('per_range', 'per_shard', 'by_ownership') THEN
    RAISE EXCEPTION 'id_gen: unknown layout "%"', distribute_table.layout
      USING ERRCODE = '22023',
            HINT = 'per_range: a range partition per route range here (moves supported); per_shard: a partition per shard here, whatever the number of route ranges; by_ownership: per_shard here, and one table of rows per shard whatever the number of route ranges (moves supported, not reversible ones).';
  ELSIF distribute_table.layout = 'by_ownership' AND EXISTS (SELECT FROM id_gen.shard_moves m WHERE m.phase NOT IN ('done', 'aborted', 'reverted')) THEN
    RAISE EXCEPTION 'id_gen: a table laid out by ownership cannot be distributed while a move is unfinished'
      USING ERRCODE = '55006', HINT = 'A move in flight does not carry a table distributed meanwhile. Finish or abort the moves first (id_gen.moves).';
  END IF;
  PERFORM id_gen.require_superuser('distribute tables');
  PERFORM id_gen.quiet_ddl();
  SELECT n.nspname, c.relname, c.relkind, pg_get_userbyid(c.relowner), c.relpersistence
    INTO sch, tab, kind, table_owner, persistence
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = tbl;
  PERFORM id_gen.dblink_schema();
  IF EXISTS (SELECT FROM id_gen.distributed_tables t WHERE (t.schema_name, t.table_name) = (sch, tab)) THEN
    RAISE EXCEPTION 'id_gen: % is already distributed', tbl
      USING ERRCODE = '42710', HINT = 'Its partitions follow id_gen.shard_routes; see id_gen.distribution.';
  ELSIF kind <> 'r' THEN
    RAISE EXCEPTION 'id_gen: % is not a plain table', tbl
      USING ERRCODE = '42809', HINT = 'distribute_table converts a plain (heap) table; partitioned tables, views and foreign tables are refused.';
  ELSIF persistence = 't' THEN
    RAISE EXCEPTION 'id_gen: % is a temporary table', tbl
      USING ERRCODE = '0A000', HINT = 'Only permanent tables can be distributed: the shards hold their rows for every session.';
  END IF;
  SELECT a.atttypid::regtype INTO id_type FROM pg_attribute a
  WHERE a.attrelid = tbl AND a.attname = id_column AND a.attnum > 0 AND NOT a.attisdropped;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'id_gen: column "%" of % does not exist', id_column, tbl USING ERRCODE = '42703';
  ELSIF id_type <> 'bigint'::regtype THEN
    RAISE EXCEPTION 'id_gen: id column "%" of % is %, not bigint', id_column, tbl, id_type
      USING ERRCODE = '42804', HINT = 'Distributed tables route by the gene in bits 62..47 of a bigint id.';
  END IF;
  IF owner_column IS NOT NULL THEN
    SELECT a.atttypid::regtype INTO owner_type FROM pg_attribute a
    WHERE a.attrelid = tbl AND a.attname = owner_column AND a.attnum > 0 AND NOT a.attisdropped;
    IF NOT FOUND THEN
      RAISE EXCEPTION 'id_gen: column "%" of % does not exist', owner_column, tbl USING ERRCODE = '42703';
    ELSIF owner_type NOT IN ('bigint'::regtype, 'integer'::regtype, 'smallint'::regtype, 'text'::regtype,
                             'character varying'::regtype, 'uuid'::regtype) THEN
      RAISE EXCEPTION 'id_gen: owner column "%" of % is %', owner_column, tbl, owner_type
        USING ERRCODE = '42804', HINT = 'An owner is a bigint, integer, text or uuid (what id_gen.shard_gene takes).';
    END IF;
  END IF;
  IF sequence IS NOT NULL THEN
    IF owner_column IS NULL THEN
      RAISE EXCEPTION 'id_gen: a sequence computes ids from an owner, but no owner_column was given'
        USING ERRCODE = '22023', HINT = 'Pass owner_column => ''...'' too, or leave sequence NULL and insert ids yourself.';
    ELSIF NOT EXISTS (SELECT FROM id_gen.sequences s WHERE s.name = sequence) THEN
      RAISE EXCEPTION 'id_gen: sequence "%" does not exist', sequence
        USING ERRCODE = '42704', HINT = format('SELECT id_gen.create_sequence(%L) creates it (on every shard too, or with authority => ...).', sequence);
    END IF;
  END IF;
  IF NOT EXISTS (SELECT FROM pg_constraint c WHERE c.contype = 'p' AND c.conrelid = tbl) THEN
    RAISE EXCEPTION 'id_gen: % has no primary key', tbl
      USING ERRCODE = '0A000',
            HINT = format('Add one that includes %I (ALTER TABLE ... ADD PRIMARY KEY (%I)): shards need it as the replica identity when rows move between them.', id_column, id_column);
  END IF;
  IF EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = tbl AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated <> '') THEN
    RAISE EXCEPTION 'id_gen: % has generated columns, which distributed tables do not carry', tbl
      USING ERRCODE = '0A000', HINT = 'Turn them into plain columns filled by the application or a trigger on the shards.';
  END IF;
  IF EXISTS (SELECT FROM pg_constraint c WHERE c.contype IN ('p', 'u') AND c.conrelid = tbl
             AND NOT (SELECT a.attnum FROM pg_attribute a WHERE a.attrelid = tbl AND a.attname = id_column) = ANY (c.conkey)) THEN
    RAISE EXCEPTION 'id_gen: a primary key or unique constraint of % does not include "%"', tbl, id_column
      USING ERRCODE = '0A000',
            HINT = 'Shards partition the table by its id, and a unique constraint of a partitioned table must include the partition key.';
  END IF;
  IF EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = tbl AND a.attnum > 0 AND NOT a.attisdropped AND a.attidentity <> '') THEN
    RAISE EXCEPTION 'id_gen: % has identity columns, which distributed tables do not carry', tbl
      USING ERRCODE = '0A000', HINT = 'Ids come from id_gen (gene_order_id); make other identity columns plain, with a default the shards can compute.';
  END IF;
  IF EXISTS (SELECT FROM pg_attrdef d JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
             WHERE d.adrelid = tbl AND a.attname = id_column
               AND EXISTS (SELECT FROM pg_depend dep WHERE dep.classid = 'pg_attrdef'::regclass AND dep.objid = d.oid
                           AND dep.refclassid = 'pg_class'::regclass)) THEN
    RAISE EXCEPTION 'id_gen: the id column "%" of % takes its values from a sequence (serial or nextval)', id_column, tbl
      USING ERRCODE = '0A000',
            HINT = 'Its ids would carry gene 0 and all land on one shard. Drop that default (ALTER TABLE ... ALTER COLUMN ... DROP DEFAULT) and give owner_column and sequence, so that ids are computed with id_gen.gene_order_id.';
  END IF;
  code := id_gen.untrusted_code(tbl);
  IF code IS NOT NULL THEN
    RAISE EXCEPTION 'id_gen: cannot distribute %: it runs %', tbl, code
      USING ERRCODE = '42501',
            DETAIL = 'id_gen copies, moves and re-partitions distributed tables with superuser rights, and would run that code with them.',
            HINT = 'Have a superuser own the functions the table''s constraints, defaults, indexes, triggers and column types call (ALTER FUNCTION ... OWNER TO), or remove them from the table.';
  END IF;
  IF EXISTS (SELECT FROM pg_constraint c WHERE c.contype = 'f' AND (c.conrelid = tbl OR c.confrelid = tbl)) THEN
    RAISE EXCEPTION 'id_gen: % has foreign keys, which cannot span shards', tbl
      USING ERRCODE = '0A000', HINT = 'Drop the foreign keys first; a shard checks only its own rows.';
  END IF;

  LOCK TABLE id_gen.shard_routes IN SHARE MODE;
  PERFORM id_gen.refuse_during_operations('distribute a table');
  PERFORM id_gen.check_routes_for_distribution();
  EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', tbl);
  PERFORM id_gen.check_lock_room_to_distribute(tbl, distribute_table.layout);

  parts := CASE WHEN sequence IS NULL THEN tab ELSE id_gen.fit_name(tab, '_shards') END;
  IF parts <> tab AND to_regclass(format('%I.%I', sch, parts)) IS NOT NULL THEN
    RAISE EXCEPTION 'id_gen: relation %.% already exists', quote_ident(sch), quote_ident(parts)
      USING ERRCODE = '42P07', HINT = 'distribute_table names the partitioned table <table>_shards when a sequence computes ids; rename that relation.';
  END IF;
  -- Partition names: unique among the distributed tables of the schema.
  SELECT coalesce(array_agg(s), '{}') INTO taken
  FROM (SELECT t.shard_stem AS s FROM id_gen.distributed_tables t WHERE t.schema_name = sch
        UNION ALL SELECT t.coordinator_stem FROM id_gen.distributed_tables t WHERE t.schema_name = sch) x;
  coordinator_stem := id_gen.pick_stem(parts, taken);
  shard_stem := id_gen.pick_stem(tab, taken);
  -- The shards' table, partitioned by id (by_ownership: the plain table of rows
  -- <shard_stem>_rows, sql/cluster/shard/owned_rows.sql): columns, NOT NULL, defaults (but
  -- the id's: ids come from the coordinator or from gene_order_id on the shard), primary
  -- key, unique and check constraints. search_path is pinned, so every type and function
  -- name comes out qualified.
  SELECT format('CREATE TABLE %I.%I (%s%s)%s', sch,
                CASE WHEN distribute_table.layout = 'by_ownership' THEN id_gen.fit_name(shard_stem, '_rows') ELSE tab END,
                string_agg(format('%I %s%s%s', a.attname, format_type(a.atttypid, a.atttypmod),
                                  CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END,
                                  CASE WHEN a.attname <> id_column AND d.adbin IS NOT NULL AND a.attgenerated = ''
                                       THEN ' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid) ELSE '' END),
                           ', ' ORDER BY a.attnum),
                coalesce((SELECT string_agg(format(', CONSTRAINT %I %s', c.conname, pg_get_constraintdef(c.oid)), '' ORDER BY c.conname)
                          FROM pg_constraint c WHERE c.conrelid = tbl AND c.contype IN ('p', 'u', 'c')), '')
                -- An UPDATE may not move a row to an owner of another gene while it keeps its id.
                || CASE WHEN owner_column IS NULL THEN ''
                        ELSE format(', CONSTRAINT id_gen_owner_gene CHECK ((%I OPERATOR(pg_catalog.>>) 47) OPERATOR(pg_catalog.=) id_gen.shard_gene(%I::%s))',
                                    id_column, owner_column,
                                    CASE WHEN owner_type IN ('bigint'::regtype, 'integer'::regtype, 'smallint'::regtype) THEN 'pg_catalog.int8'
                                         WHEN owner_type = 'uuid'::regtype THEN 'pg_catalog.uuid' ELSE 'pg_catalog.text' END) END,
                CASE WHEN distribute_table.layout = 'by_ownership' THEN '' ELSE format(' PARTITION BY RANGE (%I)', id_column) END),
         string_agg(format('%I', a.attname), ', ' ORDER BY a.attnum) FILTER (WHERE a.attgenerated = '')
    INTO definition, cols
  FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
  WHERE a.attrelid = tbl AND a.attnum > 0 AND NOT a.attisdropped;
  SELECT string_agg(quote_ident(t.tgname), ', ') INTO triggers
  FROM pg_trigger t WHERE t.tgrelid = tbl AND NOT t.tgisinternal;

  old_name := id_gen.fit_name(tab, '_undistributed_' || tbl::oid);
  -- Sequences owned by its columns (serial defaults) go with the new table.
  FOR g IN SELECT s.oid::regclass AS seq, a.attname
           FROM pg_depend dep JOIN pg_class s ON s.oid = dep.objid AND s.relkind = 'S'
           JOIN pg_attribute a ON a.attrelid = dep.refobjid AND a.attnum = dep.refobjsubid
           WHERE dep.classid = 'pg_class'::regclass AND dep.refclassid = 'pg_class'::regclass
             AND dep.refobjid = tbl AND dep.deptype = 'a' LOOP
    EXECUTE format('ALTER SEQUENCE %s OWNED BY NONE', g.seq);
  END LOOP;
  EXECUTE format('ALTER TABLE %s RENAME TO %I', tbl, old_name);
  EXECUTE format('CREATE TABLE %I.%I (LIKE %I.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING COMMENTS '
                 'INCLUDING STORAGE INCLUDING COMPRESSION) PARTITION BY %s',
                 sch, parts, sch, old_name,
                 CASE WHEN distribute_table.layout IN ('per_shard', 'by_ownership') THEN format('HASH (%I id_gen.gene_route_ops)', id_column)
                      ELSE format('RANGE (%I)', id_column) END);
  EXECUTE format('ALTER TABLE %I.%I OWNER TO %I', sch, parts, table_owner);
  EXECUTE format('COMMENT ON TABLE %I.%I IS %L', sch, parts,
                 coalesce(obj_description(tbl, 'pg_class') || E'\n', '')
                 || format('id_gen: distributed by %s over the shards of id_gen.shard_routes (see id_gen.distribution).', id_column));
  -- (by_ownership: per_shard here; the shards lay the table out by ownership.)
  INSERT INTO id_gen.distributed_tables (schema_name, table_name, partitioned_name, id_column, owner_column, sequence,
                                         shard_definition, shard_stem, coordinator_stem, layout, shard_layout)
  VALUES (sch, tab, parts, id_column, owner_column, sequence, definition, shard_stem, coordinator_stem,
          CASE WHEN distribute_table.layout = 'by_ownership' THEN 'per_shard' ELSE distribute_table.layout END,
          CASE WHEN distribute_table.layout = 'by_ownership' THEN 'by_ownership' ELSE 'partitioned' END);
  pushed := id_gen.sync_distributed_table(sch, tab);
  BEGIN

  -- Rows already in the table move to their shards.
  EXECUTE format('INSERT INTO %I.%I (%s) SELECT %s FROM %I.%I', sch, parts, cols, cols, sch, old_name);
  GET DIAGNOSTICS moved = ROW_COUNT;
  PERFORM id_gen.copy_grants(tbl, format('%I.%I', sch, parts)::regclass);
  BEGIN
    EXECUTE format('DROP TABLE %I.%I', sch, old_name);
  EXCEPTION WHEN dependent_objects_still_exist THEN
    RAISE EXCEPTION 'id_gen: other objects depend on %', tbl
      USING ERRCODE = '2BP01', HINT = 'Drop the views or other objects that use the table, distribute it, then create them again over the distributed table.';
  END;

  IF sequence IS NOT NULL THEN
    EXECUTE format('CREATE VIEW %I.%I AS SELECT * FROM %I.%I', sch, tab, sch, parts);
    EXECUTE format('ALTER VIEW %I.%I OWNER TO %I', sch, tab, table_owner);
    -- The view inserts through a trigger, which sees the view's defaults, not the table's.
    FOR g IN SELECT a.attname, pg_get_expr(d.adbin, d.adrelid) AS expr
             FROM pg_attribute a JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
             WHERE a.attrelid = format('%I.%I', sch, parts)::regclass AND a.attname <> id_column LOOP
      EXECUTE format('ALTER VIEW %I.%I ALTER COLUMN %I SET DEFAULT %s', sch, tab, g.attname, g.expr);
    END LOOP;
    EXECUTE format('CREATE TRIGGER id_gen_insert INSTEAD OF INSERT ON %I.%I FOR EACH ROW '
                   'EXECUTE FUNCTION id_gen.insert_distributed_row(%L, %L, %L, %L)',
                   sch, tab, format('%I.%I', sch, parts), id_column, owner_column, sequence);
    PERFORM id_gen.copy_grants(format('%I.%I', sch, parts)::regclass, format('%I.%I', sch, tab)::regclass);
    EXECUTE format('COMMENT ON VIEW %I.%I IS %L', sch, tab,
                   format('id_gen: distributed table; an INSERT without %s computes it with id_gen.gene_order_id(%L, %s) and routes the row to the owner''s shard. Rows live in %I.%I.',
                          id_column, sequence, owner_column, sch, parts));
  END IF;
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    -- The shards created their tables in transactions of their own: they forget them again.
    GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT, err_state = RETURNED_SQLSTATE, err_detail = PG_EXCEPTION_DETAIL, err_hint = PG_EXCEPTION_HINT;
    undo_errors := id_gen.restore_shard_ranges(sch, tab, pushed->'pushed');
    PERFORM id_gen.reraise(msg, err_state,
      concat_ws(E'\n', nullif(err_detail, ''),
                CASE WHEN undo_errors IS NOT NULL THEN 'Some shards keep empty partitions of the table: ' || undo_errors END),
      err_hint);
  END;
  IF triggers IS NOT NULL THEN
    RAISE NOTICE 'id_gen: triggers % of % were not carried over', triggers, tbl
      USING HINT = 'Create them on the shards'' tables, where rows are written.';
  END IF;
  RAISE NOTICE 'id_gen: %.% is distributed over % shards; % existing rows moved to them',
    quote_ident(sch), quote_ident(tab), (SELECT count(DISTINCT shard) FROM id_gen.shard_routes), moved;
END $$;
COMMENT ON FUNCTION id_gen.distribute_table(regclass, name, name, text, text) IS 'Turns a plain table into a distributed table: here, partitioned on its bigint id column, with layout per_range (a RANGE partition per route range, each holding a postgres_fdw foreign table over the shard''s partition of the range) or per_shard (a HASH partition per shard over id_gen.gene_route_ops, a foreign table over the shard''s table: relations do not grow with the route ranges); creates the shards'' tables and moves existing rows. With owner_column and sequence, the table''s name becomes a view that computes missing ids from the owner. Superuser only.';
REVOKE EXECUTE ON FUNCTION id_gen.distribute_table(regclass, name, name, text, text) FROM PUBLIC;

-- The distribution of distributed tables by route range.
CREATE OR REPLACE VIEW id_gen.distribution AS
WITH ranges AS (
  SELECT coalesce(lag(sr.upper_gene) OVER (ORDER BY sr.upper_gene) + 1, 0) AS lower_gene, sr.upper_gene, sr.shard
  FROM id_gen.shard_routes sr
)
SELECT format('%I.%I', d.schema_name, d.table_name) AS relation,
       r.lower_gene,
       r.upper_gene,
       r.shard,
       id_gen.gene_first_id(r.lower_gene) AS first_id,
       id_gen.gene_last_id(r.upper_gene) AS last_id,
       format('%I.%I', d.schema_name,
              CASE d.layout WHEN 'per_shard' THEN id_gen.slot_partition_name(d.coordinator_stem, sl.slot)
                            ELSE id_gen.partition_name(d.coordinator_stem, r.lower_gene, r.upper_gene) END) AS partition,
       EXISTS (SELECT FROM pg_catalog.pg_class c
               JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
               JOIN pg_catalog.pg_inherits i ON i.inhrelid = c.oid
               JOIN pg_catalog.pg_foreign_table ft ON ft.ftrelid = c.oid
               JOIN pg_catalog.pg_foreign_server s ON s.oid = ft.ftserver
               WHERE n.nspname = d.schema_name
                 AND c.relname = CASE d.layout WHEN 'per_shard' THEN id_gen.slot_partition_name(d.coordinator_stem, sl.slot)
                                 ELSE id_gen.fit_name(id_gen.partition_name(d.coordinator_stem, r.lower_gene, r.upper_gene), '_fdw') END
                 AND s.srvname = r.shard)
       AND EXISTS (SELECT FROM id_gen.shard_placements p
                   WHERE (p.schema_name, p.table_name, p.shard) = (d.schema_name, d.table_name, r.shard)
                     AND int4range(r.lower_gene, r.upper_gene, '[]') = ANY (p.gene_ranges)) AS in_step
FROM id_gen.distributed_tables d CROSS JOIN ranges r LEFT JOIN id_gen.shard_slots sl ON sl.shard = r.shard;
COMMENT ON VIEW id_gen.distribution IS 'Each distributed table by route range: shard, id bounds, the partition here that holds its rows (per_range: the range''s own; per_shard: the shard''s), and whether its foreign table and the shard''s placement match the route table (in_step; false after a failed sync: run SELECT id_gen.sync_distributed_tables()).';
GRANT SELECT ON id_gen.distribution TO PUBLIC;
