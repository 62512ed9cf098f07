// `conformance bench` (docs/routing-protocol.md §6): one client, one operation at a time,
// through the Router or (--direct) the same statements on HikariCP pools of the tool's own,
// autocommit, with the Router's own shard connection properties
// (Router.shardConnectionProperties: prepareThreshold=0, assumeMinServerVersion=10, the same
// timeouts). 0.5 s of warm-up, then --seconds; prints `ops N seconds X`.
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
import java.util.Map;
import java.util.Properties;
import java.util.Random;
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
            long n = 0;
            long warm = System.nanoTime() + 500_000_000L;
            while (System.nanoTime() - warm < 0) {
                one(router, pools, args, rng, ids, ++n, insert, lookup);
            }
            long ops = 0;
            long start = System.nanoTime();
            while (System.nanoTime() - start < (long) (args.seconds * 1e9)) {
                one(router, pools, args, rng, ids, ++n, insert, lookup);
                ops++;
            }
            double seconds = (System.nanoTime() - start) / 1e9;
            System.out.println("ops " + ops + " seconds " + String.format("%.3f", seconds));
            System.out.flush();
            return 0;
        } catch (SQLException e) {
            System.err.println("conformance bench: " + e);
            return 1;
        } finally {
            pools.values().forEach(HikariDataSource::close);
        }
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
                            Random rng, List<Long> ids, long n, String insert, String lookup) throws SQLException {
        if (args.mode.equals("tx")) {
            long owner = 1 + rng.nextInt(args.owners);
            if (!args.direct) {
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
            if (!args.direct) {
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
