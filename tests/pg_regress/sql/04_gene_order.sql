-- Owner-affine ids, multi-counter sequences, the overflow path, the trigger, routing.

SELECT id_gen.create_sequence('go', step => 1000) AS created;
-- 100k pseudo-random owners per key type: the id's gene is the owner's gene.
SELECT count(*) AS owners,
       bool_and(id_gen.shard_of(id_gen.gene_order_id('go', o)) = id_gen.shard_gene(o)) AS bigint_gene_ok
FROM (SELECT (x::bigint * 2654435761) % 1000000007 - 500000000 AS o FROM generate_series(1, 100000) x) s;
SELECT bool_and(id_gen.shard_of(id_gen.gene_order_id('go', o)) = id_gen.shard_gene(o)) AS text_gene_ok
FROM (SELECT 'user-' || (x * 7919) AS o FROM generate_series(1, 100000) x) s;
SELECT bool_and(id_gen.shard_of(id_gen.gene_order_id('go', o)) = id_gen.shard_gene(o)) AS uuid_gene_ok
FROM (SELECT md5(x::text)::uuid AS o FROM generate_series(1, 100000) x) s;
-- Per owner: unique and increasing.
SELECT count(DISTINCT id) AS distinct_ids, bool_and(id > prev) AS increasing
FROM (SELECT id, lag(id) OVER (ORDER BY n) AS prev
      FROM (SELECT id_gen.gene_order_id('go', 42::bigint) AS id, n FROM generate_series(1, 500) n) a) b;
SELECT id_gen.shard_of(id_gen.gene_order_id('go', 42::bigint)) AS gene_of_42,
       length(id_gen.gene_order_id_bytes('go', 42::bigint)) AS byte_form_len,
       id_gen.shard_of(id_gen.gene_order_id_bytes('go', 'alice'::text)) AS gene_of_alice;

-- Multi-counter: 4 independent chains, each serving a quarter of the virtual nodes.
SELECT id_gen.create_sequence('g4', step => 100, counters => 4) AS created;
SELECT count(*) AS n, count(DISTINCT id) AS distinct_ids,
       bool_and(id_gen.shard_of(id) = id_gen.shard_gene(o)) AS genes_ok
FROM (SELECT o, id_gen.gene_order_id('g4', o) AS id FROM generate_series(1::bigint, 20000) o) s;
SELECT array_agg(counter_group ORDER BY counter_group) AS groups_in_cache
FROM id_gen.status WHERE sequence = 'g4';
-- Genes of one group come from that group's chain: group = gene * 4 / 65536.
SELECT id_gen.shard_gene(0::bigint) * 4 / 65536 AS group_of_owner_0,
       (SELECT count(*) FROM id_gen.status WHERE sequence = 'g4' AND refills > 0) AS groups_refilled;

-- Overflow: values passing 2^47-1 are an error for bigint ids, the 16-byte form for bytea.
SELECT id_gen.create_sequence('near', start => 140737488355325, step => 2) AS created;
SELECT id_gen.seq_of(id_gen.gene_order_id('near', 7::bigint)) AS v1,
       id_gen.seq_of(id_gen.gene_order_id('near', 7::bigint)) AS v2,
       id_gen.seq_of(id_gen.gene_order_id('near', 7::bigint)) AS v3_max;
SELECT try($$SELECT id_gen.gene_order_id('near', 7::bigint)$$);
SELECT length(b) AS len, id_gen.shard_of(b) = id_gen.shard_gene(7::bigint) AS gene_ok,
       id_gen.seq_of(b) > 140737488355327 AS past_2_47
FROM (SELECT id_gen.gene_order_id_bytes('near', 7::bigint) AS b FROM generate_series(1, 3)) s;
SELECT id_gen.create_sequence('near2', start => 140737488355326, step => 10) AS created;
SELECT array_agg(length(id_gen.gene_order_id_bytes('near2', 'bob'::text))) AS lengths_across_the_boundary
FROM generate_series(1, 4);

-- The trigger: DEFAULT cannot read other columns, a BEFORE INSERT trigger can.
CREATE TABLE t_orders (order_id bigint PRIMARY KEY, buyer_uid bigint, note text);
CREATE TRIGGER fill BEFORE INSERT ON t_orders
  FOR EACH ROW EXECUTE FUNCTION id_gen.fill_gene_id('order_id', 'buyer_uid', 'go');
INSERT INTO t_orders (buyer_uid, note) VALUES (42, 'a'), (42, 'b'), (7, 'c');
INSERT INTO t_orders (buyer_uid, note) SELECT b, 'bulk' FROM generate_series(1, 1000) b;
COPY t_orders (buyer_uid, note) FROM stdin;
42	copy-1
43	copy-2
\.
INSERT INTO t_orders (order_id, buyer_uid, note) VALUES (12345, 42, 'explicit id kept');
SELECT count(*) AS rows,
       bool_and(id_gen.shard_of(order_id) = id_gen.shard_gene(buyer_uid)) FILTER (WHERE note <> 'explicit id kept') AS genes_ok,
       (SELECT order_id FROM t_orders WHERE note = 'explicit id kept') AS explicit
FROM t_orders;
SELECT try($$INSERT INTO t_orders (buyer_uid) VALUES (NULL)$$);
-- On UPDATE: an id is never re-issued; a NULL id is filled; an owner change that keeps
-- the id must stay within the id's gene (else 23514); SET id = NULL gives a new id.
CREATE TABLE t_upd (id bigint PRIMARY KEY, owner bigint, note text);
CREATE TRIGGER fill BEFORE INSERT OR UPDATE ON t_upd
  FOR EACH ROW EXECUTE FUNCTION id_gen.fill_gene_id('id', 'owner', 'go');
INSERT INTO t_upd (owner, note) VALUES (42, 'x');
CREATE TEMP TABLE t_upd_before AS SELECT id FROM t_upd;
UPDATE t_upd SET note = 'y';
SELECT (SELECT id FROM t_upd) = (SELECT id FROM t_upd_before) AS id_kept_on_update;
SELECT try($$UPDATE t_upd SET owner = 7$$);
UPDATE t_upd SET owner = 7, id = NULL;
SELECT id_gen.shard_of(id) = id_gen.shard_gene(7::bigint) AS new_id_for_new_owner,
       id <> (SELECT id FROM t_upd_before) AS id_changed FROM t_upd;
-- An owner of the same gene keeps the id (a gene is shared by many owners).
SELECT o AS same_gene_owner FROM generate_series(8, 200000) o
WHERE id_gen.shard_gene(o::bigint) = id_gen.shard_gene(7::bigint) LIMIT 1 \gset
UPDATE t_upd SET owner = :same_gene_owner;
SELECT count(*) AS kept_with_same_gene_owner FROM t_upd WHERE id_gen.shard_of(id) = id_gen.shard_gene(7::bigint);
DROP TABLE t_upd;
CREATE TABLE t_bytes (id bytea PRIMARY KEY, owner text NOT NULL);
CREATE TRIGGER fill BEFORE INSERT ON t_bytes
  FOR EACH ROW EXECUTE FUNCTION id_gen.fill_gene_id('id', 'owner', 'near2');
INSERT INTO t_bytes (owner) VALUES ('carol'), ('dave');
SELECT owner, length(id) AS len, id_gen.shard_of(id) = id_gen.shard_gene(owner) AS gene_ok FROM t_bytes ORDER BY owner;
-- Wrong set-ups get clear errors.
CREATE TABLE t_bad (id text, owner bigint, n numeric);
CREATE TRIGGER f1 BEFORE INSERT ON t_bad FOR EACH ROW EXECUTE FUNCTION id_gen.fill_gene_id('id', 'owner', 'go');
SELECT try($$INSERT INTO t_bad (owner) VALUES (1)$$);
DROP TRIGGER f1 ON t_bad;
CREATE TRIGGER f2 BEFORE INSERT ON t_bad FOR EACH ROW EXECUTE FUNCTION id_gen.fill_gene_id('nope', 'owner', 'go');
SELECT try($$INSERT INTO t_bad (owner) VALUES (1)$$);
DROP TRIGGER f2 ON t_bad;
CREATE TRIGGER f3 BEFORE INSERT ON t_bad FOR EACH ROW EXECUTE FUNCTION id_gen.fill_gene_id('id', 'owner');
SELECT try($$INSERT INTO t_bad (owner) VALUES (1)$$);
DROP TRIGGER f3 ON t_bad;
ALTER TABLE t_bad ADD COLUMN bid bigint;
CREATE TRIGGER f4 BEFORE INSERT ON t_bad FOR EACH ROW EXECUTE FUNCTION id_gen.fill_gene_id('bid', 'n', 'go');
SELECT try($$INSERT INTO t_bad (n) VALUES (1)$$);
DROP TRIGGER f4 ON t_bad;
CREATE TRIGGER f5 AFTER INSERT ON t_bad FOR EACH ROW EXECUTE FUNCTION id_gen.fill_gene_id('bid', 'owner', 'go');
SELECT try($$INSERT INTO t_bad (owner) VALUES (1)$$);
DROP TRIGGER f5 ON t_bad;
CREATE TRIGGER f6 BEFORE INSERT ON t_bad FOR EACH ROW EXECUTE FUNCTION id_gen.fill_gene_id('bid', 'owner', 'no_such_seq');
SELECT try($$INSERT INTO t_bad (owner) VALUES (1)$$);
DROP TABLE t_bad;

-- Routing.
SELECT try($$SELECT id_gen.route_gene(5)$$);
SELECT id_gen.set_route(65535, 'solo');
SELECT id_gen.route_gene(0) AS g0, id_gen.route_gene(65535) AS g65535;
SELECT id_gen.set_route(32767, 'east');
SELECT id_gen.set_route(65535, 'west');
SELECT * FROM id_gen.route_ranges;
SELECT id_gen.route_gene(0) AS g0, id_gen.route_gene(32767) AS g32767,
       id_gen.route_gene(32768) AS g32768, id_gen.route_gene(65535) AS g65535;
-- 100k owners: routing an id and routing its owner agree.
SELECT bool_and(id_gen.route(id_gen.gene_order_id('go', o)) = id_gen.route_owner(o)) AS bigint_routes_agree
FROM generate_series(1::bigint, 100000) o;
SELECT bool_and(id_gen.route(id_gen.gene_order_id_bytes('go', o)) = id_gen.route_owner(o)) AS text_routes_agree
FROM (SELECT 'u' || x AS o FROM generate_series(1, 20000) x) s;
SELECT bool_and(id_gen.route(id_gen.encode_order_no(id_gen.gene_order_id('go', o))) = id_gen.route_owner(o)) AS order_no_routes_agree
FROM generate_series(1::bigint, 2000) o;
-- A gap above the highest bound is an error, unless ring => true wraps around.
SELECT id_gen.drop_route(65535);
SELECT try($$SELECT id_gen.route_gene(40000)$$);
SELECT id_gen.route_gene(40000, ring => true) AS wrapped;
SELECT id_gen.set_route(65535, 'west');
SELECT try($$SELECT id_gen.drop_route(12)$$);
SELECT try($$SELECT id_gen.set_route(65536, 'x')$$);
SELECT try($$SELECT id_gen.set_route(-1, 'x')$$);
SELECT try($$SELECT id_gen.set_route(100, '')$$);
SELECT try($$SELECT id_gen.route_gene(70000)$$);
-- Planning a split of a hot shard, and a merge.
SELECT * FROM id_gen.route_plan_split('west', ARRAY['west', 'north', 'south']);
SELECT try($$SELECT * FROM id_gen.route_plan_split('nowhere', ARRAY['a'])$$);
SELECT try($$SELECT * FROM id_gen.route_plan_split('west', ARRAY[]::text[])$$);
SELECT * FROM id_gen.route_plan_merge(ARRAY['east', 'west'], 'all');
-- Where do a table's rows live?
SELECT * FROM id_gen.shard_histogram('t_orders', 'order_id');
SELECT sum(rows) AS rows, count(*) AS buckets FROM id_gen.gene_histogram('t_orders', 'order_id', 8);
SELECT try($$SELECT * FROM id_gen.gene_histogram('t_orders', 'order_id', 0)$$);

-- The seed's demo table, ported: owner-affine order_id, external order_no (64-bit form
-- with its key version beside it, as in the seed), shard gene kept for ad hoc queries.
CREATE TABLE test_order (
  order_id    bigint  PRIMARY KEY,
  order_no    bigint  NOT NULL,
  order_no_kv integer NOT NULL,
  buyer_uid   bigint  NOT NULL,
  shard_gene  integer GENERATED ALWAYS AS (id_gen.shard_of(order_id)) STORED
);
CREATE UNIQUE INDEX test_order_no ON test_order (order_no);
CREATE INDEX test_order_buyer ON test_order (buyer_uid);
INSERT INTO test_order (order_id, order_no, order_no_kv, buyer_uid)
SELECT id, id_gen.encode_order_no64(id, 1), 1, b
FROM (SELECT id_gen.gene_order_id('go', b) AS id, b FROM generate_series(1::bigint, 50) b, generate_series(1, 4)) s;
-- By buyer: one shard for all of a buyer's orders.
SELECT buyer_uid, count(*) AS orders, count(DISTINCT shard_gene) AS shards,
       min(shard_gene) = id_gen.shard_gene(buyer_uid) AS gene_is_buyers
FROM test_order WHERE buyer_uid IN (1, 2, 3) GROUP BY buyer_uid ORDER BY buyer_uid;
-- By external number: decode (a privileged role) or look it up; both give the order.
SELECT bool_and(id_gen.decode_order_no64(order_no, order_no_kv) = order_id) AS decode_matches,
       bool_and((SELECT t2.order_id FROM test_order t2 WHERE t2.order_no = t.order_no) = order_id) AS lookup_matches,
       bool_and(id_gen.shard_of(order_no) = shard_gene) AS gene_readable_from_order_no
FROM test_order t;
