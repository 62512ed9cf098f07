//! Invalidation epochs: shared counters that tell every backend to drop a backend-local
//! cache once a change to what it caches has committed anywhere.
//!
//! A subsystem bumps its epoch in a commit callback (`bump_at_commit`); readers compare
//! the epoch they cached against [`current`] on their next use. This file knows no
//! subsystem beyond the names of the counters.
//!
//! Invariant: an epoch only grows; without shared memory it reads 0 forever (then the
//! caches are per statement or per call, see their users).

use crate::shmem::{self, Region};
use pgrx::pg_sys;
use std::sync::atomic::{AtomicU64, Ordering};

/// The caches that are invalidated through an epoch.
#[derive(Clone, Copy)]
pub enum Epoch {
    /// Expanded order-number keys (`order_no/keys.rs`).
    OrderNoKeys = 0,
    /// Serial definitions (`serial.rs`).
    SerialDefinitions = 1,
    /// Owners, grants and sequence settings cached with access decisions (`access.rs`).
    AccessControl = 2,
    /// A shard's route version and the partitions of its distributed tables
    /// (`routing_guard/shard_state.rs`).
    ShardRouting = 3,
    /// A coordinator's route table as shard slots (`route_hash.rs`).
    CoordinatorRoutes = 4,
}

const COUNT: usize = 5;

static COUNTERS: shmem::CounterArray = shmem::CounterArray::new(std::ptr::null_mut());

pub const REGION: Region = Region {
    name: c"id_gen invalidation epochs",
    size: || COUNT * size_of::<AtomicU64>(),
    extra: shmem::no_extra,
    locks: shmem::no_locks,
    attach: attach_region,
};

/// # Safety
/// See [`Region::attach`].
unsafe fn attach_region(base: *mut u8, fresh: bool, _locks: *mut pg_sys::LWLockPadded) {
    // SAFETY: the area holds COUNT counters (Region::size); see Region::attach.
    unsafe { shmem::attach_counters(&COUNTERS, base, fresh, COUNT, 1) };
}

fn counter(which: Epoch) -> Option<&'static AtomicU64> {
    shmem::counter_at(&COUNTERS, which as usize)
}

/// Current value of an epoch (0 without shared memory).
pub fn current(which: Epoch) -> u64 {
    counter(which).map_or(0, |c| c.load(Ordering::Acquire))
}

/// Bumps `which` when the current transaction commits: every backend then drops the
/// matching cache at its next use.
pub fn bump_at_commit(which: Epoch) {
    pgrx::register_xact_callback(pgrx::PgXactCallbackEvent::Commit, move || {
        if let Some(c) = counter(which) {
            c.fetch_add(1, Ordering::AcqRel);
        }
    });
}

/// Runs `f` with the latest snapshot active. A cache that an epoch invalidates is loaded
/// this way: it is kept under the epoch read before loading, so it must include everything
/// that committed before that epoch was read, also what committed after the statement's own
/// snapshot was taken (a routing-guard claim that waited for a re-partition reloads after it).
pub fn with_latest_snapshot<R>(f: impl FnOnce() -> R) -> R {
    struct Pop;
    impl Drop for Pop {
        fn drop(&mut self) {
            // SAFETY: pops the snapshot pushed below, at the same nesting level.
            unsafe { pg_sys::PopActiveSnapshot() };
        }
    }
    // SAFETY: inside a transaction; PushActiveSnapshot copies the static latest snapshot.
    unsafe { pg_sys::PushActiveSnapshot(pg_sys::GetLatestSnapshot()) };
    let _pop = Pop;
    f()
}

/// Whether this database has the catalog a cache is loaded from (`probe` is a query of one
/// boolean): the library is preloaded for the whole server, and a database may have no
/// id_gen, or an older version of it.
pub fn catalog_present(
    client: &pgrx::spi::SpiClient<'_>,
    probe: &str,
) -> pgrx::spi::SpiResult<bool> {
    Ok(client
        .select(probe, None, &[])?
        .first()
        .get_one::<bool>()?
        .unwrap_or(false))
}
