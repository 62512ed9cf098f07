"""Router logic without a server: psycopg.connect and ConnectionPool are replaced by fakes
of a coordinator (routes, version, NOTIFY; it can be down) and of shards (the probe of their
routing protocol, the claim in both forms with its IG001/IG002, the declared route version,
optionally behind a transaction-mode pooler)."""
import os
import re
import types
import threading
import time
import unittest
import uuid
from unittest import mock

import psycopg
from psycopg import pq

import id_gen_client.router as router_module
from id_gen_client import _routes
from id_gen_client import (ROUTE_CHANGED, ROUTE_FENCED, NoRouteError, RouteRetryExhausted,
                           Router, RoutingError, gene)


# The probe of a shard's routing protocol, and the claim in either form (routing protocol 2:
# a comment on BEGIN; every shard: BEGIN and a SELECT of route_claim), as a shard reads them.
PROBE = "SELECT pg_catalog.current_setting('id_gen.routing_protocol', true)"
CLAIM_ON_BEGIN = re.compile(r"/\* id_gen\.route_claim=(\d+),(\d+) \*/ BEGIN")
CLAIM_STATEMENT = re.compile(r"SELECT id_gen\.route_claim\((\d+), (\d+)\)")


def claim_on_begin(g, version):
    return f"/* id_gen.route_claim={g},{version} */ BEGIN"


def claim_statement(g, version):
    return f"BEGIN; SELECT id_gen.route_claim({g}, {version})"


def is_claim(sent):
    """Whether a message a shard connection received is a claim, in either form."""
    return bool(CLAIM_ON_BEGIN.fullmatch(sent) or sent.startswith("BEGIN; SELECT id_gen.route_claim("))


def sql_error(code):
    e = psycopg.DatabaseError(f"fake {code}")
    e.sqlstate = code
    return e


def wait_until(what, want, get, timeout=5.0):
    """Polls get() until it returns want, for at most timeout seconds; then fails with the
    last value seen."""
    deadline = time.monotonic() + timeout
    while True:
        got = get()
        if got == want:
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting for {what}: wanted {want!r}, last seen {got!r}")
        time.sleep(0.005)


def lost_connection(conn, code=None):
    """Ends the fake connection as a server that goes away does: FATAL with `code`
    (57P01: terminating connection due to administrator command), or no answer at all."""
    conn.closed = conn.broken = True
    e = psycopg.OperationalError(f"fake: the connection was lost ({code or 'no answer'})")
    if code is not None:
        e.sqlstate = code
    return e


class Result:
    def __init__(self, rows=(), description=None):
        self.rows = list(rows)
        self.rowcount = len(self.rows)
        self.description = description

    def fetchall(self):
        return self.rows

    def fetchone(self):
        return self.rows[0] if self.rows else None


class Coordinator:
    """Routes (upper, shard) and a version; changes notify the listeners."""

    def __init__(self, uppers, version=1):
        self.uppers, self.version = list(uppers), version
        self.cond = threading.Condition()
        self.queues = []
        self.route_reads = 0
        self.version_polls = 0
        self.connects = 0
        self.down = False  # connections and route reads fail, as with a stopped coordinator
        self.listen_fails = False  # LISTEN fails (0A000), as behind a pooler that refuses it
        self.listen_attempts = self.listens = 0  # LISTENs tried, and those that succeeded

    def change(self, uppers):
        with self.cond:
            self.uppers, self.version = list(uppers), self.version + 1
            for q, wake in self.queues:
                q.append(str(self.version))
                os.write(wake, b"x")
            self.cond.notify_all()

    def owner_of(self, g):
        return next((s for up, s in self.uppers if g <= up), None)


class CoordinatorConn:
    def __init__(self, coord):
        self.coord, self.closed, self.broken, self.queue = coord, False, False, None
        self.handlers, self.pipe = [], os.pipe()  # the pipe stands in for the socket

    def execute(self, sql, params=None):
        c = self.coord
        if c.down:
            self.closed = True
            raise psycopg.OperationalError("fake: the coordinator is down")
        if sql.startswith("LISTEN"):
            with c.cond:
                c.listen_attempts += 1
                if c.listen_fails:
                    raise sql_error("0A000")
                c.listens += 1
                self.queue = []
                c.queues.append((self.queue, self.pipe[1]))
            return Result()
        if sql == "SELECT 1":  # psycopg < 3.2: a query delivers notifications to handlers
            os.read(self.pipe[0], 1024)
            with c.cond:
                payloads, self.queue[:] = list(self.queue), []
            for p in payloads:
                for h in self.handlers:
                    h(mock.Mock(payload=p))
            return Result([(1,)])
        if "ORDER BY lower_gene" in sql:
            c.route_reads += 1
            rows, lower = [], 0
            for up, shard in c.uppers:
                rows.append((lower, up, shard, c.version))
                lower = up + 1
            return Result(rows)
        if "NOT EXISTS" in sql:
            return Result([] if c.uppers else [(c.version,)])
        if sql == "SELECT id_gen.route_version()":
            c.version_polls += 1
            return Result([(c.version,)])
        raise AssertionError(sql)

    def notifies(self, timeout=None):
        with self.coord.cond:
            if not self.queue:
                self.coord.cond.wait(timeout)
            payloads, self.queue[:] = list(self.queue), []
        return [mock.Mock(payload=p) for p in payloads]

    def add_notify_handler(self, h):
        self.handlers.append(h)

    def remove_notify_handler(self, h):
        self.handlers.remove(h)

    def fileno(self):
        return self.pipe[0]

    def close(self):
        self.closed = True


# The socket of every fake shard connection (the routers' shard_timeout guard duplicates it;
# nothing waits on it, so the guard never fires).
FAKE_SOCKET = os.open(os.devnull, os.O_RDONLY)


class FakeLibpq:
    """conn.pgconn of a fake shard connection: exec_ goes through the fake's execute (its
    errors are raised as psycopg errors, as the Router's own check would raise them)."""
    def __init__(self, conn):
        self.conn = conn

    @property
    def socket(self):
        if self.conn.closed:
            raise psycopg.OperationalError("the connection is lost")
        return FAKE_SOCKET

    def finish(self):
        self.conn.closed = True

    @property
    def transaction_status(self):
        """In a block (BEGIN .. COMMIT/ROLLBACK) or idle, as libpq reports it."""
        return pq.TransactionStatus.INTRANS if self.conn.in_block else pq.TransactionStatus.IDLE

    def exec_(self, sql):
        self.conn.execute(sql.decode())
        return types.SimpleNamespace(status=pq.ExecStatus.COMMAND_OK)


class ServerSession:
    """A server connection of a shard: what SET declared there lasts as long as it does."""

    def __init__(self):
        self.declared = 0


class ShardConn:
    """A client connection of a shard. Each transaction (a statement in autocommit, or BEGIN ..
    COMMIT/ROLLBACK) runs on one server session: the
    connection's own, or behind a transaction-mode pooler (cluster.transaction_pooling)
    the pooler's next one, so a SET and the statement after it may meet different ones."""

    READ = "SELECT amount FROM orders WHERE owner_id = %s"  # by owner: no id predicate

    def __init__(self, shard, cluster):
        self.shard, self.cluster = shard, cluster
        self.closed = self.broken = False
        self.log = []
        self.round_trips = 0
        self.pgconn = FakeLibpq(self)
        self.info = types.SimpleNamespace(encoding="utf-8")
        self.own_session = ServerSession()
        self.session = None  # the server session of the transaction under way
        self.local_version = None  # declared by a statement's leading comment, for its transaction
        self.in_block = False

    def execute(self, sql, params=None, prepare=None):
        self.log.append(sql)
        self.round_trips += 1
        declared = re.match(r"/\* id_gen\.route_version=(\d+) \*/ ", sql)
        if declared:  # a version declared by the statement's leading comment, for it alone
            self.local_version, sql = int(declared[1]), sql[declared.end():]
        try:
            result = Result()
            for statement in sql.split("; "):  # a simple-protocol message of several
                result = self._statement(statement, params)
            return result
        finally:
            self._end_of_statement()

    def _server(self):
        if self.session is None:
            self.session = (self.cluster.pooler_session(self.shard)
                            if self.cluster.transaction_pooling else self.own_session)
        return self.session

    def _end_of_statement(self):
        if not self.in_block:  # the transaction ended
            self.session, self.local_version = None, None

    def _statement(self, sql, params):
        cluster, coord, server = self.cluster, self.cluster.coord, self._server()
        if sql == "BEGIN":
            self.in_block = True
            return Result()
        if sql == PROBE:
            cluster.probes[self.shard] = cluster.probes.get(self.shard, 0) + 1
            if cluster.probe_lost:
                cluster.probe_lost -= 1
                raise lost_connection(self)
            if cluster.probe_error:
                raise cluster.probe_error
            return Result([(cluster.routing_protocol_of(self.shard),)], description=[("current_setting",)])
        m = CLAIM_ON_BEGIN.fullmatch(sql)
        if m:
            # From 0.7.16 on, BEGIN then the claim: a claim refused leaves no transaction open.
            # An older shard reads a comment, and a plain BEGIN.
            if cluster.routing_protocol_of(self.shard) is not None:
                self._claim(int(m[1]), int(m[2]))
            self.in_block = True
            return Result()
        if sql in ("COMMIT", "ROLLBACK"):
            self.in_block = False
            if sql == "COMMIT" and cluster.commit_lost:
                cluster.commit_lost = False
                raise lost_connection(self)
            return Result()
        m = CLAIM_STATEMENT.fullmatch(sql)
        if m:
            self._claim(int(m[1]), int(m[2]))
            return Result([(coord.version,)])
        m = re.fullmatch(r"SET id_gen\.route_version = (\d+)", sql)
        if m:
            server.declared = int(m[1])
            return Result()
        if sql == self.READ:
            # The first statement of the transaction touching a distributed table checks
            # the declared version; a read by owner of genes the shard lost finds nothing.
            declared = self.local_version if self.local_version is not None else server.declared
            if cluster.fences:
                cluster.fences -= 1
                raise sql_error(ROUTE_FENCED)
            if declared and declared < coord.version:
                raise sql_error(ROUTE_CHANGED)
            owns = coord.owner_of(gene(params[0])) == self.shard
            if owns:
                cluster.last_read_shard = self.shard
            return Result([(7,)] if owns else [], description=[("amount",)])
        if "gene_order_id" in sql:
            cluster.params.append((sql, params))
            return Result([(12345,)])
        return Result()

    def _claim(self, g, v):
        """route_claim(g, v), in either form: IG002 while fenced, the errors injected at the
        claim, IG001 for a gene this shard does not own or a stale version."""
        cluster, coord = self.cluster, self.cluster.coord
        if cluster.fences:
            cluster.fences -= 1
            raise sql_error(ROUTE_FENCED)
        if cluster.claim_error:
            raise cluster.claim_error
        if cluster.claim_lost:
            cluster.claim_lost -= 1
            raise lost_connection(self, "57P01")
        if coord.owner_of(g) != self.shard or v < coord.version:
            raise sql_error(ROUTE_CHANGED)


class Cluster:
    def __init__(self, uppers):
        self.coord = Coordinator(uppers)
        self.fences, self.claim_error, self.params = 0, None, []
        # Lost connections (clients/protocol-scenarios.json): connects to shard "a" refused,
        # claims that find the connection ended, the first COMMIT without an answer.
        self.connect_fails, self.claim_lost, self.commit_lost = 0, 0, False
        # Shard -> its id_gen.routing_protocol: '2' unless set here; None for a shard before
        # 0.7.16, which has no such setting and ignores a claim on BEGIN. Probes served per
        # shard; the next N probes find the connection lost; an error every probe raises.
        self.routing_protocol = {}
        self.probes, self.probe_lost, self.probe_error = {}, 0, None
        self.last_read_shard = None  # the shard of the last read by owner that found rows
        self.pools = {}
        self.transaction_pooling = False
        self.sessions = {}  # shard -> the pooler's server sessions, used round robin

    def connect(self, dsn, autocommit=False, **connect_options):
        assert dsn == "coord" and autocommit
        if self.coord.down:
            raise psycopg.OperationalError("fake: connection refused")
        self.coord.connects += 1
        return CoordinatorConn(self.coord)

    def routing_protocol_of(self, shard):
        return self.routing_protocol.get(shard, "2")

    def pooler_session(self, shard):
        sessions = self.sessions.setdefault(shard, [ServerSession(), ServerSession()])
        sessions.append(sessions.pop(0))
        return sessions[0]

    def pool(self, conninfo, **kwargs):
        cluster = self
        assert kwargs["kwargs"]["autocommit"] is True

        class Pool:
            def __init__(self):
                self.out, self.conns, self.closed = 0, [], False

            def getconn(self):
                if conninfo == "a" and cluster.connect_fails:
                    cluster.connect_fails -= 1
                    raise psycopg.OperationalError("fake: connection refused")
                self.out += 1
                conn = ShardConn(conninfo, cluster)
                self.conns.append(conn)
                return conn

            def putconn(self, conn):
                self.out -= 1

            def close(self):
                self.closed = True

        p = self.pools[conninfo] = Pool()
        return p


SHARDS = {"a": "a", "b": "b"}


class RouterTest(unittest.TestCase):
    def setUp(self):
        self.cluster = Cluster([(32767, "a"), (65535, "b")])
        for target, fake in [("psycopg.connect", self.cluster.connect),
                             ("ConnectionPool", self.cluster.pool)]:
            p = mock.patch.object(router_module.psycopg if "." in target else router_module,
                                  target.split(".")[-1], fake)
            p.start()
            self.addCleanup(p.stop)

    def router(self, **kw):
        kw.setdefault("listen", False)
        kw.setdefault("refresh_interval", 0)
        r = Router("coord", SHARDS, backoff_base=0.0001, backoff_max=0.001, **kw)
        self.addCleanup(r.close)
        return r

    def owner_on(self, shard):
        return next(o for o in range(1000) if self.cluster.coord.owner_of(gene(o)) == shard)

    def test_lookups(self):
        r = self.router()
        self.assertEqual(r.version, 1)
        self.assertEqual(r.routes, [(0, 32767, "a"), (32768, 65535, "b")])
        self.assertEqual([r.shard_for_gene(g) for g in (0, 32767, 32768, 65535)], ["a", "a", "b", "b"])
        self.assertEqual(r.shard_for_id((40000 << 47) | 5), "b")
        self.assertEqual(r.shard_for_owner("alice"), "a" if gene("alice") <= 32767 else "b")
        self.assertEqual(r.gene(42), 16043)

    def test_no_route(self):
        self.cluster.coord.uppers = [(100, "a"), (200, "elsewhere")]
        r = self.router()
        for g in (150, 300):
            with self.assertRaises(NoRouteError):
                r.shard_for_gene(g)
        self.assertTrue(issubclass(NoRouteError, RoutingError))

    def test_empty_routes(self):
        self.cluster.coord.uppers = []
        r = self.router()
        self.assertEqual((r.routes, r.version), ([], 1))
        with self.assertRaises(NoRouteError):
            with r.claim(gene=5):
                pass

    def test_transaction_commits(self):
        r = self.router()
        owner = self.owner_on("b")
        with r.claim(owner=owner) as conn:
            conn.execute("INSERT")
        self.assertEqual(conn.log, [PROBE, claim_on_begin(gene(owner), 1), "INSERT", "COMMIT"])
        self.assertEqual(self.cluster.pools["b"].out, 0)
        self.assertEqual(r.stats["transactions"], 1)

    def test_transaction_without_a_body_is_the_deprecated_claim(self):
        r = self.router()
        with self.assertWarns(DeprecationWarning):
            cm = r.transaction(gene=1)
        with cm as conn:
            conn.execute("X")
        self.assertEqual(conn.log, [PROBE, claim_on_begin(1, 1), "X", "COMMIT"])

    def test_exactly_one_target(self):
        r = self.router()
        for kw in [{}, {"owner": 1, "id": 2}, {"gene": 1, "id": 2}]:
            with self.assertRaises(TypeError):
                with r.claim(**kw):
                    pass

    def test_stale_routes_refresh_and_retry(self):
        """IG001 from the claim on shard a, then the claim on b at the new version commits;
        a claim refused on BEGIN left no transaction to roll back."""
        for protocol in ("2", None):
            with self.subTest(routing_protocol=protocol):
                self.setUp()
                self.cluster.routing_protocol = {"a": protocol, "b": protocol}
                r = self.router()
                owner = self.owner_on("a")
                g = gene(owner)
                self.cluster.coord.change([(65535, "b")])  # unseen: listen=False
                with r.claim(owner=owner) as conn:
                    pass
                self.assertEqual(conn.shard, "b")
                refused = self.cluster.pools["a"].conns[0]
                if protocol is None:
                    self.assertEqual(refused.log, [PROBE, claim_statement(g, 1), "ROLLBACK"])
                    self.assertEqual(conn.log, [PROBE, claim_statement(g, 2), "COMMIT"])
                else:
                    self.assertEqual(refused.log, [PROBE, claim_on_begin(g, 1)])
                    self.assertEqual(conn.log, [PROBE, claim_on_begin(g, 2), "COMMIT"])
                self.assertFalse(refused.in_block)
                self.assertEqual((r.stats["retries_moved"], r.stats["refreshes"], r.version), (1, 2, 2))
                self.assertEqual(self.cluster.pools["a"].out + self.cluster.pools["b"].out, 0)

    def test_a_new_shard_is_probed_once_and_takes_the_claim_on_begin(self):
        r = self.router()
        for i in range(5):
            self.assertEqual(r.transaction(lambda conn: conn.shard, gene=1), "a")
            r.execute("UPDATE", gene=1)  # (execute claims nothing: no probe either)
        sent = [s for c in self.cluster.pools["a"].conns for s in c.log]
        self.assertEqual(self.cluster.probes, {"a": 1})
        self.assertEqual(sent[0], PROBE)
        self.assertEqual([s for s in sent if is_claim(s)], ["/* id_gen.route_claim=1,1 */ BEGIN"] * 5)
        self.assertEqual(r.stats["transactions"], 10)

    def test_an_old_shard_gets_the_claim_as_a_statement(self):
        # No setting (before 0.7.16), or one that does not say 2 or more: the old form.
        for setting in (None, "1", "", "two"):
            with self.subTest(routing_protocol=setting):
                self.setUp()
                self.cluster.routing_protocol = {"a": setting}
                r = self.router()
                for _ in range(3):
                    with r.claim(gene=1) as conn:
                        conn.execute("X")
                    self.assertEqual(conn.log[-3:], [claim_statement(1, 1), "X", "COMMIT"])
                self.assertEqual(self.cluster.probes, {"a": 1})
                self.assertEqual(r.stats["transactions"], 3)
        self.assertEqual([_routes.claims_on_begin(s) for s in ("2", "3", " 2", "1", "0", "", "x", None)],
                         [True, True, True, False, False, False, False, False])

    def test_each_shard_gets_the_form_it_takes(self):
        self.cluster.routing_protocol = {"b": None}
        r = self.router()
        r.transaction(lambda conn: None, gene=1)
        r.transaction(lambda conn: None, gene=40000)
        (on_a,), (on_b,) = self.cluster.pools["a"].conns, self.cluster.pools["b"].conns
        self.assertEqual((on_a.log[1], on_b.log[1]), (claim_on_begin(1, 1), claim_statement(40000, 1)))

    def test_a_lost_connection_makes_the_shard_probed_again(self):
        r = self.router()
        r.transaction(lambda conn: None, gene=1)
        self.cluster.claim_lost = 1  # the claim on BEGIN finds the connection lost: retried
        self.assertEqual(r.transaction(lambda conn: "done", gene=1), "done")
        self.assertEqual((r.stats["retries_lost"], self.cluster.probes), (1, {"a": 2}))
        lost, retried = self.cluster.pools["a"].conns[1:]
        self.assertEqual(lost.log, [claim_on_begin(1, 1)])
        self.assertEqual(retried.log, [PROBE, claim_on_begin(1, 1), "COMMIT"])

        def body_losing_its_connection(conn):
            raise lost_connection(conn)

        with self.assertRaises(psycopg.OperationalError):
            r.run(body_losing_its_connection, gene=1)  # (run: the body once)
        r.transaction(lambda conn: None, gene=1)
        self.assertEqual(self.cluster.probes, {"a": 3})
        r.transaction(lambda conn: None, gene=1)
        self.assertEqual(self.cluster.probes, {"a": 3})

    def test_a_probe_that_fails(self):
        # Lost: retried as a claim that found the connection lost.
        r = self.router()
        self.cluster.probe_lost = 1
        self.assertEqual(r.transaction(lambda conn: "done", gene=1), "done")
        self.assertEqual((r.stats["retries_lost"], self.cluster.probes), (1, {"a": 2}))
        self.assertEqual(self.cluster.pools["a"].conns[-1].log, [PROBE, claim_on_begin(1, 1), "COMMIT"])
        # Another error: the claim as a statement, which every shard takes, and no probe more.
        self.setUp()
        r = self.router()
        self.cluster.probe_error = sql_error("42501")
        for _ in range(2):
            with r.claim(gene=1) as conn:
                pass
        self.assertEqual(conn.log[-2:], [claim_statement(1, 1), "COMMIT"])
        self.assertEqual((r.stats["transactions"], r.stats["retries_lost"], self.cluster.probes), (2, 0, {"a": 1}))

    def test_fenced_waits_and_refreshes_every_third(self):
        r = self.router()
        self.cluster.fences = 4
        with r.claim(gene=1):
            pass
        self.assertEqual((r.stats["retries_fenced"], r.stats["refreshes"]), (4, 2))

    def test_fenced_retries_go_on_while_the_coordinator_is_down(self):
        r = self.router()
        self.cluster.coord.down = True
        self.cluster.fences = 7  # the re-reads after the 3rd and the 6th attempt fail
        with r.claim(gene=1) as conn:
            pass
        self.assertEqual(conn.log[-1], "COMMIT")
        self.assertEqual((r.stats["retries_fenced"], r.stats["refreshes"]), (7, 1))
        self.cluster.fences = 4
        owner = self.owner_on("a")
        self.assertEqual(r.execute(ShardConn.READ, (owner,), owner=owner), [(7,)])
        self.assertEqual((r.stats["retries_fenced"], r.stats["refreshes"]), (11, 1))

    def test_moved_with_the_coordinator_down_retries_until_the_limit(self):
        r = self.router(retry_limit=4)
        owner = self.owner_on("a")
        self.cluster.coord.change([(65535, "b")])  # unseen: listen=False
        self.cluster.coord.down = True
        with self.assertRaises(RouteRetryExhausted) as cm:
            with r.claim(owner=owner):
                pass
        self.assertEqual(cm.exception.__cause__.sqlstate, ROUTE_CHANGED)
        self.assertIn("the last re-read of the routes failed", str(cm.exception))
        self.assertEqual(len(self.cluster.pools["a"].conns), 5)  # the first attempt and 4 retries
        self.assertEqual(r.stats["retries_moved"], 4)
        with self.assertRaises(RouteRetryExhausted):
            r.execute(ShardConn.READ, (owner,), owner=owner)
        self.assertEqual(self.cluster.pools["a"].out, 0)

    def test_moved_while_the_coordinator_restarts(self):
        r = self.router()
        owner = self.owner_on("a")
        coord = self.cluster.coord
        coord.change([(65535, "b")])  # unseen: listen=False
        coord.down = True
        waits = []

        def sleep(seconds):
            waits.append(seconds)
            coord.down = len(waits) < 2  # up again after the second wait

        with mock.patch.object(router_module.time, "sleep", sleep):
            with r.claim(owner=owner) as conn:
                pass
        self.assertEqual(conn.shard, "b")
        self.assertEqual((r.stats["retries_moved"], r.version, len(waits)), (3, 2, 3))

    def test_retry_exhausted(self):
        r = self.router(retry_limit=3)
        self.cluster.fences = 10
        with self.assertRaises(RouteRetryExhausted) as cm:
            with r.claim(gene=1):
                pass
        self.assertEqual(cm.exception.__cause__.sqlstate, ROUTE_FENCED)
        self.assertEqual(self.cluster.pools["a"].out, 0)

    def test_other_claim_error_is_raised(self):
        for protocol, after_the_claim in (("2", []), (None, ["ROLLBACK"])):
            with self.subTest(routing_protocol=protocol):
                self.setUp()
                self.cluster.routing_protocol = {"a": protocol}
                r = self.router()
                self.cluster.claim_error = sql_error("42501")  # e.g. no right to call the claim
                with self.assertRaises(psycopg.DatabaseError):
                    with r.claim(gene=1):
                        pass
                (conn,) = self.cluster.pools["a"].conns
                self.assertTrue(is_claim(conn.log[1]))
                self.assertEqual(conn.log[2:], after_the_claim)  # (a refused BEGIN opened nothing)
                self.assertFalse(conn.in_block)

    def test_body_error_rolls_back_not_retried(self):
        r = self.router()
        with self.assertRaises(ZeroDivisionError):
            with r.claim(gene=1) as conn:
                1 / 0
        self.assertEqual(conn.log[-1], "ROLLBACK")
        self.assertEqual(len(self.cluster.pools["a"].conns), 1)
        with self.assertRaises(psycopg.Error):
            with r.claim(gene=1):
                raise sql_error(ROUTE_CHANGED)
        self.assertEqual(len(self.cluster.pools["a"].conns), 2)

    def test_run_retries_body_route_errors(self):
        r = self.router()
        calls = []

        def body(conn):
            calls.append(conn)
            if len(calls) < 3:
                raise sql_error(ROUTE_FENCED if len(calls) == 1 else ROUTE_CHANGED)
            return "done"

        self.assertEqual(r.transaction(body, gene=1), "done")
        self.assertEqual([c.log[-1] for c in calls], ["ROLLBACK", "ROLLBACK", "COMMIT"])
        self.assertEqual((r.stats["retries_fenced"], r.stats["retries_moved"]), (1, 1))

    def test_execute_sends_the_version_with_its_statement(self):
        for pooling in (True, False):
            with self.subTest(transaction_pooling=pooling):
                self.setUp()
                self.cluster.transaction_pooling = pooling
                r = self.router()
                owner = self.owner_on("a")
                self.assertEqual(r.execute(ShardConn.READ, (owner,), owner=owner), [(7,)])
                self.cluster.coord.change([(65535, "b")])  # unseen: listen=False
                # On a, the stale version meets IG001, never 0 rows; then b answers.
                self.assertEqual(r.execute(ShardConn.READ, (owner,), owner=owner), [(7,)])
                self.assertEqual((r.stats["retries_moved"], r.version), (1, 2))
                stale, fresh = self.cluster.pools["a"].conns[1], self.cluster.pools["b"].conns[0]
                declared = "/* id_gen.route_version={} */ " + ShardConn.READ
                self.assertEqual(stale.log, [declared.format(1)])
                self.assertEqual(fresh.log, [declared.format(2)])
                self.assertEqual((stale.round_trips, fresh.round_trips), (1, 1))
                self.assertEqual(self.cluster.pools["a"].out + self.cluster.pools["b"].out, 0)
                self.assertIsNone(r.execute("UPDATE", owner=owner))
                with self.assertRaisesRegex(TypeError, "a query is a str, bytes or psycopg.sql.Composable"):
                    r.execute(42, owner=owner)

    def test_the_declaration_leads_every_kind_of_query(self):
        from psycopg import sql
        self.assertEqual(_routes.declared_query(3, "SELECT 1"), "/* id_gen.route_version=3 */ SELECT 1")
        self.assertEqual(_routes.declared_query(3, b"SELECT 1"), b"/* id_gen.route_version=3 */ SELECT 1")
        composed = _routes.declared_query(3, sql.SQL("SELECT {}").format(sql.Identifier("a b")))
        self.assertEqual(composed.as_string(None), '/* id_gen.route_version=3 */ SELECT "a b"')

    def test_ids_and_genes_are_checked(self):
        r = self.router()
        for bad in [-1, -(1 << 47), 1 << 63]:
            with self.assertRaisesRegex(ValueError, "id .* is outside"):
                r.shard_for_id(bad)
            with self.assertRaisesRegex(ValueError, "id .* is outside"):
                r.execute("X", id=bad)
        for bad in ["5", 5.0, True]:
            with self.assertRaisesRegex(TypeError, "gene must be an int"):
                r.execute("X", gene=bad)
            with self.assertRaisesRegex(TypeError, "gene must be an int"):
                r.shard_for_gene(bad)
            with self.assertRaisesRegex(TypeError, "id must be an int"):
                r.shard_for_id(bad)
        for bad in [-1, 65536]:
            with self.assertRaisesRegex(ValueError, "gene .* is outside"):
                with r.claim(gene=bad):
                    pass
        self.assertEqual(self.cluster.pools, {})  # nothing was routed
        self.assertEqual(r.shard_for_id((1 << 63) - 1), "b")

    def test_next_id_casts(self):
        r = self.router()
        u = uuid.uuid4()
        for owner, cast in [(42, "bigint"), ("alice", "text"), (u, "uuid")]:
            self.assertEqual(r.next_id("orders", owner), 12345)
            sql, params = self.cluster.params[-1]
            self.assertIn(f"%s::{cast})", sql)
            self.assertEqual(params, ("orders", owner))
        with self.assertRaises(TypeError):
            r.next_id("orders", b"raw")

    def test_listener_reloads_on_notify_and_close_ends_it(self):
        for notifies_takes_timeout in (True, False):  # psycopg >= 3.2, and the fallback
            with self.subTest(notifies_takes_timeout=notifies_takes_timeout), \
                    mock.patch.object(router_module, "NOTIFIES_TAKES_TIMEOUT", notifies_takes_timeout):
                self.cluster.coord.connects = 0
                with Router("coord", SHARDS, refresh_interval=0) as r:
                    self.assertTrue(r._listener_thread.is_alive())
                    v = r.version
                    self.cluster.coord.change([(100, "b"), (65535, "a")])
                    deadline = time.time() + 5
                    while r.version != v + 1 and time.time() < deadline:
                        time.sleep(0.01)
                    self.assertEqual(r.routes, [(0, 100, "b"), (101, 65535, "a")])
                    self.assertEqual(self.cluster.coord.connects, 2, "the listener never reconnected")
                self.assertFalse(r._listener_thread.is_alive())

    def test_listener_reconnects_and_rereads(self):
        lost = threading.Event()
        real_notifies = CoordinatorConn.notifies

        def notifies_losing_the_first(conn, timeout=None):
            if not lost.is_set():
                lost.set()
                self.cluster.coord.change([(65535, "a")])  # its NOTIFY dies with the connection
                raise psycopg.OperationalError("connection lost")
            return real_notifies(conn, timeout)

        with mock.patch.object(CoordinatorConn, "notifies", notifies_losing_the_first), \
                mock.patch.object(router_module, "NOTIFIES_TAKES_TIMEOUT", True):
            with Router("coord", SHARDS, refresh_interval=0) as r:
                deadline = time.time() + 5
                while r.version != 2 and time.time() < deadline:
                    time.sleep(0.01)
                self.assertEqual((r.version, r.routes), (2, [(0, 65535, "a")]))
                self.assertEqual(self.cluster.coord.connects, 3)  # routes, listener, listener again

    def test_a_change_nobody_notified_is_seen_by_the_version_poll(self):
        r = self.router(refresh_interval=0.05)  # no listener: only the poll can see it
        self.assertIsNone(r._listener_thread)
        self.assertTrue(r._poll_thread.is_alive())
        self.cluster.coord.change([(65535, "b")])
        deadline = time.time() + 5
        while r.version != 2 and time.time() < deadline:
            time.sleep(0.01)
        self.assertEqual((r.version, r.routes), (2, [(0, 65535, "b")]),
                         f"the poll did not see the change within 5 s ({self.cluster.coord.version_polls} polls)")
        # A coordinator that stops answering: the poll fails quietly and tries again.
        self.cluster.coord.down = True
        polls = self.cluster.coord.version_polls
        time.sleep(0.2)
        self.cluster.coord.down = False
        self.cluster.coord.change([(65535, "a")])
        deadline = time.time() + 5
        while r.version != 3 and time.time() < deadline:
            time.sleep(0.01)
        self.assertEqual(r.version, 3, "the poll came back after the coordinator did")
        self.assertGreater(self.cluster.coord.version_polls, polls)
        r.close()
        self.assertFalse(r._poll_thread.is_alive())

    def test_the_poll_keeps_its_interval_while_the_listener_hangs(self):
        """The listener blocked, in its wait for notifications or in a reconnect to a
        coordinator that does not answer, and the change's NOTIFY lost: the version poll, on
        its own thread, still sees the change within about refresh_interval."""
        interval = 0.1
        for hang_in in ("wait", "connect"):
            with self.subTest(hang_in=hang_in):
                self.setUp()
                coord = self.cluster.coord
                hung, release = threading.Event(), threading.Event()
                real_connect = self.cluster.connect

                def hang():
                    hung.set()
                    release.wait()

                def notifies_hanging(conn, timeout=None):
                    if hang_in == "wait":
                        hang()  # (the NOTIFY of the change is never delivered)
                        return []
                    raise psycopg.OperationalError("fake: the listener's connection was lost")

                def connect_hanging(dsn, **kw):
                    if connecting_hangs.is_set():  # the listener's reconnect (the poll's
                        hang()                     # connection stays open)
                        raise psycopg.OperationalError("fake: connection timed out")
                    return real_connect(dsn, **kw)

                connecting_hangs = threading.Event()
                with mock.patch.object(router_module.psycopg, "connect", connect_hanging), \
                        mock.patch.object(CoordinatorConn, "notifies", notifies_hanging), \
                        mock.patch.object(router_module, "NOTIFIES_TAKES_TIMEOUT", True):
                    r = Router("coord", SHARDS, refresh_interval=interval)
                    try:
                        connecting_hangs.set()
                        self.assertTrue(hung.wait(5), f"the listener never reached its {hang_in}")
                        coord.change([(65535, "b")])
                        changed = time.monotonic()
                        deadline = changed + 20 * interval  # (slack for a loaded machine)
                        while r.version != 2 and time.monotonic() < deadline:
                            time.sleep(0.005)
                        took = time.monotonic() - changed
                        self.assertEqual(
                            (r.version, r.routes), (2, [(0, 65535, "b")]),
                            f"the poll did not see the change in {took:.2f} s while the listener hung "
                            f"in its {hang_in} ({coord.version_polls} polls)")
                        self.assertTrue(r._listener_thread.is_alive() and not release.is_set(),
                                        "the listener was still hung when the poll saw the change")
                    finally:
                        release.set()
                        r.close()
                    self.assertFalse(r._listener_thread.is_alive(), "close() ended the listener")
                    self.assertFalse(r._poll_thread.is_alive(), "close() ended the poll")

    def test_a_listen_that_fails_at_the_start_does_not_fail_the_router(self):
        """LISTEN failing in the constructor (a pooler in front of the coordinator, say): the
        routes are read and served, the version poll sees a change, the listener's thread
        retries LISTEN in the background and listens once it works; a route read that fails
        still fails the constructor."""
        coord = self.cluster.coord
        coord.listen_fails = True
        r = self.router(listen=True, refresh_interval=0.02)
        self.assertGreaterEqual(coord.listen_attempts, 1, "the constructor tried LISTEN")
        self.assertEqual((coord.listens, r.version), (0, 1))
        self.assertEqual(r.transaction(lambda conn: conn.shard, gene=40000), "b")
        coord.change([(65535, "a")])  # its NOTIFY reaches nobody: the poll sees it
        wait_until("the routes after a change while LISTEN fails", (2, [(0, 65535, "a")]),
                   lambda: (r.version, r.routes))
        self.assertEqual(r.transaction(lambda conn: conn.shard, gene=40000), "a")
        attempts = coord.listen_attempts
        wait_until("LISTEN retried in the background", True, lambda: coord.listen_attempts > attempts)
        self.assertEqual(coord.listens, 0)
        coord.listen_fails = False
        wait_until("a listener once LISTEN works", True, lambda: coord.listens >= 1)
        r.close()
        self.assertFalse(r._listener_thread.is_alive(), "close() ended the listener's retries")
        self.assertFalse(r._poll_thread.is_alive())
        coord.down = True  # the routes cannot be read: that still fails the constructor
        with self.assertRaises(psycopg.OperationalError):
            self.router(listen=True)

    def test_no_thread_without_listen_and_poll(self):
        r = self.router()
        self.assertEqual((r._listener_thread, r._poll_thread), (None, None))
        with self.assertRaises(ValueError):
            self.router(refresh_interval=-1)

    def test_threads_share_a_router(self):
        r = self.router()
        errors = []

        def work(seed):
            try:
                for i in range(200):
                    with r.claim(owner=seed * 1000 + i) as conn:
                        conn.execute("X")
                    if i == 100 and seed == 0:
                        self.cluster.coord.change([(20000, "b"), (65535, "a")])
            except Exception as e:  # pragma: no cover
                errors.append(e)

        threads = [threading.Thread(target=work, args=(s,)) for s in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(r.stats["transactions"], 1200)
        self.assertEqual(r.version, 2)
        self.assertEqual(sum(p.out for p in self.cluster.pools.values()), 0)


if __name__ == "__main__":
    unittest.main()


class BodyEndsTheTransactionTest(unittest.TestCase):
    """A body that sends COMMIT or ROLLBACK itself: never reported committed by the router
    (25P01 at its COMMIT), and never run again after an error that follows its own COMMIT."""

    def setUp(self):
        RouterTest.setUp(self)

    def router(self):
        return Router("coord", SHARDS, listen=False, refresh_interval=0, backoff_base=0.0001, backoff_max=0.001)

    def test_a_rollback_in_the_body_is_not_a_commit(self):
        r = self.router()
        with self.assertRaises(psycopg.errors.NoActiveSqlTransaction):
            r.transaction(lambda conn: conn.execute("ROLLBACK"), gene=1)
        self.assertEqual(r.stats["transactions"], 0)
        self.assertNotIn("COMMIT", self.cluster.pools["a"].conns[0].log)

    def test_an_error_after_the_body_s_own_commit_is_not_retried(self):
        r = self.router()
        runs = []

        def body(conn):
            runs.append(1)
            conn.execute("COMMIT")
            raise sql_error(ROUTE_CHANGED)  # as a statement without the claim would meet it

        with self.assertRaises(psycopg.DatabaseError) as caught:
            r.transaction(body, gene=1)
        self.assertEqual((caught.exception.sqlstate, len(runs), r.stats["retries_moved"]), (ROUTE_CHANGED, 1, 0))
