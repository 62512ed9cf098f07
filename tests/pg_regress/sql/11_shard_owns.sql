-- Ownership as data (src/routing_guard/owned_ranges.rs): id_gen.shard_owns(table, id) says
-- whether the id's gene is in a range that id_gen.shard_tables records for the table. It
-- must agree with the recorded ranges for every gene, at the edges of every range, and
-- whatever order or overlap the ranges were recorded in.
CREATE TABLE owned (id bigint NOT NULL);
CREATE TABLE other (id bigint NOT NULL);
-- 2,048 scattered ranges of 16 genes (every other block of 16), recorded out of order,
-- plus overlapping and adjacent ones that merge, and the last gene.
INSERT INTO id_gen.shard_tables (schema_name, table_name, id_column, gene_ranges, definition, stem)
SELECT 'public', 'owned', 'id',
       array_agg(int4range(b * 32, b * 32 + 16) ORDER BY (b * 7919) % 2048)
         || '{"[40000,40010)","[40005,40020)","[40020,40021)","[65535,65536)"}'::int4range[],
       '', 'owned'
FROM generate_series(0, 2047) b;
INSERT INTO id_gen.shard_tables (schema_name, table_name, id_column, gene_ranges, definition, stem)
VALUES ('public', 'other', 'id', '{}', '', 'other');
SELECT id_gen.shard_routing_changed();
-- What the backend holds: the 2,048 blocks (40000..40020 merged into the block that
-- covers 40000..40015) and the last gene.
SELECT count(*) AS ranges, min(lower_gene), max(upper_gene),
       count(*) FILTER (WHERE lower_gene = 40000) AS merged_at_40000,
       max(upper_gene) FILTER (WHERE lower_gene = 40000) AS merged_upper
FROM id_gen.shard_owned_ranges('owned');
-- Every gene, at its first and last id: 0 disagreements with the recorded ranges.
WITH recorded AS (SELECT DISTINCT generate_series(lower(x), upper(x) - 1) AS g
                  FROM id_gen.shard_tables t, unnest(t.gene_ranges) x WHERE t.table_name = 'owned'),
ids AS (SELECT g, id FROM generate_series(0, 65535) g,
        LATERAL (VALUES (id_gen.gene_first_id(g)), (id_gen.gene_last_id(g))) v(id))
SELECT count(*) AS ids_checked,
       count(*) FILTER (WHERE id_gen.shard_owns('owned', id)) AS owned,
       count(*) FILTER (WHERE id_gen.shard_owns('owned', id) IS DISTINCT FROM (r.g IS NOT NULL)) AS disagree
FROM ids LEFT JOIN recorded r USING (g);
-- Not owned: negative ids, a table with no ranges, a table not distributed here; NULL: NULL.
SELECT id_gen.shard_owns('owned', -1) AS negative,
       id_gen.shard_owns('owned', id_gen.gene_first_id(16)) AS gap,
       id_gen.shard_owns('other', id_gen.gene_first_id(0)) AS no_ranges,
       id_gen.shard_owns('pg_class', 0) AS not_distributed,
       id_gen.shard_owns('owned', NULL) AS null_id;
-- A view that keeps the owned rows, as the layout by ownership reads a shard's table.
INSERT INTO owned SELECT id_gen.compose_id(g, 1) FROM generate_series(0, 65535, 8) g;
CREATE VIEW owned_rows AS SELECT * FROM owned WHERE id_gen.shard_owns('owned'::regclass, id);
SELECT count(*) AS rows_kept FROM owned_rows;
-- A change counts at once in its transaction and is forgotten when it rolls back.
BEGIN;
UPDATE id_gen.shard_tables SET gene_ranges = '{"[16,32)"}' WHERE table_name = 'owned';
SELECT id_gen.shard_routing_changed();
SELECT id_gen.shard_owns('owned', id_gen.gene_first_id(16)) AS gap_taken_in_tx,
       id_gen.shard_owns('owned', id_gen.gene_first_id(0)) AS first_given_up_in_tx;
ROLLBACK;
SELECT id_gen.shard_owns('owned', id_gen.gene_first_id(16)) AS gap_after_rollback,
       id_gen.shard_owns('owned', id_gen.gene_first_id(0)) AS first_after_rollback;
DROP VIEW owned_rows;
DELETE FROM id_gen.shard_tables WHERE table_name IN ('owned', 'other');
SELECT id_gen.shard_routing_changed();
SELECT count(*) AS ranges_after_drop FROM id_gen.shard_owned_ranges('owned');
DROP TABLE owned, other;
