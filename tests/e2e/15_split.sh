#!/usr/bin/env bash
# Online splits and merges of route ranges (a coordinator that is also the segment
# authority, two shards with wal_level = logical):
# (a) set_route that would split a range holding rows is refused (55000, hint naming
#     split_route), and changes nothing.
# (b) split under load: 550k rows in the range; Python writers insert and update rows
#     inside and outside it, through the coordinator and directly on the shard, while
#     split_route runs. Every transaction commits, the rows per owner match the writers'
#     log (count and sum), the bulk rows are all there once, each half is its own
#     partition on the shard; latencies during the split: p50, p99 and max inside and
#     outside the range (outside at most 100 ms, inside at most 1 s).
# (c) the new half moves to shard_2 and back, merge_routes joins the halves: routes and
#     data end where they started.
# (d) a split whose session is killed while copying resumes with the same CALL; one whose
#     coordinator is killed (kill -9) while copying resumes after the restart; one whose
#     shard swapped while the coordinator's half did not commit is finished by the move
#     supervisor, and the range answers IG002 (retry) rather than stale rows meanwhile;
#     abort_split leaves no trigger or table behind.
# (e) reversible moves under load through the coordinator: after the cut-over the target's
#     writes reach the source; revert_move switches back and every committed write is
#     there; a revert whose clean-up fails after its flip, then a kill -9 of the
#     coordinator: the move supervisor finishes it; a reversible move ended with
#     complete_move leaves no slot, publication, subscription or kept table.
# (f) plan_rebalance proposes moves and splits for skewed shards; rebalance() is a dry run;
#     rebalance(dry_run => false) brings the busiest shard within 1.15 x the mean, and
#     every row is as it was.
source "$(dirname "$0")/lib.sh"
PY=$(ensure_python_env)
C=/tmp/idg_e2e15c CP=54450
shard_dir() { echo "/tmp/idg_e2e15s$1"; }
shard_port() { echo $((CP + $1)); }
SMALL=("shared_buffers = 32MB" "max_connections = 40")
LOGICAL=("wal_level = logical" "max_wal_senders = 10" "max_replication_slots = 10")
trap 'kill $(jobs -p) 2>/dev/null || true; cluster_stop "$C"; for i in 1 2; do cluster_stop "$(shard_dir $i)"; done' EXIT
cq() { cpsql "$C" "$CP" -At "$@"; }
sq() { local i=$1; shift; cpsql "$(shard_dir "$i")" "$(shard_port "$i")" -At "$@"; }
state_of() { "$@" -v VERBOSITY=verbose 2>&1 >/dev/null | sed -n 's/^ERROR:  \([0-9A-Z]\{5\}\): .*/\1/p' | head -1; }
routes() { cq -c "SELECT string_agg(lower_gene || '-' || upper_gene || '@' || shard, ',' ORDER BY lower_gene) FROM id_gen.route_ranges"; }
owners_in() { # owners_in LOWER_GENE UPPER_GENE N [FIRST_OWNER]
  cq -c "SELECT string_agg(o::text, ',') FROM (SELECT o FROM generate_series(${4:-10000001}, ${4:-10000001} + 2000000) o WHERE id_gen.shard_gene(o::bigint) BETWEEN $1 AND $2 LIMIT $3) s"; }
checksum() { cq -c "SELECT count(*) || '/' || count(DISTINCT id) || '/' || sum(amount) || '/' || sum(hashtextextended(id::text || ':' || owner_id || ':' || amount, 0) % 1000003) FROM orders"; }
parts_on() { sq "$1" -c "SELECT string_agg(c.relname || ':' || (SELECT count(*) FROM pg_trigger t WHERE t.tgrelid = c.oid AND NOT t.tgisinternal), ',' ORDER BY c.relname) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'orders'::regclass AND c.relname !~ '_(not_owned|negative)$'"; }  # tombstones: e2e 16
strays_on() { sq "$1" -c "SELECT count(*) FROM pg_class WHERE relname ~ '^orders_g' AND relkind = 'r' AND NOT relispartition"; }

cluster_start "$C" "$CP" "${SMALL[@]}"
cq >/dev/null <<SQL
CREATE EXTENSION id_gen; CREATE EXTENSION postgres_fdw; CREATE EXTENSION dblink;
SELECT id_gen.create_sequence('orders', step => 1000);
CREATE ROLE id_authority LOGIN;
GRANT UPDATE (max_id) ON id_gen.sequences TO id_authority;
ALTER ROLE id_authority SET synchronous_commit = on;
SELECT id_gen.set_route(16383, 'shard_1');
SELECT id_gen.set_route(32767, 'shard_1');
SELECT id_gen.set_route(65535, 'shard_2');
CREATE TABLE orders (id bigint PRIMARY KEY, owner_id bigint NOT NULL, amount bigint NOT NULL, note text);
SQL
for i in 1 2; do
  cluster_start "$(shard_dir $i)" "$(shard_port $i)" "${SMALL[@]}" "${LOGICAL[@]}"
  sq $i >/dev/null <<SQL
CREATE EXTENSION id_gen; CREATE EXTENSION postgres_fdw;
CREATE SERVER central FOREIGN DATA WRAPPER postgres_fdw
  OPTIONS (host '$C', port '$CP', dbname 'postgres', connect_timeout '2', options '-c synchronous_commit=on');
CREATE USER MAPPING FOR PUBLIC SERVER central OPTIONS (user 'id_authority');
SELECT id_gen.create_sequence('orders', step => 1000, authority => 'central');
SQL
  cq >/dev/null <<SQL
CREATE SERVER shard_$i FOREIGN DATA WRAPPER postgres_fdw
  OPTIONS (host '$(shard_dir $i)', port '$(shard_port $i)', dbname 'postgres', connect_timeout '2');
CREATE USER MAPPING FOR postgres SERVER shard_$i OPTIONS (user 'postgres');
SQL
done
cq -c "SET client_min_messages = warning" -c "SELECT id_gen.distribute_table('orders', 'id', 'owner_id', 'orders')" >/dev/null

# 550k rows of genes 0 .. 16383, written on the shard (bulk), owners 1 .. 2.2M.
sq 1 -c "INSERT INTO orders (id, owner_id, amount)
         SELECT id_gen.compose_id(id_gen.shard_gene(o), 1000000000 + o), o, o % 7
         FROM generate_series(1, 2200000) o WHERE id_gen.shard_gene(o) <= 16383" >/dev/null
sq 1 -c "ANALYZE orders" >/dev/null
bulk=$(cq -c "SELECT count(*) FROM orders WHERE owner_id <= 2200000")
assert_gt "$bulk" 500000 "rows in genes 0 .. 16383 before the split"
bulk_sum=$(cq -c "SELECT sum(amount) FROM orders WHERE owner_id <= 2200000")
before=$(checksum)

# (a) -------------------------------------------------------------------------------------
out=$(cq -v VERBOSITY=verbose -c "SELECT id_gen.set_route(8191, 'shard_1')" 2>&1) && fail "set_route split a range with rows: $out"
grep -q "55000: id_gen: this route change splits or merges" <<<"$out" && grep -q "HINT:  Use CALL id_gen.split_route" <<<"$out" \
  || fail "not the expected refusal: $out"
assert_eq "$(routes)" "0-16383@shard_1,16384-32767@shard_1,32768-65535@shard_2" "set_route splitting a range with rows: 55000 naming split_route; routes unchanged"

# (b) -------------------------------------------------------------------------------------
inside=$(owners_in 0 16383 40)
shard_outside=$(owners_in 16384 32767 20)
outside="$shard_outside,$(owners_in 32768 65535 20)"
rm -f "$C/stop"
"$PY" "$REPO_ROOT/tests/e2e/split_load.py" run --coord "host=$C port=$CP dbname=postgres user=postgres" \
  --shard "host=$(shard_dir 1) port=$(shard_port 1) dbname=postgres user=postgres" \
  --inside "$inside" --outside "$outside" --shard-outside "$shard_outside" --stop "$C/stop" --log "$C/load.log" &
load=$!
sleep 3
t0=$(date +%s.%N)
cq -c "CALL id_gen.split_route(8191)" 2>&1 | sed -n 's/^\(NOTICE\|ERROR\|DETAIL\|CONTEXT\):  /  /p' >&2
t1=$(date +%s.%N)
sleep 2
touch "$C/stop"; wait $load
split_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
assert_eq "$(routes)" "0-8191@shard_1,8192-16383@shard_1,16384-32767@shard_1,32768-65535@shard_2" "split_route(8191): routes split"
assert_eq "$(cq -c "SELECT phase || ':' || (rows_total >= $bulk) || ':' || (rows_copied > 0.9 * rows_total) || ':' || (fence_ms < 1000) FROM id_gen.splits")" "done:true:true:true" "id_gen.splits: done, the bulk rows counted and copied, fence under 1 s"
report=$("$PY" "$REPO_ROOT/tests/e2e/split_load.py" check --coord "host=$C port=$CP dbname=postgres user=postgres" \
  --log "$C/load.log" --window "$t0,$t1") || fail "writers' log and tables differ: $report"
echo "$report" | grep -v '^max_' | sed 's/^/  /' >&2
pass "every transaction committed; rows per owner match the writers' log"
assert_eq "$(cq -c "SELECT count(*) || '/' || sum(amount) FROM orders WHERE owner_id <= 2200000")" "$bulk/$bulk_sum" "bulk rows all there, once"
assert_eq "$(cq -c "SELECT count(*) = count(DISTINCT id) FROM orders")" "t" "no id twice"
assert_eq "$(parts_on 1)" "orders_g0_8191:0,orders_g16384_32767:0,orders_g8192_16383:0" "shard_1: one partition per range, no trigger left"
assert_eq "$(strays_on 1)" "0" "shard_1: no old partition left"
assert_eq "$(sq 1 -c "SELECT count(*) FROM orders_g0_8191 WHERE id >> 47 > 8191") $(sq 1 -c "SELECT count(*) FROM orders_g8192_16383 WHERE id >> 47 < 8192")" "0 0" "no row on the wrong half"
assert_eq "$(cq -c "SELECT bool_and(in_step) FROM id_gen.distribution")" "t" "distribution in step"
max_in=$(sed -n 's/^max_inside_ms=//p' <<<"$report"); max_out=$(sed -n 's/^max_outside_ms=//p' <<<"$report")
max_in_read=$(sed -n 's/^max_inside_read_ms=//p' <<<"$report"); max_out_read=$(sed -n 's/^max_outside_read_ms=//p' <<<"$report")
fence=$(cq -c "SELECT fence_ms || ' ms in ' || fence_attempts || ' attempt(s)' FROM id_gen.splits")
echo "  split of $(cq -c "SELECT rows_total FROM id_gen.splits") rows: ${split_s} s, fence $fence" >&2
assert_lt "$max_out" 101 "writes outside the split range waited at most 100 ms (max, ms)"
assert_lt "$max_in" 1001 "writes inside the split range waited at most 1 s (max, ms)"
assert_lt "$max_out_read" 101 "reads outside the split range waited at most 100 ms (max, ms)"
assert_lt "$max_in_read" 1001 "reads inside the split range waited at most 1 s (max, ms)"

# (c) -------------------------------------------------------------------------------------
after_load=$(checksum)
cq -c "SET client_min_messages = warning" -c "CALL id_gen.move_genes(8192, 16383, 'shard_2')" >/dev/null
assert_eq "$(routes)" "0-8191@shard_1,8192-16383@shard_2,16384-32767@shard_1,32768-65535@shard_2" "the new half moved to shard_2"
cq -c "SET client_min_messages = warning" -c "CALL id_gen.move_genes(8192, 16383, 'shard_1')" >/dev/null
cq -c "CALL id_gen.merge_routes(8191)" 2>&1 | sed -n 's/^\(NOTICE\|ERROR\|DETAIL\|CONTEXT\):  /  /p' >&2
assert_eq "$(routes)" "0-16383@shard_1,16384-32767@shard_1,32768-65535@shard_2" "moved back and merged: the routes are where they started"
assert_eq "$(parts_on 1)" "orders_g0_16383:0,orders_g16384_32767:0" "shard_1: one partition for the merged range again"
assert_eq "$(strays_on 1)/$(strays_on 2)" "0/0" "no stray tables"
assert_eq "$(cq -c "SELECT bool_and(in_step) FROM id_gen.distribution")" "t" "distribution in step after the merge"
assert_eq "$(cq -c "SELECT count(*) FROM orders WHERE owner_id <= 2200000")" "$bulk" "bulk rows after split, moves and merge"
# The same data as before the round trip (the writers' rows are checked above).
assert_eq "$(checksum)" "$after_load" "every row as it was before the moves and the merge (count/distinct ids/sum/hash)"

# For comparison: the same split as 0.4.0's set_route did it (copy_rows => true), which
# holds ACCESS EXCLUSIVE on the whole table, coordinator and shard, while it copies.
t2=$(date +%s.%N)
cq -c "SELECT id_gen.set_route(8191, 'shard_1', copy_rows => true)" >/dev/null
t3=$(date +%s.%N)
cq -c "SELECT id_gen.drop_route(8191, copy_rows => true)" >/dev/null
echo "  the same split with set_route(8191, 'shard_1', copy_rows => true): the whole table locked for $(awk -v a="$t2" -v b="$t3" 'BEGIN { printf "%.1f", b - a }') s" >&2
assert_eq "$(checksum)" "$after_load" "set_route with copy_rows and drop_route back: every row as it was"

# (d) -------------------------------------------------------------------------------------
# Killed session while copying: the same CALL resumes.
cq -c "CALL id_gen.split_route(4095)" >/dev/null 2>&1 & sp=$!
for _ in $(seq 1 200); do [ "$(cq -c "SELECT count(*) FROM id_gen.splits WHERE at_gene = 4095 AND phase = 'copying' AND rows_copied > 0")" = 1 ] && break; sleep 0.05; done
cq -c "SELECT pg_terminate_backend(runner_pid) FROM id_gen.route_splits WHERE at_gene = 4095" >/dev/null
wait $sp || true
assert_eq "$(cq -c "SELECT phase FROM id_gen.splits WHERE at_gene = 4095")" "copying" "split killed while copying stays in copying"
cq -c "INSERT INTO orders (owner_id, amount) SELECT o, 1 FROM unnest(string_to_array('$inside', ',')::bigint[]) o" >/dev/null
cq -c "CALL id_gen.split_route(4095)" >/dev/null 2>&1
assert_eq "$(cq -c "SELECT phase FROM id_gen.splits WHERE at_gene = 4095")" "done" "the same CALL resumed it"
sum1=$(cq -c "SELECT count(*) || '/' || sum(amount) FROM orders")
# Coordinator killed while copying: after the restart the same CALL resumes.
cq -c "CALL id_gen.merge_routes(4095)" >/dev/null 2>&1 & sp=$!
for _ in $(seq 1 200); do [ "$(cq -c "SELECT count(*) FROM id_gen.splits WHERE kind = 'merge' AND at_gene = 4095 AND phase = 'copying' AND rows_copied > 0")" = 1 ] && break; sleep 0.05; done
pm=$(head -1 "$C/data/postmaster.pid"); kids=$(pgrep -P "$pm" || true)
kill -9 "$pm" $kids
wait $sp || true
for _ in $(seq 1 100); do kill -0 "$pm" $kids 2>/dev/null || break; sleep 0.1; done
cluster_up "$C" "$CP"
assert_eq "$(cq -c "SELECT phase FROM id_gen.splits WHERE kind = 'merge' AND at_gene = 4095")" "copying" "merge after kill -9 of the coordinator: copying"
cq -c "CALL id_gen.merge_routes(4095)" >/dev/null 2>&1
assert_eq "$(cq -c "SELECT phase FROM id_gen.splits WHERE kind = 'merge' AND at_gene = 4095")/$(cq -c "SELECT count(*) || '/' || sum(amount) FROM orders")" "done/$sum1" "resumed after the restart; nothing lost"
# The shard swapped, the coordinator's half did not commit: a reader holds the
# coordinator's table (and so the range partitions), so the fence cannot start; the swap
# runs on the shard by hand (as if the coordinator had died right after it), and the
# runner is killed.
cq -c "BEGIN" -c "LOCK TABLE orders_shards IN ACCESS SHARE MODE" -c "SELECT pg_sleep(120)" >/dev/null 2>&1 & holder=$!
poll_until "a reader holds the coordinator's table" "1" 10 cq -c "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(120)'"
cq -c "CALL id_gen.split_route(2047)" >/dev/null 2>&1 & sp=$!
poll_until "the split waits to fence" "swapping" 60 cq -c "SELECT phase FROM id_gen.splits WHERE at_gene = 2047"
sid=$(cq -c "SELECT split_id FROM id_gen.splits WHERE at_gene = 2047")
sq 1 -c "SELECT id_gen.shard_split_swap($sid, 5000)" >/dev/null
cq -c "SELECT pg_terminate_backend(runner_pid) FROM id_gen.route_splits WHERE split_id = $sid" >/dev/null
unhold() { cq -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query ~ '^SELECT pg_sleep\(12[0-9]\)$'" >/dev/null; wait $holder || true; }
wait $sp || true; unhold
assert_eq "$(state_of cq -c "SELECT count(*) FROM orders WHERE id BETWEEN id_gen.gene_first_id(0) AND id_gen.gene_last_id(2047)")" "IG002" \
  "meanwhile a scan of the range reaches the retired partition and gets IG002 (retry) instead of answering"
o_in=$(cq -c "SELECT o FROM generate_series(1, 100000) o WHERE id_gen.shard_gene(o) <= 2047 LIMIT 1")
assert_eq "$(state_of cq -c "INSERT INTO orders VALUES (id_gen.compose_id(id_gen.shard_gene($o_in), 777000001), $o_in, 1)")" "IG002" \
  "and so does a write of its genes"
assert_eq "$(cq -c "SELECT 'answered' FROM (SELECT count(*) FROM orders WHERE id BETWEEN id_gen.gene_first_id(16384) AND id_gen.gene_last_id(65535)) x")" \
  "answered" "the other ranges of the table answer"
poll_until "the move supervisor finishes the coordinator's half" "done:true" 60 \
  cq -c "SELECT phase || ':' || (recovered_by IS NOT NULL) FROM id_gen.splits WHERE split_id = $sid"
assert_eq "$(cq -c "SELECT count(*) || '/' || sum(amount) FROM orders")/$(cq -c "SELECT bool_and(in_step) FROM id_gen.distribution")" "$sum1/t" "nothing lost, in step"
# Abort: nothing of the split is left (a reader of the coordinator's table keeps the fence
# from starting; the runner is killed in swapping).
cq -c "BEGIN" -c "LOCK TABLE orders_shards IN ACCESS SHARE MODE" -c "SELECT pg_sleep(121)" >/dev/null 2>&1 & holder=$!
poll_until "a reader holds the coordinator's table" "1" 10 cq -c "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(121)'"
cq -c "CALL id_gen.split_route(1023)" >/dev/null 2>&1 & sp=$!
poll_until "the split waits to fence" "swapping" 60 cq -c "SELECT phase FROM id_gen.splits WHERE at_gene = 1023"
cq -c "SELECT pg_terminate_backend(runner_pid) FROM id_gen.route_splits WHERE at_gene = 1023" >/dev/null
wait $sp || true; unhold
cq -c "CALL id_gen.abort_split($(cq -c "SELECT split_id FROM id_gen.route_splits WHERE at_gene = 1023"))" >/dev/null
assert_eq "$(cq -c "SELECT phase FROM id_gen.splits WHERE at_gene = 1023")/$(strays_on 1)/$(sq 1 -c "SELECT count(*) FROM id_gen.shard_split_pieces")" "aborted/0/0" "abort_split: no table or piece left"
assert_eq "$(parts_on 1)" "orders_g0_2047:0,orders_g16384_32767:0,orders_g2048_16383:0" "and no trigger"
assert_eq "$(cq -c "SELECT count(*) || '/' || sum(amount) FROM orders")" "$sum1" "nothing lost"

# (e) -------------------------------------------------------------------------------------
nothing_left() { for i in 1 2; do sq $i -c "SELECT (SELECT count(*) FROM pg_replication_slots) + (SELECT count(*) FROM pg_publication) + (SELECT count(*) FROM pg_subscription) + (SELECT count(*) FROM pg_class WHERE relname ~ '^(orders_g|id_gen_moved)' AND relkind = 'r' AND NOT relispartition)"; done | paste -sd/; }
rev_inside=$(owners_in 0 2047 30 20000001)
rev_outside="$(owners_in 16384 32767 10 20000001),$(owners_in 32768 65535 10 20000001)"
rm -f "$C/stop"
"$PY" "$REPO_ROOT/tests/e2e/split_load.py" run --coord "host=$C port=$CP dbname=postgres user=postgres" \
  --inside "$rev_inside" --outside "$rev_outside" --stop "$C/stop" --log "$C/load2.log" &
load=$!
sleep 2
cq -c "CALL id_gen.move_genes(0, 2047, 'shard_2', reversible => true)" 2>&1 | sed -n 's/^\(NOTICE\|ERROR\):  /  /p' >&2
mid=$(cq -c "SELECT move_id FROM id_gen.moves WHERE reversible ORDER BY move_id DESC LIMIT 1")
assert_eq "$(cq -c "SELECT phase || '/' || (back_retained_bytes IS NOT NULL) FROM id_gen.moves WHERE move_id = $mid")/$(routes | cut -d, -f1)" \
  "reversible/true/0-2047@shard_2" "a reversible move cut over: shard_2 serves genes 0 .. 2047, the view shows the way back's WAL"
sleep 3
on_target=$(sq 2 -c "SELECT count(*) FROM orders_g0_2047 WHERE owner_id > 10000000")
assert_gt "$on_target" 0 "writers wrote on the target after the cut-over"
cq -c "CALL id_gen.revert_move($mid)" 2>&1 | sed -n 's/^\(NOTICE\|ERROR\):  /  /p' >&2
cq -c "SELECT 'revert: fence ' || fence_ms || ' ms, attempts ' || fence_attempts || coalesce(', last error: ' || last_error, '') FROM id_gen.moves WHERE move_id = $mid" | sed 's/^/  /' >&2
t1=$(date +%s.%N)
sleep 1
touch "$C/stop"; wait $load
assert_eq "$(cq -c "SELECT phase FROM id_gen.moves WHERE move_id = $mid")/$(routes | cut -d, -f1)" "reverted/0-2047@shard_1" "revert_move: genes 0 .. 2047 are on shard_1 again"
report=$("$PY" "$REPO_ROOT/tests/e2e/split_load.py" check --coord "host=$C port=$CP dbname=postgres user=postgres" \
  --log "$C/load2.log" --window "$t1,$t1") || fail "after the revert the writers' log and the tables differ: $report"
echo "$report" | grep "^transactions" | sed 's/^/  /' >&2
pass "every write committed on the target after the cut-over is on the source after the revert"
assert_eq "$(nothing_left)" "0/0" "no slot, publication, subscription or copy left on either shard"
assert_eq "$(cq -c "SELECT bool_and(in_step) FROM id_gen.distribution")" "t" "distribution in step after the revert"
# The coordinator killed while a revert's fence is up (the source's subscription is
# disabled, so the marker never arrives and the fence waits): after the restart the move
# supervisor lifts the target's fence, direct writes there work again, and a second
# revert_move, with the subscription enabled, succeeds.
cq -c "SET client_min_messages = warning" -c "CALL id_gen.move_genes(0, 2047, 'shard_2', reversible => true)" >/dev/null
mid=$(cq -c "SELECT max(move_id) FROM id_gen.moves")
assert_eq "$(state_of cq -c "CALL id_gen.abort_move($mid)")/$(cq -c "SELECT phase FROM id_gen.moves WHERE move_id = $mid")" "55000/reversible" \
  "abort_move of a reversible move is refused (55000): the target is authoritative"
sq 1 -c "ALTER SUBSCRIPTION id_gen_back_$mid DISABLE" >/dev/null
cq -c "CALL id_gen.revert_move($mid)" >/dev/null 2>&1 & sp=$!
for _ in $(seq 1 200); do [ "$(sq 2 -c "SELECT count(*) FROM pg_trigger WHERE tgname = 'id_gen_move_fence' AND tgenabled <> 'D'")" -gt 0 ] && break; sleep 0.05; done
direct_owner=$(cut -d, -f1 <<<"$rev_inside")
assert_eq "$(state_of sq 2 -c "INSERT INTO orders (id, owner_id, amount) VALUES (id_gen.gene_order_id('orders', $direct_owner::bigint), $direct_owner, 1)")" "IG002" \
  "during the revert's fence a direct write on the target is refused (IG002: retry shortly)"
pm=$(head -1 "$C/data/postmaster.pid"); kids=$(pgrep -P "$pm" || true)
kill -9 "$pm" $kids
wait $sp || true
for _ in $(seq 1 100); do kill -0 "$pm" $kids 2>/dev/null || break; sleep 0.1; done
cluster_up "$C" "$CP"
for _ in $(seq 1 150); do [ "$(sq 2 -c "SELECT count(*) FROM pg_trigger WHERE tgname = 'id_gen_move_fence' AND tgenabled <> 'D'")" = 0 ] && break; sleep 0.2; done
assert_eq "$(cq -c "SELECT phase || ':' || source_fenced || ':' || (recovered_by LIKE 'lifted the fence of an interrupted revert%') FROM id_gen.moves WHERE move_id = $mid")/$(routes | cut -d, -f1)" \
  "reversible:false:true/0-2047@shard_2" "after kill -9 of the coordinator mid-revert the supervisor lifted the target's fence; the target still serves"
assert_eq "$(state_of sq 2 -c "INSERT INTO orders (id, owner_id, amount) VALUES (id_gen.gene_order_id('orders', $direct_owner::bigint), $direct_owner, 424242)")" "" \
  "direct writes on the target work again"
sq 1 -c "ALTER SUBSCRIPTION id_gen_back_$mid ENABLE" >/dev/null
cq -c "CALL id_gen.revert_move($mid)" >/dev/null 2>&1
assert_eq "$(cq -c "SELECT phase FROM id_gen.moves WHERE move_id = $mid")/$(routes | cut -d, -f1)/$(nothing_left)" "reverted/0-2047@shard_1/0/0" \
  "the second revert_move succeeded; nothing of the way back is left"
assert_eq "$(sq 1 -c "SELECT count(*) FROM orders WHERE amount = 424242")" "1" "the direct write made on the target after the fence was lifted is on the source after the revert"

# A revert interrupted after its flip committed (a reader on the source's kept partition
# makes re-attaching it time out), then the coordinator killed: the move supervisor
# finishes the revert after the restart.
cq -c "SET client_min_messages = warning" -c "CALL id_gen.move_genes(0, 2047, 'shard_2', reversible => true)" >/dev/null
mid=$(cq -c "SELECT max(move_id) FROM id_gen.moves")
cq -c "INSERT INTO orders (owner_id, amount) SELECT o, 555555 FROM unnest((string_to_array('$rev_inside', ',')::bigint[])[1:20]) o" >/dev/null
sq 1 -c "BEGIN" -c "LOCK TABLE orders_g0_2047 IN ACCESS SHARE MODE" -c "SELECT pg_sleep(120)" >/dev/null 2>&1 & holder=$!
sleep 0.5
out=$(cq -c "CALL id_gen.revert_move($mid)" 2>&1) && fail "the revert finished although the source's partition was held: $out"
assert_eq "$(cq -c "SELECT phase FROM id_gen.moves WHERE move_id = $mid")/$(routes | cut -d, -f1)" "reverting/0-2047@shard_1" \
  "a revert whose clean-up failed after the flip: phase reverting, the routes point at the source"
assert_eq "$(cq -c "SELECT count(*) FROM orders WHERE amount = 555555")" "20" "the rows written on the target are read from the source meanwhile"
pm=$(head -1 "$C/data/postmaster.pid"); kids=$(pgrep -P "$pm" || true)
kill -9 "$pm" $kids
for _ in $(seq 1 100); do kill -0 "$pm" $kids 2>/dev/null || break; sleep 0.1; done
sq 1 -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(120)'" >/dev/null; wait $holder || true
cluster_up "$C" "$CP"
for _ in $(seq 1 150); do [ "$(cq -c "SELECT phase FROM id_gen.moves WHERE move_id = $mid")" = reverted ] && break; sleep 0.2; done
assert_eq "$(cq -c "SELECT phase || ':' || (recovered_by LIKE 'finished the revert%') FROM id_gen.moves WHERE move_id = $mid")" "reverted:true" \
  "after kill -9 of the coordinator the move supervisor finished the revert"
assert_eq "$(sq 1 -c "SELECT count(*) FROM orders WHERE amount = 555555")/$(nothing_left)" "20/0/0" "the rows are in the source's table, nothing of the way back is left"
assert_eq "$(cq -c "SELECT bool_and(in_step) FROM id_gen.distribution")" "t" "distribution in step"

before_complete=$(checksum)
cq -c "SET client_min_messages = warning" -c "CALL id_gen.move_genes(0, 2047, 'shard_2', reversible => true)" >/dev/null
mid=$(cq -c "SELECT max(move_id) FROM id_gen.moves")
cq -c "INSERT INTO orders (owner_id, amount) SELECT o, 777777 FROM unnest(string_to_array('$rev_inside', ',')::bigint[]) o" >/dev/null
for _ in $(seq 1 100); do [ "$(sq 1 -c "SELECT count(*) FROM orders_g0_2047 WHERE amount = 777777")" = 30 ] && break; sleep 0.1; done
assert_eq "$(sq 1 -c "SELECT count(*) FROM orders_g0_2047 WHERE amount = 777777")" "30" "the source's kept (detached) partition follows the target: 30 rows written after the cut-over"
cq -c "CALL id_gen.complete_move($mid)" >/dev/null 2>&1
assert_eq "$(cq -c "SELECT phase FROM id_gen.moves WHERE move_id = $mid")/$(routes | cut -d, -f1)/$(nothing_left)" "done/0-2047@shard_2/0/0" \
  "complete_move: the genes stay on shard_2, nothing of the way back is left"
assert_eq "$(cq -c "SELECT count(*) - 30 || '/' || sum(amount) - 30 * 777777 FROM orders")" "$(cut -d/ -f1 <<<"$before_complete")/$(cut -d/ -f3 <<<"$before_complete")" "every row there once"
# A way back that keeps more WAL than id_gen.reversible_max_wal (the source stopped
# following) is ended by the move supervisor: the genes stay on the target.
cq -c "ALTER SYSTEM SET id_gen.reversible_max_wal = '2MB'" -c "SELECT pg_reload_conf()" >/dev/null
cq -c "SET client_min_messages = warning" -c "CALL id_gen.move_genes(2048, 16383, 'shard_2', reversible => true)" >/dev/null
mid=$(cq -c "SELECT max(move_id) FROM id_gen.moves")
sq 1 -c "ALTER SUBSCRIPTION id_gen_back_$mid DISABLE" >/dev/null
sq 2 -c "INSERT INTO orders (id, owner_id, amount) SELECT id_gen.compose_id(id_gen.shard_gene(o), 3000000000 + o), o, 1
         FROM generate_series(30000001, 31000000) o WHERE id_gen.shard_gene(o) BETWEEN 2048 AND 16383" >/dev/null
for _ in $(seq 1 200); do [ "$(cq -c "SELECT phase FROM id_gen.moves WHERE move_id = $mid")" = done ] && break; sleep 0.2; done
assert_eq "$(cq -c "SELECT phase || ':' || (recovered_by LIKE 'completed: the way back kept%') FROM id_gen.moves WHERE move_id = $mid")/$(nothing_left)" "done:true/0/0" \
  "a way back holding more than id_gen.reversible_max_wal (2MB) of WAL: the supervisor completed the move, nothing left"
cq -c "ALTER SYSTEM RESET id_gen.reversible_max_wal" -c "SELECT pg_reload_conf()" >/dev/null

# (f) the rebalancer ------------------------------------------------------------------------
balance() { cq -c "SELECT round(max(t) / avg(t), 2) FROM (SELECT shard, sum(row_count) AS t FROM id_gen.route_range_rows() GROUP BY shard) s"; }
before_rebalance=$(checksum)
skew=$(balance)
cq -c "SELECT step || ' ' || action || ' ' || command || ' (' || row_count || ' rows)' FROM id_gen.plan_rebalance()" | sed 's/^/  plan: /' >&2
steps=$(cq -c "SELECT count(*) FROM id_gen.plan_rebalance()")
assert_gt "$steps" 0 "plan_rebalance proposes steps for shards at $skew x the mean"
cq -c "CALL id_gen.rebalance()" >/dev/null 2>&1
assert_eq "$(balance)" "$skew" "rebalance() is a dry run by default: nothing moved"
cq -c "SET client_min_messages = warning" -c "CALL id_gen.rebalance(dry_run => false)" >/dev/null
after=$(balance)
assert_eq "$(awk -v a="$after" 'BEGIN { print (a <= 1.15) ? "balanced" : "skewed " a }')" "balanced" "after rebalance(dry_run => false) the busiest shard holds $after x the mean (was $skew)"
assert_eq "$(checksum)" "$before_rebalance" "every row as it was"
assert_eq "$(cq -c "SELECT count(*) FROM id_gen.plan_rebalance()")" "0" "nothing left to do"
assert_eq "$(cq -c "SELECT bool_and(in_step) FROM id_gen.distribution")" "t" "distribution in step"
