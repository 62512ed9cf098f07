-- Catalog changes and new C functions, 0.7.7 -> 0.7.8 (by hand). The layout by ownership
-- (docs/design.md section 11.8) adds a column to id_gen.shard_tables (rows_table) and one to
-- id_gen.distributed_tables (shard_layout), in the catalog section of
-- sql/install/cluster_catalog.sql new in 0.7.8. PostgreSQL refuses to add a column to a table
-- whose row type a function with a SQL-standard body uses, so those functions go first (in
-- the order of their dependencies); the code files below create them again as they are.
DROP FUNCTION id_gen.split_needs_relayout(id_gen.route_splits);
DROP FUNCTION id_gen.find_range_partition(id_gen.distributed_tables, integer, integer);
DROP FUNCTION id_gen.range_partition(id_gen.distributed_tables, integer, integer);
