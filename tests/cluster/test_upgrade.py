"""A sharded fleet updated from the released 0.6.0 and converted to the per_shard layout, all
under load (docs/operations.md "Upgrading"): a coordinator and 2 shards installed at 0.6.0
(the released install script, served by this build's library as `ALTER EXTENSION UPDATE`
expects), table orders distributed as 0.6.0 does (per_range), writers inserting by owner
through the coordinator and a session running a prepared lookup throughout.

(a) ALTER EXTENSION id_gen UPDATE on each shard, then on the coordinator, while they write:
    no statement fails, every server reports the current version, orders stays per_range.
(b) CALL id_gen.convert_to_per_shard('orders') while they write: no statement fails.
(c) afterwards: every committed row is there once through the coordinator and on the shard
    that owns its gene, the shards' tables are those 0.6.0 made, the coordinator holds one
    foreign table per shard; and a move of genes, which the updated fleet now runs for
    per_shard tables, loses nothing.
"""
import os
import shutil
import subprocess
import time

import pytest

from harness import LOGICAL, PG_BIN, CoordinatorLoad, coordinator_with_shards, report, routes

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
    load.end()
    assert c.one("SELECT layout FROM id_gen.distributed_tables WHERE table_name = 'orders'") == "per_shard"


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


def test_c_nothing_lost_and_the_fleet_moves():
    c, load = S["c"], S["load"]
    total = placement(load.committed)
    assert total == 3000 + len(load.committed), "the rows of 0.6.0 and every committed row, nothing else"
    assert shard_tables() == S["shard_tables"], "the shards' tables are those 0.6.0 made"
    assert c.one("""SELECT string_agg(relname || ':' || relkind::text, ',' ORDER BY relname) FROM pg_class
                    WHERE relname LIKE 'orders%' AND relkind IN ('v', 'p', 'r', 'f')""") == \
        "orders:v,orders_shards:p," + ",".join(
            f"orders_shards_slot{s}:f" for s in sorted(c.column("SELECT slot FROM id_gen.shard_slots"))), \
        "the coordinator holds one foreign table per shard"
    c.execute("SET client_min_messages = warning", "CALL id_gen.move_genes(16384, 32767, 'shard_2')")
    assert routes(c) == "0-16383@shard_1,16384-32767@shard_2,32768-65535@shard_2", routes(c)
    assert placement(load.committed) == total, "a move after the conversion loses nothing"
    report(f"update from {OLD} under load: 3 servers in {S['update_s']:.1f} s, then convert_to_per_shard in "
           f"{S['convert_ms']:.0f} ms; {len(load.committed)} rows committed and {load.lookups} prepared "
           f"lookups meanwhile, 0 failed, 0 lost")
