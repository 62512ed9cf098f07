//! The executor-start check: a scan that the partition pruning left on a table's
//! tombstone (genes this shard does not own) or on a fenced partition, whose rows are
//! selected by id, gets an ExecProcNode that refuses it (IG001 / IG002) when it first runs.
//! A scan of a table laid out by ownership that selects by id is handed to `owned_scan.rs`,
//! which checks the values it selects.
//! Pruning at plan time and the initial pruning of generic plans have already removed the
//! scans they could; a scan that execution-time pruning (a parameter from a subquery or a
//! join) skips never runs, so it never fails; a scan that runs would be answered by a
//! shard that does not own those genes.
//!
//! "Selected by id", whatever the plan:
//!   * the scan's own predicates (filter, index, bitmap, TID conditions) bound the id
//!     column on both sides: `id = x`, `id = ANY (...)`, `IN (subquery)`, `BETWEEN`,
//!     `id >= a AND id < b`, `IS NOT DISTINCT FROM`; a one-sided bound (`id > last`, an
//!     owner's pagination), `id IS NOT NULL` (`min(id)`) or an expression of the id
//!     (`id % 2`) does not select ids, so the shard answers with its own rows;
//!   * a nested-loop join by id reaches the scan as an index condition on a parameter,
//!     so it counts as the scan's own. Hash and merge joins by id are `join_check.rs`'s:
//!     the tombstone's scan carries no id predicate there, and it is scanned on the owner
//!     too, where the join must answer.
//!
//! An old partition that a split or merge swapped out (trigger `id_gen_retired`, until the
//! coordinator's half of the swap commits and the cleanup drops it) refuses every scan
//! (IG002), whatever its predicates: only the coordinator's foreign tables of the old
//! ranges still name it, and their rows are in the new partitions.
//!
//! Invariants: only plan-state nodes that exist are looked at; a scan with no predicate on
//! the id column (a shard-local `SELECT count(*)`) is left alone: it sees this shard's
//! rows only. Reads the relcache of relations the executor has already opened and
//! locked; runs no SQL here (the refusal may, in the backend that raises it, but never in
//! parallel mode).

use super::id_predicates::selects_by_column;
use super::raise::Verdict;
use pgrx::pg_sys;
use std::ffi::CStr;

/// What the triggers on a relation say about it.
pub enum Guarded {
    /// A tombstone: genes not owned; the id column's attribute number.
    NotOwned(i16),
    /// A partition fenced for a cut-over.
    Fenced,
    /// An old partition that a split or merge swapped out (detached, kept until its
    /// cleanup): every scan of it is refused, whatever its predicates.
    Retired,
    /// A table laid out by ownership (one relation, what it owns recorded as data; its
    /// trigger `id_gen_owned_rows`): a scan that selects by id is checked by the values of
    /// its bounds (`owned_scan.rs`); the id column's attribute number.
    ByOwnership(i16),
}

/// Looks for id_gen's guard triggers on an open relation.
///
/// # Safety
/// `rel` must be a valid, open relation.
pub unsafe fn guard_of(rel: pg_sys::Relation) -> Option<Guarded> {
    // SAFETY: a valid relation's trigdesc is NULL or points at numtriggers triggers.
    unsafe {
        if rel.is_null() || (*rel).trigdesc.is_null() {
            return None;
        }
        let is_partition = (*(*rel).rd_rel).relispartition;
        let td = (*rel).trigdesc;
        for i in 0..(*td).numtriggers as usize {
            let t = (*td).triggers.add(i);
            if (*t).tgenabled == b'D' as std::ffi::c_char || (*t).tgisinternal {
                continue;
            }
            match CStr::from_ptr((*t).tgname).to_bytes() {
                b"id_gen_retired" => return Some(Guarded::Retired),
                b"id_gen_owned_rows" if !is_partition => {
                    // The id column by name (its first argument), as for a tombstone.
                    let attnum = if (*t).tgnargs >= 1 {
                        pg_sys::get_attnum((*rel).rd_id, *(*t).tgargs)
                    } else {
                        0
                    };
                    return Some(Guarded::ByOwnership(attnum.max(0)));
                }
                _ if !is_partition => {}
                b"id_gen_move_fence" => return Some(Guarded::Fenced),
                b"id_gen_not_owned" => {
                    // The id column by name (its second argument): attribute numbers change
                    // when a dump restores a table that had dropped columns.
                    let attnum = if (*t).tgnargs >= 2 {
                        pg_sys::get_attnum((*rel).rd_id, *(*t).tgargs.add(1))
                    } else {
                        0
                    };
                    return Some(Guarded::NotOwned(attnum.max(0)));
                }
                _ => {}
            }
        }
        None
    }
}

/// Walks a plan-state tree and arms every guarded scan that selects by id: its
/// ExecProcNode becomes [`refuse_scan`].
///
/// # Safety
/// `ps` must be NULL or a plan-state tree built by ExecInitNode.
pub unsafe fn check_scans(ps: *mut pg_sys::PlanState) {
    if ps.is_null() {
        return;
    }
    // SAFETY: every node of an initialised tree is a valid PlanState of its tag.
    unsafe {
        let tag = (*ps).type_;
        if is_relation_scan(tag) {
            let rel = (*(ps as *mut pg_sys::ScanState)).ss_currentRelation;
            let guard = guard_of(rel);
            if matches!(guard, Some(Guarded::Retired)) {
                arm(ps);
            } else if let Some(Guarded::ByOwnership(id_attnum)) = guard {
                // The genes owned as of now, before a parallel plan starts (in its leader a
                // view loaded in parallel mode is not kept: the view's test of each row
                // would load it again).
                let owned = super::owned_ranges::current();
                if id_attnum > 0 && selects_by_column((*ps).plan, id_attnum) {
                    super::owned_scan::arm(ps, id_attnum, owned);
                }
            } else if let Some(id_attnum) = guarded_id_column(rel) {
                if selects_by_column((*ps).plan, id_attnum) {
                    arm(ps);
                }
            }
        }
        for c in children(ps) {
            check_scans(c);
        }
    }
}

/// Scan states whose relation is a table (ss_currentRelation set).
pub(super) fn is_relation_scan(tag: pg_sys::NodeTag) -> bool {
    use pg_sys::NodeTag::*;
    matches!(
        tag,
        T_SeqScanState
            | T_IndexScanState
            | T_IndexOnlyScanState
            | T_BitmapHeapScanState
            | T_SampleScanState
            | T_TidScanState
            | T_TidRangeScanState
    )
}

/// For a guarded relation (tombstone or fenced partition), its id column (0: unknown, any
/// predicate counts); None for any other relation.
pub(super) unsafe fn guarded_id_column(rel: pg_sys::Relation) -> Option<i16> {
    // SAFETY: `rel` is an open relation of a scan state (or NULL).
    unsafe {
        Some(match guard_of(rel)? {
            Guarded::NotOwned(a) => a,
            Guarded::Fenced => id_attnum_of_fenced(rel),
            Guarded::Retired => 0,
            Guarded::ByOwnership(a) => a,
        })
    }
}

/// Replaces a scan's ExecProcNode with its refusal (ExecProcNodeReal stays: the refusal
/// runs the scan itself when the guard is gone by then, a fence lifted before a cursor's
/// first FETCH).
unsafe fn arm(ps: *mut pg_sys::PlanState) {
    // SAFETY: `ps` is a valid scan state.
    unsafe { (*ps).ExecProcNode = Some(refuse_scan) };
}

/// The child plan states of a node.
pub(super) unsafe fn children(ps: *mut pg_sys::PlanState) -> Vec<*mut pg_sys::PlanState> {
    // SAFETY: `ps` is a valid plan state of its tag.
    unsafe {
        use pg_sys::NodeTag::*;
        let mut out: Vec<*mut pg_sys::PlanState> = match (*ps).type_ {
            T_AppendState => {
                let a = ps as *mut pg_sys::AppendState;
                (0..(*a).as_nplans as usize)
                    .map(|i| *(*a).appendplans.add(i))
                    .collect()
            }
            T_MergeAppendState => {
                let m = ps as *mut pg_sys::MergeAppendState;
                (0..(*m).ms_nplans as usize)
                    .map(|i| *(*m).mergeplans.add(i))
                    .collect()
            }
            T_SubqueryScanState => vec![(*(ps as *mut pg_sys::SubqueryScanState)).subplan],
            _ => vec![],
        };
        out.extend([(*ps).lefttree, (*ps).righttree]);
        out.extend(sub_plan_states((*ps).initPlan));
        out.extend(sub_plan_states((*ps).subPlan));
        out.retain(|c| !c.is_null());
        out
    }
}

/// The ExecProcNode of an armed scan: raises the refusal the first time the scan runs.
/// Unguarded, so that it can raise an IG-class error (see `raise.rs`).
unsafe extern "C-unwind" fn refuse_scan(ps: *mut pg_sys::PlanState) -> *mut pg_sys::TupleTableSlot {
    let mut verdict: Option<Verdict> = None;
    // SAFETY: `ps` is the scan state armed by check_scans.
    unsafe { scan_verdict(ps, &mut verdict) };
    match verdict {
        // SAFETY: nothing in this frame needs dropping.
        Some(v) => unsafe { super::raise::raise(v) },
        // SAFETY: the node's own function, which ExecInitNode set and arming left alone.
        None => unsafe { run_real(ps) },
    }
}

/// Disarms a node and runs it.
unsafe fn run_real(ps: *mut pg_sys::PlanState) -> *mut pg_sys::TupleTableSlot {
    // SAFETY: the node's own function, which ExecInitNode set and arming left alone.
    unsafe {
        (*ps).ExecProcNode = (*ps).ExecProcNodeReal;
        match (*ps).ExecProcNodeReal {
            Some(real) => real(ps),
            None => std::ptr::null_mut(),
        }
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn scan_verdict(
    ps: *mut pg_sys::PlanState,
    verdict: *mut Option<Verdict>,
) {
    // SAFETY: an armed scan state has an open relation; `verdict` is the caller's local.
    unsafe {
        let rel = (*(ps as *mut pg_sys::ScanState)).ss_currentRelation;
        *verdict = match guard_of(rel) {
            Some(Guarded::NotOwned(_)) => Some(Verdict::not_owned((*rel).rd_id)),
            Some(Guarded::Fenced | Guarded::Retired) => Some(Verdict::fenced((*rel).rd_id)),
            // (Not armed here: owned_scan.rs wraps those scans.)
            Some(Guarded::ByOwnership(_)) | None => None,
        };
    }
}

/// The plan states of a List of SubPlanState.
unsafe fn sub_plan_states(list: *mut pg_sys::List) -> Vec<*mut pg_sys::PlanState> {
    // SAFETY: initPlan/subPlan are Lists of SubPlanState (or NIL).
    unsafe {
        crate::pg_list::list_pointers(list)
            .into_iter()
            .map(|p| (*(p as *mut pg_sys::SubPlanState)).planstate)
            .collect()
    }
}

/// A fenced partition's id column: the fence trigger's third argument (shard_fence
/// records it); 0 (any predicate counts) for a fence without it.
unsafe fn id_attnum_of_fenced(rel: pg_sys::Relation) -> i16 {
    // SAFETY: the same trigger walk as guard_of, on the same open relation.
    unsafe {
        let td = (*rel).trigdesc;
        for i in 0..(*td).numtriggers as usize {
            let t = (*td).triggers.add(i);
            if CStr::from_ptr((*t).tgname).to_bytes() == b"id_gen_move_fence" && (*t).tgnargs >= 3 {
                if let Some(a) = CStr::from_ptr(*(*t).tgargs.add(2))
                    .to_str()
                    .ok()
                    .and_then(|s| s.parse::<i16>().ok())
                {
                    return a;
                }
            }
        }
        0
    }
}
