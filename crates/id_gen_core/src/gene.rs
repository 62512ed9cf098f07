//! The shard gene of an owner key (docs/design.md §2):
//! `(xxh64(bytes, seed 0) XOR murmur3_x64_128(bytes, seed 0).h1) & 0xFFFF`.
//!
//! Application code in Java, Go and Python must compute the same gene, so the canonical
//! bytes are fixed: a bigint is its 8 bytes two's-complement little-endian (what Guava's
//! `hashLong` feeds the hash), text is its UTF-8 bytes, uuid and bytea are their raw
//! bytes. There is no type tag: bigint 42 and the 8 bytes `2a 00 .. 00` hash alike.
//! The check values in the tests were verified in four languages; they are frozen.

/// Gene of arbitrary canonical bytes.
pub fn gene_of_bytes(bytes: &[u8]) -> u16 {
    let xx = xxhash_rust::xxh64::xxh64(bytes, 0);
    let mm = murmur3_h1(bytes);
    ((xx ^ mm) & 0xFFFF) as u16
}

/// Gene of a bigint owner (8 bytes little-endian).
pub fn gene_of_i64(owner: i64) -> u16 {
    gene_of_bytes(&owner.to_le_bytes())
}

/// Gene of a text owner (its UTF-8 bytes, unnormalised).
pub fn gene_of_str(owner: &str) -> u16 {
    gene_of_bytes(owner.as_bytes())
}

/// First 64-bit half (h1) of MurmurHash3_x64_128 with seed 0 — Guava's `asLong()`.
fn murmur3_h1(bytes: &[u8]) -> u64 {
    let mut cursor = std::io::Cursor::new(bytes);
    // Reading from an in-memory cursor cannot fail.
    let h = murmur3::murmur3_x64_128(&mut cursor, 0).expect("in-memory read");
    h as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_values_from_the_design() {
        assert_eq!(gene_of_i64(42), 16043);
        assert_eq!(gene_of_i64(0), 55408);
        assert_eq!(gene_of_i64(1), 24031);
        assert_eq!(gene_of_i64(45346343212), 14299);
        assert_eq!(gene_of_str("alice"), 13795);
    }

    #[test]
    fn component_hashes_match_the_cross_language_vectors() {
        let b = 42i64.to_le_bytes();
        assert_eq!(xxhash_rust::xxh64::xxh64(&b, 0), 0xb556806fb6d14353);
        assert_eq!(murmur3_h1(&b), 0xb6acc39989d27df8);
        assert_eq!(xxhash_rust::xxh64::xxh64(b"alice", 0), 0x73a3ea485f2e6049);
        assert_eq!(murmur3_h1(b"alice"), 0x4f1a4f97e8b355aa);
        assert_eq!(xxhash_rust::xxh64::xxh64(b"", 0), 0xef46db3751d8e999);
    }

    #[test]
    fn wrong_encodings_give_other_genes() {
        // The pitfalls listed in the research notes: big-endian, decimal text, 4 bytes.
        assert_eq!(gene_of_bytes(&42i64.to_be_bytes()), 0xa845);
        assert_eq!(gene_of_str("42"), 0x0dd5);
        assert_eq!(gene_of_bytes(&42i32.to_le_bytes()), 0x3f3e);
    }

    #[test]
    fn text_and_bytes_agree_and_no_type_tag() {
        assert_eq!(gene_of_str("alice"), gene_of_bytes(b"alice"));
        assert_eq!(gene_of_bytes(&[0x2a, 0, 0, 0, 0, 0, 0, 0]), gene_of_i64(42));
    }

    #[test]
    fn genes_spread_over_the_ring() {
        let mut buckets = [0u32; 16];
        for owner in 0..160_000i64 {
            buckets[(gene_of_i64(owner) >> 12) as usize] += 1;
        }
        for b in buckets {
            assert!((9_000..11_000).contains(&b), "uneven spread: {buckets:?}");
        }
    }
}
