// The conformance tool's parts that need no server: libpq DSNs as pgjdbc URLs (multi-host
// ones too), the genes mode, the load's argument checks (--retry-limit, --backoff-max-ms too),
// the bench's direct pools (the Router's connection properties), its sides and its slices.
package org.idgen.client.conformance;

import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import org.idgen.client.Router;
import org.junit.jupiter.api.Test;

class ConformanceTest {
    @Test
    void libpqDsnsBecomePgjdbcUrlsAndProperties() {
        Dsn d = Dsn.parse("host=127.0.0.1 port=5433 user=postgres dbname=postgres");
        assertEquals("jdbc:postgresql://127.0.0.1:5433/postgres", d.url);
        assertEquals("postgres", d.properties.getProperty("user"));
        d = Dsn.parse("host=::1 user=u dbname='my db' password='a b\\'c' connect_timeout=2");
        assertEquals("jdbc:postgresql://[::1]:5432/my%20db", d.url);
        assertEquals("a b'c", d.properties.getProperty("password"));
        assertEquals("2", d.properties.getProperty("connectTimeout"));
        assertEquals("jdbc:postgresql://localhost:5432/u", Dsn.parse("user=u").url, "dbname defaults to user");
        assertThrows(IllegalArgumentException.class, () -> Dsn.parse("host=h gssencmode=disable"));
        assertThrows(IllegalArgumentException.class, () -> Dsn.parse("host=h junk"));
        assertThrows(IllegalArgumentException.class, () -> Dsn.parse("host=/tmp user=u"));
    }

    @Test
    void multiHostDsnsBecomeMultiHostUrlsWithATargetServerType() {
        Dsn d = Dsn.parse("host=127.0.0.1,127.0.0.1 port=5433,5434 user=postgres dbname=postgres "
                + "target_session_attrs=read-write connect_timeout=2");
        assertEquals("jdbc:postgresql://127.0.0.1:5433,127.0.0.1:5434/postgres", d.url);
        assertEquals("primary", d.properties.getProperty("targetServerType"));
        assertEquals("1", d.properties.getProperty("hostRecheckSeconds"));
        assertEquals("2", d.properties.getProperty("connectTimeout"));
        d = Dsn.parse("host=a,::1,c port=6000 user=u target_session_attrs=any");
        assertEquals("jdbc:postgresql://a:6000,[::1]:6000,c:6000/u", d.url, "one port for every host");
        assertEquals("any", d.properties.getProperty("targetServerType"));
        assertEquals("jdbc:postgresql://a:5432,localhost:7/u", Dsn.parse("host=a, port=,7 user=u").url,
                "an empty entry is the default");
        d = Dsn.parse("host=h port=5 user=u target_session_attrs=read-write");
        assertEquals("jdbc:postgresql://h:5/u", d.url);
        assertEquals("primary", d.properties.getProperty("targetServerType"));
        assertEquals(null, d.properties.getProperty("hostRecheckSeconds"), "one host: nothing to re-check");
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> Dsn.parse("host=a,b,c port=1,2 user=u"));
        assertTrue(e.getMessage().contains("3 hosts takes one port or 3 ports, not 2"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> Dsn.parse("host=a,b user=u target_session_attrs=standby"));
        assertTrue(e.getMessage().contains("target_session_attrs=standby is not supported"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> Dsn.parse("host=a,/tmp user=u"));
        assertThrows(IllegalArgumentException.class, () -> Dsn.parse("host=a,b port=1,x user=u"));
    }

    @Test
    void benchDirectPoolsUseTheRoutersShardConnectionProperties() {
        Dsn d = Dsn.parse("host=127.0.0.1 port=5433 user=u dbname=d connect_timeout=3");
        Properties direct = Bench.poolConfig("a", d).getDataSourceProperties();
        assertEquals(Router.shardConnectionProperties(d.properties, Duration.ofSeconds(60)), direct);
        assertEquals("0", direct.getProperty("prepareThreshold"));
        assertEquals("10", direct.getProperty("loginTimeout"));
        assertEquals("60", direct.getProperty("socketTimeout"));
        assertEquals("3", direct.getProperty("connectTimeout"), "the DSN's own win");
        assertEquals("u", direct.getProperty("user"));
        assertThrows(IllegalArgumentException.class,
                () -> Router.shardConnectionProperties(new Properties(), Duration.ofMillis(500)));
    }

    @Test
    void genesReadsOwnersAndWritesTheirGenes() {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        String in = "i:42\nt:alice\ni:0\nt:a\tb \nu:12345678-1234-5678-1234-567812345678\n";
        assertEquals(0, Conformance.genes(new ByteArrayInputStream(in.getBytes(StandardCharsets.UTF_8)),
                new PrintStream(out, true, StandardCharsets.UTF_8), new PrintStream(err, true, StandardCharsets.UTF_8)));
        String[] genes = out.toString(StandardCharsets.UTF_8).split("\n");
        assertEquals(List.of("16043", "13795", "55408"), List.of(genes).subList(0, 3));
        assertEquals(5, genes.length);
        assertEquals(2, Conformance.genes(new ByteArrayInputStream("x:1\n".getBytes(StandardCharsets.UTF_8)),
                new PrintStream(out, true, StandardCharsets.UTF_8), new PrintStream(err, true, StandardCharsets.UTF_8)));
        assertEquals(2, Conformance.genes(new ByteArrayInputStream("u:1-2-3-4-5\n".getBytes(StandardCharsets.UTF_8)),
                new PrintStream(out, true, StandardCharsets.UTF_8), new PrintStream(err, true, StandardCharsets.UTF_8)));
    }

    @Test
    void loadArguments() {
        List<String> ok = List.of("--routes", "host=h user=u dbname=d", "--shard", "shard_1=host=h port=1 user=u",
                "--shard", "shard_2=host=h port=2 user=u", "--table", "t", "--sequence", "q", "--owners", "10",
                "--seconds", "1.5", "--log", "/tmp/x", "--no-listen", "--refresh-interval-ms", "0");
        Conformance.LoadArgs a = Conformance.LoadArgs.parse(ok);
        assertEquals(List.of("shard_1", "shard_2"), a.shardNames);
        assertEquals("jdbc:postgresql://h:2/u", a.shardDsns.get(1).url);
        assertEquals(4, a.readEvery);
        assertEquals(false, a.listen);
        assertEquals(0, a.refreshIntervalMs);
        assertThrows(IllegalArgumentException.class, () -> Conformance.LoadArgs.parse(ok.subList(0, 4)));
        assertThrows(IllegalArgumentException.class, () -> Conformance.LoadArgs.parse(List.of("--owners", "x")));
        assertThrows(IllegalArgumentException.class, () -> Conformance.LoadArgs.parse(List.of("--bogus", "1")));
        assertEquals(20, a.retryLimit, "the Router's default");
        assertEquals(200, a.backoffMaxMs, "the Router's default");
        List<String> retries = new java.util.ArrayList<>(ok);
        retries.addAll(List.of("--retry-limit", "200", "--backoff-max-ms", "1000"));
        a = Conformance.LoadArgs.parse(retries);
        assertEquals(200, a.retryLimit);
        assertEquals(1000, a.backoffMaxMs);
        for (String flag : List.of("--retry-limit", "--backoff-max-ms")) {
            for (String bad : List.of("-1", "1.5", "x", "", "+3", "99999999999999999999")) {
                List<String> withBad = new java.util.ArrayList<>(ok);
                withBad.addAll(List.of(flag, bad));
                assertThrows(IllegalArgumentException.class, () -> Conformance.LoadArgs.parse(withBad), flag + " " + bad);
            }
        }
        List<String> negative = new java.util.ArrayList<>(ok);
        negative.addAll(List.of("--retry-limit", "-1"));
        assertEquals(2, Conformance.load(negative), "a usage error");
        Conformance.LoadArgs noBackoff = Conformance.LoadArgs.parse(List.of("--routes", "host=h", "--shard",
                "s=host=h", "--table", "t", "--sequence", "q", "--owners", "1", "--seconds", "1", "--log", "/tmp/x",
                "--backoff-max-ms", "0"));
        assertDoesNotThrow(() -> noBackoff.retrySettings(Router.builder()), "a largest backoff of 0 lowers the first");
        assertEquals(2, Conformance.load(List.of("--owners")));
    }

    @Test
    void benchTakesOneSideOrBoth() {
        List<String> base = List.of("--routes", "host=h", "--shard", "s=host=h", "--table", "t", "--sequence", "q",
                "--owners", "1", "--seconds", "1", "--mode", "tx");
        List<String> both = new java.util.ArrayList<>(base);
        both.add("--side-by-side");
        Conformance.LoadArgs a = Conformance.LoadArgs.parse(both, true);
        assertTrue(a.sideBySide && !a.direct);
        both.add("--direct");
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> Conformance.LoadArgs.parse(both, true));
        assertTrue(e.getMessage().contains("exclude each other"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> Conformance.LoadArgs.parse(List.of("--side-by-side"), false));
        assertEquals(0.5, a.warmUpSeconds);
        List<String> warm = new java.util.ArrayList<>(base);
        warm.addAll(List.of("--warm-up-seconds", "2.5"));
        assertEquals(2.5, Conformance.LoadArgs.parse(warm, true).warmUpSeconds);
        for (String bad : List.of("-1", "NaN", "3601", "x")) {
            List<String> withBad = new java.util.ArrayList<>(base);
            withBad.addAll(List.of("--warm-up-seconds", bad));
            assertThrows(IllegalArgumentException.class, () -> Conformance.LoadArgs.parse(withBad, true), bad);
        }
    }

    @Test
    void slicesGoRouterDirectDirectRouter() throws Exception {
        // A clock that each operation moves on by 62.5 ms: two operations a slice of 100 ms.
        long[] clock = {1_000_000_000L};
        List<Boolean> done = new java.util.ArrayList<>();
        Bench.Side one = direct -> {
            done.add(direct);
            clock[0] += 62_500_000L;
        };
        double[][] m = Bench.runSlices(one, Bench.SIDE_BY_SIDE, 1_000_000_000L, () -> clock[0]);
        boolean r = false;
        boolean d = true;
        assertEquals(List.of(r, r, d, d, d, d, r, r, r, r, d, d, d, d, r, r), done);
        assertEquals(8, m[0][0]);
        assertEquals(0.5, m[0][1], 1e-9);
        assertEquals(8, m[1][0]);
        assertEquals(0.5, m[1][1], 1e-9);
        done.clear();
        m = Bench.runSlices(one, Bench.SIDE_BY_SIDE, 0, () -> clock[0]);
        assertEquals(List.of(r, d, d, r), done, "every side runs, even in no time");
        assertEquals(2, m[0][0]);
        assertEquals(2, m[1][0]);
        java.sql.SQLException down = new java.sql.SQLException("down");
        assertEquals(down, assertThrows(java.sql.SQLException.class, () -> Bench.runSlices(x -> {
            throw down;
        }, new boolean[] {true}, Bench.SLICE_NANOS, System::nanoTime)));
        java.util.Locale saved = java.util.Locale.getDefault();
        java.util.Locale.setDefault(java.util.Locale.GERMANY);
        try {
            assertEquals("1.500", Bench.seconds(1.5), "a point in any locale");
        } finally {
            java.util.Locale.setDefault(saved);
        }
    }
}
