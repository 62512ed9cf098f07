# Sourced by bench/bench.sh (same server, same helpers; `bench/bench.sh --authority` runs
# only this): pgbench INSERT throughput with a sequence whose segments are reserved on a
# central authority (a second server, over postgres_fdw; README "One ID space for many
# servers") against a local sequence, in the same run: median of interleaved rounds with
# the min–max spread, a tie called a tie. Target: >= 0.95 x local.

CDIR=/tmp/idg_bench_central CPORT=54351
echo
echo "-- 7. central authority: pgbench, 8 clients, ${PGB_T}s each: INSERT with DEFAULT id from a sequence reserved on a central server vs a local one (median of $PGB_ROUNDS rounds, order alternating; (min..max) over the rounds)"
cluster_start "$CDIR" "$CPORT" "shared_buffers = 64MB" "max_connections = 30"
trap 'cluster_stop "$CDIR"; cluster_stop "$DIR"' EXIT
cpsql "$CDIR" "$CPORT" -c "CREATE EXTENSION id_gen" -c "SELECT id_gen.create_sequence('ins_auth')" >/dev/null
P >/dev/null <<SQL
CREATE EXTENSION IF NOT EXISTS postgres_fdw;
CREATE SERVER bench_central FOREIGN DATA WRAPPER postgres_fdw
  OPTIONS (host '$CDIR', port '$CPORT', dbname 'postgres', connect_timeout '2', options '-c synchronous_commit=on');
CREATE USER MAPPING FOR PUBLIC SERVER bench_central OPTIONS (user 'postgres');
SELECT id_gen.create_sequence('ins_auth', step => 10000, authority => 'bench_central');
SELECT id_gen.create_sequence('ins_local', step => 10000);
CREATE TABLE t_auth (id bigint PRIMARY KEY DEFAULT id_gen.next_segment_id('ins_auth'), v int);
CREATE TABLE t_local (id bigint PRIMARY KEY DEFAULT id_gen.next_segment_id('ins_local'), v int);
SQL
echo "INSERT INTO t_auth (v) VALUES (1);" > "$DIR/auth.sql"
echo "INSERT INTO t_local (v) VALUES (1);" > "$DIR/local.sql"
tps() { "$PG_BIN/pgbench" -n -h "$DIR" -p "$PORT" -U postgres -c 8 -j 2 -T "$1" -f "$2" postgres 2>&1 | sed -n 's/^tps = \([0-9.]*\).*/\1/p'; }
tps 3 "$DIR/auth.sql" >/dev/null; tps 3 "$DIR/local.sql" >/dev/null  # warm-up: rate meters, step sizes
RUNS=()
for r in $(seq "$PGB_ROUNDS"); do  # rounds A B, B A, A B, ...: one ratio A / B per round
  if [ $((r % 2)) -eq 1 ]; then ta=$(tps "$PGB_T" "$DIR/auth.sql"); tb=$(tps "$PGB_T" "$DIR/local.sql")
  else tb=$(tps "$PGB_T" "$DIR/local.sql"); ta=$(tps "$PGB_T" "$DIR/auth.sql"); fi
  RUNS+=("$ta $tb")
done
printf 'authority-backed sequence: %s tps   local sequence: %s tps   ratio %s  (target >= 0.95)\n' \
  "$(fmt_range $(col_stats 0))" "$(fmt_range $(col_stats 1))" "$(fmt_ratio $(ratio_stats 0 1))"
P -At -F ' ' -c "SELECT 'authority-backed sequence: ' || refills || ' reservations on the central, last step ' || step || ', last reservation ' || last_refill_ms || ' ms, last error: ' || coalesce(last_error, 'none') FROM id_gen.status WHERE sequence = 'ins_auth'"
P -At -F ' ' -c "SELECT 'local sequence: ' || refills || ' reservations, last step ' || step || ', last reservation ' || last_refill_ms || ' ms' FROM id_gen.status WHERE sequence = 'ins_local'"
