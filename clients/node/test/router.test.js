'use strict';
// The Router against the fake of fake_pg.js, beyond the shared scenarios: 64-bit ids, a body
// that swallowed an error, what is sent to a shard (nothing per session), route changes
// heard, missed and polled, and a coordinator down at the start.
const test = require('node:test');
const assert = require('node:assert/strict');

const { Router, NoRouteError } = require('..');
const { Cluster, READ } = require('./fake_pg');

const ROUTES = [[32767, 'a'], [65535, 'b']];

async function withRouter(options, body) {
  const cluster = new Cluster(ROUTES);
  const router = new Router({
    routes: { connectionString: 'coord' }, shards: { a: { connectionString: 'a' }, b: { connectionString: 'b' } }, backoffBase: 0.05, backoffMax: 0.2, listen: false, refreshInterval: 0,
    pg: cluster.pg, ...options,
  });
  try {
    await router.ready();
    return await body(router, cluster);
  } finally {
    await router.close();
  }
}

/** Polls fn until it returns want; fails loudly with the last value seen after timeoutMs. */
async function pollUntil(what, fn, want, timeoutMs = 5000) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    last = await fn();
    if (last === want) return;
    await new Promise((resolve) => { setTimeout(resolve, 5); });
  }
  assert.fail(`${what}: still ${String(last)} after ${timeoutMs} ms (want ${String(want)})`);
}

test('nextId: an id above 2^53 comes back exact, as a BigInt or a string', async () => {
  await withRouter({}, async (router, cluster) => {
    assert.equal(await router.nextId('orders', 42n), 9007199254740993n);
    assert.deepEqual(cluster.lastParams, ['orders', '42']);
  });
  await withRouter({ ids: 'string' }, async (router) => {
    assert.equal(await router.nextId('orders', 'alice'), '9007199254740993');
  });
});

test('a body that swallowed an error is not reported committed', async () => {
  await withRouter({}, async (router) => {
    await assert.rejects(router.transaction({ gene: 1 }, async (client) => {
      await client.query('SELECT fail').catch(() => {});
      return 'looks fine';
    }), (e) => e.code === '25P02');
    assert.equal(router.stats.transactions, 0);
  });
});

test('a shard gets the version per transaction only: the claim, or set_config(..., true)', async () => {
  await withRouter({}, async (router, cluster) => {
    await router.transaction({ gene: 1 }, async (client) => client.query('SELECT 1'));
    await router.execute({ gene: 1 }, READ, ['1']);
    const sent = Object.values(cluster.pools).flatMap((p) => p.conns).flatMap((c) => c.log);
    assert.deepEqual(sent, [
      'BEGIN; SELECT id_gen.route_claim(1, 1)', 'SELECT 1', 'COMMIT',
      "BEGIN; SELECT pg_catalog.set_config('id_gen.route_version', '1', true)", READ, 'COMMIT',
    ]);
    assert.ok(!sent.some((s) => /^\s*SET /i.test(s)), 'no session SET');
  });
});

test('a route change notified is read at once; one not notified within refreshInterval', async () => {
  await withRouter({ listen: true }, async (router, cluster) => {
    cluster.coord.change([[65535, 'b']], true);
    await pollUntil('the routes after a NOTIFY', () => router.shardForGene(1), 'b');
  });
  await withRouter({ refreshInterval: 20 }, async (router, cluster) => {
    cluster.coord.change([[65535, 'b']], false);
    await pollUntil('the routes after a change nobody notified', () => router.shardForGene(1), 'b');
    assert.equal(router.version, 2n);
  });
});

test('a listening connection lost: it reconnects and re-reads the routes', async () => {
  await withRouter({ listen: true }, async (router, cluster) => {
    const [listener] = [...cluster.coord.listeners];
    cluster.coord.change([[65535, 'b']], false); // missed while it was away
    listener.emit('error', new Error('fake: connection lost'));
    await pollUntil('the routes after the listener came back', () => router.shardForGene(1), 'b');
    await pollUntil('a listener again', () => cluster.coord.listeners.size, 1);
  });
});

test('the coordinator down at the start: connect rejects and leaves nothing open', async () => {
  const cluster = new Cluster(ROUTES);
  cluster.coord.down = true;
  await assert.rejects(Router.connect({ routes: { connectionString: 'coord' }, shards: { a: { connectionString: 'a' } }, pg: cluster.pg }), /fake/);
  const router = new Router({ routes: { connectionString: 'coord' }, shards: { a: { connectionString: 'a' } }, listen: false, pg: cluster.pg });
  await assert.rejects(router.transaction({ gene: 1 }, async () => 1), /fake/);
  await router.close();
});

test('a gene routed to a shard without a connection is a NoRouteError; bad keys are TypeErrors', async () => {
  await withRouter({ shards: { a: { connectionString: 'a' } } }, async (router) => {
    await assert.rejects(router.transaction({ gene: 40000 }, async () => 1), NoRouteError);
    await assert.rejects(router.transaction({ gene: 1, owner: 2n }, async () => 1), TypeError);
    await assert.rejects(router.transaction({ id: 2 ** 60 }, async () => 1), TypeError);
    assert.equal(router.shardForId(9007199254740993n), 'a');
  });
});

test('connection strings: libpq keyword/value pairs (as the other clients take them) or a URL', () => {
  const { asConfig } = require('../lib/router');
  assert.deepEqual(asConfig("host=/tmp/s port=5433 dbname=app user=u password='a b\\'c' connect_timeout=2 sslmode=require"), {
    host: '/tmp/s', port: 5433, database: 'app', user: 'u', password: "a b'c", connectionTimeoutMillis: 2000,
    ssl: { rejectUnauthorized: false },
  });
  assert.deepEqual(asConfig('postgresql://u@h/app'), { connectionString: 'postgresql://u@h/app' });
  assert.deepEqual(asConfig({ host: 'h' }), { host: 'h' });
  assert.throws(() => asConfig('host=h gssencmode=disable'), /not supported/);
  assert.throws(() => asConfig('host=h junk'), /not a connection string/);
});

test('a shard connection that breaks while checked out does not crash the process; the client is destroyed', async () => {
  await withRouter({}, async (router, cluster) => {
    await assert.rejects(router.transaction({ gene: 1 }, async (client) => {
      client.emit('error', new Error('fake: terminating connection'));
      const e = new Error('fake: Connection terminated');
      throw e;
    }), /Connection terminated/);
    const pool = cluster.pools.a;
    assert.equal(pool.destroyed, 1);
    assert.equal(pool.out, 0);
  });
});
