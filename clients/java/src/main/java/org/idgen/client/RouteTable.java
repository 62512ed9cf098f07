// RouteTable: the routes and their version, one snapshot read in one statement.
//
// Invariants: immutable, replaced whole; ranges sorted by lower gene, inclusive, disjoint and
// within 0..65535 (checked when read); a lookup is the ceiling entry on upper_gene.
package org.idgen.client;

import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

final class RouteTable {
    static final RouteTable NONE = new RouteTable(Collections.emptyList(), 0);

    private final List<Route> routes;
    private final int[] uppers;
    private final long version;

    RouteTable(List<Route> routes, long version) {
        this.routes = Collections.unmodifiableList(new ArrayList<>(routes));
        this.uppers = new int[routes.size()];
        int previousUpper = -1;
        for (int i = 0; i < uppers.length; i++) {
            Route r = routes.get(i);
            if (r.lowerGene() <= previousUpper || r.lowerGene() > r.upperGene() || r.upperGene() > Genes.MAX_GENE) {
                throw new IllegalArgumentException("routes out of order or outside 0..65535 at " + r);
            }
            uppers[i] = r.upperGene();
            previousUpper = r.upperGene();
        }
        this.version = version;
    }

    /** From the rows of Protocol.ROUTES_SQL; null when there are none (then read the version alone). */
    static RouteTable fromRows(ResultSet rs) throws SQLException {
        List<Route> routes = new ArrayList<>();
        long version = 0;
        while (rs.next()) {
            routes.add(new Route(rs.getInt(1), rs.getInt(2), rs.getString(3)));
            version = rs.getLong(4);
        }
        if (routes.isEmpty()) {
            return null;
        }
        try {
            return new RouteTable(routes, version);
        } catch (IllegalArgumentException e) {
            throw new SQLException("the coordinator's routes are not usable: " + e.getMessage(), e);
        }
    }

    long version() {
        return version;
    }

    List<Route> routes() {
        return routes;
    }

    /** The shard of gene g, or null when no route covers it. */
    String shardForGene(int g) {
        int lo = 0;
        int hi = uppers.length;
        while (lo < hi) {
            int mid = (lo + hi) >>> 1;
            if (uppers[mid] < g) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        if (lo == uppers.length || routes.get(lo).lowerGene() > g) {
            return null;
        }
        return routes.get(lo).shard();
    }
}
