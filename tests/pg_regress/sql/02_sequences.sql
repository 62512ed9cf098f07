-- Named sequences served from the shared segment cache (DESIGN.md §3).

SELECT id_gen.create_sequence('orders', step => 100) AS created;
SELECT name, max_id, step, min_step, max_step, buffer_seconds, preload_threshold, counters,
       max_value = 9223372036854775807 AS default_max, incarnation <> 0 AS has_incarnation
FROM id_gen.sequences WHERE name = 'orders';

-- Values start at `start`, increase, never repeat.
SELECT id_gen.next_segment_id('orders') AS first_value;
SELECT count(*) AS n, count(DISTINCT v) AS distinct_n, min(v) > 1 AS above_first,
       bool_and(v > 1) AS all_above
FROM (SELECT id_gen.next_segment_id('orders') AS v FROM generate_series(1, 1000)) s;
-- In one session, values come out strictly increasing.
SELECT bool_and(v > prev) AS strictly_increasing
FROM (SELECT v, lag(v) OVER (ORDER BY o) AS prev
      FROM (SELECT id_gen.next_segment_id('orders') AS v, o FROM generate_series(1, 500) o) a) b
WHERE prev IS NOT NULL;
-- The catalog high-water mark covers every value handed out.
SELECT max_id >= 1501 AS high_water_covers FROM id_gen.sequences WHERE name = 'orders';

-- Bulk: one call, n distinct values; runs are consecutive inside a segment.
SELECT count(*) AS n, count(DISTINCT v) AS distinct_n FROM id_gen.next_segment_ids('orders', 5000) v;
SELECT count(*) AS zero_rows FROM id_gen.next_segment_ids('orders', 0);
SELECT cardinality(a) AS n, (SELECT count(DISTINCT v) FROM unnest(a) v) AS distinct_n
FROM (SELECT id_gen.next_segment_ids_array('orders', 3000) AS a) s;
SELECT sum(last_id - first_id + 1) AS n, bool_and(last_id >= first_id) AS runs_ok,
       count(*) <= 3 AS few_runs
FROM id_gen.next_segment_ranges('orders', 250000);
-- A request larger than a segment is one exact reservation (one run); one a segment
-- covers comes from the segments (at most two runs); either way above earlier values.
SELECT count(*) <= 2 AS few_runs, sum(last_id - first_id + 1) AS n, min(first_id) > 1501 AS above_earlier
FROM id_gen.next_segment_ranges('orders', 12345);
SELECT try($$SELECT id_gen.next_segment_ids('orders', -1)$$);
SELECT try($$SELECT id_gen.next_segment_ranges('orders', -5)$$);

-- A DEFAULT on a primary key.
CREATE TABLE seq_orders (id bigint PRIMARY KEY DEFAULT id_gen.next_segment_id('orders'), note text);
INSERT INTO seq_orders (note) SELECT 'n' || g FROM generate_series(1, 300) g;
SELECT count(*) AS rows, count(DISTINCT id) AS distinct_ids FROM seq_orders;

-- ROLLBACK never causes reuse: values taken in an aborted transaction stay used.
CREATE TEMP TABLE seen AS SELECT id_gen.next_segment_id('orders') AS v FROM generate_series(1, 10);
BEGIN;
CREATE TEMP TABLE rolled AS SELECT id_gen.next_segment_id('orders') AS v FROM generate_series(1, 200);
ROLLBACK;
BEGIN;
SELECT id_gen.next_segment_id('orders') AS v INTO TEMP keep FROM generate_series(1, 200);
SELECT min(v) > (SELECT max(v) FROM seen) + 200 AS no_reuse_after_rollback FROM keep;
COMMIT;

-- Status view: one row per cached sequence, with its columns.
SELECT database = current_database() AS this_db, sequence, counter_group, state,
       current_first <= current_last AS has_segment, current_fill BETWEEN 0 AND 1 AS fill_ok,
       step > 0 AS step_ok, refills >= 1 AS refilled, calls >= 2000 AS counted,
       worker_pid IS NOT NULL AS has_worker
FROM id_gen.status WHERE sequence = 'orders';
SELECT array_agg(attname ORDER BY attnum) AS status_columns
FROM pg_attribute WHERE attrelid = 'id_gen.status'::regclass AND attnum > 0;
SELECT count(*) = 1 AS worker_in_pg_stat_activity
FROM pg_stat_activity WHERE backend_type = 'id_gen refill worker' AND datname = current_database();

-- Errors.
SELECT try($$SELECT id_gen.create_sequence('orders')$$);
SELECT try($$SELECT id_gen.next_segment_id('missing')$$);
SELECT try($$SELECT id_gen.next_segment_id('bad name')$$);
SELECT try($$SELECT id_gen.next_segment_id('')$$);
SELECT try($$SELECT id_gen.next_segment_id(repeat('x', 64))$$);
SELECT try($$SELECT id_gen.next_segment_id(E'orders\x1f20261121\x1f0')$$);
SELECT try($$SELECT count(*) FROM id_gen.next_segment_ids('orders', 200000000)$$);
SELECT try($$SELECT id_gen.create_sequence('x; drop table')$$);
SELECT try($$SELECT id_gen.create_sequence('s_bad', step => 0)$$);
SELECT try($$SELECT id_gen.create_sequence('s_bad', step => 10, min_step => 20)$$);
SELECT try($$SELECT id_gen.create_sequence('s_bad', step => 10, max_step => 5)$$);
SELECT try($$SELECT id_gen.create_sequence('s_bad', buffer_seconds => 0)$$);
SELECT try($$SELECT id_gen.create_sequence('s_bad', preload_threshold => 1)$$);
SELECT try($$SELECT id_gen.create_sequence('s_bad', start => -1)$$);
SELECT try($$SELECT id_gen.create_sequence('s_bad', counters => 65)$$);
SELECT try($$SELECT id_gen.alter_sequence('missing', step => 5)$$);
SELECT try($$SELECT id_gen.drop_sequence('missing')$$);
SELECT id_gen.drop_sequence('missing', if_exists => true) AS dropped_missing;
SELECT id_gen.next_segment_id(NULL) IS NULL AS strict_null;

-- Exhaustion: a configured maximum gives 2200H, never a wrap or a repeat.
SELECT id_gen.create_sequence('tiny', start => 1, step => 3, max_value => 5) AS created;
SELECT array_agg(id_gen.next_segment_id('tiny')) AS all_values FROM generate_series(1, 5);
SELECT try($$SELECT id_gen.next_segment_id('tiny')$$);
SELECT state FROM id_gen.status WHERE sequence = 'tiny';
SELECT try($$SELECT id_gen.alter_sequence('tiny', max_value => 3)$$);
SELECT id_gen.alter_sequence('tiny', max_value => 7) AS altered;
SELECT array_agg(id_gen.next_segment_id('tiny')) AS after_raise FROM generate_series(1, 2);

-- Bulk requests never grind: 10^11 values are one run at once; a request larger than
-- what is left before max_value fails at once with 2200H and takes nothing.
SELECT id_gen.create_sequence('huge', step => 1000, max_bulk => 9223372036854775807) AS created;
SELECT id_gen.next_segment_id('huge') AS first_value;
SELECT max_id AS max_id_before FROM id_gen.sequences WHERE name = 'huge';
SELECT count(*) AS runs, sum(last_id - first_id + 1) AS n, min(first_id) > 1000 AS above_segment
FROM id_gen.next_segment_ranges('huge', 100000000000);
SELECT max_id - 1000 AS reserved_beyond_the_segment FROM id_gen.sequences WHERE name = 'huge';
SELECT try($$SELECT * FROM id_gen.next_segment_ranges('huge', 9223372036854775807)$$);
SELECT max_id - 1000 AS unchanged_after_refusal FROM id_gen.sequences WHERE name = 'huge';
SELECT id_gen.create_sequence('small_left', step => 10, max_value => 1000) AS created;
SELECT try($$SELECT * FROM id_gen.next_segment_ranges('small_left', 1001)$$);
SELECT count(*) AS runs, sum(last_id - first_id + 1) AS n FROM id_gen.next_segment_ranges('small_left', 1000);
SELECT max_id AS max_id_after FROM id_gen.sequences WHERE name = 'small_left';

-- Cold start: a burst from one backend on a sequence created with step 100 grows the
-- step geometrically (x4 per refill while callers wait), so 2M calls wait few times.
SELECT id_gen.create_sequence('cold', step => 100) AS created;
SELECT count(id_gen.next_segment_id('cold')) AS n FROM generate_series(1, 2000000);
SELECT waits <= 20 AS few_waits, refills <= 20 AS few_refills, step <= 1000000 AS bounded
FROM id_gen.status WHERE sequence = 'cold';

-- alter_sequence takes effect with the next segment.
SELECT id_gen.create_sequence('alt', step => 10, max_step => 10) AS created;
SELECT id_gen.next_segment_id('alt') AS v1;
SELECT id_gen.alter_sequence('alt', step => 50, max_step => 50, min_step => 50) AS altered;
SELECT count(*) AS taken FROM (SELECT id_gen.next_segment_id('alt') FROM generate_series(1, 60)) s;
SELECT step, min_step, max_step FROM id_gen.sequences WHERE name = 'alt';
SELECT bool_or(step = 50) AS new_step_seen FROM id_gen.status WHERE sequence = 'alt';

-- Dropped while cached: the cache forgets it; re-created, it starts afresh.
SELECT id_gen.create_sequence('gone', start => 1000, step => 10) AS created;
SELECT id_gen.next_segment_id('gone') AS before_drop;
SELECT id_gen.drop_sequence('gone') AS dropped;
SELECT count(*) AS cached_after_drop FROM id_gen.status WHERE sequence = 'gone';
SELECT try($$SELECT id_gen.next_segment_id('gone')$$);
SELECT id_gen.create_sequence('gone', start => 5, step => 10) AS recreated;
SELECT id_gen.next_segment_id('gone') AS after_recreate;

-- A catalog row deleted behind id_gen's back: the worker finds no row, frees the slot,
-- and callers get 42704.
SELECT id_gen.create_sequence('sneaky', step => 5, max_step => 5) AS created;
SELECT id_gen.next_segment_id('sneaky') AS v;
DELETE FROM id_gen.sequences WHERE name = 'sneaky';
-- (Whether the caller or the worker notices first decides between two wordings of the
-- same 42704: "(it was dropped)" and its hint, or the plain one; both are normalised.)
SELECT regexp_replace(regexp_replace(try($$SELECT max(id_gen.next_segment_id('sneaky')) FROM generate_series(1, 10)$$),
                                     ' \(it was dropped\)', ''),
                      'Create it again with id_gen.create_sequence\.',
                      'Create it with SELECT id_gen.create_sequence(''name''); existing ones are listed in id_gen.sequences.') AS after_delete;
SELECT count(*) AS cached FROM id_gen.status WHERE sequence = 'sneaky';

-- Privileges: ordinary roles use sequences and read the catalog, but cannot change it.
CREATE ROLE idg_app LOGIN;
GRANT CREATE ON SCHEMA public TO idg_app;
SELECT id_gen.grant_usage('orders', 'idg_app') AS granted;
SET ROLE idg_app;
SELECT id_gen.next_segment_id('orders') > 0 AS app_can_take;
SELECT count(*) > 0 AS app_can_read FROM id_gen.sequences;
SELECT try($$UPDATE id_gen.sequences SET max_id = 0$$);
SELECT try($$SELECT id_gen.create_sequence('app_seq')$$);
SELECT try($$SELECT id_gen.drop_sequence('orders')$$);
RESET ROLE;
SELECT id_gen.revoke_usage('orders', 'idg_app') AS revoked;
REVOKE CREATE ON SCHEMA public FROM idg_app;
DROP ROLE idg_app;

-- The catalog is dumped with the data (pg_extension_config_dump).
SELECT extconfig::regclass[] AS dumped_tables FROM pg_extension WHERE extname = 'id_gen';

-- The management functions' contract.
SELECT p.oid::regprocedure AS function, p.provolatile AS volatility, p.proparallel AS parallel,
       obj_description(p.oid, 'pg_proc') IS NOT NULL AS commented
FROM pg_proc p
WHERE p.pronamespace = 'id_gen'::regnamespace
  AND p.proname IN ('next_segment_id', 'next_segment_ids', 'next_segment_ids_array', 'next_segment_ranges', 'create_sequence', 'alter_sequence', 'drop_sequence')
ORDER BY p.oid::regprocedure::text;
SELECT name, setting, context FROM pg_settings WHERE name LIKE 'id_gen.%' ORDER BY name;
