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
//! Invariants:
//! * Publish strictly after COMMIT returns: a crash can lose reserved values (a gap) but
//!   never hand out a value whose reservation could roll back.
//! * No shared-memory lock is held across SPI; slot locks are taken only to publish.
//! * An error in one refill aborts that transaction only; it is recorded in the slot
//!   (callers get a clear ERROR) and the worker keeps serving.

use crate::catalog::{self, Reservation};
use crate::shmem::{self, STATE_DROPPED, STATE_EXHAUSTED, STATE_OK, STATE_REFILL_FAILED};
use id_gen_core::segment::{preload_offset, RateMeter};
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
    if shmem::wake_worker(dboid) {
        return Ok(());
    }
    match shmem::should_launch(dboid, now_ms()) {
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
    let pid = shmem::worker_pid(dboid);
    if pid != 0 && shmem::pid_alive(pid) {
        return Ok(());
    }
    ensure_and_wake(dboid)
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Why a refill transaction failed.
#[derive(Debug)]
struct TxnError {
    message: String,
    /// The catalog row was locked longer than the worker's lock_timeout (55P03): try
    /// again on a later pass instead of failing callers.
    lock_busy: bool,
}

impl std::fmt::Display for TxnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Runs `body` in a transaction of its own; on ERROR, aborts it, clears the error state
/// and returns what went wrong.
fn in_transaction<R>(body: impl FnOnce() -> R + std::panic::UnwindSafe) -> Result<R, TxnError> {
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
                message: r.message().to_string(),
                lock_busy: r.sql_error_code() == PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE,
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

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn id_gen_worker_main(arg: pg_sys::Datum) {
    let dboid = arg.value() as u32;
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    BackgroundWorker::connect_worker_to_spi_by_oid(Some(pg_sys::Oid::from(dboid)), None);
    if !shmem::available() || !shmem::register_worker(dboid) {
        return; // another worker serves this database
    }
    // Reservations must survive a crash: force durable commits whatever the config says.
    // A catalog row held locked by a long transaction (an open alter_sequence) must not
    // stall every sequence of the database: give up on it after a second, retry later.
    let setup = in_transaction(|| {
        Spi::run("SET synchronous_commit = on").ok();
        Spi::run("SET lock_timeout = '1s'").ok();
        Spi::get_one::<bool>("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'id_gen')")
            .ok()
            .flatten()
            .unwrap_or(false)
    });
    if !matches!(setup, Ok(true)) {
        log!("id_gen: extension not installed in database {dboid}; refill worker exits");
        shmem::unregister_worker(dboid);
        return;
    }
    log!("id_gen: refill worker started for database {dboid}");
    let mut meters: HashMap<usize, (u64, RateMeter)> = HashMap::new();
    let mut backoff: HashMap<usize, i64> = HashMap::new();
    while BackgroundWorker::wait_latch(Some(Duration::from_millis(1000))) {
        if BackgroundWorker::sighup_received() {
            // SAFETY: reloading the config file is what SIGHUP asks for, outside a transaction.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        serve_once(dboid, &mut meters, &mut backoff);
    }
    shmem::unregister_worker(dboid);
}

/// One pass over the slots of our database.
fn serve_once(
    dboid: u32,
    meters: &mut HashMap<usize, (u64, RateMeter)>,
    backoff: &mut HashMap<usize, i64>,
) {
    let now = now_ms();
    for i in 0..shmem::slot_count() {
        let s = shmem::slot(i);
        if s.in_use.load(Ordering::Acquire) == 0 || s.key.dboid != dboid {
            continue;
        }
        let gen = s.generation.load(Ordering::Acquire);
        let (g, meter) = meters
            .entry(i)
            .or_insert_with(|| (gen, RateMeter::new(1000, 10)));
        if *g != gen {
            *g = gen;
            *meter = RateMeter::new(1000, 10);
        }
        meter.observe(now, s.calls.sum());
        let rate = meter.per_second(now);
        s.rate_bits
            .store(rate.unwrap_or(0.0).to_bits(), Ordering::Relaxed);

        let wanted = s.refill_wanted.load(Ordering::Acquire) != 0;
        if !wanted || !s.chain.needs_standby() || s.state.load(Ordering::Acquire) != STATE_OK {
            continue;
        }
        // A slot whose catalog row was locked waits a little before the next try, so one
        // held row costs the other sequences at most one lock_timeout every 2 seconds.
        if backoff.get(&i).is_some_and(|&until| until > now) {
            continue;
        }
        s.refill_wanted.store(0, Ordering::Release);
        if refill(i, gen, rate) {
            backoff.insert(i, now_ms() + 2_000);
        } else {
            backoff.remove(&i);
        }
    }
}

/// Reserves, commits, then publishes one standby segment for slot `i`. Returns true when
/// the catalog row was locked by someone else (try again later).
fn refill(i: usize, gen: u64, rate: Option<f64>) -> bool {
    let s = shmem::slot(i);
    let (name, incarnation) = {
        let _g = shmem::slot_lock_shared(i);
        (
            id_gen_core::name::key_to_str(&s.key.name).to_owned(),
            s.incarnation.load(Ordering::Relaxed),
        )
    };
    let demand = s.demand.swap(0, Ordering::AcqRel);
    let started = std::time::Instant::now();
    let outcome = match name.split_once(crate::api_sequences::SERIAL_SEP) {
        // A serial period: the slot's "incarnation" is the period's start.
        Some((serial, period)) => {
            in_transaction(|| catalog::reserve_serial(serial, period, incarnation))
        }
        None => in_transaction(|| catalog::reserve_segment(&name, incarnation, rate, demand)),
    };
    let elapsed_us = started.elapsed().as_micros() as u64;
    let mut dropped = None;
    {
        let _g = shmem::slot_lock(i);
        if s.generation.load(Ordering::Acquire) == gen {
            match outcome {
                Ok(Ok((
                    Reservation::Segment {
                        first,
                        last,
                        preload_threshold,
                    },
                    step,
                ))) => {
                    let len = (last - first + 1) as u64;
                    s.chain.publish_standby(
                        first as u64,
                        len,
                        preload_offset(len, preload_threshold),
                    );
                    s.refills.fetch_add(1, Ordering::Relaxed);
                    s.last_step.store(step, Ordering::Relaxed);
                    s.last_refill_us.store(elapsed_us, Ordering::Relaxed);
                    s.last_refill_at.store(now_ms(), Ordering::Relaxed);
                }
                Ok(Ok((Reservation::Dropped, _))) => {
                    s.state.store(STATE_DROPPED, Ordering::Release);
                    dropped = Some(s.key);
                }
                Ok(Ok((Reservation::Exhausted, _))) => {
                    s.state.store(STATE_EXHAUSTED, Ordering::Release)
                }
                Ok(Ok((Reservation::PeriodClosed, _))) => {
                    s.state.store(shmem::STATE_PERIOD_CLOSED, Ordering::Release)
                }
                Err(TxnError {
                    lock_busy: true, ..
                }) => {
                    // Someone holds the catalog row; callers keep waiting, we retry.
                    s.refill_wanted.store(1, Ordering::Release);
                }
                Ok(Err(_)) | Err(_) => s.state.store(STATE_REFILL_FAILED, Ordering::Release),
            }
        }
    }
    shmem::broadcast(i);
    // The sequence is gone: free the slot (waiters see a new generation, look the name
    // up again and get 42704), so dropped sequences do not use up the cache.
    if let Some(key) = dropped {
        shmem::purge_key(&key);
    }
    let shown = name.replace(crate::api_sequences::SERIAL_SEP, "@");
    match &outcome {
        Err(TxnError {
            lock_busy: true, ..
        }) => true,
        Ok(Err(e)) => {
            log!("id_gen: refill of \"{shown}\" failed: {e}");
            false
        }
        Err(e) => {
            log!("id_gen: refill of \"{shown}\" failed: {e}");
            false
        }
        Ok(Ok(_)) => false,
    }
}
