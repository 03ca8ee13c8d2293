"""What type checkers see of the import root: every module below it is a kernel, which the
finder provides at run time (``import flashhub.<org>.<pkg>.v<N>``), so none has a file to
read. A stub with a module ``__getattr__`` tells mypy and pyright that its submodules
exist and are not typed."""

from types import ModuleType

def __getattr__(name: str) -> ModuleType: ...
