-- ID layout and shard genes (DESIGN.md §2).

-- Check values shared with Java/Go/Python.
SELECT id_gen.shard_gene(42::bigint) AS g42, id_gen.shard_gene(0::bigint) AS g0,
       id_gen.shard_gene(1::bigint) AS g1, id_gen.shard_gene(45346343212::bigint) AS gbig,
       id_gen.shard_gene('alice'::text) AS alice;
-- Canonical bytes: bigint = 8 bytes little-endian; text = UTF-8; bytea/uuid = raw bytes.
SELECT id_gen.shard_gene('\x2a00000000000000'::bytea) = id_gen.shard_gene(42::bigint) AS le_bytes_match,
       id_gen.shard_gene(convert_to('alice', 'UTF8')) = id_gen.shard_gene('alice'::text) AS utf8_match,
       id_gen.shard_gene('42'::text) <> id_gen.shard_gene(42::bigint) AS decimal_text_differs,
       id_gen.shard_gene('00000000-0000-0000-0000-000000000000'::uuid)
         = id_gen.shard_gene('\x00000000000000000000000000000000'::bytea) AS uuid_is_raw_bytes;
-- Genes stay in range and spread over the ring.
SELECT min(g) >= 0 AS min_ok, max(g) <= 65535 AS max_ok, count(DISTINCT g >> 12) AS sixteenths
FROM (SELECT id_gen.shard_gene(x) AS g FROM generate_series(1::bigint, 20000) x) s;

-- Compose and decompose.
SELECT id_gen.compose_id(16043, 5) = (16043::bigint << 47) | 5 AS compose_ok,
       id_gen.shard_of(id_gen.compose_id(16043, 5)) AS shard,
       id_gen.seq_of(id_gen.compose_id(16043, 5)) AS seq,
       id_gen.compose_id(65535, 140737488355327) AS max_id,
       id_gen.compose_id(0, 0) AS zero;
-- shard_of(id) is the MySQL/TiDB expression (id >> 47) & 0xFFFF.
SELECT bool_and(id_gen.shard_of(id) = ((id >> 47) & 65535)::int) AS same_as_shift
FROM (SELECT id_gen.compose_id((x * 7919) % 65536, x::bigint * 1000003) AS id
      FROM generate_series(0, 5000) x) s;
-- Byte forms: 8 bytes while seq < 2^47, 16 bytes after; both decode.
SELECT length(id_gen.compose_id_bytes(7, 140737488355327)) AS len_max64,
       length(id_gen.compose_id_bytes(7, 140737488355328)) AS len_overflow,
       id_gen.compose_id_bytes(16043, 5) = int8send(id_gen.compose_id(16043, 5)) AS eight_bytes_are_bigint_be,
       id_gen.shard_of(id_gen.compose_id_bytes(7, 140737488355328)) AS shard16,
       id_gen.seq_of(id_gen.compose_id_bytes(7, 140737488355328)) AS seq16,
       id_gen.seq_of(id_gen.compose_id_bytes(65535, 2596148429267413814265248164610047)) AS seq_max111,
       id_gen.compose_id_bytes(1, 5.000) = id_gen.compose_id_bytes(1, 5) AS whole_numeric_ok;
-- A bytea column holding both forms sorts by gene first.
SELECT array_agg(id_gen.shard_of(b) ORDER BY b) AS genes_in_byte_order
FROM (VALUES (id_gen.compose_id_bytes(2, 1)), (id_gen.compose_id_bytes(1, 140737488355328)),
             (id_gen.compose_id_bytes(1, 3)), (id_gen.compose_id_bytes(0, 1e30))) v(b);

-- Errors: SQLSTATE and message.
SELECT try($$SELECT id_gen.compose_id(65536, 1)$$);
SELECT try($$SELECT id_gen.compose_id(-1, 1)$$);
SELECT try($$SELECT id_gen.compose_id(1, 140737488355328)$$);
SELECT try($$SELECT id_gen.compose_id(1, -1)$$);
SELECT try($$SELECT id_gen.compose_id_bytes(1, -1)$$);
SELECT try($$SELECT id_gen.compose_id_bytes(1, 2596148429267413814265248164610048)$$);
SELECT try($$SELECT id_gen.compose_id_bytes(1, 1.5)$$);
SELECT try($$SELECT id_gen.compose_id_bytes(1, 'NaN')$$);
SELECT try($$SELECT id_gen.shard_of(-1::bigint)$$);
SELECT try($$SELECT id_gen.seq_of((-9223372036854775807)::bigint - 1)$$);
SELECT try($$SELECT id_gen.shard_of('\x0102'::bytea)$$);
SELECT try($$SELECT id_gen.shard_of(''::bytea)$$);
SELECT try($$SELECT id_gen.seq_of('\x000000000000000000'::bytea)$$);
SELECT try($$SELECT id_gen.shard_of('\x8000000000000000'::bytea)$$);
SELECT try($$SELECT id_gen.shard_of('\x80000000000000000000000000000000'::bytea)$$);

-- NULL in, NULL out (STRICT).
SELECT id_gen.shard_gene(NULL::bigint) IS NULL AS a, id_gen.shard_gene(NULL::text) IS NULL AS b,
       id_gen.shard_of(NULL::bigint) IS NULL AS c, id_gen.shard_of(NULL::bytea) IS NULL AS d,
       id_gen.seq_of(NULL::bytea) IS NULL AS e, id_gen.compose_id(NULL, 1) IS NULL AS f,
       id_gen.compose_id_bytes(1, NULL) IS NULL AS g;

-- The SQL contract of the pure functions, read from pg_proc.
SELECT p.oid::regprocedure AS function, p.provolatile AS volatility, p.proisstrict AS strict,
       p.proparallel AS parallel, obj_description(p.oid, 'pg_proc') IS NOT NULL AS commented
FROM pg_proc p
WHERE p.pronamespace = 'id_gen'::regnamespace
  AND p.proname IN ('shard_gene', 'shard_of', 'seq_of', 'compose_id', 'compose_id_bytes')
ORDER BY p.oid::regprocedure::text;

-- Usable where PostgreSQL demands IMMUTABLE: generated columns, indexes, CHECKs.
CREATE TABLE layout_demo (
  order_id   bigint PRIMARY KEY CHECK (id_gen.shard_of(order_id) BETWEEN 0 AND 65535),
  buyer_uid  bigint NOT NULL,
  -- integer, not smallint: genes go up to 65535 and PostgreSQL has no unsigned smallint.
  shard_gene integer GENERATED ALWAYS AS (id_gen.shard_of(order_id)) STORED
);
CREATE INDEX layout_demo_gene ON layout_demo (id_gen.shard_gene(buyer_uid));
INSERT INTO layout_demo (order_id, buyer_uid)
SELECT id_gen.compose_id(id_gen.shard_gene(b), b), b FROM generate_series(1::bigint, 100) b;
SELECT count(*) AS rows, bool_and(shard_gene = id_gen.shard_gene(buyer_uid)) AS gene_matches
FROM layout_demo;
DROP TABLE layout_demo;
