// The routed calls (docs/routing-protocol.md §4 and §5): Transaction, Run, Execute, NextID, and
// the one retry loop they share.
//
// Invariants:
//   - retryLimit counts retries after the first attempt; IG001, IG002 and a shard connection
//     refused or lost before COMMIT was sent are retried, nothing else. Before retry n the
//     routes are re-read (IG001; IG002 every third time) and the backoff waited; a re-read that
//     fails does not end the loop.
//   - A shard that does not answer one of the router's own steps (the probe of its claim form,
//     the claim, COMMIT, Execute's statement) within ShardTimeout is a lost connection (pgx
//     closed it); the caller's context ending never is: its error is returned, not retried.
//   - A body that failed is never reported committed (a COMMIT answered by ROLLBACK is
//     pgx.ErrTxCommitRollback), and a body whose COMMIT succeeded never runs again.
//   - A connection lost after COMMIT (or Execute's statement, which travels with its implicit
//     COMMIT) was sent is a *CommitOutcomeUnknownError, never retried.
//   - Every connection taken from a pool is released once: reused only when its transaction
//     ended cleanly, destroyed otherwise (lost, a failed ROLLBACK, a panic in the body).
//   - A gene without a route in the routes held is looked up once more after a re-read before
//     the first attempt (no attempt of its own); then *NoRouteError.
//   - The claim goes on BEGIN only where the shard's probe said it takes it there (an older
//     shard would ignore it); the probe is part of the claim: a connection lost under it is a
//     lost connection at the claim, any other error of it means the old form. A connection
//     found lost or refused makes the shard probed again (routedShard).

package idgen

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v4"
)

// TxBody is the caller's part of a routed transaction: its statements on tx, in the claimed
// transaction on the owning shard. It must not keep tx after it returns; the router commits
// when it returns nil and rolls back otherwise.
type TxBody func(ctx context.Context, tx pgx.Tx) error

// phase is how far an attempt got, which decides what a failure means.
type phase int

const (
	phaseConnect phase = iota // acquiring the connection, the probe or the claim: nothing ran yet
	phaseBody                 // the body ran, COMMIT not sent
	phaseCommit               // COMMIT sent (Execute: the statement, with its implicit COMMIT)
)

// attemptFunc is one attempt on a connection to shard, routed by table; it reports the phase it
// failed in and whether the connection may be reused.
type attemptFunc func(ctx context.Context, table *routeTable, shard *routedShard, conn shardConn) (failedIn phase, reusable bool, err error)

// Transaction runs body in a claimed transaction on the shard that owns key, then COMMIT. On
// IG001/IG002 (from the claim, the body or COMMIT), and on a connection refused or lost before
// COMMIT was sent, it rolls back, re-reads the routes when due, backs off and runs the body
// again, at most RetryLimit times. The body may run more than once.
func (r *Router) Transaction(ctx context.Context, key Key, body TxBody) error {
	return r.transaction(ctx, key, body, true)
}

// Run is Transaction with a body that runs once: the claim is retried (no body has run yet),
// but IG001/IG002 or a lost connection from the body or COMMIT reach the caller. For bodies
// that do something outside the database.
func (r *Router) Run(ctx context.Context, key Key, body TxBody) error {
	return r.transaction(ctx, key, body, false)
}

func (r *Router) transaction(ctx context.Context, key Key, body TxBody, retryBody bool) error {
	if body == nil {
		return fmt.Errorf("idgen: no body")
	}
	gene, err := key.Gene()
	if err != nil {
		return err
	}
	return r.retrying(ctx, gene, retryBody, func(ctx context.Context, table *routeTable, shard *routedShard, conn shardConn) (phase, bool, error) {
		if err := r.claim(ctx, shard, conn, gene, table.version); err != nil {
			return phaseConnect, r.rollback(conn), err
		}
		if err := body(ctx, conn.bodyTx()); err != nil {
			if conn.endedByBody() { // (what it committed stays committed: never run again)
				return phaseBody, true, endedByBody{err}
			}
			return phaseBody, r.rollback(conn), err
		}
		if conn.endedByBody() { // (a COMMIT now would succeed with a warning, committing nothing)
			return phaseBody, true, endedByBody{ErrTxEndedByBody}
		}
		// The statements the body prepared are dropped inside the transaction, before COMMIT (on
		// the server connection that holds them, also behind a transaction-mode pooler).
		if err := r.onShard(ctx, conn.dropPrepared); err != nil {
			return phaseBody, r.rollback(conn), err
		}
		if err := r.onShard(ctx, conn.commit); err != nil {
			return phaseCommit, r.rollback(conn), err
		}
		r.stats.transactions.Add(1)
		return phaseCommit, true, nil
	})
}

// Execute runs one statement on the shard that owns key, in autocommit, with the route version
// declared in its leading comment ("/* id_gen.route_version=N */ "): one statement, one round
// trip, retried like Transaction (a statement that failed had no effect). It returns the
// statement's rows, each as its column values (pgx's Rows.Values). A connection lost after the
// statement was sent is a *CommitOutcomeUnknownError.
func (r *Router) Execute(ctx context.Context, key Key, sql string, args ...any) ([][]any, error) {
	gene, err := key.Gene()
	if err != nil {
		return nil, err
	}
	var rows [][]any
	err = r.retrying(ctx, gene, true, func(ctx context.Context, table *routeTable, _ *routedShard, conn shardConn) (phase, bool, error) {
		sctx, cancel := context.WithTimeout(ctx, r.s.ShardTimeout)
		defer cancel()
		if err := conn.prepareExecute(sctx, table.version, sql); err != nil {
			return phaseConnect, !conn.closed(), r.shardTimedOut(ctx, sctx, err)
		}
		got, err := conn.execute(sctx, table.version, sql, args)
		if err != nil {
			return phaseCommit, !conn.closed(), r.shardTimedOut(ctx, sctx, err)
		}
		rows = got
		r.stats.transactions.Add(1)
		return phaseCommit, true, nil
	})
	return rows, err
}

// NextID is an owner-affine id from the owner's shard: id_gen.gene_order_id(sequence, owner)
// in a Transaction there. The owner is an int64, a string or a uuid (see OwnerValue).
func (r *Router) NextID(ctx context.Context, sequence string, owner any) (int64, error) {
	b, typ, err := ownerBytes(owner)
	if err != nil {
		return 0, err
	}
	if typ == ownerBytea {
		return 0, fmt.Errorf("idgen: id_gen.gene_order_id takes a bigint, text or uuid owner, not bytes")
	}
	var arg any // (the owner as a plain Go value, whatever named type it came as)
	switch typ {
	case ownerBigint:
		arg = int64(binary.LittleEndian.Uint64(b))
	case ownerText:
		arg = string(b)
	case ownerUUID: // (as text, which every pgx mode encodes as a uuid)
		arg = fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
	}
	sql := "SELECT id_gen.gene_order_id($1::text, $2::" + string(typ) + ")"
	var id int64
	err = r.transaction(ctx, Gene(geneOfBytes(b)), func(ctx context.Context, tx pgx.Tx) error {
		return tx.QueryRow(ctx, sql, sequence, arg).Scan(&id)
	}, true)
	return id, err
}

// retrying is the one retry loop: once on the gene's shard by the routes held, retried as the
// package comment says.
func (r *Router) retrying(ctx context.Context, gene uint16, retryBody bool, once attemptFunc) error {
	if r.isClosed() {
		return ErrClosed
	}
	var last error
	var lastReason retryReason
	var rereadErr error
	attempts := 0
	for attempt := 0; attempt <= r.s.retryLimit; attempt++ {
		table, shard, err := r.checkout(ctx, gene, attempt)
		if err != nil {
			return err
		}
		attempts++
		reason, err := r.attempt(ctx, shard, table, retryBody, once)
		if reason == noRetry {
			return err
		}
		last, lastReason = err, reason
		if attempt == r.s.retryLimit {
			break
		}
		r.count(reason)
		if rereadsAfter(reason, attempt) {
			if _, rereadErr = r.Refresh(ctx); rereadErr != nil && ctx.Err() != nil {
				return fmt.Errorf("idgen: gene %d: %w (while retrying after: %v)", gene, ctx.Err(), last)
			}
		}
		if err := r.sleep(ctx, backoffDelay(attempt, r.s.BackoffBase, r.s.BackoffMax)); err != nil {
			return fmt.Errorf("idgen: gene %d: %w (while retrying after: %v)", gene, err, last)
		}
	}
	return &RetriesExhaustedError{Gene: gene, Attempts: attempts, Lost: lastReason == connLost, Last: last, RereadErr: rereadErr}
}

// checkout is the routes to use for an attempt and the gene's shard by them. On the first
// attempt a gene without a route makes the routes re-read and looked up once more.
func (r *Router) checkout(ctx context.Context, gene uint16, attempt int) (*routeTable, *routedShard, error) {
	table := r.table.Load()
	_, shard, err := r.route(gene, table)
	if err == nil || attempt > 0 {
		return table, shard, err
	}
	if version, rerr := r.Refresh(ctx); rerr != nil || version == table.version {
		return nil, nil, err
	}
	table = r.table.Load()
	_, shard, err = r.route(gene, table)
	return table, shard, err
}

// attempt acquires a connection to shard, runs once on it and releases it; what to do about a
// failure (retryReasonOf). A connection refused or closed under the attempt makes the shard's
// claim form probed again.
func (r *Router) attempt(ctx context.Context, shard *routedShard, table *routeTable, retryBody bool, once attemptFunc) (retryReason, error) {
	actx, cancel := context.WithTimeout(ctx, r.s.ShardTimeout)
	conn, err := shard.pool.acquire(actx)
	waitedOut := actx.Err() != nil // (the caller's deadline, or no free connection within ShardTimeout)
	cancel()
	if err != nil {
		if !waitedOut && (IsLostConnection(err) || isContextError(err)) {
			shard.forgetProtocol()
			return connLost, err // (refused, reset, or a connect past its connect_timeout)
		}
		return noRetry, err
	}
	reusable := false
	defer func() { conn.release(!reusable) }() // (a panic in the body: destroyed)
	failedIn, reusable, err := once(ctx, table, shard, conn)
	if err == nil {
		return noRetry, nil
	}
	closed := conn.closed()
	if closed {
		shard.forgetProtocol()
	}
	return retryReasonOf(ctx, err, failedIn, retryBody, closed)
}

// claim claims gene at version on conn: on BEGIN where the shard takes it, else with the old
// SELECT. The first claim on a shard whose form is not known probes it first, on conn in
// autocommit (its own round trip): an error of the probe other than a lost connection (or the
// caller's context) means the old form, which every shard takes, and is kept as such.
func (r *Router) claim(ctx context.Context, shard *routedShard, conn shardConn, gene uint16, version int64) error {
	onBegin, known, epoch := shard.protocol()
	if !known {
		var answer string
		err := r.onShard(ctx, func(sctx context.Context) (err error) {
			answer, err = conn.routingProtocol(sctx)
			return err
		})
		if err != nil && (SQLState(err) == "" || IsLostConnection(err)) {
			return err
		}
		onBegin = err == nil && claimsOnBegin(answer)
		shard.learnProtocol(onBegin, epoch)
	}
	return r.onShard(ctx, func(sctx context.Context) error { return conn.claim(sctx, gene, version, onBegin) })
}

// onShard runs one step of the router's own on a shard (the probe of its claim form, the claim,
// dropping the body's prepared statements, COMMIT) bounded by ShardTimeout; see shardTimedOut.
func (r *Router) onShard(ctx context.Context, step func(context.Context) error) error {
	sctx, cancel := context.WithTimeout(ctx, r.s.ShardTimeout)
	defer cancel()
	return r.shardTimedOut(ctx, sctx, step(sctx))
}

// shardTimedOut is err, or a *shardTimeoutError when ShardTimeout (sctx, derived from the
// caller's ctx) ended the wait and the caller's ctx did not: the shard stopped answering, a lost
// connection (docs/routing-protocol.md §4). The caller's own deadline or cancel stays a context
// error, never retried.
func (r *Router) shardTimedOut(ctx, sctx context.Context, err error) error {
	if err != nil && ctx.Err() == nil && sctx.Err() != nil && isContextError(err) {
		return &shardTimeoutError{timeout: r.s.ShardTimeout, err: err}
	}
	return err
}

// retryReasonOf decides about a failed attempt: a connection lost after COMMIT was sent is
// commit outcome unknown; a caller's context that ended is its error; IG001/IG002 and a
// connection lost before COMMIT was sent are retried (from the body or COMMIT only when
// retryBody); anything else is the error itself.
func retryReasonOf(ctx context.Context, err error, failedIn phase, retryBody, connClosed bool) (retryReason, error) {
	var ended endedByBody
	if errors.As(err, &ended) {
		return noRetry, ended.err
	}
	// The router's own outcome of a call made inside the body (a nested transaction's commit
	// outcome unknown, or its retries exhausted) is final: never retried by this one.
	var unknown *CommitOutcomeUnknownError
	var exhausted *RetriesExhaustedError
	if failedIn == phaseBody && (errors.As(err, &unknown) || errors.As(err, &exhausted)) {
		return noRetry, err
	}
	lost := IsLostConnection(err) || (connClosed && !isContextError(err))
	if failedIn == phaseCommit && (lost || connClosed) && !notSent(err) {
		return noRetry, &CommitOutcomeUnknownError{Err: err}
	}
	if ctx.Err() != nil {
		return noRetry, err
	}
	reason := routeReasonOf(err)
	if reason == noRetry && lost {
		reason = connLost
	}
	if reason != noRetry && failedIn != phaseConnect && !retryBody {
		return noRetry, err
	}
	return reason, err
}

// rollback ends a failed transaction, unless its connection is gone; whether the connection
// may be reused.
func (r *Router) rollback(conn shardConn) bool {
	if conn.closed() {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.s.ShardTimeout)
	defer cancel()
	return conn.rollback(ctx) == nil && !conn.closed()
}

func (r *Router) count(reason retryReason) {
	switch reason {
	case routeMoved:
		r.stats.retriesMoved.Add(1)
	case routeFenced:
		r.stats.retriesFenced.Add(1)
	case connLost:
		r.stats.retriesLost.Add(1)
	}
}

// sleep waits d, or less when ctx ends or the Router closes (then an error).
func (r *Router) sleep(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-r.ctx.Done():
		return ErrClosed
	}
}
