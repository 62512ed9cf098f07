'use strict';
// id-gen-client: zero-hop routing for id_gen (docs/routing-protocol.md), on node-postgres.
const { Router } = require('./router');
const {
  ROUTE_CHANGED, ROUTE_FENCED, RoutingError, NoRouteError, RouteRetryExhausted, CommitOutcomeUnknownError,
} = require('./errors');
const { geneOf, geneOfId, Uuid, uuid } = require('./genes');
const { NoHostError, multiHostClient } = require('./multihost');

module.exports = {
  Router, RoutingError, NoRouteError, RouteRetryExhausted, CommitOutcomeUnknownError, ROUTE_CHANGED, ROUTE_FENCED,
  geneOf, geneOfId, Uuid, uuid, NoHostError, multiHostClient,
};
