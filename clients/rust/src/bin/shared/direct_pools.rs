//! The `--direct` baseline of the tools' benchmarks (`id_gen_client_tool bench`,
//! `conformance bench`): one deadpool pool per shard, straight from its DSN, made as the
//! Router makes its shard pools (NoTls, fast recycling). Included by both binaries with
//! `#[path]` (a directory under src/bin/ without a main.rs is no binary of its own).

use std::collections::BTreeMap;

/// One pool of `size` connections per shard of `shards` (name to DSN).
pub fn direct_pools(
    shards: &BTreeMap<String, String>,
    size: usize,
) -> Result<BTreeMap<String, deadpool_postgres::Pool>, String> {
    let mut pools = BTreeMap::new();
    for (name, dsn) in shards {
        let pg: id_gen_client::tokio_postgres::Config =
            dsn.parse().map_err(|e| format!("shard {name}: {e}"))?;
        let manager = deadpool_postgres::Manager::from_config(
            pg,
            id_gen_client::tokio_postgres::NoTls,
            deadpool_postgres::ManagerConfig {
                recycling_method: deadpool_postgres::RecyclingMethod::Fast,
            },
        );
        let pool = deadpool_postgres::Pool::builder(manager)
            .max_size(size)
            .build()
            .map_err(|e| format!("shard {name}: {e}"))?;
        pools.insert(name.clone(), pool);
    }
    Ok(pools)
}
