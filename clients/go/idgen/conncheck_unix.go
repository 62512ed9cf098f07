//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

// checkConn: whether an idle pooled connection is still there, without a round trip and
// without waiting (pgx v5 has PgConn.CheckConn for this; pgx v4 has none).
//
// Invariants: nothing is sent; a byte still in the socket is not consumed by the peek; a
// message the server sent meanwhile is read through pgconn (a FATAL, such as 57P01 at a shard's
// shutdown, closes the connection there); a connection found gone is an error.

package idgen

import (
	"context"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/jackc/pgconn"
)

// pendingMessagesRead bounds how many messages that arrived while the connection sat idle
// (notices, parameter changes) are read before it counts as alive.
const pendingMessagesRead = 8

func checkConn(pg *pgconn.PgConn) error {
	if pg.IsClosed() {
		return net.ErrClosed
	}
	for i := 0; i < pendingMessagesRead; i++ {
		pending, err := peekSocket(pg.Conn())
		if err != nil || !pending {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = pg.ReceiveMessage(ctx) // (the data is there: no wait)
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

// peekSocket: whether data waits on the connection's socket; io.EOF when the peer closed it.
// A connection whose socket cannot be reached (not TCP or Unix) is taken as alive.
func peekSocket(conn net.Conn) (bool, error) {
	if tlsConn, ok := conn.(interface{ NetConn() net.Conn }); ok {
		conn = tlsConn.NetConn()
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false, nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false, err
	}
	var n int
	var peekErr error
	err = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, peekErr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true // (never wait)
	})
	switch {
	case err != nil:
		return false, err
	case peekErr == syscall.EAGAIN || peekErr == syscall.EWOULDBLOCK || peekErr == syscall.EINTR:
		return false, nil
	case peekErr != nil:
		return false, peekErr
	case n == 0:
		return false, io.EOF
	}
	return true, nil
}
