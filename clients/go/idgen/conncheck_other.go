//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

// checkConn where sockets cannot be peeked at: a connection counts as alive until used (a
// failure at the claim is retried as a lost connection).

package idgen

import (
	"net"

	"github.com/jackc/pgconn"
)

func checkConn(pg *pgconn.PgConn) error {
	if pg.IsClosed() {
		return net.ErrClosed
	}
	return nil
}
