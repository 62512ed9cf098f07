"""Zero-hop routing (docs/routing-protocol.md): a coordinator and two shards (wal_level =
logical), applications that route by themselves. (Ported from tests/e2e/16_routing.sh with
the same assertions; its fixed sleeps became polls on what the clients committed.)

(a) the protocol in SQL: route_version() grows with each route change and NOTIFY
    id_gen_routes carries it; route_map reads routes and version together; the shards are
    told the version; on a shard, a write of a gene it does not own, a lookup by id, a
    generic-plan lookup and an owner's id-range read of such genes fail with IG001 (never
    23514, never an empty result), while a scan without an id predicate works; SET
    id_gen.route_version older than the shard's fails with IG001, the current one works, and
    so does a version declared by a statement's leading comment (simple and extended
    protocol, prepared or not);
    route_claim refuses stale versions and genes not owned (IG001) and fenced genes (IG002),
    and so do writes and id reads of a fenced partition.
(b) Python clients (id_gen_client.Router: no coordinator in the data path) insert and update
    rows of all owners while a quarter of the genes moves to the other shard and then a range
    splits: 0 failed transactions, the clients' log equals the rows per owner (count and
    sum), a reader of a fixed set of owners never gets an empty answer; a Rust client
    (clients/rust) writes at the same time.
(c) a client with stale routes (no LISTEN) gets IG001 from the old shard, not an empty
    result, and succeeds after refreshing, with a claim (claim() and transaction()) and with
    the version declared per statement (execute()); Router.next_id gives an id of the owner's
    gene. The same with the asyncio AsyncRouter (the genes move back), whose listening twin
    learns the new version by NOTIFY.
    A Node.js client (clients/node, through node_client.js) writes at the same time too, and
    with stale routes (no LISTEN, no poll) its transaction and execute meet IG001 and find the
    owner's rows on the new shard, its nextId an id (a BigInt) of the owner's gene.
(d) the clients compute the extension's genes: the check values and 10 000 random bigint
    and text owners (Python, Rust, Node.js); and clients/gene-vectors.json, which every
    client's unit tests read, still holds the extension's genes of its 30 000 owners.
"""
import json
import os
import random
import subprocess

import psycopg
from psycopg import pq
import pytest

from harness import LOGICAL as LOGICAL_BASE
from harness import coordinator_with_shards, poll_until

import routing_clients
from routing_clients import NODE_CLIENT, REPO, RUST_TOOL
LOGICAL = [*LOGICAL_BASE, "max_connections = 60"]
S = {}


@pytest.fixture(scope="module", autouse=True)
def servers(cluster, tmp_path_factory):
    routing_clients.build()
    c, shards = coordinator_with_shards(cluster, coordinator_conf=["max_connections = 60"], shard_conf=LOGICAL)
    S["c"] = c
    S.update(shards)
    S["shards"] = {f"shard_{i}": S[i].dsn() for i in (1, 2)}
    S["work"] = tmp_path_factory.mktemp("routing")
    yield


def test_a_protocol_in_sql():
    c, s1, s2 = S["c"], S[1], S[2]
    v1 = c.one("SELECT id_gen.route_version()")
    assert v1 == 3, "route_version() after three set_route calls"
    assert c.one("SELECT count(*) || '/' || count(DISTINCT version) || '/' || min(version) FROM id_gen.route_map") \
        == f"3/1/{v1}", "route_map: the three ranges with the current version"
    # NOTIFY id_gen_routes with the new version, at commit.
    with c.connect() as listener, c.connect() as writer:
        listener.execute("LISTEN id_gen_routes")
        with writer.transaction():
            writer.execute("SELECT id_gen.set_route(49151, 'shard_2')")
        got = [n.payload for n in listener.notifies(timeout=5, stop_after=1)]
    v2 = c.one("SELECT id_gen.route_version()")
    assert got == [str(v2)], "NOTIFY id_gen_routes carried the new version"
    assert v2 > v1, "set_route raised the version"
    c.execute("SELECT id_gen.push_route_state(true)")
    for i, s in ((1, s1), (2, s2)):
        assert s.one("SELECT version FROM id_gen.shard_route_state") == v2, f"shard_{i} was told route version {v2}"
        assert s.one("""SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                        WHERE i.inhparent = 'orders'::regclass AND pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT'""") \
            == "orders_not_owned", f"shard_{i}: the tombstone partition"
    assert c.one("SELECT bool_and(up_to_date) FROM id_gen.route_push_status"), "route_push_status: every shard up to date"

    o1 = c.one("SELECT o FROM generate_series(1, 100000) o WHERE id_gen.shard_gene(o::bigint) <= 16383 LIMIT 1")
    o2 = c.one("SELECT o FROM generate_series(1, 100000) o WHERE id_gen.shard_gene(o::bigint) >= 32768 LIMIT 1")
    g1, g2 = c.one(f"SELECT id_gen.shard_gene({o1}::bigint)"), c.one(f"SELECT id_gen.shard_gene({o2}::bigint)")
    id1, id2 = c.one(f"SELECT id_gen.compose_id({g1}, 7)"), c.one(f"SELECT id_gen.compose_id({g2}, 7)")
    s1.execute(f"INSERT INTO orders VALUES ({id1}, {o1}, 10)")
    s2.execute(f"INSERT INTO orders VALUES ({id2}, {o2}, 20)")
    e = s2.error(f"INSERT INTO orders VALUES ({id1} + 1, {o1}, 10)")
    assert e is not None and e.sqlstate == "IG001", "a write of a gene the shard does not own: IG001, not 23514"
    assert e.diag.message_detail == f'The shard is at route version {v2}; gene {g1} is on shard "shard_1".', \
        "its DETAIL names the version and the owner"
    assert s2.sqlstate(f"SELECT * FROM orders WHERE id = {id1}") == "IG001", \
        "a lookup by id of a gene the shard does not own: IG001, not an empty result"
    assert s1.one(f"SELECT amount FROM orders WHERE id = {id1}") == 10, "the owner answers it"
    generic = ("SET plan_cache_mode = force_generic_plan", "PREPARE p(bigint) AS SELECT amount FROM orders WHERE id = $1")
    assert s2.sqlstate(*generic, f"EXECUTE p({id2})", f"EXECUTE p({id1})") == "IG001", "a generic-plan lookup of a gene not owned"
    assert s2.one(*generic, f"EXECUTE p({id2})") == 20, "the same generic plan for an owned gene answers"
    assert s2.one(f"EXPLAIN (COSTS OFF) SELECT * FROM orders WHERE id = {id1}").split(" on ")[0] \
        == "Index Scan using orders_not_owned_pkey", "EXPLAIN of such a lookup still works (nothing runs)"
    assert s2.one(f"SELECT amount FROM orders WHERE id = (SELECT {id2})") == 20, \
        "a lookup by an id from a subquery (pruned when it runs) of an owned gene answers"
    assert s2.sqlstate(f"SELECT amount FROM orders WHERE id = (SELECT {id1})") == "IG001", \
        "the same for a gene not owned: IG001 when the scan runs"
    assert s2.sqlstate(f"SELECT count(*) FROM orders WHERE id BETWEEN id_gen.gene_first_id({g1}) AND id_gen.gene_last_id({g1})") \
        == "IG001", "an owner's id-range read of a gene not owned"
    assert s2.sqlstate(f"SELECT count(*) FROM orders WHERE id >= id_gen.gene_first_id({g1}) "
                       f"AND id <= id_gen.gene_last_id({g1}) AND owner_id = {o1}") == "IG001", "the same with another predicate"
    assert s2.one("SELECT count(*) FROM orders") == 1, "a scan without an id predicate sees the shard's own rows"
    assert s2.one(f"SELECT count(*) FROM orders WHERE owner_id = {o1}") == 0, "and so does one with a predicate on another column"
    assert s2.sqlstate(f"UPDATE orders SET amount = 0 WHERE id = {id1}") == "IG001", "an UPDATE by id of a gene not owned"
    assert s2.sqlstate(f"DELETE FROM orders WHERE id = {id1}") == "IG001", "a DELETE by id of a gene not owned"
    old = v2 - 1
    assert s2.sqlstate(f"SET id_gen.route_version = {old}", f"SELECT amount FROM orders WHERE id = {id2}") == "IG001", \
        "SET id_gen.route_version older than the shard's"
    assert s2.one(f"SET id_gen.route_version = {v2}", f"SELECT amount FROM orders WHERE id = {id2}") == 20, \
        "the current version: the statement runs"
    assert s2.one(f"SET id_gen.route_version = {old}", "SELECT 1") == 1, "a statement that touches no distributed table is not checked"
    assert s2.sqlstate(f"/* id_gen.route_version={old} */ SELECT amount FROM orders WHERE id = {id2}") == "IG001", \
        "a version declared by the statement's leading comment, older than the shard's"
    assert s2.one(f"/*id_gen.route_version = {v2}*/SELECT amount FROM orders WHERE id = {id2}") == 20, \
        "the current version declared by the comment: the statement runs"
    assert s2.one(f"SET id_gen.route_version = {old}", f"/* id_gen.route_version={v2} */ SELECT amount FROM orders WHERE id = {id2}") \
        == 20, "the comment takes the place of the setting for its statement"
    assert s2.sqlstate(f"SELECT /* id_gen.route_version={old} */ amount FROM orders WHERE id = {id2}") is None, \
        "a comment that is not the statement's first thing declares nothing"
    s2.execute("CREATE FUNCTION amount_of(bigint) RETURNS bigint LANGUAGE plpgsql "
               "AS $$BEGIN RETURN (SELECT amount FROM orders WHERE id = $1); END$$")
    assert s2.sqlstate(f"/* id_gen.route_version={old} */ SELECT amount_of({id2})") == "IG001", \
        "the comment holds for the transaction: a function's statement on a distributed table is checked too"
    assert s2.one(f"/* id_gen.route_version={v2} */ SELECT amount_of({id2})") == 20, "the same at the current version"
    assert s2.sqlstate(f"/* id_gen.route_version={old} */ SELECT 1; SELECT amount FROM orders WHERE id = {id2}") \
        == "IG001", "and so is the next statement of the same implicit transaction"
    assert s2.one(f"/* id_gen.route_version={old} */ SELECT 1", f"SELECT amount FROM orders WHERE id = {id2}") == 20, \
        "but not a statement of a later transaction"
    with s2.connect() as conn:  # the extended protocol, as the clients send it, prepared or not
        for prepare in (False, True):
            for version, want in ((old, "IG001"), (v2, None)):
                try:
                    conn.execute(f"/* id_gen.route_version={version} */ SELECT amount FROM orders WHERE id = %s",
                                 (id2,), prepare=prepare).fetchall()
                    got = None
                except psycopg.Error as e:
                    got = e.sqlstate
                assert got == want, f"a comment-declared version {version} over the extended protocol (prepare={prepare})"
    with s2.connect() as conn, conn.transaction():
        claimed = conn.execute(f"SELECT id_gen.route_claim({g2}, {v2})").fetchone()[0]
        amount = conn.execute(f"SELECT amount FROM orders WHERE id = {id2}").fetchone()[0]
    assert (claimed, amount) == (v2, 20), "route_claim of an owned gene at the current version returns the shard's version"
    assert s2.sqlstate(f"SELECT id_gen.route_claim({g2}, {old})") == "IG001", "route_claim with a stale version"
    assert s2.sqlstate(f"SELECT id_gen.route_claim({g1}, {v2})") == "IG001", "route_claim of a gene not owned"
    assert s2.sqlstate(f"SELECT id_gen.route_claim(70000, {v2})") == "22023", "route_claim of a gene out of range"
    # The claim carried on BEGIN (routing protocol 2), sent as the clients send it: one
    # simple-protocol message.
    assert s2.one("SELECT pg_catalog.current_setting('id_gen.routing_protocol', true)") == "2", \
        "the shard offers the claim on BEGIN"
    with s2.connect() as conn:
        sqlstate, status = begin_claim(conn, f"/* id_gen.route_claim={g2},{v2} */ BEGIN")
        assert (sqlstate, status) == (None, "INTRANS"), "a claim on BEGIN of an owned gene at the current version"
        assert conn.execute("SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND mode = 'RowExclusiveLock' "
                            "AND relation IN (SELECT 'orders'::regclass UNION ALL "
                            "SELECT inhrelid FROM pg_inherits WHERE inhparent = 'orders'::regclass)").fetchone()[0] == 2, \
            "it holds the claim's locks: the table and the gene's partition, as route_claim takes them"
        assert conn.execute(f"SELECT amount FROM orders WHERE id = {id2}").fetchone()[0] == 20
        conn.execute("COMMIT")
        for text, want, why in (
                (f"/* id_gen.route_claim={g2},{old} */ BEGIN", "IG001", "a stale version"),
                (f"/* id_gen.route_claim={g1},{v2} */ START TRANSACTION", "IG001", "a gene not owned"),
                (f"/* id_gen.route_claim=70000,{v2} */ BEGIN", "22023", "a gene out of range"),
                ("/* id_gen.route_claim=12 */ BEGIN", "22023", "a malformed claim")):
            sqlstate, status = begin_claim(conn, text)
            assert (sqlstate, status) == (want, "IDLE"), f"a claim on BEGIN of {why}: {want}, and no transaction is open"
        sqlstate, status = begin_claim(conn, f"/* id_gen.route_claim={g2},{v2} */ BEGIN ISOLATION LEVEL REPEATABLE READ")
        assert (sqlstate, status) == (None, "INTRANS"), "a claim on BEGIN with options"
        assert conn.execute("SHOW transaction_isolation").fetchone()[0] == "repeatable read", "the options still apply"
        conn.execute("ROLLBACK")
        assert begin_claim(conn, f"/* id_gen.route_claim={g1},{v2} */ BEGIN; SELECT 1") == ("IG001", "IDLE"), \
            "a refused claim on BEGIN stops the rest of the message"
        assert begin_claim(conn, f"SELECT 1; /* id_gen.route_claim={g2},{v2} */ BEGIN") == (None, "INTRANS"), \
            "a claim on BEGIN after another statement of the message (18 locates BEGIN after its comment)"
        conn.execute("ROLLBACK")
        conn.execute("BEGIN")
        assert begin_claim(conn, f"/* id_gen.route_claim={g2},{v2} */ BEGIN") == ("25001", "INERROR"), \
            "a claim on BEGIN inside an open transaction block is refused (what ran before it ran unclaimed)"
        conn.execute("ROLLBACK")
    # A fence (as a move's cut-over sets it) on shard_1's partition of genes 0 .. 16383.
    s1.execute("SELECT id_gen.shard_fence(999, 'shard_2', ARRAY['public.orders_g0_16383'])")
    assert s1.sqlstate(f"SELECT id_gen.route_claim({g1}, {v2})") == "IG002", "route_claim of a fenced gene"
    with s1.connect() as conn:
        assert begin_claim(conn, f"/* id_gen.route_claim={g1},{v2} */ BEGIN") == ("IG002", "IDLE"), \
            "a claim on BEGIN of a fenced gene"
    assert s1.sqlstate(f"INSERT INTO orders VALUES ({id1} + 2, {o1}, 10)") == "IG002", "a write of a fenced gene"
    assert s1.sqlstate(f"SELECT * FROM orders WHERE id = {id1}") == "IG002", "an id read of a fenced gene"
    assert s1.one("SELECT count(*) FROM orders") == 1, "a scan without an id predicate still works"
    s1.execute("SELECT id_gen.shard_unfence(ARRAY['public.orders_g0_16383'])")
    with s1.connect() as conn, conn.transaction():
        assert conn.execute(f"SELECT id_gen.route_claim({g1}, {v2}) > 0").fetchone()[0], \
            "after the fence is lifted the claim succeeds"
    s1.execute("DELETE FROM orders")
    s2.execute("DELETE FROM orders")


def begin_claim(conn, text):
    """Sends `text` as one simple-protocol message on `conn` (in autocommit): the SQLSTATE
    of its error (None without one) and the transaction status after it."""
    if not conn.autocommit:
        conn.autocommit = True
    result = conn.pgconn.exec_(text.encode())
    sqlstate = result.error_field(pq.DiagnosticField.SQLSTATE)
    return (sqlstate.decode() if sqlstate else None), pq.TransactionStatus(conn.pgconn.transaction_status).name


def test_b_clients_while_genes_move_and_a_range_splits():
    c, work, shards = S["c"], S["work"], S["shards"]
    (work / "owners").write_text(" ".join(str(o) for o in range(1, 601)))
    # Readers: owners whose genes move (0 .. 16383) or split (49152 .. 65535).
    readers = c.column("""
        (SELECT o FROM generate_series(1001, 200000) o WHERE id_gen.shard_gene(o::bigint) <= 16383 LIMIT 15)
        UNION ALL (SELECT o FROM generate_series(1001, 200000) o WHERE id_gen.shard_gene(o::bigint) >= 49152 LIMIT 15)""")
    (work / "readers").write_text(" ".join(map(str, readers)))
    S["reader_owner"] = readers[0]
    clients = routing_clients.write_while_genes_move(c, shards, work, 600, 400, 150)
    r = clients.result("load")
    retries = r["router"].get("retries_moved", 0) + r["router"].get("retries_fenced", 0)
    print(f"Python clients: {r['committed']} transactions, {r['reads']} reads, {retries} retries; "
          f"latency p50 {r['p50_ms']} / p99 {r['p99_ms']} / max {r['max_ms']} ms; errors {r['errors']}")
    assert r["committed"] > 1000, "the Python clients committed transactions"
    assert r["failed"] == 0, "no failed transaction (moves and splits included)"
    assert r["reads"] > 100, "the reader read"
    assert r["empty_reads"] == 0, "the reader never got an empty answer for an owner with rows"
    assert retries > 0, "the clients met the moved or fenced errors and retried"
    assert r["version"] == c.one("SELECT id_gen.route_version()"), "the Router followed the route version (LISTEN)"
    # The clients' log against the rows (through the coordinator), per owner.
    log = {int(k): v for k, v in r["log"].items()}
    rows_by_owner = {o: [n, int(s)] for o, n, s in c.execute(
        "SELECT owner_id, count(*), sum(amount) FROM orders WHERE note IS NULL GROUP BY owner_id")}
    bad = [(o, log.get(o), rows_by_owner.get(o)) for o in set(log) | set(rows_by_owner) if log.get(o) != rows_by_owner.get(o)]
    assert not bad, f"the rows per owner (count and sum) equal the clients' log ({len(bad)} owners differ of {len(log)}: {bad[:3]})"
    rust_result = clients.result("rust")
    print(f"Rust client: {rust_result}")
    assert rust_result["tx"] > 100, "the Rust client committed inserts during the move and the split"
    assert rust_result["errors"] == 0, "the Rust client had no failed transaction"
    assert c.one("SELECT count(*) FROM orders WHERE note = 'rust'") == rust_result["tx"], "every insert of the Rust client is there"
    node_result = clients.result("node")
    print(f"Node.js client: {node_result}")
    assert node_result["tx"] > 100, "the Node.js client committed inserts during the move and the split"
    assert node_result["errors"] == 0, f"the Node.js client had no failed transaction: {node_result}"
    assert c.one("SELECT count(*) FROM orders WHERE note = 'node'") == node_result["tx"], "every insert of the Node.js client is there"
    assert int(node_result["version"]) == c.one("SELECT id_gen.route_version()"), "the Node.js Router followed the route version"


def test_c_a_client_with_stale_routes():
    from id_gen_client import Router

    c, shards, owner = S["c"], S["shards"], S["reader_owner"]
    with Router(c.dsn(), shards, listen=False, refresh_interval=0) as r, \
            Router(c.dsn(), shards, listen=False, refresh_interval=0) as r2:
        before = r.shard_for_owner(owner)
        r2.execute("SELECT 1 FROM orders WHERE id = 0", owner=owner)  # a connection of the old shard in its pool
        c.execute("CALL id_gen.move_genes(0, 16383, 'shard_1')")
        g = r.gene(owner)
        span = (g << 47, (g << 47) | ((1 << 47) - 1))
        # The old shard refuses the read (IG001), not an empty answer.
        with psycopg.connect(shards[before], autocommit=True) as s:
            with pytest.raises(psycopg.Error) as refused:
                s.execute("SELECT count(*) FROM orders WHERE id BETWEEN %s AND %s", span).fetchone()
        with r.claim(owner=owner) as conn:
            n = conn.execute("SELECT count(*) FROM orders WHERE owner_id = %s AND id BETWEEN %s AND %s",
                             (owner, *span)).fetchone()[0]
        nid = r.next_id("orders", owner)
        # One statement with the version declared with it: retried the same way.
        m = r2.execute("SELECT count(*) FROM orders WHERE owner_id = %s AND id BETWEEN %s AND %s", (owner, *span),
                       owner=owner)[0][0]
        # A body that swallows a statement's error does not get a COMMIT reported as done.
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):
            with r.claim(owner=owner) as conn:
                try:
                    conn.execute("SELECT 1 / 0")
                except psycopg.errors.DivisionByZero:
                    pass
        assert (before, refused.value.sqlstate, r.shard_for_owner(owner)) == ("shard_2", "IG001", "shard_1"), \
            "stale routes: IG001 from the old shard, then the new one after a refresh"
        assert n > 0 and r.stats["retries_moved"] > 0, "transaction() retried after IG001 and found the rows"
        assert r.shard_for_id(nid) == r.shard_for_owner(owner) and (nid >> 47) == g, "next_id gives an id of the owner's gene"
        assert m == n and r2.stats["retries_moved"] > 0, "execute() retried after IG001 and found the same rows"
        S["stale_read"] = (owner, span, n)


def test_c_the_async_router_with_stale_routes():
    import asyncio

    from id_gen_client import AsyncRouter

    c, shards = S["c"], S["shards"]
    owner, span, rows = S["stale_read"]
    count = "SELECT count(*) FROM orders WHERE owner_id = %s AND id BETWEEN %s AND %s"

    async def scenario():
        async with AsyncRouter(c.dsn(), shards, listen=False, refresh_interval=0) as stale, \
                AsyncRouter(c.dsn(), shards, listen=False, refresh_interval=0) as stale2, \
                AsyncRouter(c.dsn(), shards, refresh_interval=0) as listening:
            before, version = stale.shard_for_owner(owner), listening.version
            await asyncio.to_thread(c.execute, "CALL id_gen.move_genes(0, 16383, 'shard_2')")

            async def body(conn):
                return (await (await conn.execute(count, (owner, *span))).fetchone())[0]

            n = await stale.transaction(body, owner=owner)
            m = (await stale2.execute(count, (owner, *span), owner=owner))[0][0]
            nid = await stale.next_id("orders", owner)
            deadline = asyncio.get_running_loop().time() + 30
            while listening.version == version and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.05)
            stats = (stale.stats["retries_moved"], stale2.stats["retries_moved"])
            return before, stale.shard_for_owner(owner), n, m, nid, stats, (version, listening.version)

    before, after, n, m, nid, stats, versions = asyncio.run(scenario())
    assert (before, after) == ("shard_1", "shard_2"), "the genes moved back to shard_2"
    assert n == rows and m == rows, f"AsyncRouter.transaction and execute found the owner's {rows} rows: {n}, {m}"
    assert min(stats) >= 1, f"transaction and execute each retried after IG001: {stats}"
    assert nid >> 47 == (span[0] >> 47), "AsyncRouter.next_id gives an id of the owner's gene"
    assert versions[1] > versions[0], f"the listening AsyncRouter learned the new version by NOTIFY within 30 s: {versions}"


def test_c_the_node_router_with_stale_routes():
    c, shards, work = S["c"], S["shards"], S["work"]
    owner, span, rows = S["stale_read"]
    n_owner = c.one(f"SELECT count(*) FROM orders WHERE owner_id = {owner}")
    go = work / "node_go"
    with open(work / "stale.json", "w") as out, open(work / "stale.err", "w") as err:
        node = subprocess.Popen([*NODE_CLIENT, "stale", c.dsn(), json.dumps(shards), str(owner), str(go)], stdout=out, stderr=err)
    try:
        poll_until("the Node.js routers read the routes", lambda: "ready" in (work / "stale.err").read_text(), True, 30)
        back = "shard_1" if c.one(f"SELECT id_gen.route_owner({owner}::bigint)") == "shard_2" else "shard_2"
        c.execute(f"CALL id_gen.move_genes(0, 16383, '{back}')")
        go.touch()
        rc = node.wait(timeout=120)
    finally:
        if node.poll() is None:
            node.kill()
    assert rc == 0, f"the Node.js client failed: {(work / 'stale.err').read_text()}"
    r = json.loads((work / "stale.json").read_text())
    assert (r["after"], r["before"] != back) == (back, True), f"stale routes, then the new shard: {r}"
    assert int(r["viaTransaction"]) == int(r["viaExecute"]) == n_owner, f"transaction and execute found the owner's rows: {r}"
    assert min(r["retriesMoved"]) >= 1, f"transaction and execute each retried after IG001: {r}"
    assert r["idIsBigInt"] and int(r["id"]) >> 47 == span[0] >> 47 and r["idShard"] == back, f"nextId: {r}"


def test_d_clients_compute_the_extensions_genes():
    from id_gen_client import gene

    c = S["c"]
    rng = random.Random(16)
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-éü中文🙂"
    owners = [("b", v) for v in (42, 0, 1, 45346343212, -1, -(1 << 63), (1 << 63) - 1)] + [("t", "alice")]
    owners += [("b", rng.randint(-(1 << 63), (1 << 63) - 1)) for _ in range(10000)]
    owners += [("t", "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 24)))) for _ in range(10000)]
    lines = "".join(f"{k} {v}\n" for k, v in owners)
    with c.connect() as conn:
        conn.execute("CREATE TEMP TABLE g_in (n serial, kind text, v text)")
        with conn.cursor().copy("COPY g_in (kind, v) FROM STDIN") as copy:
            for k, v in owners:
                copy.write_row((k, str(v)))
        in_sql = [row[0] for row in conn.execute(
            "SELECT CASE WHEN kind = 'b' THEN id_gen.shard_gene(v::bigint) ELSE id_gen.shard_gene(v) END FROM g_in ORDER BY n")]
    in_python = [gene(v) for _, v in owners]
    in_rust = [int(x) for x in subprocess.run([RUST_TOOL, "genes"], input=lines, text=True, check=True, timeout=300,
                                              stdout=subprocess.PIPE).stdout.split()]
    assert len(in_sql) == 20008, "the extension's genes of 20 008 owners (check values, bounds, random bigints and texts)"
    assert in_sql[:4] + in_sql[7:8] == [16043, 55408, 24031, 14299, 13795], "the published check values"
    in_node = [int(x) for x in subprocess.run([*NODE_CLIENT, "genes"], input=lines, text=True, check=True, timeout=300,
                                              stdout=subprocess.PIPE).stdout.split()]
    assert in_python == in_sql, "Python's genes equal the extension's"
    assert in_rust == in_sql, "Rust's genes equal the extension's"
    assert in_node == in_sql, "Node.js's genes equal the extension's"
    # The shared vectors that every client's unit tests read still hold the extension's genes.
    with open(os.path.join(REPO, "clients", "gene-vectors.json"), encoding="utf-8") as f:
        vectors = json.load(f)
    with c.connect() as conn:
        for kind in ("bigint", "text", "uuid"):
            owners_of_kind = [o for o, _ in vectors[kind]]
            got = [g for (g,) in conn.execute(
                f"SELECT id_gen.shard_gene(o) FROM unnest(%s::{kind}[]) WITH ORDINALITY u(o, n) ORDER BY n", (owners_of_kind,))]
            assert len(got) == 10000 and got == [g for _, g in vectors[kind]], f"clients/gene-vectors.json ({kind}) is stale"
