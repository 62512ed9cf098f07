-- Id ranges of genes and owners: the first and last id of a gene or of an owner's gene
-- (gene << 47 .. (gene + 1) << 47 - 1). Lookups by owner prune to one shard with them, and
-- partition bounds are made from them (sql/cluster/names.sql). Code only (CREATE OR
-- REPLACE); an update script re-creates this file as it is (sql/README.md).
--
-- Invariants: pure functions of their argument (IMMUTABLE), the same recipe as
-- crates/id_gen_core (src/layout.rs); owner_first_id(o) <= every id of o's rows <=
-- owner_last_id(o).

CREATE OR REPLACE FUNCTION id_gen.gene_first_id(gene integer) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN id_gen.compose_id(gene, 0);
CREATE OR REPLACE FUNCTION id_gen.gene_last_id(gene integer) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN id_gen.compose_id(gene, 140737488355327);
COMMENT ON FUNCTION id_gen.gene_first_id(integer) IS 'Smallest 64-bit id of a gene: gene << 47.';
COMMENT ON FUNCTION id_gen.gene_last_id(integer) IS 'Largest 64-bit id of a gene: (gene << 47) + 2^47 - 1.';

CREATE OR REPLACE FUNCTION id_gen.owner_first_id(owner bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN id_gen.gene_first_id(id_gen.shard_gene(owner));
CREATE OR REPLACE FUNCTION id_gen.owner_first_id(owner text) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN id_gen.gene_first_id(id_gen.shard_gene(owner));
CREATE OR REPLACE FUNCTION id_gen.owner_first_id(owner uuid) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN id_gen.gene_first_id(id_gen.shard_gene(owner));
CREATE OR REPLACE FUNCTION id_gen.owner_last_id(owner bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN id_gen.gene_last_id(id_gen.shard_gene(owner));
CREATE OR REPLACE FUNCTION id_gen.owner_last_id(owner text) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN id_gen.gene_last_id(id_gen.shard_gene(owner));
CREATE OR REPLACE FUNCTION id_gen.owner_last_id(owner uuid) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN id_gen.gene_last_id(id_gen.shard_gene(owner));
COMMENT ON FUNCTION id_gen.owner_first_id(bigint) IS 'Smallest id an owner''s rows can have. Lookups by owner prune to one shard with: WHERE owner_col = $1 AND id BETWEEN id_gen.owner_first_id($1) AND id_gen.owner_last_id($1).';
COMMENT ON FUNCTION id_gen.owner_first_id(text) IS 'owner_first_id for a text owner.';
COMMENT ON FUNCTION id_gen.owner_first_id(uuid) IS 'owner_first_id for a uuid owner.';
COMMENT ON FUNCTION id_gen.owner_last_id(bigint) IS 'Largest id an owner''s rows can have; see owner_first_id.';
COMMENT ON FUNCTION id_gen.owner_last_id(text) IS 'owner_last_id for a text owner.';
COMMENT ON FUNCTION id_gen.owner_last_id(uuid) IS 'owner_last_id for a uuid owner.';
