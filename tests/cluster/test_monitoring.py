"""Monitoring (issue 29; docs/operations.md "Monitoring"): Debian's prometheus-postgres-exporter
(0.11) scrapes, with monitoring/postgres_exporter.yml and as a role in pg_monitor, a
coordinator (the authority of sequence 'orders' and the keeper of the order-number keys) and
two shards whose 'orders' reserves its segments there.

(a) after known actions (values taken on shard_1, a split on the coordinator, two
    order-number keys, the routes pushed), every metric of the file is exported, with the
    values the catalog and id_gen.status show (the split's check before its swap equal; the
    move supervisor's passes counted, none failed); each metric's HELP and TYPE, as scraped and as
    id_gen.metrics has them on every node, are those of the file.
(b) a shard down during a route change: on the coordinator its push fails (route_push_error
    1, lag_versions 1) while the other shard's is up to date; back up, its lag returns to 0.
(c) the authority down: shard_1's refills of 'orders' fail (authority_up 0,
    sequence_refill_failing 1, the failed reservations and the one call that timed out
    counted); the authority back, both return to 1 and 0.
(d) a role outside pg_monitor may read none of it (42501).
(e) cost: a database with 1,000 sequences (each cached) and 64 shards: each family's query
    and the whole view timed on the server, and the exporter's scrape of it (reported).
(f) a move's write fence held (the target applies the fence's marker only when the test lets
    it): id_gen_operation_fence_up_seconds shows the move, its source and a growing age, with
    the file's HELP and TYPE and as id_gen.metrics has it; the fence let go, the move
    completes and the series goes. (It is the one metric of the file that (a) finds without a
    series: no fence is up then.)
"""
import os
import re
import signal
import statistics
import subprocess
import time
import urllib.request

import psycopg
import pytest
import yaml

from harness import LOGICAL, Background, coordinator_with_shards, poll_until, report

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
QUERIES = os.path.join(REPO, "monitoring", "postgres_exporter.yml")
EXPORTER = "prometheus-postgres-exporter"
S = {}
WHILE_A_FENCE_IS_UP = ("id_gen_operation_fence_up_seconds",)
LOCK = 730002  # the advisory lock the target's first fence marker waits on while the test holds it


def file_metrics():
    """{metric: (type, help)} of the exporter's queries file."""
    out = {}
    for name, q in yaml.safe_load(open(QUERIES)).items():
        for column in q["metrics"]:
            (col, spec), = column.items()
            if spec["usage"] != "LABEL":
                out[f"{name}_{col}"] = (spec["usage"].lower(), spec["description"])
    return out


class Exporter:
    """The exporter on 127.0.0.1:port over the DSNs given, its log in `directory`; stopped
    by stop() (its process group)."""

    def __init__(self, directory, port, dsns):
        os.makedirs(directory, exist_ok=True)
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.log = os.path.join(directory, "exporter.log")
        env = dict(os.environ, DATA_SOURCE_NAME=",".join(dsns))
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [EXPORTER, f"--web.listen-address=127.0.0.1:{port}", f"--extend.query-path={QUERIES}",
                 "--disable-default-metrics", "--disable-settings-metrics",
                 "--no-collector.database", "--no-collector.bgwriter"],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        poll_until("the exporter answers", lambda: self.scrape() is not None, True, timeout=30)

    def scrape(self):
        """The samples {(name, frozenset(labels)): value}, and HELP and TYPE by name."""
        if self.proc.poll() is not None:
            raise AssertionError(f"the exporter ended ({self.proc.returncode}): {open(self.log).read()[-2000:]}")
        with urllib.request.urlopen(self.url, timeout=20) as r:
            text = r.read().decode()
        samples, helps, types = {}, {}, {}
        for line in text.splitlines():
            if line.startswith("# HELP "):
                name, _, help_text = line[7:].partition(" ")
                helps[name] = help_text.replace("\\\\", "\\").replace("\\n", "\n")
            elif line.startswith("# TYPE "):
                name, _, kind = line[7:].partition(" ")
                types[name] = kind
            elif line and not line.startswith("#"):
                m = re.fullmatch(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)', line)
                assert m, f"a line the exporter wrote: {line!r}"
                labels = frozenset(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m[2] or ""))
                samples[(m[1], labels)] = float(m[3])
        return samples, helps, types

    def values(self, name, **labels):
        """The values of the series of `name` whose labels include `labels`."""
        samples, _, _ = self.scrape()
        want = set(labels.items())
        return [v for (n, ls), v in samples.items() if n == name and want <= set(ls)]

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


def server_label(node):
    """The exporter's `server` label of a node (host:port of its DSN)."""
    return f"{node.dir}:{node.port}"


@pytest.fixture(scope="module", autouse=True)
def servers(cluster):
    kek = os.path.join(cluster.root, "kek.hex")
    os.makedirs(cluster.root, exist_ok=True)
    with open(kek, "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    subprocess.run(["chown", "postgres:postgres", kek], check=True)
    os.chmod(kek, 0o400)
    c, shards = coordinator_with_shards(
        cluster, coordinator_conf=[f"id_gen.order_no_kek_file = '{kek}'", "id_gen.max_sequences = 2048"],
        shard_conf=LOGICAL)
    nodes = {"coordinator": c, "shard_1": shards[1], "shard_2": shards[2]}
    for n in nodes.values():
        n.execute("CREATE ROLE exporter LOGIN IN ROLE pg_monitor", "CREATE ROLE outsider LOGIN")
    exporter = Exporter(os.path.join(cluster.root, "exporter"), cluster.port_base + 19,
                        [f"host={n.dir} port={n.port} user=exporter dbname=postgres sslmode=disable"
                         for n in nodes.values()])
    S.update(c=c, s1=shards[1], s2=shards[2], nodes=nodes, exporter=exporter, cluster=cluster)
    try:
        yield
    finally:
        exporter.stop()


def test_a_every_metric_is_exported_with_the_catalogs_values():
    c, s1, e = S["c"], S["s1"], S["exporter"]
    s1.execute("SELECT id_gen.next_segment_id('orders') FROM generate_series(1, 3000)")
    c.execute("SELECT id_gen.create_order_no_key('v1')", "SELECT id_gen.create_order_no_key('v2')")
    c.execute("CALL id_gen.split_route(8191)")
    version = c.one("SELECT version FROM id_gen.route_state")
    for shard in ("shard_1", "shard_2"):
        poll_until(f"{shard} pushed the route version {version}",
                   lambda: e.values("id_gen_route_push_lag_versions", shard=shard), [0.0], timeout=60)
    # The sequence on shard_1, as its catalog and id_gen.status say, once its worker is idle.
    s1l = server_label(s1)

    def sequence_as_scraped():
        got = {m: e.values(f"id_gen_sequence_{m}", server=s1l, sequence="orders")
               for m in ("id_space_used", "refills_total", "step", "calls_total")}
        row = s1.execute("SELECT s.max_id, st.step, c.refills, c.calls FROM id_gen.sequences s, id_gen.status st, "
                         "(SELECT sum(refills) AS refills, sum(calls) AS calls FROM id_gen.cache_status() "
                         " WHERE sequence = 'orders') c WHERE s.name = 'orders' AND st.sequence = 'orders'")[0]
        return got, row
    got, row = poll_until("shard_1's orders as scraped and as its catalog and cache say", sequence_as_scraped,
                          lambda v: (v[0]["id_space_used"], v[0]["refills_total"], v[0]["calls_total"])
                          == ([float(v[1][0])], [float(v[1][2])], [float(v[1][3])]), timeout=30)
    assert got["step"] == [float(row[1])], f"the step as id_gen.status shows it: {got}, {row}"
    assert got["refills_total"][0] >= 1, f"3000 values took refills: {got}"
    assert got["calls_total"][0] >= 3000 - 64, f"values taken (counted in batches of 64): {got}"
    ratio = e.values("id_gen_sequence_id_space_used_ratio", server=s1l, sequence="orders")
    assert ratio == [pytest.approx(row[0] / (2 ** 47 - 1))], f"the share of the 47-bit space: {ratio}"
    assert e.values("id_gen_authority_up", server=s1l, authority="central") == [1.0]
    round_trip = e.values("id_gen_authority_round_trip_seconds", server=s1l, authority="central")
    assert len(round_trip) == 1 and 0 < round_trip[0] < 5, f"the authority's last round trip: {round_trip}"
    assert (e.values("id_gen_authority_errors_total", server=s1l, authority="central"),
            e.values("id_gen_sequence_authority_errors_total", server=s1l, sequence="orders"),
            e.values("id_gen_sequence_wait_timeouts_total", server=s1l, sequence="orders")) == ([0.0], [0.0], [0.0]), \
        "no reservation failed, no call timed out"
    cl = server_label(c)
    assert sorted(e.values("id_gen_order_no_key_current", server=cl)) == [0.0, 1.0]
    current = c.one("SELECT key_version FROM id_gen.order_no_key_store WHERE is_current")
    assert e.values("id_gen_order_no_key_current", server=cl, key_version=str(current)) == [1.0], \
        f"key version {current} is the current one"
    split = c.one("SELECT operation_id FROM id_gen.operations WHERE kind = 'split' AND phase = 'done'")
    assert e.values("id_gen_operation_phase_info", server=cl, operation_id=str(split), phase="done") == [1.0]
    assert e.values("id_gen_operation_progress_ratio", server=cl, operation_id=str(split)) == [1.0]
    fence = e.values("id_gen_operation_fence_seconds", server=cl, operation_id=str(split))
    assert len(fence) == 1 and 0 < fence[0] < 60, f"the split's fence, as recorded: {fence}"
    assert e.values("id_gen_operation_check_info", server=cl, operation_id=str(split), state="equal") == [1.0], \
        "the split's check before its swap found its new tables equal"
    # The move supervisor (every 2 s): passes counted, none failed, the last one just now.
    poll_until("the move supervisor's passes are counted", lambda: e.values("id_gen_supervisor_passes_total", server=cl),
               lambda v: len(v) == 1 and v[0] >= 2, timeout=30)
    assert e.values("id_gen_supervisor_failed_passes_total", server=cl) == [0.0], "no pass of the supervisor failed"
    last_pass = e.values("id_gen_supervisor_last_pass_timestamp_seconds", server=cl)
    assert len(last_pass) == 1 and abs(time.time() - last_pass[0]) < 30, f"its last pass ended just now: {last_pass}"
    last_failure = e.values("id_gen_supervisor_last_failure_timestamp_seconds", server=cl)
    assert len(last_failure) == 1 and last_failure[0] != last_failure[0], f"no failed pass yet (NaN): {last_failure}"
    # Every metric of the file, with its HELP and TYPE; and as id_gen.metrics has them. (But
    # a fence up, which no operation has now: no series, test f.)
    assert e.values("id_gen_operation_fence_up_seconds") == [], "no fence is up"
    want = {m: v for m, v in file_metrics().items() if m not in WHILE_A_FENCE_IS_UP}
    samples, helps, types = e.scrape()
    scraped = {n for n, _ in samples}
    assert not set(want) - scraped, f"metrics of the file not exported: {sorted(set(want) - scraped)}"
    for m, (kind, help_text) in want.items():
        assert (types.get(m), helps.get(m)) == (kind, help_text), f"{m}: TYPE and HELP as scraped"
    for name, node in S["nodes"].items():
        rows = node.execute("SELECT DISTINCT metric, type, help FROM id_gen.metrics")
        for metric, kind, help_text in rows:
            assert want.get(metric) == (kind, help_text), f"{name}: {metric} in id_gen.metrics and in the file"
    assert {r[0] for n in S["nodes"].values() for r in n.execute("SELECT DISTINCT metric FROM id_gen.metrics")} \
        == set(want), "every metric of the file has rows in some node's id_gen.metrics"
    errors = e.values("pg_exporter_last_scrape_error")
    assert errors == [0.0], f"no query of the file failed: {errors}; {open(e.log).read()[-2000:]}"


def test_b_a_shard_down_during_a_route_change_shows_as_a_failed_push():
    c, s2, e = S["c"], S["s2"], S["exporter"]
    cl = server_label(c)
    s2.stop()
    try:
        c.execute("CALL id_gen.split_route(24575)")  # (a range of shard_1's: shard_2 is only told)
        poll_until("the failed push to shard_2", lambda: (
            e.values("id_gen_route_push_error", server=cl, shard="shard_2"),
            e.values("id_gen_route_push_lag_versions", server=cl, shard="shard_2")), ([1.0], [1.0]), timeout=60)
        assert e.values("id_gen_route_push_lag_versions", server=cl, shard="shard_1") == [0.0]
        lag = e.values("id_gen_route_push_lag_seconds", server=cl, shard="shard_2")
        assert len(lag) == 1 and lag[0] > 0, f"seconds behind: {lag}"
    finally:
        s2.start()
    poll_until("shard_2 told the routes again", lambda: (
        e.values("id_gen_route_push_error", server=cl, shard="shard_2"),
        e.values("id_gen_route_push_lag_versions", server=cl, shard="shard_2")), ([0.0], [0.0]), timeout=60)


def test_c_the_authority_down_shows_as_failing_refills():
    c, s1, e = S["c"], S["s1"], S["exporter"]
    s1l = server_label(s1)
    c.stop()
    try:
        with s1.connect() as conn:
            conn.execute("SET id_gen.refill_timeout = '1s'")
            with pytest.raises(psycopg.Error) as failed:
                for _ in range(20):  # until the cache runs out (at most 20 x 1,000 values)
                    conn.execute("SELECT id_gen.next_segment_id('orders') FROM generate_series(1, 1000)").fetchall()
        assert failed.value.sqlstate == "55000", f"the cache ran out: {failed.value}"
        poll_until("the authority as shard_1's refill worker saw it", lambda: (
            e.values("id_gen_authority_up", server=s1l, authority="central"),
            e.values("id_gen_sequence_refill_failing", server=s1l, sequence="orders")), ([0.0], [1.0]), timeout=30)
        assert e.values("id_gen_sequence_wait_timeouts_total", server=s1l, sequence="orders") == [1.0], \
            "the one call that timed out is counted"
        errors = e.values("id_gen_authority_errors_total", server=s1l, authority="central")
        assert len(errors) == 1 and errors[0] >= 1, f"failed reservations at the authority are counted: {errors}"
        # (Scraped again: the worker goes on retrying, every 200 ms.)
        assert e.values("id_gen_sequence_authority_errors_total", server=s1l, sequence="orders")[0] >= errors[0], \
            "the sequence's count is the authority's (its only sequence there)"
    finally:
        c.start()
    poll_until("a value of orders on shard_1 again", lambda: s1.one("SELECT id_gen.next_segment_id('orders') > 0"),
               True, timeout=60)
    poll_until("the authority back", lambda: (
        e.values("id_gen_authority_up", server=s1l, authority="central"),
        e.values("id_gen_sequence_refill_failing", server=s1l, sequence="orders")), ([1.0], [0.0]), timeout=60)


def test_d_only_pg_monitor_reads_the_metrics():
    c = S["c"]
    for statement in ("SELECT count(*) FROM id_gen.metrics", "SELECT * FROM id_gen.metrics_sequences()",
                      "SELECT * FROM id_gen.metrics_route_pushes()", "SELECT * FROM id_gen.metrics_operations()"):
        with c.connect(user="outsider") as conn:
            with pytest.raises(psycopg.Error) as denied:
                conn.execute(statement)
            assert denied.value.sqlstate == "42501", f"{statement}: {denied.value}"
    with c.connect(user="exporter") as conn:
        assert conn.execute("SELECT count(*) FROM id_gen.metrics").fetchone()[0] > 0


def test_e_the_cost_of_a_scrape_at_1000_sequences_and_64_shards():
    c, cluster = S["c"], S["cluster"]
    c.execute("CREATE DATABASE scale")
    c.script("""
        CREATE EXTENSION id_gen; CREATE EXTENSION postgres_fdw;
        SELECT id_gen.create_sequence('s' || i, step => 1000) FROM generate_series(1, 1000) i;
        SELECT id_gen.next_segment_id('s' || i) FROM generate_series(1, 1000) i;
    """, dbname="scale")
    shards = "\n".join(
        f"CREATE SERVER shard_{k} FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '/nonexistent', port '1', connect_timeout '1');"
        f"CREATE USER MAPPING FOR postgres SERVER shard_{k} OPTIONS (user 'postgres');"
        f"SELECT id_gen.set_route({k * 1024 - 1}, 'shard_{k}');"
        for k in range(1, 65))
    c.script(shards, dbname="scale")
    assert c.one("SELECT count(DISTINCT labels->>'sequence') FROM id_gen.metrics "
                 "WHERE metric = 'id_gen_sequence_refills_total' AND value > 0", dbname="scale") == 1000
    assert c.one("SELECT count(*) FROM id_gen.metrics_route_pushes()", dbname="scale") == 64
    timings = {}
    with c.connect(dbname="scale") as conn:
        for query in ("SELECT * FROM id_gen.metrics_sequences()", "SELECT * FROM id_gen.metrics_authorities()",
                      "SELECT * FROM id_gen.metrics_route_pushes()", "SELECT * FROM id_gen.metrics_operations()",
                      "SELECT * FROM id_gen.metrics_operation_phases()", "SELECT * FROM id_gen.metrics_operation_fences()",
                      "SELECT * FROM id_gen.metrics_order_no_keys()",
                      "SELECT * FROM id_gen.metrics"):
            runs = []
            for _ in range(5):
                t = time.perf_counter()
                conn.execute(query).fetchall()
                runs.append((time.perf_counter() - t) * 1000)
            timings[query] = statistics.median(runs)
    exporter = Exporter(os.path.join(cluster.root, "exporter_scale"), cluster.port_base + 18,
                        [f"host={c.dir} port={c.port} user=exporter dbname=scale sslmode=disable"])
    try:
        durations = [exporter.values("pg_exporter_last_scrape_duration_seconds")[0] for _ in range(3)]
        series = sum(1 for (n, _) in exporter.scrape()[0] if n.startswith("id_gen_"))
    finally:
        exporter.stop()
    assert series >= 1000 * 11 + 64 * 5, f"the sequences' and shards' series: {series}"
    report("metrics at 1,000 sequences and 64 shards (median of 5, ms, on the server): "
           + "; ".join(f"{q.split('FROM ')[1]} {ms:.1f}" for q, ms in timings.items()),
           f"the exporter's scrape of that database: {series} id_gen series, "
           f"{statistics.median(durations) * 1000:.0f} ms (median of 3)")


def test_f_a_fence_held_shows_with_its_age():
    c, s2, e = S["c"], S["s2"], S["exporter"]
    cl = server_label(c)
    s2.script(f"""
        CREATE FUNCTION public.hold_first_fence_marker() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF NEW.marker = 1 THEN PERFORM pg_advisory_xact_lock({LOCK}); END IF;
          RETURN NEW;
        END $$;
        CREATE TRIGGER hold_first_fence_marker BEFORE INSERT ON id_gen.move_markers
          FOR EACH ROW EXECUTE FUNCTION public.hold_first_fence_marker();
        ALTER TABLE id_gen.move_markers ENABLE ALWAYS TRIGGER hold_first_fence_marker;
    """)
    holder = psycopg.connect(s2.dsn(), autocommit=True)
    try:
        holder.execute(f"SELECT pg_advisory_lock({LOCK})")
        move = Background(c, "CALL id_gen.move_genes(0, 8191, 'shard_2')")
        seen = poll_until("the move's fence on shard_1, scraped", lambda: e.values(
            "id_gen_operation_fence_up_seconds", server=cl, kind="move", shard="shard_1"), lambda v: len(v) == 1, 60)
        # (An attempt waits up to 3 s for its marker, then lifts the fence and tries again.)
        later = poll_until("its age grows past a second", lambda: e.values(
            "id_gen_operation_fence_up_seconds", server=cl, kind="move", shard="shard_1"),
            lambda v: len(v) == 1 and v[0] > 1, 30)
        # (A scrape between two attempts has no fence: each check is polled.)
        want = file_metrics()
        for m in WHILE_A_FENCE_IS_UP:
            poll_until(f"{m}: TYPE and HELP as scraped, as in the file", lambda: (
                lambda _, helps, types: (types.get(m), helps.get(m)))(*e.scrape()), want[m], 30)
            poll_until(f"{m} in id_gen.metrics as in the file", lambda: c.execute(
                f"SELECT DISTINCT type, help FROM id_gen.metrics WHERE metric = '{m}'"), [want[m]], 30)
    finally:
        holder.close()  # the fence's marker goes through
    assert move.join(120) is None, "the move completes once its fence's marker arrives"
    poll_until("the fence's series is gone once the move cut over", lambda: e.values(
        "id_gen_operation_fence_up_seconds", server=cl), [], 30)
    report(f"a fence held, as scraped: up {seen[0]:.2f} s, then {later[0]:.2f} s")
