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
