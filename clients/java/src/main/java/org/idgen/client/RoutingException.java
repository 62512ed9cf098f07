// Errors of the router about routing itself (docs/routing-protocol.md §5, "Errors every client
// tells apart").
//
// Invariants: every error the router raises about routing is a RoutingException; they are
// checked SQLExceptions, so a `throws SQLException` covers them and database errors alike;
// database errors that are not about routes reach the caller as the driver reported them
// (a PSQLException with its SQLState), never wrapped.
package org.idgen.client;

import java.sql.SQLException;

/** Base class of the router's own errors. */
public class RoutingException extends SQLException {
    private static final long serialVersionUID = 1L;

    public RoutingException(String message) {
        super(message);
    }

    public RoutingException(String message, String sqlState, Throwable cause) {
        super(message, sqlState, cause);
    }
}
