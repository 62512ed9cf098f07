//! The segment engine shared by named sequences, gene-affine ids and dated serials:
//! values are taken wait-free from segments cached in shared memory ([`slots`]), which a
//! per-database background worker ([`worker`]) reserves in the catalog ([`catalog`]),
//! committing durably before it publishes them.
//!
//! This file is the engine's entry point for the SQL surfaces: [`take_one`],
//! [`take_runs`] and [`take_period`]. The fast path is a backend-local lookup of the
//! slot ([`local`]), one atomic take from its chain, a generation re-check and a batched
//! call count; attaching a slot (one SPI read) and waiting ([`wait`], [`bulk`]) happen
//! once per segment.
//!
//! Module graph (no circles): `mod` → {`local`, `wait`, `bulk`, `slots`, `catalog`,
//! `worker`, `key`}; `wait`/`bulk` → {`slots`, `registry`, `worker`}; `worker` →
//! {`slots`, `catalog`, `authority`, `registry`, `key`}; `catalog` → `authority`;
//! `slots` → `key`; `shmem.rs` knows none of them. `authority` (a central segment
//! authority over postgres_fdw) is also used by `sequences.rs` to check the argument.
//!
//! Invariants: input is validated before it gets here (names are `SeqName`s); errors
//! are raised only after every shared-memory lock has been released; a caller never
//! waits longer than `id_gen.refill_timeout`, and never consumes more values than it
//! returns beyond the rest of a segment.

pub mod authority;
pub mod bulk;
pub mod catalog;
pub mod key;
pub mod local;
pub mod registry;
pub mod slots;
pub mod wait;
pub mod worker;

use crate::access::{self, Kind, Stamp};
use crate::clock::Deadline;
use crate::errors::{checked_name, raise, spi_failed, Code};
use id_gen_core::segment::Take;
use key::SlotKey;
use local::PeriodKey;
use pgrx::pg_sys;
use slots::Attach;
use std::sync::atomic::Ordering;
use wait::Stop;

const PRELOAD_HINT: &str =
    "Add id_gen to shared_preload_libraries in postgresql.conf and restart the server.";

/// Raises 55000 unless shared memory is attached.
#[inline]
pub fn require_cache() {
    if !crate::shmem::available() {
        raise(
            Code::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "id_gen: the segment cache is not available because id_gen was not loaded at server start",
            Some(PRELOAD_HINT),
        );
    }
}

/// Raises 25006 on a standby. Checked when attaching a slot and before waiting, not on
/// the hot path: a server cannot turn from primary into standby without a restart.
fn require_primary() {
    // SAFETY: RecoveryInProgress only reads shared state.
    if unsafe { pg_sys::RecoveryInProgress() } {
        raise(
            Code::ERRCODE_READ_ONLY_SQL_TRANSACTION,
            "id_gen: cannot hand out sequence values during recovery (this server is a standby)",
            Some("Call id_gen functions on the primary."),
        );
    }
}

pub fn my_db() -> u32 {
    // SAFETY: MyDatabaseId is set once the backend is connected.
    unsafe { pg_sys::MyDatabaseId }.to_u32()
}

/// A serial's period ended while we were about to draw from it: re-read the clock.
pub struct PeriodClosed;

/// What a caller takes values of.
#[derive(Clone, Copy)]
enum Target<'a> {
    /// A named sequence; `gene` picks the counter group (gene_order_id).
    Sequence { name: &'a str, gene: Option<u16> },
    /// One period of a dated serial.
    Period(&'a PeriodKey),
}

impl Target<'_> {
    fn cached_slot(&self) -> Option<(usize, u64)> {
        match self {
            Target::Sequence { name, gene } => local::sequence_slot(name, *gene, access::stamp()),
            Target::Period(p) => local::period_slot(p),
        }
    }

    fn forget(&self) {
        match self {
            Target::Sequence { name, .. } => local::forget_sequence(name),
            Target::Period(p) => local::forget_period(p),
        }
    }

    fn describe(&self) -> String {
        match self {
            Target::Sequence { name, .. } => format!("sequence \"{name}\""),
            Target::Period(p) => format!("serial \"{}\"", p.serial),
        }
    }
}

/// Slot of the target, attaching it on first use.
#[inline]
fn slot_for(target: Target) -> (usize, u64) {
    match target.cached_slot() {
        Some(found) => found,
        None => attach_slow(target),
    }
}

/// Attaches the target's slot. For a sequence, checks first that the current user may
/// use it (42501 otherwise) and remembers the decision with its access stamp; the
/// serial surface checks serials itself.
#[cold]
fn attach_slow(target: Target) -> (usize, u64) {
    require_primary();
    access::prepare_cache();
    let stamp = access::stamp();
    let (key, incarnation, counters, max_bulk) = match target {
        Target::Sequence { name: raw, gene } => {
            let name = checked_name(raw);
            access::require_usage(Kind::Sequence, name.as_str());
            let info = match catalog::lookup(name.as_str()) {
                Ok(Some(info)) => info,
                Ok(None) => raise(
                    Code::ERRCODE_UNDEFINED_OBJECT,
                    format!("id_gen: sequence \"{name}\" does not exist"),
                    Some("Create it with SELECT id_gen.create_sequence('name'); existing ones are listed in id_gen.sequences."),
                ),
                Err(e) => spi_failed(e),
            };
            let counters = info.counters.clamp(1, slots::MAX_GROUPS as i32) as u32;
            let group = local::group_of(gene, counters);
            (
                SlotKey::sequence(my_db(), &name, group),
                info.incarnation,
                counters,
                info.max_bulk.max(1) as u64,
            )
        }
        // The serial surface checked that the serial exists; the worker reports a
        // serial dropped meanwhile. The slot's "incarnation" is the period's local start.
        Target::Period(p) => {
            let serial = checked_name(&p.serial);
            (
                SlotKey::serial_period(my_db(), &serial, &p.text),
                p.local_start,
                1,
                0,
            )
        }
    };
    let found = match slots::attach(&key, incarnation) {
        Attach::Attached(i, g) => (i, g),
        Attach::Full => raise(
            Code::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
            format!(
                "id_gen: no free slot in the segment cache for {}",
                key.describe()
            ),
            Some("Raise id_gen.max_sequences (takes effect at restart), or drop unused sequences."),
        ),
    };
    match target {
        Target::Sequence { name, .. } => local::remember_sequence(
            name,
            local::Attached {
                counters,
                group: key.group(),
                found,
                stamp,
                max_bulk,
            },
        ),
        Target::Period(p) => local::remember_period(p, found),
    }
    let _ = worker::ensure_and_wake(my_db());
    found
}

/// Adds `n` calls to the slot's rate counter, batched per backend.
#[inline]
fn count_calls(idx: usize, n: u64) {
    if let Some(batch) = local::count_calls(idx, n) {
        slots::slot(idx).calls.add(slots::my_stripe(), batch);
    }
}

/// A take crossed the preload threshold: ask the worker for the standby.
#[inline]
fn request_standby(idx: usize) {
    slots::slot(idx).refill_wanted.store(1, Ordering::Release);
    let _ = worker::ensure_and_wake(my_db());
}

/// Bounds how long a caller keeps starting over after its slot was reassigned under it
/// (a concurrent drop, a re-created sequence): `id_gen.refill_timeout` in all, then
/// 55000, so that no interleaving can keep a caller busy for longer.
struct RetryBudget(Option<Deadline>);

impl RetryBudget {
    fn new() -> RetryBudget {
        RetryBudget(None)
    }

    #[cold]
    fn spend(&mut self, target: Target, idx: usize) {
        let deadline = self
            .0
            .get_or_insert_with(|| Deadline::after_ms(crate::gucs::REFILL_TIMEOUT_MS.get() as u64));
        if deadline.passed() {
            wait::timed_out(my_db(), idx, &target.describe(), deadline);
        }
    }
}

/// Takes up to `want` values from the target's segments; `(first, count, slot, gen)`.
/// Waits for the worker only when both segments are empty.
#[inline]
fn take_from_chain(target: Target, want: u64) -> Result<(i64, u64, usize, u64), PeriodClosed> {
    require_cache();
    let mut budget = RetryBudget::new();
    loop {
        let (idx, gen) = slot_for(target);
        let s = slots::slot(idx);
        let t = if want == 1 {
            s.chain.take_one()
        } else {
            s.chain.take_many(want)
        };
        match t {
            Take::Got {
                first,
                count,
                preload,
            } => {
                if s.generation.load(Ordering::Acquire) != gen {
                    target.forget(); // slot reassigned under us: drop the value, retry
                    budget.spend(target, idx);
                    continue;
                }
                count_calls(idx, count);
                if preload {
                    request_standby(idx);
                }
                return Ok((first as i64, count, idx, gen));
            }
            Take::Empty { epoch } => {
                require_primary();
                if let Target::Sequence { name, .. } = target {
                    refuse_waiting_on_ourselves(name);
                }
                match wait::wait_for_segment(my_db(), idx, gen, epoch, &target.describe()) {
                    Ok(()) => {
                        if s.generation.load(Ordering::Acquire) != gen {
                            target.forget();
                            budget.spend(target, idx);
                        }
                    }
                    Err(stop) => {
                        stopped(target, stop)?;
                        budget.spend(target, idx);
                    }
                }
            }
        }
    }
}

/// Raises 55000 instead of waiting when our own transaction holds the sequence's
/// catalog row (created, altered or locked it): the worker's reservation would wait for
/// us, and we for it, until `id_gen.refill_timeout`.
#[cold]
fn refuse_waiting_on_ourselves(name: &str) {
    if catalog::row_held_by_this_transaction(name).unwrap_or_else(|e| spi_failed(e)) {
        raise(
            Code::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("id_gen: sequence \"{name}\" needs a new segment, but this transaction created, altered or locked its catalog row"),
            Some("Commit create_sequence/alter_sequence first: the refill worker reserves values in a transaction of its own, which would wait for this one."),
        );
    }
}

/// Turns a reason to stop waiting into the caller's error (or a retry).
fn stopped(target: Target, stop: Stop) -> Result<(), PeriodClosed> {
    match stop {
        Stop::Retry => {
            target.forget();
            Ok(())
        }
        Stop::PeriodClosed => Err(PeriodClosed),
        Stop::Dropped => {
            target.forget();
            match target {
                Target::Sequence { name, .. } => raise(
                    Code::ERRCODE_UNDEFINED_OBJECT,
                    format!("id_gen: sequence \"{name}\" does not exist (it was dropped)"),
                    Some("Create it again with id_gen.create_sequence."),
                ),
                Target::Period(p) => raise(
                    Code::ERRCODE_UNDEFINED_OBJECT,
                    format!("id_gen: serial \"{}\" does not exist (it was dropped)", p.serial),
                    Some("Create it again with id_gen.create_serial."),
                ),
            }
        }
        Stop::Exhausted => match target {
            Target::Sequence { name, .. } => raise(
                Code::ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED,
                format!("id_gen: sequence \"{name}\" reached its maximum value"),
                Some("Raise it with SELECT id_gen.alter_sequence('name', max_value => ...), if the ID layout allows."),
            ),
            Target::Period(p) => raise(
                Code::ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED,
                format!(
                    "id_gen: serial \"{}\" used up every serial number of period {}",
                    p.serial, p.text
                ),
                Some("Widen the serial part (a new serial with a larger width), or wait for the next period."),
            ),
        },
        Stop::RefillFailed => raise(
            Code::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "id_gen: the refill worker could not reserve a segment for {}",
                target.describe()
            ),
            Some("The server log has the worker's error; the next call retries."),
        ),
    }
}

/// Never happens for sequences: only serial periods close.
fn no_period(name: &str) -> ! {
    raise(
        Code::ERRCODE_INTERNAL_ERROR,
        format!("id_gen: unexpected period change for sequence \"{name}\""),
        None,
    )
}

/// The next value of sequence `name` (group chosen by `gene`), with the slot it came
/// from and the access stamp it was allowed under: `(value, slot, generation, stamp)`.
#[inline]
pub fn take_one(name: &str, gene: Option<u16>) -> (i64, usize, u64, Stamp) {
    // Read before the take: the access check inside ran under this stamp or a newer
    // one, so a grant or revoke committing meanwhile makes the caller's cache re-check.
    let stamp = access::stamp();
    match take_from_chain(Target::Sequence { name, gene }, 1) {
        Ok((v, _, idx, gen)) => (v, idx, gen, stamp),
        Err(PeriodClosed) => no_period(name),
    }
}

/// The hot path of a caller that remembers the slot it used last (a call site's
/// `fn_extra`): one value from slot `idx` if it still has generation `gen`, the access
/// stamp is still `stamp` (not compared when `None`: the superuser-only benchmark
/// baseline) and a value is at hand, counting calls in `pending`. `None`: use
/// [`take_one`].
#[inline]
pub fn take_one_cached(
    idx: usize,
    gen: u64,
    stamp: Option<Stamp>,
    pending: &mut u64,
) -> Option<i64> {
    if stamp.is_some_and(|s| s != access::stamp()) {
        return None;
    }
    let s = slots::slot(idx);
    match s.chain.take_one() {
        Take::Got { first, preload, .. } => {
            if s.generation.load(Ordering::Acquire) != gen {
                return None; // reassigned: the value is dropped (a gap), the caller re-attaches
            }
            *pending += 1;
            if *pending >= local::CALL_BATCH {
                s.calls.add(slots::my_stripe(), std::mem::take(pending));
            }
            if preload {
                request_standby(idx);
            }
            Some(first as i64)
        }
        Take::Empty { .. } => None,
    }
}

/// One value of a serial period, reporting a closed period instead of raising.
pub fn take_period(period: &PeriodKey) -> Result<i64, PeriodClosed> {
    take_from_chain(Target::Period(period), 1).map(|(v, ..)| v)
}

/// Forgets a serial period's slot here and in shared memory (its period is over).
pub fn release_period(period: &PeriodKey) {
    local::forget_period(period);
    if crate::shmem::available() {
        slots::purge_key(&SlotKey::serial_period(
            my_db(),
            &checked_name(&period.serial),
            &period.text,
        ));
    }
}

/// Takes `n` values of sequence `name` as runs of consecutive values `(first, count)`.
///
/// A request that a regular segment covers is served from the segments (at most a few
/// runs, taking only what it returns). A larger one is one exact reservation sized to
/// the request, made by the worker (one run, at once, whatever `n`); if fewer than `n`
/// values are left before `max_value`, it fails with 2200H and takes nothing.
pub fn take_runs(name: &str, n: u64) -> Vec<(i64, u64)> {
    require_cache();
    let target = Target::Sequence { name, gene: None };
    slot_for(target); // checks access and learns max_bulk
    let max_bulk = local::sequence_max_bulk(name).unwrap_or(0);
    if n > max_bulk {
        raise(
            Code::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
            format!("id_gen: {n} values were requested from sequence \"{name}\" in one call, its max_bulk is {max_bulk}"),
            Some("Nothing was taken. Ask in smaller batches, or have the owner raise the cap: SELECT id_gen.alter_sequence('name', max_bulk => ...);"),
        );
    }
    let mut runs = vec![];
    let mut left = n;
    let mut budget = RetryBudget::new();
    while left > 0 {
        let (idx, gen) = slot_for(target);
        let segment = slots::slot(idx).last_step.load(Ordering::Relaxed).max(1);
        if left > segment {
            require_primary();
            refuse_waiting_on_ourselves(name);
            match bulk::take_exact(my_db(), idx, gen, left, &target.describe()) {
                Ok(first) => {
                    // Not counted in the rate: one bulk load must not size the regular
                    // segments of the next 10 seconds.
                    runs.push((first, left));
                    return runs;
                }
                Err(bulk::BulkStop::Retry) => {
                    target.forget();
                    budget.spend(target, idx);
                    continue;
                }
                Err(bulk::BulkStop::NotEnough { left: room }) => raise(
                    Code::ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED,
                    format!(
                        "id_gen: sequence \"{name}\" has {room} values left before its maximum value, {left} were requested"
                    ),
                    Some("Nothing was taken. Ask for fewer values, or raise max_value with id_gen.alter_sequence if the ID layout allows."),
                ),
                Err(bulk::BulkStop::Failed) => raise(
                    Code::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                    format!("id_gen: the refill worker could not reserve {left} values for sequence \"{name}\""),
                    Some("The server log has the worker's error; the next call retries."),
                ),
            }
        }
        let (first, count, ..) = match take_from_chain(target, left) {
            Ok(t) => t,
            Err(PeriodClosed) => no_period(name),
        };
        runs.push((first, count));
        left -= count;
    }
    runs
}

/// Forgets a sequence everywhere: this backend's entry and the shared slots.
pub fn forget_sequence(name: &id_gen_core::name::SeqName) {
    local::forget_sequence(name.as_str());
    if crate::shmem::available() {
        slots::purge_sequence(my_db(), name);
    }
}

/// After `alter_sequence`: clear "exhausted"/"failed" verdicts.
pub fn sequence_altered(name: &id_gen_core::name::SeqName) {
    if crate::shmem::available() {
        slots::clear_verdicts(my_db(), name);
    }
}

/// Frees every cached period of serial `serial` in this database.
pub fn forget_serial(serial: &id_gen_core::name::SeqName) {
    if crate::shmem::available() {
        let db = my_db();
        slots::purge_matching(|k| k.is_period_of(db, serial));
    }
}
