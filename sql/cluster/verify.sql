-- The check before a cut-over: a move compares its source and target (rows and a checksum
-- per gene) after the copy caught up and before its fence, and refuses to flip on a
-- difference (XX001); CALL id_gen.verify_range(move_id) runs the same check on demand.
-- Code only (CREATE OR REPLACE); the shard half is sql/cluster/shard/verify.sql, the
-- columns it records (verify_*) are in sql/install/cluster_catalog.sql, and the move's step
-- that runs it is in sql/cluster/move.sql (catching_up: lag, probe, verify, lag, ...).
--
-- How it works. The writers of the genes go on (no lock, no fence), so the two sides are
-- never read at one instant. Each round, one committed step of the move:
--   1. a marker is written on the source and awaited on the target (apply is in commit
--      order: the target then holds every change the source committed before the marker);
--   2. the target is read, then the source (shard_verify_genes: per gene, rows and checksum).
-- The target's read reflects the source at some point between the source's previous read
-- and this one. So a gene is
--   * equal when both sides give the same rows and checksum in a round;
--   * different when they differ, and each side gives the same values as in the round
--     before, the versions of its rows (their xmin) too: nobody wrote the gene on the source
--     in between (a write that put a value back included), so the target had to catch up to
--     exactly that; the copy lost, added or changed a row of that gene;
--   * open otherwise (the source wrote the gene meanwhile): read again next round, only
--     those genes.
-- After 5 rounds, genes still open were written in every round (unsettled): the check
-- passes with them counted and named in verify_detail, since they could not be compared
-- while written. A difference is recorded (committed) before the move stops with XX001;
-- the move stays in catching_up, the source authoritative, the routes unchanged.
--
-- Splits and merges stay on one shard, so their check is exact and takes one call: before the
-- swap (after the catch-up), the shard compares each old partition with its new table per
-- gene in one snapshot, leaving out the ids written since the copy (shard_split_log, which
-- the swap's last catch-up brings up to date under its lock): every other row must be equal
-- (id_gen.verify_split).
--
-- Invariants:
--   * Nothing here locks a table or holds a shard's rows: the check adds nothing to the
--     fence (which starts only after it, and waits for the lag again).
--   * What a round concluded is in the step (open genes and their last values) and in the
--     operation's row; a round that fails leaves both as the last committed round left them.
--   * A shard without shard_verify_genes (older than 0.7.17) is not checked: the move goes
--     on with a WARNING and verify_state skipped.

-- Whether a move still has to run its check in this CALL: not passed (equal, unsettled) or
-- skipped since the CALL began (move_step forgets an earlier result when a CALL resumes the
-- move in catching_up, so that an old result, or one of verify_range, never stands in).
CREATE OR REPLACE FUNCTION id_gen.verify_pending(m id_gen.shard_moves) RETURNS boolean
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
RETURN m.verify_state IS NULL OR m.verify_state NOT IN ('equal', 'unsettled', 'skipped');
COMMENT ON FUNCTION id_gen.verify_pending(id_gen.shard_moves) IS 'Whether a move has still to compare its source and target before its fence in this CALL (no check passed or skipped since the CALL resumed it; a difference found earlier is checked again).';
REVOKE EXECUTE ON FUNCTION id_gen.verify_pending(id_gen.shard_moves) FROM PUBLIC;

-- One side's per-gene values of a move's tables (jsonb {"<gene>": [rows, "<checksum>"]}),
-- all genes ('{}') or those listed.
CREATE OR REPLACE FUNCTION id_gen.verify_read(m id_gen.shard_moves, on_target boolean, genes integer[]) RETURNS jsonb
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  pub record := id_gen.published_move_parts(m.lower_gene, m.upper_gene);
BEGIN
  RETURN id_gen.remote_call(CASE WHEN on_target THEN m.target_shard ELSE m.source_shard END, 'shard_verify_genes',
                            ARRAY[pub.tables::text, pub.id_columns::text, pub.lower_genes::text, pub.upper_genes::text,
                                  genes::text], 600000)::jsonb;
END $$;
COMMENT ON FUNCTION id_gen.verify_read(id_gen.shard_moves, boolean, integer[]) IS 'For the check before a move''s cut-over: the rows and checksum per gene of the move''s tables on its source or its target (on_target), of every gene ({}) or the genes listed.';
REVOKE EXECUTE ON FUNCTION id_gen.verify_read(id_gen.shard_moves, boolean, integer[]) FROM PUBLIC;

-- Records the check's state on the operation's row (NULL rows_compared leaves it as it is).
CREATE OR REPLACE FUNCTION id_gen.verify_record(move_id bigint, state text, rows_compared bigint, detail text) RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  UPDATE id_gen.cluster_operations o
  SET verify_state = verify_record.state,
      verify_rows = coalesce(verify_record.rows_compared, o.verify_rows),
      verify_detail = verify_record.detail,
      verify_started_at = CASE WHEN verify_record.state = 'running' AND o.verify_state IS DISTINCT FROM 'running' THEN clock_timestamp()
                               ELSE o.verify_started_at END,
      verified_at = CASE WHEN verify_record.state = 'running' THEN NULL ELSE clock_timestamp() END,
      updated_at = clock_timestamp()
  WHERE o.operation_id = verify_record.move_id;
END;
COMMENT ON FUNCTION id_gen.verify_record(bigint, text, bigint, text) IS 'Records the state of the check before a move''s cut-over, or a split''s or merge''s swap, on its row of id_gen.cluster_operations (running starts the clock; any other state stops it).';
REVOKE EXECUTE ON FUNCTION id_gen.verify_record(bigint, text, bigint, text) FROM PUBLIC;

-- Whether an operation's check is skipped, recorded as such: id_gen.verify_cut_over is off, or
-- one of the shards has no check function of the signature given yet (a WARNING).
CREATE OR REPLACE FUNCTION id_gen.verify_skipped(operation_id bigint, operation text, shards text[], signature text)
RETURNS boolean
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  shard text;
BEGIN
  IF NOT coalesce(current_setting('id_gen.verify_cut_over', true), 'on')::boolean THEN
    PERFORM id_gen.verify_record(operation_id, 'skipped', NULL, 'id_gen.verify_cut_over is off');
    RETURN true;
  END IF;
  FOREACH shard IN ARRAY shards LOOP
    IF NOT id_gen.shard_has_function(shard, signature) THEN
      RAISE WARNING 'id_gen: %: not checked before the cut-over: shard "%" has no %', operation, shard, split_part(signature, '(', 1)
        USING HINT = 'It needs id_gen 0.7.17 or later: run ALTER EXTENSION id_gen UPDATE on the shard before the next move, split or merge.';
      PERFORM id_gen.verify_record(operation_id, 'skipped', NULL,
                                   format('shard "%s" has no %s (older than 0.7.17)', shard, split_part(signature, '(', 1)));
      RETURN true;
    END IF;
  END LOOP;
  RETURN false;
END $$;
COMMENT ON FUNCTION id_gen.verify_skipped(bigint, text, text[], text) IS 'Whether the check before an operation''s cut-over is skipped (id_gen.verify_cut_over off, or a shard without the check function of the signature given: a WARNING); records it as skipped.';
REVOKE EXECUTE ON FUNCTION id_gen.verify_skipped(bigint, text, text[], text) FROM PUBLIC;

-- One round of the check (one committed step): see the head of this file. step holds the
-- round, its marker, the open genes with their last values ({"<gene>": {"s": .., "t": ..}})
-- and the step to go on with once the check passes ("then"). Returns the next step, or the
-- XX001 (a difference) or 55000 (the marker did not arrive in 10 s) to stop with.
CREATE OR REPLACE FUNCTION id_gen.verify_step(m id_gen.shard_moves, step jsonb) RETURNS id_gen.step_outcome
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  outcome id_gen.step_outcome;
  round_no integer := coalesce((step->>'round')::integer, 1);
  last_round constant integer := 5;
  s jsonb;
  t jsonb;
  open_genes integer[];
  compared bigint;
  still_open jsonb;
  differ text[];
  n_differ integer;
  n_open integer;
BEGIN
  IF round_no = 1 AND step->>'deadline' IS NULL THEN
    IF id_gen.verify_skipped(m.move_id, format('move %s', m.move_id), ARRAY[m.source_shard, m.target_shard],
                             'id_gen.shard_verify_genes(text[],name[],integer[],integer[],integer[])') THEN
      outcome.next_step := step->'then';
      RETURN outcome;
    END IF;
    PERFORM id_gen.verify_record(m.move_id, 'running', NULL, NULL);
  END IF;
  -- 1. The marker of this round, written on the source and awaited on the target: the probe's
  -- (55000 after 10 s, its hint naming a subscription that stopped on errors).
  outcome := id_gen.probe_outcome(m, false, step, step || '{"arrived": true}');
  IF outcome.stop_message IS NOT NULL OR outcome.next_step->>'arrived' IS NULL THEN
    RETURN outcome;  -- (stopped, or not there yet: the same step again after the pause)
  END IF;
  outcome := NULL;
  -- 2. The target, then the source: the genes still open, or all of them in round 1.
  SELECT coalesce(array_agg(k::integer ORDER BY k::integer), '{}') INTO open_genes FROM jsonb_object_keys(step->'open') k;
  BEGIN
    t := id_gen.verify_read(m, true, open_genes);
    s := id_gen.verify_read(m, false, open_genes);
  EXCEPTION WHEN query_canceled THEN
    RAISE EXCEPTION 'id_gen: move %: reading the rows of genes % .. % to compare the shards took over 10 minutes', m.move_id, m.lower_gene, m.upper_gene
      USING ERRCODE = '57014',
            HINT = 'No fence was raised; the move stays in catching_up. Move fewer genes at a time, or SET id_gen.verify_cut_over = off before calling again to move without the check.';
  END;
  -- 3. Each gene: equal, different (each side as in the round before, and they differ), or open.
  WITH src AS (SELECT e.key::integer AS gene, e.value FROM jsonb_each(s) e),
       tgt AS (SELECT e.key::integer AS gene, e.value FROM jsonb_each(t) e),
       genes AS (SELECT g.gene FROM unnest(open_genes) g(gene) WHERE round_no > 1
                 UNION SELECT src.gene FROM src WHERE round_no = 1 UNION SELECT tgt.gene FROM tgt WHERE round_no = 1),
       now_ AS (SELECT g.gene, coalesce(src.value, '[0, "0", "0"]') AS sv, coalesce(tgt.value, '[0, "0", "0"]') AS tv,
                       step->'open'->(g.gene::text) AS was
                FROM genes g LEFT JOIN src USING (gene) LEFT JOIN tgt USING (gene))
  -- (rows and checksum, [0] and [1], are compared across the shards; the versions, [2], only
  -- with the same shard's previous read)
  SELECT coalesce(sum((n.sv->>0)::bigint) FILTER (WHERE round_no = 1), 0),
         coalesce(jsonb_object_agg(n.gene, jsonb_build_object('s', n.sv, 't', n.tv))
                    FILTER (WHERE n.differs AND NOT n.stable), '{}'),
         (array_agg(format('gene %s: %s rows on %s, %s on %s%s', n.gene, n.sv->>0, m.source_shard, n.tv->>0, m.target_shard,
                          CASE WHEN n.sv->0 = n.tv->0 THEN ' (their contents differ)' ELSE '' END) ORDER BY n.gene)
            FILTER (WHERE n.differs AND n.stable))[1:10],
         count(*) FILTER (WHERE n.differs AND n.stable)
    INTO compared, still_open, differ, n_differ
  FROM (SELECT x.*, (x.sv->0, x.sv->1) IS DISTINCT FROM (x.tv->0, x.tv->1) AS differs,
               coalesce(x.was->'s' = x.sv AND x.was->'t' = x.tv, false) AS stable
        FROM now_ x) n;
  n_open := (SELECT count(*) FROM jsonb_object_keys(still_open));
  IF n_differ > 0 THEN
    PERFORM id_gen.verify_record(m.move_id, 'different', NULLIF(compared, 0),
                                 format('%s gene(s) differ: %s', n_differ, array_to_string(differ, '; ')));
    outcome.stop_message := format('id_gen: move %s: source "%s" and target "%s" differ in genes %s .. %s, so the move does not cut over: %s',
                                   m.move_id, m.source_shard, m.target_shard, m.lower_gene, m.upper_gene, differ[1]);
    outcome.stop_sqlstate := 'XX001';
    outcome.stop_detail := format('%s gene(s) differ, and neither side changed them between two comparisons: %s. No fence was raised; the source still serves the genes, and the move stays in catching_up.',
                                  n_differ, array_to_string(differ, '; '));
    outcome.stop_hint := format('Compare the rows of those genes on both shards (id BETWEEN id_gen.gene_first_id(gene) AND id_gen.gene_last_id(gene)) soon: the move supervisor rolls back a move no session runs after id_gen.move_abandon_after, dropping the target''s copies. CALL id_gen.abort_move(%s) does that now, and a new move copies them again; CALL id_gen.move_genes(%s, %s, %L) checks again.',
                                m.move_id, m.lower_gene, m.upper_gene, m.target_shard);
    RETURN outcome;
  ELSIF n_open = 0 OR round_no >= last_round THEN
    PERFORM id_gen.verify_record(m.move_id, CASE WHEN n_open = 0 THEN 'equal' ELSE 'unsettled' END, NULLIF(compared, 0),
                                 CASE WHEN n_open > 0 THEN
                                   format('%s gene(s) were written in each of %s rounds and could not be compared: %s', n_open, round_no,
                                          (SELECT string_agg(k, ', ' ORDER BY k::integer) FROM (SELECT k FROM jsonb_object_keys(still_open) k ORDER BY k::integer LIMIT 20) x))
                                 END);
    IF n_open > 0 THEN
      RAISE NOTICE 'id_gen: move %: % gene(s) were written in each of % rounds and could not be compared before the cut-over (id_gen.moves.verify_detail names them)',
                   m.move_id, n_open, round_no;
    END IF;
    outcome.next_step := step->'then';
    RETURN outcome;
  END IF;
  IF round_no = 1 THEN
    UPDATE id_gen.cluster_operations o SET verify_rows = compared WHERE o.operation_id = m.move_id;
  END IF;
  outcome.next_step := jsonb_build_object('step', step->>'step', 'round', round_no + 1, 'open', still_open, 'then', step->'then');
  RETURN outcome;
END $$;
COMMENT ON FUNCTION id_gen.verify_step(id_gen.shard_moves, jsonb) IS 'One round of the check before a move''s cut-over (sql/cluster/verify.sql): a marker passed from source to target, then both read per gene (rows, checksum) and compared; returns the next round, the step to go on with once every gene is equal (or, after 5 rounds, written in every round), or XX001 naming the genes that differ (recorded first).';
REVOKE EXECUTE ON FUNCTION id_gen.verify_step(id_gen.shard_moves, jsonb) FROM PUBLIC;

-- On demand: the same check for a move that has copied its rows and not cut over, in this
-- session (it takes the move, as move_genes does), each round committed.
CREATE OR REPLACE PROCEDURE id_gen.verify_range(move_id bigint)
LANGUAGE plpgsql
AS $$
DECLARE
  m id_gen.shard_moves;
  step jsonb := '{"step": "verify", "then": {"step": "verified"}}';
  outcome id_gen.step_outcome;
  err text;
  err_state text;
  err_detail text;
  err_hint text;
BEGIN
  -- (First a COMMIT, so that a CALL inside a transaction block fails here, before it takes
  -- the move's session lock. After every COMMIT the search_path is pinned again.)
  COMMIT;
  PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
  IF move_id IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "move_id" must not be NULL' USING ERRCODE = '22004';
  END IF;
  PERFORM id_gen.require_superuser('compare the shards of a move');
  SELECT * INTO m FROM id_gen.shard_moves sm WHERE sm.move_id = verify_range.move_id;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'id_gen: there is no move %', move_id USING ERRCODE = '42704', HINT = 'Moves are listed in id_gen.moves.';
  ELSIF m.phase <> 'catching_up' THEN
    RAISE EXCEPTION 'id_gen: move % is %, and only a move that copied its rows and has not cut over (catching_up) can be compared', move_id, m.phase
      USING ERRCODE = '55000',
            HINT = CASE WHEN m.phase IN ('planned', 'copying') THEN 'Wait until id_gen.moves shows it catching_up.'
                        ELSE 'A move compares its shards itself before it cuts over (id_gen.moves.verify_state); after that the source no longer holds the rows.' END;
  ELSIF NOT id_gen.take_operation(m.move_id) THEN
    RAISE EXCEPTION 'id_gen: move % is running in session %', m.move_id, m.runner_pid
      USING ERRCODE = '55006', HINT = 'Its own check runs before its fence (id_gen.moves.verify_state); call again once the session lets it go.';
  END IF;
  -- From here on the session holds the move: every error lets go of it first.
  LOOP
    BEGIN
      PERFORM pg_catalog.set_config('id_gen.verify_cut_over', 'on', true);
      IF outcome.pause > 0 THEN
        PERFORM pg_catalog.pg_sleep(outcome.pause::double precision);
      END IF;
      SELECT * INTO m FROM id_gen.shard_moves sm WHERE sm.move_id = verify_range.move_id;
      IF m.phase <> 'catching_up' THEN
        RAISE EXCEPTION 'id_gen: move % is % now (aborted meanwhile?)', m.move_id, m.phase USING ERRCODE = '55006';
      END IF;
      outcome := id_gen.verify_step(m, step);
    EXCEPTION WHEN OTHERS OR query_canceled THEN
      GET STACKED DIAGNOSTICS err = MESSAGE_TEXT, err_state = RETURNED_SQLSTATE, err_detail = PG_EXCEPTION_DETAIL, err_hint = PG_EXCEPTION_HINT;
    END;
    IF err IS NOT NULL THEN
      PERFORM id_gen.release_operation(m.move_id);
      PERFORM id_gen.reraise(err, err_state, err_detail, err_hint);
    END IF;
    COMMIT;  -- (the round's result)
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    IF outcome.stop_message IS NOT NULL THEN
      PERFORM id_gen.release_operation(m.move_id);
      PERFORM id_gen.reraise(outcome.stop_message, outcome.stop_sqlstate, outcome.stop_detail, outcome.stop_hint);
    END IF;
    EXIT WHEN outcome.next_step->>'step' IS DISTINCT FROM 'verify';
    step := outcome.next_step;
  END LOOP;
  PERFORM id_gen.release_operation(m.move_id);
  SELECT * INTO m FROM id_gen.shard_moves sm WHERE sm.move_id = verify_range.move_id;
  RAISE NOTICE 'id_gen: move %: % (% rows of genes % .. % compared between "%" and "%")%', m.move_id, m.verify_state,
               coalesce(m.verify_rows, 0), m.lower_gene, m.upper_gene, m.source_shard, m.target_shard,
               coalesce(': ' || m.verify_detail, '');
END $$;
COMMENT ON PROCEDURE id_gen.verify_range(bigint) IS 'Compares a move''s source and target (rows and a checksum per gene of every table it moves) now, while their writers go on, as the move does before its cut-over: records the result in id_gen.moves (verify_state, verify_rows, verify_detail) and fails with XX001 naming the genes that differ. Only for a move in catching_up that no other session runs. Superuser only.';
REVOKE EXECUTE ON PROCEDURE id_gen.verify_range(bigint) FROM PUBLIC;

-- A split's or merge's check before its swap (one call on its shard; see the head of this
-- file): records the result and returns the XX001 to stop with when the new tables differ
-- from the old partitions; an empty outcome otherwise.
CREATE OR REPLACE FUNCTION id_gen.verify_split(s id_gen.route_splits) RETURNS id_gen.step_outcome
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  outcome id_gen.step_outcome;
  res jsonb;
  differ text;
BEGIN
  IF id_gen.verify_skipped(s.split_id, format('%s %s', s.kind, s.split_id), ARRAY[s.shard], 'id_gen.shard_split_verify(bigint)') THEN
    RETURN outcome;
  END IF;
  PERFORM id_gen.verify_record(s.split_id, 'running', NULL, NULL);
  res := id_gen.remote_call(s.shard, 'shard_split_verify', ARRAY[s.split_id::text], 600000)::jsonb;
  IF (res->>'differ_count')::integer > 0 THEN
    differ := (SELECT string_agg(d, '; ') FROM jsonb_array_elements_text(res->'differ') d);
    PERFORM id_gen.verify_record(s.split_id, 'different', (res->>'rows')::bigint,
                                 format('%s gene(s) differ: %s', res->>'differ_count', differ));
    outcome.stop_message := format('id_gen: %s %s: the new tables on shard "%s" differ from its old partitions in genes %s .. %s, so it does not swap: %s',
                                   s.kind, s.split_id, s.shard, s.lower_gene, s.upper_gene, res->'differ'->>0);
    outcome.stop_sqlstate := 'XX001';
    outcome.stop_detail := format('%s gene(s) differ, leaving out the rows written since the copy: %s. No fence was raised; the old partitions still serve the genes.',
                                  res->>'differ_count', differ);
    outcome.stop_hint := format('CALL id_gen.abort_split(%s) drops the new tables, and a new %s copies the rows again; the same CALL checks again.',
                                s.split_id, s.kind);
  ELSE
    PERFORM id_gen.verify_record(s.split_id, 'equal', (res->>'rows')::bigint, NULL);
  END IF;
  RETURN outcome;
END $$;
COMMENT ON FUNCTION id_gen.verify_split(id_gen.route_splits) IS 'The check of a split or merge before its swap: its shard compares each old partition with its new table per gene (rows, checksum) in one snapshot, leaving out the rows written since the copy; records the result (verify_state of id_gen.splits) and returns the XX001 to stop with on a difference.';
REVOKE EXECUTE ON FUNCTION id_gen.verify_split(id_gen.route_splits) FROM PUBLIC;
