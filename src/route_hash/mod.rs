//! The coordinator's routing as a hash operator class (`id_gen.gene_route_ops`, made in
//! `sql/cluster/route_hash.sql`): its extended hash function maps a bigint id to the slot of
//! the shard its gene routes to (`id_gen.shard_routes` joined with `id_gen.shard_slots`), so
//! that a table `PARTITION BY HASH (id id_gen.gene_route_ops)` with one partition per shard
//! (`FOR VALUES WITH (MODULUS 1024, REMAINDER <slot>)`) is pruned and routed by PostgreSQL
//! itself: `WHERE id = <constant>` at planning, `WHERE id = $1` of a generic plan at executor
//! start, an INSERT or COPY row by tuple routing. The arithmetic is `id_gen_core::route_slots`.
//!
//! The function is declared IMMUTABLE, as PostgreSQL requires of a partition key's, but it
//! reads the route table. What keeps that sound:
//! - every change of `shard_routes` or `shard_slots` runs `route_hash_changed()` (a statement
//!   trigger): it invalidates the relcache entry of every table partitioned by this operator
//!   class, so a plan pruned at planning is re-planned once the change commits (locally at
//!   once), and bumps the `CoordinatorRoutes` epoch at commit;
//! - a backend keeps the slots under the epoch it read *before* loading them with the latest
//!   snapshot, so a cache is never newer-stamped than its content; in a transaction that
//!   changed the routes itself, and in parallel mode, nothing is cached (its own uncommitted
//!   routes must not outlive it, and no new snapshot may be taken in a worker).
//!
//! Invariant: a gene without a route, or routed to a shard without a slot, hashes to
//! `NO_SLOT`, which no partition has (an INSERT fails with 23514, a lookup finds nothing).

pub mod planner;

use crate::epochs::{self, Epoch};
use id_gen_core::route_slots::{partition_hash, RouteSlots, NO_SLOT};
use pgrx::prelude::*;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

thread_local! {
    static CACHE: RefCell<Option<(u64, Rc<RouteSlots>)>> = const { RefCell::new(None) };
    /// This transaction changed the routes (until it ends: nothing is cached meanwhile).
    static OWN_CHANGE: Cell<bool> = const { Cell::new(false) };
}

fn load() -> RouteSlots {
    let rows: Result<Vec<(i64, Option<i64>)>, pgrx::spi::Error> = Spi::connect(|client| {
        // (Since id_gen 0.7.3.)
        if !epochs::catalog_present(
            &client,
            "SELECT pg_catalog.to_regclass('id_gen.shard_slots') IS NOT NULL",
        )? {
            return Ok(vec![]);
        }
        // One row of two arrays: a row per route read through SPI cost a new backend about
        // 2 ms at 4,096 routes.
        let row = client
            .select(
                "SELECT pg_catalog.array_agg(r.upper_gene::pg_catalog.int8), \
                        pg_catalog.array_agg(s.slot::pg_catalog.int8) \
                 FROM id_gen.shard_routes r LEFT JOIN id_gen.shard_slots s ON s.shard = r.shard",
                None,
                &[],
            )?
            .first();
        let uppers = row.get::<Vec<Option<i64>>>(1)?.unwrap_or_default();
        let slots = row.get::<Vec<Option<i64>>>(2)?.unwrap_or_default();
        Ok(uppers
            .into_iter()
            .zip(slots)
            .map(|(upper, slot)| (upper.unwrap_or(-1), slot))
            .collect())
    });
    let rows = rows.unwrap_or_else(|e| crate::errors::spi_failed(e));
    RouteSlots::from_rows(rows).unwrap_or_else(|e| {
        crate::errors::raise_core(
            "55000",
            format!("the route table cannot be read as shard slots: {e}"),
            Some("Check id_gen.shard_routes and id_gen.shard_slots."),
        )
    })
}

/// The route slots as this backend may use them now.
fn current() -> Rc<RouteSlots> {
    let epoch = epochs::current(Epoch::CoordinatorRoutes);
    let own = OWN_CHANGE.with(|o| o.get());
    if epoch != 0 && !own {
        if let Some(s) = CACHE.with(|c| {
            c.borrow()
                .as_ref()
                .filter(|(e, _)| *e == epoch)
                .map(|(_, s)| s.clone())
        }) {
            return s;
        }
    }
    // SAFETY: reading a backend global.
    if unsafe { pg_sys::IsInParallelMode() } {
        return Rc::new(load());
    }
    let loaded = Rc::new(epochs::with_latest_snapshot(load));
    if epoch != 0 && !own {
        CACHE.with(|c| *c.borrow_mut() = Some((epoch, loaded.clone())));
    }
    loaded
}

/// Support function 2 of `id_gen.gene_route_ops`: the 64-bit hash that puts `id` into the
/// hash partition (modulus 1024) whose remainder is the slot of its shard. The seed is
/// ignored: only partitioning uses this operator class.
#[pg_extern(immutable, strict, parallel_safe)]
fn gene_route_hash_extended(id: i64, _seed: i64) -> i64 {
    partition_hash(current().slot_of_id(id)) as i64
}

/// Support function 1 of `id_gen.gene_route_ops` (a hash operator class must have one):
/// the slot itself.
#[pg_extern(immutable, strict, parallel_safe)]
fn gene_route_hash(id: i64) -> i32 {
    current().slot_of_id(id) as i32
}

/// The slot of the shard `id` routes to, as the coordinator's hash partitions see it now;
/// NULL when its gene has no route or its shard no slot.
#[pg_extern(stable, strict, parallel_safe)]
fn route_slot(id: i64) -> Option<i32> {
    let slot = current().slot_of_id(id);
    (slot != NO_SLOT).then_some(slot as i32)
}

/// Called by the statement triggers of `id_gen.shard_routes` and `id_gen.shard_slots`:
/// plans of the tables partitioned by `id_gen.gene_route_ops` are invalidated, this
/// transaction stops caching the slots, and every backend reloads them after it commits.
#[pg_extern(volatile, parallel_unsafe)]
fn route_hash_changed() {
    epochs::bump_at_commit(Epoch::CoordinatorRoutes);
    OWN_CHANGE.with(|o| o.set(true));
    CACHE.with(|c| *c.borrow_mut() = None);
    for event in [
        pgrx::PgXactCallbackEvent::Commit,
        pgrx::PgXactCallbackEvent::Abort,
    ] {
        pgrx::register_xact_callback(event, || {
            OWN_CHANGE.with(|o| o.set(false));
            CACHE.with(|c| *c.borrow_mut() = None);
        });
    }
    let parents: Vec<pg_sys::Oid> = Spi::connect(|client| {
        let mut out = vec![];
        for r in client.select(
            "SELECT p.partrelid FROM pg_catalog.pg_partitioned_table p \
             WHERE p.partstrat = 'h' AND EXISTS ( \
               SELECT FROM pg_catalog.pg_opclass c JOIN pg_catalog.pg_namespace n ON n.oid = c.opcnamespace \
               WHERE c.oid = ANY (p.partclass::pg_catalog.oid[]) AND c.opcname = 'gene_route_ops' AND n.nspname = 'id_gen')",
            None,
            &[],
        )? {
            if let Some(oid) = r.get::<pg_sys::Oid>(1)? {
                out.push(oid);
            }
        }
        Ok::<_, pgrx::spi::Error>(out)
    })
    .unwrap_or_else(|e| crate::errors::spi_failed(e));
    for relid in parents {
        // SAFETY: queues a relcache invalidation of an existing relation, sent at commit
        // (and applied locally at the next command counter increment).
        unsafe { pg_sys::CacheInvalidateRelcacheByRelid(relid) };
    }
}

/// The one slot that every gene of `low ..= high` routes to, if there is one and it is a
/// shard's.
pub fn single_slot(low: u16, high: u16) -> Option<u16> {
    current().single_slot(low, high)
}
