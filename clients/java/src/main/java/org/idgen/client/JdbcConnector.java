// JdbcConnector: the production Connector — pgjdbc for the coordinator (plain connections:
// the route reads and polls, and the LISTEN connection) and one HikariCP pool per shard.
//
// Invariants:
// - Every wait is bounded: coordinator connects and statements (connectTimeout, loginTimeout,
//   socketTimeout: COORDINATOR_TIMEOUT_SECONDS), a pooled connection (Hikari's
//   connectionTimeout), shard statements (socketTimeout), TCP keepalives on all.
// - Nothing is declared per session on a shard: connections are autocommit, never prepare a
//   named server statement (prepareThreshold=0) and send their settings as startup
//   parameters (assumeMinServerVersion=10: no SET after connecting, on the coordinator
//   too), so a shard may sit behind PgBouncer in transaction mode. The caller's properties,
//   and a JDBC URL's, override these defaults.
// - A pool is made on first use; no pool is made after close().
package org.idgen.client;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import org.postgresql.PGConnection;
import org.postgresql.PGNotification;
import org.postgresql.core.BaseConnection;
import org.postgresql.core.TransactionState;

final class JdbcConnector implements Connector {
    static final int COORDINATOR_TIMEOUT_SECONDS = 10;

    private final String routesUrl;
    private final Properties coordinatorProperties;
    private final Map<String, String> shardUrls;
    private final Map<String, Properties> shardProperties = new HashMap<>();
    private final int maxPoolSize;
    private final long connectionTimeoutMillis;
    private final Map<String, HikariDataSource> pools = new ConcurrentHashMap<>();
    private volatile boolean closed;

    /** routesGiven, shardsGiven: the caller's pgjdbc properties (of the coordinator, of each shard). */
    JdbcConnector(String routesUrl, Properties routesGiven, Map<String, String> shardUrls,
                  Map<String, Properties> shardsGiven, int maxPoolSize, long connectionTimeoutMillis,
                  int shardSocketTimeoutSeconds) {
        this.routesUrl = routesUrl;
        this.shardUrls = Map.copyOf(shardUrls);
        this.coordinatorProperties = coordinatorProperties(routesGiven);
        for (Map.Entry<String, Properties> e : shardsGiven.entrySet()) {
            shardProperties.put(e.getKey(), shardProperties(e.getValue(), shardSocketTimeoutSeconds));
        }
        this.maxPoolSize = maxPoolSize;
        this.connectionTimeoutMillis = connectionTimeoutMillis;
    }

    static Properties coordinatorProperties(Properties given) {
        Properties p = new Properties();
        p.setProperty("assumeMinServerVersion", "10");
        p.setProperty("connectTimeout", String.valueOf(COORDINATOR_TIMEOUT_SECONDS));
        p.setProperty("loginTimeout", String.valueOf(COORDINATOR_TIMEOUT_SECONDS));
        p.setProperty("socketTimeout", String.valueOf(COORDINATOR_TIMEOUT_SECONDS));
        p.setProperty("tcpKeepAlive", "true");
        p.setProperty("ApplicationName", "id-gen-client routes");
        for (String name : given.stringPropertyNames()) {
            p.setProperty(name, given.getProperty(name));
        }
        return p;
    }

    static Properties shardProperties(Properties given, int socketTimeoutSeconds) {
        Properties p = new Properties();
        p.setProperty("prepareThreshold", "0");
        p.setProperty("assumeMinServerVersion", "10");
        p.setProperty("connectTimeout", "10");
        p.setProperty("loginTimeout", "10");
        p.setProperty("socketTimeout", String.valueOf(socketTimeoutSeconds));
        p.setProperty("tcpKeepAlive", "true");
        p.setProperty("ApplicationName", "id-gen-client");
        for (String name : given.stringPropertyNames()) {
            p.setProperty(name, given.getProperty(name));
        }
        return p;
    }

    @Override
    public Connection openCoordinator() throws SQLException {
        Connection conn = DriverManager.getConnection(routesUrl, coordinatorProperties);
        conn.setAutoCommit(true);
        return conn;
    }

    @Override
    public List<String> awaitNotifications(Connection listener, long timeoutMillis) throws SQLException {
        int wait = (int) Math.max(1, Math.min(timeoutMillis, Integer.MAX_VALUE)); // (0 would block for ever)
        PGNotification[] received = listener.unwrap(PGConnection.class).getNotifications(wait);
        List<String> payloads = new ArrayList<>();
        if (received != null) {
            for (PGNotification n : received) {
                payloads.add(n.getParameter());
            }
        }
        return payloads;
    }

    @Override
    public Connection borrow(String shard) throws SQLException {
        return pool(shard).getConnection();
    }

    private HikariDataSource pool(String shard) {
        HikariDataSource pool = pools.computeIfAbsent(shard, this::newPool);
        if (closed) { // (made while close() ran: close it too)
            pool.close();
            throw new IllegalStateException("the Router is closed");
        }
        return pool;
    }

    private HikariDataSource newPool(String shard) {
        if (closed) {
            throw new IllegalStateException("the Router is closed");
        }
        HikariConfig config = new HikariConfig();
        config.setPoolName("id-gen-client-" + shard);
        config.setJdbcUrl(shardUrls.get(shard));
        config.setDataSourceProperties(shardProperties.get(shard));
        config.setAutoCommit(true);
        config.setMaximumPoolSize(maxPoolSize);
        config.setMinimumIdle(Math.min(1, maxPoolSize));
        config.setConnectionTimeout(connectionTimeoutMillis);
        config.setValidationTimeout(Math.min(2000, Math.max(250, connectionTimeoutMillis / 2)));
        config.setInitializationFailTimeout(-1); // (no connect here: a shard down is met, and retried, by the call)
        return new HikariDataSource(config);
    }

    @Override
    public void giveBack(String shard, Connection conn, boolean broken) {
        HikariDataSource pool = pools.get(shard);
        if (broken && pool != null) {
            pool.evictConnection(conn); // (closed, not pooled again)
        }
        try {
            conn.close();
        } catch (SQLException e) {
            // (a broken connection: Hikari discards it)
        }
    }

    @Override
    public boolean isClosed(Connection conn) {
        try {
            return conn.unwrap(Connection.class).isClosed(); // (the driver's connection, not Hikari's proxy)
        } catch (SQLException e) {
            return true;
        }
    }

    @Override
    public boolean inFailedTransaction(Connection conn) throws SQLException {
        return conn.unwrap(BaseConnection.class).getTransactionState() == TransactionState.FAILED;
    }

    @Override
    public boolean inTransaction(Connection conn) throws SQLException {
        return conn.unwrap(BaseConnection.class).getTransactionState() != TransactionState.IDLE;
    }

    @Override
    public void close() {
        closed = true;
        for (HikariDataSource pool : pools.values()) {
            pool.close();
        }
    }
}
