//! Owner-affine order IDs (DESIGN.md §2–3, seed 000 "业务全局ID"): `gene_order_id`,
//! its byte form, the `fill_gene_id` trigger, and the routing helpers that need Rust
//! (split/merge planning). Plain lookups (`route`, `route_owner`) are SQL functions in
//! `sql/finalize.sql`, where an index scan on `id_gen.shard_routes` does the work.
//!
//! Invariants: the gene inside an ID is always `shard_gene(owner)`; a value that no
//! longer fits 47 bits is an ERROR for the bigint form (never truncated or negative);
//! with `counters = N`, the counter group is a function of the gene, so the same owner
//! always draws from the same chain and values stay increasing per gene.

use crate::api_sequences::take;
use crate::errors::{layout_error, raise, Code};
use id_gen_core::routing::{RouteError, RouteTable};
use id_gen_core::{gene, layout};
use pgrx::prelude::*;

fn next_for_gene(seq: &str, g: u16) -> i64 {
    take(seq, Some(g), 1).0
}

fn compose64(seq: &str, g: u16, value: i64) -> i64 {
    if value as u64 > layout::MAX_SEQ64 {
        raise(
            Code::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            format!(
                "id_gen: sequence \"{seq}\" passed 2^47-1 ({value}); its ids no longer fit the 64-bit layout"
            ),
            Some("Switch the id column to bytea and use id_gen.gene_order_id_bytes, which returns the 16-byte form from here on."),
        );
    }
    layout::compose(g as i64, value).unwrap_or_else(|e| layout_error(e))
}

fn compose_bytes(g: u16, value: i64) -> Vec<u8> {
    layout::compose_bytes(g as i64, value as i128).unwrap_or_else(|e| layout_error(e))
}

/// `shard_gene(owner) << 47 | next value of seq`: all ids of one owner in one shard.
#[pg_extern(volatile, strict, parallel_unsafe, name = "gene_order_id")]
fn gene_order_id_bigint(seq: &str, owner: i64) -> i64 {
    let g = gene::gene_of_i64(owner);
    compose64(seq, g, next_for_gene(seq, g))
}

#[pg_extern(volatile, strict, parallel_unsafe, name = "gene_order_id")]
fn gene_order_id_text(seq: &str, owner: &str) -> i64 {
    let g = gene::gene_of_str(owner);
    compose64(seq, g, next_for_gene(seq, g))
}

#[pg_extern(volatile, strict, parallel_unsafe, name = "gene_order_id")]
fn gene_order_id_uuid(seq: &str, owner: pgrx::Uuid) -> i64 {
    let g = gene::gene_of_bytes(owner.as_bytes());
    compose64(seq, g, next_for_gene(seq, g))
}

/// Byte form: 8 bytes (big-endian bigint) while the value fits 47 bits, 16 bytes after.
#[pg_extern(volatile, strict, parallel_unsafe, name = "gene_order_id_bytes")]
fn gene_order_id_bytes_bigint(seq: &str, owner: i64) -> Vec<u8> {
    let g = gene::gene_of_i64(owner);
    compose_bytes(g, next_for_gene(seq, g))
}

#[pg_extern(volatile, strict, parallel_unsafe, name = "gene_order_id_bytes")]
fn gene_order_id_bytes_text(seq: &str, owner: &str) -> Vec<u8> {
    let g = gene::gene_of_str(owner);
    compose_bytes(g, next_for_gene(seq, g))
}

#[pg_extern(volatile, strict, parallel_unsafe, name = "gene_order_id_bytes")]
fn gene_order_id_bytes_uuid(seq: &str, owner: pgrx::Uuid) -> Vec<u8> {
    let g = gene::gene_of_bytes(owner.as_bytes());
    compose_bytes(g, next_for_gene(seq, g))
}

/// Errors of the trigger that pgrx reports (ours are raised directly with a SQLSTATE).
#[derive(Debug)]
pub struct FillError(String);

impl std::fmt::Display for FillError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "id_gen.fill_gene_id: {}", self.0)
    }
}

impl From<pgrx::PgTriggerError> for FillError {
    fn from(e: pgrx::PgTriggerError) -> Self {
        FillError(e.to_string())
    }
}

impl From<pgrx::datum::TryFromDatumError> for FillError {
    fn from(e: pgrx::datum::TryFromDatumError) -> Self {
        FillError(e.to_string())
    }
}

fn trigger_error(msg: String, hint: &str) -> ! {
    raise(Code::ERRCODE_INVALID_PARAMETER_VALUE, msg, Some(hint))
}

/// `BEFORE INSERT ... FOR EACH ROW EXECUTE FUNCTION id_gen.fill_gene_id('id_col',
/// 'owner_col', 'sequence')`: fills the id column from the owner column when it is NULL.
/// DEFAULT expressions cannot read other columns, hence a trigger. The id column may be
/// bigint (64-bit form) or bytea (8/16-byte form); the owner column bigint, integer,
/// smallint (hashed as bigint), text, varchar, uuid or bytea.
#[pg_trigger]
fn fill_gene_id<'a>(
    trigger: &'a pgrx::PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, impl WhoAllocated>>, FillError> {
    const USAGE: &str = "Create it as BEFORE INSERT ... FOR EACH ROW EXECUTE FUNCTION id_gen.fill_gene_id('id_column', 'owner_column', 'sequence_name').";
    let table = trigger.table_name().unwrap_or_default();
    let args = trigger.extra_args()?;
    if args.len() != 3 {
        trigger_error(
            format!(
                "id_gen.fill_gene_id on \"{table}\" needs 3 arguments, got {}",
                args.len()
            ),
            USAGE,
        );
    }
    let event = trigger.event();
    if !event.fired_before()
        || !event.fired_for_row()
        || !(event.fired_by_insert() || event.fired_by_update())
    {
        trigger_error(format!("id_gen.fill_gene_id on \"{table}\" must be a BEFORE INSERT ... FOR EACH ROW trigger"), USAGE);
    }
    let (id_col, owner_col, seq) = (&args[0], &args[1], &args[2]);
    let Some(new) = trigger.new() else {
        trigger_error(
            format!("id_gen.fill_gene_id on \"{table}\" must fire on INSERT"),
            USAGE,
        )
    };
    let mut new = new.into_owned();
    let column_type = |col: &str| -> pg_sys::Oid {
        match new.get_attribute_by_name(col) {
            Some((_, att)) => att.atttypid,
            None => trigger_error(
                format!("id_gen.fill_gene_id: table \"{table}\" has no column \"{col}\""),
                USAGE,
            ),
        }
    };
    let id_type = column_type(id_col);
    let owner_type = column_type(owner_col);
    if id_type != pg_sys::INT8OID && id_type != pg_sys::BYTEAOID {
        trigger_error(
            format!("id_gen.fill_gene_id: id column \"{id_col}\" of \"{table}\" must be bigint or bytea"),
            "Use bigint for the 64-bit form, bytea for ids that may pass 2^47-1.",
        );
    }
    // Only fill a missing id: an explicit id (e.g. from a restore) is kept.
    let id_present = if id_type == pg_sys::INT8OID {
        new.get_by_name::<i64>(id_col).ok().flatten().is_some()
    } else {
        new.get_by_name::<&[u8]>(id_col).ok().flatten().is_some()
    };
    if id_present {
        return Ok(Some(new));
    }
    let null_owner = || -> ! {
        raise(
            Code::ERRCODE_NOT_NULL_VIOLATION,
            format!("id_gen.fill_gene_id: owner column \"{owner_col}\" of \"{table}\" is NULL; cannot derive the shard gene"),
            Some("Every row needs its owner to get an owner-affine id."),
        )
    };
    let g = match owner_type {
        t if t == pg_sys::INT8OID => gene::gene_of_i64(new.get_by_name::<i64>(owner_col)?.unwrap_or_else(|| null_owner())),
        t if t == pg_sys::INT4OID => gene::gene_of_i64(new.get_by_name::<i32>(owner_col)?.unwrap_or_else(|| null_owner()) as i64),
        t if t == pg_sys::INT2OID => gene::gene_of_i64(new.get_by_name::<i16>(owner_col)?.unwrap_or_else(|| null_owner()) as i64),
        t if t == pg_sys::TEXTOID || t == pg_sys::VARCHAROID => {
            gene::gene_of_str(&new.get_by_name::<String>(owner_col)?.unwrap_or_else(|| null_owner()))
        }
        t if t == pg_sys::UUIDOID => {
            gene::gene_of_bytes(new.get_by_name::<pgrx::Uuid>(owner_col)?.unwrap_or_else(|| null_owner()).as_bytes())
        }
        t if t == pg_sys::BYTEAOID => gene::gene_of_bytes(new.get_by_name::<&[u8]>(owner_col)?.unwrap_or_else(|| null_owner())),
        _ => trigger_error(
            format!("id_gen.fill_gene_id: owner column \"{owner_col}\" of \"{table}\" has an unsupported type"),
            "Owner columns may be bigint, integer, smallint, text, varchar, uuid or bytea.",
        ),
    };
    let value = next_for_gene(seq, g);
    if id_type == pg_sys::INT8OID {
        new.set_by_name(id_col, compose64(seq, g, value))?;
    } else {
        new.set_by_name(id_col, compose_bytes(g, value))?;
    }
    Ok(Some(new))
}

fn route_error(e: RouteError) -> ! {
    let code = match e.sqlstate() {
        "55000" => Code::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "42704" => Code::ERRCODE_UNDEFINED_OBJECT,
        _ => Code::ERRCODE_INVALID_PARAMETER_VALUE,
    };
    raise(code, format!("id_gen: {e}"), Some(&e.hint()))
}

fn load_routes() -> RouteTable {
    let rows: Vec<(i64, String)> = Spi::connect(|client| {
        let t = client.select(
            "SELECT upper_gene, shard FROM id_gen.shard_routes",
            None,
            &[],
        )?;
        let mut rows = vec![];
        for r in t {
            rows.push((
                r.get::<i32>(1)?.unwrap_or(0) as i64,
                r.get::<String>(2)?.unwrap_or_default(),
            ));
        }
        Ok::<_, pgrx::spi::Error>(rows)
    })
    .unwrap_or_else(|e| raise(Code::ERRCODE_INTERNAL_ERROR, format!("id_gen: {e}"), None));
    RouteTable::from_rows(rows).unwrap_or_else(|e| route_error(e))
}

/// Validates a route before `set_route` stores it (the SQL wrapper does the upsert).
#[pg_extern(immutable, strict, parallel_safe)]
fn check_route(upper_gene: i32, shard: &str) -> bool {
    let upper =
        id_gen_core::routing::gene_from_i64(upper_gene as i64).unwrap_or_else(|e| route_error(e));
    id_gen_core::routing::validate_shard_name(shard, Some(upper))
        .unwrap_or_else(|e| route_error(e));
    true
}

type PlanRows = TableIterator<
    'static,
    (
        name!(lower_gene, i32),
        name!(upper_gene, i32),
        name!(shard, String),
    ),
>;

fn plan_rows(plan: Vec<(u16, u16, String)>) -> PlanRows {
    TableIterator::new(
        plan.into_iter()
            .map(|(lo, hi, s)| (lo as i32, hi as i32, s)),
    )
}

/// Proposes new gene ranges that split every range of `shard` into `into.len()` nearly
/// equal parts. Apply a plan with `id_gen.set_route(upper_gene, shard)` for each row.
#[pg_extern(stable, strict, parallel_safe)]
fn route_plan_split(
    shard: &str,
    into: Vec<String>,
) -> TableIterator<
    'static,
    (
        name!(lower_gene, i32),
        name!(upper_gene, i32),
        name!(shard, String),
    ),
> {
    plan_rows(
        load_routes()
            .plan_split(shard, &into)
            .unwrap_or_else(|e| route_error(e)),
    )
}

/// Proposes routes that move every range of `shards` to `into`, collapsing neighbours.
#[pg_extern(stable, strict, parallel_safe)]
fn route_plan_merge(
    shards: Vec<String>,
    into: &str,
) -> TableIterator<
    'static,
    (
        name!(lower_gene, i32),
        name!(upper_gene, i32),
        name!(shard, String),
    ),
> {
    plan_rows(
        load_routes()
            .plan_merge(&shards, into)
            .unwrap_or_else(|e| route_error(e)),
    )
}

fn genemod_error(e: id_gen_core::genemod::GeneModError) -> ! {
    crate::errors::raise_core(e.sqlstate(), &e, e.hint())
}

/// Gene in the low bits (seed 003, 基因法): `(next value << shard_bits) | owner mod
/// 2^shard_bits`, so that `id % 2^k = owner % 2^k` for every id of a non-negative owner
/// and tables sharded by `id % 2^k` keep an owner's rows together. Unique per sequence.
#[pg_extern(volatile, strict, parallel_unsafe)]
fn gene_mod_id(seq: &str, owner: i64, shard_bits: i32) -> i64 {
    let bits = u32::try_from(shard_bits).unwrap_or(u32::MAX);
    // Check the bits before drawing a value, so a bad call consumes nothing.
    id_gen_core::genemod::max_seq(bits).unwrap_or_else(|e| genemod_error(e));
    let value = take(seq, None, 1).0;
    id_gen_core::genemod::compose_mod_id(value, owner, bits).unwrap_or_else(|e| genemod_error(e))
}

/// The low `shard_bits` bits of an id made by `gene_mod_id` (the owner's remainder).
#[pg_extern(immutable, strict, parallel_safe)]
fn gene_mod_of(id: i64, shard_bits: i32) -> i64 {
    let bits = u32::try_from(shard_bits).unwrap_or(u32::MAX);
    id_gen_core::genemod::decode_mod_id(id, bits)
        .unwrap_or_else(|e| genemod_error(e))
        .1
}
