//! The executor node of a direct read: a CustomScan that stands where postgres_fdw's
//! ForeignScan of a shard's foreign table stood (`mod.rs` puts it there), sends the
//! statement postgres_fdw deparsed for that scan, with its parameters, in one round trip
//! on id_gen's connection to the shard (`connection.rs`), and turns the rows (text, in
//! single-row mode: memory stays bounded however many arrive) into tuples of the foreign
//! table, whose local quals and projection the executor applies as for any scan.
//!
//! `custom_private` holds: the remote statement (a String), the retrieved attribute
//! numbers (an integer List, postgres_fdw's), the foreign server's OID and the user's
//! (Integer); `custom_exprs` the parameters' expressions, sent as $1.. in text.
//!
//! Invariants:
//!   * a scan's run is freed by a callback on the executor's query memory, which an
//!     aborted statement deletes too: a connection left with rows on the way is closed
//!     there (never waited on), and its current result freed;
//!   * a shard's error is raised again with its own SQLSTATE (IG001, IG002 for a zero-hop
//!     guard's refusal, 40001, ...), message, detail, hint and context, from an unguarded
//!     frame that holds nothing to drop (routing_guard/raise.rs);
//!   * the connection is idle again (every result read) before the scan reports its end.

use super::connection;
use super::libpq::{self, Api, PGresult};
use crate::pg_list::list_pointers;
use crate::routing_guard::raise::{self, RemoteError};
use pgrx::pg_sys;
use std::ffi::{c_void, CStr, CString};
use std::time::Instant;

/// What a scan is doing.
#[derive(PartialEq, Clone, Copy)]
enum Phase {
    NotSent,
    Rows,
    Done,
}

/// One scan's run (boxed; the node points at it).
struct Run {
    server: pg_sys::Oid,
    user: pg_sys::Oid,
    name: String,
    sql: CString,
    params: Vec<(*mut pg_sys::ExprState, pg_sys::Oid)>,
    /// (attribute index in the tuple, input function, its type parameter, typmod).
    inputs: Vec<(usize, pg_sys::FmgrInfo, pg_sys::Oid, i32)>,
    phase: Phase,
    deadline: Instant,
    row_cxt: pg_sys::MemoryContext,
    relid: pg_sys::Oid,
    /// The connection the statement was sent on (while Rows).
    conn: *mut libpq::PGconn,
    /// Whether that connection was opened for this statement (a reused one that turns out
    /// broken before the first row is replaced once).
    fresh: bool,
    /// The result being made into a tuple (freed by the cleanup if an input function fails).
    current: *mut PGresult,
}

/// The node's state: PostgreSQL's part first.
#[repr(C)]
struct DirectScanState {
    css: pg_sys::CustomScanState,
    run: *mut Run,
}

pub static SCAN_METHODS: SyncMethods<pg_sys::CustomScanMethods> =
    SyncMethods(pg_sys::CustomScanMethods {
        CustomName: c"id_gen direct read".as_ptr(),
        CreateCustomScanState: Some(create_state),
    });

static EXEC_METHODS: SyncMethods<pg_sys::CustomExecMethods> =
    SyncMethods(pg_sys::CustomExecMethods {
        CustomName: c"id_gen direct read".as_ptr(),
        BeginCustomScan: Some(begin),
        ExecCustomScan: Some(exec),
        EndCustomScan: Some(end),
        ReScanCustomScan: Some(rescan),
        MarkPosCustomScan: None,
        RestrPosCustomScan: None,
        EstimateDSMCustomScan: None,
        InitializeDSMCustomScan: None,
        ReInitializeDSMCustomScan: None,
        InitializeWorkerCustomScan: None,
        ShutdownCustomScan: None,
        ExplainCustomScan: None,
    });

/// A table of methods, which PostgreSQL reads and never writes.
pub struct SyncMethods<T>(pub T);
// SAFETY: the tables are immutable and hold pointers to static strings and functions.
unsafe impl<T> Sync for SyncMethods<T> {}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn create_state(_cscan: *mut pg_sys::CustomScan) -> *mut pg_sys::Node {
    // SAFETY: palloc0 in the executor's memory; PostgreSQL fills the CustomScanState.
    unsafe {
        let node = pg_sys::palloc0(std::mem::size_of::<DirectScanState>()) as *mut DirectScanState;
        (*node).css.ss.ps.type_ = pg_sys::NodeTag::T_CustomScanState;
        (*node).css.methods = &EXEC_METHODS.0;
        node as *mut pg_sys::Node
    }
}

fn int_of(node: *mut c_void) -> i32 {
    // SAFETY: an Integer node of our custom_private.
    unsafe { (*(node as *mut pg_sys::Integer)).ival }
}

/// The run's cleanup, on the executor's query memory (at End, and when an aborted
/// statement's memory goes).
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn cleanup(arg: *mut c_void) {
    let node = arg as *mut DirectScanState;
    // SAFETY: the node lives in the memory being reset, which callbacks precede.
    unsafe {
        let run = std::mem::replace(&mut (*node).run, std::ptr::null_mut());
        if run.is_null() {
            return;
        }
        let mut run = Box::from_raw(run);
        stop(&mut run);
        connection::release(run.server, run.user);
    }
}

/// Ends what a run has on its connection: frees the result being made into a tuple, and
/// settles a statement whose rows are still on the way (kept when they have all arrived).
fn stop(run: &mut Run) {
    if let Some(api) = libpq::api() {
        if !run.current.is_null() {
            // SAFETY: a result of ours, forgotten here.
            unsafe { (api.PQclear)(std::mem::replace(&mut run.current, std::ptr::null_mut())) };
        }
        if run.phase == Phase::Rows {
            connection::settle(api, run.server, run.user, run.conn);
        }
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn begin(
    node: *mut pg_sys::CustomScanState,
    estate: *mut pg_sys::EState,
    _eflags: i32,
) {
    // SAFETY: PostgreSQL calls this once per node, after it opened the relation and made
    // the scan slot; the plan is ours (mod.rs), its private list as documented above.
    unsafe {
        let cscan = (*node).ss.ps.plan as *mut pg_sys::CustomScan;
        let private = list_pointers((*cscan).custom_private);
        let sql = CStr::from_ptr((*(private[0] as *mut pg_sys::String)).sval).to_owned();
        let attrs: Vec<i32> = crate::pg_list::list_ints(private[1] as *mut pg_sys::List);
        let server = pg_sys::Oid::from(int_of(private[2]) as u32);
        let user = pg_sys::Oid::from(int_of(private[3]) as u32);
        let exprs = list_pointers((*cscan).custom_exprs);
        let states = list_pointers(pg_sys::ExecInitExprList(
            (*cscan).custom_exprs,
            node as *mut pg_sys::PlanState,
        ));
        let params = exprs
            .iter()
            .zip(states)
            .map(|(e, s)| {
                (
                    s as *mut pg_sys::ExprState,
                    pg_sys::exprType(*e as *mut pg_sys::Node),
                )
            })
            .collect();
        let rel = (*node).ss.ss_currentRelation;
        let relid = (*rel).rd_id;
        let inputs = attrs
            .iter()
            .map(|&a| {
                let (mut typ, mut typmod, mut coll) =
                    (pg_sys::Oid::INVALID, 0i32, pg_sys::Oid::INVALID);
                pg_sys::get_atttypetypmodcoll(relid, a as i16, &mut typ, &mut typmod, &mut coll);
                let (mut func, mut ioparam) = (pg_sys::Oid::INVALID, pg_sys::Oid::INVALID);
                pg_sys::getTypeInputInfo(typ, &mut func, &mut ioparam);
                let mut finfo = pg_sys::FmgrInfo::default();
                pg_sys::fmgr_info(func, &mut finfo);
                (a as usize - 1, finfo, ioparam, typmod)
            })
            .collect();
        let row_cxt = pg_sys::AllocSetContextCreateExtended(
            (*estate).es_query_cxt,
            c"id_gen direct read rows".as_ptr(),
            pg_sys::ALLOCSET_DEFAULT_MINSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_INITSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_MAXSIZE as usize,
        );
        let run = Box::new(Run {
            server,
            user,
            name: connection::name_of(server),
            sql,
            params,
            inputs,
            phase: Phase::NotSent,
            deadline: Instant::now(),
            row_cxt,
            relid,
            conn: std::ptr::null_mut(),
            fresh: false,
            current: std::ptr::null_mut(),
        });
        // (The callback's memory first: nothing below can fail once the run is stored, so
        // the run and the claim are always given back by the cleanup.)
        let cb = pg_sys::MemoryContextAlloc(
            (*estate).es_query_cxt,
            std::mem::size_of::<pg_sys::MemoryContextCallback>(),
        ) as *mut pg_sys::MemoryContextCallback;
        let state = node as *mut DirectScanState;
        (*state).run = Box::into_raw(run);
        (*cb).func = Some(cleanup);
        (*cb).arg = state as *mut c_void;
        (*cb).next = std::ptr::null_mut();
        pg_sys::MemoryContextRegisterResetCallback((*estate).es_query_cxt, cb);
        // mod.rs planned this read only when no other read held the pair.
        if !connection::claim(server, user) {
            (*(*state).run).server = pg_sys::Oid::INVALID;
            crate::errors::raise(
                crate::errors::Code::ERRCODE_OBJECT_IN_USE,
                "id_gen: another portal of this session reads the same shard directly",
                Some("SET id_gen.direct_reads = off for this client."),
            );
        }
    }
}

/// The access method: raises a shard's error from this unguarded frame.
unsafe extern "C-unwind" fn next(ss: *mut pg_sys::ScanState) -> *mut pg_sys::TupleTableSlot {
    let mut failure: Option<RemoteError> = None;
    // SAFETY: the guarded part does the work; it leaves an error to raise in `failure`.
    let slot = unsafe { next_guarded(ss, &mut failure) };
    if let Some(e) = failure {
        // SAFETY: nothing in this frame needs a drop (an Option of plain pointers).
        unsafe { raise::raise_remote(e) }
    }
    slot
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn next_guarded(
    ss: *mut pg_sys::ScanState,
    failure: *mut Option<RemoteError>,
) -> *mut pg_sys::TupleTableSlot {
    // SAFETY: our node (ScanState first in it); `failure` is the caller's local.
    unsafe {
        let slot = (*ss).ss_ScanTupleSlot;
        let run = &mut *(*(ss as *mut DirectScanState)).run;
        match fetch(run, ss, slot) {
            Ok(s) => s,
            Err(e) => {
                *failure = Some(e);
                pg_sys::ExecClearTuple(slot)
            }
        }
    }
}

/// Sends the statement on the first call, then returns its next row (an empty slot at
/// the end).
///
/// # Safety
/// `ss` is the run's node, `slot` its scan slot.
unsafe fn fetch(
    run: &mut Run,
    ss: *mut pg_sys::ScanState,
    slot: *mut pg_sys::TupleTableSlot,
) -> Result<*mut pg_sys::TupleTableSlot, RemoteError> {
    let api = libpq::api().expect("a direct read is planned only where libpq loaded");
    if run.phase == Phase::Done {
        // SAFETY: our scan slot.
        return Ok(unsafe { pg_sys::ExecClearTuple(slot) });
    }
    let res = if run.phase == Phase::NotSent {
        // Planned outside a transaction block, but its portal was bound, other statements
        // ran, and only then was it executed: it would not see their writes on the shard.
        // SAFETY: reading backend globals.
        if unsafe {
            pg_sys::IsTransactionBlock()
                || pg_sys::MyXactFlags & pg_sys::XACT_FLAGS_PIPELINING as i32 != 0
        } {
            return Err(RemoteError::new(
                "0A000",
                "id_gen: a direct read bound outside a transaction block is executed inside one",
                Some("Its portal was bound before other statements of the same transaction ran; it would not see their writes on the shard."),
                Some("Execute a portal before running other statements, or SET id_gen.direct_reads = off for this client."),
                None,
            ));
        }
        // SAFETY: the node's expression context, reset per row by ExecScan.
        let params = unsafe { param_values(run, (*ss).ps.ps_ExprContext) };
        let mut retried = false;
        loop {
            // (`run.fresh` is the attempt's: send_statement sets it.)
            match send_statement(api, run, &params).and_then(|_| next_result(api, run)) {
                Ok(res) if run.fresh || retried || !failed_as_lost(api, run, res) => break res,
                // SAFETY: a result of ours, not kept.
                Ok(res) => unsafe { (api.PQclear)(res) },
                Err(e) if run.fresh || retried || !broken(&e) => return Err(e),
                Err(_) => {}
            }
            // A kept connection the shard closed or ended with a FATAL error (a restart, a
            // terminated backend, idle_session_timeout): once more on a new one, as
            // postgres_fdw does.
            connection::discard(run.server, run.user);
            run.phase = Phase::NotSent;
            retried = true;
        }
    } else {
        next_result(api, run)?
    };
    if res.is_null() {
        // The statement ended without a final status (not libpq's protocol): idle now.
        finish(run);
        // SAFETY: our scan slot.
        return Ok(unsafe { pg_sys::ExecClearTuple(slot) });
    }
    // SAFETY: a result of ours.
    let status = unsafe { (api.PQresultStatus)(res) };
    match status {
        libpq::PGRES_SINGLE_TUPLE => {
            // SAFETY: a result of ours.
            let fields = unsafe { (api.PQnfields)(res) } as usize;
            // No column asked for: postgres_fdw sends `SELECT NULL` (one column).
            if !run.inputs.is_empty() && fields != run.inputs.len() {
                return Err(RemoteError::new(
                    "42804",
                    &format!("id_gen: the rows of shard {} do not match the foreign table", run.name),
                    Some(&format!("{} columns came, {} were asked for.", fields, run.inputs.len())),
                    Some("The shard's table and the coordinator's foreign table differ: change both alike, or SET id_gen.direct_reads = off."),
                    None,
                ));
            }
            // SAFETY: one row of the statement; the tuple's values are made in the run's
            // row memory, reset before each row. The result stays in `current` until it
            // is freed here (the cleanup frees it if an input function raises).
            run.current = res;
            let stored = unsafe { store_row(api, run, res, slot) };
            run.current = std::ptr::null_mut();
            // SAFETY: as above.
            unsafe { (api.PQclear)(res) };
            Ok(stored)
        }
        libpq::PGRES_TUPLES_OK => {
            // SAFETY: a result of ours (a final status without rows: single-row mode).
            unsafe { (api.PQclear)(res) };
            drain(api, run)?;
            // SAFETY: our scan slot.
            Ok(unsafe { pg_sys::ExecClearTuple(slot) })
        }
        _ => {
            let e = connection::remote_error(api, res, Some(&run.sql));
            // SAFETY: as above.
            unsafe { (api.PQclear)(res) };
            // The shard's error is the one reported; a connection that does not settle is
            // closed by the cleanup.
            let _ = drain(api, run);
            Err(e)
        }
    }
}

/// Whether a first result is an error after which the connection is lost (read to its end
/// first, within the statement's bound).
fn failed_as_lost(api: &Api, run: &mut Run, res: *mut PGresult) -> bool {
    // SAFETY: a result of ours.
    if res.is_null() || unsafe { (api.PQresultStatus)(res) } != libpq::PGRES_FATAL_ERROR {
        return false;
    }
    loop {
        match connection::next_result(api, run.conn, run.deadline, &run.name) {
            Ok(Some(more)) => {
                // SAFETY: a result of ours.
                unsafe { (api.PQclear)(more) }
            }
            Ok(None) => return connection::lost(api, run.conn),
            // Lost while reading on (a timeout is not: the shard's error is reported).
            Err(e) => return broken(&e),
        }
    }
}

/// Whether an error is a connection lost or refused (08xxx).
fn broken(e: &RemoteError) -> bool {
    e.sqlstate.starts_with(b"08")
}

/// Takes a connection (opening one if needed) and sends the run's statement.
fn send_statement(api: &Api, run: &mut Run, params: &[Option<CString>]) -> Result<(), RemoteError> {
    // A connect that fails is not retried: only a kept connection that turns out broken.
    run.fresh = true;
    let (conn, fresh) = connection::acquire(api, run.server, run.user)?;
    run.conn = conn;
    run.fresh = fresh;
    run.deadline = Instant::now() + connection::statement_bound();
    connection::set_busy(run.server, run.user, true);
    run.phase = Phase::Rows;
    connection::send(api, conn, &run.sql, params, run.deadline, &run.name)
}

/// The statement's next result (NULL: it is done).
fn next_result(api: &Api, run: &mut Run) -> Result<*mut PGresult, RemoteError> {
    Ok(
        connection::next_result(api, run.conn, run.deadline, &run.name)?
            .unwrap_or(std::ptr::null_mut()),
    )
}

/// Reads the statement's remaining results (none but the end is expected), leaving the
/// connection idle.
fn drain(api: &Api, run: &mut Run) -> Result<(), RemoteError> {
    while let Some(res) = connection::next_result(api, run.conn, run.deadline, &run.name)? {
        // SAFETY: a result of ours.
        unsafe { (api.PQclear)(res) };
    }
    finish(run);
    Ok(())
}

fn finish(run: &mut Run) {
    run.phase = Phase::Done;
    connection::set_busy(run.server, run.user, false);
}

/// The parameters as text (their types are ones whose text does not depend on settings:
/// mod.rs plans a direct read only then).
///
/// # Safety
/// `econtext` is the node's expression context.
unsafe fn param_values(run: &Run, econtext: *mut pg_sys::ExprContext) -> Vec<Option<CString>> {
    run.params
        .iter()
        .map(|&(state, typ)| {
            let mut isnull = false;
            // SAFETY: an initialised expression of the node, evaluated in its context;
            // the output function of its type.
            unsafe {
                let d = pg_sys::ExecEvalExpr(state, econtext, &mut isnull);
                if isnull {
                    return None;
                }
                let (mut func, mut varlena) = (pg_sys::Oid::INVALID, false);
                pg_sys::getTypeOutputInfo(typ, &mut func, &mut varlena);
                Some(CStr::from_ptr(pg_sys::OidOutputFunctionCall(func, d)).to_owned())
            }
        })
        .collect()
}

/// Makes the result's one row the slot's tuple.
///
/// # Safety
/// `res` holds one row; `slot` is the scan slot of the run's relation.
unsafe fn store_row(
    api: &Api,
    run: &mut Run,
    res: *mut PGresult,
    slot: *mut pg_sys::TupleTableSlot,
) -> *mut pg_sys::TupleTableSlot {
    // SAFETY: as the caller promises; the values are made in the row memory, which lives
    // until the next row.
    unsafe {
        pg_sys::ExecClearTuple(slot);
        pg_sys::MemoryContextReset(run.row_cxt);
        let natts = (*(*slot).tts_tupleDescriptor).natts as usize;
        let values = std::slice::from_raw_parts_mut((*slot).tts_values, natts);
        let nulls = std::slice::from_raw_parts_mut((*slot).tts_isnull, natts);
        nulls.iter_mut().for_each(|n| *n = true);
        values
            .iter_mut()
            .for_each(|v| *v = pg_sys::Datum::from(0usize));
        let old = pg_sys::MemoryContextSwitchTo(run.row_cxt);
        let fields = (api.PQnfields)(res) as usize;
        for (col, (att, finfo, ioparam, typmod)) in run.inputs.iter_mut().enumerate().take(fields) {
            if (api.PQgetisnull)(res, 0, col as i32) != 0 {
                values[*att] =
                    pg_sys::InputFunctionCall(finfo, std::ptr::null_mut(), *ioparam, *typmod);
                nulls[*att] = true;
            } else {
                let text = (api.PQgetvalue)(res, 0, col as i32);
                values[*att] = pg_sys::InputFunctionCall(finfo, text as *mut _, *ioparam, *typmod);
                nulls[*att] = false;
            }
        }
        pg_sys::MemoryContextSwitchTo(old);
        pg_sys::ExecStoreVirtualTuple(slot);
        (*slot).tts_tableOid = run.relid;
        slot
    }
}

unsafe extern "C-unwind" fn recheck(
    _ss: *mut pg_sys::ScanState,
    _slot: *mut pg_sys::TupleTableSlot,
) -> bool {
    true
}

#[cfg_attr(target_os = "windows", link(name = "postgres"))]
unsafe extern "C-unwind" {
    /// PostgreSQL's ExecScan itself, not pgrx's guarded wrapper, which would turn an error
    /// of the access method into a panic and lose its SQLSTATE (when not PostgreSQL's own)
    /// and its context.
    #[link_name = "ExecScan"]
    fn exec_scan(
        node: *mut pg_sys::ScanState,
        access: pg_sys::ExecScanAccessMtd,
        recheck: pg_sys::ExecScanRecheckMtd,
    ) -> *mut pg_sys::TupleTableSlot;
}

/// Unguarded, so that a shard's error raised by the access method reaches PostgreSQL as
/// raised; nothing here needs a drop.
unsafe extern "C-unwind" fn exec(
    node: *mut pg_sys::CustomScanState,
) -> *mut pg_sys::TupleTableSlot {
    // SAFETY: ExecScan with our access method (mod.rs plans no row marks, so no recheck).
    unsafe { exec_scan(&mut (*node).ss, Some(next), Some(recheck)) }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn end(node: *mut pg_sys::CustomScanState) {
    // SAFETY: our node; the cleanup callback is idempotent (it clears the pointer).
    unsafe { cleanup(node as *mut c_void) }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn rescan(node: *mut pg_sys::CustomScanState) {
    // SAFETY: our node. A rescan sends the statement again (mod.rs plans a direct read only
    // where nothing rescans it; a connection left with rows on the way is closed).
    unsafe {
        let run = (*(node as *mut DirectScanState)).run;
        if !run.is_null() {
            stop(&mut *run);
            (*run).phase = Phase::NotSent;
        }
    }
}
