//! The registry of per-database refill workers in shared memory: which database has a
//! worker, its PID and latch, and when a backend last asked the postmaster to start one.
//!
//! ```text
//! region "id_gen worker registry": DbWorker × id_gen.max_databases,
//!                                   then u32 × id_gen.max_databases (databases that got
//!                                   the promotion skip in this shared-memory lifetime)
//! LWLock tranche "id_gen worker registry": lock 0 guards claiming and releasing entries
//! ```
//!
//! Invariants: an entry's `dboid` changes only under the registry lock; `pid`/`latch`
//! are written under it and read without it (a stale latch wakes an unrelated process
//! once — harmless). The lock is held for O(max_databases) work, never across SPI.

use crate::shmem::{self, Guard, Region};
use pgrx::pg_sys;
use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, Ordering,
};

#[repr(C)]
pub struct DbWorker {
    dboid: AtomicU32,
    pid: AtomicI32,
    /// The worker's `procLatch` (an address inside shared memory, valid in every process).
    latch: AtomicU64,
    /// When a backend last asked the postmaster to start this worker (ms since epoch).
    launched_at_ms: AtomicI64,
}

static ENTRIES: AtomicPtr<DbWorker> = AtomicPtr::new(std::ptr::null_mut());
static COUNT: AtomicU32 = AtomicU32::new(0);
static LOCK: AtomicPtr<pg_sys::LWLockPadded> = AtomicPtr::new(std::ptr::null_mut());
/// Databases whose sequences already skipped `id_gen.promotion_skip_segments`.
static SKIPPED: AtomicPtr<AtomicU32> = AtomicPtr::new(std::ptr::null_mut());
/// Set by the postmaster when it created shared memory while `standby.signal` or
/// `recovery.signal` was in the data directory: this server started in recovery, so any
/// worker that runs now runs after a promotion. Inherited by every forked child.
static STARTED_IN_RECOVERY: AtomicBool = AtomicBool::new(false);

fn configured() -> usize {
    crate::gucs::MAX_DATABASES.get() as usize
}

pub const REGION: Region = Region {
    name: c"id_gen worker registry",
    size: || configured() * (size_of::<DbWorker>() + size_of::<AtomicU32>()),
    extra: shmem::no_extra,
    locks: || 1,
    attach: attach_region,
};

/// # Safety
/// See [`Region::attach`].
unsafe fn attach_region(base: *mut u8, fresh: bool, locks: *mut pg_sys::LWLockPadded) {
    let workers = configured() * size_of::<DbWorker>();
    if fresh {
        // SAFETY: a fresh area of configured() entries and dboids; all-zero is "unused".
        unsafe { std::ptr::write_bytes(base, 0, workers + configured() * size_of::<AtomicU32>()) };
        // The postmaster's working directory is the data directory.
        let in_recovery = ["standby.signal", "recovery.signal"]
            .iter()
            .any(|f| std::path::Path::new(f).exists());
        STARTED_IN_RECOVERY.store(in_recovery, Ordering::Release);
    }
    ENTRIES.store(base as *mut DbWorker, Ordering::Release);
    // SAFETY: the dboid list follows the entries inside the same area (u32-aligned).
    SKIPPED.store(
        unsafe { base.add(workers) } as *mut AtomicU32,
        Ordering::Release,
    );
    COUNT.store(configured() as u32, Ordering::Release);
    LOCK.store(locks, Ordering::Release);
}

fn entries() -> &'static [DbWorker] {
    // SAFETY: COUNT entries were initialised at startup and live as long as the server.
    unsafe {
        std::slice::from_raw_parts(
            ENTRIES.load(Ordering::Acquire),
            COUNT.load(Ordering::Acquire) as usize,
        )
    }
}

fn registry_lock() -> Guard {
    // SAFETY: the tranche has one lock.
    unsafe { shmem::acquire(LOCK.load(Ordering::Acquire), 0, true) }
}

/// The registry entry of a database, if any.
fn entry(dboid: u32) -> Option<&'static DbWorker> {
    entries()
        .iter()
        .find(|d| d.dboid.load(Ordering::Acquire) == dboid)
}

/// Finds or claims an entry for `dboid` (registry lock held by the caller). When all
/// entries are taken, one whose worker is gone (exited, or its database was dropped) is
/// reused.
fn claim(dboid: u32, now_ms: i64) -> Option<&'static DbWorker> {
    if let Some(d) = entry(dboid) {
        return Some(d);
    }
    let free = entries()
        .iter()
        .find(|d| d.dboid.load(Ordering::Acquire) == 0)
        .or_else(|| {
            entries().iter().find(|d| {
                let pid = d.pid.load(Ordering::Acquire);
                let launched = d.launched_at_ms.load(Ordering::Acquire);
                !pid_alive(pid) && now_ms - launched > 10_000
            })
        })?;
    free.pid.store(0, Ordering::Relaxed);
    free.latch.store(0, Ordering::Relaxed);
    free.launched_at_ms.store(0, Ordering::Relaxed);
    free.dboid.store(dboid, Ordering::Release);
    Some(free)
}

pub use crate::shmem::backend_alive as pid_alive;

/// Decides whether the caller should launch a worker for `dboid` now. Returns
/// `Err(())` when the registry is full.
pub fn should_launch(dboid: u32, now_ms: i64) -> Result<bool, ()> {
    let _lock = registry_lock();
    let d = claim(dboid, now_ms).ok_or(())?;
    let pid = d.pid.load(Ordering::Acquire);
    if pid != 0 {
        if pid_alive(pid) {
            return Ok(false);
        }
        d.pid.store(0, Ordering::Release);
    }
    let last = d.launched_at_ms.load(Ordering::Acquire);
    if last != 0 && now_ms - last < 5_000 {
        return Ok(false);
    }
    d.launched_at_ms.store(now_ms, Ordering::Release);
    Ok(true)
}

/// The worker registers itself. Returns false if another live worker serves the db.
pub fn register_worker(dboid: u32) -> bool {
    let _lock = registry_lock();
    let Some(d) = claim(dboid, crate::clock::wall_ms()) else {
        return false;
    };
    let pid = d.pid.load(Ordering::Acquire);
    // SAFETY: MyProcPid/MyProc are set in a worker with shared-memory access.
    let (me, latch) = unsafe {
        (
            pg_sys::MyProcPid,
            &raw mut (*pg_sys::MyProc).procLatch as u64,
        )
    };
    if pid != 0 && pid != me && pid_alive(pid) {
        return false;
    }
    d.pid.store(me, Ordering::Release);
    d.latch.store(latch, Ordering::Release);
    true
}

/// The worker leaves the registry on a clean exit.
pub fn unregister_worker(dboid: u32) {
    let _lock = registry_lock();
    if let Some(d) = entry(dboid) {
        // SAFETY: reading our own pid.
        if d.pid.load(Ordering::Acquire) == unsafe { pg_sys::MyProcPid } {
            d.pid.store(0, Ordering::Release);
            d.latch.store(0, Ordering::Release);
            d.launched_at_ms.store(0, Ordering::Release);
            d.dboid.store(0, Ordering::Release);
        }
    }
}

/// Sets the latch of the worker of `dboid`; returns false if none is registered.
pub fn wake_worker(dboid: u32) -> bool {
    let Some(d) = entry(dboid) else {
        return false;
    };
    let latch = d.latch.load(Ordering::Acquire);
    if latch == 0 || d.pid.load(Ordering::Acquire) == 0 {
        return false;
    }
    // SAFETY: the address is a PGPROC latch inside shared memory. If the worker exited
    // and the PGPROC was reused, we wake an unrelated process once: harmless.
    unsafe { pg_sys::SetLatch(latch as *mut pg_sys::Latch) };
    true
}

pub fn worker_pid(dboid: u32) -> i32 {
    entry(dboid).map_or(0, |d| d.pid.load(Ordering::Acquire))
}

fn skipped() -> &'static [AtomicU32] {
    // SAFETY: COUNT dboids were zeroed at startup and live as long as the server.
    unsafe {
        std::slice::from_raw_parts(
            SKIPPED.load(Ordering::Acquire),
            COUNT.load(Ordering::Acquire) as usize,
        )
    }
}

/// True if this server was promoted (it started in recovery) and the sequences of
/// `dboid` have not yet skipped `id_gen.promotion_skip_segments` since.
pub fn promotion_skip_pending(dboid: u32) -> bool {
    STARTED_IN_RECOVERY.load(Ordering::Acquire)
        && !skipped().iter().any(|d| d.load(Ordering::Acquire) == dboid)
}

/// Records that the sequences of `dboid` skipped (after the skip committed). With the
/// list full the skip is simply applied again by a later worker: a gap, never a repeat.
pub fn mark_promotion_skipped(dboid: u32) {
    let _lock = registry_lock();
    if let Some(free) = skipped().iter().find(|d| d.load(Ordering::Acquire) == 0) {
        free.store(dboid, Ordering::Release);
    }
}
