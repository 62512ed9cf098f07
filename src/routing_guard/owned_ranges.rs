//! Ownership as data: the gene ranges this shard owns of each distributed table, as
//! `id_gen.shard_tables.gene_ranges` records them, cached per backend as one bitmap of the
//! genes per table, and those of them a move has fenced for its cut-over
//! (`shard_tables.fenced_ranges`, since 0.7.9). `id_gen.shard_owns(regclass, bigint)` answers
//! whether an id's gene is owned (the view of owned rows shows fenced rows too),
//! `id_gen.shard_fenced(regclass, bigint)` whether it is fenced (writes, claims and lookups
//! by id get IG002); `id_gen.shard_owned_ranges(regclass)` shows what the backend holds.
//!
//! This is the ownership test of the shard layout by ownership (docs/design.md §12): a
//! shard's table kept as one relation, read through a view of the rows whose genes the
//! shard owns. Measured there against the alternatives (a correlated subquery, a join with
//! a table of owned genes, a multirange): one epoch check and one bit per call, with no
//! per-statement set-up, whatever the number of ranges.
//!
//! Invariants:
//!   * The answer is as of the `ShardRouting` epoch: every function that changes
//!     `shard_tables.gene_ranges` calls `id_gen.shard_routing_changed()`, which drops this
//!     backend's copy at once (its own uncommitted change counts in the rest of its
//!     transaction) and moves the epoch at commit (every other backend reloads on its next
//!     call). Loading runs SQL under the latest snapshot (`shard_state::cached`), never
//!     under a lock of id_gen's shared memory.
//!   * A table that is not distributed here, a negative id, and a gene in no recorded range
//!     are not owned. A NULL argument gives NULL (STRICT). A table laid out by ownership is
//!     known by its table of rows (`shard_tables.rows_table`), which its view, its trigger
//!     and the guard's scans name; a partitioned one by its partitioned table.
//!   * The test itself is `id_gen_core::owned_genes` (sorted, merged ranges and a
//!     bitmap of the 65,536 genes: one bit per test), checked there against a linear scan.

use super::shard_state;
use id_gen_core::owned_genes::OwnedGenes;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// The owned genes of every distributed table.
pub struct OwnedRanges {
    epoch: u64,
    by_table: HashMap<pg_sys::Oid, OwnedGenes>,
    /// Tables with fenced genes: those genes, and the owned ones without them.
    fences: HashMap<pg_sys::Oid, Fence>,
    /// A table laid out by ownership: the view of its owned rows, by its table of rows.
    views: HashMap<pg_sys::Oid, pg_sys::Oid>,
}

/// The genes of a table a move has fenced, and the owned genes that stay usable.
struct Fence {
    fenced: OwnedGenes,
    usable: OwnedGenes,
}

thread_local! {
    static CACHE: RefCell<Option<Rc<OwnedRanges>>> = const { RefCell::new(None) };
}

/// Drops this backend's copy (called with every change of the shard's routing).
pub fn forget() {
    CACHE.with(|c| *c.borrow_mut() = None);
}

/// The backend's copy, loaded if the shard's routing changed since.
pub fn current() -> Rc<OwnedRanges> {
    shard_state::cached(&CACHE, false, |o| o.epoch, load)
}

impl OwnedRanges {
    /// The owned genes of the distributed table `rel` (None: not distributed here).
    pub fn of(&self, rel: pg_sys::Oid) -> Option<&OwnedGenes> {
        self.by_table.get(&rel)
    }

    /// The owned genes of `rel` that writes, claims and lookups by id may use: the owned
    /// ones but those a move has fenced (None: not distributed here).
    pub fn usable_of(&self, rel: pg_sys::Oid) -> Option<&OwnedGenes> {
        match self.fences.get(&rel) {
            Some(f) => Some(&f.usable),
            None => self.by_table.get(&rel),
        }
    }

    /// The genes of `rel` a move has fenced (None: none).
    pub fn fenced_of(&self, rel: pg_sys::Oid) -> Option<&OwnedGenes> {
        self.fences.get(&rel).map(|f| &f.fenced)
    }

    /// Whether a move has fenced `gene` of `rel`.
    pub fn is_fenced(&self, rel: pg_sys::Oid, gene: u16) -> bool {
        self.fences
            .get(&rel)
            .is_some_and(|f| f.fenced.contains_gene(gene))
    }

    /// The view of the owned rows of the table of rows `rel` (a table laid out by ownership).
    pub fn view_of(&self, rel: pg_sys::Oid) -> Option<pg_sys::Oid> {
        self.views.get(&rel).copied()
    }
}

fn load(epoch: u64) -> OwnedRanges {
    // One plain read of the catalog table: the names are resolved by the syscache and the
    // ranges decoded here, because a new backend's first query that joins pg_class or calls
    // the range functions cost it 2-3 ms more (what a pooler's fresh connection pays). The
    // ranges are decoded from the array as it is (`genes_of_ranges`): pgrx's conversion of
    // each element to a Range took about 3.7 us, 7.5 ms for a table of 2,048 ranges.
    type Row = (String, String, String, Vec<(u16, u16)>, Vec<(u16, u16)>);
    // A table laid out by ownership is known by its table of rows (since 0.7.8; a catalog of
    // 0.7.7, before its update, has no such column).
    // Fences since 0.7.9.
    let has_column = |name: &std::ffi::CStr| {
        relation_named("id_gen", "shard_tables").is_some_and(|rel| {
            // SAFETY: a syscache lookup of a column by name inside a transaction.
            unsafe { pg_sys::get_attnum(rel, name.as_ptr()) > 0 }
        })
    };
    let query = match (has_column(c"rows_table"), has_column(c"fenced_ranges")) {
        (true, true) => {
            "SELECT t.schema_name::pg_catalog.text, \
                    COALESCE(t.rows_table, t.table_name)::pg_catalog.text, \
                    t.table_name::pg_catalog.text, t.gene_ranges, t.fenced_ranges \
             FROM id_gen.shard_tables t"
        }
        (true, false) => {
            "SELECT t.schema_name::pg_catalog.text, \
                    COALESCE(t.rows_table, t.table_name)::pg_catalog.text, \
                    t.table_name::pg_catalog.text, t.gene_ranges, NULL::pg_catalog.int4range[] \
             FROM id_gen.shard_tables t"
        }
        _ => {
            "SELECT t.schema_name::pg_catalog.text, t.table_name::pg_catalog.text, \
                    t.table_name::pg_catalog.text, t.gene_ranges, NULL::pg_catalog.int4range[] \
             FROM id_gen.shard_tables t"
        }
    };
    let rows: Result<Vec<Row>, pgrx::spi::Error> = Spi::connect(|client| {
        let mut out = vec![];
        let mut table = client.select(query, None, &[])?;
        while table.next().is_some() {
            let mut ranges = [vec![], vec![]];
            for (column, genes) in [4, 5].into_iter().zip(ranges.iter_mut()) {
                if let Some(datum) = table.get_datum_by_ordinal(column)? {
                    // SAFETY: columns 4 and 5 are shard_tables.gene_ranges and fenced_ranges,
                    // int4range[], read while the SPI connection that holds the row is open.
                    *genes = unsafe { genes_of_ranges(datum) };
                }
            }
            let [owned, fenced] = ranges;
            out.push((
                table.get::<String>(1)?.unwrap_or_default(),
                table.get::<String>(2)?.unwrap_or_default(),
                table.get::<String>(3)?.unwrap_or_default(),
                owned,
                fenced,
            ));
        }
        Ok(out)
    });
    let rows = rows.unwrap_or_else(|e| crate::errors::spi_failed(e));
    let mut by_table = HashMap::new();
    let mut views = HashMap::new();
    let mut fences = HashMap::new();
    for (schema, table, name, ranges, fenced) in rows {
        let Some(relid) = relation_named(&schema, &table) else {
            continue;
        };
        if name != table {
            if let Some(view) = relation_named(&schema, &name) {
                views.insert(relid, view);
            }
        }
        let owned = OwnedGenes::from_ranges(ranges);
        if !fenced.is_empty() {
            let fenced = OwnedGenes::from_ranges(fenced);
            let usable = owned.without(&fenced);
            fences.insert(relid, Fence { fenced, usable });
        }
        by_table.insert(relid, owned);
    }
    OwnedRanges {
        epoch,
        by_table,
        fences,
        views,
    }
}

/// The genes `lower ..= upper` of each recorded range of an int4range[], clipped to the genes
/// that exist; empty and unbounded ranges and NULL elements are left out.
///
/// # Safety
/// `datum` is a non-NULL int4range[] that stays valid during the call.
unsafe fn genes_of_ranges(datum: pg_sys::Datum) -> Vec<(u16, u16)> {
    // SAFETY: as the caller promises; the array's elements, their detoasting and
    // range_deserialize palloc in the current (SPI) memory context and read each element as
    // an int4range.
    unsafe {
        let typcache =
            pg_sys::lookup_type_cache(pg_sys::INT4RANGEOID, pg_sys::TYPECACHE_RANGE_INFO as i32);
        let mut out = vec![];
        for element in crate::pg_list::array_elements(datum, pg_sys::INT4RANGEOID) {
            let range =
                pg_sys::pg_detoast_datum(element.cast_mut_ptr()) as *const pg_sys::RangeType;
            let (mut lower, mut upper) =
                (pg_sys::RangeBound::default(), pg_sys::RangeBound::default());
            let mut empty = false;
            pg_sys::range_deserialize(typcache, range, &mut lower, &mut upper, &mut empty);
            if empty || lower.infinite || upper.infinite {
                continue;
            }
            let bound = |b: &pg_sys::RangeBound, step: i32| {
                let v = b.val.value() as i32;
                if b.inclusive {
                    Some(v)
                } else {
                    v.checked_add(step)
                }
            };
            let (Some(lo), Some(hi)) = (bound(&lower, 1), bound(&upper, -1)) else {
                continue;
            };
            let (lo, hi) = (lo.max(0), hi.min(65535));
            if lo <= hi {
                out.push((lo as u16, hi as u16));
            }
        }
        out
    }
}

/// The oid of the relation `schema.table`, if there is one (syscache lookups, no privilege
/// check: this only reads the catalog).
fn relation_named(schema: &str, table: &str) -> Option<pg_sys::Oid> {
    let schema = std::ffi::CString::new(schema).ok()?;
    let table = std::ffi::CString::new(table).ok()?;
    // SAFETY: syscache lookups inside a transaction with NUL-terminated names; missing_ok
    // makes an absent schema InvalidOid instead of an error.
    unsafe {
        let namespace = pg_sys::get_namespace_oid(schema.as_ptr(), true);
        if namespace == pg_sys::InvalidOid {
            return None;
        }
        let relid = pg_sys::get_relname_relid(table.as_ptr(), namespace);
        (relid != pg_sys::InvalidOid).then_some(relid)
    }
}

/// Whether this shard owns the gene of `id` in the distributed table `rel` (see the file's
/// header).
#[pg_extern(
    stable,
    strict,
    parallel_safe,
    sql = r#"
CREATE  FUNCTION id_gen."shard_owns"("rel" regclass, "id" bigint) RETURNS boolean
STABLE STRICT PARALLEL SAFE COST 1
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'shard_owns_wrapper';
"#
)]
fn shard_owns(rel: pg_sys::Oid, id: i64) -> bool {
    current().of(rel).is_some_and(|owned| owned.contains_id(id))
}

/// Whether a move has fenced the gene of `id` in the distributed table `rel` for its
/// cut-over (see the file's header).
#[pg_extern(
    stable,
    strict,
    parallel_safe,
    sql = r#"
CREATE  FUNCTION id_gen."shard_fenced"("rel" regclass, "id" bigint) RETURNS boolean
STABLE STRICT PARALLEL SAFE COST 1
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'shard_fenced_wrapper';
"#
)]
fn shard_fenced(rel: pg_sys::Oid, id: i64) -> bool {
    id >= 0 && current().is_fenced(rel, (id >> id_gen_core::layout::SEQ_BITS) as u16)
}

/// The owned ranges this backend holds for `rel`, as `{lower, upper}` gene pairs in order.
#[pg_extern(
    stable,
    strict,
    parallel_safe,
    sql = r#"
CREATE  FUNCTION id_gen."shard_owned_ranges"("rel" regclass) RETURNS TABLE ("lower_gene" integer, "upper_gene" integer)
STABLE STRICT PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'shard_owned_ranges_wrapper';
"#
)]
fn shard_owned_ranges(
    rel: pg_sys::Oid,
) -> TableIterator<'static, (name!(lower_gene, i32), name!(upper_gene, i32))> {
    let owned = current();
    let ranges: Vec<(i32, i32)> = owned
        .by_table
        .get(&rel)
        .map(|o| {
            o.ranges()
                .iter()
                .map(|&(l, u)| (l as i32, u as i32))
                .collect()
        })
        .unwrap_or_default();
    TableIterator::new(ranges)
}
