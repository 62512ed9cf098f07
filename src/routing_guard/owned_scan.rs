//! Scans of a table laid out by ownership (docs/design.md §12): one relation holds every row
//! the shard has of the table, owned or not (a move's copies before its flip, the source's
//! rows after it until they are deleted), `id_gen.shard_tables` records the gene ranges it
//! owns (`owned_ranges.rs`), and the relation carries the trigger `id_gen_owned_rows`,
//! which refuses writes of genes not owned (IG001; not fired by a move's apply worker).
//! There is no tombstone for pruning to land on, so a scan of it that selects rows by id
//! (`id_predicates.rs`) is wrapped here: before it returns its first row of a pass (its
//! first call, and the first after each rescan: a nested loop's next outer row, a changed
//! parameter), it evaluates the ids its predicates select and refuses (IG001) when they
//! reach a gene the shard does not own. A read of genes not owned fails as it does on a
//! tombstone, instead of finding no rows.
//!
//! The ids selected: each `id = x`, `NOT (id IS DISTINCT FROM x)`, `id = ANY (array)`,
//! `id IN (list)`, `id < x`, `<=`, `>`, `>=` gives a set of ids
//! (`id_gen_core::id_selection`), AND-ed predicates intersect and OR-ed ones unite, where x
//! is a constant, a parameter (of a prepared statement, a nested loop, an InitPlan) or an
//! array of them (the planner folds immutable functions of constants into constants),
//! evaluated in the scan's expression context; a predicate that is not such a bound
//! selects every id. (An expression could fail here where the scan, which stops at its
//! first false predicate, would not evaluate it: `$1 <> 0 AND id = 10 / $1`.) The set is checked when it is bounded on both sides: each point
//! by its gene, each span over every gene it reaches. So `id = ANY (a) AND id < x` checks
//! only the points below x, and `id BETWEEN a AND b OR id BETWEEN c AND d` both spans.
//!
//! Cost: the genes owned are the backend's view taken at executor start (in a parallel
//! worker, loaded once under the statement's snapshot), and the check runs once per pass:
//! `id = ANY` of n ids is one sort of the n ids and n bit tests, however many rows the scan
//! returns.
//!
//! Invariants: a node is wrapped once, and its entry is forgotten when its query's memory
//! is reset (which frees the node); a pass's check is forgotten by a callback on the scan's
//! expression context, which ExecReScan shuts down before the node rescans (and ExecProcNode
//! rescans a node whose parameters changed before it calls it); the wrapper calls on what
//! the executor set, and when that replaced the node's ExecProcNode (ExecProcNodeFirst
//! does, once) it keeps the new function as its own next and puts back what was there
//! (itself, or `join_check.rs`'s wrapper, which is set after it). Evaluation (through
//! pgrx's FFI boundary: an error in it unwinds Rust frames before PostgreSQL handles it)
//! runs in a guarded function; the refusal is raised from the unguarded wrapper, which
//! holds nothing to drop.
//! Not checked (the scan answers with the rows the relation holds): bounds that are not
//! plain values (`id = $1 + 1`, a function of a parameter, the scan's own row, a subplan:
//! `id IN (SELECT ...)` not made a join), or are of a type other than int2, int4 and int8;
//! a set open on one side; joins by id are `join_check.rs`'s. An InitPlan that a bound
//! names runs when the check first evaluates it; an IG-class error of a guarded scan inside
//! it comes out as XX000 (through pgrx's FFI boundary), other errors with their SQLSTATE.

use super::id_predicates::{IdPredicate, ScanPredicates, Sides};
use super::owned_ranges::OwnedRanges;
use super::raise::Verdict;
use id_gen_core::id_selection::IdSelection;
use pgrx::pg_sys;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// How a bound's value limits the id.
#[derive(Clone, Copy, PartialEq)]
enum Limit {
    /// `id = x`.
    Point,
    /// `id = ANY (x)`: every element of an array.
    Points,
    /// `id >= x` (or `id > x`: `exclusive`).
    AtLeast { exclusive: bool },
    /// `id <= x` (or `id < x`).
    AtMost { exclusive: bool },
}

/// The ids a scan's predicates select, with the bounds' expressions started in the scan's
/// plan state.
enum Selects {
    /// One bound: its limit, its expression, and the type of its value (or of its array's
    /// elements): int2, int4 or int8.
    Bound {
        limit: Limit,
        state: *mut pg_sys::ExprState,
        typ: pg_sys::Oid,
    },
    All(Vec<Selects>),
    Any(Vec<Selects>),
    /// Every id (not a bound this check can evaluate).
    Unknown,
}

/// What the guard adds to a wrapped scan.
struct OwnedScan {
    next: pg_sys::ExecProcNodeMtd,
    relid: pg_sys::Oid,
    selects: Rc<Selects>,
    /// The backend's view of what it owns, taken at executor start.
    owned: Rc<OwnedRanges>,
    /// This pass is checked (cleared when the scan is rescanned).
    checked: bool,
}

thread_local! {
    /// Wrapped scans by address, each removed when its query's memory goes.
    static WRAPPED: RefCell<HashMap<usize, OwnedScan>> = RefCell::new(HashMap::new());
}

/// The reset callback of a wrapped scan's query context: the node is about to be freed.
unsafe extern "C-unwind" fn forget_node(node: *mut std::ffi::c_void) {
    WRAPPED.with(|w| {
        if let Ok(mut m) = w.try_borrow_mut() {
            m.remove(&(node as usize));
        }
    });
}

/// The shutdown callback of a wrapped scan's expression context (a rescan, or the end of
/// the query): the next pass is checked again.
unsafe extern "C-unwind" fn forget_check(node: pg_sys::Datum) {
    WRAPPED.with(|w| {
        if let Ok(mut m) = w.try_borrow_mut() {
            if let Some(e) = m.get_mut(&node.value()) {
                e.checked = false;
            }
        }
    });
}

/// Wraps a scan of a table laid out by ownership whose predicates select by the id column
/// `attnum` (see the header). A scan whose evaluable bounds do not bound the id on both
/// sides is left alone.
///
/// `owned`: the genes owned as of the executor's start, which the checks compare with.
///
/// # Safety
/// `ps` is a scan state of a tree being started, whose relation is open.
pub unsafe fn arm(ps: *mut pg_sys::PlanState, attnum: i16, owned: Rc<OwnedRanges>) {
    // SAFETY: as the caller promises; expressions are started in the query's memory.
    unsafe {
        let p = ScanPredicates::of((*ps).plan, attnum);
        let cxt = (*(*ps).state).es_query_cxt;
        let old = pg_sys::MemoryContextSwitchTo(cxt);
        let selects = start(ps, &p.predicate());
        pg_sys::MemoryContextSwitchTo(old);
        if selects.sides() != Sides::BOTH {
            return;
        }
        let relid = (*(*(ps as *mut pg_sys::ScanState)).ss_currentRelation).rd_id;
        WRAPPED.with(|w| {
            w.borrow_mut().insert(
                ps as usize,
                OwnedScan {
                    next: (*ps).ExecProcNode,
                    relid,
                    selects: Rc::new(selects),
                    owned,
                    checked: false,
                },
            )
        });
        let cb = pg_sys::MemoryContextAllocZero(
            cxt,
            std::mem::size_of::<pg_sys::MemoryContextCallback>(),
        ) as *mut pg_sys::MemoryContextCallback;
        (*cb).func = Some(forget_node);
        (*cb).arg = ps as *mut std::ffi::c_void;
        pg_sys::MemoryContextRegisterResetCallback(cxt, cb);
        (*ps).ExecProcNode = Some(run_checked);
    }
}

/// Whether `n` is a value that evaluating here can neither fail nor change: a constant, a
/// parameter (of a prepared statement, a nested loop, an InitPlan), or an array of them
/// (under binary-compatible casts). A function or an operator could raise an error where
/// the scan, which evaluates its predicates in order and stops at the first false one,
/// would not (`$1 <> 0 AND id = 10 / $1`).
unsafe fn is_plain_value(n: *mut pg_sys::Node) -> bool {
    use pg_sys::NodeTag::*;
    // SAFETY: `n` is NULL or a valid expression node.
    unsafe {
        let n = super::id_predicates::strip_relabel(n);
        if n.is_null() {
            return false;
        }
        match (*n).type_ {
            T_Const | T_Param => true,
            T_ArrayExpr => crate::pg_list::list_pointers((*(n as *mut pg_sys::ArrayExpr)).elements)
                .into_iter()
                .all(|e| is_plain_value(e as *mut pg_sys::Node)),
            _ => false,
        }
    }
}

/// A predicate's bounds started as expressions of `ps`: a bound whose value is not a plain
/// value (`is_plain_value`: so never one that refers to the scan's row, holds a subplan,
/// whose second start would add a second state of it to the plan, or a volatile function),
/// or is not of an integer type, is Unknown.
unsafe fn start(ps: *mut pg_sys::PlanState, p: &IdPredicate) -> Selects {
    // SAFETY: the values are expressions of the scan's predicates; `ps` its plan state.
    unsafe {
        let bound = |limit: Limit, value: *mut pg_sys::Node| {
            if !is_plain_value(value) {
                return Selects::Unknown;
            }
            let mut typ = pg_sys::exprType(value);
            if limit == Limit::Points {
                typ = pg_sys::get_element_type(typ);
            }
            if !matches!(typ, pg_sys::INT8OID | pg_sys::INT4OID | pg_sys::INT2OID) {
                return Selects::Unknown;
            }
            Selects::Bound {
                limit,
                state: pg_sys::ExecInitExpr(value as *mut pg_sys::Expr, ps),
                typ,
            }
        };
        match p {
            IdPredicate::Equals(v) => bound(Limit::Point, *v),
            IdPredicate::EqualsAny(v) => bound(Limit::Points, *v),
            IdPredicate::AtLeast { value, exclusive } => bound(
                Limit::AtLeast {
                    exclusive: *exclusive,
                },
                *value,
            ),
            IdPredicate::AtMost { value, exclusive } => bound(
                Limit::AtMost {
                    exclusive: *exclusive,
                },
                *value,
            ),
            IdPredicate::And(arms) => Selects::All(arms.iter().map(|a| start(ps, a)).collect()),
            IdPredicate::Or(arms) => Selects::Any(arms.iter().map(|a| start(ps, a)).collect()),
            IdPredicate::InSubquery | IdPredicate::Other => Selects::Unknown,
        }
    }
}

impl Selects {
    /// The sides of the id the evaluable bounds limit.
    fn sides(&self) -> Sides {
        match self {
            Selects::Bound { limit, .. } => match limit {
                Limit::Point | Limit::Points => Sides::BOTH,
                Limit::AtLeast { .. } => Sides::LOWER,
                Limit::AtMost { .. } => Sides::UPPER,
            },
            Selects::All(arms) => Sides::combine(arms.iter().map(|a| a.sides()), true),
            Selects::Any(arms) => Sides::combine(arms.iter().map(|a| a.sides()), false),
            Selects::Unknown => Sides::NONE,
        }
    }

    /// The ids selected, with the bounds' values as they are now.
    ///
    /// # Safety
    /// `econtext` is the expression context of the plan state the bounds were started in.
    unsafe fn evaluate(&self, econtext: *mut pg_sys::ExprContext) -> IdSelection {
        // SAFETY: as the caller promises; values are read as the type the bound recorded.
        unsafe {
            match self {
                Selects::Bound { limit, state, typ } => {
                    let Some(eval) = (**state).evalfunc else {
                        return IdSelection::everything();
                    };
                    let mut isnull = false;
                    // (Through pgrx's boundary: an ERROR of the evaluation, a cancel while
                    // an InitPlan runs for the first time here, becomes a Rust panic that
                    // unwinds this frame and is raised again by pg_guard. It keeps
                    // PostgreSQL's SQLSTATEs; an IG-class one of a guarded scan nested in
                    // that InitPlan would come out as XX000.)
                    let datum =
                        pg_sys::ffi::pg_guard_ffi_boundary(|| eval(*state, econtext, &mut isnull));
                    if isnull {
                        return IdSelection::nothing(); // (selects nothing)
                    }
                    let one = || as_i64(datum, *typ).expect("an integer type");
                    match *limit {
                        Limit::Point => IdSelection::points([one()]),
                        Limit::Points => IdSelection::points(array_values(datum, *typ)),
                        Limit::AtLeast { exclusive: true } => IdSelection::above(one()),
                        Limit::AtLeast { exclusive: false } => IdSelection::at_least(one()),
                        Limit::AtMost { exclusive: true } => IdSelection::below(one()),
                        Limit::AtMost { exclusive: false } => IdSelection::at_most(one()),
                    }
                }
                Selects::All(arms) => {
                    let mut ids = IdSelection::everything();
                    for a in arms {
                        if ids.is_empty() {
                            break;
                        }
                        ids = ids.intersect(&a.evaluate(econtext));
                    }
                    ids
                }
                Selects::Any(arms) => arms.iter().fold(IdSelection::nothing(), |ids, a| {
                    ids.union(&a.evaluate(econtext))
                }),
                Selects::Unknown => IdSelection::everything(),
            }
        }
    }
}

/// The ExecProcNode of a wrapped scan: checks the pass (once), then runs the scan.
/// Unguarded, so that it can raise an IG-class error (see `raise.rs`); nothing in this
/// frame needs dropping (the entry's fields are copied out as plain data).
unsafe extern "C-unwind" fn run_checked(ps: *mut pg_sys::PlanState) -> *mut pg_sys::TupleTableSlot {
    let key = ps as usize;
    let Some((next, checked)) = WRAPPED.with(|w| w.borrow().get(&key).map(|e| (e.next, e.checked)))
    else {
        // SAFETY: not ours any more (cannot happen: the entry is made before wrapping).
        return unsafe { ((*ps).ExecProcNodeReal.expect("a node's own function"))(ps) };
    };
    if !checked {
        let mut verdict: Option<Verdict> = None;
        // SAFETY: `ps` is the wrapped scan; `verdict` is this frame's local.
        unsafe { check_pass(ps, &mut verdict) };
        if let Some(v) = verdict {
            // SAFETY: nothing in this frame needs dropping.
            unsafe { super::raise::raise(v) };
        }
    }
    // SAFETY: `ps` is valid; the function the executor set for this node, which may replace
    // the node's ExecProcNode (ExecProcNodeFirst): it becomes our next, and what was there
    // (the outermost wrapper) is put back.
    unsafe {
        let before = (*ps).ExecProcNode;
        let slot = (next.expect("an ExecProcNode"))(ps);
        let now = (*ps).ExecProcNode;
        if now.map(|f| f as usize) != before.map(|f| f as usize) {
            WRAPPED.with(|w| {
                if let Some(e) = w.borrow_mut().get_mut(&key) {
                    e.next = now;
                }
            });
            (*ps).ExecProcNode = before;
        }
        slot
    }
}

/// Evaluates the ids a wrapped scan's pass selects and leaves a refusal in `*verdict` when
/// they reach a gene not owned; otherwise marks the pass checked until the next rescan.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn check_pass(ps: *mut pg_sys::PlanState, verdict: *mut Option<Verdict>) {
    let key = ps as usize;
    let Some((relid, selects, owned)) = WRAPPED.with(|w| {
        w.borrow()
            .get(&key)
            .map(|e| (e.relid, e.selects.clone(), e.owned.clone()))
    }) else {
        return;
    };
    // SAFETY: the scan's expression context belongs to `ps`, as do the bounds' states;
    // `verdict` is the caller's local.
    unsafe {
        let econtext = (*ps).ps_ExprContext;
        let old = pg_sys::MemoryContextSwitchTo((*econtext).ecxt_per_tuple_memory);
        let ids = selects.evaluate(econtext);
        pg_sys::MemoryContextSwitchTo(old);
        // (A table not recorded here owns no gene.)
        let none = id_gen_core::owned_genes::OwnedGenes::from_ranges([]);
        // (A gene a move has fenced is refused as well, with IG002.)
        let genes = owned.usable_of(relid).unwrap_or(&none);
        if let Some(gene) = ids.first_gene_not_owned(genes) {
            *verdict = Some(if owned.is_fenced(relid, gene) {
                Verdict::gene_fenced_in_table(relid, gene)
            } else {
                Verdict::gene_not_owned_by_table(relid, gene)
            });
            return;
        }
        pg_sys::RegisterExprContextCallback(econtext, Some(forget_check), pg_sys::Datum::from(key));
        WRAPPED.with(|w| {
            if let Some(e) = w.borrow_mut().get_mut(&key) {
                e.checked = true;
            }
        });
    }
}

/// A datum of type int2, int4 or int8 as an i64.
fn as_i64(datum: pg_sys::Datum, typ: pg_sys::Oid) -> Option<i64> {
    match typ {
        pg_sys::INT8OID => Some(datum.value() as i64),
        pg_sys::INT4OID => Some(datum.value() as i32 as i64),
        pg_sys::INT2OID => Some(datum.value() as i16 as i64),
        _ => None,
    }
}

/// The non-NULL elements of an array of int2, int4 or int8.
///
/// # Safety
/// `datum` is an array whose element type is `elem`, one of those.
unsafe fn array_values(datum: pg_sys::Datum, elem: pg_sys::Oid) -> Vec<i64> {
    // SAFETY: as the caller promises; deconstruct_array pallocs in the current context.
    unsafe {
        crate::pg_list::array_elements(datum, elem)
            .into_iter()
            .filter_map(|d| as_i64(d, elem))
            .collect()
    }
}
