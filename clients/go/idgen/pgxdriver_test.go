// The pgx driver on the wire: a Router whose coordinator is the fake of fake_test.go and whose
// shard pools are real pgxpool pools connected to the scripted server of internal/pgscript. What
// a shard receives (the probe of its routing protocol once, the claim on BEGIN or, on a shard
// older than 0.7.16, the old claim, as one message; savepoints, COMMIT, Execute's one batch,
// nothing per session, no named statements), a claim on BEGIN refused, COMMIT answered by
// ROLLBACK or never answered, idle connections the server ended (and a shard restarted with
// another id_gen), the errors of a shard that drops or refuses connections, and a failover
// behind a read-write multi-host DSN (one host refused, the other read only until promoted).

package idgen

import (
	"context"
	"errors"
	"net"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/id-gen/id_gen/clients/go/internal/pgscript"
	"github.com/jackc/pgconn/stmtcache"
	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"
)

// wireDriver is the fake coordinator with real shard pools.
type wireDriver struct {
	*fakeCluster
	real *pgxDriver
}

func (d wireDriver) newShardPool(shard, dsn string, foundLost func()) (shardPool, error) {
	return d.real.newShardPool(shard, dsn, foundLost)
}

// wireRouter is a Router on shards (name → DSN) routed by routes; adjust changes its settings.
func wireRouter(t *testing.T, routes []fakeRange, shards map[string]string, adjust func(*settings)) *Router {
	t.Helper()
	s := scenarioSettings(t, nil)
	s.Shards = shards
	s.ConnectTimeout, s.ShardTimeout = 5*time.Second, 10*time.Second
	if adjust != nil {
		adjust(&s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := newRouter(ctx, s, wireDriver{newFakeCluster(routes), &pgxDriver{s: s}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// Statements of the scripted shard besides the router's own.
const (
	wireReadSQL = "SELECT n FROM t WHERE owner = $1" // one row: n = owner * 2
	wireFailSQL = "SELECT fail"                      // 22012
)

// scriptedShard is a scripted server that answers the router's statements and the tests'.
func scriptedShard(t *testing.T) (*pgscript.Server, *pgscript.IDGen) {
	server := pgscript.Start(t)
	routes := server.ServeIDGen([]pgscript.Range{{Lower: 0, Upper: 65535, Shard: "a"}})
	server.Handle(wireReadSQL, pgscript.Handler{
		Params: []uint32{pgscript.Int8}, Columns: []pgscript.Column{{Name: "n", Type: pgscript.Int8}},
		Run: func(_ string, params []string) pgscript.Result {
			owner, _ := strconv.ParseInt(params[0], 10, 64)
			return pgscript.Result{Rows: [][]string{{strconv.FormatInt(2*owner, 10)}}}
		},
	})
	server.Handle(wireFailSQL, pgscript.Handler{Run: func(string, []string) pgscript.Result { return pgscript.Result{Code: "22012"} }})
	return server, routes
}

func oneShard(t *testing.T) (*pgscript.Server, *Router) {
	server, _ := scriptedShard(t)
	return server, wireRouter(t, []fakeRange{{65535, "a"}}, map[string]string{"a": server.DSN()}, nil)
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// readOwner is a body that reads by owner 21 (n = 42) and checks it.
func readOwner(t *testing.T) TxBody {
	return func(ctx context.Context, tx pgx.Tx) error {
		var n int64
		if err := tx.QueryRow(ctx, wireReadSQL, int64(21)).Scan(&n); err != nil {
			return err
		}
		if n != 42 {
			t.Errorf("read %d, want 42", n)
		}
		return nil
	}
}

func TestPgxTransactionOnTheWire(t *testing.T) {
	server, r := oneShard(t)
	ctx := testContext(t)
	err := r.Transaction(ctx, Gene(7), func(ctx context.Context, tx pgx.Tx) error {
		if err := readOwner(t)(ctx, tx); err != nil {
			return err
		}
		if err := tx.BeginFunc(ctx, func(sp pgx.Tx) error {
			_, err := sp.Exec(ctx, wireFailSQL)
			return err
		}); SQLState(err) != "22012" {
			t.Errorf("the savepoint's body: %v", err)
		}
		if !errors.Is(tx.Commit(ctx), ErrTxOwnedByRouter) {
			t.Error("the body committed the router's transaction")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"Query " + routingProtocolSQL,                // (the first claim on the shard: probed first)
		"Query /* id_gen.route_claim=7,1 */ BEGIN",   // (the claim: one message)
		"Parse " + wireReadSQL, "Describe S", "Sync", // (described into the unnamed statement)
		"Parse " + wireReadSQL, "Bind", "Describe P", "Execute", "Sync",
		"Query SAVEPOINT sp_1", "Query " + wireFailSQL, "Query ROLLBACK TO SAVEPOINT sp_1",
		"Query COMMIT",
	}
	if got := server.Messages(); !reflect.DeepEqual(got, want) {
		t.Errorf("received\n%q\nwant\n%q", got, want)
	}
	if err := r.Transaction(ctx, Gene(7), readOwner(t)); err != nil {
		t.Fatal(err)
	}
	want = []string{"Query /* id_gen.route_claim=7,1 */ BEGIN", "Parse " + wireReadSQL, "Bind", "Describe P",
		"Execute", "Sync", "Query COMMIT"}
	if got := server.Messages(); !reflect.DeepEqual(got, want) {
		t.Errorf("the second time (the connection, the protocol and the description known):\n%q\nwant\n%q", got, want)
	}
	if n := server.Connections(); n != 1 {
		t.Errorf("%d connections", n)
	}
}

func TestPgxIG001AtTheClaimOnBEGINIsRetried(t *testing.T) {
	server, r := oneShard(t)
	server.FailNext("/* id_gen.route_claim=", "IG001")
	if err := r.Transaction(testContext(t), Gene(7), readOwner(t)); err != nil {
		t.Fatal(err)
	}
	got := server.Messages()
	claim := "Query /* id_gen.route_claim=7,1 */ BEGIN"
	if len(got) < 3 || got[0] != "Query "+routingProtocolSQL || got[1] != claim || got[2] != claim {
		t.Errorf("received %q\nwant the probe, the claim and the claim again (no transaction to roll back)", got)
	}
	if s := r.Stats(); s.RetriesMoved != 1 || s.Refreshes != 2 || s.Transactions != 1 || server.Connections() != 1 {
		t.Errorf("stats %+v, %d connections", s, server.Connections())
	}
}

func TestPgxAnOldShardGetsTheOldClaim(t *testing.T) {
	server, routes := scriptedShard(t)
	routes.SetRoutingProtocol(pgscript.Null)
	r := wireRouter(t, []fakeRange{{65535, "a"}}, map[string]string{"a": server.DSN()}, nil)
	server.FailNext("SELECT id_gen.route_claim(", "IG001")
	if err := r.Transaction(testContext(t), Gene(7), readOwner(t)); err != nil {
		t.Fatal(err)
	}
	got := server.Messages()
	claim := "Query BEGIN; SELECT id_gen.route_claim(7, 1)"
	if len(got) < 4 || got[0] != "Query "+routingProtocolSQL || got[1] != claim || got[2] != "Query ROLLBACK" || got[3] != claim {
		t.Errorf("received %q\nwant the probe (NULL), the old claim, ROLLBACK and the old claim again", got)
	}
	if s := r.Stats(); s.RetriesMoved != 1 || s.Transactions != 1 || server.Connections() != 1 {
		t.Errorf("stats %+v, %d connections", s, server.Connections())
	}
}

func TestPgxAClaimOnBEGINRefusedIsRetriedOnTheNewOwner(t *testing.T) {
	serverA, routesA := scriptedShard(t)
	serverB, routesB := scriptedShard(t)
	r := wireRouter(t, []fakeRange{{65535, "a"}}, map[string]string{"a": serverA.DSN(), "b": serverB.DSN()}, nil)
	coordinator := r.drv.(wireDriver)
	ctx := testContext(t)
	if err := r.Transaction(ctx, Gene(7), readOwner(t)); err != nil {
		t.Fatal(err)
	}
	serverA.Messages()
	// Gene 7 moves to b (version 2), unseen: a refuses the claim, b takes it.
	coordinator.change([]fakeRange{{65535, "b"}}, false)
	routesA.Change(nil)
	routesB.Change(nil)
	if err := r.Transaction(ctx, Gene(7), readOwner(t)); err != nil {
		t.Fatal(err)
	}
	if got, want := serverA.Messages(), []string{"Query /* id_gen.route_claim=7,1 */ BEGIN"}; !reflect.DeepEqual(got, want) {
		t.Errorf("a received %q\nwant %q (no transaction to roll back)", got, want)
	}
	gotB := serverB.Messages()
	if len(gotB) < 3 || gotB[0] != "Query "+routingProtocolSQL || gotB[1] != "Query /* id_gen.route_claim=7,2 */ BEGIN" ||
		gotB[len(gotB)-1] != "Query COMMIT" {
		t.Errorf("b received %q", gotB)
	}
	// Back to a (version 3): its connection went back to the pool good, its protocol still known.
	coordinator.change([]fakeRange{{65535, "a"}}, false)
	routesA.Change(nil)
	if _, err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Transaction(ctx, Gene(7), readOwner(t)); err != nil {
		t.Fatal(err)
	}
	if got := serverA.Messages(); len(got) < 1 || got[0] != "Query /* id_gen.route_claim=7,3 */ BEGIN" || serverA.Connections() != 1 {
		t.Errorf("a received %q on %d connections", got, serverA.Connections())
	}
	if s := r.Stats(); s.RetriesMoved != 1 || s.Transactions != 3 {
		t.Errorf("stats %+v", s)
	}
}

func TestPgxAShardRestartedWithAnotherIDGenIsProbedAgain(t *testing.T) {
	server, routes := scriptedShard(t)
	r := wireRouter(t, []fakeRange{{65535, "a"}}, map[string]string{"a": server.DSN()}, nil)
	ctx := testContext(t)
	for _, answer := range []string{"2", pgscript.Null, "2"} {
		routes.SetRoutingProtocol(answer)
		server.TerminateAll(true) // (the idle connection found closed before use: the shard probed again)
		for i := 0; i < 2; i++ {
			if err := r.Transaction(ctx, Gene(7), readOwner(t)); err != nil {
				t.Fatal(err)
			}
		}
		claim := "Query /* id_gen.route_claim=7,1 */ BEGIN"
		if answer == pgscript.Null {
			claim = "Query BEGIN; SELECT id_gen.route_claim(7, 1)"
		}
		probes, claims := 0, 0
		for _, m := range server.Messages() {
			switch m {
			case "Query " + routingProtocolSQL:
				probes++
			case claim:
				claims++
			}
		}
		if probes != 1 || claims != 2 {
			t.Errorf("routing protocol %q: %d probes, %d claims %q; want 1, 2", answer, probes, claims, claim)
		}
	}
	if s := r.Stats(); s.RetriesLost != 0 || s.Transactions != 6 {
		t.Errorf("stats %+v", s)
	}
}

func TestPgxCommitAnsweredByRollback(t *testing.T) {
	_, r := oneShard(t)
	err := r.Transaction(testContext(t), Gene(7), func(ctx context.Context, tx pgx.Tx) error {
		_, _ = tx.Exec(ctx, wireFailSQL) // (swallowed: the transaction failed anyway)
		return nil
	})
	if !errors.Is(err, pgx.ErrTxCommitRollback) {
		t.Errorf("error %v", err)
	}
}

func TestPgxCommitLost(t *testing.T) {
	server, r := oneShard(t)
	ctx := testContext(t)
	server.CloseOnNextCommit()
	err := r.Transaction(ctx, Gene(7), readOwner(t))
	var unknown *CommitOutcomeUnknownError
	if !errors.As(err, &unknown) || unknown.Err == nil || !IsLostConnection(unknown.Err) {
		t.Fatalf("error %v", err)
	}
	if err := r.Transaction(ctx, Gene(7), readOwner(t)); err != nil {
		t.Fatal(err)
	}
	if s := r.Stats(); s.RetriesLost != 0 || s.Transactions != 1 || server.Connections() != 2 {
		t.Errorf("stats %+v, %d connections", s, server.Connections())
	}
}

func TestPgxExecuteIsOneRoundTrip(t *testing.T) {
	server, r := oneShard(t)
	ctx := testContext(t)
	for i := 0; i < 2; i++ {
		rows, err := r.Execute(ctx, Owner(int64(21)), wireReadSQL, int64(21))
		if err != nil || !reflect.DeepEqual(rows, [][]any{{int64(42)}}) {
			t.Fatalf("rows %v, %v", rows, err)
		}
	}
	batch := []string{"Parse /* id_gen.route_version=1 */ " + wireReadSQL, "Bind", "Describe P", "Execute", "Sync"}
	got := server.Messages()
	if !reflect.DeepEqual(got[len(got)-len(batch):], batch) || !reflect.DeepEqual(got[len(got)-2*len(batch):len(got)-len(batch)], batch) {
		t.Errorf("received %q\nwant each Execute to end with %q", got, batch)
	}
	server.FailNext(wireReadSQL, "IG002")
	if _, err := r.Execute(ctx, Owner(int64(21)), wireReadSQL, int64(21)); err != nil {
		t.Fatal(err)
	}
	if s := r.Stats(); s.RetriesFenced != 1 || s.Transactions != 3 || server.Connections() != 1 {
		t.Errorf("stats %+v, %d connections", s, server.Connections())
	}
}

func TestPgxIdleConnectionsEndedByTheServer(t *testing.T) {
	for _, fatal := range []bool{true, false} {
		server, r := oneShard(t)
		ctx := testContext(t)
		if err := r.Transaction(ctx, Gene(7), readOwner(t)); err != nil {
			t.Fatal(err)
		}
		server.TerminateAll(fatal) // (as a shard that restarted: the pooled connection is gone)
		if err := r.Transaction(ctx, Gene(7), readOwner(t)); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Execute(ctx, Owner(int64(21)), wireReadSQL, int64(21)); err != nil {
			t.Fatal(err)
		}
		if s := r.Stats(); s.RetriesLost != 0 || server.Connections() != 2 {
			t.Errorf("FATAL %v: stats %+v, %d connections (the dead one should be dropped before use)", fatal, s, server.Connections())
		}
	}
}

func TestPgxShardsThatDropOrRefuseConnections(t *testing.T) {
	dropping, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer dropping.Close()
	go func() {
		for {
			conn, err := dropping.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	refusing, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusing.Close() // (nothing listens there now)
	dsn := func(ln net.Listener) string {
		return strings.Replace(startPGServerDSN, "PORT", ln.Addr().String()[strings.LastIndex(ln.Addr().String(), ":")+1:], 1)
	}
	r := wireRouter(t, testRoutes, map[string]string{"a": dsn(dropping), "b": dsn(refusing)},
		func(s *settings) { s.retryLimit = 2 })
	for _, gene := range []int{1, 40000} {
		err := r.Transaction(testContext(t), Gene(gene), func(context.Context, pgx.Tx) error { return nil })
		if !errors.Is(err, ErrRetriesExhausted) || !IsLostConnection(errors.Unwrap(err)) {
			t.Errorf("gene %d: %v", gene, err)
		}
	}
	if n := r.Stats().RetriesLost; n != 4 {
		t.Errorf("retries lost %d, want 4", n)
	}
}

const startPGServerDSN = "host=127.0.0.1 port=PORT user=u dbname=d sslmode=disable"

func TestPgxAFailoverBehindAReadWriteMultiHostDSN(t *testing.T) {
	standby, _ := scriptedShard(t)
	var readOnly atomic.Bool
	readOnly.Store(true)
	standby.Handle("show transaction_read_only", pgscript.Handler{
		Columns: []pgscript.Column{{Name: "transaction_read_only", Type: pgscript.Text}},
		Run: func(string, []string) pgscript.Result {
			if readOnly.Load() {
				return pgscript.Result{Rows: [][]string{{"on"}}, Tag: "SHOW"}
			}
			return pgscript.Result{Rows: [][]string{{"off"}}, Tag: "SHOW"}
		},
	})
	refusing, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusing.Close() // (the old primary: nothing listens there now)
	portOf := func(addr string) string { return addr[strings.LastIndex(addr, ":")+1:] }
	standbyPort := portOf(strings.Fields(strings.SplitN(standby.DSN(), "port=", 2)[1])[0])
	dsn := "host=127.0.0.1,127.0.0.1 port=" + portOf(refusing.Addr().String()) + "," + standbyPort +
		" user=u dbname=d sslmode=disable target_session_attrs=read-write connect_timeout=2"
	r := wireRouter(t, []fakeRange{{65535, "a"}}, map[string]string{"a": dsn}, func(s *settings) { s.retryLimit = 2 })
	body := func(context.Context, pgx.Tx) error { return nil }
	err = r.Transaction(testContext(t), Gene(1), body)
	if !errors.Is(err, ErrRetriesExhausted) || !IsLostConnection(errors.Unwrap(err)) ||
		!strings.Contains(err.Error(), "read only connection") {
		t.Fatalf("no writable host: %v", err)
	}
	if n := r.Stats().RetriesLost; n != 2 {
		t.Errorf("retries lost %d, want 2", n)
	}
	readOnly.Store(false) // (promoted)
	if err := r.Transaction(testContext(t), Gene(1), body); err != nil {
		t.Fatalf("after the promotion: %v", err)
	}
}

func TestPgxAShardThatStopsAnsweringTheClaim(t *testing.T) {
	server, _ := scriptedShard(t)
	r := wireRouter(t, []fakeRange{{65535, "a"}}, map[string]string{"a": server.DSN()},
		func(s *settings) { s.ShardTimeout = 300 * time.Millisecond })
	ctx := testContext(t)
	server.StallNext("/* id_gen.route_claim=") // (pgx closes the connection at ShardTimeout)
	runs := 0
	err := r.Transaction(ctx, Gene(7), func(ctx context.Context, tx pgx.Tx) error { runs++; return readOwner(t)(ctx, tx) })
	if err != nil || runs != 1 {
		t.Fatalf("%v after %d runs", err, runs)
	}
	if s := r.Stats(); s.RetriesLost != 1 || s.Transactions != 1 || server.Connections() != 2 {
		t.Errorf("stats %+v, %d connections (the one that hung is discarded)", s, server.Connections())
	}
	server.StallNext("COMMIT") // (after COMMIT was sent: never retried)
	err = r.Transaction(ctx, Gene(7), readOwner(t))
	if !errors.Is(err, ErrCommitOutcomeUnknown) || !strings.Contains(err.Error(), "ShardTimeout") {
		t.Errorf("a COMMIT never answered: %v", err)
	}
	server.StallNext(wireReadSQL) // (Execute's statement travels with its implicit COMMIT)
	if _, err := r.Execute(ctx, Owner(int64(21)), wireReadSQL, int64(21)); !errors.Is(err, ErrCommitOutcomeUnknown) {
		t.Errorf("an Execute never answered: %v", err)
	}
	if s := r.Stats(); s.RetriesLost != 1 || s.Transactions != 1 {
		t.Errorf("stats %+v", s)
	}
}

func TestPgxTheCallersDeadlineWhileTheClaimHangs(t *testing.T) {
	server, r := oneShard(t) // (ShardTimeout 10 s)
	server.StallNext("/* id_gen.route_claim=")
	ctx, cancel := context.WithTimeout(testContext(t), 200*time.Millisecond)
	defer cancel()
	err := r.Transaction(ctx, Gene(7), readOwner(t))
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrRetriesExhausted) || IsLostConnection(err) {
		t.Errorf("error %v", err)
	}
	if s := r.Stats(); s.RetriesLost != 0 || server.Connections() != 1 {
		t.Errorf("stats %+v, %d connections", s, server.Connections())
	}
}

func TestPgxABodysPreparedStatementsEndWithItsTransaction(t *testing.T) {
	server, r := oneShard(t)
	ctx := testContext(t)
	prepareAndRead := func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Prepare(ctx, "read_owner", wireReadSQL); err != nil {
			return err
		}
		return tx.BeginFunc(ctx, func(sp pgx.Tx) error { // (through a savepoint too)
			if _, err := sp.Prepare(ctx, "read_owner_2", wireReadSQL); err != nil {
				return err
			}
			// (Exec by name: pgx 4.15's Query by name, with the describe cache, sends the name as SQL)
			_, err := sp.Exec(ctx, "read_owner", int64(21))
			return err
		})
	}
	for i := 0; i < 2; i++ { // (the second time on the same connection: pgx prepares them again)
		if err := r.Transaction(ctx, Gene(7), prepareAndRead); err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		got := server.Messages()
		want := []string{"Parse[read_owner] " + wireReadSQL, "Describe S", "Sync", "Query SAVEPOINT sp_1",
			"Parse[read_owner_2] " + wireReadSQL, "Describe S", "Sync", "Bind", "Describe P", "Execute", "Sync",
			"Query RELEASE SAVEPOINT sp_1", "Close S read_owner", "Close S read_owner_2", "Sync", "Query COMMIT"}
		if len(got) <= len(want) || !reflect.DeepEqual(got[len(got)-len(want):], want) ||
			got[len(got)-len(want)-1] != "Query /* id_gen.route_claim=7,1 */ BEGIN" {
			t.Errorf("%d: received\n%q\nwant the claim, then\n%q", i, got, want)
		}
		if n := server.Prepared(); n != 0 {
			t.Errorf("%d: %d named statements left on the shard", i, n)
		}
	}
	// A failed transaction (DEALLOCATE would fail there): closed, then ROLLBACK.
	err := r.Transaction(ctx, Gene(7), func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Prepare(ctx, "read_owner", wireReadSQL); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, wireFailSQL)
		return err
	})
	got := server.Messages()
	if SQLState(err) != "22012" || len(got) < 3 || got[len(got)-3] != "Close S read_owner" || got[len(got)-1] != "Query ROLLBACK" {
		t.Errorf("error %v, received %q", err, got)
	}
	if n, c := server.Prepared(), server.Connections(); n != 0 || c != 1 {
		t.Errorf("%d named statements left, %d connections", n, c)
	}
	// A body that ended the transaction itself: its connection is destroyed, not pooled.
	err = r.Transaction(ctx, Gene(7), func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Prepare(ctx, "read_owner", wireReadSQL); err != nil {
			return err
		}
		_, err := tx.Conn().Exec(ctx, "ROLLBACK")
		return err
	})
	if !errors.Is(err, ErrTxEndedByBody) {
		t.Errorf("error %v", err)
	}
	if err := r.Transaction(ctx, Gene(7), prepareAndRead); err != nil || server.Connections() != 2 {
		t.Errorf("%v, %d connections (want a new one)", err, server.Connections())
	}
}

func TestShardPoolConfiguration(t *testing.T) {
	d := &pgxDriver{s: scenarioSettings(t, nil)}
	for _, c := range []struct {
		dsn      string
		mode     int // the statement cache's
		simple   bool
		maxConns int32
	}{
		{"host=h user=u", stmtcache.ModeDescribe, false, 8}, // (PgBouncer-safe: no named statements)
		{"host=h user=u statement_cache_mode=prepare pool_max_conns=3", stmtcache.ModePrepare, false, 3},
		{"host=h user=u prefer_simple_protocol=true", stmtcache.ModePrepare, true, 8},
	} {
		pool, err := d.newShardPool("a", c.dsn, nil)
		if err != nil {
			t.Fatal(err)
		}
		config := pool.(pgxShardPool).pool.Config()
		if mode := config.ConnConfig.BuildStatementCache(nil).Mode(); mode != c.mode || config.ConnConfig.PreferSimpleProtocol != c.simple {
			t.Errorf("%s: statement cache mode %d, simple protocol %v", c.dsn, mode, config.ConnConfig.PreferSimpleProtocol)
		}
		if config.MaxConns != c.maxConns || config.ConnConfig.ConnectTimeout != DefaultConnectTimeout || config.BeforeAcquire == nil {
			t.Errorf("%s: max %d, connect timeout %v", c.dsn, config.MaxConns, config.ConnConfig.ConnectTimeout)
		}
		pool.close()
		// The exported function (for pools of an application's own) makes the same configuration.
		own, err := ShardPoolConfig(Config{ConfigureShardPool: func(shard string, config *pgxpool.Config) {
			config.HealthCheckPeriod = 42 * time.Second
		}}, "a", c.dsn)
		if err != nil {
			t.Fatal(err)
		}
		if mode := own.ConnConfig.BuildStatementCache(nil).Mode(); mode != c.mode || own.MaxConns != c.maxConns ||
			own.ConnConfig.ConnectTimeout != DefaultConnectTimeout || own.BeforeAcquire == nil || !own.LazyConnect ||
			own.ConnConfig.PreferSimpleProtocol != c.simple || own.HealthCheckPeriod != 42*time.Second {
			t.Errorf("%s: ShardPoolConfig %+v", c.dsn, own)
		}
	}
	if _, err := ShardPoolConfig(Config{MaxConns: -1}, "a", "host=h"); err == nil {
		t.Error("a negative MaxConns")
	}
}

func TestNewRouterOnTheWire(t *testing.T) {
	server, routes := scriptedShard(t)
	ctx := testContext(t)
	r, err := NewRouter(ctx, Config{Routes: server.DSN(), Shards: map[string]string{"a": server.DSN()}, RefreshInterval: NoRefreshPoll})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := server.Messages(); len(got) < 2 || got[0] != "Query LISTEN id_gen_routes" || got[1] != "Query "+routesSQL {
		t.Errorf("LISTEN, then the routes: %q", got)
	}
	if r.Version() != 1 || !reflect.DeepEqual(r.Routes(), []RouteRange{{0, 65535, "a"}}) {
		t.Errorf("version %d, routes %v", r.Version(), r.Routes())
	}
	if err := r.Transaction(ctx, Owner("alice"), readOwner(t)); err != nil {
		t.Fatal(err)
	}
	server.Notify(routesChannel, strconv.FormatInt(routes.Change([]pgscript.Range{{Lower: 0, Upper: 65535, Shard: "a"}}), 10))
	eventually(t, "the routes after a NOTIFY", func() bool { return r.Version() == 2 })

	server.TerminateAll(true) // (the coordinator restarted: the listener reconnects and re-reads)
	routes.Change([]pgscript.Range{{Lower: 0, Upper: 65535, Shard: "a"}})
	eventually(t, "the routes after the listener came back", func() bool { return r.Version() == 3 })
	eventually(t, "a listener again", func() bool { return server.Listening(routesChannel) == 1 })
	version := routes.Change([]pgscript.Range{{Lower: 0, Upper: 65535, Shard: "a"}})
	server.Notify(routesChannel, strconv.FormatInt(version, 10))
	eventually(t, "a NOTIFY heard on the new listener", func() bool { return r.Version() == version })
	if err := r.Transaction(ctx, Owner("alice"), readOwner(t)); err != nil {
		t.Fatal(err)
	}
}

func TestNewRouterPollsTheVersion(t *testing.T) {
	server, routes := scriptedShard(t)
	ctx := testContext(t)
	r, err := NewRouter(ctx, Config{Routes: server.DSN(), Shards: map[string]string{"a": server.DSN()}, NoListen: true,
		RefreshInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	routes.Change([]pgscript.Range{{Lower: 0, Upper: 100, Shard: "a"}})
	eventually(t, "the routes after a change nobody notified", func() bool { return r.Version() == 2 })
	if _, err := r.ShardForGene(200); !errors.Is(err, ErrNoRoute) {
		t.Errorf("gene 200: %v", err)
	}
}

func TestAQuietListenerPingsAndKeepsListening(t *testing.T) {
	defer func(d time.Duration) { listenerIdleCheck = d }(listenerIdleCheck)
	listenerIdleCheck = 5 * time.Millisecond
	server, routes := scriptedShard(t)
	r, err := NewRouter(testContext(t), Config{Routes: server.DSN(), Shards: map[string]string{"a": server.DSN()},
		RefreshInterval: NoRefreshPoll})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	pings := 0
	eventually(t, "three pings of the listener", func() bool {
		for _, m := range server.Messages() {
			if m == "Query ;" {
				pings++
			}
		}
		return pings >= 3
	})
	version := routes.Change([]pgscript.Range{{Lower: 0, Upper: 65535, Shard: "a"}})
	server.Notify(routesChannel, strconv.FormatInt(version, 10))
	eventually(t, "a NOTIFY heard after the pings", func() bool { return r.Version() == version })
	if n := server.Connections(); n != 2 {
		t.Errorf("%d connections (the listener and the route reads), want 2: the listener reconnected", n)
	}
}
