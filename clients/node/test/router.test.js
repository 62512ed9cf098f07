'use strict';
// The Router against the fake of fake_pg.js, beyond the shared scenarios: 64-bit ids, a body
// that swallowed an error, what is sent to a shard (nothing per session), the claim on BEGIN or
// the old one by the shard's probed routing protocol, route changes heard, missed and polled,
// LISTEN failing at the start (not fatal), a coordinator down at the start, and lost shard
// connections.
const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');

const {
  Router, NoRouteError, RouteRetryExhausted, CommitOutcomeUnknownError,
} = require('..');
const { connectionLost } = require('../lib/errors');
const { ROUTING_PROTOCOL_SQL, claimsOnBegin } = require('../lib/routes');
const { Cluster, READ, sqlError } = require('./fake_pg');

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

test('a shard gets the version per transaction only: the claim, or the statement\'s leading comment', async () => {
  await withRouter({}, async (router, cluster) => {
    await router.transaction({ gene: 1 }, async (client) => client.query('SELECT 1'));
    await router.execute({ gene: 1 }, READ, ['1']);
    const sent = cluster.sent();
    assert.deepEqual(sent, [
      ROUTING_PROTOCOL_SQL, '/* id_gen.route_claim=1,1 */ BEGIN', 'SELECT 1', 'COMMIT',
      `/* id_gen.route_version=1 */ ${READ}`,
    ]);
    assert.ok(!sent.some((s) => /^\s*SET /i.test(s)), 'no session SET');
  });
});

test("the routing protocol's answer: 2 or more claims on BEGIN, anything else is the old form", () => {
  for (const answer of ['2', '3', '10']) assert.ok(claimsOnBegin(answer), answer);
  for (const answer of [null, '', '1', 'x', ' 2', '2.0']) assert.ok(!claimsOnBegin(answer), String(answer));
});

const commitNothing = async () => null;

test('a new shard takes the claim on BEGIN, probed once for many transactions', async () => {
  await withRouter({}, async (router, cluster) => {
    for (let i = 0; i < 5; i += 1) await router.transaction({ gene: 1 }, commitNothing);
    const sent = cluster.sent();
    assert.deepEqual(sent.slice(0, 5), [
      ROUTING_PROTOCOL_SQL, '/* id_gen.route_claim=1,1 */ BEGIN', 'COMMIT', '/* id_gen.route_claim=1,1 */ BEGIN', 'COMMIT',
    ]);
    assert.equal(sent.length, 11);
    await router.transaction({ gene: 40000 }, commitNothing);
    assert.equal(cluster.probes(), 2, 'one probe per shard');
  });
});

test('an old shard (its probe answers NULL) gets the old claim', async () => {
  await withRouter({}, async (router, cluster) => {
    cluster.oldShards.add('a');
    for (let i = 0; i < 2; i += 1) await router.transaction({ gene: 1 }, commitNothing);
    assert.deepEqual(cluster.sent(), [
      ROUTING_PROTOCOL_SQL, 'BEGIN; SELECT id_gen.route_claim(1, 1)', 'COMMIT', 'BEGIN; SELECT id_gen.route_claim(1, 1)', 'COMMIT',
    ]);
    cluster.coord.change([[65535, 'b']], false); // (the old claim still finds a stale route)
    await router.transaction({ gene: 1 }, commitNothing);
    assert.equal(router.stats.retriesMoved, 1);
  });
});

test('a probe that fails with an error of the server means the old claim, and is kept so', async () => {
  await withRouter({}, async (router, cluster) => {
    cluster.probesFail = 1;
    for (let i = 0; i < 2; i += 1) await router.transaction({ gene: 1 }, commitNothing);
    assert.deepEqual(cluster.sent(), [
      ROUTING_PROTOCOL_SQL, 'BEGIN; SELECT id_gen.route_claim(1, 1)', 'COMMIT', 'BEGIN; SELECT id_gen.route_claim(1, 1)', 'COMMIT',
    ]);
  });
});

test('after a lost connection the shard is probed again', async () => {
  await withRouter({}, async (router, cluster) => {
    await router.transaction({ gene: 1 }, commitNothing);
    cluster.claimsLost = 1;
    await router.transaction({ gene: 1 }, commitNothing);
    assert.deepEqual([cluster.probes(), router.stats.retriesLost], [2, 1], 'after a claim lost');
    // The shard restarts with an older id_gen: refused meanwhile, then probed and claimed so.
    cluster.oldShards.add('a');
    cluster.connectFails = 1;
    await router.transaction({ gene: 1 }, commitNothing);
    assert.deepEqual(cluster.sent().slice(-3), [ROUTING_PROTOCOL_SQL, 'BEGIN; SELECT id_gen.route_claim(1, 1)', 'COMMIT']);
    // Refused again, back on the newer id_gen, and lost under the probe: retried as at the claim.
    cluster.oldShards.delete('a');
    cluster.connectFails = 1;
    cluster.probesLost = 1;
    await router.transaction({ gene: 1 }, commitNothing);
    assert.deepEqual([cluster.probes(), router.stats.retriesLost], [5, 4], 'after a probe lost');
    await router.transaction({ gene: 1 }, commitNothing);
    assert.deepEqual(cluster.sent().slice(-2), ['/* id_gen.route_claim=1,1 */ BEGIN', 'COMMIT']);
    assert.equal(cluster.probes(), 5);
    assert.equal(cluster.pools.a.deadReturnedIdle, 0);
  });
});

test('an idle connection the pool dropped as broken makes the shard probed again', async () => {
  await withRouter({}, async (router, cluster) => {
    await router.transaction({ gene: 1 }, commitNothing);
    cluster.pools.a.emit('error', new Error('fake: terminating connection'), null); // (as pg-pool for an idle client)
    await router.transaction({ gene: 1 }, commitNothing);
    assert.equal(cluster.probes(), 2);
  });
});

test('a claim on BEGIN refused (IG001) is retried on the new owner', async () => {
  await withRouter({}, async (router, cluster) => {
    cluster.coord.change([[65535, 'b']], false); // (gene 1 moved to b, unseen)
    assert.equal(await router.transaction({ gene: 1 }, async (client) => client.shard), 'b');
    // (the ROLLBACK after the failed claim finds no transaction: harmless, as on a server)
    assert.deepEqual(cluster.sent('a'), [ROUTING_PROTOCOL_SQL, '/* id_gen.route_claim=1,1 */ BEGIN', 'ROLLBACK']);
    assert.deepEqual(cluster.sent('b'), [ROUTING_PROTOCOL_SQL, '/* id_gen.route_claim=1,2 */ BEGIN', 'COMMIT']);
    assert.deepEqual([router.stats.retriesMoved, router.stats.transactions, cluster.pools.a.destroyed], [1, 1, 0]);
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

test('LISTEN failing at the start does not fail connect: the poll covers, the listener is retried until close()', async () => {
  const cluster = new Cluster(ROUTES);
  cluster.coord.listenFails = true; // (a pooler in front of the coordinator, say)
  const router = await Router.connect({
    routes: { connectionString: 'coord' }, shards: { a: { connectionString: 'a' }, b: { connectionString: 'b' } }, backoffBase: 0.05, backoffMax: 0.2, listen: true, refreshInterval: 20,
    pg: cluster.pg,
  });
  try {
    assert.ok(cluster.coord.listenAttempts >= 1, 'connect tried LISTEN');
    assert.deepEqual([cluster.coord.listeners.size, router.version], [0, 1n]);
    assert.equal(await router.transaction({ gene: 40000 }, async (c) => c.shard), 'b');
    cluster.coord.change([[65535, 'a']], true); // nobody listens: the poll sees it
    await pollUntil('the routes after a change while LISTEN fails', () => router.shardForGene(40000), 'a');
    assert.equal(router.version, 2n);
    assert.equal(await router.transaction({ gene: 40000 }, async (c) => c.shard), 'a');
    const attempts = cluster.coord.listenAttempts;
    await pollUntil('LISTEN retried in the background', () => cluster.coord.listenAttempts > attempts, true);
    assert.equal(cluster.coord.listeners.size, 0);
    cluster.coord.listenFails = false;
    await pollUntil('a listener once LISTEN works', () => cluster.coord.listeners.size, 1);
  } finally {
    await router.close();
  }
  assert.equal(cluster.coord.listeners.size, 0, 'close() ended the listener');
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
  assert.deepEqual(asConfig('postgresql://u@h/app?sslmode=require'), { connectionString: 'postgresql://u@h/app?sslmode=require' });
  assert.deepEqual(asConfig({ host: 'h' }), { host: 'h' });
  assert.throws(() => asConfig('host=h gssencmode=disable'), /not supported/);
  assert.throws(() => asConfig('host=h junk'), /not a connection string/);
});

test('a shard connection that breaks while checked out does not crash the process; the client is destroyed', async () => {
  await withRouter({}, async (router, cluster) => {
    await assert.rejects(router.run({ gene: 1 }, async (client) => {
      client.emit('error', new Error('fake: terminating connection'));
      throw client.lose(new Error('Connection terminated unexpectedly'));
    }), /Connection terminated/);
    const pool = cluster.pools.a;
    assert.equal(pool.destroyed, 1);
    assert.equal(pool.out, 0);
  });
});

test('a connection lost between the body and COMMIT (COMMIT never sent): transaction runs the body again, run fails', async () => {
  await withRouter({}, async (router, cluster) => {
    let runs = 0;
    const loseOnce = async (client) => {
      runs += 1;
      if (runs === 1) client.lose(new Error('Connection terminated unexpectedly')); // (the body saw nothing)
      return runs;
    };
    assert.equal(await router.transaction({ gene: 1 }, loseOnce), 2);
    assert.equal(router.stats.retriesLost, 1);
    runs = 0;
    await assert.rejects(router.run({ gene: 1 }, loseOnce), (e) => !(e instanceof CommitOutcomeUnknownError) && /not queryable/.test(e.message));
    assert.equal(runs, 1);
    assert.deepEqual([cluster.pools.a.out, cluster.pools.a.destroyed, cluster.pools.a.deadReturnedIdle], [0, 2, 0]);
  });
});

test('lost connections: what counts as one', () => {
  for (const code of ['08006', '08001', '08P01', '57P01', '57P02', '57P03', 'ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT']) {
    assert.ok(connectionLost(Object.assign(new Error('x'), { code })), code);
  }
  for (const message of ['Connection terminated unexpectedly', 'Connection terminated', 'Connection terminated due to connection timeout',
    'Client has encountered a connection error and is not queryable', 'timeout expired', 'timeout exceeded when trying to connect']) {
    assert.ok(connectionLost(new Error(message)), message);
  }
  for (const code of ['IG001', 'IG002', '22012', '40001', '57014', '28P01', 'ENOTFOUND']) {
    assert.ok(!connectionLost(Object.assign(new Error('Connection terminated'), { code })), code);
  }
  assert.ok(!connectionLost(new Error('Query read timeout')));
  assert.ok(!connectionLost(new Error('fake: Connection terminated')));
  assert.ok(!connectionLost(null));
});

test('execute: the statement commits on its own, so a connection lost under it is commit outcome unknown; a refused connect is retried', async () => {
  await withRouter({}, async (router, cluster) => {
    cluster.readsLost = 1;
    const unknown = await router.execute({ owner: 1n }, READ, ['1']).catch((e) => e);
    assert.ok(unknown instanceof CommitOutcomeUnknownError, String(unknown));
    assert.equal(unknown.cause.code, '57P01');
    assert.equal(router.stats.retriesLost, 0, 'never retried');
    cluster.connectFails = 1;
    assert.deepEqual(await router.execute({ owner: 1n }, READ, ['1']), [{ amount: 7 }]);
    assert.equal(router.stats.retriesLost, 1);
    assert.equal(router.stats.transactions, 1);
    const pool = cluster.pools[router.shardForOwner(1n)];
    assert.deepEqual([pool.out, pool.destroyed, pool.deadReturnedIdle], [0, 1, 0]);
  });
});

test('a statement that timed out (query_timeout) leaves its connection destroyed; at COMMIT the outcome is unknown', async () => {
  await withRouter({}, async (router, cluster) => {
    cluster.commitTimesOut = true;
    const unknown = await router.transaction({ gene: 1 }, async (client) => client.query('SELECT 1')).catch((e) => e);
    assert.ok(unknown instanceof CommitOutcomeUnknownError, String(unknown));
    assert.equal(unknown.cause.message, 'Query read timeout');
    const pool = cluster.pools.a;
    assert.deepEqual([pool.out, pool.destroyed, pool.deadReturnedIdle], [0, 1, 0]);
  });
});

test('retries exhausted after lost connections say so, with the last error as the cause', async () => {
  await withRouter({ retryLimit: 1 }, async (router, cluster) => {
    cluster.connectFails = 5;
    const error = await router.transaction({ gene: 1 }, async () => 1).catch((e) => e);
    assert.ok(error instanceof RouteRetryExhausted, String(error));
    assert.match(error.message, /shard connection was refused or lost in 2 attempts/);
    assert.equal(error.cause.code, 'ECONNREFUSED');
    assert.equal(router.stats.retriesLost, 1);
  });
});

test('a connect that fails for another reason (a password refused) is not retried', async () => {
  await withRouter({}, async (router, cluster) => {
    cluster.connectFails = 1;
    cluster.connectError = () => sqlError('28P01');
    await assert.rejects(router.transaction({ gene: 1 }, async () => 1), (e) => e.code === '28P01');
    assert.equal(router.stats.retriesLost, 0);
  });
});

test("pg's own errors of a shard that drops or refuses connections are lost connections, retried", async () => {
  // (a loopback socket that closes every connection at once; nothing listens on port 1)
  const dropping = net.createServer((socket) => socket.destroy());
  await new Promise((resolve) => { dropping.listen(0, '127.0.0.1', resolve); });
  const cluster = new Cluster(ROUTES);
  const realPg = require('pg');
  const router = new Router({
    routes: { connectionString: 'coord' },
    shards: { a: `host=127.0.0.1 port=${dropping.address().port} user=u dbname=d`, b: 'host=127.0.0.1 port=1 user=u dbname=d' },
    retryLimit: 2, backoffBase: 0.05, backoffMax: 0.2, listen: false, refreshInterval: 0, pool: { connectionTimeoutMillis: 5000 },
    pg: { Client: cluster.pg.Client, Pool: realPg.Pool, types: realPg.types },
  });
  try {
    await router.ready();
    for (const [gene, cause] of [[1, /Connection terminated unexpectedly/], [40000, /ECONNREFUSED/]]) {
      const error = await router.transaction({ gene }, async () => 1).catch((e) => e);
      assert.ok(error instanceof RouteRetryExhausted, String(error));
      assert.match(error.cause.message, cause);
    }
    assert.equal(router.stats.retriesLost, 4);
  } finally {
    await router.close();
    dropping.close();
  }
});

test('a body that ends the transaction itself is never reported committed, nor run again after its own COMMIT', async () => {
  const cluster = new Cluster([[32767, 'a'], [65535, 'b']]);
  const router = new Router({
    routes: { connectionString: 'coord' }, shards: { a: { connectionString: 'a' }, b: { connectionString: 'b' } },
    listen: false, refreshInterval: 0, backoffBase: 0.05, backoffMax: 0.2, pg: cluster.pg,
  });
  try {
    await router.ready();
    await assert.rejects(router.transaction({ gene: 1 }, (client) => client.query('ROLLBACK')), (e) => e.code === '25P01');
    let runs = 0;
    await assert.rejects(router.transaction({ gene: 1 }, async (client) => {
      runs += 1;
      await client.query('COMMIT');
      throw sqlError('IG001'); // (a statement after its own COMMIT runs without the claim)
    }), (e) => e.code === 'IG001');
    assert.deepEqual([runs, router.stats.transactions, router.stats.retriesMoved], [1, 0, 0]);
  } finally {
    await router.close();
  }
});
