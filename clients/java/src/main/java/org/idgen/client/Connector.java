// Connector: the driver behind the Router, as a small internal seam — JdbcConnector (pgjdbc +
// HikariCP) in production, a fake in the tests, so that the whole protocol can be tested
// without a server.
//
// Invariants every implementation keeps:
// - Coordinator connections are new, autocommit, and every statement on them is bounded.
// - borrow() hands out a pooled autocommit shard connection within a bounded wait, or throws
//   (nothing was sent then); every borrowed connection is given back exactly once, broken
//   ones are discarded instead of pooled.
// - awaitNotifications waits at most timeoutMillis.
package org.idgen.client;

import java.sql.Connection;
import java.sql.SQLException;
import java.util.List;

interface Connector extends AutoCloseable {
    /** A new autocommit connection to the coordinator. */
    Connection openCoordinator() throws SQLException;

    /** Payloads of NOTIFY received on a listening coordinator connection within timeoutMillis. */
    List<String> awaitNotifications(Connection listener, long timeoutMillis) throws SQLException;

    /** A pooled autocommit connection of the shard; throws when none can be had in time. */
    Connection borrow(String shard) throws SQLException;

    /** Gives a borrowed connection back to its pool, or discards it when broken. */
    void giveBack(String shard, Connection conn, boolean broken);

    /** Whether the driver closed the connection (a lost socket, a FATAL from the server). */
    boolean isClosed(Connection conn);

    /** Whether the connection's transaction block has failed (COMMIT would roll it back). */
    boolean inFailedTransaction(Connection conn) throws SQLException;

    /**
     * Whether the connection is in a transaction block (failed or not), as the driver last
     * heard from the server: false once the body sent COMMIT or ROLLBACK itself.
     */
    boolean inTransaction(Connection conn) throws SQLException;

    /** Closes every pool. */
    @Override
    void close();
}
