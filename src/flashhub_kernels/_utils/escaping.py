"""Text from the CDN made safe to show on a terminal. Pure, no I/O.

Variant names, file names, header values and reasons a server gives end up in error
messages and in the CLI's output. A control character among them could move the
cursor, recolour or rewrite what the user reads (an ESC sequence, a carriage return),
or start a line that looks like the library's own (a newline). So each one is shown
escaped, as ``repr`` would: ``\\x1b``, ``\\r``, ``\\n``, ``\\u202e``.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: the errors module imports this one
if TYPE_CHECKING:
    import re

# C0 controls, DEL, C1 controls, the bidirectional embeddings, overrides and isolates,
# which reorder how the rest of a line is displayed, and lone surrogates (JSON may hold
# them), which no encoding can write.
_UNSAFE = "\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
# Patterns, not compiled ones: re compiles them on first use (and keeps them), so that
# importing this module, and with it the errors, compiles nothing.
_ANY_CONTROL = f"[{_UNSAFE}]"
_CONTROL_BUT_LAYOUT = f"(?![\n\t])[{_UNSAFE}]"


def _escaped(match: re.Match[str]) -> str:
    return repr(match.group())[1:-1]


def _escape(pattern: str, text: str) -> str:
    import re  # loaded already in any process that has imported torch

    return re.sub(pattern, _escaped, text)


def escape_controls(text: str) -> str:
    """``text`` with every control character escaped, newlines and tabs included.

    For one name or value from the CDN, which never holds a line break of its own.
    """
    return _escape(_ANY_CONTROL, text)


def escape_message(text: str) -> str:
    """``text`` with every control character escaped except ``\\n`` and ``\\t``.

    For a whole message whose lines and indentation the library laid out; a name with a
    newline in it must be escaped with :func:`escape_controls` before it is put in.
    """
    return _escape(_CONTROL_BUT_LAYOUT, text)
