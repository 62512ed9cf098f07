'use strict';
// Errors of id-gen-client and the SQLSTATEs of the route-change protocol
// (docs/routing-protocol.md §3 and §5).
//
// Invariant: every error the router raises about routing itself is a RoutingError; database
// errors that are not about routes reach the caller as pg reports them (with .code, the
// SQLSTATE).

const ROUTE_CHANGED = 'IG001'; // the shard does not own the gene, or the declared version is older
const ROUTE_FENCED = 'IG002'; // the gene is fenced for a cut-over: retry after a short wait

class RoutingError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = this.constructor.name;
  }
}

/** No route covers the gene, or the route names a shard the router has no connection for. Not retried. */
class NoRouteError extends RoutingError {}

/** IG001/IG002 kept coming back for retryLimit retries; .cause is the last one. Retryable later. */
class RouteRetryExhausted extends RoutingError {}

/** ROUTE_CHANGED or ROUTE_FENCED when the error is one of them, else null. */
function routeErrorCode(error) {
  const code = error && typeof error === 'object' ? error.code : undefined;
  return code === ROUTE_CHANGED || code === ROUTE_FENCED ? code : null;
}

module.exports = { ROUTE_CHANGED, ROUTE_FENCED, RoutingError, NoRouteError, RouteRetryExhausted, routeErrorCode };
