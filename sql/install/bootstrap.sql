-- id_gen catalog, created before the functions (pgrx "bootstrap" section).
--
-- id_gen.sequences holds one row per named sequence. Rows, not relations: thousands of
-- tenants cost a row each. max_id is the high-water mark: the largest value ever handed
-- to any cache; it only grows, and only the refill worker moves it, in transactions of
-- its own that commit durably before the values are used.

CREATE TABLE id_gen.sequences (
    name              text        PRIMARY KEY
                      CHECK (name ~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,62}$'),
    max_id            bigint      NOT NULL,
    max_value         bigint      NOT NULL DEFAULT 9223372036854775807 CHECK (max_value > 0),
    step              bigint      NOT NULL CHECK (step > 0),
    min_step          bigint      NOT NULL CHECK (min_step > 0),
    max_step          bigint      NOT NULL CHECK (max_step <= 1099511627776),
    buffer_seconds    integer     NOT NULL CHECK (buffer_seconds BETWEEN 1 AND 86400),
    preload_threshold real        NOT NULL DEFAULT 0.1
                      CHECK (preload_threshold >= 0 AND preload_threshold < 1),
    counters          integer     NOT NULL DEFAULT 1 CHECK (counters BETWEEN 1 AND 64),
    incarnation       bigint      NOT NULL
                      DEFAULT (floor(random() * 9.2e18))::bigint,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    comment           text,
    -- The role that owns the sequence (by name, as in a dump: see id_gen.usage_grants).
    owner             name        NOT NULL DEFAULT current_user,
    -- Most values one next_segment_ids*/next_segment_ranges call may take.
    max_bulk          bigint      NOT NULL DEFAULT 100000000 CHECK (max_bulk > 0),
    -- The foreign server (postgres_fdw) whose id_gen.sequences reserves the segments;
    -- NULL: this catalog (docs/guide/sequences.md "One ID space for many servers").
    authority         text,
    CHECK (min_step <= step AND step <= max_step),
    CHECK (max_id <= max_value)
);

-- Keep the rows across pg_dump/pg_restore: a restored sequence continues above max_id.
SELECT pg_catalog.pg_extension_config_dump('id_gen.sequences', '');

REVOKE ALL ON id_gen.sequences FROM PUBLIC;
GRANT SELECT ON id_gen.sequences TO PUBLIC;
GRANT USAGE ON SCHEMA id_gen TO PUBLIC;

-- Order-number keys: one random data key per version, stored only wrapped (encrypted)
-- by the key-encryption key the server loads at start. Readable by the extension owner
-- only; id_gen.order_no_keys shows versions and states, never key bytes. Dumped with the
-- data so numbers stay decodable after a restore (into a server with the same KEK).
CREATE TABLE id_gen.order_no_key_store (
    key_version     smallint    PRIMARY KEY CHECK (key_version BETWEEN 1 AND 255),
    wrapped         bytea       NOT NULL,
    kek_fingerprint bytea       NOT NULL,
    is_current      boolean     NOT NULL DEFAULT false,
    created_at      timestamptz NOT NULL DEFAULT now(),
    note            text
);
CREATE UNIQUE INDEX order_no_key_store_one_current ON id_gen.order_no_key_store (is_current) WHERE is_current;
SELECT pg_catalog.pg_extension_config_dump('id_gen.order_no_key_store', '');
REVOKE ALL ON id_gen.order_no_key_store FROM PUBLIC;

-- Routing: ranges of the 65536 virtual nodes (genes) to physical shards. A gene goes to
-- the first row whose upper_gene >= gene (ceiling, like Java's TreeMap.ceilingEntry).
CREATE TABLE id_gen.shard_routes (
    upper_gene integer     PRIMARY KEY CHECK (upper_gene BETWEEN 0 AND 65535),
    shard      text        NOT NULL CHECK (length(shard) BETWEEN 1 AND 63),
    updated_at timestamptz NOT NULL DEFAULT now()
);
SELECT pg_catalog.pg_extension_config_dump('id_gen.shard_routes', '');
REVOKE ALL ON id_gen.shard_routes FROM PUBLIC;
GRANT SELECT ON id_gen.shard_routes TO PUBLIC;

-- Dated business serials: one row per serial with its format and the counter of its
-- current period (moved by the refill worker only, like max_id of a sequence).
CREATE TABLE id_gen.serials (
    name            text        PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,39}$'),
    date_format     text        NOT NULL,
    width           integer     NOT NULL CHECK (width BETWEEN 1 AND 18),
    partition       integer     CHECK (partition BETWEEN 0 AND 99),
    max_length      integer     NOT NULL,
    time_zone       text        NOT NULL,
    step            integer     NOT NULL CHECK (step BETWEEN 1 AND 1000000),
    period_start_ms bigint      NOT NULL DEFAULT -9223372036854775808,
    period_text     text        NOT NULL DEFAULT '',
    period_max      bigint      NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL DEFAULT now(),
    comment         text,
    owner           name        NOT NULL DEFAULT current_user
);
SELECT pg_catalog.pg_extension_config_dump('id_gen.serials', '');
REVOKE ALL ON id_gen.serials FROM PUBLIC;
GRANT SELECT ON id_gen.serials TO PUBLIC;

-- Who besides the owner may take values of a sequence or serial (as GRANT USAGE ON
-- SEQUENCE). Roles are recorded by name, as pg_dump records owners: a restore into a
-- cluster that lacks a role keeps every row, and the missing role matches nobody.
-- grantee 'public' stands for PUBLIC (no role can be called "public").
CREATE TABLE id_gen.usage_grants (
    kind       text        NOT NULL CHECK (kind IN ('sequence', 'serial')),
    name       text        NOT NULL,
    grantee    name        NOT NULL,
    granted_by name        NOT NULL,
    granted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, name, grantee)
);
SELECT pg_catalog.pg_extension_config_dump('id_gen.usage_grants', '');
REVOKE ALL ON id_gen.usage_grants FROM PUBLIC;
GRANT SELECT ON id_gen.usage_grants TO PUBLIC;
