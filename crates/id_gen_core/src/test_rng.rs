//! The deterministic generator of the crate's property tests (test builds only).
//!
//! xorshift64*: tiny, needs no crate, and repeats exactly from a seed, so a failing
//! property test fails the same way on every run and every machine.

/// xorshift64* over a non-zero seed: `XorShift(seed)`.
pub(crate) struct XorShift(pub(crate) u64);

impl XorShift {
    /// The next 64 bits.
    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value in `0 .. n` (n > 0).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A value in `lo ..= hi` (lo ≤ hi, the span below 2^63).
    pub(crate) fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }
}
