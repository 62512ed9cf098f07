//! The ID layout (docs/design.md §2). Changing anything here breaks every stored ID.
//!
//! 64-bit form: `0 │ gene(16) │ seq(47)` — bit 63 is zero so the ID is a positive
//! `bigint`, bits 62..47 hold the shard gene, bits 46..0 the sequence value.
//!
//! 128-bit overflow form (once a sequence passes 2^47-1): 16 bytes big-endian,
//! `0 │ gene(16) │ seq(111)`. Both forms sort by gene first when compared as
//! big-endian bytes, so a `bytea` column mixing 8- and 16-byte values clusters by shard.
//!
//! Invariant: every constructor checks its ranges and returns [`LayoutError`] instead of
//! truncating — a silently truncated ID would collide with another owner's ID.

use std::fmt;

/// Bits of the sequence part in the 64-bit form.
pub const SEQ_BITS: u32 = 47;
/// Largest sequence value that fits the 64-bit form (2^47 - 1).
pub const MAX_SEQ64: u64 = (1u64 << SEQ_BITS) - 1;
/// Bits of the sequence part in the 128-bit form.
pub const SEQ_BITS_128: u32 = 111;
/// Largest sequence value of the 128-bit form (2^111 - 1).
pub const MAX_SEQ128: u128 = (1u128 << SEQ_BITS_128) - 1;
/// Largest shard gene.
pub const MAX_GENE: u32 = 0xFFFF;

/// Why an ID could not be built or decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutError {
    /// The gene is outside 0..=65535.
    GeneOutOfRange(i64),
    /// The sequence value does not fit the requested form.
    SeqOutOfRange { value: i128, max: u128 },
    /// A 64-bit ID must be non-negative.
    NegativeId(i64),
    /// A byte form must be 8 or 16 bytes long.
    BadLength(usize),
    /// A 16-byte ID has its top bit set.
    TopBitSet,
}

impl LayoutError {
    /// The SQLSTATE a SQL layer should report.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            LayoutError::BadLength(_) | LayoutError::TopBitSet => "22023",
            LayoutError::GeneOutOfRange(_)
            | LayoutError::SeqOutOfRange { .. }
            | LayoutError::NegativeId(_) => "22003",
        }
    }
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutError::GeneOutOfRange(g) => {
                write!(f, "shard gene {g} is out of range (allowed: 0 .. 65535)")
            }
            LayoutError::SeqOutOfRange { value, max } => {
                write!(
                    f,
                    "sequence value {value} is out of range (allowed: 0 .. {max})"
                )
            }
            LayoutError::NegativeId(id) => {
                write!(
                    f,
                    "id {id} is negative; id_gen ids are non-negative (0 .. 9223372036854775807)"
                )
            }
            LayoutError::BadLength(n) => write!(
                f,
                "an id_gen id in bytea form must be 8 or 16 bytes long, got {n} bytes"
            ),
            LayoutError::TopBitSet => {
                write!(f, "a 16-byte id_gen id must have its top bit clear")
            }
        }
    }
}

impl std::error::Error for LayoutError {}

fn check_gene(gene: i64) -> Result<u16, LayoutError> {
    if (0..=MAX_GENE as i64).contains(&gene) {
        Ok(gene as u16)
    } else {
        Err(LayoutError::GeneOutOfRange(gene))
    }
}

/// Builds the 64-bit ID `gene << 47 | seq`.
pub fn compose(gene: i64, seq: i64) -> Result<i64, LayoutError> {
    let gene = check_gene(gene)?;
    if !(0..=MAX_SEQ64 as i64).contains(&seq) {
        return Err(LayoutError::SeqOutOfRange {
            value: seq as i128,
            max: MAX_SEQ64 as u128,
        });
    }
    Ok(((gene as i64) << SEQ_BITS) | seq)
}

/// Shard gene of a 64-bit ID.
pub fn gene_of(id: i64) -> Result<u16, LayoutError> {
    if id < 0 {
        return Err(LayoutError::NegativeId(id));
    }
    Ok(((id >> SEQ_BITS) & 0xFFFF) as u16)
}

/// Sequence part of a 64-bit ID.
pub fn seq_of(id: i64) -> Result<i64, LayoutError> {
    if id < 0 {
        return Err(LayoutError::NegativeId(id));
    }
    Ok(id & MAX_SEQ64 as i64)
}

/// Builds the byte form: 8 bytes (big-endian 64-bit form) while `seq` fits 47 bits,
/// else the 16-byte form.
pub fn compose_bytes(gene: i64, seq: i128) -> Result<Vec<u8>, LayoutError> {
    let gene = check_gene(gene)?;
    if seq < 0 || seq as u128 > MAX_SEQ128 {
        return Err(LayoutError::SeqOutOfRange {
            value: seq,
            max: MAX_SEQ128,
        });
    }
    let seq = seq as u128;
    if seq <= MAX_SEQ64 as u128 {
        let id = ((gene as u64) << SEQ_BITS) | seq as u64;
        Ok(id.to_be_bytes().to_vec())
    } else {
        let id = ((gene as u128) << SEQ_BITS_128) | seq;
        Ok(id.to_be_bytes().to_vec())
    }
}

/// Decodes either byte form into `(gene, seq)`.
pub fn decode_bytes(bytes: &[u8]) -> Result<(u16, u128), LayoutError> {
    match bytes.len() {
        8 => {
            let id = u64::from_be_bytes(bytes.try_into().expect("length checked"));
            if id >> 63 != 0 {
                return Err(LayoutError::NegativeId(id as i64));
            }
            Ok((((id >> SEQ_BITS) & 0xFFFF) as u16, (id & MAX_SEQ64) as u128))
        }
        16 => {
            let id = u128::from_be_bytes(bytes.try_into().expect("length checked"));
            if id >> 127 != 0 {
                return Err(LayoutError::TopBitSet);
            }
            Ok((((id >> SEQ_BITS_128) & 0xFFFF) as u16, id & MAX_SEQ128))
        }
        n => Err(LayoutError::BadLength(n)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compose_and_decompose_round_trip_at_the_bounds() {
        for gene in [0i64, 1, 255, 256, 16043, 65534, 65535] {
            for seq in [0i64, 1, 2, 1 << 46, MAX_SEQ64 as i64 - 1, MAX_SEQ64 as i64] {
                let id = compose(gene, seq).unwrap();
                assert!(id >= 0);
                assert_eq!(gene_of(id).unwrap() as i64, gene);
                assert_eq!(seq_of(id).unwrap(), seq);
                let b = compose_bytes(gene, seq as i128).unwrap();
                assert_eq!(b, id.to_be_bytes());
                assert_eq!(decode_bytes(&b).unwrap(), (gene as u16, seq as u128));
            }
        }
    }

    #[test]
    fn pseudo_random_round_trip() {
        // A tiny deterministic generator keeps the test free of dependencies.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let gene = (x & 0xFFFF) as i64;
            let seq = ((x >> 16) & MAX_SEQ64) as i64;
            let id = compose(gene, seq).unwrap();
            assert_eq!(
                (gene_of(id).unwrap() as i64, seq_of(id).unwrap()),
                (gene, seq)
            );
            let big = ((x as u128) << 40 | x as u128) & MAX_SEQ128;
            let b = compose_bytes(gene, big as i128).unwrap();
            assert_eq!(decode_bytes(&b).unwrap(), (gene as u16, big));
        }
    }

    #[test]
    fn shard_of_matches_the_mysql_expression() {
        let id = compose(16043, 5).unwrap();
        assert_eq!((id >> 47) & 0xFFFF, 16043);
    }

    #[test]
    fn out_of_range_inputs_are_rejected() {
        assert_eq!(compose(-1, 0), Err(LayoutError::GeneOutOfRange(-1)));
        assert_eq!(compose(65536, 0), Err(LayoutError::GeneOutOfRange(65536)));
        assert!(matches!(
            compose(0, -1),
            Err(LayoutError::SeqOutOfRange { .. })
        ));
        assert!(matches!(
            compose(0, 1 << 47),
            Err(LayoutError::SeqOutOfRange { .. })
        ));
        assert_eq!(gene_of(-5), Err(LayoutError::NegativeId(-5)));
        assert_eq!(seq_of(i64::MIN), Err(LayoutError::NegativeId(i64::MIN)));
        assert!(matches!(
            compose_bytes(0, -1),
            Err(LayoutError::SeqOutOfRange { .. })
        ));
        assert!(matches!(
            compose_bytes(0, (MAX_SEQ128 + 1) as i128),
            Err(LayoutError::SeqOutOfRange { .. })
        ));
        for n in [0usize, 1, 7, 9, 15, 17, 32] {
            assert_eq!(decode_bytes(&vec![0u8; n]), Err(LayoutError::BadLength(n)));
        }
        assert_eq!(decode_bytes(&[0x80, 0, 0, 0, 0, 0, 0, 0]).is_err(), true);
        let mut b = [0u8; 16];
        b[0] = 0x80;
        assert_eq!(decode_bytes(&b), Err(LayoutError::TopBitSet));
    }

    #[test]
    fn overflow_form_starts_exactly_after_2_pow_47_minus_1() {
        assert_eq!(compose_bytes(7, MAX_SEQ64 as i128).unwrap().len(), 8);
        let b = compose_bytes(7, MAX_SEQ64 as i128 + 1).unwrap();
        assert_eq!(b.len(), 16);
        assert_eq!(decode_bytes(&b).unwrap(), (7, MAX_SEQ64 as u128 + 1));
        // Gene-first ordering: a higher gene sorts after, whatever the seq.
        let lo = compose_bytes(7, MAX_SEQ128 as i128).unwrap();
        let hi = compose_bytes(8, 0).unwrap();
        assert!(lo[..2] < hi[..2]);
    }
}
