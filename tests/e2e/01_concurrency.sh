#!/usr/bin/env bash
# (1) 8 clients x 100k next_segment_id over 3 sequences in 2 databases into UNIQUE
#     tables: zero duplicates, no failed transaction, the catalog covers every value.
# (6) step 100 with 64 concurrent callers: no errors.
source "$(dirname "$0")/lib.sh"
e2e_start /tmp/idg_e2e1 54341
CALLS=${IDG_E2E_CALLS:-100000}
for db in db1 db2; do
  cpsql "$E2E_DIR" "$E2E_PORT" -c "CREATE DATABASE $db"
  cpsql "$E2E_DIR" "$E2E_PORT" -d "$db" <<SQL
CREATE EXTENSION id_gen;
SELECT id_gen.create_sequence('a', step => 100);
SELECT id_gen.create_sequence('b', step => 1000);
SELECT id_gen.create_sequence('c', step => 100, min_step => 100, max_step => 100);
CREATE TABLE ua (id bigint PRIMARY KEY); CREATE TABLE ub (id bigint PRIMARY KEY); CREATE TABLE uc (id bigint PRIMARY KEY);
SQL
done
cat > "$E2E_DIR/three.sql" <<'SQL'
\set r random(1, 3)
\if :r = 1
INSERT INTO ua VALUES (id_gen.next_segment_id('a'));
\elif :r = 2
INSERT INTO ub VALUES (id_gen.next_segment_id('b'));
\else
INSERT INTO uc VALUES (id_gen.next_segment_id('c'));
\endif
SQL
# 4 clients per database, 8 in all, each making $CALLS calls.
pgbench_run db1 -c 4 -j 2 -t "$CALLS" -f "$E2E_DIR/three.sql" > "$E2E_DIR/pgb1.log" 2>&1 &
P1=$!
pgbench_run db2 -c 4 -j 2 -t "$CALLS" -f "$E2E_DIR/three.sql" > "$E2E_DIR/pgb2.log" 2>&1
wait $P1 || fail "pgbench in db1 failed: $(tail -5 "$E2E_DIR/pgb1.log")"
for db in db1 db2; do
  total=$(q "$db" "SELECT (SELECT count(*) FROM ua) + (SELECT count(*) FROM ub) + (SELECT count(*) FROM uc)")
  assert_eq "$total" "$((4 * CALLS))" "$db: every call inserted a unique row"
  for s in a b c; do
    covered=$(q "$db" "SELECT (SELECT coalesce(max(id), 0) FROM u$s) <= max_id FROM id_gen.sequences WHERE name = '$s'")
    assert_eq "$covered" "t" "$db.$s: catalog high-water mark covers every value"
    distinct=$(q "$db" "SELECT count(*) = count(DISTINCT id) FROM u$s")
    assert_eq "$distinct" "t" "$db.$s: no value repeats"
  done
done
grep -q "number of failed transactions: 0" "$E2E_DIR/pgb1.log" || fail "db1 had failed transactions"
grep -q "number of failed transactions: 0" "$E2E_DIR/pgb2.log" || fail "db2 had failed transactions"
pass "no failed pgbench transaction in either database"

# (6) 64 concurrent callers on a fixed step of 100: they wait for refills, never fail.
cat > "$E2E_DIR/small.sql" <<'SQL'
INSERT INTO uc VALUES (id_gen.next_segment_id('c'));
SQL
pgbench_run db1 -c 64 -j 2 -t 1000 -f "$E2E_DIR/small.sql" > "$E2E_DIR/pgb64.log" 2>&1 || fail "64-client run failed: $(tail -5 "$E2E_DIR/pgb64.log")"
grep -q "number of failed transactions: 0" "$E2E_DIR/pgb64.log" || fail "64-client run had failed transactions"
waits=$(q db1 "SELECT waits FROM id_gen.status WHERE sequence = 'c' AND database = 'db1'")
pass "64 callers x 1000 calls with step 100: 0 errors ($waits waits for the worker)"
# gene_order_id: 8 clients, random owners, a sequence with 4 counter groups: ids unique,
# every id carries its owner's gene.
cpsql "$E2E_DIR" "$E2E_PORT" -d db1 >/dev/null <<'SQL'
SELECT id_gen.create_sequence('g4', step => 100, counters => 4);
CREATE TABLE go (id bigint PRIMARY KEY, owner bigint NOT NULL);
SQL
cat > "$E2E_DIR/gene.sql" <<'SQL'
\set owner random(1, 1000000)
INSERT INTO go VALUES (id_gen.gene_order_id('g4', :owner::bigint), :owner);
SQL
pgbench_run db1 -c 8 -j 2 -t $((CALLS / 4)) -f "$E2E_DIR/gene.sql" > "$E2E_DIR/pgbgene.log" 2>&1 || fail "gene_order_id run failed: $(tail -5 "$E2E_DIR/pgbgene.log")"
grep -q "number of failed transactions: 0" "$E2E_DIR/pgbgene.log" || fail "gene_order_id run had failed transactions"
assert_eq "$(q db1 "SELECT count(*) FROM go")" "$((8 * CALLS / 4))" "gene_order_id: every call inserted a unique id"
assert_eq "$(q db1 "SELECT bool_and(id_gen.shard_of(id) = id_gen.shard_gene(owner)) FROM go")" "t" "gene_order_id: every id carries its owner's gene"
assert_eq "$(q db1 "SELECT count(*) FROM id_gen.status WHERE sequence = 'g4' AND database = 'db1'")" "4" "four counter groups in the cache"
echo "01_concurrency: passed"
