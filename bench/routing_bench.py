"""Side-by-side benchmark of zero-hop routing (bench/bench_routing.sh runs it).

One client thread per run. Transactions of BEGIN, one statement, COMMIT: through
id_gen_client.Router.transaction (the claim rides with BEGIN), through the coordinator
(postgres_fdw), and directly on the owning shard with a psycopg pool. Single statements in
autocommit: Router.execute (the version declared in the statement's leading comment) against
a direct autocommit pool. The direct pools' connections are set as the Router's (no prepared
statements: what works behind PgBouncer 1.18 in transaction mode); the pair "prepared" is the
same autocommit statements with psycopg's default prepare_threshold (5) on both sides, a
Router given pool_kwargs={"kwargs": {"prepare_threshold": 5}} (for shards reached without a
transaction-mode pooler) against a direct pool with psycopg's defaults.
Each path runs side by side with the direct path it is compared with, in slices of 100 ms
(path, direct, direct, path, ...: a drift of the machine weighs on both alike), for SECONDS
each per round; the summary is the median over rounds of each path's tps and latency, and of
its per-round ratio to its direct path (of the same run), with the min-max spread of that
ratio.

Usage: routing_bench.py ROUTES_DSN SHARDS_JSON IDS_FILE OWNERS SECONDS ROUNDS
Prints JSON lines: one per run, then one summary line per (op, path).
"""
import importlib.util
import json
import os
import random
import statistics
import sys
import time

import psycopg
from psycopg_pool import ConnectionPool
from id_gen_client import Router

# The slices of the clients' bench (clients/python/tools/conformance.py, run_slices).
_spec = importlib.util.spec_from_file_location(
    "conformance_tool", os.path.join(os.path.dirname(__file__), os.pardir, "clients", "python", "tools", "conformance.py"))
slices = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(slices)

routes_dsn, shards_json, ids_file, owners, seconds, rounds = sys.argv[1:7]
shards = json.loads(shards_json)
ids = [int(x) for x in open(ids_file).read().split()]
owners, seconds, rounds = int(owners), float(seconds), int(rounds)

router = Router(routes_dsn, shards, max_size=2)
router_prepared = Router(routes_dsn, shards, max_size=2, pool_kwargs={"kwargs": {"prepare_threshold": 5}})
AS_THE_ROUTER = {"prepare_threshold": None}  # (the Router's shard connections: nothing prepared)
direct_pools = {name: ConnectionPool(dsn, min_size=1, max_size=2, open=True, kwargs=AS_THE_ROUTER)
                for name, dsn in shards.items()}
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


def execute_on(r):
    def run(op, key, args):
        kw = {"owner": key} if op == "insert" else {"id": key}
        r.execute(INSERT_SHARD if op == "insert" else LOOKUP, args, **kw)
    return run


def autocommit_on(pools):
    def run(op, key, args):
        shard = router.shard_for_owner(key) if op == "insert" else router.shard_for_id(key)
        with pools[shard].connection() as conn:
            cur = conn.execute(INSERT_SHARD if op == "insert" else LOOKUP, args)
            if op == "lookup":
                cur.fetchall()
    return run


auto_pools = {name: ConnectionPool(dsn, min_size=1, max_size=2, open=True, kwargs={"autocommit": True, **AS_THE_ROUTER})
              for name, dsn in shards.items()}
prepared_pools = {name: ConnectionPool(dsn, min_size=1, max_size=2, open=True, kwargs={"autocommit": True})
                  for name, dsn in shards.items()}
# Each path and the direct path with the same shape that it is compared with.
PATHS = {"router": run_router, "coordinator": run_coordinator, "direct": run_direct,
         "router.execute": execute_on(router), "direct autocommit": autocommit_on(auto_pools),
         "router.execute prepared": execute_on(router_prepared), "direct prepared": autocommit_on(prepared_pools)}
BASELINE = {"router": "direct", "coordinator": "direct", "direct": "direct",
            "router.execute": "direct autocommit", "direct autocommit": "direct autocommit",
            "router.execute prepared": "direct prepared", "direct prepared": "direct prepared"}
results = {}  # (op, path) -> list of (tps, p50, p99); the baselines' from the run of each path they face


def side_by_side(op, path, base, rng):
    """Runs path and base in alternating slices (the conformance tool's run_slices: path,
    base, base, path, ...) for 2 * seconds; returns their (tps, p50, p99)."""
    lat = {path: [], base: []}

    def one(side):
        key, args = op_args(op, rng)
        t0 = time.perf_counter()
        PATHS[side](op, key, args)
        lat[side].append(time.perf_counter() - t0)

    measured = slices.run_slices(one, [path, base, base, path], 2 * seconds, clock=time.perf_counter)
    recs = {}
    for side, ls in lat.items():
        ls.sort()
        recs[side] = (measured[side][0] / measured[side][1], ls[len(ls) // 2] * 1000, ls[int(len(ls) * 0.99)] * 1000)
    return recs[path], recs[base]


for op in ("insert", "lookup"):  # warm-up: every path, 0.3 s
    warm_rng = random.Random(0)
    for path in PATHS:
        until = time.perf_counter() + 0.3
        while time.perf_counter() < until:
            PATHS[path](op, *op_args(op, warm_rng))
for r in range(rounds):
    for op in ("insert", "lookup"):
        order = [p for p in PATHS if BASELINE[p] != p]
        order = order[r % len(order):] + order[:r % len(order)]
        for path in order:
            base = BASELINE[path]
            rec, base_rec = side_by_side(op, path, base, random.Random(r * 31 + len(path)))
            results.setdefault((op, path), []).append(rec)
            results.setdefault((op, base, path), []).append(base_rec)
            print(json.dumps({"round": r, "op": op, "path": path, "tps": round(rec[0], 1),
                              "p50_ms": round(rec[1], 3), "p99_ms": round(rec[2], 3),
                              "baseline_tps": round(base_rec[0], 1)}), flush=True)

for op in ("insert", "lookup"):
    for path in PATHS:
        base = BASELINE[path]
        if path == base:  # (its runs against every path that faces it)
            runs = [x for k, recs in results.items() if len(k) == 3 and k[:2] == (op, path) for x in recs]
            print(json.dumps({
                "summary": True, "op": op, "path": path, "baseline": base,
                "tps": round(statistics.median(x[0] for x in runs), 1),
                "p50_ms": round(statistics.median(x[1] for x in runs), 3),
                "p99_ms": round(statistics.median(x[2] for x in runs), 3),
            }), flush=True)
            continue
        runs, base_runs = results[(op, path)], results[(op, base, path)]
        tps_ratio = [a[0] / b[0] for a, b in zip(runs, base_runs)]
        lat_ratio = [a[1] / b[1] for a, b in zip(runs, base_runs)]
        print(json.dumps({
            "summary": True, "op": op, "path": path, "baseline": base,
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
router_prepared.close()
