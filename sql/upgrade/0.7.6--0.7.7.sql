-- Catalog changes and new C functions, 0.7.6 -> 0.7.7 (by hand): no catalog change. A move
-- and a revert share their probe before the fence (sql/cluster/move.sql: probe_outcome,
-- subscription_errors, stuck_subscription_hint), which replace two functions of 0.7.6's
-- revert (the coordinator's own, not called by shards).
DROP FUNCTION id_gen.stuck_way_back_hint(id_gen.shard_moves, bigint);
DROP FUNCTION id_gen.way_back_errors(id_gen.shard_moves);
-- The ownership test of the layout by ownership (docs/design.md section 12): what a shard
-- owns of each table, as data, cached per backend (src/routing_guard/owned_ranges.rs).
-- @rust-function shard_owns
-- @rust-function shard_owned_ranges
