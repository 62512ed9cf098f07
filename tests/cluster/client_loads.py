"""The five routing clients' conformance tools (`clients/<language>/conformance`, docs/routing-
protocol.md §6) run as loads by the multi-node tests (test_conformance, test_shard_failover).

Invariants: each tool writes its own table (`conf_<language>`) and log (one `owner,id` line
per committed transaction); a load ends when its stop file appears, never on time; a tool
that exits early or badly fails the test with its stderr; every wait is a poll that fails
with the last value seen. `IDG_CONFORMANCE_CLIENTS="python node"` narrows the clients while
developing one.
"""
import os
import subprocess

from harness import poll_until

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CLIENTS = tuple(os.environ.get("IDG_CONFORMANCE_CLIENTS", "python rust java go node").split())


def tool(language):
    return os.path.join(REPO, "clients", language, "conformance")


def tcp_dsn(node):
    return f"host=127.0.0.1 port={node.port} user=postgres dbname=postgres"


def build_tools():
    """Each tool builds on first use: here, not inside a timed scenario."""
    for language in CLIENTS:
        built = subprocess.run([tool(language), "genes"], input="i:42\n", capture_output=True, text=True, timeout=1200)
        assert (built.returncode, built.stdout) == (0, "16043\n"), f"{language}: {built.stderr[-3000:]}"


def table(language):
    return f"conf_{language}"


class Loads:
    """The tools' `load`, started together into `work` (a new directory) with the routes
    read from `routes` and the shards' DSNs `shards` ({name: DSN}), each on its own table and
    log; `extra` are more flags for every tool. `stop()` ends them by the stop file and
    returns each one's counts."""

    def __init__(self, work, routes, shards, *extra):
        self.work = work
        self.work.mkdir()
        self.stop_file = self.work / "stop"
        self.procs = {}
        for lang in CLIENTS:
            args = [tool(lang), "load", "--routes", routes,
                    *[a for shard, dsn in shards.items() for a in ("--shard", f"{shard}={dsn}")],
                    "--table", table(lang), "--sequence", "orders", "--owners", "1000", "--seconds", "900",
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

    def logged_rows(self, lang):
        """The log as a set of (owner, id)."""
        rows = set()
        for line in self.log(lang).read_text().splitlines():
            owner, row_id = line.split(",")
            rows.add((int(owner), int(row_id)))
        return rows

    def each_logs_more(self, rows, what, timeout=120):
        """Polls until every tool logged `rows` more committed transactions than now."""
        start = {lang: self.logged(lang) for lang in CLIENTS}
        for lang in CLIENTS:
            poll_until(f"{lang} committed {rows} more transactions {what}", lambda: self.alive_count(lang),
                       lambda n: n >= start[lang] + rows, timeout)

    def alive_count(self, lang):
        """The tool's logged transactions; fails if it exited."""
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


    def kill(self):
        """Ends every tool still running (a test that failed before stop())."""
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(30)


def parse_counts(reads_line, committed_line):
    """`reads R empty E unknown U` and `committed N failed M retries X` as a dict."""
    words = reads_line.split() + committed_line.split()
    assert words[0::2] == ["reads", "empty", "unknown", "committed", "failed", "retries"], (reads_line, committed_line)
    return {k: int(v) for k, v in zip(words[0::2], words[1::2])}
