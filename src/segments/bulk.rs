//! Bulk requests, caller side: a request for more values than a regular segment is
//! served by one exact reservation sized to the request, made by the worker outside the
//! caller's transaction and handed back through the slot's mailbox (`bulk_*` fields of
//! the slot, guarded by the slot lock).
//!
//! Protocol: the caller claims the idle mailbox (or one whose owner died, or that it
//! left behind itself), writes `want`, a new ticket and `REQUESTED`, wakes the worker
//! and sleeps on the slot's condition variable. The worker reserves exactly `want`
//! values, commits durably, and writes `DONE` with the first value (or `NOT_ENOUGH`
//! with what is left, which reserved nothing) — only if the ticket is still the one it
//! read. The caller reads the result and sets the mailbox idle.
//!
//! Invariants: a range is handed to the caller whose ticket it carries, once; a caller
//! that stops waiting (timeout, cancel, ERROR) withdraws its ticket, so a late result is
//! dropped (a gap, never a repeat); every wait is bounded by `id_gen.refill_timeout`.

use super::registry;
use super::slots::{self, *};
use super::wait::{count_timeout, keep_worker_alive, timed_out, CvSleep};
use crate::clock::Deadline;
use pgrx::pg_sys;
use std::sync::atomic::Ordering;

/// Why a bulk request returned no range.
pub enum BulkStop {
    /// The slot was reassigned: look the sequence up again.
    Retry,
    /// Fewer values than requested are left before `max_value` (nothing was taken).
    NotEnough {
        left: u64,
    },
    Failed,
}

/// Withdraws an unanswered request when the caller stops waiting (also on unwind).
struct Ticket {
    idx: usize,
    ticket: u64,
    armed: bool,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let s = slots::slot(self.idx);
        {
            let _g = slots::slot_lock(self.idx);
            if s.bulk_ticket.load(Ordering::Acquire) == self.ticket {
                s.bulk_ticket.fetch_add(1, Ordering::AcqRel);
                s.bulk_state.store(BULK_IDLE, Ordering::Release);
                s.bulk_owner.store(0, Ordering::Release);
            }
        }
        slots::broadcast(self.idx);
    }
}

fn my_pid() -> u32 {
    // SAFETY: MyProcPid is set in every backend.
    unsafe { pg_sys::MyProcPid as u32 }
}

/// Claims the mailbox of slot `idx` for `n` values; `None` while another live backend
/// owns it.
fn claim(idx: usize, gen: u64, n: u64) -> Result<Option<Ticket>, BulkStop> {
    let s = slots::slot(idx);
    let owner = s.bulk_owner.load(Ordering::Acquire);
    let owner_gone = owner != 0 && !registry::pid_alive(owner as i32);
    let _g = slots::slot_lock(idx);
    if s.generation.load(Ordering::Acquire) != gen {
        return Err(BulkStop::Retry);
    }
    let state = s.bulk_state.load(Ordering::Acquire);
    let now_owner = s.bulk_owner.load(Ordering::Acquire);
    let free = state == BULK_IDLE || now_owner == my_pid() || (owner_gone && now_owner == owner);
    if !free {
        return Ok(None);
    }
    let ticket = s.bulk_ticket.fetch_add(1, Ordering::AcqRel) + 1;
    s.bulk_want.store(n, Ordering::Release);
    s.bulk_owner.store(my_pid(), Ordering::Release);
    s.bulk_state.store(BULK_REQUESTED, Ordering::Release);
    Ok(Some(Ticket {
        idx,
        ticket,
        armed: true,
    }))
}

/// The answer to our ticket, if there is one yet; the mailbox goes idle when there is.
fn answer(ticket: &mut Ticket, gen: u64) -> Option<Result<i64, BulkStop>> {
    let s = slots::slot(ticket.idx);
    let result = {
        let _g = slots::slot_lock(ticket.idx);
        if s.generation.load(Ordering::Acquire) != gen
            || s.bulk_ticket.load(Ordering::Acquire) != ticket.ticket
        {
            Err(BulkStop::Retry)
        } else {
            let r = match s.bulk_state.load(Ordering::Acquire) {
                BULK_REQUESTED => return None,
                BULK_DONE => Ok(s.bulk_first.load(Ordering::Acquire)),
                BULK_NOT_ENOUGH => Err(BulkStop::NotEnough {
                    left: s.bulk_left.load(Ordering::Acquire),
                }),
                _ => Err(BulkStop::Failed),
            };
            s.bulk_state.store(BULK_IDLE, Ordering::Release);
            s.bulk_owner.store(0, Ordering::Release);
            r
        }
    };
    ticket.armed = false;
    slots::broadcast(ticket.idx); // other bulk callers may claim the mailbox now
    Some(result)
}

/// Reserves exactly `n` values of the sequence cached in slot `idx` (generation `gen`)
/// and returns the first; the range is `[first, first + n - 1]`.
pub fn take_exact(dboid: u32, idx: usize, gen: u64, n: u64, what: &str) -> Result<i64, BulkStop> {
    let deadline = Deadline::after_ms(crate::gucs::REFILL_TIMEOUT_MS.get() as u64);
    let mut alive_check = Deadline::after_ms(1000);
    let sleep = CvSleep::prepare(slots::cv(idx));
    let mut ticket = loop {
        if let Some(t) = claim(idx, gen, n)? {
            break t;
        }
        if deadline.passed() {
            drop(sleep);
            count_timeout(idx, gen);
            timed_out(dboid, idx, what, &deadline);
        }
        sleep.sleep(deadline.left_ms(200));
    };
    loop {
        keep_worker_alive(dboid, what, &mut alive_check);
        if let Some(result) = answer(&mut ticket, gen) {
            return result;
        }
        if deadline.passed() {
            drop(ticket); // withdraw: a late range becomes a gap
            drop(sleep);
            count_timeout(idx, gen);
            timed_out(dboid, idx, what, &deadline);
        }
        sleep.sleep(deadline.left_ms(200));
    }
}
