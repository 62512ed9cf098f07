// RouteRetryExhaustedException: IG001/IG002, or a refused or lost shard connection, kept coming
// back for retryLimit retries after the first attempt.
//
// Invariant: getCause() is the last attempt's error as it was thrown (the SQLException, or an
// unchecked exception carrying it in its causes, such as Spring's DataAccessException);
// lastError() is that SQLException, and getSQLState() its SQLState (IG001, IG002, or a class
// 08 / 57P0x state), so code that retries "later" can tell why.
package org.idgen.client;

import java.sql.SQLException;

/** The retries ran out; retryable later (the routes kept changing, the gene stayed fenced or the shard unreachable). */
public class RouteRetryExhaustedException extends RoutingException {
    private static final long serialVersionUID = 1L;
    private final SQLException lastError;

    public RouteRetryExhaustedException(String message, SQLException lastError) {
        this(message, lastError, lastError);
    }

    /** thrown: the last error as it was thrown (lastError, or an exception whose causes hold it). */
    public RouteRetryExhaustedException(String message, SQLException lastError, Throwable thrown) {
        super(message + ": " + lastError.getMessage(), lastError.getSQLState(), thrown);
        this.lastError = lastError;
    }

    /** The last error: the IG001/IG002 or the connection error of the last attempt. */
    public SQLException lastError() {
        return lastError;
    }
}
