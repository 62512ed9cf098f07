"""Fixtures of the multi-node tests (tests/cluster): `cluster`, a factory of throwaway
servers shared by the tests of one module (they run in file order and build on each
other's state), stopped when the module ends; the tails of their logs are printed under
every failed test. Ports: IDG_CLUSTER_PORT (default 24600) and up, one block of 20 per
module, below Linux's ephemeral range (32768-60999): a port there can be the local end of
some client's connection (or of one in TIME_WAIT, for a minute), and a server started later
on it fails to bind (seen after the pg_auto_failover modules, whose keepers connect often).
Directories under IDG_CLUSTER_DIR (default /tmp/idg_cluster)/<module>/, so that two runs at
once need only other values of both."""
import os

import pytest

from harness import REPORTS, Node

_ACTIVE = []          # nodes of the running module, for the failure report
_MODULES = []         # modules seen, for their port blocks


class Cluster:
    """Makes nodes: `cluster.node("coordinator", conf=[...])` initdb's and starts one;
    `cluster.node("standby", standby_of=primary, slot="s1")` makes a streaming standby."""

    def __init__(self, module_name, port_base):
        self.root = os.path.join(os.environ.get("IDG_CLUSTER_DIR", "/tmp/idg_cluster"), module_name)
        self.port_base = port_base
        self.nodes = {}

    def node(self, name, conf=(), standby_of=None, slot=None):
        """A new server, started: initdb'd, or with standby_of (and slot, a physical
        replication slot there) a streaming standby of that node."""
        port = self.port_base + len(self.nodes)
        n = Node(name, os.path.join(self.root, name), port, conf)
        (n.init() if standby_of is None else n.init_standby(standby_of, slot)).start()
        self.nodes[name] = n
        _ACTIVE.append(n)
        return n

    def stop_all(self):
        for n in self.nodes.values():
            try:
                n.stop(mode="immediate")
            except Exception as e:  # noqa: BLE001 - teardown reports and goes on
                print(f"stopping {n.name}: {e}")
            if n in _ACTIVE:
                _ACTIVE.remove(n)


@pytest.fixture(scope="module")
def cluster(request):
    name = request.module.__name__.rsplit(".", 1)[-1]
    _MODULES.append(name)
    base = int(os.environ.get("IDG_CLUSTER_PORT", "24600")) + 20 * (len(_MODULES) - 1)
    c = Cluster(name, base)
    yield c
    c.stop_all()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for n in _ACTIVE:
            report.sections.append((f"server log of {n.name} (last lines)", n.log_tail()))


def pytest_terminal_summary(terminalreporter):
    if REPORTS:
        terminalreporter.section("figures the tests report")
        for line in REPORTS:
            terminalreporter.write_line(line)
