"""A pg_auto_failover formation for the multi-node tests (test_authority_failover: the central
authority; test_shard_failover: a shard): a monitor and two data members, a primary and its
synchronous secondary, run by pg_autoctl as the postgres OS user on loopback, each `pg_autoctl
run` a session of its own so that a host can die whole (its keeper, postmaster and backends).

Invariants: failover timers are shortened for tests (MONITOR_CONF; the keepers'
network_partition_timeout stays below the monitor's primary_demote_timeout, as with the
defaults); every wait is a poll that fails with the last value seen; `stop()` ends every
session it started, by SIGKILL if pg_autoctl stop does not, and returns once they are gone.

pg_auto_failover is packaged by Debian for the server of bookworm only (PostgreSQL 15;
scripts/common.sh installs it): `AVAILABLE` says whether it is there for the server in PG_BIN.
"""
import os
import shutil
import signal
import subprocess

from harness import PG_BIN, Node, poll_until

AVAILABLE = os.path.exists(os.path.join(PG_BIN, "..", "lib", "pgautofailover.so")) and shutil.which("pg_autoctl") is not None
MISSING = (f"pg_auto_failover is not installed for the server in {PG_BIN} (Debian packages it for "
           "PostgreSQL 15 only; scripts/common.sh installs it there)")

# Failover timers, shortened for the tests (defaults: a node is unhealthy 20 s after its last
# report, the old primary gets 30 s to demote itself, health checks every 5 s). The keepers'
# network_partition_timeout (a primary that cannot reach the monitor nor its standby demotes
# itself after it) stays below primary_demote_timeout, as with the defaults (20 s < 30 s).
MONITOR_CONF = ["pgautofailover.health_check_period = 1000", "pgautofailover.health_check_timeout = 1000",
                "pgautofailover.health_check_max_retries = 1", "pgautofailover.health_check_retry_delay = 500",
                "pgautofailover.node_considered_unhealthy_timeout = 3000",
                "pgautofailover.primary_demote_timeout = 3000", "pgautofailover.startup_grace_period = 2000"]
NETWORK_PARTITION_TIMEOUT = "2"


class Formation:
    """A formation under `root` (PGDATAs, sockets, pg_autoctl's config and state, logs):
    `monitor` and the data members `members` (first the primary, then its secondary), each a
    harness Node for its queries (socket in `root`, TCP on 127.0.0.1, which pg_autoctl
    needs), on ports port, port + 1, ..."""

    def __init__(self, root, port, members=("c1", "c2")):
        subprocess.run(["rm", "-rf", root], check=True)
        os.makedirs(os.path.join(root, "run"))
        os.chmod(os.path.join(root, "run"), 0o700)
        subprocess.run(["chown", "-R", "postgres:postgres", root], check=True)
        self.root = root
        self.data_members = tuple(members)
        self.members = {}
        for i, name in enumerate(("monitor", *members)):
            m = Node(name, root, port + i)
            m.data, m.log = os.path.join(root, name), os.path.join(root, name + ".log")
            self.members[name] = m
        self.sessions = {}

    def __getitem__(self, name):
        return self.members[name]

    def autoctl(self, *args):
        env = {k: v for k, v in os.environ.items() if k != "RUST_BACKTRACE"}
        return subprocess.run(["runuser", "-u", "postgres", "--", "env", f"XDG_CONFIG_HOME={self.root}/config",
                               f"XDG_DATA_HOME={self.root}/share", f"XDG_RUNTIME_DIR={self.root}/run",
                               f"PGHOST={self.root}", "pg_autoctl", *args],
                              env=env, check=True, timeout=180, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def instance(self, name, *settings):
        """A small PostgreSQL instance for pg_autoctl to adopt. postgresql.auto.conf is read
        after pg_autoctl's include (which would size shared_buffers from the machine's RAM),
        and pg_basebackup copies it to the secondary."""
        subprocess.run(["runuser", "-u", "postgres", "--", f"{PG_BIN}/initdb", "-D", self[name].data, "-A", "trust",
                        "-U", "postgres", "--no-sync"], check=True, timeout=120, stdout=subprocess.DEVNULL)
        with open(os.path.join(self[name].data, "postgresql.auto.conf"), "a") as f:
            for line in ("shared_buffers = '32MB'", "max_connections = 30", f"unix_socket_directories = '{self.root}'",
                         "lc_messages = 'C'", *settings):
                f.write(line + "\n")

    def create(self, name, *args):
        try:
            self.autoctl("create", *args, "--pgdata", self[name].data, "--pgport", str(self[name].port),
                         "--auth", "trust", "--no-ssl", "--pgctl", f"{PG_BIN}/pg_ctl")
        except subprocess.CalledProcessError as e:
            raise AssertionError(f"pg_autoctl create {args[0]} ({name}) failed:\n{e.stdout}") from e

    def start(self, *primary_settings):
        """The monitor, then the primary (an instance with `primary_settings`, which its
        secondary inherits) and its secondary; returns once the monitor reports them
        primary and secondary and the secondary replicates synchronously."""
        self.instance("monitor", *MONITOR_CONF)
        self.create("monitor", "monitor", "--hostname", "127.0.0.1")
        self.autoctl("config", "set", "--pgdata", self["monitor"].data, "postgresql.listen_addresses", "127.0.0.1")
        self.run("monitor")
        monitor_uri = f"postgres://autoctl_node@127.0.0.1:{self['monitor'].port}/pg_auto_failover?sslmode=disable"
        primary, secondary = self.data_members
        self.instance(primary, *primary_settings)
        for name in self.data_members:
            self.create(name, "postgres", "--listen", "127.0.0.1", "--hostname", "127.0.0.1", "--name", name,
                        "--monitor", monitor_uri)
            self.autoctl("config", "set", "--pgdata", self[name].data, "timeout.network_partition_timeout",
                         NETWORK_PARTITION_TIMEOUT)
            self.run(name)
        poll_until(f"the formation is up: {primary} primary, {secondary} secondary", self.states,
                   "primary/secondary", 60)
        assert self.sync_state(primary) == "quorum", \
            f"{secondary} replicates synchronously ({self[primary].one('SHOW synchronous_standby_names')})"

    def run(self, name):
        """`pg_autoctl run` of a member, in a new session (its id is the process's pid)."""
        env = {k: v for k, v in os.environ.items() if k != "RUST_BACKTRACE"}
        with open(self[name].log, "a") as log:
            p = subprocess.Popen(["runuser", "-u", "postgres", "--", "env", f"XDG_CONFIG_HOME={self.root}/config",
                                  f"XDG_DATA_HOME={self.root}/share", f"XDG_RUNTIME_DIR={self.root}/run",
                                  f"PGHOST={self.root}", "pg_autoctl", "run", "--pgdata", self[name].data],
                                 env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.sessions[name] = p

    def session_pids(self, name):
        p = self.sessions.get(name)
        if p is None:
            return []
        p.poll()  # (reaps our own child, runuser, once it ended: no zombie is counted)
        r = subprocess.run(["pgrep", "-s", str(p.pid)], stdout=subprocess.PIPE, text=True, timeout=30)
        return [int(x) for x in r.stdout.split()]

    def kill_host(self, name):
        """kill -9 of everything a member's `pg_autoctl run` started (a host that dies)."""
        for pid in self.session_pids(name):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.sessions[name].wait(30)
        poll_until(f"{name}'s pg_autoctl, postmaster and backends are gone", lambda: self.session_pids(name), [], 30)

    def state(self, name):
        """The state a member last reported to the monitor."""
        return self["monitor"].one(f"SELECT reportedstate FROM pgautofailover.node WHERE nodename = '{name}'",
                                   dbname="pg_auto_failover")

    def states(self):
        """The data members' reported states, 'primary/secondary' style, in `members` order."""
        return "/".join(str(self.state(name)) for name in self.data_members)

    def goal(self, name):
        return self["monitor"].one(f"SELECT goalstate FROM pgautofailover.node WHERE nodename = '{name}'",
                                   dbname="pg_auto_failover")

    def sync_state(self, primary):
        return self[primary].one("SELECT string_agg(sync_state, ',') FROM pg_stat_replication "
                                 "WHERE application_name LIKE 'pgautofailover_standby_%'")

    def events_since(self, t0):
        """The monitor's events since t0 (a timestamptz text): 'seconds after t0  description'."""
        return self["monitor"].column(f"""
            SELECT round(extract(epoch FROM min(eventtime) - '{t0}'::timestamptz)::numeric, 1) || ' s  ' || description
            FROM pgautofailover.event WHERE eventtime >= '{t0}'::timestamptz
            GROUP BY description ORDER BY min(eventid)""", dbname="pg_auto_failover")

    def took_writes_at(self, name, t0):
        """When, after t0, `name` first reported wait_primary or primary (it takes writes)."""
        return self["monitor"].one(f"""SELECT min(eventtime)::text FROM pgautofailover.event
            WHERE eventtime >= '{t0}'::timestamptz AND nodename = '{name}'
              AND reportedstate IN ('wait_primary', 'primary')""", dbname="pg_auto_failover")

    def stop(self):
        for name in (*self.data_members, "monitor"):
            if name in self.sessions:
                try:
                    self.autoctl("stop", "--pgdata", self[name].data)
                except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
                    print(f"pg_autoctl stop {name}: {e}")
        for name in (*self.data_members, "monitor"):
            try:
                poll_until(f"{name}'s pg_autoctl session ends", lambda n=name: self.session_pids(n), [], 10)
            except AssertionError:
                for pid in self.session_pids(name):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:  # (it ended meanwhile)
                        pass
        for name in (*self.data_members, "monitor"):
            poll_until(f"{name}'s pg_autoctl session is gone", lambda n=name: self.session_pids(n), [], 30)
