//! External order numbers (docs/design.md §4): `encode_order_no`/`decode_order_no` (128-bit,
//! a version-8 UUID, tamper-evident) and `encode_order_no64`/`decode_order_no64` (the
//! compact bigint form), plus the key-management functions.
//!
//! Why not the seed's recipe (AES-CTR with the shard as a fixed IV): every number of a
//! shard would be `seq XOR constant`, so two numbers reveal the distance of their
//! sequences and one known pair reveals the whole shard. Instead the sequence is
//! enciphered with FF1 (NIST SP 800-38G, AES-256), a tweakable permutation, tweaked by
//! (gene, key version); the gene stays in clear for routing. See `id_gen_core::cipher`.
//!
//! Invariants: decode never returns a wrong order — a number that fails the redundancy
//! check, names an unknown key version, or whose key does not unwrap is an ERROR.

pub mod keys;

use crate::errors::{layout_error, raise, spi_failed, Code};
use id_gen_core::cipher;
use id_gen_core::layout;
use keys::cipher_error;
use pgrx::prelude::*;

fn uuid_bytes(u: &pgrx::Uuid) -> [u8; 16] {
    let mut b = [0u8; 16];
    b.copy_from_slice(u.as_bytes());
    b
}

fn check_kv(key_version: i32) -> u8 {
    if !(1..=255).contains(&key_version) {
        raise(
            Code::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("id_gen: key version {key_version} is out of range (allowed: 1 .. 255)"),
            Some("Existing versions are listed in id_gen.order_no_keys."),
        );
    }
    key_version as u8
}

fn encode_parts(gene: u16, seq: u128) -> pgrx::Uuid {
    let Ok(seq) = u64::try_from(seq) else {
        raise(
            Code::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            format!("id_gen: sequence value {seq} is too large for an order number (at most 2^64-1)"),
            Some("The 128-bit order number carries 64 sequence bits; id_gen sequences are bigint, so their ids always fit."),
        )
    };
    let kv = keys::current_kv();
    pgrx::Uuid::from_bytes(keys::with_key(kv, |k| cipher::encode128(k, gene, seq)))
}

/// The external order number of a 64-bit order id: a version-8 UUID
/// `gene(16) | key version(8) | FF1(gene, version)(0^34 | seq)` with version/variant bits.
#[pg_extern(stable, strict, parallel_restricted, name = "encode_order_no")]
fn encode_order_no_bigint(order_id: i64) -> pgrx::Uuid {
    let gene = layout::gene_of(order_id).unwrap_or_else(|e| layout_error(e));
    let seq = layout::seq_of(order_id).unwrap_or_else(|e| layout_error(e));
    encode_parts(gene, seq as u128)
}

/// The external order number of an id in byte form (8-byte or 16-byte overflow form).
#[pg_extern(stable, strict, parallel_restricted, name = "encode_order_no")]
fn encode_order_no_bytea(order_id: &[u8]) -> pgrx::Uuid {
    let (gene, seq) = layout::decode_bytes(order_id).unwrap_or_else(|e| layout_error(e));
    encode_parts(gene, seq)
}

fn decode_parts(order_no: &pgrx::Uuid) -> (u16, u64) {
    let b = uuid_bytes(order_no);
    let kv = cipher::kv_of_128(&b).unwrap_or_else(|e| cipher_error(e));
    keys::with_key(kv, |k| cipher::decode128(k, &b)).unwrap_or_else(|e| cipher_error(e))
}

/// The order id of an external order number; rejects forged or altered numbers.
#[pg_extern(stable, strict, parallel_restricted, name = "decode_order_no")]
fn decode_order_no(order_no: pgrx::Uuid) -> i64 {
    let (gene, seq) = decode_parts(&order_no);
    if seq > layout::MAX_SEQ64 {
        raise(
            Code::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            "id_gen: this order number belongs to an id in the 16-byte overflow form",
            Some("Use id_gen.decode_order_no_bytes(order_no), which returns the id as bytea."),
        );
    }
    layout::compose(gene as i64, seq as i64).unwrap_or_else(|e| layout_error(e))
}

/// The order id of an external order number, in byte form (8 or 16 bytes).
#[pg_extern(stable, strict, parallel_restricted)]
fn decode_order_no_bytes(order_no: pgrx::Uuid) -> Vec<u8> {
    let (gene, seq) = decode_parts(&order_no);
    layout::compose_bytes(gene as i64, seq as i128).unwrap_or_else(|e| layout_error(e))
}

/// The shard gene of an order number: its first 16 bits, readable without a key.
#[pg_extern(immutable, strict, parallel_safe, name = "shard_of")]
fn shard_of_uuid(order_no: pgrx::Uuid) -> i32 {
    let b = order_no.as_bytes();
    ((b[0] as i32) << 8) | b[1] as i32
}

/// The key version recorded in an order number (third byte), readable without a key.
#[pg_extern(immutable, strict, parallel_safe)]
fn order_no_key_version(order_no: pgrx::Uuid) -> i32 {
    cipher::kv_of_128(&uuid_bytes(&order_no)).unwrap_or_else(|e| cipher_error(e)) as i32
}

/// The compact form: `0 | gene | FF1-47(gene, version)(seq)`. Not tamper-evident: every
/// value decodes to some id, so look the number up instead of trusting a decode.
#[pg_extern(stable, strict, parallel_restricted)]
fn encode_order_no64(order_id: i64, key_version: i32) -> i64 {
    let kv = check_kv(key_version);
    keys::with_key(kv, |k| cipher::encode64(k, order_id)).unwrap_or_else(|e| cipher_error(e))
}

/// Inverse of `encode_order_no64` under the same key version.
#[pg_extern(stable, strict, parallel_restricted)]
fn decode_order_no64(order_no: i64, key_version: i32) -> i64 {
    let kv = check_kv(key_version);
    keys::with_key(kv, |k| cipher::decode64(k, order_no)).unwrap_or_else(|e| cipher_error(e))
}

/// Creates a new key version from the OS random source, wrapped by the loaded KEK.
/// The first key becomes current; later ones become current with
/// `set_current_order_no_key`.
#[pg_extern(volatile, parallel_unsafe)]
fn create_order_no_key(note: default!(Option<&str>, "NULL")) -> i32 {
    let kek = keys::kek();
    Spi::run("LOCK TABLE id_gen.order_no_key_store IN EXCLUSIVE MODE")
        .unwrap_or_else(|e| spi_failed(e));
    let next = Spi::get_one::<i32>(
        "SELECT coalesce(max(key_version), 0) + 1 FROM id_gen.order_no_key_store",
    )
    .unwrap_or_else(|e| spi_failed(e))
    .unwrap_or(1);
    if next > 255 {
        raise(
            Code::ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED,
            "id_gen: all 255 order-number key versions are in use",
            Some("The key version is one byte of the order number; versions are never reused so old numbers stay decodable."),
        );
    }
    let kv = next as u8;
    let dek = keys::random_dek();
    let wrapped = cipher::wrap_key(kek, kv, &dek);
    let fingerprint = cipher::kek_fingerprint(kek).to_vec();
    Spi::run_with_args(
        "INSERT INTO id_gen.order_no_key_store (key_version, wrapped, kek_fingerprint, is_current, note) \
         VALUES ($1, $2, $3, NOT EXISTS (SELECT 1 FROM id_gen.order_no_key_store WHERE is_current), $4)",
        &[(kv as i16).into(), wrapped.into(), fingerprint.into(), note.into()],
    )
    .unwrap_or_else(|e| spi_failed(e));
    keys::keys_changed();
    pgrx::log!("id_gen: order-number key version {kv} created");
    kv as i32
}

/// Makes `key_version` the version used for new 128-bit order numbers.
#[pg_extern(volatile, parallel_unsafe)]
fn set_current_order_no_key(key_version: i32) {
    let kv = check_kv(key_version);
    // Refuse a key the server cannot use: it must unwrap under the loaded KEK.
    keys::with_key(kv, |_| ());
    // Two statements: the unique index on is_current is checked row by row, so one
    // UPDATE that flips both rows fails when it reaches the new row first.
    Spi::run_with_args(
        "UPDATE id_gen.order_no_key_store SET is_current = false \
         WHERE is_current AND key_version OPERATOR(pg_catalog.<>) $1",
        &[(kv as i16).into()],
    )
    .and_then(|()| {
        Spi::run_with_args(
            "UPDATE id_gen.order_no_key_store SET is_current = true \
             WHERE key_version OPERATOR(pg_catalog.=) $1",
            &[(kv as i16).into()],
        )
    })
    .unwrap_or_else(|e| spi_failed(e));
    keys::keys_changed();
    pgrx::log!("id_gen: order-number key version {kv} is now current");
}

/// The data keys in their KEK-wrapped form (never unwrapped), for a second database system
/// that holds the same KEK — the MariaDB plugin `crates/id_gen_mysql` (docs/guide/mariadb.md "MySQL /
/// MariaDB"). Superusers only: the rows are what a dump holds, but handing them out is a
/// key-distribution step, not something an ordinary role does.
#[pg_extern(volatile, parallel_unsafe)]
#[allow(clippy::type_complexity)]
fn export_order_no_keys() -> TableIterator<
    'static,
    (
        name!(key_version, i32),
        name!(wrapped, Vec<u8>),
        name!(kek_fingerprint, Vec<u8>),
        name!(is_current, bool),
    ),
> {
    // SAFETY: reads the current role's superuser flag; no arguments, no side effects.
    if !unsafe { pg_sys::superuser() } {
        raise(
            Code::ERRCODE_INSUFFICIENT_PRIVILEGE,
            "id_gen: permission denied to export order-number keys",
            Some("Only a superuser may export the wrapped order-number keys."),
        );
    }
    let rows = Spi::connect(|client| {
        let t = client.select(
            "SELECT key_version, wrapped, kek_fingerprint, is_current \
             FROM id_gen.order_no_key_store ORDER BY key_version",
            None,
            &[],
        )?;
        let mut rows = vec![];
        for r in t {
            rows.push((
                i32::from(r.get::<i16>(1)?.unwrap_or(0)),
                r.get::<Vec<u8>>(2)?.unwrap_or_default(),
                r.get::<Vec<u8>>(3)?.unwrap_or_default(),
                r.get::<bool>(4)?.unwrap_or(false),
            ));
        }
        Ok::<_, pgrx::spi::Error>(rows)
    })
    .unwrap_or_else(|e| spi_failed(e));
    TableIterator::new(rows)
}
