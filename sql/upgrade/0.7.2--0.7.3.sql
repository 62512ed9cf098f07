-- Catalog changes and new C functions, 0.7.2 -> 0.7.3 (by hand). The code files are now in
-- folders by concept (sql/cluster/, sql/cluster/shard/; see sql/README.md), and
-- scripts/gen-upgrade.sh appends them as they are (CREATE OR REPLACE). The functions of the
-- remote path run on the coordinator, so they lose the shard_ prefix, which now means
-- "runs on a shard" and nothing else: shard_exec, shard_send, shard_receive, shard_call,
-- shard_call_text, shard_link_conninfo and shard_link_failed become remote_exec,
-- remote_send, remote_receive, remote_call, remote_call_text, remote_link_conninfo and
-- remote_link_failed; shard_conninfo becomes subscription_conninfo. All are internal
-- (superuser only); the old names go here, the new ones come with the code files.
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
