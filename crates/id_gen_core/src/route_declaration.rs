//! The route version a client declares in a statement's own text (docs/routing-protocol.md
//! §3): a leading comment `/* id_gen.route_version=N */`; and the claim it carries on `BEGIN`
//! (§4): `/* id_gen.route_claim=G,V */ BEGIN`.
//!
//! A client that routes by itself sends a single statement with the version it routed with
//! in front of it, so the shard can refuse a stale route (IG001) without a second statement
//! (`set_config(..., true)`) in the same round trip, and without any session state a
//! transaction-mode pooler could lose. The shard reads the declaration from the start of the
//! statement's source text; the comment is otherwise ignored by PostgreSQL.
//!
//! Invariants:
//! - only the first [`PREFIX_BYTES`] bytes of a text are ever read, so a long statement
//!   costs nothing more to check;
//! - the comment must come first (after ASCII whitespace); spaces are allowed around the
//!   name, the `=` and the number; anything else is not a declaration and declares nothing
//!   (it stays an ordinary comment), nor does `0`;
//! - [`declaration`] and [`declared_in`] round-trip for every version above 0;
//! - a claim is never silently dropped: a leading comment that names `id_gen.route_claim`
//!   is either a claim of a gene in 0..=65535 at a version >= 0, or [`MalformedClaim`]
//!   (the shard refuses the `BEGIN`); [`claim_declaration`] and [`claimed_in`] round-trip.

/// The most bytes of a statement's text [`declared_in`] reads.
pub const PREFIX_BYTES: usize = 128;

const NAME: &[u8] = b"id_gen.route_version";

/// The comment that declares `version`, followed by a space, to put in front of a statement.
pub fn declaration(version: i64) -> String {
    format!("/* id_gen.route_version={version} */ ")
}

/// The version declared by a leading `/* id_gen.route_version=N */` in `text` (of which
/// only the first [`PREFIX_BYTES`] bytes are read), or `None` when there is no such
/// comment or it declares 0.
pub fn declared_in(text: &[u8]) -> Option<i64> {
    let text = &text[..text.len().min(PREFIX_BYTES)];
    let mut rest = skip_spaces(text).strip_prefix(b"/*")?;
    rest = skip_spaces(rest).strip_prefix(NAME)?;
    rest = skip_spaces(rest).strip_prefix(b"=")?;
    let (version, after) = number(skip_spaces(rest))?;
    skip_spaces(after).strip_prefix(b"*/")?;
    (version > 0).then_some(version)
}

const CLAIM_NAME: &[u8] = b"id_gen.route_claim";

/// The comment that claims `gene` at route `version`, followed by a space, to put in front
/// of `BEGIN`.
pub fn claim_declaration(gene: u16, version: i64) -> String {
    format!("/* id_gen.route_claim={gene},{version} */ ")
}

/// A leading comment that names `id_gen.route_claim` but is not `=G,V */` with a gene in
/// 0..=65535 and a version >= 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MalformedClaim;

/// The claim `(gene, version)` of a leading `/* id_gen.route_claim=G,V */` in `text` (of
/// which only the first [`PREFIX_BYTES`] bytes are read); `Ok(None)` when the text does not
/// start with a comment naming the claim.
pub fn claimed_in(text: &[u8]) -> Result<Option<(u16, i64)>, MalformedClaim> {
    let text = &text[..text.len().min(PREFIX_BYTES)];
    let Some(rest) = skip_spaces(text).strip_prefix(b"/*") else {
        return Ok(None);
    };
    let Some(rest) = skip_spaces(rest).strip_prefix(CLAIM_NAME) else {
        return Ok(None);
    };
    let rest = skip_spaces(rest).strip_prefix(b"=").ok_or(MalformedClaim)?;
    let (gene, rest) = number(skip_spaces(rest)).ok_or(MalformedClaim)?;
    let rest = skip_spaces(rest).strip_prefix(b",").ok_or(MalformedClaim)?;
    let (version, rest) = number(skip_spaces(rest)).ok_or(MalformedClaim)?;
    skip_spaces(rest)
        .strip_prefix(b"*/")
        .ok_or(MalformedClaim)?;
    let gene = u16::try_from(gene).map_err(|_| MalformedClaim)?;
    Ok(Some((gene, version)))
}

/// Where the leading comments of a statement that starts at `location` in `text` begin.
/// PostgreSQL 15 to 17 locate a statement at the end of the one before it (or at 0), so its
/// leading comments follow `location`; 18 locates it at its first token, after them. This
/// walks back from `location` over ASCII whitespace and `/* ... */` comments (not nested),
/// reading at most [`PREFIX_BYTES`] bytes, and returns the start of the earliest comment
/// found (`location` when there is none).
pub fn leading_comments_start(text: &[u8], location: usize) -> usize {
    let location = location.min(text.len());
    let floor = location.saturating_sub(PREFIX_BYTES);
    let mut start = location;
    loop {
        let mut end = start;
        while end > floor && text[end - 1].is_ascii_whitespace() {
            end -= 1;
        }
        if end < floor + 2 || &text[end - 2..end] != b"*/" {
            return start;
        }
        let Some(open) = text[floor..end - 2].windows(2).rposition(|w| w == b"/*") else {
            return start;
        };
        start = floor + open;
    }
}

/// A run of decimal digits that fits an i64 at the start of `text`, and what follows it.
fn number(text: &[u8]) -> Option<(i64, &[u8])> {
    let digits = text.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 19 {
        return None;
    }
    let (n, after) = text.split_at(digits);
    Some((std::str::from_utf8(n).ok()?.parse::<i64>().ok()?, after))
}

fn skip_spaces(text: &[u8]) -> &[u8] {
    let n = text.iter().take_while(|b| b.is_ascii_whitespace()).count();
    &text[n..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for v in [1, 7, 42, 1 << 40, i64::MAX] {
            let text = format!("{}SELECT 1", declaration(v));
            assert_eq!(declared_in(text.as_bytes()), Some(v), "{text}");
        }
    }

    #[test]
    fn spaces_are_allowed() {
        assert_eq!(
            declared_in(b"\n  /*id_gen.route_version=5*/SELECT"),
            Some(5)
        );
        assert_eq!(declared_in(b"/*  id_gen.route_version =  9  */"), Some(9));
    }

    #[test]
    fn anything_else_declares_nothing() {
        for text in [
            &b""[..],
            b"SELECT 1",
            b"/* id_gen.route_version=0 */ SELECT 1",
            b"/* id_gen.route_version= */",
            b"/* id_gen.route_version=-3 */",
            b"/* id_gen.route_version=12x */",
            b"/* id_gen.route_version=12",
            b"/* id_gen.route_versions=12 */",
            b"/* other */ /* id_gen.route_version=12 */",
            b"SELECT 1 /* id_gen.route_version=12 */",
            b"-- id_gen.route_version=12\nSELECT 1",
            b"/* id_gen.route_version=99999999999999999999 */",
            b"/* id_gen.route_version=9223372036854775808 */",
        ] {
            assert_eq!(declared_in(text), None, "{}", String::from_utf8_lossy(text));
        }
    }

    #[test]
    fn reads_only_the_prefix() {
        let pad = " ".repeat(PREFIX_BYTES);
        assert_eq!(
            declared_in(format!("{pad}/* id_gen.route_version=5 */").as_bytes()),
            None
        );
        let near = " ".repeat(PREFIX_BYTES - declaration(5).len());
        assert_eq!(
            declared_in(format!("{near}{}", declaration(5)).as_bytes()),
            Some(5)
        );
    }

    #[test]
    fn claims_round_trip() {
        for (gene, version) in [(0, 0), (1, 7), (65535, i64::MAX), (4242, 1 << 40)] {
            let text = format!("{}BEGIN", claim_declaration(gene, version));
            assert_eq!(
                claimed_in(text.as_bytes()),
                Ok(Some((gene, version))),
                "{text}"
            );
        }
        assert_eq!(
            claimed_in(b"\n /*id_gen.route_claim = 3 , 9*/BEGIN"),
            Ok(Some((3, 9)))
        );
    }

    #[test]
    fn other_text_claims_nothing() {
        for text in [
            &b"BEGIN"[..],
            b"",
            b"/* id_gen.route_version=3 */ BEGIN",
            b"/* other */ /* id_gen.route_claim=1,2 */ BEGIN",
            b"BEGIN /* id_gen.route_claim=1,2 */",
            b"-- id_gen.route_claim=1,2\nBEGIN",
        ] {
            assert_eq!(
                claimed_in(text),
                Ok(None),
                "{}",
                String::from_utf8_lossy(text)
            );
        }
    }

    #[test]
    fn a_claim_that_does_not_parse_is_malformed() {
        for text in [
            &b"/* id_gen.route_claim */ BEGIN"[..],
            b"/* id_gen.route_claim=1 */ BEGIN",
            b"/* id_gen.route_claim=1, */ BEGIN",
            b"/* id_gen.route_claim=65536,1 */ BEGIN",
            b"/* id_gen.route_claim=-1,1 */ BEGIN",
            b"/* id_gen.route_claim=1,-1 */ BEGIN",
            b"/* id_gen.route_claim=1,2 BEGIN",
            b"/* id_gen.route_claim=1,2,3 */ BEGIN",
            b"/* id_gen.route_claims=1,2 */ BEGIN",
            b"/* id_gen.route_claim=1,99999999999999999999 */ BEGIN",
        ] {
            assert_eq!(
                claimed_in(text),
                Err(MalformedClaim),
                "{}",
                String::from_utf8_lossy(text)
            );
        }
    }

    #[test]
    fn leading_comments_are_found_before_or_after_the_location() {
        let text = b"SELECT 1; /* id_gen.route_claim=3,9 */ BEGIN";
        let comment = 10;
        let begin = text.len() - 5;
        // 15 to 17: the location after the ';' (the comment follows it).
        assert_eq!(leading_comments_start(text, 9), 9);
        // 18: the location of BEGIN.
        assert_eq!(leading_comments_start(text, begin), comment);
        assert_eq!(
            claimed_in(&text[leading_comments_start(text, begin)..]),
            Ok(Some((3, 9)))
        );
        let two = b"/* a */ /* id_gen.route_claim=1,2 */\n BEGIN";
        assert_eq!(leading_comments_start(two, two.len() - 5), 0);
        assert_eq!(leading_comments_start(b"BEGIN", 0), 0);
        assert_eq!(leading_comments_start(b"SELECT 1; BEGIN", 10), 10);
        assert_eq!(leading_comments_start(b"x */ BEGIN", 5), 5);
    }
}
