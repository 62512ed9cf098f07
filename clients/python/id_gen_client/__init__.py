"""id_gen_client: applications route to id_gen shards by themselves (zero-hop routing).

Holds the public API: `gene`/`gene_of_id` (genes.py, equal to the extension's
id_gen.shard_gene), `Router` (router.py) and `AsyncRouter` (aio.py), the two faces of the
route-change protocol of docs/routing-protocol.md with one vocabulary (`transaction`
retries, `run` runs the body once, `claim` is its `with` form, `execute`, `next_id`,
`retry_limit` = retries after the first attempt, `shard_timeout` bounds what they wait for
on a shard), and the errors (errors.py). Modules import only downwards: errors and genes
import nothing of the package, _routes imports both, _watchdog imports errors, router and
aio import _routes and _watchdog. Typed (py.typed).
"""
from .aio import AsyncRouter
from .errors import (ROUTE_CHANGED, ROUTE_FENCED, CommitOutcomeUnknown, NoRouteError,
                     RouteRetryExhausted, RoutingError, ShardTimeout)
from .genes import gene, gene_of_id, owner_bytes
from .router import Router

__version__ = "0.7.0"
__all__ = ["Router", "AsyncRouter", "gene", "gene_of_id", "owner_bytes", "RoutingError",
           "NoRouteError", "RouteRetryExhausted", "CommitOutcomeUnknown", "ShardTimeout", "ROUTE_CHANGED",
           "ROUTE_FENCED"]
