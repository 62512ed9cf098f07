"""Router: zero-hop routing of transactions to the shard that owns a gene (synchronous;
`aio.AsyncRouter` is its asyncio twin, with the same methods).

Implements the client side of docs/routing-protocol.md, with its vocabulary:

* `transaction(body, owner=|id=|gene=)`: body(conn) in a transaction on the owning shard
  that starts with the claim; on IG001/IG002 (from the claim, the body or COMMIT) it rolls
  back, re-reads the routes (IG001; IG002 every third time), waits, and runs the body again,
  at most `retry_limit` times after the first attempt. Returns the body's value.
* `run(body, ...)`: the same transaction, but the body runs once: IG001/IG002 from the body
  or COMMIT reach the caller (for bodies that must not repeat). `claim(...)` is its `with`
  form.
* `execute(query, params, ...)`: one statement, the route version declared in its own
  transaction in the same round trip; retried like `transaction`.
* `next_id(sequence, owner)`, `shard_for_owner/_id/_gene`, `refresh()`, `version`, `routes`.

Invariants it keeps:

* The routes and their version are one immutable snapshot (`RouteTable`), replaced whole
  under a lock; a lookup reads the snapshot once, so a shard always goes with the version
  it was routed by.
* The listener connection LISTENs on id_gen_routes before any route read, so no committed
  route change after a read goes unnoticed; after it reconnects it re-reads the routes.
  The constructor needs the first route read only: a LISTEN that fails then is retried by
  the listener's thread on its backoff, while the version poll covers.
  The poll of the route version runs on a thread of its own, so a listener that waits for
  notifications or reconnects does not hold it up (nor does a slow poll hold up the receipt
  of notifications): a lost notification costs at most about refresh_interval. Route reads
  and polls still take turns on the one routes connection (_reload_lock), each bounded by
  the coordinator's statement_timeout.
* Every transaction on a shard starts with the claim in one simple-protocol message:
  `/* id_gen.route_claim=g,v */ BEGIN` on a shard of routing protocol 2 (id_gen 0.7.16 on),
  else `BEGIN; SELECT id_gen.route_claim(g, v)`. Which one a shard takes, its pool learns
  from a probe (`_routes.ROUTING_PROTOCOL_SQL`, in autocommit) before its first claim, and
  again after one of its connections came back lost. A re-read that fails (the coordinator
  down) does not end the retries; only retry_limit does. A body that raised is never
  reported committed, and a body whose COMMIT succeeded is never run again.
* `execute` sends its statement with the route version in a leading comment
  (`/* id_gen.route_version=v */`), in autocommit: one statement, so a transaction-mode
  pooler (PgBouncer) has nothing to keep together. Nothing is declared per connection.
* Every connection taken from a pool goes back to it, idle (rolled back) or broken.
* What the router sends to a shard or waits for there is bounded by `shard_timeout`: a free
  connection from the pool (and each connect), the probe, the claim, COMMIT, ROLLBACK and
  `execute`'s statement (the body's own statements are the caller's). A shard silent that
  long (a frozen process whose kernel still acknowledges TCP) gets its socket shut down by the
  router's watchdog thread (_watchdog.py): the connection is discarded and the wait ends as
  a lost connection (ShardTimeout): retried before COMMIT was sent, CommitOutcomeUnknown
  after it (or after `execute`'s statement was sent). No free connection in time is
  psycopg_pool's PoolTimeout, raised, not retried.
"""
from __future__ import annotations

import contextlib
import inspect
import select
import threading
import time
import warnings
from typing import (Any, Callable, ContextManager, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple,
                    TypeVar, overload)

import psycopg
from psycopg import pq
from psycopg_pool import ConnectionPool

from . import _routes
from ._routes import (COORDINATOR_CONNECT, EMPTY_ROUTES_VERSION_SQL,
                      LISTEN_POLL_SECONDS, ROUTE_VERSION_SQL, ROUTES_CHANNEL, ROUTES_SQL, Owner, RouteLookups,
                      RouteTable, shard_pool_args, target_gene)
from ._watchdog import Watchdog
from .errors import NoRouteError, connection_lost

T = TypeVar("T")
Conn = psycopg.Connection[Any]
NOTIFIES_TAKES_TIMEOUT = "timeout" in inspect.signature(psycopg.Connection.notifies).parameters


class Router(RouteLookups):
    """Routes transactions by owner, id or gene to the owning shard; thread-safe.

    routes_dsn: the coordinator; shards: shard name -> DSN. min_size, max_size: each shard
    pool's sizes (pool_kwargs: more psycopg_pool.ConnectionPool arguments). retry_limit:
    retries after the first attempt. backoff_base, backoff_max: the wait before retry n is
    min(base * 2**n, max) seconds, jittered. listen: LISTEN for route changes;
    refresh_interval: seconds between polls of the route version (0: none). The constructor
    reads the routes and raises the driver's error when it cannot; a LISTEN that fails does
    not fail it: the poll covers while the listener is retried in the background (0.2 s
    doubling to 5 s) until close().

    shard_timeout (seconds, default 60): the longest the router waits on a shard for what it
    sends itself: a free connection from the pool (psycopg_pool's PoolTimeout after it, not
    retried; pool_kwargs' own `timeout` takes its place there), a connect (the connections'
    connect_timeout, unless the DSN, PGCONNECT_TIMEOUT or pool_kwargs sets one), the probe of
    the shard's routing protocol, the claim, COMMIT, ROLLBACK and `execute`'s statement. A
    shard silent that long is a lost connection (ShardTimeout; the connection is closed):
    the probe and the claim are retried, COMMIT or `execute`'s statement raises
    CommitOutcomeUnknown. The body's own statements are not bounded by it (use
    statement_timeout, or the caller's own bound)."""

    def __init__(self, routes_dsn: str, shards: Mapping[str, str], *, min_size: int = 1,
                 max_size: int = 8, retry_limit: int = 20, backoff_base: float = 0.005,
                 backoff_max: float = 0.2, listen: bool = True, refresh_interval: float = 1.0,
                 pool_kwargs: Optional[Mapping[str, Any]] = None, shard_timeout: float = 60.0) -> None:
        super().__init__(routes_dsn, shards, min_size=min_size, max_size=max_size, retry_limit=retry_limit,
                         backoff_base=backoff_base, backoff_max=backoff_max, listen=listen,
                         refresh_interval=refresh_interval, pool_kwargs=pool_kwargs, shard_timeout=shard_timeout)
        self._watchdog = Watchdog(self.shard_timeout, "id_gen_client-shard-timeout")
        self._stats_lock = threading.Lock()
        self._pools: Dict[str, ConnectionPool[Any]] = {}
        self._pools_lock = threading.Lock()
        self._reload_lock = threading.Lock()  # guards _routes_conn and reloads
        self._routes_conn: Optional[Conn] = None
        self._stop = threading.Event()
        self._listener_thread: Optional[threading.Thread] = None
        self._poll_thread: Optional[threading.Thread] = None
        self._closed = False
        listener = None
        try:
            if listen:
                try:
                    listener = self._connect_listener()  # LISTEN before the first read
                except Exception:
                    # Not fatal: the poll covers while the listener's thread retries it
                    # (backing off). Only the route read below must succeed.
                    pass
            self.refresh()
        except BaseException:
            if listener is not None:
                listener.close()
            self.close()
            raise
        # Two threads: a listener blocked (waiting for notifications, or reconnecting to a
        # coordinator that does not answer, within its connect_timeout) does not hold up the
        # poll, and a slow poll does not hold up the receipt of notifications.
        if listen:
            self._listener_thread = threading.Thread(
                target=self._listen_loop, args=(listener,), name="id_gen_client-routes", daemon=True)
            self._listener_thread.start()
        if refresh_interval > 0:
            self._poll_thread = threading.Thread(
                target=self._poll_loop, name="id_gen_client-routes-poll", daemon=True)
            self._poll_thread.start()

    # --- routes ---------------------------------------------------------------------------

    def refresh(self) -> int:
        """Re-reads the routes from the coordinator now; returns their version.

        A call that waited while another thread reloaded takes that reload's result when
        it began after the call and succeeded."""
        requested_after = self._reloads_begun
        with self._reload_lock:
            if self._closed:
                raise RuntimeError("the Router is closed")
            if self._last_good_reload > requested_after:
                return self._table.version
            self._reloads_begun += 1
            try:
                self._table = self._read_routes()
            except psycopg.OperationalError:  # a lost connection: once more on a new one
                self._drop_routes_conn()
                self._table = self._read_routes()
            self._last_good_reload = self._reloads_begun
            self._count("refreshes")
            return self._table.version

    def _routes_connection(self) -> Conn:
        """The connection route reads and version polls use (under _reload_lock), opened
        again when it was lost."""
        if self._routes_conn is None or self._routes_conn.closed:
            self._routes_conn = psycopg.connect(self._routes_dsn, autocommit=True, **COORDINATOR_CONNECT)
        return self._routes_conn

    def _read_routes(self) -> RouteTable:
        conn = self._routes_connection()
        while True:
            rows = conn.execute(ROUTES_SQL).fetchall()
            if rows:
                return RouteTable.from_rows(rows)
            empty = conn.execute(EMPTY_ROUTES_VERSION_SQL).fetchone()
            if empty is not None:
                return RouteTable((), empty[0])

    def _drop_routes_conn(self) -> None:
        if self._routes_conn is not None:
            self._routes_conn.close()
            self._routes_conn = None

    # --- listening to route changes -------------------------------------------------------

    def _connect_listener(self) -> Conn:
        conn = psycopg.connect(self._routes_dsn, autocommit=True, **COORDINATOR_CONNECT)
        try:
            conn.execute(f"LISTEN {ROUTES_CHANNEL}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _listen_loop(self, conn: Optional[Conn]) -> None:
        """The listener's thread (when listen): LISTEN, and re-read the routes on a
        notification of a newer version, until close(). A lost connection is opened again
        (after a backoff), then the routes re-read. The version poll has a thread of its own
        (_poll_loop), so it keeps its interval while this one waits or reconnects. conn is
        None when LISTEN failed in the constructor: it is retried after the first backoff."""
        failures = 0 if conn is not None else 1  # (LISTEN failed at the start: back off first)
        if failures:
            self._stop.wait(min(0.1 * 2 ** failures, 5.0))
        while not self._stop.is_set():
            try:
                if conn is None:
                    conn = self._connect_listener()
                    self.refresh()  # notifications may have been missed while disconnected
                for payload in self._wait_for_notifications(conn):
                    if int(payload) > self._table.version:
                        self.refresh()
                failures = 0
            except Exception:  # a lost connection, a failed reload: reconnect and re-read
                if conn is not None:
                    conn.close()
                    conn = None
                failures += 1
                self._stop.wait(min(0.1 * 2 ** failures, 5.0))
        if conn is not None:
            conn.close()

    def _poll_loop(self) -> None:
        """The version poll's thread (when refresh_interval > 0): _poll_version every
        refresh_interval seconds, whatever the listener is doing, until close(): each poll
        starts refresh_interval after the previous one started, or at once when that one took
        longer (a poll is bounded by the coordinator's connect_timeout and statement_timeout)."""
        next_poll = time.monotonic() + self.refresh_interval
        while not self._stop.wait(max(0.0, next_poll - time.monotonic())):
            next_poll = max(next_poll + self.refresh_interval, time.monotonic())
            self._poll_version()

    def _poll_version(self) -> None:
        """Re-reads the routes when the coordinator's route version is newer than the one
        held: a route change whose notification was lost (or that a pooler kept from the
        listener) is seen within refresh_interval. A coordinator that does not answer is
        tried again at the next poll."""
        try:
            with self._reload_lock:
                if self._closed:
                    return
                row = self._routes_connection().execute(ROUTE_VERSION_SQL).fetchone()
            if row is not None and row[0] > self._table.version:
                self.refresh()
        except Exception:  # (a lost connection, a closed router: the next poll tries again)
            with self._reload_lock:
                self._drop_routes_conn()

    def _wait_for_notifications(self, conn: Conn) -> List[str]:
        """Payloads received within LISTEN_POLL_SECONDS (psycopg >= 3.2: notifies(timeout);
        older: select on the socket, then a query that delivers them to a handler)."""
        if NOTIFIES_TAKES_TIMEOUT:
            return [n.payload for n in conn.notifies(timeout=LISTEN_POLL_SECONDS)]
        received: List[str] = []

        def collect(notify: Any) -> None:
            received.append(notify.payload)

        conn.add_notify_handler(collect)
        try:
            readable, _, _ = select.select([conn.fileno()], [], [], LISTEN_POLL_SECONDS)
            if readable:
                conn.execute("SELECT 1")
        finally:
            conn.remove_notify_handler(collect)
        return received

    # --- pools (the lookups are RouteLookups') --------------------------------------------

    def _pool(self, shard: str) -> ConnectionPool[Any]:
        with self._pools_lock:
            if self._closed:
                raise RuntimeError("the Router is closed")
            pool = self._pools.get(shard)
            if pool is None:
                dsn = self._shard_dsns[shard]
                args = shard_pool_args(self._pool_args, dsn, shard, self.shard_timeout)
                args.setdefault("open", True)
                pool = self._pools[shard] = ConnectionPool(dsn, **args)
            return pool

    # --- transactions ---------------------------------------------------------------------

    @overload
    def transaction(self, body: Callable[[Conn], T], *, owner: Optional[Owner] = None,
                    id: Optional[int] = None, gene: Optional[int] = None) -> T: ...

    @overload
    def transaction(self, body: None = None, *, owner: Optional[Owner] = None,
                    id: Optional[int] = None, gene: Optional[int] = None) -> ContextManager[Conn]: ...

    def transaction(self, body: Optional[Callable[[Conn], T]] = None, *, owner: Optional[Owner] = None,
                    id: Optional[int] = None, gene: Optional[int] = None) -> Any:
        """body(conn) in a transaction on the shard that owns the gene of exactly one of
        owner, id or gene, the route version claimed; commits when the body returns and
        returns its value. On IG001/IG002 (claim, body or COMMIT) the transaction rolls back
        and the body runs again, at most retry_limit times more; then RouteRetryExhausted.
        Any other error rolls back and is raised.

        (Called without a body, as in 0.6: the one-attempt context manager `claim`, with a
        DeprecationWarning.)"""
        if body is None:
            warnings.warn("Router.transaction() without a body is the one-attempt context manager: "
                          "use Router.claim(...) for it, or pass the body to be retried",
                          DeprecationWarning, stacklevel=2)
            return self.claim(owner=owner, id=id, gene=gene)
        return self._call(body, target_gene(owner, id, gene), retry_body=True)

    def run(self, body: Callable[[Conn], T], *, owner: Optional[Owner] = None,
            id: Optional[int] = None, gene: Optional[int] = None) -> T:
        """body(conn) once in a claimed transaction (the claim itself is retried on
        IG001/IG002, as no body has run yet); IG001/IG002 from the body or COMMIT reach the
        caller. Returns the body's value."""
        return self._call(body, target_gene(owner, id, gene), retry_body=False)

    @contextlib.contextmanager
    def claim(self, *, owner: Optional[Owner] = None, id: Optional[int] = None,
              gene: Optional[int] = None) -> Iterator[Conn]:
        """Yields a connection in a claimed transaction on the owning shard (the `with` form
        of `run`): commits when the block ends, rolls back (and re-raises) when it raises.
        A connection lost at COMMIT (or silent for shard_timeout) raises
        CommitOutcomeUnknown."""
        pool, conn = self._claim(target_gene(owner, id, gene))
        wd = self._watchdog
        try:
            try:
                yield conn
            except BaseException:
                _rollback_quietly(conn, wd)
                raise
            try:
                _commit(conn, wd)
            except BaseException as e:
                _rollback_quietly(conn, wd)
                raise _routes.attempt_failure(e, "commit", False)
            self._count("transactions")
        finally:
            self._give_back(pool, conn)

    def _retrying(self, g: int, what: str, once: Callable[[RouteTable, ConnectionPool[Any], Conn], T]) -> T:
        """The one retry loop: once(routes, pool, connection) on gene g's shard by the
        routes held (it gives the connection back to the pool itself). A RetryRoute from it
        (IG001/IG002) is retried up to retry_limit times, the routes re-read and the backoff
        waited between (_after_route_error); then RouteRetryExhausted, naming `what`."""
        last_error = refresh_error = None
        for attempt in range(self.retry_limit + 1):
            try:
                table, pool, conn = self._checkout(g, attempt)
                return once(table, pool, conn)
            except _routes.RetryRoute as retry:
                last_error = retry.error
                refresh_error = self._after_route_error(retry.code, attempt, self.retry_limit, refresh_error)
        raise _routes.exhausted(g, what, self.retry_limit, refresh_error) from last_error

    def _call(self, body: Callable[[Conn], T], g: int, retry_body: bool) -> T:
        """Claim, body, COMMIT; IG001/IG002 from the claim are retried, from the body or
        COMMIT only when retry_body; all retries count against retry_limit."""
        wd = self._watchdog

        def once(table: RouteTable, pool: ConnectionPool[Any], conn: Conn) -> T:
            phase = "claim"
            try:
                self._send_claim(pool, conn, g, table.version)
                phase = "body"
                result = body(conn)
                phase = "commit"
                _commit(conn, wd)
                self._count("transactions")
                return result
            except BaseException as e:
                # A body that ended the transaction itself (its own COMMIT or ROLLBACK) and
                # then failed is never run again: what it committed stays committed.
                ended = phase == "body" and _routes.ended_by_body(conn)
                _rollback_quietly(conn, wd)
                raise e if ended else _routes.attempt_failure(e, phase, retry_body)
            finally:
                self._give_back(pool, conn)
        return self._retrying(g, "the route kept changing for", once)

    def execute(self, query: Any, params: Optional[Sequence[Any]] = None, *, owner: Optional[Owner] = None,
                id: Optional[int] = None, gene: Optional[int] = None) -> Optional[List[Tuple[Any, ...]]]:
        """One statement on the owning shard, in a transaction of its own that declares the
        route version in a leading comment (see _execute_declared): one round trip, as on
        a direct connection, also behind a transaction-mode pooler. `query` is one
        statement (it goes by the extended protocol). Retried on IG001/IG002, which a
        statement that failed leaves without effect. Returns its rows (a list of tuples),
        or None for a statement that returns none. A connection lost after the statement
        was sent, or a shard that did not answer it within shard_timeout, raises
        CommitOutcomeUnknown (the statement and its implicit COMMIT travel together)."""
        wd = self._watchdog

        def once(table: RouteTable, pool: ConnectionPool[Any], conn: Conn) -> Optional[List[Tuple[Any, ...]]]:
            try:
                with wd.guard(conn, "the statement"):
                    rows = _execute_declared(conn, table.version, query, params)
                self._count("transactions")
                return rows
            except psycopg.Error as e:
                raise _routes.attempt_failure(e, "statement", True)
            finally:
                self._give_back(pool, conn)
        return self._retrying(target_gene(owner, id, gene), "the route kept changing for", once)

    def next_id(self, sequence: str, owner: Owner) -> int:
        """An owner-affine id from the owning shard: id_gen.gene_order_id(sequence, owner)."""
        query = f"SELECT id_gen.gene_order_id(%s::text, %s::{_routes.owner_cast(owner)})"
        row = self.transaction(lambda conn: conn.execute(query, (sequence, owner)).fetchone(), owner=owner)
        assert row is not None  # a SELECT of one function call returns one row
        return int(row[0])

    def _checkout(self, g: int, attempt: int) -> Tuple[RouteTable, ConnectionPool[Any], Conn]:
        """(routes, pool, connection) for gene g by the current routes."""
        table = self._table
        try:
            shard = self._route(g, table)
        except NoRouteError:
            # The routes may have changed since they were read: on the first attempt, read
            # them again and look once more (no attempt of its own).
            if attempt > 0 or self.refresh() == table.version:
                raise
            table = self._table
            shard = self._route(g, table)
        pool = self._pool(shard)
        try:
            return table, pool, pool.getconn()  # (waits at most the pool's timeout: shard_timeout)
        except psycopg.Error as e:  # refused (the shard restarting): retried; PoolTimeout: raised
            raise _routes.attempt_failure(e, "connect", True)

    def _claim(self, g: int) -> Tuple[ConnectionPool[Any], Conn]:
        """A connection of the owning shard's pool, in a transaction that claimed gene g
        (the claim retried on IG001/IG002 up to retry_limit times)."""
        wd = self._watchdog

        def once(table: RouteTable, pool: ConnectionPool[Any], conn: Conn) -> Tuple[ConnectionPool[Any], Conn]:
            try:
                self._send_claim(pool, conn, g, table.version)
            except BaseException as e:
                _rollback_quietly(conn, wd)
                self._give_back(pool, conn)
                raise _routes.attempt_failure(e, "claim", False)
            return pool, conn
        return self._retrying(g, "no shard accepted the claim in", once)

    def _send_claim(self, pool: ConnectionPool[Any], conn: Conn, g: int, version: int) -> None:
        """Opens the transaction with the claim of gene g at `version`, in the form the
        pool's shard takes (`_routes.claim_sql`), probed on this connection when not known."""
        on_begin = self._claims_on_begin.get(pool)
        if on_begin is None:
            on_begin = self._claims_on_begin[pool] = _probe_claims_on_begin(conn, self._watchdog)
        with self._watchdog.guard(conn, "the claim", strict=True):
            _simple(conn, _routes.claim_sql(g, version, on_begin))

    def _give_back(self, pool: ConnectionPool[Any], conn: Conn) -> None:
        """Returns the connection to its pool (which discards it when broken). One that was
        lost makes its shard's claim form unknown again: a restart may have changed the
        shard's library, so the next claim there probes first."""
        if conn.closed:
            self._claims_on_begin.pop(pool, None)
        pool.putconn(conn)

    def _after_route_error(self, code: str, attempt: int, retries: int,
                           refresh_error: Optional[BaseException]) -> Optional[BaseException]:
        """After attempt number `attempt` met IG001/IG002: re-reads the routes (after IG001,
        and after every third IG002), then waits the backoff; nothing after the last
        attempt. A failed re-read (the coordinator down) does not end the retries: the next
        attempt runs on the routes held, and the listener re-reads them when it can.
        Returns the error of the last re-read when it failed, else None (refresh_error:
        what the previous call returned)."""
        if attempt >= retries:
            return refresh_error
        self._count(_routes.retry_counter(code))
        if _routes.rereads_after(code, attempt):
            try:
                self.refresh()
                refresh_error = None
            except psycopg.Error as e:
                refresh_error = e
        time.sleep(_routes.backoff_delay(attempt, self.backoff_base, self.backoff_max))
        return refresh_error

    def _count(self, key: str) -> None:
        with self._stats_lock:
            self.stats[key] += 1

    # --- closing --------------------------------------------------------------------------

    def close(self) -> None:
        """Stops the listener and the version poll and closes every connection; safe to call
        twice. (A thread still in a connect or a statement to the coordinator ends within its
        connect_timeout or statement_timeout; both are daemon threads.)"""
        self._stop.set()
        for thread in (self._listener_thread, self._poll_thread):
            if thread is not None:
                thread.join(LISTEN_POLL_SECONDS * 4)
        with self._pools_lock:
            self._closed = True
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()
        with self._reload_lock:
            self._drop_routes_conn()
        self._watchdog.stop()  # (its thread ends once the guards still armed are done)

    def __enter__(self) -> "Router":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _probe_claims_on_begin(conn: Conn, wd: Watchdog) -> bool:
    """Whether the connection's shard takes the claim on BEGIN: its routing protocol, read in
    autocommit (bounded by the watchdog). A lost connection is raised (retried as a claim
    that found it lost); any other error answers no, as the claim as a statement is taken
    by every shard."""
    try:
        with wd.guard(conn, "the probe of the routing protocol", strict=True):
            row = conn.execute(_routes.ROUTING_PROTOCOL_SQL, prepare=False).fetchone()
    except psycopg.Error as e:
        if connection_lost(e):
            raise
        return False
    return _routes.claims_on_begin(row[0] if row is not None else None)


def _commit(conn: Conn, wd: Watchdog) -> None:
    """COMMIT (bounded by the watchdog), unless the body swallowed an error: COMMIT would
    then roll back and report success, so this raises instead (the caller rolls back)."""
    if conn.pgconn.transaction_status == pq.TransactionStatus.INERROR:
        raise psycopg.errors.InFailedSqlTransaction(
            "id_gen_client: the transaction failed inside the body; it was rolled back")
    if _routes.ended_by_body(conn):  # a COMMIT now would succeed with a warning, committing nothing
        raise psycopg.errors.NoActiveSqlTransaction(
            "id_gen_client: the transaction was ended inside the body (a COMMIT or ROLLBACK of its own); "
            "the router committed nothing")
    with wd.guard(conn, "COMMIT"):
        _simple(conn, "COMMIT")


def _simple(conn: Conn, sql: str) -> None:
    """Runs statements without parameters as one simple-protocol message straight through
    libpq: the claim and the COMMIT are on every transaction's path, and psycopg's cursor
    machinery would cost about as much as the claim itself. Raises psycopg's error for the
    SQLSTATE, as conn.execute would; a connection lost on the way (no SQLSTATE, libpq's
    connection gone bad) as psycopg.OperationalError, as conn.execute would too. PQexec
    cannot be interrupted from Python: the callers bound it with a watchdog guard, which
    shuts the socket down when the shard is silent too long."""
    res = conn.pgconn.exec_(sql.encode())
    if res.status not in (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK):
        error = psycopg.errors.error_from_result(res, encoding=conn.info.encoding)
        if error.sqlstate is None and conn.pgconn.status != pq.ConnStatus.OK:
            raise psycopg.OperationalError(str(error)) from error
        raise error


def _execute_declared(conn: Conn, version: int, query: Any,
                      params: Optional[Sequence[Any]]) -> Optional[List[Tuple[Any, ...]]]:
    """Runs one statement in a transaction of its own (autocommit) that declares the route
    version in its leading comment (`_routes.declared_query`); returns its rows, or None.
    One statement, one round trip, one implicit transaction, which a transaction-mode
    pooler keeps on one server connection."""
    cur = conn.execute(_routes.declared_query(version, query), params)
    return cur.fetchall() if cur.description is not None else None


def _rollback_quietly(conn: Conn, wd: Watchdog) -> None:
    """Ends a failed or abandoned transaction (none open: nothing to send), bounded by the
    watchdog; a broken connection (or one that did not answer in time, then closed) is left
    to the pool, which discards it."""
    if conn.closed or conn.broken or conn.pgconn.transaction_status == pq.TransactionStatus.IDLE:
        return
    try:
        with wd.guard(conn, "ROLLBACK"):
            _simple(conn, "ROLLBACK")
    except psycopg.Error:
        pass
