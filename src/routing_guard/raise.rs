//! Errors with id_gen's own SQLSTATEs (class IG): `IG001` route changed (the shard does
//! not own the genes, or the declared route version is older than the shard's) and
//! `IG002` route fenced (retry after a short wait). pgrx's error type knows only
//! PostgreSQL's codes (an unknown one would become XX000), so these are raised with
//! `errstart`/`errfinish` directly.
//!
//! Invariant: [`raise`] is called only from a frame that holds no Rust value needing a
//! drop (the unguarded shims of the executor hook and of `route_claim`): `errfinish`
//! jumps straight back to PostgreSQL's error handler. Everything a [`Verdict`] carries is
//! plain data or palloc'd in the current memory context, which the error cleans up.

use pgrx::pg_sys;
use std::ffi::{c_char, c_int, CString};

pub const ROUTE_CHANGED: [u8; 5] = *b"IG001";
pub const ROUTE_FENCED: [u8; 5] = *b"IG002";

/// A refusal, ready to raise: message, detail and hint as palloc'd C strings.
#[derive(Clone, Copy)]
pub struct Verdict {
    sqlstate: [u8; 5],
    message: *mut c_char,
    detail: *mut c_char,
    hint: *mut c_char,
}

const HINT_CHANGED: &str = "Re-read the routes on the coordinator (SELECT * FROM id_gen.route_map; LISTEN id_gen_routes) and retry the transaction on the shard that owns the genes.";
const HINT_FENCED: &str = "The genes are changing shard or partition (a cut-over of milliseconds): retry after a short wait (5 to 50 ms, growing), re-reading the routes if it persists.";

fn pstr(s: &str) -> *mut c_char {
    let c = CString::new(s.replace('\0', " ")).expect("NULs replaced");
    // SAFETY: pstrdup copies the string into the current memory context.
    unsafe { pg_sys::pstrdup(c.as_ptr()) }
}

/// A relation's name from the syscache (no SQL: this may run in a parallel worker).
fn relation_name(rel: pg_sys::Oid) -> String {
    // SAFETY: a syscache lookup by oid; NULL when the relation is gone.
    unsafe {
        let name = pg_sys::get_rel_name(rel);
        if name.is_null() {
            format!("relation {}", rel.to_u32())
        } else {
            std::ffi::CStr::from_ptr(name)
                .to_string_lossy()
                .into_owned()
        }
    }
}

/// The shard's route version as this backend knows it, where it may run SQL to learn it:
/// not in a parallel worker, nor in a leader running a parallel plan (PostgreSQL forbids
/// taking a new snapshot in parallel mode).
fn known_version() -> String {
    // SAFETY: reading backend globals.
    if unsafe { pg_sys::ParallelWorkerNumber >= 0 || pg_sys::IsInParallelMode() } {
        return "(see id_gen.shard_route_state)".into();
    }
    super::shard_state::version_view(false).version.to_string()
}

impl Verdict {
    fn new(sqlstate: [u8; 5], message: String, detail: String, hint: &str) -> Verdict {
        Verdict {
            sqlstate,
            message: pstr(&message),
            detail: pstr(&detail),
            hint: pstr(hint),
        }
    }

    /// The statement reads genes this shard does not own (a scan of the tombstone).
    pub fn not_owned(tombstone: pg_sys::Oid) -> Verdict {
        let version = known_version();
        Verdict::new(
            ROUTE_CHANGED,
            format!("id_gen: this shard does not own every gene the statement selects by id (its partition {} holds the genes of other shards)", relation_name(tombstone)),
            format!("The shard is at route version {version}; the genes the id predicate reaches beyond its own partitions are on other shards."),
            HINT_CHANGED,
        )
    }

    /// A scan that selects by id genes of a table laid out by ownership that this shard
    /// does not own (`owned_scan.rs`).
    pub fn gene_not_owned_by_table(table: pg_sys::Oid, gene: u16) -> Verdict {
        let version = known_version();
        Verdict::new(
            ROUTE_CHANGED,
            format!("id_gen: this shard does not own gene {gene} of {}, which the statement selects by id", relation_name(table)),
            format!("The shard is at route version {version}; the genes it owns of the table are those id_gen.shard_owned_ranges shows."),
            HINT_CHANGED,
        )
    }

    /// A claim of a gene that this shard does not own.
    pub fn gene_not_owned(gene: u16, version: i64, owner: Option<String>) -> Verdict {
        Verdict::new(
            ROUTE_CHANGED,
            format!("id_gen: this shard does not own gene {gene}"),
            match owner {
                Some(o) => format!(
                    "The shard is at route version {version}; gene {gene} is on shard \"{o}\"."
                ),
                None => format!("The shard is at route version {version}."),
            },
            HINT_CHANGED,
        )
    }

    /// The genes are fenced for a cut-over.
    pub fn fenced(partition: pg_sys::Oid) -> Verdict {
        Verdict::new(
            ROUTE_FENCED,
            format!("id_gen: the genes of {} are fenced for a cut-over", relation_name(partition)),
            "A move, revert or split of these genes is switching shards or partitions; it takes milliseconds.".into(),
            HINT_FENCED,
        )
    }

    /// A gene of a table laid out by ownership that a move has fenced for its cut-over.
    pub fn gene_fenced_in_table(table: pg_sys::Oid, gene: u16) -> Verdict {
        Verdict::new(
            ROUTE_FENCED,
            format!(
                "id_gen: gene {gene} of {} is fenced for the cut-over of a move",
                relation_name(table)
            ),
            "A move of this gene is switching shards; it takes milliseconds.".into(),
            HINT_FENCED,
        )
    }

    /// The declared route version is older than the shard's.
    pub fn stale(shard_version: i64, declared: i64) -> Verdict {
        Verdict::new(
            ROUTE_CHANGED,
            format!("id_gen: route version {declared} is stale: this shard is at route version {shard_version}"),
            format!("Routes changed after version {declared} (id_gen.route_version() on the coordinator)."),
            HINT_CHANGED,
        )
    }
}

#[cfg_attr(target_os = "windows", link(name = "postgres"))]
unsafe extern "C-unwind" {
    fn errstart(elevel: c_int, domain: *const c_char) -> bool;
    fn errcode(sqlerrcode: c_int) -> c_int;
    fn errmsg(fmt: *const c_char, ...) -> c_int;
    fn errdetail(fmt: *const c_char, ...) -> c_int;
    fn errhint(fmt: *const c_char, ...) -> c_int;
    fn errfinish(filename: *const c_char, lineno: c_int, funcname: *const c_char);
}

/// PostgreSQL's MAKE_SQLSTATE.
fn make_sqlstate(s: [u8; 5]) -> c_int {
    s.iter()
        .enumerate()
        .map(|(i, &ch)| (((ch - b'0') & 0x3F) as c_int) << (6 * i))
        .sum()
}

/// Raises the verdict as an ERROR; does not return.
///
/// # Safety
/// Call only from a frame with nothing to drop (see the module invariant).
pub unsafe fn raise(v: Verdict) -> ! {
    const PERCENT_S: &std::ffi::CStr = c"%s";
    // SAFETY: the usual ereport sequence; the strings are palloc'd and NUL-terminated.
    unsafe {
        if errstart(pgrx::PgLogLevel::ERROR as c_int, c"id_gen".as_ptr()) {
            errcode(make_sqlstate(v.sqlstate));
            errmsg(PERCENT_S.as_ptr(), v.message);
            errdetail(PERCENT_S.as_ptr(), v.detail);
            errhint(PERCENT_S.as_ptr(), v.hint);
            errfinish(
                c"routing_guard/raise.rs".as_ptr(),
                line!() as c_int,
                c"id_gen_route_guard".as_ptr(),
            );
        }
    }
    unreachable!("an ERROR does not return")
}

/// An error a shard raised, to be raised again here with its own SQLSTATE (IG001 and
/// IG002 included), message, detail, hint and context, each as a palloc'd C string or
/// null when the shard sent none.
#[derive(Clone, Copy)]
pub struct RemoteError {
    pub sqlstate: [u8; 5],
    pub message: *mut c_char,
    pub detail: *mut c_char,
    pub hint: *mut c_char,
    pub context: *mut c_char,
}

impl RemoteError {
    /// Copies the fields (text) into palloc'd strings; a SQLSTATE that is not five
    /// characters becomes XX000.
    pub fn new(
        sqlstate: &str,
        message: &str,
        detail: Option<&str>,
        hint: Option<&str>,
        context: Option<&str>,
    ) -> RemoteError {
        let code: [u8; 5] = sqlstate
            .as_bytes()
            .try_into()
            .ok()
            .filter(|c: &[u8; 5]| c.iter().all(|b| b.is_ascii_alphanumeric()))
            .unwrap_or(*b"XX000");
        let opt = |s: Option<&str>| s.map(pstr).unwrap_or(std::ptr::null_mut());
        RemoteError {
            sqlstate: code,
            message: pstr(message),
            detail: opt(detail),
            hint: opt(hint),
            context: opt(context),
        }
    }
}

#[cfg_attr(target_os = "windows", link(name = "postgres"))]
unsafe extern "C-unwind" {
    fn errcontext_msg(fmt: *const c_char, ...) -> c_int;
}

/// Raises a shard's error again here; does not return.
///
/// # Safety
/// Call only from a frame with nothing to drop (see the module invariant).
pub unsafe fn raise_remote(e: RemoteError) -> ! {
    const PERCENT_S: &std::ffi::CStr = c"%s";
    // SAFETY: the usual ereport sequence; the strings are palloc'd and NUL-terminated,
    // the optional ones passed only when present.
    unsafe {
        if errstart(pgrx::PgLogLevel::ERROR as c_int, c"id_gen".as_ptr()) {
            errcode(make_sqlstate(e.sqlstate));
            errmsg(PERCENT_S.as_ptr(), e.message);
            if !e.detail.is_null() {
                errdetail(PERCENT_S.as_ptr(), e.detail);
            }
            if !e.hint.is_null() {
                errhint(PERCENT_S.as_ptr(), e.hint);
            }
            if !e.context.is_null() {
                errcontext_msg(PERCENT_S.as_ptr(), e.context);
            }
            errfinish(
                c"direct_read".as_ptr(),
                line!() as c_int,
                c"id_gen_direct_read".as_ptr(),
            );
        }
    }
    unreachable!("an ERROR does not return")
}
