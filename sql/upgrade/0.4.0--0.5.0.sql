-- Catalog changes and removed code, 0.4.0 -> 0.5.0 (by hand). scripts/gen-upgrade.sh
-- appends the new tables of sql/cluster_catalog.sql and the code files as they are.

-- set_route and drop_route take copy_rows now (re-created in sql/split.sql).
DROP FUNCTION id_gen.set_route(integer, text);
DROP FUNCTION id_gen.drop_route(integer);
-- move_genes takes reversible now (re-created in sql/move.sql).
DROP PROCEDURE id_gen.move_genes(integer, integer, text, boolean, boolean);
