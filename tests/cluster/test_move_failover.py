"""A move whose source fails over while it catches up (issue 29; docs/guide/scale-out.md "A
shard's failover", "By PostgreSQL version").

shard_1, the source, is a primary with a synchronous streaming standby (physical slot
standby_1); the coordinator reaches it by a foreign server naming both (target_session_attrs
'read-write'), so that the move's subscription on shard_2, the target, and id_gen's own
connections follow the promoted standby without being re-pointed. From PostgreSQL 17 on, the
move's slot is a failover slot and the standby keeps it in step (sync_replication_slots,
hot_standby_feedback, a dbname in primary_conninfo; the primary's synchronized_standby_slots
names standby_1, so that the target never receives a change the standby lacks).

(a) a move of genes 0 .. 16383 (rows of 400 owners) to shard_2 copies them, catches up and
    stops in catching_up: its probe marker cannot be written on the source (a trigger there
    refuses it), so its CALL ends with that error and no fence; the trigger is dropped; a
    writer through the coordinator commits rows of those genes all along (it retries what
    fails before COMMIT), and they stream to the target; on 17+ the standby has the move's
    slot, synced (which it can be only once the slot advanced past the standby's own
    horizon: with the target applying the writer's changes);
(b) the source's primary dies (kill -9, with the writer's commits in flight) and its standby
    is promoted; the writer carries on on the new primary;
(c) the same CALL again: on 17+ it completes the move, the routes point at shard_2 and every
    row the writer committed is there, once. On 15 and 16 the slot did not survive: the CALL
    fails with 55000 naming the slot and the hint to abort and move again; abort_move rolls
    it back (routes unchanged) and a new move of the same genes completes with every
    committed row.

Reported: what the move's CALLs did, the writer's commits, retries and unknown outcomes.
"""
import subprocess

from harness import LOGICAL, PG_BIN, RetryingWriter, coordinator_with_shards, owners, poll_until, report

S = {}
VERSION = int(subprocess.run([f"{PG_BIN}/postgres", "--version"], capture_output=True, text=True,
                             check=True).stdout.split()[-1].split(".")[0])
FAILOVER_SLOTS = VERSION >= 17
MOVED = (0, 16383)  # (a route range: a move takes whole ones)
REFUSE_MARKERS = """
CREATE FUNCTION public.refuse_markers() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'the test holds the move here';
END $$;
CREATE TRIGGER refuse_markers BEFORE INSERT ON id_gen.move_markers FOR EACH ROW EXECUTE FUNCTION public.refuse_markers();
"""
MOVE = f"CALL id_gen.move_genes({MOVED[0]}, {MOVED[1]}, 'shard_2')"


def the_source(cluster):
    """shard_1: a primary and its synchronous standby; returns (primary, the options of the
    coordinator's foreign server for it)."""
    slots = ["synchronized_standby_slots = 'standby_1'"] if FAILOVER_SLOTS else []
    p = cluster.node("shard_1", conf=[*LOGICAL, "synchronous_standby_names = '*'", *slots])
    p.execute("SELECT pg_create_physical_replication_slot('standby_1')")
    sync = ["sync_replication_slots = on", "hot_standby_feedback = on", "synchronized_standby_slots = ''"] \
        if FAILOVER_SLOTS else []
    # (pg_basebackup copied the primary's postgresql.conf: once promoted, the standby has no
    # standby of its own to wait for.)
    sb = cluster.node("shard_1_standby", conf=[*LOGICAL, "synchronous_standby_names = ''", *sync],
                      standby_of=p, slot="standby_1")
    if FAILOVER_SLOTS:
        # (pg_basebackup -R wrote primary_conninfo without a dbname, which the slot sync needs.)
        sb.execute(f"ALTER SYSTEM SET primary_conninfo = 'host={p.dir} port={p.port} user=postgres dbname=postgres'",
                   "SELECT pg_reload_conf()")
    S.update(primary=p, standby=sb)
    return p, f"host '{p.dir},{sb.dir}', port '{p.port},{sb.port}', target_session_attrs 'read-write'"


def test_a_a_move_stops_in_catching_up_under_writes(cluster):
    c, shards = coordinator_with_shards(cluster, shard_conf=LOGICAL, given_shards={1: lambda: the_source(cluster)})
    S.update(c=c, target=shards[2])
    moving = owners(c, f"id_gen.shard_gene(o) BETWEEN {MOVED[0]} AND {MOVED[1]}", 400)
    c.execute(f"INSERT INTO orders (owner_id, amount) SELECT o, 1 FROM unnest(ARRAY{moving}::bigint[]) o, generate_series(1, 20)")
    S["before"] = {(o, i) for o, i in c.execute("SELECT owner_id, id FROM orders")}
    S["primary"].script(REFUSE_MARKERS)
    S["writer"] = RetryingWriter(c, moving, 1)
    poll_until("the writer commits", lambda: len(S["writer"].rows), lambda n: n >= 50, 60)
    error = c.error(MOVE)
    assert error is not None and "the test holds the move here" in str(error), f"the move stops at its probe: {error!r}"
    S["primary"].execute("DROP TRIGGER refuse_markers ON id_gen.move_markers", "DROP FUNCTION public.refuse_markers()")
    S["move_id"] = c.one("SELECT max(move_id) FROM id_gen.moves")
    assert c.one(f"SELECT phase FROM id_gen.moves WHERE move_id = {S['move_id']}") == "catching_up"
    if FAILOVER_SLOTS:
        slot = f"id_gen_move_{S['move_id']}"
        poll_until(f"the standby has the move's slot {slot}, synced", lambda: S["standby"].one(
            f"SELECT synced AND NOT temporary FROM pg_replication_slots WHERE slot_name = '{slot}'"), True, 60)


def test_b_the_source_fails_over_mid_move():
    p, sb, w = S["primary"], S["standby"], S["writer"]
    n = len(w.rows)
    p.kill9()
    sb.promote()
    poll_until("the writer commits on the promoted source", lambda: len(w.rows), lambda k: k >= n + 50, 60)
    assert w.failed == [], w.failed


def test_c_the_move_completes_or_is_rolled_back_and_done_again():
    c, w = S["c"], S["writer"]
    if FAILOVER_SLOTS:
        c.execute(MOVE)
        done = "the same CALL completed the move on the promoted source (its failover slot)"
    else:
        error = c.error(MOVE)
        assert error is not None and error.sqlstate == "55000" and "replication slot" in str(error) \
            and "is gone" in str(error) and f"CALL id_gen.abort_move({S['move_id']})" in (error.diag.message_hint or ""), \
            f"on {VERSION} the move's slot does not survive the failover: 55000 and the hint to abort ({error!r})"
        c.execute(f"CALL id_gen.abort_move({S['move_id']})")
        assert c.one(f"SELECT phase FROM id_gen.moves WHERE move_id = {S['move_id']}") == "aborted"
        assert c.one(f"SELECT shard FROM id_gen.route_map WHERE lower_gene = {MOVED[0]}") == "shard_1", \
            "the aborted move changed no route"
        c.execute(MOVE)
        done = "the same CALL failed (55000: the slot is gone), abort_move, a new move completed"
    w.stop()
    assert c.one(f"SELECT shard FROM id_gen.route_map WHERE lower_gene = {MOVED[0]}") == "shard_2", "the genes moved"
    on_target = {(o, i) for o, i in S["target"].execute(
        f"SELECT owner_id, id FROM orders WHERE id >> 47 BETWEEN {MOVED[0]} AND {MOVED[1]}")}
    committed = S["before"] | {(o, i) for _, o, i in w.rows}
    assert committed <= on_target, f"{len(committed - on_target)} committed rows are not on the target"
    assert len(on_target - committed) <= len(w.unknown), \
        f"{len(on_target - committed)} rows on the target were not committed knowingly ({len(w.unknown)} unknown)"
    assert c.one("SELECT count(*) = count(DISTINCT id) FROM orders"), "no id twice"
    report(f"a move's source failed over (PostgreSQL {VERSION}): {done}; the writer committed {len(w.rows)} rows, "
           f"{len(w.unknown)} outcomes unknown, {sum(w.retried.values())} retries before COMMIT "
           f"({', '.join(sorted(w.retried)) or 'none'})")
