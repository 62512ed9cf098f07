//! `conformance` — the Rust client's conformance tool (docs/routing-protocol.md §6), the
//! same command line as every other client's, run by `tests/cluster/test_conformance.py`:
//!
//! ```text
//! conformance genes < lines        # "i:<bigint>", "t:<text>", "u:<uuid>": one gene per line
//! conformance load --routes DSN --shard NAME=DSN [--shard ...] --table T --sequence Q
//!     --owners N --seconds S --log FILE [--stop-file F] [--read-every K]
//!     [--refresh-interval-ms MS] [--no-listen] [--retry-limit N] [--backoff-max-ms MS]
//! conformance bench (the same flags but --log) --mode tx|lookup [--direct | --side-by-side]
//!     [--warm-up-seconds S]
//! ```
//!
//! Invariants: genes only through `id_gen_client::Key`; a log line `owner,id` is written
//! (whole) only after its transaction committed; failures are counted, never fatal; the
//! last two stdout lines are `reads R empty E unknown U` and `committed N failed M retries
//! X`; the table name reaches SQL only quoted and checked (`[a-z0-9_]`, one optional
//! schema). Exit 0 when the load ran, 2 for bad arguments, 1 when the routes could not be
//! read at the start.
#![forbid(unsafe_code)]

#[path = "shared/direct_pools.rs"]
mod direct_pools;
use direct_pools::direct_pools;

use id_gen_client::key::parse_uuid;
use id_gen_client::tokio_postgres::types::Type;
use id_gen_client::{Error, Key, Router, RouterConfig};
use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const USAGE: &str = "usage: conformance genes < owners
       conformance load --routes DSN --shard NAME=DSN [--shard NAME=DSN ...] --table T
                        --sequence Q --owners N --seconds S --log FILE [--stop-file F]
                        [--read-every K] [--refresh-interval-ms MS] [--no-listen]
                        [--retry-limit N] [--backoff-max-ms MS]
       conformance bench (the flags of load but --log) --mode tx|lookup
                        [--direct | --side-by-side] [--warm-up-seconds S]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("genes") => match genes() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(2, &e),
        },
        Some(command @ ("load" | "bench")) => {
            let opts = match LoadOpts::parse(&args[1..], command == "bench") {
                Ok(opts) => opts,
                Err(e) => return fail(2, &format!("{e}\n{USAGE}")),
            };
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime");
            if command == "bench" {
                runtime.block_on(bench(opts))
            } else {
                runtime.block_on(load(opts))
            }
        }
        _ => fail(2, USAGE),
    }
}

fn fail(code: u8, message: &str) -> ExitCode {
    eprintln!("conformance: {message}");
    ExitCode::from(code)
}

fn genes() -> Result<(), String> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for (n, line) in std::io::stdin().lock().lines().enumerate() {
        let line = line.map_err(|e| format!("stdin: {e}"))?;
        let line = line.strip_suffix('\r').unwrap_or(&line);
        if line.is_empty() {
            continue;
        }
        let key = match line.split_at(line.len().min(2)) {
            ("i:", v) => Key::Owner(v.parse().map_err(|e| format!("line {}: {e}", n + 1))?),
            ("t:", v) => Key::OwnerText(v.to_string()),
            ("u:", v) => Key::OwnerUuid(parse_uuid(v).ok_or(format!("line {}: bad uuid", n + 1))?),
            _ => return Err(format!("line {}: want i:, t: or u:, not {line:?}", n + 1)),
        };
        writeln!(out, "{}", key.gene()).map_err(|e| format!("stdout: {e}"))?;
    }
    out.flush().map_err(|e| format!("stdout: {e}"))
}

#[derive(Debug)]
struct LoadOpts {
    routes: String,
    shards: BTreeMap<String, String>,
    table: String,
    sequence: String,
    owners: i64,
    seconds: f64,
    log: String,
    stop_file: Option<String>,
    read_every: u64,
    refresh_interval: Duration,
    listen: bool,
    /// The Router's `retry_limit` and `backoff_max`; `None`: the Router's defaults.
    retry_limit: Option<u32>,
    backoff_max: Option<Duration>,
    /// bench only: "tx" or "lookup", and whether on the tool's own pools, or on both in
    /// alternating slices.
    mode: String,
    direct: bool,
    side_by_side: bool,
    /// bench only: the warm-up, not measured.
    warm_up: Duration,
}

impl LoadOpts {
    fn parse(args: &[String], bench: bool) -> Result<LoadOpts, String> {
        let mut o = LoadOpts {
            routes: String::new(),
            shards: BTreeMap::new(),
            table: String::new(),
            sequence: String::new(),
            owners: 0,
            seconds: 0.0,
            log: String::new(),
            stop_file: None,
            read_every: 4,
            refresh_interval: Duration::from_secs(1),
            listen: true,
            retry_limit: None,
            backoff_max: None,
            mode: String::new(),
            direct: false,
            side_by_side: false,
            warm_up: Duration::from_millis(500),
        };
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            if flag == "--no-listen" {
                o.listen = false;
                continue;
            }
            if bench && flag == "--direct" {
                o.direct = true;
                continue;
            }
            if bench && flag == "--side-by-side" {
                o.side_by_side = true;
                continue;
            }
            let value = it.next().ok_or(format!("{flag} needs a value"))?.clone();
            let number = |v: &str| -> Result<f64, String> {
                v.parse::<f64>().map_err(|e| format!("{flag} {v:?}: {e}"))
            };
            match flag.as_str() {
                "--routes" => o.routes = value,
                "--shard" => {
                    let (name, dsn) = value
                        .split_once('=')
                        .filter(|(n, _)| !n.is_empty())
                        .ok_or(format!("--shard takes NAME=DSN, not {value:?}"))?;
                    o.shards.insert(name.to_string(), dsn.to_string());
                }
                "--table" => o.table = quote_table(&value)?,
                "--sequence" => o.sequence = value,
                "--owners" => o.owners = number(&value)? as i64,
                "--seconds" => {
                    o.seconds = number(&value)?;
                    if !(o.seconds.is_finite() && (0.0..=1e9).contains(&o.seconds)) {
                        return Err(format!("--seconds takes 0 to 1e9 seconds, not {value:?}"));
                    }
                }
                "--log" => o.log = value,
                "--stop-file" => o.stop_file = Some(value),
                "--read-every" => o.read_every = number(&value)? as u64,
                "--mode" if bench && matches!(value.as_str(), "tx" | "lookup") => o.mode = value,
                "--warm-up-seconds" if bench => {
                    let s = number(&value)?;
                    if !(s.is_finite() && (0.0..=3600.0).contains(&s)) {
                        return Err(format!(
                            "--warm-up-seconds takes 0 to 3600 seconds, not {value:?}"
                        ));
                    }
                    o.warm_up = Duration::from_secs_f64(s);
                }
                "--refresh-interval-ms" => {
                    o.refresh_interval = Duration::from_millis(number(&value)? as u64)
                }
                "--retry-limit" => o.retry_limit = Some(non_negative(flag, &value)?),
                "--backoff-max-ms" => {
                    o.backoff_max = Some(Duration::from_millis(non_negative(flag, &value)?.into()))
                }
                other => return Err(format!("unknown flag {other}")),
            }
        }
        for (missing, flag) in [
            (o.routes.is_empty(), "--routes"),
            (o.shards.is_empty(), "--shard"),
            (o.table.is_empty(), "--table"),
            (o.sequence.is_empty(), "--sequence"),
            (o.log.is_empty() && !bench, "--log"),
            (o.mode.is_empty() && bench, "--mode tx|lookup"),
            (o.owners < 1, "--owners (1 or more)"),
        ] {
            if missing {
                return Err(format!("{flag} is required"));
            }
        }
        if o.direct && o.side_by_side {
            return Err("--direct and --side-by-side exclude each other".into());
        }
        Ok(o)
    }

    /// `--retry-limit` and `--backoff-max-ms` into the Router's config, when given (a
    /// largest delay below the first one lowers the first one to it: the Router requires
    /// `backoff_base <= backoff_max`).
    fn apply_retry_settings(&self, config: &mut RouterConfig) {
        if let Some(limit) = self.retry_limit {
            config.retry_limit = limit;
        }
        if let Some(largest) = self.backoff_max {
            config.backoff_max = largest;
            config.backoff_base = config.backoff_base.min(largest);
        }
    }
}

/// A decimal integer 0 or more (digits only, no sign) for `flag`, or a usage error.
fn non_negative(flag: &str, value: &str) -> Result<u32, String> {
    let digits_only = !value.is_empty() && value.bytes().all(|c| c.is_ascii_digit());
    digits_only
        .then(|| value.parse::<u32>().ok())
        .flatten()
        .ok_or(format!("{flag} takes an integer 0 or more, not {value:?}"))
}

/// `table` or `schema.table` made of `[a-z0-9_]`, each part double-quoted.
fn quote_table(name: &str) -> Result<String, String> {
    let parts: Vec<&str> = name.split('.').collect();
    let ok = parts.len() <= 2
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|c| matches!(c, b'a'..=b'z' | b'0'..=b'9' | b'_'))
        });
    if !ok {
        return Err(format!(
            "--table {name:?}: want [schema.]table made of [a-z0-9_]"
        ));
    }
    Ok(parts
        .iter()
        .map(|p| format!("\"{p}\""))
        .collect::<Vec<_>>()
        .join("."))
}

#[derive(Default)]
struct Counts {
    committed: AtomicU64,
    failed: AtomicU64,
    reads: AtomicU64,
    empty: AtomicU64,
    unknown: AtomicU64,
}

impl Counts {
    fn failed(&self, what: &str, e: &Error) {
        if matches!(e, Error::CommitOutcomeUnknown(_)) {
            self.unknown.fetch_add(1, Ordering::Relaxed);
        }
        if self.failed.fetch_add(1, Ordering::Relaxed) < 5 {
            eprintln!("failed {what}: {e}");
        }
    }
}

/// A small seeded generator (xorshift64*): each writer its own, no dependency.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

async fn load(o: LoadOpts) -> ExitCode {
    let mut config = RouterConfig::new(o.routes.clone(), o.shards.clone());
    config.listen = o.listen;
    config.refresh_interval = o.refresh_interval;
    config.pool_size = 4;
    o.apply_retry_settings(&mut config);
    let router = match Router::connect(config).await {
        Ok(router) => router,
        Err(e) => return fail(1, &format!("the routes could not be read: {e}")),
    };
    let log = match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&o.log)
    {
        Ok(f) => Arc::new(Mutex::new(f)),
        Err(e) => return fail(2, &format!("--log {}: {e}", o.log)),
    };
    let o = Arc::new(o);
    let counts = Arc::new(Counts::default());
    let deadline = Instant::now() + Duration::from_secs_f64(o.seconds);
    let writers: Vec<_> = (0..4u64)
        .map(|seed| {
            let (router, o, counts, log) = (router.clone(), o.clone(), counts.clone(), log.clone());
            tokio::spawn(async move { writer(router, o, counts, log, seed, deadline).await })
        })
        .collect();
    for w in writers {
        w.await.expect("a writer panicked");
    }
    let s = router.stats();
    router.close();
    let c = &counts;
    println!(
        "reads {} empty {} unknown {}",
        c.reads.load(Ordering::Relaxed),
        c.empty.load(Ordering::Relaxed),
        c.unknown.load(Ordering::Relaxed)
    );
    println!(
        "committed {} failed {} retries {}",
        c.committed.load(Ordering::Relaxed),
        c.failed.load(Ordering::Relaxed),
        s.retries_moved + s.retries_fenced + s.retries_lost
    );
    ExitCode::SUCCESS
}

async fn writer(
    router: Router,
    o: Arc<LoadOpts>,
    counts: Arc<Counts>,
    log: Arc<Mutex<std::fs::File>>,
    seed: u64,
    deadline: Instant,
) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (seed + 1).wrapping_mul(0xD1B5_4A32_D192_ED03));
    let insert = format!(
        "INSERT INTO {} (id, owner_id) VALUES (id_gen.gene_order_id($1::text, $2::bigint), $2) \
         RETURNING id",
        o.table
    );
    let read = format!(
        "SELECT count(*) FROM {} WHERE id BETWEEN $1 AND $2 AND owner_id = $3",
        o.table
    );
    let mut mine: Vec<i64> = Vec::new();
    let mut iteration = 0u64;
    let stopped = || {
        o.stop_file
            .as_deref()
            .is_some_and(|f| std::path::Path::new(f).exists())
    };
    while Instant::now() < deadline && !stopped() {
        iteration += 1;
        let owner = 1 + rng.below(o.owners as u64) as i64;
        let (insert, sequence) = (insert.as_str(), o.sequence.as_str());
        let result = router
            .transaction(Key::Owner(owner), |c| {
                Box::pin(async move {
                    c.query_typed_one(insert, &[(&sequence, Type::TEXT), (&owner, Type::INT8)])
                        .await?
                        .try_get::<_, i64>(0)
                })
            })
            .await;
        match result {
            Ok(id) => {
                writeln!(log.lock().unwrap(), "{owner},{id}").expect("the log file");
                counts.committed.fetch_add(1, Ordering::Relaxed);
                mine.push(owner);
            }
            Err(e) => counts.failed("transaction", &e),
        }
        if o.read_every > 0 && iteration.is_multiple_of(o.read_every) && !mine.is_empty() {
            let owner = mine[rng.below(mine.len() as u64) as usize];
            let lo = (Key::Owner(owner).gene() as i64) << 47;
            let hi = lo | ((1i64 << 47) - 1);
            let rows = router
                .execute(
                    Key::Owner(owner),
                    &read,
                    &[(&lo, Type::INT8), (&hi, Type::INT8), (&owner, Type::INT8)],
                )
                .await;
            match rows {
                Ok(rows) => {
                    counts.reads.fetch_add(1, Ordering::Relaxed);
                    if rows.first().map(|r| r.get::<_, i64>(0)).unwrap_or(0) == 0 {
                        counts.empty.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Err(e) => counts.failed("read", &e),
            }
        }
    }
}

/// `bench`: one client, one operation at a time, through the Router, or (`--direct`) the
/// tool's own pools, or (`--side-by-side`) both in alternating slices of 100 ms;
/// `--warm-up-seconds` (0.5) of warm-up, then `--seconds`; prints `ops N seconds X` (side
/// by side: `ops N seconds X direct_ops M direct_seconds Y`).
async fn bench(o: LoadOpts) -> ExitCode {
    let mut config = RouterConfig::new(o.routes.clone(), o.shards.clone());
    config.listen = false;
    config.refresh_interval = Duration::ZERO;
    config.pool_size = 2;
    o.apply_retry_settings(&mut config);
    let router = match Router::connect(config).await {
        Ok(router) => router,
        Err(e) => return fail(1, &format!("the routes could not be read: {e}")),
    };
    let pools = match direct_pools(&o.shards, 2) {
        Ok(pools) => pools,
        Err(e) => return fail(2, &e),
    };
    let insert = format!(
        "INSERT INTO {} (id, owner_id) VALUES (id_gen.gene_order_id($1::text, $2::bigint), $2) \
         RETURNING id",
        o.table
    );
    let lookup = format!("SELECT owner_id FROM {} WHERE id = $1", o.table);
    let mut ids: Vec<i64> = Vec::new();
    if o.mode == "lookup" {
        let coordinator = match connect_plain(&o.routes).await {
            Ok(c) => c,
            Err(e) => return fail(1, &e),
        };
        match coordinator
            .query(&format!("SELECT id FROM {} LIMIT 1000", o.table), &[])
            .await
        {
            Ok(rows) => ids = rows.iter().map(|r| r.get(0)).collect(),
            Err(e) => return fail(1, &format!("the ids to look up: {e}")),
        }
        if ids.is_empty() {
            return fail(1, &format!("{} has no rows to look up", o.table));
        }
    }
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let mut n = 0u64;
    let run = |owner: i64, id: i64, direct: bool| {
        let (router, pools, insert, lookup, o) = (&router, &pools, &insert, &lookup, &o);
        async move {
            let sequence = o.sequence.as_str();
            let result: Result<(), String> = match (o.mode.as_str(), direct) {
                ("tx", false) => router
                    .transaction(Key::Owner(owner), |c| {
                        Box::pin(async move {
                            c.query_typed_one(
                                insert,
                                &[(&sequence, Type::TEXT), (&owner, Type::INT8)],
                            )
                            .await
                            .map(|_| ())
                        })
                    })
                    .await
                    .map_err(|e| e.to_string()),
                ("tx", true) => {
                    let pool = &pools[&router.shard_for(Key::Owner(owner)).unwrap()];
                    let c = pool.get().await.map_err(|e| e.to_string())?;
                    c.batch_execute("BEGIN").await.map_err(|e| e.to_string())?;
                    c.query_typed_one(insert, &[(&sequence, Type::TEXT), (&owner, Type::INT8)])
                        .await
                        .map_err(|e| e.to_string())?;
                    c.batch_execute("COMMIT").await.map_err(|e| e.to_string())
                }
                (_, false) => router
                    .execute(Key::Id(id), lookup, &[(&id, Type::INT8)])
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string()),
                (_, true) => {
                    let pool = &pools[&router.shard_for(Key::Id(id)).unwrap()];
                    let c = pool.get().await.map_err(|e| e.to_string())?;
                    c.query_typed(lookup, &[(&id, Type::INT8)])
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                }
            };
            result
        }
    };
    let mut one = |direct: bool| {
        n += 1;
        let owner = 1 + rng.below(o.owners as u64) as i64;
        let id = if ids.is_empty() {
            0
        } else {
            ids[n as usize % ids.len()]
        };
        run(owner, id, direct)
    };
    let sides: &[bool] = if o.side_by_side {
        &SIDE_BY_SIDE
    } else if o.direct {
        &[true]
    } else {
        &[false]
    };
    let measured = match run_slices(&mut one, sides, o.warm_up, &Instant::now).await {
        Ok(_) => {
            run_slices(
                &mut one,
                sides,
                Duration::from_secs_f64(o.seconds),
                &Instant::now,
            )
            .await
        }
        Err(e) => Err(e),
    };
    let measured = match measured {
        Ok(measured) => measured,
        Err(e) => return fail(1, &e),
    };
    let ([router_ops, router_spent], [direct_ops, direct_spent]) = (measured[0], measured[1]);
    if o.side_by_side {
        println!(
            "ops {router_ops:.0} seconds {router_spent:.3} direct_ops {direct_ops:.0} direct_seconds {direct_spent:.3}"
        );
    } else {
        let [ops, spent] = measured[usize::from(o.direct)];
        println!("ops {ops:.0} seconds {spent:.3}");
    }
    router.close();
    ExitCode::SUCCESS
}

/// How long one side runs before the other takes over, side by side.
const SLICE: Duration = Duration::from_millis(100);

/// The sides of the slices in turn, side by side (false: the Router, true: the direct pools):
/// Router, direct, direct, Router, so that a drift of the machine weighs on both alike.
const SIDE_BY_SIDE: [bool; 4] = [false, true, true, false];

/// Runs `one(side)` for `d` in slices of `SLICE`, the slices' sides in the cyclic order of
/// `sides`, and at least one slice of each of them, by the clock `now`; returns `[operations,
/// seconds]` of the Router (index 0) and of the direct pools (index 1), each side's seconds
/// from the starts of its slices to the ends of their last operations. The first error ends it.
async fn run_slices<F, Fut>(
    one: &mut F,
    sides: &[bool],
    d: Duration,
    now: &dyn Fn() -> Instant,
) -> Result<[[f64; 2]; 2], String>
where
    F: FnMut(bool) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let mut measured = [[0.0; 2]; 2];
    let end = now() + d;
    for i in 0.. {
        let start = now();
        if start >= end && i >= sides.len() {
            break;
        }
        let side = sides[i % sides.len()];
        let slice_end = (start + SLICE).min(end);
        let mut ops = 0.0;
        let spent = loop {
            one(side).await?;
            ops += 1.0;
            let t = now();
            if t >= slice_end {
                break t - start;
            }
        };
        let m = &mut measured[usize::from(side)];
        m[0] += ops;
        m[1] += spent.as_secs_f64();
    }
    Ok(measured)
}

/// A plain connection (the coordinator, for the ids to look up), its task spawned.
async fn connect_plain(dsn: &str) -> Result<id_gen_client::tokio_postgres::Client, String> {
    let (client, connection) =
        id_gen_client::tokio_postgres::connect(dsn, id_gen_client::tokio_postgres::NoTls)
            .await
            .map_err(|e| format!("the coordinator: {e}"))?;
    tokio::spawn(connection);
    Ok(client)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAILOVER_DSN: &str = "host=127.0.0.1,127.0.0.1 port=5435,5436 user=postgres \
        dbname=postgres target_session_attrs=read-write connect_timeout=2";

    fn load_args(more: &[&str]) -> Vec<String> {
        let mut args = vec![
            "--routes",
            "host=h user=u",
            "--shard",
            "a=host=h port=1 user=u",
            "--table",
            "t",
            "--sequence",
            "q",
            "--owners",
            "10",
            "--seconds",
            "1",
            "--log",
            "/dev/null",
        ];
        args.extend_from_slice(more);
        args.into_iter().map(String::from).collect()
    }

    #[test]
    fn retry_flags_default_to_the_routers_and_reach_its_config() {
        let o = LoadOpts::parse(&load_args(&[]), false).unwrap();
        let mut config = RouterConfig::new("host=h", BTreeMap::new());
        o.apply_retry_settings(&mut config);
        assert_eq!(config.retry_limit, 20);
        assert_eq!(config.backoff_max, Duration::from_millis(200));
        let o = LoadOpts::parse(
            &load_args(&["--retry-limit", "200", "--backoff-max-ms", "1000"]),
            false,
        )
        .unwrap();
        o.apply_retry_settings(&mut config);
        assert_eq!(config.retry_limit, 200);
        assert_eq!(config.backoff_max, Duration::from_secs(1));
        let o = LoadOpts::parse(&load_args(&["--backoff-max-ms", "0"]), false).unwrap();
        o.apply_retry_settings(&mut config);
        assert_eq!(config.backoff_max, Duration::ZERO);
        assert_eq!(
            config.backoff_base,
            Duration::ZERO,
            "lowered to the largest"
        );
        config.validate().unwrap();
    }

    #[test]
    fn bad_retry_flags_are_usage_errors() {
        for flag in ["--retry-limit", "--backoff-max-ms"] {
            for bad in ["-1", "1.5", "x", "", "+3", "99999999999"] {
                let err = LoadOpts::parse(&load_args(&[flag, bad]), false).unwrap_err();
                assert!(
                    err.contains("takes an integer 0 or more"),
                    "{flag} {bad}: {err}"
                );
            }
        }
    }

    #[test]
    fn a_multi_host_read_write_shard_dsn_passes_unchanged() {
        let shard = format!("b={FAILOVER_DSN}");
        let o = LoadOpts::parse(&load_args(&["--shard", &shard]), false).unwrap();
        assert_eq!(o.shards["b"], FAILOVER_DSN);
        RouterConfig::new("host=h", o.shards.clone())
            .validate()
            .unwrap();
    }

    #[test]
    fn bench_takes_one_side_or_both() {
        let bench = |more: &[&str]| {
            let mut args = load_args(&["--mode", "tx"]);
            args.extend(more.iter().map(|s| s.to_string()));
            LoadOpts::parse(&args, true)
        };
        let o = bench(&["--side-by-side"]).unwrap();
        assert!(o.side_by_side && !o.direct);
        assert!(bench(&["--direct"]).unwrap().direct);
        let err = bench(&["--direct", "--side-by-side"]).err().unwrap();
        assert!(err.contains("exclude each other"), "{err}");
        assert!(LoadOpts::parse(&load_args(&["--side-by-side"]), false).is_err());
        assert_eq!(o.warm_up, Duration::from_millis(500));
        let o = bench(&["--warm-up-seconds", "2.5"]).unwrap();
        assert_eq!(o.warm_up, Duration::from_millis(2500));
        for bad in ["-1", "NaN", "3601"] {
            let err = bench(&["--warm-up-seconds", bad]).err().unwrap();
            assert!(err.contains("--warm-up-seconds"), "{bad}: {err}");
        }
    }

    #[tokio::test]
    async fn slices_go_router_direct_direct_router() {
        // A clock that each operation moves on by 62.5 ms: two operations a slice of 100 ms.
        let base = Instant::now();
        let offset = std::cell::Cell::new(Duration::ZERO);
        let done = std::cell::RefCell::new(Vec::new());
        let mut one = |direct: bool| {
            done.borrow_mut().push(direct);
            offset.set(offset.get() + Duration::from_micros(62_500));
            async { Ok(()) }
        };
        let now = || base + offset.get();
        let measured = run_slices(&mut one, &SIDE_BY_SIDE, Duration::from_secs(1), &now)
            .await
            .unwrap();
        let (r, d) = (false, true);
        assert_eq!(
            *done.borrow(),
            [r, r, d, d, d, d, r, r, r, r, d, d, d, d, r, r]
        );
        assert_eq!(measured, [[8.0, 0.5], [8.0, 0.5]]);
        done.borrow_mut().clear();
        let measured = run_slices(&mut one, &SIDE_BY_SIDE, Duration::ZERO, &now)
            .await
            .unwrap();
        assert_eq!(
            *done.borrow(),
            SIDE_BY_SIDE,
            "every side runs, even in no time"
        );
        assert_eq!((measured[0][0], measured[1][0]), (2.0, 2.0));
        let err = run_slices(
            &mut |_| async { Err("down".to_string()) },
            &[true],
            SLICE,
            &Instant::now,
        )
        .await
        .unwrap_err();
        assert_eq!(err, "down");
    }

    #[test]
    fn seconds_out_of_range_are_usage_errors() {
        for bad in ["-1", "NaN", "inf", "1e300"] {
            let mut args = load_args(&[]);
            let at = args.iter().position(|a| a == "--seconds").unwrap();
            args[at + 1] = bad.to_string();
            let err = LoadOpts::parse(&args, false).unwrap_err();
            assert!(err.contains("--seconds"), "{bad}: {err}");
        }
    }
}
