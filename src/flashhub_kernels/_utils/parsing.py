"""A document from elsewhere parsed within bounds: the CDN's JSON, a lock file, a
``pyproject.toml`` or a ``build.toml``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def parse_capped(
    data: bytes,
    parse: Callable[[bytes], Any],
    language: str,
    syntax_error: type[ValueError],
    limit: int | None = None,
) -> Any:
    """``parse(data)``, a document in ``language`` (JSON, TOML), within the bounds that
    input from elsewhere needs: at most ``limit`` bytes, and no integer longer or
    nesting deeper than Python's parsers take. Past those the parsers raise
    ``ValueError`` (Python's limit on the digits of an int it converts) and
    ``RecursionError``, which say nothing of the document.

    Raises:
        ValueError: saying what is wrong, worded to follow the document's name
            (``f"{name} {exc}"``): "is not valid JSON: ...", "is nested too deeply".
    """
    if limit is not None and len(data) > limit:
        # At least: a body is read no further than the chunk that takes it past the limit.
        raise ValueError(f"is over the {limit >> 20} MiB limit (at least {len(data)} bytes)")
    try:
        return parse(data)
    except (UnicodeDecodeError, syntax_error) as exc:
        raise ValueError(f"is not valid {language}: {exc}") from None
    except ValueError:
        raise ValueError("holds an integer with too many digits") from None
    except RecursionError:
        raise ValueError("is nested too deeply") from None
