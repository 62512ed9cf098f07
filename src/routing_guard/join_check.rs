//! Joins by id: a hash, merge or nested-loop join that equates a guarded table's id column
//! (its tombstone, a fenced partition or a table laid out by ownership is among the join's
//! inputs) with values from
//! outside this shard's partitioned tables (`JOIN unnest(ids)`, `IN (SELECT ...)` as a hash
//! semi-join, `UPDATE ... FROM`, `DELETE ... USING`, `MERGE`, a plain table of ids). The
//! tombstone's own scan carries no id predicate there, and it is scanned on the owner too,
//! so the scan cannot be armed (`plan_check.rs`); instead the node that produces those
//! values is watched: each value it passes up is an id whose gene must be owned (IG001)
//! and not fenced (IG002).
//!
//! A join that ends before it has read all of its value side (a merge join whose table
//! side runs out first; a hash join with an empty hash table, which stops reading its
//! probe side, or with an empty probe side, which never builds its table; a nested loop
//! with an empty outer side) has that side read to its end when it ends, so that those ids
//! are checked too.
//!
//! Invariants: a node gets one wrapper (`run_wrapped`), whatever roles it has (a join that
//! is another join's value side has both), and the wrapper keeps calling what the executor
//! set (ExecProcNodeFirst, then the instrumented or real function), so EXPLAIN ANALYZE and
//! the stack-depth check stay; an entry is forgotten when its query's memory is reset; the
//! genes owned come from the backend's routing view taken at executor start (in a parallel
//! worker, under the statement's snapshot); nothing is read but the one column of the slot
//! the node returned. An input is read on only when it has not returned its end slot in
//! this pass (a flag its wrapper keeps, cleared when the join starts a pass), and is left
//! where its join rescans it before reading it again; the input of a Hash node whose table
//! was never built, which its join does not rescan, is rescanned here. Parallel-aware joins
//! are not read on (PostgreSQL sets their ExecProcNode again when it sets up their shared
//! state); when one is a value side, the input its column comes from is watched instead.
//! A drain reads at most DRAIN_LIMIT rows (a value side without end must not run forever)
//! and leaves parallel-aware inputs alone (their rows are shared with other processes).
//! What the wrapper and the drain call into PostgreSQL is unguarded (declared below): an
//! ERROR there, a cancel included, longjmps through frames that hold nothing to drop.
//! Not checked: ids a join is never asked for (a LIMIT above it stops it early).

use super::id_predicates::{binary_args, operator_name, strip_relabel};
use super::plan_check::{children, guarded_id_column, is_relation_scan};
use super::plan_check::{guard_of, Guarded};
use super::raise::Verdict;
use super::shard_state;
use id_gen_core::owned_genes::OwnedGenes;
use pgrx::pg_sys;
use std::cell::RefCell;
use std::collections::HashMap;

// Called unguarded (declared here, not through pgrx's bindings, whose guard turns an ERROR
// into a Rust panic that must not unwind into the executor's C frames above `run_wrapped`):
// an ERROR they raise (a cancel, an error of a node being rescanned) longjmps straight to
// PostgreSQL's handler through `run_wrapped` and `drain`, which hold nothing to drop.
unsafe extern "C-unwind" {
    fn ExecReScan(node: *mut pg_sys::PlanState);
    fn ProcessInterrupts();
    fn slot_getsomeattrs_int(slot: *mut pg_sys::TupleTableSlot, attnum: std::ffi::c_int);
}

/// Genes as a bitmap (the same type as the owned genes of `owned_ranges.rs`).
type Genes = OwnedGenes;

/// What a watched node's column is checked against.
struct ValueCheck {
    /// The column of the node's output (1-based) and its type (int8, int4 or int2).
    attno: i16,
    typ: pg_sys::Oid,
    /// Genes the guarded table owns here, with its tombstone or, for a table laid out by
    /// ownership, the table itself (true) (None: neither joined).
    owned: Option<(Genes, pg_sys::Oid, bool)>,
    /// Fenced genes, each set with a relation to name: those of the fenced partitions
    /// joined (with one of them), and those a move fenced in a table laid out by ownership
    /// that is joined (with the table).
    fenced: Vec<(Genes, pg_sys::Oid)>,
}

/// A watched input that a join reads to its end when the join ends without having read it
/// all (its ids are checked on the way).
#[derive(Clone, Copy)]
struct Drain {
    node: *mut pg_sys::PlanState,
    /// The Hash node whose input `node` is (NULL otherwise): read only when the hash join's
    /// table was never built; the join does not rescan that input then, so it is rescanned
    /// here (and the Hash node first, when a parameter it depends on changed, so that the
    /// input reads this pass's rows).
    hash: *mut pg_sys::PlanState,
}

/// Most rows one drain reads: a value side without end (a recursive CTE) must not make a
/// join that PostgreSQL would have ended run forever; ids past it are not checked.
const DRAIN_LIMIT: u64 = 1_000_000;

/// What the guard adds to one plan-state node: the ExecProcNode it calls on, whether the
/// node's last answer was its end, the check of the ids it passes up (a join's value
/// side), and the inputs to read to their end when it ends (a join).
struct Wrapped {
    /// The ExecProcNode to call (what the executor set; it changes after the first call).
    next: pg_sys::ExecProcNodeMtd,
    at_end: bool,
    check: Option<ValueCheck>,
    /// At most one per child of a join (plain data: nothing to drop when a node raises).
    drains: [Option<Drain>; 2],
}

enum Judgement {
    NotOwned(pg_sys::Oid),
    NotOwnedByTable(pg_sys::Oid, u16),
    Fenced(pg_sys::Oid),
}

impl ValueCheck {
    fn judge(&self, gene: u16) -> Option<Judgement> {
        for (g, rel) in &self.fenced {
            if g.contains_gene(gene) {
                return Some(Judgement::Fenced(*rel));
            }
        }
        match &self.owned {
            Some((g, rel, false)) if !g.contains_gene(gene) => Some(Judgement::NotOwned(*rel)),
            Some((g, rel, true)) if !g.contains_gene(gene) => {
                Some(Judgement::NotOwnedByTable(*rel, gene))
            }
            _ => None,
        }
    }
}

thread_local! {
    /// Wrapped plan-state nodes by address, each removed when its query's memory goes
    /// (a reset callback on the executor's query context, which frees the node itself).
    static WRAPPED: RefCell<HashMap<usize, Wrapped>> = RefCell::new(HashMap::new());
}

/// The reset callback of a wrapped node's query context: the node is about to be freed.
unsafe extern "C-unwind" fn forget_node(node: *mut std::ffi::c_void) {
    WRAPPED.with(|w| {
        if let Ok(mut m) = w.try_borrow_mut() {
            m.remove(&(node as usize));
        }
    });
}

/// Gives `node` the guard's ExecProcNode once (a node is never wrapped twice: a join that
/// is also another join's value side has one entry with both roles), then lets `change`
/// set its roles.
unsafe fn wrap(node: *mut pg_sys::PlanState, change: impl FnOnce(&mut Wrapped)) {
    // SAFETY: `node` is a valid plan state of a tree being started.
    unsafe {
        let ours: pg_sys::ExecProcNodeMtd = Some(run_wrapped);
        let wrapped = (*node).ExecProcNode.map(|f| f as usize) == ours.map(|f| f as usize);
        let next = (*node).ExecProcNode;
        WRAPPED.with(|w| {
            let mut m = w.borrow_mut();
            if !wrapped {
                // (A node not wrapped yet gets a fresh entry: one left at its address by a
                // freed node whose callback did not run must not lend it its roles.)
                m.insert(
                    node as usize,
                    Wrapped {
                        next,
                        at_end: false,
                        check: None,
                        drains: [None; 2],
                    },
                );
            }
            if let Some(entry) = m.get_mut(&(node as usize)) {
                change(entry);
            }
        });
        if !wrapped {
            // The entry goes with the node: at the reset of the query context it lives in.
            let cxt = (*(*node).state).es_query_cxt;
            let cb = pg_sys::MemoryContextAllocZero(
                cxt,
                std::mem::size_of::<pg_sys::MemoryContextCallback>(),
            ) as *mut pg_sys::MemoryContextCallback;
            (*cb).func = Some(forget_node);
            (*cb).arg = node as *mut std::ffi::c_void;
            pg_sys::MemoryContextRegisterResetCallback(cxt, cb);
            (*node).ExecProcNode = ours;
        }
    }
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
        if matches!(
            (*ps).type_,
            T_HashJoinState | T_MergeJoinState | T_NestLoopState
        ) {
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
unsafe fn column_sources(
    ps: *mut pg_sys::PlanState,
    resno: i16,
    depth: u32,
    out: &mut Vec<Source>,
) {
    use pg_sys::NodeTag::*;
    if ps.is_null() || depth > 64 {
        out.push(Source::Other);
        return;
    }
    // SAFETY: `ps` is a valid plan state; its plan's target list is a List of TargetEntry.
    unsafe {
        let plan = (*ps).plan;
        let tlist = crate::pg_list::list_pointers((*plan).targetlist);
        if resno < 1 || resno as usize > tlist.len() {
            out.push(Source::Other);
            return;
        }
        let expr = strip_relabel(
            (*(tlist[resno as usize - 1] as *mut pg_sys::TargetEntry)).expr as *mut pg_sys::Node,
        );
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
                let itl = crate::pg_list::list_pointers(
                    (*(plan as *mut pg_sys::IndexOnlyScan)).indextlist,
                );
                let heap = (attno >= 1 && attno as usize <= itl.len())
                    .then(|| {
                        strip_relabel(
                            (*(itl[attno as usize - 1] as *mut pg_sys::TargetEntry)).expr
                                as *mut pg_sys::Node,
                        )
                    })
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
                column_sources(
                    (*(ps as *mut pg_sys::SubqueryScanState)).subplan,
                    attno,
                    depth + 1,
                    out,
                )
            }
            // (Their target lists are OUTER_VAR placeholders: column attno of each child.)
            T_AppendState | T_MergeAppendState => {
                for c in children(ps) {
                    column_sources(c, attno, depth + 1, out);
                }
            }
            _ if varno == pg_sys::OUTER_VAR => {
                column_sources((*ps).lefttree, attno, depth + 1, out)
            }
            _ if varno == pg_sys::INNER_VAR => {
                column_sources((*ps).righttree, attno, depth + 1, out)
            }
            _ => out.push(Source::Other),
        }
    }
}

/// The child of a join that produces one side of a join clause, and the column there.
unsafe fn join_input(
    ps: *mut pg_sys::PlanState,
    var: *mut pg_sys::Var,
) -> Option<(*mut pg_sys::PlanState, i16)> {
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
        let mut clauses = crate::pg_list::list_pointers((*join).joinqual);
        clauses.extend(crate::pg_list::list_pointers((*plan).qual));
        match (*ps).type_ {
            T_HashJoinState => clauses.extend(crate::pg_list::list_pointers(
                (*(plan as *mut pg_sys::HashJoin)).hashclauses,
            )),
            T_MergeJoinState => clauses.extend(crate::pg_list::list_pointers(
                (*(plan as *mut pg_sys::MergeJoin)).mergeclauses,
            )),
            _ => {}
        }
        for c in clauses {
            let c = c as *mut pg_sys::Node;
            if c.is_null()
                || (*c).type_ != T_OpExpr
                || operator_name((*(c as *mut pg_sys::OpExpr)).opno) != b"="
            {
                continue;
            }
            let Some((l, r)) = binary_args(c as *mut pg_sys::OpExpr) else {
                continue;
            };
            if (*l).type_ != T_Var || (*r).type_ != T_Var {
                continue;
            }
            for (id_side, value_side) in [(l, r), (r, l)] {
                watch_side(
                    ps,
                    id_side as *mut pg_sys::Var,
                    value_side as *mut pg_sys::Var,
                );
            }
        }
    }
}

/// Watches the input of `value_side` when `id_side` reaches a guarded id column and the
/// values do not come from this shard's partitioned tables.
unsafe fn watch_side(
    ps: *mut pg_sys::PlanState,
    id_side: *mut pg_sys::Var,
    value_side: *mut pg_sys::Var,
) {
    use pg_sys::NodeTag::*;
    // SAFETY: both Vars belong to the join `ps`; the sources are scan states of its tree.
    unsafe {
        let typ = (*value_side).vartype;
        if typ != pg_sys::INT8OID && typ != pg_sys::INT4OID && typ != pg_sys::INT2OID {
            return;
        }
        let (Some((id_child, id_col)), Some((value_child, value_col))) =
            (join_input(ps, id_side), join_input(ps, value_side))
        else {
            return;
        };
        let mut values = vec![];
        column_sources(value_child, value_col, 0, &mut values);
        // Values from this shard's own tables: a partition of a distributed table, or a
        // table laid out by ownership (its owned rows are read through its view, whose
        // filter is on that table's own scan).
        let from_outside = values.iter().any(|v| match v {
            Source::Other => true,
            Source::Column(scan, _) => {
                let rel = (*(*scan as *mut pg_sys::ScanState)).ss_currentRelation;
                rel.is_null()
                    || !((*(*rel).rd_rel).relispartition
                        || matches!(guard_of(rel), Some(Guarded::ByOwnership(_))))
            }
        });
        if !from_outside {
            return; // a join of this shard's own tables
        }
        let mut ids = vec![];
        column_sources(id_child, id_col, 0, &mut ids);
        let mut tombstone = None;
        let mut by_ownership = None;
        let mut fenced: Vec<pg_sys::Oid> = vec![];
        for s in &ids {
            let Source::Column(scan, attno) = s else {
                continue;
            };
            let rel = (*(*scan as *mut pg_sys::ScanState)).ss_currentRelation;
            let Some(id_attnum) = guarded_id_column(rel) else {
                continue;
            };
            if id_attnum != 0 && id_attnum != *attno {
                continue;
            }
            match guard_of(rel) {
                Some(Guarded::NotOwned(_)) => tombstone = Some((*rel).rd_id),
                Some(Guarded::ByOwnership(_)) => by_ownership = Some((*rel).rd_id),
                Some(Guarded::Fenced) => fenced.push((*rel).rd_id),
                // (Every scan of a retired partition is armed by plan_check.rs.)
                Some(Guarded::Retired) | None => {}
            }
        }
        if tombstone.is_none() && by_ownership.is_none() && fenced.is_empty() {
            return;
        }
        let state = shard_state::current(false);
        let owned = tombstone.and_then(|t| {
            let table = state.tables.iter().find(|d| d.unranged.contains(&t))?;
            let g = Genes::from_ranges(table.partitions.iter().map(|p| (p.lower, p.upper)));
            Some((g, t, false))
        });
        // A table laid out by ownership: the genes it records (none: every gene refused).
        let owned = owned.or_else(|| {
            let t = by_ownership?;
            let g = super::owned_ranges::current()
                .of(t)
                .cloned()
                .unwrap_or_else(|| Genes::from_ranges([]));
            Some((g, t, true))
        });
        let mut fenced_genes = vec![];
        if !fenced.is_empty() {
            let g = Genes::from_ranges(state.tables.iter().flat_map(|t| {
                t.partitions
                    .iter()
                    .filter(|p| fenced.contains(&p.relid))
                    .map(|p| (p.lower, p.upper))
            }));
            fenced_genes.push((g, fenced[0]));
        }
        // A table laid out by ownership: the genes a move has fenced in it (as well, when a
        // fenced partition of another table is joined too).
        if let Some(t) = by_ownership {
            if let Some(g) = super::owned_ranges::current().fenced_of(t) {
                fenced_genes.push((g.clone(), t));
            }
        }
        if owned.is_none() && fenced_genes.is_empty() {
            return;
        }
        // A Hash node is read by its join through MultiExecProcNode: watch its input. A
        // parallel-aware hash join gets its ExecProcNode set again when its shared state is
        // set up, which would lose a watch: watch the input its column comes from instead
        // (every id it passes up came from there).
        let (mut node, mut col) = (value_child, value_col);
        loop {
            if node.is_null() {
                return;
            }
            let next = match (*node).type_ {
                pg_sys::NodeTag::T_HashState => {
                    passed_from(node, col, (*node).lefttree, pg_sys::OUTER_VAR)
                }
                pg_sys::NodeTag::T_HashJoinState if (*(*node).plan).parallel_aware => {
                    passed_from(node, col, (*node).lefttree, pg_sys::OUTER_VAR)
                        .or_else(|| passed_from(node, col, (*node).righttree, pg_sys::INNER_VAR))
                }
                _ => break,
            };
            let Some((n, c)) = next else { return };
            (node, col) = (n, c);
        }
        let check = ValueCheck {
            attno: col,
            typ,
            owned,
            fenced: fenced_genes,
        };
        wrap(node, |w| w.check = Some(check));
        // The input to read to its end when the join ends early: a merge join's value side
        // (it ends when the table's side runs out), a hash join's probe side (it ends at
        // once when its table is empty) or its Hash node's input (never read when the probe
        // side is empty), a nested loop's inner side when it takes no parameter from the
        // outer one (never read when the outer side is empty). Not a parallel-aware join:
        // its ExecProcNode is set again when its shared state is set up.
        if (*(*ps).plan).parallel_aware {
            return;
        }
        let drain = match (*ps).type_ {
            T_MergeJoinState if node == value_child => Some(Drain {
                node,
                hash: std::ptr::null_mut(),
            }),
            T_HashJoinState if node == value_child && value_child == (*ps).lefttree => {
                Some(Drain {
                    node,
                    hash: std::ptr::null_mut(),
                })
            }
            T_HashJoinState
                if value_child == (*ps).righttree && node == (*value_child).lefttree =>
            {
                Some(Drain {
                    node,
                    hash: value_child,
                })
            }
            T_NestLoopState
                if node == value_child
                    && value_child == (*ps).righttree
                    && (*((*ps).plan as *mut pg_sys::NestLoop))
                        .nestParams
                        .is_null() =>
            {
                Some(Drain {
                    node,
                    hash: std::ptr::null_mut(),
                })
            }
            _ => None,
        };
        // (Not a parallel-aware input: its rows are shared with the other processes.)
        let drain = drain.filter(|d| !(*(*d.node).plan).parallel_aware);
        if let Some(d) = drain {
            wrap(ps, |w| {
                if !w.drains.iter().flatten().any(|x| x.node == d.node) {
                    if let Some(free) = w.drains.iter_mut().find(|x| x.is_none()) {
                        *free = Some(d);
                    }
                }
            });
        }
    }
}

/// The column of `child` that output column `col` of `node` passes on, when it is a
/// plain Var of that child (`varno`: OUTER_VAR for the left child, INNER_VAR the right).
unsafe fn passed_from(
    node: *mut pg_sys::PlanState,
    col: i16,
    child: *mut pg_sys::PlanState,
    varno: i32,
) -> Option<(*mut pg_sys::PlanState, i16)> {
    // SAFETY: `node` is a valid plan state; its target list is a List of TargetEntry.
    unsafe {
        let tlist = crate::pg_list::list_pointers((*(*node).plan).targetlist);
        let te = *tlist.get((col as usize).checked_sub(1)?)?;
        let e = strip_relabel((*(te as *mut pg_sys::TargetEntry)).expr as *mut pg_sys::Node);
        if child.is_null()
            || e.is_null()
            || (*e).type_ != pg_sys::NodeTag::T_Var
            || (*(e as *mut pg_sys::Var)).varno != varno
        {
            return None;
        }
        // (A Hash node returned here is passed through by the caller's loop.)
        Some((child, (*(e as *mut pg_sys::Var)).varattno))
    }
}

fn is_end(slot: *mut pg_sys::TupleTableSlot) -> bool {
    // SAFETY: a slot returned by a node is NULL or valid.
    slot.is_null() || unsafe { (*slot).tts_flags & pg_sys::TTS_FLAG_EMPTY as u16 != 0 }
}

/// Whether the join `ps` is about to start a pass (its first call, or the first after a
/// rescan): then none of its inputs has reached its end in this pass.
unsafe fn join_pass_starts(ps: *mut pg_sys::PlanState) -> bool {
    // SAFETY: `ps` is a join state of the tag it carries.
    unsafe {
        match (*ps).type_ {
            // (EXEC_MJ_INITIALIZE_OUTER and HJ_BUILD_HASHTABLE of the executor's state machines.)
            pg_sys::NodeTag::T_MergeJoinState => {
                (*(ps as *mut pg_sys::MergeJoinState)).mj_JoinState == 1
            }
            pg_sys::NodeTag::T_HashJoinState => {
                let hj = ps as *mut pg_sys::HashJoinState;
                (*hj).hj_JoinState == 1 && (*hj).hj_HashTable.is_null()
            }
            _ => false,
        }
    }
}

fn set_at_end(node: *mut pg_sys::PlanState, at_end: bool) {
    WRAPPED.with(|w| {
        if let Some(x) = w.borrow_mut().get_mut(&(node as usize)) {
            x.at_end = at_end;
        }
    });
}

/// The ExecProcNode of a wrapped node: runs it; checks the gene of the id it passes up
/// (a join's value side); when it ends (a join), reads each of its drained inputs that has
/// not ended to its end, so that their ids are checked too. Unguarded, so that it can
/// raise an IG-class error (see `raise.rs`); nothing in this frame needs dropping when the
/// node it calls raises (the entry's fields are copied out as plain data).
unsafe extern "C-unwind" fn run_wrapped(ps: *mut pg_sys::PlanState) -> *mut pg_sys::TupleTableSlot {
    let key = ps as usize;
    let Some((next, was_at_end, value_col, drains)) = WRAPPED.with(|w| {
        w.borrow().get(&key).map(|x| {
            (
                x.next,
                x.at_end,
                x.check.as_ref().map(|c| (c.attno, c.typ)),
                x.drains,
            )
        })
    }) else {
        // SAFETY: not ours any more (cannot happen: the entry is made before wrapping).
        return unsafe { ((*ps).ExecProcNodeReal.expect("a node's own function"))(ps) };
    };
    // SAFETY: `ps` is a valid join state when it has drains.
    if drains.iter().any(Option::is_some) && unsafe { join_pass_starts(ps) } {
        for d in drains.iter().flatten() {
            set_at_end(d.node, false);
        }
    }
    // SAFETY: the function the executor set for this node.
    let slot = unsafe { (next.expect("an ExecProcNode"))(ps) };
    // SAFETY: `ps` is valid; ExecProcNodeFirst may have replaced its ExecProcNode.
    unsafe {
        let now = (*ps).ExecProcNode;
        if now.map(|f| f as usize) != Some(run_wrapped as *const () as usize) {
            WRAPPED.with(|w| {
                if let Some(x) = w.borrow_mut().get_mut(&key) {
                    x.next = now;
                }
            });
            (*ps).ExecProcNode = Some(run_wrapped);
        }
    }
    let end = is_end(slot);
    if end != was_at_end {
        // (Only at a change: the flag is read by drains, the rows in between need no write.)
        set_at_end(ps, end);
    }
    if end {
        for d in drains.iter().flatten() {
            // SAFETY: a drained node is an input of this join, valid while it runs.
            unsafe { drain(ps, *d) };
        }
        return slot;
    }
    let Some((attno, typ)) = value_col else {
        return slot;
    };
    // SAFETY: a slot that is not empty is valid; its first attno columns can be deformed.
    let value = unsafe {
        if attno < 1 {
            return slot;
        }
        if (*slot).tts_nvalid < attno {
            slot_getsomeattrs_int(slot, attno as i32);
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
    let judgement = WRAPPED.with(|w| {
        w.borrow()
            .get(&key)
            .and_then(|x| x.check.as_ref()?.judge(gene))
    });
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

/// Reads the input `d.node` of the join `join`, which has just ended, to its end (each id
/// checked by the input's own wrapper; at most DRAIN_LIMIT rows), unless it already ended
/// in this pass. The join rescans it before reading it again (merge joins both inputs, hash
/// joins their probe side, nested loops their inner side for each outer row), except the
/// input of a Hash node whose table was never built: that one is rescanned here.
unsafe fn drain(join: *mut pg_sys::PlanState, d: Drain) {
    let via_hash = !d.hash.is_null();
    // SAFETY: `join` is a hash join state when `d.hash` is set; `d.hash` is its Hash node.
    unsafe {
        if via_hash {
            if !(*(join as *mut pg_sys::HashJoinState))
                .hj_HashTable
                .is_null()
            {
                return; // the table was built: its input was read to its end
            }
            if !(*d.hash).chgParam.is_null() {
                // A parameter changed since the input was last read: the Hash node passes
                // the change on and rescans its input (which then reads this pass's rows).
                ExecReScan(d.hash);
                set_at_end(d.node, false);
            }
        }
    }
    let ended = WRAPPED.with(|w| w.borrow().get(&(d.node as usize)).is_none_or(|x| x.at_end));
    if ended {
        return;
    }
    // SAFETY: `d.node` is a valid, wrapped plan state; this is what ExecProcNode (an
    // inline function of executor.h) does, and what CHECK_FOR_INTERRUPTS does.
    unsafe {
        let mut rows: u64 = 0;
        while rows < DRAIN_LIMIT {
            if pg_sys::InterruptPending != 0 {
                ProcessInterrupts();
            }
            if !(*d.node).chgParam.is_null() {
                ExecReScan(d.node);
            }
            let slot = ((*d.node).ExecProcNode.expect("an ExecProcNode"))(d.node);
            if is_end(slot) {
                break;
            }
            rows += 1;
        }
        if via_hash {
            ExecReScan(d.node);
            set_at_end(d.node, false);
        }
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn verdict_of(j: *const Judgement, verdict: *mut Option<Verdict>) {
    // SAFETY: both pointers are the caller's locals.
    unsafe {
        *verdict = Some(match &*j {
            Judgement::NotOwned(rel) => Verdict::not_owned(*rel),
            Judgement::NotOwnedByTable(rel, gene) => Verdict::gene_not_owned_by_table(*rel, *gene),
            Judgement::Fenced(rel) => Verdict::fenced(*rel),
        });
    }
}
