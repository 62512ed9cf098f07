'use strict';
// What the router needs without I/O: the route snapshot, the routing key, the retry decisions,
// what is known of a shard's claim form, and the SQL of docs/routing-protocol.md (the same as
// every other client's).
//
// Invariants:
// - A RouteTable is immutable: routes and their version are one snapshot, replaced whole.
// - A ShardProtocol keeps what a probe found only if it was not forgotten since the probe began.
// - retryLimit counts retries after the first attempt (at most retryLimit + 1 attempts).
// - After IG001 the routes are re-read before the next attempt; after IG002 every third time;
//   never after a lost connection (the routes said nothing new); the wait before attempt
//   n + 1 is min(base * 2^n, max), jittered to [1/2, 1] of it.

const { ROUTE_CHANGED, ROUTE_FENCED, NoRouteError } = require('./errors');
const { geneOf, geneOfId, asGene, Uuid } = require('./genes');

const ROUTES_CHANNEL = 'id_gen_routes';
const ROUTES_SQL = 'SELECT lower_gene, upper_gene, shard, version FROM id_gen.route_map ORDER BY lower_gene';
// One snapshot: the version, only when there are still no routes (else read them again).
const EMPTY_ROUTES_VERSION_SQL = 'SELECT id_gen.route_version() AS version WHERE NOT EXISTS (SELECT 1 FROM id_gen.route_map)';
const ROUTE_VERSION_SQL = 'SELECT id_gen.route_version() AS version';
// A statement that declares the route version it was routed with: a leading comment the
// shard reads (docs/routing-protocol.md §3), so it needs no second statement nor a transaction.
const declaredSql = (version, sql) => `/* id_gen.route_version=${BigInt(version)} */ ${sql}`;
// Whether a shard takes the claim on BEGIN: '2' from id_gen 0.7.16 on, NULL before. Sent in
// autocommit, so it works through a transaction-mode pooler too.
const ROUTING_PROTOCOL_SQL = "SELECT pg_catalog.current_setting('id_gen.routing_protocol', true)";
const CLAIMS_ON_BEGIN_SINCE = 2;
/** Whether the probe's answer (a string, or null) says the shard takes the claim on BEGIN; anything else means the old form. */
const claimsOnBegin = (answer) => typeof answer === 'string' && /^\d+$/.test(answer) && Number(answer) >= CLAIMS_ON_BEGIN_SINCE;
// The claim as one simple-protocol message: on BEGIN, a leading comment of BEGIN itself, for the
// shards that take it (a shard older than 0.7.16 ignores the comment: unclaimed); else a SELECT
// after the BEGIN, a statement more.
const claimSql = (gene, version, onBegin) => (onBegin
  ? `/* id_gen.route_claim=${asGene(gene)},${BigInt(version)} */ BEGIN`
  : `BEGIN; SELECT id_gen.route_claim(${asGene(gene)}, ${BigInt(version)})`);

/**
 * What the router knows of one shard's claim form: probed on the first claim there, forgotten
 * when a connection to the shard was found lost (it may have restarted with another id_gen).
 */
class ShardProtocol {
  constructor() {
    this.known = false;
    this.onBegin = false; // (when known) the claim goes on BEGIN
    this.epoch = 0; // counts the forgets: what a probe begun in an older epoch found is not kept
  }

  learn(onBegin, epoch) {
    if (epoch !== this.epoch) return;
    this.known = true;
    this.onBegin = onBegin;
  }

  forget() {
    this.known = false;
    this.epoch += 1;
  }
}

class RouteTable {
  /** ranges: [[lower, upper, shard], ...] sorted by lower; version: a BigInt. */
  constructor(ranges, version) {
    this.ranges = Object.freeze(ranges.map((r) => Object.freeze([r[0], r[1], r[2]])));
    this.uppers = this.ranges.map((r) => r[1]);
    this.version = BigInt(version);
    Object.freeze(this);
  }

  static fromRows(rows) {
    return new RouteTable(rows.map((r) => [Number(r.lower_gene), Number(r.upper_gene), r.shard]), rows[0].version);
  }

  shardForGene(g) {
    let lo = 0;
    let hi = this.uppers.length;
    while (lo < hi) {
      // the ceiling entry on upper_gene
      const mid = (lo + hi) >> 1;
      if (this.uppers[mid] < g) lo = mid + 1;
      else hi = mid;
    }
    if (lo === this.ranges.length || this.ranges[lo][0] > g) {
      throw new NoRouteError(`no route for gene ${g} (route version ${this.version})`);
    }
    return this.ranges[lo][2];
  }
}

/** The gene of a key: exactly one of { owner }, { id } or { gene }. */
function targetGene(key) {
  if (key === null || typeof key !== 'object') throw new TypeError('a key is { owner }, { id } or { gene }');
  const given = ['owner', 'id', 'gene'].filter((k) => key[k] !== undefined && key[k] !== null);
  if (given.length !== 1) throw new TypeError('give exactly one of owner, id or gene');
  if (given[0] === 'owner') return geneOf(key.owner);
  if (given[0] === 'id') return geneOfId(key.id);
  return asGene(key.gene);
}

/** [the SQL type, the parameter] an owner is passed as to id_gen.gene_order_id. */
function ownerParam(owner) {
  if (typeof owner === 'bigint' || typeof owner === 'number') return ['bigint', String(owner)];
  if (typeof owner === 'string') return ['text', owner];
  if (owner instanceof Uuid) return ['uuid', owner.text];
  throw new TypeError('gene_order_id takes a BigInt, a safe integer, a string or a Uuid owner');
}

const rereadsAfter = (code, attempt) => code === ROUTE_CHANGED || (code === ROUTE_FENCED && attempt % 3 === 2);
const backoffDelay = (attempt, base, largest) => Math.min(base * 2 ** attempt, largest) * (0.5 + Math.random() / 2);

module.exports = {
  ROUTES_CHANNEL, ROUTES_SQL, EMPTY_ROUTES_VERSION_SQL, ROUTE_VERSION_SQL, ROUTING_PROTOCOL_SQL, declaredSql, claimSql,
  claimsOnBegin, ShardProtocol, RouteTable, targetGene, ownerParam, rereadsAfter, backoffDelay,
};
