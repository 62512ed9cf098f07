//! The typed key of a slot of the shared segment cache.
//!
//! A slot caches the segments of one *counter*: a counter group of a named sequence, or
//! one period of a dated serial. Both kinds live in one map, so the key says which kind
//! it is; names and period texts are stored in separate fixed-size fields, never joined
//! into one string and split again.
//!
//! Invariants: a key is plain old data (`repr(C)`, `Copy`, compared bytewise by the
//! dynahash map); the name field holds a validated `SeqName`, so the two kinds can never
//! be confused, and a user-supplied sequence name can never reach a serial's counter.

use crate::errors::{raise, Code};
use id_gen_core::name::SeqName;

const KIND_SEQUENCE: u32 = 1;
const KIND_SERIAL_PERIOD: u32 = 2;

/// Longest period text a key holds (the date part of a serial, e.g. `2026-11-23-14`).
pub const MAX_PERIOD_TEXT: usize = 48;

#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SlotKey {
    pub dboid: u32,
    kind: u32,
    group: u32,
    name: [u8; 64],
    period: [u8; MAX_PERIOD_TEXT],
}

/// What a slot key names, for display and for the worker's catalog access.
pub enum Counter<'a> {
    Sequence { name: &'a str },
    SerialPeriod { serial: &'a str, period: &'a str },
}

fn text(bytes: &[u8]) -> &str {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    std::str::from_utf8(&bytes[..end]).unwrap_or("?")
}

impl SlotKey {
    /// Counter group `group` of sequence `name` in database `dboid`.
    pub fn sequence(dboid: u32, name: &SeqName, group: u32) -> SlotKey {
        SlotKey {
            dboid,
            kind: KIND_SEQUENCE,
            group,
            name: name.to_key(),
            period: [0; MAX_PERIOD_TEXT],
        }
    }

    /// Period `period_text` of serial `serial` in database `dboid`.
    pub fn serial_period(dboid: u32, serial: &SeqName, period_text: &str) -> SlotKey {
        if period_text.len() > MAX_PERIOD_TEXT {
            raise(
                Code::ERRCODE_INVALID_PARAMETER_VALUE,
                format!("id_gen: the date part \"{period_text}\" of serial \"{serial}\" is longer than {MAX_PERIOD_TEXT} bytes"),
                Some("Use a shorter date format."),
            );
        }
        let mut period = [0; MAX_PERIOD_TEXT];
        period[..period_text.len()].copy_from_slice(period_text.as_bytes());
        SlotKey {
            dboid,
            kind: KIND_SERIAL_PERIOD,
            group: 0,
            name: serial.to_key(),
            period,
        }
    }

    pub fn counter(&self) -> Counter<'_> {
        if self.kind == KIND_SERIAL_PERIOD {
            Counter::SerialPeriod {
                serial: text(&self.name),
                period: text(&self.period),
            }
        } else {
            Counter::Sequence {
                name: text(&self.name),
            }
        }
    }

    pub fn group(&self) -> u32 {
        self.group
    }

    /// True for a period of serial `serial` (any period) in database `dboid`.
    pub fn is_period_of(&self, dboid: u32, serial: &SeqName) -> bool {
        self.kind == KIND_SERIAL_PERIOD && self.dboid == dboid && self.name == serial.to_key()
    }

    /// `name` for a sequence, `serial@period` for a serial period (the status view).
    pub fn display(&self) -> String {
        match self.counter() {
            Counter::Sequence { name } => name.to_owned(),
            Counter::SerialPeriod { serial, period } => format!("{serial}@{period}"),
        }
    }

    /// `sequence "name"` or `serial "name"`, for messages.
    pub fn describe(&self) -> String {
        match self.counter() {
            Counter::Sequence { name } => format!("sequence \"{name}\""),
            Counter::SerialPeriod { serial, .. } => format!("serial \"{serial}\""),
        }
    }
}
