'use strict';
// sslmode for pg as libpq means it: the TLS settings of each mode, and prefer (which pg has
// not) as TLS that falls back to plaintext on a server without TLS (connectPreferringTls).
// Used by router.js (a connection string's config) and multihost.js (each host's own).
//
// Invariant: a config marked PREFER_TLS whose server refused TLS gets ssl = false, so that its
// later connects go without TLS at once; nothing else changes a config.

// sslmode as libpq means it (absent: PGSSLMODE, else prefer, libpq's default). pg has no
// prefer: it is TLS without certificate checks, marked PREFER_TLS, and a server that answers
// 'N' to the SSLRequest is connected to again without TLS, remembered for that connection
// string (connectPreferringTls). allow is plaintext (pg cannot upgrade on the server's demand).
const PREFER_TLS = Symbol('id_gen.preferTls');
const SSL_MODES = {
  disable: false, allow: false, prefer: { rejectUnauthorized: false }, require: { rejectUnauthorized: false },
  'verify-ca': { rejectUnauthorized: true, checkServerIdentity: () => undefined }, 'verify-full': { rejectUnauthorized: true },
};
// The TLS settings of prefer (libpq uses none over a Unix-domain socket, whatever the mode).
function preferTls(config, host) {
  if ((host || process.env.PGHOST || '').startsWith('/')) config.ssl = false;
  else {
    config.ssl = { ...SSL_MODES.prefer };
    config[PREFER_TLS] = true;
  }
  return config;
}
/** pg's error when the server answered 'N' to the SSLRequest (it has no TLS). */
function tlsRefused(error) {
  return error instanceof Error && error.message === 'The server does not support SSL connections';
}

/**
 * connect() (a pg Client's or Pool's); under sslmode=prefer (config[PREFER_TLS]), a server that
 * refused TLS is connected to again at once without it, and config.ssl becomes false, so that
 * the later connections of that config (a pool's options, the coordinator's config) go without
 * TLS from the start: one refused SSLRequest per connection string and Router, not per
 * connection. A server that later offers TLS is used without it until the Router is re-made.
 */
async function connectPreferringTls(config, connect) {
  const ssl = config.ssl;
  try {
    return await connect();
  } catch (e) {
    if (!config[PREFER_TLS] || !tlsRefused(e)) throw e;
    if (config.ssl === ssl) config.ssl = false;
    return connect();
  }
}

module.exports = { PREFER_TLS, SSL_MODES, preferTls, tlsRefused, connectPreferringTls };
