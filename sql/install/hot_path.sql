-- Hand-written V1 functions (see sequences.rs): the hot path of DEFAULT expressions.
CREATE FUNCTION id_gen.next_segment_id(seq text) RETURNS bigint
  LANGUAGE c VOLATILE STRICT PARALLEL UNSAFE
  AS 'MODULE_PATHNAME', 'id_gen_next_segment_id';

-- The benchmark baseline of the per-call access check (bench/bench.sh): the same hot path
-- without comparing the call site's access stamp. Superusers only: they pass every
-- access check anyway, so it changes nobody's rights.
CREATE FUNCTION id_gen.next_segment_id_unchecked(seq text) RETURNS bigint
  LANGUAGE c VOLATILE STRICT PARALLEL UNSAFE
  AS 'MODULE_PATHNAME', 'id_gen_next_segment_id_unchecked';
REVOKE ALL ON FUNCTION id_gen.next_segment_id_unchecked(text) FROM PUBLIC;
COMMENT ON FUNCTION id_gen.next_segment_id_unchecked(text) IS 'Benchmark baseline: next_segment_id without the per-call access-stamp comparison (the check on first use still runs). Superusers only.';
