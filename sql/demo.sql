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

-- 4. The seed's test_order table, ported to PostgreSQL: the shard gene of the buyer is
--    baked into order_id, and kept as a generated column for ad hoc queries.
CREATE TABLE test_order (
  order_id   bigint  PRIMARY KEY,
  buyer_uid  bigint  NOT NULL,
  shard_gene integer GENERATED ALWAYS AS (id_gen.shard_of(order_id)) STORED
);
CREATE INDEX ON test_order (buyer_uid);
INSERT INTO test_order (order_id, buyer_uid)
SELECT id_gen.compose_id(id_gen.shard_gene(b), id_gen.next_segment_id('orders')), b
FROM generate_series(1, 5) b, generate_series(1, 2);
SELECT order_id, buyer_uid, shard_gene, id_gen.shard_gene(buyer_uid) = shard_gene AS same_shard
FROM test_order ORDER BY buyer_uid, order_id;

-- 5. What the cache is doing.
SELECT sequence, state, current_first, current_last, current_fill, standby_ready, step,
       refills, waits, worker_pid IS NOT NULL AS worker_running
FROM id_gen.status;
