// Errors of the router (docs/routing-protocol.md §5, "Errors every client tells apart") and the
// classification of the errors a shard or the driver returns.
//
// Invariants:
//   - Every error the router makes about routing is matched by errors.Is against exactly one of
//     ErrNoRoute, ErrRetriesExhausted, ErrCommitOutcomeUnknown or ErrClosed; the latter two
//     unwrap to the driver's error (errors.As finds its *pgconn.PgError, when it has one).
//   - A database error that is not about routes reaches the caller as the driver returned it
//     (a *pgconn.PgError, with its Code), never wrapped.
//   - A lost connection is SQLSTATE class 08, 57P01..57P03, a socket error (refused, reset,
//     closed, EOF), a connect with target_session_attrs=read-write whose last host was read
//     only (a standby during a failover: pgconn's "ValidateConnect failed (read only
//     connection)"), or a shard that did not answer the router's own step within
//     ShardTimeout (*shardTimeoutError); the caller's context that ended is never one (its
//     deadline is not retried).

package idgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgconn"
)

// The SQLSTATEs of docs/routing-protocol.md §3.
const (
	// CodeRouteChanged (IG001): the shard does not own the gene, or the declared version is older.
	CodeRouteChanged = "IG001"
	// CodeRouteFenced (IG002): the gene is fenced for a cut-over; retry after a short wait.
	CodeRouteFenced = "IG002"
)

var (
	// ErrNoRoute: the routes have no owner for the gene (or name a shard this Router has no
	// connection for). Not retried.
	ErrNoRoute = errors.New("idgen: no route for the gene")
	// ErrRetriesExhausted: IG001/IG002 or a refused or lost shard connection came back for
	// RetryLimit retries. Retryable later; the error unwraps to the last one.
	ErrRetriesExhausted = errors.New("idgen: retries exhausted")
	// ErrCommitOutcomeUnknown: the shard connection was lost after COMMIT was sent and before
	// its answer: the transaction may or may not have committed. Never retried; the error
	// unwraps to the driver's error. The caller decides (look the row up by its id).
	ErrCommitOutcomeUnknown = errors.New("idgen: commit outcome unknown")
	// ErrClosed: the Router was closed.
	ErrClosed = errors.New("idgen: the router is closed")
	// ErrTxEndedByBody: the body ended the claimed transaction itself (a COMMIT or ROLLBACK
	// sent through its Tx or Conn); the router committed nothing and does not retry.
	ErrTxEndedByBody = errors.New("idgen: the transaction was ended inside the body (a COMMIT or ROLLBACK of its own); the router committed nothing")
	// ErrTxOwnedByRouter is what Commit and Rollback of the body's transaction return: the
	// router ends it when the body returns (commits on nil, rolls back on an error).
	ErrTxOwnedByRouter = errors.New("idgen: the router commits or rolls back this transaction when the body returns")
)

// NoRouteError is the error of a gene without a route; errors.Is(err, ErrNoRoute).
type NoRouteError struct {
	Gene    uint16
	Version int64  // the route version looked up in
	Shard   string // set when the route names a shard the Router has no connection for
}

func (e *NoRouteError) Error() string {
	if e.Shard != "" {
		return fmt.Sprintf("idgen: gene %d routes to shard %q, which has no connection in this Router (route version %d)",
			e.Gene, e.Shard, e.Version)
	}
	return fmt.Sprintf("idgen: no route for gene %d (route version %d)", e.Gene, e.Version)
}

// Is makes errors.Is(err, ErrNoRoute) true.
func (e *NoRouteError) Is(target error) bool { return target == ErrNoRoute }

// RetriesExhaustedError ends a call whose retries ran out; errors.Is(err, ErrRetriesExhausted),
// and it unwraps to the last error (errors.As finds its *pgconn.PgError, IG001 or IG002).
type RetriesExhaustedError struct {
	Gene      uint16
	Attempts  int
	Lost      bool  // the last attempt failed on a refused or lost connection
	Last      error // the last attempt's error
	RereadErr error // the last re-read of the routes, when it failed
}

func (e *RetriesExhaustedError) Error() string {
	what := "the route kept changing"
	if e.Lost {
		what = "the shard connection was refused or lost"
	}
	msg := fmt.Sprintf("idgen: gene %d: %s in %d attempts (%d retries): %v", e.Gene, what, e.Attempts, e.Attempts-1, e.Last)
	if e.RereadErr != nil {
		msg += fmt.Sprintf("; the last re-read of the routes failed: %v", e.RereadErr)
	}
	return msg
}

// Is makes errors.Is(err, ErrRetriesExhausted) true.
func (e *RetriesExhaustedError) Is(target error) bool { return target == ErrRetriesExhausted }

// Unwrap is the last attempt's error.
func (e *RetriesExhaustedError) Unwrap() error { return e.Last }

// CommitOutcomeUnknownError holds the driver's error of a connection lost after COMMIT was
// sent; errors.Is(err, ErrCommitOutcomeUnknown).
type CommitOutcomeUnknownError struct {
	Err error
}

func (e *CommitOutcomeUnknownError) Error() string {
	return fmt.Sprintf("idgen: the shard connection was lost after COMMIT was sent: "+
		"the transaction may or may not have committed (%v)", e.Err)
}

// Is makes errors.Is(err, ErrCommitOutcomeUnknown) true.
func (e *CommitOutcomeUnknownError) Is(target error) bool { return target == ErrCommitOutcomeUnknown }

// Unwrap is the driver's error.
func (e *CommitOutcomeUnknownError) Unwrap() error { return e.Err }

// SQLState is the SQLSTATE of err (a *pgconn.PgError anywhere in its chain), or "".
func SQLState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// IsLostConnection reports whether err says the connection is gone: SQLSTATE class 08, the
// server ending the session (57P01 admin shutdown, 57P02 crash shutdown, 57P03 cannot connect
// now), a socket refused, reset, closed or cut (EOF), a connect that found no writable host
// (readOnlyAtConnect), or a shard that did not answer the router's probe, claim, COMMIT or
// Execute within Config.ShardTimeout (pgx closed the connection). The caller's context
// canceled or past its deadline is not (see retryReasonOf).
func IsLostConnection(err error) bool {
	if err == nil {
		return false
	}
	var noAnswer *shardTimeoutError
	if errors.As(err, &noAnswer) {
		return true
	}
	if code := SQLState(err); code != "" {
		return strings.HasPrefix(code, "08") || code == "57P01" || code == "57P02" || code == "57P03"
	}
	if isContextError(err) {
		return false
	}
	for _, socketErr := range []error{io.EOF, io.ErrUnexpectedEOF, net.ErrClosed, syscall.ECONNREFUSED,
		syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE, syscall.EHOSTUNREACH, syscall.ENETUNREACH,
		syscall.ETIMEDOUT} {
		if errors.Is(err, socketErr) {
			return true
		}
	}
	var netErr net.Error
	return errors.As(err, &netErr) || readOnlyAtConnect(err)
}

// readOnlyAtConnect reports whether err is pgconn's failed connect under
// target_session_attrs=read-write whose last host tried answered transaction_read_only = on
// (a standby not yet promoted; the hosts before it refused or were read only too): "failed to
// connect to `host=... user=... database=...`: ValidateConnect failed (read only connection)".
// pgconn exports neither that error's type nor its cause, so it is told by their texts, along
// the chain of wrapped errors.
func readOnlyAtConnect(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if strings.Contains(e.Error(), pgconnValidateConnectFailed) {
			if cause := errors.Unwrap(e); cause != nil && cause.Error() == pgconnReadOnlyConnection {
				return true
			}
		}
	}
	return false
}

// The texts of pgconn (v1.11) for a connect that ValidateConnectTargetSessionAttrsReadWrite
// refused: the connect error's message and its cause's.
const (
	pgconnValidateConnectFailed = "ValidateConnect failed"
	pgconnReadOnlyConnection    = "read only connection"
)

func isContextError(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// notSent reports whether err is known to have happened before anything was sent (pgconn's
// SafeToRetry, looked for along the whole chain).
func notSent(err error) bool {
	var safe interface{ SafeToRetry() bool }
	return errors.As(err, &safe) && safe.SafeToRetry()
}

// endedByBody carries the error of an attempt whose body ended the claimed transaction
// itself: never retried (what the body committed stays committed), returned unwrapped.
type endedByBody struct{ err error }

func (e endedByBody) Error() string { return e.err.Error() }
func (e endedByBody) Unwrap() error { return e.err }

// shardTimeoutError is a wait on a shard that Config.ShardTimeout ended while the caller's
// context was still live: the shard stopped answering (pgx closed the connection). A lost
// connection: retried when COMMIT was not sent, commit outcome unknown when it was. It unwraps
// to pgx's timeout error (errors.Is(err, context.DeadlineExceeded) holds).
type shardTimeoutError struct {
	timeout time.Duration
	err     error
}

func (e *shardTimeoutError) Error() string {
	return fmt.Sprintf("idgen: the shard did not answer within ShardTimeout (%v); its connection was closed: %v", e.timeout, e.err)
}

func (e *shardTimeoutError) Unwrap() error { return e.err }
