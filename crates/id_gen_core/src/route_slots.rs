//! Route slots: which numbered shard slot each gene routes to, and the hash value that puts
//! a row into the hash partition of that slot.
//!
//! A coordinator can partition a table `PARTITION BY HASH (id id_gen.gene_route_ops)` with
//! one partition per shard, `FOR VALUES WITH (MODULUS 1024, REMAINDER <slot>)`. PostgreSQL
//! then prunes `WHERE id = ...` (at planning, or at executor start for a generic plan) and
//! routes inserted rows by calling the operator class's extended hash function, which
//! returns [`partition_hash`] of the slot that [`RouteSlots::slot_of_gene`] finds. The
//! number of relations is the number of shards, whatever the number of route ranges.
//!
//! PostgreSQL combines the hashes of a partition key's columns as
//! `row_hash = hash_combine64(0, h) = h + 0x49a0f4dd15e5a8e3` (wrapping) and keeps the row in
//! the partition whose remainder is `row_hash % modulus` (`compute_partition_hash_value` and
//! `get_partition_for_tuple`, unchanged since PostgreSQL 11). [`partition_hash`] inverts that.
//!
//! Invariants: slot [`NO_SLOT`] is never a shard's (rows of a gene without a route, or routed
//! to a shard without a slot, find no partition); every slot is below [`MODULUS`]; routes are
//! ceilings (a gene belongs to the first range whose upper gene is at or above it).

/// The modulus of every hash partition of a coordinator table.
pub const MODULUS: u64 = 1024;
/// The slot of genes that route nowhere: no partition has it.
pub const NO_SLOT: u16 = 1023;
/// PostgreSQL's seed of `hash_combine64` for the first column of a partition key.
const COMBINE: u64 = 0x49a0_f4dd_15e5_a8e3;

/// The value of the extended hash function that puts a row into the partition of `slot`.
pub fn partition_hash(slot: u16) -> u64 {
    (slot as u64).wrapping_sub(COMBINE)
}

/// The partition remainder PostgreSQL computes from a one-column key's hash value.
pub fn remainder_of(hash: u64) -> u64 {
    hash.wrapping_add(COMBINE) % MODULUS
}

/// Errors in the rows a route-slot table is built from.
#[derive(Debug, PartialEq, Eq)]
pub enum RouteSlotError {
    /// A slot outside `0 .. NO_SLOT`.
    SlotOutOfRange(i64),
    /// An upper gene outside `0 ..= 65535`.
    GeneOutOfRange(i64),
}

impl std::fmt::Display for RouteSlotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RouteSlotError::SlotOutOfRange(s) => {
                write!(
                    f,
                    "shard slot {s} is out of range (allowed: 0 .. {})",
                    NO_SLOT - 1
                )
            }
            RouteSlotError::GeneOutOfRange(g) => {
                write!(f, "upper gene {g} is out of range (allowed: 0 .. 65535)")
            }
        }
    }
}

/// The route table as slots: upper genes in ascending order with the slot of each range.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RouteSlots {
    uppers: Vec<u16>,
    slots: Vec<u16>,
}

impl RouteSlots {
    /// From `(upper_gene, slot)` rows in any order; a `None` slot (a shard without one)
    /// becomes [`NO_SLOT`].
    pub fn from_rows(
        rows: impl IntoIterator<Item = (i64, Option<i64>)>,
    ) -> Result<Self, RouteSlotError> {
        let mut pairs = vec![];
        for (upper, slot) in rows {
            let upper = u16::try_from(upper).map_err(|_| RouteSlotError::GeneOutOfRange(upper))?;
            let slot = match slot {
                None => NO_SLOT,
                Some(s) if (0..NO_SLOT as i64).contains(&s) => s as u16,
                Some(s) => return Err(RouteSlotError::SlotOutOfRange(s)),
            };
            pairs.push((upper, slot));
        }
        pairs.sort_unstable();
        pairs.dedup_by_key(|p| p.0);
        Ok(RouteSlots {
            uppers: pairs.iter().map(|p| p.0).collect(),
            slots: pairs.iter().map(|p| p.1).collect(),
        })
    }

    /// The slot of the range that holds `gene` ([`NO_SLOT`] above the highest upper gene).
    pub fn slot_of_gene(&self, gene: u16) -> u16 {
        let i = self.uppers.partition_point(|&u| u < gene);
        self.slots.get(i).copied().unwrap_or(NO_SLOT)
    }

    /// The slot of an id: by its gene (bits 62..47); a negative id has none.
    pub fn slot_of_id(&self, id: i64) -> u16 {
        if id < 0 {
            NO_SLOT
        } else {
            self.slot_of_gene((id >> 47) as u16)
        }
    }

    /// The slot of every gene of `low ..= high` if it is one and the same shard's.
    pub fn single_slot(&self, low: u16, high: u16) -> Option<u16> {
        if low > high {
            return None;
        }
        let first = self.uppers.partition_point(|&u| u < low);
        let last = self.uppers.partition_point(|&u| u < high);
        let slot = *self.slots.get(first)?;
        (last < self.slots.len()
            && slot != NO_SLOT
            && self.slots[first..=last].iter().all(|&s| s == slot))
        .then_some(slot)
    }

    /// Number of route ranges.
    pub fn len(&self) -> usize {
        self.uppers.len()
    }

    /// Whether there are no routes.
    pub fn is_empty(&self) -> bool {
        self.uppers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_lands_in_the_slots_partition() {
        for slot in [0u16, 1, 2, 63, 511, NO_SLOT] {
            assert_eq!(remainder_of(partition_hash(slot)), slot as u64);
        }
        // Reference: hash_combine64(0, h) = h + 0x49a0f4dd15e5a8e3 (PostgreSQL's hashfn.h).
        assert_eq!(partition_hash(0), 0u64.wrapping_sub(0x49a0_f4dd_15e5_a8e3));
    }

    #[test]
    fn ceilings_and_the_top() {
        let r = RouteSlots::from_rows([(65535, Some(2)), (99, Some(0)), (199, Some(1))]).unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!(r.slot_of_gene(0), 0);
        assert_eq!(r.slot_of_gene(99), 0);
        assert_eq!(r.slot_of_gene(100), 1);
        assert_eq!(r.slot_of_gene(199), 1);
        assert_eq!(r.slot_of_gene(200), 2);
        assert_eq!(r.slot_of_gene(65535), 2);
        assert_eq!(r.slot_of_id((150i64 << 47) | 7), 1);
        assert_eq!(r.slot_of_id(-1), NO_SLOT);
        let partial = RouteSlots::from_rows([(99, Some(0))]).unwrap();
        assert_eq!(partial.slot_of_gene(100), NO_SLOT);
        assert_eq!(RouteSlots::default().slot_of_gene(5), NO_SLOT);
    }

    #[test]
    fn one_slot_for_a_span_of_genes() {
        let r = RouteSlots::from_rows([
            (99, Some(0)),
            (199, Some(1)),
            (299, Some(1)),
            (65535, Some(0)),
        ])
        .unwrap();
        assert_eq!(r.single_slot(5, 5), Some(0));
        assert_eq!(r.single_slot(0, 99), Some(0));
        assert_eq!(r.single_slot(99, 100), None);
        assert_eq!(r.single_slot(100, 299), Some(1));
        assert_eq!(r.single_slot(150, 300), None);
        assert_eq!(r.single_slot(300, 65535), Some(0));
        assert_eq!(r.single_slot(7, 3), None);
        let partial = RouteSlots::from_rows([(99, Some(0)), (199, None)]).unwrap();
        assert_eq!(partial.single_slot(100, 150), None);
        assert_eq!(partial.single_slot(50, 250), None);
        assert_eq!(
            RouteSlots::from_rows([(99, Some(0))])
                .unwrap()
                .single_slot(50, 100),
            None
        );
    }

    #[test]
    fn shards_without_a_slot_and_bad_rows() {
        let r = RouteSlots::from_rows([(10, None), (65535, Some(4))]).unwrap();
        assert_eq!(r.slot_of_gene(3), NO_SLOT);
        assert_eq!(r.slot_of_gene(11), 4);
        assert_eq!(
            RouteSlots::from_rows([(10, Some(1023))]),
            Err(RouteSlotError::SlotOutOfRange(1023))
        );
        assert_eq!(
            RouteSlots::from_rows([(65536, Some(1))]),
            Err(RouteSlotError::GeneOutOfRange(65536))
        );
    }

    #[test]
    fn many_alternating_ranges() {
        let rows: Vec<_> = (0..4096i64).map(|k| (k * 16 + 15, Some(k % 2))).collect();
        let r = RouteSlots::from_rows(rows).unwrap();
        for gene in (0..=65535u32).step_by(7) {
            assert_eq!(r.slot_of_gene(gene as u16), ((gene / 16) % 2) as u16);
        }
    }
}
