//! Order-number key management: the key-encryption key (KEK) loaded at server start and
//! the per-backend cache of expanded data keys.
//!
//! Threat model (docs/guide/ids.md "Order numbers"): ordinary roles can encode/decode through
//! functions but never read key material; logical dumps, logs, replicas and backups only
//! ever hold *wrapped* data keys. Superusers and the OS user can always get at keys.
//!
//! * The KEK comes from the file named by `id_gen.order_no_kek_file` or the output of
//!   `id_gen.order_no_kek_command` (both startup-only, superuser-only settings), read
//!   once in the postmaster while preloading; backends inherit it by fork. It is never
//!   stored in a table, a GUC value or a log line.
//! * Data keys (one per key version 1..255) are random, wrapped by the KEK
//!   (AES-256-SIV, bound to the version) in `id_gen.order_no_key_store`, which only the
//!   extension owner can read; functions that need them are SECURITY DEFINER with a
//!   pinned search_path.
//! * Each backend keeps expanded keys in a cache that is dropped (and zeroed) whenever a
//!   key change commits anywhere: a shared epoch counter is bumped at commit.
//!
//! Invariants: a key that does not unwrap under the loaded KEK is an ERROR, never a
//! key. The KEK is set once (a `OnceLock`, in the postmaster). The key cache lives in a
//! `thread_local!` cell; callers use a key inside [`with_key`] and never keep a reference
//! that a later clear could invalidate.

use crate::epochs::{self, Epoch};
use crate::errors::{code_of, raise, raise_detail, spi_failed, Code};
use crate::gucs;
use id_gen_core::cipher::{self, CipherError, OrderNoKey};
use pgrx::prelude::*;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::OnceLock;
use zeroize::Zeroizing;

/// The KEK, or why there is none (`Ok(None)`: not configured). Set in the postmaster.
static KEK: OnceLock<Result<Option<Zeroizing<[u8; 32]>>, String>> = OnceLock::new();

/// Reads the KEK; called from `_PG_init` in the postmaster (preload only).
pub fn load_kek_at_startup() {
    let outcome = read_kek();
    match &outcome {
        Ok(Some(k)) => pgrx::log!(
            "id_gen: order-number key-encryption key loaded (fingerprint {})",
            hex(&cipher::kek_fingerprint(k))
        ),
        Ok(None) => {}
        Err(msg) => pgrx::warning!("id_gen: {msg}; order numbers are unavailable"),
    }
    let _ = KEK.set(outcome);
}

fn read_kek() -> Result<Option<Zeroizing<[u8; 32]>>, String> {
    let file = gucs::ORDER_NO_KEK_FILE.get();
    let command = gucs::ORDER_NO_KEK_COMMAND.get();
    let text: Zeroizing<String> = match (file, command) {
        (None, None) => return Ok(None),
        (Some(_), Some(_)) => {
            return Err(
                "set only one of id_gen.order_no_kek_file and id_gen.order_no_kek_command".into(),
            )
        }
        (Some(path), None) => {
            let path = path.to_string_lossy().into_owned();
            Zeroizing::new(
                std::fs::read_to_string(&path)
                    .map_err(|e| format!("cannot read id_gen.order_no_kek_file \"{path}\": {e}"))?,
            )
        }
        (None, Some(cmd)) => {
            let cmd = cmd.to_string_lossy().into_owned();
            let out = std::process::Command::new("/bin/sh")
                .arg("-c")
                .arg(&cmd)
                .output()
                .map_err(|e| format!("cannot run id_gen.order_no_kek_command: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "id_gen.order_no_kek_command failed with {}",
                    out.status
                ));
            }
            Zeroizing::new(
                String::from_utf8(out.stdout)
                    .map_err(|_| "id_gen.order_no_kek_command printed non-UTF-8".to_string())?,
            )
        }
    };
    cipher::parse_kek(&text)
        .map(Some)
        .map_err(|e| format!("bad key-encryption key: {e}"))
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The loaded KEK, or an ERROR that says how to configure one.
pub fn kek() -> &'static [u8; 32] {
    let problem = match KEK.get() {
        Some(Ok(Some(k))) => return k,
        Some(Err(msg)) => msg.clone(),
        _ => "neither id_gen.order_no_kek_file nor id_gen.order_no_kek_command is set".into(),
    };
    raise_detail(
        Code::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "id_gen: no order-number key-encryption key is loaded",
        problem,
        Some("Put 32 random bytes as 64 hex digits in a file readable only by postgres (openssl rand -hex 32 > kek.hex), set id_gen.order_no_kek_file to it in postgresql.conf, keep id_gen in shared_preload_libraries, and restart."),
    )
}

/// Backend-local cache of expanded keys.
#[derive(Default)]
struct Cache {
    epoch: u64,
    /// Expanded keys by version. A version's key never changes once created, so these
    /// stay valid until the epoch moves (then they are dropped and zeroed anyway).
    keys: HashMap<u8, OrderNoKey>,
    /// The current version and the statement it was read in: it is re-read once per
    /// statement, so a rotation is seen by the next statement of every session.
    current: Option<(u8, pg_sys::TimestampTz)>,
}

impl Cache {
    fn clear(&mut self) {
        // Dropping OrderNoKey zeroes its expanded keys.
        self.keys.clear();
        self.current = None;
    }
}

thread_local! {
    static CACHE: RefCell<Cache> = RefCell::new(Cache::default());
}

/// Runs `f` on the cache after dropping keys of an older epoch. `f` must not raise or
/// run SPI (the borrow is held while it runs).
fn with_cache<R>(f: impl FnOnce(&mut Cache) -> R) -> R {
    let epoch = epochs::current(Epoch::OrderNoKeys);
    CACHE.with_borrow_mut(|c| {
        if c.epoch != epoch {
            c.clear();
            c.epoch = epoch;
        }
        f(c)
    })
}

/// Forgets this backend's keys now, and every backend's at commit (ours also at abort).
pub fn keys_changed() {
    CACHE.with_borrow_mut(Cache::clear);
    epochs::bump_at_commit(Epoch::OrderNoKeys);
    pgrx::register_xact_callback(pgrx::PgXactCallbackEvent::Abort, || {
        // The cache may hold state read inside the aborted transaction.
        CACHE.with_borrow_mut(Cache::clear);
    });
}

/// Runs `f` with the expanded key of version `kv` (loaded and unwrapped on first use).
pub fn with_key<R>(kv: u8, f: impl FnOnce(&OrderNoKey) -> R) -> R {
    if !with_cache(|c| c.keys.contains_key(&kv)) {
        let k = load_key(kv); // SPI and possible ERROR: outside the borrow
        with_cache(|c| c.keys.insert(kv, k));
    }
    let mut f = Some(f);
    if let Some(r) = with_cache(|c| c.keys.get(&kv).and_then(|k| f.take().map(|f| f(k)))) {
        return r;
    }
    // Only if a key change committed between the two borrows (the cache was cleared):
    // use a freshly loaded key once.
    let k = load_key(kv);
    match f {
        Some(f) => f(&k),
        None => unreachable!("f runs only when the key was cached"),
    }
}

/// The current key version (used for new 128-bit numbers).
pub fn current_kv() -> u8 {
    // Without a KEK no key is usable: say so first, it is the actionable error.
    let _ = kek();
    // SAFETY: reads the start time of the running statement.
    let stmt = unsafe { pg_sys::GetCurrentStatementStartTimestamp() };
    let cached = with_cache(|c| c.current.filter(|(_, at)| *at == stmt).map(|(kv, _)| kv));
    if let Some(kv) = cached {
        return kv;
    }
    let kv = Spi::connect(|client| {
        let t = client.select(
            "SELECT key_version FROM id_gen.order_no_key_store WHERE is_current",
            Some(1),
            &[],
        )?;
        if t.is_empty() {
            Ok(None)
        } else {
            t.first().get_one::<i16>()
        }
    })
    .unwrap_or_else(|e: pgrx::spi::Error| spi_failed(e));
    match kv {
        Some(v) => {
            with_cache(|c| c.current = Some((v as u8, stmt)));
            v as u8
        }
        // Not cached: the next call looks again.
        None => raise(
            Code::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "id_gen: there is no current order-number key",
            Some("Create one with SELECT id_gen.create_order_no_key();"),
        ),
    }
}

fn load_kv_row(kv: u8) -> Option<(Vec<u8>, Vec<u8>)> {
    Spi::connect(|client| {
        let t = client.select(
            "SELECT wrapped, kek_fingerprint FROM id_gen.order_no_key_store WHERE key_version OPERATOR(pg_catalog.=) $1",
            Some(1),
            &[(kv as i16).into()],
        )?;
        if t.is_empty() {
            return Ok(None);
        }
        let (w, f) = t.first().get_two::<Vec<u8>, Vec<u8>>()?;
        Ok::<_, pgrx::spi::Error>(w.zip(f))
    })
    .unwrap_or_else(|e| spi_failed(e))
}

fn load_key(kv: u8) -> OrderNoKey {
    let kek = kek();
    let Some((wrapped, fingerprint)) = load_kv_row(kv) else {
        raise(
            Code::ERRCODE_UNDEFINED_OBJECT,
            format!("id_gen: order-number key version {kv} does not exist"),
            Some("Existing versions are listed in id_gen.order_no_keys."),
        )
    };
    match OrderNoKey::from_wrapped(kek, kv, &wrapped) {
        Ok(k) => k,
        Err(e) => raise_detail(
            Code::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("id_gen: cannot unwrap order-number key version {kv}: {e}"),
            format!(
                "loaded key-encryption key fingerprint {}, key version {kv} was wrapped by {}",
                hex(&cipher::kek_fingerprint(kek)),
                hex(&fingerprint)
            ),
            Some(e.hint()),
        ),
    }
}

/// Maps a cipher error on user input to its SQLSTATE.
pub fn cipher_error(e: CipherError) -> ! {
    raise(
        code_of(e.sqlstate()),
        format!("id_gen: {e}"),
        Some(e.hint()),
    )
}

/// A new random data key from the OS random source (pg_strong_random).
pub fn random_dek() -> Zeroizing<[u8; 32]> {
    let mut dek = Zeroizing::new([0u8; 32]);
    // SAFETY: writes exactly 32 bytes into our buffer.
    let ok = unsafe { pg_sys::pg_strong_random(dek.as_mut_ptr().cast(), 32) };
    if !ok {
        raise(
            Code::ERRCODE_INTERNAL_ERROR,
            "id_gen: could not read the OS random source",
            None,
        );
    }
    dek
}
