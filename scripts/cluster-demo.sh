#!/usr/bin/env bash
# A walk through a sharded deployment on one machine (docs/guide/scale-out.md "Sharded deployments" and
# "One ID space for many servers"): a central ID authority, a coordinator and 2 shards,
# each a throwaway PostgreSQL 15 cluster with id_gen, on loopback (unix sockets under
# /tmp/idg_cdemo_*, ports 54460..54463). Prints every statement with why it is run and
# its output. Requires the extension to be installed (scripts/demo.sh does it).
# Usage: bash scripts/cluster-demo.sh      (about 10 s; stops its clusters on exit)
set -euo pipefail
source "$(dirname "$0")/common.sh"

CEN=/tmp/idg_cdemo_central CEN_P=54460
COO=/tmp/idg_cdemo_coord   COO_P=54461
shard_dir() { echo "/tmp/idg_cdemo_shard$1"; }
shard_port() { echo $((54461 + $1)); }
SMALL=("shared_buffers = 32MB" "max_connections = 30")
trap 'cluster_stop "$COO"; cluster_stop "$(shard_dir 1)"; cluster_stop "$(shard_dir 2)"; cluster_stop "$CEN"' EXIT

cenq() { cpsql "$CEN" "$CEN_P" -At "$@"; }
cooq() { cpsql "$COO" "$COO_P" -At "$@"; }
shq() { local i=$1; shift; cpsql "$(shard_dir "$i")" "$(shard_port "$i")" -At "$@"; }
node_of() { # node_of NAME: "DIR PORT" of central | coordinator | shard_N
  case $1 in
    central) echo "$CEN $CEN_P" ;;
    coordinator) echo "$COO $COO_P" ;;
    shard_*) echo "$(shard_dir "${1#shard_}") $(shard_port "${1#shard_}")" ;;
    *) echo "unknown node $1" >&2; return 1 ;;
  esac
}
# step NODE WHY SQL: prints "-- WHY", then the statement (psql -e) and its output.
step() {
  local node=$1 why=$2 sql=$3 where
  where=$(node_of "$node")
  printf '\n-- %s\n%s=# ' "$why" "$node"
  # shellcheck disable=SC2086  # QUIET=off: command tags too (INSERT 0 3, COPY 1000)
  cpsql $where -v QUIET=off -e -c "$sql"
}
banner() { printf '\n==== %s\n' "$*"; }

banner "setup: central authority :$CEN_P, coordinator :$COO_P, shard_1 :$(shard_port 1), shard_2 :$(shard_port 2)"
cluster_start "$CEN" "$CEN_P" "${SMALL[@]}"
cenq >/dev/null <<'SQL'
CREATE EXTENSION id_gen;
SELECT id_gen.create_sequence('orders');
-- The role the other servers reserve segments as: it may move max_id and nothing else.
CREATE ROLE id_authority LOGIN;
GRANT UPDATE (max_id) ON id_gen.sequences TO id_authority;
ALTER ROLE id_authority SET synchronous_commit = on;
SQL
echo "central: sequence 'orders', role id_authority"
# The coordinator and the shards: the same sequence, its segments reserved on the central,
# so ids computed anywhere never collide.
authority_sql="CREATE EXTENSION id_gen;
CREATE EXTENSION postgres_fdw;
CREATE SERVER central FOREIGN DATA WRAPPER postgres_fdw
  OPTIONS (host '$CEN', port '$CEN_P', dbname 'postgres', connect_timeout '2', options '-c synchronous_commit=on');
CREATE USER MAPPING FOR PUBLIC SERVER central OPTIONS (user 'id_authority');
SELECT id_gen.create_sequence('orders', authority => 'central');"
for i in 1 2; do
  cluster_start "$(shard_dir $i)" "$(shard_port $i)" "${SMALL[@]}"
  shq $i >/dev/null <<<"$authority_sql"
  echo "shard_$i: server central, sequence 'orders' with authority => 'central'"
done
cluster_start "$COO" "$COO_P" "${SMALL[@]}"
cooq >/dev/null <<<"$authority_sql"
cooq -c "CREATE EXTENSION dblink" >/dev/null   # shards re-partition in transactions of their own
for i in 1 2; do
  cooq >/dev/null <<SQL
CREATE SERVER shard_$i FOREIGN DATA WRAPPER postgres_fdw
  OPTIONS (host '$(shard_dir $i)', port '$(shard_port $i)', dbname 'postgres', connect_timeout '2');
CREATE USER MAPPING FOR postgres SERVER shard_$i;
-- Loopback with trust authentication: other roles reach the shards as postgres without a
-- password (a real deployment maps them to shard roles with passwords).
CREATE USER MAPPING FOR PUBLIC SERVER shard_$i OPTIONS (user 'postgres', password_required 'false');
SQL
done
echo "coordinator: server central, sequence 'orders' with authority => 'central', servers shard_1 and shard_2"
step coordinator "routes: genes 0..32767 live on shard_1, genes 32768..65535 on shard_2" \
  "SELECT id_gen.set_route(32767, 'shard_1'), id_gen.set_route(65535, 'shard_2')"
step coordinator "an ordinary table, as the application knows it" \
  "CREATE TABLE orders (
  id          bigint PRIMARY KEY,
  customer_id bigint NOT NULL,
  amount      numeric NOT NULL DEFAULT 0,
  created_at  timestamptz NOT NULL DEFAULT now()
)"
step coordinator "distribute it: partitions by id over the shards; a missing id is computed from customer_id with sequence 'orders'" \
  "SELECT id_gen.distribute_table('orders', 'id', 'customer_id', 'orders')"
step central "the central's high-water mark of 'orders' before any insert" \
  "SELECT name, max_id FROM id_gen.sequences"

banner "inserts through the coordinator"
step coordinator "an insert naming only the customer: the id comes from customer 42's gene, RETURNING shows it" \
  "INSERT INTO orders (customer_id, amount) VALUES (42, 19.90) RETURNING id"
step coordinator "several customers in one statement" \
  "INSERT INTO orders (customer_id, amount) VALUES (7, 5), (1000, 12.50), (31337, 99) RETURNING id, customer_id"
id42=$(cooq -c "SELECT max(id) FROM orders WHERE customer_id = 42 AND id BETWEEN id_gen.owner_first_id(42) AND id_gen.owner_last_id(42)")
step coordinator "decode an id: its gene (the customer's shard gene) and the shard the routes give it" \
  "SELECT $id42::bigint AS id, id_gen.shard_of($id42::bigint) AS gene, id_gen.shard_gene(42::bigint) AS gene_of_customer_42, id_gen.route($id42::bigint) AS shard"
printf '\n-- COPY naming only the customer: every row goes to its customer'"'"'s shard (1000 rows: customers 1..1000)\ncoordinator=# COPY orders (customer_id, amount) FROM STDIN\n'
seq 1 1000 | awk '{ print $1 "\t" ($1 % 50) ".00" }' | cpsql "$COO" "$COO_P" -v QUIET=off -c "COPY orders (customer_id, amount) FROM STDIN"
for i in 1 2; do
  step "shard_$i" "rows stored on shard_$i itself (asked on the shard directly)" \
    "SELECT count(*) AS rows_here, min(customer_id), max(customer_id) FROM orders"
done
step coordinator "the coordinator sees every row once" \
  "SELECT count(*) AS rows_total, count(DISTINCT id) AS distinct_ids FROM orders"

banner "queries prune to one shard"
step coordinator "a lookup by id reads one partition: one Foreign Scan" \
  "EXPLAIN (COSTS OFF) SELECT * FROM orders WHERE id = $id42"
step coordinator "a lookup by customer prunes too, when it bounds id by the customer's id range" \
  "EXPLAIN (COSTS OFF) SELECT * FROM orders WHERE customer_id = 42 AND id BETWEEN id_gen.owner_first_id(42) AND id_gen.owner_last_id(42)"
step coordinator "... and finds customer 42's orders (the INSERT and the COPY)" \
  "SELECT id, customer_id, amount FROM orders WHERE customer_id = 42 AND id BETWEEN id_gen.owner_first_id(42) AND id_gen.owner_last_id(42)"
step coordinator "where each run of genes lives, and whether partitions and shards match the routes" \
  "SELECT * FROM id_gen.distribution ORDER BY lower_gene"

banner "an application that routes by itself"
shard77=$(cooq -c "SELECT id_gen.route_owner(77::bigint)")
step coordinator "which shard holds customer 77 (an application may cache the route table and compute this itself)" \
  "SELECT id_gen.route_owner(77::bigint)"
step "$shard77" "insert on $shard77 directly, computing the id there (its segments also come from the central)" \
  "INSERT INTO orders (id, customer_id, amount) VALUES (id_gen.gene_order_id('orders', 77), 77, 42.00) RETURNING id"
step coordinator "the row is found through the coordinator" \
  "SELECT id, customer_id, amount, id_gen.route(id) AS shard FROM orders WHERE customer_id = 77 AND id BETWEEN id_gen.owner_first_id(77) AND id_gen.owner_last_id(77)"

banner "one ID space"
step coordinator "a larger batch through the coordinator (takes more segments from the central)" \
  "INSERT INTO orders (customer_id, amount) SELECT c % 500, 1 FROM generate_series(1, 3000) c"
step central "the central's high-water mark moved: every server reserved its segments here" \
  "SELECT name, max_id FROM id_gen.sequences"
step coordinator "no id twice across the shards" \
  "SELECT count(*) AS rows_total, count(DISTINCT id) AS distinct_ids FROM orders"

echo
echo "cluster demo: done"
