'use strict';
// The conformance tool (tools/conformance.js, docs/routing-protocol.md §6) without a server:
// its genes mode and exit statuses as a process, its arguments, and its load against the fake
// of fake_pg.js.
const test = require('node:test');
const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const {
  parseLoadArgs, runLoad, runSlices, SLICE_MS, SIDE_BY_SIDE, UsageError,
} = require('../tools/conformance');
const { Cluster } = require('./fake_pg');

const WRAPPER = path.join(__dirname, '..', 'conformance');
const SPAWN_TIMEOUT_MS = 30000;

function conformance(args, input) {
  const r = spawnSync(WRAPPER, args, { input, encoding: 'utf8', timeout: SPAWN_TIMEOUT_MS });
  if (r.error) throw r.error;
  return r;
}

const LOAD_ARGS = [
  '--routes', 'host=127.0.0.1 port=5432 user=postgres dbname=postgres',
  '--shard', 'shard_1=host=127.0.0.1 port=5433 user=postgres dbname=postgres',
  '--shard', 'shard_2=host=127.0.0.1 port=5434 user=postgres dbname=postgres password=x',
  '--table', 'conf_node', '--sequence', 'orders', '--owners', '1000', '--seconds', '900', '--log', '/tmp/x.log',
];

test('genes: one gene per owner line, in order (the check values of §1)', () => {
  const r = conformance(['genes'], 'i:42\ni:0\nt:alice\ni:45346343212\nu:12345678-1234-5678-1234-567812345678\n');
  assert.equal(r.stderr, '');
  assert.equal(r.status, 0);
  const lines = r.stdout.split('\n');
  assert.deepEqual(lines.slice(0, 4), ['16043', '55408', '13795', '14299']);
  assert.equal(lines.length, 6); // (the uuid's gene, and the last newline)
});

test('exit status 2 for bad arguments or a line that is no owner', () => {
  assert.equal(conformance([]).status, 2);
  assert.equal(conformance(['genes'], 'x:1\n').status, 2);
  assert.equal(conformance(['genes'], 'i:12ab\n').status, 2);
  assert.equal(conformance(['load', '--routes', 'host=h']).status, 2);
});

test('exit status 1 when the routes cannot be read', async () => {
  await inTempDir(async (dir) => {
    // (port 1 on the loopback refuses at once: nothing listens there)
    const refused = conformance(['load', '--routes', 'host=127.0.0.1 port=1 user=postgres dbname=postgres',
      '--shard', 'a=host=127.0.0.1 port=1', '--table', 't', '--sequence', 'q', '--owners', '3', '--seconds', '1',
      '--log', path.join(dir, 'log')]);
    assert.equal(refused.status, 1, refused.stderr);
    assert.match(refused.stderr, /the routes could not be read/);
  });
});

test('load arguments: NAME=DSN shards (a DSN holds = too), the defaults, and what is refused', () => {
  const options = parseLoadArgs(LOAD_ARGS);
  assert.deepEqual(options, {
    routes: 'host=127.0.0.1 port=5432 user=postgres dbname=postgres',
    shards: {
      shard_1: 'host=127.0.0.1 port=5433 user=postgres dbname=postgres',
      shard_2: 'host=127.0.0.1 port=5434 user=postgres dbname=postgres password=x',
    },
    table: 'conf_node',
    sequence: 'orders',
    owners: 1000,
    seconds: 900,
    log: '/tmp/x.log',
    stopFile: null,
    readEvery: 4,
    refreshIntervalMs: 1000,
    listen: true,
    retryLimit: 20,
    backoffMaxMs: 200,
  });
  const retries = parseLoadArgs([...LOAD_ARGS, '--retry-limit', '200', '--backoff-max-ms', '0']);
  assert.deepEqual([retries.retryLimit, retries.backoffMaxMs], [200, 0]);
  const failover = parseLoadArgs([...LOAD_ARGS, '--shard',
    'shard_3=host=127.0.0.1,127.0.0.1 port=5435,5436 user=postgres dbname=postgres target_session_attrs=read-write connect_timeout=2']);
  assert.match(failover.shards.shard_3, /target_session_attrs=read-write/);
  const more = parseLoadArgs([...LOAD_ARGS, '--stop-file', '/tmp/stop', '--read-every', '0', '--refresh-interval-ms', '0', '--no-listen']);
  assert.deepEqual([more.stopFile, more.readEvery, more.refreshIntervalMs, more.listen], ['/tmp/stop', 0, 0, false]);
  const refused = [
    LOAD_ARGS.filter((a) => a !== '--log' && a !== '/tmp/x.log'), // --log missing
    [...LOAD_ARGS, '--shard', 'no_dsn'],
    [...LOAD_ARGS, '--shard', '=host=h'],
    [...LOAD_ARGS, '--shard', 'c=host=h gssencmode=disable'], // a keyword the client does not take
    [...LOAD_ARGS, '--owners', '0'],
    [...LOAD_ARGS, '--owners', '1.5'],
    [...LOAD_ARGS, '--seconds', 'soon'],
    [...LOAD_ARGS, '--read-every', '-1'],
    [...LOAD_ARGS, '--table', 'conf; DROP TABLE x'],
    [...LOAD_ARGS, '--bogus'],
    [...LOAD_ARGS, '--retry-limit', '-1'],
    [...LOAD_ARGS, '--retry-limit', '2.5'],
    [...LOAD_ARGS, '--backoff-max-ms', 'x'],
    [...LOAD_ARGS, '--backoff-max-ms', '-200'],
    [...LOAD_ARGS, '--shard', 'c=host=a,b port=1,2,3'], // the port list does not match the hosts
    [...LOAD_ARGS, '--shard', 'c=host=a,b target_session_attrs=standby'],
  ];
  for (const args of refused) assert.throws(() => parseLoadArgs(args), UsageError, args.join(' '));
});

/** body(dir) with a new temporary directory, removed after. */
async function inTempDir(body) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'conformance-'));
  try {
    return await body(dir);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

function fakeLoad(dir, extra) {
  return {
    routes: { connectionString: 'coord' },
    shards: { a: { connectionString: 'a' }, b: { connectionString: 'b' } },
    table: 'conf_node',
    sequence: 'orders',
    owners: 5,
    seconds: 0.2,
    log: path.join(dir, 'log'),
    stopFile: path.join(dir, 'stop'),
    readEvery: 1,
    refreshIntervalMs: 0,
    listen: false,
    ...extra,
  };
}

test('load against the fake: one log line owner,id per commit, reads by owner, lost connections counted', async () => {
  await inTempDir(async (dir) => {
    const cluster = new Cluster([[32767, 'a'], [65535, 'b']]);
    cluster.claimsLost = 2; // retried: retries 2
    cluster.commitLost = true; // one commit outcome unknown: failed, never logged
    const options = fakeLoad(dir);
    const counts = await runLoad(options, cluster.pg);
    const lines = fs.readFileSync(options.log, 'utf8').split('\n');
    assert.equal(lines.pop(), '');
    assert.ok(counts.committed > 0 && counts.reads > 0, JSON.stringify(counts));
    assert.equal(lines.length, counts.committed);
    // (the fake's gene_order_id answers 2^53 + 1: the id stays exact, a BigInt end to end)
    for (const line of lines) assert.match(line, /^[1-5],9007199254740993$/);
    assert.deepEqual([counts.failed, counts.unknown, counts.retries], [1, 1, 2]);
    assert.equal(counts.empty, counts.reads); // (the fake counts no rows)
    assert.ok(cluster.lastParams[0] === 'orders' && /^[1-5]$/.test(cluster.lastParams[1]));
    assert.equal(cluster.outstanding(), 0);
  });
});

test('load: the stop file ends it; nothing committed, nothing logged', async () => {
  await inTempDir(async (dir) => {
    const cluster = new Cluster([[32767, 'a'], [65535, 'b']]);
    const options = fakeLoad(dir, { seconds: 600 });
    fs.writeFileSync(options.stopFile, '');
    const counts = await runLoad(options, cluster.pg);
    assert.deepEqual(counts, {
      reads: 0, empty: 0, unknown: 0, committed: 0, failed: 0, retries: 0,
    });
    assert.equal(fs.readFileSync(options.log, 'utf8'), '');
  });
});

test('bench: one side or both, side by side in slices Router, direct, direct, Router', async () => {
  const base = LOAD_ARGS.filter((a, i) => a !== '--log' && LOAD_ARGS[i - 1] !== '--log');
  const options = parseLoadArgs([...base, '--mode', 'tx', '--side-by-side'], true);
  assert.equal(options.sideBySide, true);
  assert.equal(options.direct, false);
  assert.throws(() => parseLoadArgs([...base, '--mode', 'tx', '--side-by-side', '--direct'], true),
    /exclude each other/);
  assert.throws(() => parseLoadArgs([...LOAD_ARGS, '--side-by-side']), UsageError);
  assert.equal(options.warmUpSeconds, 0.5);
  assert.equal(parseLoadArgs([...base, '--mode', 'tx', '--warm-up-seconds', '2.5'], true).warmUpSeconds, 2.5);
  for (const bad of ['-1', 'x', '3601', '']) {
    assert.throws(() => parseLoadArgs([...base, '--mode', 'tx', '--warm-up-seconds', bad], true), UsageError, bad);
  }
  // A clock that each operation moves on by 62.5 ms: two operations a slice of 100 ms.
  let clock = 1000;
  const done = [];
  const one = async (direct) => { done.push(direct); clock += 62.5; };
  const [r, d] = [false, true];
  let measured = await runSlices(one, SIDE_BY_SIDE, 1000, () => clock);
  assert.deepEqual(done, [r, r, d, d, d, d, r, r, r, r, d, d, d, d, r, r]);
  assert.deepEqual([...measured], [[r, { ops: 8, seconds: 0.5 }], [d, { ops: 8, seconds: 0.5 }]]);
  done.length = 0;
  measured = await runSlices(one, SIDE_BY_SIDE, 0, () => clock);
  assert.deepEqual(done, [r, d, d, r], 'every side runs, even in no time');
  assert.deepEqual([measured.get(r).ops, measured.get(d).ops], [2, 2]);
  await assert.rejects(runSlices(async () => { throw new Error('down'); }, [true], SLICE_MS), /down/);
});
