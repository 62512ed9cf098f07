-- Catalog changes, 0.7.15 -> 0.7.16 (by hand): the metric functions of sequences and
-- authorities return more columns (failed reservations at an authority, calls that timed out
-- waiting, the authority's round trip), read from a new function of the segment cache,
-- id_gen.cache_counters(): they and the view built on them are dropped here and made again by
-- sql/cluster/metrics.sql. The rest is code: a shard reads a claim carried on BEGIN
-- (/* id_gen.route_claim=G,V */ BEGIN) and offers it to clients through the setting
-- id_gen.routing_protocol (docs/routing-protocol.md §3); the refill worker retries a failed
-- authority every 200 ms.
DROP VIEW id_gen.metrics;
DROP FUNCTION id_gen.metrics_sequences();
DROP FUNCTION id_gen.metrics_authorities();
DROP FUNCTION id_gen.metrics_cache_slots();
-- @rust-function cache_counters
