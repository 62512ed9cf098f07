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
//! The clock is `clock::id_clock_ms` (the server's, shifted by the test-only
//! `id_gen.test_clock_offset`). The backend-local cache of specs lives in a
//! `thread_local!` cell and is dropped when a serial is created or dropped anywhere
//! (an invalidation epoch); callers get copies, never references into it.

use crate::access::{self, Kind, Stamp};
use crate::clock::{self, Deadline};
use crate::epochs::{self, Epoch};
use crate::errors::{checked_name, raise, raise_core, required, spi_failed, Code};
use crate::segments::local::PeriodKey;
use crate::segments::{self, PeriodClosed};
use id_gen_core::serial::{DateFormat, SerialError, SerialSpec};
use pgrx::prelude::*;
use std::cell::RefCell;
use std::collections::HashMap;

/// Longest serial name (the shared key also holds the period text).
const MAX_SERIAL_NAME: usize = 40;

#[derive(Clone)]
struct Spec {
    spec: SerialSpec,
    /// From pg_tzset, which caches zones for the life of the process.
    tz: *mut pg_sys::pg_tz,
}

#[derive(Default)]
struct Cache {
    epoch: u64,
    specs: HashMap<String, Spec>,
    /// The period each serial last drew from in this backend.
    current: HashMap<String, PeriodKey>,
    /// Serials the current user was allowed to use, with the access stamp of the check.
    allowed: HashMap<String, Stamp>,
}

thread_local! {
    static CACHE: RefCell<Cache> = RefCell::new(Cache::default());
}

/// Runs `f` on the cache after dropping specs of an older epoch. `f` must not raise or
/// run SPI (the borrow is held while it runs).
fn with_cache<R>(f: impl FnOnce(&mut Cache) -> R) -> R {
    let epoch = epochs::current(Epoch::SerialDefinitions);
    CACHE.with_borrow_mut(|c| {
        if c.epoch != epoch {
            c.specs.clear();
            c.epoch = epoch;
        }
        f(c)
    })
}

fn serial_error(e: SerialError) -> ! {
    raise_core(e.sqlstate(), &e, e.hint().as_deref())
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
    if let Some(spec) = with_cache(|c| c.specs.get(serial).cloned()) {
        return spec;
    }
    let row = Spi::connect_mut(|client| {
        let t = client.update(
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
    .unwrap_or_else(|e| spi_failed(e));
    let Some((fmt, width, partition, max_len, tz)) = row else {
        raise(
            Code::ERRCODE_UNDEFINED_OBJECT,
            format!("id_gen: serial \"{serial}\" does not exist"),
            Some("Create it with SELECT id_gen.create_serial('name', 'YYYYMMDD', ...); existing ones are in id_gen.serials."),
        )
    };
    let spec = Spec {
        spec: build_spec(&fmt, width, partition, max_len),
        tz: time_zone(&tz),
    };
    with_cache(|c| c.specs.insert(serial.to_owned(), spec.clone()));
    spec
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

/// How long `next_serial` keeps re-reading the clock when the serial's catalog already
/// moved to a later period than this session's clock shows.
const PERIOD_CATCH_UP_MS: u64 = 2_000;

/// The next serial number: `prefix || date part || [partition] || serial`.
#[pg_extern(volatile, parallel_unsafe)]
fn next_serial(serial: Option<&str>, prefix: default!(Option<&str>, "''")) -> String {
    let serial = checked_name(required(serial, "serial"));
    let prefix = required(prefix, "prefix");
    let serial = serial.as_str();
    require_usage(serial);
    let spec = spec_of(serial);
    let deadline = Deadline::after_ms(PERIOD_CATCH_UP_MS);
    loop {
        let now = clock::id_clock_ms();
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
        let key = PeriodKey {
            serial: serial.to_owned(),
            text: period.text.clone(),
            local_start: period.start_ms + offset * 1000,
        };
        let previous = with_cache(|c| c.current.insert(serial.to_owned(), key.clone()));
        if let Some(prev) = previous.filter(|p| *p != key) {
            segments::release_period(&prev); // that period is over: free its slot
        }
        match segments::take_period(&key) {
            Ok(counter) => {
                return spec
                    .spec
                    .render(prefix, &period, counter as u64)
                    .unwrap_or_else(|e| serial_error(e));
            }
            Err(PeriodClosed) => {
                segments::release_period(&key);
                with_cache(|c| c.current.remove(serial));
                if deadline.passed() {
                    break;
                }
                clock::nap(1);
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
    name: Option<&str>,
    date_format: default!(Option<&str>, "'YYYYMMDD'"),
    width: default!(Option<i32>, 8),
    partition: default!(Option<i32>, "NULL"),
    max_length: default!(Option<i32>, 32),
    time_zone: default!(Option<&str>, "NULL"),
    step: default!(Option<i32>, 100),
    comment: default!(Option<&str>, "NULL"),
) -> String {
    let name = required(name, "name");
    let date_format = required(date_format, "date_format");
    let width = required(width, "width");
    let max_length = required(max_length, "max_length");
    let step = required(step, "step");
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
    let owner = access::current_role_name();
    let inserted = access::as_catalog_owner(|| {
        Spi::connect_mut(|client| {
            let t = client.update(
                "INSERT INTO id_gen.serials (name, date_format, width, partition, max_length, time_zone, step, comment, owner) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (name) DO NOTHING RETURNING name",
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
                    owner.as_str().into(),
                ],
            )?;
            if t.is_empty() {
                return Ok(false);
            }
            // Grants left by a row deleted behind id_gen's back must not carry over.
            access::delete_grants(client, Kind::Serial, name)?;
            Ok::<_, pgrx::spi::Error>(true)
        })
    })
    .unwrap_or_else(|e| spi_failed(e));
    if !inserted {
        raise(
            Code::ERRCODE_DUPLICATE_OBJECT,
            format!("id_gen: serial \"{name}\" already exists"),
            Some("Drop it first with id_gen.drop_serial, or pick another name."),
        );
    }
    serials_changed(&checked);
    name.to_owned()
}

/// Drops a serial and forgets its cached periods.
#[pg_extern(volatile, parallel_unsafe)]
fn drop_serial(name: Option<&str>, if_exists: default!(Option<bool>, false)) -> bool {
    let name = checked_name(required(name, "name"));
    let if_exists = required(if_exists, "if_exists");
    let deleted = access::drop_object(Kind::Serial, name.as_str());
    serials_changed(&name);
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
fn serials_changed(name: &id_gen_core::name::SeqName) {
    let prev = with_cache(|c| {
        c.specs.remove(name.as_str());
        c.current.remove(name.as_str())
    });
    if let Some(prev) = prev {
        segments::release_period(&prev);
    }
    segments::forget_serial(name);
    epochs::bump_at_commit(Epoch::SerialDefinitions);
    access::changed();
}

/// Raises 42501 unless the current user may take numbers of `serial` (the decision is
/// cached per backend under the access stamp).
fn require_usage(serial: &str) {
    access::prepare_cache();
    let stamp = access::stamp();
    if with_cache(|c| c.allowed.get(serial) == Some(&stamp)) {
        return;
    }
    access::require_usage(Kind::Serial, serial);
    with_cache(|c| c.allowed.insert(serial.to_owned(), stamp));
}
