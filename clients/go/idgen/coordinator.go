// The Router's side of the coordinator (docs/routing-protocol.md §2): route reads shared by
// concurrent callers, the LISTEN loop and the version poll.
//
// Invariants:
//   - Refresh returns routes read by a read that began after it was called: callers that come
//     while a read runs share the next one (reads run one at a time, in a goroutine of their
//     own, so a caller that gives up does not cancel a read others wait for).
//   - A read that fails on the held connection is tried once more on a new one; a read that
//     fails leaves the routes held as they were.
//   - The listener LISTENs before the first read; after its connection is lost (or when LISTEN
//     failed in NewRouter) it reconnects (100 ms .. 5 s apart) and then re-reads, since
//     notifications may have been missed.
//   - Every wait on the coordinator is bounded by CoordinatorTimeout (connects also by
//     ConnectTimeout), and ends at Close.

package idgen

import (
	"context"
	"strconv"
	"sync"
	"time"
)

// listenerIdleCheck: after this long without a notification the listener pings its
// connection, so that one cut silently is noticed. (A variable for the tests.)
var listenerIdleCheck = 30 * time.Second

const (
	listenerRetryFirst = 100 * time.Millisecond
	listenerRetryMax   = 5 * time.Second
)

// routeReads coalesces route reads: running is the read under way, next the one that begins
// after it (nil until someone asks for it).
type routeReads struct {
	mu            sync.Mutex
	running, next *routeRead
	calls         int // Refresh calls that took a read (the tests wait for them)
}

type routeRead struct {
	done    chan struct{}
	version int64
	err     error
}

// Refresh re-reads the routes now and returns their version.
func (r *Router) Refresh(ctx context.Context) (int64, error) {
	r.reads.mu.Lock()
	rd := r.reads.next
	if rd == nil {
		rd = &routeRead{done: make(chan struct{})}
		if r.reads.running != nil {
			r.reads.next = rd
		} else if r.start(func() { r.readLoop(rd) }) {
			r.reads.running = rd
		} else {
			rd.err = ErrClosed
			close(rd.done)
		}
	}
	r.reads.calls++
	r.reads.mu.Unlock()
	select {
	case <-rd.done:
		return rd.version, rd.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// readLoop runs rd, then the reads queued meanwhile, one after the other.
func (r *Router) readLoop(rd *routeRead) {
	for rd != nil {
		rd.version, rd.err = r.reload()
		close(rd.done)
		r.reads.mu.Lock()
		rd, r.reads.next = r.reads.next, nil
		r.reads.running = rd
		r.reads.mu.Unlock()
	}
}

// reload reads the routes (once more on a new connection when the held one fails) and holds
// them.
func (r *Router) reload() (int64, error) {
	r.coordMu.Lock()
	defer r.coordMu.Unlock()
	table, err := r.readTable()
	if err != nil && r.ctx.Err() == nil {
		r.dropCoordinator()
		table, err = r.readTable()
	}
	if err != nil {
		if r.ctx.Err() != nil {
			return 0, ErrClosed
		}
		return 0, err
	}
	r.table.Store(table)
	r.stats.refreshes.Add(1)
	return table.version, nil
}

// readTable reads the routes and their version in one statement (the empty routes: their
// version in another, which says whether routes appeared meanwhile). Holds coordMu.
func (r *Router) readTable() (*routeTable, error) {
	ctx, cancel := context.WithTimeout(r.ctx, r.s.CoordinatorTimeout)
	defer cancel()
	conn, err := r.coordinator(ctx)
	if err != nil {
		return nil, err
	}
	for {
		rows, err := conn.readRoutes(ctx)
		if err != nil {
			return nil, err
		}
		if len(rows) > 0 {
			return tableFromRows(rows)
		}
		version, empty, err := conn.emptyRoutesVersion(ctx)
		if err != nil {
			return nil, err
		}
		if empty {
			return &routeTable{version: version}, nil
		}
	}
}

// coordinator is the held coordinator connection, connected when needed. Holds coordMu.
func (r *Router) coordinator(ctx context.Context) (coordinatorConn, error) {
	if r.coord == nil {
		conn, err := r.drv.connectCoordinator(ctx)
		if err != nil {
			return nil, err
		}
		r.coord = conn
	}
	return r.coord, nil
}

// dropCoordinator closes the held coordinator connection (the next use connects again).
// Holds coordMu.
func (r *Router) dropCoordinator() {
	if r.coord != nil {
		r.coord.close()
		r.coord = nil
	}
}

// poll reads the route version every RefreshInterval and re-reads the routes when it grew: a
// route change whose notification was lost (or kept from the listener by a pooler) is seen
// within that long.
func (r *Router) poll() {
	ticker := time.NewTicker(r.s.RefreshInterval)
	defer ticker.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-ticker.C:
		}
		if version, err := r.polledVersion(); err == nil && version > r.Version() {
			_, _ = r.Refresh(r.ctx) // (a failed read: the next poll tries again)
		}
	}
}

func (r *Router) polledVersion() (int64, error) {
	r.coordMu.Lock()
	defer r.coordMu.Unlock()
	ctx, cancel := context.WithTimeout(r.ctx, r.s.CoordinatorTimeout)
	defer cancel()
	conn, err := r.coordinator(ctx)
	if err != nil {
		return 0, err
	}
	version, err := conn.routeVersion(ctx)
	if err != nil {
		r.dropCoordinator()
	}
	return version, err
}

// listen hears route changes on l until Close: a payload above the version held re-reads
// the routes; a lost connection is replaced, and the routes re-read. l is nil when LISTEN
// failed in NewRouter: it is retried after the first backoff.
func (r *Router) listen(l listenerConn) {
	for {
		if l != nil {
			r.hear(l)
			l.close()
		}
		if l = r.reconnectListener(); l == nil {
			return
		}
		_, _ = r.Refresh(r.ctx) // notifications may have been missed meanwhile
	}
}

// hear waits for notifications on l until its connection fails or the Router closes.
func (r *Router) hear(l listenerConn) {
	for {
		ctx, cancel := context.WithTimeout(r.ctx, listenerIdleCheck)
		payload, err := l.waitForNotification(ctx)
		cancel()
		switch {
		case r.ctx.Err() != nil:
			return
		case err != nil && isContextError(err): // (quiet for listenerIdleCheck: is it still there?)
			pctx, cancel := context.WithTimeout(r.ctx, r.s.CoordinatorTimeout)
			err = l.ping(pctx)
			cancel()
			if err != nil {
				return
			}
		case err != nil:
			return
		default:
			if version, perr := strconv.ParseInt(payload, 10, 64); perr == nil && version > r.Version() {
				_, _ = r.Refresh(r.ctx)
			}
		}
	}
}

// reconnectListener connects a new listener, waiting longer after each failure; nil once the
// Router closes.
func (r *Router) reconnectListener() listenerConn {
	wait := listenerRetryFirst
	for {
		timer := time.NewTimer(wait)
		select {
		case <-r.ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		}
		ctx, cancel := context.WithTimeout(r.ctx, r.s.CoordinatorTimeout)
		l, err := r.drv.connectListener(ctx)
		cancel()
		if err == nil {
			return l
		}
		if wait *= 2; wait > listenerRetryMax {
			wait = listenerRetryMax
		}
	}
}
