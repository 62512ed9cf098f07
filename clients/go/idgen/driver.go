// The few operations the router needs from a PostgreSQL driver, as interfaces: production uses
// pgx (pgxdriver.go), the tests a fake cluster. Nothing here knows about routes or retries.
//
// Invariants every implementation keeps:
//   - A shardConn acquired from a shardPool goes back with release exactly once; release(true)
//     destroys the connection (it never goes back to the pool idle).
//   - closed() is true once the connection is known to be gone (the server ended it, the socket
//     closed, a context ended a wait on it): such a connection is only released, destroyed.
//   - Nothing is set per session on a shard connection: the claim and the declared version live
//     in the transaction (shards may sit behind a transaction-mode pooler), and a statement the
//     body prepared is deallocated before the transaction ends.

package idgen

import (
	"context"

	"github.com/jackc/pgx/v4"
)

// driver makes the router's connections.
type driver interface {
	// connectCoordinator connects to the coordinator (for route reads and version polls).
	connectCoordinator(ctx context.Context) (coordinatorConn, error)
	// connectListener connects to the coordinator and LISTENs on id_gen_routes.
	connectListener(ctx context.Context) (listenerConn, error)
	// newShardPool makes the (lazily connecting) pool of one shard; foundLost is called whenever
	// the pool drops a connection it found lost while idle (the shard may have restarted).
	newShardPool(shard, dsn string, foundLost func()) (shardPool, error)
}

// coordinatorConn reads the routes and their version; used by one goroutine at a time.
type coordinatorConn interface {
	// readRoutes runs routesSQL; empty (and no error) when there are no routes.
	readRoutes(ctx context.Context) ([]routeRow, error)
	// emptyRoutesVersion runs emptyRoutesVersionSQL: ok is false when routes exist by now.
	emptyRoutesVersion(ctx context.Context) (version int64, ok bool, err error)
	// routeVersion runs routeVersionSQL.
	routeVersion(ctx context.Context) (int64, error)
	close()
}

// listenerConn is a connection that LISTENs on id_gen_routes.
type listenerConn interface {
	// waitForNotification returns the payload of the next notification, or an error (ctx ended,
	// the connection lost).
	waitForNotification(ctx context.Context) (payload string, err error)
	// ping checks the connection with a round trip (after a wait timed out).
	ping(ctx context.Context) error
	close()
}

// shardPool hands out connections to one shard.
type shardPool interface {
	acquire(ctx context.Context) (shardConn, error)
	close()
}

// shardConn is one connection to a shard, checked out of its pool.
type shardConn interface {
	// routingProtocol runs routingProtocolSQL in autocommit, its own round trip: the shard's
	// answer, "" for NULL.
	routingProtocol(ctx context.Context) (string, error)
	// claim sends claimSQL(gene, version, onBegin) as one message: the claim on BEGIN (when it
	// fails, no transaction is open) or the old SELECT after BEGIN (when it fails, the
	// transaction has failed).
	claim(ctx context.Context, gene uint16, version int64, onBegin bool) error
	// bodyTx is the claimed transaction as the body sees it.
	bodyTx() pgx.Tx
	// commit sends COMMIT; a COMMIT the server answered with ROLLBACK (the body swallowed an
	// error) is pgx.ErrTxCommitRollback. The body's Tx is unusable afterwards.
	commit(ctx context.Context) error
	// dropPrepared deallocates the named statements the body prepared through its Tx, inside the
	// transaction (failed or not), so that none outlives it; nothing is sent when there are none.
	dropPrepared(ctx context.Context) error
	// rollback ends a failed transaction (dropping the body's prepared statements first), and
	// sends nothing when none is open (a claim on BEGIN that failed); an error means the
	// connection is not reusable.
	rollback(ctx context.Context) error
	// endedByBody: the connection is good but no longer in the claimed transaction (the body
	// sent COMMIT or ROLLBACK itself); no round trip.
	endedByBody() bool
	// prepareExecute makes sure, sending nothing that runs, that the connection is alive and the
	// statement (declaredSQL(version, sql)) described, so that execute is one round trip.
	prepareExecute(ctx context.Context, version int64, sql string) error
	// execute runs declaredSQL(version, sql) in autocommit (its own implicit transaction), one
	// round trip; its rows.
	execute(ctx context.Context, version int64, sql string, args []any) ([][]any, error)
	closed() bool
	release(destroy bool)
}
