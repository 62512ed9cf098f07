//! Order-number key management: the key-encryption key (KEK) loaded at server start and
//! the per-backend cache of expanded data keys.
//!
//! Threat model (README "Order numbers"): ordinary roles can encode/decode through
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
//! Invariant: a key that does not unwrap under the loaded KEK is an ERROR, never a key.

use crate::errors::{raise, raise_detail, Code};
use crate::gucs;
use id_gen_core::cipher::{self, CipherError, OrderNoKey};
use pgrx::prelude::*;
use std::collections::HashMap;
use zeroize::Zeroizing;

static mut KEK: Option<Zeroizing<[u8; 32]>> = None;
static mut KEK_PROBLEM: Option<String> = None;

/// Reads the KEK; called from `_PG_init` in the postmaster (preload only).
pub fn load_kek_at_startup() {
    let outcome = read_kek();
    // SAFETY: _PG_init runs single-threaded in the postmaster before any backend forks.
    unsafe {
        match outcome {
            Ok(Some(k)) => {
                let fp = cipher::kek_fingerprint(&k);
                KEK = Some(k);
                pgrx::log!(
                    "id_gen: order-number key-encryption key loaded (fingerprint {})",
                    hex(&fp)
                );
            }
            Ok(None) => {}
            Err(msg) => {
                pgrx::warning!("id_gen: {msg}; order numbers are unavailable");
                KEK_PROBLEM = Some(msg);
            }
        }
    }
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
    // SAFETY: written once in the postmaster before fork; read-only afterwards.
    unsafe {
        if let Some(k) = (*(&raw const KEK)).as_ref() {
            return k;
        }
        let problem = (*(&raw const KEK_PROBLEM)).clone();
        raise_detail(
            Code::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "id_gen: no order-number key-encryption key is loaded",
            problem.unwrap_or_else(|| "neither id_gen.order_no_kek_file nor id_gen.order_no_kek_command is set".into()),
            Some("Put 32 random bytes as 64 hex digits in a file readable only by postgres (openssl rand -hex 32 > kek.hex), set id_gen.order_no_kek_file to it in postgresql.conf, keep id_gen in shared_preload_libraries, and restart."),
        )
    }
}

/// Backend-local cache of expanded keys.
struct Cache {
    epoch: u64,
    /// Expanded keys by version. A version's key never changes once created, so these
    /// stay valid until the epoch moves (then they are dropped and zeroed anyway).
    keys: HashMap<u8, OrderNoKey>,
    /// The current version and the statement it was read in: it is re-read once per
    /// statement, so a rotation is seen by the next statement of every session.
    current: Option<(u8, pg_sys::TimestampTz)>,
}

static mut CACHE: Option<Cache> = None;

fn cache() -> &'static mut Cache {
    // SAFETY: backends are single-threaded; no reference outlives the calling function.
    unsafe {
        let c = &mut *(&raw mut CACHE);
        let epoch = crate::shmem::epoch(crate::shmem::Epoch::Keys);
        let c = c.get_or_insert_with(|| Cache {
            epoch,
            keys: HashMap::new(),
            current: None,
        });
        if c.epoch != epoch {
            // Dropping OrderNoKey zeroes its expanded keys.
            c.keys.clear();
            c.current = None;
            c.epoch = epoch;
        }
        c
    }
}

/// Forgets this backend's keys now, and every backend's at commit (or abort).
pub fn keys_changed() {
    if let Some(c) = unsafe { (*(&raw mut CACHE)).as_mut() } {
        // SAFETY (block above): single-threaded backend; see `cache()`.
        c.keys.clear();
        c.current = None;
    }
    pgrx::register_xact_callback(pgrx::PgXactCallbackEvent::Commit, || {
        crate::shmem::bump_epoch(crate::shmem::Epoch::Keys)
    });
    pgrx::register_xact_callback(pgrx::PgXactCallbackEvent::Abort, || {
        // SAFETY: single-threaded backend; the cache may hold uncommitted state.
        if let Some(c) = unsafe { (*(&raw mut CACHE)).as_mut() } {
            c.keys.clear();
            c.current = None;
        }
    });
}

/// The expanded key of version `kv`.
pub fn key(kv: u8) -> &'static OrderNoKey {
    let c = cache();
    if !c.keys.contains_key(&kv) {
        let k = load_key(kv);
        c.keys.insert(kv, k);
    }
    &c.keys[&kv]
}

/// The current key version (used for new 128-bit numbers).
pub fn current_kv() -> u8 {
    // Without a KEK no key is usable: say so first, it is the actionable error.
    let _ = kek();
    let c = cache();
    // SAFETY: reads the start time of the running statement.
    let stmt = unsafe { pg_sys::GetCurrentStatementStartTimestamp() };
    if let Some((kv, at)) = c.current {
        if at == stmt {
            return kv;
        }
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
    .unwrap_or_else(|e: pgrx::spi::Error| {
        raise(Code::ERRCODE_INTERNAL_ERROR, format!("id_gen: {e}"), None)
    });
    match kv {
        Some(v) => {
            c.current = Some((v as u8, stmt));
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
    .unwrap_or_else(|e| raise(Code::ERRCODE_INTERNAL_ERROR, format!("id_gen: {e}"), None))
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
    let code = match e {
        CipherError::NegativeOrderId(_) => Code::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
        CipherError::UnwrapFailed | CipherError::MalformedWrappedKey { .. } => {
            Code::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE
        }
        _ => Code::ERRCODE_INVALID_PARAMETER_VALUE,
    };
    raise(code, format!("id_gen: {e}"), Some(e.hint()))
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
