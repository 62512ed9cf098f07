//! SPI access to the `id_gen.sequences` catalog.
//!
//! Two kinds of callers: backends read a row (in their own transaction, read-only) when
//! they first meet a sequence; the refill worker reserves segments by moving the
//! high-water mark `max_id`, each reservation in a transaction of its own that commits
//! durably before the values are published (see `worker.rs`).
//!
//! Invariant: `max_id` only grows, and a value `v` is handed to a cache only if a
//! committed row had `max_id >= v`. Nothing here holds a shared-memory lock.

use id_gen_core::segment::{reserve, StepPolicy};
use pgrx::prelude::*;
use pgrx::spi::SpiResult;

/// What a backend needs to know to attach a sequence.
pub struct SeqInfo {
    pub incarnation: i64,
    pub counters: i32,
}

/// Reads a sequence's identity; `None` if it does not exist.
pub fn lookup(name: &str) -> SpiResult<Option<SeqInfo>> {
    Spi::connect(|client| {
        let t = client.select(
            "SELECT incarnation, counters FROM id_gen.sequences WHERE name = $1",
            Some(1),
            &[name.into()],
        )?;
        if t.is_empty() {
            return Ok(None);
        }
        let row = t.first();
        Ok(Some(SeqInfo {
            incarnation: row.get::<i64>(1)?.unwrap_or(0),
            counters: row.get::<i32>(2)?.unwrap_or(1),
        }))
    })
}

/// Result of one reservation attempt by the worker.
pub enum Reservation {
    /// `[first, last]` is ours; the row committed with `max_id = last` (after commit).
    Segment {
        first: i64,
        last: i64,
        preload_threshold: f64,
    },
    /// The row is gone, or belongs to another incarnation.
    Dropped,
    /// `max_id` reached `max_value` (for a serial: the period's serial space is used up).
    Exhausted,
    /// A serial's catalog row already moved on to a later period.
    PeriodClosed,
}

/// Moves the high-water mark of `name` by the policy's step. Runs inside the worker's
/// own transaction; the caller commits it before publishing the segment.
pub fn reserve_segment(
    name: &str,
    incarnation: i64,
    rate_per_s: Option<f64>,
    demand: u64,
) -> SpiResult<(Reservation, u64)> {
    Spi::connect_mut(|client| {
        let t = client.update(
            "SELECT max_id, max_value, step, min_step, max_step, buffer_seconds, preload_threshold \
             FROM id_gen.sequences WHERE name = $1 AND incarnation = $2 FOR UPDATE",
            Some(1),
            &[name.into(), incarnation.into()],
        )?;
        if t.is_empty() {
            return Ok((Reservation::Dropped, 0));
        }
        let row = t.first();
        let max_id = row.get::<i64>(1)?.unwrap_or(0);
        let max_value = row.get::<i64>(2)?.unwrap_or(i64::MAX);
        let policy = StepPolicy {
            step: row.get::<i64>(3)?.unwrap_or(1000).max(1) as u64,
            min_step: row.get::<i64>(4)?.unwrap_or(1).max(1) as u64,
            max_step: row.get::<i64>(5)?.unwrap_or(1).max(1) as u64,
            buffer_seconds: row.get::<i32>(6)?.unwrap_or(30) as f64,
        };
        let threshold = row.get::<f32>(7)?.unwrap_or(0.1) as f64;
        let step = policy.next_step(rate_per_s, demand);
        match reserve(max_id, max_value, step) {
            Err(_) => Ok((Reservation::Exhausted, step)),
            Ok((first, last)) => {
                client.update(
                    "UPDATE id_gen.sequences SET max_id = $2, updated_at = now() WHERE name = $1",
                    None,
                    &[name.into(), last.into()],
                )?;
                Ok((
                    Reservation::Segment {
                        first,
                        last,
                        preload_threshold: threshold,
                    },
                    step,
                ))
            }
        }
    })
}

/// Reserves the next run of counters of one period of a serial: the row keeps the
/// current period and the largest counter reserved in it. A later period resets the
/// counter; an earlier one is refused (the period is over), so no counter of an old
/// period is handed out after a newer period began, and none repeats within a period.
/// `period_start` is the period's *local* start (UTC start + UTC offset), identical for
/// all instants of one date text even across a DST change; in the hour repeated at the
/// end of DST, an hour-format period is revisited with the same start and simply
/// continues its counter.
pub fn reserve_serial(
    serial: &str,
    period_text: &str,
    period_start: i64,
) -> SpiResult<(Reservation, u64)> {
    Spi::connect_mut(|client| {
        let t = client.update(
            "SELECT period_start_ms, period_max, step, width FROM id_gen.serials WHERE name = $1 FOR UPDATE",
            Some(1),
            &[serial.into()],
        )?;
        if t.is_empty() {
            return Ok((Reservation::Dropped, 0));
        }
        let row = t.first();
        let row_start = row.get::<i64>(1)?.unwrap_or(i64::MIN);
        let row_max = row.get::<i64>(2)?.unwrap_or(0);
        let step = row.get::<i32>(3)?.unwrap_or(100).max(1) as i64;
        let width = row.get::<i32>(4)?.unwrap_or(8).clamp(1, 18) as u32;
        if row_start > period_start {
            return Ok((Reservation::PeriodClosed, 0));
        }
        let base = if row_start == period_start {
            row_max
        } else {
            0
        };
        let capacity = 10i64.pow(width) - 1; // counters run 1 ..= 10^width - 1
        if base >= capacity {
            return Ok((Reservation::Exhausted, 0));
        }
        let last = (base + step).min(capacity);
        client.update(
            "UPDATE id_gen.serials SET period_start_ms = $2, period_text = $3, period_max = $4 WHERE name = $1",
            None,
            &[serial.into(), period_start.into(), period_text.into(), last.into()],
        )?;
        Ok((
            Reservation::Segment {
                first: base + 1,
                last,
                preload_threshold: 0.5,
            },
            step as u64,
        ))
    })
}
