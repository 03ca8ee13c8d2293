"""The ``sys.meta_path`` finder (PEP 451) behind ``import flashhub.<org>.<pkg>.v<N>``.

``find_spec`` runs under Python's global import lock, so it only parses the name and
looks in in-process tables; it never touches the network. The kernel is located (and
downloaded when cold) in :meth:`KernelLoader.create_module`, which runs under the
per-module lock only. The loader then fills in the spec's real location, and from there
on it is a plain :class:`~importlib.machinery.SourceFileLoader`: ``__file__``,
``__path__``, relative imports, ``importlib.resources``, ``inspect.getsource``,
tracebacks and bytecode caching all work as for an installed package. Submodules of a
kernel are found by the standard path finder through the kernel's ``__path__``."""

from __future__ import annotations

import _thread
import importlib._abc
import importlib._bootstrap
import importlib.machinery
import os
import sys

from ._models.names import BACKENDS, LOCAL_ORG, RepoInfo, cdn_name_candidates, parse_module_name

# What this module imports is paid by every process that installs the hook: no typing,
# no dataclasses, no importlib.abc or importlib.util (they import typing and
# importlib.resources), and nothing of the cache, which only a kernel import needs.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import ModuleType

    from ._models.kernel_dir import KernelDir
    from ._models.names import KernelModuleName

# The packages whose modules a forked child imports afresh (see forget_other_threads).
_OWN_PACKAGES: tuple[str, ...] = ("flashhub", "flashhub_kernels", "filelock", "requests", "urllib3")
_OWN_PACKAGES += ("idna", "certifi", "charset_normalizer")  # which requests imports


def _point_at(spec: importlib.machinery.ModuleSpec, kernel_dir: KernelDir) -> None:
    """Make ``spec`` describe the kernel package in ``kernel_dir``, as a spec made by
    ``importlib.util.spec_from_file_location`` for its ``__init__.py`` would."""
    spec.origin = str(kernel_dir.init_file)
    spec.has_location = True  # so __file__ and __cached__ are set from origin
    spec.submodule_search_locations = [str(kernel_dir.package_dir)]


# importlib._abc.Loader is importlib.abc.Loader, without importlib.abc's imports.
class _SyntheticPackageLoader(importlib._abc.Loader):
    """``flashhub.<org>`` and ``flashhub.<org>.<pkg>``: empty packages, no disk, no network."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        pass


class _RefusedLoader(_SyntheticPackageLoader):
    """A name below ``flashhub`` that names no kernel: its import raises the error saying
    why (see :mod:`._not_a_kernel`), made as the import runs (see ``find_spec``)."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        self.get_code(spec.name)

    def get_code(self, fullname: str) -> None:  # what runpy asks (python -m flashhub)
        from ._not_a_kernel import refusal

        raise refusal(fullname)


_REFUSED = _RefusedLoader()


class KernelLoader(importlib.machinery.SourceFileLoader):
    """Locates a kernel to its cache directory, then loads it as plain source files.

    ``twins``: other names of the kernel imported in this process that may load the same
    variant (see :func:`twin_names`); the module of the one that did is this name's too,
    decided under this name's import lock (a child forked meanwhile drops it), not the
    global one (see :func:`~flashhub_kernels._twin_names.twin_module`).
    """

    def __init__(
        self,
        finder: KernelFinder,
        fullname: str,
        known: KernelDir | None = None,
        twins: list[tuple[str, str]] | None = None,
    ) -> None:
        super().__init__(fullname, str(known.init_file) if known else "")
        self._finder, self._known, self._twins = finder, known, twins
        self._kernel_dir: KernelDir | None = None
        self._twin_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        if self._twins:
            from ._twin_names import twin_module

            module = twin_module(self._finder, spec.name, self._twins)
            if module is not None:
                self._twin_spec = module.__spec__
                return module
        self._use(spec)
        return None

    def exec_module(self, module: ModuleType) -> None:
        if self._twin_spec is not None:  # the import system set it to this name's spec
            module.__spec__ = self._twin_spec
            return
        kernel_dir = self._kernel_dir
        if kernel_dir is None:  # importlib.reload() calls exec_module without create_module
            spec = module.__spec__
            assert spec is not None
            kernel_dir = self._use(spec)
            module.__file__ = self.path
            module.__path__ = [str(kernel_dir.package_dir)]
            module.__cached__ = spec.cached  # type: ignore[attr-defined]
        if kernel_dir.requires == {}:  # its metadata.json asks nothing of the load
            self._execute(module, kernel_dir)
        else:
            from ._loading.kernel_deps import execute_kernel

            execute_kernel(
                kernel_dir,
                module.__name__,
                lambda: self._execute(module, kernel_dir),
                self._finder.pin,
            )
        self._finder.record_loaded(module, kernel_dir)

    def _execute(self, module: ModuleType, kernel_dir: KernelDir) -> None:
        """Run the kernel's code, once its native libraries are known not to conflict."""
        if kernel_dir.natives != ():  # a cache entry with no native library needs no check
            from ._native import register

            register(kernel_dir, module.__name__)
        try:
            if kernel_dir.package_dir.suffix != ".zip":
                return super().exec_module(module)
            from ._loading.zip_layout import exec_archive  # a "zip" build's archive is the package

            exec_archive(module, kernel_dir.package_dir)
        except Exception as exc:
            from ._loading.failure_note import add_failure_note

            add_failure_note(exc, module.__name__, kernel_dir)
            raise

    def _use(self, spec: importlib.machinery.ModuleSpec) -> KernelDir:
        """The kernel to import: the one located before while it may still be imported
        (its cache entry not removed by ``flashhub cache clear``, its signer trusted by the
        keys trusted now), else located afresh, downloaded when needed, with ``spec``
        pointed at its files."""
        known = self._known
        if known is not None and (known.info is None or _still_valid(known)):
            self._kernel_dir = known
            return known
        kernel_dir = self._kernel_dir = self._finder.locate(spec.name)
        self.path = str(kernel_dir.init_file)
        _point_at(spec, kernel_dir)
        return kernel_dir


class KernelFinder:
    """Maps ``flashhub.*`` names to kernels. One instance lives on ``sys.meta_path``."""

    def __init__(self) -> None:
        # threading.Lock, without importing threading (4 ms for the hook, the first time).
        self._lock = _thread.allocate_lock()
        self._kernel_dirs: dict[str, KernelDir] = {}  # module name -> where it was found
        self._pins: dict[str, RepoInfo] = {}  # module name -> the repo get_kernel asked for
        self._loaded: dict[str, tuple[ModuleType, KernelDir]] = {}  # module name -> its load
        self._found: set[str] = set()  # kernel module names find_spec answered: maybe loading

    # -- registration, called by the public API -----------------------------------------

    def pin(self, info: RepoInfo, backend: str | None) -> str:
        """The module name of ``info`` (of ``backend``'s variants when given), made to
        stand for ``info`` (not another spelling of its name): import it next."""
        module_name = info.module_name(backend)
        with self._lock:
            known = self._pins.get(module_name) or getattr(
                self._kernel_dirs.get(module_name), "info", None
            )
            if known is not None and known.repo_id != info.repo_id:
                raise ValueError(
                    f"{module_name} is already bound to {known.repo_id}; {info.repo_id} maps to "
                    "the same module name, so the two cannot be loaded in one process"
                )
            self._pins[module_name] = info
        return module_name

    def unpin(self, module_name: str, info: RepoInfo) -> None:
        """Undo :meth:`pin` if no kernel was found: another spelling may be published."""
        with self._lock:
            if module_name not in self._kernel_dirs and self._pins.get(module_name) == info:
                del self._pins[module_name]

    def add_kernel_dir(self, module_name: str, kernel_dir: KernelDir) -> None:
        """Make ``module_name`` load the kernel package ``kernel_dir`` (a local one, say)."""
        with self._lock:
            self._kernel_dirs[module_name] = kernel_dir

    def loaded(self) -> list[tuple[ModuleType, KernelDir]]:
        """The kernel modules this process imported, each with where it was found."""
        with self._lock:
            return list(self._loaded.values())

    # -- the import protocol --------------------------------------------------------------

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        # Under Python's global import lock: nothing is imported here (an import could wait
        # for another thread's import of that module, which waits for this lock).
        known = self._kernel_dirs.get(fullname)
        if known is not None:  # located before in this process, or a local kernel
            spec = importlib.machinery.ModuleSpec(
                fullname, KernelLoader(self, fullname, known), is_package=True
            )
            _point_at(spec, known)
            return spec
        parsed = parse_module_name(fullname)
        if parsed is None:  # a kernel's version misspelt, or a name no kernel has
            owner = parse_module_name(fullname.rpartition(".")[0])
            misspelt = fullname.count(".") == 3 and owner is not None and owner.org != LOCAL_ORG
            return importlib.machinery.ModuleSpec(fullname, _REFUSED) if misspelt else None
        if parsed.org == LOCAL_ORG and parsed.pkg is not None:  # another process's local kernel
            return importlib.machinery.ModuleSpec(fullname, _REFUSED)
        # `from flashhub import get_kernel` meant the API: its names are the package's own
        # (read from the package, which imports this module: not imported from it).
        api = sys.modules["flashhub_kernels"].__all__ if parsed.pkg is None else ()
        if parsed.org in api or (parsed.org, parsed.pkg) == ("__main__", None):
            return importlib.machinery.ModuleSpec(fullname, _REFUSED)
        if parsed.version is None:
            return importlib.machinery.ModuleSpec(
                fullname, _SyntheticPackageLoader(), is_package=True
            )
        others = twin_names(fullname, parsed.backend)
        twins = [twin for twin in others if twin[0] in self._found or twin[0] in sys.modules]
        self._found.add(fullname)
        loader = KernelLoader(self, fullname, twins=twins)
        return importlib.machinery.ModuleSpec(fullname, loader, is_package=True)

    def same_repo(self, fullname: str, other: str) -> bool:
        """Whether ``other`` loaded the repo ``get_kernel`` asked ``fullname`` for, if any."""
        with self._lock:
            wanted, loaded = self._pins.get(fullname), self._pins.get(other)
        return wanted is None or loaded is None or wanted.repo_id == loaded.repo_id

    def locate(self, fullname: str) -> KernelDir:
        """Find (download if needed) the kernel ``fullname`` names, for the loader: a repo
        that ``LOCAL_KERNELS`` maps is served from its local directory; else the cache's
        import table answers, when what decided its answer is as it was; else the cache
        is searched in full (and the answer recorded in the table)."""
        from . import _cache_imports as imports
        from ._constants import LOCAL_KERNELS_VAR

        parsed = parse_module_name(fullname)
        assert parsed is not None and parsed.version is not None
        pinned = self._pins.get(fullname)
        candidates = [pinned] if pinned else _candidates(parsed)
        kernel_dir, key = None, None
        if os.environ.get(LOCAL_KERNELS_VAR):  # only then local overrides are looked at
            from ._loading.local import local_override

            kernel_dir = local_override(candidates, parsed.backend)
        if kernel_dir is None and (key := imports.key_of(fullname, candidates, parsed.backend)):
            kernel_dir = imports.lookup(key)
        if kernel_dir is None:
            from ._cache.obtain import use_kernel

            kernel_dir = use_kernel(candidates, backend=parsed.backend, importing=fullname)
            if key is not None:
                from ._cache.table_writer import record

                record(key, kernel_dir)
        assert kernel_dir.info is not None
        with self._lock:
            self._kernel_dirs[fullname] = kernel_dir
            self._pins.setdefault(fullname, kernel_dir.info)  # the spelling that existed wins
        return kernel_dir

    def forget_other_threads(self) -> None:
        """In a child just forked: drop what threads gone with the fork were importing
        under ``flashhub``: a kernel being downloaded or run, and its submodules (its
        native extension, say); and the library's modules and those of the packages a
        first cold load imports (``filelock``, ``requests``, ...). The child would wait
        forever for their import locks; it imports them afresh (the download mutex
        waits for the parent's download)."""
        self._lock = _thread.allocate_lock()
        module_locks = getattr(importlib._bootstrap, "_module_locks", {})
        this_thread = _thread.get_ident()
        for name, lock in list(module_locks.items()):
            owner = getattr(lock(), "owner", None)  # a weak reference to the module's lock
            if name.partition(".")[0] in _OWN_PACKAGES and owner not in (None, this_thread):
                del module_locks[name]
                sys.modules.pop(name, None)  # half-made

    def record_loaded(self, module: ModuleType, kernel_dir: KernelDir) -> None:
        with self._lock:
            self._loaded[module.__name__] = (module, kernel_dir)


def twin_names(fullname: str, backend: str | None) -> list[tuple[str, str]]:
    """The other names of the kernel module ``fullname`` that may load the same variant,
    each with the backend it forces: ``v<N>`` for ``v<N>_<backend>``, and back."""
    if backend is not None:
        return [(fullname.rpartition("_")[0], backend)]
    return [(f"{fullname}_{forced}", forced) for forced in BACKENDS]


def _still_valid(kernel_dir: KernelDir) -> bool:
    """Whether a cache entry located earlier in this process may be imported again."""
    from ._config import get_config  # a re-import only: the first import never gets here

    assert kernel_dir.info is not None
    trusted = get_config().accepts_signer(kernel_dir.info.org, kernel_dir.signer)
    package = kernel_dir.package_dir  # a "zip" build's archive is its package
    return trusted and (package if package.suffix == ".zip" else kernel_dir.init_file).is_file()


def _candidates(parsed: KernelModuleName) -> list[RepoInfo]:
    assert parsed.pkg is not None and parsed.version is not None
    return [
        RepoInfo(f"{org}/{pkg}", parsed.version)
        for org in cdn_name_candidates(parsed.org)
        for pkg in cdn_name_candidates(parsed.pkg)
    ]


def _after_fork_in_child() -> None:
    for finder in sys.meta_path:
        if isinstance(finder, KernelFinder):
            finder.forget_other_threads()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_after_fork_in_child)


def install() -> KernelFinder:
    """Put the finder on ``sys.meta_path`` once; return the installed instance."""
    for finder in sys.meta_path:
        if isinstance(finder, KernelFinder):
            return finder
    finder = KernelFinder()
    sys.meta_path.append(finder)
    return finder
