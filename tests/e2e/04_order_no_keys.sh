#!/usr/bin/env bash
# Order-number keys against a real server:
#  - pg_dump/pg_restore keeps old numbers decodable (wrapped keys travel in the dump);
#  - an ordinary role's pg_dump cannot read key material; the superuser's dump holds only
#    wrapped keys (no data key bytes);
#  - restarting with a wrong key-encryption key, or none, gives a clear ERROR, never a
#    wrong decode; with the right one back, everything decodes again.
source "$(dirname "$0")/lib.sh"
KEK=/tmp/idg_e2e4_kek.hex
make_kek "$KEK"
e2e_start /tmp/idg_e2e4 54344 "id_gen.order_no_kek_file = '$KEK'"
cpsql "$E2E_DIR" "$E2E_PORT" -c "CREATE DATABASE shop" >/dev/null
cpsql "$E2E_DIR" "$E2E_PORT" -d shop <<'SQL' >/dev/null
CREATE EXTENSION id_gen;
SELECT id_gen.create_order_no_key('v1');
CREATE TABLE orders (order_id bigint PRIMARY KEY, order_no uuid UNIQUE, order_no64 bigint, order_no_kv int);
INSERT INTO orders SELECT id, id_gen.encode_order_no(id), id_gen.encode_order_no64(id, 1), 1
FROM (SELECT id_gen.compose_id(id_gen.shard_gene(b), b) AS id FROM generate_series(1::bigint, 500) b) s;
SELECT id_gen.create_order_no_key('v2');
SELECT id_gen.set_current_order_no_key(2);
INSERT INTO orders SELECT id, id_gen.encode_order_no(id), id_gen.encode_order_no64(id, 1), 1
FROM (SELECT id_gen.compose_id(id_gen.shard_gene(b), b) AS id FROM generate_series(501::bigint, 1000) b) s;
CREATE ROLE clerk LOGIN;
GRANT SELECT ON orders TO clerk;
SQL
assert_eq "$(q shop "SELECT count(DISTINCT id_gen.order_no_key_version(order_no)) FROM orders")" "2" "numbers under two key versions"

# An ordinary role cannot dump the key table.
if "$PG_BIN/pg_dump" -h "$E2E_DIR" -p "$E2E_PORT" -U clerk -d shop -f "$E2E_DIR/clerk.sql" 2>"$E2E_DIR/clerk.err"; then
  fail "pg_dump by an ordinary role succeeded"
fi
grep -q "permission denied for table order_no_key_store" "$E2E_DIR/clerk.err" || fail "unexpected pg_dump error: $(cat "$E2E_DIR/clerk.err")"
pass "pg_dump by an ordinary role is refused: $(head -1 "$E2E_DIR/clerk.err")"

# The superuser's dump carries the wrapped keys; restore into a new database.
"$PG_BIN/pg_dump" -h "$E2E_DIR" -p "$E2E_PORT" -U postgres -Fc -d shop -f "$E2E_DIR/shop.dump"
"$PG_BIN/pg_restore" -f - "$E2E_DIR/shop.dump" | grep -A3 "COPY id_gen.order_no_key_store" > "$E2E_DIR/keys.txt"
rows=$(grep -c '\\\\x01' "$E2E_DIR/keys.txt" || true)
assert_eq "$rows" "2" "dump holds two wrapped keys (format byte 01, 49 bytes each)"
cpsql "$E2E_DIR" "$E2E_PORT" -c "CREATE DATABASE shop2" >/dev/null
"$PG_BIN/pg_restore" -h "$E2E_DIR" -p "$E2E_PORT" -U postgres -d shop2 "$E2E_DIR/shop.dump"
assert_eq "$(q shop2 "SELECT bool_and(id_gen.decode_order_no(order_no) = order_id) AND bool_and(id_gen.decode_order_no64(order_no64, 1) = order_id) FROM orders")" "t" "restored database decodes every old number (both key versions, both forms)"
assert_eq "$(q shop2 "SELECT key_version FROM id_gen.order_no_keys WHERE state = 'current'")" "2" "current key version survives the restore"

# Restart with a different key-encryption key: a clear error, never a wrong decode.
cluster_stop "$E2E_DIR"
make_kek "$KEK.other"
sed -i "s|^id_gen.order_no_kek_file = .*|id_gen.order_no_kek_file = '$KEK.other'|" "$E2E_DIR/data/postgresql.conf"
cluster_up "$E2E_DIR"
n=$(q shop "SELECT order_no FROM orders LIMIT 1")
out=$(q shop "SELECT id_gen.decode_order_no('$n')" 2>&1 || true)
grep -q "cannot unwrap order-number key version" <<<"$out" || fail "wrong KEK: expected an unwrap error, got: $out"
pass "wrong key-encryption key: $(grep -o 'ERROR.*' <<<"$out" | head -1)"
out=$(q shop "SELECT id_gen.encode_order_no(1::bigint)" 2>&1 || true)
grep -q "cannot unwrap" <<<"$out" || fail "wrong KEK: encode should fail too, got: $out"

# Restart with no key-encryption key at all.
cluster_stop "$E2E_DIR"
sed -i "/^id_gen.order_no_kek_file/d" "$E2E_DIR/data/postgresql.conf"
cluster_up "$E2E_DIR"
out=$(q shop "SELECT id_gen.decode_order_no('$n')" 2>&1 || true)
grep -q "no order-number key-encryption key is loaded" <<<"$out" || fail "missing KEK: got: $out"
pass "missing key-encryption key: $(grep -o 'ERROR.*' <<<"$out" | head -1)"

# The right key back: everything decodes again.
cluster_stop "$E2E_DIR"
echo "id_gen.order_no_kek_file = '$KEK'" >> "$E2E_DIR/data/postgresql.conf"
cluster_up "$E2E_DIR"
assert_eq "$(q shop "SELECT bool_and(id_gen.decode_order_no(order_no) = order_id) FROM orders")" "t" "with the right KEK, every number decodes again"
# Key command instead of a file.
cluster_stop "$E2E_DIR"
sed -i "/^id_gen.order_no_kek_file/d" "$E2E_DIR/data/postgresql.conf"
echo "id_gen.order_no_kek_command = 'cat $KEK'" >> "$E2E_DIR/data/postgresql.conf"
cluster_up "$E2E_DIR"
assert_eq "$(q shop "SELECT bool_and(id_gen.decode_order_no(order_no) = order_id) FROM orders")" "t" "KEK from id_gen.order_no_kek_command"
grep -q "order-number key-encryption key loaded (fingerprint" "$E2E_DIR/server.log" || fail "no KEK load line in the server log"
if grep -q "$(cat "$KEK")" "$E2E_DIR/server.log"; then fail "the KEK appears in the server log"; fi
pass "server log names the KEK fingerprint, never the key"
echo "04_order_no_keys: passed"
