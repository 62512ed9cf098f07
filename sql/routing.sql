-- Routes: the route table's view, lookups and changes by hand on the coordinator; zero-hop
-- routing (docs/routing-protocol.md): the route version on the coordinator, its
-- NOTIFY, and how shards learn it; on the shards, the tombstone partition of every
-- distributed table (the genes a shard does not own) and id_gen.route_claim. The
-- executor-start check and route_claim's body are Rust (src/routing_guard/). Code only
-- (CREATE OR REPLACE); the tables are in sql/cluster_catalog.sql.
--
-- Invariants:
--   * The route version grows with every committed change of id_gen.shard_routes, in the
--     same transaction (a statement trigger), and NOTIFY id_gen_routes carries it; a
--     client that LISTENs before it reads id_gen.route_map misses no change.
--   * A shard is told a version only after the coordinator committed it
--     (id_gen.push_route_state runs in transactions that start after the change), so a
--     shard's version is never ahead of the coordinator's: a client that re-reads the
--     routes always gets a version the shard accepts. A shard that was not told yet only
--     lags, which the ownership checks make harmless.
--   * Ownership on a shard is its partitions: every gene without a partition falls into
--     the table's DEFAULT partition (its tombstone), whose ALWAYS trigger refuses writes
--     (IG001) even for replicated or re-partitioned rows, and whose id-predicate scans are
--     refused by the executor-start check.

-- Coordinator: the route table -----------------------------------------------------------
-- id_gen.shard_routes (sql/cluster_catalog.sql) maps each gene to a shard: a gene goes to the
-- first row whose upper_gene >= gene. Its view as ranges, the lookups by gene, id and owner,
-- and the changes by hand. Online splits and merges of ranges are in sql/split.sql, moves in
-- sql/move.sql, planning (route_plan_split, route_plan_merge) in src/routing.rs.

CREATE OR REPLACE VIEW id_gen.route_ranges AS
SELECT coalesce(lag(upper_gene) OVER (ORDER BY upper_gene) + 1, 0) AS lower_gene,
       upper_gene,
       shard,
       upper_gene - coalesce(lag(upper_gene) OVER (ORDER BY upper_gene) + 1, 0) + 1 AS genes
FROM id_gen.shard_routes;
COMMENT ON VIEW id_gen.route_ranges IS 'The route table as contiguous gene ranges [lower_gene, upper_gene] per shard.';
GRANT SELECT ON id_gen.route_ranges TO PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.route_gene(gene integer, ring boolean DEFAULT false) RETURNS text
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  s text;
  top integer;
BEGIN
  IF gene < 0 OR gene > 65535 THEN
    RAISE EXCEPTION 'id_gen: shard gene % is out of range (allowed: 0 .. 65535)', gene USING ERRCODE = '22003';
  END IF;
  SELECT r.shard INTO s FROM id_gen.shard_routes r WHERE r.upper_gene >= gene ORDER BY r.upper_gene LIMIT 1;
  IF s IS NOT NULL THEN
    RETURN s;
  END IF;
  SELECT max(r.upper_gene) INTO top FROM id_gen.shard_routes r;
  IF top IS NULL THEN
    RAISE EXCEPTION 'id_gen: the route table id_gen.shard_routes is empty'
      USING ERRCODE = '55000', HINT = 'SELECT id_gen.set_route(65535, ''shard_0'') routes every gene to one shard.';
  END IF;
  IF ring THEN
    SELECT r.shard INTO s FROM id_gen.shard_routes r ORDER BY r.upper_gene LIMIT 1;
    RETURN s;
  END IF;
  RAISE EXCEPTION 'id_gen: shard gene % has no route: the highest upper bound is %', gene, top
    USING ERRCODE = '55000',
          HINT = 'Add a route whose upper bound is 65535: SELECT id_gen.set_route(65535, ''shard_x''), or call with ring => true for wrap-around.';
END $$;
COMMENT ON FUNCTION id_gen.route_gene(integer, boolean) IS 'Physical shard of a gene: the first route whose upper bound >= gene. ring => true wraps genes above the last bound to the first route (consistent-hash ring); otherwise such a gap is an error.';

CREATE OR REPLACE FUNCTION id_gen.route(id bigint) RETURNS text LANGUAGE sql STABLE STRICT PARALLEL SAFE
RETURN id_gen.route_gene(id_gen.shard_of(id));
CREATE OR REPLACE FUNCTION id_gen.route(id bytea) RETURNS text LANGUAGE sql STABLE STRICT PARALLEL SAFE
RETURN id_gen.route_gene(id_gen.shard_of(id));
CREATE OR REPLACE FUNCTION id_gen.route(order_no uuid) RETURNS text LANGUAGE sql STABLE STRICT PARALLEL SAFE
RETURN id_gen.route_gene(id_gen.shard_of(order_no));
CREATE OR REPLACE FUNCTION id_gen.route_owner(owner bigint) RETURNS text LANGUAGE sql STABLE STRICT PARALLEL SAFE
RETURN id_gen.route_gene(id_gen.shard_gene(owner));
CREATE OR REPLACE FUNCTION id_gen.route_owner(owner text) RETURNS text LANGUAGE sql STABLE STRICT PARALLEL SAFE
RETURN id_gen.route_gene(id_gen.shard_gene(owner));
CREATE OR REPLACE FUNCTION id_gen.route_owner(owner uuid) RETURNS text LANGUAGE sql STABLE STRICT PARALLEL SAFE
RETURN id_gen.route_gene(id_gen.shard_gene(owner));
COMMENT ON FUNCTION id_gen.route(bigint) IS 'Physical shard of an id (by its gene).';
COMMENT ON FUNCTION id_gen.route(bytea) IS 'Physical shard of an id in byte form.';
COMMENT ON FUNCTION id_gen.route(uuid) IS 'Physical shard of an order number (gene in clear; no key needed).';
COMMENT ON FUNCTION id_gen.route_owner(bigint) IS 'Physical shard of an owner: route_gene(shard_gene(owner)).';
COMMENT ON FUNCTION id_gen.route_owner(text) IS 'Physical shard of a text owner.';
COMMENT ON FUNCTION id_gen.route_owner(uuid) IS 'Physical shard of a uuid owner.';

-- Route changes by hand. A change that moves a range boundary of a distributed table that
-- holds rows there would copy those rows under ACCESS EXCLUSIVE on the whole table (on the
-- coordinator and on the shards); it is refused unless copy_rows says so
-- (id_gen.sync_distributed_table checks, reading this transaction's setting).
CREATE OR REPLACE FUNCTION id_gen.set_route(upper_gene integer, shard text, copy_rows boolean DEFAULT false) RETURNS void
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
  PERFORM id_gen.sync_distributed_tables(copy_rows);
END $$;
COMMENT ON FUNCTION id_gen.set_route(integer, text, boolean) IS 'Routes genes up to upper_gene (down to the previous bound + 1) to a shard; replaces an existing bound. Distributed tables follow in the same transaction. A change that splits or merges a range holding rows is refused (55000; use CALL id_gen.split_route / merge_routes, which work online) unless copy_rows => true, which copies them under ACCESS EXCLUSIVE on the whole table.';

CREATE OR REPLACE FUNCTION id_gen.drop_route(upper_gene integer, copy_rows boolean DEFAULT false) RETURNS boolean
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
  PERFORM id_gen.sync_distributed_tables(copy_rows);
  RETURN true;
END $$;
COMMENT ON FUNCTION id_gen.drop_route(integer, boolean) IS 'Removes a route bound; its genes then go to the next higher bound. Distributed tables follow in the same transaction; a merge of ranges holding rows is refused unless copy_rows => true (see set_route; CALL id_gen.merge_routes works online).';

REVOKE EXECUTE ON FUNCTION id_gen.set_route(integer, text, boolean) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION id_gen.drop_route(integer, boolean) FROM PUBLIC;

-- Coordinator: the version ---------------------------------------------------------------
-- Whether this transaction raised the route version (it wrote id_gen.route_state): such a
-- version is not committed yet, so it is neither raised again nor pushed.
CREATE OR REPLACE FUNCTION id_gen.route_version_raised_here() RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  RETURN coalesce((SELECT id_gen.written_by_this_transaction(s.xmin::text::bigint) FROM id_gen.route_state s), false);
END $$;
COMMENT ON FUNCTION id_gen.route_version_raised_here() IS 'Whether the current transaction raised the route version (its row of id_gen.route_state was written here): then it is not committed yet.';
REVOKE EXECUTE ON FUNCTION id_gen.route_version_raised_here() FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.bump_route_version() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v bigint;
BEGIN
  -- One new version per transaction, however many statements it runs on the routes.
  IF id_gen.route_version_raised_here() THEN
    RETURN NULL;
  END IF;
  INSERT INTO id_gen.route_state AS s (version) VALUES (1)
  ON CONFLICT (singleton) DO UPDATE SET version = s.version + 1, changed_at = now()
  RETURNING s.version INTO v;
  PERFORM pg_notify('id_gen_routes', v::text);
  RETURN NULL;
END $$;
COMMENT ON FUNCTION id_gen.bump_route_version() IS 'Statement trigger on id_gen.shard_routes: raises the route version (id_gen.route_state) once per transaction and sends NOTIFY id_gen_routes with it; both take effect at commit.';
REVOKE EXECUTE ON FUNCTION id_gen.bump_route_version() FROM PUBLIC;

CREATE OR REPLACE TRIGGER id_gen_route_version
AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON id_gen.shard_routes
FOR EACH STATEMENT EXECUTE FUNCTION id_gen.bump_route_version();

CREATE OR REPLACE FUNCTION id_gen.route_version() RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN coalesce((SELECT s.version FROM id_gen.route_state s), 0);
COMMENT ON FUNCTION id_gen.route_version() IS 'The route version: grows with every committed route change (set_route, drop_route, a move''s cut-over or revert, a split or merge); 0 before the first. Each change also sends NOTIFY id_gen_routes with the new version as payload.';
GRANT EXECUTE ON FUNCTION id_gen.route_version() TO PUBLIC;

CREATE OR REPLACE VIEW id_gen.route_map AS
SELECT coalesce(lag(r.upper_gene) OVER (ORDER BY r.upper_gene) OPERATOR(pg_catalog.+) 1, 0) AS lower_gene,
       r.upper_gene,
       r.shard,
       (SELECT id_gen.route_version()) AS version
FROM id_gen.shard_routes r;
COMMENT ON VIEW id_gen.route_map IS 'The route ranges (genes lower_gene .. upper_gene go to shard) with the route version they belong to, read in one statement: what clients that route by themselves load (docs/routing-protocol.md).';
GRANT SELECT ON id_gen.route_map TO PUBLIC;

-- Coordinator: telling the shards ---------------------------------------------------------
-- Records a push: version (NULL: it failed, with error).
CREATE OR REPLACE FUNCTION id_gen.note_route_push(to_shard text, taken bigint, failure text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF to_shard IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "to_shard" must not be NULL' USING ERRCODE = '22004';
  ELSIF failure IS NULL THEN
    INSERT INTO id_gen.route_pushes AS rp (shard, version, pushed_at, tried_at, last_error)
    VALUES (to_shard, taken, clock_timestamp(), clock_timestamp(), NULL)
    ON CONFLICT (shard) DO UPDATE SET version = excluded.version, pushed_at = excluded.pushed_at,
                                      tried_at = excluded.tried_at, last_error = NULL;
  ELSE
    INSERT INTO id_gen.route_pushes AS rp (shard, tried_at, last_error)
    VALUES (to_shard, clock_timestamp(), failure)
    ON CONFLICT (shard) DO UPDATE SET tried_at = excluded.tried_at, last_error = excluded.last_error;
  END IF;
END $$;
COMMENT ON FUNCTION id_gen.note_route_push(text, bigint, text) IS 'Records in id_gen.route_pushes that a shard took a route version (taken), or why a push to it failed (failure).';
REVOKE EXECUTE ON FUNCTION id_gen.note_route_push(text, bigint, text) FROM PUBLIC;

-- Pushes the committed version and route table to every shard that routes or placements
-- name and that has not got it; a shard that failed is tried again after 10 s. force
-- pushes to every shard at once, also those recorded as up to date (a shard ahead of a
-- coordinator restored from an older dump is set back). The statement goes to every shard
-- before any answer is awaited (5 s in all), so a shard that hangs delays the others by
-- nothing; shards that answered last time go first (a new connection to one that hangs
-- waits for connect_timeout).
-- Returns how many shards took it. Never raises for a shard: errors go to
-- id_gen.route_pushes.last_error.
CREATE OR REPLACE FUNCTION id_gen.push_route_state(force boolean DEFAULT false) RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v bigint := id_gen.route_version();
  lowers integer[];
  uppers integer[];
  names text[];
  s text;
  n integer := 0;
  sent text[] := '{}';
  started timestamptz := clock_timestamp();
BEGIN
  PERFORM id_gen.require_superuser('push the route version to shards');
  -- Never a version this transaction raised: it is not committed (the supervisor's pass
  -- that finished a split, say); the next pass pushes it.
  IF v = 0 OR id_gen.route_version_raised_here() THEN
    RETURN 0;
  END IF;
  SELECT coalesce(array_agg(m.lower_gene ORDER BY m.upper_gene), '{}'), coalesce(array_agg(m.upper_gene ORDER BY m.upper_gene), '{}'),
         coalesce(array_agg(m.shard ORDER BY m.upper_gene), '{}')
    INTO lowers, uppers, names
  FROM id_gen.route_map m;
  -- Sent to every shard first, then collected (one shared bound of 5 s): each shard takes
  -- it as soon as its statement arrives, so one that hangs delays no other.
  FOR s IN SELECT x.shard FROM (SELECT r.shard FROM id_gen.shard_routes r
                                UNION SELECT p.shard FROM id_gen.shard_placements p) x
           LEFT JOIN id_gen.route_pushes rp ON rp.shard = x.shard
           WHERE (force OR rp.version IS DISTINCT FROM v)
             AND (force OR rp.last_error IS NULL OR rp.tried_at < clock_timestamp() - interval '10 s')
           ORDER BY rp.last_error IS NOT NULL, 1 LOOP
    BEGIN
      PERFORM id_gen.shard_send(s, id_gen.shard_call_text('shard_set_route_state', ARRAY[v::text, s, lowers::text, uppers::text, names::text]), 5000);
      sent := sent || s;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
      PERFORM id_gen.note_route_push(s, NULL, SQLERRM);
    END;
  END LOOP;
  FOREACH s IN ARRAY sent LOOP
    BEGIN
      PERFORM id_gen.shard_receive(s, 5000, started);
      PERFORM id_gen.note_route_push(s, v, NULL);
      n := n + 1;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
      PERFORM id_gen.note_route_push(s, NULL, SQLERRM);
    END;
  END LOOP;
  RETURN n;
END $$;
COMMENT ON FUNCTION id_gen.push_route_state(boolean) IS 'Tells every shard the committed route version and route table (id_gen.shard_set_route_state there), skipping shards that have it; run after moves, reverts and splits and by the move supervisor every 2 s. Errors are recorded in id_gen.route_pushes (retried after 10 s); force pushes to every shard at once, also those recorded as up to date (a shard ahead of a coordinator restored from an older dump). Superuser only.';
REVOKE EXECUTE ON FUNCTION id_gen.push_route_state(boolean) FROM PUBLIC;

-- The push after a procedure's commit: never fails the caller.
CREATE OR REPLACE FUNCTION id_gen.push_route_state_quietly() RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  PERFORM id_gen.push_route_state(false);
EXCEPTION WHEN OTHERS THEN
  RAISE WARNING 'id_gen: could not tell the shards the new route version: % (the move supervisor retries)', SQLERRM;
END $$;
COMMENT ON FUNCTION id_gen.push_route_state_quietly() IS 'id_gen.push_route_state() that warns instead of failing (after a move, revert or split has committed).';
REVOKE EXECUTE ON FUNCTION id_gen.push_route_state_quietly() FROM PUBLIC;

CREATE OR REPLACE VIEW id_gen.route_push_status AS
SELECT x.shard,
       rp.version,
       id_gen.route_version() AS current_version,
       rp.version IS NOT DISTINCT FROM id_gen.route_version() AS up_to_date,
       rp.pushed_at,
       rp.tried_at,
       rp.last_error
FROM (SELECT r.shard FROM id_gen.shard_routes r UNION SELECT p.shard FROM id_gen.shard_placements p) x
LEFT JOIN id_gen.route_pushes rp ON rp.shard = x.shard;
COMMENT ON VIEW id_gen.route_push_status IS 'On the coordinator: per shard, the route version it was last told and whether that is the current one (up_to_date), with the last error. A shard behind only lags: it still refuses genes it does not own.';

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
           WHERE to_regclass(format('%I.%I', st.schema_name, st.table_name)) IS NOT NULL LOOP
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

-- What src/routing_guard/shard_state.rs loads: the version, then per distributed table
-- its partitions with their gene ranges (a tombstone: NULL genes).
CREATE OR REPLACE FUNCTION id_gen.shard_routing_snapshot()
RETURNS TABLE (version bigint, parent oid, part oid, lower_gene integer, upper_gene integer)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  SELECT v.version, t.parent, c.oid,
         CASE WHEN m.m IS NOT NULL THEN (m.m[1]::bigint OPERATOR(pg_catalog.>>) 47)::integer END,
         CASE WHEN m.m IS NULL THEN NULL
              WHEN m.m[3] IS NOT NULL THEN 65535
              ELSE ((m.m[2]::bigint OPERATOR(pg_catalog.>>) 47) OPERATOR(pg_catalog.-) 1)::integer END
  FROM (SELECT coalesce((SELECT s.version FROM id_gen.shard_route_state s), 0) AS version) v
  LEFT JOIN (SELECT st.schema_name, st.table_name, to_regclass(format('%I.%I', st.schema_name, st.table_name))::oid AS parent
             FROM id_gen.shard_tables st) t ON t.parent IS NOT NULL
  LEFT JOIN pg_inherits i ON i.inhparent OPERATOR(pg_catalog.=) t.parent
  LEFT JOIN pg_class c ON c.oid OPERATOR(pg_catalog.=) i.inhrelid
  LEFT JOIN LATERAL (SELECT regexp_match(pg_get_expr(c.relpartbound, c.oid),
                                         '^FOR VALUES FROM \(''(-?\d+)''\) TO \((?:''(-?\d+)''|(MAXVALUE))\)$') AS m) m ON true
  -- The order in which route_claim locks: a move's fence locks in the same order.
  ORDER BY t.schema_name, t.table_name, c.oid;
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

CREATE OR REPLACE FUNCTION id_gen.refuse_not_owned() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  id bigint := (to_jsonb(NEW) ->> TG_ARGV[1])::bigint;
  gene integer := CASE WHEN id >= 0 THEN (id >> 47)::integer END;
  parent regclass := (SELECT i.inhparent::regclass FROM pg_inherits i WHERE i.inhrelid = TG_RELID);
  version bigint := coalesce((SELECT s.version FROM id_gen.shard_route_state s), 0);
  owner text := id_gen.shard_known_owner(gene);
BEGIN
  RAISE EXCEPTION 'id_gen: this shard does not own gene % (id %) of %', coalesce(gene::text, '(none)'), id, parent
    USING ERRCODE = 'IG001',
          DETAIL = format('The shard is at route version %s%s.', version,
                          CASE WHEN owner IS NOT NULL THEN format('; gene %s is on shard "%s"', gene, owner) ELSE '' END),
          HINT = 'Re-read the routes on the coordinator (SELECT * FROM id_gen.route_map; LISTEN id_gen_routes) and retry the transaction on the shard that owns the genes.';
END $$;
COMMENT ON FUNCTION id_gen.refuse_not_owned() IS 'ALWAYS trigger of a tombstone partition (genes this shard does not own): refuses the row with IG001, naming the owner where the shard knows it.';

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
  IF EXISTS (SELECT FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = parent AND pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT') THEN
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
