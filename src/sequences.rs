//! SQL surface of named sequences: create/alter/drop, `next_segment_id` (the hot path,
//! a hand-written V1 function with a per-call-site cache), the bulk forms and the rows
//! of the `id_gen.status` view. The engine behind them is `segments/`.
//!
//! Invariants: input is validated here, once (names through `SeqName`, tuning against
//! its documented ranges, NULLs with 22004 naming the argument); the catalog is only
//! written through these functions and the worker.

use crate::access::{self, Kind, Stamp};
use crate::errors::{checked_name, raise, raise_detail, required, spi_failed, Code};
use crate::segments::catalog::{Tuning, TUNING_COLUMNS};
use crate::segments::{self, registry, slots};
use id_gen_core::segment::MAX_SEGMENT_LEN;
use pgrx::prelude::*;
use std::sync::atomic::Ordering;

// `id_gen.next_segment_id(text)` is the hot path of every INSERT that uses it as a
// DEFAULT, so it is a hand-written V1 function (declared in sql/install/hot_path.sql) rather
// than a #[pg_extern]: it reads the name straight from the argument's varlena bytes
// (no detoast call, no copy) when the text is stored inline, which is always the case
// for a constant name; and it keeps the slot it used in the call site's `fn_extra`
// (pg_jsonschema's call-site cache), so the next call of the same expression goes
// straight to the shared segment without a backend-local lookup.

/// fmgr's "V1 calling convention" marker for [`id_gen_next_segment_id`].
#[unsafe(no_mangle)]
pub extern "C" fn pg_finfo_id_gen_next_segment_id() -> &'static pg_sys::Pg_finfo_record {
    static V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

/// What a call site remembers (in `fn_extra`, allocated in `fn_mcxt`, so it lives as
/// long as the expression): the name it was called with, the slot and generation that
/// served it, and calls not yet added to the slot's rate counter — flushed by a reset
/// callback of `fn_mcxt` when the expression goes away, so no call is left uncounted.
#[repr(C)]
struct CallSite {
    slot: usize,
    generation: u64,
    /// The access decision this call site relies on (all-zero: none yet).
    stamp: Stamp,
    pending: u64,
    name_len: usize,
    name: [u8; 64],
    flush: pg_sys::MemoryContextCallback,
}

/// Adds a call site's uncounted calls to its slot's rate counter (a memory-context reset
/// callback: runs when the call site's memory goes away).
#[pg_guard]
unsafe extern "C-unwind" fn flush_call_site(arg: *mut std::ffi::c_void) {
    // SAFETY: `arg` is the CallSite this callback was registered for; the callback runs
    // before the context (and so the CallSite) is freed.
    let site = unsafe { &mut *(arg as *mut CallSite) };
    if site.pending > 0 && site.slot < slots::slot_count() {
        slots::slot(site.slot)
            .calls
            .add(slots::my_stripe(), std::mem::take(&mut site.pending));
    }
}

/// Next value of a named sequence, from the shared segment cache.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn id_gen_next_segment_id(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: fmgr's call frame, passed on unchanged.
    unsafe { next_value(fcinfo, true) }
}

/// fmgr's "V1 calling convention" marker for [`id_gen_next_segment_id_unchecked`].
#[unsafe(no_mangle)]
pub extern "C" fn pg_finfo_id_gen_next_segment_id_unchecked() -> &'static pg_sys::Pg_finfo_record {
    static V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

/// The benchmark baseline of the access check: `next_segment_id` without the per-call
/// comparison of the call site's access stamp (the check on attach still runs). Only
/// superusers may call it (sql/install/hot_path.sql), and they pass every access check anyway,
/// so it changes nobody's rights; bench/ measures both forms in one run.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn id_gen_next_segment_id_unchecked(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: fmgr's call frame, passed on unchanged.
    unsafe { next_value(fcinfo, false) }
}

/// The body of both V1 entry points; `checked`: compare the call site's access stamp.
///
/// # Safety
/// `fcinfo` is fmgr's frame of a STRICT one-text-argument V1 function.
#[inline(always)]
unsafe fn next_value(fcinfo: pg_sys::FunctionCallInfo, checked: bool) -> pg_sys::Datum {
    // SAFETY: fmgr calls us with a valid fcinfo holding one non-NULL text argument
    // (the function is STRICT); the bytes live for the duration of the call.
    let name = unsafe { text_arg(fcinfo, 0) };
    // SAFETY: flinfo is valid for the call; fn_extra is either NULL or the CallSite we
    // allocated in fn_mcxt (nobody else uses this call site's fn_extra).
    let site = unsafe { (*(*fcinfo).flinfo).fn_extra as *mut CallSite };
    if !site.is_null() {
        // SAFETY: see above; the CallSite is ours and lives as long as the call site.
        let site = unsafe { &mut *site };
        if site.name_len == name.len() && &site.name[..site.name_len] == name.as_bytes() {
            let stamp = checked.then_some(site.stamp);
            if let Some(v) =
                segments::take_one_cached(site.slot, site.generation, stamp, &mut site.pending)
            {
                return pg_sys::Datum::from(v);
            }
        }
    }
    let (v, slot, generation, stamp) = segments::take_one(name, None);
    if name.len() <= 64 {
        // SAFETY: as above; a fresh CallSite is zeroed memory of the right size in the
        // call site's own memory context.
        unsafe {
            let mut site = (*(*fcinfo).flinfo).fn_extra as *mut CallSite;
            if site.is_null() {
                let mcxt = (*(*fcinfo).flinfo).fn_mcxt;
                site = pg_sys::MemoryContextAllocZero(mcxt, size_of::<CallSite>()) as *mut CallSite;
                (*site).flush.func = Some(flush_call_site);
                (*site).flush.arg = site.cast();
                pg_sys::MemoryContextRegisterResetCallback(mcxt, &raw mut (*site).flush);
                (*(*fcinfo).flinfo).fn_extra = site.cast();
            } else if (*site).pending > 0 {
                flush_call_site(site.cast()); // its calls belong to the old slot
            }
            let site = &mut *site;
            site.slot = slot;
            site.generation = generation;
            site.stamp = stamp;
            site.name_len = name.len();
            site.name[..name.len()].copy_from_slice(name.as_bytes());
        }
    }
    pg_sys::Datum::from(v)
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
/// must fit PostgreSQL's 1 GB allocation limit.
const MAX_BATCH_ROWS: i32 = 100_000_000;

fn checked_count(n: i64) -> u64 {
    if n < 0 {
        raise(
            Code::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("id_gen: n must not be negative, got {n}"),
            None,
        );
    }
    n as u64
}

fn check_batch(n: i32) {
    if n > MAX_BATCH_ROWS {
        raise(
            Code::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("id_gen: n must be at most {MAX_BATCH_ROWS}, got {n}"),
            Some("Use id_gen.next_segment_ranges(name, n), which returns runs of consecutive values, for larger batches."),
        );
    }
}

fn values_of(runs: Vec<(i64, u64)>) -> impl Iterator<Item = i64> {
    runs.into_iter()
        .flat_map(|(first, count)| first..=first + (count as i64 - 1))
}

/// `n` values of a named sequence for bulk loads, one row each.
#[pg_extern(volatile, strict, parallel_unsafe)]
fn next_segment_ids(seq: &str, n: i32) -> SetOfIterator<'static, i64> {
    check_batch(n);
    SetOfIterator::new(values_of(segments::take_runs(seq, checked_count(n as i64))))
}

/// `n` values of a named sequence as one bigint[] (cheaper than n rows for big batches).
#[pg_extern(volatile, strict, parallel_unsafe)]
fn next_segment_ids_array(seq: &str, n: i32) -> Vec<i64> {
    check_batch(n);
    values_of(segments::take_runs(seq, checked_count(n as i64))).collect()
}

/// `n` values of a named sequence as runs `[first_id, last_id]` of consecutive values:
/// the cheapest form for loaders that number rows themselves. A request larger than a
/// segment is one exact reservation: one run, at once.
#[pg_extern(volatile, strict, parallel_unsafe)]
fn next_segment_ranges(
    seq: &str,
    n: i64,
) -> TableIterator<'static, (name!(first_id, i64), name!(last_id, i64))> {
    let runs = segments::take_runs(seq, checked_count(n));
    TableIterator::new(
        runs.into_iter()
            .map(|(first, count)| (first, first + (count as i64 - 1))),
    )
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
    name: Option<&str>,
    start: default!(Option<i64>, 1),
    step: default!(Option<i64>, 1000),
    min_step: default!(Option<i64>, "NULL"),
    max_step: default!(Option<i64>, "NULL"),
    buffer_seconds: default!(Option<i32>, "NULL"),
    preload_threshold: default!(Option<f32>, 0.1),
    max_value: default!(Option<i64>, 9223372036854775807),
    counters: default!(Option<i32>, 1),
    comment: default!(Option<&str>, "NULL"),
    max_bulk: default!(Option<i64>, 100000000),
    authority: default!(Option<&str>, "NULL"),
) -> String {
    let name = checked_name(required(name, "name"));
    let max_bulk = checked_max_bulk(required(max_bulk, "max_bulk"));
    let start = required(start, "start");
    let step = required(step, "step");
    let counters = required(counters, "counters");
    let t = Tuning {
        step,
        min_step: min_step.unwrap_or(step),
        max_step: max_step.unwrap_or(step.max(1_000_000)),
        buffer_seconds: buffer_seconds.unwrap_or(crate::gucs::DEFAULT_BUFFER_SECONDS.get()),
        preload_threshold: required(preload_threshold, "preload_threshold"),
        max_value: required(max_value, "max_value"),
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
    if !(1..=slots::MAX_GROUPS as i32).contains(&counters) {
        raise(
            Code::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("id_gen: counters must be between 1 and {}, got {counters}", slots::MAX_GROUPS),
            Some("counters > 1 splits gene_order_id traffic over independent cursors by virtual-node range."),
        );
    }
    // Last: it may create the authority's foreign table and talk to the authority.
    let authority =
        authority.and_then(|server| segments::authority::checked(server, name.as_str()));
    let owner = access::current_role_name();
    let inserted = access::as_catalog_owner(|| {
        Spi::connect_mut(|client| {
            let t = client.update(
                "INSERT INTO id_gen.sequences AS s (name, max_id, step, min_step, max_step, buffer_seconds, \
                 preload_threshold, max_value, counters, comment, owner, max_bulk, authority) \
                 VALUES ($1, $2 - 1, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) ON CONFLICT (name) DO NOTHING RETURNING s.name",
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
                    owner.as_str().into(),
                    max_bulk.into(),
                    authority.into(),
                ],
            )?;
            if t.is_empty() {
                return Ok(false);
            }
            // Grants left by a row deleted behind id_gen's back must not carry over.
            access::delete_grants(client, Kind::Sequence, name.as_str())?;
            Ok::<_, pgrx::spi::Error>(true)
        })
    })
    .unwrap_or_else(|e| spi_failed(e));
    if !inserted {
        raise(
            Code::ERRCODE_DUPLICATE_OBJECT,
            format!("id_gen: sequence \"{name}\" already exists"),
            Some("Use id_gen.alter_sequence to change it, or pick another name."),
        );
    }
    segments::forget_sequence(&name); // a stale cache of an older sequence of that name
    access::changed();
    name.to_string()
}

/// `max_bulk` must be positive (54000 applies beyond it).
fn checked_max_bulk(max_bulk: i64) -> i64 {
    if max_bulk < 1 {
        raise(
            Code::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("id_gen: max_bulk must be positive, got {max_bulk}"),
            Some(
                "max_bulk caps the values one next_segment_ids/next_segment_ranges call may take.",
            ),
        );
    }
    max_bulk
}

/// The row of `name`, locked so that concurrent alters serialise; 42704 if missing.
fn locked_tuning(name: &id_gen_core::name::SeqName) -> (Tuning, i64) {
    let row = Spi::connect_mut(|client| {
        let t = client.update(
            &format!("SELECT {TUNING_COLUMNS} FROM id_gen.sequences WHERE name = $1 FOR UPDATE"),
            Some(1),
            &[name.as_str().into()],
        )?;
        if t.is_empty() {
            return Ok(None);
        }
        Tuning::from_row(&t.first()).map(Some)
    })
    .unwrap_or_else(|e| spi_failed(e));
    row.unwrap_or_else(|| {
        raise(
            Code::ERRCODE_UNDEFINED_OBJECT,
            format!("id_gen: sequence \"{name}\" does not exist"),
            Some("Existing sequences are listed in id_gen.sequences."),
        )
    })
}

/// Changes a sequence's tuning; NULL keeps a setting. Takes effect with the next segment.
#[pg_extern(volatile, parallel_unsafe)]
#[allow(clippy::too_many_arguments)]
fn alter_sequence(
    name: Option<&str>,
    step: default!(Option<i64>, "NULL"),
    min_step: default!(Option<i64>, "NULL"),
    max_step: default!(Option<i64>, "NULL"),
    buffer_seconds: default!(Option<i32>, "NULL"),
    preload_threshold: default!(Option<f32>, "NULL"),
    max_value: default!(Option<i64>, "NULL"),
    comment: default!(Option<&str>, "NULL"),
    max_bulk: default!(Option<i64>, "NULL"),
    authority: default!(Option<&str>, "NULL"),
) -> String {
    let name = checked_name(required(name, "name"));
    access::require_owner(Kind::Sequence, name.as_str(), "alter");
    let max_bulk = max_bulk.map(checked_max_bulk);
    // Some(None): back to local ('local'); None: unchanged.
    let authority = authority.map(|server| segments::authority::checked(server, name.as_str()));
    let (cur, max_id) = access::as_catalog_owner(|| locked_tuning(&name));
    // Again now that the row is locked: it cannot change owner until we commit, and a row
    // dropped and created again since the first check is checked anew.
    access::require_owner(Kind::Sequence, name.as_str(), "alter");
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
    access::as_catalog_owner(|| {
        Spi::run_with_args(
            "UPDATE id_gen.sequences SET step = $2, min_step = $3, max_step = $4, buffer_seconds = $5, \
             preload_threshold = $6, max_value = $7, comment = COALESCE($8, comment), \
             max_bulk = COALESCE($9, max_bulk), \
             authority = CASE WHEN $10 THEN $11 ELSE authority END, updated_at = now() \
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
                max_bulk.into(),
                authority.is_some().into(),
                authority.flatten().into(),
            ],
        )
    })
    .unwrap_or_else(|e| spi_failed(e));
    segments::sequence_altered(&name);
    access::changed();
    name.to_string()
}

/// Drops a sequence and forgets its cached segments.
#[pg_extern(volatile, parallel_unsafe)]
fn drop_sequence(name: Option<&str>, if_exists: default!(Option<bool>, false)) -> bool {
    let name = checked_name(required(name, "name"));
    let if_exists = required(if_exists, "if_exists");
    let deleted = access::drop_object(Kind::Sequence, name.as_str());
    access::changed();
    segments::forget_sequence(&name);
    if !deleted && !if_exists {
        raise(
            Code::ERRCODE_UNDEFINED_OBJECT,
            format!("id_gen: sequence \"{name}\" does not exist"),
            Some("Pass if_exists => true to ignore a missing sequence."),
        );
    }
    deleted
}

fn state_name(state: u32) -> &'static str {
    match state {
        slots::STATE_DROPPED => "dropped",
        slots::STATE_EXHAUSTED => "exhausted",
        slots::STATE_REFILL_FAILED => "refill failed",
        slots::STATE_PERIOD_CLOSED => "period closed",
        _ => "ok",
    }
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
        name!(authority, Option<String>),
        name!(last_error, Option<String>),
        name!(last_error_at_ms, i64),
    ),
> {
    segments::require_cache();
    let mut rows = vec![];
    for i in 0..slots::slot_count() {
        let s = slots::slot(i);
        if s.in_use.load(Ordering::Acquire) == 0 {
            continue;
        }
        let Some(key) = slots::key_of(i) else {
            continue;
        };
        let (snap, state) = {
            let _g = slots::slot_lock_shared(i);
            (s.chain.snapshot(), s.state.load(Ordering::Acquire))
        };
        let last = |r: Option<(u64, u64)>| r.map(|(b, l)| (b + l - 1) as i64);
        let diagnostics = slots::diagnostics(i);
        let (last_error, last_error_at_ms) = diagnostics.last_error.unzip();
        rows.push((
            pg_sys::Oid::from(key.dboid),
            key.display(),
            key.group() as i32,
            state_name(state).to_owned(),
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
            registry::worker_pid(key.dboid),
            diagnostics.authority,
            last_error,
            last_error_at_ms.unwrap_or(0),
        ));
    }
    TableIterator::new(rows)
}

/// The segment cache's error counters, one row per cached (database, sequence, group), for
/// `id_gen.metrics` (sql/cluster/metrics.sql): failed reservations at an authority, callers
/// whose wait ended at `id_gen.refill_timeout`, and the last round trip of a reservation
/// statement an authority answered (ms; NULL before the first), apart from the local commit.
#[pg_extern(volatile, parallel_safe)]
#[allow(clippy::type_complexity)]
fn cache_counters() -> TableIterator<
    'static,
    (
        name!(dboid, pg_sys::Oid),
        name!(sequence, String),
        name!(counter_group, i32),
        name!(authority_errors, i64),
        name!(wait_timeouts, i64),
        name!(authority_round_trip_ms, Option<f64>),
    ),
> {
    segments::require_cache();
    let mut rows = vec![];
    for i in 0..slots::slot_count() {
        let s = slots::slot(i);
        if s.in_use.load(Ordering::Acquire) == 0 {
            continue;
        }
        let Some(key) = slots::key_of(i) else {
            continue;
        };
        let round_trip_us = s.authority_round_trip_us.load(Ordering::Relaxed);
        rows.push((
            pg_sys::Oid::from(key.dboid),
            key.display(),
            key.group() as i32,
            s.authority_errors.load(Ordering::Relaxed) as i64,
            s.wait_timeouts.load(Ordering::Relaxed) as i64,
            (round_trip_us > 0).then(|| round_trip_us as f64 / 1000.0),
        ));
    }
    TableIterator::new(rows)
}
