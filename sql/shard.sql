-- Shard side of distributed tables and moves: the only code the coordinator runs on a
-- shard. The coordinator sends exactly one statement per call through
-- id_gen.shard_exec (sql/distribute.sql), always `SELECT id_gen.shard_...(<literals>)`
-- (or a DROP/ALTER SUBSCRIPTION of its own subscription, which cannot run inside a
-- function), on a dblink connection whose search_path is pinned to pg_catalog, pg_temp
-- and whose transactions are READ COMMITTED. Everything else happens here, in functions
-- of this extension with a pinned search_path, which build their own statements from
-- identifiers with format('%I') and values with %L or parameters.
--
-- Invariants:
--   * Rows are never lost by a re-partition: shard_apply_ranges takes ACCESS EXCLUSIVE
--     on the table (waiting for every writer, coordinator or direct) before it reads a
--     row, and it runs only in a READ COMMITTED transaction, so each statement after
--     the lock sees every committed row; a detached partition is dropped only after its
--     rows are back in the table, in the same transaction that holds the lock.
--   * No code that a non-superuser owns runs during this maintenance (see
--     id_gen.untrusted_code): the table's own constraints, defaults, indexes, triggers and
--     policies, and the types of its columns, may only call functions owned by
--     superusers, and the table must be owned by a superuser or the calling role.
--   * Identification by bounds, not by name: a partition is the one for genes lo .. hi
--     when its partition bound is exactly that range; its name is then made
--     <stem>_g<lo>_<hi>, and a foreign relation of that name is an error (42P07), never
--     adopted.

-- Which code could run when a superuser maintains this table -----------------------------
-- Walks the objects the table's maintenance can execute: the table and its partitions
-- and indexes, their constraints, defaults, triggers, policies and rules, the functions,
-- operators and types those use, domain constraints and composite attributes; returns
-- the first function owned by a role that is not a superuser, or NULL.
CREATE OR REPLACE FUNCTION id_gen.untrusted_code(rel regclass) RETURNS text
LANGUAGE plpgsql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  seen text[] := '{}';
  todo text[] := ARRAY['pg_class:' || rel::oid];
  cur text;
  cls regclass;
  obj oid;
  found text;
BEGIN
  WHILE cardinality(todo) > 0 AND cardinality(seen) < 10000 LOOP
    cur := todo[1];
    todo := todo[2:];
    CONTINUE WHEN cur = ANY (seen);
    seen := seen || cur;
    cls := split_part(cur, ':', 1)::regclass;
    obj := split_part(cur, ':', 2)::oid;
    IF cls = 'pg_proc'::regclass THEN
      SELECT format('function %s (owned by %s, who is not a superuser)', p.oid::regprocedure, quote_ident(r.rolname))
        INTO found
      FROM pg_proc p JOIN pg_roles r ON r.oid = p.proowner
      WHERE p.oid = obj AND NOT r.rolsuper;
      IF found IS NOT NULL THEN
        RETURN found;
      END IF;
    END IF;
    -- What this object uses.
    todo := todo || ARRAY(
      SELECT d.refclassid::regclass::text || ':' || d.refobjid
      FROM pg_depend d
      WHERE d.classid = cls AND d.objid = obj
        AND d.refclassid IN ('pg_proc'::regclass, 'pg_operator'::regclass, 'pg_type'::regclass)
      UNION
      SELECT 'pg_class:' || t.typrelid FROM pg_type t
      WHERE cls = 'pg_type'::regclass AND t.oid = obj AND t.typrelid <> 0);
    -- What belongs to it: a relation's constraints, defaults, triggers, policies, its own
    -- rules, indexes and partitions; a domain's constraints.
    IF cls IN ('pg_class'::regclass, 'pg_type'::regclass) THEN
      todo := todo || ARRAY(
        SELECT d.classid::regclass::text || ':' || d.objid
        FROM pg_depend d
        WHERE d.refclassid = cls AND d.refobjid = obj
          AND (d.classid IN ('pg_constraint'::regclass, 'pg_attrdef'::regclass, 'pg_trigger'::regclass,
                             'pg_policy'::regclass, 'pg_class'::regclass)
               OR (d.classid = 'pg_rewrite'::regclass
                   AND EXISTS (SELECT FROM pg_rewrite rw WHERE rw.oid = d.objid AND rw.ev_class = obj)))
          AND NOT (d.classid = 'pg_class'::regclass
                   AND (SELECT c.relkind FROM pg_class c WHERE c.oid = d.objid) NOT IN ('r', 'p', 'i', 'I', 'f')));
    END IF;
  END LOOP;
  RETURN NULL;
END $$;
COMMENT ON FUNCTION id_gen.untrusted_code(regclass) IS 'The first function owned by a non-superuser that maintaining the table could run (its constraints, defaults, indexes, triggers, policies, rules, column types and partitions), or NULL. id_gen refuses to copy, move or re-partition such tables as a superuser.';
REVOKE EXECUTE ON FUNCTION id_gen.untrusted_code(regclass) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.refuse_untrusted_table(rel regclass, what text) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  code text := id_gen.untrusted_code(rel);
  owner_name name;
  owner_super boolean;
BEGIN
  IF code IS NOT NULL THEN
    RAISE EXCEPTION 'id_gen: cannot % %: it runs % ', what, rel, code
      USING ERRCODE = '42501',
            DETAIL = 'id_gen copies, moves and re-partitions distributed tables with superuser rights, and would run that code with them.',
            HINT = 'Have a superuser own the functions the table''s constraints, defaults, indexes, triggers and column types call (ALTER FUNCTION ... OWNER TO), or remove them from the table.';
  END IF;
  SELECT r.rolname, r.rolsuper INTO owner_name, owner_super
  FROM pg_class c JOIN pg_roles r ON r.oid = c.relowner WHERE c.oid = rel;
  IF what LIKE 'shard%' AND NOT owner_super AND owner_name <> current_user THEN
    RAISE EXCEPTION 'id_gen: cannot % %: it is owned by %, not by a superuser or %', what, rel,
                    quote_ident(owner_name), quote_ident(current_user)
      USING ERRCODE = '42501',
            HINT = 'The coordinator creates the shards'' tables itself; a table of that name made by another role is not adopted. Rename or drop it (or ALTER TABLE ... OWNER TO a superuser).';
  END IF;
END $$;
COMMENT ON FUNCTION id_gen.refuse_untrusted_table(regclass, text) IS 'Raises 42501 when maintaining the table could run code owned by a non-superuser (id_gen.untrusted_code), or when a shard table is owned by a role that is neither a superuser nor the caller.';
REVOKE EXECUTE ON FUNCTION id_gen.refuse_untrusted_table(regclass, text) FROM PUBLIC;

-- The partition bound of genes lower_gene .. upper_gene exactly as pg_get_expr prints it.
CREATE OR REPLACE FUNCTION id_gen.partition_bound_text(lower_gene integer, upper_gene integer) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN format('FOR VALUES FROM (%L) TO (%s)', id_gen.gene_first_id(lower_gene),
              CASE WHEN upper_gene = 65535 THEN 'MAXVALUE' ELSE quote_literal(id_gen.gene_first_id(upper_gene + 1)) END);
COMMENT ON FUNCTION id_gen.partition_bound_text(integer, integer) IS 'The partition bound of genes lower_gene .. upper_gene as pg_get_expr(relpartbound) prints it: how shards and coordinators recognise a range''s partition whatever its name.';

-- The word ALTER needs for a relation: TABLE, FOREIGN TABLE or VIEW.
CREATE OR REPLACE FUNCTION id_gen.relation_kind_word(rel regclass) RETURNS text
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  SELECT CASE c.relkind WHEN 'f' THEN 'FOREIGN TABLE' WHEN 'v' THEN 'VIEW' ELSE 'TABLE' END
  FROM pg_class c WHERE c.oid OPERATOR(pg_catalog.=) rel;
END;
COMMENT ON FUNCTION id_gen.relation_kind_word(regclass) IS 'TABLE, FOREIGN TABLE or VIEW: what ALTER ... OWNER TO and COMMENT ON need for a relation.';
GRANT EXECUTE ON FUNCTION id_gen.relation_kind_word(regclass) TO PUBLIC;

-- Grants, owner, row security and comment of a parent, repeated on one of its partitions.
CREATE OR REPLACE FUNCTION id_gen.inherit_parent_settings(parent regclass, part regclass, note text) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  p record;
  kind text;
BEGIN
  SELECT pg_get_userbyid(c.relowner) AS owner_name, c.relrowsecurity, c.relforcerowsecurity INTO p
  FROM pg_class c WHERE c.oid = parent;
  kind := id_gen.relation_kind_word(part);
  EXECUTE format('ALTER %s %s OWNER TO %I', kind, part, p.owner_name);
  PERFORM id_gen.copy_grants(parent, part);
  IF p.relrowsecurity AND kind = 'TABLE' THEN
    EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', part);
  END IF;
  IF p.relforcerowsecurity AND kind = 'TABLE' THEN
    EXECUTE format('ALTER TABLE %s FORCE ROW LEVEL SECURITY', part);
  END IF;
  IF note IS NOT NULL THEN
    EXECUTE format('COMMENT ON %s %s IS %L', kind, part, note);
  END IF;
END $$;
COMMENT ON FUNCTION id_gen.inherit_parent_settings(regclass, regclass, text) IS 'Gives a new partition its parent''s owner, grants and row-level security settings, and a comment.';
REVOKE EXECUTE ON FUNCTION id_gen.inherit_parent_settings(regclass, regclass, text) FROM PUBLIC;

-- Grants of one relation, repeated on another (the owner's own rights are implied).
CREATE OR REPLACE FUNCTION id_gen.copy_grants(source regclass, target regclass) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  g record;
BEGIN
  FOR g IN SELECT a.grantee, a.privilege_type, a.is_grantable
           FROM pg_class c, aclexplode(c.relacl) a
           WHERE c.oid = source AND a.grantee <> c.relowner LOOP
    EXECUTE format('GRANT %s ON %s TO %s%s', g.privilege_type, target,
                   CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(g.grantee)) END,
                   CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
  END LOOP;
END $$;
COMMENT ON FUNCTION id_gen.copy_grants(regclass, regclass) IS 'Grants on target every privilege that was granted on source (distributed tables carry their grants to the relations behind them).';
-- Runs as its caller (the event trigger that keeps grants in step runs as whoever GRANTs).
GRANT EXECUTE ON FUNCTION id_gen.copy_grants(regclass, regclass) TO PUBLIC;

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
  bound text;
  detached regclass[] := '{}';
  candidate regclass;
  lowest bigint;
  highest bigint;
  adopted boolean;
  n_created integer := 0;
  n_adopted integer := 0;
  n_detached integer := 0;
  copied bigint := 0;
  n bigint;
BEGIN
  -- Each statement below must see every row committed before the lock was granted.
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'id_gen: a shard re-partitions its tables only in a READ COMMITTED transaction of its own (this one is %)',
                    current_setting('transaction_isolation')
      USING ERRCODE = '25000',
            HINT = 'The coordinator calls it over dblink (id_gen.shard_exec); a snapshot taken before the table lock would miss rows committed while it waited.';
  END IF;
  PERFORM set_config('lock_timeout', lock_timeout_ms || 'ms', true);
  -- In a deadlock with a writer, this is the one that gives up (the coordinator retries).
  PERFORM set_config('deadlock_timeout', '100ms', true);
  PERFORM id_gen.quiet_ddl();
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
  PERFORM id_gen.refuse_untrusted_table(parent, 'shard table');
  -- Rows are moved, not written anew: no user trigger fires for them.
  PERFORM set_config('session_replication_role', 'replica', true);

  -- Partitions whose bound is not a wanted range are detached ...
  FOR part IN SELECT c.oid::regclass AS rel, c.relname, pg_get_expr(c.relpartbound, c.oid) AS bound
              FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
              WHERE i.inhparent = parent ORDER BY c.relname LOOP
    -- The tombstone and the partition of negative ids (sql/routing.sql) stay.
    CONTINUE WHEN part.bound IN ('DEFAULT', id_gen.negative_bound_text());
    wanted := (SELECT g FROM unnest(gene_ranges) g
               WHERE id_gen.partition_bound_text(lower(g), upper(g) - 1) = part.bound LIMIT 1);
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
  FOR wanted IN SELECT g FROM unnest(gene_ranges) g ORDER BY g LOOP
    bound := id_gen.partition_bound_text(lower(wanted), upper(wanted) - 1);
    CONTINUE WHEN EXISTS (SELECT FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                          WHERE i.inhparent = parent AND pg_get_expr(c.relpartbound, c.oid) = bound);
    pname := id_gen.partition_name(stem, lower(wanted), upper(wanted) - 1);
    candidate := to_regclass(format('%I.%I', schema_name, pname));
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
  RETURN format('created %s, adopted %s, detached %s, copied %s rows', n_created, n_adopted, n_detached, copied);
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

-- Source of a move --------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION id_gen.refuse_moving_rows() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF TG_NARGS >= 4 AND TG_ARGV[3] = 'incoming' THEN
    RAISE EXCEPTION 'id_gen: the genes of % are not owned by this shard yet: they are being moved here from shard "%" (move %)',
                    TG_TABLE_NAME, TG_ARGV[1], TG_ARGV[0]
      USING ERRCODE = 'IG002',
            DETAIL = 'Until the move cuts over, shard "' || TG_ARGV[1] || '" owns them; this copy takes no writes of its own.',
            HINT = 'Write through the coordinator, or re-read the routes (id_gen.route_map) and retry on the owner.';
  END IF;
  RAISE EXCEPTION 'id_gen: the rows of % are moving to shard "%" (move %)', TG_TABLE_NAME, TG_ARGV[1], TG_ARGV[0]
    USING ERRCODE = 'IG002',
          DETAIL = 'The genes are fenced for a cut-over; it takes milliseconds.',
          HINT = 'Through the coordinator these writes wait (milliseconds); an application that routes by itself retries after a short wait (5 to 50 ms, growing), re-reading the routes (id_gen.route_map) if it persists. The fence is lifted or the genes change shard within seconds.';
END $$;
COMMENT ON FUNCTION id_gen.refuse_moving_rows() IS 'Trigger that fences the source partition of a move (or the target of a revert), and the target''s incoming partitions from the copy until the cut-over: direct writes fail with IG002 (retry shortly) until the partition is detached or the fence lifted; reads that select it by id fail the same way (the routing guard). Replication (the copy and the apply) does not fire it.';

-- parts: qualified names of the moved partitions; id_columns, lower_genes, upper_genes: per part.
CREATE OR REPLACE FUNCTION id_gen.shard_create_publication(move_id bigint, parts text[], id_columns name[],
                                                           lower_genes integer[], upper_genes integer[]) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  pub name := 'id_gen_move_' || move_id;
  rels regclass[] := id_gen.shard_relations(parts, true);
  items text;
BEGIN
  IF EXISTS (SELECT FROM pg_publication p WHERE p.pubname = pub) THEN
    RETURN 'exists';
  END IF;
  FOR i IN 1 .. cardinality(rels) LOOP
    PERFORM id_gen.refuse_untrusted_table(rels[i], 'move shard table');
  END LOOP;
  SELECT string_agg(format('%s WHERE (%I OPERATOR(pg_catalog.>=) %s AND %I OPERATOR(pg_catalog.<=) %s)', rels[i],
                           id_columns[i], id_gen.gene_first_id(lower_genes[i]),
                           id_columns[i], id_gen.gene_last_id(upper_genes[i])), ', ' ORDER BY i)
    INTO items
  FROM generate_subscripts(rels, 1) i;
  EXECUTE format('CREATE PUBLICATION %I FOR TABLE %s, id_gen.move_markers WHERE (move_id OPERATOR(pg_catalog.=) %s)',
                 pub, items, move_id);
  RETURN 'created';
END $$;
COMMENT ON FUNCTION id_gen.shard_create_publication(bigint, text[], name[], integer[], integer[]) IS 'On the source of a move: publishes the moved partitions (row filter on the id, the replica identity) and the move''s markers.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_create_publication(bigint, text[], name[], integer[], integer[]) FROM PUBLIC;

-- The slot is created here, not by CREATE SUBSCRIPTION, so that the subscription's
-- command never needs to run at top level with its connection string.
CREATE OR REPLACE FUNCTION id_gen.shard_create_slot(move_id bigint) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  slot name := 'id_gen_move_' || move_id;
BEGIN
  IF EXISTS (SELECT FROM pg_replication_slots s WHERE s.slot_name = slot) THEN
    RAISE EXCEPTION 'id_gen: a replication slot named % exists already on this shard', slot
      USING ERRCODE = '42710',
            HINT = 'id_gen neither uses nor drops a slot it did not create. Drop it (pg_drop_replication_slot) if it is a leftover, then resume the move.';
  END IF;
  IF current_setting('server_version_num')::integer >= 170000 THEN
    -- PostgreSQL 17+: a failover slot, which standbys with sync_replication_slots keep in
    -- step, so that a move survives a failover of its source.
    EXECUTE 'SELECT pg_catalog.pg_create_logical_replication_slot($1, $2, failover => true)' USING slot, 'pgoutput';
  ELSE
    PERFORM pg_create_logical_replication_slot(slot, 'pgoutput');
  END IF;
  RETURN slot;
END $$;
COMMENT ON FUNCTION id_gen.shard_create_slot(bigint) IS 'On the source of a move: creates its logical replication slot (42710 if one of that name exists: it is never taken over); from PostgreSQL 17 on a failover slot.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_create_slot(bigint) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.shard_move_lag(move_id bigint) RETURNS bigint
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  SELECT coalesce((pg_current_wal_lsn() OPERATOR(pg_catalog.-) s.confirmed_flush_lsn)::bigint, -1)
  FROM pg_replication_slots s WHERE s.slot_name OPERATOR(pg_catalog.=) ('id_gen_move_' OPERATOR(pg_catalog.||) move_id);
END;
COMMENT ON FUNCTION id_gen.shard_move_lag(bigint) IS 'On the source of a move: bytes of WAL its slot has not confirmed (NULL without the slot).';
REVOKE EXECUTE ON FUNCTION id_gen.shard_move_lag(bigint) FROM PUBLIC;

-- The fence trigger on each partition of parts (waiting at most 2 s for writers and route
-- claims in flight). Its arguments: the move, the other shard (where the rows go, or come
-- from when incoming), the id column's number (for the routing guard) and, on a move's
-- target, 'incoming'.
CREATE OR REPLACE FUNCTION id_gen.put_fence(move_id bigint, other_shard text, parts text[], incoming boolean) RETURNS integer
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  rel regclass;
  n integer := 0;
BEGIN
  PERFORM set_config('lock_timeout', '2s', true);
  -- (A target's partitions that do not exist yet hold nothing to fence: a move still
  -- planned, whose session died before it created them.)
  FOREACH rel IN ARRAY id_gen.shard_relations(parts, NOT incoming) LOOP
    EXECUTE format('CREATE OR REPLACE TRIGGER id_gen_move_fence BEFORE INSERT OR UPDATE OR DELETE ON %s '
                   'FOR EACH ROW EXECUTE FUNCTION id_gen.refuse_moving_rows(%L, %L, %L%s)', rel, move_id, other_shard,
                   coalesce(id_gen.partition_key_attnum(rel), 0), CASE WHEN incoming THEN ', ''incoming''' ELSE '' END);
    EXECUTE format('ALTER TABLE %s ENABLE TRIGGER id_gen_move_fence', rel);
    n := n + 1;
  END LOOP;
  RETURN n;
END $$;
COMMENT ON FUNCTION id_gen.put_fence(bigint, text, text[], boolean) IS 'On a shard: puts the fence trigger (id_gen.refuse_moving_rows) on each partition of parts; incoming marks a move''s target, which does not own the genes yet.';
REVOKE EXECUTE ON FUNCTION id_gen.put_fence(bigint, text, text[], boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.shard_fence(move_id bigint, target_shard text, parts text[]) RETURNS integer
LANGUAGE sql STRICT
SET search_path = pg_catalog, pg_temp
RETURN id_gen.put_fence(move_id, target_shard, parts, false);
COMMENT ON FUNCTION id_gen.shard_fence(bigint, text, text[]) IS 'On the source of a move: a trigger on each moved partition refuses direct writes, and the routing guard reads that select it by id (IG002); creating it waits for writers and route claims in flight (at most 2 s).';
REVOKE EXECUTE ON FUNCTION id_gen.shard_fence(bigint, text, text[]) FROM PUBLIC;

-- On the target of a move, right after its partitions are created: the genes are not its
-- own until the cut-over (the source holds them and the coordinator routes there), so its
-- copies refuse direct writes, route claims and reads by id (IG002) like a fenced source.
-- The subscription's copy and apply do not fire the trigger (ENABLE, not ALWAYS).
CREATE OR REPLACE FUNCTION id_gen.shard_fence_incoming(move_id bigint, source_shard text, parts text[]) RETURNS integer
LANGUAGE sql STRICT
SET search_path = pg_catalog, pg_temp
RETURN id_gen.put_fence(move_id, source_shard, parts, true);
COMMENT ON FUNCTION id_gen.shard_fence_incoming(bigint, text, text[]) IS 'On the target of a move: its partitions of the moved genes refuse direct writes, route claims and reads by id (IG002) until the cut-over lifts the fence; replication still fills them.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_fence_incoming(bigint, text, text[]) FROM PUBLIC;

-- DISABLE takes SHARE ROW EXCLUSIVE: long readers of the partition do not block it (DROP
-- TRIGGER would need ACCESS EXCLUSIVE). Partitions already detached are skipped.
CREATE OR REPLACE FUNCTION id_gen.shard_unfence(parts text[]) RETURNS integer
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  rel regclass;
  n integer := 0;
BEGIN
  PERFORM set_config('lock_timeout', '5s', true);
  FOREACH rel IN ARRAY id_gen.shard_relations(parts, false) LOOP
    IF EXISTS (SELECT FROM pg_trigger t WHERE t.tgname = 'id_gen_move_fence' AND t.tgrelid = rel AND t.tgenabled <> 'D') THEN
      EXECUTE format('ALTER TABLE %s DISABLE TRIGGER id_gen_move_fence', rel);
      n := n + 1;
    END IF;
  END LOOP;
  RETURN n;
END $$;
COMMENT ON FUNCTION id_gen.shard_unfence(text[]) IS 'On the source of a move, or on its target at the cut-over: lifts the fence (disables the fence triggers).';
REVOKE EXECUTE ON FUNCTION id_gen.shard_unfence(text[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.shard_write_marker(move_id bigint, marker bigint) RETURNS void
LANGUAGE sql STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  INSERT INTO id_gen.move_markers (move_id, marker) VALUES (move_id, marker);
END;
COMMENT ON FUNCTION id_gen.shard_write_marker(bigint, bigint) IS 'On the source of a move: writes a marker row, awaited on the target.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_write_marker(bigint, bigint) FROM PUBLIC;

-- The moved partitions leave the source's table: detached and renamed
-- id_gen_moved_<move>_<hash> (idempotent; a resumed move may have done some already).
CREATE OR REPLACE FUNCTION id_gen.moved_partition_name(move_id bigint, part text) RETURNS name
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN ('id_gen_moved_' OPERATOR(pg_catalog.||) move_id OPERATOR(pg_catalog.||) '_'
        OPERATOR(pg_catalog.||) pg_catalog.left(pg_catalog.md5(part), 12))::name;
COMMENT ON FUNCTION id_gen.moved_partition_name(bigint, text) IS 'Name a source partition gets when a move detaches it (kept with keep_source).';

CREATE OR REPLACE FUNCTION id_gen.shard_detach_moved(move_id bigint, parts text[]) RETURNS integer
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  p text;
  rel regclass;
  parent regclass;
  n integer := 0;
BEGIN
  PERFORM set_config('lock_timeout', '5s', true);
  FOREACH p IN ARRAY parts LOOP
    rel := to_regclass(p);
    CONTINUE WHEN rel IS NULL;
    SELECT i.inhparent::regclass INTO parent FROM pg_inherits i WHERE i.inhrelid = rel;
    CONTINUE WHEN parent IS NULL;
    EXECUTE format('ALTER TABLE %s DETACH PARTITION %s', parent, rel);
    EXECUTE format('ALTER TABLE %s RENAME TO %I', rel, id_gen.moved_partition_name(move_id, p));
    n := n + 1;
  END LOOP;
  PERFORM id_gen.shard_routing_changed();
  RETURN n;
END $$;
COMMENT ON FUNCTION id_gen.shard_detach_moved(bigint, text[]) IS 'On the source of a move after its cut-over: detaches the moved partitions (direct writes and id reads of those genes then get IG001 there, from the tombstone) and renames them id_gen_moved_<move>_<hash>.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_detach_moved(bigint, text[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.shard_drop_moved(move_id bigint, parts text[], drop_tables boolean) RETURNS integer
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  p text;
  n integer := 0;
  s name;
BEGIN
  IF drop_tables THEN
    FOREACH p IN ARRAY parts LOOP
      s := (parse_ident(p))[1];
      IF to_regclass(format('%I.%I', s, id_gen.moved_partition_name(move_id, p))) IS NOT NULL THEN
        EXECUTE format('DROP TABLE %I.%I', s, id_gen.moved_partition_name(move_id, p));
        n := n + 1;
      END IF;
    END LOOP;
  END IF;
  DELETE FROM id_gen.move_markers m WHERE m.move_id = shard_drop_moved.move_id;
  RETURN n;
END $$;
COMMENT ON FUNCTION id_gen.shard_drop_moved(bigint, text[], boolean) IS 'On the source of a move: drops its detached partitions (unless keep_source) and its markers.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_drop_moved(bigint, text[], boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.shard_drop_publication(move_id bigint) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  EXECUTE format('DROP PUBLICATION IF EXISTS %I', 'id_gen_move_' || move_id);
END $$;
COMMENT ON FUNCTION id_gen.shard_drop_publication(bigint) IS 'On the source of a move: drops its publication.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_drop_publication(bigint) FROM PUBLIC;

-- Slots of a move: its own (only if it created it) and the table-sync slots of its
-- subscription (pg_<subscription oid>_sync_<relid>_<subscriber system id>). A walsender
-- still holding one is terminated first; returns how many are left.
CREATE OR REPLACE FUNCTION id_gen.shard_drop_move_slots(move_id bigint, own_slot boolean, subscription_oid oid,
                                                        subscriber_system_id text) RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  s record;
BEGIN
  -- (subscription_oid and subscriber_system_id are NULL for a move that never subscribed.)
  IF move_id IS NULL OR own_slot IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "%" must not be NULL', CASE WHEN move_id IS NULL THEN 'move_id' ELSE 'own_slot' END
      USING ERRCODE = '22004';
  END IF;
  FOR s IN SELECT r.slot_name, r.active, r.active_pid FROM pg_replication_slots r
           WHERE (own_slot AND r.slot_name = 'id_gen_move_' || move_id)
              OR (subscription_oid IS NOT NULL AND subscriber_system_id IS NOT NULL
                  AND r.slot_name LIKE 'pg\_' || subscription_oid || '\_sync\_%\_' || subscriber_system_id) LOOP
    IF s.active THEN
      PERFORM pg_terminate_backend(s.active_pid);
    ELSE
      PERFORM pg_drop_replication_slot(s.slot_name);
    END IF;
  END LOOP;
  RETURN (SELECT count(*) FROM pg_replication_slots r
          WHERE (own_slot AND r.slot_name = 'id_gen_move_' || move_id)
             OR (subscription_oid IS NOT NULL AND subscriber_system_id IS NOT NULL
                 AND r.slot_name LIKE 'pg\_' || subscription_oid || '\_sync\_%\_' || subscriber_system_id));
END $$;
COMMENT ON FUNCTION id_gen.shard_drop_move_slots(bigint, boolean, oid, text) IS 'On the source of a move: drops the replication slots the move created (its own only when own_slot, and the table-sync slots of its subscription); returns how many are left.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_drop_move_slots(bigint, boolean, oid, text) FROM PUBLIC;

-- Target of a move ----------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION id_gen.shard_system_id() RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN (SELECT system_identifier::text FROM pg_control_system());
COMMENT ON FUNCTION id_gen.shard_system_id() IS 'This server''s system identifier (names of table-sync slots carry the subscriber''s).';
REVOKE EXECUTE ON FUNCTION id_gen.shard_system_id() FROM PUBLIC;

-- Creates the subscription from the connection string the coordinator left in
-- id_gen.move_secrets, without connecting (so it can run here, in a function: the
-- command with the password is never a top-level statement, and an error is re-raised
-- without it). Enabling and the initial copy follow (shard_enable_subscription, then
-- ALTER SUBSCRIPTION ... REFRESH PUBLICATION at top level).
-- Creates subscription `tag` (publication and slot of the same name, which exists; not
-- enabled) from the connection string the coordinator left in id_gen.move_secrets, then
-- forgets that string. The password never appears in a statement text, log line, error or
-- pg_stat_statements (whatever its track setting).
-- A move's subscription does not connect (its tables come with REFRESH ... copy_data);
-- the way back of a reversible move (tables_now) connects to read its tables, which are
-- ready at once (copy_data = false), so no change streamed later is skipped.
CREATE OR REPLACE FUNCTION id_gen.subscribe_with_secret(move_id bigint, tag name, tables_now boolean) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  conn text;
  msg text;
  code text;
BEGIN
  IF NOT EXISTS (SELECT FROM pg_subscription s WHERE s.subname = tag) THEN
    SELECT s.conninfo INTO conn FROM id_gen.move_secrets s WHERE s.move_id = subscribe_with_secret.move_id;
    IF conn IS NULL THEN
      RAISE EXCEPTION 'id_gen: move %: no connection string for its subscription was left on this shard', move_id
        USING ERRCODE = '55000', HINT = 'Resume the move from the coordinator (it writes it again).';
    END IF;
    BEGIN
      -- CREATE SUBSCRIPTION ... connect = false warns that it is not connected, and a
      -- logged WARNING would carry this statement (with the password) as its CONTEXT.
      -- (Both settings end with this transaction, which is this call.)
      PERFORM set_config('client_min_messages', 'error', true);
      PERFORM set_config('log_min_messages', 'error', true);
      -- pg_stat_statements with track = all keeps nested statements with their text,
      -- readable by pg_read_all_stats: this one is not tracked (a placeholder setting
      -- where the module is not loaded).
      PERFORM set_config('pg_stat_statements.track', 'none', true);
      IF tables_now THEN
        EXECUTE format('CREATE SUBSCRIPTION %I CONNECTION %L PUBLICATION %I WITH (create_slot = false, slot_name = %L, '
                       'copy_data = false, enabled = false)', tag, conn, tag, tag);
      ELSE
        EXECUTE format('CREATE SUBSCRIPTION %I CONNECTION %L PUBLICATION %I WITH (connect = false, slot_name = %L)',
                       tag, conn, tag, tag);
      END IF;
    EXCEPTION WHEN OTHERS THEN
      -- The statement carried the password: re-raise without it (no CONTEXT of that statement).
      GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT, code = RETURNED_SQLSTATE;
      RAISE EXCEPTION 'id_gen: move %: could not create subscription %: %', move_id, tag, msg USING ERRCODE = code;
    END;
  END IF;
  DELETE FROM id_gen.move_secrets s WHERE s.move_id = subscribe_with_secret.move_id;
END $$;
COMMENT ON FUNCTION id_gen.subscribe_with_secret(bigint, name, boolean) IS 'Creates a move''s subscription (publication and slot of the same name; not enabled) from the connection string in id_gen.move_secrets, which it then deletes; tables_now: connect and take the tables as ready (the way back of a reversible move).';
REVOKE EXECUTE ON FUNCTION id_gen.subscribe_with_secret(bigint, name, boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.shard_subscribe(move_id bigint, parts text[]) RETURNS oid
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  tag name := 'id_gen_move_' || move_id;
  rel regclass;
BEGIN
  FOREACH rel IN ARRAY id_gen.shard_relations(parts, true) LOOP
    PERFORM id_gen.refuse_untrusted_table(rel, 'shard table');
  END LOOP;
  PERFORM id_gen.subscribe_with_secret(move_id, tag, false);
  RETURN (SELECT s.oid FROM pg_subscription s WHERE s.subname = tag);
END $$;
COMMENT ON FUNCTION id_gen.shard_subscribe(bigint, text[]) IS 'On the target of a move: creates its subscription (not yet connected) from the connection string in id_gen.move_secrets, then forgets that string.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_subscribe(bigint, text[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.shard_enable_subscription(move_id bigint) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF EXISTS (SELECT FROM pg_subscription s WHERE s.subname = 'id_gen_move_' || move_id AND NOT s.subenabled) THEN
    EXECUTE format('ALTER SUBSCRIPTION %I ENABLE', 'id_gen_move_' || move_id);
  END IF;
END $$;
COMMENT ON FUNCTION id_gen.shard_enable_subscription(bigint) IS 'On the target of a move: enables its subscription.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_enable_subscription(bigint) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.shard_subscription_state(move_id bigint) RETURNS text
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  SELECT count(*) FILTER (WHERE sr.srsubstate OPERATOR(pg_catalog.<>) 'r') OPERATOR(pg_catalog.||) '/'
         OPERATOR(pg_catalog.||) count(*)
  FROM pg_subscription_rel sr JOIN pg_subscription s ON s.oid OPERATOR(pg_catalog.=) sr.srsubid
  WHERE s.subname OPERATOR(pg_catalog.=) ('id_gen_move_' OPERATOR(pg_catalog.||) move_id);
END;
COMMENT ON FUNCTION id_gen.shard_subscription_state(bigint) IS 'On the target of a move: tables of its subscription not yet ready / all of them.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_subscription_state(bigint) FROM PUBLIC;

-- Progress without counting: rows the table sync committed, plus those of a COPY running now.
CREATE OR REPLACE FUNCTION id_gen.shard_rows_copied(parts text[]) RETURNS bigint
LANGUAGE plpgsql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  rels regclass[] := id_gen.shard_relations(parts, false);
BEGIN
  RETURN (SELECT coalesce(sum(n_tup_ins), 0) FROM pg_stat_user_tables WHERE relid = ANY (rels::oid[]))
       + (SELECT coalesce(sum(tuples_processed), 0) FROM pg_stat_progress_copy WHERE relid = ANY (rels::oid[]));
END $$;
COMMENT ON FUNCTION id_gen.shard_rows_copied(text[]) IS 'On the target of a move: rows its table sync has written so far.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_rows_copied(text[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.shard_has_marker(move_id bigint, marker bigint) RETURNS boolean
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  SELECT EXISTS (SELECT FROM id_gen.move_markers m
                 WHERE m.move_id OPERATOR(pg_catalog.=) shard_has_marker.move_id
                   AND m.marker OPERATOR(pg_catalog.=) shard_has_marker.marker);
END;
COMMENT ON FUNCTION id_gen.shard_has_marker(bigint, bigint) IS 'On the target of a move: whether a marker has arrived.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_has_marker(bigint, bigint) FROM PUBLIC;

-- Before DROP SUBSCRIPTION on a target whose source is gone: the slot is not touched.
CREATE OR REPLACE FUNCTION id_gen.shard_detach_subscription(move_id bigint) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  tag name := 'id_gen_move_' || move_id;
BEGIN
  IF EXISTS (SELECT FROM pg_subscription s WHERE s.subname = tag) THEN
    EXECUTE format('ALTER SUBSCRIPTION %I DISABLE', tag);
    EXECUTE format('ALTER SUBSCRIPTION %I SET (slot_name = NONE)', tag);
  END IF;
  DELETE FROM id_gen.move_secrets s WHERE s.move_id = shard_detach_subscription.move_id;
END $$;
COMMENT ON FUNCTION id_gen.shard_detach_subscription(bigint) IS 'On the target of a move: disables its subscription and lets go of the slot, so that it can be dropped without reaching the source (the source drops the slot itself).';
REVOKE EXECUTE ON FUNCTION id_gen.shard_detach_subscription(bigint) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.shard_empty_partitions(parts text[]) RETURNS integer
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  rel regclass;
  n integer := 0;
BEGIN
  FOREACH rel IN ARRAY id_gen.shard_relations(parts, false) LOOP
    EXECUTE format('TRUNCATE %s', rel);
    n := n + 1;
  END LOOP;
  RETURN n;
END $$;
COMMENT ON FUNCTION id_gen.shard_empty_partitions(text[]) IS 'On the target of an aborted move: empties the partitions the copy filled.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_empty_partitions(text[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.shard_forget_markers(move_id bigint) RETURNS void
LANGUAGE sql STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  DELETE FROM id_gen.move_markers m WHERE m.move_id OPERATOR(pg_catalog.=) shard_forget_markers.move_id;
END;
COMMENT ON FUNCTION id_gen.shard_forget_markers(bigint) IS 'Deletes the marker rows of a move.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_forget_markers(bigint) FROM PUBLIC;

-- Sequences: the target's high-water mark goes above the source's.
CREATE OR REPLACE FUNCTION id_gen.shard_sequence_high(sequence text) RETURNS bigint
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  SELECT s.max_id FROM id_gen.sequences s
  WHERE s.name OPERATOR(pg_catalog.=) shard_sequence_high.sequence AND s.authority IS NULL;
END;
COMMENT ON FUNCTION id_gen.shard_sequence_high(text) IS 'The high-water mark of a local sequence on this shard (NULL for authority-backed or missing ones).';
REVOKE EXECUTE ON FUNCTION id_gen.shard_sequence_high(text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.shard_raise_sequence(sequence text, high bigint) RETURNS void
LANGUAGE sql STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  UPDATE id_gen.sequences s SET max_id = GREATEST(s.max_id, high)
  WHERE s.name OPERATOR(pg_catalog.=) shard_raise_sequence.sequence AND s.authority IS NULL;
END;
COMMENT ON FUNCTION id_gen.shard_raise_sequence(text, bigint) IS 'Raises the high-water mark of a local sequence to at least high.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_raise_sequence(text, bigint) FROM PUBLIC;

-- For a shard whose coordinator is gone for good ----------------------------------------------
CREATE OR REPLACE FUNCTION id_gen.shard_forget_moves() RETURNS TABLE (object text, action text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  r record;
BEGIN
  IF NOT coalesce((SELECT rolsuper FROM pg_roles WHERE oid = current_user::regrole), false) THEN
    RAISE EXCEPTION 'id_gen: only superusers may forget moves' USING ERRCODE = '42501';
  END IF;
  FOR r IN SELECT t.tgrelid::regclass AS rel FROM pg_trigger t WHERE t.tgname = 'id_gen_move_fence' AND t.tgenabled <> 'D' LOOP
    EXECUTE format('ALTER TABLE %s DISABLE TRIGGER id_gen_move_fence', r.rel);
    object := r.rel::text; action := 'fence lifted'; RETURN NEXT;
  END LOOP;
  FOR r IN SELECT s.subname FROM pg_subscription s
           WHERE s.subdbid = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
             AND s.subname ~ '^id_gen_(move|back)_[0-9]+$' LOOP
    -- Disabled and detached from its slot here; the DROP itself needs a top-level statement.
    EXECUTE format('ALTER SUBSCRIPTION %I DISABLE', r.subname);
    EXECUTE format('ALTER SUBSCRIPTION %I SET (slot_name = NONE)', r.subname);
    object := 'subscription ' || r.subname; action := format('disabled; now run: DROP SUBSCRIPTION %I', r.subname); RETURN NEXT;
  END LOOP;
  FOR r IN SELECT p.pubname FROM pg_publication p WHERE p.pubname ~ '^id_gen_(move|back)_[0-9]+$' LOOP
    EXECUTE format('DROP PUBLICATION %I', r.pubname);
    object := 'publication ' || r.pubname; action := 'dropped'; RETURN NEXT;
  END LOOP;
  FOR r IN SELECT s.slot_name, s.active, s.active_pid FROM pg_replication_slots s
           WHERE s.database = current_database() AND s.slot_name ~ '^id_gen_(move|back)_[0-9]+$' LOOP
    IF r.active THEN
      PERFORM pg_terminate_backend(r.active_pid);
      object := 'replication slot ' || r.slot_name; action := 'its walsender terminated; call again to drop it'; RETURN NEXT;
    ELSE
      PERFORM pg_drop_replication_slot(r.slot_name);
      object := 'replication slot ' || r.slot_name; action := 'dropped'; RETURN NEXT;
    END IF;
  END LOOP;
  DELETE FROM id_gen.move_markers;
  DELETE FROM id_gen.move_secrets;
END $$;
COMMENT ON FUNCTION id_gen.shard_forget_moves() IS 'On a shard whose coordinator is gone for good: lifts every move fence, drops the publications and slots moves created (id_gen_move_<n>, and id_gen_back_<n> of reversible moves), disables their subscriptions (drop them afterwards as it says), and forgets markers and connection strings. Superuser only. Detached copies (id_gen_moved_*) are left for you to check and drop.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_forget_moves() FROM PUBLIC;
