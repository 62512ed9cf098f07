// Package idgen is zero-hop routing for id_gen on pgx: the application computes an owner's gene,
// looks up the shard that owns it in the coordinator's routes and talks to that shard directly,
// declaring the route version it routed with. The contract is docs/routing-protocol.md; the
// names are those of every id_gen client (§5): Transaction, Run, Execute, NextID, RetryLimit,
// RefreshInterval, Refresh, Version, Routes, ShardFor..., Stats.
//
// Files: genes.go (genes), keys.go (routing keys), config.go (Config), router.go (the Router, its
// shards and the claim form each takes, lookups, Close), calls.go (the routed calls and their
// retry loop), coordinator.go (route reads, LISTEN, the version poll), routes.go (the route
// snapshot, SQL, retry decisions), errors.go (errors and their classification), driver.go (the
// driver interfaces), pgxdriver.go, pgxtx.go and conncheck_*.go (the pgx v4 driver;
// ShardPoolConfig, the shard pools' configuration, for pools of an application's own).
//
// The body's pgx.Tx (pgxtx.go) is the claimed transaction; its Prepare makes a named statement
// for that transaction only, as database/sql's Tx.Prepare: the router deallocates it before
// COMMIT or ROLLBACK, so that none is left on a pooled connection (which a transaction-mode
// pooler could hand to another server connection).
package idgen
