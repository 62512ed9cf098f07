"""Router: zero-hop routing of transactions to the shard that owns a gene.

Implements the client side of docs/routing-protocol.md. Invariants it keeps:

* The routes and their version are one immutable snapshot (`_RouteTable`), replaced whole
  under a lock; a lookup reads the snapshot once, so a shard always goes with the version
  it was routed by.
* The listener connection LISTENs on id_gen_routes before any route read, so no committed
  route change after a read goes unnoticed; after it reconnects it re-reads the routes.
* Every transaction on a shard starts with `BEGIN; SELECT id_gen.route_claim(g, v)` in one
  simple-protocol message; IG001 re-reads the routes and retries, IG002 waits and retries
  (re-reading every third time). A re-read that fails (the coordinator down) does not end
  the retries; only retry_limit does. A body's error is never retried by `transaction`
  (the claim's locks kept it valid); `run` retries the whole call.
* `execute` sends the version with its statement, in one transaction and one round trip:
  `set_config('id_gen.route_version', v, true)` and the statement in one pipeline (one
  implicit transaction up to its Sync), so a transaction-mode pooler (PgBouncer) runs both
  on the same server connection. Nothing is declared per connection. Retried on
  IG001/IG002: a statement that failed had no effect.
* Every connection taken from a pool goes back to it, idle (rolled back) or broken.
"""
import bisect
import contextlib
import inspect
import random
import select
import threading
import time
import uuid

import psycopg
from psycopg import pq
from psycopg_pool import ConnectionPool

from .errors import (ROUTE_CHANGED, NoRouteError, RouteRetryExhausted, route_error_code)
from .genes import gene as gene_of_owner
from .genes import as_gene, gene_of_id

ROUTES_CHANNEL = "id_gen_routes"
ROUTES_SQL = "SELECT lower_gene, upper_gene, shard, version FROM id_gen.route_map ORDER BY lower_gene"
# One snapshot: the version, only when there are still no routes (else read them again).
EMPTY_ROUTES_VERSION_SQL = ("SELECT id_gen.route_version() "
                            "WHERE NOT EXISTS (SELECT 1 FROM id_gen.route_map)")
LISTEN_POLL_SECONDS = 0.5
NOTIFIES_TAKES_TIMEOUT = "timeout" in inspect.signature(psycopg.Connection.notifies).parameters
PIPELINE_SUPPORTED = psycopg.Pipeline.is_supported()  # libpq >= 14
# Declares the route version for the rest of the transaction (SET LOCAL semantics).
DECLARE_VERSION_SQL = "SELECT pg_catalog.set_config('id_gen.route_version', '{}', true)"
OWNER_CASTS = ((bool, None), (int, "bigint"), (str, "text"), (uuid.UUID, "uuid"))


class _RouteTable:
    """An immutable snapshot: sorted ranges (lower, upper, shard) and their version."""

    __slots__ = ("uppers", "ranges", "version")

    def __init__(self, ranges, version):
        self.ranges = tuple(ranges)
        self.uppers = [upper for _, upper, _ in self.ranges]
        self.version = version

    def shard_for_gene(self, g):
        i = bisect.bisect_left(self.uppers, g)  # the ceiling entry on upper_gene
        if i == len(self.ranges) or self.ranges[i][0] > g:
            raise NoRouteError(f"no route for gene {g} (route version {self.version})")
        return self.ranges[i][2]


class Router:
    """Routes transactions by owner, id or gene to the owning shard; thread-safe."""

    def __init__(self, routes_dsn, shards, *, min_size=1, max_size=8, retry_limit=20,
                 backoff_base=0.005, backoff_max=0.2, listen=True, pool_kwargs=None):
        self._routes_dsn = routes_dsn
        self._shard_dsns = dict(shards)
        self._pool_args = dict(pool_kwargs or {}, min_size=min_size, max_size=max_size)
        self.retry_limit = retry_limit
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.stats = {"transactions": 0, "retries_moved": 0, "retries_fenced": 0, "refreshes": 0}
        self._stats_lock = threading.Lock()
        self._pools = {}
        self._pools_lock = threading.Lock()
        self._table = _RouteTable((), 0)
        self._reload_lock = threading.Lock()  # guards _routes_conn and reloads
        self._reloads_begun = 0  # reloads numbered in the order they began
        self._last_good_reload = 0  # the number of the last reload that succeeded
        self._routes_conn = None
        self._stop = threading.Event()
        self._listener_thread = None
        self._closed = False
        listener = None
        try:
            if listen:
                listener = self._connect_listener()  # LISTEN before the first read
            self.refresh()
        except BaseException:
            if listener is not None:
                listener.close()
            self.close()
            raise
        if listen:
            self._listener_thread = threading.Thread(
                target=self._listen_loop, args=(listener,), name="id_gen_client-routes", daemon=True)
            self._listener_thread.start()

    # --- routes ---------------------------------------------------------------------------

    @property
    def version(self):
        """The route version the current routes belong to."""
        return self._table.version

    @property
    def routes(self):
        """The current routes: a list of (lower_gene, upper_gene, shard), inclusive."""
        return list(self._table.ranges)

    def refresh(self):
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

    def _read_routes(self):
        if self._routes_conn is None or self._routes_conn.closed:
            self._routes_conn = psycopg.connect(self._routes_dsn, autocommit=True, **COORDINATOR_CONNECT)
        while True:
            rows = self._routes_conn.execute(ROUTES_SQL).fetchall()
            if rows:
                return _RouteTable(((lo, up, shard) for lo, up, shard, _ in rows), rows[0][3])
            empty = self._routes_conn.execute(EMPTY_ROUTES_VERSION_SQL).fetchone()
            if empty is not None:
                return _RouteTable((), empty[0])

    def _drop_routes_conn(self):
        if self._routes_conn is not None:
            self._routes_conn.close()
            self._routes_conn = None

    # --- listening to route changes -------------------------------------------------------

    def _connect_listener(self):
        conn = psycopg.connect(self._routes_dsn, autocommit=True, **COORDINATOR_CONNECT)
        try:
            conn.execute(f"LISTEN {ROUTES_CHANNEL}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _listen_loop(self, conn):
        failures = 0
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

    def _wait_for_notifications(self, conn):
        """Payloads received within LISTEN_POLL_SECONDS (psycopg >= 3.2: notifies(timeout);
        older: select on the socket, then a query that delivers them to a handler)."""
        if NOTIFIES_TAKES_TIMEOUT:
            return [n.payload for n in conn.notifies(timeout=LISTEN_POLL_SECONDS)]
        received = []

        def collect(notify):
            received.append(notify.payload)

        conn.add_notify_handler(collect)
        try:
            readable, _, _ = select.select([conn.fileno()], [], [], LISTEN_POLL_SECONDS)
            if readable:
                conn.execute("SELECT 1")
        finally:
            conn.remove_notify_handler(collect)
        return received

    # --- lookups --------------------------------------------------------------------------

    def gene(self, owner):
        """The gene of an owner (see id_gen_client.gene)."""
        return gene_of_owner(owner)

    def shard_for_gene(self, g):
        """The shard that owns gene g, by the current routes."""
        return self._route(as_gene(g), self._table)

    def shard_for_owner(self, owner):
        return self.shard_for_gene(gene_of_owner(owner))

    def shard_for_id(self, id):
        return self.shard_for_gene(gene_of_id(id))

    def _route(self, g, table):
        shard = table.shard_for_gene(g)
        if shard not in self._shard_dsns:
            raise NoRouteError(f"gene {g} routes to shard {shard!r}, which has no DSN in this Router")
        return shard

    def _pool(self, shard):
        with self._pools_lock:
            if self._closed:
                raise RuntimeError("the Router is closed")
            pool = self._pools.get(shard)
            if pool is None:
                args = dict(self._pool_args)
                args["kwargs"] = dict(args.get("kwargs") or {}, autocommit=True)
                args.setdefault("name", f"id_gen_client-{shard}")
                args.setdefault("open", True)
                pool = self._pools[shard] = ConnectionPool(self._shard_dsns[shard], **args)
            return pool

    # --- transactions ---------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self, owner=None, id=None, gene=None):
        """Yields a connection in a transaction on the shard that owns the gene of exactly
        one of owner, id or gene, with the route version claimed; commits when the body
        ends, rolls back (and re-raises) when it raises."""
        pool, conn = self._claim(self._target_gene(owner, id, gene))
        try:
            try:
                yield conn
            except BaseException:
                _rollback_quietly(conn)
                raise
            try:
                if conn.pgconn.transaction_status == pq.TransactionStatus.INERROR:
                    # The body swallowed an error: COMMIT would roll back and report success.
                    raise psycopg.errors.InFailedSqlTransaction(
                        "id_gen_client: the transaction failed inside the body; it was rolled back")
                _simple(conn, "COMMIT")
            except BaseException:
                _rollback_quietly(conn)
                raise
        finally:
            pool.putconn(conn)

    def run(self, fn, owner=None, id=None, gene=None):
        """fn(conn) inside transaction(...); retries the whole call on IG001/IG002, also
        when the body raises them. Returns fn's result."""
        g = self._target_gene(owner, id, gene)
        last_error = refresh_error = None
        for attempt in range(self.retry_limit):
            try:
                with self.transaction(gene=g) as conn:
                    return fn(conn)
            except psycopg.Error as e:
                code = route_error_code(e)
                if code is None:
                    raise
                last_error = e
                refresh_error = self._after_route_error(code, attempt, refresh_error)
        raise self._exhausted(g, "the route kept changing for", refresh_error) from last_error

    def execute(self, query, params=None, *, owner=None, id=None, gene=None):
        """One statement on the owning shard, in a transaction of its own that declares the
        route version in the same round trip (see _execute_declared): one round trip, as on
        a direct connection, also behind a transaction-mode pooler. `query` is one
        statement (it goes by the extended protocol). Retried on IG001/IG002, which a
        statement that failed leaves without effect. Returns its rows (a list of tuples),
        or None for a statement that returns none."""
        g = self._target_gene(owner, id, gene)
        last_error = refresh_error = None
        for attempt in range(self.retry_limit):
            checkout = self._checkout(g, attempt)
            if checkout is None:
                continue  # the routes changed: look again
            table, pool, conn = checkout
            try:
                rows = _execute_declared(conn, table.version, query, params)
                self._count("transactions")
                return rows
            except psycopg.Error as e:
                code = route_error_code(e)
                if code is None:
                    raise
                last_error = e
            finally:
                pool.putconn(conn)
            refresh_error = self._after_route_error(code, attempt, refresh_error)
        raise self._exhausted(g, "the route kept changing for", refresh_error) from last_error

    def next_id(self, sequence, owner):
        """An owner-affine id from the owning shard: id_gen.gene_order_id(sequence, owner)."""
        cast = next((c for t, c in OWNER_CASTS if isinstance(owner, t)), None)
        if cast is None:
            raise TypeError(f"gene_order_id takes an int, str or uuid.UUID owner, not {type(owner).__name__}")
        query = f"SELECT id_gen.gene_order_id(%s::text, %s::{cast})"
        return self.run(lambda conn: conn.execute(query, (sequence, owner)).fetchone()[0], owner=owner)

    def _target_gene(self, owner, id, gene):
        given = [x is not None for x in (owner, id, gene)]
        if sum(given) != 1:
            raise TypeError("give exactly one of owner=, id= or gene=")
        if owner is not None:
            return gene_of_owner(owner)
        if id is not None:
            return gene_of_id(id)
        return as_gene(gene)

    def _checkout(self, g, attempt):
        """(routes, pool, connection) for gene g by the current routes; None when g had no
        route on the first attempt and a re-read found other routes (look again)."""
        table = self._table
        try:
            shard = self._route(g, table)
        except NoRouteError:
            if attempt > 0 or self.refresh() == table.version:
                raise
            return None
        pool = self._pool(shard)
        return table, pool, pool.getconn()

    def _claim(self, g):
        """A connection of the owning shard's pool, in a transaction that claimed gene g."""
        last_error = refresh_error = None
        for attempt in range(self.retry_limit):
            checkout = self._checkout(g, attempt)
            if checkout is None:
                continue  # the routes changed: look again
            table, pool, conn = checkout
            try:
                # Both statements in one simple-protocol message: one round trip, as a BEGIN.
                _simple(conn, f"BEGIN; SELECT id_gen.route_claim({int(g)}, {int(table.version)})")
            except psycopg.Error as e:
                _rollback_quietly(conn)
                pool.putconn(conn)
                code = route_error_code(e)
                if code is None:
                    raise
                last_error = e
                refresh_error = self._after_route_error(code, attempt, refresh_error)
                continue
            except BaseException:
                _rollback_quietly(conn)
                pool.putconn(conn)
                raise
            self._count("transactions")
            return pool, conn
        raise self._exhausted(g, "no shard accepted the claim in", refresh_error) from last_error

    def _after_route_error(self, code, attempt, refresh_error):
        """After attempt number `attempt` met IG001/IG002: re-reads the routes (after IG001,
        and after every third IG002), then waits the backoff; nothing after the last
        attempt. A failed re-read (the coordinator down) does not end the retries: the next
        attempt runs on the routes held, and the listener re-reads them when it can.
        Returns the error of the last re-read when it failed, else None (refresh_error:
        what the previous call returned)."""
        if attempt + 1 >= self.retry_limit:
            return refresh_error
        if code == ROUTE_CHANGED:
            self._count("retries_moved")
            reread = True
        else:
            self._count("retries_fenced")
            reread = attempt % 3 == 2
        if reread:
            try:
                self.refresh()
                refresh_error = None
            except psycopg.Error as e:
                refresh_error = e
        delay = min(self.backoff_base * 2 ** attempt, self.backoff_max)
        time.sleep(delay * random.uniform(0.5, 1.0))
        return refresh_error

    def _exhausted(self, g, what, refresh_error):
        message = f"gene {g}: {what} {self.retry_limit} attempts"
        if refresh_error is not None:
            message += f"; the last re-read of the routes failed: {refresh_error}"
        return RouteRetryExhausted(message)

    def _count(self, key):
        with self._stats_lock:
            self.stats[key] += 1

    # --- closing --------------------------------------------------------------------------

    def close(self):
        """Stops the listener and closes every connection; safe to call twice."""
        self._stop.set()
        if self._listener_thread is not None:
            self._listener_thread.join(LISTEN_POLL_SECONDS * 4)
        with self._pools_lock:
            self._closed = True
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()
        with self._reload_lock:
            self._drop_routes_conn()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


# Route reads must not hang the threads that wait for them (a coordinator that stopped
# answering): bounded connect, bounded statements, TCP keepalives.
COORDINATOR_CONNECT = {"connect_timeout": 10, "options": "-c statement_timeout=10000",
                       "keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5,
                       "keepalives_count": 3}


def _simple(conn, sql):
    """Runs statements without parameters as one simple-protocol message straight through
    libpq: the claim and the COMMIT are on every transaction's path, and psycopg's cursor
    machinery would cost about as much as the claim itself. Raises psycopg's error for the
    SQLSTATE, as conn.execute would."""
    res = conn.pgconn.exec_(sql.encode())
    if res.status not in (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK):
        raise psycopg.errors.error_from_result(res, encoding=conn.info.encoding)


def _execute_declared(conn, version, query, params):
    """Runs one statement in a transaction of its own that declares the route version
    before it (set_config(..., true): for this transaction only); returns its rows, or None.
    A pipeline of both statements and one Sync: one round trip, and one implicit
    transaction, which a transaction-mode pooler keeps on one server connection. Without
    pipeline mode (libpq < 14), three round trips: `BEGIN; set_config` as one
    simple-protocol message (as the claim), the statement, COMMIT. The declaration is never
    prepared (prepare=False), so it adds no prepared statement for a pooler to lose."""
    declare = DECLARE_VERSION_SQL.format(int(version))
    if PIPELINE_SUPPORTED:
        with conn.pipeline():
            conn.execute(declare, prepare=False)
            cur = conn.execute(query, params)
        return cur.fetchall() if cur.description is not None else None
    _simple(conn, f"BEGIN; {declare}")
    try:
        cur = conn.execute(query, params)
        rows = cur.fetchall() if cur.description is not None else None
        _simple(conn, "COMMIT")
    except BaseException:
        _rollback_quietly(conn)
        raise
    return rows


def _rollback_quietly(conn):
    """Ends a failed or abandoned transaction; a broken connection is left to the pool."""
    if conn.closed or conn.broken:
        return
    try:
        _simple(conn, "ROLLBACK")
    except psycopg.Error:
        pass
