'use strict';
// Router: zero-hop routing of transactions to the shard that owns a gene, on node-postgres
// (pg), with the vocabulary of docs/routing-protocol.md §5:
// - transaction(key, body): body(client) in a transaction on the owning shard that starts
//   with the claim ("/* id_gen.route_claim=gene,version */ BEGIN", or "BEGIN; SELECT
//   id_gen.route_claim(gene, version)" on a shard older than id_gen 0.7.16); on IG001/IG002
//   (from the claim, the body or COMMIT) it rolls back, re-reads the routes (IG001; IG002
//   every third time), waits, and runs the body again, at most retryLimit times after the
//   first attempt; so too after a shard connection refused or lost before COMMIT was sent
//   (waits, no re-read). Resolves to the body's value.
// - run(key, body): the same, but the body runs once: IG001/IG002 or a lost connection from
//   the body or COMMIT reach the caller (only a failed connect or claim is retried).
// - execute(key, sql, params): one statement in a transaction of its own that declares the
//   route version in a leading comment (/* id_gen.route_version=N */), one round trip,
//   retried like transaction; resolves to its rows.
// - nextId(sequence, owner), geneOf, shardForId/Owner/Gene, refresh(), version, routes, stats.
//
// Invariants:
// - The routes and their version are one immutable snapshot (RouteTable), replaced whole; a
//   call routes by one snapshot and claims with its version.
// - The listening connection LISTENs before the first route read and re-reads after it
//   reconnects; the version is also polled every refreshInterval ms, so a notification lost
//   (or a pooler that cannot LISTEN) costs at most that long. Starting needs the first route
//   read only: a LISTEN that fails then is retried on the listener's backoff until close().
// - Nothing is declared per connection (no session SET): the claim and the statement's
//   comment live in the transaction, so shards may sit behind a transaction-mode pooler
//   (PgBouncer).
// - The claim goes on BEGIN only where the shard said it takes it there (an older shard ignores
//   the comment): asked on the first claim there (ShardProtocol), in autocommit, and again
//   after a connection to the shard was found lost or refused. A probe that lost its connection
//   is a claim that did (retried); any other error of it means the old form. Concurrent first
//   claims may each probe.
// - A body that failed is never reported committed (a COMMIT that the server turns into a
//   ROLLBACK is an error), and a body whose COMMIT succeeded is never run again.
// - A connection lost after COMMIT was sent and before its answer is a
//   CommitOutcomeUnknownError, never retried and never reported committed.
// - Every client taken from a pool goes back to it, idle, or destroyed when it broke (a lost
//   connection is destroyed, never returned idle).
// - Every wait is bounded: connects (connectionTimeoutMillis), route reads and the version
//   poll (query_timeout), shard statements (query_timeout unless the caller sets another).
// - Ids (bigint columns) reach JavaScript as BigInt (ids: 'string' for decimal strings),
//   never as a Number that loses precision.

const {
  ROUTE_CHANGED, CONNECTION_LOST, NoRouteError, RouteRetryExhausted, CommitOutcomeUnknownError, routeErrorCode, connectionLost,
} = require('./errors');
const genes = require('./genes');
const {
  ROUTES_CHANNEL, ROUTES_SQL, EMPTY_ROUTES_VERSION_SQL, ROUTE_VERSION_SQL, ROUTING_PROTOCOL_SQL, declaredSql, claimSql,
  claimsOnBegin, ShardProtocol, RouteTable, targetGene, ownerParam, rereadsAfter, backoffDelay,
} = require('./routes');
const { PREFER_TLS, SSL_MODES, preferTls, connectPreferringTls } = require('./tls');
const { multiHostConfig, clientFor, poolClientOption } = require('./multihost');

const INT8_OID = 20;
// Route reads must not hang the callers that wait for them (a coordinator that stopped
// answering): bounded connect, bounded statements, TCP keepalives.
const COORDINATOR_OPTIONS = {
  connectionTimeoutMillis: 10000, query_timeout: 10000, keepAlive: true, keepAliveInitialDelayMillis: 10000,
};
const SHARD_POOL_DEFAULTS = { max: 8, connectionTimeoutMillis: 10000, query_timeout: 60000, keepAlive: true };

class RetryRoute extends Error {
  constructor(error, code) {
    super(code);
    this.error = error;
    this.code = code;
  }
}

const sleep = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });
// libpq's keyword/value form ("host=/tmp port=5432 dbname=app"), as psql and the other
// clients take it; a URL goes to pg as connectionString. Several hosts ("host=h1,h2
// port=p1,p2") or target_session_attrs make a multi-host config (multihost.js), whose pools and
// coordinator connections use multiHostClient; one host without it gives the config as ever.
const KEYWORDS = {
  host: 'host', hostaddr: 'host', port: 'port', dbname: 'database', user: 'user', password: 'password',
  application_name: 'application_name', options: 'options',
};
// A URL goes to pg, which reads its sslmode as pg 8 does (require and verify-ca: verify-full
// and a warning, unless uselibpqcompat=true), but for prefer, which pg has not, and an absent
// sslmode (PGSSLMODE, else prefer, as libpq): then sslmode=prefer leaves the URL and prefer is
// the Router's, as for keyword/value pairs. A URL with other TLS parameters stays pg's.
const URL_TLS_PARAMS = ['ssl', 'sslcert', 'sslkey', 'sslrootcert', 'sslnegotiation', 'uselibpqcompat'];
function urlConfig(c) {
  const q = c.indexOf('?');
  const query = q < 0 ? '' : c.slice(q + 1).replace(/#.*$/, '');
  const params = new URLSearchParams(query);
  let url = null;
  try {
    url = new URL(c);
  } catch (e) {
    // (no host, "postgresql://u@/app": pg's default host; anything else pg reports)
  }
  const sslmode = params.get('sslmode') || process.env.PGSSLMODE || 'prefer';
  if (sslmode !== 'prefer' || URL_TLS_PARAMS.some((k) => params.has(k))) return { connectionString: c };
  const kept = query.split('&').filter((p) => p !== '' && p.split('=')[0] !== 'sslmode');
  const hash = q < 0 ? '' : (/#.*$/.exec(c.slice(q)) || [''])[0];
  const connectionString = q < 0 ? c : c.slice(0, q) + (kept.length > 0 ? `?${kept.join('&')}` : '') + hash;
  let host = params.get('host');
  if (!host && url !== null) {
    try {
      host = decodeURIComponent(url.hostname);
    } catch (e) {
      host = '';
    }
  }
  return preferTls({ connectionString }, host);
}
function asConfig(c) {
  if (typeof c !== 'string') return { ...c };
  if (/^postgres(ql)?:\/\//.test(c)) return urlConfig(c);
  const config = {};
  const pair = /\s*([a-z_]+)\s*=\s*('((?:[^'\\]|\\.)*)'|(\S*))/gy;
  let m;
  let end = 0;
  let sslmode;
  let ports; // (the port as given: a list, with several hosts)
  let targetSessionAttrs;
  while ((m = pair.exec(c)) !== null) {
    const value = m[3] !== undefined ? m[3].replace(/\\(.)/g, '$1') : m[4];
    if (KEYWORDS[m[1]] !== undefined) {
      config[KEYWORDS[m[1]]] = m[1] === 'port' ? Number(value) : value;
      if (m[1] === 'port') ports = value;
    } else if (m[1] === 'target_session_attrs') targetSessionAttrs = value;
    else if (m[1] === 'connect_timeout') config.connectionTimeoutMillis = Number(value) * 1000;
    else if (m[1] === 'sslmode') sslmode = value;
    else throw new TypeError(`the connection keyword ${m[1]} is not supported here (pass a pg config object)`);
    end = pair.lastIndex;
  }
  if (c.slice(end).trim() !== '') throw new TypeError(`not a connection string: ${c}`);
  if (sslmode === undefined) sslmode = process.env.PGSSLMODE || 'prefer'; // (empty: unset)
  if (!Object.prototype.hasOwnProperty.call(SSL_MODES, sslmode)) throw new TypeError(`sslmode=${sslmode} is not one of ${Object.keys(SSL_MODES).join(', ')}`);
  if (targetSessionAttrs !== undefined || String(config.host ?? '').includes(',') || String(ports ?? '').includes(',')) {
    delete config.port;
    return multiHostConfig(config, ports, targetSessionAttrs, sslmode); // (for multiHostClient)
  }
  if (sslmode === 'prefer') return preferTls(config, config.host);
  const ssl = SSL_MODES[sslmode];
  config.ssl = ssl && { ...ssl };
  return config;
}

const closedError = () => new Error('the Router is closed');

// The defaults of Router's options retryLimit, backoffBase and backoffMax (ms).
const ROUTER_DEFAULTS = Object.freeze({ retryLimit: 20, backoffBase: 5, backoffMax: 200 });

class Router {
  /**
   * options: routes (the coordinator: a connection string or a pg ClientConfig), shards
   * ({ name: connection string or pg PoolConfig }), retryLimit (20), backoffBase and
   * backoffMax (ms: 5, 200), listen (true), refreshInterval (ms, 1000; 0: no poll),
   * ids ('bigint' or 'string'), pool (pg PoolConfig defaults of every shard's pool), pg (the
   * pg module, for tests).
   */
  constructor(options) {
    const {
      routes, shards, retryLimit = ROUTER_DEFAULTS.retryLimit, backoffBase = ROUTER_DEFAULTS.backoffBase,
      backoffMax = ROUTER_DEFAULTS.backoffMax, listen = true,
      refreshInterval = 1000, ids = 'bigint', pool = {}, pg,
    } = options || {};
    if (routes === undefined || routes === null) throw new TypeError('routes (the coordinator) is required');
    if (shards === null || typeof shards !== 'object' || Object.keys(shards).length === 0) {
      throw new TypeError('shards ({ name: connection }) is required');
    }
    if (!Number.isInteger(retryLimit) || retryLimit < 0) {
      throw new RangeError('retryLimit counts retries after the first attempt: an integer, 0 or more');
    }
    if (ids !== 'bigint' && ids !== 'string') throw new TypeError("ids is 'bigint' or 'string'");
    this._pg = pg || require('pg');
    this._routesConfig = asConfig(routes);
    this._shardConfigs = new Map(Object.entries(shards).map(([name, c]) => [name, asConfig(c)]));
    this._protocols = new Map([...this._shardConfigs.keys()].map((name) => [name, new ShardProtocol()]));
    this._poolOptions = { ...SHARD_POOL_DEFAULTS, ...pool };
    this.retryLimit = retryLimit;
    this.backoffBase = backoffBase;
    this.backoffMax = backoffMax;
    this.listen = listen;
    this.refreshInterval = refreshInterval;
    this.stats = { transactions: 0, retriesMoved: 0, retriesFenced: 0, retriesLost: 0, refreshes: 0 };
    const parseInt8 = ids === 'string' ? String : BigInt;
    this._shardTypes = { getTypeParser: (oid, format) => (oid === INT8_OID && format !== 'binary' ? parseInt8 : this._pg.types.getTypeParser(oid, format)) };
    this._coordinatorTypes = { getTypeParser: (oid, format) => (oid === INT8_OID && format !== 'binary' ? BigInt : this._pg.types.getTypeParser(oid, format)) };
    this._table = new RouteTable([], 0n);
    this._pools = new Map();
    this._closed = false;
    this._routesClient = null;
    this._listener = null;
    this._listenerFailures = 0;
    this._queuedReload = null;
    this._currentReload = null;
    this._ready = this._start();
    this._ready.catch(() => {}); // (awaited by ready() and every call; not an unhandled rejection)
  }

  /**
   * Resolves once the routes were first read; rejects when they cannot be read (the
   * coordinator unreachable). A LISTEN that fails does not reject it: the version poll covers
   * while the listener is retried in the background (200 ms doubling to 5 s) until close().
   */
  ready() {
    return this._ready;
  }

  /** A Router whose routes were read (the coordinator unreachable: rejects, nothing left open). */
  static async connect(options) {
    const router = new Router(options);
    try {
      await router.ready();
    } catch (e) {
      await router.close();
      throw e;
    }
    return router;
  }

  async _start() {
    let listenFailed = false;
    if (this.listen) {
      try {
        await this._connectListener(); // LISTEN before the first read
      } catch (e) {
        listenFailed = true; // not fatal: the poll covers while the listener is retried (below)
      }
    }
    await this.refresh();
    if (listenFailed && !this._closed) {
      this._listenerFailures = 1; // (the first retry backs off)
      this._reconnectListener();
    }
    if (this.refreshInterval > 0 && !this._closed) {
      this._pollTimer = setInterval(() => { this._poll(); }, this.refreshInterval);
      this._pollTimer.unref();
    }
  }

  // --- routes -----------------------------------------------------------------------------

  /** The route version held (a BigInt). */
  get version() {
    return this._table.version;
  }

  /** The routes held: [[lowerGene, upperGene, shard], ...], inclusive. */
  get routes() {
    return this._table.ranges.map((r) => [...r]);
  }

  /**
   * Re-reads the routes now; resolves to their version. Calls made while a read runs share
   * the next one (which begins after that read), so no caller gets routes older than its call.
   */
  refresh() {
    if (this._closed) return Promise.reject(closedError());
    if (this._queuedReload !== null) return this._queuedReload;
    const previous = this._currentReload;
    const reload = (async () => {
      // (always a wait: this reload is queued, and shared, until it begins)
      await (previous === null ? null : previous.catch(() => {}));
      this._queuedReload = null;
      return this._reload();
    })();
    this._queuedReload = reload;
    this._currentReload = reload;
    return reload;
  }

  async _reload() {
    let table;
    try {
      table = await this._readRoutes();
    } catch (e) {
      // (a lost connection: once more, on a new one)
      this._dropRoutesClient();
      table = await this._readRoutes();
    }
    this._table = table;
    this.stats.refreshes += 1;
    return table.version;
  }

  async _readRoutes() {
    const client = await this._routesConnection();
    for (;;) {
      const { rows } = await client.query(ROUTES_SQL);
      if (rows.length > 0) return RouteTable.fromRows(rows);
      const empty = await client.query(EMPTY_ROUTES_VERSION_SQL);
      if (empty.rows.length > 0) return new RouteTable([], empty.rows[0].version);
    }
  }

  async _coordinatorClient() {
    // (the caller's own timeouts win; the defaults bound the waits otherwise)
    const client = await connectPreferringTls(this._routesConfig, async () => {
      const Client = clientFor(this._routesConfig, this._pg.Client);
      const c = new Client({ ...COORDINATOR_OPTIONS, ...this._routesConfig, types: this._coordinatorTypes });
      c.on('error', () => {}); // (a lost connection fails its next query; handled there)
      await c.connect();
      return c;
    });
    if (this._closed) {
      client.end().catch(() => {});
      throw closedError();
    }
    return client;
  }

  async _routesConnection() {
    if (this._routesClient === null) this._routesClient = this._coordinatorClient();
    try {
      return await this._routesClient;
    } catch (e) {
      this._routesClient = null;
      throw e;
    }
  }

  _dropRoutesClient() {
    const client = this._routesClient;
    this._routesClient = null;
    if (client !== null) client.then((c) => c.end()).catch(() => {});
  }

  // The version poll: a route change whose notification was lost, or that a pooler kept
  // from this router, is seen within refreshInterval.
  async _poll() {
    if (this._polling || this._closed) return;
    this._polling = true;
    try {
      const client = await this._routesConnection();
      const { rows } = await client.query(ROUTE_VERSION_SQL);
      if (BigInt(rows[0].version) > this._table.version) await this.refresh();
    } catch (e) {
      this._dropRoutesClient(); // (the next poll connects again)
    } finally {
      this._polling = false;
    }
  }

  // --- listening to route changes ---------------------------------------------------------

  async _connectListener() {
    const client = await this._coordinatorClient();
    try {
      await client.query(`LISTEN ${ROUTES_CHANNEL}`);
    } catch (e) {
      client.end().catch(() => {});
      throw e;
    }
    if (this._closed) { // (closed during the LISTEN round trip)
      client.end().catch(() => {});
      throw closedError();
    }
    client.on('notification', (msg) => {
      let version;
      try {
        version = BigInt(msg.payload);
      } catch (e) {
        return;
      }
      if (!this._closed && version > this._table.version) this.refresh().catch(() => {});
    });
    const lost = () => this._listenerLost(client);
    client.on('error', lost);
    client.on('end', lost);
    this._listener = client;
    this._listenerFailures = 0;
  }

  _listenerLost(client) {
    if (this._listener !== client || this._closed) return;
    this._listener = null;
    client.end().catch(() => {});
    this._reconnectListener();
  }

  _reconnectListener() {
    const delay = Math.min(100 * 2 ** this._listenerFailures, 5000);
    this._listenerTimer = setTimeout(async () => {
      if (this._closed) return;
      try {
        await this._connectListener();
      } catch (e) {
        this._listenerFailures += 1;
        this._reconnectListener();
        return;
      }
      this.refresh().catch(() => {}); // notifications may have been missed meanwhile
    }, delay);
    this._listenerTimer.unref();
  }

  // --- lookups by the routes held ----------------------------------------------------------

  /** The gene of an owner (BigInt or safe integer, string, Uuid, Uint8Array). */
  geneOf(owner) {
    return genes.geneOf(owner);
  }

  shardForGene(gene) {
    return this._route(genes.asGene(gene), this._table);
  }

  shardForOwner(owner) {
    return this._route(genes.geneOf(owner), this._table);
  }

  /** The shard of an id (a BigInt, a decimal string, or a safe integer). */
  shardForId(id) {
    return this._route(genes.geneOfId(id), this._table);
  }

  _route(gene, table) {
    const shard = table.shardForGene(gene);
    if (!this._shardConfigs.has(shard)) {
      throw new NoRouteError(`gene ${gene} routes to shard "${shard}", which has no connection in this Router`);
    }
    return shard;
  }

  _pool(shard) {
    if (this._closed) throw closedError();
    let pool = this._pools.get(shard);
    if (pool === undefined) {
      const config = this._shardConfigs.get(shard);
      pool = new this._pg.Pool({
        ...this._poolOptions, ...config, ...poolClientOption(config, this._pg.Client), types: this._shardTypes,
      });
      // An idle client that broke: the pool drops it; the shard may have restarted with
      // another id_gen.
      pool.on('error', () => { this._protocols.get(shard).forget(); });
      // A checked-out client whose connection breaks (a shard restarted, failed over, or a
      // pooler restarted) emits 'error' with no pool listener on it: without this the
      // process would crash; the client is destroyed when it goes back.
      pool.on('connect', (client) => client.on('error', () => { client.idGenBroken = true; }));
      this._pools.set(shard, pool);
    }
    return pool;
  }

  // --- transactions -----------------------------------------------------------------------

  /**
   * body(client) in a claimed transaction on the owning shard, retried on IG001/IG002 and on
   * a connection lost before COMMIT was sent.
   */
  transaction(key, body) {
    return this._call(key, body, true);
  }

  /** body(client) once in a claimed transaction; IG001/IG002 or a lost connection from the body reach the caller. */
  run(key, body) {
    return this._call(key, body, false);
  }

  async _call(key, body, retryBody) {
    if (typeof body !== 'function') throw new TypeError('body must be a function: async (client) => value');
    const gene = targetGene(key);
    return this._retrying(gene, async (table, client, protocol) => {
      let phase = 'claim';
      try {
        await client.query(claimSql(gene, table.version, await claimsOnBeginAt(protocol, client)));
        phase = 'body';
        const result = await body(client);
        phase = 'commit';
        await commit(client);
        this.stats.transactions += 1;
        return result;
      } catch (e) {
        // A body that ended the transaction itself (its own COMMIT or ROLLBACK) and then failed
        // is never run again: what it committed stays committed.
        const ended = phase === 'body' && !connectionLost(e) && endedByBody(client);
        await rollbackQuietly(client, e);
        throw ended ? e : attemptFailure(e, phase, retryBody);
      }
    });
  }

  /** One statement on the owning shard, in a transaction of its own that declares the route version; its rows. */
  async execute(key, sql, params) {
    const gene = targetGene(key);
    return this._retrying(gene, async (table, client) => {
      // (one round trip: the version rides in the statement's leading comment, and the
      // statement commits on its own, so a connection lost after it was sent may have
      // committed it: that is 'commit', and its outcome unknown)
      try {
        const result = await client.query(declaredSql(table.version, sql), params);
        this.stats.transactions += 1;
        return result.rows;
      } catch (e) {
        if (timedOut(e) || connectionLost(e)) client.idGenBroken = true;
        throw attemptFailure(e, 'commit', true);
      }
    });
  }

  /** An owner-affine id from the owner's shard: id_gen.gene_order_id(sequence, owner) (a BigInt). */
  async nextId(sequence, owner) {
    const [type, param] = ownerParam(owner);
    const sql = `SELECT id_gen.gene_order_id($1::text, $2::${type}) AS id`;
    return this.transaction({ owner }, async (client) => (await client.query(sql, [sequence, param])).rows[0].id);
  }

  // The one retry loop: once(routes, client, protocol) on the gene's shard by the routes held
  // (protocol: its ShardProtocol, forgotten when a connection to it is refused or breaks). A
  // RetryRoute from the connect or from once (IG001/IG002, a connection refused or lost
  // before COMMIT was sent) is retried up to retryLimit times, the routes re-read (IG001,
  // IG002 at times) and the backoff waited between; then RouteRetryExhausted with the last
  // error as its cause.
  async _retrying(gene, once) {
    await this._ready;
    let last = null;
    let refreshError = null;
    for (let attempt = 0; attempt <= this.retryLimit; attempt += 1) {
      const [table, shard] = await this._checkout(gene, attempt);
      const protocol = this._protocols.get(shard);
      try {
        const client = await connectShard(this._pool(shard), protocol);
        try {
          return await once(table, client, protocol);
        } finally {
          const broken = client.idGenBroken === true;
          if (broken) protocol.forget(); // (lost, or unusable: the shard may have restarted)
          client.release(broken ? true : undefined);
        }
      } catch (e) {
        if (!(e instanceof RetryRoute)) throw e;
        last = e;
      }
      refreshError = await this._afterRouteError(last.code, attempt, refreshError);
    }
    const what = last.code === CONNECTION_LOST ? 'the shard connection was refused or lost' : 'the route kept changing';
    let message = `gene ${gene}: ${what} in ${this.retryLimit + 1} attempts (${this.retryLimit} retries)`;
    if (refreshError !== null) message += `; the last re-read of the routes failed: ${refreshError.message}`;
    throw new RouteRetryExhausted(message, { cause: last.error });
  }

  async _checkout(gene, attempt) {
    let table = this._table;
    let shard;
    try {
      shard = this._route(gene, table);
    } catch (e) {
      // The routes may have changed since they were read: on the first attempt, read them
      // again and look once more (no attempt of its own).
      if (!(e instanceof NoRouteError) || attempt > 0 || (await this.refresh()) === table.version) throw e;
      table = this._table;
      shard = this._route(gene, table);
    }
    return [table, shard];
  }

  async _afterRouteError(code, attempt, refreshError) {
    if (attempt >= this.retryLimit) return refreshError;
    if (code === ROUTE_CHANGED) this.stats.retriesMoved += 1;
    else if (code === CONNECTION_LOST) this.stats.retriesLost += 1;
    else this.stats.retriesFenced += 1;
    let error = refreshError;
    if (rereadsAfter(code, attempt)) {
      try {
        await this.refresh();
        error = null;
      } catch (e) {
        error = e; // (the next attempt runs on the routes held)
      }
    }
    await sleep(backoffDelay(attempt, this.backoffBase, this.backoffMax));
    return error;
  }

  // --- closing ----------------------------------------------------------------------------

  /** Stops listening and polling and closes every connection; safe to call twice. */
  async close() {
    if (this._closed) return;
    this._closed = true;
    clearInterval(this._pollTimer);
    clearTimeout(this._listenerTimer);
    const ends = [];
    if (this._listener !== null) ends.push(this._listener.end());
    this._listener = null;
    if (this._routesClient !== null) ends.push(this._routesClient.then((c) => c.end()));
    this._routesClient = null;
    for (const pool of this._pools.values()) ends.push(pool.end());
    this._pools.clear();
    await Promise.allSettled(ends);
  }
}

/**
 * COMMIT, unless the body swallowed an error: the server would then roll back and answer
 * ROLLBACK, which is reported as an error, never as a success.
 */
/**
 * Whether the claimed transaction is over on a client that is still good: the body sent COMMIT
 * or ROLLBACK itself (pg's ReadyForQuery status, no round trip; pg without
 * getTransactionStatus cannot tell).
 */
function endedByBody(client) {
  return typeof client.getTransactionStatus === 'function' && client.getTransactionStatus() === 'I';
}

async function commit(client) {
  if (endedByBody(client)) { // (a COMMIT now would succeed with a warning, committing nothing)
    const error = new Error('id-gen-client: the transaction was ended inside the body (a COMMIT or ROLLBACK of its own); the router committed nothing');
    error.code = '25P01';
    throw error;
  }
  const result = await client.query('COMMIT');
  if (result && result.command === 'ROLLBACK') {
    const error = new Error('id-gen-client: the transaction failed inside the body; it was rolled back');
    error.code = '25P02';
    throw error;
  }
}

/**
 * A client of the shard's pool; a connect refused or lost (nothing was sent) is a RetryRoute,
 * and makes the shard's claim form asked again (it may be restarting with another id_gen).
 */
async function connectShard(pool, protocol) {
  try {
    // (pg-pool makes its clients from pool.options, a copy of the shard's config)
    return await (pool.options ? connectPreferringTls(pool.options, () => pool.connect()) : pool.connect());
  } catch (e) {
    if (!connectionLost(e)) throw e;
    protocol.forget();
    throw new RetryRoute(e, CONNECTION_LOST);
  }
}

/**
 * Whether the shard takes the claim on BEGIN: known, or asked now on client in autocommit (its
 * own round trip). A probe that fails with an error of the server's (not a lost connection) means
 * the old form, which every shard takes, and is kept as such; any other error is the claim's.
 */
async function claimsOnBeginAt(protocol, client) {
  if (protocol.known) return protocol.onBegin;
  const { epoch } = protocol;
  let onBegin;
  try {
    const { rows } = await client.query(ROUTING_PROTOCOL_SQL);
    onBegin = claimsOnBegin(rows[0].current_setting);
  } catch (e) {
    if (!serverError(e) || connectionLost(e)) throw e;
    onBegin = false;
  }
  protocol.learn(onBegin, epoch);
  return onBegin;
}

/** An error the server sent (pg's DatabaseError: a severity and a SQLSTATE). */
function serverError(error) {
  return error !== null && typeof error === 'object' && typeof error.severity === 'string' && typeof error.code === 'string';
}

/** pg's query_timeout expired: the statement may still run, the connection is unusable. */
function timedOut(error) {
  return error !== null && typeof error === 'object' && error.message === 'Query read timeout';
}

// pg refuses a query on a connection it saw end, and sends nothing.
const NOT_SENT = 'Client has encountered a connection error and is not queryable';

/**
 * What an error of one attempt becomes, by where it happened (phase: 'claim', 'body' or
 * 'commit'; execute's statement counts as 'commit'): a connection lost after
 * COMMIT was sent is a CommitOutcomeUnknownError; IG001/IG002 and a connection lost before
 * COMMIT was sent are a RetryRoute (from the body or COMMIT only when retryBody); anything
 * else is the error itself.
 */
function attemptFailure(error, phase, retryBody) {
  // (a statement that timed out left its connection unusable: as lost, from where it was sent)
  const lost = connectionLost(error) || timedOut(error);
  if (lost && phase === 'commit' && error.message !== NOT_SENT) {
    return new CommitOutcomeUnknownError(
      `the shard connection was lost or stopped answering after COMMIT was sent: the transaction may or may not have committed (${error.message})`,
      { cause: error },
    );
  }
  const code = routeErrorCode(error) ?? (lost ? CONNECTION_LOST : null);
  if (code === null || (phase !== 'claim' && !retryBody)) return error;
  return new RetryRoute(error, code);
}

/** Ends a failed transaction; a client that cannot is destroyed when it goes back to its pool. */
async function rollbackQuietly(client, error) {
  // (pg's query_timeout leaves the statement running: a ROLLBACK would wait behind it; a
  // lost connection cannot roll back, and must not go back to the pool idle)
  if (timedOut(error) || connectionLost(error)) client.idGenBroken = true;
  if (client.idGenBroken === true) return;
  try {
    await client.query('ROLLBACK');
  } catch (e) {
    client.idGenBroken = true;
  }
}

module.exports = { Router, ROUTER_DEFAULTS, asConfig, connectPreferringTls, PREFER_TLS };
