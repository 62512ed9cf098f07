"""Zero-hop routing behind a transaction-mode pooler (issue 28; docs/routing-protocol.md §3,
clients' READMEs): each shard behind its own PgBouncer (Debian's 1.18, pool_mode =
transaction), the coordinator reached directly (LISTEN does not work through such a pooler).

(a) the poolers really pool by transaction: a client's session SET lands on a server
    connection that another client's transaction then gets (it leaks), and the first
    client's next statement runs on another server connection, where it is lost; which is
    why the clients declare the route version in each transaction (the claim, or
    set_config(..., true)) and never per session.
(b) Python (unchanged: it prepares no statement unless asked), Rust and Node.js Routers write through the poolers while genes move and a range splits: no failed
    transaction, every insert of the Rust and Node.js clients is there, and the Python
    clients' log equals the rows per owner (count and sum).
(c) stale routes through the poolers: Python's execute() and transaction() and Node.js's
    transaction() and execute() meet IG001 on the old shard (never an empty answer) and find
    the owner's rows on the new one; nextId gives an id of the owner's gene.
"""
import json
import os
import subprocess

import psycopg
import pytest

import routing_clients
from bouncer import start_bouncer, stop_bouncer
from harness import LOGICAL, coordinator_with_shards, poll_until
from routing_clients import NODE_CLIENT

S = {}


@pytest.fixture(scope="module", autouse=True)
def servers(cluster, tmp_path_factory):
    routing_clients.build()
    c, shards = coordinator_with_shards(cluster, shard_conf=LOGICAL)
    dirs = [os.path.join(cluster.root, f"bouncer_{i}") for i in (1, 2)]
    try:
        pooled = {f"shard_{i}": start_bouncer(dirs[i - 1], cluster.port_base + 15 + i, shards[i]) for i in (1, 2)}
        S.update(c=c, shards=shards, pooled=pooled, work=tmp_path_factory.mktemp("pooler"))
        yield
    finally:
        for d in dirs:
            stop_bouncer(d)


def test_a_the_poolers_pool_by_transaction():
    dsn = S["pooled"]["shard_1"]
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=None) as a, \
            psycopg.connect(dsn, autocommit=True, prepare_threshold=None) as b:
        first = a.execute("SELECT pg_backend_pid()").fetchone()[0]
        a.execute("SET id_gen.route_version = 7")  # a session SET, as a client must not declare it
        b.execute("BEGIN")
        leaked = b.execute("SELECT pg_backend_pid(), current_setting('id_gen.route_version')").fetchone()
        lost = a.execute("SELECT pg_backend_pid(), current_setting('id_gen.route_version')").fetchone()
        b.execute("ROLLBACK")
    assert leaked == (first, "7"), f"another client's transaction got the server connection and its SET: {leaked}"
    assert lost[0] != first and lost[1] == "0", f"the client's next statement ran elsewhere, without its SET: {lost}"


def test_b_three_clients_write_through_the_poolers_while_genes_move_and_a_range_splits():
    c, work, pooled = S["c"], S["work"], S["pooled"]
    (work / "owners").write_text(" ".join(str(o) for o in range(1, 401)))
    readers = c.column("SELECT o FROM generate_series(1001, 200000) o WHERE id_gen.shard_gene(o::bigint) <= 16383 LIMIT 10")
    (work / "readers").write_text(" ".join(map(str, readers)))
    S["reader_owner"] = readers[0]
    # The Python client unchanged: it prepares nothing unless asked (pool_kwargs).
    clients = routing_clients.write_while_genes_move(c, pooled, work, 400, 200, 100)
    r = clients.result("load")
    print(f"through PgBouncer: Python {r['committed']} transactions ({r['errors']} errors), "
          f"Rust {clients.result('rust')}, Node.js {clients.result('node')}")
    assert r["failed"] == 0 and r["committed"] > 600 and r["empty_reads"] == 0, \
        {k: r[k] for k in ("failed", "committed", "errors", "empty_reads")}
    log = {int(k): v for k, v in r["log"].items()}
    rows_by_owner = {o: [n, int(s)] for o, n, s in c.execute(
        "SELECT owner_id, count(*), sum(amount) FROM orders WHERE note IS NULL GROUP BY owner_id")}
    bad = [(o, log.get(o), rows_by_owner.get(o)) for o in set(log) | set(rows_by_owner) if log.get(o) != rows_by_owner.get(o)]
    assert not bad, f"the rows per owner equal the Python clients' log ({len(bad)} owners differ: {bad[:3]})"
    for note in ("rust", "node"):
        result = clients.result(note)
        assert result["errors"] == 0, f"{note}: {result}"
        assert c.one(f"SELECT count(*) FROM orders WHERE note = '{note}'") == result["tx"], f"every insert of the {note} client"


def test_c_stale_routes_through_the_poolers():
    from id_gen_client import Router

    c, pooled, work = S["c"], S["pooled"], S["work"]
    owner = S["reader_owner"]
    count = "SELECT count(*) FROM orders WHERE owner_id = %s"
    go = work / "node_go"
    with open(work / "stale.json", "w") as out, open(work / "stale.err", "w") as err:
        node = subprocess.Popen([*NODE_CLIENT, "stale", c.dsn(), json.dumps(pooled), str(owner), str(go)], stdout=out, stderr=err)
    try:
        args = dict(listen=False, refresh_interval=0)
        with Router(c.dsn(), pooled, **args) as r, Router(c.dsn(), pooled, **args) as r2:
            poll_until("the Node.js routers read the routes", lambda: "ready" in (work / "stale.err").read_text(), True, 30)
            before = r.shard_for_owner(owner)
            back = "shard_1" if before == "shard_2" else "shard_2"
            c.execute(f"CALL id_gen.move_genes(0, 16383, '{back}')")
            # The move told both shards the new version before it returned (a shard that has
            # not been told cannot tell a stale read by owner from a current one).
            assert c.one("SELECT bool_and(up_to_date) FROM id_gen.route_push_status"), \
                c.execute("SELECT * FROM id_gen.route_push_status")
            go.touch()
            n = r.transaction(lambda conn: conn.execute(count, (owner,)).fetchone()[0], owner=owner)
            m = r2.execute(count, (owner,), owner=owner)[0][0]
            stats = (r.stats["retries_moved"], r2.stats["retries_moved"], r.shard_for_owner(owner))
        rc = node.wait(timeout=120)
    finally:
        if node.poll() is None:
            node.kill()
    rows = c.one(f"SELECT count(*) FROM orders WHERE owner_id = {owner}")
    assert rows > 0 and n == m == rows, f"Python's transaction and execute found the owner's {rows} rows: {n}, {m}"
    assert stats == (1, 1, back), f"each met IG001 once and went to {back}: {stats}"
    assert rc == 0, (work / "stale.err").read_text()
    js = json.loads((work / "stale.json").read_text())
    assert (js["before"], js["after"]) == (before, back) and int(js["viaTransaction"]) == int(js["viaExecute"]) == rows, js
    assert min(js["retriesMoved"]) >= 1 and js["idIsBigInt"] and js["idShard"] == back, js
