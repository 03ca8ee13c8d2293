"""The options that act as ``configure()`` does (``--cdn-url``, ``--cache-dir``, the 0.1.2
script's ``--prefix``): applied for a command's run, and named in its messages in place of
the variables they replace."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .._config import normalize_prefix, overrides, parse_cdn_urls
from .._loading.settings import configure
from .._models.record import Record
from ..errors import ConfigError, FlashhubError


def _unchecked(value: str) -> None:
    pass


class _Setting(Record):
    """An option that acts as ``configure()`` does, in place of a variable."""

    keyword: str  # configure()'s
    option: str
    variable: str
    check: Callable[[str], object] = _unchecked  # raises ValueError for a malformed value


# By argparse dest. "cdn_prefix" is the 0.1.2 script's --prefix (`flashhub publish --prefix`
# is a path in its output tree).
_SETTINGS = {
    "cdn_url": _Setting("cdn_url", "--cdn-url", "FLASHHUB_CDN_URL", parse_cdn_urls),
    "cdn_prefix": _Setting("prefix", "--prefix", "FLASHHUB_CDN_PREFIX", normalize_prefix),
    "cache_dir": _Setting("cache_dir", "--cache-dir", "FLASHHUB_CACHE_DIR"),
}


def _given_settings(args: argparse.Namespace) -> list[tuple[_Setting, str]]:
    """The settings given as options, each with its value."""
    return [
        (setting, value)
        for dest, setting in _SETTINGS.items()
        if (value := getattr(args, dest, None)) is not None
    ]


@contextmanager
def settings_applied(args: argparse.Namespace) -> Iterator[None]:
    """For the block, ``configure()`` the settings given as options; the others stay as
    the environment sets them. After it, the settings are as they were: a program that
    runs a command in its own process keeps its own."""
    given = _given_settings(args)
    for setting, value in given:
        try:
            setting.check(value)
        except ValueError as exc:
            message = exc.message if isinstance(exc, FlashhubError) else str(exc)
            hint = exc.hint if isinstance(exc, FlashhubError) else None
            raise ConfigError(message, hint=_as_option_hint(hint, setting)) from None
    were = dict(overrides)
    try:
        if given:  # a malformed variable fails here, with its own hint
            configure(**{setting.keyword: value for setting, value in given})
        yield
    finally:
        overrides.clear()
        overrides.update(were)


def _as_option_hint(hint: str | None, setting: _Setting) -> str:
    """The hint of a malformed setting's error, which names the variable and
    ``configure()``, naming the option instead."""
    if hint is None:
        return f"check the value of {setting.option}"
    named = f"{setting.variable} (or the {setting.keyword} passed to configure())"
    return hint.replace(named, setting.option).replace(setting.variable, setting.option)


def in_command_terms(text: str, args: argparse.Namespace) -> str:
    """``text`` (an error, a hint) naming the options the command was given where it names
    the variables they replace: the library's messages name the variables."""
    for setting, _value in _given_settings(args):
        text = text.replace(setting.variable, setting.option)
    return text
