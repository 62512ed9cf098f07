//! The genes a shard owns of one table: the pure half of the shard's ownership test
//! (`src/routing_guard/owned_ranges.rs`, `id_gen.shard_owns`) and the genes the join check
//! compares ids with (`src/routing_guard/join_check.rs`). Kept twice: as a bitmap of
//! the 65,536 genes (8 KiB), which the test reads, and as sorted ranges, which are shown.
//!
//! Invariants: a membership test is one bit, O(1) whatever the number of ranges (a
//! whole-table scan through the ownership view tests every row); the ranges are sorted by
//! their lower gene, disjoint and not adjacent (adjacent or overlapping input ranges are
//! merged), and describe exactly the bits that are set.

use crate::layout::SEQ_BITS;

/// Owned genes: ranges `lower ..= upper`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedGenes {
    ranges: Vec<(u16, u16)>,
    /// Bit `g % 64` of word `g / 64`: gene g is owned.
    bits: Box<[u64; 1024]>,
}

impl OwnedGenes {
    /// From ranges in any order; inverted ranges (`lower > upper`) are ignored.
    pub fn from_ranges(ranges: impl IntoIterator<Item = (u16, u16)>) -> Self {
        let mut sorted: Vec<(u16, u16)> = ranges.into_iter().filter(|&(l, u)| l <= u).collect();
        sorted.sort_unstable();
        let mut merged: Vec<(u16, u16)> = Vec::with_capacity(sorted.len());
        for (lower, upper) in sorted {
            match merged.last_mut() {
                Some(last) if u32::from(lower) <= u32::from(last.1) + 1 => {
                    last.1 = last.1.max(upper)
                }
                _ => merged.push((lower, upper)),
            }
        }
        let mut bits = Box::new([0u64; 1024]);
        for &(lower, upper) in &merged {
            for g in lower..=upper {
                bits[usize::from(g) / 64] |= 1 << (g % 64);
            }
        }
        OwnedGenes {
            ranges: merged,
            bits,
        }
    }

    /// Whether `gene` is owned.
    pub fn contains_gene(&self, gene: u16) -> bool {
        self.bits[usize::from(gene) / 64] >> (gene % 64) & 1 == 1
    }

    /// Whether the gene of `id` is owned (a negative id has no gene: never).
    pub fn contains_id(&self, id: i64) -> bool {
        id >= 0 && self.contains_gene((id >> SEQ_BITS) as u16)
    }

    /// The first gene of `lower ..= upper` that is not owned (None: all are). One binary
    /// search over the ranges, whatever the width.
    pub fn first_gene_missing(&self, lower: u16, upper: u16) -> Option<u16> {
        if lower > upper {
            return None;
        }
        // The last range that starts at or before `lower`.
        let i = self.ranges.partition_point(|&(l, _)| l <= lower);
        match i.checked_sub(1).map(|i| self.ranges[i]) {
            Some((_, u)) if u >= lower => (u < upper).then(|| u + 1),
            _ => Some(lower),
        }
    }

    /// The ranges, sorted and merged.
    pub fn ranges(&self) -> &[(u16, u16)] {
        &self.ranges
    }

    /// The genes of `self` that `other` does not hold (the owned genes a move has not
    /// fenced).
    pub fn without(&self, other: &OwnedGenes) -> OwnedGenes {
        let mut kept = vec![];
        for &(lower, upper) in &self.ranges {
            let mut start = None;
            for g in lower..=upper {
                match (other.contains_gene(g), start) {
                    (false, None) => start = Some(g),
                    // (start is Some, so g > lower >= 0)
                    (true, Some(s)) => {
                        kept.push((s, g - 1));
                        start = None;
                    }
                    _ => {}
                }
            }
            if let Some(s) = start {
                kept.push((s, upper));
            }
        }
        OwnedGenes::from_ranges(kept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::XorShift;

    #[test]
    fn ranges_are_sorted_and_merged() {
        let o = OwnedGenes::from_ranges([(10, 19), (0, 4), (5, 7), (30, 40), (35, 36), (20, 20)]);
        assert_eq!(o.ranges(), &[(0, 7), (10, 20), (30, 40)]);
        let o = OwnedGenes::from_ranges([(65535, 65535), (0, 65534)]);
        assert_eq!(o.ranges(), &[(0, 65535)]);
        assert_eq!(OwnedGenes::from_ranges([(5, 4)]).ranges(), &[]);
    }

    #[test]
    fn membership_matches_a_linear_scan() {
        let mut rng = XorShift(27);
        for _ in 0..200 {
            let n = (rng.below(64)) as usize;
            let raw: Vec<(u16, u16)> = (0..n)
                .map(|_| {
                    let a = rng.next() as u16;
                    let b = a.saturating_add((rng.below(300)) as u16);
                    (a, b)
                })
                .collect();
            let o = OwnedGenes::from_ranges(raw.iter().copied());
            for _ in 0..500 {
                let g = rng.next() as u16;
                let linear = raw.iter().any(|&(l, u)| l <= g && g <= u);
                assert_eq!(o.contains_gene(g), linear, "gene {g} in {raw:?}");
            }
            for &(l, u) in &raw {
                assert!(o.contains_gene(l) && o.contains_gene(u));
            }
            // The ranges shown are exactly the genes owned.
            let shown = o
                .ranges()
                .iter()
                .map(|&(l, u)| usize::from(u - l) + 1)
                .sum::<usize>();
            assert_eq!(
                shown,
                (0..=65535u16).filter(|&g| o.contains_gene(g)).count()
            );
        }
    }

    #[test]
    fn without_keeps_exactly_the_genes_the_other_lacks() {
        let mut rng = XorShift(41);
        let random = |rng: &mut XorShift| {
            OwnedGenes::from_ranges((0..rng.below(10)).map(|_| {
                let a = rng.below(600) as u16;
                (a, a.saturating_add(rng.below(80) as u16))
            }))
        };
        for _ in 0..200 {
            let (a, b) = (random(&mut rng), random(&mut rng));
            let c = a.without(&b);
            for g in 0..=700u16 {
                assert_eq!(
                    c.contains_gene(g),
                    a.contains_gene(g) && !b.contains_gene(g),
                    "gene {g}"
                );
            }
        }
        let all = OwnedGenes::from_ranges([(0, 65535)]);
        let middle = OwnedGenes::from_ranges([(1, 65534)]);
        assert_eq!(all.without(&middle).ranges(), &[(0, 0), (65535, 65535)]);
        assert_eq!(middle.without(&all).ranges(), &[]);
    }

    #[test]
    fn first_missing_matches_a_linear_scan() {
        let mut rng = XorShift(31);
        for _ in 0..300 {
            let raw: Vec<(u16, u16)> = (0..rng.below(12))
                .map(|_| {
                    let a = rng.below(400) as u16;
                    (a, a.saturating_add(rng.below(40) as u16))
                })
                .collect();
            let o = OwnedGenes::from_ranges(raw.iter().copied());
            for _ in 0..100 {
                let a = rng.below(460) as u16;
                let b = a.saturating_add(rng.below(60) as u16);
                let linear = (a..=b).find(|&g| !o.contains_gene(g));
                assert_eq!(o.first_gene_missing(a, b), linear, "{a}..={b} in {raw:?}");
            }
        }
        let all = OwnedGenes::from_ranges([(0, 65535)]);
        assert_eq!(all.first_gene_missing(0, 65535), None);
        assert_eq!(all.first_gene_missing(9, 3), None);
    }

    #[test]
    fn ids_map_to_their_gene() {
        let o = OwnedGenes::from_ranges([(3, 3), (65535, 65535)]);
        assert!(o.contains_id(3 << SEQ_BITS));
        assert!(o.contains_id((4 << SEQ_BITS) - 1));
        assert!(!o.contains_id((3 << SEQ_BITS) - 1));
        assert!(o.contains_id(i64::MAX));
        assert!(!o.contains_id(-1));
        assert!(!o.contains_id(i64::MIN));
    }
}
