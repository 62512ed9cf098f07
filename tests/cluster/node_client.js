'use strict';
// The Node.js client (clients/node) against real servers, for tests/cluster/test_routing.py.
//   node node_client.js genes                  stdin lines "b <bigint>" / "t <text>" / "u <uuid>":
//                                              one gene per line on stdout
//   node node_client.js load ROUTES SHARDS OWNERS STOPFILE
//                                              inserts rows (note 'node') for owners 1..OWNERS
//                                              through Router.transaction until STOPFILE
//                                              exists; prints {"tx", "errors", "retries", "version"}
//   node node_client.js stale ROUTES SHARDS OWNER GOFILE
//                                              reads the routes (no LISTEN, no poll), prints
//                                              "ready" on stderr, waits for GOFILE, then reads
//                                              the owner's rows with transaction and execute
//                                              and takes an id with nextId; prints the result
const fs = require('node:fs');
const path = require('node:path');
const readline = require('node:readline');

const { Router, geneOf, uuid } = require(path.join(__dirname, '..', '..', 'clients', 'node'));

const sleep = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });

async function genes() {
  const out = [];
  for await (const line of readline.createInterface({ input: process.stdin })) {
    const kind = line[0];
    const value = line.slice(2);
    out.push(geneOf(kind === 'b' ? BigInt(value) : kind === 'u' ? uuid(value) : value));
  }
  process.stdout.write(out.join('\n') + '\n');
}

async function load(routes, shards, owners, stopFile) {
  const router = await Router.connect({ routes, shards: JSON.parse(shards) });
  let tx = 0;
  let errors = 0;
  const lastErrors = [];
  try {
    for (let i = 0; !fs.existsSync(stopFile); i += 1) {
      const owner = BigInt((i % Number(owners)) + 1);
      try {
        await router.transaction({ owner }, async (client) => {
          await client.query("INSERT INTO orders (id, owner_id, amount, note) VALUES (id_gen.gene_order_id('orders', $1::bigint), $1, 1, 'node')", [String(owner)]);
        });
        tx += 1;
      } catch (e) {
        errors += 1;
        if (lastErrors.length < 3) lastErrors.push(String(e));
      }
      if (i % 50 === 49) await sleep(5);
    }
  } finally {
    await router.close();
  }
  const { retriesMoved, retriesFenced } = router.stats;
  process.stdout.write(JSON.stringify({ tx, errors, lastErrors, retries: retriesMoved + retriesFenced, version: String(router.version) }));
}

async function stale(routes, shards, owner, goFile) {
  const options = { routes, shards: JSON.parse(shards), listen: false, refreshInterval: 0 };
  const [r1, r2] = [await Router.connect(options), await Router.connect(options)];
  try {
    const key = { owner: BigInt(owner) };
    const before = r1.shardForOwner(key.owner);
    process.stderr.write('ready\n');
    while (!fs.existsSync(goFile)) await sleep(20);
    const viaTransaction = await r1.transaction(key, async (client) => (
      await client.query('SELECT count(*) AS n FROM orders WHERE owner_id = $1', [owner])).rows[0].n);
    const viaExecute = (await r2.execute(key, 'SELECT count(*) AS n FROM orders WHERE owner_id = $1', [owner]))[0].n;
    const id = await r1.nextId('orders', key.owner);
    process.stdout.write(JSON.stringify({
      before, after: r1.shardForOwner(key.owner), viaTransaction: String(viaTransaction), viaExecute: String(viaExecute),
      id: String(id), idIsBigInt: typeof id === 'bigint', idShard: r1.shardForId(id),
      retriesMoved: [r1.stats.retriesMoved, r2.stats.retriesMoved],
    }));
  } finally {
    await Promise.all([r1.close(), r2.close()]);
  }
}

const [mode, ...args] = process.argv.slice(2);
const modes = { genes, load, stale };
if (!(mode in modes)) {
  process.stderr.write(`usage: node node_client.js genes|load|stale ...\n`);
  process.exit(2);
}
modes[mode](...args).catch((e) => {
  process.stderr.write(`${e.stack || e}\n`);
  process.exit(1);
});
