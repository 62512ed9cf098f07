-- External order numbers (DESIGN.md §4). The regress cluster loads a throwaway
-- key-encryption key (id_gen.order_no_kek_file); outputs are properties, not raw numbers.

-- No key yet: a clear error.
SELECT try($$SELECT id_gen.encode_order_no(1::bigint)$$);
SELECT id_gen.create_order_no_key('first key') AS kv;
SELECT key_version, state, length(kek_fingerprint) AS fp_hex_len, note FROM id_gen.order_no_keys;

-- 128-bit form: a version-8 RFC 9562 uuid, gene in the first 16 bits, key version next.
CREATE TEMP TABLE o AS
SELECT id_gen.compose_id(16043, s) AS order_id, id_gen.encode_order_no(id_gen.compose_id(16043, s)) AS order_no
FROM generate_series(1, 1000) s;
SELECT count(DISTINCT order_no) AS distinct_numbers,
       bool_and(id_gen.shard_of(order_no) = 16043) AS gene_in_clear,
       bool_and(substr(order_no::text, 1, 4) = '3eab') AS first_bytes_are_gene,
       bool_and(id_gen.order_no_key_version(order_no) = 1) AS key_version_recorded,
       bool_and(substr(order_no::text, 15, 1) = '8') AS version_8,
       bool_and(substr(order_no::text, 20, 1) IN ('8', '9', 'a', 'b')) AS rfc_variant,
       bool_and(id_gen.decode_order_no(order_no) = order_id) AS round_trip
FROM o;
-- Deterministic: the same id gives the same number (so it can be indexed and looked up).
SELECT bool_and(id_gen.encode_order_no(order_id) = order_no) AS deterministic FROM o;
-- Consecutive ids do not give close numbers: the low 64 bits look unrelated.
SELECT count(*) FILTER (WHERE substr(a::text, 25) = substr(b::text, 25)) AS equal_tails,
       count(*) AS pairs
FROM (SELECT order_no AS a, lead(order_no) OVER (ORDER BY order_id) AS b FROM o) p WHERE b IS NOT NULL;
-- Different genes, same sequence: unrelated numbers.
SELECT count(DISTINCT substr(id_gen.encode_order_no(id_gen.compose_id(g, 7))::text, 10)) AS distinct_tails
FROM generate_series(0, 99) g;

-- Tampering: every single-hex-digit change of a number is rejected, never decoded wrong.
CREATE TEMP TABLE tampered AS
SELECT overlay(n::text PLACING (CASE WHEN substr(n::text, p, 1) = '0' THEN '1' ELSE '0' END) FROM p FOR 1) AS t
FROM (SELECT order_no AS n FROM o LIMIT 3) x,
     generate_series(1, 36) p
WHERE substr(n::text, p, 1) <> '-';
SELECT count(*) AS tampered_numbers,
       count(*) FILTER (WHERE try(format('SELECT id_gen.decode_order_no(%L::uuid)', t)) = 'ok') AS accepted
FROM tampered;
SELECT try($$SELECT id_gen.decode_order_no('3eab01b2-b4d1-861a-977c-0300374dc708')$$);
SELECT try($$SELECT id_gen.decode_order_no(gen_random_uuid())$$);
SELECT try($$SELECT id_gen.decode_order_no('3eab0900-0000-8000-8000-000000000000')$$);
SELECT try($$SELECT id_gen.order_no_key_version('3eab0100-0000-4000-8000-000000000000')$$);

-- Ids in byte form, including the 16-byte overflow form.
SELECT id_gen.decode_order_no_bytes(id_gen.encode_order_no(id_gen.compose_id_bytes(7, 140737488355328)))
       = id_gen.compose_id_bytes(7, 140737488355328) AS overflow_round_trip,
       id_gen.decode_order_no(id_gen.encode_order_no(id_gen.compose_id_bytes(7, 5))) = id_gen.compose_id(7, 5) AS short_form_round_trip;
SELECT try($$SELECT id_gen.decode_order_no(id_gen.encode_order_no(id_gen.compose_id_bytes(7, 140737488355328)))$$);
SELECT try($$SELECT id_gen.encode_order_no(id_gen.compose_id_bytes(7, 18446744073709551616))$$);
SELECT try($$SELECT id_gen.encode_order_no(-5::bigint)$$);
SELECT try($$SELECT id_gen.encode_order_no('\x0102'::bytea)$$);

-- 64-bit form: 0 | gene | FF1-47(seq); the key version is kept beside it (a column).
SELECT count(DISTINCT id_gen.encode_order_no64(order_id, 1)) AS distinct_numbers,
       bool_and(id_gen.encode_order_no64(order_id, 1) > 0) AS positive,
       bool_and(id_gen.shard_of(id_gen.encode_order_no64(order_id, 1)) = 16043) AS gene_in_clear,
       bool_and(id_gen.decode_order_no64(id_gen.encode_order_no64(order_id, 1), 1) = order_id) AS round_trip,
       count(*) FILTER (WHERE id_gen.encode_order_no64(order_id, 1) = order_id) AS fixed_points
FROM o;
SELECT try($$SELECT id_gen.encode_order_no64(1, 0)$$);
SELECT try($$SELECT id_gen.encode_order_no64(1, 256)$$);
SELECT try($$SELECT id_gen.encode_order_no64(1, 9)$$);
SELECT try($$SELECT id_gen.encode_order_no64(-1, 1)$$);
SELECT try($$SELECT id_gen.decode_order_no64(-1, 1)$$);

-- Rotation: a new version is not current until set; old numbers keep decoding.
SELECT id_gen.create_order_no_key('second key') AS kv;
SELECT key_version, state FROM id_gen.order_no_keys ORDER BY 1;
SELECT id_gen.set_current_order_no_key(2);
SELECT key_version, state FROM id_gen.order_no_keys ORDER BY 1;
SELECT id_gen.order_no_key_version(id_gen.encode_order_no(id_gen.compose_id(5, 5))) AS new_numbers_use;
SELECT bool_and(id_gen.decode_order_no(order_no) = order_id) AS old_numbers_decode,
       bool_and(id_gen.encode_order_no(order_id) <> order_no) AS new_numbers_differ
FROM o;
SELECT try($$SELECT id_gen.set_current_order_no_key(77)$$);

-- NULL in, NULL out.
SELECT id_gen.encode_order_no(NULL::bigint) IS NULL AS a, id_gen.decode_order_no(NULL) IS NULL AS b,
       id_gen.encode_order_no64(NULL, 1) IS NULL AS c, id_gen.shard_of(NULL::uuid) IS NULL AS d;

-- Privileges: a role without grants can encode, but cannot decode, read keys or see
-- where the key-encryption key comes from; after a GRANT it can decode.
CREATE ROLE idg_shop LOGIN;
SET ROLE idg_shop;
SELECT id_gen.shard_of(id_gen.encode_order_no(id_gen.compose_id(9, 9))) AS shop_can_encode;
SELECT count(*) AS shop_sees_versions FROM id_gen.order_no_keys;
SELECT try($$SELECT * FROM id_gen.order_no_key_store$$);
SELECT try($$SELECT id_gen.decode_order_no(id_gen.encode_order_no(id_gen.compose_id(9, 9)))$$);
SELECT try($$SELECT id_gen.decode_order_no64(1, 1)$$);
SELECT try($$SELECT id_gen.create_order_no_key()$$);
SELECT try($$SELECT id_gen.set_current_order_no_key(1)$$);
SELECT try($$SHOW id_gen.order_no_kek_file$$);
SELECT try($$SELECT current_setting('id_gen.order_no_kek_file')$$);
RESET ROLE;
GRANT EXECUTE ON FUNCTION id_gen.decode_order_no(uuid) TO idg_shop;
SET ROLE idg_shop;
SELECT id_gen.decode_order_no(id_gen.encode_order_no(id_gen.compose_id(9, 9))) = id_gen.compose_id(9, 9) AS granted_decode;
RESET ROLE;
REVOKE EXECUTE ON FUNCTION id_gen.decode_order_no(uuid) FROM idg_shop;
DROP ROLE idg_shop;

-- The contract of the order-number functions.
SELECT p.oid::regprocedure AS function, p.provolatile AS volatility, p.proisstrict AS strict,
       p.prosecdef AS security_definer, p.proconfig AS config,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_execute,
       obj_description(p.oid, 'pg_proc') IS NOT NULL AS commented
FROM pg_proc p
WHERE p.pronamespace = 'id_gen'::regnamespace
  AND (p.proname LIKE '%order_no%' OR (p.proname = 'shard_of' AND p.proargtypes[0] = 'uuid'::regtype))
ORDER BY p.oid::regprocedure::text;
SELECT extconfig::regclass[] AS dumped_tables FROM pg_extension WHERE extname = 'id_gen';
