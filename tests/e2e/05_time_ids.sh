#!/usr/bin/env bash
# Snowflake ids and dated serials against real servers:
#  - snowflake_id refuses to run without a node id;
#  - 8 concurrent clients: snowflake ids and serials unique;
#  - restarts (clean and kill -9), also with the clock set back: no id repeats or goes
#    down; beyond the tolerated lead calls are refused, naming the skew;
#  - the seed-003 gene layout: id % 2^gene_bits = owner % 2^gene_bits;
#  - 8 clients crossing midnight: each period's serials are unique and restart at 1.
source "$(dirname "$0")/lib.sh"
e2e_start /tmp/idg_e2e5 54345
cpsql "$E2E_DIR" "$E2E_PORT" -c "CREATE EXTENSION id_gen" >/dev/null
out=$(q postgres "SELECT id_gen.snowflake_id()" 2>&1 || true)
grep -q "id_gen.snowflake_node_id is not set" <<<"$out" || fail "expected a refusal without node id, got: $out"
pass "no node id: $(grep -o 'ERROR.*' <<<"$out")"

cluster_stop "$E2E_DIR"
echo "id_gen.snowflake_node_id = 3" >> "$E2E_DIR/data/postgresql.conf"
cluster_up "$E2E_DIR"
cpsql "$E2E_DIR" "$E2E_PORT" >/dev/null <<'SQL'
CREATE TABLE sf (id bigint PRIMARY KEY);
SELECT id_gen.create_serial('pay', 'YYYYMMDD', width => 8, partition => 1, time_zone => 'UTC', step => 50);
CREATE TABLE ser (s text PRIMARY KEY);
SQL
echo "INSERT INTO sf VALUES (id_gen.snowflake_id());" > "$E2E_DIR/sf.sql"
echo "INSERT INTO ser VALUES (id_gen.next_serial('pay', 'M12345678901'));" > "$E2E_DIR/ser.sql"
pgbench_run postgres -c 8 -j 2 -t 5000 -f "$E2E_DIR/sf.sql" > "$E2E_DIR/p1.log" 2>&1 || fail "snowflake pgbench: $(tail -3 "$E2E_DIR/p1.log")"
pgbench_run postgres -c 8 -j 2 -t 2000 -f "$E2E_DIR/ser.sql" > "$E2E_DIR/p2.log" 2>&1 || fail "serial pgbench: $(tail -3 "$E2E_DIR/p2.log")"
assert_eq "$(q postgres "SELECT count(*) FROM sf")" "40000" "8 clients: 40000 unique snowflake ids"
assert_eq "$(q postgres "SELECT count(DISTINCT id_gen.snowflake_node(id)) || ':' || min(id_gen.snowflake_node(id)) FROM sf")" "1:3" "all carry node 3"
assert_eq "$(q postgres "SELECT count(*) FROM ser")" "16000" "8 clients: 16000 unique serials"

# Clean restart with the clock 3 s back (within the 5 s lead): ids keep increasing.
before=$(q postgres "SELECT max(id) FROM sf")
cluster_stop "$E2E_DIR"
echo "id_gen.test_clock_offset = -3000" >> "$E2E_DIR/data/postgresql.conf"
cluster_up "$E2E_DIR"
after=$(q postgres "SELECT min(id_gen.snowflake_id()) FROM generate_series(1, 1000)")
assert_gt "$after" "$before" "restart with the clock 3 s back: ids continue above"
# kill -9 and a clock 60 s back: refused with the skew named, never a smaller id.
before=$(q postgres "SELECT max(id_gen.snowflake_id()) FROM generate_series(1, 1000)")
kill9_cluster
sed -i '/^id_gen.test_clock_offset/d' "$E2E_DIR/data/postgresql.conf"
echo "id_gen.test_clock_offset = -60000" >> "$E2E_DIR/data/postgresql.conf"
cluster_up "$E2E_DIR"
out=$(q postgres "SELECT id_gen.snowflake_id()" 2>&1 || true)
grep -q "behind the snowflake generator's clock" <<<"$out" || fail "clock 60 s back: expected a refusal, got: $out"
pass "kill -9 + clock 60 s back: $(grep -o 'ERROR.*' <<<"$out" | cut -c1-110)..."
cluster_stop "$E2E_DIR"
sed -i '/^id_gen.test_clock_offset/d' "$E2E_DIR/data/postgresql.conf"
cluster_up "$E2E_DIR"
after=$(q postgres "SELECT min(id_gen.snowflake_id()) FROM generate_series(1, 1000)")
assert_gt "$after" "$before" "clock restored: ids continue above every id issued before the crash"

# Serials survive kill -9: no serial of today repeats.
q postgres "INSERT INTO ser SELECT id_gen.next_serial('pay', 'M12345678901') FROM generate_series(1, 500)" >/dev/null
kill9_cluster
cluster_up "$E2E_DIR"
q postgres "INSERT INTO ser SELECT id_gen.next_serial('pay', 'M12345678901') FROM generate_series(1, 500)" >/dev/null \
  || fail "serials after kill -9 collided with earlier ones"
pass "serials after kill -9 do not repeat ($(q postgres "SELECT count(*) FROM ser") unique)"

# 8 clients across midnight (UTC), with the server clock set 1.5 s before it.
q postgres "SELECT id_gen.create_serial('night', 'YYYYMMDD', width => 8, time_zone => 'UTC', step => 20)" >/dev/null
off=$(q postgres "SELECT (extract(epoch FROM date_trunc('day', clock_timestamp() AT TIME ZONE 'UTC') + interval '1 day' - (clock_timestamp() AT TIME ZONE 'UTC')) * 1000 - 1500)::bigint")
cluster_stop "$E2E_DIR"
echo "id_gen.test_clock_offset = $off" >> "$E2E_DIR/data/postgresql.conf"
cluster_up "$E2E_DIR"
q postgres "CREATE TABLE night (s text PRIMARY KEY, n bigserial)" >/dev/null
echo "INSERT INTO night (s) VALUES (id_gen.next_serial('night'));" > "$E2E_DIR/night.sql"
pgbench_run postgres -c 8 -j 2 -T 4 -f "$E2E_DIR/night.sql" > "$E2E_DIR/p3.log" 2>&1 || fail "midnight pgbench: $(tail -3 "$E2E_DIR/p3.log")"
grep -q "number of failed transactions: 0" "$E2E_DIR/p3.log" || fail "midnight run had failed (duplicate?) transactions"
assert_eq "$(q postgres "SELECT count(DISTINCT left(s, 8)) FROM night")" "2" "serials of two dates"
assert_eq "$(q postgres "SELECT min(right(s, 8)) FROM night WHERE left(s, 8) = (SELECT max(left(s, 8)) FROM night)")" "00000001" "the new day restarts at 00000001"
# Gaps are allowed (a reserved run can be lost), but at most a couple of steps of them.
assert_eq "$(q postgres "SELECT bool_and(maxc - cnt < 40) FROM (SELECT left(s, 8) d, count(*) cnt, max(right(s, 8)::int) maxc FROM night GROUP BY 1) x WHERE d = (SELECT max(left(s, 8)) FROM night)")" "t" "the new day's counters run from 1 with no more than two steps of gaps"
pass "midnight: $(q postgres "SELECT string_agg(left(s, 8) || ' x ' || c, ', ') FROM (SELECT left(s, 8) AS s, count(*) AS c FROM night GROUP BY 1 ORDER BY 1) x")"
cluster_stop "$E2E_DIR"
sed -i '/^id_gen.test_clock_offset/d' "$E2E_DIR/data/postgresql.conf"

# The seed-003 gene layout: 41 + 10 + 8 + 4 bits.
printf '%s\n' "id_gen.snowflake_seq_bits = 8" "id_gen.snowflake_gene_bits = 4" >> "$E2E_DIR/data/postgresql.conf"
cluster_up "$E2E_DIR"
assert_eq "$(q postgres "SELECT bool_and(id_gen.snowflake_id(o) % 16 = o % 16) AND count(DISTINCT id_gen.snowflake_id(o)) = 5000 FROM generate_series(1::bigint, 5000) o")" "t" "gene layout: id % 16 = owner % 16, all distinct"
assert_eq "$(q postgres "SELECT id_gen.snowflake_gene(id_gen.snowflake_id(12345::bigint))")" "9" "snowflake_gene decodes owner % 16"
echo "05_time_ids: passed"
