-- The DDL follower: DDL on a distributed table (ALTER TABLE, GRANT, owners, ...) is
-- carried to the relations behind it on the coordinator and on the shards, by an event
-- trigger at ddl_command_end; and DROP EXTENSION is refused while a move is unfinished.
-- Code only (CREATE OR REPLACE; the event triggers are dropped and created again).
--
-- Invariants: id_gen's own DDL on distributed tables (partitions, foreign tables, owners)
-- is not followed; it says so for the rest of its transaction with id_gen.quiet_ddl()
-- (src/transaction_marks.rs: superuser only, not a setting any session could SET).

-- Makes rel's owner and grants those of source (revoking what source does not grant).
CREATE OR REPLACE FUNCTION id_gen.match_owner_and_grants(source regclass, rel regclass) RETURNS boolean
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  src_owner oid;
  rel_owner oid;
  g record;
BEGIN
  SELECT c.relowner INTO src_owner FROM pg_class c WHERE c.oid = source;
  SELECT c.relowner INTO rel_owner FROM pg_class c WHERE c.oid = rel;
  IF src_owner = rel_owner AND NOT EXISTS (
       (SELECT a.grantee, a.privilege_type, a.is_grantable FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = source AND a.grantee <> c.relowner
        EXCEPT
        SELECT a.grantee, a.privilege_type, a.is_grantable FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = rel AND a.grantee <> c.relowner)
       UNION ALL
       (SELECT a.grantee, a.privilege_type, a.is_grantable FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = rel AND a.grantee <> c.relowner
        EXCEPT
        SELECT a.grantee, a.privilege_type, a.is_grantable FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = source AND a.grantee <> c.relowner)) THEN
    RETURN false;
  END IF;
  IF src_owner <> rel_owner THEN
    EXECUTE format('ALTER %s %s OWNER TO %I', id_gen.relation_kind_word(rel), rel, pg_get_userbyid(src_owner));
  END IF;
  FOR g IN SELECT DISTINCT a.grantee FROM pg_class c, aclexplode(c.relacl) a
           WHERE c.oid = rel AND a.grantee <> c.relowner LOOP
    EXECUTE format('REVOKE ALL ON %s FROM %s', rel,
                   CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(g.grantee)) END);
  END LOOP;
  PERFORM id_gen.copy_grants(source, rel);
  RETURN true;
END $$;
COMMENT ON FUNCTION id_gen.match_owner_and_grants(regclass, regclass) IS 'Gives rel the owner and exactly the grants of source, with the caller''s rights; returns whether it changed anything.';

-- After GRANT, REVOKE and ALTER TABLE/VIEW/FOREIGN TABLE/SCHEMA: the owner and grants of
-- a distributed table's name reach the partitioned table and every partition and
-- foreign table behind it, and a distributed table that lost its name (RENAME, SET
-- SCHEMA) makes the command fail.
CREATE OR REPLACE FUNCTION id_gen.follow_distributed_ddl() RETURNS event_trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  dts id_gen.distributed_tables[];
  d id_gen.distributed_tables;
  first_gene_bound integer;
  front regclass;
  parts regclass;
  r record;
  renamed boolean;
  slot_numbers integer[];
  stack text;
BEGIN
  -- Runs as whoever ran the command, with their rights.
  IF to_regclass('id_gen.distributed_tables') IS NULL OR id_gen.ddl_is_quiet() THEN
    RETURN;
  END IF;
  -- An ALTER of relations none of which can be part of a distributed table (a plain table
  -- that is no partition, an index, a sequence, ...) is none of its business: return
  -- before reading id_gen's catalog. (GRANT, REVOKE and ALTER SCHEMA do not say which
  -- objects they touch: for them the catalog is read below without keeping its lock.)
  IF tg_tag IN ('ALTER TABLE', 'ALTER VIEW', 'ALTER FOREIGN TABLE')
     AND NOT EXISTS (SELECT FROM pg_event_trigger_ddl_commands() c
                     LEFT JOIN pg_class pc ON c.classid = 'pg_class'::regclass AND pc.oid = c.objid
                     WHERE pc.oid IS NULL OR pc.relkind IN ('p', 'v', 'f') OR pc.relispartition) THEN
    RETURN;
  END IF;
  -- Its own grants below fire it again: that run returns here. The call stack says so (no
  -- setting or function an ordinary session could use to skip this trigger).
  GET DIAGNOSTICS stack = PG_CONTEXT;
  IF (SELECT count(*) FROM regexp_matches(stack, '^PL/pgSQL function id_gen\.follow_distributed_ddl\(\) line', 'gn')) > 1 THEN
    RETURN;
  END IF;
  -- id_gen's catalog read in a subtransaction that is rolled back on purpose: its lock goes
  -- with it, so that unrelated DDL does not hold a lock on id_gen.distributed_tables until
  -- the caller's transaction ends (variables keep what was read).
  BEGIN
    SELECT coalesce(array_agg(t ORDER BY t.schema_name, t.table_name), '{}') INTO dts FROM id_gen.distributed_tables t;
    first_gene_bound := (SELECT min(sr.upper_gene) FROM id_gen.shard_routes sr);
    slot_numbers := (SELECT coalesce(array_agg(sl.slot), '{}') FROM id_gen.shard_slots sl);
    RAISE EXCEPTION USING ERRCODE = 'P0004';  -- (assert_failure: never raised otherwise here)
  EXCEPTION WHEN assert_failure THEN
    NULL;
  END;
  FOREACH d IN ARRAY dts LOOP
    front := to_regclass(format('%I.%I', d.schema_name, d.table_name));
    parts := to_regclass(format('%I.%I', d.schema_name, d.partitioned_name));
    IF front IS NULL OR parts IS NULL THEN
      -- Renamed (refused), not dropped (then there is nothing left to follow): its schema
      -- was renamed by this command, a view over the partitioned table lives on under
      -- another name, or the range partitions (per_range) or the shards' partitions
      -- (per_shard) hang under a parent of another name.
      renamed := (tg_tag = 'ALTER SCHEMA' AND NOT EXISTS (SELECT FROM pg_namespace n WHERE n.nspname = d.schema_name))
        OR (front IS NULL AND parts IS NOT NULL
            AND EXISTS (SELECT FROM pg_depend dep JOIN pg_rewrite rw ON rw.oid = dep.objid
                        WHERE dep.classid = 'pg_rewrite'::regclass AND dep.refclassid = 'pg_class'::regclass
                          AND dep.refobjid = parts AND rw.ev_class <> parts))
        OR (parts IS NULL
            AND EXISTS (SELECT FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                        JOIN pg_inherits i ON i.inhrelid = c.oid
                        WHERE n.nspname = d.schema_name
                          AND c.relname = ANY (CASE d.layout
                                                 WHEN 'per_shard' THEN ARRAY(SELECT id_gen.slot_partition_name(d.coordinator_stem, x)
                                                                             FROM unnest(slot_numbers) x)
                                                 ELSE ARRAY[id_gen.partition_name(d.coordinator_stem, 0, first_gene_bound)] END)));
      IF renamed THEN
        RAISE EXCEPTION 'id_gen: %.% is a distributed table; it cannot be renamed or moved to another schema',
                        quote_ident(d.schema_name), quote_ident(d.table_name)
          USING ERRCODE = '0A000',
                HINT = 'Its partitions, foreign tables and the shards'' tables are found by its name. Create a view with the new name over it instead.';
      END IF;
      CONTINUE;
    END IF;
    -- Owner and grants follow, as far as the caller may change them.
    BEGIN
      IF front <> parts THEN
        PERFORM id_gen.match_owner_and_grants(front, parts);
      END IF;
      FOR r IN WITH RECURSIVE tree(rel) AS (
                 SELECT i.inhrelid FROM pg_inherits i WHERE i.inhparent = parts
                 UNION ALL
                 SELECT i.inhrelid FROM pg_inherits i JOIN tree t ON i.inhparent = t.rel)
               SELECT rel::regclass AS rel FROM tree LOOP
        PERFORM id_gen.match_owner_and_grants(parts, r.rel);
      END LOOP;
    EXCEPTION WHEN insufficient_privilege THEN
      NULL;  -- not the caller's to change (and not changed by this command)
    END;
  END LOOP;
END $$;
COMMENT ON FUNCTION id_gen.follow_distributed_ddl() IS 'Event trigger: grants, revokes and owner changes on a distributed table reach every relation behind it; renaming a distributed table or its schema is refused (0A000).';
DROP EVENT TRIGGER IF EXISTS id_gen_follow_distributed_ddl;
CREATE EVENT TRIGGER id_gen_follow_distributed_ddl ON ddl_command_end
  WHEN TAG IN ('GRANT', 'REVOKE', 'ALTER TABLE', 'ALTER VIEW', 'ALTER FOREIGN TABLE', 'ALTER SCHEMA')
  EXECUTE FUNCTION id_gen.follow_distributed_ddl();
COMMENT ON EVENT TRIGGER id_gen_follow_distributed_ddl IS 'Keeps the owner and grants behind distributed tables in step with their names, and refuses renames (id_gen.follow_distributed_ddl).';

CREATE OR REPLACE FUNCTION id_gen.guard_extension_drop() RETURNS event_trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  busy text;
BEGIN
  IF to_regclass('id_gen.shard_moves') IS NULL OR current_query() !~* '\mid_gen\M' THEN
    RETURN;
  END IF;
  SELECT string_agg(format('%s (%s)', m.move_id, m.phase), ', ') INTO busy
  FROM id_gen.shard_moves m WHERE m.phase NOT IN ('done', 'aborted', 'reverted');
  IF busy IS NOT NULL THEN
    RAISE EXCEPTION 'id_gen: cannot drop the extension while moves are unfinished: %', busy
      USING ERRCODE = '55006',
            HINT = 'Their slots, publications, subscriptions and fences on the shards would be left behind. Finish each with CALL id_gen.move_genes(...) or CALL id_gen.abort_move(move_id) first.';
  END IF;
END $$;
COMMENT ON FUNCTION id_gen.guard_extension_drop() IS 'Event trigger: DROP EXTENSION id_gen is refused (55006) while a move is unfinished.';
DROP EVENT TRIGGER IF EXISTS id_gen_guard_extension_drop;
CREATE EVENT TRIGGER id_gen_guard_extension_drop ON ddl_command_start
  WHEN TAG IN ('DROP EXTENSION')
  EXECUTE FUNCTION id_gen.guard_extension_drop();
COMMENT ON EVENT TRIGGER id_gen_guard_extension_drop IS 'Refuses DROP EXTENSION id_gen while a move is unfinished (id_gen.guard_extension_drop).';
