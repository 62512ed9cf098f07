//! A claim carried on `BEGIN` (docs/routing-protocol.md §3, routing protocol 2): a client
//! that routes by itself starts a transaction with `/* id_gen.route_claim=G,V */ BEGIN`
//! instead of `BEGIN; SELECT id_gen.route_claim(G, V)`, so the claim costs no statement of
//! its own (no parse, plan or executor start: about half of what it added to a short
//! transaction).
//!
//! The ProcessUtility hook runs `BEGIN` (or `START TRANSACTION`) as PostgreSQL would, then
//! the claim of `claim.rs` in the transaction just opened, under a snapshot of its own, as a
//! `SELECT` of the claim would take one. Clients learn that a shard reads the comment from the
//! setting `id_gen.routing_protocol` (`gucs.rs`); a shard before 0.7.16 ignores it.
//!
//! Invariants:
//! - a comment that names `id_gen.route_claim` is never ignored: a malformed one is refused
//!   (22023) before the transaction opens; a refused claim (IG001, IG002) is raised by the
//!   `BEGIN` itself, which PostgreSQL then aborts, leaving the session outside a transaction
//!   block (as before the `BEGIN`);
//! - at most 128 bytes before and after the statement's location in its string are read
//!   (PostgreSQL 15 to 17 locate a statement before its leading comments, 18 after them);
//! - a claim inside a transaction block that an earlier message opened is refused (25001):
//!   what ran before it ran unclaimed;
//! - every other utility statement goes to the previous hook or PostgreSQL unchanged, and
//!   this hook raises nothing of its own while a Rust value that needs dropping is alive in
//!   its frame (`raise.rs`).

use super::raise::{self, Verdict};
use crate::errors::{raise as raise_pg, Code};
use id_gen_core::route_declaration::{claimed_in, leading_comments_start, PREFIX_BYTES};
use pgrx::pg_sys;
use std::ffi::c_char;

unsafe extern "C-unwind" {
    /// PostgreSQL's own, called directly: pgrx's binding would catch an error of the
    /// statement and raise it again from a frame that has no guard to catch it, and without
    /// an IG-class SQLSTATE.
    #[link_name = "standard_ProcessUtility"]
    fn standard_process_utility(
        pstmt: *mut pg_sys::PlannedStmt,
        query_string: *const c_char,
        read_only_tree: bool,
        context: pg_sys::ProcessUtilityContext::Type,
        params: pg_sys::ParamListInfo,
        query_env: *mut pg_sys::QueryEnvironment,
        dest: *mut pg_sys::DestReceiver,
        qc: *mut pg_sys::QueryCompletion,
    );
}

static PREV_PROCESS_UTILITY: std::sync::OnceLock<pg_sys::ProcessUtility_hook_type> =
    std::sync::OnceLock::new();

/// Installs the hook (from `_PG_init`, in every process that loads us).
pub fn install() {
    // SAFETY: _PG_init runs once per process, single-threaded, before any query; chaining
    // to the previous hook keeps other extensions (pg_stat_statements) working.
    unsafe {
        if PREV_PROCESS_UTILITY
            .set(pg_sys::ProcessUtility_hook)
            .is_ok()
        {
            pg_sys::ProcessUtility_hook = Some(process_utility);
        }
    }
}

/// The hook itself: no `#[pg_guard]` here, so that errors of the statement it runs (an
/// `EXECUTE`, a `CALL` or a `COPY` meeting IG001 in the executor or a trigger) pass through
/// with their own SQLSTATE (pgrx's re-raise would turn an IG-class code into XX000), and so
/// that it can raise a refused claim once the guarded parts have returned: nothing of Rust
/// that needs dropping is alive in this frame.
#[allow(clippy::too_many_arguments)]
unsafe extern "C-unwind" fn process_utility(
    pstmt: *mut pg_sys::PlannedStmt,
    query_string: *const c_char,
    read_only_tree: bool,
    context: pg_sys::ProcessUtilityContext::Type,
    params: pg_sys::ParamListInfo,
    query_env: *mut pg_sys::QueryEnvironment,
    dest: *mut pg_sys::DestReceiver,
    qc: *mut pg_sys::QueryCompletion,
) {
    let mut claim: Option<(u16, i64)> = None;
    // SAFETY: PostgreSQL's PlannedStmt of a utility statement and its source text; the
    // guarded function reports its own errors (a malformed claim) as PostgreSQL errors.
    unsafe { claim_of_guarded(pstmt, query_string, &mut claim) };
    // SAFETY: the previous hook or PostgreSQL's own, with the caller's arguments.
    unsafe {
        match PREV_PROCESS_UTILITY.get().copied().flatten() {
            Some(prev) => prev(
                pstmt,
                query_string,
                read_only_tree,
                context,
                params,
                query_env,
                dest,
                qc,
            ),
            None => standard_process_utility(
                pstmt,
                query_string,
                read_only_tree,
                context,
                params,
                query_env,
                dest,
                qc,
            ),
        }
    }
    let Some((gene, version)) = claim else {
        return;
    };
    let mut verdict: Option<Verdict> = None;
    // SAFETY: the guarded function turns PostgreSQL errors and Rust panics into PostgreSQL
    // errors.
    unsafe { claim_guarded(gene, version, &mut verdict) };
    if let Some(v) = verdict {
        // SAFETY: `v` holds only palloc'd C strings and plain values.
        unsafe { raise::raise(v) }
    }
}

/// [`claim_of`], with its error (a malformed claim) reported.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn claim_of_guarded(
    pstmt: *mut pg_sys::PlannedStmt,
    query_string: *const c_char,
    claim: *mut Option<(u16, i64)>,
) {
    // SAFETY: as the caller says; `claim` is the caller's local.
    unsafe { *claim = claim_of(pstmt, query_string) };
}

/// The claim, in the transaction the `BEGIN` just opened; a refusal goes to `*verdict`.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn claim_guarded(gene: u16, version: i64, verdict: *mut Option<Verdict>) {
    let mut shard_version = 0;
    // SAFETY: the transaction BEGIN opened is current (a BEGIN starts its block in the
    // transaction of its own statement); the claim reads the catalog under a snapshot, which
    // is pushed for it and popped when it returns (an ERROR in it pops the stack itself).
    unsafe {
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
        let refused = super::claim::claim_gene(gene, version, &mut shard_version);
        pg_sys::PopActiveSnapshot();
        *verdict = refused;
    }
}

/// The claim a `BEGIN` or `START TRANSACTION` carries in a leading comment of its own text;
/// a malformed one is refused here, before the transaction opens.
///
/// # Safety
/// `pstmt` is a utility statement's PlannedStmt and `query_string` its NUL-terminated source
/// (or NULL).
unsafe fn claim_of(
    pstmt: *mut pg_sys::PlannedStmt,
    query_string: *const c_char,
) -> Option<(u16, i64)> {
    // SAFETY: as the function's contract says.
    unsafe {
        let stmt = (*pstmt).utilityStmt;
        if query_string.is_null()
            || stmt.is_null()
            || (*stmt).type_ != pg_sys::NodeTag::T_TransactionStmt
        {
            return None;
        }
        let kind = (*(stmt as *mut pg_sys::TransactionStmt)).kind;
        if kind != pg_sys::TransactionStmtKind::TRANS_STMT_BEGIN
            && kind != pg_sys::TransactionStmtKind::TRANS_STMT_START
        {
            return None;
        }
        // The statement's text from up to PREFIX_BYTES before its location (18 locates it
        // after its leading comments) to PREFIX_BYTES after it.
        let location = (*pstmt).stmt_location.max(0) as usize;
        let from = location.saturating_sub(PREFIX_BYTES);
        let mut buf = [0u8; 2 * PREFIX_BYTES];
        let text = super::leading_bytes(
            query_string.add(from),
            &mut buf[..location - from + PREFIX_BYTES],
        );
        let start = leading_comments_start(text, location - from);
        let claim = match claimed_in(&text[start..]) {
            Ok(claim) => claim,
            Err(_) => raise_pg(
                Code::ERRCODE_INVALID_PARAMETER_VALUE,
                "id_gen: malformed route claim on BEGIN",
                Some(
                    "Write /* id_gen.route_claim=G,V */ BEGIN, with the gene G in 0 .. 65535 \
                     and the route version V read with the routes.",
                ),
            ),
        };
        // A claim starts its transaction: in a block an earlier message opened, what ran
        // before it ran unclaimed. (A message of several statements runs them in an implicit
        // block, which started with the message: its own statements are the caller's.)
        if claim.is_some()
            && pg_sys::IsTransactionBlock()
            && pg_sys::GetCurrentTransactionStartTimestamp()
                != pg_sys::GetCurrentStatementStartTimestamp()
        {
            raise_pg(
                Code::ERRCODE_ACTIVE_SQL_TRANSACTION,
                "id_gen: a route claim on BEGIN inside a transaction block",
                Some("Send the claim with the BEGIN that starts the transaction, as the first statement of its message."),
            );
        }
        claim
    }
}
