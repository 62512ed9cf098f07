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
