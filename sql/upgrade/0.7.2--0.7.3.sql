-- Catalog changes and new C functions, 0.7.2 -> 0.7.3 (by hand). The code files are now in
-- folders by concept (sql/cluster/, sql/cluster/shard/; see sql/README.md), and
-- scripts/gen-upgrade.sh appends them as they are (CREATE OR REPLACE). The functions of the
-- remote path run on the coordinator, so they lose the shard_ prefix, which now means
-- "runs on a shard" and nothing else: shard_exec, shard_send, shard_receive, shard_call,
-- shard_call_text, shard_link_conninfo and shard_link_failed become remote_exec,
-- remote_send, remote_receive, remote_call, remote_call_text, remote_link_conninfo and
-- remote_link_failed; shard_conninfo becomes subscription_conninfo. All are internal
-- (superuser only); the old names go here, the new ones come with the code files.
-- id_gen.distributed_tables gains a column (layout) in the catalog part below, and PostgreSQL
-- 15 refuses to alter a table whose row type a function with an SQL-standard body uses: the
-- two such functions of 0.7.2 go first (the code files make them again, over the new row).
DROP FUNCTION id_gen.split_needs_relayout(id_gen.route_splits);
DROP FUNCTION id_gen.find_range_partition(id_gen.distributed_tables, integer, integer);
DROP FUNCTION id_gen.shard_call(text, text, text[], integer);
DROP FUNCTION id_gen.shard_call_text(text, text[]);
DROP FUNCTION id_gen.shard_exec(text, text, integer);
DROP FUNCTION id_gen.shard_receive(text, integer, timestamptz);
DROP FUNCTION id_gen.shard_send(text, text, integer);
DROP FUNCTION id_gen.shard_link_failed(text, text, text, text, text);
DROP FUNCTION id_gen.shard_link_conninfo(text, integer);
DROP FUNCTION id_gen.shard_conninfo(text, boolean);
-- The comment of arm_connect_bound names remote_send (from sql/install/finalize.sql):
-- @finalize-of arm_connect_bound
-- Long operations share one catalog (sql/cluster/operations.sql): id_gen.cluster_operations
-- (after -- @new-in-0.7.3 in sql/install/cluster_catalog.sql) holds every move, split and
-- merge, and id_gen.shard_moves and id_gen.route_splits become views over it. The old
-- tables step aside here; after the code files have made the views and the code over them,
-- their rows are copied (ids kept) and they go, with the old code's overloads on their row
-- types.
ALTER TABLE id_gen.shard_moves RENAME TO shard_moves_until_0_7_2;
ALTER TABLE id_gen.route_splits RENAME TO route_splits_until_0_7_2;
-- Return types that change (from the tables' row types to the views'), or functions that
-- the one recovery loop (id_gen.recover_operations) replaces:
DROP FUNCTION id_gen.take_reversible_move(bigint, text);
DROP FUNCTION id_gen.recover_splits(interval, interval);
-- Splits and merges are run by the driver of long operations (id_gen.run_operation) in steps:
DROP PROCEDURE id_gen.run_split(bigint);
-- The shard's subscription of a move or its way back is made by one function (with the
-- relations to check, returning the oid); moves and splits refuse each other through one
-- function over the one catalog (id_gen.refuse_during_operations):
DROP FUNCTION id_gen.subscribe_with_secret(bigint, name, boolean);
DROP FUNCTION id_gen.refuse_during_moves(text);
DROP FUNCTION id_gen.refuse_during_splits(text);
-- distribute_table takes a layout (per_range, or per_shard over id_gen.gene_route_ops):
DROP FUNCTION id_gen.distribute_table(regclass, name, name, text);
-- Routing by shard slots (sql/cluster/route_hash.sql makes the operator class
-- id_gen.gene_route_ops over these; id_gen.shard_slots comes with the catalog):
-- @rust-function gene_route_hash
-- @rust-function gene_route_hash_extended
-- @rust-function route_slot
-- @rust-function route_hash_changed
-- @after-code
INSERT INTO id_gen.cluster_operations
  (operation_id, kind, phase, lower_gene, upper_gene, shard, target_shard, rows_copied, lag_bytes,
   fence_attempts, fence_started_at, fence_ended_at, runner_pid, started_at, updated_at, finished_at,
   last_error, recovered_by, keep_source, reversible, target_subscription, target_system_id,
   back_lsn, back_lag_bytes, back_retained_bytes, back_checked_at)
SELECT move_id, 'move', phase, lower_gene, upper_gene, source_shard, target_shard, rows_copied, lag_bytes,
       fence_attempts, fence_started_at, fence_ended_at, runner_pid, started_at, updated_at, finished_at,
       last_error, recovered_by, keep_source, reversible, target_subscription, target_system_id,
       back_lsn, back_lag_bytes, back_retained_bytes, back_checked_at
FROM id_gen.shard_moves_until_0_7_2;
INSERT INTO id_gen.cluster_operations
  (operation_id, kind, phase, lower_gene, at_gene, upper_gene, shard, rows_total, rows_copied,
   fence_attempts, fence_started_at, fence_ended_at, runner_pid, started_at, updated_at, finished_at,
   last_error, recovered_by)
SELECT split_id, kind, phase, lower_gene, at_gene, upper_gene, shard, rows_total, rows_copied,
       fence_attempts, fence_started_at, fence_ended_at, runner_pid, started_at, updated_at, finished_at,
       last_error, recovered_by
FROM id_gen.route_splits_until_0_7_2;
-- The undo state of unfinished operations becomes cleanup records (id_gen.operation_cleanups):
-- what each may have made, as if it had recorded it itself; a move's flags slot_created and
-- source_fenced become the records of its slot and of its fence (a revert's fence while it
-- is reversible). After a reversible move's cut-over only the way back and the copies of
-- either side wait for its outcome.
SELECT id_gen.record_move_cleanups(sm,
         CASE WHEN sm.phase IN ('reversible', 'reverting') THEN '{way_back,source_copies,target_copies}'::text[]
              ELSE CASE WHEN sm.reversible THEN '{way_back}'::text[] ELSE '{}' END
                   || '{subscription,publication,sync_slots,source_copies,target_copies,markers,source_markers}' END
         || CASE WHEN old.slot_created AND sm.phase NOT IN ('reversible', 'reverting') THEN '{replication_slot}'::text[] ELSE '{}' END
         || CASE WHEN old.source_fenced AND sm.phase = 'reversible' THEN '{revert_fence}'::text[]
                 WHEN old.source_fenced AND sm.phase NOT IN ('reversible', 'reverting') THEN '{source_fence}' ELSE '{}' END)
FROM id_gen.shard_moves sm JOIN id_gen.shard_moves_until_0_7_2 old USING (move_id)
WHERE sm.phase NOT IN ('done', 'aborted', 'reverted');
SELECT id_gen.record_split_cleanups(rs) FROM id_gen.route_splits rs WHERE rs.phase NOT IN ('done', 'aborted');
ALTER EXTENSION id_gen DROP TABLE id_gen.shard_moves_until_0_7_2;
ALTER EXTENSION id_gen DROP TABLE id_gen.route_splits_until_0_7_2;
DROP TABLE id_gen.shard_moves_until_0_7_2, id_gen.route_splits_until_0_7_2 CASCADE;
