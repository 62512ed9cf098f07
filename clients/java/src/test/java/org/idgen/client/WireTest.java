// The production path — Router on JdbcConnector, pgjdbc and HikariCP — against WireServer, a
// minimal PostgreSQL server: what pgjdbc really sends (the routing protocol probe once; the
// claim on BEGIN to a shard of 0.7.16, the claim statement and BEGIN in one round trip to an
// older one; execute's declaration and statement in one; nothing declared per session), how
// its errors come back (IG001 from BEGIN or the claim statement, FATAL 57P01, a COMMIT with
// no answer, a failed transaction block), and LISTEN/NOTIFY through getNotifications.
//
// Invariant: no fixed sleeps; pollUntil polls with a deadline and fails with the last value.
package org.idgen.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.Callable;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Consumer;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

class WireTest {
    private static final Pattern CLAIM_STATEMENT = Pattern.compile("SELECT id_gen\\.route_claim\\((\\d+), (\\d+)\\)");
    private static final Pattern CLAIM_ON_BEGIN = Pattern.compile("/\\* id_gen\\.route_claim=(\\d+),(\\d+) \\*/ BEGIN");
    private static final String READ_WIRE = "SELECT amount FROM orders WHERE owner_id = $1"; // (pgjdbc's ? as $1)
    private static final String DECLARED = "/* id_gen.route_version=1 */ ";

    private final AtomicReference<List<Object[]>> uppers = new AtomicReference<>(
            List.of(new Object[] {32767, "a"}, new Object[] {65535, "b"}));
    private final AtomicLong version = new AtomicLong(1);
    private final AtomicInteger claimFatal = new AtomicInteger();
    private final AtomicBoolean commitVanishes = new AtomicBoolean();
    private final AtomicBoolean commitSilent = new AtomicBoolean();
    private final AtomicInteger claimSilent = new AtomicInteger();
    private final AtomicInteger bodyVanishes = new AtomicInteger();
    private final Set<String> oldShards = ConcurrentHashMap.newKeySet(); // before 0.7.16
    private WireServer coordinator;
    private WireServer shardA;
    private WireServer shardB;

    @BeforeEach
    void start() throws Exception {
        coordinator = new WireServer((session, sql, params) -> coordinatorAnswer(sql));
        shardA = new WireServer((session, sql, params) -> shardAnswer("a", sql, params));
        shardB = new WireServer((session, sql, params) -> shardAnswer("b", sql, params));
    }

    @AfterEach
    void stop() throws Exception {
        coordinator.close();
        shardA.close();
        shardB.close();
    }

    private WireServer.Reply coordinatorAnswer(String sql) {
        if (sql.equals(Protocol.ROUTES_SQL)) {
            List<List<Object>> rows = new ArrayList<>();
            long lower = 0;
            for (Object[] r : uppers.get()) {
                rows.add(List.of(lower, (long) (Integer) r[0], r[1], version.get()));
                lower = (Integer) r[0] + 1;
            }
            return WireServer.Reply.rows(List.of("lower_gene", "upper_gene", "shard", "version"), rows);
        }
        if (sql.equals(Protocol.ROUTE_VERSION_SQL)) {
            return WireServer.Reply.row("version", version.get());
        }
        return null;
    }

    private String ownerOf(int gene) {
        for (Object[] r : uppers.get()) {
            if (gene <= (Integer) r[0]) {
                return (String) r[1];
            }
        }
        return null;
    }

    private WireServer.Reply shardAnswer(String shard, String sql, List<String> params) {
        if (sql.equals("COMMIT") && commitVanishes.compareAndSet(true, false)) {
            return WireServer.Reply.vanish();
        }
        if (sql.equals("COMMIT") && commitSilent.compareAndSet(true, false)) {
            return WireServer.Reply.silence();
        }
        if (sql.equals("BEGIN") || sql.equals("COMMIT") || sql.equals("ROLLBACK")) {
            return null;
        }
        if (sql.equals(FakeCluster.PROBE)) {
            return WireServer.Reply.row("current_setting", oldShards.contains(shard) ? null : "2");
        }
        Matcher onBegin = CLAIM_ON_BEGIN.matcher(sql);
        if (onBegin.matches()) {
            return oldShards.contains(shard) ? WireServer.Reply.command("BEGIN") // (the comment ignored)
                    : claim(shard, onBegin, WireServer.Reply.command("BEGIN"));
        }
        Matcher statement = CLAIM_STATEMENT.matcher(sql);
        if (statement.matches()) {
            return claim(shard, statement, WireServer.Reply.row("route_claim", version.get()));
        }
        if (sql.equals(READ_WIRE) || sql.equals(DECLARED + READ_WIRE)) {
            return WireServer.Reply.row("amount", 7L);
        }
        if (sql.equals("SELECT 1")) {
            return bodyVanishes.getAndUpdate(n -> Math.max(0, n - 1)) > 0
                    ? WireServer.Reply.vanish() : WireServer.Reply.row("?column?", 1L);
        }
        if (sql.equals("SELECT fail")) {
            return WireServer.Reply.error("22012");
        }
        if (sql.startsWith("SELECT id_gen.gene_order_id(")) {
            return WireServer.Reply.row("gene_order_id", FakeCluster.NEXT_ID);
        }
        return null;
    }

    /** A claim of either form (gene and version its groups 1 and 2): granted, or its error. */
    private WireServer.Reply claim(String shard, Matcher claimed, WireServer.Reply granted) {
        if (claimFatal.getAndUpdate(n -> Math.max(0, n - 1)) > 0) {
            return WireServer.Reply.fatal("57P01");
        }
        if (claimSilent.getAndUpdate(n -> Math.max(0, n - 1)) > 0) {
            return WireServer.Reply.silence();
        }
        boolean owns = shard.equals(ownerOf(Integer.parseInt(claimed.group(1))));
        return owns && Long.parseLong(claimed.group(2)) >= version.get() ? granted : WireServer.Reply.error("IG001");
    }

    private Router router(Consumer<Router.Builder> settings) throws SQLException {
        Router.Builder b = Router.builder().routes(coordinator.url()).shard("a", shardA.url())
                .shard("b", shardB.url()).user("postgres").listen(false).refreshInterval(Duration.ZERO)
                .backoff(Duration.ofNanos(1000), Duration.ofNanos(10_000)).connectionTimeout(Duration.ofSeconds(2))
                .socketTimeout(Duration.ofSeconds(5));
        settings.accept(b);
        return b.build();
    }

    private static Integer selectOne(java.sql.Connection conn) throws SQLException {
        try (Statement st = conn.createStatement()) {
            st.execute("SELECT 1");
            return 1;
        }
    }

    /** The round trips of a node's connections that hold one of the statements. */
    private static List<List<String>> tripsWith(WireServer node, String fragment) {
        List<List<String>> trips = new ArrayList<>();
        for (WireServer.RoundTrip t : node.roundTrips()) {
            if (t.statements.stream().anyMatch(s -> s.contains(fragment))) {
                trips.add(t.statements);
            }
        }
        return trips;
    }

    private static <T> void pollUntil(String what, Callable<T> value, T want) throws Exception {
        long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
        T last = value.call();
        while (!Objects.equals(last, want)) {
            if (System.nanoTime() - deadline > 0) {
                throw new AssertionError(what + ": still " + last + " after 10 s (want " + want + ")");
            }
            Thread.sleep(5);
            last = value.call();
        }
    }

    @Test
    void theClaimGoesOnBeginAndNothingIsDeclaredPerSession() throws Exception {
        try (Router router = router(b -> { })) {
            assertEquals(1, router.transaction(Key.gene(1), WireTest::selectOne));
            List<Object[]> rows = router.execute(Key.gene(2), FakeCluster.READ, 42L);
            assertEquals(1, rows.size());
            assertEquals(7L, rows.get(0)[0]);
            assertEquals(FakeCluster.NEXT_ID, router.nextId("orders", Key.owner(42L)));
        }
        assertEquals(List.of(List.of(FakeCluster.PROBE)), tripsWith(shardA, "routing_protocol"), "probed once");
        assertEquals(List.of(List.of("/* id_gen.route_claim=1,1 */ BEGIN")), tripsWith(shardA, "route_claim=1,"));
        assertEquals(List.of(List.of(DECLARED + READ_WIRE)),
                tripsWith(shardA, "route_version="), "execute: the statement alone, the version in its leading comment");
        assertEquals(List.of(List.of("SELECT 1")), tripsWith(shardA, "SELECT 1"));
        assertEquals(2, tripsWith(shardA, "COMMIT").size());
        for (WireServer.RoundTrip t : shardA.roundTrips()) {
            for (String s : t.statements) {
                assertFalse(s.toUpperCase().startsWith("SET "), "a session SET on a shard: " + s);
            }
            if (t.statements.contains(READ_WIRE)) {
                assertEquals(List.of("42"), t.params.get(1));
            }
        }
        for (WireServer.Session s : shardA.sessions()) {
            assertFalse(s.startup.containsKey("options"), "no startup options (PgBouncer refuses them)");
        }
    }

    @Test
    void ig001AtTheClaimRollsBackReReadsAndGoesToTheNewOwner() throws Exception {
        try (Router router = router(b -> { })) {
            uppers.set(List.<Object[]>of(new Object[] {65535, "b"}));
            version.set(2);
            assertEquals(1, router.transaction(Key.gene(1), WireTest::selectOne));
            assertEquals(1, router.stats().retriesMoved());
            assertEquals(2, router.version());
        }
        // On a: the BEGIN refused (no transaction open), then a ROLLBACK that draws a warning only.
        List<String> sentToA = new ArrayList<>();
        shardA.roundTrips().forEach(t -> sentToA.addAll(t.statements));
        assertEquals(List.of(FakeCluster.PROBE, "/* id_gen.route_claim=1,1 */ BEGIN", "ROLLBACK"),
                sentToA.subList(sentToA.indexOf(FakeCluster.PROBE), sentToA.size()), "after Hikari's checks: " + sentToA);
        assertEquals(List.of(List.of("/* id_gen.route_claim=1,2 */ BEGIN")), tripsWith(shardB, "route_claim"));
        assertEquals(1, tripsWith(shardB, "routing_protocol").size());
    }

    @Test
    void aShardBefore0716GetsTheClaimStatementWithBeginInOneRoundTrip() throws Exception {
        oldShards.add("a");
        try (Router router = router(b -> { })) {
            assertEquals(1, router.transaction(Key.gene(1), WireTest::selectOne));
            assertEquals(1, router.transaction(Key.gene(1), WireTest::selectOne));
            // Moved to b (of 0.7.16): IG001 from the claim statement in a's block, rolled back.
            uppers.set(List.<Object[]>of(new Object[] {65535, "b"}));
            version.set(2);
            assertEquals(1, router.transaction(Key.gene(1), WireTest::selectOne));
            assertEquals(1, router.stats().retriesMoved());
        }
        assertEquals(List.of(List.of(FakeCluster.PROBE)), tripsWith(shardA, "routing_protocol"), "probed once");
        assertEquals(List.of(List.of("BEGIN", "SELECT id_gen.route_claim(1, 1)"),
                List.of("BEGIN", "SELECT id_gen.route_claim(1, 1)"), List.of("BEGIN", "SELECT id_gen.route_claim(1, 1)")),
                tripsWith(shardA, "route_claim"));
        assertEquals(List.of(List.of("/* id_gen.route_claim=1,2 */ BEGIN")), tripsWith(shardB, "route_claim"));
    }

    @Test
    void aCommitWithNoAnswerIsCommitOutcomeUnknownAndTheConnectionIsDiscarded() throws Exception {
        try (Router router = router(b -> { })) {
            commitVanishes.set(true);
            CommitOutcomeUnknownException e = assertThrows(CommitOutcomeUnknownException.class,
                    () -> router.transaction(Key.gene(1), WireTest::selectOne));
            assertTrue(((SQLException) e.getCause()).getSQLState().startsWith("08"), e.getCause().toString());
            assertEquals(1, tripsWith(shardA, "route_claim").size(), "never retried");
            assertEquals(1, router.transaction(Key.gene(1), WireTest::selectOne), "the next one, on a new connection");
            assertEquals(1, router.stats().transactions());
        }
    }

    @Test
    void aShardSilentPastSocketTimeoutAtTheClaimIsRetriedAndAtCommitIsCommitOutcomeUnknown() throws Exception {
        try (Router router = router(b -> b.socketTimeout(Duration.ofSeconds(1)))) {
            claimSilent.set(1);
            assertEquals(1, router.transaction(Key.gene(1), WireTest::selectOne));
            assertEquals(1, router.stats().retriesLost(), "the silent claim: a lost connection, retried");
            commitSilent.set(true);
            CommitOutcomeUnknownException e = assertThrows(CommitOutcomeUnknownException.class,
                    () -> router.transaction(Key.gene(1), WireTest::selectOne));
            assertTrue(Protocol.causedBy(e, java.net.SocketTimeoutException.class), e.toString());
            assertEquals(1, router.stats().retriesLost(), "never retried");
            assertEquals(1, router.transaction(Key.gene(1), WireTest::selectOne), "the next one, on a new connection");
        }
    }

    @Test
    void aFatalAtTheClaimIsRetriedOnANewConnection() throws Exception {
        try (Router router = router(b -> { })) {
            claimFatal.set(1);
            assertEquals(1, router.transaction(Key.gene(1), WireTest::selectOne));
            assertEquals(1, router.stats().retriesLost());
            assertEquals(2, tripsWith(shardA, "route_claim").size());
            assertEquals(2, tripsWith(shardA, "routing_protocol").size(), "probed again on the new connection");
        }
    }

    @Test
    void aConnectionLostUnderTheBodyRunsTheBodyAgainInTransactionAndReachesTheCallerInRun() throws Exception {
        try (Router router = router(b -> { })) {
            bodyVanishes.set(1);
            assertEquals(1, router.transaction(Key.gene(1), WireTest::selectOne));
            assertEquals(1, router.stats().retriesLost());
            bodyVanishes.set(1);
            SQLException e = assertThrows(SQLException.class, () -> router.run(Key.gene(1), WireTest::selectOne));
            assertTrue(e.getSQLState().startsWith("08"), e.toString());
            assertEquals(1, router.stats().retriesLost());
        }
    }

    @Test
    void aBodyThatSwallowedAnErrorIsRolledBackNeverSentCommit() throws Exception {
        try (Router router = router(b -> { })) {
            SQLException e = assertThrows(SQLException.class, () -> router.transaction(Key.gene(1), conn -> {
                try (Statement st = conn.createStatement()) {
                    st.execute("SELECT fail");
                } catch (SQLException swallowed) {
                    // (goes on as if nothing happened)
                }
                return 1;
            }));
            assertEquals("25P02", e.getSQLState());
        }
        List<String> sent = new ArrayList<>();
        shardA.roundTrips().forEach(t -> sent.addAll(t.statements));
        assertFalse(sent.contains("COMMIT"), sent.toString());
        assertTrue(sent.contains("ROLLBACK"), sent.toString());
    }

    @Test
    void notificationsArriveThroughGetNotificationsAndALostListenerReconnects() throws Exception {
        try (Router router = router(b -> b.listen(true))) {
            pollUntil("a listener", () -> coordinator.sessions().stream()
                    .filter(s -> !s.listening.isEmpty() && !s.socket.isClosed()).count(), 1L);
            uppers.set(List.<Object[]>of(new Object[] {65535, "b"}));
            version.set(2);
            coordinator.notifyListeners(Protocol.ROUTES_CHANNEL, "2");
            pollUntil("the routes after a NOTIFY", () -> router.shardForGene(1), "b");
            uppers.set(List.<Object[]>of(new Object[] {65535, "a"}));
            version.set(3); // (nobody notified: missed while the listener is away)
            coordinator.dropListeners();
            pollUntil("the routes after the listener came back", () -> router.shardForGene(1), "a");
        }
    }
}
