//! The shared-memory segment cache: a fixed table of slots, one per (database, sequence,
//! counter group), found through a dynahash map, plus the registry of per-database
//! refill workers.
//!
//! Layout (sized at server start from `id_gen.max_sequences` / `id_gen.max_databases`,
//! which is why the hooks are written by hand instead of `pg_shmem_init!`):
//!
//! ```text
//! Header │ Slot × max_sequences │ DbWorker × max_databases      + dynahash "id_gen slot map"
//! LWLock tranche "id_gen": lock 0 = map lock, lock 1+i = lock of slot i,
//! lock 1+max_sequences = snowflake state
//! ```
//!
//! Invariants:
//! * The map lock guards the hash map, the free list and slot identity changes; a slot
//!   lock guards `publish_standby`/`switch_to_standby`/`reset` of its chain and its
//!   status fields. Locks are held for O(1) work only — never across SPI, waits or
//!   `ereport` (every function here releases before returning).
//! * A slot's `generation` changes whenever its identity changes (allocated, purged);
//!   backends cache `(slot, generation)` and re-check it after taking a value, so a value
//!   is never taken from a slot that was reassigned.
//! * Values are only published by the worker after the catalog row that reserves them
//!   has committed (see `worker.rs`).

use id_gen_core::segment::{SegmentChain, StripedCounter};
use pgrx::pg_sys;
use std::ffi::CStr;
use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU32, AtomicU64, Ordering};

const TRANCHE: &CStr = c"id_gen";
const STRUCT_NAME: &CStr = c"id_gen segment cache";
const MAP_NAME: &CStr = c"id_gen slot map";

/// Slot states seen by callers.
pub const STATE_OK: u32 = 0;
pub const STATE_DROPPED: u32 = 1;
pub const STATE_EXHAUSTED: u32 = 2;
pub const STATE_REFILL_FAILED: u32 = 3;
/// A serial slot whose period is over (the catalog moved on to a later period).
pub const STATE_PERIOD_CLOSED: u32 = 4;

#[repr(C)]
pub struct Header {
    pub nslots: u32,
    pub ndbs: u32,
    next_generation: AtomicU64,
    /// Bumped when an order-number key change commits; backends drop cached keys.
    key_epoch: AtomicU64,
    /// Head of the free-slot list (index, or u32::MAX); guarded by the map lock.
    free_head: u32,
    /// Snowflake generator state (`api_snowflake.rs`); guarded by the snowflake lock.
    pub sf_last_ms: i64,
    pub sf_seq: u64,
    /// Durably persisted snowflake high-water mark (unix ms).
    pub sf_persisted_ms: AtomicI64,
    /// 1 while one backend writes the high-water file.
    pub sf_persisting: AtomicU32,
    /// Bumped when a serial is created or dropped (backends drop cached specs).
    pub serial_epoch: AtomicU64,
}

#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SlotKey {
    pub dboid: u32,
    pub group: u32,
    pub name: [u8; 64],
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
    pub state: AtomicU32,
    /// Set by callers (preload crossing, empty cache); cleared by the worker.
    pub refill_wanted: AtomicU32,
    /// Values a pending bulk request still needs (a hint for the next step).
    pub demand: AtomicU64,
    /// Identity of the catalog row this slot caches; guarded by the slot lock.
    pub incarnation: AtomicI64,
    pub key: SlotKey,
    next_free: u32,
    // statistics, written by the worker
    pub refills: AtomicU64,
    pub waits: AtomicU64,
    pub last_step: AtomicU64,
    pub rate_bits: AtomicU64,
    pub last_refill_us: AtomicU64,
    pub last_refill_at: AtomicI64,
    pub cv: pg_sys::ConditionVariable,
}

#[repr(C)]
pub struct DbWorker {
    pub dboid: AtomicU32,
    pub pid: AtomicI32,
    /// The worker's `procLatch` (an address inside shared memory, valid in every process).
    pub latch: AtomicU64,
    /// When a backend last asked the postmaster to start this worker (ms since epoch).
    pub launched_at_ms: AtomicI64,
}

struct Shared {
    header: *mut Header,
    slots: *mut Slot,
    dbs: *mut DbWorker,
    map: *mut pg_sys::HTAB,
    locks: *mut pg_sys::LWLockPadded,
}

static mut SHARED: Shared = Shared {
    header: std::ptr::null_mut(),
    slots: std::ptr::null_mut(),
    dbs: std::ptr::null_mut(),
    map: std::ptr::null_mut(),
    locks: std::ptr::null_mut(),
};
static mut PREV_REQUEST_HOOK: Option<unsafe extern "C-unwind" fn()> = None;
static mut PREV_STARTUP_HOOK: Option<unsafe extern "C-unwind" fn()> = None;

fn nslots() -> usize {
    crate::gucs::MAX_SEQUENCES.get() as usize
}
fn ndbs() -> usize {
    crate::gucs::MAX_DATABASES.get() as usize
}

fn struct_size() -> usize {
    size_of::<Header>() + nslots() * size_of::<Slot>() + ndbs() * size_of::<DbWorker>() + 64
}

fn map_ctl() -> pg_sys::HASHCTL {
    // SAFETY: HASHCTL is a plain C struct; all-zero is its documented "unset" state.
    let mut ctl: pg_sys::HASHCTL = unsafe { std::mem::zeroed() };
    ctl.keysize = size_of::<SlotKey>();
    ctl.entrysize = size_of::<MapEntry>();
    ctl
}

/// Installs the shmem hooks; called from `_PG_init` only while preloading.
pub fn install_hooks() {
    // SAFETY: _PG_init runs single-threaded in the postmaster before any hook fires;
    // chaining to the previous hooks keeps other extensions working.
    unsafe {
        PREV_REQUEST_HOOK = pg_sys::shmem_request_hook;
        pg_sys::shmem_request_hook = Some(shmem_request);
        PREV_STARTUP_HOOK = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(shmem_startup);
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn shmem_request() {
    // SAFETY: called by the postmaster in its shmem-request phase, the only place where
    // these two requests are allowed.
    unsafe {
        if let Some(prev) = PREV_REQUEST_HOOK {
            prev();
        }
        let map_size = pg_sys::hash_estimate_size(nslots() as _, size_of::<MapEntry>());
        pg_sys::RequestAddinShmemSpace(struct_size() + map_size);
        // lock 0: map; 1..=nslots: slots; nslots+1: snowflake state
        pg_sys::RequestNamedLWLockTranche(TRANCHE.as_ptr(), (nslots() + 2) as i32);
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn shmem_startup() {
    // SAFETY: runs in the postmaster (and after a crash-restart) with shared memory
    // attached; AddinShmemInitLock serialises us against other extensions' init code.
    // The area is fresh when `found` is false, so writing it without locks is fine.
    unsafe {
        if let Some(prev) = PREV_STARTUP_HOOK {
            prev();
        }
        // AddinShmemInitLock is MainLWLockArray[21] (lwlocknames.h); bindgen omits the macro.
        let init_lock = &raw mut (*pg_sys::MainLWLockArray.add(21)).lock;
        pg_sys::LWLockAcquire(init_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let mut found = false;
        let base =
            pg_sys::ShmemInitStruct(STRUCT_NAME.as_ptr(), struct_size(), &mut found) as *mut u8;
        let header = base as *mut Header;
        let slots = base.add(size_of::<Header>()).add(63).map_addr(|a| a & !63) as *mut Slot;
        let dbs = slots.add(nslots()) as *mut DbWorker;
        let mut ctl = map_ctl();
        let map = pg_sys::ShmemInitHash(
            MAP_NAME.as_ptr(),
            nslots() as _,
            nslots() as _,
            &mut ctl,
            (pg_sys::HASH_ELEM | pg_sys::HASH_BLOBS) as i32,
        );
        if !found {
            header.write(Header {
                nslots: nslots() as u32,
                ndbs: ndbs() as u32,
                next_generation: AtomicU64::new(1),
                key_epoch: AtomicU64::new(1),
                free_head: 0,
                sf_last_ms: 0,
                sf_seq: 0,
                sf_persisted_ms: AtomicI64::new(0),
                sf_persisting: AtomicU32::new(0),
                serial_epoch: AtomicU64::new(1),
            });
            crate::api_snowflake::init_state(&mut *header);
            for i in 0..nslots() {
                let slot = slots.add(i);
                std::ptr::write_bytes(slot as *mut u8, 0, size_of::<Slot>());
                (&raw mut (*slot).chain).write(SegmentChain::new());
                (&raw mut (*slot).calls).write(StripedCounter::new());
                (*slot).next_free = if i + 1 < nslots() {
                    (i + 1) as u32
                } else {
                    u32::MAX
                };
                pg_sys::ConditionVariableInit(&raw mut (*slot).cv);
            }
            std::ptr::write_bytes(dbs as *mut u8, 0, ndbs() * size_of::<DbWorker>());
        }
        SHARED.header = header;
        SHARED.slots = slots;
        SHARED.dbs = dbs;
        SHARED.map = map;
        SHARED.locks = pg_sys::GetNamedLWLockTranche(TRANCHE.as_ptr());
        pg_sys::LWLockRelease(init_lock);
    }
}

/// True once shared memory is attached (i.e. the library was preloaded).
pub fn available() -> bool {
    // SAFETY: a plain read of a pointer set once at startup, inherited by fork.
    unsafe { !SHARED.header.is_null() }
}

pub fn header_ref() -> &'static Header {
    header()
}

fn header() -> &'static Header {
    // SAFETY: callers check `available()` first (the SQL layer does it at entry).
    unsafe { &*SHARED.header }
}

/// Counters that tell backends to drop a cache when a change commits anywhere.
#[derive(Clone, Copy)]
pub enum Epoch {
    /// Order-number keys (`keys.rs`).
    Keys,
    /// Serial definitions (`api_serial.rs`).
    Serials,
}

fn epoch_counter(which: Epoch) -> &'static AtomicU64 {
    match which {
        Epoch::Keys => &header().key_epoch,
        Epoch::Serials => &header().serial_epoch,
    }
}

/// Current value of an epoch (0 without shared memory).
pub fn epoch(which: Epoch) -> u64 {
    if available() {
        epoch_counter(which).load(Ordering::Acquire)
    } else {
        0
    }
}

/// Called at commit of a change: every backend drops the matching cache.
pub fn bump_epoch(which: Epoch) {
    if available() {
        epoch_counter(which).fetch_add(1, Ordering::AcqRel);
    }
}

pub fn slot_count() -> usize {
    header().nslots as usize
}

pub fn slot(i: usize) -> &'static Slot {
    assert!(i < slot_count());
    // SAFETY: i is in bounds; slots live for the life of the server.
    unsafe { &*SHARED.slots.add(i) }
}

fn db_entries() -> &'static [DbWorker] {
    // SAFETY: ndbs entries were initialised at startup and live as long as the server.
    unsafe { std::slice::from_raw_parts(SHARED.dbs, header().ndbs as usize) }
}

/// An acquired LWLock, released on drop (and by PostgreSQL itself on ERROR).
pub struct Guard(*mut pg_sys::LWLock);

impl Drop for Guard {
    fn drop(&mut self) {
        // SAFETY: we acquired this lock in `lock()` and still hold it: nothing under a
        // guard raises an ERROR, and if a pg_sys call did, the unwind runs this Drop
        // before PostgreSQL's abort processing (LWLockReleaseAll) happens.
        unsafe { pg_sys::LWLockRelease(self.0) }
    }
}

fn lock(index: usize, exclusive: bool) -> Guard {
    let mode = if exclusive {
        pg_sys::LWLockMode::LW_EXCLUSIVE
    } else {
        pg_sys::LWLockMode::LW_SHARED
    };
    // SAFETY: the tranche has nslots+1 locks and index is in range.
    unsafe {
        let l = &raw mut (*SHARED.locks.add(index)).lock;
        pg_sys::LWLockAcquire(l, mode);
        Guard(l)
    }
}

/// The lock of the snowflake state in the header (O(1) work only).
pub fn snowflake_lock() -> Guard {
    lock(slot_count() + 1, true)
}

/// The header, for the snowflake state (its fields are guarded by `snowflake_lock`).
pub fn header_mut() -> *mut Header {
    // SAFETY: only the pointer is returned; callers hold the snowflake lock to touch it.
    unsafe { SHARED.header }
}

pub fn map_lock() -> Guard {
    lock(0, true)
}

pub fn slot_lock(i: usize) -> Guard {
    lock(i + 1, true)
}

pub fn slot_lock_shared(i: usize) -> Guard {
    lock(i + 1, false)
}

pub fn make_key(dboid: u32, group: u32, name: &id_gen_core::name::SeqName) -> SlotKey {
    SlotKey {
        dboid,
        group,
        name: name.to_key(),
    }
}

/// Outcome of [`attach`].
pub enum Attach {
    /// `(slot index, generation)`
    Attached(usize, u64),
    /// All slots are taken.
    Full,
}

/// The slot index of `key`, if cached. The caller holds the map lock.
fn map_find(key: &SlotKey) -> Option<usize> {
    let mut found = false;
    // SAFETY: the caller holds the map lock; HASH_FIND only reads, and a found entry
    // stays valid while the lock is held.
    unsafe {
        let entry = pg_sys::hash_search(
            SHARED.map,
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
            SHARED.map,
            key as *const SlotKey as *const _,
            pg_sys::HASHACTION::HASH_REMOVE,
            &mut found,
        );
    }
    free_slot_locked(i);
    Some(i)
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
    // SAFETY: map lock held; the free list is only touched under it.
    let hdr = unsafe { &mut *SHARED.header };
    if hdr.free_head == u32::MAX {
        return Attach::Full;
    }
    let idx = hdr.free_head as usize;
    let mut found = false;
    // SAFETY: map lock held exclusively; HASH_ENTER_NULL returns NULL instead of ERROR
    // when the table is full, so no error is raised under our lock.
    let entry = unsafe {
        pg_sys::hash_search(
            SHARED.map,
            key as *const SlotKey as *const _,
            pg_sys::HASHACTION::HASH_ENTER_NULL,
            &mut found,
        )
    } as *mut MapEntry;
    if entry.is_null() {
        return Attach::Full;
    }
    // SAFETY: fresh entry; we own it under the map lock. The slot is free, so only we
    // write its identity; its lock orders us against stale readers.
    unsafe {
        (*entry).slot = idx as u32;
        let s = &mut *SHARED.slots.add(idx);
        hdr.free_head = s.next_free;
        let _g = slot_lock(idx);
        s.key = *key;
        s.in_use.store(1, Ordering::Release);
        reset_slot(s, incarnation);
        s.refills.store(0, Ordering::Relaxed);
        s.waits.store(0, Ordering::Relaxed);
        s.last_step.store(0, Ordering::Relaxed);
        s.rate_bits.store(0, Ordering::Relaxed);
        s.last_refill_us.store(0, Ordering::Relaxed);
        s.last_refill_at.store(0, Ordering::Relaxed);
        s.calls.clear();
        Attach::Attached(idx, s.generation.load(Ordering::Acquire))
    }
}

/// New identity for a slot: forget segments, bump generation. Slot lock held.
fn reset_slot(s: &Slot, incarnation: i64) {
    let gen = header().next_generation.fetch_add(1, Ordering::AcqRel);
    s.generation.store(gen, Ordering::Release);
    s.chain.reset();
    s.incarnation.store(incarnation, Ordering::Relaxed);
    s.state.store(STATE_OK, Ordering::Release);
    s.refill_wanted.store(0, Ordering::Relaxed);
    s.demand.store(0, Ordering::Relaxed);
}

/// Returns slot `i` to the free list, marking it dropped for anyone still holding it.
/// The caller holds the map lock and has removed the slot's map entry.
fn free_slot_locked(i: usize) {
    let s = slot(i);
    let _g = slot_lock(i);
    reset_slot(s, 0);
    s.state.store(STATE_DROPPED, Ordering::Release);
    s.in_use.store(0, Ordering::Release);
    // SAFETY: map lock held (caller); the free list is only touched under it.
    unsafe {
        let hdr = &mut *SHARED.header;
        (*SHARED.slots.add(i)).next_free = hdr.free_head;
        hdr.free_head = i as u32;
    }
}

/// Most counter groups a sequence may have (catalog CHECK agrees).
pub const MAX_GROUPS: u32 = 64;

/// Slot indexes of every cached counter group of a sequence (O(MAX_GROUPS) hash
/// lookups under the map lock, held by the caller).
fn groups_of(dboid: u32, name: &id_gen_core::name::SeqName) -> Vec<(usize, SlotKey)> {
    (0..MAX_GROUPS)
        .map(|group| make_key(dboid, group, name))
        .filter_map(|key| map_find(&key).map(|i| (i, key)))
        .collect()
}

/// Forgets every cached counter group of a sequence (drop, or create over a stale
/// cache). Returns the number of slots freed; waiters are woken.
pub fn purge(dboid: u32, name: &id_gen_core::name::SeqName) -> usize {
    let freed: Vec<usize> = {
        let _map = map_lock();
        (0..MAX_GROUPS)
            .filter_map(|group| unmap_and_free_locked(&make_key(dboid, group, name)))
            .collect()
    };
    for &i in &freed {
        broadcast(i);
    }
    freed.len()
}

/// Frees the slot of one key, if cached (a serial period that is over).
pub fn purge_key(key: &SlotKey) {
    let freed = {
        let _map = map_lock();
        unmap_and_free_locked(key)
    };
    if let Some(i) = freed {
        broadcast(i);
    }
}

/// Slots of one database whose key name starts with `prefix` (a racy scan without
/// locks, for `drop_serial`; each hit is then purged by key under the map lock).
pub fn keys_with_prefix(dboid: u32, prefix: &[u8]) -> Vec<SlotKey> {
    (0..slot_count())
        .map(slot)
        .filter(|s| {
            s.in_use.load(Ordering::Acquire) != 0
                && s.key.dboid == dboid
                && s.key.name.starts_with(prefix)
        })
        .map(|s| s.key)
        .collect()
}

/// After `alter_sequence`: clear an "exhausted"/"failed" verdict so the next refill
/// uses the new settings.
pub fn clear_verdicts(dboid: u32, name: &id_gen_core::name::SeqName) {
    let slots: Vec<usize> = {
        let _map = map_lock();
        groups_of(dboid, name).into_iter().map(|(i, _)| i).collect()
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

/// Wakes backends sleeping on a slot's condition variable.
pub fn broadcast(i: usize) {
    // SAFETY: the CV lives in shared memory for the server's life.
    unsafe { pg_sys::ConditionVariableBroadcast(&raw const slot(i).cv as *mut _) }
}

/// Our backend's stripe number for counters.
pub fn my_stripe() -> usize {
    // SAFETY: MyProc is set for every backend and worker that has shared memory.
    unsafe {
        if pg_sys::MyProc.is_null() {
            0
        } else {
            (*pg_sys::MyProc).pgprocno as usize
        }
    }
}

// ---- per-database worker registry ------------------------------------------------

/// The registry entry of a database, if any.
pub fn db_entry(dboid: u32) -> Option<&'static DbWorker> {
    db_entries()
        .iter()
        .find(|d| d.dboid.load(Ordering::Acquire) == dboid)
}

/// Finds or claims an entry for `dboid` (map lock held by caller). When all entries are
/// taken, one whose worker is gone (exited, or its database was dropped) is reused.
fn db_entry_claim(dboid: u32) -> Option<&'static DbWorker> {
    if let Some(d) = db_entry(dboid) {
        return Some(d);
    }
    let now = crate::worker::now_ms();
    let free = db_entries()
        .iter()
        .find(|d| d.dboid.load(Ordering::Acquire) == 0)
        .or_else(|| {
            db_entries().iter().find(|d| {
                let pid = d.pid.load(Ordering::Acquire);
                let launched = d.launched_at_ms.load(Ordering::Acquire);
                !pid_alive(pid) && now - launched > 10_000
            })
        })?;
    free.pid.store(0, Ordering::Relaxed);
    free.latch.store(0, Ordering::Relaxed);
    free.launched_at_ms.store(0, Ordering::Relaxed);
    free.dboid.store(dboid, Ordering::Release);
    Some(free)
}

pub fn pid_alive(pid: i32) -> bool {
    // SAFETY: BackendPidGetProc takes ProcArrayLock itself and returns NULL if no
    // live process has that pid.
    pid != 0 && unsafe { !pg_sys::BackendPidGetProc(pid).is_null() }
}

/// Decides whether the caller should launch a worker for `dboid` now. Returns
/// `Err(())` when the registry is full.
pub fn should_launch(dboid: u32, now_ms: i64) -> Result<bool, ()> {
    let _map = map_lock();
    let d = db_entry_claim(dboid).ok_or(())?;
    let pid = d.pid.load(Ordering::Acquire);
    if pid != 0 {
        // Checking liveness takes ProcArrayLock briefly; still O(1) for us.
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
    let _map = map_lock();
    let Some(d) = db_entry_claim(dboid) else {
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
    let _map = map_lock();
    if let Some(d) = db_entry(dboid) {
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
    let Some(d) = db_entry(dboid) else {
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
    db_entry(dboid).map_or(0, |d| d.pid.load(Ordering::Acquire))
}
