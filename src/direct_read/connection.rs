//! id_gen's own connections for direct reads: at most one per (foreign server, user) in a
//! backend, opened on first use and kept, made from the same options postgres_fdw would use
//! (the shard's foreign server and the user's mapping), and waited on only through the
//! process latch, so that every wait can be cancelled and has a bound.
//!
//! | step | bound |
//! |---|---|
//! | connect (TCP, TLS, authentication) | the server's or mapping's `connect_timeout`, else 5 s |
//! | send a statement, wait for its rows | `id_gen.direct_read_timeout` (60 s) from the send |
//! | a peer that stops answering | the same bound; TCP keepalives and `tcp_user_timeout` 10 s for a dead one |
//!
//! Invariants:
//!   * the conninfo is built in memory, from the libpq keywords of the foreign server and
//!     the user mapping (the same list as `id_gen.remote_link_conninfo`), after id_gen's
//!     bounds, with the coordinator's encoding last; it is never logged or shown (it holds
//!     the password);
//!   * a role that is not a superuser must authenticate with a password, as postgres_fdw
//!     demands (2F003), unless a superuser set `password_required 'false'` in its mapping;
//!   * the remote session reads with `search_path = pg_catalog` and postgres_fdw's
//!     transmission settings (UTC, ISO dates, postgres intervals, extra_float_digits 3);
//!   * a connection left busy (a statement interrupted, cancelled or failed while rows were
//!     on the way) is closed, never waited on for a cancel, and opened again on next use;
//!     one whose server or user mapping changed is closed once idle;
//!   * nothing here holds a RefCell borrow across a call into PostgreSQL or libpq.

use super::libpq::{self, Api, PGconn, PGresult};
use crate::routing_guard::raise::RemoteError;
use pgrx::pg_sys;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::ffi::{c_char, c_int, CStr, CString};
use std::time::{Duration, Instant};

/// The libpq keywords taken from a foreign server's and a user mapping's options (the list of
/// `id_gen.remote_link_conninfo`, sql/cluster/remote.sql, and application_name; scripts/test.sh
/// tier 1 checks that the two lists agree); postgres_fdw's own options (fetch_size,
/// updatable, ...) are not libpq's.
const LIBPQ_KEYWORDS: &[&str] = &[
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "passfile",
    "service",
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "sslcrl",
    "sslcrldir",
    "sslsni",
    "sslpassword",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "gssencmode",
    "krbsrvname",
    "gsslib",
    "requirepeer",
    "require_auth",
    "channel_binding",
    "connect_timeout",
    "options",
    "target_session_attrs",
    "load_balance_hosts",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
    "application_name",
];

/// postgres_fdw's own options of a foreign server (not libpq's), which a direct read
/// ignores; any other option that is not in LIBPQ_KEYWORDS (a newer libpq or postgres_fdw
/// option: sslnegotiation, gssdelegation, use_scram_passthrough ...) leaves the server's
/// reads to postgres_fdw.
const FDW_OWN_OPTIONS: &[&str] = &[
    "use_remote_estimate",
    "fdw_startup_cost",
    "fdw_tuple_cost",
    "extensions",
    "updatable",
    "truncatable",
    "fetch_size",
    "batch_size",
    "async_capable",
    "parallel_commit",
    "parallel_abort",
    "keep_connections",
    "analyze_sampling",
    "password_required",
];

/// The remote session's settings: postgres_fdw's (configure_remote_session).
const SESSION_SETUP: &CStr = c"SET search_path = pg_catalog; SET timezone = 'UTC'; SET datestyle = ISO; SET intervalstyle = postgres; SET extra_float_digits = 3";

/// One connection and what the status function shows of it.
struct Link {
    conn: *mut PGconn,
    busy: bool,
    stale: bool,
    reads: i64,
    connected_at: pg_sys::TimestampTz,
}

thread_local! {
    static LINKS: RefCell<HashMap<(u32, u32), Link>> = RefCell::new(HashMap::new());
    /// (server, user) pairs a started direct read holds until it ends: another portal of the
    /// session (the extended protocol interleaves them) reads those through postgres_fdw.
    static CLAIMED: RefCell<HashSet<(u32, u32)>> = RefCell::new(HashSet::new());
    /// Whether a (server, user) pair's options allow a direct read (see `usable`).
    static USABLE: RefCell<HashMap<(u32, u32), bool>> = RefCell::new(HashMap::new());
}

/// The cache key of a (server, user) pair.
fn key(server: pg_sys::Oid, user: pg_sys::Oid) -> (u32, u32) {
    (server.to_u32(), user.to_u32())
}

/// Claims (server, user) for a started read; false when another read holds it.
pub fn claim(server: pg_sys::Oid, user: pg_sys::Oid) -> bool {
    CLAIMED.with(|c| c.borrow_mut().insert(key(server, user)))
}

/// Gives a claim back.
pub fn release(server: pg_sys::Oid, user: pg_sys::Oid) {
    CLAIMED.with(|c| c.borrow_mut().remove(&key(server, user)));
}

/// Whether a started read holds (server, user).
pub fn claimed(server: pg_sys::Oid, user: pg_sys::Oid) -> bool {
    CLAIMED.with(|c| c.borrow().contains(&key(server, user)))
}

/// Whether the server's and the user mapping's options let a direct read connect as
/// postgres_fdw would: only libpq keywords id_gen passes on and postgres_fdw's own options,
/// and, for a role that is not a superuser, a non-empty password in the mapping (or
/// `password_required 'false'`, which only a superuser can set). Otherwise (no mapping, GSSAPI
/// delegation, SCRAM pass-through, an option id_gen does not know) the scan is left to
/// postgres_fdw, which connects or refuses as it does. Cached per backend until a foreign
/// server, user mapping or role changes.
pub fn usable(server: pg_sys::Oid, user: pg_sys::Oid) -> bool {
    let key = key(server, user);
    if let Some(known) = USABLE.with(|u| u.borrow().get(&key).copied()) {
        return known;
    }
    let answer = options_allow(server, user);
    USABLE.with(|u| u.borrow_mut().insert(key, answer));
    answer
}

fn options_allow(server: pg_sys::Oid, user: pg_sys::Oid) -> bool {
    // SAFETY: syscache lookups that return NULL or false for what is missing; the mapping
    // is read only once it is known to exist (GetUserMapping raises otherwise).
    unsafe {
        let srv = pg_sys::GetForeignServerExtended(server, pg_sys::FSV_MISSING_OK as u16);
        if srv.is_null() {
            return false;
        }
        let mapped = |u: pg_sys::Oid| {
            pg_sys::SearchSysCacheExists(
                pg_sys::SysCacheIdentifier::USERMAPPINGUSERSERVER as i32,
                pg_sys::Datum::from(u),
                pg_sys::Datum::from(server),
                pg_sys::Datum::from(0usize),
                pg_sys::Datum::from(0usize),
            )
        };
        if !mapped(user) && !mapped(pg_sys::Oid::INVALID) {
            return false;
        }
        let um = pg_sys::GetUserMapping(user, server);
        let srv_opts = options((*srv).options);
        let um_opts = options((*um).options);
        let known = |k: &str| LIBPQ_KEYWORDS.contains(&k) || FDW_OWN_OPTIONS.contains(&k);
        if !srv_opts.iter().chain(um_opts.iter()).all(|(k, _)| known(k)) {
            return false;
        }
        pg_sys::superuser_arg(user) || !password_required(&um_opts) || has_password(&um_opts)
    }
}

fn password_required(um_opts: &[(String, String)]) -> bool {
    !um_opts.iter().any(|(k, v)| {
        k == "password_required" && matches!(v.as_str(), "false" | "off" | "0" | "no")
    })
}

fn has_password(um_opts: &[(String, String)]) -> bool {
    um_opts
        .iter()
        .any(|(k, v)| k == "password" && !v.is_empty())
}

/// What `id_gen.direct_read_connections()` shows of one connection.
pub struct LinkStatus {
    pub server: pg_sys::Oid,
    pub user: pg_sys::Oid,
    pub connected_at: pg_sys::TimestampTz,
    pub reads: i64,
    pub busy: bool,
}

/// This backend's connections.
pub fn status() -> Vec<LinkStatus> {
    LINKS.with(|l| {
        l.borrow()
            .iter()
            .map(|(&(s, u), link)| LinkStatus {
                server: pg_sys::Oid::from(s),
                user: pg_sys::Oid::from(u),
                connected_at: link.connected_at,
                reads: link.reads,
                busy: link.busy,
            })
            .collect()
    })
}

/// Marks every connection stale (a foreign server or user mapping changed): each is closed
/// when next asked for, or now if idle.
pub fn forget_all() {
    USABLE.with(|u| u.borrow_mut().clear());
    let closing: Vec<*mut PGconn> = LINKS.with(|l| {
        let mut links = l.borrow_mut();
        links.values_mut().for_each(|link| link.stale = true);
        let idle: Vec<(u32, u32)> = links
            .iter()
            .filter(|(_, link)| !link.busy)
            .map(|(k, _)| *k)
            .collect();
        idle.iter()
            .filter_map(|k| links.remove(k))
            .map(|link| link.conn)
            .collect()
    });
    close_all(closing);
}

/// Closes the connection of (server, user), whatever its state.
pub fn discard(server: pg_sys::Oid, user: pg_sys::Oid) {
    let key = key(server, user);
    let conn = LINKS.with(|l| l.borrow_mut().remove(&key).map(|link| link.conn));
    close_all(conn.into_iter().collect());
}

fn close_all(conns: Vec<*mut PGconn>) {
    if let Some(api) = libpq::api() {
        for c in conns {
            // SAFETY: a connection this module opened and has just forgotten; PQfinish
            // sends a Terminate without waiting and frees it.
            unsafe { (api.PQfinish)(c) };
        }
    }
}

/// Marks the connection of (server, user) busy or idle, counting a finished read.
pub fn set_busy(server: pg_sys::Oid, user: pg_sys::Oid, busy: bool) {
    let key = key(server, user);
    LINKS.with(|l| {
        if let Some(link) = l.borrow_mut().get_mut(&key) {
            if link.busy && !busy {
                link.reads += 1;
            }
            link.busy = busy;
        }
    });
}

/// An idle connection of (server, user), opened now if there is none (or the one there was
/// left busy or stale), and whether it was opened just now.
pub fn acquire(
    api: &Api,
    server: pg_sys::Oid,
    user: pg_sys::Oid,
) -> Result<(*mut PGconn, bool), RemoteError> {
    let key = key(server, user);
    let reusable = LINKS.with(|l| {
        let mut links = l.borrow_mut();
        match links.get(&key) {
            Some(link) if !link.busy && !link.stale => Some(Ok(link.conn)),
            Some(_) => Some(Err(links.remove(&key).map(|link| link.conn))),
            None => None,
        }
    });
    match reusable {
        Some(Ok(conn)) => {
            // What the shard sent while the connection was idle (a FATAL error before it
            // closed it: a restart, a terminated backend, idle_session_timeout) is read
            // first, without waiting: such a connection is replaced, not used.
            // SAFETY: an idle connection of ours; PQconsumeInput does not block on it.
            if unsafe { (api.PQconsumeInput)(conn) } != 0 && !lost(api, conn) {
                return Ok((conn, false));
            }
            discard(server, user);
        }
        Some(Err(old)) => close_all(old.into_iter().collect()),
        None => {}
    }
    let conn = connect(api, server, user)?;
    // SAFETY: reads the clock.
    let connected_at = unsafe { pg_sys::GetCurrentTimestamp() };
    LINKS.with(|l| {
        l.borrow_mut().insert(
            key,
            Link {
                conn,
                busy: false,
                stale: false,
                reads: 0,
                connected_at,
            },
        )
    });
    Ok((conn, true))
}

/// The options of a foreign server or user mapping as (keyword, value).
///
/// # Safety
/// `options` must be NIL or a List of DefElem with string values.
unsafe fn options(options: *mut pg_sys::List) -> Vec<(String, String)> {
    // SAFETY: as the caller promises; defGetString reads a DefElem's value as text.
    unsafe {
        crate::pg_list::list_pointers(options)
            .into_iter()
            .map(|p| {
                let def = p as *mut pg_sys::DefElem;
                (
                    CStr::from_ptr((*def).defname)
                        .to_string_lossy()
                        .into_owned(),
                    CStr::from_ptr(pg_sys::defGetString(def))
                        .to_string_lossy()
                        .into_owned(),
                )
            })
            .collect()
    }
}

fn error(
    sqlstate: &str,
    message: String,
    detail: Option<String>,
    hint: Option<&str>,
) -> RemoteError {
    RemoteError::new(sqlstate, &message, detail.as_deref(), hint, None)
}

/// Whether a connection is lost (its status bad).
pub fn lost(api: &Api, conn: *mut PGconn) -> bool {
    // SAFETY: a connection of ours; PQstatus only reads it.
    let status = unsafe { (api.PQstatus)(conn) };
    status != libpq::CONNECTION_OK
}

fn libpq_message(api: &Api, conn: *mut PGconn) -> String {
    // SAFETY: PQerrorMessage returns a string owned by the connection, copied here.
    unsafe {
        CStr::from_ptr((api.PQerrorMessage)(conn))
            .to_string_lossy()
            .trim_end()
            .to_string()
    }
}

/// Opens and sets up a connection, within the connect bound.
fn connect(api: &Api, server: pg_sys::Oid, user: pg_sys::Oid) -> Result<*mut PGconn, RemoteError> {
    // SAFETY: syscache lookups; GetUserMapping raises postgres_fdw's own error when the
    // user has no mapping (as the scan through postgres_fdw would).
    let (srv_opts, um_opts) = unsafe {
        let s = pg_sys::GetForeignServer(server);
        let um = pg_sys::GetUserMapping(user, server);
        (options((*s).options), options((*um).options))
    };
    let name = name_of(server);
    // SAFETY: a catalog lookup of the role.
    let superuser = unsafe { pg_sys::superuser_arg(user) };
    let needs_password = !superuser && password_required(&um_opts);
    if needs_password && !has_password(&um_opts) {
        // `usable` said otherwise when the plan was made: the mapping changed since.
        return Err(error(
            "2F003",
            "password or GSSAPI delegated credentials required".into(),
            Some(format!(
                "Non-superusers must provide a password in the user mapping of server {name}."
            )),
            None,
        ));
    }
    let connect_seconds: u64 = srv_opts
        .iter()
        .chain(um_opts.iter())
        .filter(|(k, _)| k == "connect_timeout")
        .filter_map(|(_, v)| v.trim().parse::<u64>().ok())
        .filter(|&s| s > 0)
        .collect::<Vec<_>>()
        .pop()
        .unwrap_or(5);
    let mut pairs: Vec<(String, String)> = vec![
        ("connect_timeout".into(), connect_seconds.to_string()),
        ("keepalives".into(), "1".into()),
        ("keepalives_idle".into(), "5".into()),
        ("keepalives_interval".into(), "2".into()),
        ("keepalives_count".into(), "3".into()),
        ("tcp_user_timeout".into(), "10000".into()),
        (
            "fallback_application_name".into(),
            "id_gen direct read".into(),
        ),
    ];
    pairs.extend(
        srv_opts
            .into_iter()
            .chain(um_opts)
            .filter(|(k, _)| LIBPQ_KEYWORDS.contains(&k.as_str())),
    );
    // SAFETY: the database's encoding name, a static string.
    let encoding = unsafe { CStr::from_ptr(pg_sys::GetDatabaseEncodingName()) }
        .to_string_lossy()
        .into_owned();
    pairs.push(("client_encoding".into(), encoding));
    let cstrings: Vec<(CString, CString)> = pairs
        .into_iter()
        .map(|(k, v)| {
            (
                CString::new(k.replace('\0', "")).expect("no NUL"),
                CString::new(v.replace('\0', "")).expect("no NUL"),
            )
        })
        .collect();
    let mut keywords: Vec<*const c_char> = cstrings.iter().map(|(k, _)| k.as_ptr()).collect();
    let mut values: Vec<*const c_char> = cstrings.iter().map(|(_, v)| v.as_ptr()).collect();
    keywords.push(std::ptr::null());
    values.push(std::ptr::null());
    let deadline = Instant::now() + Duration::from_secs(connect_seconds);
    // SAFETY: NULL-terminated arrays of C strings that outlive the call (libpq copies
    // them); expand_dbname 0, as postgres_fdw.
    let conn = unsafe { (api.PQconnectStartParams)(keywords.as_ptr(), values.as_ptr(), 0) };
    drop(cstrings);
    if conn.is_null() {
        return Err(error(
            "08001",
            format!("id_gen: could not connect to shard {name} for a direct read"),
            Some("out of memory".into()),
            None,
        ));
    }
    /// Closes the connection being opened unless it is handed over, also when an interrupt
    /// unwinds through this frame (a cancel or statement_timeout during the connect).
    struct Opening<'a> {
        api: &'a Api,
        conn: *mut PGconn,
    }
    impl Drop for Opening<'_> {
        fn drop(&mut self) {
            if !self.conn.is_null() {
                // SAFETY: a connection being opened here, known to no one else.
                unsafe { (self.api.PQfinish)(self.conn) };
            }
        }
    }
    let mut opening = Opening { api, conn };
    let mut want_write = true;
    loop {
        // SAFETY: a connection being opened; PQstatus only reads it.
        if unsafe { (api.PQstatus)(conn) } == libpq::CONNECTION_BAD {
            // Refused at once (no server at the address): libpq says why.
            return Err(connect_failed(&name, libpq_message(api, conn)));
        }
        wait_socket(api, conn, want_write, deadline, &name, "connect")?;
        // SAFETY: a connection being opened; PQconnectPoll advances its state machine.
        match unsafe { (api.PQconnectPoll)(conn) } {
            libpq::PGRES_POLLING_OK => break,
            libpq::PGRES_POLLING_READING => want_write = false,
            libpq::PGRES_POLLING_WRITING => want_write = true,
            _ => {
                return Err(connect_failed(&name, libpq_message(api, conn)));
            }
        }
    }
    // SAFETY: an open connection of ours.
    if needs_password && unsafe { (api.PQconnectionUsedPassword)(conn) } == 0 {
        return Err(error(
            "2F003",
            "password or GSSAPI delegated credentials required".into(),
            Some(format!("Non-superuser cannot connect to server {name} if it does not request a password.")),
            Some("Target server's authentication method must be changed or password_required=false set in the user mapping attributes."),
        ));
    }
    // SAFETY: an open connection of ours.
    unsafe { (api.PQsetnonblocking)(conn, 1) };
    let setup_deadline = Instant::now() + statement_bound();
    // SAFETY: an idle connection; a constant statement.
    if unsafe { (api.PQsendQuery)(conn, SESSION_SETUP.as_ptr()) } == 0 {
        let msg = libpq_message(api, conn);
        return Err(broken(&name, msg));
    }
    flush(api, conn, setup_deadline, &name)?;
    loop {
        match next_result(api, conn, setup_deadline, &name)? {
            None => break,
            Some(res) => {
                // SAFETY: a result of ours, read then freed.
                let status = unsafe { (api.PQresultStatus)(res) };
                let err = (status != libpq::PGRES_COMMAND_OK).then(|| remote_error(api, res, None));
                // SAFETY: as above.
                unsafe { (api.PQclear)(res) };
                if let Some(e) = err {
                    return Err(e);
                }
            }
        }
    }
    opening.conn = std::ptr::null_mut();
    Ok(conn)
}

/// A connect that failed, with libpq's reason.
fn connect_failed(name: &str, msg: String) -> RemoteError {
    error(
        "08001",
        format!("id_gen: could not connect to shard {name} for a direct read"),
        Some(msg),
        Some("Check the shard's foreign server and your user mapping (postgres_fdw uses the same), or SET id_gen.direct_reads = off."),
    )
}

/// The bound of a statement's wait (`id_gen.direct_read_timeout`).
pub fn statement_bound() -> Duration {
    Duration::from_millis(crate::gucs::DIRECT_READ_TIMEOUT_MS.get().max(1) as u64)
}

fn broken(name: &str, msg: String) -> RemoteError {
    error(
        "08006",
        format!("id_gen: lost the connection to shard {name} during a direct read"),
        Some(msg),
        Some("Run the statement again (a new connection is opened)."),
    )
}

/// Waits until the connection's socket is readable (or writable), the latch is set (then
/// interrupts are served: a cancel or statement_timeout raises here), or the deadline.
fn wait_socket(
    api: &Api,
    conn: *mut PGconn,
    write: bool,
    deadline: Instant,
    name: &str,
    what: &str,
) -> Result<(), RemoteError> {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Err(error(
                "57014",
                format!("id_gen: shard {name} did not answer a direct read's {what} in time"),
                Some("The connection was closed; the shard ends the statement when it notices.".into()),
                Some("The bound is id_gen.direct_read_timeout (the connect's: connect_timeout of the foreign server or user mapping, else 5 s). Check the shard, or SET id_gen.direct_reads = off."),
            ));
        }
        let remaining = (deadline - now).as_millis().clamp(1, i32::MAX as u128) as std::ffi::c_long;
        // SAFETY: the connection's socket (it may change while a connection is opened).
        let sock = unsafe { (api.PQsocket)(conn) };
        if sock < 0 {
            return Err(broken(name, libpq_message(api, conn)));
        }
        let events = (pg_sys::WL_LATCH_SET
            | pg_sys::WL_TIMEOUT
            | pg_sys::WL_EXIT_ON_PM_DEATH
            | if write {
                pg_sys::WL_SOCKET_WRITEABLE
            } else {
                pg_sys::WL_SOCKET_READABLE
            }) as c_int;
        // SAFETY: MyLatch is this backend's latch; the socket is open; the timeout bounded.
        let rc = unsafe {
            pg_sys::WaitLatchOrSocket(
                pg_sys::MyLatch,
                events,
                sock,
                remaining,
                pg_sys::PG_WAIT_EXTENSION,
            )
        } as u32;
        if rc & pg_sys::WL_LATCH_SET != 0 {
            // SAFETY: resets our own latch, then serves interrupts (which may raise: the
            // caller's connection is then left busy and closed by its owner's cleanup).
            unsafe { pg_sys::ResetLatch(pg_sys::MyLatch) };
            pg_sys::check_for_interrupts!();
        }
        if rc & (pg_sys::WL_SOCKET_READABLE | pg_sys::WL_SOCKET_WRITEABLE) != 0 {
            return Ok(());
        }
    }
}

/// Sends what libpq still holds for the connection.
fn flush(api: &Api, conn: *mut PGconn, deadline: Instant, name: &str) -> Result<(), RemoteError> {
    loop {
        // SAFETY: a nonblocking connection of ours.
        match unsafe { (api.PQflush)(conn) } {
            0 => return Ok(()),
            1 => wait_socket(api, conn, true, deadline, name, "send")?,
            _ => return Err(broken(name, libpq_message(api, conn))),
        }
    }
}

/// Sends a statement with text parameters, in single-row mode.
pub fn send(
    api: &Api,
    conn: *mut PGconn,
    sql: &CStr,
    params: &[Option<CString>],
    deadline: Instant,
    name: &str,
) -> Result<(), RemoteError> {
    let values: Vec<*const c_char> = params
        .iter()
        .map(|p| p.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()))
        .collect();
    // SAFETY: an idle connection of ours; the values outlive the call (libpq copies them);
    // types NULL (the statement casts its parameters, as postgres_fdw deparses it), text.
    let sent = unsafe {
        (api.PQsendQueryParams)(
            conn,
            sql.as_ptr(),
            values.len() as c_int,
            std::ptr::null(),
            values.as_ptr(),
            std::ptr::null(),
            std::ptr::null(),
            0,
        )
    };
    if sent == 0 {
        return Err(broken(name, libpq_message(api, conn)));
    }
    // SAFETY: right after the send, as libpq requires.
    if unsafe { (api.PQsetSingleRowMode)(conn) } == 0 {
        return Err(broken(name, "could not set single-row mode".into()));
    }
    flush(api, conn, deadline, name)
}

/// The next result of the statement sent (None: the statement is done and the connection
/// idle).
pub fn next_result(
    api: &Api,
    conn: *mut PGconn,
    deadline: Instant,
    name: &str,
) -> Result<Option<*mut PGresult>, RemoteError> {
    loop {
        // SAFETY: a connection of ours with a statement sent.
        if unsafe { (api.PQisBusy)(conn) } == 0 {
            break;
        }
        wait_socket(api, conn, false, deadline, name, "result")?;
        // SAFETY: as above.
        if unsafe { (api.PQconsumeInput)(conn) } == 0 {
            return Err(broken(name, libpq_message(api, conn)));
        }
    }
    // SAFETY: not busy: PQgetResult does not block.
    let res = unsafe { (api.PQgetResult)(conn) };
    Ok((!res.is_null()).then_some(res))
}

/// A failed result as the shard's error (its SQLSTATE, message, detail, hint), with the
/// statement in the context, as postgres_fdw reports it.
pub fn remote_error(api: &Api, res: *mut PGresult, sql: Option<&CStr>) -> RemoteError {
    let field = |f: c_int| -> Option<String> {
        // SAFETY: a result of ours; the field is NULL or a string owned by the result.
        let p = unsafe { (api.PQresultErrorField)(res, f) };
        // SAFETY: as above.
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    };
    let mut context = field(libpq::PG_DIAG_CONTEXT);
    if let Some(s) = sql {
        let line = format!("remote SQL command: {}", s.to_string_lossy());
        context = Some(match context {
            Some(c) => format!("{c}\n{line}"),
            None => line,
        });
    }
    RemoteError::new(
        // (No SQLSTATE: libpq's own failure, the connection lost; postgres_fdw says 08006.)
        field(libpq::PG_DIAG_SQLSTATE).as_deref().unwrap_or("08006"),
        field(libpq::PG_DIAG_MESSAGE_PRIMARY)
            .as_deref()
            .unwrap_or("could not obtain message string for remote error"),
        field(libpq::PG_DIAG_MESSAGE_DETAIL).as_deref(),
        field(libpq::PG_DIAG_MESSAGE_HINT).as_deref(),
        context.as_deref(),
    )
}

/// The foreign server's name, for messages and the status function (its OID when it was
/// dropped).
pub fn name_of(server: pg_sys::Oid) -> String {
    // SAFETY: a syscache lookup by oid that returns NULL for a missing server.
    unsafe {
        let s = pg_sys::GetForeignServerExtended(server, pg_sys::FSV_MISSING_OK as u16);
        if s.is_null() {
            server.to_u32().to_string()
        } else {
            CStr::from_ptr((*s).servername)
                .to_string_lossy()
                .into_owned()
        }
    }
}

/// Ends a read that stopped before its last row (a LIMIT, an early end of the portal, a
/// rescan): takes what the shard has sent already without waiting, and keeps the connection
/// when the statement is over; closes it otherwise (never waits, never cancels).
pub fn settle(api: &Api, server: pg_sys::Oid, user: pg_sys::Oid, conn: *mut PGconn) {
    let idle = (|| {
        // SAFETY: a connection of ours with a statement on it; none of these block.
        unsafe {
            if (api.PQconsumeInput)(conn) == 0 {
                return false;
            }
            while (api.PQisBusy)(conn) == 0 {
                let res = (api.PQgetResult)(conn);
                if res.is_null() {
                    return true;
                }
                (api.PQclear)(res);
            }
            false
        }
    })();
    if idle {
        set_busy(server, user, false);
    } else {
        discard(server, user);
    }
}
