// id-gen-client for ES modules: the CommonJS build's exports, by name.
import client from './index.js';

export const {
  Router, RoutingError, NoRouteError, RouteRetryExhausted, CommitOutcomeUnknownError, ROUTE_CHANGED, ROUTE_FENCED,
  geneOf, geneOfId, Uuid, uuid, NoHostError, multiHostClient,
} = client;
export default client;
