-- Routes: the route table's view, lookups and changes by hand on the coordinator; zero-hop
-- routing (docs/routing-protocol.md): the route version on the coordinator, its
-- NOTIFY, and how shards learn it; on the shards, the tombstone partition of every
-- distributed table (the genes a shard does not own) and id_gen.route_claim. The
-- executor-start check and route_claim's body are Rust (src/routing_guard/). Code only
-- (CREATE OR REPLACE); the tables are in sql/install/cluster_catalog.sql.
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
-- id_gen.shard_routes (sql/install/cluster_catalog.sql) maps each gene to a shard: a gene goes to the
-- first row whose upper_gene >= gene. Its view as ranges, the lookups by gene, id and owner,
-- and the changes by hand. Online splits and merges of ranges are in sql/cluster/split.sql, moves in
-- sql/cluster/move.sql, planning (route_plan_split, route_plan_merge) in src/routing.rs.

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
-- name and that has not got it; a shard that failed is tried again after 10 s, or at once
-- when the routes changed since it failed (each new version is worth one attempt: after a
-- move or split, its shards are told at once even if an earlier push to them failed). force
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
             AND (force OR rp.last_error IS NULL OR rp.tried_at < clock_timestamp() - interval '10 s'
                  OR rp.tried_at < (SELECT st.changed_at FROM id_gen.route_state st))
           ORDER BY rp.last_error IS NOT NULL, 1 LOOP
    BEGIN
      PERFORM id_gen.remote_send(s, id_gen.remote_call_text('shard_set_route_state', ARRAY[v::text, s, lowers::text, uppers::text, names::text]), 5000);
      sent := sent || s;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
      PERFORM id_gen.note_route_push(s, NULL, SQLERRM);
    END;
  END LOOP;
  FOREACH s IN ARRAY sent LOOP
    BEGIN
      PERFORM id_gen.remote_receive(s, 5000, started);
      PERFORM id_gen.note_route_push(s, v, NULL);
      n := n + 1;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
      PERFORM id_gen.note_route_push(s, NULL, SQLERRM);
    END;
  END LOOP;
  RETURN n;
END $$;
COMMENT ON FUNCTION id_gen.push_route_state(boolean) IS 'Tells every shard the committed route version and route table (id_gen.shard_set_route_state there), skipping shards that have it; run after moves, reverts and splits and by the move supervisor every 2 s. Errors are recorded in id_gen.route_pushes (retried after 10 s, or at once for a newer route version); force pushes to every shard at once, also those recorded as up to date (a shard ahead of a coordinator restored from an older dump). Superuser only.';
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
