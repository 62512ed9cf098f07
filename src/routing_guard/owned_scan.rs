//! Scans of a table laid out by ownership (docs/design.md §12): one relation holds every row
//! the shard has of the table, owned or not (a move's copies before its flip, the source's
//! rows after it until they are deleted), `id_gen.shard_tables` records the gene ranges it
//! owns (`owned_ranges.rs`), and the relation carries the trigger `id_gen_owned_rows`,
//! which refuses writes of genes not owned (IG001; not fired by a move's apply worker).
//! There is no tombstone for pruning to land on, so a scan of it that selects rows by id
//! (`plan_check.rs`'s test) is wrapped here: at each call (so after every rescan, a nested
//! loop's next outer row included, whether or not the last pass ran to its end) it
//! evaluates the id bounds of its predicates and refuses (IG001) when they reach a gene the
//! shard does not own, before the scan returns a row. A read of genes not owned fails as it
//! does on a tombstone, instead of finding no rows. (An id-selected scan returns few rows;
//! a bound costs one evaluation of a constant or a parameter and one bit per call.)
//!
//! The bounds: of the scan's AND-ed predicates (filter, index, bitmap conditions), each
//! `id = x`, `id = ANY (array)` and `id IN (list)` (points, with OR-ed arms of them), and
//! `id < x`, `<=`, `>`, `>=` (a range), where x is an expression without a Var, a subplan or
//! a volatile function (constants, parameters of a prepared statement, a nested loop's or an
//! InitPlan's parameters, stable functions of them), evaluated in the scan's expression
//! context. Points are checked gene by gene; without
//! points, a range bounded on both sides is checked over every gene it spans.
//!
//! Invariants: a node is wrapped once, and its entry is forgotten when its query's memory is
//! reset (which frees the node); the wrapper calls on what the executor set, and when that
//! replaced the node's ExecProcNode (ExecProcNodeFirst does, once) it keeps the new function
//! as its own next and puts back what was there (itself, or `join_check.rs`'s wrapper, which
//! is set after it). Evaluation (through pgrx's FFI boundary: an error in it unwinds Rust
//! frames before PostgreSQL handles it) and the ownership lookup (which may load the
//! backend's copy by SQL) run in a guarded function; the refusal is raised from the
//! unguarded wrapper, which holds nothing to drop.
//! Not checked (the scan answers with the rows the relation holds): bounds that depend on
//! the scan's own row, hold a volatile function or a subplan (`id IN (SELECT ...)` not made
//! a join), or are of a type other than int2, int4 and int8, `NOT (id IS DISTINCT FROM x)`,
//! and an OR of ranges (`id BETWEEN a AND b OR id BETWEEN c AND d`); joins by id are
//! `join_check.rs`'s. Still to mend before a layout uses it (review of 0.7.7): points of
//! several AND-ed clauses are checked as their union and a range beside them is ignored,
//! so `id = ANY (...) AND id < x` can be refused for a point the range excludes; the bounds
//! are evaluated and checked at every call, so `id = ANY` of n ids costs n² and a parallel
//! worker loads the owned ranges (SQL, uncached in parallel mode) per call: the genes owned
//! should be taken at executor start and the check repeated only when a parameter changed.

use super::plan_check::{binary_args, operator_name, strip_relabel, ScanPredicates};
use super::raise::Verdict;
use pgrx::pg_sys;
use std::cell::RefCell;
use std::collections::HashMap;

/// How a bound's value limits the id.
#[derive(Clone, Copy, PartialEq)]
enum Limit {
    /// `id = x`.
    Point,
    /// `id = ANY (x)`: every element of an array.
    Points,
    /// `id >= x` (or `id > x`: `exclusive`).
    Lower { exclusive: bool },
    /// `id <= x` (or `id < x`).
    Upper { exclusive: bool },
}

/// One evaluable bound: its limit, its expression (started in the scan's plan state), and
/// the type of its value (or of its array's elements).
#[derive(Clone, Copy)]
struct Bound {
    limit: Limit,
    state: *mut pg_sys::ExprState,
    typ: pg_sys::Oid,
}

/// What the guard adds to a wrapped scan.
struct OwnedScan {
    next: pg_sys::ExecProcNodeMtd,
    relid: pg_sys::Oid,
    bounds: Vec<Bound>,
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

/// Wraps a scan of a table laid out by ownership whose predicates select by the id column
/// `attnum` (see the header). A scan with no evaluable bound is left alone.
///
/// # Safety
/// `ps` is a scan state of a tree being started, whose relation is open.
pub unsafe fn arm(ps: *mut pg_sys::PlanState, attnum: i16) {
    // SAFETY: as the caller promises; expressions are started in the query's memory.
    unsafe {
        let p = ScanPredicates::of((*ps).plan, attnum);
        let is_id = |n: *mut pg_sys::Node| p.is_id(n);
        let cxt = (*(*ps).state).es_query_cxt;
        let old = pg_sys::MemoryContextSwitchTo(cxt);
        let mut bounds = vec![];
        for &q in &p.quals {
            collect(ps, q, &is_id, false, &mut bounds);
        }
        pg_sys::MemoryContextSwitchTo(old);
        if bounds.is_empty() {
            return;
        }
        let relid = (*(*(ps as *mut pg_sys::ScanState)).ss_currentRelation).rd_id;
        WRAPPED.with(|w| {
            w.borrow_mut().insert(
                ps as usize,
                OwnedScan {
                    next: (*ps).ExecProcNode,
                    relid,
                    bounds,
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

/// Starts `value` as an expression of `ps` and adds it as a bound, unless it refers to the
/// scan's row, holds a subplan (starting it again would add a second state of it to the
/// plan) or a volatile function (evaluated again here, it could give another value than
/// the scan's).
unsafe fn push(
    ps: *mut pg_sys::PlanState,
    out: &mut Vec<Bound>,
    limit: Limit,
    value: *mut pg_sys::Node,
    typ: pg_sys::Oid,
) {
    // SAFETY: `value` is an expression of the scan's predicates; `ps` its plan state.
    unsafe {
        if pg_sys::contain_var_clause(value)
            || pg_sys::contain_subplans(value)
            || pg_sys::contain_volatile_functions(value)
        {
            return;
        }
        out.push(Bound {
            limit,
            state: pg_sys::ExecInitExpr(value as *mut pg_sys::Expr, ps),
            typ,
        });
    }
}

/// The bounds one predicate puts on the id, started as expressions of `ps`. Inside an OR
/// (`in_or`) only points count, and the OR counts only when each of its arms gives some.
unsafe fn collect(
    ps: *mut pg_sys::PlanState,
    n: *mut pg_sys::Node,
    is_id: &dyn Fn(*mut pg_sys::Node) -> bool,
    in_or: bool,
    out: &mut Vec<Bound>,
) {
    use pg_sys::NodeTag::*;
    // SAFETY: `n` is a valid expression node of the scan's predicates.
    unsafe {
        if n.is_null() {
            return;
        }
        match (*n).type_ {
            T_OpExpr => {
                let e = n as *mut pg_sys::OpExpr;
                let Some((l, r)) = binary_args(e) else { return };
                let (id_left, id_right) = (is_id(l), is_id(r));
                if id_left == id_right {
                    return;
                }
                let value = if id_left { r } else { l };
                let limit = match (operator_name((*e).opno).as_slice(), id_left) {
                    (b"=", _) => Limit::Point,
                    (b"<", true) | (b">", false) => Limit::Upper { exclusive: true },
                    (b"<=", true) | (b">=", false) => Limit::Upper { exclusive: false },
                    (b">", true) | (b"<", false) => Limit::Lower { exclusive: true },
                    (b">=", true) | (b"<=", false) => Limit::Lower { exclusive: false },
                    _ => return,
                };
                if !in_or || limit == Limit::Point {
                    push(ps, out, limit, value, pg_sys::exprType(value));
                }
            }
            T_ScalarArrayOpExpr => {
                let e = n as *mut pg_sys::ScalarArrayOpExpr;
                let args = crate::pg_list::list_pointers((*e).args);
                if (*e).useOr
                    && args.len() == 2
                    && is_id(args[0] as *mut pg_sys::Node)
                    && operator_name((*e).opno) == b"="
                {
                    let value = strip_relabel(args[1] as *mut pg_sys::Node);
                    push(
                        ps,
                        out,
                        Limit::Points,
                        value,
                        pg_sys::get_element_type(pg_sys::exprType(value)),
                    );
                }
            }
            T_BoolExpr => {
                let b = n as *mut pg_sys::BoolExpr;
                let args = crate::pg_list::list_pointers((*b).args);
                match (*b).boolop {
                    pg_sys::BoolExprType::AND_EXPR => {
                        for a in args {
                            collect(ps, a as *mut pg_sys::Node, is_id, in_or, out);
                        }
                    }
                    pg_sys::BoolExprType::OR_EXPR if !in_or => {
                        // id = 1 OR id = 2: every arm must give points, or the OR is left out.
                        let before = out.len();
                        let mut all_points = !args.is_empty();
                        for a in args {
                            let n0 = out.len();
                            collect(ps, a as *mut pg_sys::Node, is_id, true, out);
                            all_points &= out.len() > n0;
                        }
                        if !all_points {
                            out.truncate(before);
                        }
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
}

/// The ExecProcNode of a wrapped scan: checks the bounds as they are now, then runs the
/// scan. Unguarded, so that it can raise an IG-class error (see `raise.rs`); nothing in this
/// frame needs dropping (the entry's fields are copied out as plain data).
unsafe extern "C-unwind" fn run_checked(ps: *mut pg_sys::PlanState) -> *mut pg_sys::TupleTableSlot {
    let key = ps as usize;
    let Some(next) = WRAPPED.with(|w| w.borrow().get(&key).map(|e| e.next)) else {
        // SAFETY: not ours any more (cannot happen: the entry is made before wrapping).
        return unsafe { ((*ps).ExecProcNodeReal.expect("a node's own function"))(ps) };
    };
    let mut verdict: Option<Verdict> = None;
    // SAFETY: `ps` is the wrapped scan; `verdict` is this frame's local.
    unsafe { scan_verdict(ps, &mut verdict) };
    if let Some(v) = verdict {
        // SAFETY: nothing in this frame needs dropping.
        unsafe { super::raise::raise(v) };
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

/// Evaluates a wrapped scan's bounds and leaves a refusal in `*verdict` when they reach a
/// gene not owned.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn scan_verdict(
    ps: *mut pg_sys::PlanState,
    verdict: *mut Option<Verdict>,
) {
    let Some((relid, bounds)) = WRAPPED.with(|w| {
        w.borrow()
            .get(&(ps as usize))
            .map(|e| (e.relid, e.bounds.clone()))
    }) else {
        return;
    };
    // SAFETY: the scan's expression context and the bounds' states belong to `ps`; values
    // are read as the type exprType gave (int2, int4, int8, or arrays of them).
    unsafe {
        let econtext = (*ps).ps_ExprContext;
        let old = pg_sys::MemoryContextSwitchTo((*econtext).ecxt_per_tuple_memory);
        let mut points: Vec<i64> = vec![];
        let mut has_points = false;
        let (mut lower, mut upper): (Option<i64>, Option<i64>) = (None, None);
        for b in &bounds {
            let mut isnull = false;
            let Some(eval) = (*b.state).evalfunc else {
                continue;
            };
            // (Through pgrx's boundary: an ERROR of the evaluation, a cancel while an
            // InitPlan runs for the first time here, becomes a Rust panic that unwinds this
            // frame and is raised again by pg_guard. It keeps PostgreSQL's SQLSTATEs; an
            // IG-class one of a guarded scan nested in that InitPlan would come out as XX000.)
            let datum = pg_sys::ffi::pg_guard_ffi_boundary(|| eval(b.state, econtext, &mut isnull));
            match b.limit {
                Limit::Point | Limit::Points => has_points = true,
                _ => {}
            }
            if isnull {
                continue; // (selects nothing)
            }
            match b.limit {
                Limit::Point => {
                    if let Some(v) = as_i64(datum, b.typ) {
                        points.push(v);
                    }
                }
                Limit::Points => points.extend(array_values(datum, b.typ)),
                Limit::Lower { exclusive } => {
                    if let Some(v) = as_i64(datum, b.typ) {
                        let v = if exclusive { v.saturating_add(1) } else { v };
                        lower = Some(lower.map_or(v, |l| l.max(v)));
                    }
                }
                Limit::Upper { exclusive } => {
                    if let Some(v) = as_i64(datum, b.typ) {
                        let v = if exclusive { v.saturating_sub(1) } else { v };
                        upper = Some(upper.map_or(v, |u| u.min(v)));
                    }
                }
            }
        }
        pg_sys::MemoryContextSwitchTo(old);
        let owned = super::owned_ranges::current();
        let owns = |gene: u16| owned.of(relid).is_some_and(|o| o.contains_gene(gene));
        let refused = if has_points {
            // (A range alongside points only narrows what the points select.)
            points
                .iter()
                .filter(|&&id| id >= 0)
                .map(|&id| (id >> id_gen_core::layout::SEQ_BITS) as u16)
                .find(|&g| !owns(g))
        } else if let (Some(lo), Some(hi)) = (lower, upper) {
            let (lo, hi) = (lo.max(0), hi);
            if lo > hi {
                None
            } else {
                let (glo, ghi) = (
                    (lo >> id_gen_core::layout::SEQ_BITS) as u16,
                    (hi >> id_gen_core::layout::SEQ_BITS) as u16,
                );
                (glo..=ghi).find(|&g| !owns(g))
            }
        } else {
            None
        };
        if let Some(gene) = refused {
            *verdict = Some(Verdict::gene_not_owned_by_table(relid, gene));
        }
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
/// `datum` is an array whose element type is `elem`.
unsafe fn array_values(datum: pg_sys::Datum, elem: pg_sys::Oid) -> Vec<i64> {
    if !matches!(elem, pg_sys::INT8OID | pg_sys::INT4OID | pg_sys::INT2OID) {
        return vec![];
    }
    // SAFETY: as the caller promises; deconstruct_array pallocs in the current context.
    unsafe {
        let array = pg_sys::pg_detoast_datum(datum.cast_mut_ptr()) as *mut pg_sys::ArrayType;
        let (mut len, mut byval, mut align) = (0i16, false, 0 as std::ffi::c_char);
        pg_sys::get_typlenbyvalalign(elem, &mut len, &mut byval, &mut align);
        let mut values: *mut pg_sys::Datum = std::ptr::null_mut();
        let mut nulls: *mut bool = std::ptr::null_mut();
        let mut n: i32 = 0;
        pg_sys::deconstruct_array(
            array,
            elem,
            len as i32,
            byval,
            align,
            &mut values,
            &mut nulls,
            &mut n,
        );
        (0..n.max(0) as usize)
            .filter(|&i| !*nulls.add(i))
            .filter_map(|i| as_i64(*values.add(i), elem))
            .collect()
    }
}
