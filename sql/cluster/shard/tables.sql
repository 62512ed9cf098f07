-- On a shard: the tables of distributed tables. The coordinator sends exactly one
-- statement per call through id_gen.remote_exec (sql/cluster/remote.sql), always
-- `SELECT id_gen.shard_...(<literals>)` (or a DROP/ALTER SUBSCRIPTION of its own
-- subscription, which cannot run inside a function), on a dblink connection whose
-- search_path is pinned to pg_catalog, pg_temp and whose transactions are READ COMMITTED.
-- Everything else happens in the functions of sql/cluster/shard/, with a pinned
-- search_path, which build their own statements from identifiers with format('%I') and
-- values with %L or parameters. Every function here runs on a shard; the shard_ prefix
-- says so. Code only (CREATE OR REPLACE).
--
-- Invariants:
--   * Rows are never lost by a re-partition: shard_apply_ranges takes ACCESS EXCLUSIVE
--     on the table (waiting for every writer, coordinator or direct) before it reads a
--     row, and it runs only in a READ COMMITTED transaction, so each statement after
--     the lock sees every committed row; a detached partition is dropped only after its
--     rows are back in the table, in the same transaction that holds the lock.
--   * No code that a non-superuser owns runs during this maintenance (see
--     id_gen.untrusted_code, sql/cluster/relations.sql).
--   * Identification by bounds, not by name: a partition is the one for genes lo .. hi
--     when its partition bound is exactly that range; its name is then made
--     <stem>_g<lo>_<hi>, and a foreign relation of that name is an error (42P07), never
--     adopted.
--   * A move's hidden incoming copy (sql/cluster/shard/move.sql: not a partition, with the
--     id_gen_incoming_bound CHECK) is left as it is: the move's fence attaches it.
--   * A re-partition costs id_gen O(partitions): the wanted ranges and the partitions are
--     matched through maps by bound text built once per call, never by a search per range.
--     A change of a few ranges (a move's target and source, a route change) costs O(ranges
--     changed) in catalog work: when the table's partitions are those id_gen.shard_tables
--     recorded (their number matches, and each changed range's partition, found by name,
--     has that range's bound or is absent), only the changed ranges' partitions are
--     looked at, deparsed and checked for untrusted code. Otherwise, and for a call with
--     the recorded ranges (a repair), every partition is.

-- The start of a change of a shard's table that locks it against writers and then reads its
-- rows (shard_apply_ranges, shard_apply_owned_ranges): only in READ COMMITTED, so that each
-- statement after the lock sees every row committed before it was granted (25000 otherwise);
-- the lock bounded by lock_timeout_ms; in a deadlock with a writer, this transaction is the
-- one that gives up (deadlock_timeout 100 ms; the coordinator retries); id_gen's own DDL.
CREATE OR REPLACE FUNCTION id_gen.shard_begin_table_change(doing text, lock_timeout_ms integer) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'id_gen: a shard % only in a READ COMMITTED transaction of its own (this one is %)',
                    doing, current_setting('transaction_isolation')
      USING ERRCODE = '25000',
            HINT = 'The coordinator calls it over dblink (id_gen.remote_exec); a snapshot taken before the table lock would miss rows committed while it waited.';
  END IF;
  PERFORM set_config('lock_timeout', lock_timeout_ms || 'ms', true);
  PERFORM set_config('deadlock_timeout', '100ms', true);
  PERFORM id_gen.quiet_ddl();
END $$;
COMMENT ON FUNCTION id_gen.shard_begin_table_change(text, integer) IS 'On a shard: the start of a change of a distributed table that locks it against writers and reads its rows: refuses (25000) outside READ COMMITTED, bounds the lock wait, lets this transaction give up first in a deadlock, and marks the DDL as id_gen''s own.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_begin_table_change(text, integer) FROM PUBLIC;

-- Makes a shard's table hold exactly one partition per route range in gene_ranges.
CREATE OR REPLACE FUNCTION id_gen.shard_apply_ranges(schema_name name, table_name name, id_column name, stem name,
                                                     gene_ranges int4range[], definition text,
                                                     lock_timeout_ms integer DEFAULT 10000) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  parent regclass;
  part record;
  wanted int4range;
  pname name;
  detached regclass[] := '{}';
  candidate regclass;
  lowest bigint;
  highest bigint;
  adopted boolean;
  -- The wanted ranges by the text of their partition bound, and the bounds of the partitions
  -- kept: each computed once, so that one pass costs O(ranges), not O(ranges^2).
  wanted_by_bound jsonb;
  kept_bounds jsonb;
  n_created integer := 0;
  n_adopted integer := 0;
  n_detached integer := 0;
  copied bigint := 0;
  n bigint;
  -- The fast path: only the ranges that differ from those recorded.
  recorded int4range[];
  changed_only boolean := false;
  removed int4range[];
  added int4range[];
  changed_names name[];
  changed_parts jsonb;
  n_changed_attached integer;
  n_attached integer;
  touched regclass[];
  recorded_definition text;
BEGIN
  -- Each statement below must see every row committed before the lock was granted.
  PERFORM id_gen.shard_begin_table_change('re-partitions its tables', lock_timeout_ms);
  -- A table this shard converted to the layout by ownership while the coordinator still
  -- says partitioned (id_gen.convert_to_by_ownership converts one shard after the other):
  -- the same ranges, recorded as data.
  SELECT t.definition INTO recorded_definition FROM id_gen.shard_tables t
  WHERE (t.schema_name, t.table_name) = (shard_apply_ranges.schema_name, shard_apply_ranges.table_name)
    AND t.rows_table IS NOT NULL;
  IF FOUND THEN
    RETURN id_gen.shard_apply_owned_ranges(schema_name, table_name, id_column, stem, gene_ranges, recorded_definition,
                                           lock_timeout_ms);
  END IF;
  parent := to_regclass(format('%I.%I', schema_name, table_name));
  IF parent IS NULL THEN
    EXECUTE format('CREATE SCHEMA IF NOT EXISTS %I', schema_name);
    EXECUTE definition;
    parent := format('%I.%I', schema_name, table_name)::regclass;
  ELSIF (SELECT c.relkind FROM pg_class c WHERE c.oid = parent) <> 'p' THEN
    RAISE EXCEPTION 'id_gen: % exists on this shard but is not partitioned', parent
      USING ERRCODE = '55000',
            HINT = 'distribute_table creates the shards'' tables itself (partitioned by id, one partition per route range); rename or drop the existing table.';
  END IF;
  -- Every writer of the table, through the coordinator or directly, finishes first (and
  -- later ones wait until this transaction ends).
  EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', parent);
  -- (Read after the lock: what the last change, committed before it, recorded.)
  SELECT t.gene_ranges INTO recorded FROM id_gen.shard_tables t
  WHERE t.schema_name = shard_apply_ranges.schema_name AND t.table_name = shard_apply_ranges.table_name
    AND t.stem = shard_apply_ranges.stem;
  IF recorded IS NOT NULL THEN
    removed := ARRAY(SELECT r FROM unnest(recorded) r EXCEPT SELECT g FROM unnest(gene_ranges) g);
    added := ARRAY(SELECT g FROM unnest(gene_ranges) g EXCEPT SELECT r FROM unnest(recorded) r);
    changed_names := ARRAY(SELECT id_gen.partition_name(stem, lower(g), upper(g) - 1) FROM unnest(removed || added) g);
    -- The changed ranges' partitions that are attached, by bound (a move's fence may have
    -- attached the target's or detached the source's already).
    SELECT coalesce(jsonb_object_agg(pg_get_expr(c.relpartbound, c.oid), c.oid::bigint), '{}'), count(*)
    INTO changed_parts, n_changed_attached
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = parent AND c.relname = ANY (changed_names);
    SELECT count(*) INTO n_attached FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = parent
      AND c.relname NOT IN (id_gen.fit_name(stem, '_not_owned'), id_gen.fit_name(stem, '_negative'));
    -- Each attached one has its range's bound, and the others are those recorded.
    -- (A call with the recorded ranges, sync_distributed_tables after a failure, looks at
    -- every partition and so repairs names.)
    changed_only := cardinality(removed) + cardinality(added) > 0
                    AND n_changed_attached = (SELECT count(*) FROM unnest(removed || added) g
                                          WHERE changed_parts ? id_gen.partition_bound_text(lower(g), upper(g) - 1))
                    AND n_attached = cardinality(recorded) - cardinality(removed) + n_changed_attached;
  END IF;
  IF changed_only THEN
    touched := ARRAY(SELECT c.oid::regclass FROM pg_class c
                     WHERE c.relname = ANY (changed_names)
                       AND c.relnamespace = (SELECT ns.oid FROM pg_namespace ns WHERE ns.nspname = schema_name));
    PERFORM id_gen.refuse_untrusted_table(parent, 'shard table', touched);
  ELSE
    PERFORM id_gen.refuse_untrusted_table(parent, 'shard table');
  END IF;
  -- Rows are moved, not written anew: no user trigger fires for them.
  PERFORM set_config('session_replication_role', 'replica', true);

  SELECT coalesce(jsonb_object_agg(id_gen.partition_bound_text(lower(g), upper(g) - 1), g::text), '{}')
  INTO wanted_by_bound FROM unnest(CASE WHEN changed_only THEN added ELSE gene_ranges END) g;
  -- Partitions whose bound is not a wanted range are detached ...
  FOR part IN SELECT c.oid::regclass AS rel, c.relname, pg_get_expr(c.relpartbound, c.oid) AS bound
              FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
              WHERE i.inhparent = parent AND (NOT changed_only OR c.relname = ANY (changed_names))
              ORDER BY c.relname LOOP
    -- The tombstone and the partition of negative ids (sql/cluster/shard/routing.sql) stay.
    CONTINUE WHEN part.bound IN ('DEFAULT', id_gen.negative_bound_text());
    wanted := (wanted_by_bound ->> part.bound)::int4range;
    IF wanted IS NOT NULL THEN
      pname := id_gen.partition_name(stem, lower(wanted), upper(wanted) - 1);
      IF part.relname <> pname THEN
        EXECUTE format('ALTER TABLE %s RENAME TO %I', part.rel, pname);
      END IF;
      CONTINUE;
    END IF;
    EXECUTE format('ALTER TABLE %s DETACH PARTITION %s', parent, part.rel);
    detached := detached || part.rel;
    n_detached := n_detached + 1;
  END LOOP;
  -- ... each missing range adopts a detached table whose rows all fall inside it (no copy;
  -- ATTACH checks the bounds), or starts empty ...
  IF changed_only THEN
    -- (The changed ranges' partitions read before the loop: those it detached had a bound
    -- of no added range, so for the added ranges below the answer is the same.)
    kept_bounds := changed_parts;
  ELSE
    kept_bounds := id_gen.partitions_by_bound(parent);
  END IF;
  FOR wanted IN SELECT g FROM unnest(CASE WHEN changed_only THEN added ELSE gene_ranges END) g ORDER BY g LOOP
    CONTINUE WHEN kept_bounds ? id_gen.partition_bound_text(lower(wanted), upper(wanted) - 1);
    pname := id_gen.partition_name(stem, lower(wanted), upper(wanted) - 1);
    candidate := to_regclass(format('%I.%I', schema_name, pname));
    -- (A move's incoming copy of a per_shard table stays hidden until its fence shows it.)
    CONTINUE WHEN candidate IS NOT NULL AND id_gen.is_hidden_copy(candidate) AND NOT candidate = ANY (detached);
    IF candidate IS NOT NULL AND NOT candidate = ANY (detached) THEN
      RAISE EXCEPTION 'id_gen: relation %.% already exists on this shard, and it is not a partition of %',
                      quote_ident(schema_name), quote_ident(pname), parent
        USING ERRCODE = '42P07',
              HINT = 'id_gen names a table''s partitions <stem>_g<lower>_<upper>; rename that relation.';
    END IF;
    adopted := false;
    FOREACH candidate IN ARRAY detached LOOP
      EXECUTE format('SELECT min(%1$I) OPERATOR(pg_catalog.>>) 47, max(%1$I) OPERATOR(pg_catalog.>>) 47 FROM %2$s',
                     id_column, candidate) INTO lowest, highest;
      IF lowest >= lower(wanted) AND highest < upper(wanted) THEN
        IF (SELECT c.relname FROM pg_class c WHERE c.oid = candidate) <> pname THEN
          EXECUTE format('ALTER TABLE %s RENAME TO %I', candidate, pname);
        END IF;
        detached := array_remove(detached, candidate);
        adopted := true;
        EXIT;
      END IF;
    END LOOP;
    IF adopted THEN
      EXECUTE format('ALTER TABLE %s ATTACH PARTITION %I.%I FOR VALUES %s', parent,
                     schema_name, pname, id_gen.partition_bounds(lower(wanted), upper(wanted) - 1));
      n_adopted := n_adopted + 1;
    ELSE
      EXECUTE format('CREATE TABLE %I.%I PARTITION OF %s FOR VALUES %s',
                     schema_name, pname, parent, id_gen.partition_bounds(lower(wanted), upper(wanted) - 1));
      n_created := n_created + 1;
    END IF;
    PERFORM id_gen.inherit_parent_settings(parent, format('%I.%I', schema_name, pname)::regclass,
      format('id_gen: genes %s .. %s of %s on this shard (kept by the coordinator)', lower(wanted), upper(wanted) - 1, parent));
  END LOOP;
  -- ... and the rows of the rest go back through the parent: a row outside every range
  -- is refused (IG001 by the tombstone, or 23514 before it exists), and with it the
  -- whole change.
  FOREACH candidate IN ARRAY detached LOOP
    EXECUTE format('INSERT INTO %s SELECT * FROM %s', parent, candidate);
    GET DIAGNOSTICS n = ROW_COUNT;
    copied := copied + n;
    EXECUTE format('DROP TABLE %s', candidate);
  END LOOP;

  PERFORM id_gen.shard_ensure_tombstone(parent, stem, id_column);
  PERFORM id_gen.shard_routing_changed();

  INSERT INTO id_gen.shard_tables AS t (schema_name, table_name, id_column, gene_ranges, definition, stem)
  VALUES (shard_apply_ranges.schema_name, shard_apply_ranges.table_name, shard_apply_ranges.id_column,
          shard_apply_ranges.gene_ranges, shard_apply_ranges.definition, shard_apply_ranges.stem)
  ON CONFLICT ON CONSTRAINT shard_tables_pkey DO UPDATE
  SET id_column = excluded.id_column, gene_ranges = excluded.gene_ranges, definition = excluded.definition,
      stem = excluded.stem, updated_at = now();
  RETURN format('created %s, adopted %s, detached %s, copied %s rows%s', n_created, n_adopted, n_detached, copied,
                CASE WHEN changed_only THEN format(' (%s of %s ranges changed)', cardinality(removed) + cardinality(added),
                                                   cardinality(gene_ranges)) ELSE '' END);
END $$;
COMMENT ON FUNCTION id_gen.shard_apply_ranges(name, name, name, name, int4range[], text, integer) IS 'On a shard (called by the coordinator over dblink): creates the table if missing and makes it hold one partition per route range in gene_ranges, under ACCESS EXCLUSIVE and in READ COMMITTED, so that rows committed while it waited for the lock are copied too; records the ranges in id_gen.shard_tables.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_apply_ranges(name, name, name, name, int4range[], text, integer) FROM PUBLIC;

-- The relations named by qualified names (as the coordinator formats them with %I.%I).
CREATE OR REPLACE FUNCTION id_gen.shard_relations(names text[], must_exist boolean) RETURNS regclass[]
LANGUAGE plpgsql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  n text;
  r regclass;
  result regclass[] := '{}';
BEGIN
  FOREACH n IN ARRAY coalesce(names, '{}') LOOP
    r := to_regclass(n);
    IF r IS NULL AND must_exist THEN
      RAISE EXCEPTION 'id_gen: relation % does not exist on this shard', n USING ERRCODE = '42P01';
    END IF;
    IF r IS NOT NULL THEN
      result := result || r;
    END IF;
  END LOOP;
  RETURN result;
END $$;
COMMENT ON FUNCTION id_gen.shard_relations(text[], boolean) IS 'Resolves qualified relation names sent by the coordinator (42P01 for a missing one when must_exist).';
REVOKE EXECUTE ON FUNCTION id_gen.shard_relations(text[], boolean) FROM PUBLIC;
