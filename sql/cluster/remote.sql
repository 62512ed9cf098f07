-- The one remote path: every statement id_gen runs on another server (a shard) goes
-- through id_gen.remote_exec, over dblink, with the shard's foreign server and the caller's
-- user mapping, on a connection whose search_path is pinned to pg_catalog, pg_temp and
-- whose transactions are READ COMMITTED. It is sent asynchronously (remote_send) and
-- awaited with pg_sleep (remote_receive), so every wait can be cancelled and is bounded,
-- the connect too (src/connect_bound.rs). The statements are calls of id_gen.shard_*
-- functions (sql/cluster/shard/) with literal arguments (remote_call, %L), and the few
-- subscription commands that cannot run in a function. (postgres_fdw carries rows, and
-- one secret as a bound parameter: sql/cluster/move.sql.) Code only (CREATE OR REPLACE).
--
-- Invariants:
--   * remote_call runs only functions named ^shard_[a-z_]+$, quoted with %I, every
--     argument quote_nullable.
--   * After a failure the connection is closed without a cancel request, never left
--     waiting; errors keep their SQLSTATE, detail and hint (id_gen.reraise).
--   * The connection string holds the password: built and used here, never shown
--     (superuser only).

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
CREATE OR REPLACE FUNCTION id_gen.remote_link_conninfo(shard text, connect_seconds integer) RETURNS text
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  SELECT 'connect_timeout=' || connect_seconds || ' keepalives=1 keepalives_idle=5 keepalives_interval=2 keepalives_count=3 tcp_user_timeout=10000 '
         || coalesce(string_agg(format('%s=''%s''', o.key, replace(replace(o.value, '\', '\\'), '''', '\''')), ' ' ORDER BY o.ord), '')
  FROM (SELECT split_part(opts.opt, '=', 1) AS key, substr(opts.opt, strpos(opts.opt, '=') + 1) AS value, opts.ord
        FROM (SELECT x.opt, x.ord FROM pg_foreign_server s, unnest(s.srvoptions) WITH ORDINALITY AS x(opt, ord)
              WHERE s.srvname = remote_link_conninfo.shard
              UNION ALL
              SELECT x.opt, 1000 + x.ord FROM pg_user_mappings um, unnest(um.umoptions) WITH ORDINALITY AS x(opt, ord)
              WHERE um.srvname = remote_link_conninfo.shard
                AND um.umuser = (SELECT coalesce((SELECT u.umuser FROM pg_user_mappings u
                                                  WHERE u.srvname = remote_link_conninfo.shard AND u.usename = current_user), 0))
             ) opts) o
  WHERE o.key IN ('host', 'hostaddr', 'port', 'dbname', 'user', 'password', 'passfile', 'service', 'sslmode', 'sslrootcert',
                  'sslcert', 'sslkey', 'sslcrl', 'sslcrldir', 'sslsni', 'sslpassword', 'ssl_min_protocol_version',
                  'ssl_max_protocol_version', 'gssencmode', 'krbsrvname', 'gsslib', 'requirepeer', 'require_auth',
                  'channel_binding', 'connect_timeout', 'options', 'target_session_attrs', 'load_balance_hosts',
                  'keepalives', 'keepalives_idle', 'keepalives_interval', 'keepalives_count', 'tcp_user_timeout');
END;
COMMENT ON FUNCTION id_gen.remote_link_conninfo(text, integer) IS 'The libpq connection string of id_gen''s dblink connections to a shard: connect_timeout connect_seconds (id_gen.remote_send: the call''s bound, 2 to 5 s), TCP keepalives and tcp_user_timeout 10 s (so that a shard that stops answering is noticed), then the options of its foreign server and the current user''s mapping, which take precedence. Holds the password: superuser only, never shown.';
REVOKE EXECUTE ON FUNCTION id_gen.remote_link_conninfo(text, integer) FROM PUBLIC;

-- The one remote path, in two halves so that one statement can go to several shards at
-- once (id_gen.push_route_state): remote_send opens the connection if needed and sends,
-- remote_receive waits for the result; id_gen.remote_exec is both. A new connection first
-- pins search_path and READ COMMITTED for the whole session, and the shard's own bounds
-- for an orphaned statement (statement_timeout 65 s, or timeout_ms + 5 s for a longer call;
-- client_connection_check_interval 2 s). A remote error keeps its SQLSTATE; an
-- unreachable shard is 08006. Every wait is bounded: the connect by connect_timeout (5 s
-- unless the server says otherwise), the statement by timeout_ms. On any failure the
-- connection is closed without a cancel request (id_gen.remote_link_failed): libpq's
-- PQcancel opens a new connection and waits for the shard without a bound, which a shard
-- that accepts connections but does not answer (a paused VM, a host swapping to death)
-- turns into a hang; the shard ends the orphan by itself.
CREATE OR REPLACE FUNCTION id_gen.remote_link_failed(shard text, msg text, code text, detail text, hint text) RETURNS void
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
COMMENT ON FUNCTION id_gen.remote_link_failed(text, text, text, text, text) IS 'The failure path of a remote call: closes the shard''s connection without a cancel request and raises the error (08006 for an unreachable shard, 57014 with a hint for a statement past its bound, else the remote error as it was).';
REVOKE EXECUTE ON FUNCTION id_gen.remote_link_failed(text, text, text, text, text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.remote_send(shard text, command text, timeout_ms integer DEFAULT 60000) RETURNS void
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
        EXECUTE format('SELECT %I.dblink_connect($1, $2)', dbl) USING conn, id_gen.remote_link_conninfo(shard, connect_seconds);
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
    PERFORM id_gen.remote_link_failed(shard, msg, code, detail, hint);
  END;
END $$;
COMMENT ON FUNCTION id_gen.remote_send(text, text, integer) IS 'First half of id_gen.remote_exec: opens the shard''s connection if needed (bounded by connect_timeout and timeout_ms) and sends one statement without waiting for it; id_gen.remote_receive takes the result.';
REVOKE EXECUTE ON FUNCTION id_gen.remote_send(text, text, integer) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.remote_receive(shard text, timeout_ms integer, started timestamptz) RETURNS text
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
    PERFORM id_gen.remote_link_failed(shard, msg, code, detail, hint);
  END;
  RETURN result;
END $$;
COMMENT ON FUNCTION id_gen.remote_receive(text, integer, timestamptz) IS 'Second half of id_gen.remote_exec: waits for the statement id_gen.remote_send sent (until started + timeout_ms, then 57014 and the connection closed) and returns the first column of its first row or the command tag.';
REVOKE EXECUTE ON FUNCTION id_gen.remote_receive(text, integer, timestamptz) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.remote_exec(shard text, command text, timeout_ms integer DEFAULT 60000) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  started timestamptz := clock_timestamp();
BEGIN
  PERFORM id_gen.remote_send(shard, command, timeout_ms);
  RETURN id_gen.remote_receive(shard, timeout_ms, started);
END $$;
COMMENT ON FUNCTION id_gen.remote_exec(text, text, integer) IS 'The one path for statements id_gen runs on shards: one statement over dblink (the shard''s foreign server and the caller''s user mapping, with connect_timeout, TCP keepalives and tcp_user_timeout), search_path pinned to pg_catalog, pg_temp, READ COMMITTED, asynchronous and cancellable, bounded by timeout_ms (after a failure the connection is closed, never left waiting for a cancel request); returns the first column of the first row or the command tag.';
REVOKE EXECUTE ON FUNCTION id_gen.remote_exec(text, text, integer) FROM PUBLIC;

-- Calls id_gen.<fn>(args...) on a shard: each argument is a literal (quote_nullable), so
-- no identifier or value is ever pasted into code.
CREATE OR REPLACE FUNCTION id_gen.remote_call(shard text, fn text, args text[], timeout_ms integer DEFAULT 60000) RETURNS text
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF fn !~ '^shard_[a-z_]+$' THEN
    RAISE EXCEPTION 'id_gen: % is not a shard function', fn USING ERRCODE = '42883';
  END IF;
  RETURN id_gen.remote_exec(shard, id_gen.remote_call_text(fn, args), timeout_ms);
END $$;
COMMENT ON FUNCTION id_gen.remote_call(text, text, text[], integer) IS 'Runs SELECT id_gen.<fn>(<literal args>) on a shard through id_gen.remote_exec.';
REVOKE EXECUTE ON FUNCTION id_gen.remote_call(text, text, text[], integer) FROM PUBLIC;

CREATE OR REPLACE FUNCTION id_gen.remote_call_text(fn text, args text[]) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN format('SELECT id_gen.%I(%s)', fn,
              coalesce((SELECT string_agg(quote_nullable(a), ', ' ORDER BY i) FROM unnest(args) WITH ORDINALITY AS x(a, i)), ''));
COMMENT ON FUNCTION id_gen.remote_call_text(text, text[]) IS 'The statement remote_call sends (what dry_run prints).';
