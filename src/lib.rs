//! `id_gen` — a PostgreSQL extension that hands out globally unique, shard-aware 64-bit
//! IDs at memory speed.
//!
//! This crate is the thin shell around `id_gen_core`: it converts SQL arguments, touches
//! shared memory, runs SPI and raises errors. `_PG_init` only wires the parts together.
//! The design is described in `docs/design.md`; its §9 is the module table (the only one).
//!
//! Dependencies point one way: SQL surfaces → `segments`/`snowflake`/`order_no` →
//! `shmem`/`epochs`/`clock`/`errors`/`gucs`. All `unsafe` code of the project lives in this
//! crate, each block with a `SAFETY:` note.

use pgrx::prelude::*;

mod access;
mod clock;
mod connect_bound;
mod epochs;
mod errors;
mod gene_order;
mod grants;
mod gucs;
mod layout;
mod order_no;
mod pg_list;
mod route_hash;
mod routing;
mod routing_guard;
mod segments;
mod sequences;
mod serial;
mod shmem;
mod snowflake;
mod supervisor;
mod transaction_marks;

pg_module_magic!();

extension_sql_file!("../sql/install/bootstrap.sql", bootstrap);
extension_sql_file!("../sql/install/hot_path.sql", name = "hot_path");
// The sharded deployment: catalog tables (install only), then the code files, which
// update scripts re-create from the same files in this order (scripts/gen-upgrade.sh
// reads the list below). Each file requires the one before it; see sql/README.md.
extension_sql_file!(
    "../sql/install/cluster_catalog.sql",
    name = "cluster_catalog",
    requires = ["hot_path"]
);
extension_sql_file!(
    "../sql/cluster/operations.sql",
    name = "operations",
    requires = ["cluster_catalog"]
);
extension_sql_file!(
    "../sql/cluster/ids.sql",
    name = "ids",
    requires = [
        "operations",
        layout::compose_id,
        layout::shard_gene_bigint,
        layout::shard_gene_text,
        layout::shard_gene_uuid
    ]
);
extension_sql_file!(
    "../sql/cluster/names.sql",
    name = "names",
    requires = ["ids"]
);
extension_sql_file!(
    "../sql/cluster/guards.sql",
    name = "guards",
    requires = ["names"]
);
extension_sql_file!(
    "../sql/cluster/remote.sql",
    name = "remote",
    requires = ["guards"]
);
extension_sql_file!(
    "../sql/cluster/relations.sql",
    name = "relations",
    requires = ["remote"]
);
extension_sql_file!(
    "../sql/cluster/distribute.sql",
    name = "distribute",
    requires = ["relations"]
);
extension_sql_file!(
    "../sql/cluster/ddl_follower.sql",
    name = "ddl_follower",
    requires = ["distribute"]
);
extension_sql_file!(
    "../sql/cluster/shard/tables.sql",
    name = "shard_tables",
    requires = ["ddl_follower"]
);
extension_sql_file!(
    "../sql/cluster/shard/move.sql",
    name = "shard_move",
    requires = ["shard_tables"]
);
extension_sql_file!(
    "../sql/cluster/move.sql",
    name = "move",
    requires = ["shard_move"]
);
extension_sql_file!(
    "../sql/cluster/shard/split.sql",
    name = "shard_split",
    requires = ["move"]
);
extension_sql_file!(
    "../sql/cluster/split.sql",
    name = "split",
    requires = ["shard_split"]
);
extension_sql_file!(
    "../sql/cluster/shard/revert.sql",
    name = "shard_revert",
    requires = ["split"]
);
extension_sql_file!(
    "../sql/cluster/revert.sql",
    name = "revert",
    requires = ["shard_revert"]
);
extension_sql_file!(
    "../sql/cluster/rebalance.sql",
    name = "rebalance",
    requires = ["revert"]
);
extension_sql_file!(
    "../sql/cluster/routing.sql",
    name = "routing",
    // (id_gen.route and route_owner are SQL functions whose bodies call shard_of.)
    requires = [
        "rebalance",
        layout::shard_of_bigint,
        layout::shard_of_bytea,
        order_no::shard_of_uuid
    ]
);
extension_sql_file!(
    "../sql/cluster/shard/routing.sql",
    name = "shard_routing",
    // (shard_routing_snapshot is a SQL function whose body calls partition_gene_range.)
    requires = ["routing", routing_guard::shard_state::partition_gene_range]
);
extension_sql_file!(
    "../sql/cluster/route_hash.sql",
    name = "route_hash",
    requires = [
        "shard_routing",
        route_hash::gene_route_hash,
        route_hash::gene_route_hash_extended,
        route_hash::route_hash_changed
    ]
);
extension_sql_file!(
    "../sql/cluster/convert.sql",
    name = "convert",
    requires = ["route_hash"]
);
extension_sql_file!("../sql/install/finalize.sql", finalize);

/// Every subsystem's shared memory, in the order it is attached.
static REGIONS: [shmem::Region; 4] = [
    segments::slots::REGION,
    segments::registry::REGION,
    snowflake::state::REGION,
    epochs::REGION,
];

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    // SAFETY: reading a postmaster global during library load.
    let preloading = unsafe { pg_sys::process_shared_preload_libraries_in_progress };
    gucs::init(preloading);
    if preloading {
        shmem::install_hooks(&REGIONS);
        order_no::keys::load_kek_at_startup();
        supervisor::register();
    }
    routing_guard::install();
    route_hash::planner::install();
    // SAFETY: reserves the "id_gen." GUC prefix; called once per process at load time.
    unsafe { pg_sys::MarkGUCPrefixReserved(c"id_gen".as_ptr()) };
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    #[pg_test]
    fn shard_gene_check_values() {
        assert_eq!(
            Spi::get_one::<i32>("SELECT id_gen.shard_gene(42::bigint)").unwrap(),
            Some(16043)
        );
        assert_eq!(
            Spi::get_one::<i32>("SELECT id_gen.shard_gene(0::bigint)").unwrap(),
            Some(55408)
        );
        assert_eq!(
            Spi::get_one::<i32>("SELECT id_gen.shard_gene('alice'::text)").unwrap(),
            Some(13795)
        );
    }

    #[pg_test]
    fn compose_and_decode_round_trip() {
        let id = Spi::get_one::<i64>("SELECT id_gen.compose_id(16043, 5)")
            .unwrap()
            .unwrap();
        assert_eq!(id, (16043i64 << 47) | 5);
        assert_eq!(
            Spi::get_one::<i32>(&format!("SELECT id_gen.shard_of({id}::bigint)")).unwrap(),
            Some(16043)
        );
        assert_eq!(
            Spi::get_one::<i64>(&format!("SELECT id_gen.seq_of({id}::bigint)")).unwrap(),
            Some(5)
        );
    }

    #[pg_test(error = "id_gen: shard gene 65536 is out of range (allowed: 0 .. 65535)")]
    fn compose_rejects_big_gene() {
        Spi::get_one::<i64>("SELECT id_gen.compose_id(65536, 1)").unwrap();
    }

    // Each #[pg_test] runs in one transaction that is rolled back, so the worker never
    // sees a sequence created here; segment behaviour is tested by pg_regress and the
    // out-of-process tests. Here: the catalog contract.
    #[pg_test]
    fn create_sequence_writes_the_catalog_row() {
        Spi::run("SELECT id_gen.create_sequence('pgtest_seq', start => 100, step => 10)").unwrap();
        let (max_id, step) = Spi::get_two::<i64, i64>(
            "SELECT max_id, step FROM id_gen.sequences WHERE name = 'pgtest_seq'",
        )
        .unwrap();
        assert_eq!((max_id, step), (Some(99), Some(10)));
    }

    #[pg_test(error = "id_gen: sequence \"pgtest_seq\" already exists")]
    fn create_sequence_twice_fails() {
        Spi::run("SELECT id_gen.create_sequence('pgtest_seq')").unwrap();
        Spi::run("SELECT id_gen.create_sequence('pgtest_seq')").unwrap();
    }

    #[pg_test(error = "id_gen: sequence \"no_such_seq\" does not exist")]
    fn next_segment_id_of_unknown_sequence_fails() {
        Spi::run("SELECT id_gen.next_segment_id('no_such_seq')").unwrap();
    }
}

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec!["shared_preload_libraries = 'id_gen'"]
    }
}
