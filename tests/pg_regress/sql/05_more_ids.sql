-- The seeds' other ID systems: gene in the low bits, dated serials, snowflake ids.
-- (The regress cluster runs with id_gen.snowflake_node_id = 7.)

-- 1. Gene in the low bits (基因法): id % 2^k = owner % 2^k, so modulo sharding by id
--    keeps an owner's rows on the owner's shard.
SELECT id_gen.create_sequence('gm', step => 1000) AS created;
SELECT count(*) AS owners, count(DISTINCT id) AS distinct_ids,
       bool_and(id % 16 = owner % 16) AS mod_16_matches,
       bool_and(id_gen.gene_mod_of(id, 4) = owner % 16) AS decoded
FROM (SELECT o AS owner, id_gen.gene_mod_id('gm', o, 4) AS id
      FROM (SELECT (x::bigint * 2654435761) % 1000000007 AS o FROM generate_series(1, 100000) x) s) t;
SELECT bool_and(id % 1024 = owner % 1024) AS mod_1024_matches,
       bool_and((id & 1023) = (owner & 1023)) AS low_bits_match
FROM (SELECT o AS owner, id_gen.gene_mod_id('gm', o, 10) AS id FROM generate_series(1::bigint, 20000) o) t;
-- Negative owners: the low bits match (id & (2^k-1) = owner & (2^k-1)); route with &, not %.
SELECT bool_and((id_gen.gene_mod_id('gm', -o, 8) & 255) = (-o & 255)) AS negative_low_bits
FROM generate_series(1::bigint, 1000) o;
SELECT try($$SELECT id_gen.gene_mod_id('gm', 1, 0)$$);
SELECT try($$SELECT id_gen.gene_mod_id('gm', 1, 17)$$);
SELECT id_gen.create_sequence('gm_big', start => 140737488355327) AS created;
-- 2^47-1 still fits 16 shard bits (63 - 16 = 47 bits of sequence); 2^47 does not.
SELECT id_gen.gene_mod_id('gm_big', 1, 16) & 65535 AS last_fitting_low_bits;
SELECT try($$SELECT id_gen.gene_mod_id('gm_big', 1, 16)$$);
SELECT try($$SELECT id_gen.gene_mod_of(-1, 4)$$);

-- 2. Dated business serials: merchant + date + partition + zero-padded serial.
SELECT id_gen.create_serial('pay', 'YYYYMMDD', width => 6, partition => 1, max_length => 26,
                            time_zone => 'Asia/Shanghai') AS created;
SELECT s ~ '^M000000001[0-9]{8}01[0-9]{6}$' AS shape_ok, length(s) AS len
FROM (SELECT id_gen.next_serial('pay', 'M000000001') AS s) x;
SELECT count(*) AS n, count(DISTINCT s) AS distinct_n,
       bool_and(substr(s, 11, 8) = to_char(clock_timestamp() AT TIME ZONE 'Asia/Shanghai', 'YYYYMMDD')) AS todays_date
FROM (SELECT id_gen.next_serial('pay', 'M000000001') AS s FROM generate_series(1, 500)) x;
SELECT try($$SELECT id_gen.next_serial('pay', 'M0000000012')$$);
-- Crossing midnight (Asia/Shanghai) with the test-only clock offset: the counter
-- restarts, no serial carries the wrong date, nothing repeats.
-- (One DO block, so the clock is set and used without a statement boundary between.)
CREATE TEMP TABLE midnight (n int, s text);
DO $$
BEGIN
  PERFORM set_config('id_gen.test_clock_offset',
    (extract(epoch FROM ((date_trunc('day', clock_timestamp() AT TIME ZONE 'Asia/Shanghai') + interval '1 day')
                          AT TIME ZONE 'Asia/Shanghai') - clock_timestamp()) * 1000 - 300)::bigint::text, false);
  FOR i IN 1..16 LOOP
    INSERT INTO midnight VALUES (i, id_gen.next_serial('pay', 'M000000001'));
    PERFORM pg_sleep(0.04);
  END LOOP;
END $$;
SELECT count(DISTINCT substr(s, 11, 8)) AS dates, count(DISTINCT s) AS distinct_serials,
       bool_and(s = ANY (SELECT s FROM midnight)) AS all_kept
FROM midnight;
-- After midnight the serial restarts at 000001, in order.
SELECT (array_agg(right(s, 6) ORDER BY n) FILTER (WHERE substr(s, 11, 8) = (SELECT max(substr(s, 11, 8)) FROM midnight)))[1:2]
       AS first_of_new_day
FROM midnight;
-- Before midnight: yesterday's date only on serials taken before it (dates never go back).
SELECT bool_and(d >= prev_d) AS dates_monotonic
FROM (SELECT substr(s, 11, 8) AS d, lag(substr(s, 11, 8)) OVER (ORDER BY n) AS prev_d FROM midnight) x
WHERE prev_d IS NOT NULL;
RESET id_gen.test_clock_offset;
-- Daylight saving ends during a day (America/New_York, 2026-11-01 02:00 EDT -> 01:00 EST):
-- the date text stays the same, so the counter continues instead of restarting.
SELECT id_gen.create_serial('ny', 'YYYYMMDD', width => 4, time_zone => 'America/New_York') AS created;
CREATE TEMP TABLE dst (n int, s text);
DO $$
BEGIN
  PERFORM set_config('id_gen.test_clock_offset',
    (extract(epoch FROM timestamptz '2026-11-01 05:30:00+00' - clock_timestamp()) * 1000)::bigint::text, false);
  FOR i IN 1..3 LOOP INSERT INTO dst VALUES (i, id_gen.next_serial('ny')); END LOOP;
  PERFORM set_config('id_gen.test_clock_offset',
    (extract(epoch FROM timestamptz '2026-11-01 07:30:00+00' - clock_timestamp()) * 1000)::bigint::text, false);
  FOR i IN 4..6 LOOP INSERT INTO dst VALUES (i, id_gen.next_serial('ny')); END LOOP;
END $$;
SELECT array_agg(s ORDER BY n) AS across_the_dst_change FROM dst;
RESET id_gen.test_clock_offset;
-- A period's serial space is used up: an error that names the period, never a wrap.
SELECT id_gen.create_serial('tiny', 'YYYY', width => 1, max_length => 10, time_zone => 'UTC', step => 4) AS created;
SELECT array_agg(right(s, 1)) AS all_nine, bool_and(length(s) = 5) AS lengths_ok
FROM (SELECT id_gen.next_serial('tiny') AS s FROM generate_series(1, 9)) x;
SELECT regexp_replace(try($$SELECT id_gen.next_serial('tiny')$$), 'period \d{4}', 'period YYYY') AS exhausted;
-- Errors.
SELECT try($$SELECT id_gen.create_serial('pay')$$);
SELECT try($$SELECT id_gen.next_serial('nope')$$);
SELECT try($$SELECT id_gen.create_serial('b1', 'YYYYMMDDHH')$$);
SELECT try($$SELECT id_gen.create_serial('b2', 'YYYYDD')$$);
SELECT try($$SELECT id_gen.create_serial('b3', width => 0)$$);
SELECT try($$SELECT id_gen.create_serial('b4', partition => 100)$$);
SELECT try($$SELECT id_gen.create_serial('b5', time_zone => 'Mars/Olympus')$$);
SELECT try($$SELECT id_gen.create_serial('b6', 'YYYYMMDDHH24MISS', width => 8, max_length => 20)$$);
SELECT try($$SELECT id_gen.create_serial(repeat('s', 41))$$);
SELECT id_gen.drop_serial('tiny') AS dropped;
SELECT try($$SELECT id_gen.next_serial('tiny')$$);

-- 3. Snowflake ids: unique and increasing across calls, node 7, time decodes.
CREATE TEMP TABLE sf AS SELECT n, id_gen.snowflake_id() AS id FROM generate_series(1, 20000) n;
SELECT count(DISTINCT id) AS distinct_ids,
       bool_and(id > 0) AS positive,
       bool_and(id_gen.snowflake_node(id) = 7) AS node_7,
       bool_and(abs(extract(epoch FROM id_gen.snowflake_time(id) - clock_timestamp())) < 60) AS time_decodes
FROM sf;
SELECT bool_and(id > prev) AS increasing
FROM (SELECT id, lag(id) OVER (ORDER BY n) AS prev FROM sf) x WHERE prev IS NOT NULL;
SELECT node_id, time_bits, node_bits, seq_bits, gene_bits, epoch_ms, persisted_ms >= last_ms AS persisted_ahead,
       max_lead_ms
FROM id_gen.snowflake_status();
-- The clock goes back 2 s (within id_gen.snowflake_max_lead = 5 s): ids keep increasing.
SELECT max(id) AS before_max FROM sf \gset
SET id_gen.test_clock_offset = '-2s';
SELECT min(id) > :before_max AS still_increasing, count(DISTINCT id) AS distinct_ids
FROM (SELECT id_gen.snowflake_id() AS id FROM generate_series(1, 1000)) x;
-- Back by a minute: refused with the skew named, never a duplicate.
SET id_gen.test_clock_offset = '-60s';
SELECT regexp_replace(try($$SELECT id_gen.snowflake_id()$$), '\d+ ms', 'N ms', 'g') AS refused;
RESET id_gen.test_clock_offset;
SELECT id_gen.snowflake_id() > :before_max AS resumes;
SELECT try($$SELECT id_gen.snowflake_id(42)$$);
SELECT try($$SELECT id_gen.snowflake_time(-1)$$);

-- The contract of these functions.
SELECT p.oid::regprocedure AS function, p.provolatile AS volatility, p.proisstrict AS strict,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_execute,
       obj_description(p.oid, 'pg_proc') IS NOT NULL AS commented
FROM pg_proc p
WHERE p.pronamespace = 'id_gen'::regnamespace
  AND (p.proname LIKE '%serial%' OR p.proname LIKE 'snowflake%' OR p.proname LIKE 'gene_mod%')
ORDER BY p.oid::regprocedure::text;
