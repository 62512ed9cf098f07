"""The conformance tool of the Python client (docs/routing-protocol.md §6): the same command
line as every other client's, run by tests/cluster/test_conformance.py.

    conformance genes        owners on stdin (i:<bigint>, t:<text>, u:<uuid>), genes on stdout
    conformance load ...     4 writers through one Router; see --help
    conformance bench ...    one client's transactions or lookups: Router, --direct, or
                             --side-by-side (both in alternating slices)

Invariants: a log line `owner,id` is written (whole, flushed) only after its transaction
committed; every failure is counted, none ends the load; the last two stdout lines are
`reads R empty E unknown U` and `committed N failed M retries X`.
"""
import argparse
import os
import random
import sys
import threading
import time
import uuid

import psycopg
from psycopg_pool import ConnectionPool

from id_gen_client import CommitOutcomeUnknown, Router, gene


def genes() -> int:
    out = []
    for line in sys.stdin:
        line = line.rstrip("\n")
        if not line:
            continue
        kind, value = line[:2], line[2:]
        if kind == "i:":
            out.append(gene(int(value)))
        elif kind == "t:":
            out.append(gene(value))
        elif kind == "u:":
            out.append(gene(uuid.UUID(value)))
        else:
            print(f"conformance genes: a line must start with i:, t: or u:, not {line!r}", file=sys.stderr)
            return 2
    sys.stdout.write("".join(f"{g}\n" for g in out))
    return 0


def non_negative_int(text: str) -> int:
    """An argparse type: a decimal integer 0 or more (a usage error, exit 2, otherwise)."""
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"takes an integer 0 or more, not {text!r}")
    return int(text)


def parse_load(argv, prog="conformance load"):
    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("--routes", required=True)
    p.add_argument("--shard", action="append", required=True, metavar="NAME=DSN")
    p.add_argument("--table", required=True)
    p.add_argument("--sequence", required=True)
    p.add_argument("--owners", type=int, required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--log", required=not prog.endswith("bench"))
    p.add_argument("--stop-file")
    p.add_argument("--read-every", type=int, default=4)
    p.add_argument("--refresh-interval-ms", type=int, default=1000)
    p.add_argument("--no-listen", action="store_true")
    p.add_argument("--retry-limit", type=non_negative_int, default=20, metavar="N",
                   help="the Router's retry_limit (default 20)")
    p.add_argument("--backoff-max-ms", type=non_negative_int, default=200, metavar="MS",
                   help="the Router's backoff_max in ms (default 200)")
    if prog.endswith("bench"):
        p.add_argument("--mode", choices=("tx", "lookup"), required=True)
        p.add_argument("--warm-up-seconds", type=float, default=0.5, metavar="S",
                       help="seconds of warm-up, not measured (default 0.5)")
        sides = p.add_mutually_exclusive_group()
        sides.add_argument("--direct", action="store_true")
        sides.add_argument("--side-by-side", action="store_true")
    args = p.parse_args(argv)
    shards = {}
    for item in args.shard:
        name, sep, dsn = item.partition("=")
        if not sep or not name:
            p.error(f"--shard takes NAME=DSN, not {item!r}")
        shards[name] = dsn
    if args.owners < 1:
        p.error("--owners must be at least 1")
    if prog.endswith("bench") and not 0 <= args.warm_up_seconds <= 3600:
        p.error("--warm-up-seconds takes 0 to 3600 seconds")
    return args, shards


class Load:
    def __init__(self, router, args):
        self.router, self.args = router, args
        self.deadline = time.monotonic() + args.seconds
        self.lock = threading.Lock()
        self.log = open(args.log, "a", buffering=1)
        self.counts = {"committed": 0, "failed": 0, "reads": 0, "empty": 0, "unknown": 0}
        self.insert = (f"INSERT INTO {args.table} (id, owner_id) "
                       f"VALUES (id_gen.gene_order_id(%s::text, %s::bigint), %s) RETURNING id")
        self.read = (f"SELECT count(*) FROM {args.table} "
                     f"WHERE id BETWEEN %s AND %s AND owner_id = %s")

    def done(self):
        return time.monotonic() > self.deadline or (self.args.stop_file and os.path.exists(self.args.stop_file))

    def failed(self, what, e):
        with self.lock:
            self.counts["failed"] += 1
            if isinstance(e, CommitOutcomeUnknown):
                self.counts["unknown"] += 1
            if self.counts["failed"] <= 5:
                print(f"failed {what}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)

    def writer(self, seed):
        rng = random.Random(seed)
        mine = []
        iteration = 0
        while not self.done():
            iteration += 1
            owner = rng.randint(1, self.args.owners)
            try:
                row_id = self.router.transaction(
                    lambda conn: conn.execute(self.insert, (self.args.sequence, owner, owner)).fetchone()[0],
                    owner=owner)
                with self.lock:
                    self.log.write(f"{owner},{row_id}\n")
                    self.counts["committed"] += 1
                mine.append(owner)
            except Exception as e:  # a failed transaction is counted, never fatal
                self.failed("transaction", e)
            every = self.args.read_every
            if every > 0 and iteration % every == 0 and mine:
                self.read_one(rng.choice(mine))

    def read_one(self, owner):
        lo = gene(owner) << 47
        try:
            rows = self.router.execute(self.read, (lo, lo | ((1 << 47) - 1), owner), owner=owner)
            with self.lock:
                self.counts["reads"] += 1
                if rows is None or rows[0][0] == 0:
                    self.counts["empty"] += 1
        except Exception as e:
            self.failed("read", e)


def load(argv) -> int:
    args, shards = parse_load(argv)
    try:
        router = Router(args.routes, shards, max_size=4, listen=not args.no_listen,
                        refresh_interval=args.refresh_interval_ms / 1000.0,
                        retry_limit=args.retry_limit, backoff_max=args.backoff_max_ms / 1000.0)
    except Exception as e:
        print(f"conformance load: the routes could not be read: {e}", file=sys.stderr)
        return 1
    with router:
        run = Load(router, args)
        threads = [threading.Thread(target=run.writer, args=(seed,)) for seed in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        run.log.close()
        s, c = router.stats, run.counts
        retries = s["retries_moved"] + s["retries_fenced"] + s["retries_lost"]
    print(f"reads {c['reads']} empty {c['empty']} unknown {c['unknown']}")
    print(f"committed {c['committed']} failed {c['failed']} retries {retries}", flush=True)
    return 0


def bench(argv) -> int:
    """One client, one operation at a time (docs/routing-protocol.md §6, `bench`)."""
    args, shards = parse_load(argv, "conformance bench")
    router = Router(args.routes, shards, max_size=2, listen=False, refresh_interval=0,
                    retry_limit=args.retry_limit, backoff_max=args.backoff_max_ms / 1000.0)
    pools = {}
    insert = (f"INSERT INTO {args.table} (id, owner_id) "
              f"VALUES (id_gen.gene_order_id(%s::text, %s::bigint), %s) RETURNING id")
    lookup = f"SELECT owner_id FROM {args.table} WHERE id = %s"
    rng = random.Random(7)

    def pool(shard):  # as the Router's shard pools: autocommit, nothing prepared
        if shard not in pools:
            pools[shard] = ConnectionPool(shards[shard], min_size=1, max_size=2, open=True,
                                          kwargs={"autocommit": True, "prepare_threshold": None})
        return pools[shard]

    if args.mode == "lookup":
        with psycopg.connect(args.routes, autocommit=True) as c:
            ids = [r[0] for r in c.execute(f"SELECT id FROM {args.table} LIMIT 1000")]
        if not ids:
            print(f"conformance bench: {args.table} has no rows to look up", file=sys.stderr)
            return 1
    n = 0

    def one(direct):
        nonlocal n
        n += 1
        if args.mode == "tx":
            owner = rng.randint(1, args.owners)
            if direct:
                with pool(router.shard_for_owner(owner)).connection() as conn:
                    conn.pgconn.exec_(b"BEGIN")
                    conn.execute(insert, (args.sequence, owner, owner)).fetchone()
                    conn.pgconn.exec_(b"COMMIT")
            else:
                router.transaction(lambda conn: conn.execute(insert, (args.sequence, owner, owner)).fetchone(),
                                   owner=owner)
        else:
            row_id = ids[n % len(ids)]
            if direct:
                with pool(router.shard_for_id(row_id)).connection() as conn:
                    conn.execute(lookup, (row_id,)).fetchone()
            else:
                router.execute(lookup, (row_id,), id=row_id)

    sides = SIDE_BY_SIDE if args.side_by_side else [args.direct]
    with router:
        try:
            run_slices(one, sides, args.warm_up_seconds)
            measured = run_slices(one, sides, args.seconds)
        finally:
            for p in pools.values():
                p.close()
    if args.side_by_side:
        (r_ops, r_s), (d_ops, d_s) = measured[False], measured[True]
        print(f"ops {r_ops} seconds {r_s:.3f} direct_ops {d_ops} direct_seconds {d_s:.3f}", flush=True)
    else:
        ops, elapsed = measured[args.direct]
        print(f"ops {ops} seconds {elapsed:.3f}", flush=True)
    return 0


SLICE_SECONDS = 0.1
# The sides of the slices in turn, side by side (False: the Router, True: the direct pools):
# Router, direct, direct, Router, so that a drift of the machine weighs on both alike.
SIDE_BY_SIDE = [False, True, True, False]


def run_slices(one, sides, seconds, clock=time.monotonic):
    """Runs one(side) for `seconds` in slices of SLICE_SECONDS, the slices' sides in the cyclic
    order of `sides`, and at least one slice of each of them; returns {side: (operations,
    seconds)}, each side's seconds from the starts of its slices to the ends of their last
    operations."""
    measured = {side: (0, 0.0) for side in sides}
    end = clock() + seconds
    i = 0
    while (now := clock()) < end or i < len(sides):
        side = sides[i % len(sides)]
        i += 1
        slice_end, ops = min(now + SLICE_SECONDS, end), 0
        while True:
            one(side)
            ops += 1
            if (t := clock()) >= slice_end:
                break
        done, spent = measured[side]
        measured[side] = (done + ops, spent + t - now)
    return measured


def main(argv) -> int:
    if argv[:1] == ["genes"]:
        return genes()
    if argv[:1] == ["load"]:
        return load(argv[1:])
    if argv[:1] == ["bench"]:
        return bench(argv[1:])
    print("usage: conformance genes | conformance load --routes DSN --shard NAME=DSN ... --table T "
          "--sequence Q --owners N --seconds S --log FILE [--retry-limit N] [--backoff-max-ms MS] ...",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
