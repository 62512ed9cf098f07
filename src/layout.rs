//! SQL functions over the fixed ID layout and the shard gene (docs/design.md §2).
//!
//! All are IMMUTABLE, STRICT and PARALLEL SAFE, so they can be used in generated columns,
//! expression indexes and CHECK constraints. They are thin: the arithmetic lives in
//! `id_gen_core::{layout, gene}`; here we only convert SQL values and map errors.

use crate::errors::{layout_error, raise, Code};
use id_gen_core::{gene, layout};
use pgrx::prelude::*;

/// Shard gene of a bigint owner: its 8 bytes little-endian, hashed.
#[pg_extern(immutable, strict, parallel_safe, name = "shard_gene")]
fn shard_gene_bigint(owner: i64) -> i32 {
    gene::gene_of_i64(owner) as i32
}

/// Shard gene of a text owner: its UTF-8 bytes, unnormalised.
#[pg_extern(immutable, strict, parallel_safe, name = "shard_gene")]
fn shard_gene_text(owner: &str) -> i32 {
    gene::gene_of_str(owner) as i32
}

/// Shard gene of a uuid owner: its 16 raw bytes.
#[pg_extern(immutable, strict, parallel_safe, name = "shard_gene")]
fn shard_gene_uuid(owner: pgrx::Uuid) -> i32 {
    gene::gene_of_bytes(owner.as_bytes()) as i32
}

/// Shard gene of a bytea owner: its raw bytes.
#[pg_extern(immutable, strict, parallel_safe, name = "shard_gene")]
fn shard_gene_bytea(owner: &[u8]) -> i32 {
    gene::gene_of_bytes(owner) as i32
}

/// Shard gene stored in a 64-bit ID: `(id >> 47) & 0xFFFF`.
#[pg_extern(immutable, strict, parallel_safe, name = "shard_of")]
fn shard_of_bigint(id: i64) -> i32 {
    layout::gene_of(id).unwrap_or_else(|e| layout_error(e)) as i32
}

/// Shard gene of an ID in byte form: 8 bytes (64-bit form) or 16 bytes (overflow form).
#[pg_extern(immutable, strict, parallel_safe, name = "shard_of")]
fn shard_of_bytea(id: &[u8]) -> i32 {
    layout::decode_bytes(id)
        .unwrap_or_else(|e| layout_error(e))
        .0 as i32
}

/// Sequence part (low 47 bits) of a 64-bit ID.
#[pg_extern(immutable, strict, parallel_safe, name = "seq_of")]
fn seq_of_bigint(id: i64) -> i64 {
    layout::seq_of(id).unwrap_or_else(|e| layout_error(e))
}

/// Sequence part of an ID in byte form (numeric: the overflow form holds 111 bits).
#[pg_extern(immutable, strict, parallel_safe, name = "seq_of")]
fn seq_of_bytea(id: &[u8]) -> AnyNumeric {
    let (_, seq) = layout::decode_bytes(id).unwrap_or_else(|e| layout_error(e));
    AnyNumeric::from(seq)
}

/// `gene << 47 | seq` as bigint.
#[pg_extern(immutable, strict, parallel_safe)]
fn compose_id(gene: i32, seq: i64) -> i64 {
    layout::compose(gene as i64, seq).unwrap_or_else(|e| layout_error(e))
}

/// The byte form: 8 bytes while `seq < 2^47`, else the 16-byte overflow form.
#[pg_extern(immutable, strict, parallel_safe)]
fn compose_id_bytes(gene: i32, seq: AnyNumeric) -> Vec<u8> {
    let seq = match numeric_to_i128(&seq) {
        Ok(v) => v,
        Err(NotWhole) => raise(
            Code::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("id_gen: sequence value {seq} is not a whole number"),
            Some("The sequence part of an id is an integer."),
        ),
        Err(TooBig) => raise(
            Code::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            format!(
                "id_gen: sequence value {seq} is out of range (allowed: 0 .. {})",
                layout::MAX_SEQ128
            ),
            None,
        ),
    };
    layout::compose_bytes(gene as i64, seq).unwrap_or_else(|e| layout_error(e))
}

enum NumericProblem {
    NotWhole,
    TooBig,
}
use NumericProblem::{NotWhole, TooBig};

/// Whole numerics that fit i128 (`5.000` counts as whole). We refuse to round an ID, so
/// fractions, NaN and infinities are errors.
fn numeric_to_i128(n: &AnyNumeric) -> Result<i128, NumericProblem> {
    let text = n.to_string();
    let int = match text.split_once('.') {
        Some((int, frac)) if frac.bytes().all(|b| b == b'0') => int,
        Some(_) => return Err(NotWhole),
        None => text.as_str(),
    };
    if !int
        .trim_start_matches('-')
        .bytes()
        .all(|b| b.is_ascii_digit())
        || int.is_empty()
    {
        return Err(NotWhole);
    }
    int.parse().map_err(|_| TooBig)
}
