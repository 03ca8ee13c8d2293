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
# A run of the lone surrogates that stand for the bytes of a file name the file system's
# encoding cannot read (Python's surrogateescape), or any other unsafe character.
_NAME_BYTES_OR_CONTROL = f"[\udc80-\udcff]+|{_ANY_CONTROL}"
# What such bytes must not read as on a terminal: a control character once decoded as
# UTF-8 (b"\xc2\x9b" is U+009B), or a lone C1 byte (0x80-0x9f) an 8-bit one obeys.
_UNSAFE_AS_BYTES = f"(?![\udca0-\udcff])[{_UNSAFE}]"


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


def escape_path(text: str) -> str:
    """``text``, a path, with its control characters escaped as :func:`escape_controls`
    escapes them, but the bytes of a name the file system's encoding cannot read kept as
    the lone surrogates that stand for them, for a stream that writes them back as those
    bytes (``surrogateescape``): the path is shown as it is on disk. Bytes that would read
    as a control character stay escaped."""
    import re

    return re.sub(_NAME_BYTES_OR_CONTROL, _escaped_unless_name_bytes, text)


def _escaped_unless_name_bytes(match: re.Match[str]) -> str:
    part = match.group()
    if "\udc80" <= part[0] <= "\udcff":
        import re

        as_utf8 = part.encode("utf-8", "surrogateescape").decode("utf-8", "surrogateescape")
        if not re.search(_UNSAFE_AS_BYTES, as_utf8):
            return part
    return _escaped(match)


def escape_message(text: str) -> str:
    """``text`` with every control character escaped except ``\\n`` and ``\\t``.

    For a whole message whose lines and indentation the library laid out; a name with a
    newline in it must be escaped with :func:`escape_controls` before it is put in.
    """
    return _escape(_CONTROL_BUT_LAYOUT, text)
