#!/usr/bin/env bash
# The sharded deployment as a hostile DBA and bad luck would try it (a coordinator that is
# also the segment authority, two shards with wal_level = logical):
# (a) no lost rows in route changes: a coordinator writer and a direct shard writer each
#     commit while set_route splits their range; pgbench through the coordinator while
#     two sessions split and merge ranges at once: every committed row is there, once.
# (b) no superuser code for table owners: look-alike operators and functions in public on
#     every node (better matches for what id_gen compares and calls) never run; a table whose CHECK calls a
#     function its non-superuser owner wrote is refused (42501), nobody became superuser.
# (c) no secrets: a move and a failed move (a slot of its name exists on the source)
#     leave the user mapping's password in no server log, no pg_stat_activity snapshot
#     a pg_monitor role took meanwhile, no dry_run output and no id_gen.moves row; the
#     pre-existing slot is left alone.
# (d) names: a table named like another's partition stem gets its own partitions; a
#     63-byte CJK name with a sequence works; a table name with $d$ moves.
# (e) an UPDATE that moves a row to an owner of another gene is refused (23514).
# (f) grants: partitions created by a move carry the parent's grants; a GRANT after
#     distribute_table reaches the partitioned table; renames are refused (0A000);
#     DROP EXTENSION during a move is refused (55006).
# (g) clear errors: genes past 65535 (22003), a serial id and a temp table (0A000), a move
#     to the segment authority (22023).
# (h) the coordinator killed (kill -9) while a move's fence is up: after its restart the
#     move supervisor lifts the fence by itself, direct writes work again, and the same
#     CALL finishes the move.
source "$(dirname "$0")/lib.sh"
C=/tmp/idg_e2e14c CP=54440
shard_dir() { echo "/tmp/idg_e2e14s$1"; }
shard_port() { echo $((CP + $1)); }
SMALL=("shared_buffers = 32MB" "max_connections = 40")
LOGICAL=("wal_level = logical" "max_wal_senders = 10" "max_replication_slots = 10")
SECRET='S3cr3t-pw-9f1c'
trap 'kill $(jobs -p) 2>/dev/null || true; cluster_stop "$C"; for i in 1 2; do cluster_stop "$(shard_dir $i)"; done' EXIT
cq() { cpsql "$C" "$CP" -At "$@"; }
sq() { local i=$1; shift; cpsql "$(shard_dir "$i")" "$(shard_port "$i")" -At "$@"; }
state_of() { "$@" -v VERBOSITY=verbose 2>&1 >/dev/null | sed -n 's/^ERROR:  \([0-9A-Z]\{5\}\): .*/\1/p' | head -1; }
routes() { cq -c "SELECT string_agg(lower_gene || '-' || upper_gene || '@' || shard, ',' ORDER BY lower_gene) FROM id_gen.route_ranges"; }
owner_in() { cq -c "SELECT o FROM generate_series(1, 1000000) o WHERE id_gen.shard_gene(o::bigint) BETWEEN $1 AND $2 LIMIT 1"; }
all_nodes() { # all_nodes SQL: runs on the coordinator and both shards
  cq -c "$1" >/dev/null; sq 1 -c "$1" >/dev/null; sq 2 -c "$1" >/dev/null
}
# The roles and traps every node gets: mallory may create in public (as the database owner
# may on PG15, and everyone on clusters upgraded from PG14), owns schema mal, and plants
# an operator = (oid, regclass) that makes her superuser when a superuser calls it.
NODE_SQL=$(cat <<'SQL'
CREATE ROLE mallory LOGIN; CREATE ROLE app LOGIN; CREATE ROLE monitor LOGIN IN ROLE pg_monitor;
GRANT CREATE ON SCHEMA public TO mallory;
CREATE SCHEMA mal AUTHORIZATION mallory;
CREATE TABLE public.pwned (who text, at timestamptz DEFAULT now());
GRANT INSERT ON public.pwned TO PUBLIC;
SET ROLE mallory;
CREATE FUNCTION public.trap(a oid, b oid) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.pwned (who) VALUES (current_user);
  IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
    EXECUTE 'ALTER ROLE mallory SUPERUSER';
  END IF;
  RETURN a = b;
END $$;
CREATE FUNCTION public.trap_oid_regclass(a oid, b regclass) RETURNS boolean LANGUAGE sql AS 'SELECT public.trap(a, b::oid)';
CREATE FUNCTION public.trap_regclass_oid(a regclass, b oid) RETURNS boolean LANGUAGE sql AS 'SELECT public.trap(a::oid, b)';
CREATE OPERATOR public.= (LEFTARG = oid, RIGHTARG = regclass, FUNCTION = public.trap_oid_regclass);
CREATE OPERATOR public.= (LEFTARG = regclass, RIGHTARG = oid, FUNCTION = public.trap_regclass_oid);
-- Functions that would be a better match than pg_catalog's for a name argument.
CREATE FUNCTION public.quote_ident(n name) RETURNS text LANGUAGE sql AS 'SELECT CASE WHEN public.trap(0, 0) THEN pg_catalog.quote_ident(n::text) END';
CREATE FUNCTION public.md5(n name) RETURNS text LANGUAGE sql AS 'SELECT CASE WHEN public.trap(0, 0) THEN pg_catalog.md5(n::text) END';
CREATE FUNCTION public.left(n name, k integer) RETURNS text LANGUAGE sql AS 'SELECT CASE WHEN public.trap(0, 0) THEN pg_catalog.left(n::text, k) END';
CREATE FUNCTION mal.ok(bigint) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
    EXECUTE 'ALTER ROLE mallory SUPERUSER';
  END IF;
  RETURN true;
END $$;
RESET ROLE;
SQL
)

cluster_start "$C" "$CP" "${SMALL[@]}"
cq >/dev/null <<SQL
CREATE EXTENSION id_gen; CREATE EXTENSION postgres_fdw; CREATE EXTENSION dblink;
$NODE_SQL
SELECT id_gen.create_sequence('orders', step => 1000);
SELECT id_gen.grant_usage('orders', 'app');
CREATE ROLE id_authority LOGIN;
GRANT UPDATE (max_id) ON id_gen.sequences TO id_authority;
ALTER ROLE id_authority SET synchronous_commit = on;
SELECT id_gen.set_route(4095, 'shard_2');
SELECT id_gen.set_route(65535, 'shard_1');
CREATE TABLE accounts (id bigint PRIMARY KEY, owner_id bigint NOT NULL, balance bigint NOT NULL DEFAULT 0);
CREATE TABLE ledger (id bigint PRIMARY KEY, owner_id bigint NOT NULL, amount bigint NOT NULL, note text);
SQL
for i in 1 2; do
  cluster_start "$(shard_dir $i)" "$(shard_port $i)" "${SMALL[@]}" "${LOGICAL[@]}"
  sq $i >/dev/null <<SQL
CREATE EXTENSION id_gen; CREATE EXTENSION postgres_fdw;
$NODE_SQL
CREATE SERVER central FOREIGN DATA WRAPPER postgres_fdw
  OPTIONS (host '$C', port '$CP', dbname 'postgres', connect_timeout '2', options '-c synchronous_commit=on');
CREATE USER MAPPING FOR PUBLIC SERVER central OPTIONS (user 'id_authority');
SELECT id_gen.create_sequence('orders', step => 1000, authority => 'central');
SQL
  cq >/dev/null <<SQL
CREATE SERVER shard_$i FOREIGN DATA WRAPPER postgres_fdw
  OPTIONS (host '$(shard_dir $i)', port '$(shard_port $i)', dbname 'postgres', connect_timeout '2');
CREATE USER MAPPING FOR postgres SERVER shard_$i OPTIONS (user 'postgres', password '$SECRET');
CREATE USER MAPPING FOR PUBLIC SERVER shard_$i OPTIONS (user 'app', password_required 'false');
SQL
done

# (b, g) refusals before anything is distributed -------------------------------------------
cq >/dev/null <<'SQL'
SET ROLE mallory;
CREATE TABLE mal.t (id bigint PRIMARY KEY, owner_id bigint, CHECK (mal.ok(id)));
RESET ROLE;
CREATE TABLE serial_ids (id bigserial PRIMARY KEY, owner_id bigint);
SQL
out=$(cq -v VERBOSITY=verbose -c "SELECT id_gen.distribute_table('mal.t', 'id')" 2>&1) && fail "a table running its owner's code was distributed"
grep -q "ERROR:  42501: id_gen: cannot distribute mal.t: it runs function mal.ok(bigint) (owned by mallory, who is not a superuser)" <<<"$out" \
  || fail "not the expected refusal: $out"
pass "a table whose CHECK calls its non-superuser owner's function: 42501, naming the function"
assert_eq "$(state_of cq -c "SELECT id_gen.distribute_table('serial_ids', 'id')")" "0A000" "a serial id: 0A000"
assert_eq "$(state_of cq -c "CREATE TEMP TABLE tmp_ids (id bigint PRIMARY KEY)" -c "SELECT id_gen.distribute_table('tmp_ids', 'id')")" "0A000" "a temporary table: 0A000"
assert_eq "$(state_of cq -c "CALL id_gen.move_genes(65536, 65536, 'shard_1')")" "22003" "genes past 65535: 22003"

cq -c "SET client_min_messages = warning" -c "SELECT id_gen.distribute_table('accounts', 'id')" \
   -c "SELECT id_gen.distribute_table('ledger', 'id', 'owner_id', 'orders')" >/dev/null
# The shard admin lets app at the tables (existing partitions included).
for i in 1 2; do sq $i -c "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO app" >/dev/null; done
pass "accounts and ledger distributed"

# (a) writers committing while set_route splits their range -------------------------------
o_low=$(owner_in 0 1000)
( cq -c "BEGIN" -c "INSERT INTO ledger (owner_id, amount, note) VALUES ($o_low, 777, 'W')" -c "SELECT pg_sleep(3)" -c "COMMIT" >/dev/null ) &
w=$!
sleep 1
cq -c "SELECT id_gen.set_route(2047, 'shard_2', copy_rows => true)" >/dev/null
wait $w || fail "the coordinator writer failed"
assert_eq "$(cq -c "SELECT count(*) FROM ledger WHERE note = 'W'")/$(sq 2 -c "SELECT count(*) FROM ledger WHERE note = 'W'")" "1/1" \
  "a row committed through the coordinator while set_route split its range is on its shard"
( sq 2 -c "BEGIN" -c "INSERT INTO ledger (id, owner_id, amount, note) VALUES (id_gen.gene_order_id('orders', $o_low::bigint), $o_low, 555, 'D')" \
       -c "SELECT pg_sleep(3)" -c "COMMIT" >/dev/null ) &
w=$!
sleep 1
cq -c "SELECT id_gen.set_route(1023, 'shard_2', copy_rows => true)" >/dev/null
wait $w || fail "the direct shard writer failed"
assert_eq "$(cq -c "SELECT count(*) FROM ledger WHERE note = 'D'")/$(sq 2 -c "SELECT count(*) FROM ledger WHERE note = 'D'")" "1/1" \
  "a row committed directly on the shard while set_route split its range survives"

# pgbench through the coordinator while two sessions change routes at once.
cat > "$C/ins.sql" <<'PGB'
\set o random(1, 200000)
INSERT INTO ledger (owner_id, amount, note) VALUES (:o, 1, 'pgb');
PGB
"$PG_BIN/pgbench" -n -h "$C" -p "$CP" -U postgres -c 4 -j 2 -T 8 -f "$C/ins.sql" postgres > "$C/pgb.log" 2>&1 &
pgb=$!
sleep 1.5
cq -c "SELECT id_gen.set_route(511, 'shard_2', copy_rows => true)" >/dev/null & r1=$!
cq -c "SELECT id_gen.set_route(3071, 'shard_2', copy_rows => true)" >/dev/null & r2=$!
wait $r1 || fail "a concurrent split failed"; wait $r2 || fail "a concurrent split failed"
sleep 1
cq -c "SELECT id_gen.drop_route(511, copy_rows => true)" >/dev/null & r1=$!
cq -c "SELECT id_gen.set_route(1535, 'shard_2', copy_rows => true)" >/dev/null & r2=$!
wait $r1 || fail "a concurrent merge failed"; wait $r2 || fail "a concurrent split failed"
wait $pgb || { cat "$C/pgb.log" >&2; fail "pgbench failed"; }
committed=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$C/pgb.log")
failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$C/pgb.log")
assert_gt "$committed" 100 "pgbench committed transactions during the route changes"
assert_eq "$(routes)" "0-1023@shard_2,1024-1535@shard_2,1536-2047@shard_2,2048-3071@shard_2,3072-4095@shard_2,4096-65535@shard_1" "the routes after two splits, then a merge and a split at once"
on_shards=$(( $(sq 1 -c "SELECT count(*) FROM ledger WHERE note = 'pgb'") + $(sq 2 -c "SELECT count(*) FROM ledger WHERE note = 'pgb'") ))
assert_eq "$(cq -c "SELECT count(*) FROM ledger WHERE note = 'pgb'")/$on_shards/$(cq -c "SELECT count(DISTINCT id) FROM ledger WHERE note = 'pgb'")" \
  "$committed/$committed/$committed" "every one of the $committed committed rows is there once (${failed:-0} failed transactions)"
assert_eq "$(cq -c "SELECT bool_and(in_step) FROM id_gen.distribution")" "t" "partitions and shards in step with the routes"

# (e) an UPDATE may not move a row to an owner of another gene ----------------------------
o_other=$(owner_in 30000 31000)
row_id=$(cq -c "SELECT id FROM ledger WHERE note = 'W'")
assert_eq "$(state_of cq -c "UPDATE ledger SET owner_id = $o_other WHERE id = $row_id")" "23514" \
  "an UPDATE that gives a row an owner of another gene while keeping its id: 23514"

# (d) names -------------------------------------------------------------------------------
long=a_very_long_table_name_for_the_collision_test
cq >/dev/null <<SQL
SET client_min_messages = warning;
CREATE TABLE $long (id bigint PRIMARY KEY, v int);
INSERT INTO $long SELECT id_gen.compose_id(g % 65536, g), g FROM generate_series(1, 301) g;
SELECT id_gen.distribute_table('$long', 'id');
SQL
stem=$(cq -c "SELECT shard_stem FROM id_gen.distributed_tables WHERE table_name = '$long'")
cq -c "SET client_min_messages = warning" -c "CREATE TABLE \"$stem\" (id bigint PRIMARY KEY, v int)" -c "SELECT id_gen.distribute_table('\"$stem\"', 'id')" >/dev/null
assert_eq "$(cq -c "SELECT count(*) FROM \"$stem\"")/$(cq -c "SELECT count(*) FROM $long")" "0/301" \
  "a table named like another's partition stem ($stem) gets partitions of its own"
cjk=$(printf '表%.0s' $(seq 21))
cq -c "SET client_min_messages = warning" -c "CREATE TABLE \"$cjk\" (id bigint PRIMARY KEY, owner_id bigint NOT NULL)" \
   -c "SELECT id_gen.distribute_table('\"$cjk\"', 'id', 'owner_id', 'orders')" \
   -c "INSERT INTO \"$cjk\" (owner_id) SELECT g FROM generate_series(1, 5) g" >/dev/null
assert_eq "$(cq -c "SELECT count(*) FROM \"$cjk\"")" "5" "a 63-byte CJK table name with a sequence: distributed, rows go in and come back"
cq -c "SET client_min_messages = warning" -c 'CREATE TABLE "we$d$ird" (id bigint PRIMARY KEY, v int)' \
   -c "SELECT id_gen.distribute_table('\"we\$d\$ird\"', 'id')" \
   -c "INSERT INTO \"we\$d\$ird\" VALUES (id_gen.compose_id(2500, 1), 1)" >/dev/null

# (c) secrets during a move and a failed move; (d) the $d$ table moves ---------------------
( while :; do
    for d in "$C:$CP" "$(shard_dir 1):$(shard_port 1)" "$(shard_dir 2):$(shard_port 2)"; do
      "$PG_BIN/psql" -X -At -h "${d%%:*}" -p "${d##*:}" -U monitor -d postgres \
        -c "SELECT pid, application_name, query FROM pg_stat_activity WHERE query <> ''" 2>/dev/null
    done
    sleep 0.05
  done ) > "$C/activity.txt" &
spy=$!
dry=$(cq -c "CALL id_gen.move_genes(2048, 3071, 'shard_1', dry_run => true)" 2>&1)
cq -c "CALL id_gen.move_genes(2048, 3071, 'shard_1')" >/dev/null 2>&1 || fail "the move failed"
assert_eq "$(cq -c "SELECT v FROM \"we\$d\$ird\" WHERE id = id_gen.compose_id(2500, 1)")/$(sq 1 -c "SELECT count(*) FROM \"we\$d\$ird\"")" "1/1" \
  "a table named with \$d\$ moved with the others"
next_move=$(( $(cq -c "SELECT max(move_id) FROM id_gen.shard_moves") + 1 ))
sq 2 -c "SELECT pg_create_logical_replication_slot('id_gen_move_$next_move', 'pgoutput')" >/dev/null
out=$(cq -v VERBOSITY=verbose -c "CALL id_gen.move_genes(1024, 1535, 'shard_1')" 2>&1) && fail "a move whose slot name was taken succeeded"
grep -q "42710" <<<"$out" || fail "not the expected error: $out"
assert_eq "$(sq 2 -c "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'id_gen_move_$next_move'")/$(cq -c "SELECT phase FROM id_gen.moves WHERE move_id = $next_move")" \
  "1/aborted" "a failed move (a slot of its name existed) rolled back and left that slot alone"
sq 2 -c "SELECT pg_drop_replication_slot('id_gen_move_$next_move')" >/dev/null
kill $spy 2>/dev/null; wait $spy 2>/dev/null || true
assert_gt "$(wc -l < "$C/activity.txt")" 50 "pg_monitor snapshots of pg_stat_activity taken during the moves"
grep -q "id_gen\.shard_" "$C/activity.txt" || fail "the snapshots never caught id_gen at work (no id_gen.shard_* call)"
leaks=$(cat "$C/activity.txt" "$C/server.log" "$(shard_dir 1)/server.log" "$(shard_dir 2)/server.log" <(echo "$dry") \
          <(cq -c "SELECT * FROM id_gen.moves") | grep -c "$SECRET" || true)
assert_eq "$leaks" "0" "the password is in no server log, pg_stat_activity snapshot, dry_run output or id_gen.moves row"

# (f) grants, renames, DROP EXTENSION ------------------------------------------------------
cq -c "GRANT SELECT, INSERT ON ledger TO app" >/dev/null
assert_eq "$(cq -c "SELECT has_table_privilege('app', 'ledger_shards', 'INSERT')")" "t" "a GRANT after distribute_table reaches the partitioned table"
o_moved=$(owner_in 2048 3071)
assert_eq "$(cq -c "SET ROLE app" -c "INSERT INTO ledger (owner_id, amount, note) VALUES ($o_moved, 1, 'app') RETURNING id_gen.shard_of(id) BETWEEN 2048 AND 3071")" "t" \
  "app inserts into moved genes (the new partition on the target carries the parent's grants)"
assert_eq "$(state_of cq -c "ALTER TABLE ledger RENAME TO ledger2")/$(state_of cq -c "ALTER TABLE ledger_shards RENAME TO x")" "0A000/0A000" \
  "renaming a distributed table (or what is behind it) is refused"
cq -c "INSERT INTO id_gen.shard_moves (lower_gene, upper_gene, source_shard, target_shard, phase) VALUES (4096, 65535, 'shard_1', 'shard_2', 'copying')" >/dev/null
assert_eq "$(state_of cq -c "DROP EXTENSION id_gen CASCADE")" "55006" "DROP EXTENSION while a move is unfinished: 55006"
cq -c "DELETE FROM id_gen.shard_moves WHERE phase = 'copying'" >/dev/null
cq -c "CREATE SERVER central_self FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '$C', port '$CP', dbname 'postgres')" \
   -c "INSERT INTO id_gen.sequences (name, max_id, step, min_step, max_step, buffer_seconds, authority) VALUES ('remote_seq', 0, 100, 100, 1000, 30, 'central_self')" >/dev/null
assert_eq "$(state_of cq -c "CALL id_gen.move_genes(1024, 1535, 'central_self')")" "22023" "a move to the segment authority: 22023"

# (h) the coordinator killed while the fence is up ----------------------------------------
sq 1 >/dev/null <<'SQL'
CREATE FUNCTION public.slow_first_marker() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.marker = 1 THEN PERFORM pg_sleep(6); END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER slow_first_marker BEFORE INSERT ON id_gen.move_markers FOR EACH ROW EXECUTE FUNCTION public.slow_first_marker();
ALTER TABLE id_gen.move_markers ENABLE ALWAYS TRIGGER slow_first_marker;
SQL
o_fenced=$(owner_in 1024 1535)
( cq -c "CALL id_gen.move_genes(1024, 1535, 'shard_1')" >/dev/null 2>&1 ) &
mv=$!
fenced=0
for _ in $(seq 300); do
  if [ "$(sq 2 -c "SELECT count(*) FROM pg_trigger WHERE tgname = 'id_gen_move_fence' AND tgenabled <> 'D'")" != 0 ]; then fenced=1; break; fi
  sleep 0.05
done
assert_eq "$fenced" "1" "the move's fence is up on the source"
E2E_DIR=$C kill9_cluster
wait $mv 2>/dev/null || true
assert_eq "$(state_of sq 2 -c "INSERT INTO ledger (id, owner_id, amount) VALUES (id_gen.gene_order_id('orders', $o_fenced::bigint), $o_fenced, 1)")" "IG002" \
  "with the coordinator gone, the fence refuses direct writes (IG002)"
cluster_up "$C" 2>/dev/null
lifted=0
for _ in $(seq 60); do
  if [ "$(sq 2 -c "SELECT count(*) FROM pg_trigger WHERE tgname = 'id_gen_move_fence' AND tgenabled <> 'D'")" = 0 ]; then lifted=1; break; fi
  sleep 0.5
done
assert_eq "$lifted" "1" "after the coordinator's restart the move supervisor lifted the fence by itself"
assert_eq "$(cq -c "SELECT phase || '/' || source_fenced || '/' || (recovered_by LIKE 'lifted the fence%') FROM id_gen.moves WHERE lower_gene = 1024 AND phase <> 'aborted'")" \
  "catching_up/false/true" "id_gen.moves says what the supervisor did"
sq 2 -c "INSERT INTO ledger (id, owner_id, amount, note) VALUES (id_gen.gene_order_id('orders', $o_fenced::bigint), $o_fenced, 1, 'after')" >/dev/null \
  || fail "a direct write after the fence was lifted failed"
pass "direct writes of those genes work again"
cq -c "CALL id_gen.move_genes(1024, 1535, 'shard_1')" >/dev/null 2>&1
assert_eq "$(cq -c "SELECT count(*) FROM ledger WHERE note = 'after'")/$(sq 1 -c "SELECT count(*) FROM ledger WHERE note = 'after'")" "1/1" \
  "the same CALL finished the move, with the row written after the fence was lifted"
sq 1 -c "DROP TRIGGER slow_first_marker ON id_gen.move_markers" -c "DROP FUNCTION public.slow_first_marker()" >/dev/null

# A shard whose coordinator is gone for good: shard_forget_moves clears what moves left.
sq 2 >/dev/null <<'SQL'
-- (A superuser's own ad hoc SQL is hijacked too with public first: the test pins its path.)
SET search_path = pg_catalog, pg_temp;
CREATE PUBLICATION id_gen_move_999 FOR TABLE id_gen.move_markers;
SELECT pg_create_logical_replication_slot('id_gen_move_999', 'pgoutput');
SELECT id_gen.shard_fence(999, 'shard_1', ARRAY[(SELECT format('%I.%I', n.nspname, c.relname)
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE i.inhparent = 'public.ledger'::regclass LIMIT 1)]);
SQL
assert_eq "$(sq 2 -c "SELECT string_agg(action, ', ' ORDER BY object COLLATE \"C\") FROM id_gen.shard_forget_moves()")" \
  "fence lifted, dropped, dropped" "shard_forget_moves lifts a stray fence and drops a stray publication and slot"
assert_eq "$(sq 2 -c "SELECT count(*) FROM pg_trigger WHERE tgname = 'id_gen_move_fence' AND tgenabled <> 'D'")/$(sq 2 -c "SELECT count(*) FROM pg_publication")" \
  "0/0" "nothing of the stray move is left"

# (b) after everything: nobody became superuser, no trap ran, nothing is left over --------
for n in c 1 2; do
  if [ $n = c ]; then r=$(cq -c "SELECT (SELECT rolsuper FROM pg_roles WHERE rolname = 'mallory') || '/' || (SELECT count(*) FROM public.pwned)")
  else r=$(sq $n -c "SELECT (SELECT rolsuper FROM pg_roles WHERE rolname = 'mallory') || '/' || (SELECT count(*) FROM public.pwned)"); fi
  assert_eq "$r" "false/0" "node $n: mallory is no superuser and no planted operator ran"
done
assert_eq "$(sq 1 -c "SELECT count(*) FROM pg_replication_slots")/$(sq 2 -c "SELECT count(*) FROM pg_replication_slots")/$(sq 1 -c "SELECT count(*) FROM pg_subscription")/$(sq 2 -c "SELECT count(*) FROM pg_publication")" \
  "0/0/0/0" "no slot, subscription or publication is left"
echo "14_cluster_safety: passed"
