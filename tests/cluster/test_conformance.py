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
from harness import LOGICAL, coordinator_with_shards, poll_until, report

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# All five; IDG_CONFORMANCE_CLIENTS="python node" narrows a run while developing one.
CLIENTS = tuple(os.environ.get("IDG_CONFORMANCE_CLIENTS", "python rust java go node").split())
TCP = ["listen_addresses = '127.0.0.1'", "max_connections = 80"]
S = {}


def tool(language):
    return os.path.join(REPO, "clients", language, "conformance")


def tcp_dsn(node):
    return f"host=127.0.0.1 port={node.port} user=postgres dbname=postgres"


@pytest.fixture(scope="module", autouse=True)
def servers(cluster, tmp_path_factory):
    for language in CLIENTS:  # each builds on first use: here, not inside a timed scenario
        built = subprocess.run([tool(language), "genes"], input="i:42\n", capture_output=True, text=True, timeout=1200)
        assert (built.returncode, built.stdout) == (0, "16043\n"), f"{language}: {built.stderr[-3000:]}"
    tables = [f"CREATE TABLE conf_{lang} (id bigint PRIMARY KEY, owner_id bigint NOT NULL);" for lang in CLIENTS]
    # (track_functions: which claim the clients send, test b)
    c, shards = coordinator_with_shards(cluster, coordinator_conf=TCP, shard_conf=[*LOGICAL, *TCP, "track_functions = 'all'"],
                                        tables=tables,
                                        distribute=[f"'conf_{lang}', 'id', 'owner_id', 'orders'" for lang in CLIENTS])
    S.update(c=c, nodes=shards, direct={f"shard_{i}": tcp_dsn(shards[i]) for i in (1, 2)},
             work=tmp_path_factory.mktemp("conformance"))
    yield
    for d in S.get("bouncers", ()):
        stop_bouncer(d)


class Loads:
    """The five tools' `load`, started together on their own tables and logs; `stop()`
    ends them by the stop file and returns each one's counts."""

    def __init__(self, name, shards, *extra):
        self.work = S["work"] / name
        self.work.mkdir()
        self.stop_file = self.work / "stop"
        self.procs = {}
        for lang in CLIENTS:
            args = [tool(lang), "load", "--routes", tcp_dsn(S["c"]),
                    *[a for shard, dsn in shards.items() for a in ("--shard", f"{shard}={dsn}")],
                    "--table", f"conf_{lang}", "--sequence", "orders", "--owners", "1000", "--seconds", "900",
                    "--log", str(self.log(lang)), "--stop-file", str(self.stop_file), *extra]
            with open(self.work / f"{lang}.out", "w") as out, open(self.work / f"{lang}.err", "w") as err:
                self.procs[lang] = subprocess.Popen(args, stdout=out, stderr=err)

    def log(self, lang):
        return self.work / f"{lang}.log"

    def logged(self, lang):
        try:
            return self.log(lang).read_text().count("\n")
        except FileNotFoundError:
            return 0

    def each_logs_more(self, rows, what):
        """Polls until every tool logged `rows` more committed transactions than now."""
        start = {lang: self.logged(lang) for lang in CLIENTS}
        for lang in CLIENTS:
            poll_until(f"{lang} committed {rows} more transactions {what}", lambda: self._alive_count(lang),
                       lambda n: n >= start[lang] + rows, 120)

    def _alive_count(self, lang):
        rc = self.procs[lang].poll()
        assert rc is None, f"{lang} exited ({rc}): {(self.work / f'{lang}.err').read_text()[-2000:]}"
        return self.logged(lang)

    def stop(self):
        self.stop_file.touch()
        results = {}
        try:
            for lang, p in self.procs.items():
                rc = p.wait(timeout=120)
                out = (self.work / f"{lang}.out").read_text().splitlines()
                err = (self.work / f"{lang}.err").read_text()
                assert rc == 0 and len(out) >= 2, f"{lang} exited {rc}: {out[-3:]} {err[-2000:]}"
                results[lang] = parse_counts(out[-2], out[-1])
                results[lang]["stderr"] = err[-1500:]
        finally:
            for p in self.procs.values():
                if p.poll() is None:
                    p.kill()
        return results

    def rows_and_logs(self, lang):
        """(the table's rows, this load's log, the logs of every load of the module so far:
        the tables keep the rows of earlier scenarios) as sets of (owner, id)."""
        rows = {(o, i) for o, i in S["c"].execute(f"SELECT owner_id, id FROM conf_{lang}")}
        log = set()
        for line in self.log(lang).read_text().splitlines():
            owner, row_id = line.split(",")
            log.add((int(owner), int(row_id)))
        logs = S.setdefault("logs", {}).setdefault(lang, set())
        logs |= log
        return rows, log, logs


def parse_counts(reads_line, committed_line):
    """`reads R empty E unknown U` and `committed N failed M retries X` as a dict."""
    words = reads_line.split() + committed_line.split()
    assert words[0::2] == ["reads", "empty", "unknown", "committed", "failed", "retries"], (reads_line, committed_line)
    return {k: int(v) for k, v in zip(words[0::2], words[1::2])}


def check_clean(loads, results, what):
    """No failure, no empty read, each log equal to its table's rows, ids of their owners' genes."""
    c = S["c"]
    for lang, r in results.items():
        assert (r["failed"], r["empty"]) == (0, 0) and r["reads"] > 0, f"{what}: {lang}: {r}"
        rows, log, logs = loads.rows_and_logs(lang)
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
    loads = Loads("moves", S["direct"])
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
    loads = Loads("stale", S["direct"], "--no-listen", "--refresh-interval-ms", "0")
    try:
        move_quarter_and_split(loads, "shard_1", None)
    finally:
        results = loads.stop()
    check_clean(loads, results, "stale routes")
    for lang, r in results.items():
        assert r["retries"] >= 1, f"{lang} never met IG001 with stale routes: {r}"


def test_d_a_shard_restarted():
    loads = Loads("restart", S["direct"])
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
        rows, log, logs = loads.rows_and_logs(lang)
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
    loads = Loads("pooler", pooled)
    try:
        move_quarter_and_split(loads, "shard_2", 24575)
    finally:
        results = loads.stop()
    check_clean(loads, results, "through PgBouncer")


def test_f_the_bench_mode_runs_each_path():
    """`conformance bench` (bench/bench.sh --routing times it): transactions and lookups,
    through the Router and on the tool's own pool, each runs and counts what it did. (No
    figure is checked: a count above zero and the rows the transactions added.)"""
    c = S["c"]
    shards = [a for shard, dsn in S["direct"].items() for a in ("--shard", f"{shard}={dsn}")]
    for lang in CLIENTS:
        before = c.one(f"SELECT count(*) FROM conf_{lang}")
        done = 0
        for mode in ("tx", "lookup"):
            for direct in ((), ("--direct",)):
                out = subprocess.run([tool(lang), "bench", "--routes", tcp_dsn(c), *shards, "--table", f"conf_{lang}",
                                      "--sequence", "orders", "--owners", "1000", "--seconds", "0.2", "--mode", mode,
                                      *direct], capture_output=True, text=True, timeout=120)
                last = out.stdout.strip().splitlines()[-1:] or [""]
                words = last[0].split()
                assert out.returncode == 0 and words[:1] == ["ops"] and int(words[1]) > 0, \
                    f"{lang} bench {mode} {direct}: {out.returncode} {last} {out.stderr[-1500:]}"
                if mode == "tx":
                    done += int(words[1])
        assert c.one(f"SELECT count(*) FROM conf_{lang}") >= before + done, f"{lang}: the bench's transactions are there"
