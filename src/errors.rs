//! Raising PostgreSQL errors with the right SQLSTATE, a message a DBA understands and a
//! hint on what to do next.
//!
//! Every user-facing failure in the extension goes through [`raise`]; `error!`/`panic!`
//! would give SQLSTATE XX000 (internal error), which tells the user nothing. Never call
//! `raise` while holding a shared-memory lock: the lock helpers in `shmem.rs` release
//! theirs before returning a result that may become an error.

use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
pub use pgrx::PgSqlErrorCode as Code;

/// Reports an ERROR and does not return.
pub fn raise(code: Code, message: impl Into<String>, hint: Option<&str>) -> ! {
    let mut report = ErrorReport::new(code, message.into(), "id_gen");
    if let Some(h) = hint {
        report = report.set_hint(h);
    }
    report.report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}

/// Like [`raise`] with a DETAIL line as well.
pub fn raise_detail(
    code: Code,
    message: impl Into<String>,
    detail: impl Into<String>,
    hint: Option<&str>,
) -> ! {
    let mut report = ErrorReport::new(code, message.into(), "id_gen").set_detail(detail.into());
    if let Some(h) = hint {
        report = report.set_hint(h);
    }
    report.report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}

/// Maps layout errors (bad ranges, lengths) to their SQLSTATEs.
pub fn layout_error(e: id_gen_core::layout::LayoutError) -> ! {
    use id_gen_core::layout::LayoutError as L;
    let code = match e {
        L::BadLength(_) | L::TopBitSet => Code::ERRCODE_INVALID_PARAMETER_VALUE,
        L::GeneOutOfRange(_) | L::SeqOutOfRange { .. } | L::NegativeId(_) => {
            Code::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE
        }
    };
    raise(code, format!("id_gen: {e}"), None)
}

/// Validates a sequence name at the SQL boundary (SQLSTATE 22023 on failure).
pub fn checked_name(raw: &str) -> id_gen_core::name::SeqName {
    match id_gen_core::name::SeqName::new(raw) {
        Ok(n) => n,
        Err(e) => raise(
            Code::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("id_gen: invalid sequence name {raw:?}: {e}"),
            Some(
                "Sequence names are 1 to 63 characters of letters, digits, '_', '.', ':' and '-'.",
            ),
        ),
    }
}

/// The error code of a SQLSTATE named by a core error type.
pub fn code_of(sqlstate: &str) -> Code {
    match sqlstate {
        "22001" => Code::ERRCODE_STRING_DATA_RIGHT_TRUNCATION,
        "22003" => Code::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
        "22008" => Code::ERRCODE_DATETIME_FIELD_OVERFLOW,
        "22009" => Code::ERRCODE_INVALID_TIME_ZONE_DISPLACEMENT_VALUE,
        "2200H" => Code::ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED,
        "22023" => Code::ERRCODE_INVALID_PARAMETER_VALUE,
        "42704" => Code::ERRCODE_UNDEFINED_OBJECT,
        "55000" => Code::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        _ => Code::ERRCODE_INTERNAL_ERROR,
    }
}

/// Raises a core error that names its own SQLSTATE and hint.
pub fn raise_core(sqlstate: &str, message: impl std::fmt::Display, hint: Option<String>) -> ! {
    raise(
        code_of(sqlstate),
        format!("id_gen: {message}"),
        hint.as_deref(),
    )
}
