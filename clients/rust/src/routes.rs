//! The route table: gene ranges to shard names, with the route version they belong to
//! (protocol §2), and the ceiling-entry lookup of the seed's `TreeMap<Short, Shard>`.
//!
//! Invariants: a [`RouteTable`] is immutable once built, so a lookup that reads one table
//! gets a shard and the version that shard was routed by from the same snapshot; ranges are
//! validated when built (`lower <= upper`, both in 0..=65535, no overlap), so a lookup
//! never answers for a gene outside every range — it returns [`Error::NoRoute`].

use crate::error::Error;
use std::collections::BTreeMap;

/// One snapshot of the routes: `upper_gene -> (lower_gene, shard)`, and its version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteTable {
    by_upper: BTreeMap<u16, (u16, String)>,
    version: i64,
}

impl RouteTable {
    /// An empty table (no gene has a route) at `version`.
    pub fn empty(version: i64) -> Self {
        RouteTable {
            by_upper: BTreeMap::new(),
            version,
        }
    }

    /// Builds a table from `(lower_gene, upper_gene, shard)` rows as `id_gen.route_map`
    /// returns them (inclusive ranges, in any order); rejects malformed or overlapping rows.
    pub fn from_rows<I>(rows: I, version: i64) -> Result<Self, Error>
    where
        I: IntoIterator<Item = (i64, i64, String)>,
    {
        let mut by_upper = BTreeMap::new();
        for (lower, upper, shard) in rows {
            let in_range = |g: i64| (0..=0xFFFF).contains(&g);
            if !in_range(lower) || !in_range(upper) || lower > upper {
                return Err(Error::Protocol(format!(
                    "route range {lower}..{upper} (shard {shard:?}) is not within 0..65535"
                )));
            }
            if by_upper
                .insert(upper as u16, (lower as u16, shard))
                .is_some()
            {
                return Err(Error::Protocol(format!("two routes end at gene {upper}")));
            }
        }
        let mut previous_upper: Option<u16> = None;
        for (upper, (lower, _)) in &by_upper {
            if let Some(p) = previous_upper {
                if *lower <= p {
                    return Err(Error::Protocol(format!(
                        "route ranges overlap: one ends at {p}, the next starts at {lower}"
                    )));
                }
            }
            previous_upper = Some(*upper);
        }
        Ok(RouteTable { by_upper, version })
    }

    /// The route version of this snapshot.
    pub fn version(&self) -> i64 {
        self.version
    }

    /// The shard that owns `gene`: the ceiling entry on `upper_gene`, if its range starts
    /// at or below the gene.
    pub fn lookup(&self, gene: u16) -> Result<&str, Error> {
        match self.by_upper.range(gene..).next() {
            Some((_, (lower, shard))) if *lower <= gene => Ok(shard),
            _ => Err(Error::NoRoute { gene }),
        }
    }

    /// The ranges as `(lower_gene, upper_gene, shard)`, ordered by gene.
    pub fn ranges(&self) -> Vec<(u16, u16, String)> {
        self.by_upper
            .iter()
            .map(|(upper, (lower, shard))| (*lower, *upper, shard.clone()))
            .collect()
    }

    /// The shard names the table routes to (with repetitions removed), ordered by name.
    pub fn shards(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.by_upper.values().map(|(_, s)| s.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> RouteTable {
        RouteTable::from_rows(
            vec![
                (0, 16383, "s1".to_string()),
                (16384, 32767, "s2".to_string()),
                (32768, 60000, "s1".to_string()),
            ],
            7,
        )
        .unwrap()
    }

    #[test]
    fn ceiling_entry_lookup() {
        let t = table();
        assert_eq!(t.version(), 7);
        assert_eq!(t.lookup(0).unwrap(), "s1");
        assert_eq!(t.lookup(16383).unwrap(), "s1");
        assert_eq!(t.lookup(16384).unwrap(), "s2");
        assert_eq!(t.lookup(16043).unwrap(), "s1");
        assert_eq!(t.lookup(32767).unwrap(), "s2");
        assert_eq!(t.lookup(32768).unwrap(), "s1");
        assert_eq!(t.lookup(60000).unwrap(), "s1");
        assert_eq!(t.shards(), vec!["s1", "s2"]);
        assert_eq!(
            t.ranges(),
            vec![
                (0, 16383, "s1".to_string()),
                (16384, 32767, "s2".to_string()),
                (32768, 60000, "s1".to_string())
            ]
        );
    }

    #[test]
    fn genes_past_the_last_upper_or_in_a_gap_have_no_route() {
        let t = table();
        assert!(matches!(
            t.lookup(60001),
            Err(Error::NoRoute { gene: 60001 })
        ));
        assert!(matches!(
            t.lookup(65535),
            Err(Error::NoRoute { gene: 65535 })
        ));
        let gappy = RouteTable::from_rows(
            vec![(0, 99, "a".to_string()), (200, 65535, "b".to_string())],
            1,
        )
        .unwrap();
        assert_eq!(gappy.lookup(99).unwrap(), "a");
        assert!(matches!(
            gappy.lookup(100),
            Err(Error::NoRoute { gene: 100 })
        ));
        assert!(matches!(
            gappy.lookup(199),
            Err(Error::NoRoute { gene: 199 })
        ));
        assert_eq!(gappy.lookup(200).unwrap(), "b");
        assert_eq!(gappy.lookup(65535).unwrap(), "b");
        assert!(matches!(
            RouteTable::empty(3).lookup(5),
            Err(Error::NoRoute { gene: 5 })
        ));
    }

    #[test]
    fn malformed_rows_are_rejected() {
        let bad = |rows: Vec<(i64, i64, &str)>| {
            RouteTable::from_rows(rows.into_iter().map(|(l, u, s)| (l, u, s.to_string())), 1)
                .is_err()
        };
        assert!(bad(vec![(0, 65536, "a")]));
        assert!(bad(vec![(-1, 5, "a")]));
        assert!(bad(vec![(10, 5, "a")]));
        assert!(bad(vec![(0, 10, "a"), (10, 20, "b")]));
        assert!(bad(vec![(0, 10, "a"), (5, 10, "b")]));
        assert!(!bad(vec![(11, 20, "b"), (0, 10, "a")]));
    }
}
