// Protocol: what the router needs without I/O — the SQL of docs/routing-protocol.md (the same
// as every other client's), how an error is classified, and the retry decisions.
//
// Invariants:
// - The claim on BEGIN (routing protocol 2) is sent only to a shard whose
//   id_gen.routing_protocol says it reads it: a shard before 0.7.16 ignores the comment, which
//   would be a BEGIN with no claim. Anything else the setting says (NULL, not a number, less
//   than 2) means the claim statement, which every shard takes.
// - retryLimit counts retries after the first attempt (at most retryLimit + 1 attempts).
// - After IG001 the routes are re-read before the next attempt; after IG002 every third
//   time; never after a lost connection (the routes said nothing new). The wait before
//   attempt n + 1 is min(base * 2^n, max), jittered to [1/2, 1] of it.
// - A connection is lost when its error has SQLState class 08 or 57P01..57P03, or the driver
//   closed it under the error. A connect that failed (connectFailed) is one whose error, or
//   an error along its causes, has such a SQLState or is a java.net.ConnectException: pgjdbc's
//   08001 (refused; no host of a multi-host URL is the primary that targetServerType=primary
//   asks for) and HikariCP's SQLTransientConnectionException around it (its SQLState the
//   last connect failure's, null when the pool was merely exhausted).
// - An error is classified by the SQLException it is or carries: a RuntimeException (Spring's
//   or jOOQ's DataAccessException, ...) is looked through along getCause(), at most
//   MAX_CAUSES deep (a cycle of causes ends there), to the first SQLException.
package org.idgen.client;

import java.util.concurrent.ThreadLocalRandom;

final class Protocol {
    static final String ROUTES_CHANNEL = "id_gen_routes";
    static final String ROUTES_SQL =
            "SELECT lower_gene, upper_gene, shard, version FROM id_gen.route_map ORDER BY lower_gene";
    /** One snapshot: the version, only when there are still no routes (else read them again). */
    static final String EMPTY_ROUTES_VERSION_SQL =
            "SELECT id_gen.route_version() AS version WHERE NOT EXISTS (SELECT 1 FROM id_gen.route_map)";
    static final String ROUTE_VERSION_SQL = "SELECT id_gen.route_version() AS version";
    /** A shard's routing protocol revision: '2' from id_gen 0.7.16, NULL before. */
    static final String ROUTING_PROTOCOL_SQL =
            "SELECT pg_catalog.current_setting('id_gen.routing_protocol', true)";
    /** The first routing protocol revision whose shards read the claim on BEGIN. */
    static final int CLAIM_ON_BEGIN_PROTOCOL = 2;
    static final String ROUTE_CHANGED = "IG001";
    static final String ROUTE_FENCED = "IG002";

    /** How deep a chain of causes is looked through (a bound against cycles). */
    static final int MAX_CAUSES = 32;

    /** Why an attempt is retried. */
    enum RetryCause { MOVED, FENCED, LOST }

    private Protocol() {
    }

    /** Whether a shard whose id_gen.routing_protocol is `setting` (null: unset) reads the claim on BEGIN. */
    static boolean claimsOnBegin(String setting) {
        if (setting == null) {
            return false;
        }
        try {
            return Integer.parseInt(setting) >= CLAIM_ON_BEGIN_PROTOCOL;
        } catch (NumberFormatException e) {
            return false;
        }
    }

    /**
     * BEGIN and the claim statement in one message (one round trip, as a BEGIN alone), for
     * shards before routing protocol 2.
     */
    static String claimStatementSql(int gene, long version) {
        return "BEGIN; SELECT id_gen.route_claim(" + gene + ", " + version + ")";
    }

    /**
     * BEGIN carrying the claim in its leading comment ({@code id_gen.route_claim=G,V}), for
     * shards of routing protocol 2: no statement of its own. A refused claim leaves no
     * transaction open.
     */
    static String claimOnBeginSql(int gene, long version) {
        return "/* id_gen.route_claim=" + gene + "," + version + " */ BEGIN";
    }

    /**
     * sql with the route version it was routed with in a leading comment
     * (docs/routing-protocol.md §3): the shard checks it for that statement, with no second
     * statement and no session state.
     */
    static String declaredSql(long version, String sql) {
        return "/* id_gen.route_version=" + version + " */ " + sql;
    }

    /** MOVED for IG001, FENCED for IG002, else null. */
    static RetryCause routeErrorCause(String sqlState) {
        if (ROUTE_CHANGED.equals(sqlState)) {
            return RetryCause.MOVED;
        }
        return ROUTE_FENCED.equals(sqlState) ? RetryCause.FENCED : null;
    }

    /** Whether a SQLState says the connection is gone: class 08, or the server ended the session. */
    static boolean connectionLostState(String sqlState) {
        return sqlState != null && (sqlState.startsWith("08") || sqlState.equals("57P01")
                || sqlState.equals("57P02") || sqlState.equals("57P03"));
    }

    /**
     * The SQLException an error is or wraps: thrown itself, or the first along its causes (a
     * RuntimeException wrapping the driver's error, as Spring's DataAccessException does);
     * null when there is none within MAX_CAUSES.
     */
    static java.sql.SQLException sqlExceptionIn(Throwable thrown) {
        Throwable t = thrown;
        for (int depth = 0; t != null && depth < MAX_CAUSES; depth++) {
            if (t instanceof java.sql.SQLException) {
                return (java.sql.SQLException) t;
            }
            t = t.getCause();
        }
        return null;
    }

    /**
     * Whether an error from taking a shard connection says the connect failed (the shard down,
     * restarting or failing over): a lost-connection SQLState on the error or along its
     * causes, or a java.net.ConnectException among them. Not a pool that was merely exhausted
     * (HikariCP's timeout with no connect failure behind it), a refused password or an
     * unknown database (28P01, 3D000).
     */
    static boolean connectFailed(Throwable thrown) {
        Throwable t = thrown;
        for (int depth = 0; t != null && depth < MAX_CAUSES; depth++) {
            if (t instanceof java.net.ConnectException
                    || (t instanceof java.sql.SQLException && connectionLostState(((java.sql.SQLException) t).getSQLState()))) {
                return true;
            }
            t = t.getCause();
        }
        return false;
    }

    /** Whether the error or one of its causes (at most MAX_CAUSES deep) is a `kind`. */
    static boolean causedBy(Throwable thrown, Class<? extends Throwable> kind) {
        Throwable t = thrown;
        for (int depth = 0; t != null && depth < MAX_CAUSES; depth++) {
            if (kind.isInstance(t)) {
                return true;
            }
            t = t.getCause();
        }
        return false;
    }

    /** Whether to re-read the routes after attempt number `attempt` met `cause`. */
    static boolean rereadsAfter(RetryCause cause, int attempt) {
        return cause == RetryCause.MOVED || (cause == RetryCause.FENCED && attempt % 3 == 2);
    }

    /** The jittered wait in nanoseconds after attempt number `attempt` (0 for the first). */
    static long backoffNanos(int attempt, long baseNanos, long maxNanos) {
        double full = Math.min(baseNanos * Math.pow(2, attempt), maxNanos);
        return (long) (full * (0.5 + ThreadLocalRandom.current().nextDouble() / 2));
    }
}
