//! The two clocks of the extension, named for what they are, and the one way to wait.
//!
//! * [`wall_ms`]: the real wall clock (unix ms), for timeouts, statistics and the
//!   worker registry.
//! * [`id_clock_ms`]: the clock that ids and serials are stamped with: the wall clock
//!   shifted by the test-only `id_gen.test_clock_offset`.
//! * [`nap`]: an interruptible sleep on the process latch (`WaitLatch` +
//!   `CHECK_FOR_INTERRUPTS`), so query cancel and `statement_timeout` work in every
//!   wait; callers bound the total with a [`Deadline`].
//! * [`timeouts`]: PostgreSQL's timeout machinery (utils/timeout.h), which pgrx does not
//!   bind: the backend's exported functions.

use pgrx::pg_sys;

/// PostgreSQL's timeouts (utils/timeout.h): ids are `TimeoutId` values.
pub mod timeouts {
    unsafe extern "C-unwind" {
        pub fn RegisterTimeout(id: u32, handler: Option<unsafe extern "C-unwind" fn()>) -> u32;
        pub fn enable_timeout_after(id: u32, delay_ms: i32);
        pub fn disable_timeout(id: u32, keep_indicator: bool);
        pub fn get_timeout_indicator(id: u32, reset_indicator: bool) -> bool;
    }
}

/// Unix time in milliseconds from the system clock.
pub fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The clock of snowflake ids and serial periods: wall clock + `id_gen.test_clock_offset`.
pub fn id_clock_ms() -> i64 {
    wall_ms() + crate::gucs::TEST_CLOCK_OFFSET_MS.get().round() as i64
}

/// Sleeps up to `ms` on the process latch; returns early when the latch is set, and
/// raises the usual ERROR when the query is cancelled or times out.
pub fn nap(ms: i64) {
    // SAFETY: MyLatch is the process latch of every backend and worker; WaitLatch with
    // WL_EXIT_ON_PM_DEATH never returns after postmaster death; resetting the latch
    // after the wait is the documented protocol (callers re-check their condition).
    unsafe {
        pg_sys::WaitLatch(
            pg_sys::MyLatch,
            (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
            ms.max(1) as _,
            pg_sys::PG_WAIT_EXTENSION,
        );
        pg_sys::ResetLatch(pg_sys::MyLatch);
    }
    pgrx::check_for_interrupts!();
}

/// The end of a bounded wait.
pub struct Deadline {
    start: std::time::Instant,
    limit_ms: u64,
}

impl Deadline {
    pub fn after_ms(limit_ms: u64) -> Deadline {
        Deadline {
            start: std::time::Instant::now(),
            limit_ms,
        }
    }

    pub fn elapsed_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    pub fn passed(&self) -> bool {
        self.elapsed_ms() >= self.limit_ms
    }

    /// Milliseconds left, at most `cap`.
    pub fn left_ms(&self, cap: u64) -> u64 {
        self.limit_ms.saturating_sub(self.elapsed_ms()).min(cap)
    }

    pub fn limit_ms(&self) -> u64 {
        self.limit_ms
    }
}
