"""Fleet scale: distributed tables laid out per shard on the coordinator
(distribute_table(..., layout => 'per_shard'), docs/design.md §11.7) over 4,096 route ranges
alternating between four shards, every server on PostgreSQL's default max_connections and
max_locks_per_transaction.

(a) the coordinator holds one partition per shard for each table, whatever the number of
    ranges, and a new backend's first lookup by id opens none of the others.
(b) inserts that name only the owner land on the owner's shard with owner-affine ids;
    lookups by id and by owner (prepared too) reach exactly one shard (EXPLAIN VERBOSE: one
    Foreign Scan, on the owner's partition); a cross-shard aggregate sees every row once.
(c) a split and then a merge of a range under load (writers through the coordinator inside
    and outside the range): every committed row is there once, the rows per owner match the
    writers' log, the coordinator's relations stay the same, and lookups still reach one
    shard.
(d) a move of a range under load (writers through the coordinator, a reader of the whole
    table): no read sees a row twice, every committed row is there once, the rows are on the
    target alone and nothing of the move is left; a coordinator killed in the fence after it
    re-laid both shards: the supervisor undoes it, and the same CALL moves the genes; a
    reversible move under load, a revert whose fence fails after re-laying both shards
    (undone, nothing seen twice or missing), the revert under load, then a reversible move
    completed; a rename is refused (0A000).
(e) pg_dump of the coordinator restored into another database: the same rows through it, and
    lookups by owner still reach one shard (the shard slots and the partitions' bounds come
    back together).
(f) a distribution whose partitions would not fit the lock table of a shard (a table with many
    indexes) or of the coordinator (per_range, with max_locks_per_transaction lowered) is
    refused with 53400 and the setting that would do, before anything changes.
(g) a table converted to the layout by ownership on the shards (1,024 partitions of it on
    each) under load: no insert fails, every row once, two relations per shard, lookups by
    owner on one shard; before it, a view over the table on one shard stops the CALL (2BP01)
    with nothing marked or created.
"""
import os
import subprocess
import threading
import time

import psycopg
import pytest

import harness
from harness import LOGICAL, Background, coordinator_with_shards, poll_until, report

RANGES = 4096
SHARDS = 4  # 1,024 ranges each: a shard's lock table holds the partitions of orders (TOAST) on defaults
DEFAULTS = ["max_connections = 100"]  # PostgreSQL's default (the harness uses 40)
S = {}


def shard_of_range(k):
    return f"shard_{k % SHARDS + 1}"


@pytest.fixture(scope="module", autouse=True)
def servers(cluster, tmp_path_factory):
    routes = tuple((k * (65536 // RANGES) + 65536 // RANGES - 1, shard_of_range(k)) for k in range(RANGES))
    c, shards = coordinator_with_shards(
        cluster, shards=SHARDS, coordinator_conf=DEFAULTS, shard_conf=LOGICAL + DEFAULTS, routes=routes,
        layout="per_shard",
        tables=["CREATE TABLE items (id bigint PRIMARY KEY, owner_id bigint NOT NULL, qty integer NOT NULL DEFAULT 1);",
                "CREATE TABLE events (id bigint PRIMARY KEY, owner_id bigint NOT NULL, kind integer);"],
        distribute=["'items', 'id', 'owner_id', 'orders', layout => 'per_shard'",
                    "'events', 'id', 'owner_id', layout => 'per_shard'"])
    S.update(c=c, shards=shards, work=str(tmp_path_factory.mktemp("scale")))
    yield


def explain(sql, *params, dbname="postgres"):
    """The plan's lines, for a statement through the coordinator."""
    with S["c"].connect(dbname) as conn:
        return [r[0] for r in conn.execute(f"EXPLAIN (VERBOSE, COSTS OFF) {sql}", params).fetchall()]


def foreign_scans(plan):
    return [line.strip() for line in plan if "Foreign Scan" in line or "Foreign Update" in line
            or "Foreign Delete" in line]


def owners_on(shard, n, first=1):
    return harness.owners(S["c"], f"id_gen.route_owner(o) = '{shard}'", n, first, span=100000)


def coordinator_relations():
    """Relations behind the distributed tables here (partitions and foreign tables)."""
    return S["c"].one("SELECT count(*) FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent "
                      "WHERE p.relname IN ('orders_shards', 'items_shards', 'events')")


def test_a_one_partition_per_shard():
    c = S["c"]
    assert c.one("SELECT count(*) FROM id_gen.route_ranges") == RANGES
    assert c.one("SELECT current_setting('max_locks_per_transaction')::int") == 64
    assert coordinator_relations() == 3 * SHARDS
    assert c.one("SELECT string_agg(DISTINCT layout, ',') FROM id_gen.distributed_tables") == "per_shard"
    assert c.one("SELECT bool_and(in_step) FROM id_gen.distribution") is True
    # Each shard holds its ranges as its partitions (a third of them each).
    for i, s in S["shards"].items():
        parts = s.one("SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                      "WHERE i.inhparent = 'orders'::regclass AND c.relname ~ '_g[0-9]+_[0-9]+$'")
        assert parts == sum(1 for k in range(RANGES) if shard_of_range(k) == f"shard_{i}")
    # A new backend's first lookup by id opens one partition, not one per range.
    with c.connect() as conn:
        conn.execute("SELECT * FROM orders WHERE id = 42").fetchall()
        opened = conn.execute("SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'relation'").fetchone()[0]
    assert opened < 20, f"relations locked by a first lookup: {opened}"


def test_b_inserts_and_lookups_reach_one_shard():
    c = S["c"]
    for i in range(1, SHARDS + 1):
        for o in owners_on(f"shard_{i}", 20):
            c.execute(f"INSERT INTO orders (owner_id, amount) VALUES ({o}, 1)",
                      f"INSERT INTO items (owner_id, qty) VALUES ({o}, 2)")
    assert c.one("SELECT count(*) FROM orders") == 20 * SHARDS
    assert c.one("SELECT bool_and(id_gen.shard_of(id) = id_gen.shard_gene(owner_id)) FROM orders") is True
    for i, s in S["shards"].items():
        assert s.one("SELECT count(*) FROM orders") == 20, f"rows on shard_{i}"
    o = owners_on("shard_2", 1)[0]
    row_id = c.one(f"SELECT id FROM orders WHERE owner_id = {o}")
    part = c.one("SELECT 'public.' || id_gen.slot_partition_name('orders_shards', slot) FROM id_gen.shard_slots "
                 "WHERE shard = 'shard_2'")
    by_id = foreign_scans(explain(f"SELECT * FROM orders WHERE id = {row_id}"))
    assert len(by_id) == 1 and part in by_id[0], by_id
    by_owner = foreign_scans(explain(
        f"SELECT * FROM orders WHERE owner_id = {o} AND id BETWEEN id_gen.owner_first_id({o}) AND id_gen.owner_last_id({o})"))
    assert len(by_owner) == 1 and part in by_owner[0], by_owner
    upd = foreign_scans(explain(
        f"UPDATE orders SET amount = amount + 1 WHERE id BETWEEN id_gen.owner_first_id({o}) AND id_gen.owner_last_id({o})"))
    assert len(upd) == 1 and part in upd[0], upd
    with c.connect() as conn:
        conn.execute("PREPARE by_owner(bigint) AS SELECT count(*) FROM orders "
                     "WHERE id BETWEEN id_gen.owner_first_id($1) AND id_gen.owner_last_id($1)")
        for _ in range(8):
            assert conn.execute(f"EXECUTE by_owner({o})").fetchone()[0] >= 1
        plan = [r[0] for r in conn.execute(f"EXPLAIN (VERBOSE, COSTS OFF) EXECUTE by_owner({o})").fetchall()]
    assert len(foreign_scans(plan)) == 1, plan
    everywhere = foreign_scans(explain("SELECT count(*), sum(amount) FROM orders"))
    assert len(everywhere) == SHARDS, everywhere
    assert c.one("SELECT count(*) FROM orders o JOIN items i USING (owner_id)") == 20 * SHARDS


class Writers:
    """Threads inserting through the coordinator for owners inside and outside a range
    until stopped; each keeps the count of rows per owner it committed."""

    def __init__(self, owners):
        self.committed = {o: 0 for o in owners}
        self.errors = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(owners[i::2],), daemon=True) for i in range(2)]
        for t in self.threads:
            t.start()

    def run(self, owners):
        try:
            with psycopg.connect(S["c"].dsn(), autocommit=True) as conn:
                k = 0
                while not self.stop.is_set():
                    o = owners[k % len(owners)]
                    k += 1
                    conn.execute("INSERT INTO orders (owner_id, amount) VALUES (%s, 1)", (o,))
                    with self.lock:
                        self.committed[o] += 1
        except Exception as e:  # noqa: BLE001 - reported by finish()
            self.errors.append(e)

    def total(self):
        with self.lock:
            return sum(self.committed.values())

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(60)
            assert not t.is_alive(), "a writer did not stop within 60 s"
        assert not self.errors, self.errors
        return self.committed


def test_c_split_and_merge_under_load():
    c = S["c"]
    # The range of genes 16 .. 31 (route range 1, on shard_2), and owners in it and elsewhere.
    lower, upper = 16, 31
    assert harness.routes(c).split(",")[1] == f"{lower}-{upper}@shard_2"
    inside = c.column(f"SELECT o FROM generate_series(200000, 2000000) o "
                      f"WHERE id_gen.shard_gene(o::bigint) BETWEEN {lower} AND {upper} LIMIT 6")
    outside = owners_on("shard_1", 3, first=300000) + owners_on("shard_3", 3, first=300000)
    assert len(inside) == 6
    before = coordinator_relations()
    load = Writers(inside + outside)
    poll_until("writers committed rows", load.total, lambda n: n >= 50, 60)
    c.execute("SET client_min_messages = warning", f"CALL id_gen.split_route({lower + 7})")
    assert harness.routes(c).split(",")[1:3] == [f"{lower}-{lower + 7}@shard_2", f"{lower + 8}-{upper}@shard_2"]
    n = load.total()
    poll_until("writers committed rows after the split", load.total, lambda m: m >= n + 50, 60)
    c.execute("SET client_min_messages = warning", f"CALL id_gen.merge_routes({lower + 7})")
    assert harness.routes(c).split(",")[1] == f"{lower}-{upper}@shard_2"
    n = load.total()
    poll_until("writers committed rows after the merge", load.total, lambda m: m >= n + 50, 60)
    committed = load.finish()
    got = dict(c.execute(
        f"SELECT owner_id, count(*) FROM orders WHERE owner_id IN ({','.join(map(str, committed))}) GROUP BY 1"))
    assert got == {o: n for o, n in committed.items() if n}, (got, committed)
    assert c.one("SELECT count(*) = count(DISTINCT id) FROM orders") is True
    assert c.one("SELECT string_agg(kind || ':' || phase, ',' ORDER BY split_id) FROM id_gen.splits") == "split:done,merge:done"
    assert coordinator_relations() == before
    o = inside[0]
    scans = foreign_scans(explain(f"SELECT * FROM orders WHERE id BETWEEN id_gen.owner_first_id({o}) AND id_gen.owner_last_id({o})"))
    assert len(scans) == 1 and "slot" in scans[0], scans
    report(f"per_shard split and merge under load: {sum(committed.values())} rows written through the coordinator, none lost")


class DoubleReader:
    """A thread that reads the whole table through the coordinator until stopped and keeps
    every answer in which a row appeared twice (count(*) <> count(DISTINCT id)), and the
    number of reads; errors end it and are reported by finish()."""

    def __init__(self):
        self.doubles, self.reads, self.errors = [], 0, []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        try:
            with psycopg.connect(S["c"].dsn(), autocommit=True) as conn:
                while not self.stop.is_set():
                    n, distinct = conn.execute("SELECT count(*), count(DISTINCT id) FROM orders").fetchone()
                    self.reads += 1
                    if n != distinct:
                        self.doubles.append((n, distinct))
        except Exception as e:  # noqa: BLE001 - reported by finish()
            self.errors.append(e)

    def finish(self):
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive(), "the reader did not stop within 60 s"
        assert not self.errors, self.errors
        return self.reads, self.doubles


def hidden_copies(shard):
    return shard.one("SELECT count(*) FROM pg_constraint WHERE conname = 'id_gen_incoming_bound'")


def test_d_a_move_of_per_shard_tables_under_load():
    """A move of one route range of per_shard tables, with writers through the coordinator
    inside and outside the range and a reader of the whole table: the target's copies stay
    out of its tables until the fence (the coordinator reads a shard's table whole), the
    fence shows them and detaches the source's under the coordinator's locks of both shards,
    so no read sees a row twice, and every committed row is there once afterwards."""
    c, shards = S["c"], S["shards"]
    lower, upper = 32, 47  # route range 2, on shard_3
    assert harness.routes(c).split(",")[2] == f"{lower}-{upper}@shard_3"
    inside = c.column(f"SELECT o FROM generate_series(400000, 4000000) o "
                      f"WHERE id_gen.shard_gene(o::bigint) BETWEEN {lower} AND {upper} LIMIT 6")
    outside = owners_on("shard_3", 3, first=400000) + owners_on("shard_4", 3, first=400000)
    assert len(inside) == 6
    before = coordinator_relations()
    load, reader = Writers(inside + outside), DoubleReader()
    poll_until("writers committed rows", load.total, lambda n: n >= 50, 60)
    c.execute("SET client_min_messages = warning", f"CALL id_gen.move_genes({lower}, {upper}, 'shard_4')")
    n = load.total()
    poll_until("writers committed rows after the move", load.total, lambda m: m >= n + 50, 60)
    committed = load.finish()
    reads, doubles = reader.finish()
    assert doubles == [], f"{len(doubles)} of {reads} whole-table reads saw rows twice: {doubles[:5]}"
    assert reads >= 3, f"only {reads} whole-table reads ran during the move"
    got = dict(c.execute(
        f"SELECT owner_id, count(*) FROM orders WHERE owner_id IN ({','.join(map(str, committed))}) GROUP BY 1"))
    assert got == {o: n for o, n in committed.items() if n}, (got, committed)
    assert c.one("SELECT count(*) = count(DISTINCT id) FROM orders") is True
    assert harness.routes(c).split(",")[2] == f"{lower}-{upper}@shard_4"
    assert c.one("SELECT phase FROM id_gen.moves") == "done"
    assert coordinator_relations() == before
    # The rows are on the target alone, in a partition of its table; nothing of the move is left.
    o = inside[0]
    assert (shards[3].one(f"SELECT count(*) FROM orders WHERE owner_id = {o}"),
            shards[4].one(f"SELECT count(*) FROM orders WHERE owner_id = {o}")) == (0, committed[o])
    part = f"orders_g{lower}_{upper}"
    assert shards[4].one(f"SELECT count(*) FROM pg_inherits WHERE inhrelid = 'public.{part}'::regclass") == 1
    assert shards[3].one(f"SELECT to_regclass('public.{part}') IS NULL") is True
    assert (hidden_copies(shards[3]), hidden_copies(shards[4])) == (0, 0)
    for s in shards.values():
        assert s.one("SELECT count(*) FROM pg_subscription") + s.one("SELECT count(*) FROM pg_replication_slots") == 0
    part4 = c.one("SELECT 'public.' || id_gen.slot_partition_name('orders_shards', slot) FROM id_gen.shard_slots "
                  "WHERE shard = 'shard_4'")
    row_id = c.one(f"SELECT max(id) FROM orders WHERE owner_id = {o}")
    for sql in (f"SELECT * FROM orders WHERE id = {row_id}",
                f"SELECT * FROM orders WHERE id BETWEEN id_gen.owner_first_id({o}) AND id_gen.owner_last_id({o})"):
        scans = foreign_scans(explain(sql))
        assert len(scans) == 1 and part4 in scans[0], (sql, scans)
    report(f"per_shard move under load: {sum(committed.values())} rows written through the coordinator, "
           f"{reads} whole-table reads, none saw a row twice; fence "
           f"{c.one('SELECT fence_ms FROM id_gen.moves')} ms")


def test_d_a_coordinator_killed_after_the_fence_re_laid_the_shards():
    """The coordinator dies in a move's fence after the target showed its copies and the
    source detached its partitions, before the flip committed: the move supervisor undoes
    both under the coordinator's locks (routes still say source), and the same CALL then
    moves the genes."""
    c, shards = S["c"], S["shards"]
    lower, upper = 48, 63  # route range 3, on shard_4
    assert harness.routes(c).split(",")[3] == f"{lower}-{upper}@shard_4"
    owner = c.one(f"SELECT o FROM generate_series(500000, 5000000) o WHERE id_gen.shard_gene(o::bigint) BETWEEN {lower} AND {upper} LIMIT 1")
    c.execute(*[f"INSERT INTO orders (owner_id, amount) VALUES ({owner}, 7)"] * 5)
    total = c.one("SELECT count(*) FROM orders")
    with harness.slow_flip(c, "catching_up", "cut_over"):
        move = Background(c, f"CALL id_gen.move_genes({lower}, {upper}, 'shard_1')")
        poll_until("the fence detached the source's partitions", lambda: shards[4].one(
            "SELECT count(*) FROM pg_class WHERE relname LIKE 'id_gen_moved_%'"), lambda n: n == 3, 60, interval=0.05)
        assert hidden_copies(shards[1]) == 3 and shards[1].one(
            f"SELECT count(*) FROM pg_inherits WHERE inhrelid = 'public.orders_g{lower}_{upper}'::regclass") == 1, \
            "the target's copies are shown"
        c.kill9()
        move.join()
        c.start()
    poll_until("the move supervisor undid the fence's re-layout", lambda: c.one(
        f"SELECT phase || '/' || source_fenced || '/' || coalesce(recovered_by LIKE 'lifted the fence%', false) FROM id_gen.moves "
        f"WHERE lower_gene = {lower}"), "catching_up/false/true", 60)
    assert harness.routes(c).split(",")[3] == f"{lower}-{upper}@shard_4"
    assert shards[4].one("SELECT count(*) FROM pg_class WHERE relname LIKE 'id_gen_moved_%'") == 0
    assert shards[4].one(f"SELECT count(*) FROM orders WHERE owner_id = {owner} AND amount = 7") == 5, "the source's partition is back"
    assert shards[1].one(f"SELECT count(*) FROM pg_inherits WHERE inhrelid = 'public.orders_g{lower}_{upper}'::regclass") == 0
    assert hidden_copies(shards[1]) == 3, "the target's copies are hidden again"
    assert c.one("SELECT count(*) || '/' || count(DISTINCT id) FROM orders") == f"{total}/{total}"
    assert c.one(f"SELECT count(*) FROM orders WHERE owner_id = {owner} AND amount = 7") == 5
    c.execute("SET client_min_messages = warning", f"CALL id_gen.move_genes({lower}, {upper}, 'shard_1')")
    assert harness.routes(c).split(",")[3] == f"{lower}-{upper}@shard_1"
    assert c.one("SELECT count(*) || '/' || count(DISTINCT id) FROM orders") == f"{total}/{total}"
    assert shards[1].one(f"SELECT count(*) FROM orders WHERE owner_id = {owner} AND amount = 7") == 5
    assert (hidden_copies(shards[1]), hidden_copies(shards[4])) == (0, 0)


FAILING_REVERT_FLIP = """
    CREATE FUNCTION public.failing_revert_flip() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF OLD.phase = 'reversible' AND NEW.phase = 'reverting' THEN
        RAISE EXCEPTION 'test: the revert''s flip fails' USING ERRCODE = '55000';
      END IF;
      RETURN NEW;
    END $$;
    CREATE TRIGGER failing_revert_flip BEFORE UPDATE ON id_gen.cluster_operations FOR EACH ROW EXECUTE FUNCTION public.failing_revert_flip();
"""


def kept_partitions(shard):
    return shard.one("SELECT count(*) FROM pg_constraint WHERE conname = 'id_gen_kept_bound'")


def test_d_a_reversible_move_of_per_shard_tables_reverted_and_completed():
    """A reversible move of per_shard tables under load (writers through the coordinator and
    a reader of the whole table), then a revert whose fence fails after it re-laid both shards
    (the source's kept partitions attached, the target's detached): each attempt is undone
    under the coordinator's locks; then the revert under load; then a reversible move
    completed. No read sees a row twice, every committed row is there once, on the shard that
    owns its gene, and nothing of the moves is left."""
    c, shards = S["c"], S["shards"]
    lower, upper = 16, 31  # route range 1, on shard_2 (test_c merged it back)
    assert harness.routes(c).split(",")[1] == f"{lower}-{upper}@shard_2"
    inside = c.column(f"SELECT o FROM generate_series(600000, 6000000) o "
                      f"WHERE id_gen.shard_gene(o::bigint) BETWEEN {lower} AND {upper} LIMIT 6")
    outside = owners_on("shard_2", 3, first=600000) + owners_on("shard_3", 3, first=600000)
    assert len(inside) == 6
    o = inside[0]
    part = f"public.orders_g{lower}_{upper}"
    load, reader = Writers(inside + outside), DoubleReader()
    poll_until("writers committed rows", load.total, lambda n: n >= 50, 60)
    c.execute("SET client_min_messages = warning", f"CALL id_gen.move_genes({lower}, {upper}, 'shard_1', reversible => true)")
    move = c.one("SELECT max(move_id) FROM id_gen.moves")
    assert c.one(f"SELECT phase FROM id_gen.moves WHERE move_id = {move}") == "reversible"
    assert harness.routes(c).split(",")[1] == f"{lower}-{upper}@shard_1"
    # The source keeps its partitions out of its tables, under their names, in step with the target.
    assert kept_partitions(shards[2]) == 3
    assert shards[2].one(f"SELECT count(*) FROM pg_inherits WHERE inhrelid = '{part}'::regclass") == 0
    n = load.total()
    poll_until("writers committed rows after the move", load.total, lambda m: m >= n + 50, 60)

    # The source follows the target: a row written after the cut-over reaches its kept
    # partition, and nothing of what the move copied came back to it.
    fresh = c.one(f"SELECT o FROM generate_series(7000000, 9000000) o "
                  f"WHERE id_gen.shard_gene(o::bigint) BETWEEN {lower} AND {upper} LIMIT 1")
    c.execute(f"INSERT INTO orders (owner_id, amount) VALUES ({fresh}, 616161)")
    poll_until("a row written on the target after the cut-over reaches the source's kept partition",
               lambda: shards[2].one(f"SELECT count(*) FROM {part} WHERE amount = 616161"), 1, 60)
    assert harness.way_back_apply_errors(shards[2], move) == 0

    # A revert whose flip fails after the fence re-laid both shards: every attempt is undone.
    c.script(FAILING_REVERT_FLIP)
    err = c.error(f"CALL id_gen.revert_move({move})")
    c.execute("DROP TRIGGER failing_revert_flip ON id_gen.cluster_operations", "DROP FUNCTION public.failing_revert_flip()")
    assert err is not None and "the revert's flip fails" in str(err), err
    assert c.one(f"SELECT phase FROM id_gen.moves WHERE move_id = {move}") == "reversible"
    assert harness.routes(c).split(",")[1] == f"{lower}-{upper}@shard_1"
    assert shards[2].one(f"SELECT count(*) FROM pg_inherits WHERE inhrelid = '{part}'::regclass") == 0, "kept, hidden again"
    assert shards[1].one(f"SELECT count(*) FROM pg_inherits WHERE inhrelid = '{part}'::regclass") == 1, "attached again"
    assert shards[1].one("SELECT count(*) FROM pg_class WHERE relname LIKE 'id_gen_moved_%'") == 0
    n = load.total()
    poll_until("writers committed rows after the failed revert", load.total, lambda m: m >= n + 50, 60)

    # The revert, under load.
    c.execute("SET client_min_messages = warning", f"CALL id_gen.revert_move({move})")
    assert c.one(f"SELECT phase FROM id_gen.moves WHERE move_id = {move}") == "reverted"
    assert harness.routes(c).split(",")[1] == f"{lower}-{upper}@shard_2"
    n = load.total()
    poll_until("writers committed rows after the revert", load.total, lambda m: m >= n + 50, 60)
    committed = load.finish()
    reads, doubles = reader.finish()
    assert doubles == [], f"{len(doubles)} of {reads} whole-table reads saw rows twice: {doubles[:5]}"
    assert reads >= 3, f"only {reads} whole-table reads ran"
    got = dict(c.execute(
        f"SELECT owner_id, count(*) FROM orders WHERE owner_id IN ({','.join(map(str, committed))}) GROUP BY 1"))
    assert got == {k: v for k, v in committed.items() if v}, (got, committed)
    assert c.one("SELECT count(*) = count(DISTINCT id) FROM orders") is True
    assert (shards[1].one(f"SELECT count(*) FROM orders WHERE owner_id = {o}"),
            shards[2].one(f"SELECT count(*) FROM orders WHERE owner_id = {o}")) == (0, committed[o])
    assert shards[2].one(f"SELECT count(*) FROM pg_inherits WHERE inhrelid = '{part}'::regclass") == 1
    assert shards[1].one(f"SELECT to_regclass('{part}') IS NULL") is True
    assert (kept_partitions(shards[1]), kept_partitions(shards[2])) == (0, 0)
    for s in shards.values():
        assert s.one("SELECT count(*) FROM pg_class WHERE relname LIKE 'id_gen_moved_%'") == 0
        assert s.one("SELECT count(*) FROM pg_subscription") + s.one("SELECT count(*) FROM pg_replication_slots") == 0
        assert s.one("SELECT count(*) FROM pg_trigger WHERE tgname = 'id_gen_move_fence' AND tgenabled <> 'D'") == 0
    report(f"per_shard reversible move, a failed revert and the revert under load: {sum(committed.values())} rows "
           f"written through the coordinator, {reads} whole-table reads, none saw a row twice; revert fence "
           f"{c.one(f'SELECT fence_ms FROM id_gen.moves WHERE move_id = {move}')} ms")

    # A reversible move completed: the genes stay on the target, the source's kept partitions go.
    c.execute("SET client_min_messages = warning", f"CALL id_gen.move_genes({lower}, {upper}, 'shard_1', reversible => true)")
    move = c.one("SELECT max(move_id) FROM id_gen.moves")
    c.execute("SET client_min_messages = warning", f"CALL id_gen.complete_move({move})")
    assert c.one(f"SELECT phase FROM id_gen.moves WHERE move_id = {move}") == "done"
    assert harness.routes(c).split(",")[1] == f"{lower}-{upper}@shard_1"
    assert (shards[1].one(f"SELECT count(*) FROM orders WHERE owner_id = {o}"),
            shards[2].one(f"SELECT count(*) FROM orders WHERE owner_id = {o}")) == (committed[o], 0)
    assert shards[2].one(f"SELECT to_regclass('{part}') IS NULL") is True
    assert c.one("SELECT count(*) = count(DISTINCT id) FROM orders") is True
    for s in shards.values():
        assert kept_partitions(s) == 0
        assert s.one("SELECT count(*) FROM pg_subscription") + s.one("SELECT count(*) FROM pg_replication_slots") == 0


def test_d_renames_are_refused():
    """A per_shard table cannot be renamed (0A000): its partitions and the shards' tables are
    found by its name (the partitioned table behind a view, and a table without one)."""
    c = S["c"]
    for statement in ("ALTER TABLE orders_shards RENAME TO orders_x", "ALTER TABLE events RENAME TO events_x",
                      "ALTER VIEW orders RENAME TO orders_y"):
        assert c.sqlstate(statement) == "0A000", statement
    assert c.one("SELECT count(*) FROM pg_class WHERE relname IN ('orders', 'orders_shards', 'events')") == 3


def test_e_dump_and_restore_of_the_coordinator():
    c = S["c"]
    dump = os.path.join(S["work"], "coordinator.dump")
    common = ["-h", c.dir, "-p", str(c.port), "-U", "postgres"]
    env = {k: v for k, v in os.environ.items() if k != "RUST_BACKTRACE"}
    subprocess.run([f"{harness.PG_BIN}/pg_dump", *common, "-Fc", "-f", dump, "postgres"], check=True, env=env, timeout=300)
    c.execute("CREATE DATABASE restored")
    r = subprocess.run([f"{harness.PG_BIN}/pg_restore", *common, "-d", "restored", dump], env=env, timeout=300,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert r.returncode == 0, r.stdout
    sums = "SELECT count(*) || '/' || sum(amount) FROM orders"
    assert c.one(sums, dbname="restored") == c.one(sums)
    assert c.one("SELECT count(*) FROM id_gen.shard_slots", dbname="restored") == SHARDS
    o = owners_on("shard_3", 1)[0]
    scans = foreign_scans(explain(
        f"SELECT * FROM orders WHERE id BETWEEN id_gen.owner_first_id({o}) AND id_gen.owner_last_id({o})", dbname="restored"))
    assert len(scans) == 1 and "slot" in scans[0], scans
    c.execute(f"INSERT INTO orders (owner_id, amount) VALUES ({o}, 5)", dbname="restored")
    assert S["shards"][3].one(f"SELECT count(*) FROM orders WHERE owner_id = {o} AND amount = 5") == 1


def test_f_a_distribution_too_big_for_a_lock_table_is_refused_first():
    """distribute_table counts the locks its one transaction takes on the coordinator and on
    each shard (a relation created holds its lock until COMMIT, and so do its indexes and TOAST
    table) against that server's lock table before it changes anything: 53400, with the
    max_locks_per_transaction that would do, instead of "out of shared memory" half way."""
    c, shards = S["c"], S["shards"]
    c.execute("CREATE TABLE wide (id bigint PRIMARY KEY, a int, b int, c int, d int, note text, "
              "UNIQUE (a, id), UNIQUE (b, id), UNIQUE (c, id), UNIQUE (d, id))",
              "INSERT INTO wide SELECT g, g, g, g, g, 'x' FROM generate_series(1, 10) g")
    # per_shard: four foreign tables here, but (1,024 ranges + tombstone + negatives) x (the
    # table and 5 indexes with their row type and constraints, TOAST table and index) on each
    # shard: about 14,000 locks.
    err = c.error("SELECT id_gen.distribute_table('wide', 'id', layout => 'per_shard')")
    assert err is not None and err.sqlstate == "53400", err
    assert "on shard shard_1" in err.diag.message_primary, err.diag.message_primary
    needed = int(err.diag.message_primary.split(" takes about ")[1].split()[0])
    assert needed > 8 * (RANGES // SHARDS), err.diag.message_primary
    room = shards[1].one("SELECT id_gen.lock_table_room()")
    at_least = int(err.diag.message_hint.split("max_locks_per_transaction to at least ")[1].split()[0])
    assert at_least * room["processes"] >= needed > room["capacity"], (err.diag.message_hint, room)
    # Nothing changed, here or on a shard.
    assert c.one("SELECT count(*) || '/' || (SELECT relkind::text FROM pg_class WHERE oid = 'wide'::regclass) FROM wide") == "10/r"
    assert c.one("SELECT count(*) FROM id_gen.distributed_tables WHERE table_name = 'wide'") == 0
    for s in shards.values():
        assert s.one("SELECT to_regclass('public.wide') IS NULL") is True

    # per_range: two relations and their row types per route range here (16,384 and more) do
    # not fit a coordinator with max_locks_per_transaction = 32.
    c.execute("ALTER SYSTEM SET max_locks_per_transaction = 32")
    c.restart()
    try:
        c.execute("CREATE TABLE flat (id bigint PRIMARY KEY)", "INSERT INTO flat VALUES (1), (2)")
        err = c.error("SELECT id_gen.distribute_table('flat', 'id')")
        assert err is not None and err.sqlstate == "53400", err
        assert "on the coordinator" in err.diag.message_primary and "per_shard" in err.diag.message_hint, err
        room = c.one("SELECT id_gen.lock_table_room()")
        at_least = int(err.diag.message_hint.split("max_locks_per_transaction to at least ")[1].split()[0])
        assert room["per_transaction"] == 32 and at_least * room["processes"] >= 4 * RANGES > room["capacity"], (err.diag.message_hint, room)
        assert c.one("SELECT count(*) || '/' || (SELECT relkind::text FROM pg_class WHERE oid = 'flat'::regclass) FROM flat") == "2/r"
        for s in shards.values():
            assert s.one("SELECT to_regclass('public.flat') IS NULL") is True
    finally:
        c.execute("ALTER SYSTEM RESET max_locks_per_transaction")
        c.restart()
    report(f"distribute_table refused before any change: {needed} locks on a shard, 4 x {RANGES} on a coordinator with 32 per transaction")


def test_g_a_table_converted_to_the_layout_by_ownership_under_load():
    """CALL id_gen.convert_to_by_ownership('events') with 1,024 partitions of it on each shard,
    on default settings, while a client inserts through the coordinator: no insert fails,
    every row is there once, each shard then holds the table as two relations (the view and
    the table of rows), and a lookup by owner still reaches one shard."""
    c, shards = S["c"], S["shards"]
    owners = [o for i in range(1, SHARDS + 1) for o in owners_on(f"shard_{i}", 25)]
    # (events has no sequence: ids are given, each in its owner's gene, unique by k.)
    c.execute(f"INSERT INTO events (id, owner_id, kind) SELECT id_gen.owner_first_id(o) + k, o, 1 "
              f"FROM unnest(ARRAY{owners}::bigint[]) WITH ORDINALITY AS x(o, k)")
    before = set(c.column("SELECT id FROM events"))
    written, errors, stop = [], [], threading.Event()

    def write():
        try:
            with psycopg.connect(c.dsn(), autocommit=True) as conn:
                k = 0
                while not stop.is_set():
                    k += 1
                    o = owners[k % len(owners)]
                    written.append(conn.execute("INSERT INTO events (id, owner_id, kind) "
                                                "VALUES (id_gen.owner_first_id(%s) + %s, %s, 2) RETURNING id",
                                                (o, 1000 + k, o)).fetchone()[0])
        except Exception as e:  # noqa: BLE001 - asserted below
            errors.append(e)

    # What a shard's table has that the conversion would not carry stops it before the
    # table is marked: nothing to undo, moves not held up.
    shards[3].execute("CREATE VIEW events_kinds AS SELECT DISTINCT kind FROM events")
    err = c.error("CALL id_gen.convert_to_by_ownership('events')")
    assert err is not None and err.sqlstate == "2BP01" and "events_kinds" in str(err), err
    assert c.one("SELECT converting_since IS NULL AND shard_layout = 'partitioned' FROM id_gen.distributed_tables "
                 "WHERE table_name = 'events'") is True
    assert shards[1].one("SELECT to_regclass('events_rows') IS NULL") is True
    shards[3].execute("DROP VIEW events_kinds")
    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        poll_until("the writer commits rows before the conversion", lambda: (len(written), [str(e) for e in errors]),
                   lambda v: v[1] != [] or v[0] >= 20, 60)
        t0 = time.monotonic()
        notices = c.notices("CALL id_gen.convert_to_by_ownership('events')")
        took = time.monotonic() - t0
        n = len(written)
        poll_until("the writer commits rows after the conversion", lambda: (len(written) - n, [str(e) for e in errors]),
                   lambda v: v[1] != [] or v[0] >= 20, 60)
    finally:
        stop.set()
        writer.join(60)
    assert errors == [], errors
    ids = c.column("SELECT id FROM events")
    assert len(ids) == len(set(ids)), "a row seen twice"
    assert set(ids) == before | set(written), "every committed row, nothing else"
    assert c.one("SELECT shard_layout FROM id_gen.distributed_tables WHERE table_name = 'events'") == "by_ownership"
    for i, s in shards.items():
        assert s.one("SELECT string_agg(relname || ':' || relkind::text, ',' ORDER BY relname) FROM pg_class "
                     "WHERE relname LIKE 'events%' AND relkind IN ('r', 'p', 'v')") == "events:v,events_rows:r", f"shard_{i}"
        assert s.one("SELECT current_setting('max_locks_per_transaction')::int") == 64
    o = owners[0]
    plan = explain(f"SELECT * FROM events WHERE owner_id = {o} AND id BETWEEN id_gen.owner_first_id({o}) "
                   f"AND id_gen.owner_last_id({o})")
    assert len(foreign_scans(plan)) == 1, plan
    swaps = [m for m in notices if ": public.events converted (" in m]
    assert len(swaps) == SHARDS, notices
    report(f"convert_to_by_ownership of a table with {RANGES // SHARDS} partitions on each of {SHARDS} shards "
           f"(default settings) under load: {took:.1f} s; {len(written)} rows inserted meanwhile, none failed; "
           + "; ".join(m.split(": ", 1)[1] for m in swaps))
