"""One conformance suite for the five routing clients (issue 28; docs/routing-protocol.md §6):
each client's own tool (`clients/<language>/conformance`: Python, Rust, Java, Go, Node.js)
through the same scenarios, against a coordinator and two shards reached over TCP. Every
tool runs 4 writers through its Router, logs `owner,id` per committed transaction into its
own table (conf_<language>), and reads owners it wrote by their id range with `execute`.

(a) gene vectors: every tool computes the genes of clients/gene-vectors.json's 30,000
    owners (bigint, text, uuid), as the extension does.
(b) the five write and read while a quarter of the genes moves and a range splits: 0 failed
    transactions or reads, no empty read of an owner that has rows, each log equal to its
    table's rows, every id of its owner's gene.
(c) stale clients (no LISTEN, no poll) while the quarter moves back: each meets IG001
    (retries), re-reads, and still fails nothing and reads nothing empty.
(d) a shard restarted under the five (pg_ctl restart -m fast): a connection lost before
    COMMIT is retried; the only failures allowed are "commit outcome unknown", every logged
    row is there, and at most that many rows are there unlogged.
(e) (b) again with both shards behind PgBouncer 1.18 in transaction mode (TCP), the
    coordinator reached directly.

Each load ends when its stop file appears; the test waits on the rows each tool logged
(polls that fail with the last value), never on time. The figures go to the test report.
"""
import json
import os
import subprocess

import pytest

from bouncer import start_bouncer, stop_bouncer
from client_loads import CLIENTS, REPO, Loads, build_tools, table, tcp_dsn, tool
from harness import LOGICAL, coordinator_with_shards, poll_until, report

TCP = ["listen_addresses = '127.0.0.1'", "max_connections = 80"]
S = {}


@pytest.fixture(scope="module", autouse=True)
def servers(cluster, tmp_path_factory):
    build_tools()
    tables = [f"CREATE TABLE {table(lang)} (id bigint PRIMARY KEY, owner_id bigint NOT NULL);" for lang in CLIENTS]
    # (track_functions: which claim the clients send, test b)
    c, shards = coordinator_with_shards(cluster, coordinator_conf=TCP, shard_conf=[*LOGICAL, *TCP, "track_functions = 'all'"],
                                        tables=tables,
                                        distribute=[f"'{table(lang)}', 'id', 'owner_id', 'orders'" for lang in CLIENTS])
    S.update(c=c, nodes=shards, direct={f"shard_{i}": tcp_dsn(shards[i]) for i in (1, 2)},
             work=tmp_path_factory.mktemp("conformance"))
    yield
    for d in S.get("bouncers", ()):
        stop_bouncer(d)


def loads_of(name, shards, *extra):
    """The five tools' loads of one scenario (client_loads.Loads), in their own directory."""
    return Loads(S["work"] / name, tcp_dsn(S["c"]), shards, *extra)


def rows_and_logs(loads, lang):
    """(the table's rows, this load's log, the logs of every load of the module so far:
    the tables keep the rows of earlier scenarios) as sets of (owner, id)."""
    rows = {(o, i) for o, i in S["c"].execute(f"SELECT owner_id, id FROM {table(lang)}")}
    log = loads.logged_rows(lang)
    logs = S.setdefault("logs", {}).setdefault(lang, set())
    logs |= log
    return rows, log, logs


def check_clean(loads, results, what):
    """No failure, no empty read, each log equal to its table's rows, ids of their owners' genes."""
    c = S["c"]
    for lang, r in results.items():
        assert (r["failed"], r["empty"]) == (0, 0) and r["reads"] > 0, f"{what}: {lang}: {r}"
        rows, log, logs = rows_and_logs(loads, lang)
        assert len(log) == r["committed"], f"{what}: {lang} logged {len(log)} of {r['committed']} commits"
        unknown = S.get("unknown", {}).get(lang, 0)  # rows of "commit outcome unknown" (test d)
        assert logs <= rows and len(rows - logs) <= unknown, \
            f"{what}: {lang}: {len(rows - logs)} rows not logged ({unknown} outcomes unknown), " \
            f"{len(logs - rows)} logged rows missing"
        assert c.one(f"SELECT count(*) FROM conf_{lang} WHERE (id >> 47) <> id_gen.shard_gene(owner_id)") == 0, \
            f"{what}: {lang}: an id not of its owner's gene"
    report(f"conformance, {what}: " + ", ".join(
        f"{lang} {r['committed']} tx / {r['reads']} reads / {r['retries']} retries" for lang, r in results.items()))


def test_a_gene_vectors():
    with open(os.path.join(REPO, "clients", "gene-vectors.json")) as f:
        vectors = json.load(f)
    kinds = {"bigint": "i", "text": "t", "uuid": "u"}
    lines, want = [], []
    for kind, prefix in kinds.items():
        for owner, gene in vectors[kind]:
            lines.append(f"{prefix}:{owner}")
            want.append(gene)
    assert len(want) == 30000, len(want)
    for lang in CLIENTS:
        got = subprocess.run([tool(lang), "genes"], input="\n".join(lines) + "\n", capture_output=True, text=True,
                             timeout=300)
        assert got.returncode == 0, f"{lang}: {got.stderr[-2000:]}"
        genes = [int(g) for g in got.stdout.split()]
        bad = [(lines[i], want[i], g) for i, g in enumerate(genes) if g != want[i]]
        assert len(genes) == len(want) and not bad, f"{lang}: {len(genes)} genes, {len(bad)} differ: {bad[:3]}"


def move_quarter_and_split(loads, target, split_at):
    c = S["c"]
    loads.each_logs_more(50, "before the move")
    c.execute(f"CALL id_gen.move_genes(0, 16383, '{target}')")
    assert c.one("SELECT shard FROM id_gen.route_map WHERE lower_gene = 0") == target, "genes 0 .. 16383 moved"
    loads.each_logs_more(50, "after the move")
    if split_at is not None:
        c.execute(f"CALL id_gen.split_route({split_at})")
        assert c.one(f"SELECT count(*) FROM id_gen.route_map WHERE upper_gene = {split_at}") == 1, "the range split"
        loads.each_logs_more(50, "after the split")


def test_b_the_five_write_and_read_while_genes_move_and_a_range_splits():
    loads = loads_of("moves", S["direct"])
    try:
        move_quarter_and_split(loads, "shard_2", 57343)
    finally:
        results = loads.stop()
    check_clean(loads, results, "moves and a split")
    # Every client found the shards of routing protocol 2 and carried its claims on BEGIN:
    # the function id_gen.route_claim never ran. (Once the shards' statistics count a call of
    # gene_order_id for every commit, the same backends' calls of route_claim are counted too.)
    def calls(function):
        return sum(S["nodes"][i].one(f"""SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions
                                          WHERE schemaname = 'id_gen' AND funcname = '{function}'""") for i in (1, 2))
    committed = sum(r["committed"] for r in results.values())
    poll_until(f"the shards' statistics count gene_order_id for the {committed} commits",
               lambda: calls("gene_order_id"), lambda n: n >= committed, 30)
    assert calls("route_claim") == 0, "every client claims on BEGIN on shards of routing protocol 2"


def test_c_stale_clients_meet_ig001_and_go_on():
    loads = loads_of("stale", S["direct"], "--no-listen", "--refresh-interval-ms", "0")
    try:
        move_quarter_and_split(loads, "shard_1", None)
    finally:
        results = loads.stop()
    check_clean(loads, results, "stale routes")
    for lang, r in results.items():
        assert r["retries"] >= 1, f"{lang} never met IG001 with stale routes: {r}"


def test_d_a_shard_restarted():
    loads = loads_of("restart", S["direct"])
    try:
        loads.each_logs_more(50, "before the restart")
        S["nodes"][2].restart()
        loads.each_logs_more(50, "after the restart")
    finally:
        results = loads.stop()
    for lang, r in results.items():
        assert r["failed"] == r["unknown"] and r["empty"] == 0, \
            f"{lang}: only 'commit outcome unknown' may fail: {r}"
        S.setdefault("unknown", {})[lang] = r["unknown"]
        rows, log, logs = rows_and_logs(loads, lang)
        assert logs <= rows, f"{lang}: {len(logs - rows)} committed rows lost"
        assert len(rows - logs) <= r["unknown"], f"{lang}: {len(rows - logs)} rows unlogged, {r['unknown']} unknown"
    report("conformance, a shard restarted: " + ", ".join(
        f"{lang} {r['committed']} tx, {r['unknown']} outcome unknown, {r['retries']} retries" for lang, r in results.items()))


def test_e_the_same_through_pgbouncer_in_transaction_mode():
    cluster_root = os.path.dirname(S["nodes"][1].dir)
    dirs = [os.path.join(cluster_root, f"bouncer_{i}") for i in (1, 2)]
    S["bouncers"] = dirs
    port_base = S["c"].port  # the coordinator is the first node of the module's block of 20
    pooled = {f"shard_{i}": start_bouncer(dirs[i - 1], port_base + 16 + i, S["nodes"][i], tcp=True) for i in (1, 2)}
    loads = loads_of("pooler", pooled)
    try:
        move_quarter_and_split(loads, "shard_2", 24575)
    finally:
        results = loads.stop()
    check_clean(loads, results, "through PgBouncer")


def test_f_the_bench_mode_runs_each_path():
    """`conformance bench` (bench/bench.sh --routing times it): transactions and lookups,
    through the Router, on the tool's own pool, and both side by side, each runs and counts
    what it did. (No figure is checked: a count above zero of each side and the rows the
    transactions added.)"""
    c = S["c"]
    shards = [a for shard, dsn in S["direct"].items() for a in ("--shard", f"{shard}={dsn}")]
    for lang in CLIENTS:
        before = c.one(f"SELECT count(*) FROM conf_{lang}")
        done = 0
        for mode in ("tx", "lookup"):
            for direct in ((), ("--direct",), ("--side-by-side",)):
                out = subprocess.run([tool(lang), "bench", "--routes", tcp_dsn(c), *shards, "--table", f"conf_{lang}",
                                      "--sequence", "orders", "--owners", "1000", "--seconds", "0.2", "--mode", mode,
                                      *direct], capture_output=True, text=True, timeout=120)
                last = out.stdout.strip().splitlines()[-1:] or [""]
                words = last[0].split()
                both = direct == ("--side-by-side",)
                assert out.returncode == 0 and words[:1] == ["ops"] and int(words[1]) > 0 and \
                    len(words) == (8 if both else 4) and (not both or words[4] == "direct_ops" and int(words[5]) > 0), \
                    f"{lang} bench {mode} {direct}: {out.returncode} {last} {out.stderr[-1500:]}"
                if mode == "tx":
                    done += int(words[1]) + (int(words[5]) if both else 0)
        assert c.one(f"SELECT count(*) FROM conf_{lang}") >= before + done, f"{lang}: the bench's transactions are there"
