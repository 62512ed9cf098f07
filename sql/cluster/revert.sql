-- Reversible moves: CALL id_gen.move_genes(..., reversible => true), then CALL
-- id_gen.revert_move(id) or CALL id_gen.complete_move(id). Code only (CREATE OR REPLACE);
-- the columns are in sql/install/cluster_catalog.sql. This file is the coordinator's half;
-- the shards' half is sql/cluster/shard/revert.sql. sql/cluster/move.sql calls prepare_way_back (before the fence),
-- records back_lsn (inside it) and calls open_way_back (instead of the cut-over's clean-up).
--
-- The way back is the move's own machinery turned around, on PostgreSQL's logical
-- replication:
--   before the fence  the target publishes its partitions of the moved genes and
--                     id_gen.move_markers (publication id_gen_back_<id>) and creates the
--                     slot id_gen_back_<id>; the target's connection string goes to the
--                     source's id_gen.move_secrets (a bound parameter, as for the move).
--   inside the fence  after the last change from the source is applied on the target, the
--                     target's WAL position is recorded (back_lsn): every write of the
--                     moved genes on the target after the flip lies after it.
--   cut-over          the source detaches its partitions but keeps them under their names
--                     (with a CHECK of their bounds, and the move's fence trigger, which
--                     refuses direct writes and does not fire for replication); the forward
--                     subscription and publication go; the slot is advanced to back_lsn
--                     (so the changes the forward apply made are not sent back); the
--                     source subscribes (id_gen_back_<id>, connected at creation so its
--                     tables are ready at once, copy_data = false, not enabled), then its
--                     origin is set to back_lsn and it is enabled, in a second transaction
--                     (a slot's advance is saved only at the target's next checkpoint; the
--                     origin's is WAL-logged, and the target streams from the later of the
--                     two).
--   reversible        the target serves the genes; its changes stream to the source's kept
--                     partitions. The slot keeps WAL on the target until the move ends:
--                     id_gen.moves shows back_lag_bytes and back_retained_bytes.
--   revert_move       first the way back must apply: less than 1 MB behind, then a probe
--                     marker of the target on the source within 10 s (no fence yet). Then
--                     the move's fence the other way: ACCESS EXCLUSIVE on the coordinator's
--                     range partitions, the fence trigger on the target's partitions, a
--                     marker on the target awaited on the source (apply is in commit order),
--                     the source's kept partitions opened to writes (the coordinator's
--                     foreign tables reach them by name at once), the source's sequences raised, routes and foreign tables back to the
--                     source; COMMIT (phase reverting). Then the reverse subscription and
--                     publication go, the source re-attaches its partitions (the CHECK spares
--                     the scan), the target detaches and drops its copies: reverted.
--   complete_move     the reverse subscription and publication go and the source's kept
--                     partitions are dropped: done.
-- Invariants: until revert_move's flip commits, the target is authoritative and the source
-- only follows; after it, the source holds every write the target committed (the marker
-- arrived after all of them). The move supervisor finishes a revert whose flip committed
-- (reverting) and lifts the target's fence of one that did not; it ends a reversible move
-- (as complete_move does) only when its slot keeps more WAL than id_gen.reversible_max_wal.

-- The move turned around: source and target swapped, so that the steps of move_commands
-- run the other way (fence and marker on the target, marker awaited on the source, ...).
CREATE OR REPLACE FUNCTION id_gen.reversed(m id_gen.shard_moves) RETURNS id_gen.shard_moves
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  r id_gen.shard_moves := m;
BEGIN
  r.source_shard := m.target_shard;
  r.target_shard := m.source_shard;
  r.keep_source := false;
  RETURN r;
END $$;
COMMENT ON FUNCTION id_gen.reversed(id_gen.shard_moves) IS 'A move with source and target swapped: the steps of its way back.';
REVOKE EXECUTE ON FUNCTION id_gen.reversed(id_gen.shard_moves) FROM PUBLIC;

-- Before the fence of a reversible move: the target's publication and slot, and the
-- target's connection string in the source's id_gen.move_secrets (visible there once the
-- caller commits).
CREATE OR REPLACE FUNCTION id_gen.prepare_way_back(m id_gen.shard_moves) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  p record := id_gen.move_parts(m.lower_gene, m.upper_gene);
  pub record := id_gen.published_move_parts(m.lower_gene, m.upper_gene);
BEGIN
  IF id_gen.has_owned_tables() THEN
    -- Tables of rows hold other genes' rows too: each table is published with a row filter.
    PERFORM id_gen.remote_call(m.target_shard, 'shard_create_filtered_way_back',
                              ARRAY[m.move_id::text, pub.tables::text, pub.id_columns::text, pub.lower_genes::text,
                                    pub.upper_genes::text], 60000);
  ELSE
    PERFORM id_gen.remote_call(m.target_shard, 'shard_create_way_back', ARRAY[m.move_id::text, p.parts::text], 60000);
  END IF;
  PERFORM id_gen.remote_call(m.target_shard, 'shard_create_way_back_slot', ARRAY[m.move_id::text], 60000);
  PERFORM id_gen.send_move_secret(id_gen.reversed(m));
END $$;
COMMENT ON FUNCTION id_gen.prepare_way_back(id_gen.shard_moves) IS 'Before the fence of a reversible move: the target''s publication and slot of the way back, and its connection string for the source.';
REVOKE EXECUTE ON FUNCTION id_gen.prepare_way_back(id_gen.shard_moves) FROM PUBLIC;

-- The cut-over of a reversible move (instead of finish_cut_over's clean-up): the source
-- keeps its partitions and follows the target. Idempotent.
CREATE OR REPLACE FUNCTION id_gen.open_way_back(m id_gen.shard_moves) RETURNS id_gen.shard_moves
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  p record := id_gen.move_parts(m.lower_gene, m.upper_gene);
BEGIN
  PERFORM id_gen.remote_call(m.source_shard, 'shard_detach_kept',
                            ARRAY[m.move_id::text, p.parts::text, p.id_columns::text, p.lower_genes::text, p.upper_genes::text], 600000);
  PERFORM id_gen.place_ranges(m.source_shard, m.lower_gene, m.upper_gene, false);
  -- The forward replication goes (the cleanup records of policy always but the way back);
  -- the source's fence stays on its kept partitions, and what waits for the outcome stays
  -- recorded (the way back, the copies of either side).
  PERFORM id_gen.run_cleanups(m.move_id, true, '{subscription,publication,replication_slot,sync_slots,markers,source_markers}', false);
  PERFORM id_gen.forget_cleanup(m.move_id, 'source_fence');
  PERFORM id_gen.forget_cleanup(m.move_id, 'shown_copies');  -- (per_shard tables: the fence committed)
  PERFORM id_gen.remote_call(m.target_shard, 'shard_advance_way_back', ARRAY[m.move_id::text, m.back_lsn::text], 60000);
  -- The source's subscription, then (another transaction) its origin set to back_lsn and
  -- enabled (sql/cluster/shard/revert.sql says why). (Every version's fence records back_lsn
  -- with the flip, so a move in phase cut_over has it.)
  PERFORM id_gen.remote_call(m.source_shard, 'shard_create_way_back_subscription',
                            ARRAY[m.move_id::text, (id_gen.published_move_parts(m.lower_gene, m.upper_gene)).tables::text], 30000);
  PERFORM id_gen.remote_call(m.source_shard, 'shard_start_way_back', ARRAY[m.move_id::text, m.back_lsn::text], 30000);
  UPDATE id_gen.shard_moves sm SET phase = 'reversible', updated_at = clock_timestamp(), last_error = NULL
  WHERE sm.move_id = m.move_id AND sm.phase = 'cut_over' RETURNING * INTO m;
  PERFORM id_gen.check_way_back(m);
  RETURN m;
END $$;
COMMENT ON FUNCTION id_gen.open_way_back(id_gen.shard_moves) IS 'Cut-over of a reversible move: the source detaches its partitions but keeps them, the forward subscription and publication go, and the source subscribes to the target''s changes from the flip on.';
REVOKE EXECUTE ON FUNCTION id_gen.open_way_back(id_gen.shard_moves) FROM PUBLIC;

-- Refreshes back_lag_bytes and back_retained_bytes (errors go to last_error).
CREATE OR REPLACE FUNCTION id_gen.check_way_back(m id_gen.shard_moves) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  res text;
BEGIN
  res := id_gen.remote_call(m.target_shard, 'shard_way_back_lag', ARRAY[m.move_id::text], 10000);
  UPDATE id_gen.shard_moves sm
  SET back_lag_bytes = split_part(res, ' ', 1)::bigint, back_retained_bytes = split_part(res, ' ', 2)::bigint,
      back_checked_at = clock_timestamp(),
      last_error = CASE WHEN res IS NULL THEN 'the way back''s slot is missing on ' || m.target_shard END
  WHERE sm.move_id = m.move_id;
EXCEPTION WHEN OTHERS OR query_canceled THEN  -- (a target past its bound is 57014)
  UPDATE id_gen.shard_moves sm SET last_error = 'checking the way back: ' || SQLERRM, back_checked_at = clock_timestamp()
  WHERE sm.move_id = m.move_id;
END $$;
COMMENT ON FUNCTION id_gen.check_way_back(id_gen.shard_moves) IS 'Reads a reversible move''s reverse replication lag and retained WAL on the target into id_gen.shard_moves.';
REVOKE EXECUTE ON FUNCTION id_gen.check_way_back(id_gen.shard_moves) FROM PUBLIC;

-- Undoes what a revert's fence did to per_shard tables on the shards when its flip did not
-- commit (a failed fence attempt, or its coordinator died before its COMMIT): the source's
-- kept partitions leave its tables again (shard_detach_kept, as at the cut-over; their CHECK
-- and fence trigger are still on them) and the target's partitions, detached and renamed by
-- the fence, join its tables again, both under the coordinator's locks of the per_shard
-- tables. Idempotent; nothing without per_shard tables, or when neither shard is re-laid.
CREATE OR REPLACE FUNCTION id_gen.undo_revert_relayout(m id_gen.shard_moves) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  p record;
BEGIN
  IF id_gen.lock_per_shard_tables_if_relaid(m) THEN
    p := id_gen.move_parts(m.lower_gene, m.upper_gene);
    PERFORM id_gen.remote_call(m.source_shard, 'shard_detach_kept',
                              ARRAY[m.move_id::text, p.parts::text, p.id_columns::text, p.lower_genes::text, p.upper_genes::text], 60000);
    PERFORM id_gen.run_move_step(id_gen.reversed(m), 'reattach_source', 0, 120000);
  END IF;
END $$;
COMMENT ON FUNCTION id_gen.undo_revert_relayout(id_gen.shard_moves) IS 'After a revert''s fence of a move with per_shard tables whose flip did not commit: detaches the source''s kept partitions again and attaches the target''s partitions again, under the coordinator''s locks of the per_shard tables.';
REVOKE EXECUTE ON FUNCTION id_gen.undo_revert_relayout(id_gen.shard_moves) FROM PUBLIC;

-- A revert's fence, lifted: its re-layout of per_shard tables undone, the target takes direct
-- writes again and the source's kept partitions refuse them again (a failed fence attempt,
-- or the supervisor after a crash). Tables laid out by ownership: when the source may own the
-- genes (source_may_own: its own_incoming may have committed; unknown after a crash), it
-- gives them up and the target owns them again before the target's fence of them goes,
-- under the coordinator's locks of the per_shard tables (so that no statement finds neither
-- shard owning them); a source that does not answer then leaves the target fenced (both
-- would own them otherwise) and the error is raised after the rest is done, so that the
-- clean-up revert_fence tries again. When the source cannot own them, only the target's
-- fence goes, without the source.
CREATE OR REPLACE FUNCTION id_gen.lift_revert_fence_of(m id_gen.shard_moves, timeout_ms integer, source_may_own boolean)
RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  r id_gen.shard_moves := id_gen.reversed(m);
  saved text := current_setting('lock_timeout');
  owned_err text;
  owned_state text;
BEGIN
  IF id_gen.has_owned_tables() THEN
    BEGIN
      IF source_may_own THEN
        PERFORM set_config('lock_timeout', '2s', true);
        PERFORM id_gen.lock_per_shard_tables();
        PERFORM set_config('lock_timeout', saved, true);
        PERFORM id_gen.run_move_step(r, 'disown_incoming', 0, timeout_ms);
        PERFORM id_gen.run_move_step(r, 'retake_source', 0, timeout_ms);
      END IF;
      PERFORM id_gen.run_move_step(r, 'unfence_source_owned', 0, timeout_ms);
    EXCEPTION WHEN OTHERS OR query_canceled THEN
      GET STACKED DIAGNOSTICS owned_err = MESSAGE_TEXT, owned_state = RETURNED_SQLSTATE;
    END;
  END IF;
  -- (first: unfence_source finds the target's partitions by their names)
  PERFORM id_gen.undo_revert_relayout(m);
  PERFORM id_gen.run_move_step(r, 'unfence_source', 0, 10000);
  PERFORM id_gen.remote_call(m.source_shard, 'shard_open_kept',
                            ARRAY[m.move_id::text, (id_gen.move_parts(m.lower_gene, m.upper_gene)).parts::text, 'false'], timeout_ms);
  IF owned_err IS NOT NULL THEN
    RAISE EXCEPTION 'id_gen: move %: the target "%" keeps its fence of genes % .. % of tables laid out by ownership: %',
                    m.move_id, m.target_shard, m.lower_gene, m.upper_gene, owned_err
      USING ERRCODE = owned_state, HINT = 'The source must give the genes up first; the move supervisor tries again when it answers.';
  END IF;
END $$;
COMMENT ON FUNCTION id_gen.lift_revert_fence_of(id_gen.shard_moves, integer, boolean) IS 'Lifts a revert''s fence: its re-layout of per_shard tables is undone, the target''s fence triggers are disabled and the source''s kept partitions refuse direct writes again; tables laid out by ownership: the source gives the genes up and the target owns them again (source_may_own), then the target''s fence of them goes.';
REVOKE EXECUTE ON FUNCTION id_gen.lift_revert_fence_of(id_gen.shard_moves, integer, boolean) FROM PUBLIC;

-- The same when nothing says how far the fence came (a crash, the clean-up revert_fence).
CREATE OR REPLACE FUNCTION id_gen.lift_revert_fence(m id_gen.shard_moves, timeout_ms integer) RETURNS void
LANGUAGE sql STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  SELECT id_gen.lift_revert_fence_of(m, timeout_ms, true);
END;
COMMENT ON FUNCTION id_gen.lift_revert_fence(id_gen.shard_moves, integer) IS 'Lifts a revert''s fence whose progress is not known (id_gen.lift_revert_fence_of with source_may_own).';
REVOKE EXECUTE ON FUNCTION id_gen.lift_revert_fence(id_gen.shard_moves, integer) FROM PUBLIC;

-- The way back goes: first the target's publication and slot (the slot is what keeps WAL
-- on the target, and the target is reachable when the source is not), then the source's
-- subscription, detached from the slot that is gone. Raises when a step fails; each step
-- is idempotent, so calling it again finishes the rest.
CREATE OR REPLACE FUNCTION id_gen.drop_way_back(m id_gen.shard_moves) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  res text;
BEGIN
  res := id_gen.remote_call(m.target_shard, 'shard_drop_way_back', ARRAY[m.move_id::text], 30000);
  IF res IS DISTINCT FROM 'dropped' THEN
    RAISE EXCEPTION 'id_gen: the way back of move % on "%": %', m.move_id, m.target_shard, res USING ERRCODE = '55006';
  END IF;
  PERFORM id_gen.remote_call(m.source_shard, 'shard_detach_way_back', ARRAY[m.move_id::text], 30000);
  PERFORM id_gen.remote_exec(m.source_shard, format('DROP SUBSCRIPTION IF EXISTS %I', 'id_gen_back_' || m.move_id), 60000);
END $$;
COMMENT ON FUNCTION id_gen.drop_way_back(id_gen.shard_moves) IS 'Drops a reversible move''s way back: the publication and slot on the target first (so that a source that is down cannot keep WAL there), then the subscription on the source.';
REVOKE EXECUTE ON FUNCTION id_gen.drop_way_back(id_gen.shard_moves) FROM PUBLIC;

-- After a revert's flip committed: the way back goes, the source takes its partitions back,
-- the target lets go (the move's cleanup records of a rolled-back move: the way back, then
-- the target's copies). Idempotent; raises on the first failing step.
CREATE OR REPLACE FUNCTION id_gen.finish_revert(m id_gen.shard_moves) RETURNS id_gen.shard_moves
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  p record := id_gen.move_parts(m.lower_gene, m.upper_gene);
BEGIN
  PERFORM id_gen.run_cleanups(m.move_id, false, '{way_back}', false);
  PERFORM id_gen.remote_call(m.source_shard, 'shard_reattach_kept',
                            ARRAY[m.move_id::text, p.parts::text, p.lower_genes::text, p.upper_genes::text], 60000);
  PERFORM id_gen.place_ranges(m.source_shard, m.lower_gene, m.upper_gene, true);
  PERFORM id_gen.run_cleanups(m.move_id, false, NULL, false);
  PERFORM id_gen.run_move_step(id_gen.reversed(m), 'forget_markers', 0, 10000);
  UPDATE id_gen.shard_moves sm SET phase = 'reverted', finished_at = clock_timestamp(), updated_at = clock_timestamp(),
                                   last_error = NULL, back_lag_bytes = NULL, back_retained_bytes = NULL
  WHERE sm.move_id = m.move_id AND sm.phase = 'reverting' RETURNING * INTO m;
  RETURN m;
END $$;
COMMENT ON FUNCTION id_gen.finish_revert(id_gen.shard_moves) IS 'Finishes a revert whose flip committed: drops the way back, re-attaches the source''s kept partitions, detaches and drops the target''s.';
REVOKE EXECUTE ON FUNCTION id_gen.finish_revert(id_gen.shard_moves) FROM PUBLIC;

-- Common checks of revert_move and complete_move: the move, locked for this session.
CREATE OR REPLACE FUNCTION id_gen.take_reversible_move(move_id bigint, what text) RETURNS id_gen.shard_moves
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  m id_gen.shard_moves;
BEGIN
  PERFORM id_gen.require_superuser(what || ' a move');
  SELECT * INTO m FROM id_gen.shard_moves sm WHERE sm.move_id = take_reversible_move.move_id;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'id_gen: there is no move %', move_id USING ERRCODE = '42704', HINT = 'Moves are listed in id_gen.moves.';
  ELSIF NOT m.reversible THEN
    RAISE EXCEPTION 'id_gen: move % is not reversible', move_id
      USING ERRCODE = '55000', HINT = 'Only moves made with move_genes(..., reversible => true) can be reverted; move the genes back instead.';
  ELSIF m.phase NOT IN ('reversible', 'reverting') THEN
    RAISE EXCEPTION 'id_gen: move % is %, not reversible', move_id, m.phase
      USING ERRCODE = '55000',
            HINT = CASE WHEN m.phase IN ('planned', 'copying', 'catching_up', 'cut_over')
                        THEN format('Finish it first (CALL id_gen.move_genes(%s, %s, %L)) or abort it.', m.lower_gene, m.upper_gene, m.target_shard)
                        ELSE 'It has ended.' END;
  END IF;
  IF NOT id_gen.take_operation(m.move_id) THEN
    RAISE EXCEPTION 'id_gen: move % is busy in another session', move_id
      USING ERRCODE = '55006', HINT = 'Watch id_gen.moves.runner; the move supervisor holds a move for a few seconds at most.';
  END IF;
  RETURN m;
END $$;
COMMENT ON FUNCTION id_gen.take_reversible_move(bigint, text) IS 'The reversible move revert_move or complete_move works on, checked and held by this session (session advisory lock).';
REVOKE EXECUTE ON FUNCTION id_gen.take_reversible_move(bigint, text) FROM PUBLIC;

-- The steps of a revert, part of a move's steps (id_gen.move_step hands them here): revert_move
-- starts the driver (id_gen.run_operation) at {step: revert_lag} on a move that rests in
-- phase reversible.
--   reversible, revert_lag    one look at the way back's lag: the source catches up first
--                             (5 minutes at most), so that the fence only waits for the last
--                             changes; the way back's error count on the source is noted;
--   reversible, revert_probe  one look for a marker of the target on the source (10 s at
--                             most, no fence): a way back that does not apply stops the
--                             revert here, before any writer waits;
--   reversible, revert_arm    the attempt recorded in fence_attempts (numbered on from the
--                             move's, so that each attempt's marker is new), and the target's
--                             fence as a cleanup record (it may be up from here until it is
--                             lifted or the revert flips);
--   reversible, revert_fence  one attempt at the fence and flip back (below; with per_shard
--                             tables it re-lays both shards); phase reverting;
--   reverting, NULL           the target's copies and the way back go (id_gen.finish_revert);
--                             phase reverted.
CREATE OR REPLACE FUNCTION id_gen.revert_step(m id_gen.shard_moves, step jsonb) RETURNS id_gen.step_outcome
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  outcome id_gen.step_outcome;
  r id_gen.shard_moves;
  res text;
  lag bigint;
  t0 timestamptz;
  err text;
  err_state text;
  attempt integer := (step->>'attempt')::integer;
  per_shard boolean := id_gen.has_per_shard_tables();
  owned boolean := id_gen.has_owned_tables();
  source_may_own boolean := false;
BEGIN
  IF m.move_id IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "m" must not be NULL (it is the move, read by id_gen.move_step)' USING ERRCODE = '22004';
  END IF;
  r := id_gen.reversed(m);
  IF m.phase = 'reverting' THEN
    PERFORM id_gen.finish_revert(m);
  ELSIF m.phase = 'reversible' AND step->>'step' = 'revert_lag' THEN
    IF step->>'deadline' IS NULL AND id_gen.has_cleanup(m.move_id, 'revert_fence') THEN
      -- The fence of an earlier revert that was not lifted (its source did not answer): the
      -- source may own the genes. It is lifted first (the source gives them up, the target
      -- owns them again), before this revert can fence anything; a new fence that failed
      -- before the source owned them would lift the target's fence alone.
      -- (A lift that fails stops the revert, which lets go of the move: the supervisor may
      -- then lift it as soon as the source answers.)
      BEGIN
        PERFORM id_gen.run_cleanups(m.move_id, false, '{revert_fence}', false);
      EXCEPTION WHEN OTHERS OR query_canceled THEN
        GET STACKED DIAGNOSTICS err = MESSAGE_TEXT, err_state = RETURNED_SQLSTATE;
        UPDATE id_gen.shard_moves sm SET last_error = 'the fence of an earlier revert could not be lifted: ' || err,
                                         updated_at = clock_timestamp()
        WHERE sm.move_id = m.move_id;
        outcome.stop_message := format('id_gen: move %s: the fence of an earlier revert is still up and could not be lifted', m.move_id);
        outcome.stop_sqlstate := '55006';
        outcome.stop_detail := format('Lifting it failed (SQLSTATE %s): %s', err_state, err);
        outcome.stop_hint := 'The move supervisor lifts it once both shards answer and the coordinator''s tables can be locked; then call revert_move again.';
        RETURN outcome;
      END;
      RAISE NOTICE 'id_gen: move %: lifted the fence of an earlier revert first', m.move_id;
      outcome.next_step := step;  -- (committed at once: the lift holds the coordinator's locks)
      RETURN outcome;
    END IF;
    IF step->>'deadline' IS NULL THEN
      -- (With the way back's error count on the source now: a revert that stops for want
      -- of the source names the way back only if it stopped on errors since.)
      step := step || jsonb_build_object('deadline', clock_timestamp() + interval '5 min', 'errors', id_gen.subscription_errors(m, true));
    END IF;
    res := id_gen.remote_call(m.target_shard, 'shard_way_back_lag', ARRAY[m.move_id::text], 10000);
    IF res IS NULL THEN
      RAISE EXCEPTION 'id_gen: move %: the way back''s slot on "%" is gone', m.move_id, m.target_shard
        USING ERRCODE = '55000', HINT = format('The source cannot have every write: CALL id_gen.complete_move(%s), then move the genes back.', m.move_id);
    END IF;
    lag := split_part(res, ' ', 1)::bigint;
    outcome := id_gen.lag_outcome(lag, step, jsonb_build_object('step', 'revert_probe', 'errors', step->'errors'),
                                  format('id_gen: move %s: the source stays %%s bytes behind the target after 5 minutes', m.move_id),
                                  'Check the subscription id_gen_back_<move> on the source; call revert_move again later.');
  ELSIF m.phase = 'reversible' AND step->>'step' = 'revert_probe' THEN
    -- A way back that keeps stopping on an error stops the revert here, before any fence.
    -- (Attempts are numbered on from the move's fence attempts, so that a revert after one
    -- that failed never writes a marker of the same number again.)
    outcome := id_gen.probe_outcome(m, true, step,
                                    jsonb_build_object('step', 'revert_arm', 'attempt', m.fence_attempts + 1, 'last', m.fence_attempts + 5,
                                                       'errors', step->'errors'));
  ELSIF m.phase = 'reversible' AND step->>'step' = 'revert_arm' THEN
    UPDATE id_gen.shard_moves sm SET fence_attempts = attempt WHERE sm.move_id = m.move_id;
    PERFORM id_gen.record_move_cleanups(m, '{revert_fence}');
    outcome.next_step := step || '{"step": "revert_fence"}';
  ELSIF m.phase = 'reversible' AND step->>'step' = 'revert_fence' THEN
    -- The fence, in this one coordinator transaction: ACCESS EXCLUSIVE on the coordinator's
    -- range partitions of the genes (lock timeout 500 ms), the target's fence trigger, a
    -- marker passed from the target to the source (the target's last writes reach the
    -- source before it), the source's kept partitions opened, its sequences raised, the flip
    -- back; the driver's COMMIT lifts it, and waiting writers continue on the source.
    t0 := clock_timestamp();
    PERFORM pg_catalog.set_config('lock_timeout', '500ms', true);
    PERFORM id_gen.quiet_ddl();
    PERFORM id_gen.lock_range_partitions(m.lower_gene, m.upper_gene);
    IF per_shard THEN
      PERFORM id_gen.lock_per_shard_tables();
    END IF;
    BEGIN
      PERFORM id_gen.run_move_step(r, 'fence_source', 1000 + attempt, 5000);
      IF owned THEN
        -- (tables laid out by ownership: the target fences the genes as data)
        PERFORM id_gen.run_move_step(r, 'fence_source_owned', 0, 5000);
      END IF;
      PERFORM id_gen.pass_marker(r, 1000 + attempt, t0, 'source');
      PERFORM id_gen.remote_call(m.source_shard, 'shard_open_kept',
                                ARRAY[m.move_id::text, (id_gen.move_parts(m.lower_gene, m.upper_gene)).parts::text, 'true'], 5000);
      IF owned THEN
        -- The source owns the genes again, fenced (its kept rows show; its writers of them
        -- wait for the flip), while the coordinator holds every statement of them.
        source_may_own := true;
        PERFORM id_gen.run_move_step(r, 'own_incoming', 0, 8000);
      END IF;
      IF per_shard THEN
        -- The coordinator reads a per_shard table's shards whole: the source's kept partitions
        -- join its tables (no scan: their CHECK implies the bounds) ...
        PERFORM id_gen.run_move_step(r, 'show_incoming', 0, 8000);
      END IF;
      PERFORM id_gen.move_raise_sequences(r);
      PERFORM id_gen.flip_routes(m.lower_gene, m.upper_gene, m.source_shard);
      IF owned THEN
        PERFORM id_gen.run_move_step(r, 'unfence_target_owned', 0, 8000);
      END IF;
      IF per_shard THEN
        -- ... and, last, the target's partitions leave its tables (detached and renamed), so
        -- that after the COMMIT every row is read once, from the source.
        PERFORM id_gen.run_move_step(r, 'detach_source_in_fence', 0, 8000);
      END IF;
      IF owned THEN
        -- Last: the target gives the genes up (its rows hide; its fence of them goes), and
        -- the coordinator records where they are.
        PERFORM id_gen.run_move_step(r, 'release_source', 0, 8000);
        PERFORM id_gen.hand_over_owned_placements(r);
      END IF;
      UPDATE id_gen.shard_moves sm
      SET phase = 'reverting', fence_started_at = t0, fence_ended_at = clock_timestamp(),
          updated_at = clock_timestamp(), last_error = NULL
      WHERE sm.move_id = m.move_id AND sm.phase = 'reversible';
      IF NOT FOUND THEN
        RAISE EXCEPTION 'the move is no longer reversible' USING ERRCODE = '55006';
      END IF;
      -- (The target's fence stays on its copies, which go with the revert's clean-up.)
      PERFORM id_gen.forget_cleanup(m.move_id, 'revert_fence');
    EXCEPTION WHEN OTHERS OR query_canceled THEN
      -- Lift the target's fence while the coordinator's locks still hold its writers:
      -- once they go, those writers reach the target, which must take them.
      GET STACKED DIAGNOSTICS err = MESSAGE_TEXT, err_state = RETURNED_SQLSTATE;
      BEGIN
        PERFORM id_gen.lift_revert_fence_of(m, 5000, source_may_own);
      EXCEPTION WHEN OTHERS OR query_canceled THEN
        err := err || ' (lifting the target''s fence failed: ' || SQLERRM || ')';
      END;
      RAISE EXCEPTION '%', err USING ERRCODE = err_state;
    END;
  ELSE
    outcome.stop_message := format('id_gen: move %s has no revert step %s in phase %s', m.move_id, coalesce(step::text, 'at the start'), m.phase);
    outcome.stop_sqlstate := '55000';
    outcome.stop_hint := 'A revert starts from phase reversible (CALL id_gen.revert_move) and ends in phase reverting.';
  END IF;
  RETURN outcome;
END $$;
COMMENT ON FUNCTION id_gen.revert_step(id_gen.shard_moves, jsonb) IS 'One step of the revert of a reversible move (id_gen.move_step hands it the steps revert_*, and phase reverting): one look at the way back''s lag, one look for the probe marker on the source, one attempt at the fence and flip back, the clean-up after it.';
REVOKE EXECUTE ON FUNCTION id_gen.revert_step(id_gen.shard_moves, jsonb) FROM PUBLIC;

-- A failed revert fence: the target's fence is lifted (again), the attempt recorded; the next
-- one after 0.5 s, five in all, unless the error was a cancel or an abort elsewhere. Other
-- failed revert steps: nothing (the error is raised as it is).
CREATE OR REPLACE FUNCTION id_gen.revert_step_failed(move_id bigint, phase text, step jsonb, err text, err_state text)
RETURNS id_gen.step_outcome
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  outcome id_gen.step_outcome;
  m id_gen.shard_moves;
  attempt integer := (step->>'attempt')::integer;
  lift_err text;
BEGIN
  SELECT * INTO m FROM id_gen.shard_moves sm WHERE sm.move_id = revert_step_failed.move_id;
  IF NOT FOUND OR phase IS DISTINCT FROM 'reversible' OR step->>'step' IS DISTINCT FROM 'revert_fence' THEN
    RETURN outcome;
  END IF;
  -- (Again, whatever the attempt's own undo did; a lift that fails here, a source that does
  -- not answer, leaves the clean-up revert_fence to the move supervisor.)
  BEGIN
    PERFORM id_gen.lift_revert_fence(m, 5000);
    PERFORM id_gen.forget_cleanup(m.move_id, 'revert_fence');
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    lift_err := SQLERRM;
  END;
  UPDATE id_gen.shard_moves sm SET last_error = format('revert fence attempt %s: %s', attempt, err),
                                   updated_at = clock_timestamp()
  WHERE sm.move_id = m.move_id;
  IF lift_err IS NOT NULL THEN
    outcome.stop_message := format('id_gen: move %s: could not revert: %s', m.move_id, err);
    outcome.stop_sqlstate := coalesce(err_state, '55000');
    outcome.stop_detail := format('Lifting the fence did not finish (%s); the move supervisor finishes it when both shards answer.', lift_err);
    outcome.stop_hint := format('Watch id_gen.moves; once the fence is gone, CALL id_gen.revert_move(%s) again or CALL id_gen.complete_move(%s).', m.move_id, m.move_id);
  ELSIF err_state IN ('57014', '55006') OR attempt >= coalesce((step->>'last')::integer, 5) THEN
    outcome.stop_message := format('id_gen: move %s: could not revert: %s', m.move_id, err);
    outcome.stop_sqlstate := coalesce(err_state, '55000');
    outcome.stop_detail := 'The fence was lifted; the target still serves the genes and the source follows it.';
    outcome.stop_hint := id_gen.stuck_subscription_hint(m, true, (step->>'errors')::bigint);
  ELSE
    outcome.next_step := step || jsonb_build_object('step', 'revert_arm', 'attempt', attempt + 1);
    outcome.pause := 0.5;
  END IF;
  RETURN outcome;
END $$;
COMMENT ON FUNCTION id_gen.revert_step_failed(bigint, text, jsonb, text, text) IS 'What a failed step of a revert means: after a failed fence attempt the target''s fence is lifted and the attempt recorded, and the next attempt follows (five in all); NULLs otherwise.';
REVOKE EXECUTE ON FUNCTION id_gen.revert_step_failed(bigint, text, jsonb, text, text) FROM PUBLIC;

CREATE OR REPLACE PROCEDURE id_gen.revert_move(move_id bigint)
LANGUAGE plpgsql
AS $$
DECLARE
  m id_gen.shard_moves;
BEGIN
  PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
  IF move_id IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "move_id" must not be NULL' USING ERRCODE = '22004';
  END IF;
  m := id_gen.take_reversible_move(move_id, 'revert');
  COMMIT;  -- (run_operation records this session as the runner)
  -- A move resting in phase reversible starts its revert; one in phase reverting (its flip
  -- back committed) is finished.
  CALL id_gen.run_operation(m.move_id, CASE WHEN m.phase = 'reversible' THEN '{"step": "revert_lag"}'::jsonb END);
END $$;
COMMENT ON PROCEDURE id_gen.revert_move(bigint) IS 'Switches the genes of a reversible move back to its source with the same short fence as the move (writes of those genes wait, others do not); every write the target committed is on the source afterwards. Then the target''s copies and the way back go. Resumes a revert that was interrupted after its flip. Superuser only.';
REVOKE EXECUTE ON PROCEDURE id_gen.revert_move(bigint) FROM PUBLIC;

-- Ends a reversible move where it is (complete_move, or the supervisor when the way back
-- keeps more WAL than id_gen.reversible_max_wal): the way back and the source's kept
-- partitions go (the move's cleanup records of a completed move).
CREATE OR REPLACE FUNCTION id_gen.end_way_back(m id_gen.shard_moves) RETURNS id_gen.shard_moves
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  PERFORM id_gen.run_cleanups(m.move_id, true, NULL, false);
  PERFORM id_gen.run_move_step(m, 'forget_markers', 0, 10000);
  UPDATE id_gen.shard_moves sm SET phase = 'done', finished_at = clock_timestamp(), updated_at = clock_timestamp(),
                                   back_lag_bytes = NULL, back_retained_bytes = NULL, last_error = NULL
  WHERE sm.move_id = m.move_id RETURNING * INTO m;
  RETURN m;
END $$;
COMMENT ON FUNCTION id_gen.end_way_back(id_gen.shard_moves) IS 'Ends a reversible move on its target: drops the way back (subscription, publication, slot) and the source''s kept partitions; the move is done.';
REVOKE EXECUTE ON FUNCTION id_gen.end_way_back(id_gen.shard_moves) FROM PUBLIC;

CREATE OR REPLACE PROCEDURE id_gen.complete_move(move_id bigint)
LANGUAGE plpgsql
AS $$
DECLARE
  m id_gen.shard_moves;
BEGIN
  PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
  IF move_id IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "move_id" must not be NULL' USING ERRCODE = '22004';
  END IF;
  m := id_gen.take_reversible_move(move_id, 'complete');
  IF m.phase = 'reverting' THEN
    PERFORM id_gen.release_operation(m.move_id);
    RAISE EXCEPTION 'id_gen: move % is being reverted', move_id
      USING ERRCODE = '55006', HINT = format('CALL id_gen.revert_move(%s) finishes the revert.', move_id);
  END IF;
  m := id_gen.end_way_back(m);
  COMMIT;
  PERFORM id_gen.release_operation(m.move_id);
  RAISE NOTICE 'id_gen: move % complete: genes % .. % stay on %; the source''s copies and the way back are gone',
    m.move_id, m.lower_gene, m.upper_gene, m.target_shard;
END $$;
COMMENT ON PROCEDURE id_gen.complete_move(bigint) IS 'Ends a reversible move where it is: the way back (the source''s subscription, the target''s publication and slot) and the source''s kept partitions go. Superuser only.';
REVOKE EXECUTE ON PROCEDURE id_gen.complete_move(bigint) FROM PUBLIC;
