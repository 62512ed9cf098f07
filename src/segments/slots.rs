//! The shared table of slots: one per cached counter (a counter group of a sequence, or
//! a period of a serial), found through a dynahash map keyed by [`SlotKey`].
//!
//! Layout (sized at server start from `id_gen.max_sequences`, which is why the region's
//! size is computed at run time):
//!
//! ```text
//! region "id_gen segment slots":  SlotTable │ pad to 64 │ Slot × max_sequences
//! dynahash "id_gen slot map":     SlotKey → slot index
//! LWLock tranche "id_gen segment slots" (max_sequences + 1 locks):
//!   lock 0     = the map lock
//!   lock 1 + i = the lock of slot i
//! ```
//!
//! Which lock guards what:
//! * the map lock (exclusive): the hash map, the free list (`free_head`, `next_free`)
//!   and every change of a slot's identity (`key`, `in_use`, allocation and release);
//! * slot i's lock: `key` reads outside the map lock (shared mode), the chain's
//!   `publish_standby`/`switch_to_standby`/`reset`, `state`, `incarnation`, the
//!   bulk mailbox (`bulk_*`) and the diagnostics (`authority`, `last_error*`);
//! * no lock: the chain's wait-free takes, the striped call counter and the statistics
//!   (atomics written by the worker, read racily by the status view).
//!
//! Invariants:
//! * Locks are held for O(1) work only (the map lock: at most `MAX_GROUPS` hash
//!   lookups) — never across SPI, waits or `ereport`.
//! * A slot's `generation` changes whenever its identity changes (allocated, reset for a
//!   new incarnation, released); backends cache `(slot, generation)` and re-check it after
//!   taking a value, so a value is never taken from a slot that was reassigned.
//! * Values are only published by the worker after the catalog row that reserves them
//!   has committed (see `worker.rs`).

use super::key::SlotKey;
use crate::shmem::{self, cache_aligned, Guard, Region};
use id_gen_core::segment::{SegmentChain, StripedCounter};
use pgrx::pg_sys;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicI64, AtomicPtr, AtomicU32, AtomicU64, Ordering};

/// Slot states seen by callers.
pub const STATE_OK: u32 = 0;
pub const STATE_DROPPED: u32 = 1;
pub const STATE_EXHAUSTED: u32 = 2;
pub const STATE_REFILL_FAILED: u32 = 3;
/// A serial slot whose period is over (the catalog moved on to a later period).
pub const STATE_PERIOD_CLOSED: u32 = 4;

/// Bulk mailbox states (`Slot::bulk_state`).
pub const BULK_IDLE: u32 = 0;
/// A caller asked for `bulk_want` values (ticket `bulk_ticket`); the worker reserves.
pub const BULK_REQUESTED: u32 = 1;
/// The worker reserved `[bulk_first, bulk_first + bulk_want - 1]` (committed).
pub const BULK_DONE: u32 = 2;
/// Fewer than `bulk_want` values are left before `max_value` (`bulk_left` of them).
pub const BULK_NOT_ENOUGH: u32 = 3;
/// The reservation failed (the server log has the worker's error).
pub const BULK_FAILED: u32 = 4;

/// Most counter groups a sequence may have (catalog CHECK agrees).
pub const MAX_GROUPS: u32 = 64;

#[repr(C)]
struct SlotTable {
    nslots: u32,
    /// Head of the free-slot list (index, or u32::MAX); guarded by the map lock.
    free_head: u32,
    next_generation: AtomicU64,
}

#[repr(C)]
struct MapEntry {
    key: SlotKey,
    slot: u32,
}

#[repr(C)]
pub struct Slot {
    pub chain: SegmentChain,
    pub calls: StripedCounter,
    pub generation: AtomicU64,
    pub in_use: AtomicU32,
    /// The database of `key`, readable without a lock (the worker's scan filter).
    pub dboid: AtomicU32,
    pub state: AtomicU32,
    /// Set by callers (preload crossing, empty cache); cleared by the worker.
    pub refill_wanted: AtomicU32,
    /// Identity of the catalog row this slot caches; guarded by the slot lock.
    pub incarnation: AtomicI64,
    /// Written under the map lock *and* the slot lock; read under either (see [`key_of`]).
    key: UnsafeCell<SlotKey>,
    next_free: UnsafeCell<u32>,
    // the bulk mailbox, guarded by the slot lock (atomics so the worker can poll it)
    pub bulk_state: AtomicU32,
    pub bulk_ticket: AtomicU64,
    pub bulk_want: AtomicU64,
    pub bulk_first: AtomicI64,
    pub bulk_left: AtomicU64,
    /// PID of the backend that owns the mailbox while it is not idle.
    pub bulk_owner: AtomicU32,
    // statistics, written by the worker (waits: by callers)
    pub refills: AtomicU64,
    pub waits: AtomicU64,
    pub last_step: AtomicU64,
    pub rate_bits: AtomicU64,
    pub last_refill_us: AtomicU64,
    pub last_refill_at: AtomicI64,
    /// Failed attempts at reserving from an authority (the worker); callers whose wait for a
    /// segment ended at `id_gen.refill_timeout` (the callers); the round trip of the last
    /// reservation statement an authority answered, in µs, apart from the local commit (the
    /// worker).
    pub authority_errors: AtomicU64,
    pub wait_timeouts: AtomicU64,
    pub authority_round_trip_us: AtomicU64,
    /// Diagnostics of the last reservation attempt, written by the worker under the slot
    /// lock and read under it (see [`set_diagnostics`], [`diagnostics`]): the authority
    /// it used (empty: local), and the error of the last failed attempt (cleared by the
    /// next success) with its time (unix ms; 0: none).
    authority: UnsafeCell<[u8; AUTHORITY_LEN]>,
    last_error: UnsafeCell<[u8; LAST_ERROR_LEN]>,
    last_error_at_ms: AtomicI64,
    pub cv: UnsafeCell<pg_sys::ConditionVariable>,
}

/// Room for an authority (a foreign server name) in a slot.
const AUTHORITY_LEN: usize = 64;
/// Room for the text of the last reservation error in a slot (longer texts are cut).
pub const LAST_ERROR_LEN: usize = 256;

static TABLE: AtomicPtr<SlotTable> = AtomicPtr::new(std::ptr::null_mut());
static SLOTS: AtomicPtr<Slot> = AtomicPtr::new(std::ptr::null_mut());
static MAP: AtomicPtr<pg_sys::HTAB> = AtomicPtr::new(std::ptr::null_mut());
static LOCKS: AtomicPtr<pg_sys::LWLockPadded> = AtomicPtr::new(std::ptr::null_mut());

const MAP_NAME: &std::ffi::CStr = c"id_gen slot map";

fn configured_slots() -> usize {
    crate::gucs::MAX_SEQUENCES.get() as usize
}

pub const REGION: Region = Region {
    name: c"id_gen segment slots",
    size: || cache_aligned(size_of::<SlotTable>()) + 64 + configured_slots() * size_of::<Slot>(),
    // SAFETY (closure): hash_estimate_size is a pure computation.
    extra: || unsafe { pg_sys::hash_estimate_size(configured_slots() as _, size_of::<MapEntry>()) },
    locks: || configured_slots() + 1,
    attach: attach_region,
};

/// # Safety
/// See [`Region::attach`].
unsafe fn attach_region(base: *mut u8, fresh: bool, locks: *mut pg_sys::LWLockPadded) {
    let n = configured_slots();
    let table = base as *mut SlotTable;
    // SAFETY: the area is `REGION.size()` bytes: the table, up to 64 bytes of padding
    // and n slots; a fresh area is ours alone under AddinShmemInitLock.
    unsafe {
        let slots = base
            .add(cache_aligned(size_of::<SlotTable>()))
            .map_addr(|a| (a + 63) & !63) as *mut Slot;
        // SAFETY: HASHCTL is a plain C struct; all-zero is its documented "unset" state.
        let mut ctl: pg_sys::HASHCTL = std::mem::zeroed();
        ctl.keysize = size_of::<SlotKey>();
        ctl.entrysize = size_of::<MapEntry>();
        let map = pg_sys::ShmemInitHash(
            MAP_NAME.as_ptr(),
            n as _,
            n as _,
            &mut ctl,
            (pg_sys::HASH_ELEM | pg_sys::HASH_BLOBS) as i32,
        );
        if fresh {
            table.write(SlotTable {
                nslots: n as u32,
                free_head: if n > 0 { 0 } else { u32::MAX },
                next_generation: AtomicU64::new(1),
            });
            for i in 0..n {
                let slot = slots.add(i);
                std::ptr::write_bytes(slot as *mut u8, 0, size_of::<Slot>());
                (&raw mut (*slot).chain).write(SegmentChain::new());
                (&raw mut (*slot).calls).write(StripedCounter::new());
                *(*slot).next_free.get() = if i + 1 < n { (i + 1) as u32 } else { u32::MAX };
                pg_sys::ConditionVariableInit((*slot).cv.get());
            }
        }
        TABLE.store(table, Ordering::Release);
        SLOTS.store(slots, Ordering::Release);
        MAP.store(map, Ordering::Release);
        LOCKS.store(locks, Ordering::Release);
    }
}

// SAFETY: every field is either atomic, or an UnsafeCell whose accesses follow the lock
// discipline in the module header; the struct lives in shared memory for the server's life.
unsafe impl Sync for Slot {}

fn table() -> &'static SlotTable {
    // SAFETY: callers check `shmem::available()` first (the SQL layer does it at entry);
    // the table lives as long as the server.
    unsafe { &*TABLE.load(Ordering::Acquire) }
}

pub fn slot_count() -> usize {
    table().nslots as usize
}

#[inline]
pub fn slot(i: usize) -> &'static Slot {
    assert!(i < slot_count());
    // SAFETY: i is in bounds; slots live for the life of the server.
    unsafe { &*SLOTS.load(Ordering::Relaxed).add(i) }
}

fn lock(index: usize, exclusive: bool) -> Guard {
    // SAFETY: the tranche has nslots + 1 locks; callers pass 0 or 1 + a slot index.
    unsafe { shmem::acquire(LOCKS.load(Ordering::Acquire), index, exclusive) }
}

fn map_lock() -> Guard {
    lock(0, true)
}

pub fn slot_lock(i: usize) -> Guard {
    lock(i + 1, true)
}

pub fn slot_lock_shared(i: usize) -> Guard {
    lock(i + 1, false)
}

/// The key of slot `i`, read under its lock (shared), with whether it is in use.
pub fn key_of(i: usize) -> Option<SlotKey> {
    let s = slot(i);
    let _g = slot_lock_shared(i);
    // SAFETY: the key is written only under this slot's lock held exclusively.
    (s.in_use.load(Ordering::Acquire) != 0).then(|| unsafe { *s.key.get() })
}

/// The slot index of `key`, if cached. The caller holds the map lock.
fn map_find(key: &SlotKey) -> Option<usize> {
    let mut found = false;
    // SAFETY: the caller holds the map lock; HASH_FIND only reads, and a found entry
    // stays valid while the lock is held.
    unsafe {
        let entry = pg_sys::hash_search(
            MAP.load(Ordering::Acquire),
            key as *const SlotKey as *const _,
            pg_sys::HASHACTION::HASH_FIND,
            &mut found,
        ) as *mut MapEntry;
        found.then(|| (*entry).slot as usize)
    }
}

/// Removes `key` from the map and returns its slot to the free list; `None` if it was
/// not cached. The caller holds the map lock exclusively and wakes the slot's waiters.
fn unmap_and_free_locked(key: &SlotKey) -> Option<usize> {
    let i = map_find(key)?;
    let mut found = false;
    // SAFETY: map lock held exclusively; HASH_REMOVE of a key we just found.
    unsafe {
        pg_sys::hash_search(
            MAP.load(Ordering::Acquire),
            key as *const SlotKey as *const _,
            pg_sys::HASHACTION::HASH_REMOVE,
            &mut found,
        );
    }
    free_slot_locked(i);
    Some(i)
}

/// Outcome of [`attach`].
pub enum Attach {
    /// `(slot index, generation)`
    Attached(usize, u64),
    /// All slots are taken.
    Full,
}

/// Finds or creates the slot of `key`; if the cached catalog row has a different
/// incarnation (the sequence was dropped and created again), the slot is reset.
pub fn attach(key: &SlotKey, incarnation: i64) -> Attach {
    let _map = map_lock();
    if let Some(idx) = map_find(key) {
        let s = slot(idx);
        let _g = slot_lock(idx);
        if s.incarnation.load(Ordering::Relaxed) != incarnation
            || s.state.load(Ordering::Acquire) == STATE_DROPPED
        {
            reset_slot(s, incarnation);
        }
        return Attach::Attached(idx, s.generation.load(Ordering::Acquire));
    }
    let table = TABLE.load(Ordering::Acquire);
    // SAFETY: map lock held; the free list is only touched under it.
    let free_head = unsafe { (*table).free_head };
    if free_head == u32::MAX {
        return Attach::Full;
    }
    let idx = free_head as usize;
    let mut found = false;
    // SAFETY: map lock held exclusively; HASH_ENTER_NULL returns NULL instead of ERROR
    // when the table is full, so no error is raised under our lock.
    let entry = unsafe {
        pg_sys::hash_search(
            MAP.load(Ordering::Acquire),
            key as *const SlotKey as *const _,
            pg_sys::HASHACTION::HASH_ENTER_NULL,
            &mut found,
        )
    } as *mut MapEntry;
    if entry.is_null() {
        return Attach::Full;
    }
    let s = slot(idx);
    let _g = slot_lock(idx);
    // SAFETY: fresh entry, owned by us under the map lock; the slot is free, so only we
    // write its identity (map lock + slot lock, as the header says).
    unsafe {
        (*entry).slot = idx as u32;
        (*table).free_head = *s.next_free.get();
        *s.key.get() = *key;
    }
    s.dboid.store(key.dboid, Ordering::Release);
    s.in_use.store(1, Ordering::Release);
    reset_slot(s, incarnation);
    for stat in [
        &s.refills,
        &s.waits,
        &s.last_step,
        &s.rate_bits,
        &s.last_refill_us,
        &s.authority_errors,
        &s.wait_timeouts,
        &s.authority_round_trip_us,
    ] {
        stat.store(0, Ordering::Relaxed);
    }
    s.last_refill_at.store(0, Ordering::Relaxed);
    s.calls.clear();
    Attach::Attached(idx, s.generation.load(Ordering::Acquire))
}

/// New identity for a slot: forget segments and any bulk request, bump generation.
/// Slot lock held.
fn reset_slot(s: &Slot, incarnation: i64) {
    let gen = table().next_generation.fetch_add(1, Ordering::AcqRel);
    s.generation.store(gen, Ordering::Release);
    s.chain.reset();
    s.incarnation.store(incarnation, Ordering::Relaxed);
    s.state.store(STATE_OK, Ordering::Release);
    s.refill_wanted.store(0, Ordering::Relaxed);
    s.bulk_state.store(BULK_IDLE, Ordering::Release);
    s.bulk_owner.store(0, Ordering::Relaxed);
    s.bulk_ticket.fetch_add(1, Ordering::AcqRel);
    let _ = write_diagnostics(s, None, None);
}

/// Returns slot `i` to the free list, marking it dropped for anyone still holding it.
/// The caller holds the map lock and has removed the slot's map entry.
fn free_slot_locked(i: usize) {
    let s = slot(i);
    let _g = slot_lock(i);
    reset_slot(s, 0);
    s.state.store(STATE_DROPPED, Ordering::Release);
    s.in_use.store(0, Ordering::Release);
    s.dboid.store(0, Ordering::Release);
    let table = TABLE.load(Ordering::Acquire);
    // SAFETY: map lock held (caller); the free list is only touched under it.
    unsafe {
        *s.next_free.get() = (*table).free_head;
        (*table).free_head = i as u32;
    }
}

/// Forgets every cached counter group of a sequence (drop, or create over a stale
/// cache). Returns the number of slots freed; waiters are woken.
pub fn purge_sequence(dboid: u32, name: &id_gen_core::name::SeqName) -> usize {
    let freed: Vec<usize> = {
        let _map = map_lock();
        (0..MAX_GROUPS)
            .filter_map(|group| unmap_and_free_locked(&SlotKey::sequence(dboid, name, group)))
            .collect()
    };
    for &i in &freed {
        broadcast(i);
    }
    freed.len()
}

/// Frees the slot of one key, if cached (a serial period that is over, a dropped row).
pub fn purge_key(key: &SlotKey) {
    let freed = {
        let _map = map_lock();
        unmap_and_free_locked(key)
    };
    if let Some(i) = freed {
        broadcast(i);
    }
}

/// Frees every slot whose key matches `pred` (O(max_sequences) slot locks, one at a
/// time, then one map-lock pass per hit; for DDL such as `drop_serial`).
pub fn purge_matching(pred: impl Fn(&SlotKey) -> bool) {
    let keys: Vec<SlotKey> = (0..slot_count())
        .filter_map(key_of)
        .filter(|k| pred(k))
        .collect();
    for key in keys {
        purge_key(&key);
    }
}

/// After `alter_sequence`: clear an "exhausted"/"failed" verdict so the next refill
/// uses the new settings.
pub fn clear_verdicts(dboid: u32, name: &id_gen_core::name::SeqName) {
    let slots: Vec<usize> = {
        let _map = map_lock();
        (0..MAX_GROUPS)
            .filter_map(|group| map_find(&SlotKey::sequence(dboid, name, group)))
            .collect()
    };
    for i in slots {
        {
            let _g = slot_lock(i);
            let s = slot(i);
            if s.state.load(Ordering::Acquire) != STATE_DROPPED {
                s.state.store(STATE_OK, Ordering::Release);
            }
        }
        broadcast(i);
    }
}

/// What the status view and a timed-out caller learn about slot `i`'s reservations.
pub struct Diagnostics {
    /// The foreign server its sequence reserves from (`None`: the local catalog, or no
    /// reservation yet).
    pub authority: Option<String>,
    /// The error of the last failed reservation and its time (unix ms), if the last
    /// attempt failed.
    pub last_error: Option<(String, i64)>,
}

/// Copies `text` into a fixed-size, NUL-padded field, cut at a character boundary.
fn store_text(field: &mut [u8], text: &str) {
    let mut end = text.len().min(field.len() - 1);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    field.fill(0);
    field[..end].copy_from_slice(&text.as_bytes()[..end]);
}

fn load_text(field: &[u8]) -> Option<String> {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    (end > 0).then(|| String::from_utf8_lossy(&field[..end]).into_owned())
}

/// The error a slot had before [`set_diagnostics`] recorded a new outcome.
#[derive(PartialEq, Eq)]
pub enum PreviousError {
    None,
    /// The same text as the new error (as stored: cut to the field's size).
    Same,
    Other,
}

/// Slot lock held exclusively.
fn write_diagnostics(s: &Slot, authority: Option<&str>, error: Option<&str>) -> PreviousError {
    // SAFETY: the caller holds the slot lock exclusively; these fields are only accessed
    // under it.
    let (before, after) = unsafe {
        let before = load_text(&*s.last_error.get());
        store_text(&mut *s.authority.get(), authority.unwrap_or(""));
        store_text(&mut *s.last_error.get(), error.unwrap_or(""));
        (before, load_text(&*s.last_error.get()))
    };
    let at = if error.is_some() {
        crate::clock::wall_ms()
    } else {
        0
    };
    s.last_error_at_ms.store(at, Ordering::Relaxed);
    match before {
        None => PreviousError::None,
        Some(b) if Some(&b) == after.as_ref() => PreviousError::Same,
        Some(_) => PreviousError::Other,
    }
}

/// Records the outcome of a reservation attempt for slot `i`: the authority used and
/// the error, if it failed (`None` clears the last error). The caller holds the slot
/// lock (exclusively).
pub fn set_diagnostics(i: usize, authority: Option<&str>, error: Option<&str>) -> PreviousError {
    write_diagnostics(slot(i), authority, error)
}

/// Reads slot `i`'s diagnostics under its lock (shared).
pub fn diagnostics(i: usize) -> Diagnostics {
    let s = slot(i);
    let _g = slot_lock_shared(i);
    // SAFETY: written only under this slot's lock held exclusively.
    let (authority, error) = unsafe {
        (
            load_text(&*s.authority.get()),
            load_text(&*s.last_error.get()),
        )
    };
    let at = s.last_error_at_ms.load(Ordering::Relaxed);
    Diagnostics {
        authority,
        last_error: error.map(|e| (e, at)),
    }
}

/// The condition variable of slot `i` (for `ConditionVariable*` calls).
pub fn cv(i: usize) -> *mut pg_sys::ConditionVariable {
    slot(i).cv.get()
}

/// Wakes backends sleeping on a slot's condition variable.
pub fn broadcast(i: usize) {
    // SAFETY: the CV lives in shared memory for the server's life.
    unsafe { pg_sys::ConditionVariableBroadcast(cv(i)) }
}

/// Our backend's stripe number for counters.
#[inline]
pub fn my_stripe() -> usize {
    // SAFETY: MyProc is set for every backend and worker that has shared memory.
    #[cfg(any(feature = "pg15", feature = "pg16"))]
    unsafe {
        if pg_sys::MyProc.is_null() {
            0
        } else {
            (*pg_sys::MyProc).pgprocno as usize
        }
    }
    // PostgreSQL 17 dropped PGPROC.pgprocno; MyProcNumber is the same index (-1 before
    // the process has a PGPROC).
    // SAFETY: reads a process-local global.
    #[cfg(not(any(feature = "pg15", feature = "pg16")))]
    unsafe {
        usize::try_from(pg_sys::MyProcNumber).unwrap_or(0)
    }
}
