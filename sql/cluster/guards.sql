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
