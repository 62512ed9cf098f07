#!/usr/bin/env bash
# (2) ROLLBACK of the transaction whose call triggered a refill: no value is reused.
# (5) The worker killed with SIGKILL (and with SIGTERM): it comes back, service resumes.
source "$(dirname "$0")/lib.sh"
e2e_start /tmp/idg_e2e2 54342
cpsql "$E2E_DIR" "$E2E_PORT" -c "CREATE EXTENSION id_gen" -c "SELECT id_gen.create_sequence('r', step => 10, max_step => 10)" >/dev/null

# One session: take values, then in a transaction take enough to force several refills,
# note the largest, roll back, and keep going.
out=$(cpsql "$E2E_DIR" "$E2E_PORT" -At <<'SQL'
SELECT max(id_gen.next_segment_id('r')) FROM generate_series(1, 5);
BEGIN;
SELECT max(id_gen.next_segment_id('r')) FROM generate_series(1, 95);
ROLLBACK;
SELECT min(id_gen.next_segment_id('r')) FROM generate_series(1, 50);
SELECT max_id FROM id_gen.sequences WHERE name = 'r';
SQL
)
before=$(sed -n 1p <<<"$out"); rolled=$(sed -n 2p <<<"$out"); after=$(sed -n 3p <<<"$out"); hw=$(sed -n 4p <<<"$out")
assert_eq "$rolled" "100" "values taken in the rolled-back transaction"
assert_gt "$after" "$rolled" "first value after ROLLBACK is above every value taken in it"
assert_gt "$((hw + 1))" "$rolled" "catalog high-water mark was not rolled back"
# Another session sees the same: nothing below the rolled-back values comes back.
other=$(q postgres "SELECT min(id_gen.next_segment_id('r')) FROM generate_series(1, 20)")
assert_gt "$other" "$after" "a new session continues above"

# (5) SIGKILL the refill worker: the postmaster resets all backends (crash restart);
# afterwards the service resumes with a new worker and higher values.
last=$(q postgres "SELECT max(id_gen.next_segment_id('r')) FROM generate_series(1, 30)")
wpid=$(q postgres "SELECT worker_pid FROM id_gen.status WHERE sequence = 'r'")
[ -n "$wpid" ] || fail "no worker pid in id_gen.status"
kill -9 "$wpid"
for _ in $(seq 100); do
  v=$(q postgres "SELECT id_gen.next_segment_id('r')" 2>/dev/null) && break
  sleep 0.2
done
[ -n "${v:-}" ] || fail "service did not resume after the worker was killed"
assert_gt "$v" "$last" "after SIGKILL of the worker, values continue above"
nwpid=$(q postgres "SELECT worker_pid FROM id_gen.status WHERE sequence = 'r'")
[ -n "$nwpid" ] && [ "$nwpid" != "$wpid" ] || fail "worker did not come back (old $wpid, new '$nwpid')"
pass "worker came back (pid $wpid -> $nwpid)"

# SIGTERM (pg_terminate_backend): the next caller that needs a segment relaunches it.
last=$(q postgres "SELECT max(id_gen.next_segment_id('r')) FROM generate_series(1, 5)")
q postgres "SELECT pg_terminate_backend(worker_pid) FROM id_gen.status WHERE sequence = 'r'" >/dev/null
sleep 0.5
v=$(q postgres "SELECT max(id_gen.next_segment_id('r')) FROM generate_series(1, 100)")
assert_gt "$v" "$last" "after pg_terminate_backend of the worker, service resumes"
# A transaction holding a sequence's catalog row (an open alter_sequence) must not stall
# other sequences: the worker gives up on the locked row after lock_timeout, serves the
# others, and retries; callers of the locked sequence wait and succeed once it commits.
# The free sequence's 200 values (40 segments of 5) must take well under the hold: with the
# worker's lock_timeout of 1 s they take about 1.1 s at most; stalled behind the locked
# row until the commit they would take about HOLD_S - 0.8 s (3.2 s).
HOLD_S=4 FREE_LIMIT_MS=2500
cpsql "$E2E_DIR" "$E2E_PORT" -c "SELECT id_gen.create_sequence('locked', step => 5, max_step => 5)" \
  -c "SELECT id_gen.create_sequence('free', step => 5, max_step => 5)" >/dev/null
( printf '%s\n' "BEGIN;" "SELECT id_gen.alter_sequence('locked', comment => 'held');" "SELECT pg_sleep($HOLD_S);" "COMMIT;" \
  | cpsql "$E2E_DIR" "$E2E_PORT" >/dev/null ) &
HOLDER=$!
sleep 0.5
# A caller of the locked sequence is already waiting for its first segment.
( q postgres "SELECT count(DISTINCT id_gen.next_segment_id('locked')) FROM generate_series(1, 50)" > "$E2E_DIR/locked.out" ) &
WAITER=$!
sleep 0.3
start=$(date +%s%N)
free_n=$(q postgres "SELECT count(DISTINCT id_gen.next_segment_id('free')) FROM generate_series(1, 200)")
free_ms=$(( ($(date +%s%N) - start) / 1000000 ))
assert_eq "$free_n" "200" "another sequence is served while one catalog row is locked"
assert_lt "$free_ms" "$FREE_LIMIT_MS" "ms for 200 values of the free sequence while another row is locked for ${HOLD_S} s"
wait $WAITER || fail "the waiting caller of the locked sequence failed"
assert_eq "$(cat "$E2E_DIR/locked.out")" "50" "callers of the locked sequence waited and were served after the commit"
wait $HOLDER
echo "02_rollback_and_worker: passed"
