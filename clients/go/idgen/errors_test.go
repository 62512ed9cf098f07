// What counts as a lost connection, and what an attempt's failure becomes (retryReasonOf), by
// the phase it failed in.

package idgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
)

func TestIsLostConnection(t *testing.T) {
	for _, code := range []string{"08006", "08001", "08P01", "57P01", "57P02", "57P03"} {
		if !IsLostConnection(fmt.Errorf("wrapped: %w", sqlError(code))) {
			t.Errorf("%s is a lost connection", code)
		}
	}
	for _, e := range []error{io.EOF, io.ErrUnexpectedEOF, net.ErrClosed, refusedError(),
		&net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}} {
		if !IsLostConnection(fmt.Errorf("wrapped: %w", e)) {
			t.Errorf("%v is a lost connection", e)
		}
	}
	if !IsLostConnection(fmt.Errorf("wrapped: %w", readOnlyConnectError{})) {
		t.Errorf("%v is a lost connection (a standby not yet promoted)", readOnlyConnectError{})
	}
	for _, e := range []error{nil, sqlError("IG001"), sqlError("IG002"), sqlError("22012"), sqlError("40001"),
		sqlError("57014"), sqlError("28P01"), context.Canceled, context.DeadlineExceeded, errors.New("conn closed"),
		errors.New("read only connection")} {
		if IsLostConnection(e) {
			t.Errorf("%v is no lost connection", e)
		}
	}
}

// readOnlyConnectError is what pgconn (v1.11) returns when target_session_attrs=read-write and
// the last host tried is read only (its connectError, unexported, around errors.New).
type readOnlyConnectError struct{}

func (readOnlyConnectError) Error() string {
	return "failed to connect to `host=127.0.0.1 user=postgres database=postgres`: ValidateConnect failed (read only connection)"
}

func (readOnlyConnectError) Unwrap() error { return errors.New("read only connection") }

func TestRetryReasonOf(t *testing.T) {
	live := context.Background()
	ended, cancel := context.WithCancel(live)
	cancel()
	lost := sqlError("08006")
	cases := []struct {
		what       string
		ctx        context.Context
		err        error
		phase      phase
		retryBody  bool
		connClosed bool
		reason     retryReason
		unknown    bool
	}{
		{"IG001 at the claim", live, sqlError("IG001"), phaseConnect, false, false, routeMoved, false},
		{"IG002 from the body, transaction", live, sqlError("IG002"), phaseBody, true, false, routeFenced, false},
		{"IG002 from the body, run", live, sqlError("IG002"), phaseBody, false, false, noRetry, false},
		{"IG001 at COMMIT, transaction", live, sqlError("IG001"), phaseCommit, true, false, routeMoved, false},
		{"lost at the claim", live, lost, phaseConnect, false, true, connLost, false},
		{"lost under the body, transaction", live, lost, phaseBody, true, true, connLost, false},
		{"lost under the body, run", live, lost, phaseBody, false, true, noRetry, false},
		{"lost after COMMIT was sent", live, lost, phaseCommit, true, true, noRetry, true},
		{"COMMIT not sent on a closed connection", live, fakeConnClosed{}, phaseCommit, true, true, connLost, false},
		{"the caller's context ended under COMMIT", ended, context.Canceled, phaseCommit, true, true, noRetry, true},
		{"the caller's context ended at the claim", ended, context.Canceled, phaseConnect, true, true, noRetry, false},
		{"another error", live, sqlError("23505"), phaseBody, true, false, noRetry, false},
		{"the body's own deadline", live, context.DeadlineExceeded, phaseBody, true, true, noRetry, false},
		{"no writable host at the connect", live, readOnlyConnectError{}, phaseConnect, true, false, connLost, false},
		{"no writable host at the connect, run", live, readOnlyConnectError{}, phaseConnect, false, false, connLost, false},
	}
	for _, c := range cases {
		reason, err := retryReasonOf(c.ctx, c.err, c.phase, c.retryBody, c.connClosed)
		if reason != c.reason || errors.Is(err, ErrCommitOutcomeUnknown) != c.unknown || !errors.Is(err, c.err) {
			t.Errorf("%s: reason %d, error %v", c.what, reason, err)
		}
	}
}

func TestErrorsAreTold(t *testing.T) {
	last := &pgconn.PgError{Code: "IG002"}
	exhausted := error(&RetriesExhaustedError{Gene: 1, Attempts: 3, Last: last})
	var pgErr *pgconn.PgError
	if !errors.Is(exhausted, ErrRetriesExhausted) || !errors.As(exhausted, &pgErr) || pgErr.Code != "IG002" ||
		errors.Is(exhausted, ErrNoRoute) || errors.Is(exhausted, ErrCommitOutcomeUnknown) {
		t.Error("RetriesExhaustedError")
	}
	unknown := error(&CommitOutcomeUnknownError{Err: io.ErrUnexpectedEOF})
	if !errors.Is(unknown, ErrCommitOutcomeUnknown) || !errors.Is(unknown, io.ErrUnexpectedEOF) || errors.Is(unknown, ErrRetriesExhausted) {
		t.Error("CommitOutcomeUnknownError")
	}
	if !errors.Is(&NoRouteError{Gene: 3}, ErrNoRoute) {
		t.Error("NoRouteError")
	}
}

func TestTheBodysTxBelongsToTheRouter(t *testing.T) {
	tx := newRoutedTx(nil)
	ctx := context.Background()
	if !errors.Is(tx.Commit(ctx), ErrTxOwnedByRouter) || !errors.Is(tx.Rollback(ctx), ErrTxOwnedByRouter) {
		t.Error("Commit and Rollback of the body's Tx end nothing")
	}
	tx.end()
	if _, err := tx.Exec(ctx, "SELECT 1"); !errors.Is(err, pgx.ErrTxClosed) {
		t.Errorf("Exec after the router ended the transaction: %v", err)
	}
	if err := tx.QueryRow(ctx, "SELECT 1").Scan(); !errors.Is(err, pgx.ErrTxClosed) {
		t.Errorf("QueryRow after the end: %v", err)
	}
	if _, err := tx.Begin(ctx); !errors.Is(err, pgx.ErrTxClosed) {
		t.Errorf("Begin after the end: %v", err)
	}
}
