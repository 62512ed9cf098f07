#!/usr/bin/env bash
# ALTER EXTENSION id_gen UPDATE from the released 0.1.0 (through every update script)
# and from the released 0.2.0: data and values survive, access stays as it was (a PUBLIC
# grant per existing sequence), routes survive, and each upgraded schema equals a fresh
# install of the new version (functions, privileges, comments, tables, views); the long
# operations recorded by 0.7.2 survive the catalog change of 0.7.3.
source "$(dirname "$0")/lib.sh"
EXT_DIR="$("$PG_CONFIG" --sharedir)/extension"
NEW=$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$REPO_ROOT/id_gen.control")
# The released install scripts are copied in for the test (the build installs only the
# current one) and removed afterwards.
RELEASED=()
for f in "$REPO_ROOT"/tests/upgrade/id_gen--*.sql; do
  [ "$(basename "$f")" = "id_gen--$NEW.sql" ] && continue
  cp "$f" "$EXT_DIR/"; RELEASED+=("$EXT_DIR/$(basename "$f")")
done

trap 'rm -f "${RELEASED[@]}"; cluster_stop "$E2E_DIR"' EXIT
E2E_DIR=/tmp/idg_e2e8 E2E_PORT=54348
cluster_start "$E2E_DIR" "$E2E_PORT"

cpsql "$E2E_DIR" "$E2E_PORT" <<'SQL' >/dev/null
CREATE DATABASE old; CREATE DATABASE mid; CREATE DATABASE v3; CREATE DATABASE fresh;
CREATE ROLE upg_app LOGIN;
SQL
cpsql "$E2E_DIR" "$E2E_PORT" -d old <<'SQL' >/dev/null
CREATE EXTENSION id_gen VERSION '0.1.0';
-- The rows 0.1.0's create_sequence/create_serial wrote (the new library serves the old
-- SQL definitions only until the update: their argument lists changed).
INSERT INTO id_gen.sequences (name, max_id, step, min_step, max_step, buffer_seconds)
VALUES ('legacy', 0, 100, 100, 1000000, 30);
INSERT INTO id_gen.serials (name, date_format, width, max_length, time_zone, step)
VALUES ('legacy_serial', 'YYYYMMDD', 4, 32, 'UTC', 100);
CREATE TABLE lt (id bigint PRIMARY KEY DEFAULT id_gen.next_segment_id('legacy'));
INSERT INTO lt SELECT FROM generate_series(1, 500);
SQL
assert_eq "$(q old "SELECT extversion FROM pg_extension WHERE extname = 'id_gen'")" "0.1.0" "installed the released 0.1.0"
before=$(q old "SELECT max(id) FROM lt")
q old "ALTER EXTENSION id_gen UPDATE TO '$NEW'" >/dev/null
assert_eq "$(q old "SELECT extversion FROM pg_extension WHERE extname = 'id_gen'")" "$NEW" "updated to $NEW"
after=$(q old "SELECT min(id_gen.next_segment_id('legacy')) FROM generate_series(1, 100)")
assert_gt "$after" "$before" "values continue above the old ones after the update"
assert_eq "$(q old "SELECT string_agg(kind || ':' || name || ':' || grantee, ',' ORDER BY kind) FROM id_gen.usage_grants")" \
  "sequence:legacy:public,serial:legacy_serial:public" "existing sequences and serials stay open to PUBLIC"
assert_eq "$(q old "SET ROLE upg_app; SELECT id_gen.next_segment_id('legacy') > 0")" "t" "an application role keeps its access"
assert_eq "$(q old "SELECT owner = current_user FROM id_gen.sequences WHERE name = 'legacy'")" "t" "the updating role owns existing sequences"

q fresh "CREATE EXTENSION id_gen" >/dev/null
# Everything a user can see of the extension, normalised (default ACLs made explicit).
SCHEMA_SQL=$(cat <<'SQL'
SELECT 'fn ' || p.oid::regprocedure || ' ' || p.provolatile::text || p.proisstrict::text || p.proparallel::text
       || p.prosecdef::text || ' ' || coalesce(p.proconfig::text, '') || ' ' || coalesce(pg_get_function_result(p.oid), 'procedure')
       || ' ' || pg_get_function_arguments(p.oid) || ' ' || coalesce(p.probin, '') || ' '
       || md5(p.prosrc) || ' acl=' || ARRAY(SELECT a::text FROM unnest(coalesce(p.proacl, acldefault('f', p.proowner))) a ORDER BY 1)::text
       || ' comment=' || coalesce(md5(obj_description(p.oid, 'pg_proc')), '-')
FROM pg_proc p WHERE p.pronamespace = 'id_gen'::regnamespace
UNION ALL
SELECT 'col ' || a.attrelid::regclass || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
       || ' ' || a.attnotnull::text || ' ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '') || ' comment='
       || coalesce(md5(col_description(a.attrelid, a.attnum)), '-')
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE c.relnamespace = 'id_gen'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'rel ' || c.oid::regclass || ' ' || c.relkind::text || ' acl=' || ARRAY(SELECT a::text FROM unnest(coalesce(c.relacl, acldefault('r', c.relowner))) a ORDER BY 1)::text
       || ' comment=' || coalesce(md5(obj_description(c.oid, 'pg_class')), '-')
       || CASE WHEN c.relkind = 'v' THEN ' view=' || md5(pg_get_viewdef(c.oid)) ELSE '' END
FROM pg_class c WHERE c.relnamespace = 'id_gen'::regnamespace
UNION ALL
SELECT 'con ' || conrelid::regclass || ' ' || pg_get_constraintdef(oid)
FROM pg_constraint WHERE connamespace = 'id_gen'::regnamespace
UNION ALL
SELECT 'cfg ' || ARRAY(SELECT c::regclass::text FROM unnest(extconfig) c ORDER BY 1)::text
FROM pg_extension WHERE extname = 'id_gen'
ORDER BY 1
SQL
)
q old "$SCHEMA_SQL" > "$E2E_DIR/upgraded.txt"
q fresh "$SCHEMA_SQL" > "$E2E_DIR/fresh.txt"
if ! diff -u "$E2E_DIR/fresh.txt" "$E2E_DIR/upgraded.txt" > "$E2E_DIR/schema.diff"; then
  head -40 "$E2E_DIR/schema.diff" >&2
  fail "the upgraded schema differs from a fresh install"
fi
pass "the upgraded schema equals a fresh install ($(wc -l < "$E2E_DIR/fresh.txt") objects and columns compared)"

# From the released 0.2.0: routes and sequences survive; distributed tables work after it.
cpsql "$E2E_DIR" "$E2E_PORT" -d mid <<'SQL' >/dev/null
CREATE EXTENSION id_gen VERSION '0.2.0';
SELECT id_gen.create_sequence('orders', step => 100);
SELECT id_gen.set_route(30000, 'shard_a');
SELECT id_gen.set_route(65535, 'shard_b');
CREATE TABLE mt (id bigint PRIMARY KEY DEFAULT id_gen.next_segment_id('orders'));
INSERT INTO mt SELECT FROM generate_series(1, 300);
SQL
before=$(q mid "SELECT max(id) FROM mt")
q mid "ALTER EXTENSION id_gen UPDATE TO '$NEW'" >/dev/null
assert_eq "$(q mid "SELECT extversion FROM pg_extension WHERE extname = 'id_gen'")" "$NEW" "0.2.0 updated to $NEW"
assert_gt "$(q mid "SELECT min(id_gen.next_segment_id('orders')) FROM generate_series(1, 100)")" "$before" "values continue above the old ones"
assert_eq "$(q mid "SELECT string_agg(lower_gene || '-' || upper_gene || '@' || shard, ',' ORDER BY lower_gene) FROM id_gen.route_ranges")" \
  "0-30000@shard_a,30001-65535@shard_b" "the routes survive"
q mid "SELECT id_gen.set_route(40000, 'shard_b')" >/dev/null
assert_eq "$(q mid "SELECT count(*) FROM id_gen.shard_routes")" "3" "set_route works after the update (no distributed tables: nothing to sync)"
q mid "$SCHEMA_SQL" > "$E2E_DIR/upgraded_mid.txt"
if ! diff -u "$E2E_DIR/fresh.txt" "$E2E_DIR/upgraded_mid.txt" > "$E2E_DIR/schema_mid.diff"; then
  head -40 "$E2E_DIR/schema_mid.diff" >&2
  fail "the schema updated from 0.2.0 differs from a fresh install"
fi
pass "the schema updated from 0.2.0 equals a fresh install"

# From the released 0.3.0, with a distributed table (over a loopback shard server): its
# partitions keep their names (stems), and the schema equals a fresh install.
cpsql "$E2E_DIR" "$E2E_PORT" -d v3 <<SQL >/dev/null
CREATE EXTENSION id_gen VERSION '0.3.0'; CREATE EXTENSION postgres_fdw;
CREATE DATABASE v3_shard;
CREATE SERVER s1 FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '$E2E_DIR', port '$E2E_PORT', dbname 'v3_shard');
CREATE USER MAPPING FOR postgres SERVER s1;
SELECT id_gen.create_sequence('orders', step => 100);
SELECT id_gen.set_route(65535, 's1');
CREATE TABLE a_table_with_a_name_longer_than_thirty (id bigint PRIMARY KEY, v int);
SQL
q v3_shard "CREATE EXTENSION id_gen VERSION '0.3.0'" >/dev/null
q v3 "SET client_min_messages = warning; SELECT id_gen.distribute_table('a_table_with_a_name_longer_than_thirty', 'id')" >/dev/null
q v3 "INSERT INTO a_table_with_a_name_longer_than_thirty SELECT id_gen.compose_id(g, g), g FROM generate_series(1, 50) g" >/dev/null
q v3 "ALTER EXTENSION id_gen UPDATE TO '$NEW'" >/dev/null
q v3_shard "ALTER EXTENSION id_gen UPDATE TO '$NEW'" >/dev/null
assert_eq "$(q v3 "SELECT extversion FROM pg_extension WHERE extname = 'id_gen'")" "$NEW" "0.3.0 updated to $NEW"
assert_eq "$(q v3 "SELECT shard_stem || ' ' || coordinator_stem FROM id_gen.distributed_tables")" "a_table__e4a7c13c a_table__e4a7c13c" \
  "the stems of a 0.3.0 distributed table are its old partition-name prefixes"
q v3 "CREATE EXTENSION dblink" >/dev/null
q v3 "SELECT id_gen.set_route(30000, 's1', copy_rows => true)" >/dev/null
assert_eq "$(q v3 "SELECT count(*) FROM a_table_with_a_name_longer_than_thirty")/$(q v3 "SELECT bool_and(in_step) FROM id_gen.distribution")" "50/t" \
  "after the update a route change re-partitions it and every row is still there"
q v3 "$SCHEMA_SQL" > "$E2E_DIR/upgraded_v3.txt"
if ! diff -u "$E2E_DIR/fresh.txt" "$E2E_DIR/upgraded_v3.txt" > "$E2E_DIR/schema_v3.diff"; then
  head -40 "$E2E_DIR/schema_v3.diff" >&2
  fail "the schema updated from 0.3.0 differs from a fresh install"
fi
pass "the schema updated from 0.3.0 equals a fresh install"
# From the released 0.7.2, with a move and a merge recorded: 0.7.3 keeps every long
# operation in one catalog (id_gen.cluster_operations); the rows move over with their ids,
# id_gen.moves, id_gen.splits and id_gen.operations show them, and new ids follow them.
q fresh "CREATE DATABASE v72" >/dev/null
cpsql "$E2E_DIR" "$E2E_PORT" -d v72 <<'SQL' >/dev/null
CREATE EXTENSION id_gen VERSION '0.7.2';
INSERT INTO id_gen.shard_moves (lower_gene, upper_gene, source_shard, target_shard, phase, reversible, back_lag_bytes)
VALUES (0, 4095, 's1', 's2', 'reversible', true, 42);
INSERT INTO id_gen.route_splits (kind, lower_gene, at_gene, upper_gene, shard, phase, rows_total, rows_copied)
VALUES ('merge', 4096, 8191, 16383, 's1', 'done', 10, 10);
INSERT INTO id_gen.shard_moves (lower_gene, upper_gene, source_shard, target_shard, phase, slot_created, source_fenced)
VALUES (16384, 32767, 's1', 's2', 'catching_up', true, true);
INSERT INTO id_gen.shard_moves (lower_gene, upper_gene, source_shard, target_shard, phase, reversible, source_fenced)
VALUES (32768, 40000, 's1', 's2', 'reversible', true, true), (40001, 50000, 's1', 's2', 'reverting', true, true);
INSERT INTO id_gen.shard_moves (lower_gene, upper_gene, source_shard, target_shard, phase, slot_created)
VALUES (50001, 60000, 's1', 's2', 'failed', true), (60001, 65535, 's1', 's2', 'cut_over', true);
SQL
q v72 "ALTER EXTENSION id_gen UPDATE TO '$NEW'" >/dev/null
assert_eq "$(q v72 "SELECT string_agg(operation_id || ':' || kind || ':' || phase || ':' || source_shard || '>' || target_shard, ',' ORDER BY operation_id) FROM id_gen.operations")" \
  "1:move:reversible:s1>s2,2:merge:done:s1>s1,3:move:catching_up:s1>s2,4:move:reversible:s1>s2,5:move:reverting:s1>s2,6:move:failed:s1>s2,7:move:cut_over:s1>s2" "the moves and splits of 0.7.2 are long operations of $NEW, ids kept"
assert_eq "$(q v72 "SELECT string_agg(move_id || ':' || reversible || ':' || coalesce(back_lag_bytes, 0) || ':' || runner || ':' || source_fenced, ',' ORDER BY move_id) FROM id_gen.moves")/$(q v72 "SELECT split_id || ':' || percent_copied FROM id_gen.splits")" \
  "1:true:42:no session:false,3:false:0:no session:true,4:true:0:no session:true,5:true:0:no session:false,6:false:0:no session:false,7:false:0:no session:false/2:100.0" "id_gen.moves and id_gen.splits show them as before"
assert_eq "$(q v72 "SELECT string_agg(operation_id || ':' || objects, ' ') FROM (SELECT operation_id, string_agg(object || '@' || node, ',' ORDER BY object) AS objects FROM id_gen.operation_cleanups GROUP BY 1 ORDER BY 1) c")" \
  "1:source_copies@s1,target_copies@s2,way_back@s2 3:markers@s2,publication@s1,replication_slot@s1,source_copies@s1,source_fence@s1,source_markers@s1,subscription@s2,sync_slots@s1,target_copies@s2 4:revert_fence@s2,source_copies@s1,target_copies@s2,way_back@s2 5:source_copies@s1,target_copies@s2,way_back@s2 6:markers@s2,publication@s1,replication_slot@s1,source_copies@s1,source_markers@s1,subscription@s2,sync_slots@s1,target_copies@s2 7:markers@s2,publication@s1,replication_slot@s1,source_copies@s1,source_markers@s1,subscription@s2,sync_slots@s1,target_copies@s2" \
  "the flags of unfinished moves became cleanup records in every phase (a reversible or reverting one keeps those that wait for its outcome, and a reversible one's source_fenced is its revert's fence; slot_created and source_fenced are the slot and the fence)"
assert_eq "$(q v72 "SELECT nextval('id_gen.move_ids')")" "8" "new operations are numbered after them"
q v72 "$SCHEMA_SQL" > "$E2E_DIR/upgraded_v72.txt"
if ! diff -u "$E2E_DIR/fresh.txt" "$E2E_DIR/upgraded_v72.txt" > "$E2E_DIR/schema_v72.diff"; then
  head -40 "$E2E_DIR/schema_v72.diff" >&2
  fail "the schema updated from 0.7.2 differs from a fresh install"
fi
pass "the schema updated from 0.7.2, with operations recorded, equals a fresh install"
echo "08_upgrade: passed"
