-- Checks that refuse an operation before it starts: superuser only, routes ready for
-- distribution (no long operation in flight: id_gen.refuse_during_operations, in
-- sql/cluster/operations.sql with the catalog it reads). Code only (CREATE OR REPLACE).
--
-- Invariants: each raises a clear error with its SQLSTATE and a hint, and changes nothing.

CREATE OR REPLACE FUNCTION id_gen.require_superuser(what text) RETURNS void
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

-- Every route must lead to a postgres_fdw server and every gene must have a route before
-- a table can be distributed over them.
CREATE OR REPLACE FUNCTION id_gen.check_routes_for_distribution() RETURNS void
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

-- The lock table -------------------------------------------------------------------------
-- PostgreSQL sizes its shared lock table at start: max_locks_per_transaction × (the server
-- processes that can hold locks + max_prepared_transactions). One transaction may use all of
-- it, and creating a relation takes a lock that lasts until COMMIT, so a transaction that
-- creates many partitions can run out ("out of shared memory", 53200) half way. The
-- processes: max_connections + autovacuum workers (+ their launcher) + max_worker_processes +
-- max_wal_senders; PostgreSQL 18 counts autovacuum_worker_slots and two special workers.
CREATE OR REPLACE FUNCTION id_gen.lock_table_room() RETURNS jsonb
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
RETURN (SELECT jsonb_build_object('per_transaction', x.per_xact, 'processes', x.processes,
                                  'capacity', x.per_xact * x.processes,
                                  'held', (SELECT count(*) FROM pg_locks l WHERE NOT l.fastpath))
        FROM (SELECT current_setting('max_locks_per_transaction')::bigint AS per_xact,
                     current_setting('max_connections')::bigint + current_setting('max_worker_processes')::bigint
                     + current_setting('max_wal_senders')::bigint + current_setting('max_prepared_transactions')::bigint
                     + coalesce(current_setting('autovacuum_worker_slots', true)::bigint OPERATOR(pg_catalog.+) 2,
                                current_setting('autovacuum_max_workers')::bigint OPERATOR(pg_catalog.+) 1) AS processes) x);
COMMENT ON FUNCTION id_gen.lock_table_room() IS 'This server''s shared lock table: {"per_transaction": max_locks_per_transaction, "processes": the process slots it is sized for, "capacity": their product, "held": the locks in it now (pg_locks, fast-path locks left out)}. Read by distribute_table here and on each shard before it creates partitions.';
REVOKE EXECUTE ON FUNCTION id_gen.lock_table_room() FROM PUBLIC;

-- Refuses (53400) a transaction that would take `needed` locks on `place` (the coordinator,
-- or a shard) when its lock table, with the locks held there now, has no room for them.
CREATE OR REPLACE FUNCTION id_gen.require_lock_room(place text, room jsonb, needed bigint, what text, detail text, hint text)
RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  capacity bigint := (room ->> 'capacity')::bigint;
  held bigint := (room ->> 'held')::bigint;
  processes bigint := (room ->> 'processes')::bigint;
BEGIN
  IF needed + held <= capacity THEN
    RETURN;
  END IF;
  RAISE EXCEPTION 'id_gen: % takes about % locks in one transaction on %, and its lock table has room for % (% held now)',
                  what, needed, place, capacity, held
    USING ERRCODE = '53400',
          DETAIL = format('The lock table holds max_locks_per_transaction (%s) × %s server processes = %s locks. %s',
                          room ->> 'per_transaction', processes, capacity, detail),
          HINT = format('Set max_locks_per_transaction to at least %s on %s and restart it; %s',
                        ceil((needed + held)::numeric / processes)::bigint, place, hint);
END $$;
COMMENT ON FUNCTION id_gen.require_lock_room(text, jsonb, bigint, text, text, text) IS 'Raises 53400 (with the max_locks_per_transaction that would do) when a transaction of needed locks does not fit in a server''s lock table (id_gen.lock_table_room) next to the locks held there now.';
REVOKE EXECUTE ON FUNCTION id_gen.require_lock_room(text, jsonb, bigint, text, text, text) FROM PUBLIC;

-- Before distribute_table changes anything: whether the coordinator and every shard can
-- create the table's partitions in one transaction each. Each object created holds a lock
-- until COMMIT, and the lock table counts objects (one entry per object, whatever the modes):
-- a table or index and its row type or constraint, so 2 per relation with its indexes, and
-- a TOAST table and its index (counted in pg_locks on PostgreSQL 15).
--   coordinator: per_range 4 per route range (the range partition and its foreign table),
--                per_shard 2 per shard; plus the old table and its indexes.
--   shard:       one partition per route range it owns, plus its tombstone and partition of
--                negative ids, each 2 x (1 + the table's unique indexes) + 2 for TOAST;
--                by_ownership: one table of rows and its view, whatever the ranges.
-- Refused above the lock table's documented size; PostgreSQL may find room for a little
-- more in spare shared memory, but nothing promises it.
CREATE OR REPLACE FUNCTION id_gen.check_lock_room_to_distribute(tbl regclass, layout text) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  n_indexes bigint := (SELECT count(*) FROM pg_constraint c WHERE c.conrelid = tbl AND c.contype IN ('p', 'u'));
  toast bigint := CASE WHEN (SELECT c.reltoastrelid FROM pg_class c WHERE c.oid = tbl) <> 0 THEN 2 ELSE 0 END;
  per_partition bigint := 2 * (1 + n_indexes) + toast;
  -- Catalog and other locks of the same transaction.
  margin constant bigint := 20;
  old_table bigint := 2 * (1 + (SELECT count(*) FROM pg_index i WHERE i.indrelid = tbl)) + toast;
  n_ranges bigint := (SELECT count(*) FROM id_gen.route_ranges);
  n_shards bigint := (SELECT count(DISTINCT rr.shard) FROM id_gen.route_ranges rr);
  s record;
BEGIN
  PERFORM id_gen.require_lock_room('the coordinator', id_gen.lock_table_room(),
    CASE WHEN layout IN ('per_shard', 'by_ownership') THEN 2 * n_shards ELSE 4 * n_ranges END + old_table + margin,
    format('distributing %s', tbl),
    CASE WHEN layout IN ('per_shard', 'by_ownership') THEN format('Layout %s makes one foreign table per shard here (%s shards).', layout, n_shards)
         ELSE format('Layout per_range makes two relations per route range here (%s ranges).', n_ranges) END,
    CASE WHEN layout IN ('per_shard', 'by_ownership') THEN 'or distribute the table over fewer shards.'
         ELSE 'or distribute with layout => ''per_shard'' (one relation per shard here), or merge route ranges first (id_gen.merge_routes).' END);
  FOR s IN SELECT rr.shard, count(*) AS n FROM id_gen.route_ranges rr GROUP BY rr.shard ORDER BY rr.shard LOOP
    PERFORM id_gen.require_lock_room(format('shard %s', s.shard),
      id_gen.remote_exec(s.shard, 'SELECT id_gen.lock_table_room()', 10000)::jsonb,
      CASE WHEN layout = 'by_ownership' THEN 2 * per_partition
           ELSE (s.n + 2) * per_partition + 2 * (1 + n_indexes) END + margin,
      format('distributing %s', tbl),
      CASE WHEN layout = 'by_ownership' THEN format('The shard makes one table of rows and its view, and the table has %s unique index(es)%s.',
                                                    n_indexes, CASE WHEN toast > 0 THEN ' and a TOAST table' ELSE '' END)
           ELSE format('The shard makes one partition per route range it owns (%s), and its table has %s unique index(es)%s per partition.',
                       s.n, n_indexes, CASE WHEN toast > 0 THEN ' and a TOAST table' ELSE '' END) END,
      'or give the shard fewer route ranges first (id_gen.merge_routes, id_gen.move_genes).');
  END LOOP;
END $$;
COMMENT ON FUNCTION id_gen.check_lock_room_to_distribute(regclass, text) IS 'Refuses (53400, with the max_locks_per_transaction that would do) a distribute_table whose partitions would not fit in the lock table of the coordinator or of a shard, before anything is changed.';
REVOKE EXECUTE ON FUNCTION id_gen.check_lock_room_to_distribute(regclass, text) FROM PUBLIC;
