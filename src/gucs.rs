//! The `id_gen.*` settings. Startup-only ones size shared memory; the others tune waits
//! and defaults and may be changed per session or by a superuser as noted.
//!
//! Invariant: values read here are already range-checked by PostgreSQL (min/max given at
//! definition), so callers can use them without further validation.

use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};

/// Slots in the shared segment cache: one per (database, sequence, counter group).
pub static MAX_SEQUENCES: GucSetting<i32> = GucSetting::<i32>::new(1024);
/// Databases that can have a refill worker at the same time.
pub static MAX_DATABASES: GucSetting<i32> = GucSetting::<i32>::new(16);
/// How long a caller waits for a segment when both buffers are empty.
pub static REFILL_TIMEOUT_MS: GucSetting<i32> = GucSetting::<i32>::new(10_000);
/// Default `buffer_seconds` for new sequences.
pub static DEFAULT_BUFFER_SECONDS: GucSetting<i32> = GucSetting::<i32>::new(30);

pub fn init() {
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
