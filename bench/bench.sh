#!/usr/bin/env bash
# id_gen benchmark: every comparison measured side by side, in one run, on one server.
# Prints absolute figures and ratios; never used as a CI gate.
# Usage: bench/bench.sh [--quick]     (requires the extension to be installed:
#        scripts/demo.sh does it, or `cargo pgrx install --release --pg-config ...`)
source "$(dirname "$0")/../scripts/common.sh"
QUICK=${1:-}
N=5000000; REPS=7; PGB_T=15; LOAD_ROWS=2000000
if [ "$QUICK" = "--quick" ]; then N=500000; REPS=3; PGB_T=5; LOAD_ROWS=200000; fi
DIR=/tmp/idg_bench PORT=54350
make_kek "$DIR.kek"
cluster_start "$DIR" "$PORT" "shared_buffers = '1GB'" "max_wal_size = '4GB'" "checkpoint_timeout = '30min'" "id_gen.order_no_kek_file = '$DIR.kek'" "id_gen.snowflake_node_id = 1"
trap 'cluster_stop "$DIR"' EXIT
P() { cpsql "$DIR" "$PORT" "$@"; }
P -c "CREATE EXTENSION id_gen" >/dev/null
P >/dev/null <<'SQL'
SELECT id_gen.create_sequence('s', step => 100000, max_step => 10000000, buffer_seconds => 30);
SELECT id_gen.create_sequence('bulk', step => 1000000, max_step => 50000000);
SELECT id_gen.create_sequence('ins', step => 10000);
CREATE SEQUENCE seq_c1 CACHE 1;
CREATE SEQUENCE seq_c1000 CACHE 1000;
SQL

# best_ms SQL...: runs the queries round-robin $REPS times (so noise hits all alike) and
# prints the best wall time (ms, psql's \timing) of each, one per line. work_mem is
# raised so the function scan's tuplestore stays in memory for every variant.
best_ms() {
  local script="SET work_mem = '2GB';"$'\n'"\\timing on"$'\n'"\\o /dev/null"$'\n'
  for _ in $(seq "$REPS"); do for sql in "$@"; do script+="$sql;"$'\n'; done; done
  printf '%s' "$script" | P 2>&1 | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' |
    awk -v k=$# '{ i = (NR - 1) % k; if (!(i in b) || $1 < b[i]) b[i] = $1 } END { for (i = 0; i < k; i++) print b[i] }'
}
ratio() { awk "BEGIN{printf \"%.2f\", $1 / $2}"; }
rate() { awk "BEGIN{printf \"%.1f\", $1 / ($2 / 1000) / 1e6}"; }

echo "== machine: $(nproc) cores, $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)"
echo "== PostgreSQL: $(P -At -c 'SHOW server_version')"
echo
echo "-- 1. one backend, $N calls each (best of $REPS)"
# warm the cache and the worker's rate meter
P -c "SELECT count(id_gen.next_segment_id('s')) FROM generate_series(1, $N)" >/dev/null
mapfile -t T < <(best_ms "SELECT count(abs(x)) FROM generate_series(1, $N) x" \
  "SELECT count(id_gen.next_segment_id('s')) FROM generate_series(1, $N)" \
  "SELECT count(nextval('seq_c1')) FROM generate_series(1, $N)" \
  "SELECT count(nextval('seq_c1000')) FROM generate_series(1, $N)")
floor=${T[0]} ours=${T[1]} c1=${T[2]} c1000=${T[3]}
printf '%-40s %10s %12s %s\n' "query" "ms" "M calls/s" "ratio"
printf '%-40s %10.0f %12s %s\n' "count(abs(x))  [executor floor]" "$floor" "$(rate $N $floor)" "1.00"
printf '%-40s %10.0f %12s %s x floor\n' "count(id_gen.next_segment_id('s'))" "$ours" "$(rate $N $ours)" "$(ratio $ours $floor)"
printf '%-40s %10.0f %12s %s x floor; id_gen is %s x faster\n' "count(nextval()) CACHE 1" "$c1" "$(rate $N $c1)" "$(ratio $c1 $floor)" "$(ratio $c1 $ours)"
printf '%-40s %10.0f %12s %s x floor; id_gen is %s x faster\n' "count(nextval()) CACHE 1000" "$c1000" "$(rate $N $c1000)" "$(ratio $c1000 $floor)" "$(ratio $c1000 $ours)"

echo
echo "-- 2. bulk: next_segment_ids"
BULK=$((N * 2))
P -c "SELECT count(*) FROM id_gen.next_segment_ids('bulk', $BULK)" >/dev/null
mapfile -t T < <(best_ms "SELECT count(*) FROM id_gen.next_segment_ids('bulk', $BULK)" \
  "SELECT count(*) FROM generate_series(1, $BULK)" \
  "SELECT cardinality(id_gen.next_segment_ids_array('bulk', $BULK))" \
  "SELECT sum(last_id - first_id + 1) FROM id_gen.next_segment_ranges('bulk', $BULK)")
printf '%-52s %8.0f ms %8s M ids/s\n' "next_segment_ids('bulk', $BULK)  [SETOF, a row each]" "${T[0]}" "$(rate $BULK ${T[0]})"
printf '%-52s %8.0f ms %8s M rows/s  (the SRF executor floor)\n' "generate_series(1, $BULK)" "${T[1]}" "$(rate $BULK ${T[1]})"
printf '%-52s %8.0f ms %8s M ids/s\n' "next_segment_ids_array('bulk', $BULK)  [bigint[]]" "${T[2]}" "$(rate $BULK ${T[2]})"
printf '%-52s %8.0f ms %8s M ids/s\n' "next_segment_ranges('bulk', $BULK)  [runs]" "${T[3]}" "$(rate $BULK ${T[3]})"

echo
echo "-- 3. pgbench, 8 clients, ${PGB_T}s each: INSERT with DEFAULT id vs bigserial"
P >/dev/null <<'SQL'
CREATE TABLE t_idgen (id bigint PRIMARY KEY DEFAULT id_gen.next_segment_id('ins'), v int);
CREATE TABLE t_serial (id bigserial PRIMARY KEY, v int);
SQL
echo "INSERT INTO t_idgen (v) VALUES (1);" > "$DIR/idgen.sql"
echo "INSERT INTO t_serial (v) VALUES (1);" > "$DIR/serial.sql"
pgb() { "$PG_BIN/pgbench" -n -h "$DIR" -p "$PORT" -U postgres -c 8 -j 2 -T "$PGB_T" -f "$1" postgres 2>&1 | sed -n 's/^tps = \([0-9.]*\).*/\1/p'; }
pgb "$DIR/idgen.sql" >/dev/null  # warm-up
a1=$(pgb "$DIR/idgen.sql"); b1=$(pgb "$DIR/serial.sql"); b2=$(pgb "$DIR/serial.sql"); a2=$(pgb "$DIR/idgen.sql")
ta=$(awk "BEGIN{print ($a1 + $a2) / 2}"); tb=$(awk "BEGIN{print ($b1 + $b2) / 2}")
printf 'DEFAULT id_gen.next_segment_id: %.0f tps   bigserial: %.0f tps   ratio %s\n' "$ta" "$tb" "$(ratio $ta $tb)"

if [ -f "$(dirname "$0")/bench_more.sh" ]; then
  source "$(dirname "$0")/bench_more.sh"
fi
