#!/usr/bin/env bash
# One ID space for many servers: a central server (the ID database) and 3 nodes whose
# sequences reserve their segments there through postgres_fdw (docs/guide/sequences.md "One ID space for
# many servers").
# (a) argument checks: unknown server 42704, a server of another FDW 22023, a sequence
#     the central lacks 42704, an unreachable central only a WARNING.
# (b) pgbench on the 3 nodes at once on the same sequences, plus exact bulk ranges:
#     every id of every node gathered on the central, zero duplicates.
# (c) the central stopped for 10 s under steady load, buffer_seconds covering the gap:
#     zero errors on every node.
# (d) the central stopped for longer with a small fixed step: a clear 55000 naming the
#     authority after id_gen.refill_timeout, id_gen.status.last_error set; the central
#     back: service resumes within seconds, still no duplicates.
source "$(dirname "$0")/lib.sh"
C=/tmp/idg_e2e9c CP=54390
node_dir() { echo "/tmp/idg_e2e9n$1"; }
node_port() { echo $((CP + $1)); }
SMALL=("shared_buffers = 32MB" "max_connections = 30")
trap 'cluster_stop "$C"; for i in 1 2 3; do cluster_stop "$(node_dir $i)"; done' EXIT

nq() { local i=$1; shift; cpsql "$(node_dir "$i")" "$(node_port "$i")" -At "$@"; }  # nq NODE psql-args
cq() { cpsql "$C" "$CP" -At "$@"; }
# sqlstate NODE SQL: the SQLSTATE of the statement's ERROR (empty if it succeeded).
sqlstate() { nq "$1" -v VERBOSITY=verbose -c "$2" 2>&1 >/dev/null | sed -n 's/^ERROR:  \([0-9A-Z]\{5\}\): .*/\1/p' | head -1; }
pgb() { local i=$1; shift; "$PG_BIN/pgbench" -n -h "$(node_dir "$i")" -p "$(node_port "$i")" -U postgres "$@" postgres; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

cluster_start "$C" "$CP" "${SMALL[@]}"
cq >/dev/null <<'SQL'
CREATE EXTENSION id_gen;
SELECT id_gen.create_sequence('orders');
SELECT id_gen.create_sequence('steady');
SELECT id_gen.create_sequence('tight');
SELECT id_gen.create_sequence('moved');
-- The role the nodes reserve as: it may move max_id and nothing else (README setup).
CREATE ROLE id_authority LOGIN;
GRANT UPDATE (max_id) ON id_gen.sequences TO id_authority;
ALTER ROLE id_authority SET synchronous_commit = on;
CREATE TABLE all_ids (node int NOT NULL, seq text NOT NULL, id bigint NOT NULL);
SQL
for i in 1 2 3; do
  cluster_start "$(node_dir $i)" "$(node_port $i)" "${SMALL[@]}"
  nq $i >/dev/null <<SQL
CREATE EXTENSION id_gen;
CREATE EXTENSION postgres_fdw;
CREATE SERVER central FOREIGN DATA WRAPPER postgres_fdw
  OPTIONS (host '$C', port '$CP', dbname 'postgres', connect_timeout '2', options '-c synchronous_commit=on');
CREATE USER MAPPING FOR PUBLIC SERVER central OPTIONS (user 'id_authority');
-- max_step 5000: many reservations (contention on the central row), bulk requests above it are exact.
SELECT id_gen.create_sequence('orders', step => 100, max_step => 5000, authority => 'central');
SELECT id_gen.create_sequence('steady', step => 1000, buffer_seconds => 15, authority => 'central');
SELECT id_gen.create_sequence('tight', step => 50, min_step => 50, max_step => 50, authority => 'central');
CREATE TABLE ids (seq text NOT NULL, id bigint NOT NULL, PRIMARY KEY (seq, id));
SQL
done
assert_eq "$(nq 1 -c "SELECT string_agg(name || '=' || coalesce(authority, 'local'), ',' ORDER BY name) FROM id_gen.sequences")" \
  "orders=central,steady=central,tight=central" "the nodes' sequences have the central authority"

# (a) argument checks ---------------------------------------------------------------------
assert_eq "$(sqlstate 1 "SELECT id_gen.create_sequence('x', authority => 'nosuch')")" "42704" "an unknown server is 42704"
nq 1 -c "CREATE FOREIGN DATA WRAPPER idg_dummy" -c "CREATE SERVER dummy FOREIGN DATA WRAPPER idg_dummy" >/dev/null
assert_eq "$(sqlstate 1 "SELECT id_gen.create_sequence('x', authority => 'dummy')")" "22023" "a server of another FDW is 22023"
assert_eq "$(sqlstate 1 "SELECT id_gen.create_sequence('nowhere', authority => 'central')")" "42704" "a sequence the central lacks is 42704"
assert_eq "$(nq 1 -c "SELECT count(*) FROM id_gen.sequences WHERE name IN ('x', 'nowhere')")" "0" "refused sequences were not created"
nq 1 >/dev/null <<'SQL'
CREATE SERVER down FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '/tmp/idg_e2e9_nothing_here', port '1', dbname 'postgres', connect_timeout '2');
CREATE USER MAPPING FOR PUBLIC SERVER down OPTIONS (user 'postgres');
SQL
warned=$(nq 1 -c "SELECT id_gen.create_sequence('lonely', authority => 'down')" 2>&1)
grep -q 'WARNING:  id_gen: authority "down" cannot be reached now' <<<"$warned" || fail "no WARNING for an unreachable authority: $warned"
assert_eq "$(nq 1 -c "SELECT authority FROM id_gen.sequences WHERE name = 'lonely'")" "down" "an unreachable authority only warns; the sequence exists"
assert_eq "$(nq 1 -c "SELECT id_gen.alter_sequence('lonely', authority => 'local')" -c "SELECT coalesce(authority, 'local') FROM id_gen.sequences WHERE name = 'lonely'" | tail -1)" \
  "local" "alter_sequence(authority => 'local') makes it local again"
assert_eq "$(nq 1 -c "SELECT id_gen.next_segment_id('lonely')")" "1" "a local sequence again serves from its own catalog"
# Local -> central: the central moves above what this node handed out before.
nq 1 -c "SELECT id_gen.create_sequence('moved', start => 1000000, step => 100, max_step => 100)" \
  -c "INSERT INTO ids SELECT 'moved', id_gen.next_segment_id('moved') FROM generate_series(1, 150)" \
  -c "SELECT id_gen.alter_sequence('moved', authority => 'central')" \
  -c "INSERT INTO ids SELECT 'moved', id_gen.next_segment_id('moved') FROM generate_series(1, 500)" >/dev/null
assert_gt "$(cq -c "SELECT max_id FROM id_gen.sequences WHERE name = 'moved'")" "1000149" \
  "after alter_sequence(authority => 'central') the central continues above the node's own values (no repeat: the node's primary key held)"

# (b) three nodes at once -----------------------------------------------------------------
echo "INSERT INTO ids VALUES ('orders', id_gen.next_segment_id('orders'));" > /tmp/idg_e2e9_orders.sql
t0=$(now)
for i in 1 2 3; do
  pgb $i -c 2 -j 1 -T 4 -f /tmp/idg_e2e9_orders.sql > "$C/pgb_orders_$i.log" 2>&1 &
done
wait
for i in 1 2 3; do
  grep -q "number of failed transactions: 0" "$C/pgb_orders_$i.log" || fail "node $i: pgbench failed: $(tail -5 "$C/pgb_orders_$i.log")"
  # An exact bulk range (more than max_step) reserved on the central as well.
  nq $i -c "INSERT INTO ids SELECT 'orders', g FROM id_gen.next_segment_ranges('orders', 20000) r, generate_series(r.first_id, r.last_id) g" >/dev/null
done
pass "pgbench on 3 nodes, 2 clients each, 4 s, no failed transaction; a bulk range of 20000 on each ($(since "$t0") s)"
assert_eq "$(nq 1 -c "SELECT count(*) FROM id_gen.next_segment_ranges('orders', 20000)")" "1" "a bulk request above the segment size is one exact run"
refills=$(nq 1 -c "SELECT refills FROM id_gen.status WHERE sequence = 'orders'")
assert_gt "$refills" "2" "node 1 reserved several segments on the central"

# (c) the central away for 10 s under steady load -----------------------------------------
echo "INSERT INTO ids VALUES ('steady', id_gen.next_segment_id('steady'));" > /tmp/idg_e2e9_steady.sql
for i in 1 2 3; do
  pgb $i -c 1 -j 1 -R 300 -T 20 -f /tmp/idg_e2e9_steady.sql > "$C/pgb_steady_$i.log" 2>&1 &
done
# Wait until every node sizes its segments from the rate (300/s x 15 s = 4500).
for _ in $(seq 40); do
  ready=$(for i in 1 2 3; do nq $i -c "SELECT count(*) FROM id_gen.status WHERE sequence = 'steady' AND step >= 3000 AND standby_ready"; done | awk "{ s += \$1 } END { print s }")
  [ "$ready" = 3 ] && break
  sleep 0.25
done
assert_eq "$ready" "3" "every node holds a rate-sized standby segment before the outage"
t0=$(now)
cluster_stop "$C"
sleep 10
cluster_up "$C"
pass "the central was away for $(since "$t0") s"
wait
for i in 1 2 3; do
  grep -q "number of failed transactions: 0" "$C/pgb_steady_$i.log" || fail "node $i: errors during the outage: $(grep -m3 ERROR "$C/pgb_steady_$i.log")"
done
pass "300 inserts/s on each of 3 nodes through a 10 s outage of the central: zero errors"

# (d) the central away for longer than the buffer -----------------------------------------
for i in 1 2 3; do nq $i -c "INSERT INTO ids SELECT 'tight', id_gen.next_segment_id('tight') FROM generate_series(1, 300)" >/dev/null; done
cluster_stop "$C"
t0=$(now)
if out=$(nq 1 -v VERBOSITY=verbose -c "SET id_gen.refill_timeout = '2s'" \
    -c "INSERT INTO ids SELECT 'tight', id_gen.next_segment_id('tight') FROM generate_series(1, 1000)" 2>&1); then
  fail "1000 values with a 50-value step while the central is down succeeded"
fi
took=$(since "$t0")
grep -q '^ERROR:  55000: id_gen: no segment for sequence "tight" arrived within 2000 ms: its authority "central" failed: could not connect' <<<"$out" \
  || fail "not the expected 55000 naming the authority: $out"
pass "the buffer ran out: 55000 naming the authority and its error after ${took} s"
assert_lt "${took%.*}" "6" "the error came after about id_gen.refill_timeout"
assert_eq "$(nq 1 -c "SELECT authority || ': ' || (last_error LIKE 'could not connect to server \"central\"%') || ' ' || (last_error_at > now() - interval '10 s') FROM id_gen.status WHERE sequence = 'tight'")" \
  "central: true true" "id_gen.status shows the authority, its last error and when"
cluster_up "$C"
t0=$(now)
ok=
for _ in $(seq 50); do
  if nq 1 -c "SET id_gen.refill_timeout = '1s'" -c "INSERT INTO ids SELECT 'tight', id_gen.next_segment_id('tight') FROM generate_series(1, 200)" >/dev/null 2>&1; then ok=1; break; fi
  sleep 0.2
done
[ -n "$ok" ] || fail "service did not resume within 10 s of the central's return"
took=$(since "$t0")
pass "service resumed ${took} s after the central's return"
assert_lt "${took%.*}" "8" "service resumes within seconds"
assert_eq "$(nq 1 -c "SELECT coalesce(last_error, 'none') FROM id_gen.status WHERE sequence = 'tight'")" "none" "a successful reservation clears the last error"
for i in 2 3; do nq $i -c "INSERT INTO ids SELECT 'tight', id_gen.next_segment_id('tight') FROM generate_series(1, 300)" >/dev/null; done
failures=$(grep -c 'reservation of "tight" from authority "central" failed (retrying every 200 ms)' "$(node_dir 1)/server.log" || true)
assert_eq "$failures" "1" "the worker logged the repeated failure once"
grep -q 'authority "central" serves "tight" again' "$(node_dir 1)/server.log" || fail "the worker did not log the recovery"
pass "the worker logged the recovery"

# All ids of all nodes in one place ---------------------------------------------------------
for i in 1 2 3; do
  nq $i -c "COPY (SELECT $i, seq, id FROM ids) TO STDOUT" | cq -c "COPY all_ids FROM STDIN"
done
total=$(cq -c "SELECT count(*) FROM all_ids")
assert_gt "$total" "60000" "ids gathered from the nodes"
assert_eq "$(cq -c "SELECT count(DISTINCT node) FROM all_ids WHERE seq = 'tight'")" "3" "every node took values of the same sequence"
assert_eq "$(cq -c "SELECT count(*) - count(DISTINCT (seq, id)) FROM all_ids")" "0" "zero duplicates over $total ids of 3 nodes"
assert_eq "$(cq -c "SELECT bool_and(a.id <= s.max_id) FROM all_ids a JOIN id_gen.sequences s ON s.name = a.seq")" "t" \
  "the central's high-water mark covers every id handed out"
echo "09_authority: passed"
