'use strict';
// Multi-host connection strings (lib/multihost.js) with the real pg against fake servers on
// loopback sockets: a host that refuses (nothing listens), a standby (transaction_read_only =
// on) and a primary (off); under target_session_attrs=read-write the first writable host is
// chosen; no writable host is a NoHostError (08001), which the Router retries before COMMIT
// as a lost connection, until the standby is promoted; sslmode=prefer is learned per host; a
// login refused is raised as pg reports it; single-host strings keep their old config.
const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const pg = require('pg');

const { Router, RouteRetryExhausted } = require('..');
const { asConfig } = require('../lib/router');
const { connectionLost } = require('../lib/errors');
const { NoHostError, multiHostClient } = require('../lib/multihost');
const { ROUTES_SQL, ROUTE_VERSION_SQL, ROUTING_PROTOCOL_SQL } = require('../lib/routes');

const SSL_REQUEST_CODE = 80877103;
const TEXT_OID = 25;

/** A backend message: its type byte, a length, the body. */
function message(type, body) {
  const head = Buffer.alloc(5);
  head.write(type, 0);
  head.writeInt32BE(body.length + 4, 1);
  return Buffer.concat([head, body]);
}
const cstring = (s) => Buffer.from(`${s}\0`);
function int16(n) {
  const b = Buffer.alloc(2);
  b.writeInt16BE(n);
  return b;
}
function int32(n) {
  const b = Buffer.alloc(4);
  b.writeInt32BE(n);
  return b;
}
const ready = (status) => message('Z', Buffer.from(status));
/** The rows of one statement (every column text) and its command tag. */
function rowsMessages(columns, rows, tag) {
  const fields = columns.map((name) => Buffer.concat([cstring(name), int32(0), int16(0), int32(TEXT_OID), int16(-1), int32(-1), int16(0)]));
  const out = [message('T', Buffer.concat([int16(columns.length), ...fields]))];
  for (const row of rows) {
    out.push(message('D', Buffer.concat([int16(row.length), ...row.map((v) => Buffer.concat([int32(Buffer.byteLength(v)), Buffer.from(v)]))])));
  }
  out.push(message('C', cstring(tag)));
  return out;
}
function errorMessage(code, text, severity = 'ERROR') {
  return message('E', Buffer.concat([cstring(`S${severity}`), cstring(`V${severity}`), cstring(`C${code}`), cstring(`M${text}`), Buffer.from([0])]));
}

/**
 * A fake server of the simple query protocol. Answers the SSLRequest with 'N'; a startup with
 * AuthenticationOk (or FATAL 28P01 when refuseLogin); `SHOW transaction_read_only` by its
 * readOnly; the coordinator's route reads (one range, gene 0..65535 on shard a, version 1);
 * the shard's probe ('2': the claim on BEGIN); `SELECT server` with its name; BEGIN (with or
 * without a leading claim comment), COMMIT and ROLLBACK. Records the queries and SSLRequests.
 */
async function fakePg({ name, readOnly = false, refuseLogin = false }) {
  const state = { name, readOnly, queries: [], sslRequests: 0, startups: 0 };
  const sockets = new Set();
  const answer = (sql) => {
    if (sql === 'SHOW transaction_read_only') return rowsMessages(['transaction_read_only'], [[state.readOnly ? 'on' : 'off']], 'SHOW');
    if (sql === ROUTES_SQL) return rowsMessages(['lower_gene', 'upper_gene', 'shard', 'version'], [['0', '65535', 'a', '1']], 'SELECT 1');
    if (sql === ROUTE_VERSION_SQL) return rowsMessages(['version'], [['1']], 'SELECT 1');
    if (sql === ROUTING_PROTOCOL_SQL) return rowsMessages(['current_setting'], [['2']], 'SELECT 1');
    if (sql === 'SELECT server') return rowsMessages(['server'], [[state.name]], 'SELECT 1');
    if (/(^|\*\/ )BEGIN$/.test(sql)) return [message('C', cstring('BEGIN'))];
    if (sql === 'COMMIT' || sql === 'ROLLBACK') return [message('C', cstring(sql))];
    return [errorMessage('42601', `fake: no answer for ${sql}`)];
  };
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    let buffered = Buffer.alloc(0);
    let started = false;
    let inTransaction = false;
    socket.on('data', (chunk) => {
      buffered = Buffer.concat([buffered, chunk]);
      for (;;) {
        if (!started) {
          if (buffered.length < 8) return;
          const length = buffered.readInt32BE(0);
          if (buffered.length < length) return;
          const code = buffered.readInt32BE(4);
          buffered = buffered.subarray(length);
          if (code === SSL_REQUEST_CODE) {
            state.sslRequests += 1;
            socket.write('N');
            continue;
          }
          started = true;
          state.startups += 1;
          if (refuseLogin) {
            socket.end(errorMessage('28P01', 'fake: password authentication failed', 'FATAL'));
            return;
          }
          socket.write(Buffer.concat([message('R', int32(0)), ready('I')]));
          continue;
        }
        if (buffered.length < 5) return;
        const length = buffered.readInt32BE(1) + 1;
        if (buffered.length < length) return;
        const type = String.fromCharCode(buffered[0]);
        const body = buffered.subarray(5, length);
        buffered = buffered.subarray(length);
        if (type === 'X') {
          socket.end();
          return;
        }
        if (type !== 'Q') continue;
        const sql = body.subarray(0, body.length - 1).toString();
        state.queries.push(sql);
        const answers = answer(sql);
        if (/BEGIN$/.test(sql)) inTransaction = true;
        if (sql === 'COMMIT' || sql === 'ROLLBACK') inTransaction = false;
        socket.write(Buffer.concat([...answers, ready(inTransaction ? 'T' : 'I')]));
      }
    });
  });
  await new Promise((resolve) => { server.listen(0, '127.0.0.1', resolve); });
  state.port = server.address().port;
  state.close = () => {
    for (const s of sockets) s.destroy();
    return new Promise((resolve) => { server.close(resolve); });
  };
  return state;
}

/** A port where nothing listens (a host that is down: its connects are refused). */
async function refusingPort() {
  const server = net.createServer();
  await new Promise((resolve) => { server.listen(0, '127.0.0.1', resolve); });
  const { port } = server.address();
  await new Promise((resolve) => { server.close(resolve); });
  return port;
}

const dsn = (ports, extra = '') => `host=${ports.map(() => '127.0.0.1').join(',')} port=${ports.join(',')} user=u dbname=d connect_timeout=2 ${extra}`.trim();

/** A real pg pool over a multi-host connection string, as the Router makes its shard pools. */
function multiHostPool(connectionString) {
  return new pg.Pool({ max: 2, ...asConfig(connectionString), Client: multiHostClient(pg.Client) });
}

async function serverOf(pool) {
  const client = await pool.connect();
  try {
    return (await client.query('SELECT server')).rows[0].server;
  } finally {
    client.release();
  }
}

test('host and port lists: one port for every host, or one per host; target_session_attrs read-write or any', () => {
  const c = asConfig('host=h1,h2 port=5433,5434 user=u dbname=d target_session_attrs=read-write connect_timeout=2 sslmode=disable');
  assert.deepEqual(c.hosts, [{ host: 'h1', port: 5433, ssl: false }, { host: 'h2', port: 5434, ssl: false }]);
  assert.equal(c.targetSessionAttrs, 'read-write');
  assert.equal(c.hostConnectTimeoutMillis, 2000, 'connect_timeout bounds each host');
  assert.equal(c.connectionTimeoutMillis, 6000, "a pool's wait covers every host's check and the connect");
  assert.deepEqual(asConfig('host=a,b port=7 sslmode=disable').hosts.map((h) => h.port), [7, 7]);
  assert.equal(asConfig('host=a,b port=7 sslmode=disable').targetSessionAttrs, 'any');
  assert.deepEqual(asConfig('host=a, port=,8 sslmode=disable').hosts.map((h) => `${h.host}:${h.port}`), ['a:5432', 'localhost:8']);
  assert.equal(asConfig('host=h port=1 target_session_attrs=read-write sslmode=disable').hosts.length, 1, 'one host, checked too');
  assert.throws(() => asConfig('host=a,b,c port=1,2'), /3 hosts takes one port or 3 ports, not 2/);
  assert.throws(() => asConfig('host=a,b target_session_attrs=standby'), /target_session_attrs=standby is not supported/);
  assert.throws(() => asConfig('host=a,b port=1,x'), /a port is a number, not x/);
  // A single host without target_session_attrs: the config as before.
  assert.deepEqual(asConfig('host=h port=5 user=u dbname=d connect_timeout=2 sslmode=disable'),
    { host: 'h', port: 5, user: 'u', database: 'd', connectionTimeoutMillis: 2000, ssl: false });
});

test('read-write: a refused host and a standby are passed over for the primary', async () => {
  const refused = await refusingPort();
  const standby = await fakePg({ name: 'standby', readOnly: true });
  const primary = await fakePg({ name: 'primary' });
  const pool = multiHostPool(dsn([refused, standby.port, primary.port], 'sslmode=disable target_session_attrs=read-write'));
  try {
    assert.equal(await serverOf(pool), 'primary');
    assert.deepEqual(standby.queries, ['SHOW transaction_read_only']);
    assert.equal(primary.queries.filter((q) => q === 'SHOW transaction_read_only').length, 2, 'checked, then checked again on the connection kept');
  } finally {
    await pool.end();
    await standby.close();
    await primary.close();
  }
});

test('any: the first host that accepts, read only or not, without a check', async () => {
  const refused = await refusingPort();
  const standby = await fakePg({ name: 'standby', readOnly: true });
  const pool = multiHostPool(dsn([refused, standby.port], 'sslmode=disable target_session_attrs=any'));
  try {
    assert.equal(await serverOf(pool), 'standby');
    assert.deepEqual(standby.queries, ['SELECT server']);
  } finally {
    await pool.end();
    await standby.close();
  }
});

test('no writable host: a NoHostError (08001), a lost connection, naming each host', async () => {
  const refused = await refusingPort();
  const standby = await fakePg({ name: 'standby', readOnly: true });
  const pool = multiHostPool(dsn([refused, standby.port], 'sslmode=disable target_session_attrs=read-write'));
  try {
    const error = await pool.connect().then((c) => { c.release(); }, (e) => e);
    assert.ok(error instanceof NoHostError, String(error));
    assert.equal(error.code, '08001');
    assert.ok(connectionLost(error));
    assert.match(error.message, new RegExp(`127\\.0\\.0\\.1:${refused}: connect ECONNREFUSED`));
    assert.match(error.message, new RegExp(`127\\.0\\.0\\.1:${standby.port}: read only \\(transaction_read_only = on\\)`));
  } finally {
    await pool.end();
    await standby.close();
  }
});

test('a login refused is raised as pg reports it, not as a lost connection', async () => {
  const refused = await refusingPort();
  const locked = await fakePg({ name: 'locked', refuseLogin: true });
  const pool = multiHostPool(dsn([refused, locked.port], 'sslmode=disable target_session_attrs=read-write'));
  try {
    const error = await pool.connect().then((c) => { c.release(); }, (e) => e);
    assert.equal(error.code, '28P01', String(error));
    assert.ok(!connectionLost(error));
  } finally {
    await pool.end();
    await locked.close();
  }
});

test('sslmode=prefer is learned per host: one refused SSLRequest per host', async () => {
  const standby = await fakePg({ name: 'standby', readOnly: true });
  const primary = await fakePg({ name: 'primary' });
  const pool = multiHostPool(dsn([standby.port, primary.port], 'sslmode=prefer target_session_attrs=read-write'));
  try {
    const first = await pool.connect();
    const second = await pool.connect(); // (a second connection while the first is out)
    assert.equal((await second.query('SELECT server')).rows[0].server, 'primary');
    first.release();
    second.release();
    assert.equal(standby.sslRequests, 1);
    assert.equal(primary.sslRequests, 1);
    assert.equal(primary.startups, 4, 'per connection: the check, then the connect kept (TLS refused once, before the first)');
  } finally {
    await pool.end();
    await standby.close();
    await primary.close();
  }
});

test('the Router retries a shard with no writable host as a lost connection, until the standby is promoted', async () => {
  const coordinator = await fakePg({ name: 'coordinator' });
  const refused = await refusingPort();
  const standby = await fakePg({ name: 'standby', readOnly: true });
  const router = new Router({
    routes: `host=127.0.0.1 port=${coordinator.port} user=u dbname=d sslmode=disable`,
    shards: { a: dsn([refused, standby.port], 'sslmode=disable target_session_attrs=read-write') },
    retryLimit: 2, backoffBase: 1, backoffMax: 2, listen: false, refreshInterval: 0,
  });
  try {
    await router.ready();
    const error = await router.transaction({ gene: 1 }, async () => 1).catch((e) => e);
    assert.ok(error instanceof RouteRetryExhausted, String(error));
    assert.ok(error.cause instanceof NoHostError, String(error.cause));
    assert.equal(router.stats.retriesLost, 2);
    standby.readOnly = false; // (promoted)
    assert.equal(await router.transaction({ gene: 1 }, async () => 1), 1);
    assert.ok(standby.queries.includes('/* id_gen.route_claim=1,1 */ BEGIN'), standby.queries.join('\n'));
    assert.equal(standby.queries[standby.queries.length - 1], 'COMMIT');
  } finally {
    await router.close();
    await coordinator.close();
    await standby.close();
  }
});
