//! The segment (号段) engine: the double-buffered cursor that hands out values, the
//! reservation arithmetic, and adaptive step sizing (docs/design.md §3).
//!
//! [`SegmentChain`] is built only from atomics and is `#[repr(C)]`, so the extension
//! places it directly in PostgreSQL shared memory where every backend uses it; the same
//! code runs under `std::thread` in this crate's tests, which is how its concurrency is
//! tested without a server.
//!
//! How it works. `state` packs `epoch(16) │ offset(48)`. Epoch `e` is served by ring entry
//! `entries[e & 1]`; a caller takes values with one `fetch_add` on `state` (the hot path
//! is wait-free) and reads `base`/`len` of its epoch's entry under a seqlock tag. When the
//! offset passes `len`, the segment is used up: a caller, holding the per-chain lock of
//! the embedding layer, switches `state` to the next epoch — but only if that epoch's
//! entry (the standby) was published. Publishing is done by whoever reserved the range
//! in the catalog (the background worker), also under that lock.
//!
//! Invariants:
//! * A value is returned at most once: offsets of one epoch come from a single atomic
//!   counter, and an entry is only rewritten after its epoch is two switches in the past,
//!   which a stale reader detects through the tag (it then loses its value: a gap, never
//!   a duplicate).
//! * Epochs only grow (mod 2^16), even across [`SegmentChain::reset`], so a reader stalled
//!   across a reset cannot mistake a new segment for its old one.
//! * Within one chain, values are handed out in increasing order as long as published
//!   segments are increasing, which the catalog's high-water mark guarantees.

use std::sync::atomic::{fence, AtomicU64, Ordering};

const OFFSET_BITS: u32 = 48;
const OFFSET_MASK: u64 = (1 << OFFSET_BITS) - 1;
const EPOCH_MASK: u64 = 0xFFFF;
/// Tag of an entry that holds no segment.
const NO_TAG: u64 = u64::MAX;
/// Largest segment length (keeps offsets far from the epoch bits).
pub const MAX_SEGMENT_LEN: u64 = 1 << 40;

fn pack(epoch: u64, offset: u64) -> u64 {
    ((epoch & EPOCH_MASK) << OFFSET_BITS) | (offset & OFFSET_MASK)
}

fn unpack(state: u64) -> (u64, u64) {
    (state >> OFFSET_BITS, state & OFFSET_MASK)
}

#[repr(C)]
struct Entry {
    tag: AtomicU64,
    base: AtomicU64,
    len: AtomicU64,
    preload_at: AtomicU64,
}

impl Entry {
    const fn empty() -> Entry {
        Entry {
            tag: AtomicU64::new(NO_TAG),
            base: AtomicU64::new(0),
            len: AtomicU64::new(0),
            preload_at: AtomicU64::new(0),
        }
    }

    /// Seqlock read: `Some((base, len, preload_at))` if the entry holds epoch `epoch`.
    fn read(&self, epoch: u64) -> Option<(u64, u64, u64)> {
        if self.tag.load(Ordering::Acquire) != epoch {
            return None;
        }
        let base = self.base.load(Ordering::Relaxed);
        let len = self.len.load(Ordering::Relaxed);
        let preload_at = self.preload_at.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        if self.tag.load(Ordering::Relaxed) != epoch {
            return None;
        }
        Some((base, len, preload_at))
    }

    fn write(&self, epoch: u64, base: u64, len: u64, preload_at: u64) {
        self.tag.store(NO_TAG, Ordering::Relaxed);
        fence(Ordering::Release);
        self.base.store(base, Ordering::Relaxed);
        self.len.store(len, Ordering::Relaxed);
        self.preload_at.store(preload_at, Ordering::Relaxed);
        self.tag.store(epoch, Ordering::Release);
    }
}

/// Result of a take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// `count` consecutive values starting at `first`. `preload` is true for exactly
    /// one take per segment: the one that crossed the preload threshold.
    Got {
        first: u64,
        count: u64,
        preload: bool,
    },
    /// The current segment (of this epoch) is used up or absent: take the slow path.
    Empty { epoch: u64 },
}

/// Result of [`SegmentChain::switch_to_standby`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    /// The chain now serves a newer epoch (switched by us or by someone else).
    Switched,
    /// The current segment still has values: just retry the take.
    NotExhausted,
    /// Both segments are empty: wait for a refill.
    NoStandby,
}

/// A snapshot for status views.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChainSnapshot {
    pub epoch: u64,
    /// Values already taken from the current segment (capped at its length).
    pub used: u64,
    /// `(base, len)` of the current segment, if any.
    pub current: Option<(u64, u64)>,
    /// `(base, len)` of the loaded standby, if any.
    pub standby: Option<(u64, u64)>,
}

/// The double-buffered cursor. Lives in shared memory; all methods take `&self`.
/// `take*` may run concurrently with anything; `publish_standby`, `switch_to_standby`
/// and `reset` must be serialised by the caller (one lock per chain).
#[repr(C)]
pub struct SegmentChain {
    state: AtomicU64,
    entries: [Entry; 2],
}

impl Default for SegmentChain {
    fn default() -> Self {
        Self::new()
    }
}

impl SegmentChain {
    pub const fn new() -> SegmentChain {
        SegmentChain {
            state: AtomicU64::new(0),
            entries: [Entry::empty(), Entry::empty()],
        }
    }

    /// Takes one value. Wait-free: one `fetch_add` and a seqlock read.
    #[inline]
    pub fn take_one(&self) -> Take {
        let (epoch, off) = unpack(self.state.fetch_add(1, Ordering::AcqRel));
        match self.entries[(epoch & 1) as usize].read(epoch) {
            Some((base, len, preload_at)) if off < len => Take::Got {
                first: base + off,
                count: 1,
                preload: off == preload_at,
            },
            _ => Take::Empty { epoch },
        }
    }

    /// Takes up to `n` consecutive values from the current segment (fewer when it has
    /// fewer left). Lock-free (a CAS loop), never overshoots the segment.
    pub fn take_many(&self, n: u64) -> Take {
        let n = n.clamp(1, MAX_SEGMENT_LEN);
        let mut cur = self.state.load(Ordering::Acquire);
        loop {
            let (epoch, off) = unpack(cur);
            let Some((base, len, preload_at)) = self.entries[(epoch & 1) as usize].read(epoch)
            else {
                return Take::Empty { epoch };
            };
            if off >= len {
                return Take::Empty { epoch };
            }
            let count = n.min(len - off);
            match self.state.compare_exchange_weak(
                cur,
                pack(epoch, off + count),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    let preload = off <= preload_at && preload_at < off + count;
                    return Take::Got {
                        first: base + off,
                        count,
                        preload,
                    };
                }
                Err(actual) => cur = actual,
            }
        }
    }

    /// True when the epoch after the current one has no segment yet.
    pub fn needs_standby(&self) -> bool {
        let (epoch, _) = unpack(self.state.load(Ordering::Acquire));
        let next = (epoch + 1) & EPOCH_MASK;
        self.entries[(next & 1) as usize].read(next).is_none()
    }

    /// True when the current epoch has no segment or it is used up.
    pub fn current_exhausted(&self) -> bool {
        let (epoch, off) = unpack(self.state.load(Ordering::Acquire));
        match self.entries[(epoch & 1) as usize].read(epoch) {
            Some((_, len, _)) => off >= len,
            None => true,
        }
    }

    /// Publishes `[base, base+len)` as the standby segment. Returns false (and changes
    /// nothing) when a standby is already loaded. Caller holds the chain lock.
    pub fn publish_standby(&self, base: u64, len: u64, preload_at: u64) -> bool {
        debug_assert!(len >= 1 && len <= MAX_SEGMENT_LEN);
        let (epoch, _) = unpack(self.state.load(Ordering::Acquire));
        let next = (epoch + 1) & EPOCH_MASK;
        let entry = &self.entries[(next & 1) as usize];
        if entry.read(next).is_some() {
            return false;
        }
        entry.write(next, base, len, preload_at.min(len - 1));
        true
    }

    /// Makes the standby current if the current segment of `seen_epoch` is used up.
    /// Caller holds the chain lock.
    pub fn switch_to_standby(&self, seen_epoch: u64) -> Switch {
        let state = self.state.load(Ordering::Acquire);
        let (epoch, off) = unpack(state);
        if epoch != seen_epoch & EPOCH_MASK {
            return Switch::Switched;
        }
        if let Some((_, len, _)) = self.entries[(epoch & 1) as usize].read(epoch) {
            if off < len {
                return Switch::NotExhausted;
            }
        }
        let next = (epoch + 1) & EPOCH_MASK;
        if self.entries[(next & 1) as usize].read(next).is_none() {
            return Switch::NoStandby;
        }
        // Concurrent fetch_adds on the old epoch only see exhausted offsets; any
        // fetch_add after this store takes a fresh offset of the new epoch.
        self.state.store(pack(next, 0), Ordering::Release);
        Switch::Switched
    }

    /// Forgets both segments (the sequence was dropped, altered in a way that
    /// invalidates cached values, or the slot is reused). Epochs keep growing.
    /// Caller holds the chain lock.
    pub fn reset(&self) {
        let (epoch, _) = unpack(self.state.load(Ordering::Acquire));
        for e in &self.entries {
            e.tag.store(NO_TAG, Ordering::Release);
        }
        // An epoch with no segment; the next refill publishes epoch + 2.
        self.state.store(pack(epoch + 1, 0), Ordering::Release);
    }

    pub fn snapshot(&self) -> ChainSnapshot {
        let (epoch, off) = unpack(self.state.load(Ordering::Acquire));
        let current = self.entries[(epoch & 1) as usize]
            .read(epoch)
            .map(|(b, l, _)| (b, l));
        let next = (epoch + 1) & EPOCH_MASK;
        let standby = self.entries[(next & 1) as usize]
            .read(next)
            .map(|(b, l, _)| (b, l));
        ChainSnapshot {
            epoch,
            used: current.map_or(0, |(_, l)| off.min(l)),
            current,
            standby,
        }
    }
}

/// Counters striped over cache lines so that many backends counting at once do not
/// fight over one line; the reader sums the stripes.
#[repr(C)]
pub struct StripedCounter {
    stripes: [PaddedCounter; STRIPES],
}

const STRIPES: usize = 8;

#[repr(C, align(64))]
struct PaddedCounter(AtomicU64);

impl Default for StripedCounter {
    fn default() -> Self {
        Self::new()
    }
}

impl StripedCounter {
    pub const fn new() -> StripedCounter {
        const Z: PaddedCounter = PaddedCounter(AtomicU64::new(0));
        StripedCounter {
            stripes: [Z; STRIPES],
        }
    }

    /// `who` picks the stripe (the backend's process number).
    #[inline]
    pub fn add(&self, who: usize, n: u64) {
        self.stripes[who % STRIPES]
            .0
            .fetch_add(n, Ordering::Relaxed);
    }

    pub fn sum(&self) -> u64 {
        self.stripes
            .iter()
            .map(|s| s.0.load(Ordering::Relaxed))
            .fold(0, u64::wrapping_add)
    }

    pub fn clear(&self) {
        for s in &self.stripes {
            s.0.store(0, Ordering::Relaxed);
        }
    }
}

/// Rate of a monotonically growing total, measured in time buckets.
///
/// The observer (the background worker) feeds it the striped counter's sum about once
/// a second. Each observation's increase is added to the bucket of its time, together
/// with the start of the interval it covers; the rate is the count of the buckets inside
/// the window divided by the time they cover. Old buckets expire, so a burst stops
/// inflating the step a window later. Time is passed in (milliseconds), so tests drive
/// it with a fake clock.
#[derive(Debug, Clone)]
pub struct RateMeter {
    bucket_ms: i64,
    /// (bucket number, count, start of the covered interval)
    buckets: Vec<(i64, u64, i64)>,
    last: Option<(i64, u64)>,
}

impl RateMeter {
    pub fn new(bucket_ms: i64, buckets: usize) -> RateMeter {
        RateMeter {
            bucket_ms: bucket_ms.max(1),
            buckets: vec![(i64::MIN, 0, 0); buckets.max(1)],
            last: None,
        }
    }

    /// Records the counter total seen at `now_ms`.
    pub fn observe(&mut self, now_ms: i64, total: u64) {
        let Some((prev_ms, prev_total)) = self.last.replace((now_ms, total)) else {
            return;
        };
        if now_ms <= prev_ms {
            self.last = Some((prev_ms, total.max(prev_total)));
            return;
        }
        let delta = total.saturating_sub(prev_total);
        let nr = now_ms.div_euclid(self.bucket_ms);
        let idx = nr.rem_euclid(self.buckets.len() as i64) as usize;
        if self.buckets[idx].0 != nr {
            self.buckets[idx] = (nr, 0, prev_ms);
        }
        self.buckets[idx].1 += delta;
        self.buckets[idx].2 = self.buckets[idx].2.min(prev_ms);
    }

    /// Values per second over the window ending at `now_ms`; `None` until at least one
    /// bucket's worth of time has been observed.
    pub fn per_second(&self, now_ms: i64) -> Option<f64> {
        let nr = now_ms.div_euclid(self.bucket_ms);
        let oldest = nr - self.buckets.len() as i64 + 1;
        let live = self
            .buckets
            .iter()
            .filter(|(b, _, _)| *b >= oldest && *b <= nr);
        let (count, from) = live.fold((0u64, i64::MAX), |(c, f), (_, n, s)| (c + n, f.min(*s)));
        let span_ms = if from == i64::MAX {
            // No increase observed inside the window: the rate is zero if we have been
            // watching for a whole window, unknown otherwise.
            let (first_seen, _) = self.last?;
            if now_ms - first_seen >= 0 && self.buckets.iter().any(|(b, _, _)| *b != i64::MIN) {
                return Some(0.0);
            }
            return None;
        } else {
            // An observation interval that began before the window counts only from
            // the window's start (plus one bucket of slack for its partial first part).
            now_ms - from.max((oldest - 1) * self.bucket_ms)
        };
        if span_ms < self.bucket_ms {
            return None;
        }
        Some(count as f64 * 1000.0 / span_ms as f64)
    }
}

/// Per-sequence sizing policy (catalog columns).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepPolicy {
    /// Step used until a rate is known.
    pub step: u64,
    pub min_step: u64,
    pub max_step: u64,
    /// Seconds of traffic one segment should cover.
    pub buffer_seconds: f64,
}

/// How much the step grows per refill while segments are used up faster than they
/// arrive and no rate is known yet (cold start). Leaf doubles its step; we grow by 4
/// because a burst from one backend can use a segment of 100 in microseconds, and the
/// worker's durable commit takes milliseconds: from step 100, eight refills cover 2M.
pub const COLD_START_GROWTH: u64 = 4;

/// What the worker knows about the previous segment of a slot when it sizes the next.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepHistory {
    /// Size of the previous reservation (0: none yet).
    pub last_step: u64,
    /// A caller had to wait for a segment since the previous reservation: segments are
    /// used up faster than they arrive.
    pub starved: bool,
    /// Milliseconds between the previous reservation and this request: about how long
    /// one segment lasted (`None` before the second reservation).
    pub lasted_ms: Option<u64>,
}

impl StepPolicy {
    /// The size of the next segment:
    /// * rate known: `rate × buffer_seconds`, and while callers starve never below the
    ///   previous step;
    /// * no rate yet (the first second of traffic): while callers starve, the previous
    ///   step × [`COLD_START_GROWTH`]; while a segment lasts less than `buffer_seconds`,
    ///   the previous step × 2 (Leaf's rule); otherwise the configured step, or the
    ///   previous step if larger;
    ///
    /// always clamped to `[min_step, max_step]`.
    pub fn next_step(&self, rate_per_s: Option<f64>, history: StepHistory) -> u64 {
        let lo = self.min_step.clamp(1, MAX_SEGMENT_LEN);
        let hi = self.max_step.clamp(lo, MAX_SEGMENT_LEN);
        let last = history.last_step.min(MAX_SEGMENT_LEN);
        let wanted = match rate_per_s {
            Some(r) if r.is_finite() && r > 0.0 => {
                let w = (r * self.buffer_seconds.max(0.0)).ceil();
                let by_rate = if w >= MAX_SEGMENT_LEN as f64 {
                    MAX_SEGMENT_LEN
                } else {
                    w as u64
                };
                if history.starved {
                    by_rate.max(last)
                } else {
                    by_rate
                }
            }
            _ if history.starved => self
                .step
                .max(last.saturating_mul(COLD_START_GROWTH).min(MAX_SEGMENT_LEN)),
            _ if history
                .lasted_ms
                .is_some_and(|ms| (ms as f64) < self.buffer_seconds * 1000.0) =>
            {
                self.step.max(last.saturating_mul(2).min(MAX_SEGMENT_LEN))
            }
            _ => self.step.max(last),
        };
        wanted.clamp(lo, hi)
    }
}

/// Why a reservation cannot be made (maps to SQLSTATE 2200H).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exhausted {
    pub max_id: i64,
    pub max_value: i64,
}

impl std::fmt::Display for Exhausted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "sequence reached its maximum value {} (high-water mark {})",
            self.max_value, self.max_id
        )
    }
}

/// The next segment after high-water mark `max_id`: `[max_id+1, min(max_id+step,
/// max_value)]`, as `(first, last)`; the new high-water mark is `last`.
pub fn reserve(max_id: i64, max_value: i64, step: u64) -> Result<(i64, i64), Exhausted> {
    if max_id >= max_value || step == 0 {
        return Err(Exhausted { max_id, max_value });
    }
    let room = (max_value as i128 - max_id as i128) as u128;
    let take = (step as u128).min(room) as i64;
    Ok((max_id + 1, max_id + take))
}

/// Why an exact bulk reservation cannot be made: fewer than `wanted` values are left
/// before `max_value` (maps to SQLSTATE 2200H; nothing is reserved).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotEnoughLeft {
    pub wanted: u64,
    pub left: u64,
}

/// An exact range of `n` values after high-water mark `max_id`, for one bulk request:
/// `[max_id+1, max_id+n]`, or an error (reserving nothing) if fewer than `n` are left.
pub fn reserve_exact(max_id: i64, max_value: i64, n: u64) -> Result<(i64, i64), NotEnoughLeft> {
    let left = (max_value as i128 - max_id as i128).max(0) as u64;
    if n == 0 || n > left {
        return Err(NotEnoughLeft { wanted: n, left });
    }
    Ok((max_id + 1, max_id + n as i64))
}

/// Offset inside a segment of `len` values at which the standby should be requested:
/// `floor(len × threshold)`, within `0..len`.
pub fn preload_offset(len: u64, threshold: f64) -> u64 {
    if len == 0 {
        return 0;
    }
    let t = if threshold.is_finite() {
        threshold.clamp(0.0, 1.0)
    } else {
        0.0
    };
    ((len as f64 * t) as u64).min(len - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::Arc;

    #[test]
    fn cold_start_burst_needs_few_refills() {
        // Defaults of create_sequence('a', step => 100): min_step = step, max_step = 1M.
        let p = StepPolicy {
            step: 100,
            min_step: 100,
            max_step: 1_000_000,
            buffer_seconds: 30.0,
        };
        let (mut served, mut refills, mut last) = (0u64, 0, 0u64);
        while served < 2_000_000 {
            // The first segments are used up before the next arrives; later ones arrive
            // in time but last milliseconds.
            last = p.next_step(
                None,
                StepHistory {
                    last_step: last,
                    starved: (1..5).contains(&refills),
                    lasted_ms: (refills > 0).then_some(2),
                },
            );
            served += last;
            refills += 1;
        }
        assert!(refills <= 12, "{refills} refills for a 2M burst");
        assert!(last <= 1_000_000);
    }

    #[test]
    fn exact_reservations() {
        assert_eq!(
            reserve_exact(0, i64::MAX, 100_000_000_000),
            Ok((1, 100_000_000_000))
        );
        assert_eq!(reserve_exact(10, 20, 10), Ok((11, 20)));
        assert_eq!(
            reserve_exact(10, 20, 11),
            Err(NotEnoughLeft {
                wanted: 11,
                left: 10
            })
        );
        assert_eq!(
            reserve_exact(0, i64::MAX, u64::MAX),
            Err(NotEnoughLeft {
                wanted: u64::MAX,
                left: i64::MAX as u64
            })
        );
        assert_eq!(
            reserve_exact(20, 20, 1),
            Err(NotEnoughLeft { wanted: 1, left: 0 })
        );
        assert!(
            reserve_exact(5, 20, 0).is_err(),
            "an empty request reserves nothing"
        );
    }

    fn drain(chain: &SegmentChain) -> Vec<u64> {
        let mut out = vec![];
        while let Take::Got { first, .. } = chain.take_one() {
            out.push(first);
        }
        out
    }

    #[test]
    fn empty_chain_asks_for_a_refill() {
        let c = SegmentChain::new();
        assert!(matches!(c.take_one(), Take::Empty { epoch: 0 }));
        assert!(c.needs_standby());
        assert_eq!(c.switch_to_standby(0), Switch::NoStandby);
        assert!(c.publish_standby(100, 3, 1));
        assert!(
            !c.publish_standby(200, 3, 1),
            "a second standby must be refused"
        );
        assert_eq!(c.switch_to_standby(0), Switch::Switched);
        assert_eq!(
            c.take_one(),
            Take::Got {
                first: 100,
                count: 1,
                preload: false
            }
        );
        assert_eq!(
            c.take_one(),
            Take::Got {
                first: 101,
                count: 1,
                preload: true
            }
        );
        assert_eq!(
            c.take_one(),
            Take::Got {
                first: 102,
                count: 1,
                preload: false
            }
        );
        assert!(matches!(c.take_one(), Take::Empty { epoch: 1 }));
    }

    #[test]
    fn every_boundary_of_small_segments() {
        // Exhaustive over segment lengths, thresholds and the point at which the
        // standby arrives: values come out in order, once, with one preload signal.
        for len in 1..=6u64 {
            for pre in 0..len {
                for arrive_after in 0..=len {
                    let c = SegmentChain::new();
                    c.publish_standby(10, len, pre);
                    assert_eq!(c.switch_to_standby(0), Switch::Switched);
                    let mut got = vec![];
                    let mut preloads = 0;
                    let mut published = false;
                    loop {
                        if got.len() as u64 == arrive_after && !published {
                            assert!(c.publish_standby(1000, len, pre));
                            published = true;
                        }
                        match c.take_one() {
                            Take::Got { first, preload, .. } => {
                                preloads += preload as u32;
                                got.push(first);
                            }
                            Take::Empty { epoch } => {
                                if !published {
                                    assert_eq!(c.switch_to_standby(epoch), Switch::NoStandby);
                                    assert!(c.publish_standby(1000, len, pre));
                                }
                                assert_eq!(c.switch_to_standby(epoch), Switch::Switched);
                                break;
                            }
                        }
                    }
                    assert_eq!(got, (10..10 + len).collect::<Vec<_>>());
                    assert_eq!(preloads, 1);
                    assert_eq!(drain(&c), (1000..1000 + len).collect::<Vec<_>>());
                }
            }
        }
    }

    #[test]
    fn take_many_never_overshoots_and_signals_preload_once() {
        let c = SegmentChain::new();
        c.publish_standby(1, 10, 4);
        c.switch_to_standby(0);
        assert_eq!(
            c.take_many(3),
            Take::Got {
                first: 1,
                count: 3,
                preload: false
            }
        );
        assert_eq!(
            c.take_many(3),
            Take::Got {
                first: 4,
                count: 3,
                preload: true
            }
        );
        assert_eq!(
            c.take_many(30),
            Take::Got {
                first: 7,
                count: 4,
                preload: false
            }
        );
        assert!(matches!(c.take_many(1), Take::Empty { .. }));
        assert_eq!(c.snapshot().used, 10);
    }

    #[test]
    fn switch_refuses_while_values_remain() {
        let c = SegmentChain::new();
        c.publish_standby(1, 2, 0);
        c.switch_to_standby(0);
        c.publish_standby(3, 2, 0);
        assert_eq!(c.switch_to_standby(1), Switch::NotExhausted);
        assert_eq!(
            c.switch_to_standby(0),
            Switch::Switched,
            "stale epoch: already switched"
        );
    }

    #[test]
    fn reset_forgets_segments_and_keeps_epochs_growing() {
        let c = SegmentChain::new();
        c.publish_standby(1, 5, 0);
        c.switch_to_standby(0);
        c.take_one();
        let before = c.snapshot().epoch;
        c.reset();
        let snap = c.snapshot();
        assert!(snap.epoch > before);
        assert_eq!(snap.current, None);
        assert_eq!(snap.standby, None);
        assert!(matches!(c.take_one(), Take::Empty { .. }));
        assert!(c.publish_standby(50, 1, 0));
        assert_eq!(c.switch_to_standby(snap.epoch), Switch::Switched);
        assert_eq!(drain(&c), vec![50]);
    }

    #[test]
    fn epochs_wrap_around_safely() {
        let c = SegmentChain::new();
        let mut expected = 0u64;
        for _ in 0..70_000u32 {
            c.publish_standby(expected, 2, 0);
            let Take::Empty { epoch } = c.take_one() else {
                panic!("segment not used up")
            };
            assert_eq!(c.switch_to_standby(epoch), Switch::Switched);
            assert_eq!(drain(&c), vec![expected, expected + 1]);
            expected += 2;
        }
    }

    #[test]
    fn concurrent_takers_never_see_a_value_twice() {
        // 8 threads take values while a refiller publishes standbys on demand, like
        // the worker does; a mutex plays the chain lock. Small segments maximise switches.
        let chain = Arc::new(SegmentChain::new());
        let lock = Arc::new(std::sync::Mutex::new(0u64)); // next base to reserve
        let per_thread = 50_000usize;
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let chain = chain.clone();
                let lock = lock.clone();
                std::thread::spawn(move || {
                    let mut mine = Vec::with_capacity(per_thread);
                    let mut last = None;
                    while mine.len() < per_thread {
                        let take = if mine.len() % 7 == 0 {
                            chain.take_many(3)
                        } else {
                            chain.take_one()
                        };
                        match take {
                            Take::Got { first, count, .. } => {
                                for v in first..first + count {
                                    if let Some(l) = last {
                                        assert!(v > l, "values from one chain must increase");
                                    }
                                    last = Some(v);
                                    mine.push(v);
                                }
                            }
                            Take::Empty { epoch } => {
                                let mut next = lock.lock().unwrap();
                                if chain.switch_to_standby(epoch) == Switch::NoStandby {
                                    chain.publish_standby(*next, 17, 4);
                                    *next += 17;
                                    chain.switch_to_standby(epoch);
                                }
                            }
                        }
                    }
                    mine
                })
            })
            .collect();
        let mut all = HashSet::new();
        for h in handles {
            for v in h.join().unwrap() {
                assert!(all.insert(v), "duplicate value {v}");
            }
        }
        assert!(all.len() >= 8 * per_thread);
    }

    #[test]
    fn striped_counter_sums_all_stripes() {
        let c = StripedCounter::new();
        for who in 0..100 {
            c.add(who, 2);
        }
        assert_eq!(c.sum(), 200);
        c.clear();
        assert_eq!(c.sum(), 0);
    }

    #[test]
    fn rate_meter_with_an_injected_clock() {
        let mut m = RateMeter::new(1000, 10);
        assert_eq!(m.per_second(0), None);
        m.observe(0, 0);
        assert_eq!(m.per_second(500), None, "less than one bucket of history");
        // 1000 values per second for 20 seconds.
        for s in 1..=20 {
            m.observe(s * 1000, (s * 1000) as u64);
        }
        let r = m.per_second(20_000).unwrap();
        assert!((900.0..=1100.0).contains(&r), "rate {r}");
        // Traffic stops: after the window the rate decays to zero.
        m.observe(40_000, 20_000);
        assert_eq!(m.per_second(40_000), Some(0.0));
        // A burst of 50k in one second.
        m.observe(41_000, 70_000);
        let r = m.per_second(41_000).unwrap();
        assert!(r > 4_000.0, "burst rate {r}");
    }

    #[test]
    fn step_policy_clamps() {
        const H0: StepHistory = StepHistory {
            last_step: 0,
            starved: false,
            lasted_ms: None,
        };
        let p = StepPolicy {
            step: 1000,
            min_step: 100,
            max_step: 50_000,
            buffer_seconds: 10.0,
        };
        assert_eq!(p.next_step(None, H0), 1000);
        assert_eq!(p.next_step(Some(1.0), H0), 100);
        assert_eq!(p.next_step(Some(2_000.0), H0), 20_000);
        assert_eq!(p.next_step(Some(1e9), H0), 50_000);
        assert_eq!(p.next_step(Some(f64::NAN), H0), 1000);
        let starved = |last_step| StepHistory {
            last_step,
            starved: true,
            lasted_ms: None,
        };
        assert_eq!(
            p.next_step(None, starved(1000)),
            4000,
            "cold start grows x4"
        );
        assert_eq!(
            p.next_step(None, starved(40_000)),
            50_000,
            "bounded by max_step"
        );
        assert_eq!(
            p.next_step(Some(1.0), starved(30_000)),
            30_000,
            "a starving slot never shrinks"
        );
        let lasted = |last_step, ms| StepHistory {
            last_step,
            starved: false,
            lasted_ms: Some(ms),
        };
        assert_eq!(
            p.next_step(None, lasted(3_000, 20_000)),
            3_000,
            "no rate yet, a segment lasts the buffer: keep the grown step"
        );
        assert_eq!(
            p.next_step(None, lasted(3_000, 50)),
            6_000,
            "no rate yet, a segment lasts less than the buffer: double it (Leaf)"
        );
        let fixed = StepPolicy {
            step: 7,
            min_step: 7,
            max_step: 7,
            buffer_seconds: 60.0,
        };
        assert_eq!(fixed.next_step(Some(1e6), starved(1 << 30)), 7);
        let silly = StepPolicy {
            step: 0,
            min_step: 0,
            max_step: 0,
            buffer_seconds: -1.0,
        };
        assert_eq!(silly.next_step(None, H0), 1);
    }

    #[test]
    fn reservations_stop_at_the_maximum() {
        assert_eq!(reserve(0, i64::MAX, 1000), Ok((1, 1000)));
        assert_eq!(reserve(990, 1000, 100), Ok((991, 1000)));
        assert_eq!(
            reserve(1000, 1000, 100),
            Err(Exhausted {
                max_id: 1000,
                max_value: 1000
            })
        );
        assert_eq!(
            reserve(i64::MAX - 5, i64::MAX, 1000),
            Ok((i64::MAX - 4, i64::MAX))
        );
        assert!(reserve(i64::MAX, i64::MAX, 1).is_err());
        assert_eq!(reserve(-1, 10, 1), Ok((0, 0)));
    }

    #[test]
    fn preload_offsets() {
        assert_eq!(preload_offset(1000, 0.1), 100);
        assert_eq!(preload_offset(1, 0.9), 0);
        assert_eq!(preload_offset(10, 1.0), 9);
        assert_eq!(preload_offset(10, -3.0), 0);
        assert_eq!(preload_offset(10, f64::NAN), 0);
        assert_eq!(preload_offset(0, 0.5), 0);
    }
}
