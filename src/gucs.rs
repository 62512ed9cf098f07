//! The `id_gen.*` settings. Startup-only ones size shared memory; the others tune waits
//! and defaults and may be changed per session or by a superuser as noted.
//!
//! Invariant: values read here are already range-checked by PostgreSQL (min/max given at
//! definition), so callers can use them without further validation.

use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};
use std::ffi::CString;

/// Slots in the shared segment cache: one per (database, sequence, counter group).
pub static MAX_SEQUENCES: GucSetting<i32> = GucSetting::<i32>::new(1024);
/// Databases that can have a refill worker at the same time.
pub static MAX_DATABASES: GucSetting<i32> = GucSetting::<i32>::new(16);
/// How long a caller waits for a segment when both buffers are empty.
pub static REFILL_TIMEOUT_MS: GucSetting<i32> = GucSetting::<i32>::new(10_000);
/// Default `buffer_seconds` for new sequences.
pub static DEFAULT_BUFFER_SECONDS: GucSetting<i32> = GucSetting::<i32>::new(30);

/// Where the order-number key-encryption key comes from (startup-only, superuser-only).
pub static ORDER_NO_KEK_FILE: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
pub static ORDER_NO_KEK_COMMAND: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);

pub fn init() {
    // The KEK settings hold a path or a command, never the key; still, only superusers
    // may see them, and they cannot be set with ALTER SYSTEM (no postgresql.auto.conf).
    let secret = GucFlags::SUPERUSER_ONLY | GucFlags::DISALLOW_IN_AUTO_FILE;
    GucRegistry::define_string_guc(
        c"id_gen.order_no_kek_file",
        c"File holding the order-number key-encryption key (64 hex digits).",
        c"Read once at server start. Keep it readable only by the postgres OS user.",
        &ORDER_NO_KEK_FILE,
        GucContext::Postmaster,
        secret,
    );
    GucRegistry::define_string_guc(
        c"id_gen.order_no_kek_command",
        c"Shell command that prints the order-number key-encryption key (64 hex digits).",
        c"Run once at server start, e.g. to fetch the key from a KMS. Mutually exclusive with id_gen.order_no_kek_file.",
        &ORDER_NO_KEK_COMMAND,
        GucContext::Postmaster,
        secret,
    );
    GucRegistry::define_int_guc(
        c"id_gen.max_sequences",
        c"Number of sequence slots in id_gen's shared-memory segment cache.",
        c"One slot per (database, sequence, counter group) in use since the server started. Takes effect at server start.",
        &MAX_SEQUENCES,
        16,
        1_000_000,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"id_gen.max_databases",
        c"Number of databases that can have an id_gen refill worker at once.",
        c"Each database that uses next_segment_id gets one background worker; each counts against max_worker_processes.",
        &MAX_DATABASES,
        1,
        1024,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"id_gen.refill_timeout",
        c"How long a caller waits for a new segment when the cache is empty.",
        c"After this time the call fails with an error instead of hanging.",
        &REFILL_TIMEOUT_MS,
        100,
        600_000,
        GucContext::Userset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"id_gen.default_buffer_seconds",
        c"Seconds of traffic one segment should cover, for sequences created without buffer_seconds.",
        c"The adaptive step is clamp(min_step, max_step, rate x buffer_seconds).",
        &DEFAULT_BUFFER_SECONDS,
        1,
        86_400,
        GucContext::Suset,
        GucFlags::UNIT_S,
    );
}
