//! The backend-local memory of the segment engine: which slot (and generation) serves
//! each sequence counter group and serial period this backend used, and the calls not
//! yet added to the slots' shared rate counters.
//!
//! Invariants:
//! * Lives in a `thread_local!` `RefCell`; every access is one short `with` call that
//!   never runs SPI, never raises and never calls back into this module, so a borrow can
//!   neither outlive a clear nor be taken twice.
//! * An entry is only a hint: callers re-check the slot's generation after every take
//!   and forget the entry when it moved (the slot was reassigned or reset).

use crate::access::Stamp;
use std::cell::RefCell;
use std::collections::HashMap;

/// Calls are added to the shared counters in batches of this size: the rate meter
/// needs about one sample a second, not one atomic add per call.
pub const CALL_BATCH: u64 = 64;

/// A serial period as the backend knows it: the serial, the period's date text and its
/// local start (the slot's incarnation).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PeriodKey {
    pub serial: String,
    pub text: String,
    pub local_start: i64,
}

struct SequenceEntry {
    name: String,
    counters: u32,
    /// Per counter group: (slot index, generation) once attached.
    groups: Vec<Option<(usize, u64)>>,
    /// The access stamp under which the current user was allowed to use the sequence;
    /// the entry serves only while the stamp is unchanged.
    stamp: Stamp,
    /// The sequence's cap on one bulk call.
    max_bulk: u64,
}

#[derive(Default)]
struct LocalCache {
    /// Never shrinks, so indexes stay valid; `last` makes the common case (the same
    /// sequence again) one string comparison.
    sequences: Vec<SequenceEntry>,
    index: HashMap<String, usize>,
    last: usize,
    periods: HashMap<PeriodKey, (usize, u64)>,
    /// Calls not yet added to each slot's striped counter.
    pending_calls: Vec<u64>,
}

thread_local! {
    static CACHE: RefCell<LocalCache> = RefCell::new(LocalCache {
        last: usize::MAX,
        ..LocalCache::default()
    });
}

/// The counter group that serves `gene` when a sequence has `counters` groups: groups
/// own contiguous ranges of the 65536 virtual nodes.
#[inline]
pub fn group_of(gene: Option<u16>, counters: u32) -> u32 {
    match gene {
        Some(g) if counters > 1 => (g as u32 * counters) >> 16,
        _ => 0,
    }
}

/// The cached slot of sequence `name` for `gene`'s group, if any, and if the entry was
/// validated under `stamp` (the current user was allowed to use it).
#[inline]
pub fn sequence_slot(name: &str, gene: Option<u16>, stamp: Stamp) -> Option<(usize, u64)> {
    CACHE.with_borrow_mut(|c| {
        let i = if c.last < c.sequences.len() && c.sequences[c.last].name == name {
            c.last
        } else {
            let i = *c.index.get(name)?;
            c.last = i;
            i
        };
        let e = &c.sequences[i];
        if e.stamp != stamp {
            return None;
        }
        e.groups
            .get(group_of(gene, e.counters) as usize)
            .copied()
            .flatten()
    })
}

/// What a backend learned when it attached a group of a sequence.
pub struct Attached {
    pub counters: u32,
    pub group: u32,
    pub found: (usize, u64),
    pub stamp: Stamp,
    pub max_bulk: u64,
}

/// The cap on one bulk call of sequence `name` (as of its last attach).
pub fn sequence_max_bulk(name: &str) -> Option<u64> {
    CACHE.with_borrow(|c| c.index.get(name).map(|&i| c.sequences[i].max_bulk))
}

/// Records that group `a.group` (of `a.counters`) of sequence `name` is slot `a.found`.
pub fn remember_sequence(name: &str, a: Attached) {
    let Attached {
        counters,
        group,
        found,
        stamp,
        max_bulk,
    } = a;
    CACHE.with_borrow_mut(|c| {
        let i = match c.index.get(name) {
            Some(&i) => i,
            None => {
                c.sequences.push(SequenceEntry {
                    name: name.to_owned(),
                    counters: 0,
                    groups: vec![],
                    stamp,
                    max_bulk,
                });
                c.index.insert(name.to_owned(), c.sequences.len() - 1);
                c.sequences.len() - 1
            }
        };
        let e = &mut c.sequences[i];
        if e.counters != counters || e.stamp != stamp {
            e.counters = counters;
            e.groups = vec![None; counters as usize];
        }
        e.stamp = stamp;
        e.max_bulk = max_bulk;
        e.groups[group as usize] = Some(found);
        c.last = i;
        reset_pending(c, found.0);
    })
}

/// Forgets every group of sequence `name` (it was dropped, re-created or reassigned).
pub fn forget_sequence(name: &str) {
    CACHE.with_borrow_mut(|c| {
        if let Some(&i) = c.index.get(name) {
            c.sequences[i].counters = 0;
            c.sequences[i].groups.clear();
        }
    })
}

pub fn period_slot(key: &PeriodKey) -> Option<(usize, u64)> {
    CACHE.with_borrow(|c| c.periods.get(key).copied())
}

pub fn remember_period(key: &PeriodKey, found: (usize, u64)) {
    CACHE.with_borrow_mut(|c| {
        c.periods.insert(key.clone(), found);
        reset_pending(c, found.0);
    })
}

pub fn forget_period(key: &PeriodKey) {
    CACHE.with_borrow_mut(|c| {
        c.periods.remove(key);
    })
}

fn reset_pending(c: &mut LocalCache, slot: usize) {
    if c.pending_calls.len() <= slot {
        c.pending_calls.resize(slot + 1, 0);
    }
    c.pending_calls[slot] = 0;
}

/// Adds `n` calls of slot `slot` to this backend's batch; returns the batch to add to
/// the shared counter once it reached [`CALL_BATCH`].
#[inline]
pub fn count_calls(slot: usize, n: u64) -> Option<u64> {
    CACHE.with_borrow_mut(|c| {
        if c.pending_calls.len() <= slot {
            c.pending_calls.resize(slot + 1, 0);
        }
        let pending = &mut c.pending_calls[slot];
        *pending += n;
        (*pending >= CALL_BATCH).then(|| std::mem::take(pending))
    })
}
