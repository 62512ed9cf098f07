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
/// Segments (× each sequence's `max_step`) a promoted server skips before its first
/// reservation, against ids that an asynchronously replicated old primary handed out.
pub static PROMOTION_SKIP_SEGMENTS: GucSetting<i32> = GucSetting::<i32>::new(0);
/// Database the move supervisor connects to (startup-only; empty: no supervisor).
pub static MOVE_SUPERVISOR_DATABASE: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"postgres"));
/// Seconds an unfinished move that no session runs is left alone before the supervisor
/// rolls it back.
pub static MOVE_ABANDON_AFTER_S: GucSetting<i32> = GucSetting::<i32>::new(600);
/// WAL (MB) a reversible move's way back may keep on its target before the supervisor
/// completes the move.
pub static REVERSIBLE_MAX_WAL_MB: GucSetting<i32> = GucSetting::<i32>::new(1024);
/// The route version a client routed with (0: none declared); see `routing_guard/`.
pub static ROUTE_VERSION: GucSetting<i32> = GucSetting::<i32>::new(0);
/// The routing protocol revision a shard offers to clients that route by themselves
/// (docs/routing-protocol.md §3): 2 reads a claim on `BEGIN`; defined only when preloaded,
/// where the hook that reads it is installed in every backend.
pub static ROUTING_PROTOCOL: GucSetting<i32> = GucSetting::<i32>::new(2);
/// Whether a shard refuses id-predicate reads of genes it does not own or that are fenced.
pub static ROUTING_GUARD: GucSetting<bool> = GucSetting::<bool>::new(true);
/// Whether moves compare source and target before their cut-over (sql/cluster/verify.sql).
pub static VERIFY_CUT_OVER: GucSetting<bool> = GucSetting::<bool>::new(true);
/// Whether the coordinator reads a shard directly (src/direct_read/) where it can.
pub static DIRECT_READS: GucSetting<bool> = GucSetting::<bool>::new(true);
/// The bound of a direct read's wait for the shard, in ms.
pub static DIRECT_READ_TIMEOUT_MS: GucSetting<i32> = GucSetting::<i32>::new(60_000);
/// Default `buffer_seconds` for new sequences.
pub static DEFAULT_BUFFER_SECONDS: GucSetting<i32> = GucSetting::<i32>::new(30);

/// Where the order-number key-encryption key comes from (startup-only, superuser-only).
pub static ORDER_NO_KEK_FILE: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(None);
pub static ORDER_NO_KEK_COMMAND: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(None);

/// Snowflake layout and node (startup-only: fixed once IDs exist).
pub static SNOWFLAKE_NODE_ID: GucSetting<i32> = GucSetting::<i32>::new(-1);
pub static SNOWFLAKE_TIME_BITS: GucSetting<i32> = GucSetting::<i32>::new(41);
pub static SNOWFLAKE_NODE_BITS: GucSetting<i32> = GucSetting::<i32>::new(10);
pub static SNOWFLAKE_SEQ_BITS: GucSetting<i32> = GucSetting::<i32>::new(12);
pub static SNOWFLAKE_GENE_BITS: GucSetting<i32> = GucSetting::<i32>::new(0);
pub static SNOWFLAKE_EPOCH_MS: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"1577836800000"));
/// How far the logical clock may run ahead of a wall clock that went backwards.
pub static SNOWFLAKE_MAX_LEAD_MS: GucSetting<i32> = GucSetting::<i32>::new(5_000);
/// Test-only: shifts the clock seen by snowflake_id and next_serial.
/// (A float: an integer setting in ms could not move the clock by more than 24 days.)
pub static TEST_CLOCK_OFFSET_MS: GucSetting<f64> = GucSetting::<f64>::new(0.0);

/// Defines the settings. PostgreSQL refuses startup-only (PGC_POSTMASTER) settings
/// outside `shared_preload_libraries` (a FATAL in `CREATE EXTENSION`), so those are only
/// defined while preloading; without preload their defaults apply, and every stateful
/// function reports that id_gen is not preloaded.
pub fn init(preloading: bool) {
    define_runtime();
    if preloading {
        define_startup();
    }
}

fn define_runtime() {
    GucRegistry::define_bool_guc(
        c"id_gen.direct_reads",
        c"On a coordinator, a SELECT the client sends in a transaction of its own reads each shard it reaches in one round trip on id_gen's own connection, instead of postgres_fdw's cursor.",
        c"Only a statement outside a transaction block, not SERIALIZABLE, without FOR UPDATE, whose scan of a distributed table's foreign table is its only scan of that shard and runs once; anything else reads through postgres_fdw. The connection uses the shard's foreign server and the user mapping, as postgres_fdw does (id_gen.direct_read_connections() lists them). Off: every read goes through postgres_fdw.",
        &DIRECT_READS,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"id_gen.direct_read_timeout",
        c"How long a direct read waits for its shard before it fails with 57014 and closes the connection.",
        c"Bounds a shard that stops answering without closing its connection (statement_timeout and a cancel end the wait too).",
        &DIRECT_READ_TIMEOUT_MS,
        100,
        i32::MAX,
        GucContext::Userset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_bool_guc(
        c"id_gen.routing_guard",
        c"On a shard, refuse reads that select by id genes the shard does not own (IG001) or that are fenced (IG002).",
        c"Off: such reads see what this shard holds (nothing, for genes it does not own), for a DBA inspecting a shard; the version check of id_gen.route_version is off too. Writes of genes not owned are refused either way.",
        &ROUTING_GUARD,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"id_gen.route_version",
        c"The route version this session or transaction routed with (0: none declared).",
        c"On a shard, the first statement of a transaction that touches a distributed table fails with SQLSTATE IG001 when the shard's route version (pushed by the coordinator) is newer than this. Set it from id_gen.route_version() on the coordinator, per session or with SET LOCAL; a statement can declare it instead in a leading comment /* id_gen.route_version=N */, which takes the place of this setting for the rest of that statement's transaction.",
        &ROUTE_VERSION,
        0,
        i32::MAX,
        GucContext::Userset,
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
    GucRegistry::define_int_guc(
        c"id_gen.move_abandon_after",
        c"How long a move of genes that no session runs is left alone before the move supervisor rolls it back.",
        c"A fence of such a move is lifted at once and a move that has cut over is finished at once; one that has not cut over keeps its replication slot (and WAL) until it is resumed, aborted, or this time has passed.",
        &MOVE_ABANDON_AFTER_S,
        10,
        86_400 * 7,
        GucContext::Sighup,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_bool_guc(
        c"id_gen.verify_cut_over",
        c"Whether a move of genes compares its source and target (rows and a checksum per gene) before it fences and flips, and refuses to flip on a difference (XX001).",
        c"The check reads both shards while the genes' writers go on, before the fence, so it adds nothing to the fence; a move records its result in id_gen.moves (verify_state). Off: moves flip without it (recorded as skipped). CALL id_gen.verify_range(move_id) runs it on demand.",
        &VERIFY_CUT_OVER,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"id_gen.reversible_max_wal",
        c"WAL a reversible move's way back may keep on its target before the move supervisor completes the move.",
        c"While a move made with reversible => true is neither reverted nor completed, its slot on the target keeps the WAL the source has not confirmed. Past this size the supervisor ends the way back as complete_move does (the genes stay on the target), so a source that is down cannot fill the target's disk.",
        &REVERSIBLE_MAX_WAL_MB,
        1,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::UNIT_MB,
    );
    // SIGHUP, not SUSET: the refill worker applies it, and a worker never sees a
    // session's settings; it belongs in postgresql.conf of every standby, before failover.
    GucRegistry::define_int_guc(
        c"id_gen.promotion_skip_segments",
        c"Segments each sequence skips when a promoted server first reserves (asynchronous replication).",
        c"After promotion, max_id of every local sequence moves up by this many x max_step before the first reservation, so ids handed out by an old primary whose last reservations never reached this standby are not handed out again. 0: no skip (enough with synchronous replication).",
        &PROMOTION_SKIP_SEGMENTS,
        0,
        1_000_000,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"id_gen.snowflake_max_lead",
        c"How far snowflake ids may run ahead of a clock that went backwards before calls fail.",
        c"Within this lead, ids keep increasing from the last timestamp (a logical clock); beyond it, snowflake_id raises an error naming the skew.",
        &SNOWFLAKE_MAX_LEAD_MS,
        0,
        3_600_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_float_guc(
        c"id_gen.test_clock_offset",
        c"TEST ONLY: shifts the clock seen by snowflake_id and next_serial.",
        c"For tests that cross midnight or move the clock backwards. Never set it in production.",
        &TEST_CLOCK_OFFSET_MS,
        -1e13,
        1e13,
        GucContext::Suset,
        GucFlags::UNIT_MS,
    );
}

fn define_startup() {
    GucRegistry::define_int_guc(
        c"id_gen.routing_protocol",
        c"The routing protocol revision this shard offers to clients that route by themselves: 2 lets them carry the claim on BEGIN.",
        c"2: clients send /* id_gen.route_claim=G,V */ BEGIN (no statement of its own); 1: they send BEGIN; SELECT id_gen.route_claim(G, V). The shard accepts both either way; a client reads this once per shard and again after losing a connection to it. On PostgreSQL 15 with pg_stat_statements.track_utility on, each claim on BEGIN is an entry of its own there: set 1, or track_utility off.",
        &ROUTING_PROTOCOL,
        1,
        2,
        GucContext::Sighup,
        GucFlags::default(),
    );
    let startup_int = |name: &'static std::ffi::CStr,
                       short: &'static std::ffi::CStr,
                       long: &'static std::ffi::CStr,
                       setting: &'static GucSetting<i32>,
                       min: i32,
                       max: i32| {
        GucRegistry::define_int_guc(
            name,
            short,
            long,
            setting,
            min,
            max,
            GucContext::Postmaster,
            GucFlags::default(),
        );
    };
    startup_int(
        c"id_gen.max_sequences",
        c"Number of sequence slots in id_gen's shared-memory segment cache.",
        c"One slot per (database, sequence, counter group) in use since the server started. Takes effect at server start.",
        &MAX_SEQUENCES,
        16,
        1_000_000,
    );
    startup_int(
        c"id_gen.max_databases",
        c"Number of databases that can have an id_gen refill worker at once.",
        c"Each database that uses next_segment_id gets one background worker; each counts against max_worker_processes.",
        &MAX_DATABASES,
        1,
        1024,
    );
    let fixed = c"Takes effect at server start; keep it fixed once IDs exist.";
    startup_int(
        c"id_gen.snowflake_node_id",
        c"This server's snowflake node id (-1: unset; snowflake_id refuses to run).",
        fixed,
        &SNOWFLAKE_NODE_ID,
        -1,
        (1 << 20) - 1,
    );
    startup_int(
        c"id_gen.snowflake_time_bits",
        c"Bits of milliseconds since the epoch in a snowflake id.",
        fixed,
        &SNOWFLAKE_TIME_BITS,
        35,
        62,
    );
    startup_int(
        c"id_gen.snowflake_node_bits",
        c"Bits of node id in a snowflake id.",
        fixed,
        &SNOWFLAKE_NODE_BITS,
        0,
        20,
    );
    startup_int(
        c"id_gen.snowflake_seq_bits",
        c"Bits of per-millisecond sequence in a snowflake id.",
        fixed,
        &SNOWFLAKE_SEQ_BITS,
        1,
        27,
    );
    startup_int(
        c"id_gen.snowflake_gene_bits",
        c"Bits of owner gene in the low end of a snowflake id (0: no gene; seed 003 variant).",
        fixed,
        &SNOWFLAKE_GENE_BITS,
        0,
        16,
    );
    GucRegistry::define_string_guc(
        c"id_gen.move_supervisor_database",
        c"Database in which the move supervisor finishes or rolls back moves of genes whose session is gone.",
        c"Set it to the coordinator's database; empty: no supervisor. Takes effect at server start.",
        &MOVE_SUPERVISOR_DATABASE,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"id_gen.snowflake_epoch_ms",
        c"Epoch of snowflake ids, in milliseconds since 1970-01-01 UTC.",
        c"Default 1577836800000 = 2020-01-01 00:00:00 UTC. Takes effect at server start; keep it fixed once IDs exist.",
        &SNOWFLAKE_EPOCH_MS,
        GucContext::Postmaster,
        GucFlags::default(),
    );
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
}
