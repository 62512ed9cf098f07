//! Storage form of data keys: wrapping a per-version data key (DEK) under the
//! key-encryption key (KEK), the KEK's public fingerprint, and parsing the KEK text the
//! server reads from its key file or key command.
//!
//! # Construction
//!
//! ```text
//! wrap_key   = 0x01 ‖ AES-256-SIV(K_siv, AD₁ = "id_gen/wrapped-dek/v1", AD₂ = [kv]; DEK)
//!            = 0x01 ‖ tag(16) ‖ ciphertext(32)                        (49 bytes)
//! K_siv      = SP800-108-CMAC(KEK, "id_gen/kek-wrap", context = ∅, 512 bits)
//! fingerprint = SP800-108-CMAC(KEK, "id_gen/kek-fingerprint", context = ∅, 64 bits)
//! ```
//!
//! AES-SIV (RFC 5297) is used rather than RFC 3394 AES-KW because it authenticates
//! associated data: the key version is bound into the tag, so a wrapped key copied into
//! another version's row — or restored next to the wrong version — fails to unwrap
//! instead of silently producing order numbers under the wrong key. Its 128-bit tag makes
//! a wrong KEK or any tampering an error (never a wrong key) with probability 1 − 2⁻¹²⁸.
//! The construction is deterministic, so the golden vector in the tests is exact; the
//! only thing determinism reveals is whether two rows hold the same DEK for the same kv,
//! which never happens with random DEKs.
//!
//! The leading format byte leaves room for a future construction without guessing. The
//! KEK is never used directly as an AES key: the SIV key and the fingerprint are derived
//! from it with distinct labels, so publishing the fingerprint reveals nothing usable.
//!
//! Invariants: every buffer that holds a DEK or KEK is [`Zeroizing`]; no function here
//! prints, logs or echoes key bytes, including in error values.

use super::kdf;
use super::CipherError;
use aes_siv::siv::Aes256Siv;
use aes_siv::KeyInit;
use zeroize::Zeroizing;

/// Format byte of the current wrapped-key layout.
pub const WRAP_FORMAT_V1: u8 = 0x01;
/// Length of a wrapped key: format byte, SIV tag, encrypted 32-byte DEK.
pub const WRAPPED_LEN: usize = 1 + 16 + 32;

const LABEL_WRAP: &[u8] = b"id_gen/kek-wrap";
const LABEL_FINGERPRINT: &[u8] = b"id_gen/kek-fingerprint";
const AD_PURPOSE: &[u8] = b"id_gen/wrapped-dek/v1";

fn siv_for(kek: &[u8; 32]) -> Aes256Siv {
    let k = kdf::derive::<64>(kek, LABEL_WRAP, &[]);
    Aes256Siv::new((&*k).into())
}

/// Wraps the data key `dek` of key version `kv` under `kek` for storage in the key table.
///
/// Deterministic: the same inputs give the same 49 bytes. The result may be stored and
/// dumped freely; without the KEK it reveals nothing about the DEK.
pub fn wrap_key(kek: &[u8; 32], kv: u8, dek: &[u8; 32]) -> Vec<u8> {
    let mut siv = siv_for(kek);
    let mut buf = Zeroizing::new(*dek);
    let kv_ad = [kv];
    let tag = siv
        .encrypt_inout_detached([AD_PURPOSE, &kv_ad[..]], (&mut buf[..]).into())
        // Only fails with more than 126 associated-data components; we pass two.
        .expect("AES-SIV with two associated-data components cannot fail");
    let mut out = Vec::with_capacity(WRAPPED_LEN);
    out.push(WRAP_FORMAT_V1);
    out.extend_from_slice(tag.as_slice());
    out.extend_from_slice(&buf[..]);
    out
}

/// Recovers the data key of version `kv` from its wrapped form.
///
/// Fails with [`CipherError::UnwrapFailed`] when the KEK is not the one that wrapped it,
/// the wrapped bytes were altered, or they belong to another key version; with
/// [`CipherError::MalformedWrappedKey`] when the length or format byte is wrong.
pub fn unwrap_key(
    kek: &[u8; 32],
    kv: u8,
    wrapped: &[u8],
) -> Result<Zeroizing<[u8; 32]>, CipherError> {
    if wrapped.len() != WRAPPED_LEN || wrapped[0] != WRAP_FORMAT_V1 {
        return Err(CipherError::MalformedWrappedKey { len: wrapped.len() });
    }
    let tag = aes_siv::Tag::try_from(&wrapped[1..17]).map_err(|_| CipherError::UnwrapFailed)?;
    let mut buf = Zeroizing::new([0u8; 32]);
    buf.copy_from_slice(&wrapped[17..]);
    let mut siv = siv_for(kek);
    let kv_ad = [kv];
    match siv.decrypt_inout_detached([AD_PURPOSE, &kv_ad[..]], (&mut buf[..]).into(), &tag) {
        Ok(()) => Ok(buf),
        Err(_) => Err(CipherError::UnwrapFailed), // buf is wiped on drop
    }
}

/// A short public identifier of a KEK, for the key table and log lines ("which KEK
/// wrapped this row?"). It is a PRF output under the KEK, so it reveals nothing about it.
pub fn kek_fingerprint(kek: &[u8; 32]) -> [u8; 8] {
    *kdf::derive::<8>(kek, LABEL_FINGERPRINT, &[])
}

/// Parses the KEK as the server reads it from its key file or key command: exactly 64
/// hexadecimal characters (either case), optionally surrounded by whitespace such as a
/// trailing newline. Error values never contain any of the text.
pub fn parse_kek(text: &str) -> Result<Zeroizing<[u8; 32]>, CipherError> {
    let t = text.trim().as_bytes();
    if t.len() != 64 {
        return Err(CipherError::KekWrongLength { chars: t.len() });
    }
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    let mut out = Zeroizing::new([0u8; 32]);
    for (o, pair) in out.iter_mut().zip(t.chunks_exact(2)) {
        match (nibble(pair[0]), nibble(pair[1])) {
            (Some(h), Some(l)) => *o = (h << 4) | l,
            _ => return Err(CipherError::KekNotHex),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Test KEK 20 21 … 3f and test DEK 00 01 … 1f.
    fn test_kek() -> [u8; 32] {
        core::array::from_fn(|i| 0x20 + i as u8)
    }
    fn test_dek() -> [u8; 32] {
        core::array::from_fn(|i| i as u8)
    }

    /// Frozen wrap of the test DEK under the test KEK, kv = 1. Checked independently with
    /// Python `cryptography` (`KBKDFCMAC` for the SIV key, then `AESSIV.encrypt(dek,
    /// [b"id_gen/wrapped-dek/v1", b"\x01"])`).
    #[test]
    fn cipher_wrap_golden_vector() {
        let w = wrap_key(&test_kek(), 1, &test_dek());
        assert_eq!(w.len(), WRAPPED_LEN);
        assert_eq!(
            hex(&w),
            "01decbc9cb721c8dc93de1a30c9bf5029372cf395ff42bd1ab98a9894daafba7\
             384a8b4a3713196e6619dc57297caafef6"
        );
        assert_eq!(*unwrap_key(&test_kek(), 1, &w).unwrap(), test_dek());
    }

    #[test]
    fn cipher_wrap_round_trip_and_determinism() {
        let mut rng = super::super::ff1::tests::SplitMix(7);
        for _ in 0..50 {
            let kek: [u8; 32] = rng.bytes();
            let dek: [u8; 32] = rng.bytes();
            let kv = rng.next() as u8;
            let w = wrap_key(&kek, kv, &dek);
            assert_eq!(w, wrap_key(&kek, kv, &dek));
            assert_ne!(&w[17..], &dek[..], "the DEK must not appear in clear");
            assert_eq!(*unwrap_key(&kek, kv, &w).unwrap(), dek);
        }
    }

    #[test]
    fn cipher_wrap_rejects_wrong_kek_wrong_kv_and_tampering() {
        let (kek, dek) = (test_kek(), test_dek());
        let w = wrap_key(&kek, 7, &dek);
        let mut other = kek;
        other[0] ^= 1;
        assert_eq!(
            unwrap_key(&other, 7, &w).unwrap_err(),
            CipherError::UnwrapFailed
        );
        for kv in [0u8, 1, 6, 8, 255] {
            assert_eq!(
                unwrap_key(&kek, kv, &w).unwrap_err(),
                CipherError::UnwrapFailed
            );
        }
        // Every single-bit change of tag or ciphertext is caught; a changed format byte is
        // an unknown format.
        for byte in 0..w.len() {
            for bit in 0..8 {
                let mut t = w.clone();
                t[byte] ^= 1 << bit;
                let e = unwrap_key(&kek, 7, &t).unwrap_err();
                if byte == 0 {
                    assert_eq!(e, CipherError::MalformedWrappedKey { len: WRAPPED_LEN });
                } else {
                    assert_eq!(e, CipherError::UnwrapFailed, "byte {byte} bit {bit}");
                }
            }
        }
        // Wrong lengths.
        assert_eq!(
            unwrap_key(&kek, 7, &w[..48]).unwrap_err(),
            CipherError::MalformedWrappedKey { len: 48 }
        );
        let mut longer = w.clone();
        longer.push(0);
        assert_eq!(
            unwrap_key(&kek, 7, &longer).unwrap_err(),
            CipherError::MalformedWrappedKey { len: 50 }
        );
        assert_eq!(
            unwrap_key(&kek, 7, &[]).unwrap_err(),
            CipherError::MalformedWrappedKey { len: 0 }
        );
        // Swapping the ciphertext of two wraps under the same KEK is caught too.
        let w2 = wrap_key(&kek, 7, &[9u8; 32]);
        let mut spliced = w.clone();
        spliced[17..].copy_from_slice(&w2[17..]);
        assert_eq!(
            unwrap_key(&kek, 7, &spliced).unwrap_err(),
            CipherError::UnwrapFailed
        );
    }

    #[test]
    fn cipher_kek_fingerprint() {
        let fp = kek_fingerprint(&test_kek());
        assert_eq!(hex(&fp), "224bad31b27f082e");
        let mut other = test_kek();
        other[31] ^= 1;
        assert_ne!(fp, kek_fingerprint(&other));
        // The fingerprint is not a piece of the KEK or of the wrap key.
        assert!(!test_kek().windows(8).any(|w| w == fp));
    }

    #[test]
    fn cipher_parse_kek() {
        let text = "202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f";
        assert_eq!(*parse_kek(text).unwrap(), test_kek());
        assert_eq!(
            *parse_kek(&format!("  {}\n", text.to_uppercase())).unwrap(),
            test_kek()
        );
        assert_eq!(*parse_kek(&format!("{text}\r\n")).unwrap(), test_kek());
        assert_eq!(
            parse_kek("").unwrap_err(),
            CipherError::KekWrongLength { chars: 0 }
        );
        assert_eq!(
            parse_kek(&text[..63]).unwrap_err(),
            CipherError::KekWrongLength { chars: 63 }
        );
        assert_eq!(
            parse_kek(&format!("{text}0")).unwrap_err(),
            CipherError::KekWrongLength { chars: 65 }
        );
        let mut bad = text.to_string();
        bad.replace_range(10..11, "g");
        assert_eq!(parse_kek(&bad).unwrap_err(), CipherError::KekNotHex);
        // Inner whitespace, a 0x prefix and multi-byte characters are all refused.
        let inner = format!("{} {}", &text[..31], &text[32..]);
        assert_eq!(parse_kek(&inner).unwrap_err(), CipherError::KekNotHex);
        let prefixed = format!("0x{}", &text[2..]);
        assert_eq!(parse_kek(&prefixed).unwrap_err(), CipherError::KekNotHex);
        let multibyte = format!("é{}", &text[2..]);
        assert_eq!(parse_kek(&multibyte).unwrap_err(), CipherError::KekNotHex);
        // The error text never echoes the input.
        let msg = parse_kek(&bad).unwrap_err().to_string();
        assert!(!msg.contains(&bad[..8]), "{msg}");
    }
}
