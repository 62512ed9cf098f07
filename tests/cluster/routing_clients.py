"""The three routing clients as processes, for tests/cluster/test_routing.py and
test_pooler.py: the Python load generator (routing_load.py), the Rust client's tool
(clients/rust, `id_gen_client_tool bench`) and the Node.js client (node_client.js), started
together against one coordinator and a set of shard DSNs, stopped together by a file, their
results read back."""
import json
import os
import subprocess
import sys

from harness import poll_until

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RUST_TOOL = os.path.join(REPO, "target", "clients", "debug", "id_gen_client_tool")
NODE_CLIENT = ["node", os.path.join(os.path.dirname(__file__), "node_client.js")]


def build():
    """The Rust client's tool and the Node.js client's dependencies (tier 1 makes both too)."""
    subprocess.run(["cargo", "build", "-q", "-p", "id_gen_client", "--bin", "id_gen_client_tool"],
                   cwd=REPO, env=dict(os.environ, CARGO_TARGET_DIR=os.path.join(REPO, "target", "clients")), check=True,
                   timeout=1800)
    subprocess.run(["bash", "-c", "source scripts/common.sh && ensure_node_client"], cwd=REPO, check=True, timeout=600)


class Clients:
    """Starts the three: Python writers and readers of `owners_file` / `readers_file`, Rust and
    Node.js inserters for owners 1..owners (rows noted 'rust' and 'node'); `env` for the Python
    one (IDG_POOL_KWARGS). `stop()` ends them all and returns their exit codes."""

    def __init__(self, coordinator_dsn, shards, work, owners, env=None):
        self.work, self.stop_file = work, work / "stop"
        shards_json = json.dumps(shards)
        self.procs = {}
        self._spawn("load", [sys.executable, os.path.join(os.path.dirname(__file__), "routing_load.py"), coordinator_dsn,
                             shards_json, str(work / "owners"), str(work / "readers"), "120", str(self.stop_file)], env)
        self._spawn("rust", [RUST_TOOL, "bench", "--routes-dsn", coordinator_dsn,
                             *[a for name, dsn in shards.items() for a in ("--shard", f"{name}={dsn}")],
                             "--table", "orders", "--owners", str(owners), "--seconds", "1000", "--mode", "insert",
                             "--stop-file", str(self.stop_file)])
        self._spawn("node", [*NODE_CLIENT, "load", coordinator_dsn, shards_json, str(owners), str(self.stop_file)])

    def _spawn(self, name, args, env=None):
        with open(self.work / f"{name}.json", "w") as out, open(self.work / f"{name}.err", "w") as err:
            self.procs[name] = subprocess.Popen(args, stdout=out, stderr=err, env=env)

    def stop(self):
        self.stop_file.touch()
        try:
            return {name: p.wait(timeout=120) for name, p in self.procs.items()}
        except subprocess.TimeoutExpired:
            for p in self.procs.values():
                p.kill()
            raise

    def result(self, name):
        return json.loads((self.work / f"{name}.json").read_text())

    def errors(self, name):
        return (self.work / f"{name}.err").read_text()


def move_and_split_under_load(c, work, rows_per_phase, other_rows):
    """While the clients write: the Python clients insert `rows_per_phase` rows, genes 0 ..
    16383 move to shard_2, as many rows more, the range of gene 57343 splits after it, as many
    more; the Rust and Node.js clients insert `other_rows` each. Polls on the rows inserted
    (the Python clients' have no note, the others' say 'rust' and 'node'), so that no minimum
    depends on how fast the machine is."""
    poll_until("the Python load is ready", lambda: "ready" in (work / "load.err").read_text(), True, 30)
    python_rows = lambda: c.one("SELECT count(*) FROM orders WHERE note IS NULL")  # noqa: E731
    before = poll_until(f"the Python clients inserted {rows_per_phase} rows", python_rows, lambda n: n >= rows_per_phase, 60)
    c.execute("CALL id_gen.move_genes(0, 16383, 'shard_2')")
    assert c.one("SELECT shard FROM id_gen.route_map WHERE lower_gene = 0") == "shard_2", "genes 0 .. 16383 are on shard_2"
    after_move = poll_until(f"{rows_per_phase} more after the move", python_rows, lambda n: n >= before + rows_per_phase, 60)
    c.execute("CALL id_gen.split_route(57343)")
    assert c.one("SELECT count(*) FROM id_gen.route_map WHERE upper_gene = 57343 OR lower_gene = 57344") == 2, \
        "the range of gene 57343 is split there"
    poll_until(f"{rows_per_phase} more after the split", python_rows, lambda n: n >= after_move + rows_per_phase, 60)
    for note in ("rust", "node"):
        poll_until(f"the {note} client inserted {other_rows} rows",
                   lambda: c.one(f"SELECT count(*) FROM orders WHERE note = '{note}'"), lambda n: n >= other_rows, 60)


def write_while_genes_move(c, shards, work, owners, rows_per_phase, other_rows, env=None):
    """The three clients (Clients) writing through `shards` during move_and_split_under_load;
    asserts that each exited 0 and returns them, for their results."""
    clients = Clients(c.dsn(), shards, work, owners, env)
    try:
        move_and_split_under_load(c, work, rows_per_phase, other_rows)
    finally:
        codes = clients.stop()
    assert codes == {"load": 0, "rust": 0, "node": 0}, {n: clients.errors(n)[-2000:] for n, rc in codes.items() if rc}
    return clients
