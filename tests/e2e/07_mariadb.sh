#!/usr/bin/env bash
# versions: 15
# The MariaDB plugin (crates/id_gen_mysql) against a real MariaDB 10.11 and a real
# PostgreSQL with the extension:
#  - genes of 10k integer and 10k string owners, computed by both servers, equal one by one;
#  - 1k order numbers made by PostgreSQL (two key versions) decode in MariaDB, MariaDB
#    makes the same numbers for the current version, and PostgreSQL decodes MariaDB's;
#    keys travel only KEK-wrapped (id_gen.export_order_no_keys(), superuser only);
#  - forged numbers are NULL plus a warning; a wrong KEK or loose file modes are errors;
#  - the seed's test_order table with a BEFORE INSERT trigger on a MariaDB SEQUENCE:
#    10k buyers, then 8 concurrent clients: ids unique and owner-affine; an id past
#    2^47 - 1 is an error, not a wrapped value;
#  - a hostile-argument sweep over every function and a DROP/CREATE FUNCTION (dlclose)
#    cycle leave mysqld up, with no panic in its error log.
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
T0=$(date +%s)

log "building and unit-testing the plugin (cargo build/test -p id_gen_mysql --release)"
if ! out=$(cargo build -q -p id_gen_mysql --release 2>&1); then
  printf '%s\n' "$out" | tail -30 >&2; fail "plugin build failed"
fi
SO="$REPO_ROOT/target/release/libid_gen_mysql.so"
# The plugin's unit tests (argument checks, key file parsing, panic guards) ride along here:
# the test tiers of scripts/test.sh are the core's and the extension's.
if ! out=$(cargo test -q -p id_gen_mysql --release 2>&1); then
  printf '%s\n' "$out" | tail -30 >&2; fail "cargo test -p id_gen_mysql failed"
fi
pass "plugin unit tests: $(grep -o 'test result: ok. [0-9]* passed' <<<"$out" | head -1)"
T_BUILT=$(date +%s)

KEK=/tmp/idg_e2e7_kek.hex
make_kek "$KEK"
e2e_start /tmp/idg_e2e7 54347 "id_gen.order_no_kek_file = '$KEK'"
M=/tmp/idg_e2e7_maria MPORT=54357
trap 'maria_stop "$M"; cluster_stop "$E2E_DIR"' EXIT
maria_start "$M" "$MPORT"
MPID=$(cat "$M/mysqld.pid")

# m SQL: one statement (or several) in database shop, tab-separated values.
m() { mcli "$M" shop -e "$1"; }
# m_err SQL: the statement must fail; prints the error line.
m_err() {
  local out
  if out=$(mcli "$M" shop -e "$1" 2>&1); then fail "expected an error from: $1 (got: $out)"; fi
  grep -o 'ERROR.*' <<<"$out" | head -1
}
p() { q shop "$1"; }

# --- PostgreSQL: keys, golden values ---------------------------------------------------------
cpsql "$E2E_DIR" "$E2E_PORT" -c "CREATE DATABASE shop" >/dev/null
cpsql "$E2E_DIR" "$E2E_PORT" -d shop <<'SQL' >/dev/null
CREATE EXTENSION id_gen;
SELECT id_gen.create_order_no_key('v1');
CREATE TABLE golden_no (order_id bigint PRIMARY KEY, order_no uuid NOT NULL, kv int NOT NULL);
INSERT INTO golden_no SELECT id, id_gen.encode_order_no(id), 1
  FROM (SELECT id_gen.compose_id(id_gen.shard_gene(b), b * 7919) AS id FROM generate_series(1::bigint, 500) b) s;
SELECT id_gen.create_order_no_key('v2');
SELECT id_gen.set_current_order_no_key(2);
INSERT INTO golden_no SELECT id, id_gen.encode_order_no(id), 2
  FROM (SELECT id_gen.compose_id(id_gen.shard_gene(b), b * 7919) AS id FROM generate_series(501::bigint, 1000) b) s;
-- Integer owners: small, negative, and 64-bit random values (both signs).
CREATE TABLE golden_int AS
SELECT o, id_gen.shard_gene(o) AS gene FROM (
  SELECT CASE WHEN i % 3 = 0 THEN i WHEN i % 3 = 1 THEN -i
              ELSE ('x' || md5(i::text))::bit(64)::bigint END AS o
  FROM generate_series(0, 9999) i) s;
-- String owners: ASCII, hex, CJK, 4-byte emoji, trailing spaces, the empty string, long.
CREATE TABLE golden_str AS
SELECT s, id_gen.shard_gene(s) AS gene FROM (
  SELECT CASE i % 7 WHEN 0 THEN 'user-' || i
                    WHEN 1 THEN md5(i::text)
                    WHEN 2 THEN chr(19968 + i % 2000) || chr(20000 + i % 997) || i
                    WHEN 3 THEN chr(128512 + i % 80) || 'x' || i
                    WHEN 4 THEN 'pad' || i || repeat(' ', 1 + i % 3)
                    WHEN 5 THEN CASE WHEN i = 5 THEN '' ELSE repeat('ab', i % 90) || i END
                    ELSE 'Owner.' || i || '@example.com' END AS s
  FROM generate_series(0, 9999) i) s;
SQL
assert_eq "$(p "SELECT count(DISTINCT o) FROM golden_int")" "10000" "10k distinct integer owners in PostgreSQL"
assert_eq "$(p "SELECT count(DISTINCT s) FROM golden_str")" "10000" "10k distinct string owners in PostgreSQL"

# Key export: superuser only, wrapped rows only.
cpsql "$E2E_DIR" "$E2E_PORT" -d shop -c "CREATE ROLE clerk LOGIN" -c "CREATE ROLE granted LOGIN" \
  -c "GRANT EXECUTE ON FUNCTION id_gen.export_order_no_keys() TO granted" >/dev/null
for role in clerk granted; do
  out=$(cpsql "$E2E_DIR" "$E2E_PORT" -d shop -U $role -v VERBOSITY=verbose -c "SELECT * FROM id_gen.export_order_no_keys()" 2>&1 || true)
  grep -q "ERROR:  42501" <<<"$out" || fail "export by $role: expected 42501, got: $out"
  pass "export_order_no_keys by a non-superuser ($role): $(grep -o 'ERROR:.*' <<<"$out" | head -1)"
done
mkdir -p "$M/keys"
cpsql "$E2E_DIR" "$E2E_PORT" -d shop -At -c "SELECT * FROM id_gen.export_order_no_keys()" > "$M/keys/order_no_keys.txt"
assert_eq "$(grep -cE '^[0-9]+\|\\x01[0-9a-f]{96}\|\\x[0-9a-f]{16}\|[tf]$' "$M/keys/order_no_keys.txt")" "2" "export: two wrapped rows (49 bytes, format 01) with the KEK fingerprint"
cp "$KEK" "$M/keys/kek.hex"
chown -R mysql:mysql "$M/keys"; chmod 0700 "$M/keys"; chmod 0400 "$M/keys"/*
printf '[id_gen]\norder_no_kek_file  = %s\norder_no_keys_file = %s\n' "$M/keys/kek.hex" "$M/keys/order_no_keys.txt" > "$M/plugin/id_gen_mysql.cnf"
chmod 0644 "$M/plugin/id_gen_mysql.cnf"

# --- MariaDB: load the plugin ------------------------------------------------------------------
install -o mysql -g mysql -m 0444 "$SO" "$M/plugin/libid_gen_mysql.so"
FUNCS="id_gen_shard_gene:INTEGER id_gen_shard_of:INTEGER id_gen_seq_of:INTEGER id_gen_compose_id:INTEGER
       id_gen_encode_order_no:STRING id_gen_encode_order_no_bin:STRING id_gen_decode_order_no:INTEGER"
# The SQL of docs/guide/mariadb.md runs as it stands there: guide_block N prints its N-th
# ```sql block (1: the CREATE FUNCTIONs, 2: the seed's table, trigger and a first INSERT).
guide_block() { awk -v n="$1" '/^```sql$/ { k++; on = (k == n); next } /^```/ { on = 0 } on' docs/guide/mariadb.md; }
create_functions() { guide_block 1 | mcli "$M"; }
create_functions
assert_eq "$(mcli "$M" -e "SELECT COUNT(*) FROM mysql.func WHERE dl = 'libid_gen_mysql.so'")" "$(echo $FUNCS | wc -w)" \
  "the guide's CREATE FUNCTIONs load every function of the plugin ($(echo $FUNCS))"
mcli "$M" -e "CREATE DATABASE shop"
assert_eq "$(m "SELECT CONCAT_WS(' ', id_gen_shard_gene(42), id_gen_shard_gene(0), id_gen_shard_gene(1), id_gen_shard_gene(45346343212), id_gen_shard_gene('alice'), id_gen_shard_gene('42'))")" \
  "16043 55408 24031 14299 13795 3541" "README check values in MariaDB"
assert_eq "$(m "SELECT CONCAT_WS(' ', id_gen_compose_id(16043, 5), id_gen_shard_of(id_gen_compose_id(16043, 5)), id_gen_seq_of(id_gen_compose_id(16043, 5)), id_gen_shard_of(x'3eab800000000005'), id_gen_seq_of(x'3eab800000000005'), id_gen_shard_of(x'1f55800000000000000000000000002a'), id_gen_seq_of(x'1f55800000000000000000000000002a'))")" \
  "2257851525684527109 16043 5 32087 5 16043 42" "compose/shard_of/seq_of on BIGINT, 8-byte and 16-byte ids"

# --- Golden genes, one by one ------------------------------------------------------------------
mcli "$M" shop -e "CREATE TABLE golden_int (owner BIGINT PRIMARY KEY, pg_gene INT NOT NULL);
  CREATE TABLE golden_str (id INT AUTO_INCREMENT PRIMARY KEY, raw VARBINARY(800) NOT NULL,
    owner VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin, pg_gene INT NOT NULL)"
p "SELECT 'INSERT INTO golden_int VALUES ' || string_agg(format('(%s,%s)', o, gene), ',') || ';' FROM golden_int" | mcli "$M" shop
p "SELECT 'INSERT INTO golden_str (raw, pg_gene) VALUES ' || string_agg(format('(x''%s'',%s)', encode(convert_to(s, 'UTF8'), 'hex'), gene), ',') || ';' FROM golden_str" | mcli "$M" shop
m "UPDATE golden_str SET owner = CONVERT(raw USING utf8mb4)"
assert_eq "$(m "SELECT COUNT(*) FROM golden_int")" "10000" "10k integer owners loaded into MariaDB"
assert_eq "$(m "SELECT COUNT(*) FROM golden_int WHERE NOT id_gen_shard_gene(owner) <=> pg_gene")" "0" "genes of 10k integer owners: MariaDB = PostgreSQL, one by one"
assert_eq "$(m "SELECT COUNT(*) FROM golden_str WHERE CHAR_LENGTH(owner) > 0 AND LENGTH(owner) > CHAR_LENGTH(owner)")" "$(p "SELECT count(*) FROM golden_str WHERE octet_length(s) > length(s)")" "multi-byte owners arrive as utf8mb4 text"
assert_eq "$(m "SELECT COUNT(*) FROM golden_str WHERE NOT id_gen_shard_gene(raw) <=> pg_gene")" "0" "genes of 10k string owners (binary bytes): MariaDB = PostgreSQL"
assert_eq "$(m "SELECT COUNT(*) FROM golden_str WHERE NOT id_gen_shard_gene(owner) <=> pg_gene")" "0" "genes of 10k string owners (utf8mb4_bin column): MariaDB = PostgreSQL"
assert_eq "$(m "SELECT CONCAT_WS(' ', 'alice ' = 'alice', id_gen_shard_gene('alice '), id_gen_shard_gene('alice'))")" "1 $(p "SELECT id_gen.shard_gene('alice ')") 13795" "trailing spaces are part of the owner's bytes (a PAD SPACE collation compares them equal, the genes differ)"
assert_eq "$(m "SELECT id_gen_shard_gene(CONVERT('Ä' USING latin1)) <> id_gen_shard_gene(CONVERT('Ä' USING utf8mb4))")" "1" "collation caveat: the same text in latin1 hashes its latin1 bytes"

# --- Order numbers across the two systems -------------------------------------------------------
mcli "$M" shop -e "CREATE TABLE golden_no (order_id BIGINT PRIMARY KEY, order_no CHAR(36) NOT NULL, kv INT NOT NULL, forged CHAR(36))"
p "SELECT 'INSERT INTO golden_no (order_id, order_no, kv) VALUES ' || string_agg(format('(%s,''%s'',%s)', order_id, order_no, kv), ',') || ';' FROM golden_no" | mcli "$M" shop
assert_eq "$(m "SELECT COUNT(*) FROM golden_no WHERE NOT id_gen_decode_order_no(order_no) <=> order_id")" "0" "1k PostgreSQL order numbers (key versions 1 and 2) decode in MariaDB to their ids, one by one"
assert_eq "$(m "SELECT COUNT(*) FROM golden_no WHERE NOT id_gen_decode_order_no(UNHEX(REPLACE(order_no, '-', ''))) <=> order_id")" "0" "... also given as 16 bytes"
assert_eq "$(m "SELECT COUNT(*) FROM golden_no WHERE kv = 2 AND NOT id_gen_encode_order_no(order_id) <=> order_no")" "0" "MariaDB encodes the same 500 numbers as PostgreSQL (current key version 2)"
assert_eq "$(m "SELECT COUNT(*) FROM golden_no WHERE kv = 2 AND NOT id_gen_encode_order_no_bin(order_id) <=> UNHEX(REPLACE(order_no, '-', ''))")" "0" "... and the same 16 bytes"
assert_eq "$(m "SELECT COUNT(DISTINCT id_gen_encode_order_no(order_id)) FROM golden_no")" "1000" "MariaDB numbers are distinct"
# MariaDB's numbers for new ids, decoded by PostgreSQL.
cpsql "$E2E_DIR" "$E2E_PORT" -d shop -c "CREATE TABLE from_maria (order_id bigint, order_no uuid)" >/dev/null
m "SELECT CONCAT('INSERT INTO from_maria VALUES ', GROUP_CONCAT(CONCAT('(', id, ',''', id_gen_encode_order_no(id), ''')') SEPARATOR ','), ';')
   FROM (SELECT id_gen_compose_id(id_gen_shard_gene(owner), 1000000 + pg_gene) AS id FROM golden_int LIMIT 1000) s" | cpsql "$E2E_DIR" "$E2E_PORT" -d shop >/dev/null
assert_eq "$(p "SELECT count(*) || ' ' || count(*) FILTER (WHERE id_gen.decode_order_no(order_no) = order_id) FROM from_maria")" "1000 1000" "PostgreSQL decodes 1k numbers made by MariaDB"

# Forged numbers: one hex digit changed (never a dash) → NULL and a warning, never an id.
m "UPDATE golden_no SET forged = INSERT(order_no, 1 + (order_id % 36) + (order_id % 36 IN (8, 13, 18, 23)), 1,
     IF(SUBSTRING(order_no, 1 + (order_id % 36) + (order_id % 36 IN (8, 13, 18, 23)), 1) = '0', '1', '0'))"
assert_eq "$(m "SELECT COUNT(*) FROM golden_no WHERE forged <> order_no")" "1000" "1k forged numbers (one hex digit changed)"
assert_eq "$(m "SELECT COUNT(id_gen_decode_order_no(forged)) FROM golden_no; SHOW COUNT(*) WARNINGS" | paste -sd' ')" "0 1000" "every forged number decodes to NULL, each with a warning"
w=$(m "SELECT id_gen_decode_order_no('$(uuidgen 2>/dev/null || echo 0b9e4f1c-1d2e-4f3a-8b5c-6d7e8f901234)'); SHOW WARNINGS")
grep -q "Warning	1411	id_gen: not a valid order number" <<<"$w" || fail "random uuid: expected a warning, got: $w"
pass "a random UUID is NULL with a warning: $(tail -1 <<<"$w")"
m "CREATE TABLE strict_t (id BIGINT NOT NULL)"
echo "  ok: strict INSERT of a forged decode: $(m_err "INSERT INTO strict_t SELECT id_gen_decode_order_no(forged) FROM golden_no LIMIT 1")"

# Wrong KEK, loose file modes: errors naming the problem, never a wrong id; fixed → works.
cp -p "$M/keys/kek.hex" "$M/keys/kek.hex.good"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$M/keys/kek.hex.bad"
install -o mysql -g mysql -m 0400 "$M/keys/kek.hex.bad" "$M/keys/kek.hex"
e=$(m_err "SELECT id_gen_decode_order_no(order_no) FROM golden_no LIMIT 1")
grep -q "was wrapped by the KEK with fingerprint" <<<"$e" || fail "wrong KEK: $e"
pass "wrong KEK: $e"
install -o mysql -g mysql -m 0444 "$M/keys/kek.hex.good" "$M/keys/kek.hex"
e=$(m_err "SELECT id_gen_encode_order_no(1)")
grep -q "mode 0444; it must not be accessible by group or others" <<<"$e" || fail "loose mode: $e"
pass "group/world-readable KEK file: $e"
chmod 0400 "$M/keys/kek.hex"
assert_eq "$(m "SELECT COUNT(*) FROM golden_no WHERE id_gen_decode_order_no(order_no) <=> order_id")" "1000" "right KEK back: every number decodes again (reloaded without a restart)"

# --- The seed's test_order on a MariaDB SEQUENCE (the guide's block) ----------------------------
guide_block 2 | mcli "$M" shop
assert_eq "$(m "SELECT GROUP_CONCAT(CONCAT(buyer_uid, ':', shard_gene, ':', id_gen_seq_of(order_id), ':', order_no_kv) ORDER BY id_gen_seq_of(order_id) SEPARATOR ' ') FROM test_order")" \
  "42:16043:1:2 42:16043:2:2 7:$(m "SELECT id_gen_shard_gene(7)"):3:2" "the guide's three orders: two of buyer 42 with its gene, one of buyer 7, key version 2"
m "DELETE FROM test_order; ALTER SEQUENCE orders_seq RESTART WITH 1"
mcli "$M" shop <<'SQL'
-- INSERT ... SELECT checks omitted NOT NULL columns before the trigger runs: name them as NULL.
INSERT INTO test_order (order_id, order_no, order_no_kv, buyer_uid) SELECT NULL, NULL, NULL, owner FROM golden_int;
SQL
assert_eq "$(m "SELECT COUNT(*), COUNT(DISTINCT buyer_uid) FROM test_order")" "10000	10000" "10k buyers inserted through the trigger"
assert_eq "$(m "SELECT COUNT(*) FROM test_order WHERE NOT shard_gene <=> id_gen_shard_gene(buyer_uid)")" "0" "generated shard_gene = id_gen_shard_gene(buyer_uid) for every row"
assert_eq "$(m "SELECT COUNT(*) FROM test_order t JOIN golden_int g ON g.owner = t.buyer_uid WHERE t.shard_gene <> g.pg_gene")" "0" "... = PostgreSQL's gene of the buyer"
assert_eq "$(m "SELECT COUNT(*) FROM test_order WHERE id_gen_decode_order_no(order_no) <=> order_id AND order_no_kv = 2")" "10000" "order_no decodes to order_id; order_no_kv = 2"
assert_eq "$(m "SELECT CONCAT(MIN(id_gen_seq_of(order_id)), '..', MAX(id_gen_seq_of(order_id))) FROM test_order")" "1..10000" "sequence parts come from orders_seq"

# 8 concurrent clients, 1000 buyers each (every buyer gets 2 orders), while the key file is
# rewritten (the key cache reloads under load).
CLIENTS=()
for c in $(seq 0 7); do
  ( for s in $(seq 0 9); do
      # The application's statement: only buyer_uid, 100 rows per INSERT.
      echo "INSERT INTO test_order (buyer_uid) VALUES $(seq -s, -f "($((1000000 + c * 1000 + (s % 5) * 100)) + %g)" 0 99);"
    done | mcli "$M" shop ) > "$M/client$c.log" 2>&1 &
  CLIENTS+=($!)
done
sleep 0.3
cpsql "$E2E_DIR" "$E2E_PORT" -d shop -At -c "SELECT * FROM id_gen.export_order_no_keys()" > "$M/keys/new.txt"
chown mysql:mysql "$M/keys/new.txt"; chmod 0400 "$M/keys/new.txt"; mv -f "$M/keys/new.txt" "$M/keys/order_no_keys.txt"
wait "${CLIENTS[@]}"
for c in $(seq 0 7); do [ ! -s "$M/client$c.log" ] || fail "client $c: $(cat "$M/client$c.log")"; done
assert_eq "$(m "SELECT COUNT(*), COUNT(DISTINCT order_id), COUNT(DISTINCT order_no) FROM test_order WHERE buyer_uid BETWEEN 1000000 AND 1007999")" "8000	8000	8000" "8 concurrent clients: 8000 rows, ids and order numbers unique"
assert_eq "$(m "SELECT COUNT(*) FROM test_order WHERE buyer_uid BETWEEN 1000000 AND 1007999 AND (order_id >> 47) <> id_gen_shard_gene(buyer_uid)")" "0" "owner-affine: every id carries its buyer's gene"
assert_eq "$(m "SELECT COUNT(*) FROM (SELECT buyer_uid FROM test_order WHERE buyer_uid BETWEEN 1000000 AND 1007999 GROUP BY buyer_uid HAVING COUNT(*) = 2 AND COUNT(DISTINCT order_id >> 47) = 1) s")" "4000" "each of 4000 buyers: 2 orders, one gene"
assert_eq "$(m "SELECT COUNT(*) FROM test_order WHERE NOT id_gen_decode_order_no(order_no) <=> order_id")" "0" "all 18k order numbers decode to their ids"

# Past 2^47 - 1: an error, not a wrapped id. A sequence without the 47-bit MAXVALUE:
m "CREATE SEQUENCE wide_seq START WITH 140737488355327 MAXVALUE 9223372036854775806"
m "DROP TRIGGER test_order_fill;
   CREATE TRIGGER test_order_fill BEFORE INSERT ON test_order FOR EACH ROW SET NEW.order_id = id_gen_compose_id(id_gen_shard_gene(NEW.buyer_uid), NEXT VALUE FOR wide_seq), NEW.order_no = id_gen_encode_order_no_bin(NEW.order_id), NEW.order_no_kv = 2"
m "INSERT INTO test_order (buyer_uid) VALUES (42)"
assert_eq "$(m "SELECT id_gen_seq_of(MAX(order_id)) FROM test_order WHERE buyer_uid = 42")" "140737488355327" "the last 47-bit value is still issued"
e=$(m_err "INSERT INTO test_order (buyer_uid) VALUES (43)")
grep -q "ERROR 1690 (22003).*sequence value 140737488355328 is out of range" <<<"$e" || fail "overflow: $e"
pass "next one: $e"
assert_eq "$(m "SELECT COUNT(*) FROM test_order WHERE buyer_uid = 43")" "0" "no row was inserted"
assert_eq "$(m "SELECT (id_gen_shard_gene(42) << 47) | 140737488355328 = (id_gen_shard_gene(42) << 47)")" "1" "(the raw expression would have wrapped into an existing id)"
m "CREATE SEQUENCE capped_seq START WITH 140737488355327 MAXVALUE 140737488355327 NOCYCLE"
assert_eq "$(m "SELECT NEXT VALUE FOR capped_seq")" "140737488355327" "a sequence with MAXVALUE 2^47 - 1 issues its last value"
pass "and then refuses: $(m_err "SELECT NEXT VALUE FOR capped_seq")"

# Unload and load again (dlclose of the library, its key cache dropped), then keep working.
# Before the sweep: MariaDB itself keeps a UDF library loaded for good once a statement
# failed before init with "Operand should contain 1 column(s)" (ROW(1, 2) below).
assert_gt "$(grep -c libid_gen_mysql "/proc/$MPID/maps" || true)" 0 "the library is mapped in mysqld"
for f in $FUNCS; do mcli "$M" -e "DROP FUNCTION ${f%%:*}"; done
assert_eq "$(grep -c libid_gen_mysql "/proc/$MPID/maps" || true)" "0" "DROP FUNCTION of all seven: mysqld unloaded the library (dlclose; its key cache was dropped)"
create_functions
assert_eq "$(m "SELECT COUNT(*) FROM golden_no WHERE id_gen_decode_order_no(order_no) <=> order_id")" "1000" "after DROP/CREATE FUNCTION (library unloaded and loaded): keys load again"
# --- Hostile arguments: mysqld stays up ---------------------------------------------------------
HOSTILE=(
  "" "NULL" "1.5" "1e300" "-1" "0" "9223372036854775807" "18446744073709551615"
  "-9223372036854775808" "''" "REPEAT('x', 4000000)" "x'00'" "x'00000000000000'"
  "x'0000000000000000'" "x'000000000000000000'" "x'ffffffffffffffffffffffffffffff'"
  "x'ffffffffffffffffffffffffffffffff'" "x'0000000000000000000000000000000000'"
  "CAST(NULL AS DECIMAL)" "NOW()" "_utf8mb4'ü'" "(SELECT 1)" "ROW(1, 2)" "1, 2" "1, 2, 3"
  "'3eab02ac-988d-8a0e-8bb2-6e6f6c7c75ee'" "'3eab02ac988d8a0e8bb26e6f6c7c75ee'" "'{3eab02ac-988d-8a0e-8bb2-6e6f6c7c75ee}'"
  "REPEAT('-', 36)" "65536, 1" "-1, 0" "0, -1" "NULL, NULL" "'a', 1" "1.5, 1" "1, REPEAT('9', 100000)"
  "65535, 140737488355327" "buyer_uid, order_id" "order_no, order_no"
)
sweep=$M/sweep.sql
: > "$sweep"
for f in $FUNCS; do
  for a in "${HOSTILE[@]}"; do echo "SELECT ${f%%:*}($a) FROM test_order LIMIT 3;" >> "$sweep"; done
done
mcli "$M" shop --force < "$sweep" > "$M/sweep.out" 2> "$M/sweep.err" || true
calls=$(wc -l < "$sweep")
errors=$(grep -c '^ERROR' "$M/sweep.err" || true)
# 212 of them are refused (wrong count, type, length, sign; ROW); the rest give NULL or a value.
assert_eq "$errors" "212" "hostile sweep: $calls calls over 7 functions, refused with an error"
assert_eq "$(cat "$M/mysqld.pid")" "$MPID" "mysqld is the same process after the sweep"
assert_eq "$(m "SELECT id_gen_shard_gene(42)")" "16043" "and still answers"
grep -qiE 'panicked|got signal|Assertion' "$M/error.log" && fail "error log: $(grep -iE 'panicked|got signal|Assertion' "$M/error.log" | head -3)"
pass "no panic or signal in the MariaDB error log"

maria_stop "$M"
grep -q "Shutdown complete" "$M/error.log" || fail "mariadbd did not shut down cleanly: $(tail -5 "$M/error.log")"
grep -qiE 'panicked|got signal' "$M/error.log" && fail "error log after shutdown: $(grep -iE 'panicked|got signal' "$M/error.log" | head -3)"
pass "clean shutdown with the plugin loaded"
T1=$(date +%s)
echo "07_mariadb: passed ($((T1 - T_BUILT)) s, plus $((T_BUILT - T0)) s plugin build)"
