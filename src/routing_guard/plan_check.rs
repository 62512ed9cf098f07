//! The executor-start check: a scan that the partition pruning left on a table's
//! tombstone (genes this shard does not own) or on a fenced partition, with a predicate on
//! the id column, gets an ExecProcNode that refuses it (IG001 / IG002) when it first runs.
//! Pruning at plan time and the initial pruning of generic plans have already removed the
//! scans they could; a scan that execution-time pruning (a parameter from a subquery or a
//! join) skips never runs, so it never fails; a scan that runs would be answered by a
//! shard that does not own those genes.
//!
//! Invariants: only plan-state nodes that exist are looked at; a scan with no predicate on
//! the id column (a shard-local `SELECT count(*)`) is left alone: it sees this shard's
//! rows only. Reads the relcache of relations the executor has already opened and
//! locked; runs no SQL here (the refusal may, in the backend that raises it).

use super::raise::Verdict;
use pgrx::pg_sys;
use std::ffi::CStr;

/// What the triggers on a relation say about it.
pub enum Guarded {
    /// A tombstone: genes not owned; the id column's attribute number.
    NotOwned(i16),
    /// A partition fenced for a cut-over.
    Fenced,
}

/// Looks for id_gen's guard triggers on an open relation.
///
/// # Safety
/// `rel` must be a valid, open relation.
pub unsafe fn guard_of(rel: pg_sys::Relation) -> Option<Guarded> {
    // SAFETY: a valid relation's trigdesc is NULL or points at numtriggers triggers.
    unsafe {
        if rel.is_null() || !(*(*rel).rd_rel).relispartition || (*rel).trigdesc.is_null() {
            return None;
        }
        let td = (*rel).trigdesc;
        for i in 0..(*td).numtriggers as usize {
            let t = (*td).triggers.add(i);
            if (*t).tgenabled == b'D' as std::ffi::c_char || (*t).tgisinternal {
                continue;
            }
            match CStr::from_ptr((*t).tgname).to_bytes() {
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
        use pg_sys::NodeTag::*;
        let tag = (*ps).type_;
        if matches!(
            tag,
            T_SeqScanState
                | T_IndexScanState
                | T_IndexOnlyScanState
                | T_BitmapHeapScanState
                | T_SampleScanState
        ) {
            let ss = ps as *mut pg_sys::ScanState;
            let rel = (*ss).ss_currentRelation;
            if let Some(g) = guard_of(rel) {
                let id_attnum = match g {
                    Guarded::NotOwned(a) => a,
                    Guarded::Fenced => id_attnum_of_fenced(rel),
                };
                if selects_by_column((*ps).plan, rel, id_attnum) {
                    // ExecProcNodeReal stays: refuse_scan runs the scan itself when the guard
                    // is gone by then (a fence lifted before a cursor's first FETCH).
                    (*ps).ExecProcNode = Some(refuse_scan);
                }
            }
        }
        let children: Vec<*mut pg_sys::PlanState> = match tag {
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
        for c in children
            .into_iter()
            .chain([(*ps).lefttree, (*ps).righttree])
            .chain(sub_plan_states((*ps).initPlan))
            .chain(sub_plan_states((*ps).subPlan))
        {
            check_scans(c);
        }
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
        None => unsafe {
            (*ps).ExecProcNode = (*ps).ExecProcNodeReal;
            match (*ps).ExecProcNodeReal {
                Some(real) => real(ps),
                None => std::ptr::null_mut(),
            }
        },
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn scan_verdict(ps: *mut pg_sys::PlanState, verdict: *mut Option<Verdict>) {
    // SAFETY: an armed scan state has an open relation; `verdict` is the caller's local.
    unsafe {
        let rel = (*(ps as *mut pg_sys::ScanState)).ss_currentRelation;
        *verdict = match guard_of(rel) {
            Some(Guarded::NotOwned(_)) => Some(Verdict::not_owned((*rel).rd_id)),
            Some(Guarded::Fenced) => Some(Verdict::fenced((*rel).rd_id)),
            None => None,
        };
    }
}

/// The plan states of a List of SubPlanState.
unsafe fn sub_plan_states(list: *mut pg_sys::List) -> Vec<*mut pg_sys::PlanState> {
    // SAFETY: initPlan/subPlan are Lists of SubPlanState (or NIL).
    unsafe {
        super::list_pointers(list)
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

/// Whether a scan's predicates (filter, index conditions) mention column `attnum` of its
/// relation; with `attnum` 0 (unknown), whether it has any predicate at all.
unsafe fn selects_by_column(plan: *mut pg_sys::Plan, rel: pg_sys::Relation, attnum: i16) -> bool {
    // SAFETY: `plan` is the Plan node of a scan state of the tag checked below.
    unsafe {
        let scanrelid = (*(plan as *mut pg_sys::Scan)).scanrelid;
        let mut heap_quals: Vec<*mut pg_sys::List> = vec![(*plan).qual];
        let mut index_quals: Option<(pg_sys::Oid, *mut pg_sys::List)> = None;
        match (*plan).type_ {
            pg_sys::NodeTag::T_IndexScan => {
                heap_quals.push((*(plan as *mut pg_sys::IndexScan)).indexqualorig)
            }
            pg_sys::NodeTag::T_BitmapHeapScan => {
                heap_quals.push((*(plan as *mut pg_sys::BitmapHeapScan)).bitmapqualorig)
            }
            pg_sys::NodeTag::T_IndexOnlyScan => {
                // Its index conditions and its filter both name index columns (INDEX_VAR).
                let s = plan as *mut pg_sys::IndexOnlyScan;
                heap_quals.clear();
                index_quals = Some(((*s).indexid, pg_sys::list_concat_copy((*s).indexqual, (*plan).qual)));
            }
            _ => {}
        }
        for q in heap_quals {
            if q.is_null() {
                continue;
            }
            if attnum == 0 {
                return true;
            }
            let mut attrs: *mut pg_sys::Bitmapset = std::ptr::null_mut();
            pg_sys::pull_varattnos(q as *mut pg_sys::Node, scanrelid, &mut attrs);
            if pg_sys::bms_is_member(
                attnum as i32 - pg_sys::FirstLowInvalidHeapAttributeNumber,
                attrs,
            ) {
                return true;
            }
        }
        if let Some((index, q)) = index_quals {
            if q.is_null() {
                return false;
            }
            if attnum == 0 {
                return true;
            }
            // Index-only scans state their conditions on index columns (INDEX_VAR).
            let mut attrs: *mut pg_sys::Bitmapset = std::ptr::null_mut();
            pg_sys::pull_varattnos(q as *mut pg_sys::Node, pg_sys::INDEX_VAR as u32, &mut attrs);
            let irel = pg_sys::RelationIdGetRelation(index);
            if irel.is_null() {
                return true;
            }
            let ind = (*irel).rd_index;
            let mut hit = false;
            if !ind.is_null() {
                let keys = (*ind).indkey.values.as_slice((*ind).indnatts as usize);
                for (i, &heap_att) in keys.iter().enumerate() {
                    if heap_att == attnum
                        && pg_sys::bms_is_member(
                            (i as i32 + 1) - pg_sys::FirstLowInvalidHeapAttributeNumber,
                            attrs,
                        )
                    {
                        hit = true;
                    }
                }
            }
            pg_sys::RelationClose(irel);
            let _ = rel;
            return hit;
        }
        false
    }
}
