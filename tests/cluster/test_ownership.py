"""The layout by ownership (distribute_table(..., layout => 'by_ownership'), docs/design.md
§11.8): per_shard on the coordinator; on each shard one table of rows (<stem>_rows) behind a
view of the table's name that keeps the rows whose genes the shard owns, what it owns
recorded as data. A coordinator and two shards on PostgreSQL's default max_connections and
max_locks_per_transaction, 1,024 route ranges alternating between the shards.

(a) each shard holds each table as two relations (the table of rows and the view), whatever
    the number of ranges, and records its 512 ranges; a new backend's first lookup through
    the view opens a handful of relations.
(b) inserts that name only the owner land on the owner's shard with owner-affine ids; a
    lookup by id reaches one shard; UPDATE and DELETE through the coordinator work both when
    postgres_fdw sends them whole and when it updates by ctid (a join with a local table);
    COPY through the coordinator; a cross-shard aggregate sees every row once.
(c) on a shard, a read by id and a write of a gene it does not own get IG001 through the
    view, a claim of such a gene too; a claim of a role granted the view only locks the
    table of rows as its writes would; a row of such a gene in the table of rows (as a
    move's apply worker would write it) is seen neither through the view nor through the
    coordinator, and a role that may delete from the table of rows cannot delete it (IG001).
(d) route changes: genes without rows change shards (both shards record it, lookups follow);
    a change that would take genes with rows away is refused (55000) and changes nothing.
    A split and a merge of a range with rows: every row stays where it was, visible once.
(e) ALTER TABLE of a shard's table of rows: the view follows (a column added, a column
    dropped with CASCADE), keeping the grants given on the view; renaming the table of rows
    or its id column is refused (0A000).
(f) a fence of genes (what a move's fence records on its source): writes, deletes, lookups
    by id and claims of them get IG002 on the shard, other genes and whole-table reads go on;
    lifted, everything works again.
(g) a move under load through the coordinator (two writers by owner, a prepared lookup of a
    row of the moved genes that must find it once at every execution): no client fails,
    every committed row is found once afterwards, on the target; the source holds no row of
    the genes any more (deleted after the cut-over), neither shard keeps a fence, and
    nothing of the move is left (publication, slot, subscription). On the source, a read by
    id of a moved row gets IG001; on the target it finds the row.
(h) a move stopped before its fence (its probe marker refused on the target) and aborted:
    its publication leaves TRUNCATE out; the target's copies are deleted, the source owns and
    shows every row as before.
(i) the coordinator killed in a move's fence after the shards handed the genes over, before
    its flip committed: the move supervisor gives them back under the coordinator's locks
    (the source owns and shows its rows, unfenced; the target owns none), every row is seen
    once through the coordinator, and the same CALL then moves the genes.
(j) a reversible move under load: the target's way back publishes its table of rows with a
    row filter and no TRUNCATE; an UPDATE and a DELETE through the coordinator and the
    clients' inserts stream back to the source's rows (kept, neither shown nor owned); the
    revert under load gives the genes back, every committed row is found once, on the source,
    with the update and without the deleted row, the target's copies are deleted, no fence
    or replication object is left. The same genes moved again with keep_source and
    completed: the source's rows (the row written after the flip included) are in a table
    of their own, and deleted from its table of rows; then back with keep_source alone.
(k) the coordinator killed in a revert's fence after the shards gave the genes back, before
    its flip committed: the move supervisor undoes it (the source gives them up, the target
    owns them again, unfenced), the move rests in phase reversible, every row is seen once,
    and the same revert then runs whole.
(l) a revert whose fence fails five times (its marker refused on the source): each attempt
    is undone, the target owns the genes unfenced and takes writes through the coordinator,
    the source owns none; then the revert runs whole.
(m) keep_source's copy on a source (shard_keep_unowned_rows) with batches of three rows of a
    table whose ids repeat (primary key (id, line), two lines each): no batch ends inside an
    id, every line of every id of the genes is copied, none of other genes, into a table
    owned by the table's owner once complete (id_gen.shard_kept_copies says so, and a call
    after that copies nothing, and the same move number for other genes is refused, 42P07);
    a table of a copy's name that id_gen did not make is refused
    (42P07) whoever made it (the table's owner, the caller, another role), with the COMMENT
    the move would give it; a copy dropped before it was complete is made again, whole; a
    table of rows owned by a role that is not a superuser is refused (42501), nothing made; a
    column added while a copy is under way stops it (55000).
(n) a revert's fence left up (the target fences the genes, the source owns them) while the
    source hangs (SIGSTOP): a lift that does not know how far the fence came fails and
    keeps the target's fence; a new revert stops at once (55006), before any fence; a lift
    told that the source cannot own them takes the target's fence away without the source.
    Once the source answers, the next revert lifts the earlier fence first, then runs whole.
"""
import psycopg
import pytest

import harness
from harness import LOGICAL, coordinator_with_shards

RANGES = 1024
DEFAULTS = ["max_connections = 100"]  # PostgreSQL's default (the harness uses 40)
S = {}


def shard_of_range(k):
    return f"shard_{k % 2 + 1}"


@pytest.fixture(scope="module", autouse=True)
def servers(cluster):
    routes = tuple((k * (65536 // RANGES) + 65536 // RANGES - 1, shard_of_range(k)) for k in range(RANGES))
    c, shards = coordinator_with_shards(
        cluster, shards=2, coordinator_conf=DEFAULTS, shard_conf=LOGICAL + DEFAULTS, routes=routes,
        layout="by_ownership",
        tables=["CREATE TABLE events (id bigint PRIMARY KEY, owner_id bigint NOT NULL, kind integer);"],
        distribute=["'events', 'id', 'owner_id', layout => 'by_ownership'"])
    S.update(c=c, shards=shards)
    yield


def owners_on(shard, n, first=1):
    return harness.owners(S["c"], f"id_gen.route_owner(o) = '{shard}'", n, first, span=100000)


def foreign_scans(sql):
    plan = S["c"].column(f"EXPLAIN (VERBOSE, COSTS OFF) {sql}")
    return [line.strip() for line in plan if "Foreign Scan" in line or "Foreign Update" in line
            or "Foreign Delete" in line]


def test_a_two_relations_per_table_on_a_shard():
    c = S["c"]
    assert c.one("SELECT current_setting('max_locks_per_transaction')::int") == 64
    assert c.one("SELECT string_agg(DISTINCT layout || '/' || shard_layout, ',') FROM id_gen.distributed_tables") \
        == "per_shard/by_ownership"
    assert c.one("SELECT bool_and(in_step) FROM id_gen.distribution") is True
    for i, s in S["shards"].items():
        rels = s.execute("SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                         "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'f') ORDER BY 1")
        assert rels == [("events", "v"), ("events_rows", "r"), ("orders", "v"), ("orders_rows", "r")], rels
        recorded = s.execute("SELECT table_name, rows_table, cardinality(gene_ranges) FROM id_gen.shard_tables ORDER BY 1")
        assert recorded == [("events", "events_rows", RANGES // 2), ("orders", "orders_rows", RANGES // 2)], recorded
        # A new backend's first lookup through the view opens a handful of relations.
        with s.connect() as conn:
            conn.execute(f"SELECT * FROM orders WHERE id = id_gen.gene_first_id({(i - 1) * (65536 // RANGES)})").fetchall()
            opened = conn.execute("SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() "
                                  "AND locktype = 'relation'").fetchone()[0]
        assert opened < 12, f"relations locked on shard_{i} by a first lookup: {opened}"


def test_b_inserts_lookups_updates_through_the_coordinator():
    c = S["c"]
    for i in (1, 2):
        for o in owners_on(f"shard_{i}", 10):
            c.execute(f"INSERT INTO orders (owner_id, amount) VALUES ({o}, 1)",
                      f"INSERT INTO events (id, owner_id, kind) VALUES (id_gen.owner_first_id({o}) + 7, {o}, 1)")
    assert c.one("SELECT count(*) FROM orders") == 20
    assert c.one("SELECT bool_and(id_gen.shard_of(id) = id_gen.shard_gene(owner_id)) FROM orders") is True
    for i, s in S["shards"].items():
        assert s.one("SELECT count(*) FROM orders") == 10, f"rows on shard_{i}"
        assert s.one("SELECT count(*) FROM orders_rows") == 10
        assert s.one("SELECT bool_and(id_gen.shard_owns('orders_rows', id)) FROM orders_rows") is True
    o = owners_on("shard_2", 1)[0]
    row_id = c.one(f"SELECT id FROM orders WHERE owner_id = {o}")
    part = c.one("SELECT 'public.' || id_gen.slot_partition_name('orders_shards', slot) FROM id_gen.shard_slots "
                 "WHERE shard = 'shard_2'")
    by_id = foreign_scans(f"SELECT * FROM orders WHERE id = {row_id}")
    assert len(by_id) == 1 and part in by_id[0], by_id
    # Sent whole to the shard, and by ctid (a join with a local table).
    c.execute(f"UPDATE orders SET amount = amount + 10 WHERE id = {row_id}")
    c.execute("CREATE TABLE wanted (i bigint)", f"INSERT INTO wanted VALUES ({row_id})")
    plan = c.column(f"EXPLAIN (VERBOSE, COSTS OFF) UPDATE orders o SET amount = amount + 100 FROM wanted w WHERE o.id = w.i")
    assert any("WHERE ctid = $1" in line for line in plan), plan
    c.execute("UPDATE orders o SET amount = amount + 100 FROM wanted w WHERE o.id = w.i")
    assert c.one(f"SELECT amount FROM orders WHERE id = {row_id}") == 111
    c.execute("DELETE FROM orders o USING wanted w WHERE o.id = w.i", "DROP TABLE wanted")
    assert c.one(f"SELECT count(*) FROM orders WHERE id = {row_id}") == 0
    assert S["shards"][2].one(f"SELECT count(*) FROM orders_rows WHERE id = {row_id}") == 0
    # COPY through the coordinator.
    with c.connect() as conn:
        with conn.cursor().copy("COPY orders (id, owner_id, amount) FROM STDIN") as cp:
            cp.write_row((c.one(f"SELECT id_gen.owner_first_id({o}) + 3"), o, 5))
    assert S["shards"][2].one(f"SELECT amount FROM orders WHERE owner_id = {o} AND amount = 5") == 5
    assert c.one("SELECT count(*), sum(amount) FROM orders") == 20
    assert c.execute("SELECT count(*), sum(amount) FROM orders") == [(20, 24)]
    assert len(foreign_scans("SELECT count(*) FROM orders")) == 2


def test_c_a_shard_answers_by_what_it_owns():
    s1 = S["shards"][1]
    o2 = owners_on("shard_2", 1)[0]
    gene2 = s1.one(f"SELECT id_gen.shard_gene({o2}::bigint)")
    foreign_id = s1.one(f"SELECT id_gen.owner_first_id({o2}) + 11")
    # A read by id and a write of a gene shard_1 does not own: IG001, through the view.
    assert s1.sqlstate(f"SELECT * FROM orders WHERE id = {foreign_id}") == "IG001"
    assert s1.sqlstate(f"SELECT * FROM orders WHERE id = ANY (ARRAY[{foreign_id}, 1])") == "IG001"
    assert s1.sqlstate(f"INSERT INTO orders (id, owner_id) VALUES ({foreign_id}, {o2})") == "IG001"
    version = S["c"].one("SELECT id_gen.route_version()")
    harness.poll_until("shard_1 told the route version", lambda: s1.one("SELECT version FROM id_gen.shard_route_state"),
                       version, timeout=30)
    assert s1.sqlstate(f"SELECT id_gen.route_claim({gene2}, {version})") == "IG001"
    o1 = owners_on("shard_1", 1)[0]
    gene1 = s1.one(f"SELECT id_gen.shard_gene({o1}::bigint)")
    assert s1.sqlstate(f"SELECT id_gen.route_claim({gene1}, {version})") is None
    # A role granted the view only: its claim locks the table of rows as its writes would.
    s1.execute("CREATE ROLE app LOGIN", "GRANT SELECT, INSERT, UPDATE, DELETE ON orders TO app")
    with s1.connect(user="app") as conn:
        conn.execute("BEGIN")
        conn.execute(f"SELECT id_gen.route_claim({gene1}, {version})")
        held = conn.execute("SELECT mode FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'relation' "
                            "AND relation = 'orders_rows'::regclass").fetchall()
        conn.execute("ROLLBACK")
    assert ("RowExclusiveLock",) in held, held
    # A row of that gene in the table of rows, as a move's apply worker writes it: hidden.
    s1.execute("SET session_replication_role = replica",
               f"INSERT INTO orders_rows (id, owner_id, amount) VALUES ({foreign_id}, {o2}, 1000)")
    try:
        assert s1.one("SELECT count(*) FROM orders") == 10
        assert s1.one(f"SELECT count(*) FROM orders WHERE owner_id = {o2}") == 0
        assert S["c"].execute("SELECT count(*), sum(amount) FROM orders") == [(20, 24)]
        # A role that may delete from the table of rows cannot delete it (a move's copy):
        # IG001; a superuser can (id_gen's clean-ups, a DBA).
        s1.execute("GRANT SELECT, DELETE ON orders_rows TO app")
        with s1.connect(user="app") as conn:
            conn.execute("SET id_gen.routing_guard = off")
            try:
                conn.execute(f"DELETE FROM orders_rows WHERE owner_id = {o2}")
                raise AssertionError("a role deleted a row of a gene the shard does not own")
            except psycopg.Error as e:
                assert e.sqlstate == "IG001", e
    finally:
        # (By id, a gene not owned: the guard is switched off, as by a DBA cleaning up.)
        s1.execute("SET id_gen.routing_guard = off", f"DELETE FROM orders_rows WHERE id = {foreign_id}")
    assert s1.one(f"SELECT count(*) FROM orders_rows WHERE owner_id = {o2}") == 0


def route_of(gene):
    return S["c"].one(f"SELECT shard FROM id_gen.route_ranges WHERE {gene} BETWEEN lower_gene AND upper_gene")


def test_d_route_changes_splits_merges_and_moves():
    c, s1, s2 = S["c"], S["shards"][1], S["shards"][2]
    width = 65536 // RANGES
    # An empty range of shard_1 (its rows' genes are elsewhere) goes to shard_2.
    used = set(c.column("SELECT DISTINCT id_gen.shard_of(id) FROM orders UNION SELECT id_gen.shard_of(id) FROM events"))
    k = next(k for k in range(0, RANGES, 2) if not any(k * width <= g < (k + 1) * width for g in used))
    lo, hi = k * width, k * width + width - 1
    assert route_of(lo) == "shard_1"
    c.execute(f"SELECT id_gen.set_route({hi}, 'shard_2')")
    assert route_of(lo) == "shard_2"
    for s, owns in ((s1, False), (s2, True)):
        assert s.one(f"SELECT id_gen.shard_owns('orders_rows', id_gen.gene_first_id({lo}))") is owns
        assert s.one(f"SELECT bool_or(g @> {lo}) FROM id_gen.shard_tables, unnest(gene_ranges) g "
                     "WHERE table_name = 'events'") is owns
    o_lo = harness.owners(c, f"id_gen.shard_gene(o) BETWEEN {lo} AND {hi}", 1)[0]
    lo_id = c.one(f"SELECT id_gen.owner_first_id({o_lo}) + 1")
    c.execute(f"INSERT INTO events VALUES ({lo_id}, {o_lo}, 2)")
    assert s2.one(f"SELECT kind FROM events WHERE id = {lo_id}") == 2
    # Taking it back now would hide that row on shard_2: refused, nothing changed.
    err = c.error(f"SELECT id_gen.set_route({hi}, 'shard_1')")
    assert err is not None and err.sqlstate == "55000", err
    assert "holds rows" in str(err), err
    assert "Move those rows first" in (err.diag.message_hint or ""), err.diag.message_hint
    assert route_of(lo) == "shard_2"
    assert c.one(f"SELECT kind FROM events WHERE id = {lo_id}") == 2
    assert s2.one(f"SELECT id_gen.shard_owns('events_rows', {lo_id})") is True
    # A split and a merge of a range with rows: the rows stay, each seen once.
    o = owners_on("shard_1", 1)[0]
    g = c.one(f"SELECT id_gen.shard_gene({o}::bigint)")
    start = g - g % width
    before = c.execute("SELECT count(*), sum(amount) FROM orders")
    c.execute(f"CALL id_gen.split_route({start + width // 2 - 1})")
    assert c.one(f"SELECT count(*) FROM id_gen.route_ranges WHERE lower_gene >= {start} AND upper_gene < {start + width}") == 2
    assert c.execute("SELECT count(*), sum(amount) FROM orders") == before
    assert c.one(f"SELECT count(*) FROM orders WHERE owner_id = {o}") == 1
    c.execute(f"CALL id_gen.merge_routes({start + width // 2 - 1})")
    assert c.one(f"SELECT count(*) FROM id_gen.route_ranges WHERE lower_gene >= {start} AND upper_gene < {start + width}") == 1
    assert c.execute("SELECT count(*), sum(amount) FROM orders") == before
    assert c.one("SELECT bool_and(in_step) FROM id_gen.distribution") is True


def test_e_the_view_follows_the_table_of_rows():
    s1 = S["shards"][1]
    s1.execute("CREATE ROLE reader", "GRANT SELECT ON orders TO reader")
    s1.execute("ALTER TABLE orders_rows ADD COLUMN tag text DEFAULT 'new'")
    cols = s1.column("SELECT attname FROM pg_attribute WHERE attrelid = 'orders'::regclass AND attnum > 0 ORDER BY attnum")
    assert cols == ["id", "owner_id", "amount", "note", "tag", "ctid"], cols
    assert s1.one("SELECT has_table_privilege('reader', 'orders', 'SELECT')") is True
    assert s1.one("SELECT count(*) FROM orders WHERE tag = 'new'") == 10
    # Through the coordinator (whose table has no such column), nothing changes.
    assert S["c"].execute("SELECT count(*), sum(amount) FROM orders") == [(20, 24)]
    # A dropped column takes the view with it (CASCADE): made again from the table of rows.
    assert s1.sqlstate("ALTER TABLE orders_rows DROP COLUMN tag") == "2BP01"
    s1.execute("ALTER TABLE orders_rows DROP COLUMN tag CASCADE")
    cols = s1.column("SELECT attname FROM pg_attribute WHERE attrelid = 'orders'::regclass AND attnum > 0 ORDER BY attnum")
    assert cols == ["id", "owner_id", "amount", "note", "ctid"], cols
    assert S["c"].execute("SELECT count(*), sum(amount) FROM orders") == [(20, 24)]
    # The table of rows and its id column are found by name: renames are refused.
    assert s1.sqlstate("ALTER TABLE orders_rows RENAME TO orders_rows2") == "0A000"
    assert s1.sqlstate("ALTER TABLE orders_rows RENAME COLUMN id TO order_id") == "0A000"
    # The view made again is guarded as before.
    assert s1.sqlstate("SELECT * FROM orders WHERE id = id_gen.owner_first_id(%s) + 11"
                       % owners_on("shard_2", 1)[0]) == "IG001"


def test_f_a_fenced_gene_is_refused_with_ig002():
    c, s1 = S["c"], S["shards"][1]
    width = 65536 // RANGES
    o1 = owners_on("shard_1", 1, first=5000)[0]
    g = s1.one(f"SELECT id_gen.shard_gene({o1}::bigint)")
    lo, hi = g - g % width, g - g % width + width - 1
    row_id = s1.one(f"SELECT id_gen.owner_first_id({o1}) + 21")
    s1.execute(f"INSERT INTO orders (id, owner_id, amount) VALUES ({row_id}, {o1}, 3)")
    other_id = s1.one("SELECT min(id) FROM orders")
    version = c.one("SELECT id_gen.route_version()")
    harness.poll_until("shard_1 told the route version", lambda: s1.one("SELECT version FROM id_gen.shard_route_state"),
                       version, timeout=30)
    rows = s1.one("SELECT count(*) FROM orders")
    assert s1.one(f"SELECT id_gen.shard_fence_owned('{{public.orders_rows,public.events_rows}}', {lo}, {hi})") == 2
    try:
        assert s1.one(f"SELECT id_gen.shard_fenced('orders_rows', {row_id})") is True
        assert s1.one(f"SELECT id_gen.shard_owns('orders_rows', {row_id})") is True
        for statement in (f"INSERT INTO orders (id, owner_id) VALUES ({row_id} + 1, {o1})",
                          f"UPDATE orders SET amount = 4 WHERE id = {row_id}",
                          f"DELETE FROM orders WHERE id = {row_id}",
                          f"SELECT * FROM orders WHERE id = {row_id}",
                          f"SELECT id_gen.route_claim({g}, {version})"):
            err = s1.error(statement)
            assert err is not None and err.sqlstate == "IG002", (statement, err)
        # (With the guard off, a delete still meets the trigger.)
        assert s1.sqlstate("SET id_gen.routing_guard = off", f"DELETE FROM orders_rows WHERE id = {row_id}") == "IG002"
        # Other genes, and reads that do not select by id, go on.
        assert s1.one(f"SELECT count(*) FROM orders WHERE id = {other_id}") == 1
        assert s1.one("SELECT count(*) FROM orders") == rows
    finally:
        assert s1.one(f"SELECT id_gen.shard_unfence_owned('{{public.orders_rows,public.events_rows}}', {lo}, {hi})") == 2
    assert fenced(s1) == 0
    s1.execute(f"UPDATE orders SET amount = 4 WHERE id = {row_id}", f"DELETE FROM orders WHERE id = {row_id}")
    assert s1.one(f"SELECT count(*) FROM orders WHERE id = {row_id}") == 0


def fenced(shard):
    """How many of a shard's tables laid out by ownership fence some genes."""
    return shard.one("SELECT count(*) FROM id_gen.shard_tables WHERE fenced_ranges <> '{}'")


def move_leftovers():
    """Publications, slots and subscriptions on both shards (none after a move)."""
    return [s.one("SELECT (SELECT count(*) FROM pg_publication) + (SELECT count(*) FROM pg_replication_slots) "
                  "+ (SELECT count(*) FROM pg_subscription)") for s in S["shards"].values()]


def rows_of_genes(shard, table, lo, hi):
    """Rows of genes lo .. hi in a shard's table of rows, owned or not (the guard off, as for
    a DBA inspecting the shard)."""
    return shard.one("SET id_gen.routing_guard = off",
                     f"SELECT count(*) FROM {table}_rows WHERE id BETWEEN id_gen.gene_first_id({lo}) "
                     f"AND id_gen.gene_last_id({hi})")


def test_g_a_move_under_load():
    c = S["c"]
    width = 65536 // RANGES
    g = c.one("SELECT id_gen.shard_gene(700001::bigint)")
    lo, hi = g - g % width, g - g % width + width - 1
    source = route_of(lo)
    target = "shard_2" if source == "shard_1" else "shard_1"
    src, dst = S["shards"][int(source[-1])], S["shards"][int(target[-1])]
    # Rows of the genes before the move, in both tables.
    movers = harness.owners(c, f"id_gen.shard_gene(o) BETWEEN {lo} AND {hi}", 20, first=900000)
    for k, o in enumerate(movers):
        c.execute(f"INSERT INTO orders (owner_id, amount) SELECT {o}, 2 FROM generate_series(1, 5)",
                  f"INSERT INTO events (id, owner_id, kind) VALUES (id_gen.owner_first_id({o}) + 1000 + {k}, {o}, 7)")
    some_id = c.one(f"SELECT min(id) FROM orders WHERE owner_id = {movers[0]}")
    held = (rows_of_genes(src, "orders", lo, hi), rows_of_genes(src, "events", lo, hi))
    assert held[0] >= 100 and held[1] >= 20, held
    load = harness.CoordinatorLoad(c, some_id)
    try:
        load.goes_on("before the move")
        c.execute(f"CALL id_gen.move_genes({lo}, {hi}, '{target}')")
        load.goes_on("after the move")
    finally:
        load.end()
    assert c.execute("SELECT phase, fence_ms IS NOT NULL FROM id_gen.moves ORDER BY move_id DESC LIMIT 1") == [("done", True)]
    harness.report(f"move of genes {lo} .. {hi} laid out by ownership ({held[0]} + {held[1]} rows) under load: fence "
                   f"{c.one('SELECT fence_ms FROM id_gen.moves ORDER BY move_id DESC LIMIT 1')} ms, "
                   f"{len(load.committed)} rows committed by the clients, none failed")
    assert route_of(lo) == target
    # Every committed row once, and the moved ones on the target only. (Read from the shards'
    # views: a list of ids over several shards' genes is refused through the coordinator,
    # docs/guide/scale-out.md.)
    seen = {}
    for s in S["shards"].values():
        for (i,) in s.execute("SELECT id FROM orders"):
            seen[i] = seen.get(i, 0) + 1
    assert [i for i, _ in load.committed if seen.get(i) != 1] == [], "a committed row lost or seen twice"
    moved_written = sum(1 for i, _ in load.committed if lo <= i >> 47 <= hi)
    assert moved_written > 0, "some writes went to the moved genes"
    assert rows_of_genes(src, "orders", lo, hi) == 0 and rows_of_genes(src, "events", lo, hi) == 0, \
        "the source deleted its rows of the moved genes"
    assert (rows_of_genes(dst, "orders", lo, hi), rows_of_genes(dst, "events", lo, hi)) \
        == (held[0] + moved_written, held[1])
    assert c.one(f"SELECT count(*) FROM orders WHERE id_gen.shard_of(id) BETWEEN {lo} AND {hi}") == held[0] + moved_written
    for s in (src, dst):
        assert fenced(s) == 0
        assert s.one(f"SELECT id_gen.shard_owns('orders_rows', id_gen.gene_first_id({lo}))") is (s is dst)
    assert c.one("SELECT bool_and(in_step) FROM id_gen.distribution") is True
    assert move_leftovers() == [0, 0]
    # Zero-hop: the source refuses (IG001), the target answers.
    assert src.sqlstate(f"SELECT * FROM orders WHERE id = {some_id}") == "IG001"
    assert dst.one(f"SELECT count(*) FROM orders WHERE id = {some_id}") == 1


def test_h_a_move_stopped_before_its_fence_then_aborted():
    c = S["c"]
    width = 65536 // RANGES
    o = owners_on("shard_1", 1, first=950000)[0]
    g = c.one(f"SELECT id_gen.shard_gene({o}::bigint)")
    lo, hi = g - g % width, g - g % width + width - 1
    c.execute(f"INSERT INTO orders (owner_id, amount) SELECT {o}, 5 FROM generate_series(1, 30)")
    s1, s2 = S["shards"][1], S["shards"][2]
    before = c.execute("SELECT count(*), sum(amount) FROM orders")
    with harness.markers_refused(s2, "NEW.marker >= 1000000"):
        err = c.error(f"CALL id_gen.move_genes({lo}, {hi}, 'shard_2')")
    assert err is not None and err.sqlstate == "55000", err
    mid = c.one("SELECT max(move_id) FROM id_gen.moves")
    assert c.one(f"SELECT phase FROM id_gen.moves WHERE move_id = {mid}") == "catching_up"
    assert rows_of_genes(s2, "orders", lo, hi) == 30, "the target holds the copies, not owned"
    assert s2.one(f"SELECT count(*) FROM orders WHERE owner_id = {o}") == 0, "hidden on the target"
    # (A TRUNCATE ignores row filters: a move of tables of rows does not publish it.)
    assert s1.one(f"SELECT pubtruncate FROM pg_publication WHERE pubname = 'id_gen_move_{mid}'") is False
    assert c.execute("SELECT count(*), sum(amount) FROM orders") == before, "each row seen once meanwhile"
    c.execute(f"CALL id_gen.abort_move({mid})")
    assert c.one(f"SELECT phase FROM id_gen.moves WHERE move_id = {mid}") == "aborted"
    assert rows_of_genes(s2, "orders", lo, hi) == 0, "the target's copies were deleted"
    assert rows_of_genes(s1, "orders", lo, hi) == 30 and route_of(lo) == "shard_1"
    assert s1.one(f"SELECT count(*) FROM orders WHERE owner_id = {o}") == 30
    assert c.execute("SELECT count(*), sum(amount) FROM orders") == before
    for s in (s1, s2):
        assert fenced(s) == 0
    assert move_leftovers() == [0, 0]


def owns(shard, gene):
    return shard.one(f"SELECT id_gen.shard_owns('orders_rows', id_gen.gene_first_id({gene}))")


def test_i_a_coordinator_killed_after_the_fence_handed_the_genes_over():
    c, s1, s2 = S["c"], S["shards"][1], S["shards"][2]
    width = 65536 // RANGES
    o = owners_on("shard_1", 1, first=970000)[0]
    g = c.one(f"SELECT id_gen.shard_gene({o}::bigint)")
    lo, hi = g - g % width, g - g % width + width - 1
    c.execute(f"INSERT INTO orders (owner_id, amount) SELECT {o}, 9 FROM generate_series(1, 12)")
    before = c.execute("SELECT count(*), sum(amount) FROM orders")
    with harness.slow_flip(c, "catching_up", "cut_over"):
        move = harness.Background(c, f"CALL id_gen.move_genes({lo}, {hi}, 'shard_2')")
        harness.poll_until("the fence handed the genes over (shard_1 / shard_2 own them)",
                           lambda: (owns(s1, lo), owns(s2, lo)), (False, True), 60, interval=0.05)
        c.kill9()
        move.join()
        c.start()
    harness.poll_until("the move supervisor gave the genes back", lambda: c.one(
        f"SELECT phase || '/' || source_fenced || '/' || coalesce(recovered_by LIKE 'lifted the fence%', false) "
        f"FROM id_gen.moves WHERE lower_gene = {lo}"), "catching_up/false/true", 60)
    assert (owns(s1, lo), owns(s2, lo)) == (True, False) and route_of(lo) == "shard_1"
    for s in (s1, s2):
        assert fenced(s) == 0
    assert s1.one(f"SELECT count(*) FROM orders WHERE owner_id = {o} AND amount = 9") == 12
    assert s2.one(f"SELECT count(*) FROM orders WHERE owner_id = {o}") == 0, "the target's copies are hidden again"
    assert c.execute("SELECT count(*), sum(amount) FROM orders") == before
    c.execute("SET client_min_messages = warning", f"CALL id_gen.move_genes({lo}, {hi}, 'shard_2')")
    assert route_of(lo) == "shard_2" and (owns(s1, lo), owns(s2, lo)) == (False, True)
    assert c.execute("SELECT count(*), sum(amount) FROM orders") == before
    assert s2.one(f"SELECT count(*) FROM orders WHERE owner_id = {o} AND amount = 9") == 12
    assert rows_of_genes(s1, "orders", lo, hi) == 0
    assert move_leftovers() == [0, 0]


def test_j_a_reversible_move_reverted_then_completed_keeping_the_source():
    c = S["c"]
    width = 65536 // RANGES
    taken = c.one("SELECT id_gen.shard_gene(700001::bigint)") // width
    # Genes of a writer of the load (owners 800000..), away from test_g's range.
    o = next(o for o in range(800000, 800050) if c.one(f"SELECT id_gen.shard_gene({o}::bigint)") // width != taken)
    g = c.one(f"SELECT id_gen.shard_gene({o}::bigint)")
    lo, hi = g - g % width, g - g % width + width - 1
    source = route_of(lo)
    target = "shard_2" if source == "shard_1" else "shard_1"
    src, dst = S["shards"][int(source[-1])], S["shards"][int(target[-1])]
    c.execute(f"INSERT INTO orders (owner_id, amount) SELECT {o}, 3 FROM generate_series(1, 40)",
              f"INSERT INTO events (id, owner_id, kind) VALUES (id_gen.owner_first_id({o}) + 5000, {o}, 8)")
    ids = c.column(f"SELECT id FROM orders WHERE owner_id = {o} ORDER BY id")
    some_id, updated, deleted = ids[0], ids[1], ids[2]
    held = rows_of_genes(src, "orders", lo, hi)
    load = harness.CoordinatorLoad(c, some_id)
    try:
        load.goes_on("before the reversible move")
        c.execute(f"CALL id_gen.move_genes({lo}, {hi}, '{target}', reversible => true)")
        mid = c.one("SELECT max(move_id) FROM id_gen.moves")
        assert c.one(f"SELECT phase FROM id_gen.moves WHERE move_id = {mid}") == "reversible"
        assert route_of(lo) == target and (owns(src, lo), owns(dst, lo)) == (False, True)
        # The way back publishes the target's table of rows with a row filter, without TRUNCATE.
        assert dst.execute(f"SELECT pubtruncate, (SELECT count(*) FROM pg_publication_tables t WHERE t.pubname = p.pubname "
                           f"AND t.rowfilter IS NOT NULL) FROM pg_publication p WHERE pubname = 'id_gen_back_{mid}'") \
            == [(False, 3)]
        # Writes through the coordinator reach the target and stream back to the source's
        # rows, which it keeps but does not show or own.
        c.execute(f"UPDATE orders SET amount = 77 WHERE id = {updated}", f"DELETE FROM orders WHERE id = {deleted}")
        load.goes_on("after the reversible move")
        expect = c.one(f"SELECT count(*) FROM orders WHERE id_gen.shard_of(id) BETWEEN {lo} AND {hi}")
        harness.poll_until("the source follows the target (the update and the delete)", lambda: src.execute(
            "SET id_gen.routing_guard = off",
            f"SELECT (SELECT amount FROM orders_rows WHERE id = {updated}), (SELECT count(*) FROM orders_rows WHERE id = {deleted})"),
            [(77, 0)], 60)
        assert src.one(f"SELECT count(*) FROM orders WHERE owner_id = {o}") == 0, "hidden on the source"
        assert src.sqlstate(f"SELECT * FROM orders WHERE id = {some_id}") == "IG001"
        c.execute(f"CALL id_gen.revert_move({mid})")
        load.goes_on("after the revert")
    finally:
        load.end()
    assert c.one(f"SELECT phase FROM id_gen.moves WHERE move_id = {mid}") == "reverted"
    assert route_of(lo) == source and (owns(src, lo), owns(dst, lo)) == (True, False)
    assert rows_of_genes(dst, "orders", lo, hi) == 0 and rows_of_genes(dst, "events", lo, hi) == 0, \
        "the target's copies were deleted"
    seen = {}
    for s in S["shards"].values():
        for (i,) in s.execute("SELECT id FROM orders"):
            seen[i] = seen.get(i, 0) + 1
    assert [i for i, _ in load.committed if seen.get(i) != 1] == [], "a committed row lost or seen twice"
    assert c.one(f"SELECT count(*) FROM orders WHERE id_gen.shard_of(id) BETWEEN {lo} AND {hi}") >= expect
    assert rows_of_genes(src, "orders", lo, hi) >= expect, "the rows written meanwhile are on the source"
    assert src.one(f"SELECT amount FROM orders WHERE id = {updated}") == 77
    assert src.one(f"SELECT count(*) FROM orders WHERE id = {deleted}") == 0
    assert src.one(f"SELECT count(*) FROM events WHERE owner_id = {o}") == 1
    for s in (src, dst):
        assert fenced(s) == 0
    assert move_leftovers() == [0, 0]
    assert c.one("SELECT bool_and(in_step) FROM id_gen.distribution") is True

    # Again, keeping the source: complete_move copies the source's rows of the genes (which
    # followed the target until then) to a table of their own, then deletes them.
    c.execute(f"CALL id_gen.move_genes({lo}, {hi}, '{target}', reversible => true, keep_source => true)")
    mid = c.one("SELECT max(move_id) FROM id_gen.moves")
    late = c.one(f"INSERT INTO orders (owner_id, amount) VALUES ({o}, 5) RETURNING id")
    harness.poll_until("the source has the row written after the flip", lambda: src.one(
        "SET id_gen.routing_guard = off", f"SELECT count(*) FROM orders_rows WHERE id = {late}"), 1, 60)
    on_target = rows_of_genes(dst, "orders", lo, hi)
    c.execute(f"CALL id_gen.complete_move({mid})")
    assert c.one(f"SELECT phase FROM id_gen.moves WHERE move_id = {mid}") == "done"
    assert rows_of_genes(src, "orders", lo, hi) == 0 and rows_of_genes(src, "events", lo, hi) == 0
    kept = src.one(f"SELECT id_gen.moved_partition_name({mid}, 'public.orders_rows')")
    assert src.one(f"SELECT count(*) FROM public.{kept}") == on_target
    assert src.one(f"SELECT count(*) FROM public.{kept} WHERE id = {late}") == 1
    assert "keep_source" in src.one(f"SELECT obj_description('public.{kept}'::regclass)")
    assert dst.one(f"SELECT count(*) FROM orders WHERE owner_id = {o}") == c.one(f"SELECT count(*) FROM orders WHERE owner_id = {o}")
    assert move_leftovers() == [0, 0]
    src.execute(f"DROP TABLE public.{kept}",
                f"DROP TABLE public.{src.one(f'SELECT id_gen.moved_partition_name({mid}, {chr(39)}public.events_rows{chr(39)})')}")

    # And back with keep_source alone: the rows are kept at the cut-over, in batches.
    held = rows_of_genes(dst, "orders", lo, hi)
    c.execute(f"CALL id_gen.move_genes({lo}, {hi}, '{source}', keep_source => true)")
    mid = c.one("SELECT max(move_id) FROM id_gen.moves")
    assert c.one(f"SELECT phase FROM id_gen.moves WHERE move_id = {mid}") == "done" and route_of(lo) == source
    kept = dst.one(f"SELECT id_gen.moved_partition_name({mid}, 'public.orders_rows')")
    assert dst.one(f"SELECT count(*) FROM public.{kept}") == held == rows_of_genes(src, "orders", lo, hi)
    assert rows_of_genes(dst, "orders", lo, hi) == 0
    assert move_leftovers() == [0, 0]


def reversible_move_of_an_owner(first, rows, amount):
    """An owner of shard_1 (the first from `first` on) with `rows` rows of `amount` whose
    genes' route range moves to shard_2 with reversible => true; returns (owner, lower gene,
    upper gene, move id)."""
    c = S["c"]
    width = 65536 // RANGES
    o = owners_on("shard_1", 1, first=first)[0]
    g = c.one(f"SELECT id_gen.shard_gene({o}::bigint)")
    lo, hi = g - g % width, g - g % width + width - 1
    c.execute(f"INSERT INTO orders (owner_id, amount) SELECT {o}, {amount} FROM generate_series(1, {rows})")
    c.execute("SET client_min_messages = warning", f"CALL id_gen.move_genes({lo}, {hi}, 'shard_2', reversible => true)")
    return o, lo, hi, c.one("SELECT max(move_id) FROM id_gen.moves")


def test_k_a_coordinator_killed_in_a_revert_fence_after_the_genes_went_back():
    c, s1, s2 = S["c"], S["shards"][1], S["shards"][2]
    o, lo, hi, mid = reversible_move_of_an_owner(990000, 15, 4)
    c.execute(f"INSERT INTO orders (owner_id, amount) SELECT {o}, 6 FROM generate_series(1, 5)")
    before = c.execute("SELECT count(*), sum(amount) FROM orders")
    with harness.slow_flip(c, "reversible", "reverting"):
        revert = harness.Background(c, f"CALL id_gen.revert_move({mid})")
        harness.poll_until("the revert's fence gave the genes back (shard_1 / shard_2 own them)",
                           lambda: (owns(s1, lo), owns(s2, lo)), (True, False), 60, interval=0.05)
        c.kill9()
        revert.join()
        c.start()
    # The supervisor undoes the fence: shard_1 gives the genes up, shard_2 owns them again,
    # unfenced; the move rests where it was.
    harness.poll_until("the move supervisor lifted the revert's fence", lambda: c.one(
        f"SELECT phase || '/' || source_fenced || '/' || coalesce(recovered_by LIKE 'lifted the fence%', false) "
        f"FROM id_gen.moves WHERE move_id = {mid}"), "reversible/false/true", 60)
    assert (owns(s1, lo), owns(s2, lo)) == (False, True) and route_of(lo) == "shard_2"
    for s in (s1, s2):
        assert fenced(s) == 0
    assert c.execute("SELECT count(*), sum(amount) FROM orders") == before
    assert s2.one(f"SELECT count(*) FROM orders WHERE owner_id = {o}") == 20
    # The same revert then runs whole.
    c.execute(f"CALL id_gen.revert_move({mid})")
    assert c.one(f"SELECT phase FROM id_gen.moves WHERE move_id = {mid}") == "reverted"
    assert route_of(lo) == "shard_1" and (owns(s1, lo), owns(s2, lo)) == (True, False)
    assert s1.execute(f"SELECT count(*), sum(amount) FROM orders WHERE owner_id = {o}") == [(20, 90)]
    assert c.execute("SELECT count(*), sum(amount) FROM orders") == before
    assert rows_of_genes(s2, "orders", lo, hi) == 0
    assert move_leftovers() == [0, 0]


def test_l_a_revert_whose_fence_fails_is_undone():
    c, s1, s2 = S["c"], S["shards"][1], S["shards"][2]
    o, lo, hi, mid = reversible_move_of_an_owner(995000, 10, 2)
    # The revert's fence markers (numbered from 1,000) never reach the source; its probe does.
    with harness.markers_refused(s1, "NEW.marker BETWEEN 1000 AND 999999"):
        err = c.error(f"CALL id_gen.revert_move({mid})")
    assert err is not None and "could not revert" in str(err), err
    assert c.one(f"SELECT phase FROM id_gen.moves WHERE move_id = {mid}") == "reversible"
    assert (owns(s1, lo), owns(s2, lo)) == (False, True) and route_of(lo) == "shard_2"
    for s in (s1, s2):
        assert fenced(s) == 0
    c.execute(f"INSERT INTO orders (owner_id, amount) VALUES ({o}, 3)")
    assert s2.one(f"SELECT count(*) FROM orders WHERE owner_id = {o}") == 11
    c.execute(f"CALL id_gen.revert_move({mid})")
    assert c.one(f"SELECT phase FROM id_gen.moves WHERE move_id = {mid}") == "reverted"
    assert (owns(s1, lo), owns(s2, lo)) == (True, False)
    assert s1.execute(f"SELECT count(*), sum(amount) FROM orders WHERE owner_id = {o}") == [(11, 23)]
    assert rows_of_genes(s2, "orders", lo, hi) == 0
    assert move_leftovers() == [0, 0]


def test_m_keep_source_copies_whole_ids_in_batches_into_a_table_it_made():
    s1 = S["shards"][1]
    # A table of rows whose primary key has more columns than the id (two rows per id), owned
    # by a superuser that is not the caller; not distributed here, so that shard_1 owns none
    # of its rows (what a move's source holds after its cut-over).
    s1.script("""
        DO $$ BEGIN CREATE ROLE keep_dba SUPERUSER; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
        DO $$ BEGIN CREATE ROLE keep_app; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
        CREATE TABLE public.lines_rows (id bigint, line integer, note text, PRIMARY KEY (id, line));
        ALTER TABLE public.lines_rows OWNER TO keep_dba;
        -- ids 0 .. 9 of gene 100, two lines each; two rows of gene 102.
        INSERT INTO public.lines_rows
        SELECT id_gen.gene_first_id(100) + k, l, 'k' || k || 'l' || l FROM generate_series(0, 9) k, generate_series(1, 2) l;
        INSERT INTO public.lines_rows VALUES (id_gen.gene_first_id(102), 1, 'other'), (id_gen.gene_first_id(102) + 1, 1, 'other');
    """)

    def keep(move_id, batch=3):
        return (f"SELECT id_gen.shard_keep_unowned_rows({move_id}, ARRAY['public.lines_rows'], ARRAY['id']::name[], "
                f"100, 101, {batch})")

    def kept_name(move_id):
        return "public." + s1.one(f"SELECT id_gen.moved_partition_name({move_id}, 'public.lines_rows')")

    def squat(move_id, owner):
        """A table of the copy's name made by hand, with the COMMENT the move gives its own."""
        s1.script(f"""
            CREATE TABLE {kept_name(move_id)} (LIKE public.lines_rows INCLUDING INDEXES);
            ALTER TABLE {kept_name(move_id)} OWNER TO {owner};
            INSERT INTO {kept_name(move_id)} VALUES (id_gen.gene_last_id(101), 1, 'squatted');
            DO $$ BEGIN
              EXECUTE format('COMMENT ON TABLE %s IS %L', '{kept_name(move_id)}',
                             replace(obj_description('{kept_name(9001)}'::regclass), 'move 9001', 'move {move_id}'));
            END $$;
        """)

    try:
        # Batches of three rows, rounded up to whole ids: each ends after the second line of
        # an id (two ids, four rows) and the next resumes after it; then the copy is complete.
        copied = []
        for _ in range(10):
            copied.append(s1.one(keep(9001)))
            if copied[-1] == 0:
                break
        assert copied == [4, 4, 4, 4, 4, 0], copied
        kept = kept_name(9001)
        rows = "SELECT id, line, note FROM {} WHERE id BETWEEN id_gen.gene_first_id(100) AND id_gen.gene_last_id(101) ORDER BY 1, 2"
        assert s1.execute(rows.format(kept)) == s1.execute(rows.format("public.lines_rows"))
        assert s1.one(f"SELECT count(*) FROM {kept}") == 20
        assert s1.one(f"SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = '{kept}'::regclass") == "keep_dba"
        assert "keep_source" in s1.one(f"SELECT obj_description('{kept}'::regclass)")
        assert s1.one(f"SELECT complete FROM id_gen.shard_kept_copies WHERE move_id = 9001") is True
        # Complete: called again, nothing is copied, whatever the owner did with it since.
        s1.execute(f"DELETE FROM {kept} WHERE line = 2")
        assert s1.one(keep(9001)) == 0
        # The same move number for other genes (numbers used again): refused, never taken
        # for a complete copy.
        err = s1.error(keep(9001).replace("100, 101,", "200, 201,"))
        assert err is not None and err.sqlstate == "42P07" and "for a move of that number" in str(err), err
        # A table of another move's name that id_gen did not make is refused (42P07), before
        # anything is copied, whoever made it: the table's owner, the caller, another role.
        for move_id, owner in ((9002, "keep_dba"), (9003, "postgres"), (9004, "keep_app")):
            squat(move_id, owner)
            err = s1.error(keep(move_id))
            assert err is not None and err.sqlstate == "42P07" and "is not the copy" in str(err), (owner, err)
            assert s1.one(f"SELECT count(*) FROM {kept_name(move_id)}") == 1, owner
        # A column added while a copy is under way: refused (55000), nothing copied into it.
        assert s1.one(keep(9007, batch=5)) == 6
        s1.execute("ALTER TABLE public.lines_rows ADD COLUMN late text")
        assert s1.sqlstate(keep(9007, batch=5)) == "55000"
        assert s1.one(f"SELECT count(*) FROM {kept_name(9007)}") == 6
        s1.execute("ALTER TABLE public.lines_rows DROP COLUMN late")
        # A copy dropped before it was complete is made again, whole.
        assert s1.one(keep(9005, batch=5)) == 6
        s1.execute(f"DROP TABLE {kept_name(9005)}")
        while s1.one(keep(9005, batch=5)):
            pass
        assert s1.execute(rows.format(kept_name(9005))) == s1.execute(rows.format("public.lines_rows"))
        # A table of rows owned by a role that is not a superuser: refused (42501), nothing made.
        s1.execute("ALTER TABLE public.lines_rows OWNER TO keep_app")
        assert s1.sqlstate(keep(9006)) == "42501"
        assert s1.one(f"SELECT to_regclass('{kept_name(9006)}')") is None
    finally:
        s1.execute("DROP TABLE IF EXISTS public.lines_rows",
                   *[f"DROP TABLE IF EXISTS {kept_name(m)}" for m in range(9001, 9008)],
                   "DELETE FROM id_gen.shard_kept_copies WHERE move_id BETWEEN 9001 AND 9007")


def test_n_a_revert_fence_left_up_while_its_source_hangs():
    c, s1, s2 = S["c"], S["shards"][1], S["shards"][2]
    o, lo, hi, mid = reversible_move_of_an_owner(997000, 10, 2)

    def error_of(conn, sql):
        try:
            conn.execute(sql)
        except psycopg.Error as e:
            return e
        raise AssertionError(f"no error from {sql}")

    of_move = f"FROM id_gen.shard_moves m WHERE m.move_id = {mid}"
    notices = []
    with c.connect() as conn:
        conn.add_notice_handler(lambda d: notices.append(d.message_primary))
        # This session holds the move, twice (a CALL lets go of it once), so that the move
        # supervisor leaves it to the test.
        conn.execute(f"SELECT pg_advisory_lock(id_gen.operation_session_lock_key(), {mid}) FROM generate_series(1, 2)")
        # What a revert's fence leaves when its coordinator dies after the source owned the
        # genes: the target fences them, the source owns them (fenced), a clean-up record.
        conn.execute(f"SELECT id_gen.record_move_cleanups(m, '{{revert_fence}}') {of_move}")
        conn.execute(f"SELECT id_gen.run_move_step(id_gen.reversed(m), 'fence_source_owned', 0, 5000) {of_move}")
        conn.execute(f"SELECT id_gen.run_move_step(id_gen.reversed(m), 'own_incoming', 0, 5000) {of_move}")
        assert (owns(s1, lo), owns(s2, lo)) == (True, True) and fenced(s1) > 0 and fenced(s2) > 0
        s1.freeze()
        try:
            # The source hangs: a lift that does not know how far the fence came keeps the
            # target's fence (both shards would own the genes unfenced otherwise) and fails.
            err = error_of(conn, f"SELECT id_gen.lift_revert_fence_of(m, 2000, true) {of_move}")
            assert err.sqlstate in ("57014", "08006", "08001"), err
            assert fenced(s2) > 0 and owns(s2, lo)
            # A new revert lifts the earlier fence first, and stops when it cannot.
            err = error_of(conn, f"CALL id_gen.revert_move({mid})")
            assert err.sqlstate == "55006" and "earlier revert" in str(err), err
            assert fenced(s2) > 0
            # Told that the source cannot own the genes, the lift takes the target's fence
            # away without the source (its steps on the source fail, and are raised).
            err = error_of(conn, f"SELECT id_gen.lift_revert_fence_of(m, 2000, false) {of_move}")
            assert fenced(s2) == 0 and owns(s2, lo), err
        finally:
            s1.thaw()
        # The source answers again; the next revert lifts the earlier fence (the source gives
        # the genes up), then runs whole.
        conn.execute(f"CALL id_gen.revert_move({mid})")
    assert "lifted the fence of an earlier revert first" in " ".join(notices), notices
    assert c.one(f"SELECT phase FROM id_gen.moves WHERE move_id = {mid}") == "reverted"
    assert route_of(lo) == "shard_1" and (owns(s1, lo), owns(s2, lo)) == (True, False)
    for s in (s1, s2):
        assert fenced(s) == 0
    assert s1.execute(f"SELECT count(*), sum(amount) FROM orders WHERE owner_id = {o}") == [(10, 20)]
    assert rows_of_genes(s2, "orders", lo, hi) == 0
    assert move_leftovers() == [0, 0]
