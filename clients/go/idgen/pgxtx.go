// The body's pgx.Tx: the claimed transaction on a shard connection. pgx v4 begins a pgx.Tx with
// a BEGIN of its own (a round trip), so the router sends the claim itself, as one
// simple-protocol message ("/* id_gen.route_claim=gene,version */ BEGIN", or "BEGIN; SELECT
// id_gen.route_claim(gene, version)" to a shard older than id_gen 0.7.16), and hands the body
// this Tx over the same connection.
//
// Invariants:
//   - The router alone ends the transaction: Commit and Rollback of the body's Tx return
//     ErrTxOwnedByRouter and send nothing (a body that wants out returns an error).
//   - Begin and BeginFunc are savepoints (SAVEPOINT / RELEASE / ROLLBACK TO), as pgx's own.
//   - Once the router committed or rolled back, every method returns pgx.ErrTxClosed and sends
//     nothing (a body that kept its Tx cannot reach the connection's next user).
//   - Prepare makes a named statement for the transaction only, as database/sql's Tx.Prepare:
//     the router deallocates every name the body prepared through this Tx (or a savepoint of
//     it) inside the transaction, before COMMIT or ROLLBACK, with the protocol's Close message
//     (which a failed transaction accepts, and which goes to the server connection that holds
//     the statement, also behind a transaction-mode pooler), and pgx forgets it. A connection
//     whose statements could not be dropped (the body ended the transaction itself) is
//     destroyed, never pooled. A statement prepared on Conn() directly is the body's own to
//     deallocate.
//   - LargeObjects is not available (pgx v4 builds it only on its own Tx): it returns the zero
//     value; use the lo_* functions through Exec/Query.

package idgen

import (
	"context"
	"errors"
	"strconv"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgproto3/v2"
	"github.com/jackc/pgx/v4"
)

// routedTx is the claimed transaction (savepoint 0) or a savepoint in it.
type routedTx struct {
	conn      *pgx.Conn
	state     *txState
	savepoint int64 // 0: the transaction itself
	closed    bool  // a savepoint released or rolled back
}

// txState is what the transaction and its savepoints share.
type txState struct {
	ended      bool // the router committed or rolled back
	savepoints int64
	prepared   []string // the names the body prepared (each once), not yet deallocated
}

var _ pgx.Tx = (*routedTx)(nil)

func newRoutedTx(conn *pgx.Conn) *routedTx {
	return &routedTx{conn: conn, state: &txState{}}
}

// end marks the transaction ended by the router.
func (tx *routedTx) end() {
	if tx != nil {
		tx.state.ended = true
	}
}

func (tx *routedTx) usable() error {
	if tx.state.ended || tx.closed {
		return pgx.ErrTxClosed
	}
	return nil
}

// Begin starts a savepoint.
func (tx *routedTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := tx.usable(); err != nil {
		return nil, err
	}
	tx.state.savepoints++
	n := tx.state.savepoints
	if _, err := tx.conn.Exec(ctx, "SAVEPOINT sp_"+strconv.FormatInt(n, 10)); err != nil {
		return nil, err
	}
	return &routedTx{conn: tx.conn, state: tx.state, savepoint: n}, nil
}

// BeginFunc runs f in a savepoint: released when f returns nil, rolled back to otherwise.
func (tx *routedTx) BeginFunc(ctx context.Context, f func(pgx.Tx) error) (err error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if rerr := sp.Rollback(ctx); rerr != nil && !errors.Is(rerr, pgx.ErrTxClosed) && err == nil {
			err = rerr
		}
	}()
	if err := f(sp); err != nil {
		return err
	}
	return sp.Commit(ctx)
}

// Commit releases a savepoint; on the transaction itself it is ErrTxOwnedByRouter.
func (tx *routedTx) Commit(ctx context.Context) error {
	return tx.endSavepoint(ctx, "RELEASE SAVEPOINT sp_")
}

// Rollback rolls back to a savepoint; on the transaction itself it is ErrTxOwnedByRouter.
func (tx *routedTx) Rollback(ctx context.Context) error {
	return tx.endSavepoint(ctx, "ROLLBACK TO SAVEPOINT sp_")
}

func (tx *routedTx) endSavepoint(ctx context.Context, sql string) error {
	if tx.savepoint == 0 {
		return ErrTxOwnedByRouter
	}
	if err := tx.usable(); err != nil {
		return err
	}
	tx.closed = true
	_, err := tx.conn.Exec(ctx, sql+strconv.FormatInt(tx.savepoint, 10))
	return err
}

func (tx *routedTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := tx.usable(); err != nil {
		return nil, err
	}
	return tx.conn.Exec(ctx, sql, args...)
}

func (tx *routedTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := tx.usable(); err != nil {
		return errRows{err}, err
	}
	return tx.conn.Query(ctx, sql, args...)
}

func (tx *routedTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := tx.usable(); err != nil {
		return errRows{err}
	}
	return tx.conn.QueryRow(ctx, sql, args...)
}

func (tx *routedTx) QueryFunc(ctx context.Context, sql string, args []any, scans []any, f func(pgx.QueryFuncRow) error) (pgconn.CommandTag, error) {
	if err := tx.usable(); err != nil {
		return nil, err
	}
	return tx.conn.QueryFunc(ctx, sql, args, scans, f)
}

func (tx *routedTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := tx.usable(); err != nil {
		return errBatch{err}
	}
	return tx.conn.SendBatch(ctx, b)
}

func (tx *routedTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := tx.usable(); err != nil {
		return 0, err
	}
	return tx.conn.CopyFrom(ctx, table, columns, src)
}

// Prepare prepares a named statement for the rest of the transaction (see the file comment); an
// empty name describes sql into the unnamed statement, as pgx's.
func (tx *routedTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := tx.usable(); err != nil {
		return nil, err
	}
	sd, err := tx.conn.Prepare(ctx, name, sql)
	if err == nil && name != "" && !tx.state.hasPrepared(name) {
		tx.state.prepared = append(tx.state.prepared, name)
	}
	return sd, err
}

func (s *txState) hasPrepared(name string) bool {
	for _, n := range s.prepared {
		if n == name {
			return true
		}
	}
	return false
}

// preparedNames are the statements the body prepared and the router has not dropped yet.
func (tx *routedTx) preparedNames() []string {
	if tx == nil {
		return nil
	}
	return tx.state.prepared
}

// LargeObjects is not available on the router's Tx (see the file comment).
func (tx *routedTx) LargeObjects() pgx.LargeObjects { return pgx.LargeObjects{} }

// Conn is the shard connection the transaction runs on.
func (tx *routedTx) Conn() *pgx.Conn { return tx.conn }

// errRows are the rows (and the row) of a statement that was not sent.
type errRows struct{ err error }

func (r errRows) Close()                                         {}
func (r errRows) Err() error                                     { return r.err }
func (r errRows) CommandTag() pgconn.CommandTag                  { return nil }
func (r errRows) FieldDescriptions() []pgproto3.FieldDescription { return nil }
func (r errRows) Next() bool                                     { return false }
func (r errRows) Scan(...any) error                              { return r.err }
func (r errRows) Values() ([]any, error)                         { return nil, r.err }
func (r errRows) RawValues() [][]byte                            { return nil }

// errBatch are the results of a batch that was not sent.
type errBatch struct{ err error }

func (b errBatch) Exec() (pgconn.CommandTag, error) { return nil, b.err }
func (b errBatch) Query() (pgx.Rows, error)         { return errRows(b), b.err }
func (b errBatch) QueryRow() pgx.Row                { return errRows(b) }
func (b errBatch) QueryFunc([]any, func(pgx.QueryFuncRow) error) (pgconn.CommandTag, error) {
	return nil, b.err
}
func (b errBatch) Close() error { return b.err }
