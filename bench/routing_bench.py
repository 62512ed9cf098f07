"""Side-by-side benchmark of zero-hop routing (bench/routing.sh runs it).

One client thread per run. Transactions of BEGIN, one statement, COMMIT: through
id_gen_client.Router.transaction (the claim rides with BEGIN), through the coordinator
(postgres_fdw), and directly on the owning shard with a plain psycopg pool. Single
statements in autocommit: Router.execute (the version declared with each statement:
set_config and the statement in one pipeline) against a direct autocommit pool.
Rounds are interleaved (every path once per round, in a rotating order); the summary is
the median over rounds of each path's tps and latency, and of its per-round ratio to
direct, with the min-max spread of that ratio.

Usage: routing_bench.py ROUTES_DSN SHARDS_JSON IDS_FILE OWNERS SECONDS ROUNDS
Prints JSON lines: one per run, then one summary line per (op, path).
"""
import json
import random
import statistics
import sys
import time

import psycopg
from psycopg_pool import ConnectionPool
from id_gen_client import Router

routes_dsn, shards_json, ids_file, owners, seconds, rounds = sys.argv[1:7]
shards = json.loads(shards_json)
ids = [int(x) for x in open(ids_file).read().split()]
owners, seconds, rounds = int(owners), float(seconds), int(rounds)

router = Router(routes_dsn, shards, max_size=2)
direct_pools = {name: ConnectionPool(dsn, min_size=1, max_size=2, open=True) for name, dsn in shards.items()}
coordinator = psycopg.connect(routes_dsn)

INSERT_SHARD = ("INSERT INTO orders (id, owner_id, amount) "
                "VALUES (id_gen.gene_order_id('orders', %s::bigint), %s, 1)")
INSERT_COORD = "INSERT INTO orders (owner_id, amount) VALUES (%s, 1)"
LOOKUP = "SELECT amount FROM orders WHERE id = %s"


def op_args(op, rng):
    if op == "insert":
        o = rng.randint(1, owners)
        return o, (o, o)
    i = rng.choice(ids)
    return i, (i,)


def run_router(op, key, args):
    kw = {"owner": key} if op == "insert" else {"id": key}
    with router.claim(**kw) as conn:
        cur = conn.execute(INSERT_SHARD if op == "insert" else LOOKUP, args)
        if op == "lookup":
            cur.fetchall()


def run_direct(op, key, args):
    shard = router.shard_for_owner(key) if op == "insert" else router.shard_for_id(key)
    with direct_pools[shard].connection() as conn:  # BEGIN ... COMMIT, like the Router
        cur = conn.execute(INSERT_SHARD if op == "insert" else LOOKUP, args)
        if op == "lookup":
            cur.fetchall()


def run_coordinator(op, key, args):
    with coordinator.transaction():
        cur = coordinator.execute(INSERT_COORD if op == "insert" else LOOKUP, (key,) if op == "insert" else args)
        if op == "lookup":
            cur.fetchall()


def run_router_execute(op, key, args):
    kw = {"owner": key} if op == "insert" else {"id": key}
    router.execute(INSERT_SHARD if op == "insert" else LOOKUP, args, **kw)


def run_direct_autocommit(op, key, args):
    shard = router.shard_for_owner(key) if op == "insert" else router.shard_for_id(key)
    conn = auto_pools[shard].getconn()
    try:
        cur = conn.execute(INSERT_SHARD if op == "insert" else LOOKUP, args)
        if op == "lookup":
            cur.fetchall()
    finally:
        auto_pools[shard].putconn(conn)


auto_pools = {name: ConnectionPool(dsn, min_size=1, max_size=2, open=True, kwargs={"autocommit": True})
              for name, dsn in shards.items()}
# Each path and the direct path with the same shape that it is compared with.
PATHS = {"router": run_router, "coordinator": run_coordinator, "direct": run_direct,
         "router.execute": run_router_execute, "direct autocommit": run_direct_autocommit}
BASELINE = {"router": "direct", "coordinator": "direct", "direct": "direct",
            "router.execute": "direct autocommit", "direct autocommit": "direct autocommit"}
results = {}  # (op, path) -> list of (tps, p50, p99)
for r in range(rounds):
    for op in ("insert", "lookup"):
        order = list(PATHS)
        order = order[r % len(order):] + order[:r % len(order)]
        for path in order:
            fn = PATHS[path]
            rng = random.Random(r * 31 + len(path))
            lat = []
            end = time.perf_counter() + seconds
            while True:
                key, args = op_args(op, rng)
                t0 = time.perf_counter()
                fn(op, key, args)
                t1 = time.perf_counter()
                lat.append(t1 - t0)
                if t1 > end:
                    break
            lat.sort()
            rec = (len(lat) / seconds, lat[len(lat) // 2] * 1000, lat[int(len(lat) * 0.99)] * 1000)
            results.setdefault((op, path), []).append(rec)
            print(json.dumps({"round": r, "op": op, "path": path, "tps": round(rec[0], 1),
                              "p50_ms": round(rec[1], 3), "p99_ms": round(rec[2], 3)}), flush=True)

for op in ("insert", "lookup"):
    for path in PATHS:
        base = results[(op, BASELINE[path])]
        runs = results[(op, path)]
        tps_ratio = [a[0] / b[0] for a, b in zip(runs, base)]
        lat_ratio = [a[1] / b[1] for a, b in zip(runs, base)]
        print(json.dumps({
            "summary": True, "op": op, "path": path, "baseline": BASELINE[path],
            "tps": round(statistics.median(x[0] for x in runs), 1),
            "p50_ms": round(statistics.median(x[1] for x in runs), 3),
            "p99_ms": round(statistics.median(x[2] for x in runs), 3),
            "tps_vs_direct": round(statistics.median(tps_ratio), 3),
            "tps_vs_direct_spread": [round(min(tps_ratio), 3), round(max(tps_ratio), 3)],
            "p50_vs_direct": round(statistics.median(lat_ratio), 3),
            "p50_vs_direct_spread": [round(min(lat_ratio), 3), round(max(lat_ratio), 3)],
        }), flush=True)
print(json.dumps({"router_stats": dict(router.stats)}))
router.close()
