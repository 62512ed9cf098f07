"""Online moves of route ranges between shards (docs/guide/scale-out.md "Moving data"): a
coordinator and two shards; the coordinator is the shards' central authority. (Ported from
tests/e2e/12_move.sh with the same assertions; its fixed sleeps and silent waits became
polls that fail with the last value, its latency limits became reported figures.)

(a) refusals: a source without wal_level = logical fails at once (55000, nothing created);
    genes that are not whole route ranges 22023; dry_run prints the steps and changes
    nothing, and no password.
(b) under load: pgbench clients insert and update rows of every gene through the
    coordinator, logging what they committed, while a quarter of the genes (over 200k rows)
    moves from shard_1 to shard_2. Afterwards every owner's row count and amount match the
    log, the moved genes live only on shard_2 (the second distributed table too), no slot,
    publication or subscription is left, writes of other genes went on during the fence.
    Reported: latencies of moved and other genes, during the fence and overall; throughput
    against a plain COPY.
(c) the target killed mid-copy: the move fails, routes and the source are unchanged, no
    replication slot is left on the source; abort_move cleans the target later.
(d) the coordinator's session terminated mid-move: abort_move rolls back; terminated again:
    the same CALL resumes and finishes; a second session for a running move is refused.
(e) merge onto shard_2, then split back: routes and every shard's rows end where they
    started; the top range with keep_source.
(f) a fence that times out (the target applies slowly) is lifted and retried.
(g) a source that cannot let go after the flip: the move stays cut over, abort is refused,
    the same CALL finishes it.
(h) a subscription that keeps stopping on an error: the move stops before its fence (the
    probe marker of the source never reaches the target), its hint names the subscription;
    once it applies again, the same CALL finishes, after:
(i) a row of the target's copy changed behind the move's back: the check before the cut-over
    refuses to flip (XX001 naming the gene and its rows on each side), recorded in id_gen.moves;
(j) the row put back, CALL id_gen.verify_range finds the shards equal; a row deleted on the
    target, it names the counts (XX001); the row restored, the same CALL finishes.
"""
import glob
import os
import subprocess
import time

import pytest

import harness
from harness import LOGICAL, PG_BIN, Background, Sleeper, coordinator_with_shards, poll_until, report

S = {}
GUARD_OFF = "-c id_gen.routing_guard=off"  # what a shard holds, also of genes it does not own


@pytest.fixture(scope="module", autouse=True)
def servers(cluster, tmp_path_factory):
    c, shards = coordinator_with_shards(
        cluster,
        coordinator_conf=["max_connections = 30"],
        shard_conf=lambda i: ["max_connections = 30"] + (LOGICAL if i == 2 else []),  # (a): shard_1 logical later
        routes=((16383, "shard_1"), (32767, "shard_1"), (49151, "shard_2"), (65535, "shard_2")),
        # A second distributed table, without a sequence (ids come with the rows): moves carry it along.
        tables=["CREATE TABLE audit (id bigint PRIMARY KEY, note text NOT NULL);"],
        distribute=["'audit', 'id'"],
        shard_step=10000,
        mapping="user 'postgres', password 'pw-not-to-be-shown'")
    S.update(c=c, s1=shards[1], s2=shards[2], work=str(tmp_path_factory.mktemp("move")))
    yield


# --- helpers ---------------------------------------------------------------------------------

def local(shard, sql):
    """A shard's answer with the routing guard off (rows of genes it does not own too)."""
    with shard.connect(options=f"{GUARD_OFF} -c statement_timeout=300s") as conn:
        return conn.execute(sql).fetchone()[0]


def leftovers():
    """Slots and publications on shard_1, subscriptions on shard_2, and the other way round."""
    s1, s2 = S["s1"], S["s2"]
    return "/".join(str(x) for x in (
        s1.one("SELECT count(*) FROM pg_replication_slots"), s1.one("SELECT count(*) FROM pg_publication"),
        s2.one("SELECT count(*) FROM pg_subscription"), s2.one("SELECT count(*) FROM pg_replication_slots"),
        s2.one("SELECT count(*) FROM pg_publication"), s1.one("SELECT count(*) FROM pg_subscription")))


NOTHING_LEFT = "0/0/0/0/0/0"


def routes():
    return harness.routes(S["c"])


def shard_state(shard):
    """Rows and a checksum of (id, owner, amount) and of the audit table, to compare states."""
    return shard.one("SELECT (SELECT count(*) || ':' || coalesce(sum(hashtext(id || ',' || owner_id || ',' || amount)::bigint), 0) FROM orders) "
                     "|| '+' || (SELECT count(*) || ':' || coalesce(sum(hashtext(id || ',' || note)::bigint), 0) FROM audit)")


def move_phase(where):
    return S["c"].one(f"SELECT phase FROM id_gen.moves WHERE {where}")


def in_range(lower, upper, table="orders"):
    return f"SELECT count(*) FROM {table} WHERE id BETWEEN id_gen.gene_first_id({lower}) AND id_gen.gene_last_id({upper})"


# --- (a) refusals --------------------------------------------------------------------------------

def test_a_refusals():
    c, s1 = S["c"], S["s1"]
    e = c.error("CALL id_gen.move_genes(0, 16383, 'shard_2')")
    assert e is not None and e.sqlstate == "55000" and \
        e.diag.message_primary.startswith('id_gen: source shard "shard_1" runs with wal_level = replica'), \
        f"a source without wal_level = logical: 55000 at once: {e!r}"
    assert "On shard_1: ALTER SYSTEM SET wal_level = logical" in (e.diag.message_hint or ""), f"no hint: {e.diag.message_hint}"
    assert f"{c.one('SELECT count(*) FROM id_gen.moves')}/{leftovers()}" == "0/" + NOTHING_LEFT, "nothing was recorded or created"
    s1.conf += LOGICAL
    with open(os.path.join(s1.data, "postgresql.conf"), "a") as f:
        f.write("\n".join(LOGICAL) + "\n")
    s1.restart()
    assert c.sqlstate("CALL id_gen.move_genes(0, 1000, 'shard_2')") == "22023", "genes that are not whole route ranges: 22023"
    notices = c.notices("CALL id_gen.move_genes(0, 16383, 'shard_2', dry_run => true)")
    out = "\n".join(notices)
    for want in ["on shard_1 (source): SELECT id_gen.shard_create_publication('N', '{public.audit_g0_16383,public.orders_g0_16383}', '{id,id}', '{0,0}', '{16383,16383}')",
                 "on shard_2 (target): SELECT id_gen.shard_subscribe('N', '{public.audit_g0_16383,public.orders_g0_16383}')",
                 "password='********'", "SELECT id_gen.shard_drop_publication('N')"]:
        assert want in out, f"dry_run does not show: {want}\n{out}"
    assert "pw-not-to-be-shown" not in out, "dry_run printed the password"
    report(f"move dry_run: {sum(1 for n in notices if n.startswith('step'))} steps printed")
    assert f"{c.one('SELECT count(*) FROM id_gen.moves')}/{leftovers()}" == "0/" + NOTHING_LEFT, "dry_run changed nothing"


# --- (b) the move under load -------------------------------------------------------------------

def load_rows():
    """800k owners, one row each, on their shards (written there directly: fast); a counter
    row for each of 2000 owners that the clients update."""
    c, s1, s2 = S["c"], S["s1"], S["s2"]
    loads = [Background(s, f"""INSERT INTO orders (id, owner_id, amount, note)
                               SELECT id_gen.gene_order_id('orders', o), o, 0, 'load' FROM generate_series(1, 800000) o
                               WHERE (id_gen.shard_gene(o) <= 32767) = ({i} = 1)""",
                        "INSERT INTO audit SELECT id, 'audit of ' || id FROM orders WHERE owner_id % 40 = 0")
             for i, s in ((1, s1), (2, s2))]
    for b in loads:
        assert b.join() is None, f"loading failed: {b.error}"
    c.script("""
        CREATE TABLE owners_moved AS SELECT row_number() OVER () AS i, o AS owner FROM generate_series(1, 100000) o WHERE id_gen.shard_gene(o) <= 16383 LIMIT 1000;
        CREATE TABLE owners_other AS SELECT row_number() OVER () AS i, o AS owner FROM generate_series(1, 100000) o WHERE id_gen.shard_gene(o) > 16383 LIMIT 1000;
        CREATE TABLE commit_log (owner bigint NOT NULL, rows_added int NOT NULL, amount_added bigint NOT NULL);
        INSERT INTO orders (owner_id, amount, note) SELECT owner, 0, 'counter' FROM owners_moved UNION ALL SELECT owner, 0, 'counter' FROM owners_other;
    """)


PGBENCH_SCRIPT = """\\set i random(1, 1000)
\\set a random(1, 100)
BEGIN;
SELECT owner AS o FROM owners_{kind} WHERE i = :i \\gset
INSERT INTO orders (owner_id, amount, note) VALUES (:o, :a, 'ins');
UPDATE orders SET amount = amount + :a WHERE owner_id = :o AND note = 'counter' AND id BETWEEN id_gen.owner_first_id(:o::bigint) AND id_gen.owner_last_id(:o::bigint);
INSERT INTO commit_log VALUES (:o, 1, 2 * :a);
COMMIT;
"""


def latencies(kind, window=None):
    """p50, p99, max (ms) and count of the pgbench transactions of `kind`; with window
    (start, end), only those that overlapped it. Log columns: 3 latency (us), 5-6 end time."""
    xs = []
    for path in glob.glob(os.path.join(S["work"], f"{kind}.[0-9]*")):  # pgbench's logs: <prefix>.<pid>[.<thread>]
        with open(path) as f:
            for line in f:
                col = line.split()
                end = int(col[4]) + int(col[5]) / 1e6
                start = end - int(col[2]) / 1e6
                if window is None or (start <= window[1] and end >= window[0]):
                    xs.append(int(col[2]) / 1000)
    xs.sort()
    if not xs:
        return 0.0, 0.0, 0.0, 0
    at = lambda p: xs[min(len(xs) - 1, int(p * len(xs)))]  # noqa: E731
    return at(0.5), at(0.99), xs[-1], len(xs)


def test_b_a_move_under_load():
    c, s1, s2 = S["c"], S["s1"], S["s2"]
    t = time.time()
    load_rows()
    moved_rows = local(s1, "SELECT count(*) FROM orders WHERE id < id_gen.gene_first_id(16384)")
    audit_moved = local(s1, "SELECT count(*) FROM audit WHERE id < id_gen.gene_first_id(16384)")
    assert moved_rows > 199999, f"rows in the genes to move (loaded in {time.time() - t:.1f} s)"
    benches = []
    for kind in ("moved", "other"):
        script = os.path.join(S["work"], f"{kind}.sql")
        with open(script, "w") as f:
            f.write(PGBENCH_SCRIPT.format(kind=kind))
        benches.append(subprocess.Popen(
            [f"{PG_BIN}/pgbench", "-n", "-h", c.dir, "-p", str(c.port), "-U", "postgres", "-c", "2", "-j", "2", "-T", "20",
             "--max-tries=20", "-l", f"--log-prefix={kind}", "-f", script, "postgres"],
            cwd=S["work"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    poll_until("the clients committed 50 transactions before the move",
               lambda: c.one("SELECT count(*) FROM commit_log"), lambda n: n >= 50, 60)
    t0 = time.time()
    c.execute("CALL id_gen.move_genes(0, 16383, 'shard_2')")
    move_s = time.time() - t0
    for kind, b in zip(("moved", "other"), benches):
        out, _ = b.communicate(timeout=120)
        assert "number of failed transactions: 0" in out, f"pgbench ({kind} genes) had failures:\n{out[-2000:]}"
    report(f"move of genes 0 .. 16383 ({moved_rows} rows) under load: {move_s:.1f} s; no client transaction failed")
    assert move_phase("true") == "done", "the move is done"
    # The check before the cut-over ran while the clients wrote: never a difference; genes
    # written in every round are counted apart (unsettled), the rest compared.
    verify = c.execute("""SELECT m.verify_state, m.verify_rows, m.verify_ms, m.verify_detail,
                                 round(extract(epoch FROM o.verify_started_at - o.started_at) * 1000), m.fence_ms
                          FROM id_gen.moves m JOIN id_gen.cluster_operations o ON o.operation_id = m.move_id""")[0]
    report(f"check before the cut-over under load: {verify[0]}, {verify[1]} rows compared in {verify[2]} ms "
           f"(the copy and catch-up before it: {verify[4]} ms; ratio {float(verify[2]) / float(verify[4]):.2f}); "
           f"fence {verify[5]} ms; {verify[3] or 'every gene compared'}")
    assert verify[0] in ("equal", "unsettled") and verify[1] >= moved_rows + audit_moved, \
        f"the check compared every row of the moved genes and found no difference: {verify}"
    assert routes() == "0-16383@shard_2,16384-32767@shard_1,32768-49151@shard_2,49152-65535@shard_2", "the routes moved"
    assert c.one("SELECT bool_and(in_step) FROM id_gen.distribution"), "partitions and placements are in step"
    assert leftovers() == NOTHING_LEFT, "no slot, publication or subscription is left on either shard"
    assert local(s1, "SELECT count(*) FROM orders WHERE id < id_gen.gene_first_id(16384)") == 0, "shard_1 holds no row of the moved genes"
    assert (local(s1, "SELECT count(*) FROM audit WHERE id < id_gen.gene_first_id(16384)"),
            local(s2, "SELECT count(*) FROM audit WHERE id < id_gen.gene_first_id(16384)")) == (0, audit_moved), \
        f"the second distributed table moved along ({audit_moved} rows)"
    assert s1.one("SELECT count(*) FROM pg_class WHERE relname LIKE 'orders_g0_16383%' OR relname LIKE 'audit_g0_16383%'") == 0, \
        "shard_1 dropped its detached partitions"
    # Every owner the clients wrote: rows and amounts equal what the clients logged.
    c.execute("CREATE TABLE seen (owner bigint, n bigint, amount bigint)")
    for s in (s1, s2):
        rows = s.execute("SELECT owner_id, count(*), sum(amount) FROM orders WHERE note IN ('ins', 'counter') GROUP BY owner_id")
        with c.connect() as conn, conn.cursor().copy("COPY seen FROM STDIN") as copy:
            for r in rows:
                copy.write_row(r)
    bad = c.one("""WITH want AS (SELECT owner, 1 + coalesce(sum(rows_added), 0) AS n, coalesce(sum(amount_added), 0) AS amount
                                 FROM (SELECT owner FROM owners_moved UNION ALL SELECT owner FROM owners_other) o
                                 LEFT JOIN commit_log l USING (owner) GROUP BY owner),
                        got AS (SELECT owner, sum(n) AS n, sum(amount) AS amount FROM seen GROUP BY owner)
                   SELECT count(*) FROM want w FULL JOIN got g USING (owner)
                   WHERE w.n IS DISTINCT FROM g.n OR w.amount IS DISTINCT FROM g.amount""")
    committed = c.one("SELECT count(*) FROM commit_log")
    assert bad == 0, f"all 2000 owners: rows and amounts match the {committed} committed transactions (none lost, none twice)"
    assert c.one("SELECT count(*) FROM seen s1 JOIN seen s2 ON s1.owner = s2.owner AND s1.ctid < s2.ctid") == 0, "no owner's rows sit on two shards"
    assert s1.one("SELECT count(*) FROM orders WHERE note = 'load'") + s2.one("SELECT count(*) FROM orders WHERE note = 'load'") \
        == 800000, "all 800000 loaded rows are still there, once"
    fence = c.one("SELECT array[extract(epoch FROM fence_started_at), extract(epoch FROM fence_ended_at)]::float8[] FROM id_gen.shard_moves")
    moved, other = latencies("moved"), latencies("other")
    moved_f, other_f = latencies("moved", fence), latencies("other", fence)
    report(f"move fence {c.one('SELECT fence_ms FROM id_gen.moves')} ms; moved genes: p50 {moved[0]:.1f} p99 {moved[1]:.1f} "
           f"max {moved[2]:.1f} ms over {moved[3]} txns (during the fence: max {moved_f[2]:.1f} over {moved_f[3]}); "
           f"other genes: p50 {other[0]:.1f} p99 {other[1]:.1f} max {other[2]:.1f} ms over {other[3]} txns "
           f"(during the fence: max {other_f[2]:.1f} over {other_f[3]})")
    assert other_f[3] > 0, "writes of other genes went on while the fence was up (they overlapped it)"
    # Throughput against a plain COPY of the same rows between the same two servers.
    s1.execute("CREATE TABLE copy_probe (LIKE orders INCLUDING INDEXES)")
    t0 = time.time()
    with s2.connect(options=f"{GUARD_OFF}") as src, s1.connect() as dst:
        with src.cursor().copy("COPY (SELECT * FROM orders WHERE id < id_gen.gene_first_id(16384)) TO STDOUT") as out, \
                dst.cursor().copy("COPY copy_probe FROM STDIN") as into:
            for chunk in out:
                into.write(chunk)
    copy_s = time.time() - t0
    s1.execute("DROP TABLE copy_probe")
    report(f"move: {moved_rows} rows in {move_s:.1f} s under load = {moved_rows / move_s:.0f} rows/s; "
           f"plain COPY of the same rows between the shards: {copy_s:.1f} s = {moved_rows / copy_s:.0f} rows/s")


# --- (c) the target dies while the rows are copied ---------------------------------------------

def test_c_the_target_killed_mid_copy():
    c, s1, s2 = S["c"], S["s1"], S["s2"]
    S["before"] = (shard_state(s1), shard_state(s2), routes())
    call = Background(c, "CALL id_gen.move_genes(16384, 32767, 'shard_2')")
    poll_until("a second move is copying", lambda: move_phase("lower_gene = 16384"), "copying", 10, interval=0.05)
    s2.kill9()
    e = call.join()
    assert e is not None and "failed while copying" in str(e), f"the move survived the death of its target, or failed otherwise: {e!r}"
    assert move_phase("lower_gene = 16384") == "failed", "the move is marked failed (the target's copies wait for abort_move)"
    assert (s1.one("SELECT count(*) FROM pg_replication_slots"), s1.one("SELECT count(*) FROM pg_publication")) == (0, 0), \
        "no replication slot or publication is left on the source"
    assert routes() == S["before"][2], "the routes are unchanged"
    assert shard_state(s1) == S["before"][0], "the source's rows are unchanged"
    assert c.one("SELECT string_agg(object || '@' || node, ',' ORDER BY object) FROM id_gen.operation_cleanups "
                 "WHERE operation_id = (SELECT move_id FROM id_gen.moves WHERE lower_gene = 16384) AND policy <> 'on_success'") \
        == "markers@shard_2,subscription@shard_2,target_copies@shard_2", \
        "the cleanup records left name what only the dead target still holds"
    s2.start()
    c.execute(f"CALL id_gen.abort_move({c.one('SELECT move_id FROM id_gen.moves WHERE lower_gene = 16384')})")
    assert move_phase("lower_gene = 16384") == "aborted", "with the target back, abort_move finishes the clean-up"
    assert leftovers() == NOTHING_LEFT, "no slot, publication or subscription anywhere"
    assert c.one("SELECT count(*) FROM id_gen.operation_cleanups WHERE operation_id = "
                 "(SELECT move_id FROM id_gen.moves WHERE lower_gene = 16384)") == 0, "an abort that finished leaves no cleanup record"
    assert (shard_state(s2), s2.one("SELECT count(*) FROM pg_class WHERE relname = 'orders_g16384_32767'")) == (S["before"][1], 0), \
        "the target is as before the move"


# --- (d) the coordinator's session dies mid-move: abort, then resume ------------------------------

def start_and_terminate_a_move(refuse_a_second_session, target="shard_2"):
    c = S["c"]
    call = Background(c, f"CALL id_gen.move_genes(16384, 32767, '{target}')")
    poll_until("the move copies", lambda: c.one(
        "SELECT count(*) FROM id_gen.moves WHERE lower_gene = 16384 AND phase = 'copying'"), 1, 10, interval=0.05)
    if refuse_a_second_session:
        e = c.error(f"CALL id_gen.move_genes(16384, 32767, '{target}')")
        assert e is not None and e.sqlstate == "55006" and "is running in session" in e.diag.message_primary, \
            f"a second session for the running move: {e!r}"
    c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'CALL id_gen.move_genes%'")
    assert call.join() is not None, "the terminated move finished"
    return c.one("SELECT max(move_id) FROM id_gen.moves")


def test_d_a_terminated_session_then_abort():
    c, s1, s2 = S["c"], S["s1"], S["s2"]
    mid = start_and_terminate_a_move(refuse_a_second_session=True)
    assert move_phase(f"move_id = {mid}") == "copying", "a terminated session leaves its move in its phase"
    assert (c.sqlstate("SELECT id_gen.set_route(16383, 'shard_1')"), c.sqlstate("CALL id_gen.move_genes(49152, 65535, 'shard_1')")) \
        == ("55006", "55006"), "while it is unfinished, set_route and other moves are refused (55006)"
    c.execute(f"CALL id_gen.abort_move({mid})")
    assert f"{move_phase(f'move_id = {mid}')}/{leftovers()}/{routes()}" == f"aborted/{NOTHING_LEFT}/{S['before'][2]}", \
        "abort_move rolled it back: nothing left, routes unchanged"
    assert (shard_state(s1), shard_state(s2)) == S["before"][:2], "both shards hold what they held before"


def test_d_a_terminated_session_then_resume():
    c, s1 = S["c"], S["s1"]
    mid = start_and_terminate_a_move(refuse_a_second_session=False)
    c.execute("CALL id_gen.move_genes(16384, 32767, 'shard_2')")
    assert f"{move_phase(f'move_id = {mid}')}/{leftovers()}" == f"done/{NOTHING_LEFT}", "the same CALL resumed the move and finished it"
    assert c.one(f"SELECT count(*) FROM id_gen.operation_cleanups WHERE operation_id = {mid}") == 0, \
        "a move that completed leaves no cleanup record"
    assert routes() == "0-16383@shard_2,16384-32767@shard_2,32768-49151@shard_2,49152-65535@shard_2", "shard_1 is empty now (a merge)"
    assert s1.one("SELECT (SELECT count(*) FROM orders) + (SELECT count(*) FROM audit)") == 0, "shard_1 holds no rows"


# --- (e) split shard_2 again; the top range with keep_source ---------------------------------------

def test_e_split_back_and_the_top_range():
    c, s1, s2 = S["c"], S["s1"], S["s2"]
    before1, before2, routes_before = S["before"]
    mid = start_and_terminate_a_move(refuse_a_second_session=False, target="shard_1")
    locks_left = c.one(f"CALL id_gen.run_operation({mid})",
                       "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()")
    assert (move_phase(f"move_id = {mid}"), locks_left) == ("done", 0), \
        "CALL id_gen.run_operation(move_id) resumes a move by its id alone, finishes it and lets go of it"
    assert routes() == routes_before, "after the split the routes are where they were before the merge"
    assert (shard_state(s1), shard_state(s2)) == (before1, before2), "and so is every row of both shards (count and checksum)"
    top = "SELECT count(*) FROM {t} WHERE id >= id_gen.gene_first_id(49152)"
    top_before = local(s2, top.format(t="orders"))
    c.execute("CALL id_gen.move_genes(49152, 65535, 'shard_1', keep_source => true)")
    assert local(s1, top.format(t="orders")) == top_before, f"the top range moved to shard_1 ({top_before} rows)"
    kept = s2.column("SELECT relname FROM pg_class WHERE relname LIKE 'id\\_gen\\_moved\\_%' AND relkind = 'r' ORDER BY relname")
    assert sum(s2.one(f'SELECT count(*) FROM public."{t}"') for t in kept) == \
        local(s1, top.format(t="orders")) + local(s1, top.format(t="audit")), f"keep_source kept the source's detached partitions ({kept})"
    c.execute("CALL id_gen.move_genes(49152, 65535, 'shard_2')")
    for t in kept:
        s2.execute(f'DROP TABLE public."{t}"')
    assert f"{routes()}/{shard_state(s1)}/{shard_state(s2)}/{leftovers()}" == f"{routes_before}/{before1}/{before2}/{NOTHING_LEFT}", \
        "and back: routes, rows and no leftovers"
    assert c.one("SELECT count(*) FILTER (WHERE phase = 'done') || '/' || count(*) FROM id_gen.moves") == "5/7", "5 moves done, 2 aborted"
    assert c.one("SELECT string_agg(DISTINCT kind || ':' || phase || ':' || coalesce(runner, 'finished'), ',') FROM id_gen.operations") \
        == "move:aborted:finished,move:done:finished", "id_gen.operations lists the same 7 moves, none of them running"
    assert c.one("SELECT count(*) FROM id_gen.operations o JOIN id_gen.moves m ON m.move_id = o.operation_id "
                 "AND (m.phase, m.source_shard, m.target_shard, m.fence_ms) IS NOT DISTINCT FROM (o.phase, o.source_shard, o.target_shard, o.fence_ms)") == 7, \
        "with the phases, shards and fence times of id_gen.moves"


# --- (f) a fence that times out is lifted and retried ----------------------------------------------

def test_f_a_fence_that_times_out_is_retried():
    c, s1, s2 = S["c"], S["s1"], S["s2"]
    # A replica trigger on the target delays applying the first marker by 4 s: the first
    # fence times out after 3 s, is lifted, and the second attempt cuts over.
    s1.script("""
        CREATE FUNCTION public.slow_first_marker() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF NEW.marker = 1 THEN PERFORM pg_sleep(4); END IF;
          RETURN NEW;
        END $$;
        CREATE TRIGGER slow_first_marker BEFORE INSERT ON id_gen.move_markers FOR EACH ROW EXECUTE FUNCTION public.slow_first_marker();
        ALTER TABLE id_gen.move_markers ENABLE ALWAYS TRIGGER slow_first_marker;
    """)
    S["range_rows"] = range_rows = local(s2, in_range(32768, 49151))
    c.execute("CALL id_gen.move_genes(32768, 49151, 'shard_1')")
    assert c.one("SELECT phase || '/' || fence_attempts || '/' || source_fenced || '/' || (last_error IS NULL) "
                 "FROM id_gen.moves WHERE lower_gene = 32768") == "done/2/false/true", \
        "a fence that timed out was lifted and the second attempt cut over"
    assert f"{local(s1, in_range(32768, 49151))}/{leftovers()}" == f"{range_rows}/{NOTHING_LEFT}", \
        f"all {range_rows} rows arrived; nothing is left over"
    s1.execute("DROP TRIGGER slow_first_marker ON id_gen.move_markers", "DROP FUNCTION public.slow_first_marker()")


# --- (g) the source cannot let go after the flip -----------------------------------------------------

def test_g_a_source_that_cannot_let_go():
    c, s1, s2 = S["c"], S["s1"], S["s2"]
    # A reader holds the source's table, so DETACH times out after the flip.
    locker = Sleeper(s1, "BEGIN", "LOCK TABLE ONLY orders IN ACCESS SHARE MODE", seconds=12, then=["COMMIT"])
    e = c.error("CALL id_gen.move_genes(32768, 49151, 'shard_2')")
    assert e is not None and "has cut over (the target serves genes 32768 .. 49151), but cleaning up failed: " \
        "canceling statement due to lock timeout" in e.diag.message_primary, f"not the expected error: {e!r}"
    mid = c.one("SELECT max(move_id) FROM id_gen.moves")
    assert f"{move_phase(f'move_id = {mid}')}/{routes()}" == \
        "cut_over/0-16383@shard_2,16384-32767@shard_1,32768-49151@shard_2,49152-65535@shard_2", \
        "the source timed out letting go after the flip: the move stays cut over, the routes point at the target"
    assert c.sqlstate(f"CALL id_gen.abort_move({mid})") == "55000", "a move that has cut over cannot be aborted"
    assert locker.join() is None, f"the reader ended with an error: {locker.error!r}"
    c.execute("CALL id_gen.move_genes(32768, 49151, 'shard_2')")
    assert f"{move_phase(f'move_id = {mid}')}/{leftovers()}" == f"done/{NOTHING_LEFT}", "the same CALL resumed from cut_over and finished"
    assert (local(s2, in_range(32768, 49151)), local(s1, in_range(32768, 49151))) == (S["range_rows"], 0), "the rows are back on shard_2 only"


# --- (h) a subscription that stops on an error is found before the fence ---------------------------

def test_h_a_subscription_that_stops_on_an_error_stops_the_move_before_its_fence():
    """The target's apply worker fails on every change after the copy (here: the probe marker,
    refused by a replica trigger; in life, a conflicting row) and starts again every few
    seconds, so the slot's lag looks small on a quiet source. move_genes stops with 55000
    after 10 s without the source's probe marker on the target, before any fence (no attempt
    recorded, the source never fenced, the routes unchanged), its hint naming the
    subscription and its errors; once the target applies again, the same CALL finishes."""
    c, s1, s2 = S["c"], S["s1"], S["s2"]
    before = routes()
    range_rows = local(s2, in_range(49152, 65535))
    call = "CALL id_gen.move_genes(49152, 65535, 'shard_1')"
    with harness.markers_refused(s1, "NEW.marker >= 1000000"):  # the probe's marker
        t0 = time.monotonic()
        e = c.error("SET client_min_messages = warning", call)
        took = time.monotonic() - t0
        mid = c.one("SELECT max(move_id) FROM id_gen.moves")
        report(f"a move whose subscription stops on an error: stopped {took:.1f} s after its CALL began, "
               f"{s1.one(f'SELECT apply_error_count FROM pg_stat_subscription_stats WHERE subname = $$id_gen_move_{mid}$$')} apply error(s) on the target")
        assert e is not None and e.sqlstate == "55000" and "did not apply the source's changes within 10 s" in str(e), repr(e)
        assert f"The subscription id_gen_move_{mid} on shard_1 stopped on an error" in (e.diag.message_hint or ""), e.diag.message_hint
        assert f"CALL id_gen.move_genes(49152, 65535, 'shard_1') resumes the move" in (e.diag.message_hint or ""), e.diag.message_hint
        assert c.one(f"SELECT phase || '/' || fence_attempts || '/' || source_fenced FROM id_gen.moves WHERE move_id = {mid}") \
            == "catching_up/0/false", "no fence was raised: the move stays catching up"
        assert routes() == before, "the routes are unchanged"
        assert c.one("SELECT count(*) FROM orders WHERE id BETWEEN id_gen.gene_first_id(49152) AND id_gen.gene_last_id(65535)") \
            == range_rows, "the coordinator reads the range's rows from the source"
    # (i) The target's copy altered behind the move's back (written as a replica writes, past
    # its fence): the check before the cut-over finds the gene and the move does not flip.
    as_replica = ["SET id_gen.routing_guard = off", "SET session_replication_role = replica"]
    row = s1.one(*as_replica, f"SELECT min(id) FROM orders WHERE {in_range(49152, 65535).split(' WHERE ')[1]}")
    gene = (row >> 47) & 65535
    per_gene = f"SELECT count(*) FROM orders WHERE id BETWEEN id_gen.gene_first_id({gene}) AND id_gen.gene_last_id({gene})"
    gene_rows = local(s2, per_gene)
    s1.execute(*as_replica, f"UPDATE orders SET amount = amount + 1 WHERE id = {row}")
    e = c.error("SET client_min_messages = warning", call)
    assert e is not None and e.sqlstate == "XX001", f"the move refused to cut over over a changed row: {e!r}"
    assert f"gene {gene}: {gene_rows} rows on shard_2, {gene_rows} on shard_1 (their contents differ)" in e.diag.message_primary, \
        e.diag.message_primary
    assert "No fence was raised" in (e.diag.message_detail or ""), e.diag.message_detail
    assert c.one(f"SELECT phase || '/' || verify_state || '/' || fence_attempts || '/' || source_fenced FROM id_gen.moves WHERE move_id = {mid}") \
        == "catching_up/different/0/false", "the difference is recorded; no fence was raised"
    assert routes() == before, "the routes are unchanged"
    # (j) On demand: a row missing on the target; CALL id_gen.verify_range names the counts.
    s1.execute(*as_replica, f"UPDATE orders SET amount = amount - 1 WHERE id = {row}")
    c.execute(f"CALL id_gen.verify_range({mid})")
    all_rows = range_rows + local(s2, in_range(49152, 65535, "audit"))
    assert c.one(f"SELECT verify_state || '/' || verify_rows FROM id_gen.moves WHERE move_id = {mid}") == f"equal/{all_rows}", \
        "the row put back: verify_range finds the shards equal, every row of the range compared (both tables)"
    s1.execute(*as_replica, f"CREATE TABLE public.saved_row AS SELECT * FROM orders WHERE id = {row}", f"DELETE FROM orders WHERE id = {row}")
    e = c.error(f"CALL id_gen.verify_range({mid})")
    assert e is not None and e.sqlstate == "XX001" and f"gene {gene}: {gene_rows} rows on shard_2, {gene_rows - 1} on shard_1" \
        in e.diag.message_primary, f"verify_range names the gene and both counts: {e!r}"
    s1.execute(*as_replica, "INSERT INTO orders SELECT * FROM public.saved_row", "DROP TABLE public.saved_row")
    c.execute("SET client_min_messages = warning", call)
    assert f"{move_phase(f'move_id = {mid}')}/{leftovers()}" == f"done/{NOTHING_LEFT}", "the same CALL resumed and finished"
    assert c.one(f"SELECT verify_state || '/' || verify_rows FROM id_gen.moves WHERE move_id = {mid}") == f"equal/{all_rows}", \
        "the check passed before the cut-over"
    assert (local(s1, in_range(49152, 65535)), local(s2, in_range(49152, 65535))) == (range_rows, 0), "the rows are on shard_1 only"
    e = c.error(f"CALL id_gen.verify_range({mid})")
    assert e is not None and e.sqlstate == "55000" and "only a move that copied its rows and has not cut over" in str(e), repr(e)
