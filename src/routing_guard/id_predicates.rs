//! What a scan's predicates say about a table's id column, read from the plan: the one
//! reading shared by the executor-start check (`plan_check.rs`: does the scan select rows
//! by id?), the check of tables laid out by ownership (`owned_scan.rs`: which ids does it
//! select?) and the join check (`join_check.rs`: the expression helpers).
//!
//! A predicate becomes an [`IdPredicate`]: `id = x` and `NOT (id IS DISTINCT FROM x)` (a
//! point), `id = ANY (array)` and `id IN (list)` (points), `id < x`, `<=`, `>`, `>=` (a
//! side), `id IN (SELECT ...)` left as a subplan (ids, not evaluable here), and ANDs and ORs
//! of them; anything else (another column, `id % 2`, `id IS NOT NULL`) says nothing about
//! the id. The id is a Var of the scanned relation (under binary-compatible casts), or an
//! index-only scan's index column that its index target list maps to it.
//!
//! Invariants: reads plan nodes only, never changes them, and runs no SQL (operator names
//! come from the syscache); a predicate is "selecting by id" exactly when it bounds the id
//! on both sides, where an AND bounds a side when one of its arms does and an OR when all
//! of its arms do.

use pgrx::pg_sys;
use std::ffi::CStr;

/// What one predicate says about the id. The values are the plan's expressions.
pub(super) enum IdPredicate {
    /// `id = value`, `NOT (id IS DISTINCT FROM value)`.
    Equals(*mut pg_sys::Node),
    /// `id = ANY (value)`, `id IN (...)`: every element of an array.
    EqualsAny(*mut pg_sys::Node),
    /// `id >= value` (`id > value`: exclusive).
    AtLeast {
        value: *mut pg_sys::Node,
        exclusive: bool,
    },
    /// `id <= value` (`id < value`: exclusive).
    AtMost {
        value: *mut pg_sys::Node,
        exclusive: bool,
    },
    /// `id IN (SELECT ...)` as a (hashed or correlated) subplan: selects ids, whose values
    /// are the subquery's.
    InSubquery,
    And(Vec<IdPredicate>),
    Or(Vec<IdPredicate>),
    /// Says nothing about the id.
    Other,
}

/// Which sides of the id a predicate bounds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Sides {
    pub lower: bool,
    pub upper: bool,
}

impl Sides {
    pub const BOTH: Sides = Sides {
        lower: true,
        upper: true,
    };
    pub const NONE: Sides = Sides {
        lower: false,
        upper: false,
    };
    /// A lower bound only (`id >= x`).
    pub const LOWER: Sides = Sides {
        lower: true,
        upper: false,
    };
    /// An upper bound only (`id <= x`).
    pub const UPPER: Sides = Sides {
        lower: false,
        upper: true,
    };
    /// The sides an AND of predicates with these sides bounds.
    pub fn and(self, other: Sides) -> Sides {
        Sides {
            lower: self.lower || other.lower,
            upper: self.upper || other.upper,
        }
    }
    /// The sides an OR of predicates with these sides bounds.
    pub fn or(self, other: Sides) -> Sides {
        Sides {
            lower: self.lower && other.lower,
            upper: self.upper && other.upper,
        }
    }
    /// The sides of an AND (`and`) or an OR of arms.
    pub fn combine(arms: impl IntoIterator<Item = Sides>, and: bool) -> Sides {
        let mut arms = arms.into_iter();
        let Some(first) = arms.next() else {
            return Sides::NONE;
        };
        arms.fold(first, |a, b| if and { a.and(b) } else { a.or(b) })
    }
}

impl IdPredicate {
    /// Reads one predicate, the id told by `is_id`.
    ///
    /// # Safety
    /// `n` is NULL or a valid expression node of a plan's predicates.
    pub(super) unsafe fn of(
        n: *mut pg_sys::Node,
        is_id: &dyn Fn(*mut pg_sys::Node) -> bool,
    ) -> IdPredicate {
        use pg_sys::NodeTag::*;
        // SAFETY: as the caller promises; every node is read as its tag says.
        unsafe {
            if n.is_null() {
                return IdPredicate::Other;
            }
            match (*n).type_ {
                T_OpExpr => {
                    let e = n as *mut pg_sys::OpExpr;
                    let Some((l, r)) = binary_args(e) else {
                        return IdPredicate::Other;
                    };
                    let (id_left, id_right) = (is_id(l), is_id(r));
                    if id_left == id_right {
                        return IdPredicate::Other;
                    }
                    let value = if id_left { r } else { l };
                    match (operator_name((*e).opno).as_slice(), id_left) {
                        (b"=", _) => IdPredicate::Equals(value),
                        (b"<", true) | (b">", false) => IdPredicate::AtMost {
                            value,
                            exclusive: true,
                        },
                        (b"<=", true) | (b">=", false) => IdPredicate::AtMost {
                            value,
                            exclusive: false,
                        },
                        (b">", true) | (b"<", false) => IdPredicate::AtLeast {
                            value,
                            exclusive: true,
                        },
                        (b">=", true) | (b"<=", false) => IdPredicate::AtLeast {
                            value,
                            exclusive: false,
                        },
                        _ => IdPredicate::Other,
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
                        IdPredicate::EqualsAny(strip_relabel(args[1] as *mut pg_sys::Node))
                    } else {
                        IdPredicate::Other
                    }
                }
                T_BoolExpr => {
                    let b = n as *mut pg_sys::BoolExpr;
                    let args = crate::pg_list::list_pointers((*b).args);
                    let arms = || {
                        args.iter()
                            .map(|&a| IdPredicate::of(a as *mut pg_sys::Node, is_id))
                            .collect()
                    };
                    match (*b).boolop {
                        pg_sys::BoolExprType::AND_EXPR => IdPredicate::And(arms()),
                        pg_sys::BoolExprType::OR_EXPR => IdPredicate::Or(arms()),
                        _ => {
                            // NOT (id IS DISTINCT FROM x): id IS NOT DISTINCT FROM x (a
                            // DistinctExpr is laid out as an OpExpr).
                            let inner = args
                                .first()
                                .map_or(std::ptr::null_mut(), |a| *a as *mut pg_sys::Node);
                            if inner.is_null() || (*inner).type_ != T_DistinctExpr {
                                return IdPredicate::Other;
                            }
                            match binary_args(inner as *mut pg_sys::OpExpr) {
                                Some((l, r)) if is_id(l) != is_id(r) => {
                                    IdPredicate::Equals(if is_id(l) { r } else { l })
                                }
                                _ => IdPredicate::Other,
                            }
                        }
                    }
                }
                T_SubPlan => {
                    // id IN (SELECT ...) as a (hashed) subplan: its test compares the id with
                    // the subquery's column; a correlated subplan gets the id as an argument.
                    let sp = n as *mut pg_sys::SubPlan;
                    let by_argument = crate::pg_list::list_pointers((*sp).args)
                        .into_iter()
                        .any(|a| is_id(a as *mut pg_sys::Node));
                    if by_argument || IdPredicate::of((*sp).testexpr, is_id).sides() == Sides::BOTH
                    {
                        IdPredicate::InSubquery
                    } else {
                        IdPredicate::Other
                    }
                }
                T_AlternativeSubPlan => {
                    // Either of its subplans runs: by id when one of them is.
                    let alt = n as *mut pg_sys::AlternativeSubPlan;
                    let by_id = crate::pg_list::list_pointers((*alt).subplans)
                        .into_iter()
                        .any(|p| {
                            matches!(
                                IdPredicate::of(p as *mut pg_sys::Node, is_id),
                                IdPredicate::InSubquery
                            )
                        });
                    if by_id {
                        IdPredicate::InSubquery
                    } else {
                        IdPredicate::Other
                    }
                }
                _ => IdPredicate::Other,
            }
        }
    }

    /// The sides of the id this predicate bounds.
    pub(super) fn sides(&self) -> Sides {
        match self {
            IdPredicate::Equals(_) | IdPredicate::EqualsAny(_) | IdPredicate::InSubquery => {
                Sides::BOTH
            }
            IdPredicate::AtLeast { .. } => Sides::LOWER,
            IdPredicate::AtMost { .. } => Sides::UPPER,
            IdPredicate::And(arms) => Sides::combine(arms.iter().map(|a| a.sides()), true),
            IdPredicate::Or(arms) => Sides::combine(arms.iter().map(|a| a.sides()), false),
            IdPredicate::Other => Sides::NONE,
        }
    }
}

/// A scan's predicates (filter, index, bitmap and TID conditions) with what tells its id
/// column in them: a Var of the scanned relation, or of an index-only scan's index column
/// that its index target list maps to the column.
pub(super) struct ScanPredicates {
    pub quals: Vec<*mut pg_sys::Node>,
    scanrelid: i32,
    index_columns: Vec<i16>,
    attnum: i16,
}

impl ScanPredicates {
    /// The predicates of the scan `plan` and its column `attnum`.
    ///
    /// # Safety
    /// `plan` is the Plan node of a relation scan state.
    pub(super) unsafe fn of(plan: *mut pg_sys::Plan, attnum: i16) -> ScanPredicates {
        // SAFETY: as the caller promises.
        unsafe {
            let scanrelid = (*(plan as *mut pg_sys::Scan)).scanrelid as i32;
            let mut quals = crate::pg_list::list_pointers((*plan).qual);
            let mut index_columns: Vec<i16> = vec![];
            match (*plan).type_ {
                pg_sys::NodeTag::T_IndexScan => quals.extend(crate::pg_list::list_pointers(
                    (*(plan as *mut pg_sys::IndexScan)).indexqualorig,
                )),
                pg_sys::NodeTag::T_BitmapHeapScan => quals.extend(crate::pg_list::list_pointers(
                    (*(plan as *mut pg_sys::BitmapHeapScan)).bitmapqualorig,
                )),
                pg_sys::NodeTag::T_TidScan => quals.extend(crate::pg_list::list_pointers(
                    (*(plan as *mut pg_sys::TidScan)).tidquals,
                )),
                pg_sys::NodeTag::T_TidRangeScan => quals.extend(crate::pg_list::list_pointers(
                    (*(plan as *mut pg_sys::TidRangeScan)).tidrangequals,
                )),
                pg_sys::NodeTag::T_IndexOnlyScan => {
                    // Its index conditions and its filter name index columns (INDEX_VAR), which
                    // the index's target list maps to the table's.
                    let s = plan as *mut pg_sys::IndexOnlyScan;
                    quals.extend(crate::pg_list::list_pointers((*s).indexqual));
                    for te in crate::pg_list::list_pointers((*s).indextlist) {
                        let e = strip_relabel(
                            (*(te as *mut pg_sys::TargetEntry)).expr as *mut pg_sys::Node,
                        );
                        index_columns.push(
                            if !e.is_null() && (*e).type_ == pg_sys::NodeTag::T_Var {
                                (*(e as *mut pg_sys::Var)).varattno
                            } else {
                                0
                            },
                        );
                    }
                }
                _ => {}
            }
            ScanPredicates {
                quals: quals.into_iter().map(|q| q as *mut pg_sys::Node).collect(),
                scanrelid,
                index_columns,
                attnum,
            }
        }
    }

    /// Whether `n` (under binary-compatible casts) is the id column.
    ///
    /// # Safety
    /// `n` is NULL or an expression node of these predicates.
    pub(super) unsafe fn is_id(&self, n: *mut pg_sys::Node) -> bool {
        // SAFETY: as the caller promises.
        unsafe {
            let n = strip_relabel(n);
            if n.is_null() || (*n).type_ != pg_sys::NodeTag::T_Var {
                return false;
            }
            let v = n as *mut pg_sys::Var;
            if (*v).varlevelsup != 0 {
                return false;
            }
            if (*v).varno == pg_sys::INDEX_VAR {
                let i = (*v).varattno;
                i >= 1 && self.index_columns.get(i as usize - 1) == Some(&self.attnum)
            } else {
                (*v).varno == self.scanrelid && (*v).varattno == self.attnum
            }
        }
    }

    /// The scan's predicates read as one AND.
    ///
    /// # Safety
    /// The predicates are the valid plan nodes `of` found.
    pub(super) unsafe fn predicate(&self) -> IdPredicate {
        // SAFETY: as the caller promises.
        unsafe {
            let is_id = |n: *mut pg_sys::Node| self.is_id(n);
            IdPredicate::And(
                self.quals
                    .iter()
                    .map(|&q| IdPredicate::of(q, &is_id))
                    .collect(),
            )
        }
    }
}

/// A node under RelabelType (a binary-compatible cast).
pub(super) unsafe fn strip_relabel(mut n: *mut pg_sys::Node) -> *mut pg_sys::Node {
    // SAFETY: `n` is NULL or a valid expression node.
    unsafe {
        while !n.is_null() && (*n).type_ == pg_sys::NodeTag::T_RelabelType {
            n = (*(n as *mut pg_sys::RelabelType)).arg as *mut pg_sys::Node;
        }
        n
    }
}

/// The operator's name ("=", "<", ...).
pub(super) unsafe fn operator_name(opno: pg_sys::Oid) -> Vec<u8> {
    // SAFETY: a syscache lookup; NULL for an unknown operator.
    unsafe {
        let n = pg_sys::get_opname(opno);
        if n.is_null() {
            vec![]
        } else {
            CStr::from_ptr(n).to_bytes().to_vec()
        }
    }
}

/// The two arguments of a binary OpExpr.
pub(super) unsafe fn binary_args(
    e: *mut pg_sys::OpExpr,
) -> Option<(*mut pg_sys::Node, *mut pg_sys::Node)> {
    // SAFETY: an OpExpr's args is a List of expressions.
    unsafe {
        let args = crate::pg_list::list_pointers((*e).args);
        (args.len() == 2).then(|| {
            (
                strip_relabel(args[0] as *mut pg_sys::Node),
                strip_relabel(args[1] as *mut pg_sys::Node),
            )
        })
    }
}

/// Whether a scan's predicates (filter, index, bitmap and TID conditions) select rows by
/// column `attnum` of its relation: bound it on both sides (see the header); with `attnum`
/// 0 (unknown), whether it has any predicate at all.
///
/// # Safety
/// `plan` is the Plan node of a relation scan state.
pub(super) unsafe fn selects_by_column(plan: *mut pg_sys::Plan, attnum: i16) -> bool {
    // SAFETY: as the caller promises.
    unsafe {
        let p = ScanPredicates::of(plan, attnum);
        if attnum == 0 {
            return !p.quals.is_empty();
        }
        p.predicate().sides() == Sides::BOTH
    }
}
