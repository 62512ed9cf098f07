# Sourced by bench/bench.sh (its helpers: stats, col_stats, ratio_stats, fmt_range,
# fmt_ratio; `bench/bench.sh --cluster` runs only this): what the coordinator of a
# distributed table costs (docs/guide/scale-out.md "Sharded deployments"). A coordinator and 2 shards,
# small instances on this machine, one table distributed with id_gen.distribute_table;
# measured side by side in one run, in interleaved rounds (order alternating):
#   (a) INSERT TPS naming only the customer through the coordinator against the same
#       insert done directly on shard_1 with id_gen.gene_order_id (an application that
#       routes by itself);
#   (b) point-lookup latency by id through the coordinator against directly on shard_1.
# Customers and ids are inline values of generated pgbench scripts (one script per value,
# pgbench picks one at random per transaction), the same values on both sides, so the
# two sides differ only in where the statement runs. Figures, never a gate.

CL_COO=/tmp/idg_bench_cl_coord CL_COO_P=54470
cl_shard_dir() { echo "/tmp/idg_bench_cl_shard$1"; }
cl_shard_port() { echo $((54470 + $1)); }
CL_ROUNDS=5 CL_T=4 CL_VALUES=100  # pgbench allows at most 128 scripts
[ "${QUICK:-}" = "--quick" ] && CL_ROUNDS=3
CL_SMALL=("shared_buffers = 32MB" "max_connections = 30")
trap 'cluster_stop "$CL_COO"; cluster_stop "$(cl_shard_dir 1)"; cluster_stop "$(cl_shard_dir 2)"; [ -z "${CDIR:-}" ] || cluster_stop "$CDIR"; cluster_stop "$DIR"' EXIT
clq() { cpsql "$CL_COO" "$CL_COO_P" -At "$@"; }
clsq() { local i=$1; shift; cpsql "$(cl_shard_dir "$i")" "$(cl_shard_port "$i")" -At "$@"; }

echo
echo "-- 8. coordinator (postgres_fdw) vs directly on the shard: pgbench -c 2 -j 2 -T ${CL_T} each, coordinator + 2 shards on this machine (median of $CL_ROUNDS rounds, order alternating; (min..max) over the rounds)"
for i in 1 2; do
  cluster_start "$(cl_shard_dir $i)" "$(cl_shard_port $i)" "${CL_SMALL[@]}"
  # The shards' sequences start far above the coordinator's: both compute ids of the
  # same genes here (a real deployment shares one authority; bench_authority.sh).
  clsq $i -c "CREATE EXTENSION id_gen" -c "SELECT id_gen.create_sequence('orders', start => 100000000000, step => 10000)" >/dev/null
done
cluster_start "$CL_COO" "$CL_COO_P" "${CL_SMALL[@]}"
clq -c "CREATE EXTENSION id_gen" -c "CREATE EXTENSION postgres_fdw" -c "CREATE EXTENSION dblink" -c "SELECT id_gen.create_sequence('orders', step => 10000)" >/dev/null
for i in 1 2; do
  clq >/dev/null <<SQL
CREATE SERVER shard_$i FOREIGN DATA WRAPPER postgres_fdw
  OPTIONS (host '$(cl_shard_dir $i)', port '$(cl_shard_port $i)', dbname 'postgres', connect_timeout '2');
CREATE USER MAPPING FOR postgres SERVER shard_$i;
CREATE USER MAPPING FOR PUBLIC SERVER shard_$i OPTIONS (user 'postgres', password_required 'false');
SQL
done
clq >/dev/null <<'SQL'
SET client_min_messages = warning;
SELECT id_gen.set_route(32767, 'shard_1');
SELECT id_gen.set_route(65535, 'shard_2');
CREATE TABLE orders (
  id          bigint PRIMARY KEY,
  customer_id bigint NOT NULL,
  amount      numeric NOT NULL DEFAULT 0,
  created_at  timestamptz NOT NULL DEFAULT now()
);
SELECT id_gen.distribute_table('orders', 'id', 'customer_id', 'orders');
SQL
# CL_VALUES customers that route to shard_1; 20000 rows of them on shard_1 (inserted there
# directly, as an application that routes by itself would), and CL_VALUES of their ids.
mapfile -t CL_CUST < <(clq -c "SELECT c FROM generate_series(1, 100000) c WHERE id_gen.route_owner(c::bigint) = 'shard_1' ORDER BY c LIMIT $CL_VALUES")
clsq 1 -c "INSERT INTO orders (id, customer_id, amount) SELECT id_gen.gene_order_id('orders', c), c, 1 FROM unnest('{$(IFS=,; echo "${CL_CUST[*]}")}'::bigint[]) c, generate_series(1, 200)" \
  -c "VACUUM ANALYZE orders" >/dev/null
mapfile -t CL_IDS < <(clsq 1 -c "SELECT id FROM orders ORDER BY random() LIMIT $CL_VALUES")
[ "${#CL_CUST[@]}" -eq "$CL_VALUES" ] && [ "${#CL_IDS[@]}" -eq "$CL_VALUES" ] || { echo "bench_cluster: setup found ${#CL_CUST[@]} customers, ${#CL_IDS[@]} ids" >&2; exit 1; }
# One script per value: -f S_1 -f S_2 ... (pgbench picks one per transaction, uniformly).
cl_scripts() { # cl_scripts NAME "\set LINE" SQL VALUES...: writes the scripts, prints the -f options
  local name=$1 set=$2 sql=$3 k=0 v; shift 3
  mkdir -p "$CL_COO/pgb"
  for v in "$@"; do
    k=$((k + 1))
    printf '%s %s\n%s\n' "$set" "$v" "$sql" > "$CL_COO/pgb/$name.$k.sql"
    printf -- '-f %s ' "$CL_COO/pgb/$name.$k.sql"
  done
}
INS_COO=$(cl_scripts ins_coo '\set c' "INSERT INTO orders (customer_id, amount) VALUES (:c, 1);" "${CL_CUST[@]}")
INS_DIR=$(cl_scripts ins_dir '\set c' "INSERT INTO orders (id, customer_id, amount) VALUES (id_gen.gene_order_id('orders', :c), :c, 1);" "${CL_CUST[@]}")
SEL_COO=$(cl_scripts sel_coo '\set id' "SELECT * FROM orders WHERE id = :id;" "${CL_IDS[@]}")
SEL_DIR=$(cl_scripts sel_dir '\set id' "SELECT * FROM orders WHERE id = :id;" "${CL_IDS[@]}")
# cl_pgb coo|dir T PGBENCH-ARGS...: prints "tps latency_ms"; fails on a failed transaction.
cl_pgb() {
  local where=$1 t=$2 out; shift 2
  if [ "$where" = coo ]; then set -- -h "$CL_COO" -p "$CL_COO_P" "$@"; else set -- -h "$(cl_shard_dir 1)" -p "$(cl_shard_port 1)" "$@"; fi
  # shellcheck disable=SC2068
  out=$("$PG_BIN/pgbench" -n -U postgres -c 2 -j 2 -T "$t" "$@" postgres 2>&1) || { printf '%s\n' "$out" | tail -5 >&2; return 1; }
  printf '%s\n' "$out" | awk '/^latency average = / { l = $4 } /^tps = / { t = $3 } /^number of failed transactions: / { f = $5 }
    END { if (t == "" || l == "" || (f != "" && f != 0)) exit 1; print t, l }' || { printf '%s\n' "$out" | tail -5 >&2; return 1; }
}
# shellcheck disable=SC2086
{ cl_pgb coo 2 $INS_COO >/dev/null; cl_pgb dir 2 $INS_DIR >/dev/null
  cl_pgb coo 2 -M prepared $SEL_COO >/dev/null; cl_pgb dir 2 -M prepared $SEL_DIR >/dev/null; }  # warm-up
INS_RUNS=() SEL_RUNS=()
for r in $(seq "$CL_ROUNDS"); do  # rounds A B, B A, A B, ...: one ratio A / B per round
  # shellcheck disable=SC2086
  if [ $((r % 2)) -eq 1 ]; then
    ia=$(cl_pgb coo "$CL_T" $INS_COO); ib=$(cl_pgb dir "$CL_T" $INS_DIR)
    sa=$(cl_pgb coo "$CL_T" -M prepared $SEL_COO); sb=$(cl_pgb dir "$CL_T" -M prepared $SEL_DIR)
  else
    ib=$(cl_pgb dir "$CL_T" $INS_DIR); ia=$(cl_pgb coo "$CL_T" $INS_COO)
    sb=$(cl_pgb dir "$CL_T" -M prepared $SEL_DIR); sa=$(cl_pgb coo "$CL_T" -M prepared $SEL_COO)
  fi
  INS_RUNS+=("${ia% *} ${ib% *}")   # tps
  SEL_RUNS+=("${sa#* } ${sb#* }")   # latency average, ms
done
total=$(clsq 1 -c "SELECT count(*) FROM orders")
[ "$(clsq 2 -c "SELECT count(*) FROM orders")" = 0 ] || { echo "bench_cluster: rows landed on shard_2" >&2; exit 1; }
printf '%-58s %24s %24s   %s\n' "" "through the coordinator" "directly on shard_1" "coordinator / direct"
RUNS=("${INS_RUNS[@]}")
printf '%-58s %20s tps %20s tps   %s\n' "(a) INSERT, customer of shard_1 (simple protocol)" \
  "$(fmt_range $(col_stats 0))" "$(fmt_range $(col_stats 1))" "$(fmt_ratio $(ratio_stats 0 1) "x the TPS")"
RUNS=("${SEL_RUNS[@]}")
printf '%-58s %21s ms %21s ms   %s\n' "(b) SELECT * WHERE id = \$1, latency average (-M prepared)" \
  "$(fmt_range $(col_stats 0) 3)" "$(fmt_range $(col_stats 1) 3)" "$(fmt_ratio $(ratio_stats 0 1) "x the latency")"
echo "($CL_VALUES customers / ids of shard_1 inline in generated scripts, the same on both sides; every insert on shard_1, now $total rows there, none on shard_2)"
