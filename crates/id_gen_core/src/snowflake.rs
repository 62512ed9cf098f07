//! Snowflake-style time-ordered IDs (seeds 001, 002, 004) that never repeat when the
//! clock goes backwards, with an optional owner gene in the low bits (seed 003, 基因法).
//!
//! Layout, high bit to low bit: `0 │ time │ node │ seq │ gene`, where `time` is the
//! milliseconds since the layout's epoch, `node` the generator's node number, `seq` the
//! per-millisecond sequence and `gene` (0 bits unless asked for) the owner's remainder
//! modulo `2^gene_bits`. The default is Twitter's 41/10/12 with epoch 2020-01-01T00:00:00Z,
//! good until 2089-09-06T15:47:35.551Z.
//!
//! What it holds: [`SnowflakeLayout`] (validated bit split, `compose`/`decompose`) and
//! the generator state machine [`SnowflakeState`], which is pure: the wall clock is passed
//! in as `now_ms`, so tests inject stalling and backward-jumping clocks.
//!
//! Invariants kept by [`SnowflakeState`]:
//! * **Strictly increasing IDs** from one state (one node): every ID is greater than the
//!   previous one, so two IDs from one node are never equal, and IDs of different nodes
//!   differ in the node bits.
//! * **Logical clock instead of repeats.** The timestamp put in an ID is
//!   `max(now_ms, last_ms)`, or `last_ms + 1` when the sequence of `last_ms` is used up.
//!   Classic implementations either refuse when the clock goes back (seed 001's
//!   `InvalidSystemClock`) or busy-wait; this one keeps issuing from its own clock as long
//!   as that clock is at most `max_lead_ms` ahead of the wall clock, and only then fails
//!   with [`SnowflakeError::ClockBehind`] naming the skew. A failed call changes nothing.
//! * **Restarts never repeat** if the SQL layer follows the high-water protocol: never
//!   issue a timestamp above a *durably persisted* high-water mark
//!   ([`SnowflakeState::next_within`] enforces it), move the mark ahead in steps of
//!   `margin_ms` when [`SnowflakeState::needs_persist`] says so (a segment reservation of
//!   time, like the 号段 scheme reserves values), and after a restart start from
//!   [`SnowflakeState::resume`] with the persisted mark: every new ID then carries a
//!   timestamp strictly above any timestamp used before the crash, even if the clock was
//!   set back in between.
//! * Nothing panics on user input; all arithmetic is checked.
//!
//! With a gene (`gene_bits > 0`) the sequence is shifted *above* the gene rather than
//! having its low bits overwritten (which is what made seed 003's variant able to repeat):
//! uniqueness and order come from `time │ node │ seq` alone, and `id & (2^g - 1)` is the
//! owner's `rem_euclid(2^g)` — see [`crate::genemod`] for the negative-owner convention.
//! The price is that a node issues `2^seq_bits` IDs per millisecond in total, shared by
//! all owners.

use std::fmt;

/// Default epoch: 2020-01-01T00:00:00Z in unix milliseconds. An epoch near the present
/// gives the most years of IDs (seed 004: "时间基点尽量贴近当前时间").
pub const DEFAULT_EPOCH_MS: i64 = 1_577_836_800_000;
/// Default bits of the millisecond timestamp (about 69.7 years).
pub const DEFAULT_TIME_BITS: u32 = 41;
/// Default bits of the node number (1024 nodes).
pub const DEFAULT_NODE_BITS: u32 = 10;
/// Default bits of the per-millisecond sequence (4096 IDs per ms per node).
pub const DEFAULT_SEQ_BITS: u32 = 12;
/// The ID is a positive bigint: 63 usable bits.
pub const TOTAL_BITS: u32 = 63;
/// Fewest time bits: 2^35 ms is about 397 days; fewer would run out within a year.
pub const MIN_TIME_BITS: u32 = 35;
/// Most node bits (about a million nodes).
pub const MAX_NODE_BITS: u32 = 20;
/// Fewest sequence bits: at least two IDs per millisecond per node.
pub const MIN_SEQ_BITS: u32 = 1;
/// Most gene bits, as for [`crate::genemod`] (65536 shards).
pub const MAX_GENE_BITS: u32 = 16;
/// Latest accepted epoch: 9999-12-31T23:59:59.999Z.
pub const MAX_EPOCH_MS: i64 = 253_402_300_799_999;

/// Why a Snowflake ID could not be built, decoded or issued.
///
/// Each variant names the SQLSTATE the SQL layer should raise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnowflakeError {
    /// The bit widths do not add up to 63. SQLSTATE `22023` (invalid_parameter_value).
    BitsDoNotAddUp {
        time_bits: u32,
        node_bits: u32,
        seq_bits: u32,
        gene_bits: u32,
    },
    /// Fewer than 35 time bits. SQLSTATE `22023`.
    TimeBitsTooFew { time_bits: u32 },
    /// More than 20 node bits. SQLSTATE `22023`.
    NodeBitsTooMany { node_bits: u32 },
    /// No sequence bits. SQLSTATE `22023`.
    SeqBitsTooFew { seq_bits: u32 },
    /// More than 16 gene bits. SQLSTATE `22023`.
    GeneBitsTooMany { gene_bits: u32 },
    /// Epoch before 1970 or after 9999. SQLSTATE `22023`.
    EpochOutOfRange { epoch_ms: i64 },
    /// `max_lead_ms` is negative. SQLSTATE `22023`.
    InvalidMaxLead { max_lead_ms: i64 },
    /// The node number does not fit the node bits. SQLSTATE `22023`.
    NodeOutOfRange { node: i64, max: i64 },
    /// A sequence value given to `compose` does not fit the sequence bits. SQLSTATE
    /// `22003` (numeric_value_out_of_range).
    SeqOutOfRange { seq: i64, max: i64 },
    /// An owner was given but the layout has no gene bits. SQLSTATE `22023`.
    NoGeneBits,
    /// The layout has gene bits but no owner was given. SQLSTATE `22023`.
    OwnerRequired { gene_bits: u32 },
    /// Issuing now would put a timestamp `skew_ms` ahead of the wall clock, more than the
    /// tolerated `max_lead_ms`: the clock was set back (or IDs were drawn faster than
    /// `2^seq_bits` per ms for a long time). Nothing was issued; retrying after
    /// `skew_ms - max_lead_ms` ms succeeds if the clock runs normally. SQLSTATE `55000`
    /// (object_not_in_prerequisite_state: the generator cannot serve until the clock
    /// catches up; retryable).
    ClockBehind { skew_ms: i64, max_lead_ms: i64 },
    /// The timestamp is before the layout's epoch (clock or epoch misconfigured).
    /// SQLSTATE `22008` (datetime_field_overflow).
    BeforeEpoch { unix_ms: i64, epoch_ms: i64 },
    /// The timestamp is past the last millisecond the time bits can hold: this layout is
    /// used up. SQLSTATE `2200H` (sequence_generator_limit_exceeded).
    TimeOverflow { unix_ms: i64, end_ms: i64 },
    /// The next ID would carry a timestamp above the persisted high-water mark. The SQL
    /// layer handles it — durably persist `needed_ms + margin_ms` and retry — so it should
    /// not reach users; if it does, SQLSTATE `55000`.
    HighWaterReached { needed_ms: i64, high_water_ms: i64 },
    /// Snowflake IDs are never negative. SQLSTATE `22003` (numeric_value_out_of_range).
    NegativeId { id: i64 },
}

impl SnowflakeError {
    /// The SQLSTATE the SQL layer should raise for this error.
    pub fn sqlstate(&self) -> &'static str {
        use SnowflakeError::*;
        match self {
            BitsDoNotAddUp { .. }
            | TimeBitsTooFew { .. }
            | NodeBitsTooMany { .. }
            | SeqBitsTooFew { .. }
            | GeneBitsTooMany { .. }
            | EpochOutOfRange { .. }
            | InvalidMaxLead { .. }
            | NodeOutOfRange { .. }
            | NoGeneBits
            | OwnerRequired { .. } => "22023",
            SeqOutOfRange { .. } | NegativeId { .. } => "22003",
            ClockBehind { .. } | HighWaterReached { .. } => "55000",
            BeforeEpoch { .. } => "22008",
            TimeOverflow { .. } => "2200H",
        }
    }

    /// A hint for the DBA: what to do about it.
    pub fn hint(&self) -> Option<String> {
        use SnowflakeError::*;
        match self {
            BitsDoNotAddUp { .. } | TimeBitsTooFew { .. } | NodeBitsTooMany { .. }
            | SeqBitsTooFew { .. } | GeneBitsTooMany { .. } => Some(format!(
                "time + node + sequence + gene bits must be {TOTAL_BITS}, with at least \
                 {MIN_TIME_BITS} time bits, at most {MAX_NODE_BITS} node bits, at least \
                 {MIN_SEQ_BITS} sequence bit and at most {MAX_GENE_BITS} gene bits; \
                 the default is {DEFAULT_TIME_BITS}/{DEFAULT_NODE_BITS}/{DEFAULT_SEQ_BITS}"
            )),
            ClockBehind { skew_ms, max_lead_ms } => Some(format!(
                "the system clock was set back or IDs are drawn faster than the layout allows; \
                 retry in {} ms, check NTP, or raise the tolerated lead",
                skew_ms.saturating_sub(*max_lead_ms).max(1)
            )),
            TimeOverflow { .. } => Some(
                "this layout has run out of time bits; new IDs need a layout with a later epoch or more time bits"
                    .into(),
            ),
            BeforeEpoch { .. } => {
                Some("the system clock reads earlier than the layout's epoch; check the clock and the epoch".into())
            }
            HighWaterReached { .. } => Some(
                "persist a higher high-water mark (needed_ms + margin) durably, then retry".into(),
            ),
            _ => None,
        }
    }
}

impl fmt::Display for SnowflakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use SnowflakeError::*;
        match self {
            BitsDoNotAddUp { time_bits, node_bits, seq_bits, gene_bits } => write!(
                f,
                "snowflake layout bits do not add up: {time_bits} time + {node_bits} node + {seq_bits} sequence + {gene_bits} gene = {} (must be {TOTAL_BITS})",
                u64::from(*time_bits) + u64::from(*node_bits) + u64::from(*seq_bits) + u64::from(*gene_bits)
            ),
            TimeBitsTooFew { time_bits } => write!(
                f,
                "snowflake layout has {time_bits} time bits; at least {MIN_TIME_BITS} are needed (2^{MIN_TIME_BITS} ms is about 397 days)"
            ),
            NodeBitsTooMany { node_bits } => write!(
                f,
                "snowflake layout has {node_bits} node bits; at most {MAX_NODE_BITS} are allowed"
            ),
            SeqBitsTooFew { seq_bits } => write!(
                f,
                "snowflake layout has {seq_bits} sequence bits; at least {MIN_SEQ_BITS} is needed"
            ),
            GeneBitsTooMany { gene_bits } => write!(
                f,
                "snowflake layout has {gene_bits} gene bits; at most {MAX_GENE_BITS} are allowed"
            ),
            EpochOutOfRange { epoch_ms } => write!(
                f,
                "snowflake epoch {epoch_ms} ms is out of range (allowed: 0 .. {MAX_EPOCH_MS}, i.e. 1970 .. 9999)"
            ),
            InvalidMaxLead { max_lead_ms } => write!(
                f,
                "tolerated clock lead {max_lead_ms} ms is negative"
            ),
            NodeOutOfRange { node, max } => {
                write!(f, "snowflake node {node} is out of range (allowed: 0 .. {max})")
            }
            SeqOutOfRange { seq, max } => {
                write!(f, "snowflake sequence {seq} is out of range (allowed: 0 .. {max})")
            }
            NoGeneBits => f.write_str("an owner was given but this snowflake layout has no gene bits"),
            OwnerRequired { gene_bits } => write!(
                f,
                "this snowflake layout keeps a {gene_bits}-bit owner gene in its low bits; an owner is required"
            ),
            ClockBehind { skew_ms, max_lead_ms } => write!(
                f,
                "system clock is {skew_ms} ms behind the snowflake generator's clock (tolerated: {max_lead_ms} ms); no id was issued"
            ),
            BeforeEpoch { unix_ms, epoch_ms } => write!(
                f,
                "timestamp {unix_ms} ms is before the snowflake epoch {epoch_ms} ms"
            ),
            TimeOverflow { unix_ms, end_ms } => write!(
                f,
                "timestamp {unix_ms} ms is past the end of this snowflake layout ({end_ms} ms since 1970-01-01 UTC is its last millisecond)"
            ),
            HighWaterReached { needed_ms, high_water_ms } => write!(
                f,
                "snowflake timestamp {needed_ms} ms is above the persisted high-water mark {high_water_ms} ms"
            ),
            NegativeId { id } => write!(f, "id {id} is negative; snowflake ids are never negative"),
        }
    }
}

impl std::error::Error for SnowflakeError {}

/// The split of the 63 usable bits and the epoch. Only constructible through the
/// validating constructors, so every method can rely on the widths being sane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SnowflakeLayout {
    time_bits: u32,
    node_bits: u32,
    seq_bits: u32,
    gene_bits: u32,
    epoch_ms: i64,
}

/// The fields of a decoded ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SnowflakeParts {
    /// Timestamp in unix milliseconds (epoch already added back).
    pub unix_ms: i64,
    pub node: i64,
    pub seq: i64,
    /// The owner gene (low bits); 0 for layouts without gene bits.
    pub gene: i64,
}

impl Default for SnowflakeLayout {
    fn default() -> Self {
        SnowflakeLayout::DEFAULT
    }
}

impl SnowflakeLayout {
    /// 41 time bits, 10 node bits, 12 sequence bits, epoch 2020-01-01T00:00:00Z.
    pub const DEFAULT: SnowflakeLayout = SnowflakeLayout {
        time_bits: DEFAULT_TIME_BITS,
        node_bits: DEFAULT_NODE_BITS,
        seq_bits: DEFAULT_SEQ_BITS,
        gene_bits: 0,
        epoch_ms: DEFAULT_EPOCH_MS,
    };

    /// A layout without gene bits: `time_bits + node_bits + seq_bits` must be 63.
    pub fn new(
        time_bits: u32,
        node_bits: u32,
        seq_bits: u32,
        epoch_ms: i64,
    ) -> Result<Self, SnowflakeError> {
        Self::with_gene(time_bits, node_bits, seq_bits, 0, epoch_ms)
    }

    /// A layout whose low `gene_bits` hold the owner's gene (seed 003):
    /// `time_bits + node_bits + seq_bits + gene_bits` must be 63.
    pub fn with_gene(
        time_bits: u32,
        node_bits: u32,
        seq_bits: u32,
        gene_bits: u32,
        epoch_ms: i64,
    ) -> Result<Self, SnowflakeError> {
        let sum = u64::from(time_bits)
            + u64::from(node_bits)
            + u64::from(seq_bits)
            + u64::from(gene_bits);
        if sum != u64::from(TOTAL_BITS) {
            return Err(SnowflakeError::BitsDoNotAddUp {
                time_bits,
                node_bits,
                seq_bits,
                gene_bits,
            });
        }
        if time_bits < MIN_TIME_BITS {
            return Err(SnowflakeError::TimeBitsTooFew { time_bits });
        }
        if node_bits > MAX_NODE_BITS {
            return Err(SnowflakeError::NodeBitsTooMany { node_bits });
        }
        if seq_bits < MIN_SEQ_BITS {
            return Err(SnowflakeError::SeqBitsTooFew { seq_bits });
        }
        if gene_bits > MAX_GENE_BITS {
            return Err(SnowflakeError::GeneBitsTooMany { gene_bits });
        }
        if !(0..=MAX_EPOCH_MS).contains(&epoch_ms) {
            return Err(SnowflakeError::EpochOutOfRange { epoch_ms });
        }
        Ok(SnowflakeLayout {
            time_bits,
            node_bits,
            seq_bits,
            gene_bits,
            epoch_ms,
        })
    }

    pub fn time_bits(&self) -> u32 {
        self.time_bits
    }
    pub fn node_bits(&self) -> u32 {
        self.node_bits
    }
    pub fn seq_bits(&self) -> u32 {
        self.seq_bits
    }
    pub fn gene_bits(&self) -> u32 {
        self.gene_bits
    }
    pub fn epoch_ms(&self) -> i64 {
        self.epoch_ms
    }

    /// Largest node number.
    pub fn max_node(&self) -> i64 {
        (1i64 << self.node_bits) - 1
    }

    /// Largest per-millisecond sequence value (`2^seq_bits - 1`).
    pub fn max_seq(&self) -> i64 {
        (1i64 << self.seq_bits) - 1
    }

    /// Last unix millisecond the time bits can hold (`epoch + 2^time_bits - 1`).
    pub fn end_ms(&self) -> i64 {
        // time_bits <= 62 and epoch <= MAX_EPOCH_MS, so this cannot overflow.
        self.epoch_ms + ((1i64 << self.time_bits) - 1)
    }

    fn seq_shift(&self) -> u32 {
        self.gene_bits
    }
    fn node_shift(&self) -> u32 {
        self.gene_bits + self.seq_bits
    }
    fn time_shift(&self) -> u32 {
        self.gene_bits + self.seq_bits + self.node_bits
    }

    /// Checks a node number against the node bits.
    pub fn check_node(&self, node: i64) -> Result<(), SnowflakeError> {
        if (0..=self.max_node()).contains(&node) {
            Ok(())
        } else {
            Err(SnowflakeError::NodeOutOfRange {
                node,
                max: self.max_node(),
            })
        }
    }

    /// Checks that a unix-ms timestamp is representable; returns it relative to the epoch.
    fn check_time(&self, unix_ms: i64) -> Result<i64, SnowflakeError> {
        if unix_ms < self.epoch_ms {
            return Err(SnowflakeError::BeforeEpoch {
                unix_ms,
                epoch_ms: self.epoch_ms,
            });
        }
        if unix_ms > self.end_ms() {
            return Err(SnowflakeError::TimeOverflow {
                unix_ms,
                end_ms: self.end_ms(),
            });
        }
        Ok(unix_ms - self.epoch_ms)
    }

    fn check_seq(&self, seq: i64) -> Result<(), SnowflakeError> {
        if (0..=self.max_seq()).contains(&seq) {
            Ok(())
        } else {
            Err(SnowflakeError::SeqOutOfRange {
                seq,
                max: self.max_seq(),
            })
        }
    }

    /// The gene field for an owner, checking that owner and layout agree.
    fn gene_field(&self, owner: Option<i64>) -> Result<i64, SnowflakeError> {
        match (owner, self.gene_bits) {
            (None, 0) => Ok(0),
            (None, gene_bits) => Err(SnowflakeError::OwnerRequired { gene_bits }),
            (Some(_), 0) => Err(SnowflakeError::NoGeneBits),
            (Some(owner), g) => Ok(owner.rem_euclid(1i64 << g)),
        }
    }

    fn assemble(&self, rel_ms: i64, node: i64, seq: i64, gene: i64) -> i64 {
        (rel_ms << self.time_shift())
            | (node << self.node_shift())
            | (seq << self.seq_shift())
            | gene
    }

    /// Builds an ID from a unix-ms timestamp, node and sequence (layouts without gene bits;
    /// a gene layout answers [`SnowflakeError::OwnerRequired`]).
    pub fn compose(&self, unix_ms: i64, node: i64, seq: i64) -> Result<i64, SnowflakeError> {
        self.compose_parts(unix_ms, node, seq, None)
    }

    /// Builds an ID whose low `gene_bits` hold `owner.rem_euclid(2^gene_bits)` (so
    /// `id & (2^g-1) == owner & (2^g-1)`), the sequence shifted above them.
    pub fn compose_with_gene(
        &self,
        unix_ms: i64,
        node: i64,
        seq: i64,
        owner: i64,
    ) -> Result<i64, SnowflakeError> {
        self.compose_parts(unix_ms, node, seq, Some(owner))
    }

    fn compose_parts(
        &self,
        unix_ms: i64,
        node: i64,
        seq: i64,
        owner: Option<i64>,
    ) -> Result<i64, SnowflakeError> {
        let gene = self.gene_field(owner)?;
        self.check_node(node)?;
        self.check_seq(seq)?;
        let rel = self.check_time(unix_ms)?;
        Ok(self.assemble(rel, node, seq, gene))
    }

    /// Splits an ID into timestamp (unix ms), node, sequence and gene.
    pub fn decompose(&self, id: i64) -> Result<SnowflakeParts, SnowflakeError> {
        if id < 0 {
            return Err(SnowflakeError::NegativeId { id });
        }
        let field = |shift: u32, bits: u32| (id >> shift) & ((1i64 << bits) - 1);
        Ok(SnowflakeParts {
            // id >> time_shift < 2^time_bits, so adding the epoch cannot overflow.
            unix_ms: (id >> self.time_shift()) + self.epoch_ms,
            node: field(self.node_shift(), self.node_bits),
            seq: field(self.seq_shift(), self.seq_bits),
            gene: field(0, self.gene_bits),
        })
    }
}

/// The generator state of one node: the timestamp and sequence of the last issued ID.
///
/// The SQL layer keeps one per (layout, node) in shared memory behind a lock; every
/// method taking `&mut self` must run under that lock. Keep using one layout with a
/// state: the state stores absolute unix milliseconds, but its sequence is relative to
/// the layout's `seq_bits`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SnowflakeState {
    /// Timestamp (unix ms) of the last issued ID, or the floor below which nothing may be
    /// issued after [`SnowflakeState::resume`]. `i64::MIN` in a fresh state.
    pub last_ms: i64,
    /// Sequence of the last issued ID within `last_ms`. Any value `>= layout.max_seq()`
    /// means `last_ms` is used up; [`SnowflakeState::new`] and [`SnowflakeState::resume`]
    /// set `u64::MAX`.
    pub seq: u64,
}

impl Default for SnowflakeState {
    fn default() -> Self {
        SnowflakeState::new()
    }
}

impl SnowflakeState {
    /// A state that has issued nothing. Only safe on a node that never issued IDs before
    /// (or whose old IDs are all older than the clock minus `max_lead_ms`); otherwise use
    /// [`SnowflakeState::resume`].
    pub const fn new() -> Self {
        SnowflakeState {
            last_ms: i64::MIN,
            seq: u64::MAX,
        }
    }

    /// The state after a restart, from the durably persisted high-water mark (the largest
    /// value ever persisted, see [`SnowflakeState::needs_persist`]). The whole millisecond
    /// `persisted_high_water_ms` counts as used, so the first new ID carries a timestamp
    /// of at least `persisted_high_water_ms + 1`: strictly above every timestamp issued
    /// before the crash, whatever the clock says now. If the clock was set back by more
    /// than `max_lead_ms`, issuing fails with [`SnowflakeError::ClockBehind`] until the
    /// clock catches up — refusing instead of repeating.
    pub const fn resume(persisted_high_water_ms: i64) -> Self {
        SnowflakeState {
            last_ms: persisted_high_water_ms,
            seq: u64::MAX,
        }
    }

    /// Next ID, without a persisted high-water mark (fine for a node whose state lives as
    /// long as its IDs must be unique, and for tests). See [`SnowflakeState::next_within`]
    /// for the restart-safe form.
    ///
    /// `now_ms` is the wall clock (unix ms); `max_lead_ms` (>= 0) is how far the logical
    /// clock may run ahead of it. With `max_lead_ms = 0` the generator never runs ahead:
    /// a used-up millisecond answers `ClockBehind { skew_ms: 1, .. }` and the caller
    /// sleeps and retries, as classic Snowflake does.
    pub fn next(
        &mut self,
        layout: &SnowflakeLayout,
        node: i64,
        now_ms: i64,
        max_lead_ms: i64,
    ) -> Result<i64, SnowflakeError> {
        self.issue(layout, node, None, now_ms, max_lead_ms, None)
    }

    /// Next ID, never carrying a timestamp above `high_water_ms` (the durably persisted
    /// mark); otherwise [`SnowflakeError::HighWaterReached`] and nothing is issued. Call
    /// [`SnowflakeState::needs_persist`] first and persist what it asks for, and this
    /// never fails that way.
    pub fn next_within(
        &mut self,
        layout: &SnowflakeLayout,
        node: i64,
        now_ms: i64,
        max_lead_ms: i64,
        high_water_ms: i64,
    ) -> Result<i64, SnowflakeError> {
        self.issue(layout, node, None, now_ms, max_lead_ms, Some(high_water_ms))
    }

    /// Next ID of a gene layout: the low `gene_bits` hold `owner.rem_euclid(2^gene_bits)`.
    /// `high_water_ms` as in [`SnowflakeState::next_within`] (`None`: unbounded).
    pub fn next_with_gene(
        &mut self,
        layout: &SnowflakeLayout,
        node: i64,
        owner: i64,
        now_ms: i64,
        max_lead_ms: i64,
        high_water_ms: Option<i64>,
    ) -> Result<i64, SnowflakeError> {
        self.issue(
            layout,
            node,
            Some(owner),
            now_ms,
            max_lead_ms,
            high_water_ms,
        )
    }

    fn issue(
        &mut self,
        layout: &SnowflakeLayout,
        node: i64,
        owner: Option<i64>,
        now_ms: i64,
        max_lead_ms: i64,
        high_water_ms: Option<i64>,
    ) -> Result<i64, SnowflakeError> {
        // Validate everything before touching the state: a failed call issues nothing.
        let gene = layout.gene_field(owner)?;
        layout.check_node(node)?;
        if max_lead_ms < 0 {
            return Err(SnowflakeError::InvalidMaxLead { max_lead_ms });
        }
        let (ts, seq) = if now_ms > self.last_ms {
            (now_ms, 0)
        } else if self.seq < layout.max_seq() as u64 {
            (self.last_ms, self.seq + 1)
        } else {
            // The millisecond is used up: move the logical clock on instead of repeating.
            match self.last_ms.checked_add(1) {
                Some(ts) => (ts, 0),
                None => {
                    return Err(SnowflakeError::TimeOverflow {
                        unix_ms: i64::MAX,
                        end_ms: layout.end_ms(),
                    })
                }
            }
        };
        // ts >= now_ms here; the lead is how far ahead of the wall clock this ID would be.
        let lead = i128::from(ts) - i128::from(now_ms);
        if lead > i128::from(max_lead_ms) {
            let skew_ms = i64::try_from(lead).unwrap_or(i64::MAX);
            return Err(SnowflakeError::ClockBehind {
                skew_ms,
                max_lead_ms,
            });
        }
        if let Some(high_water_ms) = high_water_ms {
            if ts > high_water_ms {
                return Err(SnowflakeError::HighWaterReached {
                    needed_ms: ts,
                    high_water_ms,
                });
            }
        }
        let rel = layout.check_time(ts)?;
        let id = layout.assemble(rel, node, seq as i64, gene);
        self.last_ms = ts;
        self.seq = seq;
        Ok(id)
    }

    /// Whether the persisted high-water mark must move ahead before the next ID, and to
    /// what. The protocol (a reservation of time, like a segment of values):
    ///
    /// * invariant: no ID ever carries a timestamp above the durably persisted mark;
    /// * before issuing, call this; on `Some(v)` durably persist `GREATEST(old, v)` (in a
    ///   committed transaction of its own) and use `v` as `high_water_ms` from then on;
    /// * after a restart, [`SnowflakeState::resume`] from the persisted mark.
    ///
    /// It answers `Some(base + margin_ms)` once fewer than `margin_ms / 2` ms of the
    /// reservation remain beyond `base = max(now_ms, last_ms)`; the value is always above
    /// `persisted_ms`. The next ID's timestamp is at most `base + 1` (`last_ms + 1` when
    /// that millisecond is used up), and `None` means at least one millisecond is left,
    /// so a following [`SnowflakeState::next_within`] never answers `HighWaterReached`.
    /// With a 10 s margin the mark is written about every 5 s of issuing.
    ///
    /// Choose `margin_ms < max_lead_ms`: after a restart the resumed clock is at most
    /// `margin_ms + 1` ahead of a correct wall clock (plus however far the logical clock
    /// ran ahead before the crash), so issuing continues at once. A `margin_ms` below 1
    /// counts as 1.
    pub fn needs_persist(&self, now_ms: i64, persisted_ms: i64, margin_ms: i64) -> Option<i64> {
        let margin = margin_ms.max(1);
        let base = now_ms.max(self.last_ms);
        let headroom = i128::from(persisted_ms) - i128::from(base);
        if headroom * 2 >= i128::from(margin) {
            return None;
        }
        let new_mark = base.saturating_add(margin);
        (new_mark > persisted_ms).then_some(new_mark)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEAD: i64 = 5_000;
    const NOW: i64 = 1_709_164_800_000; // 2024-02-29T00:00:00Z

    use crate::test_rng::XorShift;

    fn default() -> SnowflakeLayout {
        SnowflakeLayout::default()
    }

    #[test]
    fn default_layout() {
        let l = default();
        assert_eq!(
            (l.time_bits(), l.node_bits(), l.seq_bits(), l.gene_bits()),
            (41, 10, 12, 0)
        );
        assert_eq!(l.epoch_ms(), DEFAULT_EPOCH_MS);
        assert_eq!(DEFAULT_EPOCH_MS, 18_262 * 86_400_000); // 2020-01-01: 18262 days after 1970
        assert_eq!(l.end_ms(), 3_776_860_055_551); // 2089-09-06T15:47:35.551Z
        assert_eq!((l.max_node(), l.max_seq()), (1023, 4095));
        assert_eq!(
            SnowflakeLayout::new(41, 10, 12, DEFAULT_EPOCH_MS).unwrap(),
            l
        );
        // Known vector: 1 ms after the epoch, node 1, sequence 1.
        assert_eq!(
            l.compose(DEFAULT_EPOCH_MS + 1, 1, 1).unwrap(),
            (1 << 22) | (1 << 12) | 1
        );
        assert_eq!(l.compose(l.end_ms(), 1023, 4095).unwrap(), i64::MAX);
        assert_eq!(l.compose(DEFAULT_EPOCH_MS, 0, 0).unwrap(), 0);
    }

    #[test]
    fn layout_validation_errors() {
        use SnowflakeError::*;
        let e = SnowflakeLayout::new(41, 10, 13, 0).unwrap_err();
        assert_eq!(
            e,
            BitsDoNotAddUp {
                time_bits: 41,
                node_bits: 10,
                seq_bits: 13,
                gene_bits: 0
            }
        );
        assert!(e.to_string().contains("= 64 (must be 63)"), "{e}");
        assert!(matches!(
            SnowflakeLayout::new(u32::MAX, u32::MAX, 2, 0),
            Err(BitsDoNotAddUp { .. })
        ));
        assert!(matches!(
            SnowflakeLayout::with_gene(41, 10, 12, u32::MAX, 0),
            Err(BitsDoNotAddUp { .. })
        ));
        assert_eq!(
            SnowflakeLayout::new(34, 17, 12, 0),
            Err(TimeBitsTooFew { time_bits: 34 })
        );
        assert_eq!(
            SnowflakeLayout::new(35, 21, 7, 0),
            Err(NodeBitsTooMany { node_bits: 21 })
        );
        assert_eq!(
            SnowflakeLayout::new(53, 10, 0, 0),
            Err(SeqBitsTooFew { seq_bits: 0 })
        );
        assert_eq!(
            SnowflakeLayout::with_gene(40, 0, 6, 17, 0),
            Err(GeneBitsTooMany { gene_bits: 17 })
        );
        assert_eq!(
            SnowflakeLayout::new(41, 10, 12, -1),
            Err(EpochOutOfRange { epoch_ms: -1 })
        );
        assert_eq!(
            SnowflakeLayout::new(41, 10, 12, MAX_EPOCH_MS + 1),
            Err(EpochOutOfRange {
                epoch_ms: MAX_EPOCH_MS + 1
            })
        );
        for e in [
            SnowflakeLayout::new(34, 17, 12, 0).unwrap_err(),
            SnowflakeLayout::new(41, 10, 12, -1).unwrap_err(),
            SnowflakeLayout::new(41, 10, 13, 0).unwrap_err(),
        ] {
            assert_eq!(e.sqlstate(), "22023");
        }
        // Extremes that are valid.
        assert!(SnowflakeLayout::new(62, 0, 1, 0).is_ok());
        assert!(SnowflakeLayout::new(62, 0, 1, MAX_EPOCH_MS).is_ok());
        assert!(SnowflakeLayout::with_gene(35, 0, 12, 16, 0).is_ok());
        assert!(SnowflakeLayout::new(35, 20, 8, 0).is_ok());
        let l = SnowflakeLayout::new(62, 0, 1, MAX_EPOCH_MS).unwrap();
        assert_eq!(l.end_ms(), MAX_EPOCH_MS + (1i64 << 62) - 1);
    }

    #[test]
    fn compose_decompose_round_trips() {
        let layouts = [
            default(),
            SnowflakeLayout::new(41, 5, 17, 1_420_041_600_000).unwrap(), // seed 001's 2015 epoch
            SnowflakeLayout::new(35, 20, 8, 0).unwrap(),
            SnowflakeLayout::new(62, 0, 1, 0).unwrap(),
            SnowflakeLayout::with_gene(41, 10, 8, 4, DEFAULT_EPOCH_MS).unwrap(), // seed 003
            SnowflakeLayout::with_gene(41, 0, 6, 16, DEFAULT_EPOCH_MS).unwrap(),
        ];
        let mut rng = XorShift(42);
        for l in layouts {
            for _ in 0..20_000 {
                let unix_ms =
                    l.epoch_ms() + (rng.next() % ((l.end_ms() - l.epoch_ms()) as u64 + 1)) as i64;
                let node = rng.below(l.max_node() as u64 + 1) as i64;
                let seq = rng.below(l.max_seq() as u64 + 1) as i64;
                let owner = rng.next() as i64;
                let (id, gene) = if l.gene_bits() == 0 {
                    (l.compose(unix_ms, node, seq).unwrap(), 0)
                } else {
                    let g = (1i64 << l.gene_bits()) - 1;
                    (
                        l.compose_with_gene(unix_ms, node, seq, owner).unwrap(),
                        owner & g,
                    )
                };
                assert!(id >= 0);
                assert_eq!(
                    l.decompose(id).unwrap(),
                    SnowflakeParts {
                        unix_ms,
                        node,
                        seq,
                        gene
                    }
                );
            }
        }
    }

    #[test]
    fn compose_errors() {
        use SnowflakeError::*;
        let l = default();
        assert_eq!(
            l.compose(NOW, 1024, 0),
            Err(NodeOutOfRange {
                node: 1024,
                max: 1023
            })
        );
        assert_eq!(
            l.compose(NOW, -1, 0),
            Err(NodeOutOfRange {
                node: -1,
                max: 1023
            })
        );
        assert_eq!(
            l.compose(NOW, 0, 4096),
            Err(SeqOutOfRange {
                seq: 4096,
                max: 4095
            })
        );
        assert_eq!(
            l.compose(NOW, 0, -1),
            Err(SeqOutOfRange { seq: -1, max: 4095 })
        );
        assert_eq!(
            l.compose(DEFAULT_EPOCH_MS - 1, 0, 0),
            Err(BeforeEpoch {
                unix_ms: DEFAULT_EPOCH_MS - 1,
                epoch_ms: DEFAULT_EPOCH_MS
            })
        );
        assert_eq!(
            l.compose(l.end_ms() + 1, 0, 0),
            Err(TimeOverflow {
                unix_ms: l.end_ms() + 1,
                end_ms: l.end_ms()
            })
        );
        assert_eq!(l.compose(i64::MIN, 0, 0).unwrap_err().sqlstate(), "22008");
        assert_eq!(l.compose(i64::MAX, 0, 0).unwrap_err().sqlstate(), "2200H");
        assert_eq!(l.compose_with_gene(NOW, 0, 0, 7), Err(NoGeneBits));
        let g = SnowflakeLayout::with_gene(41, 10, 8, 4, DEFAULT_EPOCH_MS).unwrap();
        assert_eq!(g.compose(NOW, 0, 0), Err(OwnerRequired { gene_bits: 4 }));
        assert_eq!(
            g.compose_with_gene(NOW, 0, 256, 7),
            Err(SeqOutOfRange { seq: 256, max: 255 })
        );
        assert_eq!(l.decompose(-1), Err(NegativeId { id: -1 }));
        assert_eq!(l.decompose(i64::MIN).unwrap_err().sqlstate(), "22003");
    }

    /// Runs `n` calls with a clock driven by `clock`, asserting strict monotonicity.
    fn run_monotonic(n: usize, mut clock: impl FnMut(usize) -> i64) -> (SnowflakeState, i64) {
        let l = default();
        let mut s = SnowflakeState::new();
        let mut prev = -1i64;
        for i in 0..n {
            let now = clock(i);
            let id = s.next(&l, 7, now, i64::MAX).unwrap();
            assert!(id > prev, "call {i}: {id} <= {prev}");
            let parts = l.decompose(id).unwrap();
            assert_eq!(parts.node, 7);
            assert!(parts.unix_ms >= now);
            prev = id;
        }
        (s, prev)
    }

    #[test]
    fn millions_of_calls_with_a_stalled_clock() {
        // 2 million calls at one frozen millisecond: 4096 per logical ms, then the logical
        // clock moves on; no repeats, no errors while the lead is tolerated.
        let n = 2_000_000;
        let (s, last) = run_monotonic(n, |_| NOW);
        let expected_ms = NOW + (n as i64 - 1) / 4096;
        assert_eq!(s.last_ms, expected_ms);
        assert_eq!(default().decompose(last).unwrap().unix_ms, expected_ms);
        assert_eq!(s.seq, ((n - 1) % 4096) as u64);
    }

    #[test]
    fn millions_of_calls_with_an_erratic_clock() {
        // True time creeps and jumps; the wall clock is true time plus an offset that is
        // set back (mostly within the lead, sometimes beyond it) and restored now and then.
        let l = default();
        let mut rng = XorShift(0xC0FFEE);
        let mut s = SnowflakeState::new();
        let (mut truth, mut offset) = (NOW, 0i64);
        let (mut prev, mut issued, mut refused) = (-1i64, 0u32, 0u32);
        for i in 0..3_000_000u32 {
            match rng.below(100_000) {
                0..=9_999 => truth += 1,
                10_000..=10_099 => truth += rng.below(100) as i64,
                10_100..=10_149 => offset -= rng.below(LEAD as u64 / 2) as i64,
                10_150..=10_154 => offset -= LEAD + 1 + rng.below(10_000) as i64,
                10_155..=10_199 => offset = 0,
                _ => {} // stall
            }
            let wall = truth + offset;
            let before = s;
            match s.next(&l, 3, wall, LEAD) {
                Ok(id) => {
                    assert!(id > prev, "call {i}");
                    prev = id;
                    issued += 1;
                }
                Err(SnowflakeError::ClockBehind {
                    skew_ms,
                    max_lead_ms,
                }) => {
                    assert!(skew_ms > max_lead_ms);
                    assert!(
                        skew_ms == before.last_ms - wall || skew_ms == before.last_ms + 1 - wall
                    );
                    assert_eq!(s, before);
                    refused += 1;
                }
                Err(e) => panic!("call {i}: {e}"),
            }
        }
        assert!(
            issued > 2_000_000 && refused > 0,
            "issued {issued}, refused {refused}"
        );
    }

    #[test]
    fn clock_back_within_the_lead_keeps_issuing_from_the_logical_clock() {
        let l = default();
        let mut s = SnowflakeState::new();
        let a = s.next(&l, 1, NOW, LEAD).unwrap();
        // Clock set back 3 s: keep issuing at NOW, sequence 1, 2, …
        let b = s.next(&l, 1, NOW - 3_000, LEAD).unwrap();
        let c = s.next(&l, 1, NOW - 2_999, LEAD).unwrap();
        assert!(a < b && b < c);
        assert_eq!(
            l.decompose(b).unwrap(),
            SnowflakeParts {
                unix_ms: NOW,
                node: 1,
                seq: 1,
                gene: 0
            }
        );
        assert_eq!(l.decompose(c).unwrap().seq, 2);
        // When the clock passes the logical clock again, the wall clock takes over.
        let d = s.next(&l, 1, NOW + 1, LEAD).unwrap();
        assert_eq!(
            l.decompose(d).unwrap(),
            SnowflakeParts {
                unix_ms: NOW + 1,
                node: 1,
                seq: 0,
                gene: 0
            }
        );
        // Exactly at the lead is still tolerated.
        let e = s.next(&l, 1, NOW + 1 - LEAD, LEAD).unwrap();
        assert!(e > d);
    }

    #[test]
    fn clock_back_beyond_the_lead_is_refused_with_the_skew() {
        let l = default();
        let mut s = SnowflakeState::new();
        let a = s.next(&l, 1, NOW, LEAD).unwrap();
        let before = s;
        let e = s.next(&l, 1, NOW - LEAD - 1, LEAD).unwrap_err();
        assert_eq!(
            e,
            SnowflakeError::ClockBehind {
                skew_ms: LEAD + 1,
                max_lead_ms: LEAD
            }
        );
        assert_eq!(s, before, "a refused call must not change the state");
        assert_eq!(e.sqlstate(), "55000");
        let msg = e.to_string();
        assert!(
            msg.contains("5001 ms behind") && msg.contains("tolerated: 5000 ms"),
            "{msg}"
        );
        assert!(e.hint().unwrap().contains("retry in 1 ms"));
        // An hour back: the skew is named in full.
        let e = s.next(&l, 1, NOW - 3_600_000, LEAD).unwrap_err();
        assert_eq!(
            e,
            SnowflakeError::ClockBehind {
                skew_ms: 3_600_000,
                max_lead_ms: LEAD
            }
        );
        // Once the clock is back within the lead, issuing continues above `a`.
        let b = s.next(&l, 1, NOW - LEAD, LEAD).unwrap();
        assert!(b > a);
    }

    #[test]
    fn sequence_exhaustion_moves_to_the_next_millisecond() {
        let l = default();
        let mut s = SnowflakeState::new();
        let mut prev = -1;
        for seq in 0..4096 {
            let id = s.next(&l, 9, NOW, LEAD).unwrap();
            assert_eq!(
                l.decompose(id).unwrap(),
                SnowflakeParts {
                    unix_ms: NOW,
                    node: 9,
                    seq,
                    gene: 0
                }
            );
            assert!(id > prev);
            prev = id;
        }
        let id = s.next(&l, 9, NOW, LEAD).unwrap();
        assert!(id > prev);
        assert_eq!(
            l.decompose(id).unwrap(),
            SnowflakeParts {
                unix_ms: NOW + 1,
                node: 9,
                seq: 0,
                gene: 0
            }
        );
        // The real next millisecond continues the logical one instead of repeating it.
        let id2 = s.next(&l, 9, NOW + 1, LEAD).unwrap();
        assert_eq!(l.decompose(id2).unwrap().seq, 1);

        // With no lead allowed, exhaustion asks the caller to wait one millisecond.
        let mut s = SnowflakeState::new();
        for _ in 0..4096 {
            s.next(&l, 9, NOW, 0).unwrap();
        }
        let e = s.next(&l, 9, NOW, 0).unwrap_err();
        assert_eq!(
            e,
            SnowflakeError::ClockBehind {
                skew_ms: 1,
                max_lead_ms: 0
            }
        );
        let id = s.next(&l, 9, NOW + 1, 0).unwrap();
        assert_eq!(l.decompose(id).unwrap().unix_ms, NOW + 1);
    }

    #[test]
    fn node_time_and_lead_errors_do_not_change_the_state() {
        use SnowflakeError::*;
        let l = default();
        let mut s = SnowflakeState::new();
        s.next(&l, 0, NOW, LEAD).unwrap();
        let before = s;
        assert_eq!(
            s.next(&l, 1024, NOW, LEAD),
            Err(NodeOutOfRange {
                node: 1024,
                max: 1023
            })
        );
        assert_eq!(
            s.next(&l, -5, NOW, LEAD),
            Err(NodeOutOfRange {
                node: -5,
                max: 1023
            })
        );
        assert_eq!(
            s.next(&l, 0, NOW, -1),
            Err(InvalidMaxLead { max_lead_ms: -1 })
        );
        assert_eq!(s, before);
        // Past the end of time.
        let e = s.next(&l, 0, l.end_ms() + 1, LEAD).unwrap_err();
        assert_eq!(
            e,
            TimeOverflow {
                unix_ms: l.end_ms() + 1,
                end_ms: l.end_ms()
            }
        );
        assert_eq!(e.sqlstate(), "2200H");
        assert!(e.hint().is_some());
        // The last millisecond works, and exhausting it overflows rather than wrapping.
        let mut s = SnowflakeState::new();
        for _ in 0..4096 {
            s.next(&l, 0, l.end_ms(), LEAD).unwrap();
        }
        assert!(matches!(
            s.next(&l, 0, l.end_ms(), LEAD),
            Err(TimeOverflow { .. })
        ));
        // Before the epoch.
        let mut s = SnowflakeState::new();
        let e = s.next(&l, 0, 0, LEAD).unwrap_err();
        assert_eq!(
            e,
            BeforeEpoch {
                unix_ms: 0,
                epoch_ms: DEFAULT_EPOCH_MS
            }
        );
        assert_eq!(s, SnowflakeState::new());
        // Gene / owner mismatch.
        assert_eq!(
            s.next_with_gene(&l, 0, 42, NOW, LEAD, None),
            Err(NoGeneBits)
        );
        let g = SnowflakeLayout::with_gene(41, 10, 8, 4, DEFAULT_EPOCH_MS).unwrap();
        assert_eq!(
            s.next(&g, 0, NOW, LEAD),
            Err(OwnerRequired { gene_bits: 4 })
        );
    }

    #[test]
    fn extreme_inputs_never_panic() {
        let layouts = [default(), SnowflakeLayout::new(62, 0, 1, 0).unwrap()];
        let nows = [i64::MIN, i64::MIN + 1, -1, 0, NOW, i64::MAX - 1, i64::MAX];
        let states = [
            SnowflakeState::new(),
            SnowflakeState::resume(i64::MAX),
            SnowflakeState::resume(i64::MIN),
            SnowflakeState {
                last_ms: NOW,
                seq: 0,
            },
            SnowflakeState {
                last_ms: i64::MAX,
                seq: 0,
            },
            SnowflakeState {
                last_ms: 0,
                seq: u64::MAX - 1,
            },
        ];
        for l in &layouts {
            for st in states {
                for now in nows {
                    for lead in [0, LEAD, i64::MAX] {
                        let mut s = st;
                        let _ = s.next(l, 0, now, lead);
                        let _ = s.next_within(l, 0, now, lead, i64::MAX);
                        let _ = s.next_within(l, 0, now, lead, i64::MIN);
                        for margin in [i64::MIN, 0, 1, LEAD, i64::MAX] {
                            for hw in [i64::MIN, 0, NOW, i64::MAX] {
                                if let Some(v) = s.needs_persist(now, hw, margin) {
                                    assert!(v > hw);
                                }
                            }
                        }
                    }
                }
            }
        }
        let e = SnowflakeState {
            last_ms: i64::MAX,
            seq: 0,
        }
        .next(&default(), 0, i64::MIN, LEAD)
        .unwrap_err();
        assert_eq!(
            e,
            SnowflakeError::ClockBehind {
                skew_ms: i64::MAX,
                max_lead_ms: LEAD
            }
        );
    }

    /// A node with the persistence protocol: the durable mark survives a crash, the
    /// in-memory state does not.
    struct Node {
        layout: SnowflakeLayout,
        state: SnowflakeState,
        persisted: i64,
        margin: i64,
        writes: u32,
    }

    impl Node {
        fn boot(layout: SnowflakeLayout, persisted: i64, margin: i64) -> Node {
            Node {
                layout,
                state: SnowflakeState::resume(persisted),
                persisted,
                margin,
                writes: 0,
            }
        }
        fn next(&mut self, now: i64) -> Result<i64, SnowflakeError> {
            if let Some(v) = self.state.needs_persist(now, self.persisted, self.margin) {
                assert!(v > self.persisted);
                self.persisted = v; // durably written before use
                self.writes += 1;
            }
            let id = self
                .state
                .next_within(&self.layout, 5, now, LEAD, self.persisted);
            assert!(
                !matches!(id, Err(SnowflakeError::HighWaterReached { .. })),
                "{id:?}"
            );
            if let Ok(id) = id {
                assert!(self.layout.decompose(id).unwrap().unix_ms <= self.persisted);
            }
            id
        }
        fn crash(self) -> Node {
            Node::boot(self.layout, self.persisted, self.margin)
        }
    }

    #[test]
    fn restart_with_the_clock_set_back_resumes_above_the_high_water_mark() {
        let margin = 1_000;
        let mut node = Node::boot(default(), 0, margin);
        let mut max_before = -1;
        let mut all = std::collections::HashSet::new();
        for i in 0..50_000 {
            let id = node.next(NOW + i / 10).unwrap();
            assert!(id > max_before && all.insert(id));
            max_before = id;
        }
        assert!(node.writes >= 5, "{}", node.writes);

        // Restart; the clock was set back 2 s (within the lead): still increasing.
        let mut node = node.crash();
        let now = NOW + 5_000 - 2_000;
        let first = node.next(now).unwrap();
        assert!(first > max_before, "restart repeated or went backwards");
        let mut prev = first;
        for i in 0..20_000 {
            let id = node.next(now + i / 10).unwrap();
            assert!(id > prev && all.insert(id));
            prev = id;
        }

        // Restart with the clock set back an hour: refused, never a duplicate …
        let node_state = node.state;
        let mut node = node.crash();
        let back = NOW - 3_600_000;
        match node.next(back) {
            Err(SnowflakeError::ClockBehind {
                skew_ms,
                max_lead_ms,
            }) => {
                assert_eq!(max_lead_ms, LEAD);
                assert!(skew_ms > 3_600_000);
            }
            other => panic!("expected ClockBehind, got {other:?}"),
        }
        // … until the clock is back within the lead of the mark.
        let resumed_at = node.persisted + 1 - LEAD;
        let id = node.next(resumed_at).unwrap();
        assert!(id > prev);
        assert!(node.layout.decompose(id).unwrap().unix_ms > node_state.last_ms);
        assert!(all.insert(id));
    }

    #[test]
    fn restart_with_a_correct_clock_issues_at_once_when_margin_is_within_the_lead() {
        let mut node = Node::boot(default(), 0, LEAD - 1);
        let mut prev = -1;
        for i in 0..10_000 {
            prev = node.next(NOW + i).unwrap();
        }
        let mut node = node.crash();
        let id = node.next(NOW + 10_000).unwrap();
        assert!(id > prev);
    }

    #[test]
    fn naive_restart_would_repeat_which_is_why_the_mark_exists() {
        // Without the persisted mark, a fresh state with the clock set back reissues an ID.
        let l = default();
        let mut s = SnowflakeState::new();
        let first = s.next(&l, 1, NOW, LEAD).unwrap();
        let mut fresh = SnowflakeState::new();
        assert_eq!(fresh.next(&l, 1, NOW, LEAD).unwrap(), first);
        // With it, the same situation cannot repeat.
        let mut resumed = SnowflakeState::resume(NOW);
        assert!(resumed.next(&l, 1, NOW, LEAD).unwrap() > first);
    }

    #[test]
    fn high_water_mark_is_never_exceeded() {
        let l = default();
        let mut s = SnowflakeState::new();
        // No reservation yet: refused, state untouched.
        let e = s.next_within(&l, 0, NOW, LEAD, NOW - 1).unwrap_err();
        assert_eq!(
            e,
            SnowflakeError::HighWaterReached {
                needed_ms: NOW,
                high_water_ms: NOW - 1
            }
        );
        assert_eq!(e.sqlstate(), "55000");
        assert_eq!(s, SnowflakeState::new());
        // Reservation up to NOW: the 4096 IDs of NOW, then refusal (would need NOW + 1).
        for _ in 0..4096 {
            s.next_within(&l, 0, NOW, LEAD, NOW).unwrap();
        }
        let e = s.next_within(&l, 0, NOW, LEAD, NOW).unwrap_err();
        assert_eq!(
            e,
            SnowflakeError::HighWaterReached {
                needed_ms: NOW + 1,
                high_water_ms: NOW
            }
        );
        // needs_persist asks for exactly what is missing plus the margin.
        assert_eq!(s.needs_persist(NOW, NOW, 1_000), Some(NOW + 1_000));
    }

    #[test]
    fn needs_persist_thresholds() {
        let s = SnowflakeState {
            last_ms: NOW,
            seq: 0,
        };
        // base = NOW; refresh once fewer than margin/2 = 500 ms remain.
        assert_eq!(s.needs_persist(NOW, NOW + 500, 1_000), None);
        assert_eq!(s.needs_persist(NOW, NOW + 499, 1_000), Some(NOW + 1_000));
        assert_eq!(
            s.needs_persist(NOW - 7, NOW + 499, 1_000),
            Some(NOW + 1_000)
        );
        // The wall clock ahead of the state sets the base.
        assert_eq!(
            s.needs_persist(NOW + 10_000, NOW + 1_000, 1_000),
            Some(NOW + 11_000)
        );
        // Fresh state: base is the wall clock.
        assert_eq!(
            SnowflakeState::new().needs_persist(NOW, i64::MIN, 1_000),
            Some(NOW + 1_000)
        );
        // After resume the mark itself is used up: a new one is needed before issuing.
        assert_eq!(
            SnowflakeState::resume(NOW).needs_persist(NOW - 10, NOW, 1_000),
            Some(NOW + 1_000)
        );
        // A margin below 1 counts as 1.
        assert_eq!(s.needs_persist(NOW, NOW, 0), Some(NOW + 1));
        assert_eq!(s.needs_persist(NOW, NOW + 1, -5), None);
    }

    #[test]
    fn gene_in_low_bits_variant() {
        // Seed 003: 16 tables → 4 gene bits, sequence shifted left by 4 (8 bits left here).
        let g = SnowflakeLayout::with_gene(41, 10, 8, 4, DEFAULT_EPOCH_MS).unwrap();
        let mut s = SnowflakeState::new();
        let mut rng = XorShift(99);
        let mut prev = -1;
        let mut seen = std::collections::HashSet::new();
        // Same user, same millisecond, 256 orders: all distinct (the seed's test) and more.
        for i in 0..100_000 {
            let owner = if i < 256 { 2222 } else { rng.next() as i64 };
            let now = NOW + i / 1000;
            let id = s.next_with_gene(&g, 3, owner, now, i64::MAX, None).unwrap();
            assert!(id > prev && seen.insert(id), "call {i}");
            prev = id;
            assert_eq!(id % 16, owner.rem_euclid(16));
            assert_eq!(id & 15, owner & 15);
            let p = g.decompose(id).unwrap();
            assert_eq!((p.node, p.gene), (3, owner.rem_euclid(16)));
        }
        // The 256 orders of user 2222 in one millisecond used up its 8 sequence bits; the
        // 257th moved to the next millisecond instead of repeating.
        let mut s = SnowflakeState::new();
        let ids: Vec<i64> = (0..257)
            .map(|_| s.next_with_gene(&g, 0, 2222, NOW, LEAD, None).unwrap())
            .collect();
        assert_eq!(g.decompose(ids[255]).unwrap().unix_ms, NOW);
        assert_eq!(
            g.decompose(ids[256]).unwrap(),
            SnowflakeParts {
                unix_ms: NOW + 1,
                node: 0,
                seq: 0,
                gene: 2222 % 16
            }
        );
        // Bounded by a high-water mark as well.
        let mut s = SnowflakeState::new();
        assert!(matches!(
            s.next_with_gene(&g, 0, -1, NOW, LEAD, Some(NOW - 1)),
            Err(SnowflakeError::HighWaterReached { .. })
        ));
        let id = s.next_with_gene(&g, 0, -1, NOW, LEAD, Some(NOW)).unwrap();
        assert_eq!(id & 15, 15);
    }

    #[test]
    fn independent_nodes_never_collide() {
        let l = default();
        let mut states = [SnowflakeState::new(); 4];
        let mut seen = std::collections::HashSet::new();
        let mut rng = XorShift(5);
        for i in 0..200_000 {
            let node = rng.below(4) as usize;
            let now = NOW + i / 3000 - (rng.below(3) as i64); // jittery shared clock
            let id = states[node].next(&l, node as i64, now, LEAD).unwrap();
            assert!(seen.insert(id));
        }
    }
}
