//! Owner-affine IDs (docs/design.md §2–3, seed 000 "业务全局ID"): `gene_order_id`, its
//! byte form, the `fill_gene_id` trigger, and the gene-in-the-low-bits ids of seed 003
//! (`gene_mod_id`). Routing lives in `routing.rs`.
//!
//! Invariants: the gene inside an ID is always `shard_gene(owner)`; a value that no
//! longer fits 47 bits is an ERROR for the bigint form (never truncated or negative);
//! with `counters = N`, the counter group is a function of the gene, so the same owner
//! always draws from the same chain and values stay increasing per gene.

use crate::errors::{layout_error, raise, raise_core, Code};
use crate::segments;
use id_gen_core::{gene, layout};
use pgrx::prelude::*;

fn next_for_gene(seq: &str, g: u16) -> i64 {
    segments::take_one(seq, Some(g)).0
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

const USAGE: &str = "Create it as BEFORE INSERT OR UPDATE ... FOR EACH ROW EXECUTE FUNCTION id_gen.fill_gene_id('id_column', 'owner_column', 'sequence_name').";

/// The trigger's arguments, checked.
struct FillSpec<'a> {
    table: String,
    id_col: &'a str,
    owner_col: &'a str,
    seq: &'a str,
    id_is_bigint: bool,
    owner_type: pg_sys::Oid,
}

fn fill_spec<'a>(
    trigger: &'a pgrx::PgTrigger<'a>,
    args: &'a [String],
    new: &PgHeapTuple<'_, impl WhoAllocated>,
) -> FillSpec<'a> {
    let table = trigger.table_name().unwrap_or_default();
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
        trigger_error(
            format!("id_gen.fill_gene_id on \"{table}\" must be a BEFORE INSERT [OR UPDATE] ... FOR EACH ROW trigger"),
            USAGE,
        );
    }
    let column_type = |col: &str| -> pg_sys::Oid {
        match new.get_attribute_by_name(col) {
            Some((_, att)) => att.atttypid,
            None => trigger_error(
                format!("id_gen.fill_gene_id: table \"{table}\" has no column \"{col}\""),
                USAGE,
            ),
        }
    };
    let (id_col, owner_col, seq) = (args[0].as_str(), args[1].as_str(), args[2].as_str());
    let id_type = column_type(id_col);
    let owner_type = column_type(owner_col);
    if id_type != pg_sys::INT8OID && id_type != pg_sys::BYTEAOID {
        trigger_error(
            format!("id_gen.fill_gene_id: id column \"{id_col}\" of \"{table}\" must be bigint or bytea"),
            "Use bigint for the 64-bit form, bytea for ids that may pass 2^47-1.",
        );
    }
    FillSpec {
        table,
        id_col,
        owner_col,
        seq,
        id_is_bigint: id_type == pg_sys::INT8OID,
        owner_type,
    }
}

/// The gene inside the row's id, or `None` when the id is NULL.
fn id_gene(
    spec: &FillSpec,
    row: &PgHeapTuple<'_, impl WhoAllocated>,
) -> Result<Option<u16>, FillError> {
    Ok(if spec.id_is_bigint {
        match row.get_by_name::<i64>(spec.id_col)? {
            Some(id) => Some(layout::gene_of(id).unwrap_or_else(|e| layout_error(e))),
            None => None,
        }
    } else {
        match row.get_by_name::<&[u8]>(spec.id_col)? {
            Some(id) => Some(
                layout::decode_bytes(id)
                    .unwrap_or_else(|e| layout_error(e))
                    .0,
            ),
            None => None,
        }
    })
}

/// The gene of the row's owner (23502 when the owner is NULL).
fn owner_gene(spec: &FillSpec, row: &PgHeapTuple<'_, impl WhoAllocated>) -> Result<u16, FillError> {
    let null_owner = || -> ! {
        raise(
            Code::ERRCODE_NOT_NULL_VIOLATION,
            format!("id_gen.fill_gene_id: owner column \"{}\" of \"{}\" is NULL; cannot derive the shard gene", spec.owner_col, spec.table),
            Some("Every row needs its owner to get an owner-affine id."),
        )
    };
    let col = spec.owner_col;
    Ok(match spec.owner_type {
        t if t == pg_sys::INT8OID => {
            gene::gene_of_i64(row.get_by_name::<i64>(col)?.unwrap_or_else(|| null_owner()))
        }
        t if t == pg_sys::INT4OID => {
            gene::gene_of_i64(row.get_by_name::<i32>(col)?.unwrap_or_else(|| null_owner()) as i64)
        }
        t if t == pg_sys::INT2OID => {
            gene::gene_of_i64(row.get_by_name::<i16>(col)?.unwrap_or_else(|| null_owner()) as i64)
        }
        t if t == pg_sys::TEXTOID || t == pg_sys::VARCHAROID => gene::gene_of_str(
            &row.get_by_name::<String>(col)?
                .unwrap_or_else(|| null_owner()),
        ),
        t if t == pg_sys::UUIDOID => gene::gene_of_bytes(
            row.get_by_name::<pgrx::Uuid>(col)?
                .unwrap_or_else(|| null_owner())
                .as_bytes(),
        ),
        t if t == pg_sys::BYTEAOID => gene::gene_of_bytes(
            row.get_by_name::<&[u8]>(col)?
                .unwrap_or_else(|| null_owner()),
        ),
        _ => trigger_error(
            format!(
                "id_gen.fill_gene_id: owner column \"{col}\" of \"{}\" has an unsupported type",
                spec.table
            ),
            "Owner columns may be bigint, integer, smallint, text, varchar, uuid or bytea.",
        ),
    })
}

/// `BEFORE INSERT OR UPDATE ... FOR EACH ROW EXECUTE FUNCTION id_gen.fill_gene_id(
/// 'id_col', 'owner_col', 'sequence')`. DEFAULT expressions cannot read other columns,
/// hence a trigger. The id column may be bigint (64-bit form) or bytea (8/16-byte form);
/// the owner column bigint, integer, smallint (hashed as bigint), text, varchar, uuid or
/// bytea.
///
/// * INSERT: fills a NULL id from the owner; an explicit id (a restore) is kept.
/// * UPDATE: an id is never re-issued. A NULL id is filled as on INSERT. An UPDATE that
///   changes the owner to one of another gene while keeping the id is refused (23514):
///   the id would no longer say where the row lives. Give the row a new id (SET id =
///   NULL) or keep the owner.
#[pg_trigger]
fn fill_gene_id<'a>(
    trigger: &'a pgrx::PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, impl WhoAllocated>>, FillError> {
    let args = trigger.extra_args()?;
    let Some(new) = trigger.new() else {
        trigger_error(
            format!(
                "id_gen.fill_gene_id on \"{}\" must fire on INSERT or UPDATE",
                trigger.table_name().unwrap_or_default()
            ),
            USAGE,
        )
    };
    let mut new = new.into_owned();
    let spec = fill_spec(trigger, &args, &new);
    let Some(id_g) = id_gene(&spec, &new)? else {
        let g = owner_gene(&spec, &new)?;
        let value = next_for_gene(spec.seq, g);
        if spec.id_is_bigint {
            new.set_by_name(spec.id_col, compose64(spec.seq, g, value))?;
        } else {
            new.set_by_name(spec.id_col, compose_bytes(g, value))?;
        }
        return Ok(Some(new));
    };
    if let Some(old) = trigger.old() {
        // UPDATE of a row that keeps an id: the owner may change only within the gene.
        let owner_g = owner_gene(&spec, &new)?;
        let old_owner_g = owner_gene(&spec, &old)?;
        if owner_g != old_owner_g && owner_g != id_g {
            raise(
                Code::ERRCODE_CHECK_VIOLATION,
                format!(
                    "id_gen.fill_gene_id: the new owner of this row of \"{}\" has shard gene {owner_g}, its id carries gene {id_g}",
                    spec.table
                ),
                Some("An owner-affine id says where its row lives. Set the id column to NULL in the same UPDATE to give the row a new id, or keep the owner."),
            );
        }
    }
    Ok(Some(new))
}

fn genemod_error(e: id_gen_core::genemod::GeneModError) -> ! {
    raise_core(e.sqlstate(), &e, e.hint().as_deref())
}

/// Gene in the low bits (seed 003, 基因法): `(next value << shard_bits) | owner mod
/// 2^shard_bits`, so that `id % 2^k = owner % 2^k` for every id of a non-negative owner
/// and tables sharded by `id % 2^k` keep an owner's rows together. Unique per sequence.
#[pg_extern(volatile, strict, parallel_unsafe)]
fn gene_mod_id(seq: &str, owner: i64, shard_bits: i32) -> i64 {
    let bits = u32::try_from(shard_bits).unwrap_or(u32::MAX);
    // Check the bits before drawing a value, so a bad call consumes nothing.
    id_gen_core::genemod::max_seq(bits).unwrap_or_else(|e| genemod_error(e));
    let value = segments::take_one(seq, None).0;
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
