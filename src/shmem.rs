//! Shared-memory plumbing, and nothing else: the PostgreSQL 15 request/startup hooks,
//! the list of regions the subsystems asked for, and an LWLock guard.
//!
//! This file knows no feature. Each subsystem describes its shared state as a [`Region`]
//! (a name, a size, a number of LWLocks and an `attach` function that records where the
//! region landed); `lib.rs` hands the list to [`install_hooks`] while preloading. Every
//! region gets its own `ShmemInitStruct` area and, if it asks for locks, its own named
//! LWLock tranche (named like the region), so `pg_stat_activity.wait_event` names the
//! subsystem a backend waits on. A region of plain counters (atomics, no lock) attaches with
//! [`attach_counters`] and reads with [`counter_at`].
//!
//! Invariants:
//! * Regions are initialised exactly once per shared-memory lifetime (`fresh` is true
//!   only for the process that created the area, under `AddinShmemInitLock`); after a
//!   crash-restart the postmaster creates new areas and every region is re-attached.
//! * A [`Guard`] is held for O(1) work only — never across SPI, a wait or `ereport`.

use pgrx::pg_sys;
use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::OnceLock;

/// One subsystem's shared state.
pub struct Region {
    /// Name of the `ShmemInitStruct` area and of its LWLock tranche; unique.
    pub name: &'static CStr,
    /// Bytes of the area (read while the postmaster requests memory).
    pub size: fn() -> usize,
    /// Bytes the region allocates from shared memory by itself (a dynahash), requested
    /// on top of `size`.
    pub extra: fn() -> usize,
    /// LWLocks of the region's tranche (0: no tranche).
    pub locks: fn() -> usize,
    /// Records the area's address (and its first lock) in the subsystem; initialises the
    /// area when `fresh`.
    ///
    /// # Safety
    /// Called only from the startup hook, under `AddinShmemInitLock`, with `base`
    /// pointing at `size()` bytes of shared memory and `locks` at `locks()` LWLocks (or
    /// null when `locks()` is 0).
    pub attach: unsafe fn(base: *mut u8, fresh: bool, locks: *mut pg_sys::LWLockPadded),
}

/// Where a region of plain shared counters (an array of `AtomicU64`, no lock) landed: the
/// subsystem keeps one in a static, attaches it with [`attach_counters`] from its region's
/// `attach`, and reads a counter with [`counter_at`].
pub type CounterArray = AtomicPtr<AtomicU64>;

/// Attaches (and, when `fresh`, initialises to `initial`) `count` counters at `base`.
///
/// # Safety
/// As [`Region::attach`]: `base` points at `count * size_of::<AtomicU64>()` bytes of shared
/// memory that live as long as the server.
pub unsafe fn attach_counters(
    array: &CounterArray,
    base: *mut u8,
    fresh: bool,
    count: usize,
    initial: u64,
) {
    let counters = base as *mut AtomicU64;
    if fresh {
        for i in 0..count {
            // SAFETY: the area holds `count` counters (the caller's region size) and is fresh.
            unsafe { counters.add(i).write(AtomicU64::new(initial)) };
        }
    }
    array.store(counters, Ordering::Release);
}

/// Counter `i` of an attached counter array (`None` before it is attached, or without shared
/// memory). `i` must be below the count it was attached with.
pub fn counter_at(array: &CounterArray, i: usize) -> Option<&'static AtomicU64> {
    let p = array.load(Ordering::Acquire);
    // SAFETY: set once the region is attached, with more than `i` counters that live as long
    // as the server.
    (!p.is_null()).then(|| unsafe { &*p.add(i) })
}

pub fn no_extra() -> usize {
    0
}

pub fn no_locks() -> usize {
    0
}

type Hook = unsafe extern "C-unwind" fn();

static REGIONS: OnceLock<&'static [Region]> = OnceLock::new();
static PREV_REQUEST_HOOK: OnceLock<Option<Hook>> = OnceLock::new();
static PREV_STARTUP_HOOK: OnceLock<Option<Hook>> = OnceLock::new();
/// Set once this process has attached every region.
static ATTACHED: AtomicBool = AtomicBool::new(false);

/// Installs the shmem hooks for `regions`; called from `_PG_init` only while preloading.
pub fn install_hooks(regions: &'static [Region]) {
    if REGIONS.set(regions).is_err() {
        return; // _PG_init runs once per process; be idempotent anyway
    }
    // SAFETY: _PG_init runs single-threaded in the postmaster before any hook fires;
    // chaining to the previous hooks keeps other extensions working.
    unsafe {
        let _ = PREV_REQUEST_HOOK.set(pg_sys::shmem_request_hook);
        pg_sys::shmem_request_hook = Some(shmem_request);
        let _ = PREV_STARTUP_HOOK.set(pg_sys::shmem_startup_hook);
        pg_sys::shmem_startup_hook = Some(shmem_startup);
    }
}

fn regions() -> &'static [Region] {
    REGIONS.get().copied().unwrap_or(&[])
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn shmem_request() {
    // SAFETY: called by the postmaster in its shmem-request phase, the only place where
    // these requests are allowed.
    unsafe {
        if let Some(Some(prev)) = PREV_REQUEST_HOOK.get() {
            prev();
        }
        for r in regions() {
            pg_sys::RequestAddinShmemSpace((r.size)() + (r.extra)());
            let n = (r.locks)();
            if n > 0 {
                pg_sys::RequestNamedLWLockTranche(r.name.as_ptr(), n as i32);
            }
        }
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn shmem_startup() {
    // SAFETY: runs in the postmaster (and after a crash-restart) with shared memory
    // attached; AddinShmemInitLock serialises us against other extensions' init code.
    unsafe {
        if let Some(Some(prev)) = PREV_STARTUP_HOOK.get() {
            prev();
        }
        // AddinShmemInitLock is MainLWLockArray[21] (lwlocknames.h); bindgen omits the macro.
        let init_lock = &raw mut (*pg_sys::MainLWLockArray.add(21)).lock;
        pg_sys::LWLockAcquire(init_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        for r in regions() {
            let mut found = false;
            let base = pg_sys::ShmemInitStruct(r.name.as_ptr(), (r.size)(), &mut found) as *mut u8;
            let locks = if (r.locks)() > 0 {
                pg_sys::GetNamedLWLockTranche(r.name.as_ptr())
            } else {
                std::ptr::null_mut()
            };
            (r.attach)(base, !found, locks);
        }
        pg_sys::LWLockRelease(init_lock);
    }
    ATTACHED.store(true, Ordering::Release);
}

/// True once shared memory is attached (i.e. the library was preloaded).
#[inline]
pub fn available() -> bool {
    ATTACHED.load(Ordering::Acquire)
}

/// An acquired LWLock, released on drop (and by PostgreSQL itself on ERROR).
pub struct Guard(*mut pg_sys::LWLock);

impl Drop for Guard {
    fn drop(&mut self) {
        // SAFETY: we acquired this lock in `acquire()` and still hold it: nothing under a
        // guard raises an ERROR, and if a pg_sys call did, the unwind runs this Drop
        // before PostgreSQL's abort processing (LWLockReleaseAll) happens.
        unsafe { pg_sys::LWLockRelease(self.0) }
    }
}

/// Acquires lock `index` of a tranche whose first lock is `base`.
///
/// # Safety
/// `base` must be the first lock of a tranche of more than `index` locks.
pub unsafe fn acquire(base: *mut pg_sys::LWLockPadded, index: usize, exclusive: bool) -> Guard {
    let mode = if exclusive {
        pg_sys::LWLockMode::LW_EXCLUSIVE
    } else {
        pg_sys::LWLockMode::LW_SHARED
    };
    // SAFETY: per the contract above, the lock exists in shared memory.
    unsafe {
        let l = &raw mut (*base.add(index)).lock;
        pg_sys::LWLockAcquire(l, mode);
        Guard(l)
    }
}

/// Rounds `n` up to a cache line, so consecutive parts of a region do not share one.
pub const fn cache_aligned(n: usize) -> usize {
    (n + 63) & !63
}

/// True if `pid` is a live backend or background worker (takes ProcArrayLock briefly:
/// never call it under another lock of ours unless the order is documented there).
pub fn backend_alive(pid: i32) -> bool {
    // SAFETY: BackendPidGetProc takes ProcArrayLock itself and returns NULL if no
    // live process has that pid.
    pid > 0 && unsafe { !pg_sys::BackendPidGetProc(pid).is_null() }
}
