"""Direct reads (src/direct_read/, docs/design.md §11.9): a SELECT the client sends in a
transaction of its own reads each shard it reaches in one round trip on id_gen's own
connection, instead of postgres_fdw's cursor; anything else reads through postgres_fdw.
One coordinator and 2 shards, orders laid out per_shard.

(a) lookups by id and by owner, a whole-table aggregate, NULLs, text and numeric columns,
    and a prepared statement's generic plan give the same rows with direct reads on and
    off; the reads went over id_gen's connection (id_gen.direct_read_connections counts
    them; the shard sees its application_name) and postgres_fdw opened no connection.
(b) what must share postgres_fdw's transaction does: in a transaction block an insert
    through the coordinator is seen by the next lookup; a function's SELECT reads
    through postgres_fdw; neither counts a direct read.
(b2) a pipeline (an INSERT then a lookup before the Sync) sees its own insert; a statement
    with a volatile function reads through postgres_fdw; a lookup with LIMIT 1 keeps its
    connection; with async_capable servers an aggregate over both shards is postgres_fdw's
    concurrent scans and a lookup still reads directly.
(c) a shard's error comes back with its own SQLSTATE, message and the remote statement in
    its CONTEXT, and the connection serves the next read without reconnecting.
(d) a frozen shard (SIGSTOP: it keeps its connections open): the read fails with 57014 once
    id_gen.direct_read_timeout has passed (and with statement_timeout, whichever first),
    the other shard's rows are still read, and after the thaw the next read reconnects.
(e) the user mapping is the one postgres_fdw would use: a view's owner's through the view;
    a role that is not a superuser, reading the table with a mapping without a password,
    gets 2F003 as through postgres_fdw.
(f) a kept connection whose shard backend was terminated (pg_terminate_backend; a restart
    or idle_session_timeout ends it the same way, with a FATAL error) is replaced: the next
    read succeeds on a new connection; a cursor WITH HOLD reads through postgres_fdw.
"""
import time

import psycopg
import pytest

from harness import coordinator_with_shards, poll_until

S = {}


@pytest.fixture(scope="module", autouse=True)
def fleet(cluster):
    c, shards = coordinator_with_shards(cluster, shards=2, layout="per_shard")
    c.execute("""INSERT INTO orders (owner_id, amount, note)
                 SELECT o, o * 7, CASE WHEN o % 5 = 0 THEN NULL ELSE 'note ' || o || ' é' END
                 FROM generate_series(1, 400) o""")
    S.update(c=c, shards=shards)
    yield


def direct_reads(conn):
    """(server, reads) of this session's direct-read connections."""
    return dict(conn.execute("SELECT server, reads FROM id_gen.direct_read_connections()").fetchall())


def ids_on(shard, n):
    return S["shards"][shard].column(f"SELECT id FROM orders ORDER BY id LIMIT {n}")


def test_a_same_rows_one_round_trip():
    c = S["c"]
    queries = [
        "SELECT id, owner_id, amount, note FROM orders WHERE id = {id}",
        "SELECT count(*), sum(amount), max(note) FROM orders",
        "SELECT id, note FROM orders WHERE id BETWEEN id_gen.owner_first_id({owner}) "
        "AND id_gen.owner_last_id({owner}) ORDER BY id",
        "SELECT note IS NULL, amount::numeric / 3 FROM orders WHERE id = {id}",
    ]
    samples = [(i, o) for i, o in c.execute("SELECT id, owner_id FROM orders ORDER BY id LIMIT 400")][::37]
    with c.connect() as on, c.connect() as off:
        off.execute("SET id_gen.direct_reads = off")
        for q in queries:
            for i, o in samples:
                sql = q.format(id=i, owner=o)
                assert on.execute(sql).fetchall() == off.execute(sql).fetchall(), sql
        reads = direct_reads(on)
        assert set(reads) == {"shard_1", "shard_2"}, reads
        assert sum(reads.values()) >= len(samples) * 3, reads
        assert direct_reads(off) == {}, "direct reads off: none"
        assert on.execute("SELECT count(*) FROM postgres_fdw_get_connections()").fetchone()[0] == 0, \
            "postgres_fdw opened no connection for the reads"
        # A prepared statement: its generic plan keeps both shards' scans, one of which
        # runs (initial pruning); past the fifth execution the plan cache may use it.
        before = sum(direct_reads(on).values())
        for i, _ in samples:
            got = on.execute("SELECT id, amount FROM orders WHERE id = %s", (i,), prepare=True).fetchall()
            assert got == off.execute("SELECT id, amount FROM orders WHERE id = %s", (i,)).fetchall()
        assert sum(direct_reads(on).values()) == before + len(samples), "each prepared lookup read directly"
        shard_apps = S["shards"][1].column(
            "SELECT application_name FROM pg_stat_activity WHERE application_name = 'id_gen direct read'")
        assert shard_apps == ["id_gen direct read"], shard_apps


def test_b_transactions_read_through_postgres_fdw():
    c = S["c"]
    with c.connect() as conn:
        conn.execute("SELECT count(*) FROM orders")
        before = direct_reads(conn)
        with conn.transaction():
            new_id = conn.execute("INSERT INTO orders (owner_id, amount) VALUES (9001, 1) RETURNING id").fetchone()[0]
            assert conn.execute("SELECT amount FROM orders WHERE id = %s", (new_id,)).fetchone() == (1,), \
                "the transaction's own insert is seen"
            conn.execute("UPDATE orders SET amount = 2 WHERE id = %s", (new_id,))
            assert conn.execute("SELECT amount FROM orders WHERE id = %s", (new_id,)).fetchone() == (2,)
        conn.execute("""CREATE OR REPLACE FUNCTION pg_temp.amount_of(i bigint) RETURNS bigint
                        LANGUAGE plpgsql AS $$ BEGIN RETURN (SELECT amount FROM orders WHERE id = i); END $$""")
        assert conn.execute("SELECT pg_temp.amount_of(%s)", (new_id,)).fetchone() == (2,)
        assert direct_reads(conn) == before, "no direct read in a transaction block or a function"
        assert conn.execute("SELECT amount FROM orders WHERE id = %s", (new_id,)).fetchone() == (2,)
        after = direct_reads(conn)
        assert sum(after.values()) == sum(before.values()) + 1, (before, after)


def test_b2_pipelines_functions_limits_async():
    c = S["c"]
    with c.connect() as conn:
        conn.execute("SELECT count(*) FROM orders")
        before = sum(direct_reads(conn).values())
        with conn.pipeline():
            ins = conn.execute("INSERT INTO orders (owner_id, amount) VALUES (9002, 5) RETURNING id")
            got = conn.execute("SELECT amount FROM orders WHERE owner_id = 9002 AND id BETWEEN "
                               "id_gen.owner_first_id(9002) AND id_gen.owner_last_id(9002)")
        new_id = ins.fetchone()[0]
        assert got.fetchall() == [(5,)], "the pipeline's lookup sees its own insert"
        assert conn.execute("SELECT id, random() < 2 FROM orders WHERE id = %s", (new_id,)).fetchone() == (new_id, True)
        assert sum(direct_reads(conn).values()) == before, "no direct read in a pipeline or with a volatile function"
        some = ids_on(1, 3)
        conn.execute("SELECT id FROM orders WHERE id = %s LIMIT 1", (some[0],))
        connected = connected_at(conn)
        for i in some:
            assert conn.execute("SELECT id FROM orders WHERE id = %s LIMIT 1", (i,)).fetchone() == (i,)
        assert connected_at(conn) == connected, "LIMIT kept the connection"
    c.script("ALTER SERVER shard_1 OPTIONS (ADD async_capable 'true'); ALTER SERVER shard_2 OPTIONS (ADD async_capable 'true');")
    try:
        with c.connect() as conn, c.connect() as off:
            off.execute("SET id_gen.direct_reads = off")
            q = "SELECT count(*), sum(amount) FROM orders"
            assert conn.execute(q).fetchone() == off.execute(q).fetchone()
            assert direct_reads(conn) == {}, "an Append's asynchronous scans stay postgres_fdw's"
            i = ids_on(2, 1)[0]
            assert conn.execute("SELECT id FROM orders WHERE id = %s", (i,)).fetchone() == (i,)
            assert direct_reads(conn) == {"shard_2": 1}, direct_reads(conn)
    finally:
        c.script("ALTER SERVER shard_1 OPTIONS (DROP async_capable); ALTER SERVER shard_2 OPTIONS (DROP async_capable);")


def connected_at(conn):
    """(server, connected_at) of this session's direct-read connections."""
    return dict(conn.execute("SELECT server, connected_at FROM id_gen.direct_read_connections()").fetchall())


def test_c_shard_errors_keep_their_sqlstate():
    c = S["c"]
    some = ids_on(1, 1)[0]
    with c.connect() as conn:
        conn.execute("SELECT id FROM orders WHERE id = %s", (some,))
        with pytest.raises(psycopg.errors.DivisionByZero) as e:
            conn.execute("SELECT id FROM orders WHERE id = %s AND 1 / (amount - amount) = 1", (some,))
        assert "remote SQL command: SELECT" in (e.value.diag.context or ""), e.value.diag.context
        connected = conn.execute("SELECT connected_at FROM id_gen.direct_read_connections() WHERE server = 'shard_1'").fetchone()
        assert conn.execute("SELECT count(*) FROM orders WHERE id = %s", (some,)).fetchone() == (1,)
        assert conn.execute("SELECT connected_at FROM id_gen.direct_read_connections() WHERE server = 'shard_1'").fetchone() == connected, \
            "the same connection served the next read"


def test_d_frozen_shard_is_bounded():
    c, s2 = S["c"], S["shards"][2]
    on_2, on_1 = ids_on(2, 1)[0], ids_on(1, 1)[0]
    with c.connect() as conn:
        conn.execute("SET id_gen.direct_read_timeout = '1s'")
        conn.execute("SELECT id FROM orders WHERE id = %s", (on_2,))
        s2.freeze()
        try:
            started = time.monotonic()
            with pytest.raises(psycopg.errors.QueryCanceled) as e:
                conn.execute("SELECT id FROM orders WHERE id = %s", (on_2,))
            waited = time.monotonic() - started
            assert "did not answer" in str(e.value), str(e.value)
            assert waited >= 1.0, f"the bound is 1 s; failed after {waited:.2f} s"
            assert conn.execute("SELECT id FROM orders WHERE id = %s", (on_1,)).fetchone() == (on_1,), \
                "the other shard is still read"
            conn.execute("SET id_gen.direct_read_timeout = '1h'; SET statement_timeout = '1s'")
            with pytest.raises(psycopg.errors.QueryCanceled) as e:
                conn.execute("SELECT id FROM orders WHERE id = %s", (on_2,))
            assert "statement timeout" in str(e.value), str(e.value)
            conn.execute("RESET statement_timeout")
        finally:
            s2.thaw()
        assert conn.execute("SELECT id FROM orders WHERE id = %s", (on_2,)).fetchone() == (on_2,), \
            "after the thaw the read reconnects"


def test_e_the_mapping_postgres_fdw_would_use():
    c = S["c"]
    c.script("""
        CREATE ROLE reader LOGIN;
        GRANT SELECT ON orders, orders_shards TO reader;
        GRANT USAGE ON SCHEMA id_gen TO reader;
        CREATE USER MAPPING FOR reader SERVER shard_1 OPTIONS (user 'postgres');
        CREATE USER MAPPING FOR reader SERVER shard_2 OPTIONS (user 'postgres');
    """)
    some = ids_on(1, 1)[0]
    for setting in ("on", "off"):
        with c.connect(user="reader") as conn:
            conn.execute(f"SET id_gen.direct_reads = {setting}")
            # Through the view, the view owner's mapping (a superuser's) is used.
            assert conn.execute("SELECT id FROM orders WHERE id = %s", (some,)).fetchone() == (some,)
            # The partitioned table itself: the reader's own mapping, without a password.
            with pytest.raises(psycopg.Error) as e:
                conn.execute("SELECT id FROM orders_shards WHERE id = %s", (some,))
            assert e.value.sqlstate == "2F003", (setting, e.value.sqlstate, str(e.value))
            if setting == "on":
                assert direct_reads(conn) == {"shard_1": 1}, direct_reads(conn)


def test_f_terminated_shard_backend_and_holdable_cursors():
    c, s1 = S["c"], S["shards"][1]
    some = ids_on(1, 2)
    with c.connect() as conn:
        assert conn.execute("SELECT id FROM orders WHERE id = %s", (some[0],)).fetchone() == (some[0],)
        before = connected_at(conn)["shard_1"]
        assert s1.one("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                      "WHERE application_name = 'id_gen direct read'") == 1
        poll_until("the shard's direct-read backend ends", lambda: s1.one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'id_gen direct read'"), 0, 30)
        assert conn.execute("SELECT id FROM orders WHERE id = %s", (some[1],)).fetchone() == (some[1],), \
            "the read after the shard ended its backend succeeds"
        assert connected_at(conn)["shard_1"] != before, "on a new connection"
        reads = sum(direct_reads(conn).values())
        with conn.cursor("held", withhold=True) as cur:
            cur.execute("SELECT id FROM orders WHERE id = %s", (some[0],))
            assert cur.fetchall() == [(some[0],)]
        assert sum(direct_reads(conn).values()) == reads, "a cursor WITH HOLD reads through postgres_fdw"
