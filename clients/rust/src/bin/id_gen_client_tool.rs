//! `id_gen_client_tool` — a small command-line front end of `id_gen_client` for the
//! project's tests and benchmarks.
//!
//! ```text
//! id_gen_client_tool genes < lines          # "b <i64>", "t <text>", "u <uuid>", "i <id>"
//! id_gen_client_tool bench --routes-dsn DSN --shard NAME=DSN [--shard ...] --table T
//!     [--mode insert|lookup] [--owners N] [--seconds S] [--ids-file FILE] [--tasks N]
//!     [--pool-size N] [--sequence S] [--stop-file F] [--direct]
//! ```
//!
//! `bench` works on a table shaped like the tests' `orders (id, owner_id, amount, note)`:
//! inserts take their id from `id_gen.gene_order_id(<sequence>, owner)` on the owning shard
//! (note 'rust'); lookups read by id. `--direct` skips the claim: BEGIN, the statement and
//! COMMIT on the owning shard's own pool (routes still from the Router), the baseline the
//! benchmark compares the Router with.
//!
//! Invariants: genes are computed only through `id_gen_client::Key` (hence `id_gen_core`);
//! `genes` prints exactly one line per non-empty input line, in order; `bench` prints
//! exactly one JSON line on stdout (diagnostics go to stderr) and puts the table name into
//! SQL only after checking it is made of `[a-z0-9_.]`, each dotted part double-quoted.
//! Arguments are parsed by hand (no clap).
#![forbid(unsafe_code)]

#[path = "shared/direct_pools.rs"]
mod direct_pools;
use direct_pools::direct_pools;

use id_gen_client::key::parse_uuid;
use id_gen_client::tokio_postgres::types::Type;
use id_gen_client::{Key, Router, RouterConfig};
use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const USAGE: &str = "usage:
  id_gen_client_tool genes            reads lines 'b <i64>' | 't <text>' | 'u <uuid>' | 'i <id>'
                                      from stdin, prints the gene of each
  id_gen_client_tool bench --routes-dsn DSN --shard NAME=DSN [--shard NAME=DSN ...]
                           --table T [--mode insert|lookup] [--owners N] [--seconds S]
                           [--ids-file FILE] [--tasks N] [--pool-size N] [--sequence S]
                           [--stop-file F] [--direct]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("genes") => genes(),
        Some("bench") => parse_bench(&args[1..]).and_then(|opts| {
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("tokio runtime: {e}"))?
                .block_on(bench(opts))
        }),
        Some("-h") | Some("--help") | Some("help") => {
            println!("{USAGE}");
            Ok(())
        }
        _ => Err(USAGE.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("id_gen_client_tool: {message}");
            ExitCode::from(2)
        }
    }
}

/// The gene of one input line, or why it is not one.
fn gene_of_line(line: &str) -> Result<u16, String> {
    let (kind, value) = line.split_once(' ').unwrap_or((line, ""));
    let key = match kind {
        "b" => Key::Owner(
            value
                .trim()
                .parse()
                .map_err(|e| format!("bad bigint {value:?}: {e}"))?,
        ),
        "t" => Key::OwnerText(value.to_string()),
        "u" => Key::OwnerUuid(parse_uuid(value.trim()).ok_or(format!("bad uuid {value:?}"))?),
        "i" => Key::Id(
            value
                .trim()
                .parse()
                .map_err(|e| format!("bad id {value:?}: {e}"))?,
        ),
        _ => {
            return Err(format!(
                "line {line:?} does not start with 'b ', 't ', 'u ' or 'i '"
            ))
        }
    };
    key.try_gene().map_err(|e| e.to_string())
}

fn genes() -> Result<(), String> {
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for (n, line) in stdin.lock().lines().enumerate() {
        let line = line.map_err(|e| format!("stdin: {e}"))?;
        let line = line.strip_suffix('\r').unwrap_or(&line);
        if line.is_empty() {
            continue;
        }
        let gene = gene_of_line(line).map_err(|e| format!("line {}: {e}", n + 1))?;
        writeln!(out, "{gene}").map_err(|e| format!("stdout: {e}"))?;
    }
    out.flush().map_err(|e| format!("stdout: {e}"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Insert,
    Lookup,
}

#[derive(Debug)]
struct BenchOpts {
    routes_dsn: String,
    shards: BTreeMap<String, String>,
    table: String,
    mode: Mode,
    owners: i64,
    seconds: f64,
    ids_file: Option<String>,
    tasks: usize,
    pool_size: Option<usize>,
    sequence: String,
    stop_file: Option<String>,
    direct: bool,
}

fn parse_bench(args: &[String]) -> Result<BenchOpts, String> {
    let mut routes_dsn = None;
    let mut shards = BTreeMap::new();
    let mut table = None;
    let mut mode = Mode::Insert;
    let mut owners = 1000i64;
    let mut seconds = 10.0f64;
    let mut ids_file = None;
    let mut tasks = 1usize;
    let mut pool_size = None;
    let mut sequence = "orders".to_string();
    let mut stop_file = None;
    let mut direct = false;
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().cloned().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--routes-dsn" => routes_dsn = Some(value()?),
            "--shard" => {
                let v = value()?;
                let (name, dsn) = v
                    .split_once('=')
                    .ok_or(format!("--shard {v:?}: want NAME=DSN"))?;
                if name.is_empty() {
                    return Err(format!("--shard {v:?}: empty shard name"));
                }
                shards.insert(name.to_string(), dsn.to_string());
            }
            "--table" => table = Some(quote_table(&value()?)?),
            "--mode" => {
                mode = match value()?.as_str() {
                    "insert" => Mode::Insert,
                    "lookup" => Mode::Lookup,
                    other => return Err(format!("--mode {other:?}: want insert or lookup")),
                }
            }
            "--owners" => owners = parse_num(flag, &value()?)?,
            "--seconds" => seconds = parse_num(flag, &value()?)?,
            "--ids-file" => ids_file = Some(value()?),
            "--tasks" => tasks = parse_num(flag, &value()?)?,
            "--pool-size" => pool_size = Some(parse_num(flag, &value()?)?),
            "--sequence" => {
                sequence = value()?;
                if sequence.is_empty()
                    || !sequence
                        .bytes()
                        .all(|c| matches!(c, b'a'..=b'z' | b'0'..=b'9' | b'_'))
                {
                    return Err(format!("--sequence {sequence:?}: want [a-z0-9_]"));
                }
            }
            "--stop-file" => stop_file = Some(value()?),
            "--direct" => direct = true,
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    let routes_dsn = routes_dsn.ok_or("--routes-dsn is required")?;
    let table = table.ok_or("--table is required")?;
    if shards.is_empty() {
        return Err("at least one --shard NAME=DSN is required".into());
    }
    if owners < 1 || tasks < 1 || !(seconds > 0.0 && seconds.is_finite()) {
        return Err("--owners, --tasks and --seconds must be positive".into());
    }
    if mode == Mode::Lookup && ids_file.is_none() {
        return Err("--mode lookup needs --ids-file FILE (one id per line)".into());
    }
    Ok(BenchOpts {
        routes_dsn,
        shards,
        table,
        mode,
        owners,
        seconds,
        ids_file,
        tasks,
        pool_size,
        sequence,
        stop_file,
        direct,
    })
}

fn parse_num<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    v.trim().parse().map_err(|e| format!("{flag} {v:?}: {e}"))
}

/// `schema.table` made of `[a-z0-9_.]` only, each dotted part double-quoted.
fn quote_table(name: &str) -> Result<String, String> {
    let ok_chars = name
        .bytes()
        .all(|c| matches!(c, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.'));
    let parts: Vec<&str> = name.split('.').collect();
    if name.is_empty() || !ok_chars || parts.iter().any(|p| p.is_empty()) || parts.len() > 2 {
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

fn read_ids(path: &str) -> Result<Vec<i64>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let ids = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| {
            l.parse::<i64>()
                .map_err(|e| format!("{path}: bad id {l:?}: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if ids.is_empty() {
        return Err(format!("{path}: no ids"));
    }
    Ok(ids)
}

/// What one bench task measured.
#[derive(Default)]
struct TaskResult {
    latencies_ms: Vec<f64>,
    errors: u64,
    first_error: Option<String>,
}

async fn bench(opts: BenchOpts) -> Result<(), String> {
    let ids = match (&opts.mode, &opts.ids_file) {
        (Mode::Lookup, Some(path)) => read_ids(path)?,
        _ => Vec::new(),
    };
    let mut config = RouterConfig::new(opts.routes_dsn.clone(), opts.shards.clone());
    config.pool_size = opts.pool_size.unwrap_or(opts.tasks.max(config.pool_size));
    let router = Router::connect(config)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let mode_name = match (opts.mode, opts.direct) {
        (Mode::Insert, false) => "insert",
        (Mode::Lookup, false) => "lookup",
        (Mode::Insert, true) => "insert-direct",
        (Mode::Lookup, true) => "lookup-direct",
    };
    let insert_sql = format!(
        "INSERT INTO {} (id, owner_id, amount, note) \
         VALUES (id_gen.gene_order_id('{}', $1::bigint), $1, 1, 'rust') RETURNING id",
        opts.table, opts.sequence
    );
    let direct_pools = if opts.direct {
        Some(std::sync::Arc::new(direct_pools(
            &opts.shards,
            opts.pool_size.unwrap_or(opts.tasks.max(8)),
        )?))
    } else {
        None
    };
    let stop_file = opts.stop_file.clone();
    let lookup_sql = format!("SELECT * FROM {} WHERE id = $1", opts.table);
    let ids = std::sync::Arc::new(ids);
    let duration = Duration::from_secs_f64(opts.seconds);
    let started = Instant::now();
    let deadline = started + duration;
    let mut handles = Vec::new();
    for task in 0..opts.tasks {
        let router = router.clone();
        let (insert_sql, lookup_sql, ids) = (insert_sql.clone(), lookup_sql.clone(), ids.clone());
        let (mode, owners, tasks) = (opts.mode, opts.owners, opts.tasks);
        let (direct_pools, stop_file) = (direct_pools.clone(), stop_file.clone());
        handles.push(tokio::spawn(async move {
            let mut out = TaskResult::default();
            let mut i: usize = task;
            let mut n = 0u64;
            while Instant::now() < deadline {
                n += 1;
                if n % 50 == 0
                    && stop_file
                        .as_deref()
                        .is_some_and(|f| std::path::Path::new(f).exists())
                {
                    break;
                }
                let t0 = Instant::now();
                let result = match (mode, &direct_pools) {
                    (Mode::Insert, Some(pools)) => {
                        let owner = (i as i64 % owners) + 1;
                        direct_transaction(&router, pools, Key::Owner(owner), &insert_sql, owner)
                            .await
                    }
                    (Mode::Lookup, Some(pools)) => {
                        let id = ids[i % ids.len()];
                        direct_transaction(&router, pools, Key::Id(id), &lookup_sql, id).await
                    }
                    _ => match mode {
                        Mode::Insert => {
                            let owner = (i as i64 % owners) + 1;
                            let sql = insert_sql.as_str();
                            router
                                .transaction(Key::Owner(owner), |c| {
                                    Box::pin(async move {
                                        c.query_typed_one(sql, &[(&owner, Type::INT8)]).await?;
                                        Ok(())
                                    })
                                })
                                .await
                        }
                        Mode::Lookup => {
                            let id = ids[i % ids.len()];
                            let sql = lookup_sql.as_str();
                            router
                                .transaction(Key::Id(id), |c| {
                                    Box::pin(async move {
                                        c.query_typed(sql, &[(&id, Type::INT8)]).await?;
                                        Ok(())
                                    })
                                })
                                .await
                        }
                    }
                    .map_err(|e| e.to_string()),
                };
                match result {
                    Ok(()) => out.latencies_ms.push(t0.elapsed().as_secs_f64() * 1000.0),
                    Err(e) => {
                        out.errors += 1;
                        if out.first_error.is_none() {
                            out.first_error = Some(e);
                        }
                    }
                }
                i = i.wrapping_add(tasks);
            }
            out
        }));
    }
    let mut latencies = Vec::new();
    let mut errors = 0u64;
    for handle in handles {
        let r = handle.await.map_err(|e| format!("bench task: {e}"))?;
        latencies.extend(r.latencies_ms);
        errors += r.errors;
        if let Some(first) = r.first_error {
            eprintln!("id_gen_client_tool: bench: {errors} error(s), first: {first}");
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    latencies.sort_by(f64::total_cmp);
    let stats = router.stats();
    let tx = latencies.len();
    println!(
        "{{\"mode\":\"{}\",\"tx\":{},\"seconds\":{:.3},\"tps\":{:.1},\"p50_ms\":{:.3},\"p99_ms\":{:.3},\"retries\":{},\"retries_moved\":{},\"retries_fenced\":{},\"errors\":{},\"tasks\":{}}}",
        mode_name,
        tx,
        elapsed,
        tx as f64 / elapsed,
        percentile(&latencies, 0.50),
        percentile(&latencies, 0.99),
        stats.retries_moved + stats.retries_fenced,
        stats.retries_moved,
        stats.retries_fenced,
        errors,
        opts.tasks,
    );
    Ok(())
}

/// BEGIN, one statement with one bigint parameter, COMMIT on the owning shard, no claim.
async fn direct_transaction(
    router: &Router,
    pools: &BTreeMap<String, deadpool_postgres::Pool>,
    key: Key,
    sql: &str,
    arg: i64,
) -> Result<(), String> {
    let shard = router.shard_for(&key).map_err(|e| e.to_string())?;
    let pool = pools
        .get(&shard)
        .ok_or(format!("no DSN for shard {shard}"))?;
    let client = pool.get().await.map_err(|e| e.to_string())?;
    client
        .batch_execute("BEGIN")
        .await
        .map_err(|e| e.to_string())?;
    if let Err(e) = client.query_typed(sql, &[(&arg, Type::INT8)]).await {
        let _ = client.batch_execute("ROLLBACK").await;
        return Err(e.to_string());
    }
    client
        .batch_execute("COMMIT")
        .await
        .map_err(|e| e.to_string())
}

/// Nearest-rank percentile of sorted values; 0 when there are none.
fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gene_lines() {
        assert_eq!(gene_of_line("b 42"), Ok(16043));
        assert_eq!(gene_of_line("b 0"), Ok(55408));
        assert_eq!(gene_of_line("t alice"), Ok(13795));
        assert_eq!(
            gene_of_line(&format!("i {}", (16043i64 << 47) | 5)),
            Ok(16043)
        );
        assert!(gene_of_line("b x").is_err());
        assert!(gene_of_line("x 1").is_err());
        assert!(gene_of_line("i -1").is_err());
        // Text keeps its inner and trailing spaces: they are part of the owner.
        assert_eq!(
            gene_of_line("t a b"),
            Ok(Key::OwnerText("a b".into()).gene())
        );
    }

    #[test]
    fn table_names() {
        assert_eq!(quote_table("items").unwrap(), "\"items\"");
        assert_eq!(quote_table("app.items_2").unwrap(), "\"app\".\"items_2\"");
        for bad in [
            "", "Items", "a;b", "a..b", ".a", "a.", "a.b.c", "a\"b", "a b",
        ] {
            assert!(quote_table(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 50.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
        assert_eq!(percentile(&[3.0], 0.99), 3.0);
    }

    #[test]
    fn bench_arguments() {
        let args: Vec<String> = [
            "--routes-dsn",
            "host=/tmp",
            "--shard",
            "s1=host=/tmp port=5433",
            "--table",
            "t",
            "--mode",
            "lookup",
            "--ids-file",
            "/x",
            "--seconds",
            "0.5",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let o = parse_bench(&args).unwrap();
        assert_eq!(o.shards["s1"], "host=/tmp port=5433");
        assert_eq!(o.mode, Mode::Lookup);
        assert_eq!(o.seconds, 0.5);
        assert_eq!(o.tasks, 1);
        assert!(parse_bench(&args[..6]).is_ok());
        assert!(parse_bench(&args[..4]).is_err()); // no table
        assert!(parse_bench(&args[..8]).is_err()); // lookup without ids file
    }
}
