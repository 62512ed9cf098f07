#!/usr/bin/env bash
# Helpers for the out-of-process tests: each test file starts its own throwaway
# cluster (private port and socket dir), asserts behaviour, and stops it.
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/common.sh"

fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "  ok: $*" >&2; }

# assert_eq ACTUAL EXPECTED WHAT
assert_eq() { [ "$1" = "$2" ] || fail "$3: expected '$2', got '$1'"; pass "$3 ($1)"; }
# assert_gt A B WHAT  (integers, A > B)
assert_gt() { [ "$1" -gt "$2" ] || fail "$3: expected $1 > $2"; pass "$3 ($1 > $2)"; }
# assert_lt A B WHAT  (integers, A < B)
assert_lt() { [ "$1" -lt "$2" ] || fail "$3: expected $1 < $2"; pass "$3 ($1 < $2)"; }

# q DB SQL: one value, unaligned
q() { cpsql "$E2E_DIR" "$E2E_PORT" -d "$1" -At -c "$2"; }

e2e_start() {
  E2E_DIR=$1 E2E_PORT=$2; shift 2
  cluster_start "$E2E_DIR" "$E2E_PORT" "$@"
  trap 'cluster_stop "$E2E_DIR"' EXIT
}

pgbench_run() { # pgbench_run DB ARGS...
  local db=$1; shift
  "$PG_BIN/pgbench" -n -h "$E2E_DIR" -p "$E2E_PORT" -U postgres "$@" "$db"
}

# The postmaster and every child, killed with SIGKILL (a power cut, for PostgreSQL).
kill9_cluster() {
  local pm; pm=$(head -1 "$E2E_DIR/data/postmaster.pid")
  local kids; kids=$(pgrep -P "$pm" || true)
  kill -9 "$pm" $kids 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pm" 2>/dev/null || break; sleep 0.1; done
  sleep 0.5
}

# kill9_under_load CLIENTS: pgbench with CLIENTS clients inserting into kt (whose id
# defaults to next_segment_id('k')) and a client that records every value of 'k' it is
# handed, committed or not; after 4 s kill9_cluster. Sets HANDED_MAX (largest recorded).
kill9_under_load() {
  echo 'INSERT INTO kt DEFAULT VALUES;' > "$E2E_DIR/ins.sql"
  pgbench_run postgres -c "$1" -j 2 -T 30 -f "$E2E_DIR/ins.sql" > "$E2E_DIR/pgb.log" 2>&1 &
  local pgb=$!
  ( while true; do q postgres "SELECT id_gen.next_segment_id('k') FROM generate_series(1, 20)" || exit 0; done ) \
    > "$E2E_DIR/handed.txt" 2>/dev/null &
  local rec=$!
  sleep 4
  kill9_cluster
  wait $pgb 2>/dev/null || true
  wait $rec 2>/dev/null || true
  HANDED_MAX=$(sort -n "$E2E_DIR/handed.txt" | tail -1)
  [ -n "$HANDED_MAX" ] || fail "the recording client saw no values"
}

# poll_until WHAT EXPECTED SECONDS COMMAND...: runs COMMAND every 0.2 s until it prints
# EXPECTED; fails with the last value seen after SECONDS.
poll_until() {
  local what=$1 expected=$2 secs=$3; shift 3
  local last="" end=$((SECONDS + secs))
  while [ "$SECONDS" -lt "$end" ]; do
    last=$("$@" 2>&1) || true
    [ "$last" = "$expected" ] && { pass "$what ($last)"; return 0; }
    sleep 0.2
  done
  fail "$what: expected '$expected' within $secs s, last value '$last'"
}
