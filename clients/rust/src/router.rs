//! The [`Router`]: zero-hop routing of transactions to the shard that owns a gene, the
//! client side of docs/routing-protocol.md.
//!
//! Invariants it keeps:
//!
//! * The routes are one immutable [`RouteTable`] behind `RwLock<Arc<_>>`, replaced whole;
//!   a lookup clones the `Arc` once, so a shard always goes with the version it was routed
//!   by. No lock is ever held across an `.await`.
//! * The listener connection runs `LISTEN id_gen_routes` before any route read; after it
//!   reconnects it LISTENs again and re-reads the routes (notifications may have been missed).
//!   `connect` needs the first route read only: a LISTEN that fails then is retried by the
//!   listener task on its backoff, while the version poll covers.
//!   A payload greater than the version held triggers a re-read.
//! * Route reloads are serialised (one at a time); a `refresh` that waited for another
//!   reload takes that reload's result when it began after the call and succeeded.
//! * Every transaction starts with the claim in one simple-protocol message:
//!   `/* id_gen.route_claim=g,v */ BEGIN` on a shard of routing protocol 2 (id_gen 0.7.16 on),
//!   `BEGIN; SELECT id_gen.route_claim(g, v)` on an older one (which ignores the comment).
//!   Which one a shard takes is probed (`ROUTING_PROTOCOL_SQL`, in autocommit) on the
//!   connection of its first claim, held per shard pool, and forgotten whenever a connection
//!   to that shard is found lost (a restart may bring another library). IG001 re-reads the
//!   routes and retries, IG002 waits and retries (re-reading every third time); the same
//!   holds for IG001/IG002 from the body or COMMIT.
//!   Retries are bounded by `retry_limit`, then [`Error::RetryExhausted`]; a re-read that
//!   fails (the coordinator down) does not end them.
//! * A pooled connection goes back to the pool only idle (after COMMIT or a successful
//!   ROLLBACK); if a transaction future is dropped midway, or the ROLLBACK fails, the
//!   connection is detached from the pool and closed (the server rolls back).
//! * Every step the router itself takes on a shard is bounded by `shard_timeout`: a free
//!   pooled connection, a new one (connect and startup), the probe of the routing protocol,
//!   the claim, `execute`'s statement, COMMIT, ROLLBACK and the check after a route error;
//!   the body's own statements are not.
//!   A step that ran out treats the connection as lost: it is closed, never pooled (a request
//!   may still be outstanding on it), and no ROLLBACK is sent on it. Before COMMIT was sent
//!   the attempt is retried as for a lost connection; after, [`Error::CommitOutcomeUnknown`].
//!   No free connection in time is [`Error::PoolTimeout`], never retried.

use crate::backoff::Jitter;
use crate::error::{route_code_of, Error, ROUTE_CHANGED};
use crate::key::{uuid_text, Key};
use crate::routes::RouteTable;
use deadpool_postgres::{
    Hook, Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod, Runtime, TimeoutType,
};
use futures_util::StreamExt;
use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{AsyncMessage, Client, NoTls, Row};

/// The channel the coordinator notifies route changes on.
pub const ROUTES_CHANNEL: &str = "id_gen_routes";
/// Reads the route ranges and their version in one statement (one snapshot).
pub const ROUTES_SQL: &str =
    "SELECT lower_gene, upper_gene, shard, version FROM id_gen.route_map ORDER BY lower_gene";
/// The version alone, for the poll.
const ROUTE_VERSION_SQL: &str = "SELECT id_gen.route_version()";
/// The version when there are no routes, only if there are still none (else read again).
const EMPTY_ROUTES_VERSION_SQL: &str =
    "SELECT id_gen.route_version() WHERE NOT EXISTS (SELECT 1 FROM id_gen.route_map)";
/// COMMIT, unless the body swallowed a statement's error or ended the transaction itself:
/// PostgreSQL would turn that COMMIT into a ROLLBACK, or answer it with a mere warning outside
/// a transaction block, and tokio-postgres would report either as done. So a SAVEPOINT goes
/// first in the same message: it fails with 25P02 in a failed transaction block and with
/// 25P01 outside one (an implicit block of one message takes no SAVEPOINT), and the COMMIT is
/// then not run. A body that failed is never reported committed.
const CHECKED_COMMIT: &str = "SAVEPOINT id_gen_commit; COMMIT";
/// Sent after a route error from the body: 25P01 when the body ended the claimed transaction
/// itself (its own COMMIT or ROLLBACK), which is then not run again.
const IN_TRANSACTION_PROBE: &str = "SAVEPOINT id_gen_probe";
/// A shard's routing protocol: '2' (or more) from id_gen 0.7.16 on, where the claim may ride
/// on BEGIN as a comment; NULL on an older shard, which has no such setting.
const ROUTING_PROTOCOL_SQL: &str =
    "SELECT pg_catalog.current_setting('id_gen.routing_protocol', true)";
/// The routing protocol from which a shard reads the claim on BEGIN.
const CLAIM_ON_BEGIN_PROTOCOL: i64 = 2;
/// Listener reconnect backoff: min(100 ms * 2^n, 5 s), jittered.
const RECONNECT_BASE: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_secs(5);
/// Longest a route read may take (a half-open coordinator connection must not hold the
/// reload lock, and every transaction waiting to retry, forever).
const ROUTE_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The future a transaction body returns: `Box::pin(async move { ... })` of a future that
/// borrows the client for `'c` and may borrow the caller's environment for `'env`.
///
/// It is `Pin<Box<dyn Future<Output = Result<T, tokio_postgres::Error>> + Send + 'c>>` in
/// all but name: the extra trait [`ScopedFuture`] carries the bound `'env: 'c`, which lets a
/// body borrow local variables of the caller (`&str`, `&Vec<_>`, ...) and not only the client.
/// (A plain `for<'c> FnMut(&'c Client) -> Pin<Box<dyn Future + 'c>>` cannot: every captured
/// borrow would have to be `'static`.) Build it with `Box::pin`; `FutureExt::boxed` gives
/// another type and does not fit.
pub type TxFuture<'env, 'c, T> =
    Pin<Box<dyn ScopedFuture<'env, 'c, Output = Result<T, tokio_postgres::Error>> + Send + 'c>>;

mod sealed {
    pub trait Sealed {}
    impl Sealed for std::marker::PhantomData<&&()> {}
}

/// A future that lives for `'c` inside an environment that lives for `'env` (`'env: 'c`).
/// Implemented for every `Future + 'c`; callers never name it (see [`TxFuture`]).
/// The defaulted `Bound` parameter is what makes the compiler assume `'env: 'c`.
pub trait ScopedFuture<'env, 'c, Bound = std::marker::PhantomData<&'c &'env ()>>: Future
where
    Bound: sealed::Sealed,
{
}

impl<'env: 'c, 'c, F: Future + 'c> ScopedFuture<'env, 'c> for F {}

/// How a [`Router`] connects and retries. Build it with [`RouterConfig::builder`] (or
/// [`RouterConfig::new`] and set fields): new fields may come, so it is `#[non_exhaustive]`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RouterConfig {
    /// DSN of the coordinator (key=value or URL form), where the routes are read and LISTENed.
    pub routes_dsn: String,
    /// Shard name (as `id_gen.route_map.shard` names it) to DSN (key=value or URL form).
    pub shards: BTreeMap<String, String>,
    /// Connections per shard pool (default 8).
    pub pool_size: usize,
    /// Retries after the first attempt on IG001/IG002 before [`Error::RetryExhausted`]
    /// (default 20: at most 21 attempts), as in every id_gen client.
    pub retry_limit: u32,
    /// First retry delay (default 5 ms); doubles per retry.
    pub backoff_base: Duration,
    /// Largest retry delay (default 200 ms).
    pub backoff_max: Duration,
    /// How often the route version is polled besides LISTEN (default 1 s; zero: never), so
    /// that a route change whose notification was lost, or that a pooler kept from the
    /// listener, is seen within this long.
    pub refresh_interval: Duration,
    /// LISTEN for route changes on the coordinator (default true). Off, the routes are
    /// re-read only by the poll, after IG001, and by [`Router::refresh`].
    pub listen: bool,
    /// Bounds what the router itself sends to a shard or waits for there (default 60 s;
    /// above zero), each step on its own: a free connection from the shard's pool, a new
    /// connection (connect and startup; a `connect_timeout` in the DSN bounds the connect
    /// alone), the probe of the shard's routing protocol (once per shard, before its first
    /// claim), the claim, `execute`'s statement with its COMMIT, the COMMIT of a transaction,
    /// a ROLLBACK, and the check after a route error from the body. The body's own
    /// statements are the caller's business and are not bounded (bound the whole call with
    /// `tokio::time::timeout`: a call dropped midway closes its connection).
    ///
    /// A shard that does not answer in time (a frozen server whose kernel still acks TCP) is
    /// a lost connection, [`Error::ShardTimeout`]: the connection is closed, never pooled.
    /// Before COMMIT was sent the attempt is retried like one (`retries_lost`, against
    /// `retry_limit`: a shard that stays silent fails the call after about
    /// `(retry_limit + 1) * shard_timeout`); a COMMIT (or `execute`'s statement) left
    /// unanswered is [`Error::CommitOutcomeUnknown`], never retried. No free connection
    /// within it (every pooled one busy) is [`Error::PoolTimeout`], not retried.
    pub shard_timeout: Duration,
}

impl RouterConfig {
    /// A configuration with the default pool size, retry limit and backoff.
    pub fn new(routes_dsn: impl Into<String>, shards: BTreeMap<String, String>) -> Self {
        RouterConfig {
            routes_dsn: routes_dsn.into(),
            shards,
            pool_size: 8,
            retry_limit: 20,
            backoff_base: Duration::from_millis(5),
            backoff_max: Duration::from_millis(200),
            refresh_interval: Duration::from_secs(1),
            listen: true,
            shard_timeout: Duration::from_secs(60),
        }
    }

    /// A builder with the defaults of [`RouterConfig::new`] and no shards yet:
    ///
    /// ```
    /// use id_gen_client::RouterConfig;
    /// let config = RouterConfig::builder("host=/tmp port=5432 dbname=app")
    ///     .shard("s1", "host=/tmp port=5433 dbname=app")
    ///     .shard("s2", "postgres://app@db2:5432/app")
    ///     .retry_limit(10)
    ///     .build()?;
    /// assert_eq!(config.shards.len(), 2);
    /// # Ok::<(), id_gen_client::Error>(())
    /// ```
    pub fn builder(routes_dsn: impl Into<String>) -> RouterConfigBuilder {
        RouterConfigBuilder {
            config: RouterConfig::new(routes_dsn, BTreeMap::new()),
        }
    }

    /// Checks what can be checked without connecting: the DSNs parse, the pool holds at
    /// least one connection, the backoff's first delay is not above its largest,
    /// `shard_timeout` is above zero.
    pub fn validate(&self) -> Result<(), Error> {
        if self.pool_size == 0 {
            return Err(Error::Config("pool_size must be at least 1".into()));
        }
        if self.shard_timeout.is_zero() {
            return Err(Error::Config("shard_timeout must be above zero".into()));
        }
        if self.backoff_base > self.backoff_max {
            return Err(Error::Config(
                "backoff_base must not be above backoff_max".into(),
            ));
        }
        tokio_postgres::Config::from_str(&self.routes_dsn)
            .map_err(|e| Error::Config(format!("routes_dsn: {e}")))?;
        for (name, dsn) in &self.shards {
            tokio_postgres::Config::from_str(dsn)
                .map_err(|e| Error::Config(format!("shard {name}: {e}")))?;
        }
        Ok(())
    }
}

/// Builds a [`RouterConfig`]; see [`RouterConfig::builder`].
#[derive(Debug, Clone)]
#[must_use]
pub struct RouterConfigBuilder {
    config: RouterConfig,
}

impl RouterConfigBuilder {
    /// Adds (or replaces) a shard: its name as `id_gen.route_map.shard` names it, and a DSN.
    pub fn shard(mut self, name: impl Into<String>, dsn: impl Into<String>) -> Self {
        self.config.shards.insert(name.into(), dsn.into());
        self
    }

    /// Connections per shard pool (default 8).
    pub fn pool_size(mut self, size: usize) -> Self {
        self.config.pool_size = size;
        self
    }

    /// Retries after the first attempt (default 20).
    pub fn retry_limit(mut self, retries: u32) -> Self {
        self.config.retry_limit = retries;
        self
    }

    /// The first retry delay and the largest (defaults 5 ms and 200 ms).
    pub fn backoff(mut self, base: Duration, max: Duration) -> Self {
        self.config.backoff_base = base;
        self.config.backoff_max = max;
        self
    }

    /// How often the route version is polled besides LISTEN (default 1 s; zero: never).
    pub fn refresh_interval(mut self, interval: Duration) -> Self {
        self.config.refresh_interval = interval;
        self
    }

    /// LISTEN for route changes (default true); see [`RouterConfig::listen`].
    pub fn listen(mut self, listen: bool) -> Self {
        self.config.listen = listen;
        self
    }

    /// The bound on each step the router takes on a shard (default 60 s); see
    /// [`RouterConfig::shard_timeout`].
    pub fn shard_timeout(mut self, timeout: Duration) -> Self {
        self.config.shard_timeout = timeout;
        self
    }

    /// The configuration, checked by [`RouterConfig::validate`].
    pub fn build(self) -> Result<RouterConfig, Error> {
        self.config.validate()?;
        Ok(self.config)
    }

    /// Builds and connects: [`Router::connect`].
    pub async fn connect(self) -> Result<Router, Error> {
        Router::connect(self.build()?).await
    }
}

/// Counters since the router was connected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Transactions committed through [`Router::transaction`], [`Router::run`],
    /// [`Router::execute`] and `next_id`.
    pub transactions: u64,
    /// Retries after IG001 (route changed).
    pub retries_moved: u64,
    /// Retries after IG002 (route fenced).
    pub retries_fenced: u64,
    /// Retries after a shard connection refused or lost before COMMIT was sent (a shard that
    /// did not answer within `shard_timeout` included).
    pub retries_lost: u64,
    /// Route reads that succeeded (the first one in `connect` included).
    pub refreshes: u64,
}

#[derive(Default)]
struct Counters {
    transactions: AtomicU64,
    retries_moved: AtomicU64,
    retries_fenced: AtomicU64,
    retries_lost: AtomicU64,
    refreshes: AtomicU64,
}

/// Routes transactions by [`Key`] to the owning shard. Cheap to clone (an `Arc` inside);
/// `Send + Sync`. Needs a tokio runtime: it spawns the listener and connection tasks.
/// The listener stops once every clone is dropped.
#[derive(Clone)]
pub struct Router {
    inner: Arc<Inner>,
}

struct Inner {
    config: RouterConfig,
    pools: HashMap<String, ShardPool>,
    table: RwLock<Arc<RouteTable>>,
    /// The listener's client, also used for route reads while its connection is up.
    listener: Mutex<Option<Arc<Client>>>,
    reload_lock: tokio::sync::Mutex<()>,
    reloads_begun: AtomicU64,
    last_good_reload: AtomicU64,
    counters: Counters,
    jitter: Jitter,
    closed: AtomicBool,
    /// Dropped by `close` or with the last `Router` clone: tells the listener task to stop.
    shutdown: Mutex<Option<oneshot::Sender<()>>>,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("routes_dsn_set", &!self.inner.config.routes_dsn.is_empty())
            .field(
                "shards",
                &self.inner.config.shards.keys().collect::<Vec<_>>(),
            )
            .field("version", &self.version())
            .finish()
    }
}

/// A listener connection: its client, and the notification payloads its driver forwards.
/// The payload channel closes when the connection ends.
struct Listener {
    client: Arc<Client>,
    payloads: mpsc::UnboundedReceiver<String>,
}

impl Router {
    /// Connects: builds one pool per shard, opens the listener connection to `routes_dsn`,
    /// runs `LISTEN id_gen_routes`, then reads the routes. Must run inside a tokio runtime.
    /// Fails when the routes cannot be read; a LISTEN that fails does not fail it: the version
    /// poll covers while the listener is retried in the background (100 ms doubling to 5 s)
    /// until the router is closed.
    pub async fn connect(config: RouterConfig) -> Result<Router, Error> {
        config.validate()?;
        let mut pools = HashMap::new();
        for (name, dsn) in &config.shards {
            let pg = tokio_postgres::Config::from_str(dsn)
                .map_err(|e| Error::Config(format!("shard {name}: {e}")))?;
            let manager = Manager::from_config(
                pg,
                NoTls,
                ManagerConfig {
                    recycling_method: RecyclingMethod::Fast,
                },
            );
            let claim_form = Arc::new(KnownClaimForm::default());
            // An idle connection the server closed (a restart) is found lost here, where the
            // pool drops it, not by a request of ours.
            let forget_on_lost = {
                let claim_form = claim_form.clone();
                Hook::sync_fn(move |client, _| {
                    if client.is_closed() {
                        claim_form.forget();
                    }
                    Ok(())
                })
            };
            // Waiting for a free connection and creating one are each bounded by
            // shard_timeout (recycling is a local check, RecyclingMethod::Fast).
            let pool = Pool::builder(manager)
                .max_size(config.pool_size)
                .runtime(Runtime::Tokio1)
                .wait_timeout(Some(config.shard_timeout))
                .create_timeout(Some(config.shard_timeout))
                .recycle_timeout(Some(config.shard_timeout))
                .pre_recycle(forget_on_lost)
                .build()
                .map_err(|e| Error::Config(format!("shard {name}: {e}")))?;
            pools.insert(name.clone(), ShardPool { pool, claim_form });
        }
        // A LISTEN that fails here is not fatal (a pooler in front of the coordinator, say):
        // the version poll covers while the listener task retries it on its backoff.
        let listener = if config.listen {
            open_listener(&config.routes_dsn).await.ok()
        } else {
            None
        };
        let (shutdown_tx, shutdown_rx) = oneshot::channel();
        let inner = Arc::new(Inner {
            config,
            pools,
            table: RwLock::new(Arc::new(RouteTable::empty(0))),
            listener: Mutex::new(listener.as_ref().map(|l| l.client.clone())),
            reload_lock: tokio::sync::Mutex::new(()),
            reloads_begun: AtomicU64::new(0),
            last_good_reload: AtomicU64::new(0),
            counters: Counters::default(),
            jitter: Jitter::new(),
            closed: AtomicBool::new(false),
            shutdown: Mutex::new(Some(shutdown_tx)),
        });
        inner.refresh().await?;
        if inner.config.listen {
            tokio::spawn(listen_loop(Arc::downgrade(&inner), listener, shutdown_rx));
        }
        if !inner.config.refresh_interval.is_zero() {
            tokio::spawn(poll_loop(Arc::downgrade(&inner)));
        }
        Ok(Router { inner })
    }

    /// The configuration this router was connected with.
    pub fn config(&self) -> &RouterConfig {
        &self.inner.config
    }

    /// The route version the current routes belong to.
    pub fn version(&self) -> i64 {
        self.inner.table().version()
    }

    /// The current routes as `(lower_gene, upper_gene, shard)`, inclusive, ordered by gene.
    pub fn routes(&self) -> Vec<(u16, u16, String)> {
        self.inner.table().ranges()
    }

    /// Re-reads the routes from the coordinator now; returns their version.
    pub async fn refresh(&self) -> Result<i64, Error> {
        self.inner.refresh().await
    }

    /// The shard that owns the key's gene by the current routes.
    /// Accepts `Key` or `&Key`.
    pub fn shard_for(&self, key: impl Borrow<Key>) -> Result<String, Error> {
        let gene = key.borrow().try_gene()?;
        let table = self.inner.table();
        let shard = table.lookup(gene)?;
        if !self.inner.pools.contains_key(shard) {
            return Err(Error::UnknownShard(shard.to_owned()));
        }
        Ok(shard.to_owned())
    }

    /// Stops the listener and closes every pool (idle connections at once, busy ones when
    /// they come back); later calls fail with [`Error::Closed`]. Safe to call twice.
    /// Dropping the last clone does the same, a little later.
    pub fn close(&self) {
        let inner = &self.inner;
        inner.closed.store(true, Ordering::SeqCst);
        drop(
            inner
                .shutdown
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take(),
        );
        inner.set_listener(None);
        for shard in inner.pools.values() {
            shard.pool.close();
        }
    }

    /// True once [`Router::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::SeqCst)
    }

    /// Counters since `connect`.
    pub fn stats(&self) -> Stats {
        let c = &self.inner.counters;
        Stats {
            transactions: c.transactions.load(Ordering::Relaxed),
            retries_moved: c.retries_moved.load(Ordering::Relaxed),
            retries_fenced: c.retries_fenced.load(Ordering::Relaxed),
            retries_lost: c.retries_lost.load(Ordering::Relaxed),
            refreshes: c.refreshes.load(Ordering::Relaxed),
        }
    }

    /// Runs `body` in a transaction on the shard that owns the key's gene, with the route
    /// version claimed, and commits. The claim opens the transaction in one round trip:
    /// `/* id_gen.route_claim=gene,version */ BEGIN` on a shard of routing protocol 2 (id_gen
    /// 0.7.16 on), `BEGIN; SELECT id_gen.route_claim(gene, version)` on an older one; a
    /// shard's protocol is read once, before its first claim (and again after a connection
    /// to it was lost).
    ///
    /// `body` is called with a borrowed client once per attempt and returns a boxed future
    /// (see [`TxFuture`]):
    ///
    /// ```no_run
    /// # async fn f(router: id_gen_client::Router) -> Result<(), id_gen_client::Error> {
    /// use id_gen_client::Key;
    /// use tokio_postgres::types::Type;
    /// let owner = 42i64;
    /// let id: i64 = router
    ///     .transaction(Key::Owner(owner), |client| {
    ///         Box::pin(async move {
    ///             let row = client
    ///                 .query_typed_one(
    ///                     "INSERT INTO items (owner, note) VALUES ($1, 'x') RETURNING id",
    ///                     &[(&owner, Type::INT8)],
    ///                 )
    ///                 .await?;
    ///             row.try_get(0)
    ///         })
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// On IG001/IG002 (from the claim, the body or COMMIT) the transaction is rolled back
    /// and the whole of it, `body` included, is retried; so `body` is `FnMut` and may run
    /// more than once. Any other error rolls back and is returned as [`Error::Db`]. After
    /// `retry_limit` retries: [`Error::RetryExhausted`] with the last error. A re-read of the
    /// routes that fails meanwhile (the coordinator down) does not end the retries: the next
    /// attempt runs on the routes held (the listener re-reads them when it can).
    ///
    /// A shard connection refused or lost before COMMIT was sent (a shard that did not
    /// answer the connect or the claim within [`RouterConfig::shard_timeout`] included) is
    /// retried the same way; lost after COMMIT was sent, or COMMIT unanswered within
    /// `shard_timeout`: [`Error::CommitOutcomeUnknown`]. No free pooled connection within
    /// `shard_timeout`: [`Error::PoolTimeout`]. The body's own statements are not bounded.
    ///
    /// The `async move` block may use the client, `Copy` values and borrows of the caller's
    /// environment (`&str`, `&Vec<_>`: write `let v = &v;` before the closure). It may not
    /// move an owned value out of the closure (the closure runs again on a retry): borrow
    /// it, or clone it inside the closure before `async move`. See [`TxFuture`].
    /// Accepts `Key` or `&Key`.
    pub async fn transaction<'env, T, F>(
        &self,
        key: impl Borrow<Key>,
        mut body: F,
    ) -> Result<T, Error>
    where
        F: for<'c> FnMut(&'c Client) -> TxFuture<'env, 'c, T>,
    {
        let gene = key.borrow().try_gene()?;
        let mut retry = Retry::new(&self.inner, gene, true)?;
        loop {
            let (shard, version) = retry.route().await?;
            match run_once(&shard, gene, version, &mut body).await {
                Ok(value) => return Ok(retry.done(value)),
                Err((error, phase)) => retry.after(error, phase).await?,
            }
        }
    }

    /// Like [`Router::transaction`], but `body` runs once: the claim is retried on
    /// IG001/IG002 (no body has run yet), while IG001/IG002 from the body or COMMIT are
    /// returned as [`Error::Db`]. For bodies that must not repeat (they do something
    /// outside the database).
    pub async fn run<'env, T, F>(&self, key: impl Borrow<Key>, body: F) -> Result<T, Error>
    where
        F: for<'c> FnOnce(&'c Client) -> TxFuture<'env, 'c, T>,
    {
        let gene = key.borrow().try_gene()?;
        let mut body = Some(body);
        // run_once calls the body only after a successful claim, and the loop below never
        // retries once it was called, so it is taken at most once.
        let mut once = as_body(|client| (body.take().expect("run: the body runs once"))(client));
        let mut retry = Retry::new(&self.inner, gene, false)?;
        loop {
            let (shard, version) = retry.route().await?;
            match run_once(&shard, gene, version, &mut once).await {
                Ok(value) => return Ok(retry.done(value)),
                Err((error, phase)) => retry.after(error, phase).await?,
            }
        }
    }

    /// One statement on the owning shard in a transaction of its own that declares the
    /// route version in a leading comment (`/* id_gen.route_version=v */ <sql>`), in
    /// autocommit: one statement, one round trip, nothing for a transaction-mode pooler to
    /// keep together. Retried on IG001/IG002, which leave a failed statement without effect.
    /// Returns its rows (none for a statement without).
    /// The statement travels with its COMMIT: a connection lost after it was sent, or no
    /// answer within [`RouterConfig::shard_timeout`], is [`Error::CommitOutcomeUnknown`].
    ///
    /// ```no_run
    /// # async fn f(router: id_gen_client::Router) -> Result<(), id_gen_client::Error> {
    /// use id_gen_client::{tokio_postgres::types::Type, Key};
    /// let owner = 42i64;
    /// let rows = router
    ///     .execute(Key::Owner(owner), "SELECT amount FROM orders WHERE owner_id = $1",
    ///              &[(&owner, Type::INT8)])
    ///     .await?;
    /// # let _ = rows; Ok(()) }
    /// ```
    pub async fn execute(
        &self,
        key: impl Borrow<Key>,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, Error> {
        let gene = key.borrow().try_gene()?;
        let mut retry = Retry::new(&self.inner, gene, true)?;
        loop {
            let (shard, version) = retry.route().await?;
            match execute_once(&shard, version, sql, params).await {
                Ok(rows) => return Ok(retry.done(rows)),
                Err((error, phase)) => retry.after(error, phase).await?,
            }
        }
    }

    /// An owner-affine id from the owning shard: `SELECT id_gen.gene_order_id($1::text, $2)`
    /// in a transaction routed by the owner (bigint, text, or uuid passed as text and cast).
    /// `owner` must be an owner key (`Owner`, `OwnerText`, `OwnerUuid`); accepts `Key` or `&Key`.
    pub async fn next_id(&self, sequence: &str, owner: impl Borrow<Key>) -> Result<i64, Error> {
        let owner = owner.borrow();
        // The owner as the function's argument: bigint, or text (cast to uuid for a uuid).
        let (sql, int_owner, text_owner) = match owner {
            Key::Owner(o) => (
                "SELECT id_gen.gene_order_id($1::text, $2::bigint)",
                *o,
                String::new(),
            ),
            Key::OwnerText(t) => (
                "SELECT id_gen.gene_order_id($1::text, $2::text)",
                0,
                t.clone(),
            ),
            Key::OwnerUuid(u) => (
                "SELECT id_gen.gene_order_id($1::text, $2::text::uuid)",
                0,
                uuid_text(u),
            ),
            Key::Id(_) | Key::Gene(_) => {
                return Err(Error::InvalidKey(
                    "next_id needs an owner key (Owner, OwnerText or OwnerUuid)".into(),
                ))
            }
        };
        let is_int = matches!(owner, Key::Owner(_));
        let text_owner = text_owner.as_str();
        self.transaction(owner, |c| {
            Box::pin(async move {
                let row = if is_int {
                    c.query_typed_one(sql, &[(&sequence, Type::TEXT), (&int_owner, Type::INT8)])
                        .await?
                } else {
                    c.query_typed_one(sql, &[(&sequence, Type::TEXT), (&text_owner, Type::TEXT)])
                        .await?
                };
                row.try_get(0)
            })
        })
        .await
    }
}

/// Where an attempt failed: what was sent decides whether it may be retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Taking a pooled connection (a refused connect: nothing was sent).
    Connect,
    Claim,
    Body,
    /// COMMIT was sent: a connection lost now leaves the outcome unknown.
    Commit,
    /// `execute`'s statement and its COMMIT were sent together.
    Statement,
    /// The body failed after it had ended the claimed transaction itself: never retried.
    EndedByBody,
}

/// The retry state of `transaction`, `run` and `execute` (protocol §4): each routes the
/// gene by the current routes (`route`), runs one attempt, and reports its error with
/// where it failed (`after`): on IG001/IG002 it re-reads the routes (IG001; IG002 every
/// third time) and waits the jittered backoff, at most `retry_limit` times; so for a
/// connection refused or lost before COMMIT was sent (no re-read); an error from the body
/// or COMMIT is retried only when `retry_body`; a connection lost after COMMIT (or the
/// statement) was sent is [`Error::CommitOutcomeUnknown`], never retried. A shard that did not
/// answer within `shard_timeout` ([`Error::ShardTimeout`]) counts as a lost connection; a
/// pool without a free connection ([`Error::PoolTimeout`]) is returned as it is.
struct Retry<'a> {
    inner: &'a Inner,
    gene: u16,
    retry_body: bool,
    attempt: u32,
}

impl<'a> Retry<'a> {
    fn new(inner: &'a Inner, gene: u16, retry_body: bool) -> Result<Self, Error> {
        if inner.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed);
        }
        Ok(Retry {
            inner,
            gene,
            retry_body,
            attempt: 0,
        })
    }

    /// The shard (its name and pool) and route version for the gene. When the gene has no
    /// route on the first attempt, the routes are re-read and looked up once more (they may
    /// have changed since they were read); that look is no attempt of its own.
    async fn route(&mut self) -> Result<(Shard<'a>, i64), Error> {
        let inner = self.inner;
        let mut table = inner.table();
        let (shard, version) = match table.lookup(self.gene) {
            Ok(shard) => (shard.to_owned(), table.version()),
            Err(e) => {
                if self.attempt > 0 || inner.refresh().await? == table.version() {
                    return Err(e);
                }
                table = inner.table();
                (table.lookup(self.gene)?.to_owned(), table.version())
            }
        };
        let (name, shard_pool) = inner
            .pools
            .get_key_value(&shard)
            .ok_or_else(|| Error::UnknownShard(shard.clone()))?;
        let shard = Shard {
            name,
            pool: &shard_pool.pool,
            claim_form: &shard_pool.claim_form,
            timeout: inner.config.shard_timeout,
        };
        Ok((shard, version))
    }

    fn done<T>(&self, value: T) -> T {
        self.inner
            .counters
            .transactions
            .fetch_add(1, Ordering::Relaxed);
        value
    }

    /// After a failed attempt: `Ok` to try again (after the re-read and the wait), or the
    /// error to return.
    async fn after(&mut self, error: Error, phase: Phase) -> Result<(), Error> {
        let inner = self.inner;
        let lost = error.is_connection_lost();
        if lost && matches!(phase, Phase::Commit | Phase::Statement) {
            return Err(Error::CommitOutcomeUnknown(Box::new(error)));
        }
        if phase == Phase::EndedByBody {
            return Err(error);
        }
        let code = match error.route_code() {
            Some(code) => Some(code),
            None if lost => None,
            None => return Err(error),
        };
        if matches!(phase, Phase::Body | Phase::Commit) && !self.retry_body {
            return Err(error);
        }
        if self.attempt >= inner.config.retry_limit {
            return Err(Error::RetryExhausted(Box::new(error)));
        }
        let c = &inner.counters;
        let reread = match code {
            Some(ROUTE_CHANGED) => {
                c.retries_moved.fetch_add(1, Ordering::Relaxed);
                true
            }
            Some(_) => {
                c.retries_fenced.fetch_add(1, Ordering::Relaxed);
                self.attempt % 3 == 2
            }
            None => {
                // The routes said nothing new: wait and try a new connection.
                c.retries_lost.fetch_add(1, Ordering::Relaxed);
                false
            }
        };
        if reread {
            // A failed re-read is not the end: only a closed router is.
            if let Err(Error::Closed) = inner.refresh().await {
                return Err(Error::Closed);
            }
        }
        let delay = inner.jitter.delay(
            self.attempt,
            inner.config.backoff_base,
            inner.config.backoff_max,
        );
        tokio::time::sleep(delay).await;
        self.attempt += 1;
        Ok(())
    }
}

/// Gives a closure the higher-ranked signature of a transaction body (closures do not infer
/// it by themselves).
fn as_body<'env, T, G>(g: G) -> G
where
    G: for<'c> FnMut(&'c Client) -> TxFuture<'env, 'c, T>,
{
    g
}

/// A shard's pool, and the form of the claim its shard takes (as far as known).
struct ShardPool {
    pool: Pool,
    /// Shared with the pool's hook that sees idle connections found closed.
    claim_form: Arc<KnownClaimForm>,
}

/// How a claim opens a transaction on a shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ClaimForm {
    /// `BEGIN; SELECT id_gen.route_claim(g, v)`: every shard takes it.
    Statement,
    /// `/* id_gen.route_claim=g,v */ BEGIN`: no statement of its own; routing protocol 2
    /// (id_gen 0.7.16 on). An older shard would ignore the comment and run the transaction
    /// unclaimed, so it goes only where the probe said so.
    OnBegin,
}

impl ClaimForm {
    /// The form a shard takes by its `id_gen.routing_protocol` (`None`: no such setting, a
    /// shard before 0.7.16). What is not a number is an old shard's answer too.
    fn of_setting(setting: Option<&str>) -> ClaimForm {
        match setting.and_then(|s| s.trim().parse::<i64>().ok()) {
            Some(protocol) if protocol >= CLAIM_ON_BEGIN_PROTOCOL => ClaimForm::OnBegin,
            _ => ClaimForm::Statement,
        }
    }

    /// The claim of `gene` at route `version` with its BEGIN, one simple-protocol message.
    fn sql(self, gene: u16, version: i64) -> String {
        match self {
            ClaimForm::OnBegin => format!("/* id_gen.route_claim={gene},{version} */ BEGIN"),
            ClaimForm::Statement => format!("BEGIN; SELECT id_gen.route_claim({gene}, {version})"),
        }
    }
}

/// The [`ClaimForm`] a shard's probe answered, or none yet (probe before the next claim).
#[derive(Default)]
struct KnownClaimForm(AtomicU8);

impl KnownClaimForm {
    const UNKNOWN: u8 = 0;
    const STATEMENT: u8 = 1;
    const ON_BEGIN: u8 = 2;

    fn get(&self) -> Option<ClaimForm> {
        match self.0.load(Ordering::Acquire) {
            Self::STATEMENT => Some(ClaimForm::Statement),
            Self::ON_BEGIN => Some(ClaimForm::OnBegin),
            _ => None,
        }
    }

    fn set(&self, form: ClaimForm) {
        let value = match form {
            ClaimForm::Statement => Self::STATEMENT,
            ClaimForm::OnBegin => Self::ON_BEGIN,
        };
        self.0.store(value, Ordering::Release);
    }

    /// After a connection to the shard was found lost: a restart may have changed its
    /// library, so the next claim there probes first.
    fn forget(&self) {
        self.0.store(Self::UNKNOWN, Ordering::Release);
    }
}

/// The shard an attempt runs on: its name, its pool, the form of claim it takes, and the
/// bound on each step the router takes there (`shard_timeout`).
struct Shard<'a> {
    name: &'a str,
    pool: &'a Pool,
    claim_form: &'a KnownClaimForm,
    timeout: Duration,
}

impl Shard<'_> {
    /// A pooled connection, not yet idle. Waiting for a free one and opening a new one are
    /// each bounded by `timeout` (the pool's own timeouts): the first running out is
    /// [`Error::PoolTimeout`], the second [`Error::ShardTimeout`] (a lost connection).
    async fn connect(&self) -> Result<Pooled, Error> {
        match self.pool.get().await {
            Ok(object) => Ok(Pooled {
                object: Some(object),
                idle: false,
            }),
            Err(PoolError::Timeout(TimeoutType::Wait)) => Err(Error::PoolTimeout {
                shard: self.name.to_owned(),
                waited: self.timeout,
            }),
            Err(PoolError::Timeout(_)) => Err(self.timed_out("a new connection's startup")),
            Err(e) => Err(Error::Pool(e)),
        }
    }

    /// A request of the router's own, bounded by `timeout`: [`Error::ShardTimeout`] when it
    /// runs out (the request may still be outstanding: the caller closes the connection).
    async fn bounded<T>(
        &self,
        what: &'static str,
        request: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, Error> {
        match tokio::time::timeout(self.timeout, request).await {
            Ok(answer) => answer.map_err(Error::Db),
            Err(_) => Err(self.timed_out(what)),
        }
    }

    /// Opens the transaction with the claim of `gene` at `version`, in the form the shard
    /// takes, probed on this connection first when not known.
    async fn claim(&self, client: &Client, gene: u16, version: i64) -> Result<(), Error> {
        let form = match self.claim_form.get() {
            Some(form) => form,
            None => {
                let form = self.probe(client).await?;
                self.claim_form.set(form);
                form
            }
        };
        self.bounded("the claim", client.batch_execute(&form.sql(gene, version)))
            .await
    }

    /// The claim's form by the shard's routing protocol, read in autocommit. A lost
    /// connection is returned (retried as a claim that found it lost); any other error
    /// answers the statement form, which every shard takes.
    async fn probe(&self, client: &Client) -> Result<ClaimForm, Error> {
        let read = client.query_typed_opt(ROUTING_PROTOCOL_SQL, &[]);
        match self
            .bounded("the probe of the routing protocol", read)
            .await
        {
            Ok(row) => {
                let setting = row.and_then(|row| row.try_get::<_, Option<String>>(0).ok());
                Ok(ClaimForm::of_setting(setting.flatten().as_deref()))
            }
            Err(e) if e.is_connection_lost() => Err(e),
            Err(_) => Ok(ClaimForm::Statement),
        }
    }

    /// After an attempt's error on a connection of this shard: a lost connection makes the
    /// claim's form unknown again.
    fn note_error(&self, e: &Error) {
        if e.is_connection_lost() {
            self.claim_form.forget();
        }
    }

    fn timed_out(&self, what: &'static str) -> Error {
        Error::ShardTimeout {
            shard: self.name.to_owned(),
            what,
            after: self.timeout,
        }
    }
}

/// True for a request that got no answer in time: its connection is closed, not rolled back.
fn unanswered(e: &Error) -> bool {
    matches!(e, Error::ShardTimeout { .. })
}

/// One attempt: a pooled connection, the claim, the body, COMMIT. Rolls back on any error,
/// which comes with the phase it happened in; a connection left with a request unanswered
/// (a step past `shard_timeout`) is closed instead.
async fn run_once<'env, T, F>(
    shard: &Shard<'_>,
    gene: u16,
    version: i64,
    body: &mut F,
) -> Result<T, (Error, Phase)>
where
    F: for<'c> FnMut(&'c Client) -> TxFuture<'env, 'c, T>,
{
    let mut conn = shard.connect().await.map_err(|e| (e, Phase::Connect))?;
    let client: &Client = conn.client();
    let mut phase = Phase::Claim;
    // The check after a route error (IN_TRANSACTION_PROBE) got no answer in time: the
    // connection is closed.
    let mut check_unanswered = false;
    let result = match shard.claim(client, gene, version).await {
        Err(e) => Err(e),
        Ok(()) => {
            phase = Phase::Body;
            match body(client).await {
                Err(e) => {
                    // A route error after the body ended the transaction itself (its statement
                    // ran without the claim): what it committed stays committed.
                    if route_code_of(&e).is_some() {
                        let probe = client.batch_execute(IN_TRANSACTION_PROBE);
                        match shard.bounded("a transaction check", probe).await {
                            Err(Error::Db(probe))
                                if probe.code() == Some(&SqlState::NO_ACTIVE_SQL_TRANSACTION) =>
                            {
                                phase = Phase::EndedByBody;
                            }
                            Err(probe) => check_unanswered = unanswered(&probe),
                            Ok(()) => {}
                        }
                    }
                    Err(Error::Db(e))
                }
                Ok(value) => {
                    phase = Phase::Commit;
                    shard
                        .bounded("COMMIT", client.batch_execute(CHECKED_COMMIT))
                        .await
                        .map(|()| value)
                }
            }
        }
    };
    match result {
        Ok(value) => {
            conn.idle = true;
            Ok(value)
        }
        Err(e) => {
            shard.note_error(&e);
            // After a failed COMMIT, or a claim refused on BEGIN, no transaction is open;
            // ROLLBACK only warns. A ROLLBACK that got no answer in time leaves the
            // connection closed too.
            conn.idle = !check_unanswered
                && !unanswered(&e)
                && shard
                    .bounded("ROLLBACK", client.batch_execute("ROLLBACK"))
                    .await
                    .is_ok();
            Err((e, phase))
        }
    }
}

/// One attempt of `execute`: the statement with the route version in its leading comment
/// ([`declared_sql`]), in autocommit: one statement, one round trip, its own implicit
/// transaction. It is answered within `shard_timeout`, or the connection is closed and the
/// outcome unknown.
async fn execute_once(
    shard: &Shard<'_>,
    version: i64,
    sql: &str,
    params: &[(&(dyn ToSql + Sync), Type)],
) -> Result<Vec<Row>, (Error, Phase)> {
    let mut conn = shard.connect().await.map_err(|e| (e, Phase::Connect))?;
    let client: &Client = conn.client();
    let declared = declared_sql(version, sql);
    let result =
        match tokio::time::timeout(shard.timeout, client.query_typed(&declared, params)).await {
            Ok(answered) => answered.map_err(Error::Db),
            // (the connection is closed: `conn` is not idle)
            Err(_) => Err(shard.timed_out("the statement")),
        };
    // (autocommit: an answered statement, failed or not, left no transaction open)
    conn.idle = !result.as_ref().is_err_and(unanswered) && !client.is_closed();
    result.map_err(|e| {
        shard.note_error(&e);
        (e, Phase::Statement)
    })
}

/// `sql` with the route version it was routed with in a leading comment
/// (`/* id_gen.route_version=N */`, docs/routing-protocol.md §3): the shard checks it for
/// that statement, with no second statement and no session state.
fn declared_sql(version: i64, sql: &str) -> String {
    format!("/* id_gen.route_version={version} */ {sql}")
}

/// A pooled connection that goes back to the pool only when `idle` (no open transaction);
/// otherwise it is detached from the pool and closed when dropped.
struct Pooled {
    object: Option<Object>,
    idle: bool,
}

impl Pooled {
    fn client(&self) -> &Client {
        self.object.as_ref().expect("present until drop")
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if !self.idle {
            if let Some(object) = self.object.take() {
                // Detach: dropping the wrapper aborts its connection task, closing it.
                drop(Object::take(object));
            }
        }
    }
}

impl Inner {
    fn table(&self) -> Arc<RouteTable> {
        self.table.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set_table(&self, table: RouteTable) {
        *self.table.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(table);
    }

    fn set_listener(&self, client: Option<Arc<Client>>) {
        *self.listener.lock().unwrap_or_else(|p| p.into_inner()) = client;
    }

    fn listener_client(&self) -> Option<Arc<Client>> {
        let guard = self.listener.lock().unwrap_or_else(|p| p.into_inner());
        guard.as_ref().filter(|c| !c.is_closed()).cloned()
    }

    async fn refresh(&self) -> Result<i64, Error> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed);
        }
        let requested_after = self.reloads_begun.load(Ordering::SeqCst);
        let _serial = self.reload_lock.lock().await;
        if self.last_good_reload.load(Ordering::SeqCst) > requested_after {
            return Ok(self.table().version());
        }
        let number = self.reloads_begun.fetch_add(1, Ordering::SeqCst) + 1;
        let read = async {
            if let Some(client) = self.listener_client() {
                match read_routes(&client).await {
                    // A lost connection (no SQLSTATE): once more on a connection of our own.
                    Err(Error::Db(e)) if e.code().is_none() => {}
                    done => return done,
                }
            }
            // The listener is down or reconnecting: read on a connection of our own.
            let client = connect_plain(&self.config.routes_dsn).await?;
            read_routes(&client).await
        };
        let table = tokio::time::timeout(ROUTE_READ_TIMEOUT, read)
            .await
            .map_err(|_| Error::Timeout("reading the routes from the coordinator"))??;
        let version = table.version();
        self.set_table(table);
        self.last_good_reload.store(number, Ordering::SeqCst);
        self.counters.refreshes.fetch_add(1, Ordering::Relaxed);
        Ok(version)
    }
}

/// The version poll, until the router is closed or dropped: every `refresh_interval`, the
/// coordinator's route version (on the listener's connection, or one of its own while the
/// listener is down), and a re-read when it is newer than the routes held. A coordinator
/// that does not answer (each poll bounded by ROUTE_READ_TIMEOUT) is tried at the next tick.
async fn poll_loop(weak: Weak<Inner>) {
    let Some(interval) = weak.upgrade().map(|inner| inner.config.refresh_interval) else {
        return;
    };
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await; // (the first tick is at once: the routes were just read)
    loop {
        ticks.tick().await;
        let Some(inner) = weak.upgrade() else { return };
        if inner.closed.load(Ordering::SeqCst) {
            return;
        }
        let polled = tokio::time::timeout(ROUTE_READ_TIMEOUT, async {
            // (unnamed statements, as every route read: nothing prepared for a pooler to lose)
            let row = match inner.listener_client() {
                Some(client) => client.query_typed_opt(ROUTE_VERSION_SQL, &[]).await?,
                None => {
                    connect_plain(&inner.config.routes_dsn)
                        .await?
                        .query_typed_opt(ROUTE_VERSION_SQL, &[])
                        .await?
                }
            };
            match row {
                Some(row) => Ok::<i64, Error>(row.try_get(0)?),
                None => Err(Error::Protocol("route_version() returned no row".into())),
            }
        })
        .await;
        if let Ok(Ok(version)) = polled {
            if version > inner.table().version() {
                let _ = inner.refresh().await; // (failed: the next tick tries again)
            }
        }
    }
}

/// Reads the routes and their version as one snapshot.
async fn read_routes(client: &Client) -> Result<RouteTable, Error> {
    for _ in 0..100 {
        let rows = client.query_typed(ROUTES_SQL, &[]).await?;
        if let Some(first) = rows.first() {
            let version: i64 = first.try_get(3)?;
            let mut ranges = Vec::with_capacity(rows.len());
            for row in &rows {
                let lower: i32 = row.try_get(0)?;
                let upper: i32 = row.try_get(1)?;
                let shard: String = row.try_get(2)?;
                ranges.push((lower as i64, upper as i64, shard));
            }
            return RouteTable::from_rows(ranges, version);
        }
        if let Some(row) = client
            .query_typed_opt(EMPTY_ROUTES_VERSION_SQL, &[])
            .await?
        {
            return Ok(RouteTable::empty(row.try_get(0)?));
        }
        // Routes appeared between the two statements: read them again.
    }
    Err(Error::Protocol(
        "the routes kept appearing and vanishing".into(),
    ))
}

/// A connection whose driver task only logs nothing and ends with the connection.
async fn connect_plain(dsn: &str) -> Result<Client, Error> {
    let (client, connection) = tokio_postgres::connect(dsn, NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// Opens a listener connection: a driver task forwarding notification payloads, then LISTEN.
async fn open_listener(dsn: &str) -> Result<Listener, Error> {
    let (client, mut connection) = tokio_postgres::connect(dsn, NoTls).await?;
    let (tx, payloads) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    if n.channel() == ROUTES_CHANNEL && tx.send(n.payload().to_owned()).is_err() {
                        break; // nobody listens any more
                    }
                }
                Ok(_) => {} // notices
                Err(_) => break,
            }
        }
        // Dropping `tx` tells the listener loop that the connection ended.
    });
    client
        .batch_execute(&format!("LISTEN {ROUTES_CHANNEL}"))
        .await?;
    Ok(Listener {
        client: Arc::new(client),
        payloads,
    })
}

/// Follows route changes until the router is dropped: reloads on a newer payload, and
/// reconnects (LISTEN, then reload) with backoff when the connection ends or a reload fails.
/// `current` is `None` when LISTEN failed in `Router::connect`: the first retry backs off.
async fn listen_loop(
    weak: Weak<Inner>,
    mut current: Option<Listener>,
    mut shutdown: oneshot::Receiver<()>,
) {
    let jitter = Jitter::new();
    let mut failures: u32 = 0;
    if current.is_none() {
        failures = 1;
        let pause = jitter.delay(failures, RECONNECT_BASE, RECONNECT_MAX);
        tokio::select! {
            _ = &mut shutdown => return,
            _ = tokio::time::sleep(pause) => {}
        }
    }
    loop {
        let mut listener = match current.take() {
            Some(l) => l,
            None => {
                let dsn = match weak.upgrade() {
                    Some(inner) => inner.config.routes_dsn.clone(),
                    None => return,
                };
                let opened = tokio::select! {
                    _ = &mut shutdown => return,
                    opened = open_listener(&dsn) => opened,
                };
                let reloaded = match opened {
                    Ok(l) => {
                        let inner = match weak.upgrade() {
                            Some(inner) => inner,
                            None => return,
                        };
                        inner.set_listener(Some(l.client.clone()));
                        // Notifications may have been missed while disconnected.
                        let reloaded = tokio::select! {
                            _ = &mut shutdown => return,
                            r = inner.refresh() => r,
                        };
                        reloaded.map(|_| l)
                    }
                    Err(e) => Err(e),
                };
                match reloaded {
                    Ok(l) => {
                        failures = 0;
                        l
                    }
                    Err(_) => {
                        if let Some(inner) = weak.upgrade() {
                            inner.set_listener(None);
                        }
                        failures = failures.saturating_add(1);
                        let pause = jitter.delay(failures, RECONNECT_BASE, RECONNECT_MAX);
                        tokio::select! {
                            _ = &mut shutdown => return,
                            _ = tokio::time::sleep(pause) => {}
                        }
                        continue;
                    }
                }
            }
        };
        // Connected and up to date: follow the notifications.
        loop {
            let payload = tokio::select! {
                _ = &mut shutdown => return,
                p = listener.payloads.recv() => p,
            };
            let Some(payload) = payload else { break }; // the connection ended
            let inner = match weak.upgrade() {
                Some(inner) => inner,
                None => return,
            };
            let newer = match payload.trim().parse::<i64>() {
                Ok(v) => v > inner.table().version(),
                Err(_) => true, // not a version: re-read to be safe
            };
            if newer {
                let reloaded = tokio::select! {
                    _ = &mut shutdown => return,
                    r = inner.refresh() => r,
                };
                if reloaded.is_err() {
                    break; // reconnect, then re-read
                }
            }
        }
        if let Some(inner) = weak.upgrade() {
            inner.set_listener(None);
        }
        drop(listener);
        // A short pause before reconnecting, so a server that accepts and drops
        // connections is not hammered; later failures back off further.
        let pause = jitter.delay(0, RECONNECT_BASE, RECONNECT_MAX);
        tokio::select! {
            _ = &mut shutdown => return,
            _ = tokio::time::sleep(pause) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync + Clone>() {}

    #[test]
    fn router_is_send_sync_and_clone() {
        assert_send_sync::<Router>();
    }

    #[test]
    fn config_defaults() {
        let c = RouterConfig::new("host=/tmp dbname=x", BTreeMap::new());
        assert_eq!(c.pool_size, 8);
        assert_eq!(c.retry_limit, 20);
        assert_eq!(c.backoff_base, Duration::from_millis(5));
        assert_eq!(c.backoff_max, Duration::from_millis(200));
        assert_eq!(c.refresh_interval, Duration::from_secs(1));
        assert_eq!(c.shard_timeout, Duration::from_secs(60));
        let built = RouterConfig::builder("host=/tmp dbname=x")
            .shard_timeout(Duration::from_millis(300))
            .build()
            .unwrap();
        assert_eq!(built.shard_timeout, Duration::from_millis(300));
        let zero = RouterConfig::builder("host=/tmp dbname=x").shard_timeout(Duration::ZERO);
        assert!(matches!(zero.build(), Err(Error::Config(_))));
    }

    #[test]
    fn the_claim_form_follows_the_routing_protocol() {
        use ClaimForm::{OnBegin, Statement};
        for (setting, form) in [
            (Some("2"), OnBegin),
            (Some("3"), OnBegin),
            (Some(" 2"), OnBegin),
            (Some("1"), Statement),
            (Some("0"), Statement),
            (Some(""), Statement),
            (Some("two"), Statement),
            (None, Statement),
        ] {
            assert_eq!(ClaimForm::of_setting(setting), form, "{setting:?}");
        }
        assert_eq!(OnBegin.sql(7, 12), "/* id_gen.route_claim=7,12 */ BEGIN");
        assert_eq!(
            Statement.sql(7, 12),
            "BEGIN; SELECT id_gen.route_claim(7, 12)"
        );
        let known = KnownClaimForm::default();
        assert_eq!(known.get(), None);
        known.set(OnBegin);
        assert_eq!(known.get(), Some(OnBegin));
        known.set(Statement);
        assert_eq!(known.get(), Some(Statement));
        known.forget();
        assert_eq!(known.get(), None);
    }

    /// Compile-time check of the closure forms callers use; never run against a server.
    #[allow(dead_code)]
    async fn closure_forms(router: Router) -> Result<(), Error> {
        let owner = 42i64;
        let name = String::from("alice");
        let _: u64 = router
            .transaction(Key::Owner(owner), |c| {
                Box::pin(async move {
                    c.execute("UPDATE t SET n = n + 1 WHERE owner = $1", &[&owner])
                        .await
                })
            })
            .await?;
        let key = Key::OwnerText(name.clone());
        let _: Vec<tokio_postgres::Row> = router
            .transaction(&key, |c| {
                let name = name.clone();
                Box::pin(async move { c.query("SELECT * FROM t WHERE name = $1", &[&name]).await })
            })
            .await?;
        // Borrowing the caller's environment.
        let sql = format!("SELECT {}", 1);
        let sql = &sql;
        let ids = vec![1i64, 2];
        let ids = &ids;
        let _: u64 = router
            .transaction(Key::Gene(3), |c: &Client| {
                Box::pin(async move {
                    c.execute(sql.as_str(), &[]).await?;
                    c.execute("SELECT $1::int8", &[&ids[0]]).await
                })
            })
            .await?;
        // A spawned transaction: the future must be Send.
        let r = router.clone();
        let handle = tokio::spawn(async move {
            r.transaction(Key::Id(5), |c| {
                Box::pin(async move { c.batch_execute("SELECT 1").await })
            })
            .await
        });
        let _ = handle.await;
        Ok(())
    }

    #[tokio::test]
    async fn connect_rejects_bad_configuration_without_a_server() {
        let mut shards = BTreeMap::new();
        shards.insert("s1".to_string(), "host=/nonexistent port=1".to_string());
        let mut c = RouterConfig::new("host=/nonexistent port=1", shards.clone());
        c.pool_size = 0;
        assert!(matches!(Router::connect(c).await, Err(Error::Config(_))));
        shards.insert("s2".to_string(), "postgres://[bad".to_string());
        let c = RouterConfig::new("host=/nonexistent port=1", shards);
        assert!(matches!(Router::connect(c).await, Err(Error::Config(_))));
        let c = RouterConfig::new(
            "host=/nonexistent/dir port=1 connect_timeout=1",
            BTreeMap::new(),
        );
        assert!(matches!(Router::connect(c).await, Err(Error::Db(_))));
    }
}
