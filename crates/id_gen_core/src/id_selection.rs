//! The ids a scan's predicates select, as a set: the pure half of the check of scans of a
//! table laid out by ownership (`src/routing_guard/owned_scan.rs`). Each predicate on the
//! id column gives a set (`id = x`: one id; `id = ANY (array)`: its elements; `id >= x`:
//! every id from x), AND-ed predicates intersect, OR-ed ones unite, and a predicate that
//! says nothing about the id (or cannot be evaluated) selects every id. The check then
//! asks whether the set reaches a gene that the shard does not own.
//!
//! Invariants:
//!   * A set is sorted, inclusive spans of ids that neither overlap nor touch; every
//!     operation keeps that shape, so two sets that hold the same ids are equal.
//!   * A set is *bounded* when no span reaches `i64::MIN` or `i64::MAX`: the predicates
//!     name both ends of what they select. Only a bounded set is checked (`id > last`, an
//!     owner's pagination, selects ids of many genes and is not a lookup by id).
//!   * Ids below zero have no gene and are never reported; a span is checked gene by gene
//!     over the genes it spans (one binary search per span with `OwnedGenes`).

use crate::layout::SEQ_BITS;
use crate::owned_genes::OwnedGenes;

/// A set of ids: sorted inclusive spans, disjoint and not adjacent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdSelection {
    spans: Vec<(i64, i64)>,
}

impl IdSelection {
    /// Every id (a predicate that does not limit the id).
    pub fn everything() -> Self {
        IdSelection {
            spans: vec![(i64::MIN, i64::MAX)],
        }
    }

    /// No id (`id = NULL`, an empty array, `id > x AND id < x`).
    pub fn nothing() -> Self {
        IdSelection { spans: vec![] }
    }

    /// The ids given, in any order, duplicates allowed.
    pub fn points(ids: impl IntoIterator<Item = i64>) -> Self {
        let mut v: Vec<i64> = ids.into_iter().collect();
        v.sort_unstable();
        v.dedup();
        Self::from_sorted_spans(v.into_iter().map(|i| (i, i)))
    }

    /// `id >= lower`.
    pub fn at_least(lower: i64) -> Self {
        IdSelection {
            spans: vec![(lower, i64::MAX)],
        }
    }

    /// `id <= upper`.
    pub fn at_most(upper: i64) -> Self {
        IdSelection {
            spans: vec![(i64::MIN, upper)],
        }
    }

    /// `id > lower` (nothing when `lower` is the largest id).
    pub fn above(lower: i64) -> Self {
        lower
            .checked_add(1)
            .map_or_else(Self::nothing, Self::at_least)
    }

    /// `id < upper` (nothing when `upper` is the smallest id).
    pub fn below(upper: i64) -> Self {
        upper
            .checked_sub(1)
            .map_or_else(Self::nothing, Self::at_most)
    }

    /// The ids in both sets (AND).
    pub fn intersect(&self, other: &Self) -> Self {
        let (a, b) = (&self.spans, &other.spans);
        let (mut i, mut j) = (0, 0);
        let mut out = vec![];
        while i < a.len() && j < b.len() {
            let lower = a[i].0.max(b[j].0);
            let upper = a[i].1.min(b[j].1);
            if lower <= upper {
                out.push((lower, upper));
            }
            if a[i].1 < b[j].1 {
                i += 1;
            } else {
                j += 1;
            }
        }
        IdSelection { spans: out }
    }

    /// The ids in either set (OR).
    pub fn union(&self, other: &Self) -> Self {
        let mut all: Vec<(i64, i64)> = self.spans.iter().chain(&other.spans).copied().collect();
        all.sort_unstable();
        Self::from_sorted_spans(all.into_iter())
    }

    /// Merges spans sorted by their lower end.
    fn from_sorted_spans(spans: impl Iterator<Item = (i64, i64)>) -> Self {
        let mut out: Vec<(i64, i64)> = vec![];
        for (lower, upper) in spans {
            match out.last_mut() {
                Some(last) if lower <= last.1.saturating_add(1) => last.1 = last.1.max(upper),
                _ => out.push((lower, upper)),
            }
        }
        IdSelection { spans: out }
    }

    /// Whether the set names both ends of what it selects (see the header).
    pub fn is_bounded(&self) -> bool {
        self.spans
            .iter()
            .all(|&(lower, upper)| lower > i64::MIN && upper < i64::MAX)
    }

    /// Whether no id is selected.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The spans, sorted.
    pub fn spans(&self) -> &[(i64, i64)] {
        &self.spans
    }

    /// The first gene the set reaches that `owned` does not hold (None when it holds them
    /// all, or when the set is not bounded).
    pub fn first_gene_not_owned(&self, owned: &OwnedGenes) -> Option<u16> {
        if !self.is_bounded() {
            return None;
        }
        self.spans
            .iter()
            .filter(|&&(_, upper)| upper >= 0)
            .find_map(|&(lower, upper)| {
                let gene = |id: i64| (id >> SEQ_BITS) as u16;
                owned.first_gene_missing(gene(lower.max(0)), gene(upper))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::XorShift;

    /// The ids of a small universe (-3..=40, and the two ends of i64) a set holds.
    fn members(s: &IdSelection) -> Vec<i64> {
        let universe = [i64::MIN, i64::MIN + 1]
            .into_iter()
            .chain(-3..=40)
            .chain([i64::MAX - 1, i64::MAX]);
        universe
            .filter(|&i| s.spans().iter().any(|&(l, u)| l <= i && i <= u))
            .collect()
    }

    fn random_set(rng: &mut XorShift) -> IdSelection {
        match rng.below(5) {
            0 => IdSelection::points((0..rng.below(6)).map(|_| rng.below(44) as i64 - 3)),
            1 => IdSelection::above(rng.below(44) as i64 - 3),
            2 => IdSelection::below(rng.below(44) as i64 - 3),
            3 => IdSelection::at_least(rng.below(44) as i64 - 3)
                .intersect(&IdSelection::at_most(rng.below(44) as i64 - 3)),
            _ => IdSelection::everything(),
        }
    }

    fn well_formed(s: &IdSelection) -> bool {
        s.spans().iter().all(|&(l, u)| l <= u)
            && s.spans()
                .windows(2)
                .all(|w| w[0].1.saturating_add(1) < w[1].0)
    }

    #[test]
    fn operations_match_sets_of_ids() {
        let mut rng = XorShift(29);
        for _ in 0..3000 {
            let (a, b) = (random_set(&mut rng), random_set(&mut rng));
            let (ma, mb) = (members(&a), members(&b));
            let both: Vec<i64> = ma.iter().copied().filter(|i| mb.contains(i)).collect();
            let mut either: Vec<i64> = ma.iter().chain(&mb).copied().collect();
            either.sort_unstable();
            either.dedup();
            let (and, or) = (a.intersect(&b), a.union(&b));
            assert_eq!(members(&and), both, "{a:?} AND {b:?} = {and:?}");
            assert_eq!(members(&or), either, "{a:?} OR {b:?} = {or:?}");
            assert!(well_formed(&and) && well_formed(&or), "{and:?} {or:?}");
            assert_eq!(and, b.intersect(&a));
            assert_eq!(or, b.union(&a));
        }
    }

    #[test]
    fn boundedness() {
        assert!(!IdSelection::everything().is_bounded());
        assert!(IdSelection::nothing().is_bounded());
        assert!(IdSelection::points([3, 1, 3]).is_bounded());
        assert!(!IdSelection::above(0).is_bounded());
        assert!(!IdSelection::below(10).is_bounded());
        let between = IdSelection::at_least(-5).intersect(&IdSelection::at_most(10));
        assert!(between.is_bounded());
        // A point OR a one-sided range is not a lookup by id.
        assert!(!IdSelection::points([7])
            .union(&IdSelection::above(100))
            .is_bounded());
        // A point AND a one-sided range is.
        let p = IdSelection::points([7, 200]).intersect(&IdSelection::below(100));
        assert_eq!(p, IdSelection::points([7]));
        assert!(IdSelection::above(i64::MAX).is_empty());
        assert!(IdSelection::below(i64::MIN).is_empty());
    }

    #[test]
    fn genes_not_owned() {
        let g = |gene: i64, seq: i64| gene << SEQ_BITS | seq;
        let owned = OwnedGenes::from_ranges([(0, 15), (32, 47)]);
        assert_eq!(
            IdSelection::points([g(5, 1), g(33, 9)]).first_gene_not_owned(&owned),
            None
        );
        assert_eq!(
            IdSelection::points([g(5, 1), g(20, 2)]).first_gene_not_owned(&owned),
            Some(20)
        );
        // The points a range beside them excludes are not checked.
        let sel = IdSelection::points([g(5, 1), g(20, 2)]).intersect(&IdSelection::below(g(16, 0)));
        assert_eq!(sel.first_gene_not_owned(&owned), None);
        // A span is checked over every gene it reaches.
        let span = |a: i64, b: i64| IdSelection::at_least(a).intersect(&IdSelection::at_most(b));
        assert_eq!(span(g(32, 0), g(47, 5)).first_gene_not_owned(&owned), None);
        assert_eq!(
            span(g(10, 0), g(40, 0)).first_gene_not_owned(&owned),
            Some(16)
        );
        // An OR of spans, each owned; then one reaching a gene not owned.
        let two = span(g(1, 0), g(2, 0)).union(&span(g(40, 0), g(41, 0)));
        assert_eq!(two.first_gene_not_owned(&owned), None);
        assert_eq!(
            two.union(&span(g(47, 0), g(48, 1)))
                .first_gene_not_owned(&owned),
            Some(48)
        );
        // Negative ids have no gene; an unbounded set is not checked.
        assert_eq!(span(-10, -1).first_gene_not_owned(&owned), None);
        assert_eq!(span(-10, g(3, 0)).first_gene_not_owned(&owned), None);
        assert_eq!(
            IdSelection::above(g(16, 0)).first_gene_not_owned(&owned),
            None
        );
        assert_eq!(IdSelection::nothing().first_gene_not_owned(&owned), None);
        let none = OwnedGenes::from_ranges([]);
        assert_eq!(
            IdSelection::points([0]).first_gene_not_owned(&none),
            Some(0)
        );
    }
}
