// FakeCluster: a fake of the driver behind the Router (the Connector seam) for tests without a
// server, as clients/node/test/fake_pg.js and clients/python/tests/test_router_fake.py fake
// theirs: a coordinator (routes, a version, NOTIFY to its listeners; it can be down) and shards
// (the routing protocol probe, answered '2', or NULL by a shard older than 0.7.16; the claim
// in either form, BEGIN; SELECT id_gen.route_claim(G, V) or /* id_gen.route_claim=G,V */
// BEGIN, with its IG001/IG002, a refused claim on BEGIN opening no transaction, an old shard
// ignoring the comment; the declared route version, a read by owner; refused connects, claims
// or probes that find the connection ended, a probe that fails, a COMMIT lost without an
// answer, errors thrown wrapped in an unchecked exception; a LISTEN that fails), with
// java.lang.reflect.Proxy connections, statements and result sets.
//
// Invariants: one lock (this) guards all state; every JDBC method the fake does not know fails
// loudly (UnsupportedOperationException); misuse the Router must never commit (a connection
// pooled inside a transaction block or after it closed, given back twice, closed by the
// router instead of given back, COMMIT sent in a failed block, the probe sent inside a
// transaction block, a claim on BEGIN sent to an old shard) is recorded in problems().
package org.idgen.client;

import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.function.Supplier;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

final class FakeCluster implements Connector {
    /** A read by owner: no id predicate, so on a shard that lost the owner it finds nothing. */
    static final String READ = "SELECT amount FROM orders WHERE owner_id = ?";
    /** The routing protocol probe, as docs/routing-protocol.md §3 spells it. */
    static final String PROBE = "SELECT pg_catalog.current_setting('id_gen.routing_protocol', true)";
    static final long NEXT_ID = 9007199254740993L; // (above 2^53)

    private static final String CLAIM_STATEMENT_PREFIX = "BEGIN; SELECT id_gen.route_claim(";
    private static final Pattern CLAIM_STATEMENT = Pattern.compile("SELECT id_gen\\.route_claim\\((\\d+), (\\d+)\\)");
    /** The claim on BEGIN, exactly as a client writes it (the shard's parser is laxer). */
    private static final Pattern CLAIM_ON_BEGIN = Pattern.compile("/\\* id_gen\\.route_claim=(\\d+),(\\d+) \\*/ BEGIN");
    /** A version declared by a statement's leading comment, for that message alone. */
    private static final Pattern DECLARED_BY_COMMENT = Pattern.compile("/\\* id_gen\\.route_version=(\\d+) \\*/ (.*)", Pattern.DOTALL);

    // --- the coordinator ---
    private List<Object[]> uppers; // [upper, shard], ascending
    private long version = 1;
    boolean coordinatorDown;
    boolean listenFails; // LISTEN fails (the coordinator reached through a pooler that refuses it)
    int listenAttempts;
    int routeReads;
    int versionPolls;
    private final List<CoordinatorSession> coordinatorSessions = new ArrayList<>();

    // --- the shards ---
    final Set<String> oldShards = new HashSet<>(); // before 0.7.16: the probe answers NULL, the comment on BEGIN is ignored
    int fences; // the next N claims or statements of any gene fail with IG002
    int connectFails; // the next N connects to shard "a" are refused
    // what a refused connect to shard "a" throws (a driver's or a pool's error)
    Supplier<SQLException> connectFailure = () -> new SQLException("fake: connection to shard a refused", "08001");
    int claimLost; // the next N claims find the connection ended (FATAL 57P01)
    int probeLost; // the next N probes find the connection ended (FATAL 57P01)
    int probeFails; // the next N probes fail with an error of their own (42501)
    boolean commitLost; // the next COMMIT's connection closes with no answer
    boolean uncheckedErrors; // shard statements throw their SQLException wrapped, as a translating JDBC wrapper would
    String lastReadShard;
    List<Object> lastParams;
    String lastSql;
    private final Map<String, Pool> pools = new TreeMap<>();
    private final List<String> problems = new ArrayList<>();
    int connectorCloses;

    FakeCluster(List<Object[]> uppers) {
        this.uppers = new ArrayList<>(uppers);
    }

    /** [[upper, shard], ...] from clients/protocol-scenarios.json. */
    static List<Object[]> routesOf(Object json) {
        List<Object[]> routes = new ArrayList<>();
        for (Object r : Json.array(json)) {
            List<Object> pair = Json.array(r);
            routes.add(new Object[] {((Long) pair.get(0)).intValue(), pair.get(1)});
        }
        return routes;
    }

    // --- what the tests do and see ------------------------------------------------------------

    /** New routes at the next version; notify: whether the listeners hear of it. */
    synchronized void change(List<Object[]> newUppers, boolean notify) {
        uppers = new ArrayList<>(newUppers);
        version++;
        if (notify) {
            for (CoordinatorSession s : coordinatorSessions) {
                if (s.notifications != null && !s.closed) {
                    s.notifications.add(String.valueOf(version));
                }
            }
        }
        notifyAll();
    }

    /** Ends every listening connection, as a coordinator restart would. */
    synchronized void loseListeners() {
        for (CoordinatorSession s : coordinatorSessions) {
            if (s.notifications != null) {
                s.closed = true;
            }
        }
        notifyAll();
    }

    synchronized int listeners() {
        int n = 0;
        for (CoordinatorSession s : coordinatorSessions) {
            n += s.notifications != null && !s.closed ? 1 : 0;
        }
        return n;
    }

    synchronized long versionPolls() {
        return versionPolls;
    }

    synchronized long listenAttempts() {
        return listenAttempts;
    }

    synchronized int openCoordinatorConnections() {
        int n = 0;
        for (CoordinatorSession s : coordinatorSessions) {
            n += s.closed ? 0 : 1;
        }
        return n;
    }

    synchronized String ownerOf(int gene) {
        for (Object[] r : uppers) {
            if (gene <= (Integer) r[0]) {
                return (String) r[1];
            }
        }
        return null;
    }

    /** Claims sent to every shard, in either form (the scenario file's "claims"). */
    synchronized long claims() {
        long n = 0;
        for (String sql : sent()) {
            n += sql.startsWith(CLAIM_STATEMENT_PREFIX) || CLAIM_ON_BEGIN.matcher(sql).matches() ? 1 : 0;
        }
        return n;
    }

    /** Claims on BEGIN sent to every shard. */
    synchronized long claimsOnBegin() {
        long n = 0;
        for (String sql : sent()) {
            n += CLAIM_ON_BEGIN.matcher(sql).matches() ? 1 : 0;
        }
        return n;
    }

    /** Routing protocol probes sent to every shard. */
    synchronized long probes() {
        long n = 0;
        for (String sql : sent()) {
            n += sql.equals(PROBE) ? 1 : 0;
        }
        return n;
    }

    /** Every message sent to the shards, in order per connection. */
    synchronized List<String> sent() {
        List<String> all = new ArrayList<>();
        for (Pool p : pools.values()) {
            for (ShardSession s : p.sessions) {
                all.addAll(s.log);
            }
        }
        return all;
    }

    synchronized int outstanding() {
        int n = 0;
        for (Pool p : pools.values()) {
            n += p.out;
        }
        return n;
    }

    synchronized int discarded() {
        int n = 0;
        for (Pool p : pools.values()) {
            n += p.discarded;
        }
        return n;
    }

    synchronized List<String> problems() {
        return new ArrayList<>(problems);
    }

    /** The shard a connection given to a body belongs to. */
    static String shardOf(Connection conn) throws SQLException {
        return conn.unwrap(ShardSession.class).shard;
    }

    // --- the Connector ----------------------------------------------------------------------

    @Override
    public synchronized Connection openCoordinator() throws SQLException {
        if (coordinatorDown) {
            throw new SQLException("fake: connection to the coordinator refused", "08001");
        }
        CoordinatorSession s = new CoordinatorSession();
        coordinatorSessions.add(s);
        return s.conn;
    }

    @Override
    public synchronized List<String> awaitNotifications(Connection listener, long timeoutMillis) throws SQLException {
        CoordinatorSession s = listener.unwrap(CoordinatorSession.class);
        long deadline = System.nanoTime() + timeoutMillis * 1_000_000;
        while (s.notifications.isEmpty() && !s.closed) {
            long left = (deadline - System.nanoTime()) / 1_000_000;
            if (left <= 0) {
                break;
            }
            try {
                wait(left);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                break;
            }
        }
        if (s.closed) {
            throw new SQLException("fake: An I/O error occurred while sending to the backend", "08006");
        }
        List<String> payloads = new ArrayList<>(s.notifications);
        s.notifications.clear();
        return payloads;
    }

    @Override
    public synchronized Connection borrow(String shard) throws SQLException {
        if (connectorCloses > 0) {
            throw new IllegalStateException("the Router is closed");
        }
        if (shard.equals("a") && connectFails > 0) {
            connectFails--;
            throw connectFailure.get();
        }
        Pool pool = pools.computeIfAbsent(shard, k -> new Pool());
        pool.out++;
        ShardSession s = new ShardSession(shard);
        pool.sessions.add(s);
        return s.conn;
    }

    @Override
    public synchronized void giveBack(String shard, Connection conn, boolean broken) {
        ShardSession s;
        try {
            s = conn.unwrap(ShardSession.class);
        } catch (SQLException e) {
            throw new AssertionError(e);
        }
        Pool pool = pools.get(shard);
        if (s.givenBack || !s.shard.equals(shard)) {
            problems.add("connection given back twice or to another pool: " + s);
        }
        s.givenBack = true;
        pool.out--;
        if (broken) {
            pool.discarded++;
        } else if (s.inBlock || s.closed) {
            problems.add("pooled " + (s.closed ? "after it closed" : "inside a transaction block") + ": " + s.log);
        }
    }

    @Override
    public synchronized boolean isClosed(Connection conn) {
        try {
            return conn.unwrap(ShardSession.class).closed;
        } catch (SQLException e) {
            throw new AssertionError(e);
        }
    }

    @Override
    public synchronized boolean inFailedTransaction(Connection conn) throws SQLException {
        ShardSession s = conn.unwrap(ShardSession.class);
        return s.inBlock && s.failed;
    }

    @Override
    public synchronized boolean inTransaction(Connection conn) throws SQLException {
        return conn.unwrap(ShardSession.class).inBlock;
    }

    @Override
    public synchronized void close() {
        connectorCloses++;
        notifyAll();
    }

    // --- fakes of JDBC objects ---------------------------------------------------------------

    private interface Calls {
        Object call(String method, Object[] args) throws Exception;
    }

    /** A proxy of `type` whose methods go to calls (under the cluster's lock); wrappers unwrap to `self`. */
    private <T> T fake(Class<T> type, Object self, String name, Calls calls) {
        Object proxy = Proxy.newProxyInstance(FakeCluster.class.getClassLoader(), new Class<?>[] {type},
                (p, method, args) -> {
                    Object[] a = args == null ? new Object[0] : args;
                    switch (method.getName()) {
                        case "toString":
                            return name;
                        case "hashCode":
                            return System.identityHashCode(p);
                        case "equals":
                            return p == a[0];
                        case "unwrap":
                            if (((Class<?>) a[0]).isInstance(self)) {
                                return self;
                            }
                            throw new SQLException("fake: " + name + " does not wrap " + a[0]);
                        default:
                            synchronized (FakeCluster.this) {
                                return calls.call(method.getName(), a);
                            }
                    }
                });
        return type.cast(proxy);
    }

    private static UnsupportedOperationException unknown(String what, String method) {
        return new UnsupportedOperationException("the fake " + what + " has no " + method);
    }

    private static SQLException sqlError(String code) {
        return new SQLException("fake " + code, code);
    }

    /** The result of one statement: rows (a result set) or an update count. */
    private static final class Result {
        final List<Object[]> rows; // null: an update count
        final String[] labels;

        Result(String[] labels, List<Object[]> rows) {
            this.labels = labels;
            this.rows = rows;
        }

        static Result update() {
            return new Result(new String[0], null);
        }

        static Result row(String label, Object value) {
            return new Result(new String[] {label}, Collections.singletonList(new Object[] {value}));
        }
    }

    private ResultSet resultSet(Result result) {
        Object[] current = {null};
        int[] next = {0};
        ResultSetMetaData meta = fake(ResultSetMetaData.class, result, "metadata", (m, a) -> {
            switch (m) {
                case "getColumnCount":
                    return result.labels.length;
                case "getColumnLabel":
                case "getColumnName":
                    return result.labels[(Integer) a[0] - 1];
                default:
                    throw unknown("ResultSetMetaData", m);
            }
        });
        return fake(ResultSet.class, result, "result set", (m, a) -> {
            switch (m) {
                case "next":
                    current[0] = next[0] < result.rows.size() ? result.rows.get(next[0]++) : null;
                    return current[0] != null;
                case "getObject":
                    return ((Object[]) current[0])[(Integer) a[0] - 1];
                case "getLong":
                    return ((Number) ((Object[]) current[0])[(Integer) a[0] - 1]).longValue();
                case "getInt":
                    return ((Number) ((Object[]) current[0])[(Integer) a[0] - 1]).intValue();
                case "getString":
                    Object v = ((Object[]) current[0])[(Integer) a[0] - 1];
                    return v == null ? null : v.toString();
                case "getMetaData":
                    return meta;
                case "close":
                    return null;
                default:
                    throw unknown("ResultSet", m);
            }
        });
    }

    /** Statement and PreparedStatement over the results of one message at a time. */
    private Object statement(Class<? extends Statement> type, String name, Messages messages, String preparedSql) {
        Map<Integer, Object> params = new TreeMap<>();
        List<Result> results = new ArrayList<>();
        int[] current = {0};
        return fake(type, params, name, (m, a) -> {
            switch (m) {
                case "execute":
                case "executeQuery":
                case "executeUpdate":
                    results.clear();
                    current[0] = 0;
                    results.addAll(messages.send(a.length > 0 ? (String) a[0] : preparedSql, params));
                    Result first = results.get(0);
                    if (m.equals("executeQuery")) {
                        if (results.size() != 1 || first.rows == null) {
                            throw new SQLException("fake: executeQuery needs one statement that returns rows");
                        }
                        return resultSet(first);
                    }
                    return m.equals("execute") ? (Object) (first.rows != null) : (Object) 0;
                case "getMoreResults":
                    current[0]++;
                    return current[0] < results.size() && results.get(current[0]).rows != null;
                case "getResultSet":
                    return resultSet(results.get(current[0]));
                case "getUpdateCount":
                    return current[0] < results.size() && results.get(current[0]).rows == null ? 0 : -1;
                case "setObject":
                case "setLong":
                case "setString":
                case "setInt":
                    params.put((Integer) a[0], a[1]);
                    return null;
                case "close":
                    return null;
                default:
                    throw unknown(type.getSimpleName(), m);
            }
        });
    }

    private interface Messages {
        List<Result> send(String sql, Map<Integer, Object> params) throws SQLException;
    }

    // --- the coordinator's connections ---

    final class CoordinatorSession {
        final Connection conn;
        boolean closed;
        List<String> notifications; // null until LISTEN

        CoordinatorSession() {
            conn = fake(Connection.class, this, "coordinator connection", (m, a) -> {
                switch (m) {
                    case "createStatement":
                        return statement(Statement.class, "coordinator statement", this::send, null);
                    case "isClosed":
                        return closed;
                    case "close":
                        closed = true;
                        return null;
                    default:
                        throw unknown("coordinator Connection", m);
                }
            });
        }

        private List<Result> send(String sql, Map<Integer, Object> params) throws SQLException {
            if (closed) {
                throw new SQLException("fake: This connection has been closed.", "08003");
            }
            if (coordinatorDown) {
                closed = true;
                throw new SQLException("fake: An I/O error occurred while sending to the backend", "08006");
            }
            if (sql.equals("LISTEN " + Protocol.ROUTES_CHANNEL)) {
                listenAttempts++;
                if (listenFails) {
                    throw new SQLException("fake: LISTEN is not allowed here", "0A000");
                }
                notifications = new ArrayList<>();
                return List.of(Result.update());
            }
            if (sql.equals(Protocol.ROUTES_SQL)) {
                routeReads++;
                List<Object[]> rows = new ArrayList<>();
                int lower = 0;
                for (Object[] r : uppers) {
                    rows.add(new Object[] {lower, r[0], r[1], version});
                    lower = (Integer) r[0] + 1;
                }
                return List.of(new Result(new String[] {"lower_gene", "upper_gene", "shard", "version"}, rows));
            }
            if (sql.equals(Protocol.EMPTY_ROUTES_VERSION_SQL)) {
                List<Object[]> rows = new ArrayList<>();
                if (uppers.isEmpty()) {
                    rows.add(new Object[] {version});
                }
                return List.of(new Result(new String[] {"version"}, rows));
            }
            if (sql.equals(Protocol.ROUTE_VERSION_SQL)) {
                versionPolls++;
                return List.of(Result.row("version", version));
            }
            throw new UnsupportedOperationException("the fake coordinator does not know " + sql);
        }
    }

    // --- the shards' connections ---

    private static final class Pool {
        int out;
        int discarded;
        final List<ShardSession> sessions = new ArrayList<>();
    }

    final class ShardSession {
        final String shard;
        final Connection conn;
        final List<String> log = new ArrayList<>();
        boolean inBlock;
        boolean failed;
        boolean closed;
        boolean givenBack;
        Long localVersion; // declared by a statement's leading comment, for its transaction

        ShardSession(String shard) {
            this.shard = shard;
            this.conn = fake(Connection.class, this, "shard " + shard + " connection", (m, a) -> {
                switch (m) {
                    case "createStatement":
                        return statement(Statement.class, "shard statement", this::sendOrWrap, null);
                    case "prepareStatement":
                        return statement(PreparedStatement.class, "shard prepared statement", this::sendOrWrap,
                                (String) a[0]);
                    case "isClosed":
                        return closed;
                    case "close":
                        problems.add("a shard connection was closed instead of given back");
                        return null;
                    default:
                        throw unknown("shard Connection", m);
                }
            });
        }

        /** send, its SQLException wrapped in a RuntimeException when uncheckedErrors. */
        private List<Result> sendOrWrap(String sql, Map<Integer, Object> params) throws SQLException {
            try {
                return send(sql, params);
            } catch (SQLException e) {
                if (uncheckedErrors) {
                    throw new IllegalStateException("fake: translated", e);
                }
                throw e;
            }
        }

        /** One message: its statements ("; " between them) as one simple-protocol message or one pipeline. */
        private List<Result> send(String sql, Map<Integer, Object> params) throws SQLException {
            if (closed) {
                throw new SQLException("fake: This connection has been closed.", "08003");
            }
            log.add(sql);
            Matcher declared = DECLARED_BY_COMMENT.matcher(sql);
            if (declared.matches()) {
                localVersion = Long.parseLong(declared.group(1));
                sql = declared.group(2);
            }
            List<Result> results = new ArrayList<>();
            try {
                for (String statement : sql.split("; ")) {
                    try {
                        results.add(run(statement, new ArrayList<>(params.values())));
                    } catch (SQLException e) {
                        if (inBlock) {
                            failed = true;
                        }
                        throw e;
                    }
                }
            } finally {
                if (!inBlock) {
                    localVersion = null; // (the implicit transaction ended)
                }
            }
            return results;
        }

        private Result run(String sql, List<Object> params) throws SQLException {
            Matcher claimOnBegin = CLAIM_ON_BEGIN.matcher(sql);
            if (claimOnBegin.matches()) {
                if (oldShards.contains(shard)) { // (it ignores the comment: a BEGIN with no claim)
                    problems.add("a claim on BEGIN sent to a shard older than 0.7.16: " + log);
                } else {
                    claim(Integer.parseInt(claimOnBegin.group(1)), Long.parseLong(claimOnBegin.group(2)));
                }
                sql = "BEGIN"; // (reached only when granted: a refused claim opens no transaction)
            }
            if (sql.equals("BEGIN")) {
                inBlock = true;
                failed = false;
                return Result.update();
            }
            if (sql.equals("COMMIT") || sql.equals("ROLLBACK")) {
                boolean commit = sql.equals("COMMIT");
                if (commit && failed) {
                    problems.add("COMMIT sent in a failed transaction block (the server would roll back)");
                }
                inBlock = false;
                failed = false;
                localVersion = null;
                if (commit && commitLost) {
                    commitLost = false;
                    closed = true;
                    throw new SQLException("fake: An I/O error occurred while sending to the backend", "08006");
                }
                return Result.update();
            }
            if (failed) {
                throw sqlError("25P02");
            }
            if (sql.equals(PROBE)) {
                if (inBlock) {
                    problems.add("the probe was sent inside a transaction block: " + log);
                }
                if (probeLost > 0) {
                    probeLost--;
                    throw ended();
                }
                if (probeFails > 0) {
                    probeFails--;
                    throw sqlError("42501");
                }
                return Result.row("current_setting", oldShards.contains(shard) ? null : "2");
            }
            Matcher claimStatement = CLAIM_STATEMENT.matcher(sql);
            if (claimStatement.matches()) {
                claim(Integer.parseInt(claimStatement.group(1)), Long.parseLong(claimStatement.group(2)));
                return Result.row("route_claim", version);
            }
            if (sql.equals(READ)) {
                // The first statement of the transaction touching a distributed table checks the
                // declared version; a read by owner of genes the shard lost finds nothing.
                if (fences > 0) {
                    fences--;
                    throw sqlError(Protocol.ROUTE_FENCED);
                }
                if (localVersion != null && localVersion < version) {
                    throw sqlError(Protocol.ROUTE_CHANGED);
                }
                boolean owns = shard.equals(ownerOf(Genes.geneOf((Long) params.get(0))));
                if (owns) {
                    lastReadShard = shard;
                }
                return new Result(new String[] {"amount"},
                        owns ? Collections.singletonList(new Object[] {7}) : Collections.emptyList());
            }
            if (sql.contains("gene_order_id")) {
                lastSql = sql;
                lastParams = params;
                return Result.row("gene_order_id", NEXT_ID);
            }
            if (sql.equals("SELECT fail")) {
                throw sqlError("22012");
            }
            if (sql.equals("SELECT 1")) {
                return Result.row("?column?", 1);
            }
            throw new UnsupportedOperationException("the fake shard does not know " + sql);
        }

        /** route_claim's checks, for either form: IG002 while fenced, the connection ended, IG001. */
        private void claim(int gene, long claimedVersion) throws SQLException {
            if (fences > 0) {
                fences--;
                throw sqlError(Protocol.ROUTE_FENCED);
            }
            if (claimLost > 0) {
                claimLost--;
                throw ended();
            }
            if (!shard.equals(ownerOf(gene)) || claimedVersion < version) {
                throw sqlError(Protocol.ROUTE_CHANGED);
            }
        }

        /** The server ended the session (an administrator, a restart). */
        private SQLException ended() {
            closed = true;
            inBlock = false;
            return new SQLException("fake: FATAL: terminating connection due to administrator command", "57P01");
        }

        @Override
        public String toString() {
            return "shard " + shard + " session " + log;
        }
    }

    /** The counters a scenario compares, by the scenario file's names. */
    static Map<String, Object> counters(Router router, FakeCluster cluster) {
        Stats s = router.stats();
        Map<String, Object> got = new LinkedHashMap<>();
        got.put("claims", cluster.claims());
        got.put("retries_moved", s.retriesMoved());
        got.put("retries_fenced", s.retriesFenced());
        got.put("retries_lost", s.retriesLost());
        got.put("refreshes", s.refreshes());
        got.put("version", router.version());
        return got;
    }
}
