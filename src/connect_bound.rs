//! A bound for connecting to another server from inside a statement. PostgreSQL 16 and
//! later let dblink (and postgres_fdw) connect asynchronously, waiting on the latch until
//! the handshake ends, and libpq's `connect_timeout` applies only to a blocking connect: a
//! server that accepts the TCP connection but never answers (a paused VM, SIGSTOP) kept
//! such a connect waiting for ever. This arms a timer (PostgreSQL's own timeout machinery)
//! whose expiry interrupts the wait like a cancel; `id_gen.remote_send` turns that into
//! 08001 for the shard.
//!
//! | SQL | holds |
//! |---|---|
//! | `id_gen.arm_connect_bound(ms)` | (superuser only) from now on, a wait is interrupted after ms |
//! | `id_gen.disarm_connect_bound()` | stops the timer; whether it fired (its cancel is then withdrawn if still pending) |
//!
//! Invariants: one timer per process, registered on first use; the handler only sets
//! flags and the latch (it runs in a signal handler); a fired timer never leaves a cancel
//! pending behind the statement that armed it.

use crate::clock::timeouts::{disable_timeout, enable_timeout_after, RegisterTimeout};
use pgrx::prelude::*;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

/// Any id at or past USER_TIMEOUT (whose number differs between versions) asks
/// RegisterTimeout for a free user-defined one.
const ANY_USER_TIMEOUT: u32 = 1000;

static FIRED: AtomicBool = AtomicBool::new(false);

thread_local! {
    static TIMER: Cell<Option<u32>> = const { Cell::new(None) };
}

/// The timer's handler (in the SIGALRM handler): a cancel, as PostgreSQL's own
/// statement_timeout raises one.
unsafe extern "C-unwind" fn connect_bound_expired() {
    FIRED.store(true, Ordering::SeqCst);
    // SAFETY: setting the backend's interrupt flags and its latch is what PostgreSQL's
    // own timeout handlers do from signal context.
    unsafe {
        pg_sys::QueryCancelPending = 1;
        pg_sys::InterruptPending = 1;
        pg_sys::SetLatch(pg_sys::MyLatch);
    }
}

fn timer() -> u32 {
    TIMER.with(|t| match t.get() {
        Some(id) => id,
        None => {
            // SAFETY: timeouts are initialised in every backend and background worker that
            // runs SQL; registering takes a free user slot once per process.
            let id = unsafe { RegisterTimeout(ANY_USER_TIMEOUT, Some(connect_bound_expired)) };
            t.set(Some(id));
            id
        }
    })
}

/// Arms the timer: a wait that services interrupts is cancelled after `ms`.
#[pg_extern(volatile, strict, parallel_unsafe)]
fn arm_connect_bound(ms: i32) {
    if ms < 1 {
        crate::errors::raise(
            crate::errors::Code::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("id_gen: a connect bound of {ms} ms is not positive"),
            None,
        );
    }
    let id = timer();
    FIRED.store(false, Ordering::SeqCst);
    // SAFETY: a registered timeout id; re-arming replaces an earlier deadline.
    unsafe { enable_timeout_after(id, ms) };
}

/// Stops the timer; whether it fired. A cancel it raised that nothing has taken yet is
/// withdrawn, so that it cannot hit a later statement.
#[pg_extern(volatile, parallel_unsafe)]
fn disarm_connect_bound() -> bool {
    let Some(id) = TIMER.with(|t| t.get()) else {
        return false;
    };
    // SAFETY: a registered timeout id.
    unsafe { disable_timeout(id, false) };
    let fired = FIRED.swap(false, Ordering::SeqCst);
    if fired {
        // SAFETY: the flag is the backend's own; clearing it withdraws our cancel.
        unsafe { pg_sys::QueryCancelPending = 0 };
    }
    fired
}
