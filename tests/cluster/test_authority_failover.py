"""The central authority as a pg_auto_failover formation (docs/guide/sequences.md "Automatic
failover of the central authority"; was tests/e2e/13_auto_failover.sh). PostgreSQL 15 only:
Debian packages pg_auto_failover for the server of bookworm (scripts/common.sh installs it).

A monitor, a primary c1 and a synchronous secondary c2, run by pg_autoctl as the postgres
OS user on loopback. Two nodes reserve their segments of 'k' (50-value segments: the buffer
runs dry within a second) and 'roomy' (20000-value segments: the buffer outlasts a failover)
on the central through a foreign server with host '127.0.0.1,127.0.0.1' port 'c1,c2'
target_session_attrs 'read-write'. On each node the same clients run under two settings,
side by side through the same outages: 2 clients of 'k' and 1 of 'roomy' with
id_gen.refill_timeout = 1s, and 2 and 1 with nothing set (the default, 10 s; each client
records the setting its session runs with). Under their load (every value handed out
recorded on the node with its time and how long its call took, every failed call with its
time and how long it waited), and with nobody touching nodes or formation afterwards:

(a) the formation is up, c2 replicates synchronously and inherited id_gen;
(b) the load runs on both nodes before anything fails;
(c) c1's host dies: kill -9 of its pg_autoctl processes, its postmaster and all children.
    The monitor promotes c2; both nodes serve values reserved on c2 (within 60 s, the
    bound of the wait; the time is reported); every value handed out before c2 left
    recovery lies at or below c2's max_id as replayed at the crash (synchronous replication
    lost no reservation); no call of the clients with the default refill_timeout failed;
(d) c1's pg_autoctl is started again: it rejoins as c2's synchronous secondary, and no call
    fails meanwhile;
(e) c2's postmaster and its children die (kill -9), its pg_autoctl lives: it restarts
    PostgreSQL in place, and the monitor also fails over to c1 if the keeper reported
    PostgreSQL down first (both happen; the test accepts either and reports which). Both
    nodes reserve again; no call with the default refill_timeout failed;
(f) across both: no value of either sequence handed out twice; the final central's max_id
    covers every value; no call with the default refill_timeout failed; the only failed
    calls are 55000 of 'k' with refill_timeout 1s during the two outages (in the host loss
    all naming the authority and its connection failure); 'roomy' had none.

Reported: the monitor's events and, per node and setting, the outage the clients saw in
each case (longest gap between successful calls, longest successful call, failed calls by
SQLSTATE).
"""
import os

import psycopg
import pytest

from formation import AVAILABLE, MISSING, Formation
from harness import Background, poll_until, report

if not AVAILABLE:
    pytest.skip(MISSING, allow_module_level=True)

S = {}
SEQUENCES = ("k", "roomy")
# The clients of each node: (number, sequence, id_gen.refill_timeout set in its session).
# The same three run under each setting, side by side through the same outages: with
# 1 s, and with nothing set (the default, 10 s). A caller's refill_timeout bounds only its
# own wait; the refill worker's retries (every 200 ms) do not depend on it.
CLIENTS = [(1, "k", "1s"), (2, "k", "1s"), (3, "roomy", "1s"), (4, "k", None), (5, "k", None), (6, "roomy", None)]
SETTINGS = ("1s", "10s")  # as the clients record current_setting('id_gen.refill_timeout')
DEFAULT = "10s"
# A client of one sequence on a node: 5 calls every 20 ms until a row is in stop (or 300 s
# passed). It registers its sequence and the id_gen.refill_timeout its session runs with;
# every value it is handed is recorded with its time and how long the call took (PL/pgSQL
# variables survive the failed block), every failed call with its time, how long it
# waited and its SQLSTATE.
NODE_SETUP = """
CREATE EXTENSION id_gen;
CREATE EXTENSION postgres_fdw;
-- Both members of the formation; libpq takes the first that accepts writes.
CREATE SERVER central FOREIGN DATA WRAPPER postgres_fdw
  OPTIONS (host '127.0.0.1,127.0.0.1', port '{c1},{c2}', target_session_attrs 'read-write',
           dbname 'postgres', connect_timeout '2', options '-c synchronous_commit=on');
CREATE USER MAPPING FOR PUBLIC SERVER central OPTIONS (user 'id_authority');
SELECT id_gen.create_sequence('k', step => 50, min_step => 50, max_step => 50, authority => 'central');
SELECT id_gen.create_sequence('roomy', step => 20000, min_step => 20000, max_step => 20000, authority => 'central');
CREATE TABLE clients (client int PRIMARY KEY, seq text NOT NULL, refill_timeout text NOT NULL);
CREATE TABLE handed (ts timestamptz NOT NULL, seq text NOT NULL, client int NOT NULL, id bigint NOT NULL, wait_ms float8 NOT NULL);
CREATE TABLE failed (ts timestamptz NOT NULL, seq text NOT NULL, client int NOT NULL, wait_ms float8 NOT NULL, sqlstate text, msg text);
CREATE TABLE stop ();
CREATE PROCEDURE client(c int, s text) LANGUAGE plpgsql AS $$
DECLARE
  v bigint; t0 timestamptz; ids bigint[] := '{{}}'; tss timestamptz[] := '{{}}'; waits float8[] := '{{}}';
  deadline timestamptz := clock_timestamp() + interval '280 s';
BEGIN
  INSERT INTO clients VALUES (c, s, current_setting('id_gen.refill_timeout'));
  COMMIT;
  LOOP
    FOR i IN 1..5 LOOP
      t0 := clock_timestamp();
      BEGIN
        v := id_gen.next_segment_id(s);
        ids := ids || v; tss := tss || clock_timestamp();
        waits := waits || 1000 * extract(epoch FROM tss[cardinality(tss)] - t0)::float8;
      EXCEPTION WHEN OTHERS THEN
        INSERT INTO failed VALUES (clock_timestamp(), s, c, 1000 * extract(epoch FROM clock_timestamp() - t0)::float8,
                                   SQLSTATE, SQLERRM);
      END;
    END LOOP;
    INSERT INTO handed SELECT t, s, c, i, w FROM unnest(tss, ids, waits) AS u(t, i, w);
    ids := '{{}}'; tss := '{{}}'; waits := '{{}}';
    COMMIT;
    EXIT WHEN EXISTS (SELECT FROM stop) OR clock_timestamp() > deadline;
    PERFORM pg_sleep(0.02);
  END LOOP;
END $$;
"""


@pytest.fixture(scope="module", autouse=True)
def formation(cluster):
    f = Formation(os.path.join(cluster.root, "formation"), cluster.port_base + 10)
    S["f"] = f
    yield f
    for node in S.get("nodes", ()):
        try:
            node.execute("INSERT INTO stop DEFAULT VALUES")
        except Exception as e:  # noqa: BLE001 - teardown reports and goes on
            print(f"stopping the clients on {node.name}: {e}")
    f.stop()


def nodes():
    return S["nodes"]


def now():
    return S["nodes"][0].one("SELECT clock_timestamp()::text")


def secs(t0, t1):
    return S["nodes"][0].one(f"SELECT round(extract(epoch FROM '{t1}'::timestamptz - '{t0}'::timestamptz)::numeric, 1)")


def handed_since(node, seq, since):
    return node.one(f"SELECT count(*) FROM handed WHERE seq = '{seq}' AND ts > '{since}'")


def more_handed_everywhere(what, since, n=200):
    """Polls until every node was handed more than n values of 'k' after `since` (the load
    goes on: this replaces a fixed sleep)."""
    for node in nodes():
        poll_until(f"{node.name}: {what}", lambda nd=node: handed_since(nd, "k", since), lambda c: c > n, 60)


def clients_settled(since):
    """Polls until every client of every node committed a value handed after `since`:
    clients commit their values and failures in order, so every call that ended before
    `since` is then in handed or failed."""
    for node in nodes():
        poll_until(f"every client on {node.name} committed a value handed after {since}", lambda nd=node: nd.one(
            f"SELECT count(DISTINCT client) FROM handed WHERE ts > '{since}'"), len(CLIENTS), 60)


def failover_report(t0, new):
    """The monitor's events since t0 and the failover's timing (until the new primary
    reported wait_primary: it takes writes)."""
    f = S["f"]
    events = f.events_since(t0)
    t_unhealthy = f["monitor"].one(f"""SELECT min(eventtime)::text FROM pgautofailover.event WHERE eventtime >= '{t0}'::timestamptz
                                       AND description LIKE '%became unhealthy%'""", dbname="pg_auto_failover")
    t_writes = f.took_writes_at(new, t0)
    assert t_unhealthy is not None and t_writes is not None, "monitor events incomplete:\n" + "\n".join(events)
    report("monitor events after the kill:", *[f"  {e}" for e in events],
           f"failover: the monitor acted on the failure after {secs(t0, t_unhealthy)} s; "
           f"{new} reported wait_primary (takes writes) after {secs(t0, t_writes)} s")


def outage(node, setting, seq, t0, t1):
    """What the clients of `seq` with refill_timeout `setting` on `node` saw in [t0, t1]:
    {"gap": the longest gap between their successful calls that ended in it (s), "at":
    when it ended (s after t0), "call": their longest successful call (s), "failed": their
    failed calls, "by": those by SQLSTATE ('55000 xN', or 'none'), "waited": the longest
    wait of a failed call (s)}."""
    return dict(zip(("gap", "at", "call", "failed", "by", "waited"), node.execute(f"""
        WITH c AS (SELECT client FROM clients WHERE refill_timeout = '{setting}' AND seq = '{seq}'),
             g AS (SELECT ts, wait_ms, ts - lag(ts) OVER (ORDER BY ts) AS gap FROM handed WHERE client IN (SELECT client FROM c)),
             w AS (SELECT * FROM g WHERE ts BETWEEN '{t0}' AND '{t1}'),
             f AS (SELECT * FROM failed WHERE client IN (SELECT client FROM c) AND ts BETWEEN '{t0}' AND '{t1}')
        SELECT round(extract(epoch FROM max(gap))::numeric, 2)::text,
               round(extract(epoch FROM (SELECT ts FROM w ORDER BY gap DESC NULLS LAST LIMIT 1) - '{t0}'::timestamptz)::numeric, 1)::text,
               round((max(wait_ms) / 1000)::numeric, 2)::text,
               (SELECT count(*) FROM f)::int,
               coalesce((SELECT string_agg(sqlstate || ' x' || n, ', ') FROM
                         (SELECT sqlstate, count(*) AS n FROM f GROUP BY 1 ORDER BY 1) x), 'none'),
               (SELECT round((max(wait_ms) / 1000)::numeric, 2)::text FROM f)
        FROM w""")[0]))


def outage_report(t0, t1):
    """Reports, per node, setting and sequence, what the clients saw in [t0, t1] (see
    `outage`); returns {(node name, setting, sequence): that}."""
    seen = {}
    for node in nodes():
        for setting in SETTINGS:
            for s in SEQUENCES:
                o = seen[node.name, setting, s] = outage(node, setting, s, t0, t1)
                report(f"outage seen by {node.name} '{s}', refill_timeout {setting}: longest gap between successful calls "
                       f"{o['gap']} s (ending {o['at']} s after the kill); longest successful call {o['call']} s; "
                       f"failed calls: {o['by']}" + (f" (the longest waited {o['waited']} s)" if o["failed"] else ""))
    return seen


def no_failed_call_with_the_default(seen, what):
    """Asserts that the clients with the default refill_timeout had no failed call."""
    failing = {f"{k[0]} '{k[2]}'": v for k, v in seen.items() if k[1] == DEFAULT and v["failed"] != 0}
    assert failing == {}, f"{what}: no call fails with the default id_gen.refill_timeout ({DEFAULT}); {failing}"


def test_a_the_formation(cluster):
    f = S["f"]
    f.start("shared_preload_libraries = 'id_gen'", "max_worker_processes = 16")
    assert f["c2"].one("SELECT current_setting('shared_preload_libraries') || ' ' || current_setting('shared_buffers') "
                       "|| ' ' || pg_is_in_recovery()") == "id_gen 32MB true", "the secondary inherited id_gen and the small settings"
    f["c1"].script("""
CREATE EXTENSION id_gen;
SELECT id_gen.create_sequence('k');
SELECT id_gen.create_sequence('roomy');
CREATE ROLE id_authority LOGIN;
GRANT UPDATE (max_id) ON id_gen.sequences TO id_authority;
ALTER ROLE id_authority SET synchronous_commit = on;
""")
    S["nodes"] = [cluster.node(f"node{i}") for i in (1, 2)]
    for node in nodes():
        node.script(NODE_SETUP.format(c1=f["c1"].port, c2=f["c2"].port))


def test_b_the_load_runs_on_both_nodes():
    # Under each setting, two clients of 'k' and one of 'roomy' on each node, through both failovers.
    S["clients"] = [Background(node, *([f"SET id_gen.refill_timeout = '{t}'"] if t else []), f"CALL client({c}, '{s}')")
                    for node in nodes() for c, s, t in CLIENTS]
    for node in nodes():
        poll_until(f"{node.name}'s clients run, clients 4 to 6 with the default refill_timeout",
                   lambda nd=node: nd.one("SELECT string_agg(client || ' ' || seq || ' ' || refill_timeout, ', ' ORDER BY client) "
                                          "FROM clients"),
                   ", ".join(f"{c} {s} {t or DEFAULT}" for c, s, t in CLIENTS), 60)
        poll_until(f"{node.name} is handed values of both sequences",
                   lambda nd=node: nd.one("SELECT count(DISTINCT seq) FROM handed"), 2, 60)
    poll_until("node1 reserved several segments of 'k' on c1",
               lambda: nodes()[0].one("SELECT refills FROM id_gen.status WHERE sequence = 'k'"), lambda n: n > 3, 60)
    for node in nodes():
        assert node.one("SELECT count(*) FROM failed") == 0, f"{node.name}: no failed call before the crash"


def test_c_the_primary_host_dies_and_the_monitor_promotes_c2():
    f = S["f"]
    t_kill = now()
    f.kill_host("c1")
    # What c2 starts from: its catalog once it replayed all it received (replay no longer
    # moves while it is still a standby) is the catalog it is promoted with.
    seen = {"lsn": None}

    def replayed_catalog():
        in_recovery, lsn, catalog = f["c2"].execute(
            "SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn()::text, "
            "(SELECT string_agg(name || '=' || max_id, ' ' ORDER BY name) FROM id_gen.sequences)")[0]
        assert in_recovery, f"c2 left recovery before its replayed catalog could be read ({catalog})"
        stable, seen["lsn"] = lsn == seen["lsn"], lsn
        return catalog if stable else None

    standby_catalog = poll_until("c2's replayed catalog at the crash, while it is still a standby", replayed_catalog,
                                 lambda c: c is not None, 20)
    standby_max = dict(kv.split("=") for kv in standby_catalog.split())
    report(f"c2's replayed catalog at the crash: {standby_catalog}")
    # Nobody acts now. The last moment c2 was seen in recovery: every value handed out
    # before it came from a reservation on c1.
    last_in_recovery = {"ts": t_kill}

    def in_recovery():
        r, ts = f["c2"].execute("SELECT pg_is_in_recovery(), clock_timestamp()::text")[0]
        if r:
            last_in_recovery["ts"] = ts
        return r

    poll_until("the monitor promotes c2 by itself (out of recovery)", in_recovery, False, 60)
    poll_until("c2 takes writes (wait_primary or primary)", lambda: f.state("c2"), lambda s: s in ("wait_primary", "primary"), 60)
    assert f.goal("c1") == "demoted", "the monitor demoted c1"
    failover_report(t_kill, "c2")
    # Service resumes on both nodes, nobody re-points them.
    for node in nodes():
        resumed = poll_until(f"{node.name} is handed a value of 'k' reserved on the promoted c2", lambda nd=node: nd.one(
            f"SELECT min(ts)::text FROM handed WHERE seq = 'k' AND id > {standby_max['k']}"), lambda t: t is not None, 60)
        report(f"{node.name} serves values of 'k' reserved on the promoted c2, {secs(t_kill, resumed)} s after the kill")
    more_handed_everywhere("the load goes on after the failover", now())
    t_end = now()
    clients_settled(t_end)
    S["kill1"] = (t_kill, t_end)
    seen = outage_report(t_kill, t_end)
    before_promotion = sum(node.one(f"""SELECT count(*) FROM handed WHERE ts < '{last_in_recovery["ts"]}'
        AND ((seq = 'k' AND id > {standby_max['k']}) OR (seq = 'roomy' AND id > {standby_max['roomy']}))""") for node in nodes())
    assert before_promotion == 0, \
        f"c2's catalog at the crash ({standby_catalog}) covers every value handed out before its promotion"
    # A caller with the default waits up to 10 s from when the node's 'k' segments ran out
    # (about 0.1 s after the kill): that must hold the failover (the monitor acts 3-4 s after
    # the kill, then gives c1 primary_demote_timeout, 3 s) and up to 0.2 s more until the
    # refill worker's next attempt (it retries a failed authority every 200 ms).
    no_failed_call_with_the_default(seen, "the host loss")


def test_d_c1_rejoins_as_the_synchronous_secondary():
    f = S["f"]
    f.run("c1")
    poll_until("c1 rejoins as the secondary, c2 is primary", f.states, "secondary/primary", 60)
    poll_until("c1 replicates synchronously from c2", lambda: f.sync_state("c2"), "quorum", 30)
    t_sync = now()
    more_handed_everywhere("the load goes on after c1 rejoined", t_sync)
    failed = sum(node.one(f"SELECT count(*) FROM failed WHERE ts > '{S['kill1'][1]}'") for node in nodes())
    assert failed == 0, "no failed call while c1 rejoined"


def test_e_the_new_primary_postmaster_dies_its_keeper_lives():
    # The keeper restarts PostgreSQL in place (read-write again within a second or two); the
    # monitor fails over to c1 too if the keeper reported PostgreSQL down before that (seen
    # both ways). Either way the nodes carry on by themselves and nothing repeats.
    f = S["f"]
    t_kill = now()
    f["c2"].kill9()
    # A node holds at most 2 segments of 'k' (100 values) and one reservation in flight:
    # more than 500 values after the kill means it reserved again, on whichever member
    # took writes.
    more_handed_everywhere("reserves 'k' again after the kill (more than it held)", t_kill, n=500)
    t_end = now()
    clients_settled(t_end)
    states = poll_until("the formation settles", f.states, lambda s: s in ("secondary/primary", "primary/secondary"), 60)
    if states == "secondary/primary":
        report("pg_autoctl restarted c2's PostgreSQL in place; c2 stays primary, c1 secondary")
    else:
        report("the monitor failed over to c1; c2 rejoined as secondary")
        failover_report(t_kill, "c1")
    S["kill2"] = (t_kill, t_end)
    seen = outage_report(t_kill, t_end)
    no_failed_call_with_the_default(seen, "the postmaster kill")


def test_f_nothing_twice_and_only_the_expected_failures():
    f = S["f"]
    for node in nodes():
        node.execute("INSERT INTO stop DEFAULT VALUES")
    errors = [c.join(60) for c in S["clients"]]
    assert errors == [None] * len(errors), f"a client failed: {errors}"
    (k1, e1), (k2, e2) = S["kill1"], S["kill2"]
    for node in nodes():
        report(*[f"failed calls on {node.name}: {line}" for line in node.column("""
            SELECT count(*) || ' x ' || sqlstate || ' ' || m FROM (SELECT sqlstate,
              regexp_replace(regexp_replace(msg, '\\s+', ' ', 'g'), '(failed: could not connect to server "central"): .*', '\\1: …') AS m
            FROM failed) f GROUP BY sqlstate, m ORDER BY count(*) DESC""")])
        assert node.one("SELECT count(*) FROM pg_foreign_server WHERE srvname = 'central' "
                        f"AND srvoptions::text LIKE '%port={f['c1'].port},{f['c2'].port}%'") == 1, \
            f"{node.name}'s foreign server is as it was created"
        assert node.one("SELECT count(*) FROM failed WHERE seq = 'roomy'") == 0, \
            f"{node.name}: 'roomy' (its buffer outlasts a failover) had no failed call"
        assert node.one(f"""SELECT count(*) FROM failed WHERE client IN
            (SELECT client FROM clients WHERE refill_timeout = '{DEFAULT}')""") == 0, \
            f"{node.name}: no call failed with the default id_gen.refill_timeout ({DEFAULT})"
        # 55000 naming the authority and its last error, or without it while the worker's
        # attempt has not failed yet (a commit waiting for the secondary of a restarted primary).
        assert node.one("""SELECT count(*) FROM failed WHERE NOT (sqlstate = '55000' AND seq = 'k'
            AND msg LIKE 'id_gen: no segment for sequence "k" arrived within 1000 ms%')""") == 0, \
            f"{node.name}: every failed call is a 55000 of 'k' after id_gen.refill_timeout = 1s"
        # The connection failure is a refused connect, or, for a refill in flight when the
        # host died, a connection the server closed (which one a call meets is a matter of timing;
        # a backend that saw its postmaster die first sends "FATAL: terminating connection due
        # to unexpected postmaster exit", which libpq puts before "server closed ...").
        assert node.one(f"""SELECT count(*) FROM failed WHERE ts BETWEEN '{k1}' AND '{e1}'
            AND msg NOT LIKE '%: its authority "central" failed: could not connect to server "central"%'
            AND msg NOT LIKE '%: its authority "central" failed: server closed the connection unexpectedly%'
            AND msg NOT LIKE '%: its authority "central" failed: FATAL:%terminating connection due to unexpected postmaster exit%server closed the connection unexpectedly%'""") == 0, \
            f"{node.name}: in the host loss, every failed call names the authority and the connection failure"
        assert node.one(f"SELECT count(*) FROM failed WHERE NOT (ts BETWEEN '{k1}' AND '{e1}' OR ts BETWEEN '{k2}' AND '{e2}')") == 0, \
            f"{node.name}: calls failed only during the two failovers"
    handed = [tuple(r) for node in nodes() for r in node.execute("SELECT seq, id FROM handed")]
    assert len(handed) > 10000, f"values recorded on both nodes ({len(handed)})"
    assert len(set(handed)) == len(handed), f"no value handed out twice ({len(handed)} values of 2 sequences, 2 nodes, 2 failovers)"
    # Read as the nodes connect: the member that takes writes.
    with psycopg.connect(f"host=127.0.0.1,127.0.0.1 port={f['c1'].port},{f['c2'].port} target_session_attrs=read-write "
                         "user=postgres dbname=postgres connect_timeout=10") as conn:
        final = dict(conn.execute("SELECT name, max_id FROM id_gen.sequences").fetchall())
    beyond = [(s, v) for s, v in handed if v > final[s]]
    assert beyond == [], f"the central's final max_id ({final}) covers all {len(handed)} values handed out"
