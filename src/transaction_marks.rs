//! Marks that last until the end of the current transaction: set only through id_gen's
//! own functions, never through a setting a session could SET. Until 0.6.0 these were
//! placeholder settings (`id_gen_internal.own_ddl`, `copy_rows`, `route_version_raised`)
//! that any session could set, and `own_ddl = on` skipped the DDL follower for the
//! caller's statements.
//!
//! | SQL | holds |
//! |---|---|
//! | `id_gen.quiet_ddl()` | (superuser only) the rest of this transaction's DDL is id_gen's own: the DDL follower leaves it alone |
//! | `id_gen.ddl_is_quiet()` | whether `quiet_ddl()` ran in this transaction |
//! | `id_gen.written_by_this_transaction(xid)` | whether a row version (its `xmin`) was written by this transaction or one of its live subtransactions |
//!
//! Invariants: a mark belongs to one local transaction id, so a new transaction never
//! sees an old one; nothing is shared between backends.

use pgrx::prelude::*;
use std::cell::Cell;

thread_local! {
    /// The local transaction id that called `quiet_ddl()`.
    static QUIET_DDL_IN: Cell<pg_sys::LocalTransactionId> = const { Cell::new(0) };
}

/// The backend's local transaction id (0 outside a transaction).
pub fn local_transaction_id() -> pg_sys::LocalTransactionId {
    // SAFETY: MyProc is set for every backend that runs queries.
    unsafe {
        let proc_ = pg_sys::MyProc;
        if proc_.is_null() {
            return 0;
        }
        #[cfg(any(feature = "pg15", feature = "pg16"))]
        {
            (*proc_).lxid
        }
        #[cfg(any(feature = "pg17", feature = "pg18"))]
        {
            (*proc_).vxid.lxid
        }
    }
}

/// Marks the rest of the transaction as id_gen's own DDL on distributed tables.
#[pg_extern(volatile, parallel_unsafe)]
fn quiet_ddl() {
    let lxid = local_transaction_id();
    QUIET_DDL_IN.with(|c| c.set(lxid));
}

/// Whether `quiet_ddl()` ran in this transaction.
#[pg_extern(volatile, parallel_safe)]
fn ddl_is_quiet() -> bool {
    let lxid = local_transaction_id();
    lxid != 0 && QUIET_DDL_IN.with(|c| c.get()) == lxid
}

/// Whether transaction id `xid` (a row's `xmin`, as bigint) is this transaction or one of
/// its subtransactions that has not rolled back.
#[pg_extern(volatile, strict, parallel_safe)]
fn written_by_this_transaction(xid: i64) -> bool {
    let Ok(xid) = u32::try_from(xid) else {
        return false;
    };
    // SAFETY: a lookup in this backend's transaction state; any 32-bit value is allowed.
    unsafe { pg_sys::TransactionIdIsCurrentTransactionId(pg_sys::TransactionId::from(xid)) }
}
