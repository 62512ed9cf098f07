-- A shard's partitions as the routing guard sees them (sql/cluster/shard/routing.sql,
-- src/routing_guard/shard_state.rs): id_gen.partition_gene_range decodes a partition's gene
-- range from its stored bound; it must agree, partition by partition, with what the bound
-- says when deparsed (the way id_gen.shard_routing_snapshot read it before 0.7.5).
CREATE TABLE sp (id bigint NOT NULL, v text) PARTITION BY RANGE (id);
CREATE TABLE sp_g0_15 PARTITION OF sp FOR VALUES FROM (id_gen.gene_first_id(0)) TO (id_gen.gene_first_id(16));
CREATE TABLE sp_g16_16 PARTITION OF sp FOR VALUES FROM (id_gen.gene_first_id(16)) TO (id_gen.gene_first_id(17));
CREATE TABLE sp_g4096_8191 PARTITION OF sp FOR VALUES FROM (id_gen.gene_first_id(4096)) TO (id_gen.gene_first_id(8192));
CREATE TABLE sp_g65000_65535 PARTITION OF sp FOR VALUES FROM (id_gen.gene_first_id(65000)) TO (MAXVALUE);
CREATE TABLE sp_negative PARTITION OF sp FOR VALUES FROM (MINVALUE) TO (0);
CREATE TABLE sp_not_owned PARTITION OF sp DEFAULT;
-- Bounds that are not a shard table's: not on a gene boundary, two columns, list, hash.
CREATE TABLE sp_odd PARTITION OF sp FOR VALUES FROM (id_gen.gene_first_id(20) + 5) TO (id_gen.gene_first_id(21) - 1);
CREATE TABLE sp2 (a bigint, b bigint) PARTITION BY RANGE (a, b);
CREATE TABLE sp2_p PARTITION OF sp2 FOR VALUES FROM (0, 0) TO (10, 10);
CREATE TABLE sl (id bigint) PARTITION BY LIST (id);
CREATE TABLE sl_p PARTITION OF sl FOR VALUES IN (1, 2);
CREATE TABLE sh (id bigint) PARTITION BY HASH (id);
CREATE TABLE sh_p PARTITION OF sh FOR VALUES WITH (MODULUS 2, REMAINDER 0);
-- (A key of integers: no gene range either way; distribute_table takes only a bigint id.)
CREATE TABLE si (id integer) PARTITION BY RANGE (id);
CREATE TABLE si_p PARTITION OF si FOR VALUES FROM (0) TO (10);
WITH parts AS (
  SELECT c.relname, c.relpartbound, pg_get_expr(c.relpartbound, c.oid) AS bound
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
  WHERE i.inhparent IN ('sp'::regclass, 'sp2'::regclass, 'sl'::regclass, 'sh'::regclass, 'si'::regclass)
), deparsed AS (
  SELECT p.*, m.m,
         CASE WHEN m.m IS NOT NULL THEN ARRAY[(m.m[1]::bigint >> 47)::integer,
              CASE WHEN m.m[3] IS NOT NULL THEN 65535 ELSE ((m.m[2]::bigint >> 47) - 1)::integer END] END AS by_pattern
  FROM parts p LEFT JOIN LATERAL regexp_match(p.bound, '^FOR VALUES FROM \(''(-?\d+)''\) TO \((?:''(-?\d+)''|(MAXVALUE))\)$') AS m(m) ON true
)
SELECT relname, bound, id_gen.partition_gene_range(relpartbound) AS genes,
       id_gen.partition_gene_range(relpartbound) IS NOT DISTINCT FROM by_pattern AS agrees
FROM deparsed ORDER BY relname;
-- The argument is a pg_node_tree: text cannot be made into one.
SELECT try($$SELECT id_gen.partition_gene_range('{PARTITIONBOUNDSPEC}')$$);
SELECT try($$SELECT id_gen.partition_gene_range('x'::text::pg_node_tree)$$);
SELECT id_gen.partition_gene_range(NULL) AS null_bound;
DROP TABLE sp, sp2, sl, sh, si;
