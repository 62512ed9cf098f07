// `conformance bench` (docs/routing-protocol.md §6): one client, one operation at a time,
// through the Router, or (--direct) the same statements on HikariCP pools of the tool's own,
// autocommit, with the Router's own shard connection properties
// (Router.shardConnectionProperties: prepareThreshold=0, assumeMinServerVersion=10, the same
// timeouts), or (--side-by-side) both in alternating slices of 100 ms. --warm-up-seconds (0.5)
// of warm-up, then --seconds; prints `ops N seconds X` (side by side: `ops N seconds X direct_ops M
// direct_seconds Y`).
//
// Invariants: nothing is measured but the loop of operations; every wait is bounded (the
// Router's timeouts, Hikari's connectionTimeout, pgjdbc's socketTimeout).
package org.idgen.client.conformance;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.function.LongSupplier;
import org.idgen.client.Key;
import org.idgen.client.Router;

final class Bench {
    /** The Router's default socketTimeout (Router.Builder.socketTimeout). */
    static final Duration SOCKET_TIMEOUT = Duration.ofSeconds(60);

    private Bench() {
    }

    static int bench(List<String> argv) {
        Conformance.LoadArgs args;
        try {
            args = Conformance.LoadArgs.parse(argv, true);
        } catch (IllegalArgumentException e) {
            System.err.println("conformance bench: " + e.getMessage() + "\n" + Conformance.usage());
            return 2;
        }
        Router.Builder builder = Router.builder().routes(args.routes.url, args.routes.properties)
                .listen(false).refreshInterval(Duration.ZERO).maxPoolSize(2);
        args.retrySettings(builder);
        Map<String, HikariDataSource> pools = new HashMap<>();
        for (int i = 0; i < args.shardNames.size(); i++) {
            builder.shard(args.shardNames.get(i), args.shardDsns.get(i).url, args.shardDsns.get(i).properties);
        }
        try (Router router = builder.build()) {
            for (int i = 0; i < args.shardNames.size(); i++) {
                pools.put(args.shardNames.get(i), pool(args.shardNames.get(i), args.shardDsns.get(i)));
            }
            List<Long> ids = args.mode.equals("lookup") ? ids(args) : List.of();
            if (args.mode.equals("lookup") && ids.isEmpty()) {
                System.err.println("conformance bench: " + args.table + " has no rows to look up");
                return 1;
            }
            String insert = "INSERT INTO " + args.table + " (id, owner_id) VALUES (id_gen.gene_order_id(?::text, "
                    + "?::bigint), ?) RETURNING id";
            String lookup = "SELECT owner_id FROM " + args.table + " WHERE id = ?";
            Random rng = new Random(7);
            long[] n = {0};
            Side one = direct -> one(router, pools, args, rng, ids, ++n[0], insert, lookup, direct);
            boolean[] sides = args.sideBySide ? SIDE_BY_SIDE : new boolean[] {args.direct};
            runSlices(one, sides, (long) (args.warmUpSeconds * 1e9), System::nanoTime); // warm-up
            double[][] measured = runSlices(one, sides, (long) (args.seconds * 1e9), System::nanoTime);
            if (args.sideBySide) {
                System.out.println("ops " + (long) measured[0][0] + " seconds " + seconds(measured[0][1])
                        + " direct_ops " + (long) measured[1][0] + " direct_seconds " + seconds(measured[1][1]));
            } else {
                double[] m = measured[args.direct ? 1 : 0];
                System.out.println("ops " + (long) m[0] + " seconds " + seconds(m[1]));
            }
            System.out.flush();
            return 0;
        } catch (SQLException e) {
            System.err.println("conformance bench: " + e);
            return 1;
        } finally {
            pools.values().forEach(HikariDataSource::close);
        }
    }

    /** One operation, through the Router (false) or on the tool's own pools (true). */
    interface Side {
        void run(boolean direct) throws SQLException;
    }

    /** How long one side runs before the other takes over, side by side. */
    static final long SLICE_NANOS = 100_000_000L;

    /**
     * The sides of the slices in turn, side by side (false: the Router, true: the direct pools):
     * Router, direct, direct, Router, so that a drift of the machine weighs on both alike.
     */
    static final boolean[] SIDE_BY_SIDE = {false, true, true, false};

    /**
     * Runs one side for nanos in slices of SLICE_NANOS, the slices' sides in the cyclic order of
     * sides, and at least one slice of each of them, by the clock (in ns); returns {operations,
     * seconds} of the Router (index 0) and of the direct pools (index 1), each side's seconds
     * from the starts of its slices to the ends of their last operations. The first error ends it.
     */
    static double[][] runSlices(Side one, boolean[] sides, long nanos, LongSupplier clock) throws SQLException {
        double[][] measured = new double[2][2];
        long end = clock.getAsLong() + nanos;
        for (int i = 0; ; i++) {
            long start = clock.getAsLong();
            if (start - end >= 0 && i >= sides.length) {
                return measured;
            }
            boolean side = sides[i % sides.length];
            long sliceEnd = Math.min(start + SLICE_NANOS, end);
            long ops = 0;
            long t;
            do {
                one.run(side);
                ops++;
                t = clock.getAsLong();
            } while (t - sliceEnd < 0);
            double[] m = measured[side ? 1 : 0];
            m[0] += ops;
            m[1] += (t - start) / 1e9;
        }
    }

    /** Seconds with three decimals and a point, whatever the locale. */
    static String seconds(double s) {
        return String.format(Locale.ROOT, "%.3f", s);
    }

    private static HikariDataSource pool(String name, Dsn dsn) {
        return new HikariDataSource(poolConfig(name, dsn));
    }

    /** A direct pool's settings: the Router's shard connection properties (its default socketTimeout). */
    static HikariConfig poolConfig(String name, Dsn dsn) {
        HikariConfig config = new HikariConfig();
        config.setPoolName("bench-direct-" + name);
        config.setJdbcUrl(dsn.url);
        config.setDataSourceProperties(Router.shardConnectionProperties(dsn.properties, SOCKET_TIMEOUT));
        config.setAutoCommit(true);
        config.setMaximumPoolSize(2);
        config.setMinimumIdle(1);
        config.setConnectionTimeout(10000);
        return config;
    }

    /** Up to 1,000 ids of the table, read once through the coordinator. */
    private static List<Long> ids(Conformance.LoadArgs args) throws SQLException {
        Properties p = new Properties();
        p.setProperty("socketTimeout", "10");
        p.setProperty("connectTimeout", "10");
        for (String key : args.routes.properties.stringPropertyNames()) {
            p.setProperty(key, args.routes.properties.getProperty(key));
        }
        List<Long> ids = new ArrayList<>();
        try (Connection c = DriverManager.getConnection(args.routes.url, p);
             Statement st = c.createStatement();
             ResultSet rs = st.executeQuery("SELECT id FROM " + args.table + " LIMIT 1000")) {
            while (rs.next()) {
                ids.add(rs.getLong(1));
            }
        }
        return ids;
    }

    private static void one(Router router, Map<String, HikariDataSource> pools, Conformance.LoadArgs args,
                            Random rng, List<Long> ids, long n, String insert, String lookup, boolean direct)
            throws SQLException {
        if (args.mode.equals("tx")) {
            long owner = 1 + rng.nextInt(args.owners);
            if (!direct) {
                router.transaction(Key.owner(owner), conn -> insert(conn, insert, args.sequence, owner));
                return;
            }
            // BEGIN, the INSERT, COMMIT as statements of their own, as §6 says (setAutoCommit
            // false would send BEGIN with the INSERT: one round trip less than the Router's claim).
            try (Connection conn = pools.get(router.shardForOwner(owner)).getConnection();
                 Statement st = conn.createStatement()) {
                st.execute("BEGIN");
                try {
                    insert(conn, insert, args.sequence, owner);
                    st.execute("COMMIT");
                } catch (SQLException e) {
                    st.execute("ROLLBACK");
                    throw e;
                }
            }
        } else {
            long id = ids.get((int) (n % ids.size()));
            if (!direct) {
                router.execute(Key.id(id), lookup, id);
                return;
            }
            try (Connection conn = pools.get(router.shardForId(id)).getConnection();
                 PreparedStatement ps = conn.prepareStatement(lookup)) {
                ps.setLong(1, id);
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                }
            }
        }
    }

    private static long insert(Connection conn, String sql, String sequence, long owner) throws SQLException {
        try (PreparedStatement ps = conn.prepareStatement(sql)) {
            ps.setString(1, sequence);
            ps.setLong(2, owner);
            ps.setLong(3, owner);
            try (ResultSet rs = ps.executeQuery()) {
                rs.next();
                return rs.getLong(1);
            }
        }
    }
}
