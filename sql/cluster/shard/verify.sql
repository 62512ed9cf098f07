-- On a shard: the shard half of the check before a cut-over (sql/cluster/verify.sql drives
-- it and says how it works): per gene, the number of rows a move's tables hold and a
-- checksum of their contents. Code only (CREATE OR REPLACE).
--
-- Invariants:
--   * It reads and writes nothing but what it returns: no lock stronger than a reader's, so
--     it adds nothing to any fence, and the writers of the genes go on meanwhile.
--   * The tables are the move's as it publishes them (id_gen.published_move_parts on the
--     coordinator), read by name on both shards: on the source the partitions or tables of
--     rows; on the target the same names (fenced partitions, the hidden copies of per_shard
--     tables, the rows it does not own yet), filtered on the id as the publication is.
--   * A superuser runs it, so no table whose reading could run code an ordinary role owns
--     is read (id_gen.refuse_untrusted_table: 42501), and the routing guard is off only in
--     its own transaction (the target does not own the genes yet).

-- A row of rel as text for the checksums: its columns (not dropped) in the order of their
-- names, so that two tables whose columns are the same but were added in another order, or
-- around dropped ones, give the same text for the same row. alias: the row's name in the query.
CREATE OR REPLACE FUNCTION id_gen.verify_row_text(rel regclass, alias text) RETURNS text
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  SELECT pg_catalog.format('ROW(%s)::text', pg_catalog.string_agg(pg_catalog.format('%I.%I', alias, a.attname), ', ' ORDER BY a.attname))
  FROM pg_catalog.pg_attribute a
  WHERE a.attrelid OPERATOR(pg_catalog.=) rel AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped;
END;
COMMENT ON FUNCTION id_gen.verify_row_text(regclass, text) IS 'On a shard: the expression that gives a row of rel (named alias in the query) as text for the checksums of the check before a cut-over: its columns in the order of their names.';
REVOKE EXECUTE ON FUNCTION id_gen.verify_row_text(regclass, text) FROM PUBLIC;

-- tables, id_columns, lower_genes, upper_genes: per table, as the move publishes it;
-- genes: only these genes ('{}': every gene in the tables' ranges). Returns a jsonb object
-- {"<gene>": [rows, "<checksum>", "<versions>"]} of the genes that have rows (a gene without rows is
-- absent). The checksum is the sum over the rows of a 64-bit hash of each row's text form
-- (id_gen.verify_row_text: so the order of the rows, where they lie and the order of the
-- columns do not count; their columns' names and values do),
-- summed over the tables, each with its index in the list, so that a row in the wrong table
-- counts as a difference. versions is the same sum over the rows' xmin: it changes with every
-- committed write of the gene here (an update that puts a value back too), so the coordinator
-- can tell a gene nobody wrote between two reads; it is never compared across shards. The
-- text of a row is taken under fixed settings (TimeZone UTC, DateStyle ISO, ...), so shards
-- whose settings differ give the same text.
CREATE OR REPLACE FUNCTION id_gen.shard_verify_genes(tables text[], id_columns name[], lower_genes integer[],
                                                     upper_genes integer[], genes integer[]) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
-- (The text of a row must not depend on this shard's settings: its time zone, say.)
SET TimeZone = 'UTC'
SET DateStyle = 'ISO, YMD'
SET IntervalStyle = 'postgres'
SET extra_float_digits = 1
SET bytea_output = 'hex'
SET lc_monetary = 'C'
AS $$
DECLARE
  rels regclass[] := id_gen.shard_relations(tables, true);
  parts text;
BEGIN
  IF cardinality(tables) IS DISTINCT FROM cardinality(id_columns) OR cardinality(tables) IS DISTINCT FROM cardinality(lower_genes)
     OR cardinality(tables) IS DISTINCT FROM cardinality(upper_genes) THEN
    RAISE EXCEPTION 'id_gen: tables, id_columns, lower_genes and upper_genes must have one element per table'
      USING ERRCODE = '22023';
  END IF;
  IF cardinality(rels) = 0 THEN
    RETURN '{}';
  END IF;
  FOR i IN 1 .. cardinality(rels) LOOP
    PERFORM id_gen.refuse_untrusted_table(rels[i], 'check shard table');
  END LOOP;
  -- (The target does not own the genes yet: the routing guard would refuse to read them.)
  PERFORM pg_catalog.set_config('id_gen.routing_guard', 'off', true);
  SELECT string_agg(format('SELECT (%2$I OPERATOR(pg_catalog.>>) 47) OPERATOR(pg_catalog.&) 65535 AS gene, '
                           'pg_catalog.hashtextextended(%7$s, %5$s) AS h, pg_catalog.hashtextextended(t.xmin::text, %5$s) AS v FROM %1$s t '
                           'WHERE %2$I OPERATOR(pg_catalog.>=) %3$s AND %2$I OPERATOR(pg_catalog.<=) %4$s%6$s',
                           rels[i], id_columns[i], id_gen.gene_first_id(lower_genes[i]), id_gen.gene_last_id(upper_genes[i]), i,
                           CASE WHEN cardinality(genes) = 0 THEN ''
                                ELSE format(' AND ((%I OPERATOR(pg_catalog.>>) 47) OPERATOR(pg_catalog.&) 65535) OPERATOR(pg_catalog.=) ANY (%L::pg_catalog.int8[])',
                                            id_columns[i], genes) END,
                           id_gen.verify_row_text(rels[i], 't')),
                    ' UNION ALL ' ORDER BY i)
    INTO parts
  FROM generate_subscripts(rels, 1) i;
  EXECUTE format('SELECT coalesce(pg_catalog.jsonb_object_agg(y.gene, pg_catalog.jsonb_build_array(y.n, y.s::text, y.v::text)), ''{}'')::text '
                 'FROM (SELECT x.gene, pg_catalog.count(*) AS n, pg_catalog.sum(x.h) AS s, pg_catalog.sum(x.v) AS v '
                 'FROM (%s) x GROUP BY x.gene) y', parts)
    INTO parts;
  RETURN parts;
END $$;
COMMENT ON FUNCTION id_gen.shard_verify_genes(text[], name[], integer[], integer[], integer[]) IS 'On either shard of a move, for its check before the cut-over: per gene of the tables named (each filtered on its id between its genes; only the genes listed, or all for {}), the rows, a checksum of their contents (under fixed settings) and one of their versions (xmin), as a jsonb object {"<gene>": [rows, "<checksum>", "<versions>"]} of the genes that have rows. Reads only; refuses (42501) a table whose reading could run code an ordinary role owns.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_verify_genes(text[], name[], integer[], integer[], integer[]) FROM PUBLIC;

-- On the shard of a split or merge, before its swap: per piece (a source partition's rows
-- that go to one new table), the rows and checksum per gene of the source partition and of
-- the new table, leaving out the ids in id_gen.shard_split_log (written since the copy read
-- them: the catch-up brings them up to date, and the swap's last one under its lock). STABLE:
-- every read is in the caller's one snapshot, in which a writer's row and its log entry, and
-- a catch-up's rows and the entries it took, are both seen or neither; so every other id must
-- be equal on both sides, exactly. Returns {"rows": <rows of the sources compared>,
-- "differ": ["gene G of T: N rows in S, M in N'", ...]} (at most 10; "differ_count": all).
CREATE OR REPLACE FUNCTION id_gen.shard_split_verify(split_id bigint) RETURNS text
LANGUAGE plpgsql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  p record;
  q text;
  r record;
  total bigint := 0;
  differ text[] := '{}';
BEGIN
  FOR p IN SELECT sp.* FROM id_gen.shard_split_pieces sp
           WHERE sp.split_id OPERATOR(pg_catalog.=) shard_split_verify.split_id AND NOT sp.swapped
           ORDER BY sp.parent, sp.source, sp.target LOOP
    PERFORM id_gen.refuse_untrusted_table(p.source::regclass, 'check shard table');
    PERFORM id_gen.refuse_untrusted_table(p.target::regclass, 'check shard table');
    q := 'SELECT (t.%1$I OPERATOR(pg_catalog.>>) 47) OPERATOR(pg_catalog.&) 65535 AS gene, pg_catalog.count(*) AS n, '
         'pg_catalog.sum(pg_catalog.hashtextextended(%2$s, 0)) AS h FROM %3$s t '
         'WHERE t.%1$I OPERATOR(pg_catalog.>=) $1 AND t.%1$I OPERATOR(pg_catalog.<=) $2 AND NOT EXISTS ('
         'SELECT FROM id_gen.shard_split_log l WHERE l.split_id OPERATOR(pg_catalog.=) $3 AND l.source OPERATOR(pg_catalog.=) $4 '
         'AND l.id OPERATOR(pg_catalog.=) t.%1$I) GROUP BY 1';
    FOR r IN EXECUTE format('SELECT coalesce(o.gene, nw.gene) AS gene, coalesce(o.n, 0) AS old_n, coalesce(nw.n, 0) AS new_n, '
                            'o.h IS NOT DISTINCT FROM nw.h AS same_h FROM (%s) o FULL JOIN (%s) nw USING (gene) ORDER BY 1',
                            format(q, p.id_column, id_gen.verify_row_text(p.source::regclass, 't'), p.source::regclass),
                            format(q, p.id_column, id_gen.verify_row_text(p.target::regclass, 't'), p.target::regclass))
             USING p.first_id, p.last_id, p.split_id, p.source LOOP
      total := total + r.old_n;
      IF r.old_n <> r.new_n OR NOT r.same_h THEN
        differ := differ || format('gene %s of %s: %s rows in %s, %s in %s%s', r.gene, p.parent::regclass, r.old_n,
                                   p.source::regclass, r.new_n, p.target::regclass,
                                   CASE WHEN r.old_n = r.new_n THEN ' (their contents differ)' ELSE '' END);
      END IF;
    END LOOP;
  END LOOP;
  RETURN jsonb_build_object('rows', total, 'differ', to_jsonb(differ[1:10]), 'differ_count', cardinality(differ))::text;
END $$;
COMMENT ON FUNCTION id_gen.shard_split_verify(bigint) IS 'On the shard of a split or merge, before its swap: compares each source partition with its new table per gene (rows and a checksum), in one snapshot, leaving out the ids written since the copy (id_gen.shard_split_log), which must then be equal; returns {"rows": n, "differ": [...], "differ_count": n}. Reads only.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_split_verify(bigint) FROM PUBLIC;
