//! Routing of id ranges: a planner hook that sends a statement whose id predicate selects
//! the genes of a single shard straight to that shard's partition of a table partitioned
//! by `id_gen.gene_route_ops`.
//!
//! PostgreSQL prunes hash partitions by equality only, so `WHERE id = x` needs nothing of
//! ours, but a lookup by owner, `id BETWEEN owner_first_id(o) AND owner_last_id(o)`, and any
//! two-sided id range would reach every shard. Before the standard planner runs, this hook
//! looks at the statement's top-level conjunction for bounds of the partition key on both
//! sides whose values are known now (constants, immutable functions of them, and parameters of a
//! custom plan); when every gene between them routes to one slot and that slot has a
//! partition, the range table entry becomes that partition (as if the statement had named
//! it). A generic plan of a parameterised range keeps all partitions: it costs more than
//! the custom plans, so the plan cache keeps choosing those.
//!
//! Invariants:
//!   * a statement is rewritten only where the result cannot change: every row its id
//!     bounds select lives in the chosen partition (the bounds stay in the statement);
//!   * the partition is locked as the parent was before the planner reads it, the caller
//!     must hold the parent's privileges on it too (else the statement is left alone),
//!     and tables with row security, sampling or security barrier quals are left alone;
//!   * a plan made this way depends on the parent (its OID is added to the plan's
//!     relations), so a route change, which invalidates the parent, re-plans it.

use crate::pg_list::list_pointers;
use pgrx::pg_sys;

static PREV_PLANNER: std::sync::OnceLock<pg_sys::planner_hook_type> = std::sync::OnceLock::new();

/// How an operator compares its left argument with its right one.
#[derive(Clone, Copy, PartialEq)]
enum Cmp {
    Eq,
    Lt,
    Gt,
    Le,
    Ge,
}

impl Cmp {
    /// The comparison with its arguments swapped.
    fn flipped(self) -> Cmp {
        match self {
            Cmp::Lt => Cmp::Gt,
            Cmp::Gt => Cmp::Lt,
            Cmp::Le => Cmp::Ge,
            Cmp::Ge => Cmp::Le,
            Cmp::Eq => Cmp::Eq,
        }
    }

    /// The comparison operators of bigint with bigint, integer and smallint (either side),
    /// by their OIDs in pg_operator.dat (int8eq .. int28ge), fixed since PostgreSQL 8.
    fn of_operator(opno: u32) -> Option<Cmp> {
        Some(match opno {
            410 | 416 | 15 | 1868 | 1862 => Cmp::Eq,
            412 | 418 | 37 | 1870 | 1864 => Cmp::Lt,
            413 | 419 | 76 | 1871 | 1865 => Cmp::Gt,
            414 | 420 | 80 | 1872 | 1866 => Cmp::Le,
            415 | 430 | 82 | 1873 | 1867 => Cmp::Ge,
            _ => return None,
        })
    }
}

/// Attribute numbers of `pg_partitioned_table` (unchanged from PostgreSQL 10 to 18).
const ANUM_PARTSTRAT: i16 = 2;
const ANUM_PARTNATTS: i16 = 3;
const ANUM_PARTATTRS: i16 = 5;
const ANUM_PARTCLASS: i16 = 6;

/// Installs the hook (from `_PG_init`).
pub fn install() {
    // SAFETY: _PG_init runs once per process before any query; the previous hook is kept
    // and called, so other extensions' planners still run.
    unsafe {
        if PREV_PLANNER.set(pg_sys::planner_hook).is_ok() {
            pg_sys::planner_hook = Some(planner);
        }
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn planner(
    parse: *mut pg_sys::Query,
    query_string: *const std::ffi::c_char,
    cursor_options: std::ffi::c_int,
    bound_params: pg_sys::ParamListInfo,
) -> *mut pg_sys::PlannedStmt {
    // SAFETY: the planner's arguments are valid for this call; route_ranges only rewrites
    // range table entries of `parse` (see its notes).
    let parents = unsafe { route_ranges(parse, bound_params) };
    // SAFETY: chaining to the previous hook or the standard planner with the same arguments.
    let stmt = unsafe {
        match PREV_PLANNER.get().copied().flatten() {
            Some(prev) => prev(parse, query_string, cursor_options, bound_params),
            None => pg_sys::standard_planner(parse, query_string, cursor_options, bound_params),
        }
    };
    for parent in parents {
        // SAFETY: `stmt` is the planner's result, allocated in the current memory context.
        unsafe { (*stmt).relationOids = pg_sys::lappend_oid((*stmt).relationOids, parent) };
    }
    stmt
}

/// # Safety
/// `node` is NULL or a valid expression tree.
unsafe fn conjuncts(node: *mut pg_sys::Node, out: &mut Vec<*mut pg_sys::Node>) {
    if node.is_null() {
        return;
    }
    // SAFETY: the tag says which node it is.
    unsafe {
        if (*node).type_ == pg_sys::NodeTag::T_BoolExpr
            && (*(node as *mut pg_sys::BoolExpr)).boolop == pg_sys::BoolExprType::AND_EXPR
        {
            for arg in list_pointers((*(node as *mut pg_sys::BoolExpr)).args) {
                conjuncts(arg as *mut pg_sys::Node, out);
            }
        } else {
            out.push(node);
        }
    }
}

/// The OID of `id_gen.gene_route_ops` (hash), if this database has it.
fn gene_route_opclass() -> Option<pg_sys::Oid> {
    // SAFETY: builds a qualified name and looks it up in the syscache (no error: missing_ok).
    let oid = unsafe {
        let name = pg_sys::list_make2_impl(
            pg_sys::NodeTag::T_List,
            pg_sys::ListCell {
                ptr_value: pg_sys::makeString(c"id_gen".as_ptr() as *mut _) as *mut _,
            },
            pg_sys::ListCell {
                ptr_value: pg_sys::makeString(c"gene_route_ops".as_ptr() as *mut _) as *mut _,
            },
        );
        pg_sys::get_opclass_oid(pg_sys::HASH_AM_OID, name, true)
    };
    (oid != pg_sys::InvalidOid).then_some(oid)
}

/// The key column of `relid` when it is partitioned by hash on one column with `opclass`.
///
/// # Safety
/// Inside a transaction.
unsafe fn route_key(relid: pg_sys::Oid, opclass: pg_sys::Oid) -> Option<i16> {
    // SAFETY: a syscache lookup; the attributes read are fixed-width or never toasted
    // (int2vector, oidvector), read before the tuple is released.
    unsafe {
        let tup = pg_sys::SearchSysCache1(
            pg_sys::SysCacheIdentifier::PARTRELID as i32,
            pg_sys::Datum::from(relid),
        );
        if tup.is_null() {
            return None;
        }
        let attr = |n: i16| {
            let mut isnull = false;
            let d = pg_sys::SysCacheGetAttr(
                pg_sys::SysCacheIdentifier::PARTRELID as i32,
                tup,
                n as _,
                &mut isnull,
            );
            (!isnull).then_some(d)
        };
        let mut key = None;
        if let (Some(strat), Some(natts), Some(attrs), Some(classes)) = (
            attr(ANUM_PARTSTRAT),
            attr(ANUM_PARTNATTS),
            attr(ANUM_PARTATTRS),
            attr(ANUM_PARTCLASS),
        ) {
            let attrs = attrs.cast_mut_ptr::<pg_sys::int2vector>();
            let classes = classes.cast_mut_ptr::<pg_sys::oidvector>();
            if strat.value() as u8 == b'h'
                && natts.value() as i16 == 1
                && (*classes).dim1 == 1
                && *(*classes).values.as_ptr() == opclass
            {
                key = Some(*(*attrs).values.as_ptr());
            }
        }
        pg_sys::ReleaseSysCache(tup);
        key
    }
}

/// Evaluates a variable-free expression now: its value if it folds to a non-NULL bigint,
/// integer or smallint constant (parameters count when the plan is a custom one).
///
/// # Safety
/// `expr` is a valid expression; inside planning.
unsafe fn value_now(expr: *mut pg_sys::Node, bound_params: pg_sys::ParamListInfo) -> Option<i64> {
    // SAFETY: checks, copies and folds a valid expression with a minimal planner state
    // that carries only the bound parameters (eval_const_expressions reads root->glob).
    unsafe {
        if pg_sys::contain_var_clause(expr) || pg_sys::contain_volatile_functions(expr) {
            return None;
        }
        let glob = pg_sys::palloc0(std::mem::size_of::<pg_sys::PlannerGlobal>())
            as *mut pg_sys::PlannerGlobal;
        (*glob).type_ = pg_sys::NodeTag::T_PlannerGlobal;
        (*glob).boundParams = bound_params;
        let root =
            pg_sys::palloc0(std::mem::size_of::<pg_sys::PlannerInfo>()) as *mut pg_sys::PlannerInfo;
        (*root).type_ = pg_sys::NodeTag::T_PlannerInfo;
        (*root).glob = glob;
        let folded =
            pg_sys::eval_const_expressions(root, pg_sys::copyObjectImpl(expr.cast()).cast());
        if folded.is_null() || (*folded).type_ != pg_sys::NodeTag::T_Const {
            return None;
        }
        let c = folded as *mut pg_sys::Const;
        if (*c).constisnull {
            return None;
        }
        let d = (*c).constvalue.value();
        let t = (*c).consttype;
        if t == pg_sys::INT8OID {
            Some(d as i64)
        } else if t == pg_sys::INT4OID {
            Some(d as i32 as i64)
        } else if t == pg_sys::INT2OID {
            Some(d as i16 as i64)
        } else {
            None
        }
    }
}

/// The id bounds `[low, high]` that the conjuncts put on the key, a column `(rti, attno)`
/// of the conjuncts' query level.
///
/// # Safety
/// The conjuncts are valid expressions.
unsafe fn id_bounds(
    quals: &[*mut pg_sys::Node],
    key: (u32, i16),
    bound_params: pg_sys::ParamListInfo,
) -> (Option<i64>, Option<i64>) {
    let (mut low, mut high): (Option<i64>, Option<i64>) = (None, None);
    for &q in quals {
        // SAFETY: the tag says which node it is; an OpExpr of these operators has two args.
        unsafe {
            if (*q).type_ != pg_sys::NodeTag::T_OpExpr {
                continue;
            }
            let op = q as *mut pg_sys::OpExpr;
            let Some(cmp) = Cmp::of_operator((*op).opno.to_u32()) else {
                continue;
            };
            let args = list_pointers((*op).args);
            if args.len() != 2 {
                continue;
            }
            let is_key = |n: *mut std::ffi::c_void| {
                let n = n as *mut pg_sys::Node;
                (*n).type_ == pg_sys::NodeTag::T_Var && {
                    let v = n as *mut pg_sys::Var;
                    ((*v).varno as u32, (*v).varattno) == key && (*v).varlevelsup == 0
                }
            };
            // id OP value, or value OP id (then the comparison turns around).
            let (value, cmp) = if is_key(args[0]) {
                (args[1], cmp)
            } else if is_key(args[1]) {
                (args[0], cmp.flipped())
            } else {
                continue;
            };
            let Some(v) = value_now(value as *mut pg_sys::Node, bound_params) else {
                continue;
            };
            let raise_low = |l: Option<i64>, x: i64| Some(l.map_or(x, |l| l.max(x)));
            let cut_high = |h: Option<i64>, x: i64| Some(h.map_or(x, |h| h.min(x)));
            match cmp {
                Cmp::Eq => {
                    low = raise_low(low, v);
                    high = cut_high(high, v);
                }
                Cmp::Ge => low = raise_low(low, v),
                Cmp::Gt => low = raise_low(low, v.saturating_add(1)),
                Cmp::Le => high = cut_high(high, v),
                Cmp::Lt => high = cut_high(high, v.saturating_sub(1)),
            }
        }
    }
    (low, high)
}

/// Rewrites the entries that a two-sided id range routes to one partition; returns their
/// parents.
///
/// # Safety
/// `parse` is the query being planned.
unsafe fn route_ranges(
    parse: *mut pg_sys::Query,
    bound_params: pg_sys::ParamListInfo,
) -> Vec<pg_sys::Oid> {
    let mut parents = vec![];
    // SAFETY: reads the query's own nodes.
    unsafe {
        let command = (*parse).commandType;
        if [
            pg_sys::CmdType::CMD_SELECT,
            pg_sys::CmdType::CMD_UPDATE,
            pg_sys::CmdType::CMD_DELETE,
        ]
        .contains(&command)
        {
            if let Some(opclass) = gene_route_opclass() {
                route_level(parse, opclass, bound_params, &[], &mut parents);
            }
        }
    }
    parents
}

/// Whether `rte` is a table that may be partitioned by `id_gen.gene_route_ops`.
///
/// # Safety
/// `rte` is a valid range table entry.
unsafe fn is_candidate(rte: *mut pg_sys::RangeTblEntry) -> bool {
    // SAFETY: reads plain fields of a valid entry.
    unsafe {
        (*rte).rtekind == pg_sys::RTEKind::RTE_RELATION
            && (*rte).inh
            && (*rte).relkind as u8 == pg_sys::RELKIND_PARTITIONED_TABLE
            && (*rte).tablesample.is_null()
            && (*rte).securityQuals.is_null()
    }
}

/// One query level: its tables partitioned by `id_gen.gene_route_ops`, bounded by its own
/// conjuncts and by `outer` (the conjuncts of the level above, with the column of this level's
/// output that they bound, when this level is a view over one such table); then the
/// subqueries in its FROM list, each with the conjuncts of this level that bound its output.
///
/// # Safety
/// `query` is a query being planned (or a subquery of it).
unsafe fn route_level(
    query: *mut pg_sys::Query,
    opclass: pg_sys::Oid,
    bound_params: pg_sys::ParamListInfo,
    outer: &[(*mut pg_sys::Node, i16)],
    parents: &mut Vec<pg_sys::Oid>,
) {
    // SAFETY: reads and rewrites the query's own nodes; see the notes at each step.
    unsafe {
        if (*query).jointree.is_null()
            || (*query).commandType != pg_sys::CmdType::CMD_SELECT && !outer.is_empty()
        {
            return;
        }
        let mut quals = vec![];
        conjuncts((*(*query).jointree).quals, &mut quals);
        let entries = list_pointers((*query).rtable);
        // A view (or subquery) that is one table, unfiltered by anything that would change
        // which rows a bound on its output selects: the bounds above apply to the table.
        let from = list_pointers((*(*query).jointree).fromlist);
        let plain_view = from.len() == 1
            && (*(from[0] as *mut pg_sys::Node)).type_ == pg_sys::NodeTag::T_RangeTblRef
            && (*query).setOperations.is_null()
            && (*query).groupClause.is_null()
            && (*query).distinctClause.is_null()
            && !(*query).hasAggs
            && !(*query).hasWindowFuncs
            && !(*query).hasTargetSRFs
            && (*query).limitCount.is_null()
            && (*query).limitOffset.is_null();
        for (i, &e) in entries.iter().enumerate() {
            let rte = e as *mut pg_sys::RangeTblEntry;
            let rti = i as u32 + 1;
            if !is_candidate(rte) {
                continue;
            }
            let Some(attno) = route_key((*rte).relid, opclass) else {
                continue;
            };
            let mut bounds = id_bounds(&quals, (rti, attno), bound_params);
            if plain_view && (*(from[0] as *mut pg_sys::RangeTblRef)).rtindex as u32 == rti {
                // The output columns that are the key, and what the level above says of them.
                for (k, &te) in list_pointers((*query).targetList).iter().enumerate() {
                    let te = te as *mut pg_sys::TargetEntry;
                    let expr = (*te).expr as *mut pg_sys::Node;
                    if (*te).resjunk || (*expr).type_ != pg_sys::NodeTag::T_Var {
                        continue;
                    }
                    let v = expr as *mut pg_sys::Var;
                    if ((*v).varno as u32, (*v).varattno, (*v).varlevelsup) != (rti, attno, 0) {
                        continue;
                    }
                    let column = k as i16 + 1;
                    let above: Vec<_> = outer
                        .iter()
                        .filter(|(_, c)| *c == column)
                        .map(|(q, _)| *q)
                        .collect();
                    let (low, high) = id_bounds_of_column(&above, column, bound_params);
                    bounds = (max_of(bounds.0, low), min_of(bounds.1, high));
                }
            }
            let (Some(low), Some(high)) = bounds else {
                continue;
            };
            if low < 0 || low > high {
                continue;
            }
            let Some(slot) = super::single_slot((low >> 47) as u16, (high >> 47) as u16) else {
                continue;
            };
            let parent = (*rte).relid;
            if let Some(part) = partition_of_slot(rte, slot) {
                if take_partition(query, rte, part) {
                    parents.push(parent);
                }
            }
        }
        // Subqueries in FROM (a view is one): the conjuncts of this level go with them.
        for (i, &e) in entries.iter().enumerate() {
            let rte = e as *mut pg_sys::RangeTblEntry;
            if (*rte).rtekind != pg_sys::RTEKind::RTE_SUBQUERY || (*rte).subquery.is_null() {
                continue;
            }
            let rti = i as u32 + 1;
            let mut passed = vec![];
            for &q in &quals {
                if let Some(column) = bounded_column(q, rti) {
                    passed.push((q, column));
                }
            }
            route_level((*rte).subquery, opclass, bound_params, &passed, parents);
        }
    }
}

/// The bounds that conjuncts of the level above put on output column `column` of the
/// subquery they were found on (each conjunct names that subquery's entry).
///
/// # Safety
/// The conjuncts are valid expressions, each a comparison of one Var.
unsafe fn id_bounds_of_column(
    quals: &[*mut pg_sys::Node],
    column: i16,
    bound_params: pg_sys::ParamListInfo,
) -> (Option<i64>, Option<i64>) {
    let mut bounds = (None, None);
    for &q in quals {
        // SAFETY: bounded_column found a Var of this column in `q`.
        let Some(varno) = (unsafe { var_of(q) }) else {
            continue;
        };
        // SAFETY: as above.
        let (low, high) = unsafe { id_bounds(&[q], (varno, column), bound_params) };
        bounds = (max_of(bounds.0, low), min_of(bounds.1, high));
    }
    bounds
}

/// The column of entry `rti` that a two-argument comparison of bigints compares, if one side
/// is a Var of it.
///
/// # Safety
/// `q` is a valid expression.
unsafe fn bounded_column(q: *mut pg_sys::Node, rti: u32) -> Option<i16> {
    // SAFETY: the tags say which nodes they are.
    unsafe {
        if (*q).type_ != pg_sys::NodeTag::T_OpExpr {
            return None;
        }
        let op = q as *mut pg_sys::OpExpr;
        Cmp::of_operator((*op).opno.to_u32())?;
        list_pointers((*op).args).into_iter().find_map(|a| {
            let a = a as *mut pg_sys::Node;
            if (*a).type_ != pg_sys::NodeTag::T_Var {
                return None;
            }
            let v = a as *mut pg_sys::Var;
            ((*v).varno as u32 == rti && (*v).varlevelsup == 0).then_some((*v).varattno)
        })
    }
}

/// The range table index of the Var a comparison compares (see `bounded_column`).
///
/// # Safety
/// `q` is a valid OpExpr.
unsafe fn var_of(q: *mut pg_sys::Node) -> Option<u32> {
    // SAFETY: as in bounded_column.
    unsafe {
        list_pointers((*(q as *mut pg_sys::OpExpr)).args)
            .into_iter()
            .find_map(|a| {
                let a = a as *mut pg_sys::Node;
                ((*a).type_ == pg_sys::NodeTag::T_Var)
                    .then(|| (*(a as *mut pg_sys::Var)).varno as u32)
            })
    }
}

fn max_of(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

fn min_of(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// The partition of the parent of `rte` whose remainder is `slot`, when the parent has the
/// plain shape this hook rewrites to (no row security; every partition of modulus 1024; the
/// partition's columns numbered as the parent's), locked in the entry's lock mode.
///
/// # Safety
/// `rte` is a relation entry whose parent the parser has locked.
unsafe fn partition_of_slot(rte: *mut pg_sys::RangeTblEntry, slot: u16) -> Option<pg_sys::Oid> {
    // SAFETY: the parent is locked (parse analysis locks every relation of the range
    // table); the partition is locked before its descriptor is read; both are closed
    // keeping their locks, as the planner would.
    unsafe {
        let rel = pg_sys::relation_open((*rte).relid, pg_sys::NoLock as _);
        let part = (|| {
            if (*(*rel).rd_rel).relrowsecurity {
                return None;
            }
            let pd = pg_sys::RelationGetPartitionDesc(rel, true);
            if pd.is_null() || (*pd).boundinfo.is_null() {
                return None;
            }
            let bi = (*pd).boundinfo;
            if (*bi).strategy as u8 != b'h'
                || (*bi).nindexes as u64 != id_gen_core::route_slots::MODULUS
            {
                return None;
            }
            let index = *(*bi).indexes.add(slot as usize);
            if index < 0 {
                return None;
            }
            let part = *(*pd).oids.add(index as usize);
            let part_rel = pg_sys::relation_open(part, (*rte).rellockmode);
            let same = same_columns((*rel).rd_att, (*part_rel).rd_att);
            pg_sys::relation_close(part_rel, pg_sys::NoLock as _);
            same.then_some(part)
        })();
        pg_sys::relation_close(rel, pg_sys::NoLock as _);
        part
    }
}

/// Whether two tuple descriptors number the same columns alike (name, type, dropped).
///
/// # Safety
/// Both are valid tuple descriptors.
unsafe fn same_columns(a: pg_sys::TupleDesc, b: pg_sys::TupleDesc) -> bool {
    // SAFETY: valid descriptors, wrapped without taking ownership.
    let (a, b) = unsafe {
        (
            pgrx::PgTupleDesc::from_pg_unchecked(a),
            pgrx::PgTupleDesc::from_pg_unchecked(b),
        )
    };
    a.len() == b.len()
        && (0..a.len()).all(|i| match (a.get(i), b.get(i)) {
            (Some(x), Some(y)) => {
                x.attisdropped == y.attisdropped
                    && x.atttypid == y.atttypid
                    && x.atttypmod == y.atttypmod
                    && x.attname.data == y.attname.data
            }
            _ => false,
        })
}

/// Points `rte` at `part` instead of its parent, if the caller holds the parent's required
/// privileges on the partition too (else the entry is left as it was).
///
/// # Safety
/// `rte` is an entry of `parse`'s range table; `part` is locked.
unsafe fn take_partition(
    parse: *mut pg_sys::Query,
    rte: *mut pg_sys::RangeTblEntry,
    part: pg_sys::Oid,
) -> bool {
    // SAFETY: reads the entry's permission data (PostgreSQL 16 and later keep it in
    // `rteperminfos`, earlier ones in the entry) and rewrites the entry in place.
    unsafe {
        #[cfg(feature = "pg15")]
        let (required, check_as) = {
            let _ = parse;
            ((*rte).requiredPerms, (*rte).checkAsUser)
        };
        #[cfg(not(feature = "pg15"))]
        if (*rte).perminfoindex == 0 {
            return false;
        }
        #[cfg(not(feature = "pg15"))]
        let perminfo = pg_sys::getRTEPermissionInfo((*parse).rteperminfos, rte);
        #[cfg(not(feature = "pg15"))]
        let (required, check_as) = ((*perminfo).requiredPerms, (*perminfo).checkAsUser);
        let user = if check_as != pg_sys::InvalidOid {
            check_as
        } else {
            pg_sys::GetUserId()
        };
        if pg_sys::pg_class_aclcheck(part, user, required) != pg_sys::AclResult::ACLCHECK_OK {
            return false;
        }
        (*rte).relid = part;
        (*rte).relkind = pg_sys::get_rel_relkind(part);
        (*rte).inh = false;
        #[cfg(not(feature = "pg15"))]
        {
            (*perminfo).relid = part;
            (*perminfo).inh = false;
        }
        true
    }
}
