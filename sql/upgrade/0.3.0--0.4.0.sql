-- Catalog changes and removed code, 0.3.0 -> 0.4.0 (by hand). scripts/gen-upgrade.sh
-- appends the code files (sql/distribute.sql, sql/shard.sql, sql/move.sql) as they are.

-- Partition names come from stems stored per table (0.3.0 derived them from the name:
-- these are the same names, so existing partitions keep theirs).
ALTER TABLE id_gen.shard_tables ADD COLUMN stem name;
UPDATE id_gen.shard_tables
SET stem = CASE WHEN octet_length(table_name) <= 30 THEN table_name::text
                ELSE left(table_name, 8) || '_' || left(md5(table_name), 8) END;
ALTER TABLE id_gen.shard_tables ALTER COLUMN stem SET NOT NULL;
COMMENT ON TABLE id_gen.shard_tables IS 'On a shard: the distributed tables it holds and the route ranges it owns for each, as last applied by id_gen.shard_apply_ranges (called by the coordinator): one local partition per owned route range.';
COMMENT ON COLUMN id_gen.shard_tables.stem IS 'Prefix of the names of the table''s partitions on this shard (<stem>_g<lower>_<upper>), chosen by the coordinator, unique among the distributed tables of the schema.';

ALTER TABLE id_gen.distributed_tables ADD COLUMN shard_stem name, ADD COLUMN coordinator_stem name;
UPDATE id_gen.distributed_tables
SET shard_stem = CASE WHEN octet_length(table_name) <= 30 THEN table_name::text
                      ELSE left(table_name, 8) || '_' || left(md5(table_name), 8) END,
    coordinator_stem = CASE WHEN octet_length(partitioned_name) <= 30 THEN partitioned_name::text
                            ELSE left(partitioned_name, 8) || '_' || left(md5(partitioned_name), 8) END;
ALTER TABLE id_gen.distributed_tables ALTER COLUMN shard_stem SET NOT NULL, ALTER COLUMN coordinator_stem SET NOT NULL;
COMMENT ON COLUMN id_gen.distributed_tables.shard_stem IS 'Prefix of the shards'' partition names of this table (<stem>_g<lower>_<upper>); unique among the distributed tables of the schema.';
COMMENT ON COLUMN id_gen.distributed_tables.coordinator_stem IS 'Prefix of the coordinator''s range partitions of this table (<stem>_g<lower>_<upper>, holding <...>_fdw); unique among the distributed tables of the schema.';

CREATE TABLE id_gen.move_secrets (
    move_id    bigint      PRIMARY KEY,
    conninfo   text        NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now()
);
REVOKE ALL ON id_gen.move_secrets FROM PUBLIC;
COMMENT ON TABLE id_gen.move_secrets IS 'On the target shard of a move: the connection string of the source (with its password) until the subscription is created from it; superusers only, never dumped.';

-- (0.3.0's run_move_step, a SQL-standard function over the row type, would block the ALTER;
-- sql/move.sql re-creates it.)
DROP FUNCTION id_gen.run_move_step(id_gen.shard_moves, text, integer, integer);
ALTER TABLE id_gen.shard_moves ADD COLUMN slot_created boolean NOT NULL DEFAULT false,
                               ADD COLUMN target_system_id text,
                               ADD COLUMN recovered_by text;
-- A 0.3.0 move created its slot through CREATE SUBSCRIPTION.
UPDATE id_gen.shard_moves SET slot_created = true WHERE phase NOT IN ('planned', 'done', 'aborted');
COMMENT ON COLUMN id_gen.shard_moves.slot_created IS 'Whether this move created its replication slot on the source (only then does an abort drop a slot of that name).';
COMMENT ON COLUMN id_gen.shard_moves.recovered_by IS 'What the move supervisor did to a move whose session was gone (lifted the fence, finished the cut-over, aborted it), if anything.';

-- Code that is gone, or whose signature or parameter names changed (re-created below).
DROP VIEW id_gen.distribution;
DROP TRIGGER apply_shard_table ON id_gen.shard_tables;
DROP FUNCTION id_gen.apply_shard_table();
DROP FUNCTION id_gen.partition_name(name, integer, integer);
DROP FUNCTION id_gen.push_shard_table(text, name, name, name, int4range[], text);
DROP FUNCTION id_gen.point_partition(name, name, name, integer, integer, text, name);
DROP FUNCTION id_gen.sync_distributed_table(name, name);
DROP FUNCTION id_gen.move_commands(bigint, integer, integer, text, text, boolean, oid);
