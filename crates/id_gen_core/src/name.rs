//! Validated sequence names — checked once, at the SQL boundary.
//!
//! A sequence name is a catalog key, a shared-memory key (a fixed 64-byte array) and part
//! of error messages, so it must be short and printable. [`SeqName::new`] is the only way
//! to get one; every later layer can rely on it (the pattern of pgmq's `CheckedName`).
//!
//! Invariant: 1..=63 bytes of `[A-Za-z0-9_.:-]`, starting with a letter, digit or `_`.

use std::fmt;

/// Longest name in bytes; the shared-memory key holds it NUL-padded in 64 bytes.
pub const MAX_NAME_LEN: usize = 63;

/// A sequence name that passed validation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SeqName(String);

/// Why a name was refused (maps to SQLSTATE 22023 invalid_parameter_value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameError {
    Empty,
    TooLong(usize),
    BadChar { ch: char, at: usize },
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameError::Empty => write!(f, "sequence name must not be empty"),
            NameError::TooLong(n) => {
                write!(f, "sequence name is {n} bytes long; the limit is {MAX_NAME_LEN}")
            }
            NameError::BadChar { ch, at } => write!(
                f,
                "sequence name contains {ch:?} at position {at}; allowed are letters, digits, '_', '.', ':' and '-' (not first)"
            ),
        }
    }
}

impl std::error::Error for NameError {}

impl SeqName {
    pub fn new(raw: &str) -> Result<SeqName, NameError> {
        if raw.is_empty() {
            return Err(NameError::Empty);
        }
        if raw.len() > MAX_NAME_LEN {
            return Err(NameError::TooLong(raw.len()));
        }
        for (at, ch) in raw.chars().enumerate() {
            let ok = ch.is_ascii_alphanumeric()
                || ch == '_'
                || (at > 0 && matches!(ch, '.' | ':' | '-'));
            if !ok {
                return Err(NameError::BadChar { ch, at: at + 1 });
            }
        }
        Ok(SeqName(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The NUL-padded fixed-size key used in shared memory.
    pub fn to_key(&self) -> [u8; 64] {
        let mut key = [0u8; 64];
        key[..self.0.len()].copy_from_slice(self.0.as_bytes());
        key
    }
}

impl fmt::Display for SeqName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Reads a NUL-padded key back into text (for status views).
pub fn key_to_str(key: &[u8; 64]) -> &str {
    let end = key.iter().position(|&b| b == 0).unwrap_or(key.len());
    std::str::from_utf8(&key[..end]).unwrap_or("?")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_names() {
        for n in ["orders", "t_1", "tenant:42", "a.b-c", "_x", "9lives"] {
            assert_eq!(SeqName::new(n).unwrap().as_str(), n);
        }
        let max = "a".repeat(63);
        assert_eq!(key_to_str(&SeqName::new(&max).unwrap().to_key()), max);
    }

    #[test]
    fn rejects_bad_names() {
        assert_eq!(SeqName::new(""), Err(NameError::Empty));
        assert_eq!(SeqName::new(&"a".repeat(64)), Err(NameError::TooLong(64)));
        assert_eq!(
            SeqName::new("-x"),
            Err(NameError::BadChar { ch: '-', at: 1 })
        );
        assert_eq!(
            SeqName::new("a b"),
            Err(NameError::BadChar { ch: ' ', at: 2 })
        );
        assert_eq!(
            SeqName::new("x'; drop"),
            Err(NameError::BadChar { ch: '\'', at: 2 })
        );
        assert!(SeqName::new("é").is_err());
        assert!(SeqName::new("a\0").is_err());
    }
}
