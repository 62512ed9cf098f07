-- id_gen: views, comments and privileges, after all functions exist ("finalize").

CREATE VIEW id_gen.status AS
SELECT d.datname AS database,
       s.sequence,
       s.counter_group,
       s.state,
       s.current_first,
       s.current_last,
       s.current_used,
       CASE WHEN s.current_last IS NULL THEN NULL
            ELSE round(s.current_used::numeric / (s.current_last - s.current_first + 1), 4)
       END AS current_fill,
       s.standby_first IS NOT NULL AS standby_ready,
       s.standby_first,
       s.standby_last,
       s.step,
       round(s.rate_per_s::numeric, 1) AS rate_per_s,
       s.calls,
       s.refills,
       s.waits,
       round(s.last_refill_ms::numeric, 3) AS last_refill_ms,
       CASE WHEN s.last_refill_at_ms = 0 THEN NULL
            ELSE to_timestamp(s.last_refill_at_ms / 1000.0) END AS last_refill_at,
       NULLIF(s.worker_pid, 0) AS worker_pid,
       s.authority,
       s.last_error,
       CASE WHEN s.last_error_at_ms = 0 THEN NULL
            ELSE to_timestamp(s.last_error_at_ms / 1000.0) END AS last_error_at
FROM id_gen.cache_status() AS s
LEFT JOIN pg_catalog.pg_database AS d ON d.oid = s.dboid;

COMMENT ON VIEW id_gen.status IS
  'id_gen segment cache: one row per cached (database, sequence, counter group): current and standby segment, fill, adaptive step, rate, refills, waits, worker pid, the authority reserved from and the error of the last failed reservation.';
COMMENT ON TABLE id_gen.sequences IS
  'id_gen named sequences: one row each; max_id is the high-water mark (largest value ever handed to a cache). Change rows only through id_gen.create_sequence/alter_sequence/drop_sequence.';
COMMENT ON COLUMN id_gen.sequences.max_id IS 'High-water mark: the largest value ever reserved for a cache. Only grows.';
COMMENT ON COLUMN id_gen.sequences.step IS 'Segment size used until a call rate is known.';
COMMENT ON COLUMN id_gen.sequences.min_step IS 'Lower bound of the adaptive segment size.';
COMMENT ON COLUMN id_gen.sequences.max_step IS 'Upper bound of the adaptive segment size.';
COMMENT ON COLUMN id_gen.sequences.buffer_seconds IS 'Seconds of traffic one segment should cover: step = clamp(min_step, max_step, rate x buffer_seconds).';
COMMENT ON COLUMN id_gen.sequences.preload_threshold IS 'Fraction of the current segment consumed when the standby segment is requested.';
COMMENT ON COLUMN id_gen.sequences.counters IS 'Independent counter groups (segment chains) used by gene_order_id, each serving a contiguous range of virtual nodes.';
COMMENT ON COLUMN id_gen.sequences.incarnation IS 'Identity of this sequence; a cache of a dropped sequence of the same name is never reused.';

COMMENT ON FUNCTION id_gen.shard_gene(bigint) IS
  'Shard gene 0..65535 of a bigint owner: (xxh64 ^ murmur3_x64_128.h1) & 0xFFFF over its 8 bytes little-endian. shard_gene(42) = 16043.';
COMMENT ON FUNCTION id_gen.shard_gene(text) IS
  'Shard gene 0..65535 of a text owner, hashed as UTF-8 bytes. shard_gene(''alice'') = 13795.';
COMMENT ON FUNCTION id_gen.shard_gene(uuid) IS 'Shard gene 0..65535 of a uuid owner, hashed as its 16 bytes.';
COMMENT ON FUNCTION id_gen.shard_gene(bytea) IS 'Shard gene 0..65535 of a bytea owner, hashed as its bytes.';
COMMENT ON FUNCTION id_gen.shard_of(bigint) IS 'Shard gene of a 64-bit id: (id >> 47) & 65535.';
COMMENT ON FUNCTION id_gen.shard_of(bytea) IS 'Shard gene of an id in byte form (8-byte or 16-byte big-endian).';
COMMENT ON FUNCTION id_gen.seq_of(bigint) IS 'Sequence part (low 47 bits) of a 64-bit id.';
COMMENT ON FUNCTION id_gen.seq_of(bytea) IS 'Sequence part of an id in byte form (47 or 111 bits).';
COMMENT ON FUNCTION id_gen.compose_id(integer, bigint) IS 'Builds gene << 47 | seq; gene 0..65535, seq 0..2^47-1.';
COMMENT ON FUNCTION id_gen.compose_id_bytes(integer, numeric) IS 'Builds the byte form: 8 bytes while seq < 2^47, else the 16-byte overflow form.';
COMMENT ON FUNCTION id_gen.next_segment_id(text) IS 'Next value of a named id_gen sequence, from the shared-memory segment cache. Never reissued, even after ROLLBACK or a crash.';
COMMENT ON FUNCTION id_gen.next_segment_ids(text, integer) IS 'n values of a named sequence for bulk loads, one row each.';
COMMENT ON FUNCTION id_gen.next_segment_ids_array(text, integer) IS 'n values of a named sequence as one bigint[].';
COMMENT ON FUNCTION id_gen.next_segment_ranges(text, bigint) IS 'n values of a named sequence as runs [first_id, last_id] of consecutive values (few rows even for huge n).';
COMMENT ON FUNCTION id_gen.create_sequence(text, bigint, bigint, bigint, bigint, integer, real, bigint, integer, text, bigint, text) IS 'Creates a named id_gen sequence, owned by the calling role; authority => a postgres_fdw server reserves its segments on that ID database.';
COMMENT ON FUNCTION id_gen.alter_sequence(text, bigint, bigint, bigint, integer, real, bigint, text, bigint, text) IS 'Changes the tuning, max_bulk or authority (a postgres_fdw server, or ''local'') of a named sequence; NULL keeps a setting; takes effect with the next segment. Owner only.';
COMMENT ON FUNCTION id_gen.drop_sequence(text, boolean) IS 'Drops a named sequence and forgets its cached segments. Owner only.';
COMMENT ON COLUMN id_gen.sequences.owner IS 'Role that owns the sequence (by name); it may alter, drop, grant and take values.';
COMMENT ON COLUMN id_gen.sequences.max_bulk IS 'Most values one next_segment_ids*/next_segment_ranges call may take (54000 beyond).';
COMMENT ON COLUMN id_gen.sequences.authority IS 'Foreign server (postgres_fdw) of the ID database whose id_gen.sequences reserves this sequence''s segments; NULL: this catalog.';
COMMENT ON FUNCTION id_gen.cache_status() IS 'Raw rows of the id_gen.status view.';
COMMENT ON FUNCTION id_gen.supervisor_counters() IS 'The move supervisor''s counters since the server started (shared memory): passes, failed passes, operations acted on, and when the last pass and the last failed pass ended (Unix time, seconds); no row without id_gen preloaded.';
COMMENT ON FUNCTION id_gen.cache_counters() IS 'The segment cache''s counters per cached sequence and counter group: failed reservations at an authority, calls whose wait ended at id_gen.refill_timeout, the last round trip of a reservation statement an authority answered (ms).';

-- Who may create sequences is a grant on create_sequence; everything else is checked
-- against the sequence's owner and USAGE grants inside the functions.
REVOKE EXECUTE ON FUNCTION id_gen.create_sequence(text, bigint, bigint, bigint, bigint, integer, real, bigint, integer, text, bigint, text) FROM PUBLIC;

-- Ownership and USAGE grants ----------------------------------------------------------------
CREATE FUNCTION id_gen.grant_usage(name text, role regrole, kind text DEFAULT NULL) RETURNS boolean
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$ SELECT id_gen.grant_usage($1, $2::text, $3) $$;
CREATE FUNCTION id_gen.revoke_usage(name text, role regrole, kind text DEFAULT NULL) RETURNS boolean
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$ SELECT id_gen.revoke_usage($1, $2::text, $3) $$;
CREATE FUNCTION id_gen.alter_sequence_owner(name text, new_owner regrole) RETURNS text
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$ SELECT id_gen.alter_sequence_owner($1, $2::text) $$;
CREATE FUNCTION id_gen.alter_serial_owner(name text, new_owner regrole) RETURNS text
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$ SELECT id_gen.alter_serial_owner($1, $2::text) $$;
COMMENT ON FUNCTION id_gen.grant_usage(text, text, text) IS 'Lets a role (or ''public'') take values of a sequence or serial; kind => ''sequence''/''serial'' when both exist. Owner only.';
COMMENT ON FUNCTION id_gen.grant_usage(text, regrole, text) IS 'grant_usage for a regrole.';
COMMENT ON FUNCTION id_gen.revoke_usage(text, text, text) IS 'Takes back a USAGE grant on a sequence or serial. Owner only.';
COMMENT ON FUNCTION id_gen.revoke_usage(text, regrole, text) IS 'revoke_usage for a regrole.';
COMMENT ON FUNCTION id_gen.alter_sequence_owner(text, text) IS 'Gives a sequence to another role (owner or superuser; non-superusers must be members of the new owner).';
COMMENT ON FUNCTION id_gen.alter_sequence_owner(text, regrole) IS 'alter_sequence_owner for a regrole.';
COMMENT ON FUNCTION id_gen.alter_serial_owner(text, text) IS 'Gives a serial to another role (owner or superuser; non-superusers must be members of the new owner).';
COMMENT ON FUNCTION id_gen.alter_serial_owner(text, regrole) IS 'alter_serial_owner for a regrole.';
COMMENT ON TABLE id_gen.usage_grants IS 'USAGE grants on sequences and serials (grantee ''public'' = PUBLIC). Change with id_gen.grant_usage / revoke_usage.';

-- Order numbers -------------------------------------------------------------------------
CREATE VIEW id_gen.order_no_keys AS
SELECT key_version,
       CASE WHEN is_current THEN 'current' ELSE 'decrypt only' END AS state,
       encode(kek_fingerprint, 'hex') AS kek_fingerprint,
       created_at,
       note
FROM id_gen.order_no_key_store;
GRANT SELECT ON id_gen.order_no_keys TO PUBLIC;
COMMENT ON VIEW id_gen.order_no_keys IS 'Order-number key versions and their states; never key material.';
COMMENT ON TABLE id_gen.order_no_key_store IS 'Order-number data keys, wrapped by the key-encryption key. Extension owner only.';

-- Functions that read keys run as the extension owner, with a pinned search_path.
ALTER FUNCTION id_gen.encode_order_no(bigint) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION id_gen.encode_order_no(bytea) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION id_gen.decode_order_no(uuid) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION id_gen.decode_order_no_bytes(uuid) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION id_gen.encode_order_no64(bigint, integer) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION id_gen.decode_order_no64(bigint, integer) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION id_gen.create_order_no_key(text) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION id_gen.set_current_order_no_key(integer) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

-- Decoding is an oracle: nobody may decode unless granted (GRANT EXECUTE ON FUNCTION
-- id_gen.decode_order_no(uuid) TO support_role). Key management is for the DBA.
REVOKE EXECUTE ON FUNCTION id_gen.decode_order_no(uuid) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION id_gen.decode_order_no_bytes(uuid) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION id_gen.decode_order_no64(bigint, integer) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION id_gen.create_order_no_key(text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION id_gen.set_current_order_no_key(integer) FROM PUBLIC;

COMMENT ON FUNCTION id_gen.encode_order_no(bigint) IS 'External order number (version-8 uuid) of an order id: gene in clear, sequence enciphered with FF1-AES256 under the current key version; tamper-evident.';
COMMENT ON FUNCTION id_gen.encode_order_no(bytea) IS 'External order number of an id in byte form (8-byte or 16-byte overflow form).';
COMMENT ON FUNCTION id_gen.decode_order_no(uuid) IS 'Order id of an external order number; a forged or altered number is an error (22023). Not executable by PUBLIC.';
COMMENT ON FUNCTION id_gen.decode_order_no_bytes(uuid) IS 'Order id of an external order number, as bytea (8 or 16 bytes). Not executable by PUBLIC.';
COMMENT ON FUNCTION id_gen.encode_order_no64(bigint, integer) IS 'Compact order number: 0 | gene | FF1-47 of the sequence under the given key version. Not tamper-evident.';
COMMENT ON FUNCTION id_gen.decode_order_no64(bigint, integer) IS 'Inverse of encode_order_no64. Not executable by PUBLIC.';
COMMENT ON FUNCTION id_gen.shard_of(uuid) IS 'Shard gene of an order number (its first 16 bits); needs no key.';
COMMENT ON FUNCTION id_gen.order_no_key_version(uuid) IS 'Key version recorded in an order number; needs no key.';
COMMENT ON FUNCTION id_gen.create_order_no_key(text) IS 'Creates a new order-number key version (random, stored wrapped); the first one becomes current.';
COMMENT ON FUNCTION id_gen.set_current_order_no_key(integer) IS 'Makes a key version the one used for new 128-bit order numbers; old versions keep decoding.';

-- Owner-affine ids and routing -------------------------------------------------------------
COMMENT ON FUNCTION id_gen.gene_order_id(text, bigint) IS 'shard_gene(owner) << 47 | next value of the sequence: every id of one owner lands in one shard. 22003 once the value passes 2^47-1.';
COMMENT ON FUNCTION id_gen.gene_order_id(text, text) IS 'gene_order_id for a text owner (hashed as UTF-8).';
COMMENT ON FUNCTION id_gen.gene_order_id(text, uuid) IS 'gene_order_id for a uuid owner (hashed as its 16 bytes).';
COMMENT ON FUNCTION id_gen.gene_order_id_bytes(text, bigint) IS 'gene_order_id as bytea: 8 bytes while the value fits 47 bits, the 16-byte overflow form after.';
COMMENT ON FUNCTION id_gen.gene_order_id_bytes(text, text) IS 'gene_order_id_bytes for a text owner.';
COMMENT ON FUNCTION id_gen.gene_order_id_bytes(text, uuid) IS 'gene_order_id_bytes for a uuid owner.';
COMMENT ON FUNCTION id_gen.fill_gene_id() IS 'BEFORE INSERT OR UPDATE row trigger: fill_gene_id(''id_col'', ''owner_col'', ''sequence'') fills a NULL bigint/bytea id from the owner column; an UPDATE that moves the owner to another gene while keeping the id is refused (23514).';
COMMENT ON FUNCTION id_gen.shard_routing_changed() IS 'On a shard: every backend reloads its routing view (route version, partitions of distributed tables) once this transaction commits. Called by the shard functions that change them.';
REVOKE EXECUTE ON FUNCTION id_gen.shard_routing_changed() FROM PUBLIC;
COMMENT ON FUNCTION id_gen.partition_gene_range(pg_node_tree) IS 'The genes {lower, upper} of a range partition of a distributed table, decoded from its bound (pg_class.relpartbound); NULL for a DEFAULT partition, a bound from MINVALUE or any other bound. What id_gen.shard_routing_snapshot() reads per partition.';
COMMENT ON FUNCTION id_gen.shard_owns(regclass, bigint) IS 'On a shard: whether the gene of an id is one of the ranges this shard owns of a distributed table, as id_gen.shard_tables records them (false for a table not distributed here and for negative ids). Cached per backend as a bitmap of the genes per table, reloaded after every change of the shard''s routing: one check and one bit per call. The ownership test of the layout by ownership (docs/design.md section 12).';
COMMENT ON FUNCTION id_gen.shard_fenced(regclass, bigint) IS 'On a shard: whether a move has fenced the gene of an id in a table laid out by ownership for its cut-over (id_gen.shard_tables.fenced_ranges): writes, route claims and lookups by id of it get IG002 for the few milliseconds until the move lifts the fence or takes the gene away. Cached with id_gen.shard_owns.';
COMMENT ON FUNCTION id_gen.shard_owned_ranges(regclass) IS 'On a shard: the owned gene ranges of a distributed table as id_gen.shard_owns sees them in this backend (sorted, adjacent ranges merged).';
COMMENT ON FUNCTION id_gen.gene_route_hash_extended(bigint, bigint) IS 'Support function 2 of the operator class id_gen.gene_route_ops: the hash that puts an id into the hash partition (modulus 1024) of the slot of the shard its gene routes to (the seed is ignored).';
COMMENT ON FUNCTION id_gen.gene_route_hash(bigint) IS 'Support function 1 of the operator class id_gen.gene_route_ops: the slot of the shard an id routes to (1023: none).';
COMMENT ON FUNCTION id_gen.route_slot(bigint) IS 'The slot (id_gen.shard_slots) of the shard an id routes to, as the hash partitions of id_gen.gene_route_ops see it now; NULL when its gene has no route or its shard no slot.';
COMMENT ON FUNCTION id_gen.route_hash_changed() IS 'Called by the statement triggers of id_gen.shard_routes and id_gen.shard_slots: re-plans the tables partitioned by id_gen.gene_route_ops and makes every backend reload its shard slots once this transaction commits.';
REVOKE EXECUTE ON FUNCTION id_gen.route_hash_changed() FROM PUBLIC;
-- src/connect_bound.rs
COMMENT ON FUNCTION id_gen.arm_connect_bound(integer) IS 'Arms a timer that interrupts a wait (a connect to another server) after ms, like a cancel; id_gen.remote_send bounds its connects with it. Superuser only.';
REVOKE EXECUTE ON FUNCTION id_gen.arm_connect_bound(integer) FROM PUBLIC;
COMMENT ON FUNCTION id_gen.disarm_connect_bound() IS 'Stops the timer of id_gen.arm_connect_bound; whether it fired (its cancel is then withdrawn if nothing took it). Superuser only.';
REVOKE EXECUTE ON FUNCTION id_gen.disarm_connect_bound() FROM PUBLIC;
-- src/direct_read/mod.rs
COMMENT ON FUNCTION id_gen.direct_read_connections() IS 'On a coordinator: this session''s connections for direct reads (id_gen.direct_reads): the shard''s foreign server, the role whose user mapping it uses, when it connected, the reads it served and whether a read is on it now. A SELECT sent in a transaction of its own reads each shard it reaches over them in one round trip instead of postgres_fdw''s cursor; they are closed with the session, or when the server or user mapping changes.';
-- src/transaction_marks.rs
COMMENT ON FUNCTION id_gen.quiet_ddl() IS 'Marks the rest of the transaction as id_gen''s own DDL on distributed tables (id_gen.follow_distributed_ddl then does nothing). Superuser only: not a setting any session could SET.';
REVOKE EXECUTE ON FUNCTION id_gen.quiet_ddl() FROM PUBLIC;
COMMENT ON FUNCTION id_gen.ddl_is_quiet() IS 'Whether id_gen.quiet_ddl() ran in this transaction (the DDL follower asks).';
COMMENT ON FUNCTION id_gen.written_by_this_transaction(bigint) IS 'Whether a transaction id (a row''s xmin, as bigint) is the current transaction or one of its subtransactions that has not rolled back.';
COMMENT ON FUNCTION id_gen.check_route(integer, text) IS 'Validates a route (gene 0..65535, shard name 1..63 bytes).';
COMMENT ON FUNCTION id_gen.route_plan_split(text, text[]) IS 'Proposes routes that split every gene range of a shard into nearly equal parts; apply each row with set_route.';
COMMENT ON FUNCTION id_gen.route_plan_merge(text[], text) IS 'Proposes routes that move the ranges of the given shards to one shard; apply each row with set_route.';
COMMENT ON TABLE id_gen.shard_routes IS 'Route table: a gene goes to the first row whose upper_gene >= gene. Change with id_gen.set_route / id_gen.drop_route.';

-- The route table's view, lookups and changes are in sql/cluster/routing.sql.

-- Ad hoc decoding: where do the rows of a table live?
CREATE FUNCTION id_gen.shard_histogram(tbl regclass, id_column name)
RETURNS TABLE (shard text, lower_gene integer, upper_gene integer, rows bigint)
LANGUAGE plpgsql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM id_gen.shard_routes) THEN
    RAISE EXCEPTION 'id_gen: the route table id_gen.shard_routes is empty'
      USING ERRCODE = '55000', HINT = 'Use id_gen.gene_histogram for a view by gene range without routes.';
  END IF;
  RETURN QUERY EXECUTE format(
    'SELECT r.shard, r.lower_gene, r.upper_gene, count(t.g)
       FROM id_gen.route_ranges r
       LEFT JOIN (SELECT id_gen.shard_of(%I) AS g FROM %s) t ON t.g BETWEEN r.lower_gene AND r.upper_gene
      GROUP BY 1, 2, 3 ORDER BY 2', id_column, tbl);
END $$;
COMMENT ON FUNCTION id_gen.shard_histogram(regclass, name) IS 'Rows of a table per route range (by the gene of its id column): finds hot shards.';

CREATE FUNCTION id_gen.gene_histogram(tbl regclass, id_column name, buckets integer DEFAULT 16)
RETURNS TABLE (lower_gene integer, upper_gene integer, rows bigint)
LANGUAGE plpgsql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF buckets < 1 OR buckets > 65536 THEN
    RAISE EXCEPTION 'id_gen: buckets must be between 1 and 65536, got %', buckets USING ERRCODE = '22023';
  END IF;
  RETURN QUERY EXECUTE format(
    'SELECT (b * 65536 / %1$s)::int, ((b + 1) * 65536 / %1$s - 1)::int, count(t.g)
       FROM generate_series(0, %1$s - 1) b
       LEFT JOIN (SELECT id_gen.shard_of(%2$I) AS g FROM %3$s) t ON t.g::bigint * %1$s / 65536 = b
      GROUP BY b ORDER BY b', buckets, id_column, tbl);
END $$;
COMMENT ON FUNCTION id_gen.gene_histogram(regclass, name, integer) IS 'Rows of a table per equal-width gene range (virtual-node buckets), without needing routes.';

-- Dated serials, gene-in-low-bits ids, snowflake ids ----------------------------------------
COMMENT ON TABLE id_gen.serials IS 'Dated business serials: format, width, partition, time zone, and the counter of the current period (period_max, moved only by the refill worker).';
COMMENT ON FUNCTION id_gen.create_serial(text, text, integer, integer, integer, text, integer, text) IS 'Creates a dated serial: prefix || date (YYYY YY MM DD HH24 MI SS) || [2-digit partition] || zero-padded serial restarting every period.';
COMMENT ON FUNCTION id_gen.drop_serial(text, boolean) IS 'Drops a dated serial. Owner only.';
COMMENT ON COLUMN id_gen.serials.owner IS 'Role that owns the serial (by name); it may drop, grant and take numbers.';
COMMENT ON FUNCTION id_gen.next_serial(text, text) IS 'Next dated serial number, e.g. merchant || 20261121 || 01 || 00000042; never repeats within a period; 2200H when the period''s serials are used up.';
REVOKE EXECUTE ON FUNCTION id_gen.create_serial(text, text, integer, integer, integer, text, integer, text) FROM PUBLIC;
COMMENT ON FUNCTION id_gen.gene_mod_id(text, bigint, integer) IS 'Gene in the low bits (基因法): (next value << shard_bits) | owner mod 2^shard_bits, so id % 2^k = owner % 2^k for modulo sharding.';
COMMENT ON FUNCTION id_gen.gene_mod_of(bigint, integer) IS 'The low shard_bits bits of a gene_mod_id (the owner''s remainder).';
COMMENT ON FUNCTION id_gen.snowflake_id() IS 'Time-ordered id: 0 | ms since id_gen.snowflake_epoch_ms | node | per-ms sequence. Never repeats, even when the clock goes backwards.';
COMMENT ON FUNCTION id_gen.snowflake_id(bigint) IS 'Snowflake id of the gene layout (id_gen.snowflake_gene_bits > 0): owner mod 2^gene_bits in the low bits.';
COMMENT ON FUNCTION id_gen.snowflake_time(bigint) IS 'Creation time of a snowflake id.';
COMMENT ON FUNCTION id_gen.snowflake_node(bigint) IS 'Node id of a snowflake id.';
COMMENT ON FUNCTION id_gen.snowflake_seq(bigint) IS 'Per-millisecond sequence of a snowflake id.';
COMMENT ON FUNCTION id_gen.snowflake_gene(bigint) IS 'Owner gene (low bits) of a snowflake id of the gene layout.';
COMMENT ON FUNCTION id_gen.snowflake_status() IS 'Snowflake generator state: node, layout, last timestamp, persisted high-water mark, clock.';

-- Key export for the MariaDB plugin (docs/guide/mariadb.md "MySQL / MariaDB"): superusers only.
REVOKE ALL ON FUNCTION id_gen.export_order_no_keys() FROM PUBLIC;
COMMENT ON FUNCTION id_gen.export_order_no_keys() IS 'The order-number data keys in their KEK-wrapped form only (key_version, wrapped, kek_fingerprint, is_current), for the MariaDB plugin that holds the same KEK. Superusers only (42501).';
