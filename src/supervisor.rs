//! The move supervisor: a background worker, started with the server wherever id_gen is
//! preloaded, that finishes or rolls back moves of genes whose session is gone.
//!
//! It connects to `id_gen.move_supervisor_database` (empty: no supervisor) and, every few
//! seconds, runs the one recovery loop of long operations,
//! `id_gen.recover_operations(abandon_after)` (sql/cluster/operations.sql; `recover_moves`
//! before 0.7.3), in a transaction of its own. All decisions are made there, in SQL, under
//! the same per-operation session advisory lock that `move_genes`, `split_route` and the
//! aborts take, so the supervisor never races a running operation: a fence of a move that
//! has not cut over is lifted, a move that has cut over and a split that swapped are
//! finished, and an operation left alone for `id_gen.move_abandon_after` is rolled back.
//!
//! Its counters (passes, failed passes, operations acted on, when the last pass and the last
//! failure ended) live in a shared-memory region of their own, read by
//! `id_gen.supervisor_counters()` for `id_gen.metrics` (sql/cluster/metrics.sql).
//!
//! Invariants:
//! * It runs as the bootstrap superuser with `search_path = pg_catalog, pg_temp`, and only
//!   id_gen's own functions (which pin their search_path too).
//! * An error ends that pass only (logged as a WARNING); the next pass tries again. The
//!   wait between passes is a latch wait that SIGTERM and postmaster death end.

use crate::gucs;
use crate::segments::worker::{in_transaction, install_die_handler, wait_latch};
use crate::shmem::{self, Region};
use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags,
};
use pgrx::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The supervisor's counters in shared memory, in this order.
#[derive(Clone, Copy)]
enum Counter {
    /// Passes that ended (with or without an error).
    Passes = 0,
    /// Passes that ended with an error (logged as a WARNING).
    FailedPasses = 1,
    /// Operations a pass acted on (a fence lifted, a cut-over finished, a rollback).
    OperationsActed = 2,
    /// When the last pass ended (Unix time, ms; 0: none yet).
    LastPassAtMs = 3,
    /// When the last failed pass ended (Unix time, ms; 0: none yet).
    LastFailureAtMs = 4,
}

const COUNT: usize = 5;

static COUNTERS: shmem::CounterArray = shmem::CounterArray::new(std::ptr::null_mut());

pub const REGION: Region = Region {
    name: c"id_gen move supervisor counters",
    size: || COUNT * size_of::<AtomicU64>(),
    extra: shmem::no_extra,
    locks: shmem::no_locks,
    attach: attach_region,
};

/// # Safety
/// See [`Region::attach`].
unsafe fn attach_region(base: *mut u8, fresh: bool, _locks: *mut pg_sys::LWLockPadded) {
    // SAFETY: the area holds COUNT counters (Region::size); see Region::attach.
    unsafe { shmem::attach_counters(&COUNTERS, base, fresh, COUNT, 0) };
}

fn counter(which: Counter) -> Option<&'static AtomicU64> {
    shmem::counter_at(&COUNTERS, which as usize)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Counts one pass that ended: failed or not, and how many operations it acted on.
fn count_pass(failed: bool, acted: u64) {
    let at = now_ms();
    let add = |which, n| counter(which).map(|c| c.fetch_add(n, Ordering::Relaxed));
    let set = |which, v| counter(which).map(|c| c.store(v, Ordering::Relaxed));
    add(Counter::Passes, 1);
    add(Counter::OperationsActed, acted);
    set(Counter::LastPassAtMs, at);
    if failed {
        add(Counter::FailedPasses, 1);
        set(Counter::LastFailureAtMs, at);
    }
}

/// The move supervisor's counters since the server started, for `id_gen.metrics`
/// (sql/cluster/metrics.sql): passes, failed passes, operations acted on, and when the last
/// pass and the last failed pass ended (Unix time in seconds; NULL before the first). No row
/// without shared memory (id_gen not preloaded: no supervisor either).
#[pg_extern(volatile, parallel_safe)]
#[allow(clippy::type_complexity)]
fn supervisor_counters() -> TableIterator<
    'static,
    (
        name!(passes, i64),
        name!(failed_passes, i64),
        name!(operations_acted, i64),
        name!(last_pass_at, Option<f64>),
        name!(last_failure_at, Option<f64>),
    ),
> {
    let read = |c: Counter| counter(c).map(|a| a.load(Ordering::Relaxed));
    let (Some(passes), Some(failed), Some(acted), Some(last), Some(last_failure)) = (
        read(Counter::Passes),
        read(Counter::FailedPasses),
        read(Counter::OperationsActed),
        read(Counter::LastPassAtMs),
        read(Counter::LastFailureAtMs),
    ) else {
        return TableIterator::new(vec![]);
    };
    let seconds = |ms: u64| (ms > 0).then(|| ms as f64 / 1000.0);
    TableIterator::new(vec![(
        passes as i64,
        failed as i64,
        acted as i64,
        seconds(last),
        seconds(last_failure),
    )])
}

/// Registers the supervisor with the postmaster (from `_PG_init`, while preloading).
pub fn register() {
    BackgroundWorkerBuilder::new("id_gen move supervisor")
        .set_type("id_gen move supervisor")
        .set_library("id_gen")
        .set_function("id_gen_supervisor_main")
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(Some(Duration::from_secs(30)))
        .load();
}

/// One pass, by the installed version of id_gen's SQL: `recover_operations` from 0.7.3,
/// `recover_moves` from 0.4.0 (it recovers splits too from 0.5.0), nothing before.
const PASS_SQL: &str = "SELECT count(*) FROM id_gen.recover_operations(make_interval(secs => $1))";
const PASS_SQL_BEFORE_0_7_3: &str =
    "SELECT count(*) FROM id_gen.recover_moves(make_interval(secs => $1))";

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn id_gen_supervisor_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP);
    install_die_handler();
    let Some(db) = gucs::MOVE_SUPERVISOR_DATABASE.get() else {
        return;
    };
    let Ok(db) = db.into_string() else { return };
    if db.is_empty() {
        return;
    }
    BackgroundWorker::connect_worker_to_spi(Some(&db), None);
    let setup = in_transaction(|| Spi::run("SET search_path = pg_catalog, pg_temp"));
    if let Err(e) = setup {
        warning!("id_gen: move supervisor cannot start: {}", e.message);
        return;
    }
    log!("id_gen: move supervisor started in database \"{db}\"");
    while wait_latch(2000) {
        if BackgroundWorker::sighup_received() {
            // SAFETY: reloading the config file is what SIGHUP asks for, outside a transaction.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        let abandon = f64::from(gucs::MOVE_ABANDON_AFTER_S.get());
        let pass = in_transaction(|| -> Result<i64, pgrx::spi::SpiError> {
            let recovery = Spi::get_one::<i32>(
                "SELECT CASE WHEN to_regprocedure('id_gen.recover_operations(interval, interval)') IS NOT NULL THEN 2 \
                             WHEN to_regclass('id_gen.shard_moves') IS NOT NULL \
                              AND to_regprocedure('id_gen.recover_moves(interval, interval)') IS NOT NULL THEN 1 \
                             ELSE 0 END",
            )?
            .unwrap_or(0);
            let pass_sql = match recovery {
                2 => PASS_SQL,
                1 => PASS_SQL_BEFORE_0_7_3,
                _ => return Ok(0),
            };
            Ok(Spi::get_one_with_args::<i64>(pass_sql, &[abandon.into()])?.unwrap_or(0))
        });
        match pass {
            Ok(Ok(n)) => {
                count_pass(false, n.max(0) as u64);
                if n > 0 {
                    log!("id_gen: move supervisor acted on {n} operation(s); see id_gen.operations.recovered_by")
                }
            }
            Ok(Err(e)) => {
                count_pass(true, 0);
                warning!("id_gen: move supervisor: {e}")
            }
            Err(e) => {
                count_pass(true, 0);
                warning!("id_gen: move supervisor: {}", e.message)
            }
        }
    }
}
