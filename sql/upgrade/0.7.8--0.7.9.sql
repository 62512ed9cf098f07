-- Catalog changes and new C functions, 0.7.8 -> 0.7.9 (by hand). Moves of tables laid out by
-- ownership (docs/design.md section 11.8) add a column to id_gen.shard_tables
-- (fenced_ranges), in the catalog section of sql/install/cluster_catalog.sql new in 0.7.9.
-- The fence of such a move is read per backend with the owned genes
-- (src/routing_guard/owned_ranges.rs).
-- @rust-function shard_fenced
-- The trigger of each table of rows also fires on DELETE (a delete of a fenced gene gets
-- IG002; one of a gene not owned, a move's clean-up, goes through).
DO $$
DECLARE
  r record;
BEGIN
  FOR r IN SELECT format('%I.%I', t.schema_name, t.rows_table)::regclass AS rel, t.id_column
           FROM id_gen.shard_tables t
           WHERE t.rows_table IS NOT NULL AND to_regclass(format('%I.%I', t.schema_name, t.rows_table)) IS NOT NULL LOOP
    EXECUTE format('CREATE OR REPLACE TRIGGER id_gen_owned_rows BEFORE INSERT OR UPDATE OR DELETE ON %s FOR EACH ROW '
                   'EXECUTE FUNCTION id_gen.refuse_rows_not_owned(%L)', r.rel, r.id_column);
  END LOOP;
END $$;
