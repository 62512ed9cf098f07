#!/usr/bin/env bash
# Online moves of route ranges between shards (docs/guide/scale-out.md "Moving data"): a coordinator and
# two shards; the coordinator is the shards' central authority.
# (a) refusals: a source without wal_level = logical fails at once (55000, nothing
#     created); genes that are not whole route ranges 22023; dry_run prints the steps
#     and changes nothing.
# (b) under load: pgbench clients insert and update rows of every gene through the
#     coordinator, logging what they committed, while a quarter of the genes (over
#     200k rows) moves from shard_1 to shard_2. Afterwards every owner's row count and
#     amount match the log, the moved genes live only on shard_2, no slot, publication
#     or subscription is left; writes of the moved genes paused at most 1 s, writes of
#     other genes were not blocked during the fence (p50/p99/max reported).
# (c) the target killed mid-copy: the move fails, routes and the source are unchanged,
#     no replication slot is left on the source; abort_move cleans the target later.
# (d) the coordinator's session terminated mid-move: abort_move rolls back; terminated
#     again: the same CALL resumes and finishes.
# (e) split, then merge back: routes and every shard's rows end where they started; the top
#     range with keep_source.
# (f) a fence that times out (the target applies slowly) is lifted and retried.
# (g) a source that cannot let go after the flip: the move stays cut over, abort is
#     refused, the same CALL finishes it.
source "$(dirname "$0")/lib.sh"
C=/tmp/idg_e2e12c CP=54420
shard_dir() { echo "/tmp/idg_e2e12s$1"; }
shard_port() { echo $((CP + $1)); }
SMALL=("shared_buffers = 32MB" "max_connections = 30")
LOGICAL=("wal_level = logical" "max_wal_senders = 10" "max_replication_slots = 10")
trap 'cluster_stop "$C"; for i in 1 2; do cluster_stop "$(shard_dir $i)"; done' EXIT
cq() { cpsql "$C" "$CP" -At "$@"; }
sq() { local i=$1; shift; cpsql "$(shard_dir "$i")" "$(shard_port "$i")" -At "$@"; }
# What a shard holds, also of genes it does not own (those reads fail with IG001 otherwise: e2e 16).
sq_local() { PGOPTIONS="-c id_gen.routing_guard=off" sq "$@"; }
state_of() { "$@" -v VERBOSITY=verbose 2>&1 >/dev/null | sed -n 's/^ERROR:  \([0-9A-Z]\{5\}\): .*/\1/p' | head -1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
leftovers() { # slots and publications on shard_1, subscriptions on shard_2
  echo "$(sq 1 -c "SELECT count(*) FROM pg_replication_slots")/$(sq 1 -c "SELECT count(*) FROM pg_publication")/$(sq 2 -c "SELECT count(*) FROM pg_subscription")/$(sq 2 -c "SELECT count(*) FROM pg_replication_slots")/$(sq 2 -c "SELECT count(*) FROM pg_publication")/$(sq 1 -c "SELECT count(*) FROM pg_subscription")"
}
routes() { cq -c "SELECT string_agg(lower_gene || '-' || upper_gene || '@' || shard, ',' ORDER BY lower_gene) FROM id_gen.route_ranges"; }
# Per shard: rows and a checksum of (id, owner, amount), to compare states.
shard_state() { sq "$1" -c "SELECT (SELECT count(*) || ':' || coalesce(sum(hashtext(id || ',' || owner_id || ',' || amount)::bigint), 0) FROM orders)
                                  || '+' || (SELECT count(*) || ':' || coalesce(sum(hashtext(id || ',' || note)::bigint), 0) FROM audit)"; }

cluster_start "$C" "$CP" "${SMALL[@]}"
cq >/dev/null <<'SQL'
CREATE EXTENSION id_gen; CREATE EXTENSION postgres_fdw; CREATE EXTENSION dblink;
SELECT id_gen.create_sequence('orders', step => 1000);
CREATE ROLE id_authority LOGIN;
GRANT UPDATE (max_id) ON id_gen.sequences TO id_authority;
ALTER ROLE id_authority SET synchronous_commit = on;
SELECT id_gen.set_route(16383, 'shard_1');
SELECT id_gen.set_route(32767, 'shard_1');
SELECT id_gen.set_route(49151, 'shard_2');
SELECT id_gen.set_route(65535, 'shard_2');
CREATE TABLE orders (id bigint PRIMARY KEY, owner_id bigint NOT NULL, amount bigint NOT NULL DEFAULT 0, note text);
-- A second distributed table, without a sequence (ids come with the rows): moves carry it along.
CREATE TABLE audit (id bigint PRIMARY KEY, note text NOT NULL);
SQL
for i in 1 2; do
  if [ "$i" = 1 ]; then cluster_start "$(shard_dir $i)" "$(shard_port $i)" "${SMALL[@]}"   # (a): logical comes later
  else cluster_start "$(shard_dir $i)" "$(shard_port $i)" "${SMALL[@]}" "${LOGICAL[@]}"; fi
  sq $i >/dev/null <<SQL
CREATE EXTENSION id_gen; CREATE EXTENSION postgres_fdw;
CREATE SERVER central FOREIGN DATA WRAPPER postgres_fdw
  OPTIONS (host '$C', port '$CP', dbname 'postgres', connect_timeout '2', options '-c synchronous_commit=on');
CREATE USER MAPPING FOR PUBLIC SERVER central OPTIONS (user 'id_authority');
SELECT id_gen.create_sequence('orders', step => 10000, authority => 'central');
SQL
  cq >/dev/null <<SQL
CREATE SERVER shard_$i FOREIGN DATA WRAPPER postgres_fdw
  OPTIONS (host '$(shard_dir $i)', port '$(shard_port $i)', dbname 'postgres', connect_timeout '2');
CREATE USER MAPPING FOR postgres SERVER shard_$i OPTIONS (user 'postgres', password 'pw-not-to-be-shown');
SQL
done
cq -c "SET client_min_messages = warning" -c "SELECT id_gen.distribute_table('orders', 'id', 'owner_id', 'orders')" \
   -c "SELECT id_gen.distribute_table('audit', 'id')" >/dev/null

# (a) refusals -----------------------------------------------------------------------------
out=$(cq -v VERBOSITY=verbose -c "CALL id_gen.move_genes(0, 16383, 'shard_2')" 2>&1) && fail "a move from a shard without wal_level = logical succeeded"
grep -q '^ERROR:  55000: id_gen: source shard "shard_1" runs with wal_level = replica' <<<"$out" || fail "not the expected refusal: $out"
grep -q "HINT:  On shard_1: ALTER SYSTEM SET wal_level = logical" <<<"$out" || fail "no hint: $out"
pass "a source without wal_level = logical: 55000 at once, with the hint"
assert_eq "$(cq -c "SELECT count(*) FROM id_gen.moves")/$(leftovers)" "0/0/0/0/0/0/0" "nothing was recorded or created"
for l in "${LOGICAL[@]}"; do echo "$l" >> "$(shard_dir 1)/data/postgresql.conf"; done
cluster_stop "$(shard_dir 1)"; cluster_up "$(shard_dir 1)"
assert_eq "$(state_of cq -c "CALL id_gen.move_genes(0, 1000, 'shard_2')")" "22023" "genes that are not whole route ranges: 22023"
out=$(cq -c "CALL id_gen.move_genes(0, 16383, 'shard_2', dry_run => true)" 2>&1)
for want in "on shard_1 (source): SELECT id_gen.shard_create_publication('N', '{public.audit_g0_16383,public.orders_g0_16383}', '{id,id}', '{0,0}', '{16383,16383}')" \
            "on shard_2 (target): SELECT id_gen.shard_subscribe('N', '{public.audit_g0_16383,public.orders_g0_16383}')" \
            "password" "SELECT id_gen.shard_drop_publication('N')"; do
  [ "$want" = password ] && { grep -q "pw-not-to-be-shown" <<<"$out" && fail "dry_run printed the password"; grep -qF "password='********'" <<<"$out" || fail "no masked password: $out"; continue; }
  grep -qF "$want" <<<"$out" || fail "dry_run does not show: $want
$out"
done
pass "dry_run prints every step with its SQL ($(grep -c 'NOTICE:  step' <<<"$out") steps) and no password"
assert_eq "$(cq -c "SELECT count(*) FROM id_gen.moves")/$(leftovers)" "0/0/0/0/0/0/0" "dry_run changed nothing"

# Data: 800k owners, one row each, on their shards (written there directly: fast); a
# counter row for each of 2000 owners that the clients update.
t0=$(now)
for i in 1 2; do
  sq $i -c "INSERT INTO orders (id, owner_id, amount, note)
            SELECT id_gen.gene_order_id('orders', o), o, 0, 'load' FROM generate_series(1, 800000) o
            WHERE (id_gen.shard_gene(o) <= 32767) = ($i = 1)" \
     -c "INSERT INTO audit SELECT id, 'audit of ' || id FROM orders WHERE owner_id % 40 = 0" >/dev/null &
done
wait
cq >/dev/null <<'SQL'
CREATE TABLE owners_moved AS SELECT row_number() OVER () AS i, o AS owner FROM generate_series(1, 100000) o WHERE id_gen.shard_gene(o) <= 16383 LIMIT 1000;
CREATE TABLE owners_other AS SELECT row_number() OVER () AS i, o AS owner FROM generate_series(1, 100000) o WHERE id_gen.shard_gene(o) > 16383 LIMIT 1000;
CREATE TABLE commit_log (owner bigint NOT NULL, rows_added int NOT NULL, amount_added bigint NOT NULL);
INSERT INTO orders (owner_id, amount, note) SELECT owner, 0, 'counter' FROM owners_moved UNION ALL SELECT owner, 0, 'counter' FROM owners_other;
SQL
moved_rows=$(sq_local 1 -c "SELECT count(*) FROM orders WHERE id < id_gen.gene_first_id(16384)")
audit_moved=$(sq_local 1 -c "SELECT count(*) FROM audit WHERE id < id_gen.gene_first_id(16384)")
assert_gt "$moved_rows" 199999 "rows in the genes to move (loaded in $(since "$t0") s)"

# (b) the move under load --------------------------------------------------------------------
for kind in moved other; do
  cat > "$C/$kind.sql" <<SQL
\set i random(1, 1000)
\set a random(1, 100)
BEGIN;
SELECT owner AS o FROM owners_$kind WHERE i = :i \gset
INSERT INTO orders (owner_id, amount, note) VALUES (:o, :a, 'ins');
UPDATE orders SET amount = amount + :a WHERE owner_id = :o AND note = 'counter' AND id BETWEEN id_gen.owner_first_id(:o::bigint) AND id_gen.owner_last_id(:o::bigint);
INSERT INTO commit_log VALUES (:o, 1, 2 * :a);
COMMIT;
SQL
  ( cd "$C" && "$PG_BIN/pgbench" -n -h "$C" -p "$CP" -U postgres -c 2 -j 2 -T 20 --max-tries=20 -l --log-prefix="$kind" \
      -f "$C/$kind.sql" postgres > "$C/pgb_$kind.log" 2>&1 ) &
done
sleep 3
t0=$(now)
cq -c "CALL id_gen.move_genes(0, 16383, 'shard_2')" > "$C/move.out" 2>&1 || fail "the move failed: $(cat "$C/move.out")"
move_s=$(since "$t0")
wait
for kind in moved other; do
  grep -q "number of failed transactions: 0" "$C/pgb_$kind.log" || fail "pgbench ($kind genes) had failures: $(grep -m3 -i error "$C/pgb_$kind.log")"
done
pass "the move of genes 0 .. 16383 ($moved_rows rows) took $move_s s under load; no client transaction failed"
assert_eq "$(cq -c "SELECT phase FROM id_gen.moves")" "done" "the move is done"
assert_eq "$(routes)" "0-16383@shard_2,16384-32767@shard_1,32768-49151@shard_2,49152-65535@shard_2" "the routes moved"
assert_eq "$(cq -c "SELECT bool_and(in_step) FROM id_gen.distribution")" "t" "partitions and placements are in step"
assert_eq "$(leftovers)" "0/0/0/0/0/0" "no slot, publication or subscription is left on either shard"
assert_eq "$(sq_local 1 -c "SELECT count(*) FROM orders WHERE id < id_gen.gene_first_id(16384)")" "0" "shard_1 holds no row of the moved genes"
assert_eq "$(sq_local 1 -c "SELECT count(*) FROM audit WHERE id < id_gen.gene_first_id(16384)")/$(sq_local 2 -c "SELECT count(*) FROM audit WHERE id < id_gen.gene_first_id(16384)")" \
  "0/$audit_moved" "the second distributed table moved along ($audit_moved rows)"
assert_eq "$(sq 1 -c "SELECT count(*) FROM pg_class WHERE relname LIKE 'orders_g0_16383%' OR relname LIKE 'audit_g0_16383%'")" "0" "shard_1 dropped its detached partitions"
# Every owner the clients wrote: rows and amounts equal what the clients logged.
for i in 1 2; do
  sq $i -c "COPY (SELECT owner_id, count(*), sum(amount) FROM orders WHERE note IN ('ins', 'counter') GROUP BY owner_id) TO STDOUT"
done | cq -c "CREATE TABLE seen (owner bigint, n bigint, amount bigint)" -c "COPY seen FROM STDIN" >/dev/null
bad=$(cq -c "WITH want AS (SELECT owner, 1 + coalesce(sum(rows_added), 0) AS n, coalesce(sum(amount_added), 0) AS amount
                          FROM (SELECT owner FROM owners_moved UNION ALL SELECT owner FROM owners_other) o
                          LEFT JOIN commit_log l USING (owner) GROUP BY owner),
                  got AS (SELECT owner, sum(n) AS n, sum(amount) AS amount FROM seen GROUP BY owner)
             SELECT count(*) FROM want w FULL JOIN got g USING (owner)
             WHERE w.n IS DISTINCT FROM g.n OR w.amount IS DISTINCT FROM g.amount")
committed=$(cq -c "SELECT count(*) FROM commit_log")
assert_eq "$bad" "0" "all 2000 owners: rows and amounts match the $committed committed transactions (none lost, none twice)"
assert_eq "$(cq -c "SELECT count(*) FROM seen s1 JOIN seen s2 ON s1.owner = s2.owner AND s1.ctid < s2.ctid")" "0" "no owner's rows sit on two shards"
assert_eq "$(( $(sq 1 -c "SELECT count(*) FROM orders WHERE note = 'load'") + $(sq 2 -c "SELECT count(*) FROM orders WHERE note = 'load'") ))" \
  "800000" "all 800000 loaded rows are still there, once"
# Latencies from the per-transaction logs (column 3: microseconds; 5, 6: end time).
fence_ms=$(cq -c "SELECT fence_ms FROM id_gen.moves")
read -r fs fe < <(cq -F ' ' -c "SELECT extract(epoch FROM fence_started_at), extract(epoch FROM fence_ended_at) FROM id_gen.shard_moves")
lat() { # lat KIND [window]: p50 p99 max in ms; with window, only transactions that overlapped the fence
  cat "$C"/"$1".* | awk -v fs="$fs" -v fe="$fe" -v w="${2:-}" '{ end = $5 + $6 / 1e6; start = end - $3 / 1e6;
      if (w == "" || (start <= fe && end >= fs)) print $3 / 1000 }' | sort -n |
    awk '{ v[NR] = $1 } END { if (NR == 0) { print "0 0 0 0"; exit } printf "%.1f %.1f %.1f %d\n", v[int(NR * 0.5) + (NR * 0.5 > int(NR * 0.5))], v[int(NR * 0.99) + (NR * 0.99 > int(NR * 0.99))], v[NR], NR }'
}
read -r mp50 mp99 mmax mn < <(lat moved)
read -r op50 op99 omax on < <(lat other)
read -r fop50 fop99 fomax fon < <(lat other window)
read -r fmp50 fmp99 fmmax fmn < <(lat moved window)
echo "  fence ${fence_ms} ms; moved genes: p50 ${mp50} p99 ${mp99} max ${mmax} ms over ${mn} txns (during the fence: max ${fmmax} over ${fmn});" \
     "other genes: p50 ${op50} p99 ${op99} max ${omax} ms over ${on} txns (during the fence: max ${fomax} over ${fon})" >&2
assert_lt "${mmax%.*}" 1000 "writes of the moved genes paused less than 1 s (max ${mmax} ms)"
assert_gt "$fon" 0 "writes of other genes overlapped the fence"
assert_lt "${fomax%.*}" 100 "writes of other genes that overlapped the fence took less than 100 ms (max ${fomax} ms over ${fon})"
# Throughput against a plain COPY of the same rows between the same two servers (into a
# table with the same primary key, as the subscription's target has).
sq 1 -c "CREATE TABLE copy_probe (LIKE orders INCLUDING INDEXES)" >/dev/null
t0=$(now)
sq_local 2 -c "COPY (SELECT * FROM orders WHERE id < id_gen.gene_first_id(16384)) TO STDOUT" | sq 1 -c "COPY copy_probe FROM STDIN" >/dev/null
copy_s=$(since "$t0")
sq 1 -c "DROP TABLE copy_probe" >/dev/null
echo "  move: $moved_rows rows in $move_s s under load = $(awk -v n="$moved_rows" -v s="$move_s" 'BEGIN { printf "%d", n / s }') rows/s; plain COPY of the same rows between the shards: $copy_s s = $(awk -v n="$moved_rows" -v s="$copy_s" 'BEGIN { printf "%d", n / s }') rows/s" >&2

# (c) the target dies while the rows are copied ----------------------------------------------
before1=$(shard_state 1); before2=$(shard_state 2); routes_before=$(routes)
cq -c "CALL id_gen.move_genes(16384, 32767, 'shard_2')" > "$C/move_c.out" 2>&1 &
MOVE=$!
for _ in $(seq 200); do [ "$(cq -c "SELECT count(*) FROM id_gen.moves WHERE phase = 'copying'")" = 1 ] && break; sleep 0.05; done
assert_eq "$(cq -c "SELECT phase FROM id_gen.moves WHERE lower_gene = 16384")" "copying" "a second move is copying"
E2E_DIR=$(shard_dir 2) kill9_cluster
wait $MOVE && fail "the move survived the death of its target: $(cat "$C/move_c.out")"
grep -q "failed while copying" "$C/move_c.out" || fail "not the expected failure: $(cat "$C/move_c.out")"
pass "the target killed mid-copy: the move failed ($(grep -m1 ERROR "$C/move_c.out" | cut -c1-120)...)"
assert_eq "$(cq -c "SELECT phase FROM id_gen.moves WHERE lower_gene = 16384")" "failed" "the move is marked failed (the target's copies wait for abort_move)"
assert_eq "$(sq 1 -c "SELECT count(*) FROM pg_replication_slots")/$(sq 1 -c "SELECT count(*) FROM pg_publication")" "0/0" "no replication slot or publication is left on the source"
assert_eq "$(routes)" "$routes_before" "the routes are unchanged"
assert_eq "$(shard_state 1)" "$before1" "the source's rows are unchanged"
cluster_up "$(shard_dir 2)" 2>/dev/null
cq -c "CALL id_gen.abort_move($(cq -c "SELECT move_id FROM id_gen.moves WHERE lower_gene = 16384"))" >/dev/null
assert_eq "$(cq -c "SELECT phase FROM id_gen.moves WHERE lower_gene = 16384")" "aborted" "with the target back, abort_move finishes the clean-up"
assert_eq "$(leftovers)" "0/0/0/0/0/0" "no slot, publication or subscription anywhere"
assert_eq "$(shard_state 2)/$(sq 2 -c "SELECT count(*) FROM pg_class WHERE relname = 'orders_g16384_32767'")" "$before2/0" "the target is as before the move"

# (d) the coordinator's session dies mid-move: abort, then resume (a second session is refused
#     while the first runs) -------------------------------------------------------------------
for round in abort resume; do
  cq -c "CALL id_gen.move_genes(16384, 32767, 'shard_2')" > "$C/move_d.out" 2>&1 &
  MOVE=$!
  for _ in $(seq 200); do [ "$(cq -c "SELECT count(*) FROM id_gen.moves WHERE lower_gene = 16384 AND phase = 'copying'")" = 1 ] && break; sleep 0.05; done
  if [ $round = abort ]; then
    out=$(cq -v VERBOSITY=verbose -c "CALL id_gen.move_genes(16384, 32767, 'shard_2')" 2>&1) && fail "a second session ran the same move"
    grep -q "ERROR:  55006: id_gen: move [0-9]* is running in session" <<<"$out" || fail "not the expected refusal: $out"
    pass "a second session for the running move: 55006"
  fi
  cq -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'CALL id_gen.move_genes%'" >/dev/null
  wait $MOVE && fail "the terminated move finished"
  id=$(cq -c "SELECT max(move_id) FROM id_gen.moves")
  if [ $round = abort ]; then
    assert_eq "$(cq -c "SELECT phase FROM id_gen.moves WHERE move_id = $id")" "copying" "a terminated session leaves its move in its phase"
    assert_eq "$(state_of cq -c "SELECT id_gen.set_route(16383, 'shard_1')")/$(state_of cq -c "CALL id_gen.move_genes(49152, 65535, 'shard_1')")" "55006/55006" \
      "while it is unfinished, set_route and other moves are refused (55006)"
    cq -c "CALL id_gen.abort_move($id)" >/dev/null
    assert_eq "$(cq -c "SELECT phase FROM id_gen.moves WHERE move_id = $id")/$(leftovers)/$(routes)" "aborted/0/0/0/0/0/0/$routes_before"       "abort_move rolled it back: nothing left, routes unchanged"
    assert_eq "$(shard_state 1)/$(shard_state 2)" "$before1/$before2" "both shards hold what they held before"
  else
    cq -c "CALL id_gen.move_genes(16384, 32767, 'shard_2')" >/dev/null
    assert_eq "$(cq -c "SELECT phase FROM id_gen.moves WHERE move_id = $id")/$(leftovers)" "done/0/0/0/0/0/0" "the same CALL resumed the move and finished it"
  fi
done
assert_eq "$(routes)" "0-16383@shard_2,16384-32767@shard_2,32768-49151@shard_2,49152-65535@shard_2" "shard_1 is empty now (a merge)"
assert_eq "$(sq 1 -c "SELECT (SELECT count(*) FROM orders) + (SELECT count(*) FROM audit)")" "0" "shard_1 holds no rows"

# (e) split shard_2 again: routes and rows end where they were before the merge -----------------
cq -c "CALL id_gen.move_genes(16384, 32767, 'shard_1')" >/dev/null
assert_eq "$(routes)" "$routes_before" "after the split the routes are where they were before the merge"
assert_eq "$(shard_state 1)/$(shard_state 2)" "$before1/$before2" "and so is every row of both shards (count and checksum)"

# The top route range (ids up to 2^63 - 1), keeping the source's copy.
top_before=$(sq_local 2 -c "SELECT count(*) FROM orders WHERE id >= id_gen.gene_first_id(49152)")
cq -c "CALL id_gen.move_genes(49152, 65535, 'shard_1', keep_source => true)" >/dev/null
assert_eq "$(sq_local 1 -c "SELECT count(*) FROM orders WHERE id >= id_gen.gene_first_id(49152)")" "$top_before" "the top range moved to shard_1 ($top_before rows)"
kept=$(sq 2 -c "SELECT string_agg(relname, ',' ORDER BY relname) FROM pg_class WHERE relname LIKE 'id\_gen\_moved\_%' AND relkind = 'r'")
assert_eq "$(( $(sq 2 -c "SELECT count(*) FROM public.\"$(cut -d, -f1 <<<"$kept")\"") + $(sq 2 -c "SELECT count(*) FROM public.\"$(cut -d, -f2 <<<"$kept")\"") ))" \
  "$(( $(sq_local 1 -c "SELECT count(*) FROM orders WHERE id >= id_gen.gene_first_id(49152)") + $(sq_local 1 -c "SELECT count(*) FROM audit WHERE id >= id_gen.gene_first_id(49152)") ))" \
  "keep_source kept the source's detached partitions ($kept)"
cq -c "CALL id_gen.move_genes(49152, 65535, 'shard_2')" >/dev/null
for t in ${kept//,/ }; do sq 2 -c "DROP TABLE public.\"$t\"" >/dev/null; done
assert_eq "$(routes)/$(shard_state 1)/$(shard_state 2)/$(leftovers)" "$routes_before/$before1/$before2/0/0/0/0/0/0" "and back: routes, rows and no leftovers"
assert_eq "$(cq -c "SELECT count(*) FILTER (WHERE phase = 'done') || '/' || count(*) FROM id_gen.moves")" "5/7" "5 moves done, 2 aborted"

# (f) the target applies slowly at the cut-over: the first fence times out after 3 s, is
#     lifted, and the second attempt cuts over. (A replica trigger on the target delays
#     applying the first marker by 4 s.)
sq 1 >/dev/null <<'SQL'
CREATE FUNCTION public.slow_first_marker() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.marker = 1 THEN PERFORM pg_sleep(4); END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER slow_first_marker BEFORE INSERT ON id_gen.move_markers FOR EACH ROW EXECUTE FUNCTION public.slow_first_marker();
ALTER TABLE id_gen.move_markers ENABLE ALWAYS TRIGGER slow_first_marker;
SQL
range_rows=$(sq_local 2 -c "SELECT count(*) FROM orders WHERE id BETWEEN id_gen.gene_first_id(32768) AND id_gen.gene_last_id(49151)")
cq -c "CALL id_gen.move_genes(32768, 49151, 'shard_1')" >/dev/null
assert_eq "$(cq -c "SELECT phase || '/' || fence_attempts || '/' || source_fenced || '/' || (last_error IS NULL) FROM id_gen.moves WHERE lower_gene = 32768")" \
  "done/2/false/true" "a fence that timed out was lifted and the second attempt cut over"
assert_eq "$(sq_local 1 -c "SELECT count(*) FROM orders WHERE id BETWEEN id_gen.gene_first_id(32768) AND id_gen.gene_last_id(49151)")/$(leftovers)" \
  "$range_rows/0/0/0/0/0/0" "all $range_rows rows arrived; nothing is left over"
sq 1 -c "DROP TRIGGER slow_first_marker ON id_gen.move_markers" -c "DROP FUNCTION public.slow_first_marker()" >/dev/null

# (g) the source cannot let go after the flip (a reader holds its table, so DETACH times
#     out): the CALL fails with the move cut over; abort is refused; the same CALL finishes.
sq 1 -c "BEGIN" -c "LOCK TABLE ONLY orders IN ACCESS SHARE MODE" -c "SELECT pg_sleep(12)" -c "COMMIT" >/dev/null &
LOCKER=$!
sleep 0.5
cq -c "CALL id_gen.move_genes(32768, 49151, 'shard_2')" > "$C/move_g.out" 2>&1 && fail "the move finished although the source could not detach"
grep -q "ERROR:  id_gen: move [0-9]* has cut over (the target serves genes 32768 .. 49151), but cleaning up failed: canceling statement due to lock timeout" "$C/move_g.out" \
  || fail "not the expected error: $(cat "$C/move_g.out")"
id=$(cq -c "SELECT max(move_id) FROM id_gen.moves")
assert_eq "$(cq -c "SELECT phase FROM id_gen.moves WHERE move_id = $id")/$(routes)" \
  "cut_over/0-16383@shard_2,16384-32767@shard_1,32768-49151@shard_2,49152-65535@shard_2" \
  "the source timed out letting go after the flip: the move stays cut over, the routes point at the target"
assert_eq "$(state_of cq -c "CALL id_gen.abort_move($id)")" "55000" "a move that has cut over cannot be aborted"
wait $LOCKER
cq -c "CALL id_gen.move_genes(32768, 49151, 'shard_2')" >/dev/null
assert_eq "$(cq -c "SELECT phase FROM id_gen.moves WHERE move_id = $id")/$(leftovers)" "done/0/0/0/0/0/0" "the same CALL resumed from cut_over and finished"
assert_eq "$(sq_local 2 -c "SELECT count(*) FROM orders WHERE id BETWEEN id_gen.gene_first_id(32768) AND id_gen.gene_last_id(49151)")/$(sq_local 1 -c "SELECT count(*) FROM orders WHERE id BETWEEN id_gen.gene_first_id(32768) AND id_gen.gene_last_id(49151)")" \
  "$range_rows/0" "the rows are back on shard_2 only"
echo "12_move: passed"
