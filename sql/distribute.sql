-- Distributed tables: a coordinator routes rows by the route table over postgres_fdw.
-- Code only (CREATE OR REPLACE): the tables are in sql/cluster_catalog.sql, the shard
-- side in sql/shard.sql; an update script re-creates this file as it is.
--
-- Coordinator side. id_gen.distribute_table(tbl, id_column, owner_column, sequence)
-- turns a plain table into a table partitioned by RANGE on its bigint id column, with
-- one partition per route range [lo, hi] of id_gen.route_ranges, FOR VALUES FROM
-- (lo << 47) TO ((hi + 1) << 47) (MAXVALUE for the last). That partition is itself
-- partitioned the same way and holds a single postgres_fdw foreign table ("<name>_fdw")
-- on the server whose name is the route's shard. The extra level lets a move re-point a
-- range by swapping the foreign table while holding a lock on that range's partition
-- only: writers of other ranges never wait, writers of the moved range pause and then
-- continue on the new shard. Point lookups by id prune to one foreign table; lookups by
-- owner prune with id BETWEEN owner_first_id(o) AND owner_last_id(o).
--
-- Inserts that name only the owner: PostgreSQL routes a row to its partition before any
-- trigger of the partition runs, and a column DEFAULT cannot read another column. So
-- when a sequence is given, the table's name becomes a view over the partitioned table
-- (<name>_shards) whose INSTEAD OF INSERT trigger computes gene_order_id(sequence,
-- owner) for a NULL id and inserts into the partitioned table. The view is
-- auto-updatable for UPDATE and DELETE; COPY into it runs the trigger; RETURNING sees
-- the id.
--
-- Shard side. A shard holds the table partitioned the same way: one local partition per
-- route range it owns, named id_gen.partition_name(shard_stem, lo, hi), and each
-- coordinator foreign table points at exactly that local partition. So:
--   * a foreign table never sees another range's rows (postgres_fdw does not send a
--     partition's bounds to the remote side);
--   * the shard refuses a row outside its genes, whoever writes it (23514): foreign
--     tables do not enforce partition bounds, the shard's partitions do; with an owner
--     column, a CHECK (id_gen_owner_gene) refuses a row whose id's gene is not its
--     owner's, so an UPDATE cannot move a row to another owner's gene;
--   * moving a route range moves one table (sql/move.sql).
--
-- The one remote path: id_gen.shard_exec runs one statement on a shard over dblink, with
-- the shard's foreign server and the caller's user mapping, on a connection whose
-- search_path is pinned to pg_catalog, pg_temp and whose transactions are READ
-- COMMITTED; it is sent asynchronously and awaited with pg_sleep, so every wait can be
-- cancelled and is bounded. The statements are calls of id_gen.shard_* functions
-- (sql/shard.sql) with literal arguments (%L), and the few subscription commands that
-- cannot run in a function. (postgres_fdw carries rows, and one secret as a bound
-- parameter: sql/move.sql.)
--
-- Invariants:
--   * id_gen.shard_routes is the single source of truth; set_route and drop_route call
--     id_gen.sync_distributed_tables() in the same transaction, which re-derives every
--     coordinator partition and every shard's partitions from it.
--   * A route change never loses a row: each shard re-partitions in a transaction of its
--     own that first locks the table against every writer (id_gen.shard_apply_ranges).
--     Those transactions commit before the coordinator's; if anything fails, the shards
--     already changed are told their old ranges again (their rows come back the same
--     way), and the coordinator's transaction rolls back.
--   * id_gen.shard_placements records what each shard was last told; only changed
--     shards are written to.
--   * Nothing here deletes user rows: a route change that would leave rows on a shard
--     outside its genes fails, and the route table stays as it was.
--   * Names derived from a table (partitions, foreign tables, the view's table) fit
--     NAMEDATALEN byte-wise for any identifier, and stems are unique among the
--     distributed tables of a schema; a derived name held by another relation is an
--     error (42P07), never shared.

-- Id ranges of genes and owners ----------------------------------------------------------
CREATE OR REPLACE FUNCTION id_gen.gene_first_id(gene integer) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN id_gen.compose_id(gene, 0);
CREATE OR REPLACE FUNCTION id_gen.gene_last_id(gene integer) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN id_gen.compose_id(gene, 140737488355327);
COMMENT ON FUNCTION id_gen.gene_first_id(integer) IS 'Smallest 64-bit id of a gene: gene << 47.';
COMMENT ON FUNCTION id_gen.gene_last_id(integer) IS 'Largest 64-bit id of a gene: (gene << 47) + 2^47 - 1.';

CREATE OR REPLACE FUNCTION id_gen.owner_first_id(owner bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN id_gen.gene_first_id(id_gen.shard_gene(owner));
CREATE OR REPLACE FUNCTION id_gen.owner_first_id(owner text) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN id_gen.gene_first_id(id_gen.shard_gene(owner));
CREATE OR REPLACE FUNCTION id_gen.owner_first_id(owner uuid) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN id_gen.gene_first_id(id_gen.shard_gene(owner));
CREATE OR REPLACE FUNCTION id_gen.owner_last_id(owner bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN id_gen.gene_last_id(id_gen.shard_gene(owner));
CREATE OR REPLACE FUNCTION id_gen.owner_last_id(owner text) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN id_gen.gene_last_id(id_gen.shard_gene(owner));
CREATE OR REPLACE FUNCTION id_gen.owner_last_id(owner uuid) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN id_gen.gene_last_id(id_gen.shard_gene(owner));
COMMENT ON FUNCTION id_gen.owner_first_id(bigint) IS 'Smallest id an owner''s rows can have. Lookups by owner prune to one shard with: WHERE owner_col = $1 AND id BETWEEN id_gen.owner_first_id($1) AND id_gen.owner_last_id($1).';
COMMENT ON FUNCTION id_gen.owner_first_id(text) IS 'owner_first_id for a text owner.';
COMMENT ON FUNCTION id_gen.owner_first_id(uuid) IS 'owner_first_id for a uuid owner.';
COMMENT ON FUNCTION id_gen.owner_last_id(bigint) IS 'Largest id an owner''s rows can have; see owner_first_id.';
COMMENT ON FUNCTION id_gen.owner_last_id(text) IS 'owner_last_id for a text owner.';
COMMENT ON FUNCTION id_gen.owner_last_id(uuid) IS 'owner_last_id for a uuid owner.';

-- Names ------------------------------------------------------------------------------------
-- base || suffix, with base cut (at a character boundary) so that the whole fits max_bytes
-- (an identifier: 63).
CREATE OR REPLACE FUNCTION id_gen.fit_name(base text, suffix text, max_bytes integer DEFAULT 63) RETURNS name
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  b text := base;
BEGIN
  IF max_bytes NOT BETWEEN 1 AND 63 OR octet_length(suffix) > max_bytes THEN
    RAISE EXCEPTION 'id_gen: name suffix "%" does not fit % bytes', suffix, max_bytes USING ERRCODE = '42622';
  END IF;
  WHILE octet_length(b) + octet_length(suffix) > max_bytes LOOP
    b := left(b, -1);
  END LOOP;
  RETURN (b || suffix)::name;
END $$;
COMMENT ON FUNCTION id_gen.fit_name(text, text, integer) IS 'base || suffix, base cut at a character boundary so that the result fits max_bytes (default 63, an identifier).';

-- A stem for the partitions of a table: the name itself when it is at most 30 bytes and
-- free, else at most 32 bytes of it and a hash of the whole name (and a counter, should
-- that be taken too). At most 41 bytes, so <stem>_g<lo>_<hi>_fdw fits 63.
CREATE OR REPLACE FUNCTION id_gen.pick_stem(table_name name, taken name[]) RETURNS name
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  stem name := CASE WHEN octet_length(table_name) <= 30 THEN table_name END;
  i integer := 0;
BEGIN
  WHILE stem IS NULL OR stem = ANY (taken) LOOP
    stem := id_gen.fit_name(table_name, '_' || left(md5(table_name || CASE WHEN i = 0 THEN '' ELSE '#' || i END), 8), 41);
    i := i + 1;
  END LOOP;
  RETURN stem;
END $$;
COMMENT ON FUNCTION id_gen.pick_stem(name, name[]) IS 'The prefix of a distributed table''s partition names: the table name if it is at most 30 bytes and not in taken, else a cut of it and a hash of the whole name (at most 41 bytes).';

CREATE OR REPLACE FUNCTION id_gen.partition_name(stem name, lower_gene integer, upper_gene integer) RETURNS name
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN id_gen.fit_name(stem, '_g' || lower_gene || '_' || upper_gene);
COMMENT ON FUNCTION id_gen.partition_name(name, integer, integer) IS 'Name of the partition that holds genes lower_gene .. upper_gene of a distributed table: <stem>_g<lower>_<upper>, where the stem is id_gen.distributed_tables.coordinator_stem (coordinator) or shard_stem (shards).';

CREATE OR REPLACE FUNCTION id_gen.partition_bounds(lower_gene integer, upper_gene integer) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN format('FROM (%s) TO (%s)', id_gen.gene_first_id(lower_gene),
              CASE WHEN upper_gene = 65535 THEN 'MAXVALUE' ELSE id_gen.gene_first_id(upper_gene + 1)::text END);
COMMENT ON FUNCTION id_gen.partition_bounds(integer, integer) IS 'The FOR VALUES bounds of the partition of genes lower_gene .. upper_gene: FROM (lower_gene << 47) TO ((upper_gene + 1) << 47), MAXVALUE for the last gene (65536 << 47 overflows).';

-- Coordinator side ------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION id_gen.require_superuser(what text) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF NOT coalesce((SELECT rolsuper FROM pg_roles WHERE oid = current_user::regrole), false) THEN
    RAISE EXCEPTION 'id_gen: only superusers may %', what
      USING ERRCODE = '42501',
            HINT = 'It runs DDL on the coordinator and, through postgres_fdw user mappings, on every shard.';
  END IF;
END $$;
COMMENT ON FUNCTION id_gen.require_superuser(text) IS 'Raises 42501 unless the current user is a superuser.';

-- Routes and distributed tables stay put while a move is unfinished: a move relies on
-- the placements and partitions it prepared (sql/move.sql).
CREATE OR REPLACE FUNCTION id_gen.refuse_during_moves(what text) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  busy text;
BEGIN
  SELECT string_agg(format('%s (genes %s .. %s to %s, %s)', m.move_id, m.lower_gene, m.upper_gene, m.target_shard, m.phase), ', ')
    INTO busy
  FROM id_gen.shard_moves m WHERE m.phase NOT IN ('done', 'aborted', 'reverted');
  IF busy IS NOT NULL THEN
    RAISE EXCEPTION 'id_gen: cannot % while moves are unfinished: %', what, busy
      USING ERRCODE = '55006',
            HINT = 'Finish each with the same CALL id_gen.move_genes(...) or roll it back with CALL id_gen.abort_move(move_id).';
  END IF;
  PERFORM id_gen.refuse_during_splits(what);
END $$;
COMMENT ON FUNCTION id_gen.refuse_during_moves(text) IS 'Raises 55006 while a move of genes, or a split or merge of route ranges, is unfinished.';
REVOKE EXECUTE ON FUNCTION id_gen.refuse_during_moves(text) FROM PUBLIC;

-- Every route must lead to a postgres_fdw server and every gene must have a route before
-- a table can be distributed over them.
CREATE OR REPLACE FUNCTION id_gen.check_routes_for_distribution() RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  top integer;
  missing text;
BEGIN
  SELECT max(upper_gene) INTO top FROM id_gen.shard_routes;
  IF top IS NULL THEN
    RAISE EXCEPTION 'id_gen: the route table id_gen.shard_routes is empty'
      USING ERRCODE = '55000',
            HINT = 'Route every gene to a shard first, e.g. SELECT id_gen.set_route(65535, ''shard_1'').';
  ELSIF top <> 65535 THEN
    RAISE EXCEPTION 'id_gen: genes % .. 65535 have no route, so a distributed table would have no partition for them', top + 1
      USING ERRCODE = '55000',
            HINT = 'Distributed tables need a route whose upper bound is 65535: SELECT id_gen.set_route(65535, ''shard_x'').';
  END IF;
  SELECT string_agg(DISTINCT quote_literal(r.shard), ', ') INTO missing
  FROM id_gen.shard_routes r
  WHERE NOT EXISTS (SELECT FROM pg_foreign_server s
                    JOIN pg_foreign_data_wrapper w ON w.oid = s.srvfdw
                    WHERE s.srvname = r.shard AND w.fdwname = 'postgres_fdw');
  IF missing IS NOT NULL THEN
    RAISE EXCEPTION 'id_gen: shard % of the route table is not a postgres_fdw foreign server', missing
      USING ERRCODE = '42704',
            HINT = 'A shard name is a foreign server name: CREATE SERVER shard_1 FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host ''...'', dbname ''...''); CREATE USER MAPPING FOR CURRENT_USER SERVER shard_1;';
  END IF;
END $$;
COMMENT ON FUNCTION id_gen.check_routes_for_distribution() IS 'Raises unless every gene has a route and every routed shard is a postgres_fdw foreign server.';
REVOKE EXECUTE ON FUNCTION id_gen.check_routes_for_distribution() FROM PUBLIC;

-- Tells one shard which genes of a table it owns, through a foreign table over its
-- id_gen.shard_tables that lives only for this call.

-- Raises an error again with its SQLSTATE, detail and hint (each only if present).
CREATE OR REPLACE FUNCTION id_gen.reraise(msg text, code text, detail text, hint text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF msg IS NULL OR code IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "%" must not be NULL', CASE WHEN msg IS NULL THEN 'msg' ELSE 'code' END
      USING ERRCODE = '22004';
  END IF;
  detail := nullif(detail, '');
  hint := nullif(hint, '');
  IF detail IS NOT NULL AND hint IS NOT NULL THEN
    RAISE EXCEPTION USING MESSAGE = msg, ERRCODE = code, DETAIL = detail, HINT = hint;
  ELSIF detail IS NOT NULL THEN
    RAISE EXCEPTION USING MESSAGE = msg, ERRCODE = code, DETAIL = detail;
  ELSIF hint IS NOT NULL THEN
    RAISE EXCEPTION USING MESSAGE = msg, ERRCODE = code, HINT = hint;
  ELSE
    RAISE EXCEPTION USING MESSAGE = msg, ERRCODE = code;
  END IF;
END $$;
COMMENT ON FUNCTION id_gen.reraise(text, text, text, text) IS 'Raises msg with SQLSTATE code, and detail and hint where they are not empty (errors caught for clean-up are raised again with it).';
REVOKE EXECUTE ON FUNCTION id_gen.reraise(text, text, text, text) FROM PUBLIC;

-- The one remote path ------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION id_gen.dblink_schema() RETURNS name
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  s name;
BEGIN
  SELECT n.nspname INTO s FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
  WHERE e.extname = 'dblink';
  IF s IS NULL THEN
    RAISE EXCEPTION 'id_gen: distributed tables need the dblink extension on the coordinator'
      USING ERRCODE = '55000',
            HINT = 'CREATE EXTENSION dblink; (contrib, shipped with PostgreSQL). Shards change their tables in transactions of their own, which postgres_fdw cannot run.';
  END IF;
  RETURN s;
END $$;
COMMENT ON FUNCTION id_gen.dblink_schema() IS 'Schema of the dblink extension (55000 with a hint when it is not installed).';

-- Waits for the statement sent on the connection (cancellable, bounded by deadline: 57014
-- after it) and returns the first column of its first row, or the command tag.
CREATE OR REPLACE FUNCTION id_gen.dblink_wait(dbl name, conn text, shard text, deadline timestamptz,
                                             timeout_ms integer) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  busy integer;
  result text;
BEGIN
  LOOP
    EXECUTE format('SELECT %I.dblink_is_busy($1)', dbl) INTO busy USING conn;
    EXIT WHEN busy = 0;
    IF clock_timestamp() > deadline THEN
      RAISE EXCEPTION 'id_gen: shard "%" did not finish a command within % ms', shard, timeout_ms
        USING ERRCODE = '57014';
    END IF;
    PERFORM pg_sleep(0.002);
  END LOOP;
  EXECUTE format('SELECT r FROM %I.dblink_get_result($1) AS t(r text) LIMIT 1', dbl) INTO result USING conn;
  -- One more call returns the empty result that frees the connection.
  EXECUTE format('SELECT count(*) FROM %I.dblink_get_result($1) AS t(r text)', dbl) USING conn;
  RETURN result;
END $$;
COMMENT ON FUNCTION id_gen.dblink_wait(name, text, text, timestamptz, integer) IS 'Polls an open dblink connection for the result of the statement sent on it until deadline (57014 after it); returns the first column of the first row.';
REVOKE EXECUTE ON FUNCTION id_gen.dblink_wait(name, text, text, timestamptz, integer) FROM PUBLIC;

-- Sends one statement on the connection without waiting for it (08006 if it cannot).
CREATE OR REPLACE FUNCTION id_gen.dblink_send(dbl name, conn text, shard text, command text) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  sent integer;
BEGIN
  EXECUTE format('SELECT %I.dblink_send_query($1, $2)', dbl) INTO sent USING conn, command;
  IF sent IS DISTINCT FROM 1 THEN
    RAISE EXCEPTION 'id_gen: could not send a command to shard "%"', shard USING ERRCODE = '08006';
  END IF;
END $$;
COMMENT ON FUNCTION id_gen.dblink_send(name, text, text, text) IS 'Sends one statement on an open dblink connection without waiting for its result (08006 if it cannot be sent).';
REVOKE EXECUTE ON FUNCTION id_gen.dblink_send(name, text, text, text) FROM PUBLIC;

-- Sends one statement on the connection and waits for it (cancellable, bounded).
CREATE OR REPLACE FUNCTION id_gen.dblink_run(dbl name, conn text, shard text, command text, deadline timestamptz,
                                            timeout_ms integer) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  PERFORM id_gen.dblink_send(dbl, conn, shard, command);
  RETURN id_gen.dblink_wait(dbl, conn, shard, deadline, timeout_ms);
END $$;
COMMENT ON FUNCTION id_gen.dblink_run(name, text, text, text, timestamptz, integer) IS 'Sends one statement on an open dblink connection and polls for its result until deadline (57014 after it); returns the first column of the first row.';
REVOKE EXECUTE ON FUNCTION id_gen.dblink_run(name, text, text, text, timestamptz, integer) FROM PUBLIC;

-- The libpq connection string of id_gen's own connections to a shard: bounds for the
-- connect and for a peer that stops answering (connect_timeout, TCP keepalives,
-- tcp_user_timeout) first, then the libpq options of the shard's foreign server and of
-- the current user's mapping, which override them (libpq keeps the last of a keyword).
-- Passed to dblink_connect as a parameter: it is never part of a statement's text.
CREATE OR REPLACE FUNCTION id_gen.shard_link_conninfo(shard text, connect_seconds integer) RETURNS text
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  SELECT 'connect_timeout=' || connect_seconds || ' keepalives=1 keepalives_idle=5 keepalives_interval=2 keepalives_count=3 tcp_user_timeout=10000 '
         || coalesce(string_agg(format('%s=''%s''', o.key, replace(replace(o.value, '\', '\\'), '''', '\''')), ' ' ORDER BY o.ord), '')
  FROM (SELECT split_part(opts.opt, '=', 1) AS key, substr(opts.opt, strpos(opts.opt, '=') + 1) AS value, opts.ord
        FROM (SELECT x.opt, x.ord FROM pg_foreign_server s, unnest(s.srvoptions) WITH ORDINALITY AS x(opt, ord)
              WHERE s.srvname = shard_link_conninfo.shard
              UNION ALL
              SELECT x.opt, 1000 + x.ord FROM pg_user_mappings um, unnest(um.umoptions) WITH ORDINALITY AS x(opt, ord)
              WHERE um.srvname = shard_link_conninfo.shard
                AND um.umuser = (SELECT coalesce((SELECT u.umuser FROM pg_user_mappings u
                                                  WHERE u.srvname = shard_link_conninfo.shard AND u.usename = current_user), 0))
             ) opts) o
  WHERE o.key IN ('host', 'hostaddr', 'port', 'dbname', 'user', 'password', 'passfile', 'service', 'sslmode', 'sslrootcert',
                  'sslcert', 'sslkey', 'sslcrl', 'sslcrldir', 'sslsni', 'sslpassword', 'ssl_min_protocol_version',
                  'ssl_max_protocol_version', 'gssencmode', 'krbsrvname', 'gsslib', 'requirepeer', 'require_auth',
                  'channel_binding', 'connect_timeout', 'options', 'target_session_attrs', 'load_balance_hosts',
                  'keepalives', 'keepalives_idle', 'keepalives_interval', 'keepalives_count', 'tcp_user_timeout');
END;
COMMENT ON FUNCTION id_gen.shard_link_conninfo(text, integer) IS 'The libpq connection string of id_gen''s dblink connections to a shard: connect_timeout connect_seconds (id_gen.shard_send: the call''s bound, 2 to 5 s), TCP keepalives and tcp_user_timeout 10 s (so that a shard that stops answering is noticed), then the options of its foreign server and the current user''s mapping, which take precedence. Holds the password: superuser only, never shown.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_link_conninfo(text, integer) FROM PUBLIC;

-- The one remote path, in two halves so that one statement can go to several shards at
-- once (id_gen.push_route_state): shard_send opens the connection if needed and sends,
-- shard_receive waits for the result; id_gen.shard_exec is both. A new connection first
-- pins search_path and READ COMMITTED for the whole session, and the shard's own bounds
-- for an orphaned statement (statement_timeout 65 s, or timeout_ms + 5 s for a longer call;
-- client_connection_check_interval 2 s). A remote error keeps its SQLSTATE; an
-- unreachable shard is 08006. Every wait is bounded: the connect by connect_timeout (5 s
-- unless the server says otherwise), the statement by timeout_ms. On any failure the
-- connection is closed without a cancel request (id_gen.shard_link_failed): libpq's
-- PQcancel opens a new connection and waits for the shard without a bound, which a shard
-- that accepts connections but does not answer (a paused VM, a host swapping to death)
-- turns into a hang; the shard ends the orphan by itself.
CREATE OR REPLACE FUNCTION id_gen.shard_link_failed(shard text, msg text, code text, detail text, hint text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF shard IS NULL OR code IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "%" must not be NULL', CASE WHEN shard IS NULL THEN 'shard' ELSE 'code' END
      USING ERRCODE = '22004';
  ELSIF code !~ '^[0-9A-Z]{5}$' THEN
    RAISE EXCEPTION 'id_gen: "%" is not a SQLSTATE', code USING ERRCODE = '22023';
  END IF;
  -- A command still running, a half-read result, a broken link or a cancel: drop the
  -- connection (no cancel request, see above), so that the next call starts clean.
  BEGIN
    EXECUTE format('SELECT %I.dblink_disconnect($1)', id_gen.dblink_schema()) USING 'id_gen_' || md5(shard);
  EXCEPTION WHEN OTHERS THEN NULL;
  END;
  IF code LIKE '08%' OR (code = 'XX000' AND msg ~* 'connection|server closed') THEN
    -- (Never the command text: it can name a subscription's connection.)
    RAISE EXCEPTION 'id_gen: shard "%" is unreachable: %', shard, msg
      USING ERRCODE = '08006', HINT = 'Nothing was changed on it by this command; retry when it answers.';
  END IF;
  IF code = '57014' AND msg LIKE 'id_gen: shard % did not finish a command within %' THEN
    RAISE EXCEPTION '%', msg
      USING ERRCODE = '57014',
            DETAIL = 'The connection was closed; the shard ends the statement by itself (statement_timeout, or when it notices the closed connection). What the statement did there is committed whole or not at all.',
            HINT = 'The shard may be hung or overloaded: call the operation again when it answers.';
  END IF;
  PERFORM id_gen.reraise(msg, code, detail, hint);
END $$;
COMMENT ON FUNCTION id_gen.shard_link_failed(text, text, text, text, text) IS 'The failure path of a remote call: closes the shard''s connection without a cancel request and raises the error (08006 for an unreachable shard, 57014 with a hint for a statement past its bound, else the remote error as it was).';
REVOKE EXECUTE ON FUNCTION id_gen.shard_link_failed(text, text, text, text, text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.shard_send(shard text, command text, timeout_ms integer DEFAULT 60000) RETURNS void
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  dbl name := id_gen.dblink_schema();
  conn text := 'id_gen_' || md5(shard);
  connected boolean;
  logged text;
  connect_seconds integer;
  deadline timestamptz := clock_timestamp() + timeout_ms * interval '1 ms';
  msg text;
  code text;
  detail text;
  hint text;
BEGIN
  EXECUTE format('SELECT $1 = ANY (coalesce(%I.dblink_get_connections(), ''{}''))', dbl) INTO connected USING conn;
  BEGIN
    IF NOT connected THEN
      IF NOT EXISTS (SELECT FROM pg_foreign_server s WHERE s.srvname = shard) THEN
        RAISE EXCEPTION 'id_gen: shard "%" is not a foreign server here', shard USING ERRCODE = '42704';
      END IF;
      -- The connection string (with the password) is a parameter: auto_explain (16+, when
      -- loaded), which logs a nested statement's parameters, is told not to for this one.
      logged := current_setting('auto_explain.log_parameter_max_length', true);
      IF logged IS NOT NULL THEN
        PERFORM set_config('auto_explain.log_parameter_max_length', '0', true);
      END IF;
      -- The connect's bound: libpq's connect_timeout where dblink connects blocking (15), a
      -- timer that interrupts the wait where it connects on the latch (16+, src/connect_bound.rs).
      connect_seconds := greatest(2, least(5, ceil(timeout_ms / 1000.0)::integer));
      PERFORM id_gen.arm_connect_bound(connect_seconds * 1000 + 500);
      BEGIN
        EXECUTE format('SELECT %I.dblink_connect($1, $2)', dbl) USING conn, id_gen.shard_link_conninfo(shard, connect_seconds);
      EXCEPTION WHEN OTHERS OR query_canceled THEN
        IF id_gen.disarm_connect_bound() AND SQLSTATE = '57014' THEN
          RAISE EXCEPTION 'id_gen: could not connect to shard "%" within % s', shard, connect_seconds USING ERRCODE = '08001';
        END IF;
        RAISE;
      END;
      PERFORM id_gen.disarm_connect_bound();
      IF logged IS NOT NULL THEN
        PERFORM set_config('auto_explain.log_parameter_max_length', logged, true);
      END IF;
      PERFORM id_gen.dblink_run(dbl, conn, shard,
        'SELECT pg_catalog.concat(pg_catalog.set_config(''search_path'', ''pg_catalog, pg_temp'', false), '
        'pg_catalog.set_config(''default_transaction_isolation'', ''read committed'', false), '
        'pg_catalog.set_config(''statement_timeout'', ''65s'', false), '
        'pg_catalog.set_config(''client_connection_check_interval'', ''2s'', false), '
        'pg_catalog.set_config(''application_name'', ''id_gen coordinator'', false))', deadline, timeout_ms);
    END IF;
    IF timeout_ms > 60000 THEN
      -- The shard's bound follows a longer one for this statement (back to 65 s after it).
      PERFORM id_gen.dblink_run(dbl, conn, shard,
        format('SELECT pg_catalog.set_config(''statement_timeout'', %L, false)', (timeout_ms + 5000) || 'ms'), deadline, timeout_ms);
    END IF;
    PERFORM id_gen.dblink_send(dbl, conn, shard, command);
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT, code = RETURNED_SQLSTATE, detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
    PERFORM id_gen.shard_link_failed(shard, msg, code, detail, hint);
  END;
END $$;
COMMENT ON FUNCTION id_gen.shard_send(text, text, integer) IS 'First half of id_gen.shard_exec: opens the shard''s connection if needed (bounded by connect_timeout and timeout_ms) and sends one statement without waiting for it; id_gen.shard_receive takes the result.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_send(text, text, integer) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.shard_receive(shard text, timeout_ms integer, started timestamptz) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  dbl name := id_gen.dblink_schema();
  conn text := 'id_gen_' || md5(shard);
  result text;
  msg text;
  code text;
  detail text;
  hint text;
BEGIN
  BEGIN
    result := id_gen.dblink_wait(dbl, conn, shard, started + timeout_ms * interval '1 ms', timeout_ms);
    IF timeout_ms > 60000 THEN
      PERFORM id_gen.dblink_run(dbl, conn, shard, 'SELECT pg_catalog.set_config(''statement_timeout'', ''65s'', false)',
                                clock_timestamp() + interval '5 s', 5000);
    END IF;
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT, code = RETURNED_SQLSTATE, detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
    PERFORM id_gen.shard_link_failed(shard, msg, code, detail, hint);
  END;
  RETURN result;
END $$;
COMMENT ON FUNCTION id_gen.shard_receive(text, integer, timestamptz) IS 'Second half of id_gen.shard_exec: waits for the statement id_gen.shard_send sent (until started + timeout_ms, then 57014 and the connection closed) and returns the first column of its first row or the command tag.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_receive(text, integer, timestamptz) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.shard_exec(shard text, command text, timeout_ms integer DEFAULT 60000) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  started timestamptz := clock_timestamp();
BEGIN
  PERFORM id_gen.shard_send(shard, command, timeout_ms);
  RETURN id_gen.shard_receive(shard, timeout_ms, started);
END $$;
COMMENT ON FUNCTION id_gen.shard_exec(text, text, integer) IS 'The one path for statements id_gen runs on shards: one statement over dblink (the shard''s foreign server and the caller''s user mapping, with connect_timeout, TCP keepalives and tcp_user_timeout), search_path pinned to pg_catalog, pg_temp, READ COMMITTED, asynchronous and cancellable, bounded by timeout_ms (after a failure the connection is closed, never left waiting for a cancel request); returns the first column of the first row or the command tag.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_exec(text, text, integer) FROM PUBLIC;

-- Calls id_gen.<fn>(args...) on a shard: each argument is a literal (quote_nullable), so
-- no identifier or value is ever pasted into code.
CREATE OR REPLACE FUNCTION id_gen.shard_call(shard text, fn text, args text[], timeout_ms integer DEFAULT 60000) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF fn !~ '^shard_[a-z_]+$' THEN
    RAISE EXCEPTION 'id_gen: % is not a shard function', fn USING ERRCODE = '42883';
  END IF;
  RETURN id_gen.shard_exec(shard, id_gen.shard_call_text(fn, args), timeout_ms);
END $$;
COMMENT ON FUNCTION id_gen.shard_call(text, text, text[], integer) IS 'Runs SELECT id_gen.<fn>(<literal args>) on a shard through id_gen.shard_exec.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_call(text, text, text[], integer) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.shard_call_text(fn text, args text[]) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN format('SELECT id_gen.%I(%s)', fn,
              coalesce((SELECT string_agg(quote_nullable(a), ', ' ORDER BY i) FROM unnest(args) WITH ORDINALITY AS x(a, i)), ''));
COMMENT ON FUNCTION id_gen.shard_call_text(text, text[]) IS 'The statement shard_call sends (what dry_run prints).';

-- Tells one shard which genes of a table it owns (id_gen.shard_apply_ranges there, in a
-- transaction of its own) and records it in id_gen.shard_placements.
CREATE OR REPLACE FUNCTION id_gen.push_shard_table(shard text, schema_name name, table_name name,
                                                   gene_ranges int4range[]) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  d id_gen.distributed_tables;
  msg text;
  code text;
  result text;
BEGIN
  SELECT * INTO d FROM id_gen.distributed_tables t
  WHERE (t.schema_name, t.table_name) = (push_shard_table.schema_name, push_shard_table.table_name);
  BEGIN
    -- shard_apply_ranges locks the table and then each partition; a writer that holds a
    -- partition (the coordinator writes to partitions by name) and then needs the table
    -- (its partition constraint is recomputed after an ATTACH or DETACH) makes a deadlock.
    -- shard_apply_ranges detects it first (deadlock_timeout 100 ms there), so the writer
    -- goes on and this change, rolled back on the shard, is tried again.
    FOR attempt IN 1 .. 5 LOOP
      BEGIN
        result := id_gen.shard_call(shard, 'shard_apply_ranges',
          ARRAY[d.schema_name::text, d.table_name::text, d.id_column::text, d.shard_stem::text, gene_ranges::text, d.shard_definition], 120000);
        EXIT;
      EXCEPTION WHEN deadlock_detected THEN
        IF attempt = 5 THEN
          RAISE;
        END IF;
        PERFORM pg_sleep(0.05 * attempt);
      END;
    END LOOP;
  EXCEPTION
    WHEN check_violation OR SQLSTATE 'IG001' THEN  -- 23514 before the tombstone existed
      GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT;
      RAISE EXCEPTION 'id_gen: shard "%" holds rows of %.% outside the genes it would own (%)',
                      shard, quote_ident(d.schema_name), quote_ident(d.table_name), gene_ranges
        USING ERRCODE = '55000', DETAIL = 'On the shard: ' || msg,
              HINT = 'The route table is unchanged. Move those rows first (id_gen.move_genes), or delete them on the shard.';
    WHEN undefined_table OR undefined_function THEN
      GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT;
      RAISE EXCEPTION 'id_gen: shard "%" has no id_gen 0.4.0 or later', shard
        USING ERRCODE = '55000', DETAIL = 'On the shard: ' || msg,
              HINT = 'Run CREATE EXTENSION id_gen (or ALTER EXTENSION id_gen UPDATE) on the shard; it keeps the shard''s partitions.';
    WHEN lock_not_available THEN
      GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT;
      RAISE EXCEPTION 'id_gen: shard "%" could not lock %.% within 10 s', shard, quote_ident(d.schema_name), quote_ident(d.table_name)
        USING ERRCODE = '55P03', DETAIL = 'On the shard: ' || msg,
              HINT = 'A long transaction writes or reads the table there. Nothing changed; retry when it is done.';
  END;
  INSERT INTO id_gen.shard_placements AS p (schema_name, table_name, shard, gene_ranges)
  VALUES (d.schema_name, d.table_name, push_shard_table.shard, push_shard_table.gene_ranges)
  ON CONFLICT ON CONSTRAINT shard_placements_pkey DO UPDATE SET gene_ranges = excluded.gene_ranges, updated_at = now();
  RETURN result;
END $$;
COMMENT ON FUNCTION id_gen.push_shard_table(text, name, name, int4range[]) IS 'Makes one shard hold exactly the given route ranges of a distributed table (id_gen.shard_apply_ranges on the shard, committed there) and records them in id_gen.shard_placements.';
REVOKE EXECUTE ON FUNCTION id_gen.push_shard_table(text, name, name, int4range[]) FROM PUBLIC;

-- Makes the range partition `part` hold exactly one foreign table, "<partition>_fdw", on
-- `shard`, pointing at the shard's partition of the same genes. A foreign table on
-- another server is swapped: DETACH, DROP, CREATE under the lock of this range
-- partition alone (other ranges are not locked).
CREATE OR REPLACE FUNCTION id_gen.point_partition(d id_gen.distributed_tables, part regclass,
                                                  lower_gene integer, upper_gene integer, shard text) RETURNS boolean
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  child record;
  fdw_name name := id_gen.fit_name(id_gen.partition_name(d.coordinator_stem, lower_gene, upper_gene), '_fdw');
  shard_part name := id_gen.partition_name(d.shard_stem, lower_gene, upper_gene);
  kept boolean := false;
BEGIN
  FOR child IN SELECT c.oid::regclass AS rel, c.relname, s.srvname, ft.ftoptions
               FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
               JOIN pg_foreign_table ft ON ft.ftrelid = c.oid
               JOIN pg_foreign_server s ON s.oid = ft.ftserver
               WHERE i.inhparent = part LOOP
    IF child.srvname = shard AND child.relname = fdw_name
       AND format('table_name=%s', shard_part) = ANY (child.ftoptions) THEN
      kept := true;
    ELSE
      EXECUTE format('ALTER TABLE %s DETACH PARTITION %s', part, child.rel);
      EXECUTE format('DROP FOREIGN TABLE %s', child.rel);
    END IF;
  END LOOP;
  IF kept THEN
    RETURN false;
  END IF;
  PERFORM id_gen.add_foreign_partition(d, part, lower_gene, upper_gene, shard);
  RETURN true;
END $$;
COMMENT ON FUNCTION id_gen.point_partition(id_gen.distributed_tables, regclass, integer, integer, text) IS 'Points the range partition of a distributed table at a shard: one foreign table "<partition>_fdw" over the shard''s partition of the same genes, with the partition''s owner and grants. Returns whether it changed anything.';
REVOKE EXECUTE ON FUNCTION id_gen.point_partition(id_gen.distributed_tables, regclass, integer, integer, text) FROM PUBLIC;

-- Adds to the range partition `part` the foreign table "<stem>_g<lower>_<upper>_fdw" of
-- genes lower_gene .. upper_gene over the shard's partition of those genes, with part's
-- owner and grants. Usually the genes are part's own; inside a split's fence they are
-- one of the new ranges within it (id_gen.nest_split_here).
CREATE OR REPLACE FUNCTION id_gen.add_foreign_partition(d id_gen.distributed_tables, part regclass,
                                                        lower_gene integer, upper_gene integer, shard text) RETURNS regclass
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fdw_name name := id_gen.fit_name(id_gen.partition_name(d.coordinator_stem, lower_gene, upper_gene), '_fdw');
  shard_part name := id_gen.partition_name(d.shard_stem, lower_gene, upper_gene);
  other regclass := to_regclass(format('%I.%I', d.schema_name, fdw_name));
BEGIN
  IF other IS NOT NULL THEN
    RAISE EXCEPTION 'id_gen: relation % already exists, and it is not a partition of %', other, part
      USING ERRCODE = '42P07', HINT = 'id_gen names the foreign tables of distributed tables <stem>_g<lower>_<upper>_fdw; rename that relation.';
  END IF;
  EXECUTE format('CREATE FOREIGN TABLE %I.%I PARTITION OF %s FOR VALUES %s '
                 'SERVER %I OPTIONS (schema_name %L, table_name %L)',
                 d.schema_name, fdw_name, part, id_gen.partition_bounds(lower_gene, upper_gene),
                 shard, d.schema_name, shard_part);
  PERFORM id_gen.inherit_parent_settings(part, format('%I.%I', d.schema_name, fdw_name)::regclass,
    format('id_gen: genes %s .. %s on shard %s (its table %I.%I)', lower_gene, upper_gene, shard, d.schema_name, shard_part));
  RETURN format('%I.%I', d.schema_name, fdw_name)::regclass;
END $$;
COMMENT ON FUNCTION id_gen.add_foreign_partition(id_gen.distributed_tables, regclass, integer, integer, text) IS 'Adds to a coordinator range partition the foreign table of genes lower_gene .. upper_gene on a shard (its partition of those genes there), with the range partition''s owner and grants.';
REVOKE EXECUTE ON FUNCTION id_gen.add_foreign_partition(id_gen.distributed_tables, regclass, integer, integer, text) FROM PUBLIC;

-- The coordinator's range partition of genes lo .. hi (created when missing).
CREATE OR REPLACE FUNCTION id_gen.range_partition(d id_gen.distributed_tables, lower_gene integer, upper_gene integer) RETURNS regclass
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  parts regclass := format('%I.%I', d.schema_name, d.partitioned_name)::regclass;
  bound text := id_gen.partition_bound_text(lower_gene, upper_gene);
  pname name := id_gen.partition_name(d.coordinator_stem, lower_gene, upper_gene);
  part regclass;
BEGIN
  SELECT c.oid::regclass INTO part FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
  WHERE i.inhparent = parts AND pg_get_expr(c.relpartbound, c.oid) = bound;
  IF part IS NOT NULL THEN
    RETURN part;
  END IF;
  IF to_regclass(format('%I.%I', d.schema_name, pname)) IS NOT NULL THEN
    RAISE EXCEPTION 'id_gen: relation %.% already exists, and it is not a partition of %', quote_ident(d.schema_name), quote_ident(pname), parts
      USING ERRCODE = '42P07', HINT = 'id_gen names the partitions of distributed tables <stem>_g<lower>_<upper>; rename that relation.';
  END IF;
  EXECUTE format('CREATE TABLE %I.%I PARTITION OF %s FOR VALUES %s PARTITION BY RANGE (%I)',
                 d.schema_name, pname, parts, id_gen.partition_bounds(lower_gene, upper_gene), d.id_column);
  part := format('%I.%I', d.schema_name, pname)::regclass;
  PERFORM id_gen.inherit_parent_settings(parts, part,
    format('id_gen: genes %s .. %s of %s (kept in step with id_gen.shard_routes)', lower_gene, upper_gene, parts));
  RETURN part;
END $$;
COMMENT ON FUNCTION id_gen.range_partition(id_gen.distributed_tables, integer, integer) IS 'The coordinator''s range partition of a distributed table for genes lower_gene .. upper_gene, found by its bound; created (with the table''s owner and grants) when missing.';
REVOKE EXECUTE ON FUNCTION id_gen.range_partition(id_gen.distributed_tables, integer, integer) FROM PUBLIC;

-- Gives shards that already committed new ranges of a table their old ranges back
-- (pushed: [{"shard": ..., "old": ...}]); their rows come back under the same lock.
-- Returns the errors, NULL when every shard answered.
CREATE OR REPLACE FUNCTION id_gen.restore_shard_ranges(schema_name name, table_name name, pushed jsonb) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  d id_gen.distributed_tables;
  p jsonb;
  errors text;
BEGIN
  SELECT * INTO d FROM id_gen.distributed_tables t
  WHERE (t.schema_name, t.table_name) = (restore_shard_ranges.schema_name, restore_shard_ranges.table_name);
  FOR p IN SELECT x FROM jsonb_array_elements(coalesce(pushed, '[]')) x LOOP
    BEGIN
      PERFORM id_gen.shard_call(p->>'shard', 'shard_apply_ranges',
        ARRAY[d.schema_name::text, d.table_name::text, d.id_column::text, d.shard_stem::text, p->>'old', d.shard_definition], 120000);
    EXCEPTION WHEN OTHERS THEN
      errors := concat_ws('; ', errors, (p->>'shard') || ': ' || SQLERRM);
    END;
  END LOOP;
  RETURN errors;
END $$;
COMMENT ON FUNCTION id_gen.restore_shard_ranges(name, name, jsonb) IS 'Undo of a failed route change: tells each shard that already committed new ranges of a table its old ones again; returns the errors.';
REVOKE EXECUTE ON FUNCTION id_gen.restore_shard_ranges(name, name, jsonb) FROM PUBLIC;

-- Re-derives the partitions of one distributed table, on its shards and here, from the
-- route table. Idempotent: partitions and shards already in step are left alone. Returns
-- the shards it changed with their old ranges (for the caller's undo); on an error it
-- undoes its own shard changes before raising.
CREATE OR REPLACE FUNCTION id_gen.sync_distributed_table(schema_name name, table_name name, copy_rows boolean DEFAULT false) RETURNS jsonb
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  d id_gen.distributed_tables;
  parts regclass;
  cur record;
  ft record;
  r record;
  pushed jsonb := '[]';
  msg text;
  code text;
  detail text;
  hint text;
  undo_errors text;
BEGIN
  SELECT * INTO d FROM id_gen.distributed_tables t
  WHERE (t.schema_name, t.table_name) = (sync_distributed_table.schema_name, sync_distributed_table.table_name);
  IF NOT FOUND THEN
    RAISE EXCEPTION 'id_gen: %.% is not a distributed table', quote_ident(schema_name), quote_ident(table_name)
      USING ERRCODE = '42704', HINT = 'Distributed tables are listed in id_gen.distributed_tables.';
  END IF;
  parts := to_regclass(format('%I.%I', d.schema_name, d.partitioned_name));
  IF parts IS NULL THEN
    RAISE EXCEPTION 'id_gen: the partitioned table %.% of distributed table %.% is missing', quote_ident(d.schema_name),
                    quote_ident(d.partitioned_name), quote_ident(d.schema_name), quote_ident(d.table_name)
      USING ERRCODE = '42P01',
            HINT = 'If it was dropped on purpose: DELETE FROM id_gen.distributed_tables WHERE schema_name = ... AND table_name = ...';
  END IF;
  -- Coordinator traffic for the table waits from here to COMMIT (so no coordinator write
  -- is in flight while the shards re-partition).
  EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', parts);
  PERFORM id_gen.quiet_ddl();

  -- A range partition whose bounds are no longer a route range is split or merged; with
  -- rows, this transaction would copy them under the lock above and the shards' table
  -- locks. Only on request (set_route(..., copy_rows => true)).
  IF NOT coalesce(copy_rows, false) THEN
    FOR cur IN
      SELECT c.oid::regclass AS part, pg_get_expr(c.relpartbound, c.oid) AS bound
      FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
      WHERE i.inhparent = parts
    LOOP
      CONTINUE WHEN EXISTS (SELECT FROM id_gen.route_ranges rr
                            WHERE id_gen.partition_bound_text(rr.lower_gene, rr.upper_gene) = cur.bound);
      -- Asked on the shards in transactions of their own: a postgres_fdw read from here
      -- would hold a lock on the shard's partition until this transaction ends, and the
      -- shard's re-partition below would wait for it.
      msg := 'f';
      FOR ft IN SELECT s.srvname AS shard,
                       (SELECT substr(o, 13) FROM unnest(f.ftoptions) o WHERE o LIKE 'schema_name=%') AS sch,
                       (SELECT substr(o, 12) FROM unnest(f.ftoptions) o WHERE o LIKE 'table_name=%') AS tab
                FROM pg_inherits i2 JOIN pg_foreign_table f ON f.ftrelid = i2.inhrelid
                JOIN pg_foreign_server s ON s.oid = f.ftserver
                WHERE i2.inhparent = cur.part LOOP
        IF id_gen.shard_exec(ft.shard, format('SELECT EXISTS (SELECT FROM %I.%I)', ft.sch, ft.tab), 10000) = 't' THEN
          msg := 't';
        END IF;
      END LOOP;
      IF NOT EXISTS (SELECT FROM pg_foreign_table f JOIN pg_inherits i2 ON i2.inhrelid = f.ftrelid WHERE i2.inhparent = cur.part) THEN
        EXECUTE format('SELECT EXISTS (SELECT FROM %s)', cur.part) INTO msg;
      END IF;
      IF msg::boolean THEN
        RAISE EXCEPTION 'id_gen: this route change splits or merges % of %.%, which holds rows', cur.part,
                        quote_ident(d.schema_name), quote_ident(d.table_name)
          USING ERRCODE = '55000',
                DETAIL = 'It would copy them while the whole table is locked, on the coordinator and on the shard.',
                HINT = 'Use CALL id_gen.split_route(gene) or CALL id_gen.merge_routes(upper_gene), which copy online; or pass copy_rows => true to set_route/drop_route to accept the lock.';
      END IF;
    END LOOP;
  END IF;

  BEGIN
    -- Every shard that owns genes now, or did before, hears its new set of ranges; each
    -- commits on its own, so it is remembered for the way back.
    FOR r IN
      WITH wanted AS (
        SELECT rr.shard, array_agg(int4range(rr.lower_gene, rr.upper_gene, '[]') ORDER BY rr.lower_gene) AS genes
        FROM id_gen.route_ranges rr GROUP BY rr.shard
      ), known AS (
        SELECT p.shard, p.gene_ranges FROM id_gen.shard_placements p
        WHERE (p.schema_name, p.table_name) = (d.schema_name, d.table_name)
      )
      SELECT coalesce(w.shard, k.shard) AS shard,
             coalesce(w.genes, '{}'::int4range[]) AS genes,
             coalesce(k.gene_ranges, '{}'::int4range[]) AS old_genes
      FROM wanted w FULL JOIN known k ON k.shard = w.shard
      WHERE k.gene_ranges IS DISTINCT FROM coalesce(w.genes, '{}'::int4range[])
      ORDER BY 1
    LOOP
      pushed := pushed || jsonb_build_object('shard', r.shard, 'old', r.old_genes::text);
      PERFORM id_gen.push_shard_table(r.shard, d.schema_name, d.table_name, r.genes);
    END LOOP;

    -- Range partitions whose bounds are no longer a route range go first, so that the new
    -- ones never overlap them. Each holds only a foreign table (dropped with it).
    FOR cur IN
      SELECT c.oid::regclass AS part, c.relkind, pg_get_expr(c.relpartbound, c.oid) AS bound
      FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
      WHERE i.inhparent = parts
    LOOP
      CONTINUE WHEN EXISTS (SELECT FROM id_gen.route_ranges rr
                            WHERE id_gen.partition_bound_text(rr.lower_gene, rr.upper_gene) = cur.bound);
      IF cur.relkind <> 'p' OR EXISTS (SELECT FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                                       WHERE i.inhparent = cur.part AND c.relkind <> 'f') THEN
        RAISE EXCEPTION 'id_gen: partition % of % holds local data, and id_gen does not drop it', cur.part, parts
          USING ERRCODE = '55000', HINT = 'Detach it (ALTER TABLE ... DETACH PARTITION) and move its rows to the shards.';
      END IF;
      EXECUTE format('ALTER TABLE %s DETACH PARTITION %s', parts, cur.part);
      EXECUTE format('DROP TABLE %s', cur.part);
    END LOOP;
    FOR r IN SELECT * FROM id_gen.route_ranges ORDER BY lower_gene LOOP
      PERFORM id_gen.point_partition(d, id_gen.range_partition(d, r.lower_gene, r.upper_gene),
                                     r.lower_gene, r.upper_gene, r.shard);
    END LOOP;
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT, code = RETURNED_SQLSTATE, detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
    undo_errors := id_gen.restore_shard_ranges(d.schema_name, d.table_name, pushed);
    PERFORM id_gen.reraise(msg, code,
      concat_ws(E'\n', nullif(detail, ''),
                CASE WHEN pushed <> '[]' THEN 'Shards that had changed were given their old ranges back' || coalesce(', except: ' || undo_errors || '. Run SELECT id_gen.sync_distributed_tables() when they answer', '') || '.' END),
      hint);
  END;
  RETURN jsonb_build_object('schema_name', d.schema_name, 'table_name', d.table_name, 'pushed', pushed);
END $$;
COMMENT ON FUNCTION id_gen.sync_distributed_table(name, name, boolean) IS 'Re-derives the partitions of one distributed table on its shards (each in a transaction of its own that locks the table first; undone on failure) and its foreign partitions here, from id_gen.shard_routes; a range partition that splits or merges with rows is refused unless copy_rows. Returns what it changed on the shards.';
REVOKE EXECUTE ON FUNCTION id_gen.sync_distributed_table(name, name, boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.sync_distributed_tables(copy_rows boolean DEFAULT false) RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  d record;
  n integer := 0;
  done jsonb := '[]';
  t jsonb;
  msg text;
  code text;
  detail text;
  hint text;
  undo_errors text;
BEGIN
  IF NOT EXISTS (SELECT FROM id_gen.distributed_tables) THEN
    RETURN 0;
  END IF;
  PERFORM id_gen.require_superuser('change the routes of distributed tables');
  PERFORM id_gen.refuse_during_moves('change the routes of distributed tables');
  PERFORM id_gen.check_routes_for_distribution();
  BEGIN
    FOR d IN SELECT t.schema_name, t.table_name FROM id_gen.distributed_tables t ORDER BY 1, 2 LOOP
      done := done || id_gen.sync_distributed_table(d.schema_name, d.table_name, coalesce(copy_rows, false));
      n := n + 1;
    END LOOP;
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    -- Tables synced before the failing one committed on their shards too: undo them.
    GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT, code = RETURNED_SQLSTATE, detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
    FOR t IN SELECT x FROM jsonb_array_elements(done) x LOOP
      undo_errors := concat_ws('; ', undo_errors, id_gen.restore_shard_ranges(t->>'schema_name', t->>'table_name', t->'pushed'));
    END LOOP;
    PERFORM id_gen.reraise(msg, code,
      concat_ws(E'\n', nullif(detail, ''),
                CASE WHEN undo_errors IS NOT NULL THEN 'Not every shard could be given its old ranges back: ' || undo_errors END),
      hint);
  END;
  RETURN n;
END $$;
COMMENT ON FUNCTION id_gen.sync_distributed_tables(boolean) IS 'Brings the partitions of every distributed table, on the coordinator and on the shards, in step with id_gen.shard_routes (set_route and drop_route call it; run it by hand after a failure). A range partition that splits or merges with rows is refused unless copy_rows (then copied under ACCESS EXCLUSIVE). Returns the number of tables.';
REVOKE EXECUTE ON FUNCTION id_gen.sync_distributed_tables(boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.insert_distributed_row() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  new_id bigint;
  owner_gene integer;
BEGIN
  -- One statement computes the id (only when it is NULL: coalesce is lazy) and the
  -- owner's gene; an id from another gene than its owner's would be found by id but
  -- missed by owner lookups, so it is refused.
  EXECUTE format('SELECT coalesce(($1).%1$I, id_gen.gene_order_id($2, ($1).%2$I)), id_gen.shard_gene(($1).%2$I)',
                 TG_ARGV[1], TG_ARGV[2])
    INTO new_id, owner_gene USING NEW, TG_ARGV[3];
  IF new_id IS NULL THEN
    RAISE EXCEPTION 'id_gen: a row of % needs an id or an owner', TG_TABLE_NAME
      USING ERRCODE = '23502', COLUMN = TG_ARGV[2],
            HINT = format('Give %I, and %I is computed from it with sequence %L.', TG_ARGV[2], TG_ARGV[1], TG_ARGV[3]);
  END IF;
  IF owner_gene IS NOT NULL AND new_id >> 47 <> owner_gene THEN
    RAISE EXCEPTION 'id_gen: id % has gene %, but its owner has gene %', new_id, new_id >> 47, owner_gene
      USING ERRCODE = '23514', COLUMN = TG_ARGV[1],
            HINT = format('Leave %I NULL to compute it, or use id_gen.gene_order_id(%L, owner).', TG_ARGV[1], TG_ARGV[3]);
  END IF;
  NEW := jsonb_populate_record(NEW, jsonb_build_object(TG_ARGV[1], new_id));
  EXECUTE format('INSERT INTO %s SELECT ($1).*', TG_ARGV[0]) USING NEW;
  RETURN NEW;
END $$;
COMMENT ON FUNCTION id_gen.insert_distributed_row() IS 'INSTEAD OF INSERT trigger of a distributed table''s view: computes a NULL id from the owner with gene_order_id, refuses an id from another gene than its owner''s, and inserts into the partitioned table (which routes it to the owner''s shard).';

-- Grants of one relation, repeated on another (the owner's own rights are implied).

CREATE OR REPLACE FUNCTION id_gen.distribute_table(tbl regclass, id_column name, owner_column name DEFAULT NULL,
                                        sequence text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  sch name;
  tab name;
  kind "char";
  table_owner name;
  id_type regtype;
  owner_type regtype;
  old_name name;
  parts name;
  definition text;
  cols text;
  moved bigint;
  g record;
  triggers text;
  persistence "char";
  taken name[];
  shard_stem name;
  coordinator_stem name;
  code text;
  pushed jsonb;
  msg text;
  err_state text;
  err_detail text;
  err_hint text;
  undo_errors text;
BEGIN
  IF tbl IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "tbl" must not be NULL' USING ERRCODE = '22004';
  ELSIF id_column IS NULL THEN
    RAISE EXCEPTION 'id_gen: argument "id_column" must not be NULL' USING ERRCODE = '22004';
  END IF;
  PERFORM id_gen.require_superuser('distribute tables');
  PERFORM id_gen.quiet_ddl();
  SELECT n.nspname, c.relname, c.relkind, pg_get_userbyid(c.relowner), c.relpersistence
    INTO sch, tab, kind, table_owner, persistence
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = tbl;
  PERFORM id_gen.dblink_schema();
  IF EXISTS (SELECT FROM id_gen.distributed_tables t WHERE (t.schema_name, t.table_name) = (sch, tab)) THEN
    RAISE EXCEPTION 'id_gen: % is already distributed', tbl
      USING ERRCODE = '42710', HINT = 'Its partitions follow id_gen.shard_routes; see id_gen.distribution.';
  ELSIF kind <> 'r' THEN
    RAISE EXCEPTION 'id_gen: % is not a plain table', tbl
      USING ERRCODE = '42809', HINT = 'distribute_table converts a plain (heap) table; partitioned tables, views and foreign tables are refused.';
  ELSIF persistence = 't' THEN
    RAISE EXCEPTION 'id_gen: % is a temporary table', tbl
      USING ERRCODE = '0A000', HINT = 'Only permanent tables can be distributed: the shards hold their rows for every session.';
  END IF;
  SELECT a.atttypid::regtype INTO id_type FROM pg_attribute a
  WHERE a.attrelid = tbl AND a.attname = id_column AND a.attnum > 0 AND NOT a.attisdropped;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'id_gen: column "%" of % does not exist', id_column, tbl USING ERRCODE = '42703';
  ELSIF id_type <> 'bigint'::regtype THEN
    RAISE EXCEPTION 'id_gen: id column "%" of % is %, not bigint', id_column, tbl, id_type
      USING ERRCODE = '42804', HINT = 'Distributed tables route by the gene in bits 62..47 of a bigint id.';
  END IF;
  IF owner_column IS NOT NULL THEN
    SELECT a.atttypid::regtype INTO owner_type FROM pg_attribute a
    WHERE a.attrelid = tbl AND a.attname = owner_column AND a.attnum > 0 AND NOT a.attisdropped;
    IF NOT FOUND THEN
      RAISE EXCEPTION 'id_gen: column "%" of % does not exist', owner_column, tbl USING ERRCODE = '42703';
    ELSIF owner_type NOT IN ('bigint'::regtype, 'integer'::regtype, 'smallint'::regtype, 'text'::regtype,
                             'character varying'::regtype, 'uuid'::regtype) THEN
      RAISE EXCEPTION 'id_gen: owner column "%" of % is %', owner_column, tbl, owner_type
        USING ERRCODE = '42804', HINT = 'An owner is a bigint, integer, text or uuid (what id_gen.shard_gene takes).';
    END IF;
  END IF;
  IF sequence IS NOT NULL THEN
    IF owner_column IS NULL THEN
      RAISE EXCEPTION 'id_gen: a sequence computes ids from an owner, but no owner_column was given'
        USING ERRCODE = '22023', HINT = 'Pass owner_column => ''...'' too, or leave sequence NULL and insert ids yourself.';
    ELSIF NOT EXISTS (SELECT FROM id_gen.sequences s WHERE s.name = sequence) THEN
      RAISE EXCEPTION 'id_gen: sequence "%" does not exist', sequence
        USING ERRCODE = '42704', HINT = format('SELECT id_gen.create_sequence(%L) creates it (on every shard too, or with authority => ...).', sequence);
    END IF;
  END IF;
  IF NOT EXISTS (SELECT FROM pg_constraint c WHERE c.contype = 'p' AND c.conrelid = tbl) THEN
    RAISE EXCEPTION 'id_gen: % has no primary key', tbl
      USING ERRCODE = '0A000',
            HINT = format('Add one that includes %I (ALTER TABLE ... ADD PRIMARY KEY (%I)): shards need it as the replica identity when rows move between them.', id_column, id_column);
  END IF;
  IF EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = tbl AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated <> '') THEN
    RAISE EXCEPTION 'id_gen: % has generated columns, which distributed tables do not carry', tbl
      USING ERRCODE = '0A000', HINT = 'Turn them into plain columns filled by the application or a trigger on the shards.';
  END IF;
  IF EXISTS (SELECT FROM pg_constraint c WHERE c.contype IN ('p', 'u') AND c.conrelid = tbl
             AND NOT (SELECT a.attnum FROM pg_attribute a WHERE a.attrelid = tbl AND a.attname = id_column) = ANY (c.conkey)) THEN
    RAISE EXCEPTION 'id_gen: a primary key or unique constraint of % does not include "%"', tbl, id_column
      USING ERRCODE = '0A000',
            HINT = 'Shards partition the table by its id, and a unique constraint of a partitioned table must include the partition key.';
  END IF;
  IF EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = tbl AND a.attnum > 0 AND NOT a.attisdropped AND a.attidentity <> '') THEN
    RAISE EXCEPTION 'id_gen: % has identity columns, which distributed tables do not carry', tbl
      USING ERRCODE = '0A000', HINT = 'Ids come from id_gen (gene_order_id); make other identity columns plain, with a default the shards can compute.';
  END IF;
  IF EXISTS (SELECT FROM pg_attrdef d JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
             WHERE d.adrelid = tbl AND a.attname = id_column
               AND EXISTS (SELECT FROM pg_depend dep WHERE dep.classid = 'pg_attrdef'::regclass AND dep.objid = d.oid
                           AND dep.refclassid = 'pg_class'::regclass)) THEN
    RAISE EXCEPTION 'id_gen: the id column "%" of % takes its values from a sequence (serial or nextval)', id_column, tbl
      USING ERRCODE = '0A000',
            HINT = 'Its ids would carry gene 0 and all land on one shard. Drop that default (ALTER TABLE ... ALTER COLUMN ... DROP DEFAULT) and give owner_column and sequence, so that ids are computed with id_gen.gene_order_id.';
  END IF;
  code := id_gen.untrusted_code(tbl);
  IF code IS NOT NULL THEN
    RAISE EXCEPTION 'id_gen: cannot distribute %: it runs %', tbl, code
      USING ERRCODE = '42501',
            DETAIL = 'id_gen copies, moves and re-partitions distributed tables with superuser rights, and would run that code with them.',
            HINT = 'Have a superuser own the functions the table''s constraints, defaults, indexes, triggers and column types call (ALTER FUNCTION ... OWNER TO), or remove them from the table.';
  END IF;
  IF EXISTS (SELECT FROM pg_constraint c WHERE c.contype = 'f' AND (c.conrelid = tbl OR c.confrelid = tbl)) THEN
    RAISE EXCEPTION 'id_gen: % has foreign keys, which cannot span shards', tbl
      USING ERRCODE = '0A000', HINT = 'Drop the foreign keys first; a shard checks only its own rows.';
  END IF;

  LOCK TABLE id_gen.shard_routes IN SHARE MODE;
  PERFORM id_gen.refuse_during_moves('distribute a table');
  PERFORM id_gen.check_routes_for_distribution();
  EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', tbl);

  -- The shards' table, partitioned by id: columns, NOT NULL, defaults (but the id's: ids come from the
  -- coordinator or from gene_order_id on the shard), primary key, unique and check
  -- constraints. search_path is pinned, so every type and function name comes out
  -- qualified.
  SELECT format('CREATE TABLE %I.%I (%s%s) PARTITION BY RANGE (%I)', sch, tab,
                string_agg(format('%I %s%s%s', a.attname, format_type(a.atttypid, a.atttypmod),
                                  CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END,
                                  CASE WHEN a.attname <> id_column AND d.adbin IS NOT NULL AND a.attgenerated = ''
                                       THEN ' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid) ELSE '' END),
                           ', ' ORDER BY a.attnum),
                coalesce((SELECT string_agg(format(', CONSTRAINT %I %s', c.conname, pg_get_constraintdef(c.oid)), '' ORDER BY c.conname)
                          FROM pg_constraint c WHERE c.conrelid = tbl AND c.contype IN ('p', 'u', 'c')), '')
                -- An UPDATE may not move a row to an owner of another gene while it keeps its id.
                || CASE WHEN owner_column IS NULL THEN ''
                        ELSE format(', CONSTRAINT id_gen_owner_gene CHECK ((%I OPERATOR(pg_catalog.>>) 47) OPERATOR(pg_catalog.=) id_gen.shard_gene(%I::%s))',
                                    id_column, owner_column,
                                    CASE WHEN owner_type IN ('bigint'::regtype, 'integer'::regtype, 'smallint'::regtype) THEN 'pg_catalog.int8'
                                         WHEN owner_type = 'uuid'::regtype THEN 'pg_catalog.uuid' ELSE 'pg_catalog.text' END) END,
                id_column),
         string_agg(format('%I', a.attname), ', ' ORDER BY a.attnum) FILTER (WHERE a.attgenerated = '')
    INTO definition, cols
  FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
  WHERE a.attrelid = tbl AND a.attnum > 0 AND NOT a.attisdropped;
  SELECT string_agg(quote_ident(t.tgname), ', ') INTO triggers
  FROM pg_trigger t WHERE t.tgrelid = tbl AND NOT t.tgisinternal;

  parts := CASE WHEN sequence IS NULL THEN tab ELSE id_gen.fit_name(tab, '_shards') END;
  IF parts <> tab AND to_regclass(format('%I.%I', sch, parts)) IS NOT NULL THEN
    RAISE EXCEPTION 'id_gen: relation %.% already exists', quote_ident(sch), quote_ident(parts)
      USING ERRCODE = '42P07', HINT = 'distribute_table names the partitioned table <table>_shards when a sequence computes ids; rename that relation.';
  END IF;
  -- Partition names: unique among the distributed tables of the schema.
  SELECT coalesce(array_agg(s), '{}') INTO taken
  FROM (SELECT t.shard_stem AS s FROM id_gen.distributed_tables t WHERE t.schema_name = sch
        UNION ALL SELECT t.coordinator_stem FROM id_gen.distributed_tables t WHERE t.schema_name = sch) x;
  coordinator_stem := id_gen.pick_stem(parts, taken);
  shard_stem := id_gen.pick_stem(tab, taken);
  old_name := id_gen.fit_name(tab, '_undistributed_' || tbl::oid);
  -- Sequences owned by its columns (serial defaults) go with the new table.
  FOR g IN SELECT s.oid::regclass AS seq, a.attname
           FROM pg_depend dep JOIN pg_class s ON s.oid = dep.objid AND s.relkind = 'S'
           JOIN pg_attribute a ON a.attrelid = dep.refobjid AND a.attnum = dep.refobjsubid
           WHERE dep.classid = 'pg_class'::regclass AND dep.refclassid = 'pg_class'::regclass
             AND dep.refobjid = tbl AND dep.deptype = 'a' LOOP
    EXECUTE format('ALTER SEQUENCE %s OWNED BY NONE', g.seq);
  END LOOP;
  EXECUTE format('ALTER TABLE %s RENAME TO %I', tbl, old_name);
  EXECUTE format('CREATE TABLE %I.%I (LIKE %I.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING COMMENTS '
                 'INCLUDING STORAGE INCLUDING COMPRESSION) PARTITION BY RANGE (%I)',
                 sch, parts, sch, old_name, id_column);
  EXECUTE format('ALTER TABLE %I.%I OWNER TO %I', sch, parts, table_owner);
  EXECUTE format('COMMENT ON TABLE %I.%I IS %L', sch, parts,
                 coalesce(obj_description(tbl, 'pg_class') || E'\n', '')
                 || format('id_gen: distributed by %s over the shards of id_gen.shard_routes (see id_gen.distribution).', id_column));
  INSERT INTO id_gen.distributed_tables (schema_name, table_name, partitioned_name, id_column, owner_column, sequence,
                                         shard_definition, shard_stem, coordinator_stem)
  VALUES (sch, tab, parts, id_column, owner_column, sequence, definition, shard_stem, coordinator_stem);
  pushed := id_gen.sync_distributed_table(sch, tab);
  BEGIN

  -- Rows already in the table move to their shards.
  EXECUTE format('INSERT INTO %I.%I (%s) SELECT %s FROM %I.%I', sch, parts, cols, cols, sch, old_name);
  GET DIAGNOSTICS moved = ROW_COUNT;
  PERFORM id_gen.copy_grants(tbl, format('%I.%I', sch, parts)::regclass);
  BEGIN
    EXECUTE format('DROP TABLE %I.%I', sch, old_name);
  EXCEPTION WHEN dependent_objects_still_exist THEN
    RAISE EXCEPTION 'id_gen: other objects depend on %', tbl
      USING ERRCODE = '2BP01', HINT = 'Drop the views or other objects that use the table, distribute it, then create them again over the distributed table.';
  END;

  IF sequence IS NOT NULL THEN
    EXECUTE format('CREATE VIEW %I.%I AS SELECT * FROM %I.%I', sch, tab, sch, parts);
    EXECUTE format('ALTER VIEW %I.%I OWNER TO %I', sch, tab, table_owner);
    -- The view inserts through a trigger, which sees the view's defaults, not the table's.
    FOR g IN SELECT a.attname, pg_get_expr(d.adbin, d.adrelid) AS expr
             FROM pg_attribute a JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
             WHERE a.attrelid = format('%I.%I', sch, parts)::regclass AND a.attname <> id_column LOOP
      EXECUTE format('ALTER VIEW %I.%I ALTER COLUMN %I SET DEFAULT %s', sch, tab, g.attname, g.expr);
    END LOOP;
    EXECUTE format('CREATE TRIGGER id_gen_insert INSTEAD OF INSERT ON %I.%I FOR EACH ROW '
                   'EXECUTE FUNCTION id_gen.insert_distributed_row(%L, %L, %L, %L)',
                   sch, tab, format('%I.%I', sch, parts), id_column, owner_column, sequence);
    PERFORM id_gen.copy_grants(format('%I.%I', sch, parts)::regclass, format('%I.%I', sch, tab)::regclass);
    EXECUTE format('COMMENT ON VIEW %I.%I IS %L', sch, tab,
                   format('id_gen: distributed table; an INSERT without %s computes it with id_gen.gene_order_id(%L, %s) and routes the row to the owner''s shard. Rows live in %I.%I.',
                          id_column, sequence, owner_column, sch, parts));
  END IF;
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    -- The shards created their tables in transactions of their own: they forget them again.
    GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT, err_state = RETURNED_SQLSTATE, err_detail = PG_EXCEPTION_DETAIL, err_hint = PG_EXCEPTION_HINT;
    undo_errors := id_gen.restore_shard_ranges(sch, tab, pushed->'pushed');
    PERFORM id_gen.reraise(msg, err_state,
      concat_ws(E'\n', nullif(err_detail, ''),
                CASE WHEN undo_errors IS NOT NULL THEN 'Some shards keep empty partitions of the table: ' || undo_errors END),
      err_hint);
  END;
  IF triggers IS NOT NULL THEN
    RAISE NOTICE 'id_gen: triggers % of % were not carried over', triggers, tbl
      USING HINT = 'Create them on the shards'' tables, where rows are written.';
  END IF;
  RAISE NOTICE 'id_gen: %.% is distributed over % shards; % existing rows moved to them',
    quote_ident(sch), quote_ident(tab), (SELECT count(DISTINCT shard) FROM id_gen.shard_routes), moved;
END $$;
COMMENT ON FUNCTION id_gen.distribute_table(regclass, name, name, text) IS 'Turns a plain table into a table partitioned by RANGE on its bigint id column, one partition per route range holding a postgres_fdw foreign table over that shard''s local partition of the range; creates the shards'' tables and moves existing rows. With owner_column and sequence, the table''s name becomes a view that computes missing ids from the owner. Superuser only.';
REVOKE EXECUTE ON FUNCTION id_gen.distribute_table(regclass, name, name, text) FROM PUBLIC;

-- Grants, owners and names of distributed tables ------------------------------------------------
-- id_gen's own DDL on distributed tables (partitions, foreign tables, owners) does not
-- need following; it says so for the rest of its transaction with id_gen.quiet_ddl()
-- (src/transaction_marks.rs: superuser only, not a setting any session could SET).

-- Makes rel's owner and grants those of source (revoking what source does not grant).
CREATE OR REPLACE FUNCTION id_gen.match_owner_and_grants(source regclass, rel regclass) RETURNS boolean
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  src_owner oid;
  rel_owner oid;
  g record;
BEGIN
  SELECT c.relowner INTO src_owner FROM pg_class c WHERE c.oid = source;
  SELECT c.relowner INTO rel_owner FROM pg_class c WHERE c.oid = rel;
  IF src_owner = rel_owner AND NOT EXISTS (
       (SELECT a.grantee, a.privilege_type, a.is_grantable FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = source AND a.grantee <> c.relowner
        EXCEPT
        SELECT a.grantee, a.privilege_type, a.is_grantable FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = rel AND a.grantee <> c.relowner)
       UNION ALL
       (SELECT a.grantee, a.privilege_type, a.is_grantable FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = rel AND a.grantee <> c.relowner
        EXCEPT
        SELECT a.grantee, a.privilege_type, a.is_grantable FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = source AND a.grantee <> c.relowner)) THEN
    RETURN false;
  END IF;
  IF src_owner <> rel_owner THEN
    EXECUTE format('ALTER %s %s OWNER TO %I', id_gen.relation_kind_word(rel), rel, pg_get_userbyid(src_owner));
  END IF;
  FOR g IN SELECT DISTINCT a.grantee FROM pg_class c, aclexplode(c.relacl) a
           WHERE c.oid = rel AND a.grantee <> c.relowner LOOP
    EXECUTE format('REVOKE ALL ON %s FROM %s', rel,
                   CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(g.grantee)) END);
  END LOOP;
  PERFORM id_gen.copy_grants(source, rel);
  RETURN true;
END $$;
COMMENT ON FUNCTION id_gen.match_owner_and_grants(regclass, regclass) IS 'Gives rel the owner and exactly the grants of source, with the caller''s rights; returns whether it changed anything.';

-- After GRANT, REVOKE and ALTER TABLE/VIEW/FOREIGN TABLE/SCHEMA: the owner and grants of
-- a distributed table's name reach the partitioned table and every partition and
-- foreign table behind it, and a distributed table that lost its name (RENAME, SET
-- SCHEMA) makes the command fail.
CREATE OR REPLACE FUNCTION id_gen.follow_distributed_ddl() RETURNS event_trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  dts id_gen.distributed_tables[];
  d id_gen.distributed_tables;
  first_gene_bound integer;
  front regclass;
  parts regclass;
  r record;
  renamed boolean;
  stack text;
BEGIN
  -- Runs as whoever ran the command, with their rights.
  IF to_regclass('id_gen.distributed_tables') IS NULL OR id_gen.ddl_is_quiet() THEN
    RETURN;
  END IF;
  -- An ALTER of relations none of which can be part of a distributed table (a plain table
  -- that is no partition, an index, a sequence, ...) is none of its business: return
  -- before reading id_gen's catalog. (GRANT, REVOKE and ALTER SCHEMA do not say which
  -- objects they touch: for them the catalog is read below without keeping its lock.)
  IF tg_tag IN ('ALTER TABLE', 'ALTER VIEW', 'ALTER FOREIGN TABLE')
     AND NOT EXISTS (SELECT FROM pg_event_trigger_ddl_commands() c
                     LEFT JOIN pg_class pc ON c.classid = 'pg_class'::regclass AND pc.oid = c.objid
                     WHERE pc.oid IS NULL OR pc.relkind IN ('p', 'v', 'f') OR pc.relispartition) THEN
    RETURN;
  END IF;
  -- Its own grants below fire it again: that run returns here. The call stack says so (no
  -- setting or function an ordinary session could use to skip this trigger).
  GET DIAGNOSTICS stack = PG_CONTEXT;
  IF (SELECT count(*) FROM regexp_matches(stack, '^PL/pgSQL function id_gen\.follow_distributed_ddl\(\) line', 'gn')) > 1 THEN
    RETURN;
  END IF;
  -- id_gen's catalog read in a subtransaction that is rolled back on purpose: its lock goes
  -- with it, so that unrelated DDL does not hold a lock on id_gen.distributed_tables until
  -- the caller's transaction ends (variables keep what was read).
  BEGIN
    SELECT coalesce(array_agg(t ORDER BY t.schema_name, t.table_name), '{}') INTO dts FROM id_gen.distributed_tables t;
    first_gene_bound := (SELECT min(sr.upper_gene) FROM id_gen.shard_routes sr);
    RAISE EXCEPTION USING ERRCODE = 'P0004';  -- (assert_failure: never raised otherwise here)
  EXCEPTION WHEN assert_failure THEN
    NULL;
  END;
  FOREACH d IN ARRAY dts LOOP
    front := to_regclass(format('%I.%I', d.schema_name, d.table_name));
    parts := to_regclass(format('%I.%I', d.schema_name, d.partitioned_name));
    IF front IS NULL OR parts IS NULL THEN
      -- Renamed (refused), not dropped (then there is nothing left to follow): its schema
      -- was renamed by this command, a view over the partitioned table lives on under
      -- another name, or the range partitions hang under a parent of another name.
      renamed := (tg_tag = 'ALTER SCHEMA' AND NOT EXISTS (SELECT FROM pg_namespace n WHERE n.nspname = d.schema_name))
        OR (front IS NULL AND parts IS NOT NULL
            AND EXISTS (SELECT FROM pg_depend dep JOIN pg_rewrite rw ON rw.oid = dep.objid
                        WHERE dep.classid = 'pg_rewrite'::regclass AND dep.refclassid = 'pg_class'::regclass
                          AND dep.refobjid = parts AND rw.ev_class <> parts))
        OR (parts IS NULL
            AND EXISTS (SELECT FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                        JOIN pg_inherits i ON i.inhrelid = c.oid
                        WHERE n.nspname = d.schema_name
                          AND c.relname = id_gen.partition_name(d.coordinator_stem, 0, first_gene_bound)));
      IF renamed THEN
        RAISE EXCEPTION 'id_gen: %.% is a distributed table; it cannot be renamed or moved to another schema',
                        quote_ident(d.schema_name), quote_ident(d.table_name)
          USING ERRCODE = '0A000',
                HINT = 'Its partitions, foreign tables and the shards'' tables are found by its name. Create a view with the new name over it instead.';
      END IF;
      CONTINUE;
    END IF;
    -- Owner and grants follow, as far as the caller may change them.
    BEGIN
      IF front <> parts THEN
        PERFORM id_gen.match_owner_and_grants(front, parts);
      END IF;
      FOR r IN WITH RECURSIVE tree(rel) AS (
                 SELECT i.inhrelid FROM pg_inherits i WHERE i.inhparent = parts
                 UNION ALL
                 SELECT i.inhrelid FROM pg_inherits i JOIN tree t ON i.inhparent = t.rel)
               SELECT rel::regclass AS rel FROM tree LOOP
        PERFORM id_gen.match_owner_and_grants(parts, r.rel);
      END LOOP;
    EXCEPTION WHEN insufficient_privilege THEN
      NULL;  -- not the caller's to change (and not changed by this command)
    END;
  END LOOP;
END $$;
COMMENT ON FUNCTION id_gen.follow_distributed_ddl() IS 'Event trigger: grants, revokes and owner changes on a distributed table reach every relation behind it; renaming a distributed table or its schema is refused (0A000).';
DROP EVENT TRIGGER IF EXISTS id_gen_follow_distributed_ddl;
CREATE EVENT TRIGGER id_gen_follow_distributed_ddl ON ddl_command_end
  WHEN TAG IN ('GRANT', 'REVOKE', 'ALTER TABLE', 'ALTER VIEW', 'ALTER FOREIGN TABLE', 'ALTER SCHEMA')
  EXECUTE FUNCTION id_gen.follow_distributed_ddl();
COMMENT ON EVENT TRIGGER id_gen_follow_distributed_ddl IS 'Keeps the owner and grants behind distributed tables in step with their names, and refuses renames (id_gen.follow_distributed_ddl).';

CREATE OR REPLACE FUNCTION id_gen.guard_extension_drop() RETURNS event_trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  busy text;
BEGIN
  IF to_regclass('id_gen.shard_moves') IS NULL OR current_query() !~* '\mid_gen\M' THEN
    RETURN;
  END IF;
  SELECT string_agg(format('%s (%s)', m.move_id, m.phase), ', ') INTO busy
  FROM id_gen.shard_moves m WHERE m.phase NOT IN ('done', 'aborted', 'reverted');
  IF busy IS NOT NULL THEN
    RAISE EXCEPTION 'id_gen: cannot drop the extension while moves are unfinished: %', busy
      USING ERRCODE = '55006',
            HINT = 'Their slots, publications, subscriptions and fences on the shards would be left behind. Finish each with CALL id_gen.move_genes(...) or CALL id_gen.abort_move(move_id) first.';
  END IF;
END $$;
COMMENT ON FUNCTION id_gen.guard_extension_drop() IS 'Event trigger: DROP EXTENSION id_gen is refused (55006) while a move is unfinished.';
DROP EVENT TRIGGER IF EXISTS id_gen_guard_extension_drop;
CREATE EVENT TRIGGER id_gen_guard_extension_drop ON ddl_command_start
  WHEN TAG IN ('DROP EXTENSION')
  EXECUTE FUNCTION id_gen.guard_extension_drop();
COMMENT ON EVENT TRIGGER id_gen_guard_extension_drop IS 'Refuses DROP EXTENSION id_gen while a move is unfinished (id_gen.guard_extension_drop).';

-- The distribution of distributed tables by route range.
CREATE OR REPLACE VIEW id_gen.distribution AS
WITH ranges AS (
  SELECT coalesce(lag(sr.upper_gene) OVER (ORDER BY sr.upper_gene) + 1, 0) AS lower_gene, sr.upper_gene, sr.shard
  FROM id_gen.shard_routes sr
)
SELECT format('%I.%I', d.schema_name, d.table_name) AS relation,
       r.lower_gene,
       r.upper_gene,
       r.shard,
       id_gen.gene_first_id(r.lower_gene) AS first_id,
       id_gen.gene_last_id(r.upper_gene) AS last_id,
       format('%I.%I', d.schema_name, id_gen.partition_name(d.coordinator_stem, r.lower_gene, r.upper_gene)) AS partition,
       EXISTS (SELECT FROM pg_catalog.pg_class c
               JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
               JOIN pg_catalog.pg_inherits i ON i.inhrelid = c.oid
               JOIN pg_catalog.pg_foreign_table ft ON ft.ftrelid = c.oid
               JOIN pg_catalog.pg_foreign_server s ON s.oid = ft.ftserver
               WHERE n.nspname = d.schema_name
                 AND c.relname = id_gen.fit_name(id_gen.partition_name(d.coordinator_stem, r.lower_gene, r.upper_gene), '_fdw')
                 AND s.srvname = r.shard)
       AND EXISTS (SELECT FROM id_gen.shard_placements p
                   WHERE (p.schema_name, p.table_name, p.shard) = (d.schema_name, d.table_name, r.shard)
                     AND int4range(r.lower_gene, r.upper_gene, '[]') = ANY (p.gene_ranges)) AS in_step
FROM id_gen.distributed_tables d CROSS JOIN ranges r;
COMMENT ON VIEW id_gen.distribution IS 'Each distributed table by route range: shard, id bounds, partition, and whether its foreign table and the shard''s placement match the route table (in_step; false after a failed sync: run SELECT id_gen.sync_distributed_tables()).';
GRANT SELECT ON id_gen.distribution TO PUBLIC;
