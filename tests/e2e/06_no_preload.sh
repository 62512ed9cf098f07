#!/usr/bin/env bash
# Without shared_preload_libraries: CREATE EXTENSION and the pure functions work; every
# stateful function raises 55000 with a hint (never pgrx's "lock not initialized" panic,
# never a crash).
source "$(dirname "$0")/lib.sh"
e2e_start /tmp/idg_e2e6 54346
cluster_stop "$E2E_DIR"
sed -i "/^shared_preload_libraries/d" "$E2E_DIR/data/postgresql.conf"
cluster_up "$E2E_DIR"
cpsql "$E2E_DIR" "$E2E_PORT" -c "CREATE EXTENSION id_gen" >/dev/null
assert_eq "$(q postgres "SELECT id_gen.shard_gene(42::bigint) || ',' || id_gen.shard_of(id_gen.compose_id(7, 1))")" "16043,7" "pure functions work without preload"
q postgres "SELECT id_gen.create_sequence('s')" >/dev/null
for call in "SELECT id_gen.next_segment_id('s')" "SELECT * FROM id_gen.status" "SELECT id_gen.gene_order_id('s', 1::bigint)" \
            "SELECT id_gen.snowflake_id()" "SELECT id_gen.encode_order_no(1::bigint)"; do
  out=$(cpsql "$E2E_DIR" "$E2E_PORT" -v VERBOSITY=verbose -c "$call" 2>&1 || true)
  grep -q "ERROR:  55000" <<<"$out" || fail "$call: expected SQLSTATE 55000, got: $out"
  pass "$call -> $(grep -o 'ERROR:  55000: [^.]*' <<<"$out" | head -1 | cut -c1-100)"
done
out=$(cpsql "$E2E_DIR" "$E2E_PORT" -c "SELECT id_gen.next_segment_id('s')" 2>&1 || true)
grep -q "HINT:  Add id_gen to shared_preload_libraries" <<<"$out" || fail "no preload hint: $out"
assert_eq "$(q postgres "SELECT 1")" "1" "the server is still up"
echo "06_no_preload: passed"
