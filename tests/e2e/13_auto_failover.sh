#!/usr/bin/env bash
# versions: 15
# The central authority as a pg_auto_failover formation (docs/guide/sequences.md "Automatic failover of the
# central authority"): a monitor, a primary c1 and a synchronous secondary c2, all on
# loopback, run by pg_autoctl as the postgres OS user. Two nodes reserve their segments of
# 'k' (50-value segments: the buffer runs dry within a second) and 'roomy' (20000-value
# segments: the buffer outlasts a failover) on the central through a foreign server with
# host '127.0.0.1,127.0.0.1' port 'c1,c2' target_session_attrs 'read-write'. Under load
# from both nodes (every value handed out and every failed call recorded on the node, with
# its time), and with nobody touching nodes or formation afterwards:
# 1. c1's host dies: kill -9 of its pg_autoctl processes, its postmaster and all children.
#    The monitor promotes c2; both nodes serve values reserved on c2 within 60 s; every
#    value handed out before c2 left recovery lies at or below c2's max_id as replayed at
#    the crash (synchronous replication lost no reservation).
#    c1's pg_autoctl is started again: it rejoins as c2's synchronous secondary.
# 2. c2's postmaster and its children die (kill -9), its pg_autoctl lives: it restarts
#    PostgreSQL in place, and the monitor also fails over to c1 if the keeper reported
#    PostgreSQL down first (both happen; the test accepts either and prints which). Both
#    nodes reserve again within 60 s.
# Across both: no value of either sequence handed out twice; the final central's max_id
# covers every value; the only failed calls are 55000 of 'k' during the two outages (in
# the host loss all naming the authority and its connection failure); 'roomy' had none.
# Prints the monitor's events and the outage each node's clients saw in each case (longest
# gap between successful calls, failed calls by SQLSTATE and message).
source "$(dirname "$0")/lib.sh"
F=/tmp/idg_e2e13                  # formation: PGDATAs, sockets, pg_autoctl config/state, logs
MP=55300 C1P=55301 C2P=55302      # monitor, first primary, first secondary
N1=/tmp/idg_e2e13n1 N1P=55311
N2=/tmp/idg_e2e13n2 N2P=55312
SMALL=("shared_buffers = 32MB" "max_connections = 30")

# pg_auto_failover is packaged for bookworm; ensure_toolchain installs it, this covers a
# test run on its own.
if ! command -v pg_autoctl >/dev/null || [ ! -f "$PG_BIN/../lib/pgautofailover.so" ]; then
  log "installing pg_auto_failover"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15-auto-failover pg-auto-failover-cli >/dev/null
fi

ac() { runuser -u postgres -- env XDG_CONFIG_HOME="$F/config" XDG_DATA_HOME="$F/share" \
  XDG_RUNTIME_DIR="$F/run" PGHOST="$F" pg_autoctl "$@"; }
# ac_run NAME: `pg_autoctl run` of $F/NAME in a session of its own (its id in $F/NAME.sid):
# the supervisor, its keeper, the postmaster and every backend share that session.
ac_run() {
  setsid runuser -u postgres -- env XDG_CONFIG_HOME="$F/config" XDG_DATA_HOME="$F/share" \
    XDG_RUNTIME_DIR="$F/run" PGHOST="$F" pg_autoctl run --pgdata "$F/$1" >> "$F/$1.log" 2>&1 &
  echo $! > "$F/$1.sid"
  disown   # no "Killed" job notice when the test kills it
}
session_pids() { [ -f "$F/$1.sid" ] && pgrep -s "$(cat "$F/$1.sid")" || true; }
# A PostgreSQL instance for pg_autoctl to adopt: small, socket in $F. postgresql.auto.conf
# is read after pg_autoctl's include (it would size shared_buffers from the machine's RAM)
# and pg_basebackup copies it to the secondary.
instance() { # instance NAME [settings...]
  local name=$1; shift
  runuser -u postgres -- "$PG_BIN/initdb" -D "$F/$name" -A trust -U postgres --no-sync >/dev/null
  {
    echo "shared_buffers = '32MB'"; echo "max_connections = 30"
    echo "unix_socket_directories = '$F'"; echo "lc_messages = 'C'"
    for line in "$@"; do echo "$line"; done
  } >> "$F/$name/postgresql.auto.conf"
}
formation_stop() {
  local n pids
  for n in c1 c2 mon; do [ -f "$F/$n.sid" ] && ac stop --pgdata "$F/$n" >/dev/null 2>&1 || true; done
  for _ in $(seq 100); do
    pids=$(for n in c1 c2 mon; do session_pids $n; done)
    [ -z "$pids" ] && break; sleep 0.1
  done
  for n in c1 c2 mon; do
    pids=$(session_pids $n)
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null || true
    rm -f "$F/$n.sid"
  done
}
cleanup() {
  for p in ${CLIENTS:-}; do kill "$p" 2>/dev/null || true; done
  cluster_stop "$N1"; cluster_stop "$N2"
  formation_stop
}
[ -d "$F" ] && formation_stop   # leftovers of an interrupted run
trap cleanup EXIT

mq() { cpsql "$F" "$MP" -d pg_auto_failover -At -c "$1"; }
c1q() { cpsql "$F" "$C1P" -At -c "$1"; }
c2q() { cpsql "$F" "$C2P" -At -c "$1"; }
nq() { local d=$1 p=$2; shift 2; cpsql "$d" "$p" -At "$@"; }
# node_state NAME: the state the node last reported to the monitor
node_state() { mq "SELECT reportedstate FROM pgautofailover.node WHERE nodename = '$1'"; }

# The formation ---------------------------------------------------------------------------
rm -rf "$F"; mkdir -p "$F/run"; chmod 700 "$F/run"; chown -R postgres:postgres "$F"
# Failover timers, shortened for the test (defaults: a node is unhealthy 20 s after its last
# report, the old primary gets 30 s to demote itself, health checks every 5 s). The keepers'
# network_partition_timeout (a primary that cannot reach the monitor nor its standby demotes
# itself after it) stays below primary_demote_timeout, as with the defaults (20 s < 30 s).
instance mon \
  "pgautofailover.health_check_period = 1000" "pgautofailover.health_check_timeout = 1000" \
  "pgautofailover.health_check_max_retries = 1" "pgautofailover.health_check_retry_delay = 500" \
  "pgautofailover.node_considered_unhealthy_timeout = 3000" "pgautofailover.primary_demote_timeout = 5000" \
  "pgautofailover.startup_grace_period = 2000"
ac create monitor --pgdata "$F/mon" --pgport "$MP" --hostname 127.0.0.1 --auth trust --no-ssl \
  --pgctl "$PG_BIN/pg_ctl" > "$F/mon.create.log" 2>&1 || { tail -20 "$F/mon.create.log"; fail "pg_autoctl create monitor"; }
ac config set --pgdata "$F/mon" postgresql.listen_addresses 127.0.0.1 >/dev/null
ac_run mon
MONITOR="postgres://autoctl_node@127.0.0.1:$MP/pg_auto_failover?sslmode=disable"
instance c1 "shared_preload_libraries = 'id_gen'" "max_worker_processes = 16"
for n in c1 c2; do
  port=$C1P; [ $n = c2 ] && port=$C2P
  ac create postgres --pgdata "$F/$n" --pgport "$port" --listen 127.0.0.1 --hostname 127.0.0.1 --name $n \
    --monitor "$MONITOR" --auth trust --no-ssl --pgctl "$PG_BIN/pg_ctl" > "$F/$n.create.log" 2>&1 \
    || { tail -20 "$F/$n.create.log"; fail "pg_autoctl create postgres ($n)"; }
  ac config set --pgdata "$F/$n" timeout.network_partition_timeout 3 >/dev/null
  ac_run $n
done
for _ in $(seq 120); do
  [ "$(node_state c1)/$(node_state c2)" = "primary/secondary" ] && break; sleep 0.25
done
assert_eq "$(node_state c1)/$(node_state c2)" "primary/secondary" "the formation is up: c1 primary, c2 secondary"
assert_eq "$(c1q "SELECT sync_state FROM pg_stat_replication WHERE application_name LIKE 'pgautofailover_standby_%'")" \
  "quorum" "c2 replicates synchronously ($(c1q "SHOW synchronous_standby_names"))"
assert_eq "$(c2q "SELECT current_setting('shared_preload_libraries') || ' ' || current_setting('shared_buffers') || ' ' || pg_is_in_recovery()")" \
  "id_gen 32MB true" "the secondary inherited id_gen and the small settings"
cpsql "$F" "$C1P" >/dev/null <<'SQL'
CREATE EXTENSION id_gen;
SELECT id_gen.create_sequence('k');
SELECT id_gen.create_sequence('roomy');
CREATE ROLE id_authority LOGIN;
GRANT UPDATE (max_id) ON id_gen.sequences TO id_authority;
ALTER ROLE id_authority SET synchronous_commit = on;
SQL

# The nodes -------------------------------------------------------------------------------
for n in 1 2; do
  d=$N1 p=$N1P; [ $n = 2 ] && d=$N2 p=$N2P
  cluster_start "$d" "$p" "${SMALL[@]}"
  nq "$d" "$p" >/dev/null <<SQL
CREATE EXTENSION id_gen;
CREATE EXTENSION postgres_fdw;
-- Both members of the formation; libpq takes the first that accepts writes.
CREATE SERVER central FOREIGN DATA WRAPPER postgres_fdw
  OPTIONS (host '127.0.0.1,127.0.0.1', port '$C1P,$C2P', target_session_attrs 'read-write',
           dbname 'postgres', connect_timeout '2', options '-c synchronous_commit=on');
CREATE USER MAPPING FOR PUBLIC SERVER central OPTIONS (user 'id_authority');
SELECT id_gen.create_sequence('k', step => 50, min_step => 50, max_step => 50, authority => 'central');
SELECT id_gen.create_sequence('roomy', step => 20000, min_step => 20000, max_step => 20000, authority => 'central');
CREATE TABLE handed (ts timestamptz NOT NULL, seq text NOT NULL, client int NOT NULL, id bigint NOT NULL);
CREATE TABLE failed (ts timestamptz NOT NULL, seq text NOT NULL, client int NOT NULL, sqlstate text, msg text);
CREATE TABLE stop ();
-- A client: 5 calls every 20 ms until a row is in stop (or 300 s passed). Every value it is
-- handed is recorded with its time (PL/pgSQL variables survive the failed block), every
-- failed call with its time and SQLSTATE.
CREATE PROCEDURE client(c int, s text) LANGUAGE plpgsql AS \$\$
DECLARE
  v bigint; ids bigint[] := '{}'; tss timestamptz[] := '{}';
  deadline timestamptz := clock_timestamp() + interval '300 s';
BEGIN
  LOOP
    FOR i IN 1..5 LOOP
      BEGIN
        v := id_gen.next_segment_id(s);
        ids := ids || v; tss := tss || clock_timestamp();
      EXCEPTION WHEN OTHERS THEN
        INSERT INTO failed VALUES (clock_timestamp(), s, c, SQLSTATE, SQLERRM);
      END;
    END LOOP;
    INSERT INTO handed SELECT t, s, c, i FROM unnest(tss, ids) AS u(t, i);
    ids := '{}'; tss := '{}';
    COMMIT;
    EXIT WHEN EXISTS (SELECT FROM stop) OR clock_timestamp() > deadline;
    PERFORM pg_sleep(0.02);
  END LOOP;
END \$\$;
SQL
done
nodes() { echo "$N1 $N1P"; echo "$N2 $N2P"; }

# Load: two clients of 'k' and one of 'roomy' on each node, through both failovers --------
CLIENTS=
while read -r d p; do
  for c in 1 2 3; do
    s=k; [ $c = 3 ] && s=roomy
    cpsql "$d" "$p" -c "SET id_gen.refill_timeout = '1s'" -c "CALL client($c, '$s')" > "$d/client$c.log" 2>&1 &
    CLIENTS="$CLIENTS $!"
  done
done < <(nodes)
sleep 4
while read -r d p; do
  assert_gt "$(nq "$d" "$p" -c "SELECT count(DISTINCT seq) FROM handed")" 1 "$(basename "$d") is handed values of both sequences"
  assert_eq "$(nq "$d" "$p" -c "SELECT count(*) FROM failed")" 0 "$(basename "$d"): no failed call before the crash"
done < <(nodes)
assert_gt "$(nq "$N1" "$N1P" -c "SELECT refills FROM id_gen.status WHERE sequence = 'k'")" 3 "node 1 reserved several segments of 'k' on c1"

now() { nq "$N1" "$N1P" -c "SELECT clock_timestamp()"; }
secs() { nq "$N1" "$N1P" -c "SELECT round(extract(epoch FROM '$2'::timestamptz - '$1'::timestamptz)::numeric, 1)"; }
# wait_takes_writes NAME: until the monitor has NAME as wait_primary or primary and it is out of
# recovery (60 s at most).
wait_takes_writes() {
  for _ in $(seq 300); do
    case "$(node_state "$1")" in wait_primary|primary)
      [ "$(cpsql "$F" "$(port_of "$1")" -At -c "SELECT pg_is_in_recovery()" 2>/dev/null)" = f ] && return 0;;
    esac
    sleep 0.2
  done
  return 1
}
port_of() { [ "$1" = c1 ] && echo "$C1P" || echo "$C2P"; }
# failover_report T_KILL NEW_PRIMARY: prints the monitor's events since the kill and the
# failover's timing (until the new primary reported wait_primary: it takes writes).
failover_report() {
  local t0=$1 new=$2 events t_unhealthy t_writes
  events=$(mq "SELECT string_agg(e, E'\n' ORDER BY id) FROM (SELECT min(eventid) AS id,
    round(extract(epoch FROM min(eventtime) - '$t0'::timestamptz)::numeric, 1) || ' s  ' || description AS e
    FROM pgautofailover.event WHERE eventtime >= '$t0'::timestamptz GROUP BY description) d")
  t_unhealthy=$(mq "SELECT min(eventtime) FROM pgautofailover.event WHERE eventtime >= '$t0'::timestamptz
    AND description LIKE '%became unhealthy%'")
  t_writes=$(mq "SELECT min(eventtime) FROM pgautofailover.event WHERE eventtime >= '$t0'::timestamptz
    AND nodename = '$new' AND reportedstate IN ('wait_primary', 'primary')")
  [ -n "$t_unhealthy" ] && [ -n "$t_writes" ] || fail "monitor events incomplete:
$events"
  printf '  monitor events after the kill:\n%s\n' "$events" | sed '2,$s/^/    /' >&2
  echo "  failover: the monitor acted on the failure after $(secs "$t0" "$t_unhealthy") s;" \
    "$new reported wait_primary (takes writes) after $(secs "$t0" "$t_writes") s" >&2
}
# outage_report FROM TO: per node and sequence, the longest gap between successful calls
# that ended in [FROM, TO], and the failed calls in it.
outage_report() {
  local d p s
  while read -r d p; do
    for s in k roomy; do
      echo "  outage seen by $(basename "$d") '$s': $(nq "$d" "$p" -c "
        WITH g AS (SELECT ts, ts - lag(ts) OVER (ORDER BY ts) AS gap FROM handed WHERE seq = '$s'),
             w AS (SELECT * FROM g WHERE ts BETWEEN '$1' AND '$2')
        SELECT 'longest gap between successful calls ' || round(extract(epoch FROM max(gap))::numeric, 2) || ' s (ending '
            || round(extract(epoch FROM (SELECT ts FROM w ORDER BY gap DESC NULLS LAST LIMIT 1) - '$1'::timestamptz)::numeric, 1)
            || ' s after the kill); failed calls: '
            || coalesce((SELECT string_agg(sqlstate || ' x' || n, ', ') FROM
                         (SELECT sqlstate, count(*) AS n FROM failed
                          WHERE seq = '$s' AND ts BETWEEN '$1' AND '$2' GROUP BY 1 ORDER BY 1) f), 'none')
        FROM w")" >&2
    done
  done < <(nodes)
}

# 1. c1's host dies: kill -9 of its pg_autoctl processes, its postmaster and backends ------
T_KILL1=$(now)
kill -9 $(session_pids c1)
for _ in $(seq 50); do [ -z "$(session_pids c1)" ] && break; sleep 0.1; done
assert_eq "$(session_pids c1 | wc -l)" 0 "c1's pg_autoctl, postmaster and backends are gone (kill -9)"
# What c2 starts from: its catalog once it replayed all it received (replay no longer moves
# while it is still a standby) is the catalog it is promoted with.
standby_max= prev=
for _ in $(seq 100); do
  r=$(c2q "SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn(),
             (SELECT string_agg(name || '=' || max_id, ' ' ORDER BY name) FROM id_gen.sequences)")
  case "$r" in
    t\|*) [ "${r%|*}" = "$prev" ] && { standby_max=${r##*|}; break; }; prev=${r%|*};;
    *) fail "c2 left recovery before its replayed catalog could be read ($r)";;
  esac
  sleep 0.2
done
[ -n "$standby_max" ] || fail "could not read c2's replayed catalog while it was still a standby"
K_MAX=$(sed -n 's/.*k=\([0-9]*\).*/\1/p' <<<"$standby_max")
ROOMY_MAX=$(sed -n 's/.*roomy=\([0-9]*\).*/\1/p' <<<"$standby_max")
pass "c2's replayed catalog at the crash: $standby_max"
# Nobody acts now. The last moment c2 was seen in recovery: every value handed out before it
# came from a reservation on c1.
T_STANDBY=$T_KILL1
for _ in $(seq 300); do
  r=$(c2q "SELECT pg_is_in_recovery(), clock_timestamp()" 2>/dev/null || true)
  case "$r" in "t|"*) T_STANDBY=${r#t|};; "f|"*) break;; esac
  sleep 0.1
done
wait_takes_writes c2 || fail "c2 was not promoted within 60 s: $(node_state c1)/$(node_state c2)"
pass "the monitor promoted c2 by itself ($(node_state c2), out of recovery)"
assert_eq "$(mq "SELECT goalstate FROM pgautofailover.node WHERE nodename = 'c1'")" "demoted" "the monitor demoted c1"
failover_report "$T_KILL1" c2
# Service resumes on both nodes, nobody re-points them.
while read -r d p; do
  resumed=
  for _ in $(seq 600); do
    resumed=$(nq "$d" "$p" -c "SELECT min(ts) FROM handed WHERE seq = 'k' AND id > $K_MAX")
    [ -n "$resumed" ] && break; sleep 0.1
  done
  [ -n "$resumed" ] || fail "$(basename "$d") was handed no value reserved on the promoted c2 within 60 s"
  took=$(secs "$T_KILL1" "$resumed")
  assert_lt "${took%.*}" 60 "$(basename "$d") serves values of 'k' reserved on the promoted c2, $took s after the kill"
done < <(nodes)
sleep 2
T_END1=$(now)
outage_report "$T_KILL1" "$T_END1"
assert_eq "$(awk -v k="$K_MAX" -v r="$ROOMY_MAX" '$3 == "t" && (($1 == "k" && $2 > k) || ($1 == "roomy" && $2 > r))' \
  < <(while read -r d p; do nq "$d" "$p" -c "COPY (SELECT seq, id, ts < '$T_STANDBY' FROM handed) TO STDOUT"; done < <(nodes)) | wc -l)" 0 \
  "c2's catalog at the crash (k=$K_MAX, roomy=$ROOMY_MAX) covers every value handed out before its promotion"

# c1 comes back: pg_autoctl rejoins it as c2's synchronous secondary ----------------------
ac_run c1
for _ in $(seq 300); do
  [ "$(node_state c1)/$(node_state c2)" = "secondary/primary" ] && break; sleep 0.2
done
assert_eq "$(node_state c1)/$(node_state c2)" "secondary/primary" "c1 rejoined as the secondary, c2 is primary"
for _ in $(seq 100); do
  [ "$(c2q "SELECT sync_state FROM pg_stat_replication WHERE application_name LIKE 'pgautofailover_standby_%'")" = quorum ] && break
  sleep 0.1
done
assert_eq "$(c2q "SELECT sync_state FROM pg_stat_replication WHERE application_name LIKE 'pgautofailover_standby_%'")" \
  "quorum" "c1 replicates synchronously from c2"
sleep 2
assert_eq "$(while read -r d p; do nq "$d" "$p" -c "SELECT count(*) FROM failed WHERE ts > '$T_END1'"; done < <(nodes) | awk '{ s += $1 } END { print s + 0 }')" \
  0 "no failed call while c1 rejoined"

# 2. c2's postmaster and its children die (kill -9); its pg_autoctl lives --------------
# The keeper restarts PostgreSQL in place (read-write again within a second or two); the
# monitor fails over to c1 too if the keeper reported PostgreSQL down before that (seen
# both ways). Either way the nodes carry on by themselves and nothing repeats.
T_KILL2=$(now)
pm=$(head -1 "$F/c2/postmaster.pid")
kill -9 "$pm" $(pgrep -P "$pm") 2>/dev/null || true
# A node holds at most 2 segments of 'k' (100 values) and one reservation in flight: more than
# 500 values after the kill means it reserved again, on whichever member took writes.
while read -r d p; do
  n=0
  for _ in $(seq 600); do
    n=$(nq "$d" "$p" -c "SELECT count(*) FROM handed WHERE seq = 'k' AND ts > '$T_KILL2'")
    [ "$n" -gt 500 ] && break; sleep 0.1
  done
  assert_gt "$n" 500 "$(basename "$d") reserves 'k' again after the kill (more than it held)"
done < <(nodes)
sleep 2
T_END2=$(now)
for _ in $(seq 300); do
  case "$(node_state c1)/$(node_state c2)" in secondary/primary|primary/secondary) break;; esac; sleep 0.2
done
case "$(node_state c1)/$(node_state c2)" in
  secondary/primary) pass "pg_autoctl restarted c2's PostgreSQL in place; c2 stays primary, c1 secondary";;
  primary/secondary) pass "the monitor failed over to c1; c2 rejoined as secondary"
                     failover_report "$T_KILL2" c1;;
  *) fail "the formation did not settle within 60 s: $(node_state c1)/$(node_state c2)";;
esac
outage_report "$T_KILL2" "$T_END2"

# Stop the load; what all clients saw -----------------------------------------------------
while read -r d p; do nq "$d" "$p" -c "INSERT INTO stop DEFAULT VALUES" >/dev/null; done < <(nodes)
for c in $CLIENTS; do wait "$c" || fail "a client failed: $(cat "$N1"/client*.log "$N2"/client*.log)"; done
CLIENTS=
while read -r d p; do
  nq "$d" "$p" -c "SELECT count(*) || ' x ' || sqlstate || ' ' || m FROM (SELECT sqlstate,
      regexp_replace(regexp_replace(msg, '\s+', ' ', 'g'), '(failed: could not connect to server \"central\"): .*', '\1: …') AS m
    FROM failed) f GROUP BY sqlstate, m ORDER BY count(*) DESC" | sed "s/^/  failed calls on $(basename "$d"): /" >&2
done < <(nodes)
while read -r d p; do
  name=$(basename "$d")
  assert_eq "$(nq "$d" "$p" -c "SELECT srvoptions::text FROM pg_foreign_server WHERE srvname = 'central'" | grep -c "port=$C1P,$C2P")" \
    "1" "$name's foreign server is as it was created"
  assert_eq "$(nq "$d" "$p" -c "SELECT count(*) FROM failed WHERE seq = 'roomy'")" 0 \
    "$name: 'roomy' (its buffer outlasts a failover) had no failed call"
  # 55000 naming the authority and its last error, or without it while the worker's attempt
  # has not failed yet (a commit waiting for the secondary of a restarted primary).
  assert_eq "$(nq "$d" "$p" -c "SELECT count(*) FROM failed WHERE NOT (sqlstate = '55000' AND seq = 'k'
      AND msg LIKE 'id_gen: no segment for sequence \"k\" arrived within 1000 ms%')")" 0 \
    "$name: every failed call ($(nq "$d" "$p" -c "SELECT count(*) FROM failed")) is a 55000 of 'k' after id_gen.refill_timeout"
  # The connection failure is a refused connect, or, for a refill in flight when the host
  # died, a connection the server closed (which one a call meets is a matter of timing).
  assert_eq "$(nq "$d" "$p" -c "SELECT count(*) FROM failed WHERE ts BETWEEN '$T_KILL1' AND '$T_END1'
      AND msg NOT LIKE '%: its authority \"central\" failed: could not connect to server \"central\"%'
      AND msg NOT LIKE '%: its authority \"central\" failed: server closed the connection unexpectedly%'")" 0 \
    "$name: in the host loss, every failed call names the authority and the connection failure"
  assert_eq "$(nq "$d" "$p" -c "SELECT count(*) FROM failed WHERE NOT (ts BETWEEN '$T_KILL1' AND '$T_END1' OR ts BETWEEN '$T_KILL2' AND '$T_END2')")" 0 \
    "$name: calls failed only during the two failovers"
done < <(nodes)
# No value twice; the final central covers every value -------------------------------------
while read -r d p; do nq "$d" "$p" -c "COPY (SELECT seq, id FROM handed) TO STDOUT"; done < <(nodes) > "$F/all_ids.tsv"
total=$(wc -l < "$F/all_ids.tsv")
assert_gt "$total" 10000 "values recorded on both nodes"
assert_eq "$(sort "$F/all_ids.tsv" | uniq -d | wc -l)" 0 "no value handed out twice ($total values of 2 sequences, 2 nodes, 2 failovers)"
# Read as the nodes connect: the member that takes writes.
final=$("$PG_BIN/psql" -X -At "host=127.0.0.1,127.0.0.1 port=$C1P,$C2P target_session_attrs=read-write user=postgres dbname=postgres" \
  -c "SELECT string_agg(name || '=' || max_id, ' ' ORDER BY name) FROM id_gen.sequences")
K_FINAL=$(sed -n 's/.*k=\([0-9]*\).*/\1/p' <<<"$final")
ROOMY_FINAL=$(sed -n 's/.*roomy=\([0-9]*\).*/\1/p' <<<"$final")
assert_eq "$(awk -v k="$K_FINAL" -v r="$ROOMY_FINAL" '($1 == "k" && $2 > k) || ($1 == "roomy" && $2 > r)' "$F/all_ids.tsv" | wc -l)" 0 \
  "the central's final max_id ($final) covers all $total values handed out"
echo "13_auto_failover: passed"
