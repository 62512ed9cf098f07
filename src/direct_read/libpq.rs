//! The few libpq functions a direct read needs, resolved at run time from the libpq that
//! postgres_fdw already loaded into this backend (`dlopen("libpq.so.5", RTLD_NOLOAD)` finds
//! it by its soname, and never loads another; the planner loaded postgres_fdw before any of
//! its scans reaches the executor). id_gen does not link libpq: without it, reads go through
//! postgres_fdw.
//!
//! Invariants: the table is resolved once per process (`api()`), whole or not at all; the
//! functions are libpq's documented C API (libpq-fe.h, stable since PostgreSQL 9.x), none
//! of which raises a PostgreSQL error or longjmps.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

pub type PGconn = c_void;
pub type PGresult = c_void;

/// PostgresPollingStatusType.
pub const PGRES_POLLING_READING: c_int = 1;
pub const PGRES_POLLING_WRITING: c_int = 2;
pub const PGRES_POLLING_OK: c_int = 3;
/// ConnStatusType.
pub const CONNECTION_OK: c_int = 0;
pub const CONNECTION_BAD: c_int = 1;
/// ExecStatusType.
pub const PGRES_COMMAND_OK: c_int = 1;
pub const PGRES_TUPLES_OK: c_int = 2;
pub const PGRES_SINGLE_TUPLE: c_int = 9;
pub const PGRES_FATAL_ERROR: c_int = 7;
/// Fields of PQresultErrorField (postgres_ext.h PG_DIAG_*).
pub const PG_DIAG_SQLSTATE: c_int = b'C' as c_int;
pub const PG_DIAG_MESSAGE_PRIMARY: c_int = b'M' as c_int;
pub const PG_DIAG_MESSAGE_DETAIL: c_int = b'D' as c_int;
pub const PG_DIAG_MESSAGE_HINT: c_int = b'H' as c_int;
pub const PG_DIAG_CONTEXT: c_int = b'W' as c_int;

/// The resolved functions.
#[allow(non_snake_case)]
pub struct Api {
    pub PQconnectStartParams:
        unsafe extern "C" fn(*const *const c_char, *const *const c_char, c_int) -> *mut PGconn,
    pub PQconnectPoll: unsafe extern "C" fn(*mut PGconn) -> c_int,
    pub PQstatus: unsafe extern "C" fn(*const PGconn) -> c_int,
    pub PQsocket: unsafe extern "C" fn(*const PGconn) -> c_int,
    pub PQerrorMessage: unsafe extern "C" fn(*const PGconn) -> *const c_char,
    pub PQfinish: unsafe extern "C" fn(*mut PGconn),
    pub PQsetnonblocking: unsafe extern "C" fn(*mut PGconn, c_int) -> c_int,
    pub PQconnectionUsedPassword: unsafe extern "C" fn(*const PGconn) -> c_int,
    pub PQsendQuery: unsafe extern "C" fn(*mut PGconn, *const c_char) -> c_int,
    pub PQsendQueryParams: unsafe extern "C" fn(
        *mut PGconn,
        *const c_char,
        c_int,
        *const u32,
        *const *const c_char,
        *const c_int,
        *const c_int,
        c_int,
    ) -> c_int,
    pub PQsetSingleRowMode: unsafe extern "C" fn(*mut PGconn) -> c_int,
    pub PQflush: unsafe extern "C" fn(*mut PGconn) -> c_int,
    pub PQconsumeInput: unsafe extern "C" fn(*mut PGconn) -> c_int,
    pub PQisBusy: unsafe extern "C" fn(*mut PGconn) -> c_int,
    pub PQgetResult: unsafe extern "C" fn(*mut PGconn) -> *mut PGresult,
    pub PQresultStatus: unsafe extern "C" fn(*const PGresult) -> c_int,
    pub PQresultErrorField: unsafe extern "C" fn(*const PGresult, c_int) -> *const c_char,
    pub PQnfields: unsafe extern "C" fn(*const PGresult) -> c_int,
    pub PQgetvalue: unsafe extern "C" fn(*const PGresult, c_int, c_int) -> *const c_char,
    pub PQgetisnull: unsafe extern "C" fn(*const PGresult, c_int, c_int) -> c_int,
    pub PQclear: unsafe extern "C" fn(*mut PGresult),
}

extern "C" {
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}
const RTLD_NOW: c_int = 2;
const RTLD_NOLOAD: c_int = 4;

static API: OnceLock<Api> = OnceLock::new();

/// libpq's functions, or None while no libpq is loaded in this process (a failure is not
/// remembered: postgres_fdw loads it when it plans its first foreign scan).
pub fn api() -> Option<&'static Api> {
    if let Some(api) = API.get() {
        return Some(api);
    }
    let api = load()?;
    let _ = API.set(api);
    API.get()
}

#[allow(clippy::missing_transmute_annotations)]
fn load() -> Option<Api> {
    // SAFETY: dlopen and dlsym with NUL-terminated names; the handle is never closed, so
    // the function pointers stay valid for the life of the process. Each symbol is cast
    // to its libpq-fe.h signature.
    unsafe {
        // Only the libpq already loaded (postgres_fdw's): never a second one.
        let handle = dlopen(c"libpq.so.5".as_ptr(), RTLD_NOW | RTLD_NOLOAD);
        if handle.is_null() {
            return None;
        }
        macro_rules! sym {
            ($name:literal) => {{
                let name: &CStr = $name;
                let p = dlsym(handle, name.as_ptr());
                if p.is_null() {
                    return None;
                }
                std::mem::transmute::<*mut c_void, _>(p)
            }};
        }
        Some(Api {
            PQconnectStartParams: sym!(c"PQconnectStartParams"),
            PQconnectPoll: sym!(c"PQconnectPoll"),
            PQstatus: sym!(c"PQstatus"),
            PQsocket: sym!(c"PQsocket"),
            PQerrorMessage: sym!(c"PQerrorMessage"),
            PQfinish: sym!(c"PQfinish"),
            PQsetnonblocking: sym!(c"PQsetnonblocking"),
            PQconnectionUsedPassword: sym!(c"PQconnectionUsedPassword"),
            PQsendQuery: sym!(c"PQsendQuery"),
            PQsendQueryParams: sym!(c"PQsendQueryParams"),
            PQsetSingleRowMode: sym!(c"PQsetSingleRowMode"),
            PQflush: sym!(c"PQflush"),
            PQconsumeInput: sym!(c"PQconsumeInput"),
            PQisBusy: sym!(c"PQisBusy"),
            PQgetResult: sym!(c"PQgetResult"),
            PQresultStatus: sym!(c"PQresultStatus"),
            PQresultErrorField: sym!(c"PQresultErrorField"),
            PQnfields: sym!(c"PQnfields"),
            PQgetvalue: sym!(c"PQgetvalue"),
            PQgetisnull: sym!(c"PQgetisnull"),
            PQclear: sym!(c"PQclear"),
        })
    }
}
