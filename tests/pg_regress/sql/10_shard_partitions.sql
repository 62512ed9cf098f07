-- A shard's partitions as the routing guard sees them (sql/cluster/shard/routing.sql,
-- src/routing_guard/shard_state.rs). First, id_gen.partition_gene_range decodes a
-- partition's gene range from its stored bound; it must agree, partition by partition, with
-- what the bound says when deparsed (the way id_gen.shard_routing_snapshot read it before
-- 0.7.5).
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

-- route_claim finds a gene's partition by a binary search of PostgreSQL's partition
-- descriptor (src/routing_guard/shard_state.rs, partition_holding_gene): it must pick, for
-- every gene, the partition whose range holds it in the shard's snapshot, and refuse the
-- genes that fall in the tombstone. A table laid out as a shard's: 300 ranges of 16 genes
-- every 32 genes from gene 48 on, one range at the start, one up to MAXVALUE, negative ids,
-- the tombstone.
CREATE TABLE sc (id bigint NOT NULL, v text) PARTITION BY RANGE (id);
CREATE TABLE sc_g0_15 PARTITION OF sc FOR VALUES FROM (id_gen.gene_first_id(0)) TO (id_gen.gene_first_id(16));
DO $$
BEGIN
  FOR k IN 0 .. 299 LOOP
    EXECUTE format('CREATE TABLE %I PARTITION OF sc FOR VALUES FROM (%s) TO (%s)', 'sc_g' || (48 + 32 * k),
                   id_gen.gene_first_id(48 + 32 * k), id_gen.gene_first_id(64 + 32 * k));
  END LOOP;
END $$;
CREATE TABLE sc_g65000_65535 PARTITION OF sc FOR VALUES FROM (id_gen.gene_first_id(65000)) TO (MAXVALUE);
CREATE TABLE sc_negative PARTITION OF sc FOR VALUES FROM (MINVALUE) TO (0);
CREATE TABLE sc_not_owned PARTITION OF sc DEFAULT;
INSERT INTO id_gen.shard_tables (schema_name, table_name, id_column, gene_ranges, definition, stem)
VALUES ('public', 'sc', 'id', '{}', '', 'sc');
INSERT INTO id_gen.shard_route_state (version, shard, lower_genes, upper_genes, shards)
VALUES (7, 'here', '{}', '{}', '{}');
SELECT id_gen.shard_routing_changed();
SELECT count(*) AS partitions, count(lower_gene) AS with_genes FROM id_gen.shard_routing_snapshot() WHERE parent = 'sc'::regclass;
SELECT version, parent::regclass FROM id_gen.shard_routing_tables() WHERE parent = 'sc'::regclass;
-- The genes of the ranges and gaps up to gene 3,000 and from 64,900 on, and every 29th
-- between: the partition the claim locks (in a subtransaction rolled back after each),
-- against the partition of the snapshot that holds the gene; NULL where both refuse.
CREATE TEMP TABLE claimed (gene integer, got regclass, want regclass, refused text);
DO $$
DECLARE
  g integer;
  got regclass;
  refused text;
BEGIN
  FOR g IN SELECT x FROM generate_series(0, 65535) x WHERE x <= 3000 OR x >= 64900 OR x % 29 = 0 LOOP
    got := NULL;
    refused := NULL;
    BEGIN
      PERFORM id_gen.route_claim(g, 7);
      SELECT l.relation::regclass INTO got FROM pg_locks l JOIN pg_inherits i ON i.inhrelid = l.relation
      WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation' AND i.inhparent = 'sc'::regclass;
      RAISE EXCEPTION 'claimed' USING ERRCODE = 'P0001';
    EXCEPTION
      WHEN SQLSTATE 'P0001' THEN NULL;
      WHEN SQLSTATE 'IG001' THEN refused := SQLSTATE;
    END;
    INSERT INTO claimed VALUES (g, got, NULL, refused);
  END LOOP;
END $$;
UPDATE claimed c SET want = s.part::regclass
FROM id_gen.shard_routing_snapshot() s
WHERE s.parent = 'sc'::regclass AND c.gene BETWEEN s.lower_gene AND s.upper_gene;
SELECT count(*) AS genes, count(got) AS claimed, count(refused) AS refused,
       count(*) FILTER (WHERE got IS DISTINCT FROM want) AS differ,
       count(*) FILTER (WHERE (got IS NULL) <> (refused IS NOT NULL)) AS neither_or_both
FROM claimed;
SELECT gene, got, want, refused FROM claimed WHERE gene IN (0, 15, 16, 47, 48, 63, 64, 2991, 2992, 64999, 65000, 65535) ORDER BY gene;
-- A stale version is refused before any lock.
SELECT try($$SELECT id_gen.route_claim(0, 6)$$);
DELETE FROM id_gen.shard_tables WHERE table_name = 'sc';
DELETE FROM id_gen.shard_route_state;
SELECT id_gen.shard_routing_changed();
DROP TABLE sc, claimed;
