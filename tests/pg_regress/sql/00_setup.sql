-- Setup shared by the regress files (they run in order, in one database).
CREATE EXTENSION id_gen;
-- try(q): runs q and prints 'ok' or 'SQLSTATE: message [hint]' so golden files show
-- the error contract without depending on server source locations.
CREATE FUNCTION public.try(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE h text;
BEGIN
  EXECUTE q;
  RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS h = PG_EXCEPTION_HINT;
  RETURN SQLSTATE || ': ' || SQLERRM || CASE WHEN h <> '' THEN ' [hint: ' || h || ']' ELSE '' END;
END $$;
SELECT extname, extversion IS NOT NULL AS has_version, extrelocatable,
       extnamespace::regnamespace AS schema
FROM pg_extension WHERE extname = 'id_gen';
