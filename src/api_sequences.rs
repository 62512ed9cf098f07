//! SQL API of named sequences: create/alter/drop, `next_segment_id`, `next_segment_ids`
//! and the cache status rows behind the `id_gen.status` view.
//!
//! The hot path (`next_value`) is: a backend-local lookup of the sequence's slot, one
//! wait-free take from the shared [`SegmentChain`](id_gen_core::segment::SegmentChain),
//! a generation re-check and a striped counter add. Everything else — attaching a slot
//! (one SPI read of the catalog), waiting for the worker — happens once per segment.
//!
//! Invariants: input is validated here, once (names through `SeqName`, numbers against
//! their documented ranges); errors are raised only after every shared-memory lock has
//! been released; a caller never waits longer than `id_gen.refill_timeout`.

use crate::errors::{checked_name, raise, raise_detail, Code};
use crate::shmem::{self, Attach, STATE_DROPPED, STATE_EXHAUSTED, STATE_REFILL_FAILED};
use crate::{catalog, gucs, worker};
use id_gen_core::name::SeqName;
use id_gen_core::segment::{Take, MAX_SEGMENT_LEN};
use pgrx::prelude::*;
use std::collections::HashMap;
use std::sync::atomic::Ordering;

const PRELOAD_HINT: &str =
    "Add id_gen to shared_preload_libraries in postgresql.conf and restart the server.";

/// Raises 55000 unless shared memory is attached.
#[inline]
fn require_cache() {
    if !shmem::available() {
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

fn my_db() -> u32 {
    // SAFETY: MyDatabaseId is set once the backend is connected.
    unsafe { pg_sys::MyDatabaseId }.to_u32()
}

/// What a backend remembers about a sequence it used.
struct Local {
    name: String,
    /// A serial-period entry (only `next_serial` may use it).
    serial: bool,
    counters: u32,
    /// Per counter group: (slot index, generation) once attached.
    groups: Vec<Option<(usize, u64)>>,
}

/// Backend-local memory of sequences. `locals` never shrinks, so indexes stay valid;
/// `last` makes the common case (the same sequence again) one string comparison.
struct LocalCache {
    locals: Vec<Local>,
    index: HashMap<String, usize>,
    last: usize,
    /// Calls not yet added to the slots' shared striped counters, per slot.
    pending_calls: Vec<u64>,
}

/// Calls are added to the shared counters in batches of this size: the rate meter
/// needs about one sample a second, not one atomic add per call.
const CALL_BATCH: u64 = 64;

static mut LOCAL: Option<LocalCache> = None;

fn local() -> &'static mut LocalCache {
    // SAFETY: a backend runs one thread; this cache is only touched from SQL functions
    // of that thread, never re-entrantly, and no reference outlives a call below.
    unsafe {
        let l = &mut *(&raw mut LOCAL);
        l.get_or_insert_with(|| LocalCache {
            locals: Vec::new(),
            index: HashMap::new(),
            last: usize::MAX,
            pending_calls: vec![
                0;
                if shmem::available() {
                    shmem::slot_count()
                } else {
                    0
                }
            ],
        })
    }
}

fn forget_local(name: &str) {
    let l = local();
    if let Some(&i) = l.index.get(name) {
        l.locals[i].counters = 0;
        l.locals[i].groups.clear();
    }
}

/// The counter group that serves `gene` when a sequence has `counters` groups: groups
/// own contiguous ranges of the 65536 virtual nodes.
pub fn group_of(gene: Option<u16>, counters: u32) -> u32 {
    match gene {
        Some(g) if counters > 1 => (g as u32 * counters) >> 16,
        _ => 0,
    }
}

/// Slot of `(name, gene's group)`, attaching it on first use.
#[inline]
fn slot_for(raw_name: &str, gene: Option<u16>, serial: bool) -> (usize, u64) {
    let l = local();
    let i = if l.last < l.locals.len() && l.locals[l.last].name == raw_name {
        Some(l.last)
    } else {
        l.index.get(raw_name).copied()
    };
    if let Some(i) = i {
        let loc = &l.locals[i];
        if loc.serial == serial {
            l.last = i;
            if let Some(Some(found)) = loc.groups.get(group_of(gene, loc.counters) as usize) {
                return *found;
            }
        }
    }
    attach_slow(raw_name, gene, serial)
}

/// Separator of serial-period keys: `serial \x1f period_text \x1f period_start_ms`.
/// Sequence names can never contain it (`SeqName`), so the key spaces never meet.
pub const SERIAL_SEP: char = '\x1f';

#[cold]
fn attach_slow(raw_name: &str, gene: Option<u16>, serial: bool) -> (usize, u64) {
    require_primary();
    if serial {
        return attach_serial_period(raw_name);
    }
    // A user-supplied name can never reach the serial key space: SeqName rejects the
    // separator (and every other character outside [A-Za-z0-9_.:-]).
    let name = checked_name(raw_name);
    let info = match catalog::lookup(name.as_str()) {
        Ok(Some(info)) => info,
        Ok(None) => raise(
            Code::ERRCODE_UNDEFINED_OBJECT,
            format!("id_gen: sequence \"{name}\" does not exist"),
            Some("Create it with SELECT id_gen.create_sequence('name'); existing ones are listed in id_gen.sequences."),
        ),
        Err(e) => raise(Code::ERRCODE_INTERNAL_ERROR, format!("id_gen: reading id_gen.sequences failed: {e}"), None),
    };
    let counters = info.counters.clamp(1, shmem::MAX_GROUPS as i32) as u32;
    let group = group_of(gene, counters);
    let key = shmem::make_key(my_db(), group, &name);
    attach_and_remember(
        raw_name,
        false,
        &key,
        info.incarnation,
        counters,
        group,
        &format!("sequence \"{name}\""),
    )
}

/// Attaches `key` in shared memory and records it in this backend's cache under
/// `local_key` (group `group` of `counters`); wakes the database's worker.
fn attach_and_remember(
    local_key: &str,
    serial: bool,
    key: &shmem::SlotKey,
    incarnation: i64,
    counters: u32,
    group: u32,
    what: &str,
) -> (usize, u64) {
    let found = match shmem::attach(key, incarnation) {
        Attach::Attached(i, g) => (i, g),
        Attach::Full => raise(
            Code::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
            format!("id_gen: no free slot in the segment cache for {what}"),
            Some("Raise id_gen.max_sequences (takes effect at restart), or drop unused sequences."),
        ),
    };
    let l = local();
    let i = match l.index.get(local_key) {
        Some(&i) => i,
        None => {
            l.locals.push(Local {
                name: local_key.to_owned(),
                serial,
                counters: 0,
                groups: vec![],
            });
            l.index.insert(local_key.to_owned(), l.locals.len() - 1);
            l.locals.len() - 1
        }
    };
    let loc = &mut l.locals[i];
    if loc.counters != counters || loc.serial != serial {
        loc.counters = counters;
        loc.serial = serial;
        loc.groups = vec![None; counters as usize];
    }
    loc.groups[group as usize] = Some(found);
    l.pending_calls[found.0] = 0;
    l.last = i;
    let _ = worker::ensure_and_wake(my_db());
    found
}

/// Attaches the slot of one period of a serial (`api_serial.rs` builds the key after
/// checking the serial exists). The catalog row is `id_gen.serials`; the worker moves
/// its per-period counter. The slot's "incarnation" is the period's start (unix ms).
fn attach_serial_period(local_key: &str) -> (usize, u64) {
    let (key, start) = serial_slot_key(local_key);
    let serial = local_key.split(SERIAL_SEP).next().unwrap_or("");
    attach_and_remember(
        local_key,
        true,
        &key,
        start,
        1,
        0,
        &format!("serial \"{serial}\""),
    )
}

/// The shared key of a serial period (`serial \x1f period_text`, NUL-padded) and the
/// period's start, from the backend-local key `serial \x1f period_text \x1f start`.
fn serial_slot_key(local_key: &str) -> (shmem::SlotKey, i64) {
    let mut parts = local_key.split(SERIAL_SEP);
    let (serial, period) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let start = parts
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(i64::MIN);
    let key_text = format!("{serial}{SERIAL_SEP}{period}");
    let mut name = [0u8; 64];
    let n = key_text.len().min(64);
    name[..n].copy_from_slice(&key_text.as_bytes()[..n]);
    (
        shmem::SlotKey {
            dboid: my_db(),
            group: 0,
            name,
        },
        start,
    )
}

/// Forgets a serial period's slot everywhere (its period is over).
pub fn release_serial_period(local_key: &str) {
    forget_local(local_key);
    let l = local();
    if let Some(&i) = l.index.get(local_key) {
        l.index.remove(local_key);
        l.locals[i].name.clear();
    }
    shmem::purge_key(&serial_slot_key(local_key).0);
}

/// Adds `n` calls to the slot's rate counter, batched per backend.
#[inline]
fn count_calls(idx: usize, n: u64) {
    let pending = &mut local().pending_calls[idx];
    *pending += n;
    if *pending >= CALL_BATCH {
        shmem::slot(idx).calls.add(shmem::my_stripe(), *pending);
        *pending = 0;
    }
}

/// Takes up to `want` values of sequence `name` (group chosen by `gene`); returns
/// `(first, count)`. Waits for the worker only when both segments are empty.
#[inline]
pub fn take(name: &str, gene: Option<u16>, want: u64) -> (i64, u64) {
    match take_inner(name, gene, want, false) {
        Ok(v) => v,
        Err(PeriodClosed) => raise(
            Code::ERRCODE_INTERNAL_ERROR,
            format!("id_gen: unexpected period change for sequence \"{name}\""),
            None,
        ),
    }
}

/// A serial's period ended while we were about to draw from it: re-read the clock.
pub struct PeriodClosed;

/// One value of a serial period (`api_serial.rs` builds `local_key`), reporting a
/// closed period instead of raising.
pub fn take_serial(local_key: &str) -> Result<i64, PeriodClosed> {
    take_inner(local_key, None, 1, true).map(|(v, _)| v)
}

#[inline]
fn take_inner(
    name: &str,
    gene: Option<u16>,
    want: u64,
    serial: bool,
) -> Result<(i64, u64), PeriodClosed> {
    require_cache();
    loop {
        let (idx, gen) = slot_for(name, gene, serial);
        let s = shmem::slot(idx);
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
                    forget_local(name); // slot reassigned under us: drop the value, retry
                    continue;
                }
                count_calls(idx, count);
                if preload {
                    s.refill_wanted.store(1, Ordering::Release);
                    let _ = worker::ensure_and_wake(my_db());
                }
                return Ok((first as i64, count));
            }
            Take::Empty { epoch } => {
                if want > 1 {
                    s.demand.store(want.min(MAX_SEGMENT_LEN), Ordering::Release);
                }
                wait_for_segment(name, idx, gen, epoch)?;
            }
        }
    }
}

enum Verdict {
    Retry,
    Wait,
    Dropped,
    Closed,
    Exhausted,
    Failed,
}

/// Slow path: switch to the standby if it is there, else ask the worker and sleep on
/// the slot's condition variable. Returns when the caller should retry its take.
#[cold]
fn wait_for_segment(name: &str, idx: usize, gen: u64, epoch: u64) -> Result<(), PeriodClosed> {
    require_primary();
    let s = shmem::slot(idx);
    let dboid = my_db();
    let timeout_ms = gucs::REFILL_TIMEOUT_MS.get() as u64;
    let start = std::time::Instant::now();
    let mut counted_wait = false;
    let mut last_alive_check = start;
    let cv = &raw const s.cv as *mut pg_sys::ConditionVariable;
    // SAFETY: the CV is in shared memory; preparing before checking the condition is
    // the documented race-free protocol. Every exit below cancels the sleep.
    unsafe { pg_sys::ConditionVariablePrepareToSleep(cv) };
    let cancel = || {
        // SAFETY: cancels the sleep prepared above (a no-op if already cancelled).
        unsafe {
            #[allow(clippy::let_unit_value)]
            let _ = pg_sys::ConditionVariableCancelSleep();
        }
    };
    loop {
        let verdict = {
            let _g = shmem::slot_lock(idx);
            if s.generation.load(Ordering::Acquire) != gen {
                Verdict::Retry
            } else {
                match s.state.load(Ordering::Acquire) {
                    STATE_DROPPED => Verdict::Dropped,
                    shmem::STATE_PERIOD_CLOSED => Verdict::Closed,
                    STATE_EXHAUSTED if s.chain.needs_standby() => Verdict::Exhausted,
                    STATE_REFILL_FAILED => {
                        s.state.store(shmem::STATE_OK, Ordering::Release);
                        Verdict::Failed
                    }
                    _ => match s.chain.switch_to_standby(epoch) {
                        id_gen_core::segment::Switch::NoStandby => {
                            s.refill_wanted.store(1, Ordering::Release);
                            Verdict::Wait
                        }
                        _ => Verdict::Retry,
                    },
                }
            }
        };
        match verdict {
            Verdict::Retry => {
                cancel();
                if s.generation.load(Ordering::Acquire) != gen {
                    forget_local(name);
                }
                return Ok(());
            }
            Verdict::Closed => {
                cancel();
                return Err(PeriodClosed);
            }
            Verdict::Dropped => {
                cancel();
                forget_local(name);
                raise(
                    Code::ERRCODE_UNDEFINED_OBJECT,
                    format!("id_gen: sequence \"{name}\" does not exist (it was dropped)"),
                    Some("Create it again with id_gen.create_sequence."),
                );
            }
            Verdict::Exhausted if name.contains(SERIAL_SEP) => {
                cancel();
                let mut p = name.split(SERIAL_SEP);
                let (serial, period) = (p.next().unwrap_or(""), p.next().unwrap_or(""));
                raise(
                    Code::ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED,
                    format!("id_gen: serial \"{serial}\" used up every serial number of period {period}"),
                    Some("Widen the serial part (a new serial with a larger width), or wait for the next period."),
                );
            }
            Verdict::Exhausted => {
                cancel();
                raise(
                    Code::ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED,
                    format!("id_gen: sequence \"{name}\" reached its maximum value"),
                    Some("Raise it with SELECT id_gen.alter_sequence('name', max_value => ...), if the ID layout allows."),
                );
            }
            Verdict::Failed => {
                cancel();
                raise(
                    Code::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                    format!("id_gen: the refill worker could not reserve a segment for sequence \"{name}\""),
                    Some("The server log has the worker's error; the next call retries."),
                );
            }
            Verdict::Wait => {
                if !counted_wait {
                    s.waits.fetch_add(1, Ordering::Relaxed);
                    counted_wait = true;
                }
                let woke = if last_alive_check.elapsed().as_millis() >= 1000 {
                    last_alive_check = std::time::Instant::now();
                    worker::check_alive(dboid)
                } else {
                    worker::ensure_and_wake(dboid)
                };
                if let Err(why) = woke {
                    cancel();
                    raise(
                        Code::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
                        format!("id_gen: cannot start the refill worker for sequence \"{name}\": {why}"),
                        Some("Raise max_worker_processes or id_gen.max_databases (both take effect at restart)."),
                    );
                }
                let waited = start.elapsed().as_millis() as u64;
                if waited >= timeout_ms {
                    cancel();
                    raise_detail(
                        Code::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                        format!("id_gen: no segment for sequence \"{name}\" arrived within {timeout_ms} ms"),
                        format!("refill worker pid: {}", shmem::worker_pid(dboid)),
                        Some("Check the id_gen refill worker in pg_stat_activity and the server log; id_gen.refill_timeout sets how long callers wait."),
                    );
                }
                let nap = (timeout_ms - waited).min(200) as i64;
                // SAFETY: sleeping on a prepared CV; query cancel and statement_timeout
                // interrupt it through CHECK_FOR_INTERRUPTS as usual.
                unsafe {
                    pg_sys::ConditionVariableTimedSleep(cv, nap as _, pg_sys::PG_WAIT_EXTENSION)
                };
            }
        }
    }
}

// `id_gen.next_segment_id(text)` is the hot path of every INSERT that uses it as a
// DEFAULT, so it is a hand-written V1 function (declared in sql/hot_path.sql) rather
// than a #[pg_extern]: it reads the name straight from the argument's varlena bytes
// (no detoast call, no copy) when the text is stored inline, which is always the case
// for a constant name. Measured in bench/: this halves the per-call overhead.

/// fmgr's "V1 calling convention" marker for [`id_gen_next_segment_id`].
#[unsafe(no_mangle)]
pub extern "C" fn pg_finfo_id_gen_next_segment_id() -> &'static pg_sys::Pg_finfo_record {
    static V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

/// Next value of a named sequence, from the shared segment cache.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn id_gen_next_segment_id(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: fmgr calls us with a valid fcinfo holding one non-NULL text argument
    // (the function is STRICT); the bytes live for the duration of the call.
    let name = unsafe { text_arg(fcinfo, 0) };
    pg_sys::Datum::from(take(name, None, 1).0)
}

/// Borrows a text argument as `&str`: inline varlenas are read in place, anything
/// else (compressed, toasted) goes through `pg_detoast_datum_packed`.
///
/// # Safety
/// `fcinfo` must be a valid call frame whose argument `n` is a non-NULL text datum.
unsafe fn text_arg<'a>(fcinfo: pg_sys::FunctionCallInfo, n: usize) -> &'a str {
    // SAFETY: per the contract above.
    let bytes: &[u8] = unsafe {
        let datum = (*(*fcinfo).args.as_ptr().add(n)).value;
        let mut p = datum.cast_mut_ptr::<u8>();
        let b0 = *p;
        if b0 & 0x03 == 0x02 || b0 == 0x01 {
            // compressed (4-byte header) or external (1-byte 0x01): detoast first
            p = pg_sys::pg_detoast_datum_packed(p.cast()).cast();
        }
        let b0 = *p;
        if b0 & 0x01 == 0x01 {
            // short inline varlena: 1-byte header, length includes it
            std::slice::from_raw_parts(p.add(1), ((b0 >> 1) & 0x7F) as usize - 1)
        } else {
            let total = (std::ptr::read_unaligned(p as *const u32) >> 2) as usize;
            std::slice::from_raw_parts(p.add(4), total - 4)
        }
    };
    match std::str::from_utf8(bytes) {
        Ok(s) => s,
        Err(_) => raise(
            Code::ERRCODE_INVALID_PARAMETER_VALUE,
            "id_gen: sequence name is not valid UTF-8",
            Some(
                "Sequence names are 1 to 63 characters of letters, digits, '_', '.', ':' and '-'.",
            ),
        ),
    }
}

/// Most values one `next_segment_ids`/`next_segment_ids_array` call returns: the array
/// must fit PostgreSQL's 1 GB allocation limit, and a runaway n must not burn values.
const MAX_BATCH_ROWS: i64 = 100_000_000;

/// Takes `n` values as runs of consecutive values `(first, count)`: one atomic step per
/// run; a pending batch also sizes the next reservation (up to `max_step`), so a large
/// batch is usually one or two runs.
fn take_runs(seq: &str, n: i64) -> Vec<(i64, u64)> {
    if n < 0 {
        raise(
            Code::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("id_gen: n must not be negative, got {n}"),
            None,
        );
    }
    let mut runs = vec![];
    let mut left = n as u64;
    while left > 0 {
        let (first, count) = take(seq, None, left);
        runs.push((first, count));
        left -= count;
    }
    runs
}

fn check_batch(n: i32) {
    if n as i64 > MAX_BATCH_ROWS {
        raise(
            Code::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("id_gen: n must be at most {MAX_BATCH_ROWS}, got {n}"),
            Some("Use id_gen.next_segment_ranges(name, n), which returns runs of consecutive values, for larger batches."),
        );
    }
}

/// `n` values of a named sequence for bulk loads, one row each.
#[pg_extern(volatile, strict, parallel_unsafe)]
fn next_segment_ids(seq: &str, n: i32) -> SetOfIterator<'static, i64> {
    check_batch(n);
    let runs = take_runs(seq, n as i64);
    SetOfIterator::new(
        runs.into_iter()
            .flat_map(|(first, count)| first..=first + (count as i64 - 1)),
    )
}

/// `n` values of a named sequence as one bigint[] (cheaper than n rows for big batches).
#[pg_extern(volatile, strict, parallel_unsafe)]
fn next_segment_ids_array(seq: &str, n: i32) -> Vec<i64> {
    check_batch(n);
    let runs = take_runs(seq, n as i64);
    let mut out = Vec::with_capacity(n.max(0) as usize);
    for (first, count) in runs {
        out.extend(first..=first + (count as i64 - 1));
    }
    out
}

/// `n` values of a named sequence as runs `[first_id, last_id]` of consecutive values:
/// the cheapest form for loaders that number rows themselves.
#[pg_extern(volatile, strict, parallel_unsafe)]
fn next_segment_ranges(
    seq: &str,
    n: i64,
) -> TableIterator<'static, (name!(first_id, i64), name!(last_id, i64))> {
    let runs = take_runs(seq, n);
    TableIterator::new(
        runs.into_iter()
            .map(|(first, count)| (first, first + (count as i64 - 1))),
    )
}

/// Validated tuning of a sequence.
struct Tuning {
    step: i64,
    min_step: i64,
    max_step: i64,
    buffer_seconds: i32,
    preload_threshold: f32,
    max_value: i64,
}

fn check_tuning(t: &Tuning) {
    let bad = |msg: String| -> ! {
        raise(
            Code::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("id_gen: {msg}"),
            None,
        )
    };
    let cap = MAX_SEGMENT_LEN as i64;
    if !(1..=cap).contains(&t.step) {
        bad(format!("step must be between 1 and {cap}, got {}", t.step));
    }
    if !(1..=t.step).contains(&t.min_step) {
        bad(format!(
            "min_step must be between 1 and step ({}), got {}",
            t.step, t.min_step
        ));
    }
    if !(t.step..=cap).contains(&t.max_step) {
        bad(format!(
            "max_step must be between step ({}) and {cap}, got {}",
            t.step, t.max_step
        ));
    }
    if !(1..=86_400).contains(&t.buffer_seconds) {
        bad(format!(
            "buffer_seconds must be between 1 and 86400, got {}",
            t.buffer_seconds
        ));
    }
    if !(0.0..1.0).contains(&t.preload_threshold) {
        bad(format!(
            "preload_threshold must be in [0, 1), got {}",
            t.preload_threshold
        ));
    }
    if t.max_value < 1 {
        bad(format!("max_value must be positive, got {}", t.max_value));
    }
}

/// Creates a named sequence. Values start at `start`; the cache reserves `step` values
/// at a time at first, then adapts between `min_step` and `max_step` so that one segment
/// covers about `buffer_seconds` of traffic.
#[pg_extern(volatile, parallel_unsafe)]
#[allow(clippy::too_many_arguments)]
fn create_sequence(
    name: &str,
    start: default!(i64, 1),
    step: default!(i64, 1000),
    min_step: default!(Option<i64>, "NULL"),
    max_step: default!(Option<i64>, "NULL"),
    buffer_seconds: default!(Option<i32>, "NULL"),
    preload_threshold: default!(f32, 0.1),
    max_value: default!(i64, 9223372036854775807),
    counters: default!(i32, 1),
    comment: default!(Option<&str>, "NULL"),
) -> String {
    let name = checked_name(name);
    let t = Tuning {
        step,
        min_step: min_step.unwrap_or(step),
        max_step: max_step.unwrap_or(step.max(1_000_000)),
        buffer_seconds: buffer_seconds.unwrap_or(gucs::DEFAULT_BUFFER_SECONDS.get()),
        preload_threshold,
        max_value,
    };
    check_tuning(&t);
    if !(0..t.max_value).contains(&start) {
        raise(
            Code::ERRCODE_INVALID_PARAMETER_VALUE,
            format!(
                "id_gen: start must be between 0 and max_value - 1 ({}), got {start}",
                t.max_value - 1
            ),
            None,
        );
    }
    if !(1..=shmem::MAX_GROUPS as i32).contains(&counters) {
        raise(
            Code::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("id_gen: counters must be between 1 and {}, got {counters}", shmem::MAX_GROUPS),
            Some("counters > 1 splits gene_order_id traffic over independent cursors by virtual-node range."),
        );
    }
    let inserted = Spi::connect_mut(|client| {
        client
            .update(
                "INSERT INTO id_gen.sequences AS s (name, max_id, step, min_step, max_step, buffer_seconds, \
                 preload_threshold, max_value, counters, comment) \
                 VALUES ($1, $2 - 1, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT (name) DO NOTHING RETURNING s.name",
                None,
                &[
                    name.as_str().into(),
                    start.into(),
                    t.step.into(),
                    t.min_step.into(),
                    t.max_step.into(),
                    t.buffer_seconds.into(),
                    t.preload_threshold.into(),
                    t.max_value.into(),
                    counters.into(),
                    comment.into(),
                ],
            )
            .map(|t| (!t.is_empty()).then_some(()))
    })
    .unwrap_or_else(|e| raise(Code::ERRCODE_INTERNAL_ERROR, format!("id_gen: {e}"), None));
    if inserted.is_none() {
        raise(
            Code::ERRCODE_DUPLICATE_OBJECT,
            format!("id_gen: sequence \"{name}\" already exists"),
            Some("Use id_gen.alter_sequence to change it, or pick another name."),
        );
    }
    if shmem::available() {
        shmem::purge(my_db(), &name); // a stale cache of an older sequence of that name
    }
    forget_local(name.as_str());
    name.to_string()
}

/// Changes a sequence's tuning; NULL keeps a setting. Takes effect with the next segment.
#[pg_extern(volatile, parallel_unsafe)]
#[allow(clippy::too_many_arguments)]
fn alter_sequence(
    name: &str,
    step: default!(Option<i64>, "NULL"),
    min_step: default!(Option<i64>, "NULL"),
    max_step: default!(Option<i64>, "NULL"),
    buffer_seconds: default!(Option<i32>, "NULL"),
    preload_threshold: default!(Option<f32>, "NULL"),
    max_value: default!(Option<i64>, "NULL"),
    comment: default!(Option<&str>, "NULL"),
) -> String {
    let name = checked_name(name);
    // One read of the current row (locked, so concurrent alters serialise).
    let current = Spi::connect_mut(|client| {
        let t = client.update(
            "SELECT step, min_step, max_step, buffer_seconds, preload_threshold, max_value, max_id \
             FROM id_gen.sequences WHERE name = $1 FOR UPDATE",
            Some(1),
            &[name.as_str().into()],
        )?;
        if t.is_empty() {
            return Ok(None);
        }
        let r = t.first();
        Ok::<_, pgrx::spi::Error>(Some((
            Tuning {
                step: r.get::<i64>(1)?.unwrap_or(1000),
                min_step: r.get::<i64>(2)?.unwrap_or(1),
                max_step: r.get::<i64>(3)?.unwrap_or(1000),
                buffer_seconds: r.get::<i32>(4)?.unwrap_or(30),
                preload_threshold: r.get::<f32>(5)?.unwrap_or(0.1),
                max_value: r.get::<i64>(6)?.unwrap_or(i64::MAX),
            },
            r.get::<i64>(7)?.unwrap_or(0),
        )))
    })
    .unwrap_or_else(|e| raise(Code::ERRCODE_INTERNAL_ERROR, format!("id_gen: {e}"), None));
    let Some((cur, max_id)) = current else {
        raise(
            Code::ERRCODE_UNDEFINED_OBJECT,
            format!("id_gen: sequence \"{name}\" does not exist"),
            Some("Existing sequences are listed in id_gen.sequences."),
        )
    };
    let t = Tuning {
        step: step.unwrap_or(cur.step),
        min_step: min_step.unwrap_or(cur.min_step),
        max_step: max_step.unwrap_or(cur.max_step),
        buffer_seconds: buffer_seconds.unwrap_or(cur.buffer_seconds),
        preload_threshold: preload_threshold.unwrap_or(cur.preload_threshold),
        max_value: max_value.unwrap_or(cur.max_value),
    };
    check_tuning(&t);
    if t.max_value < max_id {
        raise_detail(
            Code::ERRCODE_INVALID_PARAMETER_VALUE,
            format!(
                "id_gen: max_value {} is below values already handed out",
                t.max_value
            ),
            format!("The high-water mark of \"{name}\" is {max_id}."),
            None,
        );
    }
    Spi::run_with_args(
        "UPDATE id_gen.sequences SET step = $2, min_step = $3, max_step = $4, buffer_seconds = $5, \
         preload_threshold = $6, max_value = $7, comment = COALESCE($8, comment), updated_at = now() \
         WHERE name = $1",
        &[
            name.as_str().into(),
            t.step.into(),
            t.min_step.into(),
            t.max_step.into(),
            t.buffer_seconds.into(),
            t.preload_threshold.into(),
            t.max_value.into(),
            comment.into(),
        ],
    )
    .unwrap_or_else(|e| raise(Code::ERRCODE_INTERNAL_ERROR, format!("id_gen: {e}"), None));
    if shmem::available() {
        shmem::clear_verdicts(my_db(), &name);
    }
    name.to_string()
}

/// Drops a sequence and forgets its cached segments.
#[pg_extern(volatile, parallel_unsafe)]
fn drop_sequence(name: &str, if_exists: default!(bool, false)) -> bool {
    let name: SeqName = checked_name(name);
    let deleted = Spi::connect_mut(|client| {
        client
            .update(
                "DELETE FROM id_gen.sequences WHERE name = $1 RETURNING name",
                None,
                &[name.as_str().into()],
            )
            .map(|t| (!t.is_empty()).then_some(()))
    })
    .unwrap_or_else(|e| raise(Code::ERRCODE_INTERNAL_ERROR, format!("id_gen: {e}"), None));
    if shmem::available() {
        shmem::purge(my_db(), &name);
    }
    forget_local(name.as_str());
    if deleted.is_none() && !if_exists {
        raise(
            Code::ERRCODE_UNDEFINED_OBJECT,
            format!("id_gen: sequence \"{name}\" does not exist"),
            Some("Pass if_exists => true to ignore a missing sequence."),
        );
    }
    deleted.is_some()
}

/// Rows of the `id_gen.status` view: one per cached (database, sequence, group).
#[pg_extern(volatile, parallel_safe)]
#[allow(clippy::type_complexity)]
fn cache_status() -> TableIterator<
    'static,
    (
        name!(dboid, pg_sys::Oid),
        name!(sequence, String),
        name!(counter_group, i32),
        name!(state, String),
        name!(current_first, Option<i64>),
        name!(current_last, Option<i64>),
        name!(current_used, i64),
        name!(standby_first, Option<i64>),
        name!(standby_last, Option<i64>),
        name!(step, i64),
        name!(rate_per_s, f64),
        name!(calls, i64),
        name!(refills, i64),
        name!(waits, i64),
        name!(last_refill_ms, f64),
        name!(last_refill_at_ms, i64),
        name!(worker_pid, i32),
    ),
> {
    if !shmem::available() {
        raise(
            Code::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "id_gen: the segment cache is not available because id_gen was not loaded at server start",
            Some(PRELOAD_HINT),
        );
    }
    let mut rows = vec![];
    for i in 0..shmem::slot_count() {
        let s = shmem::slot(i);
        if s.in_use.load(Ordering::Acquire) == 0 {
            continue;
        }
        let row = {
            let _g = shmem::slot_lock_shared(i);
            if s.in_use.load(Ordering::Acquire) == 0 {
                continue;
            }
            let snap = s.chain.snapshot();
            let last = |r: Option<(u64, u64)>| r.map(|(b, l)| (b + l - 1) as i64);
            (
                pg_sys::Oid::from(s.key.dboid),
                id_gen_core::name::key_to_str(&s.key.name)
                    .replace(crate::api_sequences::SERIAL_SEP, "@"),
                s.key.group as i32,
                match s.state.load(Ordering::Acquire) {
                    STATE_DROPPED => "dropped",
                    STATE_EXHAUSTED => "exhausted",
                    STATE_REFILL_FAILED => "refill failed",
                    _ => "ok",
                }
                .to_owned(),
                snap.current.map(|(b, _)| b as i64),
                last(snap.current),
                snap.used as i64,
                snap.standby.map(|(b, _)| b as i64),
                last(snap.standby),
                s.last_step.load(Ordering::Relaxed) as i64,
                f64::from_bits(s.rate_bits.load(Ordering::Relaxed)),
                s.calls.sum() as i64,
                s.refills.load(Ordering::Relaxed) as i64,
                s.waits.load(Ordering::Relaxed) as i64,
                s.last_refill_us.load(Ordering::Relaxed) as f64 / 1000.0,
                s.last_refill_at.load(Ordering::Relaxed),
                shmem::worker_pid(s.key.dboid),
            )
        };
        rows.push(row);
    }
    TableIterator::new(rows)
}
