// A fake of the driver (driver.go) for the router's tests without a server: a coordinator
// (routes, a version, NOTIFY to its listeners; it can be down) and shards (the probe of their
// routing protocol, '2' or, for a shard older than id_gen 0.7.16, NULL; the claim in both forms
// with route_claim's IG001/IG002, ignored on BEGIN by an old shard; the declared route version,
// a read by owner, lost connections: a connect refused, a probe, a claim, a read or a COMMIT
// whose connection ends), as clients/node/test/fake_pg.js fakes pg for the Node.js client. Lost
// connections fail as pgx reports them; a connection that ended fails every later statement
// without sending it (pgconn's "conn closed", safe to retry).

package idgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
)

// fakeReadSQL is the read by owner of the scenarios' execute: no id predicate.
const fakeReadSQL = "SELECT amount FROM orders WHERE owner_id = $1"

// fakeRange is one route of the fake coordinator: genes up to upper (from the previous upper
// + 1) live on shard.
type fakeRange struct {
	upper uint16
	shard string
}

type fakeCluster struct {
	mu         sync.Mutex
	routes     []fakeRange
	version    int64
	down       bool // the coordinator refuses connections and its connections fail
	listeners  map[*fakeListener]bool
	routeReads int

	listenFails    bool // LISTEN fails (0A000), as behind a pooler that refuses it
	listenAttempts int  // LISTENs tried, failed or not

	fences       int             // the next claims or reads of any gene that fail with IG002
	connectFails int             // the next connects to shard "a" that fail,
	connectError func() error    // with this error (refused, by default)
	oldShards    map[string]bool // shards older than 0.7.16: the probe answers NULL, a claim on BEGIN is a plain BEGIN
	probesLost   int             // the next probes whose connection ends
	probesFail   int             // the next probes that fail with an SQL error (42501)
	claimsLost   int             // the next claims whose connection ends
	claimsHang   int             // the next claims never answered (until their context ends; then closed, as pgx does)
	readsLost    int             // the next reads by owner whose connection ends under them
	commitLost   bool            // whether the next COMMIT's connection ends, unanswered
	lostKinds    int             // how many connections were lost (the kind of error rotates)

	pools         map[string]*fakePool
	lastReadShard string
	lastParams    []any
}

func newFakeCluster(routes []fakeRange) *fakeCluster {
	return &fakeCluster{routes: routes, version: 1, listeners: map[*fakeListener]bool{},
		connectError: refusedError, oldShards: map[string]bool{}, pools: map[string]*fakePool{}}
}

// refusedError is a TCP connect refused (a shard restarting), as net reports it through pgconn.
func refusedError() error {
	return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
}

// fakeConnClosed is pgconn's error for a statement on a connection that had ended: nothing
// was sent.
type fakeConnClosed struct{}

func (fakeConnClosed) Error() string     { return "conn closed" }
func (fakeConnClosed) SafeToRetry() bool { return true }

func sqlError(code string) *pgconn.PgError {
	return &pgconn.PgError{Severity: "ERROR", Code: code, Message: "fake " + code}
}

// lostError is the next of the ways pgx reports a connection that ended under a statement.
func (c *fakeCluster) lostError() error {
	c.lostKinds++
	switch c.lostKinds % 3 {
	case 1:
		return &pgconn.PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"}
	case 2:
		return &pgconn.PgError{Severity: "FATAL", Code: "08006", Message: "fake: connection failure"}
	default:
		return fmt.Errorf("fake: receive message failed: %w", io.ErrUnexpectedEOF)
	}
}

// change replaces the routes (version + 1); notify: whether the listeners hear of it.
func (c *fakeCluster) change(routes []fakeRange, notify bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.routes = routes
	c.version++
	if notify {
		for l := range c.listeners {
			l.payloads <- strconv.FormatInt(c.version, 10)
		}
	}
}

func (c *fakeCluster) setDown(down bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.down = down
}

func (c *fakeCluster) ownerOf(gene uint16) string {
	for _, r := range c.routes {
		if gene <= r.upper {
			return r.shard
		}
	}
	return ""
}

// loseListeners ends every listening connection.
func (c *fakeCluster) loseListeners() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for l := range c.listeners {
		close(l.lost)
		delete(c.listeners, l)
	}
}

func (c *fakeCluster) setListenFails(fails bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.listenFails = fails
}

func (c *fakeCluster) listenAttemptCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.listenAttempts
}

func (c *fakeCluster) listenerCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.listeners)
}

// --- the driver ---------------------------------------------------------------------------

func (c *fakeCluster) connectCoordinator(ctx context.Context) (coordinatorConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down {
		return nil, refusedError()
	}
	return &fakeCoordinator{c: c}, nil
}

func (c *fakeCluster) connectListener(ctx context.Context) (listenerConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down {
		return nil, refusedError()
	}
	c.listenAttempts++
	if c.listenFails {
		return nil, sqlError("0A000")
	}
	l := &fakeListener{c: c, payloads: make(chan string, 16), lost: make(chan struct{})}
	c.listeners[l] = true
	return l, nil
}

// newShardPool makes a pool that connects anew for every acquire: none is found lost while idle.
func (c *fakeCluster) newShardPool(shard, dsn string, _ func()) (shardPool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := &fakePool{c: c, shard: shard}
	c.pools[shard] = p
	return p, nil
}

type fakeCoordinator struct {
	c      *fakeCluster
	closed bool
}

func (f *fakeCoordinator) failed() error {
	if f.c.down || f.closed {
		return fmt.Errorf("fake coordinator: %w", io.ErrUnexpectedEOF)
	}
	return nil
}

func (f *fakeCoordinator) readRoutes(ctx context.Context) ([]routeRow, error) {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	if err := f.failed(); err != nil {
		return nil, err
	}
	f.c.routeReads++
	var rows []routeRow
	lower := int64(0)
	for _, r := range f.c.routes {
		rows = append(rows, routeRow{lower: lower, upper: int64(r.upper), shard: r.shard, version: f.c.version})
		lower = int64(r.upper) + 1
	}
	return rows, nil
}

func (f *fakeCoordinator) emptyRoutesVersion(ctx context.Context) (int64, bool, error) {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	if err := f.failed(); err != nil {
		return 0, false, err
	}
	return f.c.version, len(f.c.routes) == 0, nil
}

func (f *fakeCoordinator) routeVersion(ctx context.Context) (int64, error) {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	if err := f.failed(); err != nil {
		return 0, err
	}
	return f.c.version, nil
}

func (f *fakeCoordinator) close() {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	f.closed = true
}

type fakeListener struct {
	c        *fakeCluster
	payloads chan string
	lost     chan struct{} // closed when the connection ends
}

func (l *fakeListener) waitForNotification(ctx context.Context) (string, error) {
	select {
	case p := <-l.payloads:
		return p, nil
	case <-l.lost:
		return "", fmt.Errorf("fake listener: %w", io.ErrUnexpectedEOF)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func (l *fakeListener) ping(ctx context.Context) error {
	select {
	case <-l.lost:
		return io.ErrUnexpectedEOF
	default:
		return nil
	}
}

func (l *fakeListener) close() {
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	delete(l.c.listeners, l)
}

// --- shards -------------------------------------------------------------------------------

type fakePool struct {
	c     *fakeCluster
	shard string
	// (guarded by c.mu)
	out, destroyed, deadReturnedIdle, returnedInTx int
	conns                                          []*fakeConn
	closed                                         bool
}

func (p *fakePool) acquire(ctx context.Context) (shardConn, error) {
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	if p.closed {
		return nil, errors.New("fake: closed pool")
	}
	if p.shard == "a" && p.c.connectFails > 0 {
		p.c.connectFails--
		return nil, p.c.connectError()
	}
	p.out++
	conn := &fakeConn{pool: p, shard: p.shard}
	p.conns = append(p.conns, conn)
	return conn, nil
}

func (p *fakePool) close() {
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	p.closed = true
}

type fakeConn struct {
	pool     *fakePool
	shard    string
	log      []string // what was sent
	inBlock  bool     // in a transaction block
	failed   bool     // the transaction block failed (25P02 until it ends)
	dead     bool     // the connection ended
	released bool
}

// lose ends the connection (the server or the network ended it); err is what pgx reports.
func (f *fakeConn) lose(err error) error {
	f.dead = true
	f.inBlock = false
	return err
}

// routingProtocol answers the probe in autocommit: '2', NULL ("") on an old shard.
func (f *fakeConn) routingProtocol(ctx context.Context) (string, error) {
	c := f.pool.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.dead {
		return "", fakeConnClosed{}
	}
	f.log = append(f.log, routingProtocolSQL)
	switch {
	case c.probesLost > 0:
		c.probesLost--
		return "", f.lose(c.lostError())
	case c.probesFail > 0:
		c.probesFail--
		return "", sqlError("42501")
	case c.oldShards[f.shard]:
		return "", nil
	}
	return "2", nil
}

// claim fails as route_claim does in either form; a failed claim on BEGIN opens no transaction,
// a failed SELECT leaves the one its BEGIN opened failed.
func (f *fakeConn) claim(ctx context.Context, gene uint16, version int64, onBegin bool) error {
	c := f.pool.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.dead {
		return fakeConnClosed{}
	}
	f.log = append(f.log, claimSQL(gene, version, onBegin))
	if c.claimsHang > 0 {
		c.claimsHang--
		c.mu.Unlock()
		<-ctx.Done() // (the shard never answers)
		c.mu.Lock()
		return f.lose(fmt.Errorf("fake: timeout: %w", ctx.Err()))
	}
	if c.claimsLost > 0 {
		c.claimsLost--
		return f.lose(c.lostError())
	}
	var err error
	switch {
	case onBegin && c.oldShards[f.shard]: // (the comment ignored: a plain BEGIN, nothing claimed)
	case c.fences > 0:
		c.fences--
		err = sqlError(CodeRouteFenced)
	case c.ownerOf(gene) != f.shard || version < c.version:
		err = sqlError(CodeRouteChanged)
	}
	f.inBlock = err == nil || !onBegin
	f.failed = err != nil && !onBegin
	return err
}

func (f *fakeConn) bodyTx() pgx.Tx { return &fakeTx{conn: f} }

func (f *fakeConn) commit(ctx context.Context) error {
	c := f.pool.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.dead {
		return fakeConnClosed{}
	}
	f.log = append(f.log, "COMMIT")
	if c.commitLost {
		c.commitLost = false
		return f.lose(fmt.Errorf("fake: receive message failed: %w", io.ErrUnexpectedEOF))
	}
	rolledBack := f.failed
	f.inBlock, f.failed = false, false
	if rolledBack {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

func (f *fakeConn) endedByBody() bool { return !f.dead && !f.inBlock }

func (f *fakeConn) dropPrepared(ctx context.Context) error { return nil } // (the fake Tx prepares nothing)

// rollback sends nothing when no transaction is open (a claim on BEGIN that failed), as pgx's
// driver does.
func (f *fakeConn) rollback(ctx context.Context) error {
	c := f.pool.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.dead {
		return fakeConnClosed{}
	}
	if !f.inBlock {
		return nil
	}
	f.log = append(f.log, "ROLLBACK")
	f.inBlock, f.failed = false, false
	return nil
}

func (f *fakeConn) prepareExecute(ctx context.Context, version int64, sql string) error {
	c := f.pool.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.dead {
		return fakeConnClosed{}
	}
	return nil
}

// execute runs the read by owner (the only statement it knows) with its declared version in
// one implicit transaction: the first statement touching a distributed table checks the declared
// version; a read by owner of genes the shard lost finds nothing.
func (f *fakeConn) execute(ctx context.Context, version int64, sql string, args []any) ([][]any, error) {
	c := f.pool.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.dead {
		return nil, fakeConnClosed{}
	}
	f.log = append(f.log, declaredSQL(version, sql))
	if sql != fakeReadSQL || len(args) != 1 {
		return nil, fmt.Errorf("the fake shard does not know %q", sql)
	}
	switch {
	case c.readsLost > 0:
		c.readsLost--
		return nil, f.lose(&pgconn.PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection"})
	case c.fences > 0:
		c.fences--
		return nil, sqlError(CodeRouteFenced)
	case version < c.version:
		return nil, sqlError(CodeRouteChanged)
	}
	if c.ownerOf(GeneOf(args[0].(int64))) != f.shard {
		return [][]any{}, nil
	}
	c.lastReadShard = f.shard
	return [][]any{{int64(7)}}, nil
}

func (f *fakeConn) closed() bool {
	f.pool.c.mu.Lock()
	defer f.pool.c.mu.Unlock()
	return f.dead
}

func (f *fakeConn) release(destroy bool) {
	p := f.pool
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	if f.released {
		panic("a fake connection released twice")
	}
	f.released = true
	p.out--
	switch {
	case destroy:
		p.destroyed++
	case f.dead:
		p.deadReturnedIdle++
	case f.inBlock:
		p.returnedInTx++
	}
}

// fakeTx is the body's Tx: Exec, QueryRow and Conn-less rest (unused by the tests).
type fakeTx struct {
	pgx.Tx
	conn *fakeConn
}

// Exec knows "SELECT fail" (22012, failing the transaction) and takes anything else.
func (t *fakeTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c := t.conn.pool.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.conn.dead {
		return nil, fakeConnClosed{}
	}
	t.conn.log = append(t.conn.log, sql)
	if t.conn.failed {
		return nil, sqlError("25P02")
	}
	if sql == "SELECT fail" {
		t.conn.failed = true
		return nil, sqlError("22012")
	}
	if sql == "COMMIT" || sql == "ROLLBACK" { // (what a body must not send: tests of it)
		t.conn.inBlock = false
		return pgconn.CommandTag(sql), nil
	}
	return pgconn.CommandTag("SELECT 1"), nil
}

// QueryRow knows id_gen.gene_order_id: an id above 2^53.
func (t *fakeTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c := t.conn.pool.c
	c.mu.Lock()
	defer c.mu.Unlock()
	t.conn.log = append(t.conn.log, sql)
	if !strings.Contains(sql, "gene_order_id") {
		return errRows{fmt.Errorf("the fake shard does not know %q", sql)}
	}
	c.lastParams = args
	return fakeRow{int64(9007199254740993)}
}

type fakeRow struct{ value int64 }

func (r fakeRow) Scan(dest ...any) error {
	*dest[0].(*int64) = r.value
	return nil
}

// --- what the tests look at -----------------------------------------------------------------

func (c *fakeCluster) sent() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, name := range []string{"a", "b"} {
		if p := c.pools[name]; p != nil {
			for _, conn := range p.conns {
				out = append(out, conn.log...)
			}
		}
	}
	return out
}

// claims counts the claims sent to every shard, in either form.
func (c *fakeCluster) claims() int {
	n := 0
	for _, s := range c.sent() {
		if strings.HasPrefix(s, "/* id_gen.route_claim=") || strings.HasPrefix(s, "BEGIN; SELECT id_gen.route_claim(") {
			n++
		}
	}
	return n
}

// probes counts the probes of the routing protocol sent to every shard.
func (c *fakeCluster) probes() int {
	n := 0
	for _, s := range c.sent() {
		if s == routingProtocolSQL {
			n++
		}
	}
	return n
}

// leaks describes connections kept out of their pool or returned broken, "" when none.
func (c *fakeCluster) leaks() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for name, p := range c.pools {
		if p.out != 0 || p.deadReturnedIdle != 0 || p.returnedInTx != 0 {
			out = append(out, fmt.Sprintf("shard %s: %d kept, %d lost ones returned idle, %d returned in a transaction",
				name, p.out, p.deadReturnedIdle, p.returnedInTx))
		}
	}
	return strings.Join(out, "; ")
}

func (c *fakeCluster) pool(name string) fakePool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return *c.pools[name]
}
