//! Gene in the low bits, for modulo sharding (seed 003, 基因法).
//!
//! Schemes that route rows with `owner % n` (n = 2^k shards, as most sharding middleware
//! does) can find an order by its ID alone if the ID carries the owner's remainder in its
//! low `k` bits: `id = (seq_value << k) | (owner mod 2^k)`. Then `id % 2^k` names the same
//! shard as `owner % 2^k`, so "orders of a user" and "the order with this ID" hit the same
//! shard without a side routing table. This is different from the fixed 64-bit layout of
//! docs/design.md §2, which puts a 16-bit hash gene in the *high* bits; this module is for
//! schemas whose existing routing is a plain modulo of the owner key.
//!
//! Invariants kept here:
//! * Uniqueness comes from `seq_value` alone: distinct sequence values give distinct IDs
//!   whatever the owners are, because the sequence is shifted *above* the gene instead of
//!   having its low bits overwritten (the seed's `replaceBinaryBits` overwrote them, which
//!   is why it could collide). IDs also keep the order of their sequence values.
//! * Every produced ID is a non-negative `bigint`; a sequence value that would push bits
//!   into the sign bit or off the top is refused, never truncated (a truncated ID would
//!   collide with an earlier one).
//! * The gene is the *mathematical* (non-negative) remainder `owner.rem_euclid(2^k)`,
//!   which for a power of two equals `owner & (2^k - 1)` on two's-complement integers.
//!
//! Negative owners. PostgreSQL's `%` truncates toward zero, so `-5 % 4 = -1` while the gene
//! stored here is `3`. Hence:
//! * `id & (2^k - 1) = owner & (2^k - 1)` holds for **every** owner (use this form in SQL
//!   routing if owner keys can be negative);
//! * `id % 2^k = owner % 2^k` holds for **non-negative** owners (ids are never negative);
//!   for a negative owner, `owner % 2^k` is `gene - 2^k` (or 0), i.e. route with
//!   `((owner % n) + n) % n` — Java's `Math.floorMod`, Python's `%`.

use std::fmt;

/// Fewest low bits a gene may take (2 shards).
pub const MIN_SHARD_BITS: u32 = 1;
/// Most low bits a gene may take (65536 shards, the same ceiling as the §2 gene). More
/// would leave too few bits for the sequence to be worth having.
pub const MAX_SHARD_BITS: u32 = 16;

/// Why a gene-in-low-bits ID could not be built or decoded.
///
/// Each variant names the SQLSTATE the SQL layer should raise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GeneModError {
    /// `shard_bits` is outside `1..=16`. SQLSTATE `22023` (invalid_parameter_value).
    ShardBitsOutOfRange { shard_bits: u32 },
    /// The sequence value is negative: sequences feeding this scheme start at 0 or 1.
    /// SQLSTATE `22003` (numeric_value_out_of_range).
    NegativeSeq { seq_value: i64 },
    /// The sequence value no longer fits above the gene bits: the generator is used up
    /// for this `shard_bits`. SQLSTATE `2200H` (sequence_generator_limit_exceeded).
    SeqTooLarge {
        seq_value: i64,
        max: i64,
        shard_bits: u32,
    },
    /// Only non-negative IDs are produced, so a negative one cannot be decoded.
    /// SQLSTATE `22003` (numeric_value_out_of_range).
    NegativeId { id: i64 },
}

impl GeneModError {
    /// The SQLSTATE the SQL layer should raise for this error.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            GeneModError::ShardBitsOutOfRange { .. } => "22023",
            GeneModError::NegativeSeq { .. } | GeneModError::NegativeId { .. } => "22003",
            GeneModError::SeqTooLarge { .. } => "2200H",
        }
    }

    /// A hint for the DBA: what to do about it.
    pub fn hint(&self) -> Option<String> {
        match self {
            GeneModError::ShardBitsOutOfRange { .. } => Some(
                "shard_bits is log2 of the shard count: 1 for 2 shards … 16 for 65536 shards"
                    .to_string(),
            ),
            GeneModError::SeqTooLarge { shard_bits, .. } => Some(format!(
                "with {shard_bits} gene bits only {} sequence bits remain; use fewer shard bits \
                 for new IDs or move to the 128-bit form",
                63 - shard_bits
            )),
            _ => None,
        }
    }
}

impl fmt::Display for GeneModError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GeneModError::ShardBitsOutOfRange { shard_bits } => write!(
                f,
                "shard bits {shard_bits} out of range (allowed: {MIN_SHARD_BITS} .. {MAX_SHARD_BITS})"
            ),
            GeneModError::NegativeSeq { seq_value } => write!(
                f,
                "sequence value {seq_value} is negative; a gene-in-low-bits id needs a sequence value >= 0"
            ),
            GeneModError::SeqTooLarge { seq_value, max, shard_bits } => write!(
                f,
                "sequence value {seq_value} does not fit in a bigint id with {shard_bits} gene bits \
                 (largest usable sequence value: {max})"
            ),
            GeneModError::NegativeId { id } => write!(
                f,
                "id {id} is negative; gene-in-low-bits ids are never negative"
            ),
        }
    }
}

impl std::error::Error for GeneModError {}

fn check_shard_bits(shard_bits: u32) -> Result<(), GeneModError> {
    if (MIN_SHARD_BITS..=MAX_SHARD_BITS).contains(&shard_bits) {
        Ok(())
    } else {
        Err(GeneModError::ShardBitsOutOfRange { shard_bits })
    }
}

/// Number of shards addressed by `shard_bits` low bits (`2^shard_bits`).
pub fn shard_count(shard_bits: u32) -> Result<i64, GeneModError> {
    check_shard_bits(shard_bits)?;
    Ok(1i64 << shard_bits)
}

/// Largest sequence value that still fits: `i64::MAX >> shard_bits`.
pub fn max_seq(shard_bits: u32) -> Result<i64, GeneModError> {
    check_shard_bits(shard_bits)?;
    Ok(i64::MAX >> shard_bits)
}

/// The gene of an owner: its non-negative remainder modulo `2^shard_bits`
/// (`owner.rem_euclid(2^k)`, equal to `owner & (2^k - 1)`).
pub fn owner_gene(owner: i64, shard_bits: u32) -> Result<i64, GeneModError> {
    check_shard_bits(shard_bits)?;
    Ok(owner.rem_euclid(1i64 << shard_bits))
}

/// Builds `(seq_value << shard_bits) | owner.rem_euclid(2^shard_bits)`.
///
/// The result is a non-negative bigint with `id & (2^k-1) == owner & (2^k-1)` for every
/// owner and `id % 2^k == owner % 2^k` for non-negative owners (see the module doc for
/// negative owners). Refuses, rather than truncates, a sequence value above
/// `i64::MAX >> shard_bits`.
pub fn compose_mod_id(seq_value: i64, owner: i64, shard_bits: u32) -> Result<i64, GeneModError> {
    let max = max_seq(shard_bits)?;
    if seq_value < 0 {
        return Err(GeneModError::NegativeSeq { seq_value });
    }
    if seq_value > max {
        return Err(GeneModError::SeqTooLarge {
            seq_value,
            max,
            shard_bits,
        });
    }
    Ok((seq_value << shard_bits) | owner.rem_euclid(1i64 << shard_bits))
}

/// Splits an ID built by [`compose_mod_id`] into `(seq_value, gene)`, where `gene` is the
/// owner's remainder in `0 .. 2^shard_bits`.
pub fn decode_mod_id(id: i64, shard_bits: u32) -> Result<(i64, i64), GeneModError> {
    check_shard_bits(shard_bits)?;
    if id < 0 {
        return Err(GeneModError::NegativeId { id });
    }
    Ok((id >> shard_bits, id & ((1i64 << shard_bits) - 1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_rng::XorShift;

    trait Owners {
        fn owner(&mut self) -> i64;
    }
    impl Owners for XorShift {
        fn owner(&mut self) -> i64 {
            // Mix full-range values with small ones and the extremes.
            match self.next() % 8 {
                0 => i64::MIN,
                1 => i64::MAX,
                2 => (self.next() % 2000) as i64 - 1000,
                _ => self.next() as i64,
            }
        }
    }

    /// PostgreSQL's `%` on bigint: truncating remainder (same as Rust's `%`).
    fn pg_mod(a: i64, b: i64) -> i64 {
        a.wrapping_rem(b)
    }

    #[test]
    fn property_100k_random_owners() {
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        for i in 0..100_000u32 {
            let k = MIN_SHARD_BITS + (rng.next() % 16) as u32;
            let n = 1i64 << k;
            let owner = rng.owner();
            let seq = (rng.next() as i64 & i64::MAX) >> k; // any value that fits
            let id = compose_mod_id(seq, owner, k).unwrap();
            assert!(id >= 0, "case {i}");
            // Bit form holds for every owner.
            assert_eq!(
                id & (n - 1),
                owner & (n - 1),
                "case {i}: owner {owner}, k {k}"
            );
            // Modulo form (PostgreSQL semantics) for non-negative owners.
            if owner >= 0 {
                assert_eq!(
                    pg_mod(id, n),
                    pg_mod(owner, n),
                    "case {i}: owner {owner}, k {k}"
                );
            } else {
                // Documented convention: the floor-mod of the owner.
                assert_eq!(pg_mod(id, n), ((pg_mod(owner, n) + n) % n));
            }
            assert_eq!(owner_gene(owner, k).unwrap(), owner & (n - 1));
            assert_eq!(decode_mod_id(id, k).unwrap(), (seq, owner.rem_euclid(n)));
        }
    }

    #[test]
    fn seed_003_example() {
        // 32 shards, userId 45346343212 → remainder 12, the seed's example.
        let id = compose_mod_id(2_654_324_532, 45_346_343_212, 5).unwrap();
        assert_eq!(id % 32, 45_346_343_212 % 32);
        assert_eq!(id % 32, 12);
        assert_eq!(decode_mod_id(id, 5).unwrap(), (2_654_324_532, 12));
    }

    #[test]
    fn distinct_sequences_never_collide_whatever_the_owner() {
        // Same owner, consecutive sequence values: distinct and increasing (the seed's
        // bit-replacement version collided here).
        let mut prev = -1;
        for seq in 0..10_000 {
            let id = compose_mod_id(seq, 2222, 4).unwrap();
            assert!(id > prev);
            prev = id;
        }
        // Different owners, increasing sequence values: still increasing.
        let mut rng = XorShift(7);
        let mut prev = -1;
        for seq in 0..10_000 {
            let id = compose_mod_id(seq, rng.owner(), 8).unwrap();
            assert!(id > prev);
            prev = id;
        }
    }

    #[test]
    fn negative_owner_convention() {
        // -5 mod 4: PostgreSQL says -1, the gene is 3 = -5 & 3.
        let id = compose_mod_id(10, -5, 2).unwrap();
        assert_eq!(id, (10 << 2) | 3);
        assert_eq!(id & 3, -5 & 3);
        assert_eq!(pg_mod(-5, 4), -1);
        assert_eq!(((pg_mod(-5, 4) + 4) % 4), id % 4);
        assert_eq!(compose_mod_id(0, i64::MIN, 16).unwrap(), 0);
        assert_eq!(compose_mod_id(0, -1, 16).unwrap(), 0xFFFF);
    }

    #[test]
    fn bounds() {
        for k in MIN_SHARD_BITS..=MAX_SHARD_BITS {
            let max = max_seq(k).unwrap();
            assert_eq!(max, i64::MAX >> k);
            let id = compose_mod_id(max, -1, k).unwrap();
            assert_eq!(id, i64::MAX);
            assert_eq!(decode_mod_id(id, k).unwrap(), (max, (1i64 << k) - 1));
            assert_eq!(compose_mod_id(0, 0, k).unwrap(), 0);
            assert_eq!(
                compose_mod_id(max + 1, 0, k),
                Err(GeneModError::SeqTooLarge {
                    seq_value: max + 1,
                    max,
                    shard_bits: k
                })
            );
            assert_eq!(shard_count(k).unwrap(), 1 << k);
        }
        assert!(compose_mod_id(i64::MAX, 1, 1).is_err());
    }

    #[test]
    fn errors() {
        for k in [0, 17, 63, 64, 65, u32::MAX] {
            let e = GeneModError::ShardBitsOutOfRange { shard_bits: k };
            assert_eq!(compose_mod_id(1, 1, k), Err(e.clone()));
            assert_eq!(decode_mod_id(1, k), Err(e.clone()));
            assert_eq!(owner_gene(1, k), Err(e.clone()));
            assert_eq!(max_seq(k), Err(e.clone()));
            assert_eq!(shard_count(k), Err(e.clone()));
            assert_eq!(e.sqlstate(), "22023");
        }
        let e = compose_mod_id(-1, 5, 4).unwrap_err();
        assert_eq!(e, GeneModError::NegativeSeq { seq_value: -1 });
        assert_eq!(e.sqlstate(), "22003");
        assert_eq!(
            compose_mod_id(i64::MIN, 5, 4).unwrap_err().sqlstate(),
            "22003"
        );
        let e = decode_mod_id(-7, 4).unwrap_err();
        assert_eq!(e, GeneModError::NegativeId { id: -7 });
        let e = compose_mod_id(i64::MAX, 5, 16).unwrap_err();
        assert_eq!(e.sqlstate(), "2200H");
        let msg = e.to_string();
        assert!(
            msg.contains("16 gene bits") && msg.contains("140737488355327"),
            "{msg}"
        );
        assert!(e.hint().unwrap().contains("47 sequence bits"));
    }
}
