//! Router behaviour against a fake coordinator and fake shards (tests/fake_pg): routing,
//! the probe of a shard's routing protocol and the claim in the form it takes, IG001/IG002
//! retries, rollbacks, LISTEN/NOTIFY reloads, listener reconnects, cancellation and
//! `next_id` — all without a PostgreSQL server.
//!
//! Invariant checked throughout: every transaction the router opens on a shard ends with
//! exactly one COMMIT or ROLLBACK there, or with the connection closed.

mod fake_pg;

use fake_pg::Fake;
use id_gen_client::tokio_postgres::types::Type;
use id_gen_client::tokio_postgres::Client;
use id_gen_client::{Error, Key, Router, RouterConfig, ROUTE_CHANGED, ROUTE_FENCED};
use std::time::Duration;

const G42: u16 = 16043; // gene of bigint owner 42
/// The probe of a shard's routing protocol, as the shards log it.
const PROBE: &str = "SELECT pg_catalog.current_setting('id_gen.routing_protocol', true)";
/// What the router sends to stall at the claim (on BEGIN, the fake shards' default form).
const CLAIM_ON_BEGIN: &str = "/* id_gen.route_claim=";

/// The claim on BEGIN (routing protocol 2) as `shard` logs it.
fn claim_on_begin(shard: &str, gene: u16, version: i64) -> String {
    format!("{shard}: /* id_gen.route_claim={gene},{version} */ BEGIN")
}

/// The claim's statement as `shard` logs it (after its own `BEGIN`): a shard before 0.7.16.
fn claim_statement(shard: &str, gene: u16, version: i64) -> String {
    format!("{shard}: SELECT id_gen.route_claim({gene}, {version})")
}

/// Claims `shard` received, in either form.
fn claims(fake: &Fake, shard: &str) -> usize {
    fake.with(|s| {
        s.count(&format!("{shard}: {CLAIM_ON_BEGIN}"))
            + s.count(&format!("{shard}: SELECT id_gen.route_claim("))
    })
}

/// Probes `shard` received.
fn probes(fake: &Fake, shard: &str) -> usize {
    fake.with(|s| s.count(&format!("{shard}: {PROBE}")))
}

/// What `shard` logged, in order.
fn log_of(fake: &Fake, shard: &str) -> Vec<String> {
    let prefix = format!("{shard}: ");
    fake.log()
        .into_iter()
        .filter(|l| l.starts_with(&prefix))
        .collect()
}

fn config(fake: &Fake) -> RouterConfig {
    let mut c = RouterConfig::new(fake.coordinator_dsn.clone(), fake.shard_dsns.clone());
    c.backoff_base = Duration::from_millis(1);
    c.backoff_max = Duration::from_millis(4);
    c.pool_size = 2;
    c.refresh_interval = Duration::ZERO; // (a poll would see the changes tests make unnoticed)
    c
}

async fn two_shards() -> Fake {
    Fake::start(
        &["s1", "s2"],
        vec![(0, 32767, "s1"), (32768, 65535, "s2")],
        5,
    )
    .await
}

async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..500 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

async fn echo(router: &Router, key: Key, v: i64) -> Result<i64, Error> {
    router
        .transaction(key, |c: &Client| {
            Box::pin(async move {
                c.query_typed_one("SELECT fake.echo($1)", &[(&v, Type::INT8)])
                    .await?
                    .try_get(0)
            })
        })
        .await
}

#[tokio::test]
async fn connects_reads_routes_and_routes_keys() {
    let fake = two_shards().await;
    let router = Router::connect(config(&fake)).await.unwrap();
    assert_eq!(router.version(), 5);
    assert_eq!(
        router.routes(),
        vec![
            (0, 32767, "s1".to_string()),
            (32768, 65535, "s2".to_string())
        ]
    );
    assert_eq!(router.shard_for(Key::Owner(42)).unwrap(), "s1"); // gene 16043
    let zero = Key::Owner(0);
    assert_eq!(router.shard_for(&zero).unwrap(), "s2"); // gene 55408
    assert_eq!(router.shard_for(Key::Id((55408 << 47) | 1)).unwrap(), "s2");
    assert!(matches!(
        router.shard_for(Key::Id(-3)),
        Err(Error::InvalidKey(_))
    ));
    // LISTEN came before the first route read.
    let log = fake.log();
    let listen = log
        .iter()
        .position(|l| l == "coordinator: LISTEN id_gen_routes")
        .unwrap();
    let read = log
        .iter()
        .position(|l| l.contains("FROM id_gen.route_map"))
        .unwrap();
    assert!(listen < read, "{log:?}");
    assert_eq!(router.stats().refreshes, 1);
}

#[tokio::test]
async fn a_transaction_claims_runs_the_body_and_commits() {
    let fake = two_shards().await;
    let router = Router::connect(config(&fake)).await.unwrap();
    assert_eq!(echo(&router, Key::Owner(42), 7).await.unwrap(), 7);
    assert_eq!(
        log_of(&fake, "s1"),
        vec![
            format!("s1: {PROBE}"),
            claim_on_begin("s1", G42, 5),
            "s1: SELECT fake.echo($1)".to_string(),
            "s1: SAVEPOINT id_gen_commit".to_string(),
            "s1: COMMIT".to_string()
        ]
    );
    assert_eq!(router.stats().transactions, 1);
    // The connection went back to the pool and is reused.
    echo(&router, Key::Owner(42), 8).await.unwrap();
    assert_eq!(fake.with(|s| s.opened["s1"]), 1);
}

#[tokio::test]
async fn the_body_may_borrow_the_callers_environment() {
    let fake = two_shards().await;
    let router = Router::connect(config(&fake)).await.unwrap();
    let values = vec![11i64, 12];
    let values = &values;
    let sql = String::from("SELECT fake.echo($1)");
    let sql = sql.as_str();
    let got: Vec<i64> = router
        .transaction(Key::Gene(1), |c| {
            Box::pin(async move {
                let mut out = Vec::new();
                for v in values {
                    out.push(
                        c.query_typed_one(sql, &[(v, Type::INT8)])
                            .await?
                            .try_get(0)?,
                    );
                }
                Ok(out)
            })
        })
        .await
        .unwrap();
    assert_eq!(got, vec![11, 12]);
}

#[tokio::test]
async fn a_moved_route_is_reread_and_the_transaction_retried_on_the_new_owner() {
    let fake = two_shards().await;
    let router = Router::connect(config(&fake)).await.unwrap();
    // The genes of owner 42 move to s2; the router is not told (no NOTIFY).
    fake.set_routes(vec![(0, 16000, "s1"), (16001, 65535, "s2")], false);
    assert_eq!(router.version(), 5);
    assert_eq!(echo(&router, Key::Owner(42), 1).await.unwrap(), 1);
    assert_eq!(router.version(), 6);
    let stats = router.stats();
    assert_eq!(
        (
            stats.retries_moved,
            stats.retries_fenced,
            stats.transactions
        ),
        (1, 0, 1)
    );
    // The claim refused on BEGIN left no transaction open: the ROLLBACK after it only warns.
    // The body never ran on s1.
    assert_eq!(
        log_of(&fake, "s1"),
        vec![
            format!("s1: {PROBE}"),
            claim_on_begin("s1", G42, 5),
            "s1: ROLLBACK".to_string()
        ]
    );
    assert_eq!(
        log_of(&fake, "s2"),
        vec![
            format!("s2: {PROBE}"),
            claim_on_begin("s2", G42, 6),
            "s2: SELECT fake.echo($1)".to_string(),
            "s2: SAVEPOINT id_gen_commit".to_string(),
            "s2: COMMIT".to_string()
        ]
    );
    // The connection the refused claim left is idle, and serves the next transaction.
    fake.set_routes(vec![(0, 32767, "s1"), (32768, 65535, "s2")], true);
    wait_for("the reload", || router.version() == 7).await;
    echo(&router, Key::Owner(42), 2).await.unwrap();
    assert_eq!(fake.with(|s| s.opened("s1")), 1);
}

#[tokio::test]
async fn a_new_shard_is_probed_once_and_takes_the_claim_on_begin() {
    let fake = two_shards().await;
    let router = Router::connect(config(&fake)).await.unwrap();
    for v in 0..5 {
        assert_eq!(echo(&router, Key::Owner(42), v).await.unwrap(), v);
    }
    // execute claims nothing: no probe for it either.
    let rows = router
        .execute(
            Key::Owner(0),
            "SELECT fake.read($1)",
            &[(&0i64, Type::INT8)],
        )
        .await
        .unwrap();
    assert_eq!(rows[0].get::<_, String>(0), "s2");
    assert_eq!((probes(&fake, "s1"), probes(&fake, "s2")), (1, 0));
    assert_eq!(
        fake.with(|s| s.count(&claim_on_begin("s1", G42, 5))),
        5,
        "{:?}",
        fake.log()
    );
    assert_eq!(claims(&fake, "s1"), 5);
    assert_eq!(router.stats().transactions, 6);
}

#[tokio::test]
async fn an_old_shard_gets_the_claim_as_a_statement() {
    let fake = two_shards().await;
    // s1 before 0.7.16 (no setting), s2 set to the function form.
    fake.with(|s| {
        s.routing_protocol.insert("s1".into(), None);
        s.routing_protocol.insert("s2".into(), Some("1".into()));
    });
    let router = Router::connect(config(&fake)).await.unwrap();
    for v in 0..3 {
        assert_eq!(echo(&router, Key::Owner(42), v).await.unwrap(), v);
        assert_eq!(echo(&router, Key::Owner(0), v).await.unwrap(), v);
    }
    assert_eq!(
        log_of(&fake, "s1")[..4],
        [
            format!("s1: {PROBE}"),
            "s1: BEGIN".to_string(),
            claim_statement("s1", G42, 5),
            "s1: SELECT fake.echo($1)".to_string(),
        ]
    );
    assert_eq!((probes(&fake, "s1"), probes(&fake, "s2")), (1, 1));
    assert_eq!(fake.with(|s| s.count(&claim_statement("s1", G42, 5))), 3);
    assert_eq!(fake.with(|s| s.count(&claim_statement("s2", 55408, 5))), 3);
    assert_eq!(fake.with(|s| s.count(CLAIM_ON_BEGIN)), 0);
    // A claim refused by an old shard is retried there too, and rolled back.
    fake.with(|s| s.fenced.insert(G42, 1));
    echo(&router, Key::Owner(42), 1).await.unwrap();
    assert_eq!(router.stats().retries_fenced, 1);
    assert_eq!(fake.with(|s| s.count("s1: ROLLBACK")), 1);
}

#[tokio::test]
async fn a_lost_connection_makes_the_shard_probed_again() {
    let fake = two_shards().await;
    let router = Router::connect(config(&fake)).await.unwrap();
    echo(&router, Key::Owner(42), 1).await.unwrap();
    // The claim on BEGIN finds the connection lost: retried, after a probe on the new one.
    fake.with(|s| s.claim_lost = 1);
    echo(&router, Key::Owner(42), 2).await.unwrap();
    assert_eq!((router.stats().retries_lost, probes(&fake, "s1")), (1, 2));
    echo(&router, Key::Owner(42), 3).await.unwrap();
    assert_eq!(probes(&fake, "s1"), 2);
    // A restart closes the idle connection: the pool finds it closed and drops it.
    fake.restart_shards();
    wait_for("the idle connection to close", || {
        fake.with(|s| s.closed("s1") == s.opened("s1"))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await; // (for the client to see it closed)
    echo(&router, Key::Owner(42), 4).await.unwrap();
    assert_eq!((router.stats().retries_lost, probes(&fake, "s1")), (1, 3));
    let log = log_of(&fake, "s1");
    assert_eq!(
        log[log.len() - 5..],
        [
            format!("s1: {PROBE}"),
            claim_on_begin("s1", G42, 5),
            "s1: SELECT fake.echo($1)".to_string(),
            "s1: SAVEPOINT id_gen_commit".to_string(),
            "s1: COMMIT".to_string()
        ]
    );
}

#[tokio::test]
async fn a_probe_that_fails() {
    // The connection lost at the probe: retried as a claim that found it lost.
    let fake = two_shards().await;
    let router = Router::connect(config(&fake)).await.unwrap();
    fake.with(|s| s.probe_lost = 1);
    assert_eq!(echo(&router, Key::Owner(42), 1).await.unwrap(), 1);
    assert_eq!((router.stats().retries_lost, probes(&fake, "s1")), (1, 2));
    assert_eq!(fake.with(|s| s.count(&claim_on_begin("s1", G42, 5))), 1);
    // Another error: the claim as a statement, which every shard takes; no probe more.
    let fake = two_shards().await;
    let router = Router::connect(config(&fake)).await.unwrap();
    fake.with(|s| s.probe_error = Some("42501".into()));
    for v in 0..2 {
        assert_eq!(echo(&router, Key::Owner(42), v).await.unwrap(), v);
    }
    assert_eq!((router.stats().retries_lost, probes(&fake, "s1")), (0, 1));
    assert_eq!(fake.with(|s| s.count(&claim_statement("s1", G42, 5))), 2);
}

#[tokio::test]
async fn a_stale_version_on_the_right_shard_is_ig001_too() {
    let fake = two_shards().await;
    let router = Router::connect(config(&fake)).await.unwrap();
    fake.set_routes(vec![(0, 32767, "s1"), (32768, 65535, "s2")], false); // same routes, v6
    echo(&router, Key::Owner(42), 1).await.unwrap();
    assert_eq!(router.stats().retries_moved, 1);
    assert_eq!(fake.with(|s| s.count(&claim_on_begin("s1", G42, 6))), 1);
}

#[tokio::test]
async fn fenced_genes_are_retried_after_a_wait() {
    let fake = two_shards().await;
    let router = Router::connect(config(&fake)).await.unwrap();
    fake.with(|s| s.fenced.insert(G42, 4));
    echo(&router, Key::Owner(42), 3).await.unwrap();
    let stats = router.stats();
    assert_eq!((stats.retries_fenced, stats.retries_moved), (4, 0));
    // Re-read on the third fenced retry (attempt index 2) only.
    assert_eq!(stats.refreshes, 2);
    assert_eq!(fake.with(|s| s.count("s1: ROLLBACK")), 4);
}

#[tokio::test]
async fn retries_are_bounded() {
    let fake = two_shards().await;
    let mut c = config(&fake);
    c.retry_limit = 3;
    let router = Router::connect(c).await.unwrap();
    fake.with(|s| s.fenced.insert(G42, u32::MAX));
    let e = echo(&router, Key::Owner(42), 3).await.unwrap_err();
    match &e {
        Error::RetryExhausted(last) => assert_eq!(last.route_code(), Some(ROUTE_FENCED)),
        other => panic!("{other:?}"),
    }
    assert!(matches!(e, Error::RetryExhausted { .. }));
    assert_eq!(e.code(), Some(ROUTE_FENCED));
    assert_eq!(router.stats().retries_fenced, 3);
    // 1 try + 3 retries, each rolled back.
    assert_eq!(claims(&fake, "s1"), 4);
    assert_eq!(fake.with(|s| s.count("s1: ROLLBACK")), 4);
}

#[tokio::test]
async fn fenced_retries_go_on_while_the_coordinator_is_down() {
    let fake = two_shards().await;
    let router = Router::connect(config(&fake)).await.unwrap();
    fake.stop_coordinator();
    // The re-reads on the third and the sixth fenced retry fail.
    fake.with(|s| s.fenced.insert(G42, 7));
    assert_eq!(echo(&router, Key::Owner(42), 3).await.unwrap(), 3);
    let stats = router.stats();
    assert_eq!((stats.retries_fenced, stats.refreshes), (7, 1));
    assert_eq!(fake.with(|s| s.count("s1: COMMIT")), 1);
}

#[tokio::test]
async fn a_moved_route_with_the_coordinator_down_is_retried_until_the_limit() {
    let fake = two_shards().await;
    let mut c = config(&fake);
    c.retry_limit = 3;
    let router = Router::connect(c).await.unwrap();
    fake.set_routes(vec![(0, 16000, "s1"), (16001, 65535, "s2")], false);
    fake.stop_coordinator();
    let e = echo(&router, Key::Owner(42), 1).await.unwrap_err();
    assert!(matches!(e, Error::RetryExhausted(_)), "{e:?}");
    assert_eq!(e.code(), Some(ROUTE_CHANGED));
    assert_eq!(router.stats().retries_moved, 3);
    assert_eq!(claims(&fake, "s1"), 4);
    // Back up: the next re-read finds the owner.
    fake.start_coordinator();
    assert_eq!(echo(&router, Key::Owner(42), 2).await.unwrap(), 2);
    assert_eq!(fake.with(|s| s.count("s2: COMMIT")), 1);
}

#[tokio::test]
async fn a_negative_id_is_refused_not_routed() {
    let fake = two_shards().await;
    let router = Router::connect(config(&fake)).await.unwrap();
    for id in [-1i64, i64::MIN] {
        let e = echo(&router, Key::Id(id), 1).await.unwrap_err();
        assert!(matches!(e, Error::InvalidKey(_)), "{e:?}");
    }
    assert!(fake.with(|s| s.log.iter().all(|l| l.starts_with("coordinator:"))));
}

#[tokio::test]
async fn a_body_error_rolls_back_and_is_returned() {
    let fake = two_shards().await;
    let router = Router::connect(config(&fake)).await.unwrap();
    let e = router
        .transaction(Key::Owner(42), |c| {
            Box::pin(async move {
                c.query_typed("SELECT fake.fail($1)", &[(&"23505", Type::TEXT)])
                    .await?;
                Ok(())
            })
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("23505"));
    assert!(matches!(e, Error::Db(_)));
    assert!(e.to_string().contains("fake failure"), "{e}");
    fake.with(|s| {
        assert_eq!(s.count("s1: ROLLBACK"), 1);
        assert_eq!(s.count("s1: COMMIT"), 0);
    });
    assert_eq!(router.stats().transactions, 0);
    // The connection was rolled back, so it is reused.
    echo(&router, Key::Owner(42), 1).await.unwrap();
    assert_eq!(fake.with(|s| s.opened["s1"]), 1);
}

#[tokio::test]
async fn a_body_that_swallows_an_error_is_never_reported_committed() {
    let fake = two_shards().await;
    let router = Router::connect(config(&fake)).await.unwrap();
    let e = router
        .transaction(Key::Owner(42), |c| {
            Box::pin(async move {
                // The statement fails and the body carries on as if it had not.
                let _ = c
                    .query_typed("SELECT fake.fail($1)", &[(&"22012", Type::TEXT)])
                    .await;
                Ok(())
            })
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("25P02"), "{e}");
    fake.with(|s| {
        assert_eq!(s.count("s1: COMMIT"), 0, "the COMMIT was not sent");
        assert_eq!(s.count("s1: ROLLBACK"), 1);
    });
    assert_eq!(router.stats().transactions, 0);
}

#[tokio::test]
async fn a_body_that_ends_the_transaction_itself_is_never_reported_committed_nor_run_again() {
    let fake = two_shards().await;
    let router = Router::connect(config(&fake)).await.unwrap();
    let e = router
        .transaction(Key::Owner(42), |c| {
            Box::pin(async move { c.batch_execute("ROLLBACK").await })
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("25P01"), "a ROLLBACK in the body: {e}");
    fake.with(|s| assert_eq!(s.count("s1: COMMIT"), 0, "the COMMIT was not sent"));
    let mut runs = 0;
    let runs_ref = &mut runs;
    let e = router
        .transaction(Key::Owner(42), |c| {
            *runs_ref += 1;
            Box::pin(async move {
                c.batch_execute("COMMIT").await?;
                // A statement after its own COMMIT runs without the claim.
                c.query_typed("SELECT fake.fail($1)", &[(&ROUTE_CHANGED, Type::TEXT)])
                    .await?;
                Ok(())
            })
        })
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), runs),
        (Some(ROUTE_CHANGED), 1),
        "never run again: {e}"
    );
    assert_eq!(router.stats().transactions, 0);
    assert_eq!(router.stats().retries_moved, 0);
}

#[tokio::test]
async fn a_route_error_from_the_body_retries_the_whole_transaction() {
    let fake = two_shards().await;
    let router = Router::connect(config(&fake)).await.unwrap();
    fake.with(|s| s.fenced.insert(u16::MAX, 2)); // fail_once fails twice
    let mut runs = 0;
    let runs_ref = &mut runs;
    router
        .transaction(Key::Owner(42), |c| {
            *runs_ref += 1;
            Box::pin(async move {
                c.query_typed("SELECT fake.fail_once($1)", &[(&ROUTE_CHANGED, Type::TEXT)])
                    .await?;
                Ok(())
            })
        })
        .await
        .unwrap();
    assert_eq!(runs, 3);
    assert_eq!(router.stats().retries_moved, 2);
    fake.with(|s| {
        assert_eq!(s.count(&claim_on_begin("s1", G42, 5)), 3);
        assert_eq!(s.count("s1: ROLLBACK"), 2);
        assert_eq!(s.count("s1: COMMIT"), 1);
    });
}

#[tokio::test]
async fn a_notification_with_a_newer_version_reloads_the_routes() {
    let fake = two_shards().await;
    let router = Router::connect(config(&fake)).await.unwrap();
    let v = fake.set_routes(vec![(0, 65535, "s2")], true);
    wait_for("the reload", || router.version() == v).await;
    assert_eq!(router.routes(), vec![(0, 65535, "s2".to_string())]);
    assert_eq!(router.shard_for(Key::Owner(42)).unwrap(), "s2");
    // An old or equal payload does not reload.
    let reads = fake.with(|s| s.route_reads);
    fake.notify(&v.to_string());
    fake.notify("3");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(fake.with(|s| s.route_reads), reads);
}

#[tokio::test]
async fn a_lost_listener_reconnects_listens_again_and_rereads() {
    let fake = two_shards().await;
    let router = Router::connect(config(&fake)).await.unwrap();
    fake.kill_coordinator_connections();
    // A change while the listener is down: its notification is lost.
    let v = fake.set_routes(vec![(0, 100, "s1"), (101, 65535, "s2")], true);
    wait_for("the re-read after reconnecting", || router.version() == v).await;
    wait_for("the second LISTEN", || {
        fake.with(|s| s.count("coordinator: LISTEN")) == 2
    })
    .await;
    // And notifications arrive on the new connection.
    let v2 = fake.set_routes(vec![(0, 65535, "s1")], true);
    wait_for("the reload after reconnecting", || router.version() == v2).await;
}

#[tokio::test]
async fn refresh_without_a_listener_uses_its_own_connection() {
    let fake = two_shards().await;
    let router = Router::connect(config(&fake)).await.unwrap();
    fake.kill_coordinator_connections();
    fake.set_routes(vec![(0, 65535, "s2")], false);
    let v = router.refresh().await.unwrap();
    assert_eq!(v, 6);
    assert_eq!(router.version(), 6);
}

#[tokio::test]
async fn a_dropped_transaction_closes_its_connection_instead_of_pooling_it() {
    let fake = two_shards().await;
    let router = Router::connect(config(&fake)).await.unwrap();
    let slow = router.transaction(Key::Owner(42), |c| {
        Box::pin(async move { c.batch_execute("SELECT fake.sleep_ms(700)").await })
    });
    assert!(tokio::time::timeout(Duration::from_millis(200), slow)
        .await
        .is_err());
    wait_for("the abandoned connection to close", || {
        fake.with(|s| s.closed.get("s1").copied().unwrap_or(0)) == 1
    })
    .await;
    // A new transaction opens a new connection, with no transaction open on it.
    echo(&router, Key::Owner(42), 2).await.unwrap();
    assert_eq!(fake.with(|s| s.opened["s1"]), 2);
}

#[tokio::test]
async fn no_route_and_unknown_shards() {
    let fake = Fake::start(&["s1"], vec![(0, 20000, "s1"), (20001, 30000, "ghost")], 1).await;
    let router = Router::connect(config(&fake)).await.unwrap();
    assert!(matches!(
        echo(&router, Key::Gene(40000), 1).await,
        Err(Error::NoRoute { gene: 40000 })
    ));
    assert!(matches!(
        router.shard_for(Key::Gene(65535)),
        Err(Error::NoRoute { gene: 65535 })
    ));
    assert!(
        matches!(router.shard_for(Key::Gene(25000)), Err(Error::UnknownShard(s)) if s == "ghost")
    );
    assert!(matches!(
        echo(&router, Key::Gene(25000), 1).await,
        Err(Error::UnknownShard(_))
    ));
    assert_eq!(echo(&router, Key::Gene(20000), 9).await.unwrap(), 9);
}

#[tokio::test]
async fn no_route_looks_again_once_when_the_routes_changed() {
    let fake = Fake::start(&["s1"], vec![(0, 100, "s1")], 1).await;
    let router = Router::connect(config(&fake)).await.unwrap();
    fake.set_routes(vec![(0, 65535, "s1")], false);
    assert_eq!(echo(&router, Key::Gene(5000), 4).await.unwrap(), 4);
}

#[tokio::test]
async fn empty_routes_take_the_version_from_route_version() {
    let fake = Fake::start(&["s1"], vec![], 9).await;
    let router = Router::connect(config(&fake)).await.unwrap();
    assert_eq!(router.version(), 9);
    assert!(router.routes().is_empty());
    assert!(matches!(
        router.shard_for(Key::Gene(1)),
        Err(Error::NoRoute { gene: 1 })
    ));
}

#[tokio::test]
async fn next_id_comes_from_the_owning_shard_with_the_owners_gene() {
    let fake = two_shards().await;
    let router = Router::connect(config(&fake)).await.unwrap();
    let id = router.next_id("orders", Key::Owner(42)).await.unwrap();
    assert_eq!(id >> 47, G42 as i64);
    let id = router
        .next_id("orders", &Key::OwnerText("alice".into()))
        .await
        .unwrap();
    assert_eq!(id >> 47, 13795);
    let u = [0x11u8; 16];
    let id = router.next_id("orders", Key::OwnerUuid(u)).await.unwrap();
    assert_eq!((id >> 47) as u16, Key::OwnerUuid(u).gene());
    assert!(matches!(
        router.next_id("orders", Key::Id(5)).await,
        Err(Error::InvalidKey(_))
    ));
    fake.with(|s| {
        assert_eq!(
            s.count("SELECT id_gen.gene_order_id($1::text, $2::bigint)"),
            1
        );
        assert_eq!(
            s.count("SELECT id_gen.gene_order_id($1::text, $2::text)"),
            1
        );
        assert_eq!(
            s.count("SELECT id_gen.gene_order_id($1::text, $2::text::uuid)"),
            1
        );
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_transactions_on_a_shared_router() {
    let fake = two_shards().await;
    let router = Router::connect(config(&fake)).await.unwrap();
    let mut handles = Vec::new();
    for t in 0..8i64 {
        let r = router.clone();
        handles.push(tokio::spawn(async move {
            for i in 0..20 {
                assert_eq!(echo(&r, Key::Owner(t * 100 + i), i).await.unwrap(), i);
            }
        }));
    }
    // A route change in the middle, notified.
    fake.set_routes(vec![(0, 40000, "s1"), (40001, 65535, "s2")], true);
    for h in handles {
        h.await.unwrap();
    }
    assert_eq!(router.stats().transactions, 160);
    // pool_size 2 per shard.
    fake.with(|s| assert!(s.opened["s1"] <= 2 && s.opened["s2"] <= 2, "{:?}", s.opened));
}

#[tokio::test]
async fn close_stops_everything() {
    let fake = two_shards().await;
    let router = Router::connect(config(&fake)).await.unwrap();
    echo(&router, Key::Owner(42), 1).await.unwrap();
    router.close();
    assert!(router.is_closed());
    assert!(matches!(
        echo(&router, Key::Owner(42), 1).await,
        Err(Error::Closed)
    ));
    assert!(matches!(router.refresh().await, Err(Error::Closed)));
    wait_for("every connection to close", || {
        fake.with(|s| {
            s.closed.get("coordinator").copied().unwrap_or(0) == s.opened["coordinator"]
                && s.closed.get("s1").copied().unwrap_or(0) == s.opened["s1"]
        })
    })
    .await;
}

#[tokio::test]
async fn dropping_the_last_clone_stops_the_listener() {
    let fake = two_shards().await;
    let router = Router::connect(config(&fake)).await.unwrap();
    let clone = router.clone();
    drop(router);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        fake.with(|s| s.closed.get("coordinator").copied().unwrap_or(0)),
        0
    );
    drop(clone);
    wait_for("the listener connection to close", || {
        fake.with(|s| s.closed.get("coordinator").copied().unwrap_or(0) == 1)
    })
    .await;
}

/// Runs the tool's bench against the fake for a short while; returns its JSON line.
async fn run_bench(fake: &Fake, extra: &[&str]) -> String {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_id_gen_client_tool"));
    cmd.arg("bench")
        .arg("--routes-dsn")
        .arg(&fake.coordinator_dsn);
    for (name, dsn) in &fake.shard_dsns {
        cmd.arg("--shard").arg(format!("{name}={dsn}"));
    }
    cmd.args(["--table", "app.items", "--owners", "50", "--seconds", "0.3"]);
    cmd.args(extra);
    // Blocking, off the runtime's workers, which serve the fake meanwhile.
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .unwrap()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    stdout
}

fn json_u64(line: &str, field: &str) -> u64 {
    let start = line.find(&format!("\"{field}\":")).unwrap() + field.len() + 3;
    let rest = &line[start..];
    rest[..rest.find([',', '}']).unwrap()].parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tool_benchmarks_inserts_and_lookups() {
    let fake = two_shards().await;
    let line = run_bench(&fake, &["--mode", "insert"]).await;
    assert!(line.starts_with("{\"mode\":\"insert\",\"tx\":"), "{line}");
    for field in [
        "\"seconds\":",
        "\"tps\":",
        "\"p50_ms\":",
        "\"p99_ms\":",
        "\"retries\":",
    ] {
        assert!(line.contains(field), "{line}");
    }
    let tx = json_u64(&line, "tx");
    assert!(tx > 0, "{line}");
    assert_eq!(json_u64(&line, "errors"), 0, "{line}");
    assert_eq!(
        fake.with(|s| s.count("INSERT INTO \"app\".\"items\"")) as u64,
        tx
    );
    let ids = std::env::temp_dir().join(format!("id_gen_client_ids_{}", std::process::id()));
    std::fs::write(
        &ids,
        format!("{}\n{}\n", (16043i64 << 47) | 1, (55408i64 << 47) | 2),
    )
    .unwrap();
    let line = run_bench(
        &fake,
        &[
            "--mode",
            "lookup",
            "--ids-file",
            ids.to_str().unwrap(),
            "--tasks",
            "2",
        ],
    )
    .await;
    std::fs::remove_file(&ids).unwrap();
    assert!(line.starts_with("{\"mode\":\"lookup\""), "{line}");
    assert!(json_u64(&line, "tx") > 0, "{line}");
    fake.with(|s| {
        assert!(s.count("s1: SELECT * FROM \"app\".\"items\" WHERE id = $1") > 0);
        assert!(s.count("s2: SELECT * FROM \"app\".\"items\" WHERE id = $1") > 0);
    });
}

// --- The protocol scenarios shared by every client (clients/protocol-scenarios.json) ------

/// Runs one scenario of the shared file against the fake, its shards' routing protocol
/// `routing_protocol` (`None`: shards before 0.7.16); returns what the scenario's `expect`
/// names, as JSON, so that a difference shows every field at once.
async fn run_scenario(sc: &serde_json::Value, routing_protocol: Option<&str>) -> serde_json::Value {
    use serde_json::{json, Value as J};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let routes = |v: &J| -> Vec<(i32, i32, String)> {
        let mut lower = 0;
        v.as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let upper = r[0].as_i64().unwrap() as i32;
                let range = (lower, upper, r[1].as_str().unwrap().to_string());
                lower = upper + 1;
                range
            })
            .collect()
    };
    let initial = routes(&sc["routes"]);
    let fake = Fake::start(
        &["a", "b"],
        initial
            .iter()
            .map(|(l, u, s)| (*l, *u, s.as_str()))
            .collect(),
        1,
    )
    .await;
    fake.with(|s| {
        for shard in ["a", "b"] {
            let setting = routing_protocol.map(String::from);
            s.routing_protocol.insert(shard.into(), setting);
        }
    });
    let mut c = config(&fake);
    c.retry_limit = sc["retry_limit"].as_u64().unwrap_or(20) as u32;
    let router = Router::connect(c).await.unwrap();
    let owner_of = |g: u16| {
        initial
            .iter()
            .find(|(l, u, _)| *l <= g as i32 && g as i32 <= *u)
            .map(|r| r.2.clone())
    };
    let key = &sc["key"];
    let (key, owner) = if let Some(g) = key["gene"].as_u64() {
        (Key::Gene(g as u16), None)
    } else {
        let shard = key["owner_on"].as_str().unwrap();
        let o = (0i64..)
            .find(|o| owner_of(Key::Owner(*o).gene()).as_deref() == Some(shard))
            .unwrap();
        (Key::Owner(o), Some(o))
    };
    if let Some(changed) = sc.get("routes_change_unseen") {
        let changed = routes(changed);
        fake.set_routes(
            changed
                .iter()
                .map(|(l, u, s)| (*l, *u, s.as_str()))
                .collect(),
            false,
        );
    }
    if sc["coordinator_down"].as_bool() == Some(true) {
        fake.stop_coordinator();
    }
    if let Some(n) = sc["fenced"].as_u64() {
        let gene = key.gene();
        fake.with(|s| s.fenced.insert(gene, n as u32));
    }
    fake.with(|s| {
        s.connect_fails = sc["connect_fails"].as_u64().unwrap_or(0) as u32;
        s.claim_lost = sc["claim_lost"].as_u64().unwrap_or(0) as u32;
        s.commit_lost = sc["commit_lost"].as_bool() == Some(true);
    });
    let body_errors: Vec<String> = sc["body_errors"]
        .as_array()
        .map(|a| a.iter().map(|e| e.as_str().unwrap().to_string()).collect())
        .unwrap_or_default();
    let runs = AtomicUsize::new(0);
    let result: Result<String, Error> = match sc["call"].as_str().unwrap() {
        "transaction" => {
            router
                .transaction(&key, scenario_body(&runs, &body_errors))
                .await
        }
        "run" => router.run(&key, scenario_body(&runs, &body_errors)).await,
        "execute" => {
            let owner = owner.expect("execute scenarios route by owner");
            router
                .execute(&key, "SELECT fake.read($1)", &[(&owner, Type::INT8)])
                .await
                .map(|rows| rows[0].get(0))
        }
        other => panic!("unknown call {other}"),
    };
    let stats = router.stats();
    let mut got = json!({
        "body_runs": runs.load(Ordering::SeqCst),
        "claims": claims(&fake, "a") + claims(&fake, "b"),
        "retries_moved": stats.retries_moved,
        "retries_fenced": stats.retries_fenced,
        "retries_lost": stats.retries_lost,
        "refreshes": stats.refreshes,
        "version": router.version(),
    });
    let outcome = match result {
        Ok(shard) => {
            got["shard"] = json!(shard);
            "committed"
        }
        Err(Error::RetryExhausted(last)) => {
            got["last_code"] = json!(last.code());
            "exhausted"
        }
        Err(Error::NoRoute { .. }) => "no_route",
        Err(Error::CommitOutcomeUnknown(last)) => {
            assert!(last.is_connection_lost(), "{last}");
            "commit_unknown"
        }
        Err(e @ Error::Db(_)) => {
            got["last_code"] = json!(e.code());
            "error"
        }
        Err(e) => panic!("{}: unexpected error {e}", sc["name"]),
    };
    got["outcome"] = json!(outcome);
    router.close();
    // Only what the scenario expects is compared.
    let expect = sc["expect"].as_object().unwrap();
    J::Object(
        expect
            .keys()
            .map(|k| (k.clone(), got.get(k).cloned().unwrap_or(J::Null)))
            .collect(),
    )
}

/// A scenario's body: fails with the next of `errors` (one per run), else answers the
/// shard's name.
fn scenario_body<'e>(
    runs: &'e std::sync::atomic::AtomicUsize,
    errors: &'e [String],
) -> impl for<'c> FnMut(&'c Client) -> id_gen_client::TxFuture<'e, 'c, String> + 'e {
    move |c| {
        let n = runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let fail = errors.get(n).cloned();
        Box::pin(async move {
            if let Some(code) = fail {
                c.query_typed("SELECT fake.fail($1)", &[(&code, Type::TEXT)])
                    .await?;
            }
            c.query_typed_one("SELECT fake.shard()", &[])
                .await?
                .try_get(0)
        })
    }
}

#[tokio::test]
async fn the_shared_protocol_scenarios() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../protocol-scenarios.json");
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let scenarios = file["scenarios"].as_array().unwrap();
    assert!(
        scenarios.len() >= 10,
        "the scenario file lost its scenarios"
    );
    let mut failures = Vec::new();
    // On shards that take the claim on BEGIN, and on shards before 0.7.16.
    for routing_protocol in [Some("2"), None] {
        for sc in scenarios {
            let got = run_scenario(sc, routing_protocol).await;
            if got != sc["expect"] {
                failures.push(format!(
                    "{} (routing protocol {routing_protocol:?}):\n  expected {}\n  got      {}",
                    sc["name"], sc["expect"], got
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A route change nobody notified is seen by the version poll within refresh_interval; a
/// router with refresh_interval zero does not poll.
#[tokio::test]
async fn the_version_poll_sees_a_change_nobody_notified() {
    let fake = two_shards().await;
    let mut c = config(&fake);
    c.refresh_interval = Duration::from_millis(50);
    let router = Router::connect(c).await.unwrap();
    let quiet = Router::connect(config(&fake)).await.unwrap();
    let v = fake.set_routes(vec![(0, 65535, "s2")], false);
    wait_for("the poll read the new routes", || router.version() == v).await;
    assert_eq!(router.shard_for(Key::Gene(1)).unwrap(), "s2");
    assert!(fake.with(|st| st.version_polls) > 0);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(quiet.version(), 5, "no poll without refresh_interval");
    router.close();
    quiet.close();
}

/// Polls `get` until it returns `want`, for at most 5 s; then fails with the last value seen.
async fn wait_until<T: PartialEq + std::fmt::Debug>(
    what: &str,
    want: T,
    mut get: impl FnMut() -> T,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let got = get();
        if got == want {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out waiting for {what}: wanted {want:?}, last seen {got:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// LISTEN failing at connect (a pooler in front of the coordinator, say) does not fail it:
/// the routes are read, the version poll sees a change, the listener is retried in the
/// background and listens once LISTEN works; close() ends the retries.
#[tokio::test]
async fn a_listen_that_fails_at_connect_does_not_fail_it_the_poll_covers_and_the_listener_comes_later(
) {
    let fake = two_shards().await;
    fake.with(|s| s.listen_fails = true);
    let mut c = config(&fake);
    c.refresh_interval = Duration::from_millis(20);
    let router = Router::connect(c).await.unwrap();
    assert!(
        fake.with(|s| s.listen_attempts) >= 1,
        "connect tried LISTEN"
    );
    assert_eq!(fake.with(|s| s.listening()), 0);
    assert_eq!(router.version(), 5);
    assert_eq!(echo(&router, Key::Gene(1), 7).await.unwrap(), 7);
    // Nobody listens: the change is seen by the version poll.
    let v = fake.set_routes(vec![(0, 65535, "s2")], true);
    wait_until("the poll read the new routes", v, || router.version()).await;
    assert_eq!(router.shard_for(Key::Gene(1)).unwrap(), "s2");
    assert_eq!(echo(&router, Key::Gene(1), 8).await.unwrap(), 8);
    let attempts = fake.with(|s| s.listen_attempts);
    wait_until("LISTEN retried in the background", true, || {
        fake.with(|s| s.listen_attempts) > attempts
    })
    .await;
    fake.with(|s| s.listen_fails = false);
    wait_until("a listener once LISTEN works", 1, || {
        fake.with(|s| s.listening())
    })
    .await;
    router.close();
    let attempts = fake.with(|s| s.listen_attempts);
    tokio::time::sleep(Duration::from_millis(300)).await; // (longer than the first backoffs)
    assert_eq!(
        fake.with(|s| s.listen_attempts),
        attempts,
        "LISTEN retried after close()"
    );
}

/// The routes unreadable at connect still fail it, LISTEN failing or not.
#[tokio::test]
async fn connect_fails_when_the_routes_cannot_be_read_even_while_listen_fails() {
    let fake = two_shards().await;
    fake.with(|s| s.listen_fails = true);
    fake.stop_coordinator();
    assert!(Router::connect(config(&fake)).await.is_err());
}

// --- shard_timeout: a shard that stops answering (frozen, its kernel still acking TCP) ----

const BOUND: Duration = Duration::from_millis(300);

/// A router whose steps on a shard are bounded by BOUND.
async fn bounded_router(fake: &Fake, retry_limit: u32) -> Router {
    let mut c = config(fake);
    c.shard_timeout = BOUND;
    c.retry_limit = retry_limit;
    Router::connect(c).await.unwrap()
}

/// Runs a call that must return (with 20 times the bound per attempt to spare); the time it
/// took.
async fn must_return<T>(
    attempts: u32,
    call: impl std::future::Future<Output = T>,
) -> (T, Duration) {
    let started = std::time::Instant::now();
    let out = tokio::time::timeout(BOUND * 20 * attempts, call)
        .await
        .expect("the call did not return: shard_timeout did not bound it");
    (out, started.elapsed())
}

fn assert_shard_timeout(e: &Error, shard: &str, step: &str) {
    match e {
        Error::ShardTimeout {
            shard: s,
            what,
            after,
        } => {
            assert_eq!((s.as_str(), *what, *after), (shard, step, BOUND), "{e}");
            assert!(
                e.is_connection_lost(),
                "a silent shard is a lost connection"
            );
        }
        other => panic!("expected a ShardTimeout of {step} on {shard}, got {other:?}"),
    }
}

async fn wait_closed(fake: &Fake, shard: &str, n: u32) {
    wait_for("the connection left unanswered to be closed", || {
        fake.with(|s| s.closed(shard)) == n
    })
    .await;
}

#[tokio::test]
async fn a_claim_left_unanswered_fails_within_the_bound_and_closes_the_connection() {
    let fake = two_shards().await;
    let router = bounded_router(&fake, 0).await;
    fake.with(|s| s.stall_on.insert(CLAIM_ON_BEGIN.into(), 1));
    let (result, took) = must_return(1, echo(&router, Key::Owner(42), 1)).await;
    let e = result.unwrap_err();
    assert!(took >= BOUND, "{took:?}");
    // Retried like a lost connection: with retry_limit 0, exhausted at once.
    match &e {
        Error::RetryExhausted(last) => assert_shard_timeout(last, "s1", "the claim"),
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("did not answer the claim"), "{e}");
    assert_eq!(router.stats().transactions, 0);
    // Discarded, never pooled (no ROLLBACK queued behind the claim): the next call opens a
    // new connection and commits.
    wait_closed(&fake, "s1", 1).await;
    assert_eq!(fake.with(|s| s.count("s1: ROLLBACK")), 0);
    assert_eq!(echo(&router, Key::Owner(42), 2).await.unwrap(), 2);
    fake.with(|s| {
        assert_eq!(s.opened("s1"), 2);
        assert_eq!(s.count("s1: COMMIT"), 1);
    });
}

#[tokio::test]
async fn a_claim_left_unanswered_is_retried_as_a_lost_connection() {
    let fake = two_shards().await;
    let router = bounded_router(&fake, 20).await;
    fake.with(|s| s.stall_on.insert(CLAIM_ON_BEGIN.into(), 2));
    let (result, took) = must_return(3, echo(&router, Key::Owner(42), 5)).await;
    assert_eq!(result.unwrap(), 5);
    assert!(took >= BOUND * 2, "{took:?}");
    let stats = router.stats();
    assert_eq!(
        (stats.retries_lost, stats.retries_moved, stats.transactions),
        (2, 0, 1)
    );
    wait_closed(&fake, "s1", 2).await;
    fake.with(|s| {
        assert_eq!(s.count(&claim_on_begin("s1", G42, 5)), 3);
        assert_eq!(s.opened("s1"), 3);
    });
}

#[tokio::test]
async fn a_shard_that_stays_silent_exhausts_the_retries() {
    let fake = two_shards().await;
    let router = bounded_router(&fake, 2).await;
    fake.with(|s| s.stall_on.insert(CLAIM_ON_BEGIN.into(), u32::MAX));
    let (result, took) = must_return(3, echo(&router, Key::Owner(42), 1)).await;
    let e = result.unwrap_err();
    assert!(took >= BOUND * 3, "{took:?}");
    match &e {
        Error::RetryExhausted(last) => assert_shard_timeout(last, "s1", "the claim"),
        other => panic!("{other:?}"),
    }
    assert_eq!(router.stats().retries_lost, 2);
    wait_closed(&fake, "s1", 3).await;
}

#[tokio::test]
async fn a_connection_whose_startup_is_never_answered_is_retried_as_lost() {
    let fake = two_shards().await;
    let router = bounded_router(&fake, 20).await;
    fake.with(|s| s.stall_connects = 1);
    let (result, _) = must_return(2, echo(&router, Key::Owner(42), 3)).await;
    assert_eq!(result.unwrap(), 3);
    assert_eq!(router.stats().retries_lost, 1);
    wait_closed(&fake, "s1", 1).await;
    // With no retry left, the error names the step.
    fake.with(|s| s.stall_connects = 1);
    let router = bounded_router(&fake, 0).await;
    let (result, _) = must_return(1, echo(&router, Key::Owner(42), 3)).await;
    match result.unwrap_err() {
        Error::RetryExhausted(last) => {
            assert_shard_timeout(&last, "s1", "a new connection's startup")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_commit_left_unanswered_is_commit_outcome_unknown() {
    let fake = two_shards().await;
    let router = bounded_router(&fake, 20).await;
    fake.with(|s| s.stall_on.insert("COMMIT".into(), 1));
    let mut runs = 0;
    let runs_ref = &mut runs;
    let (result, took) = must_return(
        1,
        router.transaction(Key::Owner(42), |c| {
            *runs_ref += 1;
            Box::pin(async move { c.batch_execute("SELECT 1").await })
        }),
    )
    .await;
    let e = result.unwrap_err();
    assert!(took >= BOUND, "{took:?}");
    match &e {
        Error::CommitOutcomeUnknown(last) => assert_shard_timeout(last, "s1", "COMMIT"),
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("commit outcome unknown"), "{e}");
    // Never retried, never reported committed; the connection is closed, not rolled back.
    assert_eq!(runs, 1);
    let stats = router.stats();
    assert_eq!((stats.retries_lost, stats.transactions), (0, 0));
    wait_closed(&fake, "s1", 1).await;
    fake.with(|s| {
        assert_eq!(s.count("s1: COMMIT"), 1);
        assert_eq!(s.count("s1: ROLLBACK"), 0);
    });
    assert_eq!(echo(&router, Key::Owner(42), 4).await.unwrap(), 4);
    assert_eq!(fake.with(|s| s.opened("s1")), 2);
}

#[tokio::test]
async fn an_execute_statement_left_unanswered_is_commit_outcome_unknown() {
    let fake = two_shards().await;
    let router = bounded_router(&fake, 20).await;
    fake.with(|s| s.stall_on.insert("SELECT fake.read(".into(), 1));
    let owner = 42i64;
    let (result, took) = must_return(
        1,
        router.execute(
            Key::Owner(owner),
            "SELECT fake.read($1)",
            &[(&owner, Type::INT8)],
        ),
    )
    .await;
    let e = result.unwrap_err();
    assert!(took >= BOUND, "{took:?}");
    match &e {
        Error::CommitOutcomeUnknown(last) => assert_shard_timeout(last, "s1", "the statement"),
        other => panic!("{other:?}"),
    }
    // The statement travelled with its COMMIT: never sent again.
    assert_eq!(router.stats().retries_lost, 0);
    assert_eq!(fake.with(|s| s.count("s1: SELECT fake.read")), 1);
    wait_closed(&fake, "s1", 1).await;
    let rows = router
        .execute(
            Key::Owner(owner),
            "SELECT fake.read($1)",
            &[(&owner, Type::INT8)],
        )
        .await
        .unwrap();
    assert_eq!(rows[0].get::<_, String>(0), "s1");
    // The statement alone, with the version in its leading comment: no BEGIN, no COMMIT.
    let version = router.version();
    let sent = fake.with(|s| s.log.clone());
    let tail: Vec<&str> = sent
        .iter()
        .rev()
        .take(2)
        .rev()
        .map(String::as_str)
        .collect();
    assert_eq!(
        tail,
        [
            format!("s1: -- declared {version}").as_str(),
            "s1: SELECT fake.read($1)"
        ],
        "{sent:?}"
    );
}

#[tokio::test]
async fn a_rollback_left_unanswered_closes_the_connection_and_returns_the_bodys_error() {
    let fake = two_shards().await;
    let router = bounded_router(&fake, 20).await;
    fake.with(|s| s.stall_on.insert("ROLLBACK".into(), 1));
    let (result, took) = must_return(
        1,
        router.transaction(Key::Owner(42), |c| {
            Box::pin(async move {
                c.query_typed("SELECT fake.fail($1)", &[(&"23505", Type::TEXT)])
                    .await?;
                Ok(())
            })
        }),
    )
    .await;
    let e = result.unwrap_err();
    assert_eq!(e.code(), Some("23505"), "{e}");
    assert!(took >= BOUND, "{took:?}");
    wait_closed(&fake, "s1", 1).await;
    assert_eq!(echo(&router, Key::Owner(42), 6).await.unwrap(), 6);
    assert_eq!(fake.with(|s| s.opened("s1")), 2);
}

#[tokio::test]
async fn no_free_connection_within_the_bound_is_a_pool_timeout_not_a_retry() {
    let fake = two_shards().await;
    let mut c = config(&fake);
    c.shard_timeout = BOUND;
    c.pool_size = 1;
    let router = Router::connect(c).await.unwrap();
    // The only connection of s1 is busy with a body that takes long.
    let busy = {
        let r = router.clone();
        tokio::spawn(async move {
            r.transaction(Key::Owner(42), |c| {
                Box::pin(async move { c.batch_execute("SELECT fake.sleep_ms(2000)").await })
            })
            .await
        })
    };
    wait_for("the busy body", || {
        fake.with(|s| s.count("s1: SELECT fake.sleep_ms")) == 1
    })
    .await;
    let (result, took) = must_return(1, echo(&router, Key::Owner(42), 1)).await;
    let e = result.unwrap_err();
    assert!(took >= BOUND, "{took:?}");
    match &e {
        Error::PoolTimeout { shard, waited } => {
            assert_eq!((shard.as_str(), *waited), ("s1", BOUND))
        }
        other => panic!("expected PoolTimeout, got {other:?}"),
    }
    assert!(
        !e.is_connection_lost(),
        "no free connection is no lost connection"
    );
    assert!(
        e.to_string().contains("no free connection to shard \"s1\""),
        "{e}"
    );
    assert_eq!(router.stats().retries_lost, 0);
    // The busy transaction is not disturbed; its body outlives shard_timeout (the body's
    // statements are not bounded) and commits.
    busy.await.unwrap().unwrap();
    fake.with(|s| {
        assert_eq!(s.opened("s1"), 1);
        assert_eq!(s.count("s1: COMMIT"), 1);
        assert_eq!(s.count(&claim_on_begin("s1", G42, 5)), 1);
    });
}

#[tokio::test]
async fn a_login_refused_by_the_shard_is_raised_not_retried() {
    let fake = two_shards().await;
    let router = bounded_router(&fake, 20).await;
    fake.with(|s| s.refuse_logins = 1);
    let e = echo(&router, Key::Owner(42), 1).await.unwrap_err();
    assert!(!e.is_connection_lost(), "{e:?}");
    assert!(
        format!("{e}").contains("password authentication failed"),
        "{e}"
    );
    assert_eq!(router.stats().retries_lost, 0);
    assert_eq!(echo(&router, Key::Owner(42), 2).await.unwrap(), 2);
}
