#!/usr/bin/env bash
# A coordinator that routes by the route table (docs/guide/scale-out.md "Sharded deployments"): one
# coordinator and 3 shards over postgres_fdw. The coordinator is also the shards'
# segment authority, so that ids computed on a shard by an application that routes by
# itself never collide with ids computed on the coordinator.
# (a) argument checks: routes to unknown servers 42704, a non-bigint id 42804, a sequence
#     without an owner 22023, foreign keys 0A000, non-superusers 42501.
# (b) distribute_table moves existing rows to their shards and creates the shards'
#     tables, partitioned by the route ranges they own; each coordinator foreign table
#     points at one shard partition (a full scan through the coordinator sees every row
#     once).
# (c) inserts by owner only (RETURNING gives the id), by id, and by COPY land on the
#     shard route_owner names; an id of another gene than its owner's is 23514; UPDATE
#     and DELETE through the table work.
# (d) point lookups prune to one Foreign Scan, for literals and generic prepared plans;
#     lookups by owner with owner_first_id/owner_last_id prune too.
# (e) a row outside a shard's genes is refused on the shard (IG001, by its tombstone).
# (f) set_route: a change that would strand rows is refused and changes nothing; a
#     change over an empty range re-points the coordinator's partition and
#     re-partitions both shards in one transaction, and new rows follow it; drop_route
#     of the top bound is refused.
# (g) an application that routes by itself inserts on the shard with gene_order_id over
#     an authority-backed sequence; the row is found through the coordinator; no id twice.
# (h) a shard down: lookups and inserts pruned to other shards work; its own rows and
#     full scans fail with 08001; a route change that needs it fails and changes nothing.
source "$(dirname "$0")/lib.sh"
C=/tmp/idg_e2e11c CP=54410
shard_dir() { echo "/tmp/idg_e2e11s$1"; }
shard_port() { echo $((CP + $1)); }
SMALL=("shared_buffers = 32MB" "max_connections = 30")
trap 'cluster_stop "$C"; for i in 1 2 3; do cluster_stop "$(shard_dir $i)"; done' EXIT

cq() { cpsql "$C" "$CP" -At "$@"; }
sq() { local i=$1; shift; cpsql "$(shard_dir "$i")" "$(shard_port "$i")" -At "$@"; }
# state_of CMD...: the SQLSTATE of the first ERROR the command prints (empty if none).
state_of() { "$@" -v VERBOSITY=verbose 2>&1 >/dev/null | sed -n 's/^ERROR:  \([0-9A-Z]\{5\}\): .*/\1/p' | head -1; }
foreign_scans() { grep -c "Foreign Scan" <<<"$1" || true; }

cluster_start "$C" "$CP" "${SMALL[@]}"
cq >/dev/null <<'SQL'
CREATE EXTENSION id_gen;
CREATE EXTENSION postgres_fdw;
CREATE EXTENSION dblink;
SELECT id_gen.create_sequence('orders', step => 1000);
CREATE ROLE id_authority LOGIN;
GRANT UPDATE (max_id) ON id_gen.sequences TO id_authority;
ALTER ROLE id_authority SET synchronous_commit = on;
CREATE ROLE app LOGIN;
SELECT id_gen.grant_usage('orders', 'app');
SELECT id_gen.set_route(21844, 'shard_1');
SELECT id_gen.set_route(43689, 'shard_2');
SELECT id_gen.set_route(65535, 'shard_3');
CREATE TABLE orders (
  id         bigint PRIMARY KEY,
  owner_id   bigint NOT NULL,
  amount     numeric NOT NULL DEFAULT 0 CHECK (amount >= 0),
  note       text,
  created_at timestamptz NOT NULL DEFAULT now()
);
GRANT SELECT, INSERT, UPDATE, DELETE ON orders TO app;
INSERT INTO orders (id, owner_id, amount)
SELECT id_gen.gene_order_id('orders', o), o, o % 100 FROM generate_series(1, 300) o;
CREATE TABLE wrong_id (id integer PRIMARY KEY, owner_id bigint);
CREATE TABLE parent (id bigint PRIMARY KEY);
CREATE TABLE child (id bigint PRIMARY KEY, parent_id bigint REFERENCES parent);
SQL
for i in 1 2 3; do
  cluster_start "$(shard_dir $i)" "$(shard_port $i)" "${SMALL[@]}"
  sq $i >/dev/null <<SQL
CREATE EXTENSION id_gen;
CREATE EXTENSION postgres_fdw;
CREATE SERVER central FOREIGN DATA WRAPPER postgres_fdw
  OPTIONS (host '$C', port '$CP', dbname 'postgres', connect_timeout '2', options '-c synchronous_commit=on');
CREATE USER MAPPING FOR PUBLIC SERVER central OPTIONS (user 'id_authority');
SELECT id_gen.create_sequence('orders', step => 100, authority => 'central');
SQL
done

# (a) argument checks ---------------------------------------------------------------------
assert_eq "$(state_of cq -c "SELECT id_gen.distribute_table('orders', 'id', 'owner_id', 'orders')")" "42704" \
  "routes to shards that are no foreign servers: 42704"
for i in 1 2 3; do
  cq >/dev/null <<SQL
CREATE SERVER shard_$i FOREIGN DATA WRAPPER postgres_fdw
  OPTIONS (host '$(shard_dir $i)', port '$(shard_port $i)', dbname 'postgres', connect_timeout '2');
CREATE USER MAPPING FOR postgres SERVER shard_$i;
-- Loopback with trust authentication: application roles reach the shards as postgres
-- without a password (a real deployment maps them to shard roles with passwords).
CREATE USER MAPPING FOR PUBLIC SERVER shard_$i OPTIONS (user 'postgres', password_required 'false');
SQL
done
assert_eq "$(state_of cq -c "SELECT id_gen.distribute_table('wrong_id', 'id')")" "42804" "an integer id column: 42804"
assert_eq "$(state_of cq -c "SELECT id_gen.distribute_table('orders', 'id', NULL, 'orders')")" "22023" "a sequence without an owner column: 22023"
assert_eq "$(state_of cq -c "SELECT id_gen.distribute_table('child', 'id')")" "0A000" "a table with foreign keys: 0A000"
assert_eq "$(state_of cq -c "SET ROLE app" -c "SELECT id_gen.distribute_table('orders', 'id')")" "42501" "a role without EXECUTE: 42501"
out=$(cq -v VERBOSITY=verbose -c "GRANT EXECUTE ON FUNCTION id_gen.distribute_table(regclass, name, name, text) TO app" \
  -c "SET ROLE app" -c "SELECT id_gen.distribute_table('orders', 'id')" 2>&1) && fail "a non-superuser distributed a table"
grep -q "ERROR:  42501: id_gen: only superusers may distribute tables" <<<"$out" || fail "not the expected refusal: $out"
cq -c "REVOKE EXECUTE ON FUNCTION id_gen.distribute_table(regclass, name, name, text) FROM app" >/dev/null
pass "a non-superuser granted EXECUTE: 42501 from the function itself"
assert_eq "$(cq -c "SELECT count(*) FROM id_gen.distributed_tables")" "0" "refused calls distributed nothing"

# (b) distribute ---------------------------------------------------------------------------
out=$(cq -c "SELECT id_gen.distribute_table('orders', 'id', 'owner_id', 'orders')" 2>&1)
grep -q "NOTICE:  id_gen: public.orders is distributed over 3 shards; 300 existing rows moved to them" <<<"$out" \
  || fail "distribute_table: $out"
pass "distribute_table moved the 300 existing rows"
assert_eq "$(cq -c "SELECT string_agg(relname || ':' || relkind::text, ',' ORDER BY relname) FROM pg_class WHERE relname LIKE 'orders%' AND relkind IN ('v', 'p', 'r', 'f')")" \
  "orders:v,orders_shards:p,orders_shards_g0_21844:p,orders_shards_g0_21844_fdw:f,orders_shards_g21845_43689:p,orders_shards_g21845_43689_fdw:f,orders_shards_g43690_65535:p,orders_shards_g43690_65535_fdw:f" \
  "orders is a view over orders_shards: one partition per route range, each holding one foreign table"
assert_eq "$(cq -c "SELECT string_agg(partition || '@' || shard || ':' || in_step, ',' ORDER BY lower_gene) FROM id_gen.distribution")" \
  "public.orders_shards_g0_21844@shard_1:true,public.orders_shards_g21845_43689@shard_2:true,public.orders_shards_g43690_65535@shard_3:true" \
  "id_gen.distribution: one partition per route, each on its shard, in step"
shard_parts() { sq "$1" -c "SELECT string_agg(c.relname || ' ' || pg_get_expr(c.relpartbound, c.oid), ', ' ORDER BY c.relname) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'public.orders'::regclass AND c.relname !~ '_(not_owned|negative)$'"; }  # tombstones: e2e 16
assert_eq "$(shard_parts 1)" "orders_g0_21844 FOR VALUES FROM ('0') TO ('3074410433122140160')" "shard_1: orders partitioned, one partition for its genes"
assert_eq "$(shard_parts 3)" "orders_g43690_65535 FOR VALUES FROM ('6148820866244280320') TO (MAXVALUE)" "shard_3: likewise"
assert_eq "$(cq -c "SELECT ftoptions::text FROM pg_foreign_table WHERE ftrelid = 'orders_shards_g21845_43689_fdw'::regclass")" \
  "{schema_name=public,table_name=orders_g21845_43689}" "each coordinator foreign table points at the shard's partition of the same genes"
# (PostgreSQL 18 records NOT NULL constraints in pg_constraint too: contype 'n'.)
assert_eq "$(sq 1 -c "SELECT string_agg(conname, ',' ORDER BY conname) FROM pg_constraint WHERE conrelid = 'public.orders'::regclass AND contype <> 'n'")" \
  "id_gen_owner_gene,orders_amount_check,orders_pkey" "the shard's table has the primary key and the CHECK of the original, and the owner-gene CHECK"
assert_eq "$(cq -c "SELECT has_table_privilege('app', 'orders', 'INSERT') AND has_table_privilege('app', 'orders_shards', 'INSERT')")" "t" \
  "grants carried over to the view and the partitioned table"

# Where a row must live: on the shard route_owner names, checked on every shard itself.
check_placement() { # check_placement EXPECTED_TOTAL WHAT
  local total=0 i n bad
  for i in 1 2 3; do
    bad=$(sq $i -c "SELECT count(*) FROM orders o WHERE NOT EXISTS (SELECT FROM id_gen.shard_tables t, unnest(t.gene_ranges) r WHERE t.table_name = 'orders' AND r @> id_gen.shard_gene(o.owner_id))")
    assert_eq "$bad" "0" "$2: every row on shard_$i belongs to an owner it owns"
    n=$(sq $i -c "SELECT count(*) FROM orders")
    total=$((total + n))
  done
  assert_eq "$total" "$1" "$2: rows on the shards"
  assert_eq "$(cq -c "SELECT count(*) || '/' || count(DISTINCT id) FROM orders")" "$1/$1" "$2: the coordinator sees them all, no id twice"
}
check_placement 300 "after distribute_table"

# (c) inserts --------------------------------------------------------------------------------
ret=$(cq -c "SET ROLE app" -c "INSERT INTO orders (owner_id, amount) VALUES (42, 10) RETURNING id, amount, created_at IS NOT NULL")
id42=${ret%%|*}
assert_eq "$(cq -c "SELECT id_gen.shard_of($id42::bigint) = id_gen.shard_gene(42::bigint)")" "t" "INSERT naming only the owner, as an application role: RETURNING gives an id of the owner's gene ($ret)"
assert_eq "$(sq "$(cq -c "SELECT right(id_gen.route_owner(42::bigint), 1)")" -c "SELECT owner_id FROM orders WHERE id = $id42")" "42" \
  "the row sits on route_owner(42)"
# What ORMs send: every column, with DEFAULT or NULL for the id, as a prepared statement.
orm=$(cq -c "PREPARE ins(bigint, bigint, numeric) AS INSERT INTO orders (id, owner_id, amount, note) VALUES (\$1, \$2, \$3, DEFAULT) RETURNING id" \
  -c "EXECUTE ins(NULL, 43, 2)" -c "INSERT INTO orders (id, owner_id, amount) VALUES (DEFAULT, 44, 3) RETURNING id")
assert_eq "$(cq -c "SELECT count(*) FROM orders WHERE id IN ($(tr '\n' ',' <<<"$orm" | sed 's/,$//')) AND id_gen.shard_of(id) = id_gen.shard_gene(owner_id)")" "2" \
  "ORM-style inserts (prepared, NULL or DEFAULT id) get ids of their owners' genes"
cq -c "DELETE FROM orders WHERE owner_id IN (43, 44) AND amount IN (2, 3) AND note IS NULL AND id IN ($(tr '\n' ',' <<<"$orm" | sed 's/,$//'))" >/dev/null
cq -c "INSERT INTO orders (id, owner_id, amount) VALUES (id_gen.gene_order_id('orders', 7), 7, 1)" >/dev/null
pass "INSERT with an explicit id"
assert_eq "$(state_of cq -c "INSERT INTO orders (id, owner_id) VALUES (id_gen.gene_order_id('orders', 7), 8)")" "23514" \
  "an id of another gene than its owner's: 23514"
assert_eq "$(state_of cq -c "INSERT INTO orders (amount) VALUES (1)")" "23502" "neither id nor owner: 23502"
seq 1001 3000 | awk '{ print $1 "\t" ($1 % 50) }' | cq -c "COPY orders (owner_id, amount) FROM STDIN" >/dev/null
pass "COPY of 2000 rows naming only the owner"
check_placement 2302 "after inserts and COPY"
assert_eq "$(cq -c "UPDATE orders SET amount = amount + 1 WHERE id = $id42 RETURNING amount")" "11" "UPDATE ... RETURNING through the table"
assert_eq "$(cq -c "WITH d AS (DELETE FROM orders WHERE owner_id = 7 RETURNING 1) SELECT count(*) FROM d")" "2" "DELETE through the table"

# (d) pruning ----------------------------------------------------------------------------------
plan=$(cq -c "EXPLAIN (COSTS OFF) SELECT * FROM orders WHERE id = $id42")
assert_eq "$(foreign_scans "$plan")" "1" "a point lookup by a literal id is one Foreign Scan"
plan=$(cq -c "SET plan_cache_mode = force_generic_plan" -c "PREPARE byid(bigint) AS SELECT * FROM orders WHERE id = \$1" \
  -c "EXPLAIN (COSTS OFF) EXECUTE byid($id42)")
assert_eq "$(foreign_scans "$plan")" "1" "a generic prepared plan prunes to one Foreign Scan at executor start"
grep -q "Subplans Removed: 2" <<<"$plan" || fail "generic plan without 'Subplans Removed: 2': $plan"
plan=$(cq -c "EXPLAIN (COSTS OFF) SELECT * FROM orders WHERE owner_id = 42 AND id BETWEEN id_gen.owner_first_id(42) AND id_gen.owner_last_id(42)")
assert_eq "$(foreign_scans "$plan")" "1" "a lookup by owner with owner_first_id/owner_last_id is one Foreign Scan"
plan=$(cq -c "SET plan_cache_mode = force_generic_plan" \
  -c "PREPARE byowner(bigint) AS SELECT * FROM orders WHERE owner_id = \$1 AND id BETWEEN id_gen.owner_first_id(\$1) AND id_gen.owner_last_id(\$1)" \
  -c "EXPLAIN (COSTS OFF) EXECUTE byowner(42)")
assert_eq "$(foreign_scans "$plan")" "1" "the owner lookup prunes in a generic prepared plan too"
assert_eq "$(cq -c "SELECT string_agg(amount::text, ',' ORDER BY amount) FROM orders WHERE owner_id = 42 AND id BETWEEN id_gen.owner_first_id(42) AND id_gen.owner_last_id(42)")" "11,42" \
  "the owner lookup finds both rows of owner 42"

# (e) the shard refuses ids of genes it does not own -----------------------------------------------------------
foreign_gene_id=$(cq -c "SELECT id_gen.compose_id(50000, 1)")
assert_eq "$(state_of sq 1 -c "INSERT INTO orders (id, owner_id) VALUES ($foreign_gene_id, 1)")" "IG001" \
  "a row of gene 50000 inserted directly on shard_1: IG001 (route changed: not its gene)"

# (f) route changes ------------------------------------------------------------------------
routes_before=$(cq -c "SELECT string_agg(upper_gene || shard, ',' ORDER BY upper_gene) FROM id_gen.shard_routes")
out=$(cq -v VERBOSITY=verbose -c "SELECT id_gen.set_route(43689, 'shard_3')" 2>&1) && fail "re-routing shard_2's rows away succeeded: $out"
grep -q '^ERROR:  55000: id_gen: shard "shard_2" holds rows of public.orders outside the genes it would own' <<<"$out" \
  || fail "not the expected refusal: $out"
pass "moving genes that still have rows on their shard is refused (55000)"
assert_eq "$(cq -c "SELECT string_agg(upper_gene || shard, ',' ORDER BY upper_gene) FROM id_gen.shard_routes")" "$routes_before" "the routes are unchanged"
assert_eq "$(cq -c "SELECT bool_and(in_step)::text || count(*) FROM id_gen.distribution")" "true3" "partitions are unchanged and in step"
assert_eq "$(state_of cq -c "SELECT id_gen.drop_route(65535)")" "55000" "dropping the top route of distributed tables: 55000"

# An empty range of 10 genes in shard_3's part moves to shard_1.
lo=$(cq -c "SELECT g FROM generate_series(43700, 65000, 10) g WHERE NOT EXISTS (SELECT FROM orders WHERE id BETWEEN id_gen.gene_first_id(g) AND id_gen.gene_last_id(g + 9)) LIMIT 1")
hi=$((lo + 9))
cq -c "BEGIN" -c "SELECT id_gen.set_route($((lo - 1)), 'shard_3', copy_rows => true)" -c "SELECT id_gen.set_route($hi, 'shard_1', copy_rows => true)" -c "COMMIT" >/dev/null
pass "genes $lo .. $hi moved from shard_3 to shard_1 (two set_route calls in one transaction, copy_rows => true: shard_3 re-partitions its rows under its lock)"
assert_eq "$(cq -c "SELECT s.srvname FROM pg_foreign_table ft JOIN pg_foreign_server s ON s.oid = ft.ftserver WHERE ft.ftrelid = 'orders_shards_g${lo}_${hi}_fdw'::regclass")" \
  "shard_1" "the partition of genes $lo .. $hi points at shard_1"
assert_eq "$(cq -c "SELECT bool_and(in_step)::text || count(*) FROM id_gen.distribution")" "true5" "every partition is in step (5 runs)"
assert_eq "$(sq 1 -c "SELECT gene_ranges FROM id_gen.shard_tables")" "{\"[0,21845)\",\"[$lo,$((hi + 1)))\"}" "shard_1 owns genes 0 .. 21844 and $lo .. $hi"
assert_eq "$(sq 3 -c "SELECT gene_ranges FROM id_gen.shard_tables")" "{\"[43690,$lo)\",\"[$((hi + 1)),65536)\"}" "shard_3 no longer owns $lo .. $hi"
assert_eq "$(shard_parts 1 | sed 's/ FOR VALUES[^,]*//g')" "orders_g0_21844, orders_g${lo}_${hi}" "shard_1 has a partition for the new genes"
assert_eq "$(shard_parts 3 | sed 's/ FOR VALUES[^,]*//g')" "orders_g43690_$((lo - 1)), orders_g$((hi + 1))_65535" "shard_3 split its partition around them"
owner=$(cq -c "SELECT o FROM generate_series(1, 5000000) o WHERE id_gen.shard_gene(o) BETWEEN $lo AND $hi LIMIT 1")
cq -c "INSERT INTO orders (owner_id, amount) VALUES ($owner, 5)" >/dev/null
assert_eq "$(sq 1 -c "SELECT count(*) FROM orders WHERE owner_id = $owner")" "1" "a new row of owner $owner (gene $(cq -c "SELECT id_gen.shard_gene($owner)")) lands on shard_1"
assert_eq "$(state_of sq 3 -c "INSERT INTO orders (id, owner_id) VALUES (id_gen.compose_id($lo, 999999), $owner)")" "IG001" \
  "shard_3 now refuses ids of those genes (IG001)"

# (g) an application that routes by itself --------------------------------------------------
shard=$(cq -c "SELECT right(id_gen.route_owner(77::bigint), 1)")
own_id=$(sq "$shard" -c "INSERT INTO orders (id, owner_id, amount) VALUES (id_gen.gene_order_id('orders', 77), 77, 3) RETURNING id")
assert_eq "$(cq -c "SELECT amount FROM orders WHERE id = $own_id")" "3" "a row inserted on shard_$shard by the application is found through the coordinator"
cq -c "INSERT INTO orders (owner_id) SELECT 77 FROM generate_series(1, 500)" >/dev/null
sq "$shard" -c "INSERT INTO orders (id, owner_id) SELECT id_gen.gene_order_id('orders', 77), 77 FROM generate_series(1, 500)" >/dev/null
check_placement 3302 "after inserts on the coordinator and directly on a shard for the same owner"

# (h) a shard down: what the README's failure table says -----------------------------------
s1_id=$(sq 1 -c "SELECT id FROM orders LIMIT 1")
s1_owner=$(sq 1 -c "SELECT owner_id FROM orders LIMIT 1")
s2_id=$(sq 2 -c "SELECT id FROM orders LIMIT 1")
cluster_stop "$(shard_dir 2)"
assert_eq "$(cq -c "SELECT count(*) FROM orders WHERE id = $s1_id")" "1" "shard_2 down: a lookup of a shard_1 id still works"
assert_eq "$(cq -c "INSERT INTO orders (owner_id) VALUES ($s1_owner) RETURNING id_gen.route(id)")" "shard_1" \
  "shard_2 down: an insert for an owner on shard_1 still works"
assert_eq "$(state_of cq -c "SELECT * FROM orders WHERE id = $s2_id")" "08001" "shard_2 down: a lookup of a shard_2 id fails with 08001"
assert_eq "$(state_of cq -c "SELECT count(*) FROM orders")" "08001" "shard_2 down: a full scan fails with 08001"
out=$(cq -v VERBOSITY=verbose -c "SELECT id_gen.set_route(43689, 'shard_3')" 2>&1) && fail "a route change with shard_2 down succeeded"
grep -q 'id_gen: shard "shard_2" is unreachable' <<<"$out" || fail "not the expected error: $out"
pass "shard_2 down: a route change that needs it fails, naming it"
assert_eq "$(cq -c "SELECT count(*) FROM id_gen.shard_routes")" "5" "the routes are unchanged"
cluster_up "$(shard_dir 2)"
assert_eq "$(cq -c "SELECT count(*) FROM orders WHERE id = $s2_id")" "1" "shard_2 back: its rows are found again"
echo "11_coordinator: passed"
