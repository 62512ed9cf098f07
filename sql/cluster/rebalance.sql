-- A rebalancer in the spirit of Citus's rebalance_table_shards, on the coordinator:
-- id_gen.plan_rebalance proposes splits (split_route) and moves (move_genes) from the rows
-- each route range holds (every distributed table counted through its foreign tables), and
-- CALL id_gen.rebalance(dry_run => false) runs them one after another, each with its own
-- fence. Code only (CREATE OR REPLACE); no catalog of its own.
--
-- The plan is greedy and deterministic: while the busiest shard (hot) holds more than
-- (1 + tolerance) × the mean, the range of the hot shard that best fills the gap without
-- overshooting moves to the emptiest shard (cold); when every range of the hot shard is too
-- big, its biggest range is first split at the gene where the part above holds about the
-- rows to move (per-gene counts), and that part moves. Ranges are never merged by the plan.
-- Invariants: it reads only (counts through postgres_fdw); every step it proposes is a
-- call a DBA could type, and rebalance runs exactly those calls.

-- Rows per route range, summed over the distributed tables.
CREATE OR REPLACE FUNCTION id_gen.route_range_rows()
RETURNS TABLE (lower_gene integer, upper_gene integer, shard text, row_count bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  r record;
  d id_gen.distributed_tables;
  n bigint;
BEGIN
  FOR r IN SELECT * FROM id_gen.route_ranges rr ORDER BY rr.lower_gene LOOP
    lower_gene := r.lower_gene;
    upper_gene := r.upper_gene;
    shard := r.shard;
    row_count := 0;
    FOR d IN SELECT * FROM id_gen.distributed_tables t ORDER BY t.schema_name, t.table_name LOOP
      EXECUTE format('SELECT count(*) FROM %s', id_gen.genes_rows(d, r.lower_gene, r.upper_gene)) INTO n;
      row_count := row_count + n;
    END LOOP;
    RETURN NEXT;
  END LOOP;
END $$;
COMMENT ON FUNCTION id_gen.route_range_rows() IS 'Rows of every distributed table per route range (counted through the coordinator''s foreign tables): what plan_rebalance balances.';
REVOKE EXECUTE ON FUNCTION id_gen.route_range_rows() FROM PUBLIC;

-- The gene g in lower_gene .. upper_gene - 1 such that genes g + 1 .. upper_gene hold about
-- `wanted` rows (counted per gene over every distributed table), and those rows; NULLs when
-- the part would be the whole range.
CREATE OR REPLACE FUNCTION id_gen.split_gene_for(lower_gene integer, upper_gene integer, wanted bigint,
                                                 OUT at_gene integer, OUT rows_above bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  d id_gen.distributed_tables;
  q text := '';
  g record;
  acc bigint := 0;
  lowest integer;
BEGIN
  FOR d IN SELECT * FROM id_gen.distributed_tables t ORDER BY t.schema_name, t.table_name LOOP
    q := q || CASE WHEN q = '' THEN '' ELSE ' UNION ALL ' END
           || format('SELECT (%I OPERATOR(pg_catalog.>>) 47)::integer AS gene, count(*) AS n FROM %s GROUP BY 1',
                     d.id_column, id_gen.genes_rows(d, lower_gene, upper_gene));
  END LOOP;
  IF q = '' THEN
    RETURN;
  END IF;
  FOR g IN EXECUTE format('SELECT gene, sum(n)::bigint AS n FROM (%s) x GROUP BY gene ORDER BY gene DESC', q) LOOP
    -- Genes from the top while the part stays at most `wanted` (at least one gene).
    EXIT WHEN acc > 0 AND acc + g.n > wanted;
    acc := acc + g.n;
    lowest := g.gene;
  END LOOP;
  IF lowest IS NOT NULL AND lowest - 1 >= lower_gene THEN
    at_gene := lowest - 1;
    rows_above := acc;
  END IF;
END $$;
COMMENT ON FUNCTION id_gen.split_gene_for(integer, integer, bigint) IS 'Where to split route range lower_gene .. upper_gene so that the genes above the split hold about `wanted` rows (at least the top gene that has rows), and how many they hold; NULLs when that is the whole range.';
REVOKE EXECUTE ON FUNCTION id_gen.split_gene_for(integer, integer, bigint) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.plan_rebalance(tolerance numeric DEFAULT 0.1, max_steps integer DEFAULT 8,
                                                 shards text[] DEFAULT NULL)
RETURNS TABLE (step integer, action text, lower_gene integer, upper_gene integer, at_gene integer,
               source_shard text, target_shard text, row_count bigint, command text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  hot record;
  cold record;
  mean numeric;
  want bigint;
  pick record;
  at integer;
  part bigint;
  n integer := 0;
BEGIN
  PERFORM id_gen.require_superuser('plan a rebalance');
  IF tolerance IS NULL OR max_steps IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "%" must not be NULL', CASE WHEN tolerance IS NULL THEN 'tolerance' ELSE 'max_steps' END
      USING ERRCODE = '22004';
  ELSIF tolerance < 0 OR max_steps < 1 THEN
    RAISE EXCEPTION 'id_gen: tolerance must be >= 0 and max_steps >= 1 (got % and %)', tolerance, max_steps USING ERRCODE = '22023';
  ELSIF array_position(shards, NULL) IS NOT NULL THEN
    RAISE EXCEPTION 'id_gen: argument "shards" must not contain NULL' USING ERRCODE = '22004';
  ELSIF EXISTS (SELECT FROM unnest(shards) x(name)
                WHERE NOT EXISTS (SELECT FROM pg_foreign_server fs JOIN pg_foreign_data_wrapper w ON w.oid = fs.srvfdw
                                  WHERE fs.srvname = x.name AND w.fdwname = 'postgres_fdw')) THEN
    RAISE EXCEPTION 'id_gen: % is not a postgres_fdw foreign server', (SELECT string_agg(format('"%s"', x.name), ', ')
                                                                          FROM unnest(shards) x(name)
                                                                          WHERE NOT EXISTS (SELECT FROM pg_foreign_server fs JOIN pg_foreign_data_wrapper w ON w.oid = fs.srvfdw
                                                                                            WHERE fs.srvname = x.name AND w.fdwname = 'postgres_fdw'))
      USING ERRCODE = '42704',
            HINT = 'shards names servers that hold no range yet: CREATE SERVER ... FOREIGN DATA WRAPPER postgres_fdw and a user mapping first. Nothing was planned.';
  ELSIF NOT EXISTS (SELECT FROM id_gen.distributed_tables) THEN
    RETURN;  -- nothing to balance
  END IF;
  CREATE TEMP TABLE IF NOT EXISTS id_gen_rebalance_ranges (lower_gene integer, upper_gene integer, shard text, row_count bigint)
    ON COMMIT DROP;
  TRUNCATE id_gen_rebalance_ranges;
  INSERT INTO id_gen_rebalance_ranges SELECT * FROM id_gen.route_range_rows();
  -- Servers without ranges yet (new, empty shards) can take some.
  INSERT INTO id_gen_rebalance_ranges
  SELECT NULL, NULL, s, 0 FROM unnest(coalesce(shards, '{}')) s
  WHERE NOT EXISTS (SELECT FROM id_gen_rebalance_ranges x WHERE x.shard = s);
  WHILE n < max_steps LOOP
    SELECT x.shard, sum(x.row_count) AS total INTO hot FROM id_gen_rebalance_ranges x GROUP BY x.shard ORDER BY 2 DESC, 1 LIMIT 1;
    SELECT x.shard, sum(x.row_count) AS total INTO cold FROM id_gen_rebalance_ranges x GROUP BY x.shard ORDER BY 2, 1 LIMIT 1;
    SELECT sum(x.row_count)::numeric / count(DISTINCT x.shard) INTO mean FROM id_gen_rebalance_ranges x;
    EXIT WHEN hot.shard = cold.shard OR hot.total <= mean * (1 + tolerance);
    want := least(hot.total - mean, mean - cold.total)::bigint;
    EXIT WHEN want <= 0;
    -- The range of the hot shard that best fills the gap without overshooting it by more
    -- than the tolerance.
    SELECT * INTO pick FROM id_gen_rebalance_ranges x
    WHERE x.shard = hot.shard AND x.lower_gene IS NOT NULL AND x.row_count > 0 AND x.row_count <= want + tolerance * mean
    ORDER BY x.row_count DESC, x.lower_gene LIMIT 1;
    IF NOT FOUND THEN
      SELECT * INTO pick FROM id_gen_rebalance_ranges x
      WHERE x.shard = hot.shard AND x.lower_gene IS NOT NULL ORDER BY x.row_count DESC, x.lower_gene LIMIT 1;
      SELECT sg.at_gene, sg.rows_above INTO at, part FROM id_gen.split_gene_for(pick.lower_gene, pick.upper_gene, want) sg;
      EXIT WHEN at IS NULL;
      n := n + 1;
      step := n; action := 'split'; lower_gene := pick.lower_gene; upper_gene := pick.upper_gene; at_gene := at;
      source_shard := hot.shard; target_shard := hot.shard; row_count := pick.row_count;
      command := format('CALL id_gen.split_route(%s)', at);
      RETURN NEXT;
      UPDATE id_gen_rebalance_ranges x SET upper_gene = at, row_count = pick.row_count - part
      WHERE x.lower_gene = pick.lower_gene AND x.shard = hot.shard;
      INSERT INTO id_gen_rebalance_ranges VALUES (at + 1, pick.upper_gene, hot.shard, part);
      SELECT * INTO pick FROM id_gen_rebalance_ranges x WHERE x.lower_gene = at + 1;
      EXIT WHEN n >= max_steps;
    END IF;
    n := n + 1;
    step := n; action := 'move'; lower_gene := pick.lower_gene; upper_gene := pick.upper_gene; at_gene := NULL;
    source_shard := hot.shard; target_shard := cold.shard; row_count := pick.row_count;
    command := format('CALL id_gen.move_genes(%s, %s, %L)', pick.lower_gene, pick.upper_gene, cold.shard);
    RETURN NEXT;
    UPDATE id_gen_rebalance_ranges x SET shard = cold.shard WHERE x.lower_gene = pick.lower_gene;
    DELETE FROM id_gen_rebalance_ranges x WHERE x.lower_gene IS NULL AND x.shard = cold.shard;
  END LOOP;
END $$;
COMMENT ON FUNCTION id_gen.plan_rebalance(numeric, integer, text[]) IS 'Proposes splits and moves that bring every shard within (1 + tolerance) x the mean rows (every distributed table, counted per route range through the coordinator): the hot shard''s best-fitting range moves to the coldest shard, after a split where every range is too big. shards adds servers that hold no range yet. At most max_steps steps; each row has the CALL that runs it (a split''s gene in at_gene). Superuser only.';
REVOKE EXECUTE ON FUNCTION id_gen.plan_rebalance(numeric, integer, text[]) FROM PUBLIC;

CREATE OR REPLACE PROCEDURE id_gen.rebalance(dry_run boolean DEFAULT true, tolerance numeric DEFAULT 0.1,
                                             max_steps integer DEFAULT 8, shards text[] DEFAULT NULL)
LANGUAGE plpgsql
AS $$
DECLARE
  plan jsonb;
  p jsonb;
BEGIN
  PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
  IF dry_run IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "dry_run" must not be NULL' USING ERRCODE = '22004';
  END IF;
  SELECT coalesce(jsonb_agg(to_jsonb(x) ORDER BY x.step), '[]') INTO plan
  FROM id_gen.plan_rebalance(tolerance, max_steps, shards) x;
  IF plan = '[]' THEN
    RAISE NOTICE 'id_gen: every shard is within % of the mean; nothing to do', tolerance;
    RETURN;
  END IF;
  COMMIT;  -- (the plan's temporary table goes; each step commits on its own)
  PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
  FOR p IN SELECT x FROM jsonb_array_elements(plan) x LOOP
    RAISE NOTICE 'id_gen: rebalance step % of %: % (% rows)%', p->>'step', jsonb_array_length(plan), p->>'command',
      p->>'row_count', CASE WHEN dry_run THEN ' [dry run]' ELSE '' END;
    CONTINUE WHEN dry_run;
    IF p->>'action' = 'split' THEN
      CALL id_gen.split_route((p->>'at_gene')::integer);
    ELSE
      CALL id_gen.move_genes((p->>'lower_gene')::integer, (p->>'upper_gene')::integer, p->>'target_shard');
    END IF;
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
  END LOOP;
END $$;
COMMENT ON PROCEDURE id_gen.rebalance(boolean, numeric, integer, text[]) IS 'Runs the steps of id_gen.plan_rebalance one after another (split_route, move_genes), each with its own short fence; dry_run (the default) only lists them. A failing step stops it there (resume that step with the same CALL it names, then rebalance again). Superuser only.';
REVOKE EXECUTE ON PROCEDURE id_gen.rebalance(boolean, numeric, integer, text[]) FROM PUBLIC;
