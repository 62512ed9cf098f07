"""Errors of id_gen_client and the SQLSTATEs of the route-change protocol.

Invariant: every error the router raises about routing itself is a RoutingError;
database errors that are not about routes reach the caller unchanged (psycopg.Error).
"""

ROUTE_CHANGED = "IG001"  # the shard does not own the gene, or the declared version is older
ROUTE_FENCED = "IG002"  # the gene is fenced for a cut-over: retry after a short wait


class RoutingError(Exception):
    """Base class of the router's own errors."""


class NoRouteError(RoutingError):
    """No route covers the gene, or the route names a shard the router has no DSN for."""


class RouteRetryExhausted(RoutingError):
    """IG001/IG002 kept coming back for retry_limit retries (retry_limit + 1 attempts);
    __cause__ is the last one."""


def route_error_code(error: BaseException) -> "str | None":
    """ROUTE_CHANGED or ROUTE_FENCED when `error` is one of them, else None."""
    code = getattr(error, "sqlstate", None) or getattr(getattr(error, "diag", None), "sqlstate", None)
    return code if code in (ROUTE_CHANGED, ROUTE_FENCED) else None
