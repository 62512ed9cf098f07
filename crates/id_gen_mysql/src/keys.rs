//! Order-number keys inside mysqld: where they come from, how they are checked, and the
//! process-wide cache every connection shares.
//!
//! PostgreSQL keeps one random data key per key version, stored only wrapped by its
//! key-encryption key (KEK). `id_gen.export_order_no_keys()` (superuser only) hands out
//! those wrapped rows — never an unwrapped key. MariaDB gets the same two things as files
//! readable only by mysqld's OS user:
//!
//! * the KEK, as PostgreSQL reads it (`id_gen.order_no_kek_file`: 64 hex digits);
//! * the exported rows, one per line, as `psql -At` prints
//!   `SELECT * FROM id_gen.export_order_no_keys()`:
//!   `key_version|\x<wrapped>|\x<kek_fingerprint>|t-or-f` (`|`, tab, comma or space
//!   separated; the `\x` prefixes optional; `#` comments and blank lines ignored).
//!
//! UDFs have no system variables, so the two paths are set in `id_gen_mysql.cnf` in the
//! directory the plugin was loaded from (`@@plugin_dir`, found with `dladdr`), the way a
//! plugin's option file sits next to it:
//!
//! ```text
//! [id_gen]
//! order_no_kek_file  = /etc/mysql/id_gen/kek.hex
//! order_no_keys_file = /etc/mysql/id_gen/order_no_keys.txt
//! ```
//!
//! Relative paths are relative to that directory. The KEK and key files must not be
//! accessible by group or others (mode 0400 or 0600); the `.cnf` must not be writable by
//! group or others (whoever can point it elsewhere can substitute keys).
//!
//! Every row is checked before any key is used: its KEK fingerprint must be the loaded
//! KEK's, and it must unwrap (AES-256-SIV authenticates the version too) — a wrong KEK or an
//! altered file is an error naming both fingerprints, never a key. The expanded keys are
//! cached for the whole process behind a mutex, keyed by the identity and modification time
//! of the three files; each statement's `init` re-checks them (three `stat` calls), so a
//! re-exported key file is used from the next statement on. A failed load is not cached.
//! On unload (`DROP FUNCTION` of the last function, shutdown) the cache is emptied, which
//! zeroes the expanded keys.

use crate::report::{Errno, Fail};
use id_gen_core::cipher::{self, OrderNoKey};
use id_gen_core::layout;
use std::ffi::CStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use zeroize::Zeroizing;

/// Name of the configuration file next to the plugin.
pub const CONFIG_NAME: &str = "id_gen_mysql.cnf";

/// The expanded keys of every exported version, and which one makes new numbers.
pub struct KeySet {
    keys: Vec<OrderNoKey>,
    current: Option<u8>,
    keys_file: PathBuf,
}

/// Shows versions only, never key material.
impl std::fmt::Debug for KeySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeySet")
            .field(
                "versions",
                &self.keys.iter().map(OrderNoKey::kv).collect::<Vec<_>>(),
            )
            .field("current", &self.current)
            .finish_non_exhaustive()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn config_fail(msg: String) -> Fail {
    Fail::Error(Errno::Config, msg)
}

impl KeySet {
    fn key(&self, kv: u8) -> Option<&OrderNoKey> {
        self.keys.iter().find(|k| k.kv() == kv)
    }

    /// The order number of `(gene, seq)` under the current key version.
    pub fn encode(&self, gene: u16, seq: u128) -> Result<[u8; 16], Fail> {
        let seq = u64::try_from(seq).map_err(|_| {
            Fail::Error(
                Errno::OutOfRange,
                format!("id_gen: sequence value {seq} is too large for an order number (at most 2^64-1)"),
            )
        })?;
        let key = self.current.and_then(|kv| self.key(kv)).ok_or_else(|| {
            config_fail(format!(
                "id_gen: {} has no current order-number key; export the keys from PostgreSQL again (SELECT * FROM id_gen.export_order_no_keys())",
                self.keys_file.display()
            ))
        })?;
        Ok(cipher::encode128(key, gene, seq))
    }

    /// The 64-bit order id of an order number. Anything this key set did not make is a
    /// warning (NULL), never an id.
    pub fn decode(&self, no: &[u8; 16]) -> Result<i64, Fail> {
        let invalid = |why: &str| {
            Fail::Warn(
                Errno::WrongValue,
                format!("id_gen: not a valid order number ({why})"),
            )
        };
        let kv = cipher::kv_of_128(no).map_err(|_| invalid("not an id_gen UUIDv8"))?;
        let key = self.key(kv).ok_or_else(|| {
            invalid(&format!(
                "key version {kv} is not in {}; if PostgreSQL has it, export the keys again",
                self.keys_file.display()
            ))
        })?;
        let (gene, seq) = cipher::decode128(key, no)
            .map_err(|_| invalid("altered, mistyped or made with another key"))?;
        if seq > layout::MAX_SEQ64 {
            return Err(Fail::Error(
                Errno::OutOfRange,
                "id_gen: this order number belongs to an id in the 16-byte overflow form, which does not fit a BIGINT".into(),
            ));
        }
        layout::compose(i64::from(gene), seq as i64).map_err(crate::args::layout_fail)
    }
}

/// The canonical lowercase text of a UUID (as PostgreSQL prints it).
pub fn uuid_text(b: &[u8; 16]) -> [u8; 36] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = [b'-'; 36];
    let mut o = 0;
    for (i, byte) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            o += 1;
        }
        out[o] = HEX[usize::from(byte >> 4)];
        out[o + 1] = HEX[usize::from(byte & 0xf)];
        o += 2;
    }
    out
}

fn from_hex(s: &[u8]) -> Option<Vec<u8>> {
    // is_ascii_hexdigit first: from_str_radix alone would accept a leading '+'.
    if !s.len().is_multiple_of(2) || !s.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    let text = std::str::from_utf8(s).ok()?;
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok())
        .collect()
}

/// An order number given as 16 raw bytes, 32 hex digits, or the 36-character UUID text.
pub fn parse_order_no(s: &[u8]) -> Option<[u8; 16]> {
    let hex: Vec<u8> = match s.len() {
        16 => return s.try_into().ok(),
        32 => s.to_vec(),
        36 if [8, 13, 18, 23].iter().all(|&i| s[i] == b'-') => s
            .iter()
            .enumerate()
            .filter(|(i, _)| ![8, 13, 18, 23].contains(i))
            .map(|(_, &c)| c)
            .collect(),
        _ => return None,
    };
    from_hex(&hex)?.try_into().ok()
}

/// Where the two files are, from the `.cnf` text; relative paths against `base`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub kek_file: PathBuf,
    pub keys_file: PathBuf,
}

pub fn parse_config(text: &str, base: &Path) -> Result<Config, String> {
    let (mut kek, mut keys) = (None, None);
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if line.starts_with('[') {
            if line != "[id_gen]" {
                return Err(format!(
                    "line {}: only the [id_gen] group is allowed",
                    n + 1
                ));
            }
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            return Err(format!("line {}: expected `name = value`", n + 1));
        };
        let v = v.trim().trim_matches('"').trim_matches('\'');
        let path = base.join(v);
        match k.trim().replace('-', "_").as_str() {
            "order_no_kek_file" => kek = Some(path),
            "order_no_keys_file" => keys = Some(path),
            other => {
                return Err(format!(
                    "line {}: unknown setting \"{other}\" (known: order_no_kek_file, order_no_keys_file)",
                    n + 1
                ))
            }
        }
    }
    match (kek, keys) {
        (Some(kek_file), Some(keys_file)) => Ok(Config {
            kek_file,
            keys_file,
        }),
        _ => Err("both order_no_kek_file and order_no_keys_file must be set".into()),
    }
}

/// One exported row.
#[derive(Debug)]
struct Wrapped {
    kv: u8,
    wrapped: Vec<u8>,
    fingerprint: Vec<u8>,
    current: bool,
}

fn parse_keys(text: &str) -> Result<Vec<Wrapped>, String> {
    let mut rows = vec![];
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |what: &str| format!("line {}: {what}", n + 1);
        let f: Vec<&str> = line
            .split(|c: char| c == '|' || c == ',' || c.is_whitespace())
            .filter(|s| !s.is_empty())
            .collect();
        if f.len() != 4 {
            return Err(bad(
                "expected key_version|wrapped|kek_fingerprint|is_current (psql -At output)",
            ));
        }
        let kv = f[0]
            .parse::<u8>()
            .ok()
            .filter(|&v| v != 0)
            .ok_or_else(|| bad("key version must be 1 .. 255"))?;
        let bytes = |s: &str| from_hex(s.strip_prefix("\\x").unwrap_or(s).as_bytes());
        let wrapped = bytes(f[1]).ok_or_else(|| bad("wrapped key is not hex"))?;
        let fingerprint = bytes(f[2]).ok_or_else(|| bad("KEK fingerprint is not hex"))?;
        let current = match f[3] {
            "t" | "true" | "1" => true,
            "f" | "false" | "0" => false,
            _ => return Err(bad("is_current must be t or f")),
        };
        if rows.iter().any(|r: &Wrapped| r.kv == kv) {
            return Err(bad(&format!("key version {kv} appears twice")));
        }
        rows.push(Wrapped {
            kv,
            wrapped,
            fingerprint,
            current,
        });
    }
    if rows.iter().filter(|r| r.current).count() > 1 {
        return Err("more than one key version is marked current".into());
    }
    Ok(rows)
}

fn build(kek: &[u8; 32], rows: Vec<Wrapped>, keys_file: &Path) -> Result<KeySet, String> {
    let fp = cipher::kek_fingerprint(kek);
    let mut keys = Vec::with_capacity(rows.len());
    let mut current = None;
    for r in rows {
        if r.fingerprint != fp {
            return Err(format!(
                "key version {} was wrapped by the KEK with fingerprint {}, but the configured KEK has fingerprint {}: use the KEK file PostgreSQL uses",
                r.kv,
                hex(&r.fingerprint),
                hex(&fp)
            ));
        }
        let key = OrderNoKey::from_wrapped(kek, r.kv, &r.wrapped)
            .map_err(|e| format!("cannot unwrap key version {}: {e}", r.kv))?;
        if r.current {
            current = Some(r.kv);
        }
        keys.push(key);
    }
    Ok(KeySet {
        keys,
        current,
        keys_file: keys_file.to_owned(),
    })
}

/// Identity and modification time of a file: a change means "load again".
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: i64,
    mtime_ns: i64,
    mode: u32,
}

fn stamp(what: &str, path: &Path) -> Result<Stamp, String> {
    let m = std::fs::metadata(path)
        .map_err(|e| format!("cannot read the {what} {}: {e}", path.display()))?;
    Ok(Stamp {
        dev: m.dev(),
        ino: m.ino(),
        size: m.size(),
        mtime: m.mtime(),
        mtime_ns: m.mtime_nsec(),
        mode: m.mode(),
    })
}

/// Refuses a key file that group or others can access (`mask` 0o077) or a config file
/// they can write (`mask` 0o022).
fn check_mode(what: &str, path: &Path, s: &Stamp, mask: u32) -> Result<(), String> {
    if s.mode & mask != 0 {
        return Err(format!(
            "the {what} {} has mode {:04o}; it must not be {} by group or others (chmod {})",
            path.display(),
            s.mode & 0o7777,
            if mask == 0o022 {
                "writable"
            } else {
                "accessible"
            },
            if mask == 0o022 { "go-w" } else { "0400" },
        ));
    }
    Ok(())
}

fn read_limited(what: &str, path: &Path) -> Result<Zeroizing<String>, String> {
    use std::io::Read;
    let f = std::fs::File::open(path)
        .map_err(|e| format!("cannot read the {what} {}: {e}", path.display()))?;
    let mut text = Zeroizing::new(String::new());
    // 255 key versions are about 40 kB; refuse anything absurdly larger.
    f.take(1 << 20)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read the {what} {}: {e}", path.display()))?;
    Ok(text)
}

/// Loads and checks everything a config names.
fn load(cfg: &Config) -> Result<(Vec<Stamp>, KeySet), String> {
    let s_kek = stamp("KEK file", &cfg.kek_file)?;
    check_mode("KEK file", &cfg.kek_file, &s_kek, 0o077)?;
    let s_keys = stamp("key file", &cfg.keys_file)?;
    check_mode("key file", &cfg.keys_file, &s_keys, 0o077)?;
    let kek_text = read_limited("KEK file", &cfg.kek_file)?;
    let kek = cipher::parse_kek(&kek_text)
        .map_err(|e| format!("the KEK file {}: {e}", cfg.kek_file.display()))?;
    let rows = parse_keys(&read_limited("key file", &cfg.keys_file)?)
        .map_err(|e| format!("the key file {}: {e}", cfg.keys_file.display()))?;
    let set = build(&kek, rows, &cfg.keys_file)?;
    Ok((vec![s_kek, s_keys], set))
}

/// The directory this library was loaded from (the server's plugin_dir).
fn library_dir() -> Option<PathBuf> {
    // SAFETY: Dl_info is plain data; an all-zero value is valid before dladdr fills it.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let addr = library_dir as *const libc::c_void;
    // SAFETY: dladdr only reads the loader's tables for an address inside this library.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated path owned by the loader while we are loaded.
    let file = unsafe { CStr::from_ptr(info.dli_fname) };
    let path = Path::new(std::ffi::OsStr::from_bytes(file.to_bytes()));
    path.parent().map(Path::to_owned)
}

struct Cached {
    config_stamp: Stamp,
    config: Config,
    files: Vec<Stamp>,
    keys: Arc<KeySet>,
}

static CACHE: Mutex<Option<Cached>> = Mutex::new(None);

/// The keys for a statement that is starting: the cached set while no file changed, else
/// loaded again. The error text says what to fix.
pub fn current() -> Result<Arc<KeySet>, String> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    let dir = DIR
        .get_or_init(library_dir)
        .as_ref()
        .ok_or("cannot find the plugin directory (dladdr failed)")?;
    current_from(&dir.join(CONFIG_NAME))
}

fn current_from(cnf: &Path) -> Result<Arc<KeySet>, String> {
    let wrap = |e: String| format!("id_gen: order-number keys unavailable: {e}");
    let s_cnf = stamp("configuration file", cnf).map_err(|e| {
        wrap(format!(
            "{e} (create it with order_no_kek_file and order_no_keys_file, see README \"MySQL / MariaDB\")"
        ))
    })?;
    check_mode("configuration file", cnf, &s_cnf, 0o022).map_err(wrap)?;
    let mut guard = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    let config = match guard.as_ref() {
        Some(c) if c.config_stamp == s_cnf => c.config.clone(),
        _ => {
            let text = read_limited("configuration file", cnf).map_err(wrap)?;
            let base = cnf.parent().unwrap_or(Path::new("/"));
            parse_config(&text, base).map_err(|e| wrap(format!("{}: {e}", cnf.display())))?
        }
    };
    let files = vec![
        stamp("KEK file", &config.kek_file).map_err(wrap)?,
        stamp("key file", &config.keys_file).map_err(wrap)?,
    ];
    if let Some(c) = guard.as_ref() {
        if c.config_stamp == s_cnf && c.files == files {
            return Ok(Arc::clone(&c.keys));
        }
    }
    // Drop (and so zero) the old set before loading the new one.
    *guard = None;
    let (files, set) = load(&config).map_err(wrap)?;
    let keys = Arc::new(set);
    *guard = Some(Cached {
        config_stamp: s_cnf,
        config,
        files,
        keys: Arc::clone(&keys),
    });
    Ok(keys)
}

/// Runs when the library is unloaded (the server's `dlclose` after `DROP FUNCTION` of the
/// last id_gen function, or at shutdown): drops the cached keys, which zeroes them. A lock
/// held elsewhere (impossible after the last function is gone) is left alone rather than
/// waited for.
extern "C" fn forget_keys_on_unload() {
    if let Ok(mut g) = CACHE.try_lock() {
        *g = None;
    }
}

#[used]
#[link_section = ".fini_array"]
static FORGET_KEYS_ON_UNLOAD: extern "C" fn() = forget_keys_on_unload;

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const KEK_HEX: &str = "202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f";

    fn kek() -> [u8; 32] {
        *cipher::parse_kek(KEK_HEX).unwrap()
    }

    fn dek(kv: u8) -> [u8; 32] {
        core::array::from_fn(|i| i as u8 ^ kv)
    }

    /// A key file line as `psql -At` prints `SELECT * FROM id_gen.export_order_no_keys()`.
    fn row(kek: &[u8; 32], kv: u8, current: bool) -> String {
        format!(
            "{kv}|\\x{}|\\x{}|{}",
            hex(&cipher::wrap_key(kek, kv, &dek(kv))),
            hex(&cipher::kek_fingerprint(kek)),
            if current { "t" } else { "f" }
        )
    }

    #[test]
    fn uuid_text_round_trip() {
        let b: [u8; 16] = core::array::from_fn(|i| (i * 17) as u8);
        let t = uuid_text(&b);
        assert_eq!(&t, b"00112233-4455-6677-8899-aabbccddeeff");
        assert_eq!(parse_order_no(&t), Some(b));
        assert_eq!(parse_order_no(b"00112233445566778899AABBCCDDEEFF"), Some(b));
        assert_eq!(parse_order_no(&b), Some(b));
        for bad in [
            &b"00112233-4455-6677-8899-aabbccddeef"[..],
            b"0011223344556677-8899-aabbccddeeff",
            b"00112233-4455-6677-8899-aabbccddeefg",
            b"",
            b"{00112233-4455-6677-8899-aabbccddeeff}",
        ] {
            assert_eq!(
                parse_order_no(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn keys_from_psql_output_encode_like_the_core() {
        let k = kek();
        let text = format!(
            "# exported\n{}\n\n{}\n",
            row(&k, 1, false),
            row(&k, 2, true)
        );
        let set = build(&k, parse_keys(&text).unwrap(), Path::new("keys.txt")).unwrap();
        let id = layout::compose(16043, 42).unwrap();
        let no = set.encode(16043, 42).unwrap();
        let k2 = OrderNoKey::new(&dek(2), 2).unwrap();
        assert_eq!(no, cipher::encode128(&k2, 16043, 42), "current version 2");
        assert_eq!(set.decode(&no), Ok(id));
        let k1 = OrderNoKey::new(&dek(1), 1).unwrap();
        assert_eq!(
            set.decode(&cipher::encode128(&k1, 7, 9)),
            Ok(layout::compose(7, 9).unwrap())
        );
        // Space-separated without \x works too.
        let plain = row(&k, 1, true).replace('|', " ").replace("\\x", "");
        assert_eq!(parse_keys(&plain).unwrap().len(), 1);
    }

    #[test]
    fn forged_numbers_are_warnings_never_ids() {
        let k = kek();
        let set = build(&k, parse_keys(&row(&k, 1, true)).unwrap(), Path::new("k")).unwrap();
        let no = set.encode(3, 5).unwrap();
        for bit in 0..128 {
            let mut t = no;
            t[bit / 8] ^= 0x80 >> (bit % 8);
            assert!(
                matches!(set.decode(&t), Err(Fail::Warn(Errno::WrongValue, _))),
                "bit {bit}"
            );
        }
        let mut other_kv = no;
        other_kv[2] = 9;
        match set.decode(&other_kv) {
            Err(Fail::Warn(_, m)) => assert!(m.contains("key version 9 is not in k"), "{m}"),
            r => panic!("{r:?}"),
        }
        let wide = set.encode(3, 1 << 47).unwrap();
        assert!(matches!(
            set.decode(&wide),
            Err(Fail::Error(Errno::OutOfRange, _))
        ));
        assert!(matches!(
            set.encode(3, 1 << 64),
            Err(Fail::Error(Errno::OutOfRange, _))
        ));
    }

    #[test]
    fn wrong_kek_or_bad_rows_are_refused() {
        let k = kek();
        let mut other = k;
        other[0] ^= 1;
        let e = build(
            &other,
            parse_keys(&row(&k, 1, true)).unwrap(),
            Path::new("k"),
        )
        .err()
        .unwrap();
        assert!(e.contains(&hex(&cipher::kek_fingerprint(&k))), "{e}");
        assert!(e.contains(&hex(&cipher::kek_fingerprint(&other))), "{e}");
        // Right fingerprint, wrong version binding: the SIV tag refuses it.
        let moved = row(&k, 1, true).replacen("1|", "2|", 1);
        let e = build(&k, parse_keys(&moved).unwrap(), Path::new("k"))
            .err()
            .unwrap();
        assert!(e.contains("cannot unwrap key version 2"), "{e}");
        for bad in ["1|zz|00|t", "0|00|00|t", "1|00|00", "1|00|00|maybe"] {
            assert!(parse_keys(bad).is_err(), "{bad}");
        }
        let twice = format!("{}\n{}", row(&k, 1, true), row(&k, 1, false));
        assert!(parse_keys(&twice).unwrap_err().contains("appears twice"));
        let two_current = format!("{}\n{}", row(&k, 1, true), row(&k, 2, true));
        assert!(parse_keys(&two_current)
            .unwrap_err()
            .contains("more than one"));
        let none = build(&k, vec![], Path::new("k")).unwrap();
        assert!(matches!(
            none.encode(1, 1),
            Err(Fail::Error(Errno::Config, _))
        ));
    }

    #[test]
    fn config_parsing() {
        let base = Path::new("/p");
        let c = parse_config(
            "# c\n[id_gen]\norder_no_kek_file = kek.hex\norder-no-keys-file=\"/k/keys.txt\"\n",
            base,
        )
        .unwrap();
        assert_eq!(c.kek_file, PathBuf::from("/p/kek.hex"));
        assert_eq!(c.keys_file, PathBuf::from("/k/keys.txt"));
        assert!(parse_config("order_no_kek_file = a\n", base).is_err());
        assert!(parse_config("[mysqld]\n", base).is_err());
        assert!(parse_config("typo = 1\n", base)
            .unwrap_err()
            .contains("unknown setting"));
    }

    #[test]
    fn files_modes_and_reload() {
        let dir = std::env::temp_dir().join(format!("idg_mysql_keys_{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, text: &str, mode: u32| {
            let p = dir.join(name);
            let _ = std::fs::remove_file(&p);
            std::fs::write(&p, text).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        let k = kek();
        let cnf = dir.join(CONFIG_NAME);
        assert!(current_from(&cnf).unwrap_err().contains("create it with"));
        write(
            CONFIG_NAME,
            "[id_gen]\norder_no_kek_file=kek.hex\norder_no_keys_file=keys.txt\n",
            0o644,
        );
        write("kek.hex", &format!("{KEK_HEX}\n"), 0o644);
        write("keys.txt", &row(&k, 1, true), 0o600);
        let e = current_from(&cnf).unwrap_err();
        assert!(e.contains("mode 0644") && e.contains("kek.hex"), "{e}");
        write("kek.hex", &format!("{KEK_HEX}\n"), 0o400);
        let a = current_from(&cnf).unwrap();
        let b = current_from(&cnf).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "unchanged files: the cached set");
        write(
            "keys.txt",
            &format!("{}\n{}", row(&k, 1, false), row(&k, 2, true)),
            0o600,
        );
        let c = current_from(&cnf).unwrap();
        assert!(!Arc::ptr_eq(&a, &c), "a new key file is loaded again");
        assert_eq!(c.current, Some(2));
        write(
            CONFIG_NAME,
            "[id_gen]\norder_no_kek_file=kek.hex\norder_no_keys_file=keys.txt\n",
            0o666,
        );
        assert!(current_from(&cnf).unwrap_err().contains("writable"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
