"""What the sync and the async router share, none of it I/O: the route snapshot, the routing
key, the retry decisions, and the SQL of docs/routing-protocol.md.

Invariants:

* A `RouteTable` is immutable: routes and their version are one snapshot, replaced whole.
* `retry_limit` counts retries after the first attempt (a call makes at most
  retry_limit + 1 attempts), the same in every client.
* After IG001 the routes are re-read before the next attempt; after IG002 every third
  time; the wait before attempt n + 1 is min(base * 2**n, max), jittered to [1/2, 1] of it.
* One attempt of a routed call raises `RetryRoute` for IG001/IG002 and for a shard
  connection refused or lost before COMMIT was sent (`attempt_failure`), and nothing else;
  the one retry loop of each router (`_retrying`) catches only that. A connection lost
  after COMMIT (or `execute`'s statement) was sent becomes CommitOutcomeUnknown, never a
  retry. A shard that did not answer within shard_timeout is such a lost connection
  (ShardTimeout, _watchdog.py).
* `shard_timeout` also bounds a shard pool's wait for a free connection (the pool's
  `timeout`, unless pool_kwargs sets one) and its connects (`connect_timeout`, unless the
  DSN, PGCONNECT_TIMEOUT or pool_kwargs sets one): `shard_pool_args`.
* The claim goes on BEGIN as a comment (`claim_sql`) only to a shard whose probe
  (ROUTING_PROTOCOL_SQL) said it reads it: a shard before 0.7.16 ignores the comment, and
  its transaction would then run unclaimed. What a shard pool's probe said is held in
  `_claims_on_begin` until a connection of that pool comes back lost (a restart may have
  changed the shard's library).
"""
from __future__ import annotations

import bisect
import math
import os
import random
import uuid
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import psycopg
from psycopg import pq, sql
from psycopg.conninfo import conninfo_to_dict

from .errors import (CONNECTION_LOST, ROUTE_CHANGED, CommitOutcomeUnknown, NoRouteError, RouteRetryExhausted,
                     connection_lost, route_error_code)

__all__ = ["ROUTE_CHANGED", "RouteTable", "RouteLookups", "target_gene", "owner_cast", "rereads_after",
           "backoff_delay", "exhausted", "RetryRoute"]
from .genes import as_gene, gene, gene_of_id

Owner = Union[int, str, uuid.UUID, bytes, bytearray, memoryview]
Range = Tuple[int, int, str]

ROUTES_CHANNEL = "id_gen_routes"
ROUTES_SQL = "SELECT lower_gene, upper_gene, shard, version FROM id_gen.route_map ORDER BY lower_gene"
# One snapshot: the version, only when there are still no routes (else read them again).
EMPTY_ROUTES_VERSION_SQL = ("SELECT id_gen.route_version() "
                            "WHERE NOT EXISTS (SELECT 1 FROM id_gen.route_map)")
# The version alone, for the poll that catches a route change whose notification was lost
# (or that a pooler kept from the listener).
ROUTE_VERSION_SQL = "SELECT id_gen.route_version()"
# A shard's routing protocol: '2' (or more) from id_gen 0.7.16 on, where the claim may ride on
# BEGIN as a comment; NULL on an older shard, which has no such setting.
ROUTING_PROTOCOL_SQL = "SELECT pg_catalog.current_setting('id_gen.routing_protocol', true)"
CLAIM_ON_BEGIN_PROTOCOL = 2
OWNER_CASTS = ((bool, None), (int, "bigint"), (str, "text"), (uuid.UUID, "uuid"))
LISTEN_POLL_SECONDS = 0.5
# Route reads must not hang the callers that wait for them (a coordinator that stopped
# answering): bounded connect, bounded statements, TCP keepalives.
COORDINATOR_CONNECT: Dict[str, Any] = {"connect_timeout": 10, "options": "-c statement_timeout=10000",
                       "keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5,
                       "keepalives_count": 3}


class RouteTable:
    """An immutable snapshot: sorted ranges (lower, upper, shard) and their version."""

    __slots__ = ("uppers", "ranges", "version")

    def __init__(self, ranges: Iterable[Range], version: int) -> None:
        self.ranges: Tuple[Range, ...] = tuple(ranges)
        self.uppers = [upper for _, upper, _ in self.ranges]
        self.version = version

    @classmethod
    def from_rows(cls, rows: Sequence[Tuple[int, int, str, int]]) -> "RouteTable":
        """From the rows of ROUTES_SQL (not empty): the version is on every row."""
        return cls(((lo, up, shard) for lo, up, shard, _ in rows), rows[0][3])

    def shard_for_gene(self, g: int) -> str:
        i = bisect.bisect_left(self.uppers, g)  # the ceiling entry on upper_gene
        if i == len(self.ranges) or self.ranges[i][0] > g:
            raise NoRouteError(f"no route for gene {g} (route version {self.version})")
        return self.ranges[i][2]


class RouteLookups:
    """What both routers hold and offer without I/O: their settings, counters, the routes
    (`_table`) and the lookups by them."""

    def __init__(self, routes_dsn: str, shards: Mapping[str, str], *, min_size: int,
                 max_size: int, retry_limit: int, backoff_base: float, backoff_max: float,
                 listen: bool, refresh_interval: float, pool_kwargs: Optional[Mapping[str, Any]],
                 shard_timeout: float) -> None:
        if retry_limit < 0:
            raise ValueError("retry_limit counts retries after the first attempt: 0 or more")
        if refresh_interval < 0:
            raise ValueError("refresh_interval is in seconds: 0 (no poll) or more")
        if not shard_timeout > 0:  # (also NaN)
            raise ValueError("shard_timeout is in seconds: more than 0")
        self.refresh_interval = refresh_interval
        self.shard_timeout = float(shard_timeout)
        self._routes_dsn = routes_dsn
        self._shard_dsns = dict(shards)
        self._pool_args: Dict[str, Any] = dict(pool_kwargs or {}, min_size=min_size, max_size=max_size)
        self.retry_limit = retry_limit
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.listen = listen
        self.stats = {"transactions": 0, "retries_moved": 0, "retries_fenced": 0, "retries_lost": 0,
                      "refreshes": 0}
        self._table = RouteTable((), 0)
        # shard pool -> whether its shard takes the claim on BEGIN (its probe's answer); a
        # pool missing here is probed before its next claim
        self._claims_on_begin: Dict[Any, bool] = {}
        self._reloads_begun = 0  # reloads numbered in the order they began
        self._last_good_reload = 0  # the number of the last reload that succeeded

    @property
    def version(self) -> int:
        """The route version the current routes belong to."""
        return self._table.version

    @property
    def routes(self) -> List[Range]:
        """The current routes: a list of (lower_gene, upper_gene, shard), inclusive."""
        return list(self._table.ranges)

    def gene(self, owner: Owner) -> int:
        """The gene of an owner (see id_gen_client.gene)."""
        return gene(owner)

    def shard_for_gene(self, g: int) -> str:
        """The shard that owns gene g, by the current routes."""
        return self._route(as_gene(g), self._table)

    def shard_for_owner(self, owner: Owner) -> str:
        return self.shard_for_gene(gene(owner))

    def shard_for_id(self, id: int) -> str:
        return self.shard_for_gene(gene_of_id(id))

    def _route(self, g: int, table: RouteTable) -> str:
        shard = table.shard_for_gene(g)
        if shard not in self._shard_dsns:
            raise NoRouteError(f"gene {g} routes to shard {shard!r}, which has no DSN in this {type(self).__name__}")
        return shard



def declared_query(version: int, query: Any) -> Any:
    """`query` with the route version it was routed with in a leading comment
    (`/* id_gen.route_version=N */`, docs/routing-protocol.md §3): the shard checks it for
    that statement, so it needs no second statement and no session state. `query` is a
    str, bytes or psycopg.sql.Composable."""
    prefix = f"/* id_gen.route_version={int(version)} */ "
    if isinstance(query, str):
        return prefix + query
    if isinstance(query, bytes):
        return prefix.encode() + query
    if isinstance(query, sql.Composable):
        return sql.SQL(prefix) + query
    raise TypeError(f"id_gen_client: a query is a str, bytes or psycopg.sql.Composable, not {type(query).__name__}")


def claims_on_begin(setting: Optional[str]) -> bool:
    """Whether a shard whose id_gen.routing_protocol reads `setting` (the probe's answer;
    None on a shard without the setting) takes the claim as a comment on BEGIN. What does not
    parse as a number is an old shard's answer: the claim then goes as a statement, which
    every shard takes."""
    try:
        return setting is not None and int(setting) >= CLAIM_ON_BEGIN_PROTOCOL
    except ValueError:
        return False


def claim_sql(g: int, version: int, on_begin: bool) -> str:
    """The claim of gene g at route `version` with the BEGIN of its transaction, in one
    simple-protocol message: a comment on BEGIN (`on_begin`: routing protocol 2, no
    statement of its own), or BEGIN and a SELECT of id_gen.route_claim."""
    if on_begin:
        return f"/* id_gen.route_claim={int(g)},{int(version)} */ BEGIN"
    return f"BEGIN; SELECT id_gen.route_claim({int(g)}, {int(version)})"


def shard_pool_args(pool_args: Mapping[str, Any], dsn: str, shard: str, shard_timeout: float) -> Dict[str, Any]:
    """The arguments of a shard's pool (ConnectionPool or AsyncConnectionPool, without
    `open`): the caller's pool_kwargs and sizes; autocommit connections, without prepared
    statements unless the caller asks (PgBouncer 1.18 in transaction mode cannot keep them: a
    statement prepared on one server connection is missing on the next); the wait for a free
    connection (`timeout`) and each connect (`connect_timeout`, whole seconds, at least 2 as
    libpq counts them) bounded by shard_timeout unless set already."""
    args = dict(pool_args)
    kwargs = {"prepare_threshold": None, **(args.get("kwargs") or {}), "autocommit": True}
    if "connect_timeout" not in kwargs and not os.environ.get("PGCONNECT_TIMEOUT"):
        try:
            in_dsn = "connect_timeout" in conninfo_to_dict(dsn)
        except psycopg.Error:  # (a DSN libpq cannot parse fails at the connect, as before)
            in_dsn = False
        if not in_dsn:
            kwargs["connect_timeout"] = max(2, math.ceil(shard_timeout))
    args["kwargs"] = kwargs
    args.setdefault("name", f"id_gen_client-{shard}")
    args.setdefault("timeout", shard_timeout)
    return args


def target_gene(owner: Optional[Owner], id: Optional[int], gene_: Optional[int]) -> int:
    """The gene of exactly one of owner, id or gene (TypeError otherwise)."""
    given = [x is not None for x in (owner, id, gene_)]
    if sum(given) != 1:
        raise TypeError("give exactly one of owner=, id= or gene=")
    if owner is not None:
        return gene(owner)
    if id is not None:
        return gene_of_id(id)
    assert gene_ is not None
    return as_gene(gene_)


def owner_cast(owner: object) -> str:
    """The SQL type an owner is passed as to id_gen.gene_order_id."""
    cast = next((c for t, c in OWNER_CASTS if isinstance(owner, t)), None)
    if cast is None:
        raise TypeError(f"gene_order_id takes an int, str or uuid.UUID owner, not {type(owner).__name__}")
    return cast


def ended_by_body(conn: Any) -> bool:
    """Whether the claimed transaction is over on a connection that is still good: the body
    sent COMMIT or ROLLBACK itself (libpq's transaction status, no round trip)."""
    return bool(not conn.closed and conn.pgconn.transaction_status == pq.TransactionStatus.IDLE)


def rereads_after(code: str, attempt: int) -> bool:
    """Whether to re-read the routes after attempt number `attempt` met `code` (never after
    a lost connection: the routes did not say anything new)."""
    return code == ROUTE_CHANGED or (code != CONNECTION_LOST and attempt % 3 == 2)


RETRY_COUNTERS = {ROUTE_CHANGED: "retries_moved", CONNECTION_LOST: "retries_lost"}


def retry_counter(code: str) -> str:
    """The stats counter of a retry after `code`."""
    return RETRY_COUNTERS.get(code, "retries_fenced")


def attempt_failure(error: BaseException, phase: str, retry_body: bool) -> BaseException:
    """What an error of one attempt becomes, by where it happened (`phase`: "connect",
    "claim", "body", "commit", or "statement" for `execute`): a RetryRoute (IG001/IG002, or
    a connection refused or lost while no COMMIT was sent; from the body only when
    retry_body), CommitOutcomeUnknown (a connection lost after COMMIT or the statement was
    sent), or the error itself (raised unchanged)."""
    if isinstance(error, (RetryRoute, RouteRetryExhausted, CommitOutcomeUnknown)):
        return error
    lost = connection_lost(error)
    if lost and phase in ("commit", "statement"):
        unknown = CommitOutcomeUnknown(
            f"the shard connection was lost after {'COMMIT' if phase == 'commit' else 'the statement'} was sent: "
            f"the transaction may or may not have committed ({error})")
        unknown.__cause__ = error
        return unknown
    code = route_error_code(error) or (CONNECTION_LOST if lost else None)
    if code is None or (phase in ("body", "commit") and not retry_body):
        return error
    return RetryRoute(error, code)


def backoff_delay(attempt: int, base: float, largest: float) -> float:
    """The jittered wait after attempt number `attempt` (0 for the first)."""
    return float(min(base * 2 ** attempt, largest) * random.uniform(0.5, 1.0))


def exhausted(g: int, what: str, retry_limit: int, refresh_error: Optional[BaseException]) -> RouteRetryExhausted:
    message = f"gene {g}: {what} {retry_limit + 1} attempts ({retry_limit} retries)"
    if refresh_error is not None:
        message += f"; the last re-read of the routes failed: {refresh_error}"
    return RouteRetryExhausted(message)


class RetryRoute(Exception):
    """Raised by one attempt of a routed call whose shard answered IG001 or IG002 (`error`,
    with SQLSTATE `code`), or whose connection was refused or lost before COMMIT was sent
    (`code` CONNECTION_LOST): the router's retry loop tries again on the routes it then
    holds."""

    def __init__(self, error: BaseException, code: str) -> None:
        super().__init__(code)
        self.error = error
        self.code = code
