// The protocol scenarios shared by every client (clients/protocol-scenarios.json), run against
// the fake driver of FakeCluster: the same expectations as the Node.js, Python and Rust
// clients' fake tests. Each scenario is two dynamic tests named as in the file: with shards of
// routing protocol 2 (claims on BEGIN), and with shards older than 0.7.16 (the claim statement).
//
// Invariants checked after each: the outcome and every counter the scenario names, exactly;
// no pooled connection kept, none pooled inside a transaction block; after close(), no
// coordinator connection left open.
package org.idgen.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.sql.SQLException;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;

class ScenariosTest {
    /** The fields a scenario may have: a new one fails here until this runner knows it. */
    private static final Set<String> FIELDS = Set.of("name", "routes", "routes_change_unseen", "coordinator_down",
            "fenced", "body_errors", "key", "call", "retry_limit", "connect_fails", "claim_lost", "commit_lost",
            "expect");

    @TestFactory
    Stream<DynamicTest> everyScenario() throws Exception {
        List<Object> scenarios = Json.array(Json.object(Json.readClientsFile("protocol-scenarios.json")).get("scenarios"));
        assertTrue(scenarios.size() >= 24, "the scenario file lost its scenarios: " + scenarios.size());
        return scenarios.stream().map(Json::object).flatMap(sc -> Stream.of(
                DynamicTest.dynamicTest((String) sc.get("name"), () -> run(sc, false)),
                DynamicTest.dynamicTest(sc.get("name") + " [shards before 0.7.16]", () -> run(sc, true))));
    }

    private static void run(Map<String, Object> sc, boolean oldShards) throws Exception {
        assertTrue(FIELDS.containsAll(sc.keySet()), "unknown fields in " + sc.keySet());
        FakeCluster cluster = new FakeCluster(FakeCluster.routesOf(sc.get("routes")));
        if (oldShards) {
            cluster.oldShards.addAll(List.of("a", "b"));
        }
        Map<String, Object> expect = Json.object(sc.get("expect"));
        Map<String, Object> got = new LinkedHashMap<>();
        AtomicLong bodyRuns = new AtomicLong();
        try (Router router = Router.builder().routes("coord").shard("a", "a").shard("b", "b")
                .retryLimit(((Long) sc.getOrDefault("retry_limit", 20L)).intValue())
                .backoff(Duration.ofNanos(1000), Duration.ofNanos(10_000)).listen(false)
                .refreshInterval(Duration.ZERO).connector(cluster).build()) {
            Map<String, Object> keyJson = Json.object(sc.get("key"));
            long owner = 0;
            Key key;
            if (keyJson.containsKey("gene")) {
                key = Key.gene(((Long) keyJson.get("gene")).intValue());
            } else {
                while (!keyJson.get("owner_on").equals(cluster.ownerOf(Genes.geneOf(owner)))) {
                    owner++;
                }
                key = Key.owner(owner);
            }
            if (sc.containsKey("routes_change_unseen")) {
                cluster.change(FakeCluster.routesOf(sc.get("routes_change_unseen")), false);
            }
            synchronized (cluster) {
                cluster.coordinatorDown = Boolean.TRUE.equals(sc.get("coordinator_down"));
                cluster.fences = ((Long) sc.getOrDefault("fenced", 0L)).intValue();
                cluster.connectFails = ((Long) sc.getOrDefault("connect_fails", 0L)).intValue();
                cluster.claimLost = ((Long) sc.getOrDefault("claim_lost", 0L)).intValue();
                cluster.commitLost = Boolean.TRUE.equals(sc.get("commit_lost"));
            }
            List<Object> bodyErrors = sc.containsKey("body_errors") ? Json.array(sc.get("body_errors")) : List.of();
            Body<String> body = conn -> {
                long n = bodyRuns.incrementAndGet();
                if (n <= bodyErrors.size()) {
                    String code = (String) bodyErrors.get((int) n - 1);
                    throw new SQLException("fake " + code, code);
                }
                return FakeCluster.shardOf(conn);
            };
            try {
                String shard;
                switch ((String) sc.get("call")) {
                    case "transaction":
                        shard = router.transaction(key, body);
                        break;
                    case "run":
                        shard = router.run(key, body);
                        break;
                    case "execute":
                        List<Object[]> rows = router.execute(key, FakeCluster.READ, owner);
                        assertEquals(1, rows.size(), "execute's rows");
                        assertEquals(7, rows.get(0)[0], "execute's row");
                        synchronized (cluster) {
                            shard = cluster.lastReadShard;
                        }
                        break;
                    default:
                        throw new AssertionError("unknown call " + sc.get("call"));
                }
                got.put("outcome", "committed");
                got.put("shard", shard);
            } catch (RouteRetryExhaustedException e) {
                got.put("outcome", "exhausted");
                got.put("last_code", e.lastError().getSQLState());
                assertEquals(e.lastError().getSQLState(), e.getSQLState(), "exhausted carries the last SQLState");
            } catch (NoRouteException e) {
                got.put("outcome", "no_route");
            } catch (CommitOutcomeUnknownException e) {
                got.put("outcome", "commit_unknown");
                SQLException cause = assertInstanceOf(SQLException.class, e.getCause());
                assertTrue(cause.getSQLState().startsWith("08"), "the driver's error is the cause: " + cause);
            } catch (RoutingException e) {
                throw new AssertionError("a routing error the scenarios do not name", e);
            } catch (SQLException e) {
                got.put("outcome", "error");
                got.put("last_code", e.getSQLState());
            }
            got.put("body_runs", bodyRuns.get());
            got.putAll(FakeCluster.counters(router, cluster));
            Map<String, Object> picked = new LinkedHashMap<>();
            for (String k : expect.keySet()) {
                picked.put(k, got.get(k));
            }
            assertEquals(expect, picked, (String) sc.get("name"));
            assertEquals(oldShards ? 0 : cluster.claims(), cluster.claimsOnBegin(), "every claim in the shards' form");
            assertEquals(0, cluster.outstanding(), "a pooled connection was kept");
            assertEquals(List.of(), cluster.problems());
        }
        assertEquals(0, cluster.openCoordinatorConnections(), "close() left a coordinator connection open");
        assertEquals(1, cluster.connectorCloses, "close() closed the pools");
    }
}
