-- Catalog changes and new C functions, 0.6.0 -> 0.7.0 (by hand). scripts/gen-upgrade.sh
-- appends the code files as they are (CREATE OR REPLACE): bounded remote calls
-- (id_gen.shard_link_conninfo, no cancel request), the target's fence before a move's
-- cut-over (id_gen.shard_fence_incoming), the remote path in two halves (shard_send,
-- shard_receive) for pushes to every shard at once, the supervisor's pass around shards that do
-- not answer (id_gen.shards_not_answering), the way back dropped on the target first
-- (id_gen.shard_detach_way_back).

-- Internal switches are no longer settings any session could SET (src/transaction_marks.rs).
-- id_gen.quiet_ddl() was PL/pgSQL setting id_gen_internal.own_ddl; copy_rows is an argument.
CREATE OR REPLACE FUNCTION id_gen."quiet_ddl"() RETURNS void
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'quiet_ddl_wrapper';
COMMENT ON FUNCTION id_gen.quiet_ddl() IS 'Marks the rest of the transaction as id_gen''s own DDL on distributed tables (id_gen.follow_distributed_ddl then does nothing). Superuser only: not a setting any session could SET.';
REVOKE EXECUTE ON FUNCTION id_gen.quiet_ddl() FROM PUBLIC;
CREATE FUNCTION id_gen."ddl_is_quiet"() RETURNS bool
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'ddl_is_quiet_wrapper';
COMMENT ON FUNCTION id_gen.ddl_is_quiet() IS 'Whether id_gen.quiet_ddl() ran in this transaction (the DDL follower asks).';
CREATE FUNCTION id_gen."written_by_this_transaction"("xid" bigint) RETURNS bool
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'written_by_this_transaction_wrapper';
COMMENT ON FUNCTION id_gen.written_by_this_transaction(bigint) IS 'Whether a transaction id (a row''s xmin, as bigint) is the current transaction or one of its subtransactions that has not rolled back.';
DROP FUNCTION id_gen.sync_distributed_tables();
DROP FUNCTION id_gen.sync_distributed_table(name, name);

-- src/connect_bound.rs: the bound of a connect to a shard on PostgreSQL 16+ (dblink waits
-- on the latch there, and libpq's connect_timeout does not apply).
CREATE FUNCTION id_gen."arm_connect_bound"("ms" INT) RETURNS void
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'arm_connect_bound_wrapper';
COMMENT ON FUNCTION id_gen.arm_connect_bound(integer) IS 'Arms a timer that interrupts a wait (a connect to another server) after ms, like a cancel; id_gen.shard_send bounds its connects with it. Superuser only.';
REVOKE EXECUTE ON FUNCTION id_gen.arm_connect_bound(integer) FROM PUBLIC;
CREATE FUNCTION id_gen."disarm_connect_bound"() RETURNS bool
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'disarm_connect_bound_wrapper';
COMMENT ON FUNCTION id_gen.disarm_connect_bound() IS 'Stops the timer of id_gen.arm_connect_bound; whether it fired (its cancel is then withdrawn if nothing took it). Superuser only.';
REVOKE EXECUTE ON FUNCTION id_gen.disarm_connect_bound() FROM PUBLIC;
