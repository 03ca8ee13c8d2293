"""The exception hierarchy of flashhub-kernels.

Every error the library raises on purpose derives from :class:`FlashhubError` and carries a
``hint``: one sentence saying what to do next, part of the message, so it shows up in tracebacks
and logs. A hint that names Python arguments (``version=``) comes with a ``cli_hint`` saying the
same with the ``flashhub`` command's options (``--version N``), which the command prints.

Errors raised while importing a kernel (``import flashhub....`` or ``get_kernel``) are also
:class:`ImportError` subclasses, so code that guards an optional kernel with ``except
ImportError`` keeps working; all but :class:`LocalKernelNotFoundError`, a local directory
that does not exist, and the lock file's errors.

Malformed arguments (a bad repo id, ``version=0``) raise the built-in :class:`ValueError`
before any I/O, as Python code expects. A malformed setting (a ``FLASHHUB_*`` variable, a
project's ``[tool.flashhub]``) raises :class:`ConfigError`, both: it may come from an ``import``.
"""

from __future__ import annotations

import errno


class FlashhubError(Exception):
    """Base class of every error flashhub-kernels raises on purpose.

    Control characters in ``message`` and ``hint`` (names and answers from the CDN end
    up in them) are escaped, ``\\x1b`` style, so printing an error cannot drive the
    terminal; the newlines and tabs that lay a message out are kept.
    """

    def __init__(
        self, message: str, *, hint: str | None = None, cli_hint: str | None = None
    ) -> None:
        from ._utils.escaping import escape_message  # when an error is made: not on every load

        self.message = escape_message(message)
        self.hint = escape_message(hint) if hint is not None else None
        self.cli_hint = escape_message(cli_hint) if cli_hint is not None else None
        text = f"{self.message}\n  hint: {self.hint}" if self.hint else self.message
        super().__init__(text)

    def __reduce__(self) -> tuple[object, ...]:
        # Unpickled without __init__, whose keyword arguments the message does not hold:
        # an error raised in a worker process reaches its parent whole.
        _, args, state = (*super().__reduce__(), {})[:3]  # no state: no attribute was set
        # An error that is also an OSError is laid out as one: OSError's __new__ makes it
        # (the ValueError.__new__ that comes first in the MRO of one that is both refuses).
        new = OSError.__new__ if isinstance(self, OSError) else type(self).__new__
        return new, (type(self),), {**state, "args": args}


class ArgumentTypeError(FlashhubError, TypeError, ValueError):
    """An argument of the wrong type: a repo id that is no ``str``, a version that is no
    ``int``, a revision that is no ``str``. A ``TypeError``, as Hugging Face kernels
    raises, and a ``ValueError``, as the 0.1.2 release raised for a bad version."""


class KernelImportError(FlashhubError, ImportError):
    """A kernel could not be imported. Base of the errors a kernel import raises."""

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        cli_hint: str | None = None,
        name: str | None = None,
    ) -> None:
        FlashhubError.__init__(self, message, hint=hint, cli_hint=cli_hint)
        # ImportError keeps ``name``; set it by hand since its __init__ is bypassed.
        self.name = name
        self.path = None


class KernelNotFoundError(KernelImportError, ModuleNotFoundError):
    """The CDN has no such kernel or version (a ``ModuleNotFoundError``, as for any import)."""


class VersionNotFoundError(KernelNotFoundError, ValueError):
    """The repo is published, but not the version asked for. Also a ``ValueError``, as
    Hugging Face kernels raises for a version its repo does not have."""


class LocalKernelNotFoundError(FlashhubError, FileNotFoundError):
    """``LOCAL_KERNELS`` maps a repo to a directory that does not exist, or
    ``get_local_kernel`` was given one: a ``FileNotFoundError`` as in Hugging Face kernels
    and the 0.1.2 release, not an ``ImportError`` (no class is both), from imports too."""


class MetadataIsADirectoryError(FlashhubError, ValueError, IsADirectoryError):
    """``Metadata.read_from_file`` was given a directory, not a ``metadata.json`` file.
    Also a ``ValueError``, as Hugging Face kernels raises for it, and an
    ``IsADirectoryError``, as reading the directory raised before."""


class NoCompatibleVariantError(KernelImportError, ValueError, RuntimeError):
    """The kernel is published, but no build fits this system. Also a ``ValueError``, as
    the 0.1.2 release raised for it, and a ``RuntimeError``, as Hugging Face kernels
    raises for a build whose device archs lack this device."""


class BackendUnavailableError(KernelImportError, ValueError):
    """The builds of a backend this torch does not run were asked for (``get_kernel(...,
    backend="cuda")`` or ``import flashhub.<org>.<pkg>.v1_cuda`` with a CPU-only torch):
    only ``"cpu"`` can be forced on another backend's machine. Also a ``ValueError``, as
    Hugging Face kernels raises for it."""


class IntegrityError(KernelImportError, ValueError, RuntimeError):
    """Downloaded or cached bytes do not match the manifest, the manifest is unsafe, or a
    native library it lists is cut short (loading it would crash the process). Also a
    ``ValueError``, as the 0.1.2 release raised for a digest or a manifest that failed,
    and a ``RuntimeError``, as Hugging Face kernels raises for files that fail their
    digest."""


class ManifestError(IntegrityError):
    """A ``metadata.json``, ``variants.json`` or ``versions.json`` is malformed or hostile."""


class TransportError(KernelImportError):
    """The CDN could not be reached or answered with an error, after all retries."""


class CacheError(KernelImportError):
    """The cache could not be written (the disk is full, the directory is not writable,
    or the entry to replace is in use by a running process) or read (another user's,
    left private).

    ``read_only`` is true when the cache refused a write because this process may not
    write there at all (permissions, or a read-only file system: an image's cache, run
    as another user), not for want of room.
    """

    read_only = False

    @classmethod
    def cannot_write(cls, exc: OSError, path: object = None) -> CacheError:
        """The error for an ``OSError`` met while creating, writing or renaming in the cache."""
        where = path if path is not None else exc.filename
        error = cls(
            f"cannot write {_shown(where) or 'to the cache'}: {exc.strerror or exc}",
            hint=_write_hint(exc, "FLASHHUB_CACHE_DIR"),
        )
        error.read_only = exc.errno in _READ_ONLY
        return error


_READ_ONLY = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
_NO_ROOM = "free disk space, or point {where} at a disk with room"
_NOT_ALLOWED = (
    "point {where} at a directory this user can write, or fix that directory's permissions"
)
_WRITE_HINTS: dict[int | None, str] = {
    errno.ENOSPC: _NO_ROOM,
    errno.EDQUOT: _NO_ROOM,
    errno.EACCES: _NOT_ALLOWED,
    errno.EPERM: _NOT_ALLOWED,
    errno.EROFS: "the file system is read-only: point {where} at a writable directory",
    errno.EFBIG: "a file is larger than this process (`ulimit -f`) or the file system may "
    "write: raise the limit, or point {where} at another file system",
    errno.EMFILE: "this process has too many files open: raise `ulimit -n`",
    errno.ENFILE: "the system has too many files open: close some programs, or try again",
    errno.ENOTDIR: "a part of the path is a file, not a directory: point {where} at a directory",
}


def _shown(path: object) -> str:
    """A path for a message: its control characters escaped, so that a newline in a
    directory's name cannot start a line of its own (a forged ``hint:``)."""
    from ._utils.escaping import escape_controls

    return escape_controls(str(path)) if path else ""


def _write_hint(exc: OSError, where: str) -> str:
    """What to do about ``exc``, met writing under the directory the setting ``where``
    names, by its cause: no room, no permission, a read-only file system."""
    hint = _WRITE_HINTS.get(
        exc.errno, "free disk space or fix the permissions, or point {where} elsewhere"
    )
    return hint.format(where=where)


class OfflineError(KernelImportError, ValueError):
    """The kernel is not in the cache and the network is off (``FLASHHUB_OFFLINE=1``).

    Also a ``ValueError``: Hugging Face kernels raises one when a version the cache lacks
    is asked for with ``HF_HUB_OFFLINE=1``, so code that catches it works unchanged.
    """


class NativeLibraryConflictError(KernelImportError):
    """A kernel's native library would register an op namespace that a library another
    kernel loaded from another path registered already: another build that kept its
    namespace. torch aborts the process when that library is loaded, so the loader
    refuses it instead: before the kernel's code runs when the other library is loaded
    already (an ``_ops.py`` that skips loading a registered namespace would run the other
    build's ops), else at the load. (The same build at a second path runs on the copy
    loaded first.)
    """


class ConfigError(KernelImportError, ValueError):
    """A setting cannot be used as given (a ``FLASHHUB_*`` variable, a proxy variable,
    :func:`configure`, or ``[tool.flashhub]`` in ``pyproject.toml``): a bad port or a
    password that is not percent-encoded in ``FLASHHUB_CDN_URL``, trusted keys that name no
    key, a file of trusted keys that others may write.

    Also a ``ValueError``, which is what a malformed setting raised before, and an
    ``ImportError``: the settings are read by every load, ``import`` statements too.
    """


class LockfileError(FlashhubError, ValueError):
    """A ``flashhub.lock`` is missing, malformed, or does not match what is cached. Also a
    ``ValueError``, as Hugging Face kernels raises when no lock is found or it does not
    lock the kernel."""


class LockfileNotFoundError(LockfileError, FileNotFoundError):
    """No ``flashhub.lock`` at the path given, nor where one is looked for. Also a
    ``FileNotFoundError``, as Hugging Face kernels raises for a lock file that does not
    exist (and a ``ValueError``, as it raises when a package ships none)."""


class LockedVariantNotCachedError(LockfileError, FileNotFoundError):
    """A locked variant is not in the cache as the lock pins it: it may not be fetched
    (``load_kernel``, or ``FLASHHUB_OFFLINE=1``), or fetching it did not put it there. Also
    a ``FileNotFoundError``, as Hugging Face kernels raises for a locked kernel its cache
    lacks."""


class PublishError(FlashhubError):
    """A kernel build cannot be published: it is malformed, its version already exists,
    or the output (a CDN tree, a key file) cannot be written."""

    @classmethod
    def cannot_write(cls, exc: OSError, path: object) -> PublishError:
        """The error for an ``OSError`` met while writing ``path``, a file or directory of
        the output; its hints name the output path (``--out`` in the command)."""
        return cls(
            f"cannot write {_shown(path)}: {exc.strerror or exc}",
            hint=_write_hint(exc, "the output path"),
            cli_hint=_write_hint(exc, "--out"),
        )


class MirrorError(PublishError):
    """A kernel build cannot be mirrored from the Hugging Face Hub: ``huggingface_hub``
    is missing, the Hub cannot be reached or has no such build, a file does not match
    the digest its variant's ``metadata.json`` lists, or the files cannot be staged in a
    temporary directory. Nothing is published then.
    """

    @classmethod
    def cannot_stage(cls, exc: OSError) -> MirrorError:
        """The error for an ``OSError`` met writing the files downloaded into ``TMPDIR``."""
        import tempfile

        where = _shown(exc.filename or f"the files downloaded into {tempfile.gettempdir()}")
        return cls(
            f"cannot write {where}: {exc.strerror or exc}; nothing was published",
            hint=_write_hint(exc, "TMPDIR"),
        )


class KernelLayerError(FlashhubError, ValueError):
    """A kernel layer cannot be used: nothing is mapped for a layer that needs a kernel
    (``use_fallback=False``), or the mapped kernel lacks the layer.

    Also a ``ValueError``, which is what the earlier loader raised in these cases.
    """


class LayerValidationError(FlashhubError, TypeError):
    """A kernel layer does not fit the layer whose ``forward`` it would replace.

    ``rule`` names the broken rule; the message names it too, with the class.
    """

    def __init__(self, message: str, *, rule: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.rule = rule


class LockMismatchError(LockfileError, IntegrityError):
    """The CDN serves other bytes for a locked kernel variant than its lock file pins.

    Also an :class:`IntegrityError` (and so an ``ImportError``): the kernel is not loaded.
    """

    def __init__(self, message: str) -> None:
        super().__init__(
            message,
            hint="a published version must not change: report it to the publisher, or "
            "run `flashhub lock` again if you trust the new content",
        )


class NewerVersionWarning(UserWarning):
    """A kernel was loaded at a version older than the newest its ``versions.json`` lists.

    Issued once per repo and process, from a load that downloaded; never offline nor from
    the cache. ``FLASHHUB_NO_VERSION_CHECK=1`` turns the check off, and
    ``warnings.filterwarnings("ignore", category=NewerVersionWarning)`` hides the warning.
    It never fails the load: where the filters make it an error (``python -W error``), it
    is logged on the ``flashhub_kernels`` logger instead.

    ``cli_message`` says the same in the command line's terms (``--version N``).
    """

    def __init__(self, message: str, cli_message: str | None = None) -> None:
        super().__init__(message)
        self.cli_message = cli_message or message


class LockedContentChangedWarning(UserWarning):
    """A re-lock pinned other content for a version the lock already pinned.

    A published version must not change, so this is either a publisher's mistake or a
    CDN serving bytes it should not. Re-locking is how a user accepts new content after a
    :class:`LockMismatchError`, so the lock is written all the same; the warning names
    each variant whose content changed, for the user to check before committing the lock.
    """


class SharedNativeLibraryWarning(UserWarning):
    """:func:`~flashhub_kernels._publish.publish` was given a build whose native library
    is that of another published version of the kernel (the same bytes, or the same file
    name and so, by the naming rule, the same op namespace). Loaded side by side in one
    process, two versions of the same bytes run on one copy of it; another build of the
    namespace cannot be loaded beside the first: it raises
    :class:`NativeLibraryConflictError`.
    """


class UndeclaredDependencyWarning(UserWarning):
    """:func:`~flashhub_kernels._publish.publish` was given a build whose Python files
    import a package that is neither in the standard library, nor torch, nor the kernel
    itself, and that the variant's ``metadata.json`` does not list in ``python-depends``:
    a machine without that package fails to import the kernel. The version is published
    all the same.
    """


class FileRelativePathWarning(UserWarning):
    """:func:`~flashhub_kernels._publish.publish` was asked for the zip layout and a Python
    file of the build makes a path from ``__file__``. Loaded from the archive, the kernel
    finds no file through that path: reading its data so raises ``NotADirectoryError``,
    or quietly finds nothing. The version is published all the same.
    """


class SourcelessModuleWarning(UserWarning):
    """:func:`~flashhub_kernels._publish.publish` was given a build holding a ``.pyc``
    file outside ``__pycache__`` with no ``.py`` beside it. Loaded from the build
    directory, Python imports the compiled module; publish ships Python sources only, so
    the published kernel lacks the module and its import fails. The version is published
    all the same.
    """


class SignatureError(IntegrityError):
    """A signed document cannot be trusted: it is unsigned while a trusted key covers its
    org, no signature by a trusted key verifies, or its ``.sig`` file is malformed; or
    signatures cannot be checked at all (the ``cryptography`` package is missing).

    Also an :class:`IntegrityError` (and so an ``ImportError``): the kernel is not loaded.
    """


class RollbackError(IntegrityError):
    """The CDN offers an older version of a kernel than one already seen: its
    ``versions.json`` ends below the newest version this machine has seen listed, or
    ``flashhub lock`` would move a pin down to a lower version that the declared range
    does not ask for. An edge replaying an old (validly signed) ``versions.json`` does this.

    Also an :class:`IntegrityError` (and so an ``ImportError``).
    """


class KernelWithoutBackwardWarning(UserWarning):
    """A kernel layer that declares no backward (``has_backward = False``) runs in a
    module that is training with gradients enabled: ``kernelize`` chose it for
    ``Mode.INFERENCE`` and the model was trained afterwards.

    Issued once per kernel layer class and process; the kernel still runs. Kernelize
    again with ``Mode.TRAINING`` before training. Where the warning filters make it an
    error (``python -W error``), it is logged on the ``flashhub_kernels`` logger instead:
    it never fails the forward.
    """


class MissingPythonDependencyError(KernelImportError):
    """A Python package the kernel's ``metadata.json`` lists in ``python-depends`` is not
    installed. Raised before any of the kernel's code runs; the message names the package
    and the ``pip install`` line. ``package`` is the package to install.
    """

    def __init__(self, message: str, *, package: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.package = package


class ClientTooOldError(KernelImportError, RuntimeError):
    """The kernel needs a newer client than this one: its ``metadata.json`` asks for a
    newer flashhub-kernels (``flashhub-kernels-minver``) or a newer Hugging Face kernels
    API level (``kernels-minver``) than this flashhub-kernels implements. Upgrade
    flashhub-kernels. Also a ``RuntimeError``, as Hugging Face kernels raises for it.
    """


class KernelDependencyError(KernelImportError, ValueError):
    """The kernels a kernel depends on (``kernel-depends``) cannot be loaded as declared:
    they depend on each other in a cycle, or in a chain more than 64 levels deep, which
    the message spells out. Also a ``ValueError``, as Hugging Face kernels raises for a
    cycle."""


class KernelDependencyLookupError(FlashhubError, RuntimeError):
    """:func:`~flashhub_kernels.get_kernel_dep` was called outside the import of a kernel,
    or for a kernel that the importing kernel's ``kernel-depends`` does not list.

    Also a ``RuntimeError``, which is what Hugging Face kernels raises in these cases.
    """


class DirtyBuildWarning(UserWarning):
    """A kernel variant was built from a git tree with uncommitted changes (its
    ``provenance`` says ``"dirty": true``): its recorded commit does not fully identify
    the sources, so the build may not be reproducible. The kernel loads all the same.
    """
