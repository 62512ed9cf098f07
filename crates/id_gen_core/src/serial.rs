//! Dated business serial numbers (seeds 002 and 004): `prefix │ date │ [partition] │ serial`,
//! e.g. merchant `100000000001` + `20240229` + `07` + `000042`.
//!
//! What this module holds:
//! * [`DateFormat`] — the date part, written in PostgreSQL/Oracle `to_char` style
//!   (`YYYYMMDD`, `YYMMDDHH24`, `YYYYMMDDHH24MI`, `YYYY-MM-DD` …);
//! * [`DateFormat::period_of`] — the *period* an instant falls in: the formatted text and
//!   its `[start, end)` in UTC milliseconds. The period is the span of the smallest unit
//!   in the format (a day for `YYYYMMDD`, an hour for `YYMMDDHH24` …); the counter of a
//!   serial sequence restarts with every period;
//! * [`SerialSpec`] — width of the serial, optional 2-digit partition, maximum length;
//!   [`SerialSpec::render`] builds the final string.
//!
//! Time comes in as UTC unix milliseconds plus the UTC offset (seconds) that PostgreSQL
//! computed for the chosen time zone at that instant, so no time-zone database is needed
//! here; the calendar is proleptic Gregorian (as PostgreSQL's), years 1 ..= 9999.
//!
//! Invariants kept:
//! * Within one format, **distinct periods have distinct texts** (the format must name the
//!   year and every unit between the year and its smallest unit, and 12-hour clocks are
//!   refused), so serials of different periods can never collide. The one documented
//!   exception is `YY`, whose text repeats after 100 years.
//! * `render` never truncates or wraps: a counter that does not fit the width is an
//!   [`SerialError::Exhausted`] error naming the period, and an over-long result is
//!   [`SerialError::TooLong`].
//! * Nothing here panics on user input.
//!
//! **Keying counters (for the SQL layer): key the per-period counter by
//! [`Period::text`], not by `start_ms`.** The offset is the one in effect at the instant
//! asked about, and `start_ms`/`end_ms` assume it holds for the whole period. Across a
//! daylight-saving change that is not true: for `YYYYMMDD` the same local day yields two
//! different `start_ms` values (before and after the change), and for `YYYYMMDDHH24` the
//! repeated local hour of an autumn change has one text but two UTC hours. Keying by text
//! keeps one counter per printed date, so no serial number is ever printed twice;
//! `start_ms`/`end_ms` are for expiring old counters and for display.

use std::fmt;

const MS_PER_SEC: i64 = 1_000;
const MS_PER_MIN: i64 = 60 * MS_PER_SEC;
const MS_PER_HOUR: i64 = 60 * MS_PER_MIN;
const MS_PER_DAY: i64 = 24 * MS_PER_HOUR;

/// Largest accepted UTC offset magnitude, in seconds (±18:00, the ISO 8601 / `java.time`
/// limit; PostgreSQL's own zones stay within ±16:00).
pub const MAX_UTC_OFFSET_SECS: i32 = 18 * 3600;
/// Smallest serial width in digits.
pub const MIN_WIDTH: u8 = 1;
/// Largest serial width in digits: 10^18 still fits in a `u64` counter and a `bigint`.
pub const MAX_WIDTH: u8 = 18;
/// Largest partition number (it is printed as two digits).
pub const MAX_PARTITION: u8 = 99;
/// Earliest year a date part can show (no BC dates: `YYYY` must stay 4 digits).
pub const MIN_YEAR: i64 = 1;
/// Latest year a date part can show.
pub const MAX_YEAR: i64 = 9999;

/// A unit of the calendar, from the coarsest to the finest. The finest unit present in a
/// format is its period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PeriodUnit {
    Year,
    Month,
    Day,
    Hour,
    Minute,
    Second,
}

impl PeriodUnit {
    const ALL: [PeriodUnit; 6] = [
        PeriodUnit::Year,
        PeriodUnit::Month,
        PeriodUnit::Day,
        PeriodUnit::Hour,
        PeriodUnit::Minute,
        PeriodUnit::Second,
    ];

    /// Lower-case English name, as a DBA would say it ("the counter restarts every day").
    pub fn name(self) -> &'static str {
        match self {
            PeriodUnit::Year => "year",
            PeriodUnit::Month => "month",
            PeriodUnit::Day => "day",
            PeriodUnit::Hour => "hour",
            PeriodUnit::Minute => "minute",
            PeriodUnit::Second => "second",
        }
    }

    /// The `to_char` token that shows this unit.
    fn token_name(self) -> &'static str {
        match self {
            PeriodUnit::Year => "YYYY",
            PeriodUnit::Month => "MM",
            PeriodUnit::Day => "DD",
            PeriodUnit::Hour => "HH24",
            PeriodUnit::Minute => "MI",
            PeriodUnit::Second => "SS",
        }
    }
}

impl fmt::Display for PeriodUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One element of a date format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Token {
    /// `YYYY`: 4-digit year.
    Year4,
    /// `YY`: last 2 digits of the year.
    Year2,
    /// `MM`: month 01..12.
    Month,
    /// `DD`: day of month 01..31.
    Day,
    /// `HH24`: hour 00..23.
    Hour24,
    /// `MI`: minute 00..59.
    Minute,
    /// `SS`: second 00..59.
    Second,
    /// `-` separator.
    Dash,
}

impl Token {
    fn unit(self) -> Option<PeriodUnit> {
        match self {
            Token::Year4 | Token::Year2 => Some(PeriodUnit::Year),
            Token::Month => Some(PeriodUnit::Month),
            Token::Day => Some(PeriodUnit::Day),
            Token::Hour24 => Some(PeriodUnit::Hour),
            Token::Minute => Some(PeriodUnit::Minute),
            Token::Second => Some(PeriodUnit::Second),
            Token::Dash => None,
        }
    }

    fn pattern(self) -> &'static str {
        match self {
            Token::Year4 => "YYYY",
            Token::Year2 => "YY",
            Token::Month => "MM",
            Token::Day => "DD",
            Token::Hour24 => "HH24",
            Token::Minute => "MI",
            Token::Second => "SS",
            Token::Dash => "-",
        }
    }

    fn text_len(self) -> usize {
        match self {
            Token::Year4 => 4,
            Token::Dash => 1,
            _ => 2,
        }
    }
}

/// Why a date format was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FormatProblem {
    /// The format is empty (a serial without a date never restarts: use a plain sequence).
    Empty,
    /// Something at this character position is not a supported token.
    UnknownToken { position: usize, found: String },
    /// `HH` or `HH12`: a 12-hour clock prints the same text twice a day, which would
    /// repeat serial numbers.
    TwelveHourClock { position: usize },
    /// The same unit appears twice (e.g. `YYYY` and `YY`, or `MM` twice).
    DuplicateUnit { unit: PeriodUnit },
    /// A unit is shown but a coarser one is missing, so the text would repeat (e.g. `DD`
    /// without `MM` repeats every month).
    MissingUnit {
        missing: PeriodUnit,
        finer: PeriodUnit,
    },
    /// A `-` at the start or end, or two in a row: separators go between fields only.
    MisplacedDash { position: usize },
}

impl fmt::Display for FormatProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FormatProblem::Empty => f.write_str("the format is empty; it needs at least YYYY or YY"),
            FormatProblem::UnknownToken { position, found } => write!(
                f,
                "unsupported text \"{found}\" at position {position} (supported: YYYY, YY, MM, DD, HH24, MI, SS and '-' between them)"
            ),
            FormatProblem::TwelveHourClock { position } => write!(
                f,
                "12-hour clock field at position {position}: HH and HH12 repeat every 12 hours, so serial numbers would repeat; use HH24"
            ),
            FormatProblem::DuplicateUnit { unit } => {
                write!(f, "the {unit} appears more than once")
            }
            FormatProblem::MissingUnit { missing, finer } => write!(
                f,
                "the format shows the {finer} but not the {missing} ({}), so its text would repeat every {missing} and serial numbers would collide",
                missing.token_name()
            ),
            FormatProblem::MisplacedDash { position } => write!(
                f,
                "'-' at position {position}: a separator must stand between two date fields"
            ),
        }
    }
}

/// A parsed date format: which fields are printed, in which order.
///
/// Accepted: the tokens `YYYY`, `YY`, `MM`, `DD`, `HH24`, `MI`, `SS` (case-insensitive, as
/// in `to_char`) and `-` between two tokens. Nothing else — no other literal text, digits,
/// spaces, `/`, `:`, quoted text, `HH`/`HH12`. Why so strict:
/// * the date part sits between a free-form prefix and a digit serial, and payment
///   channels (seed 002) want identifiers made of digits; a fixed-length, digit-only date
///   part keeps every serial of a sequence the same length and sorting by time;
/// * constant text belongs in the prefix, where it is obvious; a literal digit inside the
///   date would read as part of the date;
/// * `/`, `:` and spaces break file names, URLs and CSV exports where serials travel;
///   `-` (the ISO 8601 date separator) is the one separator that is safe everywhere;
/// * refusing unknown letters catches Java-style patterns early: `yyyyMMddHHmmss` would
///   otherwise be misread (`mm` is *month* in `to_char`); it fails on `HH` with a hint.
///
/// The format must show the year and every unit between the year and its finest unit
/// (`YYYYMMDDHH24` yes, `YYYYDD` or `MMDD` no): otherwise the text repeats and two periods
/// would print the same serial numbers. Fields may appear in any order (`DDMMYYYY`
/// is accepted), though only most-significant-first formats sort chronologically.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DateFormat {
    tokens: Vec<Token>,
    unit: PeriodUnit,
}

/// The period an instant falls in.
///
/// `text` is the formatted date part; `[start_ms, end_ms)` is the period in UTC
/// milliseconds, end exclusive, computed with the offset in effect at the instant asked
/// about. Key counters by `text` (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Period {
    pub text: String,
    pub start_ms: i64,
    pub end_ms: i64,
}

/// Why a serial number could not be formatted.
///
/// Each variant names the SQLSTATE the SQL layer should raise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SerialError {
    /// The date format is not supported. SQLSTATE `22023` (invalid_parameter_value).
    InvalidFormat {
        format: String,
        problem: FormatProblem,
    },
    /// The serial width is outside `1..=18`. SQLSTATE `22023`.
    InvalidWidth { width: u8 },
    /// The partition is above 99. SQLSTATE `22023`.
    InvalidPartition { partition: u8 },
    /// The maximum length cannot even hold the date, partition and serial. SQLSTATE `22023`.
    MaxLenTooSmall { max_len: usize, fixed_len: usize },
    /// The UTC offset is beyond ±18:00. SQLSTATE `22009`
    /// (invalid_time_zone_displacement_value).
    InvalidUtcOffset { offset_secs: i32 },
    /// The instant is outside years 1 ..= 9999 in that zone. SQLSTATE `22008`
    /// (datetime_field_overflow).
    DateOutOfRange { utc_millis: i64, offset_secs: i32 },
    /// Every serial of this period has been used (`counter >= 10^width`). SQLSTATE `2200H`
    /// (sequence_generator_limit_exceeded).
    Exhausted { period_text: String, capacity: u64 },
    /// The serial number would be longer than the configured maximum. SQLSTATE `22001`
    /// (string_data_right_truncation — what PostgreSQL raises for "value too long for
    /// type character varying(n)", which is what a DBA will recognise).
    TooLong { len: usize, max: usize },
}

impl SerialError {
    /// The SQLSTATE the SQL layer should raise for this error.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            SerialError::InvalidFormat { .. }
            | SerialError::InvalidWidth { .. }
            | SerialError::InvalidPartition { .. }
            | SerialError::MaxLenTooSmall { .. } => "22023",
            SerialError::InvalidUtcOffset { .. } => "22009",
            SerialError::DateOutOfRange { .. } => "22008",
            SerialError::Exhausted { .. } => "2200H",
            SerialError::TooLong { .. } => "22001",
        }
    }

    /// A hint for the DBA: what to do about it.
    pub fn hint(&self) -> Option<String> {
        match self {
            SerialError::InvalidFormat { problem: FormatProblem::TwelveHourClock { .. }, .. }
            | SerialError::InvalidFormat { problem: FormatProblem::UnknownToken { .. }, .. } => Some(
                "date formats use PostgreSQL to_char tokens: e.g. YYYYMMDD, YYMMDDHH24, \
                 YYYYMMDDHH24MISS (Java's yyyyMMddHHmmss is written YYYYMMDDHH24MISS)"
                    .to_string(),
            ),
            SerialError::InvalidFormat { .. } => None,
            SerialError::InvalidWidth { .. } => {
                Some("the serial width is its number of digits, 1 to 18 (6 to 8 is usual)".into())
            }
            SerialError::InvalidPartition { .. } => {
                Some("the partition is printed as two digits: 0 to 99".into())
            }
            SerialError::MaxLenTooSmall { fixed_len, .. } => Some(format!(
                "the date, partition and serial alone take {fixed_len} characters; \
                 raise the maximum length or shorten the width or date format"
            )),
            SerialError::InvalidUtcOffset { .. } | SerialError::DateOutOfRange { .. } => None,
            SerialError::Exhausted { .. } => Some(
                "widen the serial, use a finer date format (one period per hour instead of per day), \
                 or spread the load over more partitions"
                    .into(),
            ),
            SerialError::TooLong { .. } => Some(
                "use a shorter prefix, a shorter date format or a narrower serial, or raise the maximum length"
                    .into(),
            ),
        }
    }
}

impl fmt::Display for SerialError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SerialError::InvalidFormat { format, problem } => {
                write!(f, "invalid date format \"{format}\": {problem}")
            }
            SerialError::InvalidWidth { width } => write!(
                f,
                "serial width {width} out of range (allowed: {MIN_WIDTH} .. {MAX_WIDTH} digits)"
            ),
            SerialError::InvalidPartition { partition } => write!(
                f,
                "partition {partition} out of range (allowed: 0 .. {MAX_PARTITION})"
            ),
            SerialError::MaxLenTooSmall { max_len, fixed_len } => write!(
                f,
                "maximum length {max_len} is shorter than the date, partition and serial ({fixed_len} characters)"
            ),
            SerialError::InvalidUtcOffset { offset_secs } => write!(
                f,
                "UTC offset of {offset_secs} seconds is out of range (allowed: -{MAX_UTC_OFFSET_SECS} .. {MAX_UTC_OFFSET_SECS})"
            ),
            SerialError::DateOutOfRange { utc_millis, offset_secs } => write!(
                f,
                "instant {utc_millis} ms since 1970-01-01 UTC (at UTC offset {offset_secs} s) is outside the years {MIN_YEAR} .. {MAX_YEAR} a serial date can show"
            ),
            SerialError::Exhausted { period_text, capacity } => write!(
                f,
                "serial numbers for period \"{period_text}\" are exhausted: all {capacity} values have been used"
            ),
            SerialError::TooLong { len, max } => write!(
                f,
                "serial number would be {len} characters long, more than the maximum of {max}"
            ),
        }
    }
}

impl std::error::Error for SerialError {}

impl DateFormat {
    /// Parses a `to_char`-style date format (see the type doc for what is accepted).
    pub fn parse(format: &str) -> Result<DateFormat, SerialError> {
        let fail = |problem| SerialError::InvalidFormat {
            format: format.to_string(),
            problem,
        };
        let chars: Vec<char> = format.chars().collect();
        if chars.is_empty() {
            return Err(fail(FormatProblem::Empty));
        }
        // Tokens are ASCII; compare an upper-cased copy, keep positions in characters.
        let upper: Vec<char> = chars.iter().map(|c| c.to_ascii_uppercase()).collect();
        let starts_with = |pos: usize, lit: &str| {
            let lit: Vec<char> = lit.chars().collect();
            upper.len() >= pos + lit.len() && upper[pos..pos + lit.len()] == lit[..]
        };
        let mut tokens = Vec::new();
        let mut pos = 0;
        while pos < upper.len() {
            // Longest match first: YYYY before YY, HH24 before the refused HH.
            let (token, len) = if starts_with(pos, "YYYY") {
                (Token::Year4, 4)
            } else if starts_with(pos, "YY") {
                (Token::Year2, 2)
            } else if starts_with(pos, "MM") {
                (Token::Month, 2)
            } else if starts_with(pos, "MI") {
                (Token::Minute, 2)
            } else if starts_with(pos, "DD") {
                (Token::Day, 2)
            } else if starts_with(pos, "HH24") {
                (Token::Hour24, 4)
            } else if starts_with(pos, "HH") {
                return Err(fail(FormatProblem::TwelveHourClock { position: pos }));
            } else if starts_with(pos, "SS") {
                (Token::Second, 2)
            } else if upper[pos] == '-' {
                (Token::Dash, 1)
            } else {
                // Report the run of letters (or the single other character) found.
                let end = if upper[pos].is_ascii_alphabetic() {
                    (pos..upper.len())
                        .find(|&i| !upper[i].is_ascii_alphabetic())
                        .unwrap_or(upper.len())
                } else {
                    pos + 1
                };
                let found: String = chars[pos..end].iter().collect();
                return Err(fail(FormatProblem::UnknownToken {
                    position: pos,
                    found,
                }));
            };
            if token == Token::Dash
                && (pos == 0 || pos + 1 == upper.len() || tokens.last() == Some(&Token::Dash))
            {
                return Err(fail(FormatProblem::MisplacedDash { position: pos }));
            }
            tokens.push(token);
            pos += len;
        }

        let mut seen = [false; 6];
        for unit in tokens.iter().filter_map(|t| t.unit()) {
            let slot = &mut seen[unit as usize];
            if *slot {
                return Err(fail(FormatProblem::DuplicateUnit { unit }));
            }
            *slot = true;
        }
        // The finest unit present; every coarser unit must be present too.
        let finest = PeriodUnit::ALL
            .iter()
            .rev()
            .copied()
            .find(|u| seen[*u as usize])
            .ok_or_else(|| fail(FormatProblem::Empty))?;
        for unit in PeriodUnit::ALL.iter().copied().take_while(|u| *u < finest) {
            if !seen[unit as usize] {
                return Err(fail(FormatProblem::MissingUnit {
                    missing: unit,
                    finer: finest,
                }));
            }
        }
        Ok(DateFormat {
            tokens,
            unit: finest,
        })
    }

    /// The finest unit of the format: how often the counter restarts.
    pub fn unit(&self) -> PeriodUnit {
        self.unit
    }

    /// Length of the date text in characters (fixed for a format).
    pub fn text_len(&self) -> usize {
        self.tokens.iter().map(|t| t.text_len()).sum()
    }

    /// The format in canonical (upper-case) spelling, e.g. `YYYYMMDDHH24`.
    pub fn pattern(&self) -> String {
        self.tokens.iter().map(|t| t.pattern()).collect()
    }

    /// The period containing the instant `utc_millis` (ms since 1970-01-01T00:00:00Z),
    /// seen at UTC offset `offset_secs` (positive east of Greenwich, e.g. 28800 for
    /// +08:00, -18000 for -05:00 — PostgreSQL's sign convention for
    /// `extract(timezone from timestamptz)`, which gives the offset of the session's
    /// `TimeZone` at that instant; for a named zone, the offset of the local time
    /// `ts AT TIME ZONE zone` minus `ts`, in seconds).
    ///
    /// `start_ms <= utc_millis < end_ms` always holds, and the text of `start_ms` (at the
    /// same offset) equals the text of `utc_millis`.
    pub fn period_of(&self, utc_millis: i64, offset_secs: i32) -> Result<Period, SerialError> {
        if offset_secs.unsigned_abs() > MAX_UTC_OFFSET_SECS as u32 {
            return Err(SerialError::InvalidUtcOffset { offset_secs });
        }
        let out_of_range = || SerialError::DateOutOfRange {
            utc_millis,
            offset_secs,
        };
        let offset_ms = i64::from(offset_secs) * MS_PER_SEC;
        let local_ms = utc_millis.checked_add(offset_ms).ok_or_else(out_of_range)?;
        let days = local_ms.div_euclid(MS_PER_DAY);
        let ms_of_day = local_ms.rem_euclid(MS_PER_DAY);
        let (year, month, day) = civil_from_days(days);
        if !(MIN_YEAR..=MAX_YEAR).contains(&year) {
            return Err(out_of_range());
        }
        let hour = ms_of_day / MS_PER_HOUR;
        let minute = ms_of_day % MS_PER_HOUR / MS_PER_MIN;
        let second = ms_of_day % MS_PER_MIN / MS_PER_SEC;

        // Local start and (exclusive) end of the period. Years are bounded, so no overflow.
        let (local_start, local_end) = match self.unit {
            PeriodUnit::Year => (
                days_from_civil(year, 1, 1) * MS_PER_DAY,
                days_from_civil(year + 1, 1, 1) * MS_PER_DAY,
            ),
            PeriodUnit::Month => {
                let (ny, nm) = if month == 12 {
                    (year + 1, 1)
                } else {
                    (year, month + 1)
                };
                (
                    days_from_civil(year, month, 1) * MS_PER_DAY,
                    days_from_civil(ny, nm, 1) * MS_PER_DAY,
                )
            }
            PeriodUnit::Day => (days * MS_PER_DAY, (days + 1) * MS_PER_DAY),
            PeriodUnit::Hour => floor_span(local_ms, MS_PER_HOUR),
            PeriodUnit::Minute => floor_span(local_ms, MS_PER_MIN),
            PeriodUnit::Second => floor_span(local_ms, MS_PER_SEC),
        };

        let mut text = String::with_capacity(self.text_len());
        for token in &self.tokens {
            let field = match token {
                Token::Year4 => {
                    text.push_str(&format!("{year:04}"));
                    continue;
                }
                Token::Dash => {
                    text.push('-');
                    continue;
                }
                Token::Year2 => year % 100,
                Token::Month => month,
                Token::Day => day,
                Token::Hour24 => hour,
                Token::Minute => minute,
                Token::Second => second,
            };
            text.push_str(&format!("{field:02}"));
        }
        Ok(Period {
            text,
            start_ms: local_start - offset_ms,
            end_ms: local_end - offset_ms,
        })
    }
}

impl fmt::Display for DateFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.pattern())
    }
}

impl std::str::FromStr for DateFormat {
    type Err = SerialError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DateFormat::parse(s)
    }
}

/// `[floor(ms / span) * span, that + span)`.
fn floor_span(ms: i64, span: i64) -> (i64, i64) {
    let start = ms.div_euclid(span) * span;
    (start, start + span)
}

/// Days since 1970-01-01 → proleptic Gregorian (year, month 1..=12, day 1..=31).
/// Howard Hinnant's `civil_from_days`; exact for every `i64` day count a millisecond
/// timestamp can produce.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468; // shift the epoch to 0000-03-01
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // day of 400-year era, 0..=146096
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // 0..=399
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // day of March-based year, 0..=365
    let mp = (5 * doy + 2) / 153; // March-based month, 0..=11
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Proleptic Gregorian (year, month, day) → days since 1970-01-01 (inverse of
/// [`civil_from_days`]).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The shape of a dated serial sequence's numbers: date format, serial width, optional
/// partition, maximum total length. Validated on construction so that a bad
/// configuration is refused when the sequence is created, not at the first `nextval`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SerialSpec {
    format: DateFormat,
    width: u8,
    partition: Option<u8>,
    max_len: usize,
}

impl SerialSpec {
    /// Checks `width` in `1..=18`, `partition` in `0..=99`, and that `max_len` leaves room
    /// for at least the date, partition and serial (an empty prefix).
    pub fn new(
        format: DateFormat,
        width: u8,
        partition: Option<u8>,
        max_len: usize,
    ) -> Result<SerialSpec, SerialError> {
        if !(MIN_WIDTH..=MAX_WIDTH).contains(&width) {
            return Err(SerialError::InvalidWidth { width });
        }
        if let Some(p) = partition {
            if p > MAX_PARTITION {
                return Err(SerialError::InvalidPartition { partition: p });
            }
        }
        let spec = SerialSpec {
            format,
            width,
            partition,
            max_len,
        };
        if spec.fixed_len() > max_len {
            return Err(SerialError::MaxLenTooSmall {
                max_len,
                fixed_len: spec.fixed_len(),
            });
        }
        Ok(spec)
    }

    pub fn format(&self) -> &DateFormat {
        &self.format
    }

    pub fn width(&self) -> u8 {
        self.width
    }

    pub fn partition(&self) -> Option<u8> {
        self.partition
    }

    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Number of serials per period: `10^width` (counters `0 .. 10^width - 1`). A SQL
    /// layer whose counters start at 1 gets one fewer.
    pub fn capacity(&self) -> u64 {
        10u64.pow(u32::from(self.width))
    }

    /// Characters taken by date, partition and serial: everything but the prefix.
    pub fn fixed_len(&self) -> usize {
        self.format.text_len()
            + if self.partition.is_some() { 2 } else { 0 }
            + usize::from(self.width)
    }

    /// Longest prefix (in characters) that still fits within `max_len`.
    pub fn max_prefix_len(&self) -> usize {
        self.max_len - self.fixed_len() // new() guarantees fixed_len <= max_len
    }

    /// `prefix │ period.text │ partition (2 digits) │ counter (zero-padded to width)`.
    ///
    /// `counter` is the per-period counter the SQL layer keeps. Lengths count characters,
    /// as PostgreSQL's `varchar(n)` and `length()` do. Fails with
    /// [`SerialError::Exhausted`] if `counter >= 10^width` — never wraps, since a wrapped
    /// serial repeats one already issued — and with [`SerialError::TooLong`] if the
    /// result would exceed `max_len`.
    pub fn render(
        &self,
        prefix: &str,
        period: &Period,
        counter: u64,
    ) -> Result<String, SerialError> {
        let capacity = self.capacity();
        if counter >= capacity {
            return Err(SerialError::Exhausted {
                period_text: period.text.clone(),
                capacity,
            });
        }
        let partition_len = if self.partition.is_some() { 2 } else { 0 };
        let len = prefix.chars().count()
            + period.text.chars().count()
            + partition_len
            + usize::from(self.width);
        if len > self.max_len {
            return Err(SerialError::TooLong {
                len,
                max: self.max_len,
            });
        }
        let mut out = String::with_capacity(prefix.len() + period.text.len() + partition_len + 18);
        out.push_str(prefix);
        out.push_str(&period.text);
        if let Some(p) = self.partition {
            out.push_str(&format!("{p:02}"));
        }
        out.push_str(&format!(
            "{counter:0width$}",
            width = usize::from(self.width)
        ));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H8: i32 = 8 * 3600; // +08:00 (Asia/Shanghai)
    const M5: i32 = -5 * 3600; // -05:00 (America/New_York, winter)

    /// UTC millis of a UTC civil time (test helper built on the code under test, which is
    /// cross-checked independently in `civil_calendar_matches_a_day_by_day_walk`).
    fn utc(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64, ms: i64) -> i64 {
        days_from_civil(y, mo, d) * MS_PER_DAY
            + h * MS_PER_HOUR
            + mi * MS_PER_MIN
            + s * MS_PER_SEC
            + ms
    }

    fn fmt(s: &str) -> DateFormat {
        DateFormat::parse(s).unwrap()
    }

    fn problem(s: &str) -> FormatProblem {
        match DateFormat::parse(s) {
            Err(SerialError::InvalidFormat { format, problem }) => {
                assert_eq!(format, s);
                problem
            }
            other => panic!("{s}: expected InvalidFormat, got {other:?}"),
        }
    }

    use crate::test_rng::XorShift;

    #[test]
    fn known_instants() {
        assert_eq!(utc(1970, 1, 1, 0, 0, 0, 0), 0);
        assert_eq!(utc(2024, 2, 29, 0, 0, 0, 0), 1_709_164_800_000);
        assert_eq!(utc(2020, 1, 1, 0, 0, 0, 0), 1_577_836_800_000);
        let p = fmt("YYYYMMDDHH24MISS")
            .period_of(1_709_164_800_000, 0)
            .unwrap();
        assert_eq!(p.text, "20240229000000");
        let p = fmt("YYYY-MM-DD").period_of(-1, 0).unwrap();
        assert_eq!(p.text, "1969-12-31");
        assert_eq!((p.start_ms, p.end_ms), (-MS_PER_DAY, 0));
    }

    #[test]
    fn civil_calendar_matches_a_day_by_day_walk() {
        // Independent reference: walk every day from 0001-01-01 to 9999-12-31 with the
        // textbook leap-year rule and compare both directions of the conversion.
        let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        let month_len = |y: i64, m: i64| match m {
            2 if leap(y) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        let mut days = days_from_civil(1, 1, 1);
        let (mut y, mut m, mut d) = (1, 1, 1);
        while y <= 9999 {
            assert_eq!(civil_from_days(days), (y, m, d));
            assert_eq!(days_from_civil(y, m, d), days);
            days += 1;
            d += 1;
            if d > month_len(y, m) {
                d = 1;
                m += 1;
                if m > 12 {
                    m = 1;
                    y += 1;
                }
            }
        }
        assert_eq!(days, days_from_civil(10000, 1, 1));
        assert_eq!(days_from_civil(1970, 1, 1), 0);
    }

    #[test]
    fn parse_accepts_tokens_and_dashes() {
        for (s, unit, len, canon) in [
            ("YYYYMMDD", PeriodUnit::Day, 8, "YYYYMMDD"),
            ("yymmddhh24", PeriodUnit::Hour, 8, "YYMMDDHH24"),
            ("YYYYMMDDHH24MI", PeriodUnit::Minute, 12, "YYYYMMDDHH24MI"),
            (
                "YYYYMMDDHH24MISS",
                PeriodUnit::Second,
                14,
                "YYYYMMDDHH24MISS",
            ),
            ("YYYY-MM-DD", PeriodUnit::Day, 10, "YYYY-MM-DD"),
            ("YYYYMM", PeriodUnit::Month, 6, "YYYYMM"),
            ("YY", PeriodUnit::Year, 2, "YY"),
            ("DDMMYYYY", PeriodUnit::Day, 8, "DDMMYYYY"),
            ("Yyyy-Mm", PeriodUnit::Month, 7, "YYYY-MM"),
        ] {
            let f = fmt(s);
            assert_eq!(f.unit(), unit, "{s}");
            assert_eq!(f.text_len(), len, "{s}");
            assert_eq!(f.pattern(), canon, "{s}");
            assert_eq!(f.to_string(), canon);
            assert_eq!(s.parse::<DateFormat>().unwrap(), f);
            let p = f.period_of(utc(2024, 2, 29, 13, 45, 7, 500), 0).unwrap();
            assert_eq!(p.text.len(), len, "{s}");
        }
    }

    #[test]
    fn parse_rejects_with_reasons() {
        assert_eq!(problem(""), FormatProblem::Empty);
        assert_eq!(problem("-"), FormatProblem::MisplacedDash { position: 0 });
        assert_eq!(
            problem("YYYYMMDDHH"),
            FormatProblem::TwelveHourClock { position: 8 }
        );
        assert_eq!(
            problem("YYYYMMDDHH12"),
            FormatProblem::TwelveHourClock { position: 8 }
        );
        // Java style: `HH` is refused before `mm` could be misread.
        assert_eq!(
            problem("yyyyMMddHHmmss"),
            FormatProblem::TwelveHourClock { position: 8 }
        );
        assert_eq!(
            problem("YYYY/MM/DD"),
            FormatProblem::UnknownToken {
                position: 4,
                found: "/".into()
            }
        );
        assert_eq!(
            problem("YYYYMMDD HH24"),
            FormatProblem::UnknownToken {
                position: 8,
                found: " ".into()
            }
        );
        assert_eq!(
            problem("YYYY0MMDD"),
            FormatProblem::UnknownToken {
                position: 4,
                found: "0".into()
            }
        );
        assert_eq!(
            problem("YYYMMDD"),
            FormatProblem::UnknownToken {
                position: 2,
                found: "YMMDD".into()
            }
        );
        assert_eq!(
            problem("YYYYMonDD"),
            FormatProblem::UnknownToken {
                position: 4,
                found: "MonDD".into()
            }
        );
        assert_eq!(
            problem("YYYY\"x\"MM"),
            FormatProblem::UnknownToken {
                position: 4,
                found: "\"".into()
            }
        );
        assert_eq!(
            problem("YYYYé"),
            FormatProblem::UnknownToken {
                position: 4,
                found: "é".into()
            }
        );
        assert_eq!(
            problem("YYYYYY"),
            FormatProblem::DuplicateUnit {
                unit: PeriodUnit::Year
            }
        );
        assert_eq!(
            problem("YYYYMMDDMM"),
            FormatProblem::DuplicateUnit {
                unit: PeriodUnit::Month
            }
        );
        assert_eq!(
            problem("MMDD"),
            FormatProblem::MissingUnit {
                missing: PeriodUnit::Year,
                finer: PeriodUnit::Day
            }
        );
        assert_eq!(
            problem("YYYYDD"),
            FormatProblem::MissingUnit {
                missing: PeriodUnit::Month,
                finer: PeriodUnit::Day
            }
        );
        assert_eq!(
            problem("YYYYMMHH24"),
            FormatProblem::MissingUnit {
                missing: PeriodUnit::Day,
                finer: PeriodUnit::Hour
            }
        );
        assert_eq!(
            problem("YYYYMMDDSS"),
            FormatProblem::MissingUnit {
                missing: PeriodUnit::Hour,
                finer: PeriodUnit::Second
            }
        );
        assert_eq!(
            problem("-YYYY"),
            FormatProblem::MisplacedDash { position: 0 }
        );
        assert_eq!(
            problem("YYYY-"),
            FormatProblem::MisplacedDash { position: 4 }
        );
        assert_eq!(
            problem("YYYY--MM"),
            FormatProblem::MisplacedDash { position: 5 }
        );

        let e = DateFormat::parse("YYYYMMDDHH").unwrap_err();
        assert_eq!(e.sqlstate(), "22023");
        assert!(e.to_string().contains("use HH24"), "{e}");
        assert!(e.hint().unwrap().contains("YYYYMMDDHH24MISS"));
        let e = DateFormat::parse("YYYYDD").unwrap_err();
        assert!(e.to_string().contains("repeat every month"), "{e}");
    }

    #[test]
    fn midnight_in_utc_plus8_and_minus5() {
        let f = fmt("YYYYMMDD");
        // +08:00: local midnight of 2024-03-01 is 2024-02-29T16:00:00Z.
        let boundary = utc(2024, 2, 29, 16, 0, 0, 0);
        let before = f.period_of(boundary - 1, H8).unwrap();
        let after = f.period_of(boundary, H8).unwrap();
        assert_eq!(before.text, "20240229");
        assert_eq!(after.text, "20240301");
        assert_eq!(before.end_ms, boundary);
        assert_eq!(after.start_ms, boundary);
        assert_eq!(before.start_ms, boundary - MS_PER_DAY);
        // The same instants in UTC are both on the 29th.
        assert_eq!(f.period_of(boundary, 0).unwrap().text, "20240229");

        // -05:00: local midnight of 2024-01-01 is 2024-01-01T05:00:00Z.
        let boundary = utc(2024, 1, 1, 5, 0, 0, 0);
        let before = f.period_of(boundary - 1, M5).unwrap();
        let after = f.period_of(boundary, M5).unwrap();
        assert_eq!(before.text, "20231231");
        assert_eq!(after.text, "20240101");
        assert_eq!(
            (before.start_ms, before.end_ms),
            (boundary - MS_PER_DAY, boundary)
        );
        assert_eq!(
            (after.start_ms, after.end_ms),
            (boundary, boundary + MS_PER_DAY)
        );
        // In UTC, 03:00Z on Jan 1st is already the new year.
        assert_eq!(
            f.period_of(utc(2024, 1, 1, 3, 0, 0, 0), 0).unwrap().text,
            "20240101"
        );
        assert_eq!(
            f.period_of(utc(2024, 1, 1, 3, 0, 0, 0), M5).unwrap().text,
            "20231231"
        );
    }

    #[test]
    fn injected_clock_crossing_midnight_restarts_the_counter() {
        // A per-period counter keyed by period text, as the SQL layer keeps it.
        let spec = SerialSpec::new(fmt("YYYYMMDD"), 6, Some(7), 32).unwrap();
        let mut counters = std::collections::HashMap::<String, u64>::new();
        let mut issued = std::collections::HashSet::new();
        let start = utc(2024, 2, 29, 15, 59, 59, 990); // +08:00: 23:59:59.990 local
        let mut out = Vec::new();
        for step in 0..20 {
            let now = start + step;
            let period = spec.format().period_of(now, H8).unwrap();
            let counter = counters.entry(period.text.clone()).or_insert(0);
            let serial = spec.render("100000000001", &period, *counter).unwrap();
            *counter += 1;
            assert!(issued.insert(serial.clone()), "duplicate {serial}");
            out.push(serial);
        }
        assert_eq!(out[0], "1000000000012024022907000000");
        assert_eq!(out[9], "1000000000012024022907000009");
        assert_eq!(out[10], "1000000000012024030107000000");
        assert_eq!(out[19], "1000000000012024030107000009");
    }

    #[test]
    fn hour_boundaries() {
        let f = fmt("YYMMDDHH24");
        let t = utc(2024, 7, 1, 9, 59, 59, 999);
        let p = f.period_of(t, 0).unwrap();
        assert_eq!(p.text, "24070109");
        assert_eq!(p.end_ms, t + 1);
        assert_eq!(p.start_ms, utc(2024, 7, 1, 9, 0, 0, 0));
        let q = f.period_of(t + 1, 0).unwrap();
        assert_eq!(q.text, "24070110");
        assert_eq!(q.start_ms, t + 1);
        // Half-hour zone (+05:30): local hours start at :30 UTC.
        let ist = 5 * 3600 + 1800;
        let p = f.period_of(utc(2024, 7, 1, 9, 29, 59, 999), ist).unwrap();
        assert_eq!(p.text, "24070114");
        assert_eq!(p.end_ms, utc(2024, 7, 1, 9, 30, 0, 0));
        let p = f.period_of(utc(2024, 7, 1, 9, 30, 0, 0), ist).unwrap();
        assert_eq!(p.text, "24070115");
        // Minutes and seconds.
        let p = fmt("YYYYMMDDHH24MI")
            .period_of(utc(2024, 7, 1, 9, 30, 59, 999), M5)
            .unwrap();
        assert_eq!(p.text, "202407010430");
        assert_eq!(
            (p.start_ms, p.end_ms),
            (utc(2024, 7, 1, 9, 30, 0, 0), utc(2024, 7, 1, 9, 31, 0, 0))
        );
        let p = fmt("YYYYMMDDHH24MISS")
            .period_of(utc(2024, 7, 1, 9, 30, 59, 999), H8)
            .unwrap();
        assert_eq!(p.text, "20240701173059");
        assert_eq!(p.end_ms - p.start_ms, 1000);
    }

    #[test]
    fn leap_days() {
        let f = fmt("YYYYMMDD");
        for (t, text) in [
            (utc(2024, 2, 28, 23, 59, 59, 999), "20240228"),
            (utc(2024, 2, 29, 0, 0, 0, 0), "20240229"),
            (utc(2024, 2, 29, 23, 59, 59, 999), "20240229"),
            (utc(2024, 3, 1, 0, 0, 0, 0), "20240301"),
            (utc(2023, 2, 28, 23, 59, 59, 999), "20230228"),
            (utc(2023, 2, 28, 23, 59, 59, 999) + 1, "20230301"),
            (utc(2000, 2, 29, 12, 0, 0, 0), "20000229"),
            (utc(1900, 2, 28, 23, 59, 59, 999) + 1, "19000301"),
        ] {
            assert_eq!(f.period_of(t, 0).unwrap().text, text);
        }
        // February as a month period: 29 days in 2024, 28 in 2023, 28 in 1900, 29 in 2000.
        let m = fmt("YYYYMM");
        for (y, days) in [(2024, 29), (2023, 28), (1900, 28), (2000, 29)] {
            let p = m.period_of(utc(y, 2, 10, 0, 0, 0, 0), 0).unwrap();
            assert_eq!(p.end_ms - p.start_ms, days * MS_PER_DAY, "{y}");
            assert_eq!(p.text, format!("{y}02"));
        }
        // Leap day seen from +08:00 starts at 16:00Z the day before.
        let p = f.period_of(utc(2024, 2, 28, 16, 0, 0, 0), H8).unwrap();
        assert_eq!(p.text, "20240229");
        assert_eq!(p.start_ms, utc(2024, 2, 28, 16, 0, 0, 0));
    }

    #[test]
    fn year_boundaries() {
        let y = fmt("YYYY");
        let t = utc(2024, 12, 31, 23, 59, 59, 999);
        let p = y.period_of(t, 0).unwrap();
        assert_eq!(p.text, "2024");
        assert_eq!((p.start_ms, p.end_ms), (utc(2024, 1, 1, 0, 0, 0, 0), t + 1));
        assert_eq!(p.end_ms - p.start_ms, 366 * MS_PER_DAY);
        assert_eq!(y.period_of(t + 1, 0).unwrap().text, "2025");
        // New year arrives 8 hours earlier in +08:00 and 5 hours later in -05:00.
        assert_eq!(
            y.period_of(utc(2024, 12, 31, 16, 0, 0, 0), H8)
                .unwrap()
                .text,
            "2025"
        );
        assert_eq!(
            y.period_of(utc(2025, 1, 1, 4, 59, 59, 999), M5)
                .unwrap()
                .text,
            "2024"
        );
        let p = fmt("YYYYMM")
            .period_of(utc(2024, 12, 15, 0, 0, 0, 0), 0)
            .unwrap();
        assert_eq!(
            (p.text.as_str(), p.end_ms),
            ("202412", utc(2025, 1, 1, 0, 0, 0, 0))
        );
        // YY wraps at the century, as documented.
        assert_eq!(
            fmt("YYMMDD")
                .period_of(utc(2099, 12, 31, 0, 0, 0, 0), 0)
                .unwrap()
                .text,
            "991231"
        );
        assert_eq!(
            fmt("YYMMDD")
                .period_of(utc(2100, 1, 1, 0, 0, 0, 0), 0)
                .unwrap()
                .text,
            "000101"
        );
        // Range limits of the calendar.
        assert_eq!(
            y.period_of(utc(1, 1, 1, 0, 0, 0, 0), 0).unwrap().text,
            "0001"
        );
        assert_eq!(
            y.period_of(utc(9999, 12, 31, 23, 59, 59, 999), 0)
                .unwrap()
                .text,
            "9999"
        );
        assert_eq!(
            y.period_of(utc(9999, 12, 31, 23, 59, 59, 999) + 1, 0),
            Err(SerialError::DateOutOfRange {
                utc_millis: utc(10000, 1, 1, 0, 0, 0, 0),
                offset_secs: 0
            })
        );
        let e = y.period_of(utc(1, 1, 1, 0, 0, 0, 0) - 1, 0).unwrap_err();
        assert_eq!(e.sqlstate(), "22008");
        assert!(e.to_string().contains("years 1 .. 9999"), "{e}");
    }

    #[test]
    fn exact_millisecond_boundaries() {
        let f = fmt("YYYYMMDD");
        for offset in [
            0,
            H8,
            M5,
            5 * 3600 + 1800,
            -(9 * 3600 + 1800),
            12 * 3600 + 2700,
            MAX_UTC_OFFSET_SECS,
        ] {
            let p = f.period_of(1_719_835_200_123, offset).unwrap();
            let last = f.period_of(p.end_ms - 1, offset).unwrap();
            let next = f.period_of(p.end_ms, offset).unwrap();
            assert_eq!(last, p, "offset {offset}");
            assert_ne!(next.text, p.text);
            assert_eq!(next.start_ms, p.end_ms);
            let first = f.period_of(p.start_ms, offset).unwrap();
            assert_eq!(first, p);
            assert_ne!(f.period_of(p.start_ms - 1, offset).unwrap().text, p.text);
            assert_eq!(p.end_ms - p.start_ms, MS_PER_DAY);
        }
    }

    #[test]
    fn property_random_instants_lie_in_their_period() {
        let formats: Vec<DateFormat> = [
            "YYYY",
            "YYYYMM",
            "YYYYMMDD",
            "YYMMDDHH24",
            "YYYYMMDDHH24MI",
            "YYYYMMDDHH24MISS",
            "DD-MM-YYYY",
        ]
        .iter()
        .map(|s| fmt(s))
        .collect();
        let lo = utc(2, 1, 1, 0, 0, 0, 0);
        let hi = utc(9998, 12, 31, 0, 0, 0, 0);
        let near_lo = utc(1990, 1, 1, 0, 0, 0, 0);
        let near_hi = utc(2060, 1, 1, 0, 0, 0, 0);
        let mut rng = XorShift(0xDEAD_BEEF_CAFE_F00D);
        for i in 0..200_000 {
            let f = &formats[i % formats.len()];
            let t = if i % 2 == 0 {
                rng.range(lo, hi)
            } else {
                rng.range(near_lo, near_hi)
            };
            // Whole quarter-hours mostly, sometimes odd seconds (historical LMT offsets).
            let offset = if i % 5 == 0 {
                rng.range(-(MAX_UTC_OFFSET_SECS as i64), MAX_UTC_OFFSET_SECS as i64) as i32
            } else {
                rng.range(-48, 56) as i32 * 900
            };
            let p = f.period_of(t, offset).unwrap();
            assert!(p.start_ms <= t && t < p.end_ms, "{f} {t} {offset}: {p:?}");
            assert_eq!(
                f.period_of(p.start_ms, offset).unwrap().text,
                p.text,
                "{f} {t} {offset}"
            );
            assert_eq!(
                f.period_of(p.end_ms - 1, offset).unwrap().text,
                p.text,
                "{f} {t} {offset}"
            );
            assert_ne!(
                f.period_of(p.end_ms, offset).unwrap().text,
                p.text,
                "{f} {t} {offset}"
            );
            assert_ne!(
                f.period_of(p.start_ms - 1, offset).unwrap().text,
                p.text,
                "{f} {t} {offset}"
            );
            assert_eq!(p.text.len(), f.text_len());
        }
    }

    #[test]
    fn offsets_are_validated() {
        let f = fmt("YYYYMMDD");
        assert!(f.period_of(0, MAX_UTC_OFFSET_SECS).is_ok());
        assert!(f.period_of(0, -MAX_UTC_OFFSET_SECS).is_ok());
        for bad in [
            MAX_UTC_OFFSET_SECS + 1,
            -MAX_UTC_OFFSET_SECS - 1,
            i32::MAX,
            i32::MIN,
        ] {
            let e = f.period_of(0, bad).unwrap_err();
            assert_eq!(e, SerialError::InvalidUtcOffset { offset_secs: bad });
            assert_eq!(e.sqlstate(), "22009");
        }
        // Extreme instants fail cleanly, without overflow panics.
        for t in [i64::MIN, i64::MAX, i64::MIN + 1, i64::MAX - 1] {
            for o in [0, H8, M5, MAX_UTC_OFFSET_SECS, -MAX_UTC_OFFSET_SECS] {
                assert!(matches!(
                    f.period_of(t, o),
                    Err(SerialError::DateOutOfRange { .. })
                ));
            }
        }
    }

    #[test]
    fn spec_validation() {
        let f = fmt("YYYYMMDD");
        assert_eq!(
            SerialSpec::new(f.clone(), 0, None, 32),
            Err(SerialError::InvalidWidth { width: 0 })
        );
        assert_eq!(
            SerialSpec::new(f.clone(), 19, None, 64),
            Err(SerialError::InvalidWidth { width: 19 })
        );
        assert_eq!(
            SerialSpec::new(f.clone(), 6, Some(100), 32),
            Err(SerialError::InvalidPartition { partition: 100 })
        );
        assert_eq!(
            SerialSpec::new(f.clone(), 8, Some(1), 17),
            Err(SerialError::MaxLenTooSmall {
                max_len: 17,
                fixed_len: 18
            })
        );
        for e in [
            SerialSpec::new(f.clone(), 0, None, 32).unwrap_err(),
            SerialSpec::new(f.clone(), 6, Some(100), 32).unwrap_err(),
            SerialSpec::new(f.clone(), 8, Some(1), 17).unwrap_err(),
        ] {
            assert_eq!(e.sqlstate(), "22023");
            assert!(e.hint().is_some());
        }
        let s = SerialSpec::new(f.clone(), 8, Some(1), 18).unwrap();
        assert_eq!(s.fixed_len(), 18);
        assert_eq!(s.max_prefix_len(), 0);
        assert_eq!(s.capacity(), 100_000_000);
        let s = SerialSpec::new(f.clone(), 18, None, 26).unwrap();
        assert_eq!(s.capacity(), 1_000_000_000_000_000_000);
        let s = SerialSpec::new(f, 1, Some(99), 26).unwrap();
        assert_eq!(
            (s.width(), s.partition(), s.max_len(), s.capacity()),
            (1, Some(99), 26, 10)
        );
        assert_eq!(s.format().pattern(), "YYYYMMDD");
    }

    #[test]
    fn render_seed_002_layouts() {
        // Merchant (12) + YYYYMMDD (8) + partition (2) + serial (6) = 28 <= 32 (production).
        let spec = SerialSpec::new(fmt("YYYYMMDD"), 6, Some(3), 32).unwrap();
        let period = spec
            .format()
            .period_of(utc(2015, 12, 18, 10, 0, 0, 0), H8)
            .unwrap();
        assert_eq!(
            spec.render("100000000001", &period, 42).unwrap(),
            "1000000000012015121803000042"
        );
        // … but not in the 26-character test environment.
        let spec26 = SerialSpec::new(fmt("YYYYMMDD"), 6, Some(3), 26).unwrap();
        let e = spec26.render("100000000001", &period, 42).unwrap_err();
        assert_eq!(e, SerialError::TooLong { len: 28, max: 26 });
        assert_eq!(e.sqlstate(), "22001");
        assert!(e.to_string().contains("28 characters") && e.to_string().contains("maximum of 26"));
        // Merchant (12) + YYYYMMDDHH24MISS (14) + serial (6) = 32.
        let spec = SerialSpec::new(fmt("YYYYMMDDHH24MISS"), 6, None, 32).unwrap();
        let period = spec
            .format()
            .period_of(utc(2015, 12, 18, 2, 3, 4, 567), H8)
            .unwrap();
        assert_eq!(
            spec.render("100000000001", &period, 0).unwrap(),
            "10000000000120151218100304000000"
        );
        assert_eq!(
            spec.render("1000000000012", &period, 0).unwrap_err(),
            SerialError::TooLong { len: 33, max: 32 }
        );
        // Lengths count characters, not bytes.
        let spec = SerialSpec::new(fmt("YYMMDD"), 4, None, 12).unwrap();
        let period = spec.format().period_of(0, 0).unwrap();
        assert_eq!(spec.render("订单", &period, 7).unwrap(), "订单7001010007");
        assert!(spec.render("订单号", &period, 7).is_err());
        assert_eq!(spec.render("", &period, 9999).unwrap(), "7001019999");
    }

    #[test]
    fn exhaustion_names_the_period_and_never_wraps() {
        let spec = SerialSpec::new(fmt("YYMMDDHH24"), 2, None, 32).unwrap();
        let period = spec
            .format()
            .period_of(utc(2024, 2, 29, 13, 0, 0, 0), 0)
            .unwrap();
        assert_eq!(spec.render("A", &period, 99).unwrap(), "A2402291399");
        for counter in [100, 101, u64::MAX] {
            let e = spec.render("A", &period, counter).unwrap_err();
            assert_eq!(
                e,
                SerialError::Exhausted {
                    period_text: "24022913".into(),
                    capacity: 100
                }
            );
            assert_eq!(e.sqlstate(), "2200H");
            assert!(
                e.to_string().contains("\"24022913\"") && e.to_string().contains("100"),
                "{e}"
            );
            assert!(e.hint().is_some());
        }
        // Width 18: the largest counter renders in full.
        let spec = SerialSpec::new(fmt("YYYY"), 18, None, 22).unwrap();
        let period = spec.format().period_of(0, 0).unwrap();
        assert_eq!(
            spec.render("", &period, 999_999_999_999_999_999).unwrap(),
            "1970999999999999999999"
        );
        assert!(spec.render("", &period, 1_000_000_000_000_000_000).is_err());
    }

    #[test]
    fn exhaustion_is_checked_before_length() {
        // A counter that is out of range is reported as such even if the prefix is too long.
        let spec = SerialSpec::new(fmt("YYYY"), 1, None, 5).unwrap();
        let period = spec.format().period_of(0, 0).unwrap();
        assert!(matches!(
            spec.render("XX", &period, 10),
            Err(SerialError::Exhausted { .. })
        ));
        assert!(matches!(
            spec.render("XX", &period, 9),
            Err(SerialError::TooLong { len: 7, max: 5 })
        ));
    }
}
