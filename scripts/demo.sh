#!/usr/bin/env bash
# README command 1: set everything up on a fresh Debian bookworm machine (as root), build
# and install id_gen, start a throwaway cluster and run the demo script against it.
source "$(dirname "$0")/common.sh"
ensure_toolchain
install_extension
DIR=/tmp/id_gen_demo PORT=54320
log "starting a throwaway cluster in $DIR (port $PORT)"
make_kek "$DIR.kek"
cluster_start "$DIR" "$PORT" "id_gen.order_no_kek_file = '$DIR.kek'" "id_gen.snowflake_node_id = 1"
trap 'cluster_stop "$DIR"' EXIT
cpsql "$DIR" "$PORT" -c "CREATE DATABASE demo" >/dev/null
log "demo (sql/demo.sql)"
"$PG_BIN/psql" -X -v ON_ERROR_STOP=1 -h "$DIR" -p "$PORT" -U postgres -d demo -e -f "$REPO_ROOT/sql/demo.sql"
