#!/usr/bin/env bash
# Failover that never reissues (docs/guide/sequences.md "Failover"). A primary with one synchronous
# standby (synchronous_standby_names = '*', physical slot, pg_basebackup -R):
# (2) the standby refuses next_segment_id with 25006 before promotion;
# (3) a refill worker terminated while its commit waits for the (stopped) standby
#     commits locally but publishes nothing: that range never reaches a caller;
# (1) kill -9 of the primary under load, promote the standby (which has
#     id_gen.promotion_skip_segments = 3), more load: no id twice, the promoted catalog
#     covers every value handed out, and the first reservation skipped 3 x max_step.
# (4) the same primary is the central authority of a node's sequence: the node records
#     every value through the crash; after promotion its foreign server is re-pointed
#     at the promoted central and service resumes; the promoted catalog covers every
#     value the node handed out before, and no value appears twice.
source "$(dirname "$0")/lib.sh"
S=/tmp/idg_e2e10s SP=54359
N=/tmp/idg_e2e10n NP=54357
SMALL=("shared_buffers = 32MB" "max_connections = 30")
e2e_start /tmp/idg_e2e10p 54358 "${SMALL[@]}" "wal_level = replica" "max_wal_senders = 4" \
  "synchronous_standby_names = '*'"
trap 'cluster_stop "$S"; cluster_stop "$N"; cluster_stop "$E2E_DIR"' EXIT
qs() { cpsql "$S" "$SP" -d "$1" -At -c "$2"; }
q postgres "SELECT pg_create_physical_replication_slot('standby1')" >/dev/null
# The promoted standby must not wait for standbys of its own.
standby_create "$E2E_DIR" "$E2E_PORT" "$S" "$SP" standby1 "${SMALL[@]}" \
  "synchronous_standby_names = ''" "id_gen.promotion_skip_segments = 3"
for _ in $(seq 100); do
  [ "$(q postgres "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'")" = 1 ] && break
  sleep 0.1
done
assert_eq "$(q postgres "SELECT sync_state FROM pg_stat_replication")" "sync" "the standby replicates synchronously"
cpsql "$E2E_DIR" "$E2E_PORT" <<'SQL' >/dev/null
CREATE EXTENSION id_gen;
SELECT id_gen.create_sequence('k', step => 50, max_step => 1000);
SELECT id_gen.create_sequence('f', step => 10, min_step => 10, max_step => 10, preload_threshold => 0);
CREATE TABLE kt (id bigint PRIMARY KEY DEFAULT id_gen.next_segment_id('k'), at timestamptz DEFAULT now());
SQL

# (2) Before promotion the standby refuses (replay first).
for _ in $(seq 100); do [ "$(qs postgres "SELECT count(*) FROM pg_extension WHERE extname = 'id_gen'")" = 1 ] && break; sleep 0.1; done
refused=$(cpsql "$S" "$SP" -v VERBOSITY=verbose -At -c "SELECT id_gen.next_segment_id('k')" 2>&1 || true)
case "$refused" in *25006*) pass "the standby refuses with 25006";; *) fail "the standby answered: $refused";; esac

# (3) Terminate the worker while its commit waits for the stopped standby.
q postgres "SELECT id_gen.next_segment_id('f')" >/dev/null
sleep 1.2 # let a preloaded standby segment land, if any
m0=$(q postgres "SELECT max_id FROM id_gen.sequences WHERE name = 'f'")
cluster_stop "$S"
{ echo "SET id_gen.refill_timeout = '60s';"; for _ in $(seq 30); do echo "SELECT id_gen.next_segment_id('f');"; done; } > "$E2E_DIR/f.sql"
cpsql "$E2E_DIR" "$E2E_PORT" -At -f "$E2E_DIR/f.sql" > "$E2E_DIR/f.out" 2>"$E2E_DIR/f.err" &
CLIENT=$!
wpid=
for _ in $(seq 100); do
  wpid=$(q postgres "SELECT pid FROM pg_stat_activity WHERE backend_type = 'id_gen refill worker' AND wait_event = 'SyncRep'")
  [ -n "$wpid" ] && break; sleep 0.1
done
[ -n "$wpid" ] || fail "the refill worker never waited for the synchronous standby"
pass "the refill worker (pid $wpid) waits in SyncRep"
q postgres "SELECT pg_terminate_backend($wpid)" >/dev/null
for _ in $(seq 50); do kill -0 "$wpid" 2>/dev/null || break; sleep 0.1; done
m1=$(q postgres "SELECT max_id FROM id_gen.sequences WHERE name = 'f'")
assert_gt "$m1" "$m0" "the terminated reservation committed locally (max_id $m0 -> $m1)"
err=$(q postgres "SELECT last_error FROM id_gen.status WHERE sequence = 'f'")
case "$err" in *terminated*) pass "status.last_error: $err";; *) fail "last_error after the termination: '$err'";; esac
grep -q "refused to publish: the refill worker was terminated" "$E2E_DIR/server.log" || fail "no log line for the refused publish"
pass "server log names the refused publish"
cluster_up "$S"   # a relaunched worker's reservation is confirmed now
wait $CLIENT || fail "the waiting client failed: $(cat "$E2E_DIR/f.err")"
got=$(wc -l < "$E2E_DIR/f.out")
assert_eq "$got" 30 "the waiting client got its 30 values once the standby was back"
in_hole=$(awk -v a="$m0" -v b="$m1" '$1 > a && $1 <= b' "$E2E_DIR/f.out" | wc -l)
assert_eq "$in_hole" 0 "no value of the terminated reservation ($((m0 + 1))..$m1) was handed out"

# (4) A node whose sequence 'c' reserves on this primary (its central authority).
cpsql "$E2E_DIR" "$E2E_PORT" <<'SQL' >/dev/null
SELECT id_gen.create_sequence('c', step => 50, max_step => 200);
CREATE ROLE id_authority LOGIN;
GRANT UPDATE (max_id) ON id_gen.sequences TO id_authority;
ALTER ROLE id_authority SET synchronous_commit = on;
SQL
cluster_start "$N" "$NP" "${SMALL[@]}"
cpsql "$N" "$NP" >/dev/null <<SQL
CREATE EXTENSION id_gen;
CREATE EXTENSION postgres_fdw;
CREATE SERVER central FOREIGN DATA WRAPPER postgres_fdw
  OPTIONS (host '$E2E_DIR', port '$E2E_PORT', dbname 'postgres', connect_timeout '2', options '-c synchronous_commit=on');
CREATE USER MAPPING FOR PUBLIC SERVER central OPTIONS (user 'id_authority');
SELECT id_gen.create_sequence('c', step => 50, max_step => 200, authority => 'central');
SQL
# The node's recorder: 20 values per call, errors (the central away) logged and retried.
( while [ ! -f "$N/stop" ]; do
    cpsql "$N" "$NP" -At -c "SET id_gen.refill_timeout = '1s'" -c "SELECT id_gen.next_segment_id('c') FROM generate_series(1, 20)" 2>>"$N/errors" || sleep 0.2
  done ) > "$N/ids.txt" &
NODE_REC=$!
sleep 1

# (1) kill -9 of the primary under load, then promote the standby.
kill9_under_load 4
handed_max=$HANDED_MAX
runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$S/data" -w -t 60 promote >/dev/null
rows=$(qs postgres "SELECT count(*) FROM kt")
assert_gt "$rows" 0 "rows replicated before the crash"
table_max=$(qs postgres "SELECT max(id) FROM kt")
prev_max=$(( handed_max > table_max ? handed_max : table_max ))
promoted_max_id=$(qs postgres "SELECT max_id FROM id_gen.sequences WHERE name = 'k'")
assert_eq "$(( promoted_max_id >= prev_max ))" 1 "the promoted catalog (max_id $promoted_max_id) covers every value handed out ($prev_max)"
new_min=$(qs postgres "SELECT min(id_gen.next_segment_id('k')) FROM generate_series(1, 500)")
assert_gt "$new_min" "$(( promoted_max_id + 3 * 1000 ))" "the first reservation after promotion skipped 3 x max_step"
"$PG_BIN/pgbench" -n -h "$S" -p "$SP" -U postgres -c 4 -j 2 -t 300 -f "$E2E_DIR/ins.sql" postgres > "$E2E_DIR/pgb2.log" 2>&1 \
  || fail "inserts on the promoted server failed"
new_rows=$(qs postgres "SELECT count(*) FROM kt")
assert_eq "$(( new_rows - rows ))" 1200 "rows inserted on the promoted server"
assert_eq "$(qs postgres "SELECT count(*) = count(DISTINCT id) FROM kt")" "t" "no duplicate ids across the failover"
assert_eq "$(qs postgres "SELECT count(*) FROM kt WHERE id > $prev_max")" 1200 \
  "every row inserted after promotion lies above every value handed out before the crash"
grep -q "skipped 3 x max_step" "$S/server.log" || fail "no log line for the promotion skip"
pass "the promoted server logged the skip once"
assert_eq "$(grep -c "skipped 3 x max_step" "$S/server.log")" 1 "the skip was applied once"

# (4) The node's central failed over with it: re-point the node's server, keep going.
c_max_at_promotion=$(qs postgres "SELECT max_id FROM id_gen.sequences WHERE name = 'c'")
node_max_before=$(sort -n "$N/ids.txt" | tail -1)
cpsql "$N" "$NP" -c "ALTER SERVER central OPTIONS (SET host '$S', SET port '$SP')" >/dev/null
for _ in $(seq 100); do [ "$(sort -n "$N/ids.txt" | tail -1)" -gt "$c_max_at_promotion" ] && break; sleep 0.1; done
touch "$N/stop"; wait $NODE_REC || true
assert_gt "$(sort -n "$N/ids.txt" | tail -1)" "$c_max_at_promotion" \
  "the node serves values reserved on the promoted central after its server was re-pointed"
assert_eq "$(( c_max_at_promotion >= node_max_before ))" 1 \
  "the promoted central's max_id ($c_max_at_promotion) covers every value the node handed out before ($node_max_before)"
assert_eq "$(sort -n "$N/ids.txt" | uniq -d | wc -l)" "0" "no value of the node appears twice ($(wc -l < "$N/ids.txt") values across the failover)"
assert_eq "$(grep ERROR "$N/errors" | grep -vc 'its authority "central" failed' || true)" "0" \
  "the node's only errors ($(grep -c ERROR "$N/errors" || true)) were the buffer running out, naming the authority"
echo "10_failover: passed"
