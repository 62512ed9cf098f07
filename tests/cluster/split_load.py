"""Load for tests/cluster/test_split.py: writers through the coordinator and directly on a shard,
inside and outside the route range being split, each logging every transaction.

  split_load.py run --coord DSN --shard DSN --inside O,.. --outside O,.. --shard-outside O,.. --stop FILE --log FILE
      runs until FILE exists; one thread per (path, class); a transaction inserts a row
      for an owner (60 %) or adds to the amount of a row it inserted before (40 %).
      (A fifth of the transactions after the first read back a row the client wrote, by id,
      which must be found.) Each line of the log: start (epoch s), latency ms, class, path
      (with /read for reads), owner, rows, amount, ok.
  split_load.py check --coord DSN --log FILE --window T0,T1
      compares the rows per owner (count, sum of amount) with the log, prints latency
      p50/p99/max of writes and reads inside and outside the range for transactions that
      overlap the window,
      and exits 1 on a failed transaction or a mismatch.
"""
import argparse
import random
import sys
import threading
import time

import psycopg


class LostRow(Exception):
    """A point read did not find a row its client had committed."""


def writer(dsn, path, cls, owners, stop_file, out, lock, direct):
    rng = random.Random(hash((path, cls)))
    mine = []
    conn = psycopg.connect(dsn, autocommit=True)
    import os
    while not os.path.exists(stop_file):
        owner = rng.choice(owners)
        t0 = time.time()
        read = False
        try:
            if mine and rng.random() < 0.2:
                # A point read by id of a row this client wrote: it must be found.
                row_id, row_owner = rng.choice(mine)
                read = True
                found = conn.execute("SELECT count(*) FROM orders WHERE id = %s", (row_id,)).fetchone()[0]
                owner, rows, amount = row_owner, 0, 0
                if found != 1:
                    raise LostRow(f"row {row_id} not found")
            elif mine and rng.random() < 0.5:
                row_id, row_owner = rng.choice(mine)
                delta = rng.randint(1, 9)
                conn.execute("UPDATE orders SET amount = amount + %s WHERE id = %s", (delta, row_id))
                owner, rows, amount = row_owner, 0, delta
            else:
                amount = rng.randint(1, 9)
                if direct:
                    cur = conn.execute(
                        "INSERT INTO orders (id, owner_id, amount) "
                        "VALUES (id_gen.gene_order_id('orders', %s::bigint), %s, %s) RETURNING id",
                        (owner, owner, amount))
                else:
                    cur = conn.execute("INSERT INTO orders (owner_id, amount) VALUES (%s, %s) RETURNING id",
                                       (owner, amount))
                mine.append((cur.fetchone()[0], owner))
                rows = 1
            ok = "ok"
        except LostRow:
            rows, amount, ok = 0, 0, "lost"
        except psycopg.Error as e:
            rows, amount, ok = 0, 0, (e.sqlstate or "?")
            conn.close()
            conn = psycopg.connect(dsn, autocommit=True)
        ms = (time.time() - t0) * 1000
        with lock:
            out.write(f"{t0:.6f},{ms:.3f},{cls},{path}{'/read' if read else ''},{owner},{rows},{amount},{ok}\n")
            out.flush()  # the test polls the log for progress
    conn.close()


def run(a):
    lock = threading.Lock()
    inside = [int(x) for x in a.inside.split(",")]
    outside = [int(x) for x in a.outside.split(",")]
    paths = [(a.coord, "coordinator", False, outside)]
    if a.shard:
        paths.append((a.shard, "shard", True, [int(x) for x in a.shard_outside.split(",")]))
    with open(a.log, "w") as out:
        threads = [threading.Thread(target=writer, args=(dsn, path, cls, owners, a.stop, out, lock, direct))
                   for (dsn, path, direct, outs) in paths
                   for (cls, owners) in (("inside", inside), ("outside", outs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def pct(xs, p):
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def check(a):
    t0, t1 = (float(x) for x in a.window.split(","))
    want = {}
    lat = {"inside": [], "outside": [], "inside/read": [], "outside/read": []}
    failed = []
    starts = []
    n = 0
    for line in open(a.log):
        start, ms, cls, path, owner, rows, amount, ok = line.strip().split(",")
        n += 1
        if ok != "ok":
            failed.append(line.strip())
            continue
        c, s = want.get(int(owner), (0, 0))
        want[int(owner)] = (c + int(rows), s + int(amount))
        start, ms = float(start), float(ms)
        starts.append(start)
        if start <= t1 and start + ms / 1000 >= t0:
            lat[cls + ("/read" if path.endswith("/read") else "")].append(ms)
    with psycopg.connect(a.coord, autocommit=True) as conn:
        got = {o: (c, s) for o, c, s in conn.execute(
            "SELECT owner_id, count(*), sum(amount) FROM orders WHERE owner_id = ANY(%s) GROUP BY 1",
            (list(want),))}
    bad = [(o, want[o], got.get(o)) for o in want if want[o] != got.get(o, (0, 0))]
    before = sum(1 for st in starts if t0 - 2.5 <= st < t0) / 2.5
    during = sum(1 for st in starts if t0 <= st < t1) / max(t1 - t0, 1e-9)
    print(f"committed transactions per second: {before:.0f} in the 2.5 s before the split, {during:.0f} during it "
          f"({during / before if before else 0:.2f} x)")
    for cls in ("inside", "outside", "inside/read", "outside/read"):
        xs = lat[cls]
        what = "reads" if cls.endswith("/read") else "writes"
        print(f"{cls.split('/')[0]} {what}: {len(xs)} during the split, latency p50 {pct(xs, 50):.1f} ms, "
              f"p99 {pct(xs, 99):.1f} ms, max {max(xs, default=0):.1f} ms")
        print(f"max_{cls.replace('/', '_')}_ms={max(xs, default=0):.0f}")
    print(f"transactions={n} failed={len(failed)} owners={len(want)} mismatched={len(bad)}")
    for line in failed[:5]:
        print("failed:", line)
    for b in bad[:5]:
        print("mismatch (owner, log, table):", b)
    return 1 if failed or bad else 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["run", "check"])
    p.add_argument("--coord", required=True)
    p.add_argument("--shard", help="also write directly on this shard (omit: through the coordinator only)")
    p.add_argument("--inside")
    p.add_argument("--outside")
    p.add_argument("--shard-outside", help="owners outside the range that the shard holds (direct writers)")
    p.add_argument("--stop")
    p.add_argument("--log", required=True)
    p.add_argument("--window")
    a = p.parse_args()
    if a.mode == "run":
        run(a)
        return 0
    return check(a)


if __name__ == "__main__":
    sys.exit(main())
