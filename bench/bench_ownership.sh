# Sourced by bench/bench.sh (`bench/bench.sh --ownership` runs only this): what a shard pays
# for the ranges it owns, in today's layout (one partition per owned range) and in the
# layout by ownership (one table read through a view that keeps the rows id_gen.shard_owns
# says the shard owns; docs/design.md §12). One server, one database, four tables of the
# same OW_ROWS rows: parts_<few> and parts_<many> (range partitions of genes, OW_FEW big
# ones and OW_MANY scattered ranges of 16 genes, every other block of 16), owned_<few> and
# owned_<many> (one table each, with that many ranges recorded in id_gen.shard_tables).
# pgbench -c 2 -j 2 for OW_T seconds per round, tables in alternating order, median of
# OW_ROUNDS rounds: a lookup by id on a new connection each time (-C), a prepared lookup by
# id, a whole-table aggregate; and per round, a new connection's first execution of a
# generic plan (plan_cache_mode = force_generic_plan). The tables by ownership carry the
# trigger id_gen_owned_rows, so the routing guard checks their scans by id as it does a
# shard's; last, the guard's cost on a scan of every id by `id = ANY`, on and off. Ratios side by side: many ranges ÷
# few, per layout, and the layout by ownership at many ranges ÷ today's at few. Figures,
# never a gate.
OW_DIR=/tmp/idg_bench_own OW_P=54470
OW_FEW=${OWNERSHIP_FEW:-8} OW_MANY=${OWNERSHIP_MANY:-2048} OW_ROWS=${OWNERSHIP_ROWS:-10000}
OW_T=${OWNERSHIP_T:-3} OW_ROUNDS=${OWNERSHIP_ROUNDS:-5}
[ "${QUICK:-}" = "--quick" ] && { OW_T=2; OW_ROUNDS=3; }
cluster_start "$OW_DIR" "$OW_P" "shared_buffers = 64MB" "max_locks_per_transaction = 1024"
trap 'cluster_stop "$OW_DIR"' EXIT
owq() { cpsql "$OW_DIR" "$OW_P" -d postgres -At "$@"; }
owq -c "CREATE EXTENSION id_gen" >/dev/null
# The rows: genes in the many-range layout's owned blocks (b * 32 .. b * 32 + 15), spread.
owq >/dev/null <<SQL
SET client_min_messages = warning;
CREATE TABLE ow_rows AS
SELECT id_gen.compose_id(((k % $OW_MANY) * (65536 / $OW_MANY / 2) * 2 + (k / $OW_MANY) % 16)::integer, k) AS id,
       k % 5000 + 1 AS amount
FROM generate_series(1, $OW_ROWS) k;
CREATE FUNCTION ow_parts(t text, n integer, width integer, step integer) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
  EXECUTE format('CREATE TABLE %I (id bigint NOT NULL, amount bigint NOT NULL) PARTITION BY RANGE (id)', t);
  FOR b IN 0 .. n - 1 LOOP
    EXECUTE format('CREATE TABLE %I PARTITION OF %I (PRIMARY KEY (id)) FOR VALUES FROM (%s) TO (%s)', t || '_' || b, t,
                   id_gen.gene_first_id(b * step), CASE WHEN b * step + width > 65535 THEN 'MAXVALUE' ELSE id_gen.gene_first_id(b * step + width)::text END);
  END LOOP;
  EXECUTE format('INSERT INTO %I SELECT * FROM ow_rows', t);
END \$\$;
CREATE FUNCTION ow_owned(t text, n integer, width integer, step integer) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
  EXECUTE format('CREATE TABLE %I (id bigint PRIMARY KEY, amount bigint NOT NULL)', t || '_rows');
  EXECUTE format('INSERT INTO %I SELECT * FROM ow_rows', t || '_rows');
  -- (Guarded as a table laid out by ownership is: its scans by id are checked.)
  EXECUTE format('CREATE TRIGGER id_gen_owned_rows BEFORE INSERT OR UPDATE ON %I FOR EACH ROW EXECUTE FUNCTION id_gen.refuse_rows_not_owned(%L)', t || '_rows', 'id');
  INSERT INTO id_gen.shard_tables (schema_name, table_name, id_column, gene_ranges, definition, stem)
  SELECT 'public', t || '_rows', 'id', array_agg(int4range(b * step, b * step + width)), '', t
  FROM generate_series(0, n - 1) b;
  EXECUTE format('CREATE VIEW %I AS SELECT * FROM %I WHERE id_gen.shard_owns(%L::regclass, id)', t, t || '_rows', t || '_rows');
END \$\$;
SELECT ow_parts('parts_$OW_FEW', $OW_FEW, 65536 / $OW_FEW, 65536 / $OW_FEW);
SELECT ow_parts('parts_$OW_MANY', $OW_MANY, 16, 65536 / $OW_MANY);
SELECT ow_owned('owned_$OW_FEW', $OW_FEW, 65536 / $OW_FEW, 65536 / $OW_FEW);
SELECT ow_owned('owned_$OW_MANY', $OW_MANY, 16, 65536 / $OW_MANY);
SELECT id_gen.shard_routing_changed();
VACUUM ANALYZE;
SQL
OW_TABLES=("parts_$OW_FEW" "parts_$OW_MANY" "owned_$OW_FEW" "owned_$OW_MANY")
for t in "${OW_TABLES[@]}"; do
  n=$(owq -c "SELECT count(*) FROM $t")
  [ "$n" = "$OW_ROWS" ] || { echo "bench_ownership: $t shows $n rows, not $OW_ROWS" >&2; exit 1; }
done
mkdir -p "$OW_DIR/pgb"
mapfile -t OW_IDS < <(owq -c "SELECT id FROM ow_rows ORDER BY hashint8(id) LIMIT 50")
for t in "${OW_TABLES[@]}"; do
  : > "$OW_DIR/pgb/id_$t.sql"
  printf '\\set k random(1, %s)\nSELECT * FROM %s WHERE id = (ARRAY[%s])[:k];\n' "${#OW_IDS[@]}" "$t" "$(IFS=,; echo "${OW_IDS[*]}")" > "$OW_DIR/pgb/id_$t.sql"
  printf 'SELECT count(*), sum(amount) FROM %s;\n' "$t" > "$OW_DIR/pgb/agg_$t.sql"
done
# ow_pgb ARGS...: prints tps; fails on a failed transaction.
ow_pgb() {
  local out
  out=$("$PG_BIN/pgbench" -n -U postgres -h "$OW_DIR" -p "$OW_P" -c 2 -j 2 -T "$OW_T" "$@" postgres 2>&1) || { printf '%s\n' "$out" | tail -5 >&2; return 1; }
  printf '%s\n' "$out" | awk '/^tps = / { t = $3 } /^number of failed transactions: / { f = $5 }
    END { if (t == "" || (f != "" && f != 0)) exit 1; print t }' || { printf '%s\n' "$out" | tail -5 >&2; return 1; }
}
# ow_generic TABLE: a new connection's first execution of a generic plan of a lookup by id (ms).
ow_generic() {
  printf '%s\n' "SET plan_cache_mode = force_generic_plan;" "PREPARE q(bigint) AS SELECT * FROM $1 WHERE id = \$1;" \
    '\timing on' "EXECUTE q(${OW_IDS[0]});" | owq | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | tail -1
}
OW_MEASURES=("lookup by id, new connection each time|-C -M simple -f|id" "lookup by id, prepared|-M prepared -f|id"
             "whole-table aggregate|-M prepared -f|agg" "first generic plan (ms; lower is better)||generic")
declare -A OW_RUNS
for r in $(seq "$OW_ROUNDS"); do
  order=("${OW_TABLES[@]}")
  [ $((r % 2)) -eq 0 ] && order=("${OW_TABLES[3]}" "${OW_TABLES[2]}" "${OW_TABLES[1]}" "${OW_TABLES[0]}")
  for m in "${!OW_MEASURES[@]}"; do
    IFS='|' read -r _ args kind <<< "${OW_MEASURES[$m]}"
    for t in "${order[@]}"; do
      if [ "$kind" = generic ]; then v=$(ow_generic "$t")
      else read -r -a a <<< "$args"; v=$(ow_pgb "${a[@]}" "$OW_DIR/pgb/${kind}_$t.sql"); fi
      OW_RUNS[$m.$t]+="$v "
    done
  done
done
echo
echo "-- shard layout: $OW_ROWS rows, $OW_MANY scattered owned ranges against $OW_FEW (pgbench -c 2 -j 2 -T $OW_T, tables interleaved, median of $OW_ROUNDS rounds, (min..max) over the rounds)"
# ow_ratio M A B: per-round A ÷ B (tps: higher is better; for the generic plan's ms, B ÷ A).
ow_ratio() {
  local m=$1 a=$2 b=$3 kind
  IFS='|' read -r _ _ kind <<< "${OW_MEASURES[$m]}"
  paste <(tr ' ' '\n' <<< "${OW_RUNS[$m.$a]}" | sed '/^$/d') <(tr ' ' '\n' <<< "${OW_RUNS[$m.$b]}" | sed '/^$/d') |
    awk -v g="$kind" '{ print (g == "generic" ? $2 / $1 : $1 / $2) }' | stats
}
printf '%-45s %-22s %-22s %-22s %-22s | %-24s %-24s %-24s\n' measure "parts_$OW_FEW" "parts_$OW_MANY" "owned_$OW_FEW" "owned_$OW_MANY" \
  "parts $OW_MANY ÷ $OW_FEW" "owned $OW_MANY ÷ $OW_FEW" "owned $OW_MANY ÷ parts $OW_FEW"
for m in "${!OW_MEASURES[@]}"; do
  IFS='|' read -r label _ _ <<< "${OW_MEASURES[$m]}"
  line=$(printf '%-45s' "$label")
  for t in "${OW_TABLES[@]}"; do
    line+=" $(printf '%-22s' "$(fmt_range $(tr ' ' '\n' <<< "${OW_RUNS[$m.$t]}" | sed '/^$/d' | stats) 1)")"
  done
  line+=" | $(printf '%-24s' "$(fmt_ratio $(ow_ratio "$m" "parts_$OW_MANY" "parts_$OW_FEW"))")"
  line+=" $(printf '%-24s' "$(fmt_ratio $(ow_ratio "$m" "owned_$OW_MANY" "owned_$OW_FEW"))")"
  line+=" $(printf '%-24s' "$(fmt_ratio $(ow_ratio "$m" "owned_$OW_MANY" "parts_$OW_FEW"))")"
  echo "$line"
done
echo "(ratios: the first table's speed ÷ the second's; ≥ 1 means no slower. Owned rows only: every row above is owned.)"
# The routing guard's check of a scan by id of many ids (id = ANY of every row's id, by index
# scan; checked once per scan, not per row): one session, guard on and off alternated, the
# statement's time per round (ms) after a warm-up.
guard_runs=$( {
  echo "SET enable_seqscan = off; SET enable_bitmapscan = off;"
  q="SELECT count(*) FROM owned_$OW_MANY WHERE id = ANY (ARRAY(SELECT id FROM ow_rows));"
  echo "$q"; echo '\timing on'
  for r in $(seq "$OW_ROUNDS"); do echo "SET id_gen.routing_guard = on;"; echo "$q"; echo "SET id_gen.routing_guard = off;"; echo "$q"; done
} | owq | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | awk 'NR % 2 == 0' | paste - - )
[ "$(wc -l <<< "$guard_runs")" = "$OW_ROUNDS" ] || { echo "bench_ownership: no timings of the guarded scan" >&2; exit 1; }
printf '%-45s %s\n' "id = ANY of $OW_ROWS ids, guard on ÷ off" \
  "$(fmt_ratio $(awk '{ print $1 / $2 }' <<< "$guard_runs" | stats)) (time; 1 = free; on: $(fmt_range $(cut -f1 <<< "$guard_runs" | stats) 1) ms)"
cluster_stop "$OW_DIR"
