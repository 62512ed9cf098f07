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
mod direct_read;
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
    "../sql/cluster/shard/verify.sql",
    name = "shard_verify",
    requires = ["revert"]
);
extension_sql_file!(
    "../sql/cluster/verify.sql",
    name = "verify",
    requires = ["shard_verify"]
);
extension_sql_file!(
    "../sql/cluster/rebalance.sql",
    name = "rebalance",
    requires = ["verify"]
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
    "../sql/cluster/shard/owned_rows.sql",
    name = "shard_owned_rows",
    // (Its view calls id_gen.shard_owns; its trigger function is shard_routing's.)
    requires = ["shard_routing", routing_guard::owned_ranges::shard_owns]
);
extension_sql_file!(
    "../sql/cluster/route_hash.sql",
    name = "route_hash",
    requires = [
        "shard_owned_rows",
        route_hash::gene_route_hash,
        route_hash::gene_route_hash_extended,
        route_hash::route_hash_changed
    ]
);
extension_sql_file!(
    "../sql/cluster/shard/convert.sql",
    name = "shard_convert",
    requires = ["route_hash"]
);
extension_sql_file!(
    "../sql/cluster/convert.sql",
    name = "convert",
    requires = ["shard_convert"]
);
extension_sql_file!(
    "../sql/cluster/metrics.sql",
    name = "metrics",
    requires = ["convert"]
);
extension_sql_file!("../sql/install/finalize.sql", finalize);

/// Every subsystem's shared memory, in the order it is attached.
static REGIONS: [shmem::Region; 5] = [
    segments::slots::REGION,
    segments::registry::REGION,
    snowflake::state::REGION,
    epochs::REGION,
    supervisor::REGION,
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
    direct_read::install();
    // SAFETY: reserves the "id_gen." GUC prefix; called once per process at load time.
    unsafe { pg_sys::MarkGUCPrefixReserved(c"id_gen".as_ptr()) };
}
