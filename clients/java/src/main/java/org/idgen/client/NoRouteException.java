// NoRouteException: no route covers the gene (after one re-read of the routes), or the route
// names a shard this Router has no connection for. Not retried: the routes have no owner for it.
package org.idgen.client;

/** No route for the gene in the routes held (re-read once), or a shard without a connection. */
public class NoRouteException extends RoutingException {
    private static final long serialVersionUID = 1L;

    public NoRouteException(String message) {
        super(message);
    }
}
