"""The multi-node test harness: throwaway PostgreSQL servers on private ports and socket
directories, and the waits a test needs.

What it keeps:

* A `Node` is one server (initdb'd as the postgres OS user, `shared_preload_libraries =
  'id_gen'`, its socket and data under its own directory, listening on no TCP address), or
  a streaming standby of another (`init_standby`, then `promote`).
  `start`, `stop`, `kill9` (SIGKILL of the postmaster and its children, as a crash) and
  `restart` wait until the server is up or down, each within a bound (pg_ctl -t);
  `freeze`/`thaw` (SIGSTOP/SIGCONT) make a server hang without closing its connections.
* Every call runs its statements in a new session in autocommit (`execute`, `one`,
  `sqlstate`, ...), or as a psql script (`script`); a statement that fails raises
  psycopg's error with its SQLSTATE.
* Every wait has a bound: pg_ctl's (60 s), each subprocess's (5 min), a session's connect
  (10 s) and statements (statement_timeout 5 min).
* `poll_until` is the only wait for a condition: it re-runs a probe until it returns what
  is expected and fails with the last value seen (never a fixed sleep, never a silent
  timeout).
* `coordinator_with_shards` builds the usual sharded deployment (a coordinator that is
  the segment authority, shards with a distributed table `orders`); `Background` runs
  statements in a thread whose end is waited for within a bound, `Sleeper` a session that
  sleeps inside them (a lock holder) until released; `routes` reads the route table.
* Server logs are kept in the node's directory; conftest.py prints their tails when a test
  fails.

The PostgreSQL binaries come from PG_BIN (scripts/common.sh exports it for the version
under test).
"""
import contextlib
import os
import random
import signal
import subprocess
import threading
import time

import psycopg

PG_BIN = os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin")
SERVER_CONF = """\
port = {port}
listen_addresses = ''
unix_socket_directories = '{dir}'
shared_preload_libraries = 'id_gen'
max_worker_processes = 16
logging_collector = off
lc_messages = 'C'
shared_buffers = 32MB
max_connections = 40
"""


def _as_postgres(*args, **kwargs):
    """Runs a PostgreSQL binary as the postgres OS user (initdb refuses root), without
    RUST_BACKTRACE (it would put Rust backtraces into error DETAILs)."""
    env = {k: v for k, v in os.environ.items() if k != "RUST_BACKTRACE"}
    return subprocess.run(["runuser", "-u", "postgres", "--", *args], env=env, check=True, timeout=300,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs)


class Node:
    """One throwaway server: `Node(name, dir, port, conf=[...])`, then `start()`."""

    def __init__(self, name, directory, port, conf=()):
        self.name = name
        self.dir = directory
        self.port = port
        self.data = os.path.join(directory, "data")
        self.log = os.path.join(directory, "server.log")
        self.conf = list(conf)

    # --- life cycle -------------------------------------------------------------------------

    def init(self):
        self.stop()
        subprocess.run(["rm", "-rf", self.dir], check=True)
        os.makedirs(self.dir)
        subprocess.run(["chown", "postgres:postgres", self.dir], check=True)
        _as_postgres(f"{PG_BIN}/initdb", "-D", self.data, "-A", "trust", "-U", "postgres", "--no-sync")
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            f.write(SERVER_CONF.format(port=self.port, dir=self.dir))
            for line in self.conf:
                f.write(line + "\n")
        return self

    def init_standby(self, primary, slot):
        """Instead of `init`: a streaming standby of `primary` (pg_basebackup -R over its
        socket, physical slot `slot`, which must exist), with its own port and socket and
        then this node's conf lines."""
        self.stop()
        subprocess.run(["rm", "-rf", self.dir], check=True)
        os.makedirs(self.dir)
        subprocess.run(["chown", "postgres:postgres", self.dir], check=True)
        _as_postgres(f"{PG_BIN}/pg_basebackup", "-h", primary.dir, "-p", str(primary.port), "-U", "postgres",
                     "-D", self.data, "-R", "-S", slot, "-X", "stream", "-c", "fast", "--no-sync")
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            f.write(f"port = {self.port}\nunix_socket_directories = '{self.dir}'\n")
            for line in self.conf:
                f.write(line + "\n")
        return self

    def start(self):
        _as_postgres(f"{PG_BIN}/pg_ctl", "-D", self.data, "-l", self.log, "-w", "-t", "60", "start")
        return self

    def promote(self):
        """A standby becomes a primary (pg_ctl promote, waited for)."""
        _as_postgres(f"{PG_BIN}/pg_ctl", "-D", self.data, "-w", "-t", "60", "promote")
        return self

    def stop(self, mode="fast"):
        """Stops the server if it runs (a pid file of a postmaster that is gone, after a
        kill -9 or a crashed run, is no server); a frozen one is thawed first."""
        self.thaw()
        if os.path.exists(os.path.join(self.data, "postmaster.pid")):
            try:
                _as_postgres(f"{PG_BIN}/pg_ctl", "-D", self.data, "-m", mode, "-w", "-t", "60", "stop")
            except subprocess.CalledProcessError as e:
                if _alive(self.postmaster_pid()):
                    raise AssertionError(f"pg_ctl stop of {self.name} failed: {e.stdout}") from e

    def postmaster_pid(self):
        with open(os.path.join(self.data, "postmaster.pid")) as f:
            return int(f.readline())

    def kill9(self):
        """SIGKILL of the postmaster and of its children (a crash of the host's server, as
        the e2e tests did it); returns once all of them are gone, so that `start` finds no
        old backend holding the shared memory."""
        pid = self.postmaster_pid()
        children = _children(pid)
        for p in [pid, *children]:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        poll_until(f"{self.name}'s postmaster {pid} and its {len(children)} children are gone",
                   lambda: [p for p in [pid, *children] if _alive(p)], [], 30)

    def restart(self):
        self.stop()
        return self.start()

    def freeze(self):
        """SIGSTOP of the postmaster and every child: a server that hangs without closing
        its connections. `thaw` (and `stop`) undo it."""
        pid = self.postmaster_pid()
        # The postmaster first: stopped, it forks no backend after its children are listed.
        # A child may end between the listing and its signal (a session closing): skipped.
        os.kill(pid, signal.SIGSTOP)
        self.frozen = [pid]
        for p in _children(pid):
            try:
                os.kill(p, signal.SIGSTOP)
                self.frozen.append(p)
            except ProcessLookupError:
                pass

    def thaw(self):
        for p in getattr(self, "frozen", []):
            try:
                os.kill(p, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.frozen = []

    def log_tail(self, lines=40):
        try:
            with open(self.log, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    # --- SQL --------------------------------------------------------------------------------

    def dsn(self, dbname="postgres", user="postgres"):
        return f"host={self.dir} port={self.port} dbname={dbname} user={user}"

    def connect(self, dbname="postgres", user="postgres", **kwargs):
        """A session in autocommit, bounded: its connect (10 s) and each statement (5 min,
        a server that stops answering fails the test instead of hanging it)."""
        kwargs.setdefault("connect_timeout", 10)
        kwargs.setdefault("options", "-c statement_timeout=300s")
        return psycopg.connect(self.dsn(dbname, user), autocommit=True, **kwargs)

    def script(self, sql, dbname="postgres"):
        """Runs a script with psql, each statement in its own transaction (as psql does),
        stopping at the first error (raised as AssertionError with psql's output)."""
        env = {k: v for k, v in os.environ.items() if k != "RUST_BACKTRACE"}
        r = subprocess.run([f"{PG_BIN}/psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", self.dir, "-p",
                            str(self.port), "-U", "postgres", "-d", dbname], input=sql, text=True, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
        if r.returncode != 0:
            raise AssertionError(f"psql on {self.name} failed ({r.returncode}):\n{r.stdout}")
        return r.stdout

    def execute(self, *statements, dbname="postgres"):
        """Runs the statements in order in one session; returns the rows of the last one
        (None when it returns none; of a string of several statements, its last). Raises
        the first error."""
        with self.connect(dbname) as conn:
            rows = None
            for s in statements:
                cur = conn.execute(s)
                while cur.nextset():  # a string of several statements: the last one's result
                    pass
                rows = cur.fetchall() if cur.description is not None else None
            return rows

    def one(self, *statements, dbname="postgres"):
        """The first column of the first row of the last statement (None without one)."""
        rows = self.execute(*statements, dbname=dbname)
        return rows[0][0] if rows else None

    def column(self, *statements, dbname="postgres"):
        """The first column of every row of the last statement."""
        return [r[0] for r in self.execute(*statements, dbname=dbname) or []]

    def sqlstate(self, *statements, dbname="postgres"):
        """The SQLSTATE of the first error the statements raise, run in order in one
        session; None when none fails."""
        try:
            self.execute(*statements, dbname=dbname)
        except psycopg.Error as e:
            return e.sqlstate
        return None

    def error(self, *statements, dbname="postgres"):
        """The first error the statements raise (psycopg.Error), or None."""
        try:
            self.execute(*statements, dbname=dbname)
        except psycopg.Error as e:
            return e
        return None

    def notices(self, *statements, dbname="postgres"):
        """The messages of the NOTICEs (and warnings) the statements send, in order."""
        got = []
        with self.connect(dbname) as conn:
            conn.add_notice_handler(lambda d: got.append(d.message_primary))
            for s in statements:
                conn.execute(s)
        return got


REPORTS = []  # figures the tests report (conftest.py prints them at the end of the run)


def report(*lines):
    """Records figures a test measured (latencies, fence times): reported, never asserted
    against a wall-clock limit."""
    REPORTS.extend(lines)


def _children(pid):
    r = subprocess.run(["pgrep", "-P", str(pid)], stdout=subprocess.PIPE, text=True, timeout=30)
    return [int(x) for x in r.stdout.split()]


def coordinator_with_shards(cluster, shards=2, coordinator_conf=(), shard_conf=(), routes=(
        (16383, "shard_1"), (32767, "shard_1"), (65535, "shard_2")), tables=(), distribute=(),
        shard_step=1000, mapping="user 'postgres'", layout="per_range", version=None, given_shards=None):
    """The sharded deployment most tests start from: a coordinator that is also the segment
    authority of sequence 'orders' (step 1000), with postgres_fdw and dblink, routes as
    given, and table orders (id, owner_id, amount, note) distributed by owner over shards
    shard_1 .. shard_<shards>, each a node with `shard_conf` (a list, or a function of the
    shard's number giving one) whose 'orders' sequence (step `shard_step`) takes its segments
    from the coordinator; `tables` are more CREATE TABLE statements, `distribute` more
    distribute_table argument lists (SQL text), `mapping` the options of the coordinator's
    user mappings, `layout` that of orders here; `version` an older version of the extension to
    install everywhere instead of the current one (its install script must be in the
    extension directory; orders is then laid out as that version does); `given_shards`
    ({i: a function that starts shard i and returns (its node, the connection options of
    its foreign server)}) shards started otherwise, in their turn (a failover formation's
    primary, reached by a multi-host server). Returns (coordinator, {i: shard node})."""
    create = f"CREATE EXTENSION id_gen VERSION '{version}'" if version else "CREATE EXTENSION id_gen"
    c = cluster.node("coordinator", conf=list(coordinator_conf))
    route_sql = "\n".join(f"SELECT id_gen.set_route({up}, '{shard}');" for up, shard in routes)
    table_sql = "\n".join(tables)
    c.script(f"""
        {create}; CREATE EXTENSION postgres_fdw; CREATE EXTENSION dblink;
        SELECT id_gen.create_sequence('orders', step => 1000);
        CREATE ROLE id_authority LOGIN;
        GRANT UPDATE (max_id) ON id_gen.sequences TO id_authority;
        ALTER ROLE id_authority SET synchronous_commit = on;
        {route_sql}
        CREATE TABLE orders (id bigint PRIMARY KEY, owner_id bigint NOT NULL, amount bigint NOT NULL DEFAULT 0, note text);
        {table_sql}
    """)
    nodes = {}
    for i in range(1, shards + 1):
        if i in (given_shards or {}):
            s, server = given_shards[i]()
            nodes[i] = s
        else:
            conf = shard_conf(i) if callable(shard_conf) else shard_conf
            s = nodes[i] = cluster.node(f"shard_{i}", conf=list(conf))
            server = f"host '{s.dir}', port '{s.port}'"
        s.script(f"""
            {create}; CREATE EXTENSION postgres_fdw;
            CREATE SERVER central FOREIGN DATA WRAPPER postgres_fdw
              OPTIONS (host '{c.dir}', port '{c.port}', dbname 'postgres', connect_timeout '2',
                       options '-c synchronous_commit=on');
            CREATE USER MAPPING FOR PUBLIC SERVER central OPTIONS (user 'id_authority');
            SELECT id_gen.create_sequence('orders', step => {shard_step}, authority => 'central');
        """)
        c.script(f"""
            CREATE SERVER shard_{i} FOREIGN DATA WRAPPER postgres_fdw
              OPTIONS ({server}, dbname 'postgres', connect_timeout '2');
            CREATE USER MAPPING FOR postgres SERVER shard_{i} OPTIONS ({mapping});
        """)
    orders = "'orders', 'id', 'owner_id', 'orders'" + (f", layout => '{layout}'" if not version else "")
    c.execute("SET client_min_messages = warning",
              *[f"SELECT id_gen.distribute_table({args})" for args in (orders, *distribute)])
    return c, nodes


class Background:
    """Statements run in one session in a thread (a CALL that is killed, a session that
    holds a lock): `join()` waits for them within a bound and returns the error they ended
    with (None when they succeeded)."""

    def __init__(self, node, *statements, dbname="postgres"):
        self.error = None
        self.thread = threading.Thread(target=self._run, args=(node, statements, dbname), daemon=True)
        self.thread.start()

    def _run(self, node, statements, dbname):
        try:
            node.execute(*statements, dbname=dbname)
        except Exception as e:  # noqa: BLE001 - reported by join()
            self.error = e

    def join(self, timeout=300):
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise AssertionError(f"background statements still running after {timeout} s")
        return self.error


class Sleeper(Background):
    """A session that runs `statements`, then sleeps (`SELECT pg_sleep(seconds)`, the marker
    that tells it apart, so give each one its own number), then runs `then`, in a thread: a
    reader holding a lock, a writer whose transaction stays open. Returns once the session
    sleeps (polled, at most `timeout` s). `release()` ends the sleep early
    (pg_terminate_backend) and waits for the thread; `join()` waits for its natural end."""

    def __init__(self, node, *statements, seconds, then=(), timeout=30):
        self.node, self.query = node, f"SELECT pg_sleep({seconds})"
        super().__init__(node, *statements, self.query, *then)
        poll_until(f"a session sleeps in {self.query} on {node.name}", lambda: node.one(
            f"SELECT count(*) FROM pg_stat_activity WHERE query = '{self.query}'"), 1, timeout)

    @property
    def pid(self):
        return self.node.one(f"SELECT pid FROM pg_stat_activity WHERE query = '{self.query}'")

    def release(self):
        self.node.execute(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = '{self.query}'")
        return self.join()


class CoordinatorLoad:
    """Clients of a coordinator's `orders` throughout a change: two writers inserting by
    owner through it (owners 700000.. and 800000.., each committed (id, owner) kept in
    `committed`) and a session running a prepared lookup of `some_id` (which must find one
    row); every error kept. `goes_on(what)` waits for progress of both kinds and fails at
    once with a client's error; `end()` stops them and fails on any error."""

    def __init__(self, coordinator, some_id):
        self.c, self.committed, self.errors, self.lookups = coordinator, [], [], 0
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._write, args=(b,), daemon=True) for b in (700000, 800000)]
        self.threads.append(threading.Thread(target=self._look_up, args=(some_id,), daemon=True))
        for t in self.threads:
            t.start()

    def _write(self, owner_base):
        try:
            with psycopg.connect(self.c.dsn(), autocommit=True) as conn:
                k = 0
                while not self.stop.is_set():
                    k += 1
                    owner = owner_base + k % 50
                    row = conn.execute("INSERT INTO orders (owner_id, amount) VALUES (%s, 1) RETURNING id",
                                       (owner,)).fetchone()
                    self.committed.append((row[0], owner))
        except Exception as e:  # noqa: BLE001 - reported by goes_on() and end()
            self.errors.append(e)

    def _look_up(self, some_id):
        try:
            with psycopg.connect(self.c.dsn(), autocommit=True) as conn:
                conn.execute("PREPARE by_id(bigint) AS SELECT count(*) FROM orders WHERE id = $1")
                while not self.stop.is_set():
                    got = conn.execute(f"EXECUTE by_id({some_id})").fetchone()[0]
                    assert got == 1, f"the prepared lookup of {some_id} found {got} rows"
                    self.lookups += 1
        except Exception as e:  # noqa: BLE001 - reported by goes_on() and end()
            self.errors.append(e)

    def goes_on(self, what, rows=50, lookups=10):
        """Waits until the writers committed `rows` more rows and the lookup ran `lookups`
        more times (60 s at most); fails at once, with the error, when a client failed."""
        n, m = len(self.committed), self.lookups
        progress = poll_until(f"clients make progress {what}", lambda: (
            len(self.committed) - n, self.lookups - m, [str(e) for e in self.errors]),
            lambda v: v[2] != [] or (v[0] >= rows and v[1] >= lookups), 60)
        assert progress[2] == [], f"a client failed {what}: {progress[2]}"

    def end(self):
        self.stop.set()
        for t in self.threads:
            t.join(60)
            assert not t.is_alive(), "a client did not stop within 60 s"
        assert self.errors == [], self.errors


class RetryingWriter:
    """An application writing through `coordinator` in one session, as one should through a
    shard's failover: each transaction inserts one row of a random owner of `owners` into
    orders (routed to its shard by postgres_fdw) and commits. An error before COMMIT is
    retried (nothing was committed), for up to 60 s, and counted by SQLSTATE and message;
    an error of the COMMIT itself is "commit outcome unknown" (the shard may or may not
    have committed), kept with its context. Committed rows are stamped with the time their
    COMMIT returned: `rows` [(time, owner, id)]."""

    def __init__(self, coordinator, owners, seed):
        self.c, self.owners = coordinator, list(owners)
        self.rows, self.unknown, self.retried, self.failed = [], [], {}, []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(random.Random(seed),), daemon=True)
        self.thread.start()

    def _run(self, rng):
        conn = None
        try:
            while not self.done.is_set():
                owner, deadline = rng.choice(self.owners), time.monotonic() + 60
                while not self.done.is_set():
                    if conn is None or conn.closed:
                        conn = self.c.connect()
                        conn.autocommit = False
                    try:
                        row_id = conn.execute("INSERT INTO orders (owner_id) VALUES (%s) RETURNING id",
                                              (owner,)).fetchone()[0]
                    except psycopg.Error as e:
                        try:
                            conn.rollback()
                        except psycopg.Error:  # (our own session broke: a new one)
                            conn.close()
                        if not self._retry(e, deadline):
                            return
                        continue
                    try:
                        conn.commit()
                        self.rows.append((time.monotonic(), owner, row_id))
                    except psycopg.Error as e:
                        self.unknown.append(f"{e.sqlstate} {str(e).strip()} | context: {e.diag.context}")
                    break
        finally:
            if conn is not None:
                conn.close()

    def _retry(self, e, deadline):
        """Counts a failure before COMMIT; whether to retry it (for 60 s)."""
        key = f"{e.sqlstate} {str(e).splitlines()[0][:90]}"
        self.retried[key] = self.retried.get(key, 0) + 1
        if time.monotonic() > deadline:
            self.failed.append(key)
            return False
        self.done.wait(0.1)  # (the pace of the retries, not a wait for a state)
        return True

    def stop(self):
        self.done.set()
        self.thread.join(120)
        assert not self.thread.is_alive(), "a coordinator writer still runs 120 s after its stop"


def routes(coordinator):
    """The route table as `lower-upper@shard,...`, ordered by gene."""
    return coordinator.one("SELECT string_agg(lower_gene || '-' || upper_gene || '@' || shard, ',' ORDER BY lower_gene) "
                           "FROM id_gen.route_ranges")


def owners(node, condition, n, first=1, span=2000000):
    """n owner ids o from first up to first + span for which the SQL `condition` on o (a
    bigint) holds, in order; fails when fewer exist."""
    found = node.column(f"SELECT o FROM generate_series({first}::bigint, {first + span}::bigint) o "
                        f"WHERE {condition} LIMIT {n}")
    assert len(found) == n, f"only {len(found)} of {n} owners from {first} satisfy {condition}"
    return found


def way_back_apply_errors(source, move_id):
    """How many times the way back of reversible move move_id stopped on an error on its
    source (pg_stat_subscription_stats; a healthy way back has none)."""
    return source.one(f"SELECT coalesce(sum(apply_error_count), 0)::int FROM pg_stat_subscription_stats "
                      f"WHERE subname = 'id_gen_back_{move_id}'")


@contextlib.contextmanager
def markers_refused(node, condition):
    """Replication into `node` stops on a move's marker that satisfies `condition` (SQL on
    NEW.marker; the fences' markers are numbered from 1, the probes' from 1,000,000): a
    trigger that fires on applied rows too (ENABLE ALWAYS) refuses it, so the apply worker
    fails on it and starts again every few seconds. Dropped on leaving, whatever happened."""
    node.script(f"""
        CREATE FUNCTION public.refuse_markers() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF {condition} THEN
            RAISE EXCEPTION 'test: this marker is refused';
          END IF;
          RETURN NEW;
        END $$;
        CREATE TRIGGER refuse_markers BEFORE INSERT ON id_gen.move_markers FOR EACH ROW EXECUTE FUNCTION public.refuse_markers();
        ALTER TABLE id_gen.move_markers ENABLE ALWAYS TRIGGER refuse_markers;
    """)
    try:
        yield
    finally:
        node.execute("DROP TRIGGER IF EXISTS refuse_markers ON id_gen.move_markers",
                     "DROP FUNCTION IF EXISTS public.refuse_markers()")


@contextlib.contextmanager
def slow_flip(coordinator, old_phase, new_phase):
    """On a coordinator: an operation's phase going from `old_phase` to `new_phase` (a flip,
    in its fence's transaction: catching_up to cut_over for a move, reversible to reverting
    for a revert) sleeps 60 s before it commits, so that a test can kill the coordinator in
    the fence after the shards changed (kill9, then start, inside the block). The trigger is
    dropped on leaving (the coordinator must be up then)."""
    coordinator.script(f"""
        CREATE FUNCTION public.slow_flip() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF OLD.phase = '{old_phase}' AND NEW.phase = '{new_phase}' THEN
            PERFORM pg_sleep(60);
          END IF;
          RETURN NEW;
        END $$;
        CREATE TRIGGER slow_flip BEFORE UPDATE ON id_gen.cluster_operations FOR EACH ROW EXECUTE FUNCTION public.slow_flip();
    """)
    try:
        yield
    finally:
        coordinator.execute("DROP TRIGGER IF EXISTS slow_flip ON id_gen.cluster_operations",
                            "DROP FUNCTION IF EXISTS public.slow_flip()")


LOGICAL = ["wal_level = logical", "max_wal_senders = 10", "max_replication_slots = 10"]


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def poll_until(what, probe, expected, timeout, interval=0.2):
    """Calls probe() until it returns `expected` (or, when expected is callable, a value
    for which expected(value) is true); fails after `timeout` seconds with the last value
    seen (or the last exception the probe raised). Returns that value."""
    test = expected if callable(expected) else (lambda v: v == expected)
    deadline = time.monotonic() + timeout
    last = "(never ran)"
    while True:
        try:
            last = probe()
            if test(last):
                return last
        except Exception as e:  # a probe against a server that is not up yet
            last = f"{type(e).__name__}: {e}"
        if time.monotonic() >= deadline:
            want = "a value it accepts" if callable(expected) else repr(expected)
            raise AssertionError(f"{what}: expected {want} within {timeout} s, last value {last!r}")
        time.sleep(interval)
