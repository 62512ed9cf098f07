# Sourced by bench/bench.sh (`bench/bench.sh --scale` runs only this): what the number of route
# ranges costs a coordinator (docs/design.md §11.7). One coordinator and SCALE_SHARDS shards
# (default 2) on this machine; one database per fleet size and layout on every server
# (per_shard_<N>, by_ownership_<N>, per_range_<N>; SCALE_LAYOUTS), each with its own route
# table of N ranges alternating
# between the shards (N = SCALE_SIZES, default 16 256 1024 4096) and SCALE_TABLES tables
# (default 1) of 20,000 rows laid out that way, so that all sizes are up at once and measured
# side by side in interleaved rounds. Every server has max_locks_per_transaction raised (the
# per_range tables need it at 2,048 ranges and up; per_shard ones do not) and wal_level =
# logical (moves).
# Per size and layout, pgbench -c 2 -j 2 for SCALE_T seconds per round (median of
# SCALE_ROUNDS rounds, sizes in alternating order, ratios against the 16-range database of
# the same layout with the spread over the rounds):
#   point lookup by id, prepared and simple protocol; a lookup on a new connection each time
#   (-C); a lookup by owner (prepared); INSERT by owner; a cross-shard aggregate; and the
#   latency of a lookup by id through the coordinator as a multiple of the same lookup on
#   the shard (shard_1's rows, pgbench on shard_1 directly, simple protocol) and as a
#   multiple of the same lookup through a plain postgres_fdw foreign table of shard_1's
#   table (no id_gen in its path: what is postgres_fdw's), and with one client (simple and
#   prepared: latency alone, where 2 clients on 2 cores measure the CPU); once, the
#   sixth execution of a prepared lookup on the shard (the plan cache's generic plan);
# once per size and layout: the planning time of a new backend's first lookup (EXPLAIN
# SUMMARY), its memory after one lookup, and the durations of distribute_table, a route
# change, a split of one range (split_route) and a move of one range (move_genes, with its
# fence). Figures, never a gate.

SC_COO=/tmp/idg_bench_sc_coord SC_COO_P=54480
sc_shard_dir() { echo "/tmp/idg_bench_sc_shard$1"; }
sc_shard_port() { echo $((54480 + $1)); }
SC_SHARDS=${SCALE_SHARDS:-2}
read -r -a SC_SIZES <<< "${SCALE_SIZES:-16 256 1024 4096}"
SC_TABLES=${SCALE_TABLES:-1}
# by_ownership: per_shard here, one table of rows behind a view of the owned rows on each shard.
read -r -a SC_LAYOUTS <<< "${SCALE_LAYOUTS:-per_shard by_ownership per_range}"
SC_T=${SCALE_T:-3} SC_ROUNDS=${SCALE_ROUNDS:-3} SC_VALUES=50 SC_ROWS=20000
[ "${QUICK:-}" = "--quick" ] && { SC_T=2; SC_ROUNDS=2; }
# wal_retrieve_retry_interval: the moves of all sizes run on the same servers one after
# another, and on PostgreSQL 15 a launcher starts subscriptions at most once per that interval
# (5 s by default): each move would otherwise wait for the one before it (docs/guide/scale-out.md).
SC_CONF=("shared_buffers = 64MB" "max_connections = 60" "max_locks_per_transaction = 1024"
         "wal_level = logical" "max_wal_senders = 10" "max_replication_slots = 20"
         "wal_retrieve_retry_interval = 200ms")
trap 'cluster_stop "$SC_COO"; for i in $(seq "$SC_SHARDS"); do cluster_stop "$(sc_shard_dir "$i")"; done' EXIT
scq() { local db=$1; shift; cpsql "$SC_COO" "$SC_COO_P" -d "$db" -At "$@"; }
scs() { local i=$1 db=$2; shift 2; cpsql "$(sc_shard_dir "$i")" "$(sc_shard_port "$i")" -d "$db" -At "$@"; }

echo
echo "-- 9. fleet scale: route ranges ${SC_SIZES[*]} alternating over $SC_SHARDS shards, $SC_TABLES table(s) of $SC_ROWS rows, layouts ${SC_LAYOUTS[*]} (pgbench -c 2 -j 2 -T $SC_T, median of $SC_ROUNDS rounds, sizes interleaved; ratio to the ${SC_SIZES[0]}-range database of the same layout, (min..max) over the rounds)"
for i in $(seq "$SC_SHARDS"); do
  cluster_start "$(sc_shard_dir "$i")" "$(sc_shard_port "$i")" "${SC_CONF[@]}"
done
cluster_start "$SC_COO" "$SC_COO_P" "${SC_CONF[@]}"
declare -A DIST_MS SPLIT_MS MOVE_MS FENCE_MS ROUTE_MS PLAN_MS MEM_KB GENERIC_MS
# One database per size and layout (a split or a route change then touches only that layout).
for n in "${SC_SIZES[@]}"; do
  for layout in "${SC_LAYOUTS[@]}"; do
    db=${layout}_$n
    cpsql "$SC_COO" "$SC_COO_P" -c "CREATE DATABASE $db" >/dev/null
    for i in $(seq "$SC_SHARDS"); do
      cpsql "$(sc_shard_dir "$i")" "$(sc_shard_port "$i")" -c "CREATE DATABASE $db" >/dev/null
      scs "$i" "$db" -c "CREATE EXTENSION id_gen" -c "SELECT id_gen.create_sequence('orders', start => 100000000000, step => 10000)" >/dev/null
    done
    scq "$db" -c "CREATE EXTENSION id_gen" -c "CREATE EXTENSION postgres_fdw" -c "CREATE EXTENSION dblink" \
      -c "SELECT id_gen.create_sequence('orders', step => 10000)" >/dev/null
    for i in $(seq "$SC_SHARDS"); do
      scq "$db" >/dev/null <<SQL
CREATE SERVER shard_$i FOREIGN DATA WRAPPER postgres_fdw
  OPTIONS (host '$(sc_shard_dir "$i")', port '$(sc_shard_port "$i")', dbname '$db', connect_timeout '2');
CREATE USER MAPPING FOR postgres SERVER shard_$i;
SQL
    done
    scq "$db" -c "SET client_min_messages = warning" \
      -c "SELECT count(id_gen.set_route(k * (65536 / $n) + 65536 / $n - 1, 'shard_' || (k % $SC_SHARDS + 1))) FROM generate_series(0, $n - 1) k" >/dev/null
    for t in $(seq "$SC_TABLES"); do
      scq "$db" -c "CREATE TABLE orders_$t (id bigint PRIMARY KEY, owner_id bigint NOT NULL, amount bigint NOT NULL DEFAULT 0)" >/dev/null
      d=$(ms scq "$db" -c "SET client_min_messages = warning" \
            -c "SELECT id_gen.distribute_table('orders_$t', 'id', 'owner_id', 'orders', layout => '$layout')")
      [ "$t" = 1 ] && DIST_MS[$n.$layout]=$d
      scq "$db" -c "INSERT INTO orders_$t (owner_id, amount) SELECT o % 5000 + 1, 1 FROM generate_series(1, $SC_ROWS) o" >/dev/null
    done
  done
done
# The same owners and ids in every database (owners 1 .. 5000 exist in all; ids differ per
# database, so each gets its own scripts).
mkdir -p "$SC_COO/pgb"
sc_scripts() { # sc_scripts NAME SQL(with :v) VALUES...: one script per value; prints the -f options
  local name=$1 sql=$2 k=0 v; shift 2
  for v in "$@"; do
    k=$((k + 1))
    printf '\\set v %s\n%s\n' "$v" "$sql" > "$SC_COO/pgb/$name.$k.sql"
    printf -- '-f %s ' "$SC_COO/pgb/$name.$k.sql"
  done
}
declare -A BY_ID BY_OWNER INS AGG
mapfile -t OWNERS < <(seq 1 97 5000 | head -n "$SC_VALUES")
for n in "${SC_SIZES[@]}"; do
  for layout in "${SC_LAYOUTS[@]}"; do
    tab=orders_1
    mapfile -t IDS < <(scq "${layout}_$n" -c "SELECT id FROM $tab ORDER BY hashint8(id) LIMIT $SC_VALUES")
    BY_ID[$n.$layout]=$(sc_scripts "id_${n}_$layout" "SELECT * FROM $tab WHERE id = :v;" "${IDS[@]}")
    BY_OWNER[$n.$layout]=$(sc_scripts "own_${n}_$layout" "SELECT * FROM $tab WHERE owner_id = :v AND id BETWEEN id_gen.owner_first_id(:v::bigint) AND id_gen.owner_last_id(:v::bigint);" "${OWNERS[@]}")
    INS[$n.$layout]=$(sc_scripts "ins_${n}_$layout" "INSERT INTO $tab (owner_id, amount) VALUES (:v, 1);" "${OWNERS[@]}")
    AGG[$n.$layout]=$(sc_scripts "agg_${n}_$layout" "SELECT count(*), sum(amount) FROM $tab WHERE amount >= :v - :v;" 1)
  done
done
# sc_pgb DB T PGBENCH-ARGS...: prints "tps latency_ms"; fails on a failed transaction.
# 2 clients (SC_PGB_CLIENTS: another number).
sc_pgb() {
  local db=$1 t=$2 out clients=${SC_PGB_CLIENTS:-2}; shift 2
  # shellcheck disable=SC2068
  out=$("$PG_BIN/pgbench" -n -U postgres -h "${SC_PGB_HOST:-$SC_COO}" -p "${SC_PGB_PORT:-$SC_COO_P}" -c "$clients" -j "$clients" -T "$t" "$@" "$db" 2>&1) || { printf '%s\n' "$out" | tail -5 >&2; return 1; }
  printf '%s\n' "$out" | awk '/^latency average = / { l = $4 } /^tps = / { t = $3 } /^number of failed transactions: / { f = $5 }
    END { if (t == "" || l == "" || (f != "" && f != 0)) exit 1; print t, l }' || { printf '%s\n' "$out" | tail -5 >&2; return 1; }
}
# The same lookups by id of shard_1's rows (simple protocol), through the coordinator and on
# shard_1 itself (the shard's table has the coordinator's table's name): the coordinator's
# latency as a multiple of the shard's, per size and layout. (Prepared statements on the
# shard are measured once per size below: their sixth execution builds a generic plan.)
# The same lookups through a plain postgres_fdw foreign table of shard_1's table on the
# coordinator (no id_gen in its path): what of the coordinator's latency is postgres_fdw's.
# And through the coordinator with id_gen.direct_reads = off (postgres_fdw's cursor instead
# of id_gen's direct read, src/direct_read/). With 2 clients on this 2-core machine the
# coordinator's path (three processes a lookup against two) is bound by the CPU; the same
# lookups with one client (simple and prepared) measure its latency alone.
declare -A ON_SHARD VIA_COO PLAIN VIA_PLAIN VIA_FDW ON_SHARD_1 VIA_COO_1 ON_SHARD_1P VIA_COO_1P
for n in "${SC_SIZES[@]}"; do
  for layout in "${SC_LAYOUTS[@]}"; do
    mapfile -t IDS < <(scq "${layout}_$n" -c "SELECT id FROM orders_1 WHERE id_gen.route_gene((id >> 47)::integer) = 'shard_1' ORDER BY hashint8(id) LIMIT $SC_VALUES")
    ON_SHARD[$n.$layout]=$(sc_scripts "shard1_${n}_$layout" "SELECT * FROM orders_1 WHERE id = :v;" "${IDS[@]}")
    scq "${layout}_$n" -c "CREATE FOREIGN TABLE orders_1_plain (id bigint, owner_id bigint, amount bigint)
                           SERVER shard_1 OPTIONS (schema_name 'public', table_name 'orders_1')" >/dev/null
    PLAIN[$n.$layout]=$(sc_scripts "plain_${n}_$layout" "SELECT * FROM orders_1_plain WHERE id = :v;" "${IDS[@]}")
  done
done
# What each measure runs: "MODE SCRIPTS-ARRAY".
MEASURES=("prepared lookup by id|-M prepared|BY_ID" "simple lookup by id|-M simple|BY_ID"
          "lookup by id, new connection each (-C)|-M simple -C|BY_ID" "prepared lookup by owner|-M prepared|BY_OWNER"
          "INSERT by owner|-M simple|INS" "cross-shard aggregate|-M simple|AGG")
declare -A TPS ON_SHARD_TPS
for r in $(seq "$SC_ROUNDS"); do
  if [ $((r % 2)) -eq 1 ]; then order=("${SC_SIZES[@]}"); else order=(); for ((k = ${#SC_SIZES[@]} - 1; k >= 0; k--)); do order+=("${SC_SIZES[k]}"); done; fi
  for m in "${!MEASURES[@]}"; do
    IFS='|' read -r _ mode arr <<< "${MEASURES[m]}"
    for n in "${order[@]}"; do
      for layout in "${SC_LAYOUTS[@]}"; do
        declare -n scripts=$arr
        # shellcheck disable=SC2086
        res=$(sc_pgb "${layout}_$n" "$SC_T" $mode ${scripts[$n.$layout]})
        TPS[$m.$n.$layout]+="${res% *} "
        unset -n scripts
      done
    done
  done
  for n in "${order[@]}"; do
    for layout in "${SC_LAYOUTS[@]}"; do
      # shellcheck disable=SC2086
      res=$(sc_pgb "${layout}_$n" "$SC_T" -M simple ${ON_SHARD[$n.$layout]})
      VIA_COO[$n.$layout]+="${res% *} "
      # shellcheck disable=SC2086
      res=$(SC_PGB_HOST=$(sc_shard_dir 1) SC_PGB_PORT=$(sc_shard_port 1) sc_pgb "${layout}_$n" "$SC_T" -M simple ${ON_SHARD[$n.$layout]})
      ON_SHARD_TPS[$n.$layout]+="${res% *} "
      # shellcheck disable=SC2086
      res=$(sc_pgb "${layout}_$n" "$SC_T" -M simple ${PLAIN[$n.$layout]})
      VIA_PLAIN[$n.$layout]+="${res% *} "
      # shellcheck disable=SC2086
      res=$(PGOPTIONS="-c id_gen.direct_reads=off" sc_pgb "${layout}_$n" "$SC_T" -M simple ${ON_SHARD[$n.$layout]})
      VIA_FDW[$n.$layout]+="${res% *} "
      for mode in simple prepared; do
        [ "$mode" = simple ] && sfx= || sfx=P
        declare -n coo1=VIA_COO_1$sfx shard1=ON_SHARD_1$sfx
        # shellcheck disable=SC2086
        res=$(SC_PGB_CLIENTS=1 sc_pgb "${layout}_$n" "$SC_T" -M $mode ${ON_SHARD[$n.$layout]})
        coo1[$n.$layout]+="${res% *} "
        # shellcheck disable=SC2086
        res=$(SC_PGB_CLIENTS=1 SC_PGB_HOST=$(sc_shard_dir 1) SC_PGB_PORT=$(sc_shard_port 1) sc_pgb "${layout}_$n" "$SC_T" -M $mode ${ON_SHARD[$n.$layout]})
        shard1[$n.$layout]+="${res% *} "
        unset -n coo1 shard1
      done
    done
  done
done
for n in "${SC_SIZES[@]}"; do
  for layout in "${SC_LAYOUTS[@]}"; do
    db=${layout}_$n
    # On shard_1, a prepared lookup's sixth execution, where PostgreSQL's plan cache builds a
    # generic plan once to compare its cost (over every partition of the table), for a second
    # statement of a session (the first also fills the relation cache).
    GENERIC_MS[$n.$layout]=$(printf '%s\n' "PREPARE a(bigint) AS SELECT * FROM orders_1 WHERE id = \$1;" \
        "PREPARE b(bigint) AS SELECT * FROM orders_1 WHERE id = \$1;" \
        "EXECUTE a(1); EXECUTE a(1); EXECUTE a(1); EXECUTE a(1); EXECUTE a(1); EXECUTE a(1);" \
        "EXECUTE b(1); EXECUTE b(1); EXECUTE b(1); EXECUTE b(1); EXECUTE b(1);" '\timing on' "EXECUTE b(1);" \
      | scs 1 "$db" -f - | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p')
    [ -n "${GENERIC_MS[$n.$layout]}" ] || { echo "bench: no timing of the prepared lookup on shard_1 ($db)" >&2; exit 1; }
    # A new backend's first lookup: planning time (EXPLAIN SUMMARY) and its memory after it.
    PLAN_MS[$n.$layout]=$(scq "$db" -c "EXPLAIN (SUMMARY) SELECT * FROM orders_1 WHERE id = 42" | sed -n 's/^Planning Time: \([0-9.]*\) ms/\1/p')
    MEM_KB[$n.$layout]=$(scq "$db" -c "SELECT * FROM orders_1 WHERE id = 42" -c "SELECT (sum(total_bytes) / 1024)::bigint FROM pg_backend_memory_contexts")
    # A route change (every table re-derived from the route table, the shards in step already),
    # a split of the second range, and a move of the third range (with its fence).
    ROUTE_MS[$n.$layout]=$(ms scq "$db" -c "SET client_min_messages = warning" -c "SELECT id_gen.sync_distributed_tables()")
    lo=$((65536 / n)); hi=$((2 * 65536 / n - 1))
    SPLIT_MS[$n.$layout]=$(ms scq "$db" -c "SET client_min_messages = warning" -c "CALL id_gen.split_route($(( (lo + hi) / 2 )))")
    lo=$((2 * 65536 / n)); hi=$((3 * 65536 / n - 1))
    to=$(scq "$db" -c "SELECT CASE WHEN id_gen.route_gene($lo) = 'shard_1' THEN 'shard_2' ELSE 'shard_1' END")
    MOVE_MS[$n.$layout]=$(ms scq "$db" -c "SET client_min_messages = warning" -c "CALL id_gen.move_genes($lo, $hi, '$to')")
    FENCE_MS[$n.$layout]=$(scq "$db" -c "SELECT fence_ms FROM id_gen.moves WHERE lower_gene = $lo AND phase = 'done'")
    [ -n "${FENCE_MS[$n.$layout]}" ] || { echo "bench: the move of genes $lo .. $hi ($db) did not finish" >&2; exit 1; }
  done
done
base=${SC_SIZES[0]}
printf '%-48s' ""; for n in "${SC_SIZES[@]}"; do printf ' %27s' "$n ranges"; done; echo
for m in "${!MEASURES[@]}"; do
  IFS='|' read -r label _ _ <<< "${MEASURES[m]}"
  for layout in "${SC_LAYOUTS[@]}"; do
    printf '%-48s' "$label, $layout"
    for n in "${SC_SIZES[@]}"; do
      read -r -a a <<< "${TPS[$m.$n.$layout]}"; read -r -a b <<< "${TPS[$m.$base.$layout]}"
      RUNS=(); for k in "${!a[@]}"; do RUNS+=("${a[k]} ${b[k]}"); done
      if [ "$n" = "$base" ]; then printf ' %27s' "$(fmt_range $(col_stats 0)) tps"; else printf ' %27s' "$(fmt_ratio $(ratio_stats 0 1) x)"; fi
    done
    echo
  done
done
# latency_row LABEL FAST SLOW LAYOUT: per size, the tps in the array FAST over that in SLOW
# (SLOW's latency as a multiple of FAST's), median and spread over the rounds.
latency_row() {
  local -n fast=$2 slow=$3
  local n k a b
  printf '%-48s' "$1"
  for n in "${SC_SIZES[@]}"; do
    read -r -a a <<< "${fast[$n.$4]}"; read -r -a b <<< "${slow[$n.$4]}"
    RUNS=(); for k in "${!a[@]}"; do RUNS+=("${a[k]} ${b[k]}"); done
    printf ' %27s' "$(fmt_ratio $(ratio_stats 0 1) x)"
  done
  echo
}
for layout in "${SC_LAYOUTS[@]}"; do
  latency_row "lookup by id: coordinator / shard latency, $layout" ON_SHARD_TPS VIA_COO "$layout"
  latency_row "  the same, one client, $layout" ON_SHARD_1 VIA_COO_1 "$layout"
  latency_row "  the same, one client, prepared, $layout" ON_SHARD_1P VIA_COO_1P "$layout"
  latency_row "  coordinator / plain postgres_fdw, $layout" VIA_PLAIN VIA_COO "$layout"
  latency_row "  direct_reads off / on, $layout" VIA_COO VIA_FDW "$layout"
done
for layout in "${SC_LAYOUTS[@]}"; do
  printf '%-48s' "first lookup's planning (ms), $layout"; for n in "${SC_SIZES[@]}"; do printf ' %27s' "${PLAN_MS[$n.$layout]}"; done; echo
  printf '%-48s' "shard: prepared lookup's 6th execution (ms), $layout"; for n in "${SC_SIZES[@]}"; do printf ' %27s' "${GENERIC_MS[$n.$layout]}"; done; echo
  printf '%-48s' "backend memory after it (kB), $layout"; for n in "${SC_SIZES[@]}"; do printf ' %27s' "${MEM_KB[$n.$layout]}"; done; echo
  printf '%-48s' "distribute_table (ms), $layout"; for n in "${SC_SIZES[@]}"; do printf ' %27s' "${DIST_MS[$n.$layout]}"; done; echo
  printf '%-48s' "route change, $SC_TABLES table(s) (ms), $layout"; for n in "${SC_SIZES[@]}"; do printf ' %27s' "${ROUTE_MS[$n.$layout]}"; done; echo
  printf '%-48s' "split_route of one range (ms), $layout"; for n in "${SC_SIZES[@]}"; do printf ' %27s' "${SPLIT_MS[$n.$layout]}"; done; echo
  printf '%-48s' "move_genes of one range (ms), $layout"; for n in "${SC_SIZES[@]}"; do printf ' %27s' "${MOVE_MS[$n.$layout]}"; done; echo
  printf '%-48s' "  its fence (ms), $layout"; for n in "${SC_SIZES[@]}"; do printf ' %27s' "${FENCE_MS[$n.$layout]}"; done; echo
done
echo "(per_shard: one foreign table per shard here, a partition per owned range on the shards; by_ownership: the same here, one table of rows and a view on each shard; per_range: two relations per range here; one database per size and layout. tps of the ${SC_SIZES[0]}-range database, then x that.)"
