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
    coordinator.
(d) route changes: genes without rows change shards (both shards record it, lookups follow);
    a change that would take genes with rows away is refused (55000) and changes nothing.
    A split and a merge of a range with rows: every row stays where it was, visible once.
    A move is refused (0A000) before anything is recorded.
(e) ALTER TABLE of a shard's table of rows: the view follows (a column added, a column
    dropped with CASCADE), keeping the grants given on the view; renaming the table of rows
    or its id column is refused (0A000).
"""
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
    assert "not built yet" in (err.diag.message_hint or ""), err.diag.message_hint
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
    # A move: refused before anything is recorded.
    moves = c.one("SELECT count(*) FROM id_gen.shard_moves")
    err = c.error(f"CALL id_gen.move_genes({start}, {start + width - 1}, 'shard_2')")
    assert err is not None and err.sqlstate == "0A000", err
    assert "orders" in (err.diag.message_detail or ""), err.diag.message_detail
    assert c.one("SELECT count(*) FROM id_gen.shard_moves") == moves
    assert route_of(start) == "shard_1"


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
