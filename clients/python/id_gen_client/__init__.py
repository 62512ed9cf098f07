"""id_gen_client: applications route to id_gen shards by themselves (zero-hop routing).

Holds the public API: `gene`/`gene_of_id` (genes.py, equal to the extension's
id_gen.shard_gene), `Router` (router.py, the route-change protocol of
docs/routing-protocol.md) and the errors (errors.py). Modules import only downwards:
errors and genes import nothing of the package, router imports both.
"""
from .errors import (ROUTE_CHANGED, ROUTE_FENCED, NoRouteError, RouteRetryExhausted,
                     RoutingError)
from .genes import gene, gene_of_id, owner_bytes
from .router import Router

__version__ = "0.6.0"
__all__ = ["Router", "gene", "gene_of_id", "owner_bytes", "RoutingError", "NoRouteError",
           "RouteRetryExhausted", "ROUTE_CHANGED", "ROUTE_FENCED"]
