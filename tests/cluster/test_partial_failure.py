"""Partial failures and the routing guard (issue 25): a coordinator and two shards
(wal_level = logical, pg_stat_statements with track = all on the shards). (Ported from
tests/e2e/17_partial_failure.sh with the same assertions; durations are reported.)

(a) the routing guard refuses reads and writes that select rows by id from genes the shard
    does not own, plan by plan (forced with planner settings, each shape checked with
    EXPLAIN): nested-loop, hash and merge joins with a list of ids, hash semi- and
    anti-joins, UPDATE ... FROM, DELETE ... USING, MERGE, a join with a plain table of ids,
    TID and TID range scans, parallel plans (a cold routing cache in the leader; a scan and
    a join in a worker; a stale declared version), and joins that end before they read every
    id (a merge join whose table side runs out first, a hash join with an empty hash table
    or an empty probe side, a nested loop with an empty outer side, ids that come through a
    parallel-aware hash join, a join by id of a join by id): IG001, never XX000 and never an
    empty answer; the same joins rescanned answer every pass on the owner; a statement
    timeout while such a join's ids are read ends it with 57014 and the shard keeps running;
    and it leaves alone what can only match the shard's own rows.
(b) route_claim takes ROW EXCLUSIVE only for a role that may write, ACCESS SHARE for a role
    that may only read (which no fence waits for).
(c) a move's target does not own the genes before the cut-over: while the copy stands,
    direct writes, claims and id reads of them there get IG002 (also when its session died
    before the fence: the supervisor puts it up; and during the catch-up); abort_move then
    loses nothing; after a completed move the target takes them and the source refuses them.
(d) no subscription password in pg_stat_statements (track = all) on either shard.
(e) a frozen shard (SIGSTOP of its processes): a remote call to it ends within its bound
    (57014 on an open connection, 08006 for a new one), and the move supervisor still tells
    the other shard a new route version; a split whose shard is frozen in its swap and a move
    whose target is frozen in its fence end with 57014 within their bounds, coordinator
    writes of other genes all succeed (their longest wait is reported), the CALLs hold no
    lock on the coordinator's table, and the same CALL finishes each after the shard is
    back, with every row there once.
(g) plan_rebalance refuses unknown and NULL shard names; push_route_state(force => true)
    sets back a shard whose version is ahead of the coordinator's.
(f) a reversible move whose source is down: the supervisor drops the way back's slot on the
    target and completes the move once the source is back.
"""
import threading
import time

import psycopg
import pytest

from harness import LOGICAL, Background, Sleeper, poll_until, report

S = {}
HASH = "SET enable_nestloop = off; SET enable_mergejoin = off;"
MERGE = "SET enable_nestloop = off; SET enable_hashjoin = off;"
NEST = "SET enable_hashjoin = off; SET enable_mergejoin = off;"
NEST_SCAN = NEST + " SET enable_indexscan = off; SET enable_bitmapscan = off; SET max_parallel_workers_per_gather = 0;"
PAR = ("SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0; "
       "SET max_parallel_workers_per_gather = 2; SET enable_indexscan = off; SET enable_bitmapscan = off;")
PAR_HASH = PAR + " " + HASH + " SET join_collapse_limit = 1;"
X = "EXPLAIN (COSTS OFF)"


@pytest.fixture(scope="module", autouse=True)
def servers(cluster):
    c = cluster.node("coordinator")
    c.script("""
        CREATE EXTENSION id_gen; CREATE EXTENSION postgres_fdw; CREATE EXTENSION dblink;
        SELECT id_gen.set_route(16383, 'shard_1');
        SELECT id_gen.set_route(32767, 'shard_1');
        SELECT id_gen.set_route(65535, 'shard_2');
        CREATE TABLE orders (id bigint PRIMARY KEY, owner_id bigint NOT NULL, amount bigint NOT NULL);
    """)
    S["c"] = c
    for i in (1, 2):
        s = S[i] = cluster.node(f"shard_{i}", conf=[*LOGICAL, "shared_preload_libraries = 'id_gen, pg_stat_statements'",
                                                   "pg_stat_statements.track = all"])
        s.execute("CREATE EXTENSION id_gen", "CREATE EXTENSION pg_stat_statements")
        c.script(f"""
            CREATE SERVER shard_{i} FOREIGN DATA WRAPPER postgres_fdw
              OPTIONS (host '{s.dir}', port '{s.port}', dbname 'postgres', connect_timeout '2');
            CREATE USER MAPPING FOR postgres SERVER shard_{i} OPTIONS (user 'postgres', password 'TopSecret-{i}-frobozz');
        """)
    c.execute("SET client_min_messages = warning", "SELECT id_gen.distribute_table('orders', 'id', 'owner_id')")
    # 20 000 rows through the coordinator, owners 1 .. 20000 (genes everywhere).
    c.execute("INSERT INTO orders SELECT id_gen.compose_id(id_gen.shard_gene(o::bigint), o), o, o FROM generate_series(1, 20000) o",
              "SELECT id_gen.push_route_state(true)")
    S["before"] = count_sum()
    yield


def count_sum():
    return S["c"].one("SELECT count(*) || '/' || sum(amount) FROM orders")


def guard_case(what, settings, sql, shard=2):
    assert S[shard].sqlstate(f"{settings} {sql}") == "IG001", what


def plan_has(shard, sql, regex):
    import re
    plan = "|".join(S[shard].column(sql))
    assert re.search(regex, plan), f"the plan has no {regex}: {plan}"


# --- (a) the routing guard, plan by plan (on shard_2, ids of shard_1's genes) ---------------

def test_a_the_routing_guard_plan_by_plan():
    c, s2 = S["c"], S[2]
    ids = c.one("SELECT 'ARRAY[' || string_agg(id::text, ',') || ']::bigint[]' FROM "
                "(SELECT id FROM orders WHERE id_gen.shard_of(id) <= 32767 ORDER BY id LIMIT 300) x")
    id1 = c.one("SELECT min(id) FROM orders WHERE id_gen.shard_of(id) <= 32767")
    S.update(ids=ids, id1=id1)
    join = f"SELECT count(*) FROM orders o JOIN unnest({ids}) u(id) USING (id)"
    guard_case("a nested-loop join with unnest(ids) (an index condition on the id)", NEST, join)
    guard_case("a hash join with unnest(ids)", HASH, join)
    guard_case("a merge join with unnest(ids)", MERGE, join)
    guard_case("IN (SELECT unnest(ids)) as a hash semi-join", HASH, f"SELECT count(*) FROM orders WHERE id IN (SELECT unnest({ids}))")
    guard_case("NOT EXISTS as a hash anti-join", HASH,
               f"SELECT count(*) FROM unnest({ids}) u(id) WHERE NOT EXISTS (SELECT FROM orders o WHERE o.id = u.id)")
    guard_case("UPDATE ... FROM unnest(ids)", HASH, f"UPDATE orders o SET amount = o.amount + 1 FROM unnest({ids}) u(id) WHERE o.id = u.id")
    guard_case("DELETE ... USING unnest(ids)", HASH, f"DELETE FROM orders o USING unnest({ids}) u(id) WHERE o.id = u.id")
    guard_case("MERGE ... USING unnest(ids)", HASH,
               f"MERGE INTO orders o USING (SELECT unnest({ids}) AS id) u ON o.id = u.id WHEN MATCHED THEN UPDATE SET amount = o.amount")
    guard_case("a hash join with a plain table of ids", HASH,
               f"CREATE TEMP TABLE wanted AS SELECT unnest({ids}) AS id; ANALYZE wanted; SELECT count(*) FROM orders o JOIN wanted w USING (id)")
    guard_case("TID scan with an id", "", f"SELECT * FROM orders WHERE ctid = '(0,1)' AND id = {id1}")
    guard_case("TID range scan with an id", "SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_seqscan = off;",
               f"SELECT * FROM orders WHERE ctid < '(100,1)' AND id = {id1}")
    assert sum("Gather" in line for line in s2.column(f"{PAR} {X} SELECT * FROM orders WHERE id = {id1}")) == 1, \
        "the plan of the next case is parallel"
    s2.execute("SELECT id_gen.shard_routing_changed()")  # every backend's routing view is cold
    guard_case("a parallel scan, cold routing cache (the leader raises): IG001, not XX000", PAR, f"SELECT * FROM orders WHERE id = {id1}")
    force = s2.one("SELECT CASE WHEN current_setting('server_version_num')::int >= 160000 THEN 'debug_parallel_query' ELSE 'force_parallel_mode' END")
    guard_case(f"a scan in a parallel worker ({force})", f"SET {force} = on; SET enable_indexscan = off; SET enable_bitmapscan = off;",
               f"SELECT * FROM orders WHERE id = {id1}")
    guard_case(f"a hash join in a parallel worker ({force})", f"SET {force} = on; {HASH}", join)
    guard_case("a parallel hash join (leader and workers)", f"{PAR} {HASH}", join)
    s2.execute("SELECT id_gen.shard_routing_changed()")
    guard_case("a stale declared route version in a parallel plan (cold cache)", f"{PAR} SET id_gen.route_version = 1;", "SELECT count(*) FROM orders")


def test_a_joins_that_end_before_reading_every_id():
    """The guard reads the rest of the ids when such a join ends (0.7.1 answered them with
    the rows it found); each case first checks that its plan has the shape it names."""
    c, s1, s2, ids, id1 = S["c"], S[1], S[2], S["ids"], S["id1"]
    max2 = c.one("SELECT max(id) FROM orders")  # of gene 65535 (shard_2's), above every id of shard_1
    own2 = c.one("SELECT max(id) FROM orders WHERE id_gen.shard_of(id) BETWEEN 32768 AND 65534")
    big1 = (32767 << 47) + (1 << 47) - 1  # gene 32767 (shard_1's), above every row of it
    for s in (s1, s2):
        s.execute("ANALYZE orders", f"CREATE TABLE wanted_a AS SELECT unnest({ids}) AS id", "CREATE TABLE wanted_b AS TABLE wanted_a",
                  "ANALYZE wanted_a", "ANALYZE wanted_b")
    q = f"SELECT count(*) FROM orders o JOIN unnest(ARRAY[{big1}, {max2}]) u(id) USING (id)"
    plan_has(1, f"{MERGE} {X} {q}", "Merge Join")
    guard_case("a merge join that ends when the table's side runs out (on shard_1: an id of its own above its rows, then one of shard_2)",
               MERGE, q, shard=1)
    q = f"SELECT count(*) FROM orders o JOIN unnest(ARRAY[{own2}] || {ids}) u(id) USING (id) WHERE o.amount < 0"
    plan_has(2, f"{HASH} {X} {q}", r"Hash Join.*Function Scan on unnest.*Hash\|.*Append")
    guard_case("a hash join whose hash table (the table's side) is empty: the probe side (shard_2's own id, then shard_1's) is read", HASH, q)
    q = "SELECT count(*) FROM orders o JOIN wanted_a w USING (id) WHERE o.amount <> o.owner_id"
    plan_has(2, f"{HASH} {X} {q}", r"Hash Join.*Append.*Hash\|.*Seq Scan on wanted_a")
    guard_case("a hash join whose probe side (the table's) is empty: the ids of the unbuilt hash table are read", HASH, q)
    plan_has(2, f"{NEST_SCAN} {X} {q}", r"Nested Loop.*Append.*Materialize.*Seq Scan on wanted_a")
    guard_case("a nested loop whose outer side (the table's) is empty: its inner ids are read", NEST_SCAN, q)
    q = "SELECT count(*) FROM orders o JOIN (wanted_a a JOIN wanted_b b USING (id)) USING (id)"
    plan_has(2, f"{PAR_HASH} {X} {q}", r"Parallel Hash Join.*Parallel Hash\|.*Parallel Hash Join")
    guard_case("ids that come through a parallel-aware hash join (its ExecProcNode is set again in parallel mode)", PAR_HASH, q)
    assert s1.one(f"{PAR_HASH} {q}") == 300, "the owner answers the same join through a parallel-aware hash join"
    q = f"SELECT count(*) FROM orders a JOIN (SELECT u.id FROM orders b JOIN unnest({ids}) u(id) ON b.id = u.id) w ON a.id = w.id"
    for name, how in (("HASH", HASH), ("MERGE", MERGE)):  # the inner join is both a join whose rest is read and a value side
        guard_case(f"a join by id of a join by id ({name} joins)", how, q)
        assert s1.one(f"{how} {q}") == 300, f"the owner answers it ({name} joins)"
    # Rescans (a subplan run once per g) after the rest was read: the next pass reads its
    # inputs from their start (g = 1 finds no row of the table; g = 2 and 3 every one).
    q = ("SELECT string_agg((SELECT count(*) FROM orders o JOIN wanted_a w USING (id) WHERE o.amount <> o.owner_id + g - 1)::text, ',') "
         "FROM generate_series(1, 3) g")
    for name, how in (("HASH", HASH), ("NEST_SCAN", NEST_SCAN)):
        assert s1.one(f"{how} {q}") == "0,300,300", f"a rescanned join whose inputs were read to their end answers each pass ({name})"
    q = (f"SELECT string_agg((SELECT count(*) FROM orders o JOIN unnest(ARRAY[{id1}, {big1}]) u(id) USING (id) WHERE o.amount > -g)::text, ',') "
         "FROM generate_series(1, 3) g")
    plan_has(1, f"{MERGE} {X} {q}", "Merge Join")
    assert s1.one(f"{MERGE} {q}") == "1,1,1", "a rescanned merge join whose ids were read past the table's end answers each pass"
    # A cancel while the rest of the ids is read (statement_timeout while the ids of an
    # unbuilt hash table are read, 2 ms a row): 57014, and the shard keeps running.
    started = s1.one("SELECT pg_postmaster_start_time()")
    q = "SELECT count(*) FROM orders o JOIN wanted_a w ON o.id = w.id WHERE o.amount < 0 AND w.id + (pg_sleep(0.002) IS NOT NULL)::int > 0"
    plan_has(1, f"{HASH} {X} {q}", r"Hash Join.*Append.*Hash\|.*Seq Scan on wanted_a")
    assert s1.sqlstate(f"{HASH} SET statement_timeout = '150ms';", q) == "57014", "a statement timeout while a join's remaining ids are read: 57014"
    assert s1.one("SELECT pg_postmaster_start_time()") == started, "the shard did not restart"


def test_a_what_only_matches_the_shards_own_rows_answers():
    c, s1, s2, ids = S["c"], S[1], S[2], S["ids"]
    o1 = c.one("SELECT owner_id FROM orders WHERE id_gen.shard_of(id) <= 32767 ORDER BY id LIMIT 1")
    assert s1.one(f"SELECT count(*) FROM (SELECT id FROM orders WHERE owner_id = {o1} AND id > 0 ORDER BY id LIMIT 2) x") == 1, \
        "an owner's keyset pagination (owner_id = o AND id > last) on its own shard answers"
    assert s1.one("SELECT min(id) > 0 FROM orders"), "min(id) on a shard answers"
    assert s1.one("SELECT count(*) > 0 FROM orders WHERE id % 2 = 0"), "an expression of the id (id % 2 = 0) answers"
    assert s2.one(f"{HASH} SELECT count(*) = (SELECT count(*) FROM orders) FROM orders a JOIN orders b USING (id)"), \
        "a join of the shard's own tables by id is shard-local and answers"
    join = f"SELECT count(*) FROM orders o JOIN unnest({ids}) u(id) USING (id)"
    assert s1.one(f"{HASH} {join}") == 300, "the owner answers the same hash join by its ids"
    assert s1.one(f"{MERGE} {join}") == 300, "the owner answers the same merge join by its ids"
    assert s1.one(f"{HASH} WITH u AS (UPDATE orders o SET amount = o.amount FROM unnest({ids}) u(id) WHERE o.id = u.id RETURNING 1) "
                  "SELECT count(*) FROM u") == 300, "the owner answers UPDATE ... FROM by its ids"


# --- (b) route_claim's locks follow the role's rights -------------------------------------------

def test_b_claim_locks_follow_the_roles_rights():
    s1 = S[1]
    s1.execute("CREATE ROLE reader", "CREATE ROLE writer", "GRANT SELECT ON orders TO reader",
               "GRANT SELECT, INSERT, UPDATE, DELETE ON orders TO writer")
    v = s1.one("SELECT version FROM id_gen.shard_route_state")

    def claim_locks(role):
        return s1.one("BEGIN", f"SET ROLE {role}", f"SELECT id_gen.route_claim(5, {v})", "RESET ROLE",
                      "SELECT string_agg(DISTINCT mode, ',') FROM pg_locks WHERE pid = pg_backend_pid() AND relation = 'orders'::regclass")

    assert claim_locks("reader") == "AccessShareLock", "a SELECT-only role's claim takes ACCESS SHARE (no fence waits for it)"
    assert claim_locks("writer") == "RowExclusiveLock", "a writer's claim takes ROW EXCLUSIVE"


# --- (c) a move's target does not own the genes before the cut-over ------------------------------

def latest_move_phase():
    return S["c"].one("SELECT phase FROM id_gen.moves ORDER BY move_id DESC LIMIT 1")


def test_c_a_moves_target_does_not_own_the_genes_before_the_cut_over():
    c, s1, s2 = S["c"], S[1], S[2]
    s2.execute("ALTER SYSTEM SET max_sync_workers_per_subscription = 0", "SELECT pg_reload_conf()")
    mover = Background(c, "CALL id_gen.move_genes(0, 16383, 'shard_2')")
    poll_until("the move copies (its copy held: no table-sync worker on the target)", latest_move_phase, "copying", 60)
    mid = c.one("SELECT max(move_id) FROM id_gen.moves")
    g = c.one("SELECT id_gen.shard_of(min(id)) FROM orders WHERE id_gen.shard_of(id) <= 16383")
    id0 = c.one(f"SELECT min(id) FROM orders WHERE id_gen.shard_of(id) = {g}")
    o0 = c.one(f"SELECT owner_id FROM orders WHERE id = {id0}")
    S.update(g=g, id0=id0, o0=o0)
    v2 = s2.one("SELECT version FROM id_gen.shard_route_state")
    assert s2.sqlstate(f"INSERT INTO orders VALUES (id_gen.compose_id({g}, 99000001), {o0}, 1)") == "IG002", \
        "a direct write of an incoming gene on the target: IG002"
    assert s2.sqlstate("BEGIN", f"SELECT id_gen.route_claim({g}, {v2})") == "IG002", "a claim of an incoming gene at the current version on the target: IG002"
    assert s2.sqlstate(f"SELECT * FROM orders WHERE id = {id0}") == "IG002", "a read by id of an incoming gene on the target: IG002"
    c.execute(f"SELECT pg_terminate_backend(runner_pid) FROM id_gen.shard_moves WHERE move_id = {mid}")
    mover.join()
    c.execute(f"CALL id_gen.abort_move({mid})")
    assert f"{c.one(f'SELECT phase FROM id_gen.moves WHERE move_id = {mid}')}/{count_sum()}" == f"aborted/{S['before']}", \
        "abort_move: every row as before, nothing acknowledged was dropped"
    # The moment between creating the target's partitions and fencing them: a move recorded,
    # the partitions created, and its session gone (as if killed between the two steps).
    mid = c.one("INSERT INTO id_gen.shard_moves (lower_gene, upper_gene, source_shard, target_shard, updated_at) "
                "VALUES (0, 16383, 'shard_1', 'shard_2', clock_timestamp() - interval '1 min') RETURNING move_id")
    c.execute("SELECT id_gen.place_ranges('shard_2', 0, 16383, true)")
    poll_until("the move supervisor fences the target's partitions of a move left planned", lambda: s2.one(
        "SELECT count(*) FROM pg_trigger WHERE tgname = 'id_gen_move_fence' AND tgenabled <> 'D'"), 1, 60)
    assert s2.sqlstate(f"INSERT INTO orders VALUES (id_gen.compose_id({g}, 99000003), {o0}, 1)") == "IG002", \
        "a direct write of an incoming gene on the target of a move left planned: IG002"
    c.execute(f"CALL id_gen.abort_move({mid})")
    assert f"{c.one(f'SELECT phase FROM id_gen.moves WHERE move_id = {mid}')}/{count_sum()}" == f"aborted/{S['before']}", \
        "abort_move of it: every row as before"
    s2.execute("ALTER SYSTEM RESET max_sync_workers_per_subscription", "SELECT pg_reload_conf()")
    # The completed move, held in its catch-up by a reader of the range's partition on the
    # coordinator (its fence waits): the target still refuses the genes.
    part0 = c.one("SELECT partition FROM id_gen.distribution WHERE lower_gene = 0")
    holder = Sleeper(c, "BEGIN", f"LOCK TABLE {part0} IN ACCESS SHARE MODE", seconds=119, timeout=10)
    mover = Background(c, "SET client_min_messages = warning", "CALL id_gen.move_genes(0, 16383, 'shard_2')")
    poll_until("the move catches up, its fence waiting for the reader", latest_move_phase, "catching_up", 60)
    v2 = s2.one("SELECT version FROM id_gen.shard_route_state")
    assert s2.sqlstate(f"INSERT INTO orders VALUES (id_gen.compose_id({g}, 99000004), {o0}, 1)") == "IG002", "during the catch-up a direct write on the target: IG002"
    assert s2.sqlstate("BEGIN", f"SELECT id_gen.route_claim({g}, {v2})") == "IG002", "during the catch-up a claim on the target: IG002"
    holder.release()
    assert mover.join() is None, f"the move completes once the reader is gone: {mover.error!r}"
    c.execute("SELECT id_gen.push_route_state(true)")
    assert s2.one(f"INSERT INTO orders VALUES (id_gen.compose_id({g}, 99000002), {o0}, 1) RETURNING 1") == 1, "after the cut-over the target takes the genes"
    assert s1.sqlstate(f"SELECT * FROM orders WHERE id = {id0}") == "IG001", "and the source refuses them (IG001)"
    assert c.one("SELECT count(*) - 1 || '/' || sum(amount) - 1 FROM orders") == S["before"], "every row there once after the move"


# --- (d) no password in pg_stat_statements ------------------------------------------------------

def test_d_no_password_in_pg_stat_statements():
    assert S[2].one("SELECT count(*) > 0 FROM pg_stat_statements WHERE query LIKE '%shard_subscribe%'"), \
        "shard_2's pg_stat_statements tracked the move's calls"
    for i in (1, 2):
        assert S[i].one("SELECT count(*) FROM pg_stat_statements WHERE query LIKE '%frobozz%'") == 0, f"shard_{i}: no statement with the password"


# --- (e) a frozen shard ------------------------------------------------------------------------

def ms_since(t0):
    return int((time.monotonic() - t0) * 1000)


def test_e_remote_calls_and_route_pushes_with_a_frozen_shard():
    c, s1, s2 = S["c"], S[1], S[2]
    # A session with a connection to shard_1 open: its next call after the freeze.
    caller = Sleeper(c, "SELECT id_gen.remote_exec('shard_1', 'SELECT 1', 2000)", seconds=2,
                     then=["SELECT id_gen.remote_exec('shard_1', 'SELECT 1', 2000)"])
    s1.freeze()
    try:
        t0 = time.monotonic()
        e = caller.join()
        report(f"frozen shard: the session ended {ms_since(t0)} ms after the freeze (the rest of its 2 s sleep, then the call's 2 s bound)")
        assert e is not None and e.sqlstate == "57014", \
            f"a statement on an open connection to a frozen shard ends at its bound with 57014 (no cancel request that waits for it): {e!r}"
        t0 = time.monotonic()
        err = c.sqlstate("SELECT id_gen.remote_exec('shard_1', 'SELECT 1', 2000)")
        report(f"frozen shard: a new connection gave up after {ms_since(t0)} ms (bound 2 s: connect_timeout on 15, a timer on 16+)")
        assert err == "08006", "a new connection to a frozen shard ends at connect_timeout with 08006"
        # A route change of shard_2's genes only: the supervisor tells shard_2 though shard_1 hangs.
        c.execute("SELECT id_gen.set_route(65535, 'shard_2')")  # (same shard: only the version rises)
        vnew = c.one("SELECT id_gen.route_version()")
        t0 = time.monotonic()
        poll_until(f"the supervisor tells shard_2 route version {vnew} while shard_1 is frozen",
                   lambda: s2.one("SELECT version FROM id_gen.shard_route_state"), vnew, 60)
        report(f"frozen shard: shard_2 learned the new route version after {ms_since(t0)} ms")
    finally:
        s1.thaw()
    poll_until("shard_1 learns it once it answers again", lambda: s1.one("SELECT version FROM id_gen.shard_route_state"), vnew, 60)
    # A push that failed moments ago does not hold back the next route version (0.7.13 skipped
    # such a shard for 10 s, so a move's own shards could stay stale after it): frozen, a push
    # to shard_1 fails; thawed, the next route change's push tells it at once.
    s1.freeze()
    try:
        c.execute("SELECT id_gen.set_route(65535, 'shard_2')")
        c.one("SELECT id_gen.push_route_state()")
        assert c.one("SELECT last_error IS NOT NULL FROM id_gen.route_pushes WHERE shard = 'shard_1'"), \
            "the push to the frozen shard_1 failed"
    finally:
        s1.thaw()
    c.execute("SELECT id_gen.set_route(65535, 'shard_2')")
    v3 = c.one("SELECT id_gen.route_version()")
    c.one("SELECT id_gen.push_route_state()")
    assert s1.one("SELECT version FROM id_gen.shard_route_state") == v3, \
        "a newer route version is pushed at once to a shard whose last push failed"


class WriteLoop:
    """Writes of shard_2's genes through the coordinator, a new session each, until
    stopped; keeps each statement's duration and whether it failed."""

    def __init__(self):
        c, o2 = S["c"], S["o2"]
        g2 = c.one(f"SELECT id_gen.shard_gene({o2}::bigint)")
        self.sql = (f"INSERT INTO orders VALUES (id_gen.compose_id({g2}, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint "
                    f"% 1000000000000), {o2}, 1)")
        self.results, self.stop = [], threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                with S["c"].connect(options="-c statement_timeout=30s") as conn:
                    conn.execute(self.sql)
                ok = True
            except psycopg.Error:
                ok = False
            self.results.append((ms_since(t0), ok))

    def finish(self, what):
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive(), "the write loop did not stop"
        failed = sum(1 for _, ok in self.results if not ok)
        report(f"{what}: {len(self.results)} statements, longest {max((d for d, _ in self.results), default=0)} ms, {failed} failed")
        assert failed == 0, f"{what}: no statement failed"
        return len(self.results)


def fence_frozen(call, bound, waiting, release, states=("57014",)):
    """Runs CALL until waiting() is true (its fence waits for a holder), then writes shard_2's
    genes through the coordinator, freezes shard_1, calls release() and waits for the CALL,
    which must fail with one of `states`; returns the relations it held in ACCESS EXCLUSIVE
    meanwhile (sampled until it ended) and the number of writes."""
    c, s1 = S["c"], S[1]
    caller = Background(c, call)
    poll_until("the CALL waits to fence", waiting, True, 120)
    pid = c.one(f"SELECT pid FROM pg_stat_activity WHERE query = $q${call}$q$")
    writes = WriteLoop()
    s1.freeze()
    release()
    t0 = time.monotonic()
    locked = set()
    while caller.thread.is_alive():
        locked.update(c.column(f"SELECT l.relation::regclass::text FROM pg_locks l WHERE l.pid = {pid} "
                               "AND l.mode = 'AccessExclusiveLock' AND l.relation IS NOT NULL AND l.granted"))
        time.sleep(0.1)
    e = caller.join()
    report(f"{call} failed {ms_since(t0)} ms after the freeze ({bound}); it held in ACCESS EXCLUSIVE: {','.join(sorted(locked)) or 'nothing'}")
    assert e is not None and e.sqlstate in states, f"{call} ends at its bound on the frozen shard: expected {states}, got {e!r}"
    n = writes.finish("coordinator writes of shard_2's genes meanwhile")
    return locked, n


def test_e_a_shard_frozen_in_a_splits_swap():
    c, s1 = S["c"], S[1]
    S["o2"] = c.one("SELECT owner_id FROM orders WHERE id_gen.shard_of(id) >= 32768 ORDER BY id LIMIT 1")
    S["parts"] = c.one("SELECT format('%I.%I', schema_name, partitioned_name)::regclass::text FROM id_gen.distributed_tables")
    S["before2"] = count_sum()
    # A reader of shard_1's table: the swap there waits (50 ms attempts, retried) until the
    # freeze; the coordinator holds nothing meanwhile.
    holder = Sleeper(s1, "BEGIN", "LOCK TABLE orders IN ACCESS SHARE MODE", seconds=122, timeout=10)
    swap_tried = lambda: s1.one(  # noqa: E731
        "SELECT count(*) > 0 FROM pg_stat_activity WHERE query LIKE '%shard_split_swap%' AND pid <> pg_backend_pid()")
    try:
        # (Each attempt the lock refused closes the connection: the freeze meets a statement in
        # flight, 57014, or the next connect, 08006.)
        locked, n = fence_frozen("CALL id_gen.split_route(20000)", "swap bound 5 s", swap_tried, lambda: None, ("57014", "08006"))
    finally:
        s1.thaw()
    assert S["parts"] not in locked, "the split's CALL held no lock on the coordinator's table while the shard hung (locks only what it fences)"
    holder.release()

    def call_again():
        e = c.error("SET client_min_messages = warning", "CALL id_gen.split_route(20000)")
        if e is None:
            return "done"
        # The move supervisor looks at it (bounded): the CALL takes it over after.
        return "running" if "is running in session" in str(e) else f"error: {e}"

    poll_until("the same CALL finishes the split once the shard answers", call_again, "done", 90, interval=1)
    assert c.one("SELECT phase FROM id_gen.splits ORDER BY split_id DESC LIMIT 1") == "done", "the split is done"
    S["writes"] = n
    assert c.one(f"SELECT count(*) - {n} || '/' || sum(amount) - {n} FROM orders") == S["before2"], "every row there once after the split"


def test_e_a_target_frozen_in_a_moves_fence():
    c, s1 = S["c"], S[1]
    part0 = c.one("SELECT partition FROM id_gen.distribution WHERE lower_gene = 0")
    holder = Sleeper(c, "BEGIN", f"LOCK TABLE {part0} IN ACCESS SHARE MODE", seconds=121, timeout=10)
    call = "CALL id_gen.move_genes(0, 16383, 'shard_1')"
    fence_waits = lambda: c.one(  # noqa: E731
        f"SELECT EXISTS (SELECT FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE NOT l.granted AND a.query = $q${call}$q$)")
    try:
        locked, n = fence_frozen(call, "marker bound 3 s", fence_waits, holder.release)
    finally:
        s1.thaw()
    assert S["parts"] not in locked, "the move's CALL held no lock on the coordinator's table, only its range's partitions"
    assert c.one("SELECT phase || ':' || source_fenced FROM id_gen.moves ORDER BY move_id DESC LIMIT 1") == "catching_up:false", \
        "the move stays catching up, the source's fence lifted"
    c.execute("SET client_min_messages = warning", call)
    assert latest_move_phase() == "done", "the same CALL finishes the move once the target answers"
    n += S["writes"]
    assert c.one(f"SELECT count(*) - {n} || '/' || sum(amount) - {n} FROM orders") == S["before2"], "every row there once after the move"


# --- (g) smaller ones --------------------------------------------------------------------------

def test_g_smaller_ones():
    c, s2 = S["c"], S[2]
    assert c.sqlstate("SELECT * FROM id_gen.plan_rebalance(shards => ARRAY['nope'])") == "42704", "plan_rebalance with an unknown shard: 42704"
    assert c.sqlstate("SELECT * FROM id_gen.plan_rebalance(shards => ARRAY[NULL])") == "22004", "plan_rebalance with a NULL shard: 22004"
    vc = c.one("SELECT id_gen.route_version()")
    s2.execute("UPDATE id_gen.shard_route_state SET version = 999999", "SELECT id_gen.shard_routing_changed()")
    c.execute("SELECT id_gen.push_route_state(true)")
    assert s2.one("SELECT version FROM id_gen.shard_route_state") == vc, \
        "a shard ahead of the coordinator (restored from an older dump) is set back by push_route_state(force => true)"


# --- (f) the WAL bound of a reversible move whose source is down ---------------------------------

def test_f_the_wal_bound_of_a_reversible_move_whose_source_is_down():
    c, s1, s2 = S["c"], S[1], S[2]
    c.execute("ALTER SYSTEM SET id_gen.reversible_max_wal = '2MB'", "SELECT pg_reload_conf()")
    try:
        c.execute("SET client_min_messages = warning", "CALL id_gen.move_genes(16384, 32767, 'shard_2', reversible => true)")
        mid = c.one("SELECT max(move_id) FROM id_gen.moves")
        s1.stop()
        s2.execute("""INSERT INTO orders (id, owner_id, amount) SELECT id_gen.compose_id(id_gen.shard_gene(o), 3000000000 + o), o, 1
                      FROM generate_series(30000001, 30600000) o WHERE id_gen.shard_gene(o) BETWEEN 16384 AND 32767""")
        poll_until("with the source down, the supervisor drops the way back's slot on the target", lambda: s2.one(
            f"SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'id_gen_back_{mid}'"), 0, 90)
        s1.start()
        poll_until("once the source is back, the move is completed", lambda: c.one(
            f"SELECT phase FROM id_gen.moves WHERE move_id = {mid}"), "done", 90)
        assert s1.one(f"SELECT count(*) FROM pg_subscription WHERE subname = 'id_gen_back_{mid}'") == 0, "no subscription left on the source"
    finally:
        c.execute("ALTER SYSTEM RESET id_gen.reversible_max_wal", "SELECT pg_reload_conf()")
