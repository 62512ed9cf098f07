-- Long operations (moves, splits, merges, reverts, rebalance steps): what they share.
-- Code only (CREATE OR REPLACE); loaded before the files of each kind (sql/cluster/move.sql,
-- sql/cluster/split.sql, sql/cluster/revert.sql, sql/cluster/rebalance.sql), which use it.
-- It holds the advisory-lock keys, the views over the one catalog of operations
-- (id_gen.cluster_operations: id_gen.operations for operators, id_gen.shard_moves and
-- id_gen.route_splits for the code of each kind), the cleanup records (id_gen.run_cleanups),
-- the driver (id_gen.run_operation) and the move supervisor's one recovery loop
-- (id_gen.recover_operations).
--
-- Advisory-lock keys, declared here and nowhere else (pg_locks shows them as classid; the
-- second key of a two-key lock is objid, with objsubid = 2):
--   * id_gen.operation_start_lock_key(): a transaction lock, taken with SHARE ROW
--     EXCLUSIVE on id_gen.shard_routes by whoever decides which operation runs next, so that
--     no route change or new distributed table slips in before a new operation is recorded;
--   * id_gen.operation_session_lock_key(), with the operation's id (moves and splits share
--     the sequence id_gen.move_ids): a session lock held by the session that runs that
--     operation, so a second CALL for it gets 55006 and the move supervisor leaves it alone;
--   * id_gen.conversion_session_lock_key(), with the hash of the table's qualified name: a
--     session lock held by the session that runs convert_to_by_ownership for that table.
--
-- Invariants: the keys never change (a running operation of an older version holds them
-- across an update); they are IMMUTABLE SQL functions, so a call costs nothing.

CREATE OR REPLACE FUNCTION id_gen.operation_start_lock_key() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$SELECT 757430$$;
COMMENT ON FUNCTION id_gen.operation_start_lock_key() IS
  'Advisory-lock key (transaction lock) under which a session decides which long operation (move, split, merge, revert) runs next.';

CREATE OR REPLACE FUNCTION id_gen.operation_session_lock_key() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$SELECT 757431$$;
COMMENT ON FUNCTION id_gen.operation_session_lock_key() IS
  'Advisory-lock key that, with an operation id (move or split), is held as a session lock by the session running that operation.';

CREATE OR REPLACE FUNCTION id_gen.conversion_session_lock_key() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$SELECT 757432$$;
COMMENT ON FUNCTION id_gen.conversion_session_lock_key() IS
  'Advisory-lock key that, with hashtext of a distributed table''s qualified name, is held as a session lock by the session converting that table (id_gen.convert_to_by_ownership).';

-- The catalog of long operations -----------------------------------------------------------
-- One table, id_gen.cluster_operations (sql/install/cluster_catalog.sql), holds every move,
-- split and merge. Each kind's code reads and writes it through a view of its own rows
-- under the names of 0.4.0 to 0.7.2 (id_gen.shard_moves, id_gen.route_splits), whose row
-- types are the parameters of that code. Both views are automatically updatable and WITH
-- CHECK OPTION, so a row written through one is of that view's kind.

CREATE OR REPLACE VIEW id_gen.shard_moves AS
SELECT operation_id AS move_id, lower_gene, upper_gene, shard AS source_shard, target_shard, phase,
       keep_source, rows_copied, lag_bytes, fence_attempts, target_subscription, runner_pid,
       fence_started_at, fence_ended_at, started_at, updated_at, finished_at,
       last_error, target_system_id, recovered_by, reversible, back_lsn,
       back_lag_bytes, back_retained_bytes, back_checked_at, kind,
       verify_state, verify_rows, verify_detail, verify_started_at, verified_at
FROM id_gen.cluster_operations
WHERE kind = 'move'
WITH CASCADED CHECK OPTION;
ALTER VIEW id_gen.shard_moves ALTER COLUMN kind SET DEFAULT 'move';
COMMENT ON VIEW id_gen.shard_moves IS 'The moves of id_gen.cluster_operations, as the code of moves reads and writes them (operation_id is move_id, shard is source_shard); operators read id_gen.moves.';
REVOKE ALL ON id_gen.shard_moves FROM PUBLIC;
GRANT SELECT ON id_gen.shard_moves TO PUBLIC;

CREATE OR REPLACE VIEW id_gen.route_splits AS
SELECT operation_id AS split_id, kind, lower_gene, at_gene, upper_gene, shard, phase,
       rows_total, rows_copied, fence_attempts, runner_pid, fence_started_at, fence_ended_at,
       started_at, updated_at, finished_at, last_error, recovered_by,
       verify_state, verify_rows, verify_detail, verify_started_at, verified_at
FROM id_gen.cluster_operations
WHERE kind IN ('split', 'merge')
WITH CASCADED CHECK OPTION;
ALTER VIEW id_gen.route_splits ALTER COLUMN rows_copied SET DEFAULT 0;
COMMENT ON VIEW id_gen.route_splits IS 'The splits and merges of id_gen.cluster_operations, as the code of splits reads and writes them (operation_id is split_id); operators read id_gen.splits.';
REVOKE ALL ON id_gen.route_splits FROM PUBLIC;
GRANT SELECT ON id_gen.route_splits TO PUBLIC;

-- Whether a session runs an operation now: the session that runs one holds its session
-- advisory lock (operation_session_lock_key(), operation id). NULL once it is finished.
CREATE OR REPLACE FUNCTION id_gen.operation_runner(operation_id bigint, phase text) RETURNS text
LANGUAGE sql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT CASE WHEN phase IN ('done', 'aborted', 'reverted') THEN NULL
              WHEN pg_try_advisory_lock_shared(id_gen.operation_session_lock_key(), operation_id::integer)
                   AND pg_advisory_unlock_shared(id_gen.operation_session_lock_key(), operation_id::integer) THEN 'no session'
              ELSE 'running' END
$$;
COMMENT ON FUNCTION id_gen.operation_runner(bigint, text) IS 'running when a session runs the long operation now (it holds the operation''s session advisory lock), no session when none does, NULL once it is done, aborted or reverted.';

-- How long the check before an operation's cut-over took, or has been running (ms).
CREATE OR REPLACE FUNCTION id_gen.verify_ms(verify_state text, verify_started_at timestamptz, verified_at timestamptz)
RETURNS numeric
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
RETURN CASE WHEN verify_state IS NOT NULL
            THEN round(extract(epoch FROM coalesce(verified_at, CASE WHEN verify_state = 'running' THEN clock_timestamp() END)
                                          - verify_started_at) * 1000, 1) END;
COMMENT ON FUNCTION id_gen.verify_ms(text, timestamptz, timestamptz) IS 'How long the check before an operation''s cut-over took (ms), or has been running so far (verify_state running); NULL before it ran. The column verify_ms of id_gen.operations, id_gen.moves and id_gen.splits.';

CREATE OR REPLACE VIEW id_gen.operations AS
SELECT o.operation_id, o.kind, o.phase, o.lower_gene, o.at_gene, o.upper_gene,
       o.shard AS source_shard, coalesce(o.target_shard, o.shard) AS target_shard,
       o.rows_copied, o.rows_total,
       round(100.0 * least(o.rows_copied, o.rows_total) / nullif(o.rows_total, 0), 1) AS percent_copied,
       o.lag_bytes,
       round(extract(epoch FROM o.fence_ended_at - o.fence_started_at) * 1000, 1) AS fence_ms,
       o.fence_attempts, o.started_at, o.updated_at, o.finished_at,
       coalesce(o.finished_at, clock_timestamp()) - o.started_at AS elapsed,
       o.last_error,
       id_gen.operation_runner(o.operation_id, o.phase) AS runner,
       o.runner_pid,
       o.recovered_by,
       o.verify_state,
       o.verify_rows,
       id_gen.verify_ms(o.verify_state, o.verify_started_at, o.verified_at) AS verify_ms,
       o.verify_detail
FROM id_gen.cluster_operations o
ORDER BY o.operation_id;
COMMENT ON VIEW id_gen.operations IS 'Every long operation of the cluster, whatever its kind (move, split, merge), newest last: its phase, genes and shards, progress (rows copied of the total, replication lag), how long writes were fenced (fence_ms) in how many attempts, times, the last error, whether a session runs it now (runner: running, no session, or NULL once finished) and which backend ran it last (runner_pid), what the move supervisor did (recovered_by), and the check before its cut-over (a move: its source against its target; a split or merge: its new tables against its old partitions; verify_state, verify_rows, verify_ms, verify_detail). id_gen.moves and id_gen.splits show the columns of one kind.';
GRANT SELECT ON id_gen.operations TO PUBLIC;

-- The session lock of an operation --------------------------------------------------------
-- The session that runs an operation holds its session advisory lock
-- (operation_session_lock_key(), operation id) once: these take it only if this session
-- does not hold it already (advisory locks count; a lock taken twice and released once
-- would outlive the CALL), and let go of it.
CREATE OR REPLACE FUNCTION id_gen.holds_operation(operation_id bigint) RETURNS boolean
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT EXISTS (SELECT FROM pg_locks l WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid() AND l.granted
                   AND l.classid = id_gen.operation_session_lock_key()::oid AND l.objid = holds_operation.operation_id
                   AND l.objsubid = 2)
$$;
COMMENT ON FUNCTION id_gen.holds_operation(bigint) IS 'Whether this session holds the session lock of the long operation (it runs it).';

-- (CASE evaluates only the branch it takes: the lock is tried only when not held.)
CREATE OR REPLACE FUNCTION id_gen.take_operation(operation_id bigint) RETURNS boolean
LANGUAGE sql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT CASE WHEN id_gen.holds_operation(operation_id) THEN true
              ELSE pg_try_advisory_lock(id_gen.operation_session_lock_key(), operation_id::integer) END
$$;
COMMENT ON FUNCTION id_gen.take_operation(bigint) IS 'Whether this session holds (now, or already) the session lock of the long operation; false when another session runs it.';
REVOKE EXECUTE ON FUNCTION id_gen.take_operation(bigint) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.release_operation(operation_id bigint) RETURNS boolean
LANGUAGE sql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT CASE WHEN id_gen.holds_operation(operation_id)
              THEN pg_advisory_unlock(id_gen.operation_session_lock_key(), operation_id::integer) ELSE false END
$$;
COMMENT ON FUNCTION id_gen.release_operation(bigint) IS 'Lets go of the session lock of the long operation if this session holds it (true), else does nothing (false).';
REVOKE EXECUTE ON FUNCTION id_gen.release_operation(bigint) FROM PUBLIC;

-- Cleanup records ----------------------------------------------------------------------------
-- What an operation may leave on a shard is recorded in id_gen.operation_cleanups before it
-- is made, in a transaction that commits first (the entry procedure's, or a step of its own
-- that the driver commits), so that a session killed at any point leaves a record of
-- everything it may have made. Each record has a policy: always (it goes whatever the
-- outcome), on_failure (it goes when the operation is rolled back), on_success (deferred
-- until the operation completes). id_gen.run_cleanups runs the records of an outcome, each
-- by its kind's function (id_gen.move_cleanup, id_gen.split_cleanup), from the highest
-- run_order down, and deletes each record it ran.
--
-- Invariants: every kind's clean-up of one object is idempotent (a record may name an object
-- that was never made, or is gone already); a record goes only once its object is gone;
-- once an outcome's records are all gone, so are the other outcome's (nothing is left to do
-- for them).
CREATE OR REPLACE FUNCTION id_gen.record_cleanup(operation_id bigint, object text, node text, object_name text,
                                                 policy text, run_order integer) RETURNS void
LANGUAGE sql STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  INSERT INTO id_gen.operation_cleanups (operation_id, object, node, object_name, policy, run_order)
  VALUES (record_cleanup.operation_id, record_cleanup.object, record_cleanup.node, record_cleanup.object_name,
          record_cleanup.policy, record_cleanup.run_order)
  ON CONFLICT DO NOTHING;
END;
COMMENT ON FUNCTION id_gen.record_cleanup(bigint, text, text, text, text, integer) IS 'Records that a long operation may leave object (object_name on shard node), to be cleaned up by policy (always, on_failure, on_success) in run_order (highest first); nothing if it is recorded already.';
REVOKE EXECUTE ON FUNCTION id_gen.record_cleanup(bigint, text, text, text, text, integer) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.has_cleanup(operation_id bigint, object text) RETURNS boolean
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
RETURN EXISTS (SELECT FROM id_gen.operation_cleanups c WHERE (c.operation_id, c.object) OPERATOR(pg_catalog.=) (has_cleanup.operation_id, has_cleanup.object));
COMMENT ON FUNCTION id_gen.has_cleanup(bigint, text) IS 'Whether a long operation has a cleanup record of object (it may have made it, and it is not cleaned up yet).';

CREATE OR REPLACE FUNCTION id_gen.forget_cleanup(operation_id bigint, object text) RETURNS void
LANGUAGE sql STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  DELETE FROM id_gen.operation_cleanups c WHERE (c.operation_id, c.object) OPERATOR(pg_catalog.=) (forget_cleanup.operation_id, forget_cleanup.object);
END;
COMMENT ON FUNCTION id_gen.forget_cleanup(bigint, text) IS 'Deletes a cleanup record whose object is gone (or was handed on: a fence lifted in a failed attempt, or one that a flip made part of the outcome).';
REVOKE EXECUTE ON FUNCTION id_gen.forget_cleanup(bigint, text) FROM PUBLIC;

-- Runs the cleanup records of an outcome (succeeded: always and on_success; else always
-- and on_failure), only those of `objects` when it is not NULL. keep_going: try every one
-- and return the failures ("object on shard: error; ..."), NULL when all went; otherwise
-- the first failure is raised as it is.
CREATE OR REPLACE FUNCTION id_gen.run_cleanups(operation_id bigint, succeeded boolean, objects text[] DEFAULT NULL,
                                               keep_going boolean DEFAULT true) RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  c id_gen.operation_cleanups;
  errors text;
  msg text;
BEGIN
  IF operation_id IS NULL OR succeeded IS NULL OR keep_going IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "%" must not be NULL',
      CASE WHEN operation_id IS NULL THEN 'operation_id' WHEN succeeded IS NULL THEN 'succeeded' ELSE 'keep_going' END
      USING ERRCODE = '22004';
  END IF;
  FOR c IN SELECT * FROM id_gen.operation_cleanups oc
           WHERE oc.operation_id = run_cleanups.operation_id
             AND oc.policy IN ('always', CASE WHEN succeeded THEN 'on_success' ELSE 'on_failure' END)
             AND (objects IS NULL OR oc.object = ANY (objects))
           ORDER BY oc.run_order DESC LOOP
    IF keep_going THEN
      BEGIN
        PERFORM id_gen.run_cleanup(c.operation_id, c.object, succeeded);
      EXCEPTION WHEN OTHERS OR query_canceled THEN  -- (a shard past its bound is 57014)
        GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT;
        UPDATE id_gen.operation_cleanups oc SET last_error = msg
        WHERE (oc.operation_id, oc.object) = (c.operation_id, c.object);
        errors := concat_ws('; ', errors, format('%s on %s: %s', c.object, c.node, msg));
      END;
    ELSE
      PERFORM id_gen.run_cleanup(c.operation_id, c.object, succeeded);
    END IF;
  END LOOP;
  IF errors IS NULL AND objects IS NULL THEN
    DELETE FROM id_gen.operation_cleanups oc WHERE oc.operation_id = run_cleanups.operation_id;
  END IF;
  RETURN errors;
END $$;
COMMENT ON FUNCTION id_gen.run_cleanups(bigint, boolean, text[], boolean) IS 'Cleans up after a long operation: runs its cleanup records of the outcome (succeeded: policies always and on_success; else always and on_failure), only those of objects if given, highest run_order first, deleting each that went. keep_going tries every one and returns the failures (NULL when all went); else the first failure is raised. Once all of an outcome went, the other records go too.';
REVOKE EXECUTE ON FUNCTION id_gen.run_cleanups(bigint, boolean, text[], boolean) FROM PUBLIC;

-- Rolls back an operation that has not reached the point of no return (a move before its
-- flip, a split or merge before its swap): its cleanup records of a rolled-back operation
-- (id_gen.run_cleanups), then the phase: aborted when all went, else failed with what is
-- left in last_error (after `error`, why it was rolled back, when given). Returns what is
-- left, NULL when nothing is.
CREATE OR REPLACE FUNCTION id_gen.roll_back_operation(operation_id bigint, error text) RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  left_over text;
BEGIN
  IF operation_id IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "operation_id" must not be NULL' USING ERRCODE = '22004';
  END IF;
  left_over := id_gen.run_cleanups(operation_id, false);
  UPDATE id_gen.cluster_operations o
  SET phase = CASE WHEN left_over IS NULL THEN 'aborted' ELSE 'failed' END,
      finished_at = CASE WHEN left_over IS NULL THEN clock_timestamp() END,
      last_error = CASE WHEN error IS NULL THEN coalesce('abort incomplete: ' || left_over, o.last_error)
                        ELSE error || coalesce(' (clean-up incomplete: ' || left_over || ')', '') END,
      updated_at = clock_timestamp()
  WHERE o.operation_id = roll_back_operation.operation_id;
  RETURN left_over;
END $$;
COMMENT ON FUNCTION id_gen.roll_back_operation(bigint, text) IS 'Rolls back a long operation that has not reached its point of no return: runs its cleanup records of a rolled-back operation and marks it aborted, or failed with what is left (after error, why, when given) in last_error; returns what is left, NULL when nothing is.';
REVOKE EXECUTE ON FUNCTION id_gen.roll_back_operation(bigint, text) FROM PUBLIC;

-- One cleanup record, by its operation's kind; the record goes with it.
CREATE OR REPLACE FUNCTION id_gen.run_cleanup(operation_id bigint, object text, succeeded boolean) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  PERFORM id_gen.move_cleanup(sm, object, succeeded) FROM id_gen.shard_moves sm WHERE sm.move_id = run_cleanup.operation_id;
  PERFORM id_gen.split_cleanup(rs, object) FROM id_gen.route_splits rs WHERE rs.split_id = run_cleanup.operation_id;
  DELETE FROM id_gen.operation_cleanups oc WHERE (oc.operation_id, oc.object) = (run_cleanup.operation_id, run_cleanup.object);
END $$;
COMMENT ON FUNCTION id_gen.run_cleanup(bigint, text, boolean) IS 'Cleans up one record of a long operation by its kind (id_gen.move_cleanup, id_gen.split_cleanup) and deletes it.';
REVOKE EXECUTE ON FUNCTION id_gen.run_cleanup(bigint, text, boolean) FROM PUBLIC;

-- Routes and distributed tables stay put while a long operation is unfinished: a move
-- relies on the placements and partitions it prepared, a split on the range it splits
-- (set_route, drop_route, distribute_table, and a new move, split or merge ask here).
CREATE OR REPLACE FUNCTION id_gen.refuse_during_operations(what text) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  busy text;
BEGIN
  SELECT string_agg(format('%s %s (genes %s .. %s%s, %s)', o.kind, o.operation_id, o.lower_gene, o.upper_gene,
                           CASE o.kind WHEN 'move' THEN ' to ' || o.target_shard ELSE ' at ' || o.at_gene END, o.phase),
                    ', ' ORDER BY o.operation_id)
    INTO busy
  FROM id_gen.cluster_operations o WHERE o.phase NOT IN ('done', 'aborted', 'reverted');
  -- (and conversions of the shards' tables, which change what moves and route changes run there)
  SELECT concat_ws(', ', busy, string_agg(format('the conversion of %I.%I to the layout by ownership (since %s)',
                                                 t.schema_name, t.table_name, t.converting_since), ', '
                                          ORDER BY t.schema_name, t.table_name))
    INTO busy
  FROM id_gen.distributed_tables t WHERE t.converting_since IS NOT NULL;
  IF busy <> '' THEN
    RAISE EXCEPTION 'id_gen: cannot % while long operations are unfinished: %', what, busy
      USING ERRCODE = '55006',
            HINT = 'Finish each with the same CALL (id_gen.move_genes, split_route, merge_routes or convert_to_by_ownership; CALL id_gen.run_operation(operation_id) resumes a move, split or merge), or roll it back with CALL id_gen.abort_move(id) or id_gen.abort_split(id). id_gen.operations lists moves, splits and merges; id_gen.distributed_tables.converting_since the conversions.';
  END IF;
END $$;
COMMENT ON FUNCTION id_gen.refuse_during_operations(text) IS 'Raises 55006, naming them, while long operations (moves of genes, splits or merges of route ranges, conversions of the shards'' tables to the layout by ownership) are unfinished.';
REVOKE EXECUTE ON FUNCTION id_gen.refuse_during_operations(text) FROM PUBLIC;

-- The driver ------------------------------------------------------------------------------
-- One procedure runs a long operation to its end, or resumes it: CALL id_gen.run_operation(id)
-- (move_genes, split_route and merge_routes record theirs and call it). It repeats: read
-- the operation; if it is finished (or a reversible move rests after its cut-over), stop;
-- run the kind's next step (id_gen.move_step, id_gen.split_step), a function that does one
-- unit of work and never commits; COMMIT; tell the shards the route version if the step
-- raised it; pause if the step asked. A step that raises is rolled back (its calls to
-- shards are not) and the kind says what that means (id_gen.move_step_failed,
-- id_gen.split_step_failed): try again after a pause, stop with an error (recorded first:
-- the driver commits, lets go of the operation, then raises), or nothing, and the error is
-- raised as it is (the operation stays this session's until it calls again or disconnects,
-- and the same CALL resumes it).
--
-- Invariants: every COMMIT between steps is here (the procedures that call the driver
-- commit only the operation's record before they call it), and each is followed by pinning
-- search_path again (a COMMIT in a procedure ends the SET of the CALL); the operation's
-- session lock is held from before the first step to after the last commit; a step sees
-- the operation as the last commit left it.
CREATE OR REPLACE PROCEDURE id_gen.run_operation(operation_id bigint, from_step jsonb DEFAULT NULL)
LANGUAGE plpgsql
AS $$
DECLARE
  o id_gen.cluster_operations;
  step jsonb := from_step;
  r id_gen.step_outcome;
  raised boolean;
  err text;
  err_state text;
  err_detail text;
  err_hint text;
BEGIN
  PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
  PERFORM id_gen.require_superuser('run long operations');
  IF operation_id IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "operation_id" must not be NULL' USING ERRCODE = '22004';
  END IF;
  SELECT * INTO o FROM id_gen.cluster_operations co WHERE co.operation_id = run_operation.operation_id;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'id_gen: there is no operation %', operation_id
      USING ERRCODE = '42704', HINT = 'Long operations are listed in id_gen.operations.';
  ELSIF NOT id_gen.take_operation(o.operation_id) THEN
    RAISE EXCEPTION 'id_gen: % % is running in session %', o.kind, o.operation_id, o.runner_pid
      USING ERRCODE = '55006', HINT = 'Watch it in id_gen.operations.';
  END IF;
  -- (The one place that records who runs an operation; updated_at restarts the supervisor's grace.)
  UPDATE id_gen.cluster_operations co SET runner_pid = pg_backend_pid(), updated_at = clock_timestamp()
  WHERE co.operation_id = o.operation_id;
  COMMIT;
  LOOP
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    SELECT * INTO o FROM id_gen.cluster_operations co WHERE co.operation_id = run_operation.operation_id;
    -- (A reversible move rests after its cut-over until revert_move starts its revert with
    -- from_step, or complete_move ends it.)
    EXIT WHEN o.phase IN ('done', 'aborted', 'reverted') OR (o.kind = 'move' AND o.phase = 'reversible' AND step IS NULL);
    err := NULL;
    raised := false;
    BEGIN
      r := CASE o.kind WHEN 'move' THEN id_gen.move_step(o.operation_id, step)
                       ELSE id_gen.split_step(o.operation_id, step) END;
      raised := id_gen.route_version_raised_here();
    EXCEPTION WHEN OTHERS OR query_canceled THEN
      GET STACKED DIAGNOSTICS err = MESSAGE_TEXT, err_state = RETURNED_SQLSTATE,
                              err_detail = PG_EXCEPTION_DETAIL, err_hint = PG_EXCEPTION_HINT;
    END;
    IF err IS NOT NULL THEN
      r := CASE o.kind WHEN 'move' THEN id_gen.move_step_failed(o.operation_id, o.phase, step, err, err_state, err_detail, err_hint)
                       ELSE id_gen.split_step_failed(o.operation_id, o.phase, step, err, err_state, err_detail, err_hint) END;
      IF r IS NULL THEN  -- (every field NULL: the kind does not handle this error)
        PERFORM id_gen.reraise(err, err_state, err_detail, err_hint);
      END IF;
    END IF;
    COMMIT;
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    IF raised THEN
      PERFORM id_gen.push_route_state_quietly();  -- the shards learn the new route version
    END IF;
    IF r.stop_message IS NOT NULL THEN
      PERFORM id_gen.release_operation(o.operation_id);
      PERFORM id_gen.reraise(r.stop_message, r.stop_sqlstate, r.stop_detail, r.stop_hint);
    END IF;
    step := r.next_step;
    IF r.pause > 0 THEN
      PERFORM pg_sleep(r.pause);
    END IF;
  END LOOP;
  PERFORM id_gen.release_operation(o.operation_id);
  RAISE NOTICE '%', CASE o.kind WHEN 'move' THEN id_gen.move_summary(o.operation_id) ELSE id_gen.split_summary(o.operation_id) END;
END $$;
COMMENT ON PROCEDURE id_gen.run_operation(bigint, jsonb) IS 'Runs a long operation (a move, split or merge, by its id in id_gen.operations) to its end, or resumes it: one step at a time, each committed (a reversible move stops after its cut-over). move_genes, split_route and merge_routes record theirs and call it; revert_move starts a revert with from_step (where in the current phase to begin; NULL: at its start). Run it outside a transaction block. Superuser only.';
REVOKE EXECUTE ON PROCEDURE id_gen.run_operation(bigint, jsonb) FROM PUBLIC;

-- The recovery loop ---------------------------------------------------------------------
-- One pass over the operations no session runs, for the move supervisor (a background
-- worker on the coordinator, src/supervisor.rs) every few seconds, or by hand. Each kind
-- says what to do with one of its operations (id_gen.recover_move, id_gen.recover_split);
-- this loop does what they share: it tells the shards the route version first, leaves out
-- shards that did not answer lately (each call to one would wait for its bound), takes
-- the operation's session lock (an operation some session runs is left alone), records
-- what it did (recovered_by) or the error (last_error), and leaves out for the rest of
-- the pass, and until it answers a route push, a shard that did not answer. A pass ends
-- after an action that holds ACCESS EXCLUSIVE locks on the coordinator (they last until the
-- pass's COMMIT); the next pass, a few seconds later, does the rest.
CREATE OR REPLACE FUNCTION id_gen.recover_operations(abandon_after interval DEFAULT '10 min', grace interval DEFAULT '10 s')
RETURNS TABLE (operation_id bigint, kind text, action text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  o id_gen.cluster_operations;
  err text;
  err_state text;
  down text[];
  silent text;
BEGIN
  PERFORM id_gen.require_superuser('recover long operations');
  -- Shards that have not been told the current route version (set_route, drop_route, or a
  -- push that failed) are told first (sql/cluster/routing.sql; shards that answer first).
  PERFORM id_gen.push_route_state();
  down := id_gen.shards_not_answering();
  -- Reversible moves: their reverse replication lag and retained WAL, for id_gen.moves.
  PERFORM id_gen.check_way_back(sm) FROM id_gen.shard_moves sm
  WHERE sm.phase = 'reversible' AND (sm.back_checked_at IS NULL OR sm.back_checked_at < clock_timestamp() - interval '10 s')
    AND sm.target_shard <> ALL (down);
  -- (grace: a CALL that just failed is usually called again by its operator at once.)
  -- (A move whose fence may have re-laid per_shard tables on its shards is taken at once: no
  -- session holds it, so a fence died there, and the coordinator reads the shards' tables.)
  FOR o IN SELECT * FROM id_gen.cluster_operations co
           WHERE co.phase NOT IN ('done', 'aborted', 'reverted')
             AND (co.updated_at < clock_timestamp() - grace
                  OR EXISTS (SELECT FROM id_gen.operation_cleanups oc
                             WHERE oc.operation_id = co.operation_id AND oc.object = 'shown_copies'))
           ORDER BY co.operation_id LOOP
    -- A move's target (fenced again before the cut-over, the bound of a reversible move's
    -- WAL) and a split's shard are needed in any case.
    CONTINUE WHEN coalesce(o.target_shard, o.shard) = ANY (down);
    CONTINUE WHEN NOT pg_try_advisory_lock(id_gen.operation_session_lock_key(), o.operation_id::integer);
    operation_id := o.operation_id;
    kind := o.kind;
    action := NULL;
    err := NULL;
    BEGIN
      action := CASE o.kind WHEN 'move' THEN id_gen.recover_move(o.operation_id, abandon_after, down)
                            ELSE id_gen.recover_split(o.operation_id, abandon_after) END;
    EXCEPTION WHEN OTHERS OR query_canceled THEN  -- (a shard past its bound is 57014)
      GET STACKED DIAGNOSTICS err = MESSAGE_TEXT, err_state = RETURNED_SQLSTATE;
    END;
    IF err IS NOT NULL THEN
      silent := CASE WHEN err_state IN ('08006', '57014') THEN substring(err FROM '^id_gen: shard "([^"]+)"') END;
      IF silent IS NOT NULL THEN
        down := down || silent;
        PERFORM id_gen.note_route_push(silent, NULL, err);
      END IF;
      UPDATE id_gen.cluster_operations co SET last_error = 'supervisor: ' || err, updated_at = clock_timestamp()
      WHERE co.operation_id = o.operation_id;
      action := 'failed: ' || err;
    ELSIF action IS NOT NULL THEN
      UPDATE id_gen.cluster_operations co SET recovered_by = action || ' at ' || clock_timestamp()::text
      WHERE co.operation_id = o.operation_id;
    END IF;
    PERFORM pg_advisory_unlock(id_gen.operation_session_lock_key(), o.operation_id::integer);
    IF action IS NOT NULL THEN
      RETURN NEXT;
      -- An action that took ACCESS EXCLUSIVE locks here (a fence lifted under the
      -- coordinator's locks of the per_shard tables, partitions attached or detached) ends
      -- the pass: they are held until its COMMIT, and every statement of those tables waits
      -- for them; the next pass, seconds later, goes on. (A recovery that failed holds none:
      -- its subtransaction rolled back.)
      EXIT WHEN EXISTS (SELECT FROM pg_locks l WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation'
                                                 AND l.mode = 'AccessExclusiveLock' AND l.granted);
    END IF;
  END LOOP;
END $$;
COMMENT ON FUNCTION id_gen.recover_operations(interval, interval) IS 'One pass of the move supervisor over the long operations no session runs (and none touched for grace): lifts the source''s fence of a move that has not cut over, finishes a move that has cut over and a split or merge that swapped on its shard, and rolls back one left alone for abandon_after. Returns what it did. A pass ends after an action that took ACCESS EXCLUSIVE locks here (a fence lifted under the coordinator''s locks), so that they are held only until its COMMIT. Superuser only.';
REVOKE EXECUTE ON FUNCTION id_gen.recover_operations(interval, interval) FROM PUBLIC;
