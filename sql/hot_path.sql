-- Hand-written V1 functions (see sequences.rs): the hot path of DEFAULT expressions.
CREATE FUNCTION id_gen.next_segment_id(seq text) RETURNS bigint
  LANGUAGE c VOLATILE STRICT PARALLEL UNSAFE
  AS 'MODULE_PATHNAME', 'id_gen_next_segment_id';
