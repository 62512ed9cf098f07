# Sourced by bench/bench.sh (same server, same helpers): owner-affine inserts, order
# numbers, and the seeds' other id systems. Prints figures and ratios only: medians of
# interleaved rounds with their min–max spread, ties called as ties.

echo
echo "-- 4. bulk insert of $LOAD_ROWS rows (8 parallel clients), id and index size (median of $LOAD_REPS rounds, order rotating; (min..max) over the rounds)"
P >/dev/null <<'SQL'
SELECT id_gen.create_sequence('go1', step => 10000, max_step => 10000000, counters => 1);
SELECT id_gen.create_sequence('go4', step => 10000, max_step => 10000000, counters => 4);
SELECT id_gen.create_sequence('go16', step => 10000, max_step => 10000000, counters => 16);
CREATE TABLE ld_go1 (id bigint PRIMARY KEY, owner bigint);
CREATE TABLE ld_go4 (id bigint PRIMARY KEY, owner bigint);
CREATE TABLE ld_go16 (id bigint PRIMARY KEY, owner bigint);
CREATE TABLE ld_serial (id bigserial PRIMARY KEY, owner bigint);
CREATE TABLE ld_uuid (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), owner bigint);
SQL
PER=$((LOAD_ROWS / 8 / 1000))
for v in go1 go4 go16 serial uuid; do
  case $v in
    go*) ins="INSERT INTO ld_$v SELECT id_gen.gene_order_id('$v', o), o FROM (SELECT (random() * 1e9)::bigint AS o FROM generate_series(1, 1000)) s;";;
    serial) ins="INSERT INTO ld_serial (owner) SELECT (random() * 1e9)::bigint FROM generate_series(1, 1000);";;
    uuid) ins="INSERT INTO ld_uuid (owner) SELECT (random() * 1e9)::bigint FROM generate_series(1, 1000);";;
  esac
  echo "$ins" > "$DIR/ld_$v.sql"
done
loadrate() {
  local start end
  start=$(date +%s.%N)
  "$PG_BIN/pgbench" -n -h "$DIR" -p "$PORT" -U postgres -c 8 -j 2 -t "$PER" -f "$DIR/ld_$1.sql" postgres >/dev/null 2>&1
  end=$(date +%s.%N)
  awk "BEGIN{printf \"%.0f\", $PER * 8000 / ($end - $start)}"
}
# Each round empties the tables and loads every variant once, starting one further along
# the list, so drift and warm-up do not always favour the same variant; the ratio to
# bigserial is taken per round. The index sizes are those after the last round's load.
VARIANTS=(serial go1 go4 go16 uuid)
RUNS=()
for r in $(seq "$LOAD_REPS"); do
  P -c "TRUNCATE ld_go1, ld_go4, ld_go16, ld_serial, ld_uuid" >/dev/null
  declare -A RATE=()
  for k in 0 1 2 3 4; do v=${VARIANTS[$(( (k + r) % 5 ))]}; RATE[$v]=$(loadrate "$v"); done
  RUNS+=("${RATE[serial]} ${RATE[go1]} ${RATE[go4]} ${RATE[go16]} ${RATE[uuid]}")
done
printf '%-34s %26s   %-40s %14s\n' "id" "rows/s" "vs serial" "pk index size"
for i in 0 1 2 3 4; do
  v=${VARIANTS[$i]}
  case $v in
    serial) label="bigserial";; uuid) label="gen_random_uuid()";;
    go1) label="gene_order_id, 1 counter group";; go4) label="gene_order_id, 4 counter groups";; go16) label="gene_order_id, 16 counter groups";;
  esac
  if [ "$v" = serial ]; then vs="1.00"; else vs=$(fmt_ratio $(ratio_stats $i 0)); fi
  size=$(P -At -c "SELECT pg_size_pretty(pg_relation_size('ld_${v}_pkey'))")
  printf '%-34s %26s   %-40s %14s\n' "$label" "$(fmt_range $(col_stats $i))" "$vs" "$size"
done

echo
echo "-- 5. order numbers (one backend, $((N / 10)) calls each; µs per call above the floor: median of $REPS interleaved rounds (min..max))"
P >/dev/null <<SQL
SELECT id_gen.create_order_no_key();
CREATE TABLE nos AS SELECT id_gen.encode_order_no(x::bigint) AS n, id_gen.encode_order_no64(x::bigint, 1) AS n64
FROM generate_series(1, $((N / 10))) x;
SQL
M=$((N / 10))
mapfile -t RUNS < <(runs_ms "SELECT count(abs(x)) FROM generate_series(1, $M) x" \
  "SELECT count(id_gen.encode_order_no(x::bigint)) FROM generate_series(1, $M) x" \
  "SELECT count(id_gen.decode_order_no(n)) FROM nos" \
  "SELECT count(id_gen.encode_order_no64(x::bigint, 1)) FROM generate_series(1, $M) x" \
  "SELECT count(id_gen.decode_order_no64(n64, 1)) FROM nos" \
  "SELECT count(n) FROM nos")
# us_stats I J: per round, µs per call of query I above its floor J; median min max.
us_stats() { printf '%s\n' "${RUNS[@]}" | awk -v i=$(($1 + 1)) -v j=$(($2 + 1)) -v m=$M '{ print ($i - $j) * 1000 / m }' | stats; }
row5() {
  local m lo hi; read -r m lo hi < <(us_stats "$2" "$3")
  printf '%-24s %s µs/call%s\n' "$1" "$(fmt_range "$m" "$lo" "$hi" 2)" \
    "$(awk -v lo="$lo" 'BEGIN { if (lo <= 0) printf ", within noise of the floor" }')"
}
row5 "encode_order_no (uuid)" 1 0
row5 "decode_order_no (uuid)" 2 5
row5 "encode_order_no64" 3 0
row5 "decode_order_no64" 4 5

echo
echo "-- 6. the other id systems (one backend, $M calls each; median of $REPS interleaved rounds (min..max))"
P >/dev/null <<'SQL'
SELECT id_gen.create_serial('bench', 'YYYYMMDDHH24', width => 9, time_zone => 'UTC', step => 10000);
SELECT id_gen.create_sequence('gm', step => 100000, max_step => 10000000);
SQL
mapfile -t RUNS < <(runs_ms "SELECT count(abs(x)) FROM generate_series(1, $M) x" \
  "SELECT count(id_gen.next_serial('bench', 'M1234')) FROM generate_series(1, $M)" \
  "SELECT count(id_gen.gene_mod_id('gm', x, 8)) FROM generate_series(1, $M) x" \
  "SELECT count(id_gen.gene_order_id('go1', x::bigint)) FROM generate_series(1, $M) x" \
  "SELECT count(id_gen.next_segment_id('s')) FROM generate_series(1, $M)")
printf '%-40s %22s M/s\n' "next_serial" "$(fmt_range $(rate_stats 1 $M) 1)"
printf '%-40s %22s M/s\n' "gene_mod_id" "$(fmt_range $(rate_stats 2 $M) 1)"
printf '%-40s %22s M/s\n' "gene_order_id" "$(fmt_range $(rate_stats 3 $M) 1)"
printf '%-40s %22s M/s\n' "next_segment_id (same run, for scale)" "$(fmt_range $(rate_stats 4 $M) 1)"
if P -At -c "SELECT id_gen.snowflake_id()" >/dev/null 2>&1; then
  mapfile -t RUNS < <(runs_ms "SELECT count(id_gen.snowflake_id()) FROM generate_series(1, $M)")
  printf '%-40s %22s M/s  (layout 41/10/12: at most 4.096 M/s per node)\n' "snowflake_id" "$(fmt_range $(rate_stats 0 $M) 1)"
fi
