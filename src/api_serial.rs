//! Dated business serial numbers (seeds 002 and 004): `prefix + date part + [2-digit
//! partition] + zero-padded serial`, the serial restarting every period (day, hour, ...
//! — the finest unit of the date format) in the serial's time zone.
//!
//! Built on the segment engine, not a row lock per call: each (serial, period) is a slot
//! of the shared cache whose segments the worker reserves from `id_gen.serials`, which
//! keeps the current period and the largest counter reserved in it (committed durably
//! before use, like every segment). So:
//! * no value repeats within a period, across restarts and crashes;
//! * a serial's date part and counter come from the same slot: no serial of yesterday's
//!   counter carries today's date; once the catalog moved to a new period, the old
//!   period's slot is refused and the caller re-reads the clock;
//! * the serial part never overflows its width (an ERROR names the period), and the total
//!   length is checked against `max_length` before anything is drawn.
//!
//! The clock is the server's, shifted by the test-only `id_gen.test_clock_offset`.

use crate::api_sequences::{release_serial_period, take_serial, PeriodClosed, SERIAL_SEP};
use crate::errors::{checked_name, raise, raise_core, Code};
use id_gen_core::serial::{DateFormat, SerialError, SerialSpec};
use pgrx::prelude::*;
use std::collections::HashMap;

/// Longest serial name (the shared key also holds the period text).
const MAX_SERIAL_NAME: usize = 40;

#[derive(Clone)]
struct Spec {
    spec: SerialSpec,
    /// From pg_tzset, which caches zones for the life of the process.
    tz: *mut pg_sys::pg_tz,
}

struct Cache {
    epoch: u64,
    specs: HashMap<String, Spec>,
    /// The period key each serial last drew from in this backend.
    current: HashMap<String, String>,
}

static mut CACHE: Option<Cache> = None;

fn cache() -> &'static mut Cache {
    // SAFETY: backends are single-threaded; no reference outlives a call below.
    unsafe {
        let c = &mut *(&raw mut CACHE);
        let epoch = crate::shmem::epoch(crate::shmem::Epoch::Serials);
        let c = c.get_or_insert_with(|| Cache {
            epoch,
            specs: HashMap::new(),
            current: HashMap::new(),
        });
        if c.epoch != epoch {
            c.specs.clear();
            c.epoch = epoch;
        }
        c
    }
}

fn serial_error(e: SerialError) -> ! {
    raise_core(e.sqlstate(), &e, e.hint())
}

fn time_zone(name: &str) -> *mut pg_sys::pg_tz {
    let c = std::ffi::CString::new(name).unwrap_or_default();
    // SAFETY: pg_tzset reads the zone database and caches the result for the process.
    let tz = unsafe { pg_sys::pg_tzset(c.as_ptr()) };
    if tz.is_null() {
        raise(
            Code::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("id_gen: time zone \"{name}\" is not recognized"),
            Some("Use a name from pg_timezone_names, e.g. 'Asia/Shanghai' or 'UTC'."),
        );
    }
    tz
}

/// UTC offset (seconds east) of `tz` at `utc_ms`.
fn offset_secs(tz: *mut pg_sys::pg_tz, utc_ms: i64) -> i32 {
    let t: pg_sys::pg_time_t = utc_ms.div_euclid(1000);
    // SAFETY: tz came from pg_tzset; pg_localtime returns a pointer to static storage
    // that we read at once.
    unsafe {
        let tm = pg_sys::pg_localtime(&t, tz);
        if tm.is_null() {
            0
        } else {
            (*tm).tm_gmtoff as i32
        }
    }
}

/// A copy of the serial's spec: the cache may be cleared while a caller still works
/// with it (a `create_serial` committed elsewhere bumps the epoch).
fn spec_of(serial: &str) -> Spec {
    let c = cache();
    if !c.specs.contains_key(serial) {
        let row = Spi::connect(|client| {
            let t = client.select(
                "SELECT date_format, width, partition, max_length, time_zone FROM id_gen.serials WHERE name = $1",
                Some(1),
                &[serial.into()],
            )?;
            if t.is_empty() {
                return Ok(None);
            }
            let r = t.first();
            Ok::<_, pgrx::spi::Error>(Some((
                r.get::<String>(1)?.unwrap_or_default(),
                r.get::<i32>(2)?.unwrap_or(8),
                r.get::<i32>(3)?,
                r.get::<i32>(4)?.unwrap_or(32),
                r.get::<String>(5)?.unwrap_or_else(|| "UTC".into()),
            )))
        })
        .unwrap_or_else(|e| raise(Code::ERRCODE_INTERNAL_ERROR, format!("id_gen: {e}"), None));
        let Some((fmt, width, partition, max_len, tz)) = row else {
            raise(
                Code::ERRCODE_UNDEFINED_OBJECT,
                format!("id_gen: serial \"{serial}\" does not exist"),
                Some("Create it with SELECT id_gen.create_serial('name', 'YYYYMMDD', ...); existing ones are in id_gen.serials."),
            )
        };
        let spec = build_spec(&fmt, width, partition, max_len);
        c.specs.insert(
            serial.to_owned(),
            Spec {
                spec,
                tz: time_zone(&tz),
            },
        );
    }
    c.specs[serial].clone()
}

fn build_spec(fmt: &str, width: i32, partition: Option<i32>, max_len: i32) -> SerialSpec {
    let format = DateFormat::parse(fmt).unwrap_or_else(|e| serial_error(e));
    let width = u8::try_from(width).unwrap_or(0);
    let partition = partition.map(|p| u8::try_from(p).unwrap_or(u8::MAX));
    SerialSpec::new(
        format,
        width,
        partition,
        usize::try_from(max_len).unwrap_or(0),
    )
    .unwrap_or_else(|e| serial_error(e))
}

/// The next serial number: `prefix || date part || [partition] || serial`.
#[pg_extern(volatile, parallel_unsafe)]
fn next_serial(serial: &str, prefix: default!(&str, "''")) -> String {
    let spec = spec_of(serial);
    for _ in 0..2000 {
        let now = crate::api_snowflake::now_ms();
        let offset = offset_secs(spec.tz, now) as i64;
        let period = spec
            .spec
            .format()
            .period_of(now, offset as i32)
            .unwrap_or_else(|e| serial_error(e));
        // Refuse a too-long result before drawing a value (nothing is lost).
        spec.spec
            .render(prefix, &period, 0)
            .unwrap_or_else(|e| serial_error(e));
        // The period's identity is its local start (UTC start + offset): it is the same for
        // every instant whose date text is the same, also across a DST change, where
        // the UTC start of "today" moves. Keying by the UTC start would restart the
        // counter (and repeat serials) when the offset changes mid-period.
        let local_start = period.start_ms + offset * 1000;
        let key = format!(
            "{serial}{SERIAL_SEP}{}{SERIAL_SEP}{local_start}",
            period.text
        );
        let c = cache();
        if let Some(prev) = c.current.insert(serial.to_owned(), key.clone()) {
            if prev != key {
                release_serial_period(&prev); // that period is over: free its slot
            }
        }
        match take_serial(&key) {
            Ok(counter) => {
                return spec
                    .spec
                    .render(prefix, &period, counter as u64)
                    .unwrap_or_else(|e| serial_error(e));
            }
            Err(PeriodClosed) => {
                release_serial_period(&key);
                cache().current.remove(serial);
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
    }
    raise(
        Code::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("id_gen: serial \"{serial}\" has moved on to a later period than this session's clock"),
        Some("The clock seen by this session is behind the one that opened the serial's current period (check id_gen.test_clock_offset)."),
    )
}

/// Creates a dated serial. `date_format` uses YYYY, YY, MM, DD, HH24, MI, SS (and '-');
/// its finest unit is the period after which the serial restarts.
#[pg_extern(volatile, parallel_unsafe)]
#[allow(clippy::too_many_arguments)]
fn create_serial(
    name: &str,
    date_format: default!(&str, "'YYYYMMDD'"),
    width: default!(i32, 8),
    partition: default!(Option<i32>, "NULL"),
    max_length: default!(i32, 32),
    time_zone: default!(Option<&str>, "NULL"),
    step: default!(i32, 100),
    comment: default!(Option<&str>, "NULL"),
) -> String {
    let checked = checked_name(name);
    if checked.as_str().len() > MAX_SERIAL_NAME {
        raise(
            Code::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("id_gen: serial name \"{name}\" is longer than {MAX_SERIAL_NAME} bytes"),
            None,
        );
    }
    build_spec(date_format, width, partition, max_length);
    let tz_name = match time_zone {
        Some(t) => t.to_owned(),
        None => Spi::get_one::<String>("SELECT current_setting('TimeZone')")
            .ok()
            .flatten()
            .unwrap_or_else(|| "UTC".into()),
    };
    let _ = self::time_zone(&tz_name);
    if !(1..=1_000_000).contains(&step) {
        raise(
            Code::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("id_gen: step must be between 1 and 1000000, got {step}"),
            Some("Serial numbers reserved per refill; a crash loses at most two steps of a period's numbers."),
        );
    }
    let inserted = Spi::connect_mut(|client| {
        client
            .update(
                "INSERT INTO id_gen.serials (name, date_format, width, partition, max_length, time_zone, step, comment) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (name) DO NOTHING RETURNING name",
                None,
                &[
                    name.into(),
                    date_format.into(),
                    width.into(),
                    partition.into(),
                    max_length.into(),
                    tz_name.as_str().into(),
                    step.into(),
                    comment.into(),
                ],
            )
            .map(|t| !t.is_empty())
    })
    .unwrap_or_else(|e| raise(Code::ERRCODE_INTERNAL_ERROR, format!("id_gen: {e}"), None));
    if !inserted {
        raise(
            Code::ERRCODE_DUPLICATE_OBJECT,
            format!("id_gen: serial \"{name}\" already exists"),
            Some("Drop it first with id_gen.drop_serial, or pick another name."),
        );
    }
    serials_changed(name);
    name.to_owned()
}

/// Drops a serial and forgets its cached periods.
#[pg_extern(volatile, parallel_unsafe)]
fn drop_serial(name: &str, if_exists: default!(bool, false)) -> bool {
    let deleted = Spi::connect_mut(|client| {
        client
            .update(
                "DELETE FROM id_gen.serials WHERE name = $1 RETURNING name",
                None,
                &[name.into()],
            )
            .map(|t| !t.is_empty())
    })
    .unwrap_or_else(|e| raise(Code::ERRCODE_INTERNAL_ERROR, format!("id_gen: {e}"), None));
    serials_changed(name);
    if !deleted && !if_exists {
        raise(
            Code::ERRCODE_UNDEFINED_OBJECT,
            format!("id_gen: serial \"{name}\" does not exist"),
            Some("Pass if_exists => true to ignore a missing serial."),
        );
    }
    deleted
}

/// Forgets cached periods of `name` here and, at commit, every backend's specs.
fn serials_changed(name: &str) {
    let c = cache();
    c.specs.remove(name);
    if let Some(prev) = c.current.remove(name) {
        release_serial_period(&prev);
    }
    if crate::shmem::available() {
        let prefix = format!("{name}{SERIAL_SEP}");
        // SAFETY: MyDatabaseId is set in a connected backend.
        let db = unsafe { pg_sys::MyDatabaseId }.to_u32();
        for key in crate::shmem::keys_with_prefix(db, prefix.as_bytes()) {
            crate::shmem::purge_key(&key);
        }
    }
    pgrx::register_xact_callback(pgrx::PgXactCallbackEvent::Commit, || {
        crate::shmem::bump_epoch(crate::shmem::Epoch::Serials)
    });
}
