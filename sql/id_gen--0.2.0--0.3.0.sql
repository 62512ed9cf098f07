-- id_gen 0.2.0 -> 0.3.0: distributed tables. A coordinator routes rows by the route
-- table over postgres_fdw (id_gen.distribute_table, id_gen.distribution); shards keep
-- id_gen.shard_tables and one partition per route range they own; set_route and
-- drop_route keep both in step; owner_first_id and owner_last_id for lookups by owner
-- that prune to one shard; online moves of route ranges over logical replication
-- (id_gen.move_genes, id_gen.abort_move, id_gen.moves).
-- Run by ALTER EXTENSION id_gen UPDATE TO '0.3.0'.

\echo Use "ALTER EXTENSION id_gen UPDATE TO '0.3.0'" to load this file. \quit

-- Distributed tables: a coordinator routes rows by the route table over postgres_fdw.
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
-- Inserts that name only the owner: PostgreSQL routes a row to its partition before any
-- trigger of the partition runs, and a column DEFAULT cannot read another column. So
-- when a sequence is given, the table's name becomes a view over the partitioned table
-- (<name>_shards) whose INSTEAD OF INSERT trigger computes gene_order_id(sequence,
-- owner) for a NULL id and inserts into the partitioned table. The view is
-- auto-updatable for UPDATE and DELETE; COPY into it runs the trigger; RETURNING sees
-- the id.
--
-- Shard side. A shard holds the table partitioned the same way: one local partition per
-- route range it owns, named id_gen.partition_name(table, lo, hi), and each coordinator
-- foreign table points at exactly that local partition. So:
--   * a foreign table never sees another range's rows (postgres_fdw does not send a
--     partition's bounds to the remote side: two foreign tables over one remote table
--     would each return all of its rows);
--   * the shard refuses a row outside its genes, whoever writes it (23514, "no
--     partition of relation found for row"): foreign tables do not enforce partition
--     bounds, the shard's partitions do;
--   * moving a route range moves one table (sql/move.sql).
-- The shard keeps id_gen.shard_tables: the tables it holds and the route ranges it owns
-- for each. The coordinator writes those rows through postgres_fdw in its own
-- transaction (the remote statement runs inside the coordinator's statement; the remote
-- commit happens at the coordinator's pre-commit). A trigger on the shard creates a
-- missing table from the stored definition and re-partitions it to the new ranges.
--
-- Invariants:
--   * id_gen.shard_routes is the single source of truth; set_route and drop_route call
--     id_gen.sync_distributed_tables() in the same transaction, which re-derives every
--     coordinator partition and every shard's partitions from it.
--   * id_gen.shard_placements records what each shard was last told; only changed
--     shards are written to.
--   * Nothing here deletes user rows: a route change that would leave rows on a shard
--     outside its genes fails, and the route table stays as it was.

-- Id ranges of genes and owners ----------------------------------------------------------
CREATE FUNCTION id_gen.gene_first_id(gene integer) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN id_gen.compose_id(gene, 0);
CREATE FUNCTION id_gen.gene_last_id(gene integer) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN id_gen.compose_id(gene, 140737488355327);
COMMENT ON FUNCTION id_gen.gene_first_id(integer) IS 'Smallest 64-bit id of a gene: gene << 47.';
COMMENT ON FUNCTION id_gen.gene_last_id(integer) IS 'Largest 64-bit id of a gene: (gene << 47) + 2^47 - 1.';

CREATE FUNCTION id_gen.owner_first_id(owner bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN id_gen.gene_first_id(id_gen.shard_gene(owner));
CREATE FUNCTION id_gen.owner_first_id(owner text) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN id_gen.gene_first_id(id_gen.shard_gene(owner));
CREATE FUNCTION id_gen.owner_first_id(owner uuid) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN id_gen.gene_first_id(id_gen.shard_gene(owner));
CREATE FUNCTION id_gen.owner_last_id(owner bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN id_gen.gene_last_id(id_gen.shard_gene(owner));
CREATE FUNCTION id_gen.owner_last_id(owner text) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN id_gen.gene_last_id(id_gen.shard_gene(owner));
CREATE FUNCTION id_gen.owner_last_id(owner uuid) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN id_gen.gene_last_id(id_gen.shard_gene(owner));
COMMENT ON FUNCTION id_gen.owner_first_id(bigint) IS 'Smallest id an owner''s rows can have. Lookups by owner prune to one shard with: WHERE owner_col = $1 AND id BETWEEN id_gen.owner_first_id($1) AND id_gen.owner_last_id($1).';
COMMENT ON FUNCTION id_gen.owner_first_id(text) IS 'owner_first_id for a text owner.';
COMMENT ON FUNCTION id_gen.owner_first_id(uuid) IS 'owner_first_id for a uuid owner.';
COMMENT ON FUNCTION id_gen.owner_last_id(bigint) IS 'Largest id an owner''s rows can have; see owner_first_id.';
COMMENT ON FUNCTION id_gen.owner_last_id(text) IS 'owner_last_id for a text owner.';
COMMENT ON FUNCTION id_gen.owner_last_id(uuid) IS 'owner_last_id for a uuid owner.';

-- At most 58 bytes, so that "<name>_fdw" fits NAMEDATALEN too: parents longer than 30
-- bytes keep 8 characters and a hash of the whole name (no two parents collide by their
-- first characters).
CREATE FUNCTION id_gen.partition_name(parent name, lower_gene integer, upper_gene integer) RETURNS name
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN CASE WHEN octet_length(parent) <= 30 THEN parent::text
            ELSE left(parent, 8) || '_' || left(md5(parent), 8) END
       || '_g' || lower_gene || '_' || upper_gene;
CREATE FUNCTION id_gen.partition_bounds(lower_gene integer, upper_gene integer) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN format('FROM (%s) TO (%s)', id_gen.gene_first_id(lower_gene),
              CASE WHEN upper_gene = 65535 THEN 'MAXVALUE' ELSE id_gen.gene_first_id(upper_gene + 1)::text END);
COMMENT ON FUNCTION id_gen.partition_bounds(integer, integer) IS 'The FOR VALUES bounds of the partition of genes lower_gene .. upper_gene: FROM (lower_gene << 47) TO ((upper_gene + 1) << 47), MAXVALUE for the last gene (65536 << 47 overflows).';
COMMENT ON FUNCTION id_gen.partition_name(name, integer, integer) IS 'Name of the partition that holds genes lower_gene .. upper_gene of a distributed table (on the coordinator the range partition, on its shard the local partition its foreign table points at); long names are shortened with a hash.';

-- Shard side ------------------------------------------------------------------------------
CREATE TABLE id_gen.shard_tables (
    schema_name name          NOT NULL,
    table_name  name          NOT NULL,
    id_column   name          NOT NULL,
    gene_ranges int4range[]   NOT NULL,
    definition  text          NOT NULL,
    updated_at  timestamptz   NOT NULL DEFAULT now(),
    PRIMARY KEY (schema_name, table_name)
);
SELECT pg_catalog.pg_extension_config_dump('id_gen.shard_tables', '');
REVOKE ALL ON id_gen.shard_tables FROM PUBLIC;
GRANT SELECT ON id_gen.shard_tables TO PUBLIC;
COMMENT ON TABLE id_gen.shard_tables IS 'On a shard: the distributed tables it holds and the route ranges it owns for each, written by the coordinator over postgres_fdw. A trigger creates a missing table and keeps one local partition per owned route range.';
COMMENT ON COLUMN id_gen.shard_tables.gene_ranges IS 'Route ranges of genes whose ids this shard holds for the table, one partition each (empty: none).';
COMMENT ON COLUMN id_gen.shard_tables.definition IS 'CREATE TABLE ... PARTITION BY RANGE (id) statement, generated by the coordinator, run when the table is missing.';

CREATE FUNCTION id_gen.apply_shard_table() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  parent text;
  part record;
  wanted int4range;
  pname name;
  detached regclass[] := '{}';
  candidate regclass;
  lowest bigint;
  highest bigint;
  adopted boolean;
BEGIN
  IF TG_OP = 'DELETE' THEN
    RETURN OLD;  -- the table and its rows stay; only the coordinator forgets them
  END IF;
  parent := format('%I.%I', NEW.schema_name, NEW.table_name);
  IF to_regclass(parent) IS NULL THEN
    EXECUTE format('CREATE SCHEMA IF NOT EXISTS %I', NEW.schema_name);
    EXECUTE NEW.definition;
  ELSIF (SELECT c.relkind FROM pg_class c WHERE c.oid = parent::regclass) <> 'p' THEN
    RAISE EXCEPTION 'id_gen: % exists on this shard but is not partitioned', parent
      USING ERRCODE = '55000',
            HINT = 'distribute_table creates the shards'' tables itself (partitioned by id, one partition per route range); rename or drop the existing table.';
  END IF;

  -- Partitions that are not a wanted range are detached ...
  FOR part IN SELECT c.oid::regclass AS rel, c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
              WHERE i.inhparent = parent::regclass LOOP
    CONTINUE WHEN EXISTS (SELECT FROM unnest(NEW.gene_ranges) g
                          WHERE id_gen.partition_name(NEW.table_name, lower(g), upper(g) - 1) = part.relname);
    EXECUTE format('ALTER TABLE %s DETACH PARTITION %s', parent, part.rel);
    detached := detached || part.rel;
  END LOOP;
  -- ... each missing range adopts a detached table whose rows all fall inside it (no copy;
  -- ATTACH checks the bounds), or starts empty ...
  FOR wanted IN SELECT g FROM unnest(NEW.gene_ranges) g ORDER BY g LOOP
    pname := id_gen.partition_name(NEW.table_name, lower(wanted), upper(wanted) - 1);
    CONTINUE WHEN to_regclass(format('%I.%I', NEW.schema_name, pname)) IS NOT NULL;
    adopted := false;
    FOREACH candidate IN ARRAY detached LOOP
      EXECUTE format('SELECT min(%1$I) >> 47, max(%1$I) >> 47 FROM %2$s', NEW.id_column, candidate) INTO lowest, highest;
      IF lowest >= lower(wanted) AND highest < upper(wanted) THEN
        EXECUTE format('ALTER TABLE %s RENAME TO %I', candidate, pname);
        detached := array_remove(detached, candidate);
        adopted := true;
        EXIT;
      END IF;
    END LOOP;
    IF adopted THEN
      EXECUTE format('ALTER TABLE %s ATTACH PARTITION %I.%I FOR VALUES %s', parent,
                     NEW.schema_name, pname, id_gen.partition_bounds(lower(wanted), upper(wanted) - 1));
    ELSE
      EXECUTE format('CREATE TABLE %I.%I PARTITION OF %s FOR VALUES %s',
                     NEW.schema_name, pname, parent, id_gen.partition_bounds(lower(wanted), upper(wanted) - 1));
    END IF;
    EXECUTE format('COMMENT ON TABLE %I.%I IS %L', NEW.schema_name, pname,
                   format('id_gen: genes %s .. %s of %s on this shard (kept by the coordinator through id_gen.shard_tables)',
                          lower(wanted), upper(wanted) - 1, parent));
  END LOOP;
  -- ... and the rows of the rest go back through the parent: a row outside every range
  -- is refused (23514), and with it the coordinator's route change.
  FOREACH candidate IN ARRAY detached LOOP
    EXECUTE format('INSERT INTO %s SELECT * FROM %s', parent, candidate);
    EXECUTE format('DROP TABLE %s', candidate);
  END LOOP;
  RETURN NEW;
END $$;
COMMENT ON FUNCTION id_gen.apply_shard_table() IS 'Trigger on id_gen.shard_tables: creates a missing shard table and re-partitions it to one local partition per owned route range.';
CREATE TRIGGER apply_shard_table AFTER INSERT OR UPDATE OR DELETE ON id_gen.shard_tables
FOR EACH ROW EXECUTE FUNCTION id_gen.apply_shard_table();

-- Coordinator side ------------------------------------------------------------------------
CREATE TABLE id_gen.distributed_tables (
    schema_name      name        NOT NULL,
    table_name       name        NOT NULL,
    partitioned_name name        NOT NULL,
    id_column        name        NOT NULL,
    owner_column     name,
    sequence         text,
    shard_definition text        NOT NULL,
    distributed_at   timestamptz NOT NULL DEFAULT now(),
    distributed_by   name        NOT NULL DEFAULT current_user,
    PRIMARY KEY (schema_name, table_name),
    CHECK (sequence IS NULL OR owner_column IS NOT NULL)
);
SELECT pg_catalog.pg_extension_config_dump('id_gen.distributed_tables', '');
REVOKE ALL ON id_gen.distributed_tables FROM PUBLIC;
GRANT SELECT ON id_gen.distributed_tables TO PUBLIC;
COMMENT ON TABLE id_gen.distributed_tables IS 'On a coordinator: tables distributed with id_gen.distribute_table. table_name is what applications use; partitioned_name is the table partitioned by RANGE on id_column (the same unless a sequence computes ids, then table_name is a view).';

CREATE TABLE id_gen.shard_placements (
    schema_name name           NOT NULL,
    table_name  name           NOT NULL,
    shard       text           NOT NULL,
    gene_ranges int4range[]    NOT NULL,
    updated_at  timestamptz    NOT NULL DEFAULT now(),
    PRIMARY KEY (schema_name, table_name, shard),
    FOREIGN KEY (schema_name, table_name) REFERENCES id_gen.distributed_tables ON DELETE CASCADE
);
SELECT pg_catalog.pg_extension_config_dump('id_gen.shard_placements', '');
REVOKE ALL ON id_gen.shard_placements FROM PUBLIC;
GRANT SELECT ON id_gen.shard_placements TO PUBLIC;
COMMENT ON TABLE id_gen.shard_placements IS 'On a coordinator: the route ranges each shard was last told it owns for each distributed table (its local partitions).';

CREATE FUNCTION id_gen.require_superuser(what text) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF NOT coalesce((SELECT rolsuper FROM pg_roles WHERE oid = current_user::regrole), false) THEN
    RAISE EXCEPTION 'id_gen: only superusers may %', what
      USING ERRCODE = '42501',
            HINT = 'It runs DDL on the coordinator and, through postgres_fdw user mappings, on every shard.';
  END IF;
END $$;
COMMENT ON FUNCTION id_gen.require_superuser(text) IS 'Raises 42501 unless the current user is a superuser.';

-- Routes and distributed tables stay put while a move is unfinished: a move relies on
-- the placements and partitions it prepared (sql/move.sql).
CREATE FUNCTION id_gen.refuse_during_moves(what text) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  busy text;
BEGIN
  SELECT string_agg(format('%s (genes %s .. %s to %s, %s)', m.move_id, m.lower_gene, m.upper_gene, m.target_shard, m.phase), ', ')
    INTO busy
  FROM id_gen.shard_moves m WHERE m.phase NOT IN ('done', 'aborted');
  IF busy IS NOT NULL THEN
    RAISE EXCEPTION 'id_gen: cannot % while moves are unfinished: %', what, busy
      USING ERRCODE = '55006',
            HINT = 'Finish each with the same CALL id_gen.move_genes(...) or roll it back with CALL id_gen.abort_move(move_id).';
  END IF;
END $$;
COMMENT ON FUNCTION id_gen.refuse_during_moves(text) IS 'Raises 55006 while a move of genes is unfinished.';
REVOKE EXECUTE ON FUNCTION id_gen.refuse_during_moves(text) FROM PUBLIC;

-- Every route must lead to a postgres_fdw server and every gene must have a route before
-- a table can be distributed over them.
CREATE FUNCTION id_gen.check_routes_for_distribution() RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  top integer;
  missing text;
BEGIN
  SELECT max(upper_gene) INTO top FROM id_gen.shard_routes;
  IF top IS NULL THEN
    RAISE EXCEPTION 'id_gen: the route table id_gen.shard_routes is empty'
      USING ERRCODE = '55000',
            HINT = 'Route every gene to a shard first, e.g. SELECT id_gen.set_route(65535, ''shard_1'').';
  ELSIF top <> 65535 THEN
    RAISE EXCEPTION 'id_gen: genes % .. 65535 have no route, so a distributed table would have no partition for them', top + 1
      USING ERRCODE = '55000',
            HINT = 'Distributed tables need a route whose upper bound is 65535: SELECT id_gen.set_route(65535, ''shard_x'').';
  END IF;
  SELECT string_agg(DISTINCT quote_literal(r.shard), ', ') INTO missing
  FROM id_gen.shard_routes r
  WHERE NOT EXISTS (SELECT FROM pg_foreign_server s
                    JOIN pg_foreign_data_wrapper w ON w.oid = s.srvfdw
                    WHERE s.srvname = r.shard AND w.fdwname = 'postgres_fdw');
  IF missing IS NOT NULL THEN
    RAISE EXCEPTION 'id_gen: shard % of the route table is not a postgres_fdw foreign server', missing
      USING ERRCODE = '42704',
            HINT = 'A shard name is a foreign server name: CREATE SERVER shard_1 FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host ''...'', dbname ''...''); CREATE USER MAPPING FOR CURRENT_USER SERVER shard_1;';
  END IF;
END $$;
COMMENT ON FUNCTION id_gen.check_routes_for_distribution() IS 'Raises unless every gene has a route and every routed shard is a postgres_fdw foreign server.';
REVOKE EXECUTE ON FUNCTION id_gen.check_routes_for_distribution() FROM PUBLIC;

-- Tells one shard which genes of a table it owns, through a foreign table over its
-- id_gen.shard_tables that lives only for this call.
CREATE FUNCTION id_gen.push_shard_table(shard text, schema_name name, table_name name,
                                        id_column name, gene_ranges int4range[],
                                        definition text) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  ft text := 'shard_tables_' || md5(shard);
  n bigint;
  msg text;
  code text;
BEGIN
  EXECUTE format('CREATE FOREIGN TABLE id_gen.%I (schema_name name, table_name name, id_column name, '
                 'gene_ranges int4range[], definition text, updated_at timestamptz) '
                 'SERVER %I OPTIONS (schema_name %L, table_name %L)', ft, shard, 'id_gen', 'shard_tables');
  BEGIN
    EXECUTE format('UPDATE id_gen.%I SET id_column = $1, gene_ranges = $2, definition = $3, updated_at = now() '
                   'WHERE schema_name = $4 AND table_name = $5', ft)
      USING id_column, gene_ranges, definition, schema_name, table_name;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n = 0 THEN
      EXECUTE format('INSERT INTO id_gen.%I VALUES ($1, $2, $3, $4, $5, now())', ft)
        USING schema_name, table_name, id_column, gene_ranges, definition;
    END IF;
  EXCEPTION
    WHEN check_violation THEN
      GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT;
      RAISE EXCEPTION 'id_gen: shard "%" holds rows of %.% outside the genes it would own (%)',
                      shard, quote_ident(schema_name), quote_ident(table_name), gene_ranges
        USING ERRCODE = '55000', DETAIL = 'On the shard: ' || msg,
              HINT = 'The route table is unchanged. Move those rows first (id_gen.move_genes), or delete them on the shard.';
    WHEN undefined_table OR undefined_function THEN
      GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT;
      RAISE EXCEPTION 'id_gen: shard "%" has no id_gen 0.3.0 or later', shard
        USING ERRCODE = '55000', DETAIL = 'On the shard: ' || msg,
              HINT = 'Run CREATE EXTENSION id_gen (or ALTER EXTENSION id_gen UPDATE) on the shard; it keeps the shard''s partitions.';
    WHEN sqlclient_unable_to_establish_sqlconnection OR connection_failure OR connection_exception THEN
      GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT, code = RETURNED_SQLSTATE;
      RAISE EXCEPTION 'id_gen: shard "%" is unreachable: %', shard, msg
        USING ERRCODE = code,
              HINT = 'Nothing changed. Distributed tables change only when every shard they touch answers; retry when it is back.';
  END;
  EXECUTE format('DROP FOREIGN TABLE id_gen.%I', ft);
  INSERT INTO id_gen.shard_placements AS p (schema_name, table_name, shard, gene_ranges)
  VALUES (push_shard_table.schema_name, push_shard_table.table_name, push_shard_table.shard, push_shard_table.gene_ranges)
  ON CONFLICT ON CONSTRAINT shard_placements_pkey DO UPDATE SET gene_ranges = excluded.gene_ranges, updated_at = now();
END $$;
COMMENT ON FUNCTION id_gen.push_shard_table(text, name, name, name, int4range[], text) IS 'Writes one shard''s id_gen.shard_tables row over postgres_fdw (creating the table there and re-partitioning it) and records it in id_gen.shard_placements.';
REVOKE EXECUTE ON FUNCTION id_gen.push_shard_table(text, name, name, name, int4range[], text) FROM PUBLIC;

-- Makes the range partition `pname` hold exactly one foreign table, "<pname>_fdw", on
-- `shard`, pointing at the shard's partition of the same genes. A foreign table on
-- another server is swapped: DETACH, DROP, CREATE under the lock of this range
-- partition alone (other ranges are not locked).
CREATE FUNCTION id_gen.point_partition(schema_name name, pname name, table_name name,
                                       lower_gene integer, upper_gene integer, shard text,
                                       owner_role name) RETURNS boolean
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  part regclass := format('%I.%I', schema_name, pname)::regclass;
  child record;
  fdw_name name := pname || '_fdw';
  kept boolean := false;
BEGIN
  FOR child IN SELECT c.oid::regclass AS rel, c.relname, s.srvname
               FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
               JOIN pg_foreign_table ft ON ft.ftrelid = c.oid
               JOIN pg_foreign_server s ON s.oid = ft.ftserver
               WHERE i.inhparent = part LOOP
    IF child.srvname = shard AND child.relname = fdw_name THEN
      kept := true;
    ELSE
      EXECUTE format('ALTER TABLE %s DETACH PARTITION %s', part, child.rel);
      EXECUTE format('DROP FOREIGN TABLE %s', child.rel);
    END IF;
  END LOOP;
  IF kept THEN
    RETURN false;
  END IF;
  EXECUTE format('CREATE FOREIGN TABLE %I.%I PARTITION OF %s FOR VALUES %s '
                 'SERVER %I OPTIONS (schema_name %L, table_name %L)',
                 schema_name, fdw_name, part, id_gen.partition_bounds(lower_gene, upper_gene),
                 shard, schema_name, id_gen.partition_name(table_name, lower_gene, upper_gene));
  EXECUTE format('ALTER FOREIGN TABLE %I.%I OWNER TO %I', schema_name, fdw_name, owner_role);
  EXECUTE format('COMMENT ON FOREIGN TABLE %I.%I IS %L', schema_name, fdw_name,
                 format('id_gen: genes %s .. %s on shard %s (its table %I.%I)', lower_gene, upper_gene, shard,
                        schema_name, id_gen.partition_name(table_name, lower_gene, upper_gene)));
  RETURN true;
END $$;
COMMENT ON FUNCTION id_gen.point_partition(name, name, name, integer, integer, text, name) IS 'Points the range partition of a distributed table at a shard: one foreign table "<partition>_fdw" over the shard''s partition of the same genes. Returns whether it changed anything.';
REVOKE EXECUTE ON FUNCTION id_gen.point_partition(name, name, name, integer, integer, text, name) FROM PUBLIC;

-- Re-derives the partitions of one distributed table, here and on its shards, from the route
-- table. Idempotent: partitions and shards already in step are left alone.
CREATE FUNCTION id_gen.sync_distributed_table(schema_name name, table_name name) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  d id_gen.distributed_tables;
  parts text;
  parts_owner name;
  cur record;
  r record;
  pname name;
BEGIN
  SELECT * INTO d FROM id_gen.distributed_tables t
  WHERE (t.schema_name, t.table_name) = (sync_distributed_table.schema_name, sync_distributed_table.table_name);
  IF NOT FOUND THEN
    RAISE EXCEPTION 'id_gen: %.% is not a distributed table', quote_ident(schema_name), quote_ident(table_name)
      USING ERRCODE = '42704', HINT = 'Distributed tables are listed in id_gen.distributed_tables.';
  END IF;
  parts := format('%I.%I', d.schema_name, d.partitioned_name);
  IF to_regclass(parts) IS NULL THEN
    RAISE EXCEPTION 'id_gen: the partitioned table % of distributed table %.% is missing', parts,
                    quote_ident(d.schema_name), quote_ident(d.table_name)
      USING ERRCODE = '42P01',
            HINT = 'If it was dropped on purpose: DELETE FROM id_gen.distributed_tables WHERE schema_name = ... AND table_name = ...';
  END IF;
  EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', parts);
  SELECT pg_get_userbyid(c.relowner) INTO parts_owner FROM pg_class c WHERE c.oid = parts::regclass;

  -- Range partitions whose bounds are no longer a route range go first, so that the new
  -- ones never overlap them. Each holds only a foreign table (dropped with it).
  FOR cur IN
    SELECT c.oid::regclass AS part, c.relname, c.relkind
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = parts::regclass
  LOOP
    CONTINUE WHEN EXISTS (SELECT FROM id_gen.route_ranges rr
                          WHERE id_gen.partition_name(d.partitioned_name, rr.lower_gene, rr.upper_gene) = cur.relname);
    IF cur.relkind <> 'p' OR EXISTS (SELECT FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                                     WHERE i.inhparent = cur.part AND c.relkind <> 'f') THEN
      RAISE EXCEPTION 'id_gen: partition % of % holds local data, and id_gen does not drop it', cur.part, parts
        USING ERRCODE = '55000', HINT = 'Detach it (ALTER TABLE ... DETACH PARTITION) and move its rows to the shards.';
    END IF;
    EXECUTE format('ALTER TABLE %s DETACH PARTITION %s', parts, cur.part);
    EXECUTE format('DROP TABLE %s', cur.part);
  END LOOP;

  FOR r IN SELECT * FROM id_gen.route_ranges ORDER BY lower_gene LOOP
    pname := id_gen.partition_name(d.partitioned_name, r.lower_gene, r.upper_gene);
    IF to_regclass(format('%I.%I', d.schema_name, pname)) IS NULL THEN
      EXECUTE format('CREATE TABLE %I.%I PARTITION OF %s FOR VALUES %s PARTITION BY RANGE (%I)',
                     d.schema_name, pname, parts, id_gen.partition_bounds(r.lower_gene, r.upper_gene), d.id_column);
      EXECUTE format('ALTER TABLE %I.%I OWNER TO %I', d.schema_name, pname, parts_owner);
      EXECUTE format('COMMENT ON TABLE %I.%I IS %L', d.schema_name, pname,
                     format('id_gen: genes %s .. %s of %s (kept in step with id_gen.shard_routes)',
                            r.lower_gene, r.upper_gene, parts));
    END IF;
    PERFORM id_gen.point_partition(d.schema_name, pname, d.table_name, r.lower_gene, r.upper_gene, r.shard, parts_owner);
  END LOOP;

  -- Every shard that owns genes now, or did before, hears its new set of ranges.
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
           k.shard IS NULL AS is_new
    FROM wanted w FULL JOIN known k ON k.shard = w.shard
    WHERE k.gene_ranges IS DISTINCT FROM coalesce(w.genes, '{}'::int4range[])
    ORDER BY 1
  LOOP
    PERFORM id_gen.push_shard_table(r.shard, d.schema_name, d.table_name, d.id_column, r.genes, d.shard_definition);
  END LOOP;
END $$;
COMMENT ON FUNCTION id_gen.sync_distributed_table(name, name) IS 'Re-derives the foreign partitions of one distributed table and the partitions of its shards from id_gen.shard_routes.';
REVOKE EXECUTE ON FUNCTION id_gen.sync_distributed_table(name, name) FROM PUBLIC;

CREATE FUNCTION id_gen.sync_distributed_tables() RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  d record;
  n integer := 0;
BEGIN
  IF NOT EXISTS (SELECT FROM id_gen.distributed_tables) THEN
    RETURN 0;
  END IF;
  PERFORM id_gen.require_superuser('change the routes of distributed tables');
  PERFORM id_gen.refuse_during_moves('change the routes of distributed tables');
  PERFORM id_gen.check_routes_for_distribution();
  FOR d IN SELECT t.schema_name, t.table_name FROM id_gen.distributed_tables t ORDER BY 1, 2 LOOP
    PERFORM id_gen.sync_distributed_table(d.schema_name, d.table_name);
    n := n + 1;
  END LOOP;
  RETURN n;
END $$;
COMMENT ON FUNCTION id_gen.sync_distributed_tables() IS 'Brings the partitions of every distributed table, on the coordinator and on the shards, in step with id_gen.shard_routes (set_route and drop_route call it; run it by hand after a failure). Returns the number of tables.';
REVOKE EXECUTE ON FUNCTION id_gen.sync_distributed_tables() FROM PUBLIC;

-- INSTEAD OF INSERT on the view of a distributed table with a sequence.
-- TG_ARGV: partitioned table, id column, owner column, sequence.
CREATE FUNCTION id_gen.insert_distributed_row() RETURNS trigger
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
CREATE FUNCTION id_gen.copy_grants(source regclass, target regclass) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  g record;
BEGIN
  FOR g IN SELECT a.grantee, a.privilege_type, a.is_grantable
           FROM pg_class c, aclexplode(c.relacl) a
           WHERE c.oid = source AND a.grantee <> c.relowner LOOP
    EXECUTE format('GRANT %s ON %s TO %s%s', g.privilege_type, target,
                   CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(g.grantee)) END,
                   CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
  END LOOP;
END $$;
COMMENT ON FUNCTION id_gen.copy_grants(regclass, regclass) IS 'Grants on target every privilege that was granted on source (distribute_table carries a table''s grants over to its replacements).';
REVOKE EXECUTE ON FUNCTION id_gen.copy_grants(regclass, regclass) FROM PUBLIC;

CREATE FUNCTION id_gen.distribute_table(tbl regclass, id_column name, owner_column name DEFAULT NULL,
                                        sequence text DEFAULT NULL) RETURNS void
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
BEGIN
  IF tbl IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "tbl" must not be NULL' USING ERRCODE = '22004';
  ELSIF id_column IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "id_column" must not be NULL' USING ERRCODE = '22004';
  END IF;
  PERFORM id_gen.require_superuser('distribute tables');
  SELECT n.nspname, c.relname, c.relkind, pg_get_userbyid(c.relowner)
    INTO sch, tab, kind, table_owner
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = tbl;
  IF EXISTS (SELECT FROM id_gen.distributed_tables t WHERE (t.schema_name, t.table_name) = (sch, tab)) THEN
    RAISE EXCEPTION 'id_gen: % is already distributed', tbl
      USING ERRCODE = '42710', HINT = 'Its partitions follow id_gen.shard_routes; see id_gen.distribution.';
  ELSIF kind <> 'r' THEN
    RAISE EXCEPTION 'id_gen: % is not a plain table', tbl
      USING ERRCODE = '42809', HINT = 'distribute_table converts a plain (heap) table; partitioned tables, views and foreign tables are refused.';
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
  IF EXISTS (SELECT FROM pg_constraint c WHERE c.contype = 'f' AND (c.conrelid = tbl OR c.confrelid = tbl)) THEN
    RAISE EXCEPTION 'id_gen: % has foreign keys, which cannot span shards', tbl
      USING ERRCODE = '0A000', HINT = 'Drop the foreign keys first; a shard checks only its own rows.';
  END IF;

  LOCK TABLE id_gen.shard_routes IN SHARE MODE;
  PERFORM id_gen.refuse_during_moves('distribute a table');
  PERFORM id_gen.check_routes_for_distribution();
  EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', tbl);

  -- The shards' table, partitioned by id: columns, NOT NULL, defaults (but the id's: ids come from the
  -- coordinator or from gene_order_id on the shard), primary key, unique and check
  -- constraints. search_path is pinned, so every type and function name comes out
  -- qualified.
  SELECT format('CREATE TABLE %I.%I (%s%s) PARTITION BY RANGE (%I)', sch, tab,
                string_agg(format('%I %s%s%s', a.attname, format_type(a.atttypid, a.atttypmod),
                                  CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END,
                                  CASE WHEN a.attname <> id_column AND d.adbin IS NOT NULL AND a.attgenerated = ''
                                       THEN ' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid) ELSE '' END),
                           ', ' ORDER BY a.attnum),
                coalesce((SELECT string_agg(format(', CONSTRAINT %I %s', c.conname, pg_get_constraintdef(c.oid)), '' ORDER BY c.conname)
                          FROM pg_constraint c WHERE c.conrelid = tbl AND c.contype IN ('p', 'u', 'c')), ''),
                id_column),
         string_agg(format('%I', a.attname), ', ' ORDER BY a.attnum) FILTER (WHERE a.attgenerated = '')
    INTO definition, cols
  FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
  WHERE a.attrelid = tbl AND a.attnum > 0 AND NOT a.attisdropped;
  SELECT string_agg(quote_ident(t.tgname), ', ') INTO triggers
  FROM pg_trigger t WHERE t.tgrelid = tbl AND NOT t.tgisinternal;

  parts := CASE WHEN sequence IS NULL THEN tab ELSE left(tab, 55) || '_shards' END;
  IF parts <> tab AND to_regclass(format('%I.%I', sch, parts)) IS NOT NULL THEN
    RAISE EXCEPTION 'id_gen: relation %.% already exists', quote_ident(sch), quote_ident(parts)
      USING ERRCODE = '42P07', HINT = 'distribute_table names the partitioned table <table>_shards when a sequence computes ids.';
  END IF;
  old_name := left(tab, 40) || '_undistributed_' || tbl::oid;
  EXECUTE format('ALTER TABLE %s RENAME TO %I', tbl, old_name);
  EXECUTE format('CREATE TABLE %I.%I (LIKE %I.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING COMMENTS '
                 'INCLUDING STORAGE INCLUDING COMPRESSION) PARTITION BY RANGE (%I)',
                 sch, parts, sch, old_name, id_column);
  EXECUTE format('ALTER TABLE %I.%I OWNER TO %I', sch, parts, table_owner);
  EXECUTE format('COMMENT ON TABLE %I.%I IS %L', sch, parts,
                 coalesce(obj_description(tbl, 'pg_class') || E'\n', '')
                 || format('id_gen: distributed by %s over the shards of id_gen.shard_routes (see id_gen.distribution).', id_column));
  INSERT INTO id_gen.distributed_tables (schema_name, table_name, partitioned_name, id_column, owner_column, sequence, shard_definition)
  VALUES (sch, tab, parts, id_column, owner_column, sequence, definition);
  PERFORM id_gen.sync_distributed_table(sch, tab);

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
  IF triggers IS NOT NULL THEN
    RAISE NOTICE 'id_gen: triggers % of % were not carried over', triggers, tbl
      USING HINT = 'Create them on the shards'' tables, where rows are written.';
  END IF;
  RAISE NOTICE 'id_gen: %.% is distributed over % shards; % existing rows moved to them',
    quote_ident(sch), quote_ident(tab), (SELECT count(DISTINCT shard) FROM id_gen.shard_routes), moved;
END $$;
COMMENT ON FUNCTION id_gen.distribute_table(regclass, name, name, text) IS 'Turns a plain table into a table partitioned by RANGE on its bigint id column, one partition per route range holding a postgres_fdw foreign table over that shard''s local partition of the range; creates the shards'' tables and moves existing rows. With owner_column and sequence, the table''s name becomes a view that computes missing ids from the owner. Superuser only.';
REVOKE EXECUTE ON FUNCTION id_gen.distribute_table(regclass, name, name, text) FROM PUBLIC;

-- Online moves of route ranges between shards (CALL id_gen.move_genes), on PostgreSQL's
-- logical replication. Built on the layout of sql/distribute.sql: a route range is one
-- partition on its shard and one range partition holding one foreign table on the
-- coordinator, so a move copies whole tables and re-points one foreign table per table.
--
-- Phases (id_gen.moves.phase), each committed before the next starts:
--   planned      the move is recorded; nothing exists anywhere yet.
--   copying      the target has the partitions (created from the coordinator's
--                definitions through id_gen.shard_tables); the source publishes them
--                (row filter on the id, the replica identity); the target subscribes
--                with copy_data and the initial copy runs. Ends when every table of the
--                subscription is ready (srsubstate = 'r').
--   catching_up  streaming; ends when the slot's lag is small.
--   (fence)      one coordinator transaction: ACCESS EXCLUSIVE on the coordinator's range
--                partitions of the moved genes (their writers wait; other ranges are
--                not locked), a trigger on the source partitions that refuses direct
--                writes, a marker row written on the source after that and awaited on
--                the target (everything before it is applied: apply is in commit order),
--                the target's local sequences raised above the source's, then the routes
--                and the foreign tables flipped to the target. COMMIT lifts the fence;
--                waiting writers re-route to the target.
--   cut_over     the source detaches its partitions (direct writes of those genes get
--                23514 there), drops the subscription (and with it the slot) and the
--                publication, and drops the detached partitions unless keep_source.
--   done / aborted / failed.
--
-- Invariants:
--   * Until the flip commits, the source is authoritative and the routes unchanged;
--     every step before it is undone by id_gen.abort_move.
--   * No replication slot outlives its move: the slot belongs to the subscription and is
--     dropped with it; a failed move drops it on the source even when the target is gone.
--   * Remote commands run over dblink (CREATE SUBSCRIPTION cannot run in a transaction
--     block) with the shard's foreign server and user mapping, sent asynchronously and
--     awaited with pg_sleep, so every wait can be cancelled and is bounded.

-- Shard side ------------------------------------------------------------------------------
CREATE TABLE id_gen.move_markers (
    move_id    bigint      NOT NULL,
    marker     bigint      NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (move_id, marker)
);
REVOKE ALL ON id_gen.move_markers FROM PUBLIC;
COMMENT ON TABLE id_gen.move_markers IS 'On a shard: rows written on the source of a move once writes are fenced and awaited on the target; when one arrives, everything committed before it has been applied.';

CREATE FUNCTION id_gen.refuse_moving_rows() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  RAISE EXCEPTION 'id_gen: the rows of % are moving to shard "%" (move %)', TG_TABLE_NAME, TG_ARGV[1], TG_ARGV[0]
    USING ERRCODE = '55006',
          HINT = 'Writes of these genes pause through the coordinator; an application that routes by itself retries after re-reading id_gen.shard_routes.';
END $$;
COMMENT ON FUNCTION id_gen.refuse_moving_rows() IS 'Trigger that fences the source partition of a move: direct writes fail with 55006 until the partition is detached.';

-- Coordinator side ------------------------------------------------------------------------
-- A plain sequence, marked for pg_dump, so that a restored coordinator numbers new moves
-- after the restored ones.
CREATE SEQUENCE id_gen.move_ids;
SELECT pg_catalog.pg_extension_config_dump('id_gen.move_ids', '');
COMMENT ON SEQUENCE id_gen.move_ids IS 'Numbers the moves in id_gen.shard_moves.';
-- pg_dump reads it (an unprivileged pg_dump too, as for the other catalog tables).
GRANT SELECT ON SEQUENCE id_gen.move_ids TO PUBLIC;
CREATE TABLE id_gen.shard_moves (
    move_id          bigint      PRIMARY KEY DEFAULT nextval('id_gen.move_ids'),
    lower_gene       integer     NOT NULL,
    upper_gene       integer     NOT NULL,
    source_shard     text        NOT NULL,
    target_shard     text        NOT NULL,
    phase            text        NOT NULL DEFAULT 'planned'
                     CHECK (phase IN ('planned', 'copying', 'catching_up', 'cut_over', 'done', 'aborted', 'failed')),
    keep_source      boolean     NOT NULL DEFAULT false,
    rows_copied      bigint,
    lag_bytes        bigint,
    fence_attempts   integer     NOT NULL DEFAULT 0,
    target_subscription oid,
    runner_pid       integer,
    source_fenced    boolean     NOT NULL DEFAULT false,
    fence_started_at timestamptz,
    fence_ended_at   timestamptz,
    started_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at      timestamptz,
    last_error       text,
    CHECK (lower_gene BETWEEN 0 AND upper_gene AND upper_gene <= 65535)
);
ALTER SEQUENCE id_gen.move_ids OWNED BY id_gen.shard_moves.move_id;
SELECT pg_catalog.pg_extension_config_dump('id_gen.shard_moves', '');
REVOKE ALL ON id_gen.shard_moves FROM PUBLIC;
GRANT SELECT ON id_gen.shard_moves TO PUBLIC;
COMMENT ON TABLE id_gen.shard_moves IS 'On a coordinator: every move of genes between shards (CALL id_gen.move_genes) with its phase and progress; read it through id_gen.moves.';

CREATE VIEW id_gen.moves AS
SELECT move_id, lower_gene, upper_gene, source_shard, target_shard, phase,
       rows_copied, lag_bytes,
       round(extract(epoch FROM fence_ended_at - fence_started_at) * 1000, 1) AS fence_ms,
       fence_attempts, source_fenced, started_at, finished_at,
       coalesce(finished_at, clock_timestamp()) - started_at AS elapsed,
       last_error
FROM id_gen.shard_moves;
COMMENT ON VIEW id_gen.moves IS 'Moves of genes between shards: phase, rows copied, replication lag, how long writes of the moved genes were fenced (fence_ms), times and the last error. Unfinished moves resume with the same CALL id_gen.move_genes(...) or roll back with CALL id_gen.abort_move(move_id).';
GRANT SELECT ON id_gen.moves TO PUBLIC;

CREATE FUNCTION id_gen.dblink_schema() RETURNS name
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  s name;
BEGIN
  SELECT n.nspname INTO s FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
  WHERE e.extname = 'dblink';
  IF s IS NULL THEN
    RAISE EXCEPTION 'id_gen: moving genes needs the dblink extension on the coordinator'
      USING ERRCODE = '55000',
            HINT = 'CREATE EXTENSION dblink; (contrib, shipped with PostgreSQL). It runs CREATE SUBSCRIPTION on the target, which cannot run inside a transaction.';
  END IF;
  RETURN s;
END $$;
COMMENT ON FUNCTION id_gen.dblink_schema() IS 'Schema of the dblink extension (55000 with a hint when it is not installed).';

-- Runs one command (a single statement: DO blocks group several) on a shard and returns
-- the first column of its first row (or the command tag). Asynchronous send, then
-- pg_sleep polls: cancellable, bounded.
CREATE FUNCTION id_gen.shard_exec(shard text, command text, timeout_ms integer DEFAULT 60000) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  dbl name := id_gen.dblink_schema();
  conn text := 'id_gen_' || md5(shard);
  connected boolean;
  busy integer;
  result text;
  deadline timestamptz := clock_timestamp() + timeout_ms * interval '1 ms';
BEGIN
  EXECUTE format('SELECT $1 = ANY (coalesce(%I.dblink_get_connections(), ''{}''))', dbl) INTO connected USING conn;
  IF NOT connected THEN
    EXECUTE format('SELECT %I.dblink_connect($1, $2)', dbl) USING conn, shard;
  END IF;
  BEGIN
    EXECUTE format('SELECT %I.dblink_send_query($1, $2)', dbl) INTO busy USING conn, command;
    IF busy IS DISTINCT FROM 1 THEN
      RAISE EXCEPTION 'id_gen: could not send a command to shard "%"', shard USING ERRCODE = '08006';
    END IF;
    LOOP
      EXECUTE format('SELECT %I.dblink_is_busy($1)', dbl) INTO busy USING conn;
      EXIT WHEN busy = 0;
      IF clock_timestamp() > deadline THEN
        -- (No command text here: a CREATE SUBSCRIPTION carries a password.)
        RAISE EXCEPTION 'id_gen: shard "%" did not finish a command within % ms', shard, timeout_ms
          USING ERRCODE = '57014';
      END IF;
      PERFORM pg_sleep(0.002);
    END LOOP;
    EXECUTE format('SELECT r FROM %I.dblink_get_result($1) AS t(r text) LIMIT 1', dbl) INTO result USING conn;
    -- One more call returns the empty result that frees the connection.
    EXECUTE format('SELECT count(*) FROM %I.dblink_get_result($1) AS t(r text)', dbl) USING conn;
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    -- A command still running, a half-read result, a broken link or a cancel: cancel and drop the
    -- connection, so that the next call starts clean.
    BEGIN
      EXECUTE format('SELECT %I.dblink_cancel_query($1)', dbl) USING conn;
    EXCEPTION WHEN OTHERS THEN NULL;
    END;
    BEGIN
      EXECUTE format('SELECT %I.dblink_disconnect($1)', dbl) USING conn;
    EXCEPTION WHEN OTHERS THEN NULL;
    END;
    RAISE;
  END;
  RETURN result;
END $$;
COMMENT ON FUNCTION id_gen.shard_exec(text, text, integer) IS 'Runs one command on a shard over dblink (its foreign server and user mapping), asynchronously and cancellably, bounded by timeout_ms; returns the first column of the first row or the command tag.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_exec(text, text, integer) FROM PUBLIC;

-- libpq connection string of a shard for CREATE SUBSCRIPTION on another shard: the
-- libpq options of its foreign server and of the current user's mapping.
CREATE FUNCTION id_gen.shard_conninfo(shard text, mask_password boolean DEFAULT true) RETURNS text
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  SELECT string_agg(format('%s=''%s''', o.key,
                           CASE WHEN o.key = 'password' AND mask_password THEN '********'
                                ELSE replace(replace(o.value, '\', '\\'), '''', '\''') END), ' ' ORDER BY o.key)
  FROM (SELECT split_part(opt, '=', 1) AS key, substr(opt, strpos(opt, '=') + 1) AS value
        FROM (SELECT unnest(s.srvoptions) AS opt FROM pg_foreign_server s WHERE s.srvname = shard_conninfo.shard
              UNION ALL
              SELECT unnest(um.umoptions) FROM pg_user_mappings um
              WHERE um.srvname = shard_conninfo.shard
                AND um.umuser = (SELECT coalesce((SELECT u.umuser FROM pg_user_mappings u
                                                  WHERE u.srvname = shard_conninfo.shard AND u.usename = current_user), 0))
             ) opts) o
  WHERE o.key IN ('host', 'hostaddr', 'port', 'dbname', 'user', 'password', 'sslmode', 'sslrootcert',
                  'sslcert', 'sslkey', 'connect_timeout', 'options', 'target_session_attrs', 'passfile');
END;
COMMENT ON FUNCTION id_gen.shard_conninfo(text, boolean) IS 'The libpq connection string of a shard (options of its foreign server and of the current user''s mapping), for a subscription on another shard; the password is masked unless mask_password => false.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_conninfo(text, boolean) FROM PUBLIC;

-- The commands of a move, by step name, in order: what move_genes runs and what
-- dry_run prints. server is 'source', 'target' or 'coordinator'.
CREATE FUNCTION id_gen.move_commands(move_id bigint, lower_gene integer, upper_gene integer,
                                     source_shard text, target_shard text, mask_password boolean DEFAULT true,
                                     subscription_oid oid DEFAULT NULL)
RETURNS TABLE (step integer, phase text, server text, name text, command text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  tag text := 'id_gen_move_' || coalesce(move_id::text, 'N');
  pub_tables text;
  fence text;
  unfence text;
  detach text;
  drop_source text;
  count_target text;
  truncate_target text;
  ranges text;
  n integer := 0;
BEGIN
  SELECT string_agg(format('%I.%I WHERE (%I BETWEEN %s AND %s)', d.schema_name,
                           id_gen.partition_name(d.table_name, r.lower_gene, r.upper_gene),
                           d.id_column, id_gen.gene_first_id(r.lower_gene),
                           id_gen.gene_last_id(r.upper_gene)), ', '
                    ORDER BY d.schema_name, d.table_name, r.lower_gene),
         string_agg(format('CREATE OR REPLACE TRIGGER id_gen_move_fence BEFORE INSERT OR UPDATE OR DELETE ON %1$I.%2$I '
                           'FOR EACH ROW EXECUTE FUNCTION id_gen.refuse_moving_rows(%3$L, %4$L); '
                           'ALTER TABLE %1$I.%2$I ENABLE TRIGGER id_gen_move_fence;',
                           d.schema_name, id_gen.partition_name(d.table_name, r.lower_gene, r.upper_gene),
                           coalesce(move_id::text, 'N'), target_shard), ' '
                    ORDER BY d.schema_name, d.table_name, r.lower_gene),
         -- DISABLE takes SHARE ROW EXCLUSIVE: long readers of the partition do not block it
         -- (DROP TRIGGER would need ACCESS EXCLUSIVE).
         string_agg(format('IF EXISTS (SELECT FROM pg_trigger WHERE tgname = ''id_gen_move_fence'' AND tgrelid = to_regclass(%L)) '
                           'THEN ALTER TABLE %I.%I DISABLE TRIGGER id_gen_move_fence; END IF;',
                           format('%I.%I', d.schema_name, id_gen.partition_name(d.table_name, r.lower_gene, r.upper_gene)),
                           d.schema_name, id_gen.partition_name(d.table_name, r.lower_gene, r.upper_gene)), ' '
                    ORDER BY d.schema_name, d.table_name, r.lower_gene),
         -- Idempotent (a resumed move may have detached some already).
         string_agg(format('IF EXISTS (SELECT FROM pg_inherits WHERE inhrelid = to_regclass(%L)) THEN '
                           'ALTER TABLE %I.%I DETACH PARTITION %I.%I; ALTER TABLE %I.%I RENAME TO %I; END IF;',
                           format('%I.%I', d.schema_name, id_gen.partition_name(d.table_name, r.lower_gene, r.upper_gene)),
                           d.schema_name, d.table_name, d.schema_name,
                           id_gen.partition_name(d.table_name, r.lower_gene, r.upper_gene),
                           d.schema_name, id_gen.partition_name(d.table_name, r.lower_gene, r.upper_gene),
                           'id_gen_moved_' || coalesce(move_id::text, 'N') || '_' || left(md5(id_gen.partition_name(d.table_name, r.lower_gene, r.upper_gene)), 8)), ' '
                    ORDER BY d.schema_name, d.table_name, r.lower_gene),
         string_agg(quote_literal(format('%I.%I', d.schema_name,
                           id_gen.partition_name(d.table_name, r.lower_gene, r.upper_gene))) || '::regclass', ', '
                    ORDER BY d.schema_name, d.table_name, r.lower_gene),
         string_agg(format('IF to_regclass(%L) IS NOT NULL THEN TRUNCATE %I.%I; END IF;',
                           format('%I.%I', d.schema_name, id_gen.partition_name(d.table_name, r.lower_gene, r.upper_gene)),
                           d.schema_name, id_gen.partition_name(d.table_name, r.lower_gene, r.upper_gene)), ' '
                    ORDER BY d.schema_name, d.table_name, r.lower_gene),
         string_agg(format('DROP TABLE IF EXISTS %I.%I;', d.schema_name,
                           'id_gen_moved_' || coalesce(move_id::text, 'N') || '_' || left(md5(id_gen.partition_name(d.table_name, r.lower_gene, r.upper_gene)), 8)), ' '
                    ORDER BY d.schema_name, d.table_name, r.lower_gene),
         string_agg(DISTINCT format('%s..%s', r.lower_gene, r.upper_gene), ', ')
    INTO pub_tables, fence, unfence, detach, count_target, truncate_target, drop_source, ranges
  FROM id_gen.distributed_tables d
  CROSS JOIN id_gen.route_ranges r
  WHERE r.lower_gene >= move_commands.lower_gene AND r.upper_gene <= move_commands.upper_gene;

  RETURN QUERY VALUES
    (1, 'copying', 'coordinator', 'prepare_target',
     format('-- through postgres_fdw: %s learns that it owns route ranges %s too (id_gen.shard_tables); it creates the tables and empty partitions from the coordinator''s definitions', target_shard, ranges)),
    (2, 'copying', 'source', 'create_publication',
     format('CREATE PUBLICATION %I FOR TABLE %s, id_gen.move_markers WHERE (move_id = %s)', tag, pub_tables, coalesce(move_id::text, 'N'))),
    (3, 'copying', 'target', 'create_subscription',
     format('CREATE SUBSCRIPTION %I CONNECTION %L PUBLICATION %I WITH (copy_data = true, slot_name = %L)',
            tag, id_gen.shard_conninfo(source_shard, mask_password), tag, tag)),
    (4, 'copying', 'target', 'sync_state',
     format('SELECT count(*) FILTER (WHERE sr.srsubstate <> ''r'') || ''/'' || count(*) FROM pg_subscription_rel sr JOIN pg_subscription s ON s.oid = sr.srsubid WHERE s.subname = %L', tag)),
    (5, 'catching_up', 'source', 'lag',
     format('SELECT coalesce((pg_current_wal_lsn() - confirmed_flush_lsn)::bigint, -1) FROM pg_replication_slots WHERE slot_name = %L', tag)),
    (6, 'catching_up', 'coordinator', 'fence_coordinator',
     '-- LOCK TABLE <range partitions of the moved genes> IN ACCESS EXCLUSIVE MODE  (writers of these genes wait; others do not)'),
    (7, 'catching_up', 'source', 'fence_source',
     'DO $d$ BEGIN PERFORM set_config(''lock_timeout'', ''2s'', true); ' || fence || ' END $d$'),
    (8, 'catching_up', 'source', 'marker',
     format('INSERT INTO id_gen.move_markers (move_id, marker) VALUES (%s, <attempt>)', coalesce(move_id::text, 'N'))),
    (9, 'catching_up', 'target', 'await_marker',
     format('SELECT count(*) FROM id_gen.move_markers WHERE move_id = %s AND marker = <attempt>', coalesce(move_id::text, 'N'))),
    (10, 'catching_up', 'coordinator', 'flip',
     format('-- UPDATE id_gen.shard_routes SET shard = %L for %s; swap each range partition''s foreign table to %s; COMMIT (lifts the fence)', target_shard, ranges, target_shard)),
    (11, 'cut_over', 'source', 'detach_source',
     'DO $d$ BEGIN PERFORM set_config(''lock_timeout'', ''5s'', true); ' || detach || ' END $d$'),
    (12, 'cut_over', 'coordinator', 'forget_source',
     format('-- through postgres_fdw: %s no longer owns route ranges %s (id_gen.shard_tables)', source_shard, ranges)),
    (13, 'cut_over', 'target', 'drop_subscription', format('DROP SUBSCRIPTION IF EXISTS %I', tag)),
    (14, 'cut_over', 'source', 'drop_publication', format('DROP PUBLICATION IF EXISTS %I', tag)),
    (15, 'cut_over', 'source', 'drop_source',
     'DO $d$ BEGIN ' || drop_source || format(' DELETE FROM id_gen.move_markers WHERE move_id = %s; END $d$', coalesce(move_id::text, 'N'))),
    (16, 'cut_over', 'target', 'forget_markers', format('DELETE FROM id_gen.move_markers WHERE move_id = %s', coalesce(move_id::text, 'N'))),
    (17, 'abort', 'source', 'unfence_source',
     'DO $d$ BEGIN PERFORM set_config(''lock_timeout'', ''5s'', true); ' || unfence || ' END $d$'),
    (18, 'abort', 'source', 'drop_slot',
     format('SELECT count(CASE WHEN active THEN pg_terminate_backend(active_pid) ELSE pg_drop_replication_slot(slot_name) IS NULL END) '
            'FROM pg_replication_slots WHERE slot_name = %L OR slot_name LIKE %L',
            tag, 'pg\_' || coalesce(subscription_oid::text, 'none') || '\_sync\_%')),
    (19, 'abort', 'target', 'detach_subscription',
     format('DO $d$ BEGIN IF EXISTS (SELECT FROM pg_subscription WHERE subname = %L) THEN ALTER SUBSCRIPTION %I DISABLE; ALTER SUBSCRIPTION %I SET (slot_name = NONE); END IF; END $d$', tag, tag, tag)),
    -- Progress without counting: rows the table sync committed, plus those of a COPY running now.
    (20, 'copying', 'target', 'count_target',
     format('SELECT (SELECT coalesce(sum(n_tup_ins), 0) FROM pg_stat_user_tables WHERE relid IN (%s)) '
            '+ (SELECT coalesce(sum(tuples_processed), 0) FROM pg_stat_progress_copy WHERE relid IN (%s))', count_target, count_target)),
    (21, 'abort', 'target', 'empty_target', 'DO $d$ BEGIN ' || truncate_target || ' END $d$');
END $$;
COMMENT ON FUNCTION id_gen.move_commands(bigint, integer, integer, text, text, boolean, oid) IS 'The steps of a move with the command each server runs (what move_genes executes and dry_run prints).';
REVOKE EXECUTE ON FUNCTION id_gen.move_commands(bigint, integer, integer, text, text, boolean, oid) FROM PUBLIC;

-- Runs one step of a move on the shard it belongs to (<attempt> filled in).
CREATE FUNCTION id_gen.run_move_step(m id_gen.shard_moves, step_name text, attempt integer DEFAULT 0,
                                     timeout_ms integer DEFAULT 60000) RETURNS text
LANGUAGE sql STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  SELECT id_gen.shard_exec(CASE c.server WHEN 'source' THEN m.source_shard WHEN 'target' THEN m.target_shard END,
                           replace(c.command, '<attempt>', attempt::text), timeout_ms)
  FROM id_gen.move_commands(m.move_id, m.lower_gene, m.upper_gene, m.source_shard, m.target_shard, false, m.target_subscription) c
  WHERE c.name = step_name;
END;
COMMENT ON FUNCTION id_gen.run_move_step(id_gen.shard_moves, text, integer, integer) IS 'Runs one step of a move (see move_commands) on its shard.';
REVOKE EXECUTE ON FUNCTION id_gen.run_move_step(id_gen.shard_moves, text, integer, integer) FROM PUBLIC;

-- Tells a shard its new route ranges for every distributed table (through postgres_fdw,
-- in the caller's transaction) and records them.
CREATE FUNCTION id_gen.place_ranges(shard text, add_lower integer, add_upper integer, adding boolean) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  d record;
  wanted int4range[];
BEGIN
  FOR d IN SELECT * FROM id_gen.distributed_tables ORDER BY schema_name, table_name LOOP
    SELECT coalesce(array_agg(g ORDER BY g), '{}') INTO wanted
    FROM (SELECT DISTINCT g
          FROM (SELECT unnest(p.gene_ranges) AS g FROM id_gen.shard_placements p
                WHERE (p.schema_name, p.table_name, p.shard) = (d.schema_name, d.table_name, place_ranges.shard)
                UNION ALL
                SELECT int4range(r.lower_gene, r.upper_gene, '[]') FROM id_gen.route_ranges r
                WHERE adding AND r.lower_gene >= add_lower AND r.upper_gene <= add_upper) x
          WHERE adding OR NOT (g <@ int4range(add_lower, add_upper, '[]'))) y;
    PERFORM id_gen.push_shard_table(shard, d.schema_name, d.table_name, d.id_column, wanted, d.shard_definition);
  END LOOP;
END $$;
COMMENT ON FUNCTION id_gen.place_ranges(text, integer, integer, boolean) IS 'Adds (adding) or removes the route ranges within add_lower .. add_upper to or from a shard''s placement of every distributed table, on the shard and in id_gen.shard_placements.';
REVOKE EXECUTE ON FUNCTION id_gen.place_ranges(text, integer, integer, boolean) FROM PUBLIC;

-- Cleans up what a move that has not cut over left on its shards. Every step is tried;
-- returns the errors (NULL when everything is clean).
CREATE FUNCTION id_gen.undo_move(m id_gen.shard_moves) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  errors text;
  msg text;
  step text;
  i integer;
  left_slots text;
BEGIN
  FOREACH step IN ARRAY ARRAY['unfence_source', 'detach_subscription', 'drop_subscription', 'drop_publication'] LOOP
    BEGIN
      PERFORM id_gen.run_move_step(m, step, 0, 10000);
      IF step = 'unfence_source' THEN
        UPDATE id_gen.shard_moves sm SET source_fenced = false WHERE sm.move_id = m.move_id;
      END IF;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
      GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT;
      errors := concat_ws('; ', errors, step || ': ' || msg);
    END;
  END LOOP;
  -- The slot: its walsender may take a moment to exit after its subscriber went away.
  FOR i IN 1 .. 50 LOOP
    BEGIN
      PERFORM id_gen.run_move_step(m, 'drop_slot', 0, 10000);
      left_slots := id_gen.shard_exec(m.source_shard,
        format('SELECT count(*) FROM pg_replication_slots WHERE slot_name = %L OR slot_name LIKE %L',
               'id_gen_move_' || m.move_id, 'pg\_' || coalesce(m.target_subscription::text, 'none') || '\_sync\_%'), 10000);
    EXCEPTION WHEN OTHERS OR query_canceled THEN
      GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT;
      left_slots := 'unknown: ' || msg;
    END;
    EXIT WHEN left_slots = '0';
    PERFORM pg_sleep(0.2);
  END LOOP;
  IF left_slots <> '0' THEN
    errors := concat_ws('; ', errors, format('replication slot %s on %s: %s', 'id_gen_move_' || m.move_id, m.source_shard, left_slots));
  END IF;
  BEGIN
    PERFORM id_gen.run_move_step(m, 'empty_target', 0, 60000);
    PERFORM id_gen.place_ranges(m.target_shard, m.lower_gene, m.upper_gene, false);
    PERFORM id_gen.run_move_step(m, 'forget_markers', 0, 10000);
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT;
    errors := concat_ws('; ', errors, 'target partitions: ' || msg);
  END;
  BEGIN
    PERFORM id_gen.shard_exec(m.source_shard, format('DELETE FROM id_gen.move_markers WHERE move_id = %s', m.move_id), 10000);
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT;
    errors := concat_ws('; ', errors, 'source markers: ' || msg);
  END;
  RETURN errors;
END $$;
COMMENT ON FUNCTION id_gen.undo_move(id_gen.shard_moves) IS 'Removes what an unfinished move left on its shards (fence triggers, subscription, slot, publication, the target''s copies); returns the errors, NULL when clean.';
REVOKE EXECUTE ON FUNCTION id_gen.undo_move(id_gen.shard_moves) FROM PUBLIC;

CREATE PROCEDURE id_gen.move_genes(lower_gene integer, upper_gene integer, target_shard text,
                                   dry_run boolean DEFAULT false, keep_source boolean DEFAULT false)
LANGUAGE plpgsql
AS $$
DECLARE
  m id_gen.shard_moves;
  src text;
  n_ranges integer;
  n_shards integer;
  first_gene integer;
  last_gene integer;
  r record;
  d record;
  res text;
  err text;
  err_state text;
  attempt integer;
  t0 timestamptz;
  deadline timestamptz;
  lag bigint;
  cleanup text;
  progress_at timestamptz;
  unfenced boolean;
  i integer;
  last_state text;
  copied bigint;
  last_copied bigint;
BEGIN
  PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
  IF lower_gene IS NULL OR upper_gene IS NULL OR target_shard IS NULL OR dry_run IS NULL OR keep_source IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "%" must not be NULL',
      CASE WHEN lower_gene IS NULL THEN 'lower_gene' WHEN upper_gene IS NULL THEN 'upper_gene'
           WHEN target_shard IS NULL THEN 'target_shard' WHEN dry_run IS NULL THEN 'dry_run' ELSE 'keep_source' END
      USING ERRCODE = '22004';
  END IF;
  PERFORM id_gen.require_superuser('move genes between shards');
  -- Advisory lock keys: 757430 (transaction) decides which move runs; 757431 with the move
  -- id (session) is held by the session that runs that move.
  -- One session at a time decides which move runs, and no route change or new distributed
  -- table slips in before a new move is recorded (set_route and distribute_table take this
  -- lock too, then refuse while a move is unfinished). Both are released at the first COMMIT.
  PERFORM pg_advisory_xact_lock(757430);
  LOCK TABLE id_gen.shard_routes IN SHARE ROW EXCLUSIVE MODE;

  -- One move at a time: an unfinished move of these genes is resumed (whatever the routes
  -- say now); any other unfinished move is in the way.
  SELECT * INTO m FROM id_gen.shard_moves sm
  WHERE sm.phase NOT IN ('done', 'aborted')
  ORDER BY sm.move_id DESC LIMIT 1;
  IF FOUND THEN
    IF (m.lower_gene, m.upper_gene, m.target_shard) IS DISTINCT FROM (move_genes.lower_gene, move_genes.upper_gene, move_genes.target_shard) THEN
      RAISE EXCEPTION 'id_gen: move % of genes % .. % to shard "%" is unfinished (%)', m.move_id, m.lower_gene, m.upper_gene, m.target_shard, m.phase
        USING ERRCODE = '55006',
              HINT = format('Finish it with CALL id_gen.move_genes(%s, %s, %L), or roll it back with CALL id_gen.abort_move(%s).',
                            m.lower_gene, m.upper_gene, m.target_shard, m.move_id);
    ELSIF m.phase = 'failed' THEN
      RAISE EXCEPTION 'id_gen: move % failed: %', m.move_id, m.last_error
        USING ERRCODE = '55000',
              HINT = format('CALL id_gen.abort_move(%s) rolls it back (the source still holds every row); then move again.', m.move_id);
    END IF;
    src := m.source_shard;
    IF NOT dry_run THEN
      -- The session that runs a move holds a session lock on it (re-entrant for itself).
      IF NOT EXISTS (SELECT FROM pg_locks l WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid()
                     AND l.classid = 757431 AND l.objid = m.move_id AND l.objsubid = 2)
         AND NOT pg_try_advisory_lock(757431, m.move_id::integer) THEN
        RAISE EXCEPTION 'id_gen: move % is running in session %', m.move_id, m.runner_pid
          USING ERRCODE = '55006',
                HINT = 'Watch it in id_gen.moves. A session whose CALL was interrupted keeps the move until it disconnects or calls again.';
      END IF;
      UPDATE id_gen.shard_moves sm SET runner_pid = pg_backend_pid(), updated_at = clock_timestamp()
      WHERE sm.move_id = m.move_id RETURNING * INTO m;
      COMMIT;
      PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    END IF;
  ELSE
    SELECT count(*), count(DISTINCT rr.shard), min(rr.lower_gene), max(rr.upper_gene), min(rr.shard)
      INTO n_ranges, n_shards, first_gene, last_gene, src
    FROM id_gen.route_ranges rr
    WHERE rr.lower_gene >= move_genes.lower_gene AND rr.upper_gene <= move_genes.upper_gene;
    IF n_ranges = 0 OR first_gene <> move_genes.lower_gene OR last_gene <> move_genes.upper_gene THEN
      RAISE EXCEPTION 'id_gen: genes % .. % are not whole route ranges', lower_gene, upper_gene
        USING ERRCODE = '22023',
              DETAIL = (SELECT 'Route ranges there: ' || string_agg(format('%s..%s on %s', rr.lower_gene, rr.upper_gene, rr.shard), ', ' ORDER BY rr.lower_gene)
                        FROM id_gen.route_ranges rr
                        WHERE rr.upper_gene >= move_genes.lower_gene AND rr.lower_gene <= move_genes.upper_gene),
              HINT = 'A move takes whole route ranges (one partition each). Split a range first with id_gen.set_route(bound, its shard): that re-partitions the shard''s table, which copies its rows.';
    ELSIF n_shards > 1 THEN
      RAISE EXCEPTION 'id_gen: genes % .. % are on % shards; a move has one source', lower_gene, upper_gene, n_shards
        USING ERRCODE = '22023', HINT = 'Move each shard''s ranges with its own move_genes call.';
    ELSIF NOT EXISTS (SELECT FROM id_gen.distributed_tables) THEN
      RAISE EXCEPTION 'id_gen: there are no distributed tables, so there is nothing to move'
        USING ERRCODE = '55000', HINT = 'Change the routes with id_gen.set_route.';
    ELSIF src = target_shard THEN
      RAISE EXCEPTION 'id_gen: genes % .. % are on shard "%" already', lower_gene, upper_gene, target_shard
        USING ERRCODE = '22023';
    ELSIF NOT EXISTS (SELECT FROM pg_foreign_server s JOIN pg_foreign_data_wrapper w ON w.oid = s.srvfdw
                      WHERE s.srvname = target_shard AND w.fdwname = 'postgres_fdw') THEN
      RAISE EXCEPTION 'id_gen: target shard "%" is not a postgres_fdw foreign server', target_shard
        USING ERRCODE = '42704',
              HINT = format('CREATE SERVER %I FOREIGN DATA WRAPPER postgres_fdw OPTIONS (...); CREATE USER MAPPING FOR CURRENT_USER SERVER %I;', target_shard, target_shard);
    END IF;
  END IF;

  IF dry_run THEN
    FOR r IN SELECT * FROM id_gen.move_commands(m.move_id, move_genes.lower_gene, move_genes.upper_gene, src, move_genes.target_shard)
             WHERE phase <> 'abort' AND name <> 'count_target' ORDER BY step LOOP
      RAISE NOTICE 'step % (%), on %: %', r.step, r.phase,
        CASE r.server WHEN 'source' THEN format('%s (source)', src)
                      WHEN 'target' THEN format('%s (target)', move_genes.target_shard) ELSE 'the coordinator' END,
        r.command;
    END LOOP;
    RETURN;
  END IF;

  IF m.move_id IS NULL THEN
    PERFORM id_gen.dblink_schema();
    res := id_gen.shard_exec(src, 'SELECT current_setting(''wal_level'')', 10000);
    IF res <> 'logical' THEN
      RAISE EXCEPTION 'id_gen: source shard "%" runs with wal_level = %, and logical replication needs logical', src, res
        USING ERRCODE = '55000',
              HINT = format('On %s: ALTER SYSTEM SET wal_level = logical; then restart it. Nothing was changed.', src);
    END IF;
    PERFORM id_gen.shard_exec(move_genes.target_shard, 'SELECT 1', 10000);
    INSERT INTO id_gen.shard_moves (lower_gene, upper_gene, source_shard, target_shard, keep_source, runner_pid)
    VALUES (move_genes.lower_gene, move_genes.upper_gene, src, move_genes.target_shard, move_genes.keep_source, pg_backend_pid())
    RETURNING * INTO m;
    PERFORM pg_advisory_lock(757431, m.move_id::integer);
    RAISE NOTICE 'id_gen: move % of genes % .. % from % to % (watch it in id_gen.moves)', m.move_id, m.lower_gene, m.upper_gene, src, m.target_shard;
    COMMIT;
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
  END IF;

  -- copying -------------------------------------------------------------------------------
  IF m.phase = 'planned' THEN
    -- The target's partitions must be committed there before the subscription looks
    -- for them, so this is a transaction of its own (idempotent when resumed).
    BEGIN
      PERFORM id_gen.place_ranges(m.target_shard, m.lower_gene, m.upper_gene, true);
    EXCEPTION WHEN OTHERS THEN
      GET STACKED DIAGNOSTICS err = MESSAGE_TEXT, err_state = RETURNED_SQLSTATE;
    END;
    IF err IS NULL THEN
      COMMIT;
      PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
      BEGIN
        IF id_gen.shard_exec(src, format('SELECT count(*) FROM pg_publication WHERE pubname = %L', 'id_gen_move_' || m.move_id)) = '0' THEN
          PERFORM id_gen.run_move_step(m, 'create_publication');
        END IF;
        IF id_gen.shard_exec(m.target_shard, format('SELECT count(*) FROM pg_subscription WHERE subname = %L', 'id_gen_move_' || m.move_id)) = '0' THEN
          PERFORM id_gen.run_move_step(m, 'create_subscription');
        END IF;
        UPDATE id_gen.shard_moves
        SET phase = 'copying', updated_at = clock_timestamp(),
            target_subscription = id_gen.shard_exec(m.target_shard,
              format('SELECT oid FROM pg_subscription WHERE subname = %L', 'id_gen_move_' || m.move_id))::oid
        WHERE move_id = m.move_id AND phase = 'planned'
        RETURNING * INTO m;
        IF NOT FOUND THEN
          RAISE EXCEPTION 'the move is no longer planned (aborted in another session?)' USING ERRCODE = '55006';
        END IF;
      EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS err = MESSAGE_TEXT, err_state = RETURNED_SQLSTATE;
      END;
      IF err IS NULL THEN
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
      END IF;
    END IF;
  END IF;
  IF err IS NULL AND m.phase = 'copying' THEN
    progress_at := clock_timestamp();
    LOOP
      IF clock_timestamp() - progress_at > interval '2 min' THEN
        RAISE EXCEPTION 'id_gen: move %: the initial copy made no progress for 2 minutes (tables ready/total: %)', m.move_id, res
          USING ERRCODE = '55000',
                DETAIL = 'The move stays in phase copying; the source is still authoritative.',
                HINT = format('Check both shards'' logs (the subscription id_gen_move_%s on %s), then CALL id_gen.move_genes(%s, %s, %L) to resume or CALL id_gen.abort_move(%s).',
                              m.move_id, m.target_shard, m.lower_gene, m.upper_gene, m.target_shard, m.move_id);
      END IF;
      BEGIN
        IF (SELECT sm.phase FROM id_gen.shard_moves sm WHERE sm.move_id = m.move_id) <> 'copying' THEN
          RAISE EXCEPTION 'the move was aborted or taken over by another session' USING ERRCODE = '55006';
        END IF;
        res := id_gen.run_move_step(m, 'sync_state', 0, 10000);
        copied := id_gen.run_move_step(m, 'count_target', 0, 60000)::bigint;
        IF res IS DISTINCT FROM last_state OR copied IS DISTINCT FROM last_copied THEN
          progress_at := clock_timestamp();
          last_state := res;
          last_copied := copied;
        END IF;
        UPDATE id_gen.shard_moves SET rows_copied = copied, updated_at = clock_timestamp()
        WHERE move_id = m.move_id AND phase = 'copying';
        IF NOT FOUND THEN
          RAISE EXCEPTION 'the move is no longer copying (aborted in another session?)' USING ERRCODE = '55006';
        END IF;
      EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS err = MESSAGE_TEXT, err_state = RETURNED_SQLSTATE;
      END;
      EXIT WHEN err IS NOT NULL OR (split_part(res, '/', 1) = '0' AND split_part(res, '/', 2) <> '0');
      COMMIT;
      PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
      PERFORM pg_sleep(0.5);
    END LOOP;
    IF err IS NULL THEN
      UPDATE id_gen.shard_moves SET phase = 'catching_up', updated_at = clock_timestamp()
      WHERE move_id = m.move_id AND phase = 'copying'
      RETURNING * INTO m;
      IF NOT FOUND THEN
        RAISE EXCEPTION 'id_gen: move % is no longer copying (aborted in another session?)', m.move_id USING ERRCODE = '55006';
      END IF;
      COMMIT;
      PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    END IF;
  END IF;
  IF err IS NOT NULL THEN
    ROLLBACK;
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    SELECT * INTO m FROM id_gen.shard_moves sm WHERE sm.move_id = m.move_id;
    IF m.phase IN ('aborted', 'failed', 'done') THEN
      RAISE EXCEPTION 'id_gen: move % stopped: it is % now', m.move_id, m.phase USING ERRCODE = '55006';
    END IF;
    cleanup := id_gen.undo_move(m);
    UPDATE id_gen.shard_moves
    SET phase = CASE WHEN cleanup IS NULL THEN 'aborted' ELSE 'failed' END,
        last_error = err || coalesce(' (clean-up: ' || cleanup || ')', ''),
        finished_at = CASE WHEN cleanup IS NULL THEN clock_timestamp() END, updated_at = clock_timestamp()
    WHERE move_id = m.move_id;
    COMMIT;
    PERFORM pg_advisory_unlock(757431, m.move_id::integer);
    RAISE EXCEPTION 'id_gen: move % of genes % .. % to "%" failed while copying: %', m.move_id, m.lower_gene, m.upper_gene, m.target_shard, err
      USING ERRCODE = coalesce(err_state, '55000'),
            DETAIL = CASE WHEN cleanup IS NULL THEN 'The move was rolled back: routes, the source and its rows are unchanged, and no replication slot is left.'
                          ELSE 'Routes, the source and its rows are unchanged. Not yet cleaned up: ' || cleanup END,
            HINT = CASE WHEN cleanup IS NULL THEN 'Fix the cause and move again.'
                        ELSE format('When the shards answer again, CALL id_gen.abort_move(%s) finishes the clean-up.', m.move_id) END;
  END IF;

  -- catching up, fence, flip -----------------------------------------------------------------
  IF m.phase = 'catching_up' THEN
    deadline := clock_timestamp() + interval '10 min';
    LOOP
      lag := id_gen.run_move_step(m, 'lag', 0, 10000)::bigint;
      IF lag IS NULL THEN
        RAISE EXCEPTION 'id_gen: move %: its replication slot on "%" is gone', m.move_id, m.source_shard
          USING ERRCODE = '55000', HINT = format('CALL id_gen.abort_move(%s) and move again.', m.move_id);
      END IF;
      UPDATE id_gen.shard_moves SET lag_bytes = lag, updated_at = clock_timestamp()
      WHERE move_id = m.move_id AND phase = 'catching_up';
      IF NOT FOUND THEN
        RAISE EXCEPTION 'id_gen: move % is no longer catching up (aborted in another session?)', m.move_id USING ERRCODE = '55006';
      END IF;
      COMMIT;
      PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
      EXIT WHEN lag BETWEEN 0 AND 1048576;
      IF clock_timestamp() > deadline THEN
        RAISE EXCEPTION 'id_gen: move %: the target stays % bytes behind after 10 minutes', m.move_id, lag
          USING ERRCODE = '55000', HINT = 'The move stays in catching_up; call move_genes again later, or abort_move.';
      END IF;
      PERFORM pg_sleep(0.1);
    END LOOP;
    FOR attempt IN m.fence_attempts + 1 .. m.fence_attempts + 5 LOOP
      -- source_fenced: the source's fence may be up from here until it is lifted or cut over.
      UPDATE id_gen.shard_moves SET fence_attempts = attempt, source_fenced = true WHERE move_id = m.move_id;
      COMMIT;
      PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
      err := NULL;
      BEGIN
        t0 := clock_timestamp();
        PERFORM pg_catalog.set_config('lock_timeout', '500ms', true);
        -- abort_move holds this row while it undoes the move: never flip after an abort.
        PERFORM FROM id_gen.shard_moves sm WHERE sm.move_id = m.move_id AND sm.phase = 'catching_up' FOR UPDATE;
        IF NOT FOUND THEN
          RAISE EXCEPTION 'the move is no longer catching up (aborted in another session?)' USING ERRCODE = '55006';
        END IF;
        FOR d IN SELECT t.schema_name, t.partitioned_name, rr.lower_gene, rr.upper_gene
                 FROM id_gen.distributed_tables t CROSS JOIN id_gen.route_ranges rr
                 WHERE rr.lower_gene >= m.lower_gene AND rr.upper_gene <= m.upper_gene
                 ORDER BY 1, 2, 3 LOOP
          EXECUTE format('LOCK TABLE %I.%I IN ACCESS EXCLUSIVE MODE', d.schema_name,
                         id_gen.partition_name(d.partitioned_name, d.lower_gene, d.upper_gene));
        END LOOP;
        PERFORM id_gen.run_move_step(m, 'fence_source', attempt, 5000);
        PERFORM id_gen.run_move_step(m, 'marker', attempt, 5000);
        LOOP
          EXIT WHEN id_gen.run_move_step(m, 'await_marker', attempt, 5000) = '1';
          IF clock_timestamp() - t0 > interval '3 s' THEN
            RAISE EXCEPTION 'the target did not catch up within 3 s of the fence' USING ERRCODE = '55000';
          END IF;
          PERFORM pg_sleep(0.002);
        END LOOP;
        PERFORM id_gen.move_raise_sequences(m);
        LOCK TABLE id_gen.shard_routes IN SHARE ROW EXCLUSIVE MODE;
        UPDATE id_gen.shard_routes sr SET shard = m.target_shard, updated_at = now()
        WHERE sr.upper_gene IN (SELECT rr.upper_gene FROM id_gen.route_ranges rr
                                WHERE rr.lower_gene >= m.lower_gene AND rr.upper_gene <= m.upper_gene);
        FOR d IN SELECT t.schema_name, t.table_name, t.partitioned_name, rr.lower_gene, rr.upper_gene,
                        pg_get_userbyid(c.relowner) AS owner_name
                 FROM id_gen.distributed_tables t CROSS JOIN id_gen.route_ranges rr
                 JOIN pg_class c ON c.oid = to_regclass(format('%I.%I', t.schema_name, t.partitioned_name))
                 WHERE rr.lower_gene >= m.lower_gene AND rr.upper_gene <= m.upper_gene LOOP
          PERFORM id_gen.point_partition(d.schema_name, id_gen.partition_name(d.partitioned_name, d.lower_gene, d.upper_gene),
                                         d.table_name, d.lower_gene, d.upper_gene, m.target_shard, d.owner_name);
        END LOOP;
        UPDATE id_gen.shard_moves
        SET phase = 'cut_over', lag_bytes = 0, fence_started_at = t0, fence_ended_at = clock_timestamp(),
            updated_at = clock_timestamp(), last_error = NULL
        WHERE move_id = m.move_id AND phase = 'catching_up' RETURNING * INTO m;
      EXCEPTION WHEN OTHERS OR query_canceled THEN
        GET STACKED DIAGNOSTICS err = MESSAGE_TEXT, err_state = RETURNED_SQLSTATE;
      END;
      IF err IS NULL THEN
        COMMIT;  -- lifts the fence: waiting writers continue on the target
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        EXIT;
      END IF;
      ROLLBACK;  -- routes and foreign tables as they were; the coordinator's locks go
      PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
      unfenced := false;
      FOR i IN 1 .. 3 LOOP
        BEGIN
          PERFORM id_gen.run_move_step(m, 'unfence_source', 0, 10000);
          unfenced := true;
        EXCEPTION WHEN OTHERS OR query_canceled THEN
          GET STACKED DIAGNOSTICS res = MESSAGE_TEXT;
        END;
        EXIT WHEN unfenced;
      END LOOP;
      IF NOT unfenced THEN
        err := err || ' (lifting the fence on the source failed too: ' || res || ')';
      END IF;
      UPDATE id_gen.shard_moves
      SET last_error = format('fence attempt %s: %s', attempt, err), updated_at = clock_timestamp(),
          source_fenced = NOT unfenced
      WHERE move_id = m.move_id;
      COMMIT;
      PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
      IF NOT unfenced OR err_state IN ('57014', '55006') THEN
        -- Cancelled, aborted elsewhere, or the source keeps refusing to lift: no retry.
        PERFORM pg_advisory_unlock(757431, m.move_id::integer);
        RAISE EXCEPTION 'id_gen: move %: %', m.move_id, err
          USING ERRCODE = coalesce(err_state, '55000'),
                DETAIL = CASE WHEN unfenced THEN 'The fence was lifted; routes are unchanged.'
                              ELSE 'Routes are unchanged, but the source still refuses direct writes of these genes (id_gen.moves.source_fenced).' END,
                HINT = format('CALL id_gen.move_genes(%s, %s, %L) tries again; CALL id_gen.abort_move(%s) rolls back and lifts the fence.',
                              m.lower_gene, m.upper_gene, m.target_shard, m.move_id);
      END IF;
      PERFORM pg_sleep(0.5);
    END LOOP;
    IF m.phase <> 'cut_over' THEN
      PERFORM pg_advisory_unlock(757431, m.move_id::integer);
      RAISE EXCEPTION 'id_gen: move %: could not cut over: %', m.move_id, err
        USING ERRCODE = coalesce(err_state, '55000'),
              DETAIL = 'Each attempt lifted its fence again; the source is still authoritative and the move stays in catching_up.',
              HINT = format('CALL id_gen.move_genes(%s, %s, %L) tries again; CALL id_gen.abort_move(%s) rolls back.',
                            m.lower_gene, m.upper_gene, m.target_shard, m.move_id);
    END IF;
  END IF;

  -- cut over: the source lets go -------------------------------------------------------------
  IF m.phase = 'cut_over' THEN
    err := NULL;
    BEGIN
      PERFORM id_gen.run_move_step(m, 'detach_source', 0, 30000);
      PERFORM id_gen.place_ranges(m.source_shard, m.lower_gene, m.upper_gene, false);
      PERFORM id_gen.run_move_step(m, 'drop_subscription', 0, 30000);
      PERFORM id_gen.run_move_step(m, 'drop_publication', 0, 30000);
      IF NOT m.keep_source THEN
        PERFORM id_gen.run_move_step(m, 'drop_source', 0, 60000);
      END IF;
      PERFORM id_gen.run_move_step(m, 'forget_markers', 0, 10000);
      UPDATE id_gen.shard_moves SET phase = 'done', finished_at = clock_timestamp(), updated_at = clock_timestamp(),
                                    source_fenced = false, last_error = NULL
      WHERE move_id = m.move_id AND phase = 'cut_over' RETURNING * INTO m;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
      GET STACKED DIAGNOSTICS err = MESSAGE_TEXT, err_state = RETURNED_SQLSTATE;
    END;
    IF err IS NOT NULL THEN
      ROLLBACK;
      UPDATE id_gen.shard_moves SET last_error = 'cut over; cleaning up: ' || err, updated_at = clock_timestamp()
      WHERE move_id = m.move_id;
      COMMIT;
      PERFORM pg_advisory_unlock(757431, m.move_id::integer);
      RAISE EXCEPTION 'id_gen: move % has cut over (the target serves genes % .. %), but cleaning up failed: %',
                      m.move_id, m.lower_gene, m.upper_gene, err
        USING ERRCODE = err_state,
              DETAIL = 'The source''s partitions, the subscription or the publication may still exist; the source refuses direct writes of these genes.',
              HINT = format('CALL id_gen.move_genes(%s, %s, %L) again finishes the clean-up.', m.lower_gene, m.upper_gene, m.target_shard);
    END IF;
    COMMIT;
    PERFORM pg_advisory_unlock(757431, m.move_id::integer);
    RAISE NOTICE 'id_gen: move % done: genes % .. % are on %; writes were fenced for % ms',
      m.move_id, m.lower_gene, m.upper_gene, m.target_shard,
      round(extract(epoch FROM m.fence_ended_at - m.fence_started_at) * 1000, 1);
  END IF;
END $$;
COMMENT ON PROCEDURE id_gen.move_genes(integer, integer, text, boolean, boolean) IS 'Moves the rows of every distributed table in genes lower_gene .. upper_gene (whole route ranges of one shard) to target_shard over logical replication, fencing only those genes for the cut-over; commits between phases (run it outside a transaction block). dry_run prints the steps and their SQL; keep_source keeps the source''s detached partitions (renamed *_moved_<id>). Re-running it resumes an unfinished move. Superuser only.';
REVOKE EXECUTE ON PROCEDURE id_gen.move_genes(integer, integer, text, boolean, boolean) FROM PUBLIC;

CREATE PROCEDURE id_gen.abort_move(move_id bigint, force boolean DEFAULT false)
LANGUAGE plpgsql
AS $$
DECLARE
  m id_gen.shard_moves;
  cleanup text;
  source_left text;
BEGIN
  -- Fails at once (2D000) inside a transaction block, before anything remote is undone.
  COMMIT;
  PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
  IF move_id IS NULL OR force IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "%" must not be NULL', CASE WHEN move_id IS NULL THEN 'move_id' ELSE 'force' END
      USING ERRCODE = '22004';
  END IF;
  PERFORM id_gen.require_superuser('abort moves');
  SELECT * INTO m FROM id_gen.shard_moves sm WHERE sm.move_id = abort_move.move_id FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'id_gen: there is no move %', move_id USING ERRCODE = '42704', HINT = 'Moves are listed in id_gen.moves.';
  ELSIF m.phase IN ('done', 'aborted') THEN
    RAISE EXCEPTION 'id_gen: move % is % already', move_id, m.phase USING ERRCODE = '55000';
  ELSIF m.phase = 'cut_over' THEN
    RAISE EXCEPTION 'id_gen: move % has cut over: the target is authoritative', move_id
      USING ERRCODE = '55000',
            HINT = format('CALL id_gen.move_genes(%s, %s, %L) finishes it; to undo it, move the genes back afterwards.',
                          m.lower_gene, m.upper_gene, m.target_shard);
  END IF;
  cleanup := id_gen.undo_move(m);
  -- force: give up on what only the target still holds (a target that is gone for good);
  -- what the source holds (fence, slot, publication) must be gone in any case.
  source_left := (SELECT string_agg(part, '; ') FROM regexp_split_to_table(cleanup, '; ') part
                  WHERE part ~ '^(unfence_source|drop_publication|replication slot|source markers)');
  UPDATE id_gen.shard_moves sm
  SET phase = CASE WHEN cleanup IS NULL OR (force AND source_left IS NULL) THEN 'aborted' ELSE 'failed' END,
      last_error = coalesce('abort incomplete: ' || cleanup, sm.last_error),
      finished_at = CASE WHEN cleanup IS NULL OR (force AND source_left IS NULL) THEN clock_timestamp() END,
      updated_at = clock_timestamp()
  WHERE sm.move_id = m.move_id;
  COMMIT;
  IF cleanup IS NOT NULL AND NOT (force AND source_left IS NULL) THEN
    RAISE EXCEPTION 'id_gen: move % is only partly rolled back: %', move_id, cleanup
      USING ERRCODE = '55000',
            HINT = CASE WHEN source_left IS NULL
                        THEN format('Call abort_move again when the target answers, or CALL id_gen.abort_move(%s, force => true) if it is gone for good (its copies and subscription stay there).', move_id)
                        ELSE 'Call abort_move again when the source answers; routes and the source''s rows are unchanged.' END;
  ELSIF cleanup IS NOT NULL THEN
    RAISE WARNING 'id_gen: move % aborted; left on the target: %', move_id, cleanup
      USING HINT = 'Drop that subscription (ALTER SUBSCRIPTION ... DISABLE; ... SET (slot_name = NONE); DROP SUBSCRIPTION) and those partitions on the target if it comes back.';
    RETURN;
  END IF;
  RAISE NOTICE 'id_gen: move % rolled back: routes and the source are unchanged, the target''s copies and the replication slot are gone', move_id;
END $$;
COMMENT ON PROCEDURE id_gen.abort_move(bigint, boolean) IS 'Rolls back a move that has not cut over: drops its fence, subscription, replication slot and publication and the target''s copies; routes and the source are unchanged. force => true marks it aborted even if the target cannot be reached (the source must be clean). Run it outside a transaction block. Superuser only.';
REVOKE EXECUTE ON PROCEDURE id_gen.abort_move(bigint, boolean) FROM PUBLIC;

-- Id continuity for shards whose sequences are local: the target's high-water mark goes
-- above the source's, so that ids the target issues for the moved genes from new
-- segments do not repeat the source's. (Authority-backed sequences need nothing.)
CREATE FUNCTION id_gen.move_raise_sequences(m id_gen.shard_moves) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  seq text;
  high text;
BEGIN
  FOR seq IN SELECT DISTINCT t.sequence FROM id_gen.distributed_tables t WHERE t.sequence IS NOT NULL LOOP
    high := id_gen.shard_exec(m.source_shard,
      format('SELECT max_id FROM id_gen.sequences WHERE name = %L AND authority IS NULL', seq), 5000);
    IF high IS NOT NULL THEN
      PERFORM id_gen.shard_exec(m.target_shard,
        format('UPDATE id_gen.sequences SET max_id = greatest(max_id, %s) WHERE name = %L AND authority IS NULL', high::bigint, seq), 5000);
    END IF;
  END LOOP;
END $$;
COMMENT ON FUNCTION id_gen.move_raise_sequences(id_gen.shard_moves) IS 'Raises the target''s high-water mark of each local sequence of distributed tables above the source''s.';
REVOKE EXECUTE ON FUNCTION id_gen.move_raise_sequences(id_gen.shard_moves) FROM PUBLIC;

-- set_route and drop_route now keep distributed tables in step ---------------------------
CREATE OR REPLACE FUNCTION id_gen.set_route(upper_gene integer, shard text) RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  PERFORM id_gen.check_route(upper_gene, shard);
  -- One route change at a time, so that the partitions and shard CHECKs of distributed
  -- tables are derived from one state of the table.
  LOCK TABLE id_gen.shard_routes IN SHARE ROW EXCLUSIVE MODE;
  INSERT INTO id_gen.shard_routes AS r (upper_gene, shard) VALUES (set_route.upper_gene, set_route.shard)
  ON CONFLICT ON CONSTRAINT shard_routes_pkey DO UPDATE SET shard = excluded.shard, updated_at = now();
  PERFORM id_gen.sync_distributed_tables();
END $$;
COMMENT ON FUNCTION id_gen.set_route(integer, text) IS 'Routes genes up to upper_gene (down to the previous bound + 1) to a shard; replaces an existing bound. Distributed tables follow in the same transaction (partitions and shard CHECKs).';

CREATE OR REPLACE FUNCTION id_gen.drop_route(upper_gene integer) RETURNS boolean
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  LOCK TABLE id_gen.shard_routes IN SHARE ROW EXCLUSIVE MODE;
  DELETE FROM id_gen.shard_routes r WHERE r.upper_gene = drop_route.upper_gene;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'id_gen: there is no route with upper bound %', upper_gene
      USING ERRCODE = '42704', HINT = 'Existing routes are listed in id_gen.route_ranges.';
  END IF;
  PERFORM id_gen.sync_distributed_tables();
  RETURN true;
END $$;
COMMENT ON FUNCTION id_gen.drop_route(integer) IS 'Removes a route bound; its genes then go to the next higher bound. Distributed tables follow in the same transaction.';

-- The distribution of distributed tables (sql/distribute.sql) by route range.
CREATE VIEW id_gen.distribution AS
SELECT format('%I.%I', d.schema_name, d.table_name) AS relation,
       r.lower_gene,
       r.upper_gene,
       r.shard,
       id_gen.gene_first_id(r.lower_gene) AS first_id,
       id_gen.gene_last_id(r.upper_gene) AS last_id,
       format('%I.%I', d.schema_name, id_gen.partition_name(d.partitioned_name, r.lower_gene, r.upper_gene)) AS partition,
       EXISTS (SELECT FROM pg_catalog.pg_class c
               JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
               JOIN pg_catalog.pg_inherits i ON i.inhrelid = c.oid
               JOIN pg_catalog.pg_foreign_table ft ON ft.ftrelid = c.oid
               JOIN pg_catalog.pg_foreign_server s ON s.oid = ft.ftserver
               WHERE n.nspname = d.schema_name
                 AND c.relname = id_gen.partition_name(d.partitioned_name, r.lower_gene, r.upper_gene) || '_fdw'
                 AND s.srvname = r.shard)
       AND EXISTS (SELECT FROM id_gen.shard_placements p
                   WHERE (p.schema_name, p.table_name, p.shard) = (d.schema_name, d.table_name, r.shard)
                     AND int4range(r.lower_gene, r.upper_gene, '[]') = ANY (p.gene_ranges)) AS in_step
FROM id_gen.distributed_tables d CROSS JOIN id_gen.route_ranges r;
COMMENT ON VIEW id_gen.distribution IS 'Each distributed table by route range: shard, id bounds, partition, and whether its foreign table and the shard''s placement match the route table (in_step; false after a failed sync: run SELECT id_gen.sync_distributed_tables()).';
GRANT SELECT ON id_gen.distribution TO PUBLIC;
