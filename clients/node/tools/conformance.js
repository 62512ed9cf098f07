'use strict';
// The conformance tool of the Node.js client (docs/routing-protocol.md §6): the same command
// line as every other client's, run by tests/cluster/test_conformance.py through ../conformance.
//
//   conformance genes        owners on stdin (i:<bigint>, t:<text>, u:<uuid>), genes on stdout
//   conformance load ...     4 writers through one Router (see USAGE)
//   conformance bench ...    one client's transactions or lookups: Router, --direct or --side-by-side
//
// Invariants: a log line `owner,id` is written whole (one write to a file opened for append)
// only after its transaction committed; every failure is counted, none ends the load; the
// last two stdout lines are `reads R empty E unknown U` and `committed N failed M retries X`;
// owners, ids and id ranges are BigInts end to end (passed to pg as decimal strings); every
// wait is bounded (the Router's timeouts, the load's deadline, CLOSE_TIMEOUT_MS, EXIT_GRACE_MS).
const fs = require('node:fs');
const { parseArgs } = require('node:util');

const {
  Router, CommitOutcomeUnknownError, geneOf, uuid,
} = require('..');
const { ROUTER_DEFAULTS, asConfig, connectPreferringTls } = require('../lib/router');
const { poolClientOption } = require('../lib/multihost');

const USAGE = `usage: conformance genes
       conformance load --routes DSN --shard NAME=DSN [--shard NAME=DSN ...] --table T --sequence Q
                        --owners N --seconds S --log FILE [--stop-file F] [--read-every K]
                        [--refresh-interval-ms MS] [--no-listen] [--retry-limit N]
                        [--backoff-max-ms MS]
       conformance bench (the flags of load but --log) --mode tx|lookup
                        [--direct | --side-by-side] [--warm-up-seconds S]`;
const WRITERS = 4;
const ERRORS_SHOWN = 5;
const CLOSE_TIMEOUT_MS = 10000;
const EXIT_GRACE_MS = 10000;
const ID_SEQUENCE_BITS = 47n;

class UsageError extends Error {}

// --- genes -------------------------------------------------------------------------------

const OWNER_KINDS = { 'i:': (v) => BigInt(v), 't:': (v) => v, 'u:': (v) => uuid(v) };

/** The genes of stdin's owners, one line each, in order (split on \n only: a text may hold \r or \t). */
function genesOf(input) {
  const out = [];
  for (const line of input.split('\n')) {
    if (line === '') continue;
    const kind = OWNER_KINDS[line.slice(0, 2)];
    if (kind === undefined) throw new UsageError(`conformance genes: a line must start with i:, t: or u:, not ${JSON.stringify(line)}`);
    let owner;
    try {
      owner = kind(line.slice(2));
    } catch (e) {
      throw new UsageError(`conformance genes: not an owner: ${JSON.stringify(line)} (${e.message})`);
    }
    out.push(`${geneOf(owner)}\n`);
  }
  return out.join('');
}

async function genes() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  process.stdout.write(genesOf(Buffer.concat(chunks).toString('utf8')));
  return 0;
}

// --- load --------------------------------------------------------------------------------

function integerArg(values, name, fallback, least) {
  const text = values[name];
  if (text === undefined && fallback !== undefined) return fallback;
  if (text === undefined || !/^\d+$/.test(text) || Number(text) < least) {
    throw new UsageError(`--${name} takes an integer of at least ${least}, not ${JSON.stringify(text)}`);
  }
  return Number(text);
}

/**
 * The Router's retryLimit and backoff of --retry-limit and --backoff-max-ms (the first delay,
 * 5 ms by default, lowered to the largest when that is below it).
 */
function retrySettings(options) {
  return {
    retryLimit: options.retryLimit,
    backoffMax: options.backoffMaxMs,
    backoffBase: Math.min(ROUTER_DEFAULTS.backoffBase, options.backoffMaxMs),
  };
}

/** The load's options from its arguments; a UsageError (exit status 2) when they are wrong. */
function parseLoadArgs(argv, bench = false) {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        routes: { type: 'string' },
        shard: { type: 'string', multiple: true },
        table: { type: 'string' },
        sequence: { type: 'string' },
        owners: { type: 'string' },
        seconds: { type: 'string' },
        log: { type: 'string' },
        'stop-file': { type: 'string' },
        'read-every': { type: 'string' },
        'refresh-interval-ms': { type: 'string' },
        'no-listen': { type: 'boolean' },
        'retry-limit': { type: 'string' },
        'backoff-max-ms': { type: 'string' },
        ...(bench ? {
          mode: { type: 'string' }, direct: { type: 'boolean' }, 'side-by-side': { type: 'boolean' }, 'warm-up-seconds': { type: 'string' },
        } : {}),
      },
    }));
  } catch (e) {
    throw new UsageError(e.message);
  }
  for (const name of ['routes', 'shard', 'table', 'sequence', 'owners', 'seconds', bench ? 'mode' : 'log']) {
    if (values[name] === undefined) throw new UsageError(`--${name} is required`);
  }
  const shards = {};
  for (const item of values.shard) {
    const at = item.indexOf('=');
    if (at < 1) throw new UsageError(`--shard takes NAME=DSN, not ${JSON.stringify(item)}`);
    shards[item.slice(0, at)] = item.slice(at + 1);
  }
  if (!/^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$/.test(values.table)) {
    throw new UsageError(`--table takes a table name, not ${JSON.stringify(values.table)}`);
  }
  if (values.direct && values['side-by-side']) throw new UsageError('--direct and --side-by-side exclude each other');
  const warmUpSeconds = Number(values['warm-up-seconds'] ?? '0.5');
  if (!(warmUpSeconds >= 0 && warmUpSeconds <= 3600) || values['warm-up-seconds']?.trim() === '') {
    throw new UsageError(`--warm-up-seconds takes 0 to 3600 seconds, not ${JSON.stringify(values['warm-up-seconds'])}`);
  }
  const seconds = Number(values.seconds);
  if (values.seconds.trim() === '' || !Number.isFinite(seconds) || seconds < 0) {
    throw new UsageError(`--seconds takes a number of seconds, not ${JSON.stringify(values.seconds)}`);
  }
  try {
    for (const dsn of [values.routes, ...Object.values(shards)]) asConfig(dsn);
  } catch (e) {
    throw new UsageError(e.message);
  }
  return {
    routes: values.routes,
    shards,
    table: values.table,
    sequence: values.sequence,
    owners: integerArg(values, 'owners', undefined, 1),
    seconds,
    log: values.log,
    stopFile: values['stop-file'] ?? null,
    readEvery: integerArg(values, 'read-every', 4, 0),
    refreshIntervalMs: integerArg(values, 'refresh-interval-ms', 1000, 0),
    listen: !values['no-listen'],
    retryLimit: integerArg(values, 'retry-limit', ROUTER_DEFAULTS.retryLimit, 0),
    backoffMaxMs: integerArg(values, 'backoff-max-ms', ROUTER_DEFAULTS.backoffMax, 0),
    ...(bench ? {
      mode: parseMode(values.mode), direct: Boolean(values.direct), sideBySide: Boolean(values['side-by-side']), warmUpSeconds,
    } : {}),
  };
}

function parseMode(mode) {
  if (mode !== 'tx' && mode !== 'lookup') throw new UsageError(`--mode takes tx or lookup, not ${JSON.stringify(mode)}`);
  return mode;
}

/** A seeded generator of numbers in [0, 1) (mulberry32): each writer has its own. */
function seededRandom(seed) {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

class Load {
  constructor(router, options, logFd) {
    this.router = router;
    this.options = options;
    this.logFd = logFd;
    this.deadline = performance.now() + options.seconds * 1000;
    this.counts = {
      reads: 0, empty: 0, unknown: 0, committed: 0, failed: 0,
    };
    this.insertSql = `INSERT INTO ${options.table} (id, owner_id) VALUES (id_gen.gene_order_id($1::text, $2::bigint), $2) RETURNING id`;
    this.readSql = `SELECT count(*) AS n FROM ${options.table} WHERE id BETWEEN $1 AND $2 AND owner_id = $3`;
  }

  done() {
    return performance.now() >= this.deadline || (this.options.stopFile !== null && fs.existsSync(this.options.stopFile));
  }

  failed(what, error) {
    this.counts.failed += 1;
    if (error instanceof CommitOutcomeUnknownError) this.counts.unknown += 1;
    if (this.counts.failed <= ERRORS_SHOWN) {
      const code = error && (error.code ?? (error.cause && error.cause.code));
      process.stderr.write(`failed ${what}: ${error && error.name}: ${error && error.message}${code ? ` [${code}]` : ''}\n`);
    }
  }

  async writer(seed) {
    const random = seededRandom(seed);
    const written = []; // owners this writer committed a row for, each once
    const seen = new Set();
    for (let iteration = 1; !this.done(); iteration += 1) {
      const owner = BigInt(1 + Math.floor(random() * this.options.owners));
      try {
        const id = await this.router.transaction({ owner }, async (client) => (
          await client.query(this.insertSql, [this.options.sequence, String(owner)])).rows[0].id);
        fs.writeSync(this.logFd, `${owner},${id}\n`);
        this.counts.committed += 1;
        if (!seen.has(owner)) {
          seen.add(owner);
          written.push(owner);
        }
      } catch (e) { // a failed transaction is counted, never fatal
        this.failed('transaction', e);
      }
      const every = this.options.readEvery;
      if (every > 0 && iteration % every === 0 && written.length > 0) {
        await this.read(written[Math.floor(random() * written.length)]);
      }
    }
  }

  /** A read by owner through its id range (gene << 47 .. | 2^47 - 1); a count of 0 is empty. */
  async read(owner) {
    const lo = BigInt(geneOf(owner)) << ID_SEQUENCE_BITS;
    const hi = lo | ((1n << ID_SEQUENCE_BITS) - 1n);
    try {
      const rows = await this.router.execute({ owner }, this.readSql, [String(lo), String(hi), String(owner)]);
      this.counts.reads += 1;
      if (rows.length === 0 || BigInt(rows[0].n) === 0n) this.counts.empty += 1;
    } catch (e) {
      this.failed('read', e);
    }
  }
}

/**
 * Runs the load of options (parseLoadArgs); resolves to its counts and the router's retries,
 * or to null when the routes could not be read at the start. pg: the pg module (tests pass a
 * fake).
 */
async function runLoad(options, pg) {
  let logFd;
  try {
    logFd = fs.openSync(options.log, 'a');
  } catch (e) {
    throw new UsageError(`--log: ${e.message}`);
  }
  let router;
  try {
    router = await Router.connect({
      routes: options.routes, shards: options.shards, listen: options.listen,
      refreshInterval: options.refreshIntervalMs, pool: { max: WRITERS }, pg, ...retrySettings(options),
    });
  } catch (e) {
    process.stderr.write(`conformance load: the routes could not be read: ${e.message}\n`);
    fs.closeSync(logFd);
    return null;
  }
  const run = new Load(router, options, logFd);
  try {
    await Promise.all(Array.from({ length: WRITERS }, (_, seed) => run.writer(seed)));
  } finally {
    fs.closeSync(logFd);
    let timer;
    await Promise.race([router.close(), new Promise((resolve) => { timer = setTimeout(resolve, CLOSE_TIMEOUT_MS); })]);
    clearTimeout(timer);
  }
  const { retriesMoved, retriesFenced, retriesLost } = router.stats;
  return { ...run.counts, retries: retriesMoved + retriesFenced + retriesLost };
}

async function load(argv) {
  const c = await runLoad(parseLoadArgs(argv));
  if (c === null) return 1;
  process.stdout.write(`reads ${c.reads} empty ${c.empty} unknown ${c.unknown}\n`);
  process.stdout.write(`committed ${c.committed} failed ${c.failed} retries ${c.retries}\n`);
  return 0;
}

// --- bench -------------------------------------------------------------------------------

/**
 * One client, one operation at a time (docs/routing-protocol.md §6, bench): transactions or
 * lookups by id through the Router, or (--direct) the same statements on pools of the tool's
 * own, made as the Router makes its shard pools, or (--side-by-side) both in alternating slices
 * of 100 ms. --warm-up-seconds (0.5) of warm-up; prints `ops N seconds X` (side by side: `ops N seconds X
 * direct_ops M direct_seconds Y`).
 */
async function bench(argv) {
  const options = parseLoadArgs(argv, true);
  const pg = require('pg');
  const router = await Router.connect({
    routes: options.routes, shards: options.shards, listen: false, refreshInterval: 0, pool: { max: 2 },
    ...retrySettings(options),
  });
  const pools = new Map();
  const pool = (shard) => {
    if (!pools.has(shard)) {
      const config = asConfig(options.shards[shard]);
      pools.set(shard, new pg.Pool({
        max: 2, connectionTimeoutMillis: 10000, query_timeout: 60000, keepAlive: true, ...config,
        ...poolClientOption(config, pg.Client),
      }));
    }
    return pools.get(shard);
  };
  // (a client of the shard's pool, sslmode=prefer falling back as the Router's; destroyed after an error)
  const pooled = async (shard, f) => {
    const p = pool(shard);
    const client = await connectPreferringTls(p.options, () => p.connect());
    let error;
    try {
      return await f(client);
    } catch (e) {
      error = e;
      throw e;
    } finally {
      client.release(error);
    }
  };
  const insertSql = `INSERT INTO ${options.table} (id, owner_id) VALUES (id_gen.gene_order_id($1::text, $2::bigint), $2) RETURNING id`;
  const lookupSql = `SELECT owner_id FROM ${options.table} WHERE id = $1`;
  let ids = [];
  try {
    if (options.mode === 'lookup') {
      const config = asConfig(options.routes);
      const coordinator = await connectPreferringTls(config, async () => {
        const c = new pg.Client({ ...config, query_timeout: 10000 });
        await c.connect();
        return c;
      });
      try {
        ids = (await coordinator.query(`SELECT id::text FROM ${options.table} LIMIT 1000`)).rows.map((r) => r.id);
      } finally {
        await coordinator.end();
      }
      if (ids.length === 0) throw new Error(`${options.table} has no rows to look up`);
    }
    const random = seededRandom(7);
    let n = 0;
    const one = async (direct) => {
      n += 1;
      if (options.mode === 'tx') {
        const owner = BigInt(1 + Math.floor(random() * options.owners));
        const args = [options.sequence, String(owner)];
        if (!direct) {
          await router.transaction({ owner }, (client) => client.query(insertSql, args));
          return;
        }
        await pooled(router.shardForOwner(owner), async (client) => {
          await client.query('BEGIN');
          await client.query(insertSql, args);
          await client.query('COMMIT');
        });
      } else {
        const id = ids[n % ids.length];
        if (!direct) await router.execute({ id: BigInt(id) }, lookupSql, [id]);
        else await pooled(router.shardForId(BigInt(id)), (client) => client.query(lookupSql, [id]));
      }
    };
    const sides = options.sideBySide ? SIDE_BY_SIDE : [options.direct];
    await runSlices(one, sides, options.warmUpSeconds * 1000); // warm-up
    const measured = await runSlices(one, sides, options.seconds * 1000);
    const [routerSide, directSide] = [measured.get(false), measured.get(true)];
    if (options.sideBySide) {
      process.stdout.write(`ops ${routerSide.ops} seconds ${routerSide.seconds.toFixed(3)} `
        + `direct_ops ${directSide.ops} direct_seconds ${directSide.seconds.toFixed(3)}\n`);
    } else {
      const m = options.direct ? directSide : routerSide;
      process.stdout.write(`ops ${m.ops} seconds ${m.seconds.toFixed(3)}\n`);
    }
    return 0;
  } finally {
    await Promise.all([router.close(), ...[...pools.values()].map((p) => p.end())]);
  }
}

/** How long one side runs before the other takes over, side by side. */
const SLICE_MS = 100;

/**
 * The sides of the slices in turn, side by side (false: the Router, true: the direct pools):
 * Router, direct, direct, Router, so that a drift of the machine weighs on both alike.
 */
const SIDE_BY_SIDE = Object.freeze([false, true, true, false]);

/**
 * Runs one(side) for ms in slices of SLICE_MS, the slices' sides in the cyclic order of sides,
 * and at least one slice of each of them, by the clock (ms); returns a Map from side (false:
 * the Router, true: the direct pools) to { ops, seconds }, each side's seconds from the starts
 * of its slices to the ends of their last operations. The first error ends it.
 */
async function runSlices(one, sides, ms, clock = () => performance.now()) {
  const measured = new Map([[false, { ops: 0, seconds: 0 }], [true, { ops: 0, seconds: 0 }]]);
  const end = clock() + ms;
  for (let i = 0; ; i += 1) {
    const start = clock();
    if (start >= end && i >= sides.length) return measured;
    const side = sides[i % sides.length];
    const sliceEnd = Math.min(start + SLICE_MS, end);
    let ops = 0;
    let t;
    do {
      await one(side);
      ops += 1;
      t = clock();
    } while (t < sliceEnd);
    const m = measured.get(side);
    m.ops += ops;
    m.seconds += (t - start) / 1000;
  }
}

// --- main --------------------------------------------------------------------------------

async function main(argv) {
  const [mode, ...rest] = argv;
  try {
    if (mode === 'genes' && rest.length === 0) return await genes();
    if (mode === 'load') return await load(rest);
    if (mode === 'bench') return await bench(rest);
    throw new UsageError(`conformance: no mode ${JSON.stringify(mode ?? '')}`);
  } catch (e) {
    if (!(e instanceof UsageError)) throw e;
    process.stderr.write(`${e.message}\n${USAGE}\n`);
    return 2;
  }
}

if (require.main === module) {
  main(process.argv.slice(2)).then((status) => {
    // Ends when stdout is drained (a pipe may still hold output: process.exit would cut it);
    // the unref'd timer ends it anyway should a connection keep it alive.
    process.exitCode = status;
    setTimeout(() => process.exit(status), EXIT_GRACE_MS).unref();
  }, (e) => {
    process.stderr.write(`conformance: ${(e && e.stack) || e}\n`);
    process.exitCode = 1;
    setTimeout(() => process.exit(1), EXIT_GRACE_MS).unref();
  });
}

module.exports = {
  parseLoadArgs, runLoad, runSlices, SLICE_MS, SIDE_BY_SIDE, genesOf, seededRandom, UsageError,
};
