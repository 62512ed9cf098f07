# Sourced by bench/bench.sh (`bench/bench.sh --routing` runs only this; its helpers:
# RUNS, ratio_stats, col_stats, fmt_ratio, fmt_range): zero-hop routing (docs/guide/scale-out.md "Zero-hop
# routing"). A coordinator and 2 shards, small instances on this machine, one table
# distributed with id_gen.distribute_table, 20 000 rows per shard; measured side by side
# in one run, in interleaved rounds:
#   (a) INSERT and point lookup by id, one client, BEGIN + statement + COMMIT: through
#       id_gen_client.Router (Python; the claim rides with BEGIN), through the coordinator
#       (postgres_fdw), directly on the owning shard (psycopg pool, set as the Router's: no
#       prepared statements); single statements in autocommit through Router.execute (the
#       route version in the statement's leading comment) against direct autocommit; and the
#       same with prepared statements on both sides (psycopg's prepare_threshold 5: shards
#       reached without a transaction-mode pooler);
#   (a') each of the five clients through its conformance tool (`bench --side-by-side`: Python,
#       Rust, Java, Go, Node.js), transactions and lookups through its Router against the same
#       statements on its own pool, in one process, alternating slices of 100 ms (Router,
#       direct, direct, Router, ...) after 5 s of warm-up (a JIT's compiles: Java's lookups
#       through PgBouncer were 0.89..0.93 x after 2 s, 0.98 x after 5 s), directly on the
#       shards and through PgBouncer (transaction mode); a round's ratio is of that run's two
#       sides;
#   (b) the shard-side cost of the checks: pgbench point lookups on shard_1 with no declared
#       version, with SET id_gen.route_version (checked by the executor-start guard in every
#       transaction), with the guard off (id_gen.routing_guard = off: no plan walk), and
#       BEGIN + route_claim + lookup + COMMIT, and the claim carried on BEGIN
#       (/* id_gen.route_claim=G,V */ BEGIN) + lookup + COMMIT, against BEGIN + lookup + COMMIT.
# Figures, never a gate.

RB_C=/tmp/idg_bench_rt_coord RB_CP=54480
rb_shard_dir() { echo "/tmp/idg_bench_rt_shard$1"; }
rb_shard_port() { echo $((RB_CP + $1)); }
RB_ROUNDS=5 RB_T=3 RB_PGB_T=5
[ "${QUICK:-}" = "--quick" ] && RB_ROUNDS=3 RB_T=2 RB_PGB_T=3
# (IDG_BENCH_ROUNDS / IDG_BENCH_SECONDS: fewer rounds or shorter runs, e.g. 3 and 2)
RB_ROUNDS=${IDG_BENCH_ROUNDS:-$RB_ROUNDS} RB_T=${IDG_BENCH_SECONDS:-$RB_T}
# (IDG_ROUTING_SECTIONS: some of "9 9b 10"; IDG_BENCH_CLIENTS: some of the five clients, for 9b)
RB_SECTIONS=" ${IDG_ROUTING_SECTIONS:-9 9b 10} " RB_CLIENTS=${IDG_BENCH_CLIENTS:-python rust java go node}
rb_section() { [[ "$RB_SECTIONS" == *" $1 "* ]]; }
RB_WARM_UP=${IDG_BENCH_WARM_UP:-5}  # (9b: seconds of warm-up in each run of a tool)
RB_SMALL=("shared_buffers = 32MB" "max_connections = 40" "listen_addresses = '127.0.0.1'")
trap 'cluster_stop "$RB_C"; cluster_stop "$(rb_shard_dir 1)"; cluster_stop "$(rb_shard_dir 2)"; [ -z "${CDIR:-}" ] || cluster_stop "$CDIR"; [ -z "${CL_COO:-}" ] || { cluster_stop "$CL_COO"; cluster_stop "$(cl_shard_dir 1)"; cluster_stop "$(cl_shard_dir 2)"; }; cluster_stop "$DIR"' EXIT
rbq() { cpsql "$RB_C" "$RB_CP" -At "$@"; }
rbsq() { local i=$1; shift; cpsql "$(rb_shard_dir "$i")" "$(rb_shard_port "$i")" -At "$@"; }
rb_dsn() { echo "host=$(rb_shard_dir "$1") port=$(rb_shard_port "$1") dbname=postgres user=postgres"; }

echo
echo "-- 9. zero-hop routing (Python): Router vs coordinator vs directly on the shard, one client, BEGIN + statement + COMMIT; single statements in autocommit; each path side by side with its direct path in 100 ms slices, ${RB_T} s each per round (median of $RB_ROUNDS rounds; ratio to direct of the same run (min..max))"
RB_PY=$(ensure_python_env)
cluster_start "$RB_C" "$RB_CP" "${RB_SMALL[@]}"
rbq >/dev/null <<'SQL'
CREATE EXTENSION id_gen; CREATE EXTENSION postgres_fdw; CREATE EXTENSION dblink;
SELECT id_gen.create_sequence('orders', step => 10000);
CREATE ROLE id_authority LOGIN;
GRANT UPDATE (max_id) ON id_gen.sequences TO id_authority;
SELECT id_gen.set_route(32767, 'shard_1');
SELECT id_gen.set_route(65535, 'shard_2');
CREATE TABLE orders (id bigint PRIMARY KEY, owner_id bigint NOT NULL, amount bigint NOT NULL DEFAULT 0, note text);
SQL
for i in 1 2; do
  cluster_start "$(rb_shard_dir $i)" "$(rb_shard_port $i)" "${RB_SMALL[@]}"
  rbsq $i >/dev/null <<SQL
CREATE EXTENSION id_gen; CREATE EXTENSION postgres_fdw;
CREATE SERVER central FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '$RB_C', port '$RB_CP', dbname 'postgres');
CREATE USER MAPPING FOR PUBLIC SERVER central OPTIONS (user 'id_authority');
SELECT id_gen.create_sequence('orders', step => 10000, authority => 'central');
SQL
  rbq >/dev/null <<SQL
CREATE SERVER shard_$i FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '$(rb_shard_dir $i)', port '$(rb_shard_port $i)', dbname 'postgres');
CREATE USER MAPPING FOR postgres SERVER shard_$i OPTIONS (user 'postgres');
SQL
done
rbq -c "SET client_min_messages = warning" -c "SELECT id_gen.distribute_table('orders', 'id', 'owner_id', 'orders')" \
    -c "SELECT id_gen.push_route_state(true)" >/dev/null
for i in 1 2; do
  rbsq $i -c "INSERT INTO orders (id, owner_id, amount)
              SELECT id_gen.gene_order_id('orders', o), o, 1 FROM generate_series(1, 40000) o
              WHERE (id_gen.shard_gene(o) <= 32767) = ($i = 1)" -c "VACUUM ANALYZE orders" >/dev/null
done
RB_W=$RB_C/work; mkdir -p "$RB_W"
rbq -c "SELECT id FROM orders ORDER BY random() LIMIT 2000" > "$RB_W/ids"
RB_SHARDS="{\"shard_1\": \"$(rb_dsn 1)\", \"shard_2\": \"$(rb_dsn 2)\"}"
RB_CDSN="host=$RB_C port=$RB_CP dbname=postgres user=postgres"
if rb_section 9; then
"$RB_PY" "$REPO_ROOT/bench/routing_bench.py" "$RB_CDSN" "$RB_SHARDS" "$RB_W/ids" 40000 "$RB_T" "$RB_ROUNDS" > "$RB_W/py.json"
"$RB_PY" - "$RB_W/py.json" <<'PYEOF'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("summary"):
        tie = lambda s: ", tie (within noise)" if s[0] <= 1 <= s[1] else ""
        if r["path"] == r["baseline"]:
            print(f"  Python {r['op']:6} {r['path']:23}: {r['tps']:8.1f} tps, p50 {r['p50_ms']:.3f} ms, p99 {r['p99_ms']:.3f} ms")
            continue
        print(f"  Python {r['op']:6} {r['path']:23}: {r['tps']:8.1f} tps, p50 {r['p50_ms']:.3f} ms, p99 {r['p99_ms']:.3f} ms;"
              f" tps {r['tps_vs_direct']:.2f} ({r['tps_vs_direct_spread'][0]:.2f}..{r['tps_vs_direct_spread'][1]:.2f}) x {r['baseline']}{tie(r['tps_vs_direct_spread'])},"
              f" p50 latency {r['p50_vs_direct']:.2f} ({r['p50_vs_direct_spread'][0]:.2f}..{r['p50_vs_direct_spread'][1]:.2f}) x")
    elif "router_stats" in r:
        print(f"  Router: {r['router_stats']}")
PYEOF
fi

echo
echo "-- 9b. the five clients (their conformance tools, docs/routing-protocol.md §6), one client each, ${RB_T} s a side per run: Router against the same statements on the tool's own pool of the same driver, side by side in one process (alternating 100 ms slices, after ${RB_WARM_UP} s of warm-up), directly on the shards and through PgBouncer 1.18 in transaction mode (median of $RB_ROUNDS rounds; ratio of each run's two sides (min..max))"
# TCP for the tools (pgjdbc has no unix sockets); a PgBouncer per shard, transaction mode.
RB_BP=$((RB_CP + 10))
rb_tcp() { echo "host=127.0.0.1 port=$1 dbname=postgres user=postgres"; }
for i in 1 2; do
  d="$RB_W/bouncer_$i"; mkdir -p "$d"
  cat > "$d/pgbouncer.ini" <<INI
[databases]
postgres = host=$(rb_shard_dir "$i") port=$(rb_shard_port "$i") dbname=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $((RB_BP + i))
unix_socket_dir = $d
auth_type = trust
auth_file = $d/users.txt
pool_mode = transaction
default_pool_size = 4
ignore_startup_parameters = extra_float_digits
logfile = $d/pgbouncer.log
pidfile = $d/pgbouncer.pid
INI
  echo '"postgres" ""' > "$d/users.txt"; chown -R postgres:postgres "$d"
  runuser -u postgres -- pgbouncer -d "$d/pgbouncer.ini"
done
trap 'for i in 1 2; do kill "$(cat "$RB_W/bouncer_$i/pgbouncer.pid" 2>/dev/null)" 2>/dev/null; done; cluster_stop "$RB_C"; cluster_stop "$(rb_shard_dir 1)"; cluster_stop "$(rb_shard_dir 2)"; [ -z "${CDIR:-}" ] || cluster_stop "$CDIR"; [ -z "${CL_COO:-}" ] || { cluster_stop "$CL_COO"; cluster_stop "$(cl_shard_dir 1)"; cluster_stop "$(cl_shard_dir 2)"; }; cluster_stop "$DIR"' EXIT
rb_client() { # rb_client LANGUAGE tx|lookup direct|pooled: "Router own-pool" operations per second, side by side
  local s1 s2
  if [ "$3" = pooled ]; then s1=$(rb_tcp $((RB_BP + 1))); s2=$(rb_tcp $((RB_BP + 2)))
  else s1=$(rb_tcp "$(rb_shard_port 1)"); s2=$(rb_tcp "$(rb_shard_port 2)"); fi
  IDG_RUST_PROFILE=$RB_RUST_PROFILE "$REPO_ROOT/clients/$1/conformance" bench --routes "$(rb_tcp "$RB_CP")" --shard "shard_1=$s1" --shard "shard_2=$s2" \
      --table orders --sequence orders --owners 40000 --seconds "$(awk -v t="$RB_T" 'BEGIN { print 2 * t }')" --mode "$2" --side-by-side --warm-up-seconds "$RB_WARM_UP" |
    awk '/^ops / && $5 == "direct_ops" { printf "%.1f %.1f", $2 / $4, $6 / $8 }'
}
rb_section 9b || RB_CLIENTS=""
RB_RUST_PROFILE=release  # (the Rust tool optimized, as an application ships it)
for lang in $RB_CLIENTS; do
  IDG_RUST_PROFILE=$RB_RUST_PROFILE "$REPO_ROOT/clients/$lang/conformance" genes <<< 'i:42' >/dev/null  # built before it is timed
  RUNS=()
  for r in $(seq "$RB_ROUNDS"); do
    line=""
    for via in direct pooled; do
      for op in tx lookup; do
        ab=$(rb_client "$lang" "$op" "$via")
        [ -n "$ab" ] || { echo "bench_routing: $lang $op ($via) printed no side-by-side line" >&2; exit 1; }
        line+=" $ab"
      done
    done
    RUNS+=("${line# }")
  done
  # columns: shards direct: tx router, tx own pool, lookup router, lookup own pool; then the same through PgBouncer
  for c in "0 transactions" "2 lookups     " "4 transactions through PgBouncer" "6 lookups through PgBouncer     "; do
    i=${c%% *}; what=${c#* }
    read -r m lo hi <<< "$(col_stats "$i")"; read -r rm rlo rhi <<< "$(ratio_stats "$i" $((i + 1)))"
    printf '  %-7s %s: Router %s /s; %s (own pool %.0f /s)\n' "$lang" "$what" "$(fmt_range "$m" "$lo" "$hi")" \
      "$(fmt_ratio "$rm" "$rlo" "$rhi" "x its own pool")" "$(col_stats $((i + 1)) | awk '{print $1}')"
  done
done

rb_section 10 || return 0  # (sourced)
echo
echo "-- 10. the version check on a shard: pgbench -c 2 -j 2 -T ${RB_PGB_T}, point lookups by id on shard_1 (median of $RB_ROUNDS interleaved rounds; ratio (min..max))"
V=$(rbq -c "SELECT id_gen.route_version()")
{ echo "\\set i random(1, 1000)"; echo "SELECT amount FROM orders WHERE id = (SELECT id FROM rb_ids WHERE n = :i);"; } > "$RB_W/plain.sql"
{ echo "\\set i random(1, 1000)"; echo "BEGIN;"; echo "SELECT amount FROM orders WHERE id = (SELECT id FROM rb_ids WHERE n = :i);"; echo "COMMIT;"; } > "$RB_W/txn.sql"
{ echo "\\set i random(1, 1000)"; echo "BEGIN;"; echo "SELECT id_gen.route_claim((SELECT id_gen.shard_of(id) FROM rb_ids WHERE n = :i), $V);"
  echo "SELECT amount FROM orders WHERE id = (SELECT id FROM rb_ids WHERE n = :i);"; echo "COMMIT;"; } > "$RB_W/claim.sql"
rbsq 1 -c "CREATE TABLE rb_ids (n int PRIMARY KEY, id bigint)" -c "INSERT INTO rb_ids SELECT row_number() OVER (), id FROM (SELECT id FROM orders ORDER BY random() LIMIT 1000) s" -c "ANALYZE rb_ids" >/dev/null
# The claim on BEGIN names its gene in the statement's text, which pgbench cannot compute per
# transaction: one gene of shard_1 for every transaction (the claim's work is the same).
G=$(rbsq 1 -c "SELECT id_gen.shard_of(id) FROM rb_ids WHERE n = 1")
begin_claim() { { echo "\\set i random(1, 1000)"; echo "/* id_gen.route_claim=$G,$1 */ BEGIN;"
  echo "SELECT amount FROM orders WHERE id = (SELECT id FROM rb_ids WHERE n = :i);"; echo "COMMIT;"; }; }
begin_claim "$V" > "$RB_W/begin_claim.sql"
begin_claim 0 > "$RB_W/stale_claim.sql"
chmod 644 "$RB_W"/*.sql
# pgbench sends the comment with BEGIN: a stale version in it fails the transaction (IG001).
if "$PG_BIN/pgbench" -n -h "$(rb_shard_dir 1)" -p "$(rb_shard_port 1)" -U postgres -t 1 -f "$RB_W/stale_claim.sql" postgres >/dev/null 2>&1; then
  echo "bench_routing: a stale claim on BEGIN was not refused through pgbench: the claim does not reach the shard" >&2
  exit 1
fi
rb_pgb() { # rb_pgb SCRIPT [PGOPTIONS]: tps
  PGOPTIONS="${2:-}" "$PG_BIN/pgbench" -n -h "$(rb_shard_dir 1)" -p "$(rb_shard_port 1)" -U postgres -c 2 -j 2 -T "$RB_PGB_T" -f "$1" postgres 2>/dev/null |
    sed -n 's/^tps = \([0-9.]*\).*/\1/p'
}
RUNS=()
for r in $(seq "$RB_ROUNDS"); do
  if [ $((r % 2)) = 0 ]; then
    a=$(rb_pgb "$RB_W/plain.sql"); b=$(rb_pgb "$RB_W/plain.sql" "-c id_gen.route_version=$V"); e=$(rb_pgb "$RB_W/plain.sql" "-c id_gen.routing_guard=off")
    c=$(rb_pgb "$RB_W/txn.sql"); d=$(rb_pgb "$RB_W/claim.sql"); f=$(rb_pgb "$RB_W/begin_claim.sql")
  else  # the other order
    f=$(rb_pgb "$RB_W/begin_claim.sql"); d=$(rb_pgb "$RB_W/claim.sql"); c=$(rb_pgb "$RB_W/txn.sql")
    e=$(rb_pgb "$RB_W/plain.sql" "-c id_gen.routing_guard=off"); b=$(rb_pgb "$RB_W/plain.sql" "-c id_gen.route_version=$V"); a=$(rb_pgb "$RB_W/plain.sql")
  fi
  RUNS+=("$a $b $c $d $e $f")
done
read -r m lo hi <<< "$(col_stats 0)"
echo "  lookup, no version declared              : $(fmt_range "$m" "$lo" "$hi") tps"
read -r rm rlo rhi <<< "$(ratio_stats 1 0)"
echo "  lookup, SET id_gen.route_version = $V      : $(fmt_ratio "$rm" "$rlo" "$rhi" "x no version")"
read -r rm rlo rhi <<< "$(ratio_stats 0 4)"
echo "  lookup, guard on vs id_gen.routing_guard = off (the plan walk of every statement): $(fmt_ratio "$rm" "$rlo" "$rhi" "x")"
read -r m lo hi <<< "$(col_stats 2)"
echo "  BEGIN + lookup + COMMIT                  : $(fmt_range "$m" "$lo" "$hi") tps"
read -r rm rlo rhi <<< "$(ratio_stats 3 2)"
echo "  BEGIN + route_claim + lookup + COMMIT    : $(fmt_ratio "$rm" "$rlo" "$rhi" "x without the claim (one more statement, as pgbench sends it)")"
read -r rm rlo rhi <<< "$(ratio_stats 5 2)"
echo "  claim on BEGIN + lookup + COMMIT         : $(fmt_ratio "$rm" "$rlo" "$rhi" "x without the claim (/* id_gen.route_claim=G,V */ BEGIN)")"
