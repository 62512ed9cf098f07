//! `id_gen_client` — zero-hop routing for id_gen from Rust: transactions go straight to the
//! shard that owns a key's gene, with the route version claimed, following
//! docs/routing-protocol.md (the contract shared with `clients/python`).
//!
//! The names are those of every id_gen client (docs/routing-protocol.md §5): `transaction`
//! (retried), `run` (the body once), `execute` (one statement), `next_id`, `retry_limit`
//! (retries after the first attempt); `clients/protocol-scenarios.json` drives the tests.
//!
//! Invariants kept by the crate: genes come only from `id_gen_core` (no second hash);
//! routes are immutable snapshots replaced whole; a transaction is retried only on the
//! protocol's SQLSTATEs IG001/IG002 and at most `retry_limit` times; no `unsafe`.
//!
//! ```no_run
//! # async fn f() -> Result<(), id_gen_client::Error> {
//! use id_gen_client::{Key, RouterConfig};
//! let router = RouterConfig::builder("host=/tmp port=5432 dbname=app")
//!     .shard("s1", "host=/tmp port=5433 dbname=app")
//!     .shard("s2", "postgres://app@db2:5432/app")
//!     .connect()
//!     .await?;
//! let id = router.next_id("orders", Key::Owner(42)).await?;
//! let n: u64 = router
//!     .transaction(Key::Id(id), |client| {
//!         Box::pin(async move { client.execute("DELETE FROM orders WHERE id = $1", &[&id]).await })
//!     })
//!     .await?;
//! # let _ = n; Ok(()) }
//! ```
#![forbid(unsafe_code)]

pub mod backoff;
pub mod error;
pub mod key;
pub mod router;
pub mod routes;

pub use error::{Error, ROUTE_CHANGED, ROUTE_FENCED};
pub use key::Key;
pub use router::{
    Router, RouterConfig, RouterConfigBuilder, ScopedFuture, Stats, TxFuture, ROUTES_CHANNEL,
};
pub use routes::RouteTable;
/// The tokio-postgres this crate is built on (the client type bodies receive).
pub use tokio_postgres;
