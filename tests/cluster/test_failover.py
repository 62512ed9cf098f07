"""Failover that never reissues (docs/guide/sequences.md "Failover"; was tests/e2e/10_failover.sh).
A primary with one synchronous standby (synchronous_standby_names = '*', physical slot,
pg_basebackup -R):

(a) the standby refuses next_segment_id with 25006 before promotion;
(b) a refill worker terminated while its commit waits for the (stopped) standby commits
    locally but publishes nothing: that range never reaches a caller;
(c) the same primary is the central authority of a node's sequence, whose values a
    recorder logs from here on;
(d) kill -9 of the primary under load, promote the standby (which has
    id_gen.promotion_skip_segments = 3), more load: no id twice, the promoted catalog
    covers every value handed out, and the first reservation skipped 3 x max_step;
(e) the node's foreign server is re-pointed at the promoted central and service resumes;
    the promoted catalog covers every value the node handed out before, and no value
    appears twice.
"""
import os
import subprocess
import threading

import psycopg

from harness import PG_BIN, poll_until, report

S = {}
WORKER_IN_SYNCREP = ("SELECT pid FROM pg_stat_activity "
                     "WHERE backend_type = 'id_gen refill worker' AND wait_event = 'SyncRep'")


class Recorder:
    """A session that runs `query` (values of a sequence) over and over in a thread and
    keeps every value it is handed, committed or not, until `stop()`; with stop_on_error
    it ends at its first error, else it counts the error and connects again."""

    def __init__(self, node, query, setup=(), stop_on_error=True):
        self.values, self.errors = [], []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(node, query, setup, stop_on_error), daemon=True)
        self.thread.start()

    def _run(self, node, query, setup, stop_on_error):
        while not self.done.is_set():
            try:
                with node.connect() as conn:
                    for s in setup:
                        conn.execute(s)
                    while not self.done.is_set():
                        self.values += [r[0] for r in conn.execute(query).fetchall()]
            except psycopg.Error as e:
                self.errors.append(e)
                if stop_on_error:
                    return
                self.done.wait(0.2)  # (the pace of the retries, not a wait for a state)

    def stop(self, timeout=60):
        self.done.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"the recorder still runs after {timeout} s"
        return self.values


def pgbench(node, script, *args):
    """pgbench as the postgres role over the node's socket, started; the caller waits for
    it within a bound (communicate(timeout=...))."""
    return subprocess.Popen([f"{PG_BIN}/pgbench", "-n", "-h", node.dir, "-p", str(node.port), "-U", "postgres",
                             "-f", script, *args, "postgres"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def log_count(node, text):
    with open(node.log, errors="replace") as f:
        return f.read().count(text)


def test_a_the_standby_refuses_before_promotion(cluster):
    p = cluster.node("primary", conf=["wal_level = replica", "max_wal_senders = 4", "synchronous_standby_names = '*'"])
    p.execute("SELECT pg_create_physical_replication_slot('standby1')")
    # The promoted standby must not wait for standbys of its own.
    s = cluster.node("standby", standby_of=p, slot="standby1",
                     conf=["synchronous_standby_names = ''", "id_gen.promotion_skip_segments = 3"])
    poll_until("the standby replicates synchronously",
               lambda: p.one("SELECT string_agg(sync_state, ',') FROM pg_stat_replication"), "sync", 30)
    p.script("""
CREATE EXTENSION id_gen;
SELECT id_gen.create_sequence('k', step => 50, max_step => 1000);
SELECT id_gen.create_sequence('f', step => 10, min_step => 10, max_step => 10, preload_threshold => 0);
CREATE TABLE kt (id bigint PRIMARY KEY DEFAULT id_gen.next_segment_id('k'), at timestamptz DEFAULT now());
""")
    poll_until("the standby replays the extension",
               lambda: s.one("SELECT count(*) FROM pg_extension WHERE extname = 'id_gen'"), 1, 30)
    assert s.sqlstate("SELECT id_gen.next_segment_id('k')") == "25006", "the standby refuses with 25006"
    S.update(p=p, s=s)


def test_b_a_refill_terminated_in_syncrep_publishes_nothing():
    p, s = S["p"], S["s"]
    p.execute("SELECT id_gen.next_segment_id('f')")
    # Every range reserved so far is in this backend's cache (none in flight, none waiting
    # for the standby), so that the ranges reserved from here on are the client's.
    poll_until("the cache of 'f' holds every range reserved so far", lambda: p.one(
        "SELECT s.max_id = greatest(st.current_last, st.standby_last) "
        "AND NOT EXISTS (SELECT FROM pg_stat_activity WHERE wait_event = 'SyncRep') "
        "FROM id_gen.sequences s JOIN id_gen.status st ON st.sequence = s.name WHERE s.name = 'f'"), True, 30)
    m0 = p.one("SELECT max_id FROM id_gen.sequences WHERE name = 'f'")
    s.stop()
    got = []

    def waiting_client():
        with p.connect() as conn:
            conn.execute("SET id_gen.refill_timeout = '60s'")
            for _ in range(30):
                got.append(conn.execute("SELECT id_gen.next_segment_id('f')").fetchone()[0])

    client = threading.Thread(target=waiting_client, daemon=True)
    client.start()
    poll_until("the refill worker waits for the synchronous standby", lambda: p.one(WORKER_IN_SYNCREP) is not None, True, 30)
    wpid = p.one(WORKER_IN_SYNCREP)
    p.execute(f"SELECT pg_terminate_backend({wpid})")
    poll_until(f"the refill worker {wpid} is gone",
               lambda: p.one(f"SELECT count(*) FROM pg_stat_activity WHERE pid = {wpid}"), 0, 30)
    m1 = p.one("SELECT max_id FROM id_gen.sequences WHERE name = 'f'")
    assert m1 > m0, f"the terminated reservation committed locally (max_id {m0} -> {m1})"
    assert "terminated" in (p.one("SELECT last_error FROM id_gen.status WHERE sequence = 'f'") or ""), \
        "id_gen.status.last_error says the worker was terminated"
    assert log_count(p, "refused to publish: the refill worker was terminated") >= 1, "the server log names the refused publish"
    s.start()  # a relaunched worker's reservation is confirmed now
    client.join(120)
    assert not client.is_alive(), "the waiting client got its values within 120 s of the standby's return"
    assert len(got) == 30, f"the waiting client got its 30 values once the standby was back ({len(got)})"
    assert [v for v in got if m0 < v <= m1] == [], f"no value of the terminated reservation ({m0 + 1}..{m1}) was handed out"


def test_c_a_node_reserves_on_this_primary(cluster):
    p = S["p"]
    p.script("""
SELECT id_gen.create_sequence('c', step => 50, max_step => 200);
CREATE ROLE id_authority LOGIN;
GRANT UPDATE (max_id) ON id_gen.sequences TO id_authority;
ALTER ROLE id_authority SET synchronous_commit = on;
""")
    n = cluster.node("node")
    n.script(f"""
CREATE EXTENSION id_gen;
CREATE EXTENSION postgres_fdw;
CREATE SERVER central FOREIGN DATA WRAPPER postgres_fdw
  OPTIONS (host '{p.dir}', port '{p.port}', dbname 'postgres', connect_timeout '2', options '-c synchronous_commit=on');
CREATE USER MAPPING FOR PUBLIC SERVER central OPTIONS (user 'id_authority');
SELECT id_gen.create_sequence('c', step => 50, max_step => 200, authority => 'central');
""")
    # The node's recorder: 20 values per call; errors (the central away) counted, retried.
    rec = Recorder(n, "SELECT id_gen.next_segment_id('c') FROM generate_series(1, 20)",
                   setup=["SET id_gen.refill_timeout = '1s'"], stop_on_error=False)
    poll_until("the node hands out values of 'c'", lambda: len(rec.values) >= 100, True, 60)
    S.update(n=n, node_rec=rec)


def test_d_kill9_of_the_primary_under_load_then_promotion(tmp_path):
    p, s = S["p"], S["s"]
    script = tmp_path / "ins.sql"
    script.write_text("INSERT INTO kt DEFAULT VALUES;\n")
    os.chmod(tmp_path, 0o755)
    load = pgbench(p, str(script), "-c", "4", "-j", "2", "-T", "30")
    handed = Recorder(p, "SELECT id_gen.next_segment_id('k') FROM generate_series(1, 20)")
    poll_until("the load commits rows", lambda: p.one("SELECT count(*) >= 2000 FROM kt"), True, 60)
    p.kill9()
    load.communicate(timeout=60)
    handed.thread.join(60)
    assert handed.values, "the recording client saw values of 'k'"
    handed_max = max(handed.values)
    s.promote()
    rows = s.one("SELECT count(*) FROM kt")
    assert rows > 0, "rows replicated before the crash"
    prev_max = max(handed_max, s.one("SELECT max(id) FROM kt"))
    promoted_max_id = s.one("SELECT max_id FROM id_gen.sequences WHERE name = 'k'")
    assert promoted_max_id >= prev_max, \
        f"the promoted catalog (max_id {promoted_max_id}) covers every value handed out ({prev_max})"
    new_min = s.one("SELECT min(id_gen.next_segment_id('k')) FROM generate_series(1, 500)")
    assert new_min > promoted_max_id + 3 * 1000, f"the first reservation after promotion skipped 3 x max_step ({new_min})"
    more = pgbench(s, str(script), "-c", "4", "-j", "2", "-t", "300")
    out, _ = more.communicate(timeout=300)
    assert more.returncode == 0, f"inserts on the promoted server: {out}"
    assert s.one("SELECT count(*) FROM kt") - rows == 1200, "1200 rows inserted on the promoted server"
    assert s.one("SELECT count(*) = count(DISTINCT id) FROM kt"), "no duplicate ids across the failover"
    assert s.one(f"SELECT count(*) FROM kt WHERE id > {prev_max}") == 1200, \
        "every row inserted after promotion lies above every value handed out before the crash"
    assert log_count(s, "skipped 3 x max_step") == 1, "the promoted server logged the skip, once"
    report(f"failover: {rows} rows before the kill -9, {len(handed.values)} values of 'k' handed out, "
           f"the first value after promotion {new_min - promoted_max_id} above the promoted max_id")


def test_e_the_node_follows_its_central_to_the_promoted_server():
    s, n, rec = S["s"], S["n"], S["node_rec"]
    c_max_at_promotion = s.one("SELECT max_id FROM id_gen.sequences WHERE name = 'c'")
    node_max_before = max(rec.values)
    n.execute(f"ALTER SERVER central OPTIONS (SET host '{s.dir}', SET port '{s.port}')")
    poll_until("the node hands out values reserved on the promoted central",
               lambda: max(rec.values) > c_max_at_promotion, True, 60)
    values = rec.stop()
    assert c_max_at_promotion >= node_max_before, \
        f"the promoted central's max_id ({c_max_at_promotion}) covers every value the node handed out before ({node_max_before})"
    assert len(values) == len(set(values)), f"no value of the node appears twice ({len(values)} values across the failover)"
    # (55000 naming the authority: "failed: ..." once the worker's attempt failed, "has not
    # answered yet" while it is in flight.)
    others = [e for e in rec.errors if not (e.sqlstate == "55000" and 'its authority "central"' in str(e))]
    assert others == [], f"the node's only errors ({len(rec.errors)}) were the buffer running out, naming the authority"
