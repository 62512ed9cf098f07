#!/usr/bin/env bash
# Partial failures and the routing guard (issue 25): a coordinator and two shards
# (wal_level = logical, pg_stat_statements with track = all on the shards).
# (a) the routing guard refuses reads and writes that select rows by id from genes the
#     shard does not own, plan by plan (forced with planner settings): nested-loop, hash
#     and merge joins with a list of ids, hash semi- and anti-joins, UPDATE ... FROM,
#     DELETE ... USING, MERGE, a join with a plain table of ids, TID and TID range scans,
#     parallel plans (a cold routing cache in the leader; a scan and a join in a worker; a
#     stale declared version), and joins that end before they read every id (a merge join
#     whose table side runs out first, a hash join with an empty hash table or an empty
#     probe side, a nested loop with an empty outer side, ids that come through a
#     parallel-aware hash join, a join by id of a join by id): IG001, never
#     XX000 and never an empty answer; the same joins rescanned answer every pass on the
#     owner; a statement timeout while such a join's ids are read ends it with 57014 and
#     the shard keeps running; and it leaves alone what can only match the shard's
#     own rows (an owner's keyset pagination on its own shard, min(id), an expression of the
#     id, a join of the shard's own tables, the same joins on the shard that owns the ids);
# (b) route_claim takes ROW EXCLUSIVE only for a role that may write, ACCESS SHARE for a
#     role that may only read (which no fence waits for);
# (c) a move's target does not own the genes before the cut-over: while the copy stands
#     (no table-sync worker on the target), direct writes, claims and id reads of them
#     there get IG002 (also when its session died before the fence: the supervisor puts it
#     up; and during the catch-up); abort_move then loses nothing; after a completed move the target
#     takes them and the source refuses them (IG001);
# (d) no subscription password in pg_stat_statements (track = all) on either shard;
# (e) a frozen shard (SIGSTOP of its processes): a remote call to it ends within its bound
#     (57014 on an open connection, 08006 for a new one), and the move supervisor still
#     tells the other shard a new route version; a split whose shard is frozen in its swap
#     and a move whose target is frozen in its fence end with 57014 within their bounds,
#     coordinator writes of other genes all succeed (their longest wait is reported), the
#     CALLs hold no lock on the coordinator's table (the split none, the move its range's), and
#     the same CALL finishes each after the shard is back, with every row there once;
# (g) plan_rebalance refuses unknown and NULL shard names; push_route_state(force => true)
#     sets back a shard whose version is ahead of the coordinator's;
# (f) a reversible move whose source is down: the supervisor drops the way back's slot on
#     the target (its WAL is freed) and completes the move once the source is back.
source "$(dirname "$0")/lib.sh"
C=/tmp/idg_e2e17c CP=54470
shard_dir() { echo "/tmp/idg_e2e17s$1"; }
shard_port() { echo $((CP + $1)); }
SMALL=("shared_buffers = 32MB" "max_connections = 40")
LOGICAL=("wal_level = logical" "max_wal_senders = 10" "max_replication_slots = 10"
         "shared_preload_libraries = 'id_gen, pg_stat_statements'" "pg_stat_statements.track = all")
FROZEN=()
cleanup() {
  [ ${#FROZEN[@]} -gt 0 ] && kill -CONT "${FROZEN[@]}" 2>/dev/null
  kill $(jobs -p) 2>/dev/null || true
  cluster_stop "$C"; for i in 1 2; do cluster_stop "$(shard_dir $i)"; done
}
trap cleanup EXIT
cq() { cpsql "$C" "$CP" -At "$@"; }
sq() { local i=$1; shift; cpsql "$(shard_dir "$i")" "$(shard_port "$i")" -At "$@"; }
state_of() { "$@" -v VERBOSITY=verbose 2>&1 >/dev/null | sed -n 's/^ERROR:  \([0-9A-Z]\{5\}\): .*/\1/p' | head -1; }
# freeze I / thaw: SIGSTOP / SIGCONT of shard I's postmaster and every child of it.
freeze() {
  local pm; pm=$(head -1 "$(shard_dir "$1")/data/postmaster.pid")
  FROZEN=("$pm" $(pgrep -P "$pm"))
  kill -STOP "${FROZEN[@]}"
}
thaw() { kill -CONT "${FROZEN[@]}"; FROZEN=(); }

cluster_start "$C" "$CP" "${SMALL[@]}"
cq >/dev/null <<SQL
CREATE EXTENSION id_gen; CREATE EXTENSION postgres_fdw; CREATE EXTENSION dblink;
SELECT id_gen.set_route(16383, 'shard_1');
SELECT id_gen.set_route(32767, 'shard_1');
SELECT id_gen.set_route(65535, 'shard_2');
CREATE TABLE orders (id bigint PRIMARY KEY, owner_id bigint NOT NULL, amount bigint NOT NULL);
SQL
for i in 1 2; do
  cluster_start "$(shard_dir $i)" "$(shard_port $i)" "${SMALL[@]}" "${LOGICAL[@]}"
  sq $i -c "CREATE EXTENSION id_gen" -c "CREATE EXTENSION pg_stat_statements" >/dev/null
  cq >/dev/null <<SQL
CREATE SERVER shard_$i FOREIGN DATA WRAPPER postgres_fdw
  OPTIONS (host '$(shard_dir $i)', port '$(shard_port $i)', dbname 'postgres', connect_timeout '2');
CREATE USER MAPPING FOR postgres SERVER shard_$i OPTIONS (user 'postgres', password 'TopSecret-$i-frobozz');
SQL
done
cq -c "SET client_min_messages = warning" -c "SELECT id_gen.distribute_table('orders', 'id', 'owner_id')" >/dev/null
# 20 000 rows through the coordinator, owners 1 .. 20000 (genes everywhere).
cq -c "INSERT INTO orders SELECT id_gen.compose_id(id_gen.shard_gene(o::bigint), o), o, o FROM generate_series(1, 20000) o" >/dev/null
cq -c "SELECT id_gen.push_route_state(true)" >/dev/null
before=$(cq -c "SELECT count(*) || '/' || sum(amount) FROM orders")

log "(a) the routing guard, plan by plan (on shard_2, ids of shard_1's genes)"
IDS=$(cq -c "SELECT 'ARRAY[' || string_agg(id::text, ',') || ']::bigint[]' FROM (SELECT id FROM orders WHERE id_gen.shard_of(id) <= 32767 ORDER BY id LIMIT 300) x")
ID1=$(cq -c "SELECT min(id) FROM orders WHERE id_gen.shard_of(id) <= 32767")
HASH="SET enable_nestloop = off; SET enable_mergejoin = off;"
MERGE="SET enable_nestloop = off; SET enable_hashjoin = off;"
NEST="SET enable_hashjoin = off; SET enable_mergejoin = off;"
PAR="SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0; SET max_parallel_workers_per_gather = 2; SET enable_indexscan = off; SET enable_bitmapscan = off;"
guard_case() { # guard_case WHAT SETTINGS SQL
  assert_eq "$(state_of sq 2 -c "$2 $3")" "IG001" "$1"
}
guard_case "a nested-loop join with unnest(ids) (an index condition on the id)" "$NEST" "SELECT count(*) FROM orders o JOIN unnest($IDS) u(id) USING (id)"
guard_case "a hash join with unnest(ids)" "$HASH" "SELECT count(*) FROM orders o JOIN unnest($IDS) u(id) USING (id)"
guard_case "a merge join with unnest(ids)" "$MERGE" "SELECT count(*) FROM orders o JOIN unnest($IDS) u(id) USING (id)"
guard_case "IN (SELECT unnest(ids)) as a hash semi-join" "$HASH" "SELECT count(*) FROM orders WHERE id IN (SELECT unnest($IDS))"
guard_case "NOT EXISTS as a hash anti-join" "$HASH" "SELECT count(*) FROM unnest($IDS) u(id) WHERE NOT EXISTS (SELECT FROM orders o WHERE o.id = u.id)"
guard_case "UPDATE ... FROM unnest(ids)" "$HASH" "UPDATE orders o SET amount = o.amount + 1 FROM unnest($IDS) u(id) WHERE o.id = u.id"
guard_case "DELETE ... USING unnest(ids)" "$HASH" "DELETE FROM orders o USING unnest($IDS) u(id) WHERE o.id = u.id"
guard_case "MERGE ... USING unnest(ids)" "$HASH" "MERGE INTO orders o USING (SELECT unnest($IDS) AS id) u ON o.id = u.id WHEN MATCHED THEN UPDATE SET amount = o.amount"
guard_case "a hash join with a plain table of ids" "$HASH" "CREATE TEMP TABLE wanted AS SELECT unnest($IDS) AS id; ANALYZE wanted; SELECT count(*) FROM orders o JOIN wanted w USING (id)"
guard_case "TID scan with an id" "" "SELECT * FROM orders WHERE ctid = '(0,1)' AND id = $ID1"
guard_case "TID range scan with an id" "SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_seqscan = off;" \
  "SELECT * FROM orders WHERE ctid < '(100,1)' AND id = $ID1"
assert_eq "$(sq 2 -c "$PAR EXPLAIN (COSTS OFF) SELECT * FROM orders WHERE id = $ID1" | grep -c Gather)" "1" "the plan of the next case is parallel"
sq 2 -c "SELECT id_gen.shard_routing_changed()" >/dev/null   # every backend's routing view is cold
guard_case "a parallel scan, cold routing cache (the leader raises): IG001, not XX000" "$PAR" "SELECT * FROM orders WHERE id = $ID1"
FORCE=$(sq 2 -c "SELECT CASE WHEN current_setting('server_version_num')::int >= 160000 THEN 'debug_parallel_query' ELSE 'force_parallel_mode' END")
guard_case "a scan in a parallel worker ($FORCE)" "SET $FORCE = on; SET enable_indexscan = off; SET enable_bitmapscan = off;" "SELECT * FROM orders WHERE id = $ID1"
guard_case "a hash join in a parallel worker ($FORCE)" "SET $FORCE = on; $HASH" "SELECT count(*) FROM orders o JOIN unnest($IDS) u(id) USING (id)"
guard_case "a parallel hash join (leader and workers)" "$PAR $HASH" "SELECT count(*) FROM orders o JOIN unnest($IDS) u(id) USING (id)"
sq 2 -c "SELECT id_gen.shard_routing_changed()" >/dev/null
guard_case "a stale declared route version in a parallel plan (cold cache)" "$PAR SET id_gen.route_version = 1;" "SELECT count(*) FROM orders"
# Joins that end before they read every id (0.7.1 answered them with the rows they found):
# the guard reads the rest of the ids when the join ends. plan_has SHARD SQL REGEX fails
# unless the plan (EXPLAIN, one line per node) matches REGEX, so that each case runs the
# shape it names.
plan_has() {
  local plan; plan=$(sq "$1" -c "$2" | tr '\n' '|')
  grep -qE "$3" <<<"$plan" || fail "the plan has no $3: $plan"
}
MAX2=$(cq -c "SELECT max(id) FROM orders")   # of gene 65535 (shard_2's), above every id of shard_1
OWN2=$(cq -c "SELECT max(id) FROM orders WHERE id_gen.shard_of(id) BETWEEN 32768 AND 65534")
BIG1=$(( (32767 << 47) + (1 << 47) - 1 ))      # gene 32767 (shard_1's), above every row of it
for i in 1 2; do
  sq $i -c "ANALYZE orders" -c "CREATE TABLE wanted_a AS SELECT unnest($IDS) AS id" \
    -c "CREATE TABLE wanted_b AS TABLE wanted_a" -c "ANALYZE wanted_a" -c "ANALYZE wanted_b" >/dev/null
done
X="EXPLAIN (COSTS OFF)"
Q="SELECT count(*) FROM orders o JOIN unnest(ARRAY[$BIG1, $MAX2]) u(id) USING (id)"
plan_has 1 "$MERGE $X $Q" "Merge Join"
assert_eq "$(state_of sq 1 -c "$MERGE $Q")" "IG001" \
  "a merge join that ends when the table's side runs out (on shard_1: an id of its own above its rows, then one of shard_2)"
Q="SELECT count(*) FROM orders o JOIN unnest(ARRAY[$OWN2] || $IDS) u(id) USING (id) WHERE o.amount < 0"
plan_has 2 "$HASH $X $Q" "Hash Join.*Function Scan on unnest.*Hash\|.*Append"
guard_case "a hash join whose hash table (the table's side) is empty: the probe side (shard_2's own id, then shard_1's) is read" "$HASH" "$Q"
Q="SELECT count(*) FROM orders o JOIN wanted_a w USING (id) WHERE o.amount <> o.owner_id"
plan_has 2 "$HASH $X $Q" "Hash Join.*Append.*Hash\|.*Seq Scan on wanted_a"
guard_case "a hash join whose probe side (the table's) is empty: the ids of the unbuilt hash table are read" "$HASH" "$Q"
NEST_SCAN="$NEST SET enable_indexscan = off; SET enable_bitmapscan = off; SET max_parallel_workers_per_gather = 0;"
plan_has 2 "$NEST_SCAN $X $Q" "Nested Loop.*Append.*Materialize.*Seq Scan on wanted_a"
guard_case "a nested loop whose outer side (the table's) is empty: its inner ids are read" "$NEST_SCAN" "$Q"
PAR_HASH="$PAR $HASH SET join_collapse_limit = 1;"
Q="SELECT count(*) FROM orders o JOIN (wanted_a a JOIN wanted_b b USING (id)) USING (id)"
plan_has 2 "$PAR_HASH $X $Q" "Parallel Hash Join.*Parallel Hash\|.*Parallel Hash Join"
guard_case "ids that come through a parallel-aware hash join (its ExecProcNode is set again in parallel mode)" "$PAR_HASH" "$Q"
assert_eq "$(sq 1 -c "$PAR_HASH $Q" | tail -1)" "300" "the owner answers the same join through a parallel-aware hash join"
Q="SELECT count(*) FROM orders a JOIN (SELECT u.id FROM orders b JOIN unnest($IDS) u(id) ON b.id = u.id) w ON a.id = w.id"
for how in HASH MERGE; do   # the inner join is both a join whose rest is read and a value side
  assert_eq "$(state_of sq 2 -c "${!how} $Q")" "IG001" "a join by id of a join by id ($how joins)"
  assert_eq "$(sq 1 -c "${!how} $Q" | tail -1)" "300" "the owner answers it ($how joins)"
done
# Rescans (a subplan run once per g) after the rest was read: the next pass reads its inputs
# from their start (g = 1 finds no row of the table; g = 2 and 3 every one).
Q="SELECT string_agg((SELECT count(*) FROM orders o JOIN wanted_a w USING (id) WHERE o.amount <> o.owner_id + g - 1)::text, ',') FROM generate_series(1, 3) g"
for how in HASH NEST_SCAN; do
  assert_eq "$(sq 1 -c "${!how} $Q" | tail -1)" "0,300,300" "a rescanned join whose inputs were read to their end answers each pass ($how)"
done
Q="SELECT string_agg((SELECT count(*) FROM orders o JOIN unnest(ARRAY[$ID1, $BIG1]) u(id) USING (id) WHERE o.amount > -g)::text, ',') FROM generate_series(1, 3) g"
plan_has 1 "$MERGE $X $Q" "Merge Join"
assert_eq "$(sq 1 -c "$MERGE $Q" | tail -1)" "1,1,1" "a rescanned merge join whose ids were read past the table's end answers each pass"
# A cancel while the rest of the ids is read (statement_timeout while the ids of an unbuilt
# hash table are read, 2 ms a row): 57014, and the shard keeps running (no crash, no restart).
started=$(sq 1 -c "SELECT pg_postmaster_start_time()")
Q="SELECT count(*) FROM orders o JOIN wanted_a w ON o.id = w.id WHERE o.amount < 0 AND w.id + (pg_sleep(0.002) IS NOT NULL)::int > 0"
plan_has 1 "$HASH $X $Q" "Hash Join.*Append.*Hash\\|.*Seq Scan on wanted_a"
assert_eq "$(state_of sq 1 -c "$HASH SET statement_timeout = '150ms';" -c "$Q")" "57014" \
  "a statement timeout while a join's remaining ids are read: 57014"
assert_eq "$(sq 1 -c "SELECT pg_postmaster_start_time() = '$started'")" "t" "the shard did not restart"
O1=$(cq -c "SELECT owner_id FROM orders WHERE id_gen.shard_of(id) <= 32767 ORDER BY id LIMIT 1")
assert_eq "$(sq 1 -c "SELECT count(*) FROM (SELECT id FROM orders WHERE owner_id = $O1 AND id > 0 ORDER BY id LIMIT 2) x")" "1" \
  "an owner's keyset pagination (owner_id = o AND id > last) on its own shard answers"
assert_eq "$(sq 1 -c "SELECT min(id) > 0 FROM orders")" "t" "min(id) on a shard answers"
assert_eq "$(sq 1 -c "SELECT count(*) > 0 FROM orders WHERE id % 2 = 0")" "t" "an expression of the id (id % 2 = 0) answers"
assert_eq "$(sq 2 -c "$HASH SELECT count(*) = (SELECT count(*) FROM orders) FROM orders a JOIN orders b USING (id)" | tail -1)" "t" \
  "a join of the shard's own tables by id is shard-local and answers"
assert_eq "$(sq 1 -c "$HASH SELECT count(*) FROM orders o JOIN unnest($IDS) u(id) USING (id)" | tail -1)" "300" \
  "the owner answers the same hash join by its ids"
assert_eq "$(sq 1 -c "$MERGE SELECT count(*) FROM orders o JOIN unnest($IDS) u(id) USING (id)" | tail -1)" "300" \
  "the owner answers the same merge join by its ids"
assert_eq "$(sq 1 -c "$HASH WITH u AS (UPDATE orders o SET amount = o.amount FROM unnest($IDS) u(id) WHERE o.id = u.id RETURNING 1) SELECT count(*) FROM u" | tail -1)" "300" \
  "the owner answers UPDATE ... FROM by its ids"

log "(b) route_claim's locks follow the role's rights"
sq 1 >/dev/null <<'SQL'
CREATE ROLE reader; CREATE ROLE writer;
GRANT SELECT ON orders TO reader; GRANT SELECT, INSERT, UPDATE, DELETE ON orders TO writer;
SQL
V=$(sq 1 -c "SELECT version FROM id_gen.shard_route_state")
claim_locks() { sq 1 -c "BEGIN" -c "SET ROLE $1" -c "SELECT id_gen.route_claim(5, $V)" -c "RESET ROLE" \
  -c "SELECT string_agg(DISTINCT mode, ',') FROM pg_locks WHERE pid = pg_backend_pid() AND relation = 'orders'::regclass" -c "ROLLBACK" | sed -n 2p; }
assert_eq "$(claim_locks reader)" "AccessShareLock" "a SELECT-only role's claim takes ACCESS SHARE (no fence waits for it)"
assert_eq "$(claim_locks writer)" "RowExclusiveLock" "a writer's claim takes ROW EXCLUSIVE"

log "(c) a move's target does not own the genes before the cut-over"
sq 2 -c "ALTER SYSTEM SET max_sync_workers_per_subscription = 0" -c "SELECT pg_reload_conf()" >/dev/null
cq -c "CALL id_gen.move_genes(0, 16383, 'shard_2')" >/dev/null 2>&1 &
MOVER=$!
poll_until "the move copies (its copy held: no table-sync worker on the target)" "copying" 60 \
  cq -c "SELECT phase FROM id_gen.moves ORDER BY move_id DESC LIMIT 1"
MID=$(cq -c "SELECT max(move_id) FROM id_gen.moves")
G=$(cq -c "SELECT id_gen.shard_of(min(id)) FROM orders WHERE id_gen.shard_of(id) <= 16383")
ID0=$(cq -c "SELECT min(id) FROM orders WHERE id_gen.shard_of(id) = $G")
O0=$(cq -c "SELECT owner_id FROM orders WHERE id = $ID0")
V2=$(sq 2 -c "SELECT version FROM id_gen.shard_route_state")
assert_eq "$(state_of sq 2 -c "INSERT INTO orders VALUES (id_gen.compose_id($G, 99000001), $O0, 1)")" "IG002" "a direct write of an incoming gene on the target: IG002"
assert_eq "$(state_of sq 2 -c "BEGIN" -c "SELECT id_gen.route_claim($G, $V2)")" "IG002" "a claim of an incoming gene at the current version on the target: IG002"
assert_eq "$(state_of sq 2 -c "SELECT * FROM orders WHERE id = $ID0")" "IG002" "a read by id of an incoming gene on the target: IG002"
cq -c "SELECT pg_terminate_backend(runner_pid) FROM id_gen.shard_moves WHERE move_id = $MID" >/dev/null
wait $MOVER 2>/dev/null || true
cq -c "CALL id_gen.abort_move($MID)" >/dev/null
assert_eq "$(cq -c "SELECT phase FROM id_gen.moves WHERE move_id = $MID")/$(cq -c "SELECT count(*) || '/' || sum(amount) FROM orders")" "aborted/$before" \
  "abort_move: every row as before, nothing acknowledged was dropped"
# The moment between creating the target's partitions and fencing them: a move recorded,
# the partitions created, and its session gone (as if killed between the two steps).
MID=$(cq -c "INSERT INTO id_gen.shard_moves (lower_gene, upper_gene, source_shard, target_shard, updated_at)
             VALUES (0, 16383, 'shard_1', 'shard_2', clock_timestamp() - interval '1 min') RETURNING move_id" | head -1)
cq -c "SELECT id_gen.place_ranges('shard_2', 0, 16383, true)" >/dev/null
poll_until "the move supervisor fences the target's partitions of a move left planned" "1" 60 \
  sq 2 -c "SELECT count(*) FROM pg_trigger WHERE tgname = 'id_gen_move_fence' AND tgenabled <> 'D'"
assert_eq "$(state_of sq 2 -c "INSERT INTO orders VALUES (id_gen.compose_id($G, 99000003), $O0, 1)")" "IG002" \
  "a direct write of an incoming gene on the target of a move left planned: IG002"
cq -c "CALL id_gen.abort_move($MID)" >/dev/null
assert_eq "$(cq -c "SELECT phase FROM id_gen.moves WHERE move_id = $MID")/$(cq -c "SELECT count(*) || '/' || sum(amount) FROM orders")" "aborted/$before" \
  "abort_move of it: every row as before"
sq 2 -c "ALTER SYSTEM RESET max_sync_workers_per_subscription" -c "SELECT pg_reload_conf()" >/dev/null
# The completed move, held in its catch-up by a reader of the range's partition on the
# coordinator (its fence waits): the target still refuses the genes.
PART0=$(cq -c "SELECT partition FROM id_gen.distribution WHERE lower_gene = 0")
cq -c "BEGIN" -c "LOCK TABLE $PART0 IN ACCESS SHARE MODE" -c "SELECT pg_sleep(119)" >/dev/null 2>&1 &
poll_until "a reader holds $PART0" "1" 10 cq -c "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(119)'"
cq -c "SET client_min_messages = warning" -c "CALL id_gen.move_genes(0, 16383, 'shard_2')" > "$C/move_c.log" 2>&1 &
MOVER=$!
poll_until "the move catches up, its fence waiting for the reader" "catching_up" 60 \
  cq -c "SELECT phase FROM id_gen.moves ORDER BY move_id DESC LIMIT 1"
V2=$(sq 2 -c "SELECT version FROM id_gen.shard_route_state")
assert_eq "$(state_of sq 2 -c "INSERT INTO orders VALUES (id_gen.compose_id($G, 99000004), $O0, 1)")" "IG002" "during the catch-up a direct write on the target: IG002"
assert_eq "$(state_of sq 2 -c "BEGIN" -c "SELECT id_gen.route_claim($G, $V2)")" "IG002" "during the catch-up a claim on the target: IG002"
cq -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(119)'" >/dev/null
wait $MOVER || { cat "$C/move_c.log" >&2; fail "the move completes once the reader is gone"; }
cq -c "SELECT id_gen.push_route_state(true)" >/dev/null
assert_eq "$(sq 2 -c "INSERT INTO orders VALUES (id_gen.compose_id($G, 99000002), $O0, 1) RETURNING 1")" "1" "after the cut-over the target takes the genes"
assert_eq "$(state_of sq 1 -c "SELECT * FROM orders WHERE id = $ID0")" "IG001" "and the source refuses them (IG001)"
assert_eq "$(cq -c "SELECT count(*) - 1 || '/' || sum(amount) - 1 FROM orders")" "$before" "every row there once after the move"

log "(d) no password in pg_stat_statements (track = all)"
assert_eq "$(sq 2 -c "SELECT count(*) > 0 FROM pg_stat_statements WHERE query LIKE '%shard_subscribe%'")" "t" \
  "shard_2's pg_stat_statements tracked the move's calls"
for i in 1 2; do
  assert_eq "$(sq $i -c "SELECT count(*) FROM pg_stat_statements WHERE query LIKE '%frobozz%'")" "0" "shard_$i: no statement with the password"
done

log "(e) a frozen shard"
# A session with a connection to shard_1 open: its next call after the freeze.
cq -v VERBOSITY=verbose -c "SELECT id_gen.remote_exec('shard_1', 'SELECT 1', 2000)" -c "SELECT pg_sleep(2)" \
   -c "SELECT id_gen.remote_exec('shard_1', 'SELECT 1', 2000)" > "$C/frozen_call.log" 2>&1 &
CALLER=$!
poll_until "a session with an open connection to shard_1 waits" "1" 30 \
  cq -c "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(2)'"
freeze 1
t0=$(date +%s%N)
wait $CALLER || true
echo "  the session ended $(( ($(date +%s%N) - t0) / 1000000 )) ms after the freeze (the rest of its 2 s sleep, then the call's 2 s bound)" >&2
assert_eq "$(sed -n 's/^ERROR:  \([0-9A-Z]\{5\}\): .*/\1/p' "$C/frozen_call.log" | head -1)" "57014" \
  "a statement on an open connection to a frozen shard ends at its bound with 57014 (no cancel request that waits for it)"
t0=$(date +%s%N)
err=$(state_of cq -c "SELECT id_gen.remote_exec('shard_1', 'SELECT 1', 2000)" || true)
echo "  a new connection to the frozen shard gave up after $(( ($(date +%s%N) - t0) / 1000000 )) ms (bound 2 s: connect_timeout on 15, a timer on 16+)" >&2
assert_eq "$err" "08006" "a new connection to a frozen shard ends at connect_timeout with 08006"
# A route change of shard_2's genes only: the supervisor tells shard_2 though shard_1 hangs.
cq -c "SELECT id_gen.set_route(65535, 'shard_2')" >/dev/null   # (same shard: only the version rises)
VNEW=$(cq -c "SELECT id_gen.route_version()")
t0=$(date +%s%N)
poll_until "the supervisor tells shard_2 route version $VNEW while shard_1 is frozen" "$VNEW" 60 \
  sq 2 -c "SELECT version FROM id_gen.shard_route_state"
echo "  shard_2 learned it after $(( ($(date +%s%N) - t0) / 1000000 )) ms" >&2
thaw
poll_until "shard_1 learns it once it answers again" "$VNEW" 60 sq 1 -c "SELECT version FROM id_gen.shard_route_state"

# write_loop FILE SQL: runs SQL through the coordinator until FILE.stop exists, one line
# per statement: its duration in ms and ok/failed.
write_loop() {
  local f=$1 sql=$2 t0 t1
  rm -f "$f" "$f.stop"
  while [ ! -e "$f.stop" ]; do
    t0=$(date +%s%N)
    if cq -c "SET statement_timeout = '30s'" -c "$sql" >/dev/null 2>&1; then r=ok; else r=failed; fi
    t1=$(date +%s%N)
    echo "$(( (t1 - t0) / 1000000 )) $r" >> "$f"
  done
}
# loop_report FILE WHAT: stops the loop, prints its longest statement, fails on a failed one.
loop_report() {
  touch "$1.stop"; wait "$2" 2>/dev/null || true
  local n max failed
  n=$(wc -l < "$1"); max=$(sort -n "$1" | tail -1 | cut -d' ' -f1); failed=$(grep -c failed "$1" || true)
  echo "  $3: $n statements, longest $max ms, $failed failed" >&2
  assert_eq "$failed" "0" "$3: no statement failed"
}
O2=$(cq -c "SELECT owner_id FROM orders WHERE id_gen.shard_of(id) >= 32768 ORDER BY id LIMIT 1")
G2=$(cq -c "SELECT id_gen.shard_gene($O2::bigint)")
OWN1=$(cq -c "SELECT owner_id FROM orders WHERE id_gen.shard_of(id) BETWEEN 16384 AND 32767 ORDER BY id LIMIT 1")
GOWN1=$(cq -c "SELECT id_gen.shard_gene($OWN1::bigint)")

# hold_lock RELATION TAG: a session that holds ACCESS SHARE on RELATION, so that a fence
# (ACCESS EXCLUSIVE, short lock timeouts, retried) waits for it; sets HOLDER (its pid).
hold_lock() {
  cq -c "BEGIN" -c "LOCK TABLE $1 IN ACCESS SHARE MODE" -c "SELECT pg_sleep($2)" >/dev/null 2>&1 &
  poll_until "a reader holds $1" "1" 10 cq -c "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep($2)'"
  HOLDER=$(cq -c "SELECT pid FROM pg_stat_activity WHERE query = 'SELECT pg_sleep($2)'")
}
# fence_frozen CALL LOG WRITES BOUND WAITING RELEASE [STATES]: runs CALL until WAITING (a
# command) prints t (its fence waits for a holder), then starts a writer of shard_2's
# genes (WRITES: its log), freezes shard_1, runs RELEASE (a command, may be :) and waits
# for the CALL (its output in LOG), which must fail with one of STATES (a regex, default
# 57014); reports how long that took and which relations the CALL held in ACCESS
# EXCLUSIVE meanwhile (LOCKED), sampled until it ended.
fence_frozen() {
  cq -v VERBOSITY=verbose -c "$1" > "$2" 2>&1 &
  local caller=$! writer t0 pid seen
  poll_until "the CALL waits to fence" "t" 120 $5
  pid=$(cq -c "SELECT pid FROM pg_stat_activity WHERE query = \$q\$$1\$q\$")
  write_loop "$3" "INSERT INTO orders VALUES (id_gen.compose_id($G2, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint % 1000000000000), $O2, 1)" &
  writer=$!
  freeze 1
  $6
  t0=$(date +%s%N)
  LOCKED=""
  while kill -0 $caller 2>/dev/null; do
    seen=$(cq -c "SELECT string_agg(DISTINCT l.relation::regclass::text, ',') FROM pg_locks l
                  WHERE l.pid = $pid AND l.mode = 'AccessExclusiveLock' AND l.relation IS NOT NULL AND l.granted")
    [ -n "$seen" ] && LOCKED=$(printf '%s\n%s' "${LOCKED//,/$'\n'}" "${seen//,/$'\n'}" | sed '/^$/d' | sort -u | paste -sd, -)
    sleep 0.1
  done
  wait $caller || true
  echo "  $1 failed $(( ($(date +%s%N) - t0) / 1000000 )) ms after the freeze ($4); it held in ACCESS EXCLUSIVE: ${LOCKED:-nothing}" >&2
  local got; got=$(sed -n 's/^ERROR:  \([0-9A-Z]\{5\}\): .*/\1/p' "$2" | head -1)
  [[ "$got" =~ ^(${7:-57014})$ ]] || fail "$1 ends at its bound on the frozen shard: expected ${7:-57014}, got '$got'"
  pass "$1 ends at its bound on the frozen shard ($got)"
  loop_report "$3" $writer "coordinator writes of shard_2's genes meanwhile"
}
PARTS=$(cq -c "SELECT format('%I.%I', schema_name, partitioned_name)::regclass FROM id_gen.distributed_tables")

log "(e2) a shard frozen in a split's swap"
before2=$(cq -c "SELECT count(*) || '/' || sum(amount) FROM orders")
# A reader of shard_1's table: the swap there waits (50 ms attempts, retried) until the
# freeze; the coordinator holds nothing meanwhile.
sq 1 -c "BEGIN" -c "LOCK TABLE orders IN ACCESS SHARE MODE" -c "SELECT pg_sleep(122)" >/dev/null 2>&1 &
poll_until "a reader holds shard_1's table" "1" 10 sq 1 -c "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(122)'"
swap_tried() { sq 1 -c "SELECT count(*) > 0 FROM pg_stat_activity WHERE query LIKE '%shard_split_swap%' AND pid <> pg_backend_pid()"; }
# (Each attempt the lock refused closes the connection: the freeze meets a statement in
# flight, 57014, or the next connect, 08006.)
fence_frozen "CALL id_gen.split_route(20000)" "$C/split.log" "$C/w_other" "swap bound 5 s" swap_tried : "57014|08006"
assert_eq "$(tr , '\n' <<< "$LOCKED" | grep -cxF "$PARTS")" "0" \
  "the split's CALL held no lock on the coordinator's table while the shard hung (locks only what it fences)"
thaw
sq 1 -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(122)'" >/dev/null
for _ in $(seq 1 90); do
  cq -c "SET client_min_messages = warning" -c "CALL id_gen.split_route(20000)" > "$C/split2.log" 2>&1 && break
  grep -q "is running in session" "$C/split2.log" || { cat "$C/split2.log" >&2; fail "the same CALL after the shard is back"; }
  sleep 1   # the move supervisor looks at it (bounded): the CALL takes it over after
done
poll_until "the same CALL finishes the split once the shard answers" "done" 60 \
  cq -c "SELECT phase FROM id_gen.splits ORDER BY split_id DESC LIMIT 1"
n_other=$(wc -l < "$C/w_other")
assert_eq "$(cq -c "SELECT count(*) - $n_other || '/' || sum(amount) - $n_other FROM orders")" "$before2" "every row there once after the split"

log "(e3) a target frozen in a move's fence"
hold_lock "$(cq -c "SELECT partition FROM id_gen.distribution WHERE lower_gene = 0")" 121
fence_waits() {
  cq -c "SELECT EXISTS (SELECT FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE NOT l.granted AND a.query = \$q\$CALL id_gen.move_genes(0, 16383, 'shard_1')\$q\$)"
}
release_holder() { cq -c "SELECT pg_terminate_backend($HOLDER)" >/dev/null; }
fence_frozen "CALL id_gen.move_genes(0, 16383, 'shard_1')" "$C/move.log" "$C/w_other2" "marker bound 3 s" fence_waits release_holder
assert_eq "$(tr , '\n' <<< "$LOCKED" | grep -cxF "$PARTS")" "0" "the move's CALL held no lock on the coordinator's table, only its range's partitions"
assert_eq "$(cq -c "SELECT phase || ':' || source_fenced FROM id_gen.moves ORDER BY move_id DESC LIMIT 1")" "catching_up:false" \
  "the move stays catching up, the source's fence lifted"
thaw
cq -c "SET client_min_messages = warning" -c "CALL id_gen.move_genes(0, 16383, 'shard_1')" >/dev/null
assert_eq "$(cq -c "SELECT phase FROM id_gen.moves ORDER BY move_id DESC LIMIT 1")" "done" "the same CALL finishes the move once the target answers"
n_other=$(( n_other + $(wc -l < "$C/w_other2") ))
assert_eq "$(cq -c "SELECT count(*) - $n_other || '/' || sum(amount) - $n_other FROM orders")" "$before2" "every row there once after the move"

log "(g) smaller ones"
assert_eq "$(state_of cq -c "SELECT * FROM id_gen.plan_rebalance(shards => ARRAY['nope'])")" "42704" "plan_rebalance with an unknown shard: 42704"
assert_eq "$(state_of cq -c "SELECT * FROM id_gen.plan_rebalance(shards => ARRAY[NULL])")" "22004" "plan_rebalance with a NULL shard: 22004"
VC=$(cq -c "SELECT id_gen.route_version()")
sq 2 -c "UPDATE id_gen.shard_route_state SET version = 999999" -c "SELECT id_gen.shard_routing_changed()" >/dev/null
cq -c "SELECT id_gen.push_route_state(true)" >/dev/null
assert_eq "$(sq 2 -c "SELECT version FROM id_gen.shard_route_state")" "$VC" \
  "a shard ahead of the coordinator (restored from an older dump) is set back by push_route_state(force => true)"

log "(f) the WAL bound of a reversible move whose source is down"
cq -c "ALTER SYSTEM SET id_gen.reversible_max_wal = '2MB'" -c "SELECT pg_reload_conf()" >/dev/null
cq -c "SET client_min_messages = warning" -c "CALL id_gen.move_genes(16384, 32767, 'shard_2', reversible => true)" >/dev/null
MID=$(cq -c "SELECT max(move_id) FROM id_gen.moves")
cluster_stop "$(shard_dir 1)"
sq 2 -c "INSERT INTO orders (id, owner_id, amount) SELECT id_gen.compose_id(id_gen.shard_gene(o), 3000000000 + o), o, 1
         FROM generate_series(30000001, 30600000) o WHERE id_gen.shard_gene(o) BETWEEN 16384 AND 32767" >/dev/null
poll_until "with the source down, the supervisor drops the way back's slot on the target" "0" 90 \
  sq 2 -c "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'id_gen_back_$MID'"
cluster_up "$(shard_dir 1)"
poll_until "once the source is back, the move is completed" "done" 90 cq -c "SELECT phase FROM id_gen.moves WHERE move_id = $MID"
assert_eq "$(sq 1 -c "SELECT count(*) FROM pg_subscription WHERE subname = 'id_gen_back_$MID'")" "0" "no subscription left on the source"
cq -c "ALTER SYSTEM RESET id_gen.reversible_max_wal" -c "SELECT pg_reload_conf()" >/dev/null
log "e2e 17 passed"
