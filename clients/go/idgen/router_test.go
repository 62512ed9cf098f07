// The Router against the fake of fake_test.go, beyond the shared scenarios: 64-bit ids, a body
// that swallowed an error, what is sent to a shard (nothing per session), the claim on BEGIN or
// the old one by the shard's probed routing protocol, route changes heard, missed and polled,
// the coordinator down at the start, lost shard connections, Close, and the caller's context.

package idgen

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
)

var testRoutes = []fakeRange{{32767, "a"}, {65535, "b"}}

// withRouter runs test with a Router on a fake cluster of testRoutes; adjust changes the
// scenarios' settings first. It checks that no connection leaked.
func withRouter(t *testing.T, adjust func(*settings), test func(ctx context.Context, r *Router, c *fakeCluster)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := scenarioSettings(t, nil)
	if adjust != nil {
		adjust(&s)
	}
	cluster := newFakeCluster(append([]fakeRange(nil), testRoutes...))
	router, err := newRouter(ctx, s, cluster)
	if err != nil {
		t.Fatal(err)
	}
	defer router.Close()
	test(ctx, router, cluster)
	if leaks := cluster.leaks(); leaks != "" {
		t.Error(leaks)
	}
}

// eventually polls cond until it holds; fails with what after timeout.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 5 s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestNextIDExactAbove2To53(t *testing.T) {
	withRouter(t, nil, func(ctx context.Context, r *Router, c *fakeCluster) {
		id, err := r.NextID(ctx, "orders", int64(42))
		if err != nil || id != 9007199254740993 {
			t.Fatalf("NextID = %d, %v", id, err)
		}
		if !reflect.DeepEqual(c.lastParams, []any{"orders", int64(42)}) {
			t.Errorf("params %v", c.lastParams)
		}
		u := [16]byte{0x12, 0x34, 0x56, 0x78, 0x12, 0x34, 0x56, 0x78, 0x12, 0x34, 0x56, 0x78, 0x12, 0x34, 0x56, 0x78}
		if _, err := r.NextID(ctx, "orders", u); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(c.lastParams, []any{"orders", "12345678-1234-5678-1234-567812345678"}) {
			t.Errorf("a uuid owner goes as its text: %v", c.lastParams)
		}
		if !strings.Contains(c.sent()[len(c.sent())-2], "$2::uuid") {
			t.Errorf("the owner's type: %v", c.sent())
		}
		if _, err := r.NextID(ctx, "orders", []byte("x")); err == nil {
			t.Error("gene_order_id has no bytea owner")
		}
	})
}

func TestABodyThatSwallowedAnErrorIsNotReportedCommitted(t *testing.T) {
	withRouter(t, nil, func(ctx context.Context, r *Router, c *fakeCluster) {
		err := r.Transaction(ctx, Gene(1), func(ctx context.Context, tx pgx.Tx) error {
			_, _ = tx.Exec(ctx, "SELECT fail")
			return nil
		})
		if !errors.Is(err, pgx.ErrTxCommitRollback) {
			t.Fatalf("error %v, want pgx.ErrTxCommitRollback", err)
		}
		if n := r.Stats().Transactions; n != 0 {
			t.Errorf("%d transactions counted committed", n)
		}
	})
}

func TestABodyThatEndsTheTransactionItself(t *testing.T) {
	withRouter(t, nil, func(ctx context.Context, r *Router, c *fakeCluster) {
		err := r.Transaction(ctx, Gene(1), func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "ROLLBACK")
			return err
		})
		if !errors.Is(err, ErrTxEndedByBody) || r.Stats().Transactions != 0 {
			t.Fatalf("a ROLLBACK in the body: error %v, %d committed; want ErrTxEndedByBody, 0", err, r.Stats().Transactions)
		}
		runs := 0
		err = r.Transaction(ctx, Gene(1), func(ctx context.Context, tx pgx.Tx) error {
			runs++
			_, _ = tx.Exec(ctx, "COMMIT")
			return sqlError("IG001") // (a statement after its own COMMIT runs without the claim)
		})
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "IG001" || runs != 1 || r.Stats().RetriesMoved != 0 {
			t.Fatalf("an error after the body's own COMMIT: %v after %d runs; want IG001, never run again", err, runs)
		}
	})
}

func TestAShardGetsTheVersionPerTransactionOnly(t *testing.T) {
	withRouter(t, nil, func(ctx context.Context, r *Router, c *fakeCluster) {
		if err := r.Transaction(ctx, Gene(1), func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "SELECT 1")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Execute(ctx, Owner(int64(1)), fakeReadSQL, int64(1)); err != nil {
			t.Fatal(err)
		}
		want := []string{routingProtocolSQL, "/* id_gen.route_claim=1,1 */ BEGIN", "SELECT 1", "COMMIT",
			"/* id_gen.route_version=1 */ " + fakeReadSQL}
		if got := c.sent(); !reflect.DeepEqual(got, want) {
			t.Errorf("sent %q\nwant %q", got, want)
		}
	})
}

// commit is a body that commits what it finds.
func commit(context.Context, pgx.Tx) error { return nil }

func TestTheRoutingProtocolsAnswer(t *testing.T) {
	for answer, onBegin := range map[string]bool{"2": true, "3": true, "": false, "1": false, "x": false, " 2": false, "2.0": false} {
		if claimsOnBegin(answer) != onBegin {
			t.Errorf("routing protocol %q: claims on BEGIN %v", answer, !onBegin)
		}
	}
}

func TestANewShardTakesTheClaimOnBEGINProbedOnce(t *testing.T) {
	withRouter(t, nil, func(ctx context.Context, r *Router, c *fakeCluster) {
		for i := 0; i < 5; i++ {
			if err := r.Transaction(ctx, Gene(1), commit); err != nil {
				t.Fatal(err)
			}
		}
		want := []string{routingProtocolSQL, "/* id_gen.route_claim=1,1 */ BEGIN", "COMMIT",
			"/* id_gen.route_claim=1,1 */ BEGIN", "COMMIT"}
		if got := c.sent(); len(got) != 11 || !reflect.DeepEqual(got[:5], want) {
			t.Errorf("sent %q\nwant it to begin with %q, 11 in all", got, want)
		}
		if err := r.Transaction(ctx, Gene(40000), commit); err != nil {
			t.Fatal(err)
		}
		if n := c.probes(); n != 2 {
			t.Errorf("%d probes for 6 transactions on 2 shards, want one per shard", n)
		}
	})
}

func TestAnOldShardGetsTheOldClaim(t *testing.T) {
	withRouter(t, nil, func(ctx context.Context, r *Router, c *fakeCluster) {
		c.oldShards["a"] = true // (its probe answers NULL)
		for i := 0; i < 2; i++ {
			if err := r.Transaction(ctx, Gene(1), commit); err != nil {
				t.Fatal(err)
			}
		}
		want := []string{routingProtocolSQL, "BEGIN; SELECT id_gen.route_claim(1, 1)", "COMMIT",
			"BEGIN; SELECT id_gen.route_claim(1, 1)", "COMMIT"}
		if got := c.sent(); !reflect.DeepEqual(got, want) {
			t.Errorf("sent %q\nwant %q", got, want)
		}
		c.change([]fakeRange{{65535, "b"}}, false) // (the old claim still finds a stale route)
		if err := r.Transaction(ctx, Gene(1), commit); err != nil || r.Stats().RetriesMoved != 1 {
			t.Errorf("%v, stats %+v", err, r.Stats())
		}
	})
}

func TestAProbeThatFailsMeansTheOldClaim(t *testing.T) {
	withRouter(t, nil, func(ctx context.Context, r *Router, c *fakeCluster) {
		c.probesFail = 1
		for i := 0; i < 2; i++ {
			if err := r.Transaction(ctx, Gene(1), commit); err != nil {
				t.Fatal(err)
			}
		}
		want := []string{routingProtocolSQL, "BEGIN; SELECT id_gen.route_claim(1, 1)", "COMMIT",
			"BEGIN; SELECT id_gen.route_claim(1, 1)", "COMMIT"}
		if got := c.sent(); !reflect.DeepEqual(got, want) {
			t.Errorf("sent %q\nwant %q", got, want)
		}
	})
}

func TestAfterALostConnectionTheShardIsProbedAgain(t *testing.T) {
	withRouter(t, nil, func(ctx context.Context, r *Router, c *fakeCluster) {
		transaction := func(what string) {
			t.Helper()
			if err := r.Transaction(ctx, Gene(1), commit); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
		transaction("the first")
		c.claimsLost = 1
		transaction("a claim lost")
		if n, lost := c.probes(), r.Stats().RetriesLost; n != 2 || lost != 1 {
			t.Errorf("after a claim lost: %d probes, %d retries lost; want 2, 1", n, lost)
		}
		// The shard restarts with an older id_gen: refused meanwhile, then probed and claimed so.
		c.oldShards["a"], c.connectFails = true, 1
		transaction("a connect refused")
		if got := c.sent(); got[len(got)-3] != routingProtocolSQL || got[len(got)-2] != "BEGIN; SELECT id_gen.route_claim(1, 1)" {
			t.Errorf("after a connect refused: sent %q", got)
		}
		// Refused again, back on the newer id_gen, and lost under the probe: retried as at the claim.
		c.oldShards["a"], c.connectFails, c.probesLost = false, 1, 1
		transaction("a probe lost")
		if n, lost := c.probes(), r.Stats().RetriesLost; n != 5 || lost != 4 {
			t.Errorf("after a probe lost: %d probes, %d retries lost; want 5, 4", n, lost)
		}
		transaction("the last")
		if got := c.sent(); c.probes() != 5 || got[len(got)-2] != "/* id_gen.route_claim=1,1 */ BEGIN" {
			t.Errorf("sent %q", got)
		}
	})
}

func TestAClaimOnBEGINRefusedIsRetriedOnTheNewOwner(t *testing.T) {
	withRouter(t, nil, func(ctx context.Context, r *Router, c *fakeCluster) {
		c.change([]fakeRange{{65535, "b"}}, false) // (gene 1 moved to b, unseen)
		if err := r.Transaction(ctx, Gene(1), commit); err != nil {
			t.Fatal(err)
		}
		var onA, onB []string
		for _, conn := range c.pools["a"].conns {
			onA = append(onA, conn.log...)
		}
		for _, conn := range c.pools["b"].conns {
			onB = append(onB, conn.log...)
		}
		// (no ROLLBACK on a: the BEGIN that failed left no transaction there)
		if want := []string{routingProtocolSQL, "/* id_gen.route_claim=1,1 */ BEGIN"}; !reflect.DeepEqual(onA, want) {
			t.Errorf("sent to a %q\nwant %q", onA, want)
		}
		if want := []string{routingProtocolSQL, "/* id_gen.route_claim=1,2 */ BEGIN", "COMMIT"}; !reflect.DeepEqual(onB, want) {
			t.Errorf("sent to b %q\nwant %q", onB, want)
		}
		if s := r.Stats(); s.RetriesMoved != 1 || s.Transactions != 1 || c.pool("a").destroyed != 0 {
			t.Errorf("stats %+v, %d destroyed on a (the connection is idle and good)", s, c.pool("a").destroyed)
		}
	})
}

func TestRouteChangesNotifiedAndPolled(t *testing.T) {
	withRouter(t, func(s *settings) { s.NoListen = false }, func(ctx context.Context, r *Router, c *fakeCluster) {
		c.change([]fakeRange{{65535, "b"}}, true)
		eventually(t, "the routes after a NOTIFY", func() bool { return r.Version() == 2 })
		if shard, _ := r.ShardForGene(1); shard != "b" {
			t.Errorf("gene 1 on %q", shard)
		}
	})
	withRouter(t, func(s *settings) { s.RefreshInterval = 10 * time.Millisecond }, func(ctx context.Context, r *Router, c *fakeCluster) {
		c.change([]fakeRange{{65535, "b"}}, false)
		eventually(t, "the routes after a change nobody notified", func() bool { return r.Version() == 2 })
	})
}

func TestAListenerLostReconnectsAndRereads(t *testing.T) {
	withRouter(t, func(s *settings) { s.NoListen = false }, func(ctx context.Context, r *Router, c *fakeCluster) {
		c.change([]fakeRange{{65535, "b"}}, false) // (missed while it was away)
		c.loseListeners()
		eventually(t, "the routes after the listener came back", func() bool { return r.Version() == 2 })
		eventually(t, "a listener again", func() bool { return c.listenerCount() == 1 })
	})
}

// eventuallyEqual polls get until it returns want; fails with what and the last value seen
// after 5 s.
func eventuallyEqual[T comparable](t *testing.T, what string, want T, get func() T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := get()
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 5 s: want %v, last seen %v", what, want, got)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// LISTEN failing at the start (a pooler in front of the coordinator, say) does not fail
// NewRouter: the routes are read and served, the version poll sees a change, the listener is
// retried in the background and listens once LISTEN works; Close ends the retries.
func TestAListenThatFailsAtTheStartDoesNotFailTheRouter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cluster := newFakeCluster(append([]fakeRange(nil), testRoutes...))
	cluster.listenFails = true
	s := scenarioSettings(t, nil)
	s.NoListen, s.RefreshInterval = false, 10*time.Millisecond
	r, err := newRouter(ctx, s, cluster)
	if err != nil {
		t.Fatalf("NewRouter while LISTEN fails: %v", err)
	}
	defer r.Close()
	if n := cluster.listenAttemptCount(); n < 1 || cluster.listenerCount() != 0 || r.Version() != 1 {
		t.Fatalf("%d LISTEN attempts, %d listeners, version %d", n, cluster.listenerCount(), r.Version())
	}
	noop := func(context.Context, pgx.Tx) error { return nil }
	if err := r.Transaction(ctx, Gene(1), noop); err != nil {
		t.Fatalf("a transaction while LISTEN fails: %v", err)
	}
	cluster.change([]fakeRange{{65535, "b"}}, true) // (nobody listens: the poll sees it)
	eventuallyEqual(t, "the version after a change while LISTEN fails", int64(2), r.Version)
	if shard, err := r.ShardForGene(1); shard != "b" || err != nil {
		t.Errorf("gene 1 on %q, %v", shard, err)
	}
	if err := r.Transaction(ctx, Gene(1), noop); err != nil {
		t.Fatalf("a transaction after the change: %v", err)
	}
	attempts := cluster.listenAttemptCount()
	eventuallyEqual(t, "LISTEN retried in the background", true, func() bool { return cluster.listenAttemptCount() > attempts })
	cluster.setListenFails(false)
	eventuallyEqual(t, "a listener once LISTEN works", 1, cluster.listenerCount)
	r.Close()
	if n := cluster.listenerCount(); n != 0 {
		t.Errorf("%d listeners after Close", n)
	}
	if leaks := cluster.leaks(); leaks != "" {
		t.Error(leaks)
	}
}

func TestTheCoordinatorDownAtTheStart(t *testing.T) {
	ctx := context.Background()
	for _, listen := range []bool{true, false} {
		cluster := newFakeCluster(testRoutes)
		cluster.down = true
		s := scenarioSettings(t, nil)
		s.NoListen = !listen
		if r, err := newRouter(ctx, s, cluster); err == nil || r != nil {
			t.Fatalf("listen %v: a Router without routes: %v", listen, err)
		}
		if !errors.Is(newRouterError(cluster, s), syscall.ECONNREFUSED) {
			t.Errorf("listen %v: the coordinator's error is not kept", listen)
		}
		for name, p := range cluster.pools {
			if !p.closed {
				t.Errorf("listen %v: the pool of %s was left open", listen, name)
			}
		}
	}
}

// newRouterError is newRouter's error on cluster.
func newRouterError(cluster *fakeCluster, s settings) error {
	_, e := newRouter(context.Background(), s, cluster)
	return e
}

func TestEmptyRoutes(t *testing.T) {
	cluster := newFakeCluster(nil)
	r, e := newRouter(context.Background(), scenarioSettings(t, nil), cluster)
	if e != nil {
		t.Fatal(e)
	}
	defer r.Close()
	if r.Version() != 1 || len(r.Routes()) != 0 {
		t.Errorf("version %d, routes %v", r.Version(), r.Routes())
	}
	if e := r.Transaction(context.Background(), Gene(1), func(context.Context, pgx.Tx) error { return nil }); !errors.Is(e, ErrNoRoute) {
		t.Errorf("no routes: %v", e)
	}
}

func TestNoRouteAndBadKeys(t *testing.T) {
	withRouter(t, func(s *settings) { delete(s.Shards, "b") }, func(ctx context.Context, r *Router, c *fakeCluster) {
		body := func(context.Context, pgx.Tx) error { return nil }
		var noRoute *NoRouteError
		if e := r.Transaction(ctx, Gene(40000), body); !errors.As(e, &noRoute) || noRoute.Shard != "b" || !errors.Is(e, ErrNoRoute) {
			t.Errorf("a shard without a connection: %v", e)
		}
		for _, key := range []Key{ID(-1), Gene(-1), Gene(70000), {}} {
			if e := r.Transaction(ctx, key, body); e == nil || errors.Is(e, ErrNoRoute) {
				t.Errorf("%v: %v", key, e)
			}
		}
		if shard, e := r.ShardForID(9007199254740993); shard != "a" || e != nil {
			t.Errorf("ShardForID: %q, %v", shard, e)
		}
		if got := r.Routes(); !reflect.DeepEqual(got, []RouteRange{{0, 32767, "a"}, {32768, 65535, "b"}}) {
			t.Errorf("routes %v", got)
		}
	})
}

func TestAConnectionLostBetweenTheBodyAndCommit(t *testing.T) {
	withRouter(t, nil, func(ctx context.Context, r *Router, c *fakeCluster) {
		runs := 0
		loseOnce := func(ctx context.Context, tx pgx.Tx) error {
			if runs++; runs == 1 {
				tx.(*fakeTx).conn.dead = true // (the body saw nothing; COMMIT will not be sent)
			}
			return nil
		}
		if e := r.Transaction(ctx, Gene(1), loseOnce); e != nil || runs != 2 {
			t.Fatalf("transaction: %v after %d runs", e, runs)
		}
		if n := r.Stats().RetriesLost; n != 1 {
			t.Errorf("retries lost %d", n)
		}
		runs = 0
		e := r.Run(ctx, Gene(1), loseOnce)
		if !errors.As(e, &fakeConnClosed{}) || errors.Is(e, ErrCommitOutcomeUnknown) || runs != 1 {
			t.Errorf("run: %v after %d runs", e, runs)
		}
		if p := c.pool("a"); p.destroyed != 2 {
			t.Errorf("%d connections destroyed, want 2", p.destroyed)
		}
	})
}

func TestExecuteLostConnections(t *testing.T) {
	withRouter(t, nil, func(ctx context.Context, r *Router, c *fakeCluster) {
		c.readsLost = 1
		_, e := r.Execute(ctx, Owner(int64(1)), fakeReadSQL, int64(1))
		if !errors.Is(e, ErrCommitOutcomeUnknown) || SQLState(e) != "57P01" {
			t.Fatalf("lost under the statement (sent with its implicit COMMIT): %v", e)
		}
		if s := r.Stats(); s.RetriesLost != 0 || s.Transactions != 0 {
			t.Errorf("stats %+v", s)
		}
		c.connectFails = 1
		shard, _ := r.ShardForOwner(int64(1))
		if shard != "a" {
			t.Fatalf("owner 1 is on %s", shard)
		}
		if rows, e := r.Execute(ctx, Owner(int64(1)), fakeReadSQL, int64(1)); e != nil || len(rows) != 1 {
			t.Fatalf("refused, then retried: %v %v", rows, e)
		}
		if n := r.Stats().RetriesLost; n != 1 {
			t.Errorf("retries lost %d", n)
		}
	})
}

func TestRetriesExhaustedAfterLostConnections(t *testing.T) {
	withRouter(t, func(s *settings) { s.retryLimit = 1 }, func(ctx context.Context, r *Router, c *fakeCluster) {
		c.connectFails = 5
		e := r.Transaction(ctx, Gene(1), func(context.Context, pgx.Tx) error { return nil })
		if !errors.Is(e, ErrRetriesExhausted) || !errors.Is(e, syscall.ECONNREFUSED) {
			t.Fatalf("error %v", e)
		}
		if !strings.Contains(e.Error(), "refused or lost in 2 attempts") {
			t.Errorf("message %q", e)
		}
		if n := r.Stats().RetriesLost; n != 1 {
			t.Errorf("retries lost %d", n)
		}
	})
}

func TestAConnectThatFailsForAnotherReasonIsNotRetried(t *testing.T) {
	withRouter(t, nil, func(ctx context.Context, r *Router, c *fakeCluster) {
		c.connectFails = 1
		c.connectError = func() error { return sqlError("28P01") }
		e := r.Transaction(ctx, Gene(1), func(context.Context, pgx.Tx) error { return nil })
		if SQLState(e) != "28P01" || errors.Is(e, ErrRetriesExhausted) || r.Stats().RetriesLost != 0 {
			t.Errorf("error %v, stats %+v", e, r.Stats())
		}
	})
}

func TestAPanicInTheBodyDestroysItsConnection(t *testing.T) {
	withRouter(t, nil, func(ctx context.Context, r *Router, c *fakeCluster) {
		func() {
			defer func() {
				if recover() != "body" {
					t.Error("the panic did not reach the caller")
				}
			}()
			_ = r.Transaction(ctx, Gene(1), func(context.Context, pgx.Tx) error { panic("body") })
		}()
		if p := c.pool("a"); p.destroyed != 1 {
			t.Errorf("%d destroyed", p.destroyed)
		}
	})
}

func TestTheCallersContextEndsTheRetries(t *testing.T) {
	withRouter(t, func(s *settings) { s.BackoffBase, s.BackoffMax = time.Hour, time.Hour }, func(_ context.Context, r *Router, c *fakeCluster) {
		c.fences = 100
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		e := r.Transaction(ctx, Gene(1), func(context.Context, pgx.Tx) error { return nil })
		if !errors.Is(e, context.DeadlineExceeded) || errors.Is(e, ErrRetriesExhausted) {
			t.Errorf("error %v", e)
		}
	})
}

func TestAShardThatStopsAnsweringTheClaimIsALostConnection(t *testing.T) {
	withRouter(t, func(s *settings) { s.ShardTimeout = 20 * time.Millisecond }, func(ctx context.Context, r *Router, c *fakeCluster) {
		c.claimsHang = 2
		runs := 0
		body := func(context.Context, pgx.Tx) error { runs++; return nil }
		if e := r.Transaction(ctx, Gene(1), body); e != nil || runs != 1 {
			t.Fatalf("transaction: %v after %d runs", e, runs)
		}
		if s := r.Stats(); s.RetriesLost != 2 || s.Transactions != 1 || c.claims() != 3 {
			t.Errorf("stats %+v, %d claims", s, c.claims())
		}
		if p := c.pool("a"); p.destroyed != 2 {
			t.Errorf("%d connections destroyed, want the 2 that hung", p.destroyed)
		}
		c.claimsHang = 1 // (Run retries the claim too: no body ran yet)
		if e := r.Run(ctx, Gene(1), body); e != nil || runs != 2 || r.Stats().RetriesLost != 3 {
			t.Errorf("run: %v after %d runs, stats %+v", e, runs, r.Stats())
		}
	})
}

func TestAShardThatKeepsHangingExhaustsTheRetries(t *testing.T) {
	withRouter(t, func(s *settings) { s.ShardTimeout, s.retryLimit = 10*time.Millisecond, 2 }, func(ctx context.Context, r *Router, c *fakeCluster) {
		c.claimsHang = 10
		e := r.Transaction(ctx, Gene(1), func(context.Context, pgx.Tx) error { return nil })
		var exhausted *RetriesExhaustedError
		if !errors.As(e, &exhausted) || !exhausted.Lost || exhausted.Attempts != 3 || !IsLostConnection(exhausted.Last) ||
			!strings.Contains(e.Error(), "did not answer within ShardTimeout (10ms)") || !errors.Is(e, context.DeadlineExceeded) {
			t.Fatalf("error %v", e)
		}
		if ctx.Err() != nil || r.Stats().RetriesLost != 2 {
			t.Errorf("the caller's context %v, stats %+v", ctx.Err(), r.Stats())
		}
	})
}

func TestTheCallersDeadlineDuringTheClaimIsNotRetried(t *testing.T) {
	withRouter(t, func(s *settings) { s.ShardTimeout = time.Hour }, func(_ context.Context, r *Router, c *fakeCluster) {
		c.claimsHang = 5
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		e := r.Transaction(ctx, Gene(1), func(context.Context, pgx.Tx) error { return nil })
		var noAnswer *shardTimeoutError
		if !errors.Is(e, context.DeadlineExceeded) || errors.Is(e, ErrRetriesExhausted) || errors.As(e, &noAnswer) || IsLostConnection(e) {
			t.Errorf("error %v", e)
		}
		if s := r.Stats(); s.RetriesLost != 0 || c.claims() != 1 {
			t.Errorf("stats %+v, %d claims", s, c.claims())
		}
	})
}

func TestClose(t *testing.T) {
	cluster := newFakeCluster(testRoutes)
	s := scenarioSettings(t, nil)
	s.NoListen, s.RefreshInterval = false, time.Millisecond
	r, e := newRouter(context.Background(), s, cluster)
	if e != nil {
		t.Fatal(e)
	}
	r.Close()
	r.Close()
	if n := cluster.listenerCount(); n != 0 {
		t.Errorf("%d listeners after Close", n)
	}
	if e := r.Transaction(context.Background(), Gene(1), func(context.Context, pgx.Tx) error { return nil }); !errors.Is(e, ErrClosed) {
		t.Errorf("after Close: %v", e)
	}
	if _, e := r.Refresh(context.Background()); !errors.Is(e, ErrClosed) {
		t.Errorf("Refresh after Close: %v", e)
	}
}

func TestConcurrentRefreshesShareReads(t *testing.T) {
	withRouter(t, nil, func(ctx context.Context, r *Router, c *fakeCluster) {
		r.reads.mu.Lock()
		calls := r.reads.calls
		r.reads.mu.Unlock()
		c.mu.Lock() // (the first read waits here; the others queue behind it and share one)
		done := make(chan error, 8)
		for i := 0; i < 8; i++ {
			go func() { _, e := r.Refresh(ctx); done <- e }()
		}
		eventually(t, "8 callers waiting for reads", func() bool {
			r.reads.mu.Lock()
			defer r.reads.mu.Unlock()
			return r.reads.calls == calls+8
		})
		before := c.routeReads
		c.mu.Unlock()
		for i := 0; i < 8; i++ {
			if e := <-done; e != nil {
				t.Fatal(e)
			}
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if n := c.routeReads - before; n > 2 {
			t.Errorf("%d route reads for 8 concurrent refreshes", n)
		}
	})
}

func TestConfigDefaults(t *testing.T) {
	s, e := Config{Routes: "r", Shards: map[string]string{"a": "a"}}.settings()
	if e != nil || s.retryLimit != 20 || s.RefreshInterval != time.Second || s.BackoffBase != 5*time.Millisecond ||
		s.BackoffMax != 200*time.Millisecond || s.MaxConns != 8 || s.NoListen {
		t.Errorf("defaults %+v, %v", s, e)
	}
	if s, _ := (Config{Routes: "r", Shards: map[string]string{"a": "a"}, RetryLimit: Retries(0)}).settings(); s.retryLimit != 0 {
		t.Error("Retries(0) is no retry")
	}
	for _, c := range []Config{{}, {Routes: "r"}, {Routes: "r", Shards: map[string]string{"a": "a"}, RetryLimit: Retries(-1)},
		{Routes: "r", Shards: map[string]string{"a": "a"}, RefreshInterval: -time.Second}} {
		if _, e := c.settings(); e == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

func TestBackoff(t *testing.T) {
	for attempt, full := range []time.Duration{5, 10, 20, 40, 80, 160, 200, 200} {
		full *= time.Millisecond
		for i := 0; i < 50; i++ {
			if d := backoffDelay(attempt, 5*time.Millisecond, 200*time.Millisecond); d < full/2 || d > full {
				t.Fatalf("attempt %d: %v outside [%v, %v]", attempt, d, full/2, full)
			}
		}
	}
	if d := backoffDelay(1000, 5*time.Millisecond, 200*time.Millisecond); d > 200*time.Millisecond {
		t.Errorf("attempt 1000: %v", d)
	}
}
