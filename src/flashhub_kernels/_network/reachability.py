"""Mirrors that cannot be connected to: asked after the others, and not kept waiting for.

A mirror whose host drops connections (a firewall, a dead route) costs a connect timeout
(``FLASHHUB_CONNECT_TIMEOUT``) for each try, and the session tries a connection three
times: listed first, it would cost three timeouts for each path a download asks of it.
So while another mirror remains to be asked for a path, a connection that fails is not
tried again: the mirror is put after the others, and asked again, its connection
retried, only once they failed too. With one mirror, its connection is retried as usual.

A download run moves a mirror that failed to the back of its list; a process remembers,
for :data:`UNREACHABLE_SECONDS`, that a mirror could not be connected to, so that the
downloads it starts meanwhile (the next kernel's) ask that mirror last from the start.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING

from .._utils.logs import logger
from .mirrors import Unreachable

if TYPE_CHECKING:
    from .answers import Answers
    from .mirrors import Mirror, MirrorFailed

# How long a process asks last a mirror it could not connect to: long enough for the
# kernels a program loads one after another, short enough that a mirror back up is
# soon asked first again.
UNREACHABLE_SECONDS = 60.0

# When each mirror (by base URL) last failed to connect, by time.monotonic().
_failed_to_connect: dict[str, float] = {}
# Whether the request this thread (or task) sends retries a connection that fails.
_retry_connections: ContextVar[bool] = ContextVar("flashhub_retry_connections", default=True)


def connections_retried() -> bool:
    """Whether a connection that fails is tried again for the request being sent (the
    session's retry policy asks): not while another mirror remains to be asked."""
    return _retry_connections.get()


def reachable_first(mirrors: Iterable[Mirror]) -> list[Mirror]:
    """``mirrors`` in their order, those that this process could not connect to in the
    last :data:`UNREACHABLE_SECONDS` last."""
    now = time.monotonic()

    def unreachable(mirror: Mirror) -> bool:
        failed = _failed_to_connect.get(mirror.base_url)
        return failed is not None and now - failed < UNREACHABLE_SECONDS

    return sorted(mirrors, key=unreachable)


class MirrorPlan:
    """The mirrors to ask for one path, in turn, and what each answered (``answers``).

    A mirror that cannot be connected to while others remain is put after them (once):
    asked again, its connection retried, only once they failed too.
    """

    def __init__(self, mirrors: Iterable[Mirror], answers: Answers) -> None:
        self._queue = deque(mirrors)
        self._put_off: set[Mirror] = set()
        self.answers = answers

    def __bool__(self) -> bool:
        return bool(self._queue)

    def next(self) -> Mirror:
        """The mirror to ask now, taken off the plan."""
        return self._queue.popleft()

    def again(self, mirror: Mirror) -> None:
        """Ask ``mirror`` again, next."""
        self._queue.appendleft(mirror)

    @contextmanager
    def asking(self, mirror: Mirror) -> Iterator[None]:
        """While the block asks ``mirror`` (just taken off the plan): its connection is
        tried once while others remain to be asked, and a connection that fails is
        remembered for the process."""
        token = _retry_connections.set(not self._tried_once(mirror))
        try:
            yield
        except Unreachable:
            _failed_to_connect[mirror.base_url] = time.monotonic()
            raise
        finally:
            _retry_connections.reset(token)

    def failed(self, mirror: Mirror, exc: MirrorFailed) -> None:
        """Record that ``mirror`` could not serve the path; one that could not be connected
        to on its one try is put after the others instead."""
        if isinstance(exc, Unreachable) and self._tried_once(mirror):
            self._put_off.add(mirror)
            self._queue.append(mirror)
            logger.info(
                "mirror %s could not be connected to (%s); asking the others first",
                mirror.label,
                exc,
            )
        else:
            self.answers.failed(mirror, exc)

    def _tried_once(self, mirror: Mirror) -> bool:
        """Whether ``mirror``'s connection is tried once: others remain to be asked, and
        it was not put after them already."""
        return bool(self._queue) and mirror not in self._put_off
