#!/usr/bin/env bash
# Zero-hop routing (docs/routing-protocol.md): a coordinator and two shards
# (wal_level = logical), applications that route by themselves.
# (a) the protocol in SQL: route_version() grows with each route change and NOTIFY
#     id_gen_routes carries it; route_map reads routes and version together; the shards
#     are told the version; on a shard, a write of a gene it does not own, a lookup by
#     id, a generic-plan lookup and an owner's id-range read of such genes fail with IG001
#     (never 23514, never an empty result), while a scan without an id predicate works;
#     SET id_gen.route_version older than the shard's fails with IG001, the current one
#     works; route_claim refuses stale versions and genes not owned (IG001) and fenced
#     genes (IG002), and so do writes and id reads of a fenced partition.
# (b) Python clients (id_gen_client.Router: no coordinator in the data path) insert and
#     update rows of all owners while a quarter of the genes moves to the other shard and
#     then a range splits: 0 failed transactions, the clients' log equals the rows per
#     owner (count and sum), a reader of a fixed set of owners never gets an empty
#     answer; a Rust client (clients/rust) writes at the same time.
# (c) a client with stale routes (no LISTEN) gets IG001 from the old shard, not an empty
#     result, and succeeds after refreshing, with a claim (transaction()) and with SET
#     id_gen.route_version (execute()); Router.next_id gives an id of the owner's gene.
# (d) both clients compute the extension's genes: the check values and 10 000 random
#     bigint and text owners.
source "$(dirname "$0")/lib.sh"
PY=$(ensure_python_env)
# The Rust client's command-line tool (clients/rust; tier 1 of scripts/test.sh builds it).
RUST_TOOL="$REPO_ROOT/target/clients/release/id_gen_client_tool"
(cd "$REPO_ROOT" && CARGO_TARGET_DIR="$REPO_ROOT/target/clients" cargo build --release -q -p id_gen_client --bin id_gen_client_tool)
C=/tmp/idg_e2e16c CP=54460
shard_dir() { echo "/tmp/idg_e2e16s$1"; }
shard_port() { echo $((CP + $1)); }
SMALL=("shared_buffers = 32MB" "max_connections = 60")
LOGICAL=("wal_level = logical" "max_wal_senders = 10" "max_replication_slots = 10")
trap 'kill $(jobs -p) 2>/dev/null || true; cluster_stop "$C"; for i in 1 2; do cluster_stop "$(shard_dir $i)"; done' EXIT
cq() { cpsql "$C" "$CP" -At "$@"; }
sq() { local i=$1; shift; cpsql "$(shard_dir "$i")" "$(shard_port "$i")" -At "$@"; }
# The SQLSTATE of the first error of a psql run.
state_of() { "$@" -v VERBOSITY=verbose 2>&1 >/dev/null | sed -n 's/^ERROR:  \([0-9A-Z]\{5\}\): .*/\1/p' | head -1; }
detail_of() { "$@" 2>&1 >/dev/null | sed -n 's/^DETAIL:  //p' | head -1; }
dsn() { echo "host=$(shard_dir "$1") port=$(shard_port "$1") dbname=postgres user=postgres"; }
CDSN="host=$C port=$CP dbname=postgres user=postgres"

cluster_start "$C" "$CP" "${SMALL[@]}"
cq >/dev/null <<SQL
CREATE EXTENSION id_gen; CREATE EXTENSION postgres_fdw; CREATE EXTENSION dblink;
SELECT id_gen.create_sequence('orders', step => 1000);
CREATE ROLE id_authority LOGIN;
GRANT UPDATE (max_id) ON id_gen.sequences TO id_authority;
ALTER ROLE id_authority SET synchronous_commit = on;
SELECT id_gen.set_route(16383, 'shard_1');
SELECT id_gen.set_route(32767, 'shard_1');
SELECT id_gen.set_route(65535, 'shard_2');
CREATE TABLE orders (id bigint PRIMARY KEY, owner_id bigint NOT NULL, amount bigint NOT NULL, note text);
SQL
for i in 1 2; do
  cluster_start "$(shard_dir $i)" "$(shard_port $i)" "${SMALL[@]}" "${LOGICAL[@]}"
  sq $i >/dev/null <<SQL
CREATE EXTENSION id_gen; CREATE EXTENSION postgres_fdw;
CREATE SERVER central FOREIGN DATA WRAPPER postgres_fdw
  OPTIONS (host '$C', port '$CP', dbname 'postgres', connect_timeout '2', options '-c synchronous_commit=on');
CREATE USER MAPPING FOR PUBLIC SERVER central OPTIONS (user 'id_authority');
SELECT id_gen.create_sequence('orders', step => 1000, authority => 'central');
SQL
  cq >/dev/null <<SQL
CREATE SERVER shard_$i FOREIGN DATA WRAPPER postgres_fdw
  OPTIONS (host '$(shard_dir $i)', port '$(shard_port $i)', dbname 'postgres', connect_timeout '2');
CREATE USER MAPPING FOR postgres SERVER shard_$i OPTIONS (user 'postgres');
SQL
done
cq -c "SET client_min_messages = warning" -c "SELECT id_gen.distribute_table('orders', 'id', 'owner_id', 'orders')" >/dev/null

log "(a) the protocol in SQL"
v1=$(cq -c "SELECT id_gen.route_version()")
assert_eq "$v1" 3 "route_version() after three set_route calls"
assert_eq "$(cq -c "SELECT count(*) || '/' || count(DISTINCT version) || '/' || min(version) FROM id_gen.route_map")" "3/1/$v1" \
  "route_map: the three ranges with the current version"
# NOTIFY id_gen_routes with the new version, at commit.
notified=$("$PY" - "$CDSN" <<'PYEOF'
import sys, psycopg
dsn = sys.argv[1]
with psycopg.connect(dsn, autocommit=True) as l, psycopg.connect(dsn, autocommit=True) as w:
    l.execute("LISTEN id_gen_routes")
    with w.transaction():
        w.execute("SELECT id_gen.set_route(49151, 'shard_2')")
    got = [n.payload for n in l.notifies(timeout=5, stop_after=1)]
    print(got[0] if got else "none")
PYEOF
)
v2=$(cq -c "SELECT id_gen.route_version()")
assert_eq "$notified" "$v2" "NOTIFY id_gen_routes carried the new version"
assert_gt "$v2" "$v1" "set_route raised the version"
cq -c "SELECT id_gen.push_route_state(true)" >/dev/null
for i in 1 2; do
  assert_eq "$(sq $i -c "SELECT version FROM id_gen.shard_route_state")" "$v2" "shard_$i was told route version $v2"
  assert_eq "$(sq $i -c "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'orders'::regclass AND pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT'")" \
    "orders_not_owned" "shard_$i: the tombstone partition"
done
assert_eq "$(cq -c "SELECT bool_and(up_to_date) FROM id_gen.route_push_status")" "t" "route_push_status: every shard up to date"

o1=$(cq -c "SELECT o FROM generate_series(1, 100000) o WHERE id_gen.shard_gene(o::bigint) <= 16383 LIMIT 1")   # an owner on shard_1
o2=$(cq -c "SELECT o FROM generate_series(1, 100000) o WHERE id_gen.shard_gene(o::bigint) >= 32768 LIMIT 1")   # an owner on shard_2
G1=$(cq -c "SELECT id_gen.shard_gene($o1::bigint)")
G2=$(cq -c "SELECT id_gen.shard_gene($o2::bigint)")
id1=$(cq -c "SELECT id_gen.compose_id($G1, 7)")
id2=$(cq -c "SELECT id_gen.compose_id($G2, 7)")
sq 1 -c "INSERT INTO orders VALUES ($id1, $o1, 10)" >/dev/null
sq 2 -c "INSERT INTO orders VALUES ($id2, $o2, 20)" >/dev/null
assert_eq "$(state_of sq 2 -c "INSERT INTO orders VALUES ($id1 + 1, $o1, 10)")" "IG001" "a write of a gene the shard does not own: IG001, not 23514"
assert_eq "$(detail_of sq 2 -c "INSERT INTO orders VALUES ($id1 + 1, $o1, 10)")" "The shard is at route version $v2; gene $G1 is on shard \"shard_1\"." \
  "its DETAIL names the version and the owner"
assert_eq "$(state_of sq 2 -c "SELECT * FROM orders WHERE id = $id1")" "IG001" "a lookup by id of a gene the shard does not own: IG001, not an empty result"
assert_eq "$(sq 1 -c "SELECT amount FROM orders WHERE id = $id1")" "10" "the owner answers it"
assert_eq "$(state_of sq 2 -c "SET plan_cache_mode = force_generic_plan" -c "PREPARE p(bigint) AS SELECT amount FROM orders WHERE id = \$1" -c "EXECUTE p($id2)" -c "EXECUTE p($id1)")" "IG001" \
  "a generic-plan lookup of a gene not owned: IG001"
assert_eq "$(sq 2 -c "SET plan_cache_mode = force_generic_plan" -c "PREPARE p(bigint) AS SELECT amount FROM orders WHERE id = \$1" -c "EXECUTE p($id2)")" "20" \
  "the same generic plan for an owned gene answers"
assert_eq "$(sq 2 -c "EXPLAIN (COSTS OFF) SELECT * FROM orders WHERE id = $id1" | head -1 | sed 's/ on .*//')" "Index Scan using orders_not_owned_pkey" \
  "EXPLAIN of such a lookup still works (nothing runs)"
assert_eq "$(sq 2 -c "SELECT amount FROM orders WHERE id = (SELECT $id2)")" "20" \
  "a lookup by an id from a subquery (pruned when it runs) of an owned gene answers"
assert_eq "$(state_of sq 2 -c "SELECT amount FROM orders WHERE id = (SELECT $id1)")" "IG001" \
  "the same for a gene not owned: IG001 when the scan runs"
assert_eq "$(state_of sq 2 -c "SELECT count(*) FROM orders WHERE id BETWEEN id_gen.gene_first_id($G1) AND id_gen.gene_last_id($G1)")" "IG001" \
  "an owner's id-range read of a gene not owned: IG001"
assert_eq "$(state_of sq 2 -c "SELECT count(*) FROM orders WHERE id >= id_gen.gene_first_id($G1) AND id <= id_gen.gene_last_id($G1) AND owner_id = $o1")" "IG001" \
  "the same with another predicate"
assert_eq "$(sq 2 -c "SELECT count(*) FROM orders")" "1" "a scan without an id predicate sees the shard's own rows"
assert_eq "$(sq 2 -c "SELECT count(*) FROM orders WHERE owner_id = $o1")" "0" "and so does one with a predicate on another column"
assert_eq "$(state_of sq 2 -c "UPDATE orders SET amount = 0 WHERE id = $id1")" "IG001" "an UPDATE by id of a gene not owned: IG001"
assert_eq "$(state_of sq 2 -c "DELETE FROM orders WHERE id = $id1")" "IG001" "a DELETE by id of a gene not owned: IG001"
old=$((v2 - 1))
assert_eq "$(state_of sq 2 -c "SET id_gen.route_version = $old" -c "SELECT amount FROM orders WHERE id = $id2")" "IG001" "SET id_gen.route_version older than the shard's: IG001"
assert_eq "$(sq 2 -c "SET id_gen.route_version = $v2" -c "SELECT amount FROM orders WHERE id = $id2")" "20" "the current version: the statement runs"
assert_eq "$(sq 2 -c "SET id_gen.route_version = $old" -c "SELECT 1")" "1" "a statement that touches no distributed table is not checked"
assert_eq "$(sq 2 -c "BEGIN" -c "SELECT id_gen.route_claim($G2, $v2)" -c "SELECT amount FROM orders WHERE id = $id2" -c "COMMIT")" "$(printf '%s\n%s' "$v2" 20)" \
  "route_claim of an owned gene at the current version returns the shard's version"
assert_eq "$(state_of sq 2 -c "SELECT id_gen.route_claim($G2, $old)")" "IG001" "route_claim with a stale version: IG001"
assert_eq "$(state_of sq 2 -c "SELECT id_gen.route_claim($G1, $v2)")" "IG001" "route_claim of a gene not owned: IG001"
assert_eq "$(state_of sq 2 -c "SELECT id_gen.route_claim(70000, $v2)")" "22023" "route_claim of a gene out of range: 22023"
# A fence (as a move's cut-over sets it) on shard_1's partition of genes 0 .. 16383.
sq 1 -c "SELECT id_gen.shard_fence(999, 'shard_2', ARRAY['public.orders_g0_16383'])" >/dev/null
assert_eq "$(state_of sq 1 -c "SELECT id_gen.route_claim($G1, $v2)")" "IG002" "route_claim of a fenced gene: IG002"
assert_eq "$(state_of sq 1 -c "INSERT INTO orders VALUES ($id1 + 2, $o1, 10)")" "IG002" "a write of a fenced gene: IG002"
assert_eq "$(state_of sq 1 -c "SELECT * FROM orders WHERE id = $id1")" "IG002" "an id read of a fenced gene: IG002"
assert_eq "$(sq 1 -c "SELECT count(*) FROM orders")" "1" "a scan without an id predicate still works"
sq 1 -c "SELECT id_gen.shard_unfence(ARRAY['public.orders_g0_16383'])" >/dev/null
assert_eq "$(sq 1 -c "BEGIN" -c "SELECT id_gen.route_claim($G1, $v2) > 0" -c "COMMIT")" "t" "after the fence is lifted the claim succeeds"
sq 1 -c "DELETE FROM orders" >/dev/null; sq 2 -c "DELETE FROM orders" >/dev/null
log "(a) done"

log "(b) Router clients (Python and Rust) while a quarter of the genes moves, then a range splits"
W=$C/work; mkdir -p "$W"; chown postgres "$W"
SHARDS_JSON="{\"shard_1\": \"$(dsn 1)\", \"shard_2\": \"$(dsn 2)\"}"
cq -c "SELECT string_agg(o::text, ' ') FROM generate_series(1, 600) o" > "$W/owners"
# Readers: owners whose genes move (0 .. 16383) or split (49152 .. 65535).
cq -c "SELECT string_agg(o::text, ' ') FROM (
         (SELECT o FROM generate_series(1001, 200000) o WHERE id_gen.shard_gene(o::bigint) <= 16383 LIMIT 15)
         UNION ALL (SELECT o FROM generate_series(1001, 200000) o WHERE id_gen.shard_gene(o::bigint) >= 49152 LIMIT 15)) s" > "$W/readers"
rm -f "$W/stop"
"$PY" "$REPO_ROOT/tests/e2e/routing_load.py" "$CDSN" "$SHARDS_JSON" "$W/owners" "$W/readers" 120 "$W/stop" > "$W/load.json" 2> "$W/load.err" &
load=$!
for _ in $(seq 1 100); do grep -q '^ready' "$W/load.err" 2>/dev/null && break; sleep 0.2; done
grep -q '^ready' "$W/load.err" || { cat "$W/load.err" >&2; fail "the load generator did not start"; }
"$RUST_TOOL" bench --routes-dsn "$CDSN" --shard "shard_1=$(dsn 1)" --shard "shard_2=$(dsn 2)" --table orders \
  --owners 600 --seconds 1000 --mode insert --stop-file "$W/stop" > "$W/rust.json" 2> "$W/rust.err" &
rust=$!
sleep 3
cq -c "CALL id_gen.move_genes(0, 16383, 'shard_2')" 2>&1 | sed -n 's/^\(NOTICE\|ERROR\|DETAIL\|HINT\):  /  /p' >&2
assert_eq "$(cq -c "SELECT shard FROM id_gen.route_map WHERE lower_gene = 0")" "shard_2" "genes 0 .. 16383 are on shard_2"
sleep 2
cq -c "CALL id_gen.split_route(57343)" 2>&1 | sed -n 's/^\(NOTICE\|ERROR\|DETAIL\|HINT\):  /  /p' >&2
assert_eq "$(cq -c "SELECT count(*) FROM id_gen.route_map WHERE shard = 'shard_2'")" "4" "genes 49152 .. 65535 are split in two"
sleep 2
touch "$W/stop"
wait $load || { cat "$W/load.err" >&2; fail "the load generator failed"; }
wait $rust || { cat "$W/rust.err" >&2; fail "the Rust client failed"; }
summary=$("$PY" - "$W/load.json" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
print(r["committed"], r["failed"], r["reads"], r["empty_reads"], r["router"].get("retries_moved", 0) + r["router"].get("retries_fenced", 0),
      r["p50_ms"], r["p99_ms"], r["max_ms"], r["version"], json.dumps(r["errors"]).replace(" ", ""))
PYEOF
)
read -r committed failed reads empty retries p50 p99 pmax version errors <<< "$summary"
echo "  Python clients: $committed transactions, $reads reads, $retries retries; latency p50 $p50 / p99 $p99 / max $pmax ms; errors $errors" >&2
assert_gt "$committed" 1000 "the Python clients committed transactions"
assert_eq "$failed" 0 "no failed transaction (moves and splits included)"
assert_gt "$reads" 100 "the reader read"
assert_eq "$empty" 0 "the reader never got an empty answer for an owner with rows"
assert_gt "$retries" 0 "the clients met the moved or fenced errors and retried"
assert_eq "$version" "$(cq -c "SELECT id_gen.route_version()")" "the Router followed the route version (LISTEN)"
# The clients' log against the rows (through the coordinator), per owner.
cq -c "SELECT owner_id, count(*), sum(amount) FROM orders WHERE note IS NULL GROUP BY owner_id ORDER BY owner_id" > "$W/rows.txt"
mismatch=$("$PY" - "$W/load.json" "$W/rows.txt" <<'PYEOF'
import json, sys
log = {int(k): v for k, v in json.load(open(sys.argv[1]))["log"].items()}
rows = {}
for line in open(sys.argv[2]):
    o, n, s = line.strip().split("|")
    rows[int(o)] = [int(n), int(s)]
bad = [(o, log.get(o), rows.get(o)) for o in set(log) | set(rows) if log.get(o) != rows.get(o)]
print(len(bad), len(log), bad[:3])
PYEOF
)
assert_eq "${mismatch%% *}" 0 "the rows per owner (count and sum) equal the clients' log ($mismatch)"
rust_tx=$("$PY" -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['tx'], r['errors'])" "$W/rust.json")
echo "  Rust client: $(cat "$W/rust.json")" >&2
assert_gt "${rust_tx%% *}" 100 "the Rust client committed inserts during the move and the split"
assert_eq "${rust_tx##* }" 0 "the Rust client had no failed transaction"
assert_eq "$(cq -c "SELECT count(*) FROM orders WHERE note = 'rust'")" "${rust_tx%% *}" "every insert of the Rust client is there"

log "(c) a client with stale routes"
reader_owner=$(cut -d' ' -f1 "$W/readers")
stale=$("$PY" - "$CDSN" "$SHARDS_JSON" "$reader_owner" <<'PYEOF'
import json, sys, psycopg
from id_gen_client import Router
cdsn, shards, owner = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
with Router(cdsn, shards, listen=False) as r, Router(cdsn, shards, listen=False) as r2:
    before = r.shard_for_owner(owner)
    r2.execute("SELECT 1 FROM orders WHERE id = 0", owner=owner)  # declares its version on a connection of the old shard
    with psycopg.connect(cdsn, autocommit=True) as c:
        c.execute("CALL id_gen.move_genes(0, 16383, 'shard_1')")
    g = r.gene(owner)
    # The old shard refuses the read (IG001), not an empty answer.
    try:
        with psycopg.connect(shards[before], autocommit=True) as s:
            s.execute("SELECT count(*) FROM orders WHERE id BETWEEN %s AND %s", (g << 47, (g << 47) | ((1 << 47) - 1))).fetchone()
        old = "answered"
    except psycopg.Error as e:
        old = e.sqlstate
    with r.transaction(owner=owner) as conn:
        n = conn.execute("SELECT count(*) FROM orders WHERE owner_id = %s AND id BETWEEN %s AND %s",
                         (owner, g << 47, (g << 47) | ((1 << 47) - 1))).fetchone()[0]
    nid = r.next_id("orders", owner)
    # One statement with the version declared by SET id_gen.route_version: retried the same way.
    m = r2.execute("SELECT count(*) FROM orders WHERE owner_id = %s AND id BETWEEN %s AND %s",
                   (owner, g << 47, (g << 47) | ((1 << 47) - 1)), owner=owner)[0][0]
    # A body that swallows a statement's error does not get a COMMIT reported as done.
    try:
        with r.transaction(owner=owner) as conn:
            try:
                conn.execute("SELECT 1 / 0")
            except psycopg.errors.DivisionByZero:
                pass
        swallowed = "committed"
    except psycopg.errors.InFailedSqlTransaction:
        swallowed = "refused"
    print(before, old, r.shard_for_owner(owner), n > 0, r.stats["retries_moved"] > 0,
          r.shard_for_id(nid) == r.shard_for_owner(owner) and (nid >> 47) == g, m == n and r2.stats["retries_moved"] > 0,
          swallowed)
PYEOF
)
assert_eq "$stale" "shard_2 IG001 shard_1 True True True True refused" \
  "stale routes: IG001 from the old shard, a refresh, then the rows from the new one (transaction() and execute()); next_id gives an id of the owner's gene; a failed body is not reported committed"

log "(d) the clients compute the extension's genes"
"$PY" - "$W/genes.in" <<'PYEOF'
import random, sys
rng = random.Random(16)
alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-éü中文🙂"
with open(sys.argv[1], "w") as f:
    for v in [42, 0, 1, 45346343212, -1, -(1 << 63), (1 << 63) - 1]:
        f.write(f"b {v}\n")
    f.write("t alice\n")
    for _ in range(10000):
        f.write(f"b {rng.randint(-(1 << 63), (1 << 63) - 1)}\n")
    for _ in range(10000):
        f.write("t " + "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 24))) + "\n")
PYEOF
chown postgres "$W/genes.in"
cq -c "CREATE TEMP TABLE g_in (n serial, line text)" -c "\\copy g_in (line) FROM '$W/genes.in'" \
   -c "SELECT CASE WHEN left(line, 1) = 'b' THEN id_gen.shard_gene(substr(line, 3)::bigint) ELSE id_gen.shard_gene(substr(line, 3)) END FROM g_in ORDER BY n" > "$W/genes.sql"
"$PY" -c "
import sys
from id_gen_client import gene
for line in open(sys.argv[1], encoding='utf-8'):
    kind, v = line.rstrip('\n').split(' ', 1)
    print(gene(int(v)) if kind == 'b' else gene(v))" "$W/genes.in" > "$W/genes.py"
"$RUST_TOOL" genes < "$W/genes.in" > "$W/genes.rs"
assert_eq "$(wc -l < "$W/genes.sql")" 20008 "the extension's genes of 20 008 owners (check values, bounds, 10 000 random bigints, 10 000 random texts)"
assert_eq "$(head -8 "$W/genes.sql" | tr '\n' ' ')" "16043 55408 24031 14299 $(sed -n 5,7p "$W/genes.sql" | tr '\n' ' ')13795 " "the published check values"
assert_eq "$(cmp -s "$W/genes.sql" "$W/genes.py" && echo same)" "same" "Python's genes equal the extension's"
assert_eq "$(cmp -s "$W/genes.sql" "$W/genes.rs" && echo same)" "same" "Rust's genes equal the extension's"
