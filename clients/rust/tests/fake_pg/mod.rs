//! A fake of the id_gen coordinator and shards that speaks just enough of the PostgreSQL
//! wire protocol (v3, no TLS, no authentication) for `id_gen_client`'s router tests; no
//! PostgreSQL server is started.
//!
//! What it understands: simple queries (`Q`, several statements split on `;`) and the
//! unnamed-statement extended flow of `Client::query_typed` (Parse, Bind, Describe S,
//! Execute, Sync). Statements are matched by text: the coordinator answers `LISTEN`, the
//! route reads and `id_gen.route_version()`; a shard answers BEGIN/COMMIT/ROLLBACK, the
//! probe of its routing protocol (`State::routing_protocol`: '2' unless set, NULL for a shard
//! before 0.7.16), the claim in both forms, `id_gen.route_claim(g, v)` and
//! `/* id_gen.route_claim=g,v */ BEGIN` (IG001/IG002 as in protocol §3, by the coordinator's
//! current routes; a shard before 0.7.16 ignores the comment), `id_gen.gene_order_id` and a
//! few `fake.*` functions for bodies.
//!
//! The coordinator can be stopped and started again (`stop_coordinator`); the shards can
//! close every connection, as a restart does (`restart_shards`). A shard can go silent as a
//! frozen server whose kernel still acks TCP (`stall_on`, `stall_connects`): it keeps the
//! connection open, reads and drops whatever comes, and never answers again.
//!
//! Invariants: every server-side event a test checks is appended to `State::log` as
//! `"<server>: <sql>"`; shards own exactly the genes the coordinator's current routes give
//! them, at the coordinator's current version (an instant, perfect push).

#![allow(dead_code)]

use id_gen_core::gene::{gene_of_bytes, gene_of_i64, gene_of_str};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

const INT4: i32 = 23;
const INT8: i32 = 20;
const TEXT: i32 = 25;

#[derive(Debug, Clone)]
pub enum Value {
    I4(i32),
    I8(i64),
    Text(String),
    /// A NULL of type text.
    Null,
}

impl Value {
    fn oid(&self) -> i32 {
        match self {
            Value::I4(_) => INT4,
            Value::I8(_) => INT8,
            Value::Text(_) | Value::Null => TEXT,
        }
    }
    /// The value in the text or binary format; None for NULL.
    fn encoded(&self, binary: bool) -> Option<Vec<u8>> {
        match self {
            Value::I4(v) if binary => Some(v.to_be_bytes().to_vec()),
            Value::I8(v) if binary => Some(v.to_be_bytes().to_vec()),
            Value::I4(v) => Some(v.to_string().into_bytes()),
            Value::I8(v) => Some(v.to_string().into_bytes()),
            Value::Text(s) => Some(s.clone().into_bytes()),
            Value::Null => None,
        }
    }
}

/// What a statement produced.
#[derive(Debug, Clone)]
pub enum Reply {
    Tag(String),
    Rows {
        names: Vec<String>,
        rows: Vec<Vec<Value>>,
        tag: String,
    },
}

/// A statement error: SQLSTATE and message.
#[derive(Debug, Clone)]
pub struct SqlError {
    pub code: String,
    pub message: String,
}

/// Not a SQLSTATE: the fake closes the connection instead of answering. (57P01, the
/// server's shutdown, is sent as FATAL and closes the connection too.)
const CLOSE_SILENTLY: &str = "close";
/// Not a SQLSTATE: the fake never answers again on this connection (`State::stall_on`).
const STALL: &str = "stall";

fn err(code: &str, message: impl Into<String>) -> SqlError {
    SqlError {
        code: code.into(),
        message: message.into(),
    }
}

#[derive(Debug, Default)]
pub struct State {
    /// (lower, upper, shard), ordered.
    pub routes: Vec<(i32, i32, String)>,
    pub version: i64,
    /// Genes fenced for the next N claims each (a count of u32::MAX: for ever).
    pub fenced: HashMap<u16, u32>,
    /// Every statement any server ran, as "<server>: <sql>".
    pub log: Vec<String>,
    /// Connections accepted and ended, by server name.
    pub opened: HashMap<String, u32>,
    pub closed: HashMap<String, u32>,
    /// Route reads served by the coordinator.
    pub route_reads: u32,
    pub version_polls: u32,
    /// While set, the coordinator closes every connection it accepts at once (it is down).
    pub coordinator_down: bool,
    /// Lost connections (protocol-scenarios.json): the next N connections to shard "a" are
    /// closed at once (refused, as while it restarts); the next N claims end the connection
    /// with FATAL 57P01; the next COMMIT closes it without an answer.
    pub connect_fails: u32,
    pub claim_lost: u32,
    pub commit_lost: bool,
    /// Silent shards: the next N statements on any shard that start with a key get no
    /// answer, nor does anything after them on that connection (a count of u32::MAX: for
    /// ever); the next N connections to any shard get no answer to their startup.
    pub stall_on: HashMap<String, u32>,
    pub stall_connects: u32,
    /// The next N logins to any shard are refused with FATAL 28P01 (a password refused).
    pub refuse_logins: u32,
    /// Shard -> its `id_gen.routing_protocol`, '2' unless set here; `None`: a shard before
    /// 0.7.16, which has no such setting and reads a claim on BEGIN as a mere comment. The
    /// next N probes of any shard close the connection with no answer; while `probe_error`
    /// is set, every probe fails with that SQLSTATE.
    pub routing_protocol: HashMap<String, Option<String>>,
    pub probe_lost: u32,
    pub probe_error: Option<String>,
    /// While set, `LISTEN` fails (0A000, as behind a pooler that refuses it); the attempts.
    pub listen_fails: bool,
    pub listen_attempts: u32,
    /// Notification senders of the coordinator connections that LISTEN.
    listeners: Vec<mpsc::UnboundedSender<String>>,
    seq: i64,
}

impl State {
    pub fn owner_of(&self, gene: u16) -> Option<&str> {
        let g = gene as i32;
        self.routes
            .iter()
            .find(|(lo, up, _)| *lo <= g && g <= *up)
            .map(|(_, _, s)| s.as_str())
    }
    /// IG002 while the gene is fenced, counting down the fenced statements.
    fn take_fence(&mut self, gene: u16) -> Result<(), SqlError> {
        match self.fenced.get_mut(&gene) {
            Some(n) if *n > 0 => {
                if *n != u32::MAX {
                    *n -= 1;
                }
                Err(err("IG002", format!("gene {gene} is fenced")))
            }
            _ => Ok(()),
        }
    }
    pub fn count(&self, needle: &str) -> usize {
        self.log.iter().filter(|l| l.contains(needle)).count()
    }
    /// Whether a statement on a shard stalls, counting down `stall_on`.
    fn take_stall(&mut self, sql: &str) -> bool {
        for (prefix, n) in self.stall_on.iter_mut() {
            if *n > 0 && sql.starts_with(prefix.as_str()) {
                if *n != u32::MAX {
                    *n -= 1;
                }
                return true;
            }
        }
        false
    }
    /// A shard's `id_gen.routing_protocol` (see `routing_protocol`).
    pub fn routing_protocol_of(&self, shard: &str) -> Option<String> {
        self.routing_protocol
            .get(shard)
            .cloned()
            .unwrap_or_else(|| Some("2".into()))
    }
    /// `route_claim(gene, version)` on `shard`, in either form: IG002 while fenced, the
    /// connection ended when a lost claim is due, IG001 for a gene the shard does not own or
    /// a stale version.
    fn claim(&mut self, shard: &str, gene: u16, version: i64) -> Result<(), SqlError> {
        self.take_fence(gene)?;
        if self.claim_lost > 0 {
            self.claim_lost -= 1;
            return Err(err(
                "57P01",
                "terminating connection due to administrator command",
            ));
        }
        if self.owner_of(gene) != Some(shard) || version < self.version {
            return Err(err("IG001", format!("route changed for gene {gene}")));
        }
        Ok(())
    }
    /// Coordinator connections that LISTEN and are still open.
    pub fn listening(&self) -> usize {
        self.listeners.iter().filter(|tx| !tx.is_closed()).count()
    }
    /// Connections a server accepted.
    pub fn opened(&self, server: &str) -> u32 {
        self.opened.get(server).copied().unwrap_or(0)
    }
    /// Connections of a server that ended (closed by either side).
    pub fn closed(&self, server: &str) -> u32 {
        self.closed.get(server).copied().unwrap_or(0)
    }
}

/// A coordinator and shards on 127.0.0.1 ports.
pub struct Fake {
    pub state: Arc<Mutex<State>>,
    pub coordinator_dsn: String,
    pub shard_dsns: std::collections::BTreeMap<String, String>,
    /// Bumping it closes every open coordinator connection.
    kill_coordinator: watch::Sender<u64>,
    /// Bumping them closes every open shard connection (`restart_shards`).
    kill_shards: Vec<watch::Sender<u64>>,
}

impl Fake {
    /// Starts the servers; `routes` are (lower, upper, shard) at `version`.
    pub async fn start(shards: &[&str], routes: Vec<(i32, i32, &str)>, version: i64) -> Fake {
        let state = Arc::new(Mutex::new(State {
            routes: routes
                .into_iter()
                .map(|(l, u, s)| (l, u, s.to_string()))
                .collect(),
            version,
            ..State::default()
        }));
        let (kill_tx, kill_rx) = watch::channel(0u64);
        let coordinator_dsn = serve("coordinator".into(), state.clone(), kill_rx.clone()).await;
        let mut shard_dsns = std::collections::BTreeMap::new();
        let mut kill_shards = Vec::new();
        for name in shards {
            // Shard connections are never killed by kill_coordinator: a channel of their own.
            let (tx, rx) = watch::channel(0u64);
            kill_shards.push(tx);
            shard_dsns.insert(
                name.to_string(),
                serve(name.to_string(), state.clone(), rx).await,
            );
        }
        Fake {
            state,
            coordinator_dsn,
            shard_dsns,
            kill_coordinator: kill_tx,
            kill_shards,
        }
    }

    pub fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        f(&mut self.state.lock().unwrap())
    }

    /// Replaces the routes and bumps the version; notifies the listeners when `notify`.
    pub fn set_routes(&self, routes: Vec<(i32, i32, &str)>, notify: bool) -> i64 {
        let mut st = self.state.lock().unwrap();
        st.routes = routes
            .into_iter()
            .map(|(l, u, s)| (l, u, s.to_string()))
            .collect();
        st.version += 1;
        let v = st.version;
        if notify {
            st.listeners.retain(|tx| tx.send(v.to_string()).is_ok());
        }
        v
    }

    /// Sends a raw payload to every listener.
    pub fn notify(&self, payload: &str) {
        let mut st = self.state.lock().unwrap();
        st.listeners
            .retain(|tx| tx.send(payload.to_string()).is_ok());
    }

    /// Closes every open coordinator connection (the listener's included).
    pub fn kill_coordinator_connections(&self) {
        self.kill_coordinator.send_modify(|n| *n += 1);
    }

    /// Every shard closes its open connections, as a restart does (new ones are accepted).
    pub fn restart_shards(&self) {
        for kill in &self.kill_shards {
            kill.send_modify(|n| *n += 1);
        }
    }

    /// The coordinator goes down: its connections close, new ones are closed at once.
    pub fn stop_coordinator(&self) {
        self.with(|s| s.coordinator_down = true);
        self.kill_coordinator_connections();
    }

    /// The coordinator accepts connections again.
    pub fn start_coordinator(&self) {
        self.with(|s| s.coordinator_down = false);
    }

    pub fn log(&self) -> Vec<String> {
        self.state.lock().unwrap().log.clone()
    }
}

async fn serve(name: String, state: Arc<Mutex<State>>, kill: watch::Receiver<u64>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let _ = stream.set_nodelay(true);
            let (name, state, kill) = (name.clone(), state.clone(), kill.clone());
            if name == "coordinator" && state.lock().unwrap().coordinator_down {
                drop(stream);
                continue;
            }
            if name == "a" {
                let mut st = state.lock().unwrap();
                if st.connect_fails > 0 {
                    st.connect_fails -= 1;
                    drop(stream);
                    continue;
                }
            }
            let silent = name != "coordinator" && {
                let mut st = state.lock().unwrap();
                let silent = st.stall_connects > 0;
                st.stall_connects = st.stall_connects.saturating_sub(1);
                silent
            };
            tokio::spawn(async move {
                *state
                    .lock()
                    .unwrap()
                    .opened
                    .entry(name.clone())
                    .or_default() += 1;
                if silent {
                    // Accepted, never answered: until the client closes it.
                    let mut sink = [0u8; 1024];
                    let mut stream = stream;
                    while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
                } else {
                    let _ = connection(stream, &name, &state, kill).await;
                }
                *state
                    .lock()
                    .unwrap()
                    .closed
                    .entry(name.clone())
                    .or_default() += 1;
            });
        }
    });
    format!("host=127.0.0.1 port={port} user=fake dbname=fake sslmode=disable")
}

/// A frontend message: its type byte and body.
type Frontend = (u8, Vec<u8>);

async fn read_startup(stream: &mut TcpStream) -> std::io::Result<()> {
    loop {
        let len = stream.read_i32().await? as usize;
        let mut body = vec![0u8; len - 4];
        stream.read_exact(&mut body).await?;
        let code = i32::from_be_bytes(body[..4].try_into().unwrap());
        if code == 80877103 {
            stream.write_all(b"N").await?; // SSLRequest: no
            continue;
        }
        return Ok(());
    }
}

struct Conn<'a> {
    name: &'a str,
    state: &'a Arc<Mutex<State>>,
    out: Vec<u8>,
    in_tx: bool,
    failed: bool,
    /// The route version declared by a statement's leading comment, for its transaction.
    declared: Option<i64>,
    notify_tx: mpsc::UnboundedSender<String>,
}

fn msg(out: &mut Vec<u8>, kind: u8, body: &[u8]) {
    out.push(kind);
    out.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    out.extend_from_slice(body);
}

fn cstr(buf: &mut Vec<u8>, s: &str) {
    buf.extend_from_slice(s.as_bytes());
    buf.push(0);
}

fn read_cstr(body: &[u8], pos: &mut usize) -> String {
    let end = body[*pos..].iter().position(|&b| b == 0).unwrap() + *pos;
    let s = String::from_utf8_lossy(&body[*pos..end]).into_owned();
    *pos = end + 1;
    s
}

fn read_i16(body: &[u8], pos: &mut usize) -> i16 {
    let v = i16::from_be_bytes(body[*pos..*pos + 2].try_into().unwrap());
    *pos += 2;
    v
}

fn read_i32(body: &[u8], pos: &mut usize) -> i32 {
    let v = i32::from_be_bytes(body[*pos..*pos + 4].try_into().unwrap());
    *pos += 4;
    v
}

impl Conn<'_> {
    fn ready(&mut self) {
        let status = if self.failed {
            b'E'
        } else if self.in_tx {
            b'T'
        } else {
            b'I'
        };
        msg(&mut self.out, b'Z', &[status]);
    }

    fn error(&mut self, e: &SqlError) {
        let mut b = Vec::new();
        let severity = if e.code == "57P01" { "FATAL" } else { "ERROR" };
        for (k, v) in [
            (b'S', severity),
            (b'V', severity),
            (b'C', e.code.as_str()),
            (b'M', e.message.as_str()),
        ] {
            b.push(k);
            cstr(&mut b, v);
        }
        b.push(0);
        msg(&mut self.out, b'E', &b);
        if self.in_tx {
            self.failed = true;
        }
    }

    fn row_description(&mut self, names: &[String], rows: &[Vec<Value>], binary: bool) {
        let mut b = Vec::new();
        b.extend_from_slice(&(names.len() as i16).to_be_bytes());
        for (i, n) in names.iter().enumerate() {
            cstr(&mut b, n);
            b.extend_from_slice(&0i32.to_be_bytes());
            b.extend_from_slice(&0i16.to_be_bytes());
            let oid = rows.first().map(|r| r[i].oid()).unwrap_or(TEXT);
            b.extend_from_slice(&oid.to_be_bytes());
            b.extend_from_slice(&(-1i16).to_be_bytes());
            b.extend_from_slice(&(-1i32).to_be_bytes());
            b.extend_from_slice(&(binary as i16).to_be_bytes());
        }
        msg(&mut self.out, b'T', &b);
    }

    fn data_rows(&mut self, rows: &[Vec<Value>], binary: bool) {
        for row in rows {
            let mut b = Vec::new();
            b.extend_from_slice(&(row.len() as i16).to_be_bytes());
            for v in row {
                match v.encoded(binary) {
                    Some(bytes) => {
                        b.extend_from_slice(&(bytes.len() as i32).to_be_bytes());
                        b.extend_from_slice(&bytes);
                    }
                    None => b.extend_from_slice(&(-1i32).to_be_bytes()),
                }
            }
            msg(&mut self.out, b'D', &b);
        }
    }

    fn complete(&mut self, tag: &str) {
        let mut b = Vec::new();
        cstr(&mut b, tag);
        msg(&mut self.out, b'C', &b);
    }

    /// Runs one statement. A version declared by its leading comment
    /// (`/* id_gen.route_version=N */ `) holds for it alone, outside a transaction block
    /// (logged as `<server>: -- declared N`, then the statement without the comment).
    async fn exec(&mut self, sql: &str, params: &[Value]) -> Result<Reply, SqlError> {
        let sql = sql.trim();
        let declared = sql
            .strip_prefix("/* id_gen.route_version=")
            .and_then(|rest| rest.split_once(" */ "));
        let Some((version, statement)) = declared else {
            return self.exec_statement(sql, params).await;
        };
        self.state
            .lock()
            .unwrap()
            .log
            .push(format!("{}: -- declared {version}", self.name));
        self.declared = Some(version.parse().unwrap());
        let reply = self.exec_statement(statement, params).await;
        if !self.in_tx {
            self.declared = None;
        }
        reply
    }

    async fn exec_statement(&mut self, sql: &str, params: &[Value]) -> Result<Reply, SqlError> {
        {
            let mut st = self.state.lock().unwrap();
            st.log.push(format!("{}: {sql}", self.name));
            if self.name != "coordinator" && st.take_stall(sql) {
                return Err(err(STALL, "the server stops answering"));
            }
        }
        if self.failed && !matches!(sql, "ROLLBACK" | "COMMIT") {
            return Err(err("25P02", "current transaction is aborted"));
        }
        if let Some(ms) = sql
            .strip_prefix("SELECT fake.sleep_ms(")
            .and_then(|r| r.strip_suffix(')'))
        {
            tokio::time::sleep(Duration::from_millis(ms.parse().unwrap())).await;
            return Ok(Reply::Tag("SELECT 1".into()));
        }
        let mut st = self.state.lock().unwrap();
        if self.name == "coordinator" {
            return match sql {
                "LISTEN id_gen_routes" => {
                    st.listen_attempts += 1;
                    if st.listen_fails {
                        return Err(err("0A000", "fake: LISTEN is not supported here"));
                    }
                    st.listeners.push(self.notify_tx.clone());
                    Ok(Reply::Tag("LISTEN".into()))
                }
                s if s.starts_with(
                    "SELECT lower_gene, upper_gene, shard, version FROM id_gen.route_map",
                ) =>
                {
                    st.route_reads += 1;
                    let v = st.version;
                    let rows = st
                        .routes
                        .iter()
                        .map(|(l, u, s)| {
                            vec![
                                Value::I4(*l),
                                Value::I4(*u),
                                Value::Text(s.clone()),
                                Value::I8(v),
                            ]
                        })
                        .collect();
                    Ok(Reply::Rows {
                        names: ["lower_gene", "upper_gene", "shard", "version"]
                            .map(String::from)
                            .to_vec(),
                        rows,
                        tag: "SELECT".into(),
                    })
                }
                "SELECT id_gen.route_version()" => {
                    st.version_polls += 1;
                    Ok(Reply::Rows {
                        names: vec!["route_version".into()],
                        rows: vec![vec![Value::I8(st.version)]],
                        tag: "SELECT".into(),
                    })
                }
                s if s.starts_with("SELECT id_gen.route_version() WHERE NOT EXISTS") => {
                    let rows = if st.routes.is_empty() {
                        vec![vec![Value::I8(st.version)]]
                    } else {
                        vec![]
                    };
                    Ok(Reply::Rows {
                        names: vec!["route_version".into()],
                        rows,
                        tag: "SELECT".into(),
                    })
                }
                other => Err(err(
                    "42883",
                    format!("coordinator: unknown statement {other:?}"),
                )),
            };
        }
        match sql {
            "BEGIN" => {
                self.in_tx = true;
                Ok(Reply::Tag("BEGIN".into()))
            }
            s if s.starts_with("SAVEPOINT ") => {
                // As PostgreSQL: only inside a transaction block (25P01 outside one).
                if self.in_tx {
                    Ok(Reply::Tag("SAVEPOINT".into()))
                } else {
                    Err(err(
                        "25P01",
                        "SAVEPOINT can only be used in transaction blocks",
                    ))
                }
            }
            "COMMIT" | "ROLLBACK" => {
                if sql == "COMMIT" && st.commit_lost {
                    st.commit_lost = false;
                    return Err(err(CLOSE_SILENTLY, "the connection closes with no answer"));
                }
                let tag = if self.failed { "ROLLBACK" } else { sql };
                self.in_tx = false;
                self.failed = false;
                self.declared = None;
                Ok(Reply::Tag(tag.into()))
            }
            "SELECT pg_catalog.current_setting('id_gen.routing_protocol', true)" => {
                if st.probe_lost > 0 {
                    st.probe_lost -= 1;
                    return Err(err(CLOSE_SILENTLY, "the connection closes with no answer"));
                }
                if let Some(code) = st.probe_error.clone() {
                    return Err(err(&code, "fake failure of the probe"));
                }
                let setting = st.routing_protocol_of(self.name).map_or(Value::Null, Value::Text);
                Ok(Reply::Rows {
                    names: vec!["current_setting".into()],
                    rows: vec![vec![setting]],
                    tag: "SELECT 1".into(),
                })
            }
            s if s.starts_with("/* id_gen.route_claim=") => {
                let (claim, statement) = s
                    .trim_start_matches("/* id_gen.route_claim=")
                    .split_once(" */ ")
                    .unwrap();
                assert_eq!(statement, "BEGIN", "a claim on BEGIN: {s:?}");
                let (g, v) = claim.split_once(',').unwrap();
                // From 0.7.16 on, BEGIN then the claim: a claim refused leaves no transaction
                // open. An older shard reads a comment, and a plain BEGIN.
                if st.routing_protocol_of(self.name).is_some() {
                    st.claim(self.name, g.parse().unwrap(), v.parse().unwrap())?;
                }
                self.in_tx = true;
                Ok(Reply::Tag("BEGIN".into()))
            }
            s if s.starts_with("SELECT id_gen.route_claim(") => {
                let args = s
                    .trim_start_matches("SELECT id_gen.route_claim(")
                    .trim_end_matches(')');
                let (g, v) = args.split_once(',').unwrap();
                st.claim(self.name, g.trim().parse().unwrap(), v.trim().parse().unwrap())?;
                Ok(Reply::Rows {
                    names: vec!["route_claim".into()],
                    rows: vec![vec![Value::I8(st.version)]],
                    tag: "SELECT 1".into(),
                })
            }
            s if s.starts_with("SELECT id_gen.gene_order_id(") => {
                let gene = match (s.contains("::bigint"), s.contains("::uuid"), &params[1]) {
                    (true, _, Value::I8(o)) => gene_of_i64(*o),
                    (_, true, Value::Text(u)) => {
                        let hex: String = u.chars().filter(|c| *c != '-').collect();
                        let bytes: Vec<u8> = (0..16)
                            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
                            .collect();
                        gene_of_bytes(&bytes)
                    }
                    (_, _, Value::Text(t)) => gene_of_str(t),
                    other => panic!("gene_order_id params {other:?}"),
                };
                st.seq += 1;
                let id = ((gene as i64) << 47) | st.seq;
                Ok(Reply::Rows {
                    names: vec!["gene_order_id".into()],
                    rows: vec![vec![Value::I8(id)]],
                    tag: "SELECT 1".into(),
                })
            }
            s if s.starts_with("INSERT INTO \"")
                && s.ends_with("(id, owner_id, amount, note) VALUES (id_gen.gene_order_id('orders', $1::bigint), $1, 1, 'rust') RETURNING id") =>
            {
                let Value::I8(owner) = params[0] else {
                    panic!("owner must be int8")
                };
                let gene = gene_of_i64(owner);
                if st.owner_of(gene) != Some(self.name) {
                    return Err(err("IG001", "not this shard's gene"));
                }
                st.seq += 1;
                let id = ((gene as i64) << 47) | st.seq;
                Ok(Reply::Rows {
                    names: vec!["id".into()],
                    rows: vec![vec![Value::I8(id)]],
                    tag: "INSERT 0 1".into(),
                })
            }
            s if s.starts_with("SELECT * FROM \"") && s.ends_with(" WHERE id = $1") => {
                let Value::I8(id) = params[0] else {
                    panic!("id must be int8")
                };
                Ok(Reply::Rows {
                    names: vec!["id".into()],
                    rows: vec![vec![Value::I8(id)]],
                    tag: "SELECT 1".into(),
                })
            }
            // A read by owner (no id predicate), as a shard answers it: the first statement
            // of a transaction on a distributed table checks the declared version (IG001
            // when older) and the fence (IG002); then the rows of the owner, when this
            // shard owns its gene (none otherwise: why a stale read must not go unchecked).
            "SELECT fake.read($1)" => {
                let Value::I8(owner) = params[0] else {
                    panic!("fake.read takes an int8 owner")
                };
                let gene = gene_of_i64(owner);
                st.take_fence(gene)?;
                if matches!(self.declared, Some(v) if v < st.version) {
                    return Err(err("IG001", "route changed"));
                }
                let rows = if st.owner_of(gene) == Some(self.name) {
                    vec![vec![Value::Text(self.name.to_string())]]
                } else {
                    vec![]
                };
                Ok(Reply::Rows {
                    names: vec!["shard".into()],
                    rows,
                    tag: "SELECT".into(),
                })
            }
            "SELECT fake.shard()" => Ok(Reply::Rows {
                names: vec!["shard".into()],
                rows: vec![vec![Value::Text(self.name.to_string())]],
                tag: "SELECT 1".into(),
            }),
            "SELECT fake.echo($1)" => Ok(Reply::Rows {
                names: vec!["echo".into()],
                rows: vec![params.to_vec()],
                tag: "SELECT 1".into(),
            }),
            "SELECT fake.fail($1)" => match &params[0] {
                Value::Text(code) => Err(err(code, "fake failure")),
                _ => panic!("fake.fail takes text"),
            },
            "SELECT fake.fail_once($1)" => {
                // Fails with the SQLSTATE while the "fail_once" counter is positive.
                let n = st.fenced.entry(u16::MAX).or_insert(0);
                match &params[0] {
                    Value::Text(code) if *n > 0 => {
                        *n -= 1;
                        Err(err(code, "fake failure"))
                    }
                    _ => Ok(Reply::Tag("SELECT 0".into())),
                }
            }
            "SELECT 1" => Ok(Reply::Rows {
                names: vec!["x".into()],
                rows: vec![vec![Value::I4(1)]],
                tag: "SELECT 1".into(),
            }),
            other => Err(err(
                "42883",
                format!("{}: unknown statement {other:?}", self.name),
            )),
        }
    }
}

/// A frozen server: reads and drops what comes, answers nothing, until the client closes the
/// connection.
async fn stall(mut incoming: mpsc::UnboundedReceiver<Frontend>) -> std::io::Result<()> {
    while incoming.recv().await.is_some() {}
    Ok(())
}

fn decode_param(oid: i32, binary: bool, bytes: &[u8]) -> Value {
    match (oid, binary) {
        (INT8, true) => Value::I8(i64::from_be_bytes(bytes.try_into().unwrap())),
        (INT4, true) => Value::I4(i32::from_be_bytes(bytes.try_into().unwrap())),
        (INT8, false) => Value::I8(std::str::from_utf8(bytes).unwrap().parse().unwrap()),
        _ => Value::Text(String::from_utf8(bytes.to_vec()).unwrap()),
    }
}

async fn connection(
    mut stream: TcpStream,
    name: &str,
    state: &Arc<Mutex<State>>,
    mut kill: watch::Receiver<u64>,
) -> std::io::Result<()> {
    kill.borrow_and_update();
    read_startup(&mut stream).await?;
    let refused = name != "coordinator" && {
        let mut st = state.lock().unwrap();
        let refused = st.refuse_logins > 0;
        st.refuse_logins = st.refuse_logins.saturating_sub(1);
        refused
    };
    if refused {
        let mut b = Vec::new();
        for (k, v) in [
            (b'S', "FATAL"),
            (b'V', "FATAL"),
            (b'C', "28P01"),
            (b'M', "password authentication failed for user \"fake\""),
        ] {
            b.push(k);
            cstr(&mut b, v);
        }
        b.push(0);
        let mut out = Vec::new();
        msg(&mut out, b'E', &b);
        return stream.write_all(&out).await;
    }
    let mut hello = Vec::new();
    msg(&mut hello, b'R', &0i32.to_be_bytes());
    let mut kd = Vec::new();
    kd.extend_from_slice(&7i32.to_be_bytes());
    kd.extend_from_slice(&9i32.to_be_bytes());
    msg(&mut hello, b'K', &kd);
    msg(&mut hello, b'Z', b"I");
    stream.write_all(&hello).await?;

    let (mut rd, mut wr) = stream.into_split();
    let (in_tx, mut incoming) = mpsc::unbounded_channel::<Frontend>();
    tokio::spawn(async move {
        loop {
            let Ok(kind) = rd.read_u8().await else { return };
            let Ok(len) = rd.read_i32().await else { return };
            let mut body = vec![0u8; len as usize - 4];
            if rd.read_exact(&mut body).await.is_err() || in_tx.send((kind, body)).is_err() {
                return;
            }
        }
    });
    let (notify_tx, mut notifications) = mpsc::unbounded_channel::<String>();
    let mut c = Conn {
        name,
        state,
        out: Vec::new(),
        in_tx: false,
        failed: false,
        declared: None,
        notify_tx,
    };
    // Extended-protocol state of the current batch.
    let mut parsed: Option<(String, Vec<i32>)> = None;
    let mut result: Option<Result<Reply, SqlError>> = None;
    let mut skipping = false;
    loop {
        let (kind, body) = tokio::select! {
            m = incoming.recv() => match m { Some(m) => m, None => return Ok(()) },
            n = notifications.recv() => {
                let payload = n.unwrap_or_default();
                let mut b = Vec::new();
                b.extend_from_slice(&7i32.to_be_bytes());
                cstr(&mut b, "id_gen_routes");
                cstr(&mut b, &payload);
                let mut out = Vec::new();
                msg(&mut out, b'A', &b);
                wr.write_all(&out).await?;
                continue;
            }
            _ = kill.changed() => return Ok(()),
        };
        let mut pos = 0usize;
        match kind {
            b'X' => return Ok(()),
            b'Q' => {
                let sql = read_cstr(&body, &mut pos);
                for stmt in sql.split(';').map(str::trim).filter(|s| !s.is_empty()) {
                    match c.exec(stmt, &[]).await {
                        Ok(Reply::Tag(t)) => c.complete(&t),
                        Ok(Reply::Rows { names, rows, tag }) => {
                            c.row_description(&names, &rows, false);
                            c.data_rows(&rows, false);
                            c.complete(&tag);
                        }
                        Err(e) if e.code == CLOSE_SILENTLY => return Ok(()),
                        Err(e) if e.code == STALL => return stall(incoming).await,
                        Err(e) => {
                            c.error(&e);
                            if e.code == "57P01" {
                                // FATAL: the server ends the session.
                                wr.write_all(&std::mem::take(&mut c.out)).await?;
                                return Ok(());
                            }
                            break;
                        }
                    }
                }
                c.ready();
            }
            _ if skipping && kind != b'S' => {}
            b'P' => {
                let _name = read_cstr(&body, &mut pos);
                let sql = read_cstr(&body, &mut pos);
                let n = read_i16(&body, &mut pos);
                let oids = (0..n).map(|_| read_i32(&body, &mut pos)).collect();
                parsed = Some((sql, oids));
                msg(&mut c.out, b'1', &[]);
            }
            b'B' => {
                let _portal = read_cstr(&body, &mut pos);
                let _stmt = read_cstr(&body, &mut pos);
                let nf = read_i16(&body, &mut pos);
                let formats: Vec<i16> = (0..nf).map(|_| read_i16(&body, &mut pos)).collect();
                let np = read_i16(&body, &mut pos) as usize;
                let (sql, oids) = parsed.clone().expect("Bind after Parse");
                let mut params = Vec::new();
                for i in 0..np {
                    let len = read_i32(&body, &mut pos);
                    let bytes = body[pos..pos + len as usize].to_vec();
                    pos += len as usize;
                    let binary = match formats.len() {
                        0 => false,
                        1 => formats[0] == 1,
                        _ => formats[i] == 1,
                    };
                    params.push(decode_param(
                        oids.get(i).copied().unwrap_or(TEXT),
                        binary,
                        &bytes,
                    ));
                }
                msg(&mut c.out, b'2', &[]);
                let done = c.exec(&sql, &params).await;
                match &done {
                    Err(e) if e.code == STALL => return stall(incoming).await,
                    Err(e) if e.code == CLOSE_SILENTLY => return Ok(()),
                    _ => {}
                }
                result = Some(done);
            }
            b'D' => {
                // Describe of the statement: its parameters, then its row shape.
                let n = parsed.as_ref().map(|(_, o)| o.clone()).unwrap_or_default();
                let mut b = Vec::new();
                b.extend_from_slice(&(n.len() as i16).to_be_bytes());
                for o in &n {
                    b.extend_from_slice(&o.to_be_bytes());
                }
                match result.clone() {
                    Some(Ok(Reply::Rows { names, rows, .. })) => {
                        msg(&mut c.out, b't', &b);
                        c.row_description(&names, &rows, false);
                    }
                    Some(Ok(Reply::Tag(_))) => {
                        msg(&mut c.out, b't', &b);
                        msg(&mut c.out, b'n', &[]);
                    }
                    Some(Err(e)) => {
                        c.error(&e);
                        skipping = true;
                    }
                    None => panic!("Describe without Bind is not supported by the fake"),
                }
            }
            b'E' => match result.take() {
                Some(Ok(Reply::Rows { rows, tag, .. })) => {
                    c.data_rows(&rows, true);
                    c.complete(&tag);
                }
                Some(Ok(Reply::Tag(t))) => c.complete(&t),
                Some(Err(e)) => {
                    c.error(&e);
                    skipping = true;
                }
                None => {}
            },
            b'S' => {
                skipping = false;
                parsed = None;
                result = None;
                c.ready();
            }
            b'H' | b'C' => {}
            other => panic!("fake: unsupported frontend message {:?}", other as char),
        }
        if !c.out.is_empty() {
            let out = std::mem::take(&mut c.out);
            wr.write_all(&out).await?;
        }
    }
}
