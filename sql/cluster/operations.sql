-- Long operations (moves, splits, merges, reverts, rebalance steps): what they share.
-- Code only (CREATE OR REPLACE); loaded before the files of each kind (sql/cluster/move.sql,
-- sql/cluster/split.sql, sql/cluster/revert.sql, sql/cluster/rebalance.sql), which use it.
--
-- Advisory-lock keys, declared here and nowhere else (pg_locks shows them as classid; the
-- second key of a two-key lock is objid, with objsubid = 2):
--   * id_gen.operation_start_lock_key(): a transaction lock, taken with SHARE ROW
--     EXCLUSIVE on id_gen.shard_routes by whoever decides which operation runs next, so that
--     no route change or new distributed table slips in before a new operation is recorded;
--   * id_gen.operation_session_lock_key(), with the operation's id (moves and splits share
--     the sequence id_gen.move_ids): a session lock held by the session that runs that
--     operation, so a second CALL for it gets 55006 and the move supervisor leaves it alone.
--
-- Invariants: the keys never change (a running operation of an older version holds them
-- across an update); they are IMMUTABLE SQL functions, so a call costs nothing.

CREATE OR REPLACE FUNCTION id_gen.operation_start_lock_key() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$SELECT 757430$$;
COMMENT ON FUNCTION id_gen.operation_start_lock_key() IS
  'Advisory-lock key (transaction lock) under which a session decides which long operation (move, split, merge, revert) runs next.';

CREATE OR REPLACE FUNCTION id_gen.operation_session_lock_key() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$SELECT 757431$$;
COMMENT ON FUNCTION id_gen.operation_session_lock_key() IS
  'Advisory-lock key that, with an operation id (move or split), is held as a session lock by the session running that operation.';
