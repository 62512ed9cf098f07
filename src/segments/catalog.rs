//! SPI access to the catalogs of the segment engine: `id_gen.sequences` (named
//! sequences) and the counters of `id_gen.serials` (dated serials).
//!
//! Two kinds of callers: backends read a row (in their own transaction, read-only) when
//! they first meet a sequence; the refill worker reserves segments by moving the
//! high-water mark `max_id`, each reservation in a transaction of its own that commits
//! durably before the values are published (see `worker.rs`).
//!
//! A sequence with an `authority` (a postgres_fdw server) reserves on that server's
//! catalog instead ([`super::authority`]) and records the range's end in its own row.
//!
//! Invariant: `max_id` only grows, and a value `v` is handed to a cache only if a
//! committed row had `max_id >= v` (for an authority sequence: the central row, and the
//! local row too). Nothing here holds a shared-memory lock.

use super::authority::{self, Remote};
use id_gen_core::segment::{reserve, reserve_exact, StepHistory, StepPolicy};
use pgrx::prelude::*;
use pgrx::spi::SpiResult;

/// The tuning of a sequence: one definition for create, alter and the worker.
#[derive(Clone, Copy, Debug)]
pub struct Tuning {
    pub step: i64,
    pub min_step: i64,
    pub max_step: i64,
    pub buffer_seconds: i32,
    pub preload_threshold: f32,
    pub max_value: i64,
}

/// The columns [`Tuning::from_row`] reads, in order, followed by `max_id`.
pub const TUNING_COLUMNS: &str =
    "step, min_step, max_step, buffer_seconds, preload_threshold, max_value, max_id";

/// The `authority` of a row of `id_gen.sequences s`, read through `to_jsonb` so that the
/// query also parses against a catalog from before the column (an update not yet run).
const AUTHORITY_COLUMN: &str = "(pg_catalog.to_jsonb(s) OPERATOR(pg_catalog.->>) 'authority')";

/// Moves the local high-water mark of `name` to `last` (inside a reservation).
fn set_max_id(client: &mut pgrx::spi::SpiClient<'_>, name: &str, last: i64) -> SpiResult<()> {
    client.update(
        "UPDATE id_gen.sequences SET max_id = $2, updated_at = now() WHERE name = $1",
        None,
        &[name.into(), last.into()],
    )?;
    Ok(())
}

impl Tuning {
    /// Reads the [`TUNING_COLUMNS`] of a row (all NOT NULL in the catalog) and `max_id`.
    pub fn from_row(row: &pgrx::spi::SpiTupleTable) -> SpiResult<(Tuning, i64)> {
        let need = |v: Option<i64>| v.unwrap_or(1).max(1);
        Ok((
            Tuning {
                step: need(row.get::<i64>(1)?),
                min_step: need(row.get::<i64>(2)?),
                max_step: need(row.get::<i64>(3)?),
                buffer_seconds: row.get::<i32>(4)?.unwrap_or(1).max(1),
                preload_threshold: row.get::<f32>(5)?.unwrap_or(0.1),
                max_value: row.get::<i64>(6)?.unwrap_or(i64::MAX),
            },
            row.get::<i64>(7)?.unwrap_or(0),
        ))
    }

    pub fn policy(&self) -> StepPolicy {
        StepPolicy {
            step: self.step.max(1) as u64,
            min_step: self.min_step.max(1) as u64,
            max_step: self.max_step.max(1) as u64,
            buffer_seconds: self.buffer_seconds as f64,
        }
    }
}

/// What a backend needs to know to attach a sequence.
pub struct SeqInfo {
    pub incarnation: i64,
    pub counters: i32,
    pub max_bulk: i64,
}

/// Reads a sequence's identity; `None` if it does not exist.
///
/// Read with `update` (SPI `read_only = false`): like a VOLATILE PL/pgSQL function, each
/// query takes a fresh snapshot, so a drop that commits while the caller's statement
/// runs is seen here as the worker sees it (with the statement's snapshot, a caller would
/// attach a dropped sequence again and again). The same holds for the access queries.
pub fn lookup(name: &str) -> SpiResult<Option<SeqInfo>> {
    Spi::connect_mut(|client| {
        let t = client.update(
            // max_bulk through to_jsonb: NULL (no cap) in a catalog from before 0.2.0 whose
            // ALTER EXTENSION UPDATE has not run yet.
            "SELECT incarnation, counters, \
             (pg_catalog.to_jsonb(s) OPERATOR(pg_catalog.->>) 'max_bulk')::pg_catalog.int8 \
             FROM id_gen.sequences s WHERE s.name OPERATOR(pg_catalog.=) $1",
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
            max_bulk: row.get::<i64>(3)?.unwrap_or(i64::MAX),
        }))
    })
}

/// True if the current transaction created, changed or locked the catalog row of
/// sequence `name`: the worker's reservation would wait for this very transaction.
pub fn row_held_by_this_transaction(name: &str) -> SpiResult<bool> {
    let row = Spi::connect_mut(|client| {
        let t = client.update(
            "SELECT xmin::text, xmax::text FROM id_gen.sequences WHERE name OPERATOR(pg_catalog.=) $1",
            Some(1),
            &[name.into()],
        )?;
        if t.is_empty() {
            return Ok(None);
        }
        let r = t.first();
        Ok::<_, pgrx::spi::Error>(Some((r.get::<String>(1)?, r.get::<String>(2)?)))
    })?;
    let ours = |xid: Option<String>| {
        xid.and_then(|x| x.parse::<u32>().ok())
            .filter(|&x| x != 0)
            // SAFETY: a pure check of an xid against the current transaction stack.
            .is_some_and(|x| unsafe { pg_sys::TransactionIdIsCurrentTransactionId(x.into()) })
    };
    Ok(row.is_some_and(|(xmin, xmax)| ours(xmin) || ours(xmax)))
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
    history: StepHistory,
) -> SpiResult<(Reservation, u64)> {
    Spi::connect_mut(|client| {
        let t = client.update(
            &format!(
                "SELECT {TUNING_COLUMNS}, {AUTHORITY_COLUMN} FROM id_gen.sequences s \
                 WHERE name = $1 AND incarnation = $2 FOR UPDATE"
            ),
            Some(1),
            &[name.into(), incarnation.into()],
        )?;
        if t.is_empty() {
            return Ok((Reservation::Dropped, 0));
        }
        let row = t.first();
        let (tuning, max_id) = Tuning::from_row(&row)?;
        let authority = row.get::<String>(8)?;
        let (max_value, policy) = (tuning.max_value, tuning.policy());
        let threshold = tuning.preload_threshold as f64;
        let step = policy.next_step(rate_per_s, history);
        let range = match authority {
            Some(server) => {
                match authority::reserve(client, &server, name, max_id, max_value, step, false)? {
                    Remote::Range { first, last } => Ok((first, last)),
                    Remote::Short { .. } => Err(()),
                }
            }
            None => reserve(max_id, max_value, step).map_err(|_| ()),
        };
        match range {
            Err(()) => Ok((Reservation::Exhausted, step)),
            Ok((first, last)) => {
                set_max_id(client, name, last)?;
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

/// Result of an exact bulk reservation.
pub enum BulkReservation {
    /// `[first, first + n - 1]` is ours once the transaction commits.
    Range { first: i64 },
    /// Only `left` values remain before `max_value`; nothing was reserved.
    NotEnough { left: u64 },
    /// The row is gone, or belongs to another incarnation.
    Dropped,
}

/// Moves the high-water mark of `name` by exactly `n` for one bulk request (a range
/// beside the regular segments, never put into the shared chain). A request larger
/// than what is left reserves nothing.
pub fn reserve_bulk(name: &str, incarnation: i64, n: u64) -> SpiResult<BulkReservation> {
    Spi::connect_mut(|client| {
        let t = client.update(
            &format!(
                "SELECT max_id, max_value, {AUTHORITY_COLUMN} FROM id_gen.sequences s \
                 WHERE name = $1 AND incarnation = $2 FOR UPDATE"
            ),
            Some(1),
            &[name.into(), incarnation.into()],
        )?;
        if t.is_empty() {
            return Ok(BulkReservation::Dropped);
        }
        let row = t.first();
        let max_id = row.get::<i64>(1)?.unwrap_or(0);
        let max_value = row.get::<i64>(2)?.unwrap_or(i64::MAX);
        let range = match row.get::<String>(3)? {
            Some(server) => {
                match authority::reserve(client, &server, name, max_id, max_value, n, true)? {
                    Remote::Range { first, last } => Ok((first, last)),
                    Remote::Short { left } => Err(left),
                }
            }
            None => reserve_exact(max_id, max_value, n).map_err(|e| e.left),
        };
        match range {
            Err(left) => Ok(BulkReservation::NotEnough { left }),
            Ok((first, last)) => {
                set_max_id(client, name, last)?;
                Ok(BulkReservation::Range { first })
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

/// After a promotion: moves `max_id` of every local sequence (one without an authority,
/// whose values a central server hands out) up by `segments` × its `max_step`, capped at
/// `max_value`, so values that an asynchronously replicated old primary reserved after
/// the last WAL this server received are not handed out again. Returns the rows moved.
pub fn skip_after_promotion(segments: i32) -> SpiResult<u64> {
    Spi::connect_mut(|client| {
        let t = client.update(
            &format!(
                "WITH moved AS (UPDATE id_gen.sequences s SET updated_at = pg_catalog.now(), \
                 max_id = GREATEST(s.max_id, LEAST(s.max_value::pg_catalog.numeric, \
                   s.max_id::pg_catalog.numeric + $1::pg_catalog.numeric * s.max_step)::pg_catalog.int8) \
                 WHERE {AUTHORITY_COLUMN} IS NULL RETURNING 1) SELECT pg_catalog.count(*) FROM moved"
            ),
            Some(1),
            &[segments.into()],
        )?;
        Ok(t.first().get::<i64>(1)?.unwrap_or(0) as u64)
    })
}
