-- Per-sequence access control: owners, USAGE grants, role membership, PUBLIC, SET ROLE,
-- SECURITY DEFINER callers, DEFAULT expressions, bulk limits; and that no unprivileged
-- call changes what another role's sequence hands out next.

CREATE ROLE idg_dba NOLOGIN;                 -- may create sequences, not a superuser
CREATE ROLE idg_app_owner NOLOGIN;           -- owns the application's sequences
CREATE ROLE idg_app NOLOGIN;                 -- the application's login role
CREATE ROLE idg_readers NOLOGIN;             -- a group role that gets USAGE
CREATE ROLE idg_member NOLOGIN IN ROLE idg_readers;
CREATE ROLE idg_other NOLOGIN;               -- another application
GRANT EXECUTE ON FUNCTION id_gen.create_sequence(text, bigint, bigint, bigint, bigint, integer, real, bigint, integer, text, bigint, text) TO idg_dba;
GRANT EXECUTE ON FUNCTION id_gen.create_serial(text, text, integer, integer, integer, text, integer, text) TO idg_dba;
GRANT idg_app_owner TO idg_dba;              -- so the DBA may hand sequences to it
GRANT CREATE ON SCHEMA public TO idg_app, idg_other;

-- A DBA (not a superuser) creates a sequence: it owns it.
SET ROLE idg_dba;
SELECT id_gen.create_sequence('app_orders', step => 100, max_bulk => 1000) AS created;
SELECT owner, max_bulk FROM id_gen.sequences WHERE name = 'app_orders';
SELECT id_gen.next_segment_id('app_orders') > 0 AS owner_can_take;
-- ... and hands it to the application's owner role, without superuser rights.
SELECT id_gen.alter_sequence_owner('app_orders', 'idg_app_owner') AS new_owner;
SELECT try($$SELECT id_gen.alter_sequence_owner('app_orders', 'idg_other')$$);
RESET ROLE;
SELECT owner FROM id_gen.sequences WHERE name = 'app_orders';

-- Nobody else may take values, alter, drop or grant.
SET ROLE idg_other;
SELECT try($$SELECT id_gen.next_segment_id('app_orders')$$);
SELECT try($$SELECT * FROM id_gen.next_segment_ranges('app_orders', 10)$$);
SELECT try($$SELECT id_gen.gene_order_id('app_orders', 42::bigint)$$);
SELECT try($$SELECT id_gen.alter_sequence('app_orders', max_bulk => 1000000000)$$);
SELECT try($$SELECT id_gen.alter_sequence('app_orders', max_value => 10)$$);
SELECT try($$SELECT id_gen.drop_sequence('app_orders')$$);
SELECT try($$SELECT id_gen.grant_usage('app_orders', 'idg_other')$$);
SELECT try($$SELECT id_gen.revoke_usage('app_orders', 'public')$$);
SELECT try($$SELECT id_gen.alter_sequence_owner('app_orders', 'idg_other')$$);
SELECT try($$UPDATE id_gen.sequences SET max_id = max_value WHERE name = 'app_orders'$$);
SELECT try($$INSERT INTO id_gen.usage_grants VALUES ('sequence', 'app_orders', 'idg_other', 'idg_other')$$);
RESET ROLE;
-- None of that changed what the sequence hands out next.
SELECT max_id <= 200 AS untouched, max_value = 9223372036854775807 AS max_value_kept
FROM id_gen.sequences WHERE name = 'app_orders';

-- The owner grants USAGE to the application role and to a group role.
SET ROLE idg_app_owner;
SELECT id_gen.grant_usage('app_orders', 'idg_app') AS granted;
SELECT id_gen.grant_usage('app_orders', 'idg_readers'::regrole) AS granted_regrole;
SELECT id_gen.grant_usage('app_orders', 'idg_app') AS granted_twice;
RESET ROLE;
SELECT kind, name, grantee, granted_by FROM id_gen.usage_grants ORDER BY grantee;

-- A grantee takes values, also through a DEFAULT expression and gene_order_id.
SET ROLE idg_app;
SELECT id_gen.next_segment_id('app_orders') > 0 AS grantee_can_take;
CREATE TABLE app_orders_t (id bigint PRIMARY KEY DEFAULT id_gen.next_segment_id('app_orders'), note text);
INSERT INTO app_orders_t (note) SELECT 'n' || g FROM generate_series(1, 50) g;
SELECT count(DISTINCT id) AS inserted_by_grantee FROM app_orders_t;
SELECT id_gen.shard_of(id_gen.gene_order_id('app_orders', 42::bigint)) AS gene_of_42;
-- ... but may not manage it.
SELECT try($$SELECT id_gen.alter_sequence('app_orders', step => 200)$$);
SELECT try($$SELECT id_gen.grant_usage('app_orders', 'idg_other')$$);
-- Bulk limit: beyond max_bulk is 54000 and takes nothing.
SELECT try($$SELECT * FROM id_gen.next_segment_ranges('app_orders', 9000000000000000000)$$);
SELECT try($$SELECT id_gen.next_segment_ids_array('app_orders', 1001)$$);
SELECT cardinality(id_gen.next_segment_ids_array('app_orders', 1000)) AS at_the_cap;
RESET ROLE;
SELECT max_id < 100000 AS nothing_drained FROM id_gen.sequences WHERE name = 'app_orders';
-- The owner may raise the cap.
SET ROLE idg_app_owner;
SELECT id_gen.alter_sequence('app_orders', max_bulk => 5000) AS raised;
RESET ROLE;
SET ROLE idg_app;
SELECT cardinality(id_gen.next_segment_ids_array('app_orders', 5000)) AS after_raise;
RESET ROLE;

-- Membership counts: a member of the grantee group may take values; it stops when the
-- membership ends (the backend's cached decision is dropped).
SET ROLE idg_member;
SELECT id_gen.next_segment_id('app_orders') > 0 AS member_can_take;
RESET ROLE;
REVOKE idg_readers FROM idg_member;
SET ROLE idg_member;
SELECT try($$SELECT id_gen.next_segment_id('app_orders')$$);
RESET ROLE;
GRANT idg_readers TO idg_member;

-- SET ROLE changes the answer within one session (the decision is per role).
SET ROLE idg_app;
SELECT id_gen.next_segment_id('app_orders') > 0 AS as_app;
SET ROLE idg_other;
SELECT try($$SELECT id_gen.next_segment_id('app_orders')$$);
RESET ROLE;

-- SECURITY DEFINER functions act with their owner's rights, as for nextval.
SET ROLE idg_app;
CREATE FUNCTION public.app_next() RETURNS bigint LANGUAGE sql SECURITY DEFINER
  SET search_path = pg_catalog AS $$ SELECT id_gen.next_segment_id('app_orders') $$;
GRANT EXECUTE ON FUNCTION public.app_next() TO idg_other;
RESET ROLE;
SET ROLE idg_other;
SELECT public.app_next() > 0 AS through_definer;
SELECT try($$SELECT id_gen.next_segment_id('app_orders')$$);
RESET ROLE;

-- Revoke: the grantee loses access at once (next statement).
SET ROLE idg_app_owner;
SELECT id_gen.revoke_usage('app_orders', 'idg_app') AS revoked;
SELECT id_gen.revoke_usage('app_orders', 'idg_app') AS revoked_twice;
RESET ROLE;
SET ROLE idg_app;
SELECT try($$SELECT id_gen.next_segment_id('app_orders')$$);
SELECT try($$INSERT INTO app_orders_t (note) VALUES ('after revoke')$$);
RESET ROLE;

-- PUBLIC opens a sequence to everyone; revoking it closes it again.
SET ROLE idg_app_owner;
SELECT id_gen.grant_usage('app_orders', 'PUBLIC') AS granted_public;
RESET ROLE;
SET ROLE idg_other;
SELECT id_gen.next_segment_id('app_orders') > 0 AS public_can_take;
RESET ROLE;
SET ROLE idg_app_owner;
SELECT id_gen.revoke_usage('app_orders', 'public') AS revoked_public;
RESET ROLE;
SET ROLE idg_other;
SELECT try($$SELECT id_gen.next_segment_id('app_orders')$$);
RESET ROLE;

-- Serials: the same model.
SET ROLE idg_dba;
SELECT id_gen.create_serial('app_serial', 'YYYYMMDD', width => 4, time_zone => 'UTC') AS created;
SELECT length(id_gen.next_serial('app_serial', 'M')) AS owner_serial_length;
RESET ROLE;
SELECT owner FROM id_gen.serials WHERE name = 'app_serial';
SET ROLE idg_other;
SELECT try($$SELECT id_gen.next_serial('app_serial', 'M')$$);
SELECT try($$SELECT id_gen.drop_serial('app_serial')$$);
RESET ROLE;
SET ROLE idg_dba;
SELECT id_gen.grant_usage('app_serial', 'idg_other') AS granted_serial;
RESET ROLE;
SET ROLE idg_other;
SELECT length(id_gen.next_serial('app_serial', 'M')) AS grantee_serial_length;
RESET ROLE;
-- A sequence and a serial of one name: grant_usage needs kind.
SELECT id_gen.create_sequence('app_serial') AS same_name_sequence;
SELECT try($$SELECT id_gen.grant_usage('app_serial', 'idg_app')$$);
SELECT id_gen.grant_usage('app_serial', 'idg_app', kind => 'sequence') AS granted_with_kind;
SELECT try($$SELECT id_gen.grant_usage('app_serial', 'no_such_role')$$);
SELECT try($$SELECT id_gen.grant_usage('no_such_thing', 'idg_app')$$);
SELECT try($$SELECT id_gen.alter_sequence_owner('app_serial', 'public')$$);

-- Dropping a sequence removes its grants; a re-created one starts closed.
SELECT id_gen.drop_sequence('app_serial') AS dropped;
SELECT count(*) AS grants_left FROM id_gen.usage_grants WHERE kind = 'sequence' AND name = 'app_serial';
SELECT id_gen.create_sequence('app_serial') AS recreated;
SET ROLE idg_app;
SELECT try($$SELECT id_gen.next_segment_id('app_serial')$$);
RESET ROLE;

-- A catalog row whose owner role does not exist (restored from another cluster): the
-- row is kept, nobody but superusers may use or manage it, and errors say why.
UPDATE id_gen.sequences SET owner = 'idg_gone' WHERE name = 'app_serial';
SELECT id_gen.next_segment_id('app_serial') > 0 AS superuser_still_can;
SET ROLE idg_dba;
DO $$ BEGIN PERFORM id_gen.alter_sequence('app_serial', step => 5);
EXCEPTION WHEN insufficient_privilege THEN
  RAISE NOTICE 'denied: %', SQLERRM;
END $$;
RESET ROLE;
SELECT id_gen.alter_sequence_owner('app_serial', 'idg_app_owner') AS reassigned;

-- Clean up.
DROP TABLE app_orders_t;
DROP FUNCTION public.app_next();
SELECT id_gen.drop_sequence('app_orders'), id_gen.drop_sequence('app_serial'), id_gen.drop_serial('app_serial');
REVOKE CREATE ON SCHEMA public FROM idg_app, idg_other;
REVOKE EXECUTE ON FUNCTION id_gen.create_sequence(text, bigint, bigint, bigint, bigint, integer, real, bigint, integer, text, bigint, text) FROM idg_dba;
REVOKE EXECUTE ON FUNCTION id_gen.create_serial(text, text, integer, integer, integer, text, integer, text) FROM idg_dba;
DROP ROLE idg_member, idg_readers, idg_app, idg_other, idg_dba, idg_app_owner;
