"""A shard's failover under load, with pg_auto_failover (issue 29; docs/guide/scale-out.md
"A shard's failover"). PostgreSQL 15 only: Debian packages pg_auto_failover for the server of
bookworm (scripts/common.sh installs it there).

shard_2 is a formation (formation.py): a monitor, a primary s1 and a synchronous secondary
s2, run by pg_autoctl as the postgres OS user on loopback; shard_1 is a plain server. The
coordinator (the segment authority of 'orders') routes genes 0 .. 32767 to shard_1 and the
rest to shard_2, and reaches shard_2 by a foreign server with host '127.0.0.1,127.0.0.1' port
's1,s2' target_session_attrs 'read-write'. (The formation starts after the other servers:
its members connect to each other often, and should IDG_CLUSTER_PORT put the module's ports
in Linux's ephemeral range, such a connection could hold the port of a server started
later; see conftest.py.) The load, on owners 1 .. 1000 of both shards:
  - the five clients' conformance tools (client_loads; 4 writers each through its Router,
    reads of owners written by their id range), shard_2's DSN the same multi-host one;
    their retries span the failover (--retry-limit 200, --backoff-max-ms 500);
  - two writers through the coordinator (INSERT INTO orders, routed by postgres_fdw), which
    retry what failed before their COMMIT and count a failed COMMIT as outcome unknown.
A sampler stamps every committed row as it appears in the logs (every 50 ms), to report the
longest pause each writer saw on shard_2.

(a) the formation and the shards: s2 replicates synchronously, inherited id_gen and the
    distributed tables; the route versions agree;
(b) every writer commits on both shards before anything fails;
(c) commits in flight, then the primary's host dies: s2's WAL receiver is stopped
    (SIGSTOP) until writers wait on SyncRep on s1; s1's keeper, postmaster and backends are
    killed (-9), the receiver resumes; the monitor promotes s2 by itself; every writer
    commits on shard_2 again, nobody re-points anything;
(d) after the load: the only failures are "commit outcome unknown" (at least one, and at
    most one per writer: the commits in flight at the kill), no read was empty, every committed row is there (0 lost), at most
    as many rows are there unlogged as outcomes were unknown, no id twice; the promoted
    shard has the coordinator's route version and refuses a gene it does not own (IG001).

Reported: the monitor's events, the failover's timing, per writer its transactions,
outcomes unknown, retries and the longest pause on shard_2.
"""
import os
import signal
import threading
import time

import pytest

from client_loads import CLIENTS, Loads, build_tools, table, tcp_dsn
from formation import AVAILABLE, MISSING, Formation
from harness import RetryingWriter, coordinator_with_shards, poll_until, report

if not AVAILABLE:
    pytest.skip(MISSING, allow_module_level=True)

S = {}
TCP = ["listen_addresses = '127.0.0.1'", "max_connections = 60"]
FORMATION_FIRST_GENE = 32768  # shard_2's genes
COORDINATOR_WRITERS = 2
WRITERS = 4 * len(CLIENTS) + COORDINATOR_WRITERS  # (each tool runs 4)
# Retries that outlast the failover (about 8 s here): up to 200, waiting up to 500 ms each.
RETRIES = ("--retry-limit", "200", "--backoff-max-ms", "500")
SAMPLE_SECONDS = 0.05  # (the sampler's pace, not a wait for a state)


def on_formation(row_id):
    return row_id >> 47 >= FORMATION_FIRST_GENE


@pytest.fixture(scope="module", autouse=True)
def servers(cluster, tmp_path_factory):
    build_tools()
    f = S["f"] = Formation(os.path.join(cluster.root, "formation"), cluster.port_base + 10, members=("s1", "s2"))
    ports = f"{f['s1'].port},{f['s2'].port}"

    def the_formation():
        f.start("shared_preload_libraries = 'id_gen'", "max_worker_processes = 16", "max_connections = 60")
        return f["s1"], f"host '127.0.0.1,127.0.0.1', port '{ports}', target_session_attrs 'read-write'"
    try:
        tables = [f"CREATE TABLE {table(lang)} (id bigint PRIMARY KEY, owner_id bigint NOT NULL);" for lang in CLIENTS]
        c, shards = coordinator_with_shards(
            cluster, coordinator_conf=TCP, shard_conf=TCP, tables=tables,
            distribute=[f"'{table(lang)}', 'id', 'owner_id', 'orders'" for lang in CLIENTS],
            given_shards={2: the_formation})
        S.update(c=c, work=tmp_path_factory.mktemp("shard_failover"),
                 shards={"shard_1": tcp_dsn(shards[1]),
                         "shard_2": f"host=127.0.0.1,127.0.0.1 port={ports} user=postgres dbname=postgres "
                                    "target_session_attrs=read-write connect_timeout=2"})
        yield
    finally:
        if S.get("stop_load"):  # (what a test that failed left running)
            S["stop_load"]()
            S["loads"].kill()
            for w in S["coordinator"]:
                w.thread.join(30)
        f.stop()


class Sampler:
    """Every SAMPLE_SECONDS, the new lines of each tool's log, stamped with the time they
    were seen: {language: [(time, owner, id)]}."""

    def __init__(self, loads):
        self.loads, self.seen = loads, {lang: [] for lang in CLIENTS}
        self.offsets, self.partial = {lang: 0 for lang in CLIENTS}, {lang: "" for lang in CLIENTS}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.done.is_set():
            self._sample()
            self.done.wait(SAMPLE_SECONDS)
        self._sample()

    def _sample(self):
        now = time.monotonic()
        for lang in CLIENTS:
            try:
                with open(self.loads.log(lang)) as log:
                    log.seek(self.offsets[lang])
                    text = log.read()
                    self.offsets[lang] = log.tell()
            except FileNotFoundError:
                continue
            *lines, self.partial[lang] = (self.partial[lang] + text).split("\n")
            for line in lines:
                owner, row_id = line.split(",")
                self.seen[lang].append((now, int(owner), int(row_id)))

    def stop(self):
        self.done.set()
        self.thread.join(30)


def formation_commits(stamped, since=0.0):
    return sum(1 for t, _, row_id in stamped if t > since and on_formation(row_id))


def longest_pause(stamped, t0, t1):
    """The longest time between two commits on shard_2 among `stamped`, over [t0, t1]."""
    times = [t0] + sorted(t for t, _, row_id in stamped if t0 <= t <= t1 and on_formation(row_id)) + [t1]
    return max(b - a for a, b in zip(times, times[1:]))


def writers():
    """Every writer's committed rows so far: {name: [(time, owner, id)]}."""
    out = {lang: S["sampler"].seen[lang] for lang in CLIENTS}
    for i, w in enumerate(S["coordinator"]):
        out[f"coordinator {i + 1}"] = w.rows
    return out


def each_commits_on_formation(what, since, n=20):
    for name in writers():
        poll_until(f"{name} commits {n} rows on shard_2 {what}", lambda nm=name: formation_commits(writers()[nm], since),
                   lambda k: k >= n, 120)
    for lang in CLIENTS:
        S["loads"].alive_count(lang)


def test_a_the_formation_is_shard_2():
    f, c = S["f"], S["c"]
    assert f["s2"].one("SELECT current_setting('shared_preload_libraries') || ' ' || pg_is_in_recovery()") == "id_gen true", \
        "s2 is a standby with id_gen"
    poll_until("s2 replayed the distributed tables", lambda: f["s2"].one(
        f"SELECT count(*) FROM pg_class WHERE relname IN ({', '.join(repr(table(lang)) for lang in CLIENTS)})"),
        len(CLIENTS), 30)
    version = c.one("SELECT version FROM id_gen.route_state")
    poll_until(f"shard_2 was pushed the route version {version}",
               lambda: f["s1"].one("SELECT version FROM id_gen.shard_route_state"), version, 30)


def test_b_every_writer_commits_on_both_shards():
    loads = S["loads"] = Loads(S["work"] / "load", tcp_dsn(S["c"]), S["shards"], *RETRIES)
    S["sampler"] = Sampler(loads)
    S["coordinator"] = [RetryingWriter(S["c"], range(1, 1001), seed) for seed in range(COORDINATOR_WRITERS)]

    def stop_load():
        for w in S["coordinator"]:
            w.done.set()
        S["sampler"].done.set()
        loads.stop_file.touch()
    S["stop_load"] = stop_load
    each_commits_on_formation("before anything fails", 0.0)
    for name, rows in writers().items():
        assert len(rows) > formation_commits(rows), f"{name} commits on shard_1 too"
    for w in S["coordinator"]:
        assert w.unknown == [] and w.retried == {}, f"nothing failed before the failover: {w.unknown} {w.retried}"


def test_c_commits_in_flight_then_the_primary_host_dies():
    f = S["f"]
    receiver = f["s2"].one("SELECT pid FROM pg_stat_wal_receiver")
    assert receiver is not None, "s2 streams from s1"
    os.kill(receiver, signal.SIGSTOP)
    try:
        # (Each writer soon commits on shard_2 and waits there; three in four of them.)
        waiting = poll_until("writers wait on SyncRep on s1 (s2's WAL receiver is stopped)", lambda: f["s1"].one(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"), lambda n: n >= 3 * WRITERS // 4, 30)
        t_kill, t_kill_db = time.monotonic(), S["c"].one("SELECT clock_timestamp()::text")
        f.kill_host("s1")
    finally:
        os.kill(receiver, signal.SIGCONT)
    report(f"shard failover: {waiting} commits waited on SyncRep on s1 when its host died")
    poll_until("the monitor promotes s2 by itself (out of recovery)", lambda: f["s2"].one("SELECT pg_is_in_recovery()"),
               False, 60)
    poll_until("s2 takes writes (wait_primary or primary)", lambda: f.state("s2"),
               lambda s: s in ("wait_primary", "primary"), 60)
    t_writes = f.took_writes_at("s2", t_kill_db)
    report("shard failover, the monitor's events after the kill:", *[f"  {e}" for e in f.events_since(t_kill_db)],
           f"shard failover: s2 reported wait_primary (takes writes) "
           f"{S['c'].one(f'''SELECT round(extract(epoch FROM '{t_writes}'::timestamptz - '{t_kill_db}')::numeric, 1)''')} s "
           "after the kill")
    each_commits_on_formation("after the failover", time.monotonic())
    S["kill"] = (t_kill, time.monotonic())


def test_d_nothing_lost_nothing_twice_only_outcomes_unknown():
    c, f = S["c"], S["f"]
    S["stop_load"]()
    for w in S["coordinator"]:
        w.stop()
    results = S["loads"].stop()
    S["sampler"].stop()
    t_kill, t_end = S["kill"]
    figures = []
    unknown_total = 0
    all_ids = []
    for lang, r in results.items():
        assert r["failed"] == r["unknown"] and r["empty"] == 0 and r["reads"] > 0, \
            f"{lang}: only 'commit outcome unknown' may fail, no read is empty: {r}"
        rows = {(o, i) for o, i in c.execute(f"SELECT owner_id, id FROM {table(lang)}")}
        logged = S["loads"].logged_rows(lang)
        assert len(logged) == r["committed"], f"{lang} logged {len(logged)} of {r['committed']} commits"
        assert logged <= rows, f"{lang}: {len(logged - rows)} committed rows lost, e.g. {sorted(logged - rows)[:3]}"
        assert len(rows - logged) <= r["unknown"], f"{lang}: {len(rows - logged)} rows unlogged, {r['unknown']} unknown"
        unknown_total += r["unknown"]
        all_ids += [i for _, i in rows]
        figures.append(f"{lang} {r['committed']} tx, {r['unknown']} outcome unknown, {r['retries']} retries, "
                       f"longest pause on shard_2 {longest_pause(S['sampler'].seen[lang], t_kill, t_end):.2f} s")
    coordinator_rows = {(o, i) for o, i in c.execute("SELECT owner_id, id FROM orders")}
    for i, w in enumerate(S["coordinator"]):
        logged = {(o, row_id) for _, o, row_id in w.rows}
        assert w.failed == [] and logged <= coordinator_rows, \
            f"coordinator writer {i + 1}: nothing failed ({w.failed}), no committed row lost ({len(logged - coordinator_rows)})"
        for u in w.unknown:
            assert "remote SQL command: COMMIT TRANSACTION" in u, f"a coordinator COMMIT failed on the shard's COMMIT: {u}"
        assert all(k.startswith("08") for k in w.retried), \
            f"coordinator writer {i + 1}: what failed before COMMIT is a lost or refused shard connection: {w.retried}"
        unknown_total += len(w.unknown)
        figures.append(f"coordinator {i + 1} {len(w.rows)} tx, {len(w.unknown)} outcome unknown, "
                       f"{sum(w.retried.values())} retries before COMMIT ({', '.join(sorted(w.retried)) or 'none'}), "
                       f"longest pause on shard_2 {longest_pause(w.rows, t_kill, t_end):.2f} s")
    logged_coordinator = {(o, row_id) for w in S["coordinator"] for _, o, row_id in w.rows}
    unknown_coordinator = sum(len(w.unknown) for w in S["coordinator"])
    assert len(coordinator_rows - logged_coordinator) <= unknown_coordinator, \
        f"coordinator: {len(coordinator_rows - logged_coordinator)} rows unlogged, {unknown_coordinator} unknown"
    all_ids += [i for _, i in coordinator_rows]
    assert len(all_ids) == len(set(all_ids)), "no id twice across the tables and shards"
    # Each writer had at most one commit in flight when s1 died; none may be lost later.
    assert 1 <= unknown_total <= WRITERS, \
        f"the commits in flight when s1 died, and only those, surfaced as 'commit outcome unknown' ({unknown_total})"
    report("shard failover under load: " + "; ".join(figures))
    # The promoted shard is shard_2: the coordinator's routes, and its guard.
    assert f["s2"].one("SELECT version FROM id_gen.shard_route_state") == c.one("SELECT version FROM id_gen.route_state"), \
        "the promoted s2 has the coordinator's route version"
    foreign = c.one("SELECT id_gen.compose_id(1000, 1)")
    assert f["s2"].sqlstate(f"INSERT INTO orders (id, owner_id) VALUES ({foreign}, 1)") == "IG001", \
        "the promoted s2 refuses a gene of shard_1"
