//! The backend's cached views of this shard's routing: the route version the coordinator
//! last pushed (`id_gen.shard_route_state`) and, for every distributed table in
//! `id_gen.shard_tables`, the partitions that hold its gene ranges and its tombstone
//! (`ShardState`, for the join check); and the version with the tables alone
//! (`VersionView`, for the version check of every transaction and for claims: one row per
//! table to load), with `partition_holding_gene`, which finds a gene's partition in
//! PostgreSQL's partition descriptor.
//!
//! Also `id_gen.partition_gene_range(pg_node_tree)`: a partition's gene range, decoded from
//! its bound without deparsing it (the shard's snapshot function calls it per partition).
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
use id_gen_core::layout::SEQ_BITS;
use pgrx::prelude::*;
use std::cell::RefCell;
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

/// What this backend knows of the shard's routing.
pub struct ShardState {
    epoch: u64,
    pub version: i64,
    /// By schema and table name.
    pub tables: Vec<DistributedTable>,
}

thread_local! {
    static CACHE: RefCell<Option<Rc<ShardState>>> = const { RefCell::new(None) };
    static VERSION_CACHE: RefCell<Option<Rc<VersionView>>> = const { RefCell::new(None) };
}

/// What the version check of every transaction needs: the route version and the
/// distributed tables, without their partitions (a shard with thousands of ranges loads
/// one row per table, not one per partition, after each change).
pub struct VersionView {
    epoch: u64,
    pub version: i64,
    /// The distributed tables by schema and name (the order in which claims lock them).
    pub tables: Vec<pg_sys::Oid>,
    /// Partitions asked about, and whether their parent is in `tables`.
    partitions: RefCell<std::collections::HashMap<pg_sys::Oid, bool>>,
}

/// The current view; `fresh` forces a reload.
pub fn current(fresh: bool) -> Rc<ShardState> {
    cached(&CACHE, fresh, |s| s.epoch, load)
}

/// The current version view; `fresh` forces a reload.
pub fn version_view(fresh: bool) -> Rc<VersionView> {
    cached(&VERSION_CACHE, fresh, |v| v.epoch, load_version_view)
}

/// A view kept per `ShardRouting` epoch in `cell`, loaded by `load` when the epoch moved.
pub(super) fn cached<T>(
    cell: &'static std::thread::LocalKey<RefCell<Option<Rc<T>>>>,
    fresh: bool,
    epoch_of: impl Fn(&T) -> u64,
    load: impl Fn(u64) -> T,
) -> Rc<T> {
    let epoch = epochs::current(Epoch::ShardRouting);
    if !fresh && epoch != 0 {
        if let Some(s) = cell.with(|c| c.borrow().clone()) {
            if epoch_of(&s) == epoch {
                return s;
            }
        }
    }
    // SAFETY: reading backend globals.
    if unsafe { pg_sys::IsInParallelMode() } {
        // No new snapshot may be taken in parallel mode (a worker; a statement nested in a
        // parallel plan): the view is loaded under the statement's own, which may be old
        // (REPEATABLE READ). A parallel worker runs that one statement and exits, so it
        // keeps it (a scan through a view of owned rows would otherwise load it per row);
        // elsewhere it serves this caller only and is not cached.
        let loaded = Rc::new(super::quietly(|| load(epoch)));
        // SAFETY: reading a backend global.
        if unsafe { pg_sys::ParallelWorkerNumber >= 0 } {
            cell.with(|c| *c.borrow_mut() = Some(loaded.clone()));
        }
        return loaded;
    }
    let loaded = Rc::new(super::quietly(|| {
        epochs::with_latest_snapshot(|| load(epoch))
    }));
    cell.with(|c| *c.borrow_mut() = Some(loaded.clone()));
    loaded
}

impl VersionView {
    pub fn loaded_at_epoch(&self) -> u64 {
        self.epoch
    }

    /// Whether `relid` is a distributed table of this shard or one of its partitions (a
    /// partition's parent is looked up once per view).
    pub fn is_distributed(&self, relid: pg_sys::Oid) -> bool {
        if self.tables.contains(&relid) {
            return true;
        }
        // SAFETY: a syscache lookup by oid inside a transaction.
        if !unsafe { pg_sys::get_rel_relispartition(relid) } {
            return false;
        }
        if let Some(&known) = self.partitions.borrow().get(&relid) {
            return known;
        }
        let parent = super::quietly(|| {
            Spi::get_one_with_args::<pg_sys::Oid>(
                "SELECT i.inhparent FROM pg_catalog.pg_inherits i WHERE i.inhrelid OPERATOR(pg_catalog.=) $1",
                &[relid.into()],
            )
        })
        .unwrap_or_else(|e| crate::errors::spi_failed(e));
        let known = parent.is_some_and(|p| self.tables.contains(&p));
        self.partitions.borrow_mut().insert(relid, known);
        known
    }
}

/// The partition of the distributed table `parent` whose range holds the first id of
/// `gene`, found in the parent's partition descriptor (PostgreSQL's own, which its planner
/// builds and keeps in the relcache): a binary search, whatever the number of partitions.
/// None when the gene falls in the DEFAULT partition (the tombstone), in no partition, or
/// the table is gone or not range-partitioned: this shard does not own the gene there. The
/// key is the bigint id (a shard table is `PARTITION BY RANGE (id)`, made by id_gen from a
/// bigint id column: `distribute_table` refuses other types).
///
/// # Safety
/// Inside a transaction. The answer is as of the relcache: current after the caller has
/// locked `parent` (a lock processes pending invalidations), a hint otherwise.
pub unsafe fn partition_holding_gene(parent: pg_sys::Oid, gene: u16) -> Option<pg_sys::Oid> {
    let key = (gene as i64) << SEQ_BITS;
    // SAFETY: the relcache entry is held open (reference counted) until RelationClose; the
    // descriptor and its bound info live in the entry's memory and stay valid while it is
    // open (PostgreSQL keeps a rebuilt entry's old descriptor until then); every index
    // read is below the array's length (ndatums datums, ndatums + 1 indexes for a range
    // bound, nparts oids).
    unsafe {
        let rel = pg_sys::RelationIdGetRelation(parent);
        if rel.is_null() {
            return None;
        }
        let found = (|| {
            if (*(*rel).rd_rel).relkind as u8 != pg_sys::RELKIND_PARTITIONED_TABLE {
                return None;
            }
            let desc = pg_sys::RelationGetPartitionDesc(rel, false);
            if desc.is_null() || (*desc).boundinfo.is_null() {
                return None;
            }
            let bound = (*desc).boundinfo;
            if (*bound).strategy as u8 != b'r' {
                return None;
            }
            // The greatest bound <= key (-1: none), as PostgreSQL's tuple routing finds it;
            // the partition it begins is indexes[that + 1] (-1: a gap, the DEFAULT).
            let below_or_at = |i: usize| -> bool {
                let kind = *(*(*bound).kind.add(i));
                match kind {
                    pg_sys::PartitionRangeDatumKind::PARTITION_RANGE_DATUM_MINVALUE => true,
                    pg_sys::PartitionRangeDatumKind::PARTITION_RANGE_DATUM_MAXVALUE => false,
                    _ => (*(*(*bound).datums.add(i))).value() as i64 <= key,
                }
            };
            let (mut lo, mut hi) = (0usize, (*bound).ndatums.max(0) as usize);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if below_or_at(mid) {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            // lo = the number of bounds <= key, so the greatest one is lo - 1.
            let index = *(*bound).indexes.add(lo);
            (index >= 0 && index < (*desc).nparts).then(|| *(*desc).oids.add(index as usize))
        })();
        pg_sys::RelationClose(rel);
        found
    }
}

fn load_version_view(epoch: u64) -> VersionView {
    let rows: Result<Option<Vec<(i64, u32)>>, pgrx::spi::Error> = Spi::connect(|client| {
        // (Since id_gen 0.7.5; before, the whole view says the same.)
        if !epochs::catalog_present(
            &client,
            "SELECT pg_catalog.to_regprocedure('id_gen.shard_routing_tables()') IS NOT NULL",
        )? {
            return Ok(None);
        }
        let mut out = vec![];
        for r in client.select("SELECT * FROM id_gen.shard_routing_tables()", None, &[])? {
            out.push((
                r.get::<i64>(1)?.unwrap_or(0),
                r.get::<pg_sys::Oid>(2)?.map_or(0, |o| o.to_u32()),
            ));
        }
        Ok(Some(out))
    });
    let Some(rows) = rows.unwrap_or_else(|e| crate::errors::spi_failed(e)) else {
        let full = load(epoch);
        return VersionView {
            epoch,
            version: full.version,
            tables: full.tables.iter().map(|t| t.parent).collect(),
            partitions: RefCell::default(),
        };
    };
    let mut view = VersionView {
        epoch,
        version: 0,
        tables: vec![],
        partitions: RefCell::default(),
    };
    for (version, parent) in rows {
        view.version = version;
        if parent != 0 {
            view.tables.push(pg_sys::Oid::from(parent));
        }
    }
    view
}

/// The epoch as it is now (claims compare it after taking their locks).
pub fn epoch_now() -> u64 {
    epochs::current(Epoch::ShardRouting)
}

fn load(epoch: u64) -> ShardState {
    let mut state = ShardState {
        epoch,
        version: 0,
        tables: vec![],
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
/// route version: every backend reloads its view once this transaction commits. This
/// backend drops its copies at once (the rest of the transaction sees its own change) and
/// again if the transaction or a subtransaction of it aborts (`ROLLBACK TO SAVEPOINT`, an
/// exception block: what it loaded meanwhile may have seen a change that never was, and
/// the epoch has not moved).
#[pg_extern(volatile, parallel_unsafe)]
fn shard_routing_changed() {
    epochs::bump_at_commit(Epoch::ShardRouting);
    forget_all();
    pgrx::register_xact_callback(pgrx::PgXactCallbackEvent::Abort, forget_all);
    pgrx::register_subxact_callback(pgrx::PgSubXactCallbackEvent::AbortSub, |_, _| forget_all());
}

fn forget_all() {
    CACHE.with(|c| *c.borrow_mut() = None);
    VERSION_CACHE.with(|c| *c.borrow_mut() = None);
    super::owned_ranges::forget();
}

/// The genes `[lower, upper]` of a shard table's range partition, from its bound as
/// `pg_class.relpartbound` stores it: `FROM (<a>) TO (<b>)` gives `a >> 47 .. (b >> 47) - 1`,
/// `TO (MAXVALUE)` an upper gene of 65535. NULL for anything else (a DEFAULT partition, a
/// bound from MINVALUE, more than one column, a key that is not a bigint): what
/// `id_gen.shard_routing_snapshot()` counts as a partition without a gene range. It decodes
/// the node tree instead of deparsing it: at 2,048 partitions a backend's first view of a
/// shard took 180-230 ms with `pg_get_expr` and a pattern match. The argument is a
/// `pg_node_tree`, a type whose values only PostgreSQL makes (its input function refuses
/// text), so no caller can hand the parser a string of its own; and it is the value of the
/// row the caller read, under the caller's snapshot (not the syscache's copy).
#[pg_extern(
    immutable,
    strict,
    parallel_safe,
    sql = r#"
CREATE  FUNCTION id_gen."partition_gene_range"("bound" pg_node_tree) RETURNS INT[]
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'partition_gene_range_wrapper';
"#
)]
fn partition_gene_range(bound: &str) -> Option<Vec<i32>> {
    let bound = std::ffi::CString::new(bound).ok()?;
    // SAFETY: the text of a pg_node_tree (see above), parsed by PostgreSQL's reader; only
    // nodes whose tags were checked are read.
    unsafe {
        let spec = pg_sys::stringToNode(bound.as_ptr()) as *mut pg_sys::PartitionBoundSpec;
        if spec.is_null()
            || (*spec).type_ != pg_sys::NodeTag::T_PartitionBoundSpec
            || (*spec).is_default
            || (*spec).strategy as u8 != b'r'
        {
            return None;
        }
        let lower_gene = match range_datum((*spec).lowerdatums)? {
            RangeDatum::Value(v) => (v >> SEQ_BITS) as i32,
            RangeDatum::MinValue | RangeDatum::MaxValue => return None,
        };
        let upper_gene = match range_datum((*spec).upperdatums)? {
            RangeDatum::Value(v) => ((v >> SEQ_BITS) - 1) as i32,
            RangeDatum::MaxValue => 65535,
            RangeDatum::MinValue => return None,
        };
        Some(vec![lower_gene, upper_gene])
    }
}

enum RangeDatum {
    MinValue,
    Value(i64),
    MaxValue,
}

/// The one datum of a single-column range bound, if it is MINVALUE, MAXVALUE or a bigint.
///
/// # Safety
/// `list` is NIL or a List of PartitionRangeDatum (a PartitionBoundSpec's bound).
unsafe fn range_datum(list: *mut pg_sys::List) -> Option<RangeDatum> {
    // SAFETY: the caller's list; each node's tag is checked before it is read as that node.
    unsafe {
        let items = crate::pg_list::list_pointers(list);
        let [item] = items.as_slice() else {
            return None;
        };
        let datum = *item as *mut pg_sys::PartitionRangeDatum;
        if datum.is_null() || (*datum).type_ != pg_sys::NodeTag::T_PartitionRangeDatum {
            return None;
        }
        match (*datum).kind {
            pg_sys::PartitionRangeDatumKind::PARTITION_RANGE_DATUM_MINVALUE => {
                Some(RangeDatum::MinValue)
            }
            pg_sys::PartitionRangeDatumKind::PARTITION_RANGE_DATUM_MAXVALUE => {
                Some(RangeDatum::MaxValue)
            }
            _ => {
                let value = (*datum).value as *mut pg_sys::Const;
                if value.is_null()
                    || (*value).xpr.type_ != pg_sys::NodeTag::T_Const
                    || (*value).consttype != pg_sys::INT8OID
                    || (*value).constisnull
                {
                    return None;
                }
                Some(RangeDatum::Value((*value).constvalue.value() as i64))
            }
        }
    }
}
