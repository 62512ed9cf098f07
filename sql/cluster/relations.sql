-- Helpers for the relations of distributed tables, used on the coordinator and on the
-- shards: which code a table's maintenance could run (untrusted_code), partition bounds as
-- text, relation kinds, settings, owners and grants carried from a parent to the relations
-- behind it. Code only (CREATE OR REPLACE).
--
-- Invariants: no code that a non-superuser owns runs during a superuser's maintenance of
-- a table: its constraints, defaults, indexes, triggers and policies, and the types of
-- its columns, may only call functions owned by superusers (untrusted_code names the
-- first that does not).

-- Which code could run when a superuser maintains this table -----------------------------
-- Walks the objects the table's maintenance can execute: the table and the partitions
-- given (with their own partitions only if given too) and their indexes, their
-- constraints, defaults, triggers, policies and rules, the functions, operators and types
-- those use, domain constraints and composite attributes; returns the first function (by
-- signature) owned by a role that is not a superuser, or NULL. One recursive query whose
-- UNION visits each object once: O(objects), and no cap on the walk. A partition is
-- visited only when listed, so that a shard that changes a few of its thousands of
-- partitions checks those (shard_apply_ranges); untrusted_code(rel) lists them all.
CREATE OR REPLACE FUNCTION id_gen.untrusted_code(rel regclass, partitions regclass[]) RETURNS text
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  WITH RECURSIVE walk(cls, obj) AS (
    SELECT 'pg_catalog.pg_class'::pg_catalog.regclass, r.oid
    FROM pg_catalog.unnest(rel::pg_catalog.oid OPERATOR(pg_catalog.||) partitions::pg_catalog.oid[]) r(oid)
    UNION
    SELECT n.cls, n.obj
    FROM walk w
    CROSS JOIN LATERAL (
      -- What this object uses.
      SELECT d.refclassid::pg_catalog.regclass, d.refobjid FROM pg_catalog.pg_depend d
      WHERE d.classid OPERATOR(pg_catalog.=) w.cls AND d.objid OPERATOR(pg_catalog.=) w.obj
        AND d.refclassid OPERATOR(pg_catalog.=) ANY (ARRAY['pg_catalog.pg_proc'::pg_catalog.regclass,
              'pg_catalog.pg_operator'::pg_catalog.regclass, 'pg_catalog.pg_type'::pg_catalog.regclass]::pg_catalog.oid[])
      UNION ALL
      SELECT 'pg_catalog.pg_class'::pg_catalog.regclass, t.typrelid FROM pg_catalog.pg_type t
      WHERE w.cls OPERATOR(pg_catalog.=) 'pg_catalog.pg_type'::pg_catalog.regclass AND t.oid OPERATOR(pg_catalog.=) w.obj
        AND t.typrelid OPERATOR(pg_catalog.<>) 0::pg_catalog.oid
      UNION ALL
      -- What belongs to it: a relation's constraints, defaults, triggers, policies, its own
      -- rules, indexes and partitions; a domain's constraints.
      SELECT d.classid::pg_catalog.regclass, d.objid FROM pg_catalog.pg_depend d
      WHERE w.cls OPERATOR(pg_catalog.=) ANY (ARRAY['pg_catalog.pg_class'::pg_catalog.regclass,
              'pg_catalog.pg_type'::pg_catalog.regclass]::pg_catalog.oid[])
        AND d.refclassid OPERATOR(pg_catalog.=) w.cls AND d.refobjid OPERATOR(pg_catalog.=) w.obj
        AND (d.classid OPERATOR(pg_catalog.=) ANY (ARRAY['pg_catalog.pg_constraint'::pg_catalog.regclass,
               'pg_catalog.pg_attrdef'::pg_catalog.regclass, 'pg_catalog.pg_trigger'::pg_catalog.regclass,
               'pg_catalog.pg_policy'::pg_catalog.regclass, 'pg_catalog.pg_class'::pg_catalog.regclass]::pg_catalog.oid[])
             OR (d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_rewrite'::pg_catalog.regclass
                 AND EXISTS (SELECT FROM pg_catalog.pg_rewrite rw
                             WHERE rw.oid OPERATOR(pg_catalog.=) d.objid AND rw.ev_class OPERATOR(pg_catalog.=) w.obj)))
        AND NOT (d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
                 AND (SELECT c.relkind FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) d.objid)
                     OPERATOR(pg_catalog.<>) ALL (ARRAY['r', 'p', 'i', 'I', 'f']::"char"[]))
        -- The partitions of a partitioned table or index are not walked into (the listed
        -- ones are where the walk starts; an index of theirs is reached from them).
        AND NOT (d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
                 AND w.cls OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
                 AND EXISTS (SELECT FROM pg_catalog.pg_class c
                             WHERE c.oid OPERATOR(pg_catalog.=) d.objid AND c.relispartition)
                 AND EXISTS (SELECT FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) w.obj
                             AND c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['p', 'I']::"char"[])))
    ) n(cls, obj)
  )
  SELECT pg_catalog.format('function %s (owned by %s, who is not a superuser)', p.oid::pg_catalog.regprocedure,
                           pg_catalog.quote_ident(r.rolname))
  FROM walk w
  JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) w.obj
  JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) p.proowner
  WHERE w.cls OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass AND NOT r.rolsuper
  ORDER BY p.oid::pg_catalog.regprocedure::pg_catalog.text
  LIMIT 1;
END;
COMMENT ON FUNCTION id_gen.untrusted_code(regclass, regclass[]) IS 'The first function owned by a non-superuser that maintaining the table and the partitions listed could run (their constraints, defaults, indexes, triggers, policies, rules and column types; partitions not listed are left out), or NULL.';
REVOKE EXECUTE ON FUNCTION id_gen.untrusted_code(regclass, regclass[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.untrusted_code(rel regclass) RETURNS text
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
RETURN id_gen.untrusted_code(rel, ARRAY(SELECT t.relid FROM pg_catalog.pg_partition_tree(rel) t
                                        WHERE t.level OPERATOR(pg_catalog.>) 0));
COMMENT ON FUNCTION id_gen.untrusted_code(regclass) IS 'The first function owned by a non-superuser that maintaining the table could run (its constraints, defaults, indexes, triggers, policies, rules, column types and partitions), or NULL. id_gen refuses to copy, move or re-partition such tables as a superuser.';
REVOKE EXECUTE ON FUNCTION id_gen.untrusted_code(regclass) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.refuse_untrusted_table(rel regclass, what text, partitions regclass[]) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  code text := id_gen.untrusted_code(rel, partitions);
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
COMMENT ON FUNCTION id_gen.refuse_untrusted_table(regclass, text, regclass[]) IS 'Raises 42501 when maintaining the table and the partitions listed could run code owned by a non-superuser (id_gen.untrusted_code), or when a shard table is owned by a role that is neither a superuser nor the caller.';
REVOKE EXECUTE ON FUNCTION id_gen.refuse_untrusted_table(regclass, text, regclass[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.refuse_untrusted_table(rel regclass, what text) RETURNS void
LANGUAGE sql STRICT
SET search_path = pg_catalog, pg_temp
RETURN id_gen.refuse_untrusted_table(rel, what, ARRAY(SELECT t.relid FROM pg_catalog.pg_partition_tree(rel) t
                                                      WHERE t.level OPERATOR(pg_catalog.>) 0));
COMMENT ON FUNCTION id_gen.refuse_untrusted_table(regclass, text) IS 'Raises 42501 when maintaining the table or any of its partitions could run code owned by a non-superuser (id_gen.untrusted_code), or when a shard table is owned by a role that is neither a superuser nor the caller.';
REVOKE EXECUTE ON FUNCTION id_gen.refuse_untrusted_table(regclass, text) FROM PUBLIC;

-- The partition bound of genes lower_gene .. upper_gene exactly as pg_get_expr prints it.
CREATE OR REPLACE FUNCTION id_gen.partition_bound_text(lower_gene integer, upper_gene integer) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN format('FOR VALUES FROM (%L) TO (%s)', id_gen.gene_first_id(lower_gene),
              CASE WHEN upper_gene = 65535 THEN 'MAXVALUE' ELSE quote_literal(id_gen.gene_first_id(upper_gene + 1)) END);
COMMENT ON FUNCTION id_gen.partition_bound_text(integer, integer) IS 'The partition bound of genes lower_gene .. upper_gene as pg_get_expr(relpartbound) prints it: how shards and coordinators recognise a range''s partition whatever its name.';

-- Every partition of a table by the text of its bound, in one pass (one deparse per
-- partition): {"<bound>": <oid>}. Callers that look up many bounds use it instead of a
-- search per bound, which would cost O(partitions) each.
CREATE OR REPLACE FUNCTION id_gen.partitions_by_bound(parent regclass) RETURNS jsonb
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
RETURN (SELECT coalesce(jsonb_object_agg(pg_get_expr(c.relpartbound, c.oid), c.oid::bigint), '{}')
        FROM pg_inherits i JOIN pg_class c ON c.oid OPERATOR(pg_catalog.=) i.inhrelid
        WHERE i.inhparent OPERATOR(pg_catalog.=) parent);
COMMENT ON FUNCTION id_gen.partitions_by_bound(regclass) IS 'The partitions of a partitioned table as a jsonb object from the text of each bound (pg_get_expr of relpartbound) to its oid, built in one pass: how shards and coordinators find many partitions by bound in O(partitions) in all.';
REVOKE EXECUTE ON FUNCTION id_gen.partitions_by_bound(regclass) FROM PUBLIC;

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
