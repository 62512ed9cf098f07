-- On a shard: the route version and the routes the coordinator pushed
-- (shard_set_route_state, read by the routing guard, src/routing_guard/), the tombstone
-- partitions of genes the shard does not own, and the claim a client-routed transaction
-- starts with (route_claim). Code only (CREATE OR REPLACE). The coordinator's half is in
-- sql/cluster/routing.sql.
--
-- Invariants: a shard answers by what it owns: a statement or claim for a gene it does not
-- own, or with an older route version than it was told, fails with IG001; a fenced gene
-- gives IG002.

-- Shard: the version and the routes it was told -------------------------------------------
CREATE OR REPLACE FUNCTION id_gen.shard_set_route_state(version bigint, shard text, lower_genes integer[],
                                                        upper_genes integer[], shards text[]) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  t record;
  made integer := 0;
  busy integer := 0;
BEGIN
  INSERT INTO id_gen.shard_route_state AS s (version, shard, lower_genes, upper_genes, shards, pushed_at)
  VALUES (shard_set_route_state.version, shard_set_route_state.shard, shard_set_route_state.lower_genes,
          shard_set_route_state.upper_genes, shard_set_route_state.shards, now())
  ON CONFLICT (singleton) DO UPDATE
  SET version = excluded.version, shard = excluded.shard, lower_genes = excluded.lower_genes,
      upper_genes = excluded.upper_genes, shards = excluded.shards, pushed_at = excluded.pushed_at;
  -- Tables distributed by an id_gen before 0.6.0 get their tombstone here.
  PERFORM set_config('lock_timeout', '2s', true);
  FOR t IN SELECT st.schema_name, st.table_name, st.stem, st.id_column FROM id_gen.shard_tables st
           WHERE to_regclass(format('%I.%I', st.schema_name, st.table_name)) IS NOT NULL
             AND st.rows_table IS NULL LOOP  -- (a table laid out by ownership has no tombstone)
    BEGIN  -- a table busy beyond the lock timeout gets its tombstone with a later push
      IF id_gen.shard_ensure_tombstone(format('%I.%I', t.schema_name, t.table_name)::regclass, t.stem, t.id_column) THEN
        made := made + 1;
      END IF;
    EXCEPTION WHEN lock_not_available THEN
      busy := busy + 1;
    END;
  END LOOP;
  PERFORM id_gen.shard_routing_changed();
  RETURN format('route version %s; %s tombstone(s) created%s', version, made,
                CASE WHEN busy > 0 THEN format(', %s table(s) too busy (next push)', busy) ELSE '' END);
END $$;
COMMENT ON FUNCTION id_gen.shard_set_route_state(bigint, text, integer[], integer[], text[]) IS 'On a shard (called by the coordinator''s id_gen.push_route_state): stores the route version and route table, gives every distributed table its tombstone partition if it has none, and makes every backend reload its routing view at commit.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_set_route_state(bigint, text, integer[], integer[], text[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.shard_known_owner(gene integer) RETURNS text
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
RETURN (SELECT s.shards[i] FROM id_gen.shard_route_state s,
               generate_subscripts(s.upper_genes, 1) AS i
        WHERE s.upper_genes[i] OPERATOR(pg_catalog.>=) gene AND s.lower_genes[i] OPERATOR(pg_catalog.<=) gene
        LIMIT 1);
COMMENT ON FUNCTION id_gen.shard_known_owner(integer) IS 'On a shard: the shard that owns a gene according to the routes the coordinator last pushed here (NULL if unknown); named in the DETAIL of IG001.';
GRANT EXECUTE ON FUNCTION id_gen.shard_known_owner(integer) TO PUBLIC;

-- What the version check of every transaction and route_claim load
-- (src/routing_guard/shard_state.rs, VersionView): the version and the distributed tables,
-- one row per table, however many partitions they have.
CREATE OR REPLACE FUNCTION id_gen.shard_routing_tables()
RETURNS TABLE (version bigint, parent oid)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  SELECT v.version, t.parent
  FROM (SELECT coalesce((SELECT s.version FROM id_gen.shard_route_state s), 0) AS version) v
  -- (A table laid out by ownership: its table of rows, which statements through its view
  -- scan, and whose ownership a claim checks.)
  LEFT JOIN (SELECT st.schema_name, st.table_name,
                    to_regclass(format('%I.%I', st.schema_name, coalesce(st.rows_table, st.table_name)))::oid AS parent
             FROM id_gen.shard_tables st) t ON t.parent IS NOT NULL
  -- The order in which route_claim locks: a move's fence locks in the same order.
  ORDER BY t.schema_name, t.table_name;
END;
COMMENT ON FUNCTION id_gen.shard_routing_tables() IS 'On a shard: its route version and its distributed tables (their oids, the table of rows of one laid out by ownership; one row with a NULL table when it has none). Loaded by the route-version check and route_claim of every backend after a change (a claim finds the gene''s partitions in PostgreSQL''s partition descriptors); id_gen.shard_routing_snapshot() gives the partitions too.';
GRANT EXECUTE ON FUNCTION id_gen.shard_routing_tables() TO PUBLIC;

-- What src/routing_guard/shard_state.rs loads: the version, then per distributed table
-- its partitions with their gene ranges (a tombstone: NULL genes).
CREATE OR REPLACE FUNCTION id_gen.shard_routing_snapshot()
RETURNS TABLE (version bigint, parent oid, part oid, lower_gene integer, upper_gene integer)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  SELECT t.version, t.parent, c.oid, g.g[1], g.g[2]
  -- (the version and the tables in the order in which route_claim locks, which a move's
  -- fence follows too; one row with a NULL table when there is none)
  FROM id_gen.shard_routing_tables() WITH ORDINALITY AS t(version, parent, n)
  LEFT JOIN pg_inherits i ON i.inhparent OPERATOR(pg_catalog.=) t.parent
  LEFT JOIN pg_class c ON c.oid OPERATOR(pg_catalog.=) i.inhrelid
  -- The bound's genes, decoded from the catalog's node tree (a deparse with pg_get_expr and
  -- a pattern match cost 30-100 us per partition). A function in FROM runs once per
  -- partition (a subquery here would be pulled up, and called again for each use of g).
  LEFT JOIN LATERAL id_gen.partition_gene_range(c.relpartbound) AS g(g) ON true
  ORDER BY t.n, c.oid;
END;
COMMENT ON FUNCTION id_gen.shard_routing_snapshot() IS 'On a shard: its route version and, per distributed table (by schema and name), each partition with its gene range (NULL for the tombstone and the partition of negative ids). Loaded by the routing guard of every backend after a change.';
GRANT EXECUTE ON FUNCTION id_gen.shard_routing_snapshot() TO PUBLIC;

-- Shard: tombstones --------------------------------------------------------------------------
-- The attribute number of a partition's partition-key column (the id) in the partition.
CREATE OR REPLACE FUNCTION id_gen.partition_key_attnum(part regclass) RETURNS smallint
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
RETURN (SELECT a2.attnum FROM pg_inherits i
        JOIN pg_partitioned_table pt ON pt.partrelid OPERATOR(pg_catalog.=) i.inhparent
        JOIN pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) i.inhparent AND a.attnum OPERATOR(pg_catalog.=) pt.partattrs[0]
        JOIN pg_attribute a2 ON a2.attrelid OPERATOR(pg_catalog.=) i.inhrelid AND a2.attname OPERATOR(pg_catalog.=) a.attname
        WHERE i.inhrelid OPERATOR(pg_catalog.=) part);
COMMENT ON FUNCTION id_gen.partition_key_attnum(regclass) IS 'The attribute number, in a partition, of its parent''s partition-key column (the id of a distributed table): what the routing guard looks for in a scan''s predicates.';

-- The IG001 of a write of a gene this shard does not own into a distributed table `rel`
-- (its tombstone's trigger, or the trigger of a table laid out by ownership).
CREATE OR REPLACE FUNCTION id_gen.raise_not_owned(rel regclass, id bigint) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  gene integer := CASE WHEN id >= 0 THEN (id >> 47)::integer END;
  version bigint := coalesce((SELECT s.version FROM id_gen.shard_route_state s), 0);
  owner text := id_gen.shard_known_owner(gene);
BEGIN
  IF rel IS NULL OR id IS NULL THEN
    RAISE EXCEPTION 'id_gen: arguments "rel" and "id" must not be NULL' USING ERRCODE = '22004';
  END IF;
  RAISE EXCEPTION 'id_gen: this shard does not own gene % (id %) of %', coalesce(gene::text, '(none)'), id, rel
    USING ERRCODE = 'IG001',
          DETAIL = format('The shard is at route version %s%s.', version,
                          CASE WHEN owner IS NOT NULL THEN format('; gene %s is on shard "%s"', gene, owner) ELSE '' END),
          HINT = 'Re-read the routes on the coordinator (SELECT * FROM id_gen.route_map; LISTEN id_gen_routes) and retry the transaction on the shard that owns the genes.';
END $$;
COMMENT ON FUNCTION id_gen.raise_not_owned(regclass, bigint) IS 'On a shard: raises the IG001 of a write of an id whose gene this shard does not own into a distributed table, naming the owner where the shard knows it.';
-- (Every role: the triggers that call it run as the writer; it only raises.)
GRANT EXECUTE ON FUNCTION id_gen.raise_not_owned(regclass, bigint) TO PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.refuse_not_owned() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  parent regclass := (SELECT i.inhparent::regclass FROM pg_inherits i WHERE i.inhrelid = TG_RELID);
  id bigint := (to_jsonb(NEW) ->> TG_ARGV[1])::bigint;
BEGIN
  IF id IS NULL THEN
    -- (Range partitioning sends a NULL key to the DEFAULT partition.)
    RAISE EXCEPTION 'id_gen: a row of % without an id (column %) has no gene, and no shard takes it', parent, TG_ARGV[1]
      USING ERRCODE = '23502';
  END IF;
  PERFORM id_gen.raise_not_owned(parent, id);
  RETURN NULL;
END $$;
COMMENT ON FUNCTION id_gen.refuse_not_owned() IS 'ALWAYS trigger of a tombstone partition (genes this shard does not own): refuses the row with IG001, naming the owner where the shard knows it.';

-- The trigger id_gen_owned_rows of a table laid out by ownership (docs/design.md §11.8): one
-- relation holds the rows, what the shard owns is recorded as data (id_gen.shard_owns), and
-- a row whose gene the shard does not own is refused (IG001); a row of a gene that a move
-- has fenced for its cut-over (id_gen.shard_fenced) is refused on INSERT, UPDATE and DELETE
-- (IG002). A DELETE of a gene not owned goes through: the rows a move left behind, which its
-- clean-up deletes (the view shows only owned rows, so applications never reach them). Not
-- ENABLE ALWAYS: a move's apply worker writes its copies before the target owns their
-- genes. Its argument, the id column's name, is also how the routing guard knows the table
-- (src/routing_guard/).
CREATE OR REPLACE FUNCTION id_gen.refuse_rows_not_owned() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  id bigint;
BEGIN
  IF TG_OP <> 'INSERT' THEN
    id := (to_jsonb(OLD) ->> TG_ARGV[0])::bigint;
    IF id IS NOT NULL AND id_gen.shard_fenced(TG_RELID, id) THEN
      PERFORM id_gen.raise_fenced_gene(TG_RELID::regclass, id);
    END IF;
    IF TG_OP = 'DELETE' THEN
      -- A row of a gene not owned is hidden (a move's copy on its target, or the source's
      -- row after the hand-over): only a superuser deletes it (id_gen's clean-ups,
      -- shard_delete_unowned_rows; a DBA by hand). Anyone else deleting it by mistake
      -- from the table of rows would remove a move's copy.
      IF id IS NOT NULL AND NOT id_gen.shard_owns(TG_RELID, id)
         AND NOT (SELECT r.rolsuper FROM pg_roles r WHERE r.rolname = current_user) THEN
        PERFORM id_gen.raise_not_owned(TG_RELID::regclass, id);
      END IF;
      RETURN OLD;
    END IF;
  END IF;
  id := (to_jsonb(NEW) ->> TG_ARGV[0])::bigint;
  IF id IS NOT NULL AND NOT id_gen.shard_owns(TG_RELID, id) THEN
    PERFORM id_gen.raise_not_owned(TG_RELID::regclass, id);
  ELSIF id IS NOT NULL AND id_gen.shard_fenced(TG_RELID, id) THEN
    PERFORM id_gen.raise_fenced_gene(TG_RELID::regclass, id);
  END IF;
  RETURN NEW;
END $$;
COMMENT ON FUNCTION id_gen.refuse_rows_not_owned() IS 'Row trigger id_gen_owned_rows(<id column>) of a table laid out by ownership: refuses a row whose gene the shard does not own (IG001), as id_gen.shard_owns says, a delete of such a row unless by a superuser (IG001; id_gen''s clean-ups), and a write or delete of a gene a move has fenced (IG002, id_gen.shard_fenced); the routing guard checks the scans of such a table that select by id.';

-- IG002 for a write of a gene that a move has fenced in a table laid out by ownership.
CREATE OR REPLACE FUNCTION id_gen.raise_fenced_gene(rel regclass, id bigint) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF rel IS NULL OR id IS NULL THEN
    RAISE EXCEPTION 'id_gen: arguments "rel" and "id" must not be NULL' USING ERRCODE = '22004';
  END IF;
  RAISE EXCEPTION 'id_gen: gene % (id %) of % is fenced for the cut-over of a move', (id >> 47), id, rel
    USING ERRCODE = 'IG002',
          DETAIL = 'A move of this gene is switching shards; it takes milliseconds.',
          HINT = 'Through the coordinator these writes wait (milliseconds); an application that routes by itself retries after a short wait (5 to 50 ms, growing), re-reading the routes (id_gen.route_map) if it persists. The fence is lifted or the genes change shard within seconds.';
END $$;
COMMENT ON FUNCTION id_gen.raise_fenced_gene(regclass, bigint) IS 'On a shard: raises the IG002 of a write of an id whose gene a move has fenced in a table laid out by ownership (id_gen.refuse_rows_not_owned).';
-- (Every role: the trigger that calls it runs as the writer; it only raises.)
GRANT EXECUTE ON FUNCTION id_gen.raise_fenced_gene(regclass, bigint) TO PUBLIC;

-- The partition bound of negative ids as pg_get_expr prints it.
CREATE OR REPLACE FUNCTION id_gen.negative_bound_text() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN 'FOR VALUES FROM (MINVALUE) TO (''0'')';
COMMENT ON FUNCTION id_gen.negative_bound_text() IS 'The bound of a shard table''s partition of negative ids (<stem>_negative), as pg_get_expr prints it.';

-- Creates the tombstone of a shard table (its DEFAULT partition <stem>_not_owned), and its
-- partition of negative ids, unless the table has a DEFAULT partition already; true if it
-- created them.
CREATE OR REPLACE FUNCTION id_gen.shard_ensure_tombstone(parent regclass, stem name, id_column name) RETURNS boolean
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  sch name := (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = parent);
  tname name := id_gen.fit_name(stem, '_not_owned');
  tomb regclass;
BEGIN
  -- pg_partitioned_table names the DEFAULT partition (0: none), so every push checks a
  -- table in O(1) instead of deparsing the bound of each of its partitions.
  IF EXISTS (SELECT FROM pg_partitioned_table p WHERE p.partrelid = parent AND p.partdefid <> 0::oid) THEN
    RETURN false;
  END IF;
  IF to_regclass(format('%I.%I', sch, tname)) IS NOT NULL THEN
    RAISE EXCEPTION 'id_gen: relation %.% already exists on this shard, and it is not the tombstone of %', quote_ident(sch), quote_ident(tname), parent
      USING ERRCODE = '42P07', HINT = 'id_gen names the partition of the genes a shard does not own <stem>_not_owned; rename that relation.';
  END IF;
  PERFORM id_gen.quiet_ddl();
  EXECUTE format('CREATE TABLE %I.%I PARTITION OF %s DEFAULT', sch, tname, parent);
  tomb := format('%I.%I', sch, tname)::regclass;
  EXECUTE format('CREATE TRIGGER id_gen_not_owned BEFORE INSERT OR UPDATE ON %s FOR EACH ROW '
                 'EXECUTE FUNCTION id_gen.refuse_not_owned(%L, %L)', tomb, id_gen.partition_key_attnum(tomb), id_column);
  EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER id_gen_not_owned', tomb);
  PERFORM id_gen.inherit_parent_settings(parent, tomb,
    format('id_gen: the genes this shard does not own of %s (always empty: writes fail with IG001, and so do reads that select them by id)', parent));
  -- Negative ids have no gene: their own empty partition, refused by its CHECK (23514) and
  -- left out of every plan, so that `id < x` on a shard does not reach the tombstone.
  tname := id_gen.fit_name(stem, '_negative');
  IF NOT EXISTS (SELECT FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                 WHERE i.inhparent = parent AND pg_get_expr(c.relpartbound, c.oid) = id_gen.negative_bound_text()) THEN
    EXECUTE format('CREATE TABLE %I.%I PARTITION OF %s FOR VALUES FROM (MINVALUE) TO (0)', sch, tname, parent);
    EXECUTE format('ALTER TABLE %I.%I ADD CONSTRAINT id_gen_no_gene CHECK (false)', sch, tname);
    PERFORM id_gen.inherit_parent_settings(parent, format('%I.%I', sch, tname)::regclass,
      format('id_gen: negative ids of %s, which have no gene (always empty)', parent));
  END IF;
  PERFORM id_gen.shard_routing_changed();
  RETURN true;
END $$;
COMMENT ON FUNCTION id_gen.shard_ensure_tombstone(regclass, name, name) IS 'On a shard: gives a distributed table its tombstone, the DEFAULT partition <stem>_not_owned for every gene the shard does not own (writes into it fail with IG001 by an ALWAYS trigger, and so do scans that select it by id, by the routing guard), and <stem>_negative for negative ids (CHECK (false)). Returns true if it created them.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_ensure_tombstone(regclass, name, name) FROM PUBLIC;

-- Shard: the claim (src/routing_guard/claim.rs) ---------------------------------------------
CREATE OR REPLACE FUNCTION id_gen.route_claim(gene integer, version bigint) RETURNS bigint
LANGUAGE c VOLATILE STRICT PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'id_gen_route_claim';
COMMENT ON FUNCTION id_gen.route_claim(integer, bigint) IS 'On a shard, the first statement of a client-routed transaction: fails with IG001 when the shard does not own the gene or its route version is newer than version, with IG002 when the gene is fenced for a cut-over; otherwise locks the gene''s partitions of every distributed table (ROW EXCLUSIVE, until the transaction ends: fences and flips of that gene wait for it) and returns the shard''s route version.';
GRANT EXECUTE ON FUNCTION id_gen.route_claim(integer, bigint) TO PUBLIC;
