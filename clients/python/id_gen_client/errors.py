"""Errors of id_gen_client and the SQLSTATEs of the route-change protocol.

Invariant: every error the router raises about routing itself is a RoutingError;
database errors that are not about routes reach the caller unchanged (psycopg.Error). A
shard that did not answer in time is a lost connection: ShardTimeout, an OperationalError.
"""
import psycopg
from psycopg_pool import PoolTimeout

ROUTE_CHANGED = "IG001"  # the shard does not own the gene, or the declared version is older
ROUTE_FENCED = "IG002"  # the gene is fenced for a cut-over: retry after a short wait
# Not a SQLSTATE: the retry code of a shard connection refused or lost before COMMIT was sent.
CONNECTION_LOST = "lost"
# The server ended the session (shutdown, a terminated backend, still starting up).
SERVER_ENDED_SESSION = ("57P01", "57P02", "57P03")


class RoutingError(Exception):
    """Base class of the router's own errors."""


class NoRouteError(RoutingError):
    """No route covers the gene, or the route names a shard the router has no DSN for."""


class RouteRetryExhausted(RoutingError):
    """IG001/IG002, or a refused or lost shard connection, kept coming back for retry_limit
    retries (retry_limit + 1 attempts); __cause__ is the last one."""


class CommitOutcomeUnknown(RoutingError):
    """The shard connection was lost after COMMIT was sent (or, for `execute`, after the
    statement was sent) and before its answer: the transaction may or may not have
    committed. Never retried; __cause__ is the driver's error. The caller decides (look the
    row up by its id, or make the body idempotent)."""


class ShardTimeout(psycopg.OperationalError):
    """A shard did not answer within the router's `shard_timeout` (the probe of its routing
    protocol, the claim, COMMIT, ROLLBACK or `execute`'s statement): the router shut the
    connection down and closed it. Not a RoutingError but a lost connection (an
    OperationalError without SQLSTATE): retried when no COMMIT was sent, the __cause__ of
    CommitOutcomeUnknown after."""


def sqlstate_of(error: BaseException) -> "str | None":
    """The SQLSTATE of a psycopg error (or of a fake that carries one), else None."""
    return getattr(error, "sqlstate", None) or getattr(getattr(error, "diag", None), "sqlstate", None)


def connection_lost(error: BaseException) -> bool:
    """Whether `error` says the connection is gone: SQLSTATE class 08, the server ending the
    session (57P01-57P03), or a psycopg OperationalError without a SQLSTATE (a socket closed
    under libpq, a refused connect), but not a pool's timeout."""
    code = sqlstate_of(error)
    if code is None:
        # (psycopg_pool's PoolTimeout is an OperationalError too, but a pool that had no free
        # connection in its timeout is the caller's own load, or a shard down for that long:
        # raised, not retried; a pool waits for a restarting shard by itself)
        return isinstance(error, psycopg.OperationalError) and not isinstance(error, PoolTimeout)
    return code.startswith("08") or code in SERVER_ENDED_SESSION


def route_error_code(error: BaseException) -> "str | None":
    """ROUTE_CHANGED or ROUTE_FENCED when `error` is one of them, else None."""
    code = sqlstate_of(error)
    return code if code in (ROUTE_CHANGED, ROUTE_FENCED) else None
