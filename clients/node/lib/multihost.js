'use strict';
// Several hosts in one connection string, as libpq takes them and pg does not: "host=h1,h2
// port=p1,p2 target_session_attrs=read-write" (one port for every host, or one per host; an
// empty entry is the default). multiHostConfig turns the parsed pairs into a pg config with a
// `hosts` list; multiHostClient(pg.Client) is a Client class (for pg.Pool's `Client` option, or
// on its own) that connects to the first host of that list that qualifies: one that accepts
// the connection and, under read-write, answers `SHOW transaction_read_only` with off.
//
// Invariants:
// - Hosts are tried in order, each connect bounded by hostConnectTimeoutMillis (the
//   string's connect_timeout), each with its own TLS settings: under sslmode=prefer a host
//   that refused TLS is connected to again without it, and later connects to that host go
//   without it at once (connectPreferringTls on the host's entry).
// - A host is tried by a connection of its own (closed after the check); the client then
//   connects to the host that qualified and checks it again (it may have changed since).
// - When no host qualifies, connect fails with a NoHostError (code 08001: a connection
//   refused, which the Router retries before COMMIT was sent), unless a host failed for a
//   reason that is no lost connection (a password refused, a database unknown, TLS required
//   and refused): then with that host's error, as pg reports it.
// - A connection string with one host and no target_session_attrs never comes here.

const { connectionLost } = require('./errors');
const { SSL_MODES, preferTls, connectPreferringTls } = require('./tls');

const TARGET_SESSION_ATTRS = ['read-write', 'any'];
const READ_ONLY_SQL = 'SHOW transaction_read_only';

/**
 * No host of a multi-host config qualified: each refused, failed as a lost connection, or was
 * read only under read-write. code is 08001 (sqlclient_unable_to_establish_sqlconnection),
 * as libpq's; cause is the last host's error.
 */
class NoHostError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = 'NoHostError';
    this.code = '08001';
  }
}

/**
 * The pg config of a keyword/value string with several hosts or target_session_attrs: config
 * holds the parsed pairs (host: the host list as given; port: unused), ports the port list as
 * given (undefined: none), sslmode the mode (checked already). Throws a TypeError when the
 * lists do not match or target_session_attrs is not read-write or any.
 */
function multiHostConfig(config, ports, targetSessionAttrs, sslmode) {
  if (targetSessionAttrs !== undefined && !TARGET_SESSION_ATTRS.includes(targetSessionAttrs)) {
    throw new TypeError(`target_session_attrs=${targetSessionAttrs} is not supported here: give ${TARGET_SESSION_ATTRS.join(' or ')}`);
  }
  const hostNames = String(config.host ?? '').split(',').map((h) => h.trim() || process.env.PGHOST || 'localhost');
  const portTexts = String(ports ?? '').split(',').map((p) => p.trim() || process.env.PGPORT || '5432');
  if (portTexts.length !== 1 && portTexts.length !== hostNames.length) {
    throw new TypeError(`a connection string with ${hostNames.length} hosts takes one port or ${hostNames.length} ports, not ${portTexts.length}`);
  }
  const hosts = hostNames.map((host, i) => {
    const portText = portTexts[portTexts.length === 1 ? 0 : i];
    if (!/^[0-9]{1,5}$/.test(portText)) throw new TypeError(`a port is a number, not ${portText}`);
    const entry = { host, port: Number(portText) };
    if (sslmode === 'prefer') return preferTls(entry, host);
    entry.ssl = SSL_MODES[sslmode] && { ...SSL_MODES[sslmode] };
    return entry;
  });
  const out = { ...config, host: hosts[0].host, port: hosts[0].port, ssl: hosts[0].ssl, hosts };
  out.targetSessionAttrs = targetSessionAttrs ?? 'any';
  if (config.connectionTimeoutMillis !== undefined) {
    // (each host's connect is bounded as libpq bounds it; a pool's wait for a new
    // connection covers every host's check and the connect to the one that qualified)
    out.hostConnectTimeoutMillis = config.connectionTimeoutMillis;
    out.connectionTimeoutMillis = config.connectionTimeoutMillis * (hosts.length + 1);
  }
  return out;
}

/** Whether config (a pg config, or a pool's options) lists hosts for multiHostClient. */
function isMultiHost(config) {
  return config !== null && typeof config === 'object' && Array.isArray(config.hosts);
}

const clientClasses = new WeakMap();

/** The Client class a config needs: multiHostClient(Client) for a multi-host one, else Client. */
function clientFor(config, Client) {
  return isMultiHost(config) ? multiHostClient(Client) : Client;
}

/**
 * The pg.Pool options a config adds for its Client: { Client: multiHostClient(Client) } for a
 * multi-host one; none else (the pool's own Client, as ever).
 */
function poolClientOption(config, Client) {
  return isMultiHost(config) ? { Client: multiHostClient(Client) } : {};
}

/**
 * A subclass of Client (pg.Client, or a fake of it) that connects to the first qualifying host
 * of its config's `hosts`; one class per Client.
 */
function multiHostClient(Client) {
  let MultiHostClient = clientClasses.get(Client);
  if (MultiHostClient !== undefined) return MultiHostClient;
  MultiHostClient = class extends Client {
    constructor(config) {
      if (!isMultiHost(config) || config.hosts.length === 0) {
        throw new TypeError('a multi-host client needs config.hosts: [{ host, port }, ...] (see multiHostConfig)');
      }
      super(hostConfig(config, config.hosts[0]));
      this._multiHost = config;
    }

    /** Connects to the first host that qualifies (see the file's header); callback or promise. */
    connect(callback) {
      const connected = this._connectToAHost();
      if (typeof callback !== 'function') return connected;
      connected.then(() => callback(null, this), (e) => callback(e));
      return undefined;
    }

    async _connectToAHost() {
      const config = this._multiHost;
      const failures = [];
      for (const entry of config.hosts) {
        // (a pool that gave up on this connect destroyed its socket: no more hosts)
        if (this.connection && this.connection.stream && this.connection.stream.destroyed) break;
        const failure = await checkHost(Client, config, entry);
        if (failure !== null) {
          failures.push(failure);
          continue;
        }
        // (the pool may have given up while the host was checked)
        if (this.connection && this.connection.stream && this.connection.stream.destroyed) break;
        this._target(config, entry);
        let connected = false;
        try {
          await super.connect();
          connected = true;
          if (config.targetSessionAttrs === 'read-write' && await readOnly(this)) {
            failures.push({ entry, readOnly: true });
            this.end().catch(() => {});
          } else {
            return this;
          }
        } catch (e) {
          failures.push({ entry, error: e });
          // (connected, then the read-only check failed: the connection is not kept)
          if (connected) this.end().catch(() => {});
        }
        break; // (this client connects once: the host it chose failed it)
      }
      throw noHostError(config, failures);
    }

    /** Points this (not yet connected) client at the host of entry, with its TLS settings. */
    _target(config, entry) {
      this.host = entry.host;
      this.port = entry.port;
      this.connectionParameters.host = entry.host;
      this.connectionParameters.port = entry.port;
      this.ssl = entry.ssl;
      this.connectionParameters.ssl = entry.ssl;
      if (this.connection) this.connection.ssl = entry.ssl;
    }
  };
  Object.defineProperty(MultiHostClient, 'name', { value: `MultiHost${Client.name || 'Client'}` });
  clientClasses.set(Client, MultiHostClient);
  return MultiHostClient;
}

/** A single-host pg config: config without its host list, at entry's host, port and TLS. */
function hostConfig(config, entry) {
  const { hosts, targetSessionAttrs, hostConnectTimeoutMillis, ...rest } = config;
  const single = { ...rest, host: entry.host, port: entry.port, ssl: entry.ssl };
  if (hostConnectTimeoutMillis !== undefined) single.connectionTimeoutMillis = hostConnectTimeoutMillis;
  return single;
}

/**
 * Whether the host of entry qualifies, on a connection of its own: null when it does, else
 * { entry, error } or { entry, readOnly: true }.
 */
async function checkHost(Client, config, entry) {
  let client = null;
  try {
    client = await connectPreferringTls(entry, async () => {
      const c = new Client(hostConfig(config, entry));
      c.on('error', () => {}); // (a probe's connection that breaks is this check's failure)
      await c.connect();
      return c;
    });
    if (config.targetSessionAttrs === 'read-write' && await readOnly(client)) return { entry, readOnly: true };
    return null;
  } catch (e) {
    return { entry, error: e };
  } finally {
    if (client !== null) client.end().catch(() => {});
  }
}

async function readOnly(client) {
  const { rows } = await client.query(READ_ONLY_SQL);
  return rows.length > 0 && rows[0].transaction_read_only === 'on';
}

/** The error of a connect that found no host: see the file's header. */
function noHostError(config, failures) {
  const own = failures.find((f) => !f.readOnly && !connectionLost(f.error));
  if (own !== undefined) return own.error;
  const hosts = config.hosts.map((h) => `${h.host}:${h.port}`).join(',');
  const wanted = config.targetSessionAttrs === 'read-write' ? 'a read-write connection' : 'a connection';
  const each = failures.map((f) => `${f.entry.host}:${f.entry.port}: ${f.readOnly ? 'read only (transaction_read_only = on)' : f.error.message}`);
  const last = failures[failures.length - 1];
  return new NoHostError(`no host of ${hosts} accepted ${wanted}${each.length > 0 ? `: ${each.join('; ')}` : ''}`,
    last !== undefined && last.error !== undefined ? { cause: last.error } : undefined);
}

module.exports = { NoHostError, multiHostConfig, multiHostClient, isMultiHost, clientFor, poolClientOption };
