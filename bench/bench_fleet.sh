# Sourced by bench/bench.sh (`bench/bench.sh --fleet` runs only this): a coordinator with many
# shards (issue 27). FLEET_SHARDS shards (default 64) are simulated as databases shard_1 ..
# shard_N spread round-robin over FLEET_INSTANCES PostgreSQL instances (default 4) on this
# machine, each a foreign server of the coordinator's database `fleet`; FLEET_RANGES route
# ranges (default 4,096) alternate over the shards, and FLEET_TABLES tables (default 20) are
# distributed with layout per_shard. Every server runs on PostgreSQL's defaults
# (max_connections 100, max_locks_per_transaction 64) but shared_buffers = 32MB; the
# coordinator runs the move supervisor (id_gen.move_supervisor_database = 'fleet').
# Figures, never a gate:
#   distribute_table of the first and of the last table; relations on the coordinator and on
#   one shard; push_route_state(true) to every shard and the supervisor's recovery pass
#   (recover_operations), FLEET_ROUNDS times each (median (min..max)), with the dblink
#   connections the calling backend holds after it; the connections the running supervisor
#   holds on each instance; split_route and merge_routes of one range.

FL_COO=/tmp/idg_bench_fl_coord FL_COO_P=54500
fl_dir() { echo "/tmp/idg_bench_fl_inst$1"; }
fl_port() { echo $((54500 + $1)); }
FL_SHARDS=${FLEET_SHARDS:-64} FL_INST=${FLEET_INSTANCES:-4} FL_RANGES=${FLEET_RANGES:-4096}
FL_TABLES=${FLEET_TABLES:-20} FL_ROUNDS=${FLEET_ROUNDS:-5} FL_ROWS=20000
[ "${QUICK:-}" = "--quick" ] && { FL_ROUNDS=3; }
FL_CONF=("shared_buffers = 32MB" "max_connections = 100" "max_worker_processes = 8")
trap 'cluster_stop "$FL_COO"; for i in $(seq "$FL_INST"); do cluster_stop "$(fl_dir "$i")"; done' EXIT
flq() { cpsql "$FL_COO" "$FL_COO_P" -d fleet -At "$@"; }
fli() { local i=$1; shift; cpsql "$(fl_dir "$i")" "$(fl_port "$i")" -At "$@"; }
# The instance of shard k (1-based).
fl_inst_of() { echo $(( ($1 - 1) % FL_INST + 1 )); }
# fl_rounds SQL: runs SQL FL_ROUNDS times in one session; prints "median min max" of its
# wall time (ms, psql's \timing) and, last, the dblink connections the session then holds.
fl_rounds() {
  local script=$'\\timing on\n' k
  for k in $(seq "$FL_ROUNDS"); do script+="$1;"$'\n'; done
  script+=$'\\timing off\nSELECT \'connections \' || count(*) FROM unnest(dblink_get_connections());\n'
  local out; out=$(printf '%s' "$script" | flq -c "SET client_min_messages = warning" -f -)
  printf '%s\n' "$out" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | stats | tr '\n' ' '
  printf '%s\n' "$out" | sed -n 's/^connections //p'
}

echo
echo "-- 10. a fleet: $FL_SHARDS shards (databases over $FL_INST instances), $FL_RANGES route ranges alternating over them, $FL_TABLES per_shard tables; PostgreSQL's default max_connections and max_locks_per_transaction"
for i in $(seq "$FL_INST"); do cluster_start "$(fl_dir "$i")" "$(fl_port "$i")" "${FL_CONF[@]}"; done
cluster_start "$FL_COO" "$FL_COO_P" "${FL_CONF[@]}" "id_gen.move_supervisor_database = 'fleet'"
cpsql "$FL_COO" "$FL_COO_P" -c "CREATE DATABASE fleet" >/dev/null
flq -c "CREATE EXTENSION id_gen" -c "CREATE EXTENSION postgres_fdw" -c "CREATE EXTENSION dblink" \
  -c "SELECT id_gen.create_sequence('orders', step => 10000)" >/dev/null
for k in $(seq "$FL_SHARDS"); do
  i=$(fl_inst_of "$k")
  fli "$i" -c "CREATE DATABASE shard_$k" >/dev/null
  fli "$i" -d "shard_$k" -c "CREATE EXTENSION id_gen" \
    -c "SELECT id_gen.create_sequence('orders', start => 100000000000, step => 10000)" >/dev/null
  flq >/dev/null <<SQL
CREATE SERVER shard_$k FOREIGN DATA WRAPPER postgres_fdw
  OPTIONS (host '$(fl_dir "$i")', port '$(fl_port "$i")', dbname 'shard_$k', connect_timeout '2');
CREATE USER MAPPING FOR postgres SERVER shard_$k;
SQL
done
flq -c "SET client_min_messages = warning" \
  -c "SELECT count(id_gen.set_route(k * (65536 / $FL_RANGES) + 65536 / $FL_RANGES - 1, 'shard_' || (k % $FL_SHARDS + 1))) FROM generate_series(0, $FL_RANGES - 1) k" >/dev/null
declare -A DIST_MS
for t in $(seq "$FL_TABLES"); do
  flq -c "CREATE TABLE orders_$t (id bigint PRIMARY KEY, owner_id bigint NOT NULL, amount bigint NOT NULL DEFAULT 0)" >/dev/null
  DIST_MS[$t]=$(ms flq -c "SET client_min_messages = warning" \
                  -c "SELECT id_gen.distribute_table('orders_$t', 'id', 'owner_id', 'orders', layout => 'per_shard')")
done
flq -c "INSERT INTO orders_1 (owner_id, amount) SELECT o % 5000 + 1, 1 FROM generate_series(1, $FL_ROWS) o" >/dev/null
rows=$(flq -c "SELECT count(*) FROM orders_1")
[ "$rows" = "$FL_ROWS" ] || { echo "orders_1 has $rows rows through the coordinator, not $FL_ROWS" >&2; exit 1; }
coo_rel=$(flq -c "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public'")
shard_rel=$(fli 1 -d shard_1 -c "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public'")
read -r push_med push_min push_max push_conns <<< "$(fl_rounds "SELECT id_gen.push_route_state(true)")"
read -r rec_med rec_min rec_max rec_conns <<< "$(fl_rounds "SELECT count(*) FROM id_gen.recover_operations(make_interval(secs => 600))")"
# The supervisor's own connections: what the shards' instances show once no other session
# of the coordinator is left (a pass every 2 s; polled until stable, loudly on a timeout).
sup_conns() {
  local i total=0 n
  for i in $(seq "$FL_INST"); do
    n=$(fli "$i" -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND datname LIKE 'shard\_%'")
    total=$((total + n))
  done
  echo "$total"
}
last=-1; same=0; deadline=$((SECONDS + 60))
while [ "$same" -lt 3 ]; do
  now=$(sup_conns)
  if [ "$now" = "$last" ]; then same=$((same + 1)); else same=0; last=$now; fi
  [ "$SECONDS" -lt "$deadline" ] || { echo "the supervisor's connections did not settle within 60 s (last $now)" >&2; exit 1; }
  sleep 2.5
done
lo=$((65536 / FL_RANGES)); hi=$((2 * 65536 / FL_RANGES - 1))
split_ms=$(ms flq -c "SET client_min_messages = warning" -c "CALL id_gen.split_route($(( (lo + hi) / 2 )))")
merge_ms=$(ms flq -c "SET client_min_messages = warning" -c "CALL id_gen.merge_routes($(( (lo + hi) / 2 )))")
printf '  %-60s %s ms (first table), %s ms (table %s)\n' "distribute_table, per_shard" "${DIST_MS[1]}" "${DIST_MS[$FL_TABLES]}" "$FL_TABLES"
printf '  %-60s %s on the coordinator, %s on shard_1\n' "relations in schema public" "$coo_rel" "$shard_rel"
printf '  %-60s %s ms (%s..%s); the backend then holds %s connections\n' "push_route_state(true) to $FL_SHARDS shards" \
  "$push_med" "$push_min" "$push_max" "$push_conns"
printf '  %-60s %s ms (%s..%s); the backend then holds %s connections\n' "recovery pass (recover_operations), nothing to recover" \
  "$rec_med" "$rec_min" "$rec_max" "$rec_conns"
printf '  %-60s %s over %s instances\n' "connections the running supervisor holds to shards" "$last" "$FL_INST"
printf '  %-60s %s ms, merge_routes back %s ms\n' "split_route of one range" "$split_ms" "$merge_ms"
