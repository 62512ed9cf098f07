"""A sharded fleet updated from the released 0.6.0 and converted to the per_shard layout, all
under load (docs/operations.md "Upgrading"): a coordinator and 2 shards installed at 0.6.0
(the released install script, served by this build's library as `ALTER EXTENSION UPDATE`
expects), table orders distributed as 0.6.0 does (per_range), writers inserting by owner
through the coordinator and a session running a prepared lookup throughout.

(a) ALTER EXTENSION id_gen UPDATE on each shard, then on the coordinator, while they write:
    no statement fails, every server reports the current version, orders stays per_range.
(b) CALL id_gen.convert_to_per_shard('orders') while they write: no statement fails, the
    shards' tables are those 0.6.0 made, the coordinator holds one foreign table per shard.
(c) CALL id_gen.convert_to_by_ownership('orders') while they write and a third client
    inserts, updates and deletes rows: the first CALL stops at shard_2, whose table a session
    holds (55P03 after the lock wait), with shard_1 converted; meanwhile moves and route
    changes are refused (55006, naming the conversion), a push of the same ranges to both
    shards works, and the
    clients go on; the same CALL then finishes (its swap on shard_2 waits for a REPEATABLE
    READ transaction there whose snapshot is older than the copy, which still sees every row
    and then updates a row whose copy it cannot see: the swap has that copy repaired first): each shard holds the table as a view over one
    table of rows, nothing of the old partitions is left.
(d) afterwards: every committed row is there once through the coordinator and on the shard
    that owns its gene (updated rows as updated, deleted ones gone); and a move of genes,
    which the fleet runs for tables laid out by ownership, loses nothing.
(e) abort_conversion: refused (55000, nothing changed) in (c) once shard_1 has swapped; on a
    second per_shard table whose conversion began on shard_1 only (its steps run there by
    hand, as an interrupted CALL leaves them) and was written through meanwhile, it drops the
    triggers, the table of rows and the log there, unmarks the table, and every row is as
    written; the conversion then runs whole.
"""
import os
import shutil
import subprocess
import threading
import time

import pytest

import psycopg

import harness
from harness import LOGICAL, PG_BIN, Background, CoordinatorLoad, Sleeper, coordinator_with_shards, poll_until, report, routes

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OLD = "0.6.0"
S = {}


@pytest.fixture(scope="module", autouse=True)
def servers(cluster):
    """The fleet at 0.6.0. The released install script is copied into the extension
    directory for this module (the build installs only the current one) and removed after."""
    share = subprocess.run([f"{PG_BIN}/pg_config", "--sharedir"], stdout=subprocess.PIPE, text=True,
                           check=True, timeout=30).stdout.strip()
    script = os.path.join(share, "extension", f"id_gen--{OLD}.sql")
    copied = not os.path.exists(script)
    if copied:
        shutil.copy(os.path.join(REPO, "tests", "upgrade", f"id_gen--{OLD}.sql"), script)
    try:
        c, shards = coordinator_with_shards(cluster, shard_conf=LOGICAL, version=OLD)
        c.execute("INSERT INTO orders (owner_id, amount) SELECT o, 1 FROM generate_series(1, 3000) o")
        S.update(c=c, shards=shards, new=c.one("SELECT default_version FROM pg_available_extensions WHERE name = 'id_gen'"))
        yield
    finally:
        if copied:
            os.remove(script)


def versions():
    return [S["c"].one("SELECT extversion FROM pg_extension WHERE extname = 'id_gen'")] + \
        [s.one("SELECT extversion FROM pg_extension WHERE extname = 'id_gen'") for s in S["shards"].values()]


def shard_tables():
    return [s.one("""SELECT string_agg(c.relname || ':' || c.relkind::text, ',' ORDER BY c.relname)
                     FROM pg_class c WHERE c.relname LIKE 'orders%' AND c.relkind IN ('p', 'r')""")
            for s in S["shards"].values()]


def test_a_update_under_load():
    c = S["c"]
    assert versions() == [OLD] * 3, "the fleet starts at the released 0.6.0"
    S["shard_tables"] = shard_tables()
    S["load"] = load = CoordinatorLoad(c, c.one("SELECT min(id) FROM orders"))
    load.goes_on("before the update")
    t0 = time.monotonic()
    for s in [*S["shards"].values(), c]:
        s.execute("ALTER EXTENSION id_gen UPDATE")
        load.goes_on(f"after the update of {s.name}")
    S["update_s"] = time.monotonic() - t0
    assert versions() == [S["new"]] * 3, "every server at the current version"
    assert c.one("SELECT layout FROM id_gen.distributed_tables WHERE table_name = 'orders'") == "per_range", \
        "the update keeps the table per_range"


def test_b_convert_under_load():
    c, load = S["c"], S["load"]
    t0 = time.monotonic()
    c.execute("CALL id_gen.convert_to_per_shard('orders')")
    S["convert_ms"] = (time.monotonic() - t0) * 1000
    load.goes_on("after the conversion")
    assert c.one("SELECT layout FROM id_gen.distributed_tables WHERE table_name = 'orders'") == "per_shard"
    assert shard_tables() == S["shard_tables"], "the shards' tables are those 0.6.0 made"
    assert c.one("""SELECT string_agg(relname || ':' || relkind::text, ',' ORDER BY relname) FROM pg_class
                    WHERE relname LIKE 'orders%' AND relkind IN ('v', 'p', 'r', 'f')""") == \
        "orders:v,orders_shards:p," + ",".join(
            f"orders_shards_slot{s}:f" for s in sorted(c.column("SELECT slot FROM id_gen.shard_slots"))), \
        "the coordinator holds one foreign table per shard"


class Churn:
    """A client of the coordinator that inserts a row (owners 900000..), updates it, and
    deletes every third, in turn, and adds 1 to the amount of one of the 3,000 rows of 0.6.0
    each time (owners 1 .. 3000, in turn); `kept` is what each committed row of its own must
    be (id -> (owner, amount)), `deleted` the ids committed as deleted, `bumped` how often
    each old owner's row was updated."""

    def __init__(self, c):
        self.c, self.kept, self.deleted, self.errors, self.stop = c, {}, set(), [], threading.Event()
        self.bumped = {}
        # (By id: a statement that names an id reaches one shard.)
        self.old_ids = dict(map(int, r.split(":")) for r in c.column("SELECT owner_id || ':' || id FROM orders WHERE owner_id <= 3000"))
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            with psycopg.connect(self.c.dsn(), autocommit=True) as conn:
                k = 0
                while not self.stop.is_set():
                    k += 1
                    owner = 900000 + k % 50
                    rid = conn.execute("INSERT INTO orders (owner_id, amount) VALUES (%s, 1) RETURNING id",
                                       (owner,)).fetchone()[0]
                    self.kept[rid] = (owner, 1)
                    n = conn.execute("UPDATE orders SET amount = %s WHERE id = %s", (k, rid)).rowcount
                    assert n == 1, f"the update of {rid} found {n} rows"
                    self.kept[rid] = (owner, k)
                    if k % 3 == 0:
                        n = conn.execute("DELETE FROM orders WHERE id = %s", (rid,)).rowcount
                        assert n == 1, f"the delete of {rid} found {n} rows"
                        del self.kept[rid]
                        self.deleted.add(rid)
                    old = (k * 7) % 3000 + 1
                    n = conn.execute("UPDATE orders SET amount = amount + 1 WHERE id = %s", (self.old_ids[old],)).rowcount
                    assert n == 1, f"the update of the row of owner {old} found {n} rows"
                    self.bumped[old] = self.bumped.get(old, 0) + 1
        except Exception as e:  # noqa: BLE001 - reported by end()
            self.errors.append(e)

    def end(self):
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive(), "the churning client did not stop within 60 s"
        assert self.errors == [], self.errors


def shard_relations(s):
    return s.one("""SELECT string_agg(c.relname || ':' || c.relkind::text, ',' ORDER BY c.relname) FROM pg_class c
                    JOIN pg_namespace n ON n.oid = c.relnamespace
                    WHERE n.nspname = 'public' AND c.relname LIKE 'orders%' AND c.relkind IN ('v', 'p', 'r')""")


def test_c_convert_to_by_ownership_under_load():
    c, load = S["c"], S["load"]
    shard_1, shard_2 = S["shards"][1], S["shards"][2]
    S["churn"] = churn = Churn(c)
    load.goes_on("with the churning client")
    # shard_2's table held: the CALL converts shard_1, then stops at shard_2.
    holder = Sleeper(shard_2, "BEGIN", "LOCK TABLE orders IN SHARE MODE", seconds=301)
    try:
        assert c.sqlstate("SET client_min_messages = warning", "CALL id_gen.convert_to_by_ownership('orders')") == "55P03"
    finally:
        holder.release()
    assert shard_relations(shard_1) == "orders:v,orders_rows:r", shard_relations(shard_1)
    assert c.one("SELECT converting_since IS NOT NULL AND shard_layout = 'partitioned' FROM id_gen.distributed_tables "
                 "WHERE table_name = 'orders'") is True
    try:
        c.execute("CALL id_gen.move_genes(16384, 32767, 'shard_2')")
        raise AssertionError("a move during the conversion was not refused")
    except psycopg.Error as e:
        assert e.sqlstate == "55006" and "conversion of public.orders" in str(e), e
    assert c.sqlstate("SELECT id_gen.sync_distributed_tables()") == "55006", "route changes wait too"
    before = (shard_relations(shard_1), shard_relations(shard_2))
    err = c.error("CALL id_gen.abort_conversion('orders')")
    assert err is not None and err.sqlstate == "55000" and "shard_1" in str(err), err
    assert (shard_relations(shard_1), shard_relations(shard_2)) == before, "an abort refused changes nothing"
    # A push of the same ranges to both shards works on either layout (shard_1 records them
    # as data, shard_2 keeps its partitions).
    c.execute("SELECT id_gen.push_shard_table(p.shard, p.schema_name, p.table_name, p.gene_ranges) "
              "FROM id_gen.shard_placements p WHERE p.table_name = 'orders'")
    load.goes_on("with shard_1 converted and shard_2 not")
    # A REPEATABLE READ transaction on shard_2 whose snapshot is older than the copy: the
    # swap waits for it (after the swap, that snapshot would not see the copied rows).
    held = shard_2.one("SELECT count(*) FROM orders WHERE owner_id <= 3000")
    assert held > 1000, f"shard_2 holds {held} of the rows of 0.6.0"
    # A row of shard_2 no other client writes, which that transaction updates after the copy.
    lone_owner = harness.owners(c, "id_gen.route_owner(o) = 'shard_2'", 1, first=600000)[0]
    lone = c.one(f"INSERT INTO orders (owner_id, amount) VALUES ({lone_owner}, 5) RETURNING id")
    with psycopg.connect(shard_2.dsn(), autocommit=True) as old_snapshot:
        old_snapshot.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        old_snapshot.execute("SELECT 1")
        t0 = time.monotonic()
        # (Small batches: the copy runs beside the writers for longer.)
        call = Background(c, "SET client_min_messages = warning", "CALL id_gen.convert_to_by_ownership('orders', batch => 100)")
        poll_until("the swap on shard_2 waits for the older snapshot", lambda: shard_2.one(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT id_gen.shard_finish_owned_conversion(%' "
            "AND state = 'active' AND now() - query_start > interval '1 s'"), 1, 60)
        seen = old_snapshot.execute("SELECT count(*) FROM orders WHERE owner_id <= 3000").fetchone()[0]
        assert seen == held, f"the older snapshot sees {seen} of the {held} rows of 0.6.0 on shard_2"
        # Its update cannot see the row's copy (made after its snapshot): the swap finds the
        # copy out of date and has it repaired first.
        assert old_snapshot.execute(f"UPDATE orders SET amount = 777 WHERE id = {lone}").rowcount == 1
        old_snapshot.execute("COMMIT")
        assert call.join(120) is None, call.error
    S["by_ownership_ms"] = (time.monotonic() - t0) * 1000
    assert c.one(f"SELECT amount FROM orders WHERE id = {lone}") == 777, "the update of a REPEATABLE READ transaction kept"
    assert shard_2.one(f"SELECT amount FROM orders_rows WHERE id = {lone}") == 777
    S["lone"] = (lone, lone_owner)
    load.goes_on("after the conversion to the layout by ownership")
    churn.end()
    load.end()
    assert c.one("SELECT shard_layout || ':' || (converting_since IS NULL) FROM id_gen.distributed_tables "
                 "WHERE table_name = 'orders'") == "by_ownership:true"
    for s in S["shards"].values():
        assert shard_relations(s) == "orders:v,orders_rows:r", shard_relations(s)
        assert s.one("SELECT rows_table FROM id_gen.shard_tables WHERE table_name = 'orders'") == "orders_rows"


def placement(expected):
    """Every row on the shard that owns its gene, each committed (id, owner) there once, and
    the coordinator sees each row once."""
    c = S["c"]
    owner_of = {}  # gene -> shard, from the coordinator's routes
    for r in routes(c).split(","):
        span, shard = r.split("@")
        lo, hi = map(int, span.split("-"))
        owner_of.update({g: shard for g in range(lo, hi + 1)})
    rows = {}
    for i, s in S["shards"].items():
        for rid, owner in (map(int, r.split(":")) for r in s.column("SELECT id || ':' || owner_id FROM orders")):
            assert owner_of[rid >> 47] == f"shard_{i}", f"row {rid} (gene {rid >> 47}) on shard_{i}"
            assert rid not in rows, f"row {rid} on two shards"
            rows[rid] = owner
    missing = [(i, o) for i, o in expected if rows.get(i) != o]
    assert missing == [], f"{len(missing)} committed rows missing or changed, e.g. {missing[:5]}"
    assert c.one("SELECT count(*) || '/' || count(DISTINCT id) FROM orders") == f"{len(rows)}/{len(rows)}", \
        "the coordinator sees every row once"
    return len(rows)


def test_d_nothing_lost_and_the_fleet_moves():
    c, load, churn = S["c"], S["load"], S["churn"]
    expected = load.committed + [(i, o) for i, (o, _) in churn.kept.items()] + [S["lone"]]
    total = placement(expected)
    assert total == 3000 + len(expected), "the rows of 0.6.0 and every committed row, nothing else"
    amounts = dict(map(int, r.split(":")) for r in c.column("SELECT id || ':' || amount FROM orders WHERE owner_id >= 900000"))
    assert amounts == {i: a for i, (_, a) in churn.kept.items()}, "updated rows as updated, deleted ones gone"
    old = dict(map(int, r.split(":")) for r in c.column("SELECT owner_id || ':' || amount FROM orders WHERE owner_id <= 3000"))
    assert old == {o: 1 + churn.bumped.get(o, 0) for o in range(1, 3001)}, "every update of the rows of 0.6.0 kept"
    c.execute("SET client_min_messages = warning", "CALL id_gen.move_genes(16384, 32767, 'shard_2')")
    assert routes(c) == "0-16383@shard_1,16384-32767@shard_2,32768-65535@shard_2", routes(c)
    assert placement(expected) == total, "a move after the conversion loses nothing"
    report(f"update from {OLD} under load: 3 servers in {S['update_s']:.1f} s, then convert_to_per_shard in "
           f"{S['convert_ms']:.0f} ms, then convert_to_by_ownership (its second CALL) in {S['by_ownership_ms']:.0f} ms; "
           f"{len(load.committed)} rows inserted, {len(churn.kept) + len(churn.deleted)} inserted and updated "
           f"({len(churn.deleted)} deleted), {sum(churn.bumped.values())} old rows updated and {load.lookups} prepared lookups meanwhile, 0 failed, 0 lost")


def test_e_abort_conversion():
    c, shard_1 = S["c"], S["shards"][1]
    c.execute("CREATE TABLE events (id bigint PRIMARY KEY, owner_id bigint NOT NULL, note text)",
              "SET client_min_messages = warning",
              "SELECT id_gen.distribute_table('events', 'id', 'owner_id', layout => 'per_shard')")
    c.execute("INSERT INTO events SELECT id_gen.gene_order_id('orders', o), o, 'n' || o FROM generate_series(1, 200) o")
    stem = c.one("SELECT shard_stem FROM id_gen.distributed_tables WHERE table_name = 'events'")
    assert c.notices("CALL id_gen.abort_conversion('events')") == ["id_gen: no conversion of public.events is under way"]
    # A conversion interrupted after its first steps on shard_1.
    c.execute("UPDATE id_gen.distributed_tables SET converting_since = now() WHERE table_name = 'events'")
    args = f"'public', 'events', 'id', '{stem}'"
    assert shard_1.one(f"SELECT id_gen.shard_begin_owned_conversion({args})") == "copying"
    shard_1.one(f"SELECT id_gen.shard_copy_owned_rows({args}, -1, 50)")
    c.execute("UPDATE events SET note = 'changed' WHERE owner_id <= 20",
              "DELETE FROM events WHERE owner_id BETWEEN 21 AND 30",
              "INSERT INTO events SELECT id_gen.gene_order_id('orders', o), o, 'late' FROM generate_series(201, 220) o")
    assert shard_1.one("SELECT count(*) FROM id_gen.shard_converted_changes") > 0, "the triggers logged the writes"
    expected = c.column("SELECT id || ':' || note FROM events ORDER BY id")
    c.execute("SET client_min_messages = warning", "CALL id_gen.abort_conversion('events')")
    assert c.one("SELECT converting_since IS NULL FROM id_gen.distributed_tables WHERE table_name = 'events'") is True
    assert shard_1.one(f"SELECT to_regclass('{stem}_rows') IS NULL") is True, "the table of rows is gone"
    assert shard_1.one("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'events'::regclass AND tgname LIKE 'id_gen_convert_%'") == 0
    assert shard_1.one("SELECT count(*) FROM id_gen.shard_converted_changes") == 0, "the log is empty"
    assert c.column("SELECT id || ':' || note FROM events ORDER BY id") == expected, "every row as written"
    c.execute("INSERT INTO events SELECT id_gen.gene_order_id('orders', o), o, 'after' FROM generate_series(221, 230) o")
    c.execute("SET client_min_messages = warning", "CALL id_gen.convert_to_by_ownership('events')")
    assert c.one("SELECT shard_layout || ':' || (converting_since IS NULL) FROM id_gen.distributed_tables "
                 "WHERE table_name = 'events'") == "by_ownership:true"
    assert c.one("SELECT count(*) FROM events") == len(expected) + 10
