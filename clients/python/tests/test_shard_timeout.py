"""shard_timeout against a shard that stops answering: Router and AsyncRouter on real psycopg
connections and pools, over TCP to a scripted wire server (WireShard) that freezes at a
chosen message, as a SIGSTOPped server does: its kernel still accepts and acknowledges what
the client sends, and nothing comes back. The coordinator is test_router_fake's fake.

What a freeze must become (docs/routing-protocol.md §4, "Lost connections"): before COMMIT
was sent (the connect aside), a lost connection, retried (`retries_lost`, against
retry_limit) on a new connection, the frozen one never reused; after COMMIT (or `execute`'s
statement) was sent, CommitOutcomeUnknown; no free connection in time (a connect that
hangs), psycopg_pool's PoolTimeout, not retried. Every wait ends about shard_timeout after
it began; the bounds asserted here are loose (20 times the timeout) on purpose. The probe of
the shard's routing protocol is bounded as the claim is, and what it reads on a real
connection ('2', or NULL on a shard before 0.7.16) chooses the claim's form."""
import asyncio
import contextlib
import logging
import os
import socket
import struct
import threading
import time
import unittest
from unittest import mock

import psycopg
from psycopg_pool import PoolTimeout

import id_gen_client.aio as aio_module
import id_gen_client.router as router_module
from id_gen_client import AsyncRouter, CommitOutcomeUnknown, RouteRetryExhausted, Router, ShardTimeout
from id_gen_client._routes import shard_pool_args
from test_router_fake import PROBE, Cluster, claim_on_begin, claim_statement, is_claim
from test_scenarios import AsyncWrapped

TIMEOUT = 0.3  # shard_timeout in these tests
SLACK = 20  # an attempt ends within SLACK * TIMEOUT (loose: a slow machine passes)
SSL_REQUEST, GSSENC_REQUEST = 80877103, 80877104


def message(kind, payload=b""):
    return kind + struct.pack("!i", len(payload) + 4) + payload


def startup_answer():
    out = message(b"R", struct.pack("!i", 0))  # AuthenticationOk
    for name, value in [("server_version", "17.0"), ("server_encoding", "UTF8"), ("client_encoding", "UTF8"),
                        ("standard_conforming_strings", "on"), ("integer_datetimes", "on"),
                        ("DateStyle", "ISO, MDY")]:
        out += message(b"S", name.encode() + b"\0" + value.encode() + b"\0")
    return out + message(b"K", struct.pack("!ii", 4242, 1)) + message(b"Z", b"I")


def one_value(column, type_oid, value):
    """A row description of one column and one row of it (value: bytes, or None for NULL)."""
    field = column + b"\0" + struct.pack("!ihihih", 0, 0, type_oid, -1, -1, 0)
    cell = struct.pack("!i", -1) if value is None else struct.pack("!i", len(value)) + value
    return message(b"T", struct.pack("!h", 1) + field) + message(b"D", struct.pack("!h", 1) + cell)


def claim_answer(text, version=1):
    """The answer to a claim in either form: a transaction open, claimed at `version`."""
    if text.endswith(" */ BEGIN"):
        return message(b"C", b"BEGIN\0") + message(b"Z", b"T")
    return (message(b"C", b"BEGIN\0") + one_value(b"route_claim", 20, str(version).encode())
            + message(b"C", b"SELECT 1\0") + message(b"Z", b"T"))


def probe_answer(routing_protocol):
    value = None if routing_protocol is None else routing_protocol.encode()
    return one_value(b"current_setting", 25, value) + message(b"C", b"SELECT 1\0") + message(b"Z", b"I")


class WireShard:
    """A shard over TCP that answers the startup, the probe of its routing protocol
    (`routing_protocol`: '2', or None as a shard before 0.7.16), the claim in either form,
    COMMIT and ROLLBACK, and freezes at `freeze_at` ("startup", "probe", "claim", "commit",
    "rollback" or "statement": the extended protocol of execute) on the first `freezes`
    connections that get there (None: on every one): from then on it reads what the client
    sends and answers nothing, until the client goes away. Records the queries per connection
    (`queries`: (connection number, text)), the connections that froze and those the client
    closed."""

    def __init__(self, freeze_at, freezes=None, routing_protocol="2"):
        self.freeze_at, self.freezes_left = freeze_at, freezes
        self.routing_protocol = routing_protocol
        self.lock = threading.Lock()
        self.queries, self.frozen, self.ended, self.socks = [], [], [], []
        self.accepted = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.dsn = f"host=127.0.0.1 port={self.port} user=test dbname=test sslmode=disable"
        threading.Thread(target=self.accept_loop, daemon=True).start()

    def close(self):
        self.listener.close()
        with self.lock:
            socks = list(self.socks)
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def accept_loop(self):
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.accepted += 1
                number = self.accepted
                self.socks.append(sock)
            threading.Thread(target=self.serve, args=(sock, number), daemon=True).start()

    def freezes_here(self, point):
        with self.lock:
            if point != self.freeze_at or self.freezes_left == 0:
                return False
            if self.freezes_left is not None:
                self.freezes_left -= 1
            return True

    def serve(self, sock, number):
        try:
            with sock:
                self.converse(sock, number)
        except (EOFError, OSError):
            pass
        with self.lock:
            self.ended.append(number)

    def converse(self, sock, number):
        def read(n):
            data = b""
            while len(data) < n:
                chunk = sock.recv(n - len(data))
                if not chunk:
                    raise EOFError
                data += chunk
            return data

        def freeze():
            with self.lock:
                self.frozen.append(number)
            while sock.recv(65536):  # acknowledged by the kernel, never answered
                pass
            raise EOFError

        while True:  # the startup packet, after any SSL or GSSAPI request (refused)
            (length,) = struct.unpack("!i", read(4))
            (code,) = struct.unpack("!i", read(length - 4)[:4])
            if code not in (SSL_REQUEST, GSSENC_REQUEST):
                break
            sock.sendall(b"N")
        if self.freezes_here("startup"):
            freeze()
        sock.sendall(startup_answer())
        while True:
            kind = read(1)
            (length,) = struct.unpack("!i", read(4))
            body = read(length - 4)
            if kind == b"X":
                return
            if kind != b"Q":  # the extended protocol: only execute sends it here
                if self.freezes_here("statement"):
                    freeze()
                raise AssertionError(f"WireShard answers no {kind!r} message")
            text = body.rstrip(b"\0").decode()
            with self.lock:
                self.queries.append((number, text))
            if text == PROBE:
                if self.freezes_here("probe"):
                    freeze()
                sock.sendall(probe_answer(self.routing_protocol))
            elif is_claim(text):
                if self.freezes_here("claim"):
                    freeze()
                sock.sendall(claim_answer(text))
            elif text.startswith("/* id_gen.route_version="):  # execute's statement, without parameters
                if self.freezes_here("statement"):
                    freeze()
                raise AssertionError(f"WireShard answers no {text!r}")
            elif text in ("COMMIT", "ROLLBACK"):
                if self.freezes_here(text.lower()):
                    freeze()
                sock.sendall(message(b"C", text.encode() + b"\0") + message(b"Z", b"I"))
            else:
                raise AssertionError(f"WireShard answers no {text!r}")

    def claims_by_connection(self):
        with self.lock:
            numbers = [n for n, text in self.queries if is_claim(text)]
        return {n: numbers.count(n) for n in numbers}

    def wait_ended(self, numbers, seconds=5.0):
        """Whether the client closed each of these connections within `seconds`."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with self.lock:
                if set(numbers) <= set(self.ended):
                    return True
            time.sleep(0.01)
        return False


class Common:
    """What the sync and the async tests share: the shard, the fake coordinator (every gene
    on shard "a", the WireShard), quiet pool warnings (discarded connections)."""

    def start(self, freeze_at, freezes=None, routing_protocol="2"):
        self.shard = WireShard(freeze_at, freezes, routing_protocol)
        self.addCleanup(self.shard.close)
        self.cluster = Cluster([(65535, "a")])
        pool_logger = logging.getLogger("psycopg.pool")
        level = pool_logger.level
        pool_logger.setLevel(logging.CRITICAL)
        self.addCleanup(pool_logger.setLevel, level)

    def router_args(self, **kw):
        return dict({"listen": False, "refresh_interval": 0, "backoff_base": 0.001, "backoff_max": 0.01,
                     "shard_timeout": TIMEOUT, "max_size": 2}, **kw)

    def assert_about(self, elapsed, attempts=1):
        self.assertGreaterEqual(elapsed, attempts * TIMEOUT - 0.05, "ended before shard_timeout")
        self.assertLess(elapsed, attempts * TIMEOUT * SLACK, "far past shard_timeout")

    def assert_probed_again_after_the_freeze(self):
        """The probe froze on one connection, which the client closed; the probe, the claim
        on BEGIN and COMMIT then went on another one."""
        (frozen,) = self.shard.frozen
        self.assertEqual([text for _, text in self.shard.queries], [PROBE, PROBE, claim_on_begin(1, 1), "COMMIT"])
        numbers = [n for n, _ in self.shard.queries]
        self.assertEqual((numbers[0], len(set(numbers[1:]))), (frozen, 1))
        self.assertNotIn(frozen, numbers[1:])
        self.assertTrue(self.shard.wait_ended([frozen]), "a frozen connection was kept open")

    def assert_lost_and_discarded(self, claims_expected):
        """Each claim went on its own connection (a frozen one was never used again), and
        the client closed every frozen connection."""
        claims = self.shard.claims_by_connection()
        self.assertEqual((len(claims), set(claims.values())), (claims_expected, {1}), claims)
        self.assertTrue(self.shard.frozen)
        self.assertTrue(self.shard.wait_ended(self.shard.frozen), "a frozen connection was kept open")


class SyncShardTimeoutTest(Common, unittest.TestCase):
    def router(self, **kw):
        patch = mock.patch.object(router_module.psycopg, "connect", self.cluster.connect)
        patch.start()
        self.addCleanup(patch.stop)
        r = Router("coord", {"a": self.shard.dsn}, **self.router_args(**kw))
        self.addCleanup(r.close)
        return r

    def test_a_claim_never_answered_is_a_lost_connection_retried_until_the_limit(self):
        self.start("claim")
        r = self.router(retry_limit=2)
        runs = []
        for call in ("transaction", "run", "claim", "next_id"):
            with self.subTest(call):
                started = time.monotonic()
                with self.assertRaises(RouteRetryExhausted) as caught:
                    if call == "claim":
                        with r.claim(gene=1):
                            runs.append(call)
                    elif call == "next_id":
                        r.next_id("orders", 42)
                    else:
                        getattr(r, call)(lambda conn: runs.append(call), gene=1)
                self.assert_about(time.monotonic() - started, attempts=3)
                self.assertIsInstance(caught.exception.__cause__, ShardTimeout)
                self.assertIn("did not answer the claim within shard_timeout", str(caught.exception.__cause__))
        self.assertEqual(runs, [])
        self.assertEqual((r.stats["retries_lost"], r.stats["transactions"]), (4 * 2, 0))
        self.assert_lost_and_discarded(4 * 3)

    def test_a_claim_frozen_once_is_retried_and_commits(self):
        for protocol, claim in (("2", claim_on_begin(1, 1)), (None, claim_statement(1, 1))):
            with self.subTest(routing_protocol=protocol):
                self.start("claim", freezes=1, routing_protocol=protocol)
                r = self.router()
                started = time.monotonic()
                self.assertEqual(r.transaction(lambda conn: "done", gene=1), "done")
                self.assert_about(time.monotonic() - started)
                self.assertEqual((r.stats["retries_lost"], r.stats["transactions"]), (1, 1))
                self.assert_lost_and_discarded(2)
                # The probe again on the new connection (the frozen one was lost), the claim
                # in the form it read.
                self.assertEqual([text for _, text in self.shard.queries], [PROBE, claim, PROBE, claim, "COMMIT"])

    def test_a_probe_frozen_once_is_retried_as_a_lost_connection(self):
        self.start("probe", freezes=1)
        r = self.router()
        started = time.monotonic()
        self.assertEqual(r.transaction(lambda conn: "done", gene=1), "done")
        self.assert_about(time.monotonic() - started)
        self.assertEqual((r.stats["retries_lost"], r.stats["transactions"]), (1, 1))
        self.assert_probed_again_after_the_freeze()

    def test_a_commit_never_answered_is_commit_outcome_unknown(self):
        self.start("commit")
        r = self.router()
        runs = []
        for call in ("transaction", "run", "claim"):
            with self.subTest(call):
                started = time.monotonic()
                with self.assertRaises(CommitOutcomeUnknown) as caught:
                    if call == "claim":
                        with r.claim(gene=1):
                            runs.append(call)
                    else:
                        getattr(r, call)(lambda conn: runs.append(call), gene=1)
                self.assert_about(time.monotonic() - started)
                self.assertIsInstance(caught.exception.__cause__, ShardTimeout)
        self.assertEqual(runs, ["transaction", "run", "claim"])  # each once: never retried
        self.assertEqual((r.stats["retries_lost"], r.stats["transactions"]), (0, 0))
        self.assertEqual(len(self.shard.frozen), 3)
        self.assertTrue(self.shard.wait_ended(self.shard.frozen), "a frozen connection was kept open")

    def test_a_statement_never_answered_is_commit_outcome_unknown(self):
        self.start("statement")
        r = self.router()
        started = time.monotonic()
        with self.assertRaises(CommitOutcomeUnknown) as caught:
            r.execute("SELECT 1", gene=1)
        self.assert_about(time.monotonic() - started)
        self.assertIsInstance(caught.exception.__cause__, ShardTimeout)
        self.assertEqual((r.stats["retries_lost"], len(self.shard.frozen)), (0, 1))
        self.assertTrue(self.shard.wait_ended(self.shard.frozen))

    def test_a_rollback_never_answered_ends_and_the_body_s_error_is_raised(self):
        self.start("rollback")
        r = self.router()

        def body(conn):
            raise ZeroDivisionError

        started = time.monotonic()
        with self.assertRaises(ZeroDivisionError):
            r.transaction(body, gene=1)
        self.assert_about(time.monotonic() - started)
        self.assertTrue(self.shard.wait_ended(self.shard.frozen))
        self.assertEqual(r.transaction(lambda conn: 1, gene=1), 1)  # on a new connection
        self.assertEqual(len(self.shard.claims_by_connection()), 2)

    def test_a_connect_never_answered_is_a_pool_timeout_not_retried(self):
        self.start("startup")
        r = self.router()
        started = time.monotonic()
        with self.assertRaises(PoolTimeout):
            r.transaction(lambda conn: 1, gene=1)
        self.assert_about(time.monotonic() - started)
        self.assertEqual(r.stats["retries_lost"], 0)
        started = time.monotonic()
        r.close()  # the pool's connect under way ends within its connect_timeout (2 s here)
        self.assertLess(time.monotonic() - started, 10)


class AsyncShardTimeoutTest(Common, unittest.TestCase):
    def run_with_router(self, scenario, **kw):
        real_connect = psycopg.AsyncConnection.connect
        cluster = self.cluster

        async def connect(conninfo="", **kwargs):  # the fake coordinator, else the real shard
            if conninfo == "coord":
                return AsyncWrapped(cluster.connect(conninfo, **kwargs))
            return await real_connect(conninfo, **kwargs)

        async def main():
            async with AsyncRouter("coord", {"a": self.shard.dsn}, **self.router_args(**kw)) as r:
                return r, await scenario(r)

        with mock.patch.object(aio_module.psycopg.AsyncConnection, "connect", connect):
            return asyncio.run(main())

    async def timed(self, coro):
        started = time.monotonic()
        try:
            return await coro
        finally:
            self.assert_about(time.monotonic() - started, attempts=self.attempts)

    def test_a_claim_never_answered_is_a_lost_connection_retried_until_the_limit(self):
        self.start("claim")
        self.attempts = 3
        runs = []

        async def body(conn):
            runs.append(1)

        async def scenario(r):
            for call in ("transaction", "run", "next_id"):
                with self.subTest(call), self.assertRaises(RouteRetryExhausted) as caught:
                    if call == "next_id":
                        await self.timed(r.next_id("orders", 42))
                    else:
                        await self.timed(getattr(r, call)(body, gene=1))
                self.assertIsInstance(caught.exception.__cause__, ShardTimeout)

            async def with_claim():
                async with r.claim(gene=1):
                    runs.append(1)

            with self.assertRaises(RouteRetryExhausted):
                await self.timed(with_claim())

        r, _ = self.run_with_router(scenario, retry_limit=2)
        self.assertEqual(runs, [])
        self.assertEqual((r.stats["retries_lost"], r.stats["transactions"]), (4 * 2, 0))
        self.assert_lost_and_discarded(4 * 3)

    def test_a_claim_frozen_once_is_retried_and_commits(self):
        self.attempts = 1

        async def body(conn):
            return "done"

        async def scenario(r):
            return await self.timed(r.transaction(body, gene=1))

        for protocol, claim in (("2", claim_on_begin(1, 1)), (None, claim_statement(1, 1))):
            with self.subTest(routing_protocol=protocol):
                self.start("claim", freezes=1, routing_protocol=protocol)
                r, value = self.run_with_router(scenario)
                self.assertEqual((value, r.stats["retries_lost"], r.stats["transactions"]), ("done", 1, 1))
                self.assert_lost_and_discarded(2)
                self.assertEqual([text for _, text in self.shard.queries], [PROBE, claim, PROBE, claim, "COMMIT"])

    def test_a_probe_frozen_once_is_retried_as_a_lost_connection(self):
        self.start("probe", freezes=1)
        self.attempts = 1

        async def body(conn):
            return "done"

        async def scenario(r):
            return await self.timed(r.transaction(body, gene=1))

        r, value = self.run_with_router(scenario)
        self.assertEqual((value, r.stats["retries_lost"], r.stats["transactions"]), ("done", 1, 1))
        self.assert_probed_again_after_the_freeze()

    def test_a_commit_never_answered_is_commit_outcome_unknown(self):
        self.start("commit")
        self.attempts = 1
        runs = []

        async def body(conn):
            runs.append(1)

        async def scenario(r):
            for call in ("transaction", "run"):
                with self.subTest(call), self.assertRaises(CommitOutcomeUnknown) as caught:
                    await self.timed(getattr(r, call)(body, gene=1))
                self.assertIsInstance(caught.exception.__cause__, ShardTimeout)

            async def with_claim():
                async with r.claim(gene=1):
                    runs.append(1)

            with self.assertRaises(CommitOutcomeUnknown):
                await self.timed(with_claim())

        r, _ = self.run_with_router(scenario)
        self.assertEqual(runs, [1, 1, 1])
        self.assertEqual((r.stats["retries_lost"], r.stats["transactions"], len(self.shard.frozen)), (0, 0, 3))
        self.assertTrue(self.shard.wait_ended(self.shard.frozen))

    def test_a_statement_never_answered_is_commit_outcome_unknown(self):
        self.start("statement")
        self.attempts = 1

        async def scenario(r):
            with self.assertRaises(CommitOutcomeUnknown) as caught:
                await self.timed(r.execute("SELECT 1", gene=1))
            self.assertIsInstance(caught.exception.__cause__, ShardTimeout)

        r, _ = self.run_with_router(scenario)
        self.assertEqual((r.stats["retries_lost"], len(self.shard.frozen)), (0, 1))
        self.assertTrue(self.shard.wait_ended(self.shard.frozen))

    def test_a_rollback_never_answered_ends_and_the_body_s_error_is_raised(self):
        self.start("rollback")
        self.attempts = 1

        async def body(conn):
            raise ZeroDivisionError

        async def one(conn):
            return 1

        async def scenario(r):
            with self.assertRaises(ZeroDivisionError):
                await self.timed(r.transaction(body, gene=1))
            return await r.transaction(one, gene=1)

        r, value = self.run_with_router(scenario)
        self.assertEqual(value, 1)
        self.assertTrue(self.shard.wait_ended(self.shard.frozen))
        self.assertEqual(len(self.shard.claims_by_connection()), 2)

    def test_a_connect_never_answered_is_a_pool_timeout_not_retried(self):
        self.start("startup")
        self.attempts = 1

        async def one(conn):
            return 1

        async def scenario(r):
            with self.assertRaises(PoolTimeout):
                await self.timed(r.transaction(one, gene=1))

        started = time.monotonic()
        r, _ = self.run_with_router(scenario)  # (close() included: bounded by connect_timeout)
        self.assertLess(time.monotonic() - started, 15)
        self.assertEqual(r.stats["retries_lost"], 0)


class ShardTimeoutSettingsTest(unittest.TestCase):
    def test_pool_arguments(self):
        args = shard_pool_args({"min_size": 1, "max_size": 4}, "host=x", "a", 60.0)
        self.assertEqual((args["timeout"], args["kwargs"]["connect_timeout"], args["name"]),
                         (60.0, 60, "id_gen_client-a"))
        self.assertEqual((args["kwargs"]["autocommit"], args["kwargs"]["prepare_threshold"]), (True, None))
        self.assertEqual(shard_pool_args({}, "host=x", "a", 0.3)["kwargs"]["connect_timeout"], 2)  # libpq's least
        # What the caller set stays: the pool's timeout, a connect_timeout in the DSN or kwargs.
        args = shard_pool_args({"timeout": 5, "kwargs": {"connect_timeout": 3}}, "host=x", "a", 60.0)
        self.assertEqual((args["timeout"], args["kwargs"]["connect_timeout"]), (5, 3))
        self.assertNotIn("connect_timeout", shard_pool_args({}, "host=x connect_timeout=7", "a", 60.0)["kwargs"])
        self.assertNotIn("connect_timeout", shard_pool_args({}, "postgresql://x/db?connect_timeout=7", "a", 1)["kwargs"])
        with mock.patch.dict(os.environ, {"PGCONNECT_TIMEOUT": "9"}):
            self.assertNotIn("connect_timeout", shard_pool_args({}, "host=x", "a", 60.0)["kwargs"])

    def test_shard_timeout_must_be_positive(self):
        for bad in (0, -1, float("nan")):
            with self.assertRaises(ValueError):
                Router("coord", {"a": "a"}, shard_timeout=bad)
            with self.assertRaises(ValueError):
                AsyncRouter("coord", {"a": "a"}, shard_timeout=bad)


if __name__ == "__main__":
    unittest.main()
