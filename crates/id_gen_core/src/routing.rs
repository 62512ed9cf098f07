//! Routing of shard genes to physical shards (docs/design.md §2, "Routing").
//!
//! Every ID carries a 16-bit shard gene, so the gene space is a ring of 65536 virtual nodes.
//! A [`RouteTable`] maps *ranges* of genes to physical shard names. It is stored the way a DBA
//! writes it: one row per range, holding only the range's **upper bound** and the shard name.
//! The lower bound of a row is implicit — one more than the previous row's upper bound (0 for
//! the first row) — so a table can never contain overlapping ranges or holes between rows.
//! Looking a gene up takes the first row whose upper bound is ≥ the gene (a *ceiling* lookup,
//! Java `TreeMap.ceilingEntry`, exactly as in the seed design), by binary search: O(log n).
//!
//! Invariants of a [`RouteTable`] (checked once by [`RouteTable::from_rows`], relied on after):
//! - every upper bound is a gene, 0 ..= 65535, and appears at most once;
//! - rows are kept sorted by upper bound, so the ranges of [`RouteTable::ranges`] are
//!   contiguous, non-overlapping and together cover exactly `0 ..= highest_upper`;
//! - every shard name is non-empty and at most 63 bytes (PostgreSQL's identifier limit, so a
//!   shard name can also serve as a schema, server or database name).
//!
//! The only way a gene can lack a route is therefore to lie *above* the highest upper bound
//! (or the table to be empty). [`RouteTable::lookup`] reports that as [`RouteError::Gap`]
//! rather than guessing: a forgotten last row would otherwise silently send a slice of the
//! customers to the wrong shard. Configurations that *want* consistent-hash-ring semantics
//! (genes above the last bound wrap around to the first row) use [`RouteTable::lookup_ring`],
//! which the SQL layer exposes as a separate, explicitly named function.
//!
//! Resharding is planned, not performed, here: [`RouteTable::plan_split`] and
//! [`RouteTable::plan_merge`] return the new rows for the affected gene ranges, and
//! [`RouteTable::apply_plan`] is the executable definition of how such a plan is applied
//! (delete the old rows whose upper bound lies inside a planned range, insert the planned rows).
//!
//! Nothing here panics on user input; every failure is a [`RouteError`] with a DBA-readable
//! message, a hint ([`RouteError::hint`]) and a SQLSTATE ([`RouteError::sqlstate`]):
//!
//! | error                                                        | SQLSTATE | condition name                     |
//! |--------------------------------------------------------------|----------|------------------------------------|
//! | [`RouteError::Empty`], [`RouteError::Gap`]                   | `55000`  | object_not_in_prerequisite_state   |
//! | [`RouteError::UnknownShard`]                                 | `42704`  | undefined_object                   |
//! | every other variant (bad bounds, names, shard lists, plans)  | `22023`  | invalid_parameter_value            |

use std::collections::HashSet;
use std::fmt;

/// Largest shard gene and therefore the largest legal upper bound.
const MAX_GENE: u16 = u16::MAX;

/// Longest shard name in bytes: PostgreSQL's identifier limit (NAMEDATALEN - 1), so a shard
/// name is always usable as a schema, foreign-server or database name.
pub const MAX_SHARD_NAME_BYTES: usize = 63;

/// SQLSTATE 22023 `invalid_parameter_value`.
pub const SQLSTATE_INVALID_PARAMETER_VALUE: &str = "22023";
/// SQLSTATE 55000 `object_not_in_prerequisite_state`.
pub const SQLSTATE_NOT_IN_PREREQUISITE_STATE: &str = "55000";
/// SQLSTATE 42704 `undefined_object`.
pub const SQLSTATE_UNDEFINED_OBJECT: &str = "42704";

/// One proposed route row of a plan: `(lower, upper, shard)`, bounds inclusive.
pub type PlannedRange = (u16, u16, String);

/// Why a route table could not be built, consulted or re-planned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteError {
    /// The route table has no rows, so no gene can be routed.
    Empty,
    /// No row's upper bound is ≥ `gene`: the gene lies above the highest upper bound.
    Gap { gene: u16, highest_upper: u16 },
    /// An upper bound outside 0 ..= 65535 (the value as given).
    UpperOutOfRange(i64),
    /// A gene outside 0 ..= 65535 (the value as given), see [`gene_from_i64`].
    GeneOutOfRange(i64),
    /// Two rows share an upper bound; `first` and `second` are their shards in input order.
    DuplicateUpper {
        upper: u16,
        first: String,
        second: String,
    },
    /// A shard name is the empty string; `upper` is the row it was given for, if any.
    EmptyShardName { upper: Option<u16> },
    /// A shard name longer than [`MAX_SHARD_NAME_BYTES`] bytes.
    ShardNameTooLong {
        upper: Option<u16>,
        name: String,
        bytes: usize,
    },
    /// The named shard owns no range in the route table.
    UnknownShard(String),
    /// A split was asked for with an empty list of target shards.
    NoSplitTargets { shard: String },
    /// A merge was asked for with an empty list of shards to merge.
    NoMergeSources { into: String },
    /// A shard appears more than once in a list of shards.
    DuplicateShard(String),
    /// A range holds fewer genes than the number of parts it should be split into.
    RangeTooSmall {
        shard: String,
        lower: u16,
        upper: u16,
        parts: usize,
    },
    /// A plan row handed to [`RouteTable::apply_plan`] is malformed.
    InvalidPlanRow {
        lower: u16,
        upper: u16,
        reason: String,
    },
}

/// Shortens a user-supplied name for messages, so a 10 kB "name" does not flood the log.
fn show_name(name: &str) -> String {
    if name.len() <= MAX_SHARD_NAME_BYTES {
        return name.to_string();
    }
    let mut cut = MAX_SHARD_NAME_BYTES;
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &name[..cut])
}

impl fmt::Display for RouteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RouteError::Empty => write!(f, "the id_gen route table is empty, so no shard gene can be routed"),
            RouteError::Gap { gene, highest_upper } => write!(
                f,
                "no route for shard gene {gene}: the highest route upper bound is {highest_upper}, \
                 so genes {} .. 65535 have no shard",
                u32::from(*highest_upper) + 1
            ),
            RouteError::UpperOutOfRange(v) => write!(
                f,
                "route upper bound {v} is out of range (allowed: 0 .. 65535)"
            ),
            RouteError::GeneOutOfRange(v) => {
                write!(f, "shard gene {v} is out of range (allowed: 0 .. 65535)")
            }
            RouteError::DuplicateUpper { upper, first, second } => write!(
                f,
                "route upper bound {upper} is given twice (for shard '{}' and for shard '{}')",
                show_name(first),
                show_name(second)
            ),
            RouteError::EmptyShardName { upper: Some(u) } => {
                write!(f, "the route with upper bound {u} has an empty shard name")
            }
            RouteError::EmptyShardName { upper: None } => write!(f, "a shard name must not be empty"),
            RouteError::ShardNameTooLong { upper, name, bytes } => {
                write!(
                    f,
                    "shard name '{}' is {bytes} bytes long (at most {MAX_SHARD_NAME_BYTES} allowed)",
                    show_name(name)
                )?;
                if let Some(u) = upper {
                    write!(f, " in the route with upper bound {u}")?;
                }
                Ok(())
            }
            RouteError::UnknownShard(s) => {
                write!(f, "shard '{}' owns no range in the id_gen route table", show_name(s))
            }
            RouteError::NoSplitTargets { shard } => {
                write!(f, "cannot split shard '{}' into an empty list of shards", show_name(shard))
            }
            RouteError::NoMergeSources { into } => {
                write!(f, "no shards given to merge into shard '{}'", show_name(into))
            }
            RouteError::DuplicateShard(s) => {
                write!(f, "shard '{}' is listed more than once", show_name(s))
            }
            RouteError::RangeTooSmall { shard, lower, upper, parts } => write!(
                f,
                "the range {lower} .. {upper} of shard '{}' holds {} genes, too few to split into {parts} parts",
                show_name(shard),
                (u32::from(*upper) + 1).saturating_sub(u32::from(*lower))
            ),
            RouteError::InvalidPlanRow { lower, upper, reason } => {
                write!(f, "invalid plan row {lower} .. {upper}: {reason}")
            }
        }
    }
}

impl std::error::Error for RouteError {}

impl RouteError {
    /// A hint telling the DBA how to fix the problem (the `HINT:` line of the ERROR).
    pub fn hint(&self) -> String {
        match self {
            RouteError::Empty => {
                "SELECT id_gen.set_route(65535, 'shard_0') routes every gene to one shard".to_string()
            }
            RouteError::Gap { .. } => {
                "add a route whose upper bound is 65535: SELECT id_gen.set_route(65535, 'shard_x')"
                    .to_string()
            }
            RouteError::UpperOutOfRange(_) => {
                "a route's upper bound is a shard gene, an integer from 0 to 65535; \
                 the last route should have upper bound 65535"
                    .to_string()
            }
            RouteError::GeneOutOfRange(_) => {
                "a shard gene is an integer from 0 to 65535; id_gen.shard_of(id) extracts it from an id"
                    .to_string()
            }
            RouteError::DuplicateUpper { .. } => {
                "each upper bound may appear once: a gene range belongs to exactly one shard; \
                 drop one of the two routes or move its upper bound"
                    .to_string()
            }
            RouteError::EmptyShardName { .. } => {
                "give every route a shard name, e.g. 'shard_0'".to_string()
            }
            RouteError::ShardNameTooLong { .. } => format!(
                "shorten the shard name to at most {MAX_SHARD_NAME_BYTES} bytes (PostgreSQL's identifier limit)"
            ),
            RouteError::UnknownShard(_) => {
                "shard names are case-sensitive and must match a shard of the route table exactly; \
                 list the current routes to see which shards own genes"
                    .to_string()
            }
            RouteError::NoSplitTargets { .. } => {
                "pass at least one target shard, e.g. ARRAY['shard_1a', 'shard_1b']".to_string()
            }
            RouteError::NoMergeSources { .. } => {
                "pass at least one shard to merge, e.g. ARRAY['shard_1', 'shard_2']".to_string()
            }
            RouteError::DuplicateShard(_) => "list each shard only once".to_string(),
            RouteError::RangeTooSmall { .. } => {
                "split into fewer shards, or first merge this range with a neighbouring range".to_string()
            }
            RouteError::InvalidPlanRow { .. } => {
                "apply a plan exactly as returned by plan_split or plan_merge".to_string()
            }
        }
    }

    /// The SQLSTATE the SQL layer raises this error with.
    ///
    /// An empty table or a gap is a configuration that is not ready yet (`55000`), an unknown
    /// shard names something that does not exist (`42704`), everything else is a bad argument
    /// (`22023`).
    pub fn sqlstate(&self) -> &'static str {
        match self {
            RouteError::Empty | RouteError::Gap { .. } => SQLSTATE_NOT_IN_PREREQUISITE_STATE,
            RouteError::UnknownShard(_) => SQLSTATE_UNDEFINED_OBJECT,
            RouteError::UpperOutOfRange(_)
            | RouteError::GeneOutOfRange(_)
            | RouteError::DuplicateUpper { .. }
            | RouteError::EmptyShardName { .. }
            | RouteError::ShardNameTooLong { .. }
            | RouteError::NoSplitTargets { .. }
            | RouteError::NoMergeSources { .. }
            | RouteError::DuplicateShard(_)
            | RouteError::RangeTooSmall { .. }
            | RouteError::InvalidPlanRow { .. } => SQLSTATE_INVALID_PARAMETER_VALUE,
        }
    }
}

/// Converts a gene given as SQL `integer`/`bigint` into a `u16`, rejecting out-of-range values
/// instead of truncating them (a truncated gene would route to an unrelated shard).
pub fn gene_from_i64(value: i64) -> Result<u16, RouteError> {
    u16::try_from(value).map_err(|_| RouteError::GeneOutOfRange(value))
}

/// Checks one shard name: non-empty and at most [`MAX_SHARD_NAME_BYTES`] bytes.
/// `upper` is only used to make the error message point at the offending row.
pub fn validate_shard_name(name: &str, upper: Option<u16>) -> Result<(), RouteError> {
    if name.is_empty() {
        return Err(RouteError::EmptyShardName { upper });
    }
    if name.len() > MAX_SHARD_NAME_BYTES {
        return Err(RouteError::ShardNameTooLong {
            upper,
            name: name.to_string(),
            bytes: name.len(),
        });
    }
    Ok(())
}

/// Rejects a list of shard names that names one shard twice (a split into `['a', 'a']` or a
/// merge of `['a', 'a']` is almost certainly a typo, so it is not silently de-duplicated).
fn check_distinct(names: &[String]) -> Result<(), RouteError> {
    let mut seen = HashSet::with_capacity(names.len());
    for n in names {
        if !seen.insert(n.as_str()) {
            return Err(RouteError::DuplicateShard(n.clone()));
        }
    }
    Ok(())
}

/// An immutable, validated route table: gene ranges → shard names (see the module docs).
///
/// Rows are stored column-wise — sorted upper bounds plus an index into a sorted list of
/// distinct shard names — so lookups binary-search a dense `Vec<u16>` and counting per shard
/// needs no string hashing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RouteTable {
    /// Upper bounds, strictly increasing.
    uppers: Vec<u16>,
    /// `shard_of_row[i]` indexes `names` for the row with upper bound `uppers[i]`.
    shard_of_row: Vec<u32>,
    /// Distinct shard names, sorted.
    names: Vec<String>,
}

impl RouteTable {
    /// Builds a table from `(upper bound, shard name)` rows in any order.
    ///
    /// Upper bounds are taken as `i64` so that whatever integer the SQL layer reads is checked
    /// here, in one place. Errors (the first problem found, in input order): an upper bound
    /// outside 0 ..= 65535, an empty or over-long shard name, a duplicated upper bound.
    /// An empty input gives an empty table; it is valid, but every lookup reports
    /// [`RouteError::Empty`].
    pub fn from_rows(
        rows: impl IntoIterator<Item = (i64, String)>,
    ) -> Result<RouteTable, RouteError> {
        let mut checked: Vec<(u16, String)> = Vec::new();
        for (upper, shard) in rows {
            let upper = u16::try_from(upper).map_err(|_| RouteError::UpperOutOfRange(upper))?;
            validate_shard_name(&shard, Some(upper))?;
            checked.push((upper, shard));
        }
        // Stable sort: for duplicates, `first`/`second` in the error follow the input order.
        checked.sort_by_key(|(upper, _)| *upper);
        if let Some(w) = checked.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(RouteError::DuplicateUpper {
                upper: w[0].0,
                first: w[0].1.clone(),
                second: w[1].1.clone(),
            });
        }

        let mut names: Vec<String> = checked.iter().map(|(_, s)| s.clone()).collect();
        names.sort_unstable();
        names.dedup();
        let mut uppers = Vec::with_capacity(checked.len());
        let mut shard_of_row = Vec::with_capacity(checked.len());
        for (upper, shard) in &checked {
            // Present by construction; fall back to 0 rather than panic (unreachable).
            let idx = names.binary_search(shard).unwrap_or(0);
            uppers.push(*upper);
            // At most 65536 distinct uppers, hence at most 65536 names: fits u32.
            shard_of_row.push(idx as u32);
        }
        Ok(RouteTable {
            uppers,
            shard_of_row,
            names,
        })
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.uppers.len()
    }

    /// True when the table has no rows.
    pub fn is_empty(&self) -> bool {
        self.uppers.is_empty()
    }

    /// The highest upper bound, `None` for an empty table.
    pub fn highest_upper(&self) -> Option<u16> {
        self.uppers.last().copied()
    }

    /// The rows as `(upper bound, shard)`, ascending by upper bound.
    pub fn rows(&self) -> impl Iterator<Item = (u16, &str)> + '_ {
        self.uppers
            .iter()
            .zip(&self.shard_of_row)
            .map(|(u, s)| (*u, self.names[*s as usize].as_str()))
    }

    /// The distinct shard names that own at least one range, sorted.
    pub fn shards(&self) -> impl Iterator<Item = &str> + '_ {
        self.names.iter().map(String::as_str)
    }

    /// True when `shard` owns at least one range.
    pub fn contains_shard(&self, shard: &str) -> bool {
        self.name_index(shard).is_some()
    }

    fn name_index(&self, shard: &str) -> Option<u32> {
        self.names
            .binary_search_by(|n| n.as_str().cmp(shard))
            .ok()
            .map(|i| i as u32)
    }

    fn shard_name(&self, row: usize) -> &str {
        &self.names[self.shard_of_row[row] as usize]
    }

    /// The ranges as `(lower, upper, shard)`, bounds inclusive, ascending. They are contiguous
    /// and non-overlapping and cover exactly `0 ..= highest_upper` — one range per row, even
    /// where neighbouring rows name the same shard (rows are what the DBA configured).
    pub fn ranges(&self) -> impl Iterator<Item = (u16, u16, &str)> + '_ {
        (0..self.uppers.len()).map(move |i| {
            let lower = if i == 0 { 0 } else { self.uppers[i - 1] + 1 };
            (lower, self.uppers[i], self.shard_name(i))
        })
    }

    /// The genes no row covers, as inclusive `(lower, upper)` ranges; empty when 0 ..= 65535 is
    /// fully covered. With ceiling lookup the only possible hole is above the highest upper
    /// bound (or everything, for an empty table), so the result has at most one element; it is
    /// a `Vec` so the SQL layer can return it directly as a set.
    pub fn coverage_gaps(&self) -> Vec<(u16, u16)> {
        match self.highest_upper() {
            None => vec![(0, MAX_GENE)],
            Some(MAX_GENE) => Vec::new(),
            Some(h) => vec![(h + 1, MAX_GENE)],
        }
    }

    /// True when every gene 0 ..= 65535 has a route under [`RouteTable::lookup`].
    pub fn is_fully_covered(&self) -> bool {
        self.highest_upper() == Some(MAX_GENE)
    }

    /// `Ok` when every gene is routable; otherwise the error [`RouteTable::lookup`] would give
    /// for the lowest unroutable gene. Meant for a "check the route table" SQL function and for
    /// refusing to activate an incomplete table.
    pub fn check_complete(&self) -> Result<(), RouteError> {
        match self.highest_upper() {
            None => Err(RouteError::Empty),
            Some(MAX_GENE) => Ok(()),
            Some(h) => Err(RouteError::Gap {
                gene: h + 1,
                highest_upper: h,
            }),
        }
    }

    /// Row index of the first upper bound ≥ `gene` (the ceiling), or the error for a gap.
    fn ceiling_row(&self, gene: u16) -> Result<usize, RouteError> {
        let highest_upper = self.highest_upper().ok_or(RouteError::Empty)?;
        let i = self.uppers.partition_point(|&u| u < gene);
        if i == self.uppers.len() {
            Err(RouteError::Gap {
                gene,
                highest_upper,
            })
        } else {
            Ok(i)
        }
    }

    /// The shard of `gene`: the first row whose upper bound is ≥ `gene` (ceiling lookup).
    ///
    /// Strict on purpose: a gene above the highest upper bound is [`RouteError::Gap`], not
    /// silently wrapped, because a missing last row is a configuration error that would
    /// otherwise misroute a slice of the data. O(log rows).
    pub fn lookup(&self, gene: u16) -> Result<&str, RouteError> {
        self.ceiling_row(gene).map(|i| self.shard_name(i))
    }

    /// Ring lookup: like [`RouteTable::lookup`], but a gene above the highest upper bound wraps
    /// around to the first row, as on a consistent-hash ring (`ceilingEntry(g)` falling back to
    /// `firstEntry()`). Only an empty table is an error. For deployments that configure their
    /// routes as ring positions rather than as a full partition of 0 ..= 65535.
    pub fn lookup_ring(&self, gene: u16) -> Result<&str, RouteError> {
        match self.ceiling_row(gene) {
            Ok(i) => Ok(self.shard_name(i)),
            Err(RouteError::Gap { .. }) => Ok(self.shard_name(0)),
            Err(e) => Err(e),
        }
    }

    /// Counts how many of `genes` route to each shard (strict [`RouteTable::lookup`]), to spot
    /// hot shards. Every shard of the table is listed, with 0 if no gene hit it, sorted by
    /// shard name. Fails on an empty table or on the first gene that falls into a gap — a
    /// count that silently skipped unroutable genes would understate the problem.
    pub fn count_by_shard(
        &self,
        genes: impl Iterator<Item = u16>,
    ) -> Result<Vec<(String, u64)>, RouteError> {
        if self.is_empty() {
            return Err(RouteError::Empty);
        }
        let mut counts = vec![0u64; self.names.len()];
        for gene in genes {
            let row = self.ceiling_row(gene)?;
            let c = &mut counts[self.shard_of_row[row] as usize];
            *c = c.saturating_add(1);
        }
        Ok(self.names.iter().cloned().zip(counts).collect())
    }

    /// Plans splitting `shard` into the shards `into`.
    ///
    /// Every range currently owned by `shard` (one per row, see [`RouteTable::ranges`]) is cut
    /// into `into.len()` consecutive parts of nearly equal size — sizes differ by at most one
    /// gene, the first parts taking the remainder — and the k-th part goes to `into[k]`. Doing
    /// this per range (rather than handing whole ranges to different targets) gives each target
    /// an equal share of every range, so each target ends up with about the same number of genes.
    ///
    /// Returns the new `(lower, upper, shard)` rows for the affected ranges only, ascending.
    /// The last part of each range keeps the range's old upper bound, so applying the plan
    /// (see [`RouteTable::apply_plan`]) only adds rows and re-points existing ones.
    /// `into` may contain `shard` itself (it keeps the first part if listed first) or shards
    /// that already own other ranges.
    ///
    /// Errors: `into` empty, a name in `into` invalid or listed twice, `shard` unknown, or a
    /// range holding fewer genes than `into.len()`.
    pub fn plan_split(
        &self,
        shard: &str,
        into: &[String],
    ) -> Result<Vec<PlannedRange>, RouteError> {
        if into.is_empty() {
            return Err(RouteError::NoSplitTargets {
                shard: shard.to_string(),
            });
        }
        for name in into {
            validate_shard_name(name, None)?;
        }
        check_distinct(into)?;
        let idx = self
            .name_index(shard)
            .ok_or_else(|| RouteError::UnknownShard(shard.to_string()))?;

        let parts = into.len();
        let mut plan = Vec::new();
        for (row, (lower, upper, _)) in self.ranges().enumerate() {
            if self.shard_of_row[row] != idx {
                continue;
            }
            let genes = u32::from(upper) - u32::from(lower) + 1; // 1 ..= 65536
                                                                 // `parts` may be any usize; compare in u64 so nothing truncates.
            if (parts as u64) > u64::from(genes) {
                return Err(RouteError::RangeTooSmall {
                    shard: shard.to_string(),
                    lower,
                    upper,
                    parts,
                });
            }
            let parts32 = parts as u32; // ≤ genes ≤ 65536
            let base = genes / parts32;
            let extra = genes % parts32;
            let mut next = u32::from(lower);
            for (k, target) in into.iter().enumerate() {
                let size = base + u32::from((k as u32) < extra);
                let part_upper = next + size - 1; // size ≥ 1 since parts ≤ genes
                plan.push((next as u16, part_upper as u16, target.clone()));
                next = part_upper + 1;
            }
        }
        Ok(plan)
    }

    /// Plans merging the shards `shards` into the shard `into`.
    ///
    /// Every range of a shard in `shards` goes to `into`, and each maximal run of neighbouring
    /// ranges that then all belong to `into` collapses into one row — including ranges `into`
    /// already owned next to them, so the table does not fragment over repeated reshards.
    /// `into` may be a new shard, an existing one, or one of `shards` (merging `[x]` into `x`
    /// just collapses `x`'s neighbouring rows).
    ///
    /// Returns the new `(lower, upper, into)` rows for the affected runs, ascending; a run that
    /// would be a single unchanged row is left out, so an empty plan means "nothing to do".
    /// Apply it with the rule of [`RouteTable::apply_plan`].
    ///
    /// Errors: `shards` empty, a shard listed twice or unknown, `into` an invalid name.
    pub fn plan_merge(
        &self,
        shards: &[String],
        into: &str,
    ) -> Result<Vec<PlannedRange>, RouteError> {
        validate_shard_name(into, None)?;
        if shards.is_empty() {
            return Err(RouteError::NoMergeSources {
                into: into.to_string(),
            });
        }
        check_distinct(shards)?;
        let mut merged = vec![false; self.names.len()];
        for s in shards {
            let i = self
                .name_index(s)
                .ok_or_else(|| RouteError::UnknownShard(s.clone()))?;
            merged[i as usize] = true;
        }
        let into_idx = self.name_index(into);

        // A run is a maximal sequence of neighbouring ranges that will all belong to `into`.
        struct Run {
            lower: u16,
            upper: u16,
            rows: usize,
            touched: bool,      // contains a range of a merged shard
            already_into: bool, // every range is already owned by `into`
        }
        let mut plan = Vec::new();
        let mut run: Option<Run> = None;
        let flush = |run: Option<Run>, plan: &mut Vec<PlannedRange>| {
            if let Some(r) = run {
                if r.touched && !(r.rows == 1 && r.already_into) {
                    plan.push((r.lower, r.upper, into.to_string()));
                }
            }
        };
        for (row, (lower, upper, _)) in self.ranges().enumerate() {
            let s = self.shard_of_row[row];
            let is_merged = merged[s as usize];
            let is_into = into_idx == Some(s);
            if is_merged || is_into {
                let r = run.get_or_insert(Run {
                    lower,
                    upper,
                    rows: 0,
                    touched: false,
                    already_into: true,
                });
                r.upper = upper;
                r.rows += 1;
                r.touched |= is_merged;
                r.already_into &= is_into;
            } else {
                flush(run.take(), &mut plan);
            }
        }
        flush(run.take(), &mut plan);
        Ok(plan)
    }

    /// Applies a plan from [`RouteTable::plan_split`] or [`RouteTable::plan_merge`], returning
    /// the new table (this one is unchanged). The rule, which the SQL layer mirrors in one
    /// transaction: delete every row whose upper bound lies inside a planned `lower ..= upper`,
    /// then insert each planned `(upper, shard)`.
    ///
    /// Because a row stores only its upper bound, a planned `lower` cannot be stored; it is
    /// checked instead: the plan is rejected if its rows are empty (`lower > upper`), overlap,
    /// or if in the new table a planned range would not start at its planned `lower` (that plan
    /// would silently re-route genes below it). Shard names are validated as in
    /// [`RouteTable::from_rows`].
    pub fn apply_plan(&self, plan: &[PlannedRange]) -> Result<RouteTable, RouteError> {
        let mut spans: Vec<(u16, u16)> = Vec::with_capacity(plan.len());
        for (lower, upper, _) in plan {
            if lower > upper {
                return Err(RouteError::InvalidPlanRow {
                    lower: *lower,
                    upper: *upper,
                    reason: "its lower bound is above its upper bound".to_string(),
                });
            }
            spans.push((*lower, *upper));
        }
        spans.sort_unstable();
        if let Some(w) = spans.windows(2).find(|w| w[1].0 <= w[0].1) {
            return Err(RouteError::InvalidPlanRow {
                lower: w[1].0,
                upper: w[1].1,
                reason: format!("it overlaps the plan row {} .. {}", w[0].0, w[0].1),
            });
        }
        let inside_plan = |u: u16| {
            // Last span starting at or below u; u is inside it iff u ≤ its upper.
            let i = spans.partition_point(|&(lo, _)| lo <= u);
            i > 0 && u <= spans[i - 1].1
        };
        let kept = self
            .rows()
            .filter(|(u, _)| !inside_plan(*u))
            .map(|(u, s)| (i64::from(u), s.to_string()));
        let added = plan.iter().map(|(_, u, s)| (i64::from(*u), s.clone()));
        let table = RouteTable::from_rows(kept.chain(added))?;

        for (lower, upper, _) in plan {
            let row = table.uppers.partition_point(|&u| u < *upper); // exact match, present
            let actual_lower = if row == 0 {
                0
            } else {
                table.uppers[row - 1] + 1
            };
            if actual_lower != *lower {
                return Err(RouteError::InvalidPlanRow {
                    lower: *lower,
                    upper: *upper,
                    reason: format!(
                        "in the resulting table this range would start at gene {actual_lower}, \
                         because the route table stores only upper bounds"
                    ),
                });
            }
        }
        Ok(table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: &str) -> String {
        x.to_string()
    }

    fn names(xs: &[&str]) -> Vec<String> {
        xs.iter().map(|x| x.to_string()).collect()
    }

    fn table(rows: &[(i64, &str)]) -> RouteTable {
        RouteTable::from_rows(rows.iter().map(|(u, n)| (*u, n.to_string()))).expect("valid table")
    }

    /// Tiny xorshift64 so the tests are deterministic and need no dependency.
    struct XorShift(u64);
    impl XorShift {
        fn next(&mut self) -> u64 {
            let mut x = self.0;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.0 = x;
            x
        }
        fn gene(&mut self) -> u16 {
            (self.next() >> 32) as u16
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// Naive oracle: linear scan of rows already sorted by upper bound, first upper ≥ gene.
    fn oracle(sorted_rows: &[(u16, String)], gene: u16) -> Option<&str> {
        sorted_rows
            .iter()
            .find(|r| r.0 >= gene)
            .map(|r| r.1.as_str())
    }

    /// A random table with `n` distinct uppers; `full` forces 65535 to be present.
    fn random_rows(
        rng: &mut XorShift,
        n: usize,
        shard_count: u64,
        full: bool,
    ) -> Vec<(u16, String)> {
        let mut uppers = HashSet::new();
        if full {
            uppers.insert(MAX_GENE);
        }
        while uppers.len() < n {
            uppers.insert(rng.gene());
        }
        let mut rows: Vec<(u16, String)> = uppers
            .into_iter()
            .map(|u| (u, format!("shard_{}", rng.below(shard_count))))
            .collect();
        rows.sort_by_key(|r| r.0);
        rows
    }

    fn to_table(rows: &[(u16, String)]) -> RouteTable {
        RouteTable::from_rows(rows.iter().map(|(u, n)| (i64::from(*u), n.clone()))).expect("valid")
    }

    /// Checks ranges() invariants: contiguous from 0, ascending, ending at highest upper.
    fn assert_contiguous(t: &RouteTable) {
        let mut expect_lower = 0u32;
        for (lo, hi, _) in t.ranges() {
            assert_eq!(u32::from(lo), expect_lower);
            assert!(lo <= hi);
            expect_lower = u32::from(hi) + 1;
        }
        match t.highest_upper() {
            None => assert_eq!(expect_lower, 0),
            Some(h) => assert_eq!(expect_lower, u32::from(h) + 1),
        }
    }

    // ---------------------------------------------------------------- lookup

    #[test]
    fn single_shard_covers_everything() {
        let t = table(&[(65535, "only")]);
        for g in [0u16, 1, 32767, 65534, 65535] {
            assert_eq!(t.lookup(g), Ok("only"));
            assert_eq!(t.lookup_ring(g), Ok("only"));
        }
        assert!(t.is_fully_covered());
        assert!(t.coverage_gaps().is_empty());
        assert_eq!(t.check_complete(), Ok(()));
        assert_eq!(t.ranges().collect::<Vec<_>>(), vec![(0, 65535, "only")]);
    }

    #[test]
    fn gene_zero_and_max() {
        let t = table(&[(0, "zero"), (65534, "mid"), (65535, "top")]);
        assert_eq!(t.lookup(0), Ok("zero"));
        assert_eq!(t.lookup(1), Ok("mid"));
        assert_eq!(t.lookup(65534), Ok("mid"));
        assert_eq!(t.lookup(65535), Ok("top"));
        assert_eq!(
            t.ranges().collect::<Vec<_>>(),
            vec![(0, 0, "zero"), (1, 65534, "mid"), (65535, 65535, "top")]
        );
    }

    #[test]
    fn exact_boundaries_upper_and_upper_plus_one() {
        let t = table(&[(16383, "a"), (32767, "b"), (49151, "c"), (65535, "d")]);
        let cases = [
            (16382, "a"),
            (16383, "a"),
            (16384, "b"),
            (32767, "b"),
            (32768, "c"),
            (49151, "c"),
            (49152, "d"),
            (65535, "d"),
        ];
        for (g, want) in cases {
            assert_eq!(t.lookup(g), Ok(want), "gene {g}");
        }
    }

    #[test]
    fn rows_given_unsorted_are_sorted() {
        let t = table(&[(65535, "d"), (100, "a"), (30000, "c"), (200, "b")]);
        assert_eq!(
            t.rows().collect::<Vec<_>>(),
            vec![(100, "a"), (200, "b"), (30000, "c"), (65535, "d")]
        );
        assert_eq!(t.lookup(150), Ok("b"));
        assert_eq!(t.lookup(201), Ok("c"));
        assert_eq!(t.shards().collect::<Vec<_>>(), vec!["a", "b", "c", "d"]);
        assert!(t.contains_shard("c"));
        assert!(!t.contains_shard("C"));
        assert_eq!(t.len(), 4);
    }

    #[test]
    fn gap_above_highest_upper_is_an_error() {
        let t = table(&[(999, "a"), (49999, "b")]);
        assert_eq!(t.lookup(49999), Ok("b"));
        assert_eq!(
            t.lookup(50000),
            Err(RouteError::Gap {
                gene: 50000,
                highest_upper: 49999
            })
        );
        assert_eq!(
            t.lookup(65535),
            Err(RouteError::Gap {
                gene: 65535,
                highest_upper: 49999
            })
        );
        assert!(!t.is_fully_covered());
        assert_eq!(t.coverage_gaps(), vec![(50000, 65535)]);
        assert_eq!(
            t.check_complete(),
            Err(RouteError::Gap {
                gene: 50000,
                highest_upper: 49999
            })
        );
        let e = t.lookup(60000).unwrap_err();
        assert_eq!(e.sqlstate(), "55000");
        assert!(e.to_string().contains("60000"), "{e}");
        assert!(e.to_string().contains("50000 .. 65535"), "{e}");
        assert!(e.hint().contains("65535"));
    }

    #[test]
    fn gap_with_upper_zero_only() {
        let t = table(&[(0, "a")]);
        assert_eq!(t.lookup(0), Ok("a"));
        assert_eq!(
            t.lookup(1),
            Err(RouteError::Gap {
                gene: 1,
                highest_upper: 0
            })
        );
        assert_eq!(t.coverage_gaps(), vec![(1, 65535)]);
    }

    #[test]
    fn empty_table() {
        let t = RouteTable::from_rows(Vec::new()).unwrap();
        assert!(t.is_empty());
        assert_eq!(t.highest_upper(), None);
        assert_eq!(t.lookup(0), Err(RouteError::Empty));
        assert_eq!(t.lookup_ring(65535), Err(RouteError::Empty));
        assert_eq!(t.coverage_gaps(), vec![(0, 65535)]);
        assert_eq!(t.check_complete(), Err(RouteError::Empty));
        assert_eq!(t.count_by_shard([1u16].into_iter()), Err(RouteError::Empty));
        assert_eq!(t.count_by_shard(std::iter::empty()), Err(RouteError::Empty));
        assert_eq!(t.ranges().count(), 0);
        assert_eq!(RouteError::Empty.sqlstate(), "55000");
        assert!(RouteError::Empty.hint().contains("set_route(65535"));
    }

    #[test]
    fn ring_lookup_wraps_to_first_range() {
        let t = table(&[(1000, "first"), (30000, "second")]);
        assert_eq!(t.lookup_ring(0), Ok("first"));
        assert_eq!(t.lookup_ring(1000), Ok("first"));
        assert_eq!(t.lookup_ring(1001), Ok("second"));
        assert_eq!(t.lookup_ring(30000), Ok("second"));
        // Above the last bound: strict lookup fails, ring lookup wraps around.
        assert!(t.lookup(30001).is_err());
        assert_eq!(t.lookup_ring(30001), Ok("first"));
        assert_eq!(t.lookup_ring(65535), Ok("first"));
        // On a fully covered table both agree everywhere.
        let full = table(&[(1000, "first"), (65535, "second")]);
        for g in (0..=65535u32).step_by(97) {
            assert_eq!(full.lookup(g as u16), full.lookup_ring(g as u16));
        }
    }

    #[test]
    fn random_genes_match_linear_scan_oracle() {
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        for (n, full) in [
            (1usize, true),
            (1, false),
            (2, false),
            (7, true),
            (64, false),
            (300, true),
            (300, false),
        ] {
            let rows = random_rows(&mut rng, n, 5, full);
            let t = to_table(&rows);
            assert_contiguous(&t);
            let highest = rows[rows.len() - 1].0;
            for _ in 0..100_000 {
                let g = rng.gene();
                match oracle(&rows, g) {
                    Some(want) => {
                        assert_eq!(t.lookup(g), Ok(want));
                        assert_eq!(t.lookup_ring(g), Ok(want));
                    }
                    None => {
                        assert_eq!(
                            t.lookup(g),
                            Err(RouteError::Gap {
                                gene: g,
                                highest_upper: highest
                            })
                        );
                        assert_eq!(t.lookup_ring(g), Ok(rows[0].1.as_str()));
                    }
                }
            }
        }
    }

    #[test]
    fn every_gene_on_a_dense_table() {
        // All 65536 uppers present: each gene is its own range.
        let rows: Vec<(i64, String)> = (0..=65535i64).map(|u| (u, format!("s{}", u % 3))).collect();
        let t = RouteTable::from_rows(rows).unwrap();
        assert_eq!(t.len(), 65536);
        for g in 0..=65535u16 {
            assert_eq!(t.lookup(g), Ok(format!("s{}", g % 3).as_str()));
        }
        assert_contiguous(&t);
        assert!(t.is_fully_covered());
    }

    // ---------------------------------------------------------------- from_rows validation

    #[test]
    fn upper_out_of_range_names_the_value() {
        for v in [-1i64, 65536, i64::MIN, i64::MAX, 100_000] {
            let e = RouteTable::from_rows(vec![(v, s("a"))]).unwrap_err();
            assert_eq!(e, RouteError::UpperOutOfRange(v));
            assert!(e.to_string().contains(&v.to_string()), "{e}");
            assert_eq!(e.sqlstate(), "22023");
        }
        assert!(RouteTable::from_rows(vec![(0, s("a")), (65535, s("b"))]).is_ok());
    }

    #[test]
    fn duplicate_upper_is_rejected() {
        let e =
            RouteTable::from_rows(vec![(10, s("a")), (65535, s("z")), (10, s("b"))]).unwrap_err();
        assert_eq!(
            e,
            RouteError::DuplicateUpper {
                upper: 10,
                first: s("a"),
                second: s("b")
            }
        );
        assert!(e.to_string().contains("10"));
        assert!(e.to_string().contains("'a'") && e.to_string().contains("'b'"));
        // Same shard twice is still a duplicate row.
        assert!(matches!(
            RouteTable::from_rows(vec![(5, s("a")), (5, s("a"))]),
            Err(RouteError::DuplicateUpper { upper: 5, .. })
        ));
    }

    #[test]
    fn shard_name_rules() {
        let e = RouteTable::from_rows(vec![(7, String::new())]).unwrap_err();
        assert_eq!(e, RouteError::EmptyShardName { upper: Some(7) });
        assert!(e.to_string().contains('7'));

        let ok63 = "x".repeat(63);
        assert!(RouteTable::from_rows(vec![(1, ok63)]).is_ok());
        let long = "x".repeat(64);
        let e = RouteTable::from_rows(vec![(1, long.clone())]).unwrap_err();
        assert_eq!(
            e,
            RouteError::ShardNameTooLong {
                upper: Some(1),
                name: long,
                bytes: 64
            }
        );
        assert_eq!(e.sqlstate(), "22023");

        // The limit counts bytes, not characters: 32 two-byte chars = 64 bytes.
        let utf8 = "é".repeat(32);
        assert!(matches!(
            RouteTable::from_rows(vec![(1, utf8)]),
            Err(RouteError::ShardNameTooLong { bytes: 64, .. })
        ));
        assert!(RouteTable::from_rows(vec![(1, "é".repeat(31))]).is_ok());

        // A huge name does not flood the message.
        let huge = "ü".repeat(10_000);
        let e = validate_shard_name(&huge, None).unwrap_err();
        assert!(e.to_string().len() < 300, "{}", e.to_string().len());
    }

    #[test]
    fn gene_from_i64_checks_range() {
        assert_eq!(gene_from_i64(0), Ok(0));
        assert_eq!(gene_from_i64(65535), Ok(65535));
        assert_eq!(gene_from_i64(65536), Err(RouteError::GeneOutOfRange(65536)));
        assert_eq!(gene_from_i64(-1), Err(RouteError::GeneOutOfRange(-1)));
    }

    // ---------------------------------------------------------------- count_by_shard

    #[test]
    fn count_by_shard_matches_oracle_and_lists_cold_shards() {
        let t = table(&[(99, "a"), (199, "b"), (299, "a"), (65535, "cold")]);
        let genes = [0u16, 50, 99, 100, 199, 200, 250, 299];
        let counts = t.count_by_shard(genes.iter().copied()).unwrap();
        assert_eq!(counts, vec![(s("a"), 6), (s("b"), 2), (s("cold"), 0)]);

        let mut rng = XorShift(42);
        let rows = random_rows(&mut rng, 40, 6, true);
        let t = to_table(&rows);
        let genes: Vec<u16> = (0..100_000).map(|_| rng.gene()).collect();
        let got = t.count_by_shard(genes.iter().copied()).unwrap();
        let mut want: std::collections::BTreeMap<String, u64> =
            t.shards().map(|n| (n.to_string(), 0)).collect();
        for g in &genes {
            *want.get_mut(oracle(&rows, *g).unwrap()).unwrap() += 1;
        }
        assert_eq!(got, want.into_iter().collect::<Vec<_>>());
        assert_eq!(got.iter().map(|c| c.1).sum::<u64>(), 100_000);
    }

    #[test]
    fn count_by_shard_fails_on_gap() {
        let t = table(&[(100, "a")]);
        assert_eq!(
            t.count_by_shard([5u16, 6].into_iter()).unwrap(),
            vec![(s("a"), 2)]
        );
        assert_eq!(
            t.count_by_shard([5u16, 101, 6].into_iter()),
            Err(RouteError::Gap {
                gene: 101,
                highest_upper: 100
            })
        );
    }

    // ---------------------------------------------------------------- plan_split

    /// Checks a split plan: per original range of `shard`, the parts are contiguous, cover
    /// exactly that range, go to `into` in order, and differ in size by at most one (larger
    /// first); then applying it routes every gene either as before or to the planned target.
    fn check_split(t: &RouteTable, shard: &str, into: &[String]) {
        let plan = t.plan_split(shard, into).unwrap();
        let owned: Vec<(u16, u16)> = t
            .ranges()
            .filter(|r| r.2 == shard)
            .map(|r| (r.0, r.1))
            .collect();
        assert_eq!(plan.len(), owned.len() * into.len());
        for (chunk, (lo, hi)) in plan.chunks(into.len()).zip(&owned) {
            assert_eq!(chunk[0].0, *lo);
            assert_eq!(chunk[chunk.len() - 1].1, *hi);
            for w in chunk.windows(2) {
                assert_eq!(
                    u32::from(w[0].1) + 1,
                    u32::from(w[1].0),
                    "contiguous, non-overlapping"
                );
            }
            let sizes: Vec<u32> = chunk
                .iter()
                .map(|p| u32::from(p.1) - u32::from(p.0) + 1)
                .collect();
            assert_eq!(
                sizes.iter().sum::<u32>(),
                u32::from(*hi) - u32::from(*lo) + 1,
                "union = range"
            );
            let (min, max) = (*sizes.iter().min().unwrap(), *sizes.iter().max().unwrap());
            assert!(max - min <= 1, "sizes {sizes:?}");
            assert!(
                sizes.windows(2).all(|w| w[0] >= w[1]),
                "remainder goes first: {sizes:?}"
            );
            for (p, target) in chunk.iter().zip(into) {
                assert_eq!(&p.2, target);
            }
        }
        let after = t.apply_plan(&plan).unwrap();
        assert_contiguous(&after);
        assert_eq!(after.highest_upper(), t.highest_upper());
        for g in 0..=65535u16 {
            let planned = plan.iter().find(|p| p.0 <= g && g <= p.1);
            match planned {
                Some(p) => assert_eq!(after.lookup(g), Ok(p.2.as_str()), "gene {g}"),
                None => assert_eq!(after.lookup(g), t.lookup(g), "gene {g} must not move"),
            }
        }
    }

    #[test]
    fn split_even_and_uneven() {
        let t = table(&[(65535, "a")]);
        let plan = t.plan_split("a", &names(&["a", "b"])).unwrap();
        assert_eq!(plan, vec![(0, 32767, s("a")), (32768, 65535, s("b"))]);
        // 65536 = 3 * 21845 + 1: the first part takes the remainder.
        let plan = t.plan_split("a", &names(&["x", "y", "z"])).unwrap();
        assert_eq!(
            plan,
            vec![
                (0, 21845, s("x")),
                (21846, 43690, s("y")),
                (43691, 65535, s("z"))
            ]
        );
        // 10 genes into 4: 3,3,2,2.
        let t = table(&[(9, "a"), (65535, "b")]);
        let plan = t.plan_split("a", &names(&["p", "q", "r", "s"])).unwrap();
        assert_eq!(
            plan,
            vec![
                (0, 2, s("p")),
                (3, 5, s("q")),
                (6, 7, s("r")),
                (8, 9, s("s"))
            ]
        );
        check_split(&t, "a", &names(&["p", "q", "r", "s"]));
        check_split(&t, "b", &names(&["b", "b2", "b3"]));
    }

    #[test]
    fn split_every_range_of_the_shard() {
        let t = table(&[(99, "a"), (199, "b"), (299, "a"), (65535, "c")]);
        let plan = t.plan_split("a", &names(&["a1", "a2"])).unwrap();
        assert_eq!(
            plan,
            vec![
                (0, 49, s("a1")),
                (50, 99, s("a2")),
                (200, 249, s("a1")),
                (250, 299, s("a2"))
            ]
        );
        check_split(&t, "a", &names(&["a1", "a2"]));
        check_split(&t, "a", &names(&["a"]));
        // A one-gene row of the shard is too small for two parts, so the whole plan fails.
        let t = table(&[(99, "a"), (199, "b"), (299, "a"), (300, "a"), (65535, "c")]);
        assert_eq!(
            t.plan_split("a", &names(&["a1", "a2"])),
            Err(RouteError::RangeTooSmall {
                shard: s("a"),
                lower: 300,
                upper: 300,
                parts: 2
            })
        );
    }

    #[test]
    fn split_errors() {
        let t = table(&[(1, "tiny"), (65535, "big")]);
        assert_eq!(
            t.plan_split("tiny", &names(&["x", "y", "z"])),
            Err(RouteError::RangeTooSmall {
                shard: s("tiny"),
                lower: 0,
                upper: 1,
                parts: 3
            })
        );
        assert!(t.plan_split("tiny", &names(&["x", "y"])).is_ok());
        assert_eq!(
            t.plan_split("nope", &names(&["x"])),
            Err(RouteError::UnknownShard(s("nope")))
        );
        assert_eq!(RouteError::UnknownShard(s("nope")).sqlstate(), "42704");
        assert_eq!(
            t.plan_split("big", &[]),
            Err(RouteError::NoSplitTargets { shard: s("big") })
        );
        assert_eq!(
            t.plan_split("big", &names(&["x", "y", "x"])),
            Err(RouteError::DuplicateShard(s("x")))
        );
        assert_eq!(
            t.plan_split("big", &names(&["x", ""])),
            Err(RouteError::EmptyShardName { upper: None })
        );
        assert!(matches!(
            t.plan_split("big", &[s("x"), "y".repeat(64)]),
            Err(RouteError::ShardNameTooLong { bytes: 64, .. })
        ));
        // More parts than there are genes at all: an error, not an overflow.
        let many: Vec<String> = (0..70_000).map(|i| format!("s{i}")).collect();
        assert!(matches!(
            t.plan_split("big", &many),
            Err(RouteError::RangeTooSmall { parts: 70_000, .. })
        ));
        let e = t.plan_split("tiny", &names(&["x", "y", "z"])).unwrap_err();
        assert!(e.to_string().contains("2 genes"), "{e}");
        // An empty table knows no shard.
        let empty = RouteTable::default();
        assert_eq!(
            empty.plan_split("a", &names(&["b"])),
            Err(RouteError::UnknownShard(s("a")))
        );
    }

    #[test]
    fn split_into_exactly_as_many_parts_as_genes() {
        let t = table(&[(4, "a"), (65535, "b")]);
        let into = names(&["p", "q", "r", "s", "t"]);
        let plan = t.plan_split("a", &into).unwrap();
        assert_eq!(
            plan.iter().map(|p| (p.0, p.1)).collect::<Vec<_>>(),
            vec![(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)]
        );
        check_split(&t, "a", &into);
    }

    #[test]
    fn split_random_tables() {
        let mut rng = XorShift(7);
        for round in 0..40 {
            let n = 1 + rng.below(30) as usize;
            let rows = random_rows(&mut rng, n, 4, round % 2 == 0);
            let t = to_table(&rows);
            let shard = t
                .shards()
                .nth(rng.below(t.shards().count() as u64) as usize)
                .unwrap()
                .to_string();
            let smallest = t
                .ranges()
                .filter(|r| r.2 == shard)
                .map(|r| u32::from(r.1) - u32::from(r.0) + 1)
                .min()
                .unwrap();
            let k = 1 + rng.below(u64::from(smallest.min(9))) as usize;
            let into: Vec<String> = (0..k).map(|i| format!("new_{round}_{i}")).collect();
            check_split(&t, &shard, &into);
        }
    }

    // ---------------------------------------------------------------- plan_merge

    #[test]
    fn merge_collapses_adjacent_ranges() {
        let t = table(&[(99, "a"), (199, "b"), (299, "c"), (399, "d"), (65535, "b")]);
        let plan = t.plan_merge(&names(&["b", "c"]), "bc").unwrap();
        assert_eq!(plan, vec![(100, 299, s("bc")), (400, 65535, s("bc"))]);
        let after = t.apply_plan(&plan).unwrap();
        assert_eq!(
            after.rows().collect::<Vec<_>>(),
            vec![(99, "a"), (299, "bc"), (399, "d"), (65535, "bc")]
        );

        // Merging into an existing neighbour absorbs the neighbour's rows too.
        let plan = t.plan_merge(&names(&["b"]), "a").unwrap();
        assert_eq!(plan, vec![(0, 199, s("a")), (400, 65535, s("a"))]);
        let after = t.apply_plan(&plan).unwrap();
        assert_eq!(
            after.rows().collect::<Vec<_>>(),
            vec![(199, "a"), (299, "c"), (399, "d"), (65535, "a")]
        );

        // Everything into one shard: a single row.
        let plan = t.plan_merge(&names(&["a", "b", "c", "d"]), "all").unwrap();
        assert_eq!(plan, vec![(0, 65535, s("all"))]);
        assert_eq!(t.apply_plan(&plan).unwrap(), table(&[(65535, "all")]));
    }

    #[test]
    fn merge_into_itself_defragments_and_noop_is_empty() {
        let t = table(&[(9, "a"), (19, "a"), (29, "b"), (39, "a")]);
        assert_eq!(
            t.plan_merge(&names(&["a"]), "a").unwrap(),
            vec![(0, 19, s("a"))]
        );
        let t2 = table(&[(9, "a"), (19, "b")]);
        assert_eq!(
            t2.plan_merge(&names(&["a"]), "a").unwrap(),
            Vec::<PlannedRange>::new()
        );
        assert_eq!(t2.apply_plan(&[]).unwrap(), t2);
    }

    #[test]
    fn merge_then_split_round_trip_and_gap_untouched() {
        // A gapped table: the gap stays a gap.
        let t = table(&[(999, "a"), (1999, "b"), (2999, "a")]);
        let plan = t.plan_merge(&names(&["a", "b"]), "ab").unwrap();
        assert_eq!(plan, vec![(0, 2999, s("ab"))]);
        let merged = t.apply_plan(&plan).unwrap();
        assert_eq!(merged.coverage_gaps(), vec![(3000, 65535)]);
        let split = merged
            .apply_plan(&merged.plan_split("ab", &names(&["x", "y", "z"])).unwrap())
            .unwrap();
        assert_eq!(
            split.rows().collect::<Vec<_>>(),
            vec![(999, "x"), (1999, "y"), (2999, "z")]
        );
    }

    #[test]
    fn merge_random_tables() {
        let mut rng = XorShift(99);
        for _ in 0..40 {
            let n = 1 + rng.below(40) as usize;
            let rows = random_rows(&mut rng, n, 5, true);
            let t = to_table(&rows);
            let all: Vec<String> = t.shards().map(str::to_string).collect();
            let merged: Vec<String> = all.iter().filter(|_| rng.below(2) == 0).cloned().collect();
            if merged.is_empty() {
                continue;
            }
            let into = if rng.below(2) == 0 {
                all[rng.below(all.len() as u64) as usize].clone()
            } else {
                s("fresh")
            };
            let plan = t.plan_merge(&merged, &into).unwrap();
            let after = t.apply_plan(&plan).unwrap();
            assert_contiguous(&after);
            for g in (0..=65535u32).step_by(13).map(|g| g as u16) {
                let before = t.lookup(g).unwrap();
                let want = if merged.iter().any(|m| m == before) {
                    into.as_str()
                } else {
                    before
                };
                assert_eq!(after.lookup(g), Ok(want));
            }
            // No two neighbouring rows of `into` remain when they touched a merged range.
            let r: Vec<_> = after.ranges().collect();
            for w in r.windows(2) {
                assert!(
                    !(w[0].2 == into
                        && w[1].2 == into
                        && plan.iter().any(|p| p.0 <= w[0].1 && w[0].1 <= p.1))
                );
            }
            // Every planned row is owned by `into`, rows ascending and disjoint.
            assert!(plan.iter().all(|p| p.2 == into));
            assert!(plan.windows(2).all(|w| w[0].1 < w[1].0));
        }
    }

    #[test]
    fn merge_errors() {
        let t = table(&[(99, "a"), (65535, "b")]);
        assert_eq!(
            t.plan_merge(&[], "a"),
            Err(RouteError::NoMergeSources { into: s("a") })
        );
        assert_eq!(
            t.plan_merge(&names(&["a", "zz"]), "a"),
            Err(RouteError::UnknownShard(s("zz")))
        );
        assert_eq!(
            t.plan_merge(&names(&["a", "a"]), "b"),
            Err(RouteError::DuplicateShard(s("a")))
        );
        assert_eq!(
            t.plan_merge(&names(&["a"]), ""),
            Err(RouteError::EmptyShardName { upper: None })
        );
        assert!(matches!(
            t.plan_merge(&names(&["a"]), &"n".repeat(64)),
            Err(RouteError::ShardNameTooLong { .. })
        ));
    }

    // ---------------------------------------------------------------- apply_plan

    #[test]
    fn apply_plan_rejects_malformed_plans() {
        let t = table(&[(99, "a"), (65535, "b")]);
        assert!(matches!(
            t.apply_plan(&[(10, 5, s("x"))]),
            Err(RouteError::InvalidPlanRow {
                lower: 10,
                upper: 5,
                ..
            })
        ));
        assert!(matches!(
            t.apply_plan(&[(0, 50, s("x")), (50, 99, s("y"))]),
            Err(RouteError::InvalidPlanRow {
                lower: 50,
                upper: 99,
                ..
            })
        ));
        // A lower bound that the stored table cannot honour (genes 0..49 would move too).
        let e = t.apply_plan(&[(50, 99, s("x"))]).unwrap_err();
        assert!(matches!(
            e,
            RouteError::InvalidPlanRow {
                lower: 50,
                upper: 99,
                ..
            }
        ));
        assert!(e.to_string().contains("start at gene 0"), "{e}");
        assert!(matches!(
            t.apply_plan(&[(0, 99, String::new())]),
            Err(RouteError::EmptyShardName { upper: Some(99) })
        ));
        // A well-formed plan that re-points a whole range.
        assert_eq!(
            t.apply_plan(&[(0, 99, s("x"))]).unwrap(),
            table(&[(99, "x"), (65535, "b")])
        );
    }

    // ---------------------------------------------------------------- errors

    #[test]
    fn every_error_has_message_hint_and_sqlstate() {
        let all = vec![
            RouteError::Empty,
            RouteError::Gap {
                gene: 7,
                highest_upper: 6,
            },
            RouteError::UpperOutOfRange(-3),
            RouteError::GeneOutOfRange(70000),
            RouteError::DuplicateUpper {
                upper: 1,
                first: s("a"),
                second: s("b"),
            },
            RouteError::EmptyShardName { upper: Some(3) },
            RouteError::EmptyShardName { upper: None },
            RouteError::ShardNameTooLong {
                upper: None,
                name: "q".repeat(70),
                bytes: 70,
            },
            RouteError::UnknownShard(s("x")),
            RouteError::NoSplitTargets { shard: s("x") },
            RouteError::NoMergeSources { into: s("x") },
            RouteError::DuplicateShard(s("x")),
            RouteError::RangeTooSmall {
                shard: s("x"),
                lower: 0,
                upper: 0,
                parts: 2,
            },
            RouteError::InvalidPlanRow {
                lower: 1,
                upper: 0,
                reason: s("r"),
            },
        ];
        for e in all {
            assert!(!e.to_string().is_empty());
            assert!(!e.hint().is_empty());
            let code = e.sqlstate();
            assert_eq!(code.len(), 5);
            let expected = match e {
                RouteError::Empty | RouteError::Gap { .. } => "55000",
                RouteError::UnknownShard(_) => "42704",
                _ => "22023",
            };
            assert_eq!(code, expected, "{e:?}");
        }
        assert_eq!(
            RouteError::Gap {
                gene: 65535,
                highest_upper: 65534
            }
            .hint(),
            "add a route whose upper bound is 65535: SELECT id_gen.set_route(65535, 'shard_x')"
        );
    }
}
