// Body: the caller's statements of a routed transaction.
//
// Invariant (kept by Router): the body gets an autocommit connection inside a transaction
// block the router opened with the claim; the router commits or rolls back, and gives the
// connection back to its pool. The body must not commit, roll back, close the connection or
// change its auto-commit; Router.transaction may run it more than once. An unchecked exception
// from the body that carries an SQLException among its causes (a DataAccessException) is
// classified by that SQLException.
package org.idgen.client;

import java.sql.Connection;
import java.sql.SQLException;

/** The statements of a transaction: {@code conn -> ...}, returning the transaction's value. */
@FunctionalInterface
public interface Body<T> {
    T apply(Connection conn) throws SQLException;
}
