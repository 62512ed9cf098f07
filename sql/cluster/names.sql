-- Names of the relations behind a distributed table: a name cut to fit NAMEDATALEN, a
-- table's stem, a partition's name and bounds. Code only (CREATE OR REPLACE).
--
-- Invariants: a derived name fits 63 bytes for any identifier (cut at a character
-- boundary), and stems are unique among the distributed tables of a schema; a name held
-- by another relation is an error (42P07) where it is used, never shared.

-- base || suffix, with base cut (at a character boundary) so that the whole fits max_bytes
-- (an identifier: 63).
CREATE OR REPLACE FUNCTION id_gen.fit_name(base text, suffix text, max_bytes integer DEFAULT 63) RETURNS name
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  b text := base;
BEGIN
  IF max_bytes NOT BETWEEN 1 AND 63 OR octet_length(suffix) > max_bytes THEN
    RAISE EXCEPTION 'id_gen: name suffix "%" does not fit % bytes', suffix, max_bytes USING ERRCODE = '42622';
  END IF;
  WHILE octet_length(b) + octet_length(suffix) > max_bytes LOOP
    b := left(b, -1);
  END LOOP;
  RETURN (b || suffix)::name;
END $$;
COMMENT ON FUNCTION id_gen.fit_name(text, text, integer) IS 'base || suffix, base cut at a character boundary so that the result fits max_bytes (default 63, an identifier).';

-- A stem for the partitions of a table: the name itself when it is at most 30 bytes and
-- free, else at most 32 bytes of it and a hash of the whole name (and a counter, should
-- that be taken too). At most 41 bytes, so <stem>_g<lo>_<hi>_fdw fits 63.
CREATE OR REPLACE FUNCTION id_gen.pick_stem(table_name name, taken name[]) RETURNS name
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  stem name := CASE WHEN octet_length(table_name) <= 30 THEN table_name END;
  i integer := 0;
BEGIN
  WHILE stem IS NULL OR stem = ANY (taken) LOOP
    stem := id_gen.fit_name(table_name, '_' || left(md5(table_name || CASE WHEN i = 0 THEN '' ELSE '#' || i END), 8), 41);
    i := i + 1;
  END LOOP;
  RETURN stem;
END $$;
COMMENT ON FUNCTION id_gen.pick_stem(name, name[]) IS 'The prefix of a distributed table''s partition names: the table name if it is at most 30 bytes and not in taken, else a cut of it and a hash of the whole name (at most 41 bytes).';

CREATE OR REPLACE FUNCTION id_gen.partition_name(stem name, lower_gene integer, upper_gene integer) RETURNS name
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN id_gen.fit_name(stem, '_g' || lower_gene || '_' || upper_gene);
COMMENT ON FUNCTION id_gen.partition_name(name, integer, integer) IS 'Name of the partition that holds genes lower_gene .. upper_gene of a distributed table: <stem>_g<lower>_<upper>, where the stem is id_gen.distributed_tables.coordinator_stem (coordinator) or shard_stem (shards).';

CREATE OR REPLACE FUNCTION id_gen.partition_bounds(lower_gene integer, upper_gene integer) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN format('FROM (%s) TO (%s)', id_gen.gene_first_id(lower_gene),
              CASE WHEN upper_gene = 65535 THEN 'MAXVALUE' ELSE id_gen.gene_first_id(upper_gene + 1)::text END);
COMMENT ON FUNCTION id_gen.partition_bounds(integer, integer) IS 'The FOR VALUES bounds of the partition of genes lower_gene .. upper_gene: FROM (lower_gene << 47) TO ((upper_gene + 1) << 47), MAXVALUE for the last gene (65536 << 47 overflows).';

CREATE OR REPLACE FUNCTION id_gen.slot_partition_name(stem name, slot integer) RETURNS name
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN id_gen.fit_name(stem, '_slot' || slot);
COMMENT ON FUNCTION id_gen.slot_partition_name(name, integer) IS 'Name of the coordinator''s partition of a per_shard distributed table that holds the rows of the shard with this slot (id_gen.shard_slots): <coordinator stem>_slot<slot>, a foreign table over the shard''s table.';

CREATE OR REPLACE FUNCTION id_gen.slot_partition_bound_text(slot integer) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN format('FOR VALUES WITH (modulus 1024, remainder %s)', slot);
COMMENT ON FUNCTION id_gen.slot_partition_bound_text(integer) IS 'The partition bound of a shard slot''s partition as pg_get_expr(relpartbound) prints it (hash, modulus 1024, remainder slot).';
