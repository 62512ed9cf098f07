//! Snowflake-style time-ordered ids (seeds 001, 003, 004): `0 | ms since epoch | node |
//! per-ms sequence [| owner gene]`, from one generator state in shared memory, so ids
//! are unique and increasing across all backends of the server.
//!
//! Clock going backwards (the seeds' main complaint): the state machine in
//! `id_gen_core::snowflake` keeps issuing from its last timestamp (a logical clock) while
//! it is at most `id_gen.snowflake_max_lead` ahead of the wall clock, then fails naming
//! the skew — never a duplicate or a smaller id.
//!
//! Restarts: no id ever carries a timestamp above a high-water mark that was first
//! written durably to `$PGDATA/id_gen_snowflake.state` (write, fsync, rename, fsync dir).
//! The mark moves ahead in steps (a reservation of time, like a segment of values); at
//! start the state resumes above it, so a restart with the clock set back cannot reissue.
//!
//! The shared state, its lock and the high-water file are in `state.rs`; this file is
//! the SQL surface. Invariants: the snowflake lock is held for the O(1) state step only;
//! the file is written outside it, by one backend at a time; a caller waiting for that
//! writer naps on its latch (cancellable) for at most 10 s in total.

pub mod state;

use crate::clock::{self, Deadline};
use crate::errors::{raise, raise_core, Code};
use crate::gucs;
use id_gen_core::snowflake::{SnowflakeError, SnowflakeLayout};
use pgrx::prelude::*;
use state::Persist;

fn layout() -> SnowflakeLayout {
    let epoch = gucs::SNOWFLAKE_EPOCH_MS
        .get()
        .and_then(|c| c.to_str().ok().and_then(|s| s.trim().parse::<i64>().ok()));
    let Some(epoch) = epoch else {
        raise(
            Code::ERRCODE_INVALID_PARAMETER_VALUE,
            "id_gen: id_gen.snowflake_epoch_ms is not an integer number of milliseconds",
            Some("For example 1577836800000 (2020-01-01 00:00:00 UTC)."),
        )
    };
    let (t, n, s, g) = (
        gucs::SNOWFLAKE_TIME_BITS.get() as u32,
        gucs::SNOWFLAKE_NODE_BITS.get() as u32,
        gucs::SNOWFLAKE_SEQ_BITS.get() as u32,
        gucs::SNOWFLAKE_GENE_BITS.get() as u32,
    );
    let l = if g == 0 {
        SnowflakeLayout::new(t, n, s, epoch)
    } else {
        SnowflakeLayout::with_gene(t, n, s, g, epoch)
    };
    l.unwrap_or_else(|e| {
        raise_core(
            e.sqlstate(),
            format!("bad snowflake layout: {e}"),
            e.hint().as_deref(),
        )
    })
}

fn node(layout: &SnowflakeLayout) -> i64 {
    let node = gucs::SNOWFLAKE_NODE_ID.get() as i64;
    if node < 0 {
        raise(
            Code::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "id_gen: id_gen.snowflake_node_id is not set; refusing to issue snowflake ids",
            Some("Give every server that issues snowflake ids a distinct node id in postgresql.conf (id_gen.snowflake_node_id = 0 .. 2^node_bits-1) and restart."),
        );
    }
    layout
        .check_node(node)
        .unwrap_or_else(|e| raise_core(e.sqlstate(), &e, e.hint().as_deref()));
    node
}

fn persist_margin_ms(max_lead: i64) -> i64 {
    (max_lead / 2).max(1_000)
}

enum Step {
    /// An id, and maybe a mark to persist ahead of time.
    Issued(i64, Option<i64>),
    /// The reservation of time is used up: persist this mark, then retry.
    NeedPersist(i64),
    Fail(SnowflakeError),
}

fn require_shmem() {
    if !crate::shmem::available() {
        raise(
            Code::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "id_gen: snowflake ids need id_gen in shared_preload_libraries",
            Some(
                "Add id_gen to shared_preload_libraries in postgresql.conf and restart the server.",
            ),
        );
    }
}

/// How long a caller waits for another backend that is writing the high-water file.
const PERSIST_WAIT_MS: u64 = 10_000;

fn next_id(owner: Option<i64>) -> i64 {
    require_shmem();
    let layout = layout();
    let node = node(&layout);
    let max_lead = gucs::SNOWFLAKE_MAX_LEAD_MS.get() as i64;
    let margin = persist_margin_ms(max_lead);
    let deadline = Deadline::after_ms(PERSIST_WAIT_MS);
    loop {
        let now = clock::id_clock_ms();
        let step = {
            let mut locked = state::lock();
            let mut st = locked.state();
            let persisted = state::persisted_ms();
            let ahead = st.needs_persist(now, persisted, margin);
            let r = match owner {
                None => st.next_within(&layout, node, now, max_lead, persisted),
                Some(o) => st.next_with_gene(&layout, node, o, now, max_lead, Some(persisted)),
            };
            match r {
                Ok(id) => {
                    locked.store(&st);
                    Step::Issued(id, ahead)
                }
                Err(SnowflakeError::HighWaterReached { needed_ms, .. }) => {
                    Step::NeedPersist(ahead.unwrap_or(needed_ms.saturating_add(margin)))
                }
                Err(e) => Step::Fail(e),
            }
        };
        match step {
            Step::Issued(id, ahead) => {
                if let Some(want) = ahead {
                    // Ahead of time: if another backend is writing, it moves the mark.
                    let _ = state::persist(want);
                }
                return id;
            }
            Step::NeedPersist(want) => {
                if let Persist::Busy = state::persist(want) {
                    if deadline.passed() {
                        raise(
                            Code::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                            "id_gen: could not move the snowflake high-water mark ahead",
                            Some("Another backend seems stuck writing id_gen_snowflake.state; check the server log for I/O errors."),
                        );
                    }
                    clock::nap(1);
                }
            }
            Step::Fail(e) => raise_core(e.sqlstate(), &e, e.hint().as_deref()),
        }
    }
}

/// A time-ordered id: `0 | ms since id_gen.snowflake_epoch_ms | node | sequence`.
#[pg_extern(volatile, parallel_unsafe)]
fn snowflake_id() -> i64 {
    next_id(None)
}

/// The seed-003 variant: the low `id_gen.snowflake_gene_bits` bits hold
/// `owner mod 2^gene_bits`, so `id % 2^gene_bits` routes like the owner.
#[pg_extern(volatile, strict, parallel_unsafe, name = "snowflake_id")]
fn snowflake_id_owner(owner: i64) -> i64 {
    next_id(Some(owner))
}

fn parts(id: i64) -> id_gen_core::snowflake::SnowflakeParts {
    layout()
        .decompose(id)
        .unwrap_or_else(|e| raise_core(e.sqlstate(), &e, e.hint().as_deref()))
}

/// Creation time of a snowflake id (under this server's layout settings).
#[pg_extern(stable, strict, parallel_safe)]
fn snowflake_time(id: i64) -> TimestampWithTimeZone {
    let ms = parts(id).unix_ms;
    // PostgreSQL timestamps count microseconds from 2000-01-01.
    let pg_us = (ms - 946_684_800_000) * 1000;
    TimestampWithTimeZone::try_from(pg_us).unwrap_or_else(|_| {
        raise(
            Code::ERRCODE_DATETIME_FIELD_OVERFLOW,
            format!("id_gen: timestamp of id {id} is out of range"),
            None,
        )
    })
}

/// Node id of a snowflake id.
#[pg_extern(stable, strict, parallel_safe)]
fn snowflake_node(id: i64) -> i32 {
    parts(id).node as i32
}

/// Per-millisecond sequence of a snowflake id.
#[pg_extern(stable, strict, parallel_safe)]
fn snowflake_seq(id: i64) -> i32 {
    parts(id).seq as i32
}

/// Owner gene (low bits) of a snowflake id of a gene layout; 0 otherwise.
#[pg_extern(stable, strict, parallel_safe)]
fn snowflake_gene(id: i64) -> i32 {
    parts(id).gene as i32
}

/// The generator's state, for operators.
#[pg_extern(volatile, parallel_safe)]
#[allow(clippy::type_complexity)]
fn snowflake_status() -> TableIterator<
    'static,
    (
        name!(node_id, i32),
        name!(time_bits, i32),
        name!(node_bits, i32),
        name!(seq_bits, i32),
        name!(gene_bits, i32),
        name!(epoch_ms, i64),
        name!(last_ms, i64),
        name!(persisted_ms, i64),
        name!(clock_ms, i64),
        name!(max_lead_ms, i32),
    ),
> {
    require_shmem();
    let l = layout();
    let last = state::lock().state().last_ms;
    let persisted = state::persisted_ms();
    TableIterator::once((
        gucs::SNOWFLAKE_NODE_ID.get(),
        l.time_bits() as i32,
        l.node_bits() as i32,
        l.seq_bits() as i32,
        l.gene_bits() as i32,
        l.epoch_ms(),
        last,
        persisted,
        clock::id_clock_ms(),
        gucs::SNOWFLAKE_MAX_LEAD_MS.get(),
    ))
}
