-- Catalog changes and new C functions, 0.7.0 -> 0.7.1 (by hand): none. scripts/gen-upgrade.sh
-- appends the code files as they are (CREATE OR REPLACE): the split's fence in two steps
-- (id_gen.shard_split_swap retires the old partitions, id_gen.try_finish_split_here does the
-- coordinator's half), id_gen.refuse_retired_rows. The routing guard's refusal of scans of
-- a retired partition is in the library.

-- The coordinator's half of a split or merge is now in pieces (id_gen.split_routes_here,
-- id_gen.relayout_split_here, id_gen.nest_split_here, id_gen.try_finish_split_here).
DROP FUNCTION IF EXISTS id_gen.finish_split_here(id_gen.route_splits);
