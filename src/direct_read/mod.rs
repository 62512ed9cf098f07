//! Direct reads on the coordinator (docs/design.md §11.9): a read-only statement that runs
//! in a transaction of its own reads each shard's foreign table in one round trip on
//! id_gen's own connection, instead of postgres_fdw's five (START TRANSACTION, DECLARE,
//! FETCH, CLOSE, COMMIT), which made a coordinator's lookup cost 5-6 times the same lookup
//! on the shard.
//!
//! At executor start, the plan of a SELECT the client sent (not one run by a function, a
//! procedure, a DO block, EXECUTE, EXPLAIN ANALYZE or a cursor WITH HOLD; outside a
//! transaction block, explicit, implicit or a pipeline's, and still outside one when it is
//! sent: a portal bound before other statements ran gets 0A000; below SERIALIZABLE; no FOR
//! UPDATE, no data-modifying WITH, no subplan or InitPlan, no volatile function anywhere in
//! it, no cursor that can go back) is copied, and each postgres_fdw ForeignScan of a distributed table's foreign table that
//! nothing rescans (it is reached from the plan's top through Append, MergeAppend, Result,
//! Limit, Sort, Agg, Group, Unique, WindowAgg, SubqueryScan and ProjectSet only), that is not
//! one of an Append's asynchronous scans (`async_capable` servers keep postgres_fdw's
//! concurrent scans), that is the statement's only scan of its server, whose server and user
//! mapping hold only options postgres_fdw and id_gen both understand, and whose (server,
//! user) pair no other open portal of the session is reading, is replaced by the CustomScan
//! of `scan.rs`, which sends the statement postgres_fdw deparsed for it (`fdw_private`), with
//! the same parameters. The plan cache keeps postgres_fdw's plan; EXPLAIN shows it.
//!
//! Why it reads the same rows: postgres_fdw reads a shard in a REPEATABLE READ transaction
//! that lasts as long as the coordinator's, so that every scan of that shard in the
//! transaction sees one snapshot and the transaction's own writes there. A transaction that
//! is this one statement, with one scan per shard that runs once, has nothing to share a
//! snapshot with: a single statement on the shard sees what that transaction would have
//! seen. Anything else (a transaction block, a function's statements, a second scan of the
//! same shard, a rescan) reads through postgres_fdw as before. The coordinator's locks are
//! taken as before (the relations stay in the plan), so moves' fences hold these reads too.
//!
//! Invariants: `id_gen.direct_reads = off` turns it off; a server whose foreign data wrapper
//! is not postgres_fdw, or a table that is not a distributed table's, is never read here;
//! parameters are sent only of types whose text does not depend on settings; the hooks
//! chain to the previous ones.

mod connection;
mod libpq;
mod scan;

use crate::pg_list::list_pointers;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::collections::HashMap;

thread_local! {
    /// Foreign tables by OID: whether they are a distributed table's, over postgres_fdw.
    static DISTRIBUTED: RefCell<HashMap<u32, bool>> = RefCell::new(HashMap::new());
}

static PREV_START: std::sync::OnceLock<pg_sys::ExecutorStart_hook_type> =
    std::sync::OnceLock::new();

/// Installs the hooks and the cache callbacks (from `_PG_init`).
pub fn install() {
    // SAFETY: _PG_init runs once per process before any query; each hook chains to the
    // one it replaces. The callbacks only forget cached state.
    unsafe {
        if PREV_START.set(pg_sys::ExecutorStart_hook).is_ok() {
            pg_sys::ExecutorStart_hook = Some(executor_start);
        }
        pg_sys::CacheRegisterRelcacheCallback(Some(relation_changed), pg_sys::Datum::from(0));
        for cache in [
            pg_sys::SysCacheIdentifier::FOREIGNSERVEROID,
            pg_sys::SysCacheIdentifier::USERMAPPINGOID,
            pg_sys::SysCacheIdentifier::AUTHOID,
        ] {
            pg_sys::CacheRegisterSyscacheCallback(
                cache as i32,
                Some(server_changed),
                pg_sys::Datum::from(0),
            );
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn relation_changed(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    DISTRIBUTED.with(|d| {
        let mut d = d.borrow_mut();
        if relid == pg_sys::Oid::INVALID {
            d.clear();
        } else {
            d.remove(&relid.to_u32());
        }
    });
}

#[pg_guard]
unsafe extern "C-unwind" fn server_changed(_arg: pg_sys::Datum, _cache: i32, _hash: u32) {
    connection::forget_all();
}

/// The hook: unguarded, so that an error of the executor start it calls (the routing
/// guard's IG001 on a shard among them) keeps its SQLSTATE; nothing here needs a drop.
unsafe extern "C-unwind" fn executor_start(qd: *mut pg_sys::QueryDesc, eflags: i32) {
    // SAFETY: a valid QueryDesc; its plan is replaced by a copy before the executor reads
    // it, never changed in place (the plan cache owns the original).
    unsafe {
        let copy = direct_plan_guarded(qd, eflags);
        if !copy.is_null() {
            (*qd).plannedstmt = copy;
        }
        match PREV_START.get().copied().flatten() {
            Some(prev) => prev(qd, eflags),
            None => pg_sys::standard_ExecutorStart(qd, eflags),
        }
    }
}

/// The statement's plan with direct reads in it, or NULL.
#[pg_guard]
unsafe extern "C-unwind" fn direct_plan_guarded(
    qd: *mut pg_sys::QueryDesc,
    eflags: i32,
) -> *mut pg_sys::PlannedStmt {
    // SAFETY: as the hook's caller promises.
    unsafe { direct_plan(qd, eflags).unwrap_or(std::ptr::null_mut()) }
}

/// Whether the statement starting is the one the client sent (not one a function,
/// procedure, DO block, trigger or EXPLAIN runs): its text is the text being executed,
/// as PostgreSQL keeps it in `debug_query_string` (simple and extended protocol alike; a
/// nested statement's text is its function's, or a part of it).
///
/// # Safety
/// `qd` is a valid QueryDesc.
unsafe fn is_clients_statement(qd: *mut pg_sys::QueryDesc) -> bool {
    // SAFETY: reading a backend global and the QueryDesc; both strings NUL-terminated.
    unsafe {
        let top = pg_sys::debug_query_string;
        let own = (*qd).sourceText;
        !top.is_null()
            && !own.is_null()
            && (top == own || std::ffi::CStr::from_ptr(top) == std::ffi::CStr::from_ptr(own))
    }
}

/// Whether this statement may read directly at all.
///
/// # Safety
/// `qd` is a valid QueryDesc.
unsafe fn statement_qualifies(qd: *mut pg_sys::QueryDesc, eflags: i32) -> bool {
    let refused = (pg_sys::EXEC_FLAG_EXPLAIN_ONLY
        | pg_sys::EXEC_FLAG_REWIND
        | pg_sys::EXEC_FLAG_BACKWARD
        | pg_sys::EXEC_FLAG_MARK) as i32;
    // SAFETY: reading the QueryDesc and backend globals.
    unsafe {
        let stmt = (*qd).plannedstmt;
        crate::gucs::DIRECT_READS.get()
            && eflags & refused == 0
            && (*qd).instrument_options == 0
            && (*qd).operation == pg_sys::CmdType::CMD_SELECT
            && !stmt.is_null()
            && (*stmt).commandType == pg_sys::CmdType::CMD_SELECT
            && (*stmt).utilityStmt.is_null()
            && !(*stmt).hasModifyingCTE
            && (*stmt).rowMarks.is_null()
            && (*stmt).subplans.is_null()
            && pg_sys::ParallelWorkerNumber < 0
            && !pg_sys::IsTransactionBlock()
            && pg_sys::MyXactFlags & pg_sys::XACT_FLAGS_PIPELINING as i32 == 0
            && pg_sys::XactIsoLevel < pg_sys::XACT_SERIALIZABLE as i32
            && is_clients_statement(qd)
            && !holdable_cursor()
    }
}

/// Whether the portal being started is a cursor WITH HOLD (its rows are read at the commit,
/// after other statements of the transaction may have run: postgres_fdw's, whose remote
/// transaction they would share).
fn holdable_cursor() -> bool {
    // SAFETY: PortalStart sets ActivePortal to the portal it starts; reading its options.
    unsafe {
        let portal = pg_sys::ActivePortal;
        !portal.is_null() && (*portal).cursorOptions & pg_sys::CURSOR_OPT_HOLD as i32 != 0
    }
}

/// A ForeignScan met in the plan, in walk order.
struct Found {
    server: pg_sys::Oid,
    user: pg_sys::Oid,
    reusable: bool,
}

/// Where a plan node keeps its children, in a fixed order: the members of an Append,
/// MergeAppend, BitmapAnd or BitmapOr, a CustomScan's plans, a SubqueryScan's subplan, then
/// the left and right trees (only those that are there).
///
/// # Safety
/// `plan` is a valid plan node; the slots may be written only in a tree this statement owns.
unsafe fn child_slots(plan: *mut pg_sys::Plan) -> Vec<*mut *mut pg_sys::Plan> {
    use pg_sys::NodeTag::*;
    // SAFETY: each node is read as the struct its tag names; a List holds `length` cells.
    unsafe {
        let list = match (*plan).type_ {
            T_Append => (*(plan as *mut pg_sys::Append)).appendplans,
            T_MergeAppend => (*(plan as *mut pg_sys::MergeAppend)).mergeplans,
            T_BitmapAnd => (*(plan as *mut pg_sys::BitmapAnd)).bitmapplans,
            T_BitmapOr => (*(plan as *mut pg_sys::BitmapOr)).bitmapplans,
            T_CustomScan => (*(plan as *mut pg_sys::CustomScan)).custom_plans,
            _ => std::ptr::null_mut(),
        };
        let mut slots: Vec<*mut *mut pg_sys::Plan> = Vec::new();
        if !list.is_null() {
            for i in 0..(*list).length as usize {
                let cell = (*list).elements.add(i);
                slots.push(std::ptr::addr_of_mut!((*cell).ptr_value) as *mut *mut pg_sys::Plan);
            }
        }
        if (*plan).type_ == T_SubqueryScan {
            slots.push(std::ptr::addr_of_mut!(
                (*(plan as *mut pg_sys::SubqueryScan)).subplan
            ));
        }
        slots.push(std::ptr::addr_of_mut!((*plan).lefttree));
        slots.push(std::ptr::addr_of_mut!((*plan).righttree));
        slots.retain(|&slot| !(*slot).is_null());
        slots
    }
}

/// Walks the plan tree in `slot` in `child_slots`' order, calling `visit` with the slot of
/// each ForeignScan and whether it is reached through pass-through nodes only (`on_chain`):
/// nodes that run each child once, at most as often as they run themselves. `visit` may put
/// another node in the slot (the walk does not go below a ForeignScan).
///
/// # Safety
/// `slot` holds a valid plan tree.
unsafe fn walk(
    slot: *mut *mut pg_sys::Plan,
    on_chain: bool,
    visit: &mut dyn FnMut(*mut *mut pg_sys::Plan, bool),
) {
    use pg_sys::NodeTag::*;
    // SAFETY: a valid node; its children are.
    unsafe {
        let plan = *slot;
        let tag = (*plan).type_;
        if tag == T_ForeignScan {
            visit(slot, on_chain);
            return;
        }
        let passes = matches!(
            tag,
            T_Append
                | T_MergeAppend
                | T_Result
                | T_Limit
                | T_Sort
                | T_IncrementalSort
                | T_Agg
                | T_Group
                | T_Unique
                | T_WindowAgg
                | T_SubqueryScan
                | T_ProjectSet
        );
        for child in child_slots(plan) {
            walk(child, on_chain && passes, visit);
        }
    }
}

/// Calls `visit` for every node of a plan tree.
///
/// # Safety
/// `plan` is NULL or a valid plan tree.
unsafe fn for_each_node(plan: *mut pg_sys::Plan, visit: &mut dyn FnMut(*mut pg_sys::Plan)) {
    if plan.is_null() {
        return;
    }
    // SAFETY: a valid node; its children are.
    unsafe {
        visit(plan);
        for child in child_slots(plan) {
            for_each_node(*child, visit);
        }
    }
}

/// Whether a plan node's expressions call a volatile function (one that could write through
/// postgres_fdw in the statement's remote transaction before a direct read is sent, which
/// would then not see it): its target list and quals, and the expressions of the nodes that
/// have more (limits, join quals, index quals, function scans, VALUES, the parameters sent to
/// a shard).
///
/// # Safety
/// `plan` is a valid plan node.
unsafe fn has_volatile_functions(plan: *mut pg_sys::Plan) -> bool {
    use pg_sys::NodeTag::*;
    // SAFETY: each node is read as the struct its tag names; the expressions are valid
    // expression trees or lists of them.
    unsafe {
        let mut exprs: Vec<*mut pg_sys::Node> = vec![
            (*plan).targetlist as *mut pg_sys::Node,
            (*plan).qual as *mut pg_sys::Node,
        ];
        match (*plan).type_ {
            T_Limit => {
                let l = plan as *mut pg_sys::Limit;
                exprs.extend([(*l).limitOffset, (*l).limitCount]);
            }
            T_Result => exprs.push((*(plan as *mut pg_sys::Result)).resconstantqual),
            T_ForeignScan => {
                exprs.push((*(plan as *mut pg_sys::ForeignScan)).fdw_exprs as *mut pg_sys::Node)
            }
            T_IndexScan => {
                exprs.push((*(plan as *mut pg_sys::IndexScan)).indexqualorig as *mut pg_sys::Node)
            }
            T_BitmapHeapScan => exprs
                .push((*(plan as *mut pg_sys::BitmapHeapScan)).bitmapqualorig as *mut pg_sys::Node),
            T_FunctionScan => {
                exprs.push((*(plan as *mut pg_sys::FunctionScan)).functions as *mut pg_sys::Node)
            }
            T_ValuesScan => {
                exprs.push((*(plan as *mut pg_sys::ValuesScan)).values_lists as *mut pg_sys::Node)
            }
            T_TableFuncScan => {
                exprs.push((*(plan as *mut pg_sys::TableFuncScan)).tablefunc as *mut pg_sys::Node)
            }
            T_SampleScan => {
                exprs.push((*(plan as *mut pg_sys::SampleScan)).tablesample as *mut pg_sys::Node)
            }
            T_WindowAgg => {
                let w = plan as *mut pg_sys::WindowAgg;
                exprs.extend([(*w).startOffset, (*w).endOffset]);
            }
            T_NestLoop | T_MergeJoin | T_HashJoin => {
                exprs.push((*(plan as *mut pg_sys::Join)).joinqual as *mut pg_sys::Node)
            }
            _ => {}
        }
        exprs
            .into_iter()
            .any(|e| !e.is_null() && pg_sys::contain_volatile_functions(e))
    }
}

/// The statement's plan with direct reads in it, or None when it has none.
///
/// # Safety
/// `qd` is a valid QueryDesc about to start.
unsafe fn direct_plan(qd: *mut pg_sys::QueryDesc, eflags: i32) -> Option<*mut pg_sys::PlannedStmt> {
    // SAFETY: as the caller promises.
    unsafe {
        if !statement_qualifies(qd, eflags) {
            return None;
        }
        let stmt = (*qd).plannedstmt;
        let mut found: Vec<Found> = Vec::new();
        // (The walk only reads the plan cache's tree.)
        walk(
            std::ptr::addr_of_mut!((*stmt).planTree),
            true,
            &mut |slot, on_chain| {
                let fs = *slot as *mut pg_sys::ForeignScan;
                found.push(Found {
                    server: (*fs).fs_server,
                    user: scan_user(stmt, fs),
                    reusable: on_chain && replaceable(stmt, fs),
                })
            },
        );
        if !found.iter().any(|f| f.reusable) {
            return None;
        }
        let mut volatile = false;
        for_each_node((*stmt).planTree, &mut |p| {
            volatile = volatile || has_volatile_functions(p)
        });
        if volatile {
            return None;
        }
        let scans_of = |server: pg_sys::Oid| found.iter().filter(|f| f.server == server).count();
        let chosen: Vec<bool> = found
            .iter()
            .map(|f| {
                f.reusable
                    && scans_of(f.server) == 1
                    && !connection::claimed(f.server, f.user)
                    && connection::usable(f.server, f.user)
            })
            .collect();
        if !chosen.iter().any(|&c| c) || libpq::api().is_none() {
            return None;
        }
        let copy =
            pg_sys::palloc(std::mem::size_of::<pg_sys::PlannedStmt>()) as *mut pg_sys::PlannedStmt;
        *copy = *stmt;
        (*copy).planTree = pg_sys::copyObjectImpl((*stmt).planTree as *const std::ffi::c_void)
            as *mut pg_sys::Plan;
        // The copy has the same ForeignScans in the same walk order.
        let mut nth = 0usize;
        walk(
            std::ptr::addr_of_mut!((*copy).planTree),
            true,
            &mut |slot, _| {
                if chosen[nth] {
                    *slot = direct_scan(*slot as *mut pg_sys::ForeignScan, found[nth].user);
                }
                nth += 1;
            },
        );
        Some(copy)
    }
}

/// The types of parameters sent as text: their output does not depend on settings.
const PLAIN_PARAM_TYPES: [u32; 11] = [
    20,   // int8
    21,   // int2
    23,   // int4
    25,   // text
    26,   // oid
    16,   // bool
    19,   // name
    1043, // varchar
    1042, // bpchar
    2950, // uuid
    1700, // numeric
];

/// Whether this ForeignScan can be read directly: postgres_fdw's scan of one foreign table
/// of a distributed table, not one of an Append's asynchronous scans, retrieving its own
/// columns, with parameters of plain types.
///
/// # Safety
/// `stmt` and `fs` are valid.
unsafe fn replaceable(stmt: *mut pg_sys::PlannedStmt, fs: *mut pg_sys::ForeignScan) -> bool {
    // SAFETY: reading the plan; the private list is read as postgres_fdw's only once the
    // table is known to be a distributed table's (whose foreign tables are postgres_fdw's).
    unsafe {
        let scanrelid = (*fs).scan.scanrelid;
        if scanrelid == 0
            || !(*fs).fdw_scan_tlist.is_null()
            || (*fs).operation != pg_sys::CmdType::CMD_SELECT
            || (*fs).scan.plan.async_capable
        {
            // A join or aggregate pushed down, or an Append's asynchronous scan (postgres_fdw
            // runs those concurrently): postgres_fdw's.
            return false;
        }
        let rte =
            pg_sys::list_nth((*stmt).rtable, scanrelid as i32 - 1) as *mut pg_sys::RangeTblEntry;
        if !is_distributed((*rte).relid) {
            return false;
        }
        let list = (*fs).fdw_private;
        if list.is_null() || (*list).type_ != pg_sys::NodeTag::T_List {
            return false;
        }
        let private = list_pointers(list);
        if private.len() < 2
            || private[0].is_null()
            || (*(private[0] as *mut pg_sys::Node)).type_ != pg_sys::NodeTag::T_String
            || !retrieved_attrs_plain(private[1] as *mut pg_sys::List)
        {
            return false;
        }
        list_pointers((*fs).fdw_exprs)
            .into_iter()
            .all(|e| PLAIN_PARAM_TYPES.contains(&pg_sys::exprType(e as *mut pg_sys::Node).to_u32()))
    }
}

/// Retrieved attributes: postgres_fdw's integer List of positive attribute numbers (NIL:
/// none).
///
/// # Safety
/// `list` is NIL or a List.
unsafe fn retrieved_attrs_plain(list: *mut pg_sys::List) -> bool {
    // SAFETY: the list's tag is checked before its cells are read as integers.
    unsafe {
        list.is_null()
            || ((*list).type_ == pg_sys::NodeTag::T_IntList
                && crate::pg_list::list_ints(list).into_iter().all(|a| a > 0))
    }
}

/// Whether a foreign table is a distributed table's (a partition of one, at any depth) and
/// read through postgres_fdw; cached per backend until the relation changes.
fn is_distributed(relid: pg_sys::Oid) -> bool {
    if let Some(known) = DISTRIBUTED.with(|d| d.borrow().get(&relid.to_u32()).copied()) {
        return known;
    }
    // SAFETY: a catalog lookup by name.
    let installed =
        unsafe { pg_sys::get_extension_oid(c"id_gen".as_ptr(), true) } != pg_sys::Oid::INVALID;
    // (Its own statement starts no direct read: it is not the client's, is_clients_statement.)
    let answer = installed
        && {
            Spi::get_one_with_args::<bool>(
            "SELECT EXISTS (SELECT FROM pg_catalog.pg_foreign_table ft \
               JOIN pg_catalog.pg_foreign_server s ON s.oid OPERATOR(pg_catalog.=) ft.ftserver \
               JOIN pg_catalog.pg_foreign_data_wrapper w ON w.oid OPERATOR(pg_catalog.=) s.srvfdw \
              WHERE ft.ftrelid OPERATOR(pg_catalog.=) $1 AND w.fdwname OPERATOR(pg_catalog.=) 'postgres_fdw') \
             AND EXISTS (SELECT FROM pg_catalog.pg_partition_ancestors($1) a(relid) \
               JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) a.relid \
               JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
               JOIN id_gen.distributed_tables d ON d.schema_name OPERATOR(pg_catalog.=) n.nspname \
                AND d.partitioned_name OPERATOR(pg_catalog.=) c.relname)",
            &[relid.into()],
        )
        .ok()
        .flatten()
        .unwrap_or(false)
        };
    DISTRIBUTED.with(|d| d.borrow_mut().insert(relid.to_u32(), answer));
    answer
}

/// The CustomScan that reads what `fs` read, with `user`'s mapping (see scan.rs for its
/// private list).
///
/// # Safety
/// `fs` is the copy's; the result is palloc'd with it.
unsafe fn direct_scan(fs: *mut pg_sys::ForeignScan, user: pg_sys::Oid) -> *mut pg_sys::Plan {
    // SAFETY: as the caller promises.
    unsafe {
        let private = list_pointers((*fs).fdw_private);
        let cs =
            pg_sys::palloc0(std::mem::size_of::<pg_sys::CustomScan>()) as *mut pg_sys::CustomScan;
        (*cs).scan = (*fs).scan;
        (*cs).scan.plan.type_ = pg_sys::NodeTag::T_CustomScan;
        (*cs).flags = 0;
        (*cs).custom_exprs = (*fs).fdw_exprs;
        let mut list: *mut pg_sys::List = std::ptr::null_mut();
        list = pg_sys::lappend(list, private[0]);
        list = pg_sys::lappend(list, private[1]);
        list = pg_sys::lappend(
            list,
            pg_sys::makeInteger((*fs).fs_server.to_u32() as i32) as *mut std::ffi::c_void,
        );
        list = pg_sys::lappend(
            list,
            pg_sys::makeInteger(user.to_u32() as i32) as *mut std::ffi::c_void,
        );
        (*cs).custom_private = list;
        (*cs).custom_relids = (*fs).fs_relids;
        (*cs).methods = &scan::SCAN_METHODS.0;
        cs as *mut pg_sys::Plan
    }
}

/// The role whose user mapping the scan uses: the view owner's or the current user.
///
/// # Safety
/// `stmt` and `fs` are valid.
unsafe fn scan_user(stmt: *mut pg_sys::PlannedStmt, fs: *mut pg_sys::ForeignScan) -> pg_sys::Oid {
    // SAFETY: reading the plan (the range table entry of the scan).
    unsafe {
        #[cfg(feature = "pg15")]
        let as_user = {
            let rte = pg_sys::list_nth((*stmt).rtable, (*fs).scan.scanrelid as i32 - 1)
                as *mut pg_sys::RangeTblEntry;
            (*rte).checkAsUser
        };
        #[cfg(not(feature = "pg15"))]
        let as_user = {
            let _ = stmt;
            (*fs).checkAsUser
        };
        if as_user == pg_sys::Oid::INVALID {
            pg_sys::GetUserId()
        } else {
            as_user
        }
    }
}

/// This backend's direct-read connections (a row each).
#[pg_extern(volatile, parallel_restricted)]
fn direct_read_connections() -> TableIterator<
    'static,
    (
        name!(server, String),
        name!(user_name, String),
        name!(connected_at, pgrx::datum::TimestampWithTimeZone),
        name!(reads, i64),
        name!(busy, bool),
    ),
> {
    let rows: Vec<_> = connection::status()
        .into_iter()
        .map(|s| {
            // SAFETY: a role name lookup by OID (NULL when dropped).
            let user = unsafe {
                let n = pg_sys::GetUserNameFromId(s.user, true);
                if n.is_null() {
                    s.user.to_u32().to_string()
                } else {
                    std::ffi::CStr::from_ptr(n).to_string_lossy().into_owned()
                }
            };
            let at = pgrx::datum::TimestampWithTimeZone::try_from(s.connected_at)
                .unwrap_or(pgrx::datum::TimestampWithTimeZone::try_from(0i64).expect("epoch"));
            (connection::name_of(s.server), user, at, s.reads, s.busy)
        })
        .collect();
    TableIterator::new(rows)
}
