-- A table laid out by ownership (docs/design.md §12; src/routing_guard/owned_scan.rs): one
-- relation holds the rows, what the shard owns of it is recorded in id_gen.shard_tables, and
-- its trigger id_gen_owned_rows refuses writes of genes not owned. A read that selects genes
-- not owned by id fails with IG001 whatever the plan (there is no tombstone to prune to),
-- even when the relation holds rows of them (a move's copies before its flip); a read that
-- selects no id (a whole-table scan) answers with what the relation holds.
CREATE TABLE ow (id bigint PRIMARY KEY, v text NOT NULL);
CREATE TRIGGER id_gen_owned_rows BEFORE INSERT OR UPDATE ON ow FOR EACH ROW EXECUTE FUNCTION id_gen.refuse_rows_not_owned('id');
INSERT INTO id_gen.shard_tables (schema_name, table_name, id_column, gene_ranges, definition, stem)
VALUES ('public', 'ow', 'id', ARRAY[int4range(0, 16), int4range(32, 48)], '', 'ow');
SELECT id_gen.shard_routing_changed();
-- The plan's scans and joins (EXPLAIN without ANALYZE runs no check), to show which plan
-- each refusal below met.
CREATE FUNCTION pg_temp.plan_of(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE p text;
BEGIN
  EXECUTE 'EXPLAIN (FORMAT JSON, COSTS OFF) ' || q INTO p;
  RETURN (SELECT string_agg(DISTINCT m[1], ', ' ORDER BY m[1])
          FROM regexp_matches(p, '"Node Type": "([^"]*(Scan|Join|Loop))"', 'g') m);
END $$;
-- Writes: owned genes go in, others fail with IG001.
INSERT INTO ow VALUES (id_gen.compose_id(5, 1), 'owned 5'), (id_gen.compose_id(33, 1), 'owned 33');
SELECT try($$INSERT INTO ow VALUES (id_gen.compose_id(20, 1), 'not owned')$$);
SELECT try($$UPDATE ow SET id = id_gen.compose_id(20, 1) WHERE id = id_gen.compose_id(5, 1)$$);
-- A row of a gene not owned, as a move's apply worker writes it (the trigger does not fire
-- for replication).
SET session_replication_role = replica;
INSERT INTO ow VALUES (id_gen.compose_id(20, 2), 'a copy of gene 20');
RESET session_replication_role;
-- Reads by id: owned, one gene not owned (with and without a row there), points and ranges.
SELECT v FROM ow WHERE id = id_gen.compose_id(5, 1);
SELECT try($$SELECT v FROM ow WHERE id = id_gen.compose_id(20, 2)$$);
SELECT try($$SELECT v FROM ow WHERE id = id_gen.compose_id(21, 1)$$);
SELECT count(*) FROM ow WHERE id = ANY (ARRAY[id_gen.compose_id(5, 1), id_gen.compose_id(33, 1)]);
SELECT try($$SELECT count(*) FROM ow WHERE id = ANY (ARRAY[id_gen.compose_id(5, 1), id_gen.compose_id(20, 2)])$$);
SELECT count(*) AS int4_points FROM ow WHERE id IN (5::integer, 7::integer);
SELECT try($$SELECT count(*) FROM ow WHERE id = id_gen.compose_id(5, 1) OR id = id_gen.compose_id(20, 2)$$);
SELECT try($$SELECT v FROM ow WHERE id = (SELECT id_gen.compose_id(20, 2))$$) AS init_plan;
-- An error of the bound's evaluation (the InitPlan runs first in the check) is the statement's.
SELECT try($$SELECT v FROM ow WHERE id = (SELECT 1 / count(*) FROM ow WHERE false)$$) AS bound_error;
SELECT count(*) FROM ow WHERE id BETWEEN id_gen.gene_first_id(32) AND id_gen.gene_last_id(47);
SELECT try($$SELECT count(*) FROM ow WHERE id BETWEEN id_gen.gene_first_id(10) AND id_gen.gene_last_id(40)$$);
SELECT try($$SELECT count(*) FROM ow WHERE id >= id_gen.gene_first_id(15) AND id < id_gen.gene_first_id(17)$$);
-- AND-ed predicates intersect: a point that a range beside it excludes is not checked.
SELECT count(*) AS points_below FROM ow WHERE id = ANY (ARRAY[id_gen.compose_id(5, 1), id_gen.compose_id(20, 2)]) AND id < id_gen.gene_first_id(16);
SELECT try($$SELECT count(*) FROM ow WHERE id = ANY (ARRAY[id_gen.compose_id(5, 1), id_gen.compose_id(20, 2)]) AND id > id_gen.gene_first_id(1)$$);
-- OR-ed ranges unite: each is checked over the genes it spans.
SELECT count(*) AS two_ranges FROM ow WHERE id BETWEEN id_gen.gene_first_id(1) AND id_gen.gene_last_id(6) OR id BETWEEN id_gen.gene_first_id(40) AND id_gen.gene_last_id(41);
SELECT try($$SELECT count(*) FROM ow WHERE id BETWEEN id_gen.gene_first_id(1) AND id_gen.gene_last_id(6) OR id BETWEEN id_gen.gene_first_id(47) AND id_gen.gene_last_id(48)$$);
-- A point OR a one-sided range selects ids of many genes: not a lookup by id.
SELECT count(*) AS point_or_above FROM ow WHERE id = id_gen.compose_id(20, 2) OR id > id_gen.gene_first_id(30);
-- IS NOT DISTINCT FROM is a point.
SELECT v AS not_distinct FROM ow WHERE id IS NOT DISTINCT FROM id_gen.compose_id(5, 1);
SELECT try($$SELECT v FROM ow WHERE id IS NOT DISTINCT FROM id_gen.compose_id(20, 2)$$);
-- A bound that is not a plain value is not evaluated by the check: the scan, which stops at
-- its first false predicate, would not evaluate 10 / $1 here.
-- (A sequential scan: an index scan evaluates its keys itself, guard or not.)
SET plan_cache_mode = force_generic_plan;
SET enable_indexscan = off;
SET enable_bitmapscan = off;
PREPARE guarded_div(integer) AS SELECT count(*) FROM ow WHERE ($1 <> 0 AND id = 10 / $1) OR id = id_gen.compose_id(5, 1);
EXECUTE guarded_div(0);
DEALLOCATE guarded_div;
RESET enable_indexscan;
RESET enable_bitmapscan;
RESET plan_cache_mode;
-- Not selected by id: a whole-table read, a one-sided bound, another column.
SELECT count(*) AS whole_table FROM ow;
SELECT count(*) AS one_sided FROM ow WHERE id > 0;
SELECT count(*) AS by_value FROM ow WHERE v LIKE 'a copy%';
-- A prepared statement's generic plan (the id a parameter), a sequential scan, a bitmap scan.
SET plan_cache_mode = force_generic_plan;
PREPARE by_id(bigint) AS SELECT v FROM ow WHERE id = $1;
EXECUTE by_id(id_gen.compose_id(33, 1));
\set VERBOSITY terse
EXECUTE by_id(id_gen.compose_id(20, 2));
\set VERBOSITY default
RESET plan_cache_mode;
VACUUM ANALYZE ow;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT pg_temp.plan_of(q), try(q) FROM (VALUES ($$SELECT id FROM ow WHERE id = id_gen.compose_id(20, 2)$$)) v(q);
SET enable_seqscan = on;
SET enable_indexscan = off;
SET enable_indexonlyscan = off;
SELECT pg_temp.plan_of(q), try(q) FROM (VALUES ($$SELECT v FROM ow WHERE id = id_gen.compose_id(20, 2)$$)) v(q);
SET enable_seqscan = off;
SET enable_bitmapscan = on;
SELECT pg_temp.plan_of(q), try(q) FROM (VALUES ($$SELECT v FROM ow WHERE id = ANY (ARRAY[id_gen.compose_id(20, 2), id_gen.compose_id(5, 1)])$$)) v(q);
RESET enable_seqscan;
RESET enable_indexscan;
RESET enable_indexonlyscan;
RESET enable_bitmapscan;
-- Joins by id with values from outside: a nested loop (the id a parameter of the inner
-- scan), a hash join and a merge join (the value side watched).
CREATE TABLE wanted (i bigint);
INSERT INTO wanted VALUES (id_gen.compose_id(5, 1)), (id_gen.compose_id(21, 1));
ANALYZE wanted, ow;
SET enable_hashjoin = off;
SET enable_mergejoin = off;
SELECT pg_temp.plan_of(q), try(q) FROM (VALUES ($$SELECT count(*) FROM wanted w JOIN ow ON ow.id = w.i$$)) v(q);
SET enable_seqscan = off;  -- (the inner side an index scan by the outer row's id)
SELECT pg_temp.plan_of(q), try(q) FROM (VALUES ($$SELECT count(*) FROM wanted w JOIN ow ON ow.id = w.i$$)) v(q);
RESET enable_seqscan;
SET enable_nestloop = off;
SET enable_hashjoin = on;
SELECT pg_temp.plan_of(q), try(q) FROM (VALUES ($$SELECT count(*) FROM wanted w JOIN ow ON ow.id = w.i$$)) v(q);
SET enable_hashjoin = off;
SET enable_mergejoin = on;
SELECT pg_temp.plan_of(q), try(q) FROM (VALUES ($$SELECT count(*) FROM wanted w JOIN ow ON ow.id = w.i$$)) v(q);
RESET enable_hashjoin;
RESET enable_mergejoin;
RESET enable_nestloop;
-- A nested loop whose first outer row is owned and whose second is not: the inner scan is
-- checked again after each rescan, not only when it first runs.
SET enable_hashjoin = off;
SET enable_mergejoin = off;
SET enable_seqscan = off;
SELECT pg_temp.plan_of(q), try(q) FROM (VALUES ($$SELECT count(*) FROM (VALUES (1, id_gen.compose_id(5, 1)), (2, id_gen.compose_id(21, 1))) w(n, i) JOIN ow ON ow.id = w.i$$)) v(q);
RESET enable_hashjoin;
RESET enable_mergejoin;
RESET enable_seqscan;
DELETE FROM wanted WHERE i = id_gen.compose_id(21, 1);
SELECT count(*) AS owned_join FROM wanted w JOIN ow ON ow.id = w.i;
-- A join by id between two tables laid out by ownership on this shard is the shard's own
-- (as between partitions): the ids come from a table of its own, read through its view.
CREATE TABLE ow_items (id bigint PRIMARY KEY, ow_id bigint NOT NULL);
CREATE TRIGGER id_gen_owned_rows BEFORE INSERT OR UPDATE ON ow_items FOR EACH ROW EXECUTE FUNCTION id_gen.refuse_rows_not_owned('id');
INSERT INTO id_gen.shard_tables (schema_name, table_name, id_column, gene_ranges, definition, stem)
VALUES ('public', 'ow_items', 'id', ARRAY[int4range(0, 16), int4range(32, 48)], '', 'ow_items');
SELECT id_gen.shard_routing_changed();
INSERT INTO ow_items VALUES (id_gen.compose_id(5, 7), id_gen.compose_id(5, 1));
SET session_replication_role = replica;
INSERT INTO ow_items VALUES (id_gen.compose_id(20, 7), id_gen.compose_id(20, 2));
RESET session_replication_role;
ANALYZE ow_items;
SET enable_nestloop = off;
SET enable_mergejoin = off;
SELECT pg_temp.plan_of(q), (SELECT count(*) FROM ow_items i JOIN ow ON ow.id = i.ow_id) AS joined FROM (VALUES ($$SELECT count(*) FROM ow_items i JOIN ow ON ow.id = i.ow_id$$)) v(q);
RESET enable_nestloop;
RESET enable_mergejoin;
-- The view that keeps owned rows: the copy is not shown, and selecting it by id fails.
CREATE VIEW ow_owned AS SELECT * FROM ow WHERE id_gen.shard_owns('ow'::regclass, id);
SELECT string_agg(v, ', ' ORDER BY id) AS owned_rows FROM ow_owned;
SELECT try($$SELECT v FROM ow_owned WHERE id = id_gen.compose_id(20, 2)$$);
-- Through both views, only rows owned by both tables join.
CREATE VIEW ow_items_owned AS SELECT * FROM ow_items WHERE id_gen.shard_owns('ow_items'::regclass, id);
SELECT count(*) AS joined_owned FROM ow_items_owned i JOIN ow_owned o ON o.id = i.ow_id;
-- A change of what the shard owns that a savepoint rolls back is forgotten with it.
BEGIN;
SAVEPOINT before_change;
UPDATE id_gen.shard_tables SET gene_ranges = gene_ranges || int4range(16, 32) WHERE table_name = 'ow';
SELECT id_gen.shard_routing_changed();
SELECT v AS seen_in_savepoint FROM ow WHERE id = id_gen.compose_id(20, 2);
ROLLBACK TO SAVEPOINT before_change;
SELECT id_gen.shard_owns('ow'::regclass, id_gen.compose_id(20, 2)) AS owned_after_rollback_to;
SELECT try($$SELECT v FROM ow WHERE id = id_gen.compose_id(20, 2)$$);
COMMIT;
-- With the guard off (a DBA inspecting the shard), a read answers with what it holds.
SET id_gen.routing_guard = off;
SELECT v FROM ow WHERE id = id_gen.compose_id(20, 2);
RESET id_gen.routing_guard;
-- Once the shard owns gene 20 (a move's fence records it), the copy is read and shown.
UPDATE id_gen.shard_tables SET gene_ranges = gene_ranges || int4range(16, 32) WHERE table_name = 'ow';
SELECT id_gen.shard_routing_changed();
SELECT v FROM ow WHERE id = id_gen.compose_id(20, 2);
SELECT string_agg(v, ', ' ORDER BY id) AS owned_rows FROM ow_owned;
DEALLOCATE by_id;
DROP VIEW ow_owned, ow_items_owned;
DROP TABLE ow, wanted, ow_items;
DELETE FROM id_gen.shard_tables WHERE table_name IN ('ow', 'ow_items');
SELECT id_gen.shard_routing_changed();
