//! The shard side of zero-hop routing (docs/routing-protocol.md): what a shard does so
//! that a client which routes by itself never gets an answer from a shard that does not
//! own the genes it asked for.
//!
//! | file | holds |
//! |---|---|
//! | `shard_state.rs` | the backend's cached views of the shard: route version and tables (version check, claims); partitions per distributed table (join check); a gene's partition from the partition descriptor |
//! | `plan_check.rs` | the executor-start check: arms scans of a table's tombstone or of a fenced partition to refuse when they run |
//! | `id_predicates.rs` | what a scan's predicates say about the id column (points, sides, ANDs and ORs), read from the plan for the other checks |
//! | `join_check.rs` | joins by id: watches the ids a join compares with a guarded table's id column and refuses genes not owned or fenced |
//! | `owned_scan.rs` | scans of a table laid out by ownership that select by id: the values of their id bounds checked against what the shard owns |
//! | `owned_ranges.rs` | ownership as data: the gene ranges `id_gen.shard_tables` records per table, cached as a bitmap of the genes; `id_gen.shard_owns(regclass, bigint)` |
//! | `claim.rs` | `id_gen.route_claim(gene, version)`: check, then lock the gene's partitions |
//! | `begin_claim.rs` | the same claim carried on `BEGIN` (`/* id_gen.route_claim=G,V */ BEGIN`), in a ProcessUtility hook |
//! | `raise.rs` | errors with the IG-class SQLSTATEs, which pgrx's error type cannot carry |
//!
//! Every shard table has a DEFAULT partition, its *tombstone* (`<stem>_not_owned`,
//! created by `id_gen.shard_ensure_tombstone`), for every gene the shard does not own.
//! Writes into it are refused by its `id_gen_not_owned` trigger (IG001); scans of it that
//! select by id are refused here. A partition with an enabled `id_gen_move_fence` trigger
//! is fenced (IG002).
//!
//! Invariants:
//!   * The checks never read the catalog under a lock of ours, and never raise while a
//!     Rust value that needs dropping is alive in the raising frame (`raise.rs`).
//!   * Ownership is decided by the partitions themselves (tuple routing and partition
//!     pruning); the cache only speeds up finding them, and a negative answer is
//!     re-checked against a fresh load before it becomes an error.
//!   * The version check runs once per transaction (the first statement that touches a
//!     distributed table, or `route_claim`), so a route change elsewhere never fails a
//!     transaction half-way. A statement declares its version by a leading comment
//!     (`/* id_gen.route_version=N */`, read from at most 128 bytes of its text; it then
//!     holds for the rest of the transaction, as SET LOCAL would, so the statements of a
//!     function it calls are checked too) or by the setting `id_gen.route_version`; the
//!     comment wins.

mod begin_claim;
pub mod claim;
mod id_predicates;
mod join_check;
pub mod owned_ranges;
mod owned_scan;
mod plan_check;
pub mod raise;
pub mod shard_state;

use pgrx::pg_sys;
use std::cell::Cell;

thread_local! {
    /// The local transaction id whose route version is already checked.
    static CHECKED_IN: Cell<pg_sys::LocalTransactionId> = const { Cell::new(0) };
    /// Set while the guard itself runs SQL (its queries must not be checked again).
    static BUSY: Cell<bool> = const { Cell::new(false) };
    /// The version a statement's leading comment declared, and the local transaction id it
    /// holds for: the statements run under it (a function's, a trigger's, the next one of
    /// the same implicit transaction) are checked against it too, as with SET LOCAL.
    static DECLARED_IN: Cell<(pg_sys::LocalTransactionId, i64)> = const { Cell::new((0, 0)) };
}

static PREV_EXECUTOR_START: std::sync::OnceLock<pg_sys::ExecutorStart_hook_type> =
    std::sync::OnceLock::new();

/// Installs the executor-start check and the claim on `BEGIN` (from `_PG_init`, in every
/// process that loads us).
pub fn install() {
    begin_claim::install();
    // SAFETY: _PG_init runs once per process, single-threaded, before any query; chaining
    // to the previous hook keeps other extensions working.
    unsafe {
        if PREV_EXECUTOR_START.set(pg_sys::ExecutorStart_hook).is_ok() {
            pg_sys::ExecutorStart_hook = Some(executor_start);
        }
    }
}

use crate::transaction_marks::local_transaction_id;

/// Whether this transaction's route version was already checked.
fn checked_this_transaction() -> bool {
    let lxid = local_transaction_id();
    lxid != 0 && CHECKED_IN.with(|c| c.get()) == lxid
}

/// Records that this transaction's route version is checked.
fn mark_checked() {
    let lxid = local_transaction_id();
    CHECKED_IN.with(|c| c.set(lxid));
}

/// Runs `f` with the guard switched off for the queries it makes, and without JIT: they read
/// small catalog tables, and a session that disabled a plan type (`enable_seqscan = off`
/// makes every plan cost more than `jit_above_cost`) made a new backend's first load compile
/// them, 60-100 ms.
fn quietly<R>(f: impl FnOnce() -> R) -> R {
    struct Reset {
        busy: bool,
        jit: bool,
    }
    impl Drop for Reset {
        fn drop(&mut self) {
            BUSY.with(|b| b.set(self.busy));
            // SAFETY: a backend global of this backend's one thread, put back as it was
            // however `f` ends (an ERROR in it unwinds through this frame as a panic).
            unsafe { pg_sys::jit_enabled = self.jit };
        }
    }
    // SAFETY: as above; the planner reads the setting when it plans a query.
    let jit =
        unsafe { std::mem::replace(&mut *std::ptr::addr_of_mut!(pg_sys::jit_enabled), false) };
    let _reset = Reset {
        busy: BUSY.with(|b| b.replace(true)),
        jit,
    };
    f()
}

/// The hook itself: no `#[pg_guard]` here, so that it can raise an IG-class error once
/// the guarded part has returned (nothing of Rust is alive in this frame by then).
unsafe extern "C-unwind" fn executor_start(query_desc: *mut pg_sys::QueryDesc, eflags: i32) {
    // SAFETY: called by the executor with a valid QueryDesc; the guarded function turns
    // PostgreSQL errors and Rust panics into PostgreSQL errors.
    let mut verdict: Option<raise::Verdict> = None;
    unsafe { executor_start_guarded(query_desc, eflags, &mut verdict) };
    if let Some(v) = verdict {
        // SAFETY: `v` holds only palloc'd C strings and plain values.
        unsafe { raise::raise(v) }
    }
}

/// Starts the executor, then leaves a refusal (if any) in `*verdict`.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn executor_start_guarded(
    query_desc: *mut pg_sys::QueryDesc,
    eflags: i32,
    verdict: *mut Option<raise::Verdict>,
) {
    // SAFETY: `verdict` is the caller's local.
    unsafe { *verdict = executor_start_checked(query_desc, eflags) };
}

unsafe fn executor_start_checked(
    query_desc: *mut pg_sys::QueryDesc,
    eflags: i32,
) -> Option<raise::Verdict> {
    let guarding = eflags & pg_sys::EXEC_FLAG_EXPLAIN_ONLY as i32 == 0
        && !BUSY.with(|b| b.get())
        && crate::gucs::ROUTING_GUARD.get();
    // SAFETY: the previous hook or the standard executor start, with the caller's arguments.
    unsafe {
        match PREV_EXECUTOR_START.get().copied().flatten() {
            Some(prev) => prev(query_desc, eflags),
            None => pg_sys::standard_ExecutorStart(query_desc, eflags),
        }
    }
    if !guarding {
        return None;
    }
    // SAFETY: standard_ExecutorStart has built the plan-state tree of this QueryDesc.
    unsafe {
        plan_check::check_scans((*query_desc).planstate);
        join_check::watch_joins((*query_desc).planstate);
    }
    // SAFETY: reading a backend global. A parallel worker's transaction is its leader's,
    // which checked the version at its own executor start, before any worker began (the
    // leader enters parallel mode only when the plan runs; and the workers' scans and
    // joins are armed above, so they refuse genes not owned themselves). A statement
    // nested in a parallel plan (a function it calls) runs in parallel mode: its view is
    // loaded under its snapshot (shard_state.rs).
    if unsafe { pg_sys::ParallelWorkerNumber >= 0 } {
        return None;
    }
    // SAFETY: the source text of a started QueryDesc is NULL or a NUL-terminated string.
    let declared = match unsafe { declared_in_text((*query_desc).sourceText) } {
        Some(version) => {
            DECLARED_IN.with(|d| d.set((local_transaction_id(), version)));
            version
        }
        None => match DECLARED_IN.with(|d| d.get()) {
            (lxid, version) if lxid != 0 && lxid == local_transaction_id() => version,
            _ => crate::gucs::ROUTE_VERSION.get() as i64,
        },
    };
    if declared > 0 && !checked_this_transaction() {
        // SAFETY: the plannedstmt of a started QueryDesc is valid.
        return unsafe { check_declared_version((*query_desc).plannedstmt, declared) };
    }
    None
}

/// The version a statement declares in its own text (a leading
/// `/* id_gen.route_version=N */`, `id_gen_core::route_declaration`): it takes the place of
/// the setting for the rest of the statement's transaction (`DECLARED_IN`). Reads at most the
/// first `PREFIX_BYTES` bytes.
///
/// # Safety
/// `text` is NULL or points to a NUL-terminated string.
unsafe fn declared_in_text(text: *const std::ffi::c_char) -> Option<i64> {
    use id_gen_core::route_declaration::{declared_in, PREFIX_BYTES};
    if text.is_null() {
        return None;
    }
    let mut buf = [0u8; PREFIX_BYTES];
    // SAFETY: as this function's contract says.
    declared_in(unsafe { leading_bytes(text, &mut buf) })
}

/// The first bytes of a NUL-terminated string, at most `buf.len()` of them, copied into
/// `buf` (never reading past the NUL: a long statement costs nothing more).
///
/// # Safety
/// `text` points to a NUL-terminated string.
unsafe fn leading_bytes(text: *const std::ffi::c_char, buf: &mut [u8]) -> &[u8] {
    let mut len = 0;
    while len < buf.len() {
        // SAFETY: every byte up to and including the terminating NUL is readable, and the
        // loop stops at the NUL.
        let byte = unsafe { *text.add(len) } as u8;
        if byte == 0 {
            break;
        }
        buf[len] = byte;
        len += 1;
    }
    &buf[..len]
}

/// The version check of a declared route version (the statement's leading comment, or
/// `SET id_gen.route_version`): only for statements that touch a
/// distributed table of this shard (or one of its partitions).
unsafe fn check_declared_version(
    stmt: *mut pg_sys::PlannedStmt,
    declared: i64,
) -> Option<raise::Verdict> {
    let view = shard_state::version_view(false);
    if view.tables.is_empty() {
        return None;
    }
    // SAFETY: the range table of a planned statement is a List of RangeTblEntry.
    let touched = unsafe {
        crate::pg_list::list_pointers((*stmt).rtable)
            .into_iter()
            .any(|p| {
                let rte = p as *mut pg_sys::RangeTblEntry;
                (*rte).rtekind == pg_sys::RTEKind::RTE_RELATION && view.is_distributed((*rte).relid)
            })
    };
    if !touched {
        return None;
    }
    if declared < view.version {
        // Re-read before refusing: the coordinator may have pushed another version since
        // (after a restore, even a lower one).
        let fresh = shard_state::version_view(true);
        if declared < fresh.version {
            return Some(raise::Verdict::stale(fresh.version, declared));
        }
    }
    mark_checked();
    None
}
