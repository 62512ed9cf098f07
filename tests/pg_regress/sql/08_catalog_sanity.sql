-- Catalog sanity of schema id_gen, as PostgreSQL's own opr_sanity checks its catalog:
-- every IMMUTABLE function is PARALLEL SAFE (four were not in 0.6.0); no function reads
-- or sets an internal switch as a placeholder setting that any session could SET (in
-- 0.6.0, SET id_gen_internal.own_ddl = on skipped the DDL follower); the marks that
-- replace them cannot be set by an ordinary role; and an ALTER TABLE of a plain table does
-- not leave a lock on id_gen's catalog for the rest of its transaction.
SELECT p.oid::regprocedure AS immutable_not_parallel_safe
FROM pg_proc p
WHERE p.pronamespace = 'id_gen'::regnamespace AND p.provolatile = 'i' AND p.proparallel <> 's'
ORDER BY 1;

SELECT p.oid::regprocedure AS uses_a_placeholder_switch
FROM pg_proc p
WHERE p.pronamespace = 'id_gen'::regnamespace AND p.prosrc ~ 'id_gen_internal'
ORDER BY 1;

CREATE ROLE idg_sanity_user;
SET ROLE idg_sanity_user;
SET id_gen_internal.own_ddl = on;          -- a placeholder, read by nothing
SELECT id_gen.ddl_is_quiet() AS quiet_after_placeholder;
SELECT id_gen.quiet_ddl();                 -- superuser only
RESET ROLE;
SELECT id_gen.ddl_is_quiet() AS quiet_before;
BEGIN;
SELECT id_gen.quiet_ddl();
SELECT id_gen.ddl_is_quiet() AS quiet_in_the_transaction;
COMMIT;
SELECT id_gen.ddl_is_quiet() AS quiet_in_the_next;
DROP ROLE idg_sanity_user;

CREATE TABLE sanity_plain (a int);
BEGIN;
ALTER TABLE sanity_plain ADD COLUMN b int;
SELECT count(*) AS locks_on_id_gen_catalog FROM pg_locks
WHERE pid = pg_backend_pid() AND relation = 'id_gen.distributed_tables'::regclass;
COMMIT;
-- GRANT, REVOKE and ALTER SCHEMA do not say what they touch: the follower reads the catalog
-- and lets its lock go at once.
CREATE ROLE idg_sanity_reader;
CREATE SCHEMA sanity_schema;
BEGIN;
GRANT SELECT ON sanity_plain TO idg_sanity_reader;
REVOKE SELECT ON sanity_plain FROM idg_sanity_reader;
ALTER SCHEMA sanity_schema OWNER TO idg_sanity_reader;
SELECT count(*) AS locks_on_id_gen_catalog_after_grant FROM pg_locks
WHERE pid = pg_backend_pid() AND relation IN ('id_gen.distributed_tables'::regclass, 'id_gen.shard_routes'::regclass);
COMMIT;
DROP SCHEMA sanity_schema;
DROP ROLE idg_sanity_reader;
DROP TABLE sanity_plain;
