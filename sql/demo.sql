-- id_gen demo: run by scripts/demo.sh against a throwaway cluster.
\pset footer off
CREATE EXTENSION id_gen;

-- 1. Shard genes: the same numbers Java (Guava), Go and Python compute.
SELECT id_gen.shard_gene(42::bigint)     AS gene_of_42,
       id_gen.shard_gene('alice'::text)  AS gene_of_alice;

-- 2. The ID layout: 0 | gene(16) | seq(47).
SELECT id_gen.compose_id(16043, 5)            AS id,
       id_gen.shard_of(id_gen.compose_id(16043, 5)) AS shard,
       id_gen.seq_of(id_gen.compose_id(16043, 5))   AS seq,
       id_gen.compose_id_bytes(16043, 140737488355328) AS overflow_form;

-- 3. A named sequence served from shared memory, refilled by a background worker.
SELECT id_gen.create_sequence('orders', step => 1000);
CREATE TABLE invoices (
  id      bigint PRIMARY KEY DEFAULT id_gen.next_segment_id('orders'),
  amount  numeric NOT NULL
);
INSERT INTO invoices (amount) SELECT g * 1.5 FROM generate_series(1, 5) g;
SELECT * FROM invoices ORDER BY id;
SELECT count(*) AS bulk_ids FROM id_gen.next_segment_ids('orders', 100000);
-- A large request is one exact reservation: one run, at once (capped per call by max_bulk).
SELECT count(*) AS runs, sum(last_id - first_id + 1) AS ids
FROM id_gen.next_segment_ranges('orders', 50000000);
-- Each sequence has an owner; other roles need a grant, as for GRANT USAGE ON SEQUENCE.
CREATE ROLE demo_app;
SELECT id_gen.grant_usage('orders', 'demo_app');
SELECT name, owner, max_bulk, (SELECT array_agg(grantee) FROM id_gen.usage_grants g
                               WHERE g.kind = 'sequence' AND g.name = s.name) AS grantees
FROM id_gen.sequences s;

-- 4. The seed's test_order table, ported to PostgreSQL: the buyer's shard gene is baked
--    into order_id (by a trigger, since a DEFAULT cannot read other columns); the
--    external order number is encrypted, with its key version beside it.
--    (scripts/demo.sh starts the server with a throwaway key-encryption key.)
SELECT id_gen.create_order_no_key('demo key') AS key_version;
CREATE TABLE test_order (
  order_id    bigint  PRIMARY KEY,
  order_no    uuid    UNIQUE,
  order_no_kv integer,
  buyer_uid   bigint  NOT NULL,
  shard_gene  integer GENERATED ALWAYS AS (id_gen.shard_of(order_id)) STORED
);
CREATE INDEX ON test_order (buyer_uid);
CREATE TRIGGER fill_order_id BEFORE INSERT ON test_order
  FOR EACH ROW EXECUTE FUNCTION id_gen.fill_gene_id('order_id', 'buyer_uid', 'orders');
INSERT INTO test_order (buyer_uid) SELECT b FROM generate_series(1, 4) b, generate_series(1, 2);
UPDATE test_order SET order_no = id_gen.encode_order_no(order_id),
                      order_no_kv = id_gen.order_no_key_version(id_gen.encode_order_no(order_id));
SELECT order_id, buyer_uid, shard_gene, id_gen.shard_gene(buyer_uid) = shard_gene AS same_shard,
       order_no, id_gen.decode_order_no(order_no) = order_id AS decodes
FROM test_order ORDER BY buyer_uid, order_id;
-- A forged number is rejected, never decoded to someone else's order.
DO $$ BEGIN
  PERFORM id_gen.decode_order_no(overlay(order_no::text PLACING 'f' FROM 36 FOR 1)::uuid) FROM test_order LIMIT 1;
EXCEPTION WHEN invalid_parameter_value THEN RAISE NOTICE 'forged order number rejected: %', SQLERRM;
END $$;

-- 5. Routing genes to physical shards, and where the rows live.
SELECT id_gen.set_route(21845, 'shard_a'), id_gen.set_route(43690, 'shard_b'), id_gen.set_route(65535, 'shard_c');
SELECT buyer_uid, id_gen.route_owner(buyer_uid) AS shard,
       bool_and(id_gen.route(order_id) = id_gen.route_owner(buyer_uid)) AS ids_route_alike
FROM test_order GROUP BY buyer_uid ORDER BY 1;
SELECT * FROM id_gen.shard_histogram('test_order', 'order_id');
SELECT * FROM id_gen.route_plan_split('shard_c', ARRAY['shard_c', 'shard_d']);

-- 6. The seeds' other schemes: dated serials, gene in the low bits, snowflake ids.
--    (seed 002: 12-digit merchant number + date + serial, at most 26 characters in test,
--    32 in production; here with a 2-digit partition as well.)
SELECT id_gen.create_serial('settlement', 'YYYYMMDD', width => 6, partition => 1,
                            max_length => 32, time_zone => 'Asia/Shanghai');
SELECT id_gen.next_serial('settlement', '888000000001') AS serial FROM generate_series(1, 3);
SELECT owner, id, id % 16 AS id_mod_16, owner % 16 AS owner_mod_16
FROM (SELECT o AS owner, id_gen.gene_mod_id('orders', o, 4) AS id FROM generate_series(100::bigint, 102) o) s;
SELECT id, id_gen.snowflake_time(id) AS created, id_gen.snowflake_node(id) AS node
FROM (SELECT id_gen.snowflake_id() AS id FROM generate_series(1, 3)) s;

-- 7. What the cache is doing.
SELECT sequence, state, current_first, current_last, current_fill, standby_ready, step,
       refills, waits, worker_pid IS NOT NULL AS worker_running
FROM id_gen.status;
