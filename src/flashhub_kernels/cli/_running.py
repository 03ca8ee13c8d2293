"""Running a command: its handler called with the settings its options give, and every
way it can end (an error, Ctrl-C, SIGTERM, a closed pipe) turned into a printed line
and an exit code, never a traceback."""

from __future__ import annotations

import argparse
import codecs
import errno
import io
import os
import signal
import sys
import threading
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Literal, TextIO, TypeGuard, cast

from .._utils.escaping import escape_message
from ..errors import ConfigError, FlashhubError
from ._common import Handler, Parser, print_error
from ._exit import (
    EXIT_BROKEN_PIPE,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    EXIT_USAGE,
)
from ._settings import in_command_terms, settings_applied


def open_missing_streams() -> None:
    """Point a missing ``sys.stdin``, ``sys.stdout`` or ``sys.stderr`` at the null device.

    Python sets one to ``None`` when the process starts with its descriptor closed
    (``flashhub get ... 2>&-``, pythonw). ``print(file=None)`` writes to stdout, so the
    errors and warnings would land in the output a script reads (``DIR=$(flashhub get
    ...)``), and flushing a missing stdout, or asking a missing stdin whether it is a
    terminal (``flashhub cache clear <&-``), would end the command in a traceback.
    """
    if sys.stdin is None:
        sys.stdin = _null_stream("r")
    if sys.stdout is None:
        sys.stdout = _null_stream("w")
    if sys.stderr is None:
        sys.stderr = _null_stream("w")


def _null_stream(mode: Literal["r", "w"]) -> TextIO:
    """A stream on the null device that, like Python's own standard streams, never closes
    its descriptor: it stays open until the process exits (so ``-X dev`` has no unclosed
    file to warn of at teardown)."""
    return open(os.open(os.devnull, os.O_RDWR), mode, closefd=False)


def parse(parser: Parser, argv: Sequence[str] | None) -> argparse.Namespace | int:
    """Parse, turning argparse's ``SystemExit`` (``--help``, usage errors) into a code.
    Unrecognized arguments are reported by the innermost command typed, with its usage
    (``flashhub cache list``'s, not ``flashhub``'s, to which argparse leaves them)."""
    try:
        args, unrecognized = parser.parse_known_args(argv)
        if unrecognized:
            reporter: Parser = args.parsed_by
            reporter.error(f"unrecognized arguments: {' '.join(unrecognized)}")
        return args
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else EXIT_USAGE
        return _flushed_stdout() or code  # --help, --version: their output written
    except OSError as exc:  # --help, --version or a usage that could not be written
        return _unwritten_output(exc)


def usage_error(parser: argparse.ArgumentParser, message: str) -> int:
    parser.print_usage(sys.stderr)
    print(f"{parser.prog}: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def run(handler: Handler, args: argparse.Namespace) -> int:
    """Run ``handler`` with the settings its options give; print any error, with its hint
    and without a traceback, and return the exit code."""
    sigterm = _SigtermInterrupts()
    try:
        with (
            warnings.catch_warnings(),
            sigterm,
            _file_names_as_bytes(),
            settings_applied(args),
            _stdout_failures_marked(),  # last: the error handlers are set on stdout itself
        ):
            warnings.showwarning = _print_warning  # catch_warnings restores it, for a caller
            code = handler(args)
        return _flushed_stdout() or code  # a closed pipe shows here, not at exit
    except _UnwrittenOutput as exc:
        return _unwritten_output(exc.error)
    except KeyboardInterrupt as exc:  # Ctrl-C: what the download says of it, no traceback
        print(escape_message(str(exc) or "interrupted"), file=sys.stderr)
        return EXIT_TERMINATED if sigterm.received else EXIT_INTERRUPTED
    except BrokenPipeError:
        _discard_stdout()
        return EXIT_BROKEN_PIPE
    except FlashhubError as exc:  # ConfigError: a malformed setting, e.g. FLASHHUB_CDN_URL
        hint = exc.cli_hint or exc.hint
        print_error(in_command_terms(exc.message, args), hint and in_command_terms(hint, args))
        return EXIT_USAGE if isinstance(exc, ConfigError) else EXIT_FAILURE
    except ValueError as exc:  # a malformed argument or setting (LOCAL_KERNELS, trusted keys)
        if _unprintable_output(exc):
            print_error(
                f"stdout's encoding ({exc.encoding}) cannot show "
                f"{exc.object[exc.start : exc.end]!r}, which is part of the output",
                "set PYTHONIOENCODING=utf-8, or run in a UTF-8 locale (LC_ALL=C.UTF-8)",
            )
            return EXIT_FAILURE
        print_error(str(exc), None)
        return EXIT_USAGE
    except OSError as exc:
        if exc.errno == errno.ENOENT and _current_dir_removed():
            print_error(
                f"the current directory no longer exists: {exc}",
                "cd to a directory that exists (the project's), or pass absolute paths",
            )
        else:
            print_error(str(exc), None)
        return EXIT_FAILURE


def _flushed_stdout() -> int | None:
    """Flush stdout: ``None``, or the exit code where the output could not be written,
    said on stderr (a full disk: ``flashhub cache list > /dev/full``), or its reader
    closed the pipe (``flashhub ... | head``), said by the code alone."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _discard_stdout()
        return EXIT_BROKEN_PIPE
    except OSError as exc:
        return _unwritten_output(exc)
    return None


def _unwritten_output(exc: OSError) -> int:
    """Say that stdout could not be written, and why; the exit code."""
    _discard_stdout()  # what stays buffered would fail again at exit
    print_error(
        f"could not write the output (stdout): {exc.strerror or exc}",
        "free space where the output goes, or send it elsewhere (check the redirection)",
    )
    return EXIT_FAILURE


class _UnwrittenOutput(Exception):
    """What a command printed could not be written to stdout: ``error``, the ``OSError``
    that writing it raised. Not an ``OSError`` itself, which a handler could take for an
    error in the files it works on."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


class _MarkedStdout:
    """The stream stdout was, except that writing to it raises :class:`_UnwrittenOutput`
    where it fails (a full disk, ``> /dev/full``), a closed pipe aside: a print fails as
    soon as the output passes the buffer, or at once where stdout is unbuffered
    (``PYTHONUNBUFFERED``), and its bare ``OSError`` would read as the command's own."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        with _marking_failures():
            return self._stream.write(text)

    def writelines(self, lines: Iterable[str]) -> None:
        with _marking_failures():
            self._stream.writelines(lines)

    def flush(self) -> None:
        with _marking_failures():
            self._stream.flush()

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


@contextmanager
def _marking_failures() -> Iterator[None]:
    try:
        yield
    except BrokenPipeError:  # its reader went away: the code alone says so
        raise
    except OSError as exc:
        raise _UnwrittenOutput(exc) from exc


@contextmanager
def _stdout_failures_marked() -> Iterator[None]:
    """For the block, ``sys.stdout`` is a :class:`_MarkedStdout` of the stream it was."""
    stream = sys.stdout
    sys.stdout = cast(TextIO, _MarkedStdout(stream))
    try:
        yield
    finally:
        sys.stdout = stream


def _current_dir_removed() -> bool:
    """Whether the directory the command was started in was removed (by another shell,
    a build's clean step): every relative path, ``.`` included, then fails with a bare
    ``ENOENT`` that names no file."""
    try:
        os.getcwd()
    except FileNotFoundError:
        return True
    return False


class _SigtermInterrupts:
    """For the block, SIGTERM (``docker stop``, Kubernetes) interrupts the command as
    Ctrl-C does, so that a download keeps what arrived for the next run. Python's default
    would end the process at once, keeping nothing; as a container's PID 1, which the
    kernel sends no signal it has no handler for, it would not end it at all.

    Only where SIGTERM has its default action: a program that calls the command keeps its
    own handler, or SIGTERM ignored (a handler set in C, which Python could not put back,
    included). Only the main thread may set a handler: from another one, nothing changes."""

    received = False
    _taken = False

    def __enter__(self) -> None:
        in_main = threading.current_thread() is threading.main_thread()
        if in_main and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, self._interrupt)
            self._taken = True

    def __exit__(self, *exc_info: object) -> None:
        if self._taken:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)

    def _interrupt(self, signum: int, frame: FrameType | None) -> None:
        self.received = True
        raise KeyboardInterrupt


@contextmanager
def _file_names_as_bytes() -> Iterator[None]:
    """For the block, a path on stdout or stderr is written as the bytes that name it on
    disk: a name that is not valid in the file system's encoding (``b"\\xff"``, a Latin-1
    name under a UTF-8 locale) reaches Python as lone surrogates, which a strict stdout
    refuses to encode, so ``flashhub get`` could not print the directory it had filled,
    and stderr writes as the text ``\\udcff``. Python's own error handler for them
    (``surrogateescape``) writes the bytes back, as it does in the C locale; on stdout, a
    character the encoding cannot hold still fails (:func:`_unprintable_output`), on
    stderr it is still written backslash-escaped, so that an error can always be told."""
    with (
        _errors_handled(sys.stdout, "strict", "surrogateescape"),
        _errors_handled(sys.stderr, "backslashreplace", _BYTES_OR_BACKSLASHES),
    ):
        yield


@contextmanager
def _errors_handled(stream: TextIO, usual: str, errors: str) -> Iterator[None]:
    """For the block, ``stream`` encodes with the error handler ``errors`` where it has
    Python's ``usual`` one; after it, as the caller had it, for a program that runs a
    command in its process."""
    if not isinstance(stream, io.TextIOWrapper) or stream.errors != usual:
        yield
        return
    if errors == _BYTES_OR_BACKSLASHES:
        codecs.register_error(errors, _bytes_or_backslashes)
    stream.reconfigure(errors=errors)
    try:
        yield
    finally:
        stream.reconfigure(errors=usual)


_BYTES_OR_BACKSLASHES = "flashhub.surrogateescape-or-backslashreplace"


def _bytes_or_backslashes(exc: UnicodeError) -> tuple[str | bytes, int]:
    """The bytes that the lone surrogates ``exc`` failed on stand for; any other character
    the encoding cannot hold backslash-escaped."""
    try:
        return codecs.lookup_error("surrogateescape")(exc)
    except UnicodeError:
        return codecs.backslashreplace_errors(exc)


def _unprintable_output(exc: ValueError) -> TypeGuard[UnicodeEncodeError]:
    """Whether ``exc`` is stdout's encoding failing on what a command prints: a path or
    a name that an ASCII or Latin-1 stdout cannot hold (``PYTHONIOENCODING=ascii``)."""
    encoding = getattr(sys.stdout, "encoding", None)
    if not isinstance(exc, UnicodeEncodeError) or not encoding:
        return False
    import codecs

    try:
        return codecs.lookup(exc.encoding).name == codecs.lookup(encoding).name
    except LookupError:
        return False


def _print_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """Print a warning as the command's other messages are printed (``warning: ...``),
    without the library's file, line and category, which mean nothing to a command, and
    in the command's terms where the warning has them (``cli_message``)."""
    text = getattr(message, "cli_message", None) or str(message)
    print(f"warning: {escape_message(text)}", file=sys.stderr)


def _discard_stdout() -> None:
    """Point stdout at the null device, so that the output still buffered is not flushed
    into the closed pipe at exit (which prints "Exception ignored ... BrokenPipeError")."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file: nothing is flushed at exit
        return
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, fd)
    os.close(null)
