'use strict';
// A fake of the pg module for the Router's tests without a server: a coordinator (routes, a
// version, NOTIFY to its listeners; it can be down) and shards (the probe of their routing
// protocol, '2' or, for a shard older than id_gen 0.7.16, NULL; the claim in both forms with
// route_claim's IG001/IG002, ignored on BEGIN by an old shard; the declared route version, a
// read by owner, lost connections: a connect refused, a probe, a claim or a COMMIT whose
// connection ends), as clients/python/tests/test_router_fake.py fakes them for the Python
// client. Lost connections fail as pg reports them; a client whose connection
// ended fails every later query, and must be destroyed when it goes back to its pool.
const { EventEmitter } = require('node:events');
const { geneOf } = require('../lib/genes');
const { ROUTING_PROTOCOL_SQL } = require('../lib/routes');

const READ = 'SELECT amount FROM orders WHERE owner_id = $1'; // by owner: no id predicate

function sqlError(code) {
  return Object.assign(new Error(`fake ${code}`), { code, severity: 'ERROR' });
}

function connectionError() {
  return Object.assign(new Error('fake: Connection terminated unexpectedly'), { code: 'ECONNREFUSED' });
}

/** A TCP connect refused (the shard restarting), as net reports it through pg. */
function refusedError() {
  return Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), {
    code: 'ECONNREFUSED', errno: -111, syscall: 'connect', address: '127.0.0.1', port: 5432,
  });
}

/** The ways pg reports a connection that ended under a query, taken in turn. */
const LOST_CONNECTION_ERRORS = [
  () => Object.assign(new Error('terminating connection due to administrator command'), { code: '57P01', severity: 'FATAL' }),
  () => Object.assign(new Error('fake: connection failure'), { code: '08006', severity: 'FATAL' }),
  () => new Error('Connection terminated unexpectedly'),
];

class Coordinator {
  constructor(uppers) {
    this.uppers = uppers;
    this.version = 1n;
    this.down = false;
    this.listeners = new Set();
    this.routeReads = 0;
    this.listenFails = false; // LISTEN fails (0A000), as behind a pooler that refuses it
    this.listenAttempts = 0; // LISTENs tried, failed or not
  }

  /** New routes and version; notify: whether the listeners hear of it. */
  change(uppers, notify) {
    this.uppers = uppers;
    this.version += 1n;
    if (notify) {
      for (const l of this.listeners) l.emit('notification', { channel: 'id_gen_routes', payload: String(this.version) });
    }
  }

  ownerOf(gene) {
    const range = this.uppers.find(([upper]) => gene <= upper);
    return range === undefined ? null : range[1];
  }
}

class Cluster {
  constructor(uppers) {
    this.coord = new Coordinator(uppers);
    this.fences = 0;
    this.connectFails = 0; // the next connects to shard 'a' that fail,
    this.connectError = refusedError; // with this error (refused, by default)
    this.oldShards = new Set(); // shards older than 0.7.16: the probe answers NULL, a claim on BEGIN is a plain BEGIN
    this.probesLost = 0; // the next probes whose connection ends
    this.probesFail = 0; // the next probes that fail with an error of the server's (42501)
    this.claimsLost = 0; // the next claims whose connection ends
    this.commitLost = false; // whether the next COMMIT's connection ends, unanswered
    this.commitTimesOut = false; // whether the next COMMIT gets no answer within query_timeout
    this.readsLost = 0; // the next reads by owner whose connection ends under them
    this.lostConnections = 0;
    this.pools = {};
    this.lastReadShard = null;
    this.clients = [];
    const cluster = this;

    class Client extends EventEmitter {
      constructor(config) {
        super();
        this.config = config;
        cluster.clients.push(this);
      }

      async connect() {
        if (cluster.coord.down) throw connectionError();
      }

      async query(sql) {
        const c = cluster.coord;
        if (c.down) throw connectionError();
        if (sql.startsWith('LISTEN ')) {
          c.listenAttempts += 1;
          if (c.listenFails) throw sqlError('0A000');
          c.listeners.add(this);
          return { rows: [], command: 'LISTEN' };
        }
        if (sql.includes('ORDER BY lower_gene')) {
          c.routeReads += 1;
          let lower = 0;
          const rows = c.uppers.map(([upper, shard]) => {
            const row = { lower_gene: lower, upper_gene: upper, shard, version: c.version };
            lower = upper + 1;
            return row;
          });
          return { rows, command: 'SELECT' };
        }
        if (sql.includes('NOT EXISTS')) return { rows: c.uppers.length ? [] : [{ version: c.version }], command: 'SELECT' };
        if (sql === 'SELECT id_gen.route_version() AS version') return { rows: [{ version: c.version }], command: 'SELECT' };
        throw new Error(`the fake coordinator does not know ${sql}`);
      }

      async end() {
        cluster.coord.listeners.delete(this);
        this.ended = true;
      }
    }

    class ShardClient extends EventEmitter {
      constructor(shard, pool) {
        super();
        this.shard = shard;
        this.pool = pool;
        this.log = [];
        this.inBlock = false;
        this.failed = false;
        this.localVersion = null;
        this.dead = false;
      }

      /** As pg's: 'T' in a transaction block, 'E' in a failed one, 'I' outside. */
      getTransactionStatus() {
        if (this.dead) return this.statusWhenLost; // (pg keeps the last ReadyForQuery's)
        if (!this.inBlock) return 'I';
        return this.failed ? 'E' : 'T';
      }

      /** The connection ends (the server or the network ended it): error is what pg reports. */
      lose(error) {
        this.statusWhenLost = this.getTransactionStatus();
        this.dead = true;
        this.inBlock = false;
        return error;
      }

      async query(sql, params) {
        if (this.dead) throw new Error('Client has encountered a connection error and is not queryable');
        this.log.push(sql);
        // A version declared by the statement's leading comment holds for this message only.
        const declared = /^\/\* id_gen\.route_version=(\d+) \*\/ /.exec(sql);
        if (declared) {
          this.localVersion = BigInt(declared[1]);
          sql = sql.slice(declared[0].length);
        }
        try {
          let result = { rows: [], command: null };
          for (const statement of sql.split('; ')) result = this.statement(statement, params); // a simple-protocol message of several
          return result;
        } finally {
          if (!this.inBlock) this.localVersion = null;
        }
      }

      statement(sql, params) {
        const coord = cluster.coord;
        const claimOnBegin = /^\/\* id_gen\.route_claim=(\d+),(\d+) \*\/ BEGIN$/.exec(sql);
        if (claimOnBegin) {
          // (a claim that fails opens no transaction; an old shard ignores the comment)
          if (!cluster.oldShards.has(this.shard)) this.claim(Number(claimOnBegin[1]), BigInt(claimOnBegin[2]));
          sql = 'BEGIN';
        }
        if (sql === 'BEGIN') {
          this.inBlock = true;
          this.failed = false;
          return { rows: [], command: 'BEGIN' };
        }
        if (sql === 'COMMIT' && cluster.commitTimesOut) {
          cluster.commitTimesOut = false;
          throw new Error('Query read timeout'); // (as pg's: the connection stays, unusable)
        }
        if (sql === 'COMMIT' && cluster.commitLost) {
          cluster.commitLost = false;
          throw this.lose(new Error('Connection terminated unexpectedly'));
        }
        if (sql === 'COMMIT' || sql === 'ROLLBACK') {
          const command = sql === 'COMMIT' && this.failed ? 'ROLLBACK' : sql;
          this.inBlock = false;
          this.failed = false;
          return { rows: [], command };
        }
        try {
          return this.run(sql, params, coord);
        } catch (e) {
          if (this.inBlock) this.failed = true;
          throw e;
        }
      }

      /** route_claim(gene, version), in either form: throws as it fails. */
      claim(gene, version) {
        if (cluster.claimsLost > 0) {
          cluster.claimsLost -= 1;
          throw this.lose(this.lostError());
        }
        if (cluster.fences > 0) {
          cluster.fences -= 1;
          throw sqlError('IG002');
        }
        if (cluster.coord.ownerOf(gene) !== this.shard || version < cluster.coord.version) throw sqlError('IG001');
      }

      lostError() {
        const kind = LOST_CONNECTION_ERRORS[cluster.lostConnections % LOST_CONNECTION_ERRORS.length];
        cluster.lostConnections += 1;
        return kind();
      }

      run(sql, params, coord) {
        if (this.failed) throw sqlError('25P02');
        if (sql === ROUTING_PROTOCOL_SQL) {
          if (cluster.probesLost > 0) {
            cluster.probesLost -= 1;
            throw this.lose(this.lostError());
          }
          if (cluster.probesFail > 0) {
            cluster.probesFail -= 1;
            throw sqlError('42501');
          }
          return { rows: [{ current_setting: cluster.oldShards.has(this.shard) ? null : '2' }], command: 'SELECT' };
        }
        let m = /^SELECT id_gen\.route_claim\((\d+), (\d+)\)$/.exec(sql);
        if (m) {
          this.claim(Number(m[1]), BigInt(m[2]));
          return { rows: [{ route_claim: coord.version }], command: 'SELECT' };
        }
        if (sql === READ) {
          if (cluster.readsLost > 0) {
            cluster.readsLost -= 1;
            throw this.lose(sqlError('57P01'));
          }
          // The first statement of the transaction touching a distributed table checks the
          // declared version; a read by owner of genes the shard lost finds nothing.
          if (cluster.fences > 0) {
            cluster.fences -= 1;
            throw sqlError('IG002');
          }
          if (this.localVersion !== null && this.localVersion < coord.version) throw sqlError('IG001');
          const owns = coord.ownerOf(geneOf(BigInt(params[0]))) === this.shard;
          if (owns) cluster.lastReadShard = this.shard;
          return { rows: owns ? [{ amount: 7 }] : [], command: 'SELECT' };
        }
        if (sql.includes('gene_order_id')) {
          cluster.lastParams = params;
          // (the id's text, as the server sends it, through the parser the pool was given)
          return { rows: [{ id: this.pool.config.types.getTypeParser(20, 'text')('9007199254740993') }], command: 'SELECT' };
        }
        if (sql === 'SELECT fail') throw sqlError('22012');
        return { rows: [], command: 'SELECT' };
      }

      release(destroy) {
        this.pool.out -= 1;
        if (destroy) this.pool.destroyed += 1;
        else if (this.dead) this.pool.deadReturnedIdle += 1;
      }
    }

    class Pool extends EventEmitter {
      constructor(config) {
        super();
        this.config = config;
        this.shard = config.connectionString;
        this.out = 0;
        this.destroyed = 0;
        this.deadReturnedIdle = 0;
        this.conns = [];
        cluster.pools[this.shard] = this;
      }

      async connect() {
        if (this.shard === 'a' && cluster.connectFails > 0) {
          cluster.connectFails -= 1;
          throw cluster.connectError();
        }
        this.out += 1;
        const client = new ShardClient(this.shard, this);
        this.conns.push(client);
        this.emit('connect', client);
        return client;
      }

      async end() {
        this.ended = true;
      }
    }

    this.pg = { Client, Pool, types: { getTypeParser: () => (v) => v } };
  }

  /** What was sent to every shard, or to one. */
  sent(shard) {
    return Object.values(this.pools).filter((p) => shard === undefined || p.shard === shard)
      .flatMap((p) => p.conns).flatMap((c) => c.log);
  }

  /** Claims sent to every shard, in either form. */
  claims() {
    return this.sent().filter((s) => s.startsWith('/* id_gen.route_claim=') || s.startsWith('BEGIN; SELECT id_gen.route_claim(')).length;
  }

  /** Probes of the routing protocol sent to every shard. */
  probes() {
    return this.sent().filter((s) => s === ROUTING_PROTOCOL_SQL).length;
  }

  outstanding() {
    return Object.values(this.pools).reduce((n, p) => n + p.out, 0);
  }

  /** Clients whose connection had ended that went back to a pool idle (never right). */
  deadReturnedIdle() {
    return Object.values(this.pools).reduce((n, p) => n + p.deadReturnedIdle, 0);
  }
}

module.exports = { Cluster, READ, sqlError };
