#!/usr/bin/env bash
# The MariaDB plugin's cost per call: id_gen_shard_gene() against MariaDB's built-in
# crc32() over the same rows (the floor: the cheapest built-in hash, one call per row), for
# BIGINT and string owners, plus SUM(o) (the scan alone) to show the per-call cost net of
# the scan. Each round runs every query once, in a rotating order, timed by the server
# (NOW(6) around the statement, no client round trip); prints the median with the min–max
# spread over the rounds. Never a CI gate.
# Usage: bench/bench_mariadb.sh [--quick]     (builds crates/id_gen_mysql; needs mariadbd)
source "$(dirname "$0")/../scripts/common.sh"
QUICK=${1:-}
N=2000000; REPS=7
if [ "$QUICK" = "--quick" ]; then N=300000; REPS=3; fi
DIR=/tmp/idg_bench_maria PORT=54358
cd "$REPO_ROOT"
log "building the plugin"
cargo build -q -p id_gen_mysql --release
maria_start "$DIR" "$PORT"
trap 'maria_stop "$DIR"' EXIT
install -o mysql -g mysql -m 0444 target/release/libid_gen_mysql.so "$DIR/plugin/"
M() { mcli "$DIR" bench "$@"; }
mcli "$DIR" -e "CREATE DATABASE bench; CREATE FUNCTION id_gen_shard_gene RETURNS INTEGER SONAME 'libid_gen_mysql.so'"
log "loading $N rows"
M -e "CREATE TABLE t (id INT PRIMARY KEY, o BIGINT NOT NULL, s VARCHAR(40) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL) ENGINE=InnoDB;
      INSERT INTO t SELECT seq, CAST(seq * 2654435761 % 1000000007 AS SIGNED) - 500000000, CONCAT('user-', seq, '@example.com') FROM seq_1_to_$N;
      ANALYZE TABLE t" >/dev/null
M -e "SELECT SUM(o) FROM t; SELECT SUM(LENGTH(s)) FROM t" >/dev/null   # warm the buffer pool

NAMES=(scan crc32_int gene_int crc32_str gene_str)
EXPRS=("o" "crc32(o)" "id_gen_shard_gene(o)" "crc32(s)" "id_gen_shard_gene(s)")
K=${#EXPRS[@]}
# One line per round: the microseconds of each query, in NAMES order.
rounds() {
  local r i j sql
  for r in $(seq 0 $((REPS - 1))); do
    sql=""
    for j in $(seq 0 $((K - 1))); do
      i=$(( (j + r) % K ))   # rotate the order every round
      sql+="SET @t = NOW(6); SELECT SUM(${EXPRS[$i]}) INTO @x FROM t; SELECT $i, TIMESTAMPDIFF(MICROSECOND, @t, NOW(6));"
    done
    M -e "$sql" | sort -n | awk '{ printf "%s%s", (NR > 1 ? " " : ""), $2 } END { print "" }'
  done
}
mapfile -t RUNS < <(rounds)
stats() { sort -g | awk '{ v[NR] = $1 } END { printf "%.2f %.2f %.2f", (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2), v[1], v[NR] }'; }
# per_call I: ns per row of column I; net I: ns per row of column I minus the scan of the
# same round (the function call alone; noisy: a difference of two noisy numbers);
# ratio I J: column I / column J per round.
per_call() { printf '%s\n' "${RUNS[@]}" | awk -v i=$(($1 + 1)) -v n="$N" '{ print $i * 1000 / n }' | stats; }
net() { printf '%s\n' "${RUNS[@]}" | awk -v i=$(($1 + 1)) -v n="$N" '{ print ($i - $1) * 1000 / n }' | stats; }
ratio() { printf '%s\n' "${RUNS[@]}" | awk -v i=$(($1 + 1)) -v j=$(($2 + 1)) '{ print $i / $j }' | stats; }
fmt() { awk -v m="$1" -v lo="$2" -v hi="$3" -v u="${4:-}" 'BEGIN { printf "%s (%s..%s)%s", m, lo, hi, u }'; }

echo
echo "MariaDB $(mcli "$DIR" -e 'SELECT VERSION()'), $N rows, $REPS interleaved rounds; median (min..max)"
echo "rounds (µs: ${NAMES[*]}):"; printf '  %s\n' "${RUNS[@]}"
printf '%-34s %s\n' "SUM(o), the scan alone" "$(fmt $(per_call 0) ' ns/row')"
printf '%-34s %s\n' "crc32(o), BIGINT owner" "$(fmt $(per_call 1) ' ns/row')"
printf '%-34s %s\n' "id_gen_shard_gene(o), BIGINT owner" "$(fmt $(per_call 2) ' ns/row')"
printf '%-34s %s\n' "crc32(s), string owner" "$(fmt $(per_call 3) ' ns/row')"
printf '%-34s %s\n' "id_gen_shard_gene(s), string owner" "$(fmt $(per_call 4) ' ns/row')"
echo
printf '%-48s %s\n' "ratio gene / crc32, BIGINT owners (query)" "$(fmt $(ratio 2 1))"
printf '%-48s %s\n' "ratio gene / crc32, string owners (query)" "$(fmt $(ratio 4 3))"
echo "per call, net of the scan (ns/row): crc32(o) $(fmt $(net 1)), gene(o) $(fmt $(net 2)),"
echo "                                     crc32(s) $(fmt $(net 3)), gene(s) $(fmt $(net 4))"
# Same answers as the core's check values, so the numbers above are of working calls.
[ "$(mcli "$DIR" -e "SELECT id_gen_shard_gene(42)")" = 16043 ] || { echo "wrong gene" >&2; exit 1; }
