//! The refill worker: one dynamic background worker per database, started on demand by
//! the first backend that needs a segment there (and again whenever it is found dead).
//!
//! Loop: sleep on the latch (woken by backends when a segment crosses its preload
//! threshold or a caller is waiting, and at least once a second); sample each slot's
//! call counter into a rate meter (time buckets); for every slot of this database that
//! wants a refill and has no standby, reserve `[max_id+1, max_id+step]` in its own
//! transaction with `synchronous_commit = on`, COMMIT, and only then publish the range
//! as the slot's standby segment and wake the waiters.
//!
//! Bulk requests: a caller that needs more values than a regular segment leaves them in
//! its slot's mailbox; the worker reserves exactly that many in one transaction and
//! hands the committed range back through the mailbox (see `bulk.rs`).
//!
//! Invariants:
//! * Publish strictly after COMMIT returns, and only when that COMMIT was durable
//!   (`synchronous_commit` at least `on`; otherwise the worker refuses to publish): a crash can lose reserved values (a gap) but
//!   never hand out a value whose reservation could roll back.
//! * With synchronous replication (`synchronous_standby_names` set), publish only when
//!   the synchronous standbys confirmed the reservation: a sync-rep wait that is
//!   cancelled or terminated still commits locally (with a WARNING only), so after COMMIT
//!   the worker publishes nothing while a termination is pending, and checks that enough
//!   `sync`/`quorum` standbys report `flush_lsn` >= the commit's LSN
//!   ([`unconfirmed`]). Unconfirmed values become a gap; callers keep waiting and the
//!   next attempt reserves anew. A promoted standby therefore holds every reservation
//!   whose values were ever handed out.
//! * SIGTERM is PostgreSQL's `die` (it must cut a sync-rep wait short, which pgrx's flag
//!   handler cannot); the main loop sees the pending termination and exits cleanly.
//! * After a promotion (this server started in recovery), the first worker of a database
//!   moves every local sequence up by `id_gen.promotion_skip_segments` × `max_step`
//!   before any reservation: the margin against an asynchronously replicated old primary.
//! * No shared-memory lock is held across SPI; slot locks are taken only to publish.
//! * An error in one refill aborts that transaction only; it is recorded in the slot
//!   (callers get a clear ERROR) and the worker keeps serving.
//! * A sequence with a central authority (`authority.rs`) reserves there. A failed
//!   authority reservation is no verdict: the slot keeps `refill_wanted`, its last error
//!   and time go into the slot, and the worker retries every 200 ms, so callers
//!   wait (up to `id_gen.refill_timeout`) and service resumes by itself when the
//!   authority answers again. Two nodes moving the central row at once make one of them
//!   fail to serialize; that attempt is repeated at once.

use super::authority;
use super::catalog::{self, BulkReservation, Reservation};
use super::key::{Counter, SlotKey};
use super::registry;
use super::slots::{self, *};
use crate::clock::wall_ms;
use id_gen_core::segment::{preload_offset, RateMeter, StepHistory};
use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, SignalWakeFlags};
use pgrx::prelude::*;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Asks the postmaster to start the worker for `dboid`. Returns false if no worker slot
/// (max_worker_processes) was free.
pub fn launch(dboid: u32) -> bool {
    BackgroundWorkerBuilder::new(&format!("id_gen refill worker for database {dboid}"))
        .set_type("id_gen refill worker")
        .set_library("id_gen")
        .set_function("id_gen_worker_main")
        .set_argument(Some(pg_sys::Datum::from(dboid)))
        .enable_spi_access()
        .set_start_time(pgrx::bgworkers::BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(Some(Duration::from_secs(1)))
        .load_dynamic()
        .is_ok()
}

/// Makes sure a worker serves `dboid` and wakes it. Never raises: the caller decides
/// what a missing worker means (a waiting caller reports it).
pub fn ensure_and_wake(dboid: u32) -> Result<(), &'static str> {
    if registry::wake_worker(dboid) {
        return Ok(());
    }
    match registry::should_launch(dboid, wall_ms()) {
        Err(()) => Err("too many databases use id_gen at once (id_gen.max_databases)"),
        Ok(false) => Ok(()),
        Ok(true) => {
            if launch(dboid) {
                Ok(())
            } else {
                Err("no background worker slot is free (max_worker_processes)")
            }
        }
    }
}

/// Checks that a registered worker is alive; relaunches it otherwise.
pub fn check_alive(dboid: u32) -> Result<(), &'static str> {
    let pid = registry::worker_pid(dboid);
    if pid != 0 && registry::pid_alive(pid) {
        return Ok(());
    }
    ensure_and_wake(dboid)
}

/// Why a refill transaction failed.
#[derive(Debug)]
pub(crate) struct TxnError {
    /// Message and detail.
    pub(crate) message: String,
    code: PgSqlErrorCode,
}

impl TxnError {
    /// The catalog row was locked longer than the worker's lock_timeout (55P03): try
    /// again on a later pass instead of failing callers.
    fn lock_busy(&self) -> bool {
        self.code == PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE
    }

    /// Another transaction moved the same (central) row first: try again at once.
    fn conflict(&self) -> bool {
        matches!(
            self.code,
            PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE
                | PgSqlErrorCode::ERRCODE_T_R_DEADLOCK_DETECTED
        )
    }
}

impl std::fmt::Display for TxnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Runs `body` in a transaction of its own; on ERROR, aborts it, clears the error state
/// and returns what went wrong.
pub(crate) fn in_transaction<R>(
    body: impl FnOnce() -> R + std::panic::UnwindSafe,
) -> Result<R, TxnError> {
    // SAFETY: the worker is connected to a database and is outside any transaction.
    unsafe {
        pg_sys::SetCurrentStatementStartTimestamp();
        pg_sys::StartTransactionCommand();
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
    }
    let result = PgTryBuilder::new(move || Ok(body()))
        .catch_others(|e| {
            let r = match e {
                pg_sys::panic::CaughtError::PostgresError(r)
                | pg_sys::panic::CaughtError::ErrorReport(r)
                | pg_sys::panic::CaughtError::RustPanic { ereport: r, .. } => r,
            };
            Err(TxnError {
                message: authority::with_detail(r.message(), r.detail()),
                code: r.sql_error_code(),
            })
        })
        .execute();
    match result {
        Ok(v) => {
            // SAFETY: the transaction started above is still open and healthy.
            unsafe {
                pg_sys::PopActiveSnapshot();
                pg_sys::CommitTransactionCommand();
            }
            Ok(v)
        }
        Err(msg) => {
            // SAFETY: after a caught ERROR the transaction is in an aborted state; abort
            // it and drop the error data so the next transaction starts clean.
            unsafe {
                pg_sys::AbortCurrentTransaction();
                pg_sys::FlushErrorState();
            }
            Err(msg)
        }
    }
}

/// The outcome of a reservation transaction and the authority it contacted, if any.
type Attempt<R> = (Result<pgrx::spi::SpiResult<R>, TxnError>, Option<String>);

/// Runs a reservation in a transaction of its own (see [`in_transaction`]), and again at
/// once (up to 5 tries, a few ms apart) while an authority reports a serialization
/// failure: the remote transaction is REPEATABLE READ, so two nodes moving the central
/// row at once make the later one fail.
/// Also returns the LSN of the last commit (`XactLastCommitEnd`, read right after it).
fn reserve_in_transaction<R>(
    body: impl Fn() -> pgrx::spi::SpiResult<R> + std::panic::RefUnwindSafe,
) -> (Attempt<R>, u64) {
    let mut tries = 0;
    loop {
        authority::start_attempt();
        let outcome = in_transaction(&body);
        // SAFETY: a plain read of our own process's global, set by the commit above.
        let commit_lsn = unsafe { pg_sys::XactLastCommitEnd };
        let contacted = authority::finish_attempt();
        tries += 1;
        match &outcome {
            Err(e) if contacted.is_some() && e.conflict() && tries < 5 => {
                // SAFETY: a short plain sleep of this process.
                unsafe { pg_sys::pg_usleep(2_000 * tries) };
            }
            _ => return ((outcome, contacted), commit_lsn),
        }
    }
}

/// How soon an authority that failed is tried again (while callers wait or a standby
/// segment is wanted): the period at which waiting callers wake (`wait.rs`).
const AUTHORITY_RETRY_MS: i64 = 200;

/// What a failed attempt means for the slot.
enum Failure {
    /// Try again later, leaving callers waiting: the catalog row was locked, or the
    /// authority did not answer. Retry after this many ms.
    RetryAfter(i64),
    /// A verdict: callers get an error ("refill failed").
    Failed,
}

/// Classifies a failed attempt; `None` if it succeeded.
fn failure<R>(attempt: &Attempt<R>) -> Option<(Failure, String)> {
    match attempt {
        (Ok(Ok(_)), _) => None,
        (Err(e), _) if e.lock_busy() => Some((Failure::RetryAfter(2_000), e.to_string())),
        // (As often as waiting callers wake, so that an authority back in the middle of
        // their wait serves them within 200 ms, not a second, of taking writes again.)
        (Err(e), Some(_)) => Some((Failure::RetryAfter(AUTHORITY_RETRY_MS), e.to_string())),
        (Err(e), None) => Some((Failure::Failed, e.to_string())),
        (Ok(Err(e)), _) => Some((Failure::Failed, e.to_string())),
    }
}

/// True when this process commits durably: `synchronous_commit` is `on` (remote_flush)
/// or `remote_apply`. Read before every publish.
fn commits_are_durable() -> bool {
    // SAFETY: reads a GUC variable of our own process.
    let level = unsafe { pg_sys::synchronous_commit };
    level >= pg_sys::SyncCommitLevel::SYNCHRONOUS_COMMIT_REMOTE_FLUSH as i32
}

unsafe extern "C-unwind" {
    /// PostgreSQL's SIGTERM handler (`tcop/postgres.c`), itself: pgrx's `pg_sys::die`
    /// is a guarded Rust wrapper, not fit for a signal handler.
    fn die(postgres_signal_arg: std::ffi::c_int);
}

/// Makes PostgreSQL's own SIGTERM handler (`die`) this worker's.
pub(crate) fn install_die_handler() {
    // SAFETY: installs PostgreSQL's handler for this process, as its own workers do.
    // PostgreSQL 18 renamed the backend's pqsignal to pqsignal_be (returning nothing).
    #[cfg(not(feature = "pg18"))]
    unsafe {
        pg_sys::pqsignal(pg_sys::SIGTERM as i32, Some(die));
    }
    // SAFETY: as above.
    #[cfg(feature = "pg18")]
    unsafe {
        pg_sys::pqsignal_be(pg_sys::SIGTERM as i32, Some(die));
    }
}

/// True once the worker was asked to terminate (SIGTERM: `die`). Nothing is published
/// then, and no new transaction is started.
fn terminating() -> bool {
    // SAFETY: reads a flag set by our own signal handler.
    unsafe { std::ptr::read_volatile(&raw const pg_sys::ProcDiePending) != 0 }
}

/// Logs without letting `errfinish` act on a pending termination (it runs
/// CHECK_FOR_INTERRUPTS): the worker exits through its main loop, cleanly.
fn log_held(text: &str) {
    // SAFETY: HOLD_INTERRUPTS / RESUME_INTERRUPTS around one LOG message.
    unsafe { pg_sys::InterruptHoldoffCount += 1 };
    log!("{text}");
    // SAFETY: see above.
    unsafe { pg_sys::InterruptHoldoffCount -= 1 };
}

/// How many synchronous standbys must confirm a commit: `None` when commits do not wait
/// for any (`synchronous_standby_names` empty, or no WAL senders). For `FIRST k` / `ANY
/// k` it is k: the number PostgreSQL itself waits for.
fn sync_standbys_required() -> Option<i64> {
    // SAFETY: reads GUC variables of our own process (SyncRepConfig is set by the GUC's
    // assign hook in every process; null while unset).
    unsafe {
        let names = pg_sys::SyncRepStandbyNames;
        let requested = pg_sys::max_wal_senders > 0
            && pg_sys::synchronous_commit
                > pg_sys::SyncCommitLevel::SYNCHRONOUS_COMMIT_LOCAL_FLUSH as i32;
        if !requested || names.is_null() || *names == 0 {
            return None;
        }
        let config = pg_sys::SyncRepConfig;
        Some(if config.is_null() {
            1
        } else {
            (*config).num_sync.max(1) as i64
        })
    }
}

fn lsn_text(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xffff_ffff)
}

/// Why the reservation committed at `commit_lsn` must not be published, or `None` if it
/// may be: a termination is pending (its sync-rep wait may have been cut short), a
/// cancel arrived, or fewer synchronous standbys than required report having flushed
/// the commit (a cancelled wait: syncrep.c clears the cancel flag itself, so the LSN is
/// the real test). Logged; the caller records it in the slot and retries later.
fn unconfirmed(commit_lsn: u64) -> Option<(Failure, String)> {
    let lsn = lsn_text(commit_lsn);
    // SAFETY: reads and clears a flag of our own process.
    let cancelled = unsafe {
        let c = std::ptr::read_volatile(&raw const pg_sys::QueryCancelPending) != 0;
        std::ptr::write_volatile(&raw mut pg_sys::QueryCancelPending, 0);
        c
    };
    let why = if terminating() {
        format!("the refill worker was terminated while committing reservation {lsn}; its values are skipped")
    } else if cancelled {
        format!("the refill worker was cancelled while committing reservation {lsn}; its values are skipped")
    } else {
        let required = sync_standbys_required()?;
        let count = in_transaction(|| {
            Spi::get_one::<i64>(&format!(
                "SELECT pg_catalog.count(*) FROM pg_catalog.pg_stat_replication \
                 WHERE sync_state IN ('sync', 'quorum') AND flush_lsn >= '{lsn}'::pg_catalog.pg_lsn"
            ))
        });
        match count {
            Ok(Ok(Some(n))) if n >= required => return None,
            Ok(Ok(n)) => format!(
                "reservation {lsn} committed locally but only {} of {required} synchronous standbys confirmed it; its values are skipped",
                n.unwrap_or(0)
            ),
            Ok(Err(e)) => format!("cannot check replication of reservation {lsn}: {e}"),
            Err(e) => format!("cannot check replication of reservation {lsn}: {e}"),
        }
    };
    log_held(&format!("id_gen: refused to publish: {why}"));
    Some((Failure::RetryAfter(1_000), why))
}

/// Per-slot memory of the worker: rate meter and what it knows about the last refill.
struct SlotMemory {
    generation: u64,
    meter: RateMeter,
    last_step: u64,
    /// The slot's wait counter at the last refill: if it moved, callers starved.
    waits_at_refill: u64,
    /// When the last segment was published (0: never).
    refilled_at_ms: i64,
    /// A slot whose catalog row was locked is retried only after this time.
    retry_after_ms: i64,
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn id_gen_worker_main(arg: pg_sys::Datum) {
    let dboid = arg.value() as u32;
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP);
    // It sets ProcDiePending and the latch, which also ends a synchronous-replication wait.
    install_die_handler();
    BackgroundWorker::connect_worker_to_spi_by_oid(Some(pg_sys::Oid::from(dboid)), None);
    if !crate::shmem::available() || !registry::register_worker(dboid) {
        return; // another worker serves this database
    }
    // Reservations must survive a crash: force durable commits whatever the config says.
    // A catalog row held locked by a long transaction (an open alter_sequence) must not
    // stall every sequence of the database: give up on it after a second, retry later.
    let setup = in_transaction(|| {
        Spi::run("SET synchronous_commit = on")?;
        // The worker runs as the bootstrap superuser: a search_path set for the database
        // or role must not put anyone's functions or operators into its SQL.
        Spi::run("SET search_path = pg_catalog, pg_temp")?;
        Spi::run("SET lock_timeout = '1s'")?;
        Spi::get_one::<bool>("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'id_gen')")
            .map(|v| v.unwrap_or(false))
    });
    match setup {
        Ok(Ok(true)) if commits_are_durable() => skip_after_promotion(dboid),
        Ok(Ok(false)) => {
            log!("id_gen: extension not installed in database {dboid}; refill worker exits");
            registry::unregister_worker(dboid);
            return;
        }
        other => {
            let why = match other {
                Err(e) => e.message,
                Ok(Err(e)) => e.to_string(),
                Ok(Ok(_)) => "synchronous_commit is not on".into(),
            };
            log!("id_gen: refill worker for database {dboid} cannot make durable commits ({why}); it publishes nothing and exits");
            registry::unregister_worker(dboid);
            // SAFETY: exit code 1 makes the postmaster restart us after the restart delay.
            unsafe { pg_sys::proc_exit(1) };
        }
    }
    log!("id_gen: refill worker started for database {dboid}");
    let mut memory: HashMap<usize, SlotMemory> = HashMap::new();
    while wait_latch(1000) {
        if BackgroundWorker::sighup_received() {
            // SAFETY: reloading the config file is what SIGHUP asks for, outside a transaction.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        serve_once(dboid, &mut memory);
    }
    registry::unregister_worker(dboid);
}

/// Sleeps on the latch up to `ms`; false when the worker should exit (terminated, or
/// the postmaster died). A cancel of the idle worker means nothing and is dropped; other
/// interrupts are processed.
pub(crate) fn wait_latch(ms: i64) -> bool {
    let flags = pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_POSTMASTER_DEATH;
    // SAFETY: the usual latch wait of a background worker, outside any transaction.
    let rc = unsafe {
        let rc = pg_sys::WaitLatch(
            pg_sys::MyLatch,
            flags as i32,
            ms as _,
            pg_sys::PG_WAIT_EXTENSION,
        );
        pg_sys::ResetLatch(pg_sys::MyLatch);
        rc
    };
    if terminating() || rc & pg_sys::WL_POSTMASTER_DEATH as i32 != 0 {
        return false;
    }
    // SAFETY: clears our own flag, then processes what is left (no transaction is open).
    unsafe {
        std::ptr::write_volatile(&raw mut pg_sys::QueryCancelPending, 0);
        pg_sys::check_for_interrupts!();
    }
    true
}

/// After a promotion, moves the local sequences of `dboid` up by
/// `id_gen.promotion_skip_segments` × `max_step`, once per database, before the first
/// reservation. A failure makes the worker exit (restarted a second later): serving
/// without the margin could repeat ids.
fn skip_after_promotion(dboid: u32) {
    let segments = crate::gucs::PROMOTION_SKIP_SEGMENTS.get();
    if segments <= 0 || !registry::promotion_skip_pending(dboid) {
        return;
    }
    match in_transaction(|| catalog::skip_after_promotion(segments)) {
        Ok(Ok(n)) => {
            registry::mark_promotion_skipped(dboid);
            log!("id_gen: promoted server: {n} sequences of database {dboid} skipped {segments} x max_step (id_gen.promotion_skip_segments)");
        }
        other => {
            let why = match other {
                Err(e) => e.message,
                Ok(Err(e)) => e.to_string(),
                Ok(Ok(_)) => unreachable!(),
            };
            log!("id_gen: promoted server: skipping id_gen.promotion_skip_segments failed in database {dboid} ({why}); the refill worker exits");
            registry::unregister_worker(dboid);
            // SAFETY: exit code 1 makes the postmaster restart us after the restart delay.
            unsafe { pg_sys::proc_exit(1) };
        }
    }
}

/// One pass over the slots of our database.
fn serve_once(dboid: u32, memory: &mut HashMap<usize, SlotMemory>) {
    let now = wall_ms();
    for i in 0..slots::slot_count() {
        if terminating() {
            return;
        }
        let s = slots::slot(i);
        if s.in_use.load(Ordering::Acquire) == 0 || s.dboid.load(Ordering::Acquire) != dboid {
            continue;
        }
        let gen = s.generation.load(Ordering::Acquire);
        let m = memory.entry(i).or_insert_with(|| SlotMemory {
            generation: gen,
            meter: RateMeter::new(1000, 10),
            last_step: 0,
            waits_at_refill: 0,
            refilled_at_ms: 0,
            retry_after_ms: 0,
        });
        if m.generation != gen {
            *m = SlotMemory {
                generation: gen,
                meter: RateMeter::new(1000, 10),
                last_step: 0,
                waits_at_refill: s.waits.load(Ordering::Relaxed),
                refilled_at_ms: 0,
                retry_after_ms: 0,
            };
        }
        m.meter.observe(now, s.calls.sum());
        let rate = m.meter.per_second(now);
        s.rate_bits
            .store(rate.unwrap_or(0.0).to_bits(), Ordering::Relaxed);

        if s.bulk_state.load(Ordering::Acquire) == BULK_REQUESTED && m.retry_after_ms <= now {
            if let Refilled::RetryAfter(ms) = serve_bulk(i, gen) {
                m.retry_after_ms = wall_ms() + ms;
            }
        }
        let wanted = s.refill_wanted.load(Ordering::Acquire) != 0;
        if !wanted || !s.chain.needs_standby() || s.state.load(Ordering::Acquire) != STATE_OK {
            continue;
        }
        // A slot whose catalog row was locked, or whose authority did not answer, waits
        // a little before the next try, so one held row costs the other sequences at
        // most one lock_timeout every 2 seconds (an authority: one try every 200 ms).
        if m.retry_after_ms > now {
            continue;
        }
        s.refill_wanted.store(0, Ordering::Release);
        let waits = s.waits.load(Ordering::Relaxed);
        let history = StepHistory {
            last_step: m.last_step,
            starved: waits != m.waits_at_refill,
            lasted_ms: (m.refilled_at_ms > 0).then(|| (now - m.refilled_at_ms).max(0) as u64),
        };
        match refill(i, gen, rate, history) {
            Refilled::Step(step) => {
                m.last_step = step;
                m.waits_at_refill = waits;
                m.refilled_at_ms = wall_ms();
                m.retry_after_ms = 0;
            }
            Refilled::RetryAfter(ms) => m.retry_after_ms = wall_ms() + ms,
            Refilled::Nothing => m.retry_after_ms = 0,
        }
    }
}

enum Refilled {
    /// A segment of this size was published.
    Step(u64),
    /// The catalog row was locked, or the authority did not answer: try again after
    /// this many ms (callers keep waiting).
    RetryAfter(i64),
    Nothing,
}

/// Reserves, commits, then publishes one standby segment for slot `i`.
fn refill(i: usize, gen: u64, rate: Option<f64>, history: StepHistory) -> Refilled {
    let s = slots::slot(i);
    let Some(key) = slots::key_of(i) else {
        return Refilled::Nothing;
    };
    let incarnation = s.incarnation.load(Ordering::Relaxed);
    let started = std::time::Instant::now();
    let (attempt, commit_lsn) = match key.counter() {
        // A serial period: the slot's "incarnation" is the period's local start.
        Counter::SerialPeriod { serial, period } => {
            reserve_in_transaction(|| catalog::reserve_serial(serial, period, incarnation))
        }
        Counter::Sequence { name, .. } => {
            reserve_in_transaction(|| catalog::reserve_segment(name, incarnation, rate, history))
        }
    };
    let durable = commits_are_durable();
    let elapsed_us = started.elapsed().as_micros() as u64;
    // (Before `failed` may become "not confirmed": a reservation the authority made counts
    // as its success whatever the local commit did.)
    let authority_failed = matches!(&attempt, (Err(e), Some(_)) if !e.lock_busy());
    let mut failed = failure(&attempt);
    if let (Ok(Ok((Reservation::Segment { .. }, _))), true) = (&attempt.0, durable) {
        failed = unconfirmed(commit_lsn);
    }
    let (outcome, authority) = &attempt;
    let mut dropped = false;
    let mut result = Refilled::Nothing;
    let mut previous = PreviousError::None;
    {
        let _g = slots::slot_lock(i);
        if s.generation.load(Ordering::Acquire) == gen {
            if authority_failed {
                s.authority_errors.fetch_add(1, Ordering::Relaxed);
            }
            if let Some(us) = authority::round_trip_us() {
                s.authority_round_trip_us.store(us, Ordering::Relaxed);
            }
            match (outcome, &failed) {
                (Ok(Ok(_)), _) if !durable => s.state.store(STATE_REFILL_FAILED, Ordering::Release),
                (_, Some((Failure::RetryAfter(ms), _))) => {
                    // Someone holds the catalog row, the authority is away, or the
                    // standbys did not confirm: callers keep waiting, we retry.
                    s.refill_wanted.store(1, Ordering::Release);
                    result = Refilled::RetryAfter(*ms);
                }
                (
                    Ok(Ok((
                        Reservation::Segment {
                            first,
                            last,
                            preload_threshold,
                        },
                        step,
                    ))),
                    _,
                ) => {
                    let len = (last - first + 1) as u64;
                    s.chain.publish_standby(
                        *first as u64,
                        len,
                        preload_offset(len, *preload_threshold),
                    );
                    s.refills.fetch_add(1, Ordering::Relaxed);
                    s.last_step.store(*step, Ordering::Relaxed);
                    s.last_refill_us.store(elapsed_us, Ordering::Relaxed);
                    s.last_refill_at.store(wall_ms(), Ordering::Relaxed);
                    result = Refilled::Step(*step);
                }
                (Ok(Ok((Reservation::Dropped, _))), _) => {
                    s.state.store(STATE_DROPPED, Ordering::Release);
                    dropped = true;
                }
                (Ok(Ok((Reservation::Exhausted, _))), _) => {
                    s.state.store(STATE_EXHAUSTED, Ordering::Release)
                }
                (Ok(Ok((Reservation::PeriodClosed, _))), _) => {
                    s.state.store(STATE_PERIOD_CLOSED, Ordering::Release)
                }
                _ => s.state.store(STATE_REFILL_FAILED, Ordering::Release),
            }
            previous = record(i, authority, &failed, durable);
        }
    }
    slots::broadcast(i);
    // The sequence is gone: free the slot (waiters see a new generation, look the name
    // up again and get 42704), so dropped sequences do not use up the cache.
    if dropped {
        slots::purge_key(&key);
    }
    if !terminating() {
        log_outcome(&key, &attempt, &failed, durable, previous);
    }
    result
}

/// Records an attempt's authority and error in slot `i` (slot lock held); says what
/// error the slot had before.
fn record(
    i: usize,
    authority: &Option<String>,
    failed: &Option<(Failure, String)>,
    durable: bool,
) -> PreviousError {
    let error = match failed {
        Some((_, text)) => Some(text.as_str()),
        None if !durable => {
            Some("refused to publish: synchronous_commit is not on in the refill worker")
        }
        None => None,
    };
    slots::set_diagnostics(i, authority.as_deref(), error)
}

/// Logs a failed attempt, once per distinct error for an authority that keeps failing
/// (it is retried every 200 ms), and an authority's recovery.
fn log_outcome<R>(
    key: &SlotKey,
    (_, authority): &Attempt<R>,
    failed: &Option<(Failure, String)>,
    durable: bool,
    previous: PreviousError,
) {
    let shown = key.display();
    match (failed, authority) {
        (None, _) if !durable => log!(
            "id_gen: refused to publish values of \"{shown}\": synchronous_commit is not on in the refill worker"
        ),
        (None, Some(server)) if previous != PreviousError::None => log!(
            "id_gen: authority \"{server}\" serves \"{shown}\" again"
        ),
        (Some((Failure::RetryAfter(_), text)), Some(server)) => {
            if previous != PreviousError::Same {
                log!("id_gen: reservation of \"{shown}\" from authority \"{server}\" failed (retrying every 200 ms): {text}");
            }
        }
        (Some((Failure::RetryAfter(_), _)), None) => {} // a locked row: retried quietly
        (Some((Failure::Failed, text)), _) => log!("id_gen: refill of \"{shown}\" failed: {text}"),
        (None, _) => {}
    }
}

/// Serves the bulk request in slot `i`'s mailbox: one exact reservation, committed
/// before the range is handed back. A request that was withdrawn or replaced meanwhile
/// (the ticket moved) leaves its range unused: a gap, never a repeat. A locked catalog
/// row or an authority that does not answer leaves the request pending (the caller
/// keeps waiting, we retry later); a dropped row frees the slot, so the caller looks the
/// sequence up again and gets 42704.
fn serve_bulk(i: usize, gen: u64) -> Refilled {
    let s = slots::slot(i);
    let Some(key) = slots::key_of(i) else {
        return Refilled::Nothing;
    };
    let Counter::Sequence { name, .. } = key.counter() else {
        return Refilled::Nothing;
    };
    let (ticket, want) = {
        let _g = slots::slot_lock(i);
        if s.bulk_state.load(Ordering::Acquire) != BULK_REQUESTED {
            return Refilled::Nothing;
        }
        (
            s.bulk_ticket.load(Ordering::Acquire),
            s.bulk_want.load(Ordering::Acquire),
        )
    };
    let incarnation = s.incarnation.load(Ordering::Relaxed);
    let (attempt, commit_lsn) =
        reserve_in_transaction(|| catalog::reserve_bulk(name, incarnation, want));
    let mut failed = failure(&attempt);
    let durable = commits_are_durable();
    if let (Ok(Ok(BulkReservation::Range { .. })), true) = (&attempt.0, durable) {
        failed = unconfirmed(commit_lsn);
    }
    let mut dropped = false;
    let mut result = Refilled::Nothing;
    let mut previous = PreviousError::None;
    {
        let _g = slots::slot_lock(i);
        let current = s.generation.load(Ordering::Acquire) == gen
            && s.bulk_ticket.load(Ordering::Acquire) == ticket
            && s.bulk_state.load(Ordering::Acquire) == BULK_REQUESTED;
        if current {
            let state = match (&attempt.0, &failed) {
                (_, Some((Failure::RetryAfter(ms), _))) => {
                    result = Refilled::RetryAfter(*ms);
                    BULK_REQUESTED // pending: the caller keeps waiting
                }
                (Ok(Ok(BulkReservation::Range { first })), _) if durable => {
                    s.bulk_first.store(*first, Ordering::Release);
                    BULK_DONE
                }
                (Ok(Ok(BulkReservation::NotEnough { left })), _) => {
                    s.bulk_left.store(*left, Ordering::Release);
                    BULK_NOT_ENOUGH
                }
                (Ok(Ok(BulkReservation::Dropped)), _) => {
                    // Freed below: the new generation sends the caller to the catalog.
                    dropped = true;
                    BULK_REQUESTED
                }
                _ => BULK_FAILED,
            };
            s.bulk_state.store(state, Ordering::Release);
            previous = record(i, &attempt.1, &failed, durable);
        } else if let Some((Failure::RetryAfter(ms), _)) = &failed {
            result = Refilled::RetryAfter(*ms);
        }
    }
    if dropped {
        slots::purge_key(&key); // wakes the waiters
    } else {
        slots::broadcast(i);
    }
    if !terminating() {
        log_outcome(&key, &attempt, &failed, durable, previous);
    }
    result
}
