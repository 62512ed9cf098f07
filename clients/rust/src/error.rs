//! The client's error type and the SQLSTATEs of the route-change protocol (§3).
//!
//! Invariant: database errors reach the caller unchanged inside [`Error::Db`] (their
//! SQLSTATE readable through [`Error::code`]); errors about routing itself have their own
//! variants; [`Error::RetryExhausted`] always wraps the last route error (IG001/IG002) or
//! the last error of the attempt that ran out the retries; [`Error::CommitOutcomeUnknown`]
//! is returned only for a connection lost after COMMIT (or `execute`'s statement) was sent.
//! A shard that does not answer within `shard_timeout` is a lost connection
//! ([`Error::ShardTimeout`]); a pool with no free connection within it is not
//! ([`Error::PoolTimeout`]).

use deadpool_postgres::{PoolError, TimeoutType};
use std::fmt;
use std::time::Duration;

/// SQLSTATE of "route changed": the shard does not own the gene, or the declared route
/// version is older than the shard's. Re-read the routes and retry on the owning shard.
pub const ROUTE_CHANGED: &str = "IG001";
/// SQLSTATE of "route fenced": the gene is fenced for a cut-over. Retry after a short wait.
pub const ROUTE_FENCED: &str = "IG002";
/// SQLSTATEs of a server that ends the session: admin shutdown, crash shutdown, and a
/// server still starting up (a shard that restarts or fails over).
pub const SERVER_ENDED_SESSION: [&str; 3] = ["57P01", "57P02", "57P03"];

/// Everything `id_gen_client` can fail with (new kinds may come: `#[non_exhaustive]`).
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A database error (connection, SQL, or an IG001/IG002 that was not retried).
    Db(tokio_postgres::Error),
    /// The connection pool of a shard could not hand out a connection.
    Pool(deadpool_postgres::PoolError),
    /// The configuration is unusable (a DSN that does not parse, a pool that cannot be built).
    Config(String),
    /// No route covers this gene.
    NoRoute { gene: u16 },
    /// The routes name a shard that has no DSN in [`crate::RouterConfig::shards`].
    UnknownShard(String),
    /// The key cannot be routed (a negative id), or does not fit the call (`next_id` by id).
    InvalidKey(String),
    /// The coordinator answered something the protocol does not allow (a bad route row).
    Protocol(String),
    /// Reading the routes from the coordinator took longer than allowed.
    Timeout(&'static str),
    /// No connection of shard `shard`'s pool came free within
    /// [`crate::RouterConfig::shard_timeout`]: every one was busy (the caller's own load, or
    /// a pool too small for it). No lost connection: not retried.
    PoolTimeout { shard: String, waited: Duration },
    /// Shard `shard` did not answer `what` (a new connection, the probe of its routing
    /// protocol, the claim, `execute`'s statement, COMMIT, ROLLBACK) within
    /// [`crate::RouterConfig::shard_timeout`]. The
    /// connection is treated as lost ([`Error::is_connection_lost`]) and closed, never
    /// pooled: retried before COMMIT was sent, inside [`Error::CommitOutcomeUnknown`] after.
    ShardTimeout {
        shard: String,
        what: &'static str,
        after: Duration,
    },
    /// [`crate::Router::close`] was called.
    Closed,
    /// IG001/IG002, or a refused or lost shard connection (a shard silent past
    /// `shard_timeout` included), kept coming back for `retry_limit` retries after the first
    /// attempt; holds the last error.
    RetryExhausted(Box<Error>),
    /// The shard connection was lost after COMMIT (or `execute`'s statement) was sent and
    /// before its answer, or the shard did not answer it within `shard_timeout`: the
    /// transaction may or may not have committed. Never retried; holds the driver's error
    /// (or [`Error::ShardTimeout`]). The caller decides (look the row up, or make the body
    /// idempotent).
    CommitOutcomeUnknown(Box<Error>),
}

impl Error {
    /// The SQLSTATE of a database error (also of the last error inside `RetryExhausted`).
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Db(e) => e.code().map(|c| c.code()),
            Error::RetryExhausted(last) | Error::CommitOutcomeUnknown(last) => last.code(),
            _ => None,
        }
    }

    /// True when the error says the shard connection is gone or could not be made: a pool
    /// that could not connect, SQLSTATE class 08, the server ending the session
    /// (57P01-57P03), a connection closed or broken under the driver (no SQLSTATE), or a
    /// shard that did not answer within `shard_timeout` ([`Error::ShardTimeout`]). Not a
    /// pool that had no free connection ([`Error::PoolTimeout`]).
    pub fn is_connection_lost(&self) -> bool {
        match self {
            Error::ShardTimeout { .. } => true,
            Error::Pool(PoolError::Closed | PoolError::Timeout(TimeoutType::Wait)) => false,
            // (a connect the server refused for a reason of its own, a password or a
            // database unknown, is raised, not retried)
            Error::Pool(PoolError::Backend(e)) => db_connection_lost(e),
            Error::Pool(_) => true,
            Error::Db(e) => db_connection_lost(e),
            _ => false,
        }
    }

    /// `Some(ROUTE_CHANGED)` or `Some(ROUTE_FENCED)` for a route error, else `None`.
    /// (Not through `RetryExhausted`: an exhausted error is final.)
    pub fn route_code(&self) -> Option<&'static str> {
        match self {
            Error::Db(e) => route_code_of(e),
            _ => None,
        }
    }

    /// True for a route error (IG001 or IG002) that a retry may cure.
    pub fn is_route_error(&self) -> bool {
        self.route_code().is_some()
    }
}

/// Whether a driver error means the connection is gone (class 08, the server ending the
/// session, or the socket closed under it) rather than an answer of the server.
fn db_connection_lost(e: &tokio_postgres::Error) -> bool {
    match e.code() {
        Some(code) => {
            let code = code.code();
            code.starts_with("08") || SERVER_ENDED_SESSION.contains(&code)
        }
        None => {
            e.is_closed()
                || std::error::Error::source(e).is_some_and(|cause| cause.is::<std::io::Error>())
        }
    }
}

/// `Some(ROUTE_CHANGED)` / `Some(ROUTE_FENCED)` when a database error is one of them.
pub fn route_code_of(e: &tokio_postgres::Error) -> Option<&'static str> {
    match e.code().map(|c| c.code()) {
        Some(ROUTE_CHANGED) => Some(ROUTE_CHANGED),
        Some(ROUTE_FENCED) => Some(ROUTE_FENCED),
        _ => None,
    }
}

/// tokio_postgres' Display of a server error is just "db error": the server's message,
/// detail and SQLSTATE instead (or the cause of an error without one).
fn write_db_error(f: &mut fmt::Formatter<'_>, e: &tokio_postgres::Error) -> fmt::Result {
    match e.as_db_error() {
        Some(db) => write!(f, "{db} (SQLSTATE {})", db.code().code()),
        None => match std::error::Error::source(e) {
            Some(cause) => write!(f, "{e}: {cause}"),
            None => write!(f, "{e}"),
        },
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Db(e) => write_db_error(f, e)?,
            Error::Pool(PoolError::Backend(e)) => {
                write!(f, "connection pool: a new connection failed: ")?;
                write_db_error(f, e)?
            }
            Error::Pool(e) => write!(f, "connection pool: {e}")?,
            Error::Config(m) => write!(f, "configuration: {m}")?,
            Error::NoRoute { gene } => write!(f, "no route for gene {gene}")?,
            Error::UnknownShard(s) => write!(
                f,
                "the routes name shard {s:?}, which has no DSN in this Router"
            )?,
            Error::InvalidKey(m) => write!(f, "invalid key: {m}")?,
            Error::Protocol(m) => write!(f, "routing protocol: {m}")?,
            Error::Timeout(what) => write!(f, "timed out: {what}")?,
            Error::PoolTimeout { shard, waited } => write!(
                f,
                "timed out: no free connection to shard {shard:?} within {waited:?} (every \
                 pooled connection busy: raise pool_size or shard_timeout, or lower the load)"
            )?,
            Error::ShardTimeout { shard, what, after } => write!(
                f,
                "timed out: shard {shard:?} did not answer {what} within {after:?} (the \
                 connection was closed as lost)"
            )?,
            Error::Closed => write!(f, "the Router is closed")?,
            Error::RetryExhausted(last) => write!(
                f,
                "retries exhausted (the route kept changing, the gene stayed fenced or the shard \
                 could not be reached); last error: {last}"
            )?,
            Error::CommitOutcomeUnknown(last) => write!(
                f,
                "commit outcome unknown: the shard connection was lost (or the shard did not \
                 answer) after COMMIT was sent, so the transaction may or may not have \
                 committed: {last}"
            )?,
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Db(e) => Some(e),
            Error::Pool(e) => Some(e),
            Error::RetryExhausted(last) | Error::CommitOutcomeUnknown(last) => Some(last.as_ref()),
            _ => None,
        }
    }
}

impl From<tokio_postgres::Error> for Error {
    fn from(e: tokio_postgres::Error) -> Self {
        Error::Db(e)
    }
}

impl From<PoolError> for Error {
    fn from(e: PoolError) -> Self {
        Error::Pool(e)
    }
}
