"""Online splits and merges of route ranges, reversible moves and the rebalancer: a
coordinator that is also the segment authority, two shards with wal_level = logical.
(Ported from tests/e2e/15_split.sh with the same assertions. Its fixed sleeps became polls
on what the writers committed or the catalog shows, each failing with the last value; its
latency limits became figures that are reported, not asserted.)

(a) set_route that would split a range holding rows is refused (55000, hint naming
    split_route), and changes nothing.
(b) split under load: 550k rows in the range; writers insert and update rows inside and
    outside it, through the coordinator and directly on the shard, while split_route runs.
    Every transaction commits, the rows per owner match the writers' log (count and sum),
    the bulk rows are all there once, each half is its own partition on the shard.
    Reported: latencies inside and outside the range, the fence.
(c) the new half moves to shard_2 and back, merge_routes joins the halves: routes and data
    end where they started; the same with set_route(..., copy_rows => true) and back.
(d) a split whose session is killed while copying resumes with the same CALL; a merge whose
    coordinator is killed (kill -9) while copying resumes after the restart; a split whose
    shard swapped while the coordinator's half did not commit is finished by the move
    supervisor, and the range answers IG002 (retry) rather than stale rows meanwhile;
    abort_split leaves no trigger or table behind. A split checks its new tables against its
    old partitions before its swap: a row of the old partition changed behind the split's
    trigger makes it refuse to swap (XX001 naming the gene), and once put back it finishes.
(e) reversible moves under load through the coordinator: after the cut-over the target's
    writes reach the source; revert_move switches back and every committed write is there;
    the coordinator killed mid-revert (fence up): the supervisor lifts the fence; a revert
    whose clean-up fails after its flip, then a kill -9 of the coordinator: the supervisor
    finishes it; complete_move leaves nothing of the way back; a way back holding more than
    id_gen.reversible_max_wal is completed by the supervisor; a way back that stops on an
    error on the source stops the revert before its fence, with a hint naming it, and once
    mended the revert passes.
(f) plan_rebalance proposes steps for skewed shards; rebalance() is a dry run;
    rebalance(dry_run => false) brings the busiest shard within 1.15 x the mean, and every
    row is as it was.
"""
import os
import subprocess
import sys
import time

import pytest

import harness
from harness import LOGICAL, Background, Sleeper, coordinator_with_shards, poll_until, report

LOAD = os.path.join(os.path.dirname(__file__), "split_load.py")
S = {}


@pytest.fixture(scope="module", autouse=True)
def servers(cluster, tmp_path_factory):
    c, shards = coordinator_with_shards(cluster, shard_conf=LOGICAL)
    S.update(c=c, s1=shards[1], s2=shards[2], work=str(tmp_path_factory.mktemp("split")))
    # 550k rows of genes 0 .. 16383, written on the shard (bulk), owners 1 .. 2.2M.
    shards[1].execute("""INSERT INTO orders (id, owner_id, amount)
                         SELECT id_gen.compose_id(id_gen.shard_gene(o), 1000000000 + o), o, o % 7
                         FROM generate_series(1, 2200000) o WHERE id_gen.shard_gene(o) <= 16383""",
                      "ANALYZE orders")
    S["bulk"] = c.one("SELECT count(*) FROM orders WHERE owner_id <= 2200000")
    assert S["bulk"] > 500000, "rows in genes 0 .. 16383 before the split"
    S["bulk_sum"] = c.one("SELECT sum(amount) FROM orders WHERE owner_id <= 2200000")
    yield


# --- helpers ---------------------------------------------------------------------------------

def routes():
    return harness.routes(S["c"])


def first_route():
    return routes().split(",")[0]


def owners_in(lower, upper, n, first=10000001):
    return harness.owners(S["c"], f"id_gen.shard_gene(o) BETWEEN {lower} AND {upper}", n, first)


def checksum():
    return S["c"].one("SELECT count(*) || '/' || count(DISTINCT id) || '/' || sum(amount) || '/' || "
                      "sum(hashtextextended(id::text || ':' || owner_id || ':' || amount, 0) % 1000003) FROM orders")


def count_sum():
    return S["c"].one("SELECT count(*) || '/' || sum(amount) FROM orders")


def parts_on(shard):
    """The shard's partitions of orders (tombstones left out) with their user triggers."""
    return shard.one("SELECT string_agg(c.relname || ':' || (SELECT count(*) FROM pg_trigger t "
                     "WHERE t.tgrelid = c.oid AND NOT t.tgisinternal), ',' ORDER BY c.relname) "
                     "FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                     "WHERE i.inhparent = 'orders'::regclass AND c.relname !~ '_(not_owned|negative)$'")


def strays_on(shard):
    return shard.one("SELECT count(*) FROM pg_class WHERE relname ~ '^orders_g' AND relkind = 'r' AND NOT relispartition")


def nothing_left():
    """Slots, publications, subscriptions and detached copies on shard_1 / shard_2."""
    q = ("SELECT (SELECT count(*) FROM pg_replication_slots) + (SELECT count(*) FROM pg_publication) "
         "+ (SELECT count(*) FROM pg_subscription) + (SELECT count(*) FROM pg_class "
         "WHERE relname ~ '^(orders_g|id_gen_moved)' AND relkind = 'r' AND NOT relispartition)")
    return f"{S['s1'].one(q)}/{S['s2'].one(q)}"


def in_step():
    return S["c"].one("SELECT bool_and(in_step) FROM id_gen.distribution")


def restart_after_kill9(node):
    node.kill9()
    node.start()


class Load:
    """split_load.py's writers in a process of their own, logging every transaction."""

    def __init__(self, name, inside, outside, shard_outside=None):
        c = S["c"]
        self.stop_file = os.path.join(S["work"], f"{name}.stop")
        self.log = os.path.join(S["work"], f"{name}.log")
        args = [sys.executable, LOAD, "run", "--coord", c.dsn(), "--inside", ",".join(map(str, inside)),
                "--outside", ",".join(map(str, outside)), "--stop", self.stop_file, "--log", self.log]
        if shard_outside:
            args += ["--shard", S["s1"].dsn(), "--shard-outside", ",".join(map(str, shard_outside))]
        self.proc = subprocess.Popen(args)

    def committed(self):
        try:
            with open(self.log) as f:
                return sum(1 for line in f if line.rstrip().endswith(",ok"))
        except FileNotFoundError:
            return 0

    def wait_for_more(self, what, n=100, timeout=60):
        """Polls until the writers committed n more transactions than now."""
        start = self.committed()
        poll_until(f"the writers committed {n} transactions {what}", self.committed,
                   lambda got: got >= start + n, timeout)

    def running_for(self):
        """Seconds since the first transaction the writers logged (0 before one)."""
        try:
            with open(self.log) as f:
                first = f.readline()
        except FileNotFoundError:
            return 0.0
        return time.time() - float(first.split(",")[0]) if first else 0.0

    def stop(self):
        open(self.stop_file, "w").close()
        try:
            code = self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError("the writers did not stop within 120 s of the stop file")
        assert code == 0, f"the writers ended with {code}"

    def check(self, window):
        r = subprocess.run([sys.executable, LOAD, "check", "--coord", S["c"].dsn(), "--log", self.log,
                            "--window", f"{window[0]},{window[1]}"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=300)
        assert r.returncode == 0, f"the writers' log and the tables differ:\n{r.stdout}"
        return r.stdout


# --- (a) ---------------------------------------------------------------------------------------

def test_a_set_route_refuses_to_split_a_range_with_rows():
    e = S["c"].error("SELECT id_gen.set_route(8191, 'shard_1')")
    assert e is not None and e.sqlstate == "55000", f"set_route splitting a range with rows: {e!r}"
    assert "this route change splits or merges" in e.diag.message_primary and \
        e.diag.message_hint.startswith("Use CALL id_gen.split_route"), f"not the expected refusal: {e.diag.message_primary} / {e.diag.message_hint}"
    assert routes() == "0-16383@shard_1,16384-32767@shard_1,32768-65535@shard_2", "routes unchanged"


# --- (b) ---------------------------------------------------------------------------------------

def test_b_split_under_load():
    c, s1, bulk = S["c"], S["s1"], S["bulk"]
    inside = owners_in(0, 16383, 40)
    shard_outside = owners_in(16384, 32767, 20)
    S["inside"] = inside
    load = Load("split", inside, shard_outside + owners_in(32768, 65535, 20), shard_outside)
    try:
        load.wait_for_more("before the split")
        # split_load.py's check compares the rate during the split with the 2.5 s before it.
        poll_until("the writers ran for 3 s (the baseline of the rate)", load.running_for, lambda t: t >= 3, 60)
        t0 = time.time()
        c.execute("CALL id_gen.split_route(8191)")
        t1 = time.time()
        load.wait_for_more("after the split")
    finally:
        load.stop()
    assert routes() == "0-8191@shard_1,8192-16383@shard_1,16384-32767@shard_1,32768-65535@shard_2", "split_route(8191): routes split"
    assert c.one(f"SELECT phase || ':' || (rows_total >= {bulk}) || ':' || (rows_copied > 0.9 * rows_total) FROM id_gen.splits") \
        == "done:true:true", "id_gen.splits: done, the bulk rows counted and copied"
    out = load.check((t0, t1))
    report(*[f"split under load: {line}" for line in out.splitlines() if not line.startswith("max_")])
    report(f"split of {c.one('SELECT rows_total FROM id_gen.splits')} rows: {t1 - t0:.1f} s, fence "
           + c.one("SELECT fence_ms || ' ms in ' || fence_attempts || ' attempt(s)' FROM id_gen.splits"))
    verify = c.execute("SELECT s.verify_state, s.verify_rows, s.verify_ms, round(extract(epoch FROM o.verify_started_at - o.started_at) * 1000) "
                       "FROM id_gen.splits s JOIN id_gen.cluster_operations o ON o.operation_id = s.split_id")[0]
    report(f"split's check before its swap, under load: {verify[0]}, {verify[1]} rows compared in {verify[2]} ms "
           f"(the copy and catch-up before it: {verify[3]} ms; ratio {float(verify[2]) / float(verify[3]):.2f})")
    assert verify[0] == "equal" and verify[1] >= bulk, f"the check compared the range's rows and found them equal: {verify}"
    assert count_sum_of_bulk() == f"{bulk}/{S['bulk_sum']}", "bulk rows all there, once"
    assert c.one("SELECT count(*) = count(DISTINCT id) FROM orders"), "no id twice"
    assert parts_on(s1) == "orders_g0_8191:0,orders_g16384_32767:0,orders_g8192_16383:0", "shard_1: one partition per range, no trigger left"
    assert strays_on(s1) == 0, "shard_1: no old partition left"
    assert (s1.one("SELECT count(*) FROM orders_g0_8191 WHERE id >> 47 > 8191"),
            s1.one("SELECT count(*) FROM orders_g8192_16383 WHERE id >> 47 < 8192")) == (0, 0), "no row on the wrong half"
    assert in_step(), "distribution in step"


def count_sum_of_bulk():
    return S["c"].one("SELECT count(*) || '/' || sum(amount) FROM orders WHERE owner_id <= 2200000")


# --- (c) ---------------------------------------------------------------------------------------

def test_c_round_trip_move_and_merge():
    c, s1, s2 = S["c"], S["s1"], S["s2"]
    after_load = checksum()
    c.execute("SET client_min_messages = warning", "CALL id_gen.move_genes(8192, 16383, 'shard_2')")
    assert routes() == "0-8191@shard_1,8192-16383@shard_2,16384-32767@shard_1,32768-65535@shard_2", "the new half moved to shard_2"
    c.execute("SET client_min_messages = warning", "CALL id_gen.move_genes(8192, 16383, 'shard_1')")
    c.execute("CALL id_gen.merge_routes(8191)")
    assert routes() == "0-16383@shard_1,16384-32767@shard_1,32768-65535@shard_2", "moved back and merged: the routes are where they started"
    assert parts_on(s1) == "orders_g0_16383:0,orders_g16384_32767:0", "shard_1: one partition for the merged range again"
    assert (strays_on(s1), strays_on(s2)) == (0, 0), "no stray tables"
    assert in_step(), "distribution in step after the merge"
    assert c.one("SELECT count(*) FROM orders WHERE owner_id <= 2200000") == S["bulk"], "bulk rows after split, moves and merge"
    assert checksum() == after_load, "every row as it was before the moves and the merge (count/distinct ids/sum/hash)"
    # For comparison: the same split as 0.4.0's set_route did it (copy_rows => true), which
    # holds ACCESS EXCLUSIVE on the whole table, coordinator and shard, while it copies.
    t = time.time()
    c.execute("SELECT id_gen.set_route(8191, 'shard_1', copy_rows => true)")
    report(f"the same split with set_route(8191, 'shard_1', copy_rows => true): the whole table locked for {time.time() - t:.1f} s")
    c.execute("SELECT id_gen.drop_route(8191, copy_rows => true)")
    assert checksum() == after_load, "set_route with copy_rows and drop_route back: every row as it was"


# --- (d) ---------------------------------------------------------------------------------------

def split_phase(where):
    return S["c"].one(f"SELECT phase FROM id_gen.splits WHERE {where}")


def test_d_a_split_whose_session_is_killed_resumes():
    c = S["c"]
    call = Background(c, "CALL id_gen.split_route(4095)")
    poll_until("the split of 4095 copies", lambda: c.one(
        "SELECT count(*) FROM id_gen.splits WHERE at_gene = 4095 AND phase = 'copying' AND rows_copied > 0"), 1, 60)
    c.execute("SELECT pg_terminate_backend(runner_pid) FROM id_gen.route_splits WHERE at_gene = 4095")
    assert call.join() is not None, "the killed session's CALL failed"
    assert split_phase("at_gene = 4095") == "copying", "split killed while copying stays in copying"
    c.execute(f"INSERT INTO orders (owner_id, amount) SELECT o, 1 FROM unnest(ARRAY{S['inside']}::bigint[]) o")
    c.execute("CALL id_gen.split_route(4095)")
    assert split_phase("at_gene = 4095") == "done", "the same CALL resumed it"
    S["sum1"] = count_sum()


def test_d_a_merge_whose_coordinator_is_killed_resumes():
    c = S["c"]
    call = Background(c, "CALL id_gen.merge_routes(4095)")
    poll_until("the merge at 4095 copies", lambda: c.one(
        "SELECT count(*) FROM id_gen.splits WHERE kind = 'merge' AND at_gene = 4095 AND phase = 'copying' AND rows_copied > 0"), 1, 60)
    restart_after_kill9(c)
    assert call.join() is not None, "the CALL's session died with the coordinator"
    assert split_phase("kind = 'merge' AND at_gene = 4095") == "copying", "merge after kill -9 of the coordinator: copying"
    c.execute("CALL id_gen.merge_routes(4095)")
    assert (split_phase("kind = 'merge' AND at_gene = 4095"), count_sum()) == ("done", S["sum1"]), "resumed after the restart; nothing lost"


def hold_the_coordinators_table(marker):
    """A reader holding ACCESS SHARE on the coordinator's table, so a fence cannot start."""
    return Sleeper(S["c"], "BEGIN", "LOCK TABLE orders_shards IN ACCESS SHARE MODE", seconds=marker)


def test_d_a_swap_that_committed_only_on_the_shard_is_finished_by_the_supervisor():
    c, s1 = S["c"], S["s1"]
    holder = hold_the_coordinators_table(120)
    call = Background(c, "CALL id_gen.split_route(2047)")
    poll_until("the split waits to fence", lambda: split_phase("at_gene = 2047"), "swapping", 60)
    sid = c.one("SELECT split_id FROM id_gen.splits WHERE at_gene = 2047")
    s1.execute(f"SELECT id_gen.shard_split_swap({sid}, 5000)")  # as if the coordinator died right after it
    c.execute(f"SELECT pg_terminate_backend(runner_pid) FROM id_gen.route_splits WHERE split_id = {sid}")
    call.join()
    holder.release()
    assert c.sqlstate("SELECT count(*) FROM orders WHERE id BETWEEN id_gen.gene_first_id(0) AND id_gen.gene_last_id(2047)") \
        == "IG002", "meanwhile a scan of the range reaches the retired partition and gets IG002 (retry) instead of answering"
    o_in = c.one("SELECT o FROM generate_series(1, 100000) o WHERE id_gen.shard_gene(o) <= 2047 LIMIT 1")
    assert c.sqlstate(f"INSERT INTO orders VALUES (id_gen.compose_id(id_gen.shard_gene({o_in}), 777000001), {o_in}, 1)") \
        == "IG002", "and so does a write of its genes"
    assert c.one("SELECT count(*) >= 0 FROM orders WHERE id BETWEEN id_gen.gene_first_id(16384) AND id_gen.gene_last_id(65535)"), \
        "the other ranges of the table answer"
    poll_until("the move supervisor finishes the coordinator's half", lambda: c.one(
        f"SELECT phase || ':' || (recovered_by IS NOT NULL) FROM id_gen.splits WHERE split_id = {sid}"), "done:true", 60)
    assert (count_sum(), in_step()) == (S["sum1"], True), "nothing lost, in step"
    assert c.one(f"SELECT kind || ':' || phase || ':' || source_shard || '>' || target_shard || ':' || coalesce(runner, 'finished') || ':' "
                 f"|| (recovered_by = (SELECT recovered_by FROM id_gen.splits WHERE split_id = {sid})) FROM id_gen.operations WHERE operation_id = {sid}") \
        == "split:done:shard_1>shard_1:finished:true", "id_gen.operations shows the split and what the supervisor did"


def test_d_abort_split_leaves_nothing():
    c, s1 = S["c"], S["s1"]
    holder = hold_the_coordinators_table(121)
    call = Background(c, "CALL id_gen.split_route(1023)")
    poll_until("the split waits to fence", lambda: split_phase("at_gene = 1023"), "swapping", 60)
    c.execute("SELECT pg_terminate_backend(runner_pid) FROM id_gen.route_splits WHERE at_gene = 1023")
    call.join()
    holder.release()
    c.execute(f"CALL id_gen.abort_split({c.one('SELECT split_id FROM id_gen.route_splits WHERE at_gene = 1023')})")
    assert (split_phase("at_gene = 1023"), strays_on(s1), s1.one("SELECT count(*) FROM id_gen.shard_split_pieces")) \
        == ("aborted", 0, 0), "abort_split: no table or piece left"
    assert parts_on(s1) == "orders_g0_2047:0,orders_g16384_32767:0,orders_g2048_16383:0", "and no trigger"
    assert count_sum() == S["sum1"], "nothing lost"


def split_trigger(sid):
    return S["s1"].one(f"SELECT quote_ident(id_gen.split_trigger_name({sid}))")


def test_d_the_driver_resumes_a_split_and_lets_go_of_it():
    c, s1 = S["c"], S["s1"]
    assert c.sqlstate("CALL id_gen.run_operation(987654)") == "42704", "an operation that does not exist"
    holder = hold_the_coordinators_table(122)
    call = Background(c, "CALL id_gen.split_route(1023)")
    # (Before its fence, the split compares its new tables with the old partition: equal.)
    poll_until("the split checked its new tables and waits to fence", lambda: c.one(
        "SELECT phase || '/' || coalesce(verify_state, '-') || '/' || (verify_rows > 0) FROM id_gen.splits "
        "WHERE at_gene = 1023 AND phase <> 'aborted'"), "swapping/equal/true", 60)
    sid = c.one("SELECT split_id FROM id_gen.route_splits WHERE at_gene = 1023 AND phase = 'swapping'")
    c.execute(f"SELECT pg_terminate_backend(runner_pid) FROM id_gen.route_splits WHERE split_id = {sid}")
    call.join()
    holder.release()
    # A row of the old partition changed unseen by the split's trigger (as a bug of the copy
    # would leave it): the check before the swap finds it, and the split does not swap.
    unseen = ["SET id_gen.routing_guard = off", f"ALTER TABLE orders_g0_2047 DISABLE TRIGGER {split_trigger(sid)}"]
    row = s1.one("SET id_gen.routing_guard = off", "SELECT min(id) FROM orders_g0_2047 t WHERE id < id_gen.gene_first_id(1024) "
                 "AND NOT EXISTS (SELECT FROM id_gen.shard_split_log l WHERE l.id = t.id)")
    gene = (row >> 47) & 65535
    gene_rows = s1.one("SET id_gen.routing_guard = off",
                       f"SELECT count(*) FROM orders_g0_2047 WHERE id BETWEEN id_gen.gene_first_id({gene}) AND id_gen.gene_last_id({gene})")
    s1.execute(*unseen, f"UPDATE orders_g0_2047 SET amount = amount + 1 WHERE id = {row}",
               f"ALTER TABLE orders_g0_2047 ENABLE ALWAYS TRIGGER {split_trigger(sid)}")
    e = c.error(f"CALL id_gen.run_operation({sid})")
    assert e is not None and e.sqlstate == "XX001" and f"gene {gene} of public.orders: {gene_rows} rows in public.orders_g0_2047, " \
        f"{gene_rows} in public.orders_g0_1023 (their contents differ)" in e.diag.message_primary, f"the split refused to swap: {e!r}"
    assert c.one(f"SELECT phase || '/' || verify_state FROM id_gen.splits WHERE split_id = {sid}") == "swapping/different", \
        "the difference is recorded; the split did not swap"
    s1.execute(*unseen, f"UPDATE orders_g0_2047 SET amount = amount - 1 WHERE id = {row}",
               f"ALTER TABLE orders_g0_2047 ENABLE ALWAYS TRIGGER {split_trigger(sid)}")
    locks_left = c.one(f"CALL id_gen.run_operation({sid})",
                       "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()")
    assert c.one(f"SELECT phase || ':' || coalesce(runner, 'finished') FROM id_gen.operations WHERE operation_id = {sid}") \
        == "done:finished", "CALL id_gen.run_operation resumes the split the killed session left and finishes it"
    assert locks_left == 0, "and its session lets go of the split's session lock"
    assert c.one(f"SELECT verify_state FROM id_gen.splits WHERE split_id = {sid}") == "equal", "the row put back, the check passed"
    c.execute("CALL id_gen.merge_routes(1023)")
    assert parts_on(s1) == "orders_g0_2047:0,orders_g16384_32767:0,orders_g2048_16383:0", "merged back: the layout as before"
    assert (count_sum(), in_step()) == (S["sum1"], True), "nothing lost, in step"


# --- (e) ---------------------------------------------------------------------------------------

def move_phase(mid):
    return S["c"].one(f"SELECT phase FROM id_gen.moves WHERE move_id = {mid}")


def reversible_move(lower, upper):
    S["c"].execute("SET client_min_messages = warning",
                   f"CALL id_gen.move_genes({lower}, {upper}, 'shard_2', reversible => true)")
    return S["c"].one("SELECT max(move_id) FROM id_gen.moves")


def test_e_reversible_move_reverted_under_load():
    c, s2 = S["c"], S["s2"]
    rev_inside = owners_in(0, 2047, 30, 20000001)
    S["rev_inside"] = rev_inside
    load = Load("revert", rev_inside, owners_in(16384, 32767, 10, 20000001) + owners_in(32768, 65535, 10, 20000001))
    try:
        load.wait_for_more("before the move")
        c.execute("CALL id_gen.move_genes(0, 2047, 'shard_2', reversible => true)")
        mid = c.one("SELECT move_id FROM id_gen.moves WHERE reversible ORDER BY move_id DESC LIMIT 1")
        assert c.one(f"SELECT phase || '/' || (back_retained_bytes IS NOT NULL) FROM id_gen.moves WHERE move_id = {mid}") \
            + "/" + first_route() == "reversible/true/0-2047@shard_2", \
            "a reversible move cut over: shard_2 serves genes 0 .. 2047, the view shows the way back's WAL"
        assert c.one(f"SELECT string_agg(object, ',' ORDER BY object) FROM id_gen.operation_cleanups WHERE operation_id = {mid}") \
            == "source_copies,target_copies,way_back", \
            "after a reversible cut-over the forward replication is gone; the way back and both sides' copies wait for the outcome"
        poll_until("writers wrote on the target after the cut-over",
                   lambda: s2.one("SELECT count(*) FROM orders_g0_2047 WHERE owner_id > 10000000"), lambda n: n > 0, 60)
        fresh = owners_in(0, 2047, 1, 60000001)[0]
        c.execute(f"INSERT INTO orders (owner_id, amount) VALUES ({fresh}, 616161)")
        poll_until("a row written on the target after the cut-over reaches the source's kept partition",
                   lambda: S["s1"].one("SELECT count(*) FROM orders_g0_2047 WHERE amount = 616161"), 1, 60)
        assert harness.way_back_apply_errors(S["s1"], mid) == 0, "the way back applied every change on shard_1 (none came back twice)"
        c.execute(f"CALL id_gen.revert_move({mid})")
        report(c.one(f"SELECT 'revert: fence ' || fence_ms || ' ms, fence attempts of the move and the revert ' || fence_attempts "
                     f"|| coalesce(', last error: ' || last_error, '') FROM id_gen.moves WHERE move_id = {mid}"))
        t1 = time.time()
        load.wait_for_more("after the revert", n=50)
    finally:
        load.stop()
    assert f"{move_phase(mid)}/{first_route()}" == "reverted/0-2047@shard_1", "revert_move: genes 0 .. 2047 are on shard_1 again"
    out = load.check((t1, t1))
    report(*[f"reversible move reverted under load: {line}" for line in out.splitlines() if line.startswith("transactions")])
    assert nothing_left() == "0/0", "no slot, publication, subscription or copy left on either shard"
    assert c.one(f"SELECT count(*) FROM id_gen.operation_cleanups WHERE operation_id = {mid}") == 0, "a reverted move leaves no cleanup record"
    assert in_step(), "distribution in step after the revert"


def fence_triggers_on_target():
    return S["s2"].one("SELECT count(*) FROM pg_trigger WHERE tgname = 'id_gen_move_fence' AND tgenabled <> 'D'")


def fence_markers_held(node):
    """The way back into `node` stops on a fence's marker but takes the probe that
    revert_move sends before its fence: a revert raises its fence, and the fence waits."""
    return harness.markers_refused(node, "NEW.marker < 1000000")


def test_e_coordinator_killed_mid_revert_the_supervisor_lifts_the_fence():
    c, s1, s2 = S["c"], S["s1"], S["s2"]
    mid = reversible_move(0, 2047)
    e = c.error(f"CALL id_gen.abort_move({mid})")
    assert (e and e.sqlstate, move_phase(mid)) == ("55000", "reversible"), \
        "abort_move of a reversible move is refused (55000): the target is authoritative"
    owner = S["rev_inside"][0]
    direct = f"INSERT INTO orders (id, owner_id, amount) VALUES (id_gen.gene_order_id('orders', {owner}::bigint), {owner}, %s)"
    with fence_markers_held(s1):  # the fence's marker never arrives: the fence waits
        call = Background(c, f"CALL id_gen.revert_move({mid})")
        poll_until("the revert's fence is up on the target", fence_triggers_on_target, lambda n: n > 0, 30)
        assert s2.sqlstate(direct % 1) == "IG002", "during the revert's fence a direct write on the target is refused (IG002: retry shortly)"
        restart_after_kill9(c)
        call.join()
        # (The supervisor lifts the fence on the target first and records it when its pass
        # commits: the record is what to wait for.)
        poll_until("the supervisor lifts the target's fence and records it", lambda: c.one(
            f"SELECT phase || ':' || source_fenced || ':' || coalesce(recovered_by LIKE 'lifted the fence of an interrupted revert%', false) "
            f"FROM id_gen.moves WHERE move_id = {mid}"), "reversible:false:true", 60)
        assert f"{fence_triggers_on_target()}/{first_route()}" == "0/0-2047@shard_2", \
            "after kill -9 of the coordinator mid-revert the supervisor lifted the target's fence; the target still serves"
        assert s2.sqlstate(direct % 424242) is None, "direct writes on the target work again"
    # (The source's apply worker starts again within 5 s and applies the held marker first.)
    poll_until("the way back brings the target's direct write to the source's kept partition",
               lambda: s1.one("SELECT count(*) FROM orders_g0_2047 WHERE amount = 424242"), 1, 60)
    c.execute(f"CALL id_gen.revert_move({mid})")
    assert f"{move_phase(mid)}/{first_route()}/{nothing_left()}" == "reverted/0-2047@shard_1/0/0", \
        "the second revert_move succeeded; nothing of the way back is left"
    assert s1.one("SELECT count(*) FROM orders WHERE amount = 424242") == 1, \
        "the direct write made on the target after the fence was lifted is on the source after the revert"


def test_e_complete_move_after_an_interrupted_revert_lifts_its_fence():
    # A revert killed with its fence up on the target, then complete_move (or the supervisor,
    # whichever takes the move first): the target keeps the genes and takes writes again.
    c, s1, s2 = S["c"], S["s1"], S["s2"]
    mid = reversible_move(0, 2047)
    with fence_markers_held(s1):  # the fence's marker never arrives: the fence waits
        call = Background(c, f"CALL id_gen.revert_move({mid})")
        poll_until("the revert's fence is up on the target", fence_triggers_on_target, lambda n: n > 0, 30)
        restart_after_kill9(c)
        call.join()

    def complete():  # (the supervisor holds the move only for its pass: 55006 meanwhile)
        state = c.sqlstate(f"CALL id_gen.complete_move({mid})")
        return "busy" if state == "55006" else state

    poll_until("complete_move takes the move", complete, None, 60)
    assert f"{move_phase(mid)}/{fence_triggers_on_target()}/{first_route()}/{nothing_left()}" == "done/0/0-2047@shard_2/0/0", \
        "complete_move after an interrupted revert: done, the target's fence lifted, the genes on shard_2, nothing of the way back left"
    assert c.one(f"SELECT count(*) FROM id_gen.operation_cleanups WHERE operation_id = {mid}") == 0, "no cleanup record is left"
    owner = S["rev_inside"][0]
    assert s2.sqlstate(f"INSERT INTO orders (id, owner_id, amount) VALUES (id_gen.gene_order_id('orders', {owner}::bigint), {owner}, 1)") \
        is None, "direct writes on the target work"
    c.execute("SET client_min_messages = warning", "CALL id_gen.move_genes(0, 2047, 'shard_1')")  # (as the next test expects)


def test_e_a_revert_interrupted_after_its_flip_is_finished_by_the_supervisor():
    c, s1 = S["c"], S["s1"]
    mid = reversible_move(0, 2047)
    c.execute(f"INSERT INTO orders (owner_id, amount) SELECT o, 555555 FROM unnest(ARRAY{S['rev_inside'][:20]}::bigint[]) o")
    # A reader on the source's kept partition makes re-attaching it time out.
    holder = Sleeper(s1, "BEGIN", "LOCK TABLE orders_g0_2047 IN ACCESS SHARE MODE", seconds=120)
    assert c.error(f"CALL id_gen.revert_move({mid})") is not None, "the revert cannot finish while the source's partition is held"
    assert f"{move_phase(mid)}/{first_route()}" == "reverting/0-2047@shard_1", \
        "a revert whose clean-up failed after the flip: phase reverting, the routes point at the source"
    assert c.one("SELECT count(*) FROM orders WHERE amount = 555555") == 20, "the rows written on the target are read from the source meanwhile"
    c.kill9()
    holder.release()
    c.start()
    poll_until("the move supervisor finishes the revert", lambda: move_phase(mid), "reverted", 60)
    assert c.one(f"SELECT recovered_by LIKE 'finished the revert%' FROM id_gen.moves WHERE move_id = {mid}"), \
        "after kill -9 of the coordinator the move supervisor finished the revert"
    assert f"{s1.one('SELECT count(*) FROM orders WHERE amount = 555555')}/{nothing_left()}" == "20/0/0", \
        "the rows are in the source's table, nothing of the way back is left"
    assert in_step(), "distribution in step"


def test_e_complete_move_keeps_the_genes_on_the_target():
    c, s1 = S["c"], S["s1"]
    before = checksum().split("/")
    mid = reversible_move(0, 2047)
    c.execute(f"INSERT INTO orders (owner_id, amount) SELECT o, 777777 FROM unnest(ARRAY{S['rev_inside']}::bigint[]) o")
    poll_until("the source's kept (detached) partition follows the target", lambda: s1.one(
        "SELECT count(*) FROM orders_g0_2047 WHERE amount = 777777"), 30, 30)
    c.execute(f"CALL id_gen.complete_move({mid})")
    assert f"{move_phase(mid)}/{first_route()}/{nothing_left()}" == "done/0-2047@shard_2/0/0", \
        "complete_move: the genes stay on shard_2, nothing of the way back is left"
    assert c.one(f"SELECT count(*) FROM id_gen.operation_cleanups WHERE operation_id = {mid}") == 0, "a completed move leaves no cleanup record"
    assert c.one("SELECT count(*) - 30 || '/' || sum(amount) - 30 * 777777 FROM orders") == f"{before[0]}/{before[2]}", "every row there once"


def test_e_a_way_back_over_reversible_max_wal_is_completed():
    c, s1, s2 = S["c"], S["s1"], S["s2"]
    c.execute("ALTER SYSTEM SET id_gen.reversible_max_wal = '2MB'", "SELECT pg_reload_conf()")
    try:
        c.execute("SET client_min_messages = warning", "CALL id_gen.move_genes(2048, 16383, 'shard_2', reversible => true)")
        mid = c.one("SELECT max(move_id) FROM id_gen.moves")
        s1.execute(f"ALTER SUBSCRIPTION id_gen_back_{mid} DISABLE")
        s2.execute("""INSERT INTO orders (id, owner_id, amount)
                      SELECT id_gen.compose_id(id_gen.shard_gene(o), 3000000000 + o), o, 1
                      FROM generate_series(30000001, 31000000) o WHERE id_gen.shard_gene(o) BETWEEN 2048 AND 16383""")
        poll_until("the supervisor completes the move", lambda: move_phase(mid), "done", 60)
        assert c.one(f"SELECT recovered_by LIKE 'completed: the way back kept%' FROM id_gen.moves WHERE move_id = {mid}") \
            and nothing_left() == "0/0", \
            "a way back holding more than id_gen.reversible_max_wal (2MB) of WAL: the supervisor completed the move, nothing left"
    finally:
        c.execute("ALTER SYSTEM RESET id_gen.reversible_max_wal", "SELECT pg_reload_conf()")


def test_e_b_a_way_back_stopped_by_a_conflict_is_named_and_the_revert_then_passes():
    """A way back that keeps stopping on an error on the source (a row put into a kept
    partition behind the fence, with session_replication_role = replica, that the target
    then writes too): revert_move stops before any fence, after 10 s without its probe
    marker on the source, with a hint naming the subscription and its errors; once the row
    is gone the way back applies again, and the revert passes with the target's row on the
    source once."""
    c, s2 = S["c"], S["s2"]
    assert first_route() == "0-2047@shard_2", "test_e_complete_move left genes 0 .. 2047 on shard_2"
    c.execute("SET client_min_messages = warning", "CALL id_gen.move_genes(0, 2047, 'shard_1', reversible => true)")
    mid = c.one("SELECT max(move_id) FROM id_gen.moves")
    assert f"{move_phase(mid)}/{first_route()}" == "reversible/0-2047@shard_1"
    owner = owners_in(0, 2047, 1, 40000001)[0]
    row = f"id_gen.compose_id(id_gen.shard_gene({owner}::bigint), 4000000000)"
    conflict = f"DELETE FROM orders_g0_2047 WHERE id = {row} AND amount = 1"
    try:
        s2.execute("SET session_replication_role = replica",
                   f"INSERT INTO orders_g0_2047 (id, owner_id, amount) VALUES ({row}, {owner}, 1)")
        c.execute(f"INSERT INTO orders (id, owner_id, amount) VALUES ({row}, {owner}, 2)")
        poll_until("the way back stops on the conflicting row", lambda: harness.way_back_apply_errors(s2, mid), lambda n: n > 0, 60)
        attempts = c.one(f"SELECT fence_attempts FROM id_gen.moves WHERE move_id = {mid}")
        err = c.error(f"CALL id_gen.revert_move({mid})")
        assert err is not None and err.sqlstate == "55000" and "did not apply the target's changes within 10 s" in str(err), err
        assert f"The subscription id_gen_back_{mid} on shard_2 stopped on an error" in (err.diag.message_hint or ""), err.diag.message_hint
        assert c.one(f"SELECT fence_attempts FROM id_gen.moves WHERE move_id = {mid}") == attempts, "no fence was raised"
        assert f"{move_phase(mid)}/{first_route()}" == "reversible/0-2047@shard_1", "the failed revert changed nothing"
    finally:
        s2.execute("SET session_replication_role = replica", conflict)
    # (The source's apply worker starts again within 5 s and applies the target's row.)
    poll_until("the way back brings the target's row to the source",
               lambda: s2.one(f"SELECT amount FROM orders_g0_2047 WHERE id = {row}"), 2, 60)
    c.execute("SET client_min_messages = warning", f"CALL id_gen.revert_move({mid})")
    assert f"{move_phase(mid)}/{first_route()}" == "reverted/0-2047@shard_2"
    assert c.one(f"SELECT string_agg(amount::text, ',') FROM orders WHERE id = {row}") == "2", "the target's row, once"
    assert nothing_left() == "0/0"
    assert in_step()


# --- (f) the rebalancer ----------------------------------------------------------------------------

def balance():
    return float(S["c"].one("SELECT round(max(t) / avg(t), 2) FROM "
                            "(SELECT shard, sum(row_count) AS t FROM id_gen.route_range_rows() GROUP BY shard) s"))


def test_f_rebalance():
    c = S["c"]
    before = checksum()
    skew = balance()
    plan = c.column("SELECT step || ' ' || action || ' ' || command || ' (' || row_count || ' rows)' FROM id_gen.plan_rebalance()")
    report(*[f"rebalance plan: {p}" for p in plan])
    assert len(plan) > 0, f"plan_rebalance proposes steps for shards at {skew} x the mean"
    c.execute("CALL id_gen.rebalance()")
    assert balance() == skew, "rebalance() is a dry run by default: nothing moved"
    c.execute("SET client_min_messages = warning", "CALL id_gen.rebalance(dry_run => false)")
    after = balance()
    assert after <= 1.15, f"after rebalance(dry_run => false) the busiest shard holds {after} x the mean (was {skew})"
    assert checksum() == before, "every row as it was"
    assert c.one("SELECT count(*) FROM id_gen.plan_rebalance()") == 0, "nothing left to do"
    assert in_step(), "distribution in step"
