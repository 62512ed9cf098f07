//! The backend's cached view of this shard's routing: the route version the coordinator
//! last pushed (`id_gen.shard_route_state`) and, for every distributed table in
//! `id_gen.shard_tables`, the partitions that hold its gene ranges and its tombstone.
//!
//! Invariants: the view is a hint. It is reloaded when the `ShardRouting` epoch moves
//! (every function that attaches or detaches a shard partition, or stores a pushed
//! version, bumps it at commit), on every use without shared memory, and whenever a
//! caller asks for a fresh copy before refusing something. Loading runs SQL under the
//! latest snapshot (not the statement's: what committed while a claim waited must be
//! seen) with the guard switched off (`super::quietly`), never under a lock of ours; in
//! parallel mode (a worker, a statement nested in a parallel plan), where no new snapshot
//! may be taken, under the statement's, for that caller only (not cached).

use crate::epochs::{self, Epoch};
use pgrx::prelude::*;
use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;

/// One partition of a distributed table: genes `lower ..= upper`.
pub struct Partition {
    pub lower: u16,
    pub upper: u16,
    pub relid: pg_sys::Oid,
}

/// A distributed table on this shard.
pub struct DistributedTable {
    pub parent: pg_sys::Oid,
    pub partitions: Vec<Partition>,
    /// Its partitions without a gene range: the tombstone (and the partition of negative ids).
    pub unranged: Vec<pg_sys::Oid>,
}

impl DistributedTable {
    /// The partition that holds `gene`, if this shard owns it.
    pub fn partition_of(&self, gene: u16) -> Option<&Partition> {
        self.partitions
            .iter()
            .find(|p| p.lower <= gene && gene <= p.upper)
    }
}

/// What this backend knows of the shard's routing.
pub struct ShardState {
    epoch: u64,
    pub version: i64,
    /// By schema and table name: claims lock in this order, as a move's fence does.
    pub tables: Vec<DistributedTable>,
    /// Parents, partitions and tombstones: the relations whose statements are checked.
    pub relids: HashSet<pg_sys::Oid>,
}

thread_local! {
    static CACHE: RefCell<Option<Rc<ShardState>>> = const { RefCell::new(None) };
}

/// The current view; `fresh` forces a reload.
pub fn current(fresh: bool) -> Rc<ShardState> {
    let epoch = epochs::current(Epoch::ShardRouting);
    if !fresh && epoch != 0 {
        if let Some(s) = CACHE.with(|c| c.borrow().clone()) {
            if s.epoch == epoch {
                return s;
            }
        }
    }
    // SAFETY: reading a backend global.
    if unsafe { pg_sys::IsInParallelMode() } {
        // No new snapshot may be taken in parallel mode (a worker; a statement nested in a
        // parallel plan): the view is loaded under the statement's own, which may be old
        // (REPEATABLE READ), so it serves this caller only and is not cached.
        return Rc::new(super::quietly(|| load(epoch)));
    }
    let loaded = Rc::new(super::quietly(|| {
        epochs::with_latest_snapshot(|| load(epoch))
    }));
    CACHE.with(|c| *c.borrow_mut() = Some(loaded.clone()));
    loaded
}

/// The epoch as it is now (claims compare it after taking their locks).
pub fn epoch_now() -> u64 {
    epochs::current(Epoch::ShardRouting)
}

impl ShardState {
    pub fn loaded_at_epoch(&self) -> u64 {
        self.epoch
    }
}

fn load(epoch: u64) -> ShardState {
    let mut state = ShardState {
        epoch,
        version: 0,
        tables: vec![],
        relids: HashSet::new(),
    };
    let rows: Result<Vec<(i64, u32, u32, i32, i32)>, pgrx::spi::Error> = Spi::connect(|client| {
        // (Since id_gen 0.6.0.)
        if !epochs::catalog_present(
            &client,
            "SELECT pg_catalog.to_regprocedure('id_gen.shard_routing_snapshot()') IS NOT NULL",
        )? {
            return Ok(vec![]);
        }
        let mut out = vec![];
        for r in client.select("SELECT * FROM id_gen.shard_routing_snapshot()", None, &[])? {
            out.push((
                r.get::<i64>(1)?.unwrap_or(0),
                r.get::<pg_sys::Oid>(2)?.map_or(0, |o| o.to_u32()),
                r.get::<pg_sys::Oid>(3)?.map_or(0, |o| o.to_u32()),
                r.get::<i32>(4)?.unwrap_or(-1),
                r.get::<i32>(5)?.unwrap_or(-1),
            ));
        }
        Ok(out)
    });
    let rows = rows.unwrap_or_else(|e| crate::errors::spi_failed(e));
    for (version, parent, part, lower, upper) in rows {
        state.version = version;
        if parent == 0 {
            continue;
        }
        let parent = pg_sys::Oid::from(parent);
        state.relids.insert(parent);
        if part != 0 {
            state.relids.insert(pg_sys::Oid::from(part));
        }
        let table = match state.tables.iter_mut().find(|t| t.parent == parent) {
            Some(t) => t,
            None => {
                state.tables.push(DistributedTable {
                    parent,
                    partitions: vec![],
                    unranged: vec![],
                });
                state.tables.last_mut().expect("just pushed")
            }
        };
        // A tombstone (DEFAULT partition) has no gene range.
        if part != 0 && (0..=65535).contains(&lower) && (0..=65535).contains(&upper) {
            table.partitions.push(Partition {
                lower: lower as u16,
                upper: upper as u16,
                relid: pg_sys::Oid::from(part),
            });
        } else if part != 0 {
            table.unranged.push(pg_sys::Oid::from(part));
        }
    }
    state
}

/// Called by the shard functions that attach or detach partitions or store a pushed
/// route version: every backend reloads its view once this transaction commits.
#[pg_extern(volatile, parallel_unsafe)]
fn shard_routing_changed() {
    epochs::bump_at_commit(Epoch::ShardRouting);
    CACHE.with(|c| *c.borrow_mut() = None);
}
