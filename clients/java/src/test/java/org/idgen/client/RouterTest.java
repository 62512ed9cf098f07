// The Router against the fake driver of FakeCluster, beyond the shared scenarios: what is sent
// to a shard (nothing per session), the claim's form by the shard's routing protocol (probed
// once, again after a lost connection), a body that swallowed an error, nextId's SQL and
// parameters, route changes heard, missed and polled, a listener lost, LISTEN failing at the
// start (not fatal), a coordinator down at the start, a failed connect as pgjdbc and HikariCP
// report it (retried) against an exhausted pool or a refused login (raised), closing; and
// the real pgjdbc driver
// against a port where nothing listens.
//
// Invariant: no test waits a fixed time for a condition; pollUntil polls with a deadline and
// fails with the last value seen.
package org.idgen.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.ConnectException;
import java.sql.SQLException;
import java.sql.SQLTransientConnectionException;
import java.sql.Statement;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.Callable;
import java.util.function.Consumer;
import java.util.function.Supplier;
import org.junit.jupiter.api.Test;
import org.postgresql.util.PSQLException;
import org.postgresql.util.PSQLState;

class RouterTest {
    private static final List<Object[]> ROUTES = List.of(new Object[] {32767, "a"}, new Object[] {65535, "b"});
    private static final List<Object[]> ALL_ON_B = List.<Object[]>of(new Object[] {65535, "b"});

    private interface Scenario {
        void run(Router router, FakeCluster cluster) throws Exception;
    }

    private static void withRouter(Consumer<Router.Builder> settings, Scenario scenario) throws Exception {
        FakeCluster cluster = new FakeCluster(ROUTES);
        Router.Builder b = Router.builder().routes("coord").shard("a", "a").shard("b", "b").listen(false)
                .refreshInterval(Duration.ZERO).backoff(Duration.ofNanos(1000), Duration.ofNanos(10_000))
                .connector(cluster);
        settings.accept(b);
        try (Router router = b.build()) {
            scenario.run(router, cluster);
            assertEquals(0, cluster.outstanding(), "a pooled connection was kept");
            assertEquals(List.of(), cluster.problems());
        }
        assertEquals(0, cluster.openCoordinatorConnections(), "close() left a coordinator connection open");
    }

    /** Polls what until it equals want; fails with the last value after timeout. */
    private static <T> void pollUntil(String what, Callable<T> value, T want) throws Exception {
        long deadline = System.nanoTime() + Duration.ofSeconds(5).toNanos();
        T last = value.call();
        while (!Objects.equals(last, want)) {
            if (System.nanoTime() - deadline > 0) {
                throw new AssertionError(what + ": still " + last + " after 5 s (want " + want + ")");
            }
            Thread.sleep(5);
            last = value.call();
        }
    }

    /** Polls value until it is at least least; fails with the last value after timeout. */
    private static void pollUntilAtLeast(String what, Callable<Long> value, long least) throws Exception {
        long deadline = System.nanoTime() + Duration.ofSeconds(5).toNanos();
        long last = value.call();
        while (last < least) {
            if (System.nanoTime() - deadline > 0) {
                throw new AssertionError(what + ": still " + last + " after 5 s (want at least " + least + ")");
            }
            Thread.sleep(5);
            last = value.call();
        }
    }

    @Test
    void aShardGetsTheVersionPerTransactionOnlyTheClaimOrTheStatementsLeadingComment() throws Exception {
        withRouter(b -> { }, (router, cluster) -> {
            router.transaction(Key.gene(1), conn -> {
                try (Statement st = conn.createStatement()) {
                    return st.execute("SELECT 1");
                }
            });
            router.execute(Key.gene(1), FakeCluster.READ, 1L);
            assertEquals(List.of(FakeCluster.PROBE, "/* id_gen.route_claim=1,1 */ BEGIN", "SELECT 1", "COMMIT",
                    "/* id_gen.route_version=1 */ " + FakeCluster.READ),
                    cluster.sent());
            assertEquals(2, router.stats().transactions());
        });
    }

    @Test
    void aBodyThatSwallowedAnErrorIsNotReportedCommitted() throws Exception {
        withRouter(b -> { }, (router, cluster) -> {
            SQLException e = assertThrows(SQLException.class, () -> router.transaction(Key.gene(1), conn -> {
                try (Statement st = conn.createStatement()) {
                    st.execute("SELECT fail");
                } catch (SQLException swallowed) {
                    // (the body goes on as if nothing happened)
                }
                return "looks fine";
            }));
            assertEquals("25P02", e.getSQLState());
            assertEquals(0, router.stats().transactions());
            List<String> sent = cluster.sent();
            assertEquals("ROLLBACK", sent.get(sent.size() - 1), "rolled back, never sent COMMIT: " + sent);
        });
    }

    @Test
    void aBodyThatEndsTheTransactionItselfIsNeverReportedCommittedNorRunAgain() throws Exception {
        withRouter(b -> { }, (router, cluster) -> {
            SQLException e = assertThrows(SQLException.class, () -> router.transaction(Key.gene(1), conn -> {
                try (Statement st = conn.createStatement()) {
                    st.execute("ROLLBACK");
                }
                return "looks fine";
            }));
            assertEquals("25P01", e.getSQLState(), "a ROLLBACK in the body: " + e);
            int[] runs = {0};
            SQLException moved = assertThrows(SQLException.class, () -> router.transaction(Key.gene(1), conn -> {
                runs[0]++;
                try (Statement st = conn.createStatement()) {
                    st.execute("COMMIT");
                }
                throw new SQLException("a statement after its own COMMIT runs without the claim", "IG001");
            }));
            assertEquals("IG001", moved.getSQLState());
            assertEquals(1, runs[0], "never run again after its own COMMIT");
            assertEquals(0, router.stats().transactions());
            assertEquals(0, router.stats().retriesMoved());
        });
    }

    @Test
    void aBodyThatThrowsAnUncheckedExceptionIsRolledBackAndItReachesTheCaller() throws Exception {
        withRouter(b -> { }, (router, cluster) -> {
            IllegalStateException thrown = new IllegalStateException("the body's own");
            assertSame(thrown, assertThrows(IllegalStateException.class,
                    () -> router.transaction(Key.gene(1), conn -> {
                        throw thrown;
                    })));
            assertEquals(List.of(FakeCluster.PROBE, "/* id_gen.route_claim=1,1 */ BEGIN", "ROLLBACK"),
                    cluster.sent());
            assertEquals(0, cluster.discarded());
        });
    }

    private static Integer selectOne(java.sql.Connection conn) throws SQLException {
        try (Statement st = conn.createStatement()) {
            st.execute("SELECT 1");
            return 1;
        }
    }

    @Test
    void aShardOf0716GetsTheClaimOnBeginAndIsProbedOnceForManyTransactions() throws Exception {
        withRouter(b -> { }, (router, cluster) -> {
            for (int i = 0; i < 5; i++) {
                router.transaction(Key.gene(1), RouterTest::selectOne);
            }
            router.run(Key.gene(2), RouterTest::selectOne);
            router.execute(Key.gene(3), FakeCluster.READ, 1L);
            List<String> sent = cluster.sent();
            assertEquals(List.of(FakeCluster.PROBE, "/* id_gen.route_claim=1,1 */ BEGIN", "SELECT 1", "COMMIT",
                    "/* id_gen.route_claim=1,1 */ BEGIN", "SELECT 1", "COMMIT"), sent.subList(0, 7));
            assertEquals("/* id_gen.route_claim=2,1 */ BEGIN", sent.get(sent.size() - 4), sent.toString());
            assertEquals(1, cluster.probes(), "once per shard: " + sent);
            assertEquals(6, cluster.claimsOnBegin());
            assertEquals(6, cluster.claims());
            router.transaction(Key.gene(40000), RouterTest::selectOne);
            assertEquals(2, cluster.probes(), "shard b is probed before its own first claim");
            assertEquals(8, router.stats().transactions(), "execute counts too");
        });
    }

    @Test
    void aShardBefore0716GetsTheClaimStatement() throws Exception {
        withRouter(b -> { }, (router, cluster) -> {
            synchronized (cluster) {
                cluster.oldShards.add("a");
            }
            router.transaction(Key.gene(1), RouterTest::selectOne);
            router.transaction(Key.gene(1), RouterTest::selectOne);
            assertEquals(List.of(FakeCluster.PROBE, "BEGIN; SELECT id_gen.route_claim(1, 1)", "SELECT 1", "COMMIT",
                    "BEGIN; SELECT id_gen.route_claim(1, 1)", "SELECT 1", "COMMIT"), cluster.sent());
            router.transaction(Key.gene(40000), RouterTest::selectOne);
            assertEquals("/* id_gen.route_claim=40000,1 */ BEGIN", cluster.sent().get(8), "shard b is of 0.7.16");
        });
    }

    @Test
    void theRoutingProtocolSettingIsReadAsAnInteger() {
        assertTrue(Protocol.claimsOnBegin("2"));
        assertTrue(Protocol.claimsOnBegin("3"));
        for (String older : Arrays.asList(null, "", "1", "0", "-2", "two", "2.0", " 2")) {
            assertFalse(Protocol.claimsOnBegin(older), String.valueOf(older));
        }
        assertEquals("/* id_gen.route_claim=65535,12 */ BEGIN", Protocol.claimOnBeginSql(65535, 12));
        assertEquals("BEGIN; SELECT id_gen.route_claim(0, 1)", Protocol.claimStatementSql(0, 1));
    }

    @Test
    void afterALostConnectionTheShardIsProbedAgain() throws Exception {
        withRouter(b -> { }, (router, cluster) -> {
            synchronized (cluster) {
                cluster.oldShards.add("a");
            }
            router.transaction(Key.gene(1), RouterTest::selectOne);
            assertEquals(1, cluster.probes());
            // Shard a restarts with 0.7.16: the claim statement finds its connection ended.
            synchronized (cluster) {
                cluster.oldShards.clear();
                cluster.claimLost = 1;
            }
            int sentBefore = cluster.sent().size();
            router.transaction(Key.gene(1), RouterTest::selectOne);
            assertEquals(List.of("BEGIN; SELECT id_gen.route_claim(1, 1)", FakeCluster.PROBE,
                    "/* id_gen.route_claim=1,1 */ BEGIN", "SELECT 1", "COMMIT"),
                    cluster.sent().subList(sentBefore, cluster.sent().size()));
            assertEquals(1, router.stats().retriesLost());
            // Lost under the body, or a connect refused: probed again before the next claim.
            int[] runs = {0};
            router.transaction(Key.gene(1), conn -> {
                if (++runs[0] == 1) {
                    throw new SQLException("fake: gone", "08006");
                }
                return 1;
            });
            assertEquals(3, cluster.probes());
            synchronized (cluster) {
                cluster.connectFails = 1;
            }
            router.transaction(Key.gene(1), RouterTest::selectOne);
            assertEquals(4, cluster.probes());
            assertEquals(3, router.stats().retriesLost());
            // Nothing lost: no probe.
            router.transaction(Key.gene(1), RouterTest::selectOne);
            assertEquals(4, cluster.probes());
        });
    }

    @Test
    void aProbeThatLostItsConnectionIsRetriedAsALostClaimAndOneThatFailedOtherwiseMeansTheClaimStatement()
            throws Exception {
        withRouter(b -> { }, (router, cluster) -> {
            synchronized (cluster) {
                cluster.probeLost = 1;
            }
            assertEquals(1, router.transaction(Key.gene(1), RouterTest::selectOne));
            assertEquals(List.of(FakeCluster.PROBE, FakeCluster.PROBE, "/* id_gen.route_claim=1,1 */ BEGIN",
                    "SELECT 1", "COMMIT"), cluster.sent());
            assertEquals(1, router.stats().retriesLost());
            assertEquals(1, cluster.discarded());
            synchronized (cluster) {
                cluster.probeFails = 1;
            }
            assertEquals(1, router.transaction(Key.gene(40000), RouterTest::selectOne));
            List<String> sent = cluster.sent();
            assertEquals(List.of(FakeCluster.PROBE, "BEGIN; SELECT id_gen.route_claim(40000, 1)", "SELECT 1", "COMMIT"),
                    sent.subList(5, sent.size()), "the transaction goes on with the claim statement");
            assertEquals(1, router.stats().retriesLost());
            assertEquals(2, router.stats().transactions());
        });
    }

    @Test
    void aClaimOnBeginRefusedWithIg001IsRetriedOnTheNewOwner() throws Exception {
        withRouter(b -> { }, (router, cluster) -> {
            synchronized (cluster) {
                cluster.oldShards.add("b");
            }
            cluster.change(ALL_ON_B, false);
            assertEquals("b", router.transaction(Key.gene(1), FakeCluster::shardOf));
            // On a: the BEGIN refused opens no transaction; the ROLLBACK after it is harmless.
            assertEquals(List.of(FakeCluster.PROBE, "/* id_gen.route_claim=1,1 */ BEGIN", "ROLLBACK",
                    FakeCluster.PROBE, "BEGIN; SELECT id_gen.route_claim(1, 2)", "COMMIT"), cluster.sent());
            assertEquals(1, router.stats().retriesMoved());
            assertEquals(2, router.version());
            assertEquals(0, cluster.discarded(), "the connection to a was pooled again");
            // IG002 on BEGIN: waited for and retried on the same shard, no probe again.
            cluster.change(ROUTES, false);
            router.refresh();
            synchronized (cluster) {
                cluster.fences = 2;
            }
            assertEquals("a", router.transaction(Key.gene(1), FakeCluster::shardOf));
            assertEquals(2, router.stats().retriesFenced());
            assertEquals(2, cluster.probes());
        });
    }

    @Test
    void nextIdPassesTheOwnerWithItsSqlTypeAndReturnsTheIdExact() throws Exception {
        withRouter(b -> { }, (router, cluster) -> {
            assertEquals(FakeCluster.NEXT_ID, router.nextId("orders", Key.owner(42L)));
            assertEquals(List.of("orders", 42L), cluster.lastParams);
            assertEquals("SELECT id_gen.gene_order_id(?::text, ?::bigint)", cluster.lastSql);
            router.nextId("orders", Key.owner("alice"));
            assertEquals("SELECT id_gen.gene_order_id(?::text, ?::text)", cluster.lastSql);
            UUID u = UUID.fromString("12345678-1234-5678-1234-567812345678");
            router.nextId("orders", Key.owner(u));
            assertEquals(List.of("orders", u), cluster.lastParams);
            assertEquals("SELECT id_gen.gene_order_id(?::text, ?::uuid)", cluster.lastSql);
            assertThrows(IllegalArgumentException.class, () -> router.nextId("orders", Key.id(5)));
            assertThrows(IllegalArgumentException.class, () -> router.nextId("orders", Key.owner(new byte[] {1})));
        });
    }

    @Test
    void lookupsByTheRoutesHeld() throws Exception {
        withRouter(b -> { }, (router, cluster) -> {
            assertEquals(1, router.version());
            assertEquals(List.of(new Route(0, 32767, "a"), new Route(32768, 65535, "b")), router.routes());
            assertEquals("a", router.shardForGene(32767));
            assertEquals("b", router.shardForGene(32768));
            assertEquals("a", router.shardForOwner(42L)); // gene 16043
            assertEquals("a", router.shardForOwner("alice")); // gene 13795
            assertEquals(router.geneOf(UUID.fromString("12345678-1234-5678-1234-567812345678")) <= 32767 ? "a" : "b",
                    router.shardForOwner(UUID.fromString("12345678-1234-5678-1234-567812345678")));
            assertEquals("b", router.shardForId(40000L << 47 | 12345));
            assertEquals("a", router.shardFor(Key.id(7)));
        });
    }

    @Test
    void aGeneRoutedToAShardWithoutAConnectionIsNoRoute() throws Exception {
        FakeCluster cluster = new FakeCluster(ROUTES);
        try (Router router = Router.builder().routes("coord").shard("a", "a").listen(false)
                .refreshInterval(Duration.ZERO).connector(cluster).build()) {
            assertThrows(NoRouteException.class, () -> router.transaction(Key.gene(40000), conn -> 1));
            assertThrows(NoRouteException.class, () -> router.shardForGene(40000));
            assertEquals(1, router.stats().refreshes() - 1, "looked again after one re-read");
            assertEquals(0, cluster.claims());
        }
    }

    @Test
    void aRouteChangeNotifiedIsReadAtOnce() throws Exception {
        withRouter(b -> b.listen(true), (router, cluster) -> {
            pollUntil("a listener", cluster::listeners, 1);
            cluster.change(ALL_ON_B, true);
            pollUntil("the routes after a NOTIFY", () -> router.shardForGene(1), "b");
            assertEquals(2, router.version());
        });
    }

    @Test
    void aRouteChangeNobodyNotifiedIsSeenByTheVersionPoll() throws Exception {
        withRouter(b -> b.refreshInterval(Duration.ofMillis(20)), (router, cluster) -> {
            cluster.change(ALL_ON_B, false);
            pollUntil("the routes after a change nobody notified", () -> router.shardForGene(1), "b");
            assertTrue(cluster.versionPolls > 0);
        });
    }

    @Test
    void whileListenFailsTheVersionPollKeepsItsInterval() throws Exception {
        withRouter(b -> b.listen(true).refreshInterval(Duration.ofMillis(50)), (router, cluster) -> {
            pollUntil("a listener", cluster::listeners, 1);
            synchronized (cluster) {
                cluster.listenFails = true; // (a pooler in front of the coordinator, say)
            }
            cluster.loseListeners();
            long attempts = cluster.listenAttempts();
            pollUntilAtLeast("a LISTEN that failed", cluster::listenAttempts, attempts + 1);
            // The listener now backs off (100 ms doubling to 5 s); the poll must not wait for it.
            cluster.change(ALL_ON_B, false);
            pollUntil("the routes after a change nobody notified", () -> router.shardForGene(1), "b");
            long polls = cluster.versionPolls();
            long failedListens = cluster.listenAttempts();
            pollUntilAtLeast("version polls after the change, at 50 ms while LISTEN fails",
                    () -> cluster.versionPolls() - polls, 20);
            long listensMeanwhile = cluster.listenAttempts() - failedListens;
            assertTrue(listensMeanwhile < 10, "LISTEN retried " + listensMeanwhile + " times during 20 polls: no backoff");
            assertEquals(0, cluster.listeners());
        });
    }

    @Test
    void aListenThatFailsAtTheStartDoesNotFailTheBuildThePollCoversAndTheListenerComesLater() throws Exception {
        FakeCluster cluster = new FakeCluster(ROUTES);
        cluster.listenFails = true; // (before build: a pooler in front of the coordinator, say)
        try (Router router = Router.builder().routes("coord").shard("a", "a").shard("b", "b").listen(true)
                .refreshInterval(Duration.ofMillis(20)).backoff(Duration.ofNanos(1000), Duration.ofNanos(10_000))
                .connector(cluster).build()) {
            assertTrue(cluster.listenAttempts() >= 1, "build() tried LISTEN");
            assertEquals(0, cluster.listeners());
            assertEquals(1, router.version());
            assertEquals("a", router.transaction(Key.gene(1), FakeCluster::shardOf));
            // Nobody listens: the change (notified or not) is seen by the version poll.
            cluster.change(ALL_ON_B, true);
            pollUntil("the routes after a change while LISTEN fails", () -> router.shardForGene(1), "b");
            assertEquals("b", router.transaction(Key.gene(1), FakeCluster::shardOf));
            long attempts = cluster.listenAttempts();
            pollUntilAtLeast("LISTEN retried in the background", cluster::listenAttempts, attempts + 1);
            assertEquals(0, cluster.listeners());
            synchronized (cluster) {
                cluster.listenFails = false;
            }
            pollUntil("a listener once LISTEN works", cluster::listeners, 1);
            assertEquals(0, cluster.outstanding(), "a pooled connection was kept");
            assertEquals(List.of(), cluster.problems());
        }
        assertEquals(0, cluster.openCoordinatorConnections(), "close() left a coordinator connection open");
    }

    @Test
    void closeStopsTheListenerRetriesWhileListenKeepsFailing() throws Exception {
        FakeCluster cluster = new FakeCluster(ROUTES);
        cluster.listenFails = true;
        Router router = Router.builder().routes("coord").shard("a", "a").listen(true).refreshInterval(Duration.ZERO)
                .connector(cluster).build();
        Thread watcher = router.watcherThread();
        assertTrue(watcher.isAlive(), "the routes' thread retries LISTEN even without a poll");
        long attempts = cluster.listenAttempts();
        pollUntilAtLeast("LISTEN retried in the background", cluster::listenAttempts, attempts + 1);
        router.close();
        assertFalse(watcher.isAlive(), "the routes' thread (the only one that retries LISTEN) ended within close()");
        assertEquals(0, cluster.openCoordinatorConnections());
        assertEquals(1, cluster.connectorCloses);
    }

    @Test
    void anErrorWrappedInAnUncheckedExceptionIsClassifiedByItsSqlState() throws Exception {
        withRouter(b -> b.retryLimit(2), (router, cluster) -> {
            // IG001 inside a RuntimeException (Spring's, jOOQ's DataAccessException): re-read, run again.
            int[] runs = {0};
            assertEquals("done", router.transaction(Key.gene(1), conn -> {
                if (++runs[0] == 1) {
                    throw new RuntimeException(new SQLException("moved", "IG001"));
                }
                return "done";
            }));
            assertEquals(2, runs[0]);
            assertEquals(1, router.stats().retriesMoved());
            // A lost connection's SQLState two causes deep: retried as lost.
            runs[0] = 0;
            router.transaction(Key.gene(1), conn -> {
                if (++runs[0] == 1) {
                    throw new IllegalStateException(new RuntimeException(new SQLException("gone", "08006")));
                }
                return null;
            });
            assertEquals(2, runs[0]);
            assertEquals(1, router.stats().retriesLost());
            // IG002 every time: exhausted, holding the last exception as it was thrown.
            RuntimeException[] last = {null};
            RouteRetryExhaustedException exhausted = assertThrows(RouteRetryExhaustedException.class,
                    () -> router.transaction(Key.gene(1), conn -> {
                        last[0] = new RuntimeException(new SQLException("fenced", "IG002"));
                        throw last[0];
                    }));
            assertSame(last[0], exhausted.getCause());
            assertSame(last[0].getCause(), exhausted.lastError());
            assertEquals("IG002", exhausted.getSQLState());
            assertEquals(2, router.stats().retriesFenced(), "3 attempts");
            // Not about routes: raised as it was thrown, not retried.
            runs[0] = 0;
            RuntimeException duplicate = new RuntimeException(new SQLException("duplicate key", "23505"));
            assertSame(duplicate, assertThrows(RuntimeException.class, () -> router.transaction(Key.gene(1), conn -> {
                runs[0]++;
                throw duplicate;
            })));
            assertEquals(1, runs[0]);
            // run(): an IG001 from the body reaches the caller as it was thrown.
            RuntimeException moved = new RuntimeException(new SQLException("moved", "IG001"));
            assertSame(moved, assertThrows(RuntimeException.class, () -> router.run(Key.gene(1), conn -> {
                throw moved;
            })));
            // A nested call's RouteRetryExhaustedException, wrapped: final, never retried.
            runs[0] = 0;
            RuntimeException nested = new RuntimeException(
                    new RouteRetryExhaustedException("nested", new SQLException("moved", "IG001")));
            assertSame(nested, assertThrows(RuntimeException.class, () -> router.transaction(Key.gene(1), conn -> {
                runs[0]++;
                throw nested;
            })));
            assertEquals(1, runs[0]);
            // Causes in a cycle, no SQLException: raised as it was thrown (the walk is bounded).
            RuntimeException a = new RuntimeException("a");
            RuntimeException b = new RuntimeException("b", a);
            a.initCause(b);
            assertSame(a, assertThrows(RuntimeException.class, () -> router.transaction(Key.gene(1), conn -> {
                throw a;
            })));
            assertEquals(1, router.stats().retriesMoved());
            assertEquals(1, router.stats().retriesLost());
        });
    }

    @Test
    void executeClassifiesAnErrorWrappedInAnUncheckedException() throws Exception {
        withRouter(b -> b.retryLimit(2), (router, cluster) -> {
            synchronized (cluster) {
                cluster.uncheckedErrors = true;
                cluster.fences = 1;
            }
            assertEquals(1, router.execute(Key.owner(1L), FakeCluster.READ, 1L).size());
            assertEquals(1, router.stats().retriesFenced());
            synchronized (cluster) {
                cluster.fences = 5;
            }
            RouteRetryExhaustedException exhausted = assertThrows(RouteRetryExhaustedException.class,
                    () -> router.execute(Key.owner(1L), FakeCluster.READ, 1L));
            assertTrue(exhausted.getCause() instanceof IllegalStateException, String.valueOf(exhausted.getCause()));
            assertSame(exhausted.getCause().getCause(), exhausted.lastError());
            assertEquals("IG002", exhausted.getSQLState());
            // A COMMIT lost, the driver's error wrapped: commit outcome unknown, holding it.
            synchronized (cluster) {
                cluster.fences = 0;
                cluster.commitLost = true;
            }
            CommitOutcomeUnknownException unknown = assertThrows(CommitOutcomeUnknownException.class,
                    () -> router.transaction(Key.gene(1), conn -> 1));
            assertTrue(unknown.getCause() instanceof IllegalStateException, String.valueOf(unknown.getCause()));
            assertEquals("08006", ((SQLException) unknown.getCause().getCause()).getSQLState());
        });
    }

    @Test
    void aListeningConnectionLostReconnectsAndReReadsTheRoutes() throws Exception {
        withRouter(b -> b.listen(true), (router, cluster) -> {
            pollUntil("a listener", cluster::listeners, 1);
            cluster.change(ALL_ON_B, false); // missed while it was away
            cluster.loseListeners();
            pollUntil("the routes after the listener came back", () -> router.shardForGene(1), "b");
            pollUntil("a listener again", cluster::listeners, 1);
        });
    }

    @Test
    void closeStopsTheRoutesThreadAndClosesEveryConnection() throws Exception {
        FakeCluster cluster = new FakeCluster(ROUTES);
        Router router = Router.builder().routes("coord").shard("a", "a").shard("b", "b").listen(true)
                .refreshInterval(Duration.ofMillis(10)).connector(cluster).build();
        Thread watcher = router.watcherThread();
        assertTrue(watcher.isAlive() && watcher.isDaemon());
        router.transaction(Key.gene(1), conn -> 1);
        router.close();
        router.close(); // (twice is fine)
        assertFalse(watcher.isAlive(), "the routes' thread ended within close()");
        assertEquals(0, cluster.openCoordinatorConnections());
        assertEquals(1, cluster.connectorCloses);
        assertThrows(IllegalStateException.class, () -> router.transaction(Key.gene(1), conn -> 1));
        assertThrows(IllegalStateException.class, router::refresh);
    }

    @Test
    void aFailedConnectIsRetriedAsLostAsPgjdbcOrHikariReportIt() throws Exception {
        // pgjdbc, when no host of a multi-host URL is the primary (targetServerType=primary:
        // one refused, one a standby during a failover), and HikariCP's timeout around the last
        // connect failure (its SQLState, or null with the failure as the cause).
        List<Supplier<SQLException>> failovers = List.of(
                () -> new PSQLException("Could not find a server with specified targetServerType: primary",
                        PSQLState.CONNECTION_UNABLE_TO_CONNECT),
                () -> new SQLTransientConnectionException("id-gen-client-a - Connection is not available, "
                        + "request timed out after 2000ms.", "08001", new PSQLException("Connection to 127.0.0.1:1 "
                        + "refused.", PSQLState.CONNECTION_UNABLE_TO_CONNECT, new ConnectException("Connection refused"))),
                () -> new SQLTransientConnectionException("id-gen-client-a - Connection is not available, "
                        + "request timed out after 2000ms.", null, new PSQLException("An I/O error occurred while "
                        + "sending to the backend.", PSQLState.CONNECTION_FAILURE)),
                () -> new SQLTransientConnectionException("timed out", null, new ConnectException("Connection refused")));
        for (Supplier<SQLException> failover : failovers) {
            withRouter(b -> b.retryLimit(3), (router, cluster) -> {
                synchronized (cluster) {
                    cluster.connectFailure = failover;
                    cluster.connectFails = 3;
                }
                assertEquals(1, (int) router.transaction(Key.gene(1), conn -> 1));
                assertEquals(3, router.stats().retriesLost(), failover.get().toString());
            });
        }
    }

    @Test
    void aPoolExhaustedOrALoginRefusedIsRaisedNotRetried() throws Exception {
        List<Supplier<SQLException>> notLost = List.of(
                () -> new SQLTransientConnectionException("id-gen-client-a - Connection is not available, "
                        + "request timed out after 2000ms."),
                () -> new SQLTransientConnectionException("id-gen-client-a - Connection is not available, "
                        + "request timed out after 2000ms.", "28P01", new PSQLException("password authentication "
                        + "failed for user \"u\"", PSQLState.INVALID_PASSWORD)));
        for (Supplier<SQLException> failure : notLost) {
            withRouter(b -> b.retryLimit(3), (router, cluster) -> {
                synchronized (cluster) {
                    cluster.connectFailure = failure;
                    cluster.connectFails = 1;
                }
                SQLException e = assertThrows(SQLException.class, () -> router.transaction(Key.gene(1), conn -> 1));
                assertEquals(failure.get().getMessage(), e.getMessage());
                assertEquals(0, router.stats().retriesLost());
            });
        }
    }

    @Test
    void theCoordinatorDownAtTheStartFailsTheBuildAndLeavesNothingOpen() {
        FakeCluster cluster = new FakeCluster(ROUTES);
        cluster.coordinatorDown = true;
        SQLException e = assertThrows(SQLException.class, () -> Router.builder().routes("coord").shard("a", "a")
                .connector(cluster).build());
        assertEquals("08001", e.getSQLState());
        assertEquals(0, cluster.openCoordinatorConnections());
        assertEquals(1, cluster.connectorCloses);
    }

    @Test
    void exhaustedHoldsTheLastErrorAndItsSqlState() throws Exception {
        withRouter(b -> b.retryLimit(2), (router, cluster) -> {
            synchronized (cluster) {
                cluster.fences = 5;
            }
            RouteRetryExhaustedException e = assertThrows(RouteRetryExhaustedException.class,
                    () -> router.transaction(Key.gene(1), conn -> 1));
            assertEquals("IG002", e.getSQLState());
            assertEquals("IG002", e.lastError().getSQLState());
            assertTrue(e.getMessage().contains("3 attempts"), e.getMessage());
        });
    }

    @Test
    void retryDecisionsAndBackoff() {
        assertTrue(Protocol.rereadsAfter(Protocol.RetryCause.MOVED, 0));
        assertEquals(List.of(false, false, true, false, false, true),
                Arrays.asList(Protocol.rereadsAfter(Protocol.RetryCause.FENCED, 0),
                        Protocol.rereadsAfter(Protocol.RetryCause.FENCED, 1),
                        Protocol.rereadsAfter(Protocol.RetryCause.FENCED, 2),
                        Protocol.rereadsAfter(Protocol.RetryCause.FENCED, 3),
                        Protocol.rereadsAfter(Protocol.RetryCause.FENCED, 4),
                        Protocol.rereadsAfter(Protocol.RetryCause.FENCED, 5)));
        assertFalse(Protocol.rereadsAfter(Protocol.RetryCause.LOST, 2), "never after a lost connection");
        long ms = 1_000_000;
        for (int attempt = 0; attempt < 100; attempt++) {
            long full = Math.min(5 * ms << Math.min(attempt, 20), 200 * ms);
            long wait = Protocol.backoffNanos(attempt, 5 * ms, 200 * ms);
            assertTrue(wait >= full / 2 && wait <= full, attempt + ": " + wait);
        }
        for (String lost : List.of("08000", "08001", "08003", "08006", "57P01", "57P02", "57P03")) {
            assertTrue(Protocol.connectionLostState(lost), lost);
        }
        for (String other : Arrays.asList(null, "57014", "40001", "IG001", "25P02")) {
            assertFalse(Protocol.connectionLostState(other), other);
        }
    }

    @Test
    void routeTables() {
        RouteTable t = new RouteTable(List.of(new Route(0, 99, "a"), new Route(200, 65535, "b")), 7);
        assertEquals("a", t.shardForGene(0));
        assertEquals("a", t.shardForGene(99));
        assertEquals(null, t.shardForGene(150), "a gap has no route");
        assertEquals("b", t.shardForGene(200));
        assertEquals("b", t.shardForGene(65535));
        assertThrows(IllegalArgumentException.class, () -> new RouteTable(List.of(new Route(5, 4, "a")), 1));
        assertThrows(IllegalArgumentException.class,
                () -> new RouteTable(List.of(new Route(0, 10, "a"), new Route(10, 20, "b")), 1));
        assertThrows(IllegalArgumentException.class, () -> new RouteTable(List.of(new Route(0, 65536, "a")), 1));
    }

    @Test
    void shardConnectionsDeclareNothingPerSessionAndEveryWaitIsBounded() {
        Properties given = new Properties();
        given.setProperty("user", "app");
        given.setProperty("socketTimeout", "5");
        Properties shard = JdbcConnector.shardProperties(given, 60);
        assertEquals("0", shard.getProperty("prepareThreshold"));
        assertEquals("10", shard.getProperty("assumeMinServerVersion"));
        assertEquals("5", shard.getProperty("socketTimeout"), "the caller's properties win");
        assertEquals("app", shard.getProperty("user"));
        assertEquals(null, shard.getProperty("options"), "no startup options (PgBouncer refuses them)");
        Properties coordinator = JdbcConnector.coordinatorProperties(new Properties());
        for (String bound : List.of("connectTimeout", "loginTimeout", "socketTimeout")) {
            assertEquals("10", coordinator.getProperty(bound), bound);
        }
    }

    @Test
    void theRealDriverAgainstAPortWhereNothingListensFailsTheBuildAtOnce() {
        long start = System.nanoTime();
        SQLException e = assertThrows(SQLException.class, () -> Router.builder()
                .routes("jdbc:postgresql://127.0.0.1:1/postgres").shard("a", "jdbc:postgresql://127.0.0.1:1/postgres")
                .user("postgres").build());
        assertTrue(e.getSQLState().startsWith("08"), e.getSQLState() + " " + e);
        assertTrue(System.nanoTime() - start < Duration.ofSeconds(15).toNanos(), "bounded by connectTimeout");
    }
}
