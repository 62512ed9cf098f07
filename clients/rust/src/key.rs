//! Routing keys and their genes (docs/routing-protocol.md §1).
//!
//! Invariant: every gene is computed by `id_gen_core` (`gene_of_i64`, `gene_of_str`,
//! `gene_of_bytes`, `layout::gene_of`), the same code the extension runs, so a client and
//! the shards can never disagree on a gene. There is no second implementation of the hash.

use crate::error::Error;
use id_gen_core::gene::{gene_of_bytes, gene_of_i64, gene_of_str};
use id_gen_core::layout;

/// What a transaction is routed by.
///
/// The gene of an owner is the hash of its canonical bytes (a bigint: 8 bytes little-endian;
/// text: its UTF-8 bytes; a uuid: its 16 raw bytes). The gene of an id is `id >> 47`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Key {
    /// A bigint owner.
    Owner(i64),
    /// A text owner (hashed as its UTF-8 bytes, unnormalised).
    OwnerText(String),
    /// A uuid owner, as its 16 raw bytes (big-endian, the order PostgreSQL stores).
    OwnerUuid([u8; 16]),
    /// An id_gen id (`gene << 47 | sequence`).
    Id(i64),
    /// A gene given directly.
    Gene(u16),
}

impl Key {
    /// The gene this key routes by.
    ///
    /// # Panics
    ///
    /// For a negative [`Key::Id`] (never an id_gen id): it has no gene, and masking it into
    /// one would route it to some shard. [`Key::try_gene`] returns [`Error::InvalidKey`]
    /// instead; the router uses `try_gene`.
    pub fn gene(&self) -> u16 {
        match self.try_gene() {
            Ok(gene) => gene,
            Err(e) => panic!("Key::gene: {e} (use Key::try_gene for ids that may be negative)"),
        }
    }

    /// The gene this key routes by; [`Error::InvalidKey`] for a negative id.
    pub fn try_gene(&self) -> Result<u16, Error> {
        Ok(match self {
            Key::Owner(owner) => gene_of_i64(*owner),
            Key::OwnerText(owner) => gene_of_str(owner),
            Key::OwnerUuid(bytes) => gene_of_bytes(bytes),
            Key::Id(id) => layout::gene_of(*id).map_err(|e| Error::InvalidKey(e.to_string()))?,
            Key::Gene(g) => *g,
        })
    }
}

impl From<i64> for Key {
    /// A bigint owner (not an id: use `Key::Id` for ids).
    fn from(owner: i64) -> Self {
        Key::Owner(owner)
    }
}

impl From<&str> for Key {
    fn from(owner: &str) -> Self {
        Key::OwnerText(owner.to_owned())
    }
}

impl From<String> for Key {
    fn from(owner: String) -> Self {
        Key::OwnerText(owner)
    }
}

/// Formats 16 uuid bytes in the canonical hyphenated form PostgreSQL accepts as `uuid` text.
pub(crate) fn uuid_text(bytes: &[u8; 16]) -> String {
    let mut s = String::with_capacity(36);
    for (i, b) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Parses a uuid written as 32 hex digits, hyphens anywhere ignored.
pub fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let hex: Vec<u8> = text.bytes().filter(|&c| c != b'-').collect();
    if hex.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, pair) in hex.chunks(2).enumerate() {
        let s = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(s, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_values_of_the_protocol() {
        assert_eq!(Key::Owner(42).gene(), 16043);
        assert_eq!(Key::Owner(0).gene(), 55408);
        assert_eq!(Key::Owner(1).gene(), 24031);
        assert_eq!(Key::Owner(45346343212).gene(), 14299);
        assert_eq!(Key::OwnerText("alice".into()).gene(), 13795);
        assert_eq!(Key::Id((16043 << 47) | 5).gene(), 16043);
        assert_eq!(Key::Gene(7).gene(), 7);
    }

    #[test]
    fn ids_route_with_their_owner() {
        for owner in [0i64, 1, 42, -7, i64::MAX] {
            let g = Key::Owner(owner).gene();
            let id = layout::compose(g as i64, 123_456).unwrap();
            assert_eq!(Key::Id(id).gene(), g);
            assert_eq!(Key::Id(id).try_gene().unwrap(), g);
        }
        assert_eq!(Key::Id(i64::MAX).gene(), 0xFFFF);
    }

    #[test]
    fn negative_ids_are_rejected_by_try_gene() {
        for id in [-1, -(1 << 47), i64::MIN] {
            assert!(matches!(Key::Id(id).try_gene(), Err(Error::InvalidKey(_))));
        }
    }

    #[test]
    #[should_panic(expected = "Key::gene: invalid key")]
    fn a_negative_id_has_no_gene() {
        Key::Id(-1).gene();
    }

    #[test]
    fn uuid_is_hashed_as_raw_bytes_and_formats_canonically() {
        let u = parse_uuid("00112233-4455-6677-8899-aabbccddeeff").unwrap();
        assert_eq!(Key::OwnerUuid(u).gene(), gene_of_bytes(&u));
        assert_eq!(uuid_text(&u), "00112233-4455-6677-8899-aabbccddeeff");
        assert_eq!(parse_uuid("00112233445566778899aabbccddeeff"), Some(u));
        assert_eq!(parse_uuid("0011"), None);
        assert_eq!(parse_uuid("zz112233445566778899aabbccddeeff"), None);
    }

    #[test]
    fn conversions() {
        assert_eq!(Key::from(42i64), Key::Owner(42));
        assert_eq!(Key::from("alice"), Key::OwnerText("alice".into()));
    }
}
