#!/usr/bin/env bash
# id_gen benchmark: every comparison measured side by side, in one run, on one server.
# Prints absolute figures and ratios: the median of interleaved rounds with the min–max
# spread over the rounds; a ratio whose spread contains 1.0 is reported as a tie. Never
# used as a CI gate.
# Usage: bench/bench.sh [--pg 15|16|17|18] [--quick | --hot | --authority | --cluster | --routing | --scale | --fleet | --ownership]
#        (requires the extension to be installed for that version: scripts/demo.sh does it
#        for 15, `scripts/test.sh --pg N` or `cargo pgrx install --release --pg-config ...` for others)
if [ "${1:-}" = "--pg" ]; then export PG_VERSION=$2; shift 2; fi
source "$(dirname "$0")/../scripts/common.sh"
QUICK=${1:-}
N=5000000; REPS=7; PGB_T=15; PGB_ROUNDS=3; LOAD_ROWS=2000000; LOAD_REPS=3
if [ "$QUICK" = "--quick" ]; then N=500000; REPS=3; PGB_T=5; PGB_ROUNDS=2; LOAD_ROWS=200000; fi
DIR=/tmp/idg_bench PORT=54350
P() { cpsql "$DIR" "$PORT" "$@"; }
if [ "$QUICK" != "--cluster" ] && [ "$QUICK" != "--routing" ] && [ "$QUICK" != "--scale" ] && [ "$QUICK" != "--fleet" ] && [ "$QUICK" != "--ownership" ]; then  # these start their own servers only
make_kek "$DIR.kek"
cluster_start "$DIR" "$PORT" "shared_buffers = '1GB'" "max_wal_size = '4GB'" "checkpoint_timeout = '30min'" "id_gen.order_no_kek_file = '$DIR.kek'" "id_gen.snowflake_node_id = 1"
trap 'cluster_stop "$DIR"' EXIT
P -c "CREATE EXTENSION id_gen" >/dev/null
P >/dev/null <<'SQL'
SELECT id_gen.create_sequence('s', step => 100000, max_step => 10000000, buffer_seconds => 30);
SELECT id_gen.create_sequence('bulk', step => 1000000, max_step => 50000000, max_bulk => 9223372036854775807);
SELECT id_gen.create_sequence('ins', step => 10000);
CREATE SEQUENCE seq_c1 CACHE 1;
CREATE SEQUENCE seq_c1000 CACHE 1000;
SQL
fi

# runs_ms SQL...: runs the queries round-robin $REPS times (so noise hits all alike) and
# prints one line per round: the wall time (ms, psql's \timing) of each query, in argument
# order. work_mem is raised so the function scan's tuplestore stays in memory for every
# variant. Read the lines into RUNS (mapfile -t RUNS < <(runs_ms ...)) for the helpers below.
runs_ms() {
  local script="SET work_mem = '2GB';"$'\n'"\\timing on"$'\n'"\\o /dev/null"$'\n'
  for _ in $(seq "$REPS"); do for sql in "$@"; do script+="$sql;"$'\n'; done; done
  printf '%s' "$script" | P 2>&1 | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' |
    awk -v k=$# '{ line = line (line == "" ? "" : " ") $1 } NR % k == 0 { print line; line = "" }'
}
# once SQL: runs one query once; prints its (one-value) result and its wall time in ms.
# Call it as out=$(once ...), so that a failing query stops the script like any other.
once() {
  printf '%s\n' '\timing on' "$1;" | P -At |
    awk '/^Time: / { t = $2; next } { v = $0 } END { print v, t }'
}
# ms COMMAND...: the wall time of a command in ms (its output discarded).
ms() { local t0 t1; t0=$(date +%s%N); "$@" >/dev/null; t1=$(date +%s%N); echo $(( (t1 - t0) / 1000000 )); }
# stats: median, min and max of the numbers on stdin, one a line.
stats() {
  sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2), v[1], v[NR] }'
}
# Over the rounds in RUNS (columns count from 0), each prints "median min max":
col_stats() { printf '%s\n' "${RUNS[@]}" | awk -v i=$(($1 + 1)) '{ print $i }' | stats; }    # column I
ratio_stats() { printf '%s\n' "${RUNS[@]}" | awk -v i=$(($1 + 1)) -v j=$(($2 + 1)) '{ print $i / $j }' | stats; }  # I / J per round
rate_stats() { printf '%s\n' "${RUNS[@]}" | awk -v i=$(($1 + 1)) -v n="$2" '{ print n / ($i / 1000) / 1e6 }' | stats; }  # N calls in column I ms: M/s
med() { col_stats "$1" | awk '{ print $1 }'; }
# fmt_ratio MEDIAN MIN MAX [UNIT]: "1.23 (1.18..1.30) UNIT", then ", tie (within noise)" when
# the per-round ratios fall on both sides of 1.0 (the difference is within the run-to-run
# spread, so neither side is faster).
fmt_ratio() {
  awk -v m="$1" -v lo="$2" -v hi="$3" -v u="${4:-}" \
    'BEGIN { printf "%.2f (%.2f..%.2f)%s%s", m, lo, hi, (u == "" ? "" : " " u), (lo <= 1 && hi >= 1) ? ", tie (within noise)" : "" }'
}
# fmt_range MEDIAN MIN MAX [DECIMALS]: "570 (562..590)"
fmt_range() { awk -v m="$1" -v lo="$2" -v hi="$3" -v d="${4:-0}" 'BEGIN { f = "%." d "f"; printf f " (" f ".." f ")", m, lo, hi }'; }
rate() { awk "BEGIN{printf \"%.1f\", $1 / ($2 / 1000) / 1e6}"; }

# bench.sh --authority: only the central-authority comparison (bench_authority.sh).
if [ "$QUICK" = "--authority" ]; then
  source "$(dirname "$0")/bench_authority.sh"
  exit 0
fi
# bench.sh --routing: only the zero-hop routing comparison (bench_routing.sh).
if [ "$QUICK" = "--routing" ]; then
  source "$(dirname "$0")/bench_routing.sh"
  exit 0
fi
# bench.sh --scale: only the fleet-scale comparison (bench_scale.sh).
if [ "$QUICK" = "--scale" ]; then
  source "$(dirname "$0")/bench_scale.sh"
  exit 0
fi
# bench.sh --ownership: only a shard's layouts by ranges owned (bench_ownership.sh).
if [ "$QUICK" = "--ownership" ]; then
  source "$(dirname "$0")/bench_ownership.sh"
  exit 0
fi
# bench.sh --fleet: only the many-shards fleet (bench_fleet.sh).
if [ "$QUICK" = "--fleet" ]; then
  source "$(dirname "$0")/bench_fleet.sh"
  exit 0
fi
# bench.sh --cluster: only the coordinator-vs-shard comparison (bench_cluster.sh).
if [ "$QUICK" = "--cluster" ]; then
  source "$(dirname "$0")/bench_cluster.sh"
  exit 0
fi

echo "== machine: $(nproc) cores, $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)"
echo "== PostgreSQL: $(P -At -c 'SHOW server_version')"
echo
echo "-- 1. one backend, $N calls each (median of $REPS interleaved rounds; (min..max) over the rounds)"
# warm the cache and the worker's rate meter
P -c "SELECT count(id_gen.next_segment_id('s')) FROM generate_series(1, $N)" >/dev/null
QUERIES1=("SELECT count(abs(x)) FROM generate_series(1, $N) x"
  "SELECT count(id_gen.next_segment_id('s')) FROM generate_series(1, $N)"
  "SELECT count(nextval('seq_c1')) FROM generate_series(1, $N)"
  "SELECT count(nextval('seq_c1000')) FROM generate_series(1, $N)"
  "SELECT count(id_gen.next_segment_id_unchecked('s')) FROM generate_series(1, $N)")
# PostgreSQL 18 has a built-in UUIDv7 generator: measured in the same rounds.
HAS_UUIDV7=$(P -At -c "SELECT current_setting('server_version_num')::int >= 180000")
[ "$HAS_UUIDV7" = t ] && QUERIES1+=("SELECT count(uuidv7()) FROM generate_series(1, $N)")
mapfile -t RUNS < <(runs_ms "${QUERIES1[@]}")
row1() { # row1 LABEL COLUMN [TEXT]: ms, M calls/s, x floor (per-round ratios)
  printf '%-40s %22s %10s   %s%s\n' "$1" "$(fmt_range $(col_stats $2))" "$(rate $N $(med $2))" \
    "$(fmt_ratio $(ratio_stats $2 0) "x floor")" "${3:-}"
}
printf '%-40s %22s %10s   %s\n' "query" "ms" "M calls/s" "ratio"
printf '%-40s %22s %10s   %s\n' "count(abs(x))  [executor floor]" "$(fmt_range $(col_stats 0))" "$(rate $N $(med 0))" "1.00"
row1 "count(id_gen.next_segment_id('s'))" 1
row1 "count(nextval()) CACHE 1" 2 "; id_gen is $(fmt_ratio $(ratio_stats 2 1) "x faster")"
row1 "count(nextval()) CACHE 1000" 3 "; id_gen is $(fmt_ratio $(ratio_stats 3 1) "x faster")"
# The per-call access check (issue: per-sequence USAGE): the same hot path without the
# comparison of the call site's access stamp, measured in the same rounds.
row1 "  same without the per-call access check" 4 "; checked / unchecked $(fmt_ratio $(ratio_stats 1 4))"
if [ "$HAS_UUIDV7" = t ]; then
  row1 "count(uuidv7())  [built-in, PG 18]" 5 "; id_gen is $(fmt_ratio $(ratio_stats 5 1) "x faster")"
fi
# Cold start: a new sequence with a small step, called at full speed at once. The worker
# must grow the step fast enough that callers seldom wait for a segment (target: <= 20
# waits). One run (a cold start happens once per sequence); figures, not a gate.
COLD_N=2000000
P -c "SELECT id_gen.create_sequence('cold', step => 100)" >/dev/null
out=$(once "SELECT count(id_gen.next_segment_id('cold')) FROM generate_series(1, $COLD_N)")
read -r _ cold_ms <<<"$out"
out=$(P -At -F ' ' -c "SELECT waits, refills, step FROM id_gen.status WHERE sequence = 'cold'")
read -r cold_waits cold_refills cold_step <<<"$out"
cold_target=$(awk -v w="${cold_waits:-}" 'BEGIN { print (w == "") ? "n/a" : (w <= 20) ? "met" : "MISSED" }')
printf '%-40s %22.0f %10s   waits %s (target <= 20: %s), refills %s, step now %s  [one run]\n' \
  "cold start: step 100, $COLD_N calls" "${cold_ms:-0}" "$(rate $COLD_N "${cold_ms:-1e99}")" "${cold_waits:-?}" "$cold_target" "${cold_refills:-?}" "${cold_step:-?}"

# bench.sh --hot: section 1 only (the hot path against the executor floor and sequences).
[ "$QUICK" = "--hot" ] && exit 0

echo
echo "-- 2. bulk: next_segment_ids (median of $REPS interleaved rounds; (min..max) over the rounds)"
BULK=$((N * 2))
P -c "SELECT count(*) FROM id_gen.next_segment_ids('bulk', $BULK)" >/dev/null
mapfile -t RUNS < <(runs_ms "SELECT count(*) FROM id_gen.next_segment_ids('bulk', $BULK)" \
  "SELECT count(*) FROM generate_series(1, $BULK)" \
  "SELECT cardinality(id_gen.next_segment_ids_array('bulk', $BULK))" \
  "SELECT sum(last_id - first_id + 1) FROM id_gen.next_segment_ranges('bulk', $BULK)")
row2() { printf '%-52s %22s ms %8s %s\n' "$1" "$(fmt_range $(col_stats $2))" "$(rate $BULK $(med $2))" "$3"; }
row2 "next_segment_ids('bulk', $BULK)  [SETOF, a row each]" 0 "M ids/s; $(fmt_ratio $(ratio_stats 0 1) "x the SRF floor")"
row2 "generate_series(1, $BULK)" 1 "M rows/s  (the SRF executor floor)"
row2 "next_segment_ids_array('bulk', $BULK)  [bigint[]]" 2 "M ids/s"
row2 "next_segment_ranges('bulk', $BULK)  [runs]" 3 "M ids/s"
# One call for 10^11 values: a handful of runs, no per-value work (one run, instant).
out=$(once "SELECT count(*) FROM id_gen.next_segment_ranges('bulk', 100000000000)")
read -r huge_runs huge_ms <<<"$out"
printf '%-52s %22.1f ms %8s runs  [one run]\n' "next_segment_ranges('bulk', 100000000000)  [runs]" "${huge_ms:-0}" "${huge_runs:-?}"

echo
echo "-- 3. pgbench, 8 clients, ${PGB_T}s each: INSERT with DEFAULT id vs bigserial (median of $PGB_ROUNDS rounds, order alternating; (min..max) over the rounds)"
P >/dev/null <<'SQL'
CREATE TABLE t_idgen (id bigint PRIMARY KEY DEFAULT id_gen.next_segment_id('ins'), v int);
CREATE TABLE t_serial (id bigserial PRIMARY KEY, v int);
SQL
echo "INSERT INTO t_idgen (v) VALUES (1);" > "$DIR/idgen.sql"
echo "INSERT INTO t_serial (v) VALUES (1);" > "$DIR/serial.sql"
pgb() { "$PG_BIN/pgbench" -n -h "$DIR" -p "$PORT" -U postgres -c 8 -j 2 -T "$PGB_T" -f "$1" postgres 2>&1 | sed -n 's/^tps = \([0-9.]*\).*/\1/p'; }
pgb "$DIR/idgen.sql" >/dev/null  # warm-up
RUNS=()
for r in $(seq "$PGB_ROUNDS"); do  # rounds A B, B A, A B, ...: one ratio A / B per round
  if [ $((r % 2)) -eq 1 ]; then ta=$(pgb "$DIR/idgen.sql"); tb=$(pgb "$DIR/serial.sql")
  else tb=$(pgb "$DIR/serial.sql"); ta=$(pgb "$DIR/idgen.sql"); fi
  RUNS+=("$ta $tb")
done
printf 'DEFAULT id_gen.next_segment_id: %s tps   bigserial: %s tps   ratio %s\n' \
  "$(fmt_range $(col_stats 0))" "$(fmt_range $(col_stats 1))" "$(fmt_ratio $(ratio_stats 0 1))"

if [ -f "$(dirname "$0")/bench_more.sh" ]; then
  source "$(dirname "$0")/bench_more.sh"
fi
source "$(dirname "$0")/bench_authority.sh"
source "$(dirname "$0")/bench_cluster.sh"
source "$(dirname "$0")/bench_routing.sh"
