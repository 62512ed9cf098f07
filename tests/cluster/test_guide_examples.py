"""The SQL examples of docs/guide/scale-out.md, run on real servers: a central authority, a
coordinator and three shards (scripts/check-doc-examples.sh runs the examples of one server and
leaves these, each after a line `<!-- example on a cluster: NAME -->`, to this module).

The blocks run in the order of the guide, each with psql on the coordinator (as a user would
paste them), on the state the guide's text says it starts from: the module prepares that
state where an earlier block did not leave it (`PREPARE`) and checks the routes each block
leaves where the text says what they are (`ROUTES_AFTER`). A block passes when the errors it
raised are exactly those it documents (`-- ERROR:  <message>` lines), as in
check-doc-examples.sh.

The setup block is three parts, by its comments: "on every shard" (run on each shard, and on
the coordinator too: "the same central and sequence"), "on the coordinator", and "on every
shard, once the tables exist". Its placeholder hosts become the servers' sockets (`HOSTS`);
the passwords stay (the servers trust local connections). The central is made by the block
of docs/guide/sequences.md it names ("One ID space for many servers").
"""
import os
import re
import subprocess

import pytest

from harness import LOGICAL, PG_BIN, routes

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
S = {}
ROUTES_AFTER = {
    "moves": "0-32767@shard_1,32768-65535@shard_1",
    "recipes": "0-16383@shard_1,16384-32767@shard_2,32768-65535@shard_1",
    "splits": "0-16383@shard_1,16384-32767@shard_2,32768-65535@shard_1",
    "rolling cut-over": "0-3276@shard_2,3277-65535@shard_1",
    "reversible": "0-2047@shard_1,2048-65535@shard_1",
}


def blocks(path, marker):
    """The ```sql blocks of a Markdown file right after `<!-- MARKER: NAME -->`, as (name, line, sql)."""
    out, name = [], None
    lines = open(os.path.join(ROOT, path)).read().split("\n")
    i = 0
    while i < len(lines):
        m = re.fullmatch(rf"<!-- {marker}: (.*) -->", lines[i])
        if m:
            name = m.group(1)
        elif lines[i] == "```sql" and name is not None:
            end = lines.index("```", i + 1)
            out.append((name, i + 1, "\n".join(lines[i + 1:end])))
            i, name = end, None
        elif lines[i].strip():
            name = None
        i += 1
    return out


def psql(node, sql):
    """Runs sql with psql on node as a user would (each statement in its own transaction, on
    past errors); returns the error lines it printed, sorted."""
    env = {k: v for k, v in os.environ.items() if k != "RUST_BACKTRACE"}
    r = subprocess.run([f"{PG_BIN}/psql", "-X", "-q", "-v", "VERBOSITY=default", "-h", node.dir, "-p", str(node.port),
                        "-U", "postgres", "-d", "postgres"], input=sql, text=True, env=env, timeout=600,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert r.returncode == 0, f"psql on {node.name} ended with {r.returncode}:\n{r.stdout}"
    return sorted(m.group(1) for m in re.finditer(r"^(?:psql:\S*: )?(ERROR:  .*)$", r.stdout, re.M)), r.stdout


def run_block(node, name, line, sql):
    want = sorted(m.group(1) for m in re.finditer(r"^-- (ERROR:  .*)$", sql, re.M))
    got, out = psql(node, sql)
    assert got == want, f"docs/guide/scale-out.md:{line} ({name}) on {node.name}: errors {got}, documented {want}\n{out}"


def on_hosts(sql):
    for placeholder, node in S["hosts"].items():
        sql = re.sub(rf"host '{placeholder}', dbname '[a-z]+'", f"host '{node.dir}', port '{node.port}', dbname 'postgres'", sql)
    return sql


def own_everything(shard):
    """Every route range on `shard`, as one range (moves and merges, through the coordinator)."""
    c = S["c"]
    for lo, hi in c.execute(f"SELECT lower_gene, upper_gene FROM id_gen.route_ranges WHERE shard <> '{shard}' ORDER BY 1"):
        c.execute("SET client_min_messages = warning", f"CALL id_gen.move_genes({lo}, {hi}, '{shard}')")
    while (upper := c.one("SELECT min(upper_gene) FROM id_gen.route_ranges WHERE upper_gene < 65535")) is not None:
        c.execute("SET client_min_messages = warning", f"CALL id_gen.merge_routes({upper})")
    assert routes(c) == f"0-65535@{shard}", "the state the guide's example starts from"


PREPARE = {
    "rolling cut-over": lambda: own_everything("shard_1"),
    "reversible": lambda: (own_everything("shard_1"),
                           S["c"].execute("SET client_min_messages = warning", "CALL id_gen.split_route(2047)")),
}
GUIDE = blocks("docs/guide/scale-out.md", "example on a cluster")


def test_the_guide_has_its_cluster_examples():
    assert [name for name, _, _ in GUIDE] == ["setup", "moves", "recipes", "splits", "rebalance", "rolling cut-over",
                                              "reversible"], "the examples of the scale-out guide this module runs"


def test_setup(cluster):
    central = cluster.node("central")
    c = cluster.node("coordinator")
    shards = [cluster.node(f"shard_{i}", conf=LOGICAL) for i in (1, 2, 3)]
    S.update(c=c, hosts={"id-db": central, "db1": shards[0], "db2": shards[1], "db3": shards[2]})
    (_, line, sql), = [b for b in blocks("docs/guide/sequences.md", "example on its own server") if b[0] == "central"]
    run_block(central, "central, from docs/guide/sequences.md", line, sql)
    for s in shards:  # (the shard administrator, a superuser there, and the application's role)
        s.execute("CREATE ROLE shard_admin SUPERUSER LOGIN", "CREATE ROLE app LOGIN")
    name, line, sql = GUIDE[0]
    parts = re.split(r"^(-- on .*)$", on_hosts(sql), flags=re.M)
    every_shard, coordinator, later = parts[2], parts[4], parts[6]
    assert [parts[1].startswith("-- on every shard ("), parts[3].startswith("-- on the coordinator"),
            parts[5].startswith("-- on every shard, once")] == [True] * 3, f"the parts of the setup block: {parts[1::2]}"
    for s in shards:
        run_block(s, "setup: on every shard", line, every_shard)
    run_block(c, "setup: on the coordinator", line, every_shard + coordinator)
    for s in shards:
        run_block(s, "setup: on every shard, once the tables exist", line, later)
    assert routes(c) == "0-32767@shard_1,32768-65535@shard_2", "the routes of the setup"
    assert c.one("SELECT count(*) FROM orders WHERE customer_id = 42") == 1 \
        and S["hosts"]["db1"].one("SELECT count(*) FROM orders") + S["hosts"]["db2"].one("SELECT count(*) FROM orders") == 1, \
        "the row the setup inserted is on one shard and read through the coordinator"
    assert S["hosts"]["db1"].one("SELECT has_table_privilege('app', 'orders', 'INSERT')"), "app may write the shard's table"


@pytest.mark.parametrize("name", [name for name, _, _ in GUIDE[1:]])
def test_block(name):
    (_, line, sql), = [b for b in GUIDE if b[0] == name]
    if name in PREPARE:
        PREPARE[name]()
    run_block(S["c"], name, line, on_hosts(sql))
    if name in ROUTES_AFTER:
        assert routes(S["c"]) == ROUTES_AFTER[name], f"the routes after the guide's example {name}"
    assert S["c"].one("SELECT count(*) FROM id_gen.operations WHERE phase NOT IN ('done', 'aborted', 'reverted')") == 0, \
        f"every operation of the example {name} ended"
    assert S["c"].one("SELECT count(*) FROM orders WHERE customer_id = 42") == 1, "the setup's row is there, read through the coordinator"
