"""The text a call appends to the ``User-Agent`` of its requests: a context variable that
:func:`~.._loading.hub_arguments.sending` sets (a ``user_agent=`` argument) and
:func:`~.._network.session.new_session` reads. It imports nothing of the cold path."""

from __future__ import annotations

from contextvars import ContextVar

#: The text appended to the ``User-Agent`` of this context's requests, if any.
appended_user_agent: ContextVar[str | None] = ContextVar("flashhub_user_agent", default=None)
