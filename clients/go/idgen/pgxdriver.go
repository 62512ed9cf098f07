// The driver of production: pgx v4 (pgx.Conn for the coordinator, pgxpool for the shards). All
// of the package's pgx-specific code is here, in pgxtx.go and conncheck_*.go; moving to pgx v5
// changes these files (import paths, pgconn.CommandTag, TxOptions.BeginQuery, PgConn.CheckConn)
// and little else.
//
// Invariants:
//   - Every connect is bounded: ConnectTimeout unless the DSN sets connect_timeout.
//   - The coordinator's statements are constants without parameters, sent with the simple
//     protocol (no prepared statements, nothing interpolated).
//   - Shard connections hold no session state and no named prepared statements (unless the
//     DSN or ConfigureShardPool asks for them): statements are described into an unnamed
//     statement and cached by description (pgx's statement_cache_mode=describe), which works
//     behind PgBouncer in transaction mode (1.18 has no prepared-statement support).
//   - The probe of the claim form, the claim, COMMIT and ROLLBACK go through pgconn's simple
//     protocol, one message each; statements the body prepared are closed (one message) before
//     COMMIT or ROLLBACK.
//   - A pooled connection that the server closed while it sat idle is checked (a non-blocking
//     peek at its socket, conncheck_*.go) and destroyed before it is handed out, and the router
//     told (the shard may have restarted).

package idgen

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgconn/stmtcache"
	"github.com/jackc/pgproto3/v2"
	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"
)

// statementCacheSize is the capacity of a shard connection's cache of statement descriptions.
const statementCacheSize = 512

// closeTimeout bounds closing a connection (a Terminate message and the socket).
const closeTimeout = 5 * time.Second

type pgxDriver struct {
	s           settings
	coordinator *pgx.ConnConfig
}

func newPgxDriver(s settings) (*pgxDriver, error) {
	config, err := pgx.ParseConfig(s.Routes)
	if err != nil {
		return nil, err
	}
	if config.ConnectTimeout == 0 {
		config.ConnectTimeout = s.ConnectTimeout
	}
	config.PreferSimpleProtocol = true
	config.BuildStatementCache = nil
	return &pgxDriver{s: s, coordinator: config}, nil
}

func (d *pgxDriver) connectCoordinator(ctx context.Context) (coordinatorConn, error) {
	conn, err := pgx.ConnectConfig(ctx, d.coordinator.Copy())
	if err != nil {
		return nil, err
	}
	return pgxCoordinator{conn}, nil
}

func (d *pgxDriver) connectListener(ctx context.Context) (listenerConn, error) {
	conn, err := pgx.ConnectConfig(ctx, d.coordinator.Copy())
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+routesChannel); err != nil {
		closeConn(conn)
		return nil, err
	}
	return pgxCoordinator{conn}, nil
}

// pgxCoordinator is a coordinator connection, for route reads or for LISTEN.
type pgxCoordinator struct{ conn *pgx.Conn }

func (c pgxCoordinator) readRoutes(ctx context.Context) ([]routeRow, error) {
	rows, err := c.conn.Query(ctx, routesSQL)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []routeRow
	for rows.Next() {
		var r routeRow
		if err := rows.Scan(&r.lower, &r.upper, &r.shard, &r.version); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func (c pgxCoordinator) emptyRoutesVersion(ctx context.Context) (int64, bool, error) {
	var version int64
	err := c.conn.QueryRow(ctx, emptyRoutesVersionSQL).Scan(&version)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	return version, err == nil, err
}

func (c pgxCoordinator) routeVersion(ctx context.Context) (int64, error) {
	var version int64
	err := c.conn.QueryRow(ctx, routeVersionSQL).Scan(&version)
	return version, err
}

func (c pgxCoordinator) waitForNotification(ctx context.Context) (string, error) {
	n, err := c.conn.WaitForNotification(ctx)
	if err != nil || n == nil {
		return "", err
	}
	return n.Payload, nil
}

func (c pgxCoordinator) ping(ctx context.Context) error { return c.conn.Ping(ctx) }

func (c pgxCoordinator) close() { closeConn(c.conn) }

func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_ = conn.Close(ctx)
}

func (d *pgxDriver) newShardPool(shard, dsn string, foundLost func()) (shardPool, error) {
	config, err := shardPoolConfig(d.s, shard, dsn, foundLost)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.ConnectConfig(context.Background(), config) // (lazy: connects on first use)
	if err != nil {
		return nil, err
	}
	return pgxShardPool{pool}, nil
}

// ShardPoolConfig is the pgxpool configuration a Router with config c makes for its shard
// named shard at dsn: c's MaxConns and ConnectTimeout (or their defaults) where the DSN sets
// neither, lazy connects, statement descriptions cached without named prepared statements
// (unless the DSN chooses), c.ConfigureShardPool applied, and a BeforeAcquire that drops a
// connection the server closed while it sat idle. For pools of an application's own that
// should talk to a shard as the Router does (such as the conformance tool's direct bench);
// c.Routes and c.Shards are not needed.
func ShardPoolConfig(c Config, shard, dsn string) (*pgxpool.Config, error) {
	s, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	return shardPoolConfig(s, shard, dsn, nil)
}

// shardPoolConfig is ShardPoolConfig's configuration, whose BeforeAcquire calls foundLost (when
// not nil) for every connection it drops.
func shardPoolConfig(s settings, shard, dsn string, foundLost func()) (*pgxpool.Config, error) {
	config, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	asked, err := pgconn.ParseConfig(dsn) // (what the DSN set itself: its pgx keys stay in RuntimeParams)
	if err != nil {
		return nil, err
	}
	if config.ConnConfig.ConnectTimeout == 0 {
		config.ConnConfig.ConnectTimeout = s.ConnectTimeout
	}
	if _, ok := asked.RuntimeParams["pool_max_conns"]; !ok {
		config.MaxConns = int32(s.MaxConns)
	}
	config.MinConns = 0
	config.LazyConnect = true
	_, mode := asked.RuntimeParams["statement_cache_mode"]
	_, capacity := asked.RuntimeParams["statement_cache_capacity"]
	_, simple := asked.RuntimeParams["prefer_simple_protocol"]
	if !mode && !capacity && !simple {
		config.ConnConfig.BuildStatementCache = func(conn *pgconn.PgConn) stmtcache.Cache {
			return stmtcache.New(conn, stmtcache.ModeDescribe, statementCacheSize)
		}
	}
	if s.ConfigureShardPool != nil {
		s.ConfigureShardPool(shard, config)
	}
	before := config.BeforeAcquire
	config.BeforeAcquire = func(ctx context.Context, conn *pgx.Conn) bool {
		if checkConn(conn.PgConn()) != nil {
			if foundLost != nil {
				foundLost()
			}
			return false // (the pool destroys it and hands out another)
		}
		return before == nil || before(ctx, conn)
	}
	return config, nil
}

type pgxShardPool struct{ pool *pgxpool.Pool }

func (p pgxShardPool) acquire(ctx context.Context) (shardConn, error) {
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return &pgxShardConn{pooled: conn}, nil
}

func (p pgxShardPool) close() { p.pool.Close() }

// pgxShardConn is a shard connection checked out of its pool, and the claimed transaction on
// it.
type pgxShardConn struct {
	pooled *pgxpool.Conn
	tx     *routedTx
}

func (c *pgxShardConn) pg() *pgconn.PgConn { return c.pooled.Conn().PgConn() }

func (c *pgxShardConn) routingProtocol(ctx context.Context) (string, error) {
	results, err := c.pg().Exec(ctx, routingProtocolSQL).ReadAll()
	if err != nil {
		return "", err
	}
	if len(results) != 1 || len(results[0].Rows) != 1 || len(results[0].Rows[0]) != 1 {
		return "", nil // (not the one value asked for: read as the old form)
	}
	return string(results[0].Rows[0][0]), nil // (NULL: "")
}

func (c *pgxShardConn) claim(ctx context.Context, gene uint16, version int64, onBegin bool) error {
	c.tx.end()
	c.tx = newRoutedTx(c.pooled.Conn())
	_, err := c.pg().Exec(ctx, claimSQL(gene, version, onBegin)).ReadAll()
	return err
}

func (c *pgxShardConn) bodyTx() pgx.Tx { return c.tx }

func (c *pgxShardConn) commit(ctx context.Context) error {
	c.tx.end()
	results, err := c.pg().Exec(ctx, "COMMIT").ReadAll()
	if err != nil {
		return err
	}
	if len(results) == 1 && string(results[0].CommandTag) == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

func (c *pgxShardConn) endedByBody() bool {
	return !c.pg().IsClosed() && c.pg().TxStatus() == 'I'
}

func (c *pgxShardConn) rollback(ctx context.Context) error {
	c.tx.end()
	if c.pg().TxStatus() == 'I' {
		return nil // (no transaction: a claim on BEGIN that failed opened none)
	}
	if err := c.dropPrepared(ctx); err != nil {
		return err
	}
	_, err := c.pg().Exec(ctx, "ROLLBACK").ReadAll()
	return err
}

// dropPrepared closes the statements the body prepared (pgxtx.go) with one message of Close
// messages and a Sync: a failed transaction accepts them (it refuses DEALLOCATE), a name
// already gone is no error, and they reach the server connection of the transaction, also
// behind a transaction-mode pooler. Then pgx forgets them: Conn.Deallocate drops its entry first
// and, with a context already done, sends nothing (pgconn's Exec checks the context before
// writing).
func (c *pgxShardConn) dropPrepared(ctx context.Context) error {
	names := c.tx.preparedNames()
	if len(names) == 0 {
		return nil
	}
	var buf []byte
	for _, name := range names {
		buf = (&pgproto3.Close{ObjectType: 'S', Name: name}).Encode(buf)
	}
	buf = (&pgproto3.Sync{}).Encode(buf)
	if err := c.pg().SendBytes(ctx, buf); err != nil {
		return err // (nothing sent, or pgconn closed the connection)
	}
	var failed error
	for {
		msg, err := c.pg().ReceiveMessage(ctx)
		if err != nil {
			closeConn(c.pooled.Conn()) // (a timeout leaves it open, its answers still to come: out of step)
			return err
		}
		switch msg := msg.(type) {
		case *pgproto3.ErrorResponse:
			failed = pgconn.ErrorResponseToPgError(msg)
		case *pgproto3.ReadyForQuery:
			if failed != nil {
				return failed
			}
			forget, cancel := context.WithCancel(context.Background())
			cancel()
			for _, name := range names {
				_ = c.pooled.Conn().Deallocate(forget, name) // (pgx's entry only: nothing is sent)
			}
			c.tx.state.prepared = nil
			return nil
		}
	}
}

func (c *pgxShardConn) prepareExecute(ctx context.Context, version int64, sql string) error {
	cache := c.pooled.Conn().StatementCache()
	if cache == nil || c.pooled.Conn().Config().PreferSimpleProtocol {
		return nil // (the statement goes as one simple-protocol message)
	}
	_, err := cache.Get(ctx, declaredSQL(version, sql))
	return err
}

func (c *pgxShardConn) execute(ctx context.Context, version int64, sql string, args []any) ([][]any, error) {
	rows, err := c.pooled.Conn().Query(ctx, declaredSQL(version, sql), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := [][]any{}
	for rows.Next() {
		values, err := rows.Values()
		if err != nil {
			return nil, err
		}
		out = append(out, values)
	}
	return out, rows.Err()
}

func (c *pgxShardConn) closed() bool { return c.pooled.Conn().IsClosed() }

func (c *pgxShardConn) release(destroy bool) {
	c.tx.end()
	if len(c.tx.preparedNames()) > 0 {
		destroy = true // (the body's statements outlive its transaction: never pooled so)
	}
	if destroy && !c.closed() {
		closeConn(c.pooled.Conn()) // (the pool destroys a closed connection on release)
	}
	c.pooled.Release()
}
