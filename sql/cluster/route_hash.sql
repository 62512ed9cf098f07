-- Routing by shard slots on the coordinator: the hash operator class id_gen.gene_route_ops,
-- whose extended hash function (Rust, src/route_hash.rs) maps a bigint id to the slot of
-- the shard its gene routes to, and what keeps its answers current. A table partitioned
-- BY HASH (id id_gen.gene_route_ops) with one partition per shard, FOR VALUES WITH
-- (MODULUS 1024, REMAINDER <slot of the shard>), is pruned and routed by PostgreSQL itself
-- (`WHERE id = ...` at planning or, in a generic plan, at executor start; INSERT and COPY by
-- tuple routing), and has one relation per shard however many route ranges there are
-- (docs/design.md §11.7). Code only (CREATE OR REPLACE, or made once when missing); the
-- table id_gen.shard_slots is in sql/install/cluster_catalog.sql.
--
-- Invariants:
--   * A shard's slot never changes and is never given to another shard: partition bounds
--     name slots, and pg_dump carries both (id_gen.shard_slots is a config table).
--   * Every committed change of id_gen.shard_routes or id_gen.shard_slots invalidates the
--     plans of every table partitioned by id_gen.gene_route_ops and the slots cached by
--     every backend (statement triggers calling id_gen.route_hash_changed()).
--   * Slot 1023 is no shard's: a gene without a route hashes there, and no partition has it.

-- No CREATE OR REPLACE for operator classes: made by the first install or update that runs
-- this file. Only partitioning uses it: equality of bigints keeps the built-in hash family
-- (integer_ops, whose lower OID PostgreSQL finds first) for hash joins and aggregates.
DO $make$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_opfamily f JOIN pg_catalog.pg_namespace n ON n.oid = f.opfnamespace
                 WHERE n.nspname = 'id_gen' AND f.opfname = 'gene_route_ops') THEN
    CREATE OPERATOR FAMILY id_gen.gene_route_ops USING hash;
    CREATE OPERATOR CLASS id_gen.gene_route_ops FOR TYPE pg_catalog.int8 USING hash FAMILY id_gen.gene_route_ops AS
      OPERATOR 1 pg_catalog.= (pg_catalog.int8, pg_catalog.int8),
      FUNCTION 1 id_gen.gene_route_hash(pg_catalog.int8),
      FUNCTION 2 id_gen.gene_route_hash_extended(pg_catalog.int8, pg_catalog.int8);
  END IF;
END $make$;
COMMENT ON OPERATOR FAMILY id_gen.gene_route_ops USING hash IS 'The family of id_gen.gene_route_ops (partitioning only).';
COMMENT ON OPERATOR CLASS id_gen.gene_route_ops USING hash IS 'Partitions a table by the shard its bigint ids route to: PARTITION BY HASH (id id_gen.gene_route_ops), one partition per shard FOR VALUES WITH (MODULUS 1024, REMAINDER <its slot in id_gen.shard_slots>). Pruning of WHERE id = ... and tuple routing follow id_gen.shard_routes as committed.';

CREATE OR REPLACE FUNCTION id_gen.assign_shard_slot(shard text) RETURNS integer
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  s integer;
BEGIN
  PERFORM id_gen.require_superuser('assign shard slots');
  SELECT t.slot INTO s FROM id_gen.shard_slots t WHERE t.shard = assign_shard_slot.shard;
  IF FOUND THEN
    RETURN s;
  END IF;
  PERFORM id_gen.check_route(0, shard);
  LOCK TABLE id_gen.shard_slots IN SHARE ROW EXCLUSIVE MODE;
  SELECT min(g) INTO s FROM generate_series(0, 1022) g
  WHERE NOT EXISTS (SELECT FROM id_gen.shard_slots t WHERE t.slot = g);
  IF s IS NULL THEN
    RAISE EXCEPTION 'id_gen: every shard slot (0 .. 1022) is taken'
      USING ERRCODE = '54000', HINT = 'A coordinator partitions by at most 1023 shards; slots of shards that are gone are kept (their partitions name them).';
  END IF;
  INSERT INTO id_gen.shard_slots (shard, slot) VALUES (shard, s)
  ON CONFLICT ON CONSTRAINT shard_slots_pkey DO NOTHING;
  RETURN (SELECT t.slot FROM id_gen.shard_slots t WHERE t.shard = assign_shard_slot.shard);
END $$;
COMMENT ON FUNCTION id_gen.assign_shard_slot(text) IS 'The slot of a shard in id_gen.shard_slots, given the lowest free one when it has none yet (its hash partitions are FOR VALUES WITH (MODULUS 1024, REMAINDER slot)). Superuser only.';
REVOKE EXECUTE ON FUNCTION id_gen.assign_shard_slot(text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.follow_route_slots() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  PERFORM id_gen.route_hash_changed();
  RETURN NULL;
END $$;
COMMENT ON FUNCTION id_gen.follow_route_slots() IS 'Statement trigger on id_gen.shard_routes and id_gen.shard_slots: re-plans the tables partitioned by id_gen.gene_route_ops and makes every backend reload its shard slots once the change commits (id_gen.route_hash_changed).';
REVOKE EXECUTE ON FUNCTION id_gen.follow_route_slots() FROM PUBLIC;

CREATE OR REPLACE TRIGGER id_gen_route_slots
AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON id_gen.shard_routes
FOR EACH STATEMENT EXECUTE FUNCTION id_gen.follow_route_slots();
CREATE OR REPLACE TRIGGER id_gen_route_slots
AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON id_gen.shard_slots
FOR EACH STATEMENT EXECUTE FUNCTION id_gen.follow_route_slots();
