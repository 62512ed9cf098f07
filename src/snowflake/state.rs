//! The snowflake generator's shared state, its lock, and its durable high-water file.
//!
//! ```text
//! region "id_gen snowflake": SnowflakeShared
//! LWLock tranche "id_gen snowflake": lock 0 guards `last_ms`, `seq` and `writer_pid`
//! ```
//!
//! The high-water mark: no id ever carries a timestamp above a mark that was first
//! written durably to `$PGDATA/id_gen_snowflake.state`, the PostgreSQL way: write a
//! temporary file, fsync it, `durable_rename` it over the old one (which fsyncs the
//! file, renames, and fsyncs the directory). The mark moves ahead in steps; at start
//! the state resumes above it, so a restart with the clock set back cannot reissue.
//!
//! Invariants:
//! * The lock is held for O(1) work only: the state step, or claiming/releasing the
//!   writer role. The file is written outside it.
//! * One backend writes the file at a time: the writer's PID is recorded under the lock
//!   (as autoprewarm.c records its worker), cleared when it is done, and cleared in
//!   `before_shmem_exit` if the writer exits mid-write (by ERROR or FATAL); a writer
//!   that died without that (SIGKILL — then the postmaster reinitialises shared memory
//!   anyway) is recognised as gone and replaced.

use crate::errors::{raise, Code};
use crate::shmem::{self, Guard, Region};
use id_gen_core::snowflake::SnowflakeState;
use pgrx::pg_sys;
use std::io::Write;
use std::sync::atomic::{AtomicI64, AtomicPtr, Ordering};

const STATE_FILE: &std::ffi::CStr = c"id_gen_snowflake.state";
const TEMP_FILE: &std::ffi::CStr = c"id_gen_snowflake.state.tmp";

#[repr(C)]
struct SnowflakeShared {
    last_ms: i64,
    seq: u64,
    /// PID of the backend writing the high-water file (0: nobody).
    writer_pid: i32,
    /// Durably persisted high-water mark (unix ms); only grows.
    persisted_ms: AtomicI64,
}

static SHARED: AtomicPtr<SnowflakeShared> = AtomicPtr::new(std::ptr::null_mut());
static LOCK: AtomicPtr<pg_sys::LWLockPadded> = AtomicPtr::new(std::ptr::null_mut());

pub const REGION: Region = Region {
    name: c"id_gen snowflake",
    size: || size_of::<SnowflakeShared>(),
    extra: shmem::no_extra,
    locks: || 1,
    attach: attach_region,
};

fn read_persisted() -> i64 {
    std::fs::read_to_string(STATE_FILE.to_str().unwrap_or_default())
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or(0)
}

/// # Safety
/// See [`Region::attach`]. Runs in the postmaster, whose working directory is $PGDATA.
unsafe fn attach_region(base: *mut u8, fresh: bool, locks: *mut pg_sys::LWLockPadded) {
    let shared = base as *mut SnowflakeShared;
    if fresh {
        // Resume above the persisted mark (after a restart or a crash).
        let persisted = read_persisted();
        let st = SnowflakeState::resume(persisted);
        // SAFETY: a fresh area of the right size, ours alone under AddinShmemInitLock.
        unsafe {
            shared.write(SnowflakeShared {
                last_ms: st.last_ms,
                seq: st.seq,
                writer_pid: 0,
                persisted_ms: AtomicI64::new(persisted),
            })
        };
    }
    SHARED.store(shared, Ordering::Release);
    LOCK.store(locks, Ordering::Release);
}

/// The generator state, borrowed under the snowflake lock.
pub struct Locked {
    _guard: Guard,
    shared: *mut SnowflakeShared,
}

impl Locked {
    pub fn state(&self) -> SnowflakeState {
        // SAFETY: the fields are only touched under the lock we hold.
        unsafe {
            SnowflakeState {
                last_ms: (*self.shared).last_ms,
                seq: (*self.shared).seq,
            }
        }
    }

    pub fn store(&mut self, st: &SnowflakeState) {
        // SAFETY: as above.
        unsafe {
            (*self.shared).last_ms = st.last_ms;
            (*self.shared).seq = st.seq;
        }
    }
}

/// Takes the snowflake lock (O(1) work only under it).
pub fn lock() -> Locked {
    // SAFETY: the tranche has one lock; callers checked shmem::available().
    let guard = unsafe { shmem::acquire(LOCK.load(Ordering::Acquire), 0, true) };
    Locked {
        _guard: guard,
        shared: SHARED.load(Ordering::Acquire),
    }
}

fn shared() -> &'static SnowflakeShared {
    // SAFETY: attached at startup; callers checked shmem::available().
    unsafe { &*SHARED.load(Ordering::Acquire) }
}

/// The durably persisted high-water mark (unix ms).
pub fn persisted_ms() -> i64 {
    shared().persisted_ms.load(Ordering::Acquire)
}

fn my_pid() -> i32 {
    // SAFETY: MyProcPid is set in every backend.
    unsafe { pg_sys::MyProcPid }
}

// Whether this backend registered its exit callback (once per backend).
thread_local! {
    static EXIT_CALLBACK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn release_writer_at_exit(_code: i32, _arg: pg_sys::Datum) {
    release_writer();
}

/// Gives up the writer role if this backend holds it.
fn release_writer() {
    let l = lock();
    // SAFETY: under the snowflake lock.
    unsafe {
        if (*l.shared).writer_pid == my_pid() {
            (*l.shared).writer_pid = 0;
        }
    }
}

/// Claims the writer role: true if we hold it now. A writer that is gone (its PID no
/// longer belongs to a live backend) is replaced.
fn claim_writer() -> bool {
    if !EXIT_CALLBACK.get() {
        // SAFETY: registers a callback run at backend exit, before shared memory is
        // detached; it only takes our own lock.
        unsafe { pg_sys::before_shmem_exit(Some(release_writer_at_exit), pg_sys::Datum::from(0)) };
        EXIT_CALLBACK.set(true);
    }
    let holder = {
        let l = lock();
        // SAFETY: under the snowflake lock.
        let holder = unsafe { (*l.shared).writer_pid };
        if holder == 0 || holder == my_pid() {
            // SAFETY: as above.
            unsafe { (*l.shared).writer_pid = my_pid() };
            return true;
        }
        holder
    };
    // Checking liveness takes ProcArrayLock: do it outside our lock, then re-check.
    if shmem::backend_alive(holder) {
        return false;
    }
    let l = lock();
    // SAFETY: under the snowflake lock.
    unsafe {
        if (*l.shared).writer_pid == holder {
            (*l.shared).writer_pid = my_pid();
            return true;
        }
    }
    false
}

/// Outcome of [`persist`].
pub enum Persist {
    /// The mark is at least what was asked for.
    Done,
    /// Another backend is writing the file: try again shortly.
    Busy,
}

/// Durably moves the high-water mark to at least `want` (unix ms).
pub fn persist(want: i64) -> Persist {
    if persisted_ms() >= want {
        return Persist::Done;
    }
    if !claim_writer() {
        return Persist::Busy;
    }
    let result = write_mark(want);
    release_writer();
    if let Err(e) = result {
        raise(
            Code::ERRCODE_IO_ERROR,
            format!(
                "id_gen: cannot persist the snowflake high-water mark to {}: {e}",
                STATE_FILE.to_string_lossy()
            ),
            Some("Check free space and permissions of the data directory."),
        );
    }
    Persist::Done
}

fn write_mark(want: i64) -> Result<(), String> {
    if persisted_ms() >= want {
        return Ok(());
    }
    let tmp = TEMP_FILE.to_str().unwrap_or_default();
    let mut f = std::fs::File::create(tmp).map_err(|e| e.to_string())?;
    writeln!(f, "{want}").map_err(|e| e.to_string())?;
    f.sync_all().map_err(|e| e.to_string())?;
    drop(f);
    // SAFETY: two NUL-terminated paths relative to $PGDATA (the backend's working
    // directory); with elevel LOG durable_rename reports problems and returns -1
    // instead of raising, so we can release the writer role before our ERROR.
    let rc = unsafe {
        pg_sys::durable_rename(TEMP_FILE.as_ptr(), STATE_FILE.as_ptr(), pg_sys::LOG as i32)
    };
    if rc != 0 {
        return Err("durable_rename failed (see the server log)".into());
    }
    shared().persisted_ms.fetch_max(want, Ordering::AcqRel);
    Ok(())
}
