"""A coordinator that routes by the route table (docs/guide/scale-out.md "Sharded
deployments"): one coordinator and 3 shards over postgres_fdw. The coordinator is also the
shards' segment authority, so that ids computed on a shard by an application that routes by
itself never collide with ids computed on the coordinator. (Ported from
tests/e2e/11_coordinator.sh with the same assertions; the tests run in order and build on
each other's state.)

(a) argument checks: routes to unknown servers 42704, a non-bigint id 42804, a sequence
    without an owner 22023, foreign keys 0A000, non-superusers 42501.
(b) distribute_table moves existing rows to their shards and creates the shards' tables,
    partitioned by the route ranges they own; each coordinator foreign table points at one
    shard partition (a full scan through the coordinator sees every row once).
(c) inserts by owner only (RETURNING gives the id), by id, and by COPY land on the shard
    route_owner names; an id of another gene than its owner's is 23514; UPDATE and DELETE
    through the table work.
(d) point lookups prune to one Foreign Scan, for literals and generic prepared plans;
    lookups by owner with owner_first_id/owner_last_id prune too.
(e) a row outside a shard's genes is refused on the shard (IG001, by its tombstone).
(f) set_route: a change that would strand rows is refused and changes nothing; a change
    over an empty range re-points the coordinator's partition and re-partitions both shards
    in one transaction, and new rows follow it; drop_route of the top bound is refused. A
    shard's re-partition looks only at the ranges that changed; one with the ranges it
    recorded looks at every partition (a repair: a partition renamed by hand is named again).
(g) an application that routes by itself inserts on the shard with gene_order_id over an
    authority-backed sequence; the row is found through the coordinator; no id twice.
(h) a shard down: lookups and inserts pruned to other shards work; its own rows and full
    scans fail with 08001; a route change that needs it fails and changes nothing.
(i) convert_to_per_shard under load (writers through the view, a prepared lookup): no
    statement fails, every committed row is there once, one foreign table per shard is left
    on the coordinator and the shards' tables are unchanged.
"""
import time

import pytest

from harness import CoordinatorLoad, report

SHARDS = (1, 2, 3)
S = {}  # what the tests pass on: nodes, ids


@pytest.fixture(scope="module", autouse=True)
def servers(cluster):
    c = cluster.node("coordinator")
    c.script("""
        CREATE EXTENSION id_gen;
        CREATE EXTENSION postgres_fdw;
        CREATE EXTENSION dblink;
        SELECT id_gen.create_sequence('orders', step => 1000);
        CREATE ROLE id_authority LOGIN;
        GRANT UPDATE (max_id) ON id_gen.sequences TO id_authority;
        ALTER ROLE id_authority SET synchronous_commit = on;
        CREATE ROLE app LOGIN;
        SELECT id_gen.grant_usage('orders', 'app');
        SELECT id_gen.set_route(21844, 'shard_1');
        SELECT id_gen.set_route(43689, 'shard_2');
        SELECT id_gen.set_route(65535, 'shard_3');
        CREATE TABLE orders (
          id         bigint PRIMARY KEY,
          owner_id   bigint NOT NULL,
          amount     numeric NOT NULL DEFAULT 0 CHECK (amount >= 0),
          note       text,
          created_at timestamptz NOT NULL DEFAULT now()
        );
        GRANT SELECT, INSERT, UPDATE, DELETE ON orders TO app;
        INSERT INTO orders (id, owner_id, amount)
        SELECT id_gen.gene_order_id('orders', o), o, o % 100 FROM generate_series(1, 300) o;
        CREATE TABLE wrong_id (id integer PRIMARY KEY, owner_id bigint);
        CREATE TABLE parent (id bigint PRIMARY KEY);
        CREATE TABLE child (id bigint PRIMARY KEY, parent_id bigint REFERENCES parent);
    """)
    S["c"] = c
    for i in SHARDS:
        s = cluster.node(f"shard_{i}")
        s.script(f"""
            CREATE EXTENSION id_gen;
            CREATE EXTENSION postgres_fdw;
            CREATE SERVER central FOREIGN DATA WRAPPER postgres_fdw
              OPTIONS (host '{c.dir}', port '{c.port}', dbname 'postgres', connect_timeout '2',
                       options '-c synchronous_commit=on');
            CREATE USER MAPPING FOR PUBLIC SERVER central OPTIONS (user 'id_authority');
            SELECT id_gen.create_sequence('orders', step => 100, authority => 'central');
        """)
        S[i] = s
    yield


def add_shard_servers():
    c = S["c"]
    for i in SHARDS:
        s = S[i]
        c.script(f"""
            CREATE SERVER shard_{i} FOREIGN DATA WRAPPER postgres_fdw
              OPTIONS (host '{s.dir}', port '{s.port}', dbname 'postgres', connect_timeout '2');
            CREATE USER MAPPING FOR postgres SERVER shard_{i};
            -- Loopback with trust authentication: application roles reach the shards as
            -- postgres without a password (a real deployment maps them to shard roles).
            CREATE USER MAPPING FOR PUBLIC SERVER shard_{i} OPTIONS (user 'postgres', password_required 'false');
        """)


def shard_parts(i):
    """The shard's partitions of orders with their bounds (tombstones left out: e2e 16)."""
    return S[i].one("""
        SELECT string_agg(c.relname || ' ' || pg_get_expr(c.relpartbound, c.oid), ', ' ORDER BY c.relname)
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'public.orders'::regclass AND c.relname !~ '_(not_owned|negative)$'""")


def check_placement(expected_total, what):
    """Every row on the shard route_owner names (checked on each shard), and all of them
    seen once through the coordinator."""
    total = 0
    for i in SHARDS:
        bad = S[i].one("""
            SELECT count(*) FROM orders o WHERE NOT EXISTS (
              SELECT FROM id_gen.shard_tables t, unnest(t.gene_ranges) r
              WHERE t.table_name = 'orders' AND r @> id_gen.shard_gene(o.owner_id))""")
        assert bad == 0, f"{what}: every row on shard_{i} belongs to an owner it owns"
        total += S[i].one("SELECT count(*) FROM orders")
    assert total == expected_total, f"{what}: rows on the shards"
    assert S["c"].one("SELECT count(*) || '/' || count(DISTINCT id) FROM orders") == \
        f"{expected_total}/{expected_total}", f"{what}: the coordinator sees them all, no id twice"


def foreign_scans(plan_rows):
    return sum("Foreign Scan" in r for r in plan_rows)


def test_a_argument_checks():
    c = S["c"]
    assert c.sqlstate("SELECT id_gen.distribute_table('orders', 'id', 'owner_id', 'orders')") == "42704", \
        "routes to shards that are no foreign servers"
    add_shard_servers()
    assert c.sqlstate("SELECT id_gen.distribute_table('wrong_id', 'id')") == "42804", "an integer id column"
    assert c.sqlstate("SELECT id_gen.distribute_table('orders', 'id', NULL, 'orders')") == "22023", \
        "a sequence without an owner column"
    assert c.sqlstate("SELECT id_gen.distribute_table('child', 'id')") == "0A000", "a table with foreign keys"
    assert c.sqlstate("SET ROLE app", "SELECT id_gen.distribute_table('orders', 'id')") == "42501", \
        "a role without EXECUTE"
    grant = "EXECUTE ON FUNCTION id_gen.distribute_table(regclass, name, name, text, text)"
    e = c.error(f"GRANT {grant} TO app", "SET ROLE app", "SELECT id_gen.distribute_table('orders', 'id')")
    c.execute(f"REVOKE {grant} FROM app")
    assert e is not None and e.sqlstate == "42501" and \
        e.diag.message_primary == "id_gen: only superusers may distribute tables", \
        f"a non-superuser granted EXECUTE: 42501 from the function itself, not {e!r}"
    assert c.one("SELECT count(*) FROM id_gen.distributed_tables") == 0, "refused calls distributed nothing"


def test_b_distribute():
    c = S["c"]
    notices = c.notices("SELECT id_gen.distribute_table('orders', 'id', 'owner_id', 'orders')")
    assert "id_gen: public.orders is distributed over 3 shards; 300 existing rows moved to them" in notices
    assert c.one("""SELECT string_agg(relname || ':' || relkind::text, ',' ORDER BY relname) FROM pg_class
                    WHERE relname LIKE 'orders%' AND relkind IN ('v', 'p', 'r', 'f')""") == (
        "orders:v,orders_shards:p,orders_shards_g0_21844:p,orders_shards_g0_21844_fdw:f,"
        "orders_shards_g21845_43689:p,orders_shards_g21845_43689_fdw:f,"
        "orders_shards_g43690_65535:p,orders_shards_g43690_65535_fdw:f"), \
        "orders is a view over orders_shards: one partition per route range, each holding one foreign table"
    assert c.one("""SELECT string_agg(partition || '@' || shard || ':' || in_step, ',' ORDER BY lower_gene)
                    FROM id_gen.distribution""") == (
        "public.orders_shards_g0_21844@shard_1:true,public.orders_shards_g21845_43689@shard_2:true,"
        "public.orders_shards_g43690_65535@shard_3:true"), "one partition per route, each on its shard, in step"
    assert shard_parts(1) == "orders_g0_21844 FOR VALUES FROM ('0') TO ('3074410433122140160')", \
        "shard_1: orders partitioned, one partition for its genes"
    assert shard_parts(3) == "orders_g43690_65535 FOR VALUES FROM ('6148820866244280320') TO (MAXVALUE)", \
        "shard_3: likewise"
    assert c.one("SELECT ftoptions::text FROM pg_foreign_table WHERE ftrelid = 'orders_shards_g21845_43689_fdw'::regclass") \
        == "{schema_name=public,table_name=orders_g21845_43689}", \
        "each coordinator foreign table points at the shard's partition of the same genes"
    # (PostgreSQL 18 records NOT NULL constraints in pg_constraint too: contype 'n'.)
    assert S[1].one("""SELECT string_agg(conname, ',' ORDER BY conname) FROM pg_constraint
                       WHERE conrelid = 'public.orders'::regclass AND contype <> 'n'""") \
        == "id_gen_owner_gene,orders_amount_check,orders_pkey", \
        "the shard's table has the primary key and the CHECK of the original, and the owner-gene CHECK"
    assert c.one("SELECT has_table_privilege('app', 'orders', 'INSERT') AND has_table_privilege('app', 'orders_shards', 'INSERT')"), \
        "grants carried over to the view and the partitioned table"
    check_placement(300, "after distribute_table")


def test_c_inserts():
    c = S["c"]
    id42, amount, has_created = c.execute(
        "SET ROLE app", "INSERT INTO orders (owner_id, amount) VALUES (42, 10) RETURNING id, amount, created_at IS NOT NULL")[0]
    assert amount == 10 and has_created
    assert c.one(f"SELECT id_gen.shard_of({id42}::bigint) = id_gen.shard_gene(42::bigint)"), \
        "INSERT naming only the owner, as an application role: RETURNING gives an id of the owner's gene"
    S["id42"] = id42
    owner_shard = int(c.one("SELECT right(id_gen.route_owner(42::bigint), 1)"))
    assert S[owner_shard].one(f"SELECT owner_id FROM orders WHERE id = {id42}") == 42, "the row sits on route_owner(42)"
    # What ORMs send: every column, with DEFAULT or NULL for the id, as a prepared statement.
    with c.connect() as conn:
        conn.execute("PREPARE ins(bigint, bigint, numeric) AS INSERT INTO orders (id, owner_id, amount, note) "
                     "VALUES ($1, $2, $3, DEFAULT) RETURNING id")
        orm = [conn.execute("EXECUTE ins(NULL, 43, 2)").fetchone()[0],
               conn.execute("INSERT INTO orders (id, owner_id, amount) VALUES (DEFAULT, 44, 3) RETURNING id").fetchone()[0]]
    ids = ",".join(map(str, orm))
    assert c.one(f"SELECT count(*) FROM orders WHERE id IN ({ids}) AND id_gen.shard_of(id) = id_gen.shard_gene(owner_id)") == 2, \
        "ORM-style inserts (prepared, NULL or DEFAULT id) get ids of their owners' genes"
    c.execute(f"DELETE FROM orders WHERE owner_id IN (43, 44) AND amount IN (2, 3) AND note IS NULL AND id IN ({ids})")
    c.execute("INSERT INTO orders (id, owner_id, amount) VALUES (id_gen.gene_order_id('orders', 7), 7, 1)")
    assert c.sqlstate("INSERT INTO orders (id, owner_id) VALUES (id_gen.gene_order_id('orders', 7), 8)") == "23514", \
        "an id of another gene than its owner's"
    assert c.sqlstate("INSERT INTO orders (amount) VALUES (1)") == "23502", "neither id nor owner"
    with c.connect() as conn, conn.cursor().copy("COPY orders (owner_id, amount) FROM STDIN") as copy:
        for o in range(1001, 3001):
            copy.write_row((o, o % 50))
    check_placement(2302, "after inserts and COPY")
    assert c.one(f"UPDATE orders SET amount = amount + 1 WHERE id = {id42} RETURNING amount") == 11, \
        "UPDATE ... RETURNING through the table"
    assert c.one("WITH d AS (DELETE FROM orders WHERE owner_id = 7 RETURNING 1) SELECT count(*) FROM d") == 2, \
        "DELETE through the table"


def test_d_pruning():
    c, id42 = S["c"], S["id42"]
    assert foreign_scans(c.column(f"EXPLAIN (COSTS OFF) SELECT * FROM orders WHERE id = {id42}")) == 1, \
        "a point lookup by a literal id is one Foreign Scan"
    plan = c.column("SET plan_cache_mode = force_generic_plan",
                    "PREPARE byid(bigint) AS SELECT * FROM orders WHERE id = $1",
                    f"EXPLAIN (COSTS OFF) EXECUTE byid({id42})")
    assert foreign_scans(plan) == 1, "a generic prepared plan prunes to one Foreign Scan at executor start"
    assert any("Subplans Removed: 2" in r for r in plan), f"generic plan without 'Subplans Removed: 2': {plan}"
    assert foreign_scans(c.column(
        "EXPLAIN (COSTS OFF) SELECT * FROM orders WHERE owner_id = 42 "
        "AND id BETWEEN id_gen.owner_first_id(42) AND id_gen.owner_last_id(42)")) == 1, \
        "a lookup by owner with owner_first_id/owner_last_id is one Foreign Scan"
    plan = c.column("SET plan_cache_mode = force_generic_plan",
                    "PREPARE byowner(bigint) AS SELECT * FROM orders WHERE owner_id = $1 "
                    "AND id BETWEEN id_gen.owner_first_id($1) AND id_gen.owner_last_id($1)",
                    "EXPLAIN (COSTS OFF) EXECUTE byowner(42)")
    assert foreign_scans(plan) == 1, "the owner lookup prunes in a generic prepared plan too"
    assert c.one("SELECT string_agg(amount::text, ',' ORDER BY amount) FROM orders WHERE owner_id = 42 "
                 "AND id BETWEEN id_gen.owner_first_id(42) AND id_gen.owner_last_id(42)") == "11,42", \
        "the owner lookup finds both rows of owner 42"


def test_e_shard_refuses_genes_it_does_not_own():
    foreign_gene_id = S["c"].one("SELECT id_gen.compose_id(50000, 1)")
    assert S[1].sqlstate(f"INSERT INTO orders (id, owner_id) VALUES ({foreign_gene_id}, 1)") == "IG001", \
        "a row of gene 50000 inserted directly on shard_1 (not its gene)"


def test_f_route_changes():
    c = S["c"]
    routes = "SELECT string_agg(upper_gene || shard, ',' ORDER BY upper_gene) FROM id_gen.shard_routes"
    routes_before = c.one(routes)
    e = c.error("SELECT id_gen.set_route(43689, 'shard_3')")
    assert e is not None and e.sqlstate == "55000" and e.diag.message_primary.startswith(
        'id_gen: shard "shard_2" holds rows of public.orders outside the genes it would own'), \
        f"moving genes that still have rows on their shard is refused (55000), not {e!r}"
    assert c.one(routes) == routes_before, "the routes are unchanged"
    assert c.one("SELECT bool_and(in_step)::text || count(*) FROM id_gen.distribution") == "true3", \
        "partitions are unchanged and in step"
    assert c.sqlstate("SELECT id_gen.drop_route(65535)") == "55000", "dropping the top route of distributed tables"

    # An empty range of 10 genes in shard_3's part moves to shard_1.
    lo = c.one("""SELECT g FROM generate_series(43700, 65000, 10) g WHERE NOT EXISTS (
                    SELECT FROM orders WHERE id BETWEEN id_gen.gene_first_id(g) AND id_gen.gene_last_id(g + 9)) LIMIT 1""")
    hi = lo + 9
    c.execute("BEGIN", f"SELECT id_gen.set_route({lo - 1}, 'shard_3', copy_rows => true)",
              f"SELECT id_gen.set_route({hi}, 'shard_1', copy_rows => true)", "COMMIT")
    assert c.one(f"""SELECT s.srvname FROM pg_foreign_table ft JOIN pg_foreign_server s ON s.oid = ft.ftserver
                     WHERE ft.ftrelid = 'orders_shards_g{lo}_{hi}_fdw'::regclass""") == "shard_1", \
        f"the partition of genes {lo} .. {hi} points at shard_1"
    assert c.one("SELECT bool_and(in_step)::text || count(*) FROM id_gen.distribution") == "true5", \
        "every partition is in step (5 runs)"
    assert S[1].one("SELECT gene_ranges::text FROM id_gen.shard_tables") == f'{{"[0,21845)","[{lo},{hi + 1})"}}', \
        f"shard_1 owns genes 0 .. 21844 and {lo} .. {hi}"
    assert S[3].one("SELECT gene_ranges::text FROM id_gen.shard_tables") == f'{{"[43690,{lo})","[{hi + 1},65536)"}}', \
        f"shard_3 no longer owns {lo} .. {hi}"
    strip = lambda parts: ", ".join(p.split(" FOR VALUES")[0] for p in parts.split(", "))  # noqa: E731
    assert strip(shard_parts(1)) == f"orders_g0_21844, orders_g{lo}_{hi}", "shard_1 has a partition for the new genes"
    assert strip(shard_parts(3)) == f"orders_g43690_{lo - 1}, orders_g{hi + 1}_65535", "shard_3 split its partition around them"
    owner = c.one(f"SELECT o FROM generate_series(1, 5000000) o WHERE id_gen.shard_gene(o) BETWEEN {lo} AND {hi} LIMIT 1")
    c.execute(f"INSERT INTO orders (owner_id, amount) VALUES ({owner}, 5)")
    assert S[1].one(f"SELECT count(*) FROM orders WHERE owner_id = {owner}") == 1, \
        f"a new row of owner {owner} lands on shard_1"
    assert S[3].sqlstate(f"INSERT INTO orders (id, owner_id) VALUES (id_gen.compose_id({lo}, 999999), {owner})") == "IG001", \
        "shard_3 now refuses ids of those genes"


def test_f_a_shard_looks_only_at_the_ranges_that_changed():
    """shard_apply_ranges, what a route change, a move and a split call on a shard: a call
    whose ranges differ in a few from those the last one recorded looks only at their
    partitions (its result says how many changed); a call with the recorded ranges (a
    repair: sync_distributed_tables) looks at every partition and renames one renamed by hand."""
    s3 = S[3]
    apply = ("SELECT id_gen.shard_apply_ranges(schema_name, table_name, id_column, stem, {}, definition) "
             "FROM id_gen.shard_tables WHERE table_name = 'orders'")
    ranges = s3.one("SELECT gene_ranges::text FROM id_gen.shard_tables WHERE table_name = 'orders'")
    rows, parts = s3.one("SELECT count(*) FROM orders"), shard_parts(3)
    first = parts.split(" FOR VALUES")[0]
    s3.execute(f"ALTER TABLE {first} RENAME TO renamed_by_hand")
    assert s3.one(apply.format("gene_ranges")) == "created 0, adopted 0, detached 0, copied 0 rows", \
        "the recorded ranges again: every partition looked at"
    assert shard_parts(3) == parts, "and the renamed one has its name back"
    # The last range split in two and merged back, by hand (the coordinator's table is not read meanwhile).
    lo, hi = s3.one("SELECT lower(r) || ',' || upper(r) FROM id_gen.shard_tables, "
                    "LATERAL (SELECT gene_ranges[cardinality(gene_ranges)] r) x WHERE table_name = 'orders'").split(",")
    lo, hi = int(lo), int(hi)
    mid = (lo + hi) // 2
    split = f"""(SELECT array_agg(r ORDER BY r) FROM (SELECT unnest(gene_ranges[1:cardinality(gene_ranges) - 1]) r
                 UNION ALL SELECT int4range({lo}, {mid}) UNION ALL SELECT int4range({mid}, {hi})) x)"""
    assert s3.one(apply.format(split)).endswith("(3 of 3 ranges changed)"), "the split: the short way"
    assert s3.one("SELECT count(*) FROM id_gen.shard_tables t, unnest(t.gene_ranges) WHERE t.table_name = 'orders'") == 3
    assert s3.one("SELECT count(*) FROM orders") == rows, "no row lost by the split"
    assert s3.one(apply.format(f"'{ranges}'::int4range[]")).endswith("(3 of 2 ranges changed)"), "the merge: the short way"
    assert (shard_parts(3), s3.one("SELECT count(*) FROM orders")) == (parts, rows), "the table as it was"

def test_g_application_routes_by_itself():
    c = S["c"]
    shard = int(c.one("SELECT right(id_gen.route_owner(77::bigint), 1)"))
    own_id = S[shard].one("INSERT INTO orders (id, owner_id, amount) VALUES (id_gen.gene_order_id('orders', 77), 77, 3) RETURNING id")
    assert c.one(f"SELECT amount FROM orders WHERE id = {own_id}") == 3, \
        f"a row inserted on shard_{shard} by the application is found through the coordinator"
    c.execute("INSERT INTO orders (owner_id) SELECT 77 FROM generate_series(1, 500)")
    S[shard].execute("INSERT INTO orders (id, owner_id) SELECT id_gen.gene_order_id('orders', 77), 77 FROM generate_series(1, 500)")
    check_placement(3302, "after inserts on the coordinator and directly on a shard for the same owner")


def test_h_a_shard_down():
    c = S["c"]
    s1_id, s1_owner = S[1].execute("SELECT id, owner_id FROM orders LIMIT 1")[0]
    s2_id = S[2].one("SELECT id FROM orders LIMIT 1")
    S[2].stop()
    try:
        assert c.one(f"SELECT count(*) FROM orders WHERE id = {s1_id}") == 1, "a lookup of a shard_1 id still works"
        assert c.one(f"INSERT INTO orders (owner_id) VALUES ({s1_owner}) RETURNING id_gen.route(id)") == "shard_1", \
            "an insert for an owner on shard_1 still works"
        assert c.sqlstate(f"SELECT * FROM orders WHERE id = {s2_id}") == "08001", "a lookup of a shard_2 id fails with 08001"
        assert c.sqlstate("SELECT count(*) FROM orders") == "08001", "a full scan fails with 08001"
        e = c.error("SELECT id_gen.set_route(43689, 'shard_3')")
        assert e is not None and 'id_gen: shard "shard_2" is unreachable' in str(e), \
            f"a route change that needs shard_2 fails, naming it, not {e!r}"
        assert c.one("SELECT count(*) FROM id_gen.shard_routes") == 5, "the routes are unchanged"
    finally:
        S[2].start()
    assert c.one(f"SELECT count(*) FROM orders WHERE id = {s2_id}") == 1, "shard_2 back: its rows are found again"


def test_i_conversion_to_per_shard_under_load():
    """convert_to_per_shard, with writers through the view and a session whose prepared
    lookup runs throughout: the swap takes milliseconds, no statement fails, every committed
    row is there once afterwards, the coordinator holds one foreign table per shard and the
    old range partitions are gone; the shards are unchanged."""
    c = S["c"]
    total = c.one("SELECT count(*) FROM orders")
    shard_before = [shard_parts(i) for i in SHARDS]
    load = CoordinatorLoad(c, c.one("SELECT max(id) FROM orders"))
    load.goes_on("before the conversion", rows=100)
    t0, n0 = time.monotonic(), len(load.committed)
    notices = c.notices("CALL id_gen.convert_to_per_shard('orders', batch => 2)")
    took, n = time.monotonic() - t0, len(load.committed)
    load.goes_on("after the conversion", rows=100)
    load.end()
    committed = [i for i, _ in load.committed]
    assert any("converted to per_shard (5 old range partitions dropped)" in x for x in notices), notices
    assert c.one("SELECT layout FROM id_gen.distributed_tables WHERE table_name = 'orders'") == "per_shard"
    assert c.one("""SELECT string_agg(relname || ':' || relkind::text, ',' ORDER BY relname) FROM pg_class
                    WHERE relname LIKE 'orders%' AND relkind IN ('v', 'p', 'r', 'f')""") == \
        "orders:v," + "orders_shards:p," + ",".join(
            f"orders_shards_slot{s}:f" for s in sorted(c.column("SELECT slot FROM id_gen.shard_slots"))), \
        "one foreign table per shard, and nothing of the range partitions"
    assert [shard_parts(i) for i in SHARDS] == shard_before, "the shards' tables are unchanged"
    assert len(set(committed)) == len(committed)
    check_placement(total + len(committed), "after the conversion under load")
    # (By owner: an id = ANY (array) over the genes of several shards is refused by them per_shard.)
    got = set(c.column("SELECT id FROM orders WHERE owner_id BETWEEN 700000 AND 700049 OR owner_id BETWEEN 800000 AND 800049"))
    assert got == set(committed), (len(got), len(committed))
    some_id = committed[0]
    plan = c.column(f"EXPLAIN (COSTS OFF) SELECT * FROM orders WHERE id = {some_id}")
    assert foreign_scans(plan) == 1, plan
    assert c.one("SELECT has_table_privilege('app', 'orders_shards', 'INSERT')"), "grants carried over"
    # A per_shard table is not converted again.
    assert any("laid out per_shard already" in x for x in c.notices("CALL id_gen.convert_to_per_shard('orders')")), \
        "a second CALL finds nothing to do"
    report(f"convert_to_per_shard under load: {took * 1000:.0f} ms for the CALL, {n - n0} rows committed meanwhile, "
           f"{len(committed)} in all, {load.lookups} prepared lookups, 0 failed")
