"""A deadline for an answer's headers.

A read timeout bounds each wait for bytes, not the wait for a whole answer: a server that
sends its headers a byte at a time, each just inside the read timeout, would hold a request
(and the mirrors after it) for as long as it likes. So every request must have all its
answer's headers within the connect timeout plus the read timeout of its start; past that,
its socket is shut down and the request fails with a read error (retried once, as a read
timeout is, then the next mirror). The body has the stall guard (``stall_guard``).
A tunnel through a proxy, opened before the request is sent (the proxy's answer to
``CONNECT``, then the TLS handshake with the server inside it), has the same deadline:
past it the proxy failed.

One daemon thread per process watches the deadlines of the requests in flight: arming and
disarming one costs a heap push and a flag, not a thread per request. Time the process
spent stopped (Ctrl-Z, a debugger) is not counted against the server: the thread looks
at least every :data:`_TICK_SECONDS`, and a look that comes late (after a sleep, or
wherever the thread was stopped) moves the deadlines on by that long, so the answer that
arrived meanwhile is read, not cut.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import itertools
import os
import socket
import threading
import time
from collections.abc import Callable
from http.client import HTTPException
from typing import Any, TypeVar

from urllib3.connectionpool import HTTPConnectionPool
from urllib3.exceptions import ProtocolError, ProxyError
from urllib3.poolmanager import PoolManager
from urllib3.util.timeout import Timeout

from .._utils.threads import started

_IDLE_SECONDS = 0.5  # how long the watchdog thread waits for another request before it ends
_ENDING_SECONDS = 0.1  # how long a run that is over waits for the thread to end
_RECHECK_SECONDS = 0.1  # how soon a request past its deadline, still connecting, is looked at again
# The longest the thread sleeps while a request is in flight, and how late a wake must
# be to tell that the process was stopped (not the server slow): a stop is credited to
# within these two.
_TICK_SECONDS = 0.25
_STOPPED_SECONDS = 0.25

_T = TypeVar("_T")


class _Armed:
    """One request's deadline: cut its connection's socket unless disarmed first."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self.done = False  # disarmed, or cut
        self.cut = False

    def expire(self) -> bool:
        """Shut the connection's socket down (the watchdog holds its lock): a read
        blocked on it returns at once. ``shutdown``, not ``close``: another thread is
        using the socket, and a closed descriptor's number could be reused under it.
        Whether it did: a connection still connecting has no socket to cut yet."""
        sock = getattr(self._conn, "sock", None)
        while sock is not None and not isinstance(sock, socket.socket):
            sock = getattr(sock, "socket", None)  # urllib3's TLS inside a proxy's TLS
        if sock is None:
            return False
        self.done = self.cut = True
        with contextlib.suppress(OSError):
            socket.socket.shutdown(sock, socket.SHUT_RDWR)  # under TLS too
        return True


class _Watchdog:
    """The thread that expires the deadlines that pass, earliest first. It runs while
    requests are in flight, and ends once none has been for ``_IDLE_SECONDS``, or at once
    when a run of downloads is over (:meth:`end_when_idle`): a program that waits for its
    threads to end, counts them, or forks, finds none of the load's."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._changed = threading.Condition()
        self._due: list[tuple[float, int, _Armed]] = []
        self._order = itertools.count()  # ties are broken by arrival, never by _Armed
        self._in_flight = 0  # armed, neither disarmed nor expired
        self._thread: threading.Thread | None = None
        self._ending = False  # end_when_idle() asked the thread to end once idle
        self._looked = 0.0  # when the thread last looked at the deadlines (monotonic)
        self._slept = 0.0  # how long it meant to sleep since

    def arm(self, seconds: float, conn: Any) -> _Armed:
        armed = _Armed(conn)
        with self._changed:
            heapq.heappush(self._due, (time.monotonic() + seconds, next(self._order), armed))
            self._in_flight += 1
            if self._thread is None:
                # Its first look is timed from now: a stop before the thread runs counts.
                self._looked, self._slept = time.monotonic(), 0.0
                thread = threading.Thread(
                    target=self._run, name="flashhub-header-deadline", daemon=True
                )
                if started(thread):  # else (the interpreter is exiting) no deadline is kept
                    self._thread = thread
            elif self._due[0][2] is armed:
                self._changed.notify()  # due before what the thread sleeps until
        return armed

    def disarm(self, armed: _Armed) -> None:
        """Drop ``armed``'s deadline: at once with the others disarmed, once they outnumber
        those in flight (which costs each request a share of one pass, not its place in
        the heap until its deadline, a minute or more, passes, while others are in flight)."""
        with self._changed:
            if not armed.done:
                armed.done = True
                self._in_flight -= 1
                if not self._in_flight:
                    self._changed.notify()  # the thread may end, instead of sleeping on
                if len(self._due) > 2 * self._in_flight:
                    self._due = [entry for entry in self._due if not entry[2].done]
                    heapq.heapify(self._due)

    def end_when_idle(self) -> None:
        """End the thread now unless a request is in flight, and give it a moment to end.
        (Another run's request that comes first keeps it on: no run waits for another's.)"""
        with self._changed:
            thread = self._thread
            if thread is None or self._in_flight:
                return
            self._ending = True
            self._changed.notify()
        thread.join(_ENDING_SECONDS)

    def _goes_on(self) -> bool:
        """Whether the thread has a request to watch (its lock held): one in flight, or one
        armed within ``_IDLE_SECONDS``, unless :meth:`end_when_idle` asked it to end."""
        if not self._in_flight:
            self._due.clear()  # disarmed, all of them
            if not self._ending:
                # Timed as a sleep: a request armed meanwhile (a stop may come before the
                # thread wakes for it) is credited with the stop as any other is.
                self._looked, self._slept = time.monotonic(), _IDLE_SECONDS
                self._changed.wait(_IDLE_SECONDS)
        return bool(self._in_flight)

    def _run(self) -> None:
        with self._changed:
            while self._goes_on():
                now = self._credit_stop()
                while self._due[0][2].done:
                    heapq.heappop(self._due)
                if (wait := self._due[0][0] - now) > 0:
                    self._sleep(min(wait, _TICK_SECONDS))
                else:
                    _due, order, armed = heapq.heappop(self._due)
                    if armed.expire():
                        self._in_flight -= 1
                    else:  # cut it once it has a socket (its connect is bounded meanwhile)
                        again = time.monotonic() + _RECHECK_SECONDS
                        heapq.heappush(self._due, (again, order, armed))
            self._thread, self._ending = None, False

    def _credit_stop(self) -> float:
        """Now (its lock held). Where the thread looks later than it meant to sleep, by
        more than :data:`_STOPPED_SECONDS`, the process was stopped: every deadline moves
        on by that long (adding to every key keeps the heap a heap). The look is timed
        from the last one, not from the sleep: a stop may come between the two."""
        now = time.monotonic()
        if (late := now - self._looked - self._slept) > _STOPPED_SECONDS:
            self._due = [(due + late, order, armed) for due, order, armed in self._due]
        self._looked, self._slept = now, 0.0
        return now

    def _sleep(self, seconds: float) -> None:
        """Wait up to ``seconds`` (its lock held), or until a deadline changes."""
        self._slept = seconds
        self._changed.wait(seconds)


_WATCHDOG = _Watchdog()
if hasattr(os, "register_at_fork"):  # a forked child has no watchdog thread, maybe a held lock
    os.register_at_fork(after_in_child=_WATCHDOG._reset)


def end_watchdog_when_idle() -> None:
    """End the watchdog's thread now unless a request is in flight: a run is over."""
    _WATCHDOG.end_when_idle()


class _HeadersInTime(HTTPConnectionPool):
    """A connection pool whose requests get their answer's headers in time, or fail; and
    whose tunnels through a proxy open in time, or fail. A request that fails once its
    proxy was reached is the server's failure, not the proxy's."""

    def _make_request(self, conn: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        seconds = _allowed(self._get_timeout(kwargs.get("timeout", self.timeout)))
        send = functools.partial(super()._make_request, conn, method, url, *args, **kwargs)
        past_the_proxy = conn.has_connected_to_proxy  # a tunnel open, or a proxy reached
        try:
            return in_time(seconds, conn, send, _late_headers)
        except (OSError, HTTPException) as exc:
            if not past_the_proxy:
                raise
            # The server behind the proxy hung up (its idle timeout, as a kept-alive
            # connection was reused): a read error, retried as it is without a proxy.
            # http.client closed the connection, and urllib3 takes a closed one for one
            # that never reached its proxy, and the proxy's failure, never retried.
            raise ProtocolError("Connection aborted.", exc) from exc

    def _prepare_proxy(self, conn: Any) -> None:
        """Open the tunnel through the proxy: ``CONNECT``, then TLS with the server inside
        it, each read of which has a timeout but not the whole (the proxy's answer, or
        the handshake through an ``https://`` proxy, could come a byte at a time). The
        pool's timeout (the session's) gives it the deadline a request's headers get."""
        prepare = functools.partial(super()._prepare_proxy, conn)
        in_time(_allowed(self.timeout), conn, prepare, _late_tunnel)


def in_time(
    seconds: float | None, conn: Any, step: Callable[[], _T], late: Callable[[float], Exception]
) -> _T:
    """What ``step`` returns, unless it took over ``seconds`` (``None``: no limit): then its
    connection's socket was cut, and the error is ``late(seconds)``. For a request's
    headers, a tunnel's opening, and a decoding read of a body (see ``stall_guard``)."""
    if seconds is None:
        return step()
    armed = _WATCHDOG.arm(seconds, conn)
    try:
        result = step()
    except Exception as exc:
        if armed.cut:
            raise late(seconds) from exc
        raise
    finally:
        _WATCHDOG.disarm(armed)
    if armed.cut:  # the step took the cut for the end of what it read (of the headers, say)
        raise late(seconds)
    return result


def _allowed(timeout: Timeout) -> float | None:
    """The seconds a request has until its answer's headers are in: its connect timeout
    plus its read timeout (None when either is unlimited)."""
    connect, read = timeout.connect_timeout, timeout.read_timeout
    if isinstance(connect, (int, float)) and isinstance(read, (int, float)):
        return float(connect) + float(read)
    return None


def _late_headers(seconds: float) -> ProtocolError:
    """The error of a request cut at its deadline: a read error, which urllib3 retries as
    it retries a read timeout. Not a ``ReadTimeoutError``: where http.client took the cut
    for the end of the headers, it closed the connection, and urllib3 blames a timeout on
    a closed connection through a proxy on the proxy, which did nothing wrong."""
    return ProtocolError(
        f"Read timed out: the answer's headers were not all in after {seconds:g} s"
    )


def _late_tunnel(seconds: float) -> ProxyError:
    """The error of a tunnel cut at its deadline: the proxy's, as urllib3 makes every
    other failure to open a tunnel (not retried: the next mirror is tried)."""
    return ProxyError(
        "Unable to open a tunnel through the proxy",
        ProtocolError(
            f"the tunnel was not open after {seconds:g} s (the proxy's answer to CONNECT, "
            "or the TLS handshake through it, never ended)"
        ),
    )


_TIMED: dict[type[HTTPConnectionPool], type[HTTPConnectionPool]] = {}


def with_header_deadline(manager: PoolManager) -> None:
    """Make the pools that ``manager`` creates from now on enforce the header deadline."""
    manager.pool_classes_by_scheme = {
        scheme: _timed(pool_class) for scheme, pool_class in manager.pool_classes_by_scheme.items()
    }


def _timed(pool_class: type[HTTPConnectionPool]) -> type[HTTPConnectionPool]:
    """``pool_class`` with the header deadline (itself if it has it already)."""
    if issubclass(pool_class, _HeadersInTime):
        return pool_class
    if pool_class not in _TIMED:
        # Named as the pool it extends: urllib3's messages name a request's pool.
        _TIMED[pool_class] = type(pool_class.__name__, (_HeadersInTime, pool_class), {})
    return _TIMED[pool_class]
