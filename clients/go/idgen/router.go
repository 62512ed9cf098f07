// Router: zero-hop routing of transactions to the shard that owns a gene, with the vocabulary of
// docs/routing-protocol.md §5. This file holds the Router, its construction and Close, its
// counters and the lookups by the routes held; calls.go the routed calls, coordinator.go the
// route reads, LISTEN and the version poll.
//
// Invariants:
//   - The routes and their version are one immutable snapshot (routeTable), replaced whole; a
//     call routes by one snapshot and claims with its version.
//   - NewRouter returns a Router only when the routes were read (LISTEN first, when on); on any
//     error it leaves nothing open. A LISTEN that fails does not fail it: the listener
//     goroutine retries it on its backoff while the version poll covers.
//   - Every goroutine the Router starts is counted in wg and ends when Close cancels ctx; none
//     starts after Close (start and Close hold mu).
//   - A shard's claim form (on BEGIN or the old SELECT) is probed on the first claim there and
//     kept until a connection to the shard is found lost or refused (it may have restarted with
//     another library); a probe that began before such a loss is not kept. Concurrent first
//     claims may each probe.

package idgen

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// Router routes transactions by owner, id or gene to the owning shard; safe for concurrent use.
type Router struct {
	s      settings
	drv    driver
	shards map[string]*routedShard
	table  atomic.Pointer[routeTable]
	stats  counters
	reads  routeReads

	coordMu sync.Mutex      // guards coord, and serializes what is sent on it
	coord   coordinatorConn // the connection of route reads and polls, nil until needed

	ctx    context.Context // ends at Close: every background goroutine and shared route read
	cancel context.CancelFunc
	mu     sync.Mutex // guards closed and wg.Add
	closed bool
	wg     sync.WaitGroup
}

// Stats are the Router's counters (docs/routing-protocol.md §5, "stats").
type Stats struct {
	Transactions  int64 // committed transactions (and Execute statements)
	RetriesMoved  int64 // retries after IG001
	RetriesFenced int64 // retries after IG002
	RetriesLost   int64 // retries after a shard connection refused or lost before COMMIT was sent
	Refreshes     int64 // route reads that succeeded, the first included
}

type counters struct {
	transactions, retriesMoved, retriesFenced, retriesLost, refreshes atomic.Int64
}

// NewRouter connects to the coordinator (LISTEN first, unless Config.NoListen), reads the
// routes, and starts listening and polling. It fails when the routes cannot be read; a LISTEN
// that fails does not fail it (a pooler in front of the coordinator, say): the version poll
// covers while the listener is retried in the background (100 ms doubling to 5 s) until
// Close. The shard pools connect on first use.
func NewRouter(ctx context.Context, config Config) (*Router, error) {
	s, err := config.settings()
	if err != nil {
		return nil, err
	}
	drv, err := newPgxDriver(s)
	if err != nil {
		return nil, err
	}
	return newRouter(ctx, s, drv)
}

func newRouter(ctx context.Context, s settings, drv driver) (*Router, error) {
	r := &Router{s: s, drv: drv, shards: make(map[string]*routedShard, len(s.Shards))}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.table.Store(&routeTable{})
	for name, dsn := range s.Shards {
		shard := &routedShard{}
		pool, err := drv.newShardPool(name, dsn, shard.forgetProtocol)
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("idgen: shard %q: %w", name, err)
		}
		shard.pool = pool
		r.shards[name] = shard
	}
	var listener listenerConn // (nil when LISTEN failed: the listener goroutine retries it)
	if !s.NoListen {
		lctx, cancel := context.WithTimeout(ctx, s.CoordinatorTimeout)
		l, err := drv.connectListener(lctx) // LISTEN before the first read
		cancel()
		if err == nil {
			listener = l
		}
	}
	if _, err := r.Refresh(ctx); err != nil {
		if listener != nil {
			listener.close()
		}
		r.Close()
		return nil, fmt.Errorf("idgen: reading the routes: %w", err)
	}
	if !s.NoListen && !r.start(func() { r.listen(listener) }) && listener != nil {
		listener.close()
	}
	if s.RefreshInterval > 0 {
		r.start(r.poll)
	}
	return r, nil
}

// start runs f in a goroutine that Close waits for; false (f not run) once closed.
func (r *Router) start(f func()) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		f()
	}()
	return true
}

// Close stops listening and polling, waits for the background goroutines and closes every
// connection; calls made afterwards return ErrClosed. Safe to call more than once. It waits
// for calls in flight to give their connections back (pgxpool's Close): the router's own
// statements are bounded by ShardTimeout, a body's by the caller's context; never call it
// from a body.
func (r *Router) Close() {
	r.mu.Lock()
	already := r.closed
	r.closed = true
	r.mu.Unlock()
	if already {
		return
	}
	r.cancel()
	r.wg.Wait()
	r.coordMu.Lock()
	r.dropCoordinator()
	r.coordMu.Unlock()
	for _, shard := range r.shards {
		shard.pool.close()
	}
}

func (r *Router) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// Stats are the counters now.
func (r *Router) Stats() Stats {
	return Stats{
		Transactions:  r.stats.transactions.Load(),
		RetriesMoved:  r.stats.retriesMoved.Load(),
		RetriesFenced: r.stats.retriesFenced.Load(),
		RetriesLost:   r.stats.retriesLost.Load(),
		Refreshes:     r.stats.refreshes.Load(),
	}
}

// Version is the route version held.
func (r *Router) Version() int64 { return r.table.Load().version }

// Routes are the routes held, sorted by gene.
func (r *Router) Routes() []RouteRange {
	return append([]RouteRange(nil), r.table.Load().ranges...)
}

// GeneOf is the gene of an owner of a type known at run time (see OwnerValue; GeneOf the
// function for one known when compiling).
func (r *Router) GeneOf(owner any) (uint16, error) {
	b, _, err := ownerBytes(owner)
	if err != nil {
		return 0, err
	}
	return geneOfBytes(b), nil
}

// ShardFor is the shard of key by the routes held.
func (r *Router) ShardFor(key Key) (string, error) {
	gene, err := key.Gene()
	if err != nil {
		return "", err
	}
	shard, _, err := r.route(gene, r.table.Load())
	return shard, err
}

// ShardForID is the shard of an id by the routes held.
func (r *Router) ShardForID(id int64) (string, error) { return r.ShardFor(ID(id)) }

// ShardForGene is the shard of a gene by the routes held.
func (r *Router) ShardForGene(gene uint16) (string, error) { return r.ShardFor(Gene(gene)) }

// ShardForOwner is the shard of an owner (see GeneOf) by the routes held.
func (r *Router) ShardForOwner(owner any) (string, error) {
	gene, err := r.GeneOf(owner)
	if err != nil {
		return "", err
	}
	return r.ShardForGene(gene)
}

// route is the shard of gene by table, by name and as the Router holds it; a *NoRouteError when
// the routes have no owner for it or name a shard without a pool here.
func (r *Router) route(gene uint16, table *routeTable) (string, *routedShard, error) {
	name, err := table.shardFor(gene)
	if err != nil {
		return "", nil, err
	}
	shard, ok := r.shards[name]
	if !ok {
		return "", nil, &NoRouteError{Gene: gene, Version: table.version, Shard: name}
	}
	return name, shard, nil
}

// routedShard is one shard as the Router holds it: its pool, and whether the shard takes the
// claim on BEGIN (routingProtocolSQL), once probed.
type routedShard struct {
	pool shardPool

	mu      sync.Mutex
	known   bool   // probed since the protocol was last forgotten
	onBegin bool   // (when known) the claim goes on BEGIN
	epoch   uint64 // counts the forgets: what a probe begun in an older epoch found is not kept
}

// protocol is what the Router knows of the shard's claim form, and the epoch a probe would
// learn it in.
func (s *routedShard) protocol() (onBegin, known bool, epoch uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.onBegin, s.known, s.epoch
}

// learnProtocol keeps what a probe begun in epoch found, unless the protocol was forgotten since.
func (s *routedShard) learnProtocol(onBegin bool, epoch uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.epoch == epoch {
		s.known, s.onBegin = true, onBegin
	}
}

// forgetProtocol makes the next claim probe again: a connection to the shard was found lost or
// refused, and a shard that restarted may run another version of id_gen.
func (s *routedShard) forgetProtocol() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.known = false
	s.epoch++
}
