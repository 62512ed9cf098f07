// CommitOutcomeUnknownException: the shard connection was lost after COMMIT (or execute's
// statement, which travels with its implicit COMMIT) was sent and before its answer
// (docs/routing-protocol.md §4, "Lost connections").
//
// Invariants: never retried by the router, never reported committed; getCause() is the
// driver's error as it was thrown (or an unchecked exception carrying it); the SQLState is 08007 (transaction resolution unknown), never a class 08
// state a generic retry layer would take for "safe to run again".
package org.idgen.client;

import java.sql.SQLException;

/** The transaction may or may not have committed: look the row up by its id, or make the body idempotent. */
public class CommitOutcomeUnknownException extends RoutingException {
    private static final long serialVersionUID = 1L;
    /** SQLSTATE transaction_resolution_unknown. */
    public static final String SQLSTATE = "08007";

    public CommitOutcomeUnknownException(String message, SQLException driverError) {
        this(message, driverError, driverError);
    }

    /** thrown: the driver's error as it was thrown (driverError, or an exception whose causes hold it). */
    public CommitOutcomeUnknownException(String message, SQLException driverError, Throwable thrown) {
        super(message + ": " + driverError.getMessage(), SQLSTATE, thrown);
    }
}
