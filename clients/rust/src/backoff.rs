//! Retry backoff: `min(base * 2^attempt, max)`, jittered down to between half and all of it
//! (protocol §4), from a tiny lock-free xorshift generator (no `rand` dependency).
//!
//! Invariants: a delay is never longer than `max` nor shorter than half the capped bound;
//! the arithmetic saturates, so huge attempt numbers cannot overflow.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The un-jittered delay of retry number `attempt` (0-based): `min(base * 2^attempt, max)`.
pub fn backoff_bound(attempt: u32, base: Duration, max: Duration) -> Duration {
    let factor = 1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX);
    base.saturating_mul(factor).min(max)
}

/// The bound jittered by `random`: uniformly in `[bound / 2, bound]`.
pub fn jittered(bound: Duration, random: u64) -> Duration {
    let nanos = bound.as_nanos().min(u64::MAX as u128) as u64;
    let half = nanos / 2;
    let span = nanos - half; // the upper half, inclusive of the bound
    let extra = if span == 0 { 0 } else { random % (span + 1) };
    Duration::from_nanos(half + extra)
}

/// A shared xorshift64 generator; good enough for jitter, never for anything secret.
#[derive(Debug)]
pub struct Jitter(AtomicU64);

impl Jitter {
    /// Seeded from the clock and an address, so two routers do not retry in lockstep.
    pub fn new() -> Self {
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x9E37_79B9_7F4A_7C15);
        let local = 0u8;
        let addr = &local as *const u8 as usize as u64;
        Jitter(AtomicU64::new((t ^ addr.rotate_left(32)) | 1))
    }

    /// Next pseudo-random value.
    pub fn next(&self) -> u64 {
        let step = |mut x: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let previous = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |x| Some(step(x)))
            .unwrap_or(1);
        step(previous)
    }

    /// The jittered delay of retry number `attempt`.
    pub fn delay(&self, attempt: u32, base: Duration, max: Duration) -> Duration {
        jittered(backoff_bound(attempt, base, max), self.next())
    }
}

impl Default for Jitter {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: Duration = Duration::from_millis(5);
    const MAX: Duration = Duration::from_millis(200);

    #[test]
    fn bound_doubles_then_caps() {
        let ms = |a| backoff_bound(a, BASE, MAX).as_millis();
        assert_eq!(
            (0..8).map(ms).collect::<Vec<_>>(),
            vec![5, 10, 20, 40, 80, 160, 200, 200]
        );
        assert_eq!(ms(31), 200);
        assert_eq!(ms(u32::MAX), 200);
        assert_eq!(
            backoff_bound(u32::MAX, Duration::MAX, Duration::MAX),
            Duration::MAX
        );
        assert_eq!(backoff_bound(3, Duration::ZERO, MAX), Duration::ZERO);
    }

    #[test]
    fn jitter_stays_within_half_and_all_of_the_bound() {
        let j = Jitter::new();
        for attempt in 0..40 {
            let bound = backoff_bound(attempt, BASE, MAX);
            for _ in 0..200 {
                let d = j.delay(attempt, BASE, MAX);
                assert!(
                    d <= bound && d >= bound / 2,
                    "{d:?} outside [{:?}, {bound:?}]",
                    bound / 2
                );
                assert!(d <= MAX);
            }
        }
        assert_eq!(jittered(Duration::ZERO, 12345), Duration::ZERO);
        assert_eq!(
            jittered(Duration::from_nanos(10), 0),
            Duration::from_nanos(5)
        );
        assert_eq!(
            jittered(Duration::from_nanos(10), 5),
            Duration::from_nanos(10)
        );
    }

    #[test]
    fn generator_moves_and_spreads() {
        let j = Jitter::new();
        let values: Vec<u64> = (0..1000).map(|_| j.next()).collect();
        let mut sorted = values.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), values.len());
        let d: Vec<Duration> = (0..1000).map(|_| j.delay(6, BASE, MAX)).collect();
        assert!(d.iter().any(|x| *x < Duration::from_millis(150)));
        assert!(d.iter().any(|x| *x > Duration::from_millis(150)));
    }
}
