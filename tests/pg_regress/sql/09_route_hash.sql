-- Routing by shard slots (sql/cluster/route_hash.sql, src/route_hash.rs): a table
-- partitioned BY HASH (id id_gen.gene_route_ops), one partition per shard slot, is pruned
-- and routed by the route table, also after route changes, in and across transactions.
-- (Local partitions stand in for a coordinator's foreign tables: the routing is the same.)
DELETE FROM id_gen.shard_routes;
-- 64 ranges of 1024 genes, alternating between two shards; a third shard without a slot.
SELECT count(id_gen.set_route(k * 1024 + 1023, CASE WHEN k % 2 = 0 THEN 'east' ELSE 'west' END)) AS ranges
FROM generate_series(0, 63) k;
SELECT id_gen.assign_shard_slot('east') AS east, id_gen.assign_shard_slot('west') AS west,
       id_gen.assign_shard_slot('east') AS east_again;
SELECT shard, slot FROM id_gen.shard_slots ORDER BY slot;
SELECT try($$SELECT id_gen.assign_shard_slot('')$$);
SELECT id_gen.route_slot(id_gen.gene_first_id(0)) AS gene_0, id_gen.route_slot(id_gen.gene_last_id(1024)) AS gene_1024,
       id_gen.route_slot(-5) AS negative_id;

CREATE TABLE rh (id bigint NOT NULL, v text) PARTITION BY HASH (id id_gen.gene_route_ops);
CREATE TABLE rh_east PARTITION OF rh FOR VALUES WITH (MODULUS 1024, REMAINDER 0);
CREATE TABLE rh_west PARTITION OF rh FOR VALUES WITH (MODULUS 1024, REMAINDER 1);
-- Tuple routing: one row per gene; every row lands in its route's partition.
INSERT INTO rh SELECT id_gen.compose_id(g, 1), 'x' FROM generate_series(0, 65535) g;
SELECT tableoid::regclass AS partition, count(*) AS rows,
       bool_and(id_gen.route(id) = CASE tableoid WHEN 'rh_east'::regclass THEN 'east' ELSE 'west' END) AS all_routed_here
FROM rh GROUP BY 1 ORDER BY 1;
-- A negative id has no gene, and no partition.
SELECT try($$INSERT INTO rh VALUES (-1, 'x')$$);
-- Pruning at planning, and at executor start in a generic plan.
EXPLAIN (COSTS OFF) SELECT * FROM rh WHERE id = id_gen.compose_id(1500, 1);
PREPARE by_id(bigint) AS SELECT tableoid::regclass, v FROM rh WHERE id = $1;
SET plan_cache_mode = force_generic_plan;
EXPLAIN (COSTS OFF) EXECUTE by_id(id_gen.compose_id(1500, 1));
EXPLAIN (COSTS OFF) EXECUTE by_id(id_gen.compose_id(2500, 1));
-- A route change in this transaction re-routes at once, and is forgotten by its rollback.
BEGIN;
SELECT id_gen.set_route(1023, 'west');
SELECT id_gen.route_slot(id_gen.compose_id(5, 1)) AS slot_inside;
EXPLAIN (COSTS OFF) EXECUTE by_id(id_gen.compose_id(5, 1));
ROLLBACK;
SELECT id_gen.route_slot(id_gen.compose_id(5, 1)) AS slot_after_rollback;
EXPLAIN (COSTS OFF) EXECUTE by_id(id_gen.compose_id(5, 1));
-- Committed: the plan of a custom plan is pruned anew.
SET plan_cache_mode = force_custom_plan;
EXPLAIN (COSTS OFF) EXECUTE by_id(id_gen.compose_id(5, 1));
SELECT id_gen.set_route(1023, 'west');
EXPLAIN (COSTS OFF) EXECUTE by_id(id_gen.compose_id(5, 1));
SELECT id_gen.set_route(1023, 'east');
RESET plan_cache_mode;
-- A shard without a slot: its genes hash to slot 1023, which no partition has.
SELECT id_gen.set_route(1023, 'north');
SELECT id_gen.route_slot(id_gen.compose_id(5, 1)) AS slot_of_north;
SELECT count(*) AS found_by_id FROM rh WHERE id = id_gen.compose_id(5, 1);
SELECT try($$INSERT INTO rh VALUES (id_gen.compose_id(6, 2), 'y')$$);
SELECT id_gen.set_route(1023, 'east');
-- Hash joins and aggregates of bigints keep PostgreSQL's own hash: it takes the first hash
-- family of bigint = in pg_amop's order (amopfamily), and that is integer_ops, not ours.
SELECT (SELECT f.opfname FROM pg_opfamily f WHERE f.oid = a.amopfamily) AS first_hash_family
FROM pg_amop a WHERE a.amopopr = '=(bigint,bigint)'::regoperator AND a.amopmethod = (SELECT m.oid FROM pg_am m WHERE m.amname = 'hash') ORDER BY a.amopfamily LIMIT 1;
SET enable_mergejoin = off;
SET enable_nestloop = off;
SELECT count(*) AS joined FROM rh a JOIN rh b USING (id);
SELECT count(*) AS distinct_ids FROM (SELECT DISTINCT id FROM rh) d;
RESET enable_mergejoin;
RESET enable_nestloop;
-- Two-sided id ranges (src/route_hash/planner.rs): a range within the genes of one shard
-- goes to that shard's partition alone, whatever its bounds are written with; one across
-- two shards keeps both; the rows found are the same either way.
EXPLAIN (COSTS OFF) SELECT * FROM rh WHERE id BETWEEN id_gen.owner_first_id(42) AND id_gen.owner_last_id(42);
SELECT count(*) AS rows_of_the_gene, bool_and(id_gen.shard_of(id) = id_gen.shard_gene(42::bigint)) AS all_of_it
FROM rh WHERE id BETWEEN id_gen.owner_first_id(42) AND id_gen.owner_last_id(42);
EXPLAIN (COSTS OFF) SELECT count(*) FROM rh WHERE id >= 0 AND id < id_gen.gene_first_id(1024);
EXPLAIN (COSTS OFF) SELECT count(*) FROM rh WHERE id_gen.gene_last_id(2047) >= id AND id > id_gen.gene_last_id(1023);
EXPLAIN (COSTS OFF) SELECT count(*) FROM rh WHERE id BETWEEN 0 AND id_gen.gene_first_id(1024);
SELECT count(*) AS across_two_shards FROM rh WHERE id BETWEEN 0 AND id_gen.gene_first_id(1024);
EXPLAIN (COSTS OFF) SELECT count(*) FROM rh WHERE id >= id_gen.owner_first_id(42);
-- Through a view (a per_shard distributed table with a sequence is one) and a subquery:
-- the bounds on their output reach the table; not through a LIMIT.
CREATE VIEW rh_view AS SELECT * FROM rh;
EXPLAIN (COSTS OFF) SELECT v FROM rh_view WHERE id BETWEEN id_gen.owner_first_id(42) AND id_gen.owner_last_id(42);
EXPLAIN (COSTS OFF) SELECT n FROM (SELECT id AS n FROM rh WHERE v IS NOT NULL) s
WHERE n >= id_gen.owner_first_id(42) AND n <= id_gen.owner_last_id(42);
EXPLAIN (COSTS OFF) SELECT id FROM (SELECT id FROM rh LIMIT 5) s WHERE id BETWEEN id_gen.owner_first_id(42) AND id_gen.owner_last_id(42);
DROP VIEW rh_view;
-- Parameters of a custom plan count; the plan cache keeps custom plans (the generic one,
-- over every partition, costs more).
PREPARE by_owner(bigint) AS SELECT count(*) FROM rh WHERE id BETWEEN id_gen.owner_first_id($1) AND id_gen.owner_last_id($1);
EXECUTE by_owner(42); EXECUTE by_owner(42); EXECUTE by_owner(42); EXECUTE by_owner(42); EXECUTE by_owner(42);
EXPLAIN (COSTS OFF) EXECUTE by_owner(42);
EXPLAIN (COSTS OFF) EXECUTE by_owner(7);
-- UPDATE and DELETE by an owner's range.
EXPLAIN (COSTS OFF) UPDATE rh SET v = 'y' WHERE id BETWEEN id_gen.owner_first_id(42) AND id_gen.owner_last_id(42);
UPDATE rh SET v = 'y' WHERE id BETWEEN id_gen.owner_first_id(42) AND id_gen.owner_last_id(42);
SELECT count(*) FILTER (WHERE v = 'y') AS updated FROM rh;
-- A role with privileges on the parent only: its statements are left over every partition.
CREATE ROLE idg_rh_reader;
GRANT SELECT ON rh TO idg_rh_reader;
SET ROLE idg_rh_reader;
EXPLAIN (COSTS OFF) SELECT count(*) FROM rh WHERE id BETWEEN id_gen.owner_first_id(42) AND id_gen.owner_last_id(42);
SELECT count(*) AS rows_of_the_gene FROM rh WHERE id BETWEEN id_gen.owner_first_id(42) AND id_gen.owner_last_id(42);
RESET ROLE;
GRANT SELECT ON rh_east, rh_west TO idg_rh_reader;
SET ROLE idg_rh_reader;
EXPLAIN (COSTS OFF) SELECT count(*) FROM rh WHERE id BETWEEN id_gen.owner_first_id(42) AND id_gen.owner_last_id(42);
RESET ROLE;
DROP OWNED BY idg_rh_reader;
DROP ROLE idg_rh_reader;
-- A partition whose columns are numbered differently from its parent's is left alone.
CREATE TABLE rh2 (id bigint NOT NULL, gone int, v text) PARTITION BY HASH (id id_gen.gene_route_ops);
ALTER TABLE rh2 DROP COLUMN gone;
CREATE TABLE rh2_east PARTITION OF rh2 FOR VALUES WITH (MODULUS 1024, REMAINDER 0);
CREATE TABLE rh2_west PARTITION OF rh2 FOR VALUES WITH (MODULUS 1024, REMAINDER 1);
INSERT INTO rh2 SELECT id, v FROM rh;
EXPLAIN (COSTS OFF) SELECT v FROM rh2 WHERE id BETWEEN id_gen.owner_first_id(42) AND id_gen.owner_last_id(42);
SELECT count(*) AS rows_of_the_gene FROM rh2 WHERE id BETWEEN id_gen.owner_first_id(42) AND id_gen.owner_last_id(42);
DROP TABLE rh2;
DROP TABLE rh;
-- The coordinator's partitions are created from one string (sql/cluster/distribute.sql,
-- ensure_partition): names with a % in them are names like any other. A range partition,
-- and a slot partition (a foreign table; it never connects here).
CREATE EXTENSION postgres_fdw;
CREATE SERVER "sh%ard" FOREIGN DATA WRAPPER postgres_fdw;
CREATE TABLE "odd%_shards" ("i%d" bigint NOT NULL) PARTITION BY RANGE ("i%d");
CREATE TABLE "odd%h_shards" ("i%d" bigint NOT NULL) PARTITION BY HASH ("i%d" id_gen.gene_route_ops);
CREATE TABLE odd_row AS SELECT jsonb_populate_record(NULL::id_gen.distributed_tables,
  '{"schema_name": "public", "table_name": "odd%", "partitioned_name": "odd%_shards", "id_column": "i%d",
    "shard_stem": "odd%", "coordinator_stem": "odd%", "layout": "per_range"}') AS d;
CREATE TABLE odd_hash_row AS SELECT jsonb_populate_record(NULL::id_gen.distributed_tables,
  '{"schema_name": "public", "table_name": "odd%h", "partitioned_name": "odd%h_shards", "id_column": "i%d",
    "shard_stem": "odd%h", "coordinator_stem": "odd%h", "layout": "per_shard"}') AS d;
SELECT id_gen.range_partition(d, 0, 1023) AS range_partition, id_gen.range_partition(d, 0, 1023) AS found_again FROM odd_row;
SELECT id_gen.slot_partition(d, 'sh%ard') AS slot_partition FROM odd_hash_row;
SELECT c.relname, c.relkind, pg_get_expr(c.relpartbound, c.oid) AS bound
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent IN ('"odd%_shards"'::regclass, '"odd%h_shards"'::regclass) ORDER BY 1;
-- A relation that has a partition's name but is not that partition.
CREATE TABLE "odd%_g1024_2047" (x int);
SELECT try($$SELECT id_gen.range_partition(d, 1024, 2047) FROM odd_row$$);
DROP TABLE "odd%_shards", "odd%h_shards", "odd%_g1024_2047", odd_row, odd_hash_row;
DROP SERVER "sh%ard";
DROP EXTENSION postgres_fdw;
DELETE FROM id_gen.shard_slots;
DELETE FROM id_gen.shard_routes;
SELECT id_gen.set_route(32767, 'east'), id_gen.set_route(65535, 'west');
