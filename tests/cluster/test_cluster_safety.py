"""The sharded deployment as a hostile DBA and bad luck would try it (a coordinator that is
also the segment authority, two shards with wal_level = logical). (Ported from
tests/e2e/14_cluster_safety.sh with the same assertions; its fixed sleeps and silent waits
became polls that fail with the last value.)

(a) no lost rows in route changes: a coordinator writer and a direct shard writer each
    commit while set_route splits their range; pgbench through the coordinator while two
    sessions split and merge ranges at once: every committed row is there, once.
(b) no superuser code for table owners: look-alike operators and functions in public on
    every node (better matches for what id_gen compares and calls) never run; a table whose
    CHECK calls a function its non-superuser owner wrote is refused (42501), nobody became
    superuser.
(c) no secrets: a move and a failed move (a slot of its name exists on the source) leave the
    user mapping's password in no server log, no pg_stat_activity snapshot a pg_monitor role
    took meanwhile, no dry_run output and no id_gen.moves row; the pre-existing slot is left
    alone.
(d) names: a table named like another's partition stem gets its own partitions; a 63-byte
    CJK name with a sequence works; a table name with $d$ moves.
(e) an UPDATE that moves a row to an owner of another gene is refused (23514).
(f) grants: partitions created by a move carry the parent's grants; a GRANT after
    distribute_table reaches the partitioned table; renames are refused (0A000); DROP
    EXTENSION during a move is refused (55006).
(g) clear errors: genes past 65535 (22003), a serial id and a temp table (0A000), a move to
    the segment authority (22023).
(h) the coordinator killed (kill -9) while a move's fence is up: after its restart the move
    supervisor lifts the fence by itself, direct writes work again, and the same CALL
    finishes the move; a shard whose coordinator is gone for good clears what moves left.
"""
import os
import subprocess
import threading

import pytest

import harness
from harness import LOGICAL, PG_BIN, Background, Sleeper, poll_until

S = {}
SECRET = "S3cr3t-pw-9f1c"
# The roles and traps every node gets: mallory may create in public (as the database owner
# may on PG15, and everyone on clusters upgraded from PG14), owns schema mal, and plants an
# operator = (oid, regclass) that makes her superuser when a superuser calls it.
NODE_SQL = """
CREATE ROLE mallory LOGIN; CREATE ROLE app LOGIN; CREATE ROLE monitor LOGIN IN ROLE pg_monitor;
GRANT CREATE ON SCHEMA public TO mallory;
CREATE SCHEMA mal AUTHORIZATION mallory;
CREATE TABLE public.pwned (who text, at timestamptz DEFAULT now());
GRANT INSERT ON public.pwned TO PUBLIC;
SET ROLE mallory;
CREATE FUNCTION public.trap(a oid, b oid) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.pwned (who) VALUES (current_user);
  IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
    EXECUTE 'ALTER ROLE mallory SUPERUSER';
  END IF;
  RETURN a = b;
END $$;
CREATE FUNCTION public.trap_oid_regclass(a oid, b regclass) RETURNS boolean LANGUAGE sql AS 'SELECT public.trap(a, b::oid)';
CREATE FUNCTION public.trap_regclass_oid(a regclass, b oid) RETURNS boolean LANGUAGE sql AS 'SELECT public.trap(a::oid, b)';
CREATE OPERATOR public.= (LEFTARG = oid, RIGHTARG = regclass, FUNCTION = public.trap_oid_regclass);
CREATE OPERATOR public.= (LEFTARG = regclass, RIGHTARG = oid, FUNCTION = public.trap_regclass_oid);
-- Functions that would be a better match than pg_catalog's for a name argument.
CREATE FUNCTION public.quote_ident(n name) RETURNS text LANGUAGE sql AS 'SELECT CASE WHEN public.trap(0, 0) THEN pg_catalog.quote_ident(n::text) END';
CREATE FUNCTION public.md5(n name) RETURNS text LANGUAGE sql AS 'SELECT CASE WHEN public.trap(0, 0) THEN pg_catalog.md5(n::text) END';
CREATE FUNCTION public.left(n name, k integer) RETURNS text LANGUAGE sql AS 'SELECT CASE WHEN public.trap(0, 0) THEN pg_catalog.left(n::text, k) END';
CREATE FUNCTION mal.ok(bigint) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
    EXECUTE 'ALTER ROLE mallory SUPERUSER';
  END IF;
  RETURN true;
END $$;
RESET ROLE;
"""
SLOW_FIRST_MARKER = """
CREATE FUNCTION public.slow_first_marker() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.marker = 1 THEN PERFORM pg_sleep({seconds}); END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER slow_first_marker BEFORE INSERT ON id_gen.move_markers FOR EACH ROW EXECUTE FUNCTION public.slow_first_marker();
ALTER TABLE id_gen.move_markers ENABLE ALWAYS TRIGGER slow_first_marker;
"""


@pytest.fixture(scope="module", autouse=True)
def servers(cluster, tmp_path_factory):
    c = cluster.node("coordinator")
    c.script(f"""
        CREATE EXTENSION id_gen; CREATE EXTENSION postgres_fdw; CREATE EXTENSION dblink;
        {NODE_SQL}
        SELECT id_gen.create_sequence('orders', step => 1000);
        SELECT id_gen.grant_usage('orders', 'app');
        CREATE ROLE id_authority LOGIN;
        GRANT UPDATE (max_id) ON id_gen.sequences TO id_authority;
        ALTER ROLE id_authority SET synchronous_commit = on;
        SELECT id_gen.set_route(4095, 'shard_2');
        SELECT id_gen.set_route(65535, 'shard_1');
        CREATE TABLE accounts (id bigint PRIMARY KEY, owner_id bigint NOT NULL, balance bigint NOT NULL DEFAULT 0);
        CREATE TABLE ledger (id bigint PRIMARY KEY, owner_id bigint NOT NULL, amount bigint NOT NULL, note text);
    """)
    S.update(c=c, work=str(tmp_path_factory.mktemp("safety")))
    for i in (1, 2):
        s = S[i] = cluster.node(f"shard_{i}", conf=LOGICAL)
        s.script(f"""
            CREATE EXTENSION id_gen; CREATE EXTENSION postgres_fdw;
            {NODE_SQL}
            CREATE SERVER central FOREIGN DATA WRAPPER postgres_fdw
              OPTIONS (host '{c.dir}', port '{c.port}', dbname 'postgres', connect_timeout '2', options '-c synchronous_commit=on');
            CREATE USER MAPPING FOR PUBLIC SERVER central OPTIONS (user 'id_authority');
            SELECT id_gen.create_sequence('orders', step => 1000, authority => 'central');
        """)
        c.script(f"""
            CREATE SERVER shard_{i} FOREIGN DATA WRAPPER postgres_fdw
              OPTIONS (host '{s.dir}', port '{s.port}', dbname 'postgres', connect_timeout '2');
            CREATE USER MAPPING FOR postgres SERVER shard_{i} OPTIONS (user 'postgres', password '{SECRET}');
            CREATE USER MAPPING FOR PUBLIC SERVER shard_{i} OPTIONS (user 'app', password_required 'false');
        """)
    yield


def routes():
    return harness.routes(S["c"])


def owner_in(lower, upper):
    return S["c"].one(f"SELECT o FROM generate_series(1, 1000000) o WHERE id_gen.shard_gene(o::bigint) BETWEEN {lower} AND {upper} LIMIT 1")


def fence_triggers(shard):
    return shard.one("SELECT count(*) FROM pg_trigger WHERE tgname = 'id_gen_move_fence' AND tgenabled <> 'D'")


# --- (b, g) refusals before anything is distributed -------------------------------------------

def test_b_g_refusals():
    c = S["c"]
    c.script("""
        SET ROLE mallory;
        CREATE TABLE mal.t (id bigint PRIMARY KEY, owner_id bigint, CHECK (mal.ok(id)));
        RESET ROLE;
        CREATE TABLE serial_ids (id bigserial PRIMARY KEY, owner_id bigint);
    """)
    e = c.error("SELECT id_gen.distribute_table('mal.t', 'id')")
    assert e is not None and e.sqlstate == "42501" and e.diag.message_primary.startswith(
        "id_gen: cannot distribute mal.t: it runs function mal.ok(bigint) (owned by mallory, who is not a superuser)"), \
        f"a table whose CHECK calls its non-superuser owner's function: 42501, naming the function: {e!r}"
    assert c.sqlstate("SELECT id_gen.distribute_table('serial_ids', 'id')") == "0A000", "a serial id: 0A000"
    assert c.sqlstate("CREATE TEMP TABLE tmp_ids (id bigint PRIMARY KEY)", "SELECT id_gen.distribute_table('tmp_ids', 'id')") \
        == "0A000", "a temporary table: 0A000"
    assert c.sqlstate("CALL id_gen.move_genes(65536, 65536, 'shard_1')") == "22003", "genes past 65535: 22003"
    c.execute("SET client_min_messages = warning", "SELECT id_gen.distribute_table('accounts', 'id')",
              "SELECT id_gen.distribute_table('ledger', 'id', 'owner_id', 'orders')")
    for i in (1, 2):  # the shard admin lets app at the tables (existing partitions included)
        S[i].execute("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO app")


# --- (a) writers committing while set_route splits their range ---------------------------------

def test_a_rows_committed_during_route_changes_are_kept():
    c, s1, s2 = S["c"], S[1], S[2]
    o_low = owner_in(0, 1000)
    writer = Sleeper(c, "BEGIN", f"INSERT INTO ledger (owner_id, amount, note) VALUES ({o_low}, 777, 'W')",
                     seconds=3, then=["COMMIT"])
    c.execute("SELECT id_gen.set_route(2047, 'shard_2', copy_rows => true)")
    assert writer.join() is None, f"the coordinator writer failed: {writer.error!r}"
    assert (c.one("SELECT count(*) FROM ledger WHERE note = 'W'"), s2.one("SELECT count(*) FROM ledger WHERE note = 'W'")) == (1, 1), \
        "a row committed through the coordinator while set_route split its range is on its shard"
    writer = Sleeper(s2, "BEGIN", f"INSERT INTO ledger (id, owner_id, amount, note) VALUES "
                                  f"(id_gen.gene_order_id('orders', {o_low}::bigint), {o_low}, 555, 'D')",
                     seconds=3, then=["COMMIT"])
    c.execute("SELECT id_gen.set_route(1023, 'shard_2', copy_rows => true)")
    assert writer.join() is None, f"the direct shard writer failed: {writer.error!r}"
    assert (c.one("SELECT count(*) FROM ledger WHERE note = 'D'"), s2.one("SELECT count(*) FROM ledger WHERE note = 'D'")) == (1, 1), \
        "a row committed directly on the shard while set_route split its range survives"

    # pgbench through the coordinator while two sessions change routes at once.
    script = os.path.join(S["work"], "ins.sql")
    with open(script, "w") as f:
        f.write("\\set o random(1, 200000)\nINSERT INTO ledger (owner_id, amount, note) VALUES (:o, 1, 'pgb');\n")
    bench = subprocess.Popen([f"{PG_BIN}/pgbench", "-n", "-h", c.dir, "-p", str(c.port), "-U", "postgres", "-c", "4",
                              "-j", "2", "-T", "8", "-f", script, "postgres"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pgb = lambda: c.one("SELECT count(*) FROM ledger WHERE note = 'pgb'")  # noqa: E731
    poll_until("pgbench committed rows before the route changes", pgb, lambda n: n >= 50, 30)
    for pair in (("SELECT id_gen.set_route(511, 'shard_2', copy_rows => true)", "SELECT id_gen.set_route(3071, 'shard_2', copy_rows => true)"),
                 ("SELECT id_gen.drop_route(511, copy_rows => true)", "SELECT id_gen.set_route(1535, 'shard_2', copy_rows => true)")):
        n = pgb()
        changes = [Background(c, sql) for sql in pair]
        for b in changes:
            assert b.join() is None, f"a concurrent route change failed: {b.error!r}"
        poll_until("pgbench committed rows after the route changes", pgb, lambda m: m >= n + 50, 30)
    out, _ = bench.communicate(timeout=120)
    assert bench.returncode == 0, f"pgbench failed:\n{out[-2000:]}"
    committed = int(next(line for line in out.splitlines() if line.startswith("number of transactions actually processed:")).split(":")[1].split("/")[0])
    failed = next((line for line in out.splitlines() if line.startswith("number of failed transactions:")), "none")
    assert committed > 100, "pgbench committed transactions during the route changes"
    assert routes() == "0-1023@shard_2,1024-1535@shard_2,1536-2047@shard_2,2048-3071@shard_2,3072-4095@shard_2,4096-65535@shard_1", \
        "the routes after two splits, then a merge and a split at once"
    on_shards = s1.one("SELECT count(*) FROM ledger WHERE note = 'pgb'") + s2.one("SELECT count(*) FROM ledger WHERE note = 'pgb'")
    assert (pgb(), on_shards, c.one("SELECT count(DISTINCT id) FROM ledger WHERE note = 'pgb'")) == (committed,) * 3, \
        f"every one of the {committed} committed rows is there once ({failed})"
    assert c.one("SELECT bool_and(in_step) FROM id_gen.distribution"), "partitions and shards in step with the routes"


# --- (e) an UPDATE may not move a row to an owner of another gene ------------------------------

def test_e_an_update_cannot_give_a_row_another_gene():
    c = S["c"]
    row_id = c.one("SELECT id FROM ledger WHERE note = 'W'")
    assert c.sqlstate(f"UPDATE ledger SET owner_id = {owner_in(30000, 31000)} WHERE id = {row_id}") == "23514", \
        "an UPDATE that gives a row an owner of another gene while keeping its id: 23514"


# --- (d) names -------------------------------------------------------------------------------------

def test_d_names():
    c = S["c"]
    long = "a_very_long_table_name_for_the_collision_test"
    c.execute("SET client_min_messages = warning", f"CREATE TABLE {long} (id bigint PRIMARY KEY, v int)",
              f"INSERT INTO {long} SELECT id_gen.compose_id(g % 65536, g), g FROM generate_series(1, 301) g",
              f"SELECT id_gen.distribute_table('{long}', 'id')")
    stem = c.one(f"SELECT shard_stem FROM id_gen.distributed_tables WHERE table_name = '{long}'")
    c.execute("SET client_min_messages = warning", f'CREATE TABLE "{stem}" (id bigint PRIMARY KEY, v int)',
              f"""SELECT id_gen.distribute_table('"{stem}"', 'id')""")
    assert (c.one(f'SELECT count(*) FROM "{stem}"'), c.one(f"SELECT count(*) FROM {long}")) == (0, 301), \
        f"a table named like another's partition stem ({stem}) gets partitions of its own"
    cjk = "表" * 21
    c.execute("SET client_min_messages = warning", f'CREATE TABLE "{cjk}" (id bigint PRIMARY KEY, owner_id bigint NOT NULL)',
              f"""SELECT id_gen.distribute_table('"{cjk}"', 'id', 'owner_id', 'orders')""",
              f'INSERT INTO "{cjk}" (owner_id) SELECT g FROM generate_series(1, 5) g')
    assert c.one(f'SELECT count(*) FROM "{cjk}"') == 5, "a 63-byte CJK table name with a sequence: distributed, rows go in and come back"
    c.execute("SET client_min_messages = warning", 'CREATE TABLE "we$d$ird" (id bigint PRIMARY KEY, v int)',
              """SELECT id_gen.distribute_table('"we$d$ird"', 'id')""",
              'INSERT INTO "we$d$ird" VALUES (id_gen.compose_id(2500, 1), 1)')


# --- (c) secrets during a move and a failed move; the $d$ table moves --------------------------

class ActivitySpy:
    """pg_monitor snapshots of pg_stat_activity on every node, taken in a loop until stopped."""

    def __init__(self, nodes):
        self.lines, self.stop, self.nodes = [], threading.Event(), nodes
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        conns = [n.connect(user="monitor") for n in self.nodes]
        try:
            while not self.stop.is_set():
                for conn in conns:
                    rows = conn.execute("SELECT pid, application_name, query FROM pg_stat_activity WHERE query <> ''").fetchall()
                    self.lines.extend(" | ".join(map(str, r)) for r in rows)
                self.stop.wait(0.05)
        finally:
            for conn in conns:
                conn.close()

    def finish(self):
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive(), "the pg_stat_activity spy did not stop"
        return self.lines


def test_c_no_secret_leaks_during_moves():
    c, s1, s2 = S["c"], S[1], S[2]
    spy = ActivitySpy([c, s1, s2])
    dry = "\n".join(c.notices("CALL id_gen.move_genes(2048, 3071, 'shard_1', dry_run => true)"))
    c.execute("CALL id_gen.move_genes(2048, 3071, 'shard_1')")
    assert (c.one('SELECT v FROM "we$d$ird" WHERE id = id_gen.compose_id(2500, 1)'), s1.one('SELECT count(*) FROM "we$d$ird"')) == (1, 1), \
        "a table named with $d$ moved with the others"
    next_move = c.one("SELECT max(move_id) FROM id_gen.shard_moves") + 1
    s2.execute(f"SELECT pg_create_logical_replication_slot('id_gen_move_{next_move}', 'pgoutput')")
    e = c.error("CALL id_gen.move_genes(1024, 1535, 'shard_1')")
    assert e is not None and e.sqlstate == "42710", f"a move whose slot name was taken: not the expected error: {e!r}"
    assert (s2.one(f"SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'id_gen_move_{next_move}'"),
            c.one(f"SELECT phase FROM id_gen.moves WHERE move_id = {next_move}")) == (1, "aborted"), \
        "a failed move (a slot of its name existed) rolled back and left that slot alone"
    s2.execute(f"SELECT pg_drop_replication_slot('id_gen_move_{next_move}')")
    activity = spy.finish()
    assert len(activity) > 50, "pg_monitor snapshots of pg_stat_activity taken during the moves"
    assert any("id_gen.shard_" in line for line in activity), "the snapshots caught id_gen at work (an id_gen.shard_* call)"
    texts = {"pg_stat_activity snapshots": "\n".join(activity), "dry_run output": dry,
             "id_gen.moves": "\n".join(map(str, c.execute("SELECT * FROM id_gen.moves")))}
    for n in (c, s1, s2):
        with open(n.log, errors="replace") as f:
            texts[f"{n.name}'s server log"] = f.read()
    leaks = [where for where, text in texts.items() if SECRET in text]
    assert leaks == [], "the password is in no server log, pg_stat_activity snapshot, dry_run output or id_gen.moves row"


# --- (f) grants, renames, DROP EXTENSION -------------------------------------------------------------

def test_f_grants_renames_and_drop_extension():
    c = S["c"]
    c.execute("GRANT SELECT, INSERT ON ledger TO app")
    assert c.one("SELECT has_table_privilege('app', 'ledger_shards', 'INSERT')"), "a GRANT after distribute_table reaches the partitioned table"
    o_moved = owner_in(2048, 3071)
    assert c.one("SET ROLE app", f"INSERT INTO ledger (owner_id, amount, note) VALUES ({o_moved}, 1, 'app') "
                                 "RETURNING id_gen.shard_of(id) BETWEEN 2048 AND 3071"), \
        "app inserts into moved genes (the new partition on the target carries the parent's grants)"
    assert (c.sqlstate("ALTER TABLE ledger RENAME TO ledger2"), c.sqlstate("ALTER TABLE ledger_shards RENAME TO x")) == ("0A000", "0A000"), \
        "renaming a distributed table (or what is behind it) is refused"
    c.execute("INSERT INTO id_gen.shard_moves (lower_gene, upper_gene, source_shard, target_shard, phase) "
              "VALUES (4096, 65535, 'shard_1', 'shard_2', 'copying')")
    assert c.sqlstate("DROP EXTENSION id_gen CASCADE") == "55006", "DROP EXTENSION while a move is unfinished: 55006"
    c.execute("DELETE FROM id_gen.shard_moves WHERE phase = 'copying'")
    c.execute(f"CREATE SERVER central_self FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '{c.dir}', port '{c.port}', dbname 'postgres')",
              "INSERT INTO id_gen.sequences (name, max_id, step, min_step, max_step, buffer_seconds, authority) "
              "VALUES ('remote_seq', 0, 100, 100, 1000, 30, 'central_self')")
    assert c.sqlstate("CALL id_gen.move_genes(1024, 1535, 'central_self')") == "22023", "a move to the segment authority: 22023"


# --- (h) the coordinator killed while the fence is up ------------------------------------------------

def test_h_the_coordinator_killed_while_a_fence_is_up():
    c, s1, s2 = S["c"], S[1], S[2]
    s1.script(SLOW_FIRST_MARKER.format(seconds=6))
    o_fenced = owner_in(1024, 1535)
    move = Background(c, "CALL id_gen.move_genes(1024, 1535, 'shard_1')")
    poll_until("the move's fence is up on the source", lambda: fence_triggers(s2), lambda n: n > 0, 15, interval=0.05)
    c.kill9()
    move.join()
    direct = "INSERT INTO ledger (id, owner_id, amount, note) VALUES (id_gen.gene_order_id('orders', {o}::bigint), {o}, 1, '{note}')"
    assert s2.sqlstate(direct.format(o=o_fenced, note="during")) == "IG002", "with the coordinator gone, the fence refuses direct writes (IG002)"
    c.start()
    # (The supervisor lifts the fence on the shard first and records it when its pass
    # commits: the record is what to wait for.)
    poll_until("after the coordinator's restart the move supervisor lifts the fence by itself and records it", lambda: c.one(
        "SELECT phase || '/' || source_fenced || '/' || coalesce(recovered_by LIKE 'lifted the fence%', false) FROM id_gen.moves "
        "WHERE lower_gene = 1024 AND phase <> 'aborted'"), "catching_up/false/true", 30)
    assert fence_triggers(s2) == 0, "the source's fence is gone"
    assert s2.sqlstate(direct.format(o=o_fenced, note="after")) is None, "direct writes of those genes work again"
    c.execute("CALL id_gen.move_genes(1024, 1535, 'shard_1')")
    assert (c.one("SELECT count(*) FROM ledger WHERE note = 'after'"), s1.one("SELECT count(*) FROM ledger WHERE note = 'after'")) == (1, 1), \
        "the same CALL finished the move, with the row written after the fence was lifted"
    s1.execute("DROP TRIGGER slow_first_marker ON id_gen.move_markers", "DROP FUNCTION public.slow_first_marker()")


def test_h_a_shard_whose_coordinator_is_gone_forgets_its_moves():
    s2 = S[2]
    s2.script("""
        -- (A superuser's own ad hoc SQL is hijacked too with public first: the test pins its path.)
        SET search_path = pg_catalog, pg_temp;
        CREATE PUBLICATION id_gen_move_999 FOR TABLE id_gen.move_markers;
        SELECT pg_create_logical_replication_slot('id_gen_move_999', 'pgoutput');
        SELECT id_gen.shard_fence(999, 'shard_1', ARRAY[(SELECT format('%I.%I', n.nspname, c.relname)
          FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE i.inhparent = 'public.ledger'::regclass LIMIT 1)]);
    """)
    assert s2.one('SELECT string_agg(action, \', \' ORDER BY object COLLATE "C") FROM id_gen.shard_forget_moves()') \
        == "fence lifted, dropped, dropped", "shard_forget_moves lifts a stray fence and drops a stray publication and slot"
    assert (fence_triggers(s2), s2.one("SELECT count(*) FROM pg_publication")) == (0, 0), "nothing of the stray move is left"


# --- (b) after everything -------------------------------------------------------------------------

def test_b_nobody_became_superuser_and_nothing_is_left():
    c, s1, s2 = S["c"], S[1], S[2]
    for n in (c, s1, s2):
        assert n.one("SELECT (SELECT rolsuper FROM pg_roles WHERE rolname = 'mallory') || '/' || (SELECT count(*) FROM public.pwned)") \
            == "false/0", f"{n.name}: mallory is no superuser and no planted operator ran"
    assert (s1.one("SELECT count(*) FROM pg_replication_slots"), s2.one("SELECT count(*) FROM pg_replication_slots"),
            s1.one("SELECT count(*) FROM pg_subscription"), s2.one("SELECT count(*) FROM pg_publication")) == (0, 0, 0, 0), \
        "no slot, subscription or publication is left"
