'use strict';
// sslmode=prefer as libpq means it, with the real pg against fake servers: one that answers 'N'
// to the SSLRequest (no TLS: the connect is made again without it, and later connects of that
// config go without it at once) and one that answers 'S' (TLS, with the self-signed certificate
// of test/fixtures, which prefer does not check).
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const net = require('node:net');
const path = require('node:path');
const tls = require('node:tls');
const pg = require('pg');

const { asConfig, connectPreferringTls, PREFER_TLS } = require('../lib/router');

const SSL_REQUEST_CODE = 80877103;
const KEY = fs.readFileSync(path.join(__dirname, 'fixtures', 'server.key'));
const CERT = fs.readFileSync(path.join(__dirname, 'fixtures', 'server.crt'));

/**
 * A server of the start of the protocol: the SSLRequest answered 'S' (tls: true) or 'N', any
 * startup message with AuthenticationOk and ReadyForQuery, Terminate closes. Records each
 * connection as { sslRequest, tls }.
 */
async function fakeServer({ tls: offersTls }) {
  const connections = [];
  const sockets = new Set();
  const server = net.createServer((raw) => {
    sockets.add(raw);
    raw.on('close', () => sockets.delete(raw));
    raw.on('error', () => {});
    const seen = { sslRequest: false, tls: false };
    connections.push(seen);
    let socket = raw;
    let buffered = Buffer.alloc(0);
    let started = false;
    const onData = (chunk) => {
      buffered = Buffer.concat([buffered, chunk]);
      for (;;) {
        if (!started) {
          if (buffered.length < 4) return;
          const length = buffered.readInt32BE(0);
          if (buffered.length < length) return;
          const message = buffered.subarray(0, length);
          buffered = buffered.subarray(length);
          if (length === 8 && message.readInt32BE(4) === SSL_REQUEST_CODE) {
            seen.sslRequest = true;
            if (!offersTls) {
              socket.write('N');
              continue;
            }
            socket.removeListener('data', onData);
            socket.write('S');
            socket = new tls.TLSSocket(raw, { isServer: true, key: KEY, cert: CERT });
            socket.on('error', () => {});
            seen.tls = true;
            socket.on('data', onData);
            return;
          }
          started = true;
          const authOk = Buffer.from([0x52, 0, 0, 0, 8, 0, 0, 0, 0]);
          const ready = Buffer.from([0x5a, 0, 0, 0, 5, 0x49]);
          socket.write(Buffer.concat([authOk, ready]));
        } else {
          if (buffered.length < 5) return;
          const length = buffered.readInt32BE(1) + 1;
          if (buffered.length < length) return;
          const type = buffered[0];
          buffered = buffered.subarray(length);
          if (type === 0x58) socket.end(); // Terminate
        }
      }
    };
    socket.on('data', onData);
  });
  await new Promise((resolve) => { server.listen(0, '127.0.0.1', resolve); });
  return {
    connections,
    port: server.address().port,
    close: () => {
      for (const s of sockets) s.destroy();
      return new Promise((resolve) => { server.close(resolve); });
    },
  };
}

function connectClient(config) {
  return connectPreferringTls(config, async () => {
    const client = new pg.Client(config);
    client.on('error', () => {});
    await client.connect();
    return client;
  });
}

test('sslmode=prefer against a server without TLS: plaintext, and remembered', async () => {
  const server = await fakeServer({ tls: false });
  try {
    const config = asConfig(`host=127.0.0.1 port=${server.port} user=u dbname=d sslmode=prefer connect_timeout=5`);
    const client = await connectClient(config);
    await client.end();
    // the TLS attempt refused, then the same connect again without TLS
    assert.deepEqual(server.connections, [{ sslRequest: true, tls: false }, { sslRequest: false, tls: false }]);
    assert.equal(config.ssl, false);
    const again = await connectClient(config);
    await again.end();
    assert.deepEqual(server.connections[2], { sslRequest: false, tls: false }); // no second SSLRequest
    assert.equal(server.connections.length, 3);
  } finally {
    await server.close();
  }
});

test('sslmode=prefer against a server with TLS: TLS (its certificate not checked)', async () => {
  const server = await fakeServer({ tls: true });
  try {
    const config = asConfig(`host=127.0.0.1 port=${server.port} user=u dbname=d sslmode=prefer connect_timeout=5`);
    const client = await connectClient(config);
    await client.end();
    assert.deepEqual(server.connections, [{ sslRequest: true, tls: true }]);
    assert.deepEqual(config.ssl, { rejectUnauthorized: false });
  } finally {
    await server.close();
  }
});

test('no sslmode is libpq\'s default, prefer: both servers connect', async () => {
  const saved = process.env.PGSSLMODE;
  delete process.env.PGSSLMODE;
  const plain = await fakeServer({ tls: false });
  const secure = await fakeServer({ tls: true });
  try {
    for (const server of [plain, secure]) {
      const config = asConfig(`host=127.0.0.1 port=${server.port} user=u dbname=d`);
      assert.equal(config[PREFER_TLS], true);
      const client = await connectClient(config);
      await client.end();
    }
    assert.deepEqual(plain.connections.map((c) => c.tls), [false, false]);
    assert.deepEqual(secure.connections.map((c) => c.tls), [true]);
  } finally {
    if (saved !== undefined) process.env.PGSSLMODE = saved;
    await plain.close();
    await secure.close();
  }
});

test('a URL: prefer (given or absent) is the Router\'s, other modes are pg\'s', async () => {
  const saved = process.env.PGSSLMODE;
  delete process.env.PGSSLMODE;
  const plain = await fakeServer({ tls: false });
  const secure = await fakeServer({ tls: true });
  try {
    for (const server of [plain, secure]) {
      for (const query of ['?sslmode=prefer&connect_timeout=5', '?connect_timeout=5']) {
        const config = asConfig(`postgresql://u@127.0.0.1:${server.port}/d${query}`);
        assert.equal(config.connectionString, `postgresql://u@127.0.0.1:${server.port}/d?connect_timeout=5`);
        const client = await connectClient(config);
        await client.end();
      }
    }
    assert.deepEqual(plain.connections.map((c) => [c.sslRequest, c.tls]), [[true, false], [false, false], [true, false], [false, false]]);
    assert.deepEqual(secure.connections.map((c) => c.tls), [true, true]);
    assert.deepEqual(asConfig('postgresql://u@h/app?sslmode=disable'), { connectionString: 'postgresql://u@h/app?sslmode=disable' });
    assert.deepEqual(asConfig('postgresql://u@h/app?sslmode=prefer&sslrootcert=/ca.pem'), {
      connectionString: 'postgresql://u@h/app?sslmode=prefer&sslrootcert=/ca.pem',
    });
    assert.deepEqual(asConfig('postgresql:///app?host=/tmp'), { connectionString: 'postgresql:///app?host=/tmp', ssl: false });
    assert.deepEqual(asConfig('postgresql://%2Ftmp/app?sslmode=prefer'), { connectionString: 'postgresql://%2Ftmp/app', ssl: false });
  } finally {
    if (saved !== undefined) process.env.PGSSLMODE = saved;
    await plain.close();
    await secure.close();
  }
});

test('sslmode=prefer through a pool (as the shards connect): one refused SSLRequest per pool', async () => {
  const server = await fakeServer({ tls: false });
  const config = asConfig(`host=127.0.0.1 port=${server.port} user=u dbname=d sslmode=prefer connect_timeout=5`);
  const pool = new pg.Pool({ max: 4, ...config });
  try {
    const clients = [];
    for (let i = 0; i < 3; i += 1) clients.push(await connectPreferringTls(pool.options, () => pool.connect()));
    for (const c of clients) c.release();
    assert.deepEqual(server.connections.map((c) => c.sslRequest), [true, false, false, false]);
    assert.ok(server.connections.every((c) => !c.tls));
  } finally {
    await pool.end();
    await server.close();
  }
});

test('sslmode=require against a server without TLS fails (no fallback)', async () => {
  const server = await fakeServer({ tls: false });
  try {
    const config = asConfig(`host=127.0.0.1 port=${server.port} user=u dbname=d sslmode=require connect_timeout=5`);
    await assert.rejects(connectClient(config), /does not support SSL/);
    assert.equal(server.connections.length, 1);
  } finally {
    await server.close();
  }
});

test('sslmode in keyword/value connection strings', () => {
  const saved = process.env.PGSSLMODE;
  try {
    delete process.env.PGSSLMODE;
    const absent = asConfig('host=h');
    assert.deepEqual(absent.ssl, { rejectUnauthorized: false });
    assert.equal(absent[PREFER_TLS], true);
    assert.deepEqual(asConfig('host=/tmp/s'), { host: '/tmp/s', ssl: false }); // no TLS on a Unix socket
    assert.deepEqual(asConfig('host=h sslmode=disable'), { host: 'h', ssl: false });
    assert.deepEqual(asConfig('host=h sslmode=allow'), { host: 'h', ssl: false });
    assert.equal(asConfig('host=h sslmode=require')[PREFER_TLS], undefined);
    assert.deepEqual(asConfig('host=h sslmode=verify-full'), { host: 'h', ssl: { rejectUnauthorized: true } });
    process.env.PGSSLMODE = 'disable';
    assert.deepEqual(asConfig('host=h'), { host: 'h', ssl: false });
    assert.throws(() => asConfig('host=h sslmode=on'), /sslmode=on/);
  } finally {
    if (saved === undefined) delete process.env.PGSSLMODE;
    else process.env.PGSSLMODE = saved;
  }
});
