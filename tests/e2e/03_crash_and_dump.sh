#!/usr/bin/env bash
# (3) kill -9 of the postmaster (and every child) during load, restart, continue: no
#     value reused, new values exceed every value handed out before.
# (4) pg_dump / pg_restore into a new database: the restored sequence continues above.
source "$(dirname "$0")/lib.sh"
e2e_start /tmp/idg_e2e3 54343
cpsql "$E2E_DIR" "$E2E_PORT" <<'SQL' >/dev/null
CREATE EXTENSION id_gen;
SELECT id_gen.create_sequence('k', step => 50);
CREATE TABLE kt (id bigint PRIMARY KEY DEFAULT id_gen.next_segment_id('k'), at timestamptz DEFAULT now());
SQL
kill9_under_load 8
handed_max=$HANDED_MAX
cluster_up "$E2E_DIR"
table_max=$(q postgres "SELECT max(id) FROM kt")
rows=$(q postgres "SELECT count(*) FROM kt")
assert_gt "$rows" 0 "rows committed before the crash"
prev_max=$(( handed_max > table_max ? handed_max : table_max ))
new_min=$(q postgres "SELECT min(id_gen.next_segment_id('k')) FROM generate_series(1, 1000)")
assert_gt "$new_min" "$prev_max" "after kill -9 + restart, new values exceed every value handed out before"
pgbench_run postgres -c 4 -j 2 -t 500 -f "$E2E_DIR/ins.sql" > "$E2E_DIR/pgb2.log" 2>&1 || fail "inserts after restart failed"
assert_eq "$(q postgres "SELECT count(*) = count(DISTINCT id) FROM kt")" "t" "no duplicate ids across the crash"

# (4) dump and restore into a new database: values, owners, grants and max_bulk survive.
cpsql "$E2E_DIR" "$E2E_PORT" -c "CREATE DATABASE src" >/dev/null
cpsql "$E2E_DIR" "$E2E_PORT" -d src <<'SQL' >/dev/null
CREATE ROLE shop_owner NOLOGIN;
CREATE ROLE shop_app NOLOGIN;
CREATE ROLE billing_app NOLOGIN;
CREATE ROLE gone_owner NOLOGIN;
CREATE EXTENSION id_gen;
SELECT id_gen.create_sequence('d', step => 100, max_bulk => 777);
SELECT id_gen.alter_sequence_owner('d', 'shop_owner');
SELECT id_gen.grant_usage('d', 'shop_app');
SELECT id_gen.create_serial('ds', 'YYYYMMDD', width => 4, time_zone => 'UTC');
SELECT id_gen.alter_serial_owner('ds', 'shop_owner');
SELECT id_gen.grant_usage('ds', 'public');
SELECT id_gen.create_sequence('orphan');
SELECT id_gen.alter_sequence_owner('orphan', 'gone_owner');
CREATE TABLE dt (id bigint PRIMARY KEY DEFAULT id_gen.next_segment_id('d'));
INSERT INTO dt SELECT FROM generate_series(1, 1234);
SQL
src_max=$(q src "SELECT max(id) FROM dt")
"$PG_BIN/pg_dump" -h "$E2E_DIR" -p "$E2E_PORT" -U postgres -Fc -f "$E2E_DIR/src.dump" src
# A role of the dump that the target lacks (as when restoring into another cluster).
cpsql "$E2E_DIR" "$E2E_PORT" -c "DROP ROLE gone_owner" >/dev/null
cpsql "$E2E_DIR" "$E2E_PORT" -c "CREATE DATABASE dst" >/dev/null
"$PG_BIN/pg_restore" -h "$E2E_DIR" -p "$E2E_PORT" -U postgres -d dst "$E2E_DIR/src.dump"
assert_eq "$(q dst "SELECT count(*) FROM dt")" "1234" "restored rows"
assert_eq "$(q dst "SELECT count(*) FROM id_gen.sequences WHERE name = 'd'")" "1" "restored catalog row"
dst_min=$(q dst "SELECT min(id_gen.next_segment_id('d')) FROM generate_series(1, 500)")
assert_gt "$dst_min" "$src_max" "restored sequence continues above the old values"
q dst "INSERT INTO dt SELECT FROM generate_series(1, 1000)" >/dev/null
assert_eq "$(q dst "SELECT count(*) = count(DISTINCT id) FROM dt")" "t" "no collision with restored rows"
assert_eq "$(q dst "SELECT owner || '/' || max_bulk FROM id_gen.sequences WHERE name = 'd'")" "shop_owner/777" "owner and max_bulk restored"
assert_eq "$(q dst "SELECT string_agg(kind || ':' || name || ':' || grantee, ',' ORDER BY kind, name) FROM id_gen.usage_grants")" \
  "sequence:d:shop_app,serial:ds:public" "grants restored"
assert_eq "$(q dst "SET ROLE shop_app; SELECT id_gen.next_segment_id('d') > 0")" "t" "the grantee takes values after the restore"
denied=$(q dst "SET ROLE billing_app; SELECT id_gen.next_segment_id('d')" 2>&1 || true)
case "$denied" in *'permission denied for sequence "d": role "billing_app"'*) pass "others are still refused after the restore";;
  *) fail "billing_app was not refused after the restore: $denied";; esac
assert_eq "$(q dst "SET ROLE billing_app; SELECT length(id_gen.next_serial('ds')) > 0")" "t" "a PUBLIC grant on a serial restored"
# The sequence of a role missing on the target is kept; only a superuser may act on it.
assert_eq "$(q dst "SELECT owner FROM id_gen.sequences WHERE name = 'orphan'")" "gone_owner" "a row whose owner role is missing is kept"
orphan=$(q dst "SET ROLE shop_owner; SELECT id_gen.drop_sequence('orphan')" 2>&1 || true)
case "$orphan" in *'does not exist in this cluster'*) pass "the error names the missing owner role";;
  *) fail "unexpected answer for a missing owner: $orphan";; esac
assert_eq "$(q dst "SELECT id_gen.alter_sequence_owner('orphan', 'shop_owner')")" "shop_owner" "a superuser assigns a present owner"
echo "03_crash_and_dump: passed"
