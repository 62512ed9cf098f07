"""The bound on what a router sends to a shard and waits for there (`shard_timeout`): the
probe of its routing protocol, the claim, COMMIT, ROLLBACK and `execute`'s statement. A
shard that stops answering while its kernel still acknowledges TCP (a process stopped with
SIGSTOP, a frozen VM) defeats keepalives and tcp_user_timeout, and libpq's PQexec, which
sends the claim and COMMIT, cannot be interrupted from Python.

How: a guarded block holds a duplicate of its connection's socket descriptor; if the block
is still running at its deadline, that socket is shut down (shutdown(2), SHUT_RDWR, on the
duplicate). Whatever libpq or psycopg was waiting in (PQexec's poll, psycopg's wait on the
socket, a send) returns at once with the connection broken ("server closed the connection
unexpectedly"), with nothing more sent to the shard: no cancel request, no Terminate, no
ROLLBACK that could wait in turn. The guard then finishes the connection (libpq's
PQfinish, which only closes it now), so the pool discards it, and raises `ShardTimeout`,
a psycopg.OperationalError without SQLSTATE that `errors.connection_lost` counts as a lost
connection: retried when no COMMIT was sent, CommitOutcomeUnknown after
(`_routes.attempt_failure`).

Invariants:

* The duplicate descriptor is closed exactly once: by the watchdog when it fires, else by
  the guard's exit. The socket shut down is therefore always the guarded connection's, even
  when libpq closed its own descriptor meanwhile (a lost connection) and the number was
  reused.
* A guard that fired leaves its connection finished (the pool never hands it out again).
* The sync `Watchdog` has one thread per router, started when a guard is armed and ending
  after IDLE_SECONDS without any; its lock is held only for bookkeeping and the shutdown
  (which does not block). One timeout per watchdog, deadlines taken under the lock: guards
  are armed in deadline order, so the thread only ever waits for the oldest, and is woken
  only for a deadline before the time it wakes by itself (so not per call when the timeout
  is at least IDLE_SECONDS).
* `AsyncGuard` is the asyncio form: a timer of the running loop (no thread, no
  cancellation of the awaiting task, so psycopg never sends a cancel request).
"""
from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from types import TracebackType
from typing import Any, Dict, Optional, Type

import psycopg

from .errors import ShardTimeout

IDLE_SECONDS = 10.0  # the watchdog thread ends after this long without a guard


def _dup_socket(conn: Any) -> int:
    """A duplicate of the connection's socket descriptor, or -1 when it has none (a
    connection already lost: libpq then fails at once, without waiting)."""
    try:
        return os.dup(conn.pgconn.socket)
    except (psycopg.Error, OSError):
        return -1


def _shut_down(fd: int) -> None:
    """Shuts the socket down (both directions) and closes the descriptor `fd`."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError:  # (not a socket: nothing to interrupt)
        os.close(fd)
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # (already disconnected)
    finally:
        sock.close()


def _expired(conn: Any, what: str, timeout: float, exc: Optional[BaseException], strict: bool) -> None:
    """After a guard fired: finishes the connection, and raises ShardTimeout from the
    block's error (or, when `strict`, even when the block had ended well just as the socket
    was shut down: a claim whose connection is gone is no claim). An error that is not an
    Exception (KeyboardInterrupt, ...) goes on unchanged."""
    try:
        conn.pgconn.finish()
    except Exception:  # (a connection whose libpq object is gone already)
        pass
    if exc is None and not strict:
        return
    if exc is not None and not isinstance(exc, Exception):
        return
    raise ShardTimeout(f"id_gen_client: the shard did not answer {what} within shard_timeout "
                       f"({timeout:g} s); the connection was closed") from exc


class Watchdog:
    """Breaks the connections whose guarded block outlives `timeout` seconds (sync routers;
    thread-safe). `guard(conn, what)` is the `with` block."""

    def __init__(self, timeout: float, name: str) -> None:
        self.timeout = float(timeout)
        self._name = name
        self._cond = threading.Condition(threading.Lock())
        self._armed: Dict[Guard, None] = {}  # in arming order, which is deadline order
        self._thread: Optional[threading.Thread] = None
        self._stopping = False
        self._wake_at = 0.0  # when the thread wakes next by itself (monotonic)

    def guard(self, conn: Any, what: str, strict: bool = False) -> "Guard":
        """A `with` block bounded by the timeout (`what` names the wait in ShardTimeout)."""
        return Guard(self, conn, what, strict)

    def stop(self) -> None:
        """Lets the thread end as soon as no guard is armed (a router's close())."""
        with self._cond:
            self._stopping = True
            self._cond.notify()

    def _arm(self, guard: "Guard") -> None:
        with self._cond:
            guard.deadline = time.monotonic() + self.timeout
            if self._thread is None:
                # (started before the guard is armed: a thread that cannot start leaves
                # nothing armed, and the caller gets the error with its descriptor closed)
                thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                thread.start()
                self._thread = thread
            elif guard.deadline < self._wake_at:
                # The thread sleeps past this deadline (idle, and the timeout is shorter than
                # IDLE_SECONDS): wake it. Otherwise it wakes in time by itself, and a router's
                # calls cost no thread switch (nor a turn of the GIL) each.
                self._cond.notify()
            self._armed[guard] = None  # (the thread sees it once this lock is released)

    def _disarm(self, guard: "Guard") -> bool:
        """Whether the guard fired (else it will not anymore)."""
        with self._cond:
            if guard.fired:
                return True
            del self._armed[guard]
            return False

    def _run(self) -> None:
        with self._cond:
            while True:
                if not self._armed:
                    self._wake_at = time.monotonic() + IDLE_SECONDS
                    if (self._stopping or not self._cond.wait(IDLE_SECONDS)) and not self._armed:
                        self._thread = None
                        return
                    continue
                guard = next(iter(self._armed))
                delay = guard.deadline - time.monotonic()
                if delay > 0:
                    self._wake_at = guard.deadline
                    self._cond.wait(delay)
                    continue
                del self._armed[guard]
                guard.fired = True
                _shut_down(guard.fd)


class Guard:
    """One bounded block of a sync router (see Watchdog)."""

    __slots__ = ("watchdog", "conn", "what", "strict", "fd", "fired", "deadline")

    def __init__(self, watchdog: Watchdog, conn: Any, what: str, strict: bool) -> None:
        self.watchdog, self.conn, self.what, self.strict = watchdog, conn, what, strict
        self.fd, self.fired, self.deadline = -1, False, 0.0

    def __enter__(self) -> "Guard":
        self.fd = _dup_socket(self.conn)
        if self.fd >= 0:
            try:
                self.watchdog._arm(self)
            except BaseException:
                os.close(self.fd)
                self.fd = -1
                raise
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        if self.fd < 0:
            return
        if not self.watchdog._disarm(self):
            os.close(self.fd)
            return
        _expired(self.conn, self.what, self.watchdog.timeout, exc, self.strict)


class AsyncGuard:
    """One bounded block of an AsyncRouter, a plain `with` inside a coroutine: a timer of
    the running loop shuts the socket down at the deadline (see the module's docstring)."""

    __slots__ = ("conn", "what", "timeout", "strict", "fd", "fired", "handle")

    def __init__(self, conn: Any, what: str, timeout: float, strict: bool = False) -> None:
        self.conn, self.what, self.timeout, self.strict = conn, what, timeout, strict
        self.fd, self.fired = -1, False
        self.handle: Optional[asyncio.TimerHandle] = None

    def __enter__(self) -> "AsyncGuard":
        loop = asyncio.get_running_loop()
        self.fd = _dup_socket(self.conn)
        if self.fd >= 0:
            self.handle = loop.call_later(self.timeout, self._fire)
        return self

    def _fire(self) -> None:
        self.fired = True
        _shut_down(self.fd)

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        if self.fd < 0:
            return
        if self.handle is not None:
            self.handle.cancel()
        if not self.fired:
            os.close(self.fd)
            return
        _expired(self.conn, self.what, self.timeout, exc, self.strict)
