//! How a result, a warning or an error leaves the plugin, and the panic guard around every
//! entry point.
//!
//! # Errors and warnings inside mysqld
//!
//! The UDF protocol has only two outcomes besides a value: `*is_null = 1` (NULL) and
//! `*error = 1`. MariaDB turns the error flag into NULL, not into an SQL error, and makes it
//! sticky: every later row of the statement is NULL without calling the function again.
//! Neither is good enough for "an id past 2^47 - 1 is an error, not a wrapped value".
//!
//! So the plugin reports through the server's own `my_message(errno, text, flags)` — the C
//! function behind `my_error`, exported by `mariadbd` — looked up once with
//! `dlsym(RTLD_DEFAULT)`. With flags 0 it sets the statement's error (the statement fails
//! with our errno, SQLSTATE and text); with `ME_WARNING` it adds a warning (`SHOW
//! WARNINGS`), which a strict-mode INSERT/UPDATE turns into an error as usual. It is only
//! used when `my_message_sql` (the server-side handler) is present too, i.e. inside a
//! server, never from a client library. Where it is absent, failures degrade to NULL (an
//! error also sets the error flag): never a wrong value.
//!
//! # Panics
//!
//! `udf` 0.5.5 does not catch panics, and its wrappers take the per-call state out of
//! `initid->ptr` as a `Box` for the duration of a call, so a panic unwinding through them
//! would free that state (and then `*_deinit` would free it again) — and a panic reaching the
//! `extern "C"` boundary aborts mysqld. Every `init` and `process` body therefore runs inside
//! [`init_guard`] / [`process_guard`], which catch any panic (including one from `udf`'s own
//! argument accessors, which `unwrap` internally) *inside* the wrapper and turn it into an
//! ordinary error.

use std::ffi::{c_char, c_uint, c_ulong, c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;
use udf::ProcessError;

/// The MariaDB error numbers the plugin reports under; the SQLSTATE follows from the number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Errno {
    /// `ER_DATA_OUT_OF_RANGE`, SQLSTATE 22003 (as PostgreSQL's id_gen): a gene, sequence or
    /// id outside its range.
    OutOfRange = 1690,
    /// `ER_WRONG_ARGUMENTS`, SQLSTATE HY000: an argument of the wrong type or byte length.
    WrongArguments = 1210,
    /// `ER_WRONG_VALUE_FOR_TYPE`, SQLSTATE HY000: a value that is not an order number.
    WrongValue = 1411,
    /// `ER_UNKNOWN_ERROR`, SQLSTATE HY000: order-number keys not configured or unusable.
    Config = 1105,
}

/// A failure of one call: a warning (the result is NULL) or an error (the statement fails).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fail {
    Warn(Errno, String),
    Error(Errno, String),
}

/// `ME_WARNING` of MariaDB's `my_sys.h` / `service_my_print_error.h`.
const ME_WARNING: c_ulong = 2048;

type MyMessage = unsafe extern "C" fn(c_uint, *const c_char, c_ulong);

/// The server's `my_message`, if this library runs inside mariadbd.
fn my_message() -> Option<MyMessage> {
    static F: OnceLock<Option<MyMessage>> = OnceLock::new();
    *F.get_or_init(|| {
        // SAFETY: dlsym with RTLD_DEFAULT and NUL-terminated names only reads the loaded
        // objects' symbol tables.
        let (msg, handler) = unsafe {
            (
                libc::dlsym(libc::RTLD_DEFAULT, c"my_message".as_ptr()),
                libc::dlsym(libc::RTLD_DEFAULT, c"my_message_sql".as_ptr()),
            )
        };
        if msg.is_null() || handler.is_null() {
            return None;
        }
        // SAFETY: `my_message` has had the signature
        // `void my_message(uint my_err, const char *str, myf MyFlags)` (myf = unsigned long)
        // in every MariaDB release.
        Some(unsafe { std::mem::transmute::<*mut c_void, MyMessage>(msg) })
    })
}

/// Whether failures reach the client as errors and warnings (inside mariadbd).
pub fn can_report() -> bool {
    my_message().is_some()
}

/// The text as the server's message buffer takes it: no NUL, at most 511 bytes.
fn message_text(msg: &str) -> CString {
    let mut end = msg.len().min(511);
    while !msg.is_char_boundary(end) {
        end -= 1;
    }
    let bytes: Vec<u8> = msg.as_bytes()[..end]
        .iter()
        .map(|&b| if b == 0 { b'?' } else { b })
        .collect();
    CString::new(bytes).unwrap_or_default()
}

#[cfg(test)]
thread_local! {
    /// What the functions reported, for the unit tests (`(is_warning, errno, text)`).
    pub static REPORTED: std::cell::RefCell<Vec<(bool, Errno, String)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

fn report(warning: bool, errno: Errno, msg: &str) {
    #[cfg(test)]
    REPORTED.with_borrow_mut(|r| r.push((warning, errno, msg.to_owned())));
    if let Some(f) = my_message() {
        let text = message_text(msg);
        // SAFETY: called on the connection thread that runs the statement (where the
        // server's current_thd is set), with a NUL-terminated text the server copies.
        unsafe {
            f(
                errno as c_uint,
                text.as_ptr(),
                if warning { ME_WARNING } else { 0 },
            )
        };
    }
}

/// The message for a panic caught in `name` (the panic itself went to the error log via
/// the default hook).
fn internal(name: &str) -> String {
    format!("{name}: internal error in id_gen (see the server error log)")
}

/// Runs the body of an `init`: its error text becomes "Can't initialize function".
pub fn init_guard<T>(name: &str, f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| Err(internal(name)))
}

/// Runs the body of a `process`: `Ok(None)` is NULL; a warning is reported and gives NULL;
/// an error is reported and sets the error flag.
pub fn process_guard<R>(
    name: &str,
    f: impl FnOnce() -> Result<Option<R>, Fail>,
) -> Result<Option<R>, ProcessError> {
    let outcome = catch_unwind(AssertUnwindSafe(f))
        .unwrap_or_else(|_| Err(Fail::Error(Errno::Config, internal(name))));
    match outcome {
        Ok(v) => Ok(v),
        Err(Fail::Warn(errno, msg)) => {
            report(true, errno, &msg);
            Ok(None)
        }
        Err(Fail::Error(errno, msg)) => {
            report(false, errno, &msg);
            Err(ProcessError)
        }
    }
}

#[cfg(test)]
pub fn take_reported() -> Vec<(bool, Errno, String)> {
    REPORTED.with_borrow_mut(std::mem::take)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_server_symbols_in_a_test_binary() {
        assert!(!can_report());
    }

    #[test]
    fn panics_become_errors_not_unwinding() {
        take_reported();
        let r: Result<Option<i64>, ProcessError> = process_guard("f", || panic!("boom {}", 1));
        assert_eq!(r, Err(ProcessError));
        let rep = take_reported();
        assert_eq!(rep.len(), 1);
        assert!(!rep[0].0);
        assert!(rep[0].2.contains("internal error"));
        let i: Result<(), String> = init_guard("f", || panic!("init boom"));
        assert!(i.unwrap_err().contains("internal error"));
    }

    #[test]
    fn warnings_are_null_errors_set_the_flag() {
        take_reported();
        let w: Result<Option<i64>, _> =
            process_guard("f", || Err(Fail::Warn(Errno::WrongValue, "w".into())));
        assert_eq!(w, Ok(None));
        let e: Result<Option<i64>, _> =
            process_guard("f", || Err(Fail::Error(Errno::OutOfRange, "e".into())));
        assert_eq!(e, Err(ProcessError));
        assert_eq!(
            take_reported(),
            vec![
                (true, Errno::WrongValue, "w".into()),
                (false, Errno::OutOfRange, "e".into())
            ]
        );
    }

    #[test]
    fn message_text_is_bounded_and_nul_free() {
        let long = "é".repeat(400); // 800 bytes, 2-byte chars
        let t = message_text(&long);
        assert!(t.as_bytes().len() <= 511);
        assert!(std::str::from_utf8(t.as_bytes()).is_ok());
        assert_eq!(message_text("a\0b").as_bytes(), b"a?b");
    }
}
