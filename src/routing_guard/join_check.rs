//! Joins by id: a hash, merge or nested-loop join that equates a guarded table's id column
//! (its tombstone or a fenced partition is among the join's inputs) with values from
//! outside this shard's partitioned tables (`JOIN unnest(ids)`, `IN (SELECT ...)` as a hash
//! semi-join, `UPDATE ... FROM`, `DELETE ... USING`, `MERGE`, a plain table of ids). The
//! tombstone's own scan carries no id predicate there, and it is scanned on the owner too,
//! so the scan cannot be armed (`plan_check.rs`); instead the node that produces those
//! values is watched: each value it passes up is an id whose gene must be owned (IG001)
//! and not fenced (IG002).
//!
//! Invariants: the watch wraps the node's ExecProcNode and keeps calling what the executor
//! set (ExecProcNodeFirst, then the instrumented or real function), so EXPLAIN ANALYZE and
//! the stack-depth check stay; a watch is forgotten when its query's memory is reset; the
//! genes owned come from the backend's routing view taken at executor start (in a
//! parallel worker, under the statement's snapshot); nothing is read but the one column of
//! the slot the node returned. Values a join never reads (a merge join that ends when the
//! table's side runs out; a hash join whose table side is empty) are not checked, and a
//! parallel-aware hash join loses the watch of its own output when its shared state is set
//! up (PostgreSQL resets its ExecProcNode then).

use super::plan_check::{binary_args, children, guarded_id_column, is_relation_scan, operator_name, strip_relabel};
use super::plan_check::{guard_of, Guarded};
use super::raise::Verdict;
use super::shard_state;
use pgrx::pg_sys;
use std::cell::RefCell;
use std::collections::HashMap;

/// Genes as a bitmap.
type Genes = Box<[u64; 1024]>;

fn genes_none() -> Genes {
    Box::new([0u64; 1024])
}

fn set_range(g: &mut Genes, lower: u16, upper: u16) {
    for gene in lower..=upper {
        g[gene as usize / 64] |= 1 << (gene % 64);
    }
}

fn has(g: &Genes, gene: u16) -> bool {
    g[gene as usize / 64] & (1 << (gene % 64)) != 0
}

/// What a watched node's column is checked against.
struct Watch {
    /// The column of the node's output (1-based) and its type (int8, int4 or int2).
    attno: i16,
    typ: pg_sys::Oid,
    /// The ExecProcNode to call (what the executor set; it changes after the first call).
    next: pg_sys::ExecProcNodeMtd,
    /// Genes the guarded table owns here, with its tombstone (None: no tombstone joined).
    owned: Option<(Genes, pg_sys::Oid)>,
    /// Genes of fenced partitions joined, with one of them.
    fenced: Option<(Genes, pg_sys::Oid)>,
}

enum Judgement {
    NotOwned(pg_sys::Oid),
    Fenced(pg_sys::Oid),
}

impl Watch {
    fn judge(&self, gene: u16) -> Option<Judgement> {
        if let Some((g, rel)) = &self.fenced {
            if has(g, gene) {
                return Some(Judgement::Fenced(*rel));
            }
        }
        match &self.owned {
            Some((g, rel)) if !has(g, gene) => Some(Judgement::NotOwned(*rel)),
            _ => None,
        }
    }
}

thread_local! {
    /// Watched plan-state nodes by address, each removed when its query's memory goes
    /// (a reset callback on the executor's query context, which frees the node itself).
    static WATCHES: RefCell<HashMap<usize, Watch>> = RefCell::new(HashMap::new());
}

/// The reset callback of a watched node's query context: the node is about to be freed.
unsafe extern "C-unwind" fn forget_watch(node: *mut std::ffi::c_void) {
    WATCHES.with(|w| {
        if let Ok(mut m) = w.try_borrow_mut() {
            m.remove(&(node as usize));
        }
    });
}

/// Walks a plan-state tree and watches the value side of every join by a guarded id (in a
/// parallel worker too: its view is loaded under the statement's snapshot there).
///
/// # Safety
/// `ps` must be NULL or a plan-state tree built by ExecInitNode.
pub unsafe fn watch_joins(ps: *mut pg_sys::PlanState) {
    // SAFETY: as the caller promises.
    unsafe { walk(ps) };
}

unsafe fn walk(ps: *mut pg_sys::PlanState) {
    use pg_sys::NodeTag::*;
    if ps.is_null() {
        return;
    }
    // SAFETY: every node of an initialised tree is a valid PlanState of its tag.
    unsafe {
        if matches!((*ps).type_, T_HashJoinState | T_MergeJoinState | T_NestLoopState) {
            watch_join(ps);
        }
        for c in children(ps) {
            walk(c);
        }
    }
}

/// Where a column of a node's output comes from.
enum Source {
    /// Column `attno` of the relation a scan state reads.
    Column(*mut pg_sys::PlanState, i16),
    /// Anything else: an expression, a function, VALUES, a CTE, a parameter.
    Other,
}

/// The sources of output column `resno` of `ps`, followed through the nodes that pass
/// columns on (joins, Append, Hash, Sort, Material, Memoize, Gather, subqueries, ...).
unsafe fn column_sources(ps: *mut pg_sys::PlanState, resno: i16, depth: u32, out: &mut Vec<Source>) {
    use pg_sys::NodeTag::*;
    if ps.is_null() || depth > 64 {
        out.push(Source::Other);
        return;
    }
    // SAFETY: `ps` is a valid plan state; its plan's target list is a List of TargetEntry.
    unsafe {
        let plan = (*ps).plan;
        let tlist = super::list_pointers((*plan).targetlist);
        if resno < 1 || resno as usize > tlist.len() {
            out.push(Source::Other);
            return;
        }
        let expr = strip_relabel((*(tlist[resno as usize - 1] as *mut pg_sys::TargetEntry)).expr as *mut pg_sys::Node);
        if expr.is_null() || (*expr).type_ != T_Var {
            out.push(Source::Other);
            return;
        }
        let var = expr as *mut pg_sys::Var;
        let (varno, attno) = ((*var).varno, (*var).varattno);
        let tag = (*ps).type_;
        if is_relation_scan(tag) {
            let scanrelid = (*(plan as *mut pg_sys::Scan)).scanrelid as i32;
            if tag == T_IndexOnlyScanState && varno == pg_sys::INDEX_VAR {
                // An index column: the index's target list names the table's column.
                let itl = super::list_pointers((*(plan as *mut pg_sys::IndexOnlyScan)).indextlist);
                let heap = (attno >= 1 && attno as usize <= itl.len())
                    .then(|| strip_relabel((*(itl[attno as usize - 1] as *mut pg_sys::TargetEntry)).expr as *mut pg_sys::Node))
                    .filter(|e| !e.is_null() && (**e).type_ == T_Var);
                match heap {
                    Some(e) => out.push(Source::Column(ps, (*(e as *mut pg_sys::Var)).varattno)),
                    None => out.push(Source::Other),
                }
            } else if varno == scanrelid {
                out.push(Source::Column(ps, attno));
            } else {
                out.push(Source::Other);
            }
            return;
        }
        match tag {
            T_SubqueryScanState if varno == (*(plan as *mut pg_sys::Scan)).scanrelid as i32 => {
                column_sources((*(ps as *mut pg_sys::SubqueryScanState)).subplan, attno, depth + 1, out)
            }
            // (Their target lists are OUTER_VAR placeholders: column attno of each child.)
            T_AppendState | T_MergeAppendState => {
                for c in children(ps) {
                    column_sources(c, attno, depth + 1, out);
                }
            }
            _ if varno == pg_sys::OUTER_VAR => column_sources((*ps).lefttree, attno, depth + 1, out),
            _ if varno == pg_sys::INNER_VAR => column_sources((*ps).righttree, attno, depth + 1, out),
            _ => out.push(Source::Other),
        }
    }
}

/// The child of a join that produces one side of a join clause, and the column there.
unsafe fn join_input(ps: *mut pg_sys::PlanState, var: *mut pg_sys::Var) -> Option<(*mut pg_sys::PlanState, i16)> {
    // SAFETY: `var` is a Var of the join's clause; the join's children are valid.
    unsafe {
        match (*var).varno {
            pg_sys::OUTER_VAR => Some(((*ps).lefttree, (*var).varattno)),
            pg_sys::INNER_VAR => Some(((*ps).righttree, (*var).varattno)),
            _ => None,
        }
    }
}

unsafe fn watch_join(ps: *mut pg_sys::PlanState) {
    use pg_sys::NodeTag::*;
    // SAFETY: `ps` is a join state; its plan is a Join of the matching kind.
    unsafe {
        let plan = (*ps).plan;
        let join = plan as *mut pg_sys::Join;
        let mut clauses = super::list_pointers((*join).joinqual);
        clauses.extend(super::list_pointers((*plan).qual));
        match (*ps).type_ {
            T_HashJoinState => clauses.extend(super::list_pointers((*(plan as *mut pg_sys::HashJoin)).hashclauses)),
            T_MergeJoinState => clauses.extend(super::list_pointers((*(plan as *mut pg_sys::MergeJoin)).mergeclauses)),
            _ => {}
        }
        for c in clauses {
            let c = c as *mut pg_sys::Node;
            if c.is_null() || (*c).type_ != T_OpExpr || operator_name((*(c as *mut pg_sys::OpExpr)).opno) != b"=" {
                continue;
            }
            let Some((l, r)) = binary_args(c as *mut pg_sys::OpExpr) else { continue };
            if (*l).type_ != T_Var || (*r).type_ != T_Var {
                continue;
            }
            for (id_side, value_side) in [(l, r), (r, l)] {
                watch_side(ps, id_side as *mut pg_sys::Var, value_side as *mut pg_sys::Var);
            }
        }
    }
}

/// Watches the input of `value_side` when `id_side` reaches a guarded id column and the
/// values do not come from this shard's partitioned tables.
unsafe fn watch_side(ps: *mut pg_sys::PlanState, id_side: *mut pg_sys::Var, value_side: *mut pg_sys::Var) {
    // SAFETY: both Vars belong to the join `ps`; the sources are scan states of its tree.
    unsafe {
        let typ = (*value_side).vartype;
        if typ != pg_sys::INT8OID && typ != pg_sys::INT4OID && typ != pg_sys::INT2OID {
            return;
        }
        let (Some((id_child, id_col)), Some((value_child, value_col))) = (join_input(ps, id_side), join_input(ps, value_side))
        else {
            return;
        };
        let mut values = vec![];
        column_sources(value_child, value_col, 0, &mut values);
        let from_outside = values.iter().any(|v| match v {
            Source::Other => true,
            Source::Column(scan, _) => {
                let rel = (*(*scan as *mut pg_sys::ScanState)).ss_currentRelation;
                rel.is_null() || !(*(*rel).rd_rel).relispartition
            }
        });
        if !from_outside {
            return; // a join of this shard's own tables
        }
        let mut ids = vec![];
        column_sources(id_child, id_col, 0, &mut ids);
        let mut tombstone = None;
        let mut fenced: Vec<pg_sys::Oid> = vec![];
        for s in &ids {
            let Source::Column(scan, attno) = s else { continue };
            let rel = (*(*scan as *mut pg_sys::ScanState)).ss_currentRelation;
            let Some(id_attnum) = guarded_id_column(rel) else { continue };
            if id_attnum != 0 && id_attnum != *attno {
                continue;
            }
            match guard_of(rel) {
                Some(Guarded::NotOwned(_)) => tombstone = Some((*rel).rd_id),
                Some(Guarded::Fenced) => fenced.push((*rel).rd_id),
                // (Every scan of a retired partition is armed by plan_check.rs.)
                Some(Guarded::Retired) | None => {}
            }
        }
        if tombstone.is_none() && fenced.is_empty() {
            return;
        }
        let state = shard_state::current(false);
        let owned = tombstone.and_then(|t| {
            let table = state.tables.iter().find(|d| d.unranged.contains(&t))?;
            let mut g = genes_none();
            for p in &table.partitions {
                set_range(&mut g, p.lower, p.upper);
            }
            Some((g, t))
        });
        let fenced = (!fenced.is_empty()).then(|| {
            let mut g = genes_none();
            for t in &state.tables {
                for p in t.partitions.iter().filter(|p| fenced.contains(&p.relid)) {
                    set_range(&mut g, p.lower, p.upper);
                }
            }
            (g, fenced[0])
        });
        if owned.is_none() && fenced.is_none() {
            return;
        }
        // A Hash node is read by its join through MultiExecProcNode: watch its input.
        let (mut node, mut col) = (value_child, value_col);
        if (*node).type_ == pg_sys::NodeTag::T_HashState {
            let tlist = super::list_pointers((*(*node).plan).targetlist);
            let Some(te) = tlist.get(col as usize - 1) else { return };
            let e = strip_relabel((*(*te as *mut pg_sys::TargetEntry)).expr as *mut pg_sys::Node);
            if e.is_null() || (*e).type_ != pg_sys::NodeTag::T_Var || (*(e as *mut pg_sys::Var)).varno != pg_sys::OUTER_VAR {
                return;
            }
            col = (*(e as *mut pg_sys::Var)).varattno;
            node = (*node).lefttree;
        }
        if node.is_null() {
            return;
        }
        let watched = (*node).ExecProcNode.map(|f| f as usize) == Some(check_values as *const () as usize);
        let next = if watched {
            WATCHES.with(|w| w.borrow().get(&(node as usize)).map(|x| x.next)).flatten()
        } else {
            (*node).ExecProcNode
        };
        WATCHES.with(|w| {
            w.borrow_mut().insert(node as usize, Watch { attno: col, typ, next, owned, fenced });
        });
        if !watched {
            // The entry goes with the node: at the reset of the query context it lives in.
            let cxt = (*(*node).state).es_query_cxt;
            let cb = pg_sys::MemoryContextAllocZero(cxt, std::mem::size_of::<pg_sys::MemoryContextCallback>())
                as *mut pg_sys::MemoryContextCallback;
            (*cb).func = Some(forget_watch);
            (*cb).arg = node as *mut std::ffi::c_void;
            pg_sys::MemoryContextRegisterResetCallback(cxt, cb);
        }
        (*node).ExecProcNode = Some(check_values);
    }
}

/// The ExecProcNode of a watched node: runs it, then checks the gene of the id it passes
/// up. Unguarded, so that it can raise an IG-class error (see `raise.rs`); nothing in
/// this frame needs dropping when the node it calls raises.
unsafe extern "C-unwind" fn check_values(ps: *mut pg_sys::PlanState) -> *mut pg_sys::TupleTableSlot {
    let key = ps as usize;
    let Some((next, attno, typ)) = WATCHES.with(|w| w.borrow().get(&key).map(|x| (x.next, x.attno, x.typ))) else {
        // SAFETY: not ours any more (cannot happen: the entry is made before arming).
        return unsafe { ((*ps).ExecProcNodeReal.expect("a node's own function"))(ps) };
    };
    // SAFETY: the function the executor set for this node.
    let slot = unsafe { (next.expect("an ExecProcNode"))(ps) };
    // SAFETY: `ps` is valid; ExecProcNodeFirst may have replaced its ExecProcNode.
    unsafe {
        let now = (*ps).ExecProcNode;
        if now.map(|f| f as usize) != Some(check_values as *const () as usize) {
            WATCHES.with(|w| {
                if let Some(x) = w.borrow_mut().get_mut(&key) {
                    x.next = now;
                }
            });
            (*ps).ExecProcNode = Some(check_values);
        }
    }
    // SAFETY: a slot returned by a node is NULL or valid; its first attno columns can be
    // deformed.
    let value = unsafe {
        if slot.is_null() || (*slot).tts_flags & pg_sys::TTS_FLAG_EMPTY as u16 != 0 || attno < 1 {
            return slot;
        }
        if (*slot).tts_nvalid < attno {
            pg_sys::slot_getsomeattrs_int(slot, attno as i32);
        }
        if *(*slot).tts_isnull.add(attno as usize - 1) {
            return slot;
        }
        let d = *(*slot).tts_values.add(attno as usize - 1);
        match typ {
            pg_sys::INT8OID => d.value() as i64,
            pg_sys::INT4OID => d.value() as i32 as i64,
            _ => d.value() as i16 as i64,
        }
    };
    if value < 0 {
        return slot; // no shard holds negative ids
    }
    let gene = ((value >> 47) & 0xFFFF) as u16;
    let judgement = WATCHES.with(|w| w.borrow().get(&key).and_then(|x| x.judge(gene)));
    let Some(j) = judgement else { return slot };
    let mut verdict: Option<Verdict> = None;
    // SAFETY: `verdict` is this frame's local.
    unsafe { verdict_of(&j as *const Judgement, &mut verdict) };
    match verdict {
        // SAFETY: nothing in this frame needs dropping (the judgement is plain data).
        Some(v) => unsafe { super::raise::raise(v) },
        None => slot,
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn verdict_of(j: *const Judgement, verdict: *mut Option<Verdict>) {
    // SAFETY: both pointers are the caller's locals.
    unsafe {
        *verdict = Some(match &*j {
            Judgement::NotOwned(rel) => Verdict::not_owned(*rel),
            Judgement::Fenced(rel) => Verdict::fenced(*rel),
        });
    }
}
