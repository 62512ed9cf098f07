//! Raising PostgreSQL errors with the right SQLSTATE, a message a DBA understands and a
//! hint on what to do next.
//!
//! Every user-facing failure in the extension goes through [`raise`]; `error!`/`panic!`
//! would give SQLSTATE XX000 (internal error), which tells the user nothing. Core error
//! types name their SQLSTATE as text (`sqlstate()`); [`code_of`] is the one mapping from
//! that text to PostgreSQL's code. Never call `raise` while holding a shared-memory
//! lock: the lock guards in the subsystems are dropped before a result becomes an error.

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

/// The one mapping from a SQLSTATE named by a core error type to PostgreSQL's code.
pub fn code_of(sqlstate: &str) -> Code {
    match sqlstate {
        "22001" => Code::ERRCODE_STRING_DATA_RIGHT_TRUNCATION,
        "22003" => Code::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
        "22004" => Code::ERRCODE_NULL_VALUE_NOT_ALLOWED,
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
pub fn raise_core(sqlstate: &str, message: impl std::fmt::Display, hint: Option<&str>) -> ! {
    raise(code_of(sqlstate), format!("id_gen: {message}"), hint)
}

/// Maps layout errors (bad ranges, lengths) to their SQLSTATEs.
pub fn layout_error(e: id_gen_core::layout::LayoutError) -> ! {
    raise_core(e.sqlstate(), e, None)
}

/// An SPI failure inside the extension's own catalog access: a bug or a damaged catalog,
/// never bad user input (that is validated before SPI runs).
pub fn spi_failed(e: pgrx::spi::Error) -> ! {
    raise(
        Code::ERRCODE_INTERNAL_ERROR,
        format!("id_gen: catalog access failed: {e}"),
        None,
    )
}

/// The value of a non-STRICT function's argument that must not be NULL (22004, naming
/// the argument).
#[inline]
pub fn required<T>(value: Option<T>, argument: &str) -> T {
    match value {
        Some(v) => v,
        None => raise(
            Code::ERRCODE_NULL_VALUE_NOT_ALLOWED,
            format!("id_gen: argument \"{argument}\" must not be NULL"),
            Some("Pass a value, or leave the argument out to use its default."),
        ),
    }
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
