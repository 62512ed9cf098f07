//! Routing helpers that need Rust: validating a route before `set_route` stores it, and
//! split/merge planning over `id_gen.shard_routes`. Plain lookups (`route`,
//! `route_owner`) are SQL functions in `sql/cluster/routing.sql`, where an index scan on the
//! route table does the work.
//!
//! Invariant: the route table is read-only here; plans are proposals the operator
//! applies with `set_route`.

use crate::errors::{code_of, raise, spi_failed};
use id_gen_core::routing::{RouteError, RouteTable};
use pgrx::prelude::*;

fn route_error(e: RouteError) -> ! {
    raise(
        code_of(e.sqlstate()),
        format!("id_gen: {e}"),
        Some(&e.hint()),
    )
}

fn load_routes() -> RouteTable {
    let rows: Vec<(i64, String)> = Spi::connect(|client| {
        let t = client.select(
            "SELECT upper_gene, shard FROM id_gen.shard_routes",
            None,
            &[],
        )?;
        let mut rows = vec![];
        for r in t {
            rows.push((
                r.get::<i32>(1)?.unwrap_or(0) as i64,
                r.get::<String>(2)?.unwrap_or_default(),
            ));
        }
        Ok::<_, pgrx::spi::Error>(rows)
    })
    .unwrap_or_else(|e| spi_failed(e));
    RouteTable::from_rows(rows).unwrap_or_else(|e| route_error(e))
}

/// Validates a route before `set_route` stores it (the SQL wrapper does the upsert).
#[pg_extern(immutable, strict, parallel_safe)]
fn check_route(upper_gene: i32, shard: &str) -> bool {
    let upper =
        id_gen_core::routing::gene_from_i64(upper_gene as i64).unwrap_or_else(|e| route_error(e));
    id_gen_core::routing::validate_shard_name(shard, Some(upper))
        .unwrap_or_else(|e| route_error(e));
    true
}

type PlanRows = TableIterator<
    'static,
    (
        name!(lower_gene, i32),
        name!(upper_gene, i32),
        name!(shard, String),
    ),
>;

fn plan_rows(plan: Vec<(u16, u16, String)>) -> PlanRows {
    TableIterator::new(
        plan.into_iter()
            .map(|(lo, hi, s)| (lo as i32, hi as i32, s)),
    )
}

/// Proposes new gene ranges that split every range of `shard` into `into.len()` nearly
/// equal parts. Apply a plan with `id_gen.set_route(upper_gene, shard)` for each row.
#[pg_extern(stable, strict, parallel_safe)]
fn route_plan_split(
    shard: &str,
    into: Vec<String>,
) -> TableIterator<
    'static,
    (
        name!(lower_gene, i32),
        name!(upper_gene, i32),
        name!(shard, String),
    ),
> {
    plan_rows(
        load_routes()
            .plan_split(shard, &into)
            .unwrap_or_else(|e| route_error(e)),
    )
}

/// Proposes routes that move every range of `shards` to `into`, collapsing neighbours.
#[pg_extern(stable, strict, parallel_safe)]
fn route_plan_merge(
    shards: Vec<String>,
    into: &str,
) -> TableIterator<
    'static,
    (
        name!(lower_gene, i32),
        name!(upper_gene, i32),
        name!(shard, String),
    ),
> {
    plan_rows(
        load_routes()
            .plan_merge(&shards, into)
            .unwrap_or_else(|e| route_error(e)),
    )
}
