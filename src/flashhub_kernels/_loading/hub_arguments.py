"""The arguments Hugging Face kernels' loaders take that trust and identify the caller
to the Hub: ``trust_remote_code=`` and ``user_agent=``, taken here by the same names.

``trust_remote_code`` is checked and changes nothing: what loads is what the configured
CDN serves, and publishers are trusted by their signatures (``FLASHHUB_TRUSTED_KEYS``,
``FLASHHUB_REQUIRE_SIGNATURES``). ``user_agent`` is appended to the ``User-Agent`` of the
requests of the call: it is set in a context variable
(:data:`~.._utils.user_agent.appended_user_agent`), which
:func:`~.._network.session.new_session` reads when a download run opens its session, so
it reaches the requests of the kernel's dependencies too, and of no other call.
Importing this module imports nothing of the cold path.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from .._utils.user_agent import appended_user_agent


def check_trust_remote_code(trust_remote_code: object) -> None:
    """Refuse a ``trust_remote_code=`` that Hugging Face kernels could not take: it must
    be a bool or a list of repo ids.

    Raises:
        TypeError: it is neither.
    """
    if isinstance(trust_remote_code, bool):
        return
    if isinstance(trust_remote_code, list) and all(isinstance(r, str) for r in trust_remote_code):
        return
    raise TypeError(
        "trust_remote_code must be True, False or a list of repo ids such as "
        f"['org/kernel'], got {trust_remote_code!r}"
    )


def user_agent_text(user_agent: object) -> str:
    """The text a ``user_agent=`` adds to the ``User-Agent``: a ``str`` as it is, a
    ``dict`` as ``key/value; key/value``; blanks around it left out.

    Raises:
        TypeError: it is neither.
        ValueError: it holds a character a header cannot carry.
    """
    if isinstance(user_agent, Mapping):
        text = "; ".join(f"{key}/{value}" for key, value in user_agent.items())
    elif isinstance(user_agent, str):
        text = user_agent
    else:
        raise TypeError(
            "user_agent must be a str ('my-app/1.0') or a dict ({'my-app': '1.0'}), "
            f"got {type(user_agent).__name__}"
        )
    if not (text.isascii() and text.isprintable()):
        raise ValueError(
            f"user_agent {text!r} cannot be sent in a header: use printable ASCII characters"
        )
    return text.strip()


@contextmanager
def sending(user_agent: str | Mapping[str, object] | None) -> Iterator[None]:
    """Append ``user_agent`` to the ``User-Agent`` of the requests made in the block;
    ``None`` adds nothing (and keeps what an enclosing call added).

    Raises:
        TypeError, ValueError: as :func:`user_agent_text`.
    """
    if user_agent is None:
        yield
        return
    token = appended_user_agent.set(user_agent_text(user_agent) or None)
    try:
        yield
    finally:
        appended_user_agent.reset(token)
