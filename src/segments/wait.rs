//! How a caller waits for the refill worker: on its slot's condition variable, bounded
//! by `id_gen.refill_timeout`, cancellable by query cancel and `statement_timeout`
//! (`ConditionVariableTimedSleep` runs `CHECK_FOR_INTERRUPTS`).
//!
//! Invariants: the slot lock is taken only to read the verdict (O(1)); every error is
//! raised after it is released; the sleep is cancelled on every exit, also on unwind
//! ([`CvSleep`] does it on drop).

use super::registry;
use super::slots::{self, *};
use super::worker;
use crate::clock::Deadline;
use crate::errors::{raise, raise_detail, Code};
use id_gen_core::segment::Switch;
use pgrx::pg_sys;
use std::sync::atomic::Ordering;

/// A prepared sleep on a condition variable, cancelled when dropped.
pub struct CvSleep(*mut pg_sys::ConditionVariable);

impl CvSleep {
    /// Prepares to sleep on `cv`. Check the awaited condition *after* this (the
    /// documented race-free protocol).
    pub fn prepare(cv: *mut pg_sys::ConditionVariable) -> CvSleep {
        // SAFETY: the CV lives in shared memory for the server's life.
        unsafe { pg_sys::ConditionVariablePrepareToSleep(cv) };
        CvSleep(cv)
    }

    /// Sleeps until the CV is signalled or `ms` passed; raises on cancel/timeout.
    pub fn sleep(&self, ms: u64) {
        // SAFETY: sleeping on the CV prepared in `prepare`; interrupts are processed
        // inside (CHECK_FOR_INTERRUPTS) and raise the usual ERROR.
        unsafe {
            pg_sys::ConditionVariableTimedSleep(self.0, ms.max(1) as _, pg_sys::PG_WAIT_EXTENSION)
        };
    }
}

impl Drop for CvSleep {
    fn drop(&mut self) {
        // SAFETY: cancels the sleep prepared above (a no-op if already cancelled).
        unsafe {
            #[allow(clippy::let_unit_value)]
            let _ = pg_sys::ConditionVariableCancelSleep();
        }
    }
}

/// Why a caller stops waiting without a segment.
pub enum Stop {
    /// The slot was reassigned or got a new segment: look it up again and retry.
    Retry,
    /// A serial's period ended (the catalog moved on).
    PeriodClosed,
    Dropped,
    Exhausted,
    RefillFailed,
}

/// The slot's verdict for a caller that found both segments empty (`epoch` is what the
/// caller's take saw). Switches to the standby if there is one.
fn verdict(idx: usize, gen: u64, epoch: u64) -> Option<Stop> {
    let s = slots::slot(idx);
    let _g = slots::slot_lock(idx);
    if s.generation.load(Ordering::Acquire) != gen {
        return Some(Stop::Retry);
    }
    match s.state.load(Ordering::Acquire) {
        STATE_DROPPED => Some(Stop::Dropped),
        STATE_PERIOD_CLOSED => Some(Stop::PeriodClosed),
        STATE_EXHAUSTED if s.chain.needs_standby() => Some(Stop::Exhausted),
        STATE_REFILL_FAILED => {
            s.state.store(STATE_OK, Ordering::Release); // the next call retries
            Some(Stop::RefillFailed)
        }
        _ => match s.chain.switch_to_standby(epoch) {
            Switch::NoStandby => {
                s.refill_wanted.store(1, Ordering::Release);
                None
            }
            _ => Some(Stop::Retry),
        },
    }
}

/// Makes sure the database's worker runs (checking its liveness once a second), or
/// raises 53400 naming `what`.
pub fn keep_worker_alive(dboid: u32, what: &str, last_check: &mut Deadline) {
    let woke = if last_check.passed() {
        *last_check = Deadline::after_ms(1000);
        worker::check_alive(dboid)
    } else {
        worker::ensure_and_wake(dboid)
    };
    if let Err(why) = woke {
        raise(
            Code::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
            format!("id_gen: cannot start the refill worker for {what}: {why}"),
            Some(
                "Raise max_worker_processes or id_gen.max_databases (both take effect at restart).",
            ),
        );
    }
}

const WORKER_HINT: &str = "Check the id_gen refill worker in pg_stat_activity and the server log; id_gen.refill_timeout sets how long callers wait.";

/// Counts a caller's wait for slot `idx` (of generation `gen`) that ended at its deadline,
/// for the metric `id_gen_sequence_wait_timeouts_total`; not when the slot has meanwhile been
/// given to another sequence.
pub fn count_timeout(idx: usize, gen: u64) {
    let s = slots::slot(idx);
    if s.generation.load(Ordering::Acquire) == gen {
        s.wait_timeouts.fetch_add(1, Ordering::Relaxed);
    }
}

/// Raises 55000: nothing arrived for `what` (slot `idx`) within the deadline. The
/// message names the authority and the last error when the worker's last reservation
/// attempt failed (an authority that does not answer, a locked row), and the authority
/// alone when its attempt has not failed yet.
pub fn timed_out(dboid: u32, idx: usize, what: &str, deadline: &Deadline) -> ! {
    let waited = format!(
        "id_gen: no segment for {what} arrived within {} ms",
        deadline.limit_ms()
    );
    let pid = registry::worker_pid(dboid);
    let diagnostics = slots::diagnostics(idx);
    match (diagnostics.last_error, diagnostics.authority) {
        (Some((error, at)), Some(authority)) => raise_detail(
            Code::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("{waited}: its authority \"{authority}\" failed: {error}"),
            format!(
                "The last attempt failed {} ms ago; the refill worker (pid {pid}) retries every 200 ms and serves again as soon as the authority answers.",
                (crate::clock::wall_ms() - at).max(0)
            ),
            Some(&format!("Check the ID database behind foreign server \"{authority}\" and this server's user mapping for it; id_gen.refill_timeout sets how long callers wait.")),
        ),
        (Some((error, _)), None) => raise_detail(
            Code::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("{waited}: the last reservation failed: {error}"),
            format!("refill worker pid: {pid}"),
            Some(WORKER_HINT),
        ),
        // The last reservation from the authority succeeded and the one in flight has not
        // failed yet (a commit that waits, a connect that has not timed out).
        (None, Some(authority)) => raise_detail(
            Code::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("{waited}: its authority \"{authority}\" has not answered yet"),
            format!(
                "The refill worker (pid {pid}) is reserving from \"{authority}\" and serves again as soon as the authority answers."
            ),
            Some(&format!("Check the ID database behind foreign server \"{authority}\" and this server's user mapping for it; id_gen.refill_timeout sets how long callers wait.")),
        ),
        (None, None) => raise_detail(
            Code::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            waited,
            format!("refill worker pid: {pid}"),
            Some(WORKER_HINT),
        ),
    }
}

/// Waits until slot `idx` has a segment for the caller (then returns `Ok`; the caller
/// retries its take) or says why not. `what` names the counter in messages.
pub fn wait_for_segment(
    dboid: u32,
    idx: usize,
    gen: u64,
    epoch: u64,
    what: &str,
) -> Result<(), Stop> {
    let s = slots::slot(idx);
    let deadline = Deadline::after_ms(crate::gucs::REFILL_TIMEOUT_MS.get() as u64);
    let mut alive_check = Deadline::after_ms(1000);
    let mut counted_wait = false;
    let sleep = CvSleep::prepare(slots::cv(idx));
    loop {
        if let Some(stop) = verdict(idx, gen, epoch) {
            return match stop {
                Stop::Retry => Ok(()),
                other => Err(other),
            };
        }
        if !counted_wait {
            s.waits.fetch_add(1, Ordering::Relaxed);
            counted_wait = true;
        }
        keep_worker_alive(dboid, what, &mut alive_check);
        if deadline.passed() {
            drop(sleep);
            count_timeout(idx, gen);
            timed_out(dboid, idx, what, &deadline);
        }
        sleep.sleep(deadline.left_ms(200));
    }
}
