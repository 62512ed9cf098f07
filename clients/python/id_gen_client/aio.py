"""AsyncRouter: the asyncio twin of `router.Router`, on psycopg's AsyncConnection and
psycopg_pool's AsyncConnectionPool, with the same methods and meanings (awaited):
`transaction`, `run`, `claim` (an async context manager), `execute`, `next_id`, `refresh`,
the lookups, `retry_limit` (retries after the first attempt). See router.py and
docs/routing-protocol.md.

    async with AsyncRouter(routes_dsn, shards) as router:
        n = await router.transaction(body, owner=42)   # async def body(conn): ...

Invariants, beside those of router.py: no lock is held across an await except the one that
serialises route reloads; the listener and the version poll are one task each (a listener
that waits or reconnects does not hold up the poll), both cancelled by `close()`; a LISTEN
that fails in `open()` does not fail it (the listener task retries it on its backoff, the
poll covers meanwhile), a route read that fails does; every wait on a
server is bounded (connect_timeout, statement_timeout on the coordinator, the pools'
timeouts, and `shard_timeout` for the probe of a shard's routing protocol, the claim, COMMIT,
ROLLBACK and `execute`'s statement). A shard silent for shard_timeout gets its socket shut
down by a timer of the loop
(_watchdog.AsyncGuard), never by cancelling the awaiting task: psycopg answers a
cancellation with a cancel request to the server and a wait for the query to end, which a
frozen server would not answer. Needs psycopg >= 3.2 (AsyncConnection.notifies(timeout=...)).
"""
from __future__ import annotations

import asyncio
import contextlib
from typing import (Any, AsyncIterator, Awaitable, Callable, Dict, List, Mapping, Optional, Sequence,
                    Tuple, TypeVar)

import psycopg
from psycopg import pq
from psycopg_pool import AsyncConnectionPool

from . import _routes
from ._routes import (COORDINATOR_CONNECT, EMPTY_ROUTES_VERSION_SQL,
                      LISTEN_POLL_SECONDS, ROUTE_VERSION_SQL, ROUTES_CHANNEL, ROUTES_SQL, Owner, RouteLookups, RouteTable,
                      shard_pool_args, target_gene)
from ._watchdog import AsyncGuard
from .errors import NoRouteError, connection_lost

T = TypeVar("T")
AsyncConn = psycopg.AsyncConnection[Any]
Body = Callable[[AsyncConn], Awaitable[T]]


class AsyncRouter(RouteLookups):
    """Routes transactions by owner, id or gene to the owning shard; for one event loop.

    The arguments are Router's (pool_kwargs go to psycopg_pool.AsyncConnectionPool),
    shard_timeout too (seconds, default 60): it bounds a free connection from the pool
    (PoolTimeout, raised), a connect, the probe, the claim, COMMIT, ROLLBACK and `execute`'s
    statement; a shard silent that long is a lost connection (ShardTimeout, the connection
    closed): the probe and the claim are retried, COMMIT or `execute`'s statement raises
    CommitOutcomeUnknown. The body's own statements are not bounded by it."""

    def __init__(self, routes_dsn: str, shards: Mapping[str, str], *, min_size: int = 1,
                 max_size: int = 8, retry_limit: int = 20, backoff_base: float = 0.005,
                 backoff_max: float = 0.2, listen: bool = True, refresh_interval: float = 1.0,
                 pool_kwargs: Optional[Mapping[str, Any]] = None, shard_timeout: float = 60.0) -> None:
        super().__init__(routes_dsn, shards, min_size=min_size, max_size=max_size, retry_limit=retry_limit,
                         backoff_base=backoff_base, backoff_max=backoff_max, listen=listen,
                         refresh_interval=refresh_interval, pool_kwargs=pool_kwargs, shard_timeout=shard_timeout)
        self._pools: Dict[str, AsyncConnectionPool[Any]] = {}
        self._reload_lock: Optional[asyncio.Lock] = None  # guards _routes_conn and reloads; made
        # in the running loop (on Python 3.9 a lock binds to the loop current at its creation)
        self._routes_conn: Optional[AsyncConn] = None
        self._listener_task: Optional[asyncio.Task[None]] = None
        self._poll_task: Optional[asyncio.Task[None]] = None
        self._opened = self._closed = False

    async def open(self) -> "AsyncRouter":
        """LISTENs (when listen), reads the routes (raising when it cannot) and starts the
        listener and version poll tasks. A LISTEN that fails does not fail it: the listener
        task retries it on its backoff while the poll covers."""
        if self._opened:
            return self
        self._opened = True
        listener = None
        try:
            if self.listen:
                try:
                    listener = await self._connect_listener()  # LISTEN before the first read
                except Exception:
                    pass  # not fatal: the poll covers while the listener task retries it
            await self.refresh()
        except BaseException:
            if listener is not None:
                await listener.close()
            await self.close()
            raise
        loop = asyncio.get_running_loop()
        if self.listen:
            self._listener_task = loop.create_task(self._listen_loop(listener), name="id_gen_client-routes")
        if self.refresh_interval > 0:
            self._poll_task = loop.create_task(self._poll_loop(), name="id_gen_client-routes-poll")
        return self

    async def __aenter__(self) -> "AsyncRouter":
        return await self.open()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # --- routes ---------------------------------------------------------------------------

    async def refresh(self) -> int:
        """Re-reads the routes now; returns their version (a call that waited for another
        reload that began after it and succeeded takes its result)."""
        requested_after = self._reloads_begun
        async with self._lock():
            if self._closed:
                raise RuntimeError("the AsyncRouter is closed")
            if self._last_good_reload > requested_after:
                return self._table.version
            self._reloads_begun += 1
            try:
                self._table = await self._read_routes()
            except psycopg.OperationalError:  # a lost connection: once more on a new one
                await self._drop_routes_conn()
                if self._closed:
                    raise
                self._table = await self._read_routes()
            self._last_good_reload = self._reloads_begun
            self.stats["refreshes"] += 1
            return self._table.version

    def _lock(self) -> asyncio.Lock:
        if self._reload_lock is None:
            self._reload_lock = asyncio.Lock()
        return self._reload_lock

    async def _routes_connection(self) -> AsyncConn:
        """The connection route reads and version polls use (under the reload lock), opened
        again when it was lost."""
        if self._routes_conn is None or self._routes_conn.closed:
            self._routes_conn = await psycopg.AsyncConnection.connect(
                self._routes_dsn, autocommit=True, **COORDINATOR_CONNECT)
        return self._routes_conn

    async def _read_routes(self) -> RouteTable:
        conn = await self._routes_connection()
        while True:
            rows = await (await conn.execute(ROUTES_SQL)).fetchall()
            if rows:
                return RouteTable.from_rows(rows)
            empty = await (await conn.execute(EMPTY_ROUTES_VERSION_SQL)).fetchone()
            if empty is not None:
                return RouteTable((), empty[0])

    async def _drop_routes_conn(self) -> None:
        if self._routes_conn is not None:
            await self._routes_conn.close()
            self._routes_conn = None

    async def _connect_listener(self) -> AsyncConn:
        conn = await psycopg.AsyncConnection.connect(self._routes_dsn, autocommit=True, **COORDINATOR_CONNECT)
        try:
            await conn.execute(f"LISTEN {ROUTES_CHANNEL}")
        except BaseException:
            await conn.close()
            raise
        return conn

    async def _listen_loop(self, conn: Optional[AsyncConn]) -> None:
        """The listener's task (when listen): LISTEN, and re-read the routes on a notification
        of a newer version, until close() cancels it. A lost connection is opened again (after
        a backoff), then the routes re-read; conn is None when LISTEN failed in open(): it is
        retried after the first backoff. The version poll has a task of its own (_poll_loop)."""
        failures = 0 if conn is not None else 1
        try:
            if failures:
                await asyncio.sleep(min(0.1 * 2 ** failures, 5.0))
            while True:
                try:
                    if conn is None:
                        conn = await self._connect_listener()
                        await self.refresh()  # notifications may have been missed meanwhile
                    async for n in conn.notifies(timeout=LISTEN_POLL_SECONDS):
                        if int(n.payload) > self._table.version:
                            await self.refresh()
                    failures = 0
                except asyncio.CancelledError:
                    raise
                except Exception:  # a lost connection, a failed reload: reconnect and re-read
                    if conn is not None:
                        await conn.close()
                        conn = None
                    failures += 1
                    await asyncio.sleep(min(0.1 * 2 ** failures, 5.0))
        finally:
            if conn is not None:
                await conn.close()

    async def _poll_loop(self) -> None:
        """The version poll's task (when refresh_interval > 0): _poll_version every
        refresh_interval seconds, whatever the listener is doing, until close() cancels it
        (each poll starts refresh_interval after the previous one started, or at once when
        that one took longer)."""
        loop = asyncio.get_running_loop()
        next_poll = loop.time() + self.refresh_interval
        while True:
            await asyncio.sleep(max(0.0, next_poll - loop.time()))
            next_poll = max(next_poll + self.refresh_interval, loop.time())
            await self._poll_version()

    async def _poll_version(self) -> None:
        """Re-reads the routes when the coordinator's route version is newer than the one
        held (a notification lost, or kept from the listener by a pooler); a coordinator that
        does not answer is tried again at the next poll."""
        try:
            async with self._lock():
                if self._closed:
                    return
                row = await (await (await self._routes_connection()).execute(ROUTE_VERSION_SQL)).fetchone()
            if row is not None and row[0] > self._table.version:
                await self.refresh()
        except Exception:  # (a lost connection, a closed router: the next poll tries again)
            async with self._lock():
                await self._drop_routes_conn()

    async def _pool(self, shard: str) -> AsyncConnectionPool[Any]:
        if self._closed:
            raise RuntimeError("the AsyncRouter is closed")
        pool = self._pools.get(shard)
        if pool is None:
            dsn = self._shard_dsns[shard]
            args = shard_pool_args(self._pool_args, dsn, shard, self.shard_timeout)
            args["open"] = False
            pool = self._pools[shard] = AsyncConnectionPool(dsn, **args)
            await pool.open()
        return pool

    # --- transactions ---------------------------------------------------------------------

    async def transaction(self, body: Body[T], *, owner: Optional[Owner] = None, id: Optional[int] = None,
                          gene: Optional[int] = None) -> T:
        """await body(conn) in a claimed transaction on the owning shard; retried on
        IG001/IG002 (claim, body or COMMIT) up to retry_limit times. Returns its value."""
        return await self._call(body, target_gene(owner, id, gene), retry_body=True)

    async def run(self, body: Body[T], *, owner: Optional[Owner] = None, id: Optional[int] = None,
                  gene: Optional[int] = None) -> T:
        """The body once (the claim retried); IG001/IG002 from the body or COMMIT are raised."""
        return await self._call(body, target_gene(owner, id, gene), retry_body=False)

    @contextlib.asynccontextmanager
    async def claim(self, *, owner: Optional[Owner] = None, id: Optional[int] = None,
                    gene: Optional[int] = None) -> AsyncIterator[AsyncConn]:
        """async with: a connection in a claimed transaction (the form of `run`)."""
        pool, conn = await self._claim(target_gene(owner, id, gene))
        t = self.shard_timeout
        try:
            try:
                yield conn
            except BaseException:
                await _rollback_quietly(conn, t)
                raise
            try:
                await _commit(conn, t)
            except BaseException as e:
                await _rollback_quietly(conn, t)
                raise _routes.attempt_failure(e, "commit", False)
            self.stats["transactions"] += 1
        finally:
            await self._give_back(pool, conn)

    async def _retrying(self, g: int, what: str,
                        once: Callable[[RouteTable, AsyncConnectionPool[Any], AsyncConn], Awaitable[T]]) -> T:
        """As Router._retrying: the one retry loop."""
        last_error = refresh_error = None
        for attempt in range(self.retry_limit + 1):
            try:
                table, pool, conn = await self._checkout(g, attempt)
                return await once(table, pool, conn)
            except _routes.RetryRoute as retry:
                last_error = retry.error
                refresh_error = await self._after_route_error(retry.code, attempt, refresh_error)
        raise _routes.exhausted(g, what, self.retry_limit, refresh_error) from last_error

    async def _claim(self, g: int) -> Tuple[AsyncConnectionPool[Any], AsyncConn]:
        """As Router._claim."""
        t = self.shard_timeout

        async def once(table: RouteTable, pool: AsyncConnectionPool[Any],
                       conn: AsyncConn) -> Tuple[AsyncConnectionPool[Any], AsyncConn]:
            try:
                await self._send_claim(pool, conn, g, table.version)
            except BaseException as e:
                await _rollback_quietly(conn, t)
                await self._give_back(pool, conn)
                raise _routes.attempt_failure(e, "claim", False)
            return pool, conn
        return await self._retrying(g, "no shard accepted the claim in", once)

    async def _send_claim(self, pool: AsyncConnectionPool[Any], conn: AsyncConn, g: int, version: int) -> None:
        """As Router._send_claim: the claim in the form the pool's shard takes, probed on
        this connection when not known."""
        on_begin = self._claims_on_begin.get(pool)
        if on_begin is None:
            on_begin = self._claims_on_begin[pool] = await _probe_claims_on_begin(conn, self.shard_timeout)
        with AsyncGuard(conn, "the claim", self.shard_timeout, strict=True):
            await _simple(conn, _routes.claim_sql(g, version, on_begin))

    async def _give_back(self, pool: AsyncConnectionPool[Any], conn: AsyncConn) -> None:
        """As Router._give_back: a connection that was lost makes its shard's claim form
        unknown again."""
        if conn.closed:
            self._claims_on_begin.pop(pool, None)
        await pool.putconn(conn)

    async def _call(self, body: Body[T], g: int, retry_body: bool) -> T:
        t = self.shard_timeout

        async def once(table: RouteTable, pool: AsyncConnectionPool[Any], conn: AsyncConn) -> T:
            phase = "claim"
            try:
                await self._send_claim(pool, conn, g, table.version)
                phase = "body"
                result = await body(conn)
                phase = "commit"
                await _commit(conn, t)
                self.stats["transactions"] += 1
                return result
            except BaseException as e:
                # A body that ended the transaction itself (its own COMMIT or ROLLBACK) and
                # then failed is never run again: what it committed stays committed.
                ended = phase == "body" and _routes.ended_by_body(conn)
                await _rollback_quietly(conn, t)
                raise e if ended else _routes.attempt_failure(e, phase, retry_body)
            finally:
                await self._give_back(pool, conn)
        return await self._retrying(g, "the route kept changing for", once)

    async def execute(self, query: Any, params: Optional[Sequence[Any]] = None, *,
                      owner: Optional[Owner] = None, id: Optional[int] = None,
                      gene: Optional[int] = None) -> Optional[List[Tuple[Any, ...]]]:
        """One statement with the route version declared in its leading comment, in a
        transaction of its own: one round trip; retried on IG001/IG002. Its rows, or None. Lost after the
        statement was sent, or not answered within shard_timeout: CommitOutcomeUnknown."""
        t = self.shard_timeout

        async def once(table: RouteTable, pool: AsyncConnectionPool[Any],
                       conn: AsyncConn) -> Optional[List[Tuple[Any, ...]]]:
            try:
                with AsyncGuard(conn, "the statement", t):
                    rows = await _execute_declared(conn, table.version, query, params)
                self.stats["transactions"] += 1
                return rows
            except BaseException as e:
                raise _routes.attempt_failure(e, "statement", True)
            finally:
                await self._give_back(pool, conn)
        return await self._retrying(target_gene(owner, id, gene), "the route kept changing for", once)

    async def next_id(self, sequence: str, owner: Owner) -> int:
        """An owner-affine id from the owning shard: id_gen.gene_order_id(sequence, owner)."""
        query = f"SELECT id_gen.gene_order_id(%s::text, %s::{_routes.owner_cast(owner)})"

        async def body(conn: AsyncConn) -> Any:
            return await (await conn.execute(query, (sequence, owner))).fetchone()

        row = await self.transaction(body, owner=owner)
        return int(row[0])

    async def _checkout(self, g: int, attempt: int) -> Tuple[RouteTable, AsyncConnectionPool[Any], AsyncConn]:
        table = self._table
        try:
            shard = self._route(g, table)
        except NoRouteError:
            # The routes may have changed since they were read: on the first attempt, read
            # them again and look once more (no attempt of its own).
            if attempt > 0 or await self.refresh() == table.version:
                raise
            table = self._table
            shard = self._route(g, table)
        pool = await self._pool(shard)
        try:
            return table, pool, await pool.getconn()  # (waits at most the pool's timeout: shard_timeout)
        except psycopg.Error as e:  # refused (the shard restarting): retried; PoolTimeout: raised
            raise _routes.attempt_failure(e, "connect", True)

    async def _after_route_error(self, code: str, attempt: int,
                                 refresh_error: Optional[BaseException]) -> Optional[BaseException]:
        """As Router._after_route_error."""
        if attempt >= self.retry_limit:
            return refresh_error
        self.stats[_routes.retry_counter(code)] += 1
        if _routes.rereads_after(code, attempt):
            try:
                await self.refresh()
                refresh_error = None
            except psycopg.Error as e:
                refresh_error = e
        await asyncio.sleep(_routes.backoff_delay(attempt, self.backoff_base, self.backoff_max))
        return refresh_error

    async def close(self) -> None:
        """Cancels the listener and the version poll (and waits for both to end) and closes
        every connection; safe to call twice."""
        self._closed = True
        tasks = [t for t in (self._listener_task, self._poll_task) if t is not None]
        self._listener_task = self._poll_task = None
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            await pool.close()
        async with self._lock():  # after a reload under way, which sees _closed before reconnecting
            await self._drop_routes_conn()


async def _probe_claims_on_begin(conn: AsyncConn, timeout: float) -> bool:
    """As router._probe_claims_on_begin: the shard's routing protocol, read in autocommit
    (bounded by timeout); a lost connection is raised, any other error answers no."""
    try:
        with AsyncGuard(conn, "the probe of the routing protocol", timeout, strict=True):
            row = await (await conn.execute(_routes.ROUTING_PROTOCOL_SQL, prepare=False)).fetchone()
    except psycopg.Error as e:
        if connection_lost(e):
            raise
        return False
    return _routes.claims_on_begin(row[0] if row is not None else None)


async def _simple(conn: AsyncConn, sql: str) -> None:
    """Statements without parameters: psycopg sends them as one simple-protocol message."""
    await conn.execute(sql, prepare=False)


async def _commit(conn: AsyncConn, timeout: float) -> None:
    if conn.pgconn.transaction_status == pq.TransactionStatus.INERROR:
        raise psycopg.errors.InFailedSqlTransaction(
            "id_gen_client: the transaction failed inside the body; it was rolled back")
    if _routes.ended_by_body(conn):  # (see router._commit)
        raise psycopg.errors.NoActiveSqlTransaction(
            "id_gen_client: the transaction was ended inside the body (a COMMIT or ROLLBACK of its own); "
            "the router committed nothing")
    with AsyncGuard(conn, "COMMIT", timeout):
        await _simple(conn, "COMMIT")


async def _execute_declared(conn: AsyncConn, version: int, query: Any,
                            params: Optional[Sequence[Any]]) -> Optional[List[Tuple[Any, ...]]]:
    """As router._execute_declared: the statement with the route version in its leading
    comment, in autocommit (one round trip, one implicit transaction)."""
    cur = await conn.execute(_routes.declared_query(version, query), params)
    return await cur.fetchall() if cur.description is not None else None


async def _rollback_quietly(conn: AsyncConn, timeout: float) -> None:
    """Ends a failed or abandoned transaction (none open: nothing to send), bounded by
    timeout; a broken connection (or one that did not answer in time, then closed) is left
    to the pool, which discards it."""
    if conn.closed or conn.broken or conn.pgconn.transaction_status == pq.TransactionStatus.IDLE:
        return
    try:
        with AsyncGuard(conn, "ROLLBACK", timeout):
            await _simple(conn, "ROLLBACK")
    except psycopg.Error:
        pass
