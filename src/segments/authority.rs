//! Central segment authority: a sequence whose segments are reserved on another
//! PostgreSQL server (the *ID database*), so that many servers hand out values of one ID
//! space. The authority is a postgres_fdw foreign server; this database reaches the
//! central `id_gen.sequences` through a foreign table `id_gen."authority__<server>"`
//! (columns `name, max_id, max_value, authority`), created on demand by
//! `create_sequence`/`alter_sequence` as the catalog owner.
//!
//! The refill worker reserves with one remote `UPDATE … RETURNING` (a postgres_fdw direct
//! modify) inside its own transaction; postgres_fdw commits the remote transaction in the
//! local pre-commit, and the worker publishes only after the local COMMIT returned. A
//! local failure after the remote commit leaves a gap on the central, never a repeat.
//!
//! Invariants:
//! * The central row only grows, and a range is above both the central `max_id` and this
//!   node's own `max_id` (the *floor*): switching a sequence from local to central never
//!   repeats a value this node handed out before.
//! * A range never passes the smaller of the central and the local `max_value` (the
//!   *cap*), so the local row's `max_id` (set to the range's end) stays within its CHECK.
//! * A central row that has an authority of its own is refused (no chains, no loops).
//! * The worker's remote work is bounded by [`RESERVE_TIMEOUT_MS`] (a statement timeout
//!   armed by hand: a background worker's SPI gets none from `statement_timeout`).
//! * Credentials come from user mappings (or a passfile), never from a setting.

use crate::access;
use crate::errors::{raise, Code};
use pgrx::prelude::*;
use pgrx::spi::{quote_identifier, SpiClient, SpiResult};
use std::cell::RefCell;

/// The `authority` value that means "this server's own catalog".
pub const LOCAL: &str = "local";

const TABLE_PREFIX: &str = "authority__";

/// Longest server name whose foreign table name fits NAMEDATALEN.
const MAX_SERVER_NAME: usize = 63 - TABLE_PREFIX.len();

/// Bound of one reservation transaction that talks to an authority (connect, remote
/// statements, remote commit).
pub const RESERVE_TIMEOUT_MS: i32 = 5000;

/// `TimeoutId::STATEMENT_TIMEOUT` of PostgreSQL 15's utils/timeout.h (not in pgrx's
/// bindings). InitPostgres registers its handler in every process with a database
/// connection, the refill worker included.
const STATEMENT_TIMEOUT: u32 = 3;

use crate::clock::timeouts::{disable_timeout, enable_timeout_after, get_timeout_indicator};

thread_local! {
    /// The authority the current reservation attempt contacted (worker only).
    static CONTACTED: RefCell<Option<String>> = const { RefCell::new(None) };
    /// The round trip of the attempt's last reservation statement (worker only).
    static ROUND_TRIP_US: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

/// The foreign table through which this database reaches `server`'s catalog.
fn table_of(server: &str) -> String {
    format!(
        "id_gen.{}",
        quote_identifier(format!("{TABLE_PREFIX}{server}"))
    )
}

// ---------------------------------------------------------------------------------------
// create_sequence / alter_sequence

/// Checks the `authority` argument of `create_sequence`/`alter_sequence` for sequence
/// `sequence` and prepares its foreign table. `None`: the sequence is local (`'local'`).
///
/// 42704 if the server does not exist, 22023 if it is not a postgres_fdw server (or the
/// name is unusable), 42501 without USAGE on it; then, best effort, the central must
/// hold a local sequence of that name (42704/22023). An authority that cannot be reached
/// now is only a WARNING: the refill worker retries until it answers.
pub fn checked(server: &str, sequence: &str) -> Option<String> {
    if server == LOCAL {
        return None;
    }
    // The refill worker reaches the authority as the bootstrap superuser (its user
    // mapping, its passfile; postgres_fdw does not require a password of superusers), so
    // choosing where it connects is a superuser's decision.
    // SAFETY: superuser() reads the current user's role attributes.
    if !unsafe { pg_sys::superuser() } {
        raise(
            Code::ERRCODE_INSUFFICIENT_PRIVILEGE,
            "id_gen: only a superuser may set the authority of a sequence",
            Some("The refill worker connects to the authority as the bootstrap superuser; ask a superuser to run alter_sequence(..., authority => ...)."),
        );
    }
    if server.is_empty() || server.len() > MAX_SERVER_NAME {
        raise(
            Code::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("id_gen: authority must be 'local' or the name of a postgres_fdw foreign server of at most {MAX_SERVER_NAME} bytes, got {server:?}"),
            None,
        );
    }
    require_fdw_server(server);
    access::as_catalog_owner(|| ensure_table(server));
    probe(server, sequence);
    Some(server.to_owned())
}

/// 42704 / 22023 / 42501 unless `server` is a postgres_fdw server the caller may use.
fn require_fdw_server(server: &str) {
    let found = Spi::get_two_with_args::<String, bool>(
        "SELECT coalesce(h.proname::pg_catalog.text, ''), \
                pg_catalog.has_server_privilege(s.oid, 'USAGE') \
         FROM pg_catalog.pg_foreign_server s \
         JOIN pg_catalog.pg_foreign_data_wrapper w ON w.oid OPERATOR(pg_catalog.=) s.srvfdw \
         LEFT JOIN pg_catalog.pg_proc h ON h.oid OPERATOR(pg_catalog.=) w.fdwhandler \
         WHERE s.srvname OPERATOR(pg_catalog.=) $1::pg_catalog.name",
        &[server.into()],
    );
    let (handler, usable) = match found {
        Ok((h, u)) => (h.unwrap_or_default(), u.unwrap_or(false)),
        Err(pgrx::spi::Error::InvalidPosition) => raise(
            Code::ERRCODE_UNDEFINED_OBJECT,
            format!("id_gen: foreign server \"{server}\" does not exist"),
            Some("Create it first: CREATE EXTENSION postgres_fdw; CREATE SERVER central FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '...', port '5432', dbname '...', connect_timeout '2'); CREATE USER MAPPING FOR PUBLIC SERVER central OPTIONS (user '...', password '...'); or pass authority => 'local'."),
        ),
        Err(e) => crate::errors::spi_failed(e),
    };
    if handler != "postgres_fdw_handler" {
        raise(
            Code::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("id_gen: foreign server \"{server}\" is not a postgres_fdw server"),
            Some("An authority is a server of FOREIGN DATA WRAPPER postgres_fdw that points at the ID database."),
        );
    }
    if !usable {
        raise(
            Code::ERRCODE_INSUFFICIENT_PRIVILEGE,
            format!("id_gen: permission denied for foreign server \"{server}\""),
            Some(
                "Its owner or a superuser can allow it: GRANT USAGE ON FOREIGN SERVER ... TO ...;",
            ),
        );
    }
}

/// Creates the foreign table over `server`'s `id_gen.sequences` unless it exists (as the
/// catalog owner; a table of that name on another server is replaced).
fn ensure_table(server: &str) {
    let relname = format!("{TABLE_PREFIX}{server}");
    let on_server = Spi::get_one_with_args::<bool>(
        "SELECT coalesce(s.srvname OPERATOR(pg_catalog.=) $2::pg_catalog.name, false) \
         FROM pg_catalog.pg_class c \
         LEFT JOIN pg_catalog.pg_foreign_table f ON f.ftrelid OPERATOR(pg_catalog.=) c.oid \
         LEFT JOIN pg_catalog.pg_foreign_server s ON s.oid OPERATOR(pg_catalog.=) f.ftserver \
         WHERE c.relnamespace OPERATOR(pg_catalog.=) 'id_gen'::pg_catalog.regnamespace \
           AND c.relname OPERATOR(pg_catalog.=) $1::pg_catalog.name",
        &[relname.as_str().into(), server.into()],
    );
    let table = table_of(server);
    let run = |sql: &str| Spi::run(sql).unwrap_or_else(|e| crate::errors::spi_failed(e));
    match on_server {
        Ok(Some(true)) => return,
        Ok(_) => run(&format!("DROP FOREIGN TABLE {table}")),
        Err(pgrx::spi::Error::InvalidPosition) => {}
        Err(e) => crate::errors::spi_failed(e),
    }
    run(&format!(
        "CREATE FOREIGN TABLE {table} (name text, max_id bigint, max_value bigint, authority text) \
         SERVER {} OPTIONS (schema_name 'id_gen', table_name 'sequences')",
        quote_identifier(server)
    ));
    run(&format!(
        "COMMENT ON FOREIGN TABLE {table} IS {}",
        pgrx::spi::quote_literal(format!(
            "id_gen: the sequences of authority server \"{server}\" (the ID database), where the refill worker reserves segments."
        ))
    ));
}

/// Reads the central row of `sequence` (as the catalog owner, in a subtransaction, so a
/// connection failure only warns).
fn probe(server: &str, sequence: &str) {
    let table = table_of(server);
    let found = access::as_catalog_owner(|| {
        in_subtransaction(|| {
            Spi::get_one_with_args::<bool>(
                &format!("SELECT authority IS NULL FROM {table} WHERE name = $1"),
                &[sequence.into()],
            )
        })
    });
    match found {
        Ok(Ok(Some(true))) => {}
        Ok(Ok(Some(false) | None)) => raise(
            Code::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("id_gen: on authority \"{server}\", sequence \"{sequence}\" has an authority of its own"),
            Some("The sequence on the ID database must be local (authority NULL there)."),
        ),
        Ok(Err(pgrx::spi::Error::InvalidPosition)) => raise(
            Code::ERRCODE_UNDEFINED_OBJECT,
            format!("id_gen: sequence \"{sequence}\" does not exist on authority \"{server}\""),
            Some("Create it on the ID database first: SELECT id_gen.create_sequence('name');"),
        ),
        Ok(Err(e)) => crate::errors::spi_failed(e),
        Err((code, message)) if unreachable(code) => pgrx::warning!(
            "id_gen: authority \"{server}\" cannot be reached now ({message}); sequence \"{sequence}\" uses it anyway, and its refill worker retries until it answers"
        ),
        Err((code, message)) => raise(
            code,
            format!("id_gen: authority \"{server}\" cannot be used: {message}"),
            Some("The ID database needs id_gen with a sequence of this name, and this server a user mapping for the bootstrap superuser (or PUBLIC) on the foreign server."),
        ),
    }
}

/// Connection failures (class 08) and shutdowns (57P01..57P03): the server may come back.
fn unreachable(code: PgSqlErrorCode) -> bool {
    let state = sqlstate(code);
    state.starts_with("08") || matches!(state.as_str(), "57P01" | "57P02" | "57P03")
}

/// The five-character SQLSTATE of a code (PostgreSQL packs it 6 bits a character).
fn sqlstate(code: PgSqlErrorCode) -> String {
    let mut v = code as i32;
    (0..5)
        .map(|_| {
            let c = ((v & 0x3F) as u8 + b'0') as char;
            v >>= 6;
            c
        })
        .collect()
}

/// Runs `f` in a subtransaction; an ERROR rolls back only the subtransaction and comes
/// back as `(code, message: detail)`.
fn in_subtransaction<R>(
    f: impl FnOnce() -> R + std::panic::UnwindSafe,
) -> Result<R, (PgSqlErrorCode, String)> {
    // SAFETY: the plpgsql exception-block protocol: remember the memory context and
    // resource owner, start an internal subtransaction, and on both exits release or
    // roll it back and restore them. pgrx has copied and flushed the error state before
    // the catch closure runs.
    let (context, owner) = unsafe {
        let saved = (pg_sys::CurrentMemoryContext, pg_sys::CurrentResourceOwner);
        pg_sys::BeginInternalSubTransaction(std::ptr::null());
        pg_sys::MemoryContextSwitchTo(saved.0);
        saved
    };
    let restore = move || unsafe {
        pg_sys::MemoryContextSwitchTo(context);
        pg_sys::CurrentResourceOwner = owner;
    };
    PgTryBuilder::new(move || {
        let r = f();
        // SAFETY: the subtransaction started above is the current one and healthy.
        unsafe { pg_sys::ReleaseCurrentSubTransaction() };
        restore();
        Ok(r)
    })
    .catch_others(move |e| {
        let r = match e {
            pg_sys::panic::CaughtError::PostgresError(r)
            | pg_sys::panic::CaughtError::ErrorReport(r)
            | pg_sys::panic::CaughtError::RustPanic { ereport: r, .. } => r,
        };
        // SAFETY: after a caught ERROR the subtransaction is aborted; roll it back.
        unsafe {
            pg_sys::MemoryContextSwitchTo(context);
            pg_sys::RollbackAndReleaseCurrentSubTransaction();
        }
        restore();
        Err((r.sql_error_code(), with_detail(r.message(), r.detail())))
    })
    .execute()
}

/// `message: detail` on one line, the form in which reservation errors are shown.
pub fn with_detail(message: &str, detail: Option<&str>) -> String {
    let text = match detail {
        Some(d) if !d.is_empty() => format!("{message}: {d}"),
        _ => message.to_owned(),
    };
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

// ---------------------------------------------------------------------------------------
// The refill worker

/// What an authority reservation got.
pub enum Remote {
    /// `[first, last]` is ours once the worker's transaction commits.
    Range { first: i64, last: i64 },
    /// Fewer than requested are left before the cap (`left` of them; nothing reserved).
    Short { left: u64 },
}

/// Reserves `n` values of `name` on `server`, above `floor` (this node's `max_id`) and
/// at most up to `cap` (this node's `max_value`). With `exact`, fewer than `n` left is
/// [`Remote::Short`]; otherwise the rest is taken. Runs in the worker's transaction,
/// which [`start_attempt`]/[`finish_attempt`] bracket. An unusable central row (missing,
/// or with an authority of its own) is an ERROR: the worker retries.
pub fn reserve(
    client: &mut SpiClient<'_>,
    server: &str,
    name: &str,
    floor: i64,
    cap: i64,
    n: u64,
    exact: bool,
) -> SpiResult<Remote> {
    CONTACTED.with(|c| *c.borrow_mut() = Some(server.to_owned()));
    // SAFETY: arms the statement timeout of this process; finish_attempt disarms it.
    unsafe { enable_timeout_after(STATEMENT_TIMEOUT, RESERVE_TIMEOUT_MS) };
    let table = table_of(server);
    // The larger of the central max_id and our floor, and the smaller of both caps:
    // CASE rather than GREATEST/LEAST, which postgres_fdw does not ship.
    const BASE: &str = "(CASE WHEN max_id < $3 THEN $3 ELSE max_id END)";
    const TOP: &str = "(CASE WHEN max_value < $4 THEN max_value ELSE $4 END)";
    let mut n = n.max(1) as i64;
    for _ in 0..3 {
        let sent = std::time::Instant::now();
        let moved = client.update(
            &format!(
                "UPDATE {table} SET max_id = {BASE} + $2 \
                 WHERE name = $1 AND authority IS NULL AND {BASE} <= {TOP} - $2 RETURNING max_id"
            ),
            None,
            &[name.into(), n.into(), floor.into(), cap.into()],
        )?;
        ROUND_TRIP_US.with(|r| r.set(Some(sent.elapsed().as_micros() as u64)));
        if !moved.is_empty() {
            if let Some(last) = moved.first().get_one::<i64>()? {
                return Ok(Remote::Range {
                    first: last - n + 1,
                    last,
                });
            }
        }
        let row = client.select(
            &format!("SELECT {TOP} - {BASE}, authority IS NULL FROM {table} WHERE name = $1"),
            Some(1),
            &[name.into(), n.into(), floor.into(), cap.into()],
        )?;
        if row.is_empty() {
            raise(
                Code::ERRCODE_UNDEFINED_OBJECT,
                format!("sequence \"{name}\" does not exist on authority \"{server}\""),
                None,
            );
        }
        let first = row.first();
        if first.get::<bool>(2)? != Some(true) {
            raise(
                Code::ERRCODE_INVALID_PARAMETER_VALUE,
                format!(
                    "on authority \"{server}\", sequence \"{name}\" has an authority of its own"
                ),
                None,
            );
        }
        let left = first.get::<i64>(1)?.unwrap_or(0);
        if left <= 0 || exact {
            return Ok(Remote::Short {
                left: left.max(0) as u64,
            });
        }
        n = n.min(left); // take the rest before the cap
    }
    raise(
        Code::ERRCODE_T_R_SERIALIZATION_FAILURE,
        format!("sequence \"{name}\" on authority \"{server}\" kept changing under us"),
        None,
    )
}

/// Before a reservation transaction: forget the previous attempt.
pub fn start_attempt() {
    CONTACTED.with(|c| *c.borrow_mut() = None);
    ROUND_TRIP_US.with(|r| r.set(None));
}

/// The round trip of the attempt's last reservation statement on the authority, in µs
/// (postgres_fdw's remote UPDATE, a connect included when it made one; not the remote
/// commit, which runs in the local commit), if the authority answered one.
pub fn round_trip_us() -> Option<u64> {
    ROUND_TRIP_US.with(|r| r.get())
}

/// After a reservation transaction ended (committed or aborted): disarms the timeout
/// and returns the authority the attempt contacted, if any.
pub fn finish_attempt() -> Option<String> {
    let contacted = CONTACTED.with(|c| c.borrow_mut().take());
    if contacted.is_some() {
        // SAFETY: disarms the timeout armed in `reserve`; if it fired after the
        // transaction ended, the cancel it requested is void (nothing runs any more).
        unsafe {
            disable_timeout(STATEMENT_TIMEOUT, false);
            if get_timeout_indicator(STATEMENT_TIMEOUT, true) {
                pg_sys::QueryCancelPending = 0;
            }
        }
    }
    contacted
}
