"""Load generator of tests/cluster/test_routing.py: clients that route by themselves through
id_gen_client.Router (no coordinator in the data path) while genes move and ranges split.

Writers insert rows (ids from gene_order_id on the owning shard) and update rows they
wrote, for owners spread over every gene; readers keep reading a fixed set of owners by
their id range and must never get an empty answer (each has rows before the load starts).
Every committed transaction is logged per owner (rows, amount), so the test can compare
the shards' rows with it. Prints one JSON document at the end.

Usage: routing_load.py ROUTES_DSN SHARDS_JSON OWNERS_FILE READERS_FILE SECONDS STOP_FILE
(the load ends after SECONDS or when STOP_FILE exists).
"""
import json
import os
import random
import sys
import threading
import time

import psycopg
from id_gen_client import Router

routes_dsn, shards_json, owners_file, readers_file, seconds, stop_file = sys.argv[1:7]
shards = json.loads(shards_json)
owners = [int(x) for x in open(owners_file).read().split()]
readers = [int(x) for x in open(readers_file).read().split()]
deadline = time.time() + float(seconds)
lock = threading.Lock()
log = {}  # owner -> [rows, amount]
stats = {"committed": 0, "failed": 0, "reads": 0, "empty_reads": 0, "errors": {}}
latencies = []


def done():
    return time.time() > deadline or os.path.exists(stop_file)


def record(owner, rows, amount):
    with lock:
        entry = log.setdefault(owner, [0, 0])
        entry[0] += rows
        entry[1] += amount
        stats["committed"] += 1


def failed(e):
    with lock:
        stats["failed"] += 1
        key = getattr(e, "sqlstate", None) or type(e).__name__
        stats["errors"][key] = stats["errors"].get(key, 0) + 1
        if stats["failed"] <= 5:
            print(f"failed transaction: {e!r}", file=sys.stderr)


def writer(router, seed):
    rng = random.Random(seed)
    mine = []
    while not done():
        owner = rng.choice(owners)
        t0 = time.perf_counter()
        try:
            if mine and rng.random() < 0.4:
                row_id, row_owner = rng.choice(mine)
                delta = rng.randint(1, 9)
                with router.claim(id=row_id) as conn:
                    n = conn.execute("UPDATE orders SET amount = amount + %s WHERE id = %s", (delta, row_id)).rowcount
                if n != 1:
                    raise RuntimeError(f"row {row_id} not found for an update")
                record(row_owner, 0, delta)
            else:
                amount = rng.randint(1, 9)
                with router.claim(owner=owner) as conn:
                    row_id = conn.execute(
                        "INSERT INTO orders (id, owner_id, amount) "
                        "VALUES (id_gen.gene_order_id('orders', %s::bigint), %s, %s) RETURNING id",
                        (owner, owner, amount)).fetchone()[0]
                mine.append((row_id, owner))
                record(owner, 1, amount)
            with lock:
                latencies.append(time.perf_counter() - t0)
        except Exception as e:  # any failure is a failed transaction
            failed(e)


def reader(router, seed):
    rng = random.Random(seed)
    while not done():
        owner = rng.choice(readers)
        g = router.gene(owner)
        try:
            with router.claim(owner=owner) as conn:
                n = conn.execute(
                    "SELECT count(*) FROM orders WHERE id BETWEEN %s AND %s AND owner_id = %s",
                    (g << 47, (g << 47) | ((1 << 47) - 1), owner)).fetchone()[0]
            with lock:
                stats["reads"] += 1
                if n == 0:
                    stats["empty_reads"] += 1
        except Exception as e:
            failed(e)


# (IDG_POOL_KWARGS: the shard pools' arguments as JSON, e.g. psycopg's prepare_threshold
# turned off behind a transaction-mode pooler: test_pooler.py)
with Router(routes_dsn, shards, max_size=6, pool_kwargs=json.loads(os.environ.get("IDG_POOL_KWARGS", "{}"))) as router:
    # Every reader owner has rows before the load starts.
    for o in readers:
        amount = 5
        with router.claim(owner=o) as conn:
            conn.execute("INSERT INTO orders (id, owner_id, amount) "
                         "VALUES (id_gen.gene_order_id('orders', %s::bigint), %s, %s)", (o, o, amount))
        record(o, 1, amount)
    print("ready", file=sys.stderr, flush=True)
    threads = [threading.Thread(target=writer, args=(router, i)) for i in range(4)]
    threads += [threading.Thread(target=reader, args=(router, 100 + i)) for i in range(2)]
    start = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.time() - start
    latencies.sort()
    pct = lambda p: round(latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000, 2) if latencies else None
    print(json.dumps({
        **stats,
        "seconds": round(elapsed, 1),
        "p50_ms": pct(0.5), "p99_ms": pct(0.99), "max_ms": pct(1.0) if latencies else None,
        "router": dict(router.stats),
        "version": router.version,
        "log": {str(k): v for k, v in log.items()},
    }))
