-- Catalog changes and new C functions, 0.5.0 -> 0.6.0 (by hand). scripts/gen-upgrade.sh
-- appends the new tables of sql/cluster_catalog.sql and the code files as they are.
-- Shards' existing tables get their tombstone partitions when the coordinator next pushes
-- the route version (id_gen.shard_set_route_state), not here: a table created by an
-- extension script would become a member of the extension.

-- src/routing_guard/shard_state.rs
CREATE FUNCTION id_gen."shard_routing_changed"() RETURNS void
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'shard_routing_changed_wrapper';
COMMENT ON FUNCTION id_gen.shard_routing_changed() IS 'On a shard: every backend reloads its routing view (route version, partitions of distributed tables) once this transaction commits. Called by the shard functions that change them.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_routing_changed() FROM PUBLIC;
