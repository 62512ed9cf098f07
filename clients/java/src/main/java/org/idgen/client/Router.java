// Router: zero-hop routing of transactions to the shard that owns a gene, on pgjdbc and
// HikariCP, with the vocabulary of docs/routing-protocol.md §5 (mirrors clients/node's router):
// - transaction(key, body): body(conn) in a transaction on the owning shard that starts with
//   the claim (/* id_gen.route_claim=G,V */ BEGIN on a shard of routing protocol 2, id_gen
//   0.7.16 or later; BEGIN; SELECT id_gen.route_claim(G, V) on an older one, which would
//   ignore the comment); on IG001/IG002 (from the claim, the body or COMMIT), or a connection
//   refused or lost before COMMIT was sent, it rolls back, re-reads the routes (IG001; IG002
//   every third time), waits, and runs the body again, at most retryLimit times after the
//   first attempt. Returns the body's value.
// - run(key, body): the same, but the body runs once: only a failed connect or claim is
//   retried; errors from the body or COMMIT reach the caller.
// - execute(key, sql, params): one statement in a transaction of its own that declares the
//   route version in a leading comment (/* id_gen.route_version=N */): one statement, one
//   round trip; retried like transaction.
// - nextId, geneOf, shardForId/Owner/Gene, refresh(), version(), routes(), stats().
//
// Invariants:
// - The routes and their version are one immutable snapshot (RouteTable), replaced whole; a
//   call routes by one snapshot and claims with its version.
// - The listening connection LISTENs before the first route read and re-reads after it
//   reconnects (100 ms .. 5 s apart); the version is also polled every refreshInterval, also
//   while the listener is away or LISTEN keeps failing, so a notification lost (or a pooler
//   that cannot LISTEN) costs at most that long. build() needs the first route read only: a
//   LISTEN that fails then leaves the listener to the routes' thread, which retries it on the
//   same backoff until close().
// - Nothing is declared per session on a shard: the claim and the statement's comment live in
//   the transaction, so shards may sit behind a transaction-mode pooler (PgBouncer).
// - A shard gets the claim on BEGIN only after its id_gen.routing_protocol said it reads it:
//   probed once per shard (an autocommit SELECT of its own, on the connection about to make
//   the first claim there), and probed again after a connection to the shard was found lost
//   or refused (a restart may bring another id_gen). A probe that lost its connection is
//   retried as a claim that did; one that failed otherwise means the claim statement.
// - A body that failed is never reported committed (a failed transaction block is rolled
//   back, never sent COMMIT), a body whose COMMIT succeeded is never run again, and a
//   connection lost after COMMIT was sent is CommitOutcomeUnknownException, never retried.
// - Every connection borrowed goes back to its pool exactly once: idle (committed or rolled
//   back), or discarded when it broke or could not be rolled back.
// - Every wait is bounded: connects and statements (JdbcConnector's timeouts), the backoff,
//   the routes' thread (LISTEN waits of at most LISTEN_WAIT_MILLIS), close() (joins it for at
//   most CLOSE_WAIT_MILLIS).
package org.idgen.client;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Properties;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;
import org.idgen.client.Protocol.RetryCause;

/** Routes transactions by owner, id or gene to the shard that owns it; thread-safe. */
public final class Router implements AutoCloseable {
    static final long LISTEN_WAIT_MILLIS = 500;
    static final long LISTEN_RETRY_FIRST_MILLIS = 100;
    static final long LISTEN_RETRY_MAX_MILLIS = 5000;
    static final long CLOSE_WAIT_MILLIS = 2000;
    private static final int ROUTE_READ_TRIES = 3;
    private static final AtomicInteger INSTANCES = new AtomicInteger();

    private final Connector connector;
    private final Set<String> shards;
    private final int retryLimit;
    private final long backoffBaseNanos;
    private final long backoffMaxNanos;
    private final boolean listen;
    private final long refreshIntervalNanos;

    private volatile RouteTable table = RouteTable.NONE;
    private final Map<String, ClaimForm> claimForms = new ConcurrentHashMap<>(); // by shard, once probed
    private final LongAdder transactions = new LongAdder();
    private final LongAdder retriesMoved = new LongAdder();
    private final LongAdder retriesFenced = new LongAdder();
    private final LongAdder retriesLost = new LongAdder();
    private final LongAdder refreshes = new LongAdder();

    // Route reads and version polls, one at a time on one coordinator connection.
    private final Object reloadLock = new Object();
    private final AtomicLong reloadsBegun = new AtomicLong(); // numbered in the order they began
    private long lastGoodReload; // (reloadLock) the number of the last read that succeeded
    private long lastFailedReload; // (reloadLock) the number of the last read that failed ...
    private SQLException lastReloadError; // (reloadLock) ... and its error
    private Connection routesConn; // (reloadLock)

    private final AtomicBoolean closed = new AtomicBoolean();
    private final CountDownLatch stopping = new CountDownLatch(1);
    private volatile Thread watcher; // LISTEN and the version poll; null when neither

    private Router(Builder b, Connector connector) throws SQLException {
        this.connector = connector;
        this.shards = Set.copyOf(b.shardUrls.keySet());
        this.retryLimit = b.retryLimit;
        this.backoffBaseNanos = b.backoffBase.toNanos();
        this.backoffMaxNanos = b.backoffMax.toNanos();
        this.listen = b.listen;
        this.refreshIntervalNanos = b.refreshInterval.toNanos();
        Connection listener = null;
        Exception listenFailed = null;
        try {
            if (listen) {
                try {
                    listener = connectListener(); // LISTEN before the first read
                } catch (SQLException | RuntimeException e) {
                    // Not fatal: the poll covers while the routes' thread retries it (backing off).
                    listenFailed = e;
                }
            }
            refresh();
        } catch (SQLException | RuntimeException e) {
            if (listenFailed != null) {
                e.addSuppressed(listenFailed);
            }
            closeQuietly(listener);
            close();
            throw e;
        }
        if (listen || refreshIntervalNanos > 0) {
            Connection first = listener;
            int firstFailures = listenFailed != null ? 1 : 0;
            Thread t = new Thread(() -> watch(first, firstFailures),
                    "id-gen-client-routes-" + INSTANCES.incrementAndGet());
            t.setDaemon(true);
            watcher = t;
            t.start();
        }
    }

    public static Builder builder() {
        return new Builder();
    }

    /**
     * The pgjdbc properties of the Router's shard connections (prepareThreshold=0,
     * assumeMinServerVersion=10, connectTimeout and loginTimeout 10 s, socketTimeout,
     * tcpKeepAlive, ApplicationName), the given ones overriding them: for connections or pools of
     * an application's own that should talk to a shard as the Router does (such as the
     * conformance tool's direct bench). socketTimeout: whole seconds, at least 1 s.
     */
    public static Properties shardConnectionProperties(Properties given, Duration socketTimeout) {
        if (socketTimeout.getSeconds() < 1) {
            throw new IllegalArgumentException("socketTimeout is at least 1 s");
        }
        return JdbcConnector.shardProperties(Objects.requireNonNull(given, "given"),
                (int) Math.min(Integer.MAX_VALUE, socketTimeout.getSeconds()));
    }

    // --- routes ---------------------------------------------------------------------------

    /** The route version held. */
    public long version() {
        return table.version();
    }

    /** The routes held, sorted by lower gene. */
    public List<Route> routes() {
        return table.routes();
    }

    /**
     * Re-reads the routes now; returns their version. A call that waited while another thread
     * read them takes that read's outcome when it began after the call, so no caller gets
     * routes older than its call, and a coordinator down costs each caller at most two reads.
     */
    public long refresh() throws SQLException {
        long requestedAfter = reloadsBegun.get();
        synchronized (reloadLock) {
            ensureOpen();
            if (lastGoodReload > requestedAfter) {
                return table.version();
            }
            if (lastFailedReload > requestedAfter) {
                throw new SQLException("the routes could not be read: " + lastReloadError.getMessage(),
                        lastReloadError.getSQLState(), lastReloadError);
            }
            long number = reloadsBegun.incrementAndGet();
            try {
                RouteTable read;
                try {
                    read = readRoutes();
                } catch (SQLException lost) { // (a lost connection: once more, on a new one)
                    dropRoutesConnection();
                    read = readRoutes();
                }
                table = read;
                lastGoodReload = number;
                refreshes.increment();
                return read.version();
            } catch (SQLException e) {
                lastFailedReload = number;
                lastReloadError = e;
                throw e;
            }
        }
    }

    private RouteTable readRoutes() throws SQLException {
        Connection conn = routesConnection();
        try (Statement st = conn.createStatement()) {
            for (int i = 0; i < ROUTE_READ_TRIES; i++) {
                try (ResultSet rs = st.executeQuery(Protocol.ROUTES_SQL)) {
                    RouteTable read = RouteTable.fromRows(rs);
                    if (read != null) {
                        return read;
                    }
                }
                try (ResultSet rs = st.executeQuery(Protocol.EMPTY_ROUTES_VERSION_SQL)) {
                    if (rs.next()) {
                        return new RouteTable(Collections.emptyList(), rs.getLong(1));
                    }
                }
            }
        }
        throw new SQLException("the routes kept changing while they were read (" + ROUTE_READ_TRIES + " tries)");
    }

    private Connection routesConnection() throws SQLException {
        if (routesConn == null) {
            routesConn = connector.openCoordinator();
        }
        return routesConn;
    }

    private void dropRoutesConnection() {
        closeQuietly(routesConn);
        routesConn = null;
    }

    // --- the routes' thread: LISTEN and the version poll -----------------------------------

    private Connection connectListener() throws SQLException {
        Connection conn = connector.openCoordinator();
        try (Statement st = conn.createStatement()) {
            st.execute("LISTEN " + Protocol.ROUTES_CHANNEL);
            return conn;
        } catch (SQLException | RuntimeException e) {
            closeQuietly(conn);
            throw e;
        }
    }

    /**
     * Until close(): waits for notifications (when listen), polls the version (every
     * refreshInterval). firstListener: the listener the constructor connected, null when its
     * LISTEN failed (failedAtStart 1: retried after the first backoff) or listen is off. A
     * listener that failed (or never connected) is reconnected after a backoff of its own
     * (LISTEN_RETRY_FIRST_MILLIS doubling to LISTEN_RETRY_MAX_MILLIS), which the poll does not
     * wait for: while LISTEN fails (the coordinator down, or behind a pooler), the poll keeps
     * its interval. Every wait is at most the time to the next poll or reconnect, and
     * LISTEN_WAIT_MILLIS.
     */
    private void watch(Connection firstListener, int failedAtStart) {
        Connection listener = firstListener;
        int failures = failedAtStart; // (1 when LISTEN failed in the constructor: the first retry backs off)
        long nextListen = System.nanoTime() + (failures > 0 ? TimeUnit.MILLISECONDS.toNanos(LISTEN_RETRY_FIRST_MILLIS) : 0);
        // (nextListen: when listener is null, the next reconnect)
        long nextPoll = System.nanoTime() + refreshIntervalNanos;
        try {
            while (!closed.get() && !Thread.currentThread().isInterrupted()) {
                long now = System.nanoTime();
                if (refreshIntervalNanos > 0 && now - nextPoll >= 0) {
                    nextPoll = now + refreshIntervalNanos;
                    pollVersion();
                    now = System.nanoTime();
                }
                long untilPollMillis = refreshIntervalNanos > 0
                        ? Math.max(1, TimeUnit.NANOSECONDS.toMillis(nextPoll - now)) : LISTEN_WAIT_MILLIS;
                if (!listen) {
                    awaitStopping(untilPollMillis);
                    continue;
                }
                if (listener == null && now - nextListen < 0) { // (backing off: the poll goes on)
                    awaitStopping(Math.max(1, Math.min(Math.min(untilPollMillis, LISTEN_WAIT_MILLIS),
                            TimeUnit.NANOSECONDS.toMillis(nextListen - now))));
                    continue;
                }
                try {
                    if (listener == null) {
                        listener = connectListener();
                        refresh(); // notifications may have been missed while it was away
                    }
                    for (String payload : connector.awaitNotifications(listener, Math.min(untilPollMillis, LISTEN_WAIT_MILLIS))) {
                        if (newerThanHeld(payload)) {
                            refresh();
                        }
                    }
                    failures = 0;
                } catch (SQLException | RuntimeException e) { // lost, or a failed read: reconnect, re-read
                    closeQuietly(listener);
                    listener = null;
                    failures++;
                    nextListen = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(Math.min(
                            LISTEN_RETRY_FIRST_MILLIS << Math.min(failures - 1, 6), LISTEN_RETRY_MAX_MILLIS));
                }
            }
        } finally {
            closeQuietly(listener);
        }
    }

    private boolean newerThanHeld(String payload) {
        try {
            return Long.parseLong(payload.trim()) > table.version();
        } catch (NumberFormatException | NullPointerException e) {
            return false;
        }
    }

    /** Re-reads the routes when the coordinator's version is newer than the one held. */
    private void pollVersion() {
        try {
            long version;
            synchronized (reloadLock) {
                if (closed.get()) {
                    return;
                }
                try (Statement st = routesConnection().createStatement();
                     ResultSet rs = st.executeQuery(Protocol.ROUTE_VERSION_SQL)) {
                    version = rs.next() ? rs.getLong(1) : 0;
                }
            }
            if (version > table.version()) {
                refresh();
            }
        } catch (SQLException | RuntimeException e) { // (the next poll connects again)
            synchronized (reloadLock) {
                dropRoutesConnection();
            }
        }
    }

    private void awaitStopping(long millis) {
        try {
            stopping.await(millis, TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** The routes' thread (for tests). */
    Thread watcherThread() {
        return watcher;
    }

    // --- lookups by the routes held ---------------------------------------------------------

    public int geneOf(long owner) {
        return Genes.geneOf(owner);
    }

    public int geneOf(String owner) {
        return Genes.geneOf(owner);
    }

    public int geneOf(UUID owner) {
        return Genes.geneOf(owner);
    }

    public String shardForGene(int gene) throws NoRouteException {
        return shardOf(Genes.checkGene(gene), table);
    }

    public String shardForId(long id) throws NoRouteException {
        return shardOf(Genes.geneOfId(id), table);
    }

    public String shardForOwner(long owner) throws NoRouteException {
        return shardOf(Genes.geneOf(owner), table);
    }

    public String shardForOwner(String owner) throws NoRouteException {
        return shardOf(Genes.geneOf(owner), table);
    }

    public String shardForOwner(UUID owner) throws NoRouteException {
        return shardOf(Genes.geneOf(owner), table);
    }

    public String shardFor(Key key) throws NoRouteException {
        return shardOf(key.gene(), table);
    }

    private String shardOf(int gene, RouteTable routes) throws NoRouteException {
        String shard = routes.shardForGene(gene);
        if (shard == null) {
            throw new NoRouteException("no route for gene " + gene + " (route version " + routes.version() + ")");
        }
        if (!shards.contains(shard)) {
            throw new NoRouteException("gene " + gene + " routes to shard \"" + shard
                    + "\", which has no connection in this Router");
        }
        return shard;
    }

    /** Counters as of now. */
    public Stats stats() {
        return new Stats(transactions.sum(), retriesMoved.sum(), retriesFenced.sum(), retriesLost.sum(),
                refreshes.sum());
    }

    // --- transactions -----------------------------------------------------------------------

    /**
     * body(conn) in a claimed transaction on the owning shard, then COMMIT; returns the body's
     * value. Retried (the body runs again) on IG001/IG002 and on a connection refused or lost
     * before COMMIT was sent, at most retryLimit times. Throws the body's own SQLException
     * (rolled back, not retried), NoRouteException, RouteRetryExhaustedException, or
     * CommitOutcomeUnknownException. An unchecked exception from the body that carries an
     * SQLException in its causes (Spring's or jOOQ's DataAccessException, ...) is classified by
     * it, as if the SQLException had been thrown; the caller gets the exception as it was thrown
     * (or as the cause of RouteRetryExhaustedException).
     */
    public <T> T transaction(Key key, Body<T> body) throws SQLException {
        return claimed(key, body, true);
    }

    /**
     * body(conn) once in a claimed transaction: only a refused connection or the claim is
     * retried (no body ran yet); IG001/IG002 or a lost connection from the body or COMMIT reach
     * the caller. For bodies that do something outside the database.
     */
    public <T> T run(Key key, Body<T> body) throws SQLException {
        return claimed(key, body, false);
    }

    private <T> T claimed(Key key, Body<T> body, boolean retryBody) throws SQLException {
        Objects.requireNonNull(body, "body");
        int gene = key.gene();
        return retrying(gene, (routes, shard) -> {
            Connection conn = borrow(shard);
            Phase phase = Phase.CLAIM;
            boolean broken = true;
            try {
                String claim = claimsOnBegin(shard, conn) ? Protocol.claimOnBeginSql(gene, routes.version())
                        : Protocol.claimStatementSql(gene, routes.version());
                try (Statement st = conn.createStatement()) {
                    st.execute(claim);
                }
                phase = Phase.BODY;
                T result = body.apply(conn);
                phase = Phase.COMMIT;
                commit(conn);
                broken = false;
                transactions.increment();
                return result;
            } catch (SQLException | RuntimeException e) {
                // Classified by the SQLException it is or carries (a RuntimeException wrapping
                // the driver's error, as Spring's or jOOQ's DataAccessException); the caller
                // gets e itself, or a RoutingException whose cause is e.
                SQLException sql = Protocol.sqlExceptionIn(e);
                if (sql == null) { // (not a database error: rolled back, raised as it is)
                    broken = !rollbackQuietly(conn);
                    throw e;
                }
                if (sql instanceof RoutingException || (phase == Phase.BODY && timedOut(e))) {
                    // The router's own error from a call inside the body (a nested transaction's
                    // outcome unknown, its retries exhausted), or a body's statement past
                    // socketTimeout (pgjdbc closed the connection; the server may still run it):
                    // never retried. (The claim or COMMIT past it: a lost connection, below.)
                    broken = connector.isClosed(conn) || !rollbackQuietly(conn);
                    throw e;
                }
                boolean lost = isLost(sql, conn);
                if (lost) {
                    forgetClaimForm(shard);
                }
                // A body that ended the transaction itself (its own COMMIT or ROLLBACK) and then
                // failed is never run again: what it committed stays committed.
                boolean ended = phase == Phase.BODY && !lost && !connector.inTransaction(conn);
                // (after a claim on BEGIN that was refused no transaction is open: the
                // ROLLBACK only draws a warning)
                broken = lost || !rollbackQuietly(conn);
                if (ended) {
                    throw e;
                }
                retryOrUnknown(sql, e, phase, retryBody, lost);
                throw e;
            } catch (Error e) {
                broken = !rollbackQuietly(conn);
                throw e;
            } finally {
                connector.giveBack(shard, conn, broken);
            }
        });
    }

    /**
     * One statement on the owning shard, in autocommit, with the route version declared in its
     * leading comment (one statement, one round trip, one implicit transaction, also behind a
     * transaction-mode pooler). `sql` is one statement with JDBC `?` placeholders. Retried on
     * IG001/IG002 (a statement that failed had no effect) and on a refused connection; a
     * connection lost after the statement was sent is CommitOutcomeUnknownException.
     *
     * @return its rows, each an Object[] of its columns in order (getObject); an empty list
     *     for a statement that returns no rows
     */
    public List<Object[]> execute(Key key, String sql, Object... params) throws SQLException {
        Objects.requireNonNull(sql, "sql");
        Object[] values = params == null ? new Object[0] : params.clone();
        return retrying(key.gene(), (routes, shard) -> {
            Connection conn = borrow(shard);
            boolean broken = true;
            try {
                List<Object[]> rows = executeDeclared(conn, routes.version(), sql, values);
                broken = false;
                transactions.increment();
                return rows;
            } catch (SQLException | RuntimeException e) {
                SQLException error = Protocol.sqlExceptionIn(e); // (as in claimed)
                if (error == null) {
                    throw e; // (broken: discarded)
                }
                boolean lost = isLost(error, conn);
                if (lost) {
                    forgetClaimForm(shard);
                }
                // (a statement that failed ended its implicit transaction; a driver that threw
                // unchecked may have left the connection in any state)
                broken = lost || e instanceof RuntimeException;
                retryOrUnknown(error, e, Phase.STATEMENT, true, lost);
                throw e;
            } finally {
                connector.giveBack(shard, conn, broken);
            }
        });
    }

    private static List<Object[]> executeDeclared(Connection conn, long version, String sql, Object[] params)
            throws SQLException {
        try (PreparedStatement ps = conn.prepareStatement(Protocol.declaredSql(version, sql))) {
            for (int i = 0; i < params.length; i++) {
                ps.setObject(i + 1, params[i]);
            }
            // (the last result, should sql hold several statements)
            List<Object[]> rows = Collections.emptyList();
            for (boolean isResultSet = ps.execute();; isResultSet = ps.getMoreResults()) {
                if (isResultSet) {
                    try (ResultSet rs = ps.getResultSet()) {
                        rows = readRows(rs);
                    }
                } else if (ps.getUpdateCount() == -1) {
                    return rows;
                } else {
                    rows = Collections.emptyList();
                }
            }
        }
    }

    private static List<Object[]> readRows(ResultSet rs) throws SQLException {
        int columns = rs.getMetaData().getColumnCount();
        List<Object[]> rows = new ArrayList<>();
        while (rs.next()) {
            Object[] row = new Object[columns];
            for (int c = 0; c < columns; c++) {
                row[c] = rs.getObject(c + 1);
            }
            rows.add(row);
        }
        return rows;
    }

    /** An owner-affine id from the owner's shard: id_gen.gene_order_id(sequence, owner) in a transaction. */
    public long nextId(String sequence, Key owner) throws SQLException {
        Objects.requireNonNull(sequence, "sequence");
        String sql = "SELECT id_gen.gene_order_id(?::text, ?::" + owner.ownerSqlType() + ")";
        return transaction(owner, conn -> {
            try (PreparedStatement ps = conn.prepareStatement(sql)) {
                ps.setString(1, sequence);
                ps.setObject(2, owner.ownerValue());
                try (ResultSet rs = ps.executeQuery()) {
                    if (!rs.next()) {
                        throw new SQLException("id_gen.gene_order_id returned no row");
                    }
                    return rs.getLong(1);
                }
            }
        });
    }

    // --- the one retry loop -----------------------------------------------------------------

    /** Where an attempt was when it failed. */
    private enum Phase { CLAIM, BODY, COMMIT, STATEMENT }

    /** One attempt on a shard by a snapshot of the routes; Retry to try again. */
    private interface Attempt<T> {
        T run(RouteTable routes, String shard) throws SQLException, Retry;
    }

    /**
     * An attempt's failure that is retried: IG001, IG002, or a connection refused or lost before
     * COMMIT; error is the SQLException that says so, thrown what was thrown (error itself, or a
     * RuntimeException carrying it).
     */
    private static final class Retry extends Exception {
        private static final long serialVersionUID = 1L;
        final RetryCause cause;
        final transient SQLException error;
        final transient Exception thrown;

        Retry(RetryCause cause, SQLException error, Exception thrown) {
            super(cause.name(), thrown, false, false);
            this.cause = cause;
            this.error = error;
            this.thrown = thrown;
        }
    }

    /**
     * attempt on gene's shard by the routes held, retried up to retryLimit times (re-read and
     * backoff between); then RouteRetryExhaustedException with the last error as its cause.
     */
    private <T> T retrying(int gene, Attempt<T> attempt) throws SQLException {
        ensureOpen();
        SQLException refreshError = null;
        for (int n = 0; ; n++) {
            RouteTable routes = table;
            String shard;
            try {
                shard = shardOf(gene, routes);
            } catch (NoRouteException noRoute) {
                // The routes may have changed since they were read: on the first attempt, read
                // them again and look once more (no attempt of its own).
                if (n > 0) {
                    throw noRoute;
                }
                routes = rereadForNoRoute(noRoute, routes.version());
                shard = shardOf(gene, routes);
            }
            Retry retry;
            try {
                return attempt.run(routes, shard);
            } catch (Retry r) {
                retry = r;
            }
            if (n >= retryLimit) {
                RouteRetryExhaustedException exhausted = new RouteRetryExhaustedException("gene " + gene + ": "
                        + (retryLimit + 1) + " attempts (retryLimit " + retryLimit + ") failed, the last with "
                        + retry.cause + (refreshError == null ? "" : " (the last re-read of the routes failed too)"),
                        retry.error, retry.thrown);
                if (refreshError != null) {
                    exhausted.addSuppressed(refreshError);
                }
                throw exhausted;
            }
            count(retry.cause);
            if (Protocol.rereadsAfter(retry.cause, n)) {
                try {
                    refresh();
                    refreshError = null;
                } catch (SQLException e) {
                    refreshError = e; // (the next attempt runs on the routes held)
                }
            }
            backoff(n, retry.error);
        }
    }

    private RouteTable rereadForNoRoute(NoRouteException noRoute, long versionHeld) throws SQLException {
        long version;
        try {
            version = refresh();
        } catch (SQLException e) {
            noRoute.addSuppressed(e);
            throw noRoute;
        }
        if (version == versionHeld) {
            throw noRoute;
        }
        return table;
    }

    private Connection borrow(String shard) throws Retry, SQLException {
        try {
            return connector.borrow(shard);
        } catch (SQLException | RuntimeException e) {
            // Refused or reset (the shard restarting, failing over; no host of a multi-host URL
            // the primary yet): nothing was sent, retried. A pool exhausted by the caller's own
            // load, a refused password or an unknown database are not lost connections: raised
            // as they are. (See Protocol.connectFailed.)
            SQLException sql = Protocol.sqlExceptionIn(e);
            if (sql != null && Protocol.connectFailed(e)) {
                forgetClaimForm(shard);
                throw new Retry(RetryCause.LOST, sql, e);
            }
            throw e;
        }
    }

    /**
     * What a shard is known to read: whether it takes the claim on BEGIN, null until probed.
     * Forgetting replaces a shard's ClaimForm, so a probe still under way then answers into
     * the one it began with, never into the next.
     */
    private static final class ClaimForm {
        volatile Boolean onBegin;
    }

    /**
     * Whether shard reads the claim on BEGIN: known, or probed now on conn (in autocommit,
     * before the claim). Threads that meet an unknown shard at once may each probe.
     */
    private boolean claimsOnBegin(String shard, Connection conn) throws SQLException {
        ClaimForm form = claimForms.computeIfAbsent(shard, unknown -> new ClaimForm());
        Boolean onBegin = form.onBegin;
        if (onBegin == null) {
            onBegin = probeClaimsOnBegin(conn);
            form.onBegin = onBegin;
        }
        return onBegin;
    }

    /**
     * The shard's answer to the probe. A lost connection is thrown (the attempt is retried as
     * after a lost claim); any other SQL error answers the claim statement, which every shard
     * takes, rather than fail the transaction.
     */
    private boolean probeClaimsOnBegin(Connection conn) throws SQLException {
        try (Statement st = conn.createStatement();
             ResultSet rs = st.executeQuery(Protocol.ROUTING_PROTOCOL_SQL)) {
            return Protocol.claimsOnBegin(rs.next() ? rs.getString(1) : null);
        } catch (SQLException | RuntimeException e) {
            SQLException sql = Protocol.sqlExceptionIn(e);
            if (sql == null || isLost(sql, conn)) {
                throw e;
            }
            return false;
        }
    }

    /** A connection to shard was found lost or refused: it may have restarted with another id_gen. */
    private void forgetClaimForm(String shard) {
        claimForms.remove(shard);
    }

    /** A statement past pgjdbc's socketTimeout (it closed the connection). */
    private static boolean timedOut(Throwable e) {
        return Protocol.causedBy(e, java.net.SocketTimeoutException.class);
    }

    /**
     * Throws what an error of one attempt becomes, by where it happened (sql: the SQLException
     * it is or carries; thrown: the error as thrown): CommitOutcomeUnknown (a connection lost
     * after COMMIT or the statement was sent), or a Retry (IG001/IG002, or a connection lost
     * before; from the body or COMMIT only when retryBody). Returns when thrown is to reach the
     * caller as it is.
     */
    private static void retryOrUnknown(SQLException sql, Exception thrown, Phase phase, boolean retryBody, boolean lost)
            throws Retry, CommitOutcomeUnknownException {
        if (lost && (phase == Phase.COMMIT || phase == Phase.STATEMENT)) {
            throw new CommitOutcomeUnknownException("the shard connection was lost after "
                    + (phase == Phase.COMMIT ? "COMMIT" : "the statement") + " was sent: the transaction may or may "
                    + "not have committed", sql, thrown);
        }
        RetryCause cause = Protocol.routeErrorCause(sql.getSQLState());
        if (cause == null && lost) {
            cause = RetryCause.LOST;
        }
        if (cause == null || ((phase == Phase.BODY || phase == Phase.COMMIT) && !retryBody)) {
            return;
        }
        throw new Retry(cause, sql, thrown);
    }

    private boolean isLost(SQLException e, Connection conn) {
        return Protocol.connectionLostState(e.getSQLState()) || connector.isClosed(conn);
    }

    private void count(RetryCause cause) {
        switch (cause) {
            case MOVED:
                retriesMoved.increment();
                break;
            case FENCED:
                retriesFenced.increment();
                break;
            default:
                retriesLost.increment();
        }
    }

    private void backoff(int attempt, SQLException lastError) throws RoutingException {
        try {
            TimeUnit.NANOSECONDS.sleep(Protocol.backoffNanos(attempt, backoffBaseNanos, backoffMaxNanos));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new RoutingException("interrupted while waiting to retry: " + lastError.getMessage(),
                    lastError.getSQLState(), lastError);
        }
    }

    /**
     * COMMIT, unless the body swallowed an error: the server would then roll back and answer
     * ROLLBACK, which must not look like a success; raised as 25P02 (the caller rolls back).
     */
    private void commit(Connection conn) throws SQLException {
        if (connector.inFailedTransaction(conn)) {
            throw new SQLException("id-gen-client: the transaction failed inside the body; it was rolled back",
                    "25P02");
        }
        if (!connector.inTransaction(conn)) { // (a COMMIT now would succeed with a warning, committing nothing)
            throw new SQLException("id-gen-client: the transaction was ended inside the body (a COMMIT or "
                    + "ROLLBACK of its own); the router committed nothing", "25P01");
        }
        try (Statement st = conn.createStatement()) {
            st.execute("COMMIT");
        }
    }

    /** Ends a failed transaction; false when the connection could not (then it is discarded). */
    private boolean rollbackQuietly(Connection conn) {
        try (Statement st = conn.createStatement()) {
            st.execute("ROLLBACK");
            return true;
        } catch (SQLException | RuntimeException e) {
            return false;
        }
    }

    private void ensureOpen() {
        if (closed.get()) {
            throw new IllegalStateException("the Router is closed");
        }
    }

    private static void closeQuietly(Connection conn) {
        if (conn != null) {
            try {
                conn.close();
            } catch (SQLException | RuntimeException e) {
                // (closing a connection that broke)
            }
        }
    }

    // --- closing ----------------------------------------------------------------------------

    /** Stops listening and polling and closes every connection; safe to call twice. */
    @Override
    public void close() {
        if (!closed.compareAndSet(false, true)) {
            return;
        }
        stopping.countDown();
        Thread t = watcher;
        if (t != null && t != Thread.currentThread()) {
            try {
                t.join(CLOSE_WAIT_MILLIS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        synchronized (reloadLock) {
            dropRoutesConnection();
        }
        connector.close();
    }

    // --- building ---------------------------------------------------------------------------

    /**
     * Settings of a Router; {@link #build()} reads the routes (and fails when it cannot; a
     * LISTEN that fails does not fail it: the listener is retried in the background).
     */
    public static final class Builder {
        private String routesUrl;
        private Properties routesProperties = new Properties();
        private final Map<String, String> shardUrls = new LinkedHashMap<>();
        private final Map<String, Properties> shardProperties = new LinkedHashMap<>();
        private final Properties properties = new Properties();
        private int retryLimit = 20;
        private Duration refreshInterval = Duration.ofSeconds(1);
        private boolean listen = true;
        private Duration backoffBase = Duration.ofMillis(5);
        private Duration backoffMax = Duration.ofMillis(200);
        private int maxPoolSize = 8;
        private Duration connectionTimeout = Duration.ofSeconds(5);
        private Duration socketTimeout = Duration.ofSeconds(60);
        private Connector connector; // (tests: a fake driver)

        private Builder() {
        }

        /** The coordinator, as a pgjdbc URL (jdbc:postgresql://host:port/db). */
        public Builder routes(String jdbcUrl) {
            return routes(jdbcUrl, new Properties());
        }

        /** The coordinator, with pgjdbc properties of its own (user, password, ...). */
        public Builder routes(String jdbcUrl, Properties own) {
            this.routesUrl = Objects.requireNonNull(jdbcUrl, "jdbcUrl");
            this.routesProperties = copy(own);
            return this;
        }

        /** A shard by the name the routes give it, as a pgjdbc URL. */
        public Builder shard(String name, String jdbcUrl) {
            return shard(name, jdbcUrl, new Properties());
        }

        /** A shard, with pgjdbc properties of its own (user, password, ...). */
        public Builder shard(String name, String jdbcUrl, Properties own) {
            shardUrls.put(Objects.requireNonNull(name, "name"), Objects.requireNonNull(jdbcUrl, "jdbcUrl"));
            shardProperties.put(name, copy(own));
            return this;
        }

        private static Properties copy(Properties given) {
            Properties p = new Properties();
            for (String name : given.stringPropertyNames()) {
                p.setProperty(name, given.getProperty(name));
            }
            return p;
        }

        /** The user of every connection (coordinator and shards). */
        public Builder user(String user) {
            properties.setProperty("user", user);
            return this;
        }

        /** The password of every connection. */
        public Builder password(String password) {
            properties.setProperty("password", password);
            return this;
        }

        /**
         * pgjdbc properties of every connection: they override the Router's defaults, a
         * connection's own properties override them, and its URL's override all.
         */
        public Builder properties(Properties given) {
            for (String name : given.stringPropertyNames()) {
                properties.setProperty(name, given.getProperty(name));
            }
            return this;
        }

        /** Retries after the first attempt (default 20: at most 21 attempts). */
        public Builder retryLimit(int retries) {
            if (retries < 0) {
                throw new IllegalArgumentException("retryLimit counts retries after the first attempt: 0 or more");
            }
            this.retryLimit = retries;
            return this;
        }

        /** The route version poll's interval besides LISTEN (default 1 s; zero: no poll). */
        public Builder refreshInterval(Duration interval) {
            if (interval.isNegative()) {
                throw new IllegalArgumentException("refreshInterval is zero (no poll) or more");
            }
            this.refreshInterval = interval;
            return this;
        }

        /** Whether to LISTEN for route changes (default true). */
        public Builder listen(boolean on) {
            this.listen = on;
            return this;
        }

        /** The wait before retry n is min(base * 2^n, max), jittered to [1/2, 1] of it (default 5 ms, 200 ms). */
        public Builder backoff(Duration base, Duration max) {
            if (base.isNegative() || max.compareTo(base) < 0) {
                throw new IllegalArgumentException("backoff: 0 <= base <= max");
            }
            this.backoffBase = base;
            this.backoffMax = max;
            return this;
        }

        /** Connections of each shard's pool at most (default 8). */
        public Builder maxPoolSize(int size) {
            if (size < 1) {
                throw new IllegalArgumentException("maxPoolSize is 1 or more");
            }
            this.maxPoolSize = size;
            return this;
        }

        /** The wait for a pooled shard connection (HikariCP connectionTimeout; default 5 s, at least 250 ms). */
        public Builder connectionTimeout(Duration timeout) {
            if (timeout.toMillis() < 250) {
                throw new IllegalArgumentException("connectionTimeout is at least 250 ms");
            }
            this.connectionTimeout = timeout;
            return this;
        }

        /** The bound of every shard statement's wait for an answer (pgjdbc socketTimeout; default 60 s, whole seconds). */
        public Builder socketTimeout(Duration timeout) {
            if (timeout.getSeconds() < 1) {
                throw new IllegalArgumentException("socketTimeout is at least 1 s");
            }
            this.socketTimeout = timeout;
            return this;
        }

        Builder connector(Connector fake) {
            this.connector = fake;
            return this;
        }

        /**
         * A Router whose routes were read; throws the driver's error when they cannot be read
         * (the coordinator unreachable). A LISTEN that fails (a pooler in front of the
         * coordinator, say) does not fail it: the version poll covers while the listener is
         * retried in the background (100 ms doubling to 5 s) until close().
         */
        public Router build() throws SQLException {
            if (routesUrl == null) {
                throw new IllegalStateException("routes(jdbcUrl) (the coordinator) is required");
            }
            if (shardUrls.isEmpty()) {
                throw new IllegalStateException("shard(name, jdbcUrl) is required");
            }
            Connector c = connector;
            if (c == null) {
                Properties routes = copy(properties);
                routes.putAll(routesProperties);
                Map<String, Properties> shards = new LinkedHashMap<>();
                for (Map.Entry<String, Properties> e : shardProperties.entrySet()) {
                    Properties own = copy(properties);
                    own.putAll(e.getValue());
                    shards.put(e.getKey(), own);
                }
                c = new JdbcConnector(routesUrl, routes, shardUrls, shards, maxPoolSize, connectionTimeout.toMillis(),
                        (int) Math.min(Integer.MAX_VALUE, socketTimeout.getSeconds()));
            }
            return new Router(this, c);
        }
    }
}
