//! Arguments as MariaDB passes them, checked once at `init` (count and declared types) and
//! read per row at `process`.
//!
//! What the server hands a UDF is an `Item_result` per argument: INT (a `longlong`; BIGINT
//! UNSIGNED values arrive as the same 64 bits), STRING (bytes in the argument's character
//! set, or binary), REAL or DECIMAL. A NULL literal is typed STRING, so an INTEGER
//! parameter accepts STRING at `init` and refuses a non-NULL string per row; REAL and
//! DECIMAL are refused at `init` (rounding 1.5 to an id would be a silent wrong answer —
//! `CAST(x AS SIGNED)` says it explicitly).

use crate::report::{Errno, Fail};
use id_gen_core::layout::{self, LayoutError};
use udf::{ArgList, Init, SqlResult, UdfState};

/// One argument value of the current row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arg<'a> {
    Null,
    Int(i64),
    Bytes(&'a [u8]),
    /// A REAL or DECIMAL value (refused at init, kept for completeness).
    Other(&'static str),
}

/// What a parameter accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    /// An INTEGER (BIGINT etc.).
    Int,
    /// An INTEGER or a string (binary or text).
    IntOrBytes,
    /// A string (binary or text).
    Bytes,
}

impl Param {
    fn describe(self) -> &'static str {
        match self {
            Param::Int => "an INTEGER",
            Param::IntOrBytes => "an INTEGER or a string",
            Param::Bytes => "a string",
        }
    }
}

fn type_name(v: &SqlResult<'_>) -> &'static str {
    match v {
        SqlResult::Int(_) => "INTEGER",
        SqlResult::String(_) => "string",
        SqlResult::Real(_) => "REAL",
        SqlResult::Decimal(_) => "DECIMAL",
        _ => "unsupported type",
    }
}

/// The name of parameter `i` in a signature like `f(gene, seq)`.
fn param_name(sig: &str, i: usize) -> &str {
    sig.split(['(', ',', ')']).nth(i + 1).map_or("?", str::trim)
}

/// Checks the argument count and the declared types at `init`. `sig` is the function's
/// SQL signature, e.g. `id_gen_compose_id(gene, seq)`.
pub fn check(args: &ArgList<'_, Init>, sig: &str, params: &[Param]) -> Result<(), String> {
    if args.len() != params.len() {
        let n = params.len();
        return Err(format!(
            "{sig} takes {n} argument{}, got {}",
            if n == 1 { "" } else { "s" },
            args.len()
        ));
    }
    for (i, (arg, p)) in args.iter().zip(params).enumerate() {
        let v = arg.value();
        let ok = match (p, &v) {
            (_, SqlResult::Int(_)) => *p != Param::Bytes,
            // A constant non-NULL string for an INTEGER parameter is refused now; a NULL
            // literal (typed STRING) or a string column is checked per row.
            (Param::Int, SqlResult::String(s)) => s.is_none(),
            (_, SqlResult::String(_)) => true,
            _ => false,
        };
        if !ok {
            // The server prefixes "Can't initialize function 'name'; " and keeps 80
            // characters of this text: name the argument, not the whole signature.
            return Err(format!(
                "argument {} ({}) must be {}, got {}",
                i + 1,
                param_name(sig, i),
                p.describe(),
                type_name(&v)
            ));
        }
    }
    Ok(())
}

/// The value of argument `i` in this row.
pub fn get<'a, S: UdfState>(args: &'a ArgList<'a, S>, i: usize) -> Arg<'a> {
    let Some(arg) = args.get(i) else {
        return Arg::Null;
    };
    match arg.value() {
        SqlResult::Int(v) => v.map_or(Arg::Null, Arg::Int),
        SqlResult::String(v) => v.map_or(Arg::Null, Arg::Bytes),
        SqlResult::Real(None) | SqlResult::Decimal(None) => Arg::Null,
        other => Arg::Other(type_name(&other)),
    }
}

/// A wrong argument type in a row (a string where an INTEGER is required).
pub fn wrong_type(sig: &str, i: usize, p: Param, got: &str) -> Fail {
    Fail::Error(
        Errno::WrongArguments,
        format!(
            "id_gen: {sig}: argument {} ({}) must be {}, got {got}",
            i + 1,
            param_name(sig, i),
            p.describe()
        ),
    )
}

/// An INTEGER parameter's value; `None` for NULL.
pub fn int(sig: &str, i: usize, a: Arg<'_>) -> Result<Option<i64>, Fail> {
    match a {
        Arg::Null => Ok(None),
        Arg::Int(v) => Ok(Some(v)),
        Arg::Bytes(_) => Err(wrong_type(sig, i, Param::Int, "a string")),
        Arg::Other(t) => Err(wrong_type(sig, i, Param::Int, t)),
    }
}

/// A layout error as MariaDB reports it (22003 range errors, otherwise bad argument).
pub fn layout_fail(e: LayoutError) -> Fail {
    match e {
        LayoutError::BadLength(n) => Fail::Error(
            Errno::WrongArguments,
            format!(
                "id_gen: a binary id must be 8 or 16 bytes long, got {n} bytes (pass numeric ids as BIGINT)"
            ),
        ),
        e if e.sqlstate() == "22003" => Fail::Error(Errno::OutOfRange, format!("id_gen: {e}")),
        e => Fail::Error(Errno::WrongArguments, format!("id_gen: {e}")),
    }
}

/// `(gene, seq)` of an id given as a BIGINT or in its 8- or 16-byte binary form.
pub fn id_parts(sig: &str, a: Arg<'_>) -> Result<Option<(u16, u128)>, Fail> {
    match a {
        Arg::Null => Ok(None),
        Arg::Int(id) => {
            let gene = layout::gene_of(id).map_err(layout_fail)?;
            let seq = layout::seq_of(id).map_err(layout_fail)?;
            Ok(Some((gene, seq as u128)))
        }
        Arg::Bytes(b) => layout::decode_bytes(b).map(Some).map_err(layout_fail),
        Arg::Other(t) => Err(wrong_type(sig, 0, Param::IntOrBytes, t)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_in_both_forms() {
        let id = layout::compose(16043, 7).unwrap();
        assert_eq!(id_parts("f", Arg::Int(id)), Ok(Some((16043, 7))));
        assert_eq!(
            id_parts("f", Arg::Bytes(&id.to_be_bytes())),
            Ok(Some((16043, 7)))
        );
        let wide = layout::compose_bytes(5, 1 << 50).unwrap();
        assert_eq!(id_parts("f", Arg::Bytes(&wide)), Ok(Some((5, 1 << 50))));
        assert_eq!(id_parts("f", Arg::Null), Ok(None));
    }

    #[test]
    fn bad_ids_are_errors() {
        for b in [
            &[][..],
            &[1; 7][..],
            &[1; 9][..],
            &[1; 15][..],
            &[1; 17][..],
        ] {
            match id_parts("f", Arg::Bytes(b)) {
                Err(Fail::Error(Errno::WrongArguments, m)) => {
                    assert!(m.contains(&format!("got {} bytes", b.len())), "{m}")
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(matches!(
            id_parts("f", Arg::Int(-1)),
            Err(Fail::Error(Errno::OutOfRange, _))
        ));
        assert!(matches!(
            id_parts("f", Arg::Bytes(&[0x80; 16])),
            Err(Fail::Error(Errno::WrongArguments, _))
        ));
        assert!(matches!(
            id_parts("f", Arg::Bytes(&[0x80; 8])),
            Err(Fail::Error(Errno::OutOfRange, _))
        ));
        assert!(matches!(
            int("f(a)", 0, Arg::Bytes(b"5")),
            Err(Fail::Error(Errno::WrongArguments, m)) if m.contains("f(a): argument 1 (a) must be an INTEGER, got a string")
        ));
        assert_eq!(int("f", 0, Arg::Null), Ok(None));
    }
}
