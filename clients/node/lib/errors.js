'use strict';
// Errors of id-gen-client and the SQLSTATEs of the route-change protocol
// (docs/routing-protocol.md §3 and §5).
//
// Invariant: every error the router raises about routing itself (or about a COMMIT whose
// answer was lost) is a RoutingError; database errors that are not about routes reach the
// caller as pg reports them (with .code, the SQLSTATE).

const ROUTE_CHANGED = 'IG001'; // the shard does not own the gene, or the declared version is older
const ROUTE_FENCED = 'IG002'; // the gene is fenced for a cut-over: retry after a short wait
// Not a SQLSTATE: the retry code of a shard connection refused or lost before COMMIT was sent.
const CONNECTION_LOST = 'lost';
// The server ended the session (shutdown, a terminated backend, still starting up).
const SERVER_ENDED_SESSION = new Set(['57P01', '57P02', '57P03']);
// Node's socket errors of a connection refused, reset or cut.
const SOCKET_LOST = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ECONNABORTED', 'EHOSTUNREACH', 'ENETUNREACH']);
// pg's and pg-pool's errors without a code for a connection that ended, or never came up in time.
const PG_LOST_MESSAGE = /^(Connection terminated|Client has encountered a connection error|timeout expired$|timeout exceeded when trying to connect)/;

class RoutingError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = this.constructor.name;
  }
}

/** No route covers the gene, or the route names a shard the router has no connection for. Not retried. */
class NoRouteError extends RoutingError {}

/**
 * IG001/IG002, or a refused or lost shard connection, kept coming back for retryLimit
 * retries; .cause is the last one. Retryable later.
 */
class RouteRetryExhausted extends RoutingError {}

/**
 * The shard connection was lost after COMMIT was sent and before its answer: the transaction
 * may or may not have committed. Never retried; .cause is the driver's error. The caller
 * decides (look the row up by its id, or make the body idempotent).
 */
class CommitOutcomeUnknownError extends RoutingError {}

/** ROUTE_CHANGED or ROUTE_FENCED when the error is one of them, else null. */
function routeErrorCode(error) {
  const code = error && typeof error === 'object' ? error.code : undefined;
  return code === ROUTE_CHANGED || code === ROUTE_FENCED ? code : null;
}

/**
 * Whether the error says the connection is gone: SQLSTATE class 08, the server ending the
 * session (57P01..57P03, 57P03 also when it refuses a connect while starting up), a socket
 * refused, reset or timed out, or pg's "Connection terminated ..." (no code).
 */
function connectionLost(error) {
  if (error === null || typeof error !== 'object') return false;
  const { code } = error;
  if (typeof code === 'string') return code.startsWith('08') || SERVER_ENDED_SESSION.has(code) || SOCKET_LOST.has(code);
  return typeof error.message === 'string' && PG_LOST_MESSAGE.test(error.message);
}

module.exports = {
  ROUTE_CHANGED, ROUTE_FENCED, CONNECTION_LOST, RoutingError, NoRouteError, RouteRetryExhausted, CommitOutcomeUnknownError,
  routeErrorCode, connectionLost,
};
