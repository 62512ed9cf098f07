"""The protocol scenarios shared by every client (clients/protocol-scenarios.json), run
against the fakes of test_router_fake.py by the sync Router and by the AsyncRouter (through
thin async wrappers of the same fakes), so the three runs and the Rust client's
(clients/rust/tests/router_fake.rs) check one set of expectations. Each scenario runs twice:
on shards that take the claim on BEGIN (routing protocol 2) and on shards before 0.7.16."""
import asyncio
import contextlib
import json
import os
import unittest
from unittest import mock

import psycopg

import id_gen_client.aio as aio_module
import id_gen_client.router as router_module
from id_gen_client import AsyncRouter, CommitOutcomeUnknown, NoRouteError, RouteRetryExhausted, Router, gene
from test_router_fake import PROBE, SHARDS, Cluster, ShardConn, claim_on_begin, claim_statement, is_claim, sql_error

SCENARIOS = os.path.join(os.path.dirname(__file__), "..", "..", "protocol-scenarios.json")
ROUTER_ARGS = {"listen": False, "refresh_interval": 0, "backoff_base": 0.0001, "backoff_max": 0.001}
# The shards' id_gen.routing_protocol in the runs of each scenario: 0.7.16 on, and before.
ROUTING_PROTOCOLS = ("2", None)


def load_scenarios():
    with open(SCENARIOS) as f:
        scenarios = json.load(f)["scenarios"]
    assert len(scenarios) >= 10, "the scenario file lost its scenarios"
    return scenarios


class AsyncResult:
    def __init__(self, result):
        self.result, self.description = result, result.description

    async def fetchall(self):
        return self.result.fetchall()

    async def fetchone(self):
        return self.result.fetchone()


class AsyncWrapped:
    """An async face over a fake connection of test_router_fake (its statements run at once)."""

    def __init__(self, conn):
        self.conn = conn

    def __getattr__(self, name):  # shard, log, pgconn, closed, broken, ...
        return getattr(self.conn, name)

    async def execute(self, sql, params=None, prepare=None):
        return AsyncResult(self.conn.execute(sql, params))

    async def close(self):
        self.conn.close()

    async def notifies(self, timeout=None):
        """A coordinator connection's notifications (AsyncConnection.notifies(timeout=...)):
        those queued, or the first within timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (timeout if timeout is not None else 3600)
        while not self.conn.queue and loop.time() < deadline:
            await asyncio.sleep(0.005)
        with self.conn.coord.cond:
            payloads, self.conn.queue[:] = list(self.conn.queue), []
        for p in payloads:
            yield mock.Mock(payload=p)


async def wait_until(what, want, get, timeout=5.0):
    """Polls get() until it returns want, for at most timeout seconds; then fails with the
    last value seen."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        got = get()
        if got == want:
            return
        if loop.time() >= deadline:
            raise AssertionError(f"timed out waiting for {what}: wanted {want!r}, last seen {got!r}")
        await asyncio.sleep(0.005)


def async_pool_of(cluster):
    def make(conninfo, **kwargs):
        kwargs.pop("open", None)
        sync = cluster.pool(conninfo, **kwargs)

        class AsyncPool:
            async def open(self):
                pass

            async def getconn(self):
                return AsyncWrapped(sync.getconn())

            async def putconn(self, conn):
                sync.putconn(conn.conn)

            async def close(self):
                sync.close()

        return AsyncPool()

    return make


class Run:
    """One scenario against a fresh fake cluster, by one face of the client."""

    def __init__(self, test, sc, routing_protocol):
        self.test, self.sc = test, sc
        self.cluster = Cluster([(up, shard) for up, shard in sc["routes"]])
        self.cluster.routing_protocol = {shard: routing_protocol for shard in SHARDS}
        self.runs = 0
        self.committed_on = None

    def key(self):
        key = self.sc["key"]
        if "gene" in key:
            return {"gene": key["gene"]}
        coord = self.cluster.coord
        owner = next(o for o in range(100000) if coord.owner_of(gene(o)) == key["owner_on"])
        return {"owner": owner}

    def after_connect(self, key):
        sc, coord = self.sc, self.cluster.coord
        if "routes_change_unseen" in sc:
            coord.change([(up, shard) for up, shard in sc["routes_change_unseen"]])  # no listener
        coord.down = bool(sc.get("coordinator_down"))
        self.cluster.fences = sc.get("fenced", 0)
        self.cluster.connect_fails = sc.get("connect_fails", 0)
        self.cluster.claim_lost = sc.get("claim_lost", 0)
        self.cluster.commit_lost = bool(sc.get("commit_lost"))

    def body_step(self, conn):
        self.runs += 1
        errors = self.sc.get("body_errors", [])
        if self.runs <= len(errors):
            raise sql_error(errors[self.runs - 1])
        return conn.shard

    def outcome(self, call, router):
        """Runs the call and says what the scenario's expectations name."""
        got = {}
        try:
            got["shard"] = call()
            got["outcome"] = "committed"
        except RouteRetryExhausted as e:
            got["outcome"], got["last_code"] = "exhausted", e.__cause__.sqlstate
        except NoRouteError:
            got["outcome"] = "no_route"
        except CommitOutcomeUnknown as e:
            self.test.assertIsInstance(e.__cause__, psycopg.OperationalError)
            got["outcome"] = "commit_unknown"
        except psycopg.Error as e:
            got["outcome"], got["last_code"] = "error", e.sqlstate
        stats = router.stats
        got.update(body_runs=self.runs, retries_moved=stats["retries_moved"],
                   retries_fenced=stats["retries_fenced"], retries_lost=stats["retries_lost"], refreshes=stats["refreshes"],
                   version=router.version,
                   claims=sum(1 for p in self.cluster.pools.values() for c in p.conns for s in c.log if is_claim(s)))
        expect = self.sc["expect"]
        self.test.assertEqual({k: got.get(k) for k in expect}, expect, self.sc["name"])
        self.test.assertEqual(sum(p.out for p in self.cluster.pools.values()), 0, "a connection was kept")

    def read_shard(self, rows):
        self.test.assertEqual(rows, [(7,)])
        return self.cluster.last_read_shard


class ScenarioTest(unittest.TestCase):
    def patched(self, cluster):
        stack = contextlib.ExitStack()
        stack.enter_context(mock.patch.object(router_module.psycopg, "connect", cluster.connect))
        stack.enter_context(mock.patch.object(router_module, "ConnectionPool", cluster.pool))

        async def async_connect(dsn, autocommit=False, **kw):
            return AsyncWrapped(cluster.connect(dsn, autocommit=autocommit, **kw))

        stack.enter_context(mock.patch.object(aio_module.psycopg.AsyncConnection, "connect", async_connect))
        stack.enter_context(mock.patch.object(aio_module, "AsyncConnectionPool", async_pool_of(cluster)))
        return stack

    def test_sync_router(self):
        for sc in load_scenarios():
            for protocol in ROUTING_PROTOCOLS:
                with self.subTest(sc["name"], routing_protocol=protocol):
                    self.sync_scenario(Run(self, sc, protocol), sc)

    def sync_scenario(self, run, sc):
        with self.patched(run.cluster):
            r = Router("coord", SHARDS, retry_limit=sc.get("retry_limit", 20), **ROUTER_ARGS)
            try:
                key = run.key()
                run.after_connect(key)
                calls = {
                    "transaction": lambda: r.transaction(run.body_step, **key),
                    "run": lambda: r.run(run.body_step, **key),
                    "execute": lambda: run.read_shard(r.execute(ShardConn.READ, (key["owner"],), **key)),
                }
                run.outcome(calls[sc["call"]], r)
            finally:
                r.close()

    def test_async_router(self):
        for sc in load_scenarios():
            for protocol in ROUTING_PROTOCOLS:
                with self.subTest(sc["name"], routing_protocol=protocol):
                    run = Run(self, sc, protocol)
                    with self.patched(run.cluster):
                        asyncio.run(self.async_scenario(run, sc))

    def test_async_claim(self):
        """AsyncRouter.claim (async with): the claim retried, the block once, COMMIT; a
        raising block rolls back."""
        cluster = Cluster([(32767, "a"), (65535, "b")])

        async def scenario():
            async with AsyncRouter("coord", SHARDS, **ROUTER_ARGS) as r:
                cluster.fences = 2
                async with r.claim(gene=1) as conn:
                    await conn.execute("X")
                with self.assertRaises(ZeroDivisionError):
                    async with r.claim(gene=1) as failed:
                        1 / 0
                return r.stats, conn.log, failed.log

        with self.patched(cluster):
            stats, log, failed_log = asyncio.run(scenario())
        self.assertEqual((stats["retries_fenced"], stats["transactions"]), (2, 1))
        self.assertEqual(log, [claim_on_begin(1, 1), "X", "COMMIT"])
        self.assertEqual(failed_log[-1], "ROLLBACK")
        self.assertEqual(sum(p.out for p in cluster.pools.values()), 0)

    def test_async_claim_forms(self):
        """AsyncRouter probes a shard once and sends the claim in the form it takes: on BEGIN
        (shard a), as a statement (b, before 0.7.16); it probes again after a lost
        connection, and a claim refused on BEGIN (IG001) is retried on the new owner."""
        cluster = Cluster([(32767, "a"), (65535, "b")])
        cluster.routing_protocol = {"b": None}

        async def nothing(conn):
            return conn.shard

        async def scenario():
            async with AsyncRouter("coord", SHARDS, **ROUTER_ARGS) as r:
                for _ in range(3):
                    await r.transaction(nothing, gene=1)
                    await r.transaction(nothing, gene=40000)
                probes_before = dict(cluster.probes)
                cluster.claim_lost = 1
                await r.transaction(nothing, gene=1)
                probes_after_lost = dict(cluster.probes)
                cluster.coord.change([(20000, "b"), (65535, "a")])  # unseen: listen=False
                moved = await r.transaction(nothing, gene=40000)  # b refuses (old form), a commits
                cluster.coord.change([(65535, "b")])
                moved_back = await r.transaction(nothing, gene=30000)  # a refuses on BEGIN, b commits
                return r.stats, probes_before, probes_after_lost, moved, moved_back

        with self.patched(cluster):
            stats, probes_before, probes_after_lost, moved, moved_back = asyncio.run(scenario())
        self.assertEqual(probes_before, {"a": 1, "b": 1})
        self.assertEqual(probes_after_lost, {"a": 2, "b": 1})
        self.assertEqual((moved, moved_back), ("a", "b"))
        self.assertEqual((stats["retries_lost"], stats["retries_moved"], stats["transactions"]), (1, 2, 9))
        a, b = cluster.pools["a"].conns, cluster.pools["b"].conns
        self.assertEqual(a[0].log, [PROBE, claim_on_begin(1, 1), "COMMIT"])
        self.assertEqual(b[0].log, [PROBE, claim_statement(40000, 1), "COMMIT"])
        self.assertEqual(b[-2].log, [claim_statement(40000, 1), "ROLLBACK"])
        self.assertEqual(a[-2].log, [claim_on_begin(40000, 2), "COMMIT"])
        self.assertEqual(a[-1].log, [claim_on_begin(30000, 2)])  # refused: no transaction left to end
        self.assertEqual(b[-1].log, [claim_statement(30000, 3), "COMMIT"])

    def test_async_version_poll(self):
        """AsyncRouter without a listener sees a change nobody notified by its version poll."""
        cluster = Cluster([(32767, "a"), (65535, "b")])

        async def scenario():
            args = dict(ROUTER_ARGS, refresh_interval=0.05)
            async with AsyncRouter("coord", SHARDS, **args) as r:
                cluster.coord.change([(65535, "b")])
                deadline = asyncio.get_running_loop().time() + 5
                while r.version != 2 and asyncio.get_running_loop().time() < deadline:
                    await asyncio.sleep(0.01)
                return r.version, r.routes, (r._listener_task, r._poll_task)

        with self.patched(cluster):
            version, routes, (listener, poll) = asyncio.run(scenario())
        self.assertEqual((version, routes), (2, [(0, 65535, "b")]), f"{cluster.coord.version_polls} polls")
        self.assertIsNone(listener, "no listener task without listen")
        self.assertTrue(poll.done(), "close() ended the poll's task")

    def test_async_a_listen_that_fails_at_open_does_not_fail_it(self):
        """AsyncRouter: LISTEN failing in open() (a pooler in front of the coordinator, say):
        the routes are read and served, the version poll sees a change, the listener task
        retries LISTEN in the background and listens once it works; a route read that fails
        still fails open()."""
        cluster = Cluster([(32767, "a"), (65535, "b")])
        coord = cluster.coord
        coord.listen_fails = True

        async def shard_of(conn):
            return conn.shard

        async def scenario():
            args = dict(ROUTER_ARGS, listen=True, refresh_interval=0.02)
            r = AsyncRouter("coord", SHARDS, **args)
            await r.open()
            try:
                self.assertGreaterEqual(coord.listen_attempts, 1, "open() tried LISTEN")
                self.assertEqual((coord.listens, r.version), (0, 1))
                self.assertEqual(await r.transaction(shard_of, gene=40000), "b")
                coord.change([(65535, "a")])  # its NOTIFY reaches nobody: the poll sees it
                await wait_until("the routes after a change while LISTEN fails", (2, [(0, 65535, "a")]),
                                 lambda: (r.version, r.routes))
                self.assertEqual(await r.transaction(shard_of, gene=40000), "a")
                attempts = coord.listen_attempts
                await wait_until("LISTEN retried in the background", True, lambda: coord.listen_attempts > attempts)
                self.assertEqual(coord.listens, 0)
                coord.listen_fails = False
                await wait_until("a listener once LISTEN works", True, lambda: coord.listens >= 1)
                tasks = (r._listener_task, r._poll_task)
            finally:
                await r.close()
            self.assertTrue(all(t.done() for t in tasks), "close() ended the listener and the poll")
            coord.down = True  # the routes cannot be read: that still fails open()
            with self.assertRaises(psycopg.OperationalError):
                await AsyncRouter("coord", SHARDS, **args).open()

        with self.patched(cluster):
            asyncio.run(scenario())

    def test_async_the_poll_keeps_its_interval_while_the_listener_hangs(self):
        """AsyncRouter: the listener task blocked, in its wait for notifications or in a
        reconnect to a coordinator that does not answer, and the change's NOTIFY lost: the
        version poll, a task of its own, still sees the change within about refresh_interval;
        close() cancels and awaits both tasks."""
        interval = 0.1
        for hang_in in ("wait", "connect"):
            with self.subTest(hang_in=hang_in):
                cluster = Cluster([(32767, "a"), (65535, "b")])
                coord = cluster.coord

                async def scenario():
                    hung, release = asyncio.Event(), asyncio.Event()
                    connecting_hangs = False

                    async def hang():
                        hung.set()
                        await release.wait()

                    async def notifies_hanging(conn, timeout=None):
                        if hang_in == "wait":
                            await hang()  # (the NOTIFY of the change is never delivered)
                            return
                        raise psycopg.OperationalError("fake: the listener's connection was lost")
                        yield  # (an async generator, as AsyncConnection.notifies)

                    async def connect_hanging(dsn, autocommit=False, **kw):
                        if connecting_hangs:  # the listener's reconnect (the poll's connection stays open)
                            await hang()
                            raise psycopg.OperationalError("fake: connection timed out")
                        return AsyncWrapped(cluster.connect(dsn, autocommit=autocommit, **kw))

                    with mock.patch.object(aio_module.psycopg.AsyncConnection, "connect", connect_hanging), \
                            mock.patch.object(AsyncWrapped, "notifies", notifies_hanging):
                        r = AsyncRouter("coord", SHARDS, **dict(ROUTER_ARGS, listen=True, refresh_interval=interval))
                        await r.open()
                        tasks = (r._listener_task, r._poll_task)
                        try:
                            connecting_hangs = True
                            await asyncio.wait_for(hung.wait(), 5)
                            coord.change([(65535, "b")])
                            loop = asyncio.get_running_loop()
                            changed = loop.time()
                            try:
                                await wait_until(f"the poll while the listener hangs in its {hang_in}",
                                                 (2, [(0, 65535, "b")]), lambda: (r.version, r.routes),
                                                 timeout=20 * interval)  # (slack for a loaded machine)
                            except AssertionError as e:
                                raise AssertionError(f"{e} ({loop.time() - changed:.2f} s, "
                                                     f"{coord.version_polls} polls)") from None
                            self.assertFalse(tasks[0].done() or release.is_set(),
                                             "the listener was still hung when the poll saw the change")
                        finally:
                            await r.close()  # (cancels the hung listener: release is never set)
                    self.assertTrue(all(t.done() for t in tasks), "close() ended the listener and the poll")
                    self.assertEqual((r._listener_task, r._poll_task), (None, None))

                with self.patched(cluster):
                    asyncio.run(scenario())

    async def async_scenario(self, run, sc):
        r = AsyncRouter("coord", SHARDS, retry_limit=sc.get("retry_limit", 20), **ROUTER_ARGS)
        await r.open()
        try:
            key = run.key()
            run.after_connect(key)

            async def body(conn):
                return run.body_step(conn)

            async def call():
                if sc["call"] == "transaction":
                    return await r.transaction(body, **key)
                if sc["call"] == "run":
                    return await r.run(body, **key)
                return run.read_shard(await r.execute(ShardConn.READ, (key["owner"],), **key))

            try:
                value, error = await call(), None
            except Exception as e:  # judged by run.outcome, as for the sync router
                value, error = None, e

            def replay():
                if error is not None:
                    raise error
                return value

            run.outcome(replay, r)
        finally:
            await r.close()


if __name__ == "__main__":
    unittest.main()
